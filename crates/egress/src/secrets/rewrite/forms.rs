//! The patterns made from secrets: for requests to one host (its own
//! secrets' placeholders substituted, as a header, a target or a body
//! writes them; other secrets' placeholders and every real value blocked)
//! and for responses (real values scrubbed back to placeholders), each
//! real value in the forms it may take (any common text spelling,
//! hexadecimal, base64 at each alignment). It never applies a pattern (the
//! rewriter does) and keeps no value beyond the patterns it returns, which
//! erase theirs when dropped.

use super::super::{b64, Secret};
use super::{Action, Kind, Pattern, Place, Violation};
use base64::Engine;

/// Encoded forms of a value shorter than this are not looked for: too
/// likely to occur by chance.
const MIN_FORM: usize = 8;

/// Patterns for requests to `name:port`, in priority order.
pub(in crate::secrets) fn outgoing(
    secrets: &[Secret],
    name: &str,
    port: u16,
    place: Place,
) -> Vec<Pattern> {
    let mut out = Vec::new();
    for (i, s) in secrets.iter().enumerate() {
        let own = s.covers(name, port);
        if own {
            let replacement = match place {
                Place::Header => Some(s.value.clone()),
                Place::Target => Some(percent_encode(&s.value)),
                Place::Body if s.in_bodies => Some(s.value.clone()),
                Place::Body => None,
            };
            if let Some(to) = replacement {
                out.push(Pattern::exact(
                    s.placeholder.as_bytes().to_vec(),
                    Action::Replace(to),
                    i,
                ));
            }
        } else {
            for from in std::iter::once(s.placeholder.as_bytes().to_vec())
                .chain(base64_forms(s.placeholder.as_bytes()))
            {
                out.push(Pattern::exact(
                    from,
                    Action::Block(Violation::Placeholder),
                    i,
                ));
            }
        }
        out.extend(value_forms(&s.value, Action::Block(Violation::Value), i));
    }
    out
}

/// Patterns that turn real values in responses back into placeholders.
pub(in crate::secrets) fn scrub_patterns(secrets: &[Secret]) -> Vec<Pattern> {
    let mut out = Vec::new();
    for (i, s) in secrets.iter().enumerate() {
        if s.value.is_empty() {
            continue;
        }
        let p = s.placeholder.as_bytes();
        if s.value.len() < 6 {
            // Too short to look for in its spellings: only as it is.
            out.push(Pattern::exact(
                s.value.clone(),
                Action::Replace(p.to_vec()),
                i,
            ));
        }
        out.extend(value_forms(&s.value, Action::Replace(p.to_vec()), i));
        // In the wide encodings a server answers in when asked for them
        // (`Accept-Charset: utf-16`, an `Accept` with a charset): the
        // value's UTF-16 and UTF-32 becomes the placeholder's.
        for (from, to) in wide_forms(&s.value).into_iter().zip(wide_forms(p)) {
            out.push(Pattern::exact(from, Action::Replace(to), i));
        }
        // Base64 at each alignment becomes the placeholder's base64, the
        // text around it still valid base64 of the same data.
        let to = b64::congruent(p, s.value.len());
        for f in b64::forms(&s.value, MIN_FORM) {
            out.push(Pattern {
                from: s.value.clone(),
                kind: Kind::Base64(Box::new(f)),
                action: Action::Replace(to.clone()),
                secret: i,
            });
        }
    }
    out
}

/// `v` in UTF-16 and UTF-32, little- and big-endian, when it is text;
/// none when it is not.
fn wide_forms(v: &[u8]) -> Vec<Vec<u8>> {
    let Ok(text) = std::str::from_utf8(v) else {
        return Vec::new();
    };
    // Built straight into the forms (which the patterns erase): no
    // other copy of the value is left behind.
    vec![
        text.encode_utf16().flat_map(u16::to_le_bytes).collect(),
        text.encode_utf16().flat_map(u16::to_be_bytes).collect(),
        text.chars()
            .flat_map(|c| u32::from(c).to_le_bytes())
            .collect(),
        text.chars()
            .flat_map(|c| u32::from(c).to_be_bytes())
            .collect(),
    ]
}

/// Every byte but the unreserved ones (RFC 3986) as `%XX`.
fn percent_encode(v: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(v.len());
    for &b in v {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b);
        } else {
            out.extend_from_slice(format!("%{b:02X}").as_bytes());
        }
    }
    out
}

/// The part of `v`'s base64 encoding that does not depend on the bytes
/// around it, for each of the three alignments `v` can have in a longer
/// encoded string (as in `Basic base64(user:value)`), in the standard
/// and the URL-safe alphabets.
fn base64_forms(v: &[u8]) -> Vec<Vec<u8>> {
    base64_pairs(v, v).into_iter().map(|(f, _)| f).collect()
}

/// [`base64_forms`] of `from`, each with the same form of `to`.
fn base64_pairs(from: &[u8], to: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut out = Vec::new();
    let middle = |engine: &base64::engine::GeneralPurpose, v: &[u8], k: usize| {
        let mut data = vec![0u8; k];
        data.extend_from_slice(v);
        let enc = engine.encode(&data).into_bytes();
        let start = (8 * k).div_ceil(6);
        let end = (8 * (k + v.len()) / 6).min(enc.len());
        enc.get(start..end).map(<[u8]>::to_vec).unwrap_or_default()
    };
    for engine in [
        &base64::engine::general_purpose::STANDARD,
        &base64::engine::general_purpose::URL_SAFE,
    ] {
        for k in 0..3 {
            let f = middle(engine, from, k);
            if f.len() >= MIN_FORM && !out.iter().any(|(o, _)| *o == f) {
                out.push((f, middle(engine, to, k)));
            }
        }
    }
    out
}

/// A real value as it may appear in a request or a response, and what
/// is done where it does: in any common text spelling (raw, percent,
/// JSON, HTML, either case), in hexadecimal (either case), and in base64
/// (standard or URL-safe, padded or not, at each alignment, and for a
/// block also wrapped across blank space, see [`b64`], and in UTF-16 and
/// UTF-32).
fn value_forms(v: &[u8], action: Action, secret: usize) -> Vec<Pattern> {
    if v.len() < 6 {
        return Vec::new();
    }
    let mut out = vec![Pattern::spelled(v.to_vec(), action.clone(), secret)];
    let hex: String = v.iter().map(|b| format!("{b:02x}")).collect();
    out.push(Pattern::spelled(hex.into_bytes(), action.clone(), secret));
    if matches!(action, Action::Block(_)) {
        for from in base64_forms(v) {
            out.push(Pattern::exact(from, action.clone(), secret));
        }
        // And broken by blank space, as the response scrub reads it: a
        // value the sandbox holds does not leave wrapped into lines
        // (MIME, PEM, a JSON string's escaped `\n`) either.
        for f in b64::forms(v, MIN_FORM) {
            out.push(Pattern {
                from: v.to_vec(),
                kind: Kind::Base64(Box::new(f)),
                action: action.clone(),
                secret,
            });
        }
        // In UTF-16 and UTF-32, as the scrub reads it in responses.
        for from in wide_forms(v) {
            out.push(Pattern::exact(from, action.clone(), secret));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::{find, Patterns, Rewriter};
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_real_value_wrapped_as_base64_or_in_a_wide_encoding_is_blocked_towards_any_host() {
        let value = b"sk-live-0123456789abcdefghij";
        let secrets = [Secret::new(
            "S".into(),
            format!("warden-secret-{:032x}", 7),
            value.to_vec(),
            Vec::new(),
            false,
        )];
        let p = Arc::new(Patterns::new(outgoing(
            &secrets,
            "elsewhere.test",
            443,
            Place::Body,
        )));
        let engine = &base64::engine::general_purpose::STANDARD;
        for sep in ["\r\n", "\\n", "\n    ", " ", "\n\n"] {
            for pad in 0..4 {
                let data = ["A".repeat(pad).as_bytes(), value, b"!"].concat();
                let wrapped: Vec<String> = engine
                    .encode(&data)
                    .as_bytes()
                    .chunks(7)
                    .map(|c| String::from_utf8_lossy(c).into_owned())
                    .collect();
                let text = wrapped.join(sep);
                assert!(
                    Rewriter::all(p.clone(), text.as_bytes()).is_err(),
                    "{sep:?}, {pad} before: {text}"
                );
            }
        }
        for wide in wide_forms(value) {
            let text = [&b"x\0"[..], &wide, b"\0"].concat();
            assert!(Rewriter::all(p.clone(), &text).is_err(), "{text:?}");
        }
    }

    #[test]
    fn base64_forms_find_a_value_inside_basic_credentials() {
        let engine = &base64::engine::general_purpose::STANDARD;
        let value = b"s3cr3t-token-value";
        for user in ["u", "us", "use", "someone"] {
            let mut plain = format!("{user}:").into_bytes();
            plain.extend_from_slice(value);
            let encoded = engine.encode(&plain);
            assert!(
                base64_forms(value)
                    .iter()
                    .any(|f| find(encoded.as_bytes(), f).is_some()),
                "{user}"
            );
        }
        // Scrubbed to the placeholder's form at the same alignment: the
        // decoded echo holds the placeholder where the value was.
        let placeholder = b"warden-secret-00112233445566778899aabbccddeeff";
        let mut plain = b"me:".to_vec();
        plain.extend_from_slice(value);
        let encoded = engine.encode(&plain);
        let pairs: Vec<Pattern> = base64_pairs(value, placeholder)
            .into_iter()
            .map(|(from, to)| Pattern::exact(from, Action::Replace(to), 0))
            .collect();
        let (out, _) = Rewriter::all(Arc::new(Patterns::new(pairs)), encoded.as_bytes()).unwrap();
        assert!(base64_forms(value).iter().all(|f| find(&out, f).is_none()));
        let decoded = engine
            .decode(&out)
            .unwrap_or_else(|_| engine.decode(&out[..out.len() / 4 * 4]).unwrap_or_default());
        assert!(
            String::from_utf8_lossy(&decoded).contains("secret-00112233"),
            "{out:?}"
        );
    }
}
