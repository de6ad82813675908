//! Freezing: stopping every process of a sandbox's cgroup in place, and
//! letting them go on.
//!
//! This module owns the two freezers the kernel has: cgroup v1's `freezer`
//! hierarchy (`freezer.state`: `FROZEN`, `FREEZING` while it settles,
//! `THAWED`) and cgroup v2's core `cgroup.freeze` (settled when
//! `cgroup.events` says `frozen 1`). A frozen process keeps its memory, its
//! descriptors and its place; it is not signalled and cannot tell (unlike
//! SIGSTOP, which its parent sees). Which freezer serves a sandbox is found
//! from the directories it was given, as the rest of this layer finds its
//! controllers: the v1 hierarchy's where the sandbox is in one, else its v2
//! directory's. It never freezes a directory that is not a cgroup.
//!
//! Used by the kill path (a group is frozen while its members are
//! signalled, `kill.rs`) and by a supervisor that pauses its sandbox.

use std::fs;
use std::path::{Path, PathBuf};
use std::thread::sleep;
use std::time::{Duration, Instant};

use super::{keyed, write_file, CgroupError, Op, POLL};

/// How long a freeze may take to settle before it is given up.
pub const SETTLE_TIMEOUT: Duration = Duration::from_secs(5);

/// The freezer of one sandbox's cgroup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Freezer {
    path: PathBuf,
    v2: bool,
}

impl Freezer {
    /// The freezer of the directory `path` of one hierarchy, when it has
    /// one: a v1 `freezer` directory (`freezer.state`), or a non-root v2
    /// cgroup (`cgroup.freeze`).
    pub(super) fn at(path: &Path, v2: bool) -> Option<Freezer> {
        let file = if v2 { "cgroup.freeze" } else { "freezer.state" };
        path.join(file).exists().then(|| Freezer {
            path: path.to_path_buf(),
            v2,
        })
    }

    /// The freezer among a sandbox's cgroup directories (as its supervisor
    /// records them, one per hierarchy): the v1 freezer hierarchy's where
    /// the sandbox is in one (where a v1 hierarchy carries a controller, it
    /// is the one that counts), else its v2 directory's. `None` when the
    /// sandbox has no cgroup with a freezer (rootless without a delegated
    /// cgroup).
    pub fn find(dirs: &[PathBuf]) -> Option<Freezer> {
        let cgroup_fs = |p: &Path, magic| {
            nix::sys::statfs::statfs(p).is_ok_and(|fs| fs.filesystem_type() == magic)
        };
        dirs.iter()
            .filter(|d| cgroup_fs(d, nix::sys::statfs::CGROUP_SUPER_MAGIC))
            .find_map(|d| Freezer::at(d, false))
            .or_else(|| {
                dirs.iter()
                    .filter(|d| cgroup_fs(d, nix::sys::statfs::CGROUP2_SUPER_MAGIC))
                    .find_map(|d| Freezer::at(d, true))
            })
    }

    /// The cgroup directory this freezer acts on.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Which freezer this is, for a person: `v1 freezer` or `v2 cgroup.freeze`.
    pub fn kind(&self) -> &'static str {
        if self.v2 {
            "v2 cgroup.freeze"
        } else {
            "v1 freezer"
        }
    }

    fn control(&self) -> (PathBuf, &'static str, &'static str) {
        if self.v2 {
            (self.path.join("cgroup.freeze"), "1", "0")
        } else {
            (self.path.join("freezer.state"), "FROZEN", "THAWED")
        }
    }

    /// Ask the kernel to freeze the group, without waiting for it to settle.
    pub(super) fn start_freeze(&self) -> Result<(), CgroupError> {
        let (file, on, _) = self.control();
        write_file(&file, on, Op::Write)
    }

    /// Freeze every process of the group and wait, up to `timeout`, until
    /// the kernel says all of them are frozen. One that does not settle in
    /// time (a process in uninterruptible sleep on a v1 host) is thawed
    /// again and the error says so: a group is never left half-frozen.
    pub fn freeze(&self, timeout: Duration) -> Result<(), CgroupError> {
        self.start_freeze()?;
        if self.wait_frozen(timeout) {
            return Ok(());
        }
        let _ = self.thaw();
        Err(CgroupError::FreezeTimeout {
            path: self.path.clone(),
            waited: timeout,
        })
    }

    /// Wait up to `timeout` for the freeze to settle; true once it has.
    pub(super) fn wait_frozen(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if self.frozen() {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            sleep(POLL);
        }
    }

    /// Let every process of the group run again.
    pub fn thaw(&self) -> Result<(), CgroupError> {
        let (file, _, off) = self.control();
        write_file(&file, off, Op::Write)
    }

    /// Whether every process of the group is frozen now.
    pub fn frozen(&self) -> bool {
        if self.v2 {
            fs::read_to_string(self.path.join("cgroup.events"))
                .is_ok_and(|t| keyed(&t, "frozen") == Some(1))
        } else {
            fs::read_to_string(self.path.join("freezer.state")).is_ok_and(|t| t.trim() == "FROZEN")
        }
    }

    /// Whether the group was asked to freeze (settled or not): what a
    /// cleaner looks at before it kills, since a v1 frozen task acts on
    /// SIGKILL only once thawed.
    pub fn asked(&self) -> bool {
        let (file, on, _) = self.control();
        fs::read_to_string(file).is_ok_and(|t| {
            let t = t.trim();
            t == on || (!self.v2 && t == "FREEZING")
        })
    }
}

#[cfg(test)]
mod tests {
    // The tests remove their own temporary directories with std's removal.
    #![allow(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic,
        clippy::disallowed_methods
    )]

    use super::super::{probe, Cgroup, Limits};
    use super::*;
    use std::process::{Command, Stdio};

    /// CPU time (user + system, in ticks) of process `pid`.
    fn cpu_ticks(pid: u32) -> u64 {
        let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        let rest = stat.rsplit_once(')').unwrap().1;
        let f: Vec<&str> = rest.split_whitespace().collect();
        f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
    }

    #[test]
    fn a_frozen_busy_loop_uses_no_cpu_and_runs_again_when_thawed() {
        let support = probe();
        if !support.kill {
            eprintln!(
                "skipped: no usable cgroup here ({})",
                support.why_not.unwrap_or_default()
            );
            return;
        }
        let Ok(cg) = Cgroup::create(
            &format!("unit-freeze-{}", std::process::id()),
            &Limits::default(),
        ) else {
            eprintln!("skipped: cannot create a cgroup without limits here");
            return;
        };
        let Some(freezer) = Freezer::find(&cg.paths()) else {
            eprintln!("skipped: the cgroup has no freezer here");
            return;
        };
        let mut child = Command::new("sh")
            .arg("-c")
            .arg("while :; do :; done")
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        cg.add_process(i32::try_from(child.id()).unwrap()).unwrap();
        sleep(Duration::from_millis(200));
        freezer.freeze(SETTLE_TIMEOUT).unwrap();
        assert!(freezer.frozen() && freezer.asked());
        let before = cpu_ticks(child.id());
        sleep(Duration::from_millis(500));
        assert_eq!(cpu_ticks(child.id()), before, "a frozen loop ran");
        freezer.thaw().unwrap();
        assert!(!freezer.asked());
        sleep(Duration::from_millis(500));
        assert!(cpu_ticks(child.id()) > before, "a thawed loop did not run");
        let _ = child.kill();
        let _ = child.wait();
        cg.remove().unwrap();
    }

    #[test]
    fn a_directory_that_is_not_a_cgroup_has_no_freezer() {
        let dir = std::env::temp_dir().join(format!("warden-not-a-cgroup-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join("freezer.state"), "THAWED").unwrap();
        fs::write(dir.join("cgroup.freeze"), "0").unwrap();
        assert_eq!(Freezer::find(std::slice::from_ref(&dir)), None);
        fs::remove_dir_all(&dir).unwrap();
    }
}
