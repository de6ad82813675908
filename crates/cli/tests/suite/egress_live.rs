//! A running sandbox's allowlist changed live with `warden egress`, against
//! real listeners on the host's loopback that record every connection that
//! reaches them: a name refused until it is allowed, then reached by the
//! same command; an open connection cut within a second of its name being
//! removed, and the next one refused; bad entries refused with nothing
//! changed; changes kept across a restart.

use crate::common::tcp::Holder;
use crate::common::*;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Python in the sandbox: resolve `live.test`, connect to its port with a
/// TLS ClientHello for it, and wait for the other end. Prints `resolved`
/// or `nxdomain`, then `open` once connected, then `closed` when the
/// connection ends.
const PY_CONNECT: &str = r#"import socket, ssl, sys, time
port = int(sys.argv[1])
try:
    ip = socket.gethostbyname('live.test'); print('resolved', flush=True)
except OSError:
    ip = '198.18.0.1'; print('nxdomain', flush=True)
ctx = ssl.create_default_context(); i, o = ssl.MemoryBIO(), ssl.MemoryBIO()
t = ctx.wrap_bio(i, o, server_hostname='live.test')
try: t.do_handshake()
except ssl.SSLWantReadError: pass
try:
    s = socket.create_connection((ip, port), timeout=5); s.sendall(o.read())
    print('open', flush=True)
    s.settimeout(float(sys.argv[2]))
    data = s.recv(100)
    print('closed', data, flush=True)
except OSError as e:
    print('closed', e, flush=True)
"#;

fn connect(state: &std::path::Path, port: u16, hold_secs: u32) -> std::process::Output {
    warden(
        state,
        &[
            "exec",
            "live",
            "--",
            "python3",
            "-c",
            PY_CONNECT,
            &port.to_string(),
            &hold_secs.to_string(),
        ],
    )
}

fn create(state: &std::path::Path) {
    ok(&warden(
        state,
        &[
            "create",
            "live",
            "--allow-domain",
            "other.test",
            "--add-host",
            "live.test=127.0.0.1",
        ],
    ));
    ok(&warden(state, &["start", "live"]));
}

#[test]
fn a_name_allowed_live_is_reached_by_the_same_command_that_was_refused() {
    if !egress_available() {
        return;
    }
    let state = TempDir::new("egress-live-allow");
    let up = Holder::start();
    create(state.path());
    let entry = format!("live.test:{}", up.port);
    let before = connect(state.path(), up.port, 1);
    let s = stdout(&before);
    assert!(s.contains("nxdomain"), "{s} {}", stderr(&before));
    assert_eq!(
        up.arrivals(),
        0,
        "a name not on the list reached its server"
    );
    let list = ok(&warden(
        state.path(),
        &["egress", "live", "--allow", &entry],
    ));
    assert!(list.lines().any(|l| l == entry), "{list}");
    assert!(list.lines().any(|l| l == "other.test"), "{list}");
    let after = connect(state.path(), up.port, 1);
    let s = stdout(&after);
    assert!(
        s.contains("resolved") && s.contains("open"),
        "{s} {}",
        stderr(&after)
    );
    wait_until("the arrival", Duration::from_secs(5), || up.arrivals() == 1);
    // The change is on the sandbox's record.
    let log = events(&sandbox_dir(state.path(), "live").join("audit.jsonl"));
    let changed: Vec<_> = log
        .iter()
        .filter(|e| e["event"] == "egress_changed")
        .collect();
    assert_eq!(changed.len(), 1, "{changed:?}");
    assert_eq!(changed[0]["added"][0], entry.as_str());
    assert!(changed[0]["by"].as_str().unwrap().contains("warden egress"));
    // And it holds across a restart.
    ok(&warden(state.path(), &["stop", "--time", "1s", "live"]));
    ok(&warden(state.path(), &["start", "live"]));
    let list = ok(&warden(state.path(), &["egress", "live"]));
    assert!(list.lines().any(|l| l == entry), "{list}");
    ok(&warden(state.path(), &["stop", "--time", "1s", "live"]));
}

#[test]
fn removing_a_name_cuts_its_open_connection_within_a_second_and_refuses_the_next() {
    if !egress_available() {
        return;
    }
    let state = TempDir::new("egress-live-cut");
    let up = Holder::start();
    create(state.path());
    let entry = format!("live.test:{}", up.port);
    ok(&warden(
        state.path(),
        &["egress", "live", "--allow", &entry],
    ));
    // A connection the sandbox holds open (the server never answers).
    let mut held = Command::new(warden_bin())
        .args(["exec", "live", "--", "python3", "-c", PY_CONNECT])
        .arg(up.port.to_string())
        .arg("120")
        .env("WARDEN_STATE_DIR", state.path().join("warden"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(held.stdout.take().unwrap()).lines();
    assert_eq!(lines.next().unwrap().unwrap(), "resolved");
    assert_eq!(lines.next().unwrap().unwrap(), "open");
    wait_until("the arrival", Duration::from_secs(5), || up.arrivals() == 1);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for l in lines.map_while(Result::ok) {
            let _ = tx.send((Instant::now(), l));
        }
    });
    std::thread::sleep(Duration::from_millis(300));
    assert!(rx.try_recv().is_err(), "the connection ended by itself");
    let removed_at = Instant::now();
    let list = ok(&warden(state.path(), &["egress", "live", "--deny", &entry]));
    assert!(!list.lines().any(|l| l == entry), "{list}");
    let (at, line) = rx
        .recv_timeout(Duration::from_secs(5))
        .expect("the open connection was not cut");
    assert!(line.starts_with("closed"), "{line}");
    assert!(
        at.duration_since(removed_at) < Duration::from_secs(1),
        "cut after {:?}",
        at.duration_since(removed_at)
    );
    let _ = held.wait();
    // A new one is refused: the name no longer resolves, and a connection
    // to its old address reaches nothing.
    let again = connect(state.path(), up.port, 1);
    assert!(stdout(&again).contains("nxdomain"), "{}", stdout(&again));
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(up.arrivals(), 1, "a removed name reached its server again");
    let log = events(&sandbox_dir(state.path(), "live").join("audit.jsonl"));
    assert!(
        log.iter()
            .any(|e| e["event"] == "egress_changed" && e["closed"] == 1),
        "the cut is not on the record"
    );
    assert!(
        log.iter()
            .any(|e| e["event"] == "connection_closed" && e["name"] == "live.test"),
        "the cut connection's end is not on the record"
    );
    ok(&warden(state.path(), &["stop", "--time", "1s", "live"]));
}

#[test]
fn bad_entries_are_refused_and_change_nothing() {
    if !egress_available() {
        return;
    }
    let state = TempDir::new("egress-live-bad");
    create(state.path());
    for (args, says) in [
        (
            vec!["--allow", "fine.test", "--allow", "exa mple.test"],
            "--allow exa mple.test",
        ),
        (vec!["--allow", "https://x.test/"], "looks like a URL"),
        (vec!["--allow", "host.warden.internal"], "--allow-host-port"),
        (
            vec!["--allow", "fine.test", "--deny", "never.test"],
            "--deny never.test",
        ),
    ] {
        let mut a = vec!["egress", "live"];
        a.extend(args.iter());
        let out = warden(state.path(), &a);
        assert_eq!(code(&out), 125, "{args:?}: {}", stdout(&out));
        assert!(stderr(&out).contains(says), "{args:?}: {}", stderr(&out));
    }
    let list = ok(&warden(state.path(), &["egress", "live"]));
    assert_eq!(list.trim(), "other.test");
    assert!(
        !events(&sandbox_dir(state.path(), "live").join("audit.jsonl"))
            .iter()
            .any(|e| e["event"] == "egress_changed")
    );
    ok(&warden(state.path(), &["stop", "--time", "1s", "live"]));
}

#[test]
fn removing_a_secrets_host_cuts_its_terminated_connection_too() {
    use crate::common::upstream::{RawUpstream, TestCa};
    if !egress_available() {
        return;
    }
    let state = TempDir::new("egress-live-secret");
    let ca = TestCa::new();
    // A TLS server that takes the request and never answers.
    let up = RawUpstream::start(&ca, &["api.secret.test"], |_| {
        std::thread::sleep(Duration::from_secs(60));
        Vec::new()
    });
    let entry = format!("api.secret.test:{}", up.port);
    let with_token = |args: &[&str]| {
        Command::new(warden_bin())
            .args(args)
            .env("WARDEN_STATE_DIR", state.path().join("warden"))
            .env("TOKEN", "ghp_livecutvalue0123456789")
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    ok(&with_token(&[
        "create",
        "sec",
        "--secret",
        &format!("TOKEN@{entry}"),
        "--add-host",
        "api.secret.test=127.0.0.1",
        "--upstream-ca",
        &ca.pem_path(),
    ]));
    ok(&with_token(&["start", "sec"]));
    let mut held = Command::new(warden_bin())
        .args(["exec", "sec", "--", "sh", "-c"])
        .arg(format!(
            "curl -sS --max-time 60 -H \"Authorization: Bearer $TOKEN\" https://{entry}/held; echo curl-ended $?"
        ))
        .env("WARDEN_STATE_DIR", state.path().join("warden"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_until("the request upstream", Duration::from_secs(10), || {
        up.requests().len() == 1
    });
    let out = held.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for l in BufReader::new(out).lines().map_while(Result::ok) {
            let _ = tx.send((Instant::now(), l));
        }
    });
    std::thread::sleep(Duration::from_millis(300));
    assert!(rx.try_recv().is_err(), "the request ended by itself");
    let removed_at = Instant::now();
    ok(&warden(state.path(), &["egress", "sec", "--deny", &entry]));
    let (at, line) = rx
        .recv_timeout(Duration::from_secs(5))
        .expect("the terminated connection was not cut");
    assert!(
        line.starts_with("curl-ended") && !line.ends_with(" 0"),
        "{line}"
    );
    assert!(
        at.duration_since(removed_at) < Duration::from_secs(1),
        "cut after {:?}",
        at.duration_since(removed_at)
    );
    let _ = held.wait();
    let list = ok(&warden(state.path(), &["egress", "sec"]));
    assert!(!list.contains("api.secret.test"), "{list}");
    ok(&warden(state.path(), &["stop", "--time", "1s", "sec"]));
}

#[test]
fn a_named_sandboxs_questions_are_listed_and_answered_with_warden_approvals() {
    if !egress_available() {
        return;
    }
    let state = TempDir::new("egress-live-ask");
    let up = Holder::start();
    let w = |args: &[&str]| {
        Command::new(warden_bin())
            .args(args)
            .env("WARDEN_STATE_DIR", state.path().join("warden"))
            .env("WARDEN_TEST_ASK_LOOPBACK", "1")
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    ok(&w(&[
        "create",
        "asks",
        "--ask",
        "--add-host",
        "live.test=127.0.0.1",
    ]));
    ok(&w(&["start", "asks"]));
    let connect = || {
        Command::new(warden_bin())
            .args(["exec", "asks", "--", "python3", "-c", PY_CONNECT])
            .arg(up.port.to_string())
            .arg("1")
            .env("WARDEN_STATE_DIR", state.path().join("warden"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .unwrap()
    };
    let question = || -> serde_json::Value {
        let mut q = serde_json::Value::Null;
        wait_until("the question", Duration::from_secs(10), || {
            let out = ok(&w(&["approvals", "--json"]));
            q = serde_json::from_str::<serde_json::Value>(&out).unwrap()[0].clone();
            !q.is_null()
        });
        q
    };
    let mut first = connect();
    let q = question();
    assert_eq!(
        (q["name"].as_str(), q["port"].as_u64()),
        (Some("live.test"), Some(up.port as u64))
    );
    let listed = ok(&w(&["approvals"]));
    assert!(
        listed.contains(q["id"].as_str().unwrap()) && listed.contains("live.test"),
        "{listed}"
    );
    let id = q["id"].as_str().unwrap();
    let out = w(&["approvals", id, "perhaps"]);
    assert_eq!(code(&out), 125);
    assert_eq!(up.arrivals(), 0);
    ok(&w(&["approvals", id, "allow_once"]));
    wait_until("the arrival", Duration::from_secs(5), || up.arrivals() == 1);
    let again = w(&["approvals", id, "deny"]);
    assert_eq!(code(&again), 125);
    assert!(
        stderr(&again).contains("answered already"),
        "{}",
        stderr(&again)
    );
    let _ = first.wait();
    // Denied: nothing arrives.
    let mut second = connect();
    let q = question();
    ok(&w(&["approvals", q["id"].as_str().unwrap(), "deny"]));
    let _ = second.wait();
    assert_eq!(up.arrivals(), 1, "a denied connection reached the server");
    ok(&w(&["stop", "--time", "1s", "asks"]));
}
