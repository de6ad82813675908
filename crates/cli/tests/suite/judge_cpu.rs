//! The supervisor's judge of a sandbox's calls is held to the sandbox's
//! own CPU limit. Every `chmod` with a group or other bit is a seccomp
//! user notification the supervisor judges and makes, on the host,
//! outside the sandbox's cgroup: eight loops of them under `--cpus 0.05`
//! made the supervisor spend 28 % of a core (6-7 times the sandbox's
//! limit, and up to a core). The sandbox runs the loops for real; the
//! supervisor's CPU time is read from `/proc` while they run.

use crate::common::*;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Eight processes calling `chmod` on files of their own until killed,
/// each printing how many pairs of calls it made every second.
const LOOPS: &str = r#"
import os, sys, time
for i in range(8):
    if os.fork() == 0:
        p = '/tmp/f%d' % i
        open(p, 'w').close()
        n = 0
        while True:
            os.chmod(p, 0o644)
            os.chmod(p, 0o600)
            n += 1
            if n % 200 == 0:
                print(n, flush=True)
os.wait()
"#;

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
    let mut child = Command::new(warden_bin())
        .args(["run", "--no-tty", "--cpus", "0.05", "--timeout", "17s"])
        .args(["--", "python3", "-c", LOOPS])
        .env("WARDEN_STATE_DIR", state.path().join("warden"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let mut out = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut buf = String::new();
        let _ = std::io::Read::read_to_string(&mut out, &mut buf);
        buf
    });
    // The start and the loops' own start (python under 5 % of a core).
    std::thread::sleep(Duration::from_secs(5));
    let (t0, c0) = (Instant::now(), cpu_of(pid));
    std::thread::sleep(Duration::from_secs(10));
    let (wall, c1) = (t0.elapsed(), cpu_of(pid));
    // The run ends at its timeout, the sandbox with it.
    let waited = child.wait_with_output().unwrap();
    let printed = reader.join().unwrap();
    let (Some(c0), Some(c1)) = (c0, c1) else {
        panic!(
            "the run ended early: {}",
            String::from_utf8_lossy(&waited.stderr)
        );
    };
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
    // The sandbox's own share over the window is 0.5 s: the supervisor
    // may spend about as much on its calls (plus a burst and its own
    // idle work), never several times more.
    let limit = wall.mul_f64(0.05);
    assert!(
        used < limit * 3,
        "the supervisor spent {used:?} of CPU in {wall:?} for a sandbox allowed {limit:?}"
    );
}
