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
//!
//! And a token made by a token is its maker's (outside review 18, F1):
//! before, the owner revoking an admin token left the three admin tokens
//! it had made working (GET /v1/tokens 200), one of them made a
//! grandchild (201) and revoked its sibling (204), and each child had a
//! ledger of the daemon's quotas of its own beside its maker's. Now
//! revoking a token revokes the tokens it made at once (401 on their next
//! call), a token revokes only its own descendants (404 for its maker, a
//! sibling or the owner's token), a token made by a token makes none (403
//! `made_by_a_token`), and a child's quotas are carved out of its maker's
//! ledger (429 `quota` once they are spent).

use crate::common::daemon::{self, call, call_on, json, Daemon, WORKER_SCOPES};
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
    let flags: Vec<String> = quotas
        .iter()
        .flat_map(|(k, v)| [format!("--{}", k.replace('_', "-")), v.to_string()])
        .collect();
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    daemon::token_with(&d.state, name, WORKER_SCOPES, &flags)
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

#[test]
fn a_token_made_over_the_api_with_max_sandboxes_1_is_refused_its_second_sandbox_as_the_command_lines_is(
) {
    let Some((_state, d)) = daemon::over_tcp("tq-sandboxes") else {
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
    let Some((_state, d)) = daemon::over_tcp("tq-memory") else {
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
    let Some((_state, d)) = daemon::over_tcp("tq-bad") else {
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
    let Some((_state, d)) = daemon::over_tcp("tq-wider") else {
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
    let Some((_state, d)) = daemon::over_tcp("tq-maker-quotas") else {
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
    let Some((_state, d)) = daemon::over_tcp("tq-admin") else {
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

/// `DELETE /v1/tokens/{name}` over TCP with `token`: the status.
fn revoke_as(d: &Daemon, token: &str, name: &str) -> u16 {
    call_on(
        d,
        true,
        "DELETE",
        &format!("/v1/tokens/{name}"),
        None,
        Some(token),
    )
    .0
}

/// `GET /v1/tokens` over TCP with `token`: the status.
fn list_as(d: &Daemon, token: &str) -> u16 {
    call_on(d, true, "GET", "/v1/tokens", None, Some(token)).0
}

#[test]
fn revoking_a_maker_ends_its_children_at_once_and_a_child_reaches_neither_sibling_maker_nor_owner_tokens(
) {
    let Some((_state, d)) = daemon::over_tcp("tq-family") else {
        return;
    };
    let maker = cli_token(&d, "maker", &["--scope", "admin"]);
    let bystander = cli_token(&d, "bystander", &["--scope", "admin"]);
    let children: Vec<String> = (1..=3)
        .map(|i| {
            let body = serde_json::json!({
                "name": format!("child{i}"), "scopes": ["admin"],
                "max_sandboxes": 4, "max_memory": "64M", "max_pids": 20
            });
            let (s, b) = make_token(&d, &maker, body);
            assert_eq!(s, 201, "{b}");
            json(&b)["token"].as_str().unwrap().to_string()
        })
        .collect();
    let child1 = &children[0];
    // Before, 201: a grandchild, a ledger of its own again.
    let body = serde_json::json!({ "name": "g", "scopes": ["admin"] });
    let (s, b) = make_token(&d, child1, body);
    assert_eq!(s, 403, "{b}");
    assert_eq!(json(&b)["code"], "made_by_a_token", "{b}");
    // Before, 204 for child2: a child revoked its sibling. Its maker and
    // the owner's other token are out of its reach too.
    for other in ["child2", "maker", "bystander", "child1"] {
        assert_eq!(revoke_as(&d, child1, other), 404, "{other}");
    }
    assert!(!names(&d).contains(&"g".to_string()));
    for t in children.iter().chain([&maker, &bystander]) {
        assert_eq!(list_as(&d, t), 200);
    }
    // The owner revokes the maker: on their very next call its children
    // are refused (before, child1 listed tokens: 200).
    ok(&warden(&d.state, &["token", "revoke", "maker"]));
    for t in children.iter().chain([&maker]) {
        assert_eq!(list_as(&d, t), 401);
    }
    assert_eq!(list_as(&d, &bystander), 200);
    let (_, b) = call(&d, "GET", "/v1/tokens", None, None);
    for t in json(&b)["tokens"].as_array().unwrap() {
        let gone = t["name"] != "bystander";
        assert_eq!(t["revoked"], gone, "{t}");
    }
}

#[test]
fn a_childs_quotas_are_carved_out_of_its_makers_ledger_so_maker_and_children_together_hold_no_more()
{
    let Some((_state, d)) = daemon::over_tcp("tq-carve") else {
        return;
    };
    let maker = cli_token(&d, "maker", &["--scope", "admin"]);
    let small = |token: &str, name: &str| {
        let body = serde_json::json!({
            "name": name, "start": false,
            "spec": { "resources": { "memory": "32M", "pids": 10, "disk": "16M" } }
        });
        call_on(
            &d,
            true,
            "POST",
            "/v1/sandboxes",
            Some(&body.to_string()),
            Some(token),
        )
    };
    // The daemon holds the maker to 16 sandboxes; a child of 15 leaves it
    // one.
    let body = serde_json::json!({
        "name": "big", "scopes": WORKER_SCOPES,
        "max_sandboxes": 15, "max_memory": "64M", "max_pids": 20
    });
    let (s, b) = make_token(&d, &maker, body);
    assert_eq!(s, 201, "{b}");
    let (s, b) = small(&maker, "m1");
    assert_eq!(s, 201, "{b}");
    // Before, 201: the maker had all 16 beside its child's 15.
    let (s, b) = small(&maker, "m2");
    assert_eq!(s, 429, "{b}");
    assert_eq!(json(&b)["code"], "quota", "{b}");
    // Nor can a second child have what the maker's sandbox holds.
    let body = serde_json::json!({
        "name": "more", "scopes": WORKER_SCOPES,
        "max_sandboxes": 1, "max_memory": "32M", "max_pids": 5
    });
    let (s, b) = make_token(&d, &maker, body);
    assert_eq!(s, 429, "{b}");
    assert_eq!(json(&b)["code"], "quota", "{b}");
    assert!(!names(&d).contains(&"more".to_string()));
    // A child given no quota takes all the maker has left: none here.
    let body = serde_json::json!({ "name": "rest", "scopes": WORKER_SCOPES });
    let (s, b) = make_token(&d, &maker, body);
    assert_eq!(s, 429, "{b}");
    // The maker revokes its child: its quotas come back.
    assert_eq!(revoke_as(&d, &maker, "big"), 204);
    let (s, b) = small(&maker, "m2");
    assert_eq!(s, 201, "{b}");
}
