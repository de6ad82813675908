//! Refusals of the exec allowlist *inside* the sandbox (a shell the
//! allowlist lets run, running a program it does not) are events, from the
//! kernel's own audit records of Landlock's refusals (see
//! docs/allow-exec.md, "What is recorded"). Needs root and the kernel's
//! audit on; skipped with the reason otherwise.

use crate::common::*;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};

/// Whether this host can show the records: root, Landlock, audit on.
pub(super) fn host_ready() -> bool {
    if !is_root() {
        skip("not root: Landlock's audit records are read by root only (rootless gets no exec_refused event)");
        return false;
    }
    if landlock_abi() < 7 {
        skip("the kernel's Landlock is older than ABI 7: it logs no refusals");
        return false;
    }
    match warden_jail::landlock_audit::audit_enabled() {
        Ok(true) => true,
        Ok(false) => {
            skip("the kernel's audit is off (auditctl -e 1): refusals inside are not recorded");
            false
        }
        Err(e) => {
            skip(&format!("cannot ask the kernel's audit: {e}"));
            false
        }
    }
}

/// A read-only directory holding `evil`, a program that would leave
/// `ran` in the workspace, and a workspace to look for it in.
fn planted() -> (TempDir, TempDir) {
    let tools = TempDir::new("exec-refusal-tools");
    let ws = TempDir::new("exec-refusal-ws");
    for d in [tools.path(), ws.path()] {
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o777)).unwrap();
    }
    let evil = tools.path().join("evil");
    std::fs::write(&evil, b"#!/bin/sh\necho ran > /workspace/ran\n").unwrap();
    std::fs::set_permissions(&evil, std::fs::Permissions::from_mode(0o755)).unwrap();
    (tools, ws)
}

fn run(allow: &[&str], tools: &Path, ws: &Path, events: &Path, script: &str) -> Output {
    let mut c = Command::new(warden_bin());
    c.args(["run", "--no-tty"]);
    for a in allow {
        c.args(["--allow-exec", a]);
    }
    c.args(["--workspace", ws.to_str().unwrap()])
        .args(["--ro", tools.to_str().unwrap()])
        .args(["--json-events", events.to_str().unwrap()])
        .args(["--", "sh", "-c", script])
        .stdin(Stdio::null());
    c.output().expect("warden could not be started")
}

fn refused_events(events: &Path) -> Vec<serde_json::Value> {
    crate::common::events(events)
        .into_iter()
        .filter(|e| e["event"] == "exec_refused")
        .collect()
}

/// Refusals recorded: each `exec_refused`, and the `count` of each
/// `exec_refused_aggregated` (repeats within a window).
fn refusals_counted(events: &Path) -> u64 {
    crate::common::events(events)
        .iter()
        .map(|e| match e["event"].as_str() {
            Some("exec_refused") => 1,
            Some("exec_refused_aggregated") => e["count"].as_u64().unwrap_or(0),
            _ => 0,
        })
        .sum()
}

#[test]
fn a_program_refused_inside_the_sandbox_is_an_event_naming_it_and_the_rule_and_never_ran() {
    if !host_ready() {
        return;
    }
    let (tools, ws) = planted();
    let evil = tools.path().join("evil");
    let evil = evil.to_str().unwrap();
    let logs = TempDir::new("exec-refusal-events");
    let ev = logs.path().join("events.jsonl");
    let ev = ev.as_path();

    // The planted program works when allowed: it would leave its file.
    let o = run(&["sh", evil], tools.path(), ws.path(), ev, evil);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(
        ws.path().join("ran").exists(),
        "the planted program did not run even when allowed"
    );
    assert!(refused_events(ev).is_empty(), "{:?}", refused_events(ev));
    std::fs::remove_file(ws.path().join("ran")).unwrap();
    let _ = std::fs::remove_file(ev);

    // Only the shell allowed: the shell's exec of it is refused inside.
    let o = run(
        &["sh"],
        tools.path(),
        ws.path(),
        ev,
        &format!("{evil}; echo status=$?"),
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("status=126"),
        "{o:?}"
    );
    assert!(!ws.path().join("ran").exists(), "the refused program ran");
    let refused = refused_events(ev);
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(refused[0]["program"], evil);
    assert_eq!(refused[0]["rule"], "allow_exec");
    // The supervisor's judge answers an exec of a program off the list
    // before Landlock is asked (see `exec_refusal_records`).
    assert_eq!(refused[0]["by"], "allowlist");
}

#[test]
fn another_sandboxs_refusals_never_appear_among_this_sandboxs_events() {
    if !host_ready() {
        return;
    }
    let (tools, ws) = planted();
    let evil = tools.path().join("evil");
    let evil = evil.to_str().unwrap();
    let logs = TempDir::new("exec-refusal-events");
    let quiet_ev = logs.path().join("quiet.jsonl");
    let loud_ev = logs.path().join("loud.jsonl");
    // The quiet sandbox runs while the loud one is refused, many times.
    let mut quiet = Command::new(warden_bin());
    quiet
        .args([
            "run",
            "--no-tty",
            "--allow-exec",
            "sh",
            "--allow-exec",
            "sleep",
        ])
        .args(["--json-events", quiet_ev.to_str().unwrap()])
        .args(["--", "sh", "-c", "sleep 2"])
        .stdin(Stdio::null());
    let quiet = quiet.spawn().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    let loud = run(
        &["sh"],
        tools.path(),
        ws.path(),
        &loud_ev,
        &format!("for i in 1 2 3 4 5; do {evil}; done; true"),
    );
    assert_eq!(code(&loud), 0, "{}", stderr(&loud));
    let quiet = quiet.wait_with_output().unwrap();
    assert_eq!(code(&quiet), 0, "{}", stderr(&quiet));
    // Repeats of one program within a window are counted in one line.
    assert_eq!(
        refusals_counted(&loud_ev),
        5,
        "{:?}",
        crate::common::events(&loud_ev)
    );
    assert!(
        refused_events(&quiet_ev).is_empty(),
        "{:?}",
        refused_events(&quiet_ev)
    );
}

#[test]
fn a_system_program_refused_inside_is_an_event_whether_executed_opened_or_mapped_by_the_loader() {
    if !host_ready() {
        return;
    }
    let loader = "/lib64/ld-linux-x86-64.so.2";
    if !Path::new("/usr/bin/curl").exists() || !Path::new(loader).exists() {
        return skip("no /usr/bin/curl or x86-64 loader here");
    }
    let (tools, ws) = planted();
    let evil = tools.path().join("evil");
    let evil = evil.to_str().unwrap();
    let logs = TempDir::new("exec-refusal-events");
    let ev = logs.path().join("events.jsonl");
    // Each attempt prints its status; none may run. A failed redirection
    // of `exec` ends a shell, so it is tried in a subshell.
    let script = format!(
        "/usr/bin/curl --version; echo direct=$?; \
         (exec 3</usr/bin/curl); echo open=$?; \
         {loader} /usr/bin/curl --version; echo loader=$?; \
         exec 9<{evil}; /proc/self/fd/9; echo fd=$?; true"
    );
    let o = run(&["sh"], tools.path(), ws.path(), &ev, &script);
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(!out.contains("libcurl"), "curl ran: {out}");
    assert!(!ws.path().join("ran").exists(), "the planted program ran");
    for line in ["direct=126", "open=2", "loader=127", "fd=126"] {
        assert!(
            out.lines().any(|l| l == line),
            "{line} in {out:?} {}",
            stderr(&o)
        );
    }
    // The exec (by the supervisor's judge, before Landlock), the shell's
    // open of it, the loader's open of it (by Landlock): each recorded
    // naming the program (repeats within a window counted); and the
    // planted file run through its descriptor, named by its path.
    let all = crate::common::events(&ev);
    let named = |p: &str| {
        all.iter()
            .filter(|e| e["program"] == p && e["rule"] == "allow_exec")
            .map(|e| match e["event"].as_str() {
                Some("exec_refused") => 1,
                Some("exec_refused_aggregated") => e["count"].as_u64().unwrap_or(0),
                _ => 0,
            })
            .sum::<u64>()
    };
    assert!(named("/usr/bin/curl") >= 3, "{all:?}");
    assert_eq!(named(evil), 1, "{all:?}");
    let by = |p: &str, by: &str| {
        all.iter()
            .any(|e| e["event"] == "exec_refused" && e["program"] == p && e["by"] == by)
    };
    assert!(by("/usr/bin/curl", "allowlist"), "{all:?}");
    assert!(by("/usr/bin/curl", "landlock"), "{all:?}");
    assert!(by(evil, "allowlist"), "{all:?}");
}
