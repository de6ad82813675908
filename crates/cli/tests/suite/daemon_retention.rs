//! How long the daemon keeps the sandboxes it made once they stopped,
//! through the real `warden serve` and its configuration file: a stopped
//! sandbox the API made is removed (its record and its files) once its
//! period has passed; a running one, one the owner made with the CLI in
//! the same state directory, and one whose period is `never` are kept.

use crate::common::daemon::{call, curl_available, json, Daemon};
use crate::common::*;
use std::time::Duration;

fn listed(d: &Daemon) -> Vec<String> {
    let (s, b) = call(d, "GET", "/v1/sandboxes", None, None);
    assert_eq!(s, 200, "{b}");
    json(&b)["sandboxes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn a_stopped_sandbox_the_api_made_is_removed_after_its_retention_and_nothing_else_is() {
    if !curl_available() {
        skip("curl is not installed");
        return;
    }
    let state = TempDir::new("daemon-retention");
    let file = state.path().join("daemon.yaml");
    std::fs::write(&file, "retention: {stopped: 3s, paused: never}\n").unwrap();
    // The owner's own sandbox, made with the CLI: never the daemon's to
    // sweep.
    ok(&warden(state.path(), &["create", "owners"]));
    let d = Daemon::start_with(
        state.path(),
        false,
        &["--config", file.to_str().unwrap()],
        &[],
    );
    for (name, start) in [("idle", false), ("busy", true)] {
        let body = format!(r#"{{"name":"{name}","start":{start}}}"#);
        let (s, b) = call(&d, "POST", "/v1/sandboxes", Some(&body), None);
        assert!(s == 201 || s == 200, "{s} {b}");
    }
    let dir = |n: &str| state.path().join("warden/sandboxes").join(n);
    assert!(
        dir("idle").exists(),
        "the store keeps sandboxes under sandboxes/"
    );
    wait_until(
        "the stopped sandbox is removed",
        Duration::from_secs(30),
        || !listed(&d).contains(&"idle".to_string()),
    );
    assert!(!dir("idle").exists(), "its files went with its record");
    let left = listed(&d);
    assert!(left.contains(&"busy".to_string()), "{left:?}");
    let (s, b) = call(&d, "GET", "/v1/sandboxes/busy", None, None);
    assert_eq!(
        (s, json(&b)["state"].as_str()),
        (200, Some("running")),
        "{b}"
    );
    assert!(stdout(&warden(state.path(), &["ls"])).contains("owners"));
    let (s, _) = call(&d, "DELETE", "/v1/sandboxes/busy", None, None);
    assert_eq!(s, 204);
}

#[test]
fn a_retention_that_is_not_a_period_stops_the_daemon_from_starting_with_where_it_is() {
    let state = TempDir::new("daemon-retention-bad");
    let file = state.path().join("daemon.yaml");
    std::fs::write(&file, "retention:\n  stopped: soon\n").unwrap();
    let out = warden(state.path(), &["serve", "--config", file.to_str().unwrap()]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains("daemon.yaml") && err.contains("\"soon\" is not a period"),
        "{err}"
    );
}

/// A record of the daemon's names the sandbox it made, not a later one
/// the owner made under the same name with the CLI; and a sandbox used
/// (started and stopped) between two sweeps starts its period over.
#[test]
fn retention_sweeps_only_the_sandbox_it_made_and_counts_from_its_last_use() {
    if !curl_available() {
        skip("curl is not installed");
        return;
    }
    let state = TempDir::new("daemon-retention-reuse");
    let file = state.path().join("daemon.yaml");
    std::fs::write(&file, "retention: {stopped: 4s, paused: never}\n").unwrap();
    let d = Daemon::start_with(
        state.path(),
        false,
        &["--config", file.to_str().unwrap()],
        &[],
    );
    for name in ["reused", "burst"] {
        let body = format!(r#"{{"name":"{name}","start":false}}"#);
        let (s, b) = call(&d, "POST", "/v1/sandboxes", Some(&body), None);
        assert!(s == 201 || s == 200, "{s} {b}");
    }
    // The owner removes the daemon's sandbox and makes one of the same
    // name with the CLI: the daemon's record outlives the first.
    ok(&warden(state.path(), &["rm", "--force", "reused"]));
    std::thread::sleep(Duration::from_millis(50));
    ok(&warden(state.path(), &["create", "reused"]));
    // Seen stopped by a sweep, then used: started and stopped again.
    std::thread::sleep(Duration::from_secs(3));
    for verb in ["start", "stop"] {
        let (s, b) = call(
            &d,
            "POST",
            &format!("/v1/sandboxes/burst/{verb}"),
            None,
            None,
        );
        assert!(s < 300, "{verb}: {s} {b}");
    }
    std::thread::sleep(Duration::from_millis(2500));
    assert!(
        listed(&d).contains(&"burst".to_string()),
        "a sandbox used 2.5 s ago was swept with a 4 s period"
    );
    wait_until(
        "the used sandbox is swept in its time",
        Duration::from_secs(20),
        || !listed(&d).contains(&"burst".to_string()),
    );
    let mine = stdout(&warden(state.path(), &["ls"]));
    assert!(
        mine.contains("reused"),
        "the owner's sandbox was swept: {mine}"
    );
    ok(&warden(state.path(), &["rm", "--force", "reused"]));
}
