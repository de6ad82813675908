//! A warm pool's sandboxes against the tokens that claim them: a claim
//! refused for its claimant's quota leaves every pooled sandbox as the
//! pool made it (no name the claimant asked for in any allowlist, no
//! trace of the claimant in any log), and the next holder gets a
//! sandbox with only its own names. A claim asking another value of any
//! field the table does not say a running sandbox can take never gets a
//! pooled sandbox made with the old one.

use crate::common::daemon::{
    call, call_on, curl_available, json, pooled_on_disk, quota_token, sandboxes_on_disk, Daemon,
};
use crate::common::*;
use std::time::Duration;

/// What of `id`'s state a later holder could see: its live allowlist
/// changes and its audit log.
fn traces(state: &std::path::Path, id: &str) -> String {
    let dir = sandbox_dir(state, id);
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap_or_default();
    format!("{}\n{}", read("egress.json"), read("audit.jsonl"))
}

#[test]
fn a_claim_refused_for_its_quota_leaves_no_name_of_the_claimant_in_any_pooled_sandbox() {
    if !curl_available() || !egress_available() {
        return;
    }
    let state = TempDir::new("pool-claims");
    let config = TempDir::new("pool-claims-config");
    let profiles = config.path().join("warden/profiles");
    std::fs::create_dir_all(&profiles).unwrap();
    std::fs::write(
        profiles.join("small.yaml"),
        "egress:\n  domains: [pypi.org]\n",
    )
    .unwrap();
    let d = Daemon::start_with(
        state.path(),
        true,
        &["--pool", "small=2"],
        &[("XDG_CONFIG_HOME", config.path())],
    );
    let pooled = || pooled_on_disk(state.path());
    let token = |name: &str, max: &str| quota_token(state.path(), name, max);
    let claimant = token("claimant", "1");
    let next = token("next", "4");
    let create =
        |t: &str, body: &str| call_on(&d, true, "POST", "/v1/sandboxes", Some(body), Some(t));

    // The claimant fills its quota with a sandbox of its own.
    let (s, b) = create(&claimant, r#"{"name":"own","start":false}"#);
    assert_eq!(s, 201, "{b}");
    wait_until("the pool is full", Duration::from_secs(60), || {
        pooled().len() == 2
            && pooled().iter().all(|id| {
                sandbox_dir(state.path(), id)
                    .join("supervisor.json")
                    .exists()
            })
    });
    // A claim of the pooled profile with a name of its own: refused.
    let claim = r#"{"profile":"small","spec":{"egress":{"domains":["pypi.org","exfil.example"]}}}"#;
    for _ in 0..3 {
        let (s, b) = create(&claimant, claim);
        assert_eq!(s, 429, "{b}");
    }
    for id in pooled() {
        let seen = traces(state.path(), &id);
        assert!(
            !seen.contains("exfil.example"),
            "{id} took the refused claim's name: {seen}"
        );
    }

    // The next holder gets a sandbox with the profile's names only, and
    // nothing in it tells of the claimant.
    let (s, b) = create(&next, r#"{"profile":"small"}"#);
    assert_eq!(s, 201, "{b}");
    let id = json(&b)["id"].as_str().unwrap().to_string();
    let (s, b) = call_on(
        &d,
        true,
        "GET",
        &format!("/v1/sandboxes/{id}/events?from=0&follow=false"),
        None,
        Some(&next),
    );
    assert_eq!(s, 200, "{b}");
    assert!(!b.contains("exfil.example"), "{b}");
    assert!(
        !b.contains("by token"),
        "another token's claim is told to the next holder: {b}"
    );
    // Its allowlist, as the owner reads it: the profile's name alone.
    let (s, b) = call_on(
        &d,
        false,
        "PATCH",
        &format!("/v1/sandboxes/{id}/egress"),
        Some("{}"),
        None,
    );
    assert_eq!(s, 200, "{b}");
    assert!(
        b.contains("pypi.org") && !b.contains("exfil.example"),
        "{b}"
    );
}

/// The pooled sandbox's spec as stored, the one it runs in.
fn stored_spec(state: &std::path::Path, id: &str) -> serde_json::Value {
    let text = std::fs::read_to_string(sandbox_dir(state, id).join("sandbox.json")).unwrap();
    json(&text)["spec"].clone()
}

#[test]
fn a_claim_asking_another_value_of_a_field_the_pool_never_names_is_made_cold() {
    if !curl_available() || !egress_available() {
        return;
    }
    let state = TempDir::new("pool-stale");
    let config = TempDir::new("pool-stale-config");
    let profiles = config.path().join("warden/profiles");
    std::fs::create_dir_all(&profiles).unwrap();
    std::fs::write(
        profiles.join("limited.yaml"),
        "egress:\n  domains: [pypi.org]\n",
    )
    .unwrap();
    let d = Daemon::start_with(
        state.path(),
        false,
        &["--pool", "limited=1"],
        &[("XDG_CONFIG_HOME", config.path())],
    );
    let ready = || -> Vec<String> {
        sandboxes_on_disk(state.path())
            .into_iter()
            .filter(|id| {
                sandbox_dir(state.path(), id)
                    .join("supervisor.json")
                    .exists()
            })
            .collect()
    };
    wait_until("the pool is full", Duration::from_secs(60), || {
        ready().len() == 1
    });
    let pooled = ready().remove(0);
    let made_with = stored_spec(state.path(), &pooled);
    // Limits and egress settings nothing in the pool's code names, each
    // asked with a value the pooled sandbox was not made with: where each
    // one lands in the spec, and the value asked.
    let asks = [
        (
            r#"{"resources":{"pids":77}}"#,
            "/resources/pids/value",
            serde_json::json!(77),
        ),
        (
            r#"{"resources":{"open_files":512}}"#,
            "/resources/open_files",
            serde_json::json!(512),
        ),
        (
            r#"{"resources":{"file_size":"1G"}}"#,
            "/resources/file_size",
            serde_json::json!(1u64 << 30),
        ),
        (
            r#"{"resources":{"egress_quota":"5G"}}"#,
            "/network/Egress/quota",
            serde_json::json!(5u64 << 30),
        ),
    ];
    for (spec, at, value) in asks {
        assert_ne!(
            made_with.pointer(at),
            Some(&value),
            "{at} is the pool's already"
        );
        let body = format!(r#"{{"profile":"limited","spec":{spec}}}"#);
        let (s, b) = call(&d, "POST", "/v1/sandboxes", Some(&body), None);
        assert_eq!(s, 201, "{b}");
        let id = json(&b)["id"].as_str().unwrap().to_string();
        assert_ne!(
            id, pooled,
            "a claim asking {spec} got the sandbox made without it"
        );
        assert_eq!(
            stored_spec(state.path(), &id).pointer(at),
            Some(&value),
            "{id} runs without {spec}"
        );
    }
    // The pooled sandbox waited for a claim it fits, and serves it.
    let (s, b) = call(
        &d,
        "POST",
        "/v1/sandboxes",
        Some(r#"{"profile":"limited"}"#),
        None,
    );
    assert_eq!(s, 201, "{b}");
    assert_eq!(json(&b)["id"].as_str().unwrap(), pooled, "{b}");
}
