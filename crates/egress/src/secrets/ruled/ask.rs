//! A request an ask rule holds, put to a person through the sandbox's
//! asker (the same desk as names: the terminal of `warden run`, or a
//! named sandbox's approvals over its control socket and the daemon's
//! API). The request waits for the answer; nothing of it has gone
//! upstream. The question shows everything the request was decided on
//! (its [`AskScope`]: method, path, the query keys the rule looked at,
//! each JSON-RPC call asked about) and what it will send ([`Shown`]: its
//! query's values, its body's length, type, digest and start, the whole
//! request's digest), its body read whole for that ([`Hold`]): two
//! questions that read alike are about byte-identical requests. "once"
//! lets this request go; "run"
//! (and a caller's "always") lets that same scope go for the rest of the
//! run (the same tool, the same query values: another tool is asked
//! about again); the owner's "always" does too, and is recorded so that
//! the run's grants keep the rule stating that scope; "deny", no answer
//! in time, or no one to ask refuse it. Records keep the query's values
//! redacted. It never decides which requests are asked about (the rules
//! do).

use super::super::{OutBody, Terminator};
use super::{read_upto, Read};
use crate::ask::{Answer, Question};
use crate::decision::{Cause, Reason};
use crate::requests::{redacted, AskScope, AskedRequest, Held, Shown};
use warden_policy::trust::Trust;

/// The largest body a held request may have: it is read whole (paid from
/// the proxy's memory budget while it waits) for its question to show
/// its digest and start; a larger one is refused, never asked about
/// blind.
pub(super) const MAX_HELD_BODY: usize = 1 << 20;

/// A request the rules may hold: its head and body, what was read of the
/// body to decide it, and what its question shows once made.
pub(in crate::secrets) struct Hold<'a> {
    pub(super) parts: &'a http::request::Parts,
    /// The normalised path (what the upstream gets).
    pub(super) path: &'a str,
    /// The body as it goes on (what was read of it put back in front).
    pub(super) body: OutBody,
    /// The whole body and its trailers, when it was read whole to decide
    /// it (or has none).
    pub(super) read: Option<(Vec<u8>, Option<http::HeaderMap>)>,
    shown: Option<Shown>,
    /// A person answered about it: it goes on an upstream connection
    /// opened after the answer.
    pub(super) answered: bool,
}

impl<'a> Hold<'a> {
    pub(super) fn new(
        parts: &'a http::request::Parts,
        path: &'a str,
        body: OutBody,
        read: Option<(Vec<u8>, Option<http::HeaderMap>)>,
    ) -> Hold<'a> {
        Hold {
            parts,
            path,
            body,
            read,
            shown: None,
            answered: false,
        }
    }

    /// What its question shows, its body read whole first (at most
    /// [`MAX_HELD_BODY`] bytes); why not, when it cannot be.
    async fn shown(&mut self, term: &Terminator) -> Result<Shown, (Reason, String)> {
        if let Some(s) = &self.shown {
            return Ok(s.clone());
        }
        let (parts, path) = (self.parts, self.path);
        let what = || format!("{} {path}", parts.method);
        let (data, trailers) = match self.read.take() {
            Some(known) => known,
            None => {
                let body = std::mem::replace(&mut self.body, super::empty());
                let (read, trailers, body) =
                    read_upto(body, &term.decode_memory, MAX_HELD_BODY).await;
                self.body = body;
                match read {
                    Read::NoBody => (Vec::new(), trailers),
                    Read::Body(data) => (data, trailers),
                    Read::Unpaid(unpaid) => {
                        return Err((
                            Reason::MemoryBudget,
                            format!(
                                "refused: {}: the proxy's memory budget ({} MiB) is spent: no room to hold its body for a person to be shown ({} KiB)",
                                what(),
                                crate::proxy::MEMORY_BUDGET_KIB / 1024,
                                unpaid.0
                            ),
                        ))
                    }
                    Read::Unreadable => {
                        return Err((
                            Reason::HeldBodyTooLarge,
                            format!(
                                "refused: {} is held by a request rule that asks, and its body is larger than {} KiB (or ended with an error): a person could not be shown what it sends",
                                what(),
                                MAX_HELD_BODY / 1024
                            ),
                        ))
                    }
                }
            }
        };
        let shown = Shown::of(&Held {
            method: self.parts.method.as_str(),
            path: self.path,
            query: self.parts.uri.query(),
            headers: &self.parts.headers,
            trailers: trailers.as_ref(),
            body: &data,
        });
        self.shown = Some(shown.clone());
        Ok(shown)
    }
}

/// The rule recorded for a request the owner allowed "always": the
/// grants keep its entry ([`Cause::entry`]) as a request rule.
pub const ASKED_ALWAYS: &str = "asked: request allowed always";

/// How a held request came out.
pub(in crate::secrets) enum Asked {
    /// Let go: the reason, the rule to record and the cause.
    Allowed(Cause, String),
    /// Refused: the cause and why, in words.
    Refused(Cause, String),
}

/// What a grant for the run covers: one scope asked about.
pub(in crate::secrets) type Grant = AskScope;

/// The cause `reason`, with the rule that would change it when there is one.
fn cause(reason: Reason, entry: &Option<String>) -> Cause {
    match entry {
        Some(e) => Cause::with_entry(reason, e.clone()),
        None => Cause::new(reason),
    }
}

/// The request `scope` states (whose query as sent is `query`), held by
/// the ask rule `rule`, as its question and records say it: the records'
/// line (values redacted) and the question's request (`shown`: what it
/// sends).
fn asked(
    scope: &AskScope,
    query: Option<&str>,
    rule: &str,
    shown: Option<Shown>,
) -> (String, AskedRequest) {
    let request = AskedRequest {
        method: scope.method.clone(),
        target: redacted(&scope.path, query),
        shown,
        rule: rule.to_string(),
        rpc: scope.rpc.clone(),
        unread_body: scope.unread_body,
        body_params: scope.body_params,
    };
    let what = format!(
        "{} {}{}{}",
        scope.method,
        scope.name,
        request.target,
        request.calls()
    );
    (what, request)
}

/// How the request `scope` states comes out without a person: allowed
/// by an answer for the run, or refused with no one to ask; `None` when
/// it is to be asked.
fn unasked(term: &Terminator, scope: &AskScope, query: Option<&str>, rule: &str) -> Option<Asked> {
    let (what, _) = asked(scope, query, rule, None);
    let granted = term
        .granted_requests
        .lock()
        .is_ok_and(|g| g.contains(scope));
    if granted {
        // What a record proposes never holds a query value.
        let proposed = scope.entry().filter(|_| scope.query.is_empty());
        return Some(Asked::Allowed(
            cause(Reason::RequestAskedForRun, &proposed),
            format!("asked: {what} allowed for this run"),
        ));
    }
    if term.asker.is_none() {
        return Some(Asked::Refused(
            Cause::new(Reason::RequestNotAsked),
            format!("the request rule {rule:?} asks about {what}, and there is no terminal or approvals desk to ask on"),
        ));
    }
    None
}

/// Put the request `scope` states (whose query as sent is `query`, and
/// which `hold` holds), held by the ask rule `rule`, to the sandbox's
/// asker, unless an answer for the run covers it or no one can be asked.
/// The question shows all of the scope and what the request sends; an
/// answer for the run or for good covers that scope and nothing else.
pub(in crate::secrets) async fn ask(
    term: &Terminator,
    scope: &AskScope,
    query: Option<&str>,
    rule: &str,
    hold: &mut Hold<'_>,
) -> Asked {
    if let Some(settled) = unasked(term, scope, query, rule) {
        return settled;
    }
    let name = scope.name.as_str();
    let entry = scope.entry();
    // What a record proposes never holds a query value (values may be
    // tokens, and records redact them); only the grant an owner's
    // "always" keeps states the value it was asked about.
    let proposed = entry.clone().filter(|_| scope.query.is_empty());
    let shown = match hold.shown(term).await {
        Ok(shown) => shown,
        Err((reason, why)) => return Asked::Refused(cause(reason, &None), why),
    };
    let (what, request) = asked(scope, query, rule, Some(shown));
    let Some(asker) = term.asker.clone() else {
        return Asked::Refused(
            Cause::new(Reason::RequestNotAsked),
            format!("the request rule {rule:?} asks about {what}, and there is no terminal or approvals desk to ask on"),
        );
    };
    let question = Question {
        protocol: "request",
        name: name.to_string(),
        port: scope.port,
        request: Some(request),
    };
    let (answer, trust) = tokio::task::spawn_blocking(move || asker.ask_trusted(&question))
        .await
        .unwrap_or((Answer::Deny, Trust::Caller));
    hold.answered = answer != Answer::Deny;
    // An answer beyond "once" covers the scope for the run, when a scope
    // can stand for more than this request.
    let grant = || {
        if !scope.repeatable() {
            return false;
        }
        if let Ok(mut g) = term.granted_requests.lock() {
            g.insert(scope.clone());
        }
        true
    };
    match answer {
        Answer::Once => Asked::Allowed(
            cause(Reason::RequestAskedOnce, &proposed),
            format!("asked: {what} allowed once"),
        ),
        Answer::Deny => Asked::Refused(
            cause(Reason::RequestDeniedWhenAsked, &proposed),
            format!("{what} was denied when asked (or no answer came in time)"),
        ),
        // What its unread body calls, or which method it is taken as, no
        // one can say: the answer lets this request go and covers no other.
        _ if !grant() => Asked::Allowed(
            Cause::new(Reason::RequestAskedOnce),
            format!("asked: {what} allowed once; answered for more, but no other request can be known to be this one (its body or method was not read)"),
        ),
        Answer::Always if trust == Trust::Owner => match entry {
            Some(entry) => Asked::Allowed(
                Cause::with_entry(Reason::RequestAskedAlways, entry),
                ASKED_ALWAYS.to_string(),
            ),
            // Kept for good, it would be read as a wider rule (or as
            // none): it goes for this run, and says why.
            None => Asked::Allowed(
                Cause::new(Reason::RequestAskedForRun),
                format!(
                    "asked: {what} allowed for this run; answered always, but not kept: no request rule allows exactly this request"
                ),
            ),
        },
        // A caller's "always" is this run's only: the owner's grants
        // never take a caller's word.
        Answer::ForRun | Answer::Always | Answer::Learn => Asked::Allowed(
            cause(Reason::RequestAskedForRun, &proposed),
            format!("asked: {what} allowed for this run"),
        ),
    }
}

#[cfg(test)]
mod tests {
    use crate::requests::AskScope;

    /// The rule that allows `method` to `path` on `name:port` alone.
    fn entry_for(method: &str, name: &str, port: u16, path: &str) -> Option<String> {
        AskScope {
            method: method.into(),
            name: name.into(),
            port,
            path: path.into(),
            query: Vec::new(),
            rpc: Vec::new(),
            unread_body: false,
            body_params: false,
        }
        .entry()
    }

    /// What "always" keeps and a refusal proposes is the request itself:
    /// the sandbox's stars stay stars, and what cannot be written as one
    /// request's rule is never written at all.
    #[test]
    fn a_grant_is_the_requests_own_method_and_path_as_literals_or_none() {
        assert_eq!(
            entry_for("GET", "forge.test", 18443, "/issues/**").as_deref(),
            Some("GET forge.test:18443/issues/\\*\\*")
        );
        assert_eq!(
            entry_for("POST", "forge.test", 443, "/issues/1").as_deref(),
            Some("POST forge.test/issues/1")
        );
        for (method, path) in [
            ("*", "/issues/1"),
            ("get", "/issues/1"),
            ("GET,DELETE", "/issues/1"),
            ("M!", "/issues/1"),
            ("OPTIONS", "*"),
            ("GET", "/a b"),
            ("GET", "/a?b"),
            ("GET", "/a rpc:x"),
        ] {
            assert_eq!(
                entry_for(method, "forge.test", 443, path),
                None,
                "{method} {path}"
            );
        }
    }
}
