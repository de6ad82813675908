//! What the sandbox wrote itself and then tried to run, refused with 126
//! AND recorded: a binary it copied into its workspace, a script it wrote,
//! an ELF it put in a memfd. The kernel refuses each before Landlock is
//! asked (a `noexec` mount, a mode without execute bits, seccomp), so
//! Landlock's audit never saw them and no `exec_refused` event was
//! written; the supervisor now judges the sandbox's execs through the
//! seccomp notification it already listens to, and records each refusal
//! in the audit log, as root and rootless (the notification needs no
//! privilege, unlike the kernel's audit).

use super::allow_exec::{host_ready, Runner};
use crate::common::*;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// The allowlist: git and python3, and the shell and tools that copy,
/// write and run what the sandbox makes.
const ALLOW: &[&str] = &["git", "python3", "sh", "cp", "chmod"];

/// A python3 program that writes an ELF into a memfd and executes it: an
/// executable memfd first (refused when made), then one sealed against
/// execution (refused when executed). It exits 126, as a shell does, when
/// the exec is refused.
const MEMFD: &str = r#"
import os, sys
try:
    os.memfd_create("elf-exec", 0)
    print("executable memfd: created")
except PermissionError as e:
    print(f"executable memfd: refused {e.errno}")
fd = os.memfd_create("elf-sealed", 0x0008)
os.write(fd, open("/usr/bin/python3", "rb").read())
try:
    os.execve(fd, ["python3", "-c", "print('memfd RAN')"], {})
except PermissionError as e:
    print(f"sealed memfd: refused {e.errno}")
    sys.exit(126)
"#;

/// The sandbox's `exec_refused` events in the audit log at `log`:
/// (program, by), repeats of one program within a window counted once.
fn refused(log: &Path) -> Vec<(String, String)> {
    events(log)
        .into_iter()
        .filter(|e| e["event"] == "exec_refused" && e["rule"] == "allow_exec")
        .map(|e| {
            (
                e["program"].as_str().unwrap_or_default().to_string(),
                e["by"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

fn logs(r: &Runner) -> TempDir {
    let d = TempDir::new("exec-records-log");
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    r.own(d.path());
    d
}

fn workspace(r: &Runner) -> TempDir {
    let ws = TempDir::new("exec-records-ws");
    std::fs::set_permissions(ws.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    r.own(ws.path());
    ws
}

#[test]
fn a_copied_binary_a_written_script_and_a_memfd_elf_are_each_refused_with_126_and_recorded() {
    if !host_ready() {
        return;
    }
    for r in Runner::all() {
        let ws = workspace(&r);
        let d = logs(&r);
        // One log per run: a hash-chained log is never cut short.
        let log = d.path().join("copy.jsonl");
        let args = ["-w", ws.str(), "--audit-log", log.to_str().unwrap()];

        // A copy of an allowed program, made by the sandbox in its workspace.
        let copy = r.run(
            ALLOW,
            &args,
            &[
                "sh",
                "-c",
                "cp /usr/bin/python3 /workspace/py-copy && /workspace/py-copy -c \"print(42)\"",
            ],
        );
        assert_eq!(code(&copy), 126, "{}: {copy:?}", r.name);
        assert!(!stdout(&copy).contains("42"), "{}", r.name);
        assert!(
            refused(&log).contains(&("/workspace/py-copy".into(), "noexec".into())),
            "{}: {:?}",
            r.name,
            events(&log)
        );

        // The same copy as the command warden starts, in the next run.
        let log = d.path().join("command.jsonl");
        let args = ["-w", ws.str(), "--audit-log", log.to_str().unwrap()];
        let again = r.run(ALLOW, &args, &["/workspace/py-copy", "-c", "print(42)"]);
        assert_eq!(code(&again), 126, "{}: {again:?}", r.name);
        assert!(stderr(&again).contains("exec allowlist"), "{}", r.name);
        // Rootless, the init's own child cannot be read before its first
        // exec (its memory is still the host user namespace's): the
        // command's refusal is its `exited` event (126), as before.
        if r.name == "root" {
            assert!(
                refused(&log).contains(&("/workspace/py-copy".into(), "noexec".into())),
                "{}: {:?}",
                r.name,
                events(&log)
            );
        }

        // A script the sandbox wrote and made executable.
        let log = d.path().join("script.jsonl");
        let args = ["-w", ws.str(), "--audit-log", log.to_str().unwrap()];
        let script = r.run(
            ALLOW,
            &args,
            &[
                "sh",
                "-c",
                "printf '#!/bin/sh\\necho script RAN\\n' > /tmp/w.sh && chmod 755 /tmp/w.sh && /tmp/w.sh",
            ],
        );
        assert_eq!(code(&script), 126, "{}: {script:?}", r.name);
        assert!(!stdout(&script).contains("RAN"), "{}", r.name);
        assert!(
            refused(&log).contains(&("/tmp/w.sh".into(), "noexec".into())),
            "{}: {:?}",
            r.name,
            events(&log)
        );

        // An ELF in a memfd: made executable, or executed sealed.
        let log = d.path().join("memfd.jsonl");
        let args = ["-w", ws.str(), "--audit-log", log.to_str().unwrap()];
        let memfd = r.run(ALLOW, &args, &["python3", "-c", MEMFD]);
        let out = stdout(&memfd);
        assert_eq!(code(&memfd), 126, "{}: {memfd:?}", r.name);
        assert!(!out.contains("RAN"), "{}: {out}", r.name);
        for line in ["executable memfd: refused 13", "sealed memfd: refused 13"] {
            assert!(out.lines().any(|l| l == line), "{}: {line}: {out}", r.name);
        }
        let got = refused(&log);
        assert!(
            got.contains(&("/memfd:elf-exec".into(), "seccomp".into())),
            "{}: {got:?}",
            r.name
        );
        assert!(
            got.iter()
                .any(|(p, by)| p.starts_with("/memfd:elf-sealed") && by == "mode"),
            "{}: {got:?}",
            r.name
        );
    }
}

#[test]
fn a_program_off_the_list_and_a_script_whose_interpreter_is_off_it_are_recorded_rootless_too() {
    if !host_ready() {
        return;
    }
    let tools = TempDir::new("exec-records-tools");
    std::fs::set_permissions(tools.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let script = tools.path().join("tool.py");
    std::fs::write(&script, b"#!/usr/bin/env python3\nprint('tool RAN')\n").unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let script = script.to_str().unwrap();
    for r in Runner::all() {
        let ws = workspace(&r);
        let d = logs(&r);
        let log = d.path().join("audit.jsonl");
        let args = [
            "-w",
            ws.str(),
            "--ro",
            tools.str(),
            "--audit-log",
            log.to_str().unwrap(),
        ];
        let mut allow = ALLOW.to_vec();
        allow.push(script);
        let o = r.run(
            &allow,
            &args,
            &[
                "sh",
                "-c",
                &format!("/usr/bin/curl --version; echo curl=$?; {script}; echo tool=$?"),
            ],
        );
        let out = stdout(&o);
        assert_eq!(code(&o), 0, "{}: {o:?}", r.name);
        assert!(!out.contains("RAN") && !out.contains("libcurl"), "{out}");
        for line in ["curl=126", "tool=126"] {
            assert!(out.lines().any(|l| l == line), "{}: {line}: {out}", r.name);
        }
        // The script is allowed; `env`, its interpreter, is not: the
        // refusal names the interpreter, as the kernel's would.
        let got = refused(&log);
        for want in ["/usr/bin/curl", "/usr/bin/env"] {
            assert!(
                got.contains(&(want.into(), "allowlist".into())),
                "{}: {want}: {got:?}",
                r.name
            );
        }
    }
}

/// A python3 program that swaps a link between the allowed python3 and a
/// copy of it the sandbox wrote, while it runs the link again and again:
/// the judge looks at the file before the kernel resolves the path again.
/// It prints how often each ran and how often the exec was refused.
const SWAP: &str = r#"
import os, shutil, subprocess, threading
shutil.copy("/usr/bin/python3", "/tmp/py-copy")
os.chmod("/tmp/py-copy", 0o755)
real = os.path.realpath("/usr/bin/python3")
os.symlink(real, "/tmp/l")
stop = False
def flip():
    while not stop:
        for target in (real, "/tmp/py-copy"):
            try:
                os.symlink(target, "/tmp/l.new")
                os.replace("/tmp/l.new", "/tmp/l")
            except OSError:
                pass
threading.Thread(target=flip, daemon=True).start()
ran = {"allowed": 0, "copy": 0}
refused = 0
for _ in range(60):
    try:
        r = subprocess.run(["/tmp/l", "-S", "-c", "import os; print(os.readlink('/proc/self/exe'))"],
                           capture_output=True, text=True)
        ran["copy" if "py-copy" in r.stdout else "allowed"] += 1
    except PermissionError:
        refused += 1
stop = True
print(f"copy ran {ran['copy']}")
print(f"refused {refused}")
"#;

#[test]
fn a_link_swapped_between_the_judges_look_and_the_kernels_never_runs_the_written_copy() {
    if !host_ready() {
        return;
    }
    for r in Runner::all() {
        let ws = workspace(&r);
        let o = r.run(ALLOW, &["-w", ws.str()], &["python3", "-c", SWAP]);
        let out = stdout(&o);
        assert_eq!(code(&o), 0, "{}: {o:?}", r.name);
        // Whatever the judge saw, the kernel refuses the copy (its mount
        // is noexec): the judge's "continue" grants nothing.
        assert!(out.lines().any(|l| l == "copy ran 0"), "{}: {out}", r.name);
        assert!(!out.lines().any(|l| l == "refused 0"), "{}: {out}", r.name);
    }
}
