//! Sessions counted against the token behind them (outside review 26's
//! residuals): a token's children opening MCP sessions or logging in to
//! the dashboard share their maker's bound, so that a brood of them
//! neither multiplies it nor ends or keeps out another token's sessions
//! or the owner's. Raw HTTP against the real daemon.

use crate::common::daemon::*;
use crate::common::mcp::session_of;
use std::io::{Read, Write};
use std::time::Duration;

const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}"#;
/// Room in a token's quotas for 20 children of one sandbox each.
const BROOD_QUOTAS: &str = "quotas:\n  sandboxes: 64\n";
const PING: &str = r#"{"jsonrpc":"2.0","id":2,"method":"ping"}"#;

/// One request on its own connection (`stream`), `headers` whole lines;
/// what came back until the head was in and `enough` says so, the
/// connection closed, or 5 s passed with nothing more.
fn exchange_on<S: Read + Write>(
    mut s: S,
    request: &str,
    enough: impl Fn(&str) -> bool,
) -> (u16, String) {
    s.write_all(request.as_bytes()).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let text = String::from_utf8_lossy(&got);
        if text.contains("\r\n\r\n") && enough(&text) {
            break;
        }
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    let text = String::from_utf8_lossy(&got).into_owned();
    (status_of(&text), text)
}

fn request(method: &str, path: &str, headers: &str, body: &str) -> String {
    format!(
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\n{headers}Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

fn tcp(d: &Daemon) -> std::net::TcpStream {
    let s = std::net::TcpStream::connect(d.tcp.as_ref().unwrap()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s
}

/// An MCP message to `/mcp` over TCP with `token` (and a session's ID):
/// the status and the answer's head (and what of its body came).
fn mcp(d: &Daemon, token: &str, sid: Option<&str>, body: &str) -> (u16, String) {
    let mut headers = format!("Authorization: Bearer {token}\r\n");
    if let Some(s) = sid {
        headers += &format!("Mcp-Session-Id: {s}\r\nMCP-Protocol-Version: 2025-06-18\r\n");
    }
    let answered = |t: &str| t.contains("\"result\"") || !t.starts_with("HTTP/1.1 200");
    exchange_on(tcp(d), &request("POST", "/mcp", &headers, body), answered)
}

/// Children of `maker` made over the API, each with `scopes` and a small
/// share of its maker's quotas.
fn children(d: &Daemon, maker: &str, n: usize, scopes: &[&str]) -> Vec<String> {
    (0..n)
        .map(|i| {
            let body = serde_json::json!({
                "name": format!("child-{i}"),
                "scopes": scopes,
                "max_sandboxes": 1,
                "max_memory": "128M",
                "max_pids": 32,
            });
            let (s, b) = json_as(d, maker, "POST", "/v1/tokens", &body.to_string());
            assert_eq!(s, 201, "{b}");
            b["token"].as_str().unwrap().to_string()
        })
        .collect()
}

#[test]
fn a_brood_of_children_opening_300_mcp_sessions_shares_one_bound_and_others_keep_theirs() {
    let Some((state, d)) = with_config("brood-mcp", BROOD_QUOTAS, &[], &[]) else {
        return;
    };
    let a = token(state.path(), "a", &["admin"]);
    let b = token(state.path(), "b", &["mcp"]);
    let (s, head) = mcp(&d, &b, None, INITIALIZE);
    assert_eq!(s, 200, "{head}");
    let theirs = session_of(&head);
    // The owner's session, on the owner's socket.
    let owner = || {
        let sock = std::os::unix::net::UnixStream::connect(&d.socket).unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let answered = |t: &str| t.contains("\"result\"") || !t.starts_with("HTTP/1.1 200");
        exchange_on(sock, &request("POST", "/mcp", "", INITIALIZE), answered)
    };
    let (s, head) = owner();
    assert_eq!(s, 200, "{head}");
    // Token a's children (20 of them, made by a over the API) open 300
    // sessions between them.
    let brood = children(&d, &a, 20, &["mcp"]);
    let (mut opened, mut refused) = (0, 0);
    for i in 0..300 {
        let (s, head) = mcp(&d, &brood[i % brood.len()], None, INITIALIZE);
        match s {
            200 => opened += 1,
            429 => {
                assert!(head.contains("too_many_sessions"), "{head}");
                refused += 1;
            }
            _ => panic!("{head}"),
        }
    }
    // One token's bound for the whole brood (each child had its own
    // before: all 300 were opened, and 256 children would fill the
    // daemon).
    assert_eq!(opened, 32, "the brood opened {opened} sessions");
    assert_eq!(refused, 268);
    // Token b's session goes on, b opens another, and so does the owner.
    let (s, head) = mcp(&d, &b, Some(&theirs), PING);
    assert_eq!(s, 200, "{head}");
    let (s, head) = mcp(&d, &b, None, INITIALIZE);
    assert_eq!(s, 200, "{head}");
    let (s, head) = owner();
    assert_eq!(s, 200, "{head}");
}

/// `POST /login` with `token`: the cookie's value and the CSRF token, or
/// the status and answer of a refusal.
fn login(d: &Daemon, token: &str) -> Result<(String, String), (u16, String)> {
    let body = serde_json::json!({ "token": token }).to_string();
    let own = "Origin: http://localhost\r\n";
    let (s, text) = exchange_on(tcp(d), &request("POST", "/login", own, &body), |_| false);
    if s != 200 {
        return Err((s, text));
    }
    let cookie = text
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .starts_with("set-cookie: warden_session=")
                .then(|| l["set-cookie: warden_session=".len()..].to_string())
        })
        .and_then(|v| v.split(';').next().map(str::to_string))
        .unwrap();
    let body = text.split_once("\r\n\r\n").unwrap().1;
    let csrf = json(body)["csrf"].as_str().unwrap().to_string();
    Ok((cookie, csrf))
}

/// Whether the session `(cookie, csrf)` is still logged in.
fn logged_in(d: &Daemon, (cookie, csrf): &(String, String)) -> bool {
    let headers = format!("Cookie: warden_session={cookie}\r\nX-Warden-CSRF: {csrf}\r\n");
    let (s, _) = exchange_on(tcp(d), &request("GET", "/session", &headers, ""), |_| false);
    s == 200
}

#[test]
fn a_brood_of_children_logging_in_300_times_never_logs_another_token_out() {
    let Some((state, d)) = with_config("brood-login", BROOD_QUOTAS, &[], &[]) else {
        return;
    };
    let a = token(state.path(), "a", &["admin"]);
    let b = token(state.path(), "b", &["sandboxes:read"]);
    let person = login(&d, &b).unwrap();
    // 20 children of a, 15 logins each: before, each child had its own
    // 16 and the daemon's 256 went oldest first, b's among them.
    let brood = children(&d, &a, 20, &["sandboxes:read"]);
    for i in 0..300 {
        login(&d, &brood[i % brood.len()]).unwrap();
    }
    assert!(logged_in(&d, &person), "token b was logged out");
}
