//! A terminated connection: the requests of one connection from the
//! sandbox to one secret's host.
//!
//! This module owns the request loop: TLS accepted with the authority's
//! leaf and served by hyper (HTTP/1.1 or HTTP/2), a second TLS connection
//! to the same upstream address with a hyper client, `--secret-rule`
//! (403), requests for another host on this connection (421), each
//! request's target, headers and body rewritten and each response scrubbed
//! as it streams, the idle timeout, and the recording of what was
//! substituted, scrubbed or blocked. It never decides whether the
//! connection may be made (the proxy did) and never records a value.

use super::coding::{self, DecodeBody};
use super::rewrite::{
    rewrite_headers, Action, Blocked, Kind, Patterns, Place, RewriteBody, Rewriter, Violation,
};
use super::target::{check_authority, forwarded_authority, normalise_path, TargetError};
use super::{
    bulk, heads, outbound, ruled, upgrade, zero, BoxError, OutBody, Recorder, Terminator,
    BUFFER_LIMIT, H2_STREAMS,
};
use crate::decision::{Cause, Decision, Protocol, Reason, SecretAction};
use crate::metered::Metered;
use base64::Engine;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::{Body, Incoming};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::ServerName;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use tokio::net::TcpStream;

/// Request bodies read whole for substitution (`--secret-in-body`) are at
/// most this large; larger ones are refused with 413.
const MAX_SUBSTITUTED_BODY: usize = 16 << 20;

enum Sender {
    H1(tokio::sync::Mutex<hyper::client::conn::http1::SendRequest<OutBody>>),
    H2(hyper::client::conn::http2::SendRequest<OutBody>),
}

/// One terminated connection: where it goes, and how to reach it.
pub(super) struct Session {
    pub(super) term: Arc<Terminator>,
    pub(super) name: String,
    pub(super) port: u16,
    upstream: Result<Sender, String>,
    /// The address the upstream connection was made to (a WebSocket's
    /// upgrade gets a connection of its own to the same address).
    pub(super) peer: Option<std::net::SocketAddr>,
    /// A WebSocket relayed after its upgrade: the session lasts as long.
    pub(super) upgraded: std::sync::Mutex<Option<Stopped<()>>>,
    record: Recorder,
    head: Arc<Patterns>,
    target: Arc<Patterns>,
    body: Arc<Patterns>,
    scrub: Arc<Patterns>,
    /// Some secret of this host is substituted in bodies.
    body_substitution: bool,
    /// The TLS server name the sandbox asked for.
    sni: Option<String>,
}

impl Session {
    fn decision(&self, secret: usize, action: SecretAction, detail: String) -> Decision {
        self.decision_for(secret, action, detail, None)
    }

    /// A secret decision; a blocked one's reason is `reason`, or a
    /// withheld response's.
    fn decision_for(
        &self,
        secret: usize,
        action: SecretAction,
        detail: String,
        reason: Option<Reason>,
    ) -> Decision {
        let reason = match action {
            SecretAction::Substituted => Reason::Substituted,
            SecretAction::Scrubbed => Reason::Scrubbed,
            SecretAction::Blocked => reason.unwrap_or(Reason::ResponseWithheld),
        };
        Decision {
            protocol: Protocol::Secret(action),
            name: Some(self.name.clone()),
            port: self.port,
            original_destination: None,
            allowed: action != SecretAction::Blocked,
            rule: self.term.secrets.get(secret).map(|s| s.name.clone()),
            detail,
            bytes_out: 0,
            bytes_in: 0,
            duration_ms: 0,
            reason: Some(Cause::new(reason)),
        }
    }

    /// A blocked secret's decision and its words.
    fn blocked(&self, b: Blocked) -> Decision {
        let reason = match b.violation {
            Violation::Placeholder => Reason::StrayPlaceholder,
            Violation::Value => Reason::SecretValue,
        };
        self.decision_for(
            b.secret,
            SecretAction::Blocked,
            self.blocked_why(b),
            Some(reason),
        )
    }

    fn blocked_why(&self, b: Blocked) -> String {
        let name = self
            .term
            .secrets
            .get(b.secret)
            .map(|s| s.name.as_str())
            .unwrap_or("?");
        match b.violation {
            Violation::Placeholder => format!(
                "blocked: the placeholder of secret {name} in a request to {}, which is not one of its hosts",
                self.name
            ),
            Violation::Value => format!(
                "blocked: the real value of secret {name} in a request from inside the sandbox"
            ),
        }
    }

    /// A request whose body carried a credential, refused or cut (`how`).
    fn credential(&self, what: &str, f: &warden_detect::Finding, how: &str) -> Decision {
        Decision {
            protocol: Protocol::Request,
            name: Some(self.name.clone()),
            port: self.port,
            original_destination: None,
            allowed: false,
            rule: Some(f.rule.clone()),
            detail: format!("{how}: {} of {what}", outbound::described(f)),
            bytes_out: 0,
            bytes_in: 0,
            duration_ms: 0,
            reason: Some(Cause::new(Reason::CredentialInBody)),
        }
    }

    /// A refused request's decision, of protocol `request`.
    fn refusal(&self, reason: Reason, why: String) -> Decision {
        Decision {
            protocol: Protocol::Request,
            name: Some(self.name.clone()),
            port: self.port,
            original_destination: None,
            allowed: false,
            rule: None,
            detail: why,
            bytes_out: 0,
            bytes_in: 0,
            duration_ms: 0,
            reason: Some(Cause::new(reason)),
        }
    }

    /// Refuse a request before anything of it goes upstream, recorded as a
    /// denied decision of protocol `request`.
    fn refuse(&self, status: StatusCode, cause: Cause, why: String) -> Response<OutBody> {
        (self.record)(Decision {
            protocol: Protocol::Request,
            name: Some(self.name.clone()),
            port: self.port,
            original_destination: None,
            allowed: false,
            rule: None,
            detail: why.clone(),
            bytes_out: 0,
            bytes_in: 0,
            duration_ms: 0,
            reason: Some(cause.clone()),
        });
        text(status, cause.reason, format!("warden: {why}\n"))
    }

    fn block(&self, b: Blocked) -> Response<OutBody> {
        let decision = self.blocked(b);
        let why = decision.detail.clone();
        let reason = decision
            .reason
            .as_ref()
            .map_or(Reason::StrayPlaceholder, |c| c.reason);
        (self.record)(decision);
        text(StatusCode::FORBIDDEN, reason, format!("warden: {why}\n"))
    }
}

/// warden's own answer to a request on a terminated connection: its
/// status, its reason's code in `X-Warden-Reason` (as the proxy's own
/// refusals carry it), and why in words.
fn text(status: StatusCode, reason: Reason, body: String) -> Response<OutBody> {
    let mut r = Response::new(
        Full::new(Bytes::from(body))
            .map_err(|never| match never {})
            .boxed(),
    );
    *r.status_mut() = status;
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain"),
    );
    r.headers_mut().insert(
        "x-warden-reason",
        http::HeaderValue::from_static(reason.code()),
    );
    r
}

/// Headers of one hop only, never passed on.
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// [`serve`] on the terminator's own threads, apart from the proxy's (so
/// that what a terminated connection costs never keeps the sandbox's DNS
/// answers or its other connections waiting): both sockets move to that
/// runtime, and the connection is served there until it ends, or until
/// this future is dropped (the proxy cut it), which stops it.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn serve_apart(
    term: Arc<Terminator>,
    client: TcpStream,
    first: Vec<u8>,
    upstream: TcpStream,
    name: String,
    port: u16,
    record: Recorder,
    idle: std::time::Duration,
    quota: Option<Arc<AtomicU64>>,
) -> Result<(u64, u64), String> {
    let Some(workers) = term.workers() else {
        return serve(
            term, client, first, upstream, name, port, record, idle, quota,
        )
        .await;
    };
    let moved = |e: std::io::Error| {
        format!("cannot move the connection to the secret proxy's threads: {e}")
    };
    let client = client.into_std().map_err(moved)?;
    let upstream = upstream.into_std().map_err(moved)?;
    let mut task = Stopped(workers.spawn(async move {
        let client = TcpStream::from_std(client).map_err(moved)?;
        let upstream = TcpStream::from_std(upstream).map_err(moved)?;
        serve(
            term, client, first, upstream, name, port, record, idle, quota,
        )
        .await
    }));
    match (&mut task.0).await {
        Ok(served) => served,
        Err(e) => Err(format!("the terminated connection's task ended: {e}")),
    }
}

/// A task that is stopped when the future waiting for it is dropped.
pub(super) struct Stopped<T>(pub(super) tokio::task::JoinHandle<T>);

impl<T> Drop for Stopped<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Serve one connection from the sandbox whose TLS is terminated here:
/// `client` (with the bytes already read to decide) towards `upstream`, a
/// TCP connection to `name:port` already made. Returns the bytes read from
/// and written to the sandbox. The connection is closed after `idle`
/// without a byte either way.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn serve(
    term: Arc<Terminator>,
    client: TcpStream,
    first: Vec<u8>,
    upstream: TcpStream,
    name: String,
    port: u16,
    record: Recorder,
    idle: std::time::Duration,
    quota: Option<Arc<AtomicU64>>,
) -> Result<(u64, u64), String> {
    let counted = Metered::new(client, first, quota);
    let meter = counted.meter();
    let acceptor = tokio_rustls::TlsAcceptor::from(term.server.clone());
    let mut tls = acceptor.accept(counted).await.map_err(|e| {
        format!("the sandbox did not accept the secret proxy's certificate for {name} (is the sandbox's trust bundle in use?): {e}")
    })?;
    tls.get_mut().1.set_buffer_limit(Some(BUFFER_LIMIT));
    let sni = tls.get_ref().1.server_name().map(str::to_string);
    let peer = upstream.peer_addr().ok();
    let upstream = connect_tls(&term, upstream, &name).await;
    let session = Arc::new(Session {
        sni,
        peer,
        upgraded: std::sync::Mutex::new(None),
        head: term.request_patterns(&name, port, Place::Header),
        target: term.request_patterns(&name, port, Place::Target),
        body: term.request_patterns(&name, port, Place::Body),
        scrub: term.scrub.clone(),
        body_substitution: term
            .secrets
            .iter()
            .any(|s| s.in_bodies && s.covers(&name, port)),
        term,
        name,
        port,
        upstream,
        record,
    });
    let held = session.clone();
    let service = hyper::service::service_fn(move |req| {
        let s = session.clone();
        async move { Ok::<_, std::convert::Infallible>(handle(req, &s).await) }
    });
    // HTTP/2 where the sandbox's client chose it by ALPN, else HTTP/1.1
    // on hyper's own HTTP/1 server (not the protocol-sniffing one, whose
    // stream an upgrade hands back wrapped in a type of its own): an
    // upgrade then gives back the sandbox's stream as its known type with
    // whatever hyper read behind the upgrade's head, which `upgrade`
    // never relays.
    let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
    let io = TokioIo::new(tls);
    let connection: Pin<Box<dyn Future<Output = Result<(), hyper::Error>> + Send>> = if h2 {
        Box::pin(
            hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                .max_concurrent_streams(H2_STREAMS)
                .initial_stream_window_size(BUFFER_LIMIT as u32)
                .initial_connection_window_size(BUFFER_LIMIT as u32)
                .max_send_buf_size(BUFFER_LIMIT / H2_STREAMS as usize)
                .max_header_list_size(BUFFER_LIMIT as u32)
                .serve_connection(io, service),
        )
    } else {
        Box::pin(
            hyper::server::conn::http1::Builder::new()
                .max_buf_size(BUFFER_LIMIT)
                .serve_connection(io, service)
                .with_upgrades(),
        )
    };
    // A WebSocket's relay outlives the HTTP connection it was upgraded
    // from: the session ends with it.
    let whole = async {
        connection
            .await
            .map_err(|e| format!("the terminated connection ended with an error: {e}"))?;
        let relay = held.upgraded.lock().ok().and_then(|mut u| u.take());
        if let Some(mut relay) = relay {
            let _ = (&mut relay.0).await;
        }
        Ok(())
    };
    let served = tokio::select! {
        r = whole => r,
        () = meter.silent_for(idle) => Err(format!("closed after {} s without a byte either way", idle.as_secs())),
    };
    served.map(|()| (meter.read(), meter.written()))
}

async fn connect_tls(term: &Terminator, upstream: TcpStream, name: &str) -> Result<Sender, String> {
    let server_name = ServerName::try_from(name.to_string())
        .map_err(|e| format!("{name} is not a TLS server name: {e}"))?;
    let mut tls = tokio_rustls::TlsConnector::from(term.client.clone())
        .connect(server_name, bulk::read_ahead(upstream, BUFFER_LIMIT))
        .await
        .map_err(|e| format!("TLS to the upstream {name} failed: {e}"))?;
    tls.get_mut().1.set_buffer_limit(Some(BUFFER_LIMIT));
    let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
    let io = TokioIo::new(bulk::Gathered::new(tls));
    if h2 {
        let (sender, conn) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
            .initial_stream_window_size(BUFFER_LIMIT as u32)
            .initial_connection_window_size(BUFFER_LIMIT as u32)
            .max_send_buf_size(BUFFER_LIMIT / H2_STREAMS as usize)
            .max_concurrent_reset_streams(H2_STREAMS as usize)
            .max_header_list_size(BUFFER_LIMIT as u32)
            .handshake(io)
            .await
            .map_err(|e| format!("HTTP/2 to the upstream {name} failed: {e}"))?;
        tokio::spawn(conn);
        Ok(Sender::H2(sender))
    } else {
        let (sender, conn) = hyper::client::conn::http1::Builder::new()
            .max_buf_size(BUFFER_LIMIT)
            .handshake(io)
            .await
            .map_err(|e| format!("HTTP/1.1 to the upstream {name} failed: {e}"))?;
        tokio::spawn(conn);
        Ok(Sender::H1(tokio::sync::Mutex::new(sender)))
    }
}

/// warden's answer in place of the upstream's, when a stage of a request
/// refuses it.
type Answer = Box<Response<OutBody>>;

/// warden's own answer ([`text`]) as a stage's refusal.
fn answer(status: StatusCode, reason: Reason, body: String) -> Answer {
    Box::new(text(status, reason, body))
}

/// One request from the sandbox: checked, its placeholders substituted,
/// forwarded, and its response scrubbed on the way back. A stage that
/// refuses answers in the upstream's place.
async fn handle(req: Request<Incoming>, s: &Arc<Session>) -> Response<OutBody> {
    match exchange(req, s).await {
        Ok(response) => response,
        Err(answer) => *answer,
    }
}

/// The stages of one request in order: authority, rules, target, headers,
/// body, forward.
async fn exchange(req: Request<Incoming>, s: &Arc<Session>) -> Result<Response<OutBody>, Answer> {
    let upstream = s.upstream.as_ref().map_err(|why| {
        answer(
            StatusCode::BAD_GATEWAY,
            Reason::UpstreamFailed,
            format!("warden: {why}\n"),
        )
    })?;
    let (parts, body) = req.into_parts();
    let path = checked_path(s, &parts)?;
    // The sandbox's own head, before any placeholder is substituted.
    if let Some(found) = heads::first_finding(&parts) {
        let what = format!("{} {}{}", parts.method, s.name, parts.uri.path());
        let why = format!("refused: {} of {what}", found.described());
        let rule = found.finding.rule.clone();
        (s.record)(Decision {
            rule: Some(rule),
            ..s.refusal(Reason::CredentialInRequest, why.clone())
        });
        return Err(answer(
            StatusCode::FORBIDDEN,
            Reason::CredentialInRequest,
            format!("warden: {why}\n"),
        ));
    }
    let websocket = upgrade::is_websocket(&parts);
    if websocket {
        if let Some((cause, why)) = refusal(s) {
            return Err(Box::new(s.refuse(StatusCode::FORBIDDEN, cause, why)));
        }
    }
    // The name's request rules decide on that path (and, where a rule
    // names JSON-RPC methods, on the start of the body).
    let ruled::Let { body, tally } =
        ruled::judge(&s.term, (&s.name, s.port), &s.record, &parts, &path, body).await?;
    // The sandbox's own bytes, before any placeholder is substituted.
    let body = scanned_body(s, &parts, body).await?;
    let mut substituted: Vec<usize> = Vec::new();
    let target = substituted_target(s, &parts, path, &mut substituted)?;
    let mut headers = substituted_headers(s, &parts, &mut substituted)?;
    let body = substituted_body(s, body, &mut headers, &mut substituted).await?;
    substituted.sort_unstable();
    substituted.dedup();
    for i in &substituted {
        (s.record)(s.decision(
            *i,
            SecretAction::Substituted,
            format!("substituted in {} {}", parts.method, parts.uri.path()),
        ));
    }
    if websocket {
        return upgraded(s, parts, (headers, target, body), tally).await;
    }
    let request = Outgoing {
        parts,
        headers,
        target,
        body,
    };
    let response = forward(s, upstream, request).await?;
    // An allowed request is recorded with its bytes once its answer is
    // relayed.
    Ok(match tally {
        Some(t) => t.answered(response),
        None => response,
    })
}

/// A WebSocket's upgrade, its rules passed and its request substituted:
/// relayed by `upgrade` on a connection of its own.
async fn upgraded(
    s: &Arc<Session>,
    mut parts: http::request::Parts,
    (mut headers, target, body): (http::HeaderMap, String, OutBody),
    tally: Option<ruled::Tally>,
) -> Result<Response<OutBody>, Answer> {
    let client = parts.extensions.remove::<hyper::upgrade::OnUpgrade>();
    let uri = target.parse::<http::Uri>().map_err(|_| bad_target())?;
    if let Ok(v) = http::HeaderValue::from_str(&forwarded_authority(&s.name, s.port)) {
        headers.insert(http::header::HOST, v);
    }
    parts.uri = uri;
    parts.headers = headers;
    parts.version = http::Version::HTTP_11;
    let failed = |why: String| {
        answer(
            StatusCode::BAD_GATEWAY,
            Reason::UpstreamFailed,
            format!("warden: {why}\n"),
        )
    };
    let Some(client) = client else {
        return Err(failed("the sandbox's side of the upgrade is gone".into()));
    };
    let early = {
        let s = s.clone();
        Box::new(move |n: usize| {
            let why = format!(
                "closed: the WebSocket to {} was sent {n} bytes behind its upgrade request before the server's 101, which were never decided as a request; nothing of them was relayed",
                s.name
            );
            (s.record)(s.refusal(Reason::BytesBeforeUpgrade, why));
        })
    };
    let upgrade = upgrade::Upgrade {
        client,
        tally,
        early,
    };
    let to = upgrade::Upstream {
        name: &s.name,
        peer: s.peer,
        client: &s.term.client,
    };
    let (response, task) = upgrade::relay(&to, Request::from_parts(parts, body), upgrade)
        .await
        .map_err(failed)?;
    // The session waits for the relay (within its idle timeout) and stops
    // it when it ends.
    if let (Some(task), Ok(mut u)) = (task, s.upgraded.lock()) {
        *u = Some(Stopped(task));
    }
    Ok(response)
}

/// Why an upgrade cannot be relayed on this session, if it cannot.
fn refusal(s: &Session) -> Option<(Cause, String)> {
    s.term
        .secrets
        .iter()
        .any(|x| x.covers(&s.name, s.port))
        .then(|| {
            (
                Cause::new(Reason::UpgradeWithSecrets),
                format!(
                    "refused: a WebSocket to {}, a secret's host: the frames after the upgrade could not be checked for the secret",
                    s.name
                ),
            )
        })
}

/// An empty body, for warden's own answers that carry none.
/// The body checked for credentials as it leaves (see `outbound`): a
/// body read whole that carries one is refused here, a longer one is cut
/// where the value starts, and either is recorded.
async fn scanned_body(
    s: &Arc<Session>,
    parts: &http::request::Parts,
    body: OutBody,
) -> Result<OutBody, Answer> {
    let what = format!("{} {}{}", parts.method, s.name, parts.uri.path());
    let cut = {
        let (s, what) = (s.clone(), what.clone());
        Box::new(move |f: warden_detect::Finding| {
            (s.record)(s.credential(&what, &f, "cut"));
        })
    };
    match outbound::checked(body, &s.term.decode_memory, cut).await {
        Ok(body) => Ok(body),
        Err(f) => {
            let decision = s.credential(&what, &f, "refused");
            let why = decision.detail.clone();
            (s.record)(decision);
            Err(answer(
                StatusCode::FORBIDDEN,
                Reason::CredentialInBody,
                format!("warden: {why}\n"),
            ))
        }
    }
}

/// The path the upstream will read. The authority and the path are read
/// once, as the upstream will read them; the rules see that, and that is
/// what is forwarded.
fn checked_path(s: &Session, parts: &http::request::Parts) -> Result<String, Answer> {
    let checked = check_authority(parts, s.sni.as_deref(), &s.name, s.port)
        .and_then(|()| normalise_path(parts.uri.path(), s.term.has_rules(&s.name, s.port)));
    let path = checked.map_err(|e| {
        let status = match e {
            TargetError::OtherHost { .. } | TargetError::OtherServerName { .. } => {
                StatusCode::MISDIRECTED_REQUEST
            }
            _ => StatusCode::BAD_REQUEST,
        };
        Box::new(s.refuse(
            status,
            Cause::new(Reason::MisdirectedRequest),
            format!("refused: {e}"),
        ))
    })?;
    if let Some(why) = s
        .term
        .rule_denies(&s.name, s.port, parts.method.as_str(), &path)
    {
        // The rule that would allow this very request.
        let entry = format!("{} {}{path}", parts.method, s.name);
        return Err(Box::new(s.refuse(
            StatusCode::FORBIDDEN,
            Cause::with_entry(Reason::SecretRule, entry),
            why,
        )));
    }
    Ok(path)
}

/// The target: the normalised path and the query, substituted
/// percent-encoded.
fn substituted_target(
    s: &Session,
    parts: &http::request::Parts,
    path: String,
    substituted: &mut Vec<usize>,
) -> Result<String, Answer> {
    let target = match parts.uri.query() {
        Some(q) => format!("{path}?{q}"),
        None => path,
    };
    let (target, r) =
        Rewriter::all(s.target.clone(), target.as_bytes()).map_err(|b| Box::new(s.block(b)))?;
    substituted.extend(r);
    String::from_utf8(target).map_err(|_| bad_target())
}

/// warden's answer to a target that is not one once substituted.
fn bad_target() -> Answer {
    answer(
        StatusCode::BAD_REQUEST,
        Reason::BadRequest,
        "warden: bad request target\n".into(),
    )
}

/// Headers: substituted, Basic credentials decoded first; hop-by-hop ones,
/// the host (set again for the upstream) and the accepted encodings (warden
/// must read the response) left out.
fn substituted_headers(
    s: &Session,
    parts: &http::request::Parts,
    substituted: &mut Vec<usize>,
) -> Result<http::HeaderMap, Answer> {
    let mut headers = http::HeaderMap::new();
    for (k, v) in parts.headers.iter() {
        let key = k.as_str();
        if HOP_BY_HOP.contains(&key) || key == "host" || key == "accept-encoding" {
            continue;
        }
        let (value, r) = rewrite_header(s, k, v.as_bytes()).map_err(|b| Box::new(s.block(b)))?;
        substituted.extend(r);
        let value = http::HeaderValue::from_bytes(&value).map_err(|_| {
            answer(
                StatusCode::BAD_GATEWAY,
                Reason::BadRequest,
                format!("warden: a secret's value cannot stand in the {key} header\n"),
            )
        })?;
        headers.append(k.clone(), value);
    }
    Ok(headers)
}

/// The body: read whole when a secret is substituted in it (its length set
/// again), else streamed and watched.
async fn substituted_body(
    s: &Arc<Session>,
    body: OutBody,
    headers: &mut http::HeaderMap,
    substituted: &mut Vec<usize>,
) -> Result<OutBody, Answer> {
    if !s.body_substitution || body.is_end_stream() {
        let watch = s.clone();
        return Ok(RewriteBody::new(
            body,
            s.body.clone(),
            true,
            None,
            Some(Box::new(move |b| {
                (watch.record)(watch.blocked(b));
            })),
        )
        .boxed());
    }
    let bytes = match collect_limited(body).await {
        Ok(b) => b,
        Err(()) => {
            return Err(answer(
                StatusCode::PAYLOAD_TOO_LARGE,
                Reason::BadRequest,
                format!("warden: a request body with a secret substituted in it may be at most {MAX_SUBSTITUTED_BODY} bytes\n"),
            ))
        }
    };
    let (b, r) = Rewriter::all(s.body.clone(), &bytes).map_err(|b| Box::new(s.block(b)))?;
    substituted.extend(r);
    headers.remove(http::header::CONTENT_LENGTH);
    if let Ok(v) = http::HeaderValue::from_str(&b.len().to_string()) {
        headers.insert(http::header::CONTENT_LENGTH, v);
    }
    Ok(Full::new(Bytes::from(b))
        .map_err(|never| match never {})
        .boxed())
}

/// The whole of `body` (its trailers dropped), or `Err` past
/// [`MAX_SUBSTITUTED_BODY`] bytes or on the client's error. A loop rather
/// than `http_body_util::Limited`, whose error bound over a boxed body
/// makes the request's future not `Send` for every lifetime.
async fn collect_limited(mut body: OutBody) -> Result<Bytes, ()> {
    let mut out: Vec<u8> = Vec::new();
    while let Some(frame) = body.frame().await {
        if let Ok(d) = frame.map_err(|_| ())?.into_data() {
            if out.len() + d.len() > MAX_SUBSTITUTED_BODY {
                return Err(());
            }
            out.extend_from_slice(&d);
        }
    }
    Ok(Bytes::from(out))
}

/// A request as it goes upstream: the sandbox's method and extensions, the
/// substituted target, headers and body.
struct Outgoing {
    parts: http::request::Parts,
    headers: http::HeaderMap,
    target: String,
    body: OutBody,
}

/// Sends the request on the upstream connection, in its version (an
/// absolute URI for HTTP/2, a `Host` header for HTTP/1.1), and scrubs the
/// response.
async fn forward(
    s: &Arc<Session>,
    upstream: &Sender,
    request: Outgoing,
) -> Result<Response<OutBody>, Answer> {
    let Outgoing {
        mut parts,
        mut headers,
        target,
        body,
    } = request;
    let authority = forwarded_authority(&s.name, s.port);
    let h2 = matches!(upstream, Sender::H2(_));
    let uri = if h2 {
        format!("https://{authority}{target}")
    } else {
        target
    };
    let uri = uri.parse::<http::Uri>().map_err(|_| bad_target())?;
    if !h2 {
        if let Ok(v) = http::HeaderValue::from_str(&authority) {
            headers.insert(http::header::HOST, v);
        }
    }
    parts.uri = uri;
    parts.headers = headers;
    parts.version = if h2 {
        http::Version::HTTP_2
    } else {
        http::Version::HTTP_11
    };
    let method_is_head = parts.method == http::Method::HEAD;
    let request = Request::from_parts(parts, body);
    let response = match upstream {
        Sender::H2(sender) => sender.clone().send_request(request).await,
        Sender::H1(sender) => {
            let mut sender = sender.lock().await;
            match sender.ready().await {
                Ok(()) => sender.send_request(request).await,
                Err(e) => Err(e),
            }
        }
    };
    let response = response.map_err(|e| {
        answer(
            StatusCode::BAD_GATEWAY,
            Reason::UpstreamFailed,
            format!("warden: the request to {} failed: {e}\n", s.name),
        )
    })?;
    Ok(scrub_response(s, response, method_is_head))
}

fn rewrite_header(
    s: &Session,
    key: &http::HeaderName,
    value: &[u8],
) -> Result<(Vec<u8>, Vec<usize>), Blocked> {
    if key == http::header::AUTHORIZATION {
        if let Some(encoded) = value
            .strip_prefix(b"Basic ")
            .or_else(|| value.strip_prefix(b"basic "))
        {
            let engine = &base64::engine::general_purpose::STANDARD;
            if let Ok(mut decoded) = engine.decode(encoded.trim_ascii()) {
                let r = Rewriter::all(s.head.clone(), &decoded);
                zero(&mut decoded);
                let (mut plain, replaced) = r?;
                let mut out = b"Basic ".to_vec();
                out.extend_from_slice(engine.encode(&plain).as_bytes());
                zero(&mut plain);
                return Ok((out, replaced));
            }
        }
    }
    Rewriter::all(s.head.clone(), value)
}

/// A response warden cannot check for the secrets' values does not reach
/// the sandbox: recorded as blocked for every secret of the connection,
/// and answered with `said`.
fn withhold(s: &Session, detail: &str, said: String) -> Response<OutBody> {
    for i in 0..s.term.secrets.len() {
        (s.record)(s.decision(i, SecretAction::Blocked, detail.to_string()));
    }
    text(StatusCode::BAD_GATEWAY, Reason::ResponseWithheld, said)
}

fn scrub_response(s: &Arc<Session>, response: Response<Incoming>, head: bool) -> Response<OutBody> {
    // Every part of the response is output: the reason phrase, every
    // header's name and value, the body under its codings, the trailers.
    let codings = match coding::to_undo(response.headers()) {
        Ok(c) => c,
        Err(unknown) => {
            return withhold(
                s,
                &format!("a response in the {unknown} coding from a secret's host was withheld (warden cannot read it to check it for the value)"),
                format!("warden: the server sent its response in the {unknown} coding, which warden cannot read to check it for secrets, so it is withheld\n"),
            )
        }
    };
    if let Some(why) = coding::too_costly(&codings).filter(|_| !head) {
        return withhold(
            s,
            &format!("a response from a secret's host was withheld: {why}"),
            format!("warden: the server's response was withheld: {why}\n"),
        );
    }
    let (mut parts, body) = response.into_parts();
    let mut scrubbed: Vec<usize> = Vec::new();
    if let Some(reason) = parts.extensions.remove::<hyper::ext::ReasonPhrase>() {
        // Put back only as scrubbed; without it the canonical phrase goes.
        if let Ok((out, r)) = Rewriter::all(s.scrub.clone(), reason.as_bytes()) {
            scrubbed.extend(r);
            if let Ok(p) = hyper::ext::ReasonPhrase::try_from(out) {
                parts.extensions.insert(p);
            }
        }
    }
    let (mut headers, r) = rewrite_headers(&s.scrub, &parts.headers, HOP_BY_HOP);
    scrubbed.extend(r);
    // A decoded body goes on in the identity coding, its length left to
    // the framing; so does one whose scrubbing may change its length.
    let changes_length = s.scrub.iter().any(|p| match &p.action {
        Action::Replace(to) => to.len() != p.from.len() || !matches!(p.kind, Kind::Exact),
        Action::Block(_) => false,
    });
    if !codings.is_empty() {
        headers.remove(http::header::CONTENT_ENCODING);
        headers.remove(http::header::CONTENT_LENGTH);
    }
    if changes_length && !head {
        headers.remove(http::header::CONTENT_LENGTH);
    }
    scrubbed.sort_unstable();
    scrubbed.dedup();
    for i in &scrubbed {
        (s.record)(s.decision(
            *i,
            SecretAction::Scrubbed,
            "scrubbed from a response's status line or headers".into(),
        ));
    }
    parts.headers = headers;
    let mut inner: OutBody = body.map_err(|e| Box::new(e) as BoxError).boxed();
    if !codings.is_empty() && !head {
        inner = DecodeBody::new(inner, &codings, s.term.decode_memory.clone()).boxed();
    }
    let watch = s.clone();
    let body = RewriteBody::new(
        inner,
        s.scrub.clone(),
        false,
        Some(Box::new(move |secrets: &[usize]| {
            for i in secrets {
                (watch.record)(watch.decision(
                    *i,
                    SecretAction::Scrubbed,
                    "scrubbed from a response body".into(),
                ));
            }
        })),
        None,
    )
    .boxed();
    Response::from_parts(parts, body)
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // the tests remove their own temporary directories
mod tests {
    use super::super::{placeholder, Secret};
    use super::*;
    use std::sync::Mutex;
    use warden_policy::DomainRule;

    /// An HTTPS server on 127.0.0.1 for `name` (certificate from a fresh
    /// authority, whose PEM is returned) that answers every request with
    /// its `authorization` header.
    async fn echo_server(name: &str) -> (u16, String) {
        let (config, ca_pem) = crate::secrets::test_tls::server_config(name);
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let service = hyper::service::service_fn(|req: Request<Incoming>| async move {
                        let auth = req
                            .headers()
                            .get("authorization")
                            .map(|v| v.as_bytes().to_vec())
                            .unwrap_or_default();
                        Ok::<_, std::convert::Infallible>(Response::new(Full::new(Bytes::from(
                            auth,
                        ))))
                    });
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(tls), service)
                        .await;
                });
            }
        });
        (port, ca_pem)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_terminated_connection_substitutes_towards_its_host_and_scrubs_the_echo() {
        let (port, upstream_pem) = echo_server("api.test").await;
        let dir = std::env::temp_dir().join(format!("warden-egress-ca-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let ca_file = dir.join("ca.pem");
        std::fs::write(&ca_file, upstream_pem).unwrap();
        let value = b"real-token-0123456789".to_vec();
        let ph = placeholder().unwrap();
        let rule = DomainRule::parse(&format!("api.test:{port}")).unwrap();
        let term = Arc::new(
            Terminator::new(
                vec![Secret::new(
                    "T".into(),
                    ph.clone(),
                    value.clone(),
                    vec![rule],
                    false,
                )],
                std::slice::from_ref(&ca_file),
            )
            .unwrap(),
        );
        let _ = std::fs::remove_dir_all(&dir);

        // The sandbox's side: a client that trusts the per-sandbox authority.
        let front = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let front_port = front.local_addr().unwrap().port();
        let decisions = Arc::new(Mutex::new(Vec::<Decision>::new()));
        let d = decisions.clone();
        let t = term.clone();
        tokio::spawn(async move {
            let (conn, _) = front.accept().await.unwrap();
            let upstream = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
            let record: Recorder = Arc::new(move |dec| d.lock().unwrap().push(dec));
            let _ = serve(
                t,
                conn,
                Vec::new(),
                upstream,
                "api.test".into(),
                port,
                record,
                std::time::Duration::from_secs(10),
                None,
            )
            .await;
        });
        let client = crate::secrets::test_tls::client_config(term.ca_pem());
        let tcp = TcpStream::connect(("127.0.0.1", front_port)).await.unwrap();
        let tls = tokio_rustls::TlsConnector::from(client)
            .connect(ServerName::try_from("api.test").unwrap(), tcp)
            .await
            .unwrap();
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .unwrap();
        tokio::spawn(conn);
        let req = Request::builder()
            .uri("/")
            .header("host", format!("api.test:{port}"))
            .header("authorization", format!("Bearer {ph}"))
            .body(Full::new(Bytes::new()))
            .unwrap();
        let resp = sender.send_request(req).await.unwrap();
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        // The server saw the value and echoed it; the sandbox sees the
        // placeholder again.
        assert_eq!(body, format!("Bearer {ph}").as_bytes());
        // A request for another host on the same connection: refused, with
        // the code its decision carries.
        sender.ready().await.unwrap();
        let req = Request::builder()
            .uri("/")
            .header("host", "other.test")
            .body(Full::new(Bytes::new()))
            .unwrap();
        let resp = sender.send_request(req).await.unwrap();
        assert_eq!(resp.status(), StatusCode::MISDIRECTED_REQUEST);
        assert_eq!(resp.headers()["x-warden-reason"], "misdirected_request");
        let decisions = decisions.lock().unwrap().clone();
        assert!(decisions.iter().any(|d| !d.allowed
            && d.reason.as_ref().map(|c| c.reason) == Some(Reason::MisdirectedRequest)));
        assert!(decisions
            .iter()
            .any(|d| d.allowed && d.detail.starts_with("substituted")));
        assert!(decisions.iter().any(|d| d.detail.contains("scrubbed")));
    }
}
