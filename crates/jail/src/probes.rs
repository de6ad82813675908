//! The in-sandbox half of `warden selftest`: each probe is a real attempt
//! at an escape, made with real system calls from inside a sandbox, that
//! reports what the kernel answered. The host half (planted files,
//! listeners that record what reaches them, processes to attack) lives in
//! the `warden-selftest` crate and judges the outcome together with what
//! its own instruments saw.
//!
//! A probe never decides that it was contained because it *could not try*:
//! each returns the errno (or success) of the attempt itself, and says
//! "escaped" when the call did what an attacker wanted.

use std::ffi::CString;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::time::Duration;

/// What one probe found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// The attempt failed in the way that containment looks like.
    pub contained: bool,
    /// What happened, in a few words.
    pub detail: String,
}

fn contained(detail: impl Into<String>) -> Finding {
    Finding {
        contained: true,
        detail: detail.into(),
    }
}

fn escaped(detail: impl Into<String>) -> Finding {
    Finding {
        contained: false,
        detail: detail.into(),
    }
}

fn errno_name(e: i32) -> String {
    format!(
        "{} ({})",
        nix::errno::Errno::from_raw(e),
        std::io::Error::from_raw_os_error(e)
    )
}

/// A raw system call's outcome: `Ok(return value)` or `Err(errno)`.
fn raw(nr: libc::c_long, a: [u64; 6]) -> Result<i64, i32> {
    // SAFETY: every caller in this file passes integers, NULL, pointers to
    // buffers that live across the call, or arguments the kernel validates
    // before touching memory; the calls run in a throwaway probe process.
    let r = unsafe { libc::syscall(nr, a[0], a[1], a[2], a[3], a[4], a[5]) };
    if r == -1 {
        Err(nix::errno::Errno::last_raw())
    } else {
        Ok(r)
    }
}

/// A call that must be refused: contained when it fails with one of
/// `expected`, escaped when it succeeds; any other failure is reported as
/// not contained by the layer under test, so that a filter that went
/// missing is not hidden by an argument the kernel happened to reject.
fn must_fail(what: &str, r: Result<i64, i32>, expected: &[i32]) -> Finding {
    match r {
        Ok(v) => escaped(format!("{what} succeeded (returned {v})")),
        Err(e) if expected.contains(&e) => contained(format!("{what}: {}", errno_name(e))),
        Err(e) => escaped(format!(
            "{what} failed with {} rather than being refused",
            errno_name(e)
        )),
    }
}

fn cstr(s: &str) -> CString {
    CString::new(s.replace('\0', "")).unwrap_or_default()
}

fn arg(args: &[String], i: usize) -> &str {
    args.get(i).map(String::as_str).unwrap_or("")
}

fn port(args: &[String], i: usize) -> u16 {
    arg(args, i).parse().unwrap_or(0)
}

/// Open a path for reading and read a little; contained when it cannot be
/// opened or read.
fn read_attempt(path: &str) -> Finding {
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

fn connect_attempt(addr: SocketAddr, payload: &[u8]) -> Finding {
    match TcpStream::connect_timeout(&addr, Duration::from_secs(3)) {
        Err(e) => contained(format!("connect {addr}: {e}")),
        Ok(mut s) => {
            let _ = s.set_read_timeout(Some(Duration::from_secs(3)));
            let _ = s.write_all(payload);
            let mut buf = [0u8; 256];
            let n = s.read(&mut buf).unwrap_or(0);
            // Whether anything arrived is the host listener's to say; a
            // reply from it would be the proof.
            if n > 0 && buf[..n].starts_with(b"warden-selftest-listener") {
                escaped(format!("reached the host listener at {addr}"))
            } else {
                contained(format!(
                    "connect {addr}: accepted by warden's proxy, {n} bytes back"
                ))
            }
        }
    }
}

/// A TLS ClientHello naming `name` (TLS 1.2 record, one cipher suite, the
/// server_name extension only): enough for a server to read the name.
pub fn client_hello(name: &str) -> Vec<u8> {
    let host = name.as_bytes();
    let mut sni = Vec::new();
    sni.extend_from_slice(&((host.len() + 3) as u16).to_be_bytes());
    sni.push(0);
    sni.extend_from_slice(&(host.len() as u16).to_be_bytes());
    sni.extend_from_slice(host);
    let mut ext = Vec::new();
    if !name.is_empty() {
        ext.extend_from_slice(&[0, 0]);
        ext.extend_from_slice(&(sni.len() as u16).to_be_bytes());
        ext.extend_from_slice(&sni);
    }
    let mut body = vec![3, 3];
    body.extend_from_slice(&[7u8; 32]);
    body.push(0);
    body.extend_from_slice(&[0, 2, 0x13, 0x01]);
    body.extend_from_slice(&[1, 0]);
    body.extend_from_slice(&(ext.len() as u16).to_be_bytes());
    body.extend_from_slice(&ext);
    let mut hs = vec![1];
    hs.extend_from_slice(&(body.len() as u32).to_be_bytes()[1..]);
    hs.extend_from_slice(&body);
    let mut rec = vec![22, 3, 1];
    rec.extend_from_slice(&(hs.len() as u16).to_be_bytes());
    rec.extend_from_slice(&hs);
    rec
}

/// A DNS query for `name` (type A).
fn dns_query(name: &str) -> Vec<u8> {
    let mut q = vec![0x12, 0x34, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0];
    for label in name.split('.').filter(|l| !l.is_empty()) {
        q.push(label.len().min(63) as u8);
        q.extend_from_slice(&label.as_bytes()[..label.len().min(63)]);
    }
    q.extend_from_slice(&[0, 0, 1, 0, 1]);
    q
}

/// Run the probe `name` with its arguments. Unknown names are reported,
/// never taken for containment.
pub fn run(name: &str, args: &[String]) -> Finding {
    // The probes that spend resources or signal processes run only where
    // they are meant to: under a warden init (PID 1 of a sandbox), never on
    // a host where someone typed the hidden command by hand.
    const HARMFUL: &[&str] = &[
        "fork-bomb",
        "memory-hog",
        "fill-disk",
        "spin",
        "kill-all",
        "daemonize",
        "kill-pid",
        "sethostname",
    ];
    if HARMFUL.contains(&name) {
        let init = std::fs::read("/proc/1/cmdline").unwrap_or_default();
        if !init.windows(6).any(|w| w == b"warden") {
            return escaped(format!(
                "probe {name} refused: PID 1 is not a warden sandbox's init (no PID namespace?)"
            ));
        }
    }
    let eperm = &[libc::EPERM][..];
    match name {
        // ---- file system ----
        "read-file" => read_attempt(arg(args, 0)),
        "list-dir" => match std::fs::read_dir(arg(args, 0)) {
            Err(e) => contained(format!("list {}: {e}", arg(args, 0))),
            Ok(rd) => escaped(format!("listed {} entries of {}", rd.count(), arg(args, 0))),
        },
        "write-file" => match std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(arg(args, 0))
        {
            Err(e) => contained(format!("open {} for writing: {e}", arg(args, 0))),
            Ok(_) => escaped(format!("opened {} for writing", arg(args, 0))),
        },
        "symlink-out" => {
            let link = "/tmp/warden-probe-link";
            let _ = std::fs::remove_file(link);
            if let Err(e) = std::os::unix::fs::symlink(arg(args, 0), link) {
                return escaped(format!("could not even make the link: {e}"));
            }
            read_attempt(link)
        }
        "mount-tmpfs" => {
            let (src, dst, fs) = (cstr("none"), cstr("/tmp"), cstr("tmpfs"));
            must_fail(
                "mount tmpfs on /tmp",
                raw(
                    libc::SYS_mount,
                    [
                        src.as_ptr() as u64,
                        dst.as_ptr() as u64,
                        fs.as_ptr() as u64,
                        0,
                        0,
                        0,
                    ],
                ),
                eperm,
            )
        }
        "open-by-handle" => {
            // A zeroed handle of the right size: without the filter the
            // kernel would judge it (EPERM without CAP_DAC_READ_SEARCH is
            // also containment, by capabilities).
            let mut handle = [0u8; 8 + 128];
            handle[0] = 128;
            must_fail(
                "open_by_handle_at",
                raw(
                    libc::SYS_open_by_handle_at,
                    [
                        libc::AT_FDCWD as u64,
                        handle.as_mut_ptr() as u64,
                        0,
                        0,
                        0,
                        0,
                    ],
                ),
                eperm,
            )
        }
        "chroot" => {
            let dot = cstr(".");
            must_fail(
                "chroot(\".\")",
                raw(libc::SYS_chroot, [dot.as_ptr() as u64, 0, 0, 0, 0, 0]),
                eperm,
            )
        }
        "mknod-device" => {
            let p = cstr("/tmp/warden-probe-sda");
            let dev = libc::makedev(8, 0);
            must_fail(
                "mknod a block device",
                raw(
                    libc::SYS_mknodat,
                    [
                        libc::AT_FDCWD as u64,
                        p.as_ptr() as u64,
                        (libc::S_IFBLK | 0o600) as u64,
                        dev,
                        0,
                        0,
                    ],
                ),
                eperm,
            )
        }
        "setuid-bit" => {
            let path = "/tmp/warden-probe-suid";
            if let Err(e) = std::fs::write(path, b"#!/bin/sh\n") {
                return escaped(format!("could not write the test file: {e}"));
            }
            let p = cstr(path);
            must_fail(
                "chmod 4755",
                raw(
                    libc::SYS_fchmodat,
                    [libc::AT_FDCWD as u64, p.as_ptr() as u64, 0o4755, 0, 0, 0],
                ),
                eperm,
            )
        }
        // ---- processes and IPC ----
        "kill-pid" => {
            let pid: i32 = arg(args, 0).parse().unwrap_or(0);
            if pid <= 1 {
                return escaped("no pid to attack was given");
            }
            // Only a process whose command line carries the marker counts:
            // the same number may be a process of the sandbox itself.
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            if !String::from_utf8_lossy(&cmdline).contains(arg(args, 1)) {
                return contained(format!("pid {pid} is not the host's process in here"));
            }
            // SAFETY: kill with integer arguments.
            let r = unsafe { libc::kill(pid, libc::SIGKILL) };
            if r == 0 {
                escaped(format!("killed host pid {pid}"))
            } else {
                contained(format!(
                    "kill {pid}: {}",
                    errno_name(nix::errno::Errno::last_raw())
                ))
            }
        }
        "see-process" => {
            // The marker comes reversed, so that this probe's own command
            // line (and its init's) does not carry it.
            let marker: String = arg(args, 0).chars().rev().collect();
            let marker = marker.as_str();
            let seen = std::fs::read_dir("/proc")
                .map(|rd| {
                    rd.filter_map(|e| e.ok())
                        .filter(|e| {
                            e.file_name()
                                .to_string_lossy()
                                .bytes()
                                .all(|b| b.is_ascii_digit())
                        })
                        .any(|e| {
                            let c = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
                            String::from_utf8_lossy(&c).contains(marker)
                        })
                })
                .unwrap_or(false);
            if seen {
                escaped("the host's process is visible in /proc")
            } else {
                contained("no host process in /proc")
            }
        }
        "ptrace-parent" => {
            // SAFETY: getppid has no preconditions.
            let ppid = unsafe { libc::getppid() };
            must_fail(
                "ptrace(PTRACE_ATTACH, parent)",
                raw(
                    libc::SYS_ptrace,
                    [libc::PTRACE_ATTACH as u64, ppid as u64, 0, 0, 0, 0],
                ),
                eperm,
            )
        }
        "vm-read-parent" => {
            let mut buf = [0u8; 8];
            let local = libc::iovec {
                iov_base: buf.as_mut_ptr().cast(),
                iov_len: buf.len(),
            };
            let remote = libc::iovec {
                iov_base: 0x400000 as *mut libc::c_void,
                iov_len: 8,
            };
            // SAFETY: getppid has no preconditions.
            let ppid = unsafe { libc::getppid() };
            must_fail(
                "process_vm_readv(parent)",
                raw(
                    libc::SYS_process_vm_readv,
                    [
                        ppid as u64,
                        &local as *const _ as u64,
                        1,
                        &remote as *const _ as u64,
                        1,
                        0,
                    ],
                ),
                eperm,
            )
        }
        "abstract-socket" => {
            use std::os::linux::net::SocketAddrExt;
            let name = arg(args, 0);
            match std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())
                .and_then(|a| std::os::unix::net::UnixStream::connect_addr(&a))
            {
                Err(e) => contained(format!("connect @{name}: {e}")),
                Ok(mut s) => {
                    let _ = s.write_all(b"probe");
                    escaped(format!("connected to the host's @{name}"))
                }
            }
        }
        "unix-socket" => match std::os::unix::net::UnixStream::connect(arg(args, 0)) {
            Err(e) => contained(format!("connect {}: {e}", arg(args, 0))),
            Ok(mut s) => {
                let _ = s.write_all(b"probe");
                escaped(format!("connected to {}", arg(args, 0)))
            }
        },
        "tiocsti" => {
            let c = b'x';
            must_fail(
                "ioctl(TIOCSTI)",
                raw(
                    libc::SYS_ioctl,
                    [0, libc::TIOCSTI, &c as *const u8 as u64, 0, 0, 0],
                ),
                eperm,
            )
        }
        "sethostname" => {
            let name = arg(args, 0);
            // The host checks its own hostname afterwards; here, only try.
            let r = nix::unistd::sethostname(name);
            contained(format!("sethostname: {r:?} (the host judges)"))
        }
        "kill-all" => {
            // SAFETY: kill with integer arguments.
            let r = unsafe { libc::kill(-1, libc::SIGKILL) };
            contained(format!("kill(-1, SIGKILL) returned {r} (the host judges)"))
        }
        // ---- kernel interfaces ----
        "unshare-user" => must_fail(
            "unshare(CLONE_NEWUSER)",
            raw(
                libc::SYS_unshare,
                [libc::CLONE_NEWUSER as u64, 0, 0, 0, 0, 0],
            ),
            eperm,
        ),
        "unshare-mount" => must_fail(
            "unshare(CLONE_NEWNS)",
            raw(libc::SYS_unshare, [libc::CLONE_NEWNS as u64, 0, 0, 0, 0, 0]),
            eperm,
        ),
        "setns" => {
            let fd = std::fs::File::open("/proc/self/ns/net");
            let raw_fd = fd
                .as_ref()
                .map(std::os::fd::AsRawFd::as_raw_fd)
                .unwrap_or(-1);
            must_fail(
                "setns",
                raw(libc::SYS_setns, [raw_fd as u64, 0, 0, 0, 0, 0]),
                eperm,
            )
        }
        "bpf" => {
            let mut attr = [0u8; 128];
            must_fail(
                "bpf(BPF_PROG_LOAD)",
                raw(
                    libc::SYS_bpf,
                    [5, attr.as_mut_ptr() as u64, attr.len() as u64, 0, 0, 0],
                ),
                eperm,
            )
        }
        "keyring" => {
            let (t, d) = (cstr("user"), cstr("warden-probe"));
            let payload = b"x";
            must_fail(
                "add_key",
                raw(
                    libc::SYS_add_key,
                    [
                        t.as_ptr() as u64,
                        d.as_ptr() as u64,
                        payload.as_ptr() as u64,
                        1,
                        (-2i64) as u64,
                        0,
                    ],
                ),
                eperm,
            )
        }
        "io-uring" => {
            let mut params = [0u8; 120];
            must_fail(
                "io_uring_setup",
                raw(
                    libc::SYS_io_uring_setup,
                    [4, params.as_mut_ptr() as u64, 0, 0, 0, 0],
                ),
                eperm,
            )
        }
        "perf-event" => {
            let mut attr = [0u8; 128];
            attr[4..8].copy_from_slice(&128u32.to_ne_bytes());
            must_fail(
                "perf_event_open",
                raw(
                    libc::SYS_perf_event_open,
                    [
                        attr.as_mut_ptr() as u64,
                        0,
                        (-1i64) as u64,
                        (-1i64) as u64,
                        0,
                        0,
                    ],
                ),
                eperm,
            )
        }
        "userfaultfd" => must_fail(
            "userfaultfd",
            raw(libc::SYS_userfaultfd, [0, 0, 0, 0, 0, 0]),
            eperm,
        ),
        "load-module" => {
            let empty = cstr("");
            must_fail(
                "finit_module",
                raw(
                    libc::SYS_finit_module,
                    [u64::MAX, empty.as_ptr() as u64, 0, 0, 0, 0],
                ),
                eperm,
            )
        }
        "kexec" => must_fail(
            "kexec_load",
            raw(libc::SYS_kexec_load, [0, 0, 0, 0, 0, 0]),
            eperm,
        ),
        "become-root" => {
            // Only a change of identity counts: a sandbox whose own user is
            // 0 of its namespace (mapped to nobody outside) stays that user.
            let before = nix::unistd::geteuid();
            match nix::unistd::setuid(nix::unistd::Uid::from_raw(0)) {
                Err(e) => contained(format!("setuid(0): {e}")),
                Ok(()) if nix::unistd::geteuid() == before => contained(format!(
                    "setuid(0) left the process as it was (UID {before} of its namespace, {})",
                    std::fs::read_to_string("/proc/self/uid_map")
                        .map(|m| format!(
                            "mapped {}",
                            m.split_whitespace().collect::<Vec<_>>().join(" ")
                        ))
                        .unwrap_or_default()
                )),
                Ok(()) => escaped(format!(
                    "setuid(0) changed UID {before} to {}",
                    nix::unistd::geteuid()
                )),
            }
        }
        "capabilities" => {
            let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
            let sets: Vec<String> = status
                .lines()
                .filter(|l| {
                    ["CapInh:", "CapPrm:", "CapEff:", "CapBnd:", "CapAmb:"]
                        .iter()
                        .any(|p| l.starts_with(p))
                })
                .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
                .collect();
            if sets.len() == 5 && sets.iter().all(|l| l.ends_with("0000000000000000")) {
                contained("every capability set is empty")
            } else {
                escaped(format!("capabilities held: {}", sets.join(", ")))
            }
        }
        "no-new-privs" => {
            // SAFETY: prctl with integer arguments.
            let r = unsafe { libc::prctl(libc::PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) };
            if r == 1 {
                contained("no_new_privs is set: no exec gains privileges")
            } else {
                escaped(format!("no_new_privs is {r}"))
            }
        }
        "raw-socket" => must_fail(
            "socket(AF_INET, SOCK_RAW)",
            raw(
                libc::SYS_socket,
                [
                    libc::AF_INET as u64,
                    libc::SOCK_RAW as u64,
                    libc::IPPROTO_TCP as u64,
                    0,
                    0,
                    0,
                ],
            ),
            eperm,
        ),
        "packet-socket" => must_fail(
            "socket(AF_PACKET)",
            raw(
                libc::SYS_socket,
                [
                    libc::AF_PACKET as u64,
                    libc::SOCK_RAW as u64,
                    0x0300,
                    0,
                    0,
                    0,
                ],
            ),
            eperm,
        ),
        // ---- network ----
        "tcp-connect" => {
            match format!("{}:{}", arg(args, 0), port(args, 1)).parse::<SocketAddr>() {
                Ok(a) => connect_attempt(a, b"warden-selftest-probe\n"),
                Err(_) => {
                    match format!("[{}]:{}", arg(args, 0), port(args, 1)).parse::<SocketAddr>() {
                        Ok(a) => connect_attempt(a, b"warden-selftest-probe\n"),
                        Err(e) => escaped(format!("bad address: {e}")),
                    }
                }
            }
        }
        "tls-fronting" => {
            // A ClientHello for an allowed name, sent to another address.
            match format!("{}:{}", arg(args, 0), port(args, 1)).parse::<SocketAddr>() {
                Ok(a) => connect_attempt(a, &client_hello(arg(args, 2))),
                Err(e) => escaped(format!("bad address: {e}")),
            }
        }
        "http-direct" => {
            match format!("{}:{}", arg(args, 0), port(args, 1)).parse::<SocketAddr>() {
                Ok(a) => connect_attempt(
                    a,
                    format!("GET / HTTP/1.1\r\nHost: {}\r\n\r\n", arg(args, 2)).as_bytes(),
                ),
                Err(e) => escaped(format!("bad address: {e}")),
            }
        }
        "udp-send" => {
            let target = format!("{}:{}", arg(args, 0), port(args, 1));
            let sock = UdpSocket::bind(if arg(args, 0).contains(':') {
                "[::]:0"
            } else {
                "0.0.0.0:0"
            });
            match sock.and_then(|s| s.send_to(b"warden-selftest-probe", &target)) {
                Err(e) => contained(format!("send to {target}: {e}")),
                Ok(_) => contained(format!("sent to {target} (the host listener judges)")),
            }
        }
        "dns-tunnel" => {
            // Data in a name, to the sandbox's resolver and straight at an
            // outside name server.
            let name = format!("{}.exfil.test", arg(args, 2));
            let q = dns_query(&name);
            let mut out = Vec::new();
            if let Ok(s) = UdpSocket::bind("0.0.0.0:0") {
                let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
                for target in [
                    "127.0.0.1:53".to_string(),
                    format!("{}:{}", arg(args, 0), port(args, 1)),
                ] {
                    let sent = s.send_to(&q, &target);
                    let mut buf = [0u8; 512];
                    let answer = s.recv_from(&mut buf).ok().map(|(n, _)| buf[..n].to_vec());
                    let rcode = answer.as_ref().and_then(|a| a.get(3)).map(|b| b & 0xf);
                    out.push(format!(
                        "{target}: sent {:?}, rcode {rcode:?}",
                        sent.is_ok()
                    ));
                }
            }
            contained(format!("{} (the host listener judges)", out.join("; ")))
        }
        "icmp-echo" => {
            // An unprivileged ping socket; a reply would mean ICMP left.
            let target: std::net::Ipv4Addr = arg(args, 0)
                .parse()
                .unwrap_or(std::net::Ipv4Addr::LOCALHOST);
            match raw(
                libc::SYS_socket,
                [
                    libc::AF_INET as u64,
                    libc::SOCK_DGRAM as u64,
                    libc::IPPROTO_ICMP as u64,
                    0,
                    0,
                    0,
                ],
            ) {
                Err(e) => contained(format!("ping socket: {}", errno_name(e))),
                Ok(fd) => {
                    use std::os::fd::FromRawFd;
                    // SAFETY: the kernel just returned this descriptor; it is
                    // owned here alone.
                    let s = unsafe { UdpSocket::from_raw_fd(fd as i32) };
                    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
                    let echo = [8u8, 0, 0, 0, 0x12, 0x34, 0, 1, b'w', b'd'];
                    match s.send_to(&echo, (target, 0)) {
                        Err(e) => contained(format!("ping {target}: {e}")),
                        Ok(_) => {
                            let mut buf = [0u8; 64];
                            match s.recv_from(&mut buf) {
                                Ok((_, from)) if from.ip() == std::net::IpAddr::V4(target) => {
                                    escaped(format!("{target} answered the ping"))
                                }
                                Ok((_, from)) => contained(format!("only {from} answered")),
                                Err(e) => contained(format!("no answer from {target}: {e}")),
                            }
                        }
                    }
                }
            }
        }
        // ---- resources ----
        "fork-bomb" => {
            let limit: u32 = arg(args, 0).parse().unwrap_or(10_000);
            let mut made = 0u32;
            let mut failed = None;
            while made < limit {
                // SAFETY: the child only sleeps and exits, calling nothing
                // that allocates or locks.
                match unsafe { libc::fork() } {
                    0 => {
                        // SAFETY: async-signal-safe calls only.
                        unsafe {
                            libc::sleep(30);
                            libc::_exit(0)
                        }
                    }
                    -1 => {
                        failed = Some(nix::errno::Errno::last_raw());
                        break;
                    }
                    _ => made += 1,
                }
            }
            match failed {
                Some(e) => contained(format!(
                    "fork failed after {made} processes: {}",
                    errno_name(e)
                )),
                None => escaped(format!("made {made} processes without a limit")),
            }
        }
        "memory-hog" => {
            let mb: usize = arg(args, 0).parse().unwrap_or(1024);
            let mut held: Vec<Vec<u8>> = Vec::new();
            for _ in 0..mb {
                let mut chunk = Vec::new();
                if chunk.try_reserve_exact(1 << 20).is_err() {
                    return contained(format!("allocation failed after {} MiB", held.len()));
                }
                chunk.resize(1 << 20, 1u8);
                held.push(chunk);
            }
            escaped(format!("held {mb} MiB"))
        }
        "fill-disk" => {
            let mb: usize = arg(args, 1).parse().unwrap_or(64);
            let path = arg(args, 0);
            // SAFETY: ignoring SIGXFSZ so that a file size limit is an error,
            // not a death, and the probe can report it.
            unsafe { libc::signal(libc::SIGXFSZ, libc::SIG_IGN) };
            let mut f = match std::fs::File::create(path) {
                Ok(f) => f,
                Err(e) => return contained(format!("create {path}: {e}")),
            };
            let block = vec![0x5au8; 1 << 20];
            for i in 0..mb {
                if let Err(e) = f.write_all(&block).and_then(|()| f.sync_data()) {
                    return contained(format!("write stopped after {i} MiB: {e}"));
                }
            }
            escaped(format!("wrote {mb} MiB to {path}"))
        }
        "spin" => loop {
            std::hint::spin_loop();
        },
        // ---- persistence ----
        "daemonize" => {
            // Leave a grandchild in a session of its own, then end.
            let marker = arg(args, 0).to_string();
            let exe = std::env::current_exe().unwrap_or_default();
            // SAFETY: the child calls setsid, then execs (or exits).
            match unsafe { libc::fork() } {
                0 => {
                    // SAFETY: as above.
                    unsafe { libc::setsid() };
                    let e = cstr(&exe.to_string_lossy());
                    let (a0, a1, a2) = (cstr("warden"), cstr("__probe"), cstr("sleep-marker"));
                    let m = cstr(&marker);
                    let argv = [
                        a0.as_ptr(),
                        a1.as_ptr(),
                        a2.as_ptr(),
                        m.as_ptr(),
                        std::ptr::null(),
                    ];
                    // SAFETY: argv is NULL-terminated and outlives the call;
                    // on failure the child exits at once.
                    unsafe {
                        if libc::fork() == 0 {
                            libc::execv(e.as_ptr(), argv.as_ptr());
                        }
                        libc::_exit(0)
                    }
                }
                -1 => escaped("fork failed before the attempt"),
                _ => contained("left a daemon behind (the host judges whether it survives)"),
            }
        }
        "sleep-marker" => {
            std::thread::sleep(Duration::from_secs(60));
            contained("slept")
        }
        // ---- secrets ----
        "find-value-file" => {
            // Look for a host value (read from a file, so that it is on no
            // command line) in the places a process can read.
            let needle = std::fs::read(arg(args, 0)).unwrap_or_default();
            if needle.is_empty() {
                return escaped("no value to look for was given");
            }
            let mut found = Vec::new();
            for (k, v) in std::env::vars_os() {
                if v.to_string_lossy()
                    .as_bytes()
                    .windows(needle.len())
                    .any(|w| w == needle)
                {
                    found.push(format!("environment variable {}", k.to_string_lossy()));
                }
            }
            for p in [
                "/proc/self/environ",
                "/proc/1/environ",
                "/proc/1/cmdline",
                "/proc/self/cmdline",
            ] {
                if let Ok(b) = std::fs::read(p) {
                    if b.windows(needle.len()).any(|w| w == needle.as_slice()) {
                        found.push(p.to_string());
                    }
                }
            }
            if found.is_empty() {
                contained("the value is in no environment or readable /proc file")
            } else {
                escaped(format!("found in {}", found.join(", ")))
            }
        }
        // ---- across sandboxes ----
        "listen-once" => {
            let p = port(args, 0);
            match std::net::TcpListener::bind(("127.0.0.1", p)) {
                Err(e) => escaped(format!("cannot listen on {p}: {e}")),
                Ok(l) => {
                    let _ = l.set_nonblocking(true);
                    let deadline = std::time::Instant::now() + Duration::from_secs(5);
                    while std::time::Instant::now() < deadline {
                        if l.accept().is_ok() {
                            return escaped("another sandbox connected");
                        }
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    contained("nobody connected")
                }
            }
        }
        "write-then-wait" => {
            let _ = std::fs::write(arg(args, 0), b"sandbox-a");
            std::thread::sleep(Duration::from_secs(5));
            contained("still alive")
        }
        _ => escaped(format!("unknown probe {name:?}: nothing was tried")),
    }
}
