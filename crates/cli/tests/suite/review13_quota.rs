//! Outside review 13, finding 3, through a real daemon over real HTTP: a
//! token's processes quota follows what the owner gave it. By default it
//! is room for as many default sandboxes as the token may have
//! (`--max-sandboxes`); `--max-pids` on `warden token create` sets it for
//! one token; a token's stopped sandboxes within it start again.

use crate::common::daemon::{self, call_on, curl_available, json, Daemon, WORKER_SCOPES};
use crate::common::*;

/// `warden token create NAME` with the worker's scopes and `extra`: the
/// token (the last line it prints).
fn token_with(d: &Daemon, name: &str, extra: &[&str]) -> String {
    daemon::token_with(&d.state, name, WORKER_SCOPES, extra)
}

/// A daemon whose tokens' memory and disk quotas hold many sandboxes, so
/// that only the sandboxes and processes quotas are asked.
fn daemon(state: &std::path::Path) -> Daemon {
    let file = state.join("daemon.yaml");
    std::fs::write(&file, "quotas:\n  memory: 1000G\n  disk: 1000G\n").unwrap();
    Daemon::start_with(state, true, &["--config", file.to_str().unwrap()], &[])
}

/// Finding: the processes quota was the configuration's or 16 default
/// sandboxes' whatever the token's `--max-sandboxes`: a token given 32
/// was refused (429, `/spec/resources/pids`) at its 17th default-sized
/// sandbox. Now a token given 20 makes 20 and is refused only at the
/// 21st, for its sandboxes quota; one of its stopped sandboxes starts.
#[test]
fn a_token_given_more_sandboxes_than_sixteen_makes_that_many_default_sandboxes() {
    if !curl_available() {
        return skip("curl is not installed");
    }
    let state = TempDir::new("r13-pids-many");
    let d = daemon(state.path());
    let token = token_with(&d, "many", &["--max-sandboxes", "20"]);
    let t = |method: &str, path: &str, body: Option<&str>| {
        call_on(&d, true, method, path, body, Some(&token))
    };
    for i in 0..20 {
        let body = format!(r#"{{"name":"m{i}","start":false}}"#);
        let (s, b) = t("POST", "/v1/sandboxes", Some(&body));
        assert_eq!(s, 201, "sandbox {}: {b}", i + 1);
    }
    let (s, b) = t(
        "POST",
        "/v1/sandboxes",
        Some(r#"{"name":"m20","start":false}"#),
    );
    assert_eq!(s, 429, "{b}");
    assert_eq!(json(&b)["code"], "quota", "{b}");
    assert_ne!(json(&b)["field"], "/spec/resources/pids", "{b}");
    // The twentieth, stopped, starts.
    let (s, b) = t("POST", "/v1/sandboxes/m19/start", None);
    assert_eq!(s, 200, "{b}");
    let (s, b) = t("POST", "/v1/sandboxes/m19/stop", None);
    assert_eq!(s, 200, "{b}");
}

/// A token given `--max-pids` is held to it: a default sandbox's 1,024
/// and one of 100 fit 1,200; another of 100 does not (429 `quota` at the
/// field's pointer), nor does a start of a sandbox that would go over.
#[test]
fn a_token_given_max_pids_is_held_to_it() {
    if !curl_available() {
        return skip("curl is not installed");
    }
    let state = TempDir::new("r13-pids-own");
    let d = daemon(state.path());
    let token = token_with(&d, "own", &["--max-pids", "1200"]);
    let t = |body: &str| call_on(&d, true, "POST", "/v1/sandboxes", Some(body), Some(&token));
    let (s, b) = t(r#"{"name":"one","start":false}"#);
    assert_eq!(s, 201, "{b}");
    let pids = json(&b)["spec"]["resources"]["pids"].as_u64();
    let (s, b) = t(r#"{"name":"two","start":false,"spec":{"resources":{"pids":100}}}"#);
    assert_eq!(s, 201, "default pids {pids:?}: {b}");
    let (s, b) = t(r#"{"name":"three","start":false,"spec":{"resources":{"pids":100}}}"#);
    assert_eq!(s, 429, "{b}");
    assert_eq!(json(&b)["code"], "quota", "{b}");
    assert_eq!(json(&b)["field"], "/spec/resources/pids", "{b}");
    // The CLI refuses a quota of nothing.
    let out = warden(
        &d.state,
        &["token", "create", "z", "--scope", "exec", "--max-pids", "0"],
    );
    assert!(!out.status.success());
    // The API's token create sets it too, and refuses 0.
    let (s, b) = call_on(
        &d,
        false,
        "POST",
        "/v1/tokens",
        Some(r#"{"name":"api","scopes":["sandboxes:write"],"max_pids":100}"#),
        None,
    );
    assert_eq!(s, 201, "{b}");
    let api = json(&b)["token"].as_str().unwrap().to_string();
    let (s, b) = call_on(
        &d,
        true,
        "POST",
        "/v1/sandboxes",
        Some(r#"{"name":"api1","start":false}"#),
        Some(&api),
    );
    assert_eq!(s, 429, "{b}");
    assert_eq!(json(&b)["field"], "/spec/resources/pids", "{b}");
    let (s, b) = call_on(
        &d,
        false,
        "POST",
        "/v1/tokens",
        Some(r#"{"name":"api0","scopes":["exec"],"max_pids":0}"#),
        None,
    );
    assert_eq!(s, 400, "{b}");
    assert_eq!(json(&b)["field"], "/max_pids", "{b}");
}
