//! Changes and commit through `warden serve` over real HTTP: what a
//! sandbox did to its workspace listed with the right kinds and flags; a
//! git hook planted by the sandbox flagged, and a commit without
//! `accept_flagged` refused with nothing written to the host; a commit of
//! some paths landing exactly those; conflicts with the host's tree
//! refused unless forced; a commit while the sandbox runs, or of changes
//! made since they were shown, refused; one file's change discarded and
//! the others kept.

use crate::common::daemon::{self, Daemon};
use crate::common::review::change_rules;
use crate::common::*;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// [`daemon::call`] on the owner's socket, the body as JSON (null when it
/// is none).
fn call(d: &Daemon, method: &str, path: &str, body: Option<&str>) -> (u16, serde_json::Value) {
    let (s, b) = daemon::call(d, method, path, body, None);
    (
        s,
        serde_json::from_str(&b).unwrap_or(serde_json::Value::Null),
    )
}

fn sh(d: &Daemon, id: &str, script: &str) {
    let body = serde_json::json!({ "shell": script }).to_string();
    let (s, r) = call(d, "POST", &format!("/v1/sandboxes/{id}/exec"), Some(&body));
    assert_eq!(s, 200, "{r}");
    assert_eq!(r["exit_status"], 0, "{script}: {r}");
}

/// The changes the daemon lists: path -> (kind, flag rules).
fn changes(d: &Daemon, id: &str) -> Vec<(String, String, Vec<String>)> {
    let (s, r) = call(
        d,
        "GET",
        &format!("/v1/sandboxes/{id}/changes?content=true"),
        None,
    );
    assert_eq!(s, 200, "{r}");
    let mut out: Vec<_> = r["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["path"].as_str().unwrap().to_string(),
                c["kind"].as_str().unwrap().to_string(),
                change_rules(c),
            )
        })
        .collect();
    out.sort();
    out
}

fn stop(d: &Daemon, id: &str) {
    let (s, r) = call(d, "POST", &format!("/v1/sandboxes/{id}/stop"), Some("{}"));
    assert_eq!(s, 200, "{r}");
}

/// A daemon and a host workspace (with a `.git/hooks` directory, files
/// to change, to remove, and to leave alone), a sandbox `c` on it.
fn setup(tag: &str) -> Option<(TempDir, Daemon, PathBuf)> {
    if Command::new("curl").arg("--version").output().is_err() {
        skip("curl is not installed");
        return None;
    }
    let dir = TempDir::new(tag);
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(ws.join(".git/hooks")).unwrap();
    std::fs::write(ws.join("existing.txt"), "old\n").unwrap();
    std::fs::write(ws.join("gone.txt"), "bye\n").unwrap();
    std::fs::write(ws.join("keep.txt"), "kept\n").unwrap();
    let d = Daemon::start(dir.path(), false);
    let body = serde_json::json!({ "name": "c", "workspace": ws }).to_string();
    let (s, r) = call(&d, "POST", "/v1/sandboxes", Some(&body));
    assert_eq!(s, 201, "{r}");
    Some((dir, d, ws))
}

fn read(p: &Path) -> Option<String> {
    std::fs::read_to_string(p).ok()
}

#[test]
fn a_planted_hook_is_flagged_and_a_commit_lands_exactly_what_was_accepted() {
    let Some((_dir, d, ws)) = setup("ch-commit") else {
        return;
    };
    sh(
        &d,
        "c",
        "cd /workspace && echo new > a.txt && echo bee > b.txt && echo changed > existing.txt \
         && rm gone.txt && printf '#!/bin/sh\\necho pwned\\n' > .git/hooks/pre-commit \
         && chmod +x .git/hooks/pre-commit",
    );
    let listed = changes(&d, "c");
    let find = |p: &str| listed.iter().find(|c| c.0 == p).cloned();
    assert_eq!(find("a.txt").unwrap().1, "added", "{listed:?}");
    assert_eq!(find("b.txt").unwrap().1, "added");
    assert_eq!(find("existing.txt").unwrap().1, "modified");
    assert_eq!(find("gone.txt").unwrap().1, "deleted");
    let hook = find(".git/hooks/pre-commit").unwrap();
    assert_eq!(hook.1, "added");
    assert!(hook.2.contains(&"git-hook".to_string()), "{hook:?}");
    assert!(find("keep.txt").is_none());
    assert!(find("a.txt").unwrap().2.is_empty());

    // While it runs its changes are not final.
    let (s, r) = call(&d, "POST", "/v1/sandboxes/c/commit", Some("{}"));
    assert_eq!((s, r["code"].as_str()), (409, Some("running")), "{r}");
    stop(&d, "c");
    changes(&d, "c");

    // All of it, without accepting the hook: refused, the hook named,
    // nothing written.
    let (s, r) = call(&d, "POST", "/v1/sandboxes/c/commit", Some("{}"));
    assert_eq!((s, r["code"].as_str()), (409, Some("flagged")), "{r}");
    assert_eq!(r["details"][0]["path"], ".git/hooks/pre-commit", "{r}");
    assert!(r["message"].as_str().unwrap().contains("git-hook"), "{r}");
    // The owner is told how to accept them (a token, which may not, is
    // told who decides: review23_reviewer).
    assert!(
        r["message"]
            .as_str()
            .unwrap()
            .contains("\"accept_flagged\": true"),
        "{r}"
    );
    assert_eq!(read(&ws.join("a.txt")), None);
    assert_eq!(read(&ws.join("existing.txt")).as_deref(), Some("old\n"));
    assert_eq!(read(&ws.join("gone.txt")).as_deref(), Some("bye\n"));
    assert!(!ws.join(".git/hooks/pre-commit").exists());

    // Two paths by name: exactly those land.
    let (s, r) = call(
        &d,
        "POST",
        "/v1/sandboxes/c/commit",
        Some(r#"{"paths":["a.txt","/workspace/existing.txt"]}"#),
    );
    assert_eq!(s, 200, "{r}");
    let mut applied: Vec<&str> = r["applied"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap())
        .collect();
    applied.sort();
    assert_eq!(applied, ["a.txt", "existing.txt"]);
    assert_eq!(read(&ws.join("a.txt")).as_deref(), Some("new\n"));
    assert_eq!(read(&ws.join("existing.txt")).as_deref(), Some("changed\n"));
    assert_eq!(read(&ws.join("b.txt")), None);
    assert_eq!(read(&ws.join("gone.txt")).as_deref(), Some("bye\n"));
    assert!(!ws.join(".git/hooks/pre-commit").exists());
    let left: Vec<String> = changes(&d, "c").into_iter().map(|c| c.0).collect();
    assert_eq!(left, [".git/hooks/pre-commit", "b.txt", "gone.txt"]);

    // A path that leaves the workspace is bad input, and changes nothing.
    let (s, r) = call(
        &d,
        "POST",
        "/v1/sandboxes/c/commit",
        Some(r#"{"paths":["../x"]}"#),
    );
    assert_eq!(s, 400, "{r}");

    // Accepted by name: the rest lands, the hook too.
    let (s, r) = call(
        &d,
        "POST",
        "/v1/sandboxes/c/commit",
        Some(r#"{"accept_flagged":true}"#),
    );
    assert_eq!(s, 200, "{r}");
    assert!(ws.join(".git/hooks/pre-commit").exists());
    assert_eq!(read(&ws.join("b.txt")).as_deref(), Some("bee\n"));
    assert!(!ws.join("gone.txt").exists());
    assert!(changes(&d, "c").is_empty());
    // Each commit, and each refusal, is in the sandbox's audit log.
    let audit = events(&sandbox_dir(&d.state, "c").join("audit.jsonl"));
    let actions: Vec<&str> = audit
        .iter()
        .filter(|e| e["event"] == "workspace")
        .filter_map(|e| e["action"].as_str())
        .collect();
    assert!(
        actions.iter().filter(|a| **a == "commit").count() >= 2
            && actions.contains(&"commit-refused"),
        "{actions:?}"
    );
}

#[test]
fn conflicts_and_changes_made_since_they_were_shown_are_refused() {
    let Some((_dir, d, ws)) = setup("ch-conflict") else {
        return;
    };
    sh(&d, "c", "echo sandbox > /workspace/existing.txt");
    stop(&d, "c");
    // The host changes the same file meanwhile.
    std::thread::sleep(Duration::from_millis(20));
    std::fs::write(ws.join("existing.txt"), "host\n").unwrap();
    changes(&d, "c");
    let (s, r) = call(&d, "POST", "/v1/sandboxes/c/commit", Some("{}"));
    assert_eq!((s, r["code"].as_str()), (409, Some("conflicts")), "{r}");
    assert_eq!(r["details"][0]["path"], "existing.txt", "{r}");
    assert!(
        r["message"].as_str().unwrap().contains("\"force\": true"),
        "{r}"
    );
    assert_eq!(read(&ws.join("existing.txt")).as_deref(), Some("host\n"));
    // A change made after the last look is not applied unseen.
    let (s, r) = call(&d, "POST", "/v1/sandboxes/c/start", Some("{}"));
    assert_eq!(s, 200, "{r}");
    sh(&d, "c", "echo later > /workspace/later.txt");
    stop(&d, "c");
    let (s, r) = call(
        &d,
        "POST",
        "/v1/sandboxes/c/commit",
        Some(r#"{"paths":["later.txt"]}"#),
    );
    assert_eq!((s, r["code"].as_str()), (409, Some("unreviewed")), "{r}");
    assert!(!ws.join("later.txt").exists());
    changes(&d, "c");
    let (s, r) = call(
        &d,
        "POST",
        "/v1/sandboxes/c/commit",
        Some(r#"{"force":true}"#),
    );
    assert_eq!(s, 200, "{r}");
    assert_eq!(r["forced"][0], "existing.txt", "{r}");
    assert_eq!(read(&ws.join("existing.txt")).as_deref(), Some("sandbox\n"));
    assert_eq!(read(&ws.join("later.txt")).as_deref(), Some("later\n"));
}

#[test]
fn a_sandbox_without_a_layer_says_so_with_409() {
    let Some((_dir, d, _ws)) = setup("ch-nolayer") else {
        return;
    };
    stop(&d, "c");
    std::fs::remove_dir_all(sandbox_dir(&d.state, "c").join("upper")).unwrap();
    let (s, r) = call(&d, "GET", "/v1/sandboxes/c/changes", None);
    assert_eq!((s, r["code"].as_str()), (409, Some("no_layer")), "{r}");
    let (s, r) = call(&d, "POST", "/v1/sandboxes/c/commit", Some("{}"));
    assert_eq!((s, r["code"].as_str()), (409, Some("no_layer")), "{r}");
    let (s, _) = call(&d, "GET", "/v1/sandboxes/nope/changes", None);
    assert_eq!(s, 404);
}

#[test]
fn one_file_is_discarded_and_the_others_stay_for_review() {
    let Some((_dir, d, ws)) = setup("ch-discard") else {
        return;
    };
    sh(
        &d,
        "c",
        "cd /workspace && echo new > a.txt && echo changed > existing.txt && rm gone.txt",
    );
    // While it runs: refused, nothing thrown away.
    let (s, r) = call(
        &d,
        "POST",
        "/v1/sandboxes/c/discard",
        Some(r#"{"paths":["existing.txt"]}"#),
    );
    assert_eq!((s, r["code"].as_str()), (409, Some("running")), "{r}");
    stop(&d, "c");
    // Bad input: no path, the whole workspace, a path outside it; each
    // refused with its field, and nothing thrown away.
    for (body, field) in [
        (r#"{"paths":[]}"#, "/paths"),
        (r#"{"paths":["a.txt","/workspace"]}"#, "/paths/1"),
        (r#"{"paths":["/etc/passwd"]}"#, "/paths/0"),
    ] {
        let (s, r) = call(&d, "POST", "/v1/sandboxes/c/discard", Some(body));
        assert_eq!(s, 400, "{body}: {r}");
        assert_eq!(r["field"], field, "{body}: {r}");
    }
    assert_eq!(changes(&d, "c").len(), 3);
    // One file's change (and a deletion's) thrown away; the other stays.
    let (s, r) = call(
        &d,
        "POST",
        "/v1/sandboxes/c/discard",
        Some(r#"{"paths":["existing.txt","/workspace/gone.txt"]}"#),
    );
    assert_eq!(s, 200, "{r}");
    let mut thrown: Vec<_> = r["discarded"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap().to_string())
        .collect();
    thrown.sort();
    assert_eq!(thrown, ["existing.txt", "gone.txt"]);
    let left = changes(&d, "c");
    assert_eq!(left.len(), 1, "{left:?}");
    assert_eq!(left[0].0, "a.txt");
    // The host was never touched; the sandbox sees the real files again.
    assert_eq!(read(&ws.join("existing.txt")).as_deref(), Some("old\n"));
    assert_eq!(read(&ws.join("a.txt")), None);
    let (s, r) = call(&d, "POST", "/v1/sandboxes/c/start", Some("{}"));
    assert_eq!(s, 200, "{r}");
    let body = serde_json::json!({ "shell": "cat /workspace/existing.txt /workspace/gone.txt" })
        .to_string();
    let (_, r) = call(&d, "POST", "/v1/sandboxes/c/exec", Some(&body));
    assert_eq!(r["stdout"], "old\nbye\n", "{r}");
    // Nothing left there: an empty answer; recorded in the audit log.
    stop(&d, "c");
    let (s, r) = call(
        &d,
        "POST",
        "/v1/sandboxes/c/discard",
        Some(r#"{"paths":["existing.txt"]}"#),
    );
    assert_eq!(s, 200, "{r}");
    assert_eq!(r["discarded"], serde_json::json!([]));
    let log = std::fs::read_to_string(d.state.join("warden/sandboxes/c/audit.jsonl")).unwrap();
    assert!(log.contains(r#""action":"discard""#), "{log}");
}

#[test]
fn the_api_marks_and_counts_what_the_workspaces_gitignore_ignores_and_a_commit_leaves_it_out() {
    let Some((_dir, d, ws)) = setup("ch-ignored") else {
        return;
    };
    std::fs::write(ws.join(".gitignore"), "build/\n*.log\n").unwrap();
    sh(
        &d,
        "c",
        "cd /workspace && mkdir build && echo o > build/out.o && echo l > run.log && echo new > a.txt",
    );
    stop(&d, "c");
    let (s, r) = call(&d, "GET", "/v1/sandboxes/c/changes?content=true", None);
    assert_eq!(s, 200, "{r}");
    assert_eq!(r["ignored"], 3, "{r}");
    let marked = |p: &str| {
        r["changes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["path"] == p)
            .map(|c| c["ignored"] == serde_json::Value::Bool(true))
    };
    assert_eq!(marked("build/out.o"), Some(true), "{r}");
    assert_eq!(marked("run.log"), Some(true), "{r}");
    assert_eq!(marked("a.txt"), Some(false), "{r}");
    let (s, r) = call(&d, "POST", "/v1/sandboxes/c/commit", Some("{}"));
    assert_eq!(s, 200, "{r}");
    assert_eq!(r["applied"], serde_json::json!(["a.txt"]), "{r}");
    assert_eq!(r["ignored"].as_array().map(Vec::len), Some(3), "{r}");
    assert!(!ws.join("run.log").exists() && !ws.join("build").exists());
    changes(&d, "c");
    let (s, r) = call(
        &d,
        "POST",
        "/v1/sandboxes/c/commit",
        Some(r#"{"include_ignored": true}"#),
    );
    assert_eq!(s, 200, "{r}");
    assert!(ws.join("run.log").exists() && ws.join("build/out.o").exists());
}

/// A link's `target` in the changes (`old`, the host workspace's link;
/// `new`, the sandbox's) is the link's content, what `readlink` gives
/// inside the sandbox too, never a path the daemon resolved on the host
/// (outside review 20, note a: the owner's link targets shown to a token
/// are what its sandbox reads in its own workspace anyway).
#[test]
fn a_links_target_in_the_changes_is_what_the_sandbox_reads_itself() {
    let Some((_dir, d, ws)) = setup("ch-link") else {
        return;
    };
    // A relative link whose resolution on the host would be a host path
    // (the workspace's own directory), and an absolute one.
    std::os::unix::fs::symlink("../ws/keep.txt", ws.join("rel")).unwrap();
    std::os::unix::fs::symlink("/etc/hostname", ws.join("abs")).unwrap();
    let seen = |name: &str| {
        let body =
            serde_json::json!({ "argv": ["readlink", format!("/workspace/{name}")] }).to_string();
        let (s, r) = call(&d, "POST", "/v1/sandboxes/c/exec", Some(&body));
        assert_eq!(s, 200, "{r}");
        r["stdout"].as_str().unwrap().trim_end().to_string()
    };
    let (rel, abs) = (seen("rel"), seen("abs"));
    assert_eq!(
        (rel.as_str(), abs.as_str()),
        ("../ws/keep.txt", "/etc/hostname")
    );
    sh(
        &d,
        "c",
        "ln -sfn elsewhere /workspace/rel && ln -sfn /nowhere /workspace/abs",
    );
    stop(&d, "c");
    let (s, r) = call(&d, "GET", "/v1/sandboxes/c/changes", None);
    assert_eq!(s, 200, "{r}");
    let host = ws.canonicalize().unwrap();
    for (name, before, after) in [("rel", &rel, "elsewhere"), ("abs", &abs, "/nowhere")] {
        let c = r["changes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["path"] == name)
            .unwrap_or_else(|| panic!("{name} not in {r}"));
        assert_eq!(c["old"]["target"], before.as_str(), "{c}");
        assert_eq!(c["new"]["target"], after, "{c}");
    }
    let text = r.to_string();
    assert!(
        !text.contains(&host.display().to_string()),
        "a host path resolved by the daemon was shown: {text}"
    );
}
