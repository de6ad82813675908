//! What the daemon's doors keep for themselves and act on, through the
//! real `warden serve`, its E2B door and `warden mcp`: MCP's own labels
//! (`mcp-lease`, `mcp-session`) are refused to a token holder as the E2B
//! door's are; a record the E2B door kept of a sandbox that was removed
//! behind its back never makes the door pause, or sample, the owner's
//! sandbox that took the name; the MCP event log resource shows the
//! newest events of a log longer than one page of the API; and the E2B
//! door tells a sandbox's own limits, never the host's, and says so when
//! it cannot read them.

use crate::common::daemon::*;
use crate::common::*;
use std::path::Path;
use std::time::Duration;

/// A daemon with its E2B door, and a token of `scopes` for it.
fn e2b_daemon(state: &Path, scopes: &[&str]) -> (Daemon, String, String) {
    let addr = format!("127.0.0.1:{}", free_port());
    let d = Daemon::start_with(state, true, &["--e2b", &addr], &[]);
    let t = api_token(&d, "e2b", scopes, None);
    (d, addr, t)
}

const WRITE: &[&str] = &["sandboxes:read", "sandboxes:write", "exec", "files"];

#[test]
fn a_token_holder_cannot_set_mcps_own_labels_through_any_door() {
    if !curl_available() {
        return skip("curl is not installed");
    }
    let state = TempDir::new("mcp-labels");
    let s = state.path();
    let (d, addr, t) = e2b_daemon(s, WRITE);
    // A lease naming a process that is gone would have the next MCP
    // server remove the sandbox as the owner; one naming a live process
    // would pass it off as a session's.
    for key in ["mcp-lease", "mcp-session"] {
        let body = format!(r#"{{"name":"lbl","start":false,"labels":{{"{key}":"1.1"}}}}"#);
        let (st, b) = call_on(&d, true, "POST", "/v1/sandboxes", Some(&body), Some(&t));
        assert_eq!(st, 400, "{key}: {b}");
        let p = json(&b);
        assert_eq!(p["reason"], "reserved_label", "{b}");
        assert_eq!(p["field"], format!("/labels/{key}"), "{b}");
        assert!(!sandbox_dir(s, "lbl").exists(), "{key}: a sandbox was made");
        // The owner's calls through the API are refused too: the record
        // is MCP's.
        let (st, b) = call(&d, "POST", "/v1/sandboxes", Some(&body), None);
        assert_eq!(st, 400, "{key}: {b}");
        // Through the E2B door, as metadata.
        let body = format!(r#"{{"templateID":"base","timeout":60,"metadata":{{"{key}":"1.1"}}}}"#);
        let (st, b) = e2b_call(&addr, "POST", "/sandboxes", &t, Some(&body));
        assert_eq!(st, 400, "{key}: {b}");
        assert!(b.contains(key), "{b}");
    }
    let (st, b) = call(&d, "GET", "/v1/sandboxes", None, None);
    assert_eq!(st, 200);
    assert_eq!(json(&b)["sandboxes"], serde_json::json!([]), "{b}");
}

/// The state of sandbox `name` in `warden ls`.
fn listed_state(state: &Path, name: &str) -> String {
    let ls = ok(&warden(state, &["ls"]));
    ls.lines()
        .find(|l| l.split_whitespace().next() == Some(name))
        .unwrap_or_default()
        .to_string()
}

#[test]
fn the_e2b_doors_record_of_a_removed_sandbox_never_pauses_or_samples_the_owners_sandbox_of_its_name(
) {
    if !curl_available() {
        return skip("curl is not installed");
    }
    let state = TempDir::new("e2b-stale");
    let s = state.path();
    let (d, addr, t) = e2b_daemon(s, WRITE);
    let admin = api_token(&d, "admin", &["admin"], None);
    // A sandbox whose timeout ends in a pause, sampled while it runs.
    let (st, b) = e2b_call(
        &addr,
        "POST",
        "/sandboxes",
        &t,
        Some(r#"{"templateID":"base","timeout":300,"autoPause":true}"#),
    );
    assert!(st == 200 || st == 201, "{st} {b}");
    let id = json(&b)["sandboxID"].as_str().unwrap().to_string();
    std::thread::sleep(Duration::from_secs(6));
    // Removed behind the door's back; the owner makes a sandbox of the
    // same name with the CLI, whose TTL ends within the door's grace.
    ok(&warden(s, &["rm", "--force", &id]));
    std::thread::sleep(Duration::from_millis(50));
    ok(&warden(s, &["create", &id, "--ttl", "9s", "--start"]));
    std::thread::sleep(Duration::from_secs(6));
    let line = listed_state(s, &id);
    assert!(
        line.contains("running"),
        "the owner's sandbox was paused by the door: {line}"
    );
    // Nor does the daemon show the record's labels (the door's among
    // them) as the owner's sandbox's.
    let (st, b) = call(&d, "GET", &format!("/v1/sandboxes/{id}"), None, None);
    assert_eq!(st, 200, "{b}");
    assert_eq!(json(&b)["labels"], serde_json::json!({}), "{b}");
    // The door's samples are of the sandbox the record was made for: the
    // owner's sandbox of its name shows none of them and none were taken.
    let (st, b) = e2b_call(
        &addr,
        "GET",
        &format!("/sandboxes/{id}/metrics"),
        &admin,
        None,
    );
    if st == 200 {
        let m = json(&b);
        assert!(
            m.as_array().is_some_and(|a| a.len() <= 1),
            "samples of another sandbox shown: {b}"
        );
    }
    ok(&warden(s, &["rm", "--force", &id]));
}

#[test]
fn the_e2b_door_tells_a_sandboxs_own_limits_never_the_hosts_and_says_when_it_cannot() {
    if !curl_available() {
        return skip("curl is not installed");
    }
    let state = TempDir::new("e2b-shape");
    let s = state.path();
    let (_d, addr, t) = e2b_daemon(s, WRITE);
    let (st, b) = e2b_call(
        &addr,
        "POST",
        "/sandboxes",
        &t,
        Some(r#"{"templateID":"base","timeout":120}"#),
    );
    assert!(st == 200 || st == 201, "{st} {b}");
    let id = json(&b)["sandboxID"].as_str().unwrap().to_string();
    let stored: serde_json::Value =
        serde_json::from_slice(&std::fs::read(sandbox_dir(s, &id).join("sandbox.json")).unwrap())
            .unwrap();
    let memory = stored["spec"]["resources"]["memory"]["value"]
        .as_u64()
        .unwrap();
    assert!(stored["spec"]["resources"]["cpus"].is_null());
    let (st, b) = e2b_call(&addr, "GET", &format!("/sandboxes/{id}"), &t, None);
    assert_eq!(st, 200, "{b}");
    let info = json(&b);
    // No CPU quota of its own: 0, not the host's cores.
    assert_eq!(info["cpuCount"], 0, "{b}");
    assert_eq!(info["memoryMB"], memory >> 20, "{b}");
    let host_mb = std::fs::read_to_string("/proc/meminfo")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .unwrap()
        >> 10;
    assert_ne!(info["memoryMB"], host_mb, "the host's memory was told: {b}");
    // A spec that cannot be read is said, not made up.
    let spec = sandbox_dir(s, &id).join("sandbox.json");
    let kept = std::fs::read(&spec).unwrap();
    std::fs::write(&spec, b"{").unwrap();
    let (st, b) = e2b_call(&addr, "GET", &format!("/sandboxes/{id}"), &t, None);
    std::fs::write(&spec, kept).unwrap();
    assert_eq!(st, 500, "{b}");
    assert!(b.contains("cannot be read"), "{b}");
    assert!(!b.contains(&host_mb.to_string()), "{b}");
    let _ = e2b_call(&addr, "DELETE", &format!("/sandboxes/{id}"), &t, None);
}

#[test]
fn the_events_of_a_long_log_are_its_newest_asked_with_tail() {
    if !curl_available() {
        return skip("curl is not installed");
    }
    let state = TempDir::new("events-tail");
    let s = state.path();
    let d = Daemon::start(s, false);
    let (st, b) = call(
        &d,
        "POST",
        "/v1/sandboxes",
        Some(r#"{"name":"long","start":false}"#),
        None,
    );
    assert_eq!(st, 201, "{b}");
    let total = plant_events(s, "long", 12_345);
    let (st, b) = call(
        &d,
        "GET",
        "/v1/sandboxes/long/events?follow=false&tail=3",
        None,
        None,
    );
    assert_eq!(st, 200, "{b}");
    let ids: Vec<u64> = b
        .lines()
        .filter_map(|l| l.strip_prefix("id:"))
        .map(|n| n.trim().parse().unwrap())
        .collect();
    assert_eq!(ids, [total - 3, total - 2, total - 1], "{b}");
    // With `from` it is a question of another kind.
    let (st, _) = call(
        &d,
        "GET",
        "/v1/sandboxes/long/events?follow=false&tail=3&from=1",
        None,
        None,
    );
    assert_eq!(st, 400);
    let (st, _) = call(
        &d,
        "GET",
        "/v1/sandboxes/long/events?follow=false&tail=0",
        None,
        None,
    );
    assert_eq!(st, 400);
    ok(&warden(s, &["rm", "--force", "long"]));
}

/// Append `n` events to sandbox `name`'s log, each a copy of its first
/// with its own time (the first plus its number): the log's lines after.
fn plant_events(state: &Path, name: &str, n: u64) -> u64 {
    use std::io::Write;
    let log = sandbox_dir(state, name).join("audit.jsonl");
    let text = std::fs::read_to_string(&log).unwrap();
    let first: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    let mut out = String::new();
    for i in 0..n {
        let mut e = first.clone();
        e["ts_ms"] = (PLANTED_TS + i).into();
        out.push_str(&e.to_string());
        out.push('\n');
    }
    let mut f = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
    f.write_all(out.as_bytes()).unwrap();
    std::fs::read_to_string(&log).unwrap().lines().count() as u64
}

/// The time of the first planted event.
const PLANTED_TS: u64 = 4_000_000_000_000;

#[test]
fn the_mcp_event_log_resource_shows_the_newest_events_of_a_log_past_ten_thousand() {
    use rmcp::model::{CallToolRequestParams, ReadResourceRequestParams};
    use rmcp::transport::{ConfigureCommandExt, TokioChildProcess};
    use rmcp::ServiceExt;
    let state = TempDir::new("mcp-tail");
    let s = state.path();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let dir = s.join("warden");
        let cmd = tokio::process::Command::new(warden_bin()).configure(|c| {
            c.arg("mcp").env("WARDEN_STATE_DIR", &dir);
        });
        let c = tokio::time::timeout(
            Duration::from_secs(30),
            ().serve(TokioChildProcess::new(cmd).unwrap()),
        )
        .await
        .expect("the MCP server answered initialize in time")
        .unwrap();
        let args = serde_json::json!({"shell": "true"});
        let serde_json::Value::Object(args) = args else {
            unreachable!()
        };
        c.call_tool(CallToolRequestParams::new("run_command").with_arguments(args))
            .await
            .unwrap();
        let made: Vec<String> = std::fs::read_dir(dir.join("sandboxes"))
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(made.len(), 1, "{made:?}");
        let total = plant_events(s, &made[0], 12_000);
        let uri = format!("warden://sandboxes/{}/events", made[0]);
        let log = c
            .read_resource(ReadResourceRequestParams::new(uri))
            .await
            .unwrap();
        let text = format!("{:?}", log.contents);
        let newest = (PLANTED_TS + 11_999).to_string();
        assert!(
            text.contains(&newest),
            "the newest event is not shown: {}",
            &text[text.len().saturating_sub(600)..]
        );
        // Every event before the newest 2000 is left out, and said to be
        // (the sandbox may have logged more since they were planted).
        let left_out: u64 = text
            .split("the first ")
            .nth(1)
            .and_then(|r| r.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no note: {}", &text[..text.len().min(400)]));
        assert!(left_out >= total - 2000, "{left_out} of {total}");
        c.cancel().await.unwrap();
    });
}

#[test]
fn a_label_filter_never_matches_the_record_of_an_earlier_sandbox_of_the_name() {
    let state = TempDir::new("label-stale");
    let s = state.path();
    let d = Daemon::start_with(s, false, &[], &[]);
    let (st, b) = call(
        &d,
        "POST",
        "/v1/sandboxes",
        Some(r#"{"name":"lab","labels":{"team":"a"}}"#),
        None,
    );
    assert_eq!(st, 201, "{b}");
    let listed = |d: &Daemon| {
        let (st, b) = call(d, "GET", "/v1/sandboxes?label=team=a", None, None);
        assert_eq!(st, 200, "{b}");
        json(&b)["sandboxes"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|x| x["id"].as_str().map(str::to_string))
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default()
    };
    assert_eq!(listed(&d), ["lab"]);
    // Removed behind the daemon's back; the owner's CLI makes another
    // sandbox of the name, which never had the label.
    ok(&warden(s, &["rm", "--force", "lab"]));
    std::thread::sleep(Duration::from_millis(50));
    ok(&warden(s, &["create", "lab"]));
    assert!(
        listed(&d).is_empty(),
        "the label of the record of an earlier `lab` matched"
    );
    ok(&warden(s, &["rm", "--force", "lab"]));
}
