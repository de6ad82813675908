//! How a sandbox ended, as an exit status and a line for the person.

use super::JailError;
use crate::report::Report;
use nix::errno::Errno;
use std::time::Duration;
use warden_audit::ExitReason;
use warden_policy::SandboxSpec;

/// How the sandbox ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// The status warden exits with (see the exit-status conventions).
    pub status: i32,
    pub reason: ExitReason,
    pub signal: Option<i32>,
    /// A line for the person, printed on stderr by the front door.
    pub message: Option<String>,
}

impl Outcome {
    /// Killed at the sandbox's `resources.timeout`: 124, whatever the
    /// backend.
    pub fn timed_out(spec: &SandboxSpec) -> Outcome {
        let t = spec.resources.timeout.unwrap_or_default();
        Outcome {
            status: 124,
            reason: ExitReason::Timeout,
            signal: None,
            message: Some(format!(
                "the sandbox reached its `resources.timeout` of {} and was killed",
                humanize(t)
            )),
        }
    }

    /// The command could not be started: `status` 127 when it was not
    /// found, 126 when it could not be executed; `what` says which.
    pub fn not_started(spec: &SandboxSpec, status: i32, what: &str) -> Outcome {
        let cmd = spec.command.first().map(String::as_str).unwrap_or_default();
        Outcome {
            status,
            reason: ExitReason::ExecFailed,
            signal: None,
            message: Some(format!("{cmd}: {what}")),
        }
    }

    /// The command's own end, as a shell reports it: `status`, where
    /// 128+N is the signal N.
    pub fn ended(status: i32) -> Outcome {
        match status {
            c if c > 128 && c <= 128 + 64 => Outcome::signaled(c - 128),
            c => Outcome {
                status: c,
                reason: ExitReason::Exited,
                signal: None,
                message: None,
            },
        }
    }

    /// The command was killed by signal `sig`: 128+`sig`.
    pub fn signaled(sig: i32) -> Outcome {
        Outcome {
            status: 128 + sig,
            reason: ExitReason::Signaled,
            signal: Some(sig),
            message: None,
        }
    }

    /// The sandbox's `exited` event, whichever backend ran it: its status,
    /// how long since `start`, and its resource peaks.
    pub fn record(
        &self,
        events: &mut dyn warden_audit::EventSink,
        id: &str,
        start: std::time::Instant,
        peaks: warden_audit::ResourcePeaks,
    ) {
        events.emit(&warden_audit::Event::now(
            id,
            warden_audit::EventKind::Exited {
                status: self.status,
                reason: self.reason,
                signal: self.signal,
                duration_ms: start.elapsed().as_millis() as u64,
                peaks,
            },
        ));
    }
}

pub(super) fn outcome_from(
    reports: &[Report],
    timed_out: bool,
    oom_kills: u64,
    spec: &SandboxSpec,
    init_status: Option<i32>,
) -> Result<Outcome, JailError> {
    if timed_out {
        return Ok(Outcome::timed_out(spec));
    }
    for r in reports {
        if let Report::SetupFailed(m) = r {
            return Err(JailError::Setup(m.clone()));
        }
    }
    if let Some(errno) = reports.iter().find_map(|r| match r {
        Report::ExecFailed(e) => Some(*e),
        _ => None,
    }) {
        let (status, what) = if errno == libc::ENOENT {
            (127, "command not found in the sandbox".to_string())
        } else if errno == libc::EACCES && !spec.allow_exec.is_empty() {
            (
                126,
                "refused by the exec allowlist (`process.allow_exec`): not a program the sandbox may execute".to_string(),
            )
        } else {
            (
                126,
                format!("cannot execute: {}", Errno::from_raw(errno).desc()),
            )
        };
        return Ok(Outcome::not_started(spec, status, &what));
    }
    let memory = spec.resources.memory.value;
    for r in reports {
        match r {
            Report::Exited(code) if *code == 128 + libc::SIGKILL && oom_kills > 0 => {
                // A shell reports its child's OOM kill as 137.
                return Ok(Outcome {
                    status: *code,
                    reason: ExitReason::OutOfMemory,
                    signal: None,
                    message: Some(format!(
                        "the command exceeded the sandbox's memory limit of {} and was killed",
                        bytes(memory)
                    )),
                });
            }
            Report::Exited(code) => {
                return Ok(Outcome {
                    status: *code,
                    reason: ExitReason::Exited,
                    signal: None,
                    message: (oom_kills > 0).then(|| {
                        format!(
                        "a process of the sandbox was killed for exceeding the memory limit of {}",
                        bytes(memory)
                    )
                    }),
                })
            }
            Report::Signaled(sig) => {
                if *sig == libc::SIGKILL && oom_kills > 0 {
                    return Ok(Outcome {
                        status: 137,
                        reason: ExitReason::OutOfMemory,
                        signal: Some(*sig),
                        message: Some(format!(
                            "the command exceeded the sandbox's memory limit of {} and was killed",
                            bytes(memory)
                        )),
                    });
                }
                return Ok(Outcome::signaled(*sig));
            }
            _ => {}
        }
    }
    if oom_kills > 0 {
        return Ok(Outcome {
            status: 137,
            reason: ExitReason::OutOfMemory,
            signal: Some(libc::SIGKILL),
            message: Some(format!(
                "the sandbox exceeded its memory limit of {} and was killed",
                bytes(memory)
            )),
        });
    }
    Err(JailError::InitDied(match init_status {
        Some(s) if s < 0 => format!("killed by signal {}", -s),
        Some(s) => format!("exit status {s}"),
        None => "unknown status".into(),
    }))
}

pub(super) fn humanize(d: Duration) -> String {
    let ms = d.as_millis();
    if !ms.is_multiple_of(1000) {
        format!("{ms}ms")
    } else {
        format!("{}s", ms / 1000)
    }
}

pub(super) fn bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "K", "M", "G", "T"];
    let mut v = b;
    let mut i = 0;
    while v >= 1024 && v.is_multiple_of(1024) && i < UNITS.len() - 1 {
        v /= 1024;
        i += 1;
    }
    format!("{v}{}", UNITS[i])
}
