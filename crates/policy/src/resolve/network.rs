//! The network's section: loopback only, or egress through the proxy with
//! its rules; and who gave each allowlist entry, read from the trust of
//! each value in the layer, here and nowhere else.

use crate::addresses;
use crate::compose::Layer;
use crate::domains::{normalize_name, DomainRule};
use crate::error::{Problem, ResolveError};
use crate::fields::Field;
use crate::requests::{RequestAction, RequestRule};
use crate::secrets::{SecretRule, SecretSpec};
use crate::trust::Trust;
use crate::{EgressSpec, NetworkSpec, PortMapping, DEFAULT_EGRESS_IDLE_TIMEOUT, HOST_ALIAS};

use super::Placement;

/// The allowlist by whose it is: the owner's entries may use the owner's
/// pins and ranges, a caller's (a token holder's request, an E2B client's
/// `allowOut`, a pod's annotation) reach public addresses only
/// ([`DomainRule::caller`]); an entry the owner gave as well is the
/// owner's.
struct Whose {
    /// `egress.domains` entries the owner gave, then the names the owner
    /// answered "always" before.
    owner_domains: Vec<String>,
    /// `egress.domains` entries a caller gave.
    caller_domains: Vec<String>,
    /// Names of secrets a caller asked for (a pod's secret annotation,
    /// within the node's grant): their hosts are allowed as a caller's
    /// entries, never with the owner's pins or ranges.
    caller_secrets: Vec<String>,
}

impl Whose {
    fn of(layer: &Layer, placement: &Placement) -> Whose {
        let mut owner_domains = layer.texts_of(Field::AllowDomain, |t| t == Trust::Owner);
        owner_domains.extend(placement.granted_domains.iter().cloned());
        Whose {
            owner_domains,
            caller_domains: layer.texts_of(Field::AllowDomain, |t| t == Trust::Caller),
            caller_secrets: layer
                .map(Field::Secret)
                .iter()
                .filter(|(_, s)| s.trust == Trust::Caller)
                .map(|(name, _)| name.clone())
                .collect(),
        }
    }
}

/// Loopback only, or egress through the proxy with its rules (each
/// entry's own mistake said before how the entries fit together).
pub(super) fn network(
    layer: &Layer,
    placement: &Placement,
    secrets: &[SecretSpec],
    secret_rules: Vec<SecretRule>,
    upstream_ca: Vec<std::path::PathBuf>,
) -> Result<NetworkSpec, ResolveError> {
    let whose = Whose::of(layer, placement);
    let add_hosts = layer.pairs(Field::AddHost);
    let allow_cidr = layer.texts(Field::AllowCidr);
    let allow_host_ports = layer.ports(Field::AllowHostPort);
    let (ask, learn) = (layer.on(Field::Ask), layer.on(Field::EgressLearn));
    let allow_http = layer.on(Field::AllowHttp);
    let egress_quota = layer.bytes(Field::EgressQuota);
    // Each entry's own mistake is said before any question of how
    // the entries fit together (an invalid range, then "needs an
    // --allow-domain").
    let hosts = add_hosts
        .iter()
        .map(|h| parse_add_host(h))
        .collect::<Result<Vec<_>, _>>()?;
    let cidrs = allow_cidr
        .iter()
        .map(|c| {
            let c = c.trim();
            c.parse::<ipnet::IpNet>()
                .or_else(|_| c.parse::<std::net::IpAddr>().map(ipnet::IpNet::from))
                .map(|n| n.trunc())
                .map_err(|_| Field::AllowCidr.invalid(Problem::BadCidr(c.to_string())))
                .and_then(|n| match addresses::covers_host(&n) {
                    // Refused, not narrowed: the person asked for
                    // something warden will never give.
                    Some((range, what)) => Err(Field::AllowCidr.invalid(Problem::CidrCoversHost {
                        cidr: c.to_string(),
                        range: range.to_string(),
                        what,
                    })),
                    None => Ok(n),
                })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let requests = request_rules(layer)?;
    let secret_plain_ports = secret_plain_ports(layer)?;
    if learn && !secrets.is_empty() {
        // Learning allows what no rule names: a secret's placeholder
        // would go wherever the sandbox sends it.
        return Err(Field::EgressLearn.invalid(Problem::LearnWithSecrets));
    }
    if learn && ask {
        return Err(Field::EgressLearn.invalid(Problem::LearnWithAsk));
    }
    let network = if whose.owner_domains.is_empty()
        && whose.caller_domains.is_empty()
        && allow_host_ports.is_empty()
        && !ask
        && !learn
        && secrets.is_empty()
    {
        // Options that only refine egress: the first one given is named.
        let given = [
            (Field::AllowHttp, allow_http),
            (Field::AddHost, !add_hosts.is_empty()),
            (Field::AllowCidr, !allow_cidr.is_empty()),
            (Field::EgressQuota, egress_quota.is_some()),
            (Field::UpstreamCa, !upstream_ca.is_empty()),
            (Field::AllowRequest, !requests.is_empty()),
            (Field::SecretPlainPort, !secret_plain_ports.is_empty()),
        ];
        if let Some((field, _)) = given.iter().find(|(_, given)| *given) {
            return Err(field.invalid(Problem::EgressWithoutDomains));
        }
        NetworkSpec::LoopbackOnly
    } else {
        let mut domains = parse_domains(&whose.owner_domains).map_err(|(_, e)| e)?;
        for mut rule in parse_domains(&whose.caller_domains).map_err(|(_, e)| e)? {
            if !domains.iter().any(|d| d.same_destinations(&rule)) {
                rule.caller = true;
                domains.push(rule);
            }
        }
        // A secret's hosts are allowed destinations: the value
        // is useless if its own hosts cannot be reached.
        for s in secrets {
            for h in &s.hosts {
                let covered = domains
                    .iter()
                    .any(|d| d.name == h.name && d.subdomains == h.subdomains && d.port == h.port);
                if !covered {
                    let mut rule = h.clone();
                    rule.source = format!("`secrets {}@{}`", s.name, h.source);
                    rule.caller = whose.caller_secrets.contains(&s.name);
                    domains.push(rule);
                }
            }
        }
        let mut host_ports = Vec::new();
        for &port in &allow_host_ports {
            if port == 0 {
                return Err(Field::AllowHostPort.invalid(Problem::BadHostPort));
            }
            if !host_ports.contains(&port) {
                host_ports.push(port);
                domains.push(DomainRule {
                    name: HOST_ALIAS.to_string(),
                    subdomains: false,
                    port: Some(port),
                    source: format!("`egress.host_ports {port}`"),
                    caller: false,
                });
            }
        }
        NetworkSpec::Egress(EgressSpec {
            domains,
            allow_http,
            hosts,
            cidrs,
            host_ports,
            ask,
            log: layer.on(Field::NetLog),
            quota: egress_quota,
            idle_timeout: layer
                .duration(Field::EgressIdleTimeout)
                .unwrap_or(DEFAULT_EGRESS_IDLE_TIMEOUT),
            secrets: secrets.to_vec(),
            secret_rules,
            upstream_ca,
            learn,
            requests,
            secret_plain_ports,
        })
    };
    Ok(network)
}

/// The owner's names with a port that may carry what is not TLS though a
/// secret's host (`egress.secret_plain_ports`): each names its port.
fn secret_plain_ports(layer: &Layer) -> Result<Vec<DomainRule>, ResolveError> {
    let field = Field::SecretPlainPort;
    let mut out: Vec<DomainRule> = Vec::new();
    for entry in layer.texts(field) {
        let rule = DomainRule::parse(&entry).map_err(|e| field.invalid(Problem::Domain(e)))?;
        if rule.port.is_none() {
            return Err(field.invalid(Problem::PlainPortWithoutPort(entry)));
        }
        if !out.iter().any(|r| r.same_destinations(&rule)) {
            out.push(rule);
        }
    }
    Ok(out)
}

/// The request rules, allow, deny and ask, each entry read and checked.
fn request_rules(layer: &Layer) -> Result<Vec<RequestRule>, ResolveError> {
    let mut out = Vec::new();
    for (field, action) in [
        (Field::AllowRequest, RequestAction::Allow),
        (Field::DenyRequest, RequestAction::Deny),
        (Field::AskRequest, RequestAction::Ask),
    ] {
        for entry in layer.texts(field) {
            let rule = RequestRule::parse(action, &entry)
                .map_err(|e| field.invalid(Problem::BadRequestRule(e)))?;
            if !out.contains(&rule) {
                out.push(rule);
            }
        }
    }
    Ok(out)
}

/// `NAME=IP`, or `NAME:IP` as `docker run --add-host` writes it.
fn parse_add_host(entry: &str) -> Result<(String, std::net::IpAddr), ResolveError> {
    let bad = || Field::AddHost.invalid(Problem::BadAddHost(entry.to_string()));
    let (name, ip) = entry
        .split_once('=')
        .or_else(|| entry.split_once(':'))
        .ok_or_else(bad)?;
    let name = normalize_name(name).map_err(|_| bad())?;
    let ip = ip.trim();
    let ip = ip
        .strip_prefix('[')
        .and_then(|i| i.strip_suffix(']'))
        .unwrap_or(ip);
    let ip: std::net::IpAddr = ip.parse().map_err(|_| bad())?;
    // Loopback written out names the host on purpose; the unspecified
    // address (and 0.0.0.0/8, and their IPv6 forms) reaches it unsaid.
    if addresses::host_itself(ip).is_some() && !is_loopback_form(ip) {
        return Err(Field::AddHost.invalid(Problem::AddHostUnspecified(entry.to_string())));
    }
    Ok((name, ip))
}

/// Loopback in any spelling [`addresses::host_itself`] knows.
fn is_loopback_form(ip: std::net::IpAddr) -> bool {
    match ip {
        std::net::IpAddr::V4(a) => a.is_loopback(),
        std::net::IpAddr::V6(a) => {
            a.is_loopback() || addresses::embedded_ipv4(a).is_some_and(|v4| v4.is_loopback())
        }
    }
}

pub(super) fn parse_publish(entries: &[String]) -> Result<Vec<PortMapping>, ResolveError> {
    let mut out: Vec<PortMapping> = Vec::new();
    for entry in entries {
        let bad = || Field::Publish.invalid(Problem::BadPublish(entry.clone()));
        let port = |p: &str| p.trim().parse::<u16>().ok().filter(|p| *p != 0);
        let (host_port, sandbox_port) = match entry.split_once(':') {
            Some((h, s)) => (port(h).ok_or_else(bad)?, port(s).ok_or_else(bad)?),
            None => {
                let p = port(entry).ok_or_else(bad)?;
                (p, p)
            }
        };
        if out.iter().any(|m| m.host_port == host_port) {
            return Err(Field::Publish.invalid(Problem::DuplicatePublish(host_port)));
        }
        out.push(PortMapping {
            host_port,
            sandbox_port,
        });
    }
    Ok(out)
}

/// Allowlist entries read as `--allow-domain` and `egress.domains` read
/// them, wherever they come from (a profile, the command line, a live
/// change through `warden egress` or the API): each must parse, and none
/// may name the host itself (its services have `--allow-host-port`). The
/// error comes with the index of the first entry at fault.
pub fn parse_domains<S: AsRef<str>>(
    entries: &[S],
) -> Result<Vec<DomainRule>, (usize, ResolveError)> {
    let mut out = Vec::with_capacity(entries.len());
    for (i, d) in entries.iter().enumerate() {
        let rule = DomainRule::parse(d.as_ref())
            .map_err(|e| (i, Field::AllowDomain.invalid(Problem::Domain(e))))?;
        // The host's own services have a flag of their own.
        if rule.name == HOST_ALIAS || rule.name == "warden.internal" {
            return Err((
                i,
                Field::AllowDomain.invalid(Problem::HostAliasAsDomain(rule.source)),
            ));
        }
        out.push(rule);
    }
    Ok(out)
}
