//! Resource limits for one sandbox, enforced with cgroups.
//!
//! This module owns the sandbox's cgroups: it finds the hierarchies the host
//! mounts (cgroup v2, v1, or the hybrid of both that hosts with systemd in
//! "hybrid" mode still run), creates one directory per hierarchy the sandbox
//! needs, writes the memory, pids and CPU limits, moves processes in, kills
//! the whole group, reads counters after the run and removes the directories.
//!
//! Layouts are discovered at run time from `/proc/self/mountinfo` and
//! `/proc/self/cgroup`, never assumed from paths: a controller is used from the
//! hierarchy it is bound to, v1 or v2, so one code path serves pure v2, pure v1
//! and hybrid hosts. Hybrid hosts are supported, not refused: the limits come
//! from the v1 hierarchies, and the (controller-less) v2 mount still gives the
//! sandbox a group for membership and `cgroup.kill`.
//!
//! It never decides what to do when cgroups are unusable: [`probe`] says what
//! this host and this user can do, [`Cgroup::create`] fails when a requested
//! limit cannot be applied, and the caller chooses whether to degrade. It
//! never touches cgroups it did not create, with two exceptions the kernel
//! forces on us, each documented where it happens: enabling controllers in a
//! parent's `cgroup.subtree_control`, and, under a delegated v2 subtree,
//! moving the calling process into a leaf cgroup of its own.
//!
//! The files: `discover` reads what the host mounts and where this process
//! sits; `plan` decides, without side effects, which hierarchy gives each
//! controller to this user; `v1` and `v2` create a sandbox's directory in
//! one kind of hierarchy and know its controllers' files; `kill` empties the
//! group; `freeze` stops a group in place and lets it go on (a paused
//! sandbox); `sweep` removes what sandboxes killed outright left;
//! `pending` makes a sandbox's cgroup in two halves around the init's
//! start; `files` the few file operations all of them take; `error` the
//! errors and the advice for each errno. This file is the façade the rest
//! of the jail calls: the types, [`probe`], and [`Cgroup`], which ties the
//! sandbox's directories together and removes them.

mod discover;
mod error;
mod files;
mod freeze;
mod join;
mod kill;
mod memo;
mod pending;
mod plan;
mod sweep;
mod under;
mod v1;
mod v2;

use std::collections::BTreeSet;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use discover::Hierarchies;
use error::{hint, Op, HINT_PERMISSION, HINT_V1};
use files::{keyed, leave_for_parent, mkdir, rmdir_retrying, write_file, write_raw};
use plan::{Plan, RealHost};

pub use error::CgroupError;
pub use pending::{Pending, Unfinished};

pub use freeze::{Freezer, SETTLE_TIMEOUT as FREEZE_SETTLE};
pub use join::{join_self, Joining};
pub use sweep::{sweep, sweep_if_due, MIN_AGE as SWEEP_MIN_AGE};
pub use under::{checked as checked_parent, place_under, ParentError};

/// Name of the shared parent of all sandbox cgroups at a hierarchy's root.
const PARENT: &str = "warden";
/// Prefix of the leaf cgroup a rootless supervisor moves itself into.
const SUPERVISOR_PREFIX: &str = "warden-supervisor-";
/// CFS period for the CPU limit, in microseconds (the kernel's default).
const CPU_PERIOD_US: u64 = 100_000;
/// Smallest quota the kernel accepts, in microseconds.
const CPU_MIN_QUOTA_US: u64 = 1_000;
/// How long `rmdir` is retried while the kernel still counts exiting tasks.
const REMOVE_TIMEOUT: Duration = Duration::from_secs(2);
/// How often removal, emptying and freezing are polled.
const POLL: Duration = Duration::from_millis(10);

/// The cgroup an administrator delegates to one rootless user in a v1
/// hierarchy: `<hierarchy>/warden-user-<uid>`, owned by that user.
const USER_PARENT_PREFIX: &str = "warden-user-";

/// The parent of sandbox cgroups in the v1 hierarchy mounted at `point`:
/// for a rootless user, the cgroup delegated to it when an administrator
/// made one (`warden-user-<uid>`); else the shared `warden` parent (root's,
/// which a rootless user cannot write). Users never share a parent: a
/// user who could write another's could move its processes or lift its
/// limits.
fn v1_parent(point: &Path) -> PathBuf {
    match v1_user_parent(point) {
        Some(mine) if mine.is_dir() => mine,
        _ => point.join(under::shared_parent()),
    }
}

/// The cgroup an administrator may have delegated to this (rootless) user
/// in the v1 hierarchy mounted at `point`; `None` for root.
fn v1_user_parent(point: &Path) -> Option<PathBuf> {
    let uid = nix::unistd::geteuid();
    (!uid.is_root()).then(|| point.join(format!("{USER_PARENT_PREFIX}{uid}")))
}

/// Resource limits for one sandbox. `None` leaves a resource unlimited.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Limits {
    /// Memory of the whole sandbox, in bytes (swap included: it cannot
    /// escape into swap).
    pub memory: Option<u64>,
    /// Processes and threads of the whole sandbox.
    pub pids: Option<u64>,
    /// CPU time, in cores (0.5 is half of one core, 2.0 is two cores).
    pub cpus: Option<f64>,
}

/// How the host mounts cgroups.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Layout {
    /// Only the unified hierarchy (cgroup2).
    V2,
    /// Only v1 hierarchies, one per controller or group of controllers.
    V1,
    /// v1 hierarchies carry the controllers; a cgroup2 mount exists beside
    /// them (often `/sys/fs/cgroup/unified`, with few or no controllers).
    Hybrid,
    /// No cgroup file system is mounted.
    None,
}

/// What this host and this user can do with cgroups (for `warden doctor`
/// and for deciding degradation).
#[derive(Debug, Clone, serde::Serialize)]
pub struct Support {
    pub layout: Layout,
    /// A memory limit can be applied.
    pub memory: bool,
    /// A process-count limit can be applied.
    pub pids: bool,
    /// A CPU quota can be applied.
    pub cpu: bool,
    /// The whole group can be killed (v2 `cgroup.kill` or freeze, v1 freezer,
    /// or a pids limit that stops forks while the members are signalled).
    pub kill: bool,
    /// Why something above is unusable, for a person to read.
    pub why_not: Option<String>,
}

/// Counters of a sandbox's cgroup, read after (or during) the run. `None`
/// where the host does not provide the counter.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Stats {
    /// Times the OOM killer fired inside the cgroup.
    pub oom_kills: Option<u64>,
    /// Highest memory use of the cgroup, in bytes.
    pub memory_peak: Option<u64>,
    /// CPU time spent in user mode, in milliseconds.
    pub cpu_user_ms: Option<u64>,
    /// CPU time spent in the kernel, in milliseconds.
    pub cpu_system_ms: Option<u64>,
}

/// Controllers this module uses.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
enum Controller {
    Memory,
    Pids,
    Cpu,
    /// CPU time accounting (v1 `cpuacct`; v2 `cpu.stat` exists in every cgroup).
    Cpuacct,
    /// Freezing (v1 `freezer`; v2 `cgroup.freeze` exists in every non-root cgroup).
    Freezer,
}

impl Controller {
    const ALL: [Controller; 5] = [
        Controller::Memory,
        Controller::Pids,
        Controller::Cpu,
        Controller::Cpuacct,
        Controller::Freezer,
    ];
    /// The controllers that carry limits; the others only serve stats and kill.
    const LIMITS: [Controller; 3] = [Controller::Memory, Controller::Pids, Controller::Cpu];

    fn name(self) -> &'static str {
        match self {
            Controller::Memory => "memory",
            Controller::Pids => "pids",
            Controller::Cpu => "cpu",
            Controller::Cpuacct => "cpuacct",
            Controller::Freezer => "freezer",
        }
    }

    fn from_name(name: &str) -> Option<Controller> {
        Controller::ALL.into_iter().find(|c| c.name() == name)
    }
}

/// What this host and this user can do with cgroups. Reads files only (and
/// asks `eaccess(2)` about writability); creates nothing.
pub fn probe() -> Support {
    let h = match Hierarchies::discover() {
        Ok(h) => h,
        Err(e) => {
            return Support {
                layout: Layout::None,
                memory: false,
                pids: false,
                cpu: false,
                kill: false,
                why_not: Some(e.to_string()),
            }
        }
    };
    plan::support(&h, &Plan::new(&h, &RealHost))
}

// ---------------------------------------------------------------------------
// The sandbox's cgroup.

/// One directory of the sandbox's cgroup, in one hierarchy.
#[derive(Debug)]
struct Dir {
    path: PathBuf,
    v2: bool,
    /// What this directory provides (for v2: the enabled limit controllers,
    /// plus cpu accounting and freezing, which are core files there).
    controllers: Vec<Controller>,
}

/// One sandbox's cgroup(s): on v1, one directory per controller hierarchy
/// (memory, pids, cpu, and cpuacct and freezer where mounted apart); where
/// available, a v2 directory used for its controllers, or, on a hybrid host,
/// for membership and `cgroup.kill` alone. Removed best-effort on drop.
#[derive(Debug)]
pub struct Cgroup {
    dirs: Vec<Dir>,
}

impl Cgroup {
    /// Create the sandbox's cgroup named `warden-<id>` and apply the limits.
    ///
    /// Where we may write a hierarchy's root (root), it goes under a shared
    /// `warden` directory there: `<mount>/warden/warden-<id>`, wherever the
    /// caller itself sits. For rootless v2 it goes under the caller's own,
    /// delegated cgroup. Fails, leaving nothing behind, if a limit asked for
    /// cannot be applied (rootless v1, non-delegated v2, a missing controller);
    /// the caller decides whether to run without it. Hierarchies only needed
    /// for counters or killing (cpuacct, freezer, the v2 mount of a hybrid
    /// host) are used when possible, and their failure is not fatal.
    pub fn create(id: &str, limits: &Limits) -> Result<Cgroup, CgroupError> {
        Self::begin(id, limits)?.finish().map_err(|u| u.error)
    }

    /// The first half of [`Cgroup::create`]: the plan, the check that every
    /// limit asked for has somewhere to go, and the v2 directory a new
    /// process can be born in (`clone3` with `CLONE_INTO_CGROUP`). The rest
    /// (the v1 directories and every limit) is [`Pending::finish`], which a
    /// supervisor runs while the sandbox's init sets up its IDs and
    /// network: the init joins the v1 directories before it builds its
    /// root (which copies a named sandbox's saved state into memory that
    /// must be charged to the sandbox), and runs only warden's own code
    /// until the supervisor's final message.
    pub fn begin(id: &str, limits: &Limits) -> Result<Pending, CgroupError> {
        let valid_id = !id.is_empty()
            && id != "."
            && id != ".."
            && id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
        if !valid_id {
            return Err(CgroupError::InvalidId { id: id.to_owned() });
        }
        let quota = match limits.cpus {
            Some(cpus) => Some(cpu_quota_us(cpus).ok_or(CgroupError::InvalidCpus { cpus })?),
            None => None,
        };

        let name = format!("warden-{id}");
        let memo_dir = memo::default_dir();
        let (h, plan, source) = memo::plan(memo_dir.as_deref(), false)?;
        match Pending::begin_planned(h, plan, &name, limits, quota) {
            // A remembered plan that no longer fits the host (a controller
            // moved, a delegation withdrawn or granted) costs a retry with
            // the host as it is now, never a wrong answer.
            Err(e) if source == memo::Source::Remembered => {
                tracing::debug!(error = %e, "the remembered cgroup plan failed; discovering again");
                let (h, plan, _) = memo::plan(memo_dir.as_deref(), true)?;
                Pending::begin_planned(h, plan, &name, limits, quota)
            }
            done => done.map(|mut p| {
                p.remembered = source == memo::Source::Remembered;
                p
            }),
        }
    }

    fn set_memory(&self, bytes: u64) -> Result<(), CgroupError> {
        let dir = self.require(Controller::Memory)?;
        let value = bytes.to_string();
        if dir.v2 {
            v2::set_memory(&dir.path, &value)
        } else {
            v1::set_memory(&dir.path, &value)
        }
    }

    /// The directory providing `c`; v1 first, since where a v1 hierarchy
    /// carries a controller (or cpuacct/freezer), it is the one that counts.
    fn dir(&self, c: Controller) -> Option<&Dir> {
        self.dirs
            .iter()
            .filter(|d| d.controllers.contains(&c))
            .min_by_key(|d| d.v2)
    }

    fn require(&self, c: Controller) -> Result<&Dir, CgroupError> {
        self.dir(c).ok_or_else(|| CgroupError::Unavailable {
            controller: c.name(),
            reason: "the sandbox's cgroup has no directory in a hierarchy with this controller"
                .into(),
        })
    }

    /// The directory errors name (the first hierarchy's).
    fn main_path(&self) -> PathBuf {
        self.dirs
            .first()
            .map(|d| d.path.clone())
            .unwrap_or_default()
    }

    /// The group's freezer, found as [`Freezer::find`] does among its
    /// directories.
    pub fn freezer(&self) -> Option<Freezer> {
        let dir = self.dir(Controller::Freezer)?;
        Freezer::at(&dir.path, dir.v2)
    }

    fn v2_dir(&self) -> Option<&Dir> {
        self.dirs.iter().find(|d| d.v2)
    }

    /// Move a process (host pid) into every hierarchy of this cgroup. Its
    /// future children inherit all of them.
    pub fn add_process(&self, pid: i32) -> Result<(), CgroupError> {
        // The kernel reads 0 as "the writer": warden itself would move in.
        if pid <= 0 {
            return Err(CgroupError::AddProcess {
                pid,
                path: self.main_path(),
                hint: "pass the host pid of the sandbox's process",
                source: io::Error::from(io::ErrorKind::InvalidInput),
            });
        }
        for dir in &self.dirs {
            let path = dir.path.join("cgroup.procs");
            write_raw(&path, &pid.to_string()).map_err(|source| CgroupError::AddProcess {
                pid,
                path: dir.path.clone(),
                hint: hint(Op::AddProcess, &source),
                source,
            })?;
        }
        Ok(())
    }

    /// Every process in the cgroup (the union over its hierarchies).
    pub fn procs(&self) -> Result<Vec<i32>, CgroupError> {
        let mut all = BTreeSet::new();
        for dir in &self.dirs {
            let path = dir.path.join("cgroup.procs");
            match fs::read_to_string(&path) {
                // Only real pids: signalling 0 or -1 would hit warden's own
                // process group or every process it may signal.
                Ok(text) => all.extend(
                    text.lines()
                        .filter_map(|l| l.trim().parse::<i32>().ok())
                        .filter(|&p| p > 0),
                ),
                // Already removed: nothing inside.
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(source) => return Err(CgroupError::Read { path, source }),
            }
        }
        Ok(all.into_iter().collect())
    }

    /// Counters after the run. Missing files give `None`.
    pub fn stats(&self) -> Stats {
        let mut stats = Stats::default();
        if let Some(dir) = self.dir(Controller::Memory) {
            (stats.oom_kills, stats.memory_peak) = if dir.v2 {
                v2::memory_stats(&dir.path)
            } else {
                v1::memory_stats(&dir.path)
            };
        }
        if let Some(dir) = self.dir(Controller::Cpuacct) {
            (stats.cpu_user_ms, stats.cpu_system_ms) = if dir.v2 {
                v2::cpu_stats(&dir.path)
            } else {
                v1::cpu_stats(&dir.path)
            };
        }
        stats
    }

    /// Remove the directories: kill what is left inside first, remove each
    /// sandbox directory (retrying while the kernel still counts exiting
    /// tasks), then the shared `warden` parents that no sandbox uses any more.
    pub fn remove(mut self) -> Result<(), CgroupError> {
        self.teardown()
    }

    fn teardown(&mut self) -> Result<(), CgroupError> {
        if self.dirs.is_empty() {
            return Ok(());
        }
        // The common case is an empty cgroup (the sandbox's PID namespace is
        // gone): remove it straight away, and kill only when the kernel says
        // it is still busy. A directory busy with the caller itself (an OCI
        // supervisor joins its sandbox's v1 `memory` and `cpu` cgroups, where
        // containerd's shim reads a container's stats) is left for its
        // parent first: the kernel never removes a cgroup its remover is
        // in, and each such directory cost the whole retry below.
        let mut busy = false;
        for d in &self.dirs {
            let removed = match fs::remove_dir(&d.path) {
                Ok(()) => true,
                Err(e) if e.kind() == io::ErrorKind::NotFound => true,
                Err(_) => leave_for_parent(&d.path) && fs::remove_dir(&d.path).is_ok(),
            };
            busy |= !removed;
        }
        let killed = if busy { self.kill_all() } else { Ok(()) };
        let dirs = std::mem::take(&mut self.dirs);
        let mut first_error = killed.err();
        if busy {
            for dir in &dirs {
                if let Err(e) = rmdir_retrying(&dir.path) {
                    first_error.get_or_insert(e);
                }
            }
        }
        // The shared `warden` parents stay, like a slice: removing and
        // recreating them on every run costs two syscalls per hierarchy and
        // races with sandboxes starting next to this one.
        first_error.map_or(Ok(()), Err)
    }

    /// Every directory created for this sandbox (one per hierarchy). The
    /// shared `warden` parents are not listed: other sandboxes use them too.
    pub fn paths(&self) -> Vec<PathBuf> {
        self.dirs.iter().map(|d| d.path.clone()).collect()
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        if let Err(e) = self.teardown() {
            tracing::warn!(error = %e, "sandbox cgroup not fully removed");
        }
    }
}

/// CFS quota for `cpus` cores with a period of [`CPU_PERIOD_US`].
fn cpu_quota_us(cpus: f64) -> Option<u64> {
    if !cpus.is_finite() || cpus <= 0.0 {
        return None;
    }
    let quota = (cpus * CPU_PERIOD_US as f64).round();
    // Float to int `as` saturates; the kernel bounds the quota itself.
    Some((quota as u64).max(CPU_MIN_QUOTA_US))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    #[test]
    fn cpu_limits_become_quotas_over_a_100ms_period() {
        assert_eq!(cpu_quota_us(0.5), Some(50_000));
        assert_eq!(cpu_quota_us(2.0), Some(200_000));
        assert_eq!(cpu_quota_us(0.0001), Some(CPU_MIN_QUOTA_US));
        assert_eq!(cpu_quota_us(0.0), None);
        assert_eq!(cpu_quota_us(-1.0), None);
        assert_eq!(cpu_quota_us(f64::NAN), None);
        assert_eq!(cpu_quota_us(f64::INFINITY), None);
    }
}
