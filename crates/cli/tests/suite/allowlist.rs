//! Egress that teaches its own allowlist: presets on the command line, and
//! a summary at exit of what the run was denied, as profile lines and
//! flags that, pasted, make the same run pass. Real clients in real
//! sandboxes against a real server on the host's loopback.

use crate::common::tcp::{Upstream, PY_HELLO};
use crate::common::*;
use std::io::Write;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

/// Python sending a real TLS ClientHello for each name to the address a
/// name the run allows resolves to, printing what came back.
fn client(via: &str, port: u16, names: &[&str]) -> String {
    let mut s = String::from(PY_HELLO);
    s.push_str(&format!("ip = socket.gethostbyname('{via}')\n"));
    for n in names {
        s.push_str(&format!("print('{n}', send((ip, {port}), hello('{n}')))\n"));
    }
    s
}

fn run(args: &[&str], script: &str, env: &[(&str, &str)]) -> Output {
    Command::new(warden_bin())
        .args(["run", "--no-tty", "--no-audit-log"])
        .args(args)
        .args(["--", "python3", "-c", script])
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// The recording server, and the flags that allow it as `via.test` and
/// pin `via.test`, `one.test` and `two.test` to the host's loopback (so
/// the other two names reach it only if allowed); `None` when this kernel
/// cannot wire a sandbox's network (`egress_available` says why).
fn via_one_two() -> Option<(Upstream, [String; 8])> {
    if !egress_available() {
        return None;
    }
    let up = Upstream::start(b"hello from upstream");
    let base = [
        "--allow-domain",
        &format!("via.test:{}", up.port),
        "--add-host",
        "via.test=127.0.0.1",
        "--add-host",
        "one.test=127.0.0.1",
        "--add-host",
        "two.test=127.0.0.1",
    ]
    .map(String::from);
    Some((up, base))
}

/// The project's next run, with no terminal to ask on: it reaches the
/// server without a question.
fn next_run_needs_no_question(state: &std::path::Path, args: Vec<String>) {
    let out = Command::new(warden_bin())
        .env("WARDEN_STATE_DIR", state)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        stdout(&out).contains("got b'hello from upstream'"),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
}

#[test]
fn the_summary_of_what_was_denied_pasted_into_a_profile_makes_the_same_run_pass() {
    let Some((up, base)) = via_one_two() else {
        return;
    };
    let port = up.port;
    let base = base.each_ref().map(String::as_str);
    let script = client("via.test", port, &["one.test", "two.test"]);
    let first = run(&base, &script, &[]);
    let out = stdout(&first);
    assert!(!out.contains("hello from upstream"), "{out}");
    assert_eq!(up.connections().len(), 0);
    let err = stderr(&first);
    // The profile lines, as printed (each line of the notice after the
    // first `warden: `), and the flags.
    let start = err.find("to allow what this run was denied").expect(&err);
    let notice: Vec<&str> = err[start..].lines().collect();
    assert!(notice.len() >= 4, "{err}");
    let yaml = format!("{}\n{}\n", notice[1], notice[2]);
    let flags_line = notice[3].strip_prefix("or pass: ").expect(&err);
    assert!(
        yaml.contains(&format!("one.test:{port}")) && yaml.contains(&format!("two.test:{port}")),
        "{yaml}"
    );
    // Pasted into a profile: the same run passes.
    let dir = TempDir::new("teach-profile");
    let profile = dir.path().join("learned.yaml");
    std::fs::write(&profile, &yaml).unwrap();
    let validated = Command::new(warden_bin())
        .args(["profile", "validate", profile.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(validated.status.success(), "{}", stderr(&validated));
    let mut with_profile: Vec<&str> = base.to_vec();
    with_profile.extend(["-P", profile.to_str().unwrap()]);
    let second = run(&with_profile, &script, &[]);
    let out = stdout(&second);
    assert!(
        out.contains("one.test b'hello from upstream'")
            && out.contains("two.test b'hello from upstream'"),
        "{out}{}",
        stderr(&second)
    );
    assert!(
        !stderr(&second).contains("egress denied"),
        "{}",
        stderr(&second)
    );
    // Passed as flags: the same.
    let mut with_flags: Vec<&str> = base.to_vec();
    with_flags.extend(flags_line.split(' '));
    let third = run(&with_flags, &script, &[]);
    assert!(
        stdout(&third).contains("two.test b'hello from upstream'"),
        "{}{}",
        stdout(&third),
        stderr(&third)
    );
    assert_eq!(up.connections().len(), 4);
}

#[test]
fn a_preset_named_on_the_command_line_allows_its_names() {
    if !egress_available() {
        return;
    }
    let up = Upstream::start(b"hello from upstream");
    let port = up.port;
    let config = TempDir::new("preset-config");
    std::fs::create_dir_all(config.path().join("warden/presets")).unwrap();
    std::fs::write(
        config.path().join("warden/presets/forge.yaml"),
        format!("description: our forge\ndomains: [\"forge.test:{port}\"]\n"),
    )
    .unwrap();
    let env = [("XDG_CONFIG_HOME", config.str())];
    let script = client("forge.test", port, &["forge.test"]);
    let out = run(
        &["--preset", "forge", "--add-host", "forge.test=127.0.0.1"],
        &script,
        &env,
    );
    assert!(
        stdout(&out).contains("forge.test b'hello from upstream'"),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    assert_eq!(up.connections().len(), 1);
    let bad = run(&["--preset", "forgee"], "print(1)", &env);
    assert_eq!(code(&bad), 125, "{}", stderr(&bad));
    assert!(
        stderr(&bad).contains("forgee") && stderr(&bad).contains("forge"),
        "{}",
        stderr(&bad)
    );
}

#[test]
fn learning_mode_allows_marks_and_prints_a_fragment_a_profile_accepts() {
    let Some((up, base)) = via_one_two() else {
        return;
    };
    let port = up.port;
    let base = base.each_ref().map(String::as_str);
    // A name only resolved is learned too (as the name, any default port).
    let script = client("via.test", port, &["one.test", "two.test"])
        + "print('three', socket.gethostbyname('three.test'))\n";
    let dir = TempDir::new("learn");
    let ev = dir.path().join("ev.jsonl");
    let mut learning: Vec<&str> = base.to_vec();
    learning.extend(["--egress-learn", "--json-events", ev.to_str().unwrap()]);
    // The test's server is on the host's loopback, which learning (like
    // --ask) never opens; this debug-build switch lets it stand in for a
    // server elsewhere.
    let first = run(&learning, &script, &[("WARDEN_TEST_ASK_LOOPBACK", "1")]);
    let out = stdout(&first);
    let err = stderr(&first);
    assert!(
        out.contains("one.test b'hello from upstream'")
            && out.contains("two.test b'hello from upstream'"),
        "{out}{err}"
    );
    // A banner at the start and at the end, and a mark on each decision
    // learning allowed.
    let start = err.find("egress learning mode:").expect(&err);
    let end = err.find("egress learning mode ended").expect(&err);
    assert!(start < end, "{err}");
    let learned: Vec<_> = events(&ev)
        .into_iter()
        .filter(|e| e["event"] == "connection" && e["protocol"] == "tls")
        .collect();
    assert_eq!(learned.len(), 2, "{learned:?}");
    // Marked by its reason's code, and in words that name no flag.
    assert!(
        learned.iter().all(|e| e["allowed"] == true
            && e["reason"]["code"] == "learned"
            && e["rule"] == "learning mode: no rule allows it"),
        "{learned:?}"
    );
    // Every decision the allowlist did not make is marked, DNS included.
    let unmarked: Vec<_> = events(&ev)
        .into_iter()
        .filter(|e| e["event"] == "connection" && e["allowed"] == true)
        .filter(|e| {
            let rule = e["rule"].as_str().unwrap_or("");
            e["reason"]["code"] != "learned" && !rule.contains("via.test")
        })
        .collect();
    assert!(unmarked.is_empty(), "{unmarked:?}");
    assert!(err.contains("\"three.test\""), "{err}");
    // The fragment: a profile that validates, and the same run passes
    // with it and without learning.
    let notice: Vec<&str> = err[end..].lines().collect();
    let yaml = format!("{}\n{}\n", notice[1], notice[2]);
    let profile = dir.path().join("learned.yaml");
    std::fs::write(&profile, &yaml).unwrap();
    let validated = Command::new(warden_bin())
        .args(["profile", "validate", profile.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(validated.status.success(), "{yaml}{}", stderr(&validated));
    let mut with_profile: Vec<&str> = base.to_vec();
    with_profile.extend(["-P", profile.to_str().unwrap()]);
    let second = run(&with_profile, &script, &[]);
    assert!(
        stdout(&second).contains("two.test b'hello from upstream'"),
        "{}{}",
        stdout(&second),
        stderr(&second)
    );
    assert!(
        !stderr(&second).contains("egress denied"),
        "{}",
        stderr(&second)
    );
    assert_eq!(up.connections().len(), 4);
}

#[test]
fn learning_mode_is_refused_with_a_secret_before_anything_starts() {
    let out = run(
        &[
            "--egress-learn",
            "--secret",
            "TOKEN=env:HOME@api.example.com",
        ],
        "print('ran')",
        &[],
    );
    assert_eq!(code(&out), 125, "{}", stderr(&out));
    assert!(!stdout(&out).contains("ran"));
    assert!(
        stderr(&out).contains("--egress-learn") && stderr(&out).contains("--secret"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn learning_mode_never_opens_the_hosts_own_services() {
    if !egress_available() {
        return;
    }
    let up = Upstream::start(b"hello from upstream");
    let port = up.port;
    let via = format!("via.test:{port}");
    let script = client("via.test", port, &["one.test"]);
    let out = run(
        &[
            "--egress-learn",
            "--allow-domain",
            &via,
            "--add-host",
            "via.test=127.0.0.1",
            "--add-host",
            "one.test=127.0.0.1",
        ],
        &script,
        &[],
    );
    assert!(stdout(&out).contains("one.test b''"), "{}", stdout(&out));
    assert_eq!(
        up.connections().len(),
        0,
        "learning reached the host's loopback"
    );
    assert!(
        stderr(&out).contains("pinned to the host itself"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn an_always_answer_is_saved_for_the_project_and_its_next_run_is_not_asked() {
    if !egress_available() {
        return;
    }
    let up = Upstream::start(b"hello from upstream");
    let port = up.port;
    let state = TempDir::new("grants-state");
    let ws = TempDir::new("grants-ws");
    let script = format!(
        "import socket\ntry:\n    s = socket.create_connection(('asked.test', {port}), timeout=30); s.sendall(b'x'); print('got', s.recv(100))\nexcept OSError as e:\n    print('error', e)\n"
    );
    let args = |extra: &[&str]| -> Vec<String> {
        let mut a: Vec<String> = ["run", "--ask", "--no-audit-log", "-w", ws.str()]
            .iter()
            .map(|s| s.to_string())
            .collect();
        a.extend(extra.iter().map(|s| s.to_string()));
        a.extend(
            [
                "--add-host",
                "asked.test=127.0.0.1",
                "--",
                "python3",
                "-c",
                &script,
            ]
            .iter()
            .map(|s| s.to_string()),
        );
        a
    };
    let mut term = TestTerminal::open(24, 100);
    let mut cmd = Command::new(warden_bin());
    cmd.env("WARDEN_TEST_ASK_LOOPBACK", "1")
        .env("WARDEN_STATE_DIR", state.path())
        .args(args(&[]));
    let mut child = term.spawn(&mut cmd);
    let asked = term.expect("then Enter", Duration::from_secs(20));
    assert!(
        asked.contains("always"),
        "the answers offer no always: {asked}"
    );
    // Past the moment when input is taken for typed-ahead keys.
    std::thread::sleep(Duration::from_millis(700));
    term.master.write_all(b"always\r").unwrap();
    let said = term.expect("saved for this project", Duration::from_secs(20));
    let rest = term.expect("asked.test", Duration::from_secs(5));
    let status = child.wait().unwrap();
    let all = format!("{said}{rest}");
    assert!(status.success(), "{all}");
    assert!(all.contains("got b'hello from upstream'"), "{all}");
    assert!(
        all.contains(&format!("\"asked.test:{port}\"")),
        "the line written is not shown: {all}"
    );
    let grants: Vec<_> = std::fs::read_dir(state.path().join("grants"))
        .unwrap()
        .flatten()
        .collect();
    assert_eq!(grants.len(), 1);
    let text = std::fs::read_to_string(grants[0].path()).unwrap();
    assert!(text.contains(&format!("asked.test:{port}")), "{text}");
    // Nothing in the workspace: the sandbox cannot grant itself a name.
    assert_eq!(std::fs::read_dir(ws.path()).unwrap().count(), 0);
    // The next run of the project: no terminal to ask on, and no question
    // needed.
    next_run_needs_no_question(state.path(), args(&["--no-tty"]));
    assert_eq!(up.connections().len(), 2);
}

/// `--ask-save profile`: an "always" answer is added to the profile file
/// in use, in its own layout (its comments and order kept, one line more
/// in its list), the line shown; the profile's next run needs no question.
#[test]
fn an_always_answer_saved_into_the_profile_keeps_its_layout_and_allows_the_next_run() {
    if !egress_available() {
        return;
    }
    let up = Upstream::start(b"hello from upstream");
    let port = up.port;
    let state = TempDir::new("grants-profile-state");
    let dir = TempDir::new("grants-profile");
    let profile = dir.path().join("agent.yaml");
    let original = "# the agent's profile\negress:\n  domains:\n    - \"other.test\"   # kept as it is\n  hosts:\n    asked.test: 127.0.0.1\nresources:\n  pids: 128\n";
    std::fs::write(&profile, original).unwrap();
    let script = format!(
        "import socket\ntry:\n    s = socket.create_connection(('asked.test', {port}), timeout=30); s.sendall(b'x'); print('got', s.recv(100))\nexcept OSError as e:\n    print('error', e)\n"
    );
    let args = |extra: &[&str]| -> Vec<String> {
        let mut a: Vec<String> = ["run", "--no-audit-log", "-P", profile.to_str().unwrap()]
            .iter()
            .map(|s| s.to_string())
            .collect();
        a.extend(extra.iter().map(|s| s.to_string()));
        a.extend(
            ["--", "python3", "-c", &script]
                .iter()
                .map(|s| s.to_string()),
        );
        a
    };
    let mut term = TestTerminal::open(24, 100);
    let mut cmd = Command::new(warden_bin());
    cmd.env("WARDEN_TEST_ASK_LOOPBACK", "1")
        .env("WARDEN_STATE_DIR", state.path())
        .args(args(&["--ask", "--ask-save", "profile"]));
    let mut child = term.spawn(&mut cmd);
    term.expect("then Enter", Duration::from_secs(20));
    std::thread::sleep(Duration::from_millis(700));
    term.master.write_all(b"always\r").unwrap();
    let said = term.expect("added to the profile", Duration::from_secs(20));
    let rest = term.expect("asked.test", Duration::from_secs(5));
    let status = child.wait().unwrap();
    let all = format!("{said}{rest}");
    assert!(status.success(), "{all}");
    assert!(all.contains("got b'hello from upstream'"), "{all}");
    let text = std::fs::read_to_string(&profile).unwrap();
    assert_eq!(
        text,
        original.replace(
            "# kept as it is\n",
            &format!("# kept as it is\n    - \"asked.test:{port}\"\n")
        ),
        "the profile was not edited in its own layout"
    );
    // Kept in the profile, not in the project's grants.
    assert!(!state.path().join("grants").exists());
    next_run_needs_no_question(state.path(), args(&["--no-tty"]));
    assert_eq!(up.connections().len(), 2);
}

/// `--ask-save profile` with nothing it could write to is refused before
/// anything runs: a built-in profile, no profile, or no `--ask`.
#[test]
fn saving_answers_into_a_profile_warden_cannot_write_is_refused_before_anything_runs() {
    let dir = TempDir::new("grants-profile-refused");
    let own = dir.path().join("own.yaml");
    std::fs::write(&own, "egress:\n  domains: [\"a.example\"]\n").unwrap();
    for (args, why) in [
        (
            vec!["--ask", "--ask-save", "profile", "-P", "researcher"],
            "not a file warden can write",
        ),
        (vec!["--ask", "--ask-save", "profile"], "has no profile"),
        (
            vec!["--ask-save", "profile", "-P", own.to_str().unwrap()],
            "add `--ask`",
        ),
    ] {
        let out = run(&args, "print('ran')", &[]);
        assert_eq!(code(&out), 125, "{args:?}: {}", stderr(&out));
        assert!(!stdout(&out).contains("ran"), "{args:?}");
        assert!(stderr(&out).contains(why), "{args:?}: {}", stderr(&out));
    }
    assert_eq!(
        std::fs::read_to_string(&own).unwrap(),
        "egress:\n  domains: [\"a.example\"]\n"
    );
}

/// `--egress-learn-file FILE`: what learning allowed is written to FILE as
/// a profile that validates, a later learning run adds to it, a profile
/// that extends it makes the run pass without learning, and a file warden
/// did not write is refused before anything starts (and left as it was).
#[test]
fn learning_mode_writes_a_fragment_file_that_grows_and_that_a_profile_extends() {
    let Some((up, base)) = via_one_two() else {
        return;
    };
    let port = up.port;
    let base = base.each_ref().map(String::as_str);
    let dir = TempDir::new("learn-file");
    let file = dir.path().join("learned.yaml");
    let learn = |names: &[&str]| {
        let mut a: Vec<&str> = base.to_vec();
        a.extend([
            "--egress-learn",
            "--egress-learn-file",
            file.to_str().unwrap(),
        ]);
        run(
            &a,
            &client("via.test", port, names),
            &[("WARDEN_TEST_ASK_LOOPBACK", "1")],
        )
    };
    let first = learn(&["one.test"]);
    assert!(first.status.success(), "{}", stderr(&first));
    assert!(
        stderr(&first).contains("learned names written to"),
        "{}",
        stderr(&first)
    );
    let second = learn(&["two.test"]);
    assert!(second.status.success(), "{}", stderr(&second));
    let text = std::fs::read_to_string(&file).unwrap();
    for name in ["one.test", "two.test"] {
        assert!(text.contains(&format!("\"{name}:{port}\"")), "{text}");
    }
    let validated = Command::new(warden_bin())
        .args(["profile", "validate", file.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(validated.status.success(), "{text}{}", stderr(&validated));
    let profile = dir.path().join("agent.yaml");
    std::fs::write(
        &profile,
        format!("extends: [\"{}\"]\n", file.to_str().unwrap()),
    )
    .unwrap();
    let mut with_profile: Vec<&str> = base.to_vec();
    with_profile.extend(["-P", profile.to_str().unwrap()]);
    let third = run(
        &with_profile,
        &client("via.test", port, &["one.test", "two.test"]),
        &[],
    );
    assert!(
        stdout(&third).contains("two.test b'hello from upstream'")
            && !stderr(&third).contains("egress denied"),
        "{}{}",
        stdout(&third),
        stderr(&third)
    );
    assert_eq!(up.connections().len(), 4);
    // A person's own profile is never rewritten by learning.
    let mine = "# mine\negress:\n  domains: [\"a.example\"]\n";
    std::fs::write(&profile, mine).unwrap();
    let mut a: Vec<&str> = base.to_vec();
    a.extend([
        "--egress-learn",
        "--egress-learn-file",
        profile.to_str().unwrap(),
    ]);
    let refused = run(&a, "print('ran')", &[]);
    assert_eq!(code(&refused), 125, "{}", stderr(&refused));
    assert!(!stdout(&refused).contains("ran"));
    assert!(
        stderr(&refused).contains("warden did not write it"),
        "{}",
        stderr(&refused)
    );
    assert_eq!(std::fs::read_to_string(&profile).unwrap(), mine);
    // And the file needs learning mode.
    let mut a: Vec<&str> = base.to_vec();
    a.extend(["--egress-learn-file", file.to_str().unwrap()]);
    let refused = run(&a, "print('ran')", &[]);
    assert_eq!(code(&refused), 125, "{}", stderr(&refused));
    assert!(
        stderr(&refused).contains("add --egress-learn"),
        "{}",
        stderr(&refused)
    );
}

#[test]
fn a_program_the_allowlist_refuses_is_asked_at_the_terminal_and_always_lets_the_next_run_run_it() {
    if !egress_available() {
        return;
    }
    if landlock_abi() < 1 {
        return skip("this kernel has no Landlock: the exec allowlist is refused here");
    }
    if !std::path::Path::new("/usr/bin/id").exists() {
        return skip("no /usr/bin/id here");
    }
    let state = TempDir::new("ask-exec-state");
    let ws = TempDir::new("ask-exec-ws");
    // The refused program's status, kept past a read of the terminal (so
    // that the run lasts until the question is answered).
    let script = "/usr/bin/id; s=$?; echo \"id-status=$s\"; read x; exit $s";
    let run = |term: &TestTerminal| {
        let mut cmd = Command::new(warden_bin());
        cmd.env("WARDEN_STATE_DIR", state.path()).args([
            "run",
            "--ask",
            "--no-audit-log",
            "--allow-exec",
            "sh",
            "-w",
            ws.str(),
            "--",
            "sh",
            "-c",
            script,
        ]);
        term.spawn(&mut cmd)
    };
    let mut term = TestTerminal::open(24, 200);
    let mut child = run(&term);
    let asked = term.expect("then Enter", Duration::from_secs(30));
    assert!(asked.contains("may run /usr/bin/id ?"), "{asked}");
    assert!(asked.contains("once and run are not offered"), "{asked}");
    std::thread::sleep(Duration::from_millis(700));
    // "once" is not an answer to a program's question.
    term.master.write_all(b"once\r").unwrap();
    let again = term.expect("type always, deny or never", Duration::from_secs(10));
    assert!(again.contains("type always, deny or never"), "{again}");
    term.master.write_all(b"always\r").unwrap();
    // (The shell's line after the refusal may come before the question or
    // after the answer.)
    let said = term.expect("allowed always", Duration::from_secs(20));
    assert!(said.contains("allowed always"), "{said}");
    term.master.write_all(b"\r").unwrap();
    let rest = term.expect("answered always", Duration::from_secs(20));
    let status = child.wait().unwrap();
    let all = format!("{asked}{again}{said}{rest}");
    // The refusal stood in the run that asked.
    assert_eq!(status.code(), Some(126), "{all}");
    assert!(all.contains("id-status=126"), "{all}");
    assert!(all.contains("programs saved"), "{all}");
    let grants: Vec<_> = std::fs::read_dir(state.path().join("grants"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.to_string_lossy().ends_with(".exec.json"))
        .collect();
    assert_eq!(grants.len(), 1, "{grants:?}");
    let text = std::fs::read_to_string(&grants[0]).unwrap();
    assert!(text.contains("\"/usr/bin/id\""), "{text}");
    // Nothing in the workspace: the sandbox cannot grant itself a program.
    assert_eq!(std::fs::read_dir(ws.path()).unwrap().count(), 0);
    // The next run of the project, same flags: id runs, nothing is asked.
    let mut term = TestTerminal::open(24, 200);
    let mut child = run(&term);
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
