//! A secret's host that answers with compressed data and declares none of
//! it: gzip under `text/plain`, zlib, zstd, xz, bzip2 and zip under
//! `application/octet-stream`, gzip inside a declared gzip coding, each
//! the echo of what the sandbox sent it (as a store that hands back an
//! upload compressed would). Each goes through a real sandbox to a real
//! raw server; whatever the sandbox gets, decompressed by every one of
//! those formats, must not hold the value.

use super::*;

/// `data` through a compressor of the host's (`zstd -c`, `xz -c`, ...);
/// `None` when the host has no such program.
fn through(program: &str, args: &[&str], data: &[u8]) -> Option<Vec<u8>> {
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    child.stdin.take()?.write_all(data).ok()?;
    let out = child.wait_with_output().ok()?;
    out.status.success().then_some(out.stdout)
}

/// A zip archive of standard input, its one member deflated, and its
/// reading back (the `zip` program writes a stream it cannot read back).
const ZIP: &str = "import io, sys, zipfile\nb = io.BytesIO()\nwith zipfile.ZipFile(b, 'w', zipfile.ZIP_DEFLATED) as z:\n    z.writestr('f', sys.stdin.buffer.read())\nsys.stdout.buffer.write(b.getvalue())";
const UNZIP: &str = "import io, sys, zipfile\nz = zipfile.ZipFile(io.BytesIO(sys.stdin.buffer.read()))\nsys.stdout.buffer.write(z.read(z.namelist()[0]))";

/// The host's compressors, each as (route, compress, decompress).
const TOOLS: [(&str, &[&str], &[&str]); 4] = [
    ("zstd", &["zstd", "-q", "-c"], &["zstd", "-q", "-d", "-c"]),
    ("xz", &["xz", "-c"], &["xz", "-d", "-c"]),
    ("bzip2", &["bzip2", "-c"], &["bzip2", "-d", "-c"]),
    ("zip", &["python3", "-c", ZIP], &["python3", "-c", UNZIP]),
];

/// The echo, repeated: worth compressing (a short one a compressor
/// stores as it is, where the scrub reads it anyway).
fn echo_of(v: &str) -> Vec<u8> {
    format!("echo of the token: {v} (end)\n")
        .repeat(8)
        .into_bytes()
}

/// The store: each path answers with the token it was sent, compressed
/// as its name says, with no Content-Encoding (but `/gzip-in-gzip`'s outer
/// one). `/text` is text that merely starts like a zlib header would if
/// headers were read loosely (`80`, `(S`), and must pass as it is.
fn compressing_answer(req: &RawRequest) -> Vec<Vec<u8>> {
    let v = bearer(req);
    let body = echo_of(&v);
    let typed = |ctype: &str, extra: &str, data: Vec<u8>| {
        head_and(
            format!(
                "HTTP/1.1 200 OK\r\nContent-Type: {ctype}\r\n{extra}Content-Length: {}\r\nConnection: close\r\n\r\n",
                data.len()
            ),
            data,
        )
    };
    let route = req.target.trim_start_matches('/');
    match route {
        "gzip" => {
            // In 3-byte frames: no one frame holds a whole signature.
            let mut out = vec![b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n".to_vec()];
            out.extend(chunked(&gzip(&body), 3, ""));
            out
        }
        "zlib" => typed("application/octet-stream", "", zlib(&body)),
        "gzip-in-gzip" => typed(
            "application/octet-stream",
            "Content-Encoding: gzip\r\n",
            gzip(&gzip(&body)),
        ),
        "text" => typed(
            "text/plain",
            "",
            format!("80 items (Sorry: {v})\n").into_bytes(),
        ),
        _ => match TOOLS.iter().find(|(r, _, _)| *r == route) {
            Some((_, cmd, _)) => match through(cmd[0], &cmd[1..], &body) {
                Some(data) => typed("application/octet-stream", "", data),
                None => typed("text/plain", "", b"no compressor\n".to_vec()),
            },
            None => typed("text/plain", "", b"unknown route\n".to_vec()),
        },
    }
}

/// Whether `data`, read as each format (gzip, zlib, and the host's
/// decompressors), holds `value`.
fn holds_value(data: &[u8], value: &str) -> Option<&'static str> {
    use std::io::Read;
    let has = |d: &[u8]| String::from_utf8_lossy(d).contains(value);
    if has(data) {
        return Some("as it is");
    }
    let mut out = Vec::new();
    if flate2::read::MultiGzDecoder::new(data)
        .read_to_end(&mut out)
        .is_ok()
        && has(&out)
    {
        return Some("gzip");
    }
    out.clear();
    if flate2::read::ZlibDecoder::new(data)
        .read_to_end(&mut out)
        .is_ok()
        && has(&out)
    {
        return Some("zlib");
    }
    for (name, _, undo) in TOOLS {
        if through(undo[0], &undo[1..], data).is_some_and(|d| has(&d)) {
            return Some(name);
        }
    }
    None
}

/// A client inside the sandbox that GETs each path with the placeholder
/// as its bearer token and prints each raw answer as base64 after a
/// `=== N` line (the answers are bytes, not text).
fn byte_client(port: u16, paths: &[&str]) -> String {
    let list: Vec<String> = paths.iter().map(|p| format!("\"{p}\"")).collect();
    format!(
        r#"python3 - <<'PY'
import base64, os, socket, ssl
ctx = ssl.create_default_context()
for i, p in enumerate([{list}]):
    r = "GET %s HTTP/1.1\r\nHost: {HOST}:{port}\r\nAuthorization: Bearer %s\r\nConnection: close\r\n\r\n" % (p, os.environ["TOKEN"])
    s = ctx.wrap_socket(socket.create_connection(("{HOST}", {port})), server_hostname="{HOST}")
    s.sendall(r.encode())
    data = b""
    s.settimeout(20)
    try:
        while True:
            b = s.recv(65536)
            if not b:
                break
            data += b
    except Exception:
        pass
    print("=== %d" % i)
    print(base64.b64encode(data).decode())
PY
"#,
        list = list.join(", ")
    )
}

/// The head (as text) and the body (chunked framing undone) of a raw
/// HTTP/1.1 answer.
fn split_answer(raw: &[u8]) -> (String, Vec<u8>) {
    let at = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or(raw.len());
    let head = String::from_utf8_lossy(&raw[..at]).into_owned();
    let mut rest = raw.get(at + 4..).unwrap_or_default();
    if !head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        return (head, rest.to_vec());
    }
    let mut body = Vec::new();
    while let Some(eol) = rest.windows(2).position(|w| w == b"\r\n") {
        let size = String::from_utf8_lossy(&rest[..eol]);
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        let data = &rest[eol + 2..];
        if n == 0 || data.len() < n {
            break;
        }
        body.extend_from_slice(&data[..n]);
        rest = data.get(n + 2..).unwrap_or_default();
    }
    (head, body)
}

#[test]
fn a_value_echoed_in_compressed_data_nobody_declared_never_comes_back() {
    if !egress_available() {
        return;
    }
    let missing: Vec<&str> = ["python3", "zstd", "xz", "bzip2"]
        .into_iter()
        .filter(|p| {
            Command::new("sh")
                .args(["-c", &format!("command -v {p}")])
                .output()
                .map_or(true, |o| !o.status.success())
        })
        .collect();
    if !missing.is_empty() {
        skip(&format!(
            "the compressors the store answers with are needed: {missing:?} missing"
        ));
        return;
    }
    let ca = TestCa::new();
    let up = RawUpstream::start(&ca, &[HOST], compressing_answer);
    let value = format!("sk-live-{}", token());
    let decoded = ["/gzip", "/zlib", "/gzip-in-gzip"];
    let withheld: Vec<String> = TOOLS.iter().map(|(r, _, _)| format!("/{r}")).collect();
    let mut paths: Vec<&str> = decoded.to_vec();
    paths.extend(withheld.iter().map(String::as_str));
    paths.push("/text");
    let out = run_secret(
        &value,
        up.port,
        &["--upstream-ca", &ca.pem_path(), "--secret-in-body", "TOKEN"],
        &byte_client(up.port, &paths),
    );
    let s = ok(&out);
    let seen = up.requests();
    assert_eq!(seen.len(), paths.len(), "{seen:?}");
    assert!(seen.iter().all(|r| bearer(r) == value), "{seen:?}");
    // Every answer is judged, and every failure told at once.
    let mut failed: Vec<String> = Vec::new();
    for (i, path) in paths.iter().enumerate() {
        let raw = base64::engine::general_purpose::STANDARD
            .decode(section(&s, i).trim())
            .unwrap_or_else(|e| panic!("{path}: {e}: {s}"));
        let (head, body) = split_answer(&raw);
        let status = head.lines().next().unwrap_or_default();
        let text = String::from_utf8_lossy(&body);
        if let Some(how) = holds_value(&body, &value) {
            failed.push(format!("{path}: the value came back ({how}): {status}"));
        } else if decoded.contains(path) {
            // Decoded and scrubbed, as a declared coding is.
            if !(status.contains(" 200")
                && text.starts_with("echo of the token: warden-secret-")
                && text.ends_with("(end)\n"))
            {
                failed.push(format!(
                    "{path}: not decoded and scrubbed: {status} {text:?}"
                ));
            }
        } else if *path == "/text" {
            if !(status.contains(" 200") && text.starts_with("80 items (Sorry: warden-secret-")) {
                failed.push(format!(
                    "{path}: text not passed as it is: {status} {text:?}"
                ));
            }
        } else if !(status.contains(" 502") && text.contains(&path[1..])) {
            // Data the scrub cannot read: withheld, and said why.
            failed.push(format!("{path}: not withheld: {status} {text:?}"));
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
    assert_no_value("the run's errors", &stderr(&out), &value);
}
