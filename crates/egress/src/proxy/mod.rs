//! The proxy: serves, from the host, the sockets the jail's namespace
//! wiring (`warden_jail::netns`) opened inside the sandbox. Every TCP connection is decided on the name it
//! asks for (TLS SNI, HTTP Host), resolved and connected on the host side,
//! and spliced both ways; every DNS query is answered from the allowlist.
//! Each decision is recorded.
//!
//! Each connection goes through three files: `classify` reads its first
//! bytes (a TLS ClientHello, an HTTP head, a CONNECT) within their
//! timeouts; `decide` gives the verdict (the matcher, `--ask`, host
//! services, stray placeholders, the quota); `relay` answers a denial, or
//! connects upstream (`relay/upstream`) and splices or hands the
//! connection to the secret terminator (`relay/carry`), and reports its
//! end. This file is the proxy's face: the
//! [`Proxy`] and its [`Hooks`], the [`Asker`] trait, the state the three
//! share, and the resolver's socket; `serve` owns the proxy's thread and
//! runtime, started at the first client.

mod classify;
mod decide;
mod live;
mod own;
mod pass;
mod plain;
mod public;
mod relay;
mod serve;

pub use crate::decision::{Cause, Decision, Observer, Protocol, Reason, SecretAction};
use crate::dns::{self, NameAddresses};
use crate::matcher::Matcher;
use crate::secrets::Terminator;
// The ask desk's vocabulary, where the runtime and the doors name it.
use crate::ask::{Answer, Asker, Question};
pub use live::{ChangeError, EgressChange, EgressControl};
pub use public::is_public;
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddrV4};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::{Duration, Instant};
use tokio::net::{TcpStream, UdpSocket};
use warden_policy::{EgressSpec, TestHooks, HOST_ALIAS};

/// Connections open at once, per sandbox.
const MAX_CONNECTIONS: usize = 4096;

/// The proxy's memory budget per sandbox, in KiB: what it may hold in
/// buffers on the sandbox's behalf, whatever the sandbox's connections do
/// (stall, never read, never send). Half pays for connections
/// ([`CONNECTION_COST`] each, from accept to close: the first bytes read
/// and small relay buffers), half for the large relay buffers of busy
/// connections ([`pass::START_BUFFERS`] each, lent while one relays, and up to
/// 1 MiB per direction of a bulk transfer; when none is free a
/// connection relays through its small ones; the same half pays for
/// decoding the compressed bodies of responses from a secret's hosts,
/// see [`crate::secrets::DECODE_POOL_KIB`]). A connection
/// the budget cannot pay for is refused at once and recorded as denied
/// ("the proxy's memory budget ... is spent"). Kernel socket buffers are
/// the kernel's, not counted here; nor are the at most
/// [`pass::SPARE_BUFFERS`] starting buffers (512 KiB) kept for reuse
/// between connections.
pub const MEMORY_BUDGET_KIB: u32 = 64 * 1024;
/// What one open connection costs the budget, in KiB: its first bytes
/// (up to 16 KiB and a read's 4 KiB), two 4 KiB relay buffers, and the
/// task and sockets that carry it. At most `MEMORY_BUDGET_KIB / 2 /
/// CONNECTION_COST` (1,024) connections are open at once.
pub const CONNECTION_COST: u32 = 32;
/// What a connection whose TLS is terminated for its secrets costs the
/// budget on top of [`CONNECTION_COST`], in KiB, for as long as it is
/// open: the TLS state and HTTP buffers of both sides, each bounded by
/// [`crate::secrets::BUFFER_LIMIT`] (TLS buffers, the upstream's
/// read-ahead, HTTP/1.1 buffers, the
/// HTTP/2 windows and send buffers of at most
/// [`crate::secrets::H2_STREAMS`] streams). At most 64 such connections
/// are open at once.
pub const TERMINATED_COST: u32 = 512;

/// The rule recorded for the connection a person answered "always"
/// (reason [`Reason::AskedAlways`]). Rules recorded for answers are plain
/// words: each door names the option in its own terms.
pub const ASK_ALWAYS: &str = "asked: allowed always";

/// The rule recorded for the connection a caller (a token holder over the
/// API) answered "always": kept on the sandbox's list as a caller's entry,
/// never among the owner's grants.
pub const ASK_ALWAYS_BY_CALLER: &str = "asked: allowed always by a caller";

/// The rule recorded for a connection allowed "for this run" (when asked,
/// or by that answer since).
pub const ASK_FOR_RUN: &str = "asked: allowed for this run";

/// The rule recorded for a connection learning mode allowed.
pub const LEARNED: &str = "learning mode: no rule allows it";

/// The rule recorded for a name the resolver answered in ask mode: the
/// connection to it is asked about.
pub const ASK_ON_CONNECTION: &str = "ask mode: asked on connection";

/// Learning mode's answer to every question: allow, and say so.
struct Learner;

impl Asker for Learner {
    fn ask(&self, _: &Question) -> Answer {
        Answer::Learn
    }
}

/// Why the proxy could not start.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    #[error("cannot start the egress proxy's runtime")]
    Runtime(#[source] std::io::Error),
    #[error("cannot serve the sandbox's sockets")]
    Socket(#[source] std::io::Error),
    #[error("cannot start the egress proxy's thread")]
    Thread(#[source] std::io::Error),
}

impl ProxyError {
    /// Its stable code.
    pub fn reason(&self) -> Reason {
        Reason::StartFailed
    }
}

/// A running proxy; [`Proxy::stop`] ends it.
pub struct Proxy {
    /// Moved on once to stop taking clients, then once to cut every open
    /// connection (`serve::HALTED`, `serve::STOPPED`).
    state: tokio::sync::watch::Sender<u8>,
    /// Dropped to end the thread's wait for its first client.
    wake: Option<UnixStream>,
    /// The proxy's thread (and, once a client came, its runtime).
    thread: Option<std::thread::JoinHandle<()>>,
    shared: Arc<Shared>,
    /// Connections being served now.
    open: Arc<std::sync::atomic::AtomicUsize>,
}

/// How long [`Proxy::stop`] lets open connections end on their own (the
/// sandbox is gone, so their sandbox side is closed) and record what they
/// moved, before it cuts the rest.
const STOP_GRACE: Duration = Duration::from_millis(300);

/// Counts a connection as open for as long as it lives, cut or not.
struct OpenGuard(Arc<std::sync::atomic::AtomicUsize>);

impl OpenGuard {
    fn new(open: &Arc<std::sync::atomic::AtomicUsize>) -> OpenGuard {
        open.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        OpenGuard(open.clone())
    }
}

impl Drop for OpenGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

struct Shared {
    /// The allowlist; swapped whole when it is changed live
    /// ([`EgressControl::change`]), so a decision reads one list.
    matcher: RwLock<Arc<Matcher>>,
    /// Allowed connections still open, by the name they were allowed for,
    /// each with the handle that cuts it when its name is removed.
    live: Mutex<live::Live>,
    allow_http: bool,
    hosts: HashMap<String, IpAddr>,
    /// Non-public ranges an allowed name may resolve to.
    cidrs: Vec<ipnet::IpNet>,
    /// Ports of the host's loopback opened with --allow-host-port: the only
    /// way to the host's own services.
    host_ports: Vec<u16>,
    /// The host's resolver (its resolv.conf and hosts file), in Rust: the
    /// proxy needs no C library's name service to find upstreams. Read at
    /// the first name that needs it (never with only `--add-host` names).
    resolver: OnceLock<Result<hickory_resolver::TokioResolver, String>>,
    /// Ask a person about unlisted names (`--ask`), through `asker`.
    ask: bool,
    asker: Option<Arc<dyn Asker>>,
    /// Learning mode: every question is answered [`Answer::Learn`].
    learn: bool,
    /// Tests only (debug builds, [`TestHooks::ask_loopback`]): names
    /// pinned to the host's loopback may be asked about, since a test's
    /// servers can only be there.
    test_ask_loopback: bool,
    /// Names (and ports) a person allowed for the rest of the run, each
    /// with whether the owner allowed it (see [`Asker::ask_trusted`]).
    granted: Mutex<HashMap<(String, u16), bool>>,
    addresses: Mutex<NameAddresses>,
    /// The host's own addresses, never an upstream (see `own`).
    own: Mutex<own::OwnAddresses>,
    /// Hears each decision as it is made.
    observer: Arc<dyn Observer>,
    /// Numbers allowed connections, for their `closed` report.
    next_conn: std::sync::atomic::AtomicU64,
    /// Tests only: see [`TestHooks::resolve`].
    test_resolved: HashMap<String, Vec<IpAddr>>,
    quota: Option<u64>,
    idle: Duration,
    /// Bytes through the proxy so far, both ways.
    used: Arc<std::sync::atomic::AtomicU64>,
    /// Connections open at once are bounded.
    slots: Arc<tokio::sync::Semaphore>,
    /// Half the memory budget, in KiB: what open connections cost.
    pub(crate) connection_memory: Arc<tokio::sync::Semaphore>,
    /// The other half, in KiB: large relay buffers, lent.
    pub(crate) buffer_memory: Arc<tokio::sync::Semaphore>,
    /// Relay buffers of ended connections, kept for the next ones.
    spare: pass::Spare,
    /// With secrets: TLS to their hosts is terminated and requests are
    /// rewritten; every other connection is spliced as it is.
    terminator: Option<Arc<Terminator>>,
    /// The spec's request rules: a name they are for is reached only
    /// through the terminator, and refused when there is none.
    request_rules: crate::requests::RequestRules,
    /// Names with a port the owner let carry what is not TLS though the
    /// terminator serves them as a secret's host
    /// (`EgressSpec::secret_plain_ports`): spliced as they are.
    secret_plain: Matcher,
}

impl Shared {
    /// Whether the owner let `name:port`, a secret's host (or a name
    /// pinned beside one), carry what is not TLS naming it.
    fn plain_allowed(&self, name: &str, port: u16) -> bool {
        self.secret_plain.allows(name, port).is_some()
    }

    /// The host's resolver, made at its first use (on the proxy's runtime).
    fn resolver(&self) -> &Result<hickory_resolver::TokioResolver, String> {
        self.resolver.get_or_init(|| {
            hickory_resolver::TokioResolver::builder_tokio()
                .map(|b| b.build())
                .map_err(|e| format!("the host's resolver configuration cannot be read ({e})"))
        })
    }

    /// The host's own addresses as they are now (an address that
    /// appeared after the proxy started included), or why they cannot be
    /// told: then nothing that needs them may be connected to.
    fn own_addresses(&self) -> Result<Arc<[IpAddr]>, own::OwnError> {
        self.own
            .lock()
            .map_err(|_| own::OwnError::Poisoned)?
            .current()
    }

    /// The allowlist as it is now.
    fn matcher(&self) -> Arc<Matcher> {
        match self.matcher.read() {
            Ok(m) => m.clone(),
            // A writer panicked mid-swap: nothing is allowed by the list.
            Err(_) => Arc::new(Matcher::default()),
        }
    }

    /// `name:port` is a host service opened with --allow-host-port (and
    /// nothing else is: no other rule, and no answer to --ask, leads to the
    /// host's loopback).
    fn is_host_service(&self, name: &str, port: u16) -> bool {
        name == HOST_ALIAS && self.host_ports.contains(&port)
    }

    /// Report a decision as it is made; an allowed connection gets a
    /// number, for [`Shared::close`]. A DNS answer opens no connection and
    /// gets none: like a denial, it may repeat (a program that resolves a
    /// name before every connection), and the observer may count repeats
    /// instead of keeping each (it did not when they were numbered: two
    /// log lines and writer wake-ups per connection of such a program).
    /// Nor does a request on a terminated connection: it rides on the
    /// connection's own number, and repeats as a DNS answer does.
    fn record(&self, d: &Decision) -> Option<u64> {
        let opens = d.allowed && !matches!(d.protocol, Protocol::Dns | Protocol::Request);
        let conn = opens.then(|| {
            self.next_conn
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        });
        self.observer.decision(conn, d);
        conn
    }

    /// Report what an allowed connection moved, once it has ended.
    fn close(&self, conn: Option<u64>, d: &Decision) {
        if let Some(conn) = conn {
            self.observer.closed(conn, d);
        }
    }
}

/// The names the owner pinned to the address of a secret's host (the
/// same address, or both on the host's loopback, where any of its
/// addresses reaches the same listeners): the secret's application is
/// reached through them on every port, and they are served as its host
/// (`Terminator::serve_beside`). A name pinned to another of the host's
/// own addresses is not known here (they change while the proxy runs):
/// it is refused at connect time (`relay::carry::shares_address`).
fn pinned_beside(hosts: &[(String, IpAddr)], t: &Terminator) -> Vec<String> {
    let secret_ips: Vec<IpAddr> = hosts
        .iter()
        .filter(|(name, _)| t.own_secret_host(name))
        .map(|(_, ip)| ip.to_canonical())
        .collect();
    hosts
        .iter()
        .filter(|(name, ip)| {
            let ip = ip.to_canonical();
            !t.own_secret_host(name)
                && secret_ips
                    .iter()
                    .any(|s| *s == ip || (s.is_loopback() && ip.is_loopback()))
        })
        .map(|(name, _)| name.clone())
        .collect()
}

/// What the proxy is handed besides its policy and sockets.
pub struct Hooks {
    /// Hears each decision the moment it is made.
    pub observer: Arc<dyn Observer>,
    /// With `--ask`: answers for names on no list; without one, such names
    /// are denied.
    pub asker: Option<Arc<dyn Asker>>,
    /// With secrets: substitutes them towards their own hosts.
    pub terminator: Option<Terminator>,
    /// What a test switched on for this proxy, given by whoever starts it
    /// (the proxy reads no environment); honoured in debug builds only.
    pub test: TestHooks,
}

impl Proxy {
    /// Serve `tcp` (the listening socket every TCP connection of the
    /// sandbox is redirected to) and `dns` (the resolver's UDP socket)
    /// until [`Proxy::stop`], on a thread of the proxy's own that starts
    /// its runtime at the first connection or question (see `serve`).
    pub fn start(
        spec: &EgressSpec,
        tcp: OwnedFd,
        dns: OwnedFd,
        hooks: Hooks,
    ) -> Result<Proxy, ProxyError> {
        let Hooks {
            observer,
            asker,
            terminator,
            test,
        } = hooks;
        // Learning mode answers every question itself.
        let asker: Option<Arc<dyn Asker>> = if spec.learn {
            Some(Arc::new(Learner))
        } else {
            asker
        };
        let (state, watched) = tokio::sync::watch::channel(serve::RUNNING);
        // Tests only (debug builds): names answered as if the host's
        // resolver had returned these addresses, so that what the proxy does
        // with a resolved address can be shown with real connections.
        let test_resolved = match &test.resolve {
            Some(v) if cfg!(debug_assertions) => parse_test_resolved(v),
            _ => HashMap::new(),
        };
        let buffer_memory = Arc::new(tokio::sync::Semaphore::new(
            (MEMORY_BUDGET_KIB / 2) as usize,
        ));
        let shared = Arc::new(Shared {
            resolver: OnceLock::new(),
            matcher: RwLock::new(Arc::new(Matcher::new(spec.domains.clone()))),
            live: Mutex::new(live::Live::default()),
            allow_http: spec.allow_http,
            hosts: spec.hosts.iter().cloned().collect(),
            cidrs: spec.cidrs.clone(),
            host_ports: spec.host_ports.clone(),
            ask: spec.ask || spec.learn,
            asker,
            learn: spec.learn,
            granted: Mutex::new(HashMap::new()),
            test_ask_loopback: cfg!(debug_assertions) && test.ask_loopback,
            addresses: Mutex::new(NameAddresses::default()),
            own: Mutex::new(own::OwnAddresses::default()),
            observer,
            next_conn: std::sync::atomic::AtomicU64::new(0),
            test_resolved,
            quota: spec.quota,
            idle: spec.idle_timeout,
            used: Arc::new(std::sync::atomic::AtomicU64::new(0)),
            slots: Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS)),
            connection_memory: Arc::new(tokio::sync::Semaphore::new(
                (MEMORY_BUDGET_KIB / 2) as usize,
            )),
            buffer_memory: buffer_memory.clone(),
            spare: pass::Spare::default(),
            // Decoding a response's body to scrub it borrows from the
            // same half as large relay buffers.
            request_rules: crate::requests::RequestRules::new(spec.requests.clone()),
            secret_plain: Matcher::new(spec.secret_plain_ports.clone()),
            terminator: terminator.map(|mut t| {
                t.decode_memory = buffer_memory;
                t.serve_beside(pinned_beside(&spec.hosts, &t));
                Arc::new(t)
            }),
        });
        let (wake, woken) = UnixStream::pair().map_err(ProxyError::Socket)?;
        let open = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let thread = serve::spawn(
            serve::Sockets {
                tcp,
                dns,
                wake: woken,
            },
            shared.clone(),
            watched,
            open.clone(),
        )?;
        Ok(Proxy {
            state,
            wake: Some(wake),
            thread: Some(thread),
            shared,
            open,
        })
    }

    /// A handle that reads and changes the allowlist while the proxy runs.
    pub fn control(&self) -> EgressControl {
        EgressControl::new(self.shared.clone())
    }

    /// Stop serving: no new connection or question is taken, and open
    /// connections are cut, after up to [`STOP_GRACE`] for them to end on
    /// their own: a connection the sandbox closed just before it ended
    /// still records its close and its bytes. Blocking; call it outside
    /// the proxy's runtime.
    pub fn stop(mut self) {
        self.halt();
        let deadline = std::time::Instant::now() + STOP_GRACE;
        while self.open.load(std::sync::atomic::Ordering::SeqCst) > 0
            && std::time::Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(2));
        }
        self.end();
    }

    /// Take no new connection or question (and end the wait for a first
    /// one).
    fn halt(&mut self) {
        self.state.send_replace(serve::HALTED);
        self.wake.take();
    }

    /// Cut what is open and wait for the proxy's thread to end (its
    /// runtime gives tasks at most 100 ms).
    fn end(&mut self) {
        self.halt();
        self.state.send_replace(serve::STOPPED);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.end();
    }
}

async fn serve_dns(udp: UdpSocket, shared: &Arc<Shared>) {
    let mut buf = vec![0u8; 4096];
    // In ask mode every name is answered, and the connection decides; the
    // rule says which mode answered it.
    let ask_rule = match (shared.ask, shared.learn) {
        (_, true) => Some((LEARNED, Reason::Learned)),
        (true, false) => Some((ASK_ON_CONNECTION, Reason::AskOnConnection)),
        (false, false) => None,
    };
    loop {
        let Ok((n, from)) = udp.recv_from(&mut buf).await else {
            continue;
        };
        let reply = {
            let Ok(mut addrs) = shared.addresses.lock() else {
                return;
            };
            dns::answer(&buf[..n], &shared.matcher(), ask_rule, &mut addrs)
        };
        if let Some((bytes, decision)) = reply {
            let _ = udp.send_to(&bytes, from).await;
            if let Some(d) = decision {
                shared.record(&Decision {
                    protocol: Protocol::Dns,
                    name: Some(d.name),
                    port: 53,
                    original_destination: None,
                    allowed: d.allowed,
                    rule: d.rule,
                    detail: d.record_type,
                    bytes_out: 0,
                    bytes_in: 0,
                    duration_ms: 0,
                    reason: Some(d.cause),
                });
            }
        }
    }
}

/// A connection open to an address of the resolver's pool, which is not
/// given to another name while it lasts (see `NameAddresses::hold`).
struct Held {
    shared: Arc<Shared>,
    addr: std::net::Ipv4Addr,
}

impl Held {
    fn new(shared: &Arc<Shared>, addr: std::net::Ipv4Addr) -> Option<Held> {
        let held = shared.addresses.lock().ok()?.hold(addr);
        held.then(|| Held {
            shared: shared.clone(),
            addr,
        })
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Ok(mut addrs) = self.shared.addresses.lock() {
            addrs.release(self.addr);
        }
    }
}

/// A connection as it arrived: when, and where it was headed.
struct Arrival {
    start: Instant,
    /// How many times the allowlist had been narrowed when it arrived: an
    /// allowed connection registered after a narrowing is judged again.
    epoch: u64,
    /// Where the program inside connected to (`SO_ORIGINAL_DST`).
    original: Option<SocketAddrV4>,
    /// Its port (0 when the original destination is unknown).
    port: u16,
}

/// One connection from the sandbox, from its first bytes to its report.
async fn handle_connection(mut conn: TcpStream, shared: &Arc<Shared>) {
    let start = Instant::now();
    let original = crate::socket::original_destination(&conn).ok();
    let port = original.map(|a| a.port()).unwrap_or(0);
    // Made to a pool address: it stands for its name until this
    // connection has ended.
    let _held = original.and_then(|a| Held::new(shared, *a.ip()));
    let at = Arrival {
        start,
        epoch: live::epoch(shared),
        original,
        port,
    };
    // Room for the longest first bytes and one read past them, made once:
    // the buffer never grows (and what is never written takes no memory),
    // so it stays within what the connection pays the budget.
    let mut buf: Vec<u8> =
        Vec::with_capacity(crate::tls::MAX_CLIENT_HELLO.max(crate::http::MAX_HEAD) + 4096);
    let (protocol, verdict) = decide::verdict(&mut conn, &mut buf, &at, shared).await;
    relay::settle(conn, buf, &at, protocol, verdict, shared).await;
}

/// `name=ip,name=ip` (several entries for one name give several
/// addresses); entries that do not parse are ignored.
fn parse_test_resolved(v: &str) -> HashMap<String, Vec<IpAddr>> {
    let mut out: HashMap<String, Vec<IpAddr>> = HashMap::new();
    for (name, ip) in v.split(',').filter_map(|e| e.split_once('=')) {
        if let Ok(ip) = ip.trim().parse() {
            out.entry(name.trim().to_ascii_lowercase())
                .or_default()
                .push(ip);
        }
    }
    out
}
