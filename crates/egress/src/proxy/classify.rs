//! Classifying: what a connection's first bytes say it is.
//!
//! This module owns reading the first bytes (a TLS record with its
//! ClientHello, an HTTP request head, a CONNECT) until they say what the
//! connection is, within their timeouts, answering a CONNECT and reading
//! what then comes through the tunnel, and telling a protocol other than
//! TLS and HTTP (or silence) from one still undecided. It never decides
//! whether a connection may go: `decide` does, on what is read here.

use crate::http::{parse_request_head, HttpError, MAX_HEAD};
use crate::tls::{self, ClientHello, MAX_CLIENT_HELLO};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// How long a client has to say where it goes.
pub(super) const FIRST_BYTES_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a connection to a `name:port` address may stay silent before
/// it is taken for a protocol where the server speaks first.
pub(super) const SERVER_FIRST_WAIT: Duration = Duration::from_millis(300);

/// What the first bytes of a connection are, read once per arrival of
/// bytes: a TLS record, or else (perhaps) an HTTP request head.
pub(super) enum First {
    Tls(ClientHello),
    Http(Result<Option<crate::http::RequestHead>, HttpError>),
}

fn classify(buf: &[u8], port: u16) -> First {
    match tls::peek(buf) {
        ClientHello::NotTls => First::Http(parse_request_head(buf, port)),
        hello => First::Tls(hello),
    }
}

impl First {
    /// More bytes could change what this is.
    fn undecided(&self) -> bool {
        matches!(
            self,
            First::Tls(ClientHello::Incomplete) | First::Http(Ok(None))
        )
    }

    /// Neither TLS nor HTTP: some other protocol.
    fn other_protocol(&self) -> bool {
        matches!(self, First::Http(Err(HttpError::Malformed(_))))
    }
}

/// Whether the bytes so far (perhaps none) are of a protocol other than
/// TLS and HTTP, from a read's result or, when it failed, from the bytes.
pub(super) fn speaks_other(first: &Result<First, String>, buf: &[u8], port: u16) -> bool {
    buf.is_empty()
        || match first {
            Ok(f) => f.other_protocol(),
            // Nothing decided in time: bytes that never became TLS or HTTP
            // are some other protocol's.
            Err(_) => {
                let f = classify(buf, port);
                f.other_protocol() || f.undecided()
            }
        }
}

/// Read until the first bytes say what the connection is (or fail).
pub(super) async fn read_first_bytes(
    conn: &mut TcpStream,
    buf: &mut Vec<u8>,
    wait: Duration,
    port: u16,
) -> Result<First, String> {
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        if !buf.is_empty() {
            let first = classify(buf, port);
            if !first.undecided() {
                return Ok(first);
            }
        }
        if buf.len() >= MAX_CLIENT_HELLO.max(MAX_HEAD) {
            return Err("the first bytes say nothing a decision can rest on".into());
        }
        let mut chunk = [0u8; 4096];
        let read = tokio::time::timeout_at(deadline, conn.read(&mut chunk)).await;
        match read {
            Err(_) => return Err("the client sent nothing to decide on in time".into()),
            Ok(Ok(0)) => return Err("the client closed before saying where it goes".into()),
            Ok(Ok(n)) => buf.extend_from_slice(&chunk[..n]),
            Ok(Err(e)) => return Err(format!("read error: {e}")),
        }
    }
}

/// Answer a CONNECT at once and read the first bytes sent through the
/// tunnel: the CONNECT's head leaves `buf`, which then holds them.
pub(super) async fn through_tunnel(
    conn: &mut TcpStream,
    buf: &mut Vec<u8>,
    to_port: u16,
    wait: Duration,
) -> Result<First, String> {
    let head_len = request_head_len(buf, to_port);
    buf.drain(..head_len.min(buf.len()));
    let answered = conn
        .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
        .await;
    match answered {
        Err(e) => Err(format!("cannot answer the CONNECT: {e}")),
        Ok(()) => read_first_bytes(conn, buf, wait, to_port).await,
    }
}

/// The length of the request head `buf` starts with, or all of `buf` when
/// it does not start with a complete one.
pub(super) fn request_head_len(buf: &[u8], port: u16) -> usize {
    parse_request_head(buf, port)
        .ok()
        .flatten()
        .map(|h| h.head_len)
        .unwrap_or(buf.len())
}
