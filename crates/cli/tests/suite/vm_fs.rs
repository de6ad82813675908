//! The workspace of a VM sandbox over virtio-fs (a `virtiofsd` on the
//! host) and over 9p (the VMM itself), attacked the same way: a link the
//! guest follows never leads a write to a host file, virtiofsd never
//! outlives its sandbox, and a virtiofsd taken over (played by a stand-in
//! started exactly as warden starts the real one) reads, writes and
//! reaches nothing of the host outside the workspace.
//!
//! Booting tests are `#[ignore]`d (slow under emulation) and run with
//! `-- --ignored`, as in `vm.rs`; each skips, saying why, when no VM can
//! boot here or the host has no virtiofsd.

use crate::common::vm::*;
use crate::common::*;
use std::net::TcpListener;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// The virtiofsd warden would use, or `None` (the reason printed).
pub(super) fn virtiofsd() -> Option<PathBuf> {
    let found = [
        "/usr/libexec/virtiofsd",
        "/usr/lib/virtiofsd",
        "/usr/lib/qemu/virtiofsd",
    ]
    .iter()
    .map(PathBuf::from)
    .find(|p| p.is_file());
    if found.is_none() {
        skip("no virtiofsd on this host (install virtiofsd or QEMU's)");
    }
    found
}

/// A file removed on drop.
struct Removed(PathBuf);

impl Drop for Removed {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The link attack over `fs` (`9p` or `virtiofs`): links planted in the
/// workspace by the host and links the guest makes, to a host file
/// outside it, absolute and relative, written through, truncated and
/// chmod-ed through by the guest; the host file must stay as it was and
/// the guest's links must be links on the host.
fn link_attack(fs: &str) {
    let dir = TempDir::new(&format!("vm-links-{fs}"));
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let target = dir.path().join("host-file");
    let original = unique("host-file-content");
    std::fs::write(&target, &original).unwrap();
    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o644)).unwrap();
    std::os::unix::fs::symlink(&target, ws.join("planted-abs")).unwrap();
    std::os::unix::fs::symlink("../host-file", ws.join("planted-rel")).unwrap();
    std::fs::create_dir(ws.join("sub")).unwrap();
    std::os::unix::fs::symlink(dir.path(), ws.join("sub/planted-dir")).unwrap();
    let t = target.display();
    let script = format!(
        "cd /workspace; \
         for l in planted-abs planted-rel sub/planted-dir/host-file; do \
           echo pwned > $l; echo pwned >> $l; truncate -s 0 $l; chmod 777 $l; done 2>/dev/null; \
         ln -s {t} made-abs; ln -s ../host-file made-rel; \
         for l in made-abs made-rel; do echo pwned > $l; chmod 777 $l; done 2>/dev/null; \
         mount | grep -q 'on /workspace type {fs} ' && echo MOUNTED-OVER-{fs}; \
         echo done"
    );
    let o = vm_sh(
        dir.path(),
        &["--no-tty", "-w", ws.to_str().unwrap()],
        &script,
        &[("WARDEN_VM_FS", fs)],
    );
    let out = stdout(&o);
    assert!(out.contains("done"), "{out}\n{}", stderr(&o));
    // The attack ran over the file system it names, never another one
    // (a root-owned workspace once went over 9p whatever was asked).
    assert!(
        out.contains(&format!("MOUNTED-OVER-{fs}")),
        "the guest's workspace is not {fs}: {out}\n{}",
        stderr(&o)
    );
    assert_eq!(
        std::fs::read_to_string(&target).unwrap(),
        original,
        "over {fs}, a write through a link in the workspace reached a host file outside it"
    );
    assert_eq!(
        std::fs::metadata(&target).unwrap().mode() & 0o777,
        0o644,
        "over {fs}, a chmod through a link reached a host file"
    );
    for made in ["made-abs", "made-rel"] {
        let m = std::fs::symlink_metadata(ws.join(made)).unwrap();
        assert!(
            m.file_type().is_symlink(),
            "over {fs}, the guest's link {made} is not a link on the host"
        );
    }
}

#[test]
#[ignore = "boots a VM (slow under emulation): run with -- --ignored"]
fn a_link_in_the_workspace_never_leads_a_guest_write_to_a_host_file_over_virtiofs() {
    if guest_release().is_none() || virtiofsd().is_none() {
        return;
    }
    link_attack("virtiofs");
}

#[test]
#[ignore = "boots a VM (slow under emulation): run with -- --ignored"]
fn a_link_in_the_workspace_never_leads_a_guest_write_to_a_host_file_over_9p() {
    if guest_release().is_none() {
        return;
    }
    link_attack("9p");
}

#[test]
#[ignore = "boots a VM (slow under emulation): run with -- --ignored"]
fn virtiofsd_is_gone_after_stop_and_after_its_supervisor_is_killed() {
    if guest_release().is_none() || virtiofsd().is_none() {
        return;
    }
    let state = TempDir::new("vm-fsd-life");
    let env = [("WARDEN_VM_FS", "virtiofs")];
    let layer = state.path().join("warden/sandboxes/fsd/upper");
    let layer = layer.to_str().unwrap().to_string();
    let fsd_pids = || -> Vec<i32> {
        pids_with_marker(&layer)
            .into_iter()
            .filter(|p| {
                std::fs::read(format!("/proc/{p}/cmdline"))
                    .map(|c| String::from_utf8_lossy(&c).contains("virtiofsd"))
                    .unwrap_or(false)
            })
            .collect()
    };
    ok(&vm_warden_env(
        state.path(),
        &["create", "--isolation", "vm", "fsd"],
        None,
        &env,
    ));
    let _stop = VmStopper(state.path(), "fsd");
    for how in ["stop", "SIGKILL of the supervisor"] {
        ok(&vm_warden_env(state.path(), &["start", "fsd"], None, &env));
        let o = vm_warden(
            state.path(),
            &["exec", "fsd", "--", "sh", "-c", "mount | grep -c virtiofs"],
            None,
        );
        assert_eq!(stdout(&o).trim(), "1", "{}", stderr(&o));
        let running = fsd_pids();
        assert_eq!(running.len(), 1, "no single virtiofsd serves the layer");
        // Its chroot is the layer held to the disk budget: `upper/` of
        // the budget's tmpfs (through the view that swaps root's IDs with
        // nobody's), never the host's `/` nor the saved layer on the
        // host's disk.
        let root_path = format!("/proc/{}/root/", running[0]);
        let root = std::fs::metadata(&root_path).unwrap();
        let served = std::fs::metadata(&layer).unwrap();
        let host = std::fs::metadata("/").unwrap();
        assert_ne!(
            root.dev(),
            served.dev(),
            "virtiofsd serves the saved layer on the host's disk"
        );
        assert_ne!(root.dev(), host.dev(), "virtiofsd's root is the host's");
        assert_eq!(
            fs_magic(&root_path),
            Some(libc::TMPFS_MAGIC),
            "virtiofsd's root is not the budget's tmpfs"
        );
        if how == "stop" {
            ok(&vm_warden(
                state.path(),
                &["stop", "--time", "5s", "fsd"],
                None,
            ));
        } else {
            // SAFETY: kill with a PID and a signal number.
            unsafe {
                libc::kill(supervisor_pid(state.path(), "fsd"), libc::SIGKILL);
            }
        }
        wait_until(
            &format!("virtiofsd to end after {how}"),
            Duration::from_secs(30),
            || fsd_pids().is_empty() && running.iter().all(|p| !alive(*p)),
        );
    }
}

#[test]
#[ignore = "boots a VM (slow under emulation): run with -- --ignored"]
fn a_rootless_guests_files_over_virtiofs_are_its_users_on_the_host() {
    let Some(release) = guest_release() else {
        return;
    };
    if virtiofsd().is_none() {
        return;
    }
    let Some(who) = Unprivileged::get() else {
        skip("cannot get an unprivileged user to run warden as");
        return;
    };
    let dir = TempDir::new("vm-fsd-rootless");
    let vm = dir.path().join("vm");
    let kernel = vm.join("kernel");
    std::fs::create_dir_all(kernel.join("boot")).unwrap();
    let from = vm_dir().join("kernel");
    std::fs::copy(
        from.join(format!("boot/vmlinuz-{release}")),
        kernel.join(format!("boot/vmlinuz-{release}")),
    )
    .unwrap();
    let modules = Path::new("lib/modules").join(&release).join("kernel");
    for m in [
        "drivers/virtio/virtio_ring.ko",
        "drivers/virtio/virtio.ko",
        "drivers/virtio/virtio_mmio.ko",
        "drivers/char/virtio_console.ko",
        "net/9p/9pnet.ko",
        "net/9p/9pnet_virtio.ko",
        "fs/netfs/netfs.ko",
        "fs/fscache/fscache.ko",
        "fs/9p/9p.ko",
        "fs/fuse/fuse.ko",
        "fs/fuse/virtiofs.ko",
    ] {
        let src = from.join(&modules).join(m);
        if src.exists() {
            let dst = kernel.join(&modules).join(m);
            std::fs::create_dir_all(dst.parent().unwrap()).unwrap();
            std::fs::copy(&src, &dst).unwrap();
        }
    }
    let init = who.bin.parent().unwrap().join("warden-guest-init");
    std::fs::copy(env!("CARGO_BIN_EXE_warden-guest-init"), &init).unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let _ = Command::new("chown")
        .args(["-R", &format!("{}:{}", who.uid, who.gid)])
        .arg(dir.path())
        .status();
    let o = who
        .command(who.bin.to_str().unwrap())
        .args(["run", "--isolation", "vm", "--no-tty", "-w"])
        .arg(&ws)
        .args([
            "--",
            "sh",
            "-c",
            "mount | grep -q 'workspace type virtiofs' && echo VIRTIOFS; mkdir /workspace/d && echo x > /workspace/d/f && echo written",
        ])
        .env("WARDEN_VM_FS", "virtiofs")
        .env("WARDEN_VM_DIR", &vm)
        .env("WARDEN_STATE_DIR", dir.path().join("state"))
        .output()
        .unwrap();
    let out = stdout(&o);
    let err = stderr(&o);
    if err.contains("virtiofsd") && err.contains("setgroups") {
        skip("this user has supplementary groups, which the C virtiofsd insists on dropping and a rootless user namespace cannot: warden falls back to 9p then");
        return;
    }
    assert!(out.contains("VIRTIOFS"), "{out}\n{err}");
    assert!(out.contains("written"), "{out}\n{err}");
    for p in [ws.join("d"), ws.join("d/f")] {
        let m = std::fs::metadata(&p).unwrap();
        assert_eq!(
            (m.uid(), m.gid()),
            (who.uid, who.gid),
            "{} is not the user's",
            p.display()
        );
    }
}

/// The stand-in virtiofsd: finds the share among the arguments, then
/// attacks and reports there, and stays up a while (as a serving one
/// does).
fn escaped_fsd(at: &Path, planted: &Path, written: &Path, tcp: u16) {
    let script = format!(
        r#"#!/bin/bash
for a in "$@"; do case "$a" in source=*) ws="${{a#source=}}";; esac; done
r="$ws/fsd-report"
echo "ran as $(id -u):$(id -g) $(grep CapEff /proc/self/status)" > "$r"
echo "read: $(cat '{planted}' 2>&1)" >> "$r"
echo "write: $( (echo pwned > '{written}') 2>&1 && echo done)" >> "$r"
echo "tcp: $( (exec 3<>/dev/tcp/127.0.0.1/{tcp} && echo escaped-tcp >&3) 2>&1 && echo sent)" >> "$r"
echo "proc: $(cat /proc/1/environ 2>&1 | head -c 100)" >> "$r"
sleep 5
"#,
        planted = planted.display(),
        written = written.display(),
    );
    std::fs::write(at, script).unwrap();
    std::fs::set_permissions(at, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// An escaped virtiofsd serving a workspace owned by `owner` (as root;
/// `None`: root's own): everything it tried outside the workspace failed.
/// Root's and a system account's workspace it serves as nobody through an
/// idmapped view, an ordinary account's as that account.
fn escaped_fsd_contained(tag: &str, owner: Option<(u32, u32)>) {
    let dir = TempDir::new(tag);
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    // Root's own file in root's home when the workspace is root's (the
    // hardest case: virtiofsd then holds its capabilities over root's
    // files), else the owner's own file beside the workspace.
    let secret = unique("fsd-planted-secret");
    let (planted, written) = match owner {
        None => (
            Path::new("/root").join(unique("warden-fsd-planted")),
            Path::new("/root").join(unique("warden-fsd-written")),
        ),
        Some(_) => (dir.path().join("private"), dir.path().join("written")),
    };
    std::fs::write(&planted, &secret).unwrap();
    std::fs::set_permissions(&planted, std::fs::Permissions::from_mode(0o600)).unwrap();
    let _p = Removed(planted.clone());
    let _w = Removed(written.clone());
    if let Some((uid, gid)) = owner {
        for p in [dir.path(), ws.as_path(), planted.as_path()] {
            std::os::unix::fs::chown(p, Some(uid), Some(gid)).unwrap();
        }
    }
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let tcp = listener.local_addr().unwrap().port();
    let fsd = dir.path().join("escaped-virtiofsd");
    escaped_fsd(&fsd, &planted, &written, tcp);
    let vmm = dir.path().join("idle-qemu");
    idle_vmm(&vmm, 2);
    let o = Command::new(warden_bin())
        .args(["run", "--isolation", "vm", "--no-tty", "-w"])
        .arg(&ws)
        .args(["--", "true"])
        .env("WARDEN_VMM", &vmm)
        .env("WARDEN_VIRTIOFSD", &fsd)
        .env("WARDEN_VM_FS", "virtiofs")
        .env("WARDEN_VM_ACCEL", "tcg")
        .env("WARDEN_VM_DIR", vm_dir())
        .env("WARDEN_STATE_DIR", dir.path().join("state"))
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let out = format!("{}\n{}", stdout(&o), stderr(&o));
    assert_ne!(code(&o), 0, "a stand-in VMM booted a guest? {out}");
    let report = std::fs::read_to_string(ws.join("fsd-report")).unwrap_or_default();
    eprintln!("the escaped virtiofsd's report:\n{report}");
    assert!(
        report.starts_with("ran as"),
        "the stand-in virtiofsd did not run or could not write the workspace: {out}"
    );
    let owner_ids = owner.unwrap_or((0, 0));
    let (uid, gid) = warden_jail::identity::sandbox_ids(Some(owner_ids));
    assert!(
        report.starts_with(&format!("ran as {uid}:{gid}")),
        "virtiofsd is not {uid}:{gid}: {report}"
    );
    // What it wrote in the workspace is the owner's on disk (through the
    // view where it is not the owner itself).
    let m = std::fs::metadata(ws.join("fsd-report")).unwrap();
    assert_eq!((m.uid(), m.gid()), owner_ids, "{report}");
    assert!(
        !report.contains(&secret),
        "an escaped virtiofsd read a host file outside the workspace:\n{report}"
    );
    assert!(
        !written.exists(),
        "an escaped virtiofsd wrote {} outside the workspace:\n{report}",
        written.display()
    );
    assert!(
        listener.accept().is_err(),
        "an escaped virtiofsd reached a listener on the host's loopback:\n{report}"
    );
    assert!(!report.contains("sent"), "{report}");
}

#[test]
fn an_escaped_virtiofsd_serving_roots_workspace_reads_and_writes_nothing_of_root() {
    if guest_release().is_none() {
        return;
    }
    if !is_root() {
        skip("needs root: this is the virtiofsd of a sandbox started by root");
        return;
    }
    escaped_fsd_contained("fsd-escape-root", None);
}

#[test]
fn an_escaped_virtiofsd_serving_a_system_accounts_workspace_reads_nothing_of_that_account_beside_it(
) {
    if guest_release().is_none() {
        return;
    }
    if !is_root() {
        skip("needs root: the workspace is another account's");
        return;
    }
    let Some(who) = Unprivileged::get() else {
        skip("cannot get an unprivileged user to own the workspace");
        return;
    };
    if warden_jail::identity::is_ordinary_uid(who.uid) {
        skip("the test account is an ordinary one here: the next test's case");
        return;
    }
    escaped_fsd_contained("fsd-escape-system", Some((who.uid, who.gid)));
}

#[test]
fn an_escaped_virtiofsd_serving_an_ordinary_users_workspace_reads_nothing_of_that_user_beside_it() {
    if guest_release().is_none() {
        return;
    }
    if !is_root() {
        skip("needs root: the workspace is another user's");
        return;
    }
    // An ordinary account's IDs (no account needs to exist for them): its
    // virtiofsd runs as that user, without a view.
    let (u, g) = warden_jail::identity::first_ordinary();
    escaped_fsd_contained("fsd-escape-user", Some((u + 3243, g + 3243)));
}

/// The attacks of an escaped helper on the share it serves (its first
/// argument, a directory path ending in `/`), in Python (ctypes for
/// `openat2`), each line its name and `ok` or the errno's name: a
/// host-effective file capability (a v3 `security.capability` whose root
/// ID is the helper's own user: through the view, the host's root), any
/// other extended attribute, `openat2(O_CREAT, 04755)`, group and other
/// write on root's directory and file, and a root-only block device node.
/// Only double quotes: it is passed to `python3 -c '...'`.
const ESCAPED_HELPER_PY: &str = r#"
import ctypes, errno, os, struct, sys
v = sys.argv[1]
def attempt(name, f):
    try:
        f()
        print(name, "ok")
    except OSError as e:
        print(name, errno.errorcode.get(e.errno, e.errno))
caps = (1 << 2) | (1 << 7)
v3 = struct.pack("<IIIIII", 0x03000000 | 1, caps, 0, 0, 0, 65534)
attempt("create", lambda: open(v + "capbin", "wb").close())
attempt("setxattr-capability", lambda: os.setxattr(v + "capbin", "security.capability", v3))
def fset():
    fd = os.open(v + "capbin", os.O_RDONLY)
    try:
        os.setxattr(fd, "security.capability", v3)
    finally:
        os.close(fd)
attempt("fsetxattr-capability", fset)
attempt("setxattr-user", lambda: os.setxattr(v + "capbin", "user.x", b"1"))
libc = ctypes.CDLL(None, use_errno=True)
how = struct.pack("<QQQ", os.O_CREAT | os.O_WRONLY, 0o4755, 0)
def openat2():
    r = libc.syscall(437, -100, (v + "o2").encode(), how, len(how))
    if r < 0:
        raise OSError(ctypes.get_errno(), "openat2")
attempt("openat2-setuid", openat2)
attempt("chmod-dir-0777", lambda: os.chmod(v, 0o777))
attempt("chmod-file-0666", lambda: os.chmod(v + "data", 0o666))
def disk():
    fd = os.open(v + "disknode", os.O_RDWR)
    try:
        print("disk-read", os.read(fd, 24))
    finally:
        os.close(fd)
attempt("open-device", disk)
print("DONE")
"#;

/// A block device node of root's (0600) at `node`, backed by a loop device
/// on a file of the test's own holding `secret`; removed (node and loop
/// device) on drop. `None` (the reason printed) where the host cannot
/// make one.
struct LoopNode {
    node: PathBuf,
    device: String,
}

impl LoopNode {
    fn make(backing: &Path, node: &Path, secret: &str) -> Option<LoopNode> {
        let mut content = secret.as_bytes().to_vec();
        content.resize(1024 * 1024, 0);
        std::fs::write(backing, content).unwrap();
        let o = Command::new("losetup")
            .args(["-f", "--show"])
            .arg(backing)
            .output()
            .ok()?;
        let device = String::from_utf8_lossy(&o.stdout).trim().to_string();
        if !o.status.success() || device.is_empty() {
            skip(&format!(
                "cannot set up a loop device here: {}",
                String::from_utf8_lossy(&o.stderr)
            ));
            return None;
        }
        let rdev = std::fs::metadata(&device).unwrap().rdev();
        let made = Command::new("mknod")
            .arg(node)
            .arg("b")
            .arg(nix_major(rdev).to_string())
            .arg(nix_minor(rdev).to_string())
            .status()
            .is_ok_and(|s| s.success());
        let lo = LoopNode {
            node: node.to_path_buf(),
            device,
        };
        if !made {
            skip("cannot make a device node here");
            return None;
        }
        std::fs::set_permissions(node, std::fs::Permissions::from_mode(0o600)).unwrap();
        Some(lo)
    }
}

impl Drop for LoopNode {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.node);
        let _ = Command::new("losetup").args(["-d", &self.device]).status();
    }
}

fn nix_major(rdev: u64) -> u64 {
    ((rdev >> 32) & 0xffff_f000) | ((rdev >> 8) & 0xfff)
}

fn nix_minor(rdev: u64) -> u64 {
    ((rdev >> 12) & 0xffff_ff00) | (rdev & 0xff)
}

/// A stand-in helper (`WARDEN_VIRTIOFSD` or `WARDEN_VMM`) that finds the
/// workspace it is handed (virtiofsd's `source=`, the VMM's 9p export of
/// the workspace, `id=ws`), runs [`ESCAPED_HELPER_PY`] there, and leaves
/// its report in it.
fn escaped_helper(at: &Path) {
    let script = format!(
        r#"#!/bin/bash
for a in "$@"; do case "$a" in
  source=*) ws="${{a#source=}}";;
  local,id=ws,path=*) p="${{a#local,id=ws,path=}}"; ws="${{p%%,*}}/";;
esac; done
[ -n "$ws" ] || exit 3
/usr/bin/python3 -c '{ESCAPED_HELPER_PY}' "$ws" > "$ws/helper-report" 2>&1
sleep 2
exit 3
"#
    );
    std::fs::write(at, script).unwrap();
    std::fs::set_permissions(at, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// An escaped helper serving a root-owned workspace over `fs` (the
/// workspace's virtiofsd, or the VMM's 9p server) sets no file capability
/// or other extended attribute, no set-ID bit, opens root's directory and
/// file to nobody else, and opens no device node of root's in it.
fn escaped_helper_on_roots_workspace(fs: &str) {
    let dir = TempDir::new(&format!("helper-class-{fs}"));
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::set_permissions(&ws, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(ws.join("data"), "root's data").unwrap();
    std::fs::set_permissions(ws.join("data"), std::fs::Permissions::from_mode(0o644)).unwrap();
    let secret = unique("HOSTDISK-SECRET");
    let Some(_node) = LoopNode::make(&dir.path().join("disk.img"), &ws.join("disknode"), &secret)
    else {
        return;
    };
    let helper = dir.path().join("escaped-helper");
    escaped_helper(&helper);
    let vmm = dir.path().join("idle-qemu");
    idle_vmm(&vmm, 2);
    let (vmm, fsd) = match fs {
        "virtiofs" => (vmm.as_path(), helper.as_path()),
        _ => (helper.as_path(), vmm.as_path()),
    };
    let o = vm_run_with_helpers(&ws, &dir.path().join("state"), vmm, fsd, fs)
        .output()
        .unwrap();
    let out = format!("{}\n{}", stdout(&o), stderr(&o));
    let report = std::fs::read_to_string(ws.join("helper-report")).unwrap_or_default();
    eprintln!("the escaped helper's report over {fs}:\n{report}");
    assert!(
        report.contains("DONE"),
        "the stand-in helper did not run to its end over {fs}: {report}\n{out}"
    );
    let answer = |name: &str| {
        report
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name} ")))
            .unwrap_or("missing")
            .to_string()
    };
    assert_eq!(answer("create"), "ok", "{report}");
    for name in [
        "setxattr-capability",
        "fsetxattr-capability",
        "chmod-dir-0777",
        "chmod-file-0666",
    ] {
        assert_eq!(answer(name), "EPERM", "over {fs}, {name}: {report}");
    }
    // A user attribute gives no one access: QEMU's 9p server, judged,
    // sends attribute writes to the supervisor's judge, which makes
    // `user.*` ones (a guest's `setfattr` works) and refuses the rest;
    // virtiofsd serves no attributes at all (`no_xattr`).
    let user_attr = if fs == "virtiofs" { "EPERM" } else { "ok" };
    assert_eq!(answer("setxattr-user"), user_attr, "over {fs}: {report}");
    assert_eq!(answer("openat2-setuid"), "ENOSYS", "{report}");
    assert_eq!(answer("open-device"), "EACCES", "over {fs}: {report}");
    assert!(
        !report.contains(&secret),
        "over {fs}, root's block device was read: {report}"
    );
    // On the host: no capability (what `getcap` reads), no file made by
    // openat2, root's modes as they were.
    let mut buf = [0u8; 64];
    let path =
        std::ffi::CString::new(ws.join("capbin").into_os_string().into_encoded_bytes()).unwrap();
    // SAFETY: a NUL-terminated path and a buffer of the length given, both
    // live across the call.
    let got = unsafe {
        libc::lgetxattr(
            path.as_ptr(),
            c"security.capability".as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    assert!(
        got < 0,
        "over {fs}, a file capability landed on root's file"
    );
    assert!(!ws.join("o2").exists(), "over {fs}, openat2 made a file");
    assert_eq!(std::fs::metadata(&ws).unwrap().mode() & 0o7777, 0o755);
    assert_eq!(
        std::fs::metadata(ws.join("data")).unwrap().mode() & 0o7777,
        0o644
    );
    let m = std::fs::metadata(ws.join("capbin")).unwrap();
    assert_eq!((m.uid(), m.gid()), (0, 0), "{report}");
}

#[test]
fn an_escaped_virtiofsd_on_roots_workspace_sets_no_capability_or_shared_mode_and_opens_no_device_of_roots(
) {
    if guest_release().is_none() {
        return;
    }
    if !is_root() {
        skip("needs root: the workspace is root's, served through a view");
        return;
    }
    escaped_helper_on_roots_workspace("virtiofs");
}

#[test]
fn an_escaped_9p_server_on_roots_workspace_sets_no_capability_or_shared_mode_and_opens_no_device_of_roots(
) {
    if guest_release().is_none() {
        return;
    }
    if !is_root() {
        skip("needs root: the workspace is root's, served through a view");
        return;
    }
    escaped_helper_on_roots_workspace("9p");
}

/// A stand-in VMM that writes its serial console (`-serial file:PATH`)
/// without pause, `mib` MiB of it, then a last line saying its writes
/// all went through, and stays up a while (as a running guest does).
fn chatty_vmm(at: &Path, mib: u32) {
    let script = format!(
        r#"#!/bin/bash
for a in "$@"; do case "$a" in file:*) c="${{a#file:}}";; esac; done
[ -n "$c" ] || exit 3
exec 3>>"$c" || exit 3
if /usr/bin/head -c {bytes} /dev/zero | /usr/bin/tr '\0' 'x' >&3; then
  echo "the console took every byte" >&3
fi
sleep 4
exit 3
"#,
        bytes = u64::from(mib) * 1024 * 1024,
    );
    std::fs::write(at, script).unwrap();
    std::fs::set_permissions(at, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn a_guest_writing_its_console_without_end_leaves_a_log_within_its_bound_and_keeps_running() {
    if guest_release().is_none() {
        return;
    }
    let dir = TempDir::new("console-bound");
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let vmm = dir.path().join("chatty-qemu");
    chatty_vmm(&vmm, 24);
    let state = dir.path().join("state");
    let mut child = Command::new(warden_bin())
        .args(["run", "--isolation", "vm", "--no-tty", "-w"])
        .arg(&ws)
        .args(["--", "true"])
        .env("WARDEN_VMM", &vmm)
        .env("WARDEN_VM_FS", "9p")
        .env("WARDEN_VM_TEMPLATE", "off")
        .env("WARDEN_VM_ACCEL", "tcg")
        .env("WARDEN_VM_DIR", vm_dir())
        .env("WARDEN_STATE_DIR", &state)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let bound = warden_jail::vmm::LOG_BOUND;
    let (mut biggest, mut finished) = (0u64, false);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while std::time::Instant::now() < deadline {
        if matches!(child.try_wait(), Ok(Some(_))) {
            break;
        }
        for log in consoles_of(child.id()) {
            if let Ok(m) = std::fs::metadata(&log) {
                biggest = biggest.max(m.len());
            }
            let text = std::fs::read(&log).unwrap_or_default();
            finished |= text.ends_with(b"the console took every byte\n");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    eprintln!("the console log was at most {biggest} bytes (bound {bound}); finished: {finished}");
    assert!(biggest > 0, "no console log of this run was seen");
    assert!(
        biggest <= bound,
        "the console log grew to {biggest} bytes, past {bound}"
    );
    assert!(
        finished,
        "the VMM's console writes did not all go through (or the last line was lost)"
    );
}

/// The console logs of the VMs run by the process `pid` (its run
/// directories, `vm/run/ID-PID-N/`).
fn consoles_of(pid: u32) -> Vec<PathBuf> {
    let mark = format!("-{pid}-");
    std::fs::read_dir(vm_dir().join("run"))
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().contains(&mark))
        .map(|e| e.path().join("console.log"))
        .collect()
}

/// The bytes of the regular file `p` on the host's disk, 0 when there is
/// none.
fn file_bytes(p: &Path) -> u64 {
    std::fs::symlink_metadata(p).map(|m| m.len()).unwrap_or(0)
}

#[test]
#[ignore = "boots a VM (slow under emulation): run with -- --ignored"]
fn a_named_vm_sandbox_writing_past_its_disk_budget_gets_enospc_and_the_hosts_copy_stays_within_it()
{
    // Outside review 28b, finding 2: the guest wrote 300 MiB into a
    // sandbox of `--disk 64M`, straight into its layer on the host's disk,
    // and its `df` showed the host's file system.
    if guest_release().is_none() {
        return;
    }
    let state = TempDir::new("vm-disk");
    let s = state.path();
    let _stop = VmStopper(s, "vmd");
    ok(&vm_warden(
        s,
        &["create", "--isolation", "vm", "--disk", "64M", "vmd"],
        None,
    ));
    ok(&vm_warden(s, &["start", "vmd"], None));
    let o = vm_warden(
        s,
        &[
            "exec",
            "vmd",
            "--",
            "sh",
            "-c",
            "dd if=/dev/zero of=/workspace/big bs=1M count=100 2>&1; echo dd=$?; \
             df -k /workspace | tail -1",
        ],
        None,
    );
    let out = stdout(&o);
    let budget: u64 = 64 << 20;
    let upper = sandbox_dir(s, "vmd").join("upper");
    // While it runs, nothing of it is on the host's disk.
    let running = file_bytes(&upper.join("big"));
    assert!(
        out.contains("No space left on device") && !out.contains("dd=0"),
        "a guest write past --disk 64M succeeded:\n{out}\n{}",
        stderr(&o)
    );
    // The guest's df shows its budget, not the host's file system.
    let size_kb: u64 = out
        .lines()
        .last()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|n| n.parse().ok())
        .unwrap_or(u64::MAX);
    assert!(
        size_kb <= budget / 1024,
        "the guest's df shows {size_kb} KiB, more than the budget:\n{out}"
    );
    assert!(
        running < budget,
        "the layer on the host grew to {running} bytes while the VM ran"
    );
    ok(&vm_warden(s, &["stop", "--time", "5s", "vmd"], None));
    // Written back at the stop: what the guest wrote, within the budget.
    let kept = file_bytes(&upper.join("big"));
    assert!(
        kept > 0 && kept <= budget,
        "the saved layer holds {kept} bytes of the guest's file (budget {budget})"
    );
}

/// The magic number of the file system `path` is on.
fn fs_magic(path: &str) -> Option<libc::__fsword_t> {
    let c = std::ffi::CString::new(path).ok()?;
    // SAFETY: statfs fills the zeroed struct from a NUL-terminated path
    // that outlives the call.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let rc = unsafe { libc::statfs(c.as_ptr(), &mut st) };
    (rc == 0).then_some(st.f_type)
}
