//! One spec, every door: the same options given as flags, as a profile
//! file and as an API body become the same stored spec, and the same bad
//! value is refused by each door in its own words (a flag, a file's line
//! and column, a JSON pointer), never in another door's.

use crate::common::daemon::{call, curl_available, json, Daemon};
use crate::common::*;

/// The parts of a stored spec the options below set.
fn stored(state: &Path, name: &str) -> serde_json::Value {
    let text = std::fs::read_to_string(sandbox_dir(state, name).join("sandbox.json")).unwrap();
    let stored = json(&text);
    let spec = &stored["spec"];
    serde_json::json!({
        "resources": spec["resources"],
        "hostname": spec["hostname"],
        "env": spec["env"],
        "network": spec["network"],
        "command": spec["command"],
    })
}

use std::path::Path;

const PROFILE: &str = "hostname: same\n\
resources:\n  memory: 300M\n  pids: 77\n  timeout: 90s\n\
egress:\n  domains: [a.example.test, \"b.example.test:22\"]\n  allow_http: true\n\
env:\n  set: { ANSWER: \"42\" }\n\
command: [sh, -c, \"true\"]\n";

#[test]
fn flags_a_profile_and_an_api_body_saying_the_same_store_the_same_spec() {
    if !curl_available() {
        return skip("curl is not installed");
    }
    let state = TempDir::new("one-spec");
    let flags = [
        "create",
        "by-flags",
        "--no-tty",
        "--hostname",
        "same",
        "--memory",
        "300M",
        "--pids",
        "77",
        "--timeout",
        "90s",
        "--allow-domain",
        "a.example.test",
        "--allow-domain",
        "b.example.test:22",
        "--allow-http",
        "-e",
        "ANSWER=42",
        "--",
        "sh",
        "-c",
        "true",
    ];
    ok(&warden(state.path(), &flags));
    let file = state.path().join("p.yaml");
    std::fs::write(&file, PROFILE).unwrap();
    ok(&warden(
        state.path(),
        &[
            "create",
            "by-file",
            "--no-tty",
            "--profile",
            file.to_str().unwrap(),
        ],
    ));
    let d = Daemon::start(state.path(), false);
    let body = serde_json::json!({
        "name": "by-api",
        "start": false,
        "spec": {
            "hostname": "same",
            "tty": false,
            "resources": {"memory": "300M", "pids": 77, "timeout": "90s"},
            "egress": {"domains": ["a.example.test", "b.example.test:22"], "allow_http": true},
            "env": {"set": {"ANSWER": "42"}},
            "command": ["sh", "-c", "true"]
        }
    });
    let (status, text) = call(&d, "POST", "/v1/sandboxes", Some(&body.to_string()), None);
    assert_eq!(status, 201, "{text}");
    let by_flags = stored(state.path(), "by-flags");
    assert_eq!(
        by_flags["resources"]["memory"]["value"],
        300 << 20,
        "{by_flags}"
    );
    assert_eq!(by_flags, stored(state.path(), "by-file"));
    assert_eq!(by_flags, stored(state.path(), "by-api"));
}

#[test]
fn a_bad_value_is_refused_by_each_door_in_its_own_words() {
    if !curl_available() {
        return skip("curl is not installed");
    }
    let state = TempDir::new("one-spec-bad");
    // The command line names the flag.
    let out = warden(state.path(), &["run", "--memory", "lots", "--", "true"]);
    assert_ne!(code(&out), 0);
    assert!(stderr(&out).contains("--memory"), "{}", stderr(&out));
    // A profile names the key at its line and column, never the flag.
    let file = state.path().join("bad.yaml");
    std::fs::write(&file, "hostname: x\nresources:\n  memory: lots\n").unwrap();
    let out = warden(
        state.path(),
        &["run", "--profile", file.to_str().unwrap(), "--", "true"],
    );
    let err = stderr(&out);
    assert_ne!(code(&out), 0);
    assert!(err.contains("bad.yaml:3:11"), "{err}");
    assert!(!err.contains("--memory"), "{err}");
    // `profile validate` says the same of the same file.
    let out = warden(
        state.path(),
        &["profile", "validate", file.to_str().unwrap()],
    );
    assert_ne!(code(&out), 0);
    assert!(
        stdout(&out).contains("bad.yaml:3:11") || stderr(&out).contains("bad.yaml:3:11"),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    // The API names the JSON pointer, never a flag or a line of a text
    // it never wrote.
    let d = Daemon::start(state.path(), false);
    for (spec, pointer) in [
        (
            serde_json::json!({"resources": {"memory": "lots"}}),
            "/spec/resources/memory",
        ),
        (
            serde_json::json!({"resources": {"pids": -3}}),
            "/spec/resources/pids",
        ),
        (
            serde_json::json!({"egress": {"domains": "a.test"}}),
            "/spec/egress/domains",
        ),
        (
            serde_json::json!({"secrets": {"T": {"from_env": "A", "hosts": "x"}}}),
            "/spec/secrets/T/hosts",
        ),
        (
            serde_json::json!({"resources": {"memroy": "1G"}}),
            "/spec/resources/memroy",
        ),
    ] {
        let body = serde_json::json!({"start": false, "spec": spec});
        let (status, text) = call(&d, "POST", "/v1/sandboxes", Some(&body.to_string()), None);
        assert!(status == 422 || status == 403, "{status} {text}");
        let problem = json(&text);
        assert_eq!(problem["field"], pointer, "{text}");
        let message = problem["message"].as_str().unwrap_or_default();
        assert!(
            !message.contains("--"),
            "a flag in an API message: {message}"
        );
        assert!(
            !message.contains("line "),
            "a line in an API message: {message}"
        );
    }
}

/// `filesystem.workdir` was added as one row of the table, one line of
/// the layer's reading, one of resolution and its enforcement: every door
/// has it at once.
#[test]
fn an_option_added_to_the_table_reaches_every_door() {
    if !curl_available() {
        return skip("curl is not installed");
    }
    let state = TempDir::new("one-spec-new");
    // The command line, and its wording of a bad value.
    let out = warden(
        state.path(),
        &["run", "--no-tty", "--workdir", "/usr/lib", "--", "pwd"],
    );
    assert_eq!(ok(&out).trim(), "/usr/lib");
    let out = warden(state.path(), &["run", "--workdir", "usr", "--", "pwd"]);
    assert_ne!(code(&out), 0);
    assert!(stderr(&out).contains("--workdir usr"), "{}", stderr(&out));
    // A directory that is not there inside stops the start, said so.
    let out = warden(state.path(), &["run", "--workdir", "/nowhere", "--", "pwd"]);
    assert_eq!(code(&out), 125, "{}", stderr(&out));
    assert!(stderr(&out).contains("`--workdir`"), "{}", stderr(&out));
    // A profile.
    let file = state.path().join("w.yaml");
    std::fs::write(&file, "filesystem:\n  workdir: /usr/share\n").unwrap();
    let out = warden(
        state.path(),
        &[
            "run",
            "--no-tty",
            "--profile",
            file.to_str().unwrap(),
            "--",
            "pwd",
        ],
    );
    assert_eq!(ok(&out).trim(), "/usr/share");
    // The API: a sandbox's execs start there too; a bad value is at its
    // pointer.
    let d = Daemon::start(state.path(), false);
    let body = serde_json::json!({"name": "w", "spec": {"filesystem": {"workdir": "/etc"}}});
    let (status, text) = call(&d, "POST", "/v1/sandboxes", Some(&body.to_string()), None);
    assert_eq!(status, 201, "{text}");
    let exec = serde_json::json!({"argv": ["pwd"]});
    let (status, text) = call(
        &d,
        "POST",
        "/v1/sandboxes/w/exec",
        Some(&exec.to_string()),
        None,
    );
    assert_eq!(status, 200, "{text}");
    assert!(text.contains("/etc"), "{text}");
    let body = serde_json::json!({"start": false, "spec": {"filesystem": {"workdir": "etc"}}});
    let (status, text) = call(&d, "POST", "/v1/sandboxes", Some(&body.to_string()), None);
    assert_eq!(status, 422, "{text}");
    assert_eq!(json(&text)["field"], "/spec/filesystem/workdir", "{text}");
}

/// `profile validate` resolves as run does, dry: a profile with an
/// overlay workspace, caches and no audit log of its own makes nothing in
/// warden's state (no sandbox for the layer, no caches, no audit
/// directory), and nothing in the temporary directory either.
#[test]
fn profile_validate_leaves_nothing_in_the_state_directory() {
    let dir = TempDir::new("one-spec-dry");
    let project = dir.path().join("proj");
    std::fs::create_dir_all(&project).unwrap();
    let tmp = dir.path().join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let file = dir.path().join("p.yaml");
    std::fs::write(
        &file,
        "filesystem:\n  workspace: proj\n  mode: overlay\n  caches: [pip]\n",
    )
    .unwrap();
    let state = dir.path().join("warden");
    let out = std::process::Command::new(warden_bin())
        .args(["profile", "validate", file.to_str().unwrap()])
        .env("WARDEN_STATE_DIR", &state)
        .env("TMPDIR", &tmp)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    ok(&out);
    let made: Vec<_> = std::fs::read_dir(&state)
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(made.is_empty(), "validate made {made:?} in the state");
    let left: Vec<_> = std::fs::read_dir(&tmp).unwrap().flatten().collect();
    assert!(left.is_empty(), "validate left {left:?} in TMPDIR");
}

/// A profile named through a link to its directory: its relative paths
/// are the real directory's, so `profile validate` accepts it and `run`
/// mounts the same workspace (the jail follows no link).
#[test]
fn a_profiles_relative_paths_are_its_real_directorys_when_it_is_named_through_a_link() {
    let dir = TempDir::new("one-spec-link");
    let real = dir.path().join("real");
    std::fs::create_dir_all(real.join("proj")).unwrap();
    std::fs::write(real.join("proj/marker"), "here\n").unwrap();
    std::fs::write(real.join("p.yaml"), "filesystem:\n  workspace: proj\n").unwrap();
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let file = link.join("p.yaml");
    let out = warden(dir.path(), &["profile", "validate", file.to_str().unwrap()]);
    ok(&out);
    let out = warden(
        dir.path(),
        &[
            "run",
            "--no-audit-log",
            "--profile",
            file.to_str().unwrap(),
            "--",
            "cat",
            "/workspace/marker",
        ],
    );
    if code(&out) != 0 && stderr(&out).contains("namespace") {
        return skip(&format!("no sandbox on this host: {}", stderr(&out)));
    }
    assert_eq!(ok(&out), "here\n");
}
