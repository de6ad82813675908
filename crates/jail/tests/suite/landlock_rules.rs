//! Landlock on its own: with no mount namespace in the way, a process
//! restricted by `warden_jail::landlock::restrict` can read only beneath
//! its readable paths and write only beneath its writable ones, even where
//! ordinary file permissions would let it.

use std::path::{Path, PathBuf};

fn scratch(tag: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!("warden-landlock-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&p);
    std::fs::create_dir_all(&p).unwrap();
    p
}

/// Run `f` in a forked child restricted by Landlock; return what it printed
/// through a pipe (one line per probe).
fn in_restricted_child(
    readable: &[PathBuf],
    writable: &[PathBuf],
    probes: impl FnOnce() -> String,
) -> String {
    let mut fds = [0; 2];
    // SAFETY: pipe writes two descriptors into a valid array.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: the test process forks; the child only runs the probes, writes
    // to the pipe and leaves with _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        let result = match warden_jail::landlock::restrict(readable, writable, false) {
            Ok(warden_jail::landlock::Enforcement::Full) => probes(),
            Ok(other) => format!("not enforced: {other:?}\n"),
            Err(e) => format!("restrict failed: {e}\n"),
        };
        // SAFETY: writing a buffer we own to our pipe end, then leaving.
        unsafe {
            libc::write(fds[1], result.as_ptr().cast(), result.len());
            libc::_exit(0);
        }
    }
    // SAFETY: closing our copy of the write end.
    unsafe { libc::close(fds[1]) };
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        // SAFETY: reading into a buffer we own.
        let n = unsafe { libc::read(fds[0], buf.as_mut_ptr().cast(), buf.len()) };
        if n <= 0 {
            break;
        }
        out.extend_from_slice(&buf[..n as usize]);
    }
    let mut status = 0;
    // SAFETY: reaping our own child.
    unsafe {
        libc::close(fds[0]);
        libc::waitpid(pid, &mut status, 0);
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn landlock_available() -> bool {
    // SAFETY: the VERSION query creates nothing.
    let abi = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            1u32,
        )
    };
    abi >= 1
}

fn probe(what: &str, r: std::io::Result<()>) -> String {
    match r {
        Ok(()) => format!("{what}=ok\n"),
        Err(e) => format!("{what}={}\n", e.raw_os_error().unwrap_or(-1)),
    }
}

#[test]
fn landlock_alone_confines_reads_and_writes_to_the_granted_paths() {
    if !landlock_available() {
        eprintln!("skipped: Landlock is not available on this kernel");
        return;
    }
    let readable = scratch("ro");
    let writable = scratch("rw");
    let outside = scratch("outside");
    std::fs::write(readable.join("r.txt"), "readable").unwrap();
    std::fs::write(outside.join("secret.txt"), "outside-secret").unwrap();
    let out = in_restricted_child(
        &[readable.clone(), PathBuf::from("/proc")],
        std::slice::from_ref(&writable),
        || {
            let (ro, rw, outside) = (&readable, &writable, &outside);
            let mut s = String::new();
            s += &probe("read_granted", std::fs::read(ro.join("r.txt")).map(drop));
            s += &probe(
                "read_outside",
                std::fs::read(outside.join("secret.txt")).map(drop),
            );
            s += &probe("list_outside", std::fs::read_dir(outside).map(drop));
            s += &probe("write_readonly", std::fs::write(ro.join("new"), "x"));
            s += &probe("write_writable", std::fs::write(rw.join("new"), "x"));
            s += &probe("write_outside", std::fs::write(outside.join("new"), "x"));
            s += &probe(
                "rename_out",
                std::fs::rename(rw.join("new"), outside.join("moved")),
            );
            s += &probe(
                "read_etc_passwd",
                std::fs::read(Path::new("/etc/passwd")).map(drop),
            );
            s
        },
    );
    let get = |k: &str| {
        out.lines()
            .find_map(|l| l.strip_prefix(&format!("{k}=")))
            .unwrap_or_else(|| panic!("no {k} in {out}"))
            .to_string()
    };
    assert_eq!(get("read_granted"), "ok", "{out}");
    assert_eq!(get("write_writable"), "ok", "{out}");
    for denied in [
        "read_outside",
        "list_outside",
        "write_readonly",
        "write_outside",
        "read_etc_passwd",
    ] {
        assert_eq!(get(denied), libc::EACCES.to_string(), "{denied}: {out}");
    }
    // A rename out of the writable tree is refused (EXDEV with Refer rights
    // handled, or EACCES).
    assert_ne!(get("rename_out"), "ok", "{out}");
    assert!(!outside.join("new").exists() && !outside.join("moved").exists());
    assert!(writable.join("new").exists());
    for d in [readable, writable, outside] {
        let _ = std::fs::remove_dir_all(d);
    }
}
