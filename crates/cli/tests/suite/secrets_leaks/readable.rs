//! A secret's host asked, from inside the sandbox, to write its answer in
//! a form the scrub would not read: another charset (`Accept-Charset`,
//! `Accept: ...; charset=`), a wide encoding it picks on its own, the
//! escapes servers use where they quote a bad token back, or a few bytes
//! at a time (`Range`). Each reaches a real raw server through a real
//! sandbox; the value must never come back, and what the server was sent
//! is checked too.

use super::*;

/// `text` in UTF-16 little-endian or UTF-32 big-endian.
fn utf16le(text: &str) -> Vec<u8> {
    text.encode_utf16().flat_map(u16::to_le_bytes).collect()
}

fn utf32be(text: &str) -> Vec<u8> {
    text.chars()
        .flat_map(|c| u32::from(c).to_be_bytes())
        .collect()
}

/// The value as servers quote it back where they escape: each line
/// `NAME=SPELLING`, every byte of the value escaped but its letters and
/// digits (or every byte, where an escape ends at its last digit and a
/// letter after it would be read as one more).
fn escaped_spellings(v: &str) -> Vec<(String, String)> {
    let each = |f: &dyn Fn(u8) -> String, all: bool| -> String {
        v.bytes()
            .map(|b| {
                if !all && b.is_ascii_alphanumeric() {
                    (b as char).to_string()
                } else {
                    f(b)
                }
            })
            .collect()
    };
    vec![
        (
            "quoted-printable".into(),
            each(&|b| format!("={b:02X}"), false),
        ),
        (
            "html-no-semicolon".into(),
            each(&|b| format!("&#{b}"), true),
        ),
        (
            "html-hex-no-semicolon".into(),
            each(&|b| format!("&#x{b:x}"), true),
        ),
        ("octal".into(), each(&|b| format!("\\{b:03o}"), true)),
        ("css".into(), each(&|b| format!("\\{b:x} "), false)),
        ("es6".into(), each(&|b| format!("\\u{{{b:x}}}"), false)),
        ("iis".into(), each(&|b| format!("%u{b:04X}"), false)),
    ]
}

/// A secret's host that quotes the token it was sent back, as each path
/// asks: in the charset the request asked for (as servers that negotiate
/// it do), declared UTF-16 whatever was asked, UTF-16 and UTF-32 with no
/// charset said, escaped, or the part a `Range` names.
fn quoting_answer(req: &RawRequest) -> Vec<Vec<u8>> {
    let v = bearer(req);
    let quoted = format!("{{\"error\":\"invalid token {v}\"}}\n");
    let answer = |status: &str, ctype: &str, body: Vec<u8>| {
        head_and(
            format!(
                "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            ),
            body,
        )
    };
    let asked_wide = req
        .header("accept-charset")
        .is_some_and(|c| c.to_ascii_lowercase().contains("utf-16"));
    match req.target.as_str() {
        "/negotiated" if asked_wide => answer(
            "200 OK",
            "application/json; charset=utf-16",
            utf16le(&quoted),
        ),
        "/negotiated" => answer("200 OK", "application/json", quoted.into_bytes()),
        "/declared" => answer(
            "200 OK",
            "application/json; charset=utf-16le",
            utf16le(&quoted),
        ),
        "/wide" => {
            let mut body = utf16le(&quoted);
            body.extend(utf32be(&quoted));
            answer("200 OK", "application/octet-stream", body)
        }
        "/escaped" => {
            let body: String = escaped_spellings(&v)
                .into_iter()
                .map(|(name, s)| format!("{name}={s}\n"))
                .collect();
            answer("200 OK", "text/plain", body.into_bytes())
        }
        "/range" => {
            let bytes = quoted.as_bytes();
            let part = req
                .header("range")
                .and_then(|r| r.strip_prefix("bytes="))
                .and_then(|r| r.split_once('-'))
                .and_then(|(a, b)| Some((a.parse::<usize>().ok()?, b.parse::<usize>().ok()?)));
            match part {
                Some((a, b)) if a <= b && b < bytes.len() => answer(
                    "206 Partial Content",
                    "application/json",
                    bytes[a..=b].to_vec(),
                ),
                _ => answer("200 OK", "application/json", bytes.to_vec()),
            }
        }
        _ => answer("404 Not Found", "text/plain", b"unknown route\n".to_vec()),
    }
}

/// `GET path` for the raw client with the placeholder as a bearer token
/// and `extra` header lines (each ending in `\\r\\n`).
fn get_with(path: &str, port: u16, extra: &str) -> String {
    format!(
        "GET {path} HTTP/1.1\\r\\nHost: {HOST}:{port}\\r\\nAuthorization: Bearer TOKEN\\r\\n{extra}Connection: close\\r\\n\\r\\n"
    )
}

/// `value` as UTF-16 little-endian and UTF-32 big-endian text, as the raw
/// client prints such bytes (each a character of its own).
fn wide_spellings(value: &str) -> Vec<String> {
    [utf16le(value), utf32be(value)]
        .into_iter()
        .map(|b| b.into_iter().map(char::from).collect())
        .collect()
}

#[test]
fn a_secrets_host_cannot_be_made_to_answer_in_a_form_the_scrub_does_not_read() {
    if !raw_client_runs() {
        return;
    }
    let ca = TestCa::new();
    let up = RawUpstream::start(&ca, &[HOST], quoting_answer);
    let value = format!("sk/Live+{}:x=Q", token());
    let requests = [
        get_with(
            "/negotiated",
            up.port,
            "Accept-Charset: utf-16\\r\\nAccept: application/json; charset=utf-16\\r\\n",
        ),
        get_with("/declared", up.port, ""),
        get_with("/wide", up.port, ""),
        get_with("/escaped", up.port, ""),
        get_with(
            "/range",
            up.port,
            "Range: bytes=20-23\\r\\nIf-Range: \\\"x\\\"\\r\\n",
        ),
    ];
    let list = py_list(&requests);
    let out = run_secret(
        &value,
        up.port,
        &["--upstream-ca", &ca.pem_path()],
        &raw_client(up.port, &list),
    );
    let s = ok(&out);
    let seen = up.requests();
    assert_eq!(seen.len(), requests.len(), "{seen:?}");
    for req in &seen {
        assert_eq!(bearer(req), value, "{req:?}");
        for header in ["accept-charset", "range", "if-range"] {
            assert_eq!(
                req.header(header),
                None,
                "{header} reached the server: {req:?}"
            );
        }
    }
    // Asked for UTF-16, the server was never told: it answered in UTF-8,
    // scrubbed.
    let (_, negotiated) = dechunk(&section(&s, 0));
    assert!(
        negotiated.contains("invalid token warden-secret-"),
        "{negotiated}"
    );
    // Declared UTF-16 anyway: withheld, and said why.
    let declared = section(&s, 1);
    assert!(declared.starts_with("HTTP/1.1 502"), "{declared}");
    assert!(declared.contains("utf-16le charset"), "{declared}");
    // UTF-16 and UTF-32 with no charset said: scrubbed in their encoding.
    let (_, wide) = dechunk(&section(&s, 2));
    for (form, placeholder) in wide_spellings(&value)
        .iter()
        .zip(wide_spellings("warden-secret-"))
    {
        assert!(
            !wide.contains(form.as_str()),
            "the value came back wide: {wide:?}"
        );
        assert!(
            wide.contains(&placeholder),
            "not the placeholder's own encoding: {wide:?}"
        );
    }
    // Escaped as servers quote it: each spelling is gone.
    let (_, escaped) = dechunk(&section(&s, 3));
    for (name, spelled) in escaped_spellings(&value) {
        assert!(!escaped.contains(&spelled), "{name} came back: {escaped}");
        assert!(escaped.contains(&format!("{name}=")), "{escaped}");
    }
    assert!(escaped.matches("warden-secret-").count() >= 7, "{escaped}");
    // A Range was not forwarded: the whole answer, scrubbed.
    let range = section(&s, 4);
    assert!(range.starts_with("HTTP/1.1 200"), "{range}");
    assert!(range.contains("invalid token warden-secret-"), "{range}");
    output_holds_no_value(&out, &value);
}
