//! Pausing: the sandbox's processes frozen in place and let go on, and the
//! clocks that stand still meanwhile (its TTL and its hard lifetime).
//!
//! The backend freezes ([`crate::backend::Backend::pause`]); this module
//! keeps the state: since when the sandbox is paused (in the supervisor's
//! record too, so that `warden ls` and the daemon see it without asking,
//! and a daemon restart changes nothing: the supervisor is detached and
//! keeps the sandbox frozen), which requests are refused meanwhile, and the
//! deadlines moved on by the time spent paused. It never thaws a sandbox
//! on its own, except to stop it.

use super::{idle, stop, Shared, TTL_GRACE};
use crate::protocol::{Refusal, Reply, Request};
use crate::state;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use warden_audit::{EventKind, StopReason};

/// Where a VM paused to disk keeps its memory and devices: in the
/// sandbox's own state directory (owner-only), gone once resumed.
pub const VM_PAUSED: &str = "vm-paused";

/// Where a sandbox made by a fork of a VM keeps its copy of the source's
/// saved memory and devices (the files of [`VM_PAUSED`]) until its first
/// start restores it as a copy, with an identity of its own.
pub const VM_COPY: &str = "vm-copy";

/// The sandbox's clocks, in ms since the epoch.
#[derive(Debug, Default)]
pub(super) struct Clocks {
    /// When the TTL stops the sandbox; changed by [`Request::SetTtl`].
    pub(super) ttl_ms: Option<u64>,
    /// When the hard lifetime (`--timeout`) ends it.
    pub(super) hard_ms: Option<u64>,
    /// Since when it is paused, while it is: neither deadline runs.
    pub(super) paused_ms: Option<u64>,
}

/// Whether `req` needs the sandbox's processes (its init serves it, or it
/// signals them): refused while the sandbox is paused, since a frozen init
/// would leave the caller waiting until someone resumes it.
pub(super) fn needs_processes(req: &Request) -> bool {
    matches!(
        req,
        Request::Exec(_)
            | Request::Hold(_)
            | Request::Release
            | Request::File(_)
            | Request::Connect(_)
            | Request::Signal { .. }
    )
}

/// The answer to a request that needs the processes of a paused sandbox.
pub(super) fn refused_paused(shared: &Shared) -> Reply {
    Reply::Refused {
        code: Refusal::Paused,
        message: format!(
            "sandbox {} is paused (its processes are frozen in place); resume it first",
            shared.bus.sandbox()
        ),
        field: None,
        reason: None,
    }
}

/// Since when the sandbox is paused, if it is.
pub(super) fn paused_since(shared: &Shared) -> Option<u64> {
    shared.clocks.lock().ok().and_then(|c| c.paused_ms)
}

fn refused(code: Refusal, message: String) -> Reply {
    Reply::Refused {
        code,
        message,
        field: None,
        reason: None,
    }
}

/// The spec the sandbox was created with, where it has one kept (a named
/// sandbox's): which bind a refusal is about.
fn stored_spec(shared: &Shared) -> Option<warden_policy::SandboxSpec> {
    state::stored_spec(shared.record_path.parent()?)
}

/// Freeze the sandbox, once (`to_disk`: its memory saved to its state and
/// its RAM freed): recorded, audited, its clocks stopped.
pub(super) fn pause(shared: &Arc<Shared>, by: &str, to_disk: bool) -> Reply {
    let Ok(mut clocks) = shared.clocks.lock() else {
        return Reply::Error {
            message: "the supervisor's clocks are unusable".into(),
        };
    };
    let name = shared.bus.sandbox();
    if shared.stopping.load(Ordering::SeqCst) || shared.init_gone.load(Ordering::SeqCst) {
        return refused(
            Refusal::Conflict,
            format!("sandbox {name} is stopping; it cannot be paused"),
        );
    }
    if clocks.paused_ms.is_some() {
        return refused(
            Refusal::Conflict,
            format!("sandbox {name} is paused already"),
        );
    }
    let how = match (to_disk, shared.record_path.parent()) {
        (false, _) => crate::backend::PauseHow::InPlace,
        (true, Some(dir)) => crate::backend::PauseHow::ToDisk(dir.join(VM_PAUSED)),
        (true, None) => {
            return refused(
                Refusal::Unsupported,
                "the sandbox has no state directory to pause it to".into(),
            )
        }
    };
    let freezer = match shared.backend.pause(&shared.held, &how) {
        Ok(kind) => kind,
        Err(e @ crate::backend::BackendError::Unsupported { .. })
        | Err(e @ crate::backend::BackendError::NoFreezer)
        | Err(e @ crate::backend::BackendError::CannotSave(_)) => {
            return refused(Refusal::Unsupported, e.to_string())
        }
        // Its VM not served yet (still booting) or already ended: the
        // sandbox's state, not a fault of the supervisor's.
        Err(e) if e.is_state() => return refused(Refusal::Conflict, e.to_string()),
        Err(e) => {
            return Reply::Error {
                message: warden_jail::chain_str(&e),
            }
        }
    };
    let now = state::now_ms();
    clocks.paused_ms = Some(now);
    // The record is written before the clocks are let go: a caller told
    // "paused already" reads the pause in the record too.
    write_record(shared, Some(now));
    shared.clocks_changed.notify_all();
    drop(clocks);
    shared.bus.emit(EventKind::Paused {
        by: by.to_string(),
        freezer: freezer.to_string(),
    });
    Reply::Ok
}

/// Thaw the sandbox: its deadlines move on by the time it spent paused.
pub(super) fn resume(shared: &Arc<Shared>, by: &str) -> Reply {
    let Ok(mut clocks) = shared.clocks.lock() else {
        return Reply::Error {
            message: "the supervisor's clocks are unusable".into(),
        };
    };
    let Some(since) = clocks.paused_ms else {
        return refused(
            Refusal::Conflict,
            format!("sandbox {} is not paused", shared.bus.sandbox()),
        );
    };
    if let Err(e) = shared.backend.resume(&shared.held) {
        let message = warden_jail::chain_str(&e);
        // A share the restore refused (a bind that became a link or
        // another directory while the VM was on disk): the state of the
        // world, not a fault of the supervisor, with its code and the
        // bind it is about, as a boot says it.
        if let Some(r) = e.refused_share(stored_spec(shared).as_ref()) {
            return Reply::Refused {
                code: Refusal::Conflict,
                message,
                field: None,
                reason: Some(r.to_wire()),
            };
        }
        if e.is_state() {
            return refused(Refusal::Conflict, message);
        }
        return Reply::Error { message };
    }
    let paused = state::now_ms().saturating_sub(since);
    clocks.paused_ms = None;
    clocks.ttl_ms = clocks.ttl_ms.map(|d| d.saturating_add(paused));
    clocks.hard_ms = clocks.hard_ms.map(|d| d.saturating_add(paused));
    let ttl = clocks.ttl_ms;
    write_record(shared, None);
    shared.clocks_changed.notify_all();
    drop(clocks);
    shared.bus.emit(EventKind::Resumed {
        by: by.to_string(),
        paused_ms: paused,
    });
    if ttl.is_some() {
        shared.bus.emit(EventKind::TtlChanged { deadline_ms: ttl });
    }
    Reply::Ok
}

/// Before a stop: a paused sandbox is thawed, so that its init can end
/// its processes (and a v1-frozen task acts on SIGKILL only once thawed).
pub(super) fn thaw_for_stop(shared: &Shared) {
    if let Ok(mut clocks) = shared.clocks.lock() {
        if clocks.paused_ms.take().is_some() {
            shared.backend.thaw_for_stop(&shared.held);
        }
    }
}

/// The supervisor's record with the pause as it is now.
fn write_record(shared: &Shared, paused_ms: Option<u64>) {
    shared.record.update(|r| r.paused_ms = paused_ms);
}

/// Stop the sandbox when its hard lifetime or its TTL ends; both may be
/// moved (the TTL by a request, both by a pause) while this waits, and
/// neither runs while the sandbox is paused. Also gives back the code's
/// pages once the supervisor idles ([`idle::Idle`]).
pub(super) fn watch_clocks(shared: &Arc<Shared>) {
    let Ok(mut clocks) = shared.clocks.lock() else {
        return;
    };
    let mut idle = idle::Idle::default();
    let home = StateHome::now(shared);
    loop {
        if shared.stopping.load(Ordering::SeqCst) || shared.init_gone.load(Ordering::SeqCst) {
            return;
        }
        if home.is_some_and(|h| h.gone(shared)) {
            // `rm -rf` of the state directory (or of the whole state
            // root): no command can reach this sandbox any more, and
            // nothing would ever stop it.
            drop(clocks);
            stop(shared, StopReason::StateRemoved, Duration::ZERO);
            return;
        }
        let now = state::now_ms();
        let mut wait = Duration::from_secs(5);
        if clocks.paused_ms.is_none() {
            if clocks.hard_ms.is_some_and(|d| now >= d) {
                drop(clocks);
                shared.timed_out.store(true, Ordering::SeqCst);
                stop(shared, StopReason::Timeout, Duration::ZERO);
                return;
            }
            if clocks.ttl_ms.is_some_and(|d| now >= d) {
                drop(clocks);
                stop(shared, StopReason::Ttl, TTL_GRACE);
                return;
            }
            for d in [clocks.hard_ms, clocks.ttl_ms].into_iter().flatten() {
                wait = wait.min(Duration::from_millis(d - now));
            }
        }
        // ...and at least every IDLE_AFTER, for the idle supervisor's code.
        clocks = match shared
            .clocks_changed
            .wait_timeout(clocks, wait.min(idle::IDLE_AFTER))
        {
            Ok((c, _)) => c,
            Err(_) => return,
        };
        idle.look(shared);
    }
}

/// The sandbox's state directory as it was when the supervisor started
/// (device and inode): one removed, or replaced by another of the same
/// name, is not this sandbox's any more.
#[derive(Debug, Clone, Copy)]
struct StateHome {
    dev: u64,
    ino: u64,
}

impl StateHome {
    fn now(shared: &Shared) -> Option<StateHome> {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(shared.record_path.parent()?).ok()?;
        Some(StateHome {
            dev: m.dev(),
            ino: m.ino(),
        })
    }

    /// Whether the directory is gone. Only an answer of "no such entry"
    /// counts: any other failure to look (a transient error) stops nothing.
    fn gone(self, shared: &Shared) -> bool {
        use std::os::unix::fs::MetadataExt;
        let Some(dir) = shared.record_path.parent() else {
            return false;
        };
        match std::fs::metadata(dir) {
            Ok(m) => (m.dev(), m.ino()) != (self.dev, self.ino),
            Err(e) => e.kind() == std::io::ErrorKind::NotFound,
        }
    }
}
