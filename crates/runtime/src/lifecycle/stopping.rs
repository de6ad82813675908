//! Waiting for a stop: as long as the supervisor makes progress, and no
//! longer. A supervisor that writes back a large home or layer on a loaded
//! host may take well past the grace to finish; one that is stuck (stopped,
//! deadlocked, blocked for good) must not be waited for without end.
//!
//! The stop is asked until the supervisor takes it: one refused (every
//! connection held) or not answered is never counted as taken, and asked
//! again. One never taken by the end of the grace and the quiet window is
//! killed. Whatever a caller of the sandbox does (its commands holding the
//! supervisor's connections, its calls moving the supervisor's threads),
//! the stop ends the sandbox within the grace and the quiet window.
//!
//! Progress is what can be seen from outside the supervisor without
//! trusting the sandbox or its callers, and only once the stop is taken:
//! the phase its record says it is in, and the kernel's counters of the
//! supervisor's main thread (its CPU time, the bytes and calls of its reads
//! and writes), which does the stopping work: it waits for the init, then
//! writes back the layer and the home. The threads that serve callers
//! (connections, the proxy) are not counted: a caller polling a command
//! moves theirs, never the main thread's. After the grace the sandbox has
//! no process left that could move those counters: its init ends them (or
//! is killed) on the supervisor's own clock, so what moves them then is the
//! supervisor's own work, bounded by what the sandbox keeps (its disk
//! limit). A supervisor that shows none for the quiet window is killed,
//! and what it held is cleaned as for one that died.

use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, TryRecvError};
use std::time::{Duration, Instant};

use super::LifecycleError;
use crate::client::{ClientError, Connection};
use crate::state::{self, StopPhase, SupervisorRecord};
use warden_workspace::Sandbox;

/// The least time without progress after which a supervisor is taken for
/// stuck, whatever the grace: the supervisor's own quiet steps (its init
/// told to end, the kernel's last records collected) take a few seconds.
pub const MIN_QUIET: Duration = Duration::from_secs(5);
/// How long past the grace a stop goes before its caller is told what the
/// supervisor is doing, and how often after that.
const TELL_AFTER: Duration = Duration::from_secs(3);
const TELL_EVERY: Duration = Duration::from_secs(10);
/// How often the supervisor's end is looked for (a stop of a small
/// sandbox takes tens of milliseconds, which a caller should not wait
/// longer than), and how often its progress is.
const POLL: Duration = Duration::from_millis(2);
const SAMPLE: Duration = Duration::from_millis(50);
/// How soon a stop the supervisor did not take is asked again.
const ASK_AGAIN: Duration = Duration::from_millis(100);

/// A stop that takes long, as its caller is told while it waits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stopping {
    /// What the supervisor says it does; `None` before it took the stop.
    pub phase: Option<StopPhase>,
    /// Since the stop was asked.
    pub waited: Duration,
    /// Bytes the supervisor has written since then, where the kernel's
    /// count of them can be read.
    pub written: Option<u64>,
}

/// What is seen of the supervisor at one moment; any change is progress.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Marks {
    phase: Option<StopPhase>,
    /// The main thread's utime + stime, and the reaped children's, in
    /// clock ticks.
    cpu: Option<u64>,
    /// rchar, wchar, syscr, syscw of the main thread's io.
    io: Option<[u64; 4]>,
}

/// What is seen of the supervisor `pid`: its record's phase, and its main
/// thread's counters (a process's main thread has the process's ID).
fn marks(pid: u32, record: &Path) -> Marks {
    let phase = state::read_json::<SupervisorRecord>(record)
        .ok()
        .filter(|r| r.pid == pid)
        .and_then(|r| r.stopping);
    let cpu = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            // Fields after the command name, which may hold spaces and
            // ')': utime, stime, cutime and cstime are the 14th to the
            // 17th of the line.
            let rest = stat.rsplit_once(')')?.1.to_string();
            let f = rest.split_whitespace().skip(11).take(4);
            f.map(|v| v.parse::<u64>().ok()).sum::<Option<u64>>()
        });
    let io = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/io"))
        .ok()
        .and_then(|text| {
            let get = |key: &str| {
                text.lines()
                    .find_map(|l| l.strip_prefix(key))
                    .and_then(|v| v.trim().parse::<u64>().ok())
            };
            Some([
                get("rchar:")?,
                get("wchar:")?,
                get("syscr:")?,
                get("syscw:")?,
            ])
        });
    Marks { phase, cpu, io }
}

/// The supervisor a stop is sent to, as its record names it.
pub(super) struct Target {
    pub pid: u32,
    pub start_ticks: u64,
}

impl Target {
    fn alive(&self) -> bool {
        state::live_ticks(self.pid) == Some(self.start_ticks)
    }
}

/// Ask the supervisor `pid` (on `control`) to stop within `grace`, from a
/// thread of its own, again until it takes the stop or the answers' reader
/// is gone; each answer comes on the channel. A supervisor of another PID
/// on the socket (the target ended, another started) is never asked.
pub(super) fn ask(
    control: PathBuf,
    grace: Duration,
    pid: u32,
) -> Receiver<Result<u32, ClientError>> {
    let (tx, rx) = std::sync::mpsc::channel();
    let _ = std::thread::Builder::new()
        .name("warden-stop".into())
        .spawn(move || loop {
            let asked = Connection::open(&control).and_then(|c| match c.supervisor_pid == pid {
                true => c.stop(grace),
                false => Err(ClientError::Unexpected),
            });
            let taken = asked.is_ok();
            if tx.send(asked).is_err() || taken {
                return;
            }
            std::thread::sleep(ASK_AGAIN);
        });
    rx
}

/// Wait for the supervisor `target` to be gone after a stop of `grace`
/// was asked (its answers come on `asked`), telling `on_wait` how it goes
/// when it takes long. A supervisor that has not taken the stop by the end
/// of the grace and the quiet window (the grace, at least [`MIN_QUIET`]),
/// or that shows no progress for the quiet window once it took it
/// (counted from the grace's end at the earliest), is killed, what it held
/// cleaned, and the stop refused.
pub(super) fn wait(
    sb: &Sandbox,
    target: &Target,
    grace: Duration,
    asked: &Receiver<Result<u32, ClientError>>,
    on_wait: &mut dyn FnMut(&Stopping),
) -> Result<(), LifecycleError> {
    let record = sb.dir().join(state::SUPERVISOR);
    let quiet = grace.max(MIN_QUIET);
    let t0 = Instant::now();
    // The grace is the supervisor's to spend, quiet or not.
    let mut last = t0 + grace;
    let mut next_tell = t0 + grace + TELL_AFTER;
    let mut seen = marks(target.pid, &record);
    let written_before = seen.io.map(|io| io[1]);
    let mut taken = false;
    let mut next_sample = t0 + SAMPLE;
    loop {
        while !taken {
            match asked.try_recv() {
                Ok(Ok(_)) => {
                    taken = true;
                    // Taken late, it has the quiet window from then.
                    last = last.max(Instant::now());
                }
                // It ended on its own meanwhile: stopped all the same.
                Ok(Err(_)) if !target.alive() => return Ok(()),
                // Its socket is gone while its record says it stops: it is
                // on its way out (the socket goes first), and waited for
                // as any.
                Ok(Err(ClientError::NotRunning { .. }))
                    if marks(target.pid, &record).phase.is_some() =>
                {
                    taken = true;
                }
                // Refused (every connection held), not answered, or not
                // asked: not taken, and asked again.
                Ok(Err(_)) => {}
                Err(TryRecvError::Empty) | Err(TryRecvError::Disconnected) => break,
            }
        }
        if !target.alive() {
            return Ok(());
        }
        let now = Instant::now();
        if now < next_sample {
            std::thread::sleep(POLL);
            continue;
        }
        next_sample = now + SAMPLE;
        let m = marks(target.pid, &record);
        // Before the stop is taken nothing is progress: what moves then
        // is the sandbox's and its callers' doing.
        if m != seen && taken {
            last = last.max(now);
        }
        seen = m;
        if now >= last + quiet {
            return Err(killed(sb, target, seen.phase, quiet));
        }
        if now >= next_tell {
            on_wait(&Stopping {
                phase: seen.phase,
                waited: now - t0,
                written: seen
                    .io
                    .zip(written_before)
                    .map(|(io, before)| io[1].saturating_sub(before)),
            });
            next_tell = now + TELL_EVERY;
        }
        std::thread::sleep(POLL);
    }
}

/// Kill a supervisor that made no progress (its sandbox's init dies with
/// it, by its parent-death signal) and clean what it held, as for one that
/// died; the refusal that says so.
fn killed(
    sb: &Sandbox,
    target: &Target,
    phase: Option<StopPhase>,
    quiet: Duration,
) -> LifecycleError {
    // Its start time is checked first: a PID the kernel gave another
    // process since is never signalled.
    if target.alive() {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(target.pid as i32),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while target.alive() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    let left = match super::liveness(sb) {
        super::Liveness::Died { left, .. } => left,
        _ => Vec::new(),
    };
    LifecycleError::DidNotStop(Box::new(super::Stuck {
        name: sb.name().to_string(),
        pid: target.pid,
        phase,
        quiet,
        left,
    }))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_process_that_works_shows_progress_and_a_stopped_one_none() {
        let mut child = std::process::Command::new("sh")
            .args(["-c", "while :; do echo x > /dev/null; done"])
            .spawn()
            .unwrap();
        let pid = child.id();
        let nowhere = Path::new("/nonexistent/supervisor.json");
        let first = marks(pid, nowhere);
        assert!(first.cpu.is_some(), "{first:?}");
        let deadline = Instant::now() + Duration::from_secs(10);
        while marks(pid, nowhere) == first {
            assert!(
                Instant::now() < deadline,
                "a busy process showed no progress"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::Signal::SIGSTOP,
        )
        .unwrap();
        std::thread::sleep(Duration::from_millis(100));
        let stopped = marks(pid, nowhere);
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(marks(pid, nowhere), stopped);
        let _ = child.kill();
        let _ = child.wait();
    }
}
