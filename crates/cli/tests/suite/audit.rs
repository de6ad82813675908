//! The audit log of real runs: written outside the sandbox, verified
//! intact, and every kind of tampering found and named.

use crate::common;
use crate::common::*;
use std::path::Path;
use std::process::{Command, Stdio};

fn warden(args: &[&str]) -> std::process::Output {
    Command::new(warden_bin())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn lines(p: &Path) -> Vec<String> {
    std::fs::read_to_string(p)
        .unwrap()
        .lines()
        .map(String::from)
        .collect()
}

fn rewrite(p: &Path, l: &[String]) {
    std::fs::write(p, l.join("\n") + "\n").unwrap();
}

/// A log of two runs (eight records or more) at `dir/NAME`.
fn two_runs(dir: &TempDir, name: &str) -> std::path::PathBuf {
    let log = dir.path().join(name);
    for _ in 0..2 {
        let out = warden(&[
            "run",
            "--no-tty",
            "--audit-log",
            log.to_str().unwrap(),
            "--",
            "true",
        ]);
        assert!(out.status.success(), "{}", stderr(&out));
    }
    log
}

#[test]
fn a_run_leaves_an_intact_log_of_what_happened() {
    let dir = TempDir::new("audit-ok");
    let log = dir.path().join("run.jsonl");
    let out = warden(&[
        "run",
        "--no-tty",
        "--audit-log",
        log.to_str().unwrap(),
        "--allow-domain",
        "allowed.test",
        "--",
        "sh",
        "-c",
        "curl -s -m 3 https://denied.test/ >/dev/null; exit 3",
    ]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let verify = warden(&["audit", "verify", log.to_str().unwrap()]);
    assert!(verify.status.success(), "{}", stdout(&verify));
    assert!(stdout(&verify).contains("intact"), "{}", stdout(&verify));
    let events: Vec<String> = lines(&log)
        .iter()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            v["event"].as_str().unwrap().to_string()
        })
        .collect();
    assert_eq!(events.first().map(String::as_str), Some("created"));
    assert_eq!(events.last().map(String::as_str), Some("exited"));
    assert!(events.iter().any(|e| e == "connection"), "{events:?}");
    let denied = warden(&["audit", "show", "--denied", log.to_str().unwrap()]);
    let text = stdout(&denied);
    assert!(
        text.contains("DENY") && text.contains("denied.test"),
        "{text}"
    );
    assert!(!text.contains("created"), "{text}");
    // Private to its owner.
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&log).unwrap().permissions().mode() & 0o777,
        0o600
    );
}

#[test]
fn every_kind_of_tampering_is_found_and_the_first_bad_record_named() {
    let dir = TempDir::new("audit-tamper");
    let check = |log: &Path, line: usize, why: &str| {
        let out = warden(&["audit", "verify", log.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
        let text = stdout(&out);
        assert!(
            text.contains(&format!("{}:{line}: TAMPERED", log.display())) && text.contains(why),
            "{text}"
        );
    };
    // Edit: a record's content changed.
    let log = two_runs(&dir, "edit.jsonl");
    let mut l = lines(&log);
    l[2] = l[2].replacen("\"ts_ms\":", "\"ts_ms\":1", 1);
    rewrite(&log, &l);
    check(&log, 3, "edited");
    // Delete: a record removed from the middle.
    let log = two_runs(&dir, "delete.jsonl");
    let mut l = lines(&log);
    l.remove(1);
    rewrite(&log, &l);
    check(&log, 2, "removed");
    // Reorder: two records swapped.
    let log = two_runs(&dir, "reorder.jsonl");
    let mut l = lines(&log);
    l.swap(2, 3);
    rewrite(&log, &l);
    check(&log, 3, "reordered");
    // Truncate, then append: warden refuses to chain onto the cut, runs
    // nothing, and verify names the cut.
    let log = two_runs(&dir, "truncate.jsonl");
    let l = lines(&log);
    rewrite(&log, &l[..3]);
    let marker = dir.path().join("ran");
    let out = warden(&[
        "run",
        "--no-tty",
        "--rw",
        dir.path().to_str().unwrap(),
        "--audit-log",
        log.to_str().unwrap(),
        "--",
        "touch",
        marker.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(125));
    assert!(stderr(&out).contains("truncated"), "{}", stderr(&out));
    assert!(!marker.exists(), "the command ran");
    check(&log, 4, "cut from the end");
}

#[test]
fn the_sandbox_cannot_reach_its_own_audit_log() {
    let dir = TempDir::new("audit-reach");
    let log = dir.path().join("run.jsonl");
    let out = warden(&[
        "run",
        "--no-tty",
        "--audit-log",
        log.to_str().unwrap(),
        "--",
        "sh",
        "-c",
        &format!(
            "cat {0} 2>/dev/null && echo READ; echo x >> {0} 2>/dev/null && echo WROTE; true",
            log.display()
        ),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!stdout(&out).contains("READ"), "{}", stdout(&out));
    assert!(!stdout(&out).contains("WROTE"), "{}", stdout(&out));
    let verify = warden(&["audit", "verify", log.to_str().unwrap()]);
    assert!(verify.status.success(), "{}", stdout(&verify));
}

#[test]
fn bad_audit_arguments_get_a_clear_error() {
    let out = warden(&["audit", "show", "--since", "yesterday-ish", "/nonexistent"]);
    assert_eq!(out.status.code(), Some(125));
    assert!(stderr(&out).contains("--since"), "{}", stderr(&out));
    let out = warden(&["audit", "verify", "/nonexistent/log.jsonl"]);
    assert_eq!(out.status.code(), Some(125));
    assert!(
        stderr(&out).contains("cannot open audit log /nonexistent/log.jsonl"),
        "{}",
        stderr(&out)
    );
}

/// The (path, body) of every request a test collector received.
type Received = std::sync::Arc<std::sync::Mutex<Vec<(String, String)>>>;

/// A one-endpoint HTTP server that keeps the bodies POSTed to it.
fn collector() -> (u16, Received) {
    use std::io::{BufRead, BufReader, Read, Write};
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let s = seen.clone();
    std::thread::spawn(move || {
        for conn in l.incoming().flatten() {
            let mut r = BufReader::new(conn);
            let mut line = String::new();
            let _ = r.read_line(&mut line);
            let path = line.split_whitespace().nth(1).unwrap_or("").to_string();
            let mut len = 0usize;
            loop {
                let mut h = String::new();
                if r.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
                    break;
                }
                if let Some(v) = h.to_ascii_lowercase().strip_prefix("content-length:") {
                    len = v.trim().parse().unwrap_or(0);
                }
            }
            let mut body = vec![0u8; len];
            let _ = r.read_exact(&mut body);
            s.lock()
                .unwrap()
                .push((path, String::from_utf8_lossy(&body).into_owned()));
            let _ = r
                .get_mut()
                .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}");
        }
    });
    (port, seen)
}

/// `warden run true` (no audit log) sending its events to the collector
/// at `127.0.0.1:PORT`.
fn run_true_exporting_to(port: u16) -> std::process::Output {
    warden(&[
        "run",
        "--no-tty",
        "--no-audit-log",
        "--otlp-endpoint",
        &format!("http://127.0.0.1:{port}"),
        "--",
        "true",
    ])
}

#[test]
fn events_reach_an_opentelemetry_collector() {
    let (port, seen) = collector();
    let out = run_true_exporting_to(port);
    assert!(out.status.success(), "{}", stderr(&out));
    let seen = seen.lock().unwrap().clone();
    assert!(!seen.is_empty(), "nothing reached the collector");
    assert!(seen.iter().all(|(path, _)| path == "/v1/logs"), "{seen:?}");
    let all: String = seen.iter().map(|(_, b)| b.as_str()).collect();
    let v: serde_json::Value = serde_json::from_str(&seen[0].1).unwrap();
    assert!(
        v["resourceLogs"][0]["scopeLogs"][0]["logRecords"].is_array(),
        "{v}"
    );
    for event in ["created", "started", "exited"] {
        assert!(
            all.contains(&format!("\"stringValue\":\"{event}\"")),
            "{event} missing: {all}"
        );
    }
    // A bad endpoint is refused before anything runs.
    let out = warden(&["run", "--otlp-endpoint", "collector:4318", "--", "true"]);
    assert_eq!(out.status.code(), Some(125));
    assert!(stderr(&out).contains("http:// URL"), "{}", stderr(&out));
}

#[test]
fn a_collector_that_does_not_answer_is_said_once_and_the_run_goes_on() {
    // A port nothing listens on (bound, then closed).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let out = run_true_exporting_to(port);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        stderr(&out)
            .matches("warden: warning: cannot send events to")
            .count(),
        1,
        "{}",
        stderr(&out)
    );
    // Asked to be quiet, it is.
    let out = Command::new(warden_bin())
        .args(["run", "--no-tty", "--no-audit-log", "--otlp-endpoint"])
        .arg(format!("http://127.0.0.1:{port}"))
        .args(["--", "true"])
        .env("WARDEN_LOG", "off")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(!stderr(&out).contains("cannot send"), "{}", stderr(&out));
}

#[test]
fn prune_removes_only_old_logs_of_the_state_directory() {
    let state = TempDir::new("audit-prune");
    let run = |args: &[&str]| warden_at(state.path(), args);
    for _ in 0..2 {
        assert!(run(&["run", "--no-tty", "--", "true"]).status.success());
    }
    let dir = state.path().join("audit");
    let logs: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    assert_eq!(logs.len(), 2);
    // Age one of them by a week.
    let week_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(7 * 86400);
    std::fs::File::options()
        .append(true)
        .open(&logs[0])
        .unwrap()
        .set_modified(week_ago)
        .unwrap();
    let out = run(&["audit", "prune", "--older-than", "3d"]);
    assert!(
        stdout(&out).contains("removed 1 audit log"),
        "{}",
        stdout(&out)
    );
    assert!(!logs[0].exists());
    assert!(logs[1].exists());
    let out = run(&["audit", "prune", "--older-than", "soon"]);
    assert_eq!(out.status.code(), Some(125));
}

#[test]
fn a_profile_chooses_where_the_run_is_recorded() {
    let state = TempDir::new("audit-profile-state");
    let dir = TempDir::new("audit-profile");
    let profile = dir.path().join("p.yaml");
    std::fs::write(&profile, "name: p\naudit_log: logs/run.jsonl\n").unwrap();
    std::fs::create_dir_all(dir.path().join("logs")).unwrap();
    let run = |args: &[&str]| warden_at(state.path(), args);
    let p = profile.to_str().unwrap();
    let out = run(&["run", "--no-tty", "-P", p, "--", "true"]);
    assert!(out.status.success(), "{}", stderr(&out));
    // Relative to the profile's directory, not the state directory.
    let log = dir.path().join("logs/run.jsonl");
    assert!(ok_verify(&log), "no intact log at {}", log.display());
    assert!(!state.path().join("audit").exists());
    // The command line wins.
    let other = dir.path().join("other.jsonl");
    let out = run(&[
        "run",
        "--no-tty",
        "-P",
        p,
        "--audit-log",
        other.to_str().unwrap(),
        "--",
        "true",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(other.exists());
    // no_audit_log in a profile keeps none.
    std::fs::write(&profile, "name: p\nno_audit_log: true\n").unwrap();
    let out = run(&["run", "--no-tty", "-P", p, "--", "true"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!state.path().join("audit").exists());
}

fn ok_verify(log: &std::path::Path) -> bool {
    log.exists()
        && warden(&["audit", "verify", log.to_str().unwrap()])
            .status
            .success()
}

#[test]
fn a_workspace_whose_name_is_not_utf8_is_recorded_byte_for_byte_and_no_line_is_cut() {
    use std::os::unix::ffi::OsStrExt;
    let dir = TempDir::new("audit-bytes");
    // A directory name that is not UTF-8 (Latin-1 "café" and a stray 0xff).
    let ws = dir
        .path()
        .join(std::ffi::OsStr::from_bytes(b"caf\xe9-\xff"));
    std::fs::create_dir(&ws).unwrap();
    let log = dir.path().join("run.jsonl");
    let events = dir.path().join("events.jsonl");
    let out = Command::new(warden_bin())
        .args(["run", "--no-tty", "--audit-log"])
        .arg(&log)
        .arg("--json-events")
        .arg(&events)
        .arg("-w")
        .arg(&ws)
        .args(["--", "sh", "-c", "echo hi > seen"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(ws.join("seen").exists());
    let want: String = ws
        .as_os_str()
        .as_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    for file in [&log, &events] {
        let text = std::fs::read_to_string(file).unwrap();
        let records: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("a cut line ({e}): {l}")))
            .collect();
        let created = records
            .iter()
            .find(|r| r["event"] == "created")
            .unwrap_or_else(|| panic!("no created record in {}: {text}", file.display()));
        assert_eq!(created["workspace"]["hex"], want, "{created}");
        assert!(
            created["workspace"]["lossy"]
                .as_str()
                .unwrap()
                .ends_with("caf\u{fffd}-\u{fffd}"),
            "{created}"
        );
        assert!(records.iter().any(|r| r["event"] == "exited"), "{text}");
    }
    let verify = warden(&["audit", "verify", log.to_str().unwrap()]);
    assert!(verify.status.success(), "{}", stdout(&verify));
    let show = warden(&["audit", "show", log.to_str().unwrap()]);
    assert!(show.status.success(), "{}", stderr(&show));
    assert!(
        stdout(&show).contains("caf\u{fffd}-\u{fffd}"),
        "{}",
        stdout(&show)
    );
}

#[test]
fn an_event_that_cannot_be_written_fails_the_run_and_says_what_was_lost() {
    if !Path::new("/dev/full").exists() {
        skip("no /dev/full to make the event file refuse writes");
        return;
    }
    // /dev/full opens for appending and refuses every write (ENOSPC), as
    // a full disk does.
    let out = warden(&[
        "run",
        "--no-tty",
        "--no-audit-log",
        "--json-events",
        "/dev/full",
        "--",
        "true",
    ]);
    assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("cannot write the created event to /dev/full"),
        "{err}"
    );
    // The first record is written before the command may start: it never
    // ran unrecorded.
    assert!(err.contains("nothing was started"), "{err}");
}

/// `audit show` finds a log the ways a person names one (the newest run,
/// a run's id, a named sandbox) and numbers each record as `verify` does.
#[test]
fn audit_show_finds_logs_by_last_run_id_and_sandbox_and_numbers_records_as_verify_does() {
    let state = TempDir::new("audit-show");
    let w = |args: &[&str]| common::warden(state.path(), args);
    ok(&w(&["run", "--no-tty", "--", "true"]));
    let last = ok(&w(&["audit", "show", "--last"]));
    assert!(last.starts_with("#0 "), "{last}");
    assert!(last.contains("created"), "{last}");
    let dir = state.path().join("warden/audit");
    let log = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .unwrap();
    let stem = log.file_stem().unwrap().to_str().unwrap().to_string();
    assert_eq!(ok(&w(&["audit", "show", &stem])), last);
    ok(&w(&["create", "named"]));
    let named = ok(&w(&["audit", "show", "named"]));
    assert!(named.starts_with("#0 "), "{named}");
    // The number show gives a record is the one verify names.
    let mut l = lines(&log);
    l[1] = l[1].replace("\"seq\":1", "\"seq\":7");
    rewrite(&log, &l);
    let verify = w(&["audit", "verify", log.to_str().unwrap()]);
    assert!(
        stdout(&verify).contains("TAMPERED at record #1"),
        "{}",
        stdout(&verify)
    );
    let out = w(&["audit", "show", "no-such-run"]);
    assert_eq!(code(&out), 125);
    assert!(stderr(&out).contains("audit list"), "{}", stderr(&out));
    ok(&w(&["rm", "named"]));
}

/// The audit log opens while the sandbox's root is built; a log that cannot
/// be opened then (a missing directory, another warden writing it) must
/// still stop the run before its command runs.
#[test]
fn a_run_whose_audit_log_cannot_be_opened_runs_nothing() {
    let dir = TempDir::new("audit-unopenable");
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let ran = |log: &Path| {
        let out = Command::new(warden_bin())
            .args(["run", "--no-tty", "--audit-log"])
            .arg(log)
            .arg("-w")
            .arg(&ws)
            .args(["--", "sh", "-c", "echo ran > ran"])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        (out.status.code(), stderr(&out), ws.join("ran").exists())
    };
    let missing = dir.path().join("no-such-dir").join("run.jsonl");
    let (code, err, did) = ran(&missing);
    assert_eq!(code, Some(125), "{err}");
    assert!(err.contains("nothing was started"), "{err}");
    assert!(
        err.contains(&format!("cannot open audit log {}", missing.display())),
        "{err}"
    );
    assert!(!did, "the command ran without its record");

    // Another writer holds the log (as a run in progress does).
    let log = dir.path().join("held.jsonl");
    let held = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log)
        .unwrap();
    held.lock().unwrap();
    let (code, err, did) = ran(&log);
    assert_eq!(code, Some(125), "{err}");
    assert!(err.contains("being written by another warden"), "{err}");
    assert!(!did, "the command ran without its record");
    drop(held);
    let (code, err, did) = ran(&log);
    assert_eq!(code, Some(0), "{err}");
    assert!(did);
    let verify = warden(&["audit", "verify", log.to_str().unwrap()]);
    assert!(verify.status.success(), "{}", stdout(&verify));
}

#[test]
fn audit_list_shows_the_newest_runs_first_and_filters_them() {
    let state = TempDir::new("audit-list");
    let run = |code: &str| {
        let o = common::warden(state.path(), &["run", "--no-tty", "--", "sh", "-c", code]);
        assert!(o.status.code().is_some(), "{}", stderr(&o));
    };
    run("exit 0");
    run("exit 3");
    run("echo newest");
    let list = |args: &[&str]| {
        let mut all = vec!["audit", "list"];
        all.extend_from_slice(args);
        ok(&common::warden(state.path(), &all))
    };
    let json = |text: String| -> Vec<serde_json::Value> {
        text.lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    };
    let all = json(list(&["--json"]));
    let commands: Vec<String> = all
        .iter()
        .map(|r| r["command"][2].as_str().unwrap().to_string())
        .collect();
    assert_eq!(commands, ["echo newest", "exit 3", "exit 0"], "{all:?}");
    assert!(all.iter().all(|r| r["denied"] == 0 && r["run"].is_string()));
    assert_eq!(all[1]["exit"], 3);

    let last = json(list(&["--json", "--last", "1"]));
    assert_eq!(last.len(), 1);
    assert_eq!(last[0]["command"][2], "echo newest");
    let failed = json(list(&["--json", "--failed"]));
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0]["exit"], 3);
    assert_eq!(json(list(&["--json", "--since", "1h"])).len(), 3);
    assert!(list(&["--since", "2999-01-01T00:00:00Z"]).is_empty());
    assert!(list(&["--denied"]).is_empty());
    let text = list(&[]);
    assert!(
        text.lines().next().unwrap().contains("echo newest"),
        "{text}"
    );

    let bad = common::warden(state.path(), &["audit", "list", "--since", "soon"]);
    assert!(!bad.status.success());
    assert!(
        stderr(&bad).contains("--since \"soon\""),
        "{}",
        stderr(&bad)
    );
}
