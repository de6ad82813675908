//! What one token may take of the daemon and its host, through the real
//! `warden serve`: the long-lived answers it holds open (terminals here)
//! are bounded, with a 429 that names the bound, and while it holds all
//! it may, the owner's socket still lists and creates at once; a token's
//! sandbox gets at most the host's default memory and disk, its sandboxes
//! together stay within the daemon's quotas, and no refusal tells it the
//! host's free space.

use crate::common::daemon::{self, call_on, curl_available, json, Daemon};
use crate::common::rfb::runtime;
use crate::common::*;
use futures_util::StreamExt;
use std::time::{Duration, Instant};
use tokio_tungstenite::tungstenite::{self, Message};

type TcpWs = tokio_tungstenite::WebSocketStream<tokio::net::TcpStream>;

/// A daemon with TCP, its configuration file holding `config`.
fn daemon_with(tag: &str, config: &str) -> Option<(TempDir, Daemon)> {
    daemon::with_config(tag, config, &[], &[])
}

/// A terminal over TCP with `token`, or the HTTP status (and body) it was
/// refused with.
async fn terminal(d: &Daemon, sandbox: &str, token: &str) -> Result<TcpWs, (u16, String)> {
    use tungstenite::client::IntoClientRequest;
    let addr = d.tcp.clone().unwrap();
    let stream = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let path = format!("/v1/sandboxes/{sandbox}/pty?shell=sleep%201000");
    let mut req = format!("ws://{addr}{path}").into_client_request().unwrap();
    req.headers_mut()
        .insert("authorization", format!("Bearer {token}").parse().unwrap());
    match tokio_tungstenite::client_async(req, stream).await {
        Ok((ws, _)) => Ok(ws),
        Err(tungstenite::Error::Http(r)) => {
            let body = r
                .body()
                .as_ref()
                .map(|b| String::from_utf8_lossy(b).into_owned())
                .unwrap_or_default();
            Err((r.status().as_u16(), body))
        }
        Err(e) => panic!("the WebSocket failed: {e}"),
    }
}

/// Wait for the session's `started` message.
async fn started(ws: &mut TcpWs) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let m = tokio::time::timeout_at(deadline, ws.next())
            .await
            .expect("the terminal started within 20 s");
        match m {
            Some(Ok(Message::Text(t))) => {
                let v = json(&t);
                assert_eq!(v["type"], "started", "{v}");
                return;
            }
            Some(Ok(_)) => {}
            other => panic!("the terminal ended before it started: {other:?}"),
        }
    }
}

/// One call on the owner's socket, and how long it took.
fn owner_call(d: &Daemon, method: &str, path: &str, body: Option<&str>) -> (u16, String, Duration) {
    let t = Instant::now();
    let (s, b) = call_on(d, false, method, path, body, None);
    (s, b, t.elapsed())
}

#[test]
fn a_token_holding_all_the_terminals_it_may_is_refused_the_next_and_the_owner_still_answers() {
    let Some((_state, d)) = daemon_with(
        "starve-pty",
        "sessions:\n  per_token: 4\n  per_daemon: 64\n",
    ) else {
        return;
    };
    let token = daemon::worker_with_sandbox(&d, "crowd", "crowd");
    runtime().block_on(async {
        let mut held = Vec::new();
        for _ in 0..4 {
            let mut ws = terminal(&d, "crowd", &token)
                .await
                .expect("within the bound");
            started(&mut ws).await;
            held.push(ws);
        }
        // One more: refused in HTTP, before anything starts, naming the
        // bound.
        let refused = terminal(&d, "crowd", &token).await;
        let Err((status, body)) = refused else {
            panic!("a fifth terminal was opened past a bound of 4");
        };
        assert_eq!(status, 429, "{body}");
        let problem = json(&body);
        assert_eq!(problem["code"], "too_many_sessions", "{body}");
        assert_eq!(problem["details"]["bound"], "per_token", "{body}");
        assert!(
            problem["message"].as_str().unwrap().contains("4 per token"),
            "{body}"
        );
        // The owner, meanwhile, lists and creates at once.
        let (s, b, took) = owner_call(&d, "GET", "/v1/sandboxes", None);
        assert_eq!(s, 200, "{b}");
        assert!(
            took < Duration::from_secs(1),
            "the owner's list took {took:?}"
        );
        let (s, b, took) = owner_call(
            &d,
            "POST",
            "/v1/sandboxes",
            Some(r#"{"name":"owners","start":false}"#),
        );
        assert_eq!(s, 201, "{b}");
        assert!(
            took < Duration::from_secs(1),
            "the owner's create took {took:?}"
        );
        // A terminal closed gives its place back.
        let mut first = held.remove(0);
        let _ = futures_util::SinkExt::close(&mut first).await;
        drop(first);
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut again = loop {
            match terminal(&d, "crowd", &token).await {
                Ok(ws) => break ws,
                Err((429, _)) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(100)).await
                }
                Err((s, b)) => panic!("a place given back was not taken: {s} {b}"),
            }
        };
        started(&mut again).await;
    });
}

#[test]
fn a_tokens_sandbox_gets_at_most_the_hosts_default_memory_and_disk() {
    let Some((state, d)) = daemon_with("starve-defaults", "quotas:\n  sandboxes: 8\n") else {
        return;
    };
    let token = daemon::api_token(&d, "big", &["sandboxes:read", "sandboxes:write"], None);
    let create = |body: &str| call_on(&d, true, "POST", "/v1/sandboxes", Some(body), Some(&token));
    let (s, b) = create(r#"{"name":"m","start":false,"spec":{"resources":{"memory":"1T"}}}"#);
    assert_eq!(s, 422, "a terabyte of memory for a token: {b}");
    let p = json(&b);
    assert_eq!(p["code"], "above_default", "{b}");
    assert_eq!(p["field"], "/spec/resources/memory", "{b}");
    // Disk within the memory asked, above the host's default disk (half
    // its default memory, which is at most 8G): refused as above the
    // default, or, on a host with less than that free, as finding no room.
    let (s, b) =
        create(r#"{"name":"d","start":false,"spec":{"resources":{"memory":"8G","disk":"6G"}}}"#);
    assert_refused_disk(s, &b, 6 << 30, &free_space(state.path()), "above_default");
    // Disk past the host's free space (on most hosts): refused, and
    // worded for a token.
    let (s, b) =
        create(r#"{"name":"dd","start":false,"spec":{"resources":{"memory":"64G","disk":"40G"}}}"#);
    assert!(s == 422 || s == 507, "{s} {b}");
    let p = json(&b);
    assert!(
        p["field"] == "/spec/resources/disk" || p["field"] == "/spec/resources/memory",
        "{b}"
    );
    // Whatever refused it, the host's free space is not told.
    assert!(
        !b.contains(" free"),
        "the refusal tells the host's free space: {b}"
    );
    // The owner is bounded by none of it.
    let (s, b) = call_on(
        &d,
        false,
        "POST",
        "/v1/sandboxes",
        Some(r#"{"name":"own","start":false,"spec":{"resources":{"memory":"1T"}}}"#),
        None,
    );
    assert_eq!(s, 201, "the owner's own sandbox: {b}");
    // None of the refused ones was left behind.
    let (s, b) = call_on(&d, false, "GET", "/v1/sandboxes", None, None);
    assert_eq!(s, 200, "{b}");
    let ids: Vec<String> = json(&b)["sandboxes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(ids, ["own"], "{b}");
}

#[test]
fn a_token_taking_what_an_owners_profile_grants_above_the_hosts_default_is_not_refused() {
    if !curl_available() {
        skip("curl is not installed");
        return;
    }
    // A profile of the owner's with twice the most memory a host's
    // default ever is (8G): above the default on any host. The disk a
    // sandbox gets by default (half its memory) comes with that memory.
    let state = TempDir::new("starve-profile");
    let profiles = state.path().join("config/warden/profiles");
    std::fs::create_dir_all(&profiles).unwrap();
    std::fs::write(profiles.join("big.yaml"), "resources:\n  memory: 16G\n").unwrap();
    let file = state.path().join("daemon.yaml");
    std::fs::write(&file, "quotas:\n  memory: 1T\n  disk: 1T\n").unwrap();
    let config = state.path().join("config");
    let d = Daemon::start_with(
        state.path(),
        true,
        &["--config", file.to_str().unwrap()],
        &[("XDG_CONFIG_HOME", config.as_path())],
    );
    let token = daemon::api_token(&d, "big", &["sandboxes:read", "sandboxes:write"], None);
    let create = |body: &str| call_on(&d, true, "POST", "/v1/sandboxes", Some(body), Some(&token));
    // The profile's own memory, and less than it but above the default.
    let (s, b) = create(r#"{"name":"own","start":false,"profile":"big"}"#);
    assert_eq!(s, 201, "the profile's own memory and its default disk: {b}");
    let (s, b) = create(
        r#"{"name":"less","start":false,"profile":"big","spec":{"resources":{"memory":"12G"}}}"#,
    );
    assert_eq!(s, 201, "below the profile's memory, above the host's: {b}");
    // Above what the profile grants: still refused (the trust rule says
    // so first: a caller only tightens the owner's value).
    let (s, b) = create(
        r#"{"name":"more","start":false,"profile":"big","spec":{"resources":{"memory":"20G"}}}"#,
    );
    assert!(s == 403 || s == 422, "{s} {b}");
    assert_eq!(json(&b)["field"], "/spec/resources/memory", "{b}");
    let (s, b) = create(
        r#"{"name":"disk","start":false,"profile":"big","spec":{"resources":{"disk":"9G"}}}"#,
    );
    assert_refused_disk(s, &b, 9 << 30, &free_space(state.path()), "");
}

/// Free space of the file system holding `dir`, as the daemon reckons it.
fn free_space(dir: &std::path::Path) -> u64 {
    let st = nix::sys::statvfs::statvfs(dir).unwrap();
    (st.blocks_available() as u64).saturating_mul(st.fragment_size() as u64)
}

/// `asked` bytes of disk were refused at the disk's pointer: for being
/// above what a token is given (422, with `code` unless empty) where the
/// host has room for them, or with 507 `no_disk` (the free space untold)
/// where it has not.
fn assert_refused_disk(status: u16, body: &str, asked: u64, free: &u64, code: &str) {
    let p = json(body);
    assert_eq!(p["field"], "/spec/resources/disk", "{body}");
    if asked > *free {
        assert_eq!(
            (status, p["code"].as_str()),
            (507, Some("no_disk")),
            "{body}"
        );
        assert!(!body.contains(" free"), "the free space is told: {body}");
    } else {
        assert_eq!(status, 422, "{body}");
        if !code.is_empty() {
            assert_eq!(p["code"], code, "{body}");
        }
    }
}

#[test]
fn a_tokens_sandboxes_together_stay_within_the_daemons_quotas() {
    let Some((_state, d)) = daemon_with(
        "starve-quotas",
        "quotas:\n  sandboxes: 2\n  memory: 1G\n  disk: 300M\n",
    ) else {
        return;
    };
    let token = daemon::api_token(&d, "q", &["sandboxes:read", "sandboxes:write"], None);
    let create = |body: &str| call_on(&d, true, "POST", "/v1/sandboxes", Some(body), Some(&token));
    let small = |name: &str, memory: &str, disk: &str| {
        format!(
            r#"{{"name":"{name}","start":false,"spec":{{"resources":{{"memory":"{memory}","disk":"{disk}"}}}}}}"#
        )
    };
    let (s, b) = create(&small("a", "512M", "200M"));
    assert_eq!(s, 201, "{b}");
    // Memory together: 512M + 768M > 1G.
    let (s, b) = create(&small("b", "768M", "50M"));
    assert_eq!(s, 429, "{b}");
    assert_eq!(json(&b)["field"], "/spec/resources/memory", "{b}");
    // Disk together: 200M + 200M > 300M.
    let (s, b) = create(&small("b", "256M", "200M"));
    assert_eq!(s, 429, "{b}");
    assert_eq!(json(&b)["field"], "/spec/resources/disk", "{b}");
    let (s, b) = create(&small("b", "256M", "64M"));
    assert_eq!(s, 201, "{b}");
    // Count: a third sandbox past `sandboxes: 2`.
    let (s, b) = create(&small("c", "64M", "16M"));
    assert_eq!(s, 429, "{b}");
    assert_eq!(json(&b)["code"], "quota", "{b}");
    // A removed sandbox gives its share back.
    let (s, b) = call_on(&d, true, "DELETE", "/v1/sandboxes/a", None, Some(&token));
    assert!(s == 200 || s == 204, "{s} {b}");
    let (s, b) = create(&small("c", "512M", "200M"));
    assert_eq!(s, 201, "{b}");
}

/// The daemon's threads and open descriptors now.
fn threads_and_fds(pid: u32) -> (usize, usize) {
    let count = |dir: String| std::fs::read_dir(dir).map(|d| d.count()).unwrap_or(0);
    (
        count(format!("/proc/{pid}/task")),
        count(format!("/proc/{pid}/fd")),
    )
}

/// An event stream of `sandbox` followed over TCP with `token`, its
/// answer's head read: the connection, and the status.
fn follow_events(d: &Daemon, sandbox: &str, token: &str) -> (std::net::TcpStream, u16) {
    use std::io::{Read, Write};
    let addr = d.tcp.as_ref().unwrap();
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    write!(
        s,
        "GET /v1/sandboxes/{sandbox}/events?follow=true HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\n\r\n"
    )
    .unwrap();
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match s.read(&mut b) {
            Ok(1) => head.push(b[0]),
            _ => break,
        }
    }
    let head = String::from_utf8_lossy(&head);
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (s, status)
}

#[test]
fn event_streams_whose_clients_left_give_back_their_threads_and_sockets_on_a_quiet_sandbox() {
    const STREAMS: usize = 24;
    let Some((_state, d)) = daemon_with(
        "starve-events",
        "sessions:\n  per_token: 32\n  per_daemon: 64\n",
    ) else {
        return;
    };
    let token = daemon::worker_with_sandbox(&d, "quiet", "quiet");
    let pid = d.child.as_ref().unwrap().id();
    // Settled: the sandbox's start is over, its events written.
    std::thread::sleep(Duration::from_millis(500));
    let (threads0, fds0) = threads_and_fds(pid);
    let mut held = Vec::new();
    for _ in 0..STREAMS {
        let (s, status) = follow_events(&d, "quiet", &token);
        assert_eq!(status, 200, "an event stream within the bound");
        held.push(s);
    }
    std::thread::sleep(Duration::from_millis(500));
    let (threads1, _) = threads_and_fds(pid);
    assert!(
        threads1 >= threads0 + STREAMS / 2,
        "the streams are followed by threads of the daemon: {threads0} -> {threads1}"
    );
    // Every client leaves; the sandbox says nothing more.
    for s in held.drain(..) {
        let _ = s.shutdown(std::net::Shutdown::Both);
    }
    // Before, each thread waited for the sandbox's next event, holding a
    // socket to its supervisor, with no place in the ledger: on a quiet
    // sandbox, for as long as it ran.
    let deadline = Instant::now() + Duration::from_secs(10);
    let (threads, fds) = loop {
        let (t, f) = threads_and_fds(pid);
        if (t <= threads0 + 2 && f <= fds0 + 2) || Instant::now() > deadline {
            break (t, f);
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(
        threads <= threads0 + 2,
        "the followers' threads outlived their clients: {threads0} before, {threads} after"
    );
    assert!(
        fds <= fds0 + 2,
        "the followers' sockets outlived their clients: {fds0} before, {fds} after"
    );
    // And their places are back: the token may follow as many again.
    for _ in 0..STREAMS {
        let (s, status) = follow_events(&d, "quiet", &token);
        assert_eq!(status, 200, "a place given back was not taken");
        held.push(s);
    }
}

#[test]
fn a_token_and_the_tokens_it_made_hold_one_tokens_places_together() {
    let Some((_state, d)) = daemon_with(
        "starve-children",
        "sessions:\n  per_token: 4\n  per_daemon: 64\n",
    ) else {
        return;
    };
    let maker = daemon::api_token(
        &d,
        "maker",
        &["admin", "sandboxes:read", "sandboxes:write", "exec"],
        None,
    );
    let (s, b) = call_on(
        &d,
        true,
        "POST",
        "/v1/sandboxes",
        Some(r#"{"name":"m"}"#),
        Some(&maker),
    );
    assert_eq!(s, 201, "{b}");
    let mut children = Vec::new();
    for name in ["kid1", "kid2"] {
        let body = format!(
            r#"{{"name":"{name}","scopes":["sandboxes:read","sandboxes:write","exec"],"max_sandboxes":1,"max_memory":"8G","max_pids":1024}}"#
        );
        let (s, b) = call_on(&d, true, "POST", "/v1/tokens", Some(&body), Some(&maker));
        assert_eq!(s, 201, "{b}");
        let kid = json(&b)["token"].as_str().unwrap().to_string();
        let body = format!(r#"{{"name":"{name}-sb"}}"#);
        let (s, b) = call_on(&d, true, "POST", "/v1/sandboxes", Some(&body), Some(&kid));
        assert_eq!(s, 201, "{b}");
        children.push((kid, format!("{name}-sb")));
    }
    // Two places each for the two children, the maker's bound of 4.
    let mut held = Vec::new();
    for (kid, sb) in &children {
        for _ in 0..2 {
            let (s, status) = follow_events(&d, sb, kid);
            assert_eq!(status, 200, "within the bound");
            held.push(s);
        }
    }
    // Before, each child was a holder of its own with 4 places, and an
    // admin token made as many as it liked: here the fifth place, the
    // maker's own or a child's, is refused.
    let (_s, status) = follow_events(&d, &children[0].1, &children[0].0);
    assert_eq!(status, 429, "a child took a place past its maker's bound");
    let (_s, status) = follow_events(&d, "m", &maker);
    assert_eq!(status, 429, "the maker took a place past its bound");
    // A token the owner made has its own share.
    let other = daemon::worker_with_sandbox(&d, "other", "o");
    let (_s, status) = follow_events(&d, "o", &other);
    assert_eq!(status, 200, "another token's place");
    // A place given back by a child is the family's again.
    drop(held.pop());
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (s, status) = follow_events(&d, "m", &maker);
        if status == 200 {
            held.push(s);
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the place never came back: {status}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}
