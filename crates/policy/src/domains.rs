//! Allowed destinations, as people write them: `example.com` (exactly that
//! name), `.example.com` or `*.example.com` (the name and every subdomain),
//! each optionally with a port (`example.com:22`). Parsing and validation
//! only; the egress crate builds the fast matcher from these rules.

use serde::{Deserialize, Serialize};

/// Ports allowed for a rule that names none.
pub const DEFAULT_PORTS: &[u16] = &[443, 80];

/// One allowlist entry, normalized.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DomainRule {
    /// Lower case, no trailing dot, no leading `.` or `*.`.
    pub name: String,
    /// The rule also covers every subdomain of `name`.
    pub subdomains: bool,
    /// `None`: the default ports (443 and 80).
    pub port: Option<u16>,
    /// The entry as written, for messages and decision logs.
    pub source: String,
    /// Given by someone other than the owner (a token holder, an E2B
    /// client, a pod's annotation, an answer over the API): the name is
    /// allowed, but reaches public addresses only. The owner's pinned
    /// addresses (`egress.hosts`) and local ranges (`egress.allow_cidrs`)
    /// serve only destinations an owner's rule allows. A rule stored
    /// without it (every spec made before it existed) is the owner's.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub caller: bool,
}

/// Why an allowlist entry was refused. The message names the entry, not
/// the option it was given to (`--allow-domain`, `egress.domains`, a
/// secret's hosts): the caller says that.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DomainError {
    #[error("{0:?} is empty")]
    Empty(String),
    #[error("{entry:?}: {why}; write a host name such as example.com, .example.com (with subdomains) or example.com:22")]
    Invalid { entry: String, why: &'static str },
    #[error("{entry:?}: port {port:?} is not a number from 1 to 65535")]
    BadPort { entry: String, port: String },
}

impl DomainError {
    /// The entry as written.
    pub fn entry(&self) -> &str {
        match self {
            DomainError::Empty(e)
            | DomainError::Invalid { entry: e, .. }
            | DomainError::BadPort { entry: e, .. } => e,
        }
    }
}

impl DomainRule {
    /// Parse one entry.
    pub fn parse(entry: &str) -> Result<DomainRule, DomainError> {
        let invalid = |why| DomainError::Invalid {
            entry: entry.to_string(),
            why,
        };
        let trimmed = entry.trim();
        if trimmed.is_empty() {
            return Err(DomainError::Empty(entry.to_string()));
        }
        if trimmed.contains("://") || trimmed.contains('/') {
            return Err(invalid("it looks like a URL, not a host name"));
        }
        let (host, port) = match trimmed.rsplit_once(':') {
            Some((h, p)) => {
                let port: u16 =
                    p.parse()
                        .ok()
                        .filter(|p| *p != 0)
                        .ok_or_else(|| DomainError::BadPort {
                            entry: entry.to_string(),
                            port: p.to_string(),
                        })?;
                (h, Some(port))
            }
            None => (trimmed, None),
        };
        let (host, subdomains) = if let Some(rest) = host.strip_prefix("*.") {
            (rest, true)
        } else if let Some(rest) = host.strip_prefix('.') {
            (rest, true)
        } else {
            (host, false)
        };
        let name = normalize_name(host).map_err(invalid)?;
        if name.parse::<std::net::Ipv4Addr>().is_ok()
            || name.bytes().all(|b| b.is_ascii_digit() || b == b'.')
        {
            return Err(invalid(
                "it is an IP address; decisions are made on names (use `egress.hosts NAME=IP` to give a name an address)",
            ));
        }
        if !name.contains('.') && subdomains {
            return Err(invalid(
                "a wildcard over a whole top-level domain is too wide",
            ));
        }
        Ok(DomainRule {
            name,
            subdomains,
            port,
            source: trimmed.to_string(),
            caller: false,
        })
    }

    /// Do both rules allow the same destinations (however each was
    /// written, whoever gave it)?
    pub fn same_destinations(&self, other: &DomainRule) -> bool {
        self.name == other.name && self.subdomains == other.subdomains && self.port == other.port
    }

    /// Does this rule allow `port`?
    pub fn allows_port(&self, port: u16) -> bool {
        match self.port {
            Some(p) => p == port,
            None => DEFAULT_PORTS.contains(&port),
        }
    }
}

/// Normalize a host name: lower case, no trailing dot, labels of letters,
/// digits, `-` and `_` of 1 to 63 bytes, 253 bytes in all.
pub fn normalize_name(name: &str) -> Result<String, &'static str> {
    let name = name.strip_suffix('.').unwrap_or(name);
    if name.is_empty() {
        return Err("the name is empty");
    }
    if name.len() > 253 {
        return Err("the name is longer than 253 bytes");
    }
    if name.contains('*') {
        return Err("a wildcard may only stand at the start, as *.example.com");
    }
    let lower = name.to_ascii_lowercase();
    for label in lower.split('.') {
        if label.is_empty() {
            return Err("the name has an empty label (two dots in a row)");
        }
        if label.len() > 63 {
            return Err("a label is longer than 63 bytes");
        }
        if !label
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err("the name has a character other than letters, digits, '-', '_' and '.' (write internationalized names in their xn-- form)");
        }
        if label.starts_with('-') || label.ends_with('-') {
            return Err("a label starts or ends with '-'");
        }
    }
    Ok(lower)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_wildcard_and_port_forms_parse() {
        let r = DomainRule::parse("Example.COM.").unwrap();
        assert_eq!(
            (r.name.as_str(), r.subdomains, r.port),
            ("example.com", false, None)
        );
        let r = DomainRule::parse(".example.com").unwrap();
        assert!(r.subdomains);
        let r = DomainRule::parse("*.example.com:8443").unwrap();
        assert_eq!(
            (r.name.as_str(), r.subdomains, r.port),
            ("example.com", true, Some(8443))
        );
        assert!(r.allows_port(8443) && !r.allows_port(443));
        let d = DomainRule::parse("git.example.com").unwrap();
        assert!(d.allows_port(443) && d.allows_port(80) && !d.allows_port(22));
    }

    #[test]
    fn malformed_entries_are_refused_with_a_reason() {
        for bad in [
            "",
            "https://example.com",
            "example.com/path",
            "exa mple.com",
            "a..b",
            "*.com",
            "ex*ample.com",
            "example.com:0",
            "example.com:99999",
            "example.com:ssh",
            "10.0.0.1",
            "-bad.example.com",
            ".",
            "*.",
        ] {
            assert!(DomainRule::parse(bad).is_err(), "{bad:?} was accepted");
        }
        let long = format!("{}.com", "a".repeat(64));
        assert!(DomainRule::parse(&long).is_err());
    }
}
