//! The cgroup layer's errors, and the advice that goes with each: what was
//! attempted, on which path, and what a person can do about it, chosen by
//! the operation and the errno the kernel answered.
//!
//! It never touches a cgroup; it only words what went wrong.

use std::io;
use std::path::PathBuf;
use std::time::Duration;

use nix::errno::Errno;

/// What a person can do when cgroups are out of reach for this user.
pub(super) const HINT_PERMISSION: &str =
    "run as root or on a host with a delegated cgroup v2 subtree \
     (systemd-run --user --scope -p Delegate=yes)";
/// The same for v1 hierarchies: an administrator delegates one cgroup per
/// user, once.
pub(super) const HINT_V1: &str =
    "run as root, or have an administrator delegate a cgroup of each v1 \
     hierarchy to this user once (as root, for each of memory, pids and cpu: mkdir \
     <hierarchy>/warden-user-UID and chown it to the user; see docs/install.md), or use a host \
     with cgroup v2 and a delegated subtree (systemd-run --user --scope -p Delegate=yes)";

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
    pub(super) fn errno(&self) -> Option<i32> {
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
pub(super) enum Op {
    Create,
    Write,
    SubtreeControl,
    AddProcess,
    Signal,
    Remove,
}

/// Advice for a failed operation, chosen by what the kernel said.
pub(super) fn hint(op: Op, err: &io::Error) -> &'static str {
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
