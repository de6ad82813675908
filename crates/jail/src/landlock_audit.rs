//! Landlock's refusals inside a sandbox, read from the kernel's audit log.
//!
//! With an exec allowlist the sandbox's Landlock domain is created with
//! `LANDLOCK_RESTRICT_SELF_LOG_NEW_EXEC_ON` (see [`crate::landlock`]): each
//! access the domain refuses to a program the sandbox runs, however deep
//! (a shell's child), becomes an audit record, `LANDLOCK_ACCESS`, written by
//! the kernel at the moment it refuses, naming the file as the sandbox sees
//! it and the right that was missing. The first refusal of a domain is
//! followed by a `LANDLOCK_DOMAIN` record naming the process that made the
//! domain: the sandbox's init, whose host PID the supervisor knows. So a
//! record is the kernel's own word that a program was refused, never a
//! guess from the sandbox's memory.
//!
//! What it needs: the kernel's audit enabled (`auditctl -e 1`, or an
//! `auditd`), and a reader in the host's first user namespace with
//! `CAP_AUDIT_READ` (root): the records are multicast on the audit netlink
//! socket's read-log group. A rootless supervisor gets none. This module
//! never changes the host's audit settings.
//!
//! What it does not see: a refusal that is not Landlock's. An exec of a
//! file on a `noexec` mount (every writable place, sealed by
//! [`crate::exec_rules::seal`]) is refused by the mount in `may_open`,
//! before the file-open hook where Landlock decides, and leaves no record
//! here. The program directories are therefore not sealed by the mount:
//! their other programs are Landlock's to refuse (see `landlock::carve`).

use nix::errno::Errno;
use nix::sys::socket::{
    bind, recv, sendto, socket, AddressFamily, MsgFlags, NetlinkAddr, SockFlag, SockProtocol,
    SockType,
};
use std::collections::HashSet;
use std::ffi::OsString;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStringExt;
use std::path::PathBuf;

/// `AUDIT_GET`: the kernel's audit status.
const AUDIT_GET: u16 = 1000;
/// A record written by a program (`AUDIT_USER`).
const AUDIT_USER: u16 = 1005;
/// A Landlock refusal: `domain=ID blockers=RIGHTS path=... dev=... ino=...`.
const AUDIT_LANDLOCK_ACCESS: u16 = 1423;
/// A Landlock domain's life: `domain=ID status=allocated ... pid=PID ...`.
const AUDIT_LANDLOCK_DOMAIN: u16 = 1424;
/// The multicast group of audit records for readers (`AUDIT_NLGRP_READLOG`).
const AUDIT_NLGRP_READLOG: u32 = 1;
/// Refusals of domains not yet known to be ours, kept until their domain's
/// first record says whose they are; beyond this the oldest go.
const PENDING_MAX: usize = 256;

/// Why refusals inside the sandbox cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    #[error("the kernel's audit is off (auditctl -e 1, or an auditd, turns it on)")]
    Off,
    #[error("cannot read the kernel's audit records (root in the host's user namespace with CAP_AUDIT_READ can)")]
    Socket(#[source] Errno),
    #[error("the kernel gave no audit status")]
    NoStatus,
}

/// One refusal by the sandbox's Landlock domain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The rights that were missing, as the kernel names them
    /// (`fs.execute`, `fs.write_file`, ...).
    pub blockers: String,
    /// The file, as the refused process saw it.
    pub path: Option<PathBuf>,
}

impl Refusal {
    /// An exec the allowlist refused.
    pub fn is_exec(&self) -> bool {
        self.blockers.split(',').any(|b| b == "fs.execute")
    }

    /// A program of a program directory that the allowlist refused to
    /// open at all: how the loader run directly (`ld.so /usr/bin/curl`)
    /// is stopped (see `landlock::carve`). Only an allowlist makes such a
    /// file unreadable, so its refusal is the allowlist's.
    pub fn is_sealed_program(&self) -> bool {
        self.blockers.split(',').any(|b| b == "fs.read_file")
            && self.path.as_ref().is_some_and(|p| {
                crate::exec_rules::PROGRAM_DIRS
                    .iter()
                    .any(|d| p.starts_with(d))
            })
    }
}

/// A subscription to the kernel's audit records, and what it learnt of
/// which Landlock domains are this sandbox's.
#[derive(Debug)]
pub struct AuditWatch {
    fd: OwnedFd,
    /// The host PID of the process that made the domain (the init).
    init: Option<i32>,
    ours: HashSet<u64>,
    others: HashSet<u64>,
    pending: Vec<(u64, Refusal)>,
    /// Records the kernel dropped because this reader was behind.
    pub lost: u64,
}

impl AuditWatch {
    /// Subscribe, before the sandbox can be refused anything. Fails when
    /// the kernel's audit is off or the caller may not read it.
    pub fn open() -> Result<Self, AuditError> {
        if !audit_enabled()? {
            return Err(AuditError::Off);
        }
        let fd = socket(
            AddressFamily::Netlink,
            SockType::Raw,
            SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK,
            SockProtocol::NetlinkAudit,
        )
        .map_err(AuditError::Socket)?;
        bind(
            std::os::fd::AsRawFd::as_raw_fd(&fd),
            &NetlinkAddr::new(0, AUDIT_NLGRP_READLOG),
        )
        .map_err(AuditError::Socket)?;
        Ok(AuditWatch {
            fd,
            init: None,
            ours: HashSet::new(),
            others: HashSet::new(),
            pending: Vec::new(),
            lost: 0,
        })
    }

    /// The host PID of the process that restricts itself (the init).
    pub fn set_init(&mut self, pid: i32) {
        self.init = Some(pid);
    }

    /// What to poll for records.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Every refusal of this sandbox that the kernel has written since the
    /// last call (never blocks).
    pub fn drain(&mut self) -> Vec<Refusal> {
        let mut out = Vec::new();
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            let n = match recv(
                std::os::fd::AsRawFd::as_raw_fd(&self.fd),
                &mut buf,
                MsgFlags::empty(),
            ) {
                Ok(0) => break,
                Ok(n) => n,
                Err(Errno::EINTR) => continue,
                // The kernel's queue for this reader overflowed.
                Err(Errno::ENOBUFS) => {
                    self.lost += 1;
                    continue;
                }
                Err(_) => break,
            };
            for (kind, text) in messages(buf.get(..n).unwrap_or_default()) {
                self.take(kind, text, &mut out);
            }
        }
        out
    }

    /// What is still on its way once the sandbox is gone. The kernel
    /// queues records and sends them from a thread of its own, so a
    /// refusal just before the end may arrive after it: a record of our
    /// own (`AUDIT_USER`, naming `tag`) is queued behind it, and reading
    /// up to that record reads everything before. Bounded by `limit`.
    pub fn settle(&mut self, tag: &str, limit: std::time::Duration) -> Vec<Refusal> {
        let mut out = Vec::new();
        let marker = format!("warden sandbox {tag} ended");
        if write_user_record(&marker).is_err() {
            return out;
        }
        let until = std::time::Instant::now() + limit;
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            let left = until.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return out;
            }
            let mut fds = [nix::poll::PollFd::new(
                self.fd.as_fd(),
                nix::poll::PollFlags::POLLIN,
            )];
            let ms = u16::try_from(left.as_millis()).unwrap_or(u16::MAX);
            match nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(ms)) {
                Ok(0) => return out,
                Ok(_) | Err(Errno::EINTR) => {}
                Err(_) => return out,
            }
            let n = match recv(
                std::os::fd::AsRawFd::as_raw_fd(&self.fd),
                &mut buf,
                MsgFlags::empty(),
            ) {
                Ok(n) => n,
                Err(Errno::ENOBUFS) => {
                    self.lost += 1;
                    continue;
                }
                Err(_) => continue,
            };
            let mut seen = false;
            for (kind, text) in messages(buf.get(..n).unwrap_or_default()) {
                if kind == AUDIT_USER && text.windows(marker.len()).any(|w| w == marker.as_bytes())
                {
                    seen = true;
                }
                self.take(kind, text, &mut out);
            }
            if seen {
                return out;
            }
        }
    }

    fn take(&mut self, kind: u16, text: &[u8], out: &mut Vec<Refusal>) {
        let body = record_body(text);
        match kind {
            AUDIT_LANDLOCK_ACCESS => {
                let Some(domain) = field(body, "domain").and_then(hex_id) else {
                    return;
                };
                let refusal = Refusal {
                    blockers: field(body, "blockers")
                        .map(|b| String::from_utf8_lossy(b).into_owned())
                        .unwrap_or_default(),
                    path: field(body, "path").and_then(untrusted).map(PathBuf::from),
                };
                if self.ours.contains(&domain) {
                    out.push(refusal);
                } else if !self.others.contains(&domain) {
                    if self.pending.len() >= PENDING_MAX {
                        self.pending.remove(0);
                    }
                    self.pending.push((domain, refusal));
                }
            }
            AUDIT_LANDLOCK_DOMAIN => {
                if field(body, "status") != Some(b"allocated".as_slice()) {
                    return;
                }
                let (Some(domain), Some(pid)) = (
                    field(body, "domain").and_then(hex_id),
                    field(body, "pid").and_then(|p| std::str::from_utf8(p).ok()?.parse().ok()),
                ) else {
                    return;
                };
                let mine = self.init == Some(pid);
                if mine {
                    self.ours.insert(domain);
                } else {
                    self.others.insert(domain);
                }
                let (matched, rest) = std::mem::take(&mut self.pending)
                    .into_iter()
                    .partition::<Vec<_>, _>(|(d, _)| *d == domain);
                self.pending = rest;
                if mine {
                    out.extend(matched.into_iter().map(|(_, r)| r));
                }
            }
            _ => {}
        }
    }
}

/// One request to the kernel's audit: a netlink header and `payload`.
fn request(kind: u16, payload: &[u8]) -> Result<OwnedFd, AuditError> {
    let fd = socket(
        AddressFamily::Netlink,
        SockType::Raw,
        SockFlag::SOCK_CLOEXEC,
        SockProtocol::NetlinkAudit,
    )
    .map_err(AuditError::Socket)?;
    let len = u32::try_from(16 + payload.len()).map_err(|_| AuditError::Socket(Errno::E2BIG))?;
    // struct nlmsghdr: length, type, flags (NLM_F_REQUEST), sequence, port.
    let mut req = Vec::with_capacity(16 + payload.len());
    req.extend_from_slice(&len.to_ne_bytes());
    req.extend_from_slice(&kind.to_ne_bytes());
    req.extend_from_slice(&1u16.to_ne_bytes());
    req.extend_from_slice(&1u32.to_ne_bytes());
    req.extend_from_slice(&0u32.to_ne_bytes());
    req.extend_from_slice(payload);
    sendto(
        std::os::fd::AsRawFd::as_raw_fd(&fd),
        &req,
        &NetlinkAddr::new(0, 0),
        MsgFlags::empty(),
    )
    .map_err(AuditError::Socket)?;
    Ok(fd)
}

/// A record of warden's own in the kernel's audit log (`CAP_AUDIT_WRITE`).
fn write_user_record(text: &str) -> Result<(), AuditError> {
    let mut payload = text.as_bytes().to_vec();
    payload.push(0);
    request(AUDIT_USER, &payload).map(drop)
}

/// Whether the kernel's audit is on (`AUDIT_GET`'s `enabled`).
pub fn audit_enabled() -> Result<bool, AuditError> {
    let fd = request(AUDIT_GET, &[])?;
    let raw = std::os::fd::AsRawFd::as_raw_fd(&fd);
    let mut buf = [0u8; 1024];
    // A few replies at most: an error (refused) or the status.
    for _ in 0..4 {
        let n = recv(raw, &mut buf, MsgFlags::empty()).map_err(AuditError::Socket)?;
        for (kind, body) in messages(buf.get(..n).unwrap_or_default()) {
            match kind {
                AUDIT_GET => {
                    // struct audit_status: mask, enabled, ...
                    let enabled = body.get(4..8).ok_or(AuditError::NoStatus)?;
                    let mut word = [0u8; 4];
                    word.copy_from_slice(enabled);
                    return Ok(u32::from_ne_bytes(word) != 0);
                }
                // NLMSG_ERROR: a negative errno first.
                2 => {
                    let mut word = [0u8; 4];
                    word.copy_from_slice(body.get(..4).ok_or(AuditError::NoStatus)?);
                    let code = i32::from_ne_bytes(word);
                    if code != 0 {
                        return Err(AuditError::Socket(Errno::from_raw(-code)));
                    }
                }
                _ => {}
            }
        }
    }
    Err(AuditError::NoStatus)
}

/// The netlink messages of one datagram: type and payload.
fn messages(mut buf: &[u8]) -> Vec<(u16, &[u8])> {
    let mut out = Vec::new();
    while buf.len() >= 16 {
        let mut len = [0u8; 4];
        len.copy_from_slice(&buf[..4]);
        let len = u32::from_ne_bytes(len) as usize;
        let kind = u16::from_ne_bytes([buf[4], buf[5]]);
        // The audit subsystem's multicast copies do not count the header
        // in their length on some kernels; take what the datagram holds.
        let end = if len >= 16 && len <= buf.len() {
            len
        } else {
            buf.len()
        };
        out.push((kind, &buf[16..end]));
        let next = (end + 3) & !3;
        buf = buf.get(next..).unwrap_or_default();
    }
    out
}

/// A record's text after its `audit(TIME:SERIAL): ` stamp, NULs trimmed.
fn record_body(text: &[u8]) -> &[u8] {
    let text = match text.iter().position(|&b| b == 0) {
        Some(i) => &text[..i],
        None => text,
    };
    match text.windows(3).position(|w| w == b"): ") {
        Some(i) if text.starts_with(b"audit(") => &text[i + 3..],
        _ => text,
    }
}

/// The value of `key=` among a record's space-separated fields (a quoted
/// value keeps its quotes; quoted values hold no space, see [`untrusted`]).
fn field<'a>(body: &'a [u8], key: &str) -> Option<&'a [u8]> {
    body.split(|&b| b == b' ').find_map(|kv| {
        let rest = kv.strip_prefix(key.as_bytes())?;
        rest.strip_prefix(b"=")
    })
}

/// A domain's ID, written in hexadecimal.
fn hex_id(v: &[u8]) -> Option<u64> {
    u64::from_str_radix(std::str::from_utf8(v).ok()?, 16).ok()
}

/// A string the kernel logged as untrusted: quoted when it holds only
/// plain characters, else hexadecimal (a name with a space, a quote or a
/// control character, which the sandbox chooses).
fn untrusted(v: &[u8]) -> Option<OsString> {
    if let Some(inner) = v.strip_prefix(b"\"").and_then(|s| s.strip_suffix(b"\"")) {
        return Some(OsString::from_vec(inner.to_vec()));
    }
    if !v.len().is_multiple_of(2) {
        return None;
    }
    let text = std::str::from_utf8(v).ok()?;
    let bytes = (0..v.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect::<Option<Vec<u8>>>()?;
    Some(OsString::from_vec(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn watch_for(init: i32) -> AuditWatch {
        let fd = socket(
            AddressFamily::Unix,
            SockType::Datagram,
            SockFlag::SOCK_CLOEXEC,
            None,
        )
        .unwrap();
        AuditWatch {
            fd,
            init: Some(init),
            ours: HashSet::new(),
            others: HashSet::new(),
            pending: Vec::new(),
            lost: 0,
        }
    }

    const ACCESS: &[u8] = b"audit(1795972683.242:49): domain=1bd48216a blockers=fs.execute path=\"/usr/lib/apt/methods/http\" dev=\"vda\" ino=256801";

    #[test]
    fn a_refusal_is_ours_once_its_domain_names_our_init() {
        let mut w = watch_for(11166);
        let mut out = Vec::new();
        w.take(AUDIT_LANDLOCK_ACCESS, ACCESS, &mut out);
        assert!(out.is_empty(), "not known to be ours yet");
        w.take(
            AUDIT_LANDLOCK_DOMAIN,
            b"audit(1795972683.242:49): domain=1bd48216a status=allocated mode=enforcing pid=11166 uid=65534 exe=\"/w\" comm=\"warden\"",
            &mut out,
        );
        assert_eq!(
            out,
            vec![Refusal {
                blockers: "fs.execute".into(),
                path: Some("/usr/lib/apt/methods/http".into()),
            }]
        );
        assert!(out[0].is_exec());
        out.clear();
        w.take(AUDIT_LANDLOCK_ACCESS, ACCESS, &mut out);
        assert_eq!(
            out.len(),
            1,
            "later refusals of the domain are ours at once"
        );
    }

    #[test]
    fn another_sandboxs_refusal_is_never_ours() {
        let mut w = watch_for(1);
        let mut out = Vec::new();
        w.take(AUDIT_LANDLOCK_ACCESS, ACCESS, &mut out);
        w.take(
            AUDIT_LANDLOCK_DOMAIN,
            b"audit(1:2): domain=1bd48216a status=allocated mode=enforcing pid=11166",
            &mut out,
        );
        w.take(AUDIT_LANDLOCK_ACCESS, ACCESS, &mut out);
        assert!(out.is_empty());
    }

    #[test]
    fn a_path_the_kernel_wrote_in_hexadecimal_is_decoded() {
        assert_eq!(
            untrusted(b"2F746D702F6120622063").unwrap(),
            OsString::from("/tmp/a b c")
        );
        assert_eq!(untrusted(b"\"/bin/x\"").unwrap(), OsString::from("/bin/x"));
        assert!(untrusted(b"zz").is_none());
    }
}
