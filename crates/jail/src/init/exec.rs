//! The command's start: [`ExecPlan`] prepares, before the clone, all the
//! command's process needs until it execs, and starts it with
//! `CLONE_VM | CLONE_VFORK`.
//!
//! Between that clone and the exec the process shares the init's memory:
//! it never allocates, never takes a lock and calls only async-signal-safe
//! functions. It applies no restriction of its own; the command inherits
//! the init's.

use super::ChildPlan;
use crate::spawn::FORWARDED;
use nix::sys::signal::{SigSet, Signal};
use nix::unistd::Pid;
use std::ffi::CString;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;

/// Everything the command's process needs between clone and exec, prepared
/// beforehand: it shares the init's memory until it execs (vfork
/// semantics), so it must not allocate.
pub(super) struct ExecPlan {
    program: Option<CString>,
    argv: Vec<*const libc::c_char>,
    envp: Vec<*const libc::c_char>,
    cwd: CString,
    pty: Option<RawFd>,
    report: RawFd,
    degraded: bool,
    mask: SigSet,
    /// Keeps the strings behind `argv` and `envp` alive.
    _strings: (Vec<CString>, Vec<CString>),
}

impl ExecPlan {
    pub(super) fn new(
        plan: &ChildPlan,
        program: Option<CString>,
        report: &OwnedFd,
        mask: SigSet,
    ) -> Result<ExecPlan, String> {
        let strings = (plan.argv.clone(), plan.env.clone());
        let ptrs = |v: &[CString]| {
            v.iter()
                .map(|c| c.as_ptr())
                .chain(std::iter::once(std::ptr::null()))
                .collect::<Vec<_>>()
        };
        Ok(ExecPlan {
            program,
            argv: ptrs(&strings.0),
            envp: ptrs(&strings.1),
            cwd: CString::new(plan.cwd.as_os_str().as_bytes())
                .map_err(|_| "the working directory contains a NUL byte".to_string())?,
            pty: plan.pty_slave.as_ref().map(|t| t.as_raw_fd()),
            report: report.as_raw_fd(),
            degraded: plan.degraded,
            mask,
            _strings: strings,
        })
    }

    /// Start the command: clone with CLONE_VM | CLONE_VFORK, so that no page
    /// table is copied and the init resumes once the command has exec'd.
    pub(super) fn spawn(&self) -> Result<Pid, String> {
        // SAFETY: `exec_in_child` only calls async-signal-safe functions on
        // memory prepared before the clone: no allocation, no lock, nothing
        // that the suspended init could hold.
        let pid = unsafe { crate::sys::clone_vfork(Box::new(|| self.exec_in_child())) };
        pid.map_err(|e| format!("cannot start the command: {e}"))
    }

    /// In the command's process: terminal, working directory, signals, exec.
    fn exec_in_child(&self) -> isize {
        // SAFETY: every call below takes integers or pointers to memory that
        // `self` keeps alive, and is async-signal-safe; the process execs or
        // leaves with _exit.
        unsafe {
            // A session of its own, pty or not: left in the init's, the
            // command would share the process group and session of whoever
            // started warden, and `kill(0, sig)` (which names the sender's
            // group by the kernel's own reference, past the PID namespace)
            // would reach them: the caller, `warden run` itself (SIGSTOP
            // holds its timeout). Landlock's signal scope stops that too,
            // from Linux 6.12 on only.
            libc::setsid();
            if let Some(fd) = self.pty {
                libc::ioctl(fd, libc::TIOCSCTTY, 0);
                libc::dup2(fd, 0);
                libc::dup2(fd, 1);
                libc::dup2(fd, 2);
            }
            if self.degraded {
                // No PID namespace takes the command with the init: tie it
                // to the init directly (its own children are the init's).
                libc::prctl(
                    libc::PR_SET_PDEATHSIG,
                    libc::SIGKILL as libc::c_ulong,
                    0,
                    0,
                    0,
                );
            }
            if libc::chdir(self.cwd.as_ptr()) != 0 {
                // A constant line: nothing may be allocated here.
                let line: &[u8] = b"setup the command's working directory (`filesystem.workdir`) is not a directory inside the sandbox\n";
                libc::write(self.report, line.as_ptr().cast(), line.len());
                libc::_exit(125);
            }
            // The command starts with default dispositions and the mask
            // warden had.
            for s in FORWARDED.iter().chain(&[Signal::SIGCHLD, Signal::SIGPIPE]) {
                libc::signal(*s as libc::c_int, libc::SIG_DFL);
            }
            libc::pthread_sigmask(libc::SIG_SETMASK, self.mask.as_ref(), std::ptr::null_mut());
            crate::sys::cloexec_from_3();
            let errno = match &self.program {
                Some(p) => {
                    libc::execve(p.as_ptr(), self.argv.as_ptr(), self.envp.as_ptr());
                    *libc::__errno_location()
                }
                None => libc::ENOENT,
            };
            // "exec <errno>\n", formatted without allocating.
            let mut line = *b"exec 0000000000\n";
            let mut n = errno.unsigned_abs();
            let mut i = 14;
            loop {
                line[i] = b'0' + (n % 10) as u8;
                n /= 10;
                if n == 0 {
                    break;
                }
                i -= 1;
            }
            let digits_start = i;
            // Shift the digits next to "exec ".
            let len = 15 - digits_start;
            line.copy_within(digits_start..15, 5);
            line[5 + len] = b'\n';
            libc::write(self.report, line.as_ptr().cast(), 5 + len + 1);
            libc::_exit(if errno == libc::ENOENT { 127 } else { 126 })
        }
    }
}
