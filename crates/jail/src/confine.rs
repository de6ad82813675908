//! What a backend does when the host gives less than a layer asks: says
//! it as a `degraded` event ([`degraded`], every backend's one way of
//! saying it; the front door words it for the person, the jail prints
//! nothing), and for the cgroup of a backend's one process on the host
//! (runsc for gVisor, the VMM for a microVM) makes the choice: a run that
//! asked for a limit explicitly is refused (unless degraded runs are
//! allowed); any other goes on without one, said, so that nobody mistakes
//! it for a bounded run. The process backend makes its own choice for its
//! own tree (`sandbox`).

use warden_audit::{Event, EventKind, EventSink};

use crate::cgroup::{Cgroup, Limits};

/// What a backend asks of [`host_process`].
pub struct Confine<'a> {
    /// The sandbox's id, for the `degraded` event.
    pub id: &'a str,
    /// The cgroup's name.
    pub name: &'a str,
    pub limits: &'a Limits,
    /// A limit was asked for explicitly and degraded runs are not allowed:
    /// no cgroup refuses the run.
    pub refuse: bool,
    /// The process, as the event names it ("runsc", "the VMM").
    pub process: &'a str,
    /// What holds (or does not) without the cgroup, for the event.
    pub without: &'a str,
}

/// The cgroup `c` asks for; `Ok(None)` with a `degraded` event where none
/// can be made and the run may go on; `Err` with the cause's chain where
/// it may not.
pub fn host_process(c: &Confine, events: &mut dyn EventSink) -> Result<Option<Cgroup>, String> {
    match Cgroup::create(c.name, c.limits) {
        Ok(cg) => Ok(Some(cg)),
        Err(e) if c.refuse => Err(crate::chain_str(&e)),
        Err(e) => {
            let lost = format!(
                "{} runs in no cgroup of its own ({}): {}",
                c.process,
                crate::chain_str(&e),
                c.without
            );
            degraded(events, c.id, "cgroups", &lost);
            Ok(None)
        }
    }
}

/// A layer the host cannot give, as an event: `layer` runs weaker than it
/// could, losing `lost`.
pub fn degraded(events: &mut dyn EventSink, id: &str, layer: &str, lost: &str) {
    events.emit(&Event::now(
        id,
        EventKind::Degraded {
            layer: layer.to_string(),
            lost: lost.to_string(),
        },
    ));
}
