//! What forks in flight have reserved of their tokens' quotas: kept in
//! the daemon's state ([`crate::app::App`] holds one), counted by every
//! quota check ([`crate::quota`]) until each copy is recorded as itself.

use std::collections::HashMap;
use std::sync::Mutex;

/// What a sandbox takes of a token's quotas and of the host's disk.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Tally {
    pub(crate) sandboxes: u64,
    pub(crate) memory: u64,
    /// Processes and threads its cgroup may hold (`resources.pids`).
    pub(crate) pids: u64,
    pub(crate) disk: u64,
    pub(crate) host_disk: u64,
}

impl Tally {
    pub(crate) fn times(self, n: u64) -> Tally {
        Tally {
            sandboxes: self.sandboxes.saturating_mul(n),
            memory: self.memory.saturating_mul(n),
            pids: self.pids.saturating_mul(n),
            disk: self.disk.saturating_mul(n),
            host_disk: self.host_disk.saturating_mul(n),
        }
    }

    pub(crate) fn plus(self, o: Tally) -> Tally {
        Tally {
            sandboxes: self.sandboxes.saturating_add(o.sandboxes),
            memory: self.memory.saturating_add(o.memory),
            pids: self.pids.saturating_add(o.pids),
            disk: self.disk.saturating_add(o.disk),
            host_disk: self.host_disk.saturating_add(o.host_disk),
        }
    }

    pub(crate) fn minus(self, o: Tally) -> Tally {
        Tally {
            sandboxes: self.sandboxes.saturating_sub(o.sandboxes),
            memory: self.memory.saturating_sub(o.memory),
            pids: self.pids.saturating_sub(o.pids),
            disk: self.disk.saturating_sub(o.disk),
            host_disk: self.host_disk.saturating_sub(o.host_disk),
        }
    }
}

/// What forks in flight have reserved, by token: sandboxes granted but
/// not yet made or recorded.
#[derive(Debug, Default)]
pub struct Pending(Mutex<HashMap<String, Tally>>);

impl Pending {
    pub(crate) fn of(&self, token: &str) -> Tally {
        let map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        map.get(token).copied().unwrap_or_default()
    }

    pub(crate) fn host_disk(&self) -> u64 {
        let map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        map.values()
            .map(|t| t.host_disk)
            .fold(0, u64::saturating_add)
    }

    pub(crate) fn change(&self, token: &str, f: impl FnOnce(Tally) -> Tally) {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let now = f(map.get(token).copied().unwrap_or_default());
        if now == Tally::default() {
            map.remove(token);
        } else {
            map.insert(token.to_string(), now);
        }
    }
}
