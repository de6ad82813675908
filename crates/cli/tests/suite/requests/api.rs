//! Ask rules answered through the daemon's HTTP API: a sandbox made with
//! `POST /v1/sandboxes` whose `egress.ask_requests` holds a request, the
//! question listed by `GET /v1/approvals` with its request line (the
//! query's values shown to whoever answers, never recorded), and answered with `POST
//! /v1/approvals/{id}`: "allow_once" lets that one request reach the
//! recording server, "allow_always" lets it go for the rest of the run
//! and keeps it in the project's grants (warden's state, never the
//! workspace) as a request rule, so that the project's next sandbox
//! sends that request unasked and still holds any other.

use crate::common::daemon::{call, curl_available, json, Daemon};
use crate::common::forge::Forge;
use crate::common::*;
use std::path::Path;
use std::time::{Duration, Instant};

/// A POST of issue `n` from inside sandbox `sb`, in the background: the
/// exec's id. It prints `issue N CODE`.
fn post(d: &Daemon, sb: &str, port: u16, n: u32) -> String {
    let body = serde_json::json!({
        "argv": ["curl", "-sS", "--noproxy", "*", "-o", "/dev/null",
                 "-w", format!("issue {n} %{{http_code}}\n"), "-X", "POST",
                 format!("https://forge.test:{port}/issues/{n}?token=s3cret")],
        "background": true,
    });
    let (s, b) = call(
        d,
        "POST",
        &format!("/v1/sandboxes/{sb}/exec"),
        Some(&body.to_string()),
        None,
    );
    assert_eq!(s, 202, "{b}");
    json(&b)["id"].as_str().unwrap().to_string()
}

/// What exec `id` of `sb` printed on its standard output, once it has
/// ended.
fn ended(d: &Daemon, sb: &str, id: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        let (s, b) = call(
            d,
            "GET",
            &format!("/v1/sandboxes/{sb}/execs/{id}"),
            None,
            None,
        );
        assert_eq!(s, 200, "{b}");
        if json(&b)["exit_status"].as_i64().is_some() {
            let (_, out) = call(
                d,
                "GET",
                &format!("/v1/sandboxes/{sb}/execs/{id}/output"),
                None,
                None,
            );
            // The exec's stream: its standard output's chunks, in order.
            return out
                .lines()
                .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
                .filter(|e| e["type"] == "stdout")
                .filter_map(|e| e["data"].as_str().map(str::to_string))
                .collect();
        }
        std::thread::sleep(Duration::from_millis(30));
    }
    panic!("exec {id} of {sb} did not end");
}

/// The one question waiting in `sb`, as the API lists it.
fn question(d: &Daemon, sb: &str) -> serde_json::Value {
    let mut found = serde_json::Value::Null;
    wait_until("the question", Duration::from_secs(15), || {
        let (s, b) = call(d, "GET", &format!("/v1/approvals?sandbox={sb}"), None, None);
        assert_eq!(s, 200, "{b}");
        found = json(&b)["approvals"][0].clone();
        !found.is_null()
    });
    found
}

fn answer(d: &Daemon, q: &serde_json::Value, decision: &str) -> (u16, String) {
    call(
        d,
        "POST",
        &format!("/v1/approvals/{}", q["id"].as_str().unwrap()),
        Some(&format!(r#"{{"decision":"{decision}"}}"#)),
        None,
    )
}

#[test]
fn a_held_request_is_answered_once_and_always_over_the_api_and_always_is_kept_for_the_project() {
    if !curl_available() {
        return skip("curl is not installed");
    }
    let Some(Forge { ca, up }) = Forge::start() else {
        return;
    };
    let port = up.port;
    let state = TempDir::new("requests-api");
    let ws = TempDir::new("requests-api-ws");
    let d = Daemon::start_with(
        state.path(),
        false,
        &[],
        &[("WARDEN_TEST_ASK_TIMEOUT_MS", Path::new("5000"))],
    );
    let create = |name: &str| {
        let body = serde_json::json!({
            "name": name,
            "workspace": ws.str(),
            "spec": {"egress": {
                "domains": [format!("forge.test:{port}")],
                "hosts": {"forge.test": "127.0.0.1"},
                "upstream_ca": [ca.pem_path()],
                "ask_requests": [format!("POST forge.test:{port}/issues/*")],
            }},
        });
        let (s, b) = call(&d, "POST", "/v1/sandboxes", Some(&body.to_string()), None);
        assert_eq!(s, 201, "{b}");
    };
    create("first");

    // Allowed once: that request arrives, after the answer and not before.
    let e = post(&d, "first", port, 1);
    let q = question(&d, "first");
    assert_eq!(q["protocol"], "request", "{q}");
    assert_eq!(q["name"], "forge.test", "{q}");
    assert!(
        q["request"]
            .as_str()
            .is_some_and(|r| r.starts_with("POST /issues/1?token=s3cret [request sha256 ")),
        "the request line, its query's value shown to whoever answers: {q}"
    );
    assert!(up.requests().is_empty(), "nothing went before the answer");
    let (s, b) = answer(&d, &q, "allow_once");
    assert_eq!(s, 204, "{b}");
    assert_eq!(ended(&d, "first", &e), "issue 1 200\n");
    let (s, b) = answer(&d, &q, "deny");
    assert_eq!(s, 409, "a question is answered once: {b}");
    // "once" covered that request only: the same one is asked again.
    let e = post(&d, "first", port, 1);
    let q = question(&d, "first");
    let (s, b) = answer(&d, &q, "deny");
    assert_eq!(s, 204, "{b}");
    assert_eq!(ended(&d, "first", &e), "issue 1 403\n");
    assert_eq!(up.requests().len(), 1, "{:?}", up.requests());

    // Allowed always: it arrives, and goes unasked for the rest of the run.
    let e = post(&d, "first", port, 2);
    let q = question(&d, "first");
    assert!(
        q["request"]
            .as_str()
            .is_some_and(|r| r.starts_with("POST /issues/2?token=s3cret [request sha256 ")),
        "{q}"
    );
    let (s, b) = answer(&d, &q, "allow_always");
    assert_eq!(s, 204, "{b}");
    assert_eq!(ended(&d, "first", &e), "issue 2 200\n");
    let e = post(&d, "first", port, 2);
    assert_eq!(ended(&d, "first", &e), "issue 2 200\n", "asked again");
    // Another request is still held: unanswered, it is refused in time.
    let e = post(&d, "first", port, 3);
    let _ = question(&d, "first");
    assert_eq!(ended(&d, "first", &e), "issue 3 403\n");

    // Kept as a request rule in the project's grants, in warden's state.
    let grants: Vec<_> = std::fs::read_dir(state.path().join("warden/grants"))
        .map(|rd| rd.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    assert_eq!(grants.len(), 1, "no grants file for the project");
    let text = std::fs::read_to_string(&grants[0]).unwrap();
    let rule = format!("POST forge.test:{port}/issues/2");
    assert!(text.contains("allow_requests"), "{text}");
    assert!(text.contains(&rule), "{text}");
    assert!(!text.contains("s3cret"), "a query value was kept: {text}");
    assert_eq!(
        std::fs::read_dir(ws.path()).unwrap().count(),
        0,
        "the grant was written into the workspace"
    );
    let (s, b) = call(&d, "DELETE", "/v1/sandboxes/first?force=true", None, None);
    assert_eq!(s, 204, "{b}");

    // The project's next sandbox: that request unasked, another held.
    create("second");
    let e = post(&d, "second", port, 2);
    assert_eq!(ended(&d, "second", &e), "issue 2 200\n");
    let e = post(&d, "second", port, 4);
    let q = question(&d, "second");
    assert!(
        q["request"]
            .as_str()
            .is_some_and(|r| r.starts_with("POST /issues/4?token=s3cret [request sha256 ")),
        "{q}"
    );
    let (s, b) = answer(&d, &q, "deny");
    assert_eq!(s, 204, "{b}");
    assert_eq!(ended(&d, "second", &e), "issue 4 403\n");

    let seen = up.requests();
    let arrived = |path: &str| seen.iter().filter(|r| r.contains(path)).count();
    assert_eq!(arrived("POST /issues/1?"), 1, "{seen:?}");
    assert_eq!(arrived("POST /issues/2?"), 3, "{seen:?}");
    assert_eq!(arrived("/issues/3"), 0, "{seen:?}");
    assert_eq!(arrived("/issues/4"), 0, "{seen:?}");
    let (s, b) = call(&d, "DELETE", "/v1/sandboxes/second?force=true", None, None);
    assert_eq!(s, 204, "{b}");
}
