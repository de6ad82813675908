//! Before the sandbox may go on: its cgroup, its ID maps, the final
//! message to its init.

use super::outcome::bytes;
use super::supervision::write_all;
use super::{degraded, sys_err, JailError};
use crate::cgroup::{Cgroup, CgroupError, Limits, Pending, Unfinished};
use crate::error::chain_str;
use crate::host;
use crate::init::{self, ChildPlan};
use crate::sys;
use nix::errno::Errno;
use nix::unistd::Pid;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use warden_audit::EventSink;
use warden_policy::SandboxSpec;

/// Begin the sandbox's cgroup (see [`Cgroup::begin`]), or decide to run
/// without one: refused when a limit was asked for explicitly (unless
/// degraded runs are allowed), otherwise said loudly.
pub(super) fn confine_begin(
    spec: &SandboxSpec,
    id: &str,
    limits: &Limits,
    events: &mut dyn EventSink,
) -> Result<Option<Pending>, JailError> {
    match Cgroup::begin(id, limits) {
        Ok(p) => Ok(Some(p)),
        Err(source) => {
            without_cgroup(spec, id, source, events)?;
            Ok(None)
        }
    }
}

/// Finish the sandbox's cgroup (see [`Pending::finish`]), or decide to run
/// without one as [`confine_begin`] does. What exists of it when that is
/// the decision (its v2 directory, which the init may live in) is in the
/// second value, for the caller to remove once the init is gone.
pub(super) fn confine_finish(
    spec: &SandboxSpec,
    id: &str,
    pending: Pending,
    events: &mut dyn EventSink,
) -> Result<(Option<Cgroup>, Option<Cgroup>), JailError> {
    match pending.finish() {
        Ok(cg) => Ok((Some(cg), None)),
        Err(Unfinished { error, made }) => {
            without_cgroup(spec, id, error, events)?;
            Ok((None, Some(made)))
        }
    }
}

/// No cgroup: an error when a limit was asked for explicitly (and degraded
/// runs are not allowed), otherwise the `degraded` event that says what
/// limits the sandbox instead.
fn without_cgroup(
    spec: &SandboxSpec,
    id: &str,
    source: CgroupError,
    events: &mut dyn EventSink,
) -> Result<(), JailError> {
    let res = &spec.resources;
    let mut explicit = Vec::new();
    if res.memory.explicit {
        explicit.push("`resources.memory`");
    }
    if res.pids.explicit {
        explicit.push("`resources.pids`");
    }
    if res.cpus.is_some() {
        explicit.push("`resources.cpus`");
    }
    if !explicit.is_empty() && !spec.allow_degraded {
        return Err(JailError::CgroupRequired {
            what: explicit.join(", "),
            source,
        });
    }
    let lost = format!(
        "cgroups are not usable ({}): processes are limited by RLIMIT_NPROC={} (counted per user, host-wide), memory by RLIMIT_DATA={} per process, not for the sandbox as a whole{}",
        chain_str(&source),
        res.pids.value,
        bytes(res.memory.value),
        if res.cpus.is_some() {
            ", CPU is not limited"
        } else {
            ""
        },
    );
    degraded(events, id, "resources", &lost);
    Ok(())
}

/// The final message to the child: flags, and a trailer that proves the
/// message complete.
pub(super) fn send_final(go: &OwnedFd, flags: u8) -> Result<(), JailError> {
    let mut msg = [0u8; 9];
    msg[0] = flags;
    msg[1..].copy_from_slice(init::FINAL_TRAILER);
    write_all(go.as_fd(), &msg).map_err(sys_err("let the sandbox start"))
}

/// Write the child's ID maps, put it in the cgroup, and make its writable
/// binds idmapped (root mode), before it may go on.
pub(super) fn prepare_child(
    child: Pid,
    uid: u32,
    gid: u32,
    host_uid: u32,
    host_gid: u32,
    plan: &ChildPlan,
) -> Result<(), JailError> {
    let proc_dir = PathBuf::from(format!("/proc/{}", child.as_raw()));
    let write = |name: &str, content: String| -> Result<(), JailError> {
        let path = proc_dir.join(name);
        std::fs::write(&path, content).map_err(|source| JailError::IdMap { path, source })
    };
    if !host::is_root() {
        // An unprivileged user may write a gid map only after giving up
        // setgroups(2) for the namespace.
        write("setgroups", "deny".into())?;
    }
    write("uid_map", format!("{uid} {host_uid} 1\n")).map_err(annotate_userns)?;
    write("gid_map", format!("{gid} {host_gid} 1\n")).map_err(annotate_userns)?;
    let idmapped: Vec<_> = plan
        .root
        .binds
        .iter()
        .filter(|b| b.idmap)
        .filter_map(|b| b.tree.as_ref().map(|fd| (b, fd)))
        .collect();
    if !idmapped.is_empty() {
        let userns =
            std::fs::File::open(proc_dir.join("ns/user")).map_err(|source| JailError::IdMap {
                path: proc_dir.join("ns/user"),
                source,
            })?;
        for (b, fd) in idmapped {
            let done = sys::idmap_tree(fd.as_fd(), userns.as_fd());
            if !b.writable && matches!(done, Err(Errno::EINVAL | Errno::EOPNOTSUPP)) {
                // A file system without idmapped mounts: a read-only bind
                // is still shown, with its owners as the host has them
                // (the tree is unchanged by the refused attribute).
                continue;
            }
            done.map_err(|source| match source {
                Errno::EINVAL | Errno::EOPNOTSUPP => JailError::IdmapUnsupported {
                    path: b.src.clone(),
                    source,
                },
                _ => JailError::Idmap {
                    path: b.src.clone(),
                    source,
                },
            })?;
        }
    }
    Ok(())
}

pub(super) fn annotate_userns(e: JailError) -> JailError {
    match (&e, host::userns_blocker()) {
        (JailError::IdMap { source, .. }, Some(why)) => JailError::UserNamespaces {
            why,
            lost: host::LOST_WITHOUT_NAMESPACES,
            errno: Errno::from_raw(source.raw_os_error().unwrap_or(libc::EPERM)),
        },
        _ => e,
    }
}

/// A directory of its own for a sandbox without a mount namespace (its
/// TMPDIR, and HOME when there is no workspace); removed when dropped.
pub(super) struct PrivateTmp(pub(super) PathBuf);

impl PrivateTmp {
    pub(super) fn create(id: &str, uid: u32, gid: u32) -> Result<PrivateTmp, JailError> {
        use std::os::unix::fs::DirBuilderExt;
        let path = std::env::temp_dir().join(format!("warden-{id}"));
        let err = |source| JailError::PrivateTmp {
            path: path.clone(),
            source,
        };
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&path)
            .map_err(err)?;
        let dir = PrivateTmp(path.clone());
        if host::is_root() {
            std::os::unix::fs::chown(&path, Some(uid), Some(gid)).map_err(err)?;
        }
        Ok(dir)
    }
}

impl Drop for PrivateTmp {
    fn drop(&mut self) {
        // The sandbox wrote this tree: removed without recursion (a chain
        // of directories deeper than any stack) and never through a link.
        let _ = warden_workspace::fsutil::remove_tree(&self.0);
    }
}

/// What a sandbox without a mount namespace may read: the host's system
/// directories, `/etc` without its secrets, `/proc` and `/dev`.
pub(super) fn degraded_read_paths() -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = crate::mounts::SYSTEM_DIRS
        .iter()
        .filter(|d| **d != "/etc")
        .map(PathBuf::from)
        .filter(|p| p.exists())
        .collect();
    out.push(PathBuf::from("/proc"));
    out.push(PathBuf::from("/dev"));
    // Landlock grants by hierarchy, so /etc is granted entry by entry,
    // leaving out the secrets the mount namespace would have covered.
    if let Ok(entries) = std::fs::read_dir("/etc") {
        for e in entries.flatten() {
            let name = e.file_name();
            let name = name.to_string_lossy();
            let hidden = crate::mounts::HIDDEN_IN_ETC
                .iter()
                .any(|(h, _)| *h == name || h.starts_with(&format!("{name}/")));
            if !hidden {
                out.push(e.path());
            }
        }
    }
    // Directories that hold a hidden entry are granted entry by entry too.
    for dir in ["ssh", "ssl", "security"] {
        if let Ok(entries) = std::fs::read_dir(Path::new("/etc").join(dir)) {
            for e in entries.flatten() {
                let rel = format!("{dir}/{}", e.file_name().to_string_lossy());
                if !crate::mounts::HIDDEN_IN_ETC.iter().any(|(h, _)| *h == rel) {
                    out.push(e.path());
                }
            }
        }
    }
    out
}
