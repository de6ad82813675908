//! What the question about a held request shows of it: the request as the
//! upstream will get it, so that a person can tell two held requests
//! apart. Its target with the query's values; for a body, its length,
//! content type and coding, a digest and the start of it; and a digest of
//! the whole request (method, target, every header and trailer, body), so
//! that two questions that read alike are about byte-identical requests.
//!
//! Everything shown is the sandbox's text: each byte outside printable
//! ASCII is written `%XX` (no control character, escape sequence,
//! direction override or invisible character reaches a terminal or a
//! page), and each part is bounded, its cut marked, so that a sandbox
//! cannot make a desk render megabytes. Only the person at the desk (the
//! sandbox's owner, or a caller the owner let answer) sees this; records
//! and events keep the query's values redacted ([`super::redacted`]).
//! This module only words; the terminator reads the body and asks.

use sha2::{Digest, Sha256};

/// Bytes of the target (path and query) shown; past them, the cut is
/// marked (the request's digest still tells it from another).
pub const SHOWN_TARGET: usize = 512;
/// Bytes of a body's start shown.
pub const SHOWN_BODY: usize = 160;
/// Bytes of a content type or coding shown.
const SHOWN_TYPE: usize = 64;
/// Hex digits of a digest shown: 128 bits, so that no sandbox can make
/// two bodies (or requests) whose shown digests agree.
pub const DIGEST_HEX: usize = 32;

/// A held request's body, as its question shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldBody {
    /// Its length in bytes.
    pub len: usize,
    /// Its `Content-Type`, escaped and bounded; `None` without one.
    pub content_type: Option<String>,
    /// Its `Content-Encoding`, when it has one (the preview is then of
    /// the coded bytes).
    pub encoding: Option<String>,
    /// The SHA-256 of its bytes as sent, [`DIGEST_HEX`] hex digits.
    pub sha256: String,
    /// Its first [`SHOWN_BODY`] bytes, escaped, the cut marked.
    pub preview: String,
}

/// What a held request's question shows beyond the rules' scope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shown {
    /// The path and query as the upstream gets them, values and all,
    /// escaped and bounded.
    pub target: String,
    /// Its body, when it has one.
    pub body: Option<HeldBody>,
    /// The SHA-256 of the whole request (method, target, headers and
    /// trailers in order, body), [`DIGEST_HEX`] hex digits.
    pub sha256: String,
}

/// A request as the upstream will get it, for [`Shown::of`].
pub struct Held<'a> {
    pub method: &'a str,
    /// The normalised path (what the upstream gets).
    pub path: &'a str,
    pub query: Option<&'a str>,
    pub headers: &'a http::HeaderMap,
    pub trailers: Option<&'a http::HeaderMap>,
    /// The whole body (empty without one).
    pub body: &'a [u8],
}

impl Shown {
    /// What the question about `req` shows.
    pub fn of(req: &Held<'_>) -> Shown {
        let target = match req.query {
            Some(q) => format!("{}?{q}", req.path),
            None => req.path.to_string(),
        };
        let header = |name: http::header::HeaderName| {
            req.headers
                .get(name)
                .map(|v| escaped(v.as_bytes(), SHOWN_TYPE))
        };
        let body = (!req.body.is_empty()).then(|| HeldBody {
            len: req.body.len(),
            content_type: header(http::header::CONTENT_TYPE),
            encoding: header(http::header::CONTENT_ENCODING),
            sha256: hex(&Sha256::digest(req.body)),
            preview: escaped(req.body, SHOWN_BODY),
        });
        // Each part with its length in front: no two requests hash the
        // same bytes however their parts are cut.
        let mut whole = Sha256::new();
        let mut part = |bytes: &[u8]| {
            whole.update((bytes.len() as u64).to_be_bytes());
            whole.update(bytes);
        };
        part(req.method.as_bytes());
        part(target.as_bytes());
        for map in std::iter::once(req.headers).chain(req.trailers) {
            part(&(map.len() as u64).to_be_bytes());
            for (k, v) in map {
                part(k.as_str().as_bytes());
                part(v.as_bytes());
            }
        }
        part(req.body);
        Shown {
            target: escaped(target.as_bytes(), SHOWN_TARGET),
            body,
            sha256: hex(&whole.finalize()),
        }
    }

    /// What follows the target and the JSON-RPC calls in a question's
    /// line: ` [body: 8 bytes, TYPE, sha256 HEX: START] [request sha256
    /// HEX]`.
    pub fn tail(&self) -> String {
        let mut out = String::new();
        if let Some(b) = &self.body {
            out.push_str(&format!(" [body: {} bytes", b.len));
            if let Some(t) = &b.content_type {
                out.push_str(&format!(", {t}"));
            }
            if let Some(e) = &b.encoding {
                out.push_str(&format!(", coded {e}"));
            }
            out.push_str(&format!(", sha256 {}: {}]", b.sha256, b.preview));
        }
        out.push_str(&format!(" [request sha256 {}]", self.sha256));
        out
    }
}

/// `bytes` as printable ASCII: each byte outside `0x20..=0x7e` written
/// `%XX`; past `max` bytes cut, the cut marked with how many bytes were
/// left out.
pub fn escaped(bytes: &[u8], max: usize) -> String {
    let shown = &bytes[..bytes.len().min(max)];
    let mut out = String::with_capacity(shown.len());
    for &b in shown {
        if (0x20..=0x7e).contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    if bytes.len() > shown.len() {
        out.push_str(&format!("...(+{} bytes)", bytes.len() - shown.len()));
    }
    out
}

/// The first [`DIGEST_HEX`] hex digits of `digest`.
fn hex(digest: &[u8]) -> String {
    digest
        .iter()
        .take(DIGEST_HEX / 2)
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shown(query: Option<&str>, headers: &[(&str, &str)], body: &[u8]) -> Shown {
        let mut map = http::HeaderMap::new();
        for (k, v) in headers {
            map.append(
                http::header::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                http::HeaderValue::from_bytes(v.as_bytes()).unwrap(),
            );
        }
        Shown::of(&Held {
            method: "POST",
            path: "/api/transfer",
            query,
            headers: &map,
            trailers: None,
            body,
        })
    }

    const FORM: (&str, &str) = ("content-type", "application/x-www-form-urlencoded");

    /// The reviewer's twins: one amount or another, in the body or the
    /// query, read differently by a person.
    #[test]
    fn held_requests_that_differ_in_a_query_value_or_a_body_are_shown_differently() {
        let small = shown(None, &[FORM], b"amount=1");
        let large = shown(None, &[FORM], b"amount=1000000");
        assert_ne!(small.tail(), large.tail());
        assert!(small.tail().contains(": amount=1]"), "{}", small.tail());
        assert!(
            small
                .tail()
                .starts_with(" [body: 8 bytes, application/x-www-form-urlencoded, sha256 "),
            "{}",
            small.tail()
        );
        let alice = shown(Some("to=alice&amount=1"), &[], b"");
        assert_eq!(alice.target, "/api/transfer?to=alice&amount=1");
        assert!(alice.body.is_none());
        // Only a header apart: the request's digest tells them apart.
        let one = shown(None, &[FORM, ("x-account", "a")], b"amount=1");
        let other = shown(None, &[FORM, ("x-account", "b")], b"amount=1");
        assert_eq!(one.body, other.body);
        assert_ne!(one.tail(), other.tail());
    }

    /// A body that starts alike and differs past what is shown: its
    /// digest and length still tell it apart, and the cut is marked.
    #[test]
    fn a_difference_past_the_shown_start_still_shows_in_the_digest() {
        let mut a = vec![b'a'; 1000];
        let b = a.clone();
        a[999] = b'b';
        let (a, b) = (shown(None, &[], &a), shown(None, &[], &b));
        assert_eq!(
            a.body.as_ref().unwrap().preview,
            b.body.as_ref().unwrap().preview
        );
        assert!(a
            .body
            .as_ref()
            .unwrap()
            .preview
            .ends_with("...(+840 bytes)"));
        assert_ne!(a.tail(), b.tail());
        assert_eq!(a.body.as_ref().unwrap().sha256.len(), DIGEST_HEX);
    }

    /// No byte of the sandbox's reaches a desk raw, and none is shown
    /// past the bounds.
    #[test]
    fn what_is_shown_is_printable_ascii_and_bounded() {
        let body = "\x1b]0;owned\x07\u{9b}31m\u{202e}exe\r\n".repeat(1000);
        let long = "a".repeat(SHOWN_TARGET * 4);
        let s = shown(
            Some(&long),
            &[("content-type", "text/plain\u{e9}")],
            body.as_bytes(),
        );
        let tail = s.tail();
        for text in [&tail, &s.target] {
            assert!(text.bytes().all(|b| (0x20..=0x7e).contains(&b)), "{text}");
        }
        assert!(
            tail.contains("%1B]0;owned%07%C2%9B31m%E2%80%AEexe%0D%0A"),
            "{tail}"
        );
        assert!(tail.contains("text/plain%C3%A9"), "{tail}");
        assert!(tail.len() < 4 * SHOWN_BODY + 200, "{}", tail.len());
        assert!(s.target.len() < SHOWN_TARGET + 40, "{}", s.target.len());
        assert!(s.target.ends_with("bytes)"), "{}", s.target);
    }
}
