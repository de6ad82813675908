//! Desktop sandboxes for the tests: the one place that says how a test
//! gets one. It is what a person gets: a sandbox created through the
//! daemon with the shipped `desktop` profile, whose supervisor starts the
//! X server, window manager, panel, VNC server and Chromium, waited for
//! through the API (`GET .../desktop` until its screen and its browser
//! answer) as a client would. Nothing here starts a program of the
//! desktop itself.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::daemon::{call, json, Daemon};
use std::path::Path;
use std::time::{Duration, Instant};

/// How long a desktop may take to come up. Measured: about 3 s on an idle
/// two-core machine (Chromium is the last to answer); the margin is for a
/// loaded one.
pub const UP_WITHIN: Duration = Duration::from_secs(120);

/// The programs of a desktop the host lacks, as the runtime's own check
/// names them (`program (package)`); empty when a desktop can run.
pub fn missing_programs() -> Vec<String> {
    warden_runtime::desktop::PROGRAMS
        .iter()
        .filter(|(bin, _, _)| !on_host(bin))
        .map(|(bin, pkg, _)| format!("{bin} ({pkg})"))
        .collect()
}

/// Whether `bin` is in the host's system directories (which a sandbox
/// sees).
pub fn on_host(bin: &str) -> bool {
    ["/usr/local/bin", "/usr/bin", "/bin", "/usr/sbin", "/sbin"]
        .iter()
        .any(|d| Path::new(d).join(bin).exists())
}

/// Why a desktop test cannot run here, if it cannot.
pub fn unavailable() -> Option<String> {
    let missing = missing_programs();
    (!missing.is_empty()).then(|| {
        format!("the host lacks the desktop's programs {missing:?} (.ci/run installs them)")
    })
}

/// Create sandbox `name` with the `desktop` profile, `spec` merged over
/// it (egress rules for the browser), as the owner; its desktop is not
/// waited for.
pub fn create(d: &Daemon, name: &str, spec: serde_json::Value) {
    let body = serde_json::json!({ "name": name, "profile": "desktop", "spec": spec }).to_string();
    let (s, b) = call(d, "POST", "/v1/sandboxes", Some(&body), None);
    assert_eq!(s, 201, "{b}");
}

/// `GET .../desktop` as the owner.
pub fn info(d: &Daemon, name: &str) -> serde_json::Value {
    let (s, b) = call(
        d,
        "GET",
        &format!("/v1/sandboxes/{name}/desktop"),
        None,
        None,
    );
    assert_eq!(s, 200, "{b}");
    json(&b)
}

/// Wait until the desktop of `name` is up: its screen and its browser
/// answer. Its state then (or a panic that shows its programs).
pub fn wait_up(d: &Daemon, name: &str) -> serde_json::Value {
    wait_up_within(d, name, UP_WITHIN)
}

/// [`wait_up`], bounded by `within` (a desktop in an emulated VM is much
/// slower to come up).
pub fn wait_up_within(d: &Daemon, name: &str, within: Duration) -> serde_json::Value {
    let began = Instant::now();
    loop {
        let i = info(d, name);
        if i["screen"] == true && i["devtools"] == true {
            eprintln!("the desktop of {name} was up in {:?}", began.elapsed());
            return i;
        }
        assert!(
            began.elapsed() < within,
            "the desktop of {name} did not come up within {within:?}: {i}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A desktop sandbox `name` from the `desktop` profile, up.
pub fn start(d: &Daemon, name: &str, spec: serde_json::Value) -> serde_json::Value {
    create(d, name, spec);
    wait_up(d, name)
}

/// Run `argv` in the sandbox in the background (as the daemon's API does
/// for anyone), as the owner.
pub fn background(d: &Daemon, sandbox: &str, argv: &[&str]) {
    let body = serde_json::json!({ "argv": argv, "background": true }).to_string();
    let (s, b) = call(
        d,
        "POST",
        &format!("/v1/sandboxes/{sandbox}/exec"),
        Some(&body),
        None,
    );
    assert!(s == 200 || s == 201 || s == 202, "{argv:?}: {s} {b}");
}

/// Run `script` with `sh -c` in the sandbox and return its output.
pub fn sh(d: &Daemon, sandbox: &str, script: &str) -> String {
    let body = serde_json::json!({ "argv": ["sh", "-c", script] }).to_string();
    let (s, b) = call(
        d,
        "POST",
        &format!("/v1/sandboxes/{sandbox}/exec"),
        Some(&body),
        None,
    );
    assert!(s == 200 || s == 201, "{script}: {s} {b}");
    json(&b)["stdout"].as_str().unwrap_or("").to_string()
}
