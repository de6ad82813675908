//! The proxy: serves, from the host, the sockets the sandbox's namespace
//! wiring opened inside it. Every TCP connection is decided on the name it
//! asks for (TLS SNI, HTTP Host), resolved and connected on the host side,
//! and spliced both ways; every DNS query is answered from the allowlist.
//! Each decision is recorded.

pub use crate::decision::{Decision, Observer, Protocol, SecretAction};
use crate::dns::{self, NameAddresses};
use crate::http::{parse_request_head, HttpError, MAX_HEAD};
use crate::matcher::Matcher;
use crate::secrets::Terminator;
use crate::tls::{self, ClientHello, MAX_CLIENT_HELLO};
use crate::wiring::original_destination;
use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use warden_policy::{EgressSpec, HOST_ALIAS};

/// How long a client has to say where it goes.
const FIRST_BYTES_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a connection to a `name:port` address may stay silent before
/// it is taken for a protocol where the server speaks first.
const SERVER_FIRST_WAIT: Duration = Duration::from_millis(300);
/// Buffer per direction of a spliced connection: large enough that a bulk
/// transfer moves in few system calls.
const COPY_BUFFER: usize = 64 * 1024;
/// Connections open at once, per sandbox.
const MAX_CONNECTIONS: usize = 4096;
/// How long connecting upstream may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A connection to a name that no rule allows, put to a person (`--ask`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Question {
    /// `tls`, `http`, `connect` or `tcp`.
    pub protocol: &'static str,
    pub name: String,
    pub port: u16,
}

/// What a person answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// This connection only.
    Once,
    /// This name and port, for the rest of the run.
    ForRun,
    Deny,
}

/// Answers [`Question`]s: the terminal of `warden run` today, an API of a
/// daemon later. `ask` runs on a thread of its own and may block, but must
/// return in bounded time (the connection waits for it).
pub trait Asker: Send + Sync {
    fn ask(&self, question: &Question) -> Answer;
}

/// Why the proxy could not start.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    #[error("cannot start the egress proxy's runtime")]
    Runtime(#[source] std::io::Error),
    #[error("cannot serve the sandbox's sockets")]
    Socket(#[source] std::io::Error),
}

/// A running proxy; [`Proxy::stop`] ends it.
pub struct Proxy {
    /// Set once to cut every open connection.
    stop: tokio::sync::watch::Sender<bool>,
    /// The accept loop and the resolver.
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

struct Shared {
    matcher: Matcher,
    allow_http: bool,
    hosts: HashMap<String, IpAddr>,
    /// Non-public ranges an allowed name may resolve to.
    cidrs: Vec<ipnet::IpNet>,
    /// Ports of the host's loopback opened with --allow-host-port: the only
    /// way to the host's own services.
    host_ports: Vec<u16>,
    /// The host's resolver (its resolv.conf and hosts file), in Rust: the
    /// proxy needs no C library's name service to find upstreams.
    resolver: Result<hickory_resolver::TokioResolver, String>,
    /// Ask a person about unlisted names (`--ask`), through `asker`.
    ask: bool,
    asker: Option<Arc<dyn Asker>>,
    /// Tests only (debug builds, `WARDEN_TEST_ASK_LOOPBACK`): names pinned
    /// to the host's loopback may be asked about, since a test's servers
    /// can only be there.
    test_ask_loopback: bool,
    /// Names (and ports) a person allowed for the rest of the run.
    granted: Mutex<HashSet<(String, u16)>>,
    addresses: Mutex<NameAddresses>,
    /// Hears each decision as it is made.
    observer: Arc<dyn Observer>,
    /// Numbers allowed connections, for their `closed` report.
    next_conn: std::sync::atomic::AtomicU64,
    print: bool,
    /// The host's own addresses: never an upstream, whatever a name
    /// resolves to.
    own_addresses: Vec<IpAddr>,
    quota: Option<u64>,
    idle: Duration,
    /// Bytes through the proxy so far, both ways.
    used: std::sync::atomic::AtomicU64,
    /// Connections open at once are bounded.
    slots: Arc<tokio::sync::Semaphore>,
    /// With secrets: TLS to their hosts is terminated and requests are
    /// rewritten; every other connection is spliced as it is.
    terminator: Option<Arc<Terminator>>,
}

impl Shared {
    /// `name:port` is a host service opened with --allow-host-port (and
    /// nothing else is: no other rule, and no answer to --ask, leads to the
    /// host's loopback).
    fn is_host_service(&self, name: &str, port: u16) -> bool {
        name == HOST_ALIAS && self.host_ports.contains(&port)
    }

    fn print(&self, d: &Decision) {
        if self.print {
            eprintln!(
                "warden: egress {} {} {}{} {}",
                if d.allowed { "allow" } else { "DENY" },
                d.protocol.as_str(),
                d.name.as_deref().unwrap_or("-"),
                if d.protocol == Protocol::Dns {
                    String::new()
                } else {
                    format!(":{}", d.port)
                },
                match (&d.rule, d.allowed) {
                    (Some(r), true) => format!("(rule {r}) {}", d.detail),
                    _ => d.detail.clone(),
                }
            );
        }
    }

    /// Report a decision as it is made; an allowed connection gets a
    /// number, for [`Shared::close`].
    fn record(&self, d: &Decision) -> Option<u64> {
        self.print(d);
        let conn = d.allowed.then(|| {
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

/// What the proxy is handed besides its policy and sockets.
pub struct Hooks {
    /// Hears each decision the moment it is made.
    pub observer: Arc<dyn Observer>,
    /// With `--ask`: answers for names on no list; without one, such names
    /// are denied.
    pub asker: Option<Arc<dyn Asker>>,
    /// With secrets: substitutes them towards their own hosts.
    pub terminator: Option<Terminator>,
}

impl Proxy {
    /// Serve `tcp` (the listening socket every TCP connection of the
    /// sandbox is redirected to) and `dns` (the resolver's UDP socket) on
    /// the tokio runtime `runtime`, until [`Proxy::stop`].
    pub fn start(
        runtime: &tokio::runtime::Handle,
        spec: &EgressSpec,
        tcp: OwnedFd,
        dns: OwnedFd,
        hooks: Hooks,
    ) -> Result<Proxy, ProxyError> {
        let Hooks {
            observer,
            asker,
            terminator,
        } = hooks;
        // Two descriptors per proxied connection: raise the supervisor's
        // soft limit to its hard one (the sandbox keeps its own limit).
        if let Ok((_, hard)) =
            nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
        {
            let _ = nix::sys::resource::setrlimit(
                nix::sys::resource::Resource::RLIMIT_NOFILE,
                hard,
                hard,
            );
        }
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let own_addresses = nix::ifaddrs::getifaddrs()
            .map(|addrs| {
                addrs
                    .filter_map(|a| {
                        let addr = a.address?;
                        if let Some(v4) = addr.as_sockaddr_in() {
                            return Some(IpAddr::V4(v4.ip()));
                        }
                        addr.as_sockaddr_in6().map(|v6| IpAddr::V6(v6.ip()))
                    })
                    .collect()
            })
            .unwrap_or_default();
        let resolver = {
            let _guard = runtime.enter();
            hickory_resolver::TokioResolver::builder_tokio()
                .map(|b| b.build())
                .map_err(|e| format!("the host's resolver configuration cannot be read ({e})"))
        };
        let shared = Arc::new(Shared {
            resolver,
            matcher: Matcher::new(spec.domains.clone()),
            allow_http: spec.allow_http,
            hosts: spec.hosts.iter().cloned().collect(),
            cidrs: spec.cidrs.clone(),
            host_ports: spec.host_ports.clone(),
            ask: spec.ask,
            asker,
            granted: Mutex::new(HashSet::new()),
            test_ask_loopback: cfg!(debug_assertions)
                && std::env::var_os("WARDEN_TEST_ASK_LOOPBACK").is_some(),
            addresses: Mutex::new(NameAddresses::default()),
            observer,
            next_conn: std::sync::atomic::AtomicU64::new(0),
            print: spec.log,
            own_addresses,
            quota: spec.quota,
            idle: spec.idle_timeout,
            used: std::sync::atomic::AtomicU64::new(0),
            slots: Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS)),
            terminator: terminator.map(Arc::new),
        });
        let std_listener = std::net::TcpListener::from(tcp);
        let std_udp = std::net::UdpSocket::from(dns);
        std_listener
            .set_nonblocking(true)
            .map_err(ProxyError::Socket)?;
        std_udp.set_nonblocking(true).map_err(ProxyError::Socket)?;
        let (listener, udp) = {
            let _guard = runtime.enter();
            (
                TcpListener::from_std(std_listener).map_err(ProxyError::Socket)?,
                UdpSocket::from_std(std_udp).map_err(ProxyError::Socket)?,
            )
        };
        let s = shared.clone();
        let accept_task = runtime.spawn(async move {
            loop {
                let conn = match listener.accept().await {
                    Ok((conn, _)) => conn,
                    Err(_) => {
                        // Out of descriptors (or another passing failure):
                        // back off instead of spinning.
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let s = s.clone();
                let Ok(permit) = s.slots.clone().try_acquire_owned() else {
                    // Over the limit: refused at once, and recorded.
                    s.record(&Decision {
                        protocol: Protocol::Tcp,
                        name: None,
                        port: original_destination(&conn).map(|a| a.port()).unwrap_or(0),
                        original_destination: original_destination(&conn)
                            .ok()
                            .map(|a| a.to_string()),
                        allowed: false,
                        rule: None,
                        detail: format!("more than {MAX_CONNECTIONS} connections at once"),
                        bytes_out: 0,
                        bytes_in: 0,
                        duration_ms: 0,
                    });
                    drop(conn);
                    continue;
                };
                let mut stopped = stopped.clone();
                tokio::spawn(async move {
                    // Cut when the proxy stops, like every open connection.
                    tokio::select! {
                        _ = handle_connection(conn, &s) => {}
                        _ = stopped.wait_for(|v| *v) => {}
                    }
                    drop(permit);
                });
            }
        });
        let dns_task = runtime.spawn(async move { serve_dns(udp, &shared).await });
        Ok(Proxy {
            stop,
            tasks: vec![accept_task, dns_task],
        })
    }

    /// Stop serving: no new connection or question is taken, and open
    /// connections are cut.
    pub fn stop(self) {
        let _ = self.stop.send(true);
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
        for t in &self.tasks {
            t.abort();
        }
    }
}

async fn serve_dns(udp: UdpSocket, shared: &Shared) {
    let mut buf = vec![0u8; 4096];
    loop {
        let Ok((n, from)) = udp.recv_from(&mut buf).await else {
            continue;
        };
        let reply = {
            let Ok(mut addrs) = shared.addresses.lock() else {
                return;
            };
            dns::answer(&buf[..n], &shared.matcher, shared.ask, &mut addrs)
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
                });
            }
        }
    }
}

/// What the first bytes of a connection decided.
enum Verdict {
    /// Connect to `name` on `port` (the port asked for: the original
    /// destination's, or a CONNECT's or absolute URI's).
    Allow {
        name: String,
        rule: String,
        port: u16,
        /// An explicit-proxy CONNECT: answer 200 and tunnel, without
        /// passing the request head on.
        tunnel: bool,
    },
    Deny {
        name: Option<String>,
        why: String,
        http: bool,
        /// The name is on no list: with `--ask`, a person may still allow
        /// it on this port.
        ask_port: Option<u16>,
    },
}

async fn handle_connection(mut conn: TcpStream, shared: &Arc<Shared>) {
    let start = Instant::now();
    let original = original_destination(&conn).ok();
    let port = original.map(|a| a.port()).unwrap_or(0);
    let mut buf: Vec<u8> = Vec::with_capacity(4096);
    // A connection to the address the resolver gave a name with an explicit
    // `name:port` entry may speak any protocol (SSH, a database; many speak
    // only after the server): when its first bytes are not TLS or HTTP, or
    // when it says nothing for a moment, it is that name's. TLS and HTTP
    // are decided on the name they carry, as everywhere.
    // With --ask, a name on no list may be put to a person as well.
    let by_address: Option<(String, Option<String>)> = original.and_then(|a| {
        let name = shared.addresses.lock().ok()?.name_of(*a.ip())?.to_string();
        match shared.matcher.allows(&name, a.port()) {
            Some(m) => m.rule.port.map(|_| (name, Some(m.rule.source.clone()))),
            None => shared.ask.then_some((name, None)),
        }
    });
    let wait = if by_address.is_some() {
        SERVER_FIRST_WAIT
    } else {
        FIRST_BYTES_TIMEOUT
    };
    let first = read_first_bytes(&mut conn, &mut buf, wait, port).await;
    let other = speaks_other(&first, &buf, port);
    let (protocol, verdict) = match (first, by_address) {
        (_, Some((name, Some(rule)))) if other => (
            "tcp",
            Verdict::Allow {
                name,
                rule,
                port,
                tunnel: false,
            },
        ),
        (_, Some((name, None))) if other => (
            "tcp",
            Verdict::Deny {
                name: Some(name),
                why: format!("no --allow-domain entry for this name on port {port}"),
                http: false,
                ask_port: Some(port),
            },
        ),
        (Ok(first), _) => decide(first, port, shared),
        (Err(why), _) => (
            "tcp",
            Verdict::Deny {
                name: None,
                why,
                http: false,
                ask_port: None,
            },
        ),
    };
    // A name on no list, with --ask: a person decides.
    let verdict = match verdict {
        Verdict::Deny {
            name: Some(name),
            why,
            http,
            ask_port: Some(to_port),
        } if shared.ask => match ask(shared, protocol, &name, to_port).await {
            Ok(rule) => Verdict::Allow {
                name,
                rule,
                port: to_port,
                tunnel: protocol == "connect",
            },
            Err(asked) => Verdict::Deny {
                name: Some(name),
                why: format!("{why}; {asked}"),
                http,
                ask_port: Some(to_port),
            },
        },
        other => other,
    };
    // A placeholder in a CONNECT (its target or headers) on its way to a
    // host that is not its secret's: refused before the tunnel opens.
    let verdict = match (verdict, shared.terminator.as_ref()) {
        (
            Verdict::Allow {
                name,
                rule,
                port: to_port,
                tunnel: true,
            },
            Some(t),
        ) => {
            let head_len = parse_request_head(&buf, to_port)
                .ok()
                .flatten()
                .map(|h| h.head_len)
                .unwrap_or(buf.len());
            match t.stray_placeholder(&buf[..head_len.min(buf.len())], &name, to_port) {
                Some(secret) => {
                    let why = record_stray(shared, secret, &name, to_port, original);
                    Verdict::Deny {
                        name: Some(name),
                        why,
                        http: true,
                        ask_port: None,
                    }
                }
                None => Verdict::Allow {
                    name,
                    rule,
                    port: to_port,
                    tunnel: true,
                },
            }
        }
        (v, _) => v,
    };
    // A CONNECT is answered at once; what the client then sends through the
    // tunnel must pass the same rules as a transparent connection to the
    // same name and port (TLS for that name, HTTP only with --allow-http,
    // anything else only for an explicit name:port entry).
    let (protocol, verdict) = match verdict {
        Verdict::Allow {
            name,
            rule,
            port: to_port,
            tunnel: true,
        } => {
            let head_len = parse_request_head(&buf, to_port)
                .ok()
                .flatten()
                .map(|h| h.head_len)
                .unwrap_or(buf.len());
            buf.drain(..head_len.min(buf.len()));
            let explicit = shared
                .matcher
                .allows(&name, to_port)
                .is_some_and(|m| m.rule.port.is_some());
            let answered = conn
                .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                .await;
            let wait = if explicit {
                SERVER_FIRST_WAIT
            } else {
                FIRST_BYTES_TIMEOUT
            };
            let inner = match answered {
                Err(e) => Err(format!("cannot answer the CONNECT: {e}")),
                Ok(()) => read_first_bytes(&mut conn, &mut buf, wait, to_port).await,
            };
            let other = speaks_other(&inner, &buf, to_port);
            let deny = |why: String| {
                (
                    "connect",
                    Verdict::Deny {
                        name: Some(name.clone()),
                        why,
                        http: false,
                        ask_port: Some(to_port),
                    },
                )
            };
            if explicit && other {
                (
                    "connect",
                    Verdict::Allow {
                        name: name.clone(),
                        rule,
                        port: to_port,
                        tunnel: true,
                    },
                )
            } else {
                match inner.map(|first| decide(first, to_port, shared)) {
                    Err(why) => deny(format!("inside the CONNECT tunnel: {why}")),
                    Ok((
                        _,
                        Verdict::Allow {
                            name: inner_name, ..
                        },
                    )) if inner_name == name => (
                        "connect",
                        Verdict::Allow {
                            name: name.clone(),
                            rule,
                            port: to_port,
                            tunnel: true,
                        },
                    ),
                    Ok((
                        _,
                        Verdict::Allow {
                            name: inner_name, ..
                        },
                    )) => deny(format!(
                        "the tunnel to {name} carries a connection for {inner_name}"
                    )),
                    // The tunnel's own name, allowed when asked about the
                    // CONNECT: the same name and port need no second answer.
                    Ok((
                        _,
                        Verdict::Deny {
                            name: Some(inner_name),
                            ask_port: Some(_),
                            ..
                        },
                    )) if shared.ask && inner_name == name => (
                        "connect",
                        Verdict::Allow {
                            name: name.clone(),
                            rule,
                            port: to_port,
                            tunnel: true,
                        },
                    ),
                    Ok((_, Verdict::Deny { why, .. })) => {
                        deny(format!("inside the CONNECT tunnel: {why}"))
                    }
                }
            }
        }
        other => (protocol, other),
    };
    let mut decision = Decision {
        protocol: Protocol::of_connection(protocol),
        name: None,
        port,
        original_destination: original.map(|a| a.to_string()),
        allowed: false,
        rule: None,
        detail: String::new(),
        bytes_out: 0,
        bytes_in: 0,
        duration_ms: 0,
    };
    match verdict {
        Verdict::Deny {
            name,
            why,
            http,
            ask_port,
        } => {
            // The port asked for (a CONNECT's or an absolute URI's), when
            // it is not the proxy's own.
            if let Some(p) = ask_port.or_else(|| {
                matches!(protocol, "http" | "connect")
                    .then(|| parse_request_head(&buf, port).ok().flatten())
                    .flatten()
                    .map(|h| h.destination.port)
            }) {
                decision.port = p;
            }
            decision.name = name;
            decision.detail = why.clone();
            if http {
                let body = format!("warden: denied: {why}\n");
                let reply = format!(
                    "HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = conn.write_all(reply.as_bytes()).await;
            }
            let _ = conn.shutdown().await;
        }
        Verdict::Allow {
            name,
            rule,
            port: upstream_port,
            tunnel,
        } => {
            decision.name = Some(name.clone());
            decision.rule = Some(rule);
            decision.port = upstream_port;
            // A placeholder in a name, a CONNECT or a plain request's head
            // on its way to a host that is not its secret's.
            let stray = shared.terminator.as_ref().and_then(|t| {
                let head_len = match protocol {
                    "http" => parse_request_head(&buf, port)
                        .ok()
                        .flatten()
                        .map(|h| h.head_len)
                        .unwrap_or(buf.len()),
                    _ => buf.len().min(MAX_CLIENT_HELLO),
                };
                t.stray_placeholder(&buf[..head_len.min(buf.len())], &name, upstream_port)
                    .map(str::to_string)
            });
            if let Some(secret) = stray {
                let why = record_stray(shared, &secret, &name, upstream_port, original);
                decision.allowed = false;
                decision.detail = why.clone();
                // Inside an open CONNECT tunnel an HTTP answer would be
                // taken for the other protocol's bytes: the tunnel is cut.
                if protocol == "http" {
                    let body = format!("warden: {why}\n");
                    let reply = format!(
                        "HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = conn.write_all(reply.as_bytes()).await;
                }
                let _ = conn.shutdown().await;
                decision.duration_ms = start.elapsed().as_millis() as u64;
                shared.record(&decision);
                return;
            }
            let used = shared.used.load(std::sync::atomic::Ordering::Relaxed);
            let over_quota = shared.quota.filter(|q| used >= *q);
            let upstream = match over_quota {
                Some(q) => Err(format!(
                    "the egress quota of {q} bytes is used up ({used} bytes so far)"
                )),
                None => connect_upstream(&name, upstream_port, shared).await,
            };
            match upstream {
                Err(why) => {
                    decision.detail = why;
                    if tunnel {
                        let _ = conn
                            .write_all(b"HTTP/1.1 502 Bad Gateway\r\nConnection: close\r\n\r\n")
                            .await;
                    }
                    let _ = conn.shutdown().await;
                }
                Ok((upstream, addr)) => {
                    decision.allowed = true;
                    decision.detail = format!("to {addr}");
                    let terminator = shared.terminator.clone().filter(|t| {
                        matches!(protocol, "tls" | "connect")
                            && matches!(tls::peek(&buf), ClientHello::Sni(_))
                            && t.terminates(&name, upstream_port)
                    });
                    if let Some(t) = terminator {
                        decision.detail = format!("to {addr}, TLS terminated for its secrets");
                        decision.duration_ms = start.elapsed().as_millis() as u64;
                        let at = shared.record(&decision);
                        let recorder = shared.clone();
                        let served = crate::secrets::serve(
                            t,
                            conn,
                            std::mem::take(&mut buf),
                            upstream,
                            name,
                            upstream_port,
                            Arc::new(move |d| {
                                recorder.record(&d);
                            }),
                            shared.idle,
                        )
                        .await;
                        let duration_ms = start.elapsed().as_millis() as u64;
                        let (out, inn) = served.as_ref().map(|c| *c).unwrap_or((0, 0));
                        shared
                            .used
                            .fetch_add(out + inn, std::sync::atomic::Ordering::Relaxed);
                        decision.bytes_out = out;
                        decision.bytes_in = inn;
                        decision.duration_ms = duration_ms;
                        if let Err(why) = served {
                            decision.detail = format!("{}; {why}", decision.detail);
                        }
                        shared.close(at, &decision);
                        return;
                    }
                    let mut upstream = upstream;
                    // Recorded now, while the connection is open: a
                    // connection still open when the run ends is in the log
                    // all the same. Its bytes are filled in when it ends.
                    decision.duration_ms = start.elapsed().as_millis() as u64;
                    let at = shared.record(&decision);
                    // For a CONNECT, `buf` already holds what came through
                    // the tunnel, the head having been answered above. A
                    // plain HTTP request is sent with `Connection: close`:
                    // the decision was made on its Host, and a second
                    // request on the same connection, under another Host,
                    // must not ride on it.
                    let rewritten = (protocol == "http")
                        .then(|| with_connection_close(&buf))
                        .flatten();
                    let first = rewritten.as_deref().unwrap_or(buf.as_slice());
                    let (mut out, mut inn) = (0, 0);
                    if upstream.write_all(first).await.is_ok() {
                        shared
                            .used
                            .fetch_add(first.len() as u64, std::sync::atomic::Ordering::Relaxed);
                        (out, inn) = relay(&mut conn, &mut upstream, shared).await;
                        out += first.len() as u64;
                    }
                    let duration_ms = start.elapsed().as_millis() as u64;
                    decision.bytes_out = out;
                    decision.bytes_in = inn;
                    decision.duration_ms = duration_ms;
                    shared.close(at, &decision);
                    return;
                }
            }
        }
    }
    decision.duration_ms = start.elapsed().as_millis() as u64;
    shared.record(&decision);
}

/// Record a placeholder found on its way to a host that is not its
/// secret's; returns why, for the connection's own decision.
fn record_stray(
    shared: &Shared,
    secret: &str,
    name: &str,
    port: u16,
    original: Option<std::net::SocketAddrV4>,
) -> String {
    let why = format!(
        "blocked: the placeholder of secret {secret} on its way to {name}, which is not one of its hosts"
    );
    shared.record(&Decision {
        protocol: Protocol::Secret(SecretAction::Blocked),
        name: Some(name.to_string()),
        port,
        original_destination: original.map(|a| a.to_string()),
        allowed: false,
        rule: Some(secret.to_string()),
        detail: why.clone(),
        bytes_out: 0,
        bytes_in: 0,
        duration_ms: 0,
    });
    why
}

/// Put a name on no list to the person (`--ask`): `Ok` with the rule to
/// record when allowed, `Err` with what happened otherwise.
async fn ask(
    shared: &Shared,
    protocol: &'static str,
    name: &str,
    port: u16,
) -> Result<String, String> {
    if name == HOST_ALIAS || name.ends_with(".warden.internal") {
        return Err(format!(
            "{HOST_ALIAS} is the host itself: only --allow-host-port opens its ports, never a question"
        ));
    }
    let key = (name.to_string(), port);
    if shared.granted.lock().is_ok_and(|g| g.contains(&key)) {
        return Ok("--ask (allowed for this run)".into());
    }
    if shared.asker.is_none() {
        return Err("--ask has no terminal to ask on".into());
    }
    // A name pinned by --add-host to the host itself (its loopback or one
    // of its addresses) would be a question about the host's own ports.
    if let Some(ip) = shared.hosts.get(name).filter(|_| !shared.test_ask_loopback) {
        if ip.is_loopback() || ip.to_canonical().is_loopback() || shared.own_addresses.contains(ip)
        {
            return Err(format!(
                "{name} is pinned to the host itself ({ip}) by --add-host: allow its ports with --allow-domain {name}:PORT, never through a question"
            ));
        }
    }
    let Some(asker) = shared.asker.clone() else {
        return Err("--ask has no terminal to ask on".into());
    };
    let question = Question {
        protocol,
        name: name.to_string(),
        port,
    };
    let answer = tokio::task::spawn_blocking(move || asker.ask(&question))
        .await
        .unwrap_or(Answer::Deny);
    match answer {
        Answer::Once => Ok("--ask (allowed once)".into()),
        Answer::ForRun => {
            if let Ok(mut g) = shared.granted.lock() {
                g.insert(key);
            }
            Ok("--ask (allowed for this run)".into())
        }
        Answer::Deny => Err("denied when asked (--ask)".into()),
    }
}

/// The request in `buf` as the origin server gets it: an absolute URI (a
/// request to the explicit proxy) becomes a path, with a `Host` header when
/// the request had none; headers meant for the proxy are dropped; and the
/// connection headers are replaced by `Connection: close` (the body, if any,
/// follows unchanged). `None` when `buf` does not start with a complete
/// request head.
fn with_connection_close(buf: &[u8]) -> Option<Vec<u8>> {
    let head = parse_request_head(buf, 80).ok().flatten()?;
    let head_len = head.head_len;
    let text = std::str::from_utf8(buf.get(..head_len)?).ok()?;
    let mut out = String::with_capacity(head_len + 40);
    let mut has_host = false;
    for (i, line) in text.split("\r\n").enumerate() {
        if line.is_empty() {
            continue;
        }
        if i == 0 {
            let mut parts = line.splitn(3, ' ');
            let (method, target, version) = (parts.next()?, parts.next()?, parts.next()?);
            let target = match target.strip_prefix("http://") {
                Some(rest) => match rest.find(['/', '?']) {
                    Some(at) if rest[at..].starts_with('/') => rest[at..].to_string(),
                    Some(at) => format!("/{}", &rest[at..]),
                    None => "/".to_string(),
                },
                None => target.to_string(),
            };
            out.push_str(&format!("{method} {target} {version}\r\n"));
            continue;
        }
        let name = line.split(':').next().unwrap_or_default().trim();
        if name.eq_ignore_ascii_case("host") {
            has_host = true;
        }
        if [
            "connection",
            "keep-alive",
            "proxy-connection",
            "proxy-authorization",
        ]
        .iter()
        .any(|h| name.eq_ignore_ascii_case(h))
        {
            continue;
        }
        out.push_str(line);
        out.push_str("\r\n");
    }
    if !has_host {
        let d = &head.destination;
        if d.port == 80 {
            out.push_str(&format!("Host: {}\r\n", d.host));
        } else {
            out.push_str(&format!("Host: {}:{}\r\n", d.host, d.port));
        }
    }
    out.push_str("Connection: close\r\n\r\n");
    let mut bytes = out.into_bytes();
    bytes.extend_from_slice(buf.get(head_len..)?);
    Some(bytes)
}

/// What the first bytes of a connection are, read once per arrival of
/// bytes: a TLS record, or else (perhaps) an HTTP request head.
enum First {
    Tls(ClientHello),
    Http(Result<Option<crate::http::RequestHead>, HttpError>),
}

fn classify(buf: &[u8], port: u16) -> First {
    match tls::peek(buf) {
        ClientHello::NotTls => First::Http(parse_request_head(buf, port)),
        hello => First::Tls(hello),
    }
}

impl First {
    /// More bytes could change what this is.
    fn undecided(&self) -> bool {
        matches!(
            self,
            First::Tls(ClientHello::Incomplete) | First::Http(Ok(None))
        )
    }

    /// Neither TLS nor HTTP: some other protocol.
    fn other_protocol(&self) -> bool {
        matches!(self, First::Http(Err(HttpError::Malformed(_))))
    }
}

/// Whether the bytes so far (perhaps none) are of a protocol other than
/// TLS and HTTP, from a read's result or, when it failed, from the bytes.
fn speaks_other(first: &Result<First, String>, buf: &[u8], port: u16) -> bool {
    buf.is_empty()
        || match first {
            Ok(f) => f.other_protocol(),
            // Nothing decided in time: bytes that never became TLS or HTTP
            // are some other protocol's.
            Err(_) => {
                let f = classify(buf, port);
                f.other_protocol() || f.undecided()
            }
        }
}

/// Read until the first bytes say what the connection is (or fail).
async fn read_first_bytes(
    conn: &mut TcpStream,
    buf: &mut Vec<u8>,
    wait: Duration,
    port: u16,
) -> Result<First, String> {
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        if !buf.is_empty() {
            let first = classify(buf, port);
            if !first.undecided() {
                return Ok(first);
            }
        }
        if buf.len() >= MAX_CLIENT_HELLO.max(MAX_HEAD) {
            return Err("the first bytes say nothing a decision can rest on".into());
        }
        let mut chunk = [0u8; 4096];
        let read = tokio::time::timeout_at(deadline, conn.read(&mut chunk)).await;
        match read {
            Err(_) => return Err("the client sent nothing to decide on in time".into()),
            Ok(Ok(0)) => return Err("the client closed before saying where it goes".into()),
            Ok(Ok(n)) => buf.extend_from_slice(&chunk[..n]),
            Ok(Err(e)) => return Err(format!("read error: {e}")),
        }
    }
}

fn decide(first: First, port: u16, shared: &Shared) -> (&'static str, Verdict) {
    let hello = match first {
        First::Tls(h) => h,
        First::Http(head) => return decide_http(head, shared),
    };
    match hello {
        ClientHello::Sni(name) => match shared.matcher.allows(&name, port) {
            Some(m) => (
                "tls",
                Verdict::Allow {
                    name,
                    rule: m.rule.source.clone(),
                    port,
                    tunnel: false,
                },
            ),
            None => (
                "tls",
                Verdict::Deny {
                    name: Some(name),
                    why: format!("no --allow-domain entry for this name on port {port}"),
                    http: false,
                    ask_port: Some(port),
                },
            ),
        },
        ClientHello::NoName => (
            "tls",
            Verdict::Deny {
                name: None,
                why: "a TLS connection without a server name (or to a raw IP)".into(),
                http: false,
                ask_port: None,
            },
        ),
        ClientHello::EncryptedClientHello => (
            "tls",
            Verdict::Deny {
                name: None,
                why: "Encrypted Client Hello hides the name; it is refused".into(),
                http: false,
                ask_port: None,
            },
        ),
        ClientHello::Malformed(why) => (
            "tls",
            Verdict::Deny {
                name: None,
                why: why.into(),
                http: false,
                ask_port: None,
            },
        ),
        ClientHello::Incomplete | ClientHello::NotTls => decide_http(Ok(None), shared),
    }
}

/// The decision for what read as an HTTP request head (or did not).
fn decide_http(
    head: Result<Option<crate::http::RequestHead>, HttpError>,
    shared: &Shared,
) -> (&'static str, Verdict) {
    match head {
        Ok(Some(head)) => {
            let name = head.destination.host.clone();
            let to_port = head.destination.port;
            let protocol = if head.connect { "connect" } else { "http" };
            // A host service opened with --allow-host-port speaks what it
            // speaks: plain HTTP to it needs no --allow-http.
            if !head.connect && !shared.allow_http && !shared.is_host_service(&name, to_port) {
                return (
                    "http",
                    Verdict::Deny {
                        name: Some(name),
                        why: "plain HTTP is denied (pass --allow-http to permit it)".into(),
                        http: true,
                        ask_port: None,
                    },
                );
            }
            match shared.matcher.allows(&name, to_port) {
                Some(m) => (
                    protocol,
                    Verdict::Allow {
                        name,
                        rule: m.rule.source.clone(),
                        port: to_port,
                        tunnel: head.connect,
                    },
                ),
                None => (
                    protocol,
                    Verdict::Deny {
                        name: Some(name),
                        why: format!("no --allow-domain entry for this name on port {to_port}"),
                        http: true,
                        ask_port: Some(to_port),
                    },
                ),
            }
        }
        Ok(None) => (
            "tcp",
            Verdict::Deny {
                name: None,
                why: "not TLS or HTTP: raw TCP is not allowed".into(),
                http: false,
                ask_port: None,
            },
        ),
        Err(e @ HttpError::Malformed(_)) => (
            "tcp",
            Verdict::Deny {
                name: None,
                why: format!("not TLS or HTTP: raw TCP is not allowed ({e})"),
                http: false,
                ask_port: None,
            },
        ),
        Err(e) => (
            "http",
            Verdict::Deny {
                name: None,
                why: e.to_string(),
                http: true,
                ask_port: None,
            },
        ),
    }
}

/// Copy both ways until both sides have ended, or until neither has sent
/// anything for the idle timeout. Returns the bytes out (sandbox to
/// upstream) and in; every chunk also counts towards the egress quota as it
/// passes.
async fn relay(conn: &mut TcpStream, upstream: &mut TcpStream, shared: &Shared) -> (u64, u64) {
    let idle = shared.idle;
    let start = tokio::time::Instant::now();
    // Milliseconds since `start` of the last byte either way.
    let last = std::sync::atomic::AtomicU64::new(0);
    let (mut cr, mut cw) = conn.split();
    let (mut ur, mut uw) = upstream.split();
    let out = pump(&mut cr, &mut uw, &last, start, idle, &shared.used);
    let inn = pump(&mut ur, &mut cw, &last, start, idle, &shared.used);
    tokio::join!(out, inn)
}

async fn pump<R, W>(
    from: &mut R,
    to: &mut W,
    last: &std::sync::atomic::AtomicU64,
    start: tokio::time::Instant,
    idle: Duration,
    used: &std::sync::atomic::AtomicU64,
) -> u64
where
    R: tokio::io::AsyncRead + Unpin,
    W: tokio::io::AsyncWrite + Unpin,
{
    use std::sync::atomic::Ordering::Relaxed;
    let mut buf = vec![0u8; COPY_BUFFER];
    let mut total = 0u64;
    loop {
        let n = match tokio::time::timeout(idle, from.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => break,
            Ok(Ok(n)) => n,
            Err(_) => {
                // Quiet this way: go on while the other way is busy.
                let idle_ms = start.elapsed().as_millis() as u64 - last.load(Relaxed);
                if idle_ms >= idle.as_millis() as u64 {
                    break;
                }
                continue;
            }
        };
        if to.write_all(&buf[..n]).await.is_err() {
            break;
        }
        total += n as u64;
        used.fetch_add(n as u64, Relaxed);
        last.store(start.elapsed().as_millis() as u64, Relaxed);
    }
    let _ = to.shutdown().await;
    total
}

/// Resolve `name` on the host side and connect. Addresses from `--add-host`
/// are used as given; resolved ones must be public (no DNS rebinding onto
/// the host's own or private services).
async fn connect_upstream(
    name: &str,
    port: u16,
    shared: &Shared,
) -> Result<(TcpStream, SocketAddr), String> {
    let candidates: Vec<SocketAddr> = match shared.hosts.get(name) {
        Some(ip) => vec![SocketAddr::new(*ip, port)],
        // A host service opened with --allow-host-port (the matcher allowed
        // only those ports for this name): the host's own loopback.
        None if shared.is_host_service(name, port) => vec![
            SocketAddr::new(IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), port),
            SocketAddr::new(IpAddr::V6(std::net::Ipv6Addr::LOCALHOST), port),
        ],
        None => {
            let resolver = shared
                .resolver
                .as_ref()
                .map_err(|e| format!("cannot resolve {name}: {e}"))?;
            let resolved = resolver
                .lookup_ip(name)
                .await
                .map_err(|e| format!("cannot resolve {name}: {e}"))?;
            let all: Vec<SocketAddr> = resolved
                .iter()
                .map(|ip| SocketAddr::new(ip, port))
                .collect();
            let public: Vec<SocketAddr> = all
                .iter()
                .copied()
                .filter(|a| usable_upstream(a.ip(), &shared.cidrs, &shared.own_addresses))
                .collect();
            if public.is_empty() {
                return Err(format!(
                    "{name} resolves only to non-public or the host's own addresses ({all:?}); use --add-host or --allow-cidr to allow one"
                ));
            }
            public
        }
    };
    let mut last = String::from("no address");
    for addr in candidates {
        match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr)).await {
            Ok(Ok(s)) => return Ok((s, addr)),
            Ok(Err(e)) => last = format!("cannot connect to {addr}: {e}"),
            Err(_) => last = format!("connecting to {addr} timed out"),
        }
    }
    Err(last)
}

/// Whether a resolved address may be connected to: public, or in a range
/// of `--allow-cidr`; never one of the host's own addresses or its loopback
/// (host services are reached through `--allow-host-port` alone).
fn usable_upstream(ip: IpAddr, cidrs: &[ipnet::IpNet], own: &[IpAddr]) -> bool {
    (is_public(ip) || cidrs.iter().any(|c| c.contains(&ip)))
        && !own.contains(&ip)
        && !ip.is_loopback()
        && !ip.to_canonical().is_loopback()
}

/// Globally routable: not loopback, private, link-local, CGNAT, unique
/// local, multicast, documentation, benchmark or unspecified.
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(a) => {
            let o = a.octets();
            !(a.is_loopback()
                || a.is_private()
                || a.is_link_local()
                || a.is_unspecified()
                || a.is_broadcast()
                || a.is_multicast()
                || a.is_documentation()
                || o[0] == 0
                || (o[0] == 100 && (o[1] & 0xc0) == 64)
                || (o[0] == 198 && (o[1] & 0xfe) == 18)
                || (o[0] == 192 && o[1] == 0 && o[2] == 0)
                // Azure's WireServer, a metadata-like host service.
                || o == [168, 63, 129, 16]
                || o[0] >= 240)
        }
        IpAddr::V6(a) => {
            let s = a.segments();
            // Forms that carry an IPv4 address are judged by it: mapped
            // (::ffff:a.b.c.d), compatible (::a.b.c.d), NAT64
            // (64:ff9b::a.b.c.d) and 6to4 (2002:aabb:ccdd::).
            let embedded = if let Some(v4) = a.to_ipv4_mapped() {
                Some(v4)
            } else if s[..6] == [0, 0, 0, 0, 0, 0]
                || (s[0] == 0x64 && s[1] == 0xff9b && s[2..6] == [0, 0, 0, 0])
            {
                Some(std::net::Ipv4Addr::new(
                    (s[6] >> 8) as u8,
                    s[6] as u8,
                    (s[7] >> 8) as u8,
                    s[7] as u8,
                ))
            } else if s[0] == 0x2002 {
                Some(std::net::Ipv4Addr::new(
                    (s[1] >> 8) as u8,
                    s[1] as u8,
                    (s[2] >> 8) as u8,
                    s[2] as u8,
                ))
            } else {
                None
            };
            if let Some(v4) = embedded {
                return is_public(IpAddr::V4(v4));
            }
            !(a.is_loopback()
                || a.is_unspecified()
                || a.is_multicast()
                || (s[0] & 0xfe00) == 0xfc00
                || (s[0] & 0xffc0) == 0xfe80
                || (s[0] & 0xffc0) == 0xfec0
                || (s[0] == 0x2001 && s[1] == 0x0db8))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_http_requests_are_sent_with_connection_close() {
        let req = b"GET / HTTP/1.1\r\nHost: a.test\r\nConnection: keep-alive\r\nKeep-Alive: 5\r\n\r\nGET /2 HTTP/1.1\r\nHost: evil.test\r\n\r\n";
        let out = String::from_utf8(with_connection_close(req).unwrap()).unwrap();
        assert!(
            out.starts_with("GET / HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\nGET /2"),
            "{out}"
        );
        assert!(!out.to_ascii_lowercase().contains("keep-alive"));
    }

    #[test]
    fn an_absolute_uri_reaches_the_origin_as_a_path_with_a_host() {
        let req = b"GET http://a.test:8080/x/y?q=1 HTTP/1.1\r\nProxy-Authorization: Basic Zm9v\r\nAccept: */*\r\n\r\n";
        let out = String::from_utf8(with_connection_close(req).unwrap()).unwrap();
        assert_eq!(
            out,
            "GET /x/y?q=1 HTTP/1.1\r\nAccept: */*\r\nHost: a.test:8080\r\nConnection: close\r\n\r\n"
        );
        let req = b"GET http://a.test?q HTTP/1.1\r\nHost: a.test\r\n\r\n";
        let out = String::from_utf8(with_connection_close(req).unwrap()).unwrap();
        assert!(
            out.starts_with("GET /?q HTTP/1.1\r\nHost: a.test\r\n"),
            "{out}"
        );
        assert!(with_connection_close(b"GET / HTTP/1.1\r\nHost: a").is_none());
    }

    #[test]
    fn allow_cidr_opens_its_range_but_never_the_hosts_loopback_or_own_addresses() {
        let cidrs: Vec<ipnet::IpNet> = vec![
            "10.20.0.0/16".parse().unwrap(),
            "127.0.0.0/8".parse().unwrap(),
        ];
        let own: Vec<IpAddr> = vec!["10.20.0.5".parse().unwrap()];
        let ok = |s: &str| usable_upstream(s.parse().unwrap(), &cidrs, &own);
        assert!(ok("10.20.3.4"));
        assert!(ok("93.184.216.34"));
        assert!(!ok("10.21.0.1"), "outside the range");
        assert!(!ok("10.20.0.5"), "the host's own address");
        assert!(!ok("127.0.0.1"), "loopback, even inside a range");
        assert!(!ok("::ffff:127.0.0.1"));
        assert!(!usable_upstream("10.20.3.4".parse().unwrap(), &[], &[]));
    }

    #[test]
    fn only_global_addresses_are_public() {
        for private in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "198.18.0.1",
            "224.0.0.1",
            "::1",
            "fc00::1",
            "fe80::1",
            "::ffff:127.0.0.1",
        ] {
            assert!(!is_public(private.parse().unwrap()), "{private}");
        }
        for public in ["93.184.216.34", "1.1.1.1", "2606:4700::1111"] {
            assert!(is_public(public.parse().unwrap()), "{public}");
        }
    }
}
