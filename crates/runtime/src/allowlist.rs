//! A running sandbox's allowlist, changed live: entries read exactly as
//! `--allow-domain` and `egress.domains` read them (`warden_policy::
//! parse_domains`, the same errors), handed to the proxy's
//! [`EgressControl`] (which swaps its matcher and cuts open connections a
//! removed entry covered), recorded as an `egress_changed` event, and kept
//! in the sandbox's state directory (`egress.json`: what was added and
//! removed since the spec was made), which every later start applies over
//! the stored spec. Used by the control protocol's `set_egress` and by an
//! "always" answer to an ask-mode question.

use crate::events::Bus;
use crate::protocol::{Refusal, Reply};
use crate::state;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use warden_audit::EventKind;
use warden_egress::proxy::{ChangeError, EgressControl};
use warden_policy::trust::Trust;
use warden_policy::{DomainRule, NetworkSpec, SandboxSpec};

/// The file in a sandbox's state directory that keeps live changes.
pub const EGRESS_CHANGES: &str = "egress.json";

/// What was changed since the spec was made.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Changes {
    /// Entries added, as written.
    pub added: Vec<String>,
    /// Of `added`, those a caller gave (a token holder, an answer over the
    /// API): they reach public addresses only (see
    /// [`DomainRule::caller`]). Files written before it existed have none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub added_by_caller: Vec<String>,
    /// Entries of the spec removed, as written.
    pub removed: Vec<String>,
}

/// Why a change was refused (nothing changed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    pub code: Refusal,
    pub message: String,
    /// `/allow/N` or `/remove/N`.
    pub field: Option<String>,
}

impl Refused {
    fn conflict(message: impl Into<String>) -> Refused {
        Refused {
            code: Refusal::Conflict,
            message: message.into(),
            field: None,
        }
    }
}

fn same(a: &DomainRule, b: &DomainRule) -> bool {
    a.name == b.name && a.subdomains == b.subdomains && a.port == b.port
}

/// Parse `entries` as allowlist entries; an error names `/{list}/N`.
pub fn parse(list: &str, entries: &[String]) -> Result<Vec<DomainRule>, Refused> {
    warden_policy::parse_domains(entries).map_err(|(i, e)| Refused {
        code: Refusal::Invalid,
        message: e.problem().to_string(),
        field: Some(format!("/{list}/{i}")),
    })
}

/// Apply the changes kept in `dir` to `spec` (before a start): removals,
/// then additions. An addition that no longer reads (a file edited by
/// hand) is skipped; a removal that does not read still takes off the
/// spec's entry written the same way.
pub fn apply_saved(dir: &Path, spec: &mut SandboxSpec) {
    let Ok(saved) = state::read_json::<Changes>(&dir.join(EGRESS_CHANGES)) else {
        return;
    };
    let NetworkSpec::Egress(egress) = &mut spec.network else {
        return;
    };
    for r in &saved.removed {
        match DomainRule::parse(r) {
            Ok(gone) => egress.domains.retain(|d| !same(d, &gone)),
            Err(_) => egress.domains.retain(|d| d.source != *r),
        }
    }
    for a in &saved.added {
        if let Ok(mut rules) = warden_policy::parse_domains(std::slice::from_ref(a)) {
            if let Some(mut rule) = rules.pop() {
                rule.caller = saved.added_by_caller.contains(a);
                match egress.domains.iter_mut().find(|d| same(d, &rule)) {
                    Some(d) if d.caller && !rule.caller => d.caller = false,
                    Some(_) => {}
                    None => egress.domains.push(rule),
                }
            }
        }
    }
}

/// The supervisor's side: the running proxy's control (once it runs) and
/// where changes are kept and recorded.
pub struct Allowlist {
    control: Arc<Mutex<Option<EgressControl>>>,
    dir: PathBuf,
    bus: Arc<Bus>,
    /// One change at a time (the file and the proxy agree).
    one: Mutex<()>,
}

impl Allowlist {
    pub fn new(
        control: Arc<Mutex<Option<EgressControl>>>,
        dir: PathBuf,
        bus: Arc<Bus>,
    ) -> Allowlist {
        Allowlist {
            control,
            dir,
            bus,
            one: Mutex::new(()),
        }
    }

    fn control(&self) -> Result<EgressControl, Refused> {
        self.control
            .lock()
            .ok()
            .and_then(|c| c.clone())
            .ok_or_else(|| {
                Refused::conflict("this sandbox has no egress proxy (it was made without `egress.domains`, `egress.host_ports`, `egress.ask` or `secrets`: its network is loopback only); make it again with one to change its allowlist")
            })
    }

    /// Take `remove` off the list and put `allow` on it; returns the list
    /// as it is now. Bad entries, or a removal of an entry not on the
    /// list, change nothing. What a caller (`trust`) adds reaches public
    /// addresses only; the owner's entry stays the owner's.
    pub fn change(
        &self,
        allow: &[String],
        remove: &[String],
        by: &str,
        trust: Trust,
    ) -> Result<Vec<String>, Refused> {
        let mut add = parse("allow", allow)?;
        for r in &mut add {
            r.caller = trust == Trust::Caller;
        }
        let gone = parse("remove", remove)?;
        let control = self.control()?;
        if add.is_empty() && gone.is_empty() {
            return Ok(control.rules().into_iter().map(|r| r.source).collect());
        }
        let _one = self.one.lock();
        let change = control.change(&add, &gone).map_err(|e| match e {
            ChangeError::NotListed { index, .. } => Refused {
                code: Refusal::Invalid,
                message: e.to_string(),
                field: Some(format!("/remove/{index}")),
            },
            ChangeError::Unusable => Refused::conflict(e.to_string()),
        })?;
        self.save(&change.added, &change.removed, trust);
        if !change.added.is_empty() || !change.removed.is_empty() {
            self.bus.emit(EventKind::EgressChanged {
                added: change.added.clone(),
                removed: change.removed.clone(),
                by: by.to_string(),
                closed: change.closed,
            });
        }
        Ok(change.rules.into_iter().map(|r| r.source).collect())
    }

    /// [`Allowlist::change`] as the control protocol answers it.
    pub fn reply(&self, allow: &[String], remove: &[String], by: &str, trust: Trust) -> Reply {
        match self.change(allow, remove, by, trust) {
            Ok(rules) => Reply::Egress { rules },
            Err(r) => Reply::Refused {
                code: r.code,
                message: r.message,
                field: r.field,
                reason: None,
            },
        }
    }

    /// Keep what changed for later starts: a removal takes the entry out
    /// of what was added and puts it among what was removed, an addition
    /// the other way round (so an entry is never in both).
    fn save(&self, added: &[String], removed: &[String], trust: Trust) {
        let path = self.dir.join(EGRESS_CHANGES);
        let mut saved: Changes = state::read_json(&path).unwrap_or_default();
        fn take(list: &mut Vec<String>, rule: &DomainRule) {
            list.retain(|e| !DomainRule::parse(e).is_ok_and(|r| same(&r, rule)));
        }
        for r in removed.iter().filter_map(|e| DomainRule::parse(e).ok()) {
            take(&mut saved.added, &r);
            take(&mut saved.added_by_caller, &r);
            take(&mut saved.removed, &r);
            saved.removed.push(r.source);
        }
        for a in added.iter().filter_map(|e| DomainRule::parse(e).ok()) {
            take(&mut saved.removed, &a);
            take(&mut saved.added, &a);
            take(&mut saved.added_by_caller, &a);
            if trust == Trust::Caller {
                saved.added_by_caller.push(a.source.clone());
            }
            saved.added.push(a.source);
        }
        let _ = state::write_json(&path, &saved);
    }
}
