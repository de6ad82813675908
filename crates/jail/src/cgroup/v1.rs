//! cgroup v1: a sandbox's directory in one v1 hierarchy, and the files of
//! the v1 controllers.
//!
//! This module owns what only v1 has: a directory per controller hierarchy
//! under the shared `warden` parent, `memory.limit_in_bytes`, `memsw` and
//! `kmem.tcp`,
//! the CFS period and quota files, `memory.oom_control` and `cpuacct.stat`
//! in USER_HZ ticks. It never decides which hierarchy to use (`plan` does)
//! and never kills (`kill` does, freezer included).

use std::fs;
use std::path::Path;

use nix::unistd::SysconfVar;

use super::discover::V1Hierarchy;
use super::{keyed, mkdir, v1_parent, write_file, CgroupError, Dir, Op, CPU_PERIOD_US};

/// Create the sandbox's directory `name` under the shared parent of one v1
/// hierarchy.
pub(super) fn create(v1: &V1Hierarchy, name: &str) -> Result<Dir, CgroupError> {
    let parent = v1_parent(&v1.point);
    match parent.strip_prefix(&v1.point) {
        // warden's parent or a container manager's (`under`), one name at
        // a time.
        Ok(below) => super::under::make_below(&v1.point, below, |_| Ok(()))?,
        Err(_) => mkdir(&parent, true)?,
    }
    let path = parent.join(name);
    mkdir(&path, false)?;
    Ok(Dir {
        path,
        v2: false,
        controllers: v1.controllers.clone(),
    })
}

/// Limit memory, swap included, to `value` bytes.
pub(super) fn set_memory(dir: &Path, value: &str) -> Result<(), CgroupError> {
    // limit_in_bytes first: the kernel keeps memsw >= limit_in_bytes.
    write_file(&dir.join("memory.limit_in_bytes"), value, Op::Write)?;
    // memory+swap at the same value: no escape into swap. The file
    // exists only where swap accounting is on.
    let memsw = dir.join("memory.memsw.limit_in_bytes");
    if memsw.exists() {
        write_file(&memsw, value, Op::Write)?;
    }
    // v1 charges TCP's socket buffers to a memory cgroup only once its
    // `kmem.tcp` limit is set, and keeps them apart from the rest: left
    // unset, a sandbox could queue hundreds of MiB in loopback connections
    // of its own, counted only against the host's `tcp_mem` (which every
    // other TCP socket of the host shares). v2 charges them to memory.max.
    let tcp = dir.join("memory.kmem.tcp.limit_in_bytes");
    if tcp.exists() {
        write_file(&tcp, value, Op::Write)?;
    }
    Ok(())
}

/// Limit CPU time to `quota` microseconds per [`CPU_PERIOD_US`].
pub(super) fn set_cpu_quota(dir: &Path, quota: u64) -> Result<(), CgroupError> {
    // Period first: the kernel checks the quota against it.
    write_file(
        &dir.join("cpu.cfs_period_us"),
        &CPU_PERIOD_US.to_string(),
        Op::Write,
    )?;
    write_file(&dir.join("cpu.cfs_quota_us"), &quota.to_string(), Op::Write)
}

/// OOM kills and peak memory of a memory directory.
pub(super) fn memory_stats(dir: &Path) -> (Option<u64>, Option<u64>) {
    let read = |file: &str| fs::read_to_string(dir.join(file)).ok();
    let oom_kills = read("memory.oom_control").and_then(|t| keyed(&t, "oom_kill"));
    let memory_peak = read("memory.max_usage_in_bytes").and_then(|t| t.trim().parse().ok());
    (oom_kills, memory_peak)
}

/// User and system CPU time of a cpuacct directory, in milliseconds.
pub(super) fn cpu_stats(dir: &Path) -> (Option<u64>, Option<u64>) {
    let Some(tick) = clock_ticks() else {
        return (None, None);
    };
    // cpuacct.stat counts USER_HZ ticks.
    let text = fs::read_to_string(dir.join("cpuacct.stat")).ok();
    let ms = |key| {
        text.as_deref()
            .and_then(|t| keyed(t, key))
            .map(|ticks| ticks.saturating_mul(1000) / tick)
    };
    (ms("user"), ms("system"))
}

/// USER_HZ, the unit of cpuacct.stat.
fn clock_ticks() -> Option<u64> {
    match nix::unistd::sysconf(SysconfVar::CLK_TCK) {
        Ok(Some(t)) if t > 0 => u64::try_from(t).ok(),
        _ => None,
    }
}
