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

use std::collections::BTreeSet;
use std::fs;
use std::io::{self, Write as _};
use std::path::{Path, PathBuf};
use std::thread::sleep;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::signal::{kill, Signal};
use nix::unistd::{AccessFlags, Pid, SysconfVar};

/// Where the kernel describes this process's mounts.
const MOUNTINFO: &str = "/proc/self/mountinfo";
/// Where the kernel describes this process's cgroup in each hierarchy.
const PROC_CGROUP: &str = "/proc/self/cgroup";
/// Name of the shared parent of all sandbox cgroups at a hierarchy's root.
const PARENT: &str = "warden";
/// Prefix of the leaf cgroup a rootless supervisor moves itself into.
const SUPERVISOR_PREFIX: &str = "warden-supervisor-";
/// CFS period for the CPU limit, in microseconds (the kernel's default).
const CPU_PERIOD_US: u64 = 100_000;
/// Smallest quota the kernel accepts, in microseconds.
const CPU_MIN_QUOTA_US: u64 = 1_000;
/// How long killed processes may take to leave the cgroup.
const KILL_TIMEOUT: Duration = Duration::from_secs(5);
/// How long `cgroup.kill` alone is trusted before falling back to signals.
const KILL_FAST_PATH: Duration = Duration::from_secs(1);
/// How long a freeze may take before we signal without it.
const FREEZE_TIMEOUT: Duration = Duration::from_secs(1);
/// How long `rmdir` is retried while the kernel still counts exiting tasks.
const REMOVE_TIMEOUT: Duration = Duration::from_secs(2);
/// How often the above are polled.
const POLL: Duration = Duration::from_millis(10);

/// What a person can do when cgroups are out of reach for this user.
const HINT_PERMISSION: &str = "run as root or on a host with a delegated cgroup v2 subtree \
     (systemd-run --user --scope -p Delegate=yes)";
/// The same for v1 hierarchies, which the kernel cannot delegate safely.
const HINT_V1: &str = "run as root, or on a host with cgroup v2 (unified) and a delegated \
     subtree (systemd-run --user --scope -p Delegate=yes)";

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
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
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

/// Controller names the kernel may list in a v1 mount's super options; any
/// other option (rw, xattr, clone_children, release_agent=...) is not one.
const V1_CONTROLLERS: &[&str] = &[
    "cpuset",
    "cpu",
    "cpuacct",
    "blkio",
    "io",
    "memory",
    "devices",
    "freezer",
    "net_cls",
    "perf_event",
    "net_prio",
    "hugetlb",
    "pids",
    "rdma",
    "misc",
    "debug",
];

// ---------------------------------------------------------------------------
// Discovery: which hierarchies the host mounts and where this process is.

/// One cgroup mount from `/proc/self/mountinfo`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Mount {
    /// Where it is mounted.
    point: PathBuf,
    /// Which cgroup of the hierarchy is the mount's root (not "/" for bind
    /// mounts and inside cgroup namespaces).
    root: String,
    /// For v1, the controllers and `name=` of the hierarchy; `None` for v2.
    v1_subsystems: Option<BTreeSet<String>>,
}

/// Decode the octal escapes (`\040` for a space) of a mountinfo field.
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' && i + 3 < bytes.len() {
            let digits = &bytes[i + 1..i + 4];
            if digits.iter().all(|d| (b'0'..=b'7').contains(d)) {
                let value = digits
                    .iter()
                    .fold(0u32, |acc, d| acc * 8 + u32::from(d - b'0'));
                if let Ok(byte) = u8::try_from(value) {
                    out.push(byte);
                    i += 4;
                    continue;
                }
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The cgroup and cgroup2 mounts of a mountinfo text, in order.
fn parse_mountinfo(text: &str) -> Vec<Mount> {
    let mut mounts = Vec::new();
    for line in text.lines() {
        // "<id> <parent> <maj:min> <root> <point> <opts> [optional...] - <type> <source> <superopts>"
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        let left: Vec<&str> = left.split(' ').collect();
        let (Some(root), Some(point)) = (left.get(3), left.get(4)) else {
            continue;
        };
        let mut right = right.split(' ');
        let fstype = right.next().unwrap_or_default();
        let _source = right.next();
        let superopts = right.next().unwrap_or_default();
        let v1_subsystems = match fstype {
            "cgroup2" => None,
            "cgroup" => Some(
                superopts
                    .split(',')
                    .filter(|o| V1_CONTROLLERS.contains(o) || o.starts_with("name="))
                    .map(str::to_owned)
                    .collect(),
            ),
            _ => continue,
        };
        mounts.push(Mount {
            point: PathBuf::from(unescape(point)),
            root: unescape(root),
            v1_subsystems,
        });
    }
    mounts
}

/// One line of `/proc/self/cgroup`: the hierarchy's subsystems (empty for
/// v2) and this process's cgroup in it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Membership {
    subsystems: BTreeSet<String>,
    path: String,
}

fn parse_proc_cgroup(text: &str) -> Vec<Membership> {
    text.lines()
        .filter_map(|line| {
            let mut parts = line.splitn(3, ':');
            let _id = parts.next()?;
            let subsystems = parts.next()?;
            let path = parts.next()?;
            Some(Membership {
                subsystems: subsystems
                    .split(',')
                    .filter(|s| !s.is_empty())
                    .map(str::to_owned)
                    .collect(),
                path: path.to_owned(),
            })
        })
        .collect()
}

/// A v1 hierarchy the host mounts.
#[derive(Debug, Clone, PartialEq, Eq)]
struct V1Hierarchy {
    point: PathBuf,
    /// The controllers of ours it carries (several when co-mounted, as
    /// `cpu,cpuacct` usually is).
    controllers: Vec<Controller>,
    /// Whether it carries any real controller (not only `name=systemd`).
    has_controllers: bool,
}

/// The v2 hierarchy the host mounts.
#[derive(Debug, Clone, PartialEq, Eq)]
struct V2Hierarchy {
    point: PathBuf,
    /// This process's cgroup directory, when visible through the mount.
    own: Option<PathBuf>,
}

/// The cgroup hierarchies of this host, as this process sees them.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Hierarchies {
    v1: Vec<V1Hierarchy>,
    v2: Option<V2Hierarchy>,
}

impl Hierarchies {
    fn discover() -> Result<Self, CgroupError> {
        let read = |path: &str| {
            fs::read_to_string(path).map_err(|source| CgroupError::Discover {
                path: PathBuf::from(path),
                source,
            })
        };
        Ok(Self::parse(&read(MOUNTINFO)?, &read(PROC_CGROUP)?))
    }

    fn parse(mountinfo: &str, proc_cgroup: &str) -> Self {
        let memberships = parse_proc_cgroup(proc_cgroup);
        let mut v1: Vec<V1Hierarchy> = Vec::new();
        let mut seen: Vec<BTreeSet<String>> = Vec::new();
        let mut v2 = None;
        for mount in parse_mountinfo(mountinfo) {
            match mount.v1_subsystems {
                Some(subsystems) => {
                    // A hierarchy mounted twice (bind mounts) is used once.
                    if subsystems.is_empty() || seen.contains(&subsystems) {
                        continue;
                    }
                    let controllers = subsystems
                        .iter()
                        .filter_map(|s| Controller::from_name(s))
                        .collect();
                    let has_controllers = subsystems.iter().any(|s| !s.starts_with("name="));
                    seen.push(subsystems);
                    v1.push(V1Hierarchy {
                        point: mount.point,
                        controllers,
                        has_controllers,
                    });
                }
                None if v2.is_none() => {
                    let own = memberships
                        .iter()
                        .find(|m| m.subsystems.is_empty())
                        .and_then(|m| below_mount(&mount.point, &mount.root, &m.path));
                    v2 = Some(V2Hierarchy {
                        point: mount.point,
                        own,
                    });
                }
                None => {}
            }
        }
        Hierarchies { v1, v2 }
    }

    fn layout(&self) -> Layout {
        let v1 = self.v1.iter().any(|h| h.has_controllers);
        match (v1, self.v2.is_some()) {
            (true, true) => Layout::Hybrid,
            (true, false) => Layout::V1,
            (false, true) => Layout::V2,
            (false, false) if !self.v1.is_empty() => Layout::V1,
            (false, false) => Layout::None,
        }
    }
}

/// The directory of cgroup `path` (as `/proc/self/cgroup` names it) under a
/// mount whose root is cgroup `root`; `None` when it lies outside the mount.
fn below_mount(point: &Path, root: &str, path: &str) -> Option<PathBuf> {
    if path.ends_with(" (deleted)") {
        return None;
    }
    let rel = if root == "/" {
        path
    } else {
        let rest = path.strip_prefix(root)?;
        if !(rest.is_empty() || rest.starts_with('/')) {
            return None;
        }
        rest
    };
    let rel = rel.trim_start_matches('/');
    if rel.split('/').any(|c| c == "..") {
        return None;
    }
    Some(if rel.is_empty() {
        point.to_path_buf()
    } else {
        point.join(rel)
    })
}

// ---------------------------------------------------------------------------
// Planning: which hierarchy gives each controller, for this user. Pure over a
// view of the file system, so the same decisions serve `probe` (no side
// effects) and `create`, and can be tested with fake hosts.

/// The parts of the file system the plan looks at.
trait HostView {
    /// The effective user may write `path` (`eaccess(2)`, which also reports
    /// read-only mounts).
    fn writable(&self, path: &Path) -> bool;
    fn exists(&self, path: &Path) -> bool;
    fn read(&self, path: &Path) -> Option<String>;
}

struct RealHost;

impl HostView for RealHost {
    fn writable(&self, path: &Path) -> bool {
        nix::unistd::eaccess(path, AccessFlags::W_OK).is_ok()
    }
    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }
    fn read(&self, path: &Path) -> Option<String> {
        fs::read_to_string(path).ok()
    }
}

/// Which hierarchy provides a controller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Backend {
    /// The v1 hierarchy at this index of [`Hierarchies::v1`].
    V1(usize),
    V2,
}

/// Where the sandbox's v2 cgroup goes.
#[derive(Debug, Clone, PartialEq, Eq)]
enum V2Place {
    /// We may write the hierarchy's root (root, or a cgroup namespace we own):
    /// `<root>/warden/warden-<id>`.
    Root { root: PathBuf },
    /// The caller's own cgroup is delegated to it: `<own>/warden-<id>`.
    Delegated { own: PathBuf },
}

impl V2Place {
    /// The cgroup whose `cgroup.controllers` lists what sandboxes can get.
    fn base(&self) -> &Path {
        match self {
            V2Place::Root { root } => root,
            V2Place::Delegated { own } => own,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct V2Plan {
    place: V2Place,
    /// Controllers of ours listed in the base's `cgroup.controllers`.
    available: Vec<Controller>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Plan {
    layout: Layout,
    /// Indexes of the v1 hierarchies (of ours) whose `warden` parent we may write.
    v1_usable: Vec<usize>,
    /// Why a v1 hierarchy of ours is not usable, by index.
    v1_why_not: Vec<(usize, String)>,
    v2: Option<V2Plan>,
    /// Why the v2 hierarchy is not usable, when it exists.
    v2_why_not: Option<String>,
}

impl Plan {
    fn new(h: &Hierarchies, host: &dyn HostView) -> Plan {
        let mut v1_usable = Vec::new();
        let mut v1_why_not = Vec::new();
        for (i, v1) in h.v1.iter().enumerate() {
            if v1.controllers.is_empty() {
                continue;
            }
            let parent = v1.point.join(PARENT);
            let ok = if host.exists(&parent) {
                host.writable(&parent)
            } else {
                host.writable(&v1.point)
            };
            if ok {
                v1_usable.push(i);
            } else {
                v1_why_not.push((
                    i,
                    format!(
                        "the cgroup v1 hierarchy {} is not writable by this user; {HINT_V1}",
                        v1.point.display()
                    ),
                ));
            }
        }

        let (v2, v2_why_not) = match &h.v2 {
            None => (None, None),
            Some(v2) => match v2_place(v2, host) {
                Ok(place) => {
                    let available = host
                        .read(&place.base().join("cgroup.controllers"))
                        .map(|text| {
                            text.split_whitespace()
                                .filter_map(Controller::from_name)
                                .filter(|c| Controller::LIMITS.contains(c))
                                .collect()
                        })
                        .unwrap_or_default();
                    (Some(V2Plan { place, available }), None)
                }
                Err(why) => (None, Some(why)),
            },
        };

        Plan {
            layout: h.layout(),
            v1_usable,
            v1_why_not,
            v2,
            v2_why_not,
        }
    }

    /// The hierarchy that provides `c` to sandboxes, or why none can.
    fn backend(&self, h: &Hierarchies, c: Controller) -> Result<Backend, String> {
        // A controller is bound to one hierarchy at a time; where a v1
        // hierarchy carries it, v2 cannot offer it.
        if let Some(i) = h.v1.iter().position(|v1| v1.controllers.contains(&c)) {
            if self.v1_usable.contains(&i) {
                return Ok(Backend::V1(i));
            }
            let why = self.v1_why_not.iter().find(|(j, _)| *j == i);
            return Err(why.map(|(_, w)| w.clone()).unwrap_or_default());
        }
        if h.v2.is_none() {
            return Err(format!(
                "no cgroup hierarchy carries the {} controller",
                c.name()
            ));
        }
        let Some(plan) = &self.v2 else {
            return Err(self.v2_why_not.clone().unwrap_or_default());
        };
        match c {
            // Core files of every non-root v2 cgroup.
            Controller::Cpuacct | Controller::Freezer => Ok(Backend::V2),
            _ if plan.available.contains(&c) => Ok(Backend::V2),
            _ => Err(format!(
                "the {} controller is not available in {} (see cgroup.controllers there){}",
                c.name(),
                plan.place.base().display(),
                if matches!(plan.place, V2Place::Delegated { .. }) {
                    "; ask for it to be delegated (systemd: Delegate=memory pids cpu)"
                } else {
                    ""
                }
            )),
        }
    }

    /// The controllers whose limits the sandbox's v2 cgroup should carry.
    fn v2_controllers(&self, h: &Hierarchies) -> Vec<Controller> {
        Controller::LIMITS
            .into_iter()
            .filter(|c| self.backend(h, *c) == Ok(Backend::V2))
            .collect()
    }
}

/// Where a sandbox's v2 cgroup can go, for this user, or why nowhere.
fn v2_place(v2: &V2Hierarchy, host: &dyn HostView) -> Result<V2Place, String> {
    let parent = v2.point.join(PARENT);
    let root_ok = if host.exists(&parent) {
        host.writable(&parent) && host.writable(&v2.point.join("cgroup.subtree_control"))
    } else {
        host.writable(&v2.point)
    };
    if root_ok {
        return Ok(V2Place::Root {
            root: v2.point.clone(),
        });
    }
    let not_delegated = || {
        format!(
            "not root and no delegated cgroup v2 subtree: this process's cgroup is not \
             writable by this user; {HINT_PERMISSION}"
        )
    };
    let Some(mut own) = v2.own.clone() else {
        return Err(not_delegated());
    };
    // A supervisor that moved itself into a leaf (see `Cgroup::create`) keeps
    // using the delegated cgroup above that leaf.
    if own
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with(SUPERVISOR_PREFIX))
    {
        if let Some(up) = own.parent() {
            own = up.to_path_buf();
        }
    }
    if own == v2.point {
        return Err(not_delegated());
    }
    let delegated = host.writable(&own)
        && host.writable(&own.join("cgroup.procs"))
        && host.writable(&own.join("cgroup.subtree_control"));
    if delegated {
        Ok(V2Place::Delegated { own })
    } else {
        Err(not_delegated())
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
    support(&h, &Plan::new(&h, &RealHost))
}

fn support(h: &Hierarchies, plan: &Plan) -> Support {
    let mut reasons: Vec<String> = Vec::new();
    // v1 hierarchies out of reach are named together in one reason.
    let mut denied_v1: Vec<String> = Vec::new();
    let mut check = |c: Controller| match plan.backend(h, c) {
        Ok(_) => true,
        Err(why) => {
            if let Some(v1) = h.v1.iter().find(|v| v.controllers.contains(&c)) {
                let point = v1.point.display().to_string();
                if !denied_v1.contains(&point) {
                    denied_v1.push(point);
                }
            } else if !why.is_empty() && !reasons.contains(&why) {
                reasons.push(why);
            }
            false
        }
    };
    let memory = check(Controller::Memory);
    let pids = check(Controller::Pids);
    let cpu = check(Controller::Cpu);
    let kill = plan.v2.is_some()
        || matches!(plan.backend(h, Controller::Freezer), Ok(Backend::V1(_)))
        || pids;
    if !denied_v1.is_empty() {
        reasons.insert(
            0,
            format!(
                "the cgroup v1 hierarchies {} are not writable by this user; {HINT_V1}",
                denied_v1.join(", ")
            ),
        );
    }
    if plan.layout == Layout::None {
        reasons.push("no cgroup file system is mounted (see /proc/self/mountinfo)".into());
    }
    Support {
        layout: plan.layout,
        memory,
        pids,
        cpu,
        kill,
        why_not: (!reasons.is_empty()).then(|| reasons.join("; ")),
    }
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

        let h = Hierarchies::discover()?;
        let plan = Plan::new(&h, &RealHost);
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

        let name = format!("warden-{id}");
        // Dropping `cg` on an error path removes what was created so far.
        let mut cg = Cgroup { dirs: Vec::new() };
        for &i in &plan.v1_usable {
            let v1 = &h.v1[i];
            let needed = required.iter().any(|(_, b)| *b == Backend::V1(i));
            // Every hierarchy joined costs a migration at start and an
            // rmdir at the end. CPU time comes from the init's rusage, and
            // killing from the v2 directory's cgroup.kill (or the PID
            // namespace), so cpuacct and freezer are joined only when there
            // is no v2 directory to kill through.
            let useful =
                needed || (plan.v2.is_none() && v1.controllers.contains(&Controller::Freezer));
            if !useful {
                continue;
            }
            match with_parent_retry(|| create_v1(v1, &name)) {
                Ok(dir) => cg.dirs.push(dir),
                Err(e) if needed => return Err(e),
                Err(e) => tracing::debug!(error = %e, "optional cgroup v1 hierarchy left out"),
            }
        }
        if let Some(v2) = &plan.v2 {
            let enable = plan.v2_controllers(&h);
            let needed: Vec<Controller> = required
                .iter()
                .filter(|(_, b)| *b == Backend::V2)
                .map(|(c, _)| *c)
                .collect();
            match with_parent_retry(|| create_v2(&v2.place, &name, &enable, &needed)) {
                Ok(dir) => cg.dirs.push(dir),
                Err(e) if !needed.is_empty() => return Err(e),
                Err(e) => tracing::debug!(error = %e, "optional cgroup v2 directory left out"),
            }
        }

        if let Some(bytes) = limits.memory {
            cg.set_memory(bytes)?;
        }
        if let Some(n) = limits.pids {
            let dir = cg.require(Controller::Pids)?;
            write_file(&dir.path.join("pids.max"), &n.to_string(), Op::Write)?;
        }
        if let Some(quota) = quota {
            let dir = cg.require(Controller::Cpu)?;
            if dir.v2 {
                write_file(
                    &dir.path.join("cpu.max"),
                    &format!("{quota} {CPU_PERIOD_US}"),
                    Op::Write,
                )?;
            } else {
                // Period first: the kernel checks the quota against it.
                write_file(
                    &dir.path.join("cpu.cfs_period_us"),
                    &CPU_PERIOD_US.to_string(),
                    Op::Write,
                )?;
                write_file(
                    &dir.path.join("cpu.cfs_quota_us"),
                    &quota.to_string(),
                    Op::Write,
                )?;
            }
        }
        tracing::debug!(paths = ?cg.paths(), "sandbox cgroup created");
        Ok(cg)
    }

    fn set_memory(&self, bytes: u64) -> Result<(), CgroupError> {
        let dir = self.require(Controller::Memory)?;
        let value = bytes.to_string();
        if dir.v2 {
            write_file(&dir.path.join("memory.max"), &value, Op::Write)?;
            // Without this the sandbox could page its excess out to swap
            // instead of meeting the limit.
            let swap = dir.path.join("memory.swap.max");
            if swap.exists() {
                write_file(&swap, "0", Op::Write)?;
            }
        } else {
            // limit_in_bytes first: the kernel keeps memsw >= limit_in_bytes.
            write_file(&dir.path.join("memory.limit_in_bytes"), &value, Op::Write)?;
            // memory+swap at the same value: no escape into swap. The file
            // exists only where swap accounting is on.
            let memsw = dir.path.join("memory.memsw.limit_in_bytes");
            if memsw.exists() {
                write_file(&memsw, &value, Op::Write)?;
            }
        }
        Ok(())
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
            if let Some(dir) = frozen {
                self.thaw(dir);
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
    /// for it to settle; returns the directory to thaw, if one was frozen.
    fn freeze(&self) -> Option<&Dir> {
        let dir = self.dir(Controller::Freezer)?;
        let (file, on) = if dir.v2 {
            ("cgroup.freeze", "1")
        } else {
            ("freezer.state", "FROZEN")
        };
        let path = dir.path.join(file);
        if !path.exists() || write_file(&path, on, Op::Write).is_err() {
            return None;
        }
        let deadline = Instant::now() + FREEZE_TIMEOUT;
        while Instant::now() < deadline {
            let settled = if dir.v2 {
                fs::read_to_string(dir.path.join("cgroup.events"))
                    .is_ok_and(|t| keyed(&t, "frozen") == Some(1))
            } else {
                fs::read_to_string(&path).is_ok_and(|t| t.trim() == "FROZEN")
            };
            if settled {
                break;
            }
            sleep(POLL);
        }
        Some(dir)
    }

    fn thaw(&self, dir: &Dir) {
        let (file, off) = if dir.v2 {
            ("cgroup.freeze", "0")
        } else {
            ("freezer.state", "THAWED")
        };
        if let Err(e) = write_file(&dir.path.join(file), off, Op::Write) {
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

    /// Counters after the run. Missing files give `None`.
    pub fn stats(&self) -> Stats {
        let read = |dir: &Dir, file: &str| fs::read_to_string(dir.path.join(file)).ok();
        let mut stats = Stats::default();
        if let Some(dir) = self.dir(Controller::Memory) {
            if dir.v2 {
                stats.oom_kills = read(dir, "memory.events").and_then(|t| keyed(&t, "oom_kill"));
                stats.memory_peak = read(dir, "memory.peak").and_then(|t| t.trim().parse().ok());
            } else {
                stats.oom_kills =
                    read(dir, "memory.oom_control").and_then(|t| keyed(&t, "oom_kill"));
                stats.memory_peak =
                    read(dir, "memory.max_usage_in_bytes").and_then(|t| t.trim().parse().ok());
            }
        }
        if let Some(dir) = self.dir(Controller::Cpuacct) {
            if dir.v2 {
                let text = read(dir, "cpu.stat");
                let ms = |key| {
                    text.as_deref()
                        .and_then(|t| keyed(t, key))
                        .map(|us| us / 1000)
                };
                stats.cpu_user_ms = ms("user_usec");
                stats.cpu_system_ms = ms("system_usec");
            } else if let Some(tick) = clock_ticks() {
                // cpuacct.stat counts USER_HZ ticks.
                let text = read(dir, "cpuacct.stat");
                let ms = |key| {
                    text.as_deref()
                        .and_then(|t| keyed(t, key))
                        .map(|ticks| ticks.saturating_mul(1000) / tick)
                };
                stats.cpu_user_ms = ms("user");
                stats.cpu_system_ms = ms("system");
            }
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

fn create_v1(v1: &V1Hierarchy, name: &str) -> Result<Dir, CgroupError> {
    let parent = v1.point.join(PARENT);
    mkdir(&parent, true)?;
    let path = parent.join(name);
    mkdir(&path, false)?;
    Ok(Dir {
        path,
        v2: false,
        controllers: v1.controllers.clone(),
    })
}

/// Create the sandbox's v2 directory with `enable` controllers (those of
/// `required` must succeed).
fn create_v2(
    place: &V2Place,
    name: &str,
    enable: &[Controller],
    required: &[Controller],
) -> Result<Dir, CgroupError> {
    let parent = match place {
        V2Place::Root { root } => {
            let parent = root.join(PARENT);
            enable_controllers(root, enable, required)?;
            mkdir(&parent, true)?;
            enable_controllers(&parent, enable, required)?;
            parent
        }
        V2Place::Delegated { own } => {
            if let Err(e) = enable_controllers(own, enable, required) {
                if e.errno() != Some(libc::EBUSY) {
                    return Err(e);
                }
                // cgroup v2's "no internal processes" rule: a cgroup that
                // hands controllers to its children may hold no processes
                // itself. Our delegated cgroup holds at least this process,
                // so enabling controllers there fails with EBUSY. Like
                // systemd and container runtimes, move this process into a
                // leaf of its own, then enable. The leaf stays for the life
                // of the process (leaving it would recreate the problem) and
                // is reused by later sandboxes of this process. Only a
                // required controller gets here: for counters alone, the
                // caller is not moved.
                move_self_to_leaf(own)?;
                enable_controllers(own, enable, required)?;
            }
            own.clone()
        }
    };
    let path = parent.join(name);
    mkdir(&path, false)?;
    let mut controllers: Vec<Controller> = fs::read_to_string(path.join("cgroup.controllers"))
        .map(|t| {
            t.split_whitespace()
                .filter_map(Controller::from_name)
                .collect()
        })
        .unwrap_or_default();
    if let Some(c) = required.iter().find(|c| !controllers.contains(c)) {
        let err = CgroupError::Unavailable {
            controller: c.name(),
            reason: format!(
                "the kernel did not enable it for {} (see cgroup.controllers there)",
                path.display()
            ),
        };
        // Leave nothing half-made behind.
        if let Err(e) = fs::remove_dir(&path) {
            tracing::debug!(path = %path.display(), error = %e, "cannot remove half-made cgroup");
        }
        return Err(err);
    }
    controllers.push(Controller::Cpuacct);
    if path.join("cgroup.freeze").exists() {
        controllers.push(Controller::Freezer);
    }
    Ok(Dir {
        path,
        v2: true,
        controllers,
    })
}

/// Enable `enable` in `dir`'s cgroup.subtree_control, one by one so that an
/// optional controller's failure does not stop a required one.
fn enable_controllers(
    dir: &Path,
    enable: &[Controller],
    required: &[Controller],
) -> Result<(), CgroupError> {
    let path = dir.join("cgroup.subtree_control");
    let current = fs::read_to_string(&path).unwrap_or_default();
    let current: Vec<&str> = current.split_whitespace().collect();
    for c in enable.iter().filter(|c| !current.contains(&c.name())) {
        match write_file(&path, &format!("+{}", c.name()), Op::SubtreeControl) {
            Ok(()) => {}
            Err(e) if required.contains(c) => return Err(e),
            Err(e) => tracing::debug!(error = %e, "optional controller not enabled"),
        }
    }
    Ok(())
}

fn move_self_to_leaf(own: &Path) -> Result<(), CgroupError> {
    let leaf = own.join(format!("{SUPERVISOR_PREFIX}{}", std::process::id()));
    mkdir(&leaf, true)?;
    let pid = std::process::id();
    let path = leaf.join("cgroup.procs");
    write_raw(&path, &pid.to_string()).map_err(|source| CgroupError::AddProcess {
        pid: i32::try_from(pid).unwrap_or(i32::MAX),
        path: leaf,
        hint: hint(Op::AddProcess, &source),
        source,
    })
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

/// USER_HZ, the unit of cpuacct.stat.
fn clock_ticks() -> Option<u64> {
    match nix::unistd::sysconf(SysconfVar::CLK_TCK) {
        Ok(Some(t)) if t > 0 => u64::try_from(t).ok(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use std::collections::{HashMap, HashSet};

    use super::*;

    /// The hybrid layout of a systemd host in hybrid mode (and of the CI
    /// machine): v1 controllers, a v2 mount without them beside.
    const HYBRID_MOUNTINFO: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
37 31 0:34 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";
    const HYBRID_CGROUP: &str = "\
9:name=systemd:/
8:pids:/
6:freezer:/
4:memory:/batch/job-7
3:cpuset:/
2:cpuacct:/
1:cpu:/
0::/
";
    /// A current distribution: the unified hierarchy only, the caller in a
    /// systemd user scope.
    const V2_MOUNTINFO: &str = "\
22 1 259:1 / / rw,relatime shared:1 - ext4 /dev/root rw
35 24 0:30 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot
";
    const USER_SCOPE: &str = "/user.slice/user-1000.slice/user@1000.service/app.slice/run-1.scope";

    /// An older v1-only host with cpu and cpuacct co-mounted, and one
    /// hierarchy bind-mounted twice.
    const V1_MOUNTINFO: &str = "\
26 25 0:23 / /sys/fs/cgroup/systemd rw - cgroup cgroup rw,xattr,release_agent=/x,name=systemd
29 25 0:26 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct
30 25 0:27 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory
31 25 0:28 / /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids
90 25 0:28 / /mnt/pids\\040again rw - cgroup cgroup rw,pids
";

    #[derive(Default)]
    struct FakeHost {
        writable: HashSet<PathBuf>,
        files: HashMap<PathBuf, String>,
    }

    impl FakeHost {
        fn writable(mut self, paths: &[&str]) -> Self {
            self.writable.extend(paths.iter().map(PathBuf::from));
            self
        }
        fn file(mut self, path: &str, text: &str) -> Self {
            self.files.insert(PathBuf::from(path), text.to_owned());
            self
        }
    }

    impl HostView for FakeHost {
        fn writable(&self, path: &Path) -> bool {
            self.writable.contains(path)
        }
        fn exists(&self, path: &Path) -> bool {
            self.writable.contains(path) || self.files.contains_key(path)
        }
        fn read(&self, path: &Path) -> Option<String> {
            self.files.get(path).cloned()
        }
    }

    fn v1_index(h: &Hierarchies, point: &str) -> usize {
        h.v1.iter()
            .position(|v| v.point == Path::new(point))
            .unwrap()
    }

    #[test]
    fn hybrid_host_is_read_as_v1_controllers_beside_a_v2_mount() {
        let h = Hierarchies::parse(HYBRID_MOUNTINFO, HYBRID_CGROUP);
        assert_eq!(h.layout(), Layout::Hybrid);
        let v2 = h.v2.as_ref().unwrap();
        assert_eq!(v2.point, Path::new("/sys/fs/cgroup/unified"));
        assert_eq!(v2.own.as_deref(), Some(Path::new("/sys/fs/cgroup/unified")));
        let memory = &h.v1[v1_index(&h, "/sys/fs/cgroup/memory")];
        assert_eq!(memory.controllers, vec![Controller::Memory]);
        let systemd = &h.v1[v1_index(&h, "/sys/fs/cgroup/systemd")];
        assert!(systemd.controllers.is_empty() && !systemd.has_controllers);
    }

    #[test]
    fn root_on_a_hybrid_host_gets_every_limit_from_v1_and_a_v2_group_to_kill() {
        let h = Hierarchies::parse(HYBRID_MOUNTINFO, HYBRID_CGROUP);
        let host = FakeHost::default()
            .writable(&[
                "/sys/fs/cgroup/cpu",
                "/sys/fs/cgroup/cpuacct",
                "/sys/fs/cgroup/memory",
                "/sys/fs/cgroup/freezer",
                "/sys/fs/cgroup/pids",
                "/sys/fs/cgroup/unified",
            ])
            .file("/sys/fs/cgroup/unified/cgroup.controllers", "hugetlb\n");
        let plan = Plan::new(&h, &host);
        let memory = v1_index(&h, "/sys/fs/cgroup/memory");
        assert_eq!(
            plan.backend(&h, Controller::Memory),
            Ok(Backend::V1(memory))
        );
        assert!(matches!(
            plan.backend(&h, Controller::Freezer),
            Ok(Backend::V1(_))
        ));
        assert_eq!(
            plan.v2.as_ref().map(|v| &v.place),
            Some(&V2Place::Root {
                root: PathBuf::from("/sys/fs/cgroup/unified")
            })
        );
        // No limit lands on the controller-less v2 mount.
        assert!(plan.v2_controllers(&h).is_empty());
        let s = support(&h, &plan);
        assert!(s.memory && s.pids && s.cpu && s.kill, "{s:?}");
        assert_eq!(s.why_not, None);
    }

    #[test]
    fn an_unprivileged_user_on_a_hybrid_host_is_told_why_and_what_to_do() {
        let h = Hierarchies::parse(HYBRID_MOUNTINFO, HYBRID_CGROUP);
        let s = support(&h, &Plan::new(&h, &FakeHost::default()));
        assert_eq!(s.layout, Layout::Hybrid);
        assert!(!s.memory && !s.pids && !s.cpu && !s.kill, "{s:?}");
        let why = s.why_not.unwrap();
        assert!(why.contains("/sys/fs/cgroup/memory"), "{why}");
        assert!(why.contains("Delegate=yes"), "{why}");
    }

    #[test]
    fn root_on_a_v2_host_enables_controllers_under_the_hierarchy_root() {
        let h = Hierarchies::parse(V2_MOUNTINFO, "0::/user.slice/session-2.scope\n");
        assert_eq!(h.layout(), Layout::V2);
        let host = FakeHost::default().writable(&["/sys/fs/cgroup"]).file(
            "/sys/fs/cgroup/cgroup.controllers",
            "cpuset cpu io memory hugetlb pids rdma misc\n",
        );
        let plan = Plan::new(&h, &host);
        assert_eq!(
            plan.v2.as_ref().map(|v| &v.place),
            Some(&V2Place::Root {
                root: PathBuf::from("/sys/fs/cgroup")
            })
        );
        assert_eq!(
            plan.v2_controllers(&h),
            vec![Controller::Memory, Controller::Pids, Controller::Cpu]
        );
        let s = support(&h, &plan);
        assert!(s.memory && s.pids && s.cpu && s.kill && s.why_not.is_none());
    }

    #[test]
    fn a_rootless_user_with_a_delegated_scope_creates_below_it() {
        let h = Hierarchies::parse(V2_MOUNTINFO, &format!("0::{USER_SCOPE}\n"));
        let own = format!("/sys/fs/cgroup{USER_SCOPE}");
        let host = FakeHost::default()
            .writable(&[
                &own,
                &format!("{own}/cgroup.procs"),
                &format!("{own}/cgroup.subtree_control"),
            ])
            .file(&format!("{own}/cgroup.controllers"), "cpu memory pids\n");
        let plan = Plan::new(&h, &host);
        assert_eq!(
            plan.v2.as_ref().map(|v| &v.place),
            Some(&V2Place::Delegated {
                own: PathBuf::from(&own)
            })
        );
        assert!(support(&h, &plan).memory);
    }

    #[test]
    fn a_supervisor_already_in_its_leaf_keeps_using_the_delegated_cgroup_above() {
        let leaf = format!("{USER_SCOPE}/{SUPERVISOR_PREFIX}42");
        let h = Hierarchies::parse(V2_MOUNTINFO, &format!("0::{leaf}\n"));
        let own = format!("/sys/fs/cgroup{USER_SCOPE}");
        let host = FakeHost::default().writable(&[
            &own,
            &format!("{own}/cgroup.procs"),
            &format!("{own}/cgroup.subtree_control"),
        ]);
        let plan = Plan::new(&h, &host);
        assert_eq!(
            plan.v2.map(|v| v.place),
            Some(V2Place::Delegated {
                own: PathBuf::from(own)
            })
        );
    }

    #[test]
    fn a_controller_missing_from_the_delegation_is_reported_with_the_fix() {
        let h = Hierarchies::parse(V2_MOUNTINFO, &format!("0::{USER_SCOPE}\n"));
        let own = format!("/sys/fs/cgroup{USER_SCOPE}");
        let host = FakeHost::default()
            .writable(&[
                &own,
                &format!("{own}/cgroup.procs"),
                &format!("{own}/cgroup.subtree_control"),
            ])
            .file(&format!("{own}/cgroup.controllers"), "memory pids\n");
        let s = support(&h, &Plan::new(&h, &host));
        assert!(s.memory && s.pids && !s.cpu);
        assert!(s.why_not.unwrap().contains("Delegate="));
    }

    #[test]
    fn a_rootless_user_without_delegation_gets_no_cgroup() {
        let h = Hierarchies::parse(
            V2_MOUNTINFO,
            "0::/user.slice/user-1000.slice/session-3.scope\n",
        );
        let s = support(&h, &Plan::new(&h, &FakeHost::default()));
        assert!(!s.memory && !s.pids && !s.cpu && !s.kill);
        assert!(s
            .why_not
            .unwrap()
            .contains("not root and no delegated cgroup v2 subtree"));
    }

    #[test]
    fn v1_hierarchies_are_read_once_with_co_mounted_controllers_together() {
        let h = Hierarchies::parse(V1_MOUNTINFO, "");
        assert_eq!(h.layout(), Layout::V1);
        assert!(h.v2.is_none());
        let points: Vec<_> = h.v1.iter().map(|v| v.point.clone()).collect();
        assert_eq!(
            points,
            vec![
                PathBuf::from("/sys/fs/cgroup/systemd"),
                PathBuf::from("/sys/fs/cgroup/cpu,cpuacct"),
                PathBuf::from("/sys/fs/cgroup/memory"),
                PathBuf::from("/sys/fs/cgroup/pids"),
            ]
        );
        assert_eq!(
            h.v1[1].controllers,
            vec![Controller::Cpu, Controller::Cpuacct]
        );
    }

    #[test]
    fn mount_points_with_escaped_characters_are_decoded() {
        assert_eq!(unescape("/mnt/pids\\040again"), "/mnt/pids again");
        assert_eq!(unescape("/a\\134b"), "/a\\b");
        assert_eq!(unescape("/plain\\"), "/plain\\");
        assert_eq!(unescape("/x\\09"), "/x\\09");
    }

    #[test]
    fn own_cgroup_is_found_through_a_mount_of_a_subtree_only() {
        let point = Path::new("/sys/fs/cgroup");
        assert_eq!(
            below_mount(point, "/ctr", "/ctr/app"),
            Some(PathBuf::from("/sys/fs/cgroup/app"))
        );
        assert_eq!(
            below_mount(point, "/ctr", "/ctr"),
            Some(point.to_path_buf())
        );
        assert_eq!(below_mount(point, "/ctr", "/ctr2/app"), None);
        assert_eq!(below_mount(point, "/", "/gone (deleted)"), None);
        assert_eq!(below_mount(point, "/", "/../etc"), None);
    }

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
