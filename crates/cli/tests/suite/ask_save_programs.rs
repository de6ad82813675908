//! `--ask --ask-save profile` and the exec allowlist, at a real terminal:
//! a program the profile's allowlist refuses, answered "always", is added
//! to the profile's own `process.allow_exec` in the person's layout (as a
//! name is added to `egress.domains`), and the profile's next run runs it
//! unasked; a named sandbox's approvals desk (`warden approvals`) does the
//! same. A profile without an allowlist of its own is never given one.

use crate::common::*;
use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// The refused program's status, kept past a read of the terminal (so
/// that the run lasts until the question is answered).
const SCRIPT: &str = "/usr/bin/id; s=$?; echo \"id-status=$s\"; read x; exit $s";

/// Can the exec allowlist be asked about here?
fn available() -> bool {
    if !egress_available() {
        return false;
    }
    if landlock_abi() < 1 {
        skip("this kernel has no Landlock: the exec allowlist is refused here");
        return false;
    }
    if !Path::new("/usr/bin/id").exists() {
        skip("no /usr/bin/id here");
        return false;
    }
    true
}

/// `warden run -P profile EXTRA -- sh -c SCRIPT` on `term`.
fn run(term: &TestTerminal, state: &Path, profile: &Path, extra: &[&str]) -> std::process::Child {
    let mut cmd = Command::new(warden_bin());
    cmd.env("WARDEN_STATE_DIR", state)
        .args(["run", "--no-audit-log", "-P", profile.to_str().unwrap()])
        .args(extra)
        .args(["--", "sh", "-c", SCRIPT]);
    term.spawn(&mut cmd)
}

#[test]
fn a_program_answered_always_goes_into_the_profiles_allow_exec_in_its_layout_and_runs_next_time() {
    if !available() {
        return;
    }
    let state = TempDir::new("ask-save-programs-state");
    let dir = TempDir::new("ask-save-programs");
    let profile = dir.path().join("agent.yaml");
    let original = "# the agent's profile\nprocess:\n  allow_exec:\n    - sh   # the shell\negress:\n  domains: [\"other.test\"]  # kept\n";
    std::fs::write(&profile, original).unwrap();
    let asking = ["--ask", "--ask-save", "profile"];

    let mut term = TestTerminal::open(24, 200);
    let mut child = run(&term, state.path(), &profile, &asking);
    let asked = term.expect("then Enter", Duration::from_secs(30));
    assert!(asked.contains("may run /usr/bin/id ?"), "{asked}");
    assert!(
        asked.contains("added to the profile's process.allow_exec"),
        "{asked}"
    );
    assert!(!asked.contains("always is not offered"), "{asked}");
    std::thread::sleep(Duration::from_millis(700));
    term.master.write_all(b"always\r").unwrap();
    let said = term.expect("allowed always", Duration::from_secs(20));
    term.master.write_all(b"\r").unwrap();
    let rest = term.expect("answered always", Duration::from_secs(20));
    let status = child.wait().unwrap();
    let all = format!("{asked}{said}{rest}");
    // The refusal stood in the run that asked.
    assert_eq!(status.code(), Some(126), "{all}");
    assert!(all.contains("id-status=126"), "{all}");
    assert!(
        all.contains("programs added to process.allow_exec"),
        "{all}"
    );
    // One line more in the profile's own list, in its style; its comments
    // and its other sections as they were.
    assert_eq!(
        std::fs::read_to_string(&profile).unwrap(),
        original.replace("# the shell\n", "# the shell\n    - \"/usr/bin/id\"\n"),
        "the profile was not edited in its own layout"
    );
    // Kept in the profile, not in any project's grants.
    assert!(!state.path().join("grants").exists());

    // The profile's next run: id runs, nothing is asked.
    let mut term = TestTerminal::open(24, 200);
    let mut child = run(&term, state.path(), &profile, &asking);
    let out = term.expect("id-status=", Duration::from_secs(30));
    std::thread::sleep(Duration::from_millis(200));
    term.master.write_all(b"\r").unwrap();
    let status = child.wait().unwrap();
    let out = format!("{out}{}", term.expect("\u{0}", Duration::from_millis(500)));
    assert!(out.contains("id-status=0"), "{out}");
    assert!(out.contains("uid="), "{out}");
    assert!(!out.contains("may run"), "asked again: {out}");
    assert_eq!(status.code(), Some(0), "{out}");
}

#[test]
fn a_profile_without_an_allowlist_of_its_own_is_never_given_one_by_an_answer() {
    if !available() {
        return;
    }
    let state = TempDir::new("ask-save-programs-none-state");
    let dir = TempDir::new("ask-save-programs-none");
    let profile = dir.path().join("open.yaml");
    // Any program may run under this profile; this run's allowlist is the
    // command line's. Written into the profile, the program would become
    // the only one its later runs may start.
    let original = "egress:\n  domains: [\"other.test\"]\n";
    std::fs::write(&profile, original).unwrap();
    let mut term = TestTerminal::open(24, 200);
    let mut child = run(
        &term,
        state.path(),
        &profile,
        &["--ask", "--ask-save", "profile", "--allow-exec", "sh"],
    );
    let asked = term.expect("then Enter", Duration::from_secs(30));
    assert!(asked.contains("may run /usr/bin/id ?"), "{asked}");
    assert!(asked.contains("always is not offered"), "{asked}");
    std::thread::sleep(Duration::from_millis(700));
    term.master.write_all(b"always\r").unwrap();
    let again = term.expect("type deny or never", Duration::from_secs(10));
    term.master.write_all(b"deny\r").unwrap();
    let said = term.expect("denied", Duration::from_secs(10));
    term.master.write_all(b"\r").unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(126), "{asked}{again}{said}");
    assert_eq!(std::fs::read_to_string(&profile).unwrap(), original);
    assert!(!state.path().join("grants").exists());
}

/// Removes the named sandbox when the test ends, passed or not.
struct Removed<'a>(&'a Path, &'a str);

impl Drop for Removed<'_> {
    fn drop(&mut self) {
        let _ = warden(self.0, &["rm", "-f", self.1]);
    }
}

#[test]
fn a_named_sandboxs_approval_always_goes_into_its_profiles_allow_exec() {
    if !available() {
        return;
    }
    let state = TempDir::new("ask-save-programs-named");
    let dir = TempDir::new("ask-save-programs-named-profile");
    let profile = dir.path().join("agent.yaml");
    let original = "# the agent's profile\nprocess:\n  allow_exec: [sh]  # the shell\negress:\n  ask: true\n  domains: [\"other.test\"]\n";
    std::fs::write(&profile, original).unwrap();
    let p = profile.to_str().unwrap();
    ok(&warden(
        state.path(),
        &["create", "progs", "--ask-save", "profile", "-P", p],
    ));
    let _removed = Removed(state.path(), "progs");
    ok(&warden(state.path(), &["start", "progs"]));
    let out = warden(
        state.path(),
        &[
            "exec",
            "progs",
            "--",
            "sh",
            "-c",
            "/usr/bin/id; echo id-status=$?",
        ],
    );
    assert!(stdout(&out).contains("id-status=126"), "{}", stderr(&out));
    let mut asked = serde_json::Value::Null;
    wait_until("the question", Duration::from_secs(10), || {
        let o = warden(state.path(), &["approvals", "--json"]);
        asked = serde_json::from_str(&stdout(&o)).unwrap_or_default();
        asked
            .as_array()
            .is_some_and(|a| a.iter().any(|q| q["name"] == "/usr/bin/id"))
    });
    let q = asked
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["name"] == "/usr/bin/id")
        .unwrap();
    assert_eq!(q["protocol"], "exec", "{q}");
    let id = q["id"].as_str().unwrap();
    ok(&warden(state.path(), &["approvals", id, "allow_always"]));
    assert_eq!(
        std::fs::read_to_string(&profile).unwrap(),
        original.replace("[sh]", "[sh, \"/usr/bin/id\"]"),
        "the profile was not edited in its own layout"
    );
    // A later run of the profile runs it, nothing asked.
    let out = warden(
        state.path(),
        &[
            "run",
            "--no-audit-log",
            "--no-tty",
            "-P",
            p,
            "--",
            "/usr/bin/id",
        ],
    );
    assert!(stdout(&out).contains("uid="), "{}", stderr(&out));
}

#[test]
fn a_program_whose_path_holds_a_bidi_override_is_asked_about_and_listed_with_it_escaped_and_kept_whole(
) {
    if !available() {
        return;
    }
    let state = TempDir::new("ask-programs-bidi-state");
    let dir = TempDir::new("ask-programs-bidi");
    // Drawn as is, `x<RLO>di` reads `xid` backwards from the override on:
    // the question would show another name than the program's.
    let program = dir.path().join("x\u{202e}di");
    copy_program(Path::new("/usr/bin/id"), &program);
    let profile = dir.path().join("agent.yaml");
    std::fs::write(&profile, "process:\n  allow_exec:\n    - sh\n").unwrap();
    let mut term = TestTerminal::open(24, 200);
    let mut cmd = Command::new(warden_bin());
    cmd.env("WARDEN_STATE_DIR", state.path())
        .args(["run", "--no-audit-log", "--ask", "--ask-save", "profile"])
        .args(["-P", profile.to_str().unwrap(), "--ro", dir.str()])
        .args(["--", "sh", "-c"])
        .arg(format!(
            "{}/x* 2>/dev/null; s=$?; echo \"status=$s\"; read x; exit $s",
            dir.str()
        ));
    let mut child = term.spawn(&mut cmd);
    let asked = term.expect("then Enter", Duration::from_secs(30));
    let shown = format!("may run {}/x\\u{{202e}}di ?", dir.str());
    assert!(asked.contains(&shown), "{asked}");
    assert!(
        !asked.contains('\u{202e}'),
        "the override reached the terminal: {asked}"
    );
    std::thread::sleep(Duration::from_millis(700));
    term.master.write_all(b"always\r").unwrap();
    let said = term.expect("allowed always", Duration::from_secs(20));
    term.master.write_all(b"\r").unwrap();
    // The run's end lists the program kept, escaped as it was asked: read
    // until the whole name is there (the line may come in pieces).
    let listed = format!("{}/x\\u{{202e}}di", dir.str());
    let rest = term.expect(&listed, Duration::from_secs(20));
    let status = child.wait().unwrap();
    let all = format!("{asked}{said}{rest}");
    assert_eq!(status.code(), Some(126), "{all}");
    assert!(rest.contains("answered always"), "{all}");
    assert!(rest.contains(&listed), "{all}");
    assert!(
        !all.contains('\u{202e}'),
        "the override reached the terminal: {all}"
    );
    // What is kept is the real path, whole, written with the override
    // escaped (YAML's `\u202E`), so that the file read on a terminal
    // shows what it holds; read back, it is the path itself.
    let kept = std::fs::read_to_string(&profile).unwrap();
    assert!(!kept.contains('\u{202e}'), "{kept}");
    let read: serde_json::Value = serde_saphyr::from_str(&kept).unwrap();
    let path = serde_json::Value::from(program.to_str().unwrap());
    assert!(
        read["process"]["allow_exec"]
            .as_array()
            .is_some_and(|a| a.contains(&path)),
        "{kept}"
    );
}
