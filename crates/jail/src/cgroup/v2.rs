//! cgroup v2: the sandbox's directory in the unified hierarchy, and the
//! files of the v2 controllers.
//!
//! This module owns what only v2 has: enabling controllers through each
//! parent's `cgroup.subtree_control`, the "no internal processes" rule (and
//! the supervisor's own leaf it forces under a delegated cgroup),
//! `memory.max` and `memory.swap.max`, `cpu.max`, `memory.events` and
//! `cpu.stat`. It never decides where the directory goes (`plan` does) and
//! never kills (`kill` does, `cgroup.kill` and `cgroup.freeze` included).

use std::fs;
use std::path::Path;

use super::plan::V2Place;
use super::{
    hint, keyed, mkdir, write_file, write_raw, CgroupError, Controller, Dir, Op, CPU_PERIOD_US,
    SUPERVISOR_PREFIX,
};

/// Create the sandbox's v2 directory with `enable` controllers (those of
/// `required` must succeed).
pub(super) fn create(
    place: &V2Place,
    name: &str,
    enable: &[Controller],
    required: &[Controller],
) -> Result<Dir, CgroupError> {
    let parent = match place {
        V2Place::Root { root } => {
            // warden's parent or a container manager's (`under`), each
            // level handing the controllers down to the next.
            let below = super::under::shared_parent();
            super::under::make_below(root, below, |at| enable_controllers(at, enable, required))?;
            let parent = root.join(below);
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

/// Limit memory to `value` bytes, with no swap.
pub(super) fn set_memory(dir: &Path, value: &str) -> Result<(), CgroupError> {
    write_file(&dir.join("memory.max"), value, Op::Write)?;
    // Without this the sandbox could page its excess out to swap
    // instead of meeting the limit.
    let swap = dir.join("memory.swap.max");
    if swap.exists() {
        write_file(&swap, "0", Op::Write)?;
    }
    Ok(())
}

/// Limit CPU time to `quota` microseconds per [`CPU_PERIOD_US`].
pub(super) fn set_cpu_quota(dir: &Path, quota: u64) -> Result<(), CgroupError> {
    write_file(
        &dir.join("cpu.max"),
        &format!("{quota} {CPU_PERIOD_US}"),
        Op::Write,
    )
}

/// OOM kills and peak memory of the sandbox's v2 directory.
pub(super) fn memory_stats(dir: &Path) -> (Option<u64>, Option<u64>) {
    let read = |file: &str| fs::read_to_string(dir.join(file)).ok();
    let oom_kills = read("memory.events").and_then(|t| keyed(&t, "oom_kill"));
    let memory_peak = read("memory.peak").and_then(|t| t.trim().parse().ok());
    (oom_kills, memory_peak)
}

/// User and system CPU time of the sandbox's v2 directory, in milliseconds.
pub(super) fn cpu_stats(dir: &Path) -> (Option<u64>, Option<u64>) {
    let text = fs::read_to_string(dir.join("cpu.stat")).ok();
    let ms = |key| {
        text.as_deref()
            .and_then(|t| keyed(t, key))
            .map(|us| us / 1000)
    };
    (ms("user_usec"), ms("system_usec"))
}
