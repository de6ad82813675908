//! How runsc's sandbox process (gVisor's kernel) ended, seen from the
//! host, so that a one-shot sandbox tells its command's end from runsc's
//! own death.
//!
//! `runsc run` answers the command's status as its own, and when the
//! sandbox process dies under it (killed, the host's OOM killer, a crash
//! at the host's task bound) it answers that process's end the same way:
//! a sandbox killed with SIGKILL read as a command that exited 137. The
//! sandbox process is `runsc run`'s child, not warden's, so warden cannot
//! wait for it; the kernel's process events connector tells every
//! listener how each process ended (root only). On a normal end the
//! sandbox process exits with the command's status (a command killed by
//! a signal is an exit status of 128 and more there); ended by a signal
//! itself, it died.
//!
//! The sandbox process is recognised when it executes, by its command
//! line (`boot` under this sandbox's runsc root); nothing else is kept.
//! Where the connector cannot be listened to (rootless, a kernel without
//! it, events lost), nothing is known and runsc's answer stands.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The connector's process events (`CN_IDX_PROC`, `CN_VAL_PROC`).
const CN_IDX_PROC: u32 = 1;
const CN_VAL_PROC: u32 = 1;
const PROC_CN_MCAST_LISTEN: u32 = 1;
const PROC_CN_MCAST_IGNORE: u32 = 2;
const PROC_EVENT_EXEC: u32 = 0x0000_0002;
const PROC_EVENT_EXIT: u32 = 0x8000_0000;
/// Where an event's fields start in a datagram: the netlink header (16
/// bytes), the connector's message (20), then `proc_event`: what (4), cpu
/// (4), timestamp (8), its data.
const WHAT: usize = 36;
const DATA: usize = 52;

/// What the listener learnt.
#[derive(Default)]
struct Seen {
    sandbox: Option<i32>,
    /// The sandbox process's wait status, once it has ended.
    ended: Option<i32>,
    /// Every event up to the ask was read (or some were lost): what is
    /// known is all there is.
    done: bool,
}

/// A listener of the host's process events, for one sandbox.
pub(super) struct ExitWatch {
    socket: Arc<OwnedFd>,
    seen: Arc<Mutex<Seen>>,
    stop: Arc<AtomicBool>,
    /// Asked for the end: read what is queued, then stop.
    drain: Arc<AtomicBool>,
    /// Wakes the listener from its wait when the end is asked for.
    wake: std::os::unix::net::UnixStream,
}

impl ExitWatch {
    /// Listen for the sandbox process of the runsc whose state is `root`;
    /// `None` where the host's process events cannot be listened to.
    pub fn start(root: &std::path::Path) -> Option<ExitWatch> {
        // SAFETY: socket(2) with integer arguments; the descriptor is
        // owned at once.
        let fd = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
                libc::NETLINK_CONNECTOR,
            )
        };
        if fd < 0 {
            return None;
        }
        // SAFETY: `fd` is a new descriptor no one else owns.
        let socket = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: a zeroed sockaddr_nl is a valid value of it.
        let mut addr: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        addr.nl_family = libc::AF_NETLINK as libc::sa_family_t;
        addr.nl_groups = CN_IDX_PROC;
        // SAFETY: `addr` lives on this frame, of the size passed.
        let rc = unsafe {
            libc::bind(
                socket.as_raw_fd(),
                std::ptr::addr_of!(addr).cast(),
                std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
            )
        };
        if rc != 0 || !tell(&socket, PROC_CN_MCAST_LISTEN) {
            return None;
        }
        // A busy host's events, while this process is busy starting runsc.
        let size: libc::c_int = 4 << 20;
        // SAFETY: setsockopt reads `size`, on this frame.
        unsafe {
            libc::setsockopt(
                socket.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVBUFFORCE,
                std::ptr::addr_of!(size).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            );
        }
        let (wake, woken) = std::os::unix::net::UnixStream::pair().ok()?;
        let watch = ExitWatch {
            socket: Arc::new(socket),
            seen: Arc::default(),
            stop: Arc::default(),
            drain: Arc::default(),
            wake,
        };
        let listener = Listener {
            socket: watch.socket.clone(),
            seen: watch.seen.clone(),
            stop: watch.stop.clone(),
            drain: watch.drain.clone(),
            woken,
            root: format!("--root={}", root.display()),
        };
        std::thread::Builder::new()
            .name("warden-gvisor-exits".into())
            .spawn(move || listener.listen())
            .ok()?;
        Some(watch)
    }

    /// The sandbox process's wait status, once every event queued until
    /// now is read (its end came before `runsc run`'s, so it is among
    /// them, or follows within a second), waiting at most `limit` for the
    /// reader; `None` when it was never recognised, its end never seen or
    /// events were lost.
    pub fn sandbox_end(&self, limit: Duration) -> Option<i32> {
        self.drain.store(true, Ordering::Relaxed);
        let _ = std::io::Write::write(&mut &self.wake, &[1]);
        let start = Instant::now();
        loop {
            match self.seen.lock() {
                Ok(s) if s.done => return s.ended,
                Ok(_) if start.elapsed() < limit => {}
                _ => return None,
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

impl Drop for ExitWatch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        tell(&self.socket, PROC_CN_MCAST_IGNORE);
    }
}

/// Send the connector `op` (listen, ignore) for executions and exits
/// only (`struct proc_input`, Linux 6.6 and later: the kernel drops the
/// rest, a busy host's thread creations first, before they reach this
/// socket); whether it was sent.
fn tell(socket: &OwnedFd, op: u32) -> bool {
    let mut msg = [0u8; 44];
    msg[0..4].copy_from_slice(&44u32.to_ne_bytes());
    msg[4..6].copy_from_slice(&(libc::NLMSG_DONE as u16).to_ne_bytes());
    msg[12..16].copy_from_slice(&std::process::id().to_ne_bytes());
    msg[16..20].copy_from_slice(&CN_IDX_PROC.to_ne_bytes());
    msg[20..24].copy_from_slice(&CN_VAL_PROC.to_ne_bytes());
    msg[32..34].copy_from_slice(&8u16.to_ne_bytes());
    msg[36..40].copy_from_slice(&op.to_ne_bytes());
    msg[40..44].copy_from_slice(&(PROC_EVENT_EXEC | PROC_EVENT_EXIT).to_ne_bytes());
    // SAFETY: `msg` lives on this frame, of the length passed.
    let n = unsafe { libc::send(socket.as_raw_fd(), msg.as_ptr().cast(), msg.len(), 0) };
    n == msg.len() as isize
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// The reading side of an [`ExitWatch`].
struct Listener {
    socket: Arc<OwnedFd>,
    seen: Arc<Mutex<Seen>>,
    stop: Arc<AtomicBool>,
    drain: Arc<AtomicBool>,
    woken: std::os::unix::net::UnixStream,
    root: String,
}

impl Listener {
    /// Read events until told to stop or, once asked, until the queue is
    /// drained: recognise the sandbox process when it executes, keep its
    /// last end.
    ///
    /// The sandbox process re-executes itself from one of its threads
    /// (the Go runtime's), and the kernel then reports its old leader's
    /// exit under the process's own pid, status 0, just before the exec:
    /// an end is only an end when no exec of that pid follows it, so it
    /// is kept and read on until the queue is drained.
    fn listen(self) {
        use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
        use std::os::fd::AsFd;
        let mut buf = vec![0u8; 4096];
        let mut sandbox: Option<i32> = None;
        let mut drained_since: Option<Instant> = None;
        while !self.stop.load(Ordering::Relaxed) {
            let draining = self.drain.load(Ordering::Relaxed);
            let wait = PollTimeout::from(match (draining, drained_since) {
                (true, None) => 0u16,
                (true, Some(_)) => 10,
                (false, _) => 100,
            });
            let mut fds = [
                PollFd::new(self.socket.as_fd(), PollFlags::POLLIN),
                PollFd::new(self.woken.as_fd(), PollFlags::POLLIN),
            ];
            let polled = poll(&mut fds, wait).is_ok_and(|n| n > 0);
            let ready = polled && fds[0].revents().is_some_and(|r| !r.is_empty());
            if polled && fds[1].revents().is_some_and(|r| !r.is_empty()) {
                let _ = std::io::Read::read(&mut &self.woken, &mut [0u8; 8]);
            }
            if !ready {
                if draining {
                    let since = *drained_since.get_or_insert_with(Instant::now);
                    if !self.end_may_be_coming(sandbox, since) {
                        break;
                    }
                }
                continue;
            }
            // SAFETY: `buf` is ours, of the length passed.
            let n = unsafe {
                libc::recv(
                    self.socket.as_raw_fd(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                    0,
                )
            };
            let Ok(n) = usize::try_from(n) else {
                // ENOBUFS: events were dropped; what is known is not all.
                if nix::errno::Errno::last() == nix::errno::Errno::ENOBUFS {
                    if let Ok(mut s) = self.seen.lock() {
                        s.sandbox = None;
                        s.ended = None;
                    }
                    break;
                }
                continue;
            };
            let b = &buf[..n];
            let (Some(what), Some(pid), Some(tgid)) =
                (u32_at(b, WHAT), u32_at(b, DATA), u32_at(b, DATA + 4))
            else {
                continue;
            };
            let pid = pid as i32;
            if what == PROC_EVENT_EXEC && Some(pid) == sandbox {
                // Re-executed: the leader's exit before it was no end.
                if let Ok(mut s) = self.seen.lock() {
                    s.ended = None;
                }
            } else if what == PROC_EVENT_EXEC && sandbox.is_none() && is_sandbox(pid, &self.root) {
                sandbox = Some(pid);
                if let Ok(mut s) = self.seen.lock() {
                    s.sandbox = sandbox;
                }
            } else if what == PROC_EVENT_EXIT && Some(pid) == sandbox && tgid as i32 == pid {
                if let (Ok(mut s), Some(code)) = (self.seen.lock(), u32_at(b, DATA + 8)) {
                    s.ended = Some(code as i32);
                }
            }
        }
        if let Ok(mut s) = self.seen.lock() {
            s.done = true;
        }
    }

    /// With the queue empty while draining: whether the sandbox
    /// process's exit event may still be on its way. The kernel wakes a
    /// dying process's parent before it sends the event, so a process
    /// already gone from `/proc` (or a zombie) with no end seen is waited
    /// for, up to a second.
    fn end_may_be_coming(&self, sandbox: Option<i32>, since: Instant) -> bool {
        let Some(pid) = sandbox else {
            return false;
        };
        let seen_end = self.seen.lock().map_or(true, |s| s.ended.is_some());
        if seen_end || since.elapsed() > Duration::from_secs(1) {
            return false;
        }
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        // The state follows the command's name in parentheses.
        let state = stat.rsplit_once(") ").and_then(|(_, r)| r.chars().next());
        matches!(state, None | Some('Z' | 'X'))
    }
}

/// Whether `pid` is runsc's sandbox process (`boot`) of `root`.
fn is_sandbox(pid: i32, root: &str) -> bool {
    let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
        return false;
    };
    let args: Vec<&[u8]> = cmdline.split(|c| *c == 0).collect();
    args.contains(&root.as_bytes()) && args.contains(&b"boot".as_slice())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::ExitWatch;
    use std::time::Duration;

    /// A process whose command line reads as a sandbox process of `root`
    /// (`sh -c SCRIPT --root=ROOT boot`), run to its end: the wait
    /// status the listener saw, or why the host cannot say.
    fn seen_end(root: &str, script: &str) -> Result<Option<i32>, &'static str> {
        seen_end_of(root, "sh", &["-c", script])
    }

    /// As [`seen_end`], of `program` with `args` (then `--root=ROOT boot`).
    fn seen_end_of(root: &str, program: &str, args: &[&str]) -> Result<Option<i32>, &'static str> {
        let Some(watch) = ExitWatch::start(std::path::Path::new(root)) else {
            return Err("the host's process events cannot be listened to here (not root)");
        };
        let status = std::process::Command::new(program)
            .args(args)
            .args([&format!("--root={root}"), "boot"])
            .status()
            .unwrap();
        assert!(!status.success());
        Ok(watch.sandbox_end(Duration::from_secs(5)))
    }

    #[test]
    fn a_sandbox_process_killed_by_a_signal_is_seen_so_and_an_exit_status_as_one() {
        let root = format!("/nonexistent/warden-exits-{}", std::process::id());
        let killed = match seen_end(&root, "sleep 0.3; kill -9 $$") {
            Ok(end) => end.unwrap(),
            Err(why) => {
                eprintln!("skipped: {why}");
                return;
            }
        };
        assert!(libc::WIFSIGNALED(killed), "{killed:#x}");
        assert_eq!(libc::WTERMSIG(killed), libc::SIGKILL);
        let exited = seen_end(&format!("{root}-2"), "sleep 0.3; exit 137")
            .unwrap()
            .unwrap();
        assert!(libc::WIFEXITED(exited), "{exited:#x}");
        assert_eq!(libc::WEXITSTATUS(exited), 137);
    }

    /// runsc's sandbox process re-executes itself from a thread other
    /// than its first: the kernel reports the old leader's exit (status
    /// 0, under the process's pid) just before the exec, and that was
    /// read as the sandbox's end, so a sandbox killed later was told as
    /// its command's own status about half the time.
    #[test]
    fn a_sandbox_process_that_re_executes_from_a_thread_is_not_ended_by_its_old_leaders_exit() {
        if std::process::Command::new("python3")
            .arg("-V")
            .output()
            .is_err()
        {
            eprintln!("skipped: no python3 here to exec from a thread");
            return;
        }
        let root = format!("/nonexistent/warden-exits-thread-{}", std::process::id());
        let code = format!(
            "import os, sys, threading\n\
             def again():\n\
             \x20   os.execv('/bin/sh', ['sh', '-c', 'sleep 0.3; kill -9 $$', '--root={root}', 'boot'])\n\
             t = threading.Thread(target=again); t.start(); t.join()\n"
        );
        let killed = match seen_end_of(&root, "python3", &["-c", &code]) {
            Ok(end) => end.unwrap(),
            Err(why) => {
                eprintln!("skipped: {why}");
                return;
            }
        };
        assert!(libc::WIFSIGNALED(killed), "{killed:#x}");
        assert_eq!(libc::WTERMSIG(killed), libc::SIGKILL);
    }
}
