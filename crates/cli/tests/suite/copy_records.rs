//! Every snapshot and fork of a sandbox is in the sandbox's own audit
//! log, running or not: a running sandbox's supervisor holds its log, so
//! the record goes through it (over the control socket) and reaches its
//! live followers too; the chain still verifies. Through that socket only
//! a workspace action is recorded, naming the supervisor's own sandbox.
//! A copy whose record cannot be written is not kept.

use crate::common::daemon::*;
use crate::common::*;
use std::io::BufRead;
use std::path::Path;
use std::time::Duration;

/// Stops (and removes) the sandboxes even when the test fails half-way.
struct Cleanup<'a>(&'a Path, Vec<&'static str>);

impl Drop for Cleanup<'_> {
    fn drop(&mut self) {
        for n in &self.1 {
            let _ = warden(self.0, &["rm", "--force", n]);
        }
    }
}

/// The workspace records of sandbox `name`'s audit log: (action, name,
/// detail).
fn workspace_records(state: &Path, name: &str) -> Vec<(String, String, String)> {
    events(&sandbox_dir(state, name).join("audit.jsonl"))
        .iter()
        .filter(|e| e["event"] == "workspace")
        .map(|e| {
            let s = |k: &str| e[k].as_str().unwrap_or_default().to_string();
            (s("action"), s("name"), s("detail"))
        })
        .collect()
}

fn has(records: &[(String, String, String)], action: &str, detail: &str) -> bool {
    records
        .iter()
        .any(|(a, n, d)| a == action && n == "src" && d.contains(detail))
}

/// `warden audit verify` finds sandbox `name`'s chain intact.
fn verifies(state: &Path, name: &str) {
    let log = sandbox_dir(state, name).join("audit.jsonl");
    let out = warden(state, &["audit", "verify", log.to_str().unwrap()]);
    assert!(
        out.status.success() && stdout(&out).contains("intact"),
        "{} {}",
        stdout(&out),
        stderr(&out)
    );
}

#[test]
fn a_running_sandboxs_snapshot_and_fork_through_the_cli_are_in_its_log_and_its_followers_see_them()
{
    let state = TempDir::new("rec-cli");
    let s = state.path();
    let _c = Cleanup(s, vec!["src", "src-fork-1"]);
    ok(&warden(s, &["create", "src", "--start"]));
    // A follower, as `warden logs -f` is: it has read the log (its first
    // line is out) before the copies are made.
    let mut follower = std::process::Command::new(warden_bin())
        .args(["logs", "-f", "--json", "src"])
        .env("WARDEN_STATE_DIR", s.join("warden"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let out = follower.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let first = rx.recv_timeout(Duration::from_secs(20));
    assert!(first.is_ok(), "the follower printed nothing");

    ok(&warden(s, &["snapshots", "create", "src", "s1"]));
    ok(&warden(s, &["fork", "src", "--count", "1"]));
    // Written while it runs, by its supervisor: no stop came between.
    assert!(ok(&warden(s, &["ls"]))
        .lines()
        .any(|l| l.starts_with("src ") && l.contains("running")));
    let recs = workspace_records(s, "src");
    assert!(has(&recs, "snapshot", "saved as snapshot s1"), "{recs:?}");
    assert!(has(&recs, "fork", "forked into src-fork-1"), "{recs:?}");
    let mut seen = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !seen
        .iter()
        .any(|l: &String| l.contains("forked into src-fork-1"))
    {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match rx.recv_timeout(left) {
            Ok(l) => seen.push(l),
            Err(_) => break,
        }
    }
    let _ = follower.kill();
    let _ = follower.wait();
    assert!(
        seen.iter().any(|l| l.contains("saved as snapshot s1"))
            && seen.iter().any(|l| l.contains("forked into src-fork-1")),
        "the follower did not see the records: {seen:?}"
    );
    verifies(s, "src");
    assert!(ok(&warden(s, &["logs", "src"])).contains("saved as snapshot s1"));
}

#[test]
fn a_running_sandboxs_snapshot_and_fork_through_the_api_are_in_its_log() {
    if !curl_available() {
        return skip("curl is not installed");
    }
    let state = TempDir::new("rec-api");
    let s = state.path();
    let _c = Cleanup(s, vec!["src", "src-fork-1"]);
    let d = Daemon::start(s, false);
    let (st, b) = call(&d, "POST", "/v1/sandboxes", Some(r#"{"name":"src"}"#), None);
    assert_eq!(st, 201, "{b}");
    assert_eq!(json(&b)["state"], "running", "{b}");
    let (st, b) = call(
        &d,
        "POST",
        "/v1/sandboxes/src/snapshots",
        Some(r#"{"name":"s1"}"#),
        None,
    );
    assert_eq!(st, 201, "{b}");
    let (st, b) = call(&d, "POST", "/v1/sandboxes/src/fork", Some("{}"), None);
    assert_eq!(st, 201, "{b}");
    let recs = workspace_records(s, "src");
    assert!(has(&recs, "snapshot", "saved as snapshot s1"), "{recs:?}");
    assert!(has(&recs, "fork", "forked into src-fork-1"), "{recs:?}");
    let (_, b) = call(&d, "GET", "/v1/sandboxes/src", None, None);
    assert_eq!(json(&b)["state"], "running", "{b}");
    verifies(s, "src");
}

/// One raw request to the supervisor listening on `control`: its reply.
fn ask_raw(control: &Path, request: &str) -> String {
    use nix::sys::socket::{recv, send, MsgFlags};
    use std::os::fd::AsRawFd;
    let sock = crate::common::sockets::seqpacket_to(control);
    let mut buf = vec![0u8; 65536];
    send(
        sock.as_raw_fd(),
        br#"{"op":"hello","version":1}"#,
        MsgFlags::empty(),
    )
    .unwrap();
    let n = recv(sock.as_raw_fd(), &mut buf, MsgFlags::empty()).unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).contains("\"hello\""));
    send(sock.as_raw_fd(), request.as_bytes(), MsgFlags::empty()).unwrap();
    let n = recv(sock.as_raw_fd(), &mut buf, MsgFlags::empty()).unwrap();
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

#[test]
fn the_supervisor_records_only_workspace_actions_and_only_for_its_own_sandbox() {
    let state = TempDir::new("rec-raw");
    let s = state.path();
    let _c = Cleanup(s, vec!["src", "other"]);
    ok(&warden(s, &["create", "src", "--start"]));
    ok(&warden(s, &["create", "other"]));
    let control = sandbox_dir(s, "src").join("control.sock");
    let before = events(&sandbox_dir(s, "src").join("audit.jsonl")).len();
    // Another kind of event, dressed as a record: refused, nothing written.
    for forged in [
        r#"{"op":"record","action":"exited","paths":[],"detail":"forged-exit"}"#,
        r#"{"op":"record","action":"Snapshot","paths":[],"detail":"forged-case"}"#,
        r#"{"op":"record","action":"","paths":[],"detail":"forged-empty"}"#,
    ] {
        let reply = ask_raw(&control, forged);
        assert!(
            reply.contains(r#""op":"refused""#)
                && reply.contains(r#""code":"invalid""#)
                && reply.contains(r#""field":"/action""#),
            "{forged}: {reply}"
        );
    }
    // A record that names another sandbox names this one all the same.
    let reply = ask_raw(
        &control,
        r#"{"op":"record","action":"commit","name":"other","paths":["a.txt"],"detail":"named-other"}"#,
    );
    assert!(reply.contains(r#""op":"ok""#), "{reply}");
    let log = events(&sandbox_dir(s, "src").join("audit.jsonl"));
    let text = serde_json::to_string(&log).unwrap();
    assert!(!text.contains("forged-"), "a forged record was written");
    assert_eq!(log.len(), before + 1, "{text}");
    assert_eq!(log[before]["event"], "workspace");
    assert_eq!(log[before]["name"], "src");
    assert!(workspace_records(s, "other")
        .iter()
        .all(|(_, _, d)| d != "named-other"));
    verifies(s, "src");
}

#[test]
fn a_snapshot_or_fork_whose_record_cannot_be_written_is_not_kept() {
    let state = TempDir::new("rec-fail");
    let s = state.path();
    let _c = Cleanup(s, vec!["src", "src-fork-1"]);
    ok(&warden(s, &["create", "src"]));
    // A log whose last line is no record: no writer chains onto it.
    let log = sandbox_dir(s, "src").join("audit.jsonl");
    let mut f = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
    std::io::Write::write_all(&mut f, b"not a record\n").unwrap();
    drop(f);

    let out = warden(s, &["snapshots", "create", "src", "s1"]);
    assert_ne!(code(&out), 0, "{}", stdout(&out));
    assert!(
        stderr(&out).contains("nothing was kept of snapshot s1"),
        "{}",
        stderr(&out)
    );
    let list = ok(&warden(s, &["snapshots", "ls", "--json"]));
    assert!(!list.contains("\"s1\""), "{list}");

    let out = warden(s, &["fork", "src", "--count", "1"]);
    assert_ne!(code(&out), 0, "{}", stdout(&out));
    assert!(
        stderr(&out).contains("nothing was kept of the fork into src-fork-1"),
        "{}",
        stderr(&out)
    );
    assert!(!sandbox_dir(s, "src-fork-1").exists());

    // The API says it too, and keeps nothing either.
    if !curl_available() {
        return skip("curl is not installed");
    }
    let d = Daemon::start(s, false);
    let (st, b) = call(
        &d,
        "POST",
        "/v1/sandboxes/src/snapshots",
        Some(r#"{"name":"s2"}"#),
        None,
    );
    assert_eq!(st, 500, "{b}");
    assert!(b.contains("nothing was kept of snapshot s2"), "{b}");
    let (_, b) = call(&d, "GET", "/v1/snapshots", None, None);
    assert!(!b.contains("\"s2\""), "{b}");
    let (st, b) = call(&d, "POST", "/v1/sandboxes/src/fork", Some("{}"), None);
    assert_eq!(st, 500, "{b}");
    assert!(b.contains("nothing was kept of the fork"), "{b}");
    assert!(!sandbox_dir(s, "src-fork-1").exists());
}
