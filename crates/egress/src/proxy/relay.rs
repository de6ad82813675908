//! Relaying: what becomes of a decided connection.
//!
//! This module owns the end of every connection: a denial answered (403 for
//! HTTP) and closed; an allowed one registered, connected upstream (a
//! CONNECT answered only then, so that a refusal by address is its 403,
//! and what comes through its tunnel judged), or told why it could not be;
//! and its report: the decision when it is made. Where a name may lead and
//! the connecting are `upstream`'s; the relay of an allowed, connected
//! connection until it ends (spliced both ways under the idle timeout with
//! every byte counted towards the quota, served request by request, or
//! handed to the secret terminator) and its bytes reported when it ends
//! are `carry`'s. It never decides whether a connection may go (`decide`
//! does).

mod carry;
mod upstream;

use super::decide::{self, admit, Refusal, Verdict};
use super::{live, Arrival, Shared};
use crate::decision::{Cause, Decision, Protocol, Reason};
use crate::http::parse_request_head;
use carry::{relay_plain, relay_terminated, shares_address, terminated, Ended, Terminate};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use upstream::connect_upstream;

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
    decision.duration_ms = at.start.elapsed().as_millis() as u64;
    shared.record(&decision);
    match answer {
        // Closed lingering: a body the client is still sending never
        // makes the kernel reset the answer away.
        Some(a) => {
            let mut conn = crate::linger::Lingering::new(conn);
            let _ = conn.write_all(&a).await;
            let _ = conn.shutdown().await;
        }
        None => {
            let _ = conn.shutdown().await;
        }
    }
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
    // Where a terminated name is served (its pinned address, or the host
    // itself), another name is not let in unterminated: refused before it
    // is connected when where it leads is known (see `carry`).
    if let Some(why) = known_destination(shared, &a)
        .and_then(|ip| shares_address(shared, &a.name, SocketAddr::new(ip, a.port)))
    {
        let answer = (protocol == Protocol::Http || a.tunnel)
            .then(|| forbidden(Reason::TerminatedAddress, &format!("denied: {why}")));
        decision.detail = why;
        decision.reason = Some(Cause::new(Reason::TerminatedAddress));
        refused(conn, answer, decision, at, shared).await;
        return;
    }
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
    match terminated(shared, &buf, protocol, &a.name, (a.port, addr)) {
        Terminate::No => relay_plain(conn, buf, upstream, decision, ended).await,
        Terminate::Yes(t, _permit) => {
            relay_terminated(conn, buf, upstream, t, decision, ended).await;
        }
        Terminate::Refused(cause, why) => {
            let answer = (protocol == Protocol::Http || a.tunnel)
                .then(|| forbidden(cause.reason, &format!("denied: {why}")));
            decision.allowed = false;
            decision.detail = why;
            decision.reason = Some(cause);
            refused(conn, answer, decision, at, shared).await;
        }
    }
}

/// The address an allowed connection will be connected to, when it is
/// known before connecting: the owner's pinned address, or the host's
/// loopback for a host port (see `upstream`). A resolved name's is known
/// once connected.
fn known_destination(shared: &Shared, a: &Allowed) -> Option<IpAddr> {
    match shared.hosts.get(&a.name) {
        Some(ip) if a.owner => Some(*ip),
        None if shared.is_host_service(&a.name, a.port) => {
            Some(IpAddr::V4(std::net::Ipv4Addr::LOCALHOST))
        }
        _ => None,
    }
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
