//! The owner's own command line never runs, as a secret's program, a file
//! a daemon's token could write (outside review 21, finding 6).
//!
//! A daemon checks a secret's program against its workspace roots, its
//! writable volumes and its state before every start
//! (`secret_program_writable`). Before: the owner's `warden run --profile
//! P` and `warden start`, reading the same profiles, knew none of those
//! roots: a program a token's sandbox had committed under a workspace
//! root ran as the owner when the owner's profile named it. Now: each
//! daemon records its roots in the state directory when it starts, and
//! the command line applies the same rule with every recorded root, the
//! record of a daemon no longer running included; the refusal names the
//! profile's `secrets.NAME`, where the profile says it, and the recorded
//! root the program lies under. No marker appears.

use crate::common::daemon::*;
use crate::common::owner::OwnerHost;
use crate::common::*;
use std::path::PathBuf;
use std::process::Output;

/// A token's sandbox over `proj` (under the daemon's workspace root)
/// writes two programs that touch the marker: `get.sh`, a plain file the
/// token commits itself (nothing the review flags), and an executable
/// `prog.sh`, which the review flags and the owner accepts, as an
/// owner does an agent's edit of a project's tool. The files the owner's
/// profiles are then made to name.
fn token_writes_programs(host: &OwnerHost, d: &Daemon) -> (PathBuf, PathBuf) {
    let proj = host.root.join("proj");
    std::fs::create_dir_all(&proj).unwrap();
    let t = token(
        host.dir.path(),
        "agent",
        &["sandboxes:write", "sandboxes:read", "exec"],
    );
    let body = serde_json::json!({"name": "w1", "workspace": proj, "start": true}).to_string();
    let (s, b) = json_as(d, &t, "POST", "/v1/sandboxes", &body);
    assert_eq!(s, 201, "{b}");
    let text = format!(
        "#!/bin/sh\\ntouch {}\\necho tok-abc\\n",
        host.marker.display()
    );
    let script = format!(
        "printf '{text}' > /workspace/get.sh && printf '{text}' > /workspace/prog.sh && chmod 755 /workspace/prog.sh"
    );
    let body = serde_json::json!({ "shell": script }).to_string();
    let (s, r) = json_as(d, &t, "POST", "/v1/sandboxes/w1/exec", &body);
    assert_eq!((s, &r["exit_status"]), (200, &serde_json::json!(0)), "{r}");
    json_as(d, &t, "POST", "/v1/sandboxes/w1/stop", "");
    // A commit lands what the review showed.
    let (s, r) = json_as(d, &t, "GET", "/v1/sandboxes/w1/changes?content=true", "");
    assert_eq!(s, 200, "{r}");
    let (s, r) = json_as(
        d,
        &t,
        "POST",
        "/v1/sandboxes/w1/commit",
        r#"{"paths": ["get.sh"]}"#,
    );
    assert_eq!(s, 200, "the token commits its plain file: {r}");
    let (s, r) = call(
        d,
        "GET",
        "/v1/sandboxes/w1/changes?content=true",
        None,
        None,
    );
    assert_eq!(s, 200, "{r}");
    let (s, r) = call(
        d,
        "POST",
        "/v1/sandboxes/w1/commit",
        Some(r#"{"accept_flagged": true}"#),
        None,
    );
    assert_eq!(s, 200, "the owner accepts the executable: {r}");
    let (get, prog) = (proj.join("get.sh"), proj.join("prog.sh"));
    assert!(get.exists() && prog.exists(), "the commits wrote both");
    (get, prog)
}

/// The command line's refusal: the reason, the profile's key and place,
/// and the recorded root.
fn assert_refused(host: &OwnerHost, out: &Output, place: Option<&str>) {
    let said = stderr(out);
    assert!(
        !host.marker_appeared(),
        "the token's program ran on the host as the owner (status {:?}): {said}",
        out.status.code()
    );
    assert!(!out.status.success(), "{said}");
    assert!(said.contains("secret_program_writable"), "{said}");
    assert!(said.contains("secrets.API_TOKEN"), "{said}");
    assert!(
        said.contains(&host.root.display().to_string()),
        "the recorded root is named: {said}"
    );
    if let Some(place) = place {
        assert!(said.contains(place), "the profile's place {place}: {said}");
    }
}

#[test]
fn a_program_a_token_committed_under_a_daemons_root_never_runs_from_the_owners_command_line() {
    let Some(host) = OwnerHost::new("cli-secret-roots") else {
        return;
    };
    if !egress_available() {
        return;
    }
    let d = host.daemon_over_root();
    let (get, prog) = token_writes_programs(&host, &d);
    host.secret_profile("p", &[prog.to_str().unwrap()]);
    host.secret_profile("q", &["/bin/sh", get.to_str().unwrap()]);
    let place = |p: &str| format!("{}:2:3", host.profile(p).display());

    let out = host.owner(&["run", "--profile", "p", "--", "true"]);
    assert_refused(&host, &out, Some(&place("p")));
    let out = host.owner(&["run", "--profile", "q", "--", "true"]);
    assert_refused(&host, &out, Some(&place("q")));

    // A named sandbox of the owner's is refused at its start, too.
    let out = host.owner(&["create", "--profile", "p", "mine"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = host.owner(&["start", "mine"]);
    assert_refused(&host, &out, None);

    // The daemon stops; its record stays: a root once given to tokens
    // may hold their files.
    drop(d);
    let out = host.owner(&["run", "--profile", "p", "--", "true"]);
    assert_refused(&host, &out, Some(&place("p")));
}

#[test]
fn a_secret_program_outside_every_recorded_root_still_runs_from_the_command_line() {
    let Some(host) = OwnerHost::new("cli-secret-outside") else {
        return;
    };
    if !egress_available() {
        return;
    }
    let d = host.daemon_over_root();
    let prog = host.dir.path().join("tools/get-token.sh");
    host.plant(&prog);
    host.secret_profile("ok", &[prog.to_str().unwrap()]);
    let out = host.owner(&["run", "--profile", "ok", "--", "true"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(host.marker.exists(), "the owner's program ran");
    drop(d);
}

#[test]
fn a_daemon_started_again_with_other_roots_still_refuses_a_program_under_the_earlier_ones() {
    let Some(host) = OwnerHost::new("daemon-secret-roots") else {
        return;
    };
    let d = host.daemon_over_root();
    let (_, prog) = token_writes_programs(&host, &d);
    drop(d);
    // The next start gives tokens another root only.
    let other = host.dir.path().join("other-root");
    std::fs::create_dir_all(&other).unwrap();
    let d = host.daemon(&["--workspace-root", other.to_str().unwrap()]);
    host.secret_profile("p", &[prog.to_str().unwrap()]);
    let t = token(
        host.dir.path(),
        "agent2",
        &["sandboxes:write", "sandboxes:read"],
    );
    let body = serde_json::json!({"name": "named", "profile": "p"}).to_string();
    let (s, b) = json_as(&d, &t, "POST", "/v1/sandboxes", &body);
    assert!(
        !host.marker_appeared(),
        "the program under the earlier root ran as the owner: {s} {b}"
    );
    assert_eq!(s, 403, "{b}");
    assert_eq!(b["reason"], "secret_program_writable", "{b}");
}

#[test]
fn a_command_line_with_its_own_state_but_the_daemons_profiles_refuses_the_program_too() {
    let Some(host) = OwnerHost::new("cli-secret-config") else {
        return;
    };
    if !egress_available() {
        return;
    }
    let d = host.daemon_over_root();
    let (_, prog) = token_writes_programs(&host, &d);
    drop(d);
    host.secret_profile("p", &[prog.to_str().unwrap()]);
    // A terminal's state elsewhere (the daemon runs as a service with its
    // own): the record beside the catalogue is read.
    let own = host.dir.path().join("terminal-state");
    let out = host.owner_in(&own, &["run", "--profile", "p", "--", "true"]);
    let place = format!("{}:2:3", host.profile("p").display());
    assert_refused(&host, &out, Some(&place));
}

/// Outside review 24, F8. Before: a daemon's root under the owner's home
/// (`~/proj`) held a secret's program to the rule only when the owner
/// wrote its absolute path; `sh -c $HOME/proj/get.sh`, `~/proj/get.sh`,
/// `${HOME}`, `cd ~/proj && ./get.sh` were read as `/HOME/...`, `/~/...`
/// and the script ran as the owner. Now every one is refused, by the
/// same rule (`secret_program_writable`) or, when the shell line cannot
/// be read for certain, `secret_program_unreadable_args`; no marker.
#[test]
fn a_secret_program_named_through_home_tilde_or_a_cd_in_a_shell_line_never_runs_from_a_root() {
    if !egress_available() {
        return;
    }
    let host = OwnerHost::at("cli-secret-home");
    let home = host.dir.path().join("home").canonicalize().unwrap();
    let root = home.join("proj");
    host.plant(&root.join("tools/get.sh"));
    let d = host.daemon_from(
        None,
        &["--workspace-root", root.to_str().unwrap()],
        &[("HOME", home.as_path())],
    );
    drop(d);
    let writable = "secret_program_writable";
    let unreadable = "secret_program_unreadable_args";
    let refused = |what: &str, out: Output, code: &str| {
        let said = stderr(&out);
        assert!(
            !host.marker_appeared(),
            "`{what}` ran the root's script as the owner (status {:?}): {said}",
            out.status.code()
        );
        assert!(!out.status.success(), "`{what}`: {said}");
        assert!(said.contains(code), "`{what}` refused {code}: {said}");
    };
    // The command line's `cmd:` (words split as a shell splits them: a
    // quoted script with blanks is the shell's whole script).
    for line in [
        "sh -c $HOME/proj/tools/get.sh",
        "sh -c ${HOME}/proj/tools/get.sh",
        "sh -c ~/proj/tools/get.sh",
        "sh -c 'true; exec ~/proj/tools/get.sh'",
    ] {
        let secret = format!("T=cmd:{line}@example.com");
        let out = host.owner(&["run", "--no-tty", "--secret", &secret, "--", "true"]);
        refused(line, out, writable);
    }
    // A profile's `from_command` (each element one argument: a script
    // with a blank in it reaches the shell, and the rule, whole).
    for (i, (script, code)) in [
        ("true; exec ~/proj/tools/get.sh", writable),
        ("exec;~/pro\"j\"/tools/get.sh", writable),
        ("cd;proj/tools/get.sh", unreadable),
        ("$PWD/get.sh", unreadable),
    ]
    .into_iter()
    .enumerate()
    {
        let name = format!("p{i}");
        host.secret_profile(&name, &["/bin/sh", "-c", script]);
        let out = host.owner(&["run", "--no-tty", "--profile", &name, "--", "true"]);
        refused(script, out, code);
    }
    // Outside the root, the same spellings run.
    let tools = home.join("bin/get-token");
    host.plant(&tools);
    let out = host.owner(&[
        "run",
        "--no-tty",
        "--secret",
        "T=cmd:sh -c $HOME/bin/get-token@example.com",
        "--",
        "true",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(host.marker.exists(), "the owner's program ran");
}

/// Outside review 24, F10. Before: a daemon started while its
/// catalogue's directory did not exist recorded its roots only in its
/// own state, silently; a command line of another state directory that
/// later read a profile made there ran a program under the root. Now the
/// daemon makes the directory (owner-only) and records there.
#[test]
fn a_daemon_started_before_its_catalogues_directory_exists_still_records_its_roots_there() {
    if !egress_available() {
        return;
    }
    let host = OwnerHost::at("cli-secret-late-config");
    warden_workspace::fsutil::remove_tree(&host.config).unwrap();
    let d = host.daemon_over_root();
    drop(d);
    let dir = host.config.join("warden");
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&dir).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o700, "made owner-only");
    let record = std::fs::read_to_string(dir.join("daemon-roots")).unwrap();
    assert!(record.contains(host.root.to_str().unwrap()), "{record}");
    std::fs::create_dir_all(dir.join("profiles")).unwrap();
    let prog = host.root.join("proj/get.sh");
    host.plant(&prog);
    host.secret_profile("p", &[prog.to_str().unwrap()]);
    let own = host.dir.path().join("terminal-state");
    let out = host.owner_in(&own, &["run", "--profile", "p", "--", "true"]);
    assert_refused(&host, &out, None);
}
