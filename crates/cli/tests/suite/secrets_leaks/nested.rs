//! A secret's host that hands back what it stores inside two encodings
//! of different kinds, or compressed and then encoded (outside review
//! 29, F8): base64 of hex, hex of base64, base64 three times, base64 of
//! the value percent-encoded or `\u`-escaped, base64 and hex of gzip, a
//! Flask session cookie (URL-safe base64 of zlib of JSON). Each goes
//! through a real sandbox to a real raw server that echoes the token it
//! was sent; the value must never come back, in any decoding.

use super::*;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};

fn hex(data: &[u8]) -> String {
    data.iter().map(|b| format!("{b:02x}")).collect()
}

fn b64(data: impl AsRef<[u8]>) -> String {
    STANDARD.encode(data)
}

/// What the store keeps compressed: a small document holding the value
/// twice (repeated text compresses, so the value's bytes are coded, not
/// stored as they are).
fn document(v: &str) -> Vec<u8> {
    format!(
        "{{\"token\":\"{v}\",\"again\":\"{v}\",\"note\":\"{}\"}}",
        "stored as sent; ".repeat(8)
    )
    .into_bytes()
}

/// The kinds, by route: the value `v` inside each.
fn nested(kind: &str, v: &str) -> Option<String> {
    let pct: String = v
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect();
    let json_u: String = v.bytes().map(|b| format!("\\u{b:04x}")).collect();
    Some(match kind {
        "b64_hex" => b64(hex(v.as_bytes())),
        "hex_b64" => hex(b64(v).as_bytes()),
        "b64_b64_b64" => b64(b64(b64(v))),
        "b64_of_pct" => b64(&pct),
        "b64_of_json_u" => b64(&json_u),
        "b64_of_gzip" => b64(gzip(&document(v))),
        "hex_of_gzip" => hex(&gzip(&document(v))),
        "flask_cookie" => format!(
            "session=.{}.ZxYzAb.c2lnbmF0dXJl",
            URL_SAFE_NO_PAD.encode(zlib(&document(v)))
        ),
        _ => return None,
    })
}

const KINDS: [&str; 8] = [
    "b64_hex",
    "hex_b64",
    "b64_b64_b64",
    "b64_of_pct",
    "b64_of_json_u",
    "b64_of_gzip",
    "hex_of_gzip",
    "flask_cookie",
];

/// A store that answers `/nested/KIND` with the token it was sent inside
/// that kind, in a JSON body sent in 7-byte frames.
fn nesting_answer(req: &RawRequest) -> Vec<Vec<u8>> {
    let v = bearer(req);
    let kind = req.target.trim_start_matches("/nested/");
    let Some(inner) = nested(kind, &v) else {
        return head_and(
            "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".into(),
            Vec::new(),
        );
    };
    let body = format!("{{\"stored\":\"{inner}\",\"kind\":\"{kind}\"}}");
    let mut out = vec![b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n".to_vec()];
    out.extend(chunked(body.as_bytes(), 7, ""));
    out
}

#[test]
fn a_value_inside_two_encodings_or_compressed_and_encoded_never_comes_back() {
    if !raw_client_runs() {
        return;
    }
    let ca = TestCa::new();
    let up = RawUpstream::start(&ca, &[HOST], nesting_answer);
    let value = format!("sk-Real/Secret+Value={}", token());
    let requests: Vec<String> = KINDS
        .iter()
        .map(|k| get(&format!("/nested/{k}"), up.port))
        .collect();
    let out = run_secret(
        &value,
        up.port,
        &["--upstream-ca", &ca.pem_path(), "--secret-in-body", "TOKEN"],
        &raw_client(up.port, &py_list(&requests)),
    );
    let s = ok(&out);
    assert_eq!(up.requests().len(), KINDS.len());
    for (i, kind) in KINDS.iter().enumerate() {
        let (head, body) = dechunk(&section(&s, i));
        assert!(head.starts_with("HTTP/1.1 200"), "{kind}: {head}");
        let sent = nested(kind, &value).unwrap_or_default();
        assert!(
            !body.contains(&sent),
            "{kind}: the value came back inside it: {body}"
        );
        assert!(
            body.contains("warden-secret-"),
            "{kind}: the placeholder stands where the run was: {body}"
        );
        assert!(
            body.ends_with(&format!("\",\"kind\":\"{kind}\"}}")),
            "{body}"
        );
    }
    output_holds_no_value(&out, &value);
}
