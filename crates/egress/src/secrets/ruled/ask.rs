//! A request an ask rule holds, put to a person through the sandbox's
//! asker (the same desk as names: the terminal of `warden run`, or a
//! named sandbox's approvals over its control socket and the daemon's
//! API). The request waits for the answer; nothing of it has gone
//! upstream. "once" lets this request go; "run" (and a caller's
//! "always") lets this method and path go for the rest of the run;
//! the owner's "always" does too, and is recorded so that the run's
//! grants keep it as a request rule; "deny", no answer in time, or no
//! one to ask refuse it. It never decides which requests are asked
//! about (the rules do).

use super::super::Terminator;
use crate::ask::{Answer, Question};
use crate::decision::{Cause, Reason};
use crate::requests::{redacted, AskedRequest};
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

/// The method and path a grant for the run covers, on `name:port`.
pub(in crate::secrets) type Grant = (String, String, u16, String);

/// The request rule that allows `method` to `path` on `name:port` and
/// nothing else: what "always" keeps, and what a refusal proposes.
pub fn entry_for(method: &str, name: &str, port: u16, path: &str) -> String {
    format!(
        "{method} {}{path}",
        crate::decision::domain_entry(name, port)
    )
}

/// Put `method path?query` on `name:port`, which the ask rule `rule`
/// holds, to the sandbox's asker.
pub(in crate::secrets) async fn ask(
    term: &Terminator,
    (name, port): (&str, u16),
    method: &str,
    (path, query): (&str, Option<&str>),
    rule: &str,
) -> Asked {
    let key: Grant = (method.to_string(), name.to_string(), port, path.to_string());
    let entry = entry_for(method, name, port, path);
    let what = format!("{method} {name}{}", redacted(path, query));
    let granted = term.granted_requests.lock().is_ok_and(|g| g.contains(&key));
    if granted {
        return Asked::Allowed(
            Cause::with_entry(Reason::RequestAskedForRun, entry.clone()),
            format!("asked: {method} {name}{path} allowed for this run"),
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
        port,
        request: Some(AskedRequest {
            method: method.to_string(),
            target: redacted(path, query),
            rule: rule.to_string(),
        }),
    };
    let (answer, trust) = tokio::task::spawn_blocking(move || asker.ask_trusted(&question))
        .await
        .unwrap_or((Answer::Deny, Trust::Caller));
    let grant = || {
        if let Ok(mut g) = term.granted_requests.lock() {
            g.insert(key.clone());
        }
    };
    match answer {
        Answer::Once => Asked::Allowed(
            Cause::with_entry(Reason::RequestAskedOnce, entry.clone()),
            format!("asked: {what} allowed once"),
        ),
        Answer::Always if trust == Trust::Owner => {
            grant();
            Asked::Allowed(
                Cause::with_entry(Reason::RequestAskedAlways, entry),
                ASKED_ALWAYS.to_string(),
            )
        }
        // A caller's "always" is this run's only: the owner's grants
        // never take a caller's word.
        Answer::ForRun | Answer::Always | Answer::Learn => {
            grant();
            Asked::Allowed(
                Cause::with_entry(Reason::RequestAskedForRun, entry.clone()),
                format!("asked: {method} {name}{path} allowed for this run"),
            )
        }
        Answer::Deny => Asked::Refused(
            Cause::with_entry(Reason::RequestDeniedWhenAsked, entry),
            format!("{what} was denied when asked (or no answer came in time)"),
        ),
    }
}
