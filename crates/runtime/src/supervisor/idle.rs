//! An idle supervisor gives back the pages of warden's code it touched.
//!
//! Most of a long-lived supervisor's resident memory is the binary's text
//! and read-only data, faulted in while it started the sandbox and served
//! requests. Once it has served nothing for [`IDLE_AFTER`], those pages are
//! dropped from its resident set ([`warden_jail::resident::release_code`]:
//! never relocated or written data); they stay in the page cache and the
//! next request faults back what it runs.

use super::Shared;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// How long the supervisor serves nothing before its code's pages go.
pub(super) const IDLE_AFTER: Duration = Duration::from_secs(2);

/// What the watcher saw at its last look.
#[derive(Debug, Default)]
pub(super) struct Idle {
    /// The activity count at the last look.
    seen: u64,
    /// The activity count when the code was last released.
    released: Option<u64>,
}

impl Idle {
    /// Called every [`IDLE_AFTER`] at most: releases the code when nothing
    /// happened since the last look (no request, no notice from the init,
    /// no connection open) and nothing happened since the last release.
    pub(super) fn look(&mut self, shared: &Shared) {
        let now = shared.activity.load(Ordering::SeqCst);
        let busy = shared.connections.load(Ordering::SeqCst) > 0;
        if busy || now != self.seen {
            self.seen = now;
            return;
        }
        if self.released == Some(now) {
            return;
        }
        self.released = Some(now);
        // A failure (an image with text relocations) costs memory only:
        // the pages stay resident, nothing else changes.
        let _ = warden_jail::resident::release_code();
    }
}
