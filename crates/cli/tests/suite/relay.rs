//! The egress proxy's pass-through of an allowed connection, byte for byte
//! and end for end: real servers on the host's loopback that record what
//! reached them, real clients in a sandbox (under warden's limits). A relay
//! that drops, adds or reorders a byte, that loses a half-close either way,
//! or that turns a reset into an orderly end fails these.

use crate::common::*;
use sha2::{Digest, Sha256};
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// A server on 127.0.0.1 that hands its first connection to `serve` (on a
/// thread) and sends back what `serve` returns; returns its port.
fn server<T: Send + 'static>(
    serve: impl FnOnce(TcpStream) -> T + Send + 'static,
) -> (u16, mpsc::Receiver<T>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let (conn, _) = listener.accept().unwrap();
        conn.set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        conn.set_write_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        let _ = tx.send(serve(conn));
    });
    (port, rx)
}

/// Python in a sandbox allowed raw TCP to `up.test` on `port` only (the
/// name pinned to the host's loopback); `body` has `ip` and `port`.
fn in_sandbox(port: u16, body: &str) -> Output {
    let script = format!(
        "import socket, struct, sys\nip = socket.gethostbyname('up.test')\nport = {port}\n{body}"
    );
    Command::new(warden_bin())
        .args(["run", "--no-tty", "--allow-domain"])
        .arg(format!("up.test:{port}"))
        .args(["--add-host", "up.test=127.0.0.1", "--", "python3", "-c"])
        .arg(script)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// Read until the end, or the error that ended it.
fn read_to_end(conn: &mut TcpStream) -> (Vec<u8>, Option<ErrorKind>) {
    let mut got = Vec::new();
    let mut buf = [0u8; 65536];
    loop {
        match conn.read(&mut buf) {
            Ok(0) => return (got, None),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) => return (got, Some(e.kind())),
        }
    }
}

#[test]
fn a_half_close_from_the_sandbox_reaches_upstream_and_the_answer_still_comes_back() {
    if !egress_available() {
        return;
    }
    // The server answers only once it has seen the end of the request.
    let (port, seen) = server(|mut conn| {
        let (got, err) = read_to_end(&mut conn);
        let _ = conn.write_all(format!("seen {} bytes after your end", got.len()).as_bytes());
        (got, err)
    });
    let out = in_sandbox(
        port,
        "s = socket.create_connection((ip, port), timeout=20)\n\
s.sendall(b'request ' * 1000)\n\
s.shutdown(socket.SHUT_WR)\n\
got = b''\n\
while True:\n    d = s.recv(65536)\n    if not d: break\n    got += d\n\
print('answer', got)\n",
    );
    let (got, err) = seen.recv_timeout(Duration::from_secs(30)).unwrap();
    assert_eq!(err, None, "upstream saw a failure, not the sandbox's end");
    assert_eq!(got, b"request ".repeat(1000));
    assert!(
        stdout(&out).contains("answer b'seen 8000 bytes after your end'"),
        "{} {}",
        stdout(&out),
        stderr(&out)
    );
}

#[test]
fn a_half_close_from_upstream_reaches_the_sandbox_and_its_answer_still_goes_up() {
    if !egress_available() {
        return;
    }
    // The server speaks, ends its side, and then listens to the end.
    let (port, seen) = server(|mut conn| {
        let mut hello = [0u8; 5];
        conn.read_exact(&mut hello).unwrap();
        conn.write_all(&b"answer ".repeat(1000)).unwrap();
        conn.shutdown(Shutdown::Write).unwrap();
        read_to_end(&mut conn)
    });
    let out = in_sandbox(
        port,
        "s = socket.create_connection((ip, port), timeout=20)\n\
s.sendall(b'hello')\n\
got = b''\n\
while True:\n    d = s.recv(65536)\n    if not d: break\n    got += d\n\
s.sendall(f'after your end: {len(got)} bytes'.encode())\n\
s.close()\n\
print('ok')\n",
    );
    let (got, err) = seen.recv_timeout(Duration::from_secs(30)).unwrap();
    assert_eq!(err, None, "{} {}", stdout(&out), stderr(&out));
    assert_eq!(
        String::from_utf8_lossy(&got),
        "after your end: 7000 bytes",
        "{} {}",
        stdout(&out),
        stderr(&out)
    );
}

#[test]
fn a_reset_by_upstream_reaches_the_sandbox_as_a_reset() {
    if !egress_available() {
        return;
    }
    let (port, _seen) = server(|mut conn| {
        let mut hello = [0u8; 5];
        conn.read_exact(&mut hello).unwrap();
        conn.write_all(b"partial").unwrap();
        std::thread::sleep(Duration::from_millis(200));
        // SO_LINGER 0: the close is a reset.
        nix::sys::socket::setsockopt(
            &conn,
            nix::sys::socket::sockopt::Linger,
            &libc::linger {
                l_onoff: 1,
                l_linger: 0,
            },
        )
        .unwrap();
        drop(conn);
    });
    let out = in_sandbox(
        port,
        "s = socket.create_connection((ip, port), timeout=20)\n\
s.sendall(b'hello')\n\
got = b''\n\
try:\n    while True:\n        d = s.recv(65536)\n        if not d: break\n        got += d\n    print('end', got)\n\
except OSError as e:\n    print('error', e.errno, got)\n",
    );
    let s = stdout(&out);
    assert!(
        s.contains("error 104 b'partial'"),
        "the sandbox did not see the reset: {s} {}",
        stderr(&out)
    );
}

#[test]
fn a_reset_from_the_sandbox_reaches_upstream_as_a_reset() {
    if !egress_available() {
        return;
    }
    let (port, seen) = server(|mut conn| {
        let mut hello = [0u8; 5];
        conn.read_exact(&mut hello).unwrap();
        conn.write_all(b"ok").unwrap();
        read_to_end(&mut conn)
    });
    let out = in_sandbox(
        port,
        "s = socket.create_connection((ip, port), timeout=20)\n\
s.sendall(b'hello')\n\
print('got', s.recv(2))\n\
s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack('ii', 1, 0))\n\
s.close()\n",
    );
    assert!(stdout(&out).contains("got b'ok'"), "{}", stderr(&out));
    let (_, err) = seen.recv_timeout(Duration::from_secs(30)).unwrap();
    assert_eq!(
        err,
        Some(ErrorKind::ConnectionReset),
        "upstream did not see the sandbox's reset"
    );
}

#[test]
fn sixty_four_mebibytes_of_random_bytes_arrive_intact_both_ways_at_once() {
    if !egress_available() {
        return;
    }
    const SIZE: usize = 64 << 20;
    // The server sends its own random bytes while it reads the client's,
    // and hashes both; it ends its side only once it has read the client's
    // end, so that the client (whose run ends when it exits) waits for its
    // bytes to have arrived.
    let (port, seen) = server(|mut conn| {
        let mut mine = vec![0u8; SIZE];
        std::fs::File::open("/dev/urandom")
            .unwrap()
            .read_exact(&mut mine)
            .unwrap();
        let sent = hex(&Sha256::digest(&mine));
        let mut writer = conn.try_clone().unwrap();
        let sending = std::thread::spawn(move || writer.write_all(&mine).unwrap());
        let mut hasher = Sha256::new();
        let mut buf = vec![0u8; 1 << 20];
        let mut total = 0usize;
        loop {
            match conn.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    hasher.update(&buf[..n]);
                    total += n;
                }
                Err(e) => panic!("upstream read failed after {total} bytes: {e}"),
            }
        }
        sending.join().unwrap();
        conn.shutdown(Shutdown::Write).unwrap();
        (sent, hex(&hasher.finalize()), total)
    });
    let out = in_sandbox(
        port,
        &format!(
            "import hashlib, os, threading\n\
size = {SIZE}\n\
mine = os.urandom(size)\n\
s = socket.create_connection((ip, port), timeout=60)\n\
def send():\n    s.sendall(mine); s.shutdown(socket.SHUT_WR)\n\
t = threading.Thread(target=send); t.start()\n\
h = hashlib.sha256(); total = 0; buf = bytearray(1 << 20)\n\
while True:\n    n = s.recv_into(buf)\n    if not n: break\n    h.update(memoryview(buf)[:n]); total += n\n\
t.join()\n\
print('sent', hashlib.sha256(mine).hexdigest())\n\
print('received', h.hexdigest(), total)\n"
        ),
    );
    let (server_sent, server_received, server_total) =
        seen.recv_timeout(Duration::from_secs(120)).unwrap();
    let s = stdout(&out);
    assert_eq!(server_total, SIZE, "{s} {}", stderr(&out));
    assert!(
        s.contains(&format!("sent {server_received}")),
        "the sandbox's bytes did not arrive intact: upstream hashed {server_received}; {s} {}",
        stderr(&out)
    );
    assert!(
        s.contains(&format!("received {server_sent} {SIZE}")),
        "upstream's bytes did not arrive intact: it sent {server_sent}; {s} {}",
        stderr(&out)
    );
}

#[test]
fn a_sandboxs_very_first_connection_without_a_question_before_it_is_served() {
    if !egress_available() {
        return;
    }
    // The proxy's runtime starts on the sandbox's first connection or DNS
    // question: here the first is a connection (to an address, no name
    // resolved first), decided on its Host and passed upstream, where it is
    // seen arriving and answered.
    let (port, seen) = server(|mut conn| {
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        while !got.windows(4).any(|w| w == b"\r\n\r\n") {
            match conn.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
        conn.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 12\r\n\r\nfirst served")
            .unwrap();
        String::from_utf8_lossy(&got).into_owned()
    });
    let script = format!(
        "import socket\n\
s = socket.create_connection(('192.0.2.7', {port}), timeout=30)\n\
s.sendall(b'GET /first HTTP/1.1\\r\\nHost: up.test:{port}\\r\\n\\r\\n')\n\
got = b''\n\
while True:\n    b = s.recv(4096)\n    if not b: break\n    got += b\n\
print(got.decode())\n"
    );
    let out = Command::new(warden_bin())
        .args(["run", "--no-tty", "--allow-http", "--allow-domain"])
        .arg(format!("up.test:{port}"))
        .args(["--add-host", "up.test=127.0.0.1", "--", "python3", "-c"])
        .arg(script)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let request = seen
        .recv_timeout(Duration::from_secs(30))
        .expect("the sandbox's first connection never reached upstream");
    assert!(request.starts_with("GET /first HTTP/1.1\r\n"), "{request}");
    assert!(
        stdout(&out).contains("first served"),
        "{} {}",
        stdout(&out),
        stderr(&out)
    );
}
