//! The capabilities a jailed host helper holds once it runs: virtiofsd's
//! jail leaves it exactly the ones it serves files with (ambient, and the
//! bounding set cut to them), and nothing an exec could widen. Read from
//! the helper's own /proc status, as the kernel reports it. And what it
//! does with them: never a set-ID bit, a file capability or any other
//! extended attribute, no group or other write on a swapped share, no
//! device node opened, and a root-owned share only through the idmapped
//! view attached for it.

use std::collections::HashMap;
use std::path::PathBuf;
use warden_jail::fsd::FsdJail;
use warden_jail::vmm::{VmmAccess, VmmJailError};

/// CAP_CHOWN, DAC_OVERRIDE, FOWNER, SETGID, SETUID, SETPCAP, SYS_CHROOT:
/// what `warden_jail::fsd` keeps (never SETFCAP, FSETID or MKNOD).
const FSD_KEPT: u64 = (1 << 0) | (1 << 1) | (1 << 3) | (1 << 6) | (1 << 7) | (1 << 8) | (1 << 18);

fn capability_sets(status: &str) -> HashMap<String, u64> {
    status
        .lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(':')?;
            let v = u64::from_str_radix(v.trim(), 16).ok()?;
            k.starts_with("Cap").then(|| (k.to_string(), v))
        })
        .collect()
}

#[test]
fn virtiofsds_jail_leaves_it_exactly_the_capabilities_it_serves_files_with() {
    let dir = std::env::temp_dir().join(format!("warden-helper-caps-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let access = VmmAccess {
        readable_dirs: Vec::new(),
        // Its program, its libraries and its own /proc status: all beneath /.
        readable: vec![PathBuf::from("/")],
        root: dir.clone(),
        ..VmmAccess::default()
    };
    let jail = match FsdJail::prepare(&access, (65534, 65534)) {
        Ok(j) => j,
        Err(VmmJailError::NoLandlock) => {
            eprintln!("skipped: no Landlock on this kernel");
            return;
        }
        Err(e) => panic!("{e}"),
    };
    let mut cmd = std::process::Command::new("/bin/cat");
    cmd.arg("/proc/self/status");
    jail.apply(&mut cmd);
    let out = cmd.output().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    if !out.status.success() && !warden_jail::host::is_root() {
        eprintln!(
            "skipped: no unprivileged user namespace here ({})",
            String::from_utf8_lossy(&out.stderr)
        );
        return;
    }
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let sets = capability_sets(&String::from_utf8_lossy(&out.stdout));
    for set in ["CapInh", "CapAmb", "CapBnd", "CapPrm", "CapEff"] {
        assert_eq!(sets[set], FSD_KEPT, "{set}: {:#x}", sets[set]);
    }
}

/// A directory of root's, removed on drop.
struct Dir(PathBuf);

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Run `script` in virtiofsd's jail as nobody, writable beneath `share`,
/// with `view` handed as a descriptor whose `/proc/self/fd/N/` the script
/// names `$VIEW` (as warden names it to virtiofsd); `None` without
/// Landlock.
fn in_fsd_jail(
    share: &std::path::Path,
    view: Option<std::os::fd::OwnedFd>,
    script: &str,
) -> Option<std::process::Output> {
    let access = VmmAccess {
        readable_dirs: Vec::new(),
        readable: vec![
            PathBuf::from("/usr"),
            PathBuf::from("/lib"),
            PathBuf::from("/lib64"),
        ]
        .into_iter()
        .filter(|p| p.exists())
        .collect(),
        writable: vec![share.to_path_buf()],
        root: share.to_path_buf(),
        ..VmmAccess::default()
    };
    let jail = match FsdJail::prepare(&access, (65534, 65534)) {
        Ok(j) => j,
        Err(VmmJailError::NoLandlock) => {
            eprintln!("skipped: no Landlock on this kernel");
            return None;
        }
        Err(e) => panic!("{e}"),
    };
    let mut cmd = std::process::Command::new("/bin/sh");
    cmd.args(["-c", script]);
    if let Some(v) = &view {
        let n = warden_jail::vmnet::inherit(&mut cmd, v);
        cmd.env("VIEW", format!("/proc/self/fd/{n}/"));
    }
    jail.apply(&mut cmd);
    Some(cmd.output().unwrap())
}

fn root_dir(tag: &str) -> Dir {
    use std::os::unix::fs::PermissionsExt;
    let d = std::env::temp_dir().join(format!("warden-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
    Dir(d)
}

#[test]
fn a_jailed_helper_never_sets_a_set_user_id_or_set_group_id_bit() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    if !warden_jail::host::is_root() {
        eprintln!("skipped: needs root (the helper's share must be nobody's)");
        return;
    }
    let dir = root_dir("helper-setid");
    std::os::unix::fs::chown(&dir.0, Some(65534), Some(65534)).unwrap();
    let d = dir.0.display();
    let Some(out) = in_fsd_jail(
        &dir.0,
        None,
        &format!(
            "cd {d} && touch suid sgid plain && \
             chmod 4755 suid; chmod 2755 sgid; chmod 0700 plain && echo PLAIN-DONE"
        ),
    ) else {
        return;
    };
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("PLAIN-DONE"),
        "{said} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mode = |n: &str| std::fs::metadata(dir.0.join(n)).unwrap().mode() & 0o7777;
    assert_eq!(mode("plain"), 0o700);
    for f in ["suid", "sgid"] {
        assert_eq!(mode(f) & 0o6000, 0, "{f} got a set-ID bit");
    }
    let _ = std::fs::set_permissions(&dir.0, std::fs::Permissions::from_mode(0o755));
}

#[test]
fn a_helper_serves_a_root_owned_share_through_its_view_and_nothing_of_roots_beside_it() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    if !warden_jail::host::is_root() {
        eprintln!("skipped: needs root (the share must be root's)");
        return;
    }
    let outer = root_dir("helper-view");
    let share = outer.0.join("share");
    std::fs::create_dir(&share).unwrap();
    std::fs::set_permissions(&share, std::fs::Permissions::from_mode(0o755)).unwrap();
    let secret = format!("helper-view-secret-{}", std::process::id());
    for (f, at) in [("inside", &share), ("beside", &outer.0)] {
        std::fs::write(at.join(f), &secret).unwrap();
        std::fs::set_permissions(at.join(f), std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    // In the view where it has one, else in the share itself.
    let script = format!(
        "cd \"${{VIEW:-{s}}}\" || exit 1; \
         cat inside && echo; cat {o}/beside; echo made > made && echo MADE; \
         echo made > {o}/made-beside; id -u",
        s = share.display(),
        o = outer.0.display()
    );
    // Without the view, root's share is nobody's to read or write.
    let plain = script.clone();
    let Some(out) = in_fsd_jail(&share, None, &plain) else {
        return;
    };
    let said = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        !said.contains(&secret) && !said.contains("MADE"),
        "nobody used root's share without the view: {said}"
    );
    let swap = warden_jail::identity::SwapMap::new((0, 0), (65534, 65534)).unwrap();
    let view = warden_jail::identity::idmapped_view(&share, &swap).unwrap();
    let out = in_fsd_jail(&share, Some(view), &script).unwrap();
    let said = String::from_utf8_lossy(&out.stdout).to_string();
    let lines: Vec<&str> = said.lines().collect();
    assert_eq!(
        lines.first().copied(),
        Some(secret.as_str()),
        "{said} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(said.contains("MADE"), "{said}");
    assert_eq!(lines.last().copied(), Some("65534"), "{said}");
    assert_eq!(
        said.matches(&secret).count(),
        1,
        "a root-only file beside the share was read: {said}"
    );
    let m = std::fs::metadata(share.join("made")).unwrap();
    assert_eq!((m.uid(), m.gid()), (0, 0), "what it made is not root's");
    assert!(!outer.0.join("made-beside").exists());
    // The view was the helper's own: the host's share is as it was.
    let m = std::fs::metadata(&share).unwrap();
    assert_eq!((m.uid(), m.gid()), (0, 0));
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(!mounts.contains(share.to_str().unwrap()), "{mounts}");
}

/// The attacks of an escaped helper on a root-owned share it serves
/// through its swapping view, in Python (ctypes for `openat2`): each
/// prints its name and `ok` or the errno's name.
const ESCAPED_HELPER: &str = r#"
import ctypes, errno, os, struct, sys
v = sys.argv[1]
def attempt(name, f):
    try:
        f()
        print(name, "ok")
    except OSError as e:
        print(name, errno.errorcode.get(e.errno, e.errno))
# A v3 security.capability whose root ID is the helper's own user: through
# the swap, the host's root (cap_dac_read_search, cap_setuid; effective).
caps = (1 << 2) | (1 << 7)
v3 = struct.pack("<IIIIII", 0x03000000 | 1, caps, 0, 0, 0, 65534)
open(v + "capbin", "wb").close()
attempt("setxattr-capability", lambda: os.setxattr(v + "capbin", "security.capability", v3))
fd = os.open(v + "capbin", os.O_RDONLY)
attempt("fsetxattr-capability", lambda: os.setxattr(fd, "security.capability", v3))
attempt("setxattr-trusted", lambda: os.setxattr(v + "capbin", "trusted.x", b"1"))
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
attempt("chmod-file-0620", lambda: os.chmod(v + "data", 0o620))
attempt("chmod-file-0755", lambda: os.chmod(v + "data", 0o755))
attempt("open-device", lambda: os.close(os.open(v + "devnode", os.O_RDWR)))
print("DONE")
"#;

#[test]
fn an_escaped_helper_on_a_swapped_share_sets_no_capability_no_set_id_no_shared_write_and_opens_no_device(
) {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    if !warden_jail::host::is_root() {
        eprintln!("skipped: needs root (the share must be root's)");
        return;
    }
    let python = std::path::Path::new("/usr/bin/python3");
    if !python.exists() {
        eprintln!("skipped: no /usr/bin/python3 to play the escaped helper");
        return;
    }
    let outer = root_dir("helper-escape");
    let share = outer.0.join("share");
    std::fs::create_dir(&share).unwrap();
    std::fs::set_permissions(&share, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(share.join("data"), "root's data").unwrap();
    std::fs::set_permissions(share.join("data"), std::fs::Permissions::from_mode(0o644)).unwrap();
    // A root-only device node in root's share (the null device: opening
    // it at all is what must fail).
    let node = share.join("devnode");
    nix::sys::stat::mknod(
        &node,
        nix::sys::stat::SFlag::S_IFCHR,
        nix::sys::stat::Mode::from_bits_truncate(0o600),
        nix::sys::stat::makedev(1, 3),
    )
    .unwrap();
    let script = outer.0.join("escaped.py");
    std::fs::write(&script, ESCAPED_HELPER).unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o644)).unwrap();
    let swap = warden_jail::identity::SwapMap::new((0, 0), (65534, 65534)).unwrap();
    let view = warden_jail::identity::idmapped_clone(&share, &swap).unwrap();
    let Some(out) = in_fsd_jail_reading(
        &share,
        &[python.to_path_buf(), script.clone()],
        Some(view),
        &format!("exec {} {} \"$VIEW\"", python.display(), script.display()),
    ) else {
        return;
    };
    let said = String::from_utf8_lossy(&out.stdout).to_string();
    let err = String::from_utf8_lossy(&out.stderr);
    eprintln!("the escaped helper said:\n{said}{err}");
    assert!(
        said.contains("DONE"),
        "the stand-in did not finish: {said} {err}"
    );
    let answer = |name: &str| {
        said.lines()
            .find_map(|l| l.strip_prefix(&format!("{name} ")))
            .unwrap_or("missing")
            .to_string()
    };
    for name in [
        "setxattr-capability",
        "fsetxattr-capability",
        "setxattr-trusted",
        "setxattr-user",
        "chmod-dir-0777",
        "chmod-file-0666",
        "chmod-file-0620",
    ] {
        assert_eq!(answer(name), "EPERM", "{name}: {said}");
    }
    assert_eq!(answer("openat2-setuid"), "ENOSYS", "{said}");
    assert_eq!(answer("open-device"), "EACCES", "{said}");
    // A mode that opens nothing to others is the owner's to set.
    assert_eq!(answer("chmod-file-0755"), "ok", "{said}");
    // On the host: no capability, no set-ID file, root's modes as they were.
    let mut buf = [0u8; 64];
    let path =
        std::ffi::CString::new(share.join("capbin").into_os_string().into_encoded_bytes()).unwrap();
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
        "a security.capability landed on root's file on the host"
    );
    assert!(!share.join("o2").exists(), "openat2 made a file");
    assert_eq!(std::fs::metadata(&share).unwrap().mode() & 0o7777, 0o755);
    assert_eq!(
        std::fs::metadata(share.join("data")).unwrap().mode() & 0o7777,
        0o755
    );
}

/// [`in_fsd_jail`] with `extra` readable too (a program outside /usr).
fn in_fsd_jail_reading(
    share: &std::path::Path,
    extra: &[PathBuf],
    view: Option<std::os::fd::OwnedFd>,
    script: &str,
) -> Option<std::process::Output> {
    let access = VmmAccess {
        readable_dirs: Vec::new(),
        readable: ["/usr", "/lib", "/lib64"]
            .iter()
            .map(PathBuf::from)
            .chain(extra.iter().cloned())
            .filter(|p| p.exists())
            .collect(),
        writable: vec![share.to_path_buf()],
        root: share.to_path_buf(),
        ..VmmAccess::default()
    };
    let jail = match FsdJail::prepare(&access, (65534, 65534)) {
        Ok(j) => j,
        Err(VmmJailError::NoLandlock) => {
            eprintln!("skipped: no Landlock on this kernel");
            return None;
        }
        Err(e) => panic!("{e}"),
    };
    let mut cmd = std::process::Command::new("/bin/sh");
    cmd.args(["-c", script]);
    if let Some(v) = &view {
        let n = warden_jail::vmnet::inherit(&mut cmd, v);
        cmd.env("VIEW", format!("/proc/self/fd/{n}/"));
    }
    jail.apply(&mut cmd);
    Some(cmd.output().unwrap())
}
