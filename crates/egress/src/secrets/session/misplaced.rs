//! Where a request's bytes go upstream neither substituted nor scanned:
//! the method and the headers' names. A placeholder is put in header
//! values, the target and bodies only (a body's trailers are dropped), so
//! a placeholder or real value anywhere else would go upstream as the
//! sandbox wrote it; such a request is blocked before any stage reads it
//! further, as a stray placeholder in a value is. It never substitutes.

use super::{text, Session};
use crate::decision::{Reason, SecretAction};
use crate::secrets::OutBody;
use hyper::{Response, StatusCode};

/// The first secret whose placeholder (or real value) is in the method or
/// a header's name: recorded as blocked and answered 403. Compared
/// without case: HTTP/2 and hyper lower-case a name, and the upstream is
/// sent the case the sandbox wrote.
pub(super) fn check(
    s: &Session,
    parts: &http::request::Parts,
) -> Result<(), Box<Response<OutBody>>> {
    let names = parts
        .headers
        .keys()
        .map(|k| ("a header name", k.as_str().as_bytes()));
    let places = std::iter::once(("the method", parts.method.as_str().as_bytes())).chain(names);
    for (place, bytes) in places {
        for (i, secret) in s.term.secrets.iter().enumerate() {
            let (reason, what) = if holds(bytes, secret.placeholder.as_bytes()) {
                (Reason::StrayPlaceholder, "placeholder")
            } else if holds(bytes, &secret.value) {
                (Reason::SecretValue, "real value")
            } else {
                continue;
            };
            let why = format!(
                "blocked: the {what} of secret {} in {place} of a request to {}, where no secret is ever put",
                secret.name, s.name
            );
            (s.record)(s.decision_for(i, SecretAction::Blocked, why.clone(), Some(reason)));
            return Err(Box::new(text(
                StatusCode::FORBIDDEN,
                reason,
                format!("warden: {why}\n"),
            )));
        }
    }
    Ok(())
}

/// Whether `bytes` hold `needle` (not empty), ASCII case ignored.
fn holds(bytes: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty()
        && bytes
            .windows(needle.len())
            .any(|w| w.eq_ignore_ascii_case(needle))
}

#[cfg(test)]
mod tests {
    use super::holds;

    #[test]
    fn a_needle_is_found_in_any_case_and_an_empty_one_never() {
        assert!(holds(b"x-warden-secret-ab12: 1", b"WARDEN-SECRET-AB12"));
        assert!(!holds(b"x-warden-secret-ab1", b"warden-secret-ab12"));
        assert!(!holds(b"anything", b""));
    }
}
