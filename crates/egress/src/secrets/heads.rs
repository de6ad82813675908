//! A request's head leaving through a terminated connection, scanned for
//! credential-shaped values (`warden_detect`) as its body is (`outbound`):
//! every header's value (a Basic credential decoded too, where git and
//! many clients put a token), and the path and query as the upstream
//! reads them (percent-decoded; `+` as a space as well). It runs on the
//! sandbox's own bytes before any placeholder is substituted, so the
//! sandbox's placeholders are never findings. A head that carries one is
//! refused before anything of the request goes upstream; what is recorded
//! names the rule, where it was and the value's hash, never the value.

use base64::Engine;
use warden_detect::{scan, Finding};

/// Where in a head a finding was.
pub(super) struct HeadFinding {
    pub(super) finding: Finding,
    /// `the Authorization header`, `the request's path or query`.
    pub(super) place: String,
}

impl HeadFinding {
    /// What the record and the refusal say: rule, place, hash; never the
    /// value.
    pub(super) fn described(&self) -> String {
        format!(
            "a credential-shaped value (rule {}, sha256 {}…) in {}",
            self.finding.rule, self.finding.hash, self.place
        )
    }
}

/// The first credential-shaped value in `parts`'s headers, path or query.
pub(super) fn first_finding(parts: &http::request::Parts) -> Option<HeadFinding> {
    // One line per place, each written as a rule expects to meet it
    // (`name: value`), so a finding's line says where it was.
    let mut text = String::new();
    let mut places: Vec<String> = Vec::new();
    let mut line = |text: &mut String, place: String, content: String| {
        // A decoded value's own line breaks would shift the places.
        text.push_str(&content.replace(['\r', '\n'], " "));
        text.push('\n');
        places.push(place);
    };
    for (name, value) in parts.headers.iter() {
        let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
        let place = format!("the {} header", name.as_str());
        // A Basic credential is judged decoded only: its base64 is
        // high-entropy whatever it holds (a placeholder too).
        let content = match basic(&value) {
            Some(decoded) => format!("{}: {decoded}", name.as_str()),
            None => format!("{}: {value}", name.as_str()),
        };
        line(&mut text, place, content);
    }
    let target = parts
        .uri
        .path_and_query()
        .map(|p| p.as_str())
        .unwrap_or("/");
    let decoded = percent_encoding::percent_decode_str(target)
        .decode_utf8_lossy()
        .into_owned();
    let place = "the request's path or query".to_string();
    line(&mut text, place.clone(), format!("url: {decoded}"));
    // A query's parameters one to a line: `key=value` is an assignment
    // a rule reads (`token=...`), and `+` may stand for a space.
    if let Some(q) = parts.uri.query() {
        for pair in q.split(['&', ';']) {
            let spaced = pair.replace('+', " ");
            let pair = percent_encoding::percent_decode_str(&spaced)
                .decode_utf8_lossy()
                .into_owned();
            line(&mut text, place.clone(), pair);
        }
    }
    let finding = scan(text.as_bytes()).into_iter().next()?;
    let place = places
        .get((finding.line as usize).saturating_sub(1))
        .cloned()
        .unwrap_or_else(|| "the request's head".to_string());
    Some(HeadFinding { finding, place })
}

/// The `user:password` of a Basic credential, decoded.
fn basic(value: &str) -> Option<String> {
    let (scheme, encoded) = value.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    Some(String::from_utf8_lossy(&bytes).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(uri: &str, headers: &[(&str, String)]) -> http::request::Parts {
        let mut b = http::Request::builder().uri(uri);
        for (k, v) in headers {
            b = b.header(*k, v.as_str());
        }
        b.body(()).unwrap().into_parts().0
    }

    /// A GitHub token's shape, made here so no scanner flags this file.
    fn token() -> String {
        format!("ghp_{}", "Zq8Xv2Lm4Np6Rt0Yb3Wc5Kd7Hf9Jg1Ts2Ue4")
    }

    #[test]
    fn a_credential_in_a_header_a_basic_credential_the_path_or_the_query_is_found_and_placeholders_are_not(
    ) {
        let t = token();
        let b64 = base64::engine::general_purpose::STANDARD.encode(format!("x-access-token:{t}"));
        let cases = [
            (
                parts("/a", &[("x-note", format!("see {t}"))]),
                "the x-note header",
            ),
            (
                parts("/a", &[("authorization", format!("Basic {b64}"))]),
                "the authorization header",
            ),
            (
                parts(&format!("/keys/{t}/send"), &[]),
                "the request's path or query",
            ),
            (
                parts(&format!("/a?x=1&key=%67hp_{}", &t[4..]), &[]),
                "the request's path or query",
            ),
        ];
        for (p, place) in cases {
            let f = first_finding(&p).unwrap_or_else(|| panic!("not found in {place}"));
            assert_eq!(f.place, place);
            let said = f.described();
            assert!(!said.contains(&t[4..]), "the value is never said: {said}");
        }
        let placeholder = format!(
            "{}{}",
            crate::secrets::PLACEHOLDER_PREFIX,
            "0123456789abcdef".repeat(2)
        );
        let clean = parts(
            "/repos/acme/w?page=2",
            &[
                ("authorization", format!("Bearer {placeholder}")),
                ("accept", "application/json".into()),
                (
                    "proxy-authorization",
                    format!(
                        "Basic {}",
                        base64::engine::general_purpose::STANDARD
                            .encode(format!("user:{placeholder}"))
                    ),
                ),
            ],
        );
        assert!(first_finding(&clean).is_none());
    }
}
