//! A sandbox name one caller holds, asked for by another: the create (or
//! the copy from a snapshot) is refused with 409 `name_taken`, which says
//! that and nothing more, and touches nothing of the holder's sandbox:
//! its own workspace (`workspaces/NAME`, the lower of its overlay, empty
//! while its writes sit in its layer) stays, so it still forks, stops and
//! starts with its changes. Through the real daemon, two tokens.

use crate::common::daemon::{api_token, call, json, on_socket, Daemon, WORKER_SCOPES};

fn sh(d: &Daemon, t: &str, sb: &str, script: &str) -> String {
    let body = serde_json::json!({ "argv": ["sh", "-c", script] }).to_string();
    let (s, b) = call(
        d,
        "POST",
        &format!("/v1/sandboxes/{sb}/exec"),
        Some(&body),
        Some(t),
    );
    assert!(s == 200 || s == 201, "{script}: {s} {b}");
    json(&b)["stdout"].as_str().unwrap_or("").to_string()
}

/// The 409 a refused name gets: it says the name is taken, no more.
fn only_taken(s: u16, b: &str, name: &str) {
    assert_eq!(s, 409, "{b}");
    let v = json(b);
    assert_eq!(v["reason"], "name_taken", "{b}");
    let message = v["message"].as_str().unwrap_or("");
    assert_eq!(
        message,
        format!("the name {name:?} is taken: choose another name"),
        "{b}"
    );
}

#[test]
fn a_create_under_another_tokens_sandbox_name_is_refused_and_leaves_that_sandbox_whole() {
    let Some((state, d)) = on_socket("names-create") else {
        return;
    };
    let ta = api_token(&d, "ta", WORKER_SCOPES, None);
    let tb = api_token(&d, "tb", WORKER_SCOPES, None);
    let (s, b) = call(
        &d,
        "POST",
        "/v1/sandboxes",
        Some(r#"{"name":"victim1"}"#),
        Some(&ta),
    );
    assert_eq!(s, 201, "{b}");
    sh(&d, &ta, "victim1", "echo precious > /workspace/data.txt");
    let own = state.path().join("warden/workspaces/victim1");
    assert!(own.is_dir(), "no own workspace at {}", own.display());
    // B asks for the name, with a body like A's and with a different one.
    for body in [
        r#"{"name":"victim1"}"#,
        r#"{"name":"victim1","spec":{"resources":{"memory":"256M"}}}"#,
    ] {
        let (s, b) = call(&d, "POST", "/v1/sandboxes", Some(body), Some(&tb));
        only_taken(s, &b, "victim1");
        assert!(
            own.is_dir(),
            "B's refused create removed A's workspace {}",
            own.display()
        );
    }
    // A's sandbox still forks, stops and starts, its change kept.
    let (s, b) = call(
        &d,
        "POST",
        "/v1/sandboxes/victim1/fork",
        Some(r#"{"count":1}"#),
        Some(&ta),
    );
    assert!(s == 200 || s == 201, "A's fork: {s} {b}");
    for step in ["stop", "start"] {
        let (s, b) = call(
            &d,
            "POST",
            &format!("/v1/sandboxes/victim1/{step}"),
            None,
            Some(&ta),
        );
        assert!(s == 200 || s == 204, "A's {step}: {s} {b}");
    }
    assert_eq!(
        sh(&d, &ta, "victim1", "cat /workspace/data.txt"),
        "precious\n"
    );
}

#[test]
fn a_copy_from_a_snapshot_under_another_tokens_sandbox_name_is_refused_and_leaves_that_sandbox_whole(
) {
    let Some((state, d)) = on_socket("names-copy") else {
        return;
    };
    let ta = api_token(&d, "ta", WORKER_SCOPES, None);
    let tb = api_token(&d, "tb", WORKER_SCOPES, None);
    for (t, name) in [(&ta, "victim2"), (&tb, "bsrc")] {
        let body = format!(r#"{{"name":"{name}"}}"#);
        let (s, b) = call(&d, "POST", "/v1/sandboxes", Some(&body), Some(t));
        assert_eq!(s, 201, "{b}");
    }
    sh(&d, &ta, "victim2", "echo precious > /workspace/data.txt");
    let (s, b) = call(
        &d,
        "POST",
        "/v1/sandboxes/bsrc/snapshots",
        Some(r#"{"name":"bsnap"}"#),
        Some(&tb),
    );
    assert!(s == 200 || s == 201, "{b}");
    let own = state.path().join("warden/workspaces/victim2");
    assert!(own.is_dir());
    let (s, b) = call(
        &d,
        "POST",
        "/v1/snapshots/bsnap/sandboxes",
        Some(r#"{"name":"victim2"}"#),
        Some(&tb),
    );
    only_taken(s, &b, "victim2");
    assert!(
        own.is_dir(),
        "B's refused copy removed A's workspace {}",
        own.display()
    );
    for step in ["stop", "start"] {
        let (s, b) = call(
            &d,
            "POST",
            &format!("/v1/sandboxes/victim2/{step}"),
            None,
            Some(&ta),
        );
        assert!(s == 200 || s == 204, "A's {step}: {s} {b}");
    }
    assert_eq!(
        sh(&d, &ta, "victim2", "cat /workspace/data.txt"),
        "precious\n"
    );
}

#[test]
fn a_create_under_the_name_of_the_owners_sandbox_not_yet_started_leaves_it_startable() {
    let Some((state, d)) = on_socket("names-owner") else {
        return;
    };
    let tb = api_token(&d, "tb", WORKER_SCOPES, None);
    let (s, b) = call(
        &d,
        "POST",
        "/v1/sandboxes",
        Some(r#"{"name":"own1","start":false}"#),
        None,
    );
    assert_eq!(s, 201, "{b}");
    let (s, b) = call(
        &d,
        "POST",
        "/v1/sandboxes",
        Some(r#"{"name":"own1"}"#),
        Some(&tb),
    );
    only_taken(s, &b, "own1");
    assert!(state.path().join("warden/workspaces/own1").is_dir());
    let (s, b) = call(&d, "POST", "/v1/sandboxes/own1/start", None, None);
    assert!(s == 200 || s == 204, "the owner's start: {s} {b}");
}
