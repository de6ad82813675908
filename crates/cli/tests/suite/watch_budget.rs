//! The daemon's file watches, held by token holders, never take every
//! place: each token stays below the daemon's bound, and the owner's
//! socket always gets a watch however many the tokens hold. Through the
//! real daemon, with real streams held open (curl).

use crate::common::daemon::*;
use crate::common::*;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A watch stream held open, and the status its answer began with.
struct Held {
    child: Child,
    status: u16,
}

impl Drop for Held {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `GET /v1/sandboxes/sb/files/watch` over TCP with `token`, or on the
/// owner's socket without one; held open until dropped.
fn watch(d: &Daemon, token: Option<&str>) -> Held {
    let mut c = Command::new("curl");
    c.args(["-sNi", "--max-time", "60"]);
    match token {
        Some(t) => {
            c.args(["-H", &format!("authorization: Bearer {t}")]);
            c.arg(format!(
                "http://{}/v1/sandboxes/sb/files/watch?path=",
                d.tcp.as_ref().unwrap()
            ));
        }
        None => {
            c.args(["--unix-socket", d.socket.to_str().unwrap()]);
            c.arg("http://warden/v1/sandboxes/sb/files/watch?path=");
        }
    }
    let mut child = c.stdout(Stdio::piped()).spawn().unwrap();
    let out = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut first = String::new();
        let _ = BufReader::new(out).read_line(&mut first);
        let _ = tx.send(first);
    });
    let first = rx.recv_timeout(Duration::from_secs(30)).unwrap_or_default();
    let status = first
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    Held { child, status }
}

#[test]
fn tokens_holding_every_watch_they_may_leave_the_owner_one_and_no_token_holds_them_all() {
    if !curl_available() {
        return skip("curl is not installed");
    }
    let state = TempDir::new("watch-budget");
    let d = Daemon::start(state.path(), true);
    let (s, b) = call(&d, "POST", "/v1/sandboxes", Some(r#"{"name":"sb"}"#), None);
    assert_eq!(s, 201, "{b}");
    let scopes = ["files", "sandboxes:read"];
    let tokens: Vec<String> = (0..3)
        .map(|i| token_for(state.path(), &format!("w{i}"), &scopes, "sb"))
        .collect();
    // The first token takes every watch it may: fewer than the daemon's.
    let mut held = Vec::new();
    let mut first = 0;
    loop {
        let h = watch(&d, Some(&tokens[0]));
        if h.status != 200 {
            assert_eq!(h.status, 429, "a refusal is a 429");
            break;
        }
        held.push(h);
        first += 1;
        assert!(first <= 32, "one token took every watch of the daemon");
    }
    // A second token still gets one; then the tokens together fill what
    // they may.
    let mut others = 0;
    for t in &tokens[1..] {
        loop {
            let h = watch(&d, Some(t));
            if h.status != 200 {
                assert_eq!(h.status, 429);
                break;
            }
            held.push(h);
            others += 1;
            assert!(first + others <= 32, "the tokens took every watch");
        }
    }
    assert!(others > 0, "one token's watches left no other token one");
    // The owner's socket is never refused for what tokens hold.
    let mine = watch(&d, None);
    assert_eq!(mine.status, 200, "the owner was refused a watch");
    drop(held);
}
