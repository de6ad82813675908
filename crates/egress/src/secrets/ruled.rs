//! A request on a terminated connection put to its name's request rules
//! (`crate::requests`): decided on the path the upstream will get, its
//! query and, where a rule names JSON-RPC methods, methods or query
//! conditions, the start of its body (its calls, a `_method` field, the
//! parameters servers merge with the query's; read within the proxy's
//! memory budget and sent on unchanged);
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

use super::paid::{Bill, Prefixed, Unpaid};
use super::{BoxError, OutBody, Recorder, Terminator};
use crate::decision::{Cause, Decision, Protocol, Reason};
use crate::requests::{rpc_labels, AskScope, Outcome, Params, Request, Rpc, Verdict, MAX_RPC_BODY};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::{Body, Frame, SizeHint};
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
    /// A person answered about it: it goes upstream on a connection
    /// opened after the answer (one opened before may have been closed
    /// by the server while the person decided).
    pub(super) answered: bool,
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
    body: OutBody,
) -> Result<Let, Refused> {
    let rules = &term.request_rules;
    // The owner's `--secret-rule`s are decided on the same reading of the
    // request as request rules, each refusal under its own reason.
    let secret_ruled = term.has_rules(name, port);
    let ruled = rules.covers(name, port);
    if !ruled && !secret_ruled {
        return Ok(Let {
            body,
            tally: None,
            answered: false,
        });
    }
    let start = std::time::Instant::now();
    // Each method the server may take the request as (a method-override
    // header, `_method` in the query or the body, which many frameworks
    // honour), its own first: the request is decided by the most refused.
    let mut methods = methods::named(parts);
    refused_by_head(term, (name, port), record, (parts, path), &methods)?;
    let needs_rpc = ruled
        && methods
            .iter()
            .any(|m| rules.needs_body(name, port, m, path));
    let kinds = if body.is_end_stream() {
        None
    } else {
        form::body_kinds(parts).filter(|_| {
            (ruled && rules.method_matters(name, port, path))
                || (secret_ruled && !term.rule_methods(name, port).is_empty())
        })
    };
    // How its body may give parameters a query condition looks at (servers
    // merge a body's with the query's): asked only where a rule with a
    // condition could match, so other requests' bodies are never read.
    let param_kinds = if !ruled || body.is_end_stream() || !rules.params_matter(name, port, path) {
        None
    } else {
        form::body_kinds(parts)
    };
    let needs_params = param_kinds.as_ref().is_some_and(|k| !k.is_empty());
    let bodiless = body.is_end_stream();
    let (read, trailers, body) = if needs_rpc || kinds.is_some() || needs_params {
        read_upto(body, &term.decode_memory, MAX_RPC_BODY).await
    } else {
        (Read::NoBody, None, body)
    };
    if let Read::Unpaid(unpaid) = &read {
        return Err(Box::new(unpaid_refusal(
            (name, port),
            record,
            parts,
            path,
            unpaid,
        )));
    }
    let mut unread = false;
    if let Some(kinds) = &kinds {
        let found = match &read {
            Read::NoBody => Some(Vec::new()),
            Read::Body(data) if !kinds.is_empty() => methods::in_body(parts, kinds, data).await,
            _ => None,
        };
        // A body that may name a method and was not read for certain may
        // name any: each the rules name, and any other (`*`).
        unread = found.is_none();
        let more = found.unwrap_or_else(|| {
            let mut all = rules.methods_named(name, port);
            all.extend(term.rule_methods(name, port));
            all.push("*".into());
            all
        });
        methods::add(&mut methods, more);
    }
    secret_rules::check(term, (name, port), record, (parts, path), &methods, unread)?;
    if !ruled {
        return Ok(Let {
            body,
            tally: None,
            answered: false,
        });
    }
    let rpc = match (&read, needs_rpc) {
        (_, false) | (Read::NoBody, _) => Rpc::NoBody,
        (Read::Body(data), true) => rpc_labels(data).map_or(Rpc::Unreadable, Rpc::Labels),
        (Read::Unreadable | Read::Unpaid(_), true) => Rpc::Unreadable,
    };
    // A body a server may read parameters from and that was not read for
    // certain (coded, past the limit, malformed) may hold any.
    let params = match (&param_kinds, &read) {
        (None, _) => Params::None,
        (Some(k), _) if k.is_empty() => Params::Unknown,
        (Some(_), Read::NoBody) => Params::None,
        (Some(k), Read::Body(data)) => {
            let keys = rules.condition_keys(name, port);
            form::params(parts, k, data, &keys).await
        }
        (Some(_), _) => Params::Unknown,
    };
    let request = Request {
        name,
        port,
        method: parts.method.as_str(),
        path,
        query: parts.uri.query(),
        rpc: &rpc,
        params: &params,
    };
    // What was read of the body whole, for a question to show.
    let known = match read {
        Read::Body(data) => Some((data, trailers)),
        Read::NoBody if bodiless || needs_rpc || kinds.is_some() || needs_params => {
            Some((Vec::new(), trailers))
        }
        _ => None,
    };
    let mut hold = ask::Hold::new(parts, path, body, known);
    let (allowed, cause, rule, why) = settle(term, &request, &methods, unread, &mut hold).await;
    let (body, answered) = (hold.body, hold.answered);
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
        let mut refused = forbidden(reason, &why);
        *refused.status_mut() = match reason {
            Reason::MemoryBudget => StatusCode::SERVICE_UNAVAILABLE,
            Reason::HeldBodyTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            _ => StatusCode::FORBIDDEN,
        };
        return Err(Box::new(refused));
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
        answered,
    })
}

/// Refused on what the head alone asks, before any of the body is read:
/// a header some servers route on in place of the path, or (by the
/// secret's rules) a method its head names (`methods`).
fn refused_by_head(
    term: &Terminator,
    (name, port): (&str, u16),
    record: &Recorder,
    (parts, path): (&http::request::Parts, &str),
    methods: &[String],
) -> Result<(), Refused> {
    if let Some(header) = methods::path_override(parts) {
        let reason = if term.has_rules(name, port) {
            Reason::SecretRule
        } else {
            Reason::RequestDenied
        };
        return Err(Box::new(path_override_refusal(
            (name, port),
            record,
            (parts, path, reason),
            &header,
        )));
    }
    secret_rules::check(term, (name, port), record, (parts, path), methods, false)
}

/// The decision on `req` taken as each of `methods` (its own first):
/// whether it goes, the cause, the rule that decided and why. A refusal
/// under any method refuses it (the most refused one speaks); otherwise
/// each method an ask rule holds is asked about in turn (or goes by an
/// earlier "always"), and it goes only when every one is allowed.
async fn settle(
    term: &Terminator,
    req: &Request<'_>,
    methods: &[String],
    unread: bool,
    hold: &mut ask::Hold<'_>,
) -> (bool, Cause, Option<String>, String) {
    let own = req.method;
    let as_method = |m: &str, why: String| {
        if m == own {
            why
        } else if unread {
            format!("{why} (as any method its unread body may name in _method)")
        } else {
            format!("{why} (as the {m} its method override names)")
        }
    };
    let verdicts: Vec<(&str, Verdict)> = methods
        .iter()
        .map(|m| {
            let v = term.request_rules.decide(&Request { method: m, ..*req });
            (m.as_str(), v)
        })
        .collect();
    let mut worst: Option<&(&str, Verdict)> = None;
    for mv in &verdicts {
        if worst.is_none_or(|w| rank(&mv.1.outcome) > rank(&w.1.outcome)) {
            worst = Some(mv);
        }
    }
    if let Some((m, v)) = worst.filter(|(_, v)| rank(&v.outcome) >= rank(&Outcome::NoRule)) {
        let cause = match v.outcome {
            // The rule that would allow this very request (its JSON-RPC
            // calls too), when one can.
            Outcome::NoRule => match v.scope.as_ref().and_then(AskScope::entry) {
                Some(entry) => Cause::with_entry(Reason::NoRequestRule, entry),
                None => Cause::new(Reason::NoRequestRule),
            },
            Outcome::Ambiguous => Cause::new(Reason::MisdirectedRequest),
            _ => Cause::new(Reason::RequestDenied),
        };
        return (false, cause, v.rule.clone(), as_method(m, v.why.clone()));
    }
    let mut settled: Option<(Cause, Option<String>, String)> = None;
    for (m, v) in verdicts.iter().filter(|(_, v)| v.outcome == Outcome::Ask) {
        // An ask always says what it is about; were it not to, nothing
        // could be asked, and the request is refused.
        let Some(scope) = &v.scope else {
            return (
                false,
                Cause::new(Reason::RequestNotAsked),
                v.rule.clone(),
                v.why.clone(),
            );
        };
        // Answered "always" in an earlier run of the project: the grant
        // states this very scope (the same call, the same values).
        if let Some(granted) = term.request_rules.granted(scope) {
            let why = format!("answered always in an earlier run: {}", v.why);
            settled = Some((
                Cause::new(Reason::RequestAllowed),
                Some(granted),
                as_method(m, why),
            ));
            continue;
        }
        let rule = v.rule.clone().unwrap_or_default();
        match ask::ask(term, scope, req.query, &rule, hold).await {
            ask::Asked::Allowed(cause, recorded) => {
                settled = Some((cause, Some(recorded), as_method(m, v.why.clone())));
            }
            ask::Asked::Refused(cause, why) => return (false, cause, v.rule.clone(), why),
        }
    }
    match settled {
        Some((cause, rule, why)) => (true, cause, rule, why),
        None => {
            let v = &verdicts[0].1;
            (
                true,
                Cause::new(Reason::RequestAllowed),
                v.rule.clone(),
                v.why.clone(),
            )
        }
    }
}

/// How refused an outcome is: a request is decided by its most refused
/// method.
fn rank(o: &Outcome) -> u8 {
    match o {
        Outcome::Allow => 0,
        Outcome::Ask => 1,
        Outcome::NoRule => 2,
        Outcome::Deny | Outcome::Ambiguous => 3,
    }
}

/// `body` as the session's other stages take it. Not a closure in the
/// async function: the future it would be held in must be `Send` for any
/// lifetime, which a closure's inferred error type is not.
pub(super) fn boxed<B>(body: B) -> OutBody
where
    B: hyper::body::Body<Data = Bytes, Error = hyper::Error> + Send + Sync + 'static,
{
    fn boxed_error(e: hyper::Error) -> BoxError {
        Box::new(e)
    }
    body.map_err(boxed_error).boxed()
}

/// What was read of a request's body to decide it.
enum Read {
    /// It has none.
    NoBody,
    /// Larger than [`MAX_RPC_BODY`], or failed.
    Unreadable,
    /// The proxy's memory budget could not pay for reading it now.
    Unpaid(Unpaid),
    /// The whole body.
    Body(Vec<u8>),
}

/// Read the start of `body` (for its JSON-RPC methods, or the method a
/// form names, or whole for a held request's question): at most `limit`
/// bytes, paid for from `pool` (KiB) for as long as they are held (until
/// passed on); the body comes back whole, what was read in front of the
/// rest, with the trailers read. A body larger than that is unreadable;
/// one the budget cannot pay for now is unpaid (and refused: it is never
/// held unpaid).
async fn read_upto(
    mut body: OutBody,
    pool: &Arc<tokio::sync::Semaphore>,
    limit: usize,
) -> (Read, Option<http::HeaderMap>, OutBody) {
    if body.is_end_stream() {
        return (Read::NoBody, None, body);
    }
    let bill = match Bill::of(pool, limit) {
        Ok(bill) => bill,
        Err(unpaid) => return (Read::Unpaid(unpaid), None, body),
    };
    let mut read: VecDeque<Frame<Bytes>> = VecDeque::new();
    let mut data: Vec<u8> = Vec::new();
    let mut trailers: Option<http::HeaderMap> = None;
    let mut ended = false;
    while data.len() <= limit {
        match body.frame().await {
            Some(Ok(frame)) => {
                if let Some(d) = frame.data_ref() {
                    data.extend_from_slice(d);
                }
                if let Some(t) = frame.trailers_ref() {
                    trailers
                        .get_or_insert_with(http::HeaderMap::new)
                        .extend(t.clone());
                }
                read.push_back(frame);
            }
            // The error is the client's own: it meets it again, as the
            // rest of the body, and the request is refused meanwhile.
            Some(Err(_)) => return (Read::Unreadable, None, body),
            None => {
                ended = true;
                break;
            }
        }
    }
    let got = match (ended, data.is_empty()) {
        (true, true) => Read::NoBody,
        (true, false) => Read::Body(data),
        (false, _) => Read::Unreadable,
    };
    let rest = (!ended).then_some(body);
    (
        got,
        trailers,
        Prefixed::paid(read, rest, Some(bill)).boxed(),
    )
}

/// A body with nothing in it, in place of one taken to be read.
fn empty() -> OutBody {
    Full::new(Bytes::new())
        .map_err(|never| match never {})
        .boxed()
}

/// warden's refusal of a request on a ruled name that carries `header`,
/// by which some servers route it to another path than the one the rules
/// decide (IIS and ASP.NET route on `X-Original-URL`): recorded, 403.
fn path_override_refusal(
    (name, port): (&str, u16),
    record: &Recorder,
    (parts, path, reason): (&http::request::Parts, &str, Reason),
    header: &str,
) -> Response<OutBody> {
    let why = format!(
        "refused: {} {name}{path} carries {header}, a header some servers route on in place of the path; the rules decide the path alone",
        parts.method
    );
    record(Decision::request_refused(
        name,
        port,
        why.clone(),
        Cause::new(reason),
    ));
    forbidden(reason, &why)
}

/// The decision on a request whose body the proxy's memory budget cannot
/// pay for reading now: recorded, and warden's 503 in the upstream's
/// place.
fn unpaid_refusal(
    (name, port): (&str, u16),
    record: &Recorder,
    parts: &http::request::Parts,
    path: &str,
    unpaid: &Unpaid,
) -> Response<OutBody> {
    let why = format!(
        "refused: {} {name}{path}: the proxy's memory budget ({} MiB) is spent: no room to read the start of its body ({} KiB)",
        parts.method,
        crate::proxy::MEMORY_BUDGET_KIB / 1024,
        unpaid.0
    );
    record(Decision::request_refused(
        name,
        port,
        why.clone(),
        Cause::new(Reason::MemoryBudget),
    ));
    let mut r = forbidden(Reason::MemoryBudget, &why);
    *r.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
    r
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
mod form;
mod methods;
mod secret_rules;
pub(super) use ask::Grant;
pub use ask::ASKED_ALWAYS;

#[cfg(test)]
mod secret_tests;
#[cfg(test)]
#[allow(clippy::disallowed_methods)] // the tests remove their own temporary directories
mod tests;
