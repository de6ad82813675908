//! A request on a terminated connection put to its name's request rules
//! (`crate::requests`): decided on the path the upstream will get, its
//! query and, where a rule names JSON-RPC methods, the start of its body
//! (read within the proxy's memory budget and sent on unchanged);
//! refused with a 403 that says why, or let through and counted, and
//! recorded once with its bytes when its answer has been relayed. It never
//! forwards anything itself (the session does).
//!
//! What a request is, is hyper's reading of the sandbox's bytes, and the
//! upstream gets the request re-framed by the session's own client, never
//! the sandbox's bytes: a request cannot carry another past the rules.
//! Two different `Content-Length`s, or a `Transfer-Encoding` other than
//! chunked, are refused (400) by hyper; a `Transfer-Encoding` beside a
//! `Content-Length` is read as chunked (RFC 9112, 6.1) and the connection
//! is closed after its answer, so nothing behind it is read at all.

use super::{BoxError, OutBody, Recorder, Terminator};
use crate::decision::{Cause, Decision, Protocol, Reason};
use crate::requests::{rpc_labels, Outcome, Request, Rpc, MAX_RPC_BODY};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::{Response, StatusCode};
use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

/// warden's answer in the upstream's place.
pub(super) type Refused = Box<Response<OutBody>>;

/// Where a request stands once its rules have let it through.
pub(super) struct Let {
    /// The body, whatever was read of it to decide put back in front.
    pub(super) body: OutBody,
    /// Counts the request's bytes and records it when its answer ends;
    /// `None` for a name without request rules.
    pub(super) tally: Option<Tally>,
}

/// Decide `parts` (whose normalised path is `path`) on `name:port` by the
/// terminator's request rules. A name without rules lets everything
/// through untouched.
pub(super) async fn judge(
    term: &Terminator,
    (name, port): (&str, u16),
    record: &Recorder,
    parts: &http::request::Parts,
    path: &str,
    body: Incoming,
) -> Result<Let, Refused> {
    let body = boxed(body);
    if !term.request_rules.covers(name, port) {
        return Ok(Let { body, tally: None });
    }
    let start = std::time::Instant::now();
    let method = parts.method.as_str();
    let (rpc, body) = if term.request_rules.needs_body(name, port, method, path) {
        read_rpc(body, &term.decode_memory).await
    } else {
        (Rpc::NoBody, body)
    };
    let request = Request {
        name,
        port,
        method,
        path,
        query: parts.uri.query(),
        rpc: &rpc,
    };
    let mut verdict = term.request_rules.decide(&request);
    // A method the server may take instead of the request's (a
    // method-override header or `_method`, which many frameworks honour):
    // a request the rules allow is let through only if each method it
    // may be taken as is allowed too.
    if verdict.outcome == Outcome::Allow {
        for other in overriding_methods(parts)
            .iter()
            .filter(|m| !m.eq_ignore_ascii_case(method))
        {
            let v = term.request_rules.decide(&Request {
                method: other,
                ..request
            });
            if v.outcome != Outcome::Allow {
                verdict = v;
                verdict.why = format!("{} (as the {other} its method override names)", verdict.why);
                break;
            }
        }
    }
    let mut rule = verdict.rule;
    let (allowed, cause, why) = match verdict.outcome {
        Outcome::Allow => (true, Cause::new(Reason::RequestAllowed), verdict.why),
        Outcome::Deny => (false, Cause::new(Reason::RequestDenied), verdict.why),
        // The rule that would allow this very request.
        Outcome::NoRule => (
            false,
            Cause::with_entry(
                Reason::NoRequestRule,
                ask::entry_for(method, name, port, path),
            ),
            verdict.why,
        ),
        Outcome::Ambiguous => (false, Cause::new(Reason::MisdirectedRequest), verdict.why),
        // Held until a person answers.
        // Answered "always" in an earlier run of the project.
        Outcome::Ask if term.request_rules.granted(&request).is_some() => {
            rule = term.request_rules.granted(&request);
            (
                true,
                Cause::new(Reason::RequestAllowed),
                format!("answered always in an earlier run: {}", verdict.why),
            )
        }
        Outcome::Ask => {
            let asking = rule.clone().unwrap_or_default();
            let query = parts.uri.query();
            match ask::ask(term, (name, port), method, (path, query), &asking).await {
                ask::Asked::Allowed(cause, recorded) => {
                    rule = Some(recorded);
                    (true, cause, verdict.why)
                }
                ask::Asked::Refused(cause, why) => (false, cause, why),
            }
        }
    };
    let reason = cause.reason;
    let decision = Decision {
        protocol: Protocol::Request,
        name: Some(name.to_string()),
        port,
        original_destination: None,
        allowed,
        rule,
        detail: why.clone(),
        bytes_out: 0,
        bytes_in: 0,
        duration_ms: 0,
        reason: Some(cause),
    };
    if !allowed {
        record(decision);
        return Err(Box::new(forbidden(reason, &why)));
    }
    let out = Arc::new(AtomicU64::new(0));
    Ok(Let {
        body: Counting::new(body, out.clone(), None).boxed(),
        tally: Some(Tally {
            pending: Some(Pending {
                decision,
                record: record.clone(),
                out,
                start,
            }),
        }),
    })
}

/// `body` as the session's other stages take it. Not a closure in the
/// async function: the future it would be held in must be `Send` for any
/// lifetime, which a closure's inferred error type is not.
fn boxed(body: Incoming) -> OutBody {
    fn boxed_error(e: hyper::Error) -> BoxError {
        Box::new(e)
    }
    body.map_err(boxed_error).boxed()
}

/// Read the start of `body` for its JSON-RPC methods: at most
/// [`MAX_RPC_BODY`] bytes, paid for from `pool` (KiB) while held; the body
/// comes back whole, what was read in front of the rest. A body larger
/// than that, or one the budget cannot pay for now, is unreadable.
async fn read_rpc(mut body: OutBody, pool: &Arc<tokio::sync::Semaphore>) -> (Rpc, OutBody) {
    if body.is_end_stream() {
        return (Rpc::NoBody, body);
    }
    let Ok(_paid) = pool
        .clone()
        .try_acquire_many_owned((MAX_RPC_BODY / 1024) as u32)
    else {
        return (Rpc::Unreadable, body);
    };
    let mut read: VecDeque<Frame<Bytes>> = VecDeque::new();
    let mut data: Vec<u8> = Vec::new();
    let mut ended = false;
    while data.len() <= MAX_RPC_BODY {
        match body.frame().await {
            Some(Ok(frame)) => {
                if let Some(d) = frame.data_ref() {
                    data.extend_from_slice(d);
                }
                read.push_back(frame);
            }
            // The error is the client's own: it meets it again, as the
            // rest of the body, and the request is refused meanwhile.
            Some(Err(_)) => return (Rpc::Unreadable, body),
            None => {
                ended = true;
                break;
            }
        }
    }
    let rpc = match (ended, data.is_empty()) {
        (true, true) => Rpc::NoBody,
        (true, false) => rpc_labels(&data).map_or(Rpc::Unreadable, Rpc::Labels),
        (false, _) => Rpc::Unreadable,
    };
    let rest = (!ended).then_some(body);
    (rpc, Prefixed { read, rest }.boxed())
}

/// A body whose first frames were read already.
pub(super) struct Prefixed {
    read: VecDeque<Frame<Bytes>>,
    rest: Option<OutBody>,
}

impl Prefixed {
    pub(super) fn new(read: VecDeque<Frame<Bytes>>, rest: Option<OutBody>) -> Prefixed {
        Prefixed { read, rest }
    }
}

impl Body for Prefixed {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if let Some(f) = self.read.pop_front() {
            return Poll::Ready(Some(Ok(f)));
        }
        match self.rest.as_mut() {
            Some(rest) => Pin::new(rest).poll_frame(cx),
            None => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.read.is_empty() && self.rest.as_ref().is_none_or(|r| r.is_end_stream())
    }
}

/// A body that counts the bytes it carries into `count`, and hands its
/// [`Pending`] record over when it is dropped (its last byte relayed, or
/// the exchange cut).
struct Counting {
    inner: OutBody,
    count: Arc<AtomicU64>,
    pending: Option<Pending>,
}

impl Counting {
    fn new(inner: OutBody, count: Arc<AtomicU64>, pending: Option<Pending>) -> Counting {
        Counting {
            inner,
            count,
            pending,
        }
    }
}

impl Body for Counting {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(Some(Ok(f))) = &polled {
            if let Some(d) = f.data_ref() {
                self.count.fetch_add(d.len() as u64, Ordering::Relaxed);
            }
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for Counting {
    fn drop(&mut self) {
        if let Some(p) = self.pending.take() {
            p.recorded(self.count.load(Ordering::Relaxed));
        }
    }
}

/// An allowed request's record, kept until its answer has been relayed.
struct Pending {
    decision: Decision,
    record: Recorder,
    /// The request body's bytes, counted as they go upstream.
    out: Arc<AtomicU64>,
    start: std::time::Instant,
}

impl Pending {
    fn recorded(mut self, bytes_in: u64) {
        self.decision.bytes_out = self.out.load(Ordering::Relaxed);
        self.decision.bytes_in = bytes_in;
        self.decision.duration_ms = self.start.elapsed().as_millis() as u64;
        (self.record)(self.decision);
    }
}

/// An allowed request's record: made when its response's body has been
/// relayed ([`Tally::answered`]), or now, when no response came.
pub(super) struct Tally {
    pending: Option<Pending>,
}

impl Tally {
    /// `response`, its body counted, and the request recorded once that
    /// body is done.
    pub(super) fn answered(mut self, response: Response<OutBody>) -> Response<OutBody> {
        let (parts, body) = response.into_parts();
        let counted = Counting::new(body, Arc::new(AtomicU64::new(0)), self.pending.take());
        Response::from_parts(parts, counted.boxed())
    }
}

impl Tally {
    /// Recorded now with what a relay moved after the answer (a
    /// WebSocket's frames): `out` towards the upstream, `inn` back.
    pub(super) fn relayed(mut self, out: u64, inn: u64) {
        if let Some(p) = self.pending.take() {
            p.out.fetch_add(out, Ordering::Relaxed);
            p.recorded(inn);
        }
    }
}

impl Drop for Tally {
    fn drop(&mut self) {
        if let Some(p) = self.pending.take() {
            p.recorded(0);
        }
    }
}

/// A 403 that says why in `X-Warden-Denied` and the body, with its code
/// in `X-Warden-Reason`, as the proxy's own refusals do.
fn forbidden(reason: Reason, why: &str) -> Response<OutBody> {
    // The path and method are the sandbox's: only printable ASCII of them
    // goes into a header.
    let header: String = why
        .replace('…', "...")
        .chars()
        .map(|c| {
            if c.is_ascii_graphic() || c == ' ' {
                c
            } else {
                '?'
            }
        })
        .collect();
    let mut r = Response::new(
        Full::new(Bytes::from(format!("warden: {why}\n")))
            .map_err(|never| match never {})
            .boxed(),
    );
    *r.status_mut() = StatusCode::FORBIDDEN;
    let h = r.headers_mut();
    h.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain"),
    );
    h.insert(
        "x-warden-reason",
        http::HeaderValue::from_static(reason.code()),
    );
    if let Ok(v) = http::HeaderValue::from_str(&header) {
        h.insert("x-warden-denied", v);
    }
    r
}

mod ask;
pub(super) use ask::Grant;
pub use ask::ASKED_ALWAYS;

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // the tests remove their own temporary directories
mod tests;

/// Headers by which a client asks a server to take a request as another
/// method.
const METHOD_OVERRIDES: &[&str] = &[
    "x-http-method-override",
    "x-http-method",
    "x-method-override",
];

/// The methods `parts` asks to be taken as, besides its own: each
/// override header's value and each `_method` query value, upper-cased.
fn overriding_methods(parts: &http::request::Parts) -> Vec<String> {
    let mut out: Vec<String> = METHOD_OVERRIDES
        .iter()
        .flat_map(|h| parts.headers.get_all(*h).iter())
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|m| m.trim().to_ascii_uppercase())
        .collect();
    for pair in parts.uri.query().unwrap_or("").split(['&', ';']) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let key = percent_encoding::percent_decode_str(key).decode_utf8_lossy();
        if key.eq_ignore_ascii_case("_method") {
            let value = percent_encoding::percent_decode_str(&value.replace('+', " "))
                .decode_utf8_lossy()
                .trim()
                .to_ascii_uppercase();
            out.push(value);
        }
    }
    out.retain(|m| !m.is_empty());
    out
}
