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
