//! How long the daemon keeps the sandboxes it made once they stopped.
//!
//! A sandbox made through the API or the E2B door that stopped (its
//! timeout ended, a client stopped or killed it, its command ended) keeps
//! its files and its record until someone removes it; with many clients
//! they pile up without end. The daemon sweeps them: a sandbox it made is
//! removed once it has been stopped for [`Retention::stopped`] (one the
//! E2B door paused to its files, for [`Retention::paused`], E2B's own
//! bound on a paused sandbox). The clock starts when a sweep first sees
//! it stopped and is kept in the daemon's database, so a daemon restart
//! neither resets nor shortens it; a sandbox started or stopped since
//! (seen running, or its directory changed by its supervisor's record
//! coming or going) starts over. A record is the daemon's only for the
//! sandbox it was made for, not a later one given the same name. Running and frozen (paused in place) sandboxes are never swept,
//! nor sandboxes the daemon did not make (the owner's, made with the
//! CLI), nor those waiting in a warm pool. A removal is the same as
//! `DELETE /v1/sandboxes/{id}` without `force`: a sandbox started again
//! between the sweep's look and its removal is left alone.

use std::sync::Arc;
use std::time::Duration;

use warden_runtime::lifecycle;

use crate::app::App;
use crate::settings::Retention;

/// The longest time between two sweeps.
const EVERY: Duration = Duration::from_secs(60);

impl Retention {
    /// How often to sweep: often enough that a sandbox is removed within
    /// a quarter of its period late, at most once a minute, at least once
    /// a second.
    pub fn every(&self) -> Option<Duration> {
        let shortest = [self.stopped, self.paused].into_iter().flatten().min()?;
        Some((shortest / 4).clamp(Duration::from_secs(1), EVERY))
    }
}

/// Sweep until `stop` turns true.
pub async fn sweep(app: Arc<App>, mut stop: tokio::sync::watch::Receiver<bool>) {
    let Some(every) = app.retention.every() else {
        return;
    };
    loop {
        let a = app.clone();
        let _ = tokio::task::spawn_blocking(move || sweep_once(&a)).await;
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = stop.changed() => return,
        }
    }
}

/// One look at every sandbox the daemon made; returns the ones removed.
pub fn sweep_once(app: &App) -> Vec<String> {
    let Ok(db) = app.db() else {
        return Vec::new();
    };
    let Ok(rows) = db.sandboxes() else {
        return Vec::new();
    };
    let now = warden_runtime::state::now_ms();
    let mut removed = Vec::new();
    for row in rows {
        if db.is_pooled(&row.id).unwrap_or(true) {
            continue;
        }
        let Ok(sb) = app.store.get(&row.id) else {
            continue;
        };
        // A record older than the sandbox now holding its name was for
        // an earlier sandbox of that name (removed with the CLI, say):
        // the one there now is not the daemon's to sweep.
        if !row.is_of(&sb) {
            let _ = db.forget_stale(&sb);
            continue;
        }
        let seen = db.stopped_since(&row.id).unwrap_or(None);
        if lifecycle::liveness(&sb).running() {
            if seen.is_some() {
                let _ = db.set_stopped(&row.id, None);
            }
            continue;
        }
        let Some(seen) = seen else {
            let _ = db.set_stopped(&row.id, Some(now));
            continue;
        };
        // A start or a stop between two sweeps changes the sandbox's
        // directory (its supervisor's record comes and goes): its clock
        // starts over from then.
        let touched = std::fs::metadata(sb.dir())
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_millis() as u64);
        let since = seen.max(touched);
        // Stopped with either label, the E2B door shows it as paused
        // (`e2b::record::Seen`); any other stopped one is gone for E2B.
        use crate::e2b::record::{ON_TIMEOUT, PAUSED as PAUSED_LABEL};
        let e2b_paused =
            row.labels.contains_key(PAUSED_LABEL) || row.labels.contains_key(ON_TIMEOUT);
        let period = if e2b_paused {
            app.retention.paused
        } else {
            app.retention.stopped
        };
        let Some(period) = period else {
            continue;
        };
        if now.saturating_sub(since) < period.as_millis() as u64 {
            continue;
        }
        // Not forced: one started again since the look above stays.
        if lifecycle::remove(&app.store, &row.id, false).is_ok()
            && db.remove_sandbox(&row.id).is_ok()
        {
            if let Ok(mut t) = app.execs.lock() {
                t.retain(|_, h| h.row.sandbox != row.id);
            }
            removed.push(row.id);
        }
    }
    if !removed.is_empty() {
        // The last sandbox of a revoked token takes what it kept with it.
        crate::revocation::files::forget_revoked(&app.state_dir, &db);
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> Result<Retention, String> {
        serde_saphyr::from_str(text).map_err(|e| e.to_string())
    }

    #[test]
    fn periods_are_read_and_never_keeps_them() {
        assert_eq!(read("{}").unwrap(), Retention::default());
        let r = read("{stopped: 2h, paused: never}").unwrap();
        assert_eq!(r.stopped, Some(Duration::from_secs(7200)));
        assert_eq!(r.paused, None);
        assert_eq!(r.every(), Some(EVERY));
        let r = read("{stopped: 2s}").unwrap();
        assert_eq!(r.every(), Some(Duration::from_secs(1)));
        let r = read("{stopped: never, paused: never}").unwrap();
        assert_eq!(r.every(), None);
    }

    #[test]
    fn a_period_that_is_not_one_is_refused() {
        for bad in [
            "{stopped: 0s}",
            "{stopped: soon}",
            "{stopped: -1h}",
            "{kept: 1h}",
        ] {
            assert!(read(bad).is_err(), "{bad}");
        }
    }
}
