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
//! Where `cpuacct` is a hierarchy of its own, the sandbox is given a
//! cgroup there too ([`account_cpu`]), or the shim would report the
//! node's CPU as the container's.
//!
//! The supervisor in them, the kernel would not remove them: when the
//! sandbox ends, its cgroup's teardown moves the supervisor into the
//! parent first (warden-jail's `Cgroup::remove`); `delete` removes what
//! is left after the sandbox ([`remove`]): the `cpuacct` one made here
//! and the parents made for the `cgroupsPath`.

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
    let mut dirs = warden_runtime::state::sandbox_cgroups(init as i32);
    dirs.extend(account_cpu(&dirs, &v1));
    let mut joined = Vec::new();
    for dir in dirs {
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

/// Where the node mounts `cpuacct` as a hierarchy of its own (not with
/// `cpu`), the sandbox has no cgroup in it (warden limits, it does not
/// account), and the shim would read the node's root there: every CPU
/// second of the node as the container's. So the sandbox gets one, at the
/// path of its `cpu` cgroup, holding every process of the sandbox (those
/// it starts later are born in it); the new directory, or `None` where
/// `cpuacct` needs none or it cannot be made.
fn account_cpu(dirs: &[PathBuf], v1: &[(PathBuf, Vec<String>)]) -> Option<PathBuf> {
    let has = |m: &(PathBuf, Vec<String>), c: &str| m.1.iter().any(|x| x == c);
    let acct = v1.iter().find(|m| has(m, "cpuacct"))?;
    if dirs.iter().any(|d| d.starts_with(&acct.0)) {
        return None;
    }
    let (cpu_dir, rel) = dirs.iter().find_map(|d| {
        let m = v1
            .iter()
            .find(|m| has(m, "cpu") && !has(m, "cpuacct") && d.starts_with(&m.0))?;
        Some((d, d.strip_prefix(&m.0).ok()?))
    })?;
    let target = acct.0.join(rel);
    std::fs::create_dir_all(&target).ok()?;
    let procs = std::fs::read_to_string(cpu_dir.join("cgroup.procs")).unwrap_or_default();
    for pid in procs.split_whitespace() {
        // A process that ended meanwhile is no loss.
        let _ = std::fs::write(target.join("cgroup.procs"), pid);
    }
    Some(target)
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
