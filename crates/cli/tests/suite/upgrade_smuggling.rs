//! Bytes behind a WebSocket upgrade, before its `101`: a program in the
//! sandbox sends an allowed upgrade request and, behind it (in the same
//! write, or in a later one before the server has answered), a second
//! HTTP request for a path no rule allows. A raw WebSocket server over TLS
//! on loopback records every byte it gets after the upgrade's head; it
//! answers the upgrade late (a second, or the milliseconds its path
//! names), so that the program's bytes can be there before the `101` is,
//! and greets with a frame of its own. None of the program's early bytes
//! may reach it, whatever the writes' boundaries and timing: they were
//! never decided as a request, and no WebSocket client sends anything but
//! masked frames, and those only once it has read the `101`. A client
//! that waits for the `101` and sends a frame is relayed as before, and
//! one that only listens gets the server's frame.

use crate::common::upstream::TestCa;
use crate::common::*;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::{Command, Output, Stdio};
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
/// each upgrade with `101` and a text frame `hello` late (the
/// milliseconds after `/wait` in its path, else a second), then records
/// whatever arrives for three seconds.
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
    fn after(&self, path: &str) -> Option<Vec<u8>> {
        self.seen()
            .into_iter()
            .find(|s| s.line.split(' ').nth(1) == Some(path))
            .map(|s| s.after)
    }
}

/// How long the server waits before its `101` for the upgrade whose
/// request line is `line`: the milliseconds after `/wait`, else a second.
fn answer_delay(line: &str) -> Duration {
    let ms = line
        .split_once("/wait")
        .and_then(|(_, rest)| {
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            digits.parse().ok()
        })
        .unwrap_or(1000);
    Duration::from_millis(ms)
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
    // Late, so that what the client sends behind its head is on its way
    // (or here) first.
    std::thread::sleep(answer_delay(&line));
    let _ = tls.write_all(
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
          Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n\x81\x05hello",
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
/// `later`, the second request 0.3 s after the head (before the server's
/// `101`); with `after-N` (N milliseconds, 0 for at once), the second
/// request in a write of its own N ms after the head's; with `honest`,
/// only after it has read the `101`, a masked text frame `honest-frame`;
/// with `listen`, nothing, reading the server's frame. It prints PATH
/// and the status line, what it read after it, and whether the
/// connection was closed afterwards.
const CLIENT: &str = r#"
import os, socket, ssl, sys, time
port, path, mode = int(sys.argv[1]), sys.argv[2], sys.argv[3]
ctx = ssl.create_default_context(cafile=os.environ.get("SSL_CERT_FILE"))
ctx.set_alpn_protocols(["http/1.1"])
s = ctx.wrap_socket(socket.create_connection(("chat.test", port), timeout=10), server_hostname="chat.test")
head = (f"GET {path} HTTP/1.1\r\nHost: chat.test:{port}\r\nUpgrade: websocket\r\n"
        f"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
        f"Sec-WebSocket-Version: 13\r\n\r\n").encode()
smuggled = f"DELETE /admin/SMUGGLED-{mode} HTTP/1.1\r\nHost: chat.test:{port}\r\n\r\n".encode()
if mode == "same":
    s.sendall(head + smuggled)
elif mode == "later":
    s.sendall(head)
    time.sleep(0.3)
    s.sendall(smuggled)
elif mode.startswith("after-"):
    s.sendall(head)
    delay = int(mode[len("after-"):]) / 1000
    if delay:
        time.sleep(delay)
    s.sendall(smuggled)
else:
    s.sendall(head)
got = b""
while b"\r\n\r\n" not in got:
    b = s.recv(1)
    if not b:
        break
    got += b
print(path, "status", got.split(b"\r\n")[0].decode(), flush=True)
if mode == "honest":
    data = b"honest-frame"
    mask = os.urandom(4)
    s.sendall(bytes([0x81, 0x80 | len(data)]) + mask + bytes(c ^ mask[i % 4] for i, c in enumerate(data)))
s.settimeout(4)
rest = b""
try:
    while True:
        more = s.recv(100)
        if not more:
            print(path, "read", rest, flush=True)
            print(path, "closed", flush=True)
            break
        rest += more
except (ConnectionError, ssl.SSLError):
    print(path, "read", rest, flush=True)
    print(path, "closed", flush=True)
except socket.timeout:
    print(path, "read", rest, flush=True)
    print(path, "open", flush=True)
"#;

fn python_available() -> bool {
    let ok = Command::new("python3")
        .args(["-c", "import ssl"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        skip("python3 with ssl is needed for the WebSocket client inside the sandbox");
    }
    ok
}

/// `warden run` with `GET chat.test:PORT/live/**` allowed and the client
/// run once per `(path, mode)`, one after the other, its events in
/// `events`.
fn run(ca: &TestCa, up: &RawWs, calls: &[(&str, &str)], events: &std::path::Path) -> Output {
    let port = up.port.to_string();
    let mut script = format!("cat > /tmp/smuggle.py <<'EOF'\n{CLIENT}\nEOF\n");
    for (path, mode) in calls {
        script.push_str(&format!("python3 /tmp/smuggle.py {port} {path} {mode}\n"));
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
            "--allow-request",
            &format!("GET chat.test:{port}/live/**"),
            "--json-events",
            &events.to_string_lossy(),
        ])
        .args(["--", "sh", "-c", &script])
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// Asserts that each of `calls` was upgraded, that nothing the program
/// sent behind its upgrade's head reached the server, and that the
/// program saw its connection closed.
fn nothing_early_relayed(up: &RawWs, out: &Output, calls: &[(&str, &str)]) {
    let s = stdout(out);
    let seen = up.seen();
    for (path, mode) in calls {
        let after = up.after(path);
        assert!(
            after.is_some(),
            "the upgrade itself was allowed: {path} {seen:?}\n{s}"
        );
        assert_eq!(
            after.as_deref(),
            Some(&b""[..]),
            "nothing the program sent behind its upgrade ({mode}) reached the server: {seen:?}\n{s}"
        );
        assert!(s.contains(&format!("{path} closed")), "{mode}: {s}");
    }
    assert!(
        !seen
            .iter()
            .any(|x| x.line.contains("admin")
                || String::from_utf8_lossy(&x.after).contains("SMUGGLED")),
        "{seen:?}"
    );
}

#[test]
fn bytes_sent_behind_an_allowed_websocket_upgrade_before_its_101_never_reach_the_server() {
    if !egress_available() || !python_available() {
        return;
    }
    let ca = TestCa::new();
    let up = RawWs::start(&ca);
    let dir = TempDir::new("upgrade-smuggling");
    let calls = [
        ("/live/same", "same"),
        ("/live/later", "later"),
        ("/live/honest", "honest"),
        ("/live/listen", "listen"),
    ];
    let out = run(&ca, &up, &calls, &dir.path().join("events.jsonl"));
    let s = stdout(&out);
    assert!(out.status.success(), "{s}\n{}", stderr(&out));
    // The server gives up reading three seconds after its 101.
    std::thread::sleep(Duration::from_millis(500));
    nothing_early_relayed(&up, &out, &calls[..2]);
    let seen = up.seen();
    // A client that waits for the 101 is relayed as ever, both ways.
    let honest = up.after("/live/honest").unwrap_or_default();
    let payload: Vec<u8> = honest
        .iter()
        .skip(6)
        .enumerate()
        .map(|(i, b)| b ^ honest[2 + i % 4])
        .collect();
    assert_eq!(
        (honest.get(..2), &payload[..]),
        (Some(&[0x81, 0x80 | 12][..]), &b"honest-frame"[..]),
        "the honest frame, header, mask and payload, once: {seen:?}\n{s}"
    );
    assert!(s.contains("/live/honest status HTTP/1.1 101"), "{s}");
    assert!(s.contains("/live/honest read b'\\x81\\x05hello'"), "{s}");
    // One that sends nothing still gets what the server sends.
    assert!(s.contains("/live/listen status HTTP/1.1 101"), "{s}");
    assert!(s.contains("/live/listen read b'\\x81\\x05hello'"), "{s}");
    assert_eq!(
        up.after("/live/listen").as_deref(),
        Some(&b""[..]),
        "{seen:?}"
    );
}

#[test]
fn a_request_written_apart_behind_an_allowed_websocket_upgrade_never_reaches_the_server_whatever_its_timing(
) {
    if !egress_available() || !python_available() {
        return;
    }
    let ca = TestCa::new();
    let up = RawWs::start(&ca);
    let dir = TempDir::new("upgrade-smuggling");
    let ev = dir.path().join("events.jsonl");
    // The smuggled request in a write of its own, at once and 1, 3 and
    // 10 ms after the head; the server answers at once, or 20 ms or a
    // second after the head.
    let mut paths = Vec::new();
    for wait in [0, 20, 1000] {
        for after in [0, 1, 3, 10] {
            paths.push((
                format!("/live/wait{wait}/{after}"),
                format!("after-{after}"),
            ));
        }
    }
    let calls: Vec<(&str, &str)> = paths
        .iter()
        .map(|(p, m)| (p.as_str(), m.as_str()))
        .collect();
    let out = run(&ca, &up, &calls, &ev);
    let s = stdout(&out);
    assert!(out.status.success(), "{s}\n{}", stderr(&out));
    std::thread::sleep(Duration::from_millis(500));
    for (path, _) in &calls {
        assert!(
            s.contains(&format!("{path} status HTTP/1.1 101")),
            "{path}: {s}"
        );
    }
    nothing_early_relayed(&up, &out, &calls);
    // Each closure is recorded as a refusal, alone or counted among
    // repeats.
    let events = events(&ev);
    let refused: u64 = events
        .iter()
        .filter(|e| e["reason"]["code"] == "bytes_before_upgrade")
        .map(|e| match e["event"].as_str() {
            Some("connections_aggregated") => e["count"].as_u64().unwrap_or(0),
            _ => 1,
        })
        .sum();
    assert_eq!(refused, calls.len() as u64, "{events:#?}");
}
