//! What a revoked token kept on disk for its next sandboxes, its package
//! caches (`STATE/token-caches/tHEX/`) and its "always" answers
//! (`STATE/token-grants/tHEX/`), goes with it: when it is revoked (with
//! the tokens it made), or, while a sandbox of it is kept, with its last
//! sandbox. Removed by descriptor: a link planted inside is removed, what
//! it points at on the host is not. Through the real daemon over real
//! HTTP and the real command line.
//!
//! Before, both directories stayed on disk for ever after a revocation
//! (and were counted on the host's disk by nobody).

use crate::common::daemon::{self, api_token, call, call_on, json, Daemon, WORKER_SCOPES};
use crate::common::*;
use std::path::{Path, PathBuf};

/// A token's directory name below `token-caches/` and `token-grants/`.
fn token_dir(token: &str) -> String {
    let id = token.split('_').nth(1).unwrap();
    let hex: String = id.bytes().map(|b| format!("{b:02x}")).collect();
    format!("t{hex}")
}

/// A host directory holding a file that must outlive every removal.
fn victim(state: &Path) -> PathBuf {
    let dir = state.join("host-victim");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("keep.txt"), "HOST-FILE-STAYS\n").unwrap();
    dir
}

/// `token`'s cache and grants directories, each with a file of its own
/// and links to the host's `victim` directory and file, as a sandbox
/// writing its cache could leave them.
fn plant(d: &Daemon, token: &str, victim: &Path) -> Vec<PathBuf> {
    ["token-caches", "token-grants"]
        .iter()
        .map(|kind| {
            let dir = d.state.join("warden").join(kind).join(token_dir(token));
            let inner = dir.join("pip");
            std::fs::create_dir_all(&inner).unwrap();
            std::fs::write(inner.join("wheel.whl"), "cached\n").unwrap();
            std::os::unix::fs::symlink(victim, inner.join("to-dir")).unwrap();
            std::os::unix::fs::symlink(victim.join("keep.txt"), inner.join("to-file")).unwrap();
            dir
        })
        .collect()
}

fn victim_intact(victim: &Path) {
    assert_eq!(
        std::fs::read_to_string(victim.join("keep.txt")).unwrap(),
        "HOST-FILE-STAYS\n",
        "a link inside was followed"
    );
}

#[test]
fn revoking_a_token_removes_its_and_its_childrens_caches_and_grants_but_not_what_a_link_inside_points_at(
) {
    let Some((state, d)) = daemon::over_tcp("leftovers-revoke") else {
        return;
    };
    let host = victim(state.path());
    let maker = api_token(&d, "maker", &["admin"], None);
    let body = serde_json::json!({ "name": "child", "scopes": WORKER_SCOPES });
    let (s, b) = call_on(
        &d,
        true,
        "POST",
        "/v1/tokens",
        Some(&body.to_string()),
        Some(&maker),
    );
    assert_eq!(s, 201, "{b}");
    let child = json(&b)["token"].as_str().unwrap().to_string();
    let bystander = api_token(&d, "bystander", WORKER_SCOPES, None);
    let mut gone = plant(&d, &maker, &host);
    gone.extend(plant(&d, &child, &host));
    let kept = plant(&d, &bystander, &host);

    let (s, b) = call(&d, "DELETE", "/v1/tokens/maker", None, None);
    assert_eq!(s, 204, "{b}");
    for dir in &gone {
        assert!(
            dir.symlink_metadata().is_err(),
            "{} is still on disk after its token was revoked",
            dir.display()
        );
    }
    for dir in &kept {
        assert!(dir.join("pip/wheel.whl").is_file(), "{}", dir.display());
    }
    victim_intact(&host);
}

#[test]
fn a_revoked_token_s_caches_and_grants_stay_while_its_sandbox_is_kept_and_go_with_the_last_one() {
    let Some((state, d)) = daemon::over_tcp("leftovers-last") else {
        return;
    };
    let host = victim(state.path());
    let token = daemon::worker_with_sandbox(&d, "w", "kept1");
    let dirs = plant(&d, &token, &host);
    // Revoked at the command line, the other door.
    ok(&warden(&d.state, &["token", "revoke", "w"]));
    for dir in &dirs {
        assert!(dir.join("pip/wheel.whl").is_file(), "{}", dir.display());
    }
    let (s, b) = call(&d, "DELETE", "/v1/sandboxes/kept1?force=true", None, None);
    assert_eq!(s, 204, "{b}");
    for dir in &dirs {
        assert!(
            dir.symlink_metadata().is_err(),
            "{} is still on disk after the revoked token's last sandbox went",
            dir.display()
        );
    }
    victim_intact(&host);
}

/// The last sandbox of a revoked token removed at the command line (the
/// daemon not told): what the token kept goes when the daemon next
/// reconciles its records, at its start. Before, it stayed.
#[test]
fn a_revoked_token_s_caches_go_at_the_daemon_s_next_start_once_its_last_sandbox_was_removed_at_the_command_line(
) {
    let Some((state, d)) = daemon::over_tcp("leftovers-restart") else {
        return;
    };
    let host = victim(state.path());
    let token = daemon::worker_with_sandbox(&d, "r", "kept2");
    let dirs = plant(&d, &token, &host);
    ok(&warden(&d.state, &["token", "revoke", "r"]));
    ok(&warden(&d.state, &["rm", "--force", "kept2"]));
    for dir in &dirs {
        assert!(dir.join("pip/wheel.whl").is_file(), "{}", dir.display());
    }
    drop(d);
    let d = Daemon::start(state.path(), true);
    for dir in &dirs {
        assert!(
            dir.symlink_metadata().is_err(),
            "{} is still on disk after the daemon's restart",
            dir.display()
        );
    }
    victim_intact(&host);
    drop(d);
}
