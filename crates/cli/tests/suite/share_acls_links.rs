//! Permission and exposure changes that are not `chmod`, on a writable
//! share: a POSIX ACL is a mode (and a default ACL the mode of root's later
//! files), and a hard link is a second name outside the directory that
//! keeps a file from the host's other users. Both are judged by the
//! sandbox's supervisor with the mode rule (`jail/src/modes/attrs.rs`,
//! `links.rs`): root's files keep their modes, ACLs and only name; the
//! sandbox's own new files take ACLs and links as `cp -a`, `tar --acls`
//! and `git` give them. `share_exposure.rs` covers `chmod` itself.

use crate::common::*;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// The names of a file's extended attributes, ACLs included.
fn attr_names(p: &Path) -> Vec<String> {
    let path = std::ffi::CString::new(p.to_str().unwrap()).unwrap();
    let mut buf = vec![0u8; 4096];
    // SAFETY: `buf` is a live buffer of the length passed; the kernel writes at most that much.
    let n = unsafe { libc::llistxattr(path.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    assert!(n >= 0, "{}", std::io::Error::last_os_error());
    buf[..n as usize]
        .split(|b| *b == 0)
        .filter(|n| !n.is_empty())
        .map(|n| String::from_utf8_lossy(n).into_owned())
        .collect()
}

/// An attribute's value on the host.
fn attr(p: &Path, name: &str) -> Option<Vec<u8>> {
    let path = std::ffi::CString::new(p.to_str().unwrap()).unwrap();
    let name = std::ffi::CString::new(name).unwrap();
    let mut buf = vec![0u8; 4096];
    // SAFETY: as in `attr_names`.
    let n = unsafe {
        libc::lgetxattr(
            path.as_ptr(),
            name.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    (n >= 0).then(|| buf[..n as usize].to_vec())
}

/// A directory of root's lent `--rw`: `private/` (`0700`) holding a `0600`
/// secret and a `0644` file only the directory protects, and a public
/// `0644` file.
struct App {
    dir: TempDir,
}

impl App {
    fn new(tag: &str) -> App {
        let dir = TempDir::new(tag);
        set_mode(dir.path(), 0o755);
        let app = dir.path().join("app");
        std::fs::create_dir_all(app.join("private")).unwrap();
        set_mode(&app, 0o755);
        set_mode(&app.join("private"), 0o700);
        for (name, text, m) in [
            ("private/secret", "root's secret\n", 0o600),
            ("private/db.conf", "db_password=v1\n", 0o644),
            ("public.conf", "public\n", 0o644),
        ] {
            std::fs::write(app.join(name), text).unwrap();
            set_mode(&app.join(name), m);
        }
        App { dir }
    }
    fn app(&self) -> PathBuf {
        self.dir.path().join("app")
    }
    /// A program for the sandbox's python, next to the share (root's, `0644`).
    fn program(&self, text: &str) -> PathBuf {
        let p = self.dir.path().join("prog.py");
        std::fs::write(&p, text).unwrap();
        set_mode(&p, 0o644);
        p
    }
    /// Run `text` with the sandbox's python on the share: what it printed,
    /// and that with warden's own messages (for assertions' messages).
    fn run_program(&self, text: &str) -> (String, String) {
        let prog = self.program(text);
        let a = self.app();
        let o = self.run(&[PY, prog.to_str().unwrap(), a.to_str().unwrap()]);
        let out = stdout(&o);
        let why = format!("{out}\n{}", stderr(&o));
        (out, why)
    }
    fn run(&self, argv: &[&str]) -> std::process::Output {
        let a = self.app();
        let prog = self.dir.path().join("prog.py");
        let mut args = vec![
            "run",
            "--no-tty",
            "--rw",
            a.to_str().unwrap(),
            "--ro",
            prog.to_str().unwrap(),
            "--",
        ];
        args.extend_from_slice(argv);
        warden(self.dir.path(), &args)
    }
}

const PY: &str = "/usr/bin/python3";

/// This process's umask, as the kernel reports it.
fn umask() -> u32 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Umask:"))
                .and_then(|v| u32::from_str_radix(v.trim(), 8).ok())
        })
        .unwrap_or(0)
}

/// Every way to set or remove an ACL on root's files, each line saying
/// whether the kernel let it through; then the same on the sandbox's own
/// new file and directory, which must take them.
const ACLS: &str = r#"
import os, struct, sys
app = sys.argv[1]
secret, d, public = app + "/private/secret", app + "/private", app + "/public.conf"
def acl(*entries):
    return struct.pack("<I", 2) + b"".join(struct.pack("<HHI", t, p, i) for t, p, i in entries)
N = 0xFFFFFFFF
OPEN_R = acl((1, 6, N), (4, 4, N), (0x20, 4, N))          # a 0644 in ACL form
OPEN_RW = acl((1, 6, N), (4, 6, N), (0x20, 6, N))         # 0666
OPEN_DIR = acl((1, 7, N), (4, 7, N), (0x20, 7, N))        # 0777
NAMED = acl((1, 6, N), (2, 6, 12345), (4, 0, N), (0x10, 6, N), (0x20, 0, N))
# Named for the sandbox's root, which every sandbox maps.
NAMED_ROOT = acl((1, 6, N), (2, 4, 0), (4, 0, N), (0x10, 4, N), (0x20, 0, N))
NARROW = acl((1, 6, N), (4, 0, N), (0x20, 0, N))          # 0600
def attempt(name, call):
    try:
        call(); print("ALLOWED", name)
    except OSError as e:
        print("refused", name, e.errno)
for label, value in (("r", OPEN_R), ("rw", OPEN_RW), ("named", NAMED)):
    attempt("access-" + label + "-file", lambda: os.setxattr(secret, "system.posix_acl_access", value))
    attempt("laccess-" + label + "-file", lambda: os.setxattr(secret, "system.posix_acl_access", value, follow_symlinks=False))
    fd = os.open(secret, os.O_RDONLY)
    attempt("faccess-" + label + "-file", lambda: os.setxattr(fd, "system.posix_acl_access", value))
    os.close(fd)
attempt("access-dir", lambda: os.setxattr(d, "system.posix_acl_access", OPEN_DIR))
attempt("default-dir", lambda: os.setxattr(d, "system.posix_acl_default", OPEN_R))
attempt("default-app", lambda: os.setxattr(app, "system.posix_acl_default", OPEN_RW))
attempt("remove-access", lambda: os.removexattr(secret, "system.posix_acl_access"))
attempt("remove-default", lambda: os.removexattr(d, "system.posix_acl_default"))
attempt("filecap", lambda: os.setxattr(public, "security.capability", struct.pack("<IIIII", 0x02000000, 1 << 7, 0, 0, 0)))
attempt("trusted", lambda: os.setxattr(public, "trusted.overlay.opaque", b"y"))
# What stays granted: narrowing root's file, a user attribute, and
# anything on the sandbox's own new files.
os.setxattr(public, "system.posix_acl_access", NARROW); print("NARROWED")
os.setxattr(public, "system.posix_acl_access", OPEN_R); print("GIVEN-BACK")
os.setxattr(public, "user.note", b"kept"); print("USER-ATTR")
own = app + "/own.txt"
open(own, "w").write("mine")
os.setxattr(own, "system.posix_acl_access", NAMED_ROOT); print("OWN-NAMED")
os.mkdir(app + "/own.d")
# A default ACL decides root's later files there whatever root's umask: on
# the sandbox's own directory too it may only take away (one made under
# root's name after moving root's directory aside is such a directory).
attempt("own-default-open", lambda: os.setxattr(app + "/own.d", "system.posix_acl_default", OPEN_RW))
os.setxattr(app + "/own.d", "system.posix_acl_default", NARROW); print("OWN-DEFAULT")
"#;

#[test]
fn an_acl_cannot_open_root_owned_files_or_directories_in_a_rw_share_to_local_users() {
    if !is_root() {
        return skip("needs root: the --rw paths must be root's");
    }
    let app = App::new("share-acls");
    let a = app.app();
    let (out, why) = app.run_program(ACLS);
    assert!(!out.contains("ALLOWED"), "an ACL was let through: {why}");
    assert_eq!(out.matches("refused").count(), 17, "{why}");
    for said in [
        "NARROWED",
        "GIVEN-BACK",
        "USER-ATTR",
        "OWN-NAMED",
        "OWN-DEFAULT",
    ] {
        assert!(out.contains(said), "{said} missing: {why}");
    }
    // Root's files and directories: modes as they were, no ACL anywhere.
    assert_eq!(mode(&a.join("private/secret")), 0o600, "{why}");
    assert_eq!(mode(&a.join("private")), 0o700, "{why}");
    assert_eq!(mode(&a), 0o755, "{why}");
    assert_eq!(mode(&a.join("public.conf")), 0o644, "{why}");
    for p in [a.join("private/secret"), a.join("private"), a.clone()] {
        let names = attr_names(&p);
        assert!(
            !names.iter().any(|n| n.starts_with("system.posix_acl")),
            "{}: {names:?}",
            p.display()
        );
    }
    assert!(!attr_names(&a.join("public.conf")).contains(&"security.capability".to_string()));
    // Root's later files in the directory take root's umask, not an ACL's.
    let later = a.join("private/later");
    std::fs::write(&later, "root writes later\n").unwrap();
    if umask() & 0o022 == 0o022 {
        assert_eq!(mode(&later) & 0o022, 0, "{why}");
    }
    // The sandbox's own file took its named entry, for the user the
    // sandbox named: its root, whom the host sees as the file's owner
    // (the entry's ID is the caller's, mapped as the kernel maps it).
    let acl = attr(&a.join("own.txt"), "system.posix_acl_access").expect("the own file's ACL");
    let expected = vec![std::fs::metadata(a.join("own.txt")).unwrap().uid()];
    let named: Vec<u32> = acl[4..]
        .chunks_exact(8)
        .filter(|e| u16::from_le_bytes([e[0], e[1]]) == 2)
        .map(|e| u32::from_le_bytes([e[4], e[5], e[6], e[7]]))
        .collect();
    assert_eq!(named, expected, "{why}");
    assert!(
        attr(&a.join("own.d"), "system.posix_acl_default").is_some(),
        "{why}"
    );
    // Root's later file in the sandbox's directory, asked as 0666 (as a
    // shell's redirection asks): its default ACL took away, never gave.
    let later = a.join("own.d/later");
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o666)
        .open(&later)
        .unwrap();
    assert_eq!(mode(&later) & 0o077, 0, "{why}");
}

/// Every way to give root's file a second name out of `private/`; then a
/// link of the sandbox's own new file, as git makes its objects.
const LINKS: &str = r#"
import ctypes, os, sys
app = sys.argv[1]
db = app + "/private/db.conf"
libc = ctypes.CDLL(None, use_errno=True)
def attempt(name, call):
    try:
        call(); print("ALLOWED", name)
    except OSError as e:
        print("refused", name, e.errno)
def empty_path():
    fd = os.open(db, os.O_PATH)
    # linkat(fd, "", AT_FDCWD, new, AT_EMPTY_PATH)
    if libc.linkat(fd, b"", -100, (app + "/.by-fd").encode(), 0x1000) != 0:
        raise OSError(ctypes.get_errno(), "linkat")
def through_proc():
    fd = os.open(db, os.O_RDONLY)
    # linkat(AT_FDCWD, "/proc/self/fd/N", AT_FDCWD, new, AT_SYMLINK_FOLLOW)
    if libc.linkat(-100, b"/proc/self/fd/%d" % fd, -100, (app + "/.by-proc").encode(), 0x400) != 0:
        raise OSError(ctypes.get_errno(), "linkat")
attempt("link", lambda: os.link(db, app + "/.cache-x"))
dfd = os.open(app + "/private", os.O_RDONLY | os.O_DIRECTORY)
attempt("linkat-dirfd", lambda: os.link("db.conf", app + "/.by-dirfd", src_dir_fd=dfd))
adfd = os.open(app, os.O_RDONLY | os.O_DIRECTORY)
attempt("linkat-follow", lambda: os.link("private/db.conf", app + "/.follow", src_dir_fd=adfd, follow_symlinks=True))
attempt("linkat-empty-path", empty_path)
attempt("linkat-proc", through_proc)
os.symlink(db, app + "/sym")
attempt("link-through-symlink", lambda: os.link("sym", app + "/.via-sym", src_dir_fd=adfd, follow_symlinks=True))
attempt("link-secret", lambda: os.link(app + "/private/secret", app + "/.secret"))
own = app + "/tmp_obj_1"
open(own, "w").write("blob")
os.link(own, app + "/obj"); os.unlink(own); print("OWN-LINK")
os.rename(app + "/obj", app + "/obj2"); print("OWN-RENAME")
"#;

#[test]
fn a_hard_link_cannot_take_a_root_owned_file_out_of_the_directory_that_protects_it() {
    if !is_root() {
        return skip("needs root: the --rw paths must be root's");
    }
    let app = App::new("share-links");
    let a = app.app();
    let (out, why) = app.run_program(LINKS);
    assert!(!out.contains("ALLOWED"), "a link was made: {why}");
    assert_eq!(out.matches("refused").count(), 7, "{why}");
    assert!(
        out.contains("OWN-LINK") && out.contains("OWN-RENAME"),
        "{why}"
    );
    // Root's files keep one name each, and nothing new names them.
    for f in ["private/db.conf", "private/secret"] {
        assert_eq!(
            std::fs::metadata(a.join(f)).unwrap().nlink(),
            1,
            "{f}: {why}"
        );
    }
    for n in [
        ".cache-x",
        ".by-dirfd",
        ".follow",
        ".by-fd",
        ".by-proc",
        ".via-sym",
        ".secret",
    ] {
        assert!(!a.join(n).exists(), "{n}: {why}");
    }
    assert_eq!(std::fs::read_to_string(a.join("obj2")).unwrap(), "blob");
}

#[test]
fn a_rootless_sandbox_can_neither_acl_nor_link_its_users_private_files_open() {
    let Some(user) = Unprivileged::get() else {
        return skip("no unprivileged user to run warden as");
    };
    let app = App::new("share-acls-rootless");
    let a = app.app();
    let prog = app.program(
        r#"
import os, struct, sys
app = sys.argv[1]
acl = struct.pack("<I", 2) + b"".join(struct.pack("<HHI", t, 4 if t != 1 else 6, 0xFFFFFFFF) for t in (1, 4, 0x20))
for name, call in (
    ("acl", lambda: os.setxattr(app + "/private/secret", "system.posix_acl_access", acl)),
    ("default", lambda: os.setxattr(app + "/private", "system.posix_acl_default", acl)),
    ("link", lambda: os.link(app + "/private/db.conf", app + "/.cache-x")),
):
    try:
        call(); print("ALLOWED", name)
    except OSError as e:
        print("refused", name, e.errno)
open(app + "/new", "w").write("mine")
os.setxattr(app + "/new", "system.posix_acl_access", acl); print("NEW-ACL")
os.link(app + "/new", app + "/new2"); print("NEW-LINK")
"#,
    );
    let root = app.dir.path();
    for p in [
        root.to_path_buf(),
        a.clone(),
        a.join("private"),
        a.join("private/secret"),
        a.join("private/db.conf"),
        a.join("public.conf"),
        prog.clone(),
    ] {
        user.own(&p);
    }
    let state = root.join("state");
    let o = user.warden(
        &state,
        &[
            "run",
            "--no-tty",
            "--rw",
            a.to_str().unwrap(),
            "--ro",
            prog.to_str().unwrap(),
            "--",
            PY,
            prog.to_str().unwrap(),
            a.to_str().unwrap(),
        ],
    );
    let out = stdout(&o);
    let why = format!("{out}\n{}", stderr(&o));
    if !out.contains("NEW-ACL") && stderr(&o).contains("namespace") {
        return skip("this host gives the unprivileged user no namespaces");
    }
    assert!(!out.contains("ALLOWED"), "{why}");
    assert_eq!(out.matches("refused").count(), 3, "{why}");
    assert!(out.contains("NEW-ACL") && out.contains("NEW-LINK"), "{why}");
    assert_eq!(mode(&a.join("private/secret")), 0o600, "{why}");
    assert_eq!(mode(&a.join("private")), 0o700, "{why}");
    assert!(!a.join(".cache-x").exists(), "{why}");
    assert_eq!(mode(&a.join("new")), 0o644, "{why}");
}
