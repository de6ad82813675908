//! Relaying: what becomes of a decided connection.
//!
//! This module owns the end of every connection: a denial answered (403 for
//! HTTP) and closed; an allowed one connected upstream (a CONNECT answered
//! only then, so that a refusal by address is its 403; resolved on the
//! host; resolved addresses must be public or in the owner's ranges, never
//! the host's own; the host's loopback only for the host ports the owner
//! opened), then
//! spliced both ways under the idle timeout with every byte counted towards
//! the quota, or handed to the secret terminator; and its report: the
//! decision when it is made, its bytes when it ends. It never decides
//! whether a connection may go (`decide` does).

use super::decide::{self, admit, Refusal, Verdict};
use super::{live, pass, plain, Arrival, Shared};
use crate::decision::{Cause, Decision, Protocol, Reason};
use crate::http::parse_request_head;
use crate::tls::{self, ClientHello};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use warden_policy::HOST_ALIAS;

/// How long connecting upstream may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Answer a denied connection, or connect an allowed one and splice it or
/// hand it to the terminator; report it.
pub(super) async fn settle(
    conn: TcpStream,
    buf: Vec<u8>,
    at: &Arrival,
    protocol: Protocol,
    verdict: Verdict,
    shared: &Arc<Shared>,
) {
    let mut decision = Decision {
        protocol,
        name: None,
        port: at.port,
        original_destination: at.original.map(|a| a.to_string()),
        allowed: false,
        rule: None,
        detail: String::new(),
        bytes_out: 0,
        bytes_in: 0,
        duration_ms: 0,
        reason: None,
    };
    match verdict {
        Verdict::Deny {
            name,
            why,
            cause,
            http,
            ask_port,
        } => {
            // The port asked for (a CONNECT's or an absolute URI's), when
            // it is not the proxy's own.
            if let Some(p) = ask_port.or_else(|| {
                matches!(protocol, Protocol::Http | Protocol::Connect)
                    .then(|| parse_request_head(&buf, at.port).ok().flatten())
                    .flatten()
                    .map(|h| h.destination.port)
            }) {
                decision.port = p;
            }
            decision.name = name;
            let answer = http.then(|| forbidden(cause.reason, &format!("denied: {why}")));
            decision.detail = why;
            decision.reason = Some(cause);
            refused(conn, answer, decision, at, shared).await;
        }
        Verdict::Refuse { name, why, cause } => {
            decision.name = Some(name);
            decision.detail = why;
            decision.reason = Some(cause);
            // A reset, not an orderly close: the client's next read or
            // write fails at once with "connection reset".
            let _ = conn.set_zero_linger();
            drop(conn);
            decision.duration_ms = at.start.elapsed().as_millis() as u64;
            shared.record(&decision);
        }
        Verdict::Allow {
            name,
            rule,
            port,
            tunnel,
            owner,
            reason,
        } => {
            decision.name = Some(name.clone());
            decision.port = port;
            decision.reason = Some(Cause::new(reason));
            decision.rule = Some(rule.clone());
            let allowed = Allowed {
                name,
                rule,
                port,
                tunnel,
                owner,
                reason,
            };
            Box::pin(connect_allowed(conn, buf, at, allowed, decision, shared)).await;
        }
    }
}

/// Close a refused connection after `answer` (what the client is told,
/// when it can be told anything), and record the decision.
async fn refused(
    mut conn: TcpStream,
    answer: Option<Vec<u8>>,
    mut decision: Decision,
    at: &Arrival,
    shared: &Arc<Shared>,
) {
    if let Some(a) = answer {
        let _ = conn.write_all(&a).await;
    }
    let _ = conn.shutdown().await;
    decision.duration_ms = at.start.elapsed().as_millis() as u64;
    shared.record(&decision);
}

/// An allowed verdict's particulars.
struct Allowed {
    name: String,
    rule: String,
    port: u16,
    tunnel: bool,
    owner: bool,
    reason: Reason,
}

/// Register an allowed connection, connect its upstream (a CONNECT's
/// tunnel opened only then) and relay it; or say why it could not be.
async fn connect_allowed(
    mut conn: TcpStream,
    mut buf: Vec<u8>,
    at: &Arrival,
    a: Allowed,
    mut decision: Decision,
    shared: &Arc<Shared>,
) {
    let protocol = decision.protocol;
    // In the registry of open connections from here on: a removal of its
    // name from the allowlist cuts it, whatever it is doing.
    let mut registration = match live::register(shared, at, &a.name, a.port, &a.rule) {
        Ok(r) => r,
        Err((reason, why)) => {
            decision.detail = why;
            decision.reason = Some(Cause::new(reason));
            refused(conn, None, decision, at, shared).await;
            return;
        }
    };
    // A CONNECT is not answered yet: its tunnel opens only once the
    // upstream is connected (as squid does), so that a refusal is a status
    // the client can show, not a broken handshake.
    let upstream = match admit(shared, &buf, protocol, at, &a.name, a.port) {
        Err(Refusal::Stray(why)) => {
            let answer = (protocol == Protocol::Http || a.tunnel)
                .then(|| forbidden(Reason::StrayPlaceholder, &why));
            decision.detail = why;
            decision.reason = Some(Cause::new(Reason::StrayPlaceholder));
            refused(conn, answer, decision, at, shared).await;
            return;
        }
        Err(quota @ Refusal::Quota(_)) => {
            let (why, cause) = quota.why();
            Err(Unreached::Failed(why, cause))
        }
        Ok(()) => tokio::select! {
            u = connect_upstream(&a.name, a.port, a.owner, shared) => u,
            _ = registration.cut() => Err(Unreached::Failed(cut_why(&a.name), Cause::new(Reason::Removed))),
        },
    };
    // The tunnel's first bytes, judged once the upstream is there. Boxed:
    // the proxy's thread has a small stack, and a future this size would
    // be built on it.
    let upstream = match upstream {
        Ok(up) if a.tunnel => {
            let opened = Box::pin(open_tunnel(
                &mut conn,
                &mut buf,
                at,
                (&a.name, a.rule.clone(), a.owner, a.reason),
                a.port,
                shared,
                &mut registration,
            ))
            .await;
            match opened {
                Ok(()) => Ok(up),
                Err(Unreached::Left) => {
                    // Allowed, and nothing passed: an allowed connection
                    // that closed, not a denial (nor a rule to propose).
                    decision.allowed = true;
                    decision.detail = format!(
                        "to {}; the client closed the tunnel before sending anything through it",
                        up.1
                    );
                    decision.duration_ms = at.start.elapsed().as_millis() as u64;
                    let number = shared.record(&decision);
                    shared.close(number, &decision);
                    return;
                }
                Err(other) => Err(other),
            }
        }
        other => other,
    };
    let (upstream, addr) = match upstream {
        Ok(u) => u,
        Err(unreached) => {
            let (why, cause, answer) = unreached.answer(protocol == Protocol::Http, a.tunnel);
            decision.detail = why;
            decision.reason = Some(cause);
            refused(conn, answer, decision, at, shared).await;
            return;
        }
    };
    decision.allowed = true;
    decision.detail = format!("to {addr}");
    let ended = Ended {
        at,
        registration,
        shared,
    };
    match terminated(shared, &buf, protocol, &a.name, a.port) {
        Terminate::No => relay_plain(conn, buf, upstream, decision, ended).await,
        Terminate::Yes(t, _permit) => {
            relay_terminated(conn, buf, upstream, t, decision, ended).await;
        }
        Terminate::Refused(reason, why) => {
            let answer = (protocol == Protocol::Http || a.tunnel)
                .then(|| forbidden(reason, &format!("denied: {why}")));
            decision.allowed = false;
            decision.detail = why;
            decision.reason = Some(Cause::new(reason));
            refused(conn, answer, decision, at, shared).await;
        }
    }
}

/// What an allowed connection's end needs: when it arrived, its
/// registration (a removal cuts it) and the proxy's state.
struct Ended<'a> {
    at: &'a Arrival,
    registration: live::Registration,
    shared: &'a Arc<Shared>,
}

/// Whether an allowed connection is served by the terminator.
enum Terminate {
    No,
    /// Yes, with the budget's permit for as long as it is open.
    Yes(
        Arc<crate::secrets::Terminator>,
        tokio::sync::OwnedSemaphorePermit,
    ),
    /// It must be and cannot: a name with request rules reached other than
    /// over TLS, or no room in the budget.
    Refused(Reason, String),
}

/// TLS with a server name to a name that has secrets or request rules is
/// terminated, and costs the budget more for as long as it is open
/// (refused when it cannot pay). A name with request rules is reached
/// through the terminator or not at all: plain HTTP or another protocol
/// would carry requests no rule saw.
fn terminated(
    shared: &Arc<Shared>,
    buf: &[u8],
    protocol: Protocol,
    name: &str,
    port: u16,
) -> Terminate {
    let Some(t) = shared.terminator.clone() else {
        // Rules with no terminator to apply them (a backend that did not
        // make one): the name is refused, never passed through unruled.
        if shared.request_rules.covers(name, port) {
            return Terminate::Refused(
                Reason::RequestRulesNeedTls,
                format!("{name} on port {port} has request rules, and this sandbox has no TLS terminator to apply them"),
            );
        }
        return Terminate::No;
    };
    let tls = matches!(protocol, Protocol::Tls | Protocol::Connect)
        && matches!(tls::peek(buf), ClientHello::Sni(_));
    if !tls || !t.terminates(name, port) {
        if t.rules_requests(name, port) {
            return Terminate::Refused(
                Reason::RequestRulesNeedTls,
                format!("{name} on port {port} has request rules, which are applied to TLS only (the proxy terminates it to read each request)"),
            );
        }
        return Terminate::No;
    }
    match shared
        .connection_memory
        .clone()
        .try_acquire_many_owned(super::TERMINATED_COST)
    {
        Ok(permit) => Terminate::Yes(t, permit),
        Err(_) => Terminate::Refused(
            Reason::MemoryBudget,
            format!(
                "the proxy's memory budget ({} MiB) is spent: no room to terminate TLS for {name}",
                super::MEMORY_BUDGET_KIB / 1024
            ),
        ),
    }
}

/// Serve an allowed connection through the terminator until it ends (or
/// its name is removed), and report what it moved.
async fn relay_terminated(
    conn: TcpStream,
    buf: Vec<u8>,
    upstream: TcpStream,
    t: Arc<crate::secrets::Terminator>,
    mut decision: Decision,
    mut e: Ended<'_>,
) {
    let name = decision.name.clone().unwrap_or_default();
    decision.detail = format!("{}, TLS terminated", decision.detail);
    decision.duration_ms = e.at.start.elapsed().as_millis() as u64;
    let number = e.shared.record(&decision);
    let recorder = e.shared.clone();
    let why_cut = cut_why(&name);
    let served = tokio::select! {
        s = crate::secrets::serve_apart(
            t,
            conn,
            buf,
            upstream,
            name,
            decision.port,
            Arc::new(move |d| {
                recorder.record(&d);
            }),
            e.shared.idle,
            // Charged as the bytes pass: a connection cut, or closed by
            // the idle timeout, has still used what it moved.
            Some(e.shared.used.clone()),
        ) => s,
        _ = e.registration.cut() => Err(why_cut),
    };
    let (out, inn) = served.as_ref().map(|c| *c).unwrap_or((0, 0));
    decision.bytes_out = out;
    decision.bytes_in = inn;
    decision.duration_ms = e.at.start.elapsed().as_millis() as u64;
    if let Err(why) = served {
        decision.detail = format!("{}; {why}", decision.detail);
    }
    e.shared.close(number, &decision);
}

/// Relay an allowed connection that is not terminated until it ends (or
/// its name is removed), and report what it moved: plain HTTP (a request,
/// or what a CONNECT's tunnel carries when it reads as one) request by
/// request through `plain`, everything else (TLS for the name its
/// ClientHello named, another protocol to an explicit `name:port` entry)
/// spliced as it is.
async fn relay_plain(
    conn: TcpStream,
    buf: Vec<u8>,
    upstream: TcpStream,
    mut decision: Decision,
    mut e: Ended<'_>,
) {
    // Recorded now, while the connection is open: a connection still open
    // when the run ends is in the log all the same. Its bytes are filled in
    // when it ends.
    decision.duration_ms = e.at.start.elapsed().as_millis() as u64;
    let number = e.shared.record(&decision);
    // For a CONNECT, `buf` already holds what came through the tunnel, the
    // head having been answered (see `classify::through_tunnel`), read with
    // the tunnel's port as a `Host` without one means.
    let default_port = match decision.protocol {
        Protocol::Connect => decision.port,
        _ => e.at.port,
    };
    let http = match decision.protocol {
        Protocol::Http => true,
        Protocol::Connect => {
            !matches!(tls::peek(&buf), ClientHello::Sni(_))
                && matches!(parse_request_head(&buf, default_port), Ok(Some(_)))
        }
        _ => false,
    };
    let (out, inn, cut, ended) = if http {
        // Never spliced: a second request on the connection would ride on
        // the first one's decision (under any `Host`), unread.
        Box::pin(serve_http(
            conn,
            buf,
            upstream,
            &decision,
            default_port,
            &mut e,
        ))
        .await
    } else {
        splice(conn, buf, upstream, &mut e).await
    };
    decision.bytes_out = out;
    decision.bytes_in = inn;
    let name = decision.name.clone().unwrap_or_default();
    if cut {
        decision.detail = format!("{}; {}", decision.detail, cut_why(&name));
    } else if let Some(why) = ended {
        decision.detail = format!("{}; {why}", decision.detail);
    }
    decision.duration_ms = e.at.start.elapsed().as_millis() as u64;
    e.shared.close(number, &decision);
}

/// What a relay moved (out, in), whether its name's removal cut it, and
/// why it ended otherwise than by a close.
type Moved = (u64, u64, bool, Option<String>);

/// Serve a plain HTTP connection request by request (see `plain`).
async fn serve_http(
    conn: TcpStream,
    buf: Vec<u8>,
    upstream: TcpStream,
    decision: &Decision,
    default_port: u16,
    e: &mut Ended<'_>,
) -> Moved {
    let name = decision.name.as_deref().unwrap_or_default();
    let allowed = plain::Allowed {
        name,
        port: decision.port,
        default_port,
        at: e.at,
    };
    let served = plain::serve(conn, buf, upstream, allowed, e.shared, &mut e.registration).await;
    (served.out, served.inn, served.cut, served.ended)
}

/// Splice a connection both ways, as it is, its first bytes sent first.
async fn splice(
    mut conn: TcpStream,
    mut buf: Vec<u8>,
    mut upstream: TcpStream,
    e: &mut Ended<'_>,
) -> Moved {
    let first_len = buf.len() as u64;
    if upstream.write_all(&buf).await.is_err() {
        return (0, 0, false, None);
    }
    // What was read first is sent: its memory goes back.
    drop(std::mem::take(&mut buf));
    e.shared
        .used
        .fetch_add(first_len, std::sync::atomic::Ordering::Relaxed);
    let passed = pass::pass(&mut conn, &mut upstream, e.shared, &mut e.registration).await;
    (passed.out + first_len, passed.inn, passed.cut, None)
}

/// Answer an allowed CONNECT whose upstream is connected, and judge what
/// comes through its tunnel (`decide::tunnel`), then the last checks on
/// those bytes (a stray placeholder, the quota). A refusal here can only
/// cut the tunnel.
async fn open_tunnel(
    conn: &mut TcpStream,
    buf: &mut Vec<u8>,
    at: &Arrival,
    (name, rule, owner, reason): (&str, String, bool, Reason),
    port: u16,
    shared: &Arc<Shared>,
    registration: &mut live::Registration,
) -> Result<(), Unreached> {
    let judged = tokio::select! {
        j = decide::tunnel(conn, buf, (name.to_string(), rule, owner, reason), port, shared) => j.1,
        _ = registration.cut() => return Err(Unreached::Cut(cut_why(name), Cause::new(Reason::Removed))),
    };
    match judged {
        Verdict::Allow { .. } => match admit(shared, buf, Protocol::Connect, at, name, port) {
            Ok(()) => Ok(()),
            Err(refusal) => {
                let (why, cause) = refusal.why();
                Err(Unreached::Cut(why, cause))
            }
        },
        // The client closed or reset the tunnel it was given before
        // sending a byte through it (a cancelled request, a probe, a
        // client that gave up): nothing passed and nothing was refused.
        Verdict::Deny { cause, .. }
            if cause.reason == Reason::SaidNothing && buf.is_empty() && client_left(conn) =>
        {
            Err(Unreached::Left)
        }
        Verdict::Deny { why, cause, .. } | Verdict::Refuse { why, cause, .. } => {
            Err(Unreached::Cut(why, cause))
        }
    }
}

/// Why a connection was cut short.
fn cut_why(name: &str) -> String {
    format!("cut: {name} was removed from the allowlist")
}

/// Why an allowed connection was not connected upstream, or not relayed:
/// in words and as data.
enum Unreached {
    /// Where the name leads is not for this connection (addresses that are
    /// not public, the owner's reach for a caller's name): a refusal.
    Refused(String, Cause),
    /// It could not be resolved or connected, or was cut or over quota.
    Failed(String, Cause),
    /// What came through an open CONNECT tunnel was refused, or the
    /// tunnel was cut: nothing more can be said to the client.
    Cut(String, Cause),
    /// The client closed or reset an open CONNECT tunnel before sending
    /// anything through it.
    Left,
}

/// Whether the client's end of `conn` is closed (an orderly close or a
/// reset already read): a peek that does not wait finds the end of the
/// stream, or an error, rather than nothing yet.
fn client_left(conn: &TcpStream) -> bool {
    use nix::sys::socket::{recv, MsgFlags};
    use std::os::fd::AsRawFd;
    let mut byte = [0u8; 1];
    match recv(
        conn.as_raw_fd(),
        &mut byte,
        MsgFlags::MSG_PEEK | MsgFlags::MSG_DONTWAIT,
    ) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => e != nix::errno::Errno::EAGAIN,
    }
}

impl Unreached {
    /// Why, as words and data, and what the client is told: a plain
    /// request or a CONNECT not answered yet is told why a refusal was
    /// made (as a denial is), a CONNECT why its upstream failed; inside an
    /// open tunnel an HTTP answer would be taken for the other protocol's
    /// bytes, so the tunnel is only cut.
    fn answer(self, http: bool, tunnel: bool) -> (String, Cause, Option<Vec<u8>>) {
        match self {
            Unreached::Refused(why, cause) => {
                let answer =
                    (http || tunnel).then(|| forbidden(cause.reason, &format!("denied: {why}")));
                (why, cause, answer)
            }
            Unreached::Failed(why, cause) => {
                let answer = tunnel.then(|| bad_gateway(cause.reason, &why));
                (why, cause, answer)
            }
            Unreached::Cut(why, cause) => (why, cause, None),
            Unreached::Left => (
                "the client closed the tunnel before sending anything through it".into(),
                Cause::new(Reason::SaidNothing),
                None,
            ),
        }
    }
}

/// Resolve `name` on the host side and connect. For a destination the
/// owner allowed (`owner`), the owner's pinned addresses are used as given
/// and resolved ones may be in the owner's local ranges; for one only a
/// caller allowed, the name is resolved as any other and only public
/// addresses are used: the owner's reach into local networks is theirs
/// alone. Never the host's own addresses (no DNS rebinding onto the host's
/// own or private services).
async fn connect_upstream(
    name: &str,
    port: u16,
    owner: bool,
    shared: &Shared,
) -> Result<(TcpStream, SocketAddr), Unreached> {
    let pinned = shared.hosts.get(name);
    let candidates: Vec<SocketAddr> = match pinned {
        Some(ip) if owner => vec![SocketAddr::new(*ip, port)],
        // A host service the owner opened (the matcher allowed only those
        // ports for this name): the host's own loopback.
        None if shared.is_host_service(name, port) => vec![
            SocketAddr::new(IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), port),
            SocketAddr::new(IpAddr::V6(std::net::Ipv6Addr::LOCALHOST), port),
        ],
        // A name nobody pinned, or one a caller's entry alone allows.
        _ => {
            let resolved: Vec<IpAddr> = match shared.test_resolved.get(name) {
                Some(ips) => ips.clone(),
                None => {
                    let unresolved = |e: String| {
                        match pinned {
                        // The owner's pinned address is not shown to
                        // the caller.
                        Some(_) => Unreached::Refused(
                            format!(
                                "{} (it is pinned by the owner, and cannot be resolved otherwise: {e})",
                                callers_name(name, port)
                            ),
                            Cause::new(Reason::CallersReach),
                        ),
                        None => Unreached::Failed(
                            format!("cannot resolve {name}: {e}"),
                            Cause::new(Reason::Unresolved),
                        ),
                    }
                    };
                    let resolver = shared
                        .resolver()
                        .as_ref()
                        .map_err(|e| unresolved(e.clone()))?
                        .clone();
                    // On a task of its own: the resolver's futures are
                    // deep, and the proxy's thread has a small stack that
                    // the connection's own future already uses.
                    let owned = name.to_string();
                    tokio::spawn(async move {
                        resolver
                            .lookup_ip(owned)
                            .await
                            .map(|l| l.iter().collect::<Vec<IpAddr>>())
                            .map_err(|e| e.to_string())
                    })
                    .await
                    .map_err(|e| unresolved(e.to_string()))?
                    .map_err(unresolved)?
                }
            };
            // Fails closed: without the host's own addresses no resolved
            // address can be told apart from them.
            let own = shared.own_addresses().map_err(|e| {
                Unreached::Failed(
                    format!("{e}: refusing to connect to {name}, whose addresses cannot be told apart from the host's own"),
                    Cause::new(Reason::OwnAddressesUnknown),
                )
            })?;
            let reach = Reach {
                owner,
                pinned: pinned.is_some(),
                cidrs: &shared.cidrs,
                own: &own,
            };
            reach.usable(name, port, &resolved)?
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
    Err(Unreached::Failed(last, Cause::new(Reason::Unreachable)))
}

/// What a connection's resolved addresses are judged by.
struct Reach<'a> {
    /// The owner allowed the destination (see `Verdict::Allow`).
    owner: bool,
    /// The owner pinned the name to an address (used as given, only for
    /// the owner's destinations).
    pinned: bool,
    /// The owner's local ranges.
    cidrs: &'a [ipnet::IpNet],
    /// The host's own addresses.
    own: &'a [IpAddr],
}

impl Reach<'_> {
    /// The addresses of `name` that may be connected to on `port`: public
    /// ones, and for a destination the owner allowed those in the owner's
    /// ranges; none is the refusal, saying why.
    fn usable(
        &self,
        name: &str,
        port: u16,
        resolved: &[IpAddr],
    ) -> Result<Vec<SocketAddr>, Unreached> {
        let cidrs: &[ipnet::IpNet] = if self.owner { self.cidrs } else { &[] };
        let all: Vec<SocketAddr> = resolved
            .iter()
            .map(|ip| SocketAddr::new(*ip, port))
            .collect();
        let usable: Vec<SocketAddr> = all
            .iter()
            .copied()
            .filter(|a| usable_upstream(a.ip(), cidrs, self.own))
            .collect();
        if !usable.is_empty() {
            return Ok(usable);
        }
        let ips: Vec<IpAddr> = all.iter().map(|a| a.ip()).collect();
        let list = ips
            .iter()
            .map(IpAddr::to_string)
            .collect::<Vec<_>>()
            .join(", ");
        // The owner's reach would have served it: the caller is told so.
        let owners_would = self.pinned
            || all
                .iter()
                .any(|a| usable_upstream(a.ip(), self.cidrs, self.own));
        if !self.owner && owners_would {
            return Err(Unreached::Refused(
                // Without the addresses: the sandbox is not told where the
                // owner's pins and ranges lead (the event keeps them).
                callers_name(name, port),
                Cause {
                    addresses: ips,
                    ..Cause::new(Reason::CallersReach)
                },
            ));
        }
        // The first address a range could open (none is the host's own),
        // as the one-address range that would allow it.
        let everything: [ipnet::IpNet; 2] = [
            ipnet::IpNet::V4(ipnet::Ipv4Net::default()),
            ipnet::IpNet::V6(ipnet::Ipv6Net::default()),
        ];
        let openable = ips
            .iter()
            .find(|ip| usable_upstream(**ip, &everything, self.own))
            .copied();
        let cause = match openable {
            Some(ip) => Cause {
                addresses: ips,
                ..Cause::with_entry(Reason::NotPublic, ipnet::IpNet::from(ip).to_string())
            },
            None => Cause {
                addresses: ips,
                ..Cause::with_entry(Reason::HostItself, port.to_string())
            },
        };
        Err(Unreached::Refused(
            refused_why(name, port, &list, &cause),
            cause,
        ))
    }
}

/// A refusal by where a name leads, in plain words: the addresses (never
/// the host's own to the sandbox), and what kind of entry would allow it;
/// each door names the option itself, from the cause's field.
fn refused_why(name: &str, port: u16, list: &str, cause: &Cause) -> String {
    match cause.reason {
        Reason::NotPublic => format!(
            "{name} resolves only to non-public addresses ({list}), in no range the owner allowed"
        ),
        // Without the addresses: which addresses are the host's own is not
        // the sandbox's to learn (the event keeps them for the owner).
        Reason::HostItself => format!(
            "{name} resolves only to the host's own addresses, which no range opens; the host's services are reached as {HOST_ALIAS}:{port} once the owner opens that port"
        ),
        _ => format!("{name} resolves only to addresses this connection may not use ({list})"),
    }
}

/// Why a name only a caller's entry allows was not connected to, where
/// the owner's reach would have served it.
fn callers_name(name: &str, port: u16) -> String {
    format!(
        "{name} was allowed on port {port} only by a caller's entry, which reaches public addresses only; the owner's pinned addresses and local ranges serve only names and ports the owner allowed"
    )
}

/// Whether a resolved address may be connected to: public, or in one of
/// the owner's ranges; never one of the host's own addresses or its
/// loopback (host services are reached through the host ports the owner
/// opened alone).
fn usable_upstream(ip: IpAddr, cidrs: &[ipnet::IpNet], own: &[IpAddr]) -> bool {
    // The host in any spelling: unspecified, loopback, 0.0.0.0/8, and the
    // IPv6 forms that carry one of those or one of the host's own addresses.
    let embedded = match ip {
        IpAddr::V6(a) => warden_policy::addresses::embedded_ipv4(a).map(IpAddr::V4),
        IpAddr::V4(_) => None,
    };
    let host = |a: IpAddr| warden_policy::addresses::host_itself(a).is_some() || own.contains(&a);
    (super::public::is_public(ip)
        || cidrs
            .iter()
            .any(|c| c.contains(&ip) || c.contains(&ip.to_canonical())))
        && !host(ip)
        && !embedded.is_some_and(host)
}

/// A 403 that says why, in the status line's reason phrase, in an
/// `X-Warden-Denied` header and in the body: what a client shows of a
/// refused CONNECT is often only its status line (Python's urllib and so
/// pip: "Tunnel connection failed: 403 Forbidden by warden: ..."), or a
/// header; and the reason's stable code in `X-Warden-Reason`, the same
/// code the decision's event carries. The reason is warden's own text;
/// control characters of a name the sandbox chose are let into neither
/// line.
fn forbidden(reason: Reason, why: &str) -> Vec<u8> {
    let header: String = why
        .chars()
        .map(|c| {
            if c.is_ascii() && !c.is_ascii_control() {
                c
            } else {
                ' '
            }
        })
        .collect();
    let body = format!("warden: {why}\n");
    format!(
        "HTTP/1.1 403 Forbidden by warden: {header}\r\nContent-Type: text/plain\r\nX-Warden-Denied: {header}\r\nX-Warden-Reason: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        reason.code(),
        body.len()
    )
    .into_bytes()
}

/// A 502 for a CONNECT whose upstream could not be reached (resolved,
/// connected, or over the quota), saying why in the body: sent before the
/// tunnel opens, so the client shows a status rather than a broken
/// handshake; its code in `X-Warden-Reason`, as a refusal's.
fn bad_gateway(reason: Reason, why: &str) -> Vec<u8> {
    let body = format!("warden: {why}\n");
    format!(
        "HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/plain\r\nX-Warden-Reason: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        reason.code(),
        body.len()
    )
    .into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;
    use warden_policy::Field;

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
        let all: Vec<ipnet::IpNet> = vec!["0.0.0.0/0".parse().unwrap(), "::/0".parse().unwrap()];
        for host in [
            "0.0.0.0",
            "::",
            "::ffff:10.20.0.5",
            "::ffff:0.0.0.0",
            "64:ff9b::7f00:1",
            "2002:7f00:1::",
        ] {
            assert!(
                !usable_upstream(host.parse().unwrap(), &all, &own),
                "{host}: the host itself, even under a range that holds everything"
            );
        }
        assert!(!usable_upstream("10.20.3.4".parse().unwrap(), &[], &[]));
    }

    #[test]
    fn a_name_only_a_callers_entry_allows_reaches_public_addresses_only() {
        use crate::matcher::Matcher;
        let rule = |e: &str, caller: bool| {
            let mut r = warden_policy::DomainRule::parse(e).unwrap();
            r.caller = caller;
            r
        };
        // The owner's profile: a registry in its local range, a pinned
        // name on one port; a caller adds names and ports of its own.
        let m = Matcher::new(vec![
            rule("registry.internal", false),
            rule(".corp.internal", false),
            rule("pinned.test:8080", false),
            rule("registry.internal:22", true),
            rule("10-1-2-3.nip.io:22", true),
            rule("pinned.test:9090", true),
            rule("db.corp.internal", true),
            rule("db.corp.internal:5432", true),
        ]);
        let owner = |name: &str, port: u16| {
            let hit = m.allows(name, port).expect("allowed");
            super::super::decide::owners(&m, &hit, name, port)
        };
        assert!(owner("registry.internal", 443));
        assert!(owner("pinned.test", 8080));
        assert!(
            !owner("registry.internal", 22),
            "the owner's name on a caller's port"
        );
        assert!(
            !owner("10-1-2-3.nip.io", 22),
            "a caller's wildcard-DNS name"
        );
        assert!(
            !owner("pinned.test", 9090),
            "a pinned name on a caller's port"
        );
        assert!(!owner("db.corp.internal", 5432));
        // A caller's entry more specific than the owner's does not take
        // the owner's destination away.
        assert!(owner("db.corp.internal", 443));

        let cidrs: Vec<ipnet::IpNet> = vec!["10.0.0.0/8".parse().unwrap()];
        let own: Vec<IpAddr> = Vec::new();
        let local: IpAddr = "10.1.2.3".parse().unwrap();
        let public: IpAddr = "93.184.216.34".parse().unwrap();
        let reach = |owner: bool, pinned: bool| Reach {
            owner,
            pinned,
            cidrs: &cidrs,
            own: &own,
        };
        let ips = |r: Result<Vec<SocketAddr>, Unreached>| match r {
            Ok(v) => Ok(v.into_iter().map(|a| a.ip()).collect::<Vec<_>>()),
            Err(
                Unreached::Refused(why, _) | Unreached::Failed(why, _) | Unreached::Cut(why, _),
            ) => Err(why),
            Err(Unreached::Left) => Err("left".to_string()),
        };
        // The owner's destination: the owner's range serves it.
        assert_eq!(
            ips(reach(true, false).usable("registry.internal", 443, &[local])),
            Ok(vec![local])
        );
        // A caller's: public addresses only, the range ignored.
        assert_eq!(
            ips(reach(false, false).usable("10-1-2-3.nip.io", 22, &[local, public])),
            Ok(vec![public])
        );
        let why = ips(reach(false, false).usable("10-1-2-3.nip.io", 22, &[local])).unwrap_err();
        assert!(why.contains("only by a caller's entry"), "{why}");
        assert!(why.contains("public addresses only"), "{why}");
        assert!(
            !why.contains("--"),
            "no flag is named below the doors: {why}"
        );
        let why =
            ips(reach(false, true).usable("pinned.test", 9090, &["127.0.0.1".parse().unwrap()]))
                .unwrap_err();
        assert!(why.contains("only by a caller's entry"), "{why}");
    }

    #[test]
    fn a_refusal_by_address_names_the_address_and_the_entry_that_allows_it() {
        let own: Vec<IpAddr> = vec!["10.9.9.9".parse().unwrap()];
        let reach = Reach {
            owner: true,
            pinned: false,
            cidrs: &[],
            own: &own,
        };
        let refused = |ips: &[&str]| {
            let ips: Vec<IpAddr> = ips.iter().map(|i| i.parse().unwrap()).collect();
            match reach.usable("db.test", 5432, &ips) {
                Err(Unreached::Refused(why, cause)) => (why, cause),
                _ => panic!("not refused: {ips:?}"),
            }
        };
        // The first address a range could open, as a one-address range.
        let (why, cause) = refused(&["127.0.0.1", "10.1.2.3", "fd00::1"]);
        assert_eq!(cause.reason, Reason::NotPublic);
        assert_eq!(cause.field, Some(Field::AllowCidr));
        assert_eq!(cause.entry.as_deref(), Some("10.1.2.3/32"));
        assert_eq!(cause.addresses.len(), 3);
        assert!(why.contains("(127.0.0.1, 10.1.2.3, fd00::1)"), "{why}");
        assert!(
            !why.contains("--"),
            "no flag is named below the doors: {why}"
        );
        let (_, cause) = refused(&["fd00::1"]);
        assert_eq!(cause.entry.as_deref(), Some("fd00::1/128"));
        // Only the host itself: no range opens it, a host port does.
        let (why, cause) = refused(&["127.0.0.1", "10.9.9.9"]);
        assert_eq!(cause.reason, Reason::HostItself);
        assert_eq!(cause.field, Some(Field::AllowHostPort));
        assert_eq!(cause.entry.as_deref(), Some("5432"));
        assert!(why.contains("host.warden.internal:5432"), "{why}");
        assert!(!why.contains("10.9.9.9"), "the host's own addresses: {why}");
    }

    #[test]
    fn a_refusal_carries_its_code_in_a_header_of_its_own() {
        let text = String::from_utf8(forbidden(Reason::PlainHttp, "denied: plain HTTP")).unwrap();
        assert!(
            text.contains("\r\nX-Warden-Reason: plain_http\r\n"),
            "{text}"
        );
        assert!(
            text.contains("\r\nX-Warden-Denied: denied: plain HTTP\r\n"),
            "{text}"
        );
        let text = String::from_utf8(bad_gateway(Reason::Unresolved, "cannot resolve")).unwrap();
        assert!(
            text.contains("\r\nX-Warden-Reason: unresolved\r\n"),
            "{text}"
        );
    }
}
