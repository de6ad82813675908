//! Secrets that never enter the sandbox. The sandbox holds a placeholder
//! (`warden-secret-<32 hex>`); for each secret's own hosts the proxy
//! terminates TLS with a certificate of a per-sandbox authority, reads the
//! requests (HTTP/1.1 or HTTP/2), puts the real value where the placeholder
//! stands, sends the request on over a new TLS connection verified against
//! the system's roots, and scrubs the real value from the responses.
//!
//! The same terminator serves the names that have request rules
//! (`crate::requests`, applied per request by `ruled`), secrets or not.
//!
//! A placeholder going anywhere else, and a real value leaving from inside,
//! are blocked. The authority's key and the real values live in the
//! supervisor's memory only; nothing here writes them anywhere, and no
//! decision or message carries a value.
//!
//! The files: `authority` makes the per-run CA, mints and caches leaves and
//! holds the TLS configurations; `rewrite` knows the patterns (made from
//! the secrets by `rewrite/forms`) and applies them to streams and, in
//! `rewrite/body`, to bodies (`scan` finds, in one pass, the few places
//! where a pattern may occur; `spelled` and `b64` find a value there in
//! its spellings and in base64); `coding` undoes response bodies' codings;
//! `sniff` tells compressed data by its first bytes, whatever a response
//! declares; `target` reads a request's authority and path as the
//! upstream will;
//! `session` serves one terminated connection, whose upstream `bulk` reads
//! in large pieces (each request's stages in `session/exchange`, the
//! response's scrub in `session/scrub`); `paid` pays, from the proxy's
//! memory budget, for what a request makes the terminator hold.
//! This file
//! is what the proxy and the jail call: [`Secret`], [`placeholder`] and the
//! [`Terminator`].

mod authority;
mod b64;
mod bulk;
mod coding;
mod heads;
mod outbound;
mod paid;
mod readable;
mod rewrite;
mod ruled;
mod scan;
mod session;
mod sniff;
mod spelled;
mod target;
#[cfg(test)]
mod test_tls;
mod upgrade;

use crate::decision::{Decision, Reason};
use crate::matcher::Matcher;
use crate::requests::{RequestRule, RequestRules};
use authority::Authority;
use bytes::Bytes;
use rewrite::{find, outgoing, scrub_patterns, Patterns, Place};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use warden_policy::{DomainRule, SecretRule};

pub use coding::DECODE_POOL_KIB;
pub use ruled::ASKED_ALWAYS;
pub(crate) use session::serve_apart;
#[cfg(test)]
pub(crate) use target::normalise_path;

/// What every placeholder starts with: unmistakable for real data.
pub const PLACEHOLDER_PREFIX: &str = "warden-secret-";

/// The bound of each buffer a terminated connection holds, in bytes: the
/// TLS buffers of either side, the upstream's read-ahead below its TLS,
/// HTTP/1.1's read and write buffers, HTTP/2's
/// receive windows (stream and connection) and its send buffers together
/// (see [`crate::proxy::TERMINATED_COST`], what the budget charges).
pub const BUFFER_LIMIT: usize = 64 * 1024;
/// Streams at once on an HTTP/2 connection from the sandbox.
pub const H2_STREAMS: u32 = 8;

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
    #[error("cannot read the upstream authority file {path}")]
    UpstreamCa {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the upstream authority file {0} holds no PEM certificate; give a file with -----BEGIN CERTIFICATE----- blocks")]
    NoCertificate(PathBuf),
    #[error("the upstream authority file {path}: a certificate cannot be trusted")]
    BadCertificate {
        path: PathBuf,
        #[source]
        source: rustls::Error,
    },
    #[error("no authority to verify upstream servers with: the system has no root certificates and no upstream authority file was given")]
    NoRoots,
    #[error("cannot configure TLS for the secret proxy")]
    Tls(#[source] rustls::Error),
}

impl SecretError {
    /// Its stable code; [`Reason::field`] names the option that would
    /// change it, for each door to word (the upstream authorities).
    pub fn reason(&self) -> Reason {
        match self {
            SecretError::UpstreamCa { .. } => Reason::UpstreamCaUnreadable,
            SecretError::NoCertificate(_) => Reason::UpstreamCaEmpty,
            SecretError::BadCertificate { .. } => Reason::UpstreamCaUntrusted,
            SecretError::NoRoots => Reason::NoRoots,
            SecretError::Random(_) | SecretError::Authority(_) | SecretError::Tls(_) => {
                Reason::SecretSetup
            }
        }
    }
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

    /// Whether `name:port` is one of the secret's own hosts: where its
    /// placeholder is substituted.
    fn covers(&self, name: &str, port: u16) -> bool {
        self.hosts.allows(name, port).is_some()
    }

    /// Whether `name` is one of the secret's hosts on any port: the same
    /// server may serve what it was sent on the secret's own port back on
    /// another (a forge on 443 and 8443), so every port of it is
    /// terminated and scrubbed, though substituted on its own only.
    fn hosts_name(&self, name: &str) -> bool {
        self.hosts.allows_name(name).is_some()
    }
}

/// The secrets of one sandbox and the TLS configurations that serve them.
pub struct Terminator {
    secrets: Vec<Secret>,
    /// `--secret-rule`: once a host has rules, only matching requests pass.
    rules: Vec<SecretRule>,
    /// Request rules: TLS to every name they are for is terminated (with
    /// or without a secret) and each request decided.
    request_rules: RequestRules,
    ca_pem: String,
    server: Arc<rustls::ServerConfig>,
    client: Arc<rustls::ClientConfig>,
    /// What turns real values in responses back into placeholders: the
    /// same for every connection, so made once.
    scrub: Arc<Patterns>,
    /// The patterns for requests, by which secrets cover the host and
    /// where in the request: made at the first connection that needs
    /// them (their automaton is worth building once, not per connection).
    requests: std::sync::Mutex<std::collections::HashMap<RequestKey, Arc<Patterns>>>,
    /// Who is asked about a request an ask rule holds (the same desk as
    /// names'); without one, such requests are refused.
    asker: Option<Arc<dyn crate::ask::Asker>>,
    /// Methods and paths a person allowed for the rest of the run.
    granted_requests: std::sync::Mutex<std::collections::HashSet<ruled::Grant>>,
    /// The threads terminated connections are served on (made at the
    /// first one), apart from the proxy's own.
    workers: std::sync::OnceLock<Workers>,
    /// What decoding response bodies may hold, in KiB (see
    /// [`coding::DECODE_POOL_KIB`]): the proxy lends its large-buffer
    /// half of the sandbox's memory budget; alone, a pool of that size.
    pub(crate) decode_memory: std::sync::Arc<tokio::sync::Semaphore>,
    /// Names the owner pinned to the address of a secret's host (see
    /// [`Terminator::serve_beside`]): served as that host's application
    /// on every port (terminated, scrubbed, plain refused), substituted
    /// towards nowhere.
    beside: std::collections::HashSet<String>,
}

/// Which secrets cover a host, and where in a request.
type RequestKey = (Vec<bool>, Place);

/// Threads of their own for terminated connections: two TLS sessions,
/// HTTP on both sides and scrubbing are work a sandbox can ask for at
/// will, and on the proxy's threads it would keep DNS answers and new
/// connections of the same sandbox waiting.
struct Workers(Option<tokio::runtime::Runtime>);

/// How many threads serve terminated connections.
const WORKER_THREADS: usize = 2;

impl Workers {
    fn start() -> Workers {
        Workers(
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(WORKER_THREADS)
                .thread_name("warden-secrets")
                .enable_io()
                .enable_time()
                .build()
                .ok(),
        )
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        // Dropped wherever the last connection let go of the terminator,
        // possibly on a runtime's thread, where waiting is not allowed.
        if let Some(rt) = self.0.take() {
            rt.shutdown_background();
        }
    }
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
        let server = authority::server_config(authority, provider.clone())?;
        let client = authority::client_config(provider, upstream_ca)?;
        let scrub = Arc::new(Patterns::new(scrub_patterns(&secrets)));
        Ok(Terminator {
            secrets,
            rules: Vec::new(),
            request_rules: RequestRules::default(),
            ca_pem,
            server: Arc::new(server),
            client: Arc::new(client),
            scrub,
            requests: std::sync::Mutex::new(std::collections::HashMap::new()),
            asker: None,
            granted_requests: std::sync::Mutex::new(std::collections::HashSet::new()),
            workers: std::sync::OnceLock::new(),
            beside: std::collections::HashSet::new(),
            decode_memory: std::sync::Arc::new(tokio::sync::Semaphore::new(
                coding::DECODE_POOL_KIB as usize,
            )),
        })
    }

    /// Allow only requests that match `rules` on the hosts they are for.
    pub fn with_rules(mut self, rules: Vec<SecretRule>) -> Terminator {
        self.rules = rules;
        self
    }

    /// Decide each request to the names `rules` are for.
    pub fn with_requests(mut self, rules: Vec<RequestRule>) -> Terminator {
        self.request_rules = RequestRules::new(rules);
        self
    }

    /// Ask `asker` about the requests ask rules hold (without one they
    /// are refused).
    pub fn with_asker(mut self, asker: Option<Arc<dyn crate::ask::Asker>>) -> Terminator {
        self.asker = asker;
        self
    }

    /// Whether some request rule asks: the sandbox then needs someone to
    /// ask.
    pub fn asks_requests(&self) -> bool {
        self.request_rules.asks()
    }

    /// Whether `name:port` has request rules: then it is reached only
    /// through this terminator.
    pub fn rules_requests(&self, name: &str, port: u16) -> bool {
        self.request_rules.covers(name, port)
    }

    /// Whether `name:port` has `--secret-rule`s.
    fn has_rules(&self, name: &str, port: u16) -> bool {
        self.rules.iter().any(|r| r.is_for(name, port))
    }

    /// The methods the `--secret-rule`s for `name:port` name (a rule for
    /// any method names none): when there are some, what other method a
    /// request may be taken as is read.
    fn rule_methods(&self, name: &str, port: u16) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for m in self
            .rules
            .iter()
            .filter(|r| r.is_for(name, port))
            .filter_map(|r| r.method.clone())
        {
            if !out.contains(&m) {
                out.push(m);
            }
        }
        out
    }

    /// Why no rule allows `method path` on `name:port`, when the host has
    /// rules and none matches (`ruled` asks it of each method a request
    /// may be taken as).
    fn rule_denies(&self, name: &str, port: u16, method: &str, path: &str) -> Option<String> {
        let rules: Vec<&SecretRule> = self.rules.iter().filter(|r| r.is_for(name, port)).collect();
        if rules.is_empty() {
            return None;
        }
        // The path under every way a server may read it (request rules'
        // readings: `;parameters` dropped, trailing dots and spaces
        // trimmed, a segment either leaves empty collapsed): a rule lets
        // the secret go only if it allows each, so `/v1/;/models` never
        // takes it to the `/v1/models` Tomcat routes it to when only
        // `/v1/*/models` is allowed. A path that cannot be read one way
        // is allowed by none.
        let read: Vec<String> = crate::requests::path::readings(path)
            .map(|rs| rs.iter().map(|r| format!("/{}", r.join("/"))).collect())
            .unwrap_or_default();
        if !read.is_empty()
            && rules
                .iter()
                .any(|r| read.iter().all(|p| r.allows(method, p)))
        {
            return None;
        }
        let list: Vec<&str> = rules.iter().map(|r| r.source.as_str()).collect();
        Some(format!(
            "denied by the secret's request rules: {method} {path} on {name} matches none of them ({})",
            list.join("; ")
        ))
    }

    /// The patterns for requests to `name:port`, at `place`: the same
    /// for every host the same secrets cover.
    fn request_patterns(&self, name: &str, port: u16, place: Place) -> Arc<Patterns> {
        let covered: Vec<bool> = self.secrets.iter().map(|s| s.covers(name, port)).collect();
        let make = || Arc::new(Patterns::new(outgoing(&self.secrets, name, port, place)));
        let Ok(mut made) = self.requests.lock() else {
            return make();
        };
        made.entry((covered, place)).or_insert_with(make).clone()
    }

    /// The runtime terminated connections are served on; `None` when its
    /// threads could not be started (they are then served where they
    /// were accepted: slower for the rest of the proxy, never weaker).
    fn workers(&self) -> Option<tokio::runtime::Handle> {
        self.workers
            .get_or_init(Workers::start)
            .0
            .as_ref()
            .map(|rt| rt.handle().clone())
    }

    /// The authority's certificate (public), for the sandbox to trust.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// Whether TLS to `name` on `port` is terminated: some secret or
    /// request rule is for it. Both on every port of the name: a secret's
    /// placeholder is substituted on its own port only, but what the
    /// server was sent there may come back on any other, and is scrubbed
    /// there too (what is not TLS to such a name is refused, never
    /// spliced). A name pinned beside a secret's host is one of them.
    pub fn terminates(&self, name: &str, port: u16) -> bool {
        self.secret_host(name) || self.request_rules.covers(name, port)
    }

    /// Serve each of `names` as a secret's host on every port, though no
    /// secret is substituted towards it: the proxy's names pinned to the
    /// address of a secret's host. The application there is the one the
    /// secret was sent to, and what it stored may come back through any
    /// name and port that reaches it: such a connection is terminated
    /// and scrubbed like the secret's own (and refused when it is not TLS
    /// naming its name), not spliced or refused outright.
    pub(crate) fn serve_beside(&mut self, names: impl IntoIterator<Item = String>) {
        self.beside.extend(
            names
                .into_iter()
                .filter(|n| !self.secrets.iter().any(|s| s.hosts_name(n))),
        );
    }

    /// Whether `name` is a secret's host, on whatever port (or a name
    /// pinned beside one, see [`Terminator::serve_beside`]).
    pub(crate) fn secret_host(&self, name: &str) -> bool {
        self.secrets.iter().any(|s| s.hosts_name(name)) || self.beside.contains(name)
    }

    /// Whether `name` itself is one of a secret's hosts, not only pinned
    /// beside one.
    pub(crate) fn own_secret_host(&self, name: &str) -> bool {
        self.secrets.iter().any(|s| s.hosts_name(name))
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_rule_allows_a_path_only_under_every_reading_a_server_may_make_of_it() {
        let rule = SecretRule::parse("GET api.test/v1/*/models").unwrap();
        let t = Terminator::new(Vec::new(), &[])
            .unwrap()
            .with_rules(vec![rule]);
        let denies = |p: &str| t.rule_denies("api.test", 443, "GET", p).is_some();
        assert!(!denies("/v1/acme/models"));
        assert!(!denies("/v1/acme;x/models"));
        for p in [
            "/v1/;/models",
            "/v1/;x/models",
            "/v1/%3B/models",
            "/v1/%20/models",
            "/v1/%20;x/models",
        ] {
            assert!(denies(p), "{p}");
        }
        // A host without rules: nothing to deny.
        assert!(Terminator::new(Vec::new(), &[])
            .unwrap()
            .rule_denies("api.test", 443, "GET", "/v1/;/models")
            .is_none());
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
}
