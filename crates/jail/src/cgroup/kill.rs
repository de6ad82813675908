//! Killing: emptying the sandbox's cgroup of every member, forks included.
//!
//! This module owns `cgroup.kill`, the way without it (stopping forks with
//! `pids.max`, freezing with v2 `cgroup.freeze` or the v1 freezer, SIGKILL to
//! every member, thawing, and again until the group is empty) and waiting for
//! the group to empty. It never signals a process outside the sandbox's
//! cgroup, nor warden's own, and never removes a directory (`Cgroup::remove`
//! does, and calls this first when the group is still busy).

use std::fs;
use std::io;
use std::path::PathBuf;
use std::thread::sleep;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use super::{hint, write_file, Cgroup, CgroupError, Controller, Freezer, Op, POLL};

/// How long killed processes may take to leave the cgroup.
const KILL_TIMEOUT: Duration = Duration::from_secs(5);
/// How long `cgroup.kill` alone is trusted before falling back to signals.
const KILL_FAST_PATH: Duration = Duration::from_secs(1);
/// How long a freeze may take before we signal without it.
const FREEZE_TIMEOUT: Duration = Duration::from_secs(1);

impl Cgroup {
    /// Kill every process in the cgroup and wait until it is empty.
    ///
    /// With v2 `cgroup.kill` the kernel does it atomically, forks included.
    /// Otherwise forks are stopped first (pids.max 0 where a pids controller
    /// is attached, and a freeze where one is available), every member gets
    /// SIGKILL, the group is thawed so the signals take effect, and this
    /// repeats until the cgroup is empty: a member that forked between the
    /// listing and the signal is caught in the next round.
    pub fn kill_all(&self) -> Result<(), CgroupError> {
        let me = i32::try_from(std::process::id()).unwrap_or(i32::MAX);
        let first = self.procs()?;
        if first.is_empty() {
            return Ok(());
        }
        if first.contains(&me) {
            return Err(CgroupError::HoldsCaller {
                path: self.main_path(),
                pid: me,
            });
        }
        if let Some(dir) = self.v2_dir() {
            let kill_file = dir.path.join("cgroup.kill");
            if kill_file.exists() {
                match write_file(&kill_file, "1", Op::Write) {
                    Ok(()) if self.wait_empty(KILL_FAST_PATH)? => return Ok(()),
                    // Members outside the v2 directory (a failed
                    // add_process): the signalling loop finds them.
                    Ok(()) => {}
                    Err(e) => tracing::debug!(error = %e, "cgroup.kill failed; signalling instead"),
                }
            }
        }

        self.kill_by_signals(me)
    }

    /// The way to kill without `cgroup.kill`: stop forks, signal, repeat.
    fn kill_by_signals(&self, me: i32) -> Result<(), CgroupError> {
        let saved_pids_max = self.block_forks();
        let result = self.signal_until_empty(me);
        if let Some((path, value)) = saved_pids_max {
            if let Err(e) = write_file(&path, &value, Op::Write) {
                tracing::debug!(error = %e, "pids.max not restored after kill");
            }
        }
        result
    }

    /// Set pids.max to 0 so that members cannot fork while being killed;
    /// returns the file and its former value.
    fn block_forks(&self) -> Option<(PathBuf, String)> {
        let path = self.dir(Controller::Pids)?.path.join("pids.max");
        let old = fs::read_to_string(&path).ok()?.trim().to_owned();
        write_file(&path, "0", Op::Write).ok()?;
        Some((path, old))
    }

    fn signal_until_empty(&self, me: i32) -> Result<(), CgroupError> {
        let start = Instant::now();
        loop {
            let frozen = self.freeze();
            let listed = self.procs();
            let mut signalled = Ok(());
            if let Ok(pids) = &listed {
                for &pid in pids.iter().filter(|&&p| p != me) {
                    if let Err(e) = self.sigkill(pid) {
                        signalled = Err(e);
                        break;
                    }
                }
            }
            // Frozen tasks act on SIGKILL only once thawed.
            if let Some(freezer) = frozen {
                self.thaw(&freezer);
            }
            let pids = listed?;
            signalled?;
            if pids.is_empty() {
                return Ok(());
            }
            if self.wait_empty(Duration::from_millis(200))? {
                return Ok(());
            }
            if start.elapsed() >= KILL_TIMEOUT {
                return Err(CgroupError::Survivors {
                    path: self.main_path(),
                    pids: self.procs()?,
                    waited: start.elapsed(),
                });
            }
        }
    }

    fn sigkill(&self, pid: i32) -> Result<(), CgroupError> {
        match kill(Pid::from_raw(pid), Signal::SIGKILL) {
            Ok(()) | Err(Errno::ESRCH) => Ok(()),
            Err(errno) => {
                let source = io::Error::from(errno);
                Err(CgroupError::Signal {
                    pid,
                    path: self.main_path(),
                    hint: hint(Op::Signal, &source),
                    source,
                })
            }
        }
    }

    /// Freeze the group (v1 freezer, else v2 cgroup.freeze) and wait briefly
    /// for it to settle; returns the freezer to thaw, if one was frozen.
    fn freeze(&self) -> Option<Freezer> {
        let freezer = self.freezer()?;
        freezer.start_freeze().ok()?;
        freezer.wait_frozen(FREEZE_TIMEOUT);
        Some(freezer)
    }

    fn thaw(&self, freezer: &Freezer) {
        if let Err(e) = freezer.thaw() {
            tracing::warn!(error = %e, "cannot thaw the sandbox's cgroup");
        }
    }

    /// Wait up to `timeout` for the cgroup to be empty; true if it is.
    fn wait_empty(&self, timeout: Duration) -> Result<bool, CgroupError> {
        let deadline = Instant::now() + timeout;
        loop {
            if self.procs()?.is_empty() {
                return Ok(true);
            }
            if Instant::now() >= deadline {
                return Ok(false);
            }
            sleep(POLL);
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use std::io::Write as _;

    use super::super::{probe, Limits};
    use super::*;

    /// `kill_all` prefers `cgroup.kill`, which the test host has; this drives
    /// the path for kernels and hierarchies without it against a real group.
    #[test]
    fn without_cgroup_kill_a_forking_group_is_stopped_signalled_and_emptied() {
        use std::process::{Command, Stdio};

        let support = probe();
        if !(support.memory && support.pids) {
            eprintln!(
                "skipped: no usable memory and pids cgroups ({})",
                support.why_not.unwrap_or_default()
            );
            return;
        }
        let limits = Limits {
            memory: Some(64 << 20),
            pids: Some(32),
            cpus: support.cpu.then_some(0.5),
        };
        let cg = Cgroup::create(&format!("unit-signals-{}", std::process::id()), &limits).unwrap();
        // Two long sleepers and a loop that forks all the time, so that
        // members appear while the group is being killed.
        let mut child = Command::new("sh")
            .arg("-c")
            .arg("read -r _; sleep 300 & sleep 300 & while :; do sleep 0.01; done")
            .stdin(Stdio::piped())
            .spawn()
            .unwrap();
        cg.add_process(i32::try_from(child.id()).unwrap()).unwrap();
        child.stdin.take().unwrap().write_all(b"go\n").unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        while cg.procs().unwrap().len() < 3 && Instant::now() < deadline {
            sleep(POLL);
        }
        assert!(cg.procs().unwrap().len() >= 3);

        let me = i32::try_from(std::process::id()).unwrap();
        cg.kill_by_signals(me).unwrap();
        assert_eq!(cg.procs().unwrap(), Vec::<i32>::new());
        let status = child.wait().unwrap();
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&status),
            Some(libc::SIGKILL)
        );
        // The fork stop was lifted again, and no freeze was left behind.
        let pids = cg.dir(Controller::Pids).unwrap();
        assert_eq!(
            fs::read_to_string(pids.path.join("pids.max"))
                .unwrap()
                .trim(),
            "32"
        );
        if let Some(freezer) = cg.dir(Controller::Freezer).filter(|d| !d.v2) {
            let state = fs::read_to_string(freezer.path.join("freezer.state")).unwrap();
            assert_eq!(state.trim(), "THAWED");
        }
        cg.remove().unwrap();
    }
}
