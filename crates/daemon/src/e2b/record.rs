//! The E2B door's record of a sandbox, kept in its labels under `e2b.`
//! keys (in the daemon's database, so it outlives a daemon restart),
//! and what the door reads from it: whether E2B sees the sandbox
//! running, paused or gone, and what its timeout does to its TTL. Below
//! every handler of the door, which all read it; the handlers of the
//! life it tells are [`super::lifecycle`]'s.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::api::SandboxInfo;

/// A sandbox paused to its files: `filesystem`.
pub const PAUSED: &str = "e2b.paused";
/// What the timeout does: `pause` (with memory) or `pause-filesystem`.
pub const ON_TIMEOUT: &str = "e2b.on_timeout";
/// The names the client allowed (see [`super::network`]).
pub const ALLOW_OUT: &str = "e2b.allow_out";
/// The TTL past the timeout of a sandbox that pauses when its timeout
/// ends: the door's time to pause it before its supervisor would stop it.
pub const GRACE: Duration = Duration::from_secs(10);

/// A sandbox as E2B sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen {
    Running,
    /// Its processes frozen in place.
    Paused,
    /// Stopped, its files kept: a connect starts it afresh.
    PausedToFiles,
    /// Stopped and nothing says it is paused: gone for E2B.
    Gone,
}

impl Seen {
    pub fn of(info: &SandboxInfo) -> Seen {
        match info.state.as_str() {
            "running" => Seen::Running,
            "paused" => Seen::Paused,
            _ if info.labels.contains_key(PAUSED) || info.labels.contains_key(ON_TIMEOUT) => {
                Seen::PausedToFiles
            }
            _ => Seen::Gone,
        }
    }

    /// E2B's name of the state.
    pub fn name(self) -> &'static str {
        match self {
            Seen::Running => "running",
            Seen::Paused | Seen::PausedToFiles => "paused",
            Seen::Gone => "killed",
        }
    }
}

/// Whether the sandbox's timeout ends in a pause with its memory (its
/// TTL then holds [`GRACE`] past the timeout).
pub fn pauses_on_timeout(labels: &BTreeMap<String, String>) -> bool {
    labels.get(ON_TIMEOUT).map(String::as_str) == Some("pause")
}

/// The TTL that gives a sandbox labelled `labels` the timeout `seconds`:
/// one that pauses with its memory when its timeout ends holds [`GRACE`]
/// more, in which the door pauses it.
pub(super) fn ttl_for(labels: &BTreeMap<String, String>, seconds: u64) -> u64 {
    if pauses_on_timeout(labels) {
        seconds.saturating_add(GRACE.as_secs())
    } else {
        seconds
    }
}

/// When the sandbox's E2B timeout ends (ms since the epoch), while it
/// runs.
pub(super) fn end_ms(info: &SandboxInfo) -> Option<u64> {
    let grace = if pauses_on_timeout(&info.labels) {
        GRACE.as_millis() as u64
    } else {
        0
    };
    info.ttl_deadline_ms.map(|d| d.saturating_sub(grace))
}
