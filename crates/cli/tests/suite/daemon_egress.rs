//! A running sandbox's allowlist changed through `PATCH
//! /v1/sandboxes/{id}/egress`, and ask-mode questions answered through
//! `/v1/approvals`, over real HTTP against the built daemon, with real
//! listeners on the host's loopback that record every connection that
//! reaches them.

use crate::common::daemon::*;
use crate::common::tcp::Holder;
use crate::common::*;
use std::path::Path;
use std::time::{Duration, Instant};

/// A daemon in `state` whose sandboxes may ask about names pinned to the
/// host's loopback (as a test's listeners are).
fn asking_daemon(state: &Path) -> Daemon {
    Daemon::start_with(
        state,
        false,
        &[],
        &[("WARDEN_TEST_ASK_LOOPBACK", Path::new("1"))],
    )
}

/// Python in the sandbox: resolve NAME, connect to PORT with a TLS
/// ClientHello for it, wait up to HOLD seconds for the other end. Prints
/// `resolved` or `nxdomain`, `open` once connected, then `closed`.
const PY_CONNECT: &str = r#"import socket, ssl, sys
name, port, hold = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
try:
    ip = socket.gethostbyname(name); print('resolved', flush=True)
except OSError:
    ip = '198.18.0.1'; print('nxdomain', flush=True)
ctx = ssl.create_default_context(); i, o = ssl.MemoryBIO(), ssl.MemoryBIO()
t = ctx.wrap_bio(i, o, server_hostname=name)
try: t.do_handshake()
except ssl.SSLWantReadError: pass
try:
    s = socket.create_connection((ip, port), timeout=150); s.sendall(o.read())
    print('open', flush=True)
    s.settimeout(hold)
    data = s.recv(100)
    print('closed', data, flush=True)
except OSError as e:
    print('closed', e, flush=True)
"#;

fn connect_body(name: &str, port: u16, hold: u32, background: bool) -> String {
    serde_json::json!({
        "argv": ["python3", "-c", PY_CONNECT, name, port.to_string(), hold.to_string()],
        "background": background,
    })
    .to_string()
}

/// Wait for an exec started in the background to end; its exit status.
fn wait_exec(d: &Daemon, sandbox: &str, id: &str, within: Duration) -> Option<i64> {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        let (s, b) = call(
            d,
            "GET",
            &format!("/v1/sandboxes/{sandbox}/execs/{id}"),
            None,
            None,
        );
        assert_eq!(s, 200, "{b}");
        if let Some(status) = json(&b)["exit_status"].as_i64() {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

fn output(d: &Daemon, sandbox: &str, id: &str) -> String {
    let (_, b) = call(
        d,
        "GET",
        &format!("/v1/sandboxes/{sandbox}/execs/{id}/output"),
        None,
        None,
    );
    b
}

#[test]
// One sandbox's allowlist changed step by step: the listener's arrival count and the
// list each step expects follow from the steps before it (refused, allowed by a token,
// by the owner, a held connection cut on removal, the CLI as a client).
#[allow(clippy::too_many_lines)] // one allowlist's changes in order, each after the last
fn the_api_allows_a_name_live_and_its_removal_cuts_the_open_connection() {
    if !curl_available() {
        return skip("curl is not installed");
    }
    if !egress_available() {
        return;
    }
    let state = TempDir::new("api-egress");
    let d = Daemon::start(state.path(), true);
    let up = Holder::start();
    let (s, b) = call(
        &d,
        "POST",
        "/v1/sandboxes",
        Some(
            r#"{"name":"net","spec":{"egress":{"domains":["other.test"],"hosts":{"live.test":"127.0.0.1"}}}}"#,
        ),
        None,
    );
    assert_eq!(s, 201, "{b}");
    let entry = format!("live.test:{}", up.port);
    let run = |hold: u32, background: bool| {
        call(
            &d,
            "POST",
            "/v1/sandboxes/net/exec",
            Some(&connect_body("live.test", up.port, hold, background)),
            None,
        )
    };
    // Not on the list: refused, nothing arrives.
    let (s, b) = run(1, false);
    assert_eq!(s, 200, "{b}");
    assert!(
        json(&b)["stdout"].as_str().unwrap().contains("nxdomain"),
        "{b}"
    );
    assert_eq!(up.arrivals(), 0);
    // Bad entries: 400 with the field, and nothing changes.
    let (s, b) = call(
        &d,
        "PATCH",
        "/v1/sandboxes/net/egress",
        Some(&format!(r#"{{"allow":["{entry}","exa mple.test"]}}"#)),
        None,
    );
    assert_eq!(s, 400, "{b}");
    assert_eq!(json(&b)["field"], "/allow/1", "{b}");
    let (s, b) = call(
        &d,
        "PATCH",
        "/v1/sandboxes/net/egress",
        Some(&format!(
            r#"{{"allow":["{entry}"],"remove":["never.test"]}}"#
        )),
        None,
    );
    assert_eq!(s, 400, "{b}");
    assert_eq!(json(&b)["field"], "/remove/0", "{b}");
    let (s, b) = call(&d, "PATCH", "/v1/sandboxes/net/egress", Some("{}"), None);
    assert_eq!(s, 200, "{b}");
    assert_eq!(json(&b)["allow"], serde_json::json!(["other.test"]));
    // Tokens: another sandbox's, and even this sandbox's own, may not
    // change its network; one without sandboxes:write neither.
    ok(&warden(state.path(), &["create", "elsewhere"]));
    for t in [
        token_for(state.path(), "theirs", &["sandboxes:write"], "elsewhere"),
        token_for(state.path(), "its-own", &["sandboxes:write"], "net"),
        token(state.path(), "reader", &["sandboxes:read", "exec"]),
    ] {
        let body = format!(r#"{{"allow":["{entry}"]}}"#);
        let (s, b) = call_on(
            &d,
            true,
            "PATCH",
            "/v1/sandboxes/net/egress",
            Some(&body),
            Some(&t),
        );
        assert_eq!(s, 403, "{b}");
    }
    // Allowed for a token holder: on the list, but a token's entry
    // reaches public addresses only, never the owner's pin.
    // An admin token reaches the owner's sandbox (any other token only
    // the sandboxes it made), and is still a token: a caller.
    let writer = token(state.path(), "writer", &["admin"]);
    let (s, b) = call_on(
        &d,
        true,
        "PATCH",
        "/v1/sandboxes/net/egress",
        Some(&format!(r#"{{"allow":["{entry}"]}}"#)),
        Some(&writer),
    );
    assert_eq!(s, 200, "{b}");
    assert_eq!(json(&b)["allow"], serde_json::json!(["other.test", entry]));
    let (s, b) = run(1, false);
    assert_eq!(s, 200, "{b}");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        up.arrivals(),
        0,
        "a token's entry used the owner's pin: {b}"
    );
    // The owner's own entry: the same command now reaches the listener.
    let (s, b) = call(
        &d,
        "PATCH",
        "/v1/sandboxes/net/egress",
        Some(&format!(r#"{{"allow":["{entry}"]}}"#)),
        None,
    );
    assert_eq!(s, 200, "{b}");
    let (s, b) = run(1, false);
    assert_eq!(s, 200, "{b}");
    assert!(json(&b)["stdout"].as_str().unwrap().contains("open"), "{b}");
    wait_until("the arrival", Duration::from_secs(5), || up.arrivals() == 1);
    // A long-lived connection, cut within a second of its removal.
    let (s, b) = run(120, true);
    assert_eq!(s, 202, "{b}");
    let exec = json(&b)["id"].as_str().unwrap().to_string();
    wait_until("the held arrival", Duration::from_secs(5), || {
        up.arrivals() == 2
    });
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        wait_exec(&d, "net", &exec, Duration::ZERO),
        None,
        "it ended by itself"
    );
    let (s, b) = call(
        &d,
        "PATCH",
        "/v1/sandboxes/net/egress",
        Some(&format!(r#"{{"remove":["{entry}"]}}"#)),
        None,
    );
    assert_eq!(s, 200, "{b}");
    assert_eq!(json(&b)["allow"], serde_json::json!(["other.test"]));
    let removed = Instant::now();
    assert_eq!(
        wait_exec(&d, "net", &exec, Duration::from_secs(1)),
        Some(0),
        "the open connection was not cut within a second: {}",
        output(&d, "net", &exec)
    );
    assert!(removed.elapsed() < Duration::from_secs(1));
    assert!(output(&d, "net", &exec).contains("closed"));
    // And a new one is refused.
    let (_, b) = run(1, false);
    assert!(
        json(&b)["stdout"].as_str().unwrap().contains("nxdomain"),
        "{b}"
    );
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(up.arrivals(), 2, "a removed name reached its server again");
    // The CLI as the daemon's client says the same.
    let host = |args: &[&str]| {
        std::process::Command::new(warden_bin())
            .arg("--host")
            .arg(format!("unix:{}", d.socket.display()))
            .args(args)
            .output()
            .unwrap()
    };
    let out = host(&["egress", "net", "--allow", "exa mple.test"]);
    assert_eq!(code(&out), 125, "{}", stdout(&out));
    assert!(stderr(&out).contains("/allow/0"), "{}", stderr(&out));
    let out = host(&["egress", "net", "--allow", "via.host.test"]);
    assert_eq!(
        stdout(&out),
        "other.test\nvia.host.test\n",
        "{}",
        stderr(&out)
    );
    let out = host(&["egress", "net", "--deny", "via.host.test"]);
    assert_eq!(stdout(&out), "other.test\n", "{}", stderr(&out));
    let (_, b) = call(
        &d,
        "GET",
        "/v1/sandboxes/net/events?follow=false",
        None,
        None,
    );
    assert!(b.contains(r#""event":"egress_changed""#), "{b}");
    assert!(b.contains(r#""by":"token "#), "{b}");
}

#[test]
// One ask-mode sandbox's questions in order: each answer (a token's, the owner's
// allow_once, deny, allow_always, none) is judged by the listener's arrival count the
// answers before it left, and the record at the end holds them all.
#[allow(clippy::too_many_lines)] // one sandbox's questions in order, each after the last
fn questions_of_ask_mode_are_answered_over_the_api() {
    if !curl_available() {
        return skip("curl is not installed");
    }
    if !egress_available() {
        return;
    }
    let state = TempDir::new("api-ask");
    let d = Daemon::start_with(
        state.path(),
        true,
        &[],
        &[
            ("WARDEN_TEST_ASK_LOOPBACK", Path::new("1")),
            ("WARDEN_TEST_ASK_TIMEOUT_MS", Path::new("4000")),
        ],
    );
    let up = Holder::start();
    let never = Holder::start();
    let (s, b) = call(
        &d,
        "POST",
        "/v1/sandboxes",
        Some(
            r#"{"name":"ask","spec":{"egress":{"ask":true,"hosts":{"asked.test":"127.0.0.1","late.test":"127.0.0.1"}}}}"#,
        ),
        None,
    );
    assert_eq!(s, 201, "{b}");
    let start = |name: &str, port: u16| -> String {
        let (s, b) = call(
            &d,
            "POST",
            "/v1/sandboxes/ask/exec",
            Some(&connect_body(name, port, 1, true)),
            None,
        );
        assert_eq!(s, 202, "{b}");
        json(&b)["id"].as_str().unwrap().to_string()
    };
    // The owner's sandbox's questions: an admin token reaches them (a
    // token with only `approvals` answers those of sandboxes it made).
    let approver = token(state.path(), "approver", &["admin"]);
    let no_approvals = token(
        state.path(),
        "no-approvals",
        &["sandboxes:read", "sandboxes:write", "exec", "files"],
    );
    // The question, listed for whoever may answer it.
    let question = |expect_name: &str| -> serde_json::Value {
        let mut found = None;
        wait_until("the question", Duration::from_secs(5), || {
            let (s, b) = call_on(
                &d,
                true,
                "GET",
                "/v1/approvals?sandbox=ask",
                None,
                Some(&approver),
            );
            assert_eq!(s, 200, "{b}");
            found = json(&b)["approvals"].as_array().unwrap().first().cloned();
            found.is_some()
        });
        let q = found.unwrap();
        assert_eq!(q["name"], expect_name, "{q}");
        assert_eq!(q["sandbox"], "ask");
        assert_eq!(q["protocol"], "tls");
        q
    };
    let answer = |id: &str, decision: &str, t: &str| {
        call_on(
            &d,
            true,
            "POST",
            &format!("/v1/approvals/{id}"),
            Some(&format!(r#"{{"decision":"{decision}"}}"#)),
            Some(t),
        )
    };
    // The owner's answer, on their own socket.
    let owners_answer = |id: &str, decision: &str| {
        call(
            &d,
            "POST",
            &format!("/v1/approvals/{id}"),
            Some(&format!(r#"{{"decision":"{decision}"}}"#)),
            None,
        )
    };
    // A token holder's allow_once: that connection is let go, but reaches
    // public addresses only, never the owner's pin.
    let e1 = start("asked.test", up.port);
    let q1 = question("asked.test");
    assert_eq!(q1["port"], up.port);
    let id1 = q1["id"].as_str().unwrap().to_string();
    let (s, b) = call_on(&d, true, "GET", "/v1/approvals", None, Some(&no_approvals));
    assert_eq!(s, 403, "{b}");
    let (s, b) = answer(&id1, "allow_once", &no_approvals);
    assert_eq!(s, 403, "{b}");
    let (s, b) = answer(&id1, "allow_once", &approver);
    assert_eq!(s, 204, "{b}");
    let (s, b) = answer(&id1, "deny", &approver);
    assert_eq!(s, 409, "answered twice: {b}");
    assert!(wait_exec(&d, "ask", &e1, Duration::from_secs(5)).is_some());
    assert_eq!(up.arrivals(), 0, "a token's answer used the owner's pin");
    // The owner's allow_once: that connection goes through, and only that one.
    let e1 = start("asked.test", up.port);
    let q1 = question("asked.test");
    let (s, b) = owners_answer(q1["id"].as_str().unwrap(), "allow_once");
    assert_eq!(s, 204, "{b}");
    wait_until("the arrival", Duration::from_secs(5), || up.arrivals() == 1);
    assert!(wait_exec(&d, "ask", &e1, Duration::from_secs(5)).is_some());
    // The next connection asks again; denied, nothing arrives.
    let e2 = start("asked.test", up.port);
    let q2 = question("asked.test");
    assert_ne!(q2["id"], q1["id"]);
    let (s, b) = answer(q2["id"].as_str().unwrap(), "deny", &approver);
    assert_eq!(s, 204, "{b}");
    assert!(wait_exec(&d, "ask", &e2, Duration::from_secs(5)).is_some());
    assert_eq!(up.arrivals(), 1, "a denied connection reached the server");
    // allow_always: this one and later ones, unasked.
    let e3 = start("asked.test", up.port);
    let q3 = question("asked.test");
    let (s, b) = owners_answer(q3["id"].as_str().unwrap(), "allow_always");
    assert_eq!(s, 204, "{b}");
    wait_until("the arrival", Duration::from_secs(5), || up.arrivals() == 2);
    assert!(wait_exec(&d, "ask", &e3, Duration::from_secs(5)).is_some());
    let (s, b) = call(
        &d,
        "POST",
        "/v1/sandboxes/ask/exec",
        Some(&connect_body("asked.test", up.port, 1, false)),
        None,
    );
    assert_eq!(s, 200, "{b}");
    assert!(json(&b)["stdout"].as_str().unwrap().contains("open"), "{b}");
    wait_until("the unasked arrival", Duration::from_secs(5), || {
        up.arrivals() == 3
    });
    let (_, b) = call(&d, "PATCH", "/v1/sandboxes/ask/egress", Some("{}"), None);
    assert_eq!(
        json(&b)["allow"],
        serde_json::json!([format!("asked.test:{}", up.port)])
    );
    // Unanswered: denied when its time runs out, and then too late.
    let e4 = start("late.test", never.port);
    let q4 = question("late.test");
    wait_until(
        "the question's time to run out",
        Duration::from_secs(10),
        || {
            let (_, b) = call(&d, "GET", "/v1/approvals", None, None);
            json(&b)["approvals"].as_array().unwrap().is_empty()
        },
    );
    assert!(wait_exec(&d, "ask", &e4, Duration::from_secs(5)).is_some());
    assert_eq!(
        never.arrivals(),
        0,
        "an unanswered connection reached the server"
    );
    let (s, b) = answer(q4["id"].as_str().unwrap(), "allow_once", &approver);
    assert_eq!(s, 409, "{b}");
    let (s, b) = answer("ask.000000-99", "allow_once", &approver);
    assert_eq!(s, 404, "{b}");
    // Every question and answer is on the sandbox's record, which the
    // events stream carries.
    let (_, b) = call(
        &d,
        "GET",
        "/v1/sandboxes/ask/events?follow=false",
        None,
        None,
    );
    for needle in [
        r#""event":"ask""#,
        r#""decision":"allow_once""#,
        r#""decision":"deny""#,
        r#""decision":"allow_always""#,
        r#""decision":"timeout""#,
        r#""by":"token "#,
    ] {
        assert!(b.contains(needle), "{needle} not in {b}");
    }
    // A denial carries its code and field beside its words, and the API
    // says what would allow it by the body's JSON path, never a flag.
    assert!(
        b.contains(r#""code":"denied_when_asked","field":"egress.domains""#),
        "{b}"
    );
    assert!(
        b.contains(&format!(
            r#""remedy":"adding \"asked.test:{}\" to /egress/domains would allow it""#,
            up.port
        )),
        "{b}"
    );
    assert!(!b.contains("--allow-domain"), "{b}");
}

#[test]
fn the_events_stream_announces_a_question_as_it_is_asked() {
    if !curl_available() {
        return skip("curl is not installed");
    }
    if !egress_available() {
        return;
    }
    let state = TempDir::new("api-ask-sse");
    let d = asking_daemon(state.path());
    let up = Holder::start();
    let (s, b) = call(
        &d,
        "POST",
        "/v1/sandboxes",
        Some(r#"{"name":"sse","spec":{"egress":{"ask":true,"hosts":{"asked.test":"127.0.0.1"}}}}"#),
        None,
    );
    assert_eq!(s, 201, "{b}");
    // Following the stream before anything is asked.
    let mut follow = std::process::Command::new("curl")
        .args(["-sS", "-N", "--unix-socket"])
        .arg(&d.socket)
        .arg("http://warden/v1/sandboxes/sse/events")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let out = follow.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
            if line.contains(r#""event":"ask""#) {
                let _ = tx.send(line);
            }
        }
    });
    std::thread::sleep(Duration::from_millis(300));
    let (s, b) = call(
        &d,
        "POST",
        "/v1/sandboxes/sse/exec",
        Some(&connect_body("asked.test", up.port, 1, true)),
        None,
    );
    assert_eq!(s, 202, "{b}");
    let line = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("no ask event on the stream");
    let event = json(line.trim_start_matches("data:").trim());
    assert_eq!(event["name"], "asked.test");
    let (_, b) = call(&d, "GET", "/v1/approvals", None, None);
    assert_eq!(json(&b)["approvals"][0]["id"], event["question"]);
    let _ = follow.kill();
    let _ = follow.wait();
    let (s, _) = call(
        &d,
        "POST",
        &format!("/v1/approvals/{}", event["question"].as_str().unwrap()),
        Some(r#"{"decision":"deny"}"#),
        None,
    );
    assert_eq!(s, 204);
}

/// An `allow_always` answer given over the API is kept for the sandbox's
/// project, in warden's state (never the workspace): a later sandbox over
/// the same workspace reaches the name without a question.
#[test]
fn an_allow_always_answer_over_the_api_is_kept_for_the_project_and_its_next_sandbox_is_not_asked() {
    if !curl_available() {
        return skip("curl is not installed");
    }
    if !egress_available() {
        return;
    }
    let state = TempDir::new("api-always");
    let ws = TempDir::new("api-always-ws");
    let d = asking_daemon(state.path());
    let up = Holder::start();
    let create = |name: &str| {
        let (s, b) = call(
            &d,
            "POST",
            "/v1/sandboxes",
            Some(&format!(
                r#"{{"name":"{name}","workspace":"{}","spec":{{"egress":{{"ask":true,"hosts":{{"asked.test":"127.0.0.1"}}}}}}}}"#,
                ws.str()
            )),
            None,
        );
        assert_eq!(s, 201, "{b}");
    };
    create("first");
    let (s, b) = call(
        &d,
        "POST",
        "/v1/sandboxes/first/exec",
        Some(&connect_body("asked.test", up.port, 1, true)),
        None,
    );
    assert_eq!(s, 202, "{b}");
    let mut question = None;
    wait_until("the question", Duration::from_secs(10), || {
        let (_, b) = call(&d, "GET", "/v1/approvals", None, None);
        question = json(&b)["approvals"][0]["id"].as_str().map(str::to_string);
        question.is_some()
    });
    let (s, b) = call(
        &d,
        "POST",
        &format!("/v1/approvals/{}", question.unwrap()),
        Some(r#"{"decision":"allow_always"}"#),
        None,
    );
    assert_eq!(s, 204, "{b}");
    wait_until("the arrival", Duration::from_secs(5), || up.arrivals() == 1);
    // The grant is written as the allowed connection is recorded, which
    // may be a moment after it arrived: the file, not a write in flight
    // (a `.NAME.tmp` beside it).
    let grants = || -> Vec<std::path::PathBuf> {
        std::fs::read_dir(state.path().join("warden/grants"))
            .map(|rd| {
                rd.flatten()
                    .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
                    .map(|e| e.path())
                    .collect()
            })
            .unwrap_or_default()
    };
    let entry = format!("asked.test:{}", up.port);
    wait_until("the grant", Duration::from_secs(5), || {
        grants()
            .iter()
            .any(|g| std::fs::read_to_string(g).is_ok_and(|t| t.contains(&entry)))
    });
    assert_eq!(grants().len(), 1, "one grants file for the project");
    let written: Vec<_> = std::fs::read_dir(ws.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert!(
        written.is_empty(),
        "the grant was written into the project: {written:?}"
    );
    let (s, b) = call(&d, "DELETE", "/v1/sandboxes/first?force=true", None, None);
    assert_eq!(s, 204, "{b}");
    // The project's next sandbox: no question, the connection goes.
    create("second");
    let (s, b) = call(
        &d,
        "POST",
        "/v1/sandboxes/second/exec",
        Some(&connect_body("asked.test", up.port, 1, false)),
        None,
    );
    assert_eq!(s, 200, "{b}");
    assert!(json(&b)["stdout"].as_str().unwrap().contains("open"), "{b}");
    wait_until("the unasked arrival", Duration::from_secs(5), || {
        up.arrivals() == 2
    });
    let (_, b) = call(&d, "GET", "/v1/approvals", None, None);
    assert!(json(&b)["approvals"].as_array().unwrap().is_empty(), "{b}");
}
