//! A token's snapshots against its bounds, under requests made at once:
//! the number one owner may keep holds however many saves race, and
//! what its snapshots hold counts against its disk quota.

use crate::common::daemon::{call_on, curl_available, json, Daemon};
use crate::common::*;

#[test]
fn saves_made_at_once_never_give_one_token_more_snapshots_than_it_may_keep() {
    if !curl_available() {
        return skip("curl is not installed");
    }
    let state = TempDir::new("snap-bounds");
    let d = Daemon::start(state.path(), true);
    let token = crate::common::daemon::api_token(
        &d,
        "racer",
        &["sandboxes:read", "sandboxes:write", "exec"],
        None,
    );
    let t = |method: &str, path: &str, body: Option<&str>| {
        call_on(&d, true, method, path, body, Some(&token))
    };
    let (s, b) = t("POST", "/v1/sandboxes", Some(r#"{"name":"src"}"#));
    assert_eq!(s, 201, "{b}");
    let (s, b) = t(
        "POST",
        "/v1/sandboxes/src/exec",
        Some(r#"{"shell":"head -c 100000 /dev/urandom > /workspace/blob"}"#),
    );
    assert_eq!(s, 200, "{b}");
    let statuses: Vec<u16> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..30)
            .map(|i| {
                let t = &t;
                scope.spawn(move || {
                    let body = format!(r#"{{"name":"race{i}"}}"#);
                    t("POST", "/v1/sandboxes/src/snapshots", Some(&body)).0
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let (s, b) = t("GET", "/v1/snapshots", None);
    assert_eq!(s, 200, "{b}");
    let kept = json(&b)["snapshots"].as_array().unwrap().len();
    let made = statuses.iter().filter(|s| **s == 201).count();
    assert_eq!(kept, made, "answers {statuses:?} and {kept} kept");
    assert_eq!(
        kept, 16,
        "one token keeps at most 16 snapshots: {statuses:?}"
    );
    // No half-made copy is left behind either.
    let partial = std::fs::read_dir(state.path().join("warden/saved"))
        .map(|rd| {
            rd.flatten()
                .filter(|e| e.file_name().to_string_lossy().ends_with(".partial"))
                .count()
        })
        .unwrap_or(0);
    assert_eq!(partial, 0);
}
