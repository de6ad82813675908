//! The container's cgroups where containerd's runc shim looks for them.
//! The shim reads a container's stats (`ContainerStats`, `ctr task
//! metrics`) and listens for its OOM kills (kubelet's `OOMKilled`) in the
//! cgroups of the PID `create` wrote to the pid file, which for warden is
//! the container's supervisor, on the node's own cgroups. So, before
//! `create` returns, the supervisor joins the sandbox's v1 `memory` and
//! `cpu`/`cpuacct` cgroups. Never `pids` (its threads would count against
//! the container's process limit) nor `freezer` (a paused container's
//! supervisor must still answer, to resume it); never a v2 cgroup (one
//! directory holds every controller there, `pids` included).
//!
//! The supervisor in them, they cannot be removed before it ends: `delete`
//! removes them after the sandbox ([`remove`]).

use std::path::{Path, PathBuf};

/// v1 controllers the shim reads a container's stats and OOM events from.
const SHIM_READS: &[&str] = &["memory", "cpu", "cpuacct"];
/// v1 controllers the supervisor must stay out of, and why.
const NEVER: &[(&str, &str)] = &[
    (
        "pids",
        "its threads would count against the container's limit",
    ),
    (
        "freezer",
        "a paused container's supervisor must answer resume",
    ),
];

/// Move supervisor `sup` into the sandbox's cgroups the shim reads; the
/// directories it joined. Best effort: a cgroup that cannot be joined
/// leaves the container's stats and OOM reports to the node's cgroup, and
/// its limits as they are.
pub fn expose(sup: u32) -> Vec<PathBuf> {
    let Some(init) = crate::pod::init_pid(sup) else {
        return Vec::new();
    };
    let v1 = v1_mounts();
    let mut joined = Vec::new();
    for dir in warden_runtime::state::sandbox_cgroups(init as i32) {
        let Some((_, controllers)) = v1.iter().find(|(m, _)| dir.starts_with(m)) else {
            continue;
        };
        let has = |c: &str| controllers.iter().any(|x| x == c);
        if !SHIM_READS.iter().any(|c| has(c)) || NEVER.iter().any(|(c, _)| has(c)) {
            continue;
        }
        if std::fs::write(dir.join("cgroup.procs"), sup.to_string()).is_ok() {
            joined.push(dir);
        }
    }
    joined
}

/// Remove the cgroup directories [`expose`] joined, once the supervisor
/// has ended (each is empty then; one that is not is left as it is).
pub fn remove(dirs: &[PathBuf]) {
    for d in dirs {
        let _ = std::fs::remove_dir(d);
    }
}

/// Mount points of v1 hierarchies with their controllers.
fn v1_mounts() -> Vec<(PathBuf, Vec<String>)> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let (left, right) = l.split_once(" - ")?;
            let point = left.split(' ').nth(4)?;
            let mut r = right.split(' ');
            if r.next()? != "cgroup" {
                return None;
            }
            let opts = r.nth(1)?;
            Some((
                Path::new(point).to_path_buf(),
                opts.split(',').map(str::to_string).collect(),
            ))
        })
        .collect()
}
