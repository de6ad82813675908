//! Secrets that never enter the sandbox. The sandbox holds a placeholder
//! (`warden-secret-<32 hex>`); for each secret's own hosts the proxy
//! terminates TLS with a certificate of a per-sandbox authority, reads the
//! requests (HTTP/1.1 or HTTP/2), puts the real value where the placeholder
//! stands, sends the request on over a new TLS connection verified against
//! the system's roots, and scrubs the real value from the responses.
//!
//! A placeholder going anywhere else, and a real value leaving from inside,
//! are blocked. The authority's key and the real values live in the
//! supervisor's memory only; nothing here writes them anywhere, and no
//! decision or message carries a value.

use crate::decision::{Decision, Protocol, SecretAction};
use crate::matcher::Matcher;
use base64::Engine;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::{Body, Frame, Incoming};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use rustls::sign::CertifiedKey;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use warden_policy::{DomainRule, SecretRule};

/// What every placeholder starts with: unmistakable for real data.
pub const PLACEHOLDER_PREFIX: &str = "warden-secret-";
/// Request bodies read whole for substitution (`--secret-in-body`) are at
/// most this large; larger ones are refused with 413.
const MAX_SUBSTITUTED_BODY: usize = 16 << 20;
/// Encoded forms of a value shorter than this are not looked for: too
/// likely to occur by chance.
const MIN_FORM: usize = 8;

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type OutBody = http_body_util::combinators::BoxBody<Bytes, BoxError>;
/// Records a decision in the proxy's log.
pub(crate) type Recorder = Arc<dyn Fn(Decision) + Send + Sync>;

/// Why the secret proxy could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    #[error("cannot read random bytes for a placeholder from /dev/urandom")]
    Random(#[source] std::io::Error),
    #[error("cannot make the sandbox's certificate authority")]
    Authority(#[source] rcgen::Error),
    #[error("cannot read --upstream-ca {path}")]
    UpstreamCa {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("--upstream-ca {0} holds no PEM certificate; give a file with -----BEGIN CERTIFICATE----- blocks")]
    NoCertificate(PathBuf),
    #[error("--upstream-ca {path}: a certificate cannot be trusted")]
    BadCertificate {
        path: PathBuf,
        #[source]
        source: rustls::Error,
    },
    #[error("no authority to verify upstream servers with: the system has no root certificates and no --upstream-ca was given")]
    NoRoots,
    #[error("cannot configure TLS for the secret proxy")]
    Tls(#[source] rustls::Error),
}

/// A fresh placeholder: `warden-secret-` and 32 hexadecimal digits from
/// the kernel's random source.
pub fn placeholder() -> Result<String, SecretError> {
    let mut bytes = [0u8; 16];
    std::io::Read::read_exact(
        &mut std::fs::File::open("/dev/urandom").map_err(SecretError::Random)?,
        &mut bytes,
    )
    .map_err(SecretError::Random)?;
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    Ok(format!("{PLACEHOLDER_PREFIX}{hex}"))
}

/// One secret with its real value. The value is zeroed when dropped and
/// never printed.
pub struct Secret {
    pub name: String,
    pub placeholder: String,
    value: Vec<u8>,
    hosts: Matcher,
    in_bodies: bool,
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Secret")
            .field("name", &self.name)
            .field("placeholder", &self.placeholder)
            .field("hosts", &self.hosts.rules())
            .field("in_bodies", &self.in_bodies)
            .finish_non_exhaustive()
    }
}

impl Drop for Secret {
    fn drop(&mut self) {
        zero(&mut self.value);
    }
}

/// Overwrite `bytes` in a way the compiler may not drop as a dead store.
pub fn zero(bytes: &mut [u8]) {
    for b in bytes.iter_mut() {
        // SAFETY: `b` is a valid, aligned, exclusive reference to a byte.
        unsafe { std::ptr::write_volatile(b, 0) };
    }
    std::sync::atomic::compiler_fence(Ordering::SeqCst);
}

impl Secret {
    pub fn new(
        name: String,
        placeholder: String,
        value: Vec<u8>,
        hosts: Vec<DomainRule>,
        in_bodies: bool,
    ) -> Secret {
        Secret {
            name,
            placeholder,
            value,
            hosts: Matcher::new(hosts),
            in_bodies,
        }
    }

    fn covers(&self, name: &str, port: u16) -> bool {
        self.hosts.allows(name, port).is_some()
    }
}

/// The per-sandbox authority: a self-signed CA made at start, and the leaf
/// certificates it signs for the secrets' hosts, made on first use.
struct Authority {
    cert: rcgen::Certificate,
    key: rcgen::KeyPair,
    leaves: Mutex<HashMap<String, Arc<CertifiedKey>>>,
}

impl std::fmt::Debug for Authority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Authority")
    }
}

impl Authority {
    fn generate() -> Result<Authority, rcgen::Error> {
        let key = rcgen::KeyPair::generate()?;
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new())?;
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Constrained(0));
        params.distinguished_name.push(
            rcgen::DnType::CommonName,
            "warden sandbox secrets (this run only)",
        );
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, "warden");
        params.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::CrlSign,
            rcgen::KeyUsagePurpose::DigitalSignature,
        ];
        set_validity(&mut params);
        let cert = params.self_signed(&key)?;
        Ok(Authority {
            cert,
            key,
            leaves: Mutex::new(HashMap::new()),
        })
    }

    fn leaf(&self, name: &str) -> Option<Arc<CertifiedKey>> {
        if let Some(k) = self.leaves.lock().ok()?.get(name) {
            return Some(k.clone());
        }
        let key = rcgen::KeyPair::generate().ok()?;
        let mut params = rcgen::CertificateParams::new(vec![name.to_string()]).ok()?;
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        params.is_ca = rcgen::IsCa::NoCa;
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
        params.key_usages = vec![rcgen::KeyUsagePurpose::DigitalSignature];
        set_validity(&mut params);
        let cert = params.signed_by(&key, &self.cert, &self.key).ok()?;
        let der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        let signer = rustls::crypto::ring::sign::any_supported_type(&der).ok()?;
        let certified = Arc::new(CertifiedKey::new(
            vec![cert.der().clone(), self.cert.der().clone()],
            signer,
        ));
        self.leaves
            .lock()
            .ok()?
            .insert(name.to_string(), certified.clone());
        Some(certified)
    }
}

/// Valid from a day back (clocks differ) to thirty days ahead.
fn set_validity(params: &mut rcgen::CertificateParams) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    let (y, m, d) = civil(now - 86_400);
    params.not_before = rcgen::date_time_ymd(y, m, d);
    let (y, m, d) = civil(now + 30 * 86_400);
    params.not_after = rcgen::date_time_ymd(y, m, d);
}

/// Seconds since the epoch as a calendar date (Howard Hinnant's algorithm).
fn civil(secs: i64) -> (i32, u8, u8) {
    let days = secs.div_euclid(86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u8;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u8;
    let y = (yoe + era * 400 + i64::from(m <= 2)) as i32;
    (y, m, d)
}

#[derive(Debug)]
struct LeafResolver(Arc<Authority>);

impl rustls::server::ResolvesServerCert for LeafResolver {
    fn resolve(&self, hello: rustls::server::ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.0.leaf(&hello.server_name()?.to_ascii_lowercase())
    }
}

/// The secrets of one sandbox and the TLS configurations that serve them.
pub struct Terminator {
    secrets: Vec<Secret>,
    /// `--secret-rule`: once a host has rules, only matching requests pass.
    rules: Vec<SecretRule>,
    ca_pem: String,
    server: Arc<rustls::ServerConfig>,
    client: Arc<rustls::ClientConfig>,
    /// What turns real values in responses back into placeholders: the
    /// same for every connection, so made once.
    scrub: Arc<Vec<Pattern>>,
}

impl std::fmt::Debug for Terminator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Terminator")
            .field("secrets", &self.secrets)
            .finish_non_exhaustive()
    }
}

impl Terminator {
    /// Make the sandbox's authority and the TLS configurations: the
    /// sandbox side offers HTTP/2 and HTTP/1.1; upstream servers are
    /// verified against the system's roots and the `upstream_ca` files.
    pub fn new(secrets: Vec<Secret>, upstream_ca: &[PathBuf]) -> Result<Terminator, SecretError> {
        let authority = Arc::new(Authority::generate().map_err(SecretError::Authority)?);
        let ca_pem = authority.cert.pem();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut server = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(SecretError::Tls)?
            .with_no_client_auth()
            .with_cert_resolver(Arc::new(LeafResolver(authority)));
        server.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];

        let mut roots = rustls::RootCertStore::empty();
        let native = rustls_native_certs::load_native_certs();
        roots.add_parsable_certificates(native.certs);
        for path in upstream_ca {
            for cert in read_pem_certs(path)? {
                roots
                    .add(cert)
                    .map_err(|source| SecretError::BadCertificate {
                        path: path.clone(),
                        source,
                    })?;
            }
        }
        if roots.is_empty() {
            return Err(SecretError::NoRoots);
        }
        let mut client = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(SecretError::Tls)?
            .with_root_certificates(roots)
            .with_no_client_auth();
        client.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        let scrub = Arc::new(scrub_patterns(&secrets));
        Ok(Terminator {
            secrets,
            rules: Vec::new(),
            ca_pem,
            server: Arc::new(server),
            client: Arc::new(client),
            scrub,
        })
    }

    /// Allow only requests that match `rules` on the hosts they are for.
    pub fn with_rules(mut self, rules: Vec<SecretRule>) -> Terminator {
        self.rules = rules;
        self
    }

    /// Why no rule allows `method path` on `name:port`, when the host has
    /// rules and none matches.
    fn rule_denies(&self, name: &str, port: u16, method: &str, path: &str) -> Option<String> {
        let rules: Vec<&SecretRule> = self.rules.iter().filter(|r| r.is_for(name, port)).collect();
        if rules.is_empty() || rules.iter().any(|r| r.allows(method, path)) {
            return None;
        }
        let list: Vec<&str> = rules.iter().map(|r| r.source.as_str()).collect();
        Some(format!(
            "denied by --secret-rule: {method} {path} on {name} matches none of its rules ({})",
            list.join("; ")
        ))
    }

    /// The authority's certificate (public), for the sandbox to trust.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// Whether TLS to `name` on `port` is terminated: some secret is for it.
    pub fn terminates(&self, name: &str, port: u16) -> bool {
        self.secrets.iter().any(|s| s.covers(name, port))
    }

    /// A secret whose placeholder appears in `bytes` (a plain request's
    /// head, a name asked for) on its way to `name:port`, which is not one
    /// of that secret's hosts.
    pub fn stray_placeholder(&self, bytes: &[u8], name: &str, port: u16) -> Option<&str> {
        self.secrets
            .iter()
            .find(|s| {
                !s.covers(name, port)
                    && (find(bytes, s.placeholder.as_bytes()).is_some()
                        || find(name.as_bytes(), s.placeholder.as_bytes()).is_some())
            })
            .map(|s| s.name.as_str())
    }

    /// Patterns for requests to `name:port`, in priority order.
    fn outgoing(&self, name: &str, port: u16, place: Place) -> Vec<Pattern> {
        let mut out = Vec::new();
        for (i, s) in self.secrets.iter().enumerate() {
            let own = s.covers(name, port);
            if own {
                let replacement = match place {
                    Place::Header => Some(s.value.clone()),
                    Place::Target => Some(percent_encode(&s.value)),
                    Place::Body if s.in_bodies => Some(s.value.clone()),
                    Place::Body => None,
                };
                if let Some(to) = replacement {
                    out.push(Pattern {
                        from: s.placeholder.as_bytes().to_vec(),
                        action: Action::Replace(to),
                        secret: i,
                    });
                }
            } else {
                for from in std::iter::once(s.placeholder.as_bytes().to_vec())
                    .chain(base64_forms(s.placeholder.as_bytes()))
                {
                    out.push(Pattern {
                        from,
                        action: Action::Block(Violation::Placeholder),
                        secret: i,
                    });
                }
            }
            for from in value_forms(&s.value) {
                out.push(Pattern {
                    from,
                    action: Action::Block(Violation::Value),
                    secret: i,
                });
            }
        }
        out
    }
}

/// Patterns that turn real values in responses back into placeholders.
fn scrub_patterns(secrets: &[Secret]) -> Vec<Pattern> {
    let mut out = Vec::new();
    for (i, s) in secrets.iter().enumerate() {
        if s.value.is_empty() {
            continue;
        }
        let p = s.placeholder.as_bytes();
        out.push(Pattern {
            from: s.value.clone(),
            action: Action::Replace(p.to_vec()),
            secret: i,
        });
        for (from, to) in base64_pairs(&s.value, p) {
            out.push(Pattern {
                from,
                action: Action::Replace(to),
                secret: i,
            });
        }
        // Other spellings a server may echo the value in: percent
        // encoding in either case, JSON's escapes (`\/`, `\u00XX`),
        // hexadecimal.
        let mut forms = vec![
            percent_encode(&s.value),
            percent_encode(&s.value).to_ascii_lowercase(),
        ];
        forms.push(json_escape(&s.value, false));
        forms.push(json_escape(&s.value, true));
        let hex: String = s.value.iter().map(|b| format!("{b:02x}")).collect();
        forms.push(hex.clone().into_bytes());
        forms.push(hex.to_ascii_uppercase().into_bytes());
        forms.sort();
        forms.dedup();
        for from in forms {
            if from != s.value && from.len() >= MIN_FORM {
                out.push(Pattern {
                    from,
                    action: Action::Replace(p.to_vec()),
                    secret: i,
                });
            }
        }
    }
    out
}

fn read_pem_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, SecretError> {
    let data = std::fs::read(path).map_err(|source| SecretError::UpstreamCa {
        path: path.to_path_buf(),
        source,
    })?;
    let certs: Vec<CertificateDer<'static>> = rustls_pemfile::certs(&mut data.as_slice())
        .collect::<Result<_, _>>()
        .map_err(|source| SecretError::UpstreamCa {
            path: path.to_path_buf(),
            source,
        })?;
    if certs.is_empty() {
        return Err(SecretError::NoCertificate(path.to_path_buf()));
    }
    Ok(certs)
}

/// Where in a request bytes stand: how a substituted value is written.
#[derive(Clone, Copy)]
enum Place {
    Header,
    /// The request target: the value is percent-encoded.
    Target,
    Body,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Violation {
    /// A secret's placeholder on its way to a host that is not its own.
    Placeholder,
    /// A secret's real value leaving from inside the sandbox.
    Value,
}

#[derive(Debug, Clone)]
enum Action {
    Replace(Vec<u8>),
    Block(Violation),
}

#[derive(Debug, Clone)]
struct Pattern {
    from: Vec<u8>,
    action: Action,
    secret: usize,
}

impl Drop for Pattern {
    fn drop(&mut self) {
        // Forms of real values: erased when no longer needed.
        zero(&mut self.from);
        if let Action::Replace(to) = &mut self.action {
            zero(to);
        }
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() || needle.len() > hay.len() {
        return None;
    }
    hay.windows(needle.len()).position(|w| w == needle)
}

/// `v` as a JSON string's content: `/` as `\/` (PHP's default), or, with
/// `all`, every byte but letters and digits as `\u00XX`.
fn json_escape(v: &[u8], all: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(v.len() * 2);
    for &b in v {
        if all && !b.is_ascii_alphanumeric() {
            out.extend_from_slice(format!("\\u{b:04x}").as_bytes());
        } else if b == b'/' {
            out.extend_from_slice(b"\\/");
        } else {
            out.push(b);
        }
    }
    out
}

/// Every byte but the unreserved ones (RFC 3986) as `%XX`.
fn percent_encode(v: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(v.len());
    for &b in v {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b);
        } else {
            out.extend_from_slice(format!("%{b:02X}").as_bytes());
        }
    }
    out
}

/// The part of `v`'s base64 encoding that does not depend on the bytes
/// around it, for each of the three alignments `v` can have in a longer
/// encoded string (as in `Basic base64(user:value)`), in the standard
/// and the URL-safe alphabets.
fn base64_forms(v: &[u8]) -> Vec<Vec<u8>> {
    base64_pairs(v, v).into_iter().map(|(f, _)| f).collect()
}

/// [`base64_forms`] of `from`, each with the same form of `to`.
fn base64_pairs(from: &[u8], to: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut out = Vec::new();
    let middle = |engine: &base64::engine::GeneralPurpose, v: &[u8], k: usize| {
        let mut data = vec![0u8; k];
        data.extend_from_slice(v);
        let enc = engine.encode(&data).into_bytes();
        let start = (8 * k).div_ceil(6);
        let end = (8 * (k + v.len()) / 6).min(enc.len());
        enc.get(start..end).map(<[u8]>::to_vec).unwrap_or_default()
    };
    for engine in [
        &base64::engine::general_purpose::STANDARD,
        &base64::engine::general_purpose::URL_SAFE,
    ] {
        for k in 0..3 {
            let f = middle(engine, from, k);
            if f.len() >= MIN_FORM && !out.iter().any(|(o, _)| *o == f) {
                out.push((f, middle(engine, to, k)));
            }
        }
    }
    out
}

/// A real value as it may appear in a request: raw, percent-encoded and
/// base64-encoded.
fn value_forms(v: &[u8]) -> Vec<Vec<u8>> {
    if v.len() < 6 {
        return Vec::new();
    }
    let mut out = vec![v.to_vec()];
    let pct = percent_encode(v);
    if pct != v {
        out.push(pct);
    }
    out.extend(base64_forms(v));
    out
}

/// A blocked pattern was found.
#[derive(Debug, Clone, Copy)]
struct Blocked {
    secret: usize,
    violation: Violation,
}

/// Applies patterns to a stream of bytes: replaces, or stops at a blocked
/// pattern. Holds back as many bytes as the longest pattern could still
/// need.
struct Rewriter {
    patterns: Arc<Vec<Pattern>>,
    pending: Vec<u8>,
    longest: usize,
    /// Bytes some pattern starts with: every other byte passes at once.
    firsts: [bool; 256],
    /// Secrets whose pattern was replaced at least once.
    replaced: Vec<usize>,
}

impl Rewriter {
    fn new(patterns: Arc<Vec<Pattern>>) -> Rewriter {
        let longest = patterns.iter().map(|p| p.from.len()).max().unwrap_or(0);
        let mut firsts = [false; 256];
        for p in patterns.iter() {
            if let Some(&b) = p.from.first() {
                firsts[b as usize] = true;
            }
        }
        Rewriter {
            patterns,
            pending: Vec::new(),
            longest,
            firsts,
            replaced: Vec::new(),
        }
    }

    /// Whole input at once.
    fn all(patterns: Arc<Vec<Pattern>>, input: &[u8]) -> Result<(Vec<u8>, Vec<usize>), Blocked> {
        let mut r = Rewriter::new(patterns);
        let mut out = r.push(input)?;
        out.extend(r.finish()?);
        Ok((out, r.replaced))
    }

    fn push(&mut self, data: &[u8]) -> Result<Vec<u8>, Blocked> {
        self.pending.extend_from_slice(data);
        self.run(false)
    }

    fn finish(&mut self) -> Result<Vec<u8>, Blocked> {
        self.run(true)
    }

    fn run(&mut self, last: bool) -> Result<Vec<u8>, Blocked> {
        let buf = std::mem::take(&mut self.pending);
        let mut out = Vec::with_capacity(buf.len());
        let mut i = 0;
        'outer: while i < buf.len() {
            if !last && buf.len() - i < self.longest {
                break;
            }
            if !self.firsts[buf[i] as usize] {
                out.push(buf[i]);
                i += 1;
                continue;
            }
            let rest = &buf[i..];
            for p in self.patterns.iter() {
                if rest.starts_with(&p.from) {
                    match &p.action {
                        Action::Block(v) => {
                            return Err(Blocked {
                                secret: p.secret,
                                violation: *v,
                            })
                        }
                        Action::Replace(to) => {
                            out.extend_from_slice(to);
                            if !self.replaced.contains(&p.secret) {
                                self.replaced.push(p.secret);
                            }
                            i += p.from.len();
                            continue 'outer;
                        }
                    }
                }
            }
            out.push(buf[i]);
            i += 1;
        }
        self.pending = buf[i..].to_vec();
        Ok(out)
    }
}

/// Header values passed through `patterns` one by one: a value that a
/// pattern blocks is left out. Returns the new map and the secrets
/// replaced.
fn rewrite_headers(
    patterns: &Arc<Vec<Pattern>>,
    headers: &http::HeaderMap,
) -> (http::HeaderMap, Vec<usize>) {
    let mut out = http::HeaderMap::new();
    let mut replaced = Vec::new();
    for (k, v) in headers.iter() {
        if let Ok((bytes, r)) = Rewriter::all(patterns.clone(), v.as_bytes()) {
            replaced.extend(r);
            if let Ok(v) = http::HeaderValue::from_bytes(&bytes) {
                out.append(k.clone(), v);
            }
        }
    }
    (out, replaced)
}

/// Told once which secrets a body had replaced.
type OnReplace = Box<dyn FnOnce(&[usize]) + Send + Sync>;
/// Told what stopped a body.
type OnBlock = Box<dyn FnOnce(Blocked) + Send + Sync>;

/// A body passed through a [`Rewriter`]; a blocked pattern ends it with an
/// error (the request or response is cut off), reported through `on_block`.
struct RewriteBody {
    inner: OutBody,
    rw: Rewriter,
    done: bool,
    trailers: Option<Frame<Bytes>>,
    /// Trailers are dropped (a request's: they are not looked into).
    drop_trailers: bool,
    on_replace: Option<OnReplace>,
    on_block: Option<OnBlock>,
}

impl Body for RewriteBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        loop {
            if this.done {
                return Poll::Ready(this.trailers.take().map(Ok));
            }
            let step = match Pin::new(&mut this.inner).poll_frame(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e))),
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) => this.rw.push(&data),
                    Err(other) => {
                        this.done = true;
                        // Trailers pass through the same patterns as the
                        // body (an echoing server may put the value there);
                        // a value that would be blocked is left out.
                        this.trailers = if this.drop_trailers {
                            None
                        } else {
                            other.into_trailers().ok().map(|t| {
                                let (map, replaced) = rewrite_headers(&this.rw.patterns, &t);
                                this.rw.replaced.extend(replaced);
                                Frame::trailers(map)
                            })
                        };
                        this.rw.finish()
                    }
                },
                Poll::Ready(None) => {
                    this.done = true;
                    this.rw.finish()
                }
            };
            match step {
                Err(b) => {
                    this.done = true;
                    this.trailers = None;
                    if let Some(f) = this.on_block.take() {
                        f(b);
                    }
                    return Poll::Ready(Some(Err("warden: blocked a secret in the body".into())));
                }
                Ok(out) => {
                    if !this.rw.replaced.is_empty() {
                        if let Some(f) = this.on_replace.take() {
                            f(&this.rw.replaced);
                        }
                    }
                    if !out.is_empty() {
                        return Poll::Ready(Some(Ok(Frame::data(Bytes::from(out)))));
                    }
                }
            }
        }
    }
}

/// Counts the bytes a stream moves, both ways.
pub(crate) struct Counted<S> {
    inner: S,
    /// Bytes before `inner`'s own (what was read to decide).
    prefix: Vec<u8>,
    pub(crate) read: Arc<AtomicU64>,
    pub(crate) written: Arc<AtomicU64>,
    /// Milliseconds since `start` of the last byte either way.
    last: Arc<AtomicU64>,
    start: std::time::Instant,
}

impl<S> Counted<S> {
    pub(crate) fn new(inner: S, prefix: Vec<u8>) -> Counted<S> {
        Counted {
            inner,
            prefix,
            read: Arc::new(AtomicU64::new(0)),
            written: Arc::new(AtomicU64::new(0)),
            last: Arc::new(AtomicU64::new(0)),
            start: std::time::Instant::now(),
        }
    }

    fn touch(&self) {
        self.last
            .store(self.start.elapsed().as_millis() as u64, Ordering::Relaxed);
    }
}

/// Resolves once neither way has moved a byte for `idle`.
async fn silent_for(last: Arc<AtomicU64>, start: std::time::Instant, idle: std::time::Duration) {
    loop {
        let since =
            (start.elapsed().as_millis() as u64).saturating_sub(last.load(Ordering::Relaxed));
        let idle_ms = idle.as_millis() as u64;
        if since >= idle_ms {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(idle_ms - since)).await;
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Counted<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if !self.prefix.is_empty() {
            let n = self.prefix.len().min(buf.remaining());
            buf.put_slice(&self.prefix[..n]);
            self.prefix.drain(..n);
            self.read.fetch_add(n as u64, Ordering::Relaxed);
            self.touch();
            return Poll::Ready(Ok(()));
        }
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        let n = buf.filled().len() - before;
        if n > 0 {
            self.read.fetch_add(n as u64, Ordering::Relaxed);
            self.touch();
        }
        r
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Counted<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = &r {
            self.written.fetch_add(*n as u64, Ordering::Relaxed);
            self.touch();
        }
        r
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

enum Sender {
    H1(tokio::sync::Mutex<hyper::client::conn::http1::SendRequest<OutBody>>),
    H2(hyper::client::conn::http2::SendRequest<OutBody>),
}

/// One terminated connection: where it goes, and how to reach it.
struct Session {
    term: Arc<Terminator>,
    name: String,
    port: u16,
    upstream: Result<Sender, String>,
    record: Recorder,
    head: Arc<Vec<Pattern>>,
    target: Arc<Vec<Pattern>>,
    body: Arc<Vec<Pattern>>,
    scrub: Arc<Vec<Pattern>>,
    /// Some secret of this host is substituted in bodies.
    body_substitution: bool,
}

impl Session {
    fn decision(&self, secret: usize, action: SecretAction, detail: String) -> Decision {
        Decision {
            protocol: Protocol::Secret(action),
            name: Some(self.name.clone()),
            port: self.port,
            original_destination: None,
            allowed: action != SecretAction::Blocked,
            rule: self.term.secrets.get(secret).map(|s| s.name.clone()),
            detail,
            bytes_out: 0,
            bytes_in: 0,
            duration_ms: 0,
        }
    }

    fn blocked_why(&self, b: Blocked) -> String {
        let name = self
            .term
            .secrets
            .get(b.secret)
            .map(|s| s.name.as_str())
            .unwrap_or("?");
        match b.violation {
            Violation::Placeholder => format!(
                "blocked: the placeholder of secret {name} in a request to {}, which is not one of its hosts",
                self.name
            ),
            Violation::Value => format!(
                "blocked: the real value of secret {name} in a request from inside the sandbox"
            ),
        }
    }

    fn block(&self, b: Blocked) -> Response<OutBody> {
        let why = self.blocked_why(b);
        (self.record)(self.decision(b.secret, SecretAction::Blocked, why.clone()));
        text(StatusCode::FORBIDDEN, format!("warden: {why}\n"))
    }
}

fn text(status: StatusCode, body: String) -> Response<OutBody> {
    let mut r = Response::new(
        Full::new(Bytes::from(body))
            .map_err(|never| match never {})
            .boxed(),
    );
    *r.status_mut() = status;
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain"),
    );
    r
}

/// Headers of one hop only, never passed on.
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// Serve one connection from the sandbox whose TLS is terminated here:
/// `client` (with the bytes already read to decide) towards `upstream`, a
/// TCP connection to `name:port` already made. Returns the bytes read from
/// and written to the sandbox. The connection is closed after `idle`
/// without a byte either way.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn serve(
    term: Arc<Terminator>,
    client: TcpStream,
    first: Vec<u8>,
    upstream: TcpStream,
    name: String,
    port: u16,
    record: Recorder,
    idle: std::time::Duration,
) -> Result<(u64, u64), String> {
    let counted = Counted::new(client, first);
    let (read, written) = (counted.read.clone(), counted.written.clone());
    let (last, start) = (counted.last.clone(), counted.start);
    let acceptor = tokio_rustls::TlsAcceptor::from(term.server.clone());
    let tls = acceptor.accept(counted).await.map_err(|e| {
        format!("the sandbox did not accept the secret proxy's certificate for {name} (is the sandbox's trust bundle in use?): {e}")
    })?;
    let upstream = connect_tls(&term, upstream, &name).await;
    let session = Arc::new(Session {
        head: Arc::new(term.outgoing(&name, port, Place::Header)),
        target: Arc::new(term.outgoing(&name, port, Place::Target)),
        body: Arc::new(term.outgoing(&name, port, Place::Body)),
        scrub: term.scrub.clone(),
        body_substitution: term
            .secrets
            .iter()
            .any(|s| s.in_bodies && s.covers(&name, port)),
        term,
        name,
        port,
        upstream,
        record,
    });
    let service = hyper::service::service_fn(move |req| {
        let s = session.clone();
        async move { Ok::<_, std::convert::Infallible>(handle(req, &s).await) }
    });
    let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    let connection = builder.serve_connection(TokioIo::new(tls), service);
    let served = tokio::select! {
        r = connection => r.map_err(|e| format!("the terminated connection ended with an error: {e}")),
        () = silent_for(last, start, idle) => Err(format!("closed after {} s without a byte either way", idle.as_secs())),
    };
    let counts = (
        read.load(Ordering::Relaxed),
        written.load(Ordering::Relaxed),
    );
    served.map(|()| counts)
}

async fn connect_tls(term: &Terminator, upstream: TcpStream, name: &str) -> Result<Sender, String> {
    let server_name = ServerName::try_from(name.to_string())
        .map_err(|e| format!("{name} is not a TLS server name: {e}"))?;
    let tls = tokio_rustls::TlsConnector::from(term.client.clone())
        .connect(server_name, upstream)
        .await
        .map_err(|e| format!("TLS to the upstream {name} failed: {e}"))?;
    let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
    let io = TokioIo::new(tls);
    if h2 {
        let (sender, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), io)
            .await
            .map_err(|e| format!("HTTP/2 to the upstream {name} failed: {e}"))?;
        tokio::spawn(conn);
        Ok(Sender::H2(sender))
    } else {
        let (sender, conn) = hyper::client::conn::http1::handshake(io)
            .await
            .map_err(|e| format!("HTTP/1.1 to the upstream {name} failed: {e}"))?;
        tokio::spawn(conn);
        Ok(Sender::H1(tokio::sync::Mutex::new(sender)))
    }
}

async fn handle(req: Request<Incoming>, s: &Arc<Session>) -> Response<OutBody> {
    let upstream = match &s.upstream {
        Ok(u) => u,
        Err(why) => return text(StatusCode::BAD_GATEWAY, format!("warden: {why}\n")),
    };
    let (mut parts, body) = req.into_parts();
    if let Some(why) = s
        .term
        .rule_denies(&s.name, s.port, parts.method.as_str(), parts.uri.path())
    {
        (s.record)(Decision {
            protocol: Protocol::Request,
            name: Some(s.name.clone()),
            port: s.port,
            original_destination: None,
            allowed: false,
            rule: None,
            detail: why.clone(),
            bytes_out: 0,
            bytes_in: 0,
            duration_ms: 0,
        });
        return text(StatusCode::FORBIDDEN, format!("warden: {why}\n"));
    }

    // The target: path and query, substituted percent-encoded.
    let target = parts
        .uri
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "/".into());
    let mut substituted: Vec<usize> = Vec::new();
    let target = match Rewriter::all(s.target.clone(), target.as_bytes()) {
        Ok((t, r)) => {
            substituted.extend(r);
            t
        }
        Err(b) => return s.block(b),
    };
    let Ok(target) = String::from_utf8(target) else {
        return text(
            StatusCode::BAD_REQUEST,
            "warden: bad request target\n".into(),
        );
    };
    let authority = parts
        .uri
        .authority()
        .map(|a| a.to_string())
        .or_else(|| {
            parts
                .headers
                .get(http::header::HOST)
                .and_then(|h| h.to_str().ok())
                .map(str::to_string)
        })
        .unwrap_or_else(|| s.name.clone());
    if let Err(b) = Rewriter::all(s.head.clone(), authority.as_bytes()) {
        return s.block(b);
    }
    // The request goes to this connection's host and no other: a server
    // that routes on Host (a CDN, a shared front) must not take a
    // substituted value to another of its tenants.
    let asked = authority_host(&authority);
    if !asked.eq_ignore_ascii_case(&s.name) {
        let why = format!(
            "a request for {asked} on the connection to {}: secrets go only where the connection goes",
            s.name
        );
        (s.record)(Decision {
            protocol: Protocol::Request,
            name: Some(s.name.clone()),
            port: s.port,
            original_destination: None,
            allowed: false,
            rule: None,
            detail: why.clone(),
            bytes_out: 0,
            bytes_in: 0,
            duration_ms: 0,
        });
        return text(StatusCode::MISDIRECTED_REQUEST, format!("warden: {why}\n"));
    }

    // Headers: substituted, Basic credentials decoded first.
    let mut headers = http::HeaderMap::new();
    for (k, v) in parts.headers.iter() {
        let key = k.as_str();
        if HOP_BY_HOP.contains(&key) || key == "host" || key == "accept-encoding" {
            continue;
        }
        let (value, r) = match rewrite_header(s, k, v.as_bytes()) {
            Ok(x) => x,
            Err(b) => return s.block(b),
        };
        substituted.extend(r);
        let Ok(value) = http::HeaderValue::from_bytes(&value) else {
            return text(
                StatusCode::BAD_GATEWAY,
                format!("warden: a secret's value cannot stand in the {key} header\n"),
            );
        };
        headers.append(k.clone(), value);
    }

    // The body: read whole when a secret is substituted in it, else
    // streamed and watched.
    let body: OutBody = if s.body_substitution && !body.is_end_stream() {
        let limited = http_body_util::Limited::new(body, MAX_SUBSTITUTED_BODY);
        let bytes = match limited.collect().await {
            Ok(c) => c.to_bytes(),
            Err(_) => {
                return text(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    format!("warden: a request body with a secret substituted in it may be at most {MAX_SUBSTITUTED_BODY} bytes\n"),
                )
            }
        };
        match Rewriter::all(s.body.clone(), &bytes) {
            Ok((b, r)) => {
                substituted.extend(r);
                headers.remove(http::header::CONTENT_LENGTH);
                if let Ok(v) = http::HeaderValue::from_str(&b.len().to_string()) {
                    headers.insert(http::header::CONTENT_LENGTH, v);
                }
                Full::new(Bytes::from(b))
                    .map_err(|never| match never {})
                    .boxed()
            }
            Err(b) => return s.block(b),
        }
    } else {
        let watch = s.clone();
        RewriteBody {
            inner: body.map_err(|e| Box::new(e) as BoxError).boxed(),
            rw: Rewriter::new(s.body.clone()),
            done: false,
            trailers: None,
            drop_trailers: true,
            on_replace: None,
            on_block: Some(Box::new(move |b| {
                let why = watch.blocked_why(b);
                (watch.record)(watch.decision(b.secret, SecretAction::Blocked, why));
            })),
        }
        .boxed()
    };
    substituted.sort_unstable();
    substituted.dedup();
    for i in &substituted {
        (s.record)(s.decision(
            *i,
            SecretAction::Substituted,
            format!("substituted in {} {}", parts.method, parts.uri.path()),
        ));
    }

    let h2 = matches!(upstream, Sender::H2(_));
    let uri = if h2 {
        format!("https://{authority}{target}")
    } else {
        target.clone()
    };
    let Ok(uri) = uri.parse::<http::Uri>() else {
        return text(
            StatusCode::BAD_REQUEST,
            "warden: bad request target\n".into(),
        );
    };
    if !h2 {
        if let Ok(v) = http::HeaderValue::from_str(&authority) {
            headers.insert(http::header::HOST, v);
        }
    }
    parts.uri = uri;
    parts.headers = headers;
    parts.version = if h2 {
        http::Version::HTTP_2
    } else {
        http::Version::HTTP_11
    };
    let method_is_head = parts.method == http::Method::HEAD;
    let request = Request::from_parts(parts, body);
    let response = match upstream {
        Sender::H2(sender) => sender.clone().send_request(request).await,
        Sender::H1(sender) => {
            let mut sender = sender.lock().await;
            match sender.ready().await {
                Ok(()) => sender.send_request(request).await,
                Err(e) => Err(e),
            }
        }
    };
    let response = match response {
        Ok(r) => r,
        Err(e) => {
            return text(
                StatusCode::BAD_GATEWAY,
                format!("warden: the request to {} failed: {e}\n", s.name),
            )
        }
    };
    scrub_response(s, response, method_is_head)
}

/// The host of an authority (`host`, `host:port`, `[v6]:port`), without a
/// trailing dot.
fn authority_host(authority: &str) -> &str {
    let host = match authority.strip_prefix('[') {
        Some(rest) => rest.split(']').next().unwrap_or(rest),
        None => authority.rsplit_once(':').map_or(authority, |(h, _)| h),
    };
    host.strip_suffix('.').unwrap_or(host)
}

fn rewrite_header(
    s: &Session,
    key: &http::HeaderName,
    value: &[u8],
) -> Result<(Vec<u8>, Vec<usize>), Blocked> {
    if key == http::header::AUTHORIZATION {
        if let Some(encoded) = value
            .strip_prefix(b"Basic ")
            .or_else(|| value.strip_prefix(b"basic "))
        {
            let engine = &base64::engine::general_purpose::STANDARD;
            if let Ok(mut decoded) = engine.decode(encoded.trim_ascii()) {
                let r = Rewriter::all(s.head.clone(), &decoded);
                zero(&mut decoded);
                let (mut plain, replaced) = r?;
                let mut out = b"Basic ".to_vec();
                out.extend_from_slice(engine.encode(&plain).as_bytes());
                zero(&mut plain);
                return Ok((out, replaced));
            }
        }
    }
    Rewriter::all(s.head.clone(), value)
}

fn scrub_response(s: &Arc<Session>, response: Response<Incoming>, head: bool) -> Response<OutBody> {
    // The request asked for no encoding (Accept-Encoding is dropped): a
    // compressed body would hide a value from the scrubber, so it does not
    // reach the sandbox.
    let encoded = response
        .headers()
        .get_all(http::header::CONTENT_ENCODING)
        .iter()
        .any(|v| !v.as_bytes().eq_ignore_ascii_case(b"identity"));
    if encoded && !head {
        for i in 0..s.term.secrets.len() {
            (s.record)(s.decision(
                i,
                SecretAction::Blocked,
                "a compressed response from a secret's host was withheld (it could not be checked for the value)".into(),
            ));
        }
        return text(
            StatusCode::BAD_GATEWAY,
            "warden: the server compressed its response although none was asked for; warden cannot check it for secrets, so it is withheld\n".into(),
        );
    }
    let (mut parts, body) = response.into_parts();
    let mut scrubbed: Vec<usize> = Vec::new();
    let mut headers = http::HeaderMap::new();
    for (k, v) in parts.headers.iter() {
        if HOP_BY_HOP.contains(&k.as_str()) {
            continue;
        }
        match Rewriter::all(s.scrub.clone(), v.as_bytes()) {
            Ok((out, r)) => {
                scrubbed.extend(r);
                if let Ok(v) = http::HeaderValue::from_bytes(&out) {
                    headers.append(k.clone(), v);
                }
            }
            Err(_) => continue,
        }
    }
    // Scrubbing may change the body's length; the length is then left to
    // the framing (chunked, or the end of an HTTP/2 stream).
    let changes_length = s.scrub.iter().any(|p| match &p.action {
        Action::Replace(to) => to.len() != p.from.len(),
        Action::Block(_) => false,
    });
    if changes_length && !head {
        headers.remove(http::header::CONTENT_LENGTH);
    }
    scrubbed.sort_unstable();
    scrubbed.dedup();
    for i in &scrubbed {
        (s.record)(s.decision(
            *i,
            SecretAction::Scrubbed,
            "scrubbed from a response header".into(),
        ));
    }
    parts.headers = headers;
    let watch = s.clone();
    let body = RewriteBody {
        inner: body.map_err(|e| Box::new(e) as BoxError).boxed(),
        rw: Rewriter::new(s.scrub.clone()),
        done: false,
        trailers: None,
        drop_trailers: false,
        on_replace: Some(Box::new(move |secrets: &[usize]| {
            for i in secrets {
                (watch.record)(watch.decision(
                    *i,
                    SecretAction::Scrubbed,
                    "scrubbed from a response body".into(),
                ));
            }
        })),
        on_block: None,
    }
    .boxed();
    Response::from_parts(parts, body)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pats(list: &[(&str, Option<&str>)]) -> Arc<Vec<Pattern>> {
        Arc::new(
            list.iter()
                .enumerate()
                .map(|(i, (from, to))| Pattern {
                    from: from.as_bytes().to_vec(),
                    action: match to {
                        Some(t) => Action::Replace(t.as_bytes().to_vec()),
                        None => Action::Block(Violation::Value),
                    },
                    secret: i,
                })
                .collect(),
        )
    }

    #[test]
    fn a_placeholder_is_unmistakable_and_unique() {
        let a = placeholder().unwrap();
        let b = placeholder().unwrap();
        assert_ne!(a, b);
        assert_eq!(a.len(), PLACEHOLDER_PREFIX.len() + 32);
        assert!(a.starts_with(PLACEHOLDER_PREFIX));
        assert!(a[PLACEHOLDER_PREFIX.len()..]
            .bytes()
            .all(|c| c.is_ascii_hexdigit()));
    }

    #[test]
    fn a_pattern_split_across_chunks_is_still_replaced() {
        let p = pats(&[("PLACEHOLDER", Some("value"))]);
        let mut r = Rewriter::new(p.clone());
        let mut out = Vec::new();
        for chunk in [&b"abc PLACE"[..], b"HOLD", b"ER def PLA", b"CEHOLDER"] {
            out.extend(r.push(chunk).unwrap());
        }
        out.extend(r.finish().unwrap());
        assert_eq!(out, b"abc value def value");
        assert_eq!(r.replaced, [0]);
        let (whole, _) = Rewriter::all(p, b"no match here, PLACEHOLDE").unwrap();
        assert_eq!(whole, b"no match here, PLACEHOLDE");
    }

    #[test]
    fn a_blocked_pattern_stops_the_stream() {
        let p = pats(&[("ok", Some("OK")), ("leak-value", None)]);
        let mut r = Rewriter::new(p);
        assert!(r.push(b"ok then leak-").is_ok());
        let e = r.push(b"value!").unwrap_err();
        assert_eq!(e.secret, 1);
    }

    #[test]
    fn base64_forms_find_a_value_inside_basic_credentials() {
        let engine = &base64::engine::general_purpose::STANDARD;
        let value = b"s3cr3t-token-value";
        for user in ["u", "us", "use", "someone"] {
            let mut plain = format!("{user}:").into_bytes();
            plain.extend_from_slice(value);
            let encoded = engine.encode(&plain);
            assert!(
                base64_forms(value)
                    .iter()
                    .any(|f| find(encoded.as_bytes(), f).is_some()),
                "{user}"
            );
        }
        // Scrubbed to the placeholder's form at the same alignment: the
        // decoded echo holds the placeholder where the value was.
        let placeholder = b"warden-secret-00112233445566778899aabbccddeeff";
        let mut plain = b"me:".to_vec();
        plain.extend_from_slice(value);
        let encoded = engine.encode(&plain);
        let pairs: Vec<Pattern> = base64_pairs(value, placeholder)
            .into_iter()
            .map(|(from, to)| Pattern {
                from,
                action: Action::Replace(to),
                secret: 0,
            })
            .collect();
        let (out, _) = Rewriter::all(Arc::new(pairs), encoded.as_bytes()).unwrap();
        assert!(base64_forms(value).iter().all(|f| find(&out, f).is_none()));
        let decoded = engine
            .decode(&out)
            .unwrap_or_else(|_| engine.decode(&out[..out.len() / 4 * 4]).unwrap_or_default());
        assert!(
            String::from_utf8_lossy(&decoded).contains("secret-00112233"),
            "{out:?}"
        );
    }

    #[test]
    fn the_host_of_an_authority_is_found() {
        assert_eq!(authority_host("api.example.com"), "api.example.com");
        assert_eq!(authority_host("api.example.com:8443"), "api.example.com");
        assert_eq!(authority_host("api.example.com."), "api.example.com");
        assert_eq!(authority_host("[::1]:443"), "::1");
    }

    #[test]
    fn calendar_dates_are_right() {
        assert_eq!(civil(0), (1970, 1, 1));
        assert_eq!(civil(951_782_400), (2000, 2, 29));
        assert_eq!(civil(1_767_225_600), (2026, 1, 1));
    }

    /// An HTTPS server on 127.0.0.1 for `name` (certificate from a fresh
    /// authority, whose PEM is returned) that answers every request with
    /// its `authorization` header.
    async fn echo_server(name: &str) -> (u16, String) {
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca = ca_params.self_signed(&ca_key).unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec![name.to_string()])
            .unwrap()
            .signed_by(&key, &ca, &ca_key)
            .unwrap();
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![cert.der().clone()],
            PrivateKeyDer::Pkcs8(key.serialize_der().into()),
        )
        .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let service = hyper::service::service_fn(|req: Request<Incoming>| async move {
                        let auth = req
                            .headers()
                            .get("authorization")
                            .map(|v| v.as_bytes().to_vec())
                            .unwrap_or_default();
                        Ok::<_, std::convert::Infallible>(Response::new(Full::new(Bytes::from(
                            auth,
                        ))))
                    });
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(tls), service)
                        .await;
                });
            }
        });
        (port, ca.pem())
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_terminated_connection_substitutes_towards_its_host_and_scrubs_the_echo() {
        let (port, upstream_pem) = echo_server("api.test").await;
        let dir = std::env::temp_dir().join(format!("warden-egress-ca-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let ca_file = dir.join("ca.pem");
        std::fs::write(&ca_file, upstream_pem).unwrap();
        let value = b"real-token-0123456789".to_vec();
        let ph = placeholder().unwrap();
        let rule = DomainRule::parse(&format!("api.test:{port}")).unwrap();
        let term = Arc::new(
            Terminator::new(
                vec![Secret::new(
                    "T".into(),
                    ph.clone(),
                    value.clone(),
                    vec![rule],
                    false,
                )],
                std::slice::from_ref(&ca_file),
            )
            .unwrap(),
        );
        let _ = std::fs::remove_dir_all(&dir);

        // The sandbox's side: a client that trusts the per-sandbox authority.
        let front = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let front_port = front.local_addr().unwrap().port();
        let decisions = Arc::new(Mutex::new(Vec::<Decision>::new()));
        let d = decisions.clone();
        let t = term.clone();
        tokio::spawn(async move {
            let (conn, _) = front.accept().await.unwrap();
            let upstream = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
            let record: Recorder = Arc::new(move |dec| d.lock().unwrap().push(dec));
            let _ = serve(
                t,
                conn,
                Vec::new(),
                upstream,
                "api.test".into(),
                port,
                record,
                std::time::Duration::from_secs(10),
            )
            .await;
        });
        let mut roots = rustls::RootCertStore::empty();
        for c in rustls_pemfile::certs(&mut term.ca_pem().as_bytes()) {
            roots.add(c.unwrap()).unwrap();
        }
        let client = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
        let tcp = TcpStream::connect(("127.0.0.1", front_port)).await.unwrap();
        let tls = tokio_rustls::TlsConnector::from(Arc::new(client))
            .connect(ServerName::try_from("api.test").unwrap(), tcp)
            .await
            .unwrap();
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .unwrap();
        tokio::spawn(conn);
        let req = Request::builder()
            .uri("/")
            .header("host", format!("api.test:{port}"))
            .header("authorization", format!("Bearer {ph}"))
            .body(Full::new(Bytes::new()))
            .unwrap();
        let resp = sender.send_request(req).await.unwrap();
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        // The server saw the value and echoed it; the sandbox sees the
        // placeholder again.
        assert_eq!(body, format!("Bearer {ph}").as_bytes());
        let decisions = decisions.lock().unwrap().clone();
        assert!(decisions
            .iter()
            .any(|d| d.allowed && d.detail.starts_with("substituted")));
        assert!(decisions.iter().any(|d| d.detail.contains("scrubbed")));
    }

    #[test]
    fn the_authority_mints_a_leaf_per_name_once() {
        let a = Authority::generate().unwrap();
        let one = a.leaf("api.example.com").unwrap();
        let again = a.leaf("api.example.com").unwrap();
        assert!(Arc::ptr_eq(&one, &again));
        assert_eq!(one.cert.len(), 2);
        assert!(a.cert.pem().starts_with("-----BEGIN CERTIFICATE-----"));
    }
}
