//! The host's socket table, read from `/proc`: which sockets listen, and
//! which of them a process holds, to prove that a feature opened nothing
//! on the host (loopback included).
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeSet;

/// One listening socket of the host's (this process's) network namespace.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Listening {
    /// `tcp`, `tcp6`, `udp`, `udp6` or `unix`.
    pub proto: &'static str,
    /// The local port (0 for a Unix socket).
    pub port: u16,
    pub inode: u64,
    /// The Unix socket's path, if it has one.
    pub path: String,
}

/// Every listening socket of this network namespace: TCP in LISTEN, UDP
/// bound, Unix sockets accepting connections.
pub fn listening() -> BTreeSet<Listening> {
    let mut out = BTreeSet::new();
    for (proto, listen_state) in [("tcp", "0A"), ("tcp6", "0A"), ("udp", "07"), ("udp6", "07")] {
        let text = std::fs::read_to_string(format!("/proc/net/{proto}")).unwrap_or_default();
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() < 10 || f[3] != listen_state {
                continue;
            }
            let port = f[1]
                .rsplit(':')
                .next()
                .and_then(|p| u16::from_str_radix(p, 16).ok())
                .unwrap_or(0);
            out.insert(Listening {
                proto,
                port,
                inode: f[9].parse().unwrap_or(0),
                path: String::new(),
            });
        }
    }
    let text = std::fs::read_to_string("/proc/net/unix").unwrap_or_default();
    for line in text.lines().skip(1) {
        let f: Vec<&str> = line.split_whitespace().collect();
        // Flags 00010000: __SO_ACCEPTCON, a listening socket.
        if f.len() < 7 || f[3] != "00010000" {
            continue;
        }
        out.insert(Listening {
            proto: "unix",
            port: 0,
            inode: f[6].parse().unwrap_or(0),
            path: f.get(7).map(|s| s.to_string()).unwrap_or_default(),
        });
    }
    out
}

/// The socket inodes process `pid` holds open.
pub fn socket_inodes(pid: i32) -> BTreeSet<u64> {
    let mut out = BTreeSet::new();
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return out;
    };
    for e in dir.flatten() {
        if let Ok(target) = std::fs::read_link(e.path()) {
            let t = target.to_string_lossy();
            if let Some(n) = t.strip_prefix("socket:[").and_then(|r| r.strip_suffix(']')) {
                if let Ok(n) = n.parse() {
                    out.insert(n);
                }
            }
        }
    }
    out
}

/// The listening sockets held by any of `pids`.
pub fn listening_of(pids: &[i32]) -> BTreeSet<Listening> {
    let held: BTreeSet<u64> = pids.iter().flat_map(|p| socket_inodes(*p)).collect();
    listening()
        .into_iter()
        .filter(|l| held.contains(&l.inode))
        .collect()
}

/// Whether anything of the host listens on TCP `port` (v4 or v6).
pub fn tcp_port_listens(port: u16) -> bool {
    listening()
        .iter()
        .any(|l| l.port == port && l.proto.starts_with("tcp"))
}

/// `Request::Connect(target)` sent to the supervisor listening on
/// `control` as a raw request, without the client library's own check of
/// the target: the supervisor's reply and the descriptors that came with
/// it.
pub fn raw_connect(
    control: &std::path::Path,
    target: warden_jail::connect::Target,
) -> (warden_runtime::protocol::Reply, Vec<std::os::fd::OwnedFd>) {
    use std::os::fd::AsFd;
    use warden_runtime::protocol::{self, Reply, Request, VERSION};
    let sock = seqpacket_to(control);
    protocol::send(sock.as_fd(), &Request::Hello { version: VERSION }, &[]).unwrap();
    let _hello: (Reply, _) = protocol::receive(&sock).unwrap();
    protocol::send(sock.as_fd(), &Request::Connect(target), &[]).unwrap();
    protocol::receive(&sock).unwrap()
}

/// A connection to the supervisor listening on `control`, that has said
/// nothing yet.
pub fn seqpacket_to(control: &std::path::Path) -> std::os::fd::OwnedFd {
    use nix::sys::socket::{connect, socket, AddressFamily, SockFlag, SockType, UnixAddr};
    use std::os::fd::AsRawFd;
    let sock = socket(
        AddressFamily::Unix,
        SockType::SeqPacket,
        SockFlag::SOCK_CLOEXEC,
        None,
    )
    .unwrap();
    connect(sock.as_raw_fd(), &UnixAddr::new(control).unwrap()).unwrap();
    sock
}
