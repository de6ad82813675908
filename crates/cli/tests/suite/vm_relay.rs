//! The VM relay's bounds (review 14, finding 1) through the real command:
//! a guest that floods its output towards a caller that reads nothing is
//! held in the guest, not in warden's memory, and the stalled caller does
//! not hold up the sandbox's other requests or its timeout. The cut of the
//! stalled caller's output is the sandbox's event, in its audit log (whose
//! chain verifies), its `--json-events` and `warden logs`, naming that exec
//! and no other.
//!
//! Each test boots a VM (seconds under emulation): `#[ignore]`d, run with
//! `cargo test -p warden-cli --test all -- --ignored suite::vm_relay`.

use crate::common::vm::*;
use crate::common::*;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use std::os::fd::AsFd;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How much a process may grow while a flood waits on its caller: the
/// relay's queue (64 frames of at most 256 KiB) and a reader's buffer,
/// with room; before the bounds the growth was ~55 MB/s.
const GROWTH_MAX_KB: u64 = 64 * 1024;

/// How long the flood is watched (by the exec test; the run's is watched
/// until its timeout ends it).
const WATCH: Duration = Duration::from_secs(12);

/// The run's timeout, which counts from the command's start in the guest
/// (after the boot): the flood is watched until it ends the run, longer
/// than [`WATCH`].
const RUN_TIMEOUT: &str = "15s";

/// The least time the run's flood must have been watched for: before the
/// bounds its supervisor grew ~55 MB/s, past [`GROWTH_MAX_KB`] in about a
/// second.
const RUN_WATCH_MIN: Duration = Duration::from_secs(6);

/// A child this test started, killed (by its own PID) if the test fails.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn rss_kb(pid: i32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            let l = s.lines().find(|l| l.starts_with("VmRSS:"))?.to_string();
            l.split_whitespace().nth(1)?.parse::<u64>().ok()
        })
        .unwrap_or(0)
}

/// Wait until `child`'s stdout has something to read (the flood has
/// begun), reading none of it.
fn flood_begun(child: &Child, within: Duration) {
    let out = child.stdout.as_ref().expect("piped stdout");
    let mut fds = [PollFd::new(out.as_fd(), PollFlags::POLLIN)];
    let ms = u16::try_from(within.as_millis()).unwrap_or(u16::MAX);
    let n = poll(&mut fds, PollTimeout::from(ms)).expect("poll");
    assert!(n > 0, "the guest's output never began");
}

/// The largest growth of `pid`'s RSS over [`WATCH`] from its size now.
fn growth_kb(pid: i32) -> (u64, u64) {
    let base = rss_kb(pid);
    let mut peak = base;
    let until = Instant::now() + WATCH;
    while Instant::now() < until {
        peak = peak.max(rss_kb(pid));
        std::thread::sleep(Duration::from_millis(200));
    }
    (base, peak.saturating_sub(base))
}

fn warden_cmd(state: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(warden_bin());
    c.args(args)
        .env("WARDEN_STATE_DIR", state.join("warden"))
        .env("WARDEN_VM_DIR", vm_dir())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    c
}

#[test]
#[ignore = "boots a VM (slow under emulation): run with -- --ignored"]
fn a_vm_run_whose_reader_stops_holds_bounded_memory_and_still_ends_at_its_timeout() {
    if guest_release().is_none() {
        return;
    }
    let state = TempDir::new("vm-relay-run");
    // `warden run ... | sleep`: stdout a pipe nobody reads.
    let child = warden_cmd(
        state.path(),
        &[
            "run",
            "--isolation",
            "vm",
            "--no-tty",
            "--timeout",
            RUN_TIMEOUT,
            "--",
            "sh",
            "-c",
            "head -c 3000000000 /dev/zero",
        ],
    )
    .spawn()
    .expect("warden run");
    let mut child = Reaped(child);
    let started = Instant::now();
    flood_begun(&child.0, Duration::from_secs(90));
    // Watched from the flood's start until the timeout ends the run: its
    // writes wait within the sandbox's time.
    let pid = child.0.id() as i32;
    let (watched, base) = (Instant::now(), rss_kb(pid));
    let mut peak = base;
    let deadline = started + Duration::from_secs(120);
    let status = loop {
        if let Some(s) = child.0.try_wait().expect("wait") {
            break s;
        }
        peak = peak.max(rss_kb(pid));
        assert!(
            Instant::now() < deadline,
            "warden run outlived its timeout while its reader stalled"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let (watched, grew) = (watched.elapsed(), peak.saturating_sub(base));
    eprintln!("warden run: {base} KiB, grew {grew} KiB over {watched:?} until its timeout");
    assert!(
        grew < GROWTH_MAX_KB,
        "warden run grew {grew} KiB while its reader read nothing"
    );
    assert!(
        watched >= RUN_WATCH_MIN,
        "the flood was watched for {watched:?} only, of a {RUN_TIMEOUT} timeout"
    );
    assert!(!status.success(), "a timed-out run succeeded");
}

#[test]
#[ignore = "boots a VM (slow under emulation): run with -- --ignored"]
fn an_exec_whose_caller_stops_reading_holds_bounded_memory_and_another_exec_answers_meanwhile() {
    if guest_release().is_none() {
        return;
    }
    let state = TempDir::new("vm-relay-exec");
    let s = state.path();
    let _stop = VmStopper(s, "box");
    let json_events = s.join("events.jsonl");
    ok(&vm_warden(
        s,
        &[
            "create",
            "--isolation",
            "vm",
            "--json-events",
            json_events.to_str().unwrap(),
            "box",
        ],
        None,
    ));
    ok(&vm_warden(s, &["start", "box"], None));
    let supervisor = supervisor_pid(s, "box");
    // `warden exec box -- flood | sleep`.
    let flood = warden_cmd(
        s,
        &[
            "exec",
            "box",
            "--",
            "sh",
            "-c",
            "head -c 2000000000 /dev/zero",
        ],
    )
    .spawn()
    .expect("warden exec");
    let flood = Reaped(flood);
    flood_begun(&flood.0, Duration::from_secs(60));
    let (base, grew) = growth_kb(supervisor);
    eprintln!("supervisor: {base} KiB, grew {grew} KiB over {WATCH:?}");
    assert!(
        grew < GROWTH_MAX_KB,
        "the supervisor grew {grew} KiB while a caller read nothing"
    );
    // The stalled caller holds up nothing else.
    let asked = Instant::now();
    let mut other = Reaped(
        warden_cmd(s, &["exec", "box", "--", "echo", "during-stall"])
            .spawn()
            .expect("warden exec"),
    );
    loop {
        if other.0.try_wait().expect("wait").is_some() {
            break;
        }
        assert!(
            asked.elapsed() < Duration::from_secs(20),
            "another exec did not answer while a caller stalled"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut out = String::new();
    if let Some(mut o) = other.0.stdout.take() {
        use std::io::Read;
        let _ = o.read_to_string(&mut out);
    }
    eprintln!("the other exec answered in {:?}", asked.elapsed());
    assert_eq!(out.trim(), "during-stall");
    output_cut_is_recorded(s, &json_events);
}

/// The exec whose argv is `argv`, by its `exec_started` event.
fn exec_of(events: &[serde_json::Value], argv: &[&str]) -> Option<u64> {
    events
        .iter()
        .find(|e| e["event"] == "exec_started" && e["argv"] == serde_json::json!(argv))
        .and_then(|e| e["exec"].as_u64())
}

/// The flood's caller took nothing for 5 s: its exec's output was cut,
/// and the cut is an event of the sandbox naming that exec (and no other
/// exec is said cut), in the hash-chained audit log, the `--json-events`
/// file and `warden logs`.
fn output_cut_is_recorded(s: &Path, json_events: &Path) {
    let audit = sandbox_dir(s, "box").join("audit.jsonl");
    let cuts = |events: &[serde_json::Value]| -> Vec<u64> {
        events
            .iter()
            .filter(|e| e["event"] == "exec_output_cut")
            .filter_map(|e| e["exec"].as_u64())
            .collect()
    };
    // The cut is made within 5 s of the caller's pipe filling, long past.
    wait_until("the cut in the audit log", Duration::from_secs(20), || {
        !cuts(&events(&audit)).is_empty()
    });
    let logged = events(&audit);
    let flood = exec_of(&logged, &["sh", "-c", "head -c 2000000000 /dev/zero"])
        .expect("the flood's exec_started in the audit log");
    let other = exec_of(&logged, &["echo", "during-stall"])
        .expect("the other exec's exec_started in the audit log");
    assert_eq!(cuts(&logged), vec![flood], "{logged:#?}");
    let cut = logged
        .iter()
        .find(|e| e["event"] == "exec_output_cut")
        .expect("the cut");
    assert_eq!(cut["sandbox"], "box", "{cut}");
    assert_eq!(cut["stalled_ms"], 5000, "{cut}");
    assert!(
        logged
            .iter()
            .any(|e| e["event"] == "exec_exited" && e["exec"] == other),
        "the other exec's end is recorded: {logged:#?}"
    );
    // Stopped, its log is whole and its chain verifies with the cut in it.
    ok(&vm_warden(s, &["stop", "--time", "1s", "box"], None));
    let verify = ok(&vm_warden(
        s,
        &["audit", "verify", audit.to_str().unwrap()],
        None,
    ));
    assert!(
        verify.contains(": intact, ") && verify.contains("ending where its head file says"),
        "{verify}"
    );
    assert_eq!(cuts(&events(&audit)), vec![flood]);
    assert_eq!(cuts(&events(json_events)), vec![flood]);
    let said = ok(&vm_warden(s, &["logs", "box"], None));
    assert!(
        said.contains(&format!(
            "exec {flood} OUTPUT CUT: its caller took nothing of it for 5 s"
        )),
        "{said}"
    );
}
