//! What one caller's requests may hold of the daemon once a good token let
//! them in (outside review 26): a body that stops coming, or trickles,
//! holds its connection and buffer only to the body's deadline, on the
//! API's listener and the E2B door's alike.

use crate::common::daemon::*;
use crate::common::*;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// The daemon's `--body-timeout` below: small, so that the tests are quick.
const BODY: Duration = Duration::from_secs(2);
/// What the daemon may take beyond a deadline to close the connection.
const MARGIN: Duration = Duration::from_secs(3);

/// How long `c` stays open (reading and dropping what comes), up to
/// `limit`.
fn open_for(c: &mut TcpStream, limit: Duration) -> Duration {
    let began = Instant::now();
    c.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let mut buf = [0u8; 4096];
    while began.elapsed() < limit {
        match c.read(&mut buf) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => break,
        }
    }
    began.elapsed()
}

/// A head on `addr` announcing `length` bytes of body, and `first` of
/// them: the connection.
fn started_upload(addr: &str, head: &str, first: &[u8]) -> TcpStream {
    let mut c = TcpStream::connect(addr).unwrap();
    c.write_all(head.as_bytes()).unwrap();
    c.write_all(first).unwrap();
    c
}

#[test]
fn a_body_that_stops_coming_after_a_good_token_holds_its_connection_only_to_the_body_deadline() {
    let state = TempDir::new("held-body");
    let e2b = format!("127.0.0.1:{}", free_port());
    let d = Daemon::start_with(
        state.path(),
        true,
        &["--e2b", &e2b, "--body-timeout", "2s"],
        &[],
    );
    let t = api_token(
        &d,
        "a",
        &["sandboxes:read", "sandboxes:write", "exec"],
        None,
    );
    let tcp = d.tcp.clone().unwrap();
    let limit = BODY + MARGIN;
    let api = format!(
        "POST /v1/sandboxes/sa1/exec HTTP/1.1\r\nhost: localhost\r\nauthorization: Bearer {t}\r\ncontent-type: application/json\r\ncontent-length: 100000\r\n\r\n"
    );
    let door = format!(
        "POST /sandboxes HTTP/1.1\r\nhost: localhost\r\nx-api-key: {t}\r\ncontent-type: application/json\r\ncontent-length: 100000\r\n\r\n"
    );
    let chunked = format!(
        "POST /v1/sandboxes/sa1/exec HTTP/1.1\r\nhost: localhost\r\nauthorization: Bearer {t}\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n"
    );
    std::thread::scope(|s| {
        for (what, addr, head) in [("the API", &tcp, &api), ("the E2B door", &e2b, &door)] {
            s.spawn(move || {
                // One byte of 100,000, then nothing.
                let mut c = started_upload(addr, head, b"{");
                let took = open_for(&mut c, limit + Duration::from_secs(6));
                assert!(
                    took <= limit,
                    "{what}: a token's upload of 1 byte of 100000 still open after {took:?}"
                );
            });
        }
        // A chunked body, a byte every 300 ms: never silent for the
        // stall bound, far below the least pace.
        s.spawn(|| {
            let mut c = started_upload(&tcp, &chunked, b"");
            let mut w = c.try_clone().unwrap();
            let trickle = std::thread::spawn(move || {
                for _ in 0..60 {
                    if w.write_all(b"1\r\n \r\n").is_err() {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(300));
                }
            });
            let took = open_for(&mut c, limit + Duration::from_secs(6));
            assert!(
                took <= limit,
                "a token's trickling chunked body still open after {took:?}"
            );
            let _ = c.shutdown(std::net::Shutdown::Both);
            trickle.join().unwrap();
        });
    });
    // A body sent whole is read as ever: the answer is about the request
    // (no such sandbox), not its pace.
    let (s, b) = json_as(
        &d,
        &t,
        "POST",
        "/v1/sandboxes/sa1/exec",
        r#"{"argv":["true"]}"#,
    );
    assert_eq!(s, 404, "{b}");
}
