//! Degraded mode (no namespaces) lends `--ro` files on the host's own tree,
//! where Landlock decides only what may be opened: what is done through a
//! descriptor once opened is the seccomp filter's to refuse. A file lent
//! read-only keeps its mode, owner, times and attributes whether the
//! sandbox names it by path or holds it open read-only.

use crate::common::*;
use std::os::unix::fs::{MetadataExt, PermissionsExt};

/// Every descriptor form of a metadata change, on a file opened read-only;
/// each line says whether the kernel let it through.
const THROUGH_A_DESCRIPTOR: &str = r#"
import os, struct, sys
p = sys.argv[1]
fd = os.open(p, os.O_RDONLY)
acl = struct.pack("<I", 2) + b"".join(struct.pack("<HHI", tag, 6, 0xFFFFFFFF) for tag in (1, 4, 0x20))
def attempt(name, call):
    try:
        call(); print("ALLOWED", name)
    except OSError as e:
        print("refused", name, e.errno)
attempt("fchmod", lambda: os.fchmod(fd, 0))
attempt("fchmod-widen", lambda: os.fchmod(fd, 0o644))
attempt("fchown", lambda: os.fchown(fd, -1, os.getgid()))
attempt("fsetxattr-acl", lambda: os.setxattr(fd, "system.posix_acl_access", acl))
attempt("fsetxattr-user", lambda: os.setxattr(fd, "user.planted", b"x"))
attempt("fremovexattr", lambda: os.removexattr(fd, "user.kept"))
attempt("futimens", lambda: os.utime(fd, (1, 1)))
attempt("futimens-now", lambda: os.utime(fd))
own = os.environ["TMPDIR"] + "/own"
open(own, "w").write("mine")
attempt("link-own", lambda: os.link(own, own + ".2"))
"#;

#[test]
fn a_read_only_file_opened_read_only_keeps_its_mode_owner_times_and_attributes_in_degraded_mode() {
    let Some(who) = Unprivileged::get() else {
        return skip("cannot get an unprivileged user to run warden as");
    };
    let ws = TempDir::new("degraded-twins-ws");
    let lent = TempDir::new("degraded-twins-lent");
    let cred = lent.path().join("cred");
    std::fs::write(&cred, "aws_secret=XYZ\n").unwrap();
    std::fs::set_permissions(&cred, std::fs::Permissions::from_mode(0o600)).unwrap();
    let old = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000_000);
    std::fs::File::options()
        .write(true)
        .open(&cred)
        .unwrap()
        .set_modified(old)
        .unwrap();
    set_attr(&cred, "user.kept");
    // The file is the sandbox's user's: ownership alone would allow each change.
    for p in [ws.path(), lent.path(), cred.as_path()] {
        who.own(p);
    }
    let Some(out) = super::isolation::warden_without_user_namespaces_as(
        &who,
        &[
            "run",
            "--no-tty",
            "--allow-degraded",
            "-w",
            ws.str(),
            "--ro",
            cred.to_str().unwrap(),
            "--",
            "python3",
            "-c",
            THROUGH_A_DESCRIPTOR,
            cred.to_str().unwrap(),
        ],
    ) else {
        return;
    };
    let said = stdout(&out);
    let why = format!("{said}\n{}", stderr(&out));
    assert_eq!(said.matches("refused").count(), 9, "{why}");
    assert!(!said.contains("ALLOWED"), "{why}");
    let meta = std::fs::metadata(&cred).unwrap();
    assert_eq!(meta.permissions().mode() & 0o7777, 0o600, "{why}");
    assert_eq!(meta.uid(), who.uid, "{why}");
    assert_eq!(meta.modified().unwrap(), old, "{why}");
    let names = attr_names(&cred);
    assert!(
        !names.iter().any(|n| n.contains("posix_acl")),
        "{names:?} {why}"
    );
    assert!(
        !names.iter().any(|n| n == "user.planted"),
        "{names:?} {why}"
    );
    assert!(names.iter().any(|n| n == "user.kept"), "{names:?} {why}");
}

fn set_attr(p: &std::path::Path, name: &str) {
    let path = std::ffi::CString::new(p.to_str().unwrap()).unwrap();
    let name = std::ffi::CString::new(name).unwrap();
    // SAFETY: two NUL-terminated strings and a one-byte value, all alive across the call.
    let rc = unsafe { libc::setxattr(path.as_ptr(), name.as_ptr(), b"1".as_ptr().cast(), 1, 0) };
    assert_eq!(rc, 0, "{}", std::io::Error::last_os_error());
}

/// The names of a file's extended attributes, ACLs included.
fn attr_names(p: &std::path::Path) -> Vec<String> {
    let path = std::ffi::CString::new(p.to_str().unwrap()).unwrap();
    let mut buf = vec![0u8; 4096];
    // SAFETY: `buf` is a live buffer of the length passed; the kernel writes at most that much.
    let n = unsafe { libc::listxattr(path.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    assert!(n >= 0, "{}", std::io::Error::last_os_error());
    buf[..n as usize]
        .split(|b| *b == 0)
        .filter(|n| !n.is_empty())
        .map(|n| String::from_utf8_lossy(n).into_owned())
        .collect()
}
