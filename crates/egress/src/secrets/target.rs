//! What a request on a terminated connection is for, read once and the
//! same way the upstream will read it: the authority (checked against the
//! connection's name, port and TLS server name) and the path (normalised:
//! unreserved characters percent-decoded, dot segments resolved, empty
//! segments dropped). `--secret-rule` is matched on the normalised path,
//! and that path is what is forwarded. Anything that two servers could
//! read two ways (userinfo, two hosts, an encoded slash or backslash,
//! `..;`) is refused. It never sends or records anything.

use std::str::FromStr;
use warden_policy::requests::{normalise_escapes, EscapeError};

/// Why a request's authority or path is refused.
#[derive(Debug, thiserror::Error)]
pub(crate) enum TargetError {
    #[error("{0} Host headers on one request: which one a server reads is its own choice")]
    TwoHosts(usize),
    #[error("the authority {0:?} is not a host name with an optional port")]
    BadAuthority(String),
    #[error("the authority {0:?} carries user information")]
    Userinfo(String),
    #[error("a request for {asked} on the connection to {name}:{port}: secrets go only where the connection goes")]
    OtherHost {
        asked: String,
        name: String,
        port: u16,
    },
    #[error("the {header} header names {asked} on the connection to {name}:{port}: a server or a proxy in front of it may route the request there, and secrets go only where the connection goes")]
    RoutingHeader {
        header: String,
        asked: String,
        name: String,
        port: u16,
    },
    #[error("the TLS server name {sni} is not the connection's host {name}")]
    OtherServerName { sni: String, name: String },
    #[error("the path {0:?} holds an encoded slash, a backslash, a control character or a bad escape, which servers read differently")]
    Ambiguous(String),
    #[error("the path {0:?} holds a C1 control, a non-character or a byte sequence UTF-8 forbids (raw or escaped): no rule can name it")]
    NotACharacter(String),
    #[error("the query {0:?} holds a C1 control, a non-character or a byte sequence UTF-8 forbids (raw or escaped): no rule can name it")]
    NotACharacterQuery(String),
    #[error("the request target {0:?} is not a path")]
    NotAPath(String),
}

/// Check that every authority the request names (an absolute-form target
/// or HTTP/2's `:authority`, and `Host`) is the connection's own host and
/// port, and that the TLS server name is too.
pub(super) fn check_authority(
    parts: &http::request::Parts,
    sni: Option<&str>,
    name: &str,
    port: u16,
) -> Result<(), TargetError> {
    if let Some(sni) = sni {
        if !same_host(sni, name) {
            return Err(TargetError::OtherServerName {
                sni: sni.to_string(),
                name: name.to_string(),
            });
        }
    }
    let hosts: Vec<&http::HeaderValue> = parts.headers.get_all(http::header::HOST).iter().collect();
    if hosts.len() > 1 {
        return Err(TargetError::TwoHosts(hosts.len()));
    }
    let mut named: Vec<String> = Vec::new();
    if let Some(a) = parts.uri.authority() {
        named.push(a.as_str().to_string());
    }
    for h in hosts {
        named.push(String::from_utf8_lossy(h.as_bytes()).into_owned());
    }
    for text in named {
        own_authority(&text, name, port).map_err(|e| match e {
            OwnAuthority::Userinfo => TargetError::Userinfo(text.clone()),
            OwnAuthority::Bad => TargetError::BadAuthority(text.clone()),
            OwnAuthority::Other => TargetError::OtherHost {
                asked: text.clone(),
                name: name.to_string(),
                port,
            },
        })?;
    }
    check_routing_headers(parts, name, port)
}

/// Headers by which a server, or a proxy or framework in front of it,
/// may take a request as one for another host than its `Host`: the
/// virtual host it is routed to, or the host an application builds its
/// links and redirects from (Express's, Django's, Rails', Symfony's and
/// Laravel's trusted-proxy settings read `X-Forwarded-Host`; nginx, IIS's
/// ARR and Azure's gateways `X-Original-Host`; RFC 7239's `Forwarded`
/// its `host=`). Each may name the connection's own host only. Read as a
/// CGI server names them (any case, `_` for `-`: `X_FORWARDED_HOST`), on
/// HTTP/1.1 and HTTP/2 alike.
const HOST_ROUTING: &[(&str, &str)] = &[
    (
        "x-forwarded-host",
        "the host a proxy in front was asked for",
    ),
    (
        "x-forwarded-server",
        "the server a proxy in front forwarded to",
    ),
    ("x-host", "a host override some gateways route by"),
    (
        "x-http-host-override",
        "a host override some frameworks read",
    ),
    (
        "x-original-host",
        "the host before a rewrite (IIS ARR, Azure)",
    ),
    ("forwarded", "RFC 7239: its host= parameter"),
];

/// Whether a header named `name` is `header` as a CGI server reads its
/// name (upper-cased, `-` made `_`).
fn is_header(name: &str, header: &str) -> bool {
    name.len() == header.len()
        && name
            .bytes()
            .zip(header.bytes())
            .all(|(n, h)| n.eq_ignore_ascii_case(&h) || (n == b'_' && h == b'-'))
}

/// Refuse a request carrying a host-routing header ([`HOST_ROUTING`])
/// that names anything but the connection's own host (and port, when it
/// gives one); one that cannot be read is refused too.
fn check_routing_headers(
    parts: &http::request::Parts,
    name: &str,
    port: u16,
) -> Result<(), TargetError> {
    for (key, value) in parts.headers.iter() {
        let Some((header, _)) = HOST_ROUTING
            .iter()
            .find(|(h, _)| is_header(key.as_str(), h))
        else {
            continue;
        };
        let refused = |asked: &str| TargetError::RoutingHeader {
            header: key.as_str().to_string(),
            asked: asked.to_string(),
            name: name.to_string(),
            port,
        };
        let Ok(text) = value.to_str() else {
            return Err(refused(&String::from_utf8_lossy(value.as_bytes())));
        };
        let named: Vec<String> = if *header == "forwarded" {
            forwarded_hosts(text)
        } else {
            text.split(',').map(|a| a.trim().to_string()).collect()
        };
        for asked in named {
            // No port: the host alone, which the connection's is.
            let own = own_authority(&asked, name, port).or_else(|e| match e {
                OwnAuthority::Other
                    if http::uri::Authority::from_str(&asked)
                        .is_ok_and(|a| a.port().is_none() && same_host(a.host(), name)) =>
                {
                    Ok(())
                }
                e => Err(e),
            });
            if own.is_err() {
                return Err(refused(&asked));
            }
        }
    }
    Ok(())
}

/// The `host=` values of a `Forwarded` header (RFC 7239: elements
/// separated by `,`, pairs by `;`, a value a token or a quoted string).
fn forwarded_hosts(text: &str) -> Vec<String> {
    text.split(',')
        .flat_map(|element| element.split(';'))
        .filter_map(|pair| {
            let (k, v) = pair.split_once('=')?;
            k.trim().eq_ignore_ascii_case("host").then(|| {
                let v = v.trim();
                v.strip_prefix('"')
                    .and_then(|v| v.strip_suffix('"'))
                    .unwrap_or(v)
                    .to_string()
            })
        })
        .collect()
}

/// Why an authority is not the connection's own.
enum OwnAuthority {
    Userinfo,
    Bad,
    Other,
}

/// Whether `text` is an authority naming `name` on `port` (without a
/// port, an https authority means 443).
fn own_authority(text: &str, name: &str, port: u16) -> Result<(), OwnAuthority> {
    if text.contains('@') {
        return Err(OwnAuthority::Userinfo);
    }
    let a = http::uri::Authority::from_str(text).map_err(|_| OwnAuthority::Bad)?;
    let host = a.host();
    let plain = host
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.');
    if host.is_empty() || !plain {
        return Err(OwnAuthority::Bad);
    }
    // Without a port an https authority means 443.
    let asked_port = a.port_u16().unwrap_or(443);
    if !same_host(host, name) || asked_port != port {
        return Err(OwnAuthority::Other);
    }
    Ok(())
}

fn same_host(a: &str, b: &str) -> bool {
    let a = a.strip_suffix('.').unwrap_or(a);
    let b = b.strip_suffix('.').unwrap_or(b);
    a.eq_ignore_ascii_case(b)
}

/// The authority forwarded upstream: the connection's own, whatever
/// spelling the request used.
pub(super) fn forwarded_authority(name: &str, port: u16) -> String {
    let name = name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase();
    if port == 443 {
        name
    } else {
        format!("{name}:{port}")
    }
}

/// Refuse a query holding, raw or escaped, what no rule can name (a C1
/// control, a non-character, an encoding UTF-8 forbids), as a path
/// holding one is: a query condition, and an owner's "always" about one,
/// could not be written for it.
pub(super) fn check_query(query: Option<&str>) -> Result<(), TargetError> {
    match query {
        Some(q) if warden_policy::requests::query_not_a_character(q) => {
            Err(TargetError::NotACharacterQuery(q.to_string()))
        }
        _ => Ok(()),
    }
}

/// `path` as the upstream will read it: `%XX` of an unreserved character
/// decoded, other escapes in upper case, empty and `.` segments dropped,
/// `..` resolved (never above the root), every byte outside ASCII
/// escaped (`warden_policy::requests::normalise_escapes`). Refused: a
/// backslash, a control character, a bad escape, a dot segment with
/// parameters (`..;`), what no rule can name (a C1 control, a
/// non-character, an encoding UTF-8 forbids, raw or escaped), and,
/// when `ruled` (the host has `--secret-rule`s, so the path decides), an
/// encoded `/` or `\`, which some servers decode into a separator after
/// the rule was matched. Without rules such an escape is kept as it is
/// (APIs such as GitLab's name projects `group%2Fproject`).
pub(crate) fn normalise_path(path: &str, ruled: bool) -> Result<String, TargetError> {
    if path == "*" {
        return Ok(path.to_string());
    }
    if !path.starts_with('/') {
        return Err(TargetError::NotAPath(path.to_string()));
    }
    let ambiguous = || TargetError::Ambiguous(path.to_string());
    if path.bytes().any(|b| b == b'\\' || b < 0x20 || b == 0x7f) {
        return Err(ambiguous());
    }
    // One normaliser with the rules' own paths (`warden_policy::requests`).
    let decoded = normalise_escapes(path, |v| {
        v < 0x20 || v == 0x7f || (ruled && (v == b'/' || v == b'\\'))
    })
    .map_err(|e| match e {
        EscapeError::NotACharacter => TargetError::NotACharacter(path.to_string()),
        _ => ambiguous(),
    })?;
    let mut out: Vec<&str> = Vec::new();
    let segments: Vec<&str> = decoded.split('/').skip(1).collect();
    let mut trailing = false;
    for (k, seg) in segments.iter().enumerate() {
        let last = k + 1 == segments.len();
        // A segment that some server reads as a dot segment once it drops
        // parameters (`..;x`, `..%3Bx`) or trims trailing dots and spaces
        // (`..%20`, `...`) is refused: where it resolves is that server's
        // choice, and the rules must decide on what the upstream sees.
        let bare = crate::requests::path::without_params(seg);
        let trimmed = crate::requests::path::trimmed(&bare);
        let dots = |s: &str| s == "." || s == "..";
        let odd = dots(&bare) || dots(&trimmed) || (trimmed.is_empty() && bare.starts_with('.'));
        if odd && !dots(seg) {
            return Err(ambiguous());
        }
        match *seg {
            "" | "." => trailing = last,
            ".." => {
                out.pop();
                trailing = last;
            }
            s => {
                out.push(s);
                trailing = false;
            }
        }
    }
    let mut p = format!("/{}", out.join("/"));
    if trailing && !out.is_empty() {
        p.push('/');
    }
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(headers: &[(&str, &str)]) -> http::request::Parts {
        let mut b = http::Request::builder().uri("/x");
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        b.body(()).unwrap().into_parts().0
    }

    #[test]
    fn a_host_routing_header_naming_another_host_is_refused_in_any_spelling() {
        let check = |h: &[(&str, &str)]| check_authority(&request(h), None, "api.test", 8443);
        for h in [
            ("X-Forwarded-Host", "attacker.example"),
            ("x-forwarded-host", "api.test:8443, attacker.example"),
            ("X_FORWARDED_HOST", "attacker.example"),
            ("X-Host", "attacker.example"),
            ("X-Forwarded-Server", "attacker.example"),
            ("X-HTTP-Host-Override", "attacker.example"),
            ("X-Original-Host", "attacker.example"),
            ("Forwarded", "for=1.2.3.4;host=attacker.example"),
            ("Forwarded", "host=api.test:8443, host=\"attacker.example\""),
            ("X-Forwarded-Host", "api.test:9000"),
            ("X-Forwarded-Host", "user@api.test"),
            ("X-Forwarded-Host", ""),
        ] {
            assert!(
                matches!(check(&[h]), Err(TargetError::RoutingHeader { .. })),
                "{h:?}"
            );
        }
        for h in [
            ("X-Forwarded-Host", "api.test"),
            ("X-Forwarded-Host", "API.test.:8443"),
            ("Forwarded", "for=1.2.3.4;proto=https"),
            ("Forwarded", "host=\"api.test:8443\""),
            ("X-Forwarded-For", "attacker.example"),
        ] {
            assert!(check(&[h]).is_ok(), "{h:?}");
        }
    }

    #[test]
    fn paths_are_read_as_a_server_reads_them() {
        for (raw, want) in [
            ("/repos/acme/w", "/repos/acme/w"),
            ("/repos/%61cme/w", "/repos/acme/w"),
            ("/repos//acme/./w", "/repos/acme/w"),
            ("/repos/other/../acme/w", "/repos/acme/w"),
            ("/repos/acme/%2e%2E/other", "/repos/other"),
            ("/../../etc", "/etc"),
            ("/a/b/", "/a/b/"),
            ("/a/b/..", "/a/"),
            ("/q%3fx", "/q%3Fx"),
            ("/", "/"),
        ] {
            assert_eq!(normalise_path(raw, true).unwrap(), want, "{raw}");
        }
        for raw in [
            "/a%2fb",
            "/a%2F..%2Fb",
            "/a%5cb",
            "/a\\b",
            "/a/..;/b",
            "/a/.;x/b",
            "/a/..%3B/b",
            "/a/..%3bx/b",
            "/a/..%20/b",
            "/a/.../b",
            "/a/.%20/b",
            "/a%00b",
            "/a%zz",
            "/a%2",
            "relative",
        ] {
            assert!(normalise_path(raw, true).is_err(), "{raw}");
        }
        assert_eq!(
            normalise_path("/projects/group%2fproject/../x", false).unwrap(),
            "/projects/x"
        );
        assert_eq!(
            normalise_path("/projects/group%2fproject", false).unwrap(),
            "/projects/group%2Fproject"
        );
        assert!(normalise_path("/a/..;/b", false).is_err());
    }

    #[test]
    fn a_path_no_rule_can_name_is_refused_and_every_other_is_forwarded_in_ascii() {
        for raw in [
            "/x\u{9b}31m",
            "/x%C2%9B31m",
            "/x%c2%85",
            "/a\u{fffe}",
            "/a%EF%BF%BF",
            "/a%EF%B7%90",
            "/a%F4%8F%BF%BE",
            "/a%ED%A0%80",
            "/a%C0%AF..",
            "/a%E0%80%AF",
            "/a%F0%80%80%AF",
            "/a%F4%90%80%80",
        ] {
            assert!(
                matches!(
                    normalise_path(raw, false),
                    Err(TargetError::NotACharacter(_))
                ),
                "{raw:?}"
            );
        }
        for (raw, want) in [
            ("/caf\u{e9}", "/caf%C3%A9"),
            ("/caf%c3%a9", "/caf%C3%A9"),
            ("/a\u{202e}b", "/a%E2%80%AEb"),
            ("/latin1%E9", "/latin1%E9"),
            ("/\u{1f980}", "/%F0%9F%A6%80"),
        ] {
            assert_eq!(normalise_path(raw, true).unwrap(), want, "{raw:?}");
        }
    }

    #[test]
    fn a_query_no_rule_can_name_is_refused_and_others_pass() {
        for q in [
            "a=\u{9b}",
            "a=%C2%9B",
            "a=%ef%bf%bf",
            "a=%ED%A0%80",
            "%C0%AF",
        ] {
            assert!(check_query(Some(q)).is_err(), "{q:?}");
        }
        for q in ["a=1&b=caf%C3%A9", "q=caf\u{e9}", "latin1=%E9", "x=%zz"] {
            assert!(check_query(Some(q)).is_ok(), "{q:?}");
        }
        assert!(check_query(None).is_ok());
    }

    fn parts(uri: &str, hosts: &[&str]) -> http::request::Parts {
        let mut b = http::Request::builder().uri(uri);
        for h in hosts {
            b = b.header("host", *h);
        }
        b.body(()).unwrap().into_parts().0
    }

    #[test]
    fn only_the_connections_own_authority_passes() {
        let ok = |uri: &str, hosts: &[&str], sni: Option<&str>| {
            check_authority(&parts(uri, hosts), sni, "api.test", 8443).is_ok()
        };
        assert!(ok("/", &["api.test:8443"], Some("api.test")));
        assert!(ok("/", &["API.Test.:8443"], None));
        assert!(ok("https://api.test:8443/", &[], None));
        assert!(ok("/", &[], None));
        assert!(!ok("/", &["api.test:8443"], Some("other.test")));
        assert!(!ok("/", &["api.test"], None));
        assert!(!ok("/", &["api.test:1"], None));
        assert!(!ok("/", &["api.test:8443", "api.test:8443"], None));
        assert!(!ok("/", &["u@api.test:8443"], None));
        assert!(!ok("https://api.test:8443/", &["other.test"], None));
        assert!(!ok("https://other.test/", &["api.test:8443"], None));
        assert!(!ok("https://u@api.test:8443/", &[], None));
        assert!(!ok("/", &["api.test%2eother:8443"], None));
        assert_eq!(forwarded_authority("API.test.", 443), "api.test");
        assert_eq!(forwarded_authority("api.test", 8443), "api.test:8443");
    }
}
