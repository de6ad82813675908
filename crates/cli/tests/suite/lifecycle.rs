//! Long-lived named sandboxes through the real command: create, start,
//! concurrent execs, processes that outlive their exec, stop, a supervisor
//! killed with SIGKILL, the TTL, live events; as root and as an
//! unprivileged user.

use crate::common::*;
use std::io::BufRead;

mod stop_wait;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn two_concurrent_execs_share_the_sandbox_and_stop_ends_both() {
    let state = TempDir::new("lc-conc");
    let marker = unique("lc-server");
    ok(&warden(state.path(), &["create", "conc"]));
    ok(&warden(state.path(), &["start", "conc"]));
    let _stop = Stopper(state.path(), "conc");
    // A server on the sandbox's own loopback, left running by a detached
    // exec, and a client in a second exec that reaches it.
    let server = format!(
        "import socket, sys\n# {marker}\ns = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\ns.bind(('127.0.0.1', 7777)); s.listen()\nwhile True:\n    c, _ = s.accept(); c.sendall(b'hello from exec one'); c.close()\n"
    );
    ok(&warden(
        state.path(),
        &["exec", "-d", "conc", "--", "python3", "-c", &server],
    ));
    wait_until("the server to run", Duration::from_secs(10), || {
        !pids_with_marker(&marker).is_empty()
    });
    let client = "import socket, time\nfor i in range(100):\n    try:\n        c = socket.create_connection(('127.0.0.1', 7777)); print(c.recv(100).decode()); break\n    except OSError: time.sleep(0.05)\n";
    let got = ok(&warden(
        state.path(),
        &["exec", "conc", "--", "python3", "-c", client],
    ));
    assert!(got.contains("hello from exec one"), "{got}");
    let ps = ok(&warden(state.path(), &["ps", "conc"]));
    assert!(ps.contains(&marker), "{ps}");
    // A host process of the same test is not in the sandbox.
    let server_pids = pids_with_marker(&marker);
    ok(&warden(state.path(), &["stop", "conc"]));
    for pid in server_pids {
        assert!(!alive(pid), "the exec'd server {pid} survived stop");
    }
    assert!(!sandbox_dir(state.path(), "conc")
        .join("control.sock")
        .exists());
    let ls = ok(&warden(state.path(), &["ls"]));
    assert!(ls.contains("stopped"), "{ls}");
}

#[test]
fn a_process_started_by_an_exec_outlives_it_until_the_sandbox_stops() {
    let state = TempDir::new("lc-outlive");
    let marker = unique("lc-sleeper");
    ok(&warden(state.path(), &["create", "ol", "--start"]));
    let _stop = Stopper(state.path(), "ol");
    let script = format!("(exec -a {marker} sleep 1000) >/dev/null 2>&1 & echo started");
    let out = ok(&warden(
        state.path(),
        &["exec", "ol", "--", "bash", "-c", &script],
    ));
    assert!(out.contains("started"), "{out}");
    let pids = pids_with_marker(&marker);
    assert_eq!(pids.len(), 1, "the background process is not running");
    std::thread::sleep(Duration::from_millis(200));
    assert!(alive(pids[0]), "the background process died with its exec");
    ok(&warden(state.path(), &["stop", "--time", "2s", "ol"]));
    assert!(!alive(pids[0]), "the background process survived stop");
}

#[test]
fn an_exec_reports_the_commands_own_status_and_missing_commands() {
    let state = TempDir::new("lc-status");
    ok(&warden(state.path(), &["create", "st", "--start"]));
    let _stop = Stopper(state.path(), "st");
    let out = warden(
        state.path(),
        &[
            "exec",
            "st",
            "--",
            "sh",
            "-c",
            "echo out; echo err >&2; exit 7",
        ],
    );
    assert_eq!(code(&out), 7);
    assert_eq!(stdout(&out), "out\n");
    assert_eq!(stderr(&out), "err\n");
    let out = warden(
        state.path(),
        &["exec", "st", "--", "sh", "-c", "kill -TERM $$"],
    );
    assert_eq!(code(&out), 128 + 15);
    let out = warden(state.path(), &["exec", "st", "--", "no-such-command-here"]);
    assert_eq!(code(&out), 127, "{}", stderr(&out));
    assert!(stderr(&out).contains("not found"), "{}", stderr(&out));
    let out = warden(
        state.path(),
        &["exec", "st", "--timeout", "300ms", "--", "sleep", "10"],
    );
    assert_eq!(code(&out), 124, "{}", stderr(&out));
}

#[test]
fn flags_given_at_create_apply_to_every_later_exec_and_an_exec_cannot_widen_them() {
    let state = TempDir::new("lc-flags");
    let ro = TempDir::new("lc-flags-ro");
    std::fs::write(ro.path().join("planted"), "read-only content").unwrap();
    ok(&warden(
        state.path(),
        &[
            "create",
            "fl",
            "--start",
            "--ro",
            ro.str(),
            "--env",
            "GIVEN=at-create",
            "--pids",
            "40",
            "--memory",
            "96M",
        ],
    ));
    let _stop = Stopper(state.path(), "fl");
    let script = format!(
        "echo $GIVEN; cat {0}/planted; echo x > {0}/planted 2>/dev/null || echo write-refused",
        ro.str()
    );
    let out = ok(&warden(
        state.path(),
        &["exec", "fl", "--", "sh", "-c", &script],
    ));
    assert!(out.contains("at-create"), "{out}");
    assert!(out.contains("read-only content"), "{out}");
    assert!(out.contains("write-refused"), "{out}");
    assert_eq!(
        std::fs::read_to_string(ro.path().join("planted")).unwrap(),
        "read-only content"
    );
    // The process limit holds for the exec's processes: a fork loop stops.
    let out = warden(
        state.path(),
        &["exec", "fl", "--", "python3", "-c", "import os, time\nn = 0\ntry:\n    while True:\n        if os.fork() == 0:\n            time.sleep(5); os._exit(0)\n        n += 1\nexcept OSError:\n    print('forks refused after', n)\n"],
    );
    assert!(
        stdout(&out).contains("forks refused after"),
        "{} {}",
        stdout(&out),
        stderr(&out)
    );
    let n: u32 = stdout(&out)
        .trim()
        .rsplit(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(n < 40, "{n} forks under --pids 40");
    // The memory limit holds: a hog is killed.
    let out = warden(
        state.path(),
        &[
            "exec",
            "fl",
            "--",
            "python3",
            "-c",
            "b = bytearray(400 * 1024 * 1024); print('allocated')",
        ],
    );
    assert_ne!(code(&out), 0, "{}", stdout(&out));
    assert!(!stdout(&out).contains("allocated"));
    // Sandbox options are not exec's to give.
    for widen in [
        vec!["exec", "fl", "--allow-domain", "example.com", "--", "true"],
        vec!["exec", "fl", "--rw", "/", "--", "true"],
        vec!["exec", "fl", "--memory", "8G", "--", "true"],
    ] {
        let out = warden(state.path(), &widen);
        assert_eq!(code(&out), 125, "{widen:?} was accepted");
    }
}

#[test]
fn exec_starts_a_stopped_sandbox_and_keeps_its_changes() {
    let state = TempDir::new("lc-restart");
    ok(&warden(state.path(), &["create", "rs"]));
    ok(&warden(
        state.path(),
        &[
            "exec",
            "rs",
            "--",
            "sh",
            "-c",
            "echo kept > /workspace/file",
        ],
    ));
    ok(&warden(state.path(), &["stop", "rs"]));
    let out = ok(&warden(
        state.path(),
        &["exec", "rs", "--", "cat", "/workspace/file"],
    ));
    assert_eq!(out, "kept\n");
    ok(&warden(state.path(), &["stop", "rs"]));
}

#[test]
fn a_killed_supervisor_takes_its_sandbox_with_it_and_is_found_dead() {
    if !egress_available() {
        return;
    }
    let state = TempDir::new("lc-kill");
    let marker = unique("lc-victim");
    ok(&warden(
        state.path(),
        &["create", "kl", "--start", "--allow-domain", "allowed.test"],
    ));
    let script = format!("(exec -a {marker} sleep 1000) >/dev/null 2>&1 &");
    ok(&warden(
        state.path(),
        &["exec", "kl", "--", "bash", "-c", &script],
    ));
    // A decision made before the kill must be in the log after it.
    ok(&warden(
        state.path(),
        &["exec", "kl", "--", "python3", "-c", "import socket\ntry: socket.gethostbyname('before-kill.test')\nexcept OSError: print('nx')\n"],
    ));
    let victims = pids_with_marker(&marker);
    assert_eq!(victims.len(), 1);
    let sup = supervisor_pid(state.path(), "kl");
    let groups = sandbox_cgroups(state.path(), "kl");
    // SAFETY: SIGKILL to the supervisor this test started.
    unsafe { libc::kill(sup, libc::SIGKILL) };
    wait_until(
        "the sandbox's processes to die",
        Duration::from_secs(10),
        || !alive(victims[0]),
    );
    let ls = ok(&warden(state.path(), &["ls"]));
    assert!(ls.contains("dead"), "{ls}");
    for g in groups {
        assert!(!g.exists(), "cgroup {} left behind", g.display());
    }
    assert!(!sandbox_dir(state.path(), "kl")
        .join("control.sock")
        .exists());
    let ls = ok(&warden(state.path(), &["ls"]));
    assert!(!ls.contains("dead"), "cleaned once, then plain: {ls}");
    let log = sandbox_dir(state.path(), "kl").join("audit.jsonl");
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("before-kill.test"), "{text}");
    let verify = warden(state.path(), &["audit", "verify", log.to_str().unwrap()]);
    assert!(
        stdout(&verify).contains("unfinished"),
        "{}",
        stdout(&verify)
    );
    // And it starts again.
    ok(&warden(state.path(), &["exec", "kl", "--", "true"]));
    ok(&warden(state.path(), &["stop", "kl"]));
}

#[test]
fn the_ttl_stops_a_sandbox_that_nobody_uses() {
    let state = TempDir::new("lc-ttl");
    let marker = unique("lc-ttl-sleeper");
    ok(&warden(
        state.path(),
        &["create", "tt", "--start", "--ttl", "1s"],
    ));
    let script = format!("(exec -a {marker} sleep 1000) >/dev/null 2>&1 &");
    ok(&warden(
        state.path(),
        &["exec", "tt", "--", "bash", "-c", &script],
    ));
    let pids = pids_with_marker(&marker);
    assert_eq!(pids.len(), 1);
    wait_until(
        "the TTL to stop the sandbox",
        Duration::from_secs(15),
        || {
            !sandbox_dir(state.path(), "tt")
                .join("supervisor.json")
                .exists()
        },
    );
    assert!(!alive(pids[0]));
    let text =
        std::fs::read_to_string(sandbox_dir(state.path(), "tt").join("audit.jsonl")).unwrap();
    assert!(text.contains("\"reason\":\"ttl\""), "{text}");
}

#[test]
fn logs_follow_shows_a_network_decision_within_100ms() {
    if !egress_available() {
        return;
    }
    let state = TempDir::new("lc-logs");
    ok(&warden(
        state.path(),
        &["create", "lg", "--start", "--allow-domain", "allowed.test"],
    ));
    let _stop = Stopper(state.path(), "lg");
    let mut follower = Command::new(warden_bin())
        .args(["logs", "-f", "--json", "lg"])
        .env("WARDEN_STATE_DIR", state.path().join("warden"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = std::io::BufReader::new(follower.stdout.take().unwrap()).lines();
    let (tx, rx) = std::sync::mpsc::channel::<(Instant, String)>();
    std::thread::spawn(move || {
        for l in lines.map_while(Result::ok) {
            let _ = tx.send((Instant::now(), l));
        }
    });
    // The follower is subscribed once the log so far is printed.
    std::thread::sleep(Duration::from_millis(500));
    let asked = Instant::now();
    let exec = warden(
        state.path(),
        &["exec", "lg", "--", "python3", "-c", "import socket, time\nt = time.time()\ntry: socket.gethostbyname('live-decision.test')\nexcept OSError: pass\nprint(int(t * 1000))\ntime.sleep(2)\n"],
    );
    let sent_ms: u64 = stdout(&exec).trim().parse().unwrap();
    let mut seen = None;
    while let Ok((at, line)) = rx.recv_timeout(Duration::from_secs(5)) {
        if line.contains("live-decision.test") && line.contains("\"event\":\"connection\"") {
            seen = Some((at, line));
            break;
        }
    }
    let _ = follower.kill();
    let _ = follower.wait();
    let (at, line) = seen.expect("the decision never reached logs -f");
    let event: serde_json::Value = serde_json::from_str(&line).unwrap();
    let ts = event["ts_ms"].as_u64().unwrap();
    // Decided when asked, and on the follower's screen within 100 ms of
    // the question (the exec itself lasted two more seconds).
    assert!(
        ts >= sent_ms && ts < sent_ms + 100,
        "decided at {ts}, asked at {sent_ms}"
    );
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let arrived_ms = now_ms - at.elapsed().as_millis() as u64;
    assert!(
        arrived_ms < ts + 100,
        "arrived {} ms after the decision",
        arrived_ms - ts
    );
    assert!(
        at < asked + Duration::from_millis(2000),
        "arrived only after the exec ended"
    );
}

#[test]
fn a_long_lived_sandbox_works_for_an_unprivileged_user_too() {
    let Some(user) = Unprivileged::get() else {
        skip("no unprivileged user could be made");
        return;
    };
    let state = TempDir::new("lc-unpriv");
    user.own(state.path());
    let bin = user.bin.to_str().unwrap().to_string();
    let run = |args: &[&str]| {
        user.command(&bin)
            .args(args)
            .env("WARDEN_STATE_DIR", state.path().join("warden"))
            .output()
            .unwrap()
    };
    let out = run(&["create", "un", "--start"]);
    if !out.status.success() && stderr(&out).contains("namespaces") {
        skip(&format!("user namespaces unavailable: {}", stderr(&out)));
        return;
    }
    ok(&out);
    let marker = unique("lc-unpriv-sleeper");
    let script = format!("(exec -a {marker} sleep 1000) >/dev/null 2>&1 & id -u");
    let a = ok(&run(&["exec", "un", "--", "bash", "-c", &script]));
    assert!(!a.trim().is_empty());
    let b = ok(&run(&["exec", "un", "--", "sh", "-c", "echo second"]));
    assert_eq!(b, "second\n");
    let pids = pids_with_marker(&marker);
    assert_eq!(pids.len(), 1);
    ok(&run(&["stop", "un"]));
    assert!(!alive(pids[0]));
}

#[test]
fn an_exec_on_a_terminal_gets_a_pty_of_its_own_that_follows_resizes_and_ctrl_c() {
    let state = TempDir::new("lc-tty");
    ok(&warden(state.path(), &["create", "ty", "--start"]));
    let _stop = Stopper(state.path(), "ty");
    let mut term = TestTerminal::open(40, 100);
    let py = "import os, signal, sys, time\n\
              got = []\n\
              signal.signal(signal.SIGWINCH, lambda *a: got.append(1))\n\
              print('tty', os.isatty(0), os.ttyname(0) != '', 'size', *os.get_terminal_size(0), flush=True)\n\
              for _ in range(200):\n    if got: break\n    time.sleep(0.05)\n\
              print('resized' if got else 'no-signal', *os.get_terminal_size(0), flush=True)\n\
              time.sleep(30)\n";
    let mut child = term.spawn(
        Command::new(warden_bin())
            .args(["exec", "ty", "--", "python3", "-c", py])
            .env("WARDEN_STATE_DIR", state.path().join("warden")),
    );
    let first = term.expect("size 100 40", Duration::from_secs(10));
    assert!(first.contains("tty True True size 100 40"), "{first:?}");
    term.resize(50, 120);
    let seen = term.expect("resized 120 50", Duration::from_secs(10));
    assert!(seen.contains("resized 120 50"), "{seen:?}");
    use std::io::Write;
    term.master.write_all(b"\x03").unwrap();
    let start = Instant::now();
    let status = child.wait().unwrap();
    assert!(start.elapsed() < Duration::from_secs(10));
    assert!(matches!(status.code(), Some(1) | Some(130)), "{status:?}");
}

#[test]
fn ctrl_c_to_an_exec_with_pipes_reaches_its_process() {
    let state = TempDir::new("lc-int");
    let marker = unique("lc-int-sleeper");
    ok(&warden(state.path(), &["create", "in", "--start"]));
    let _stop = Stopper(state.path(), "in");
    let script = format!("exec -a {marker} sleep 1000");
    let mut child = Command::new(warden_bin())
        .args(["exec", "-T", "in", "--", "bash", "-c", &script])
        .env("WARDEN_STATE_DIR", state.path().join("warden"))
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    // The process named by the marker (not the warden exec whose command
    // line also holds it).
    let named = || pids_running(&[marker.as_str(), "1000"]);
    wait_until("the exec to run", Duration::from_secs(10), || {
        !named().is_empty()
    });
    let pid = named()[0];
    // SAFETY: SIGINT to the warden exec this test started, as Ctrl-C would.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(128 + libc::SIGINT), "{status:?}");
    assert!(
        !alive(pid),
        "the process in the sandbox survived the caller's Ctrl-C"
    );
}

#[test]
fn run_detached_returns_at_once_keeps_the_output_and_stops_when_the_command_ends() {
    let state = TempDir::new("lc-detach");
    let started = Instant::now();
    let out = ok(&warden(
        state.path(),
        &[
            "run",
            "-d",
            "--env",
            "WHO=detached",
            "--",
            "sh",
            "-c",
            "sleep 1; echo hello $WHO; echo to-stderr >&2",
        ],
    ));
    assert!(
        started.elapsed() < Duration::from_millis(900),
        "run -d waited for the command"
    );
    let name = out.trim().to_string();
    assert!(name.starts_with("run-"), "{out}");
    let dir = sandbox_dir(state.path(), &name);
    assert!(
        dir.join("supervisor.json").exists(),
        "not running right after"
    );
    wait_until("the detached run to end", Duration::from_secs(15), || {
        !dir.join("supervisor.json").exists()
    });
    // Both streams, in the order written, where `warden logs --exec` reads.
    let output = ok(&warden(state.path(), &["logs", &name, "--exec", "run"]));
    assert_eq!(output, "hello detached\nto-stderr\n");
    let logs = ok(&warden(state.path(), &["logs", "--json", &name]));
    assert!(logs.contains("\"event\":\"exec_exited\""), "{logs}");
    // The supervisor's record goes first; the sandbox is in use until the
    // supervisor has let go of it a moment later.
    let mut ls = String::new();
    wait_until(
        "the detached run to be stopped",
        Duration::from_secs(15),
        || {
            ls = ok(&warden(state.path(), &["ls"]));
            ls.contains(&name) && ls.contains("stopped")
        },
    );
    assert!(ls.contains(&name) && ls.contains("stopped"), "{ls}");
    ok(&warden(state.path(), &["rm", &name]));
    assert!(!dir.exists());
    // A command that cannot start is said at once, and leaves nothing.
    let out = warden(state.path(), &["run", "-d", "--", "no-such-command-here"]);
    assert_eq!(code(&out), 125, "{}", stderr(&out));
    assert!(stderr(&out).contains("not found"), "{}", stderr(&out));
    let ls = ok(&warden(state.path(), &["ls"]));
    assert_eq!(ls.lines().count(), 1, "{ls}");
}

#[test]
fn each_decision_carries_the_time_it_was_made_not_the_end_of_the_run() {
    if !egress_available() {
        return;
    }
    let dir = TempDir::new("lc-times");
    let ev = dir.path().join("ev.jsonl");
    let out = Command::new(warden_bin())
        .args(["run", "--no-tty", "--allow-domain", "allowed.test", "--json-events"])
        .arg(&ev)
        .args(["--", "python3", "-c", "import socket, time\nfor n in ('first.test', 'second.test'):\n    try: socket.gethostbyname(n)\n    except OSError: pass\n    time.sleep(0.4)\n"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let evs = events(&ev);
    let ts = |pred: &dyn Fn(&serde_json::Value) -> bool| {
        evs.iter()
            .find(|e| pred(e))
            .map(|e| e["ts_ms"].as_u64().unwrap())
            .unwrap_or_else(|| panic!("{evs:?}"))
    };
    let first = ts(&|e| e["event"] == "connection" && e["name"] == "first.test");
    let second = ts(&|e| e["event"] == "connection" && e["name"] == "second.test");
    let exited = ts(&|e| e["event"] == "exited");
    assert!(second >= first + 350, "first {first}, second {second}");
    assert!(exited >= second + 350, "second {second}, exited {exited}");
}

#[test]
fn an_exec_cannot_put_something_else_in_a_secrets_variable() {
    if !egress_available() {
        return;
    }
    let state = TempDir::new("lc-secret");
    let with_token = |args: &[&str]| {
        Command::new(warden_bin())
            .args(args)
            .env("WARDEN_STATE_DIR", state.path().join("warden"))
            .env("LC_TOKEN", "real-value-0123456789")
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    ok(&with_token(&[
        "create",
        "se",
        "--start",
        "--secret",
        "LC_TOKEN@api.test",
    ]));
    let _stop = Stopper(state.path(), "se");
    let out = ok(&with_token(&[
        "exec",
        "se",
        "--",
        "sh",
        "-c",
        "echo $LC_TOKEN",
    ]));
    assert!(out.starts_with("warden-secret-"), "{out}");
    assert!(!out.contains("real-value"), "{out}");
    let out = with_token(&[
        "exec",
        "se",
        "-e",
        "LC_TOKEN=other",
        "--",
        "sh",
        "-c",
        "echo $LC_TOKEN",
    ]);
    assert_eq!(code(&out), 125, "{}", stdout(&out));
    assert!(stderr(&out).contains("secret"), "{}", stderr(&out));
}

/// Whoever is told that a command ended finds its end in the log: the
/// supervisor writes `exec_exited` before it answers the exec, so a
/// `warden logs` right after `warden exec` always shows it.
#[test]
fn an_execs_end_is_in_the_log_before_the_exec_returns() {
    let state = TempDir::new("lc-order");
    ok(&warden(state.path(), &["create", "order", "--start"]));
    let _stop = Stopper(state.path(), "order");
    for round in 1..=25 {
        ok(&warden(state.path(), &["exec", "order", "--", "true"]));
        let logs = ok(&warden(state.path(), &["logs", "--json", "order"]));
        let ended = logs
            .lines()
            .filter(|l| l.contains("\"event\":\"exec_exited\""))
            .count();
        assert_eq!(
            ended, round,
            "after {round} execs returned, the log has {ended} ends:\n{logs}"
        );
    }
}

#[test]
fn a_create_refused_for_a_taken_name_leaves_that_sandboxs_own_workspace_alone() {
    let state = TempDir::new("lc-taken");
    ok(&warden(state.path(), &["create", "taken"]));
    // The first sandbox's own workspace (made without -w) holds its files.
    let own = state.path().join("warden/workspaces/taken");
    assert!(own.is_dir(), "no own workspace at {}", own.display());
    std::fs::write(own.join("kept.txt"), "kept\n").unwrap();
    let o = warden(state.path(), &["create", "taken"]);
    assert_ne!(code(&o), 0, "a second create of the same name succeeded");
    assert_eq!(
        std::fs::read_to_string(own.join("kept.txt")).unwrap(),
        "kept\n",
        "the refused create removed the other sandbox's workspace"
    );
}

/// An idle supervisor's resident set holds little of warden's binary: the
/// pages of code it ran while starting and serving are given back once it
/// idles, and the next exec is served as before (its code comes back from
/// the page cache).
#[test]
fn an_idle_supervisor_gives_back_its_code_and_still_serves_the_next_exec() {
    let state = TempDir::new("lc-idle");
    ok(&warden(state.path(), &["create", "idle", "--start"]));
    let _stop = Stopper(state.path(), "idle");
    let out = ok(&warden(
        state.path(),
        &["exec", "idle", "--", "echo", "first"],
    ));
    assert!(out.contains("first"), "{out}");
    let sup = supervisor_pid(state.path(), "idle");
    let busy = status_kib(sup, "RssFile").unwrap();
    let anon = status_kib(sup, "RssAnon").unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut idle = busy;
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(250));
        idle = status_kib(sup, "RssFile").unwrap();
        if idle * 2 < busy {
            break;
        }
    }
    println!("supervisor RssFile {busy} KiB after an exec, {idle} KiB idle; RssAnon {anon} KiB");
    assert!(
        idle * 2 < busy,
        "the idle supervisor kept its code resident: RssFile {busy} KiB after an exec, {idle} KiB 15 s later"
    );
    let out = ok(&warden(
        state.path(),
        &["exec", "idle", "--", "sh", "-c", "echo second; exit 0"],
    ));
    assert!(out.contains("second"), "{out}");
    let o = warden(state.path(), &["exec", "idle", "--", "sh", "-c", "exit 7"]);
    assert_eq!(code(&o), 7, "{}", stderr(&o));
}
