//! A token's copies (a sandbox made from its snapshot, a fork) against
//! what the owner grants now, and a token's snapshot against its disk
//! quota when creates race it, through the real daemon over real HTTP.
//!
//! A copy's spec is its source's: a host directory, a secret, a pinned
//! host the owner's profile gave the source must not outlive the owner
//! taking it back. And a snapshot's copy is reserved against the quota
//! from before it is made, so a create at the same moment counts it.

use crate::common::daemon::{
    api_token, call_on, calls_as, curl_available, json, slow_to_copy, with_config, worker, Daemon,
    WORKER_SCOPES,
};
use crate::common::grants::{profile_without_bind, stdout_of, TeamData};
use crate::common::*;

/// Finding: a token made `wb` from the owner's profile `withbind` (a host
/// directory bound read-only), snapshotted it and kept another sandbox
/// of it; the owner then took the bind out of the profile (a new create
/// no longer sees the directory), yet the token's sandbox made from the
/// snapshot, and its fork of the kept one, read the host's file again:
/// a copy replayed the grant as it was. Each copy is now held to what
/// the owner's profile grants a token now, and refused (403 at the
/// field's pointer) with nothing made when it no longer holds; the
/// owner's own fork keeps what the owner gave.
#[test]
fn a_tokens_copies_do_not_replay_a_host_bind_the_owner_has_taken_out_of_the_profile() {
    if !curl_available() {
        return skip("curl is not installed");
    }
    let team = TeamData::plant("copy-grants");
    let (state, config) = (&team.state, team.config.as_path());
    let d = Daemon::start_with(state.path(), true, &[], &[("XDG_CONFIG_HOME", config)]);
    let t = worker(&d, "a");
    let read = team.read();
    for name in ["wb", "wbkeep"] {
        let body = format!(r#"{{"name":"{name}","profile":"withbind"}}"#);
        let (s, b) = t("POST", "/v1/sandboxes", Some(&body));
        assert_eq!(s, 201, "{b}");
    }
    // While granted, the bind is there (the test sees what it tests).
    let (s, b) = t("POST", "/v1/sandboxes/wb/exec", Some(&read));
    assert_eq!(s, 200, "{b}");
    assert!(stdout_of(&b).contains("GRANTED-ONCE-ONLY"), "{b}");
    let (s, b) = t(
        "POST",
        "/v1/sandboxes/wb/snapshots",
        Some(r#"{"name":"wbsnap"}"#),
    );
    assert_eq!(s, 201, "{b}");
    let (s, b) = t("DELETE", "/v1/sandboxes/wb?force=true", None);
    assert!(s == 204 || s == 200, "{s} {b}");

    // The owner takes the bind back.
    profile_without_bind(config);
    let (s, b) = t(
        "POST",
        "/v1/sandboxes",
        Some(r#"{"name":"wb2","profile":"withbind"}"#),
    );
    assert_eq!(s, 201, "{b}");
    let (s, b) = t("POST", "/v1/sandboxes/wb2/exec", Some(&read));
    assert_eq!(s, 200, "{b}");
    assert!(!stdout_of(&b).contains("GRANTED-ONCE-ONLY"), "{b}");

    // From the snapshot: refused, nothing made.
    let (s, b) = t(
        "POST",
        "/v1/snapshots/wbsnap/sandboxes",
        Some(r#"{"name":"wb3"}"#),
    );
    if s == 201 {
        let (_, out) = t("POST", "/v1/sandboxes/wb3/exec", Some(&read));
        panic!("a sandbox was made from the snapshot and reads: {out}");
    }
    assert_eq!(s, 403, "{b}");
    assert_eq!(json(&b)["field"], "/spec/filesystem/read_only", "{b}");
    assert!(!sandbox_dir(&d.state, "wb3").exists());

    // A fork of the sandbox kept from before: refused, nothing made.
    let (s, b) = t("POST", "/v1/sandboxes/wbkeep/fork", Some(r#"{"count":2}"#));
    if s == 201 {
        let id = json(&b)["sandboxes"][0]["id"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let (_, out) = t("POST", &format!("/v1/sandboxes/{id}/exec"), Some(&read));
        panic!("a fork was made and reads: {out}");
    }
    assert_eq!(s, 403, "{b}");
    assert_eq!(json(&b)["field"], "/spec/filesystem/read_only", "{b}");
    for k in 1..=2 {
        assert!(!sandbox_dir(&d.state, &format!("wbkeep-fork-{k}")).exists());
    }

    // The owner's own fork keeps what the owner gave.
    let (s, b) = call_on(
        &d,
        false,
        "POST",
        "/v1/sandboxes/wbkeep/fork",
        Some(r#"{"count":1}"#),
        None,
    );
    assert_eq!(s, 201, "{b}");
}

/// The bytes a token's quota counts for its sandboxes (each one's disk
/// budget, from the answers) and snapshots.
fn counted(budgets: u64, snapshot: u64) -> u64 {
    budgets + snapshot
}

/// Finding: a token's snapshot asked for room under the snapshot store's
/// lock and was not counted anywhere while it was copied, so creates at
/// the same moment did not see it, nor it them: with a 300M quota and a
/// 64M sandbox, a 58M snapshot and three 64M creates all passed (314M
/// counted against 300M). The snapshot's copy is now reserved under the
/// quota's lock before it is made: whatever the order, what the token
/// holds at the end is within its quota.
#[test]
fn a_snapshot_and_creates_at_once_never_hold_more_than_the_tokens_disk_quota() {
    const MB: u64 = 1_000_000;
    const QUOTA: u64 = 300 * 1024 * 1024;
    const BUDGET: u64 = 64 * 1024 * 1024;
    let Some((_state, d)) = with_config("snap-quota-race", "quotas:\n  disk: 300M\n", &[], &[])
    else {
        return;
    };
    let t = worker(&d, "q");
    // A layer whose copy takes a while: many small files and 58 MB.
    slow_to_copy(&t, "src", "64M", 58);
    let (snap, creates) = std::thread::scope(|scope| {
        let snap = scope.spawn(|| {
            t(
                "POST",
                "/v1/sandboxes/src/snapshots",
                Some(r#"{"name":"big"}"#),
            )
        });
        let creates: Vec<_> = (0..3)
            .map(|i| {
                let t = &t;
                scope.spawn(move || {
                    std::thread::sleep(std::time::Duration::from_millis(150 + 100 * i));
                    let body = format!(
                        r#"{{"name":"c{i}","start":false,"spec":{{"resources":{{"disk":"64M"}}}}}}"#
                    );
                    t("POST", "/v1/sandboxes", Some(&body))
                })
            })
            .collect();
        (
            snap.join().unwrap(),
            creates
                .into_iter()
                .map(|h| h.join().unwrap())
                .collect::<Vec<_>>(),
        )
    });
    let mut sandboxes = 1u64;
    for (s, b) in &creates {
        match s {
            201 => sandboxes += 1,
            429 => assert_eq!(json(b)["field"], "/spec/resources/disk", "{b}"),
            _ => panic!("a create was answered {s} {b}"),
        }
    }
    let snapshot = match snap.0 {
        201 => json(&snap.1)["bytes"].as_u64().unwrap_or(u64::MAX),
        429 => 0,
        s => panic!("the snapshot was answered {s} {}", snap.1),
    };
    assert!(
        snapshot == 0 || snapshot > 50 * MB,
        "the snapshot holds {snapshot} bytes"
    );
    let held = counted(sandboxes * BUDGET, snapshot);
    assert!(
        held <= QUOTA,
        "the token holds {held} bytes ({sandboxes} sandboxes of 64M, a snapshot of {snapshot}) against a quota of {QUOTA}: {creates:?} {snap:?}"
    );
    // And something of it was let through: the race is a real one.
    assert!(sandboxes > 1 || snapshot > 0, "{creates:?} {snap:?}");
}

/// Finding (the same class): a token's sandbox on a project under the
/// daemon's `--workspace-root`, snapshotted; the daemon restarted without
/// that root (a create on the project is refused), yet a sandbox made
/// from the snapshot, and a fork, worked on the project again. Both are
/// now refused at the workspace's pointer, and nothing is made.
#[test]
fn a_tokens_copies_do_not_replay_a_workspace_root_the_daemon_no_longer_gives() {
    if !curl_available() {
        return skip("curl is not installed");
    }
    let state = TempDir::new("copy-roots");
    let root = state.path().join("projects");
    let project = root.join("proj");
    std::fs::create_dir_all(&project).unwrap();
    std::fs::write(project.join("notes.txt"), "ROOT-GIVEN-ONCE\n").unwrap();
    let mut d = Daemon::start_with(
        state.path(),
        true,
        &["--workspace-root", root.to_str().unwrap()],
        &[],
    );
    let token = api_token(&d, "r", WORKER_SCOPES, None);
    let body = format!(
        r#"{{"name":"ws","start":false,"workspace":"{}"}}"#,
        project.display()
    );
    let t = calls_as(&d, token.clone());
    let (s, b) = t("POST", "/v1/sandboxes", Some(&body));
    assert_eq!(s, 201, "{b}");
    let (s, b) = t(
        "POST",
        "/v1/sandboxes/ws/snapshots",
        Some(r#"{"name":"wsnap"}"#),
    );
    assert_eq!(s, 201, "{b}");
    drop(t);
    d.stop();
    let d = Daemon::start(state.path(), true);
    let t = calls_as(&d, token);
    let (s, b) = t(
        "POST",
        "/v1/sandboxes",
        Some(&body.replace("\"ws\"", "\"ws1\"")),
    );
    assert_eq!(s, 403, "a create on the project is refused now: {b}");
    let (s, b) = t(
        "POST",
        "/v1/snapshots/wsnap/sandboxes",
        Some(r#"{"name":"ws2","start":false}"#),
    );
    assert_eq!(s, 403, "{b}");
    assert!(
        json(&b)["field"]
            .as_str()
            .unwrap_or_default()
            .ends_with("workspace"),
        "{b}"
    );
    assert!(!sandbox_dir(&d.state, "ws2").exists());
    let (s, b) = t("POST", "/v1/sandboxes/ws/fork", None);
    assert_eq!(s, 403, "{b}");
    assert!(!sandbox_dir(&d.state, "ws-fork-1").exists());
}
