//! `GET /v1/profiles` over real HTTP against the built daemon: the
//! profiles a caller may name, by name and one-line description, from
//! the owner's catalogue (built-in and the owner's own directory); never
//! a profile's rules or the path it is read from, never the profiles the
//! daemon keeps for its own steps, and only to a token that may read
//! sandboxes.

use crate::common::daemon::{call, call_on, curl_available, json, token, Daemon};
use crate::common::*;

/// The owner's catalogue: one profile with a description whose rules
/// must stay unseen, and a file no caller can name.
fn owners_catalog(config: &std::path::Path) {
    let dir = config.join("warden/profiles");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("team.yaml"),
        "description: |\n  The team's agent,\n  on one line\negress:\n  domains: [planted-secret-name.example]\n",
    )
    .unwrap();
    std::fs::write(dir.join("not a name.yaml"), "description: unnameable\n").unwrap();
}

#[test]
fn a_reader_is_told_the_profiles_it_may_name_with_descriptions_and_nothing_of_their_contents() {
    if !curl_available() {
        skip("curl is not installed");
        return;
    }
    let state = TempDir::new("daemon-profiles");
    let config = state.path().join("config");
    owners_catalog(&config);
    let d = Daemon::start_with(state.path(), true, &[], &[("XDG_CONFIG_HOME", &config)]);
    let reader = token(state.path(), "reader", &["sandboxes:read"]);
    let (s, b) = call_on(&d, true, "GET", "/v1/profiles", None, Some(&reader));
    assert_eq!(s, 200, "{b}");
    let v = json(&b);
    let list = v["profiles"].as_array().unwrap();
    let names: Vec<&str> = list.iter().filter_map(|p| p["name"].as_str()).collect();
    let description = |n: &str| {
        list.iter()
            .find(|p| p["name"] == n)
            .and_then(|p| p["description"].as_str())
            .map(str::to_string)
    };
    // The built-in profiles and the owner's own, each with its line.
    assert!(names.contains(&"researcher"), "{names:?}");
    assert!(description("researcher").is_some(), "{b}");
    assert_eq!(
        description("team").as_deref(),
        Some("The team's agent, on one line"),
        "{b}"
    );
    // Made for the daemon's own package fetch: never a caller's.
    assert!(!names.contains(&"code-interpreter-v1-setup"), "{names:?}");
    // A file no caller could name at POST /v1/sandboxes is not offered.
    assert!(!names.contains(&"not a name"), "{names:?}");
    // Neither a profile's rules nor where the owner keeps it.
    assert!(!b.contains("planted-secret-name"), "{b}");
    assert!(!b.contains(config.to_str().unwrap()), "{b}");
    assert!(!b.contains("builtin:"), "{b}");
    // In the API's document, under the scope table's rule.
    let (s, doc) = call(&d, "GET", "/v1/openapi.json", None, None);
    assert_eq!(s, 200);
    assert!(json(&doc)["paths"]["/v1/profiles"]["get"].is_object());
}

#[test]
fn a_token_that_may_not_read_sandboxes_is_not_told_the_profiles() {
    if !curl_available() {
        skip("curl is not installed");
        return;
    }
    let state = TempDir::new("daemon-profiles-scope");
    let d = Daemon::start(state.path(), true);
    let files_only = token(state.path(), "files-only", &["files"]);
    let (s, b) = call_on(&d, true, "GET", "/v1/profiles", None, Some(&files_only));
    assert_eq!(s, 403, "{b}");
    assert!(!b.contains("researcher"), "{b}");
    let (s, b) = call_on(&d, true, "GET", "/v1/profiles", None, None);
    assert_eq!(s, 401, "{b}");
}
