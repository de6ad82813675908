//! Deciding: the verdict on a connection, from what its first bytes say.
//!
//! This module owns the rules a connection is judged by: the allowlist
//! (`name:port` entries reached by address, TLS on its server name, HTTP on
//! its `Host`, plain HTTP when allowed), host services, a CONNECT's tunnel
//! judged like a transparent connection to the same name, ask mode and
//! what a person answered for the run, a secret's placeholder on its way
//! to a host that is not its own, and the egress quota. Each verdict
//! carries its [`Cause`]: a reason code and the option that would change
//! it, which each door words in its own terms; the words here name no
//! option's spelling. It never
//! connects upstream and never answers the client, save the CONNECT's
//! `200` that `classify` sends when `relay`, its upstream connected, asks
//! for the tunnel to be judged.

use super::classify::{
    read_first_bytes, request_head_len, speaks_other, through_tunnel, First, FIRST_BYTES_TIMEOUT,
    SERVER_FIRST_WAIT,
};
use super::{Arrival, Shared};
use crate::ask::{Answer, Question};
use crate::decision::{domain_entry, Cause, Decision, Protocol, Reason, SecretAction};
use crate::http::HttpError;
use crate::matcher::{Match, Matcher};
use crate::tls::{ClientHello, MAX_CLIENT_HELLO};
use std::net::SocketAddrV4;
use std::sync::Arc;
use tokio::net::TcpStream;
use warden_policy::trust::Trust;
use warden_policy::HOST_ALIAS;

/// What the first bytes of a connection decided.
pub(super) enum Verdict {
    /// Connect to `name` on `port` (the port asked for: the original
    /// destination's, or a CONNECT's or absolute URI's).
    Allow {
        name: String,
        rule: String,
        port: u16,
        /// An explicit-proxy CONNECT: answer 200 and tunnel, without
        /// passing the request head on.
        tunnel: bool,
        /// The owner allowed this name on this port (a rule of theirs, or
        /// their answer): the owner's pinned addresses and local ranges
        /// serve it. Otherwise (only a caller's rule or answer allows it)
        /// it reaches public addresses only.
        owner: bool,
        /// What allowed it: an entry, or an answer.
        reason: Reason,
    },
    Deny {
        name: Option<String>,
        why: String,
        cause: Cause,
        http: bool,
        /// The name is on no list: in ask mode, a person may still allow
        /// it on this port.
        ask_port: Option<u16>,
    },
    /// Refused before a byte is read: a connection to a name's address on
    /// a port no rule allows for any name. Reset, so the client fails at
    /// once instead of waiting to be judged on bytes that cannot matter.
    Refuse {
        name: String,
        why: String,
        cause: Cause,
    },
}

/// The denial of `name` on `port` for want of an entry, in ask mode
/// still a question.
fn not_allowed(name: String, port: u16, http: bool) -> Verdict {
    Verdict::Deny {
        why: format!("no allowlist entry for this name on port {port}"),
        cause: Cause::for_want_of_entry(Reason::NotAllowed, &name, port),
        name: Some(name),
        http,
        ask_port: Some(port),
    }
}

/// A denial on what the connection said, which no entry would change.
fn denied(name: Option<String>, reason: Reason, why: String, http: bool) -> Verdict {
    denied_for(name, Cause::new(reason), why, http)
}

/// [`denied`] for a cause that names more than its reason's field.
fn denied_for(name: Option<String>, cause: Cause, why: String, http: bool) -> Verdict {
    Verdict::Deny {
        name,
        why,
        cause,
        http,
        ask_port: None,
    }
}

/// Read a new connection's first bytes and decide it: on the name its
/// address stands for, or on the name its bytes carry; in ask mode, by a
/// person. An allowed CONNECT's tunnel is not opened here: `relay` answers
/// it once the upstream is connected, and [`tunnel`] judges what comes
/// through. Returns the protocol it was read as and the verdict; `buf`
/// keeps what was read.
pub(super) async fn verdict(
    conn: &mut TcpStream,
    buf: &mut Vec<u8>,
    at: &Arrival,
    shared: &Arc<Shared>,
) -> (Protocol, Verdict) {
    let (original, port) = (at.original, at.port);
    // The name the program used, when it connected to the address the
    // resolver gave that name: decisions name it (`example.com:22`), not
    // the address.
    let addressed: Option<String> = original.and_then(|a| {
        shared
            .addresses
            .lock()
            .ok()?
            .name_of(*a.ip())
            .map(str::to_string)
    });
    if let Some(name) = &addressed {
        // No rule allows this port for any name (TLS or HTTP carrying
        // another name included), and nobody is asked: nothing the client
        // can send would be allowed.
        if !shared.ask && !shared.matcher().any_allows_port(port) {
            return (
                Protocol::Tcp,
                Verdict::Refuse {
                    name: name.clone(),
                    why: format!("no allowlist entry allows port {port} for any name"),
                    cause: Cause::for_want_of_entry(Reason::PortNotAllowed, name, port),
                },
            );
        }
    }
    // A connection to the address the resolver gave a name with an explicit
    // `name:port` entry may speak any protocol (SSH, a database; many speak
    // only after the server): when its first bytes are not TLS or HTTP, or
    // when it says nothing for a moment, it is that name's. TLS and HTTP
    // are decided on the name they carry, as everywhere.
    // In ask mode, a name on no list may be put to a person as well.
    // (The name looked up once, above.)
    // A name the terminator serves is the exception: it is reached
    // through its ClientHello alone, waited for as any first bytes are,
    // save on a port of a secret's host the owner let carry plain bytes
    // (`egress.secret_plain_ports`), which is that name's as any other.
    let terminated_addr = addressed.as_ref().is_some_and(|name| {
        let plain = shared.plain_allowed(name, port) && !shared.request_rules.covers(name, port);
        must_terminate(shared, name, port) && !plain
    });
    let by_address: Option<(String, Option<(String, bool)>)> = (!terminated_addr)
        .then_some(addressed.as_ref())
        .flatten()
        .and_then(|name| {
            let matcher = shared.matcher();
            match matcher.allows(name, port) {
                Some(m) => m.rule.port.map(|_| {
                    let owner = owners(&matcher, &m, name, port);
                    (name.clone(), Some((m.rule.source.clone(), owner)))
                }),
                None => shared.ask.then(|| (name.clone(), None)),
            }
        });
    let wait = if by_address.is_some() {
        SERVER_FIRST_WAIT
    } else {
        FIRST_BYTES_TIMEOUT
    };
    let first = read_first_bytes(conn, buf, wait, port).await;
    let other = speaks_other(&first, buf, port);
    // Bytes that are not TLS, to a name the terminator serves.
    let unserved = addressed
        .as_deref()
        .filter(|_| terminated_addr && other && !buf.is_empty())
        .and_then(|name| unterminated(shared, buf, Protocol::Tcp, name, port));
    let (protocol, verdict) = match (first, by_address, unserved) {
        (_, _, Some((cause, why))) => (
            Protocol::Tcp,
            denied_for(addressed.clone(), cause, why, false),
        ),
        (_, Some((name, Some((rule, owner)))), _) if other => (
            Protocol::Tcp,
            Verdict::Allow {
                name,
                rule,
                port,
                tunnel: false,
                owner,
                reason: Reason::Allowed,
            },
        ),
        (_, Some((name, None)), _) if other => (Protocol::Tcp, not_allowed(name, port, false)),
        (Ok(first), _, _) => decide(first, port, shared),
        (Err(why), _, _) => (
            Protocol::Tcp,
            denied(addressed.clone(), Reason::SaidNothing, why, false),
        ),
    };
    // A name on no list, in ask mode: a person decides.
    let verdict = match verdict {
        Verdict::Deny {
            name: Some(name),
            why,
            http,
            ask_port: Some(to_port),
            cause: _,
        } if shared.ask => match ask(shared, protocol, &name, to_port).await {
            Ok((rule, owner, reason)) => Verdict::Allow {
                name,
                rule,
                port: to_port,
                tunnel: protocol == Protocol::Connect,
                owner,
                reason,
            },
            // The answer (or why none could be had) is the reason: what
            // would change it is the entry for the name and port.
            Err((cause, asked)) => Verdict::Deny {
                name: Some(name),
                why: format!("{why}; {asked}"),
                cause,
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
                owner,
                reason,
            },
            Some(t),
        ) => {
            let head_len = request_head_len(buf, to_port);
            match t.stray_placeholder(&buf[..head_len.min(buf.len())], &name, to_port) {
                Some(secret) => {
                    let why = record_stray(shared, secret, &name, to_port, original);
                    denied(Some(name), Reason::StrayPlaceholder, why, true)
                }
                None => Verdict::Allow {
                    name,
                    rule,
                    port: to_port,
                    tunnel: true,
                    owner,
                    reason,
                },
            }
        }
        (v, _) => v,
    };
    // A name the terminator serves, reached other than by a ClientHello
    // naming it (plain HTTP to it): refused before it is connected.
    let unserved = match &verdict {
        Verdict::Allow {
            name,
            port: to_port,
            tunnel: false,
            ..
        } => unterminated(shared, buf, protocol, name, *to_port).map(|r| (name.clone(), r)),
        _ => None,
    };
    let verdict = match unserved {
        Some((name, (cause, why))) => {
            denied_for(Some(name), cause, why, protocol == Protocol::Http)
        }
        None => verdict,
    };
    // An allowed CONNECT is answered by `relay` once its upstream is
    // connected; what the client then sends through the tunnel is judged
    // by [`tunnel`].
    (protocol, verdict)
}

/// Answer an allowed CONNECT to `name:to_port` (its upstream connected)
/// and decide what comes through its tunnel: it must pass the same rules
/// as a transparent connection to the same name and port (TLS for that
/// name, plain HTTP only where allowed, anything else only for an
/// explicit name:port entry).
pub(super) async fn tunnel(
    conn: &mut TcpStream,
    buf: &mut Vec<u8>,
    (name, rule, owner, reason): (String, String, bool, Reason),
    to_port: u16,
    shared: &Arc<Shared>,
) -> (Protocol, Verdict) {
    // A name the terminator serves takes only TLS naming it, whatever its
    // entry: nothing else is waited for, and other bytes are refused.
    let terminated = must_terminate(shared, &name, to_port);
    let explicit = !terminated
        && shared
            .matcher()
            .allows(&name, to_port)
            .is_some_and(|m| m.rule.port.is_some());
    let wait = if explicit {
        SERVER_FIRST_WAIT
    } else {
        FIRST_BYTES_TIMEOUT
    };
    let inner = through_tunnel(conn, buf, to_port, wait).await;
    let other = speaks_other(&inner, buf, to_port);
    let deny = |why: String, cause: Cause| {
        (
            Protocol::Connect,
            Verdict::Deny {
                name: Some(name.clone()),
                why,
                cause,
                http: false,
                ask_port: Some(to_port),
            },
        )
    };
    let allow = |rule: String| {
        (
            Protocol::Connect,
            Verdict::Allow {
                name: name.clone(),
                rule,
                port: to_port,
                tunnel: true,
                owner,
                reason,
            },
        )
    };
    let refused = |buf: &[u8]| {
        unterminated(shared, buf, Protocol::Connect, &name, to_port)
            .map(|(cause, why)| deny(format!("inside the CONNECT tunnel: {why}"), cause))
    };
    if explicit && other {
        allow(rule)
    } else if let Some(refusal) = (terminated && other && !buf.is_empty())
        .then(|| refused(buf))
        .flatten()
    {
        refusal
    } else {
        let judged = match inner.map(|first| decide(first, to_port, shared)) {
            Err(why) => deny(
                format!("inside the CONNECT tunnel: {why}"),
                Cause::new(Reason::SaidNothing),
            ),
            Ok((
                _,
                Verdict::Allow {
                    name: inner_name, ..
                },
            )) if inner_name == name => allow(rule),
            Ok((
                _,
                Verdict::Allow {
                    name: inner_name, ..
                },
            )) => deny(
                format!("the tunnel to {name} carries a connection for {inner_name}"),
                Cause::new(Reason::TunnelMismatch),
            ),
            // The tunnel's own name, allowed when asked about the
            // CONNECT: the same name and port need no second answer.
            Ok((
                _,
                Verdict::Deny {
                    name: Some(inner_name),
                    ask_port: Some(_),
                    ..
                },
            )) if shared.ask && inner_name == name => allow(rule),
            // Another host inside the tunnel, which no entry allows: a
            // mismatch, not a want of an entry for the tunnel's own name
            // (allowed already, so the run's summary proposes nothing).
            Ok((
                _,
                Verdict::Deny {
                    name: Some(inner_name),
                    ..
                },
            )) if inner_name != name => deny(
                format!("the tunnel to {name} carries a connection for {inner_name}, which no entry allows"),
                Cause::new(Reason::TunnelMismatch),
            ),
            Ok((_, Verdict::Deny { why, cause, .. } | Verdict::Refuse { why, cause, .. })) => {
                deny(format!("inside the CONNECT tunnel: {why}"), cause)
            }
        };
        // Allowed, and not TLS naming a name the terminator serves (plain
        // HTTP through the tunnel): refused all the same.
        match judged {
            (_, Verdict::Allow { .. }) => refused(buf).unwrap_or(judged),
            other => other,
        }
    }
}

/// Whether `name:port` is reached only through the terminator: a
/// secret's host or a name with request rules (with no terminator, such a
/// name is not reached at all).
fn must_terminate(shared: &Shared, name: &str, port: u16) -> bool {
    match shared.terminator.as_ref() {
        Some(t) => t.terminates(name, port),
        None => shared.request_rules.covers(name, port),
    }
}

/// Why an allowed connection to `name:port` (its first bytes `buf`, read
/// as `protocol`) may not go on: the name is one the terminator serves
/// (a secret's host, a name with request rules) and the connection is not
/// a TLS ClientHello naming it. Silence, other bytes, plain HTTP, or a
/// CONNECT's tunnel carrying any of them would reach the name with no
/// request decided, no placeholder put in and no real value taken out of
/// what comes back. A name with request rules and no terminator to apply
/// them is refused too. A secret's host's refusal names, as its cause's
/// field and entry, the owner's opt-in that would let this port carry it
/// (each door spells it: a flag, a profile key, a JSON path).
pub(super) fn unterminated(
    shared: &Shared,
    buf: &[u8],
    protocol: Protocol,
    name: &str,
    port: u16,
) -> Option<(Cause, String)> {
    let Some(t) = shared.terminator.as_ref() else {
        // Rules with no terminator to apply them (a backend that did not
        // make one): the name is refused, never passed through unruled.
        return shared.request_rules.covers(name, port).then(|| {
            (
                Cause::new(Reason::RequestRulesNeedTls),
                format!("{name} on port {port} has request rules, and this sandbox has no TLS terminator to apply them"),
            )
        });
    };
    if !t.terminates(name, port) {
        return None;
    }
    if names_itself(buf, protocol, name) {
        return None;
    }
    let ruled = t.rules_requests(name, port);
    if !ruled && shared.plain_allowed(name, port) {
        // The owner's opt-in: spliced as it is (see `relay::carry`).
        return None;
    }
    let how = match protocol {
        Protocol::Http => "plain HTTP",
        Protocol::Connect => "a CONNECT tunnel that does not carry TLS naming it",
        _ => "a connection that is not TLS naming it (silent, or other bytes)",
    };
    Some(if ruled {
        (
            Cause::new(Reason::RequestRulesNeedTls),
            format!("{name} on port {port} has request rules, which are applied to TLS only (the proxy terminates it to read each request): refused {how}"),
        )
    } else {
        // The option's entry always names its port (a secret's host is
        // terminated on every port; the opt-in is one port's).
        (
            Cause::with_entry(Reason::SecretNeedsTls, format!("{name}:{port}")),
            format!("{name} on port {port} is a secret's host (or pinned to its address), reached only over TLS the proxy terminates: refused {how}; only the owner may let this port carry it, spliced unscrubbed"),
        )
    })
}

/// Whether the connection's first bytes `buf` are a TLS ClientHello
/// naming `name` (directly or through a CONNECT's tunnel).
pub(super) fn names_itself(buf: &[u8], protocol: Protocol, name: &str) -> bool {
    matches!(protocol, Protocol::Tls | Protocol::Connect)
        && matches!(crate::tls::peek(buf), ClientHello::Sni(ref sni) if sni == name)
}

/// Why an allowed connection is refused all the same, before it is
/// connected.
pub(super) enum Refusal {
    /// A secret's placeholder on its way to a host that is not one of the
    /// secret's (already recorded as a secret decision): why.
    Stray(String),
    /// The egress quota is used up: why.
    Quota(String),
}

impl Refusal {
    /// Its words and its cause.
    pub(super) fn why(self) -> (String, Cause) {
        match self {
            Refusal::Stray(why) => (why, Cause::new(Reason::StrayPlaceholder)),
            Refusal::Quota(why) => (why, Cause::new(Reason::QuotaUsedUp)),
        }
    }
}

/// The last checks on a connection allowed to `name:upstream_port`: a
/// placeholder in a name, a CONNECT or a plain request's head on its way to
/// a host that is not its secret's; then the quota.
pub(super) fn admit(
    shared: &Shared,
    buf: &[u8],
    protocol: Protocol,
    at: &Arrival,
    name: &str,
    upstream_port: u16,
) -> Result<(), Refusal> {
    let stray = shared.terminator.as_ref().and_then(|t| {
        let head_len = match protocol {
            Protocol::Http => request_head_len(buf, at.port),
            _ => buf.len().min(MAX_CLIENT_HELLO),
        };
        t.stray_placeholder(&buf[..head_len.min(buf.len())], name, upstream_port)
            .map(str::to_string)
    });
    if let Some(secret) = stray {
        let why = record_stray(shared, &secret, name, upstream_port, at.original);
        return Err(Refusal::Stray(why));
    }
    let used = shared.used.load(std::sync::atomic::Ordering::Relaxed);
    match shared.quota.filter(|q| used >= *q) {
        Some(q) => Err(Refusal::Quota(format!(
            "the egress quota of {q} bytes is used up ({used} bytes so far)"
        ))),
        None => Ok(()),
    }
}

/// Record a placeholder found on its way to a host that is not its
/// secret's; returns why, for the connection's own decision.
fn record_stray(
    shared: &Shared,
    secret: &str,
    name: &str,
    port: u16,
    original: Option<SocketAddrV4>,
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
        reason: Some(Cause::new(Reason::StrayPlaceholder)),
    });
    why
}

/// Put a name on no list to the person (ask mode): `Ok` with the rule to
/// record when allowed, whether the owner allowed it (an answer of a
/// caller's reaches public addresses only) and the answer's reason; `Err`
/// with the cause and what happened otherwise.
async fn ask(
    shared: &Shared,
    protocol: Protocol,
    name: &str,
    port: u16,
) -> Result<(String, bool, Reason), (Cause, String)> {
    let entry = || domain_entry(name, port);
    if name == HOST_ALIAS || name.ends_with(".warden.internal") {
        return Err((
            Cause::with_entry(Reason::HostNotAsked, port.to_string()),
            format!(
                "{HOST_ALIAS} is the host itself: only the host ports the owner opened reach it, never a question"
            ),
        ));
    }
    let key = (name.to_string(), port);
    if let Some(owner) = shared
        .granted
        .lock()
        .ok()
        .and_then(|g| g.get(&key).copied())
    {
        return Ok(if shared.learn {
            (super::LEARNED.into(), owner, Reason::Learned)
        } else {
            (super::ASK_FOR_RUN.into(), owner, Reason::AskedForRun)
        });
    }
    let nobody = || {
        (
            Cause::with_entry(Reason::NoOneToAsk, entry()),
            "ask mode has no terminal to ask on".to_string(),
        )
    };
    if shared.asker.is_none() {
        return Err(nobody());
    }
    // A name the owner pinned to the host itself (its loopback or one of
    // its addresses) would be a question about the host's own ports.
    if let Some(ip) = shared.hosts.get(name).filter(|_| !shared.test_ask_loopback) {
        // Addresses that cannot be read are taken to include this one.
        if ip.is_loopback()
            || ip.to_canonical().is_loopback()
            || shared.own_addresses().map_or(true, |own| own.contains(ip))
        {
            return Err((
                Cause::with_entry(Reason::PinnedToHost, format!("{name}:{port}")),
                format!(
                    "{name} is pinned to the host itself ({ip}): only an allowlist entry with its port allows it, never a question"
                ),
            ));
        }
    }
    let Some(asker) = shared.asker.clone() else {
        return Err(nobody());
    };
    let question = Question {
        protocol: protocol.as_str(),
        name: name.to_string(),
        port,
        request: None,
    };
    let (answer, trust) = tokio::task::spawn_blocking(move || asker.ask_trusted(&question))
        .await
        .unwrap_or((Answer::Deny, Trust::Caller));
    let owner = trust == Trust::Owner;
    let grant = || {
        if let Ok(mut g) = shared.granted.lock() {
            g.insert(key.clone(), owner);
        }
    };
    match answer {
        Answer::Once => Ok((super::live::ASK_ONCE.into(), owner, Reason::AskedOnce)),
        Answer::ForRun => {
            grant();
            Ok((super::ASK_FOR_RUN.into(), owner, Reason::AskedForRun))
        }
        Answer::Deny => Err((
            Cause::with_entry(Reason::DeniedWhenAsked, entry()),
            "denied when asked".into(),
        )),
        Answer::Always => {
            grant();
            // A caller's "always" is kept on the sandbox's list as a
            // caller's entry, never written among the owner's grants.
            Ok(if owner {
                (super::ASK_ALWAYS.into(), owner, Reason::AskedAlways)
            } else {
                (
                    super::ASK_ALWAYS_BY_CALLER.into(),
                    owner,
                    Reason::AskedAlwaysByCaller,
                )
            })
        }
        Answer::Learn => {
            grant();
            Ok((super::LEARNED.into(), owner, Reason::Learned))
        }
    }
}

/// Did the owner allow `name:port`: the rule that matched is the owner's,
/// or (it being a caller's) another rule of the owner's allows it too?
/// The second look is taken only for a caller's rule.
pub(super) fn owners(matcher: &Matcher, m: &Match<'_>, name: &str, port: u16) -> bool {
    !m.rule.caller || matcher.owner_allows(name, port)
}

fn decide(first: First, port: u16, shared: &Shared) -> (Protocol, Verdict) {
    let hello = match first {
        First::Tls(h) => h,
        First::Http(head) => return decide_http(head, shared),
    };
    let matcher = shared.matcher();
    match hello {
        ClientHello::Sni(name) => match matcher.allows(&name, port) {
            Some(m) => (
                Protocol::Tls,
                Verdict::Allow {
                    owner: owners(&matcher, &m, &name, port),
                    name,
                    rule: m.rule.source.clone(),
                    port,
                    tunnel: false,
                    reason: Reason::Allowed,
                },
            ),
            None => (Protocol::Tls, not_allowed(name, port, false)),
        },
        ClientHello::NoName => (
            Protocol::Tls,
            denied(
                None,
                Reason::NoServerName,
                "a TLS connection without a server name (or to a raw IP)".into(),
                false,
            ),
        ),
        ClientHello::EncryptedClientHello => (
            Protocol::Tls,
            denied(
                None,
                Reason::EncryptedClientHello,
                "Encrypted Client Hello hides the name; it is refused".into(),
                false,
            ),
        ),
        ClientHello::Malformed(why) => (
            Protocol::Tls,
            denied(None, Reason::MalformedTls, why.into(), false),
        ),
        ClientHello::Incomplete | ClientHello::NotTls => decide_http(Ok(None), shared),
    }
}

/// The decision for what read as an HTTP request head (or did not).
fn decide_http(
    head: Result<Option<crate::http::RequestHead>, HttpError>,
    shared: &Shared,
) -> (Protocol, Verdict) {
    match head {
        Ok(Some(head)) => {
            let name = head.destination.host.clone();
            let to_port = head.destination.port;
            let protocol = if head.connect {
                Protocol::Connect
            } else {
                Protocol::Http
            };
            // A host service the owner opened speaks what it speaks: plain
            // HTTP to it needs no permission of its own.
            if !head.connect && !shared.allow_http && !shared.is_host_service(&name, to_port) {
                return (
                    Protocol::Http,
                    denied(
                        Some(name),
                        Reason::PlainHttp,
                        "plain HTTP is denied (only TLS goes to allowed names)".into(),
                        true,
                    ),
                );
            }
            let matcher = shared.matcher();
            match matcher.allows(&name, to_port) {
                Some(m) => (
                    protocol,
                    Verdict::Allow {
                        owner: owners(&matcher, &m, &name, to_port),
                        name,
                        rule: m.rule.source.clone(),
                        port: to_port,
                        tunnel: head.connect,
                        reason: Reason::Allowed,
                    },
                ),
                None => (protocol, not_allowed(name, to_port, true)),
            }
        }
        Ok(None) => (
            Protocol::Tcp,
            denied(
                None,
                Reason::NotTlsOrHttp,
                "not TLS or HTTP: raw TCP is not allowed".into(),
                false,
            ),
        ),
        Err(e @ HttpError::Malformed(_)) => (
            Protocol::Tcp,
            denied(
                None,
                e.reason(),
                format!("not TLS or HTTP: raw TCP is not allowed ({e})"),
                false,
            ),
        ),
        Err(e) => (
            Protocol::Http,
            denied(None, e.reason(), e.to_string(), true),
        ),
    }
}
