//! A listener on the host's loopback that records what arrived: what a
//! test asserts reached the host (or never did).

use std::io::Read;
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Its port, and the first bytes of each connection that came (each is
/// answered with a plain `200 ok`).
pub fn listener() -> (u16, Arc<Mutex<Vec<String>>>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    std::thread::spawn(move || {
        for mut conn in l.incoming().flatten() {
            let _ = conn.set_read_timeout(Some(Duration::from_secs(2)));
            let mut buf = [0u8; 512];
            let n = conn.read(&mut buf).unwrap_or(0);
            s.lock()
                .unwrap()
                .push(String::from_utf8_lossy(&buf[..n]).into_owned());
            let _ = std::io::Write::write_all(
                &mut conn,
                b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok",
            );
        }
    });
    (port, seen)
}
