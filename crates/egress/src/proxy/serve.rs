//! Serving: the proxy's one thread, and the runtime it starts only when
//! the sandbox first needs it.
//!
//! The sandbox's listening socket and resolver socket exist (and queue
//! what arrives: connections in the listen backlog, questions in the
//! socket's receive buffer) before a byte is sent, so nothing has to run
//! for them until something arrives. [`spawn`] starts one thread that
//! waits, in `poll(2)`, until the first connection or question is queued
//! (or the proxy stops); only then does it raise the descriptor limit,
//! build its tokio runtime and serve. A sandbox that never uses the
//! network (`warden run --allow-domain X -- true`) never pays for the
//! runtime, and the first connection or question is served like any other:
//! it waited in the kernel's queue, not lost.
//!
//! The runtime is a current-thread one on that same thread: every
//! connection's decision and relay, and the resolver, run there. A
//! connection's two directions already share one task, so a second worker
//! only added hand-offs between threads (wake-ups and context switches
//! on every connection), not parallelism within a connection (see the
//! README's performance section for what was measured). TLS terminated for
//! secrets is served on a runtime of its own (`secrets`), and a person's
//! answer to `--ask` is awaited on the blocking pool, so neither holds
//! this thread.

use super::{handle_connection, serve_dns, OpenGuard, Shared, CONNECTION_COST, MAX_CONNECTIONS};
use super::{ProxyError, MEMORY_BUDGET_KIB};
use crate::decision::{Decision, Protocol};
use crate::socket::original_destination;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, UdpSocket};
use tokio::sync::watch;

/// The proxy's state, as [`super::Proxy::stop`] moves it on.
pub(super) const RUNNING: u8 = 0;
/// No new connection or question is taken; open connections go on.
pub(super) const HALTED: u8 = 1;
/// Open connections are cut.
pub(super) const STOPPED: u8 = 2;

/// The thread's stack: it polls, then runs the runtime's tasks, whose
/// futures live on the heap.
const STACK: usize = 256 * 1024;

/// What the serving thread is handed.
pub(super) struct Sockets {
    pub(super) tcp: OwnedFd,
    pub(super) dns: OwnedFd,
    /// Readable (closed) once the proxy stops: ends the wait for a first
    /// client.
    pub(super) wake: UnixStream,
}

/// Start the proxy's thread: it waits for the first connection or
/// question, then serves until `state` reaches [`STOPPED`].
pub(super) fn spawn(
    sockets: Sockets,
    shared: Arc<Shared>,
    state: watch::Receiver<u8>,
    open: Arc<AtomicUsize>,
) -> Result<std::thread::JoinHandle<()>, ProxyError> {
    std::thread::Builder::new()
        .name("warden-egress".into())
        .stack_size(STACK)
        .spawn(move || {
            if !first_client(&sockets) {
                return;
            }
            if let Err(e) = serve(sockets.tcp, sockets.dns, &shared, state, open) {
                // The listening socket is closed with this thread: the
                // sandbox's connections are refused, not left waiting.
                shared.record(&Decision {
                    protocol: Protocol::Tcp,
                    name: None,
                    port: 0,
                    original_destination: None,
                    allowed: false,
                    rule: None,
                    detail: format!("the egress proxy could not start: {e}"),
                    bytes_out: 0,
                    bytes_in: 0,
                    duration_ms: 0,
                    reason: None,
                });
            }
        })
        .map_err(ProxyError::Thread)
}

/// Wait until a connection or a question is queued (true), or the proxy
/// stops first (false).
fn first_client(s: &Sockets) -> bool {
    let ready = PollFlags::POLLIN;
    loop {
        let mut fds = [
            PollFd::new(s.tcp.as_fd(), ready),
            PollFd::new(s.dns.as_fd(), ready),
            PollFd::new(s.wake.as_fd(), ready),
        ];
        match poll(&mut fds, PollTimeout::NONE) {
            Ok(_) => {
                let fired = |f: &PollFd| f.revents().is_some_and(|r| !r.is_empty());
                if fired(&fds[2]) {
                    return false;
                }
                if fired(&fds[0]) || fired(&fds[1]) {
                    return true;
                }
            }
            Err(nix::errno::Errno::EINTR) => {}
            // poll itself failed: serve, and let the runtime report what
            // fails there.
            Err(_) => return true,
        }
    }
}

/// Build the runtime on this thread and serve until [`STOPPED`].
fn serve(
    tcp: OwnedFd,
    dns: OwnedFd,
    shared: &Arc<Shared>,
    mut state: watch::Receiver<u8>,
    open: Arc<AtomicUsize>,
) -> Result<(), ProxyError> {
    // Two descriptors per proxied connection: raise the supervisor's
    // soft limit to its hard one (the sandbox keeps its own limit).
    if let Ok((_, hard)) =
        nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
    {
        let _ =
            nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE, hard, hard);
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .thread_name("warden-egress")
        .enable_io()
        .enable_time()
        .build()
        .map_err(ProxyError::Runtime)?;
    let std_listener = std::net::TcpListener::from(tcp);
    let std_udp = std::net::UdpSocket::from(dns);
    std_listener
        .set_nonblocking(true)
        .map_err(ProxyError::Socket)?;
    // Nagle's algorithm off once, on the listening socket: every accepted
    // connection inherits it (one system call less per connection).
    nix::sys::socket::setsockopt(&std_listener, nix::sys::socket::sockopt::TcpNoDelay, &true)
        .map_err(|e| ProxyError::Socket(e.into()))?;
    std_udp.set_nonblocking(true).map_err(ProxyError::Socket)?;
    runtime.block_on(async {
        let listener = TcpListener::from_std(std_listener).map_err(ProxyError::Socket)?;
        let udp = UdpSocket::from_std(std_udp).map_err(ProxyError::Socket)?;
        let accept = tokio::spawn(accept_loop(listener, shared.clone(), state.clone(), open));
        let s = shared.clone();
        let dns = tokio::spawn(async move { serve_dns(udp, &s).await });
        let _ = state.wait_for(|v| *v >= HALTED).await;
        accept.abort();
        dns.abort();
        let _ = state.wait_for(|v| *v >= STOPPED).await;
        Ok::<(), ProxyError>(())
    })?;
    // Connections still open saw STOPPED and end at their next poll.
    runtime.shutdown_timeout(Duration::from_millis(100));
    Ok(())
}

/// Take each connection, within the limits, and serve it on a task of its
/// own until it ends or the proxy stops.
async fn accept_loop(
    listener: TcpListener,
    s: Arc<Shared>,
    stopped: watch::Receiver<u8>,
    counted: Arc<AtomicUsize>,
) {
    loop {
        let conn = match listener.accept().await {
            Ok((conn, _)) => conn,
            Err(_) => {
                // Out of descriptors (or another passing failure): back
                // off instead of spinning.
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let permits = s
            .slots
            .clone()
            .try_acquire_owned()
            .map_err(|_| format!("more than {MAX_CONNECTIONS} connections at once"));
        let memory = permits.and_then(|p| {
            s.connection_memory
                .clone()
                .try_acquire_many_owned(CONNECTION_COST)
                .map(|m| (p, m))
                .map_err(|_| {
                    format!(
                        "the proxy's memory budget ({} MiB) is spent: {} connections are open",
                        MEMORY_BUDGET_KIB / 1024,
                        MAX_CONNECTIONS - s.slots.available_permits()
                    )
                })
        });
        let permit = match memory {
            Ok(p) => p,
            Err(why) => {
                // Over a limit: refused at once, and recorded.
                let original = original_destination(&conn).ok();
                s.record(&Decision {
                    protocol: Protocol::Tcp,
                    name: None,
                    port: original.map(|a| a.port()).unwrap_or(0),
                    original_destination: original.map(|a| a.to_string()),
                    allowed: false,
                    rule: None,
                    detail: why,
                    bytes_out: 0,
                    bytes_in: 0,
                    duration_ms: 0,
                    reason: None,
                });
                drop(conn);
                continue;
            }
        };
        let mut stopped = stopped.clone();
        let guard = OpenGuard::new(&counted);
        let s = s.clone();
        tokio::spawn(async move {
            let _guard = guard;
            // Cut when the proxy stops, like every open connection.
            tokio::select! {
                _ = handle_connection(conn, &s) => {}
                _ = stopped.wait_for(|v| *v >= STOPPED) => {}
            }
            drop(permit);
        });
    }
}

#[cfg(test)]
mod tests {
    use crate::decision::Deaf;
    use crate::proxy::{Hooks, Proxy};
    use std::io::{Read, Write};
    use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
    use std::os::fd::OwnedFd;
    use std::sync::Arc;
    use std::time::{Duration, Instant};
    use warden_policy::{DomainRule, EgressSpec};

    /// A proxy on loopback sockets (what the jail would hand it), allowing
    /// `up.test:PORT` pinned to the host's loopback, with plain HTTP.
    fn proxy(port: u16) -> (Proxy, SocketAddr, SocketAddr) {
        proxy_with(port, warden_policy::TestHooks::default())
    }

    /// [`proxy`], with what a test switched on given in its hooks.
    fn proxy_with(port: u16, test: warden_policy::TestHooks) -> (Proxy, SocketAddr, SocketAddr) {
        let tcp = TcpListener::bind("127.0.0.1:0").unwrap();
        let dns = UdpSocket::bind("127.0.0.1:0").unwrap();
        let (tcp_at, dns_at) = (tcp.local_addr().unwrap(), dns.local_addr().unwrap());
        let spec = EgressSpec {
            domains: vec![DomainRule::parse(&format!("up.test:{port}")).unwrap()],
            allow_http: true,
            hosts: vec![("up.test".into(), IpAddr::V4(Ipv4Addr::LOCALHOST))],
            cidrs: Vec::new(),
            host_ports: Vec::new(),
            ask: false,
            log: false,
            quota: None,
            idle_timeout: Duration::from_secs(60),
            secrets: Vec::new(),
            secret_rules: Vec::new(),
            upstream_ca: Vec::new(),
            learn: false,
            requests: Vec::new(),
            secret_plain_ports: Vec::new(),
        };
        let hooks = Hooks {
            observer: Arc::new(Deaf),
            asker: None,
            terminator: None,
            test,
        };
        let p = Proxy::start(&spec, OwnedFd::from(tcp), OwnedFd::from(dns), hooks).unwrap();
        (p, tcp_at, dns_at)
    }

    /// The test switches are the caller's to give: what the process's
    /// environment says is not read by the proxy, and what the hooks say
    /// is honoured (debug builds; a release build honours neither).
    #[test]
    fn the_proxy_takes_its_test_switches_from_its_hooks_never_from_the_environment() {
        std::env::set_var("WARDEN_TEST_RESOLVE", "env.test=192.0.2.1");
        std::env::set_var("WARDEN_TEST_ASK_LOOPBACK", "1");
        let (p, _, _) = proxy(9);
        assert!(p.shared.test_resolved.is_empty());
        assert!(!p.shared.test_ask_loopback);
        p.stop();
        let (p, _, _) = proxy_with(
            9,
            warden_policy::TestHooks {
                resolve: Some("hooked.test=192.0.2.2".into()),
                ask_loopback: true,
                ..Default::default()
            },
        );
        let hooked: Vec<IpAddr> = vec!["192.0.2.2".parse().unwrap()];
        if cfg!(debug_assertions) {
            assert_eq!(p.shared.test_resolved.get("hooked.test"), Some(&hooked));
            assert!(p.shared.test_ask_loopback);
        } else {
            assert!(p.shared.test_resolved.is_empty());
            assert!(!p.shared.test_ask_loopback);
        }
        assert!(!p.shared.test_resolved.contains_key("env.test"));
        p.stop();
    }

    /// The next connection to `l`, within 10 s.
    fn accept_within(l: &TcpListener) -> TcpStream {
        l.set_nonblocking(true).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match l.accept() {
                Ok((s, _)) => {
                    s.set_nonblocking(false).unwrap();
                    return s;
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    assert!(Instant::now() < deadline, "nothing reached the upstream");
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(e) => panic!("{e}"),
            }
        }
    }

    #[test]
    fn the_first_connection_reaches_upstream_through_a_runtime_started_for_it() {
        let upstream = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = upstream.local_addr().unwrap().port();
        let (p, tcp_at, _) = proxy(port);
        // The very first thing the sandbox does: a connection, queued in
        // the listen backlog while the proxy's runtime does not exist yet.
        let mut client = TcpStream::connect(tcp_at).unwrap();
        client
            .write_all(format!("GET /first HTTP/1.1\r\nHost: up.test:{port}\r\n\r\n").as_bytes())
            .unwrap();
        let mut server = accept_within(&upstream);
        server
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut got = Vec::new();
        let mut chunk = [0u8; 1024];
        while !got.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = server.read(&mut chunk).unwrap();
            assert!(n > 0, "upstream closed before the request arrived");
            got.extend_from_slice(&chunk[..n]);
        }
        assert!(got.starts_with(b"GET /first HTTP/1.1\r\n"), "{got:?}");
        server
            .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfirst")
            .unwrap();
        drop(server);
        client
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut answer = String::new();
        client.read_to_string(&mut answer).unwrap();
        assert!(answer.ends_with("first"), "{answer}");
        p.stop();
    }

    #[test]
    fn the_first_dns_question_is_answered_by_a_runtime_started_for_it() {
        use hickory_proto::op::{Message, MessageType, Query};
        use hickory_proto::rr::{Name, RData, RecordType};
        let (p, _, dns_at) = proxy(8080);
        let mut q = Message::new();
        q.set_id(7)
            .set_message_type(MessageType::Query)
            .set_recursion_desired(true);
        q.add_query(Query::query(
            Name::from_ascii("up.test.").unwrap(),
            RecordType::A,
        ));
        let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        sock.send_to(&q.to_vec().unwrap(), dns_at).unwrap();
        let mut buf = [0u8; 512];
        let n = sock
            .recv(&mut buf)
            .expect("the first question went unanswered");
        let answer = Message::from_vec(&buf[..n]).unwrap();
        assert_eq!(answer.id(), 7);
        assert!(
            matches!(
                answer.answers().first().map(|r| r.data()),
                Some(RData::A(_))
            ),
            "{answer:?}"
        );
        p.stop();
    }

    /// One spliced exchange through the proxy: `body` through a CONNECT
    /// tunnel to the explicit `up.test:PORT` entry (a protocol other than
    /// TLS or HTTP, passed as it is), then a half-close; the upstream
    /// answers `reply` once it has read everything. Returns what the
    /// upstream received and what the client received through the tunnel.
    fn exchange(
        tcp_at: SocketAddr,
        upstream: &TcpListener,
        port: u16,
        body: &[u8],
        reply: &[u8],
    ) -> (Vec<u8>, Vec<u8>) {
        let mut client = TcpStream::connect(tcp_at).unwrap();
        let head = format!("CONNECT up.test:{port} HTTP/1.1\r\nHost: up.test:{port}\r\n\r\n");
        let sent = body.to_vec();
        let writer = {
            let mut c = client.try_clone().unwrap();
            std::thread::spawn(move || {
                c.write_all(head.as_bytes()).unwrap();
                c.write_all(&sent).unwrap();
                c.shutdown(std::net::Shutdown::Write).unwrap();
            })
        };
        let mut server = accept_within(upstream);
        server
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        let mut got = Vec::new();
        server.read_to_end(&mut got).unwrap();
        server.write_all(reply).unwrap();
        drop(server);
        writer.join().unwrap();
        client
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        let mut answer = Vec::new();
        client.read_to_end(&mut answer).unwrap();
        let opened = b"HTTP/1.1 200 Connection established\r\n\r\n";
        assert!(answer.starts_with(opened), "the tunnel was not opened");
        (got, answer[opened.len()..].to_vec())
    }

    #[test]
    fn relay_buffers_kept_from_an_earlier_connection_carry_none_of_its_bytes() {
        let upstream = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = upstream.local_addr().unwrap().port();
        let (p, tcp_at, _) = proxy(port);
        // A bulk exchange fills both directions' starting buffers (and
        // grows them), which are then kept for the next connections.
        // (Bytes that neither TLS nor HTTP reads: the tunnel's explicit
        // entry passes them as another protocol's.)
        let big_out = vec![0x01; 3 << 20];
        let big_in = vec![b'B'; 3 << 20];
        let (got, answer) = exchange(tcp_at, &upstream, port, &big_out, &big_in);
        assert!(got == big_out, "the bulk upload arrived changed");
        assert!(answer == big_in, "the bulk download arrived changed");
        // Short exchanges on kept buffers: exactly their own bytes, in
        // order, each way, with no byte of the earlier connection.
        for i in 0..12 {
            let body = format!("short request {i}").into_bytes();
            let reply = format!("short answer {i}").into_bytes();
            let (got, answer) = exchange(tcp_at, &upstream, port, &body, &reply);
            assert_eq!(
                String::from_utf8_lossy(&got),
                String::from_utf8_lossy(&body)
            );
            assert_eq!(
                String::from_utf8_lossy(&answer),
                String::from_utf8_lossy(&reply)
            );
        }
        // An empty exchange: both closes passed on, nothing else.
        let (got, answer) = exchange(tcp_at, &upstream, port, b"", b"");
        assert!(got.is_empty() && answer.is_empty(), "{got:?} {answer:?}");
        p.stop();
    }

    #[test]
    fn a_proxy_stopped_before_its_first_client_ends_at_once_and_takes_no_connection() {
        let (p, tcp_at, _) = proxy(8080);
        let started = Instant::now();
        p.stop();
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "stopping a proxy that never served took {:?}",
            started.elapsed()
        );
        // Its listening socket is closed: a connection is refused, not
        // left waiting in a backlog nobody takes.
        assert!(TcpStream::connect(tcp_at).is_err());
    }
}
