//! The owner's stop against a token that holds its sandbox's supervisor,
//! through the real `warden serve`: a token fills every connection the
//! supervisor serves with background commands (each holds one for as long
//! as it runs), then the owner's `warden stop` and the daemon's DELETE
//! still end the sandbox within the grace and the quiet window, every
//! process of it gone; and a token's commands, in the background or
//! whole, hold places among its long-lived answers, so the ones past its
//! bound are refused (429) with nothing started.
//!
//! The supervisor's bound is lowered to a few connections for the test
//! (`WARDEN_TEST_SUPERVISOR_CONNECTIONS`), so that a handful of commands
//! fill it as 256 would.

use crate::common::daemon::{self, call, call_on, json, Daemon};
use crate::common::*;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The supervisor's bound in these tests.
const BOUND: usize = 6;
/// The quiet window of a stop (the runtime's `MIN_QUIET`).
const QUIET: Duration = Duration::from_secs(5);
/// What a loaded host may add to a stop.
const MARGIN: Duration = Duration::from_secs(4);

/// Whether process `pid` is gone (or a zombie nobody reaped yet).
fn gone(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .and_then(|(_, r)| r.split_whitespace().next().map(str::to_string))
        })
        .is_none_or(|state| state == "Z" || state == "X")
}

/// A daemon with TCP whose supervisors serve [`BOUND`] connections, its
/// configuration holding `config`.
fn daemon_with(tag: &str, config: &str) -> Option<(TempDir, Daemon)> {
    daemon::with_supervisor_bound(tag, config, BOUND, &[])
}

/// A token with exec on the sandboxes it makes, and its running sandbox
/// `name`.
fn tokens_sandbox(d: &Daemon, name: &str) -> String {
    daemon::worker_with_sandbox(d, name, name)
}

/// `argv` started in the background in `sandbox` by `token`: the status
/// and the answer.
fn background(d: &Daemon, token: &str, sandbox: &str, argv: &[&str]) -> (u16, String) {
    let body = serde_json::json!({ "argv": argv, "background": true }).to_string();
    call_on(
        d,
        true,
        "POST",
        &format!("/v1/sandboxes/{sandbox}/exec"),
        Some(&body),
        Some(token),
    )
}

/// The token fills the supervisor of `sandbox`: every connection it
/// serves held by one of its commands (`argv`), and one more refused.
fn fill_the_supervisor(d: &Daemon, token: &str, sandbox: &str, argv: &[&str]) {
    let mut started = 0;
    for _ in 0..BOUND + 2 {
        let (s, b) = background(d, token, sandbox, argv);
        if s == 202 {
            started += 1;
        }
        // Past the supervisor's bound: refused as busy, nothing started.
        assert!(
            s == 202 || (s == 429 && json(&b)["reason"] == "busy"),
            "{s} {b}"
        );
    }
    assert!(
        started >= BOUND,
        "{started} commands held the supervisor's {BOUND} connections"
    );
    wait_until(
        "the token's commands to run",
        Duration::from_secs(10),
        || pids_running(argv).len() >= BOUND,
    );
}

#[test]
fn a_token_holding_every_supervisor_connection_does_not_hold_the_owners_stop() {
    let Some((state, d)) = daemon_with("r12-stop", "sessions:\n  per_token: 64\n") else {
        return;
    };
    let token = tokens_sandbox(&d, "held");
    let argv = ["sleep", "297.5"];
    fill_the_supervisor(&d, &token, "held", &argv);
    let pid = supervisor_pid(state.path(), "held");
    let grace = Duration::from_secs(1);
    let t0 = Instant::now();
    let out = Command::new(warden_bin())
        .args(["stop", "-t", "1s", "held"])
        .env("WARDEN_STATE_DIR", state.path().join("warden"))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let took = t0.elapsed();
    // Before, the stop's connection was turned away like any past the
    // bound, counted as taken, and waited for while the commands'
    // threads moved the supervisor's counters: it ended when the
    // commands did (100 s and more), or never.
    assert!(
        took < grace + QUIET + MARGIN,
        "the owner's stop took {took:?}"
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(gone(pid), "the supervisor outlived the stop");
    wait_until(
        "every process of the sandbox to be gone",
        Duration::from_secs(2),
        || pids_running(&argv).is_empty(),
    );
}

#[test]
fn a_token_holding_every_supervisor_connection_does_not_hold_the_daemons_delete() {
    let Some((state, d)) = daemon_with("r12-delete", "sessions:\n  per_token: 64\n") else {
        return;
    };
    let token = tokens_sandbox(&d, "gone");
    let argv = ["sleep", "296.5"];
    fill_the_supervisor(&d, &token, "gone", &argv);
    let pid = supervisor_pid(state.path(), "gone");
    // The daemon's DELETE stops with a grace of 10 s, whose quiet window
    // is as long.
    let t0 = Instant::now();
    let (s, b) = call(&d, "DELETE", "/v1/sandboxes/gone", None, None);
    let took = t0.elapsed();
    assert_eq!(s, 204, "{b}");
    let grace = Duration::from_secs(10);
    assert!(
        took < grace + grace + MARGIN,
        "the owner's DELETE took {took:?}"
    );
    assert!(gone(pid), "the supervisor outlived the DELETE");
    wait_until(
        "every process of the sandbox to be gone",
        Duration::from_secs(2),
        || pids_running(&argv).is_empty(),
    );
}

#[test]
fn a_tokens_commands_past_its_bound_are_refused_whole_or_in_the_background_with_nothing_started() {
    let Some((state, d)) = daemon_with("r12-lease", "sessions:\n  per_token: 3\n") else {
        return;
    };
    let token = tokens_sandbox(&d, "leased");
    let long = ["sleep", "295.5"];
    for _ in 0..2 {
        let (s, b) = background(&d, &token, "leased", &long);
        assert_eq!(s, 202, "{b}");
    }
    let (s, b) = background(&d, &token, "leased", &["sleep", "2.5"]);
    assert_eq!(s, 202, "{b}");
    // Past the bound: in the background, whole, streamed, all refused
    // before anything starts. Before, only a stream was counted: the
    // background and whole commands started without end.
    let marker = "r12-past-the-bound";
    let past = format!("echo {marker}; sleep 294.5");
    for body in [
        serde_json::json!({ "shell": past, "background": true }),
        serde_json::json!({ "shell": past }),
        serde_json::json!({ "shell": past, "stream": true }),
    ] {
        let (s, b) = call_on(
            &d,
            true,
            "POST",
            "/v1/sandboxes/leased/exec",
            Some(&body.to_string()),
            Some(&token),
        );
        assert_eq!(s, 429, "{body}: {b}");
        let problem = json(&b);
        assert_eq!(problem["code"], "too_many_sessions", "{b}");
        assert_eq!(problem["details"]["bound"], "per_token", "{b}");
    }
    assert!(
        pids_with_marker(marker).is_empty(),
        "a command past the bound was started"
    );
    assert_eq!(pids_running(&long).len(), 2);
    // A command that ends gives its place back.
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let (s, b) = call_on(
            &d,
            true,
            "POST",
            "/v1/sandboxes/leased/exec",
            Some(r#"{"argv":["true"]}"#),
            Some(&token),
        );
        if s == 200 {
            break;
        }
        assert_eq!(s, 429, "{b}");
        assert!(Instant::now() < deadline, "the place never came back: {b}");
        std::thread::sleep(Duration::from_millis(200));
    }
    // The owner is counted by none of it, and its stop is prompt.
    let pid = supervisor_pid(state.path(), "leased");
    let (s, b) = call(&d, "DELETE", "/v1/sandboxes/leased", None, None);
    assert_eq!(s, 204, "{b}");
    assert!(gone(pid));
    assert!(pids_running(&long).is_empty());
}
