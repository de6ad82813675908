//! What a writable volume's merge held back (the owner's files a
//! sandbox wrote over, kept under the state's `held-back/`) goes with the
//! volume, through a real daemon over real HTTP: a token's volume's
//! held-back entries count against the token's disk quota as the
//! volume's files do, and the volume's delete removes them. A package
//! cache's write-back (a profile's `caches:`, kept in the state) is
//! fenced the same way: a file the owner's configuration names inside a
//! cache's directory is held back, the rest of the cache merges.

use crate::common::daemon::{
    api_token, call, calls_as, curl_available, e2b_calls_as, json, with_small_template,
    WORKER_SCOPES,
};
use crate::common::*;
use std::path::{Path, PathBuf};

/// What the owner's profile reads, in the token's volume.
const OWNERS: &str = "description: the owner's settings, kept in a volume\n";

/// The directories under `held-back/` of warden's state directory `warden`
/// (a daemon's is `STATE/warden`).
fn held_back(warden: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(warden.join("held-back"))
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
    let d = with_small_template(state.path(), "12M");
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
    let kept = held_back(&state.path().join("warden"));
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
        held_back(&state.path().join("warden")).is_empty(),
        "the volume is gone, what its merge held back stays: {:?}",
        held_back(&state.path().join("warden"))
    );
}

/// Every file under `dir`.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            match e.file_type() {
                Ok(t) if t.is_dir() => todo.push(e.path()),
                _ => out.push(e.path()),
            }
        }
    }
    out
}

/// The owner's settings written as `conf.yaml` beside the cache's file
/// `first`, and a profile `own` in `profiles` that extends them: the
/// cache's directory.
fn owners_conf_beside(first: &Path, profiles: &Path) -> PathBuf {
    let pip = first.parent().unwrap().canonicalize().unwrap();
    std::fs::write(pip.join("conf.yaml"), OWNERS).unwrap();
    std::fs::write(
        profiles.join("own.yaml"),
        format!("extends: [{}]\n", pip.join("conf.yaml").display()),
    )
    .unwrap();
    pip
}

/// Finding: the owner's profile extends `conf.yaml` in pip's cache
/// directory of profile `cachy` (in warden's state, which the owner's
/// files' closure counted whole, so no fence was asked for a cache); a
/// one-shot run of `cachy` writes its own `conf.yaml` into
/// `~/.cache/pip`. Before, the write-back merged it and the owner's
/// profile then extended the sandbox's file; now it is held back, kept
/// under `held-back/`, said on stderr, and the cache's other files merge.
#[test]
fn a_caches_write_back_never_merges_over_a_file_the_owners_profile_extends() {
    let t = TempDir::new("held-back-cache");
    let (config, state) = (t.path().join("config"), t.path().join("state"));
    let profiles = config.join("warden/profiles");
    std::fs::create_dir_all(&profiles).unwrap();
    std::fs::write(
        profiles.join("cachy.yaml"),
        "description: a kept pip cache\nfilesystem:\n  caches: [pip]\n",
    )
    .unwrap();
    let run = |script: &str| {
        std::process::Command::new(warden_bin())
            .args([
                "run",
                "--no-tty",
                "--profile",
                "cachy",
                "--",
                "sh",
                "-c",
                script,
            ])
            .env("WARDEN_STATE_DIR", &state)
            .env("XDG_CONFIG_HOME", &config)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap()
    };
    ok(&run(
        "mkdir -p ~/.cache/pip && echo first > ~/.cache/pip/first",
    ));
    let first = files_under(&state.join("caches"))
        .into_iter()
        .find(|p| p.ends_with("first"))
        .expect("the cache's write-back kept the first run's file");
    let pip = owners_conf_beside(&first, &profiles);
    let out = run(
        "printf 'secrets:\\n  T:\\n    from_command: [/tmp/planted]\\n' > ~/.cache/pip/conf.yaml \
         && echo second > ~/.cache/pip/second",
    );
    let e = stderr(&out);
    ok(&out);
    assert_eq!(
        std::fs::read_to_string(pip.join("conf.yaml")).unwrap(),
        OWNERS,
        "the owner's profile now extends what the sandbox wrote: {e}"
    );
    assert_eq!(
        std::fs::read_to_string(pip.join("second")).unwrap(),
        "second\n"
    );
    let kept = held_back(&state);
    assert_eq!(kept.len(), 1, "{kept:?}: {e}");
    assert!(std::fs::read_to_string(kept[0].join("conf.yaml"))
        .unwrap()
        .contains("from_command"));
    assert!(
        e.contains("HELD BACK (holds_configuration)") && e.contains("conf.yaml"),
        "{e}"
    );
}

/// Finding: what a token's cache's write-back held back (6 MB it wrote
/// over a file the owner's profile extends in the token's pip cache) was
/// kept under `held-back/`, where the token's disk quota did not count
/// it (its sandbox started again, 8M budget + 6 MB held against 12M),
/// nor did the token's revocation remove it with its caches. Now the
/// start is refused (429 `quota`) and the revocation removes it.
#[test]
fn what_a_tokens_cache_held_back_counts_against_its_disk_quota() {
    if !curl_available() {
        return skip("curl is not installed");
    }
    let state = TempDir::new("held-back-token-cache");
    let d = with_small_template(state.path(), "12M");
    let profiles = state.path().join("config/warden/profiles");
    std::fs::write(
        profiles.join("cachy.yaml"),
        "resources:\n  disk: 8M\nfilesystem:\n  caches: [pip]\n",
    )
    .unwrap();
    let token = api_token(&d, "cachy", WORKER_SCOPES, None);
    let native = calls_as(&d, token.clone());
    let (s, b) = native(
        "POST",
        "/v1/sandboxes",
        Some(r#"{"name":"tc","profile":"cachy"}"#),
    );
    assert_eq!(s, 201, "{b}");
    let exec = |shell: &str| {
        let body = serde_json::json!({ "shell": shell }).to_string();
        let (s, b) = native("POST", "/v1/sandboxes/tc/exec", Some(&body));
        assert_eq!(s, 200, "{b}");
    };
    let stop = || {
        let (s, b) = native(
            "POST",
            "/v1/sandboxes/tc/stop",
            Some(r#"{"grace_seconds":1}"#),
        );
        assert_eq!(s, 200, "{b}");
    };
    exec("mkdir -p ~/.cache/pip && echo first > ~/.cache/pip/first");
    stop();
    let first = files_under(&state.path().join("warden/token-caches"))
        .into_iter()
        .find(|p| p.ends_with("first"))
        .expect("the token's cache kept the first file");
    let pip = owners_conf_beside(&first, &profiles);
    let (s, b) = native("POST", "/v1/sandboxes/tc/start", None);
    assert_eq!(s, 200, "{b}");
    exec("head -c 6000000 /dev/zero > ~/.cache/pip/conf.yaml");
    stop();
    assert_eq!(
        std::fs::read_to_string(pip.join("conf.yaml")).unwrap(),
        OWNERS
    );
    let kept = held_back(&state.path().join("warden"));
    assert_eq!(kept.len(), 1, "{kept:?}");
    let (s, b) = native("POST", "/v1/sandboxes/tc/start", None);
    assert_eq!(
        s, 429,
        "the token's cache's held-back bytes were not counted: {b}"
    );
    assert_eq!(json(&b)["code"], "quota", "{b}");
    // Removed with the token's caches once it is revoked and has no
    // sandbox left.
    let (s, b) = native("DELETE", "/v1/sandboxes/tc", None);
    assert!(s == 200 || s == 204, "{s}: {b}");
    let (s, b) = call(&d, "DELETE", "/v1/tokens/cachy", None, None);
    assert_eq!(s, 204, "{b}");
    // `token-caches/tHEX/PROFILE/NAME/LEAF`
    let token_caches = pip.ancestors().nth(3).unwrap();
    assert!(!token_caches.exists(), "{}", token_caches.display());
    assert!(
        held_back(&state.path().join("warden")).is_empty(),
        "the token's caches are gone, what their write-back held back stays: {:?}",
        held_back(&state.path().join("warden"))
    );
}
