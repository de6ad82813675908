//! A terminated connection: the requests of one connection from the
//! sandbox to one secret's host.
//!
//! This module owns the connection: TLS accepted with the authority's
//! leaf and served by hyper (HTTP/1.1 or HTTP/2), a second TLS connection
//! to the same upstream address with a hyper client, the idle timeout, the
//! terminator's own threads it runs on, and the words of what was
//! substituted, scrubbed, refused or blocked as decisions. Each request's
//! stages (`--secret-rule` (403), another host on this connection (421),
//! its target, headers and body rewritten, forwarded) are `exchange`'s;
//! the response's scrub as it streams back is `scrub`'s. It never decides
//! whether the connection may be made (the proxy did) and never records a
//! value.

#[cfg(test)]
mod echo_attacks;
mod exchange;
mod misplaced;
mod packed;
mod scrub;
mod unpack;

use super::rewrite::{Blocked, Patterns, Place, Violation};
use super::{bulk, outbound, OutBody, Recorder, Terminator, BUFFER_LIMIT, H2_STREAMS};
use crate::decision::{Cause, Decision, Protocol, Reason, SecretAction};
use crate::metered::Metered;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::ServerName;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use tokio::net::TcpStream;

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
            Violation::Nested => Reason::ResponseWithheld,
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
            Violation::Nested => format!(
                "withheld: escapes nested deeper than {} levels, which could spell the value of secret {name}",
                super::spelled::DEPTH
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
        Decision::request_refused(&self.name, self.port, why, Cause::new(reason))
    }

    /// Refuse a request before anything of it goes upstream, recorded as a
    /// denied decision of protocol `request`.
    fn refuse(&self, status: StatusCode, cause: Cause, why: String) -> Response<OutBody> {
        (self.record)(Decision::request_refused(
            &self.name,
            self.port,
            why.clone(),
            cause.clone(),
        ));
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
        async move { Ok::<_, std::convert::Infallible>(exchange::handle(req, &s).await) }
    });
    // HTTP/2 where the sandbox's client chose it by ALPN, else HTTP/1.1
    // on hyper's own HTTP/1 server (not the protocol-sniffing one, whose
    // stream an upgrade hands back wrapped in a type of its own): an
    // upgrade then gives back the sandbox's stream as its known type with
    // whatever hyper read behind the upgrade's head, which `upgrade`
    // never relays.
    let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
    // Closed lingering: a refusal's answer is never lost to a reset.
    let io = TokioIo::new(crate::linger::Lingering::new(tls));
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
        connection.await.map_err(|e| {
            format!(
                "the terminated connection ended with an error: {}",
                with_causes(&e)
            )
        })?;
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

/// `e` and each error under it, as one line: hyper's own words say only
/// the kind ("http2 error"), its cause what the peer did (an HTTP/2 client
/// that reset more streams than h2 allows is told GOAWAY, and the record
/// says so, rather than h2's warning reaching the terminal).
fn with_causes(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut next = e.source();
    while let Some(cause) = next {
        let said = cause.to_string();
        if !out.contains(&said) {
            out.push_str(": ");
            out.push_str(&said);
        }
        next = cause.source();
    }
    out
}

/// How long opening a held request's own upstream connection may take.
const REOPEN_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// A connection of its own to the address the session's upstream
/// connection was made to (judged when it was), for a request a person
/// answered about: made after the answer, so that a server that closed
/// the session's idle connection meanwhile still gets it. It must speak
/// the HTTP version of the session's (`like`), which the request was
/// checked for (a GET's body is refused towards HTTP/1.1 only).
async fn reopened(s: &Session, like: &Sender) -> Result<Sender, String> {
    let Some(peer) = s.peer else {
        return Err(format!("the upstream address of {} is unknown", s.name));
    };
    let opened = tokio::time::timeout(REOPEN_TIMEOUT, async {
        let tcp = TcpStream::connect(peer)
            .await
            .map_err(|e| format!("cannot connect to {} ({peer}): {e}", s.name))?;
        connect_tls(&s.term, tcp, &s.name).await
    })
    .await
    .map_err(|_| {
        format!(
            "the upstream {} did not answer a new connection within {} s",
            s.name,
            REOPEN_TIMEOUT.as_secs()
        )
    })??;
    if matches!(opened, Sender::H2(_)) != matches!(like, Sender::H2(_)) {
        return Err(format!(
            "the upstream {} speaks another HTTP version on a new connection than the one the request was checked for",
            s.name
        ));
    }
    Ok(opened)
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

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // the tests remove their own temporary directories
mod tests {
    use super::super::{placeholder, Secret};
    use super::*;
    use hyper::body::Incoming;
    use hyper::Request;
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
