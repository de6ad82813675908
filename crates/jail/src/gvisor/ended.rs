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
pub(super) fn wait_bounded(child: &mut Child, limit: Duration) -> Option<std::process::ExitStatus> {
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

/// The sandbox's outcome, with the process backend's statuses: runsc
/// answers the first process's status as its own (128 and a logged
/// reason when it could not start it); `Err`: runsc's reason it never
/// ran the sandbox.
pub(super) fn outcome_of(
    ended: Ended,
    status: Option<std::process::ExitStatus>,
    spec: &SandboxSpec,
    runsc: &Runsc,
) -> Result<Outcome, String> {
    use std::os::unix::process::ExitStatusExt;
    if let Ended::NeverRan(why) = ended {
        return Err(why);
    }
    if let Ended::Timeout = ended {
        return Ok(Outcome::timed_out(spec));
    }
    if let Ended::Died = ended {
        // Never the status runsc answered for itself as a program's.
        let why = runsc.last_error().unwrap_or_else(|| match status {
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
