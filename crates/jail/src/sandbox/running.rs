//! The last stage: the sandbox runs. The supervisor relays its terminal
//! and signals and enforces the deadline (see [`Supervision`]) until every
//! process of it is gone, then saves its running layer, removes its cgroup
//! and says how it ended.

use super::outcome::outcome_from;
use super::start::Started;
use super::supervision::Supervision;
use super::{sys_err, Attach, JailError, Mode, Outcome};
use crate::error::chain_str;
use crate::pty::RawMode;
use crate::report::{parse_reports, Report};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use warden_audit::{Event, EventKind, EventSink, ResourcePeaks};
use warden_policy::SandboxSpec;

/// Supervise the started sandbox until it is gone; its outcome, recorded.
pub(super) fn supervise(
    started: Started,
    spec: &SandboxSpec,
    id: &str,
    events: &mut dyn EventSink,
    attach: &mut dyn Attach,
) -> Result<Outcome, JailError> {
    // The mask is restored last (bindings drop in reverse order), after
    // the guard has reaped whatever is left.
    let Started {
        signals,
        mode,
        child,
        mut guard,
        mounts,
        start,
        private_tmp,
        rep_rd,
        master,
        desk,
        layer,
        send_error,
        refusals,
        exec_records,
    } = started;
    let raw = if master.is_some() {
        RawMode::enable()?
    } else {
        RawMode::keep()
    };
    let sfd = SignalFd::with_flags(
        &signals.handled,
        SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK,
    )
    .map_err(sys_err("create a signal descriptor"))?;
    let deadline = spec.resources.timeout.map(|t| start + t);
    // Never blocked by the sandbox: a command that does not read its
    // terminal must not stop this loop (and with it the deadline).
    if let Some(m) = &master {
        let _ = nix::fcntl::fcntl(
            m,
            nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK),
        );
    }
    let mut sv = Supervision {
        child,
        rep_rd: Some(rep_rd),
        reports: Vec::new(),
        master,
        stdin_open: true,
        pending_in: Vec::new(),
        timed_out: false,
        wait_status: None,
        usage: None,
        degraded: mode == Mode::Degraded,
        desk,
        refusals,
        exec_records,
    };
    let supervised = sv.run(&sfd, deadline, &guard, &mut |kind| {
        events.emit(&Event::now(id, kind))
    });
    // Refusals the judge and the kernel recorded just before the end.
    if let Some(r) = sv.exec_records.as_mut() {
        for kind in r.drain().0 {
            events.emit(&Event::now(id, kind));
        }
    }
    if let Some(w) = sv.refusals.as_mut() {
        for r in w.settle(id, std::time::Duration::from_secs(1)) {
            if let Some(kind) = super::supervision::refusal_event(r) {
                events.emit(&Event::now(id, kind));
            }
        }
    }
    let saved = layer.map(|(fd, save)| {
        // Asked only where there is a volume or a cache to fence.
        let merges = !(save.volumes.is_empty() && save.caches.is_empty());
        let fence = merges.then(|| attach.fence()).flatten();
        crate::kept::save(&fd, &save, fence.as_deref())
            .map(|merged| (merged, save.limit))
            .map_err(|source| JailError::LayerSave {
                saved: save.place(),
                source,
            })
    });
    supervised?;
    crate::phase("reaped");
    drop(raw);
    guard.reaped = true;
    // Every process of the sandbox is reaped: its mounts are nobody's.
    if let Some(m) = mounts {
        m.let_go();
    }
    drop(private_tmp);

    attach.stopping();
    let stats = guard.cgroup.as_ref().map(|c| c.stats());
    let oom_kills = stats.as_ref().and_then(|s| s.oom_kills).unwrap_or(0);
    let (rusage_rss, rusage_user, rusage_sys) = sv.rusage();
    let peaks = ResourcePeaks {
        max_rss_bytes: stats.as_ref().and_then(|s| s.memory_peak).or(rusage_rss),
        cpu_user_ms: stats.as_ref().and_then(|s| s.cpu_user_ms).or(rusage_user),
        cpu_system_ms: stats.as_ref().and_then(|s| s.cpu_system_ms).or(rusage_sys),
        oom_kills: stats.as_ref().and_then(|s| s.oom_kills),
    };
    if let Some(cg) = guard.cgroup.take() {
        if let Err(e) = cg.remove() {
            tracing::warn!("{}", chain_str(&e));
        }
    }

    crate::phase("cgroup-removed");
    match saved {
        Some(Err(e)) => return Err(e),
        Some(Ok((merged, limit_bytes))) => {
            for held in merged.held_back {
                events.emit(&Event::now(
                    id,
                    EventKind::VolumeHeldBack {
                        volume: held.volume,
                        reason: held.reason,
                        entries: held.entries,
                        paths: held.paths,
                        kept: held.kept,
                    },
                ));
            }
            if merged.left_out > 0 {
                events.emit(&Event::now(
                    id,
                    EventKind::CacheLeftOut {
                        files: merged.left_out,
                        limit_bytes,
                    },
                ));
            }
        }
        None => {}
    }
    let reports = parse_reports(&sv.reports);
    if let Some(e) = send_error {
        if !reports.iter().any(|r| matches!(r, Report::SetupFailed(_))) {
            return Err(e);
        }
    }
    let outcome = outcome_from(&reports, sv.timed_out, oom_kills, spec, sv.wait_status)?;
    outcome.record(events, id, start, peaks);
    Ok(outcome)
}
