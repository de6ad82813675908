//! Addresses that stand for the host itself whatever the host's network is:
//! the unspecified address (a connection to `0.0.0.0` or `::` lands on the
//! host's loopback), loopback, "this network" (`0.0.0.0/8`), and the IPv6
//! forms that carry one of them inside (IPv4-mapped, IPv4-compatible, the
//! NAT64 well-known prefix, 6to4).
//!
//! This module only classifies: no rule but `--allow-host-port` (and an
//! explicit `--add-host` pin to loopback, which names the host on purpose)
//! may lead to these addresses, and `--allow-cidr` may not even name a range
//! that covers one. The host's own non-loopback addresses depend on the host
//! and change while it runs; the egress proxy asks the kernel about those
//! when it connects.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The IPv4 address an IPv6 address carries, if it is one of the forms
/// that reach an IPv4 destination: mapped (`::ffff:a.b.c.d`), translated
/// (SIIT, `::ffff:0:a.b.c.d`), compatible (`::a.b.c.d`), NAT64 with the
/// well-known prefix (`64:ff9b::a.b.c.d`) or the local-use one as a /96
/// (`64:ff9b:1::a.b.c.d`), 6to4 (`2002:aabb:ccdd::/48`), or Teredo's
/// client (`2001:0:SERVER:FLAGS:PORT:CLIENT`, its address and port each
/// bit inverted). A translator or relay on the host's path would deliver
/// to that IPv4 address, so it is judged as that address. (Teredo's server
/// address is [`teredo_server`]'s.)
pub fn embedded_ipv4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = ip.segments();
    let from =
        |hi: u16, lo: u16| Ipv4Addr::new((hi >> 8) as u8, hi as u8, (lo >> 8) as u8, lo as u8);
    if let Some(v4) = ip.to_ipv4_mapped() {
        Some(v4)
    } else if s[..6] == [0, 0, 0, 0, 0, 0]
        || s[..6] == [0, 0, 0, 0, 0xffff, 0]
        || (s[0] == 0x64 && s[1] == 0xff9b && s[2..6] == [0, 0, 0, 0])
        || (s[0] == 0x64 && s[1] == 0xff9b && s[2..6] == [1, 0, 0, 0])
    {
        Some(from(s[6], s[7]))
    } else if s[0] == 0x2002 {
        Some(from(s[1], s[2]))
    } else if s[0] == 0x2001 && s[1] == 0 {
        Some(from(!s[6], !s[7]))
    } else {
        None
    }
}

/// The Teredo server's IPv4 address a Teredo address (`2001::/32`)
/// carries in its second 32 bits.
pub fn teredo_server(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = ip.segments();
    (s[0] == 0x2001 && s[1] == 0)
        .then(|| Ipv4Addr::new((s[2] >> 8) as u8, s[2] as u8, (s[3] >> 8) as u8, s[3] as u8))
}

/// Why `ip` always stands for the host itself, if it does: the unspecified
/// address, loopback or `0.0.0.0/8`, written plainly or inside an IPv6 form
/// that carries an IPv4 address.
pub fn host_itself(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(a) if a.is_loopback() => Some("the host's loopback"),
        IpAddr::V4(a) if a.octets()[0] == 0 => {
            Some("the unspecified address (0.0.0.0/8 lands on the host itself)")
        }
        IpAddr::V4(_) => None,
        IpAddr::V6(a) if a.is_loopback() => Some("the host's loopback"),
        IpAddr::V6(a) if a.is_unspecified() => {
            Some("the unspecified address (:: lands on the host itself)")
        }
        IpAddr::V6(a) => embedded_ipv4(a).and_then(|v4| host_itself(IpAddr::V4(v4))),
    }
}

/// Ranges that hold addresses of [`host_itself`], each with what it is;
/// a range that overlaps one of them would open the host.
pub const HOST_RANGES: &[(&str, &str)] = &[
    ("0.0.0.0/8", "the unspecified address"),
    ("127.0.0.0/8", "the host's loopback"),
    (
        "::/104",
        "the unspecified address, loopback and IPv4-compatible forms of 0.0.0.0/8",
    ),
    ("::127.0.0.0/104", "IPv4-compatible loopback"),
    ("::ffff:0.0.0.0/104", "IPv4-mapped 0.0.0.0/8"),
    ("::ffff:127.0.0.0/104", "IPv4-mapped loopback"),
    ("::ffff:0:0.0.0.0/104", "IPv4-translated (SIIT) 0.0.0.0/8"),
    ("::ffff:0:127.0.0.0/104", "IPv4-translated (SIIT) loopback"),
    ("64:ff9b::/104", "NAT64 0.0.0.0/8"),
    ("64:ff9b::7f00:0/104", "NAT64 loopback"),
    ("64:ff9b:1::/104", "local-use NAT64 0.0.0.0/8"),
    ("64:ff9b:1::7f00:0/104", "local-use NAT64 loopback"),
    (
        "2001::/32",
        "Teredo, whose client address may be any (loopback included)",
    ),
    ("2002::/24", "6to4 0.0.0.0/8"),
    ("2002:7f00::/24", "6to4 loopback"),
];

/// The first range of [`HOST_RANGES`] that `net` overlaps, with what it is.
pub fn covers_host(net: &ipnet::IpNet) -> Option<(ipnet::IpNet, &'static str)> {
    HOST_RANGES.iter().find_map(|(range, what)| {
        let range: ipnet::IpNet = range.parse().ok()?;
        let overlaps = net.contains(&range.network()) || range.contains(&net.network());
        overlaps.then_some((range, *what))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn the_host_is_found_in_every_spelling() {
        for host in [
            "0.0.0.0",
            "0.1.2.3",
            "127.0.0.1",
            "127.9.9.9",
            "::",
            "::1",
            "::ffff:0.0.0.0",
            "::ffff:127.0.0.1",
            "::127.0.0.1",
            "::0.0.0.1",
            "64:ff9b::127.0.0.1",
            "64:ff9b::0.0.0.0",
            "2002:7f00:1::",
            "2002:0000:0000::1",
            "::ffff:0:7f00:1",
            "::ffff:0:0.0.0.0",
            "64:ff9b:1::7f00:1",
            // Teredo with the client 127.0.0.1 (inverted: 80ff:fffe).
            "2001:0:5db8:d822::80ff:fffe",
        ] {
            assert!(host_itself(ip(host)).is_some(), "{host}");
        }
        for other in [
            "10.1.2.3",
            "93.184.216.34",
            "::ffff:10.1.2.3",
            "2002:5db8:d822::",
            "fd00::1",
            "2606:4700::1111",
            "::ffff:0:a01:203",
            "2001:0:5db8:d822::a2fe:fdfc",
        ] {
            assert_eq!(host_itself(ip(other)), None, "{other}");
        }
    }

    #[test]
    fn a_range_that_reaches_the_host_is_found() {
        for net in [
            "0.0.0.0/0",
            "::/0",
            "127.0.0.0/8",
            "127.1.0.0/16",
            "0.0.0.0/1",
            "::ffff:0:0/96",
            "::/96",
            "64:ff9b::/96",
            "2002::/16",
            "::1/128",
            "::ffff:0:0:0/96",
            "64:ff9b:1::/48",
            "2001::/32",
        ] {
            let n: ipnet::IpNet = net.parse().unwrap();
            assert!(covers_host(&n).is_some(), "{net}");
        }
        for net in [
            "10.0.0.0/8",
            "128.0.0.0/1",
            "fd00::/8",
            "::ffff:10.0.0.0/104",
            "2002:0a00::/24",
        ] {
            let n: ipnet::IpNet = net.parse().unwrap();
            assert_eq!(covers_host(&n), None, "{net}");
        }
    }
}
