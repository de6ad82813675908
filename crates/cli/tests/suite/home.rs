//! The sandbox's home is its own, never the project: what shells, git and
//! npm write to `HOME` stays out of the workspace and its overlay's diff; a
//! named sandbox keeps its home from one exec to the next; package caches
//! declared by a profile persist between its runs in warden's state and are
//! never the host's own. As root and as an unprivileged user.

use crate::common::*;
use std::path::Path;

/// What an agent's tools leave in `HOME`: shell history, git's global
/// configuration, and (with npm on the host) npm's own log of a failed
/// install, written by the real npm.
const DOTFILES: &str = r#"set -e
cd
echo 'ls -la' >> .bash_history
git config --global user.name sandboxed
test -f "$HOME/.gitconfig"
if command -v npm >/dev/null; then
  npm install --offline --no-audit --no-fund warden-no-such-package >/dev/null 2>&1 || true
  ls "$HOME/.npm/_logs" | grep -q debug
fi
echo "home=$HOME"
"#;

/// Every entry of a tree, relative, sorted.
fn listing(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            out.push(p.strip_prefix(dir).unwrap().display().to_string());
            if e.file_type().unwrap().is_dir() {
                todo.push(p);
            }
        }
    }
    out.sort();
    out
}

#[test]
fn tools_write_their_dotfiles_to_the_sandboxs_home_not_the_workspace() {
    let state = TempDir::new("home-state");
    let ws = TempDir::new("home-ws");
    std::fs::write(ws.path().join("main.py"), "print(1)\n").unwrap();
    // Directly on the workspace: nothing but the project's own file.
    let out = warden_env(
        state.path(),
        &[
            "run",
            "--no-tty",
            "-w",
            ws.str(),
            "--",
            "sh",
            "-c",
            DOTFILES,
        ],
        &[],
    );
    assert!(ok(&out).contains("home=/home/sandbox"), "{}", stdout(&out));
    assert_eq!(listing(ws.path()), ["main.py"]);
    // Through an overlay: no change at all, so nothing is kept for review.
    let out = warden_env(
        state.path(),
        &[
            "run",
            "--no-tty",
            "--overlay",
            "-w",
            ws.str(),
            "--",
            "sh",
            "-c",
            DOTFILES,
        ],
        &[],
    );
    ok(&out);
    assert!(!stderr(&out).contains("change(s) kept"), "{}", stderr(&out));
    let ls = warden(state.path(), &["ls"]);
    assert!(!ok(&ls).contains("run-"), "{}", stdout(&ls));
    assert_eq!(listing(ws.path()), ["main.py"]);
}

#[test]
fn a_named_sandbox_keeps_its_home_from_one_exec_to_the_next() {
    let state = TempDir::new("home-named-state");
    let ws = TempDir::new("home-named-ws");
    ok(&warden_env(
        state.path(),
        &["create", "keep", "-w", ws.str()],
        &[],
    ));
    let exec = |script: &str| {
        warden_env(
            state.path(),
            &["exec", "keep", "--no-tty", "--", "sh", "-c", script],
            &[],
        )
    };
    ok(&exec(
        "cd && echo 'make test' >> .bash_history && git config --global user.name kept",
    ));
    let again = ok(&exec(
        "cat ~/.bash_history; git config --global user.name; pwd",
    ));
    assert!(
        again.contains("make test") && again.contains("kept"),
        "{again}"
    );
    assert!(again.contains("/workspace"), "{again}");
    let diff = ok(&warden(state.path(), &["diff", "keep"]));
    assert!(
        !diff.contains("bash_history") && !diff.contains("gitconfig"),
        "{diff}"
    );
    ok(&warden(state.path(), &["stop", "keep"]));
    // Stopped and started again: still there.
    let after = ok(&exec("cat ~/.bash_history"));
    assert!(after.contains("make test"), "{after}");
    assert!(listing(ws.path()).is_empty(), "{:?}", listing(ws.path()));
    ok(&warden(state.path(), &["rm", "-f", "keep"]));
}

/// A host HOME with its own caches, which no sandbox may see or write.
fn host_home(tag: &str) -> TempDir {
    let home = TempDir::new(tag);
    for d in [".cache/pip", ".npm/_cacache"] {
        std::fs::create_dir_all(home.path().join(d)).unwrap();
        std::fs::write(home.path().join(d).join("host-marker"), "host\n").unwrap();
    }
    home
}

const CACHE_PROBE: &str = r#"
for d in "$HOME/.cache/pip" "$HOME/.npm/_cacache"; do
  test -e "$d/host-marker" && echo "saw-host-cache $d"
  if test -e "$d/from-first-run"; then echo "kept $d"; else echo first > "$d/from-first-run"; fi
done
echo done
"#;

#[test]
fn a_profiles_caches_persist_between_its_runs_and_are_not_the_hosts() {
    let state = TempDir::new("cache-state");
    let home = host_home("cache-home");
    let prof = TempDir::new("cache-prof");
    let profile = prof.path().join("builder.yaml");
    std::fs::write(&profile, "filesystem:\n  caches: [pip, npm]\n").unwrap();
    let env = [("HOME", home.str())];
    let run = |args: &[&str]| {
        let mut all = vec!["run", "--no-tty"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--", "sh", "-c", CACHE_PROBE]);
        warden_env(state.path(), &all, &env)
    };
    let first = ok(&run(&["-P", profile.to_str().unwrap()]));
    assert!(
        !first.contains("kept") && !first.contains("saw-host"),
        "{first}"
    );
    let second = ok(&run(&["-P", profile.to_str().unwrap()]));
    assert!(
        second.contains("kept /home/sandbox/.cache/pip")
            && second.contains("kept /home/sandbox/.npm/_cacache"),
        "{second}"
    );
    assert!(!second.contains("saw-host"), "{second}");
    // Kept in warden's state under the profile's name; the host's own
    // caches hold only what they held.
    let kept = state.path().join("warden/caches/builder");
    assert!(kept.join("pip/pip/from-first-run").is_file());
    assert!(kept.join("npm/_cacache/from-first-run").is_file());
    assert_eq!(listing(&home.path().join(".cache/pip")), ["host-marker"]);
    assert_eq!(listing(&home.path().join(".npm/_cacache")), ["host-marker"]);
    // Another profile (here: none, with the flag) has caches of its own.
    let other = ok(&run(&["--cache", "pip"]));
    assert!(!other.contains("kept /home/sandbox/.cache/pip"), "{other}");
    // Without the option nothing is shared: the home is a fresh tmpfs.
    let none = ok(&run(&[]));
    assert!(!none.contains("kept"), "{none}");
}

#[test]
fn an_unknown_cache_is_refused_before_anything_starts() {
    let state = TempDir::new("cache-bad-state");
    let out = warden_env(
        state.path(),
        &["run", "--no-tty", "--cache", "maven", "--", "true"],
        &[],
    );
    assert_eq!(code(&out), 125, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("--cache") && stderr(&out).contains("pip, npm, cargo, go"),
        "{}",
        stderr(&out)
    );
    assert!(!state.path().join("warden/caches").exists());
}

#[test]
fn an_unprivileged_user_gets_its_own_home_and_caches_too() {
    let Some(who) = Unprivileged::get() else {
        skip("cannot get an unprivileged user to run warden as");
        return;
    };
    let state = TempDir::new("home-unpriv-state");
    let ws = TempDir::new("home-unpriv-ws");
    for p in [state.path(), ws.path()] {
        who.own(p);
    }
    let run = |args: &[&str]| who.warden_state_home(state.path(), args);
    let out = run(&[
        "run",
        "--no-tty",
        "-w",
        ws.str(),
        "--",
        "sh",
        "-c",
        DOTFILES,
    ]);
    assert!(ok(&out).contains("home=/home/sandbox"), "{}", stdout(&out));
    assert!(listing(ws.path()).is_empty(), "{:?}", listing(ws.path()));
    for _ in 0..2 {
        ok(&run(&[
            "run",
            "--no-tty",
            "--cache",
            "pip",
            "--",
            "sh",
            "-c",
            CACHE_PROBE,
        ]));
    }
    let last = ok(&run(&[
        "run",
        "--no-tty",
        "--cache",
        "pip",
        "--",
        "sh",
        "-c",
        CACHE_PROBE,
    ]));
    assert!(last.contains("kept /home/sandbox/.cache/pip"), "{last}");
    ok(&run(&["create", "u", "-w", ws.str()]));
    ok(&run(&[
        "exec",
        "u",
        "--no-tty",
        "--",
        "sh",
        "-c",
        "echo x > ~/mark",
    ]));
    assert_eq!(
        ok(&run(&[
            "exec",
            "u",
            "--no-tty",
            "--",
            "cat",
            "/home/sandbox/mark"
        ])),
        "x\n"
    );
    ok(&run(&["rm", "-f", "u"]));
}
