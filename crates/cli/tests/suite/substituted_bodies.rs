//! A sandbox that makes the secret proxy hold request bodies: with
//! `--secret-in-body`, each body to a secret's host is read whole before
//! it goes upstream (a placeholder may be anywhere in it). Over HTTP/2 a
//! connection carries several such requests at once, and while the
//! session's one HTTP/1.1 upstream connection is busy they all wait, each
//! holding its body. The test runs the real `warden` binary with a real
//! HTTP/2 client inside (`substituted_bodies_h2.py`), against a real
//! upstream on the host's loopback that records every request, and
//! judges the supervisor from the host (`/proc/PID/status`).

use crate::common::upstream::{https_server, TestCa};
use crate::common::*;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const HOST: &str = "bodies.secret.test";
/// Connections, POST streams on each, and each body's MiB: 120 MiB of
/// bodies at once, against a budget of 64 MiB.
const CONNECTIONS: usize = 3;
const STREAMS: usize = 5;
const MIB: usize = 8;

/// An upstream that answers `/stall` only once `/release` has been asked
/// for (within 60 s), and records each other request's path and body
/// length before answering `stored PATH LENGTH`.
struct Stalling {
    port: u16,
    seen: Arc<Mutex<Vec<(String, usize)>>>,
    _runtime: tokio::runtime::Runtime,
}

impl Stalling {
    fn start(ca: &TestCa) -> Stalling {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let released = Arc::new(AtomicBool::new(false));
        let (s, r) = (seen.clone(), released.clone());
        let (port, runtime) = https_server(ca, &[HOST], &[b"http/1.1"], move || {
            let (s, r) = (s.clone(), r.clone());
            hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                let (s, r) = (s.clone(), r.clone());
                async move {
                    let path = req.uri().path().to_string();
                    let text = match path.as_str() {
                        "/stall" => {
                            let until = Instant::now() + Duration::from_secs(60);
                            while !r.load(Ordering::SeqCst) && Instant::now() < until {
                                tokio::time::sleep(Duration::from_millis(50)).await;
                            }
                            "stalled\n".to_string()
                        }
                        "/release" => {
                            r.store(true, Ordering::SeqCst);
                            "released\n".to_string()
                        }
                        _ => {
                            let len = req
                                .into_body()
                                .collect()
                                .await
                                .map(|b| b.to_bytes().len())
                                .unwrap_or(0);
                            s.lock().unwrap().push((path.clone(), len));
                            format!("stored {path} {len}\n")
                        }
                    };
                    Ok::<_, std::convert::Infallible>(hyper::Response::new(Full::new(Bytes::from(
                        text,
                    ))))
                }
            })
        });
        Stalling {
            port,
            seen,
            _runtime: runtime,
        }
    }

    fn requests(&self) -> Vec<(String, usize)> {
        self.seen.lock().unwrap().clone()
    }
}

/// Several HTTP/2 connections to a secret's host, each with a stream its
/// upstream stalls and five 8 MiB POSTs whose bodies are substituted: the
/// supervisor must not grow by the bodies held (120 MiB; it grew by that
/// much and more before they were paid for), only by what the proxy's
/// memory budget pays for. A body the budget cannot pay for is refused at
/// once with 503 and `memory_budget`, recorded as denied, and never
/// reaches the upstream; the bodies it paid for reach it whole once the
/// upstream answers the stalled stream.
#[test]
fn bodies_held_for_substitution_cannot_grow_the_supervisor_beyond_its_budget() {
    if !egress_available() {
        return;
    }
    let ca = TestCa::new();
    let up = Stalling::start(&ca);
    let dir = TempDir::new("substituted-bodies");
    let events = dir.path().join("events.jsonl");
    let script = include_str!("substituted_bodies_h2.py");
    let mut child = Command::new(warden_bin())
        .args(["run", "--no-tty", "--no-audit-log", "--secret"])
        .arg(format!("TOKEN@{HOST}:{}", up.port))
        .args(["--secret-in-body", "TOKEN"])
        .args(["--add-host", &format!("{HOST}=127.0.0.1")])
        .args(["--upstream-ca", &ca.pem_path()])
        .arg("--json-events")
        .arg(&events)
        .args([
            "--",
            "python3",
            "-u",
            "-c",
            script,
            HOST,
            &up.port.to_string(),
        ])
        .args([CONNECTIONS, STREAMS, MIB].map(|n| n.to_string()))
        .env("TOKEN", "ghp_substitutedbodiesTOKEN0123456789ab")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (baseline, peak) = memory_growth(&mut child, Duration::from_secs(180));
    let out = child.wait_with_output().unwrap();
    let text = stdout(&out);
    let grown_mib = peak.saturating_sub(baseline) / 1024;
    eprintln!("baseline {baseline} kB, peak {peak} kB, grown {grown_mib} MiB\n{text}");
    assert!(text.contains("done"), "{text} {}", stderr(&out));
    assert!(
        grown_mib < 64,
        "the supervisor grew by {grown_mib} MiB holding request bodies"
    );
    let answers: Vec<(&str, &str)> = text
        .lines()
        .filter_map(|l| l.strip_prefix("post "))
        .filter_map(|l| l.split_once(' '))
        .collect();
    assert_eq!(answers.len(), CONNECTIONS * STREAMS, "{text}");
    let refused: Vec<&str> = answers
        .iter()
        .filter(|(_, a)| a.starts_with("warden: refused") && a.contains("memory budget"))
        .map(|(p, _)| *p)
        .collect();
    let stored: Vec<&str> = answers
        .iter()
        .filter(|(p, a)| *a == format!("stored {p} {}", MIB << 20))
        .map(|(p, _)| *p)
        .collect();
    assert!(!refused.is_empty(), "no body was refused: {text}");
    assert!(
        !stored.is_empty(),
        "no body the budget paid for went on: {text}"
    );
    assert_eq!(
        refused.len() + stored.len(),
        answers.len(),
        "each body is either refused or stored: {text}"
    );
    // What reached the upstream is exactly what was answered as stored.
    let mut reached: Vec<String> = up
        .requests()
        .into_iter()
        .map(|(path, len)| {
            assert_eq!(len, MIB << 20, "{path} reached the upstream cut");
            path
        })
        .collect();
    reached.sort();
    let mut expected: Vec<String> = stored.iter().map(|p| p.to_string()).collect();
    expected.sort();
    assert_eq!(reached, expected, "a refused body reached the upstream");
    // Each refusal recorded as a denied request naming the budget.
    let log = std::fs::read_to_string(&events).unwrap_or_default();
    let denied = log
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| e["event"] == "connection" && e["protocol"] == "request")
        .filter(|e| e["allowed"] == false && e["reason"]["code"] == "memory_budget")
        .count();
    assert_eq!(denied, refused.len(), "{log}");
}
