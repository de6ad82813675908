//! Upstream servers for the secret tests: a certificate authority made for
//! one test, and a raw HTTPS/1.1 server whose every byte of answer the test
//! writes itself, so that it can misbehave exactly as an attack needs.

use std::io::Read;
use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex};

use super::TempDir;

/// A certificate authority made for one test, its PEM in a file.
pub struct TestCa {
    pub cert: rcgen::Certificate,
    pub key: rcgen::KeyPair,
    pub dir: TempDir,
}

impl TestCa {
    pub fn new() -> TestCa {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "warden test upstream CA");
        let cert = params.self_signed(&key).unwrap();
        let dir = TempDir::new("secrets-ca");
        std::fs::write(dir.path().join("ca.pem"), cert.pem()).unwrap();
        TestCa { cert, key, dir }
    }

    pub fn pem_path(&self) -> String {
        self.dir.path().join("ca.pem").display().to_string()
    }

    /// A server configuration for `names`, signed by this authority,
    /// offering the ALPN protocols `alpn`.
    pub fn server_config(&self, names: &[&str], alpn: &[&[u8]]) -> rustls::ServerConfig {
        let key = rcgen::KeyPair::generate().unwrap();
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let params = rcgen::CertificateParams::new(names).unwrap();
        let cert = params.signed_by(&key, &self.cert, &self.key).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(
                vec![cert.der().clone()],
                rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
            )
            .unwrap();
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        config
    }
}

/// An HTTPS server on 127.0.0.1 for `names`, offering the ALPN protocols
/// `alpn`, on a tokio runtime of its own (the server ends when it is
/// dropped): each connection is served, over HTTP/1.1 or HTTP/2 as ALPN
/// chose, by the hyper service `service` makes for it. Its port, and the
/// runtime to keep.
pub fn https_server<F, S, B>(
    ca: &TestCa,
    names: &[&str],
    alpn: &[&[u8]],
    service: F,
) -> (u16, tokio::runtime::Runtime)
where
    F: Fn() -> S + Send + Sync + 'static,
    S: hyper::service::Service<
            hyper::Request<hyper::body::Incoming>,
            Response = hyper::Response<B>,
        > + Send
        + 'static,
    S::Future: Send + 'static,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let service = Arc::new(service);
    tls_server(ca, names, alpn, (Ipv4Addr::LOCALHOST, 0), move |tls| {
        let service = service.clone();
        async move {
            let _ =
                hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new())
                    .serve_connection(hyper_util::rt::TokioIo::new(tls), service())
                    .await;
        }
    })
    .unwrap()
}

/// A TLS listener on `at` for `names` (signed by `ca`, offering the ALPN
/// protocols `alpn`), on a tokio runtime of its own: each connection whose
/// handshake completes is handed to `serve` on a task of its own. Its port
/// and the runtime to keep (the server ends when it is dropped); the
/// error of a bind that failed (a test may skip on it).
pub fn tls_server<F, Fut>(
    ca: &TestCa,
    names: &[&str],
    alpn: &[&[u8]],
    at: (Ipv4Addr, u16),
    serve: F,
) -> std::io::Result<(u16, tokio::runtime::Runtime)>
where
    F: Fn(tokio_rustls::server::TlsStream<tokio::net::TcpStream>) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let listener = runtime.block_on(tokio::net::TcpListener::bind(at))?;
    let port = listener.local_addr()?.port();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(ca.server_config(names, alpn)));
    let serve = Arc::new(serve);
    runtime.spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                continue;
            };
            let (acceptor, serve) = (acceptor.clone(), serve.clone());
            tokio::spawn(async move {
                if let Ok(tls) = acceptor.accept(tcp).await {
                    serve(tls).await;
                }
            });
        }
    });
    Ok((port, runtime))
}

/// One request as the raw server read it: the request line's target and
/// the header lines, as sent.
#[derive(Debug, Clone)]
pub struct RawRequest {
    pub method: String,
    pub target: String,
    pub headers: Vec<(String, String)>,
    /// As much of the body (by Content-Length) as arrived.
    pub body: Vec<u8>,
}

impl RawRequest {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// The writes that answer a request, each flushed on its own (a body
/// split across many TLS records and reads).
type Answer = dyn Fn(&RawRequest) -> Vec<Vec<u8>> + Send + Sync;

/// An HTTPS server (HTTP/1.1 only) on 127.0.0.1 that reads one request per
/// connection, records it, writes the bytes `answer` makes for it and
/// closes the connection (each write flushed on its own). Plain threads and blocking rustls: nothing of the
/// answer is reframed on the way out.
pub struct RawUpstream {
    pub port: u16,
    seen: Arc<Mutex<Vec<RawRequest>>>,
}

impl RawUpstream {
    pub fn start(
        ca: &TestCa,
        names: &[&str],
        answer: impl Fn(&RawRequest) -> Vec<Vec<u8>> + Send + Sync + 'static,
    ) -> RawUpstream {
        let config = Arc::new(ca.server_config(names, &[b"http/1.1"]));
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let answer: Arc<Answer> = Arc::new(answer);
        let s = seen.clone();
        std::thread::spawn(move || {
            for tcp in listener.incoming() {
                let Ok(tcp) = tcp else { continue };
                let (config, s, answer) = (config.clone(), s.clone(), answer.clone());
                std::thread::spawn(move || serve_one(tcp, config, &s, &*answer));
            }
        });
        RawUpstream { port, seen }
    }

    pub fn requests(&self) -> Vec<RawRequest> {
        self.seen.lock().unwrap().clone()
    }
}

fn serve_one(
    mut tcp: std::net::TcpStream,
    config: Arc<rustls::ServerConfig>,
    seen: &Mutex<Vec<RawRequest>>,
    answer: &Answer,
) {
    use std::io::Write;
    let _ = tcp.set_read_timeout(Some(std::time::Duration::from_secs(20)));
    let Ok(mut conn) = rustls::ServerConnection::new(config) else {
        return;
    };
    let mut tls = rustls::Stream::new(&mut conn, &mut tcp);
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") && head.len() < 65536 {
        match tls.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            _ => return,
        }
    }
    let text = String::from_utf8_lossy(&head).into_owned();
    let mut lines = text.split("\r\n");
    let mut first = lines.next().unwrap_or("").split(' ');
    let method = first.next().unwrap_or("").to_string();
    let target = first.next().unwrap_or("").to_string();
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    let mut req = RawRequest {
        method,
        target,
        headers,
        body: Vec::new(),
    };
    let length = req
        .header("content-length")
        .and_then(|n| n.parse::<usize>().ok())
        .unwrap_or(0);
    let mut buf = [0u8; 4096];
    while req.body.len() < length {
        match tls.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => req.body.extend_from_slice(&buf[..n]),
        }
    }
    seen.lock().unwrap().push(req.clone());
    for piece in answer(&req) {
        if tls.write_all(&piece).is_err() {
            return;
        }
        let _ = tls.flush();
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    conn.send_close_notify();
    let _ = conn.complete_io(&mut tcp);
}
