//! Snapshots and forks through the real command and the real daemon: a
//! snapshot then a sandbox made from it has the files and the home; a
//! fork into 3 gives 3 running sandboxes with the parent's files, each
//! with its own hostname, none seeing another's writes; an owner keeps a
//! bounded number of snapshots; a token cannot see, use or delete another
//! token's snapshot; a damaged snapshot is refused and nothing is made
//! from it.

use crate::common::daemon::*;
use crate::common::*;
use std::path::Path;

/// Stops (and removes) the sandboxes even when the test fails half-way.
struct Cleanup<'a>(&'a Path, Vec<String>);

impl Drop for Cleanup<'_> {
    fn drop(&mut self) {
        for n in &self.1 {
            let _ = warden(self.0, &["rm", "--force", n]);
        }
    }
}

fn exec(state: &Path, name: &str, script: &str) -> String {
    ok(&warden(state, &["exec", name, "--", "sh", "-c", script]))
}

#[test]
fn a_sandbox_made_from_a_snapshot_has_its_files_and_home() {
    let state = TempDir::new("snap-files");
    let s = state.path();
    let _c = Cleanup(s, vec!["orig".into(), "copy".into()]);
    ok(&warden(s, &["create", "orig", "--start"]));
    exec(
        s,
        "orig",
        "echo made-in-orig > /workspace/result.txt; echo remembered >> ~/.history",
    );
    // Taken while it runs (paused for the copy, and running again after).
    let out = ok(&warden(s, &["snapshots", "create", "orig", "prepared"]));
    assert_eq!(out.trim(), "prepared");
    assert!(ok(&warden(s, &["ls"]))
        .lines()
        .any(|l| l.starts_with("orig") && l.contains("running")));
    // Written after the snapshot: not in it.
    exec(s, "orig", "echo later > /workspace/later.txt");
    let ls = ok(&warden(s, &["snapshots", "ls"]));
    assert!(ls.contains("prepared") && ls.contains("orig"), "{ls}");

    ok(&warden(
        s,
        &["create", "copy", "--from-snapshot", "prepared", "--start"],
    ));
    let got = exec(
        s,
        "copy",
        "cat /workspace/result.txt; cat ~/.history; test -e /workspace/later.txt && echo LEAK || echo absent",
    );
    assert_eq!(got, "made-in-orig\nremembered\nabsent\n");
    // Options other than the snapshot's are refused, and nothing is made.
    let refused = warden(
        s,
        &[
            "create",
            "other",
            "--from-snapshot",
            "prepared",
            "--memory",
            "64M",
        ],
    );
    assert_eq!(code(&refused), 125);
    assert!(
        stderr(&refused).contains("--memory"),
        "{}",
        stderr(&refused)
    );
    assert!(!sandbox_dir(s, "other").exists());
    ok(&warden(s, &["snapshots", "rm", "prepared"]));
    let gone = warden(s, &["create", "again", "--from-snapshot", "prepared"]);
    assert_eq!(code(&gone), 125);
    assert!(stderr(&gone).contains("no snapshot named prepared"));
}

#[test]
fn a_fork_into_three_gives_three_sandboxes_that_see_the_parents_files_and_not_each_other() {
    let state = TempDir::new("snap-fork");
    let s = state.path();
    let names: Vec<String> = ["par", "par-fork-1", "par-fork-2", "par-fork-3"]
        .iter()
        .map(|n| n.to_string())
        .collect();
    let _c = Cleanup(s, names.clone());
    ok(&warden(s, &["create", "par", "--start"]));
    exec(s, "par", "echo from-parent > /workspace/base.txt");
    let o = warden(s, &["fork", "par", "--count", "3"]);
    let forks = ok(&o);
    // The process backend's memory is not carried, and the fork says so
    // and why, never silently.
    let said = stderr(&o);
    assert!(
        said.contains("memory: false") && said.contains("CRIU"),
        "{said}"
    );
    let forks: Vec<&str> = forks.lines().collect();
    assert_eq!(forks, ["par-fork-1", "par-fork-2", "par-fork-3"]);
    for (i, f) in forks.iter().enumerate() {
        assert_eq!(exec(s, f, "cat /workspace/base.txt"), "from-parent\n");
        exec(s, f, &format!("echo {i} > /workspace/own-{i}.txt"));
        // Its own identity: its name as its hostname.
        assert_eq!(exec(s, f, "hostname").trim(), *f);
    }
    for (i, f) in forks.iter().enumerate() {
        let seen = exec(s, f, "ls /workspace | tr '\\n' ' '");
        for j in 0..3 {
            assert_eq!(
                seen.contains(&format!("own-{j}.txt")),
                i == j,
                "{f} sees {seen}"
            );
        }
    }
    // And the parent sees none of its forks' writes, and runs on.
    assert_eq!(exec(s, "par", "ls /workspace | tr '\\n' ' '"), "base.txt ");
    // Its log says it was forked; each fork's says what from.
    let log = ok(&warden(s, &["logs", "par-fork-2"]));
    assert!(log.contains("a fork of sandbox par"), "{log}");
}

#[test]
fn an_owner_keeps_at_most_sixteen_snapshots() {
    let state = TempDir::new("snap-bound");
    let s = state.path();
    let _c = Cleanup(s, vec!["few".into()]);
    ok(&warden(s, &["create", "few"]));
    for i in 0..16 {
        ok(&warden(
            s,
            &["snapshots", "create", "few", &format!("s{i}")],
        ));
    }
    let refused = warden(s, &["snapshots", "create", "few", "s16"]);
    assert_eq!(code(&refused), 125);
    assert!(
        stderr(&refused).contains("16 snapshots already"),
        "{}",
        stderr(&refused)
    );
    ok(&warden(s, &["snapshots", "rm", "s0"]));
    ok(&warden(s, &["snapshots", "create", "few", "s16"]));
}

#[test]
fn a_damaged_snapshot_is_refused_and_nothing_is_made_from_it() {
    let state = TempDir::new("snap-damage");
    let s = state.path();
    let _c = Cleanup(s, vec!["src".into(), "bad".into()]);
    ok(&warden(s, &["create", "src", "--start"]));
    exec(
        s,
        "src",
        "head -c 100000 /dev/urandom > /workspace/data.bin",
    );
    ok(&warden(s, &["snapshots", "create", "src", "snap"]));
    // Truncated on disk.
    let file = s.join("warden/saved/owner/snap/upper/data.bin");
    let f = std::fs::OpenOptions::new().write(true).open(&file).unwrap();
    f.set_len(5000).unwrap();
    drop(f);
    let refused = warden(s, &["create", "bad", "--from-snapshot", "snap"]);
    assert_eq!(code(&refused), 125);
    assert!(
        stderr(&refused).contains("snapshot snap is damaged"),
        "{}",
        stderr(&refused)
    );
    assert!(!sandbox_dir(s, "bad").exists());
    assert!(!ok(&warden(s, &["ls"])).contains("bad"));
}

#[test]
fn a_token_cannot_see_use_or_delete_another_tokens_snapshot() {
    if !curl_available() {
        return skip("curl is not installed");
    }
    let state = TempDir::new("snap-tokens");
    let s = state.path();
    let d = Daemon::start(s, true);
    let alice = api_token(&d, "alice", WORKER_SCOPES, None);
    let mallory = api_token(&d, "mallory", WORKER_SCOPES, None);
    let t = |method: &str, path: &str, body: Option<&str>, tok: &str| {
        call_on(&d, true, method, path, body, Some(tok))
    };
    let (st, b) = t(
        "POST",
        "/v1/sandboxes",
        Some(r#"{"name":"alices"}"#),
        &alice,
    );
    assert_eq!(st, 201, "{b}");
    let (st, b) = t(
        "POST",
        "/v1/sandboxes/alices/exec",
        Some(r#"{"shell":"echo alice-secret > /workspace/secret.txt"}"#),
        &alice,
    );
    assert_eq!(st, 200, "{b}");
    let (st, b) = t(
        "POST",
        "/v1/sandboxes/alices/snapshots",
        Some(r#"{"name":"alice-snap"}"#),
        &alice,
    );
    assert_eq!(st, 201, "{b}");
    assert_eq!(json(&b)["workspace"], "", "a token was shown a host path");

    // Mallory sees no snapshot, cannot make a sandbox from Alice's, nor
    // delete it: each answered as if it did not exist.
    let (st, b) = t("GET", "/v1/snapshots", None, &mallory);
    assert_eq!(st, 200, "{b}");
    assert_eq!(json(&b)["snapshots"], serde_json::json!([]));
    let (st, b) = t(
        "POST",
        "/v1/snapshots/alice-snap/sandboxes",
        Some(r#"{"name":"stolen"}"#),
        &mallory,
    );
    assert_eq!(st, 404, "{b}");
    assert!(!sandbox_dir(s, "stolen").exists());
    let (st, b) = t("DELETE", "/v1/snapshots/alice-snap", None, &mallory);
    assert_eq!(st, 404, "{b}");

    // Alice can, and the new sandbox is hers with the files.
    let (st, b) = t("GET", "/v1/snapshots", None, &alice);
    assert_eq!(json(&b)["snapshots"][0]["name"], "alice-snap", "{st} {b}");
    let (st, b) = t(
        "POST",
        "/v1/snapshots/alice-snap/sandboxes",
        Some(r#"{"name":"alices-copy"}"#),
        &alice,
    );
    assert_eq!(st, 201, "{b}");
    let (st, b) = t(
        "POST",
        "/v1/sandboxes/alices-copy/exec",
        Some(r#"{"argv":["cat","/workspace/secret.txt"]}"#),
        &alice,
    );
    assert_eq!(
        (st, json(&b)["stdout"].clone()),
        (200, "alice-secret\n".into()),
        "{b}"
    );
    // A fork through the API: counted and started.
    let (st, b) = t(
        "POST",
        "/v1/sandboxes/alices/fork",
        Some(r#"{"count":2}"#),
        &alice,
    );
    assert_eq!(st, 201, "{b}");
    let forks = json(&b)["sandboxes"].as_array().unwrap().clone();
    assert_eq!(forks.len(), 2);
    assert!(forks.iter().all(|f| f["state"] == "running"), "{b}");
    let (st, b) = t(
        "POST",
        "/v1/sandboxes/alices/fork",
        Some(r#"{"count":99}"#),
        &alice,
    );
    assert_eq!(st, 400, "{b}");
    let (st, _) = t("DELETE", "/v1/snapshots/alice-snap", None, &alice);
    assert_eq!(st, 204);
}
