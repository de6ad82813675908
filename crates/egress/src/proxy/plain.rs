//! Plain HTTP: what becomes of an allowed connection that speaks HTTP
//! without TLS (to a name allowed with plain HTTP or a host service, and
//! plain HTTP inside a CONNECT tunnel).
//!
//! This module owns serving such a connection request by request: each
//! request the sandbox sends is read by hyper, decided again as the first
//! one was (its `Host` or absolute URI, read by the same parser, must name
//! the connection's own name and port; no placeholder of a secret on its
//! way elsewhere; the quota), and re-framed by warden's own client on the
//! one upstream connection the decision made. No byte the sandbox sends
//! reaches the upstream unparsed: a request under another `Host` is
//! answered 421 and the connection closed; a head hyper cannot read is
//! answered 400 and nothing of it leaves; a body is framed by hyper's
//! reading, so a request hidden in one stays body; an upgrade is sent
//! without its `Upgrade` header, so the server never switches and nothing
//! after it goes unread. Each request goes upstream with `Connection:
//! close` and its answer ends the sandbox's connection: a server that
//! would read a body as a request of its own stops after the one decided,
//! and a client of the explicit proxy (which reuses a connection for other
//! hosts) opens a new one for each. It never decides whether the connection may be made
//! (`decide` did) and never splices bytes.

use super::decide::{admit, Refusal};
use super::{live, Arrival, Shared};
use crate::decision::{Cause, Decision, Protocol, Reason};
use crate::http::parse_request_head;
use crate::metered::Metered;
use bytes::Bytes;
use http_body_util::{combinators::BoxBody, BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use std::sync::Arc;
use tokio::net::TcpStream;

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type Body = BoxBody<Bytes, BoxError>;

/// Headers of one hop only, never passed on either way. `expect` too:
/// hyper answers a `100-continue` itself, and the body follows.
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authorization",
    "proxy-authenticate",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "expect",
];

/// The largest head or buffered read either side may hold, when the
/// proxy's budget lends the buffers a relay uses (see `pass`); without
/// them, the smallest hyper takes.
const BUFFER: usize = 64 * 1024;
const SMALL_BUFFER: usize = 8 * 1024;

/// Why serving a connection ended early.
#[derive(Debug, thiserror::Error)]
enum PlainError {
    /// The upstream closed its connection before a request could be
    /// sent: the sandbox's connection is closed unanswered, as a server's
    /// closed kept-alive connection is, and its client asks again.
    #[error("the upstream closed the connection")]
    UpstreamGone,
}

/// The connection a plain HTTP conversation was allowed for.
pub(super) struct Allowed<'a> {
    pub(super) name: &'a str,
    pub(super) port: u16,
    /// The port a request's `Host` without one means: the one the first
    /// request was decided with.
    pub(super) default_port: u16,
    pub(super) at: &'a Arrival,
}

/// What passed, once the connection has ended.
pub(super) struct Served {
    /// Bytes read from the sandbox and written to it.
    pub(super) out: u64,
    pub(super) inn: u64,
    /// The connection's name was removed from the allowlist.
    pub(super) cut: bool,
    /// Why it ended other than by a close, in words.
    pub(super) ended: Option<String>,
}

/// What each request is decided and sent with.
struct State {
    shared: Arc<Shared>,
    name: String,
    port: u16,
    default_port: u16,
    at: Arrival,
    upstream: tokio::sync::Mutex<hyper::client::conn::http1::SendRequest<Body>>,
}

/// Serve `conn` (with `first`, the bytes already read to decide) request
/// by request towards `upstream`, until either side closes, the idle
/// timeout passes without a byte, or the name is removed.
pub(super) async fn serve(
    conn: TcpStream,
    first: Vec<u8>,
    upstream: TcpStream,
    allowed: Allowed<'_>,
    shared: &Arc<Shared>,
    registration: &mut live::Registration,
) -> Served {
    let _ = upstream.set_nodelay(true);
    // hyper's buffers are paid for as a splice's are: lent by the
    // budget while the connection is open, the smallest without a loan.
    let lease = shared
        .buffer_memory
        .clone()
        .try_acquire_many_owned(super::pass::START_BUFFERS)
        .ok();
    let limit = if lease.is_some() {
        BUFFER
    } else {
        SMALL_BUFFER
    };
    let metered = Metered::new(conn, first, Some(shared.used.clone()));
    let meter = metered.meter();
    let served = |cut: bool, ended: Option<String>| Served {
        out: meter.read(),
        inn: meter.written(),
        cut,
        ended,
    };
    // Header names keep the case the sandbox's client wrote them in (hyper
    // would lower-case them), and warden's own (`Host`, `Connection`) are
    // title-cased: servers that match names by case still read them.
    let handshake = hyper::client::conn::http1::Builder::new()
        .max_buf_size(limit)
        .preserve_header_case(true)
        .title_case_headers(true)
        .handshake::<_, Body>(TokioIo::new(upstream))
        .await;
    let (sender, driver) = match handshake {
        Ok(h) => h,
        Err(e) => return served(false, Some(format!("HTTP to the upstream failed: {e}"))),
    };
    let at = allowed.at;
    let state = Arc::new(State {
        shared: shared.clone(),
        name: allowed.name.to_string(),
        port: allowed.port,
        default_port: allowed.default_port,
        at: Arrival {
            start: at.start,
            epoch: at.epoch,
            original: at.original,
            port: at.port,
        },
        upstream: tokio::sync::Mutex::new(sender),
    });
    let service = hyper::service::service_fn(move |req| {
        let s = state.clone();
        async move { exchange(req, &s).await }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .max_buf_size(limit)
        .keep_alive(false)
        // A client that shuts its side after the request (`nc`, `curl
        // --data @- ` of a pipe) still waits for the answer.
        .half_close(true)
        .preserve_header_case(true)
        .title_case_headers(true);
    // Closed lingering: a refusal's answer is never lost to a reset.
    let connection = builder.serve_connection(
        TokioIo::new(crate::linger::Lingering::new(metered)),
        service,
    );
    // The upstream's side is driven here, beside the sandbox's: when it
    // ends (the upstream closed), the sandbox's side writes out the answer
    // it is writing, if any, and closes, as the upstream did.
    let idle = meter.silent_for(shared.idle);
    tokio::pin!(connection, driver, idle);
    let mut driven = false;
    let end = loop {
        tokio::select! {
            r = &mut connection => break served(false, r.err().map(|e| format!("the connection ended with an error: {e}"))),
            _ = &mut driver, if !driven => {
                driven = true;
                connection.as_mut().graceful_shutdown();
            }
            () = &mut idle => break served(false, Some(format!("closed after {} s without a byte either way", shared.idle.as_secs()))),
            () = registration.cut() => break served(true, None),
        }
    };
    drop(lease);
    end
}

/// One request: decided as the first was, re-framed and sent on the
/// connection's upstream; its answer relayed back, or warden's own.
async fn exchange(req: Request<Incoming>, s: &State) -> Result<Response<Body>, PlainError> {
    let (parts, body) = req.into_parts();
    let head = head_of(&parts);
    if let Some(why) = misdirected(&head, s) {
        record_refusal(s, Cause::new(Reason::MisdirectedRequest), why.clone());
        return Ok(text(
            StatusCode::MISDIRECTED_REQUEST,
            Reason::MisdirectedRequest,
            why,
        ));
    }
    match admit(&s.shared, &head, Protocol::Http, &s.at, &s.name, s.port) {
        Ok(()) => {}
        // Recorded by `admit` as the secret's own decision.
        Err(Refusal::Stray(why)) => {
            return Ok(text(
                StatusCode::FORBIDDEN,
                Reason::StrayPlaceholder,
                format!("denied: {why}"),
            ))
        }
        Err(quota) => {
            let (why, cause) = quota.why();
            record_refusal(s, cause.clone(), why.clone());
            return Ok(text(
                StatusCode::FORBIDDEN,
                cause.reason,
                format!("denied: {why}"),
            ));
        }
    }
    let request = reframed(parts, body, s);
    let response = {
        let mut sender = s.upstream.lock().await;
        sender.ready().await.map_err(|_| PlainError::UpstreamGone)?;
        sender.send_request(request).await
    };
    let response = match response {
        Ok(r) => r,
        Err(e) => {
            return Ok(text(
                StatusCode::BAD_GATEWAY,
                Reason::UpstreamFailed,
                format!("the request to {} failed: {e}", s.name),
            ))
        }
    };
    if response.status() == StatusCode::SWITCHING_PROTOCOLS {
        // Never asked for (the `Upgrade` header was not sent on): what
        // would follow could not be read.
        return Ok(text(
            StatusCode::BAD_GATEWAY,
            Reason::UpstreamFailed,
            format!("{} switched protocols unasked over plain HTTP", s.name),
        ));
    }
    let (mut parts, body) = response.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    // One request per connection, both ways (see `reframed`).
    parts.headers.insert(
        http::header::CONNECTION,
        http::HeaderValue::from_static("close"),
    );
    Ok(Response::from_parts(
        parts,
        body.map_err(|e| Box::new(e) as BoxError).boxed(),
    ))
}

/// The request's head as the first request's was read (request line and
/// headers), for the same parser and checks to read it.
fn head_of(parts: &http::request::Parts) -> Vec<u8> {
    let mut head = format!("{} {} HTTP/1.1\r\n", parts.method, parts.uri).into_bytes();
    for (name, value) in &parts.headers {
        head.extend_from_slice(name.as_str().as_bytes());
        head.extend_from_slice(b": ");
        head.extend_from_slice(value.as_bytes());
        head.extend_from_slice(b"\r\n");
    }
    head.extend_from_slice(b"\r\n");
    head
}

/// Why a request is not for the connection's own name and port, when it
/// is not: it names another (or several, or none that reads), or it is a
/// CONNECT.
fn misdirected(head: &[u8], s: &State) -> Option<String> {
    match parse_request_head(head, s.default_port) {
        Ok(Some(h)) if h.connect => Some(format!(
            "a CONNECT on the connection to {}:{}: only requests for it are sent on",
            s.name, s.port
        )),
        Ok(Some(h)) if h.destination.host == s.name && h.destination.port == s.port => None,
        Ok(Some(h)) => Some(format!(
            "a request for {}:{} on the connection to {}:{}: each connection carries requests for the name it was allowed for",
            h.destination.host, h.destination.port, s.name, s.port
        )),
        Ok(None) => Some("a request head that cannot be read whole".into()),
        Err(e) => Some(format!("a request that cannot be decided: {e}")),
    }
}

/// The request as the upstream gets it: an origin-form target, the
/// connection's own `Host`, no header of one hop, HTTP/1.1 framing of
/// warden's own client (the length from hyper's reading of the body).
fn reframed(mut parts: http::request::Parts, body: Incoming, s: &State) -> Request<Body> {
    let target = parts
        .uri
        .path_and_query()
        .map(|p| p.as_str())
        .filter(|p| !p.is_empty())
        .unwrap_or("/");
    if let Ok(uri) = target.parse::<http::Uri>() {
        parts.uri = uri;
    }
    strip_hop_by_hop(&mut parts.headers);
    parts.headers.remove(http::header::CONTENT_LENGTH);
    let host = if s.port == 80 {
        s.name.clone()
    } else {
        format!("{}:{}", s.name, s.port)
    };
    if let Ok(v) = http::HeaderValue::from_str(&host) {
        parts.headers.insert(http::header::HOST, v);
    }
    // Sent with `Connection: close`, and the sandbox's connection closed
    // after the answer: a server that reads a body as a request of its own
    // (one that ignores a body it did not want) stops after this one, and
    // a client of the explicit proxy, which reuses a connection for other
    // hosts, opens a new one for each.
    parts.headers.insert(
        http::header::CONNECTION,
        http::HeaderValue::from_static("close"),
    );
    parts.version = http::Version::HTTP_11;
    Request::from_parts(parts, body.map_err(|e| Box::new(e) as BoxError).boxed())
}

/// Remove the headers of one hop, and those the `Connection` header
/// names as such.
fn strip_hop_by_hop(headers: &mut http::HeaderMap) {
    let named: Vec<String> = headers
        .get_all(http::header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|t| t.trim().to_ascii_lowercase())
        .filter(|t| !t.is_empty())
        .collect();
    for h in HOP_BY_HOP.iter().copied().map(str::to_string).chain(named) {
        headers.remove(h.as_str());
    }
}

/// Record a request refused on the connection.
fn record_refusal(s: &State, cause: Cause, why: String) {
    s.shared.record(&Decision {
        protocol: Protocol::Request,
        name: Some(s.name.clone()),
        port: s.port,
        original_destination: s.at.original.map(|a| a.to_string()),
        allowed: false,
        rule: None,
        detail: why,
        bytes_out: 0,
        bytes_in: 0,
        duration_ms: s.at.start.elapsed().as_millis() as u64,
        reason: Some(cause),
    });
}

/// warden's own answer, its reason's code in `X-Warden-Reason`, and the
/// connection closed after it: what the sandbox sent next is not read.
fn text(status: StatusCode, reason: Reason, why: String) -> Response<Body> {
    let mut r = Response::new(
        Full::new(Bytes::from(format!("warden: {why}\n")))
            .map_err(|never| match never {})
            .boxed(),
    );
    *r.status_mut() = status;
    let headers = r.headers_mut();
    headers.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain"),
    );
    headers.insert(
        "x-warden-reason",
        http::HeaderValue::from_static(reason.code()),
    );
    headers.insert(
        http::header::CONNECTION,
        http::HeaderValue::from_static("close"),
    );
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_of_one_hop_and_those_connection_names_are_not_passed_on() {
        let mut h = http::HeaderMap::new();
        for (k, v) in [
            ("connection", "keep-alive, x-secret-hop"),
            ("keep-alive", "5"),
            ("x-secret-hop", "1"),
            ("upgrade", "websocket"),
            ("proxy-authorization", "Basic Zm9v"),
            ("transfer-encoding", "chunked"),
            ("accept", "*/*"),
        ] {
            h.append(k, http::HeaderValue::from_static(v));
        }
        strip_hop_by_hop(&mut h);
        let left: Vec<&str> = h.keys().map(|k| k.as_str()).collect();
        assert_eq!(left, vec!["accept"]);
    }
}
