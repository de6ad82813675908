//! The daemon's file watches, held by token holders, never take every
//! place: each token stays below the daemon's bound, and the owner's
//! socket always gets a watch however many the tokens hold. Through the
//! real daemon, with real streams held open (curl).

use crate::common::daemon::*;
use crate::common::*;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A watch stream held open, the status its answer began with, and the
/// rest of the answer as it came (its headers and problem, for a refusal).
struct Held {
    child: Child,
    status: u16,
    rest: std::sync::mpsc::Receiver<String>,
}

impl Held {
    /// A refusal's `Retry-After` and problem: curl ends with its answer.
    fn refusal(&self) -> (Option<String>, serde_json::Value) {
        let rest = self
            .rest
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_default();
        let retry_after = rest.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("retry-after")
                .then(|| v.trim().to_string())
        });
        let body = rest.lines().last().unwrap_or_default();
        (retry_after, json(body))
    }
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
    let (rest_tx, rest) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut out = BufReader::new(out);
        let mut first = String::new();
        let _ = out.read_line(&mut first);
        let _ = tx.send(first);
        let mut more = String::new();
        let _ = std::io::Read::read_to_string(&mut out, &mut more);
        let _ = rest_tx.send(more);
    });
    let first = rx.recv_timeout(Duration::from_secs(30)).unwrap_or_default();
    let status = first
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    Held {
        child,
        status,
        rest,
    }
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
            // A bound of the watches, not a quota the owner set (before:
            // code `quota`, which a client takes for a token's quotas);
            // the caller's own: it passes when it closes one, no wait.
            let (retry_after, p) = h.refusal();
            assert_eq!(p["code"], "too_many_watches", "{p}");
            assert_eq!(p["details"]["bound"], "per_token", "{p}");
            assert_eq!(retry_after, None, "{p}");
            break;
        }
        held.push(h);
        first += 1;
        assert!(first <= 32, "one token took every watch of the daemon");
    }
    // A second token still gets one; then the tokens together fill what
    // they may.
    let mut others = 0;
    let mut last = None;
    for t in &tokens[1..] {
        loop {
            let h = watch(&d, Some(t));
            if h.status != 200 {
                assert_eq!(h.status, 429);
                last = Some(h.refusal());
                break;
            }
            held.push(h);
            others += 1;
            assert!(first + others <= 32, "the tokens took every watch");
        }
    }
    assert!(others > 0, "one token's watches left no other token one");
    // The last token met what all tokens hold together: others' watches
    // free it, so it says when to ask again.
    let (retry_after, p) = last.unwrap_or_default();
    assert_eq!(p["code"], "too_many_watches", "{p}");
    assert_eq!(p["details"]["bound"], "per_daemon", "{p}");
    assert_eq!(retry_after.as_deref(), Some("1"), "{p}");
    // The owner's socket is never refused for what tokens hold.
    let mine = watch(&d, None);
    assert_eq!(mine.status, 200, "the owner was refused a watch");
    drop(held);
}
