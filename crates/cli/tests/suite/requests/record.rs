//! Decided requests on the record: each is an event (method, name, path
//! with the query's values redacted, the rule, the answer, the bytes),
//! repeats within a window counted rather than written one by one, and
//! the same record read through the daemon's API (`GET
//! /v1/sandboxes/{id}/events?follow=false`) and `warden logs`.

use crate::common::daemon::{call, curl_available, json, Daemon};
use crate::common::forge::Forge;
use crate::common::*;
use std::process::{Command, Stdio};

#[test]
fn each_decided_request_is_recorded_with_repeats_counted_and_shown_by_the_api_and_warden_logs() {
    if !curl_available() {
        return skip("curl is not installed");
    }
    let Some(Forge { ca, up }) = Forge::start() else {
        return;
    };
    let port = up.port;
    let state = TempDir::new("requests-record");
    let d = Daemon::start(state.path(), false);
    let body = serde_json::json!({
        "name": "rec",
        "spec": {"egress": {
            "domains": [format!("forge.test:{port}")],
            "hosts": {"forge.test": "127.0.0.1"},
            "upstream_ca": [ca.pem_path()],
            "allow_requests": [format!("GET forge.test:{port}/repos/**")],
        }},
    });
    let (s, b) = call(&d, "POST", "/v1/sandboxes", Some(&body.to_string()), None);
    assert_eq!(s, 201, "{b}");
    // One allowed read, then twenty refused deletes on one connection.
    let url = format!("https://forge.test:{port}/repos/acme/w");
    let deletes = vec![format!("{url}?token=s3cret"); 20].join(" ");
    let script = format!(
        "curl -sS --noproxy '*' {url}; curl -sS --noproxy '*' -o /dev/null -X DELETE {deletes}; echo done"
    );
    let exec = serde_json::json!({"argv": ["sh", "-c", script]});
    let (s, b) = call(
        &d,
        "POST",
        "/v1/sandboxes/rec/exec",
        Some(&exec.to_string()),
        None,
    );
    assert_eq!(s, 200, "{b}");
    assert!(json(&b)["stdout"].as_str().unwrap().contains("done"), "{b}");
    assert_eq!(up.requests().len(), 1, "{:?}", up.requests());
    // The window that counts the repeats closes a second after it opened.
    let mut events: Vec<serde_json::Value> = Vec::new();
    wait_until(
        "the count of the repeated refusals",
        std::time::Duration::from_secs(15),
        || {
            let (s, b) = call(
                &d,
                "GET",
                "/v1/sandboxes/rec/events?follow=false",
                None,
                None,
            );
            assert_eq!(s, 200, "{b}");
            events = b
                .lines()
                .map(|l| l.trim_start_matches("data:").trim())
                .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
                .collect();
            events
                .iter()
                .any(|e| e["event"] == "connections_aggregated" && e["protocol"] == "request")
        },
    );
    let requests: Vec<&serde_json::Value> = events
        .iter()
        .filter(|e| e["event"] == "connection" && e["protocol"] == "request")
        .collect();
    let allowed: Vec<_> = requests.iter().filter(|e| e["allowed"] == true).collect();
    assert_eq!(allowed.len(), 1, "{requests:?}");
    let a = allowed[0];
    assert_eq!(a["name"], "forge.test", "{a}");
    assert_eq!(a["rule"], format!("GET forge.test:{port}/repos/**"), "{a}");
    assert!(
        a["detail"]
            .as_str()
            .unwrap()
            .contains("GET forge.test/repos/acme/w"),
        "{a}"
    );
    assert_eq!(a["bytes_in"], 3, "the answer's bytes: {a}");
    // The refusals: the first written whole, the rest counted.
    let refused: Vec<_> = requests.iter().filter(|e| e["allowed"] == false).collect();
    assert!(!refused.is_empty() && refused.len() < 20, "{refused:?}");
    assert_eq!(
        refused[0]["reason"]["code"], "no_request_rule",
        "{refused:?}"
    );
    assert!(
        refused[0]["detail"]
            .as_str()
            .unwrap()
            .contains("DELETE forge.test/repos/acme/w?token=…"),
        "{refused:?}"
    );
    let counted: u64 = events
        .iter()
        .filter(|e| e["event"] == "connections_aggregated" && e["protocol"] == "request")
        .filter_map(|e| e["count"].as_u64())
        .sum();
    assert_eq!(
        refused.len() as u64 + counted,
        20,
        "every refusal written or counted"
    );
    // (The exec's own argv holds the URLs as typed; the network's record
    // never holds a query's value.)
    let network: Vec<&serde_json::Value> = events
        .iter()
        .filter(|e| !e["event"].as_str().unwrap_or("").starts_with("exec"))
        .collect();
    let network = serde_json::to_string(&network).unwrap();
    assert!(
        !network.contains("s3cret"),
        "a query value was recorded: {network}"
    );

    // `warden logs` reads the same record.
    let logs = Command::new(warden_bin())
        .args(["logs", "rec"])
        .env("WARDEN_STATE_DIR", state.path().join("warden"))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let text = stdout(&logs);
    assert!(logs.status.success(), "{text}\n{}", stderr(&logs));
    assert!(
        text.contains(&format!(
            "allow request forge.test:{port} (rule GET forge.test:{port}/repos/**)"
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!("DENY request forge.test:{port}"))
            && text.contains("DELETE forge.test/repos/acme/w?token=…"),
        "{text}"
    );
    assert!(
        text.contains("DENY request forge.test") && text.contains("more times since"),
        "the repeats' count: {text}"
    );
    for line in text.lines().filter(|l| l.contains(" request ")) {
        assert!(!line.contains("s3cret"), "{line}");
    }
    let (s, b) = call(&d, "DELETE", "/v1/sandboxes/rec?force=true", None, None);
    assert_eq!(s, 204, "{b}");
}
