//! Plain TCP on the host's loopback for egress tests: a server that
//! records what each connection sent (and one that then holds it open),
//! one that counts connections as they are accepted, and the Python a
//! sandbox sends a real TLS ClientHello with.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A server on `addr` (`[::]:0`: every address of the host, dual stack)
/// that counts each connection the moment it is accepted, reads what it
/// sends for up to `wait`, answers `reply` and closes it: its port and the
/// count, which a test may also set back to zero.
pub fn counting(addr: &str, reply: &'static [u8], wait: Duration) -> (u16, Arc<AtomicUsize>) {
    let listener = TcpListener::bind(addr).unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = Arc::new(AtomicUsize::new(0));
    let s = seen.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            s.fetch_add(1, Ordering::SeqCst);
            conn.set_read_timeout(Some(wait)).unwrap();
            let mut buf = vec![0u8; 65536];
            let _ = conn.read(&mut buf);
            let _ = conn.write_all(reply);
        }
    });
    (port, seen)
}

/// A TCP server on 127.0.0.1 that records what each connection sent and
/// answers with `reply`.
pub struct Upstream {
    pub port: u16,
    seen: Arc<Mutex<Vec<Vec<u8>>>>,
}

impl Upstream {
    pub fn start(reply: &'static [u8]) -> Upstream {
        Upstream::on("127.0.0.1:0", reply)
    }

    /// The same on `addr` (`0.0.0.0:0`: every address of the host).
    pub fn on(addr: &str, reply: &'static [u8]) -> Upstream {
        let listener = TcpListener::bind(addr).unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = seen.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { continue };
                conn.set_read_timeout(Some(Duration::from_millis(500)))
                    .unwrap();
                let mut buf = vec![0u8; 65536];
                let n = conn.read(&mut buf).unwrap_or(0);
                s.lock().unwrap().push(buf[..n].to_vec());
                let _ = conn.write_all(reply);
            }
        });
        Upstream { port, seen }
    }

    /// What each connection that reached the server sent, in order.
    pub fn connections(&self) -> Vec<Vec<u8>> {
        self.seen.lock().unwrap().clone()
    }
}

/// A server on 127.0.0.1 that records the first bytes of each connection
/// and then holds it open, saying nothing.
pub struct Holder {
    pub port: u16,
    seen: Arc<Mutex<Vec<Vec<u8>>>>,
}

impl Holder {
    pub fn start() -> Holder {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = seen.clone();
        std::thread::spawn(move || {
            let mut held = Vec::new();
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { continue };
                conn.set_read_timeout(Some(Duration::from_millis(500)))
                    .unwrap();
                let mut buf = vec![0u8; 4096];
                let n = conn.read(&mut buf).unwrap_or(0);
                s.lock().unwrap().push(buf[..n].to_vec());
                held.push(conn);
            }
        });
        Holder { port, seen }
    }

    /// How many connections reached it.
    pub fn arrivals(&self) -> usize {
        self.seen.lock().unwrap().len()
    }
}

/// Python that builds a real TLS ClientHello (OpenSSL's) for a name
/// (`hello(None)`: one without a name) and sends bytes to an address,
/// returning the first answer or `('error', errno)`.
pub const PY_HELLO: &str = r#"import socket, ssl, sys
def hello(name):
    ctx = ssl.create_default_context(); i, o = ssl.MemoryBIO(), ssl.MemoryBIO()
    if name is None:
        ctx.check_hostname = False
    t = ctx.wrap_bio(i, o, server_hostname=name)
    try: t.do_handshake()
    except ssl.SSLWantReadError: pass
    return o.read()
def send(addr, data):
    try:
        s = socket.create_connection(addr, timeout=5); s.settimeout(5); s.sendall(data)
        return s.recv(200)
    except OSError as e:
        return ('error', e.errno)
"#;

/// How long `c` stays open (reading and dropping what comes), up to
/// `limit`.
pub fn open_for(c: &mut TcpStream, limit: Duration) -> Duration {
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
