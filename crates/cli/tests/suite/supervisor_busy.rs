//! A command past its sandbox's supervisor's connection bound, through the
//! real `warden serve` and the real command line: each running command
//! holds one of the supervisor's connections, so a caller the daemon's
//! ledger does not hold back (the owner's socket, a token whose ledger
//! allows more than the supervisor serves) could start more commands than
//! the supervisor takes. Such a command is refused as busy, in each
//! door's words (429 with `Retry-After` on the API, E2B's
//! `resource_exhausted`, an MCP tool error, one sentence on the command
//! line), with nothing started in the sandbox and no place kept in the
//! daemon's ledger. Before, the API answered 500 (an internal error) and
//! the other doors a bare error.
//!
//! The supervisor's bound is lowered to a few connections for the test
//! (`WARDEN_TEST_SUPERVISOR_CONNECTIONS`), so that a handful of commands
//! fill it as 256 would.

use crate::common::daemon::{self, call, call_on, header, http_on, json, Daemon};
use crate::common::*;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The supervisor's bound in these tests.
const BOUND: usize = 4;

/// A daemon (with TCP, and the E2B door on `e2b` when given) whose
/// supervisors serve [`BOUND`] connections, its configuration holding
/// `config`.
fn daemon_with(tag: &str, config: &str, e2b: Option<&str>) -> Option<(TempDir, Daemon)> {
    let args = e2b.map(|addr| vec!["--e2b", addr]).unwrap_or_default();
    daemon::with_supervisor_bound(tag, config, BOUND, &args)
}

/// `body` (an exec request) posted to `sandbox` by `token` over TCP, or by
/// the owner on the socket: status, headers, body.
fn exec(
    d: &Daemon,
    token: Option<&str>,
    sandbox: &str,
    body: &serde_json::Value,
) -> (u16, Vec<(String, String)>, String) {
    let path = format!("/v1/sandboxes/{sandbox}/exec");
    let body = body.to_string();
    match token {
        Some(t) => http_on(
            d.tcp.as_ref().unwrap(),
            "POST",
            &path,
            &[("authorization", &format!("Bearer {t}"))],
            Some(&body),
        ),
        None => {
            // On the owner's socket: curl's own head, read as http_on does.
            let out = Command::new("curl")
                .args(["-sS", "-i", "--max-time", "60", "-X", "POST"])
                .arg("--unix-socket")
                .arg(&d.socket)
                .args(["-H", "content-type: application/json", "--data-binary"])
                .arg(&body)
                .arg(format!("http://warden{path}"))
                .output()
                .unwrap();
            daemon::answer_of(&out.stdout)
        }
    }
}

/// Every connection of `sandbox`'s supervisor held by a background
/// command: `BOUND - 1` of `long`, and one of `short` (which may be
/// `long` too); their ids.
fn fill(
    d: &Daemon,
    token: Option<&str>,
    sandbox: &str,
    long: &[&str],
    short: &[&str],
) -> Vec<String> {
    let mut ids = Vec::new();
    for i in 0..BOUND {
        let argv = if i + 1 == BOUND { short } else { long };
        let (s, _, b) = exec(
            d,
            token,
            sandbox,
            &serde_json::json!({ "argv": argv, "background": true }),
        );
        assert_eq!(s, 202, "command {i} of {BOUND}: {b}");
        ids.push(json(&b)["id"].as_str().unwrap_or_default().to_string());
    }
    wait_until("the commands to run", Duration::from_secs(10), || {
        pids_running(long).len() >= BOUND - 1
    });
    ids
}

/// Files under the sandbox's kept command output.
fn kept_outputs(state: &Path, sandbox: &str) -> usize {
    std::fs::read_dir(sandbox_dir(state, sandbox).join("execs"))
        .map(|rd| rd.count())
        .unwrap_or(0)
}

/// A command past the bound, in the background, whole and streamed,
/// each refused as busy with nothing started.
fn refused_past_the_bound(d: &Daemon, token: Option<&str>, sandbox: &str, marker: &str) {
    let past = format!("echo {marker}; sleep 291.5");
    for body in [
        serde_json::json!({ "shell": past, "background": true }),
        serde_json::json!({ "shell": past }),
        serde_json::json!({ "shell": past, "stream": true }),
    ] {
        let (s, headers, b) = exec(d, token, sandbox, &body);
        // Before: 500 `internal`, "the supervisor refused: the supervisor
        // serves 4 connections at most; try again".
        assert_eq!(s, 429, "{body}: {b}");
        let problem = json(&b);
        assert_eq!(problem["code"], "too_many_sessions", "{b}");
        assert_eq!(problem["reason"], "busy", "{b}");
        assert_eq!(problem["details"]["bound"], "per_sandbox", "{b}");
        let message = problem["message"].as_str().unwrap_or_default();
        assert!(message.contains(sandbox), "{b}");
        assert!(
            header(&headers, "retry-after").is_some_and(|v| v.parse::<u64>().is_ok()),
            "no Retry-After: {headers:?}"
        );
    }
    assert!(
        pids_with_marker(marker).is_empty(),
        "a command past the bound was started"
    );
}

/// Once the short command ended, its place is taken again.
fn a_place_comes_back(d: &Daemon, token: Option<&str>, sandbox: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (s, _, b) = exec(d, token, sandbox, &serde_json::json!({ "argv": ["true"] }));
        if s == 200 {
            return;
        }
        assert_eq!(s, 429, "{b}");
        assert_eq!(json(&b)["reason"], "busy", "{b}");
        assert!(Instant::now() < deadline, "the place never came back: {b}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn the_owners_commands_past_the_supervisors_bound_are_refused_as_busy_with_nothing_started() {
    let Some((state, d)) = daemon_with("busy-owner", "", None) else {
        return;
    };
    let (s, b) = call(
        &d,
        "POST",
        "/v1/sandboxes",
        Some(r#"{"name":"full"}"#),
        None,
    );
    assert_eq!(s, 201, "{b}");
    let long = ["sleep", "292.5"];
    let _ = fill(&d, None, "full", &long, &["sleep", "3.5"]);
    let kept = kept_outputs(state.path(), "full");
    refused_past_the_bound(&d, None, "full", "busy-owner-past");
    // A file operation past the bound is refused the same way, not taken
    // for a conflict with the sandbox's state.
    let (s, b) = call(
        &d,
        "GET",
        "/v1/sandboxes/full/files/list?path=.",
        None,
        None,
    );
    assert_eq!(s, 429, "{b}");
    assert_eq!(json(&b)["reason"], "busy", "{b}");
    // No output was kept for a command that never started.
    assert_eq!(kept_outputs(state.path(), "full"), kept);
    a_place_comes_back(&d, None, "full");
    assert_eq!(pids_running(&long).len(), BOUND - 1);
    let (s, b) = call(&d, "DELETE", "/v1/sandboxes/full?force=true", None, None);
    assert_eq!(s, 204, "{b}");
}

#[test]
fn a_tokens_commands_past_the_supervisors_bound_are_refused_as_busy_and_keep_no_place_in_its_ledger(
) {
    // The token's ledger holds one place more than the supervisor serves:
    // every refused command must give its place back, or the next is
    // refused by the ledger (`per_token`), not by the supervisor.
    let config = format!("sessions:\n  per_token: {}\n", BOUND + 1);
    let Some((_state, d)) = daemon_with("busy-token", &config, None) else {
        return;
    };
    let token = daemon::worker_with_sandbox(&d, "busy", "crowded");
    let long = ["sleep", "290.5"];
    let ids = fill(&d, Some(&token), "crowded", &long, &long);
    for _ in 0..3 {
        refused_past_the_bound(&d, Some(&token), "crowded", "busy-token-past");
    }
    // What to do: end one of its commands. The signal is served while
    // every place is held (a place kept back serves it), and frees one.
    let (s, b) = call_on(
        &d,
        true,
        "POST",
        &format!("/v1/sandboxes/crowded/execs/{}/signal", ids[0]),
        Some(r#"{"signal":"SIGKILL"}"#),
        Some(&token),
    );
    assert_eq!(s, 204, "{b}");
    a_place_comes_back(&d, Some(&token), "crowded");
    assert_eq!(pids_running(&long).len(), BOUND - 1);
    let (s, b) = call(&d, "DELETE", "/v1/sandboxes/crowded?force=true", None, None);
    assert_eq!(s, 204, "{b}");
}

/// A Connect streaming call to the E2B door (`/process.Process/Start`),
/// its one request message enveloped as Connect's protocol has it; what
/// came back within `wait`.
fn e2b_start(addr: &str, sandbox: &str, access: &str, process: &serde_json::Value) -> String {
    let msg = process.to_string();
    let mut body = vec![0u8];
    body.extend_from_slice(&(msg.len() as u32).to_be_bytes());
    body.extend_from_slice(msg.as_bytes());
    let dir = TempDir::new("busy-e2b-body");
    let file = dir.path().join("body");
    std::fs::write(&file, body).unwrap();
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "20", "-X", "POST"])
        .args(["-H", "content-type: application/connect+json"])
        .args(["-H", &format!("x-access-token: {access}")])
        .args(["-H", &format!("e2b-sandbox-id: {sandbox}")])
        .args(["-H", "authorization: Basic dXNlcjo="])
        .arg("--data-binary")
        .arg(format!("@{}", file.display()))
        .arg(format!("http://{addr}/process.Process/Start"))
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn the_e2b_doors_processes_past_the_supervisors_bound_are_refused_as_resource_exhausted() {
    let addr = format!("127.0.0.1:{}", free_port());
    let config = "sessions:\n  per_token: 64\n";
    let Some((_state, d)) = daemon_with("busy-e2b", config, Some(&addr)) else {
        return;
    };
    let key = daemon::api_token(
        &d,
        "e2b",
        &["exec", "files", "sandboxes:read", "sandboxes:write"],
        None,
    );
    let (id, access) = daemon::e2b_sandbox_ids(&addr, &key);
    let long = ["sleep", "289.5"];
    let _ = fill(&d, None, &id, &long, &long);
    let marker = "busy-e2b-past";
    for pty in [
        None,
        Some(serde_json::json!({"size": {"cols": 80, "rows": 24}})),
    ] {
        let mut process = serde_json::json!({
            "process": {"cmd": "/bin/sh", "args": ["-c", format!("echo {marker}; sleep 288.5")]}
        });
        if let Some(p) = pty {
            process["pty"] = p;
        }
        let answer = e2b_start(&addr, &id, &access, &process);
        // Before: `internal` ("the supervisor refused: ...").
        assert!(
            answer.contains("\"resource_exhausted\""),
            "{process}: {answer}"
        );
        assert!(
            answer.contains(&format!("sandbox {id} runs as many processes")),
            "{answer}"
        );
        assert!(
            !answer.contains("\"pid\""),
            "a process was started: {answer}"
        );
    }
    assert!(
        pids_with_marker(marker).is_empty(),
        "a process past the bound was started"
    );
    let (s, b) = call(
        &d,
        "DELETE",
        &format!("/v1/sandboxes/{id}?force=true"),
        None,
        None,
    );
    assert_eq!(s, 204, "{b}");
}

#[test]
fn mcps_commands_past_the_supervisors_bound_are_tool_errors_saying_what_to_do() {
    use crate::common::mcp::{call, good, refused, runtime, stdio_client};
    let state = TempDir::new("busy-mcp");
    let bound = BOUND.to_string();
    let env = [("WARDEN_TEST_SUPERVISOR_CONNECTIONS", Path::new(&bound))];
    let marker = "busy-mcp-past";
    runtime().block_on(async {
        let c = stdio_client(state.path(), &[], &env).await;
        for _ in 0..BOUND {
            good(
                &call(
                    &c,
                    "start_command",
                    serde_json::json!({"argv": ["sleep", "287.5"]}),
                )
                .await,
            );
        }
        for tool in ["run_command", "start_command"] {
            let text = refused(
                &call(
                    &c,
                    tool,
                    serde_json::json!({"shell": format!("echo {marker}; sleep 286.5")}),
                )
                .await,
            );
            // Before: "failed (internal): the supervisor refused: ...".
            // The code, and the reason below it.
            assert!(text.contains("(too_many_sessions, busy)"), "{text}");
            assert!(
                text.contains("runs as many commands as it serves at once"),
                "{text}"
            );
            assert!(text.contains("poll_command"), "{text}");
        }
        let _ = c.cancel().await;
    });
    assert!(
        pids_with_marker(marker).is_empty(),
        "a command past the bound was started"
    );
    for name in daemon::sandboxes_on_disk(state.path()) {
        let _ = warden(state.path(), &["stop", "--time", "1s", &name]);
    }
}

#[test]
fn the_command_lines_exec_past_the_supervisors_bound_says_in_one_sentence_what_to_do() {
    let state = TempDir::new("busy-cli");
    let bound = BOUND.to_string();
    let warden_with = |args: &[&str]| {
        Command::new(warden_bin())
            .args(args)
            .env("WARDEN_STATE_DIR", state.path().join("warden"))
            .env("WARDEN_TEST_SUPERVISOR_CONNECTIONS", &bound)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let out = warden_with(&["create", "busy-cli"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let long = ["sleep", "285.5"];
    for _ in 0..BOUND {
        let out = warden_with(&["exec", "-d", "busy-cli", "--", long[0], long[1]]);
        assert!(out.status.success(), "{}", stderr(&out));
    }
    wait_until("the commands to run", Duration::from_secs(10), || {
        pids_running(&long).len() == BOUND
    });
    let marker = "busy-cli-past";
    let script = format!("echo {marker}; sleep 284.5");
    for detach in [false, true] {
        let mut args = vec!["exec"];
        if detach {
            args.push("-d");
        }
        args.extend(["busy-cli", "--", "sh", "-c", &script]);
        let out = warden_with(&args);
        assert!(!out.status.success(), "{}", stdout(&out));
        let err = stderr(&out);
        // Before: "warden: the supervisor refused: the supervisor serves 4
        // connections at most; try again".
        assert!(
            err.contains("sandbox busy-cli runs as many commands as its supervisor serves at once")
                && err.contains("`warden ps busy-cli`"),
            "{err}"
        );
        assert_eq!(err.trim().lines().count(), 1, "{err}");
    }
    assert!(
        pids_with_marker(marker).is_empty(),
        "a command past the bound was started"
    );
    let out = warden_with(&["stop", "--time", "1s", "busy-cli"]);
    assert!(out.status.success(), "{}", stderr(&out));
}

#[test]
fn a_supervisor_whose_kept_back_places_are_held_too_is_told_apart_as_busy_not_as_stuck_or_broken() {
    let Some((state, d)) = daemon_with("busy-kept", "", None) else {
        return;
    };
    let (s, b) = call(
        &d,
        "POST",
        "/v1/sandboxes",
        Some(r#"{"name":"kept"}"#),
        None,
    );
    assert_eq!(s, 201, "{b}");
    let _ = fill(&d, None, "kept", &["sleep", "283.5"], &["sleep", "283.5"]);
    // The places kept back past the bound (8) held by connections that
    // say nothing: each keeps its place for the hello's 5 s.
    let control = sandbox_dir(state.path(), "kept").join("control.sock");
    let silent: Vec<_> = (0..8)
        .map(|_| crate::common::sockets::seqpacket_to(&control))
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    // The supervisor refuses at once, typed: not a supervisor that does
    // not answer, not a broken socket.
    let t0 = Instant::now();
    match warden_runtime::client::Connection::open(&control) {
        Err(e) => assert!(e.is_busy(), "not told as busy: {e:?}"),
        Ok(_) => panic!("a connection past every place was served"),
    }
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
    // Through the API, a command and a file operation alike. Before, the
    // file operation was "sandbox kept is not running" (409).
    let (s, _, b) = exec(&d, None, "kept", &serde_json::json!({ "argv": ["true"] }));
    assert_eq!((s, json(&b)["reason"].clone()), (429, "busy".into()), "{b}");
    let (s, b) = call(
        &d,
        "GET",
        "/v1/sandboxes/kept/files/list?path=.",
        None,
        None,
    );
    assert_eq!((s, json(&b)["reason"].clone()), (429, "busy".into()), "{b}");
    drop(silent);
    let (s, b) = call(&d, "DELETE", "/v1/sandboxes/kept?force=true", None, None);
    assert_eq!(s, 204, "{b}");
}
