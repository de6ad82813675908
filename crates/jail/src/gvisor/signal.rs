//! A signal to one of a gVisor sandbox's later processes, delivered inside
//! the sandbox by its PID there.
//!
//! The host's `runsc exec` client passes on what it can catch, but
//! `SIGKILL` kills only the client: the command ran on inside gVisor,
//! unseen, after its caller had been told it was killed. So the signal goes
//! to the process and every process it started (its tree, as a process
//! group's kill reaches a pipeline's members), through runsc; a kill first
//! stops the tree until no new member appears (a stopped process forks no
//! more), then kills every member and waits until they are gone. The
//! process is the shim that holds its command in a PID namespace of its
//! own (`hold`): every process the command started, however it detached
//! itself, is a descendant of the namespace's init, so in the tree, and
//! the init's death ends the namespace whatever the walk missed.

use super::runsc::Runsc;
use std::time::{Duration, Instant};

/// How many rounds of stopping a tree may take before it is killed as found.
const ROUNDS: usize = 8;
/// How long a killed tree may take to be gone.
const GONE_LIMIT: Duration = Duration::from_secs(5);

/// Deliver `signal` (its number) to `pid` inside the sandbox and to the
/// processes it started. Returns whether it reached the process (false:
/// runsc could not say which processes run, or refused the signal).
pub(super) fn deliver(runsc: &Runsc, pid: i32, signal: i32) -> bool {
    let Ok(sig) = nix::sys::signal::Signal::try_from(signal) else {
        return false;
    };
    if sig != nix::sys::signal::Signal::SIGKILL {
        let Some(tree) = tree(runsc, pid) else {
            return false;
        };
        let name = sig.as_str().trim_start_matches("SIG");
        // The process itself first: it may be all there is.
        let reached = tree
            .iter()
            .filter(|p| runsc.kill_pid(**p, name).is_ok())
            .count();
        return reached > 0;
    }
    let mut stopped: Vec<i32> = Vec::new();
    for _ in 0..ROUNDS {
        let Some(now) = tree(runsc, pid) else { break };
        let fresh: Vec<i32> = now.into_iter().filter(|p| !stopped.contains(p)).collect();
        if fresh.is_empty() {
            break;
        }
        for p in fresh {
            let _ = runsc.kill_pid(p, "STOP");
            stopped.push(p);
        }
    }
    if stopped.is_empty() {
        return false;
    }
    for p in &stopped {
        let _ = runsc.kill_pid(*p, "KILL");
    }
    // Confirmed: none of them runs any more.
    let start = Instant::now();
    while start.elapsed() < GONE_LIMIT {
        match runsc.processes() {
            Some(all) if all.iter().any(|(p, _)| stopped.contains(p)) => {
                std::thread::sleep(Duration::from_millis(50));
            }
            _ => return true,
        }
    }
    false
}

/// `pid` and its descendants, parents before children; `None` when runsc
/// cannot list the sandbox's processes.
fn tree(runsc: &Runsc, pid: i32) -> Option<Vec<i32>> {
    let all = runsc.processes()?;
    if !all.iter().any(|(p, _)| *p == pid) {
        return Some(Vec::new());
    }
    let mut out = vec![pid];
    let mut i = 0;
    while i < out.len() {
        let parent = out[i];
        out.extend(
            all.iter()
                .filter(|(p, pp)| *pp == parent && !out.contains(p))
                .map(|(p, _)| *p)
                .collect::<Vec<_>>(),
        );
        i += 1;
    }
    Some(out)
}
