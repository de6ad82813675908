//! Carrying an allowed, connected connection until it ends, and its
//! report: through the secret terminator (when its name has secrets or
//! request rules, paid for from the budget, or refused), request by
//! request when it is plain HTTP (see `plain`), or spliced both ways as it
//! is (see `pass`), under the idle timeout with every byte counted towards
//! the quota and its name's removal cutting it; then its bytes and why it
//! ended recorded. It never decides, resolves or connects (the verdict and
//! the upstream come to it made).

use super::super::{live, pass, plain, Arrival, Shared};
use super::cut_why;
use crate::decision::{Cause, Decision, Protocol, Reason};
use crate::http::parse_request_head;
use crate::tls::{self, ClientHello};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

/// What an allowed connection's end needs: when it arrived, its
/// registration (a removal cuts it) and the proxy's state.
pub(super) struct Ended<'a> {
    pub(super) at: &'a Arrival,
    pub(super) registration: live::Registration,
    pub(super) shared: &'a Arc<Shared>,
}

/// Whether an allowed connection is served by the terminator.
pub(super) enum Terminate {
    No,
    /// Yes, with the budget's permit for as long as it is open.
    Yes(
        Arc<crate::secrets::Terminator>,
        tokio::sync::OwnedSemaphorePermit,
    ),
    /// It must be and cannot: a name the terminator serves reached other
    /// than by TLS naming it, another name leading to where such a name is
    /// served, or no room in the budget.
    Refused(Cause, String),
}

/// TLS with a server name to a name that has secrets or request rules is
/// terminated, and costs the budget more for as long as it is open
/// (refused when it cannot pay). Such a name is reached through the
/// terminator or not at all (see `decide::unterminated`): checked
/// again here, after the upstream is connected, beside whether the name
/// leads where a terminated name is served. `to` is the address
/// the upstream was connected to.
pub(super) fn terminated(
    shared: &Arc<Shared>,
    buf: &[u8],
    protocol: Protocol,
    name: &str,
    (port, to): (u16, SocketAddr),
) -> Terminate {
    if let Some((cause, why)) =
        super::super::decide::unterminated(shared, buf, protocol, name, port)
    {
        return Terminate::Refused(cause, why);
    }
    let Some(t) = shared.terminator.clone() else {
        return Terminate::No;
    };
    // What the owner let through plain (`unterminated` passed it): as it
    // is, never into the terminator's TLS.
    if t.terminates(name, port)
        && !t.rules_requests(name, port)
        && shared.plain_allowed(name, port)
        && !super::super::decide::names_itself(buf, protocol, name)
    {
        return Terminate::No;
    }
    if !t.terminates(name, port) {
        return match shares_address(shared, name, to) {
            Some(why) => Terminate::Refused(Cause::new(Reason::TerminatedAddress), why),
            None => Terminate::No,
        };
    }
    match shared
        .connection_memory
        .clone()
        .try_acquire_many_owned(super::super::TERMINATED_COST)
    {
        Ok(permit) => Terminate::Yes(t, permit),
        Err(_) => Terminate::Refused(
            Cause::new(Reason::MemoryBudget),
            format!(
                "the proxy's memory budget ({} MiB) is spent: no room to terminate TLS for {name}",
                super::super::MEMORY_BUDGET_KIB / 1024
            ),
        ),
    }
}

/// A name the terminator serves whose owner-pinned address is `to` (or,
/// both being the host itself, its loopback or own addresses: a host port
/// and a name pinned to the host reach the same listeners), when the
/// connection to `name` is not terminated: its bytes would reach that
/// name's server unterminated, under another name. A secret's host is
/// compared on every port (it is terminated on all of them: the same
/// application may serve on several, and give back on one what it was
/// sent on another); a name with request rules, on its own ports. A name
/// the owner pinned to the same address as a secret's host is no longer
/// here: it is served as that host (see `Terminator::serve_beside`); what
/// is left is a host port, a name pinned to another of the host's own
/// addresses, and a name the host resolves to a pinned address. Only
/// pinned addresses are known for certain; a name the host resolves is
/// not compared with another resolved name (see the threat model).
pub(super) fn shares_address(shared: &Shared, name: &str, to: SocketAddr) -> Option<String> {
    let port = to.port();
    let t = shared.terminator.as_ref()?;
    if t.terminates(name, port) {
        return None;
    }
    let mut pinned = shared
        .hosts
        .iter()
        .filter(|(other, _)| other.as_str() != name && t.terminates(other, port));
    let to_ip = to.ip().to_canonical();
    // Read only when some terminated name is pinned on this port.
    let mut own: Option<Option<Arc<[IpAddr]>>> = None;
    let mut host_itself = |ip: IpAddr| {
        ip.is_loopback()
            || own
                .get_or_insert_with(|| shared.own_addresses().ok())
                .as_ref()
                // Unknown own addresses: taken to include it (fail closed).
                .is_none_or(|o| o.contains(&ip))
    };
    pinned
        .find(|(_, ip)| {
            let ip = ip.to_canonical();
            ip == to_ip || (host_itself(ip) && host_itself(to_ip))
        })
        .map(|(other, ip)| {
            format!("{name} leads to {to}, where {other} (pinned to {ip}) is served; {other} is reached only through the proxy's TLS terminator")
        })
}

/// Serve an allowed connection through the terminator until it ends (or
/// its name is removed), and report what it moved.
pub(super) async fn relay_terminated(
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
pub(super) async fn relay_plain(
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
