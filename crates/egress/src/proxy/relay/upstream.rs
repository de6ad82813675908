//! Connecting an allowed connection upstream: the name resolved on the
//! host (or the owner's pinned address, or the host's loopback for a host
//! port the owner opened), the addresses it may lead to for this
//! connection judged (public ones, the owner's ranges for the owner's
//! destinations only, never the host's own), and the connect under its
//! timeout. A refusal by address says why in words and as a cause. It
//! never decides whether the name may be reached at all (`decide` does)
//! and never reads or writes a byte of the connection.

use super::super::Shared;
use super::Unreached;
use crate::decision::{Cause, Reason};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;
use tokio::net::TcpStream;
use warden_policy::HOST_ALIAS;

/// How long connecting upstream may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Resolve `name` on the host side and connect. For a destination the
/// owner allowed (`owner`), the owner's pinned addresses are used as given
/// and resolved ones may be in the owner's local ranges; for one only a
/// caller allowed, the name is resolved as any other and only public
/// addresses are used: the owner's reach into local networks is theirs
/// alone. Never the host's own addresses (no DNS rebinding onto the host's
/// own or private services).
pub(super) async fn connect_upstream(
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
    (super::super::public::is_public(ip)
        || cidrs
            .iter()
            .any(|c| c.contains(&ip) || c.contains(&ip.to_canonical())))
        && !host(ip)
        && !embedded.is_some_and(host)
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
            super::super::super::decide::owners(&m, &hit, name, port)
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
}
