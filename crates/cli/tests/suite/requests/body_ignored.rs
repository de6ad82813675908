//! A server that answers without reading a body it did not expect ("CL.0":
//! a GET's body, or any body of a request it answers early) reads that
//! body as the next request on a kept-alive connection. On a terminated
//! connection that would be a request no rule decided and no record
//! holds. Through the real binary, against such a server: a GET with a
//! body is refused before anything of it goes upstream, any other request
//! with a body is the last on its upstream connection, and what hid in a
//! body never arrives.

use super::{forge_for_raw_client, printed};
use crate::common::upstream::{tls_server, TestCa};
use crate::common::*;
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// An HTTPS/1.1 server for `forge.test` on 127.0.0.1 that keeps its
/// connections alive, never reads the body of a GET or of a request to
/// `/early` (answered at once, as a refusal or a redirect often is), and
/// honours `Connection: close` (as RFC 9112 requires); it records every
/// request line it reads. Its port, what it saw, and the runtime to keep.
fn body_ignoring_server(ca: &TestCa) -> (u16, Arc<Mutex<Vec<String>>>, tokio::runtime::Runtime) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    let (port, runtime) = tls_server(
        ca,
        &["forge.test"],
        &[b"http/1.1"],
        (std::net::Ipv4Addr::LOCALHOST, 0),
        move |mut tls| {
            let s = s.clone();
            async move {
                let mut buf: Vec<u8> = Vec::new();
                loop {
                    let end = loop {
                        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                            break i + 4;
                        }
                        let mut more = [0u8; 4096];
                        match tls.read(&mut more).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&more[..n]),
                        }
                    };
                    let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
                    let line = String::from_utf8_lossy(&buf[..end])
                        .lines()
                        .next()
                        .unwrap_or("")
                        .to_string();
                    buf.drain(..end);
                    s.lock().unwrap().push(line.clone());
                    if !line.starts_with("GET ") && !line.contains(" /early ") {
                        let length = head
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length:"))
                            .and_then(|v| v.trim().parse::<usize>().ok())
                            .unwrap_or(0);
                        while buf.len() < length {
                            let mut more = [0u8; 4096];
                            match tls.read(&mut more).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => buf.extend_from_slice(&more[..n]),
                            }
                        }
                        buf.drain(..length);
                    }
                    let close = head.contains("\r\nconnection: close");
                    let answer = if close {
                        "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: close\r\n\r\nok\n"
                    } else {
                        "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n"
                    };
                    if tls.write_all(answer.as_bytes()).await.is_err() || close {
                        let _ = tls.shutdown().await;
                        return;
                    }
                }
            }
        },
    )
    .unwrap();
    (port, seen, runtime)
}

/// The program inside: `raw.py PORT METHOD PATH`, a request whose body is
/// a DELETE, then a GET on the same connection (or a new one once the
/// first is closed); prints the statuses it got and the first answer's
/// reason code.
const HIDDEN: &str = r#"
import os, re, socket, ssl, sys
port, method, path = int(sys.argv[1]), sys.argv[2], sys.argv[3]
# `upgrade` as a fourth argument: the request asks for a WebSocket too.
extra = "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n" if sys.argv[4:] == ["upgrade"] else ""
H = f"Host: forge.test:{port}\r\n"
hidden = f"DELETE /repos/acme/w HTTP/1.1\r\n{H}\r\n"
ctx = ssl.create_default_context(cafile=os.environ.get("SSL_CERT_FILE"))
ctx.set_alpn_protocols(["http/1.1"])
def connect():
    return ctx.wrap_socket(socket.create_connection(("forge.test", port), timeout=10), server_hostname="forge.test")
def answer(s):
    got = b""
    while b"\r\n\r\n" not in got:
        b = s.recv(65536)
        if not b:
            return None
        got += b
    end = got.index(b"\r\n\r\n") + 4
    length = re.search(rb"(?i)\r\ncontent-length: *(\d+)", got[:end])
    while len(got) < end + (int(length.group(1)) if length else 0):
        b = s.recv(65536)
        if not b:
            break
        got += b
    reason = re.search(rb"(?i)\r\nx-warden-reason: *([a-z_]+)", got)
    code = re.match(rb"HTTP/1\.1 (\d{3}) ", got).group(1).decode()
    return code + (" " + reason.group(1).decode() if reason else "")
s = connect()
s.sendall(f"{method} {path} HTTP/1.1\r\n{H}{extra}Content-Length: {len(hidden)}\r\n\r\n{hidden}".encode())
print("first:", answer(s), flush=True)
try:
    s.sendall(f"GET /public/b HTTP/1.1\r\n{H}\r\n".encode())
    second = answer(s)
except (ConnectionError, ssl.SSLError, socket.timeout):
    second = None
same = second is not None
if second is None:
    s = connect()
    s.sendall(f"GET /public/b HTTP/1.1\r\n{H}\r\n".encode())
    second = answer(s)
print("second:", second, "on the same connection" if same else "on a new connection", flush=True)
"#;

/// `raw.py` run in a sandbox whose rules allow GET under `/public/` and
/// POST to `/early`, against the body-ignoring server; what it printed
/// and the request lines the server read.
fn hidden_in(method: &str, path: &str, upgrade: bool) -> Option<(String, Vec<String>)> {
    let forge = forge_for_raw_client()?;
    let (port, seen, _runtime) = body_ignoring_server(&forge.ca);
    let port = port.to_string();
    let ask = if upgrade { "upgrade" } else { "" };
    let mut args = vec!["run".to_string(), "--no-tty".into()];
    args.extend(crate::common::forge::reach(&forge.ca, &port));
    args.extend([
        "--allow-request".into(),
        format!("GET forge.test:{port}/public/**"),
        "--allow-request".into(),
        format!("POST forge.test:{port}/early"),
        "--".into(),
        "sh".into(),
        "-c".into(),
        format!("cat > /tmp/raw.py <<'EOF'\n{HIDDEN}\nEOF\npython3 /tmp/raw.py {port} {method} {path} {ask}\n"),
    ]);
    let out = std::process::Command::new(warden_bin())
        .args(&args)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let printed = printed(&out);
    let seen = seen.lock().unwrap().clone();
    Some((printed, seen))
}

#[test]
fn a_get_with_a_body_is_refused_and_nothing_of_it_reaches_an_http1_server() {
    let Some((s, seen)) = hidden_in("GET", "/public/a", false) else {
        return;
    };
    assert!(s.contains("first: 400 body_not_expected"), "{s}");
    assert!(s.contains("second: 200"), "{s}");
    assert_eq!(
        seen,
        ["GET /public/b HTTP/1.1"],
        "neither the GET with a body nor what hid in it arrived: {seen:?}"
    );
}

#[test]
fn a_request_hidden_in_a_body_the_server_answers_without_reading_never_reaches_it() {
    let Some((s, seen)) = hidden_in("POST", "/early", false) else {
        return;
    };
    assert!(s.contains("first: 200"), "{s}");
    assert!(s.contains("second: 200"), "{s}");
    assert_eq!(
        seen,
        ["POST /early HTTP/1.1", "GET /public/b HTTP/1.1"],
        "only the two decided requests arrived, nothing hidden in a body: {seen:?}"
    );
}

#[test]
fn the_request_after_one_with_a_body_comes_on_the_same_sandbox_connection_and_a_new_upstream_one() {
    // The body's request is the last on its upstream connection; the
    // sandbox's connection goes on, and its next request is sent on a new
    // upstream connection (the server read exactly two requests).
    let Some((s, seen)) = hidden_in("POST", "/early", false) else {
        return;
    };
    assert!(s.contains("second: 200 on the same connection"), "{s}");
    assert_eq!(seen, ["POST /early HTTP/1.1", "GET /public/b HTTP/1.1"]);
}

/// An HTTP/2 client sends several requests with bodies at once on one
/// connection; towards an HTTP/1.1 server each is the last on its upstream
/// connection, and each must still be answered by the server, not 502
/// because the one before it ended that connection.
#[test]
fn requests_with_bodies_on_one_http2_connection_each_reach_an_http1_server() {
    let Some(forge) = forge_for_raw_client() else {
        return;
    };
    let (port, seen, _runtime) = body_ignoring_server(&forge.ca);
    let port = port.to_string();
    let mut curl =
        "curl -sS --http2 -Z -w '%{http_code} %{http_version}\\n' -o /dev/null".to_string();
    for i in 0..4 {
        if i > 0 {
            curl.push_str(" --next --http2 -w '%{http_code} %{http_version}\\n' -o /dev/null");
        }
        curl.push_str(&format!(
            " --cacert \"$SSL_CERT_FILE\" -d body{i} https://forge.test:{port}/early"
        ));
    }
    let mut args = vec!["run".to_string(), "--no-tty".into()];
    args.extend(crate::common::forge::reach(&forge.ca, &port));
    args.extend([
        "--allow-request".into(),
        format!("POST forge.test:{port}/early"),
        "--".into(),
        "sh".into(),
        "-c".into(),
        curl,
    ]);
    let out = std::process::Command::new(warden_bin())
        .args(&args)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let s = printed(&out);
    assert_eq!(
        s.lines().filter(|l| l.trim() == "200 2").count(),
        4,
        "each request over HTTP/2 answered 200: {s}"
    );
    assert_eq!(seen.lock().unwrap().len(), 4, "{s}");
}

#[test]
fn a_websocket_upgrade_that_is_not_a_bodiless_get_is_refused_and_its_body_never_arrives() {
    // The upgrade goes on a connection of its own, without `Connection:
    // close`: a POST asking for a WebSocket carried its body there.
    let Some((s, seen)) = hidden_in("POST", "/early", true) else {
        return;
    };
    assert!(s.contains("first: 400 malformed_upgrade"), "{s}");
    assert!(s.contains("second: 200"), "{s}");
    assert_eq!(
        seen,
        ["GET /public/b HTTP/1.1"],
        "neither the upgrade nor what hid in its body arrived: {seen:?}"
    );
}
