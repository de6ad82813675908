//! Privileges and per-process limits: the sandbox's IDs, rlimits, and the
//! final drop of every capability with `no_new_privs`, so that nothing run in
//! the sandbox (a setuid binary included) can gain a privilege back.

use nix::errno::Errno;
use nix::sys::resource::{setrlimit, Resource};
use nix::unistd::{Gid, Uid};

use crate::caps::{self, CapData};

/// Why a privilege could not be dropped or a limit not applied.
#[derive(Debug, thiserror::Error)]
pub enum PrivilegeError {
    #[error("cannot switch to the sandbox's IDs {uid}:{gid}")]
    SetIds {
        uid: u32,
        gid: u32,
        #[source]
        source: Errno,
    },
    #[error("cannot set {name} to {value}")]
    Rlimit {
        name: &'static str,
        value: u64,
        #[source]
        source: Errno,
    },
    #[error("cannot {what}")]
    Prctl {
        what: &'static str,
        #[source]
        source: Errno,
    },
    #[error("cannot clear the capability sets")]
    Capset(#[source] Errno),
}

/// Become `uid`:`gid` inside the sandbox's user namespace (in root mode this
/// is what makes the sandbox nobody on the host: the kernel ID changes here).
pub fn set_ids(uid: u32, gid: u32) -> Result<(), PrivilegeError> {
    let err = |source| PrivilegeError::SetIds { uid, gid, source };
    let (u, g) = (Uid::from_raw(uid), Gid::from_raw(gid));
    nix::unistd::setresgid(g, g, g).map_err(err)?;
    nix::unistd::setresuid(u, u, u).map_err(err)
}

/// Per-process limits, applied in the init and inherited by every process.
#[derive(Debug, Clone, Copy)]
pub struct Rlimits {
    pub open_files: u64,
    pub file_size: Option<u64>,
    /// Processes of the sandbox's user (a fallback where no pids cgroup is
    /// available; in root mode that user is shared, so only as a fallback).
    pub nproc: Option<u64>,
    /// Private writable memory per process, RLIMIT_DATA (a fallback where
    /// no memory cgroup is available). Unlike RLIMIT_AS it does not count
    /// the address space that runtimes reserve without using (JITs,
    /// garbage-collected heaps).
    pub data: Option<u64>,
    /// Per-user counters charged to the namespace's owner too (see
    /// [`crate::quotas`]): queued signals, message queue bytes, locked
    /// shared memory.
    pub sigpending: Option<u64>,
    pub msgqueue: Option<u64>,
    pub memlock: Option<u64>,
}

pub fn apply_rlimits(l: &Rlimits) -> Result<(), PrivilegeError> {
    let set = |res, name, v: u64| {
        setrlimit(res, v, v).map_err(|source| PrivilegeError::Rlimit {
            name,
            value: v,
            source,
        })
    };
    // No core dumps: a crashing process must not write its memory (which may
    // hold secrets) into the workspace.
    set(Resource::RLIMIT_CORE, "RLIMIT_CORE", 0)?;
    set(Resource::RLIMIT_NOFILE, "RLIMIT_NOFILE", l.open_files)?;
    if let Some(v) = l.file_size {
        set(Resource::RLIMIT_FSIZE, "RLIMIT_FSIZE", v)?;
    }
    if let Some(v) = l.nproc {
        set(Resource::RLIMIT_NPROC, "RLIMIT_NPROC", v)?;
    }
    if let Some(v) = l.data {
        set(Resource::RLIMIT_DATA, "RLIMIT_DATA", v)?;
    }
    if let Some(v) = l.sigpending {
        set(Resource::RLIMIT_SIGPENDING, "RLIMIT_SIGPENDING", v)?;
    }
    if let Some(v) = l.msgqueue {
        set(Resource::RLIMIT_MSGQUEUE, "RLIMIT_MSGQUEUE", v)?;
    }
    if let Some(v) = l.memlock {
        set(Resource::RLIMIT_MEMLOCK, "RLIMIT_MEMLOCK", v)?;
    }
    Ok(())
}

/// Capability numbers the running kernel knows (`cap_last_cap`), with a
/// generous default where /proc cannot tell.
fn last_cap() -> u32 {
    std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(63)
}

/// Drop every capability from every set (bounding, ambient, inheritable,
/// permitted, effective), lock the securebits so that UID 0 inside the
/// namespace regains nothing on exec, and set `no_new_privs`.
pub fn drop_all(keep_dumpable: bool) -> Result<(), PrivilegeError> {
    lock_bounding_set(false)?;
    finish_drop(keep_dumpable)
}

fn prctl(what: &'static str, op: libc::c_int, a: libc::c_ulong) -> Result<(), PrivilegeError> {
    // SAFETY: prctl with integer arguments only; no memory is passed.
    let rc = unsafe {
        libc::prctl(
            op,
            a,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
        )
    };
    Errno::result(rc)
        .map(drop)
        .map_err(|source| PrivilegeError::Prctl { what, source })
}

/// Empty the bounding set and lock the securebits (root stays powerless
/// across exec; a UID change keeps no capability). Needs CAP_SETPCAP; with
/// `best_effort`, a caller without it (an unprivileged user outside any
/// namespace, whose exec cannot gain capabilities under `no_new_privs`
/// anyway) goes on.
pub fn lock_bounding_set(best_effort: bool) -> Result<(), PrivilegeError> {
    for cap in 0..=last_cap() {
        match prctl(
            "drop a capability from the bounding set",
            libc::PR_CAPBSET_DROP,
            cap as libc::c_ulong,
        ) {
            // Numbers past what the kernel knows answer EINVAL.
            Err(PrivilegeError::Prctl {
                source: Errno::EINVAL,
                ..
            }) => break,
            Err(PrivilegeError::Prctl {
                source: Errno::EPERM,
                ..
            }) if best_effort => return Ok(()),
            other => other?,
        }
    }
    // SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP |
    // SECBIT_NO_SETUID_FIXUP_LOCKED | SECBIT_KEEP_CAPS_LOCKED |
    // SECBIT_NO_CAP_AMBIENT_RAISE | SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED
    const SECBITS: libc::c_ulong = 0x01 | 0x02 | 0x04 | 0x08 | 0x20 | 0x40 | 0x80;
    prctl("lock the securebits", libc::PR_SET_SECUREBITS, SECBITS)
}

/// Clear the ambient, inheritable, permitted and effective sets, set
/// `no_new_privs`, and (unless `keep_dumpable`) make the process
/// non-dumpable so that its memory and descriptors are out of reach of the
/// sandbox's own processes (/proc/1/mem, /proc/1/fd).
pub fn finish_drop(keep_dumpable: bool) -> Result<(), PrivilegeError> {
    prctl(
        "clear the ambient capability set",
        libc::PR_CAP_AMBIENT,
        libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
    )?;
    prctl("set no_new_privs", libc::PR_SET_NO_NEW_PRIVS, 1)?;
    if !keep_dumpable {
        prctl("make the init non-dumpable", libc::PR_SET_DUMPABLE, 0)?;
    }
    clear_capsets()
}

/// capset(2) with every set empty.
fn clear_capsets() -> Result<(), PrivilegeError> {
    caps::capset(&[CapData::EMPTY; 2]).map_err(PrivilegeError::Capset)
}
