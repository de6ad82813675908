//! Whether a sandbox already running, made with one spec, can serve a
//! create that resolves to another (a daemon's warm pool hands out such
//! sandboxes), and what must change in it first.
//!
//! Driven by the field table's `running:` cell ([`Running`]): the two
//! specs are compared whole, typed, after each field whose row says a
//! difference is applied or alike has taken its part from the running
//! one. Everything else, a field added tomorrow included, makes the
//! running sandbox stale. This module only compares; the door applies the
//! change and hands the sandbox out.

use crate::fields::{Field, Running, FIELDS};
use crate::{NetworkSpec, SandboxSpec};

/// What must change in a running sandbox's allowlist for it to be what a
/// create asks for: the entries (as written) to add and to remove.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct AllowlistDelta {
    /// The owner's entries (of the profile the create names).
    pub allow: Vec<String>,
    /// The create's own entries, when a caller made it: they reach public
    /// addresses only, so they are added as the caller's.
    pub allow_by_caller: Vec<String>,
    pub remove: Vec<String>,
}

impl AllowlistDelta {
    pub fn is_empty(&self) -> bool {
        self.allow.is_empty() && self.allow_by_caller.is_empty() && self.remove.is_empty()
    }
}

/// Can a sandbox running with `have` become what `want` asks for? `None`
/// when `want` differs from `have` in any part whose row does not say
/// otherwise (limits, mounts, secrets, network mode, pinned hosts, ...);
/// else what must change in its allowlist.
pub fn fit(want: &SandboxSpec, have: &SandboxSpec) -> Option<AllowlistDelta> {
    let mut want = want.clone();
    let mut delta = AllowlistDelta::default();
    for row in FIELDS.iter().filter(|r| r.running != Running::Stale) {
        carry(row.field, row.running, have, &mut want, &mut delta);
    }
    (want == *have).then_some(delta)
}

/// Make `want`'s part of `field` `have`'s, where its `running:` cell says
/// a difference there does not make `have` stale; what the carried
/// difference asks of the running sandbox goes into `delta`. A field this
/// does not know stays as it is, and so is compared: a row that says
/// `applied` without an arm here fails closed (a test walks the rows).
fn carry(
    field: Field,
    running: Running,
    have: &SandboxSpec,
    want: &mut SandboxSpec,
    delta: &mut AllowlistDelta,
) {
    match (field, running) {
        (Field::AllowDomain, Running::Applied) => {
            let (NetworkSpec::Egress(w), NetworkSpec::Egress(h)) =
                (&mut want.network, &have.network)
            else {
                // Another network mode is another sandbox.
                return;
            };
            // An entry's trust is part of it: the owner's entry and a
            // caller's of the same name are not the same entry.
            let entry = |d: &crate::DomainRule| (d.source.clone(), d.caller);
            let wanted: Vec<_> = w.domains.iter().map(entry).collect();
            let had: Vec<_> = h.domains.iter().map(entry).collect();
            for (source, caller) in wanted.iter().filter(|d| !had.contains(d)) {
                match caller {
                    false => delta.allow.push(source.clone()),
                    true => delta.allow_by_caller.push(source.clone()),
                }
            }
            delta.remove.extend(
                had.iter()
                    .filter(|d| !wanted.contains(d))
                    .map(|d| d.0.clone()),
            );
            w.domains = h.domains.clone();
        }
        (Field::Disk, Running::DefaultAlike) => {
            // The default disk budget follows the state's free space,
            // which the pool's own sandboxes shrink, so the one resolved
            // now is smaller than the one a pooled sandbox was made with
            // a moment ago. Counted as a difference, every pooled sandbox
            // on a host short of space would be found stale, discarded and
            // made again, without end.
            if let (Some(w), Some(h)) = (&mut want.filesystem.disk, &have.filesystem.disk) {
                if !w.asked && !h.asked {
                    *w = *h;
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests;
