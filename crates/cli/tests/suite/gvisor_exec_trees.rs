//! Outside review F5: in a named gVisor sandbox, whatever an exec'd
//! command starts, however it detaches itself (`setsid`, a double fork, a
//! chain of processes each handing itself on and exiting, `nohup`, SIGTERM
//! ignored), ends with that command's kill or `--timeout`; the sandbox's
//! first process and its other commands stay. Each attack writes a marker
//! to a `--rw` directory every 100 ms: after the kill, the marker must
//! stop growing. Through the real binary and a real runsc; skipped, with
//! the reason, where runsc cannot run a sandbox here.

use crate::common::gvisor::{gvisor_available, processes_inside, start_gvisor};
use crate::common::trees::{exec_timed, grows, size, Beside};
use crate::common::*;
use std::time::{Duration, Instant};

/// The sandbox's user, as the review's workspace owner.
const OWNER: u32 = 1001;

/// A `--rw` directory and a workspace of [`OWNER`]'s, and the sandbox `g`
/// started over them.
fn sandbox(tag: &str) -> (TempDir, TempDir, TempDir) {
    let state = TempDir::new(&format!("gvisor-tree-{tag}"));
    let ws = TempDir::new(&format!("gvisor-tree-{tag}-ws"));
    let rw = TempDir::new(&format!("gvisor-tree-{tag}-rw"));
    for d in [&ws, &rw] {
        std::os::unix::fs::chown(d.path(), Some(OWNER), Some(OWNER)).unwrap();
    }
    start_gvisor(state.path(), "g", &ws, &["--rw", rw.str()]);
    (state, ws, rw)
}

/// Each generation writes a line, starts the next in a session of its own
/// and exits: no process of the chain lives long enough to be found in
/// its command's tree by its parents.
const HOP: &str = r#"echo $$ >> "$1/hops"; sleep 0.1; setsid sh "$0" "$1" & exit 0"#;

#[test]
fn a_command_that_keeps_handing_itself_on_to_new_sessions_ends_with_its_timeout() {
    if !gvisor_available() {
        return;
    }
    let (state, _ws, rw) = sandbox("hop");
    let _stop = Stopper(state.path(), "g");
    std::fs::write(rw.path().join("hop.sh"), HOP).unwrap();
    let script = format!("sh {0}/hop.sh {0}", rw.str());
    // Before, the command's first generation exited at once (status 0) and
    // the chain ran on inside, reparented to the sandbox's first process,
    // unreachable by the command's kill or timeout.
    let (status, took, err) = exec_timed(state.path(), "2s", &script);
    let hops = rw.path().join("hops");
    assert!(size(&hops) > 0, "the chain never ran: {err}");
    assert!(
        !grows(&hops, Duration::from_millis(1500)),
        "the chain runs on after its command's timeout (status {status} after {took:?}): {err}"
    );
    assert_eq!(status, 124, "{err}");
    assert_eq!(
        processes_inside(state.path()).len(),
        1,
        "only the first process is left"
    );
}

/// A double fork (a child that starts the daemon in a session of its own
/// and exits at once), the daemon writing every 100 ms.
const DAEMON: &str =
    r#"( setsid sh -c 'while :; do echo x >> "$0/daemon"; sleep 0.1; done' RW & ) ; exit 0"#;

#[test]
fn a_double_forked_daemon_ends_with_its_commands_timeout_and_nothing_else_does() {
    if !gvisor_available() {
        return;
    }
    let (state, _ws, rw) = sandbox("daemon");
    let _stop = Stopper(state.path(), "g");
    // A second command running beside it, which must run on to its end.
    let beside = Beside::start(
        state.path(),
        rw.path().join("beside"),
        80,
        Duration::from_secs(20),
    );
    let script = DAEMON.replace("RW", rw.str());
    // Before, the command's status came back at once and the daemon wrote
    // on, for as long as the sandbox lived.
    let (status, took, err) = exec_timed(state.path(), "2s", &script);
    let daemon = rw.path().join("daemon");
    assert!(size(&daemon) > 0, "the daemon never ran: {err}");
    assert!(
        !grows(&daemon, Duration::from_millis(1500)),
        "the daemon writes on after its command's timeout (status {status} after {took:?}): {err}"
    );
    assert_eq!(status, 124, "{err}");
    assert!(
        beside.runs_on(Duration::from_millis(1000)),
        "the second command was stopped with the first"
    );
    beside.ends_done();
    let alive = warden(state.path(), &["exec", "g", "--", "echo", "alive"]);
    assert_eq!(ok(&alive), "alive\n", "the sandbox did not live on");
}

/// `setsid nohup` a writer that ignores SIGTERM and SIGHUP, then wait.
const IGNORER: &str = r#"setsid nohup sh -c 'trap "" TERM HUP; while :; do echo x >> "$0/ignorer"; sleep 0.1; done' RW >/dev/null 2>&1 & sleep 100"#;

#[test]
fn a_setsid_nohup_child_that_ignores_sigterm_ends_with_its_commands_kill() {
    if !gvisor_available() {
        return;
    }
    let (state, _ws, rw) = sandbox("ignorer");
    let _stop = Stopper(state.path(), "g");
    let script = IGNORER.replace("RW", rw.str());
    let start = Instant::now();
    let exec = std::process::Command::new(warden_bin())
        .args([
            "exec",
            "-T",
            "--timeout",
            "4s",
            "g",
            "--",
            "sh",
            "-c",
            &script,
        ])
        .env("WARDEN_STATE_DIR", state.path().join("warden"))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let ignorer = rw.path().join("ignorer");
    wait_until("the writer runs", Duration::from_secs(20), || {
        size(&ignorer) > 0
    });
    // SIGTERM, passed on to the command: its shell ends, the writer
    // ignores it and writes on; the command's timeout must still end it.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(exec.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    assert!(
        grows(&ignorer, Duration::from_millis(500)),
        "the writer was to ignore SIGTERM"
    );
    let out = exec.wait_with_output().unwrap();
    let took = start.elapsed();
    assert!(
        !grows(&ignorer, Duration::from_millis(1500)),
        "the writer runs on after its command's kill ({:?} after {took:?}): {}",
        out.status,
        stderr(&out)
    );
    assert_eq!(code(&out), 124, "{}", stderr(&out));
}

#[test]
fn an_execd_command_holds_no_capability_and_may_not_make_namespaces() {
    if !gvisor_available() {
        return;
    }
    let (state, _ws, _rw) = sandbox("caps");
    let _stop = Stopper(state.path(), "g");
    // Its own processes are the ones it sees, its own PID in /proc among
    // them; a namespace of its own is refused (a user namespace would
    // lift --pids), as is a PID namespace.
    let script = "grep -E '^Cap(Inh|Prm|Eff|Bnd)' /proc/self/status; \
                  echo pid=$$ $(cat /proc/$$/comm); \
                  unshare -U true 2>/dev/null && echo MADE-USER; \
                  unshare -p -f true 2>/dev/null && echo MADE-PID; \
                  sh -c 'grep Seccomp: /proc/self/status'";
    let out = warden(state.path(), &["exec", "-T", "g", "--", "sh", "-c", script]);
    let s = stdout(&out);
    // gVisor's kernel of the distribution's runsc shows no CapAmb line.
    for set in ["CapInh", "CapPrm", "CapEff", "CapBnd"] {
        assert!(
            s.contains(&format!("{set}:\t0000000000000000")),
            "{set} is not empty: {s} {}",
            stderr(&out)
        );
    }
    assert!(s.contains("Seccomp:\t2"), "{s}");
    assert!(!s.contains("MADE-"), "{s}");
    assert!(s.contains(" sh\n"), "its /proc is not its own: {s}");
}
