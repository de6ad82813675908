//! A token's snapshots against its bounds, under requests made at once:
//! the number one owner may keep holds however many saves race, and
//! what its snapshots hold counts against its disk quota, whose last
//! check of room each snapshot makes under the daemon's quota lock, where
//! it lands.

use crate::common::daemon::{
    api_token, call_on, calls_as, curl_available, json, with_disk, worker, Daemon, WORKER_SCOPES,
};
use crate::common::*;

/// A daemon in `state`, a token "racer" that may make sandboxes and run
/// commands, and its sandbox `src`.
fn racer_with_a_sandbox(state: &std::path::Path) -> (Daemon, String) {
    let d = Daemon::start(state, true);
    let token = api_token(&d, "racer", WORKER_SCOPES, None);
    let (s, b) = call_on(
        &d,
        true,
        "POST",
        "/v1/sandboxes",
        Some(r#"{"name":"src"}"#),
        Some(&token),
    );
    assert_eq!(s, 201, "{b}");
    (d, token)
}

/// The half-made copies (`*.partial`) left in the daemon's saved store
/// under `state`.
fn partial_copies(state: &std::path::Path) -> usize {
    std::fs::read_dir(state.join("warden/saved"))
        .into_iter()
        .flatten()
        .flatten()
        .filter(|space| space.path().is_dir())
        .flat_map(|space| {
            std::fs::read_dir(space.path())
                .into_iter()
                .flatten()
                .flatten()
        })
        .filter(|e| e.file_name().to_string_lossy().ends_with(".partial"))
        .count()
}

#[test]
fn saves_made_at_once_never_give_one_token_more_snapshots_than_it_may_keep() {
    if !curl_available() {
        return skip("curl is not installed");
    }
    let state = TempDir::new("snap-bounds");
    let (d, token) = racer_with_a_sandbox(state.path());
    let t = calls_as(&d, token);
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
    assert_eq!(partial_copies(state.path()), 0);
}

/// A removal that comes while a fork of the sandbox is being copied waits
/// for the copy: the fork is made whole (or refused cleanly), never
/// answered with an internal error about files pulled from under it.
#[test]
fn a_fork_raced_by_the_removal_of_its_source_is_made_whole_and_the_removal_waits() {
    if !curl_available() {
        return skip("curl is not installed");
    }
    let state = TempDir::new("fork-vs-delete");
    let (d, token) = racer_with_a_sandbox(state.path());
    let t = calls_as(&d, token);
    // Enough files that the copy takes a while.
    let (s, b) = t(
        "POST",
        "/v1/sandboxes/src/exec",
        Some(
            r#"{"shell":"mkdir -p /workspace/d && cd /workspace/d && i=0; while [ $i -lt 3000 ]; do echo $i > f$i; i=$((i+1)); done; head -c 30000000 /dev/urandom > /workspace/big"}"#,
        ),
    );
    assert_eq!(s, 200, "{b}");
    let t0 = std::time::Instant::now();
    let (fork, removal) = std::thread::scope(|scope| {
        let fork = scope.spawn(|| {
            let r = t("POST", "/v1/sandboxes/src/fork", Some(r#"{"count":2}"#));
            eprintln!("fork answered after {:?}", t0.elapsed());
            r
        });
        std::thread::sleep(std::time::Duration::from_millis(150));
        let removal = t("DELETE", "/v1/sandboxes/src", None);
        eprintln!("removal answered after {:?}", t0.elapsed());
        (fork.join().unwrap(), removal)
    });
    assert!(
        matches!(fork.0, 201 | 404 | 409),
        "the fork was answered {} {}",
        fork.0,
        fork.1
    );
    assert!(
        matches!(removal.0, 200 | 204),
        "{} {}",
        removal.0,
        removal.1
    );
    if fork.0 == 201 {
        // Each fork has the whole tree.
        for name in ["src-fork-1", "src-fork-2"] {
            let (s, b) = t(
                "POST",
                &format!("/v1/sandboxes/{name}/exec"),
                Some(r#"{"shell":"ls /workspace/d | wc -l; wc -c < /workspace/big"}"#),
            );
            assert_eq!(s, 200, "{b}");
            let out = json(&b)["stdout"].as_str().unwrap_or_default().to_string();
            assert!(
                out.contains("3000") && out.contains("30000000"),
                "{name}: {out}"
            );
        }
    }
}

/// Two snapshots asked at once of a token whose disk quota has room for
/// one: one is made, the other refused (429 `quota`), and what the
/// token's sandbox and snapshots hold never passes the quota. Each
/// reserves its size under the quota lock before its copy, and makes its
/// last check of room, and lands, under the same lock: neither can pass
/// on a room the other has taken.
#[test]
fn two_snapshots_at_once_against_a_quota_with_room_for_one_make_one() {
    if !curl_available() {
        return skip("curl is not installed");
    }
    let state = TempDir::new("snap-room");
    let file = state.path().join("daemon.yaml");
    // The sandbox's 64M budget, and 60M more: one 40 MiB snapshot fits,
    // two do not.
    std::fs::write(&file, "quotas:\n  disk: 124M\n").unwrap();
    let d = Daemon::start_with(
        state.path(),
        true,
        &["--config", file.to_str().unwrap()],
        &[],
    );
    let t = worker(&d, "roomy");
    with_disk(&t, "src", "64M");
    let (s, b) = t(
        "POST",
        "/v1/sandboxes/src/exec",
        Some(r#"{"shell":"head -c 41943040 /dev/urandom > /workspace/blob"}"#),
    );
    assert_eq!(s, 200, "{b}");
    let answers: Vec<(u16, String)> = std::thread::scope(|scope| {
        let handles: Vec<_> = ["one", "two"]
            .into_iter()
            .map(|name| {
                let t = &t;
                scope.spawn(move || {
                    let body = format!(r#"{{"name":"{name}"}}"#);
                    t("POST", "/v1/sandboxes/src/snapshots", Some(&body))
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let made = answers.iter().filter(|(s, _)| *s == 201).count();
    assert_eq!(made, 1, "{answers:?}");
    let (_, refusal) = answers.iter().find(|(s, _)| *s != 201).unwrap();
    assert_eq!(json(refusal)["code"], "quota", "{answers:?}");
    let (s, b) = t("GET", "/v1/snapshots", None);
    assert_eq!(s, 200, "{b}");
    let kept = json(&b)["snapshots"].as_array().unwrap().clone();
    assert_eq!(kept.len(), 1, "{b}");
    let bytes: u64 = kept.iter().filter_map(|k| k["bytes"].as_u64()).sum();
    assert!(
        (64u64 << 20) + bytes <= 124 << 20,
        "the token holds {bytes} bytes of snapshots besides its 64M sandbox, past its 124M quota"
    );
    // What was refused left nothing half-made.
    assert_eq!(partial_copies(state.path()), 0);
}
