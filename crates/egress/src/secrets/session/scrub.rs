//! A response from a secret's host on its way back to the sandbox: its
//! reason phrase and headers scrubbed of the secrets' values, its body
//! decoded from its codings (declared, or told by its first bytes: see
//! [`unpack`]; from a host sent secrets in headers only, those told by
//! their first bytes are read in a decoded copy: see [`copied`]), within
//! a bound of what it decodes to, and scrubbed as it streams, one
//! that cannot be read to check it (an unknown coding, a charset that
//! does not spell ASCII as ASCII, compressed data warden cannot decode)
//! withheld, and none relayed where a response has none (to HEAD, a 1xx,
//! 204 or 304), whatever the upstream sent. It never touches the request
//! (the exchange did) and never records a value, only which secret was
//! scrubbed.

mod copied;

use super::super::coding::{self, Budget, DecodeBody};
use super::super::rewrite::{rewrite_headers, Action, Blocked, Kind, RewriteBody, Rewriter};
use super::super::{readable, BoxError, OutBody};
use super::unpack::{self, Unreadable};
use super::{text, Session, HOP_BY_HOP};
use crate::decision::{Reason, SecretAction};
use copied::Copied;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::{Response, StatusCode};
use std::sync::Arc;

/// A response warden cannot check for the secrets' values does not reach
/// the sandbox: recorded as blocked for every secret of the connection,
/// and answered with `said`.
fn withhold(s: &Session, detail: &str, said: String) -> Response<OutBody> {
    for i in 0..s.term.secrets.len() {
        (s.record)(s.decision(i, SecretAction::Blocked, detail.to_string()));
    }
    text(StatusCode::BAD_GATEWAY, Reason::ResponseWithheld, said)
}

/// Whether a response of `status` has no body, whatever its headers say
/// (RFC 9110, 6.4.1): an informational one, 204 and 304. An answer to HEAD
/// has none either.
fn bodiless_status(status: StatusCode) -> bool {
    status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED
}

/// `r` with no body: its head alone reaches the sandbox, and the body
/// the upstream sent (an HTTP/2 server may send DATA frames to HEAD or
/// with a 204) is dropped unread. Relayed, those bytes would be read by a
/// kept-alive HTTP/1.1 client as the start of its next answer, and break
/// an HTTP/2 client's stream. A 1xx or a 204 loses its `Content-Length`
/// too, which it may not carry (RFC 9110, 8.6; HTTP/2 clients refuse
/// one that is not 0); HEAD and 304 keep theirs, the length a GET would
/// get.
fn without_body(r: Response<OutBody>) -> Response<OutBody> {
    let (mut parts, _) = r.into_parts();
    if parts.status.is_informational() || parts.status == StatusCode::NO_CONTENT {
        parts.headers.remove(http::header::CONTENT_LENGTH);
    }
    let none = http_body_util::Empty::<bytes::Bytes>::new()
        .map_err(|never| match never {})
        .boxed();
    Response::from_parts(parts, none)
}

/// The upstream's `response` to a request (`head`: to HEAD) as the
/// sandbox gets it: scrubbed, and with no body where it may have none
/// (see [`without_body`]), on either protocol the sandbox speaks.
pub(super) async fn scrub_response(
    s: &Arc<Session>,
    response: Response<Incoming>,
    head: bool,
) -> Response<OutBody> {
    let bodiless = head || bodiless_status(response.status());
    let scrubbed = scrubbed(s, response, bodiless).await;
    // Asked again of what goes back: warden's own answer in the
    // response's place (withheld, 502) has its words, unless to HEAD.
    if head || bodiless_status(scrubbed.status()) {
        without_body(scrubbed)
    } else {
        scrubbed
    }
}

/// A response of compressed data (`what`) withheld from the sandbox.
fn withhold_packed(s: &Session, what: &str) -> Response<OutBody> {
    withhold(
        s,
        &format!("a response of compressed data ({what}) from a secret's host was withheld (warden cannot read it to check it for the value)"),
        format!("warden: the server sent {what}, compressed data warden cannot read to check it for secrets, so it is withheld\n"),
    )
}

/// Told when a response's body decodes past its bound: recorded as
/// blocked for every secret of the connection (the body is cut).
fn over_told(s: &Arc<Session>) -> coding::OnOver {
    let s = s.clone();
    Box::new(move |coded, decoded| {
        let detail = format!(
            "the rest of a response from {} was withheld: its {coded} coded bytes decoded to {decoded} bytes, past the {} bytes warden reads of a body that long",
            s.name,
            coding::bound_of(coded)
        );
        for i in 0..s.term.secrets.len() {
            (s.record)(s.decision_for(
                i,
                SecretAction::Blocked,
                detail.clone(),
                Some(Reason::DecodedTooLarge),
            ));
        }
    })
}

/// A response whose body cannot be read to check it ([`unpack`]),
/// withheld.
fn withhold_unreadable(s: &Session, why: Unreadable) -> Response<OutBody> {
    match why {
        Unreadable::Packed(what) => withhold_packed(s, &what),
        Unreadable::Failed(e) => withhold(
            s,
            &format!(
                "a response from a secret's host was withheld: its body could not be read ({e})"
            ),
            format!(
                "warden: the server's response was withheld: its body could not be read ({e})\n"
            ),
        ),
        Unreadable::Costly(why) => withhold(
            s,
            &format!("a response from a secret's host was withheld: {why}"),
            format!("warden: the server's response was withheld: {why}\n"),
        ),
    }
}

/// `response` scrubbed; its body is left as it is where `bodiless`, for
/// the caller to drop.
async fn scrubbed(
    s: &Arc<Session>,
    response: Response<Incoming>,
    bodiless: bool,
) -> Response<OutBody> {
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
    let charset = response
        .headers()
        .get_all(http::header::CONTENT_TYPE)
        .iter()
        .find_map(|v| readable::unreadable_charset(v.as_bytes()));
    if let Some(charset) = charset.filter(|_| !bodiless && !s.term.secrets.is_empty()) {
        return withhold(
            s,
            &format!("a response in the {charset} charset from a secret's host was withheld (warden cannot read it to check it for the value)"),
            format!("warden: the server sent its response in the {charset} charset, which warden cannot read to check it for secrets, so it is withheld\n"),
        );
    }
    // An archive or compressed data as the server writes it (a tarball,
    // a zipball, a git pack of what the request stored) holds a value a
    // body carried there in bytes the scrub cannot read: withheld where a
    // body may have carried one.
    let packed = response
        .headers()
        .get_all(http::header::CONTENT_TYPE)
        .iter()
        .find_map(|v| readable::packed_type(v.as_bytes()));
    if let Some(packed) = packed.filter(|_| !bodiless && s.body_substitution) {
        return withhold_packed(s, &packed);
    }
    if let Some(why) = coding::too_costly(&codings).filter(|_| !bodiless) {
        return withhold(
            s,
            &format!("a response from a secret's host was withheld: {why}"),
            format!("warden: the server's response was withheld: {why}\n"),
        );
    }
    let (mut parts, body) = response.into_parts();
    let mut inner: OutBody = body.map_err(|e| Box::new(e) as BoxError).boxed();
    // What the body may decode to, every coding counted: past it the
    // rest is withheld (a bomb of a few KiB stands for gigabytes).
    let budget = Arc::new(Budget::new(Some(over_told(s))));
    // Compressed data nobody declared (an echo of what the request
    // stored, handed back compressed as text or bytes) is told by its
    // first bytes where a body may have carried a value there, and
    // decoded for the scrub to read and rewrite.
    let mut decoded = false;
    if !bodiless && s.body_substitution {
        match unpack::unpacked(inner, &codings, &s.term.decode_memory, &budget).await {
            Ok((body, undone)) => {
                inner = body;
                decoded = undone;
            }
            Err(why) => return withhold_unreadable(s, why),
        }
    } else if !bodiless {
        if !codings.is_empty() {
            inner = DecodeBody::new(
                inner,
                &codings,
                s.term.decode_memory.clone(),
                Some(budget.clone()),
                true,
            )
            .boxed();
            decoded = true;
        }
        // From a host sent secrets in headers only, such data passes as
        // the server sent it (decoded, a package's tarball would lose its
        // digest; withheld, every zip and wheel would be refused), read
        // through a decoded copy that cuts the body before any coded
        // byte whose decoding holds a value goes on (see `copied`).
        if s.term.secrets.iter().any(|x| x.hosts_name(&s.name)) {
            inner = Copied::new(inner, s.clone(), budget.clone(), codings.is_empty()).boxed();
        }
    }
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
    if decoded {
        headers.remove(http::header::CONTENT_ENCODING);
        headers.remove(http::header::CONTENT_LENGTH);
    }
    if changes_length && !bodiless {
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
    let watch = s.clone();
    let cut = s.clone();
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
        // Escapes nested past what the scrub reads: the rest of the body
        // is withheld, for every secret it could have spelled.
        Some(Box::new(move |b: Blocked| {
            for i in 0..cut.term.secrets.len() {
                (cut.record)(cut.blocked(Blocked { secret: i, ..b }));
            }
        })),
    )
    // Its runs' decoding is counted in the body's one bound, in the
    // bytes the server sent (those it reads, where nothing was decoded).
    .within(budget, !decoded)
    .boxed();
    Response::from_parts(parts, body)
}
