//! The keeper of a guest's shares: the one process of the guest that keeps
//! the privileges the init gives up, so that a pause to disk can give the
//! shares back to the VMM and take them again after the resume.
//!
//! QEMU 7.2 will not save a guest while one of its 9p exports is attached:
//! the first attach of an export adds a migration blocker, and only the
//! clunk of that attach's root fid (the guest's unmount of the share, once
//! nothing of it is open) removes it; what the 9p server holds for the
//! guest (its open fids) is no part of a snapshot. So before a save the
//! keeper freezes every process of the sandbox with the guest's cgroup v2
//! freezer (invisible to them, unlike SIGSTOP), checks that none holds
//! anything in a share (an open file, a mapping, a working directory),
//! and unmounts every 9p mount and what lies beneath one; after the
//! resume it mounts them as the init first did, steps the clock and lets
//! the processes go on. A share a process holds is not taken from it: the
//! release is refused, naming the process and what it holds, and nothing
//! changes.
//!
//! It is forked by the init before the init drops its privileges and
//! before any process or thread of the sandbox exists; it is reached only
//! over a socket pair whose other end the init holds (close-on-exec), it
//! makes itself undumpable (no process of the sandbox may read or trace
//! it), and it does nothing but the two requests below.

use super::params::{attach_shares, Params};
use super::GuestError;
use crate::wire::Reattach;
use nix::mount::{umount2, MntFlags, MsFlags};
use serde::{Deserialize, Serialize};
use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// What the init asks its keeper.
#[derive(Debug, Serialize, Deserialize)]
enum Ask {
    Release,
    Reattach(Reattach),
}

/// The init's end of the keeper's socket.
pub(in crate::guest) struct Keeper {
    stream: UnixStream,
}

/// How long the init waits for its keeper (a freeze, the unmounts, or the
/// mounts of a guest under emulation).
const ANSWER_WITHIN: Duration = Duration::from_secs(60);

impl Keeper {
    fn ask(&mut self, ask: &Ask) -> Option<String> {
        let gone =
            |e: std::io::Error| Some(format!("the guest's keeper of its shares is gone ({e})"));
        let mut line = serde_json::to_vec(ask).unwrap_or_default();
        line.push(b'\n');
        if let Err(e) = self.stream.write_all(&line) {
            return gone(e);
        }
        let _ = self.stream.set_read_timeout(Some(ANSWER_WITHIN));
        let mut answer = String::new();
        let read = self
            .stream
            .try_clone()
            .and_then(|s| BufReader::new(s).read_line(&mut answer));
        match read {
            Ok(0) => gone(std::io::ErrorKind::UnexpectedEof.into()),
            Ok(_) => serde_json::from_str::<Option<String>>(&answer)
                .unwrap_or_else(|e| Some(format!("the guest's keeper answered garbled ({e})"))),
            Err(e) => gone(e),
        }
    }

    /// Freeze the sandbox and unmount its shares: `None` when done, else
    /// why not (nothing changed).
    pub(in crate::guest) fn release(&mut self) -> Option<String> {
        self.ask(&Ask::Release)
    }

    /// Mount the shares again, step the clock, let the processes go on.
    pub(in crate::guest) fn reattach(&mut self, r: Reattach) -> Option<String> {
        self.ask(&Ask::Reattach(r))
    }
}

/// Fork the keeper.
#[allow(unsafe_code)]
pub(in crate::guest) fn start(p: &Params) -> Result<Keeper, GuestError> {
    let (ours, theirs) = UnixStream::pair().map_err(|e| {
        GuestError::Keeper(nix::errno::Errno::from_raw(
            e.raw_os_error().unwrap_or(nix::libc::EIO),
        ))
    })?;
    // SAFETY: the init is single-threaded here (it starts its first thread
    // when it serves, after this), so the child may run any code: no lock
    // another thread held at the fork exists.
    match unsafe { nix::unistd::fork() } {
        Ok(nix::unistd::ForkResult::Child) => {
            drop(ours);
            keep(theirs, p.clone());
            std::process::exit(0)
        }
        Ok(nix::unistd::ForkResult::Parent { .. }) => Ok(Keeper { stream: ours }),
        Err(e) => Err(GuestError::Keeper(e)),
    }
}

/// The keeper's life: one answer per request, until the init's end closes.
fn keep(stream: UnixStream, p: Params) {
    let _ = nix::sys::prctl::set_dumpable(false);
    close_all_but(stream.as_raw_fd());
    let freezer = Freezer::open();
    let mut released = false;
    let Ok(reader) = stream.try_clone() else {
        return;
    };
    let mut out = stream;
    for line in BufReader::new(reader).lines() {
        let Ok(line) = line else { return };
        let answer = match serde_json::from_str::<Ask>(&line) {
            Ok(Ask::Release) if released => None,
            Ok(Ask::Release) => match &freezer {
                Ok(f) => {
                    let a = release(f, &p);
                    released = a.is_none();
                    a
                }
                Err(why) => Some(why.clone()),
            },
            Ok(Ask::Reattach(r)) => {
                let a = reattach(freezer.as_ref().ok(), &p, released, &r);
                released = released && a.is_some();
                a
            }
            Err(e) => Some(format!("the keeper could not read its request ({e})")),
        };
        let mut bytes = serde_json::to_vec(&answer).unwrap_or_default();
        bytes.push(b'\n');
        if out.write_all(&bytes).is_err() {
            return;
        }
    }
}

/// Close every descriptor the fork gave the keeper but its socket (the
/// guest's channel among them).
fn close_all_but(keep: i32) {
    let fds: Vec<i32> = std::fs::read_dir("/proc/self/fd")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect();
    for fd in fds.into_iter().filter(|fd| *fd > 2 && *fd != keep) {
        let _ = nix::unistd::close(fd);
    }
}

/// The guest's cgroup v2 hierarchy, mounted nowhere a process of the
/// sandbox sees: mounted, opened and detached again while the keeper
/// starts, reached afterwards only through its descriptor.
struct Freezer {
    root: File,
}

const FROZEN: &str = "frozen";

impl Freezer {
    fn open() -> Result<Freezer, String> {
        let at = Path::new("/.keeper-cgroup");
        let why = |what: &str, e: &dyn std::fmt::Display| {
            format!("the guest has no cgroup freezer: cannot {what} ({e})")
        };
        std::fs::create_dir_all(at).map_err(|e| why("make its mount point", &e))?;
        let mounted = nix::mount::mount(
            Some("cgroup2"),
            at,
            Some("cgroup2"),
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
            None::<&str>,
        );
        let opened = mounted
            .map_err(|e| why("mount cgroup2", &e))
            .and_then(|()| File::open(at).map_err(|e| why("open cgroup2", &e)));
        let made = opened.and_then(|root| match std::fs::create_dir(at.join(FROZEN)) {
            Ok(()) => Ok(root),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(root),
            Err(e) => Err(why("make its cgroup", &e)),
        });
        let _ = umount2(at, MntFlags::MNT_DETACH);
        let _ = std::fs::remove_dir(at);
        made.map(|root| Freezer { root })
    }

    fn path(&self, rel: &str) -> PathBuf {
        PathBuf::from(format!("/proc/self/fd/{}/{rel}", self.root.as_raw_fd()))
    }

    /// Freeze every process but the init and the keeper: frozen first, so
    /// that a process moved in (or forked by one there) stops at once;
    /// moved until a pass finds none left outside.
    fn freeze(&self) -> Result<(), String> {
        std::fs::write(self.path("frozen/cgroup.freeze"), "1")
            .map_err(|e| format!("cannot freeze the guest's processes ({e})"))?;
        let procs = self.path("frozen/cgroup.procs");
        for _ in 0..50 {
            let mut moved = 0;
            for pid in sandbox_pids() {
                if !in_frozen(pid) && std::fs::write(&procs, pid.to_string()).is_ok() {
                    moved += 1;
                }
            }
            if moved == 0 {
                break;
            }
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let events =
                std::fs::read_to_string(self.path("frozen/cgroup.events")).unwrap_or_default();
            if events.lines().any(|l| l == "frozen 1") {
                return Ok(());
            }
            if Instant::now() > deadline {
                self.thaw();
                return Err("the guest's processes did not freeze within 10 s".into());
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Let them go on, back in the cgroup they came from (their
    /// `/proc/self/cgroup` shows nothing of the pause).
    fn thaw(&self) {
        let _ = std::fs::write(self.path("frozen/cgroup.freeze"), "0");
        let procs = std::fs::read_to_string(self.path("frozen/cgroup.procs")).unwrap_or_default();
        for pid in procs.lines() {
            let _ = std::fs::write(self.path("cgroup.procs"), pid);
        }
    }
}

/// Every process of the guest but the init, the keeper and the kernel's
/// threads.
fn sandbox_pids() -> Vec<i32> {
    let me = std::process::id() as i32;
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| *pid != 1 && *pid != me)
        .filter(|pid| {
            // A kernel thread has no program: its `exe` reads as nothing.
            std::fs::read_link(format!("/proc/{pid}/exe")).is_ok()
        })
        .collect()
}

fn in_frozen(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
        .is_ok_and(|c| c.lines().any(|l| l == format!("0::/{FROZEN}")))
}

/// One line of `/proc/self/mountinfo`: where, and of what file system.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Mounted {
    point: PathBuf,
    fstype: String,
    source: String,
}

/// A mount point as the kernel escapes it (`\040` for a space, ...).
fn unescape(s: &str) -> PathBuf {
    use std::os::unix::ffi::OsStringExt;
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match (b[i], octal) {
            (b'\\', Some(d)) => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    PathBuf::from(std::ffi::OsString::from_vec(out))
}

fn parse_mountinfo(text: &str) -> Vec<Mounted> {
    text.lines()
        .filter_map(|l| {
            let (left, right) = l.split_once(" - ")?;
            let point = unescape(left.split(' ').nth(4)?);
            let mut r = right.split(' ');
            let fstype = r.next()?.to_string();
            let source = r.next().unwrap_or_default().to_string();
            Some(Mounted {
                point,
                fstype,
                source,
            })
        })
        .collect()
}

/// The mounts to give back, in the order they were made: each 9p mount
/// and each mount beneath one; or why the guest cannot give them back.
fn share_mounts(all: &[Mounted]) -> Result<Vec<Mounted>, String> {
    let nine: Vec<&Mounted> = all.iter().filter(|m| m.fstype == "9p").collect();
    if let Some(m) = nine
        .iter()
        .find(|m| m.source == "usr" || m.source == "root")
    {
        return Err(format!(
            "the guest's system directories ({}) are a 9p share, from which its programs run",
            m.point.display()
        ));
    }
    Ok(all
        .iter()
        .filter(|m| m.fstype == "9p" || nine.iter().any(|n| m.point.starts_with(&n.point)))
        .cloned()
        .collect())
}

/// What processes hold beneath `points`, in words (at most a few).
fn holders(points: &[PathBuf]) -> Vec<String> {
    let beneath = |p: &Path| points.iter().any(|m| p.starts_with(m));
    let me = std::process::id() as i32;
    let mut found = Vec::new();
    let pids = std::iter::once(1)
        .chain(sandbox_pids())
        .filter(|p| *p != me);
    for pid in pids {
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        let who = format!("process {pid} ({})", comm.trim());
        for (link, what) in [
            ("cwd", "has its working directory in"),
            ("root", "has its root in"),
            ("exe", "runs"),
        ] {
            if let Ok(p) = std::fs::read_link(format!("/proc/{pid}/{link}")) {
                if beneath(&p) {
                    found.push(format!("{who} {what} {}", p.display()));
                }
            }
        }
        let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
            .into_iter()
            .flatten();
        for fd in fds.flatten() {
            if let Ok(p) = std::fs::read_link(fd.path()) {
                if beneath(&p) {
                    found.push(format!("{who} has {} open", p.display()));
                }
            }
        }
        let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
        for l in maps.lines() {
            if let Some(path) = l.split_whitespace().nth(5) {
                if beneath(Path::new(path)) {
                    found.push(format!("{who} has {path} mapped"));
                }
            }
        }
    }
    found.dedup();
    found
}

/// Freeze, check, unmount; on a refusal everything is as it was.
fn release(freezer: &Freezer, p: &Params) -> Option<String> {
    let all = parse_mountinfo(&std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default());
    let mounts = match share_mounts(&all) {
        Ok(m) => m,
        Err(why) => return Some(why),
    };
    if let Err(why) = freezer.freeze() {
        return Some(why);
    }
    let points: Vec<PathBuf> = mounts.iter().map(|m| m.point.clone()).collect();
    let held = holders(&points);
    if !held.is_empty() {
        freezer.thaw();
        let more = held.len().saturating_sub(4);
        let mut said = held.into_iter().take(4).collect::<Vec<_>>().join("; ");
        if more > 0 {
            said.push_str(&format!("; and {more} more"));
        }
        return Some(format!(
            "a process of the sandbox holds a share, which cannot be unmounted under it: {said}"
        ));
    }
    for (i, m) in mounts.iter().enumerate().rev() {
        if let Err(e) = umount2(&m.point, MntFlags::empty()) {
            // Unforeseen (nothing held them): the rest goes too, lazily,
            // and the shares are mounted anew as they were.
            for rest in mounts[..=i].iter().rev() {
                let _ = umount2(&rest.point, MntFlags::MNT_DETACH);
            }
            let again = attach_shares(p).err();
            freezer.thaw();
            let mut why = format!("cannot unmount {} ({e})", m.point.display());
            if let Some(a) = again {
                why.push_str(&format!(
                    "; mounting the shares again failed too ({})",
                    warden_jail::chain_str(&a)
                ));
            }
            return Some(why);
        }
    }
    None
}

/// Mount what was released, step the clock (and, for a copy, reseed and
/// take its own hostname), and thaw.
fn reattach(freezer: Option<&Freezer>, p: &Params, released: bool, r: &Reattach) -> Option<String> {
    if released {
        if let Err(e) = attach_shares(p) {
            return Some(format!(
                "cannot mount the shares again ({})",
                warden_jail::chain_str(&e)
            ));
        }
    }
    if let Some(seed) = &r.seed {
        if seed.len() < 32 || super::entropy::reseed(seed).is_err() {
            return Some("cannot reseed the guest's random generator".into());
        }
    }
    if let Some(h) = &r.hostname {
        if let Err(e) = nix::unistd::sethostname(h) {
            return Some(format!("cannot set the hostname ({e})"));
        }
    }
    let _ = super::entropy::set_clock(r.clock.0, r.clock.1);
    if let Some(f) = freezer {
        f.thaw();
    }
    None
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const INFO: &str = "\
1 0 0:2 / / rw - rootfs rootfs rw
20 1 254:0 / /usr ro,nosuid - ext4 /dev/vda ro
30 1 0:30 / /workspace rw,nosuid - 9p workspace rw,trans=virtio
31 30 0:31 / /workspace/.warden ro - tmpfs tmpfs ro
32 1 0:32 / /tmp rw - tmpfs tmpfs rw
33 1 0:33 / /srv/my\\040data rw - 9p b1 rw,trans=virtio
";

    #[test]
    fn the_mounts_given_back_are_the_9p_shares_and_what_lies_beneath_them_in_mount_order() {
        let all = parse_mountinfo(INFO);
        let got: Vec<PathBuf> = share_mounts(&all)
            .unwrap()
            .into_iter()
            .map(|m| m.point)
            .collect();
        assert_eq!(
            got,
            ["/workspace", "/workspace/.warden", "/srv/my data"]
                .iter()
                .map(PathBuf::from)
                .collect::<Vec<_>>()
        );
    }

    #[test]
    fn system_directories_over_9p_cannot_be_given_back() {
        let info = format!("{INFO}40 1 0:40 / /usr ro - 9p usr ro,trans=virtio\n");
        let why = share_mounts(&parse_mountinfo(&info)).unwrap_err();
        assert!(why.contains("system directories"), "{why}");
    }
}
