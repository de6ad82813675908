//! The exec allowlist (`--allow-exec`, `process.allow_exec`) through the
//! real binary, as root and as an unprivileged user: with `git` and
//! `python3` allowed, those run and nothing else does, whichever way it is
//! started: by name, through `sh -c`, as a copy, as a script whose
//! interpreter is not allowed, through the dynamic loader, or from a memfd.
//! A refusal of the command warden starts is 126 with a message naming the
//! rule and an `exited` event; a refusal inside is the kernel's EACCES to
//! the program that asked (see docs/allow-exec.md for what is recorded).

use crate::common::*;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Where warden runs from, and as whom.
pub(super) struct Runner {
    pub(super) name: &'static str,
    bin: PathBuf,
    who: Option<Unprivileged>,
}

impl Runner {
    /// Root's (when the tests run as root) and an unprivileged user's.
    pub(super) fn all() -> Vec<Runner> {
        let mut out = Vec::new();
        if is_root() {
            out.push(Runner {
                name: "root",
                bin: warden_bin(),
                who: None,
            });
        }
        match Unprivileged::get() {
            Some(who) => out.push(Runner {
                name: "rootless",
                bin: who.bin.clone(),
                who: Some(who),
            }),
            None => skip("no unprivileged user to run warden as: the rootless half is not run"),
        }
        out
    }

    fn command(&self) -> Command {
        match &self.who {
            Some(who) => who.command(self.bin.to_str().unwrap_or_default()),
            None => {
                let mut c = Command::new(&self.bin);
                c.stdin(std::process::Stdio::null());
                c
            }
        }
    }

    pub(super) fn own(&self, p: &Path) {
        if let Some(who) = &self.who {
            who.own(p);
        }
    }

    /// `warden run --allow-exec ... ARGS -- CMD...`
    pub(super) fn run(&self, allow: &[&str], args: &[&str], cmd: &[&str]) -> Output {
        let mut c = self.command();
        c.args(["run", "--no-tty"]);
        for a in allow {
            c.args(["--allow-exec", a]);
        }
        c.args(args).arg("--").args(cmd);
        c.output().expect("warden could not be started")
    }
}

const GIT_AND_PYTHON: &[&str] = &["git", "python3"];

/// Whether this host has what the tests name: Landlock, git, python3,
/// curl. Skipped with the reason otherwise.
pub(super) fn host_ready() -> bool {
    for p in ["/usr/bin/python3", "/usr/bin/curl", "/usr/bin/env"] {
        if !Path::new(p).exists() {
            skip(&format!("{p} is not on this host"));
            return false;
        }
    }
    if !["/usr/bin/git", "/usr/local/bin/git"]
        .iter()
        .any(|p| Path::new(p).exists())
    {
        skip("git is not on this host");
        return false;
    }
    if landlock_abi() < 1 {
        skip("this kernel has no Landlock: the exec allowlist is refused here (see its own test)");
        return false;
    }
    true
}

/// A workspace holding a copy of curl, a shell script and two Python
/// scripts, readable by the runner.
fn workspace(r: &Runner) -> TempDir {
    let dir = TempDir::new("allow-exec-ws");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let put = |name: &str, body: &[u8]| {
        let p = dir.path().join(name);
        std::fs::write(&p, body).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        r.own(&p);
    };
    put("curl-copy", &std::fs::read("/usr/bin/curl").unwrap());
    put("echo-copy", &std::fs::read("/usr/bin/echo").unwrap());
    put("hello.sh", b"#!/bin/sh\necho shell script ran\n");
    put(
        "tool.py",
        b"#!/usr/bin/env python3\nprint('python script ran')\n",
    );
    put(
        "attacks.py",
        include_str!("allow_exec_attacks.py").as_bytes(),
    );
    r.own(dir.path());
    dir
}

/// Scripts to allow, outside the workspace, shown read-only (`--ro`): an
/// allowed file the sandbox can write is refused (see the attack test).
fn tools(r: &Runner) -> TempDir {
    let dir = TempDir::new("allow-exec-tools");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    for (name, body) in [
        ("hello.sh", &b"#!/bin/sh\necho shell script ran\n"[..]),
        (
            "tool.py",
            &b"#!/usr/bin/env python3\nprint('python script ran')\n"[..],
        ),
    ] {
        let p = dir.path().join(name);
        std::fs::write(&p, body).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        r.own(&p);
    }
    r.own(dir.path());
    dir
}

fn refused(o: &Output, what: &str, who: &str) {
    assert_eq!(
        code(o),
        126,
        "{who}: {what} should be refused with 126: {o:?}"
    );
    assert!(
        stderr(o).contains("exec allowlist"),
        "{who}: the refusal of {what} names the rule: {}",
        stderr(o)
    );
}

#[test]
fn an_allowlist_of_git_and_python3_runs_them_and_refuses_what_warden_is_asked_to_start() {
    if !host_ready() {
        return;
    }
    for r in Runner::all() {
        let ws = workspace(&r);
        let w = ["--workspace", ws.str()];
        let git = r.run(GIT_AND_PYTHON, &w, &["git", "--version"]);
        assert_eq!(code(&git), 0, "{}: git runs: {git:?}", r.name);
        assert!(stdout(&git).contains("git version"), "{}", r.name);
        let py = r.run(GIT_AND_PYTHON, &w, &["python3", "-c", "print(6 * 7)"]);
        assert_eq!(stdout(&py).trim(), "42", "{}: python3 runs: {py:?}", r.name);

        let curl = r.run(GIT_AND_PYTHON, &w, &["curl", "--version"]);
        refused(&curl, "curl", r.name);
        assert!(!stdout(&curl).contains("libcurl"), "{}", r.name);
        let sh = r.run(GIT_AND_PYTHON, &w, &["sh", "-c", "echo shell ran"]);
        refused(&sh, "sh -c", r.name);
        assert!(!stdout(&sh).contains("shell ran"), "{}", r.name);
        let copy = r.run(GIT_AND_PYTHON, &w, &["/workspace/curl-copy", "--version"]);
        refused(&copy, "a copied binary", r.name);
        let loader = r.run(
            GIT_AND_PYTHON,
            &w,
            &["/lib64/ld-linux-x86-64.so.2", "/usr/bin/curl", "--version"],
        );
        refused(&loader, "the dynamic loader", r.name);
        assert!(!stdout(&loader).contains("libcurl"), "{}", r.name);
        // The script is allowed; the interpreter its `#!` names is not.
        let t = tools(&r);
        let hello = format!("{}/hello.sh", t.str());
        let mut allow = GIT_AND_PYTHON.to_vec();
        allow.push(&hello);
        let script = r.run(&allow, &[w[0], w[1], "--ro", t.str()], &[&hello]);
        refused(&script, "a script without an allowed interpreter", r.name);
        assert!(!stdout(&script).contains("script ran"), "{}", r.name);
    }
}

#[test]
fn a_bare_name_is_found_among_the_systems_programs_never_on_a_path_the_sandbox_writes() {
    if !host_ready() {
        return;
    }
    for r in Runner::all() {
        let ws = workspace(&r);
        // A shell named `git` where the sandbox writes, first on the PATH a
        // caller gave: it must not become the allowed `git`.
        let bin = ws.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::write(bin.join("git"), std::fs::read("/bin/sh").unwrap()).unwrap();
        std::fs::set_permissions(bin.join("git"), std::fs::Permissions::from_mode(0o755)).unwrap();
        r.own(&bin);
        r.own(&bin.join("git"));
        let args = [
            "--workspace",
            ws.str(),
            "--env",
            "PATH=/workspace/bin:/usr/bin:/bin",
        ];
        let fake = r.run(&["git"], &args, &["git", "-c", "echo SHELL-RAN"]);
        assert!(!stdout(&fake).contains("SHELL-RAN"), "{}: {fake:?}", r.name);
        refused(
            &fake,
            "a program named like an allowed one on the sandbox's PATH",
            r.name,
        );
        // The allowed `git` is the system's, found as a shell finds it on
        // the system's own directories.
        let real = r.run(&["git"], &args[..2], &["git", "--version"]);
        assert!(
            stdout(&real).contains("git version"),
            "{}: {real:?}",
            r.name
        );
    }
}

#[test]
fn a_script_runs_when_its_env_and_python3_interpreters_are_both_allowed() {
    if !host_ready() {
        return;
    }
    for r in Runner::all() {
        let ws = workspace(&r);
        let t = tools(&r);
        let tool = format!("{}/tool.py", t.str());
        let w = ["--workspace", ws.str(), "--ro", t.str()];
        let both = ["git", "python3", "/usr/bin/env", &tool];
        let o = r.run(&both, &w, &[&tool]);
        assert_eq!(code(&o), 0, "{}: {o:?}", r.name);
        assert_eq!(stdout(&o).trim(), "python script ran", "{}", r.name);
        // Without env, the same script is refused.
        let o = r.run(&["git", "python3", &tool], &w, &[&tool]);
        refused(&o, "a script whose `env` is not allowed", r.name);
    }
}

#[test]
fn inside_the_sandbox_an_allowed_python3_cannot_execute_anything_else() {
    if !host_ready() {
        return;
    }
    for r in Runner::all() {
        let ws = workspace(&r);
        let w = ["--workspace", ws.str()];
        let o = r.run(GIT_AND_PYTHON, &w, &["python3", "/workspace/attacks.py"]);
        let out = stdout(&o);
        assert_eq!(code(&o), 0, "{}: the attack script finished: {o:?}", r.name);
        for line in [
            "curl: refused 13",
            "sh -c: refused 13",
            "read curl: refused 13",
            "copy in /tmp: refused 13",
            "copy in the workspace: refused 13",
            "loader with curl: not run",
            "loader with a copy: not run",
            "executable memfd: refused 13",
            "sealed memfd: refused 13",
            "script with sh: refused 13",
            "git: ran",
        ] {
            assert!(
                out.lines().any(|l| l == line),
                "{}: expected {line:?} in:\n{out}\n{}",
                r.name,
                stderr(&o)
            );
        }
        assert!(!out.contains("RAN-ANYWAY"), "{}: {out}", r.name);
    }
}

#[test]
fn a_refused_command_is_an_event_with_its_status() {
    if !host_ready() {
        return;
    }
    let Some(r) = Runner::all().into_iter().next() else {
        return;
    };
    let dir = TempDir::new("allow-exec-events");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let ev = dir.path().join("events.jsonl");
    let o = r.run(
        GIT_AND_PYTHON,
        &["--json-events", ev.to_str().unwrap()],
        &["curl", "--version"],
    );
    refused(&o, "curl", r.name);
    let exited: Vec<_> = events(&ev)
        .into_iter()
        .filter(|e| e["event"] == "exited")
        .collect();
    assert_eq!(exited.len(), 1, "{exited:?}");
    assert_eq!(exited[0]["status"], 126);
    assert_eq!(exited[0]["reason"], "exec_failed");
}

#[test]
fn an_allowlist_entry_that_names_nothing_or_is_malformed_starts_nothing() {
    let o = Command::new(warden_bin())
        .args(["run", "--no-tty", "--allow-exec", "bin/git", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(code(&o), 125, "{o:?}");
    assert!(stderr(&o).contains("--allow-exec"), "{}", stderr(&o));
    assert!(stderr(&o).contains("relative path"), "{}", stderr(&o));
    if !host_ready() {
        return;
    }
    let o = Command::new(warden_bin())
        .args([
            "run",
            "--no-tty",
            "--allow-exec",
            "no-such-program-here",
            "--",
            "true",
        ])
        .output()
        .unwrap();
    assert_ne!(code(&o), 0, "{o:?}");
    assert!(stderr(&o).contains("names no program"), "{}", stderr(&o));
}

#[test]
fn the_loader_is_refused_as_the_command_of_every_exec_not_only_of_warden_run() {
    if !host_ready() {
        return;
    }
    let loader = "/lib64/ld-linux-x86-64.so.2";
    let outside = "/usr/lib/git-core/git";
    if !Path::new(loader).exists() || !Path::new(outside).exists() {
        return skip("no x86-64 loader or /usr/lib/git-core/git here");
    }
    let state = TempDir::new("exec-loader");
    let ws = TempDir::new("exec-loader-ws");
    ok(&warden(
        state.path(),
        &["create", "l", "--allow-exec", "cat", "-w", ws.str()],
    ));
    ok(&warden(state.path(), &["start", "l"]));
    // The loader as the command maps an ELF outside the sealed program
    // directories: git from /usr/lib/git-core, with only cat allowed.
    let out = warden(
        state.path(),
        &["exec", "l", "--", loader, outside, "--version"],
    );
    let allowed = warden(state.path(), &["exec", "l", "--", "cat", "/etc/hostname"]);
    let _ = warden(state.path(), &["stop", "l"]);
    assert!(
        !stdout(&out).contains("git version"),
        "the loader ran a program the allowlist does not name: {}",
        stdout(&out)
    );
    assert_eq!(code(&out), 126, "{} {}", stdout(&out), stderr(&out));
    assert_eq!(code(&allowed), 0, "{}", stderr(&allowed));
}

#[test]
fn an_allowed_file_the_sandbox_can_write_is_refused_before_anything_runs() {
    if !host_ready() {
        return;
    }
    for r in Runner::all() {
        let ws = workspace(&r);
        let w = ["--workspace", ws.str()];
        // The review's attack: bash, cat and a workspace script allowed;
        // the script overwritten with another binary ran under its name.
        let marker = ws.path().join("overwritten");
        let o = r.run(
            &["bash", "cat", "/workspace/hello.sh"],
            &w,
            &[
                "bash",
                "-c",
                "cat /bin/ls > /workspace/hello.sh && touch /workspace/overwritten; /workspace/hello.sh /",
            ],
        );
        assert_ne!(code(&o), 0, "{}: {o:?}", r.name);
        assert!(
            stderr(&o).contains("which the sandbox can write"),
            "{}: {}",
            r.name,
            stderr(&o)
        );
        assert!(!marker.exists(), "{}: the command ran", r.name);
        // A directory or a glob of the workspace likewise: what the sandbox
        // wrote there would be allowed at the next start.
        for entry in ["/workspace", "/workspace/*.sh"] {
            let o = r.run(
                &["sh", entry],
                &w,
                &["sh", "-c", "touch /workspace/overwritten"],
            );
            assert_ne!(code(&o), 0, "{}: {entry}: {o:?}", r.name);
            assert!(!marker.exists(), "{}: {entry}: the command ran", r.name);
        }
    }
}

#[test]
fn an_allowlist_under_gvisor_or_a_vm_is_refused_at_every_door_naming_the_isolation() {
    // The command line: the flag, and the isolation by its own flag.
    for iso in ["gvisor", "vm"] {
        let o = Command::new(warden_bin())
            .args(["run", "--no-tty", "--isolation", iso])
            .args(["--allow-exec", "sh", "--", "true"])
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        let e = stderr(&o);
        assert_eq!(code(&o), 125, "{iso}: {e}");
        assert!(
            e.contains("--allow-exec")
                && e.contains(&format!("--isolation {iso}"))
                && e.contains("--isolation process"),
            "{iso}: {e}"
        );
    }
    // A profile: its file, line and column.
    let dir = TempDir::new("allow-exec-isolation");
    let profile = dir.path().join("p.yaml");
    std::fs::write(
        &profile,
        "isolation: gvisor\nprocess:\n  allow_exec: [sh]\n",
    )
    .unwrap();
    let o = Command::new(warden_bin())
        .args(["run", "--no-tty", "--profile", profile.to_str().unwrap()])
        .args(["--", "true"])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let e = stderr(&o);
    assert_eq!(code(&o), 125, "{e}");
    assert!(
        e.contains(&format!("{}:3:", profile.display()))
            && e.contains("process.allow_exec")
            && e.contains("gVisor"),
        "{e}"
    );
    // The API: its JSON pointer and reason code, and nothing created.
    if !crate::common::daemon::curl_available() {
        return skip("no curl to speak to the daemon");
    }
    let d = crate::common::daemon::Daemon::start(dir.path(), false);
    for iso in ["gvisor", "vm"] {
        let body = serde_json::json!({ "name": format!("ae-{iso}"),
            "spec": { "isolation": iso, "process": { "allow_exec": ["sh"] } } });
        let (status, r) =
            crate::common::daemon::call(&d, "POST", "/v1/sandboxes", Some(&body.to_string()), None);
        assert!(status == 400 || status == 422, "{iso}: {status} {r}");
        assert!(
            r.contains("/process/allow_exec")
                && r.contains("exec_rules_need_process")
                && r.contains(&format!("/isolation {iso}")),
            "{iso}: {r}"
        );
    }
    let (_, list) = crate::common::daemon::call(&d, "GET", "/v1/sandboxes", None, None);
    assert!(
        !list.contains("ae-"),
        "a refused sandbox was created: {list}"
    );
}
