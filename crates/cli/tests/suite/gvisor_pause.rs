//! `warden pause` and `resume` of a gVisor sandbox: runsc and everything
//! it starts are in the sandbox's one cgroup, which the freezer stops and
//! lets go as it does a process sandbox's. A counter in a bind, read on
//! the host, stands still while paused and goes on after.

use crate::common::gvisor::gvisor_available;
use crate::common::*;
use std::path::Path;
use std::time::Duration;

fn count(ws: &Path) -> u64 {
    std::fs::read_to_string(ws.join("count"))
        .ok()
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or(0)
}

#[test]
fn a_paused_gvisor_sandbox_stands_still_and_goes_on_when_resumed() {
    if !gvisor_available() {
        return;
    }
    let state = TempDir::new("gvisor-pause");
    let ws = TempDir::new("gvisor-pause-ws");
    // Written through a read-write bind (a named sandbox's workspace is
    // an overlay whose layer the host sees only when it stops); the
    // sandbox's user is nobody, so the directory is open to it.
    let out = TempDir::new("gvisor-pause-out");
    for d in [ws.path(), out.path()] {
        std::fs::set_permissions(d, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    }
    let s = state.path();
    ok(&warden(
        s,
        &[
            "create",
            "g",
            "--isolation",
            "gvisor",
            "-w",
            ws.str(),
            "--rw",
            out.str(),
            "--start",
        ],
    ));
    ok(&warden(
        s,
        &[
            "exec",
            "-d",
            "g",
            "--",
            "sh",
            "-c",
            &format!(
                "i=0; while true; do i=$((i+1)); echo $i > {}/count; done",
                out.str()
            ),
        ],
    ));
    wait_until("the counter to count", Duration::from_secs(30), || {
        count(out.path()) > 0
    });
    ok(&warden(s, &["pause", "g"]));
    let ls = ok(&warden(s, &["ls"]));
    assert!(
        ls.lines()
            .any(|l| l.starts_with('g') && l.contains("paused")),
        "{ls}"
    );
    let at_pause = count(out.path());
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(
        count(out.path()),
        at_pause,
        "the counter counted while paused"
    );
    let refused = warden(s, &["exec", "g", "--", "true"]);
    assert_ne!(code(&refused), 0, "an exec ran in a paused sandbox");

    ok(&warden(s, &["resume", "g"]));
    wait_until("the counter to go on", Duration::from_secs(20), || {
        count(out.path()) > at_pause
    });
    ok(&warden(s, &["stop", "g"]));
}
