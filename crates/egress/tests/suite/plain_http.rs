//! Plain HTTP through the proxy is decided request by request: a real
//! proxy on loopback serves a client that connects to it directly (as the
//! explicit proxy is reached), towards an upstream HTTP/1.1 server on
//! loopback, kept alive, that records every request it read. Only
//! `up.test` on the upstream's port is allowed (pinned by the owner to
//! 127.0.0.1, plain HTTP allowed); whatever the client sends after its
//! first request, no request for another `Host` may arrive.

use crate::common::{read_more, start, Heard};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use warden_egress::decision::Decision;
use warden_egress::proxy::Proxy;

/// An HTTP/1.1 server that keeps connections alive and records each
/// request it reads: `METHOD TARGET Host=... Connection=...`, and each
/// body.
struct Upstream {
    port: u16,
    seen: Arc<Mutex<Vec<String>>>,
}

impl Upstream {
    fn start() -> Upstream {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = seen.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { continue };
                let s = s.clone();
                std::thread::spawn(move || serve_upstream(conn, &s));
            }
        });
        Upstream { port, seen }
    }

    fn seen(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }
}

fn serve_upstream(mut conn: TcpStream, seen: &Mutex<Vec<String>>) {
    conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut buf: Vec<u8> = Vec::new();
    loop {
        // A head, read as a lenient server reads it (bare LF accepted).
        let (line, head_len, length, close) = loop {
            let mut headers = [httparse::EMPTY_HEADER; 64];
            let mut req = httparse::Request::new(&mut headers);
            if let Ok(httparse::Status::Complete(n)) = req.parse(&buf) {
                let get = |name: &str| {
                    req.headers
                        .iter()
                        .find(|h| h.name.eq_ignore_ascii_case(name))
                        .map(|h| String::from_utf8_lossy(h.value).into_owned())
                };
                let line = format!(
                    "{} {} Host={:?} Connection={:?}",
                    req.method.unwrap_or_default(),
                    req.path.unwrap_or_default(),
                    get("host"),
                    get("connection")
                );
                let length: usize = get("content-length")
                    .and_then(|l| l.trim().parse().ok())
                    .unwrap_or(0);
                let close = get("connection").is_some_and(|c| c.eq_ignore_ascii_case("close"));
                break (line, n, length, close);
            }
            if !read_more(&mut conn, &mut buf) {
                return;
            }
        };
        while buf.len() < head_len + length {
            if !read_more(&mut conn, &mut buf) {
                return;
            }
        }
        let body = String::from_utf8_lossy(&buf[head_len..head_len + length]).into_owned();
        buf.drain(..head_len + length);
        seen.lock().unwrap().push(line);
        if !body.is_empty() {
            seen.lock().unwrap().push(format!("body {body:?}"));
        }
        let answer = b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n";
        if conn.write_all(answer).is_err() || close {
            return;
        }
    }
}

/// A proxy that allows `up.test` on `port` only, pinned to 127.0.0.1, with
/// plain HTTP; returns it, its port and what it decided.
fn proxy(port: u16) -> (Proxy, u16, Arc<Heard>) {
    let mut spec = crate::common::spec(
        vec![warden_policy::DomainRule::parse(&format!("up.test:{port}")).unwrap()],
        &[("up.test", "127.0.0.1")],
    );
    spec.allow_http = true;
    start(&spec, None)
}

/// Send `first` on one connection to the proxy, then `later` after a
/// moment; return everything the client was answered.
fn converse(proxy_port: u16, first: &[u8], later: &[u8]) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", proxy_port)).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(1500)))
        .unwrap();
    s.write_all(first).unwrap();
    std::thread::sleep(Duration::from_millis(400));
    let _ = s.write_all(later);
    answered(&mut s)
}

/// Everything `s` is answered until it closes or its read times out.
fn answered(s: &mut TcpStream) -> String {
    let mut out = Vec::new();
    while read_more(s, &mut out) {}
    String::from_utf8_lossy(&out).into_owned()
}

/// A connection to the proxy at `proxy_port` whose `CONNECT` to `up.test`
/// on `port` was answered 200, its reads bounded by `wait`.
fn tunnel(proxy_port: u16, port: u16, wait: Duration) -> TcpStream {
    let mut s = TcpStream::connect(("127.0.0.1", proxy_port)).unwrap();
    s.set_read_timeout(Some(wait)).unwrap();
    write!(
        s,
        "CONNECT up.test:{port} HTTP/1.1\r\nHost: up.test:{port}\r\n\r\n"
    )
    .unwrap();
    let mut answer = [0u8; 200];
    let n = s.read(&mut answer).unwrap();
    assert!(answer[..n].starts_with(b"HTTP/1.1 200"));
    s
}

/// What arrived upstream, once it has settled.
fn settled(up: &Upstream) -> Vec<String> {
    std::thread::sleep(Duration::from_millis(200));
    up.seen()
}

fn only_up_test(seen: &[String], port: u16) {
    let requests: Vec<&String> = seen.iter().filter(|l| !l.starts_with("body ")).collect();
    assert!(!requests.is_empty(), "nothing reached the upstream");
    for r in &requests {
        assert!(
            r.contains(&format!("Host=Some(\"up.test:{port}\")")),
            "a request for another Host reached the upstream: {seen:?}"
        );
    }
    for evil in ["evil.example", "other.example", "/second", "/third"] {
        assert!(
            !requests.iter().any(|r| r.contains(evil)),
            "{evil} reached the upstream as a request: {seen:?}"
        );
    }
}

#[test]
fn a_second_request_under_another_host_never_reaches_the_upstream_after_a_head_that_is_not_utf8() {
    let up = Upstream::start();
    let (_p, at, heard) = proxy(up.port);
    let first = format!(
        "GET /first HTTP/1.1\r\nHost: up.test:{0}\r\nX-A: \u{0}\r\nConnection: keep-alive\r\n\r\nGET /second HTTP/1.1\r\nHost: evil.example:{0}\r\n\r\n",
        up.port
    )
    .into_bytes();
    // The header's value is one byte that is not UTF-8.
    let first: Vec<u8> = first
        .into_iter()
        .map(|b| if b == 0 { 0xff } else { b })
        .collect();
    let answered = converse(
        at,
        &first,
        b"GET /third-later HTTP/1.1\r\nHost: other.example\r\n\r\n",
    );
    let seen = settled(&up);
    only_up_test(&seen, up.port);
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert!(seen[0].contains("Connection=Some(\"close\")"), "{seen:?}");
    assert!(answered.starts_with("HTTP/1.1 200"), "{answered}");
    let heard = heard.0.lock().unwrap();
    assert_eq!(heard.len(), 1, "one connection, one decision: {heard:?}");
}

#[test]
fn a_second_request_under_another_host_never_reaches_the_upstream_after_a_head_of_bare_line_feeds()
{
    let up = Upstream::start();
    let (_p, at, _) = proxy(up.port);
    // A length that would swallow lines added after the head as body.
    let first = format!(
        "POST /first HTTP/1.1\nHost: up.test:{0}\nConnection: keep-alive\nContent-Length: 44\n\nGET /second HTTP/1.1\nHost: evil.example:{0}\n\n",
        up.port
    );
    let answered = converse(
        at,
        first.as_bytes(),
        b"GET /third-later HTTP/1.1\r\nHost: other.example\r\n\r\n",
    );
    let seen = settled(&up);
    only_up_test(&seen, up.port);
    assert!(
        seen[0].starts_with("POST /first "),
        "the first request was not sent on: {seen:?}"
    );
    assert!(answered.starts_with("HTTP/1.1 200"), "{answered}");
}

#[test]
fn plain_http_inside_a_connect_tunnel_is_decided_request_by_request() {
    let up = Upstream::start();
    let (_p, at, _) = proxy(up.port);
    let mut s = tunnel(at, up.port, Duration::from_millis(1500));
    write!(s, "GET /in-tunnel-1 HTTP/1.1\r\nHost: up.test:{0}\r\n\r\nGET /in-tunnel-2 HTTP/1.1\r\nHost: evil.example\r\n\r\n", up.port).unwrap();
    std::thread::sleep(Duration::from_millis(400));
    let _ = s.write_all(b"GET /in-tunnel-3-later HTTP/1.1\r\nHost: other.example\r\n\r\n");
    let out = answered(&mut s);
    let seen = settled(&up);
    only_up_test(&seen, up.port);
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert!(seen[0].starts_with("GET /in-tunnel-1 "), "{seen:?}");
    assert_eq!(out.matches("HTTP/1.1 200").count(), 1, "{out}");
}

#[test]
fn a_request_for_the_allowed_name_is_reframed_and_sent_with_connection_close() {
    let up = Upstream::start();
    let (_p, at, _) = proxy(up.port);
    let request = format!(
        "POST /n HTTP/1.1\r\nHost: UP.test:{0}\r\nConnection: keep-alive\r\nContent-Length: 3\r\n\r\nabcPOST /n2 HTTP/1.1\r\nHost: up.test:{0}\r\nContent-Length: 0\r\n\r\n",
        up.port
    );
    let answered = converse(at, request.as_bytes(), b"");
    let seen = settled(&up);
    assert_eq!(
        seen,
        vec![
            format!(
                "POST /n Host=Some(\"up.test:{}\") Connection=Some(\"close\")",
                up.port
            ),
            "body \"abc\"".to_string()
        ]
    );
    assert!(answered.starts_with("HTTP/1.1 200"), "{answered}");
    assert!(
        answered.to_ascii_lowercase().contains("connection: close"),
        "{answered}"
    );
}

#[test]
fn a_request_to_the_explicit_proxy_reaches_the_origin_as_a_path_and_closes_after_its_answer() {
    let up = Upstream::start();
    let (_p, at, _) = proxy(up.port);
    let request = format!(
        "GET http://up.test:{0}/x/y?q=1 HTTP/1.1\r\nHost: up.test:{0}\r\nProxy-Authorization: Basic Zm9v\r\nProxy-Connection: keep-alive\r\n\r\n",
        up.port
    );
    let answered = converse(at, request.as_bytes(), b"");
    let seen = settled(&up);
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert!(seen[0].starts_with("GET /x/y?q=1 "), "{seen:?}");
    assert!(
        answered.to_ascii_lowercase().contains("connection: close"),
        "{answered}"
    );
}

/// A TLS ClientHello for `name`, as a client would send it first.
fn client_hello(name: &str) -> Vec<u8> {
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(rustls::RootCertStore::empty())
    .with_no_client_auth();
    let server = rustls::pki_types::ServerName::try_from(name.to_string()).unwrap();
    let mut conn = rustls::ClientConnection::new(Arc::new(config), server).unwrap();
    let mut hello = Vec::new();
    conn.write_tls(&mut hello).unwrap();
    hello
}

#[test]
fn a_tunnel_carrying_tls_for_another_host_is_a_mismatch_and_proposes_no_entry() {
    let up = Upstream::start();
    let (_p, at, heard) = proxy(up.port);
    let mut s = tunnel(at, up.port, Duration::from_secs(5));
    s.write_all(&client_hello("other.test")).unwrap();
    let _ = s.read(&mut [0u8; 200]);
    std::thread::sleep(Duration::from_millis(200));
    let heard = heard.0.lock().unwrap();
    let denied: Vec<&Decision> = heard.iter().filter(|d| !d.allowed).collect();
    assert_eq!(denied.len(), 1, "{heard:?}");
    let reason = denied[0].reason.as_ref().map(|c| c.reason);
    assert_eq!(
        reason,
        Some(warden_egress::decision::Reason::TunnelMismatch),
        "{heard:?}"
    );
}
