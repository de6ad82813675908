//! The supervisor's loop while the sandbox runs: signals, the terminal,
//! the deadline, the init's reports; and what is cleaned up after.

use super::JailError;
use crate::cgroup::Cgroup;
use crate::pty;
use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{kill, SigSet, SigmaskHow, Signal};
use nix::sys::signalfd::SignalFd;
use nix::unistd::Pid;
use std::os::fd::{AsFd, OwnedFd};
use std::time::{Duration, Instant};

/// Restores the signal mask warden started with.
pub(super) struct MaskGuard(pub(super) SigSet);

impl Drop for MaskGuard {
    fn drop(&mut self) {
        let _ = nix::sys::signal::pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&self.0), None);
    }
}

/// Kills and reaps the sandbox and removes its cgroup if the supervisor
/// leaves early (an error, a panic): no sandbox process outlives warden.
pub(super) struct ChildGuard {
    pub(super) pid: Pid,
    pub(super) cgroup: Option<Cgroup>,
    pub(super) reaped: bool,
    /// What exists of a cgroup the sandbox runs without (a v2 directory
    /// the init was born in, whose limits could not be set): removed once
    /// the init is gone, when the guard is dropped.
    pub(super) unfinished: Option<Cgroup>,
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if !self.reaped {
            let _ = kill(self.pid, Signal::SIGKILL);
            let _ = nix::sys::wait::waitpid(self.pid, None);
        }
        if let Some(cg) = self.cgroup.take() {
            let _ = cg.kill_all();
            let _ = cg.remove();
        }
    }
}

pub(super) struct Supervision {
    pub(super) child: Pid,
    pub(super) rep_rd: Option<OwnedFd>,
    pub(super) reports: Vec<u8>,
    pub(super) master: Option<OwnedFd>,
    pub(super) stdin_open: bool,
    /// Typed input the sandbox's terminal has not taken yet; stdin is not
    /// read while it waits (bounded by one read).
    pub(super) pending_in: Vec<u8>,
    pub(super) timed_out: bool,
    /// The init's wait status: exit code, or minus the signal number.
    pub(super) wait_status: Option<i32>,
    /// Peak RSS in bytes, user and system CPU in ms, of the whole tree.
    pub(super) usage: Option<(u64, u64, u64)>,
    /// No PID namespace: orphans are this supervisor's to kill.
    pub(super) degraded: bool,
    /// `--ask`: the proxy's questions, answered from the terminal.
    pub(super) desk: Option<Box<dyn super::Desk>>,
    /// The kernel's records of refusals inside (see `landlock_audit`).
    pub(super) refusals: Option<crate::landlock_audit::AuditWatch>,
    /// The supervisor's own refusals of execs (see `modes::exec`); gone
    /// once its judge has ended.
    pub(super) exec_records: Option<crate::modes::exec::RecordReader>,
}

/// A refusal of the allowlist inside, as its event: an exec, or the open
/// of a program directory's program that only the allowlist makes
/// unreadable (the loader run directly); other refusals of the domain (a
/// write, a read elsewhere) are not this record's.
pub(super) fn refusal_event(r: crate::landlock_audit::Refusal) -> Option<warden_audit::EventKind> {
    (r.is_exec() || r.is_sealed_program()).then(|| warden_audit::EventKind::ExecRefused {
        program: r.path,
        rule: "allow_exec".into(),
        by: "landlock".into(),
    })
}

const MAX_REPORT_BYTES: usize = 64 * 1024;

impl Supervision {
    /// Where refusals inside are recorded, to wait on: the kernel's audit
    /// records and the judge's; their places in `fds`.
    fn record_fds<'a>(&'a self, fds: &mut Vec<PollFd<'a>>) -> [Option<usize>; 2] {
        let sources = [
            self.refusals.as_ref().map(|w| w.fd()),
            self.exec_records.as_ref().map(|r| r.fd()),
        ];
        sources.map(|fd| {
            fd.map(|fd| {
                fds.push(PollFd::new(fd, PollFlags::POLLIN));
                fds.len() - 1
            })
        })
    }

    /// The refusals the kernel's audit and the judge recorded, as events.
    fn relay_records(
        &mut self,
        audit: bool,
        judge: bool,
        emit: &mut dyn FnMut(warden_audit::EventKind),
    ) {
        if audit {
            self.relay_refusals(emit);
        }
        if judge {
            self.relay_exec_records(emit);
        }
    }

    /// The judge's refusals of execs, as events.
    fn relay_exec_records(&mut self, emit: &mut dyn FnMut(warden_audit::EventKind)) {
        let Some(r) = self.exec_records.as_mut() else {
            return;
        };
        let (kinds, ended) = r.drain();
        for kind in kinds {
            emit(kind);
        }
        if ended {
            // Its end of the pipe is closed: polled again, it would wake
            // the loop at once, for ever.
            self.exec_records = None;
        }
    }

    /// The kernel's records of refusals inside, as events.
    fn relay_refusals(&mut self, emit: &mut dyn FnMut(warden_audit::EventKind)) {
        let refused = self
            .refusals
            .as_mut()
            .map(|w| w.drain())
            .unwrap_or_default();
        for kind in refused.into_iter().filter_map(refusal_event) {
            emit(kind);
        }
    }

    pub(super) fn run(
        &mut self,
        sfd: &SignalFd,
        deadline: Option<Instant>,
        guard: &ChildGuard,
        emit: &mut dyn FnMut(warden_audit::EventKind),
    ) -> Result<(), JailError> {
        let mut rusage_done = false;
        while !rusage_done {
            let timeout = match deadline {
                Some(d) if !self.timed_out => {
                    let left = d.saturating_duration_since(Instant::now());
                    PollTimeout::try_from(left.as_millis().min(i32::MAX as u128) as i32)
                        .unwrap_or(PollTimeout::MAX)
                }
                _ => PollTimeout::NONE,
            };
            let stdin = std::io::stdin();
            let mut fds = vec![PollFd::new(sfd.as_fd(), PollFlags::POLLIN)];
            let rep_idx = self.rep_rd.as_ref().map(|r| {
                fds.push(PollFd::new(r.as_fd(), PollFlags::POLLIN));
                fds.len() - 1
            });
            // While --ask has a question on screen, the sandbox's output
            // waits: the question stays the last thing the person sees.
            let asking = self.desk.as_ref().is_some_and(|d| d.is_asking());
            let master_idx = self.master.as_ref().filter(|_| !asking).map(|m| {
                fds.push(PollFd::new(m.as_fd(), PollFlags::POLLIN));
                fds.len() - 1
            });
            let waiting = !self.pending_in.is_empty();
            let stdin_idx = (self.master.is_some() && self.stdin_open && !waiting).then(|| {
                fds.push(PollFd::new(stdin.as_fd(), PollFlags::POLLIN));
                fds.len() - 1
            });
            let room_idx = self.master.as_ref().filter(|_| waiting).map(|m| {
                fds.push(PollFd::new(m.as_fd(), PollFlags::POLLOUT));
                fds.len() - 1
            });
            let desk_idx = self.desk.as_ref().map(|d| {
                fds.push(PollFd::new(d.fd(), PollFlags::POLLIN));
                fds.len() - 1
            });
            let [audit_idx, records_idx] = self.record_fds(&mut fds);
            // An open question is checked for its deadline every second.
            let timeout = if asking && (timeout == PollTimeout::NONE || i32::from(timeout) > 1000) {
                PollTimeout::from(1000u16)
            } else {
                timeout
            };
            let n = match poll(&mut fds, timeout) {
                Ok(n) => n,
                Err(Errno::EINTR) => continue,
                Err(e) => {
                    return Err(JailError::Sys {
                        what: "wait for the sandbox",
                        source: e,
                    })
                }
            };
            let ready = |i: Option<usize>| {
                i.and_then(|i| fds.get(i))
                    .and_then(|f| f.revents())
                    .is_some_and(|r| !r.is_empty())
            };
            let (sig_ready, rep_ready, master_ready, stdin_ready, desk_ready) = (
                ready(Some(0)),
                ready(rep_idx),
                ready(master_idx),
                ready(stdin_idx) || ready(room_idx),
                ready(desk_idx),
            );
            let (audit_ready, records_ready) = (ready(audit_idx), ready(records_idx));
            drop(fds);
            self.relay_records(audit_ready, records_ready, emit);
            if let Some(out) = self.desk.as_mut().and_then(|d| d.tick()) {
                let _ = write_all(std::io::stderr().as_fd(), out.as_bytes());
            }
            if n == 0 {
                self.on_timeout(deadline, guard);
                continue;
            }
            if rep_ready {
                self.read_reports();
            }
            if master_ready {
                self.relay_master();
            }
            if desk_ready {
                if let Some(prompt) = self.desk.as_mut().and_then(|d| d.on_wake()) {
                    let _ = write_all(std::io::stderr().as_fd(), prompt.as_bytes());
                }
            }
            if stdin_ready {
                if self.pending_in.is_empty() {
                    self.relay_stdin();
                }
                self.flush_input();
            }
            if sig_ready && self.on_signals(sfd) {
                rusage_done = true;
            }
        }
        self.drain_after_exit();
        Ok(())
    }

    /// The deadline passed: the command is killed, and the whole cgroup
    /// with it (once; the loop then waits for the reap).
    fn on_timeout(&mut self, deadline: Option<Instant>, guard: &ChildGuard) {
        if let Some(d) = deadline {
            if Instant::now() >= d && !self.timed_out {
                self.timed_out = true;
                let _ = kill(self.child, Signal::SIGKILL);
                if let Some(cg) = &guard.cgroup {
                    let _ = cg.kill_all();
                }
            }
        }
    }

    /// The signals that woke the loop: a child to reap, a window resized, a
    /// signal from outside to pass on. True once the command was reaped.
    fn on_signals(&mut self, sfd: &SignalFd) -> bool {
        let mut reaped = false;
        while let Ok(Some(info)) = sfd.read_signal() {
            let signo = info.ssi_signo as i32;
            if signo == libc::SIGCHLD {
                if self.try_reap() {
                    reaped = true;
                }
            } else if signo == libc::SIGWINCH {
                if let Some(m) = &self.master {
                    pty::copy_window_size(std::io::stdin().as_fd(), m.as_fd());
                }
            } else if info.ssi_code != libc::SI_KERNEL {
                // kill(2) from outside (a supervisor of warden, a
                // person): pass it on. Terminal signals already
                // reached the command's process group.
                if let Ok(sig) = Signal::try_from(signo) {
                    let _ = kill(self.child, sig);
                }
            }
        }
        reaped
    }

    /// After the command ended: processes a degraded sandbox left behind
    /// killed, then what its pipes still hold drained, without blocking
    /// and for a bounded time.
    fn drain_after_exit(&mut self) {
        if self.degraded {
            // Without a PID namespace, processes the sandbox left behind
            // were adopted by this supervisor: they die before anything
            // else, so that none can hold the terminal or a pipe open.
            kill_adopted_descendants();
        }
        // Every process of the sandbox is gone; drain what is left, without
        // blocking and for a bounded time, whatever holds the other ends.
        let drain_until = Instant::now() + Duration::from_millis(500);
        for fd in [self.rep_rd.as_ref(), self.master.as_ref()]
            .into_iter()
            .flatten()
        {
            let _ = nix::fcntl::fcntl(
                fd,
                nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK),
            );
        }
        while self.rep_rd.is_some() && Instant::now() < drain_until {
            if !self.read_reports() {
                break;
            }
        }
        while self.master.is_some() && Instant::now() < drain_until {
            if !self.relay_master() {
                break;
            }
        }
    }

    /// Read what the init reported; false when nothing more is to be had
    /// now (end of file, or nothing waiting on a non-blocking pipe).
    fn read_reports(&mut self) -> bool {
        let Some(fd) = &self.rep_rd else {
            return false;
        };
        let mut buf = [0u8; 4096];
        match nix::unistd::read(fd, &mut buf) {
            Ok(0) | Err(Errno::EBADF) | Err(Errno::EIO) => {
                self.rep_rd = None;
                false
            }
            Ok(n) => {
                if self.reports.len() < MAX_REPORT_BYTES {
                    self.reports.extend_from_slice(&buf[..n]);
                }
                true
            }
            Err(Errno::EINTR) => true,
            Err(Errno::EAGAIN) => false,
            Err(_) => {
                self.rep_rd = None;
                false
            }
        }
    }

    /// Copy what the command wrote to its terminal; false when it is closed.
    fn relay_master(&mut self) -> bool {
        let Some(m) = &self.master else { return false };
        let mut buf = [0u8; 16384];
        match nix::unistd::read(m, &mut buf) {
            Ok(0) | Err(Errno::EIO) => {
                self.master = None;
                false
            }
            Ok(n) => {
                let _ = write_all(std::io::stdout().as_fd(), &buf[..n]);
                true
            }
            Err(Errno::EINTR) => true,
            Err(Errno::EAGAIN) => false,
            Err(_) => {
                self.master = None;
                false
            }
        }
    }

    /// Pass what is typed to the sandbox's terminal, or, while `--ask` has
    /// a question on screen, take it as the answer.
    fn relay_stdin(&mut self) {
        if self.master.is_none() {
            return;
        }
        let mut buf = [0u8; 4096];
        let ended = match nix::unistd::read(std::io::stdin().as_fd(), &mut buf) {
            Ok(0) => true,
            Ok(n) => {
                match self.desk.as_mut().filter(|d| d.is_asking()) {
                    Some(desk) => {
                        if let Some(out) = desk.on_input(&buf[..n]) {
                            let _ = write_all(std::io::stderr().as_fd(), out.as_bytes());
                        }
                    }
                    None => self.pending_in.extend_from_slice(&buf[..n]),
                }
                false
            }
            Err(Errno::EINTR) | Err(Errno::EAGAIN) => false,
            Err(_) => true,
        };
        if ended {
            self.stdin_open = false;
            // Nobody is left to answer --ask: its questions end now.
            if let Some(out) = self.desk.as_mut().and_then(|d| d.input_ended()) {
                let _ = write_all(std::io::stderr().as_fd(), out.as_bytes());
            }
        }
    }

    /// Give the sandbox's terminal what it has room for of the typed input.
    fn flush_input(&mut self) {
        let Some(m) = &self.master else {
            self.pending_in.clear();
            return;
        };
        while !self.pending_in.is_empty() {
            match nix::unistd::write(m, &self.pending_in) {
                Ok(k) => {
                    self.pending_in.drain(..k);
                }
                Err(Errno::EINTR) => continue,
                Err(Errno::EAGAIN) => return,
                Err(_) => {
                    self.pending_in.clear();
                    return;
                }
            }
        }
    }

    /// Reap the init if it ended; true when it did.
    fn try_reap(&mut self) -> bool {
        let mut status: libc::c_int = 0;
        let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
        // SAFETY: wait4 writes an int status and one `rusage` into valid,
        // properly aligned memory that we own.
        let rc = unsafe {
            libc::wait4(
                self.child.as_raw(),
                &mut status,
                libc::WNOHANG,
                usage.as_mut_ptr(),
            )
        };
        if rc == self.child.as_raw() {
            // SAFETY: wait4 returned the child's PID, so it filled `usage`
            // (and it was zero-initialised before in any case).
            let usage = unsafe { usage.assume_init() };
            self.wait_status = Some(if libc::WIFSIGNALED(status) {
                -libc::WTERMSIG(status)
            } else {
                libc::WEXITSTATUS(status)
            });
            self.usage = Some(usage_triplet(&usage));
            return true;
        }
        rc == -1 && Errno::last() == Errno::ECHILD
    }

    pub(super) fn rusage(&self) -> (Option<u64>, Option<u64>, Option<u64>) {
        self.usage
            .map_or((None, None, None), |(a, b, c)| (Some(a), Some(b), Some(c)))
    }
}

pub(super) fn usage_triplet(u: &libc::rusage) -> (u64, u64, u64) {
    let ms = |t: libc::timeval| (t.tv_sec as u64) * 1000 + (t.tv_usec as u64) / 1000;
    ((u.ru_maxrss as u64) * 1024, ms(u.ru_utime), ms(u.ru_stime))
}

pub(super) fn write_all(fd: std::os::fd::BorrowedFd<'_>, mut data: &[u8]) -> nix::Result<()> {
    while !data.is_empty() {
        match nix::unistd::write(fd, data) {
            Ok(n) => data = &data[n..],
            Err(Errno::EINTR) | Err(Errno::EAGAIN) => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Kill every process the supervisor adopted as subreaper (what the
/// sandbox left behind), until none is left.
pub(super) fn kill_adopted_descendants() {
    let me = std::process::id() as i32;
    // Bounded: a process stuck in the kernel cannot keep warden forever.
    for _ in 0..2000 {
        let children = children_of(me);
        for pid in &children {
            let _ = kill(Pid::from_raw(*pid), Signal::SIGKILL);
        }
        while let Ok(status) =
            nix::sys::wait::waitpid(None, Some(nix::sys::wait::WaitPidFlag::WNOHANG))
        {
            if status == nix::sys::wait::WaitStatus::StillAlive {
                break;
            }
        }
        if children.is_empty() {
            return;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// PIDs whose parent is `parent`, from /proc/PID/stat.
pub(super) fn children_of(parent: i32) -> Vec<i32> {
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in dir.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        // The command name may hold spaces and parentheses: fields start
        // after the last ')'.
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<i32>().ok());
        if ppid == Some(parent) {
            out.push(pid);
        }
    }
    out
}
