//! Outside review F5, in the process backend: a named sandbox's command
//! killed (its `--timeout`) while a process it started in a session of
//! its own runs on: that process ends with it, and the sandbox's other
//! commands go on. The command is made the subreaper of what it starts,
//! so nothing it starts leaves its tree while it runs, and a kill ends
//! the tree. Through the real binary; the marker a process writes to a
//! `--rw` directory every 100 ms must stop growing.

use crate::common::trees::{exec_timed, grows, size, Beside};
use crate::common::*;
use std::time::Duration;

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
    let beside = Beside::start(
        state.path(),
        rw.path().join("beside"),
        60,
        Duration::from_secs(10),
    );
    let script = DETACHED.replace("RW", rw.str());
    let (status, took, said) = exec_timed(state.path(), "2s", &script);
    let detached = rw.path().join("detached");
    assert!(size(&detached) > 0, "the writer never ran: {said}");
    // Before, the writer, reparented to the sandbox's init, wrote on.
    assert!(
        !grows(&detached, Duration::from_millis(1000)),
        "the writer runs on after its command's timeout (status {status} after {took:?}): {said}"
    );
    assert_eq!(status, 124, "{said}");
    assert!(
        beside.runs_on(Duration::from_millis(500)),
        "the second command was stopped with the first"
    );
    beside.ends_done();
}
