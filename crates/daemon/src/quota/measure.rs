//! What a sandbox holds of a token's quotas and of the host's disk,
//! read from its stored spec and its directory: its memory as its cgroup
//! may hold it, its processes, its disk budget and the VM memory it keeps
//! saved, and what a copy or a snapshot of it will hold. Measures only:
//! it refuses nothing.

use warden_workspace::Sandbox;

use crate::reserved::Tally;

/// What a sandbox was made with: its memory limit and its disk budget
/// (none when nothing of it is kept on disk).
pub(super) fn sizes_of(sb: &Sandbox) -> (u64, Option<u64>) {
    match stored_spec(sb) {
        Some(spec) => (
            spec.resources.memory.value,
            spec.filesystem.disk.map(|d| d.bytes),
        ),
        None => (0, None),
    }
}

pub(crate) fn stored_spec(sb: &Sandbox) -> Option<warden_policy::SandboxSpec> {
    warden_runtime::state::stored_spec(sb.dir())
}

/// What a sandbox counts against a token's memory quota: what its
/// cgroup may hold (see [`memory_held`]), not only the limit it asked.
pub(super) fn held_of(sb: &Sandbox) -> u64 {
    stored_spec(sb).map_or(0, |spec| memory_held(&spec))
}

/// The processes and threads a sandbox's cgroup may hold.
pub(super) fn pids_of(sb: &Sandbox) -> u64 {
    stored_spec(sb).map_or(0, |spec| spec.resources.pids.value)
}

/// The host memory a sandbox may hold: what its backend's cgroup allows
/// (`warden_runtime::backend::memory_held`): its limit, for gVisor runsc's
/// sentry and gofer beside it, for a VM the guest's RAM (which is not the
/// spec's default limit when none was asked) and the VMM beside it.
pub(super) fn memory_held(spec: &warden_policy::SandboxSpec) -> u64 {
    warden_runtime::backend::memory_held(spec)
}

/// The bytes a sandbox's audit log holds now.
pub(super) fn audit_log_bytes(sb: &Sandbox) -> u64 {
    std::fs::metadata(sb.dir().join("audit.jsonl")).map_or(0, |m| m.len())
}

/// What is reserved on the host for a sandbox: the disk budget its maker
/// asked for, and the kept output of its commands that budget allows. A
/// budget nobody asked for (the default, half the memory limit) is not
/// reserved: most sandboxes write little, and reserving every default
/// would refuse the fifth sandbox of an ordinary host; those are bounded
/// by the token's own disk quota instead.
pub(super) fn host_disk_of(sb: &Sandbox) -> u64 {
    match stored_spec(sb).and_then(|s| s.filesystem.disk) {
        Some(d) if d.asked => d
            .bytes
            .saturating_add(warden_runtime::output::budget_of_sandbox(sb.dir())),
        _ => 0,
    }
}

/// The bytes of a VM's saved memory and devices a sandbox keeps in its
/// own directory, outside its disk budget: paused to disk (`vm-paused`),
/// or a fork's copy of its source's awaiting its first start
/// (`vm-copy`). A tree that cannot be measured counts as full.
pub(super) fn saved_memory_bytes(sb: &Sandbox) -> u64 {
    use warden_runtime::supervisor::{VM_COPY, VM_PAUSED};
    [VM_PAUSED, VM_COPY]
        .iter()
        .map(|n| warden_workspace::fsutil::tree_size(&sb.dir().join(n)))
        .fold(0, u64::saturating_add)
}

/// What a sandbox holds of a token's disk quota: its disk budget and the
/// VM memory it keeps saved beside it.
pub(super) fn disk_of(sb: &Sandbox) -> u64 {
    sizes_of(sb)
        .1
        .unwrap_or(0)
        .saturating_add(saved_memory_bytes(sb))
}

/// What a sandbox takes of a token's quotas and of the host's disk.
pub(super) fn tally_of(sb: &Sandbox) -> Tally {
    Tally {
        sandboxes: 1,
        memory: held_of(sb),
        pids: pids_of(sb),
        disk: disk_of(sb),
        host_disk: host_disk_of(sb),
    }
}

/// What one copy a fork makes of `source` will hold of the disk quota,
/// measured before anything is copied: its disk budget (the source's),
/// or its copy of the source's layer and home where that is more, and the
/// source's saved memory where a VM's is carried: what lies saved of it
/// already, else, for a running VM (which the fork pauses to disk), its
/// guest's RAM, the most its saved memory takes. A fork that then carries
/// files only reserved more than it used, and gives it back when each
/// copy is counted as itself.
pub(super) fn copy_disk(source: &Sandbox) -> u64 {
    let budget = sizes_of(source).1.unwrap_or(0);
    let (files, memory) = held_files_and_memory(source);
    budget.max(files).saturating_add(memory)
}

/// What a snapshot of `source` will hold, measured before anything is
/// copied: its layer and home, and the VM memory it keeps (what lies
/// saved already, else a running VM's guest RAM, the most it takes).
pub(crate) fn snapshot_disk(source: &Sandbox) -> u64 {
    let (files, memory) = held_files_and_memory(source);
    files.saturating_add(memory)
}

/// The bytes of `source`'s layer and home, and of the VM memory a copy
/// of it carries.
pub(super) fn held_files_and_memory(source: &Sandbox) -> (u64, u64) {
    use warden_runtime::backend::Backend;
    let state = warden_workspace::saved::StateOf::of(source);
    let files = warden_workspace::fsutil::tree_size(&state.upper).saturating_add(
        state
            .home
            .as_deref()
            .map(warden_workspace::fsutil::tree_size)
            .unwrap_or(0),
    );
    let memory = match stored_spec(source) {
        Some(spec) if Backend::of(&spec) == Backend::Vm => {
            let saved = source.dir().join(warden_runtime::supervisor::VM_PAUSED);
            if warden_vm::pause::is_paused(&saved) {
                warden_workspace::fsutil::tree_size(&saved)
            } else if warden_runtime::lifecycle::liveness(source).running() {
                memory_held(&spec).saturating_sub(warden_vm::backend::cgroup_memory(0, None))
            } else {
                0
            }
        }
        _ => 0,
    };
    (files, memory)
}
