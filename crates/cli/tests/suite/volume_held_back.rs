//! What a writable volume's merge held back (the owner's files a
//! sandbox wrote over, kept under the state's `held-back/`) goes with the
//! volume, through a real daemon over real HTTP: a token's volume's
//! held-back entries count against the token's disk quota as the
//! volume's files do, and the volume's delete removes them.

use crate::common::daemon::{
    api_token, calls_as, curl_available, e2b_calls_as, json, Daemon, WORKER_SCOPES,
};
use crate::common::*;
use std::path::{Path, PathBuf};

/// What the owner's profile reads, in the token's volume.
const OWNERS: &str = "description: the owner's settings, kept in a volume\n";

/// A daemon with the E2B door whose tokens may keep `disk` of disk, and
/// an owner's profile `small` (a template for E2B) of an 8M disk budget;
/// its catalogue is `STATE/config`.
fn daemon(state: &Path, disk: &str) -> Daemon {
    let config = state.join("config");
    std::fs::create_dir_all(config.join("warden/profiles")).unwrap();
    std::fs::write(
        config.join("warden/profiles/small.yaml"),
        "resources:\n  disk: 8M\n",
    )
    .unwrap();
    let file = state.join("daemon.yaml");
    std::fs::write(&file, format!("quotas:\n  disk: {disk}\n")).unwrap();
    let e2b = format!("127.0.0.1:{}", free_port());
    Daemon::start_with(
        state,
        true,
        &["--config", file.to_str().unwrap(), "--e2b", &e2b],
        &[("XDG_CONFIG_HOME", &config)],
    )
}

/// The directories under the state's `held-back/`.
fn held_back(state: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(state.join("warden/held-back"))
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default()
}

/// Finding: a token's sandbox writing over a file the owner's profile
/// names in the token's volume had it held back (6 MB here) under the
/// state's `held-back/`, where the token's disk quota did not count it
/// (its sandbox started again, 8M budget + 6 MB held against 12M) and
/// the volume's delete did not remove it (it stayed, and a later volume
/// given the same directory identity would have been charged for it).
/// Now the start is refused (429 `quota`) and the delete removes it.
#[test]
fn a_tokens_volumes_held_back_entries_count_against_its_quota_and_go_with_the_volume() {
    if !curl_available() {
        return skip("curl is not installed");
    }
    let state = TempDir::new("held-back-quota");
    let d = daemon(state.path(), "12M");
    let token = api_token(&d, "held", WORKER_SCOPES, None);
    let e2b = e2b_calls_as(&d, token.clone());
    let native = calls_as(&d, token.clone());
    let (s, b) = e2b("POST", "/volumes", Some(r#"{"name":"conf"}"#));
    assert_eq!(s, 201, "{b}");
    let vol_id = json(&b)["volumeID"].as_str().unwrap().to_string();
    let data = state
        .path()
        .join("warden/e2b/volumes")
        .join(&vol_id)
        .join("data")
        .canonicalize()
        .unwrap();
    // The owner keeps settings in the token's volume, and a profile of
    // the owner's extends them.
    std::fs::write(data.join("base.yaml"), OWNERS).unwrap();
    std::fs::write(
        state.path().join("config/warden/profiles/own.yaml"),
        format!("extends: [{}]\n", data.join("base.yaml").display()),
    )
    .unwrap();
    let (s, b) = e2b(
        "POST",
        "/sandboxes",
        Some(
            r#"{"templateID":"small","timeout":600,"volumeMounts":[{"name":"conf","path":"/mnt/v"}]}"#,
        ),
    );
    assert_eq!(s, 201, "{b}");
    let id = json(&b)["sandboxID"].as_str().unwrap().to_string();
    let write = r#"{"shell":"head -c 6000000 /dev/zero > /mnt/v/base.yaml; echo mine > /mnt/v/note; echo written"}"#;
    let (s, b) = native("POST", &format!("/v1/sandboxes/{id}/exec"), Some(write));
    assert_eq!(s, 200, "{b}");
    assert!(b.contains("written"), "{b}");
    let (s, b) = native(
        "POST",
        &format!("/v1/sandboxes/{id}/stop"),
        Some(r#"{"grace_seconds":1}"#),
    );
    assert_eq!(s, 200, "{b}");
    // Held back, kept.
    assert_eq!(
        std::fs::read_to_string(data.join("base.yaml")).unwrap(),
        OWNERS
    );
    assert_eq!(
        std::fs::read_to_string(data.join("note")).unwrap(),
        "mine\n"
    );
    let kept = held_back(state.path());
    assert_eq!(kept.len(), 1, "{kept:?}");
    assert_eq!(
        std::fs::metadata(kept[0].join("base.yaml")).unwrap().len(),
        6_000_000
    );
    // Counted: the sandbox's 8M budget and the 6 MB held back are past
    // the token's 12M.
    let (s, b) = native("POST", &format!("/v1/sandboxes/{id}/start"), None);
    assert_eq!(s, 429, "the token's held-back bytes were not counted: {b}");
    assert_eq!(json(&b)["code"], "quota", "{b}");
    // Removed with the volume.
    let (s, b) = e2b("DELETE", &format!("/volumes/{vol_id}"), None);
    assert_eq!(s, 204, "{b}");
    assert!(
        held_back(state.path()).is_empty(),
        "the volume is gone, what its merge held back stays: {:?}",
        held_back(state.path())
    );
}
