//! The exchange of one request on a terminated connection: its stages in
//! order (authority and path, the sandbox's own head and body checked for
//! credentials, `--secret-rule`, the target, headers and body substituted,
//! a WebSocket's upgrade), then forwarded on the session's upstream
//! connection. A stage that refuses answers in the upstream's place and
//! nothing of the request goes upstream. It never sets up a connection
//! (the session does) and never reads the response beyond handing it to
//! `scrub`.

use super::super::paid::{self, Bill, NotRead, Unpaid};
use super::super::rewrite::{Blocked, RewriteBody, Rewriter};
use super::super::target::{
    check_authority, check_query, forwarded_authority, normalise_path, TargetError,
};
use super::super::{heads, outbound, readable, ruled, upgrade, zero, OutBody};
use super::{scrub, text, Sender, Session, Stopped, HOP_BY_HOP};
use crate::decision::{Cause, Decision, Reason, SecretAction};
use base64::Engine;
use http_body_util::BodyExt;
use hyper::body::{Body, Incoming};
use hyper::{Request, Response, StatusCode};
use std::sync::Arc;

/// Request bodies read whole for substitution (`--secret-in-body`) are at
/// most this large once substituted; larger ones are refused with 413.
/// Each is paid from the proxy's memory budget while it is held (see
/// `paid`): one the budget cannot pay for now is refused with 503.
const MAX_SUBSTITUTED_BODY: usize = 16 << 20;

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
pub(super) async fn handle(req: Request<Incoming>, s: &Arc<Session>) -> Response<OutBody> {
    // An answer to HEAD has no body (RFC 9110, 9.3.2). hyper's HTTP/1
    // server leaves it out; its HTTP/2 server sends it, which a client
    // takes as a broken stream, never seeing the refusal or its reason.
    let head = req.method() == http::Method::HEAD;
    match exchange(req, s).await {
        Ok(response) => response,
        Err(answer) if head => answer.map(|_| {
            http_body_util::Empty::<bytes::Bytes>::new()
                .map_err(|never| match never {})
                .boxed()
        }),
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
    // A body the sandbox sends, whatever its length says (see `forward`).
    let bodied = !req.body().is_end_stream();
    let (parts, body) = req.into_parts();
    // Refused at any stage below, its unread rest is drained apart: the
    // answer then ends the request cleanly (HTTP/2 resets no stream).
    let body = ruled::boxed(crate::linger::Drained::new(body));
    // An upgrade goes on a connection of its own, always HTTP/1.1, and
    // its body with it: only a GET without one is an upgrade.
    if upgrade::is_websocket(&parts) && (bodied || parts.method != http::Method::GET) {
        let why = format!(
            "refused: {} {}{} asks for a WebSocket, which only a GET without a body may",
            parts.method,
            s.name,
            parts.uri.path()
        );
        return Err(Box::new(s.refuse(
            StatusCode::BAD_REQUEST,
            Cause::new(Reason::MalformedUpgrade),
            why,
        )));
    }
    if bodied && matches!(upstream, Sender::H1(_)) && bodiless_method(&parts.method) {
        let why = format!(
            "refused: {} {}{} carries a body, which an HTTP/1.1 server that does not read it would take for a request of its own",
            parts.method,
            s.name,
            parts.uri.path()
        );
        return Err(Box::new(s.refuse(
            StatusCode::BAD_REQUEST,
            Cause::new(Reason::BodyNotExpected),
            why,
        )));
    }
    // What the request costs while it is here, paid before anything of it
    // is held beyond hyper's buffers, and given back with its body.
    let bill = Bill::of(&s.term.decode_memory, paid::request_cost(&parts))
        .map_err(|u| unpaid(s, &parts, "hold the request", &u))?;
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
    super::misplaced::check(s, &parts)?;
    let websocket = upgrade::is_websocket(&parts);
    if websocket {
        if let Some((cause, why)) = refusal(s) {
            return Err(Box::new(s.refuse(StatusCode::FORBIDDEN, cause, why)));
        }
    }
    // The name's request rules decide on that path (and, where a rule
    // names JSON-RPC methods, on the start of the body).
    let ruled::Let {
        body,
        tally,
        answered,
    } = ruled::judge(&s.term, (&s.name, s.port), &s.record, &parts, &path, body).await?;
    // The sandbox's own bytes, before any placeholder is substituted;
    // compressed ones read through their codings first.
    let body = super::packed::checked(s, &parts, body).await?;
    let body = scanned_body(s, &parts, body).await?;
    let mut substituted: Vec<usize> = Vec::new();
    let target = substituted_target(s, &parts, path, &mut substituted)?;
    let mut headers = substituted_headers(s, &parts, &mut substituted)?;
    let body = substituted_body(s, &parts, body, &mut headers, &mut substituted).await?;
    // Given back once both the body that goes upstream and the answer
    // that comes back (scrubbed as it streams) are done.
    let bill = Arc::new(bill);
    let body = paid::Held::new(body, bill.clone()).boxed();
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
    // A person took their time: the server may have closed the
    // connection opened before the question for want of a request. The
    // request goes on one opened now, once, never sent twice.
    let reopened;
    let upstream = if answered {
        reopened = super::reopened(s, upstream).await.map_err(|why| {
            answer(
                StatusCode::BAD_GATEWAY,
                Reason::UpstreamFailed,
                format!("warden: {why}\n"),
            )
        })?;
        &reopened
    } else {
        upstream
    };
    let request = Outgoing {
        parts,
        headers,
        target,
        body,
        bodied,
    };
    let response = forward(s, upstream, request)
        .await?
        .map(|b| paid::Held::new(b, bill).boxed());
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
    // The relay's own buffers, paid for as long as it runs.
    let bill = Bill::of(&s.term.decode_memory, paid::UPGRADE_COST)
        .map_err(|u| unpaid(s, &parts, "relay a WebSocket", &u))?;
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
                "closed: the WebSocket to {} was sent {n} bytes behind its upgrade request that are not a client's WebSocket frame (sent before the server's 101, or a request written behind it), which were never decided as a request; nothing of them was relayed",
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
    // it when it ends; the relay's bill is given back when it ends or is
    // stopped.
    let task = task.map(|task| {
        let relay = Stopped(task);
        tokio::spawn(async move {
            let mut relay = relay;
            let _ = (&mut relay.0).await;
            drop(bill);
        })
    });
    if let (Some(task), Ok(mut u)) = (task, s.upgraded.lock()) {
        *u = Some(Stopped(task));
    }
    Ok(response)
}

/// Why an upgrade cannot be relayed on this session, if it cannot.
fn refusal(s: &Session) -> Option<(Cause, String)> {
    let why = format!(
        "refused: a WebSocket to {}, a secret's host: the frames after the upgrade could not be checked for the secret",
        s.name
    );
    s.term
        .secret_host(&s.name)
        .then(|| (Cause::new(Reason::UpgradeWithSecrets), why))
}

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
        .and_then(|()| check_query(parts.uri.query()))
        .and_then(|()| normalise_path(parts.uri.path(), s.term.has_rules(&s.name, s.port)));
    let path = checked.map_err(|e| {
        let status = match e {
            TargetError::OtherHost { .. }
            | TargetError::OtherServerName { .. }
            | TargetError::RoutingHeader { .. } => StatusCode::MISDIRECTED_REQUEST,
            _ => StatusCode::BAD_REQUEST,
        };
        Box::new(s.refuse(
            status,
            Cause::new(Reason::MisdirectedRequest),
            format!("refused: {e}"),
        ))
    })?;
    // The secret's rules are decided with the request rules (`ruled`), on
    // every method the request may be taken as.
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
/// the host (set again for the upstream) and those that would let the
/// answer be written or cut so the scrub cannot read it whole
/// (`readable`) left out.
fn substituted_headers(
    s: &Session,
    parts: &http::request::Parts,
    substituted: &mut Vec<usize>,
) -> Result<http::HeaderMap, Answer> {
    let mut headers = http::HeaderMap::new();
    // A secret's host on any port: a value sent on the secret's own port
    // may be echoed on another.
    let own = s.term.secret_host(&s.name);
    for (k, v) in parts.headers.iter() {
        let key = k.as_str();
        if HOP_BY_HOP.contains(&key) || key == "host" || readable::left_out(key, own) {
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

/// warden's 503 for a request the proxy's memory budget cannot pay to
/// `what` now, recorded as denied.
fn unpaid(s: &Session, parts: &http::request::Parts, what: &str, u: &Unpaid) -> Answer {
    Box::new(s.refuse(
        StatusCode::SERVICE_UNAVAILABLE,
        Cause::new(Reason::MemoryBudget),
        format!(
            "refused: {} {}{}: the proxy's memory budget ({} MiB) is spent: no room to {what} ({} KiB)",
            parts.method,
            s.name,
            parts.uri.path(),
            crate::proxy::MEMORY_BUDGET_KIB / 1024,
            u.0
        ),
    ))
}

/// The body: read whole when a secret is substituted in it (its length set
/// again; paid for while held), else streamed and watched.
async fn substituted_body(
    s: &Arc<Session>,
    parts: &http::request::Parts,
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
    let declared = parts
        .headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<usize>().ok());
    let read = paid::substituted(
        body,
        s.body.clone(),
        &s.term.decode_memory,
        declared,
        MAX_SUBSTITUTED_BODY,
    )
    .await;
    let read = match read {
        Ok(read) => read,
        Err(NotRead::TooLarge) => {
            return Err(Box::new(s.refuse(
                StatusCode::PAYLOAD_TOO_LARGE,
                Cause::new(Reason::BadRequest),
                format!(
                    "refused: {} {}{}: a request body with a secret substituted in it may be at most {MAX_SUBSTITUTED_BODY} bytes",
                    parts.method,
                    s.name,
                    parts.uri.path()
                ),
            )))
        }
        Err(NotRead::Unpaid(u)) => return Err(unpaid(s, parts, "hold its body whole", &u)),
        Err(NotRead::Blocked(b)) => return Err(Box::new(s.block(b))),
        Err(NotRead::Failed) => {
            return Err(answer(
                StatusCode::BAD_REQUEST,
                Reason::BadRequest,
                "warden: the request body ended with an error\n".into(),
            ))
        }
    };
    substituted.extend(read.replaced);
    headers.remove(http::header::CONTENT_LENGTH);
    if let Ok(v) = http::HeaderValue::from_str(&read.len.to_string()) {
        headers.insert(http::header::CONTENT_LENGTH, v);
    }
    Ok(read.body)
}

/// Methods whose body servers commonly leave unread (RFC 9110: a GET's or
/// a HEAD's content has no defined meaning, a TRACE may carry none). On an
/// HTTP/1.1 connection such a body is refused, not sent: a server that
/// does not read it reads it as the next request, unless it heeds the
/// `Connection: close` that [`forward`] sends, which not every server does.
fn bodiless_method(method: &http::Method) -> bool {
    *method == http::Method::GET || *method == http::Method::HEAD || *method == http::Method::TRACE
}

/// A request as it goes upstream: the sandbox's method and extensions, the
/// substituted target, headers and body.
struct Outgoing {
    parts: http::request::Parts,
    headers: http::HeaderMap,
    target: String,
    body: OutBody,
    /// The sandbox sent a body with it.
    bodied: bool,
}

/// Sends the request on the upstream connection, in its version (an
/// absolute URI for HTTP/2, a `Host` header for HTTP/1.1), and scrubs the
/// response.
///
/// A request with a body goes on an HTTP/1.1 upstream connection with
/// `Connection: close`, its last on that connection: a server that
/// answers without reading a body it did not expect (a GET's, or any it
/// refuses early: "CL.0") would otherwise read that body as a request of
/// its own, one no rule decided and no record holds, on the kept-alive
/// connection. The request after it (the next one of the sandbox's
/// connection, or another stream of its HTTP/2 connection) finds that
/// connection ended and goes on a new one to the same address, as does
/// one that finds it closed by the server while it was idle: a request is
/// sent on a new connection only when none of it went on the old one,
/// never twice. An HTTP/2 upstream frames every body, so its connection
/// is kept.
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
        bodied,
    } = request;
    let authority = forwarded_authority(&s.name, s.port);
    let h2 = matches!(upstream, Sender::H2(_));
    let last = bodied && !h2;
    if last {
        headers.insert(
            http::header::CONNECTION,
            http::HeaderValue::from_static("close"),
        );
    }
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
            if sender.ready().await.is_err() {
                // Ended (after a request sent as its last, or closed by
                // the server while idle), before anything of this request
                // went on it: a new connection, for it and those after it.
                match super::reopened(s, upstream).await {
                    Ok(Sender::H1(fresh)) => *sender = fresh.into_inner(),
                    reopened => {
                        let why = match reopened {
                            Err(why) => why,
                            Ok(_) => format!("{} answered a new connection in HTTP/2", s.name),
                        };
                        return Err(answer(
                            StatusCode::BAD_GATEWAY,
                            Reason::UpstreamFailed,
                            format!(
                                "warden: the connection to {} ended and a new one failed: {why}\n",
                                s.name
                            ),
                        ));
                    }
                }
            }
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
    Ok(scrub::scrub_response(s, response, method_is_head).await)
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
