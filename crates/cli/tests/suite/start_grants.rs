//! A token's sandbox that comes to run again (a start, E2B's connect of
//! one paused to its files) is held to what the owner grants a token now,
//! as its copies are; and a start runs a sandbox only over the workspace
//! directory it was created over. Through the real daemon over real HTTP
//! and the real command line.
//!
//! Review 16, finding 3: a token made `g1` from the owner's profile with
//! a host directory bound read-only and stopped it; the owner took the
//! directory out of the profile. A fork of `g1` was refused (403 at
//! `/spec/filesystem/read_only`), but `POST /v1/sandboxes/g1/start`
//! started it with the bind captured at its create, and the token read
//! the host's file again: a stop and a start replayed the grant for ever.

use crate::common::daemon::{
    api_token, call, call_on, calls_as, curl_available, e2b_calls_as, json, worker, Daemon,
    WORKER_SCOPES,
};
use crate::common::grants::{profile_binding, profile_without_bind, stdout_of, TeamData};
use crate::common::vm::guest_busybox_tree;
use crate::common::*;
use std::path::Path;

fn state_of(t: &impl Fn(&str, &str, Option<&str>) -> (u16, String), id: &str) -> String {
    let (s, b) = t("GET", &format!("/v1/sandboxes/{id}"), None);
    assert_eq!(s, 200, "{b}");
    json(&b)["state"].as_str().unwrap_or_default().to_string()
}

#[test]
fn a_tokens_stopped_sandbox_is_not_started_again_with_a_host_bind_the_owner_has_taken_out_of_the_profile(
) {
    if !curl_available() {
        return skip("curl is not installed");
    }
    let team = TeamData::plant("start-grants");
    let (state, config) = (&team.state, team.config.as_path());
    let d = Daemon::start_with(state.path(), true, &[], &[("XDG_CONFIG_HOME", config)]);
    let t = worker(&d, "g");
    let read = team.read();
    let (s, b) = t(
        "POST",
        "/v1/sandboxes",
        Some(r#"{"name":"g1","profile":"withbind"}"#),
    );
    assert_eq!(s, 201, "{b}");
    // The owner's own sandbox of the same profile, made while granted.
    let (s, b) = call(
        &d,
        "POST",
        "/v1/sandboxes",
        Some(r#"{"name":"own1","profile":"withbind"}"#),
        None,
    );
    assert_eq!(s, 201, "{b}");
    // While granted, the bind is there (the test sees what it tests).
    let (s, b) = t("POST", "/v1/sandboxes/g1/exec", Some(&read));
    assert_eq!(s, 200, "{b}");
    assert!(stdout_of(&b).contains("GRANTED-ONCE-ONLY"), "{b}");
    for id in ["g1", "own1"] {
        let (s, b) = call(&d, "POST", &format!("/v1/sandboxes/{id}/stop"), None, None);
        assert_eq!(s, 200, "{b}");
    }

    profile_without_bind(config);

    // The start is refused at the field's pointer, as the fork is, and
    // nothing runs: the sandbox stays stopped, a command is refused.
    let (s, b) = t("POST", "/v1/sandboxes/g1/start", None);
    if s == 200 {
        let (_, out) = t("POST", "/v1/sandboxes/g1/exec", Some(&read));
        panic!("the sandbox was started again and reads: {out}");
    }
    assert_eq!(s, 403, "{b}");
    assert_eq!(json(&b)["field"], "/spec/filesystem/read_only", "{b}");
    let message = json(&b)["message"].as_str().unwrap_or_default().to_string();
    assert!(message.contains("no longer bound"), "{message}");
    assert!(message.contains("not started"), "{message}");
    assert_eq!(state_of(&t, "g1"), "stopped");
    let (s, out) = t("POST", "/v1/sandboxes/g1/exec", Some(&read));
    assert_ne!(s, 200, "{out}");
    assert!(!out.contains("GRANTED-ONCE-ONLY"), "{out}");
    // The fork answers the same (one function for both).
    let (s, b) = t("POST", "/v1/sandboxes/g1/fork", Some(r#"{"count":1}"#));
    assert_eq!(s, 403, "{b}");
    assert_eq!(json(&b)["field"], "/spec/filesystem/read_only", "{b}");
    // Whoever asks: the owner starting the token's sandbox would hand
    // the token the bind again.
    let (s, b) = call(&d, "POST", "/v1/sandboxes/g1/start", None, None);
    assert_eq!(s, 403, "{b}");
    assert_eq!(state_of(&t, "g1"), "stopped");

    // The owner's own sandbox keeps what the owner gave.
    let (s, b) = call(&d, "POST", "/v1/sandboxes/own1/start", None, None);
    assert_eq!(s, 200, "{b}");
    let (s, b) = call(&d, "POST", "/v1/sandboxes/own1/exec", Some(&read), None);
    assert_eq!(s, 200, "{b}");
    assert!(stdout_of(&b).contains("GRANTED-ONCE-ONLY"), "{b}");

    // Granted again: the token's sandbox starts again with it (the check
    // is of what is granted now, not a mark left on the sandbox).
    profile_binding(config, &team.data);
    let (s, b) = t("POST", "/v1/sandboxes/g1/start", None);
    assert_eq!(s, 200, "{b}");
    let (s, b) = t("POST", "/v1/sandboxes/g1/exec", Some(&read));
    assert_eq!(s, 200, "{b}");
    assert!(stdout_of(&b).contains("GRANTED-ONCE-ONLY"), "{b}");
    for id in ["g1", "own1"] {
        let _ = call_on(
            &d,
            false,
            "DELETE",
            &format!("/v1/sandboxes/{id}?force=true"),
            None,
            None,
        );
    }
}

/// The E2B door's ways back: a sandbox of template `withbind` paused to
/// its files and connected to (the native start underneath) is refused
/// as the start is; one paused with its memory and connected to with
/// `memory: false` (a cold boot from its files) is refused before it is
/// stopped, and stays paused as it was. A plain connect of one paused
/// with its memory resumes it in place: a running sandbox is not checked
/// again, its mounts stay (the threat model says so).
#[test]
fn the_e2b_doors_connect_does_not_start_a_tokens_sandbox_with_a_bind_the_owner_has_taken_back() {
    if !curl_available() {
        return skip("curl is not installed");
    }
    let team = TeamData::plant("start-grants-e2b");
    let (state, config) = (&team.state, team.config.as_path());
    let e2b_at = format!("127.0.0.1:{}", free_port());
    let d = Daemon::start_with(
        state.path(),
        true,
        &["--e2b", &e2b_at],
        &[("XDG_CONFIG_HOME", config)],
    );
    let token = api_token(&d, "e", WORKER_SCOPES, None);
    let e2b = e2b_calls_as(&d, token.clone());
    let native = calls_as(&d, token.clone());
    let read = team.read();
    let mut ids = Vec::new();
    for _ in 0..2 {
        let (s, b) = e2b(
            "POST",
            "/sandboxes",
            Some(r#"{"templateID":"withbind","timeout":600}"#),
        );
        assert_eq!(s, 201, "{b}");
        let id = json(&b)["sandboxID"].as_str().unwrap().to_string();
        let (s, b) = native("POST", &format!("/v1/sandboxes/{id}/exec"), Some(&read));
        assert_eq!(s, 200, "{b}");
        assert!(stdout_of(&b).contains("GRANTED-ONCE-ONLY"), "{b}");
        ids.push(id);
    }
    let (to_files, in_memory) = (&ids[0], &ids[1]);
    let (s, b) = e2b(
        "POST",
        &format!("/sandboxes/{to_files}/pause"),
        Some(r#"{"memory":false}"#),
    );
    assert_eq!(s, 204, "{b}");
    let (s, b) = e2b("POST", &format!("/sandboxes/{in_memory}/pause"), Some("{}"));
    assert_eq!(s, 204, "{b}");
    assert_eq!(state_of(&native, in_memory), "paused");

    profile_without_bind(config);

    let (s, b) = e2b(
        "POST",
        &format!("/sandboxes/{to_files}/connect"),
        Some(r#"{"timeout":600}"#),
    );
    assert_eq!(s, 403, "{b}");
    assert!(b.contains("no longer bound"), "{b}");
    assert_eq!(state_of(&native, to_files), "stopped");
    let (s, b) = e2b(
        "POST",
        &format!("/sandboxes/{in_memory}/connect"),
        Some(r#"{"timeout":600,"memory":false}"#),
    );
    assert_eq!(s, 403, "{b}");
    assert!(b.contains("no longer bound"), "{b}");
    assert_eq!(state_of(&native, in_memory), "paused");
    // Resumed in place: the run it is in goes on with what it mounted.
    let (s, b) = e2b(
        "POST",
        &format!("/sandboxes/{in_memory}/connect"),
        Some(r#"{"timeout":600}"#),
    );
    assert!(s == 200 || s == 201, "{s} {b}");
    assert_eq!(state_of(&native, in_memory), "running");
    for id in &ids {
        let _ = e2b("DELETE", &format!("/sandboxes/{id}"), None);
    }
}

/// A directory at `dir` holding a file only the host should have.
fn victim(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("notes"), "HOST-SECRET-16\n").unwrap();
}

/// Before, a start opened the workspace's path through no link but did
/// not compare the directory there with the one the sandbox was created
/// over (a commit and a diff did): the workspace moved away and another
/// directory made at its path, `warden start` and the API's start ran the
/// sandbox over that other directory, whose files it then read and wrote
/// (`cat /workspace/notes` printed the victim's file). Now both refuse
/// with `workspace_moved` and nothing runs; put back, it starts.
#[test]
fn a_sandbox_whose_workspace_was_moved_is_not_started_by_the_api_nor_the_command_line() {
    if !curl_available() {
        return skip("curl is not installed");
    }
    let state = TempDir::new("start-moved-state");
    let proj = TempDir::new("start-moved-proj");
    let land = proj.path().join("w2/land");
    std::fs::create_dir_all(&land).unwrap();
    std::fs::write(land.join("notes"), "the project's notes\n").unwrap();
    let d = Daemon::start(state.path(), false);
    let body = serde_json::json!({ "name": "mv16", "workspace": land }).to_string();
    let (s, b) = call(&d, "POST", "/v1/sandboxes", Some(&body), None);
    assert_eq!(s, 201, "{b}");
    let (s, b) = call(&d, "POST", "/v1/sandboxes/mv16/stop", None, None);
    assert_eq!(s, 200, "{b}");
    // Moved away; another directory at its path.
    std::fs::rename(&land, proj.path().join("w2/land.old")).unwrap();
    victim(&land);

    let (s, b) = call(&d, "POST", "/v1/sandboxes/mv16/start", None, None);
    if s == 200 {
        let (_, out) = call(
            &d,
            "POST",
            "/v1/sandboxes/mv16/exec",
            Some(r#"{"shell":"cat /workspace/notes"}"#),
            None,
        );
        panic!("started over another directory, which reads: {out}");
    }
    let r = json(&b);
    assert_eq!(s, 409, "{b}");
    assert_eq!(r["code"], "workspace_moved", "{b}");
    assert_eq!(r["reason"], "workspace_moved", "{b}");
    let message = r["message"].as_str().unwrap_or_default();
    assert!(message.contains("not started"), "{message}");
    assert!(!message.contains(proj.str()), "a host path: {message}");
    let (s, b) = call(&d, "GET", "/v1/sandboxes/mv16", None, None);
    assert_eq!(s, 200, "{b}");
    assert_eq!(json(&b)["state"], "stopped", "{b}");

    // The command line: refused, its reason code first, nothing runs.
    let out = warden(state.path(), &["start", "mv16"]);
    assert!(!out.status.success(), "{}", stdout(&out));
    let said = stderr(&out);
    assert!(said.contains("refused (workspace_moved)"), "{said}");
    let out = warden(
        state.path(),
        &["exec", "mv16", "--", "cat", "/workspace/notes"],
    );
    assert!(!stdout(&out).contains("HOST-SECRET-16"), "{}", stdout(&out));

    // Put back: it starts, over its own directory.
    std::fs::rename(&land, proj.path().join("w2/land.other")).unwrap();
    std::fs::rename(proj.path().join("w2/land.old"), &land).unwrap();
    let (s, b) = call(&d, "POST", "/v1/sandboxes/mv16/start", None, None);
    assert_eq!(s, 200, "{b}");
    let (s, b) = call(
        &d,
        "POST",
        "/v1/sandboxes/mv16/exec",
        Some(r#"{"shell":"cat /workspace/notes"}"#),
        None,
    );
    assert_eq!(s, 200, "{b}");
    assert!(stdout_of(&b).contains("the project's notes"), "{b}");
    let _ = call(&d, "DELETE", "/v1/sandboxes/mv16?force=true", None, None);
}

/// A `--rootfs` tree of busybox for a guest.
fn guest_tree() -> Option<TempDir> {
    guest_busybox_tree(&["sh", "sleep", "cat"])
}

/// The owner's profile `vmgrant`: a VM over `tree`, allowed to run
/// degraded when `degraded` (a grant only the owner's files give).
fn vm_profile(config: &Path, tree: &Path, degraded: bool) {
    let profiles = config.join("warden/profiles");
    std::fs::create_dir_all(&profiles).unwrap();
    std::fs::write(
        profiles.join("vmgrant.yaml"),
        format!(
            "description: the team's VM\nisolation: vm\n{}filesystem:\n  rootfs: \"{}\"\n",
            if degraded {
                "allow_degraded: true\n"
            } else {
                ""
            },
            tree.display()
        ),
    )
    .unwrap();
}

/// By reading, the resume of a VM paused to disk whose supervisor is gone
/// (a new supervisor restores it: a new run) had the start's gap: it
/// checked the token's quotas only, so a grant the owner took back since
/// the VM's create came back with it. It is now held to the same check
/// as a start: refused at the field's pointer, its saved memory kept, no
/// supervisor started; granted again, it resumes.
#[test]
#[ignore = "boots a VM (slow under emulation): run with -- --ignored"]
fn a_tokens_vm_paused_to_disk_is_not_resumed_by_a_new_supervisor_with_a_grant_the_owner_has_taken_back(
) {
    use crate::common::vm::{guest_release, vm_dir};
    use std::time::Duration;
    if !curl_available() {
        return skip("curl is not installed");
    }
    if guest_release().is_none() {
        return;
    }
    let Some(tree) = guest_tree() else {
        return;
    };
    let state = TempDir::new("start-grants-vm");
    let s = state.path();
    let config = s.join("config");
    vm_profile(&config, tree.path(), true);
    let vm = vm_dir();
    let env = [
        ("XDG_CONFIG_HOME", config.as_path()),
        ("WARDEN_VM_DIR", vm.as_path()),
    ];
    let d = Daemon::start_with(s, true, &[], &env);
    let t = worker(&d, "v");
    let (st, b) = t(
        "POST",
        "/v1/sandboxes",
        Some(r#"{"name":"vg","profile":"vmgrant"}"#),
    );
    assert_eq!(st, 201, "{b}");
    let (st, b) = t(
        "POST",
        "/v1/sandboxes/vg/pause",
        Some(r#"{"to_disk":true}"#),
    );
    if st == 409 && json(&b)["code"] == "unsupported" {
        let _ = t("DELETE", "/v1/sandboxes/vg?force=true", None);
        return skip(&format!("this VM cannot be paused to disk here: {b}"));
    }
    assert_eq!(st, 200, "{b}");
    let saved = sandbox_dir(s, "vg").join("vm-paused/vm.vmstate");
    assert!(saved.is_file(), "nothing was saved to disk");
    let supervisor = supervisor_pid(s, "vg");
    // SAFETY: a plain signal to the test's own sandbox's supervisor.
    unsafe { libc::kill(supervisor, libc::SIGKILL) };
    wait_until("the supervisor to be gone", Duration::from_secs(10), || {
        !alive(supervisor)
            || std::fs::read_to_string(format!("/proc/{supervisor}/stat")).is_ok_and(|st| {
                st.rsplit_once(')')
                    .is_some_and(|r| r.1.trim_start().starts_with('Z'))
            })
    });

    vm_profile(&config, tree.path(), false);
    let (st, b) = t("POST", "/v1/sandboxes/vg/resume", None);
    assert_eq!(st, 403, "{b}");
    assert_eq!(json(&b)["field"], "/spec/allow_degraded", "{b}");
    assert!(saved.is_file(), "the saved memory was not kept");
    assert_ne!(state_of(&t, "vg"), "running");

    vm_profile(&config, tree.path(), true);
    let (st, b) = t("POST", "/v1/sandboxes/vg/resume", None);
    assert_eq!(st, 200, "{b}");
    let _ = t("DELETE", "/v1/sandboxes/vg?force=true", None);
}

/// `warden ARGS` as the owner at the terminal, with the owner's
/// catalogue in `config`, over the daemon's state in `state`.
fn owner_cli(state: &Path, config: &Path, args: &[&str]) -> std::process::Output {
    std::process::Command::new(warden_bin())
        .args(args)
        .env("WARDEN_STATE_DIR", state.join("warden"))
        .env("XDG_CONFIG_HOME", config)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap()
}

/// Before, the API's start of a token's sandbox was held to what the
/// owner grants a token now, but the owner's command line was not: with
/// the bind taken out of the profile, `warden start g1` (or a `warden
/// exec` that starts it) ran the token's sandbox with the bind captured at
/// its create, and the token read the host's file again through the
/// daemon. The command line now runs the same check (the runtime's):
/// refused with the reason code, nothing runs; granted again, it starts.
#[test]
fn the_owner_s_warden_start_does_not_hand_a_token_s_sandbox_a_bind_the_owner_has_taken_back() {
    if !curl_available() {
        return skip("curl is not installed");
    }
    let team = TeamData::plant("start-grants-cli");
    let (state, config) = (&team.state, team.config.as_path());
    let d = Daemon::start_with(state.path(), true, &[], &[("XDG_CONFIG_HOME", config)]);
    let t = worker(&d, "c");
    let read = team.read();
    let (s, b) = t(
        "POST",
        "/v1/sandboxes",
        Some(r#"{"name":"c1","profile":"withbind"}"#),
    );
    assert_eq!(s, 201, "{b}");
    let (s, b) = t("POST", "/v1/sandboxes/c1/exec", Some(&read));
    assert_eq!(s, 200, "{b}");
    assert!(stdout_of(&b).contains("GRANTED-ONCE-ONLY"), "{b}");
    let (s, b) = call(&d, "POST", "/v1/sandboxes/c1/stop", None, None);
    assert_eq!(s, 200, "{b}");
    // The owner's own sandbox of the profile, made with the command line.
    ok(&owner_cli(
        state.path(),
        config,
        &["create", "own-c", "--profile", "withbind"],
    ));

    profile_without_bind(config);

    let out = owner_cli(state.path(), config, &["start", "c1"]);
    if out.status.success() {
        let (_, b) = t("POST", "/v1/sandboxes/c1/exec", Some(&read));
        panic!("the command line started the token's sandbox, which reads: {b}");
    }
    let said = stderr(&out);
    assert!(said.contains("refused (forbidden, --ro)"), "{said}");
    assert!(said.contains("no longer bound"), "{said}");
    assert_eq!(state_of(&t, "c1"), "stopped");
    // An exec from the command line starts nothing either.
    let secret = format!("{}/secret.txt", team.data.display());
    let out = owner_cli(state.path(), config, &["exec", "c1", "--", "cat", &secret]);
    assert!(!out.status.success(), "{}", stdout(&out));
    assert!(
        !stdout(&out).contains("GRANTED-ONCE-ONLY"),
        "{}",
        stdout(&out)
    );
    assert_eq!(state_of(&t, "c1"), "stopped");
    // The owner's own sandbox keeps what the owner gave.
    ok(&owner_cli(state.path(), config, &["start", "own-c"]));
    let out = owner_cli(
        state.path(),
        config,
        &["exec", "own-c", "--", "cat", &secret],
    );
    assert!(
        stdout(&out).contains("GRANTED-ONCE-ONLY"),
        "{}",
        stderr(&out)
    );

    // Granted again: the command line starts it, with the bind.
    profile_binding(config, &team.data);
    ok(&owner_cli(state.path(), config, &["start", "c1"]));
    let (s, b) = t("POST", "/v1/sandboxes/c1/exec", Some(&read));
    assert_eq!(s, 200, "{b}");
    assert!(stdout_of(&b).contains("GRANTED-ONCE-ONLY"), "{b}");
    let _ = call(&d, "DELETE", "/v1/sandboxes/c1?force=true", None, None);
    let _ = owner_cli(state.path(), config, &["rm", "-f", "own-c"]);
}
