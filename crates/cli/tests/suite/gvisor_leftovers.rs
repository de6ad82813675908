//! Nothing of a gVisor sandbox outlives its supervisor: `runsc run`, its
//! sandbox (gVisor's kernel) and its file server die with the warden
//! process that started them, however that process ends (SIGKILL, SIGTERM,
//! SIGHUP; a named sandbox's supervisor killed), well before the
//! sandbox's `--timeout`, which only that process kept; and the bundle it
//! left in the state directory is swept by the next gVisor start. Real
//! runsc, real signals; runsc's processes are found by the test's own
//! state directory in their command lines. Skipped, with the reason,
//! where runsc cannot run a sandbox here.

use crate::common::gvisor::{gvisor_available, start_gvisor};
use crate::common::*;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// runsc's processes of the sandboxes kept under `state`: every one is
/// given its root (`--root=STATE/gvisor/...`) on its command line.
fn runsc_of(state: &Path) -> Vec<i32> {
    let marker = state.join("warden/gvisor").display().to_string();
    pids_with_marker(&marker)
        .into_iter()
        .filter(|p| {
            std::fs::read(format!("/proc/{p}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains("runsc"))
        })
        .collect()
}

/// Wait until none of runsc's processes of `state` is left, for at most
/// `within`; those left after it.
fn gone_within(state: &Path, within: Duration) -> Vec<i32> {
    let deadline = Instant::now() + within;
    loop {
        let left = runsc_of(state);
        if left.is_empty() || Instant::now() >= deadline {
            return left;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Kill whatever a failed test left, so that it does not outlive it.
fn kill_all(pids: &[i32]) {
    for p in pids {
        // SAFETY: kill(2) on PIDs this test found by its own marker.
        unsafe {
            libc::kill(*p, libc::SIGKILL);
        }
    }
}

/// The bundles of gVisor sandboxes left in the state directory.
fn bundles(state: &Path) -> Vec<String> {
    std::fs::read_dir(state.join("warden/gvisor"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect()
}

#[test]
fn a_gvisor_sandbox_dies_with_warden_run_however_it_is_killed_and_its_bundle_is_swept_next_time() {
    if !gvisor_available() {
        return;
    }
    for (signal, name) in [
        (libc::SIGKILL, "KILL"),
        (libc::SIGTERM, "TERM"),
        (libc::SIGHUP, "HUP"),
    ] {
        let state = TempDir::new(&format!("gvisor-orphan-{name}"));
        let mut run = Command::new(warden_bin())
            .args(["run", "--no-tty", "--isolation", "gvisor"])
            .args(["--timeout", "300s", "--", "sh", "-c", "sleep 600"])
            .env("WARDEN_STATE_DIR", state.path().join("warden"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // The sandbox runs: runsc's sandbox and file server are up.
        wait_until("runsc's sandbox to run", Duration::from_secs(60), || {
            runsc_of(state.path()).len() >= 3
        });
        // SAFETY: kill(2) on the child this test started.
        unsafe {
            libc::kill(run.id() as i32, signal);
        }
        let _ = run.wait();
        let left = gone_within(state.path(), Duration::from_secs(15));
        kill_all(&left);
        assert!(
            left.is_empty(),
            "SIG{name} to `warden run`: runsc's processes {left:?} outlived it"
        );
        assert!(
            !bundles(state.path()).is_empty(),
            "SIG{name}: the killed run left no bundle to sweep (the test proves nothing)"
        );
        // The next gVisor start sweeps the dead run's bundle and state.
        let out = Command::new(warden_bin())
            .args(["run", "--no-tty", "--isolation", "gvisor", "--", "true"])
            .env("WARDEN_STATE_DIR", state.path().join("warden"))
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        let left = bundles(state.path());
        assert!(
            left.is_empty(),
            "SIG{name}: the dead run's bundle was not swept: {left:?}"
        );
    }
}

#[test]
fn a_named_gvisor_sandbox_dies_with_its_killed_supervisor_long_before_its_timeout() {
    if !gvisor_available() {
        return;
    }
    let state = TempDir::new("gvisor-orphan-named");
    let ws = TempDir::new("gvisor-orphan-named-ws");
    start_gvisor(state.path(), "g", &ws, &["--timeout", "300s"]);
    wait_until("runsc's sandbox to run", Duration::from_secs(60), || {
        runsc_of(state.path()).len() >= 3
    });
    let supervisor = supervisor_pid(state.path(), "g");
    // SAFETY: kill(2) on the supervisor of the test's own sandbox.
    unsafe {
        libc::kill(supervisor, libc::SIGKILL);
    }
    let left = gone_within(state.path(), Duration::from_secs(15));
    kill_all(&left);
    assert!(
        left.is_empty(),
        "the killed supervisor's runsc processes {left:?} live on"
    );
    let _ = warden(state.path(), &["rm", "-f", "g"]);
}
