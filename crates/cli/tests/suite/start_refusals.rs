//! A supervisor's refusal of a start reaches each door with its reason
//! code and its field: the API's 422 carries `reason` and the field's
//! JSON pointer, and `warden start` names the code, the option and, for a
//! secret a profile set, the profile's FILE:LINE:COL kept when the
//! sandbox was created (or says plainly that it is not known, for a
//! sandbox created before warden kept it). Through the real CLI and the
//! real daemon over HTTP.

use crate::common::daemon::*;
use crate::common::owner::OwnerHost;
use crate::common::*;

/// A host whose profile `sec` gives a secret read from a file that is not
/// there: the start is refused when the supervisor reads it.
fn with_unreadable_secret(tag: &str) -> Option<(OwnerHost, std::path::PathBuf)> {
    if !egress_available() {
        return None;
    }
    let host = OwnerHost::new(tag)?;
    let missing = host.dir.path().join("no-such-secret");
    let profile = host.profile("sec");
    std::fs::write(
        &profile,
        format!(
            "egress:\n  domains: [example.com]\nsecrets:\n  API_TOKEN:\n    from_file: {}\n    hosts: [example.com]\n",
            missing.display()
        ),
    )
    .unwrap();
    Some((host, profile))
}

#[test]
fn warden_start_names_a_refused_secret_by_its_code_and_its_profiles_line() {
    let Some((host, profile)) = with_unreadable_secret("refusal-cli") else {
        return;
    };
    let out = host.owner(&["create", "s1", "--profile", "sec"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = host.owner(&["start", "s1"]);
    assert!(!out.status.success());
    let err = stderr(&out);
    let place = format!("{}:4:", profile.display());
    assert!(
        err.contains("refused (secret_unreadable, secrets.API_TOKEN at ") && err.contains(&place),
        "{err}"
    );
    // A sandbox created before warden kept the lines: said so plainly.
    let stored = host.dir.path().join("warden/sandboxes/s1/sandbox.json");
    let mut spec: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&stored).unwrap()).unwrap();
    assert!(spec["secret_origins"]["API_TOKEN"].is_string(), "{spec}");
    spec.as_object_mut().unwrap().remove("secret_origins");
    std::fs::write(&stored, serde_json::to_vec(&spec).unwrap()).unwrap();
    let out = host.owner(&["start", "s1"]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains(
            "refused (secret_unreadable, secrets.API_TOKEN; where its profile sets it is not known"
        ),
        "{err}"
    );
}

#[test]
fn the_apis_start_refusal_carries_the_supervisors_code_and_the_secrets_pointer() {
    let Some((host, _)) = with_unreadable_secret("refusal-api") else {
        return;
    };
    let d = host.daemon(&[]);
    let (s, b) = call(
        &d,
        "POST",
        "/v1/sandboxes",
        Some(r#"{"name":"s2","profile":"sec","start":false}"#),
        None,
    );
    assert_eq!(s, 201, "{b}");
    let (s, b) = call(&d, "POST", "/v1/sandboxes/s2/start", Some("{}"), None);
    assert_eq!(s, 422, "{b}");
    let p = json(&b);
    assert_eq!(p["reason"], "secret_unreadable", "{b}");
    assert_eq!(p["field"], "/spec/secrets/API_TOKEN", "{b}");
}

#[test]
fn the_e2b_doors_own_create_refusals_carry_an_error_code() {
    if !curl_available() {
        return skip("curl is not installed");
    }
    let state = TempDir::new("refusal-e2b");
    // A snapshot of the token's own, `src-snap`, to name as a template.
    let (_d, addr, t) = e2b_door_with_a_snapshot(state.path());
    let create = |body: &str| {
        let (s, b) = e2b_call(&addr, "POST", "/sandboxes", &t, Some(body));
        (s, json(&b))
    };
    for (body, code) in [
        (
            r#"{"templateID":"/etc/warden/x","timeout":60}"#,
            "template_not_a_name",
        ),
        (
            r#"{"templateID":"no-such-template","timeout":60}"#,
            "unknown_template",
        ),
        (
            r#"{"templateID":"base","timeout":60,"secure":false}"#,
            "unsupported_option",
        ),
        (
            r#"{"templateID":"src-snap","timeout":60,"envVars":{"A":"1"}}"#,
            "snapshot_template",
        ),
        (r#"{"templateID":7}"#, "invalid_body"),
    ] {
        let (s, b) = create(body);
        assert_eq!(s, 400, "{body}: {b}");
        assert_eq!(b["error_code"], code, "{body}: {b}");
    }
    assert!(!sandbox_dir(state.path(), "src-snap").exists());
}
