//! A request an ask rule holds, put to a person through the sandbox's
//! asker (the same desk as names: the terminal of `warden run`, or a
//! named sandbox's approvals over its control socket and the daemon's
//! API). The request waits for the answer; nothing of it has gone
//! upstream. The question shows everything the request was decided on
//! (its [`AskScope`]: method, path, the query keys the rule looked at,
//! each JSON-RPC call asked about). "once" lets this request go; "run"
//! (and a caller's "always") lets that same scope go for the rest of the
//! run (the same tool, the same query values: another tool is asked
//! about again); the owner's "always" does too, and is recorded so that
//! the run's grants keep the rule stating that scope; "deny", no answer
//! in time, or no one to ask refuse it. It never decides which requests
//! are asked about (the rules do).

use super::super::Terminator;
use crate::ask::{Answer, Question};
use crate::decision::{Cause, Reason};
use crate::requests::{redacted, AskScope, AskedRequest};
use warden_policy::trust::Trust;

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

/// Put the request `scope` states (whose query as sent is `query`), which
/// the ask rule `rule` holds, to the sandbox's asker. The question shows
/// all of the scope (its query's values redacted); an answer for the run
/// or for good covers that scope and nothing else.
pub(in crate::secrets) async fn ask(
    term: &Terminator,
    scope: &AskScope,
    query: Option<&str>,
    rule: &str,
) -> Asked {
    let (method, name) = (scope.method.as_str(), scope.name.as_str());
    let entry = scope.entry();
    // What a record proposes never holds a query value (values may be
    // tokens, and records redact them); only the grant an owner's
    // "always" keeps states the value it was asked about.
    let proposed = entry.clone().filter(|_| scope.query.is_empty());
    let request = AskedRequest {
        method: method.to_string(),
        target: redacted(&scope.path, query),
        rule: rule.to_string(),
        rpc: scope.rpc.clone(),
        unread_body: scope.unread_body,
        body_params: scope.body_params,
    };
    let what = format!("{method} {name}{}{}", request.target, request.calls());
    let granted = term
        .granted_requests
        .lock()
        .is_ok_and(|g| g.contains(scope));
    if granted {
        return Asked::Allowed(
            cause(Reason::RequestAskedForRun, &proposed),
            format!("asked: {what} allowed for this run"),
        );
    }
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
