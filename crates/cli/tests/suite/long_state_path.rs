//! A state directory whose path is longer than a Unix socket's address
//! holds (108 bytes with the NUL), as a pytest-xdist worker's temporary
//! directory or a long home makes it: a sandbox's control socket and the
//! daemon's socket live there, and every verb still works.

use crate::common::daemon::*;
use crate::common::*;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

/// A state root (the tests' `state`, whose `warden` is the state
/// directory) whose control sockets' paths pass 200 bytes.
fn deep_state(top: &TempDir) -> PathBuf {
    let mut dir = top.path().to_path_buf();
    while dir
        .join("warden/sandboxes/x/control.sock")
        .as_os_str()
        .len()
        < 230
    {
        dir.push("a-long-directory-name-as-temporary-ones-are");
    }
    std::fs::create_dir_all(&dir).unwrap();
    let sock = dir.join("warden/daemon.sock");
    assert!(sock.as_os_str().len() > 200, "{}", sock.display());
    dir
}

#[test]
fn a_named_sandbox_under_a_state_path_past_a_sockets_limit_starts_runs_and_stops() {
    let top = TempDir::new("long-state");
    let state = deep_state(&top);
    ok(&warden(&state, &["create", "deep"]));
    ok(&warden(&state, &["start", "deep"]));
    let control = sandbox_dir(&state, "deep").join("control.sock");
    assert!(control.as_os_str().len() > 200);
    assert!(
        control.exists(),
        "no control socket at {}",
        control.display()
    );
    let out = warden(&state, &["exec", "deep", "--", "echo", "reached"]);
    assert_eq!(ok(&out), "reached\n");
    let listed = ok(&warden(&state, &["ls"]));
    assert!(listed.contains("deep"), "{listed}");
    ok(&warden(&state, &["stop", "--time", "2s", "deep"]));
    ok(&warden(&state, &["start", "deep"]));
    assert_eq!(
        ok(&warden(&state, &["exec", "deep", "--", "echo", "again"])),
        "again\n"
    );
    ok(&warden(&state, &["stop", "--time", "2s", "deep"]));
    ok(&warden(&state, &["rm", "deep"]));
    // A run is its own supervisor under the same state.
    let out = warden(&state, &["run", "--", "echo", "once"]);
    assert_eq!(ok(&out), "once\n");
}

#[test]
fn the_daemon_under_a_state_path_past_a_sockets_limit_serves_sandboxes_made_over_http() {
    let top = TempDir::new("long-daemon");
    let state = deep_state(&top);
    let daemon = Daemon::start(&state, false);
    assert!(daemon.socket.exists());
    // The CLI speaks HTTP to the daemon on its own socket, whose path is
    // past the limit too (`--host unix` is the state's daemon.sock).
    let host = |args: &[&str]| -> Output {
        Command::new(warden_bin())
            .args(["--host", "unix"])
            .args(args)
            .env("WARDEN_STATE_DIR", state.join("warden"))
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    ok(&host(&["create", "over-http", "--start"]));
    let out = host(&["exec", "over-http", "--", "echo", "through the daemon"]);
    assert_eq!(ok(&out), "through the daemon\n");
    // The same socket named by its whole path.
    let whole = format!("unix:{}", daemon.socket.display());
    let out = Command::new(warden_bin())
        .args(["--host", &whole, "ls"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(ok(&out).contains("over-http"));
    let out = host(&["run", "--", "echo", "a run"]);
    assert_eq!(ok(&out), "a run\n");
    ok(&host(&["stop", "--time", "1s", "over-http"]));
    ok(&host(&["rm", "over-http"]));
}
