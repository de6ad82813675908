//! A token's forks and events against its bounds, through a real
//! daemon: a fork that does not fit the token's quota writes no copy at
//! all (the quota of every copy is reserved before the first is made),
//! and the events a token reads carry no host PID.

use crate::common::daemon::{call_on, curl_available, json, over_tcp, quota_token, Daemon};
use crate::common::*;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

#[test]
fn a_token_at_its_quota_forking_sixteen_leaves_no_copy_written_even_for_a_moment() {
    let Some((state, d)) = over_tcp("fork-quota") else {
        return;
    };
    let t = quota_token(state.path(), "forker", "2");
    let call = |method: &str, path: &str, body: Option<&str>| {
        call_on(&d, true, method, path, body, Some(&t))
    };
    let (s, b) = call("POST", "/v1/sandboxes", Some(r#"{"name":"src"}"#));
    assert_eq!(s, 201, "{b}");
    // A layer large enough that sixteen copies take a while to write.
    let (s, b) = call(
        "POST",
        "/v1/sandboxes/src/exec",
        Some(r#"{"shell":"head -c 8000000 /dev/urandom > /workspace/blob"}"#),
    );
    assert_eq!(s, 200, "{b}");
    let sandboxes = state.path().join("warden/sandboxes");
    let others = || {
        std::fs::read_dir(&sandboxes)
            .map(|rd| rd.flatten().filter(|e| e.file_name() != "src").count())
            .unwrap_or(0)
    };
    assert_eq!(others(), 0);
    let done = AtomicBool::new(false);
    let most = AtomicUsize::new(0);
    let status = std::thread::scope(|scope| {
        scope.spawn(|| {
            while !done.load(Ordering::SeqCst) {
                most.fetch_max(others(), Ordering::SeqCst);
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        });
        let (s, b) = call("POST", "/v1/sandboxes/src/fork", Some(r#"{"count":16}"#));
        done.store(true, Ordering::SeqCst);
        (s, b)
    });
    assert_eq!(status.0, 429, "{}", status.1);
    assert_eq!(
        most.load(Ordering::SeqCst),
        0,
        "a fork refused for the quota wrote copies before it was refused"
    );
    assert_eq!(others(), 0);
    // What fits is still made, all of it: one more sandbox.
    let (s, b) = call("POST", "/v1/sandboxes/src/fork", Some(r#"{"count":1}"#));
    assert_eq!(s, 201, "{b}");
    assert_eq!(json(&b)["sandboxes"].as_array().map(Vec::len), Some(1));
    // A process sandbox's fork carries no memory, and the answer says so
    // and why.
    assert_eq!(json(&b)["memory"], false, "{b}");
    assert!(
        json(&b)["memory_why"]
            .as_str()
            .is_some_and(|w| w.contains("CRIU")),
        "{b}"
    );
    let (s, b) = call("POST", "/v1/sandboxes/src/fork", Some(r#"{"count":1}"#));
    assert_eq!(s, 429, "{b}");
}

#[test]
fn the_started_event_a_token_reads_carries_no_host_pid() {
    let Some((state, d)) = over_tcp("fork-quota-pid") else {
        return;
    };
    let t = quota_token(state.path(), "reader", "2");
    let (s, b) = call_on(
        &d,
        true,
        "POST",
        "/v1/sandboxes",
        Some(r#"{"name":"seen"}"#),
        Some(&t),
    );
    assert_eq!(s, 201, "{b}");
    let events = "/v1/sandboxes/seen/events?from=0&follow=false";
    let started = |text: &str| -> serde_json::Value {
        text.lines()
            .filter_map(|l| {
                serde_json::from_str::<serde_json::Value>(l.trim_start_matches("data:").trim()).ok()
            })
            .find(|v| v["event"] == "started")
            .unwrap_or_else(|| panic!("no started event in {text}"))
    };
    let (s, b) = call_on(&d, true, "GET", events, None, Some(&t));
    assert_eq!(s, 200, "{b}");
    let seen = started(&b);
    assert!(seen.get("pid").is_none(), "a token was shown {seen}");
    // The owner is shown it: the event had one to take out.
    let (s, b) = call_on(&d, false, "GET", events, None, None);
    assert_eq!(s, 200, "{b}");
    assert!(started(&b)["pid"].as_i64().is_some_and(|p| p > 1), "{b}");
}

#[test]
fn a_tokens_vm_sandboxes_count_against_its_memory_quota_with_their_vmm() {
    if !curl_available() {
        return skip("curl is not installed");
    }
    // `guest_release` says why when the host has no guest kernel.
    if crate::common::vm::guest_release().is_none() {
        return;
    }
    let state = TempDir::new("fork-quota-vm");
    let vm_dir = crate::common::vm::vm_dir();
    let d = Daemon::start_with(state.path(), true, &[], &[("WARDEN_VM_DIR", &vm_dir)]);
    let t = ok(&warden(
        state.path(),
        &[
            "token",
            "create",
            "vms",
            "--scope",
            "sandboxes:write",
            "--max-memory",
            "1G",
        ],
    ))
    .trim()
    .lines()
    .last()
    .unwrap()
    .to_string();
    let create = |name: &str| {
        let body = format!(
            r#"{{"name":"{name}","start":false,"spec":{{"isolation":"vm","resources":{{"memory":"256M"}}}}}}"#
        );
        call_on(&d, true, "POST", "/v1/sandboxes", Some(&body), Some(&t))
    };
    // One guest of 256 MiB takes 640 MiB with its VMM: it fits in 1 GiB.
    let (s, b) = create("vm1");
    assert_eq!(s, 201, "{b}");
    // A second one would make 1.25 GiB, though its guests' RAM is 512 MiB.
    let (s, b) = create("vm2");
    assert_eq!(s, 429, "{b}");
    assert_eq!(json(&b)["field"], "/spec/resources/memory", "{b}");
    // A process sandbox of the same limit still fits: only what the
    // sandbox may hold is counted.
    let (s, b) = call_on(
        &d,
        true,
        "POST",
        "/v1/sandboxes",
        Some(r#"{"name":"p1","start":false,"spec":{"resources":{"memory":"256M"}}}"#),
        Some(&t),
    );
    assert_eq!(s, 201, "{b}");
}
