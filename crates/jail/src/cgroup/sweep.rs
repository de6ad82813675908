//! Cgroups left by sandboxes whose owner was killed outright.
//!
//! A `warden run` or a supervisor removes its sandbox's cgroup directories
//! when the sandbox ends; one killed with SIGKILL cannot, and its empty
//! `warden-<id>` directories stay under the shared parent of each
//! hierarchy. The next warden command sweeps them: a directory of ours
//! (named `warden-...`, under a parent this user owns) that is older than
//! [`MIN_AGE`] is removed with `rmdir`, which the kernel refuses for a
//! cgroup that still has a process or a child (`EBUSY`), so a running or
//! paused sandbox is never touched; the age keeps a sandbox being set up
//! (its directory made, its init not yet inside) out of reach. At most one
//! sweep runs per [`EVERY`] per user (a marker file's time in the plan's
//! memo directory), so a run pays one `stat` for it.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use super::discover::Hierarchies;
use super::{memo, v1_parent, PARENT, USER_PARENT_PREFIX};

/// A cgroup this young may belong to a sandbox being set up.
pub const MIN_AGE: Duration = Duration::from_secs(60);
/// How often a sweep runs.
const EVERY: Duration = Duration::from_secs(600);
/// The marker whose time says when the last sweep ran.
const MARKER: &str = "cgroups-swept";

/// Sweep when the last sweep is older than [`EVERY`] (or none is
/// recorded); returns the directories removed.
pub fn sweep_if_due() -> Vec<PathBuf> {
    let Some(dir) = memo::default_dir() else {
        return Vec::new();
    };
    let marker = dir.join(MARKER);
    let due = fs::metadata(&marker)
        .and_then(|m| m.modified())
        .map_or(true, |t| age(t) >= EVERY);
    if !due {
        return Vec::new();
    }
    // Written first: two commands at once sweep once.
    if fs::create_dir_all(&dir).is_err() || fs::write(&marker, b"").is_err() {
        return Vec::new();
    }
    sweep(MIN_AGE)
}

/// Remove this user's sandbox cgroups older than `min_age` that hold no
/// process and no child, in every hierarchy; returns those removed.
pub fn sweep(min_age: Duration) -> Vec<PathBuf> {
    let Ok(h) = Hierarchies::discover() else {
        return Vec::new();
    };
    let mut parents: Vec<PathBuf> = h.v1.iter().map(|v| v1_parent(&v.point)).collect();
    // Root's sandboxes in the v2 hierarchy sit under its shared parent; a
    // rootless user's under its own delegated cgroup, which is another
    // one in each session and is left to the user's session manager.
    if nix::unistd::geteuid().is_root() {
        parents.extend(h.v2.iter().map(|v| v.point.join(PARENT)));
    }
    let mut removed = Vec::new();
    for parent in parents {
        sweep_under(&parent, min_age, &mut removed);
    }
    removed
}

fn sweep_under(parent: &Path, min_age: Duration, removed: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        // A delegated user's parent is the user's, not a sandbox's.
        if !name.starts_with("warden-") || name.starts_with(USER_PARENT_PREFIX) {
            continue;
        }
        let path = entry.path();
        let old = fs::symlink_metadata(&path)
            .and_then(|m| m.modified())
            .is_ok_and(|t| age(t) >= min_age);
        // A cgroup with a process or a child is refused by the kernel.
        if old && fs::remove_dir(&path).is_ok() {
            removed.push(path);
        }
    }
}

fn age(t: SystemTime) -> Duration {
    SystemTime::now().duration_since(t).unwrap_or_default()
}
