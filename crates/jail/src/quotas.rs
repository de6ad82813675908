//! The host's per-user kernel counters, kept out of the sandbox's reach.
//!
//! The kernel counts some resources per user and charges each use to the
//! user inside a user namespace *and* to the namespace's owner in the parent
//! namespace (`ucounts`): inotify instances and watches, fanotify groups and
//! marks, namespaces, queued signals (`RLIMIT_SIGPENDING`), POSIX message
//! queue bytes (`RLIMIT_MSGQUEUE`) and locked shared memory
//! (`RLIMIT_MEMLOCK`). A sandbox that takes all of one would starve every
//! process of its owner on the host. Two measures, both applied to every
//! sandbox with a user namespace:
//!
//! - As root, the sandbox's user namespace is owned by the unprivileged user
//!   the sandbox maps to (nobody), not by root ([`OwnerSwitch`]): nothing
//!   the sandbox spends is charged to root.
//! - The namespace's own limits (`/proc/sys/user/max_*`, written from inside
//!   before any capability is dropped) and the matching rlimits are set to
//!   half of what the owner has on the host, so one sandbox never takes all
//!   of its owner's share.

use std::path::PathBuf;

use nix::errno::Errno;
use nix::sys::resource::{getrlimit, Resource};
use nix::unistd::Uid;

/// Why the sandbox's per-user limits could not be set.
#[derive(Debug, thiserror::Error)]
pub enum QuotaError {
    #[error("cannot set the sandbox's user-namespace limit {path} to {value}")]
    Sysctl {
        path: PathBuf,
        value: u64,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot {what} around the creation of the sandbox's user namespace")]
    Owner {
        what: &'static str,
        #[source]
        source: Errno,
    },
}

/// The per-user counters of `/proc/sys/user` that a namespace bounds for
/// itself. Namespace counts are left alone: seccomp refuses their creation.
const COUNTERS: [&str; 4] = [
    "max_inotify_instances",
    "max_inotify_watches",
    "max_fanotify_groups",
    "max_fanotify_marks",
];

/// What a sandbox may take of its owner's per-user counters: half of each.
#[derive(Debug, Clone, Default)]
pub struct UserLimits {
    /// `/proc/sys/user/NAME` and the value written inside the namespace.
    pub counters: Vec<(&'static str, u64)>,
    pub sigpending: Option<u64>,
    pub msgqueue: Option<u64>,
    pub memlock: Option<u64>,
}

impl UserLimits {
    /// Read on the host, by the supervisor, before the clone: the values
    /// inside a new namespace all start unlimited.
    pub fn for_sandbox() -> UserLimits {
        let counters = COUNTERS
            .iter()
            .filter_map(|name| {
                let v: u64 = std::fs::read_to_string(format!("/proc/sys/user/{name}"))
                    .ok()?
                    .trim()
                    .parse()
                    .ok()?;
                Some((*name, v / 2))
            })
            .collect();
        let half = |r| {
            getrlimit(r)
                .ok()
                .map(|(soft, _)| soft)
                .filter(|v| *v != libc::RLIM_INFINITY)
                .map(|v| v / 2)
        };
        UserLimits {
            counters,
            sigpending: half(Resource::RLIMIT_SIGPENDING),
            msgqueue: half(Resource::RLIMIT_MSGQUEUE),
            memlock: half(Resource::RLIMIT_MEMLOCK),
        }
    }

    /// Write the namespace's own limits. Runs in the sandbox's init, inside
    /// its user namespace with CAP_SYS_RESOURCE there, while `/proc` is
    /// still the host's mount (`/proc/sys/user` shows the opener's
    /// namespace).
    pub fn apply_in_namespace(&self) -> Result<(), QuotaError> {
        for (name, value) in &self.counters {
            let path = PathBuf::from(format!("/proc/sys/user/{name}"));
            std::fs::write(&path, value.to_string()).map_err(|source| QuotaError::Sysctl {
                path: path.clone(),
                value: *value,
                source,
            })?;
        }
        Ok(())
    }
}

/// SECBIT_NO_SETUID_FIXUP: a change of UID keeps the capability sets.
const SECBIT_NO_SETUID_FIXUP: libc::c_ulong = 0x04;

/// The supervisor, as root, taking `owner` as its effective UID for the one
/// clone that creates the sandbox's user namespace (the kernel makes the
/// creator's effective UID the namespace's owner). Capabilities are kept
/// across the switch (the creator stays privileged for security modules
/// that restrict namespaces made without CAP_SYS_ADMIN), and everything is
/// put back by [`OwnerSwitch::leave`]. Only for a single-threaded process:
/// the switch is process-wide.
pub struct OwnerSwitch {
    securebits: libc::c_ulong,
    dumpable: libc::c_ulong,
}

fn prctl(what: &'static str, op: libc::c_int, arg: libc::c_ulong) -> Result<i32, QuotaError> {
    // SAFETY: prctl with integer arguments only; no memory is passed.
    let rc = unsafe {
        libc::prctl(
            op,
            arg,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
        )
    };
    Errno::result(rc).map_err(|source| QuotaError::Owner { what, source })
}

impl OwnerSwitch {
    pub fn enter(owner: u32) -> Result<OwnerSwitch, QuotaError> {
        let securebits = prctl("read the securebits", libc::PR_GET_SECUREBITS, 0)? as libc::c_ulong;
        let dumpable = prctl("read the dumpable flag", libc::PR_GET_DUMPABLE, 0)? as libc::c_ulong;
        prctl(
            "keep capabilities across a UID change",
            libc::PR_SET_SECUREBITS,
            securebits | SECBIT_NO_SETUID_FIXUP,
        )?;
        let switch = OwnerSwitch {
            securebits,
            dumpable,
        };
        if let Err(source) = nix::unistd::seteuid(Uid::from_raw(owner)) {
            // Nothing changed but the securebits: put them back.
            let _ = switch.restore();
            return Err(QuotaError::Owner {
                what: "take the namespace owner's UID",
                source,
            });
        }
        Ok(switch)
    }

    /// Back to root, with the securebits and the dumpable flag (a UID
    /// change clears it) as they were.
    pub fn leave(self) -> Result<(), QuotaError> {
        nix::unistd::seteuid(Uid::from_raw(0)).map_err(|source| QuotaError::Owner {
            what: "return to UID 0",
            source,
        })?;
        self.restore()
    }

    fn restore(&self) -> Result<(), QuotaError> {
        prctl(
            "restore the securebits",
            libc::PR_SET_SECUREBITS,
            self.securebits,
        )?;
        prctl(
            "restore the dumpable flag",
            libc::PR_SET_DUMPABLE,
            self.dumpable,
        )?;
        Ok(())
    }
}
