//! Snapshots as a trust boundary, attacked through the real daemon over
//! real HTTP by a token holder: a snapshot keeps its own sandbox's spec
//! whatever another owner saves at the same moment under the same name
//! (each owner has names of its own), a sandbox made from one runs on its
//! own state only, a snapshot is held to its maker's disk quota when it
//! is made and when it is copied, and what a layer may hold (a FIFO, a
//! socket, a tree deeper than PATH_MAX) is answered, never with a 500.

use crate::common::daemon::{
    api_token, call_on, calls_as, curl_available, json, over_tcp, slow_to_copy, with_config,
    worker, Daemon, WORKER_SCOPES,
};
use crate::common::grants::stdout_of;
use crate::common::*;

fn owner(d: &Daemon, method: &str, path: &str, body: Option<&str>) -> (u16, String) {
    call_on(d, false, method, path, body, None)
}

/// The owner's sandbox `victim` with host reach only the owner may give
/// (a writable host directory, an environment variable, an allowed
/// name), started, and a token that may make sandboxes and snapshots.
fn owner_victim_and_token(
    state: &std::path::Path,
    secret_dir: &std::path::Path,
) -> (Daemon, String) {
    std::fs::create_dir_all(secret_dir).unwrap();
    std::fs::write(secret_dir.join("secret.txt"), "OWNER-PRIVATE-DATA\n").unwrap();
    let d = Daemon::start(state, true);
    let body = format!(
        r#"{{"name":"victim","spec":{{"filesystem":{{"read_write":["{}"]}},"env":{{"set":{{"OWNER_ONLY_VAR":"owner-env-value"}}}},"egress":{{"domains":["example.com"]}}}}}}"#,
        secret_dir.display()
    );
    let (s, b) = owner(&d, "POST", "/v1/sandboxes", Some(&body));
    assert_eq!(s, 201, "{b}");
    let token = api_token(&d, "att", WORKER_SCOPES, None);
    (d, token)
}

/// Finding: the token's snapshot of its own sandbox took the owner's
/// spec when the owner snapshotted its sandbox under the same name during
/// the token's copy (the spec was a caller-named file in the shared
/// directory, written before the store's lock); a sandbox made from it
/// then wrote the owner's host directory and read the owner's
/// environment. Each save now writes its spec in its own directory under
/// the lock, and the two names are two snapshots.
#[test]
fn a_tokens_snapshot_raced_by_the_owners_of_the_same_name_keeps_the_tokens_own_spec() {
    if !curl_available() {
        return skip("curl is not installed");
    }
    let state = TempDir::new("snap-race");
    let secret = state.path().join("ownerdata");
    let (d, token) = owner_victim_and_token(state.path(), &secret);
    let t = calls_as(&d, token);
    // A copy that takes a while: the window the owner's save fell in.
    slow_to_copy(&t, "att", "128M", 60);
    let (mine, theirs) = std::thread::scope(|scope| {
        let mine = scope.spawn(|| {
            t(
                "POST",
                "/v1/sandboxes/att/snapshots",
                Some(r#"{"name":"ready"}"#),
            )
        });
        let theirs: Vec<(u16, String)> = (0..6)
            .map(|i| {
                std::thread::sleep(std::time::Duration::from_millis(60 * i));
                let r = owner(
                    &d,
                    "POST",
                    "/v1/sandboxes/victim/snapshots",
                    Some(r#"{"name":"ready"}"#),
                );
                if r.0 == 201 {
                    let _ = owner(&d, "DELETE", "/v1/snapshots/ready", None);
                }
                r
            })
            .collect();
        (mine.join().unwrap(), theirs)
    });
    assert_eq!(mine.0, 201, "{}", mine.1);
    for (s, b) in &theirs {
        // The owner's name is the owner's: never "exists" for the token's.
        assert_eq!(*s, 201, "the owner's snapshot was answered {s} {b}");
    }
    // The token's snapshot keeps the token's sandbox's spec.
    let spec =
        std::fs::read_to_string(find_saved(state.path(), "ready", "token-").join("spec.json"))
            .unwrap();
    for planted in ["OWNER_ONLY_VAR", "ownerdata", "example.com", "victim"] {
        assert!(
            !spec.contains(planted),
            "the token's snapshot holds {planted}"
        );
    }
    // And what is made from it has none of the owner's reach.
    let (s, b) = t(
        "POST",
        "/v1/snapshots/ready/sandboxes",
        Some(r#"{"name":"stolen"}"#),
    );
    assert_eq!(s, 201, "{b}");
    let probe = format!(
        r#"{{"shell":"echo VAR=$OWNER_ONLY_VAR; cat {0}/secret.txt; echo pwned > {0}/planted; grep -c ownerdata /proc/self/mountinfo; true"}}"#,
        secret.display()
    );
    let (s, b) = t("POST", "/v1/sandboxes/stolen/exec", Some(&probe));
    assert_eq!(s, 200, "{b}");
    let out = stdout_of(&b);
    assert!(out.contains("VAR=\n"), "{out}");
    assert!(!out.contains("OWNER-PRIVATE-DATA"), "{out}");
    assert!(!secret.join("planted").exists());
    // Nothing of the token's went into the owner's sandbox's audit log.
    let audit = std::fs::read_to_string(sandbox_dir(&d.state, "victim").join("audit.jsonl"))
        .unwrap_or_default();
    assert!(
        !audit.contains("\"stolen\""),
        "the victim's log holds the token's events"
    );
}

/// Where snapshot `name` of an owner whose directory starts with `space`
/// lies.
fn find_saved(state: &std::path::Path, name: &str, space: &str) -> std::path::PathBuf {
    let saved = state.join("warden/saved");
    std::fs::read_dir(&saved)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(space))
        .map(|e| e.path().join(name))
        .find(|p| p.join("meta.json").is_file())
        .unwrap_or_else(|| panic!("no snapshot {name} under {space}* in {}", saved.display()))
}

/// Finding: snapshot names were one namespace for all: another token's
/// name answered 409 "exists" (telling it, and letting it be squatted).
/// Each owner now has its own: the same name is two snapshots, each seen
/// and used by its own owner only.
#[test]
fn a_snapshot_name_is_per_owner_and_another_owners_is_neither_told_nor_in_the_way() {
    let Some((_state, d)) = over_tcp("snap-names") else {
        return;
    };
    let a = api_token(&d, "a", WORKER_SCOPES, None);
    let b = api_token(&d, "b", WORKER_SCOPES, None);
    for (tok, sb, word) in [(&a, "sa", "from-a"), (&b, "sb", "from-b")] {
        let body = format!(r#"{{"name":"{sb}","start":true}}"#);
        let (s, r) = call_on(&d, true, "POST", "/v1/sandboxes", Some(&body), Some(tok));
        assert_eq!(s, 201, "{r}");
        let cmd = format!(r#"{{"shell":"echo {word} > /workspace/who"}}"#);
        let (s, r) = call_on(
            &d,
            true,
            "POST",
            &format!("/v1/sandboxes/{sb}/exec"),
            Some(&cmd),
            Some(tok),
        );
        assert_eq!(s, 200, "{r}");
    }
    let name = r#"{"name":"acme-prod-migration"}"#;
    let (s, r) = call_on(
        &d,
        true,
        "POST",
        "/v1/sandboxes/sa/snapshots",
        Some(name),
        Some(&a),
    );
    assert_eq!(s, 201, "{r}");
    let (s, r) = call_on(
        &d,
        true,
        "POST",
        "/v1/sandboxes/sb/snapshots",
        Some(name),
        Some(&b),
    );
    assert_eq!(s, 201, "another token's name was in the way: {s} {r}");
    let (s, r) = owner(&d, "POST", "/v1/sandboxes/sa/snapshots", Some(name));
    assert_eq!(s, 201, "the owner's name was in the way: {s} {r}");
    // Each sees its own, one.
    for tok in [&a, &b] {
        let (s, r) = call_on(&d, true, "GET", "/v1/snapshots", None, Some(tok));
        assert_eq!(s, 200, "{r}");
        assert_eq!(json(&r)["snapshots"].as_array().unwrap().len(), 1, "{r}");
    }
    // B's sandbox from the name is made of B's snapshot.
    let (s, r) = call_on(
        &d,
        true,
        "POST",
        "/v1/snapshots/acme-prod-migration/sandboxes",
        Some(r#"{"name":"nb"}"#),
        Some(&b),
    );
    assert_eq!(s, 201, "{r}");
    let (s, r) = call_on(
        &d,
        true,
        "POST",
        "/v1/sandboxes/nb/exec",
        Some(r#"{"shell":"cat /workspace/who"}"#),
        Some(&b),
    );
    assert_eq!(s, 200, "{r}");
    assert_eq!(stdout_of(&r).trim(), "from-b");
    // Deleting B's leaves A's.
    let (s, r) = call_on(
        &d,
        true,
        "DELETE",
        "/v1/snapshots/acme-prod-migration",
        None,
        Some(&b),
    );
    assert_eq!(s, 204, "{r}");
    let (s, r) = call_on(&d, true, "GET", "/v1/snapshots", None, Some(&a));
    assert_eq!(s, 200, "{r}");
    assert_eq!(json(&r)["snapshots"].as_array().unwrap().len(), 1, "{r}");
}

/// Finding: a token whose disk quota is 600M kept 954M of snapshots;
/// the snapshot route counted only the 16 / 8 GiB bounds. A snapshot is
/// now checked against the quota before its copy (and after it), and so
/// is a sandbox made from one, and a refused one leaves nothing.
#[test]
fn a_tokens_snapshots_and_their_copies_are_held_to_its_disk_quota_before_they_are_made() {
    let Some((state, d)) = with_config("snap-quota", "quotas:\n  disk: 250M\n", &[], &[]) else {
        return;
    };
    let t = worker(&d, "q");
    let (s, b) = t(
        "POST",
        "/v1/sandboxes",
        Some(r#"{"name":"q1","spec":{"resources":{"disk":"128M"}}}"#),
    );
    assert_eq!(s, 201, "{b}");
    let (s, b) = t(
        "POST",
        "/v1/sandboxes/q1/exec",
        Some(r#"{"shell":"head -c 70000000 /dev/urandom > /workspace/blob"}"#),
    );
    assert_eq!(s, 200, "{b}");
    // 128M + 70M fits in 250M; 128M + 2 x 70M does not.
    let (s, b) = t(
        "POST",
        "/v1/sandboxes/q1/snapshots",
        Some(r#"{"name":"s1"}"#),
    );
    assert_eq!(s, 201, "{b}");
    let (s, b) = t(
        "POST",
        "/v1/sandboxes/q1/snapshots",
        Some(r#"{"name":"s2"}"#),
    );
    assert_eq!(
        s, 429,
        "a snapshot past the token's disk quota was made: {b}"
    );
    assert_eq!(json(&b)["code"], "quota", "{b}");
    let (s, b) = t("GET", "/v1/snapshots", None);
    assert_eq!(
        json(&b)["snapshots"].as_array().unwrap().len(),
        1,
        "{s} {b}"
    );
    // A copy of s1 (70M more) does not fit either: refused before it is
    // written, and no sandbox is left.
    let (s, b) = t(
        "POST",
        "/v1/snapshots/s1/sandboxes",
        Some(r#"{"name":"c1"}"#),
    );
    assert_eq!(s, 429, "{b}");
    assert!(!sandbox_dir(&d.state, "c1").exists());
    let saved = state.path().join("warden/saved");
    let partial = walk_names(&saved)
        .into_iter()
        .filter(|n| n.ends_with(".partial"))
        .count();
    assert_eq!(partial, 0);
}

fn walk_names(dir: &std::path::Path) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        out.push(e.file_name().to_string_lossy().into_owned());
        if e.file_type().is_ok_and(|t| t.is_dir())
            && !e.file_name().to_string_lossy().ends_with(".partial")
        {
            out.extend(walk_names(&e.path()));
        }
    }
    out
}

/// Finding: a FIFO or a socket in the layer, or a tree 1500 levels deep,
/// made a snapshot answer 500 `internal`. A FIFO is now copied as a FIFO,
/// a socket refused with 422 `unsupported_entry`, and a deep tree saved,
/// verified and copied whole.
#[test]
fn a_fifo_a_socket_or_a_deep_tree_in_the_layer_is_answered_and_never_a_500() {
    let Some((_state, d)) = over_tcp("snap-odd") else {
        return;
    };
    let t = worker(&d, "o");
    let (s, b) = t("POST", "/v1/sandboxes", Some(r#"{"name":"odd"}"#));
    assert_eq!(s, 201, "{b}");
    let (s, b) = t(
        "POST",
        "/v1/sandboxes/odd/exec",
        Some(
            r#"{"shell":"command -v python3 >/dev/null || { echo no-python; exit 0; }; mkfifo /workspace/fifo && python3 -c \"import os; os.chdir('/workspace'); [(os.mkdir('dddd'), os.chdir('dddd')) for i in range(1500)]; open('f', 'w').write('bottom')\" && echo made"}"#,
        ),
    );
    assert_eq!(s, 200, "{b}");
    if stdout_of(&b).contains("no-python") {
        return skip("no python3 in the sandbox to make a tree deeper than PATH_MAX");
    }
    assert!(stdout_of(&b).contains("made"), "{b}");
    let (s, b) = t(
        "POST",
        "/v1/sandboxes/odd/snapshots",
        Some(r#"{"name":"odd1"}"#),
    );
    assert_eq!(s, 201, "{b}");
    let (s, b) = t(
        "POST",
        "/v1/snapshots/odd1/sandboxes",
        Some(r#"{"name":"odd2"}"#),
    );
    assert_eq!(s, 201, "{b}");
    let (s, b) = t(
        "POST",
        "/v1/sandboxes/odd2/exec",
        Some(
            r#"{"shell":"test -p /workspace/fifo && echo fifo; python3 -c \"import os; os.chdir('/workspace'); [os.chdir('dddd') for i in range(1500)]; print(open('f').read())\""}"#,
        ),
    );
    assert_eq!(s, 200, "{b}");
    let out = stdout_of(&b);
    assert!(out.contains("fifo") && out.contains("bottom"), "{out}");
    // A socket left in the layer: refused as input, nothing kept.
    let (s, b) = t(
        "POST",
        "/v1/sandboxes/odd/exec",
        Some(
            r#"{"shell":"python3 -c 'import socket; socket.socket(socket.AF_UNIX).bind(\"/workspace/sock\")' && echo bound"}"#,
        ),
    );
    assert_eq!(s, 200, "{b}");
    if !stdout_of(&b).contains("bound") {
        return skip("no python3 in the sandbox to bind a socket");
    }
    let (s, b) = t(
        "POST",
        "/v1/sandboxes/odd/snapshots",
        Some(r#"{"name":"odd3"}"#),
    );
    assert_eq!(s, 422, "{b}");
    assert_eq!(json(&b)["code"], "unsupported_entry", "{b}");
    let (s, b) = t("GET", "/v1/snapshots", None);
    assert_eq!(
        json(&b)["snapshots"].as_array().unwrap().len(),
        1,
        "{s} {b}"
    );
}
