//! Which resolved addresses are public: the ones a name only a caller
//! allowed may lead to, and the ones no owner's range is needed for.
//!
//! This module owns the judgement as two tables a reviewer can read
//! against IANA's special-purpose registries: an IPv4 address is public
//! unless it is in one of [`SPECIAL_V4`]'s ranges; an IPv6 address only if
//! it is global unicast (`2000::/3`) outside [`SPECIAL_V6`]'s ranges, and a
//! form that carries an IPv4 address (mapped, translated, compatible,
//! NAT64, 6to4, Teredo: `warden_policy::addresses::embedded_ipv4`) only if
//! the address it carries is. An allowlist, so that a form no table names
//! is not public. It never decides a connection (`relay` does, with the
//! owner's ranges and the host's own addresses).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use warden_policy::addresses::{embedded_ipv4, teredo_server};

/// IPv4 ranges that are not public upstreams, and why.
const SPECIAL_V4: &[(Ipv4Addr, u8, &str)] = &[
    (
        Ipv4Addr::new(0, 0, 0, 0),
        8,
        "this network: lands on the host",
    ),
    (Ipv4Addr::new(10, 0, 0, 0), 8, "private"),
    (
        Ipv4Addr::new(100, 64, 0, 0),
        10,
        "shared address space (CGNAT)",
    ),
    (Ipv4Addr::new(127, 0, 0, 0), 8, "loopback"),
    (
        Ipv4Addr::new(169, 254, 0, 0),
        16,
        "link-local: cloud metadata services",
    ),
    (Ipv4Addr::new(172, 16, 0, 0), 12, "private"),
    (Ipv4Addr::new(192, 0, 0, 0), 24, "IETF protocol assignments"),
    (Ipv4Addr::new(192, 0, 2, 0), 24, "documentation"),
    (
        Ipv4Addr::new(192, 88, 99, 0),
        24,
        "6to4 relay anycast (deprecated)",
    ),
    (Ipv4Addr::new(192, 168, 0, 0), 16, "private"),
    (Ipv4Addr::new(198, 18, 0, 0), 15, "benchmarking"),
    (Ipv4Addr::new(198, 51, 100, 0), 24, "documentation"),
    (Ipv4Addr::new(203, 0, 113, 0), 24, "documentation"),
    (Ipv4Addr::new(224, 0, 0, 0), 4, "multicast"),
    (
        Ipv4Addr::new(240, 0, 0, 0),
        4,
        "reserved, and the broadcast address",
    ),
    (
        Ipv4Addr::new(168, 63, 129, 16),
        32,
        "Azure's WireServer, a metadata-like host service",
    ),
];

/// Ranges inside global unicast (`2000::/3`) that IANA's IPv6
/// special-purpose registry sets apart, and why none is a public
/// upstream. (Everything outside `2000::/3` is not public: loopback,
/// unspecified, discard `100::/64`, unique local, link-local, multicast,
/// the local-use NAT64 prefix `64:ff9b:1::/48` whatever it carries.)
const SPECIAL_V6: &[(Ipv6Addr, u8, &str)] = &[
    (
        Ipv6Addr::new(0x2001, 0, 0, 0, 0, 0, 0, 0),
        23,
        "IETF protocol assignments: benchmarking, ORCHID, AMT, anycast services (Teredo's own addresses are judged by what they carry)",
    ),
    (Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0), 32, "documentation"),
    (
        Ipv6Addr::new(0x2620, 0x4f, 0x8000, 0, 0, 0, 0, 0),
        48,
        "AS112 direct delegation",
    ),
    (Ipv6Addr::new(0x3fff, 0, 0, 0, 0, 0, 0, 0), 20, "documentation"),
];

/// Globally routable: see the module's tables.
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(a) => !SPECIAL_V4.iter().any(|(net, len, _)| in_v4(a, *net, *len)),
        IpAddr::V6(a) => {
            // The local-use NAT64 prefix: a network's own translator, with
            // the IPv4 address wherever its prefix length puts it.
            if in_v6(a, Ipv6Addr::new(0x64, 0xff9b, 1, 0, 0, 0, 0, 0), 48) {
                return false;
            }
            if let Some(server) = teredo_server(a) {
                // Both ends of a Teredo address: its server and its client.
                return embedded_ipv4(a).is_some_and(|c| is_public(IpAddr::V4(c)))
                    && is_public(IpAddr::V4(server));
            }
            if let Some(v4) = embedded_ipv4(a) {
                return is_public(IpAddr::V4(v4));
            }
            in_v6(a, Ipv6Addr::new(0x2000, 0, 0, 0, 0, 0, 0, 0), 3)
                && !SPECIAL_V6.iter().any(|(net, len, _)| in_v6(a, *net, *len))
        }
    }
}

fn in_v4(a: Ipv4Addr, net: Ipv4Addr, len: u8) -> bool {
    let mask = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
    u32::from(a) & mask == u32::from(net) & mask
}

fn in_v6(a: Ipv6Addr, net: Ipv6Addr, len: u8) -> bool {
    let mask = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
    u128::from(a) & mask == u128::from(net) & mask
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every row of IANA's two special-purpose registries (and the IPv6
    /// forms that carry an IPv4 address), with an address inside it.
    const NOT_PUBLIC: &[(&str, &str)] = &[
        ("0.1.2.3", "this network"),
        ("10.1.2.3", "private"),
        ("100.64.0.1", "CGNAT"),
        ("127.0.0.1", "loopback"),
        ("169.254.169.254", "link-local metadata"),
        ("172.16.0.1", "private"),
        ("192.0.0.9", "IETF protocol assignments"),
        ("192.0.2.1", "documentation"),
        ("192.88.99.1", "6to4 relay anycast"),
        ("192.168.1.1", "private"),
        ("198.18.0.1", "benchmarking"),
        ("198.51.100.1", "documentation"),
        ("203.0.113.1", "documentation"),
        ("224.0.0.1", "multicast"),
        ("240.0.0.1", "reserved"),
        ("255.255.255.255", "broadcast"),
        ("168.63.129.16", "Azure WireServer"),
        ("::", "unspecified"),
        ("::1", "loopback"),
        ("::ffff:127.0.0.1", "IPv4-mapped loopback"),
        ("::ffff:10.0.0.1", "IPv4-mapped private"),
        ("::ffff:0:7f00:1", "IPv4-translated (SIIT) loopback"),
        ("::ffff:0:a9fe:a9fe", "IPv4-translated metadata"),
        ("::127.0.0.1", "IPv4-compatible loopback"),
        ("64:ff9b::7f00:1", "NAT64 loopback"),
        ("64:ff9b::a00:1", "NAT64 private"),
        (
            "64:ff9b:1::5db8:d822",
            "local-use NAT64, even carrying a public address",
        ),
        (
            "64:ff9b:1:7f00:1::",
            "local-use NAT64 as a /48 carrying loopback",
        ),
        ("100::1", "discard"),
        ("100:0:0:1::1", "dummy prefix"),
        ("2001::1", "Teredo with client 255.255.255.254"),
        ("2001:0:5db8:d822::80ff:fffe", "Teredo with client loopback"),
        ("2001:0:a00:1::a2fe:fdfc", "Teredo with a private server"),
        ("2001:1::1", "PCP anycast"),
        ("2001:2::1", "benchmarking"),
        ("2001:3::1", "AMT"),
        ("2001:4:112::1", "AS112"),
        ("2001:10::1", "ORCHID"),
        ("2001:20::1", "ORCHIDv2"),
        ("2001:30::1", "DRIP"),
        ("2001:db8::1", "documentation"),
        ("2002:7f00:1::", "6to4 loopback"),
        ("2002:a9fe:a9fe::", "6to4 metadata"),
        ("2620:4f:8000::1", "AS112 direct delegation"),
        ("3fff::1", "documentation"),
        ("5f00::1", "segment routing SIDs"),
        ("fc00::1", "unique local"),
        ("fd00::1", "unique local"),
        ("fe80::1", "link-local"),
        ("fec0::1", "site-local"),
        ("ff02::1", "multicast"),
        ("4000::1", "outside global unicast"),
    ];

    const PUBLIC: &[&str] = &[
        "93.184.216.34",
        "1.1.1.1",
        "8.8.8.8",
        "2606:4700::1111",
        "2a00:1450:4001::1",
        "::ffff:93.184.216.34",
        "64:ff9b::5db8:d822",
        "2002:5db8:d822::1",
        // Teredo: server 93.184.216.34, client 93.1.2.3.
        "2001:0:5db8:d822::a2fe:fdfc",
    ];

    #[test]
    fn only_global_addresses_are_public_in_every_spelling() {
        for (ip, what) in NOT_PUBLIC {
            assert!(!is_public(ip.parse().unwrap()), "{ip} ({what})");
        }
        for ip in PUBLIC {
            assert!(is_public(ip.parse().unwrap()), "{ip}");
        }
    }
}
