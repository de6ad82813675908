//! `warden serve` through real HTTP, as a client uses it: sandboxes made,
//! commands run whole, streamed and in the background, output read again
//! after a reconnect, the daemon killed with SIGKILL and started again,
//! every route walked with a token that lacks its scope, and each class
//! of bad input answered with its status and no change.

use crate::common::daemon::*;
use crate::common::*;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Nothing the requests before made is in the daemon's list of
/// sandboxes.
fn assert_no_sandbox_is_listed(d: &Daemon) {
    let (_, b) = call(d, "GET", "/v1/sandboxes", None, None);
    assert_eq!(json(&b)["sandboxes"].as_array().unwrap().len(), 0, "{b}");
}

#[test]
fn a_sandbox_is_made_used_and_removed_through_the_api() {
    let Some((state, d)) = on_socket("api-life") else {
        return;
    };
    let (s, b) = call(
        &d,
        "POST",
        "/v1/sandboxes",
        Some(r#"{"name":"life","labels":{"team":"a"},"ttl_seconds":600}"#),
        None,
    );
    assert_eq!(s, 201, "{b}");
    let info = json(&b);
    assert_eq!(info["state"], "running");
    assert!(info["ttl_deadline_ms"].as_u64().unwrap() > 0);
    // Whole.
    let (s, b) = call(
        &d,
        "POST",
        "/v1/sandboxes/life/exec",
        Some(r#"{"shell":"echo out; echo err >&2; exit 3"}"#),
        None,
    );
    assert_eq!(s, 200, "{b}");
    let r = json(&b);
    assert_eq!(
        (
            r["exit_status"].as_i64(),
            r["stdout"].as_str(),
            r["stderr"].as_str()
        ),
        (Some(3), Some("out\n"), Some("err\n"))
    );
    // Streamed: each line comes as its own event, then the end.
    let (s, b) = call(
        &d,
        "POST",
        "/v1/sandboxes/life/exec",
        Some(r#"{"argv":["sh","-c","for i in 1 2 3; do echo $i; done"],"stream":true}"#),
        None,
    );
    assert_eq!(s, 200, "{b}");
    let lines: Vec<serde_json::Value> = b.lines().map(json).collect();
    assert_eq!(lines[0]["type"], "started");
    let text: String = lines
        .iter()
        .filter(|l| l["type"] == "stdout")
        .map(|l| l["data"].as_str().unwrap())
        .collect();
    assert_eq!(text, "1\n2\n3\n");
    assert_eq!(lines.last().unwrap()["type"], "exited");
    // Stdin given whole.
    let (_, b) = call(
        &d,
        "POST",
        "/v1/sandboxes/life/exec",
        Some(r#"{"argv":["cat"],"stdin":"fed in"}"#),
        None,
    );
    assert_eq!(json(&b)["stdout"], "fed in");
    a_background_command_is_fed_signalled_and_read_again(&d, state.path());
    // Listed with its label; the events replay from an offset.
    let (_, b) = call(&d, "GET", "/v1/sandboxes?label=team=a", None, None);
    assert_eq!(json(&b)["sandboxes"].as_array().unwrap().len(), 1);
    let (_, b) = call(&d, "GET", "/v1/sandboxes?label=team=b", None, None);
    assert_eq!(json(&b)["sandboxes"].as_array().unwrap().len(), 0);
    let (_, b) = call(
        &d,
        "GET",
        "/v1/sandboxes/life/events?follow=false&from=1",
        None,
        None,
    );
    assert!(!b.contains("id: 0\n"), "{b}");
    assert!(b.contains("\"event\":\"exec_exited\""), "{b}");
    // TTL moved, then stop and remove: nothing of it stays.
    let (s, b) = call(
        &d,
        "POST",
        "/v1/sandboxes/life/timeout",
        Some(r#"{"ttl_seconds":5000}"#),
        None,
    );
    assert_eq!(s, 200, "{b}");
    assert!(
        json(&b)["ttl_deadline_ms"].as_u64().unwrap() > info["ttl_deadline_ms"].as_u64().unwrap()
    );
    let cg = sandbox_cgroups(state.path(), "life");
    let (s, b) = call(&d, "POST", "/v1/sandboxes/life/stop", None, None);
    assert_eq!(s, 200, "{b}");
    assert_eq!(json(&b)["state"], "stopped");
    let (s, _) = call(&d, "DELETE", "/v1/sandboxes/life", None, None);
    assert_eq!(s, 204);
    assert!(!sandbox_dir(state.path(), "life").exists());
    for c in cg {
        assert!(!c.exists(), "cgroup {} left behind", c.display());
    }
    let (s, _) = call(&d, "GET", "/v1/sandboxes/life", None, None);
    assert_eq!(s, 404);
}

/// In the background, with stdin kept open, then signalled: the command
/// is fed, and its output read again from an offset, to its end.
fn a_background_command_is_fed_signalled_and_read_again(d: &Daemon, state: &std::path::Path) {
    let (s, b) = call(
        d,
        "POST",
        "/v1/sandboxes/life/exec",
        Some(r#"{"shell":"read x; echo got $x; sleep 60","background":true,"stdin_open":true}"#),
        None,
    );
    assert_eq!(s, 202, "{b}");
    let ex = json(&b)["id"].as_str().unwrap().to_string();
    let (s, b) = call(
        d,
        "POST",
        &format!("/v1/sandboxes/life/execs/{ex}/stdin"),
        Some(r#"{"data":"hello\n"}"#),
        None,
    );
    assert_eq!(s, 204, "{b}");
    wait_until("the command to answer", Duration::from_secs(10), || {
        std::fs::read_to_string(
            sandbox_dir(state, "life")
                .join("execs")
                .join(format!("{ex}.stdout")),
        )
        .unwrap_or_default()
        .contains("got hello")
    });
    let (s, b) = call(
        d,
        "POST",
        &format!("/v1/sandboxes/life/execs/{ex}/signal"),
        Some(r#"{"signal":"TERM"}"#),
        None,
    );
    assert_eq!(s, 204, "{b}");
    // Its output read again from an offset, to its end.
    let (s, b) = call(
        d,
        "GET",
        &format!("/v1/sandboxes/life/execs/{ex}/output?stdout_offset=4"),
        None,
        None,
    );
    assert_eq!(s, 200, "{b}");
    let lines: Vec<serde_json::Value> = b.lines().map(json).collect();
    assert_eq!(lines[0]["data"], "hello\n", "{b}");
    assert_eq!(lines[0]["offset"], 4);
    let end = lines.last().unwrap();
    assert_eq!(
        (end["type"].as_str(), end["exit_status"].as_i64()),
        (Some("exited"), Some(143)),
        "{b}"
    );
}

#[test]
fn a_daemon_killed_mid_command_loses_neither_the_sandbox_nor_the_output() {
    let Some((state, mut d)) = on_socket("api-kill") else {
        return;
    };
    let (s, b) = call(
        &d,
        "POST",
        "/v1/sandboxes",
        Some(r#"{"name":"k9","ttl_seconds":4}"#),
        None,
    );
    assert_eq!(s, 201, "{b}");
    let (_, b) = call(
        &d,
        "POST",
        "/v1/sandboxes/k9/exec",
        Some(r#"{"shell":"echo before; sleep 1.5; echo after; exit 7","background":true}"#),
        None,
    );
    let ex = json(&b)["id"].as_str().unwrap().to_string();
    let supervisor = supervisor_pid(state.path(), "k9");
    d.kill9();
    std::thread::sleep(Duration::from_millis(300));
    assert!(alive(supervisor), "the sandbox died with the daemon");
    let d = Daemon::start(state.path(), false);
    let (s, b) = call(
        &d,
        "GET",
        &format!("/v1/sandboxes/k9/execs/{ex}/output"),
        None,
        None,
    );
    assert_eq!(s, 200, "{b}");
    assert!(b.contains("before") && b.contains("after"), "{b}");
    let end = json(b.lines().last().unwrap());
    assert_eq!(end["exit_status"], 7, "{b}");
    // The TTL given before the kill still holds.
    wait_until(
        "the TTL to stop the sandbox",
        Duration::from_secs(20),
        || !alive(supervisor),
    );
    let (_, b) = call(&d, "GET", "/v1/sandboxes/k9", None, None);
    assert_eq!(json(&b)["state"], "stopped");
    let (_, b) = call(
        &d,
        "GET",
        &format!("/v1/sandboxes/k9/execs/{ex}"),
        None,
        None,
    );
    assert_eq!(json(&b)["exit_status"], 7, "{b}");
    let _ = d.pid();
}

#[test]
fn every_route_refuses_a_token_that_lacks_its_scope() {
    let Some((state, d)) = over_tcp("api-auth") else {
        return;
    };
    let (s, b) = call(
        &d,
        "POST",
        "/v1/sandboxes",
        Some(r#"{"name":"mine","start":false}"#),
        None,
    );
    assert_eq!(s, 201, "{b}");
    ok(&warden(state.path(), &["create", "other"]));
    let token = |name: &str, scopes: &[&str], sandbox: Option<&str>| match sandbox {
        Some(sb) => token_for(state.path(), name, scopes, sb),
        None => crate::common::daemon::token(state.path(), name, scopes),
    };
    let all = [
        "sandboxes:read",
        "sandboxes:write",
        "exec",
        "files",
        "approvals",
        "desktop:view",
        "desktop:control",
    ];
    for route in warden_daemon::auth::ROUTES {
        let Some(scope) = route.scope else { continue };
        // Every scope but the one the route needs and those that grant it.
        let without: Vec<&str> = all
            .iter()
            .copied()
            .filter(|s| !warden_daemon::auth::Scope::parse(s).unwrap().grants(scope))
            .collect();
        let t = token(
            &format!("no-{}", scope.as_str().replace(':', "-")),
            &without,
            None,
        );
        let path = route
            .path
            .replace("{id}", "mine")
            .replace("{exec}", "ex-0")
            .replace("{token}", "x")
            .replace("{kind}", "page")
            .replace("{target}", "x");
        let body = (route.method != "GET" && route.method != "DELETE").then_some("{}");
        let (s, b) = call_on(&d, true, route.method, &path, body, Some(&t));
        assert_eq!(
            s,
            403,
            "{} {} with a token lacking {}: {b}",
            route.method,
            path,
            scope.as_str()
        );
        assert_eq!(json(&b)["code"], "forbidden");
    }
    // Over TCP a call without a token, with a wrong one, or with a
    // revoked one is refused; over the owner-only socket the owner needs
    // none.
    let (s, _) = call_on(&d, true, "GET", "/v1/sandboxes", None, None);
    assert_eq!(s, 401);
    let (s, _) = call_on(
        &d,
        true,
        "GET",
        "/v1/sandboxes",
        None,
        Some("wdn_000000000000_nope"),
    );
    assert_eq!(s, 401);
    let reader = token("reader", &["sandboxes:read"], None);
    let (s, _) = call_on(&d, true, "GET", "/v1/sandboxes", None, Some(&reader));
    assert_eq!(s, 200);
    ok(&warden(state.path(), &["token", "revoke", "reader"]));
    let (s, b) = call_on(&d, true, "GET", "/v1/sandboxes", None, Some(&reader));
    assert_eq!(s, 401, "{b}");
    assert!(b.contains("revoked"), "{b}");
    let (s, _) = call(&d, "GET", "/v1/sandboxes", None, None);
    assert_eq!(s, 200);
    // A per-sandbox token reaches its own sandbox's data API only.
    let agent = token(
        "agent",
        &["exec", "sandboxes:read", "sandboxes:write"],
        Some("mine"),
    );
    let (s, _) = call_on(&d, true, "GET", "/v1/sandboxes/mine", None, Some(&agent));
    assert_eq!(s, 200);
    let (s, _) = call_on(&d, true, "GET", "/v1/sandboxes/other", None, Some(&agent));
    assert_eq!(s, 403);
    let (s, _) = call_on(&d, true, "DELETE", "/v1/sandboxes/mine", None, Some(&agent));
    assert_eq!(s, 403);
    let (s, _) = call_on(&d, true, "GET", "/v1/sandboxes", None, Some(&agent));
    assert_eq!(s, 403);
    assert!(state.path().join("warden/sandboxes/mine").exists());
    // Each refusal is in the daemon's audit log, which verifies.
    let audit = state.path().join("warden/daemon-audit.jsonl");
    let denials = events(&audit)
        .iter()
        .filter(|e| e["event"] == "api_denied")
        .count();
    assert!(
        denials >= warden_daemon::auth::ROUTES.len() - 2,
        "{denials} denials recorded"
    );
    let verify = warden(state.path(), &["audit", "verify", audit.to_str().unwrap()]);
    assert_eq!(code(&verify), 0, "{}", stderr(&verify));
    // The socket is the owner's only.
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&d.socket).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
}

/// Bad requests, each with the status and code it gets: method, path,
/// body, status, code.
const BAD_INPUT: &[(&str, &str, Option<&str>, u16, &str)] = &[
    (
        "POST",
        "/v1/sandboxes",
        Some("{not json"),
        400,
        "bad_request",
    ),
    (
        "POST",
        "/v1/sandboxes",
        Some(r#"{"nmae":"x"}"#),
        422,
        "invalid_body",
    ),
    (
        "POST",
        "/v1/sandboxes",
        Some(r#"{"name":"../x"}"#),
        400,
        "bad_request",
    ),
    (
        "POST",
        "/v1/sandboxes",
        Some(r#"{"workspace":"relative/dir"}"#),
        400,
        "bad_request",
    ),
    (
        "POST",
        "/v1/sandboxes",
        Some(r#"{"workspace":"/nonexistent/dir"}"#),
        400,
        "bad_request",
    ),
    (
        "POST",
        "/v1/sandboxes",
        Some(r#"{"spec":{"resources":{"memory":"lots"}}}"#),
        422,
        "invalid_spec",
    ),
    (
        "POST",
        "/v1/sandboxes",
        Some(r#"{"spec":{"audit_log":"/tmp/elsewhere"}}"#),
        422,
        "invalid_spec",
    ),
    (
        "POST",
        "/v1/sandboxes",
        Some(r#"{"spec":[1]}"#),
        422,
        "invalid_spec",
    ),
    (
        "POST",
        "/v1/sandboxes",
        Some(r#"{"profile":"no-such-profile"}"#),
        422,
        "invalid_spec",
    ),
    (
        "POST",
        "/v1/sandboxes",
        Some(r#"{"profile":"/etc/passwd"}"#),
        422,
        "invalid_spec",
    ),
    ("GET", "/v1/sandboxes/nope", None, 404, "not_found"),
    (
        "POST",
        "/v1/sandboxes/nope/exec",
        Some(r#"{"argv":["true"]}"#),
        404,
        "not_found",
    ),
    (
        "GET",
        "/v1/sandboxes?state=sideways",
        None,
        400,
        "bad_request",
    ),
    ("GET", "/v1/nowhere", None, 404, "not_found"),
];

#[test]
fn bad_input_gets_its_status_and_changes_nothing() {
    let Some((state, d)) = on_socket("api-bad") else {
        return;
    };
    for (method, path, body, status, code) in BAD_INPUT {
        let (s, b) = call(&d, method, path, *body, None);
        assert_eq!(s, *status, "{method} {path} {body:?}: {b}");
        let p = json(&b);
        assert_eq!(p["code"], *code, "{b}");
        assert!(p["message"].as_str().unwrap().len() > 10, "{b}");
    }
    // The field at fault is named.
    let (_, b) = call(
        &d,
        "POST",
        "/v1/sandboxes",
        Some(r#"{"spec":{"resources":{"memory":"lots"}}}"#),
        None,
    );
    assert_eq!(json(&b)["field"], "/spec/resources/memory", "{b}");
    // A body beyond the limit.
    let big = format!(
        r#"{{"name":"x","labels":{{"k":"{}"}}}}"#,
        "a".repeat(5 << 20)
    );
    let file = state.path().join("big.json");
    std::fs::write(&file, big).unwrap();
    let (s, _) = call(
        &d,
        "POST",
        "/v1/sandboxes",
        Some(&format!("@{}", file.display())),
        None,
    );
    assert_eq!(s, 413);
    // Nothing was made by any of it.
    assert_no_sandbox_is_listed(&d);
}

/// Where a sandbox's events go is the daemon's to decide: the field
/// table's `doors` column keeps those fields out of every API request,
/// the owner's included, refused at the value's pointer with the reason
/// `not_this_door`, and nothing is written where the body pointed.
#[test]
fn no_api_request_says_where_a_sandboxs_events_go_and_the_refusal_names_its_pointer_and_reason() {
    let Some((state, d)) = over_tcp("api-doors") else {
        return;
    };
    let t = ok(&warden(
        state.path(),
        &["token", "create", "w", "--scope", "sandboxes:write"],
    ))
    .trim()
    .to_string();
    let planted = state.path().join("written-by-request");
    let file = planted.display().to_string();
    for (key, value) in [
        ("audit_log", format!("{file:?}")),
        ("json_events", format!("{file:?}")),
        ("no_audit_log", "true".to_string()),
        ("otlp_endpoint", "\"http://127.0.0.1:9/\"".to_string()),
    ] {
        let body = format!(r#"{{"spec":{{"hostname":"h","{key}":{value}}}}}"#);
        for token in [None, Some(t.as_str())] {
            let (s, b) = call_on(
                &d,
                token.is_some(),
                "POST",
                "/v1/sandboxes",
                Some(&body),
                token,
            );
            assert_eq!(s, 422, "{key} {token:?}: {b}");
            let p = json(&b);
            assert_eq!(p["code"], "invalid_spec", "{b}");
            assert_eq!(p["reason"], "not_this_door", "{b}");
            assert_eq!(p["field"], format!("/spec/{key}"), "{b}");
            let message = p["message"].as_str().unwrap_or_default();
            assert!(message.contains(&format!("`/{key}`")), "{b}");
            assert!(!message.contains("--"), "a flag in the API's words: {b}");
        }
    }
    assert!(!planted.exists(), "a request chose a file the daemon wrote");
    assert_no_sandbox_is_listed(&d);
}

#[test]
fn changes_a_sandbox_is_not_in_the_state_for_and_execs_that_cannot_run_are_refused() {
    let Some((_state, d)) = on_socket("api-bad-state") else {
        return;
    };
    // Illegal state changes on a stopped sandbox.
    let (s, _) = call(
        &d,
        "POST",
        "/v1/sandboxes",
        Some(r#"{"name":"idle","start":false}"#),
        None,
    );
    assert_eq!(s, 201);
    for (method, path, body) in [
        ("POST", "/v1/sandboxes/idle/stop", None),
        (
            "POST",
            "/v1/sandboxes/idle/exec",
            Some(r#"{"argv":["true"]}"#),
        ),
        (
            "POST",
            "/v1/sandboxes/idle/timeout",
            Some(r#"{"ttl_seconds":5}"#),
        ),
    ] {
        let (s, b) = call(&d, method, path, body, None);
        assert_eq!(s, 409, "{method} {path}: {b}");
    }
    let (s, b) = call(&d, "POST", "/v1/sandboxes/idle/start", None, None);
    assert_eq!(s, 200, "{b}");
    let (s, b) = call(
        &d,
        "POST",
        "/v1/sandboxes/idle/exec",
        Some(r#"{"argv":["no-such-program"]}"#),
        None,
    );
    assert_eq!(
        (s, json(&b)["code"].as_str()),
        (422, Some("not_found")),
        "{b}"
    );
    let (s, b) = call(
        &d,
        "POST",
        "/v1/sandboxes/idle/exec",
        Some(r#"{"argv":[]}"#),
        None,
    );
    assert_eq!(s, 400, "{b}");
    let (s, b) = call(
        &d,
        "POST",
        "/v1/sandboxes/idle/exec",
        Some(r#"{"argv":["true"],"timeout_seconds":-1}"#),
        None,
    );
    assert_eq!(s, 400, "{b}");
    let (s, b) = call(
        &d,
        "POST",
        "/v1/sandboxes",
        Some(r#"{"name":"idle"}"#),
        None,
    );
    assert_eq!(s, 409, "{b}");
}

#[test]
fn a_commands_timeout_kills_it_and_says_so() {
    let Some((_state, d)) = on_socket("api-timeout") else {
        return;
    };
    assert_eq!(
        call(&d, "POST", "/v1/sandboxes", Some(r#"{"name":"to"}"#), None).0,
        201
    );
    let t = Instant::now();
    let (s, b) = call(
        &d,
        "POST",
        "/v1/sandboxes/to/exec",
        Some(r#"{"argv":["sleep","30"],"timeout_seconds":0.5}"#),
        None,
    );
    assert_eq!(s, 200, "{b}");
    let r = json(&b);
    assert_eq!(
        (r["exit_status"].as_i64(), r["timed_out"].as_bool()),
        (Some(124), Some(true)),
        "{b}"
    );
    assert!(t.elapsed() < Duration::from_secs(10));
}

#[test]
fn a_token_holder_cannot_reach_into_the_daemons_host_through_a_spec() {
    let Some((state, d)) = over_tcp("api-host") else {
        return;
    };
    let t = token(state.path(), "writer", &["sandboxes:write", "exec"]);
    // A secret whose source is a program would run it on the host as the
    // daemon's user; each other key reaches host paths, services or
    // networks.
    let marker = state.path().join("ran-on-host");
    let home = state.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::write(home.join("id_rsa"), "PRIVATE-KEY-MARKER").unwrap();
    let attempts = [
        format!(
            r#"{{"spec":{{"secrets":["X=cmd:touch {}@example.com"]}}}}"#,
            marker.display()
        ),
        format!(
            r#"{{"spec":{{"filesystem":{{"read_only":["{}"]}}}}}}"#,
            home.display()
        ),
        format!(
            r#"{{"spec":{{"filesystem":{{"workspace":"{}"}}}}}}"#,
            home.display()
        ),
        r#"{"spec":{"egress":{"host_ports":[22]}}}"#.to_string(),
        r#"{"spec":{"env":{"pass":["HOME"]}}}"#.to_string(),
        r#"{"spec":{"allow_degraded":true}}"#.to_string(),
        r#"{"spec":{"extends":["/etc/passwd"]}}"#.to_string(),
        format!(r#"{{"workspace":"{}"}}"#, home.display()),
    ];
    for body in &attempts {
        let (s, b) = call_on(&d, true, "POST", "/v1/sandboxes", Some(body), Some(&t));
        assert!(s == 403 || s == 422, "{body}: {s} {b}");
        assert!(!b.contains("PRIVATE-KEY-MARKER"), "{b}");
    }
    assert!(!marker.exists(), "a secret's program ran on the host");
    assert_no_sandbox_is_listed(&d);
    // The owner, on its own socket, may.
    let (s, b) = call(
        &d,
        "POST",
        "/v1/sandboxes",
        Some(&format!(
            r#"{{"name":"own","workspace":"{}"}}"#,
            home.display()
        )),
        None,
    );
    assert_eq!(s, 201, "{b}");
    let (_, b) = call(
        &d,
        "POST",
        "/v1/sandboxes/own/exec",
        Some(r#"{"argv":["cat","id_rsa"]}"#),
        None,
    );
    assert_eq!(json(&b)["stdout"], "PRIVATE-KEY-MARKER");
}

/// The sandboxes' cgroup directories of this state (by the names warden
/// gives them).
fn warden_cgroups(prefix: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for root in [
        "/sys/fs/cgroup",
        "/sys/fs/cgroup/memory",
        "/sys/fs/cgroup/pids",
        "/sys/fs/cgroup/cpu",
    ] {
        for dir in [PathBuf::from(root).join("warden"), PathBuf::from(root)] {
            if let Ok(rd) = std::fs::read_dir(&dir) {
                for e in rd.flatten() {
                    if e.file_name().to_string_lossy().starts_with(prefix) {
                        out.push(e.path());
                    }
                }
            }
        }
    }
    out
}

#[test]
fn a_hundred_concurrent_sandboxes_leave_nothing_behind() {
    let Some((state, d)) = on_socket("api-many") else {
        return;
    };
    let fds = |pid: i32| {
        std::fs::read_dir(format!("/proc/{pid}/fd"))
            .unwrap()
            .count()
    };
    // Warm the daemon's own descriptors (its pools) before counting.
    call(&d, "GET", "/v1/sandboxes", None, None);
    let fds_before = fds(d.pid());
    let tag = unique("many");
    let n = 100;
    let d = std::sync::Arc::new(d);
    let workers: Vec<_> = (0..n)
        .map(|i| {
            let d = d.clone();
            let name = format!("{tag}-{i}");
            std::thread::spawn(move || {
                let body = format!(r#"{{"name":"{name}"}}"#);
                let (s, b) = call(&d, "POST", "/v1/sandboxes", Some(&body), None);
                assert_eq!(s, 201, "{b}");
                let (s, b) = call(
                    &d,
                    "POST",
                    &format!("/v1/sandboxes/{name}/exec"),
                    Some(&format!(r#"{{"argv":["echo","{name}"]}}"#)),
                    None,
                );
                assert_eq!(s, 200, "{b}");
                assert_eq!(json(&b)["stdout"], format!("{name}\n"));
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    let (_, b) = call(&d, "GET", "/v1/sandboxes?state=running", None, None);
    assert_eq!(json(&b)["sandboxes"].as_array().unwrap().len(), n);
    let supervisors: Vec<i32> = (0..n)
        .map(|i| supervisor_pid(state.path(), &format!("{tag}-{i}")))
        .collect();
    assert!(!warden_cgroups(&format!("warden-{tag}")).is_empty() || !is_root());
    let workers: Vec<_> = (0..n)
        .map(|i| {
            let d = d.clone();
            let name = format!("{tag}-{i}");
            std::thread::spawn(move || {
                let (s, b) = call(
                    &d,
                    "DELETE",
                    &format!("/v1/sandboxes/{name}?force=true"),
                    None,
                    None,
                );
                assert_eq!(s, 204, "{b}");
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    for pid in supervisors {
        assert!(!alive(pid), "supervisor {pid} outlived its sandbox");
    }
    assert!(
        warden_cgroups(&format!("warden-{tag}")).is_empty(),
        "{:?}",
        warden_cgroups(&format!("warden-{tag}"))
    );
    assert_no_sandbox_is_listed(&d);
    assert!(std::fs::read_dir(state.path().join("warden/sandboxes"))
        .unwrap()
        .next()
        .is_none());
    let db = warden_daemon::open_db(&state.path().join("warden")).unwrap();
    assert!(db.sandboxes().unwrap().is_empty());
    assert!(db.unfinished_execs().unwrap().is_empty());
    // The daemon holds no descriptor of what is gone.
    wait_until(
        "the daemon's descriptors to be released",
        Duration::from_secs(10),
        || fds(d.pid()) <= fds_before + 2,
    );
}

#[test]
fn a_tokens_quota_refuses_one_sandbox_too_many_with_429() {
    let Some((state, d)) = over_tcp("api-quota") else {
        return;
    };
    let t = ok(&warden(
        state.path(),
        &[
            "token",
            "create",
            "small",
            "--scope",
            "sandboxes:write",
            "--max-sandboxes",
            "1",
            "--max-memory",
            "1G",
        ],
    ))
    .trim()
    .to_string();
    let (s, b) = call_on(
        &d,
        true,
        "POST",
        "/v1/sandboxes",
        Some(r#"{"name":"q1","start":false,"spec":{"resources":{"memory":"512M"}}}"#),
        Some(&t),
    );
    assert_eq!(s, 201, "{b}");
    let (s, b) = call_on(
        &d,
        true,
        "POST",
        "/v1/sandboxes",
        Some(r#"{"name":"q2","start":false,"spec":{"resources":{"memory":"256M"}}}"#),
        Some(&t),
    );
    assert_eq!((s, json(&b)["code"].as_str()), (429, Some("quota")), "{b}");
    assert!(!state.path().join("warden/sandboxes/q2").exists());
    let (s, _) = call(&d, "DELETE", "/v1/sandboxes/q1", None, None);
    assert_eq!(s, 204);
    let (s, b) = call_on(
        &d,
        true,
        "POST",
        "/v1/sandboxes",
        Some(r#"{"name":"q3","start":false,"spec":{"resources":{"memory":"2G"}}}"#),
        Some(&t),
    );
    assert_eq!(
        (s, json(&b)["field"].as_str()),
        (429, Some("/spec/resources/memory")),
        "{b}"
    );
}

/// A refused request whose body the daemon never read (the token check
/// answers before any handler takes the body) leaves the connection
/// unusable: the server closes it. The answer must say so
/// (`Connection: close`), or a client that keeps connections alive sends
/// its next request into a closing one and gets no answer at all.
#[test]
fn a_refusal_before_the_body_is_read_tells_the_client_to_reconnect() {
    use std::io::{Read, Write};
    let state = TempDir::new("api-unread");
    let d = Daemon::start(state.path(), true);
    let addr = d.tcp.clone().unwrap();
    let body = r#"{"shell":"true"}"#;
    for (path, auth) in [
        // No token: 401.
        ("/v1/sandboxes/any/exec", ""),
        // A route that does not exist: 404 from the fallback.
        ("/v1/nothing/here", ""),
    ] {
        let mut s = std::net::TcpStream::connect(&addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        // The headers alone: the answer comes before the body is sent.
        write!(
            s,
            "POST {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            body.len()
        )
        .unwrap();
        let mut answer = Vec::new();
        let mut buf = [0u8; 4096];
        while !String::from_utf8_lossy(&answer).contains("\r\n\r\n") {
            let n = s.read(&mut buf).unwrap();
            assert!(n > 0, "the connection closed without an answer");
            answer.extend_from_slice(&buf[..n]);
        }
        let head = String::from_utf8_lossy(&answer).to_ascii_lowercase();
        assert!(
            head.starts_with("http/1.1 4"),
            "{path}: not refused: {head}"
        );
        assert!(
            head.contains("\r\nconnection: close\r\n"),
            "{path}: the refusal does not say the connection closes:\n{head}"
        );
    }
}

/// `warden --host` as a person types it: run, create, exec (streamed, with
/// piped stdin, detached), ls, logs, stop, rm through a real daemon, on its
/// Unix socket and over TCP with a token; what cannot travel is refused
/// before anything is made.
#[test]
fn the_cli_drives_a_daemon_through_host() {
    let state = TempDir::new("daemon-host");
    let daemon = Daemon::start(state.path(), true);
    let sock = format!("unix:{}", daemon.socket.display());
    let host = |args: &[&str], stdin: &[u8]| -> Output {
        use std::io::Write;
        let mut child = Command::new(warden_bin())
            .arg("--host")
            .arg(&sock)
            .args(args)
            .env("WARDEN_STATE_DIR", state.path().join("elsewhere"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut input = child.stdin.take().unwrap();
        input.write_all(stdin).unwrap();
        drop(input);
        child.wait_with_output().unwrap()
    };

    // A run: output and status are the command's; the sandbox is gone after.
    let out = host(
        &[
            "run",
            "--memory",
            "256M",
            "--",
            "sh",
            "-c",
            "echo out; echo err >&2; exit 3",
        ],
        b"",
    );
    assert_eq!(code(&out), 3, "{}", stderr(&out));
    assert_eq!(stdout(&out), "out\n");
    assert!(stderr(&out).contains("err"), "{}", stderr(&out));
    let out = host(
        &["run", "--", "sh", "-c", "tr a-z A-Z; echo done"],
        b"piped in\n",
    );
    assert_eq!(stdout(&out), "PIPED IN\ndone\n", "{}", stderr(&out));
    let listed = host(&["ls", "--json"], b"");
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&stdout(&listed)).unwrap(),
        serde_json::json!([]),
        "a run left its sandbox behind"
    );

    // A named sandbox, its commands, its log.
    ok(&host(&["create", "box", "--start"], b""));
    let out = host(
        &["exec", "box", "--", "sh", "-c", "echo hi > f; pwd; cat f"],
        b"",
    );
    assert_eq!(stdout(&out), "/workspace\nhi\n", "{}", stderr(&out));
    let exec_id = ok(&host(&["exec", "-d", "box", "--", "sleep", "0.2"], b""));
    assert!(exec_id.trim().starts_with("ex-"), "{exec_id}");
    assert!(ok(&host(&["ls"], b"")).contains("box"));
    let logs = ok(&host(&["logs", "box"], b""));
    assert!(logs.contains("echo hi > f"), "{logs}");
    // A running sandbox is not removed without -f.
    let out = host(&["rm", "box"], b"");
    assert_eq!(code(&out), 125);
    assert!(stderr(&out).contains("running"), "{}", stderr(&out));
    ok(&host(
        &[
            "exec",
            "box",
            "--",
            "sh",
            "-c",
            "echo 'curl x | sh' > .envrc",
        ],
        b"",
    ));
    ok(&host(&["stop", "--time", "1s", "box"], b""));
    // Its changes reviewed and committed through the daemon: a file the
    // host runs is flagged and applied only when accepted.
    let diff = ok(&host(&["diff", "box"], b""));
    assert!(diff.contains(" f\n") && diff.contains(".envrc"), "{diff}");
    assert!(diff.contains("! "), "the .envrc is not flagged: {diff}");
    assert!(
        diff.contains("+curl x | sh"),
        "its content is not shown: {diff}"
    );
    let out = host(&["commit", "box"], b"");
    assert_eq!(code(&out), 125, "{}", stdout(&out));
    assert!(stderr(&out).contains("flagged"), "{}", stderr(&out));
    assert!(ok(&host(&["commit", "box", "f"], b"")).contains("applied f"));
    ok(&host(&["rm", "box"], b""));
    assert_eq!(stdout(&host(&["ls", "--json"], b"")).trim(), "[]");

    // Refused before anything is made, saying why.
    for (args, says) in [
        (
            vec!["run", "--secret", "TOKEN", "--", "true"],
            "--secret cannot be used with --host",
        ),
        (
            vec!["run", "--ask", "--", "true"],
            "--ask cannot be used with --host",
        ),
        (
            vec!["run", "--no-audit-log", "--", "true"],
            "--no-audit-log cannot be used with --host",
        ),
        (
            vec!["run", "--json-events", "/tmp/x", "--", "true"],
            "--json-events cannot be used with --host",
        ),
        (vec!["run", "--"], "give the command after --"),
        (vec!["snapshot", "box"], "does not go through a daemon"),
    ] {
        let out = host(&args, b"");
        assert_eq!(code(&out), 125, "{args:?}");
        assert!(stderr(&out).contains(says), "{args:?}: {}", stderr(&out));
    }
    assert_eq!(stdout(&host(&["ls", "--json"], b"")).trim(), "[]");

    // Over TCP: a token is needed, and one with the scopes works.
    let addr = format!("http://{}", daemon.tcp.clone().unwrap());
    let out = Command::new(warden_bin())
        .args(["--host", &addr, "ls"])
        .env_remove("WARDEN_TOKEN")
        .output()
        .unwrap();
    assert_eq!(code(&out), 125);
    assert!(stderr(&out).contains("401"), "{}", stderr(&out));
    let token = token(state.path(), "cli", WORKER_SCOPES);
    let out = Command::new(warden_bin())
        .args(["--host", &addr, "run", "--", "echo", "over tcp"])
        .env("WARDEN_TOKEN", &token)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(stdout(&out), "over tcp\n", "{}", stderr(&out));
    let out = Command::new(warden_bin())
        .args(["--host", "https://127.0.0.1:1", "ls"])
        .output()
        .unwrap();
    assert!(stderr(&out).contains("plain HTTP"), "{}", stderr(&out));
}

/// Warm pools: pooled sandboxes are nobody's (hidden from every route)
/// until a create takes one; each is handed out once; a create with other
/// limits is made cold; a create that allows another name gets a pooled
/// sandbox with that name applied at hand-out; after the profile is
/// edited, a create never gets the old profile's names. Judged by a real
/// listener that records which names reached it.
#[test]
// One pool's life in order: each claim is judged by what the earlier claims took and
// by the refills between them, so its steps cannot be tests of their own without
// filling a pool (two running sandboxes) for each.
#[allow(clippy::too_many_lines)] // one pool's claims in order, each after the last
fn a_warm_pool_hands_out_each_sandbox_once_and_only_under_the_claims_policy() {
    if !curl_available() || !egress_available() {
        return;
    }
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let arrivals = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = arrivals.clone();
    std::thread::spawn(move || {
        for c in listener.incoming().flatten() {
            seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            drop(c);
        }
    });
    let state = TempDir::new("daemon-pool");
    let config = TempDir::new("daemon-pool-config");
    let profiles = config.path().join("warden/profiles");
    std::fs::create_dir_all(&profiles).unwrap();
    // Both names are pinned to the listener; the profile allows one.
    let profile = |name: &str| {
        std::fs::write(
            profiles.join("pooled.yaml"),
            format!(
                "egress:\n  domains: [\"{name}:{port}\"]\n  hosts:\n    first.test: 127.0.0.1\n    second.test: 127.0.0.1\n"
            ),
        )
        .unwrap();
    };
    profile("first.test");
    let d = Daemon::start_with(
        state.path(),
        false,
        &["--pool", "pooled=2"],
        &[("XDG_CONFIG_HOME", config.path())],
    );
    let on_disk = || sandboxes_on_disk(state.path());
    let running = |id: &str| {
        sandbox_dir(state.path(), id)
            .join("supervisor.json")
            .exists()
            && alive(supervisor_pid(state.path(), id))
    };
    wait_until("the pool is full", Duration::from_secs(30), || {
        let ids = on_disk();
        ids.len() == 2 && ids.iter().all(|id| running(id))
    });
    let pooled = on_disk();

    // Nobody's yet: not listed, not found, no command runs in one.
    let (s, b) = call(&d, "GET", "/v1/sandboxes", None, None);
    assert_eq!(
        (s, json(&b)["sandboxes"].as_array().unwrap().len()),
        (200, 0),
        "{b}"
    );
    for id in &pooled {
        let (s, _) = call(&d, "GET", &format!("/v1/sandboxes/{id}"), None, None);
        assert_eq!(s, 404, "pooled {id} is visible");
        let (s, _) = call(
            &d,
            "POST",
            &format!("/v1/sandboxes/{id}/exec"),
            Some(r#"{"argv":["true"]}"#),
            None,
        );
        assert_eq!(s, 404, "a command ran in pooled {id}");
    }

    let connect = |id: &str, name: &str| -> String {
        let body = serde_json::json!({"argv": ["python3", "-c", format!(
            "import socket\ntry:\n    socket.create_connection(('{name}', {port}), timeout=5).close(); print('connected')\nexcept OSError as e:\n    print('refused', e)"
        )]});
        let (s, b) = call(
            &d,
            "POST",
            &format!("/v1/sandboxes/{id}/exec"),
            Some(&body.to_string()),
            None,
        );
        assert_eq!(s, 200, "{b}");
        json(&b)["stdout"].as_str().unwrap().to_string()
    };
    let arrived = || arrivals.load(std::sync::atomic::Ordering::SeqCst);

    // A create of the pooled profile takes one, with its labels.
    let (s, b) = call(
        &d,
        "POST",
        "/v1/sandboxes",
        Some(r#"{"profile":"pooled","labels":{"team":"a"}}"#),
        None,
    );
    assert_eq!(s, 201, "{b}");
    let first = json(&b)["id"].as_str().unwrap().to_string();
    assert!(
        pooled.contains(&first),
        "{first} was not one of the pool {pooled:?}"
    );
    assert_eq!(json(&b)["labels"]["team"], "a");
    assert!(connect(&first, "first.test").contains("connected"));
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(arrived(), 1);

    // A create whose policy differs from the pool's is made cold.
    let (s, b) = call(
        &d,
        "POST",
        "/v1/sandboxes",
        Some(r#"{"profile":"pooled","spec":{"resources":{"memory":"300M"}}}"#),
        None,
    );
    assert_eq!(s, 201, "{b}");
    let differs = json(&b)["id"].as_str().unwrap().to_string();
    assert!(
        !pooled.contains(&differs),
        "a create with its own limits got pooled {differs}"
    );

    // A create that allows one more name takes a pooled sandbox, the name
    // applied at hand-out.
    let wider_body = format!(
        r#"{{"profile":"pooled","spec":{{"egress":{{"domains":["second.test:{port}"]}}}}}}"#
    );
    let (s, b) = call(&d, "POST", "/v1/sandboxes", Some(&wider_body), None);
    assert_eq!(s, 201, "{b}");
    let wider = json(&b)["id"].as_str().unwrap().to_string();
    assert!(
        pooled.contains(&wider),
        "a create adding a name was made cold: {wider}"
    );
    let before = arrived();
    assert!(connect(&wider, "second.test").contains("connected"));
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(arrived(), before + 1);

    // The profile changes while sandboxes made under the old one wait in
    // the pool: a create takes one, and gets the new profile's names, not
    // the old one's.
    let mut waiting = Vec::new();
    wait_until("the pool is refilled", Duration::from_secs(30), || {
        waiting = on_disk()
            .into_iter()
            .filter(|id| {
                ![&first, &differs, &wider].contains(&id) && !pooled.contains(id) && running(id)
            })
            .collect();
        waiting.len() >= 2
    });
    profile("second.test");
    let (s, b) = call(
        &d,
        "POST",
        "/v1/sandboxes",
        Some(r#"{"profile":"pooled"}"#),
        None,
    );
    assert_eq!(s, 201, "{b}");
    let after = json(&b)["id"].as_str().unwrap().to_string();
    assert!(
        waiting.contains(&after),
        "{after} is not one made under the old profile: {waiting:?}"
    );
    let before = arrived();
    assert!(connect(&after, "first.test").contains("refused"));
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        arrived(),
        before,
        "a name the claim's profile no longer allows arrived"
    );
    assert!(connect(&after, "second.test").contains("connected"));

    // Refilled under the new profile; creates at once never share one.
    wait_until("the pool is refilled", Duration::from_secs(30), || {
        let ids = on_disk();
        ids.iter()
            .filter(|id| {
                !pooled.contains(id)
                    && **id != first
                    && **id != differs
                    && **id != after
                    && **id != wider
            })
            .count()
            >= 2
    });
    let claims: Vec<_> = (0..4)
        .map(|_| {
            let sock = d.socket.clone();
            std::thread::spawn(move || {
                let out = Command::new("curl")
                    .args(["-sS", "--unix-socket"])
                    .arg(&sock)
                    .args([
                        "-H",
                        "content-type: application/json",
                        "--data-binary",
                        r#"{"profile":"pooled"}"#,
                        "http://w/v1/sandboxes",
                    ])
                    .output()
                    .unwrap();
                json(&String::from_utf8_lossy(&out.stdout))["id"]
                    .as_str()
                    .unwrap()
                    .to_string()
            })
        })
        .collect();
    let mut ids: Vec<String> = claims.into_iter().map(|t| t.join().unwrap()).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 4, "a sandbox was handed out twice: {ids:?}");
    for id in ids.iter().chain([&first, &differs, &after, &wider]) {
        let (s, b) = call(&d, "DELETE", &format!("/v1/sandboxes/{id}"), None, None);
        assert_eq!(s, 204, "{b}");
    }
    // A daemon that stops takes its pools' sandboxes with it.
    let waiting = on_disk();
    assert!(!waiting.is_empty(), "the pool was not refilled");
    let supervisors: Vec<i32> = waiting
        .iter()
        .filter(|id| running(id))
        .map(|id| supervisor_pid(state.path(), id))
        .collect();
    let mut d = d;
    d.stop();
    assert!(
        on_disk().is_empty(),
        "pooled sandboxes outlived their daemon: {:?}",
        on_disk()
    );
    for pid in supervisors {
        assert!(
            !alive(pid),
            "a pooled sandbox's supervisor {pid} still runs"
        );
    }
}

/// A daemon stopped while its pool is still being filled takes every
/// sandbox it made with it, the one being made at that moment included
/// (a refill that was only aborted left that one running).
#[test]
fn a_daemon_stopped_mid_refill_leaves_no_pooled_sandbox_behind() {
    if !egress_available() {
        return;
    }
    for round in 0..3 {
        let state = TempDir::new("daemon-pool-stop");
        let config = TempDir::new("daemon-pool-stop-config");
        let profiles = config.path().join("warden/profiles");
        std::fs::create_dir_all(&profiles).unwrap();
        std::fs::write(profiles.join("filling.yaml"), "resources:\n  pids: 64\n").unwrap();
        let mut d = Daemon::start_with(
            state.path(),
            false,
            &["--pool", "filling=8"],
            &[("XDG_CONFIG_HOME", config.path())],
        );
        let on_disk = || sandboxes_on_disk(state.path());
        // Stop once the filling has begun, and (a round later) once it is
        // further along.
        wait_until("the pool starts filling", Duration::from_secs(30), || {
            on_disk().len() > round
        });
        d.stop();
        assert!(
            on_disk().is_empty(),
            "round {round}: pooled sandboxes outlived their daemon: {:?}",
            on_disk()
        );
    }
}

/// An autoscaled pool keeps as many sandboxes ready as creates came in
/// its window, between its size and its max: a burst of creates grows
/// it, and once the window has passed it shrinks back to its size,
/// stopping the sandboxes it no longer needs. Its state is served at
/// /v1/pools.
#[test]
fn an_autoscaled_pool_grows_with_demand_and_shrinks_when_demand_is_gone() {
    if !egress_available() {
        return;
    }
    let state = TempDir::new("daemon-autoscale");
    let config = TempDir::new("daemon-autoscale-config");
    let profiles = config.path().join("warden/profiles");
    std::fs::create_dir_all(&profiles).unwrap();
    std::fs::write(profiles.join("burst.yaml"), "resources:\n  pids: 64\n").unwrap();
    let file = config.path().join("daemon.yaml");
    std::fs::write(
        &file,
        "pools:\n  - {profile: burst, size: 1, max: 3, window_seconds: 8}\n",
    )
    .unwrap();
    let d = Daemon::start_with(
        state.path(),
        false,
        &["--config", file.to_str().unwrap()],
        &[("XDG_CONFIG_HOME", config.path())],
    );
    let pool = || {
        let (s, b) = call(&d, "GET", "/v1/pools", None, None);
        assert_eq!(s, 200, "{b}");
        json(&b)["pools"][0].clone()
    };
    wait_until("the pool has its size", Duration::from_secs(30), || {
        pool()["ready"] == 1
    });
    let p = pool();
    assert_eq!(
        (p["size"].as_u64(), p["max"].as_u64(), p["target"].as_u64()),
        (Some(1), Some(3), Some(1)),
        "{p}"
    );

    // A burst of three creates: the pool aims at three and fills to it.
    let t0 = Instant::now();
    let mut taken = Vec::new();
    for _ in 0..3 {
        let (s, b) = call(
            &d,
            "POST",
            "/v1/sandboxes",
            Some(r#"{"profile":"burst"}"#),
            None,
        );
        assert_eq!(s, 201, "{b}");
        taken.push(json(&b)["id"].as_str().unwrap().to_string());
    }
    assert_eq!(pool()["demand"], 3, "{}", pool());
    let waiting = || -> usize {
        std::fs::read_dir(state.path().join("warden/sandboxes"))
            .unwrap()
            .flatten()
            .filter(|e| !taken.contains(&e.file_name().to_string_lossy().into_owned()))
            .count()
    };
    // Grown, and on disk as well (a sandbox the refill is still making or
    // a discarded one still being removed is there for a moment), judged
    // at one moment: once the window passes it shrinks again.
    wait_until(
        "the pool grew to the demand, on disk as well",
        Duration::from_secs(60),
        || {
            let p = pool();
            p["target"] == 3 && p["ready"] == 3 && waiting() == 3
        },
    );
    let grown = t0.elapsed();

    // The window passes with no create: back to its size, the rest gone
    // from the disk as well.
    wait_until(
        "the pool shrank to its size",
        Duration::from_secs(90),
        || {
            let p = pool();
            p["target"] == 1 && p["ready"] == 1 && waiting() == 1
        },
    );
    eprintln!(
        "grown {grown:?} and shrunk {:?} after the burst began",
        t0.elapsed()
    );
    // The sandboxes handed out are the callers', untouched by the shrink.
    for id in &taken {
        let (s, b) = call(&d, "GET", &format!("/v1/sandboxes/{id}"), None, None);
        assert_eq!(s, 200, "{b}");
        assert_eq!(json(&b)["state"], "running", "{b}");
    }
}

#[test]
fn a_call_on_a_stuck_supervisor_is_answered_503_in_bounded_time_and_the_daemon_goes_on() {
    let Some((state, d)) = on_socket("api-stuck") else {
        return;
    };
    let (s, b) = call(
        &d,
        "POST",
        "/v1/sandboxes",
        Some(r#"{"name":"stuck"}"#),
        None,
    );
    assert_eq!(s, 201, "{b}");
    let pid = supervisor_pid(state.path(), "stuck");
    // SAFETY: SIGSTOP to the supervisor this test made.
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    let t0 = Instant::now();
    let (s, b) = call(
        &d,
        "POST",
        "/v1/sandboxes/stuck/exec",
        Some(r#"{"shell":"true"}"#),
        None,
    );
    let took = t0.elapsed();
    // SAFETY: as above, to let it go on.
    unsafe { libc::kill(pid, libc::SIGCONT) };
    assert_eq!(s, 503, "{b}");
    assert!(b.contains(r#""code":"not_answering""#), "{b}");
    assert!(took < Duration::from_secs(25), "{took:?}");
    // Let go, it answers again.
    let (s, b) = call(
        &d,
        "POST",
        "/v1/sandboxes/stuck/exec",
        Some(r#"{"shell":"echo back"}"#),
        None,
    );
    assert_eq!(s, 200, "{b}");
    let (s, _) = call(&d, "DELETE", "/v1/sandboxes/stuck?force=true", None, None);
    assert!(s == 200 || s == 204, "{s}");
}
