//! What a person new to warden met following the README and the agent
//! recipe on a fresh machine, through the real binary: a `warden` built by
//! `cargo run` alone (no `warden-daemon` beside it), an address range given
//! to the live allowlist, and a command the sandbox does not have.

use crate::common::*;
use std::process::Command;
use std::time::Duration;

#[test]
fn serve_without_warden_daemon_beside_says_which_build_makes_it_and_where_installing_is_told() {
    // `cargo run -p warden-cli` builds only `warden`: a copy of warden alone
    // in a directory is that build.
    let dir = TempDir::new("fresh-alone");
    let alone = dir.path().join("warden");
    copy_program(&warden_bin(), &alone);
    let state = TempDir::new("fresh-alone-state");
    let out = Command::new(&alone)
        .arg("serve")
        .env("WARDEN_STATE_DIR", state.path())
        .output()
        .unwrap();
    let err = stderr(&out);
    assert_eq!(code(&out), 125, "{err}");
    assert!(
        err.contains(&dir.path().join("warden-daemon").display().to_string()),
        "the path looked for is named: {err}"
    );
    assert!(
        err.contains("cargo build --release -p warden-cli") && err.contains("docs/install.md"),
        "the build that makes warden-daemon, and where installing is told: {err}"
    );
    assert!(
        err.contains("`cargo run` builds only warden"),
        "why it is missing after the README's build: {err}"
    );
}

/// Stops the sandbox even when the test fails half-way.
struct Remover<'a>(&'a std::path::Path, &'a str);

impl Drop for Remover<'_> {
    fn drop(&mut self) {
        let _ = warden(self.0, &["rm", "--force", self.1]);
    }
}

#[test]
fn an_address_range_given_to_the_live_allowlist_is_told_where_ranges_go_and_changes_nothing() {
    if !egress_available() {
        return;
    }
    let state = TempDir::new("fresh-range");
    ok(&warden(
        state.path(),
        &["create", "rng", "--allow-domain", "example.test", "--start"],
    ));
    let _rm = Remover(state.path(), "rng");
    let out = warden(
        state.path(),
        &["egress", "rng", "--allow", "203.0.113.80/32"],
    );
    let err = stderr(&out);
    assert_eq!(code(&out), 125, "{err}");
    assert!(
        err.contains("not a host name") && err.contains("--allow-cidr 203.0.113.80/32"),
        "the range is named as one, with the flag that takes it: {err}"
    );
    assert!(!err.contains("URL"), "a range is not called a URL: {err}");
    let list = ok(&warden(state.path(), &["egress", "rng"]));
    assert_eq!(list.trim(), "example.test", "nothing was changed");
}

#[test]
fn exec_of_a_command_the_sandbox_lacks_names_the_command() {
    let state = TempDir::new("fresh-127");
    ok(&warden(state.path(), &["create", "nf", "--start"]));
    let _rm = Remover(state.path(), "nf");
    let missing = unique("no-such-agent");
    let out = warden(state.path(), &["exec", "nf", "--", &missing, "--version"]);
    let err = stderr(&out);
    assert_eq!(code(&out), 127, "{err}");
    assert!(
        err.contains(&format!("{missing}: command not found")),
        "the command that was not found is named: {err}"
    );
    // The sandbox is still there for the next exec.
    wait_until("the sandbox to answer", Duration::from_secs(5), || {
        code(&warden(state.path(), &["exec", "nf", "--", "true"])) == 0
    });
}

#[test]
fn token_create_help_lists_every_scope_the_daemon_takes() {
    let out = Command::new(warden_bin())
        .args(["token", "create", "--help"])
        .output()
        .unwrap();
    let help = stdout(&out);
    for scope in [
        "sandboxes:read",
        "sandboxes:write",
        "exec",
        "files",
        "approvals",
        "mcp",
        "desktop:view",
        "desktop:control",
        "admin",
    ] {
        assert!(help.contains(scope), "{scope} is listed: {help}");
        // And the daemon takes it as written there.
        let state = TempDir::new("fresh-scope");
        ok(&warden(
            state.path(),
            &["token", "create", "t", "--scope", scope],
        ));
    }
}

/// `warden doctor`'s row named `name` (its first line).
fn doctor_row(out: &str, name: &str) -> String {
    out.lines()
        .skip_while(|l| !l.starts_with(name))
        .take(1)
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn doctor_of_a_warden_built_alone_says_how_the_guest_init_is_built_and_installed() {
    let dir = TempDir::new("fresh-doctor");
    let alone = dir.path().join("warden");
    copy_program(&warden_bin(), &alone);
    let state = TempDir::new("fresh-doctor-state");
    let out = Command::new(&alone)
        .arg("doctor")
        .env("WARDEN_STATE_DIR", state.path())
        .env_remove("WARDEN_GUEST_INIT")
        .output()
        .unwrap();
    let text = format!("{}{}", stdout(&out), stderr(&out));
    let row = doctor_row(&text, "vm guest init");
    assert!(row.contains("MISSING"), "{text}");
    assert!(
        row.contains("cargo build --release -p warden-cli") && row.contains("docs/install.md"),
        "the row says which build makes it and where it goes: {row}"
    );
}

#[test]
fn doctor_for_a_user_who_cannot_open_dev_kvm_says_so_rather_than_that_there_is_none() {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = std::fs::metadata("/dev/kvm") else {
        return skip("this host has no /dev/kvm");
    };
    if meta.mode() & 0o006 == 0o006 {
        return skip("/dev/kvm is open to every user here");
    }
    let Some(user) = Unprivileged::get() else {
        return skip("no unprivileged user to run warden as");
    };
    if user.uid == meta.uid() || user.gid == meta.gid() {
        return skip("the unprivileged user may open /dev/kvm here");
    }
    let state = TempDir::new("fresh-kvm");
    user.own(state.path());
    let out = user.warden(state.path(), &["doctor"]);
    let text = format!("{}{}", stdout(&out), stderr(&out));
    let row = doctor_row(&text, "vm accel");
    assert!(
        row.contains("present but this user cannot open it") && row.contains("group"),
        "the row says the device is there and what would let this user use it: {text}"
    );
}

#[test]
fn exec_says_at_its_end_what_the_sandbox_was_refused_and_which_flag_would_allow_it() {
    if !egress_available() {
        return;
    }
    if Command::new("curl").arg("--version").output().is_err() {
        return skip("curl is not installed");
    }
    let state = TempDir::new("fresh-denials");
    ok(&warden(
        state.path(),
        &["create", "den", "--allow-domain", "allowed.test", "--start"],
    ));
    let _rm = Remover(state.path(), "den");
    let out = warden(
        state.path(),
        &[
            "exec",
            "den",
            "--",
            "curl",
            "-sS",
            "--max-time",
            "5",
            "https://refused.test/",
        ],
    );
    let err = stderr(&out);
    assert_ne!(code(&out), 0, "{err}");
    let said: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("warden:") && l.contains("refused.test"))
        .collect();
    assert!(
        said.iter()
            .any(|l| l.contains("--allow-domain refused.test")),
        "the refusal is said with the flag that would allow it: {err}"
    );
    // A command that was refused nothing says nothing more.
    let quiet = warden(state.path(), &["exec", "den", "--", "true"]);
    assert_eq!(stderr(&quiet), "", "nothing was refused");
}
