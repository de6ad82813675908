//! The review flags through the real binary, as the review attack tests
//! read them: a sandbox kept from an overlay run, each change's flag
//! rules from `warden diff --json`, and a person's plain commit that must
//! refuse what is flagged.

use super::*;
use std::path::Path;

/// `warden run --overlay -w WS -- sh -c SCRIPT`, which must succeed: the
/// name of the sandbox that keeps its changes.
pub fn overlay_run(state: &Path, ws: &Path, script: &str) -> String {
    let out = warden(
        state,
        &[
            "run",
            "--no-tty",
            "--overlay",
            "-w",
            ws.to_str().unwrap(),
            "--",
            "sh",
            "-c",
            script,
        ],
    );
    ok(&out);
    let err = stderr(&out);
    err.split("kept in sandbox ")
        .nth(1)
        .and_then(|r| r.split(',').next())
        .unwrap_or_else(|| panic!("no sandbox named: {err}"))
        .to_string()
}

/// `warden diff NAME --json`: each change's path and its flags' rules.
pub fn diff_flag_rules(state: &Path, name: &str) -> Vec<(String, Vec<String>)> {
    let json = ok(&warden(state, &["diff", name, "--json"]));
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    v.as_array()
        .unwrap()
        .iter()
        .map(|c| (c["path"].as_str().unwrap().to_string(), change_rules(c)))
        .collect()
}

/// The rules of one change's flags, from a review's JSON (a change of
/// `warden diff --json` or of the API's `changes`); every flag must name
/// its rule.
pub fn change_rules(change: &serde_json::Value) -> Vec<String> {
    change["flags"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["rule"].as_str().unwrap().to_string())
        .collect()
}

pub fn rules_of<'a>(all: &'a [(String, Vec<String>)], path: &str) -> &'a [String] {
    &all.iter()
        .find(|(p, _)| p == path)
        .unwrap_or_else(|| panic!("no change for {path}: {all:?}"))
        .1
}

/// A person's plain commit after `warden diff`, stdin closed: it must
/// refuse the flagged changes (status 125) and land none of them.
pub fn plain_commit_refuses(state: &Path, name: &str) -> String {
    ok(&warden(state, &["diff", name, "--color", "never"]));
    let out = warden(state, &["commit", name]);
    assert_eq!(
        out.status.code(),
        Some(125),
        "stdout: {}\nstderr: {}",
        stdout(&out),
        stderr(&out)
    );
    stderr(&out)
}
