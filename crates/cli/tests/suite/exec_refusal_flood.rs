//! A sandbox that tries refused programs in a loop: each try is one record
//! of the kernel's, and the sandbox chooses how many. Before, each became
//! a line of the log, with no aggregation and no budget: 60 MB of log in
//! 35 s from one interpreter allowed. Now the first refusal of each program
//! in a window is written and the rest counted, and past the log's budget
//! refusals are only counted. Needs root and the kernel's audit on.

use super::exec_refusal_events::host_ready;
use crate::common::*;
use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};

fn tools(links: usize) -> TempDir {
    let tools = TempDir::new("exec-flood-tools");
    std::fs::set_permissions(tools.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let evil = tools.path().join("evil");
    std::fs::write(&evil, b"#!/bin/sh\necho ran\n").unwrap();
    std::fs::set_permissions(&evil, std::fs::Permissions::from_mode(0o755)).unwrap();
    // Hard links: each a program of its own name to the kernel's record.
    for i in 0..links {
        std::fs::hard_link(&evil, tools.path().join(format!("p{i}"))).unwrap();
    }
    tools
}

/// Run `script` with `sh` allowed and `tools` read-only: its output, the
/// log's events, and the directory holding the log (`audit.jsonl`).
fn flood(
    tools: &TempDir,
    budget: &str,
    script: &str,
) -> (std::process::Output, Vec<serde_json::Value>, TempDir) {
    let dir = TempDir::new("exec-flood");
    let log = dir.path().join("audit.jsonl");
    let out = Command::new(warden_bin())
        .args(["run", "--no-tty", "--allow-exec", "sh"])
        .args([
            "--audit-log",
            log.to_str().unwrap(),
            "--audit-budget",
            budget,
        ])
        .args(["--ro", tools.str(), "--", "sh", "-c", script])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let size = std::fs::metadata(&log).unwrap().len();
    eprintln!("the log took {size} bytes");
    let events = events(&log);
    (out, events, dir)
}

fn counted(events: &[serde_json::Value], kind: &str) -> u64 {
    events
        .iter()
        .filter(|e| e["event"] == kind)
        .filter_map(|e| e["count"].as_u64())
        .sum()
}

#[test]
fn a_program_refused_in_a_loop_is_written_once_per_window_and_the_rest_counted() {
    if !host_ready() {
        return;
    }
    let t = tools(0);
    let script = format!(
        "i=0; while [ $i -lt 1500 ]; do {}/evil 2>/dev/null; i=$((i+1)); done; echo done",
        t.str()
    );
    let (out, events, _dir) = flood(&t, "32M", &script);
    assert!(stdout(&out).contains("done"), "{}", stderr(&out));
    assert!(!stdout(&out).contains("ran"), "a refused program ran");
    let lines = events
        .iter()
        .filter(|e| e["event"] == "exec_refused")
        .count() as u64;
    let more = counted(&events, "exec_refused_aggregated");
    eprintln!("{lines} lines and {more} counted");
    // One line per window of about a second (a loaded machine's loop takes
    // longer, never 1,500 seconds), the rest counted; the kernel's audit
    // may drop records of a flood, so not every try need arrive.
    assert!((1..=120).contains(&lines), "{lines} lines of refusals");
    assert!(more > 0, "no count of the repeats");
    assert!(lines + more <= 1500);
}

#[test]
fn refused_programs_past_the_logs_budget_are_only_counted() {
    if !host_ready() {
        return;
    }
    let t = tools(1200);
    let script = format!(
        "for p in {}/p*; do $p 2>/dev/null; done; echo done",
        t.str()
    );
    let (out, events, dir) = flood(&t, "16K", &script);
    assert!(stdout(&out).contains("done"), "{}", stderr(&out));
    let kinds: Vec<&str> = events.iter().filter_map(|e| e["event"].as_str()).collect();
    assert!(kinds.contains(&"exited"), "the end is in the log");
    let over: u64 = events
        .iter()
        .filter(|e| e["event"] == "events_over_budget" && e["of"] == "exec_refused")
        .filter_map(|e| e["count"].as_u64())
        .sum();
    let lines = kinds.iter().filter(|k| **k == "exec_refused").count();
    eprintln!("{lines} lines, {over} counted past the budget");
    assert!(over > 0, "no count of refusals past the budget: {kinds:?}");
    // 16K of lines of about 250 bytes: far fewer lines than programs.
    assert!(lines < 200, "{lines} lines past a budget of 16K");
    let verify = Command::new(warden_bin())
        .args(["audit", "verify"])
        .arg(dir.path().join("audit.jsonl"))
        .output()
        .unwrap();
    assert!(verify.status.success(), "{}", stdout(&verify));
}
