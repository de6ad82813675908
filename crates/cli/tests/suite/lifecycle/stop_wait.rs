//! `warden stop` waits for a supervisor as long as it makes progress, and
//! no longer: one that writes back a large home past the grace (here
//! slowed down as a loaded host slows it, by stopping and continuing it)
//! stops with success and every byte of the home kept; one that is stuck
//! (stopped for good) is reported and killed within the grace plus the
//! quiet window, and its sandbox with it; and other commands on a stuck
//! supervisor say so within the hello's wait instead of hanging.

use crate::common::*;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// What the old stop waited at most past its grace before it gave up.
const OLD_MARGIN: Duration = Duration::from_secs(10);
/// The quiet window `warden stop -t 1s` allows (the runtime's
/// `MIN_QUIET`).
const QUIET: Duration = Duration::from_secs(5);

fn signal(pid: i32, sig: i32) {
    // SAFETY: kill with a valid signal on the supervisor this test started.
    unsafe { libc::kill(pid, sig) };
}

/// Running, not a zombie.
fn running(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .and_then(|(_, r)| r.split_whitespace().next().map(str::to_string))
        })
        .is_some_and(|state| state != "Z" && state != "X")
}

#[test]
fn a_stop_that_outlasts_its_grace_while_writing_back_a_home_succeeds_with_all_of_it() {
    let state = TempDir::new("sw-state");
    let ws = TempDir::new("sw-ws");
    ok(&warden(
        state.path(),
        &["create", "sw", "-w", ws.str(), "--disk", "1G"],
    ));
    // 320 MiB in one file and 2000 small ones: about a second of writing
    // back on an idle host.
    ok(&warden(
        state.path(),
        &[
            "exec",
            "sw",
            "--",
            "sh",
            "-c",
            "cd && head -c 4M /dev/urandom > chunk && for i in $(seq 80); do cat chunk; done > big \
             && rm chunk && sha256sum big > big.sum && mkdir many && i=0; \
             while [ $i -lt 2000 ]; do echo $i > many/f$i; i=$((i+1)); done",
        ],
    ));
    let pid = supervisor_pid(state.path(), "sw");
    let t0 = Instant::now();
    let stop = Command::new(warden_bin())
        .args(["stop", "-t", "1s", "sw"])
        .env("WARDEN_STATE_DIR", state.path().join("warden"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // A loaded host: the supervisor runs 40 ms of each second, until past
    // the old bound (the grace and ten seconds).
    let old_bound = Duration::from_secs(1) + OLD_MARGIN;
    let mut outlasted = false;
    while running(pid) && t0.elapsed() < old_bound + Duration::from_secs(2) {
        signal(pid, libc::SIGSTOP);
        std::thread::sleep(Duration::from_millis(960));
        signal(pid, libc::SIGCONT);
        std::thread::sleep(Duration::from_millis(40));
        if t0.elapsed() > old_bound && running(pid) {
            outlasted = true;
        }
    }
    signal(pid, libc::SIGCONT);
    let out = stop.wait_with_output().unwrap();
    let took = t0.elapsed();
    let said = stderr(&out);
    assert!(
        out.status.success(),
        "the stop failed after {took:?}: {said}"
    );
    if outlasted {
        assert!(
            said.contains("sandbox sw is still stopping")
                && said.contains("writing back what the sandbox keeps"),
            "what the stop said while it waited: {said}"
        );
    } else {
        eprintln!(
            "note: the home was written back within the old bound ({took:?}) even slowed down: the wait past it was not exercised on this host"
        );
    }
    assert!(!running(pid), "the supervisor outlived its stop");
    assert!(
        !sandbox_dir(state.path(), "sw")
            .join("layer-unsaved")
            .exists(),
        "the home was not written back whole"
    );
    ok(&warden(state.path(), &["start", "sw"]));
    let back = ok(&warden(
        state.path(),
        &[
            "exec",
            "sw",
            "--",
            "sh",
            "-c",
            "cd && sha256sum -c big.sum && ls many | wc -l && cat many/f1999",
        ],
    ));
    assert!(back.contains("big: OK"), "{back}");
    assert!(back.contains("2000\n1999\n"), "{back}");
    ok(&warden(state.path(), &["stop", "sw"]));
}

#[test]
fn a_stuck_supervisor_is_reported_and_killed_within_the_grace_and_the_quiet_window() {
    let state = TempDir::new("st-state");
    let ws = TempDir::new("st-ws");
    ok(&warden(
        state.path(),
        &["create", "st", "-w", ws.str(), "--disk", "64M"],
    ));
    ok(&warden(
        state.path(),
        &["exec", "st", "--", "sh", "-c", "echo kept > \"$HOME/note\""],
    ));
    let pid = supervisor_pid(state.path(), "st");
    let groups = sandbox_cgroups(state.path(), "st");
    assert!(!groups.is_empty());
    // Stuck: it takes no request and does nothing more.
    signal(pid, libc::SIGSTOP);
    let t0 = Instant::now();
    let out = warden(state.path(), &["stop", "-t", "1s", "st"]);
    let took = t0.elapsed();
    let said = stderr(&out);
    assert!(!out.status.success(), "a stuck supervisor stopped: {said}");
    assert!(
        said.contains("sandbox st did not stop")
            && said.contains("made no progress for 5 s")
            && said.contains("it was killed"),
        "{said}"
    );
    let bound = Duration::from_secs(1) + QUIET + Duration::from_secs(5);
    assert!(took < bound, "reported after {took:?}, past {bound:?}");
    wait_until(
        "the stuck supervisor to be gone",
        Duration::from_secs(10),
        || !running(pid),
    );
    // Its sandbox went with it, and what it held is cleaned.
    for g in &groups {
        assert!(!g.exists(), "{} is left", g.display());
    }
    assert!(!sandbox_dir(state.path(), "st")
        .join("supervisor.json")
        .exists());
    // The sandbox starts again and stops as it should.
    ok(&warden(state.path(), &["start", "st"]));
    ok(&warden(state.path(), &["stop", "st"]));
}

#[test]
fn a_stuck_supervisor_makes_exec_and_pause_say_so_in_bounded_time_instead_of_hanging() {
    let state = TempDir::new("sh-state");
    ok(&warden(state.path(), &["create", "sh", "--start"]));
    let pid = supervisor_pid(state.path(), "sh");
    // Stuck: it takes no request (before, each command below waited for
    // its hello for ever).
    signal(pid, libc::SIGSTOP);
    // Let go and ended if the test fails before its end: a supervisor
    // left stopped would outlive the test.
    struct LetGo(i32);
    impl Drop for LetGo {
        fn drop(&mut self) {
            signal(self.0, libc::SIGCONT);
            signal(self.0, libc::SIGKILL);
        }
    }
    let _let_go = LetGo(pid);
    // Both at once: each waits for the hello on its own connection (the
    // kernel queues both while the supervisor takes none), so the two
    // bounded waits overlap instead of adding up.
    let calls = [&["exec", "sh", "--", "true"][..], &["pause", "sh"][..]];
    let t0 = Instant::now();
    let mut children: Vec<_> = calls
        .iter()
        .map(|args| {
            Command::new(warden_bin())
                .args(*args)
                .env("WARDEN_STATE_DIR", state.path().join("warden"))
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let bound = Duration::from_secs(25);
    while t0.elapsed() < bound && children.iter_mut().any(|c| c.try_wait().unwrap().is_none()) {
        std::thread::sleep(Duration::from_millis(50));
    }
    for (args, mut child) in calls.iter().zip(children) {
        if child.try_wait().unwrap().is_none() {
            let _ = child.kill();
            let _ = child.wait();
            signal(pid, libc::SIGCONT);
            panic!("`warden {}` still waited after {bound:?}", args.join(" "));
        }
        let out = child.wait_with_output().unwrap();
        let said = stderr(&out);
        assert!(!out.status.success(), "{args:?}: {said}");
        assert!(
            said.contains("did not answer") && said.contains("stopped or stuck"),
            "{args:?}: {said}"
        );
    }
    // Let go here: the guard is for a failure above only (its PID is
    // not signalled once the supervisor may have ended).
    std::mem::forget(_let_go);
    signal(pid, libc::SIGCONT);
    ok(&warden(state.path(), &["stop", "sh"]));
}
