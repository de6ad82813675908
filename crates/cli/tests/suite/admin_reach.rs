//! An `admin` token stands for the owner only while its record sets no
//! quota of its own (outside review 20, note b): one the owner held to
//! quotas was given a share of the machine, not the owner's place. Before,
//! such a token reached every sandbox (the owner's and every other
//! token's: 200 on `GET /v1/sandboxes/OWNERS`, listed) and could pass
//! `accept_flagged` on a commit, while docs/daemon.md called only a
//! quota-free admin the owner's stand-in. Now it reaches only the
//! sandboxes it made (404 on the others, as for any token, and not
//! listed) and is refused `accept_flagged` and `force` (403); a
//! quota-free admin token still reaches all and may pass them.

use crate::common::daemon::{call, json, on_socket, Daemon};

/// An `admin` token made by the owner, with `quotas` set in its record.
fn admin(d: &Daemon, name: &str, quotas: serde_json::Value) -> String {
    let mut body = serde_json::json!({ "name": name, "scopes": ["admin"] });
    if let (Some(b), Some(q)) = (body.as_object_mut(), quotas.as_object()) {
        b.extend(q.clone());
    }
    let (s, b) = call(d, "POST", "/v1/tokens", Some(&body.to_string()), None);
    assert_eq!(s, 201, "{b}");
    json(&b)["token"].as_str().unwrap().to_string()
}

fn listed(d: &Daemon, t: &str) -> String {
    let (s, b) = call(d, "GET", "/v1/sandboxes", None, Some(t));
    assert_eq!(s, 200, "{b}");
    b
}

#[test]
fn an_admin_token_held_to_quotas_reaches_only_its_own_sandboxes_and_cannot_accept_flagged() {
    let Some((_state, d)) = on_socket("admin-reach") else {
        return;
    };
    let (s, b) = call(
        &d,
        "POST",
        "/v1/sandboxes",
        Some(r#"{"name":"owners","start":false}"#),
        None,
    );
    assert_eq!(s, 201, "{b}");
    let held = admin(&d, "held", serde_json::json!({ "max_sandboxes": 2 }));
    let free = admin(&d, "free", serde_json::json!({}));
    let (s, b) = call(
        &d,
        "POST",
        "/v1/sandboxes",
        Some(r#"{"name":"helds","start":false}"#),
        Some(&held),
    );
    assert_eq!(s, 201, "{b}");
    // The held admin: its own sandbox only.
    let (s, b) = call(&d, "GET", "/v1/sandboxes/owners", None, Some(&held));
    assert_eq!(
        s, 404,
        "a quota-held admin reached the owner's sandbox: {b}"
    );
    let (s, b) = call(&d, "GET", "/v1/sandboxes/helds", None, Some(&held));
    assert_eq!(s, 200, "{b}");
    let l = listed(&d, &held);
    assert!(!l.contains("\"owners\"") && l.contains("\"helds\""), "{l}");
    let (s, b) = call(&d, "POST", "/v1/sandboxes/owners/stop", None, Some(&held));
    assert_eq!(s, 404, "{b}");
    for field in ["accept_flagged", "force"] {
        let body = format!(r#"{{"{field}":true}}"#);
        let (s, b) = call(
            &d,
            "POST",
            "/v1/sandboxes/helds/commit",
            Some(&body),
            Some(&held),
        );
        assert_eq!(s, 403, "{field}: {b}");
        assert_eq!(json(&b)["field"], format!("/{field}"), "{b}");
    }
    // The quota-free admin stands for the owner.
    for sb in ["owners", "helds"] {
        let (s, b) = call(&d, "GET", &format!("/v1/sandboxes/{sb}"), None, Some(&free));
        assert_eq!(s, 200, "{sb}: {b}");
    }
    let (s, b) = call(
        &d,
        "POST",
        "/v1/sandboxes/owners/commit",
        Some(r#"{"accept_flagged":true}"#),
        Some(&free),
    );
    assert_ne!(s, 403, "{b}");
}
