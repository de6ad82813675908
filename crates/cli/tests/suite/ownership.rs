//! Whose sandboxes a caller reaches, attacked through the real daemon: a
//! token acts on the sandboxes it made and on no other (another token's,
//! the owner's own), through the native API and the E2B door alike, and
//! what a person must decide on a commit (landing flagged files, forcing
//! over the real workspace's changes) is not an agent token's to decide.

use crate::common::daemon::*;
use crate::common::*;

const SCOPES: &[&str] = &["sandboxes:read", "sandboxes:write", "exec", "files"];

fn create(d: &Daemon, name: &str, token: Option<&str>) {
    let body = format!(r#"{{"name":"{name}","start":false}}"#);
    let (s, b) = call(d, "POST", "/v1/sandboxes", Some(&body), token);
    assert_eq!(s, 201, "{b}");
}

fn listed(d: &Daemon, token: Option<&str>) -> Vec<String> {
    let (s, b) = call(d, "GET", "/v1/sandboxes", None, token);
    assert_eq!(s, 200, "{b}");
    let mut ids: Vec<String> = json(&b)["sandboxes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap_or_default().to_string())
        .collect();
    ids.sort();
    ids
}

#[test]
fn a_token_reaches_only_the_sandboxes_it_made() {
    let state = TempDir::new("reach");
    let d = Daemon::start(state.path(), false);
    let a = api_token(&d, "a", SCOPES, None);
    let b = api_token(&d, "b", SCOPES, None);
    let admin = api_token(&d, "admin", &["admin"], None);
    create(&d, "owners", None);
    create(&d, "made-by-a", Some(&a));

    assert_eq!(listed(&d, Some(&a)), ["made-by-a"]);
    assert!(listed(&d, Some(&b)).is_empty(), "b sees others' sandboxes");
    assert_eq!(listed(&d, Some(&admin)), ["made-by-a", "owners"]);
    assert_eq!(listed(&d, None), ["made-by-a", "owners"]);

    // Every route that names a sandbox answers b as if it did not exist:
    // reading, running, files, review, lifecycle.
    for victim in ["made-by-a", "owners"] {
        for (method, path, body) in [
            ("GET", format!("/v1/sandboxes/{victim}"), None),
            ("GET", format!("/v1/sandboxes/{victim}/events"), None),
            ("GET", format!("/v1/sandboxes/{victim}/changes"), None),
            (
                "GET",
                format!("/v1/sandboxes/{victim}/files/list?path=."),
                None,
            ),
            ("POST", format!("/v1/sandboxes/{victim}/start"), Some("{}")),
            (
                "POST",
                format!("/v1/sandboxes/{victim}/exec"),
                Some(r#"{"argv":["true"]}"#),
            ),
            ("POST", format!("/v1/sandboxes/{victim}/commit"), Some("{}")),
            ("DELETE", format!("/v1/sandboxes/{victim}"), None),
        ] {
            let (s, r) = call(&d, method, &path, body, Some(&b));
            assert_eq!(s, 404, "{method} {path} by another token: {r}");
            assert!(!r.contains(&a), "{r}");
        }
    }
    // Nothing of them changed: both are still there, still stopped.
    assert_eq!(listed(&d, None), ["made-by-a", "owners"]);
    let (s, r) = call(&d, "GET", "/v1/sandboxes/made-by-a", None, Some(&a));
    assert_eq!(s, 200, "{r}");
    assert_eq!(json(&r)["state"], "stopped", "{r}");

    // A token made by the owner for one sandbox reaches that one: the
    // owner handed it out.
    let only = api_token(&d, "only", &["sandboxes:read"], Some("owners"));
    let (s, r) = call(&d, "GET", "/v1/sandboxes/owners/events", None, Some(&only));
    assert_eq!(s, 200, "{r}");
}

#[test]
fn a_token_does_not_reach_a_later_sandbox_that_took_the_name_of_one_it_made() {
    let state = TempDir::new("reach-name");
    let d = Daemon::start(state.path(), false);
    let a = api_token(&d, "a", SCOPES, None);
    create(&d, "name", Some(&a));
    // The owner removes it behind the daemon's back and makes their own
    // sandbox of that name.
    ok(&warden(state.path(), &["rm", "name"]));
    std::thread::sleep(std::time::Duration::from_millis(20));
    let ws = TempDir::new("reach-name-ws");
    ok(&warden(
        state.path(),
        &["create", "name", "--workspace", ws.str()],
    ));
    let (s, r) = call(&d, "GET", "/v1/sandboxes/name", None, Some(&a));
    assert_eq!(s, 404, "the token reached the owner's new sandbox: {r}");
    assert!(listed(&d, Some(&a)).is_empty());
}

#[test]
fn another_tokens_sandbox_is_not_found_through_the_e2b_door() {
    let state = TempDir::new("reach-e2b");
    let addr = format!("127.0.0.1:{}", free_port());
    let d = Daemon::start_with(state.path(), false, &["--e2b", &addr], &[]);
    let a = api_token(&d, "a", SCOPES, None);
    let b = api_token(&d, "b", SCOPES, None);
    // Running: the E2B door shows running and paused sandboxes only.
    let (s, r) = call(
        &d,
        "POST",
        "/v1/sandboxes",
        Some(r#"{"name":"made-by-a"}"#),
        Some(&a),
    );
    assert_eq!(s, 201, "{r}");
    let get = |key: &str, path: &str| {
        let out = std::process::Command::new("curl")
            .args(["-sS", "-w", "\n%{http_code}", "-H"])
            .arg(format!("x-api-key: {key}"))
            .arg(format!("http://{addr}{path}"))
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let (body, status) = text.rsplit_once('\n').unwrap_or(("", "0"));
        (status.trim().parse::<u16>().unwrap_or(0), body.to_string())
    };
    // Its maker sees it, so what b is told is about b.
    let (s, r) = get(&a, "/sandboxes/made-by-a");
    assert_eq!(s, 200, "{r}");
    let (s, r) = get(&b, "/sandboxes/made-by-a");
    assert!(s == 403 || s == 404, "{s} {r}");
    let (s, r) = get(&b, "/v2/sandboxes?state=running,paused");
    assert!(s == 200 && !r.contains("made-by-a"), "{s} {r}");
    let (s, r) = get(&b, "/sandboxes");
    assert!(!r.contains("made-by-a"), "{s} {r}");
    let (_, r) = get(&a, "/sandboxes");
    assert!(r.contains("made-by-a"), "{r}");
    call(&d, "DELETE", "/v1/sandboxes/made-by-a", None, Some(&a));
}

#[test]
fn an_agents_token_cannot_land_flagged_files_or_force_a_commit() {
    let state = TempDir::new("reach-commit");
    let d = Daemon::start(state.path(), false);
    let a = api_token(&d, "a", SCOPES, None);
    let admin = api_token(&d, "admin", &["admin"], None);
    create(&d, "mine", Some(&a));
    for (body, field) in [
        (r#"{"accept_flagged":true}"#, "/accept_flagged"),
        (r#"{"force":true}"#, "/force"),
    ] {
        let (s, r) = call(
            &d,
            "POST",
            "/v1/sandboxes/mine/commit",
            Some(body),
            Some(&a),
        );
        assert_eq!(s, 403, "{r}");
        assert_eq!(json(&r)["field"], field, "{r}");
        // The owner's and an admin token's get past that check (and on to
        // the review's own answer about this sandbox).
        for who in [None, Some(admin.as_str())] {
            let (s, r) = call(&d, "POST", "/v1/sandboxes/mine/commit", Some(body), who);
            assert_ne!(s, 403, "{r}");
        }
    }
}

/// The owner's profile is a ceiling for a token: a token's spec may ask
/// for less than the profile it names (less memory, the same isolation)
/// but not for more (more memory, a weaker isolation, plain HTTP the
/// owner switched off), and nothing is made when it asks.
#[test]
fn a_token_may_tighten_the_owners_profile_but_never_loosen_it() {
    let state = TempDir::new("ceiling");
    let config = state.path().join("config");
    std::fs::create_dir_all(config.join("warden/profiles")).unwrap();
    std::fs::write(
        config.join("warden/profiles/strict.yaml"),
        "isolation: vm\nresources:\n  memory: 1G\negress:\n  allow_http: false\n",
    )
    .unwrap();
    let d = Daemon::start_with(state.path(), false, &[], &[("XDG_CONFIG_HOME", &config)]);
    let a = api_token(&d, "a", SCOPES, None);
    for (spec, pointer) in [
        (r#"{"isolation":"process"}"#, "/spec/isolation"),
        (r#"{"resources":{"memory":"4G"}}"#, "/spec/resources/memory"),
        (
            r#"{"egress":{"allow_http":true}}"#,
            "/spec/egress/allow_http",
        ),
    ] {
        let body = format!(r#"{{"name":"x","profile":"strict","start":false,"spec":{spec}}}"#);
        let (s, r) = call(&d, "POST", "/v1/sandboxes", Some(&body), Some(&a));
        assert!(s == 403 || s == 422, "{spec}: {s} {r}");
        assert_eq!(json(&r)["field"], pointer, "{r}");
        assert!(listed(&d, None).is_empty(), "{spec} made a sandbox");
    }
    let body =
        r#"{"name":"x","profile":"strict","start":false,"spec":{"resources":{"memory":"512M"}}}"#;
    let (s, r) = call(&d, "POST", "/v1/sandboxes", Some(body), Some(&a));
    assert_eq!(s, 201, "{r}");
    // The owner on its own socket is bounded by nothing but the host.
    let body = r#"{"name":"y","profile":"strict","start":false,"spec":{"isolation":"process"}}"#;
    let (s, r) = call(&d, "POST", "/v1/sandboxes", Some(body), None);
    assert_eq!(s, 201, "{r}");
}
