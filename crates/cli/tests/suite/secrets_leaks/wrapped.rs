//! A secret's host that hands back what it stores in a form the scrub
//! once could not read: base64 wrapped into lines (GitHub's contents API
//! at 60 columns in a JSON string, MIME at 76 with CRLF), the sandbox
//! choosing where its value falls against the wrap, sent in small frames;
//! and an archive of it (a tarball, `application/x-gzip` with no
//! Content-Encoding). Each goes through a real sandbox to a real raw
//! server; the value must never come back.

use super::*;

/// Where the wrapped answers put the value: before each, this many bytes
/// of the stored data (the sandbox picks them to move the value across a
/// line break).
const PADS: [usize; 8] = [0, 1, 2, 20, 40, 41, 42, 55];

/// A store that answers with the token it was sent: `/contents/PAD` as
/// GitHub's contents API does (JSON, base64 wrapped every 60 characters
/// with an escaped `\n`), `/mime/PAD` as MIME does (76 characters, CRLF),
/// both chunked in 7-byte frames; `/tarball` as gzip data.
fn wrapping_answer(req: &RawRequest) -> Vec<Vec<u8>> {
    let v = bearer(req);
    let engine = &base64::engine::general_purpose::STANDARD;
    let wrapped = |pad: usize, width: usize, sep: &str| -> String {
        let data = ["A".repeat(pad).as_bytes(), v.as_bytes(), b"!tail"].concat();
        engine
            .encode(data)
            .as_bytes()
            .chunks(width)
            .map(|c| String::from_utf8_lossy(c).into_owned())
            .collect::<Vec<_>>()
            .join(sep)
    };
    let framed = |ctype: &str, body: Vec<u8>| {
        let mut out = vec![format!(
            "HTTP/1.1 200 OK\r\nContent-Type: {ctype}\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
        )
        .into_bytes()];
        out.extend(chunked(&body, 7, ""));
        out
    };
    let target = req.target.as_str();
    let pad = |prefix: &str| target.strip_prefix(prefix).and_then(|p| p.parse().ok());
    if let Some(p) = pad("/contents/") {
        let body = format!(
            "{{\"encoding\":\"base64\",\"content\":\"{}\"}}",
            wrapped(p, 60, "\\n")
        );
        framed("application/json", body.into_bytes())
    } else if let Some(p) = pad("/mime/") {
        framed("text/plain", wrapped(p, 76, "\r\n").into_bytes())
    } else if target == "/tarball" {
        let body = gzip(format!("contents/f\0{v}\n").as_bytes());
        head_and(
            format!(
                "HTTP/1.1 200 OK\r\nContent-Type: application/x-gzip\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            ),
            body,
        )
    } else {
        head_and(
            "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".into(),
            Vec::new(),
        )
    }
}

/// The data a wrapped answer's base64 stands for, line breaks removed.
fn unwrapped(body: &str) -> Vec<u8> {
    let text = match body.split_once("\"content\":\"") {
        Some((_, rest)) => rest
            .split('"')
            .next()
            .unwrap_or_default()
            .replace("\\n", ""),
        None => body.replace("\r\n", ""),
    };
    base64::engine::general_purpose::STANDARD
        .decode(text.trim())
        .unwrap_or_else(|e| panic!("not base64 ({e}): {body}"))
}

#[test]
fn a_value_echoed_as_wrapped_base64_or_in_an_archive_never_comes_back() {
    if !raw_client_runs() {
        return;
    }
    let ca = TestCa::new();
    let up = RawUpstream::start(&ca, &[HOST], wrapping_answer);
    let value = format!("sk-live-{}", token());
    let mut requests: Vec<String> = Vec::new();
    for p in PADS {
        requests.push(get(&format!("/contents/{p}"), up.port));
        requests.push(get(&format!("/mime/{p}"), up.port));
    }
    requests.push(get("/tarball", up.port));
    let list = py_list(&requests);
    let out = run_secret(
        &value,
        up.port,
        &["--upstream-ca", &ca.pem_path(), "--secret-in-body", "TOKEN"],
        &raw_client(up.port, &list),
    );
    let s = ok(&out);
    let seen = up.requests();
    assert_eq!(seen.len(), requests.len(), "{seen:?}");
    for (i, p) in PADS.iter().flat_map(|p| [p, p]).enumerate() {
        let (head, body) = dechunk(&section(&s, i));
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        let data = String::from_utf8_lossy(&unwrapped(&body)).into_owned();
        assert!(
            !data.contains(&value),
            "the value came back across a line break ({p} before it): {body}"
        );
        assert!(
            data.starts_with(&format!("{}warden-secret-", "A".repeat(*p))),
            "{data}"
        );
        assert!(data.ends_with("!tail"), "{data}");
    }
    // The archive: withheld, and said why.
    let tarball = section(&s, requests.len() - 1);
    assert!(tarball.starts_with("HTTP/1.1 502"), "{tarball}");
    assert!(tarball.contains("application/x-gzip"), "{tarball}");
    output_holds_no_value(&out, &value);
}

/// How a store may break the base64 it hands back, by route: (width,
/// what stands between lines, inside a JSON string).
const BREAKS: [(&str, usize, &str, bool); 6] = [
    // PEM inside YAML: 64 columns, each line indented.
    ("yaml", 64, "\n      ", false),
    // MIME parts with a blank line between blocks.
    ("blank-lines", 76, "\r\n\r\n", false),
    // A JSON string written with CRLF and indentation, escaped.
    ("json-indented", 60, "\\r\\n    ", true),
    // JSON with a tab after each escaped break.
    ("json-tab", 60, "\\n\\t", true),
    // Groups set apart by spaces, as some dumps print them.
    ("groups", 4, " ", false),
    // Narrow lines of mixed blank space.
    ("mixed", 8, " \t\r\n  ", false),
];

/// A store that answers `/breaks/ROUTE/PAD` with the token it was sent,
/// PAD bytes after the start, as base64 broken as [`BREAKS`] says, in
/// 7-byte frames.
fn breaking_answer(req: &RawRequest) -> Vec<Vec<u8>> {
    let v = bearer(req);
    let mut parts = req.target.trim_start_matches("/breaks/").split('/');
    let route = parts.next().unwrap_or_default();
    let pad: usize = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    let Some((_, width, sep, json)) = BREAKS.iter().find(|(r, ..)| *r == route) else {
        return head_and(
            "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".into(),
            Vec::new(),
        );
    };
    let data = ["A".repeat(pad).as_bytes(), v.as_bytes(), b"!tail"].concat();
    let broken = base64::engine::general_purpose::STANDARD
        .encode(data)
        .as_bytes()
        .chunks(*width)
        .map(|c| String::from_utf8_lossy(c).into_owned())
        .collect::<Vec<_>>()
        .join(sep);
    let body = if *json {
        format!("{{\"encoding\":\"base64\",\"content\":\"{broken}\"}}")
    } else {
        format!("-----BEGIN DATA-----\n{broken}\n-----END DATA-----\n")
    };
    let mut out = vec![b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n".to_vec()];
    out.extend(chunked(body.as_bytes(), 7, ""));
    out
}

/// The data a [`breaking_answer`] stands for, as a reader that skips
/// blank space and JSON's escapes of it decodes it.
fn unbroken(body: &str) -> Vec<u8> {
    let inner = match body.split_once("\"content\":\"") {
        Some((_, rest)) => rest.split('"').next().unwrap_or_default().to_string(),
        None => body
            .trim()
            .trim_start_matches("-----BEGIN DATA-----")
            .trim_end_matches("-----END DATA-----")
            .to_string(),
    };
    let text: String = inner
        .replace("\\r", "")
        .replace("\\n", "")
        .replace("\\t", "")
        .chars()
        .filter(|c| !c.is_ascii_whitespace())
        .collect();
    base64::engine::general_purpose::STANDARD
        .decode(&text)
        .unwrap_or_else(|e| panic!("not base64 ({e}): {body}"))
}

#[test]
fn a_value_echoed_as_base64_broken_by_runs_of_blank_space_never_comes_back() {
    if !raw_client_runs() {
        return;
    }
    let ca = TestCa::new();
    let up = RawUpstream::start(&ca, &[HOST], breaking_answer);
    let value = format!("sk-live-{}", token());
    let pads = [0, 1, 2, 20, 41];
    let cases: Vec<(&str, usize)> = BREAKS
        .iter()
        .flat_map(|(r, ..)| pads.iter().map(move |p| (*r, *p)))
        .collect();
    let requests: Vec<String> = cases
        .iter()
        .map(|(r, p)| get(&format!("/breaks/{r}/{p}"), up.port))
        .collect();
    let list = py_list(&requests);
    let out = run_secret(
        &value,
        up.port,
        &["--upstream-ca", &ca.pem_path(), "--secret-in-body", "TOKEN"],
        &raw_client(up.port, &list),
    );
    let s = ok(&out);
    assert_eq!(up.requests().len(), cases.len());
    for (i, (route, pad)) in cases.iter().enumerate() {
        let (head, body) = dechunk(&section(&s, i));
        assert!(head.starts_with("HTTP/1.1 200"), "{route}: {head}");
        let data = String::from_utf8_lossy(&unbroken(&body)).into_owned();
        assert!(
            !data.contains(&value),
            "{route}: the value came back across blank space ({pad} before it): {body}"
        );
        assert!(
            data.starts_with(&format!("{}warden-secret-", "A".repeat(*pad)))
                && data.ends_with("!tail"),
            "{route}, {pad} before: {data}"
        );
    }
    output_holds_no_value(&out, &value);
}
