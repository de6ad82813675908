//! Attacks on the secret proxy through real sandboxes and real upstream
//! servers that misbehave on purpose: a secret's host that echoes the real
//! value in every part of a response and in every common spelling, code
//! inside that sends a real value in disguise, requests whose path matches
//! a `--secret-rule` only before or only after normalisation, and
//! ambiguous authorities. Each upstream is a raw HTTPS/1.1 server of the
//! test's own, so every byte of its misbehaviour is what the test wrote.

use crate::common::upstream::{RawRequest, RawUpstream, TestCa};
use crate::common::*;
use base64::Engine;
use std::io::Write;
use std::process::{Command, Stdio};

const HOST: &str = "api.secret.test";

/// A value that looks like a real token, with letters of both cases, and
/// occurs nowhere by chance.
fn token() -> String {
    format!("ghp_Ab{}Yz", unique("tok").replace('-', "x"))
}

/// The value the proxy put in the request, from `Authorization: Bearer`.
fn bearer(req: &RawRequest) -> String {
    let auth = req.header("authorization").unwrap_or_default();
    auth.strip_prefix("Bearer ").unwrap_or(auth).to_string()
}

/// `warden run` with `TOKEN` as a secret for `HOST:port`, the test's
/// authority trusted upstream, and `args` more.
fn run_secret(value: &str, port: u16, args: &[&str], script: &str) -> std::process::Output {
    Command::new(warden_bin())
        .args(["run", "--no-tty", "--secret"])
        .arg(format!("TOKEN@{HOST}:{port}"))
        .args(["--add-host", &format!("{HOST}=127.0.0.1")])
        .args(args)
        .args(["--", "sh", "-c", script])
        .env("TOKEN", value)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// A Python client inside the sandbox that sends each request as raw
/// bytes over TLS (trusting the sandbox's bundle) and prints each raw
/// answer after a `=== N` line. `requests` is a Python list of strings in
/// which `TOKEN` stands for the environment's `$TOKEN` and `LEAKED` for
/// `$LEAKED`, and `CLEN` for the length of the body.
fn raw_client(port: u16, requests: &str) -> String {
    format!(
        r#"python3 - <<'PY'
import os, socket, ssl
ctx = ssl.create_default_context()
reqs = {requests}
for i, r in enumerate(reqs):
    r = r.replace("TOKEN", os.environ.get("TOKEN", "")).replace("LEAKED", os.environ.get("LEAKED", ""))
    if "CLEN" in r:
        r = r.replace("CLEN", str(len(r.split("\r\n\r\n", 1)[1])))
    s = ctx.wrap_socket(socket.create_connection(("{HOST}", {port})), server_hostname="{HOST}")
    s.sendall(r.encode("latin-1"))
    data = b""
    s.settimeout(20)
    try:
        while True:
            b = s.recv(65536)
            if not b:
                break
            data += b
    except Exception as e:
        data += ("\n[client: %s]" % type(e).__name__).encode()
    print("=== %d" % i)
    print(data.decode("latin-1"))
PY
"#
    )
}

/// Whether [`raw_client`] can run here: egress interception and python3
/// on the host; the reason printed when not.
fn raw_client_runs() -> bool {
    if !egress_available()
        || !Command::new("python3")
            .arg("-V")
            .output()
            .is_ok_and(|o| o.status.success())
    {
        skip("python3 is needed for the raw client inside the sandbox");
        return false;
    }
    true
}

/// `requests` as the Python list of strings [`raw_client`] takes.
fn py_list(requests: &[String]) -> String {
    let quoted: Vec<String> = requests.iter().map(|r| format!("\"{r}\"")).collect();
    format!("[{}]", quoted.join(", "))
}

/// Neither what the run printed nor its errors hold `value` in any
/// spelling.
fn output_holds_no_value(out: &std::process::Output, value: &str) {
    for text in [&stdout(out), &stderr(out)] {
        assert_no_value("the run's output", text, value);
    }
}

/// The answer of request `i` in a [`raw_client`]'s output.
fn section(out: &str, i: usize) -> String {
    let start = format!("=== {i}\n");
    let Some(at) = out.find(&start) else {
        return String::new();
    };
    let rest = &out[at + start.len()..];
    let end = rest.find("\n=== ").unwrap_or(rest.len());
    rest[..end].to_string()
}

/// `GET path` for the raw client, with the placeholder as a bearer token.
fn get(path: &str, port: u16) -> String {
    format!(
        "GET {path} HTTP/1.1\\r\\nHost: {HOST}:{port}\\r\\nAuthorization: Bearer TOKEN\\r\\nConnection: close\\r\\n\\r\\n"
    )
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

fn zlib(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

fn raw_deflate(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

fn brotli(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    {
        let mut w = brotli::CompressorWriter::new(&mut out, 4096, 5, 22);
        w.write_all(data).unwrap();
    }
    out
}

/// `data` as HTTP/1.1 chunks of `size` bytes each, one write per chunk,
/// ending with `trailers` (lines without the final CRLF).
fn chunked(data: &[u8], size: usize, trailers: &str) -> Vec<Vec<u8>> {
    let mut out: Vec<Vec<u8>> = data
        .chunks(size)
        .map(|c| {
            let mut piece = format!("{:x}\r\n", c.len()).into_bytes();
            piece.extend_from_slice(c);
            piece.extend_from_slice(b"\r\n");
            piece
        })
        .collect();
    out.push(format!("0\r\n{trailers}\r\n").into_bytes());
    out
}

fn head_and(head: String, body: Vec<u8>) -> Vec<Vec<u8>> {
    vec![head.into_bytes(), body]
}

/// The misbehaving secret's host for the response attacks: each path hides
/// the real value it was sent in another part or coding of its answer.
fn leaky_answer(req: &RawRequest) -> Vec<Vec<u8>> {
    let v = bearer(req);
    let body = format!("echo of the token: {v} (end)\n").into_bytes();
    let plain = |extra: &str, body: Vec<u8>| {
        head_and(
            format!(
                "HTTP/1.1 200 OK\r\n{extra}Content-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            ),
            body,
        )
    };
    match req.target.as_str() {
        "/reason" => head_and(
            format!(
                "HTTP/1.1 200 Token {v} accepted\r\nContent-Length: 3\r\nConnection: close\r\n\r\n"
            ),
            b"ok\n".to_vec(),
        ),
        "/header-name" => plain(&format!("X-{v}: present\r\n"), b"ok\n".to_vec()),
        "/header-upper" => plain(
            &format!(
                "X-Echo: {}\r\nX-Lower: {}\r\n",
                v.to_uppercase(),
                v.to_lowercase()
            ),
            b"ok\n".to_vec(),
        ),
        "/trailer" => {
            let mut out = vec![format!(
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Echo, X-{v}\r\nConnection: close\r\n\r\n"
            )
            .into_bytes()];
            out.extend(chunked(
                b"ok\n",
                16,
                &format!("X-Echo: {v}\r\nX-{v}: yes\r\n"),
            ));
            out
        }
        "/gzip" => plain("Content-Encoding: gzip\r\n", gzip(&body)),
        "/x-gzip" => plain("Content-Encoding: x-gzip\r\n", gzip(&body)),
        "/gzip-twice" => plain("Content-Encoding: gzip, gzip\r\n", gzip(&gzip(&body))),
        "/deflate" => plain("Content-Encoding: deflate\r\n", zlib(&body)),
        "/raw-deflate" => plain("Content-Encoding: deflate\r\n", raw_deflate(&body)),
        "/br" => plain("Content-Encoding: br\r\n", brotli(&body)),
        "/te-gzip" => {
            let mut out = vec![
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\nConnection: close\r\n\r\n"
                    .to_vec(),
            ];
            out.extend(chunked(&gzip(&body), 7, ""));
            out
        }
        "/zstd" => plain("Content-Encoding: zstd\r\n", gzip(&body)),
        "/te-unknown" => {
            let mut out = vec![b"HTTP/1.1 200 OK\r\nTransfer-Encoding: x-secret, chunked\r\nConnection: close\r\n\r\n".to_vec()];
            out.extend(chunked(&body, 5, ""));
            out
        }
        "/chunks" => {
            // One byte per chunk, one write per chunk: the value straddles
            // every boundary there is.
            let mut out = vec![
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
                    .to_vec(),
            ];
            out.extend(chunked(&body, 1, ""));
            out
        }
        _ => plain("", b"unknown route\n".to_vec()),
    }
}

/// Every spelling of `value` the tests look for in what the sandbox got.
fn spellings(value: &str) -> Vec<String> {
    vec![
        value.to_string(),
        value.to_lowercase(),
        value.to_uppercase(),
    ]
}

fn assert_no_value(what: &str, text: &str, value: &str) {
    for form in spellings(value) {
        assert!(
            !text.contains(&form),
            "{what}: the real value came back ({form}): {text}"
        );
    }
}

/// The body of a raw HTTP/1.1 answer with chunked framing undone.
fn dechunk(answer: &str) -> (String, String) {
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((answer, ""));
    if !head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        return (head.to_string(), body.to_string());
    }
    let mut out = String::new();
    let mut rest = body;
    while let Some((size, more)) = rest.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if n == 0 || more.len() < n {
            break;
        }
        out.push_str(&more[..n]);
        rest = more[n..].trim_start_matches("\r\n");
    }
    (head.to_string(), out)
}

#[test]
fn every_part_of_a_response_is_scrubbed_or_withheld() {
    if !egress_available() {
        return;
    }
    let ca = TestCa::new();
    let up = RawUpstream::start(&ca, &[HOST], leaky_answer);
    let value = token();
    let paths = [
        "/reason",
        "/header-name",
        "/header-upper",
        "/trailer",
        "/gzip",
        "/x-gzip",
        "/gzip-twice",
        "/deflate",
        "/raw-deflate",
        "/br",
        "/te-gzip",
        "/chunks",
        "/zstd",
        "/te-unknown",
    ];
    let list: Vec<String> = paths
        .iter()
        .map(|p| format!("\"{}\"", get(p, up.port)))
        .collect();
    let out = run_secret(
        &value,
        up.port,
        &["--upstream-ca", &ca.pem_path()],
        &raw_client(up.port, &format!("[{}]", list.join(", "))),
    );
    let s = ok(&out);
    let seen = up.requests();
    assert!(
        seen.iter().all(|r| bearer(r) == value),
        "the upstream did not get the real value: {seen:?}"
    );
    assert_no_value("anywhere", &s, &value);
    for (i, path) in paths.iter().enumerate() {
        let answer = section(&s, i);
        let (head, body) = dechunk(&answer);
        let status = head.lines().next().unwrap_or("");
        if matches!(*path, "/zstd" | "/te-unknown") {
            // A coding the scrubber cannot read is withheld, never passed.
            assert!(status.contains(" 502"), "{path}: {answer}");
            assert!(!body.contains("echo of the token"), "{path}: {answer}");
            continue;
        }
        assert!(
            status.contains(" 200"),
            "{path}: {answer}\n{}",
            stderr(&out)
        );
        let lower = head.to_ascii_lowercase();
        assert!(
            !lower.contains("content-encoding") || lower.contains("content-encoding: identity"),
            "{path}: a coded body reached the sandbox: {answer}"
        );
        assert!(
            !lower.contains("transfer-encoding: gzip"),
            "{path}: {answer}"
        );
        if path.starts_with("/gzip")
            || path.contains("deflate")
            || matches!(*path, "/x-gzip" | "/br" | "/te-gzip" | "/chunks")
        {
            assert!(
                body.contains("echo of the token: warden-secret-"),
                "{path}: the body was not decoded and scrubbed: {answer}"
            );
        }
    }
    assert!(!stderr(&out).contains(&value));
}

/// The value as servers spell it: each line `NAME=SPELLING`.
fn spelled_answer(req: &RawRequest) -> Vec<Vec<u8>> {
    let v = bearer(req);
    let mut lines = Vec::new();
    let std = base64::engine::general_purpose::STANDARD;
    let std_np = base64::engine::general_purpose::STANDARD_NO_PAD;
    let url = base64::engine::general_purpose::URL_SAFE;
    let url_np = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    for (i, prefix) in ["", "u:", "us:", "use:"].iter().enumerate() {
        let data = format!("{prefix}{v}");
        lines.push(format!("b64std{i}={}", std.encode(&data)));
        lines.push(format!("b64nopad{i}={}", std_np.encode(&data)));
        lines.push(format!("b64url{i}={}", url.encode(&data)));
        lines.push(format!("b64urlnopad{i}={}", url_np.encode(&data)));
        // Followed by more encoded data: the value inside a longer run.
        lines.push(format!(
            "b64long{i}={}",
            std.encode(format!("{data}!tail-of-the-data"))
        ));
    }
    let pct = |keep: &str, upper: bool| -> String {
        v.bytes()
            .map(|b| {
                if b.is_ascii_alphanumeric() || keep.as_bytes().contains(&b) {
                    (b as char).to_string()
                } else if upper {
                    format!("%{b:02X}")
                } else {
                    format!("%{b:02x}")
                }
            })
            .collect()
    };
    // encodeURIComponent in both cases, and encodeURI, which leaves the
    // reserved characters (`/`, `+`, `:`, `=`) as they are.
    lines.push(format!("pct-component={}", pct("-_.!~*'()", true)));
    lines.push(format!("pct-lower={}", pct("-_.~", false)));
    lines.push(format!("pct-uri={}", pct("-_.!~*'();/?:@&=+$,#", true)));
    lines.push(format!(
        "pct-all={}",
        v.bytes().map(|b| format!("%{b:02X}")).collect::<String>()
    ));
    let json_all: String = v
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() {
                (b as char).to_string()
            } else {
                format!("\\u{b:04x}")
            }
        })
        .collect();
    lines.push(format!("json-u={json_all}"));
    let json_upper: String = v
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() {
                (b as char).to_string()
            } else {
                format!("\\u{b:04X}")
            }
        })
        .collect();
    lines.push(format!("json-U={json_upper}"));
    lines.push(format!("json-slash={}", v.replace('/', "\\/")));
    let html = |f: &dyn Fn(u8) -> String| -> String {
        v.bytes()
            .map(|b| {
                if b.is_ascii_alphanumeric() {
                    (b as char).to_string()
                } else {
                    f(b)
                }
            })
            .collect()
    };
    lines.push(format!("html-hex={}", html(&|b| format!("&#x{b:X};"))));
    lines.push(format!("html-dec={}", html(&|b| format!("&#{b};"))));
    lines.push(format!(
        "html-named={}",
        html(&|b| match b {
            b'/' => "&sol;".into(),
            b'+' => "&plus;".into(),
            b':' => "&colon;".into(),
            b'_' => "&lowbar;".into(),
            b'&' => "&amp;".into(),
            other => format!("&#{other};"),
        })
    ));
    let hex: String = v.bytes().map(|b| format!("{b:02x}")).collect();
    lines.push(format!("hex={hex}"));
    lines.push(format!("HEX={}", hex.to_uppercase()));
    let body = format!("{}\n", lines.join("\n")).into_bytes();
    let mut out = vec![b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\n".to_vec()];
    // Small chunks: every spelling straddles chunk boundaries too.
    out.extend(chunked(&body, 13, ""));
    out
}

#[test]
fn every_common_spelling_of_the_value_in_a_response_is_scrubbed_and_stays_well_formed() {
    if !egress_available() {
        return;
    }
    let ca = TestCa::new();
    let up = RawUpstream::start(&ca, &[HOST], spelled_answer);
    let value = format!("sk/Live+{}:x=Q", token());
    let out = run_secret(
        &value,
        up.port,
        &["--upstream-ca", &ca.pem_path()],
        &raw_client(up.port, &format!("[\"{}\"]", get("/spelled", up.port))),
    );
    let s = ok(&out);
    let seen = up.requests();
    assert_eq!(seen.first().map(bearer), Some(value.clone()), "{seen:?}");
    let (_, body) = dechunk(&section(&s, 0));
    let lines: Vec<(&str, &str)> = body.lines().filter_map(|l| l.split_once('=')).collect();
    assert!(lines.len() > 20, "{body}");
    assert_no_value("raw", &body, &value);
    let decoders = [
        ("b64std", base64::engine::general_purpose::STANDARD),
        ("b64nopad", base64::engine::general_purpose::STANDARD_NO_PAD),
        (
            "b64urlnopad",
            base64::engine::general_purpose::URL_SAFE_NO_PAD,
        ),
        ("b64url", base64::engine::general_purpose::URL_SAFE),
        ("b64long", base64::engine::general_purpose::STANDARD),
    ];
    for (name, spelled) in &lines {
        if let Some((_, engine)) = decoders.iter().find(|(p, _)| {
            name.strip_prefix(p)
                .is_some_and(|n| n.len() == 1 && n.as_bytes()[0].is_ascii_digit())
        }) {
            // Still valid base64, now of the placeholder.
            let decoded = engine
                .decode(spelled)
                .unwrap_or_else(|e| panic!("{name}: no longer valid base64 ({e}): {spelled}"));
            let text = String::from_utf8_lossy(&decoded);
            assert!(!text.contains(&value), "{name}: {text}");
            assert!(
                text.contains("warden-secret-"),
                "{name}: not the placeholder's base64: {text}"
            );
            continue;
        }
        let decoded = decode_text(spelled);
        assert!(
            !decoded.to_lowercase().contains(&value.to_lowercase()),
            "{name} came back: {spelled}"
        );
        assert!(
            decoded.contains("warden-secret-"),
            "{name}: not replaced by the placeholder: {spelled}"
        );
    }
}

/// Undo percent, JSON, HTML and hexadecimal spellings, as a program in the
/// sandbox would.
fn decode_text(s: &str) -> String {
    if s.len().is_multiple_of(2) && !s.is_empty() && s.bytes().all(|b| b.is_ascii_hexdigit()) {
        let bytes: Vec<u8> = (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect();
        return String::from_utf8_lossy(&bytes).into_owned();
    }
    let mut out = String::new();
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let rest = &s[i..];
        if rest.starts_with('%') && rest.len() >= 3 {
            if let Ok(v) = u8::from_str_radix(&rest[1..3], 16) {
                out.push(v as char);
                i += 3;
                continue;
            }
        }
        if (rest.starts_with("\\u") || rest.starts_with("\\U")) && rest.len() >= 6 {
            if let Ok(v) = u32::from_str_radix(&rest[2..6], 16) {
                out.push(char::from_u32(v).unwrap_or('?'));
                i += 6;
                continue;
            }
        }
        if rest.starts_with("\\/") {
            out.push('/');
            i += 2;
            continue;
        }
        if rest.starts_with('&') {
            if let Some(end) = rest.find(';') {
                let ent = &rest[1..end];
                let c = if let Some(h) = ent.strip_prefix("#x").or(ent.strip_prefix("#X")) {
                    u32::from_str_radix(h, 16).ok().and_then(char::from_u32)
                } else if let Some(d) = ent.strip_prefix('#') {
                    d.parse().ok().and_then(char::from_u32)
                } else {
                    match ent {
                        "sol" => Some('/'),
                        "plus" => Some('+'),
                        "colon" => Some(':'),
                        "lowbar" => Some('_'),
                        "amp" => Some('&'),
                        _ => None,
                    }
                };
                if let Some(c) = c {
                    out.push(c);
                    i += end + 1;
                    continue;
                }
            }
        }
        let c = rest.chars().next().unwrap();
        out.push(c);
        i += c.len_utf8();
    }
    out
}

#[test]
fn a_real_value_in_disguise_never_leaves_the_sandbox() {
    if !egress_available() {
        return;
    }
    let ca = TestCa::new();
    let up = RawUpstream::start(&ca, &[HOST], |_| {
        vec![b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: close\r\n\r\nok\n".to_vec()]
    });
    let value = format!("sk/Live+{}:x=Q", token());
    let pct_uri: String = value
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"/+:=_".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02x}")
            }
        })
        .collect();
    let pct_mixed: String = value
        .bytes()
        .enumerate()
        .map(|(i, b)| {
            if i % 2 == 0 {
                format!("%{b:02x}")
            } else {
                format!("%{b:02X}")
            }
        })
        .collect();
    let json: String = value
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() {
                (b as char).to_string()
            } else {
                format!("\\\\u{b:04x}")
            }
        })
        .collect();
    let html: String = value
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() {
                (b as char).to_string()
            } else {
                format!("&#{b};")
            }
        })
        .collect();
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(format!("k:{value}"));
    let upper = value.to_uppercase();
    let port = up.port;
    let disguised = [
        format!("/search?q={pct_uri}"),
        format!("/search?q={pct_mixed}"),
        format!("/x?b={b64}"),
    ];
    let mut requests: Vec<String> = disguised
        .iter()
        .map(|t| {
            format!(
                "\"GET {t} HTTP/1.1\\r\\nHost: {HOST}:{port}\\r\\nConnection: close\\r\\n\\r\\n\""
            )
        })
        .collect();
    for header in [json.clone(), html.clone(), upper.clone(), b64.clone()] {
        requests.push(format!(
            "\"GET /h HTTP/1.1\\r\\nHost: {HOST}:{port}\\r\\nX-Note: {header}\\r\\nConnection: close\\r\\n\\r\\n\""
        ));
    }
    let body = format!("{{\\\"note\\\": \\\"{json}\\\"}}");
    requests.push(format!(
        "\"POST /b HTTP/1.1\\r\\nHost: {HOST}:{port}\\r\\nContent-Type: application/json\\r\\nContent-Length: {}\\r\\nConnection: close\\r\\n\\r\\n{body}\"",
        body.len() - body.matches("\\\\").count() - body.matches("\\\"").count()
    ));
    // The real value of LEAK is known inside only because the test passes
    // it in with --env (as a person might by mistake).
    let out = Command::new(warden_bin())
        .args(["run", "--no-tty", "--secret"])
        .arg(format!("LEAK=env:LEAKED_SOURCE@{HOST}:{port}"))
        .args(["--add-host", &format!("{HOST}=127.0.0.1")])
        .args(["--upstream-ca", &ca.pem_path()])
        .args(["--env", &format!("LEAKED={value}")])
        .args([
            "--",
            "sh",
            "-c",
            &raw_client(port, &format!("[{}]", requests.join(", "))),
        ])
        .env("LEAKED_SOURCE", &value)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let s = ok(&out);
    for i in 0..requests.len() {
        let answer = section(&s, i);
        // A streamed body is cut off where the value starts: its head may
        // have gone, the value never.
        let cut = i + 1 == requests.len() && answer.starts_with("HTTP/1.1 502");
        assert!(
            answer.starts_with("HTTP/1.1 403") || cut,
            "disguise {i} was not blocked: {answer}\n{}",
            stderr(&out)
        );
    }
    let seen = up.requests();
    assert!(
        seen.iter().all(|r| r.method == "POST" && r.target == "/b"),
        "a disguised value reached the host: {seen:?}"
    );
    for r in &seen {
        let body = String::from_utf8_lossy(&r.body);
        assert!(!decode_text(&body).contains(&value), "{body}");
        assert!(!body.contains(&json), "{body}");
    }
}

#[test]
fn secret_rules_match_the_path_the_upstream_will_see() {
    if !egress_available() {
        return;
    }
    let ca = TestCa::new();
    let up = RawUpstream::start(&ca, &[HOST], |_| {
        vec![b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: close\r\n\r\nok\n".to_vec()]
    });
    let port = up.port;
    // Paths that seem to match `/repos/acme/*` but lead elsewhere once a
    // server normalises them, and paths that match only once normalised.
    let refused = [
        "/repos/acme/../other/x",
        "/repos/acme/%2e%2e/other/x",
        "/repos/acme/%2E%2E/other/x",
        "/repos/acme/.%2e/other/x",
        "/repos/acme/..%2fother/x",
        "/repos/acme%2f..%2fother/x",
        "/repos/acme/..;/other/x",
        "/repos/acme/..\\\\other/x",
        "/repos/acme/%5c..%5cother/x",
        "/repos/acme/%00/../../other",
    ];
    let allowed = [
        ("/repos/%61cme/w1", "/repos/acme/w1"),
        ("/repos//acme/w2", "/repos/acme/w2"),
        ("/repos/acme/./w3", "/repos/acme/w3"),
        ("/repos/other/../acme/w4?x=1", "/repos/acme/w4?x=1"),
        ("/repos/ac%6De/w5", "/repos/acme/w5"),
    ];
    let requests: Vec<String> = refused
        .iter()
        .copied()
        .chain(allowed.iter().map(|(t, _)| *t))
        .map(|t| {
            format!("\"GET {t} HTTP/1.1\\r\\nHost: {HOST}:{port}\\r\\nAuthorization: Bearer TOKEN\\r\\nConnection: close\\r\\n\\r\\n\"")
        })
        .collect();
    let out = run_secret(
        &token(),
        port,
        &[
            "--upstream-ca",
            &ca.pem_path(),
            "--secret-rule",
            &format!("GET {HOST}/repos/acme/*"),
        ],
        &raw_client(port, &format!("[{}]", requests.join(", "))),
    );
    let s = ok(&out);
    for (i, t) in refused.iter().enumerate() {
        let answer = section(&s, i);
        assert!(
            answer.starts_with("HTTP/1.1 403") || answer.starts_with("HTTP/1.1 400"),
            "{t}: {answer}"
        );
    }
    for (i, (t, _)) in allowed.iter().enumerate() {
        let answer = section(&s, refused.len() + i);
        assert!(answer.starts_with("HTTP/1.1 200"), "{t}: {answer}");
    }
    let mut seen: Vec<String> = up.requests().into_iter().map(|r| r.target).collect();
    seen.sort();
    let mut want: Vec<String> = allowed.iter().map(|(_, w)| w.to_string()).collect();
    want.sort();
    assert_eq!(seen, want, "the upstream saw other paths than were matched");
}

#[test]
fn ambiguous_authorities_are_refused_and_the_matched_one_is_forwarded() {
    if !egress_available() {
        return;
    }
    let ca = TestCa::new();
    let up = RawUpstream::start(&ca, &[HOST], |_| {
        vec![b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: close\r\n\r\nok\n".to_vec()]
    });
    let port = up.port;
    let req = |line: &str, hosts: &[String]| {
        let hosts: String = hosts.iter().map(|h| format!("Host: {h}\\r\\n")).collect();
        format!("\"{line} HTTP/1.1\\r\\n{hosts}Authorization: Bearer TOKEN\\r\\nConnection: close\\r\\n\\r\\n\"")
    };
    let here = format!("{HOST}:{port}");
    let refused = [
        // An absolute-form target naming this host, a Host naming another.
        req(&format!("GET https://{here}/a"), &["tenant.example".into()]),
        // An absolute-form target naming another host.
        req("GET https://tenant.example/b", std::slice::from_ref(&here)),
        // Userinfo, in the target and in Host.
        req(
            &format!("GET https://user@{here}/c"),
            std::slice::from_ref(&here),
        ),
        req("GET /d", &[format!("user@{here}")]),
        req("GET /e", &[format!("{here}@tenant.example")]),
        // Another port than the connection's.
        req("GET /f", &[format!("{HOST}:1")]),
        // Two Host headers.
        req("GET /g", &[here.clone(), "tenant.example".into()]),
        // No host at all, or a malformed one.
        req("GET /h", &[format!("{HOST}:{port}, tenant.example")]),
        req("GET /i", &[format!("{HOST}%2etenant.example:{port}")]),
    ];
    let fine = [
        req("GET /ok1", std::slice::from_ref(&here)),
        req("GET /ok2", &[format!("API.Secret.Test.:{port}")]),
        req(
            &format!("GET https://{here}/ok3"),
            std::slice::from_ref(&here),
        ),
    ];
    let all: Vec<String> = refused.iter().chain(fine.iter()).cloned().collect();
    let out = run_secret(
        &token(),
        port,
        &["--upstream-ca", &ca.pem_path()],
        &raw_client(port, &format!("[{}]", all.join(", "))),
    );
    let s = ok(&out);
    for i in 0..refused.len() {
        let answer = section(&s, i);
        assert!(
            answer.starts_with("HTTP/1.1 4"),
            "ambiguous request {i} was not refused: {answer}"
        );
    }
    for i in 0..fine.len() {
        let answer = section(&s, refused.len() + i);
        assert!(answer.starts_with("HTTP/1.1 200"), "{i}: {answer}");
    }
    let seen = up.requests();
    let targets: Vec<&str> = seen.iter().map(|r| r.target.as_str()).collect();
    assert_eq!(targets, ["/ok1", "/ok2", "/ok3"], "{seen:?}");
    for r in &seen {
        assert_eq!(r.header("host"), Some(here.as_str()), "{r:?}");
        assert_eq!(
            r.headers
                .iter()
                .filter(|(k, _)| k.eq_ignore_ascii_case("host"))
                .count(),
            1,
            "{r:?}"
        );
    }
}

mod decoded;
mod leaving;
mod nested;
mod readable;
mod records;
mod sniffed;
mod wrapped;
