//! `--secret-rule`s decided on the same reading of a request as request
//! rules: each method the server may take it as (its own, a
//! method-override header, `_method` in its query or its body) and the
//! path the upstream will get (a routing header that names another is
//! refused before this, in `judge`). A request goes with the secret only
//! when some rule allows it under every one of those methods; a body that
//! may name a method and could not be read for certain may name any (`*`),
//! which only a rule for any method allows. It never reads a body itself
//! (`judge` hands it what was read).

use super::{forbidden, Refused};
use crate::decision::{Cause, Decision, Reason};
use crate::secrets::{Recorder, Terminator};

/// Refuse the request (recorded, 403) when the secret's rules for
/// `name:port` do not allow it under each of `methods` (its own first);
/// `unread`: a body that may name a method was not read for certain
/// (`methods` then holds `*`).
pub(super) fn check(
    term: &Terminator,
    (name, port): (&str, u16),
    record: &Recorder,
    (parts, path): (&http::request::Parts, &str),
    methods: &[String],
    unread: bool,
) -> Result<(), Refused> {
    let own = parts.method.as_str();
    let Some((method, why)) = methods
        .iter()
        .find_map(|m| term.rule_denies(name, port, m, path).map(|why| (m, why)))
    else {
        return Ok(());
    };
    let why = if method == own {
        why
    } else if method == "*" && unread {
        format!("{why} (as any method its unread body may name in _method)")
    } else {
        format!("{why} (as the {method} its method override names)")
    };
    // The rule that would allow this very request, when one can (a
    // request its body may make any method cannot be named).
    let cause = if method == "*" {
        Cause::new(Reason::SecretRule)
    } else {
        Cause::with_entry(Reason::SecretRule, format!("{method} {name}{path}"))
    };
    record(Decision::request_refused(name, port, why.clone(), cause));
    Err(Box::new(forbidden(Reason::SecretRule, &why)))
}
