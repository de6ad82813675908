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
//! sandbox); `sweep` removes what sandboxes killed outright left. This
//! file is the façade the rest of the jail calls: the types and
//! errors, [`probe`], and [`Cgroup`], which ties the sandbox's directories
//! together and removes them.

mod discover;
mod freeze;
mod join;
mod kill;
mod memo;
mod plan;
mod sweep;
mod under;
mod v1;
mod v2;

use std::collections::BTreeSet;
use std::fs;
use std::io::{self, Write as _};
use std::os::fd::OwnedFd;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::thread::sleep;
use std::time::{Duration, Instant};

use nix::errno::Errno;

use discover::Hierarchies;
use plan::{Backend, Plan, RealHost};

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

/// What a person can do when cgroups are out of reach for this user.
const HINT_PERMISSION: &str = "run as root or on a host with a delegated cgroup v2 subtree \
     (systemd-run --user --scope -p Delegate=yes)";
/// The same for v1 hierarchies: an administrator delegates one cgroup per
/// user, once.
const HINT_V1: &str = "run as root, or have an administrator delegate a cgroup of each v1 \
     hierarchy to this user once (as root, for each of memory, pids and cpu: mkdir \
     <hierarchy>/warden-user-UID and chown it to the user; see docs/install.md), or use a host \
     with cgroup v2 and a delegated subtree (systemd-run --user --scope -p Delegate=yes)";
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

/// Errors of the cgroup layer. Each says what was attempted, on which path,
/// and what a person can do about it; the cause is the `source`.
#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    #[error("cannot read {path} to find the cgroup hierarchies; is /proc mounted?")]
    Discover {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("sandbox id {id:?} cannot name a cgroup; use only letters, digits, '-', '_' and '.'")]
    InvalidId { id: String },
    #[error("cpu limit {cpus} is not a positive, finite number of cores")]
    InvalidCpus { cpus: f64 },
    #[error("cannot apply the {controller} limit: {reason}")]
    Unavailable {
        controller: &'static str,
        reason: String,
    },
    #[error("cannot create cgroup {path}: {hint}")]
    Create {
        path: PathBuf,
        hint: &'static str,
        #[source]
        source: io::Error,
    },
    #[error("cannot write {value:?} to {path}: {hint}")]
    Write {
        path: PathBuf,
        value: String,
        hint: &'static str,
        #[source]
        source: io::Error,
    },
    #[error("cannot read {path} of the sandbox's cgroup")]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot move process {pid} into {path}: {hint}")]
    AddProcess {
        pid: i32,
        path: PathBuf,
        hint: &'static str,
        #[source]
        source: io::Error,
    },
    #[error("refusing to kill cgroup {path}: it holds warden's own process {pid}; a process was added to the wrong cgroup")]
    HoldsCaller { path: PathBuf, pid: i32 },
    #[error("cannot send SIGKILL to process {pid} of cgroup {path}: {hint}")]
    Signal {
        pid: i32,
        path: PathBuf,
        hint: &'static str,
        #[source]
        source: io::Error,
    },
    #[error(
        "processes {pids:?} of cgroup {path} survived SIGKILL for {waited:?}; they are likely \
         in uninterruptible sleep (inspect them with `ps -o pid,stat,wchan -p PID`)"
    )]
    Survivors {
        path: PathBuf,
        pids: Vec<i32>,
        waited: Duration,
    },
    #[error("the processes of cgroup {path} did not all freeze within {waited:?} (one in uninterruptible sleep, waiting on a disk or the network, cannot be frozen); the group was thawed again: try again")]
    FreezeTimeout { path: PathBuf, waited: Duration },
    #[error("cannot remove cgroup {path}: {hint}")]
    Remove {
        path: PathBuf,
        hint: &'static str,
        #[source]
        source: io::Error,
    },
}

impl CgroupError {
    /// The errno behind this error, when there is one.
    fn errno(&self) -> Option<i32> {
        match self {
            Self::Discover { source, .. }
            | Self::Create { source, .. }
            | Self::Write { source, .. }
            | Self::Read { source, .. }
            | Self::AddProcess { source, .. }
            | Self::Signal { source, .. }
            | Self::Remove { source, .. } => source.raw_os_error(),
            _ => None,
        }
    }
}

/// What a cgroup operation was, to choose the advice that goes with an errno.
#[derive(Clone, Copy)]
enum Op {
    Create,
    Write,
    SubtreeControl,
    AddProcess,
    Signal,
    Remove,
}

/// Advice for a failed operation, chosen by what the kernel said.
fn hint(op: Op, err: &io::Error) -> &'static str {
    let errno = err.raw_os_error().map(Errno::from_raw);
    match (op, errno) {
        (_, Some(Errno::EACCES | Errno::EPERM)) => HINT_PERMISSION,
        (_, Some(Errno::EROFS)) => {
            "the cgroup file system is mounted read-only (as in most containers); \
             mount it read-write or delegate a cgroup v2 subtree to this user"
        }
        (Op::Create, Some(Errno::EEXIST)) => {
            "a cgroup with this sandbox id already exists: another sandbox with this id \
             is running, or a crashed one left it behind (remove it with rmdir)"
        }
        (Op::Create, Some(Errno::ENOENT)) => "its parent cgroup disappeared while creating it",
        (Op::SubtreeControl, Some(Errno::EBUSY)) => {
            "the cgroup holds processes of its own, and cgroup v2 lets only cgroups without \
             processes hand controllers to children; start warden in a cgroup of its own \
             (systemd-run --user --scope -p Delegate=yes)"
        }
        (Op::SubtreeControl, Some(Errno::ENOENT)) => {
            "the controller is not available to this cgroup (see its cgroup.controllers)"
        }
        (Op::Write, Some(Errno::ENOENT)) => {
            "the controller's file is missing; is the controller enabled for this cgroup?"
        }
        (Op::Write, Some(Errno::EINVAL)) => {
            "the kernel rejected the value; check the limit (a CPU quota may not exceed a \
             parent's, memory may not be below what is in use)"
        }
        (Op::Write | Op::AddProcess, Some(Errno::EBUSY)) => {
            "the kernel refused while the cgroup is in use; retry when its processes have exited"
        }
        (Op::AddProcess, Some(Errno::ESRCH)) => "the process has already exited",
        (Op::AddProcess, Some(Errno::ENOSPC | Errno::EOPNOTSUPP)) => {
            "the cgroup cannot take processes (cgroup v2 allows processes only in leaves)"
        }
        (Op::Remove, Some(Errno::EBUSY | Errno::ENOTEMPTY)) => {
            "processes or child cgroups are still inside; kill them and retry"
        }
        (Op::Signal, _) => "the process may belong to another user",
        _ => "see the kernel log (dmesg) for cgroup messages",
    }
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
        // it is still busy.
        let busy = self.dirs.iter().any(|d| match fs::remove_dir(&d.path) {
            Ok(()) => false,
            Err(e) => e.kind() != io::ErrorKind::NotFound,
        });
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

/// Why [`Pending::finish`] failed, and what exists of the cgroup (the v2
/// directory, if any), removed when dropped.
#[derive(Debug)]
pub struct Unfinished {
    pub error: CgroupError,
    pub made: Cgroup,
}

/// A sandbox's cgroup between [`Cgroup::begin`] and [`Pending::finish`]:
/// its v2 directory (if the plan has one) exists, nothing else does.
/// Dropping it removes what was made.
#[derive(Debug)]
pub struct Pending {
    cg: Cgroup,
    h: Hierarchies,
    plan: Plan,
    name: String,
    limits: Limits,
    quota: Option<u64>,
    required: Vec<(Controller, Backend)>,
    /// The plan came from the memo (a failure in `finish` is retried on a
    /// fresh discovery).
    remembered: bool,
}

impl Pending {
    fn begin_planned(
        h: Hierarchies,
        plan: Plan,
        name: &str,
        limits: &Limits,
        quota: Option<u64>,
    ) -> Result<Pending, CgroupError> {
        let wanted = [
            (Controller::Memory, limits.memory.is_some()),
            (Controller::Pids, limits.pids.is_some()),
            (Controller::Cpu, quota.is_some()),
        ];
        // Fail before creating anything when a limit has nowhere to go.
        let mut required = Vec::new();
        for (c, _) in wanted.iter().filter(|(_, w)| *w) {
            let backend = plan
                .backend(&h, *c)
                .map_err(|reason| CgroupError::Unavailable {
                    controller: c.name(),
                    reason,
                })?;
            required.push((*c, backend));
        }
        // Dropping `cg` on an error path removes what was created so far.
        let mut cg = Cgroup { dirs: Vec::new() };
        if let Some(v2) = &plan.v2 {
            let enable = plan.v2_controllers(&h);
            let needed: Vec<Controller> = required
                .iter()
                .filter(|(_, b)| *b == Backend::V2)
                .map(|(c, _)| *c)
                .collect();
            match with_parent_retry(|| v2::create(&v2.place, name, &enable, &needed)) {
                Ok(dir) => cg.dirs.push(dir),
                Err(e) if !needed.is_empty() => return Err(e),
                Err(e) => tracing::debug!(error = %e, "optional cgroup v2 directory left out"),
            }
        }
        Ok(Pending {
            cg,
            h,
            plan,
            name: name.to_owned(),
            limits: *limits,
            quota,
            required,
            remembered: false,
        })
    }

    /// The v2 directory, open for `clone3(CLONE_INTO_CGROUP)`, if there is
    /// one.
    pub fn v2_dir(&self) -> Result<Option<OwnedFd>, CgroupError> {
        match self.cg.v2_dir() {
            Some(dir) => fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_DIRECTORY)
                .open(&dir.path)
                .map(|f| Some(f.into()))
                .map_err(|source| CgroupError::AddProcess {
                    pid: 0,
                    path: dir.path.clone(),
                    hint: hint(Op::AddProcess, &source),
                    source,
                }),
            None => Ok(None),
        }
    }

    /// The v1 directories this plan joins (none: nothing to hand over).
    pub fn has_v1(&self) -> bool {
        self.plan.v1_usable.iter().any(|&i| self.v1_useful(i))
    }

    fn v1_useful(&self, i: usize) -> bool {
        let needed = self.required.iter().any(|(_, b)| *b == Backend::V1(i));
        // Every hierarchy joined costs a migration at start and an rmdir
        // at the end. CPU time comes from the init's rusage, and killing
        // from the v2 directory's cgroup.kill (or the PID namespace), so
        // cpuacct and freezer are joined only when there is no v2
        // directory to kill through.
        needed
            || (self.plan.v2.is_none() && self.h.v1[i].controllers.contains(&Controller::Freezer))
    }

    /// The second half of [`Cgroup::create`]: the v1 directories and every
    /// limit. A failure on a remembered plan is tried once more on the host
    /// as discovered now (the v2 directory stays as it is). On failure, what
    /// [`Cgroup::begin`] made is handed back with the error: a process may
    /// already live in its v2 directory, which can be removed only once that
    /// process is gone.
    pub fn finish(mut self) -> Result<Cgroup, Unfinished> {
        let done = match self.finish_planned() {
            Err(e) if self.remembered => {
                tracing::debug!(error = %e, "the remembered cgroup plan failed; discovering again");
                match memo::plan(memo::default_dir().as_deref(), true) {
                    Ok((h, plan, _)) if plan.v2.is_some() == self.plan.v2.is_some() => {
                        // Where each limit goes, on the plan as it is now;
                        // the v2 directory made by `begin` must still be
                        // where the v2-backed ones go.
                        match self.required_on(&h, &plan) {
                            Some(required) => {
                                self.remove_v1();
                                self.h = h;
                                self.plan = plan;
                                self.required = required;
                                self.remembered = false;
                                self.finish_planned()
                            }
                            None => Err(e),
                        }
                    }
                    Ok(_) => Err(e),
                    Err(again) => Err(again),
                }
            }
            done => done,
        };
        match done {
            Ok(()) => Ok(self.cg),
            Err(error) => {
                // Only what `begin` made is kept for the caller to remove.
                self.remove_v1();
                Err(Unfinished {
                    error,
                    made: self.cg,
                })
            }
        }
    }

    /// The controllers this cgroup's limits need, placed on `plan`, when
    /// the ones placed on v2 are the same as on the plan `begin` used
    /// (its v2 directory, already made, serves them).
    fn required_on(&self, h: &Hierarchies, plan: &Plan) -> Option<Vec<(Controller, Backend)>> {
        let mut required = Vec::new();
        for (c, _) in &self.required {
            required.push((*c, plan.backend(h, *c).ok()?));
        }
        let on_v2 = |r: &[(Controller, Backend)]| -> Vec<Controller> {
            r.iter()
                .filter(|(_, b)| *b == Backend::V2)
                .map(|(c, _)| *c)
                .collect()
        };
        (on_v2(&required) == on_v2(&self.required)).then_some(required)
    }

    /// Remove the v1 directories made so far (a `Cgroup` of them, dropped).
    fn remove_v1(&mut self) {
        let (v2, v1): (Vec<Dir>, Vec<Dir>) = std::mem::take(&mut self.cg.dirs)
            .into_iter()
            .partition(|d| d.v2);
        self.cg.dirs = v2;
        drop(Cgroup { dirs: v1 });
    }

    fn finish_planned(&mut self) -> Result<(), CgroupError> {
        let usable = self.plan.v1_usable.clone();
        for i in usable {
            if !self.v1_useful(i) {
                continue;
            }
            let needed = self.required.iter().any(|(_, b)| *b == Backend::V1(i));
            let v1 = &self.h.v1[i];
            let name = &self.name;
            match with_parent_retry(|| v1::create(v1, name)) {
                // In the plan's order, before the v2 directory (as
                // `Cgroup::paths` lists them).
                Ok(dir) => {
                    let at = self.cg.dirs.iter().filter(|d| !d.v2).count();
                    self.cg.dirs.insert(at, dir);
                }
                Err(e) if needed => return Err(e),
                Err(e) => tracing::debug!(error = %e, "optional cgroup v1 hierarchy left out"),
            }
        }
        let cg = &self.cg;
        if let Some(bytes) = self.limits.memory {
            cg.set_memory(bytes)?;
        }
        if let Some(n) = self.limits.pids {
            let dir = cg.require(Controller::Pids)?;
            write_file(&dir.path.join("pids.max"), &n.to_string(), Op::Write)?;
        }
        if let Some(quota) = self.quota {
            let dir = cg.require(Controller::Cpu)?;
            if dir.v2 {
                v2::set_cpu_quota(&dir.path, quota)?;
            } else {
                v1::set_cpu_quota(&dir.path, quota)?;
            }
        }
        tracing::debug!(paths = ?cg.paths(), "sandbox cgroup created");
        Ok(())
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        if let Err(e) = self.teardown() {
            tracing::warn!(error = %e, "sandbox cgroup not fully removed");
        }
    }
}

/// Run `f` again when the shared `warden` parent vanished under it (another
/// sandbox's removal pruned it between our mkdir and our use).
fn with_parent_retry(mut f: impl FnMut() -> Result<Dir, CgroupError>) -> Result<Dir, CgroupError> {
    let mut attempts = 0;
    loop {
        match f() {
            Err(e) if e.errno() == Some(libc::ENOENT) && attempts < 3 => attempts += 1,
            other => return other,
        }
    }
}

fn mkdir(path: &Path, exist_ok: bool) -> Result<(), CgroupError> {
    match fs::create_dir(path) {
        Ok(()) => Ok(()),
        Err(e) if exist_ok && e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(source) => Err(CgroupError::Create {
            path: path.to_path_buf(),
            hint: hint(Op::Create, &source),
            source,
        }),
    }
}

fn rmdir_retrying(path: &Path) -> Result<(), CgroupError> {
    let deadline = Instant::now() + REMOVE_TIMEOUT;
    loop {
        match fs::remove_dir(path) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) && Instant::now() < deadline => {
                sleep(POLL)
            }
            Err(source) => {
                return Err(CgroupError::Remove {
                    path: path.to_path_buf(),
                    hint: hint(Op::Remove, &source),
                    source,
                })
            }
        }
    }
}

/// Write `value` to a cgroup file in one write(2), as the kernel expects.
fn write_raw(path: &Path, value: &str) -> io::Result<()> {
    let mut file = fs::OpenOptions::new().write(true).open(path)?;
    file.write_all(value.as_bytes())
}

fn write_file(path: &Path, value: &str, op: Op) -> Result<(), CgroupError> {
    write_raw(path, value).map_err(|source| CgroupError::Write {
        path: path.to_path_buf(),
        value: value.to_owned(),
        hint: hint(op, &source),
        source,
    })
}

/// The value of `key` in a "key value" per line file (memory.events,
/// cpu.stat, memory.oom_control, cpuacct.stat).
fn keyed(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let mut parts = line.split_whitespace();
        (parts.next()? == key).then(|| parts.next()?.parse().ok())?
    })
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
    fn counters_are_read_by_key() {
        let events = "low 0\nhigh 0\nmax 12\noom 2\noom_kill 1\noom_group_kill 0\n";
        assert_eq!(keyed(events, "oom_kill"), Some(1));
        assert_eq!(keyed(events, "oom"), Some(2));
        assert_eq!(keyed(events, "absent"), None);
        assert_eq!(keyed("user 25\nsystem 7\n", "system"), Some(7));
    }

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
