//! WebSockets through request rules: a real WebSocket server (tungstenite
//! over TLS from a test authority) that records every upgrade it accepts
//! and every message it gets, and a client inside the sandbox (Python's
//! standard library, speaking the protocol by hand) reaching it through
//! warden's terminating proxy. An allowed upgrade is relayed both ways
//! after the 101, and ends with the proxy's idle timeout; a denied one
//! never reaches the server.

use super::{printed, python_ssl};
use crate::common::upstream::{tls_server, TestCa};
use crate::common::*;
use futures_util::{SinkExt, StreamExt};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use tokio_tungstenite::tungstenite::Message;

/// A WebSocket server over TLS for `name` on 127.0.0.1: greets each
/// client with `hello`, answers each text message `echo:` and the
/// message, and records `upgrade PATH`, each message got, and `closed`.
struct WsServer {
    port: u16,
    seen: Arc<Mutex<Vec<String>>>,
    _runtime: tokio::runtime::Runtime,
}

impl WsServer {
    fn start(ca: &TestCa, name: &str) -> WsServer {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = seen.clone();
        let at = (std::net::Ipv4Addr::LOCALHOST, 0);
        let (port, runtime) = tls_server(ca, &[name], &[b"http/1.1"], at, move |tls| {
            let s = s.clone();
            async move {
                let path = Arc::new(Mutex::new(String::new()));
                let p = path.clone();
                // The error type is tungstenite's callback's, not ours.
                #[allow(clippy::result_large_err)]
                let callback =
                    move |req: &tokio_tungstenite::tungstenite::handshake::server::Request,
                          resp| {
                        *p.lock().unwrap() = req.uri().to_string();
                        Ok(resp)
                    };
                let Ok(mut ws) = tokio_tungstenite::accept_hdr_async(tls, callback).await else {
                    s.lock().unwrap().push("refused handshake".into());
                    return;
                };
                s.lock()
                    .unwrap()
                    .push(format!("upgrade {}", path.lock().unwrap()));
                let _ = ws.send(Message::text("hello")).await;
                while let Some(Ok(m)) = ws.next().await {
                    if let Message::Text(t) = m {
                        s.lock().unwrap().push(format!("got {t}"));
                        let _ = ws.send(Message::text(format!("echo:{t}"))).await;
                    }
                }
                s.lock().unwrap().push("closed".into());
            }
        })
        .unwrap();
        WsServer {
            port,
            seen,
            _runtime: runtime,
        }
    }

    fn seen(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }
}

/// A WebSocket client in Python's standard library: `ws.py PORT PATH
/// MESSAGE [WAIT]` opens wss://chat.test:PORT/PATH, prints the status
/// line, then (when switched) the server's first message, sends MESSAGE
/// and prints the answer; with WAIT it then waits that many seconds
/// silent and says whether the connection was closed meanwhile.
const CLIENT: &str = r#"
import os, socket, ssl, struct, sys, base64, time
port, path, message = int(sys.argv[1]), sys.argv[2], sys.argv[3]
wait = float(sys.argv[4]) if len(sys.argv) > 4 else 0
ctx = ssl.create_default_context(cafile=os.environ.get("SSL_CERT_FILE"))
ctx.set_alpn_protocols(["http/1.1"])
s = ctx.wrap_socket(socket.create_connection(("chat.test", port), timeout=20), server_hostname="chat.test")
key = base64.b64encode(os.urandom(16)).decode()
s.sendall((f"GET {path} HTTP/1.1\r\nHost: chat.test:{port}\r\nUpgrade: websocket\r\n"
           f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
head = b""
while b"\r\n\r\n" not in head:
    b = s.recv(1)
    if not b:
        break
    head += b
status = head.split(b"\r\n")[0].decode()
print("status", status, flush=True)
for line in head.decode(errors="replace").split("\r\n")[1:]:
    if line.lower().startswith("x-warden"):
        print(line.lower(), flush=True)
if " 101" not in status:
    sys.exit(0)
def read_exact(n):
    out = b""
    while len(out) < n:
        b = s.recv(n - len(out))
        if not b:
            raise EOFError
        out += b
    return out
def frame():
    a, b = read_exact(2)
    n = b & 0x7f
    if n == 126:
        n = struct.unpack(">H", read_exact(2))[0]
    elif n == 127:
        n = struct.unpack(">Q", read_exact(8))[0]
    return a & 0x0f, read_exact(n)
def send(text):
    data = text.encode()
    mask = os.urandom(4)
    s.sendall(bytes([0x81, 0x80 | len(data)]) + mask + bytes(c ^ mask[i % 4] for i, c in enumerate(data)))
print("first", frame()[1].decode(), flush=True)
send(message)
print("answer", frame()[1].decode(), flush=True)
if wait:
    s.settimeout(wait + 10)
    start = time.time()
    try:
        frame()
        print("frame after silence", flush=True)
    except (EOFError, ConnectionError, ssl.SSLError):
        print("closed after %d s" % (time.time() - start), flush=True)
    except socket.timeout:
        print("still open", flush=True)
"#;

/// `warden run` with the chat server's name pinned to the host's
/// loopback, its authority trusted upstream, `args`, and the client run
/// once per `(path, message, wait)`.
fn run(
    ca: &TestCa,
    up: &WsServer,
    args: &[&str],
    calls: &[(&str, &str, u32)],
) -> std::process::Output {
    let port = up.port.to_string();
    let args: Vec<String> = args.iter().map(|a| a.replace("PORT", &port)).collect();
    let mut script = format!("cat > /tmp/ws.py <<'EOF'\n{CLIENT}\nEOF\n");
    for (path, message, wait) in calls {
        script.push_str(&format!(
            "python3 /tmp/ws.py {port} '{path}' '{message}' {wait}\n"
        ));
    }
    Command::new(warden_bin())
        .args(["run", "--no-tty"])
        .args([
            "--allow-domain",
            &format!("chat.test:{port}"),
            "--add-host",
            "chat.test=127.0.0.1",
            "--upstream-ca",
            &ca.pem_path(),
        ])
        .args(&args)
        .args(["--", "sh", "-c", &script])
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

#[test]
fn an_allowed_websocket_is_relayed_both_ways_after_its_upgrade_and_a_denied_one_never_reaches_the_server(
) {
    if !egress_available() || !python_ssl("the WebSocket client inside the sandbox") {
        return;
    }
    let ca = TestCa::new();
    let up = WsServer::start(&ca, "chat.test");
    let out = run(
        &ca,
        &up,
        &[
            "--allow-request",
            "GET chat.test:PORT/live/**",
            "--deny-request",
            "* chat.test:PORT/live/admin/**",
        ],
        &[
            ("/live/room1", "ping-1", 0),
            ("/live/admin/console", "ping-2", 0),
            ("/other", "ping-3", 0),
        ],
    );
    let s = printed(&out);
    assert!(s.contains("status HTTP/1.1 101"), "{s}");
    assert!(s.contains("first hello"), "the server's own message: {s}");
    assert!(s.contains("answer echo:ping-1"), "both ways: {s}");
    assert_eq!(s.matches(" 403").count(), 2, "{s}");
    assert!(s.contains("x-warden-reason: request_denied"), "{s}");
    assert!(s.contains("x-warden-reason: no_request_rule"), "{s}");
    // Give the server a moment to see the first client's close.
    std::thread::sleep(std::time::Duration::from_millis(300));
    let seen = up.seen();
    assert!(
        seen.contains(&"upgrade /live/room1".to_string()),
        "{seen:?}"
    );
    assert!(seen.contains(&"got ping-1".to_string()), "{seen:?}");
    assert!(
        !seen.iter().any(|l| l.contains("admin")
            || l.contains("other")
            || l.contains("ping-2")
            || l.contains("ping-3")),
        "a denied upgrade never reached the server: {seen:?}"
    );
    assert_eq!(
        seen.iter().filter(|l| l.starts_with("upgrade")).count(),
        1,
        "{seen:?}"
    );
}

#[test]
fn a_silent_websocket_is_closed_by_the_proxys_idle_timeout() {
    if !egress_available() || !python_ssl("the WebSocket client inside the sandbox") {
        return;
    }
    let ca = TestCa::new();
    let up = WsServer::start(&ca, "chat.test");
    let out = run(
        &ca,
        &up,
        &[
            "--allow-request",
            "GET chat.test:PORT/live/**",
            "--egress-idle-timeout",
            "3s",
        ],
        &[("/live/quiet", "ping", 15)],
    );
    let s = printed(&out);
    assert!(s.contains("answer echo:ping"), "{s}");
    let closed = s
        .lines()
        .find_map(|l| l.strip_prefix("closed after "))
        .and_then(|l| l.trim_end_matches(" s").parse::<u32>().ok());
    assert!(
        closed.is_some_and(|secs| (2..10).contains(&secs)),
        "closed by the idle timeout, not kept open: {s}"
    );
}

#[test]
fn a_websocket_to_a_secrets_host_is_refused_at_its_upgrade() {
    if !egress_available() || !python_ssl("the WebSocket client inside the sandbox") {
        return;
    }
    let ca = TestCa::new();
    let up = WsServer::start(&ca, "chat.test");
    let out = Command::new(warden_bin())
        .args(["run", "--no-tty"])
        .args([
            "--allow-domain",
            &format!("chat.test:{}", up.port),
            "--add-host",
            "chat.test=127.0.0.1",
            "--upstream-ca",
            &ca.pem_path(),
            "--secret",
            &format!("TOKEN@chat.test:{}", up.port),
        ])
        .env("TOKEN", "real-value-1234")
        .args([
            "--",
            "sh",
            "-c",
            &format!(
                "cat > /tmp/ws.py <<'EOF'\n{CLIENT}\nEOF\npython3 /tmp/ws.py {} /live/x ping 0",
                up.port
            ),
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let s = stdout(&out);
    assert!(s.contains(" 403"), "{s}\n{}", stderr(&out));
    assert!(s.contains("x-warden-reason: upgrade_with_secrets"), "{s}");
    assert!(
        !up.seen().iter().any(|l| l.starts_with("upgrade")),
        "{:?}",
        up.seen()
    );
}
