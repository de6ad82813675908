//! The second stage of a start: the clone and the ID maps. The supervisor
//! takes its signals through a signalfd from here on, enters a joined
//! network namespace or the namespace owner's identity for the clone alone,
//! clones the init into its namespaces (and, where the kernel can, into its
//! cgroup), and writes the init's ID maps. The child never returns from
//! here: it becomes the sandbox's init.

use super::host_paths::setns_net;
use super::prepare::{Confinement, Ends, Prepared};
use super::setup::{prepare_child, PrivateTmp};
use super::supervision::{ChildGuard, MaskGuard};
use super::{release, sys_err, JailError, Mode};
use crate::host;
use crate::init;
use crate::kept::KeptSave;
use crate::quotas;
use crate::secrets::SecretPlan;
use crate::spawn::FORWARDED;
use crate::sys::{self, Forked};
use nix::errno::Errno;
use nix::sys::signal::{kill, SigSet, SigmaskHow, Signal};
use nix::unistd::Pid;
use std::marker::PhantomData;
use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;
use std::time::Instant;
use warden_policy::EgressSpec;

const NS_FLAGS: libc::c_int = libc::CLONE_NEWUSER
    | libc::CLONE_NEWNS
    | libc::CLONE_NEWPID
    | libc::CLONE_NEWIPC
    | libc::CLONE_NEWUTS
    | libc::CLONE_NEWNET;

/// Proof that this process has one thread, the one holding it: what a
/// clone without exec needs. The child of such a clone is a copy of the
/// calling thread alone, in which every lock another thread held (the
/// allocator's, stdio's) stays held for ever, and the init goes on running
/// Rust code. Made only by counting the threads ([`SingleThreaded::check`]),
/// it is neither `Send` nor `Sync`, so it stays on the thread it was made
/// on; each clone takes one made just before it, so no caller's code (which
/// may start threads) runs between the count and the clone.
pub struct SingleThreaded(PhantomData<*const ()>);

impl SingleThreaded {
    /// Count the process's threads now: the proof when this one is alone.
    pub fn check() -> Result<SingleThreaded, JailError> {
        let stat = std::fs::read_to_string("/proc/self/stat").map_err(JailError::Threads)?;
        // The command name may hold spaces and parentheses: fields start
        // after the last ')', with the state (field 3) first; the number
        // of threads is field 20.
        let threads = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(17))
            .and_then(|n| n.parse::<usize>().ok())
            .ok_or_else(|| JailError::Threads(std::io::Error::other("no thread count")))?;
        if threads != 1 {
            return Err(JailError::Threaded(threads));
        }
        Ok(SingleThreaded(PhantomData))
    }

    /// `clone(2)` without exec, as [`sys::clone_process`].
    pub(crate) fn clone_process(&self, flags: libc::c_int) -> nix::Result<Forked> {
        // SAFETY: `self` proves that the process is single-threaded, the
        // contract of `clone_process`.
        unsafe { sys::clone_process(flags) }
    }

    /// `clone3(2)` into a cgroup without exec, as
    /// [`sys::clone_into_cgroup`].
    fn clone_into_cgroup(&self, flags: libc::c_int, dir: &OwnedFd) -> nix::Result<Forked> {
        // SAFETY: `self` proves that the process is single-threaded, the
        // contract of `clone_into_cgroup`.
        unsafe { sys::clone_into_cgroup(flags, dir.as_fd()) }
    }
}

/// The init exists, with its ID maps; it waits for the go-ahead.
pub(super) struct Cloned {
    pub mode: Mode,
    pub root_mode: bool,
    pub child: Pid,
    /// Born in its v2 cgroup directory (`clone3`); otherwise it is moved
    /// there once the cgroup is finished.
    pub born_in_cgroup: bool,
    /// Kills and reaps the init should the supervisor leave early.
    pub guard: ChildGuard,
    /// Keeps the sandbox's mounts from being torn down by the init's exit.
    pub mounts: Option<release::Held>,
    pub signals: Signals,
    /// When the clone was made: the deadline and the run's duration count
    /// from here.
    pub start: Instant,
    pub workspace: Option<PathBuf>,
    /// The cgroup still to finish, and the pair its `tasks` files go over.
    pub pending: Option<crate::cgroup::Pending>,
    pub cgroup_channel: Option<OwnedFd>,
    pub ends: Ends,
    pub master: Option<OwnedFd>,
    pub private_tmp: Option<PrivateTmp>,
    pub secrets: Option<SecretPlan>,
    pub egress: Option<EgressSpec>,
    pub published: super::prepare::Published,
    pub kept_save: Option<KeptSave>,
}

/// The signals the supervisor takes through a signalfd (the child starts
/// with the same mask and restores the original just before exec); the
/// guard restores the mask when the supervisor is done.
pub(super) struct Signals {
    pub handled: SigSet,
    _restore: MaskGuard,
}

impl Signals {
    fn block() -> Result<(Signals, SigSet), JailError> {
        let mut handled = SigSet::empty();
        handled.add(Signal::SIGCHLD);
        for s in FORWARDED {
            handled.add(*s);
        }
        let mut original = SigSet::empty();
        nix::sys::signal::pthread_sigmask(
            SigmaskHow::SIG_BLOCK,
            Some(&handled),
            Some(&mut original),
        )
        .map_err(sys_err("block signals"))?;
        let signals = Signals {
            handled,
            _restore: MaskGuard(original),
        };
        Ok((signals, original))
    }
}

/// Clone the init and write its ID maps.
pub(super) fn clone(prepared: Prepared) -> Result<Cloned, JailError> {
    let Prepared {
        mode,
        root_mode,
        ids,
        join_network,
        workspace,
        confinement:
            Confinement {
                pending,
                cgroup,
                unfinished,
                v2,
                channel: cgroup_channel,
            },
        child: plan,
        init: init_ends,
        ends,
        master,
        private_tmp,
        secrets,
        egress,
        published,
        kept_save,
    } = prepared;
    let degraded_mode = mode == Mode::Degraded;
    let (signals, original) = Signals::block()?;
    if root_mode {
        // Supplementary groups are host groups the sandbox must not keep
        // (group root can read files that "others" cannot).
        nix::unistd::setgroups(&[]).map_err(sys_err("drop supplementary groups"))?;
    }
    if degraded_mode {
        // Without a PID namespace, orphans of the sandbox would be adopted
        // by the host's init; as a subreaper the supervisor adopts them and
        // kills them when the run ends.
        // SAFETY: prctl with integer arguments only.
        let rc = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1 as libc::c_ulong, 0, 0, 0) };
        Errno::result(rc).map_err(sys_err("become the sandbox's subreaper"))?;
    }
    let start = Instant::now();
    let flags = match (degraded_mode, &join_network) {
        (true, _) => 0,
        (false, None) => NS_FLAGS,
        (false, Some(_)) => NS_FLAGS & !libc::CLONE_NEWNET,
    };
    // As root, the namespace is owned by the user the sandbox maps to, not
    // by root, so that the per-user counters it spends are never root's
    // (see `quotas`).
    let owner = (root_mode && !degraded_mode).then_some(ids.host_uid);
    let (cloned, born_in_cgroup) = fork(flags, v2.as_ref(), join_network.as_ref(), owner)?;
    let child = match cloned {
        Forked::Child => init::child_main(plan, init_ends.go_rd, init_ends.rep_wr, original),
        Forked::Parent(pid) => pid,
    };
    // The supervisor's copies of the init's ends, and of the directory it
    // was born in: the report pipe ends when the init's copy closes.
    drop(init_ends);
    drop(v2);
    // The init's exit then does not unmount the sandbox's tree (see
    // `release`): it is reaped, and its cgroup emptied, without that wait.
    let mounts = release::Held::hold(child);
    let guard = ChildGuard {
        pid: child,
        cgroup,
        reaped: false,
        unfinished,
    };
    let ready = if degraded_mode {
        Ok(())
    } else {
        prepare_child(child, ids.uid, ids.gid, ids.host_uid, ids.host_gid, &plan)
    };
    drop(plan);
    ready?;
    Ok(Cloned {
        mode,
        root_mode,
        child,
        born_in_cgroup,
        guard,
        mounts,
        signals,
        start,
        workspace,
        pending,
        cgroup_channel,
        ends,
        master,
        private_tmp,
        secrets,
        egress,
        published,
        kept_save,
    })
}

/// Clone the init: from inside a joined network namespace, and as the
/// namespace's owner (`owner`, root mode), where those apply; the parent
/// is back in its own namespace and identity before this returns. Returns
/// whether the init was born in the cgroup's v2 directory.
fn fork(
    flags: libc::c_int,
    v2: Option<&OwnedFd>,
    join: Option<&(OwnedFd, OwnedFd, PathBuf)>,
    owner: Option<u32>,
) -> Result<(Forked, bool), JailError> {
    // Counted before anything changes: from here to the clone only this
    // function runs.
    let proof = SingleThreaded::check()?;
    // Joining: the clone is made from inside the namespace (the supervisor
    // enters it for the clone only, as host root, which its owner needs),
    // so the sandbox's processes are born there and hold no capability
    // over it; the supervisor goes back to its own at once.
    let back = match join {
        Some((ns, own, path)) => {
            setns_net(ns, path, "enter it")?;
            Some((own, path))
        }
        None => None,
    };
    let owner = match owner {
        Some(uid) => Some(quotas::OwnerSwitch::enter(uid)?),
        None => None,
    };
    // Born in the v2 directory where the kernel can do it (clone3, Linux
    // 5.7); otherwise cloned the old way and moved in later.
    crate::phase("clone");
    let (cloned, born_in_cgroup) = match v2 {
        Some(dir) => match proof.clone_into_cgroup(flags, dir) {
            Err(e) => {
                tracing::debug!(error = %e, "clone3 into the cgroup refused; cloning the old way");
                (proof.clone_process(flags), false)
            }
            done => (done, true),
        },
        None => (proof.clone_process(flags), false),
    };
    let in_child = matches!(cloned, Ok(Forked::Child));
    if let (Some(owner), false) = (owner, in_child) {
        if let Err(e) = owner.leave() {
            kill_cloned(&cloned);
            return Err(e.into());
        }
    }
    if let (Some((own, path)), false) = (back, in_child) {
        if let Err(e) = setns_net(own, path, "return to the supervisor's own") {
            kill_cloned(&cloned);
            return Err(e);
        }
    }
    match cloned {
        Ok(forked) => Ok((forked, born_in_cgroup)),
        Err(source) => Err(namespaces_refused(source)),
    }
}

/// In the parent, an init the supervisor cannot go on with.
fn kill_cloned(cloned: &nix::Result<Forked>) {
    if let Ok(Forked::Parent(pid)) = cloned {
        let _ = kill(*pid, Signal::SIGKILL);
        let _ = nix::sys::wait::waitpid(*pid, None);
    }
}

/// Why the kernel refused the clone, said as what the host forbids.
fn namespaces_refused(source: Errno) -> JailError {
    let why = host::userns_blocker().unwrap_or_else(|| match source {
        Errno::EPERM | Errno::EACCES => {
            "the kernel refused to create a user namespace (a container or security module may forbid it)".into()
        }
        Errno::ENOSPC | Errno::EUSERS => {
            "the limit of user namespaces (user.max_user_namespaces) is reached".into()
        }
        _ => "clone() with namespace flags failed".into(),
    });
    JailError::UserNamespaces {
        why,
        lost: host::LOST_WITHOUT_NAMESPACES,
        errno: source,
    }
}
