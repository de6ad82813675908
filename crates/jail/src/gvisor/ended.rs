//! How a gVisor sandbox ended: waiting for `runsc run` (bounded by the
//! sandbox's timeout) and its status in the process backend's terms.

use super::runsc::Runsc;
use crate::Outcome;
use std::process::Child;
use std::time::{Duration, Instant};
use warden_audit::ExitReason;
use warden_policy::SandboxSpec;

/// How the sandbox's first process (or its service) ended.
pub(super) enum Ended {
    Exited,
    Timeout,
    /// Never running: runsc's reason.
    NeverRan(String),
    /// A long-lived sandbox ended unasked: runsc (gVisor's kernel) died.
    Died,
}

pub(super) fn wait_first(first: &mut Child, deadline: Option<Instant>) -> Ended {
    loop {
        match first.try_wait() {
            Ok(Some(_)) | Err(_) => return Ended::Exited,
            Ok(None) if deadline.is_some_and(|d| Instant::now() >= d) => return Ended::Timeout,
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

/// Wait up to `limit` for `child`, then kill it; its status.
fn wait_bounded(child: &mut Child, limit: Duration) -> Option<std::process::ExitStatus> {
    let start = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(s)) => return Some(s),
            Ok(None) if start.elapsed() < limit => std::thread::sleep(Duration::from_millis(20)),
            _ => {
                let _ = child.kill();
                return child.wait().ok();
            }
        }
    }
}

/// Every process of runsc killed and its container deleted: how `runsc
/// run` ended, and why runsc died under a one-shot command if it did
/// ([`one_shot_death`]).
pub(super) fn end_runsc(
    runsc: &Runsc,
    first: &mut Child,
    exits: Option<super::exits::ExitWatch>,
    cgroup: Option<&crate::cgroup::Cgroup>,
) -> (Option<std::process::ExitStatus>, Option<String>) {
    let _ = runsc.kill_all("KILL");
    let status = wait_bounded(first, Duration::from_secs(10));
    let died = one_shot_death(exits, super::limits::task_bound_hit(cgroup), status);
    let _ = runsc.delete();
    (status, died)
}

/// Why a one-shot sandbox's runsc died under its command, if it did:
/// its sandbox process (gVisor's kernel) ended by a signal (see
/// `exits`), or crashed at the cgroup's bound on host tasks. `runsc run`
/// answers either as the command's status.
fn one_shot_death(
    exits: Option<super::exits::ExitWatch>,
    bound_hit: bool,
    status: Option<std::process::ExitStatus>,
) -> Option<String> {
    let end = exits.and_then(|e| e.sandbox_end(Duration::from_secs(5)));
    if let Some(raw) = end.filter(|r| libc::WIFSIGNALED(*r)) {
        let signal = nix::sys::signal::Signal::try_from(libc::WTERMSIG(raw)).map_or_else(
            |_| libc::WTERMSIG(raw).to_string(),
            |s| s.as_str().to_string(),
        );
        return Some(format!("its sandbox process was killed by {signal}"));
    }
    // The Go runtime's own failure (2) when a thread could not be made.
    (bound_hit && status.and_then(|s| s.code()) == Some(2))
        .then(|| "its sandbox process reached its bound on host tasks and crashed".into())
}

/// The sandbox's outcome, with the process backend's statuses: runsc
/// answers the first process's status as its own (128 and a logged
/// reason when it could not start it); `Err`: runsc's reason it never
/// ran the sandbox. `died`: why runsc died under a one-shot command
/// ([`one_shot_death`]), never the command's status then.
pub(super) fn outcome_of(
    ended: Ended,
    status: Option<std::process::ExitStatus>,
    spec: &SandboxSpec,
    runsc: &Runsc,
    died: Option<String>,
) -> Result<Outcome, String> {
    use std::os::unix::process::ExitStatusExt;
    if let Ended::NeverRan(why) = ended {
        return Err(why);
    }
    if let Ended::Timeout = ended {
        return Ok(Outcome::timed_out(spec));
    }
    if matches!(ended, Ended::Died) || died.is_some() {
        // Never the status runsc answered for itself as a program's.
        let why = died
            .or_else(|| runsc.last_error())
            .unwrap_or_else(|| match status {
                Some(s) => format!("runsc ended on its own ({s})"),
                None => "runsc ended on its own".into(),
            });
        return Ok(Outcome {
            status: 255,
            reason: ExitReason::SetupFailed,
            signal: None,
            message: Some(format!("gVisor's sandbox died: {why}")),
        });
    }
    let code = status.and_then(|s| s.code().or(s.signal().map(|g| 128 + g)));
    if code == Some(128) {
        if let Some(why) = runsc.last_error() {
            let (status, what) = if why.contains("no such file") {
                (127, "command not found in the sandbox".to_string())
            } else if why.contains("failed to load") || why.contains("permission denied") {
                (126, format!("cannot execute ({why})"))
            } else {
                return Err(why);
            };
            return Ok(Outcome::not_started(spec, status, &what));
        }
    }
    Ok(match code {
        Some(c) => Outcome::ended(c),
        None => Outcome {
            status: 255,
            reason: ExitReason::Exited,
            signal: None,
            message: Some("runsc ended without a status".into()),
        },
    })
}
