//! The daemon's public routes against callers without a credential: the
//! health check answered anyone who could reach the TCP port (a local
//! user, a sandbox given the port, a web page through DNS rebinding to
//! loopback) with the number of every tenant's sandboxes, and so with
//! their activity as the count moved. Now an answer without a credential
//! carries no state, and a token is told only what it reaches.

use crate::common::daemon::*;

#[test]
fn the_health_check_tells_no_state_without_a_credential_and_a_token_only_what_it_reaches() {
    let Some((_state, d)) = over_tcp("health") else {
        return;
    };
    for name in ["own-1", "own-2"] {
        let (s, b) = json_call(
            &d,
            "POST",
            "/v1/sandboxes",
            &format!(r#"{{"name":"{name}"}}"#),
        );
        assert_eq!(s, 201, "{b}");
    }
    let a = api_token(&d, "a", &["sandboxes:read", "sandboxes:write"], None);
    let (s, b) = call_on(
        &d,
        true,
        "POST",
        "/v1/sandboxes",
        Some(r#"{"name":"a-1"}"#),
        Some(&a),
    );
    assert_eq!(s, 201, "{b}");

    // Anyone on the port: up, and its version, nothing else.
    let (s, b) = call_on(&d, true, "GET", "/v1/health", None, None);
    assert_eq!(s, 200, "{b}");
    let h = json(&b);
    assert!(h["version"].is_string(), "{b}");
    assert!(h.get("sandboxes").is_none(), "counted for nobody: {b}");
    // The same through a name a web page rebound to loopback.
    let out = std::process::Command::new("curl")
        .args(["-sS", "-H", "Host: rebound.example:80"])
        .arg(format!("http://{}/v1/health", d.tcp.as_ref().unwrap()))
        .output()
        .unwrap();
    let b = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(!b.contains("sandboxes"), "{b}");

    // A token: the sandboxes it reaches, not the owner's.
    let (s, b) = call_on(&d, true, "GET", "/v1/health", None, Some(&a));
    assert_eq!(s, 200, "{b}");
    assert_eq!(json(&b)["sandboxes"], 1, "{b}");
    // The owner on its socket: every one.
    let (s, b) = call(&d, "GET", "/v1/health", None, None);
    assert_eq!(s, 200, "{b}");
    assert_eq!(json(&b)["sandboxes"], 3, "{b}");
    for name in ["own-1", "own-2", "a-1"] {
        let _ = call(&d, "DELETE", &format!("/v1/sandboxes/{name}"), None, None);
    }
}
