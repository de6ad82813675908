//! `warden run`: one command in a fresh sandbox, supervised by the calling
//! process itself (no supervisor process of its own on the one-shot path).

use crate::events::{Bus, BusSink, Notice, Sink};
use crate::net::Wiring;
use warden_jail::{JailError, Outcome, Program};
use warden_policy::SandboxSpec;

/// How a one-shot run ended, and what the front door may tell the person.
#[derive(Debug)]
pub struct Finished {
    pub outcome: Outcome,
    /// Lines for the person: blocked secrets, the destinations denied,
    /// what the run would have needed; the door words them.
    pub notices: Vec<Notice>,
    /// Records a sink could not write (the audit log, `--json-events`):
    /// when not empty, the run has failed.
    pub lost_records: Vec<String>,
    /// The allowlist entries learning mode allowed (`--egress-learn`).
    pub learned: Vec<String>,
}

/// Run `spec`'s command in a new sandbox named `id`, events to `sinks` as
/// they happen; returns when every process of the sandbox is gone.
///
/// Must be called while the process is single-threaded (the sandbox is
/// cloned from it); threads start only after the clone. Its writable
/// volumes' merges are fenced by no owner's files: a door runs the
/// owner's sandboxes with [`run_once_asking`] and the owner's [`Owner`].
pub fn run_once(spec: &SandboxSpec, id: &str, sinks: Vec<Sink>) -> Result<Finished, JailError> {
    run_once_asking(spec, id, sinks, None, None)
}

/// Whose run it is: the owner's catalogue and warden's state (if the run
/// has one), whose files, as they are at the stop, the writable volumes'
/// merges hold back ([`crate::owners_files::OwnersFence`]), as a
/// supervisor's do.
pub type Owner<'a> = (warden_policy::compose::Catalog, Option<&'a std::path::Path>);

/// [`run_once`], and under `egress.ask` at a terminal, the programs the
/// exec allowlist refuses asked about there ([`crate::ask_programs`]):
/// an "always" is kept where `program_grants` says (the project's
/// programs' grants, or the profile in use; `None` offers no "always");
/// with `owner`, the writable volumes' merges at the stop are fenced by
/// the owner's files.
pub fn run_once_asking(
    spec: &SandboxSpec,
    id: &str,
    sinks: Vec<Sink>,
    program_grants: Option<crate::programs::Keep>,
    owner: Option<Owner<'_>>,
) -> Result<Finished, JailError> {
    let bus = Bus::new(id, sinks);
    bus.set_budget(spec.resources.audit_budget, 0);
    let mut wiring = Wiring::new(spec, bus.clone());
    if let Some((catalog, state)) = owner {
        wiring.fence_volumes(catalog, state);
    }
    let programs = crate::ask_programs::TerminalPrograms::new(bus.clone(), program_grants);
    if !spec.allow_exec.is_empty() {
        wiring.ask_programs(programs.clone());
    }
    let mut sink = crate::ask_programs::ProgramSink {
        inner: BusSink(bus.clone()),
        programs: programs.clone(),
    };
    let backend = crate::backend::Backend::of(spec);
    let result = backend.run(spec, id, Program::Command, &mut sink, &mut wiring);
    // The desk is gone with the run: an answer given is kept before the
    // run's record closes.
    programs.finish();
    drop(wiring);
    bus.close();
    // What runs killed outright left (their cgroups), at most once in a
    // while: one `stat` when not due.
    let _ = warden_jail::cgroup::sweep_if_due();
    let notices = bus.notices();
    let lost_records = bus.lost_records();
    let learned = bus.learned();
    result.map(|outcome| Finished {
        outcome,
        notices,
        lost_records,
        learned,
    })
}
