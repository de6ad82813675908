//! The cgroup runsc and everything it starts run in, and what it used.

use warden_audit::{EventSink, ResourcePeaks};
use warden_policy::SandboxSpec;

/// gVisor's own memory beside the sandbox's (its kernel, the file server).
const RUNSC_OVERHEAD: u64 = 256 << 20;

/// The memory limit of a gVisor sandbox's cgroup, which holds runsc's
/// sandbox process (the sentry, gVisor's kernel), its gofer and all they
/// start: the spec's memory and gVisor's own beside it. The one place
/// that says it, for the cgroup and for whoever counts sandboxes against
/// a budget (a token's memory quota counts this, not the spec's limit,
/// so that the sum of the cgroups' limits never passes the quota). Set
/// whether or not the memory was asked for, as the process backend
/// sets its default: a cgroup without a limit would hold what no budget
/// counted.
pub fn cgroup_memory(spec: &SandboxSpec) -> u64 {
    spec.resources.memory.value.saturating_add(RUNSC_OVERHEAD)
}

/// The cgroup runsc and everything it starts run in: the spec's memory
/// (and gVisor's own, [`cgroup_memory`]), CPUs and a bound on host tasks
/// (gVisor's threads and, with ptrace, one stub per address space). Where
/// none can be made, refused when a limit was asked for explicitly
/// (unless degraded runs are allowed, `Err`: why), otherwise said as a
/// `degraded` event. `name`: runsc's container id, the cgroup's name.
pub(super) fn confine(
    spec: &SandboxSpec,
    id: &str,
    name: &str,
    events: &mut dyn EventSink,
) -> Result<Option<crate::cgroup::Cgroup>, String> {
    let r = &spec.resources;
    let limits = crate::cgroup::Limits {
        memory: Some(cgroup_memory(spec)),
        pids: Some(r.pids.value.saturating_mul(2).saturating_add(256)),
        cpus: r.cpus,
    };
    let explicit = r.memory.explicit || r.cpus.is_some() || r.pids.explicit;
    let confine = crate::confine::Confine {
        id,
        name,
        limits: &limits,
        refuse: explicit && !spec.allow_degraded,
        process: "runsc",
        without: "no memory, CPU or task limit holds the sandbox",
    };
    crate::confine::host_process(&confine, events)
}

/// The cgroup once runsc is gone: what it used at most, and the cgroup
/// removed.
pub(super) fn release(cgroup: Option<crate::cgroup::Cgroup>) -> ResourcePeaks {
    let stats = cgroup.as_ref().map(|c| c.stats());
    if let Some(cg) = cgroup {
        let _ = cg.remove();
    }
    ResourcePeaks {
        max_rss_bytes: stats.as_ref().and_then(|s| s.memory_peak),
        cpu_user_ms: stats.as_ref().and_then(|s| s.cpu_user_ms),
        cpu_system_ms: stats.as_ref().and_then(|s| s.cpu_system_ms),
        oom_kills: stats.as_ref().and_then(|s| s.oom_kills),
    }
}

/// Whether a fork of runsc's (gVisor's threads, the ptrace platform's
/// stubs) failed at the cgroup's bound on host tasks: the Go runtime of
/// gVisor's kernel cannot live past a thread it could not make.
pub(super) fn task_bound_hit(cgroup: Option<&crate::cgroup::Cgroup>) -> bool {
    cgroup.is_some_and(|c| {
        c.paths().iter().any(|p| {
            std::fs::read_to_string(p.join("pids.events")).is_ok_and(|t| {
                t.lines()
                    .filter_map(|l| l.strip_prefix("max "))
                    .any(|n| n.trim().parse::<u64>().is_ok_and(|n| n > 0))
            })
        })
    })
}
