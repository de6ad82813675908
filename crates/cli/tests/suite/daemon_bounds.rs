//! What one request may make the daemon do, through the real `warden
//! serve`: a request for a sandbox's events reads one bounded page of its
//! audit log, however large the log, never the whole of it; and a label
//! in the E2B door's own namespace (`e2b.`, its record of a sandbox) is
//! refused on the native API, for a token and the owner alike, at its
//! JSON pointer with its reason, and nothing is created.

use crate::common::daemon::{self, call, call_on, json};
use std::io::Write;
use std::time::{Duration, Instant};

#[test]
fn an_event_page_on_a_large_audit_log_is_bounded_and_quick() {
    let Some((state, d)) = daemon::over_tcp("bounds-log") else {
        return;
    };
    let (s, b) = call(&d, "POST", "/v1/sandboxes", Some(r#"{"name":"big"}"#), None);
    assert_eq!(s, 201, "{b}");
    // The log made big: copies of its first event, 200 MiB of them.
    let log = state.path().join("warden/sandboxes/big/audit.jsonl");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !log.exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let text = std::fs::read_to_string(&log).unwrap();
    let first = text.lines().next().expect("the log has its first event");
    let mut f = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
    let mut chunk = String::new();
    let mut written = 0usize;
    while written < 200 << 20 {
        chunk.push_str(first);
        chunk.push('\n');
        if chunk.len() >= 1 << 20 {
            f.write_all(chunk.as_bytes()).unwrap();
            written += chunk.len();
            chunk.clear();
        }
    }
    drop(f);
    for (path, most) in [
        ("/v1/sandboxes/big/events?follow=false&limit=3", 3),
        ("/v1/sandboxes/big/events?follow=false&from=5&limit=2", 2),
        ("/v1/sandboxes/big/events?follow=false", 10_000),
    ] {
        let t = Instant::now();
        let (s, b) = call(&d, "GET", path, None, None);
        let took = t.elapsed();
        assert_eq!(s, 200, "{path}: {}", &b[..b.len().min(300)]);
        let ids: Vec<&str> = b.lines().filter_map(|l| l.strip_prefix("id: ")).collect();
        assert_eq!(ids.len(), most, "{path}");
        assert!(took < Duration::from_secs(5), "{path} took {took:?}");
    }
    // A page starts at the event asked for.
    let (_, b) = call(
        &d,
        "GET",
        "/v1/sandboxes/big/events?follow=false&from=5&limit=2",
        None,
        None,
    );
    let ids: Vec<&str> = b.lines().filter_map(|l| l.strip_prefix("id: ")).collect();
    assert_eq!(ids, ["5", "6"], "{b}");
    let (s, _) = call(
        &d,
        "GET",
        "/v1/sandboxes/big/events?follow=false&limit=0",
        None,
        None,
    );
    assert_eq!(s, 400);
}

#[test]
fn a_label_of_the_e2b_doors_namespace_is_refused_on_the_native_api_at_its_pointer() {
    let Some((_state, d)) = daemon::over_tcp("bounds-labels") else {
        return;
    };
    let token = daemon::api_token(&d, "labeller", &["sandboxes:read", "sandboxes:write"], None);
    // A token that would have the door pause, not stop, its sandbox at its
    // timeout (a paused sandbox's TTL stands still), or mint it envd keys.
    for (key, tcp, who) in [
        ("e2b.on_timeout", true, Some(token.as_str())),
        ("e2b.template", true, Some(token.as_str())),
        ("e2b.paused", false, None),
    ] {
        let body =
            format!(r#"{{"name":"lab","start":false,"labels":{{"team":"a","{key}":"pause"}}}}"#);
        let (s, b) = call_on(&d, tcp, "POST", "/v1/sandboxes", Some(&body), who);
        assert_eq!(s, 400, "{key}: {b}");
        let problem = json(&b);
        assert_eq!(problem["reason"], "reserved_label", "{b}");
        assert_eq!(problem["field"], format!("/labels/{key}"), "{b}");
        let (s, _) = call(&d, "GET", "/v1/sandboxes/lab", None, None);
        assert_eq!(s, 404, "a refused create made {key}'s sandbox");
    }
    // Labels of the caller's own are taken.
    let (s, b) = call_on(
        &d,
        true,
        "POST",
        "/v1/sandboxes",
        Some(r#"{"name":"lab","start":false,"labels":{"team":"a","e2b":"x"}}"#),
        Some(&token),
    );
    assert_eq!(s, 201, "{b}");
}
