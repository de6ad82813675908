//! Filesystem escape: reading, listing and writing the host's files from
//! inside a sandbox, and the system calls (mount, chroot, open by handle,
//! device nodes, set-id bits) that would reach around the sandbox's view.
use crate::lab::{from_run, Attack, Lab, Verdict};
use crate::probes::{arg, contained, escaped, must_fail, Finding, Probe, EPERM};
use crate::Category;
use nix::fcntl::AT_FDCWD;
use nix::sys::stat::{Mode, SFlag};
use std::io::{Read, Write};
use std::path::Path;

pub(crate) fn attacks() -> Vec<Attack> {
    vec![
        // ---- filesystem escape ----
        (
            "fs.read-planted-file",
            Category::Filesystem,
            "read a host file outside every bind",
            |lab| {
                let p = lab.plant("planted/secret", &lab.token);
                from_run(&lab.sandbox(&[], "read-file", &[&p.to_string_lossy()]))
            },
        ),
        (
            "fs.list-host-home",
            Category::Filesystem,
            "list the invoking user's home directory",
            |lab| match std::env::var("HOME")
                .ok()
                .filter(|h| Path::new(h).is_dir() && h != "/")
            {
                Some(h) => from_run(&lab.sandbox(&[], "list-dir", &[&h])),
                None => Verdict::Skipped("HOME is not a directory on this host".into()),
            },
        ),
        (
            "fs.write-system-dir",
            Category::Filesystem,
            "create a file in /usr",
            simple!("write-file", "/usr/warden-selftest-planted"),
        ),
        (
            "fs.write-etc-passwd",
            Category::Filesystem,
            "append to /etc/passwd",
            simple!("write-file", "/etc/passwd"),
        ),
        (
            "fs.symlink-out",
            Category::Filesystem,
            "follow a symlink planted to point at a host file",
            |lab| {
                let p = lab.plant("planted/linked", &lab.token);
                from_run(&lab.sandbox(&[], "symlink-out", &[&p.to_string_lossy()]))
            },
        ),
        (
            "fs.proc-root",
            Category::Filesystem,
            "reach the host's tree through /proc/1/root",
            |lab| {
                let p = lab.plant("planted/via-proc", &lab.token);
                from_run(&lab.sandbox(&[], "read-file", &[&format!("/proc/1/root{}", p.display())]))
            },
        ),
        (
            "fs.mount",
            Category::Filesystem,
            "mount a file system over /tmp",
            simple!("mount-tmpfs"),
        ),
        (
            "fs.open-by-handle",
            Category::Filesystem,
            "open a file by handle (the shocker escape)",
            simple!("open-by-handle"),
        ),
        (
            "fs.chroot",
            Category::Filesystem,
            "chroot to break out of the root",
            simple!("chroot"),
        ),
        (
            "fs.mknod",
            Category::Filesystem,
            "create a block device node for the host's disk",
            simple!("mknod-device"),
        ),
        (
            "fs.setuid-bit",
            Category::Filesystem,
            "leave a setuid file for the host to run",
            simple!("setuid-bit"),
        ),
        (
            "fs.sysfs",
            Category::Filesystem,
            "read the host's /sys",
            simple!("list-dir", "/sys/class/net"),
        ),
        (
            "fs.dev-mem",
            Category::Filesystem,
            "read physical memory through /dev/mem",
            simple!("read-file", "/dev/mem"),
        ),
        (
            "fs.outside-workspace",
            Category::Filesystem,
            "write next to the workspace, outside it",
            outside_workspace,
        ),
        (
            "fs.host-unix-socket",
            Category::Filesystem,
            "connect to a host service's named socket (docker.sock style)",
            host_unix_socket,
        ),
        (
            "fs.owner-socket-shown",
            Category::Filesystem,
            "act as the owner through an owner-only socket a bind shows (the daemon's, a supervisor's)",
            owner_socket_shown,
        ),
    ]
}

/// Write beside a workspace the sandbox was given: only the workspace
/// itself is bound, so its parent must stay out of reach.
fn outside_workspace(lab: &Lab) -> Verdict {
    let ws = lab.dir.join("workspace");
    let _ = std::fs::create_dir_all(&ws);
    let beside = lab.dir.join("beside-workspace");
    let r = lab.sandbox(
        &["-w", &ws.to_string_lossy()],
        "write-file",
        &[&beside.to_string_lossy()],
    );
    if beside.exists() {
        return Verdict::Escaped(format!("{} was created", beside.display()));
    }
    from_run(&r)
}

/// Connect to a named socket a host service listens on, which no bind
/// shows: the sandbox's tree must not reach it.
fn host_unix_socket(lab: &Lab) -> Verdict {
    let path = lab.dir.join("service.sock");
    let listener = match std::os::unix::net::UnixListener::bind(&path) {
        Ok(l) => l,
        Err(e) => return Verdict::Skipped(format!("cannot create a unix socket: {e}")),
    };
    let _ = listener.set_nonblocking(true);
    let r = lab.sandbox(&[], "unix-socket", &[&path.to_string_lossy()]);
    if listener.accept().is_ok() {
        return Verdict::Escaped("the host's socket took a connection".into());
    }
    from_run(&r)
}

/// Connect to an owner-only socket that a bind shows on purpose.
fn owner_socket_shown(lab: &Lab) -> Verdict {
    // A bind that shows an owner-only socket is refused for
    // warden's own; here one shows it on purpose, and what is
    // judged is the socket's own check of who connects, as
    // warden's owner-only sockets make it: rootless, a
    // sandbox's processes have the owner's UID.
    let dir = lab.dir.join("shown");
    let _ = std::fs::create_dir_all(&dir);
    let path = dir.join("owner.sock");
    let listener = match std::os::unix::net::UnixListener::bind(&path) {
        Ok(l) => l,
        Err(e) => return Verdict::Skipped(format!("cannot create a unix socket: {e}")),
    };
    let _ = listener.set_nonblocking(true);
    let shown = dir.to_string_lossy().into_owned();
    let r = lab.sandbox(&["--ro", &shown], "unix-socket", &[&path.to_string_lossy()]);
    match listener.accept() {
        Ok((conn, _)) => match warden_runtime::peer::check(&conn) {
            Ok(()) => Verdict::Escaped("the socket took a sandbox's process for its owner".into()),
            Err(e) => Verdict::Contained(format!("the socket refused the peer: {e}")),
        },
        Err(_) => from_run(&r),
    }
}

pub(crate) const PROBES: &[Probe] = &[
    Probe {
        name: "read-file",
        harmful: false,
        run: |a| read_attempt(arg(a, 0)),
    },
    Probe {
        name: "list-dir",
        harmful: false,
        run: list_dir,
    },
    Probe {
        name: "write-file",
        harmful: false,
        run: write_file,
    },
    Probe {
        name: "symlink-out",
        harmful: false,
        run: symlink_out,
    },
    Probe {
        name: "mount-tmpfs",
        harmful: false,
        run: mount_tmpfs,
    },
    Probe {
        name: "open-by-handle",
        harmful: false,
        run: open_by_handle,
    },
    Probe {
        name: "chroot",
        harmful: false,
        run: chroot,
    },
    Probe {
        name: "mknod-device",
        harmful: false,
        run: mknod_device,
    },
    Probe {
        name: "setuid-bit",
        harmful: false,
        run: setuid_bit,
    },
    Probe {
        name: "unix-socket",
        harmful: false,
        run: unix_socket,
    },
];

/// Open a path for reading and read a little; contained when it cannot be
/// opened or read.
pub(crate) fn read_attempt(path: &str) -> Finding {
    match std::fs::File::open(path) {
        Err(e) => contained(format!("open {path}: {e}")),
        Ok(mut f) => {
            let mut buf = [0u8; 64];
            match f.read(&mut buf) {
                Ok(n) => escaped(format!("read {n} bytes of {path}")),
                Err(e) => contained(format!("read {path}: {e}")),
            }
        }
    }
}

fn list_dir(args: &[String]) -> Finding {
    match std::fs::read_dir(arg(args, 0)) {
        Err(e) => contained(format!("list {}: {e}", arg(args, 0))),
        Ok(rd) => escaped(format!("listed {} entries of {}", rd.count(), arg(args, 0))),
    }
}

fn write_file(args: &[String]) -> Finding {
    match std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(arg(args, 0))
    {
        Err(e) => contained(format!("open {} for writing: {e}", arg(args, 0))),
        Ok(_) => escaped(format!("opened {} for writing", arg(args, 0))),
    }
}

fn symlink_out(args: &[String]) -> Finding {
    let link = "/tmp/warden-probe-link";
    let _ = std::fs::remove_file(link);
    if let Err(e) = std::os::unix::fs::symlink(arg(args, 0), link) {
        return escaped(format!("could not even make the link: {e}"));
    }
    read_attempt(link)
}

fn mount_tmpfs(_: &[String]) -> Finding {
    must_fail(
        "mount tmpfs on /tmp",
        nix::mount::mount(
            Some("none"),
            "/tmp",
            Some("tmpfs"),
            nix::mount::MsFlags::empty(),
            None::<&str>,
        )
        .map(|()| 0),
        EPERM,
    )
}

fn open_by_handle(_: &[String]) -> Finding {
    // A zeroed handle of the right size: without the filter the kernel
    // would judge it (EPERM without CAP_DAC_READ_SEARCH is also
    // containment, by capabilities).
    must_fail(
        "open_by_handle_at",
        warden_jail::probes::open_by_handle_at(),
        EPERM,
    )
}

fn chroot(_: &[String]) -> Finding {
    must_fail("chroot(\".\")", nix::unistd::chroot(".").map(|()| 0), EPERM)
}

fn mknod_device(_: &[String]) -> Finding {
    must_fail(
        "mknod a block device",
        nix::sys::stat::mknodat(
            AT_FDCWD,
            "/tmp/warden-probe-sda",
            SFlag::S_IFBLK,
            Mode::from_bits_truncate(0o600),
            nix::sys::stat::makedev(8, 0),
        )
        .map(|()| 0),
        EPERM,
    )
}

fn setuid_bit(_: &[String]) -> Finding {
    let path = "/tmp/warden-probe-suid";
    if let Err(e) = std::fs::write(path, b"#!/bin/sh\n") {
        return escaped(format!("could not write the test file: {e}"));
    }
    must_fail(
        "chmod 4755",
        nix::sys::stat::fchmodat(
            AT_FDCWD,
            path,
            Mode::from_bits_truncate(0o4755),
            nix::sys::stat::FchmodatFlags::FollowSymlink,
        )
        .map(|()| 0),
        EPERM,
    )
}

fn unix_socket(args: &[String]) -> Finding {
    match std::os::unix::net::UnixStream::connect(arg(args, 0)) {
        Err(e) => contained(format!("connect {}: {e}", arg(args, 0))),
        Ok(mut s) => {
            let _ = s.write_all(b"probe");
            escaped(format!("connected to {}", arg(args, 0)))
        }
    }
}
