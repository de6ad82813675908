//! Plain HTTP through the real `warden run`: a sandbox allowed one name
//! over plain HTTP (pinned by the owner to a recording server on the
//! host's loopback) sends, on one connection, a first request for that
//! name and then requests under other `Host`s, in the shapes an outside
//! review found riding on the first decision (a head that is not UTF-8, a
//! head of bare line feeds whose length swallows what a proxy appends,
//! plain HTTP inside a CONNECT tunnel). Only the allowed name's requests
//! may arrive.

use crate::common::*;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// An HTTP/1.1 server on the host's loopback that keeps connections alive
/// and records the request line and `Host` of each request it reads (a
/// lenient reader: bare line feeds are accepted).
fn recording_server() -> (u16, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { continue };
            let s = s.clone();
            std::thread::spawn(move || serve(conn, &s));
        }
    });
    (port, seen)
}

fn serve(mut conn: TcpStream, seen: &Mutex<Vec<String>>) {
    let _ = conn.set_read_timeout(Some(Duration::from_secs(10)));
    let mut buf: Vec<u8> = Vec::new();
    loop {
        let parsed = loop {
            if let Some(p) = head(&buf) {
                break p;
            }
            let mut chunk = [0u8; 4096];
            match conn.read(&mut chunk) {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        };
        let (line, whole) = parsed;
        while buf.len() < whole {
            let mut chunk = [0u8; 4096];
            match conn.read(&mut chunk) {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        buf.drain(..whole);
        seen.lock().unwrap().push(line);
        if conn
            .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n")
            .is_err()
        {
            return;
        }
    }
}

/// The request line and `Host` of the head `buf` starts with, and the
/// length of the head and its body, once it is all there: lines end at a
/// line feed, with or without a carriage return.
fn head(buf: &[u8]) -> Option<(String, usize)> {
    // One character per byte, so that positions are the bytes' own.
    let text: String = buf
        .iter()
        .map(|&b| if b.is_ascii() { b as char } else { '?' })
        .collect();
    let end = ["\r\n\r\n", "\n\n", "\n\r\n"]
        .iter()
        .filter_map(|e| text.find(e).map(|at| at + e.len()))
        .min()?;
    let mut lines = text[..end].lines().map(|l| l.trim_end_matches('\r'));
    let request = lines.next()?.to_string();
    let (mut host, mut length) = (String::new(), 0usize);
    for l in lines {
        if let Some((k, v)) = l.split_once(':') {
            if k.eq_ignore_ascii_case("host") {
                host = v.trim().to_string();
            } else if k.eq_ignore_ascii_case("content-length") {
                length = v.trim().parse().unwrap_or(0);
            }
        }
    }
    let line = request.rsplit_once(' ').map_or(request.as_str(), |r| r.0);
    Some((format!("{line} Host={host}"), end + length))
}

/// The attacks, each on a connection of its own, from inside the sandbox.
const ATTACKS: &str = r#"
import os, socket, sys, time
port = int(sys.argv[1])
def talk(first, later, proxy=False):
    if proxy:
        px = os.environ["HTTP_PROXY"].split("//")[1].rstrip("/")
        host, p = px.rsplit(":", 1)
        s = socket.create_connection((host, int(p)), timeout=5)
        s.sendall(b"CONNECT up.test:%d HTTP/1.1\r\nHost: up.test:%d\r\n\r\n" % (port, port))
        s.recv(200)
    else:
        s = socket.create_connection(("up.test", port), timeout=5)
    s.sendall(first)
    time.sleep(0.5)
    try:
        s.sendall(later)
    except OSError:
        pass
    s.settimeout(2)
    try:
        while s.recv(4096):
            pass
    except OSError:
        pass
    s.close()
later = b"GET /third-later HTTP/1.1\r\nHost: other.example\r\n\r\n"
talk(b"GET /first HTTP/1.1\r\nHost: up.test:%d\r\nX-A: \xff\r\nConnection: keep-alive\r\n\r\n"
     b"GET /second HTTP/1.1\r\nHost: evil.example:%d\r\n\r\n" % (port, port), later)
talk(b"POST /first-lf HTTP/1.1\nHost: up.test:%d\nContent-Length: 44\n\n"
     b"GET /second-lf HTTP/1.1\nHost: evil.example:%d\n\n" % (port, port), later)
talk(b"GET /first-tunnel HTTP/1.1\r\nHost: up.test:%d\r\n\r\n"
     b"GET /second-tunnel HTTP/1.1\r\nHost: evil.example\r\n\r\n" % port, later, proxy=True)
print("done")
"#;

#[test]
fn requests_under_another_host_never_ride_on_a_plain_http_decision() {
    if !egress_available() {
        return;
    }
    let (port, seen) = recording_server();
    let out = Command::new(warden_bin())
        .args(["run", "--no-tty", "--add-host", "up.test=127.0.0.1"])
        .args(["--allow-domain", &format!("up.test:{port}"), "--allow-http"])
        .args(["--", "python3", "-c", ATTACKS, &port.to_string()])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(stdout(&out).contains("done"), "{}", stderr(&out));
    std::thread::sleep(Duration::from_millis(300));
    let seen = seen.lock().unwrap().clone();
    for first in ["/first ", "/first-lf ", "/first-tunnel "] {
        assert!(
            seen.iter().any(|l| l.contains(first)),
            "the allowed request {first} did not arrive: {seen:?}"
        );
    }
    for line in &seen {
        assert!(
            line.ends_with(&format!("Host=up.test:{port}")),
            "a request under another Host reached the server: {seen:?}"
        );
    }
}
