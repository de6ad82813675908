//! A token's quotas are the same whichever door makes it, through a real
//! daemon over real HTTP: `POST /v1/tokens` takes `max_sandboxes`,
//! `max_memory` and `max_pids` as `warden token create` takes
//! `--max-sandboxes`, `--max-memory` and `--max-pids` (the same parser,
//! the same record), and a value the API cannot take is refused at its
//! JSON pointer with no token made. Before, the API took `max_pids` only:
//! a body with `max_sandboxes` or `max_memory` was refused as an unknown
//! field, so a token made over the API could not be bounded as the
//! command line's can.
//!
//! And a token made over the API by a token is never wider than its
//! maker (outside review 17, F4): before, an admin token held to one
//! sandbox, 64M and 10 processes made an admin token of 100,000
//! sandboxes, 1T and 10,000,000 processes (201, listed by `warden token
//! list`); now that is 403 `wider_than_maker` at the first pointer too
//! wide, and a token held to quotas of its own makes no token at all (403
//! `maker_has_quotas`), so its quota is never multiplied by children that
//! each have a ledger of their own.

use crate::common::daemon::{call, call_on, curl_available, json, Daemon, WORKER_SCOPES};
use crate::common::*;

/// A token made by `door` (`"api"` or `"cli"`) with the worker's scopes
/// and the quotas `quotas` (the API body's names and values; the command
/// line gets them as its flags).
fn token_by(d: &Daemon, door: &str, name: &str, quotas: &[(&str, &str)]) -> String {
    if door == "api" {
        let mut body = serde_json::json!({ "name": name, "scopes": WORKER_SCOPES });
        for (k, v) in quotas {
            // A count as a number, a size as the text the flag takes.
            body[*k] = match v.parse::<u64>() {
                Ok(n) => n.into(),
                Err(_) => (*v).into(),
            };
        }
        let (s, b) = call(d, "POST", "/v1/tokens", Some(&body.to_string()), None);
        assert_eq!(s, 201, "{b}");
        return json(&b)["token"].as_str().unwrap().to_string();
    }
    let mut args = vec!["token".to_string(), "create".into(), name.into()];
    for s in WORKER_SCOPES {
        args.extend(["--scope".into(), s.to_string()]);
    }
    for (k, v) in quotas {
        args.extend([format!("--{}", k.replace('_', "-")), v.to_string()]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    ok(&warden(&d.state, &args))
        .trim()
        .lines()
        .last()
        .unwrap()
        .to_string()
}

/// A sandbox made (not started) by `token`: the status and the answer.
fn make(d: &Daemon, token: &str, name: &str, memory: Option<&str>) -> (u16, String) {
    let mut body = serde_json::json!({ "name": name, "start": false });
    if let Some(m) = memory {
        body["spec"] = serde_json::json!({ "resources": { "memory": m } });
    }
    call_on(
        d,
        true,
        "POST",
        "/v1/sandboxes",
        Some(&body.to_string()),
        Some(token),
    )
}

fn daemon(tag: &str) -> Option<(TempDir, Daemon)> {
    if !curl_available() {
        skip("curl is not installed");
        return None;
    }
    let state = TempDir::new(tag);
    let d = Daemon::start(state.path(), true);
    Some((state, d))
}

#[test]
fn a_token_made_over_the_api_with_max_sandboxes_1_is_refused_its_second_sandbox_as_the_command_lines_is(
) {
    let Some((_state, d)) = daemon("tq-sandboxes") else {
        return;
    };
    for door in ["api", "cli"] {
        let token = token_by(&d, door, &format!("one-{door}"), &[("max_sandboxes", "1")]);
        let (s, b) = make(&d, &token, &format!("{door}-first"), None);
        assert_eq!(s, 201, "{door}: {b}");
        // Before, the API refused the body (422, unknown field
        // `max_sandboxes`): no token of one sandbox could be made.
        let (s, b) = make(&d, &token, &format!("{door}-second"), None);
        assert_eq!(s, 429, "{door}: {b}");
        assert_eq!(json(&b)["code"], "quota", "{door}: {b}");
    }
}

#[test]
fn a_token_made_over_the_api_is_held_to_its_max_memory_as_the_command_lines_is() {
    let Some((_state, d)) = daemon("tq-memory") else {
        return;
    };
    // Text with a unit, as the flag takes it, and a number of bytes.
    for (door, max) in [("api", "400M"), ("api", "419430400"), ("cli", "400M")] {
        let name = format!("mem-{door}-{}", max.to_lowercase());
        let token = if max.chars().all(|c| c.is_ascii_digit()) {
            let body = serde_json::json!({
                "name": name, "scopes": WORKER_SCOPES, "max_memory": max.parse::<u64>().unwrap()
            });
            let (s, b) = call(&d, "POST", "/v1/tokens", Some(&body.to_string()), None);
            assert_eq!(s, 201, "{b}");
            json(&b)["token"].as_str().unwrap().to_string()
        } else {
            token_by(&d, door, &name, &[("max_memory", max)])
        };
        let (s, b) = make(&d, &token, &format!("{name}-a"), Some("256M"));
        assert_eq!(s, 201, "{door} {max}: {b}");
        let (s, b) = make(&d, &token, &format!("{name}-b"), Some("256M"));
        assert_eq!(s, 429, "{door} {max}: {b}");
        assert_eq!(json(&b)["code"], "quota", "{door} {max}: {b}");
    }
}

#[test]
fn a_quota_the_api_cannot_take_is_refused_at_its_json_pointer_with_no_token_made() {
    let Some((_state, d)) = daemon("tq-bad") else {
        return;
    };
    let listed = || {
        let (s, b) = call(&d, "GET", "/v1/tokens", None, None);
        assert_eq!(s, 200, "{b}");
        json(&b)["tokens"].as_array().map_or(0, Vec::len)
    };
    let before = listed();
    for (quota, value, status) in [
        ("max_memory", serde_json::json!("lots"), 400),
        ("max_memory", serde_json::json!("4 GB"), 400),
        ("max_memory", serde_json::json!(true), 422),
        ("max_memory", serde_json::json!(-1), 422),
        ("max_pids", serde_json::json!(0), 400),
        ("max_pids", serde_json::json!("many"), 422),
        ("max_sandboxes", serde_json::json!(-1), 422),
        ("max_sandboxes", serde_json::json!(1.5), 422),
    ] {
        let mut body = serde_json::json!({ "name": "bad", "scopes": WORKER_SCOPES });
        body[quota] = value.clone();
        let (s, b) = call(&d, "POST", "/v1/tokens", Some(&body.to_string()), None);
        assert_eq!(s, status, "{quota} {value}: {b}");
        assert_eq!(
            json(&b)["field"],
            format!("/{quota}"),
            "{quota} {value}: {b}"
        );
    }
    assert_eq!(listed(), before, "a refused create made a token");
}

/// `warden token create NAME` with `args` (scopes and quotas as flags) on
/// the daemon's state: the token.
fn cli_token(d: &Daemon, name: &str, args: &[&str]) -> String {
    let mut all = vec!["token", "create", name];
    all.extend(args);
    ok(&warden(&d.state, &all))
        .trim()
        .lines()
        .last()
        .unwrap()
        .to_string()
}

/// The names of the tokens the daemon has, as the owner lists them.
fn names(d: &Daemon) -> Vec<String> {
    let (s, b) = call(d, "GET", "/v1/tokens", None, None);
    assert_eq!(s, 200, "{b}");
    json(&b)["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// `POST /v1/tokens` over TCP with `token`: the status and the answer.
fn make_token(d: &Daemon, token: &str, body: serde_json::Value) -> (u16, String) {
    call_on(
        d,
        true,
        "POST",
        "/v1/tokens",
        Some(&body.to_string()),
        Some(token),
    )
}

const LIMITED: &[&str] = &[
    "--scope",
    "admin",
    "--max-sandboxes",
    "1",
    "--max-memory",
    "64M",
    "--max-pids",
    "10",
];

#[test]
fn an_admin_token_held_to_quotas_cannot_make_a_token_wider_than_itself_and_none_is_made() {
    let Some((_state, d)) = daemon("tq-wider") else {
        return;
    };
    let limited = cli_token(&d, "limited-admin", LIMITED);
    let before = names(&d);
    let listed = ok(&warden(&d.state, &["token", "list"]));
    // The reviewer's body, then each quota alone: refused at its pointer.
    let wide = serde_json::json!({
        "name": "wide", "scopes": ["admin"],
        "max_sandboxes": 100000, "max_memory": "1T", "max_pids": 10000000
    });
    for (body, pointer) in [
        (wide, "/max_sandboxes"),
        (
            serde_json::json!({ "name": "wide", "scopes": ["exec"], "max_sandboxes": 2 }),
            "/max_sandboxes",
        ),
        (
            serde_json::json!({ "name": "wide", "scopes": ["exec"], "max_memory": "1T" }),
            "/max_memory",
        ),
        (
            serde_json::json!({ "name": "wide", "scopes": ["exec"], "max_memory": "65M" }),
            "/max_memory",
        ),
        (
            serde_json::json!({ "name": "wide", "scopes": ["exec"], "max_pids": 11 }),
            "/max_pids",
        ),
    ] {
        // Before, 201 and the token listed.
        let (s, b) = make_token(&d, &limited, body.clone());
        assert_eq!(s, 403, "{body}: {b}");
        assert_eq!(json(&b)["code"], "wider_than_maker", "{body}: {b}");
        assert_eq!(json(&b)["field"], pointer, "{body}: {b}");
        assert!(json(&b).get("token").is_none(), "{b}");
    }
    assert_eq!(names(&d), before, "a refused create made a token");
    assert_eq!(
        ok(&warden(&d.state, &["token", "list"])),
        listed,
        "token list changed"
    );
}

#[test]
fn an_admin_token_held_to_quotas_makes_no_token_even_within_them_so_its_sandboxes_stay_within_its_quota(
) {
    let Some((_state, d)) = daemon("tq-maker-quotas") else {
        return;
    };
    let limited = cli_token(&d, "limited-admin", LIMITED);
    let before = names(&d);
    // Within every quota, and with none (which would be the daemon's, not
    // the maker's): either would be a ledger of its own beside the
    // maker's.
    for body in [
        serde_json::json!({
            "name": "narrow", "scopes": ["exec", "sandboxes:write"],
            "max_sandboxes": 1, "max_memory": "64M", "max_pids": 10
        }),
        serde_json::json!({ "name": "narrow", "scopes": ["sandboxes:write"] }),
    ] {
        let (s, b) = make_token(&d, &limited, body.clone());
        assert_eq!(s, 403, "{body}: {b}");
        assert_eq!(json(&b)["code"], "maker_has_quotas", "{body}: {b}");
    }
    assert_eq!(names(&d), before, "a refused create made a token");
    // Its own quota holds: one sandbox, and no child to make a second.
    let small = |name: &str| {
        let body = serde_json::json!({
            "name": name, "start": false,
            "spec": { "resources": { "memory": "32M", "pids": 10 } }
        });
        let body = body.to_string();
        call_on(
            &d,
            true,
            "POST",
            "/v1/sandboxes",
            Some(&body),
            Some(&limited),
        )
    };
    let (s, b) = small("lim-first");
    assert_eq!(s, 201, "{b}");
    let (s, b) = small("lim-second");
    assert_eq!(s, 429, "{b}");
    assert_eq!(json(&b)["code"], "quota", "{b}");
}

#[test]
fn an_admin_token_without_quotas_makes_tokens_no_wider_than_the_daemon_holds_it_to() {
    let Some((_state, d)) = daemon("tq-admin") else {
        return;
    };
    let admin = cli_token(&d, "admin", &["--scope", "admin"]);
    // The daemon holds a token without quotas to 16 sandboxes by default:
    // a child of more is wider than its maker.
    let body = serde_json::json!({ "name": "wide", "scopes": ["admin"], "max_sandboxes": 17 });
    let (s, b) = make_token(&d, &admin, body);
    assert_eq!(s, 403, "{b}");
    assert_eq!(json(&b)["code"], "wider_than_maker", "{b}");
    assert_eq!(json(&b)["field"], "/max_sandboxes", "{b}");
    assert!(!names(&d).contains(&"wide".to_string()));
    // Within it: made, and held to its own quota.
    let body = serde_json::json!({
        "name": "child", "scopes": WORKER_SCOPES, "max_sandboxes": 1
    });
    let (s, b) = make_token(&d, &admin, body);
    assert_eq!(s, 201, "{b}");
    let child = json(&b)["token"].as_str().unwrap().to_string();
    let (s, b) = make(&d, &child, "child-first", None);
    assert_eq!(s, 201, "{b}");
    let (s, b) = make(&d, &child, "child-second", None);
    assert_eq!(s, 429, "{b}");
    // The child holds no admin, so it makes no token (the route's scope).
    let body = serde_json::json!({ "name": "grandchild", "scopes": ["exec"] });
    let (s, b) = make_token(&d, &child, body);
    assert_eq!(s, 403, "{b}");
    assert!(!names(&d).contains(&"grandchild".to_string()));
}
