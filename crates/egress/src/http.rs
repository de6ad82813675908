//! Reading where a plain HTTP request (or an explicit-proxy request) goes:
//! the `Host` header, an absolute URI, or a `CONNECT` target. Anything
//! ambiguous (two `Host` headers, a Host that disagrees with the URI, a
//! name that is not a host name) is refused rather than guessed at.

use warden_policy::normalize_name;

/// Largest request head accepted (request line and headers).
pub const MAX_HEAD: usize = 16 * 1024;
/// Most headers accepted in one request.
const MAX_HEADERS: usize = 100;

/// Where a request is going.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Destination {
    /// Normalized host name.
    pub host: String,
    pub port: u16,
}

/// A parsed request head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestHead {
    pub method: String,
    /// `CONNECT host:port` (explicit proxy tunnel).
    pub connect: bool,
    /// The destination named by the request.
    pub destination: Destination,
    /// Bytes of the head, request line to the empty line included.
    pub head_len: usize,
}

/// Why a request head was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HttpError {
    #[error("not an HTTP request: {0}")]
    Malformed(String),
    #[error("the request head is longer than {MAX_HEAD} bytes")]
    TooLong,
    #[error("the request names no host")]
    NoHost,
    #[error("the request names several hosts")]
    SeveralHosts,
    #[error("the request's host {0:?} is not a host name (IP addresses are refused: decisions are made on names)")]
    BadHost(String),
}

impl HttpError {
    /// Its stable code.
    pub fn reason(&self) -> crate::decision::Reason {
        use crate::decision::Reason;
        match self {
            HttpError::Malformed(_) => Reason::NotTlsOrHttp,
            HttpError::TooLong
            | HttpError::NoHost
            | HttpError::SeveralHosts
            | HttpError::BadHost(_) => Reason::BadRequest,
        }
    }
}

/// Parse the bytes received so far. `Ok(None)`: the head is not complete
/// yet; read on (up to [`MAX_HEAD`]). `default_port` is 80 for transparent
/// interception, the port the client connected to for explicit proxying.
pub fn parse_request_head(buf: &[u8], default_port: u16) -> Result<Option<RequestHead>, HttpError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    let head_len = match req.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => {
            return if buf.len() >= MAX_HEAD {
                Err(HttpError::TooLong)
            } else {
                Ok(None)
            };
        }
        Err(e) => return Err(HttpError::Malformed(e.to_string())),
    };
    if head_len > MAX_HEAD {
        return Err(HttpError::TooLong);
    }
    let method = req.method.unwrap_or_default().to_string();
    let target = req.path.unwrap_or_default();
    let hosts: Vec<&[u8]> = req
        .headers
        .iter()
        .filter(|h| h.name.eq_ignore_ascii_case("host"))
        .map(|h| h.value)
        .collect();
    if hosts.len() > 1 {
        return Err(HttpError::SeveralHosts);
    }
    let header_host = match hosts.first() {
        Some(v) => Some(
            std::str::from_utf8(v)
                .map_err(|_| HttpError::BadHost(String::from_utf8_lossy(v).into_owned()))?
                .trim(),
        ),
        None => None,
    };

    let connect = method.eq_ignore_ascii_case("CONNECT");
    let destination = if connect {
        // CONNECT host:port — the port is required.
        let (host, port) = split_host_port(target, None)?;
        if let Some(h) = header_host {
            let (hh, _) = split_host_port(h, Some(port))?;
            if hh != host {
                return Err(HttpError::SeveralHosts);
            }
        }
        Destination { host, port }
    } else if let Some(rest) = target.strip_prefix("http://") {
        // Absolute URI (explicit proxy): the URI decides; a Host header
        // must agree with it.
        let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
        if authority.contains('@') {
            return Err(HttpError::BadHost(authority.to_string()));
        }
        let (host, port) = split_host_port(authority, Some(80))?;
        if let Some(h) = header_host {
            let (hh, _) = split_host_port(h, Some(port))?;
            if hh != host {
                return Err(HttpError::SeveralHosts);
            }
        }
        Destination { host, port }
    } else if target.starts_with('/') || target == "*" {
        let h = header_host.ok_or(HttpError::NoHost)?;
        let (host, port) = split_host_port(h, Some(default_port))?;
        Destination { host, port }
    } else {
        return Err(HttpError::Malformed(format!(
            "request target {target:?} is neither a path, an http:// URI nor CONNECT host:port"
        )));
    };
    Ok(Some(RequestHead {
        method,
        connect,
        destination,
        head_len,
    }))
}

/// `name[:port]` into a normalized name and a port (`default` when absent;
/// required when `default` is `None`). IP literals are refused.
fn split_host_port(s: &str, default: Option<u16>) -> Result<(String, u16), HttpError> {
    let bad = || HttpError::BadHost(s.to_string());
    if s.starts_with('[') {
        return Err(bad());
    }
    let (name, port) = match s.rsplit_once(':') {
        Some((n, p)) => (
            n,
            p.parse::<u16>().ok().filter(|p| *p != 0).ok_or_else(bad)?,
        ),
        None => (s, default.ok_or_else(bad)?),
    };
    if name.parse::<std::net::IpAddr>().is_ok() {
        return Err(bad());
    }
    let name = normalize_name(name).map_err(|_| bad())?;
    if name.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        return Err(bad());
    }
    Ok((name, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<Option<RequestHead>, HttpError> {
        parse_request_head(s.as_bytes(), 80)
    }

    #[test]
    fn the_host_header_names_the_destination() {
        let r = parse("GET /x HTTP/1.1\r\nHost: Example.COM\r\nAccept: */*\r\n\r\nbody")
            .unwrap()
            .unwrap();
        assert_eq!(
            r.destination,
            Destination {
                host: "example.com".into(),
                port: 80
            }
        );
        assert_eq!(
            r.head_len,
            "GET /x HTTP/1.1\r\nHost: Example.COM\r\nAccept: */*\r\n\r\n".len()
        );
        let r = parse("GET / HTTP/1.1\r\nhost: api.example.com:8080\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(r.destination.port, 8080);
    }

    #[test]
    fn explicit_proxy_forms_are_understood() {
        let r = parse("GET http://example.com:81/a?b HTTP/1.1\r\nHost: example.com:81\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(
            r.destination,
            Destination {
                host: "example.com".into(),
                port: 81
            }
        );
        let r = parse("CONNECT github.com:443 HTTP/1.1\r\nHost: github.com:443\r\n\r\n")
            .unwrap()
            .unwrap();
        assert!(r.connect);
        assert_eq!(
            r.destination,
            Destination {
                host: "github.com".into(),
                port: 443
            }
        );
    }

    #[test]
    fn ambiguous_or_nameless_requests_are_refused() {
        for bad in [
            "GET / HTTP/1.1\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: a.com\r\nHost: b.com\r\n\r\n",
            "GET http://a.com/ HTTP/1.1\r\nHost: b.com\r\n\r\n",
            "GET http://user@a.com/ HTTP/1.1\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: [::1]:80\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: 2130706433\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: a.com:0\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: a.com:99999\r\n\r\n",
            "CONNECT a.com HTTP/1.1\r\n\r\n",
            "CONNECT a.com:443 HTTP/1.1\r\nHost: b.com:443\r\n\r\n",
            "GET ftp://a.com/ HTTP/1.1\r\nHost: a.com\r\n\r\n",
            "\x16\x03\x01\x00\x05hello",
        ] {
            assert!(
                parse(bad).is_err(),
                "{bad:?} was accepted: {:?}",
                parse(bad)
            );
        }
    }

    #[test]
    fn truncated_heads_ask_for_more_and_oversized_ones_are_refused() {
        let full = "GET / HTTP/1.1\r\nHost: example.com\r\n\r\n";
        for cut in 0..full.len() {
            assert_eq!(parse(&full[..cut]), Ok(None), "cut at {cut}");
        }
        let huge = format!("GET / HTTP/1.1\r\nX: {}\r\n", "a".repeat(MAX_HEAD));
        assert_eq!(parse(&huge), Err(HttpError::TooLong));
    }
}
