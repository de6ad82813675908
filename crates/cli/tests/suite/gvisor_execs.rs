//! A long-lived gVisor sandbox's later commands (`warden exec`, and every
//! door's command) held as its first process is: the same seccomp filter
//! and `no_new_privs` inside gVisor's kernel, the same task bound, and a
//! kill that reaches them inside. Through the real binary, one sandbox per
//! test; skipped, with the reason, where runsc cannot run a sandbox here.

use crate::common::gvisor::{gvisor_available, gvisor_kernel, processes_inside, start_gvisor};
use crate::common::*;
use std::os::unix::fs::MetadataExt;
use std::time::{Duration, Instant};

/// An account of the host other than root's, as the review's workspace
/// owner: the sandbox runs as the workspace's owner.
const OWNER: u32 = 1001;

#[test]
fn an_execd_commands_set_id_chmod_on_a_rw_host_file_leaves_no_set_id_bit_on_the_host() {
    if !gvisor_available() {
        return;
    }
    let state = TempDir::new("gvisor-exec-setid");
    let ws = TempDir::new("gvisor-exec-setid-ws");
    let rw = TempDir::new("gvisor-exec-setid-rw");
    for d in [&ws, &rw] {
        std::os::unix::fs::chown(d.path(), Some(OWNER), Some(OWNER)).unwrap();
    }
    start_gvisor(state.path(), "g", &ws, &["--rw", rw.str()]);
    // Before, an exec'd command ran with no filter (`Seccomp: 0`), and
    // the host's file became -rwsr-xr-x of the workspace's owner.
    let script = format!(
        "grep Seccomp: /proc/self/status; \
         python3 -c 'import ctypes; print(\"no_new_privs\", ctypes.CDLL(None).prctl(39, 0, 0, 0, 0))'; \
         cp /bin/true {rw}/by-exec; chmod 4755 {rw}/by-exec || echo REFUSED-U; \
         chmod 2755 {rw}/by-exec || echo REFUSED-G; \
         python3 -c \"import os; os.open('{rw}/made', os.O_CREAT|os.O_WRONLY, 0o4755)\" 2>/dev/null \
           || echo REFUSED-OPEN; \
         sh -c 'chmod 6755 {rw}/by-exec' || echo REFUSED-CHILD",
        rw = rw.str()
    );
    let out = warden(
        state.path(),
        &["exec", "-T", "g", "--", "sh", "-c", &script],
    );
    let s = stdout(&out);
    let _ = warden(state.path(), &["stop", "g"]);
    assert!(s.contains("Seccomp:\t2"), "no filter: {s} {}", stderr(&out));
    assert!(s.contains("no_new_privs 1"), "{s}");
    for refused in ["REFUSED-U", "REFUSED-G", "REFUSED-OPEN", "REFUSED-CHILD"] {
        assert!(s.contains(refused), "{refused}: {s} {}", stderr(&out));
    }
    for e in std::fs::read_dir(rw.path()).unwrap().flatten() {
        let mode = e.metadata().unwrap().mode();
        assert_eq!(mode & 0o6000, 0, "{:?} landed with mode {mode:o}", e.path());
    }
}

#[test]
fn an_execd_command_past_its_timeout_is_gone_inside_the_sandbox() {
    if !gvisor_available() {
        return;
    }
    let state = TempDir::new("gvisor-exec-timeout");
    let ws = TempDir::new("gvisor-exec-timeout-ws");
    start_gvisor(state.path(), "g", &ws, &[]);
    let marker = unique("loop");
    // Before, 124 came back while the loop (and its sleeps) ran on inside
    // gVisor: only the host's `runsc exec` client was killed.
    let looped = warden(
        state.path(),
        &[
            "exec",
            "--timeout",
            "2s",
            "g",
            "--",
            "sh",
            "-c",
            "sh -c 'while :; do sleep 1; done' & while :; do sleep 1; done",
            &marker,
        ],
    );
    assert_eq!(code(&looped), 124, "{}", stderr(&looped));
    // Every process gVisor's kernel runs, as runsc lists them on the host
    // (an exec sees only its own processes): none but the first may be
    // left.
    let start = Instant::now();
    let left = loop {
        let n = processes_inside(state.path()).len().saturating_sub(1);
        if n == 0 || start.elapsed() > Duration::from_secs(5) {
            break n;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let _ = warden(state.path(), &["stop", "g"]);
    assert_eq!(left, 0, "the timed-out command still runs inside");
}

/// Fork up to 60 children that wait, count those started, then end them.
const FORKS: &str = "
import os, signal, time
kids = []
for i in range(60):
    try:
        pid = os.fork()
    except OSError as e:
        print('refused', e.errno)
        break
    if pid == 0:
        time.sleep(30)
        os._exit(0)
    kids.append(pid)
print('started=%d' % len(kids))
for k in kids:
    os.kill(k, signal.SIGKILL)
    os.waitpid(k, 0)
";

#[test]
fn forks_past_pids_are_refused_inside_a_gvisor_sandbox_which_lives_on() {
    if !gvisor_available() {
        return;
    }
    let state = TempDir::new("gvisor-exec-pids");
    let ws = TempDir::new("gvisor-exec-pids-ws");
    start_gvisor(state.path(), "g", &ws, &["--pids", "24"]);
    // Before, nothing bounded tasks inside: all 60 started (and a larger
    // count killed runsc at its host bound, the command "exited 2").
    let out = warden(state.path(), &["exec", "g", "--", "python3", "-c", FORKS]);
    let s = stdout(&out);
    let started: u32 = s
        .lines()
        .find_map(|l| l.strip_prefix("started="))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(u32::MAX);
    let alive = warden(state.path(), &["exec", "g", "--", "echo", "alive"]);
    let _ = warden(state.path(), &["stop", "g"]);
    assert!(
        started < 24,
        "{started} forks under --pids 24: {s} {}",
        stderr(&out)
    );
    assert_eq!(ok(&alive), "alive\n", "the sandbox did not live on");
}

/// A process whose parent ended is handed to the sandbox's first process,
/// which must wait for it: `sleep infinity` never did, so each left a
/// zombie counting against `--pids` until no command could fork (outside
/// review 27, F3: 18 zombies, then every fork failed).
#[test]
fn orphans_of_execd_commands_are_reaped_and_never_fill_the_process_bound() {
    if !gvisor_available() {
        return;
    }
    let state = TempDir::new("gvisor-exec-orphans");
    let ws = TempDir::new("gvisor-exec-orphans-ws");
    start_gvisor(state.path(), "g", &ws, &["--pids", "16"]);
    for _ in 0..20 {
        let _ = warden(
            state.path(),
            &["exec", "g", "--", "sh", "-c", "sleep 0.1 & exit 0"],
        );
    }
    std::thread::sleep(std::time::Duration::from_secs(1));
    let forked = warden(
        state.path(),
        &[
            "exec",
            "g",
            "--",
            "python3",
            "-c",
            "import os\nif os.fork() == 0: os._exit(0)\nos.wait(); print('forked')",
        ],
    );
    let _ = warden(state.path(), &["stop", "g"]);
    assert_eq!(
        stdout(&forked),
        "forked\n",
        "after 20 orphans under --pids 16 a command could not fork: {}",
        stderr(&forked)
    );
}

#[test]
fn when_gvisors_kernel_dies_a_running_command_is_told_killed_and_the_sandbox_failed() {
    if !gvisor_available() {
        return;
    }
    let state = TempDir::new("gvisor-exec-died");
    let ws = TempDir::new("gvisor-exec-died-ws");
    start_gvisor(state.path(), "g", &ws, &[]);
    let _stop = Stopper(state.path(), "g");
    let mut cmd = std::process::Command::new(warden_bin());
    cmd.args(["exec", "-T", "g", "--", "sleep", "30"])
        .env("WARDEN_STATE_DIR", state.path().join("warden"))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let child = cmd.spawn().unwrap();
    std::thread::sleep(Duration::from_secs(2));
    let kernel = gvisor_kernel(state.path()).expect("runsc's sandbox process");
    // As runsc dies when its host task bound is hit: before, the command
    // was told "exited 128" (runsc's own failure code) as if its own.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(kernel),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let out = child.wait_with_output().unwrap();
    // The sandbox's end is recorded once its supervisor has seen runsc go.
    let start = Instant::now();
    let logs = loop {
        let logs = stdout(&warden(state.path(), &["logs", "g"]));
        if logs.contains(" exited with status 255") || start.elapsed() > Duration::from_secs(10) {
            break logs;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let _ = warden(state.path(), &["rm", "g"]);
    assert_eq!(code(&out), 137, "{}", stderr(&out));
    assert!(logs.contains("setup_failed"), "{logs}");
}
