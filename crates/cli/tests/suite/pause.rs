//! Pause and resume through the real command and the real daemon: a
//! paused sandbox's busy loop uses no CPU (its cgroup's own counter says
//! so) and a counter in a background process goes on from its value once
//! resumed; an exec into a paused sandbox is refused and says how to go
//! on; its TTL stands still while it is paused; a paused sandbox stays
//! paused across a daemon killed and started again, and resumes through
//! it; as root (v2 `cgroup.freeze` here) and as an unprivileged user (the
//! v1 freezer of a delegated cgroup, and a clear refusal without one).

use crate::common::daemon::*;
use crate::common::*;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

/// A busy loop that writes how far it counted into the workspace.
const COUNTER: &str = "import os\ni = 0\nwhile True:\n    i += 1\n    if i % 20000 == 0:\n        with open('/workspace/count.tmp', 'w') as f: f.write(str(i))\n        os.replace('/workspace/count.tmp', '/workspace/count')\n";

/// CPU time the whole sandbox used (µs), from its cgroup: v2's
/// `cpu.stat`, or v1's `cpuacct.usage`.
fn cgroup_cpu_usec(dirs: &[PathBuf]) -> Option<u64> {
    dirs.iter().find_map(|d| {
        let v2 = std::fs::read_to_string(d.join("cpu.stat"))
            .ok()
            .and_then(|t| {
                t.lines()
                    .find_map(|l| l.strip_prefix("usage_usec "))
                    .and_then(|v| v.trim().parse().ok())
            });
        v2.or_else(|| {
            std::fs::read_to_string(d.join("cpuacct.usage"))
                .ok()?
                .trim()
                .parse::<u64>()
                .ok()
                .map(|ns| ns / 1000)
        })
    })
}

/// The sandbox's layer as it is now, on the host: held in memory while
/// it runs (its supervisor's descriptor, as the layer's mark names it),
/// else its saved `upper/`.
fn layer(state: &Path, name: &str) -> PathBuf {
    let dir = sandbox_dir(state, name);
    let live = std::fs::read_to_string(dir.join("layer-unsaved"))
        .ok()
        .and_then(|t| {
            let mut it = t.split_whitespace();
            let (pid, fd) = (it.next()?, it.next()?);
            Some(PathBuf::from(format!("/proc/{pid}/fd/{fd}/upper")))
        })
        .filter(|p| p.is_dir());
    live.unwrap_or_else(|| dir.join("upper"))
}

/// The counter's last value, read on the host from the sandbox's layer.
fn count(state: &Path, name: &str) -> u64 {
    std::fs::read_to_string(layer(state, name).join("count"))
        .ok()
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or(0)
}

fn events_named(state: &Path, name: &str, kind: &str) -> Vec<serde_json::Value> {
    let out = ok(&warden(state, &["logs", name, "--json"]));
    out.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| e["event"] == kind)
        .collect()
}

#[test]
fn pause_stops_a_busy_loop_and_resume_continues_its_count() {
    let state = TempDir::new("pause-cpu");
    let s = state.path();
    ok(&warden(s, &["create", "busy", "--start"]));
    let _stop = Stopper(s, "busy");
    ok(&warden(
        s,
        &["exec", "-d", "busy", "--", "python3", "-c", COUNTER],
    ));
    wait_until("the counter to count", Duration::from_secs(20), || {
        count(s, "busy") > 0
    });
    let dirs = sandbox_cgroups(s, "busy");
    let Some(_) = cgroup_cpu_usec(&dirs) else {
        return skip("the sandbox's cgroup has no CPU counter here");
    };
    let ps_before = ok(&warden(s, &["ps", "busy"]));

    ok(&warden(s, &["pause", "busy"]));
    let ls = ok(&warden(s, &["ls"]));
    assert!(
        ls.lines()
            .any(|l| l.starts_with("busy") && l.contains("paused")),
        "{ls}"
    );
    let cpu_paused = cgroup_cpu_usec(&dirs).unwrap();
    let at_pause = count(s, "busy");
    std::thread::sleep(Duration::from_millis(1500));
    let cpu_later = cgroup_cpu_usec(&dirs).unwrap();
    assert!(
        cpu_later - cpu_paused < 20_000,
        "a paused busy loop used {} µs of CPU in 1.5 s",
        cpu_later - cpu_paused
    );
    assert_eq!(
        count(s, "busy"),
        at_pause,
        "the counter counted while paused"
    );
    // Pausing twice is refused, and says what the sandbox is.
    let again = warden(s, &["pause", "busy"]);
    assert_eq!(code(&again), 125);
    assert!(
        stderr(&again).contains("paused already"),
        "{}",
        stderr(&again)
    );

    ok(&warden(s, &["resume", "busy"]));
    wait_until("the counter to go on", Duration::from_secs(10), || {
        count(s, "busy") > at_pause
    });
    std::thread::sleep(Duration::from_millis(1000));
    let cpu_resumed = cgroup_cpu_usec(&dirs).unwrap();
    assert!(
        cpu_resumed > cpu_later + 100_000,
        "a resumed busy loop used only {} µs of CPU in 1 s",
        cpu_resumed - cpu_later
    );
    // The same process went on (not a new one started from zero).
    let ps_after = ok(&warden(s, &["ps", "busy"]));
    let counter_line = |ps: &str| {
        ps.lines()
            .find(|l| l.contains("python3"))
            .map(|l| l.split_whitespace().next().unwrap_or_default().to_string())
    };
    assert_eq!(counter_line(&ps_before), counter_line(&ps_after));
    assert!(ok(&warden(s, &["ls"])).contains("running"));
    // Both are in the sandbox's audit log, with who asked.
    let paused = events_named(s, "busy", "paused");
    assert_eq!(paused.len(), 1, "{paused:?}");
    assert_eq!(paused[0]["by"], "the owner (cli)");
    let resumed = events_named(s, "busy", "resumed");
    assert_eq!(resumed.len(), 1, "{resumed:?}");
    assert!(resumed[0]["paused_ms"].as_u64().unwrap() >= 1500);
}

#[test]
fn an_exec_into_a_paused_sandbox_is_refused_and_says_how_to_go_on() {
    let state = TempDir::new("pause-exec");
    let s = state.path();
    ok(&warden(s, &["create", "frozen", "--start"]));
    let _stop = Stopper(s, "frozen");
    ok(&warden(s, &["pause", "frozen"]));
    let refused = warden(s, &["exec", "frozen", "--", "echo", "ran"]);
    assert_eq!(code(&refused), 125, "{}", stderr(&refused));
    assert_eq!(stdout(&refused), "");
    let said = stderr(&refused);
    assert!(
        said.contains("is paused") && said.contains("warden resume frozen"),
        "{said}"
    );
    // A paused sandbox stops when asked (thawed first, then ended).
    ok(&warden(s, &["stop", "--time", "2s", "frozen"]));
    assert!(ok(&warden(s, &["ls"])).contains("stopped"));
    let resume = warden(s, &["resume", "frozen"]);
    assert_eq!(code(&resume), 125);
    assert!(
        stderr(&resume).contains("not running"),
        "{}",
        stderr(&resume)
    );
}

#[test]
fn a_paused_sandboxs_ttl_stands_still_until_it_is_resumed() {
    let state = TempDir::new("pause-ttl");
    let s = state.path();
    ok(&warden(s, &["create", "ttl", "--ttl", "3s", "--start"]));
    let _stop = Stopper(s, "ttl");
    ok(&warden(s, &["pause", "ttl"]));
    std::thread::sleep(Duration::from_secs(5));
    let ls = ok(&warden(s, &["ls"]));
    assert!(ls.contains("paused"), "the TTL ran while paused: {ls}");
    ok(&warden(s, &["resume", "ttl"]));
    // About 3 s of its TTL were left when it was paused: it still runs
    // right after, and stops within them.
    assert_eq!(ok(&warden(s, &["exec", "ttl", "--", "echo", "up"])), "up\n");
    wait_until("the TTL to stop it", Duration::from_secs(20), || {
        ok(&warden(s, &["ls"])).contains("stopped")
    });
}

#[test]
fn a_paused_sandbox_stays_paused_across_a_daemon_restart_and_resumes_through_it() {
    if !curl_available() {
        return skip("curl is not installed");
    }
    let state = TempDir::new("pause-daemon");
    let s = state.path();
    let mut d = Daemon::start(s, false);
    let (st, b) = call(
        &d,
        "POST",
        "/v1/sandboxes",
        Some(r#"{"name":"kept"}"#),
        None,
    );
    assert_eq!(st, 201, "{b}");
    ok(&warden(
        s,
        &["exec", "-d", "kept", "--", "python3", "-c", COUNTER],
    ));
    wait_until("the counter to count", Duration::from_secs(20), || {
        count(s, "kept") > 0
    });
    let (st, b) = call(&d, "POST", "/v1/sandboxes/kept/pause", None, None);
    assert_eq!(st, 200, "{b}");
    assert_eq!(json(&b)["state"], "paused");
    let at_pause = count(s, "kept");

    d.kill9();
    let d = Daemon::start(s, false);
    let (st, b) = call(&d, "GET", "/v1/sandboxes/kept", None, None);
    assert_eq!(st, 200, "{b}");
    assert_eq!(json(&b)["state"], "paused", "{b}");
    assert_eq!(count(s, "kept"), at_pause);
    // Commands are refused while it is paused, with a code of their own.
    let (st, b) = call(
        &d,
        "POST",
        "/v1/sandboxes/kept/exec",
        Some(r#"{"argv":["true"]}"#),
        None,
    );
    assert_eq!(st, 409, "{b}");
    assert_eq!(json(&b)["code"], "paused", "{b}");
    let (st, b) = call(&d, "POST", "/v1/sandboxes/kept/pause", None, None);
    assert_eq!(st, 409, "{b}");

    let (st, b) = call(&d, "POST", "/v1/sandboxes/kept/resume", None, None);
    assert_eq!(st, 200, "{b}");
    assert_eq!(json(&b)["state"], "running");
    wait_until("the counter to go on", Duration::from_secs(10), || {
        count(s, "kept") > at_pause
    });
    let (st, b) = call(
        &d,
        "POST",
        "/v1/sandboxes/kept/exec",
        Some(r#"{"argv":["echo","back"]}"#),
        None,
    );
    assert_eq!(st, 200, "{b}");
    assert_eq!(json(&b)["stdout"], "back\n");
    let (st, b) = call(&d, "POST", "/v1/sandboxes/kept/resume", None, None);
    assert_eq!(st, 409, "{b}");
    // The command line through the daemon (`--host`) says the same.
    ok(&warden(s, &["--host", "unix", "pause", "kept"]));
    let (_, b) = call(&d, "GET", "/v1/sandboxes/kept", None, None);
    assert_eq!(json(&b)["state"], "paused", "{b}");
    ok(&warden(s, &["--host", "unix", "resume", "kept"]));
    let (_, b) = call(&d, "GET", "/v1/sandboxes/kept", None, None);
    assert_eq!(json(&b)["state"], "running", "{b}");
}

#[test]
fn pausing_needs_the_lifecycle_scope_and_a_sandboxs_own_token_cannot_pause_it() {
    if !curl_available() {
        return skip("curl is not installed");
    }
    let state = TempDir::new("pause-tokens");
    let s = state.path();
    let d = Daemon::start(s, true);
    let writer = api_token(&d, "writer", &["sandboxes:write"], None);
    let (st, b) = call_on(
        &d,
        true,
        "POST",
        "/v1/sandboxes",
        Some(r#"{"name":"mine"}"#),
        Some(&writer),
    );
    assert_eq!(st, 201, "{b}");
    let reader = api_token(&d, "reader", &["sandboxes:read", "exec"], None);
    let own = api_token(&d, "own", &["sandboxes:write", "exec"], Some("mine"));
    // Another token with the scope does not see a sandbox it did not make.
    let other = api_token(&d, "other", &["sandboxes:write"], None);
    let (st, b) = call_on(
        &d,
        true,
        "POST",
        "/v1/sandboxes/mine/pause",
        None,
        Some(&other),
    );
    assert_eq!(st, 404, "{b}");
    for t in [&reader, &own] {
        let (st, b) = call_on(&d, true, "POST", "/v1/sandboxes/mine/pause", None, Some(t));
        assert_eq!(st, 403, "{b}");
    }
    let (st, b) = call(&d, "GET", "/v1/sandboxes/mine", None, None);
    assert_eq!(json(&b)["state"], "running", "{st} {b}");
    let (st, b) = call_on(
        &d,
        true,
        "POST",
        "/v1/sandboxes/mine/pause",
        None,
        Some(&writer),
    );
    assert_eq!(st, 200, "{b}");
    let paused = events_named(s, "mine", "paused");
    assert!(
        paused[0]["by"].as_str().unwrap().starts_with("token "),
        "{paused:?}"
    );
    let (st, b) = call_on(
        &d,
        true,
        "POST",
        "/v1/sandboxes/mine/resume",
        None,
        Some(&writer),
    );
    assert_eq!(st, 200, "{b}");
}

#[test]
fn a_rootless_sandbox_pauses_with_a_delegated_freezer_and_is_told_why_not_without_one() {
    if !is_root() {
        return skip("making a delegation for the warden-test user needs root");
    }
    if !v1_hierarchies()
        .iter()
        .any(|h| h.file_name().is_some_and(|n| n == "freezer"))
    {
        return skip("no cgroup v1 freezer hierarchy here");
    }
    let Some(who) = Unprivileged::get() else {
        return skip("cannot get an unprivileged user to run warden as");
    };
    let state = TempDir::new("pause-rootless");
    who.own(state.path());
    let bin = who.bin.to_str().unwrap().to_string();
    let run = |args: &[&str]| -> Output {
        who.command(&bin)
            .args(args)
            .env("WARDEN_STATE_DIR", state.path().join("warden"))
            .output()
            .unwrap()
    };
    let delegated = v1_hierarchies()
        .iter()
        .any(|h| h.join(format!("warden-user-{}", who.uid)).exists());
    if !delegated {
        // Without a delegation: no freezer, and the refusal says why.
        let out = run(&["create", "bare", "--start"]);
        if !out.status.success() && stderr(&out).contains("namespaces") {
            return skip(&format!("user namespaces unavailable: {}", stderr(&out)));
        }
        ok(&out);
        let refused = run(&["pause", "bare"]);
        assert_eq!(code(&refused), 125);
        assert!(
            stderr(&refused).contains("freezer") && stderr(&refused).contains("warden doctor"),
            "{}",
            stderr(&refused)
        );
        ok(&run(&["exec", "bare", "--", "true"]));
        ok(&run(&["stop", "--time", "1s", "bare"]));
    }

    let _d = Delegation::make(who.uid, who.gid);
    ok(&run(&["create", "held", "--start"]));
    let stop_held = || {
        let _ = run(&["stop", "--time", "1s", "held"]);
    };
    let dirs = sandbox_cgroups(state.path(), "held");
    let freezer = dirs
        .iter()
        .find(|d| d.join("freezer.state").exists())
        .cloned();
    let Some(freezer) = freezer else {
        stop_held();
        return skip("the delegated sandbox has no v1 freezer directory");
    };
    ok(&run(&[
        "exec", "-d", "held", "--", "python3", "-c", COUNTER,
    ]));
    wait_until("the counter to count", Duration::from_secs(20), || {
        count(state.path(), "held") > 0
    });
    ok(&run(&["pause", "held"]));
    assert_eq!(
        std::fs::read_to_string(freezer.join("freezer.state"))
            .unwrap()
            .trim(),
        "FROZEN"
    );
    let at_pause = count(state.path(), "held");
    std::thread::sleep(Duration::from_millis(800));
    assert_eq!(count(state.path(), "held"), at_pause);
    ok(&run(&["resume", "held"]));
    wait_until("the counter to go on", Duration::from_secs(10), || {
        count(state.path(), "held") > at_pause
    });
    stop_held();
}
