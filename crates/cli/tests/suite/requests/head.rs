//! A response that has no body (to HEAD, a 204, a 304) reaches the
//! sandbox without one, whatever the upstream sends: an HTTP/2 server may
//! send DATA frames where none belong, and bytes relayed after such a
//! response's head would be read by a kept-alive HTTP/1.1 client as the
//! start of its next response (response splitting), or break an HTTP/2
//! client's stream. The upstream here speaks HTTP/2 only and answers every
//! request with a body; the sandbox's clients speak HTTP/1.1 (a raw client
//! sending HEAD, then GET, on one connection) and HTTP/2 (curl).

use super::{printed, python_ssl};
use crate::common::forge::reach;
use crate::common::upstream::{https_server, TestCa};
use crate::common::*;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

/// An HTTPS server for `forge.test` speaking HTTP/2 only, that records
/// `METHOD path` of each request and answers each with a body: `/nothing`
/// with a 204 whose body is `body-of-204`, `/same` with a 304 whose body is
/// `body-of-304`, any other path with a 200 whose body is
/// `body-of-METHOD`.
struct H2Only {
    port: u16,
    seen: Arc<Mutex<Vec<String>>>,
    _runtime: tokio::runtime::Runtime,
}

impl H2Only {
    fn start(ca: &TestCa) -> H2Only {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = seen.clone();
        let (port, runtime) = https_server(ca, &["forge.test"], &[b"h2"], move || {
            let s = s.clone();
            hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                let s = s.clone();
                async move {
                    let method = req.method().to_string();
                    let path = req.uri().path().to_string();
                    s.lock().unwrap().push(format!("{method} {path}"));
                    let _ = req.into_body().collect().await;
                    let (status, body) = match path.as_str() {
                        "/nothing" => (204, "body-of-204\n".to_string()),
                        "/same" => (304, "body-of-304\n".to_string()),
                        _ => (200, format!("body-of-{method}\n")),
                    };
                    let mut r = hyper::Response::new(Full::new(Bytes::from(body)));
                    *r.status_mut() = hyper::StatusCode::from_u16(status).unwrap();
                    Ok::<_, std::convert::Infallible>(r)
                }
            })
        });
        H2Only {
            port,
            seen,
            _runtime: runtime,
        }
    }

    fn requests(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }
}

/// `warden run` of `script` (`PORT` the server's port) with `GET` allowed
/// on the whole name: HEAD is decided as GET.
fn run(ca: &TestCa, port: u16, script: &str) -> std::process::Output {
    let port = port.to_string();
    Command::new(warden_bin())
        .args(["run", "--no-tty"])
        .args(reach(ca, &port))
        .args(["--allow-request", &format!("GET forge.test:{port}/**")])
        .args(["--", "sh", "-c", &script.replace("PORT", &port)])
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// The program inside: `raw.py PORT PATH`, one TLS connection (HTTP/1.1
/// by ALPN) on which `HEAD PATH` (or `GET PATH` for a 204 or a 304) is
/// sent, its answer read until the client would send its next request,
/// then `GET /after` with `Connection: close`; prints the first answer's
/// status and, escaped, everything the connection carried back after the
/// first answer's head.
const RAW: &str = r#"
import os, socket, ssl, sys
port, first = int(sys.argv[1]), sys.argv[2]
method, path = first.split(" ", 1)
H = f"Host: forge.test:{port}\r\n"
ctx = ssl.create_default_context(cafile=os.environ.get("SSL_CERT_FILE"))
ctx.set_alpn_protocols(["http/1.1"])
s = ctx.wrap_socket(socket.create_connection(("forge.test", port), timeout=10), server_hostname="forge.test")
s.sendall(f"{method} {path} HTTP/1.1\r\n{H}\r\n".encode())
got = b""
while b"\r\n\r\n" not in got:
    b = s.recv(65536)
    if not b:
        break
    got += b
# Whatever the relay sends behind the first head in the next moments is
# what a client would read as the start of its next answer.
s.settimeout(1)
try:
    while True:
        b = s.recv(65536)
        if not b:
            break
        got += b
except (socket.timeout, ConnectionError, ssl.SSLError):
    pass
s.settimeout(10)
s.sendall(f"GET /after HTTP/1.1\r\n{H}Connection: close\r\n\r\n".encode())
try:
    while True:
        b = s.recv(65536)
        if not b:
            break
        got += b
except (socket.timeout, ConnectionError, ssl.SSLError):
    pass
head, _, rest = got.partition(b"\r\n\r\n")
print(head.split(b" ")[1].decode() if b" " in head else "-", repr(rest), flush=True)
"#;

/// Over HTTP/1.1 from the sandbox: HEAD (allowed as GET), a 204 and a 304
/// each answered by the HTTP/2 upstream with a body: the client reads each
/// answer's head and nothing after it, then its GET's whole answer, on the
/// same kept-alive connection.
#[test]
fn a_body_an_http2_upstream_sends_to_head_or_a_bodiless_status_never_reaches_an_http1_client() {
    if !egress_available() {
        return;
    }
    if !python_ssl("the raw client inside the sandbox") {
        return;
    }
    let ca = TestCa::new();
    let up = H2Only::start(&ca);
    let out = run(
        &ca,
        up.port,
        &format!(
            "cat > /tmp/raw.py <<'EOF'\n{RAW}\nEOF\n\
             for first in 'HEAD /head' 'GET /nothing' 'GET /same'; do\n\
             python3 /tmp/raw.py PORT \"$first\"\n\
             done\n"
        ),
    );
    let s = printed(&out);
    let lines: Vec<&str> = s.lines().collect();
    assert_eq!(lines.len(), 3, "{s}");
    for (line, first) in lines.iter().zip(["200", "204", "304"]) {
        // What follows the first answer's head is the next answer, whole.
        let (status, after) = line.split_once(' ').unwrap_or_default();
        assert_eq!(status, first, "{line}");
        assert!(
            after.starts_with("b'HTTP/1.1 200 OK\\r\\n"),
            "bytes of a body relayed after the {first}'s head: {line}"
        );
        assert!(after.ends_with("body-of-GET\\n'"), "{line}");
        assert_eq!(after.matches("HTTP/1.1").count(), 1, "{line}");
    }
    let seen = up.requests();
    assert!(
        seen.iter().any(|r| r == "HEAD /head"),
        "the HEAD arrived as HEAD: {seen:?}"
    );
}

/// Over HTTP/2 from the sandbox: HEAD, a 204 and a 304 answered by the
/// HTTP/2 upstream with a body end cleanly with none (curl reports a
/// stream that carried DATA where none belongs as an error), and a GET on
/// the same connection after them (`num_connects` 0: no new connection)
/// gets its own.
#[test]
fn a_body_an_http2_upstream_sends_to_head_or_a_bodiless_status_never_reaches_an_http2_client() {
    if !egress_available() {
        return;
    }
    let ca = TestCa::new();
    let up = H2Only::start(&ca);
    let out = run(
        &ca,
        up.port,
        r#"u=https://forge.test:PORT
w='%{http_code} %{size_download} %{num_connects}\n'
curl -sS --noproxy '*' --http2 -o /dev/null -w "$w" -I "$u/head" \
  --next --noproxy '*' --http2 -o /dev/null -w "$w" "$u/nothing" \
  --next --noproxy '*' --http2 -o /dev/null -w "$w" "$u/same" \
  --next --noproxy '*' --http2 -w "$w" "$u/after"
echo "rc=$?"
"#,
    );
    let s = printed(&out);
    assert_eq!(
        s.lines().collect::<Vec<_>>(),
        [
            "200 0 1",
            "204 0 0",
            "304 0 0",
            "body-of-GET",
            "200 12 0",
            "rc=0"
        ],
        "{s}\n{}",
        stderr(&out)
    );
}
