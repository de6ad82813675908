//! Held requests as the person deciding sees them, and as the server gets
//! them, through the real binary: a named sandbox's requests an ask rule
//! holds are listed by `warden approvals` (and `--json`) with what each
//! sends (its query's values, its body's length, type, digest and start,
//! the whole request's digest), so that twins that differ in one value
//! (or only in a header) are two questions a person can tell apart, and
//! each answer lets its own request reach the recording server and no
//! other. The approved
//! request goes on an upstream connection opened after the answer: a
//! server that closes connections idle for a second still gets it after a
//! person took two.

use super::ask::{answer, post_in, posted};
use crate::common::forge::reach;
use crate::common::upstream::{tls_server, TestCa};
use crate::common::*;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// An HTTPS server for `forge.test` on 127.0.0.1 (HTTP/2 and HTTP/1.1)
/// that records `METHOD path?query body` of each request it gets and
/// answers `ok`; with `idle`, it closes each connection that long after
/// it was opened (one answering a request first finishes it).
struct BodyRecorder {
    port: u16,
    seen: Arc<Mutex<Vec<String>>>,
    /// Connections accepted.
    connections: Arc<Mutex<usize>>,
    _runtime: tokio::runtime::Runtime,
}

impl BodyRecorder {
    fn start(ca: &TestCa, idle: Option<Duration>) -> BodyRecorder {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let connections = Arc::new(Mutex::new(0));
        let (s, c) = (seen.clone(), connections.clone());
        let (port, runtime) = tls_server(
            ca,
            &["forge.test"],
            &[b"h2", b"http/1.1"],
            (std::net::Ipv4Addr::LOCALHOST, 0),
            move |tls| {
                *c.lock().unwrap() += 1;
                let s = s.clone();
                async move {
                    let service = hyper::service::service_fn(
                        move |req: hyper::Request<hyper::body::Incoming>| {
                            let s = s.clone();
                            async move {
                                let line = format!(
                                    "{} {}",
                                    req.method(),
                                    req.uri()
                                        .path_and_query()
                                        .map(|p| p.to_string())
                                        .unwrap_or_default()
                                );
                                let body = req
                                    .into_body()
                                    .collect()
                                    .await
                                    .map(|b| b.to_bytes())
                                    .unwrap_or_default();
                                s.lock()
                                    .unwrap()
                                    .push(format!("{line} {}", String::from_utf8_lossy(&body)));
                                Ok::<_, std::convert::Infallible>(hyper::Response::new(Full::new(
                                    Bytes::from("ok\n"),
                                )))
                            }
                        },
                    );
                    let builder = hyper_util::server::conn::auto::Builder::new(
                        hyper_util::rt::TokioExecutor::new(),
                    );
                    let conn = builder.serve_connection(hyper_util::rt::TokioIo::new(tls), service);
                    tokio::pin!(conn);
                    let Some(idle) = idle else {
                        let _ = conn.await;
                        return;
                    };
                    tokio::select! {
                        _ = conn.as_mut() => return,
                        () = tokio::time::sleep(idle) => {}
                    }
                    conn.as_mut().graceful_shutdown();
                    let _ = conn.await;
                }
            },
        )
        .unwrap();
        BodyRecorder {
            port,
            seen,
            connections,
            _runtime: runtime,
        }
    }

    fn requests(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }
}

/// `warden ARGS` on the named sandboxes under `state`, whose held
/// requests wait 60 s for an answer (two questions are answered in turn
/// on a loaded machine).
fn w(state: &Path, args: &[&str]) -> Output {
    Command::new(warden_bin())
        .args(args)
        .env("WARDEN_STATE_DIR", state.join("warden"))
        .env("WARDEN_TEST_ASK_TIMEOUT_MS", "60000")
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// The named sandbox `name` under `state`, made and started, reaching
/// `forge.test` on `port` (trusting `ca` upstream), its `POST`s to
/// `/api/**` held by an ask rule.
fn started(state: &Path, ca: &TestCa, port: u16, name: &str) {
    let port = port.to_string();
    let mut args: Vec<String> = vec!["create".into(), name.into()];
    args.extend(reach(ca, &port));
    args.extend([
        "--ask-request".into(),
        format!("POST forge.test:{port}/api/**"),
    ]);
    ok(&w(
        state,
        &args.iter().map(String::as_str).collect::<Vec<_>>(),
    ));
    ok(&w(state, &["start", name]));
}

/// The questions waiting, once there are `n` (within 30 s).
fn questions(state: &Path, n: usize) -> Vec<serde_json::Value> {
    let mut qs = Vec::new();
    wait_until("the questions", Duration::from_secs(30), || {
        let out = ok(&w(state, &["approvals", "--json"]));
        qs = serde_json::from_str::<Vec<serde_json::Value>>(&out).unwrap();
        qs.len() >= n
    });
    assert_eq!(qs.len(), n, "{qs:?}");
    qs
}

/// The one question of `qs` whose request line holds `part`.
fn the_one<'a>(qs: &'a [serde_json::Value], part: &str) -> &'a serde_json::Value {
    let found: Vec<&serde_json::Value> = qs
        .iter()
        .filter(|q| q["request"].as_str().is_some_and(|r| r.contains(part)))
        .collect();
    assert_eq!(found.len(), 1, "{part} in {qs:?}");
    found[0]
}

#[test]
fn held_twins_that_differ_in_a_body_or_a_query_value_are_asked_apart_and_each_answer_lets_only_its_own_through(
) {
    if !egress_available() {
        return;
    }
    let ca = TestCa::new();
    let up = BodyRecorder::start(&ca, None);
    let state = TempDir::new("requests-held-twins");
    started(state.path(), &ca, up.port, "twins");
    let url = |q: &str| format!("https://forge.test:{}/api/transfer{q}", up.port);
    let send = |extra: &[&str], q: &str| post_in(state.path(), "twins", extra, &url(q));

    // Two form bodies, one amount apart, held at once.
    let small = send(&["-d", "amount=1"], "");
    let large = send(&["-d", "amount=1000000"], "");
    let qs = questions(state.path(), 2);
    let lines: Vec<&str> = qs.iter().filter_map(|q| q["request"].as_str()).collect();
    assert_ne!(lines[0], lines[1], "{lines:?}");
    let form = "POST /api/transfer [body: 8 bytes, application/x-www-form-urlencoded, sha256 ";
    let one = the_one(&qs, ": amount=1]");
    let many = the_one(&qs, ": amount=1000000]");
    assert!(one["request"].as_str().unwrap().starts_with(form), "{one}");
    let listed = ok(&w(state.path(), &["approvals"]));
    assert!(listed.contains(": amount=1]"), "{listed}");
    assert!(listed.contains(": amount=1000000]"), "{listed}");
    answer(state.path(), many, "deny");
    answer(state.path(), one, "allow_once");
    assert_eq!(posted(small), "200");
    assert_eq!(posted(large), "403");
    assert_eq!(
        up.requests(),
        ["POST /api/transfer amount=1"],
        "only the request allowed arrived"
    );

    // One in the query, one in a JSON body: the values are shown.
    let query = send(&[], "?to=alice&amount=1");
    let json = send(
        &[
            "-H",
            "Content-Type: application/json",
            "-d",
            r#"{"to":"mallory","amount":1000000}"#,
        ],
        "",
    );
    let qs = questions(state.path(), 2);
    let alice = the_one(&qs, "POST /api/transfer?to=alice&amount=1 [request sha256 ");
    let mallory = the_one(&qs, r#"[body: 33 bytes, application/json, sha256 "#);
    assert!(
        mallory["request"]
            .as_str()
            .unwrap()
            .contains(r#": {"to":"mallory","amount":1000000}]"#),
        "{mallory}"
    );
    answer(state.path(), mallory, "deny");
    answer(state.path(), alice, "allow_once");
    assert_eq!(posted(query), "200");
    assert_eq!(posted(json), "403");
    assert_eq!(
        up.requests(),
        [
            "POST /api/transfer amount=1",
            "POST /api/transfer?to=alice&amount=1 "
        ],
        "only the requests allowed arrived"
    );

    // Only a header apart: the same body shown, the request's digest
    // tells them apart.
    let a = send(&["-H", "X-Account: a", "-d", "amount=1"], "");
    let b = send(&["-H", "X-Account: b", "-d", "amount=1"], "");
    let qs = questions(state.path(), 2);
    let lines: Vec<&str> = qs.iter().filter_map(|q| q["request"].as_str()).collect();
    let body = |l: &str| {
        l.split(" [request sha256 ")
            .next()
            .unwrap_or("")
            .to_string()
    };
    assert_eq!(body(lines[0]), body(lines[1]), "{lines:?}");
    assert_ne!(lines[0], lines[1], "{lines:?}");
    for q in &qs {
        answer(state.path(), q, "deny");
    }
    assert_eq!(posted(a), "403");
    assert_eq!(posted(b), "403");
    assert_eq!(up.requests().len(), 2, "{:?}", up.requests());

    // The network's record keeps the values redacted, and the bodies out
    // (the execs' own argv hold them as typed).
    let logs = ok(&w(state.path(), &["logs", "twins"]));
    let network: Vec<&str> = logs.lines().filter(|l| l.contains(" request ")).collect();
    assert!(
        network.iter().any(|l| l.contains("/api/transfer")),
        "{logs}"
    );
    for line in network {
        for value in ["alice", "mallory", "1000000"] {
            assert!(!line.contains(value), "{line}");
        }
    }
    ok(&w(state.path(), &["stop", "--time", "1s", "twins"]));
}

#[test]
fn a_request_approved_after_the_servers_idle_timeout_still_reaches_it_once() {
    if !egress_available() {
        return;
    }
    let ca = TestCa::new();
    let up = BodyRecorder::start(&ca, Some(Duration::from_secs(1)));
    let state = TempDir::new("requests-held-idle");
    started(state.path(), &ca, up.port, "slow");
    let url = format!("https://forge.test:{}/api/transfer", up.port);
    let held = post_in(state.path(), "slow", &["-d", "amount=1"], &url);
    let qs = questions(state.path(), 1);
    // The person takes two seconds: the connection opened before the
    // question has been closed by the server.
    let asked = Instant::now();
    std::thread::sleep(Duration::from_secs(2));
    assert!(asked.elapsed() >= Duration::from_secs(2));
    let opened = *up.connections.lock().unwrap();
    assert!(
        opened >= 1,
        "the upstream connection was opened before the answer"
    );
    answer(state.path(), &qs[0], "allow_once");
    assert_eq!(posted(held), "200", "{:?}", up.requests());
    assert_eq!(
        up.requests(),
        ["POST /api/transfer amount=1"],
        "the request arrived once"
    );
    ok(&w(state.path(), &["stop", "--time", "1s", "slow"]));
}
