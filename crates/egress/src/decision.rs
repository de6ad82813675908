//! What the proxy and the resolver decide, and the [`Observer`] that hears
//! each decision the moment it is made. Shared by the proxy, the resolver
//! and the secret terminator; it holds no logic of its own.

use warden_policy::Field;

/// What a decision was about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Protocol {
    /// A TLS connection, decided on its server name.
    Tls,
    /// A plain HTTP request, decided on its `Host`.
    Http,
    /// An explicit proxy's CONNECT, decided on its target.
    Connect,
    /// Another protocol to a `name:port` entry, or a connection that said
    /// nothing usable.
    Tcp,
    /// A DNS question to the sandbox's resolver.
    Dns,
    /// A request on a terminated connection, judged by `--secret-rule` or
    /// its `Host`.
    Request,
    /// What the secret proxy did with a secret.
    Secret(SecretAction),
}

/// What the secret proxy did with a secret.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SecretAction {
    /// The real value was put in a request to one of the secret's hosts.
    Substituted,
    /// The real value was taken out of a response.
    Scrubbed,
    /// A placeholder or the real value was stopped on its way.
    Blocked,
}

impl Protocol {
    /// The short word used in logs: `tls`, `http`, `connect`, `tcp`, `dns`,
    /// `request`, `secret`.
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Tls => "tls",
            Protocol::Http => "http",
            Protocol::Connect => "connect",
            Protocol::Tcp => "tcp",
            Protocol::Dns => "dns",
            Protocol::Request => "request",
            Protocol::Secret(_) => "secret",
        }
    }
}

/// One decision of the proxy or the resolver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub protocol: Protocol,
    /// The name asked for, when there was one.
    pub name: Option<String>,
    pub port: u16,
    /// The address the program inside connected to.
    pub original_destination: Option<String>,
    pub allowed: bool,
    /// The allowlist entry that allowed it (for a secret: its name).
    pub rule: Option<String>,
    /// Why it was denied, or where it went.
    pub detail: String,
    pub bytes_out: u64,
    pub bytes_in: u64,
    pub duration_ms: u64,
    /// Why it was refused, as data a door can word in its own terms
    /// (the flag, the profile key, the API field); `detail` says the same
    /// in words. Set only where the refusal has a rule that would lift it.
    pub reason: Option<Reason>,
}

/// Why an allowed name was not connected, as a stable code and its data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reason {
    pub code: ReasonCode,
    /// The addresses the name resolved to (or was pinned to).
    pub addresses: Vec<std::net::IpAddr>,
    /// The owner's option whose entry would allow it, and that entry
    /// (e.g. [`Field::AllowCidr`] and `10.1.2.3/32`).
    pub allow: Option<(Field, String)>,
}

/// The stable codes of [`Reason`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReasonCode {
    /// The name resolved only to addresses that are not public and in no
    /// range the owner allowed.
    NotPublic,
    /// The name resolved only to the host's own addresses (or its
    /// loopback), which no range opens.
    HostItself,
    /// Only a caller's entry allows the name, and such an entry reaches
    /// public addresses only.
    CallersReach,
}

impl ReasonCode {
    /// The code as events carry it: `not_public`, `host_itself`,
    /// `callers_reach`.
    pub fn as_str(self) -> &'static str {
        match self {
            ReasonCode::NotPublic => "not_public",
            ReasonCode::HostItself => "host_itself",
            ReasonCode::CallersReach => "callers_reach",
        }
    }
}

/// Hears every decision as it is made. Called on the proxy's own threads:
/// an implementation should return at once (queue, aggregate repeats,
/// never write to a slow sink here), or it holds up the sandbox's
/// connections; it may wait only where the alternative is losing the
/// record (the runtime's bus waits when its queue is full, so that an
/// allowed connection moves no byte unrecorded). Repeated decisions may be
/// counted rather than kept one by one.
pub trait Observer: Send + Sync {
    /// A decision, at the moment it is made. An allowed connection carries
    /// `conn`, the number its [`Observer::closed`] will repeat.
    fn decision(&self, conn: Option<u64>, decision: &Decision);
    /// An allowed connection ended; `decision` now holds its bytes and
    /// duration.
    fn closed(&self, conn: u64, decision: &Decision);
}

/// An observer that hears nothing (tests, tools that only need the proxy).
pub struct Deaf;

impl Observer for Deaf {
    fn decision(&self, _: Option<u64>, _: &Decision) {}
    fn closed(&self, _: u64, _: &Decision) {}
}
