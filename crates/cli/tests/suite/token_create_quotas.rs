//! A token's quotas are the same whichever door makes it, through a real
//! daemon over real HTTP: `POST /v1/tokens` takes `max_sandboxes`,
//! `max_memory` and `max_pids` as `warden token create` takes
//! `--max-sandboxes`, `--max-memory` and `--max-pids` (the same parser,
//! the same record), and a value the API cannot take is refused at its
//! JSON pointer with no token made. Before, the API took `max_pids` only:
//! a body with `max_sandboxes` or `max_memory` was refused as an unknown
//! field, so a token made over the API could not be bounded as the
//! command line's can.

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
