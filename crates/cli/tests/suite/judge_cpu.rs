//! The supervisor's judge of a sandbox's calls is held to the sandbox's
//! own CPU limit. Every `chmod` with a group or other bit is a seccomp
//! user notification the supervisor judges and makes, on the host,
//! outside the sandbox's cgroup: eight loops of them under `--cpus 0.05`
//! made the supervisor spend 28 % of a core (6-7 times the sandbox's
//! limit, and up to a core). The sandbox runs the loops for real; the
//! supervisor's CPU time is read from `/proc` while they run, over a
//! window that opens when the loops say they have begun and closes when
//! the test ends them (closing their standard input), not after fixed
//! waits.

use crate::common::*;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Eight processes calling `chmod` on files of their own, each printing
/// how many pairs of calls it made every 200 pairs, until the standard
/// input closes: then all of them end and the run with them.
const LOOPS: &str = r#"
import os, signal, sys
kids = []
for i in range(8):
    pid = os.fork()
    if pid == 0:
        p = '/tmp/f%d' % i
        open(p, 'w').close()
        n = 0
        while True:
            os.chmod(p, 0o644)
            os.chmod(p, 0o600)
            n += 1
            if n % 200 == 0:
                print(n, flush=True)
    kids.append(pid)
sys.stdin.read()
for pid in kids:
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
"#;

/// How long the supervisor's CPU time is watched. Before the judge was
/// paced these loops made it spend 2.43 s of CPU in 10 s (1.5 s in this
/// window, twice the bound below); paced, about the sandbox's share.
const WINDOW: Duration = Duration::from_secs(6);

/// The CPU time of process `pid`, all its threads (utime + stime).
fn cpu_of(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command's name, which ends at the last ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split(' ').collect();
    let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    // In clock ticks of USER_HZ, 100 on every Linux this runs on.
    Some(Duration::from_millis(ticks * 10))
}

#[test]
fn a_sandbox_limited_to_five_percent_of_a_core_cannot_make_its_supervisor_spend_more() {
    if !is_root() {
        skip("a CPU limit needs cgroups, which these tests set up as root");
        return;
    }
    if !std::path::Path::new("/usr/bin/python3").exists() {
        skip("/usr/bin/python3 is not installed (the sandbox's loops need it)");
        return;
    }
    let state = TempDir::new("judge-cpu");
    // The timeout only bounds a run whose loops never began or never
    // ended; the test ends the loops itself.
    let mut child = Command::new(warden_bin())
        .args(["run", "--no-tty", "--cpus", "0.05", "--timeout", "120s"])
        .args(["--", "python3", "-c", LOOPS])
        .env("WARDEN_STATE_DIR", state.path().join("warden"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let stdin = child.stdin.take().unwrap();
    let (begun_tx, begun) = std::sync::mpsc::channel();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let reader = std::thread::spawn(move || {
        let mut printed = String::new();
        let mut line = String::new();
        while out.read_line(&mut line).is_ok_and(|n| n > 0) {
            if printed.is_empty() {
                let _ = begun_tx.send(());
            }
            printed.push_str(&line);
            line.clear();
        }
        printed
    });
    // The start and the loops' own start (python under 5 % of a core):
    // the window opens at the loops' first count.
    let started = begun.recv_timeout(Duration::from_secs(60)).is_ok();
    let (t0, c0) = (Instant::now(), cpu_of(pid));
    if started {
        std::thread::sleep(WINDOW);
    }
    let (wall, c1) = (t0.elapsed(), cpu_of(pid));
    // End of input: the loops are killed and the run ends.
    drop(stdin);
    let waited = child.wait_with_output().unwrap();
    let printed = reader.join().unwrap();
    assert!(
        started,
        "the loops never began: {printed:?} {}",
        String::from_utf8_lossy(&waited.stderr)
    );
    let (Some(c0), Some(c1)) = (c0, c1) else {
        panic!(
            "the run ended early: {}",
            String::from_utf8_lossy(&waited.stderr)
        );
    };
    assert!(
        waited.status.success(),
        "the run did not end when its input closed: {:?} {}",
        waited.status,
        String::from_utf8_lossy(&waited.stderr)
    );
    let calls: u64 = printed
        .lines()
        .filter_map(|l| l.trim().parse::<u64>().ok())
        .max()
        .unwrap_or(0);
    assert!(
        calls > 0,
        "the sandbox's chmods went through: {printed:?} {}",
        String::from_utf8_lossy(&waited.stderr)
    );
    let used = c1.saturating_sub(c0);
    // The sandbox's own share over the window is 0.3 s: the supervisor
    // may spend about as much on its calls (plus a burst and its own
    // idle work), never several times more.
    let limit = wall.mul_f64(0.05);
    eprintln!("the supervisor spent {used:?} of CPU in {wall:?}; {calls} pairs of calls");
    assert!(
        used < limit * 3,
        "the supervisor spent {used:?} of CPU in {wall:?} for a sandbox allowed {limit:?}"
    );
}
