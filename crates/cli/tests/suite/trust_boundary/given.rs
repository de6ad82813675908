//! The profile a token is given is the ceiling of every profile it names
//! beside it in `spec.extends` (outside review 32, F1): through the real
//! daemon, over HTTP, with a real token.

use super::{json_tcp, sandboxes, Host};
use crate::common::daemon::*;
use crate::common::*;

/// The owner's profiles of the review's reproduction: strict ones a token
/// is given, and others written for other purposes.
fn owners_profiles(host: &Host) {
    let dir = host.dir.path().join("config/warden/profiles");
    let secret = host.dir.path().join("api-token");
    std::fs::write(&secret, "the-owners-real-token\n").unwrap();
    for (name, text) in [
        (
            "ownerg",
            "isolation: gvisor\nresources: {memory: 512M, pids: 64, timeout: 10m}\n".to_string(),
        ),
        (
            "ownerx",
            "resources: {memory: 256M, pids: 32, timeout: 10m}\n".to_string(),
        ),
        (
            "ownerh",
            format!(
                "egress:\n  domains: [api.test]\n  allow_http: false\n  allow_requests: [\"GET api.test/public/**\"]\nsecrets: {{API_TOKEN: {{from_file: {}, hosts: [api.test]}}}}\n",
                secret.display()
            ),
        ),
        (
            "loose",
            "isolation: process\nresources: {memory: 4G, pids: 2000, timeout: 8h}\n".to_string(),
        ),
        (
            "loose2",
            "egress: {domains: [api.test], allow_http: true, allow_requests: [\"* api.test/**\"]}\n"
                .to_string(),
        ),
        (
            "mocktest",
            "egress:\n  domains: [api.test]\n  hosts: {api.test: 127.0.0.1}\n".to_string(),
        ),
        ("tight", "resources: {memory: 128M, timeout: 5m}\n".to_string()),
    ] {
        std::fs::write(dir.join(format!("{name}.yaml")), text).unwrap();
    }
}

/// The stored spec of sandbox `name`.
fn stored(host: &Host, name: &str) -> serde_json::Value {
    let path = sandbox_dir(host.dir.path(), name).join("sandbox.json");
    json(&std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
}

#[test]
fn a_token_naming_a_looser_profile_beside_the_one_it_was_given_is_refused_and_the_owner_is_not() {
    if !curl_available() {
        return skip("curl is not installed");
    }
    let host = Host::new("trust-given");
    owners_profiles(&host);
    let d = host.daemon(&[], true);
    let t = token(host.dir.path(), "writer", &["sandboxes:write"]);
    for (name, body, code, field) in [
        // gVisor to process; 512M, 64, 10m to 4G, 2000, 8h.
        (
            "g1",
            r#"{"profile":"ownerg","spec":{"extends":["loose"]}}"#,
            "loosens",
            "/spec/extends/0",
        ),
        (
            "x1",
            r#"{"profile":"ownerx","spec":{"extends":["loose"]}}"#,
            "loosens",
            "/spec/extends/0",
        ),
        // A shipped profile's 8h over the owner's 10m.
        (
            "h4",
            r#"{"profile":"ownerx","spec":{"extends":["base"]}}"#,
            "loosens",
            "/spec/extends/0",
        ),
        // allow_http and any method on the secret's host.
        (
            "h3",
            r#"{"profile":"ownerh","spec":{"extends":["tight","loose2"]}}"#,
            "loosens",
            "/spec/extends/1",
        ),
        // The owner's secret aimed at the host's loopback by another
        // profile's pin.
        (
            "h5",
            r#"{"profile":"ownerh","spec":{"extends":["mocktest"]}}"#,
            "owner_only",
            "/spec/extends/0",
        ),
        // Without `profile`, the first name is the one it builds on.
        (
            "x2",
            r#"{"spec":{"extends":["ownerx","loose"]}}"#,
            "loosens",
            "/spec/extends/1",
        ),
    ] {
        let body = body.replacen('{', &format!(r#"{{"name":"{name}","start":false,"#), 1);
        let (s, b) = json_tcp(&d, "POST", "/v1/sandboxes", &t, &body);
        assert_eq!(s, 403, "{body}: {b}");
        let p = json(&b);
        assert_eq!(p["code"], code, "{body}: {b}");
        assert_eq!(p["field"], field, "{body}: {b}");
        assert!(!b.contains("the-owners-real-token"), "{b}");
        assert!(!b.contains(&host.dir.path().display().to_string()), "{b}");
    }
    assert!(sandboxes(&d).is_empty(), "a refused create made a sandbox");
    // A profile that only tightens the given one still composes for the
    // token, and tightens it.
    let (s, b) = json_tcp(
        &d,
        "POST",
        "/v1/sandboxes",
        &t,
        r#"{"name":"narrow","start":false,"profile":"ownerg","spec":{"extends":["tight"]}}"#,
    );
    assert_eq!(s, 201, "{b}");
    assert!(
        json(&b)["backend"].as_str().unwrap().contains("gVisor"),
        "{b}"
    );
    let spec = stored(&host, "narrow");
    assert_eq!(
        spec["spec"]["resources"]["memory"]["value"],
        128 << 20,
        "{spec}"
    );
    assert_eq!(spec["spec"]["resources"]["timeout"]["secs"], 300, "{spec}");
    // The owner's own composition over the owner's socket is the owner's.
    let (s, b) = call(
        &d,
        "POST",
        "/v1/sandboxes",
        Some(r#"{"name":"owners","start":false,"profile":"ownerg","spec":{"extends":["loose"]}}"#),
        None,
    );
    assert_eq!(s, 201, "{b}");
    assert!(
        json(&b)["backend"].as_str().unwrap().contains("namespaces"),
        "{b}"
    );
    assert_eq!(
        stored(&host, "owners")["spec"]["resources"]["timeout"]["secs"],
        8 * 3600
    );
}
