//! Bytes behind a WebSocket upgrade, before its `101`: a program in the
//! sandbox sends an allowed upgrade request and, behind it (in the same
//! write, or in a later one before the server has answered), a second
//! HTTP request for a path no rule allows. A raw WebSocket server over TLS
//! on loopback records every byte it gets after the upgrade's head; it
//! answers the upgrade a second late, so that the program's bytes are
//! there before the `101` is. None of them may reach it: they were never
//! decided as a request, and no WebSocket client sends frames before it has
//! read the `101`. A client that waits for the `101` is relayed as before.

use crate::common::upstream::TestCa;
use crate::common::*;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the server got on one connection: the upgrade's request line and
/// every byte after its head.
#[derive(Debug, Clone)]
struct Seen {
    line: String,
    after: Vec<u8>,
}

/// A WebSocket server over TLS for `chat.test` on 127.0.0.1 that answers
/// each upgrade with `101` a second after its head, then records whatever
/// arrives for three seconds.
struct RawWs {
    port: u16,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl RawWs {
    fn start(ca: &TestCa) -> RawWs {
        let config = Arc::new(ca.server_config(&["chat.test"], &[b"http/1.1"]));
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = seen.clone();
        std::thread::spawn(move || {
            for tcp in listener.incoming() {
                let Ok(tcp) = tcp else { continue };
                let (config, s) = (config.clone(), s.clone());
                std::thread::spawn(move || {
                    let Ok(conn) = rustls::ServerConnection::new(config) else {
                        return;
                    };
                    let mut tls = rustls::StreamOwned::new(conn, tcp);
                    if let Some(seen) = serve_one(&mut tls) {
                        s.lock().unwrap().push(seen);
                    }
                });
            }
        });
        RawWs { port, seen }
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    /// What arrived after the head of the upgrade to `path`.
    fn after(&self, path: &str) -> Option<String> {
        self.seen()
            .iter()
            .find(|s| s.line.contains(path))
            .map(|s| String::from_utf8_lossy(&s.after).into_owned())
    }
}

fn serve_one(
    tls: &mut rustls::StreamOwned<rustls::ServerConnection, std::net::TcpStream>,
) -> Option<Seen> {
    tls.sock
        .set_read_timeout(Some(Duration::from_secs(3)))
        .ok()?;
    let mut buf = Vec::new();
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let mut chunk = [0u8; 4096];
        match tls.read(&mut chunk) {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    };
    let line = String::from_utf8_lossy(&buf[..head_end])
        .lines()
        .next()
        .unwrap_or_default()
        .to_string();
    let mut after = buf[head_end..].to_vec();
    // Late, so that what the client sends behind its head is here first.
    std::thread::sleep(Duration::from_secs(1));
    let _ = tls.write_all(
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
          Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n",
    );
    let _ = tls.flush();
    let mut chunk = [0u8; 4096];
    while let Ok(n) = tls.read(&mut chunk) {
        if n == 0 {
            break;
        }
        after.extend_from_slice(&chunk[..n]);
    }
    Some(Seen { line, after })
}

/// The program inside: `smuggle.py PORT PATH MODE` sends the upgrade to
/// PATH and, with MODE `same`, a second request in the same write; with
/// `later`, the second request a moment after the head (before the
/// server's `101`); with `honest`, only after it has read the `101`, a
/// frame's bytes. It prints the status line and whether the connection
/// was closed afterwards.
const CLIENT: &str = r#"
import os, socket, ssl, sys, time
port, path, mode = int(sys.argv[1]), sys.argv[2], sys.argv[3]
ctx = ssl.create_default_context(cafile=os.environ.get("SSL_CERT_FILE"))
ctx.set_alpn_protocols(["http/1.1"])
s = ctx.wrap_socket(socket.create_connection(("chat.test", port), timeout=10), server_hostname="chat.test")
head = (f"GET {path} HTTP/1.1\r\nHost: chat.test:{port}\r\nUpgrade: websocket\r\n"
        f"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
        f"Sec-WebSocket-Version: 13\r\n\r\n").encode()
smuggled = f"GET /admin/keys HTTP/1.1\r\nHost: chat.test:{port}\r\n\r\n".encode()
if mode == "same":
    s.sendall(head + smuggled)
elif mode == "later":
    s.sendall(head)
    time.sleep(0.3)
    s.sendall(smuggled)
else:
    s.sendall(head)
got = b""
while b"\r\n\r\n" not in got:
    b = s.recv(1)
    if not b:
        break
    got += b
print(mode, "status", got.split(b"\r\n")[0].decode(), flush=True)
if mode == "honest":
    s.sendall(b"honest-frame")
s.settimeout(4)
try:
    rest = s.recv(100)
    print(mode, "closed" if not rest else "more", flush=True)
except (ConnectionError, ssl.SSLError):
    print(mode, "closed", flush=True)
except socket.timeout:
    print(mode, "open", flush=True)
"#;

#[test]
fn bytes_sent_behind_an_allowed_websocket_upgrade_before_its_101_never_reach_the_server() {
    if !egress_available() {
        return;
    }
    let python = Command::new("python3")
        .args(["-c", "import ssl"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !python {
        skip("python3 with ssl is needed for the WebSocket client inside the sandbox");
        return;
    }
    let ca = TestCa::new();
    let up = RawWs::start(&ca);
    let port = up.port.to_string();
    let mut script = format!("cat > /tmp/smuggle.py <<'EOF'\n{CLIENT}\nEOF\n");
    for (path, mode) in [
        ("/live/same", "same"),
        ("/live/later", "later"),
        ("/live/honest", "honest"),
    ] {
        script.push_str(&format!("python3 /tmp/smuggle.py {port} {path} {mode}\n"));
    }
    let out = Command::new(warden_bin())
        .args(["run", "--no-tty"])
        .args([
            "--allow-domain",
            &format!("chat.test:{port}"),
            "--add-host",
            "chat.test=127.0.0.1",
            "--upstream-ca",
            &ca.pem_path(),
            "--allow-request",
            &format!("GET chat.test:{port}/live/**"),
        ])
        .args(["--", "sh", "-c", &script])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let s = stdout(&out);
    assert!(out.status.success(), "{s}\n{}", stderr(&out));
    // The server gives up reading three seconds after its 101.
    std::thread::sleep(Duration::from_millis(500));
    let seen = up.seen();
    for path in ["/live/same", "/live/later"] {
        let after = up.after(path);
        assert!(
            after.is_some(),
            "the upgrade itself was allowed: {seen:?}\n{s}"
        );
        assert_eq!(
            after.as_deref(),
            Some(""),
            "nothing the program sent behind its upgrade before the 101 reached the server: {seen:?}\n{s}"
        );
        assert!(s.contains(&format!("{} closed", &path[6..])), "{s}");
    }
    assert!(!seen.iter().any(|x| x.line.contains("admin")), "{seen:?}");
    // A client that waits for the 101 is relayed as ever.
    assert_eq!(
        up.after("/live/honest").as_deref(),
        Some("honest-frame"),
        "{seen:?}\n{s}"
    );
    assert!(s.contains("honest status HTTP/1.1 101"), "{s}");
}
