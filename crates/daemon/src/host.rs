//! Which names a TCP listener answers to. A page of any web site the
//! owner opens can make the browser send requests to `127.0.0.1:PORT`
//! under the site's own name (DNS rebinding: `evil.example` resolved to
//! the site's server when the page loaded, and to 127.0.0.1 a moment
//! later); the browser then counts the daemon's answers as the site's own
//! origin's and lets the page read them. What tells such a request apart
//! is its `Host`: the name the browser thinks it is talking to. So each
//! TCP listener (the API's and the E2B door's) answers only a request
//! whose `Host` (and absolute-form target, if any) is
//! - an IP literal that is loopback or the address the connection reached
//!   (a browser connects to a literal itself: no name can be rebound to
//!   one);
//! - `localhost`, and on the E2B door, which routes a sandbox's ports by
//!   `PORT-ID.localhost` names, any `NAME.localhost` (RFC 6761 keeps them
//!   on the machine, and browsers resolve them to loopback themselves);
//! - a name the owner allowed (`allowed_hosts:` in the daemon's
//!   configuration file, `warden serve --allow-host NAME`; `.NAME` allows
//!   the name and every name under it).
//!
//! Anything else is answered 421 `host_not_allowed` by [`Gate`], in front
//! of the router: no route, credential check or handler runs, and the
//! connection is closed. The owner's Unix socket has no such check: no
//! browser reaches it.

use axum::http::{header, HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use std::convert::Infallible;
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use crate::error::ApiError;

/// The name every sandbox host of the E2B door ends with.
const LOCALHOST: &str = "localhost";

/// One entry of `allowed_hosts:` / `--allow-host`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
pub enum Allowed {
    /// This name only (lowercase, no trailing dot).
    Name(String),
    /// `.NAME`: the name and every name under it.
    Under(String),
    /// An address, as a browser would send it in `Host`.
    Ip(IpAddr),
}

/// Why an entry of `allowed_hosts:` was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{given:?} is not a host name (letters, digits and `-` in dot-separated labels; `.NAME` for the name and every name under it) or an IP address, without a scheme or port")]
pub struct NotAHost {
    pub given: String,
}

impl Allowed {
    /// Read one entry: a host name, `.NAME`, or an IP address (v6 with or
    /// without brackets); no scheme, no port, no `*`.
    pub fn parse(text: &str) -> Result<Allowed, NotAHost> {
        let refused = || NotAHost {
            given: text.to_string(),
        };
        let t = text.trim();
        let bare = t
            .strip_prefix('[')
            .and_then(|r| r.strip_suffix(']'))
            .unwrap_or(t);
        if let Ok(ip) = bare.parse::<IpAddr>() {
            return Ok(Allowed::Ip(ip.to_canonical()));
        }
        let (under, name) = match t.strip_prefix('.') {
            Some(rest) => (true, rest),
            None => (false, t),
        };
        let name = name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase();
        if !is_host_name(&name) {
            return Err(refused());
        }
        Ok(if under {
            Allowed::Under(name)
        } else {
            Allowed::Name(name)
        })
    }

    fn admits(&self, host: &Host) -> bool {
        match (self, host) {
            (Allowed::Name(n), Host::Name(h)) => n == h,
            (Allowed::Under(n), Host::Name(h)) => {
                h == n || h.strip_suffix(n.as_str()).is_some_and(|r| r.ends_with('.'))
            }
            (Allowed::Ip(a), Host::Ip(h)) => a == h,
            _ => false,
        }
    }
}

impl TryFrom<String> for Allowed {
    type Error = NotAHost;
    fn try_from(s: String) -> Result<Allowed, NotAHost> {
        Allowed::parse(&s)
    }
}

/// Letters, digits and `-` in labels of 1 to 63 bytes, joined by dots,
/// 253 bytes at most: a name DNS can carry and a browser would send.
fn is_host_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
}

/// A request's host, as read from `Host` or its target.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Host {
    Ip(IpAddr),
    /// Lowercase, without a trailing dot.
    Name(String),
}

/// The host of `HOST[:PORT]`, `[V6][:PORT]`; `None` when it is neither.
fn host_of(authority: &str) -> Option<Host> {
    let a: axum::http::uri::Authority = authority.parse().ok()?;
    // A user part is no part of a Host a browser sends.
    if a.as_str().contains('@') {
        return None;
    }
    let h = a.host();
    if let Some(v6) = h.strip_prefix('[').and_then(|r| r.strip_suffix(']')) {
        return v6
            .parse::<std::net::Ipv6Addr>()
            .ok()
            .map(|ip| Host::Ip(IpAddr::V6(ip).to_canonical()));
    }
    if let Ok(ip) = h.parse::<std::net::Ipv4Addr>() {
        return Some(Host::Ip(IpAddr::V4(ip)));
    }
    let name = h.strip_suffix('.').unwrap_or(h).to_ascii_lowercase();
    is_host_name(&name).then_some(Host::Name(name))
}

/// The names one TCP listener answers to (see the module's doc).
#[derive(Debug, Clone, Default)]
pub struct Hosts {
    /// The owner's `allowed_hosts:` and `--allow-host`.
    pub allowed: Vec<Allowed>,
    /// Whether any `NAME.localhost` is answered (the E2B door's sandbox
    /// hosts).
    pub localhost_names: bool,
}

/// Why a request's host was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Misdirected {
    #[error("the request has no Host header: HTTP/1.1 requires one, and this daemon answers only a Host it knows")]
    Missing,
    #[error("the request has more than one Host header")]
    Several,
    #[error("Host {given} is not one this daemon answers to on this listener (a page of another site can reach a local server through a name that resolves to it): loopback addresses and localhost are answered; to answer another name, list it in `allowed_hosts:` of the daemon's configuration file or pass `--allow-host NAME` to `warden serve`")]
    NotAllowed { given: String },
}

impl Hosts {
    /// Whether a request with `headers` and target `uri`, which came on a
    /// connection to `local`, names a host this listener answers to.
    pub fn check(
        &self,
        headers: &HeaderMap,
        uri: &Uri,
        local: Option<IpAddr>,
    ) -> Result<(), Misdirected> {
        let mut given = headers.get_all(header::HOST).iter();
        let first = given.next().ok_or(Misdirected::Missing)?;
        if given.next().is_some() {
            return Err(Misdirected::Several);
        }
        let text = first.to_str().unwrap_or("");
        self.admit(text, local)?;
        // An absolute-form target names a host of its own, which the
        // routes may read instead.
        if let Some(a) = uri.authority() {
            self.admit(a.as_str(), local)?;
        }
        Ok(())
    }

    fn admit(&self, text: &str, local: Option<IpAddr>) -> Result<(), Misdirected> {
        let ok = match host_of(text) {
            Some(Host::Ip(ip)) => {
                ip.is_loopback()
                    || Some(ip) == local.map(|l| l.to_canonical())
                    || self.allowed.iter().any(|a| a.admits(&Host::Ip(ip)))
            }
            Some(Host::Name(n)) => {
                n == LOCALHOST
                    || (self.localhost_names && n.ends_with(&format!(".{LOCALHOST}")))
                    || self
                        .allowed
                        .iter()
                        .any(|a| a.admits(&Host::Name(n.clone())))
            }
            None => false,
        };
        if ok {
            Ok(())
        } else {
            Err(Misdirected::NotAllowed { given: shown(text) })
        }
    }
}

/// A refused host as the answer quotes it: escaped, and short.
fn shown(text: &str) -> String {
    let mut s: String = text.escape_debug().collect();
    if s.len() > 200 {
        let mut cut = 200;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
        s.push('…');
    }
    format!("\"{s}\"")
}

impl Misdirected {
    /// 421 with the reason, and the connection closed: a client that
    /// named the wrong server gets nothing more on this connection.
    pub fn response(&self) -> Response {
        let status = match self {
            Misdirected::NotAllowed { .. } => StatusCode::MISDIRECTED_REQUEST,
            Misdirected::Missing | Misdirected::Several => StatusCode::BAD_REQUEST,
        };
        let mut r = ApiError::new(status, "host_not_allowed", self.to_string()).into_response();
        let h = r.headers_mut();
        h.insert(
            header::CONNECTION,
            header::HeaderValue::from_static("close"),
        );
        h.insert(
            header::CACHE_CONTROL,
            header::HeaderValue::from_static("no-store"),
        );
        h.insert(
            header::X_CONTENT_TYPE_OPTIONS,
            header::HeaderValue::from_static("nosniff"),
        );
        r
    }
}

/// A listener's service behind its host check: a request whose host the
/// listener does not answer to never reaches `inner`.
#[derive(Clone)]
pub struct Gate<S> {
    pub inner: S,
    pub hosts: Arc<Hosts>,
    /// The address the connection reached.
    pub local: Option<IpAddr>,
}

impl<S, B> tower::Service<http::Request<B>> for Gate<S>
where
    S: tower::Service<http::Request<B>, Response = Response, Error = Infallible>,
    S::Future: Send + 'static,
{
    type Response = Response;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        match self.hosts.check(req.headers(), req.uri(), self.local) {
            Ok(()) => Box::pin(self.inner.call(req)),
            Err(why) => {
                tracing::debug!("refused a request: {why}");
                let answer = why.response();
                Box::pin(async move { Ok(answer) })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(hosts: &Hosts, host: &str, local: &str) -> Result<(), Misdirected> {
        let mut h = HeaderMap::new();
        h.insert(header::HOST, host.parse().unwrap());
        hosts.check(&h, &Uri::from_static("/v1/health"), local.parse().ok())
    }

    #[test]
    fn loopback_and_localhost_are_answered_and_other_names_are_not() {
        let api = Hosts::default();
        for ok in [
            "127.0.0.1:7070",
            "127.0.0.1",
            "127.9.9.9:1",
            "[::1]:7070",
            "[::ffff:127.0.0.1]:7070",
            "localhost:7070",
            "LOCALHOST",
            "localhost.:7070",
        ] {
            assert_eq!(check(&api, ok, "127.0.0.1"), Ok(()), "{ok}");
        }
        for bad in [
            "evil.example",
            "evil.example:7070",
            "127.0.0.1.evil.example",
            "localhost.evil.example",
            "evil.localhost:7070",
            "user@127.0.0.1:7070",
            "10.0.0.5:7070",
            "0.0.0.0:7070",
            "",
            "[::1",
        ] {
            assert!(check(&api, bad, "127.0.0.1").is_err(), "{bad}");
        }
    }

    #[test]
    fn the_e2b_door_answers_its_sandbox_hosts_under_localhost() {
        let door = Hosts {
            localhost_names: true,
            ..Hosts::default()
        };
        assert_eq!(check(&door, "3000-sb.localhost:49999", "127.0.0.1"), Ok(()));
        assert!(check(&door, "3000-sb.localhost.evil.example", "127.0.0.1").is_err());
        assert!(check(&door, "evil-localhost:49999", "127.0.0.1").is_err());
    }

    #[test]
    fn the_address_a_connection_reached_is_answered_as_a_literal() {
        let api = Hosts::default();
        assert_eq!(check(&api, "10.0.0.5:7070", "10.0.0.5"), Ok(()));
        assert!(check(&api, "10.0.0.6:7070", "10.0.0.5").is_err());
    }

    #[test]
    fn names_the_owner_allowed_are_answered() {
        let hosts = Hosts {
            allowed: ["box.lan", ".corp.example", "192.168.1.9"]
                .iter()
                .map(|a| Allowed::parse(a).unwrap())
                .collect(),
            localhost_names: false,
        };
        for ok in [
            "box.lan:7070",
            "BOX.LAN",
            "corp.example",
            "a.b.corp.example:1",
            "192.168.1.9:7070",
        ] {
            assert_eq!(check(&hosts, ok, "127.0.0.1"), Ok(()), "{ok}");
        }
        for bad in [
            "xbox.lan",
            "evilcorp.example",
            "box.lan.evil",
            "192.168.1.10",
        ] {
            assert!(check(&hosts, bad, "127.0.0.1").is_err(), "{bad}");
        }
    }

    #[test]
    fn an_allowed_host_is_a_name_or_an_address_and_nothing_else() {
        assert_eq!(
            Allowed::parse("[::1]"),
            Ok(Allowed::Ip("::1".parse().unwrap()))
        );
        assert_eq!(
            Allowed::parse("Box.Lan."),
            Ok(Allowed::Name("box.lan".into()))
        );
        for bad in [
            "",
            "*",
            "*.example",
            "http://box.lan",
            "box.lan:7070",
            "a..b",
            "-a.b",
            ".",
            "a b",
        ] {
            assert!(Allowed::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_request_without_one_host_or_with_a_foreign_target_is_refused() {
        let api = Hosts::default();
        let none = HeaderMap::new();
        let uri = Uri::from_static("/v1/health");
        assert_eq!(api.check(&none, &uri, None), Err(Misdirected::Missing));
        let mut two = HeaderMap::new();
        two.append(header::HOST, "127.0.0.1".parse().unwrap());
        two.append(header::HOST, "evil.example".parse().unwrap());
        assert_eq!(api.check(&two, &uri, None), Err(Misdirected::Several));
        let mut one = HeaderMap::new();
        one.insert(header::HOST, "127.0.0.1".parse().unwrap());
        let absolute = Uri::from_static("http://evil.example/v1/health");
        assert!(api.check(&one, &absolute, None).is_err());
    }
}
