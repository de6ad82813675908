//! Outside review F5, in the process backend: a named sandbox's command
//! killed (its `--timeout`) while a process it started in a session of
//! its own runs on: that process ends with it, and the sandbox's other
//! commands go on. The command is made the subreaper of what it starts,
//! so nothing it starts leaves its tree while it runs, and a kill ends
//! the tree. Through the real binary; the marker a process writes to a
//! `--rw` directory every 100 ms must stop growing.

use crate::common::*;
use std::path::Path;
use std::time::{Duration, Instant};

fn size(file: &Path) -> u64 {
    std::fs::metadata(file).map(|m| m.len()).unwrap_or(0)
}

fn grows(file: &Path, within: Duration) -> bool {
    let before = size(file);
    std::thread::sleep(within);
    size(file) > before
}

/// A writer in a session of its own (a double fork, SIGTERM and SIGHUP
/// ignored), then a wait.
const DETACHED: &str = r#"( setsid nohup sh -c 'trap "" TERM HUP; while :; do echo x >> "$0/detached"; sleep 0.1; done' RW >/dev/null 2>&1 & ) ; sleep 100"#;

#[test]
fn a_detached_child_of_a_killed_command_ends_with_it_and_the_sandboxs_other_commands_go_on() {
    if !is_root() {
        skip("a named sandbox with a --rw directory needs root here");
        return;
    }
    let state = TempDir::new("exec-trees");
    let ws = TempDir::new("exec-trees-ws");
    let rw = TempDir::new("exec-trees-rw");
    ok(&warden(
        state.path(),
        &["create", "g", "--rw", rw.str(), "-w", ws.str()],
    ));
    ok(&warden(state.path(), &["start", "g"]));
    let _stop = Stopper(state.path(), "g");
    let beside = rw.path().join("beside");
    let other = std::process::Command::new(warden_bin())
        .args(["exec", "-T", "g", "--", "sh", "-c"])
        .arg(format!(
            "for i in $(seq 60); do echo x >> {}; sleep 0.1; done; echo done",
            beside.display()
        ))
        .env("WARDEN_STATE_DIR", state.path().join("warden"))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_until("the second command runs", Duration::from_secs(10), || {
        size(&beside) > 0
    });
    // Output to a file: a writer that outlived its command would hold a
    // pipe open for ever.
    let err = state.path().join("exec.err");
    let start = Instant::now();
    let status = std::process::Command::new(warden_bin())
        .args(["exec", "-T", "--timeout", "2s", "g", "--", "sh", "-c"])
        .arg(DETACHED.replace("RW", rw.str()))
        .env("WARDEN_STATE_DIR", state.path().join("warden"))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&err).unwrap())
        .status()
        .unwrap();
    let took = start.elapsed();
    let said = std::fs::read_to_string(&err).unwrap_or_default();
    let detached = rw.path().join("detached");
    assert!(size(&detached) > 0, "the writer never ran: {said}");
    // Before, the writer, reparented to the sandbox's init, wrote on.
    assert!(
        !grows(&detached, Duration::from_millis(1000)),
        "the writer runs on after its command's timeout ({status} after {took:?}): {said}"
    );
    assert_eq!(status.code(), Some(124), "{said}");
    assert!(
        grows(&beside, Duration::from_millis(500)),
        "the second command was stopped with the first"
    );
    let other = other.wait_with_output().unwrap();
    assert_eq!(stdout(&other), "done\n", "{}", stderr(&other));
}
