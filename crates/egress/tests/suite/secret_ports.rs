//! A secret's host on a port other than the secret's own: one application
//! served on two TLS ports that share their storage (a self-hosted forge
//! on 443 and 8443), its secret given for the first port only. What the
//! sandbox stores through the secret's own port (its placeholder
//! substituted there) must not come back unscrubbed through the other,
//! whether that port is reached by the secret's host name or by the
//! host's own name (`host.warden.internal`, a host port). A real proxy on
//! loopback with a real terminator; the client reaches it as the explicit
//! proxy is reached (CONNECT), then speaks TLS through the tunnel.

use crate::common::{read_more, start, Heard};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use warden_egress::proxy::Proxy;
use warden_egress::secrets::{placeholder, Secret, Terminator};
use warden_policy::DomainRule;

/// A value shaped like no credential rule, so the outbound scan leaves it
/// to the substitution.
pub(super) const VALUE: &str = "sv-RealSecretValue-5f2c9e1d7a3b";

/// Another name the owner pinned to the store's address, allowed on the
/// store's other port only: no secret is for it.
const BESIDE: &str = "other.test";

/// How the store answers a load: from the path asked (`/load`, or
/// `/load/...` for another shape) and the note, the body it sends.
pub(super) type Shape = fn(&str, &[u8]) -> Vec<u8>;

/// The note as it was stored.
fn as_stored(_: &str, note: &[u8]) -> Vec<u8> {
    note.to_vec()
}

/// One application on two TLS ports of 127.0.0.1 (its own authority),
/// sharing one note: `POST /store` keeps the body, `GET /load` answers it
/// (in its [`Shape`]).
struct Store {
    ports: [u16; 2],
    ca_pem: String,
    cert_der: Vec<u8>,
}

impl Store {
    fn start(shape: Shape) -> Store {
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca = ca_params.self_signed(&ca_key).unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        // Its certificate names the host too, as a server on the host
        // reached by a host port may (or a client that verifies nothing
        // takes it anyway).
        let names = vec![
            "api.test".to_string(),
            BESIDE.to_string(),
            warden_policy::HOST_ALIAS.to_string(),
        ];
        let cert = rcgen::CertificateParams::new(names)
            .unwrap()
            .signed_by(&key, &ca, &ca_key)
            .unwrap();
        let config = Arc::new(
            rustls::ServerConfig::builder_with_provider(Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(
                vec![cert.der().clone()],
                rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
            )
            .unwrap(),
        );
        let note = Arc::new(Mutex::new(Vec::<u8>::new()));
        let mut ports = [0u16; 2];
        for port in &mut ports {
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            *port = listener.local_addr().unwrap().port();
            let (config, note) = (config.clone(), note.clone());
            std::thread::spawn(move || {
                for conn in listener.incoming() {
                    let Ok(conn) = conn else { continue };
                    let (config, note) = (config.clone(), note.clone());
                    std::thread::spawn(move || serve_store(conn, config, &note, shape));
                }
            });
        }
        Store {
            ports,
            ca_pem: ca.pem(),
            cert_der: cert.der().to_vec(),
        }
    }
}

/// One request on `conn`, answered with `Connection: close`.
fn serve_store(
    conn: TcpStream,
    config: Arc<rustls::ServerConfig>,
    note: &Mutex<Vec<u8>>,
    shape: Shape,
) {
    conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let Ok(tls) = rustls::ServerConnection::new(config) else {
        return;
    };
    let mut s = rustls::StreamOwned::new(tls, conn);
    let mut buf = Vec::new();
    let (path, head_len, length) = loop {
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let mut req = httparse::Request::new(&mut headers);
        if let Ok(httparse::Status::Complete(n)) = req.parse(&buf) {
            let length: usize = req
                .headers
                .iter()
                .find(|h| h.name.eq_ignore_ascii_case("content-length"))
                .and_then(|h| std::str::from_utf8(h.value).ok()?.trim().parse().ok())
                .unwrap_or(0);
            break (req.path.unwrap_or_default().to_string(), n, length);
        }
        if !read_more(&mut s, &mut buf) {
            return;
        }
    };
    while buf.len() < head_len + length {
        if !read_more(&mut s, &mut buf) {
            return;
        }
    }
    let answer = if path == "/store" {
        *note.lock().unwrap() = buf[head_len..head_len + length].to_vec();
        b"stored".to_vec()
    } else {
        shape(&path, &note.lock().unwrap())
    };
    let mut out = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        answer.len()
    )
    .into_bytes();
    out.extend_from_slice(&answer);
    let _ = s.write_all(&out);
    let _ = s.flush();
    s.conn.send_close_notify();
    let _ = s.flush();
}

/// What the owner allows on the store's other port besides what every
/// run allows there (`api.test` and [`BESIDE`]).
pub(super) enum Other {
    Nothing,
    /// The port as a host port (`host.warden.internal`).
    HostPort,
    /// `api.test` on it as a port that carries what is not TLS.
    Plain,
}

/// A proxy whose secret is for `api.test` on the store's first port
/// (substituted in bodies), `api.test` pinned by the owner to 127.0.0.1
/// and allowed on both ports, [`BESIDE`] pinned there too and allowed on
/// the other port, and `extra` on the other port; it, its port, its
/// authority's PEM, the placeholder and what it decided.
fn proxy(store: &Store, extra: Other) -> (Proxy, u16, String, String, Arc<Heard>) {
    let [own, other] = store.ports;
    let dir =
        std::env::temp_dir().join(format!("warden-secret-ports-{}-{own}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ca_file = dir.join("ca.pem");
    std::fs::write(&ca_file, &store.ca_pem).unwrap();
    let held = placeholder().unwrap();
    let secret = Secret::new(
        "TOKEN".into(),
        held.clone(),
        VALUE.as_bytes().to_vec(),
        vec![DomainRule::parse(&format!("api.test:{own}")).unwrap()],
        true,
    );
    let term = Terminator::new(vec![secret], std::slice::from_ref(&ca_file)).unwrap();
    std::fs::remove_file(&ca_file).unwrap();
    std::fs::remove_dir(&dir).unwrap();
    let ca = term.ca_pem().to_string();
    let mut domains = vec![
        DomainRule::parse(&format!("api.test:{own}")).unwrap(),
        DomainRule::parse(&format!("api.test:{other}")).unwrap(),
        DomainRule::parse(&format!("{BESIDE}:{other}")).unwrap(),
    ];
    let (mut host_ports, mut plain) = (Vec::new(), Vec::new());
    match extra {
        Other::Nothing => {}
        Other::HostPort => {
            // As the policy resolves a host port: an entry for the host's
            // name.
            let alias = warden_policy::HOST_ALIAS;
            domains.push(DomainRule::parse(&format!("{alias}:{other}")).unwrap());
            host_ports.push(other);
        }
        Other::Plain => plain.push(DomainRule::parse(&format!("api.test:{other}")).unwrap()),
    }
    let mut spec =
        crate::common::spec(domains, &[("api.test", "127.0.0.1"), (BESIDE, "127.0.0.1")]);
    spec.host_ports = host_ports;
    spec.secret_plain_ports = plain;
    let (p, at, heard) = start(&spec, Some(term));
    (p, at, ca, held, heard)
}

/// What a client gets for `request` sent over TLS for `target`'s name
/// through a CONNECT to `target` (`None` when the tunnel or the handshake was
/// refused), and the certificate the far end showed. It trusts both the
/// proxy's authority and the store's, so that a spliced connection is
/// seen as one (the store's own certificate), not as a failure.
fn through(
    proxy_port: u16,
    target: &str,
    cas: [&str; 2],
    request: &str,
) -> Option<(String, Vec<u8>)> {
    let mut tcp = TcpStream::connect(("127.0.0.1", proxy_port)).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(tcp, "CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").unwrap();
    let mut answer = Vec::new();
    let mut byte = [0u8; 1];
    while !answer.ends_with(b"\r\n\r\n") {
        match tcp.read(&mut byte) {
            Ok(1) => answer.push(byte[0]),
            _ => return None,
        }
    }
    if !answer.starts_with(b"HTTP/1.1 200") {
        return None;
    }
    let mut roots = rustls::RootCertStore::empty();
    for pem in cas {
        for c in rustls_pemfile::certs(&mut pem.as_bytes()) {
            roots.add(c.unwrap()).unwrap();
        }
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let name = target
        .rsplit_once(':')
        .map_or(target, |(n, _)| n)
        .to_string();
    let name = rustls::pki_types::ServerName::try_from(name).unwrap();
    let conn = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
    let mut s = rustls::StreamOwned::new(conn, tcp);
    s.write_all(request.as_bytes()).ok()?;
    let mut out = Vec::new();
    while read_more(&mut s, &mut out) {}
    let shown = s.conn.peer_certificates()?.first()?.to_vec();
    Some((String::from_utf8_lossy(&out).into_owned(), shown))
}

/// A store, a proxy over it as [`proxy`] makes it, and what a client
/// through the proxy trusts.
pub(super) struct Run {
    store: Store,
    _proxy: Proxy,
    at: u16,
    ca: String,
    held: String,
    heard: Arc<Heard>,
}

impl Run {
    fn start(extra: Other) -> Run {
        Run::shaped(extra, as_stored)
    }

    /// [`Run::start`], the store answering loads in `shape`.
    pub(super) fn shaped(extra: Other, shape: Shape) -> Run {
        let store = Store::start(shape);
        let (_proxy, at, ca, held, heard) = proxy(&store, extra);
        Run {
            store,
            _proxy,
            at,
            ca,
            held,
            heard,
        }
    }

    /// The store's port that is not the secret's own.
    fn other(&self) -> u16 {
        self.store.ports[1]
    }

    /// The proxy's authority and the store's.
    fn cas(&self) -> [&str; 2] {
        [self.ca.as_str(), self.store.ca_pem.as_str()]
    }

    /// [`through`] `target` (`name:port`, its `Host` too): the store's
    /// note.
    fn load(&self, target: &str) -> Option<(String, Vec<u8>)> {
        self.get(target, "/load")
    }

    /// [`through`] `target`: what the store answers for `path`.
    pub(super) fn get(&self, target: &str, path: &str) -> Option<(String, Vec<u8>)> {
        let load = format!("GET {path} HTTP/1.1\r\nHost: {target}\r\nConnection: close\r\n\r\n");
        through(self.at, target, self.cas(), &load)
    }

    /// The secret's own `name:port`, where its placeholder is substituted.
    pub(super) fn own(&self) -> String {
        format!("api.test:{}", self.store.ports[0])
    }

    /// Whether the proxy withheld a response for `code`, once its
    /// decisions have settled.
    pub(super) fn decided_code(&self, code: &str) -> bool {
        std::thread::sleep(Duration::from_millis(200));
        let heard = self.heard.0.lock().unwrap();
        heard
            .iter()
            .any(|d| d.reason.as_ref().map(|c| c.reason.code()) == Some(code))
    }

    /// [`through`] `target`: the placeholder stored as the note, with
    /// `headers` (whole lines) besides.
    pub(super) fn store(&self, target: &str, headers: &str) -> Option<(String, Vec<u8>)> {
        let body = format!("note={}", self.held);
        let req = format!(
            "POST /store HTTP/1.1\r\nHost: {target}\r\n{headers}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        through(self.at, target, self.cas(), &req)
    }

    /// Store the placeholder through the secret's own port (where it is
    /// substituted), and check the store got the real value.
    fn store_through_own_port(&self) {
        let own = format!("api.test:{}", self.store.ports[0]);
        let (answer, _) = self
            .store(&own, "Content-Type: text/plain\r\n")
            .expect("stored");
        assert!(answer.contains("stored"), "{answer}");
        let (answer, _) = self.load(&own).expect("loaded");
        assert!(
            answer.contains(&format!("note={}", self.held)),
            "scrubbed on its own port: {answer}"
        );
    }

    /// A CONNECT to `target` carrying an SSH client's first line, not
    /// TLS; its reads bounded.
    fn not_tls(&self, target: &str) -> TcpStream {
        let mut tcp = TcpStream::connect(("127.0.0.1", self.at)).unwrap();
        tcp.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
        write!(
            tcp,
            "CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\nSSH-2.0-OpenSSH_9.6\r\n"
        )
        .unwrap();
        tcp
    }

    /// Whether the proxy refused a connection to the store's other port
    /// for `code`, once its decisions have settled.
    fn refused_other_port(&self, code: &str) -> bool {
        std::thread::sleep(Duration::from_millis(200));
        let heard = self.heard.0.lock().unwrap();
        heard.iter().any(|d| {
            !d.allowed
                && d.port == self.other()
                && d.reason.as_ref().map(|c| c.reason.code()) == Some(code)
        })
    }

    /// The decisions so far, for a failure's message.
    fn decided(&self) -> String {
        format!("{:?}", self.heard.0.lock().unwrap())
    }
}

/// What an SSH client of [`Run::not_tls`] was answered, to the
/// connection's close.
fn answered(mut tcp: TcpStream) -> String {
    let mut out = Vec::new();
    let _ = tcp.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

#[test]
fn a_secrets_host_on_another_allowed_port_is_terminated_and_scrubbed_not_spliced() {
    let run = Run::start(Other::Nothing);
    let other = format!("api.test:{}", run.other());
    run.store_through_own_port();
    let (answer, shown) = run.load(&other).expect("answered");
    assert!(
        shown != run.store.cert_der,
        "spliced: the sandbox met the server's own certificate"
    );
    assert!(
        !answer.contains(VALUE),
        "the real value came back on the other port: {answer}"
    );
    assert!(answer.contains(&format!("note={}", run.held)), "{answer}");
    // The placeholder is substituted on the secret's own port only: on
    // the other, it is refused as going to a host that is not its own.
    let (answer, _) = run.store(&other, "").expect("answered");
    assert!(!answer.contains("stored"), "{answer}");
    assert!(
        run.refused_other_port("stray_placeholder"),
        "{}",
        run.decided()
    );
}

#[test]
fn a_host_port_on_the_same_server_as_a_secrets_host_is_refused_not_spliced() {
    let run = Run::start(Other::HostPort);
    run.store_through_own_port();
    let got = run.load(&format!("host.warden.internal:{}", run.other()));
    if let Some((answer, _)) = &got {
        assert!(
            !answer.contains(VALUE),
            "the real value came back through the host port: {answer}"
        );
    }
    assert!(
        run.refused_other_port("terminated_address"),
        "{}",
        run.decided()
    );
}

#[test]
fn what_is_not_tls_to_a_secrets_host_on_another_port_is_refused_not_spliced() {
    // Another protocol on an explicit `name:port` entry (SSH to a forge
    // whose HTTPS has the secret) could carry the stored value back
    // unscrubbed: it is refused, with its reason.
    let run = Run::start(Other::Nothing);
    let out = answered(run.not_tls(&format!("api.test:{}", run.other())));
    assert!(!out.contains(VALUE), "{out}");
    assert!(
        run.refused_other_port("secret_needs_tls"),
        "{}",
        run.decided()
    );
}

#[test]
fn a_name_pinned_beside_a_secrets_host_is_terminated_and_scrubbed_on_every_port() {
    // Outside review 29: the value stored through the secret's own name
    // and port came back unscrubbed through another name pinned to the
    // same address, on the store's other port (spliced: the store's own
    // certificate, the real value in the answer).
    let run = Run::start(Other::Nothing);
    let beside = format!("{BESIDE}:{}", run.other());
    run.store_through_own_port();
    let (answer, shown) = run.load(&beside).expect("answered");
    assert!(
        shown != run.store.cert_der,
        "spliced: the sandbox met the server's own certificate"
    );
    assert!(
        !answer.contains(VALUE),
        "the real value came back through the name beside: {answer}"
    );
    assert!(answer.contains(&format!("note={}", run.held)), "{answer}");
    // No secret is for it: the placeholder is not substituted there.
    let (answer, _) = run.store(&beside, "").expect("answered");
    assert!(!answer.contains("stored"), "{answer}");
    // What is not TLS naming it is refused as for the secret's own host.
    assert!(!answered(run.not_tls(&beside)).contains(VALUE));
    std::thread::sleep(Duration::from_millis(200));
    let heard = run.heard.0.lock().unwrap();
    let refused = |code: &str| {
        heard.iter().any(|d| {
            !d.allowed
                && d.name.as_deref() == Some(BESIDE)
                && d.reason.as_ref().map(|c| c.reason.code()) == Some(code)
        })
    };
    assert!(refused("stray_placeholder"), "{heard:?}");
    assert!(refused("secret_needs_tls"), "{heard:?}");
}

#[test]
fn a_request_to_a_secrets_host_with_a_host_routing_header_naming_another_host_is_refused() {
    // Outside review 29: `X-Forwarded-Host: attacker.example` (and its
    // kin) went to the secret's host with the real value, for a server
    // or a proxy in front of it to route or build links by.
    let run = Run::start(Other::Nothing);
    let own = format!("api.test:{}", run.store.ports[0]);
    for header in [
        "X-Forwarded-Host: attacker.example",
        "x_forwarded_host: attacker.example",
        "Forwarded: for=10.0.0.1;host=attacker.example",
        "X-Host: attacker.example",
        "X-Forwarded-Server: attacker.example",
        "X-HTTP-Host-Override: attacker.example",
        "X-Original-Host: attacker.example",
    ] {
        let (answer, _) = run.store(&own, &format!("{header}\r\n")).expect("answered");
        assert!(answer.starts_with("HTTP/1.1 421"), "{header}: {answer}");
        assert!(!answer.contains("stored"), "{header}: {answer}");
    }
    // Naming the connection's own host, it goes.
    let (answer, _) = run
        .store(&own, &format!("X-Forwarded-Host: {own}\r\n"))
        .expect("answered");
    assert!(answer.contains("stored"), "{answer}");
    std::thread::sleep(Duration::from_millis(200));
    let heard = run.heard.0.lock().unwrap();
    assert!(
        heard.iter().any(|d| !d.allowed
            && d.reason.as_ref().map(|c| c.reason.code()) == Some("misdirected_request")
            && d.detail.contains("x-forwarded-host")),
        "{heard:?}"
    );
}

#[test]
fn the_owners_plain_port_of_a_secrets_host_carries_other_bytes_and_its_tls_is_still_terminated() {
    // SSH to a forge beside its HTTPS token: refused (`secret_needs_tls`)
    // unless the owner names the port; then spliced as it is, while TLS
    // naming the host on that port is still terminated and scrubbed.
    let run = Run::start(Other::Plain);
    let other = format!("api.test:{}", run.other());
    run.store_through_own_port();
    let (answer, shown) = run.load(&other).expect("answered");
    assert!(shown != run.store.cert_der, "spliced TLS naming the host");
    assert!(!answer.contains(VALUE), "{answer}");
    let mut tcp = run.not_tls(&other);
    let mut head = [0u8; 12];
    let _ = tcp.read_exact(&mut head);
    assert_eq!(
        &head,
        b"HTTP/1.1 200",
        "{:?}",
        String::from_utf8_lossy(&head)
    );
    drop(tcp);
    std::thread::sleep(Duration::from_millis(300));
    let heard = run.heard.0.lock().unwrap();
    assert!(
        !heard.iter().any(|d| d.port == run.other()
            && d.reason.as_ref().map(|c| c.reason.code()) == Some("secret_needs_tls")),
        "{heard:?}"
    );
}
