//! What a copy of a sandbox keeps: a fork and a sandbox made from a
//! snapshot run under their source's configuration as it is when they are
//! made, its live changes included (`warden egress`, `PATCH
//! /v1/sandboxes/{id}/egress`), never the spec as the source was made: a
//! name taken away from the source is not reached from any copy (a real
//! listener on the host's loopback records whether anything arrived), and
//! a name a caller added stays a caller's in the copy.

use crate::common::daemon::*;
use crate::common::*;
use std::net::TcpListener;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Stops (and removes) the sandboxes even when the test fails half-way.
struct Cleanup<'a>(&'a Path, Vec<String>);

impl Drop for Cleanup<'_> {
    fn drop(&mut self) {
        for n in &self.1 {
            let _ = warden(self.0, &["rm", "--force", n]);
        }
        let _ = warden(self.0, &["snapshots", "rm", "taken"]);
    }
}

/// A listener on the host's loopback that counts the connections that
/// reach it.
fn listener() -> (u16, Arc<AtomicUsize>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let seen = Arc::new(AtomicUsize::new(0));
    let s = seen.clone();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for c in l.incoming().flatten() {
            s.fetch_add(1, Ordering::SeqCst);
            held.push(c);
        }
    });
    (port, seen)
}

/// Python in the sandbox: resolve `live.test` and connect to its port;
/// prints `reached` or why not.
const PY_REACH: &str = r#"import socket, sys
try:
    ip = socket.gethostbyname('live.test')
    socket.create_connection((ip, int(sys.argv[1])), timeout=5).close()
    print('reached')
except OSError as e:
    print('refused', e)
"#;

fn reaches(state: &Path, name: &str, port: u16) -> String {
    let out = warden(
        state,
        &[
            "exec",
            name,
            "--",
            "python3",
            "-c",
            PY_REACH,
            &port.to_string(),
        ],
    );
    stdout(&out)
}

#[test]
fn a_fork_and_a_sandbox_made_from_a_snapshot_never_reach_a_name_taken_from_their_source() {
    if !egress_available() {
        return;
    }
    let state = TempDir::new("copies-keep");
    let s = state.path();
    let names = ["src", "src-fork-1", "fromsnap"].map(String::from).to_vec();
    let _c = Cleanup(s, names);
    let (port, seen) = listener();
    let entry = format!("live.test:{port}");
    ok(&warden(
        s,
        &[
            "create",
            "src",
            "--allow-domain",
            &entry,
            "--allow-domain",
            "other.test",
            "--add-host",
            "live.test=127.0.0.1",
            "--start",
        ],
    ));
    // The set-up reaches the listener while the name is allowed...
    assert!(reaches(s, "src", port).starts_with("reached"));
    // The kernel completes a connection before the listener's thread
    // accepts it: wait for the count rather than read it at once.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while seen.load(Ordering::SeqCst) == 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let before = seen.load(Ordering::SeqCst);
    assert_eq!(before, 1);
    // ...and the owner takes it away live.
    ok(&warden(s, &["egress", "src", "--deny", &entry]));
    assert!(!reaches(s, "src", port).starts_with("reached"));

    let forks = ok(&warden(s, &["fork", "src"]));
    assert_eq!(forks.trim(), "src-fork-1");
    ok(&warden(s, &["snapshots", "create", "src", "taken"]));
    ok(&warden(
        s,
        &["create", "fromsnap", "--from-snapshot", "taken", "--start"],
    ));
    for copy in ["src-fork-1", "fromsnap"] {
        let list = ok(&warden(s, &["egress", copy]));
        assert!(
            !list.contains("live.test"),
            "{copy} allows it again: {list}"
        );
        assert!(list.lines().any(|l| l == "other.test"), "{copy}: {list}");
        let got = reaches(s, copy, port);
        assert!(!got.starts_with("reached"), "{copy}: {got}");
        // A restart applies nothing of its source's again.
        ok(&warden(s, &["stop", "--time", "1s", copy]));
        ok(&warden(s, &["start", copy]));
        let got = reaches(s, copy, port);
        assert!(!got.starts_with("reached"), "{copy} after a restart: {got}");
    }
    assert_eq!(
        seen.load(Ordering::SeqCst),
        before,
        "a copy reached a name taken away from its source"
    );
}

/// The allowlist of sandbox `id` as `token` sees it (an empty change).
fn allowlist(d: &Daemon, id: &str, token: &str) -> Vec<String> {
    let (st, b) = call_on(
        d,
        true,
        "PATCH",
        &format!("/v1/sandboxes/{id}/egress"),
        Some("{}"),
        Some(token),
    );
    assert_eq!(st, 200, "{id}: {b}");
    json(&b)["allow"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect()
}

/// Whether entry `name` of sandbox `id`'s spec is marked a caller's.
fn callers(state: &Path, id: &str, name: &str) -> Option<bool> {
    let stored: serde_json::Value = serde_json::from_slice(
        &std::fs::read(sandbox_dir(state, id).join("sandbox.json")).unwrap(),
    )
    .unwrap();
    let domains = stored["spec"]["network"]["Egress"]["domains"].as_array()?;
    domains
        .iter()
        .find(|d| d["source"] == name)
        .map(|d| d["caller"].as_bool().unwrap_or(false))
}

#[test]
fn a_token_holders_fork_and_snapshot_keep_what_the_owner_took_away_and_its_own_additions_stay_its()
{
    if !curl_available() {
        return skip("curl is not installed");
    }
    let state = TempDir::new("copies-keep-api");
    let s = state.path();
    let d = Daemon::start(s, true);
    let t = api_token(
        &d,
        "holder",
        &["sandboxes:read", "sandboxes:write", "exec"],
        None,
    );
    let (st, b) = call_on(
        &d,
        true,
        "POST",
        "/v1/sandboxes",
        Some(r#"{"name":"n1","spec":{"egress":{"domains":["blocked.example","ok.example"]}}}"#),
        Some(&t),
    );
    assert_eq!(st, 201, "{b}");
    // The owner takes a name away over its socket and adds one of its
    // own; the holder adds one.
    let (st, b) = call(
        &d,
        "PATCH",
        "/v1/sandboxes/n1/egress",
        Some(r#"{"remove":["blocked.example"],"allow":["owner.example"]}"#),
        None,
    );
    assert_eq!(st, 200, "{b}");
    let (st, b) = call_on(
        &d,
        true,
        "PATCH",
        "/v1/sandboxes/n1/egress",
        Some(r#"{"allow":["added.example"]}"#),
        Some(&t),
    );
    assert_eq!(st, 200, "{b}");
    assert_eq!(
        allowlist(&d, "n1", &t),
        ["ok.example", "owner.example", "added.example"]
    );

    let (st, b) = call_on(
        &d,
        true,
        "POST",
        "/v1/sandboxes/n1/fork",
        Some(r#"{"count":1}"#),
        Some(&t),
    );
    assert_eq!(st, 201, "{b}");
    let (st, b) = call_on(
        &d,
        true,
        "POST",
        "/v1/sandboxes/n1/snapshots",
        Some(r#"{"name":"n1-snap"}"#),
        Some(&t),
    );
    assert_eq!(st, 201, "{b}");
    let (st, b) = call_on(
        &d,
        true,
        "POST",
        "/v1/snapshots/n1-snap/sandboxes",
        Some(r#"{"name":"n1-copy"}"#),
        Some(&t),
    );
    assert_eq!(st, 201, "{b}");
    for copy in ["n1-fork-1", "n1-copy"] {
        let list = allowlist(&d, copy, &t);
        assert!(
            !list.contains(&"blocked.example".to_string()),
            "{copy} allows what the owner took away: {list:?}"
        );
        assert!(list.contains(&"ok.example".to_string()), "{copy}: {list:?}");
        assert!(
            list.contains(&"added.example".to_string()),
            "{copy}: {list:?}"
        );
        // The holder's entries are still a holder's (public addresses
        // only), the owner's addition still the owner's.
        assert_eq!(callers(s, copy, "added.example"), Some(true), "{copy}");
        assert_eq!(callers(s, copy, "ok.example"), Some(true), "{copy}");
        assert_eq!(callers(s, copy, "owner.example"), Some(false), "{copy}");
    }
    for n in ["n1", "n1-fork-1", "n1-copy"] {
        let _ = warden(s, &["rm", "--force", n]);
    }
}
