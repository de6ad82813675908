//! The daemon's record of a sandbox (who made it, its labels, its
//! commands) is of that sandbox, by the identity it was made with, never
//! of its name: a sandbox removed behind the daemon's back (`warden rm`)
//! and a new one of the same name made by the owner at the command line
//! share nothing. Through the real daemon over HTTP and the real CLI.

use crate::common::daemon::*;
use crate::common::*;
use std::path::Path;

const SCOPES: &[&str] = &["sandboxes:read", "sandboxes:write", "exec", "files"];

/// The owner removes sandbox `name` with the CLI and makes their own of
/// that name, with a planted file in its workspace.
fn owner_takes_the_name(state: &Path, name: &str, ws: &TempDir) {
    ok(&warden(state, &["rm", "--force", name]));
    std::fs::write(ws.path().join("owners-secret.txt"), "owner's only\n").unwrap();
    ok(&warden(state, &["create", name, "--workspace", ws.str()]));
}

/// Move sandbox `name`'s creation time `secs` seconds back, as a host
/// clock stepped back between two creates leaves it: creation times do
/// not order a name's sandboxes, only their identities tell them apart.
fn made_earlier(state: &Path, name: &str, secs: i64) {
    let path = sandbox_dir(state, name).join("meta.json");
    let mut meta: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let sec = meta["created"]["sec"].as_i64().unwrap();
    meta["created"]["sec"] = (sec - secs).into();
    std::fs::write(&path, serde_json::to_vec(&meta).unwrap()).unwrap();
}

#[test]
fn a_tokens_record_never_reaches_the_owners_sandbox_that_took_its_name_whatever_the_clock_says() {
    let state = TempDir::new("records-reach");
    let s = state.path();
    let d = Daemon::start(s, true);
    let t = api_token(&d, "a", SCOPES, None);
    let (st, b) = json_as(
        &d,
        &t,
        "POST",
        "/v1/sandboxes",
        r#"{"name":"name","start":false,"labels":{"who":"token"}}"#,
    );
    assert_eq!(st, 201, "{b}");
    let ws = TempDir::new("records-reach-ws");
    owner_takes_the_name(s, "name", &ws);
    made_earlier(s, "name", 120);
    ok(&warden(s, &["start", "name"]));

    for (method, path, body) in [
        ("GET", "/v1/sandboxes/name", "{}"),
        (
            "GET",
            "/v1/sandboxes/name/files?path=owners-secret.txt",
            "{}",
        ),
        ("GET", "/v1/sandboxes/name/changes", "{}"),
        (
            "POST",
            "/v1/sandboxes/name/exec",
            r#"{"argv":["cat","/workspace/owners-secret.txt"]}"#,
        ),
        ("POST", "/v1/sandboxes/name/stop", "{}"),
        ("POST", "/v1/sandboxes/name/commit", "{}"),
        ("DELETE", "/v1/sandboxes/name", "{}"),
    ] {
        let (st, r) = json_as(&d, &t, method, path, body);
        assert_eq!(st, 404, "{method} {path} reached the owner's sandbox: {r}");
        assert!(!r.to_string().contains("owner's only"), "{r}");
    }
    let (st, r) = json_as(&d, &t, "GET", "/v1/sandboxes", "");
    assert_eq!(st, 200, "{r}");
    assert_eq!(r["sandboxes"], serde_json::json!([]), "{r}");
    // The owner's sandbox is whole, running, and shows none of the
    // token's labels.
    let (st, r) = call(&d, "GET", "/v1/sandboxes/name", None, None);
    assert_eq!(st, 200, "{r}");
    let r = json(&r);
    assert_eq!(r["state"], "running", "{r}");
    assert_eq!(r["labels"], serde_json::json!({}), "{r}");
    ok(&warden(s, &["rm", "--force", "name"]));
}

#[test]
fn the_owners_sandbox_that_took_a_tokens_name_is_not_counted_in_the_tokens_quota() {
    let state = TempDir::new("records-quota");
    let s = state.path();
    let d = Daemon::start(s, true);
    let t = quota_token(s, "one", "1");
    let (st, b) = json_as(
        &d,
        &t,
        "POST",
        "/v1/sandboxes",
        r#"{"name":"held","start":false}"#,
    );
    assert_eq!(st, 201, "{b}");
    let ws = TempDir::new("records-quota-ws");
    owner_takes_the_name(s, "held", &ws);
    // The token has no sandbox now: its one may be made.
    let (st, b) = json_as(
        &d,
        &t,
        "POST",
        "/v1/sandboxes",
        r#"{"name":"its-own","start":false}"#,
    );
    assert_eq!(
        st, 201,
        "the owner's sandbox was counted as the token's: {b}"
    );
    let (st, b) = json_as(
        &d,
        &t,
        "POST",
        "/v1/sandboxes",
        r#"{"name":"second","start":false}"#,
    );
    assert_eq!(st, 429, "{b}");
    ok(&warden(s, &["rm", "--force", "held"]));
}

#[test]
fn the_owners_sandbox_that_took_a_name_lists_none_of_the_earlier_sandboxs_commands() {
    let state = TempDir::new("records-execs");
    let s = state.path();
    let d = Daemon::start(s, true);
    let t = api_token(&d, "a", SCOPES, None);
    let (st, b) = json_as(&d, &t, "POST", "/v1/sandboxes", r#"{"name":"cmds"}"#);
    assert_eq!(st, 201, "{b}");
    let ran = shell_as(&d, &t, "cmds", "echo the-tokens-command");
    let exec = ran["id"].as_str().unwrap().to_string();
    let ws = TempDir::new("records-execs-ws");
    owner_takes_the_name(s, "cmds", &ws);
    for path in [
        format!("/v1/sandboxes/cmds/execs/{exec}"),
        format!("/v1/sandboxes/cmds/execs/{exec}/output"),
    ] {
        let (st, r) = call(&d, "GET", &path, None, None);
        assert_eq!(st, 404, "{path}: the earlier sandbox's command: {r}");
    }
    let (st, r) = call(&d, "GET", "/v1/sandboxes/cmds/execs", None, None);
    assert_eq!(st, 200, "{r}");
    assert!(
        !r.contains("the-tokens-command"),
        "the owner's sandbox lists the earlier sandbox's command: {r}"
    );
    ok(&warden(s, &["rm", "--force", "cmds"]));
}

/// The id of token text `wdn_ID_SECRET`.
fn id_of(token: &str) -> String {
    token
        .strip_prefix("wdn_")
        .and_then(|r| r.split_once('_'))
        .map(|(id, _)| id.to_string())
        .unwrap()
}

/// Each token's state in a listing, by its id.
fn states(list: &serde_json::Value) -> std::collections::BTreeMap<String, String> {
    list.as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["id"].as_str().unwrap().to_string(),
                t["state"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[test]
fn the_token_listings_show_each_token_as_the_check_finds_it() {
    let state = TempDir::new("records-token-states");
    let s = state.path();
    let d = Daemon::start(s, true);
    let (st, b) = call(
        &d,
        "POST",
        "/v1/sandboxes",
        Some(r#"{"name":"given","start":false}"#),
        None,
    );
    assert_eq!(st, 201, "{b}");
    let only = api_token(&d, "only", &["sandboxes:read"], Some("given"));
    let live = api_token(&d, "live", SCOPES, None);
    let gone = api_token(&d, "gone", SCOPES, None);
    let (st, b) = call(
        &d,
        "DELETE",
        &format!("/v1/tokens/{}", id_of(&gone)),
        None,
        None,
    );
    assert!(st < 300, "{st} {b}");
    // Removed behind the daemon's back: nothing revoked its token, which
    // the check refuses from now on.
    ok(&warden(s, &["rm", "--force", "given"]));
    let (st, b) = json_as(&d, &only, "GET", "/v1/sandboxes/given", "");
    assert_eq!(st, 401, "{b}");
    let want: std::collections::BTreeMap<String, String> = [
        (id_of(&only), "sandbox_gone"),
        (id_of(&live), "live"),
        (id_of(&gone), "revoked"),
    ]
    .into_iter()
    .map(|(k, v)| (k, v.to_string()))
    .collect();
    let (st, b) = call(&d, "GET", "/v1/tokens", None, None);
    assert_eq!(st, 200, "{b}");
    assert_eq!(states(&json(&b)["tokens"]), want, "{b}");
    let listed = ok(&warden(s, &["token", "list", "--json"]));
    assert_eq!(states(&json(&listed)), want, "{listed}");
    let table = ok(&warden(s, &["token", "list"]));
    let row = table
        .lines()
        .find(|l| l.starts_with(&id_of(&only)))
        .unwrap_or_default();
    assert!(row.contains("sandbox_gone"), "{table}");
}
