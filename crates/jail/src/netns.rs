//! The sandbox's network namespace, wired from inside: run by the sandbox's
//! init, in its own network namespace (where it holds CAP_NET_ADMIN of its
//! user namespace), before it drops its privileges. This module owns the
//! namespace's loopback, address, route and redirect rule, and opens the
//! sockets the egress proxy will serve; it never decides a connection (the
//! proxy, which the runtime runs, does that on the host, on the sockets it is
//! handed).
//!
//! Every address outside 127.0.0.0/8 is routed through `lo`, so `connect()`
//! reaches netfilter instead of failing with ENETUNREACH; an nftables `nat
//! output` rule then sends every such TCP connection to the proxy's socket
//! on 127.0.0.1, and the kernel keeps the destination the program asked for
//! (`SO_ORIGINAL_DST`, read by the proxy). Nothing else leaves: UDP and ICMP
//! to outside addresses loop on `lo` and are dropped (the namespace does not
//! forward), IPv6 has no route at all. DNS goes to the responder's socket on
//! 127.0.0.1:53, named by the sandbox's `/etc/resolv.conf`.

use nix::errno::Errno;
use rustables::expr::{Immediate, Nat, NatType, Register};
use rustables::{Batch, Chain, ChainType, Hook, HookClass, Protocol, ProtocolFamily, Rule, Table};
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener, UdpSocket};
use std::os::fd::{AsRawFd, OwnedFd};

/// Where the sandbox's TCP connections are redirected, inside its namespace.
pub const PROXY_PORT: u16 = 15001;
/// Where the sandbox's resolver is, inside its namespace.
pub const DNS_ADDR: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 53);

/// Why the sandbox's network could not be wired.
#[derive(Debug, thiserror::Error)]
pub enum NetnsError {
    #[error("cannot bring up the sandbox's loopback interface")]
    Loopback(#[source] Errno),
    #[error("cannot route the sandbox's traffic through its loopback interface")]
    Route(#[source] Errno),
    #[error("cannot install the redirect rule (nftables) in the sandbox's network namespace; the kernel needs nf_tables and nf_nat")]
    Nftables(#[source] rustables::error::QueryError),
    #[error("cannot build the redirect rule")]
    Build(#[source] rustables::error::BuilderError),
    #[error("cannot give the interface {name} the address {addr}")]
    Interface {
        name: String,
        addr: Ipv4Addr,
        #[source]
        source: Errno,
    },
    #[error("cannot route everything through the gateway {0}")]
    Gateway(Ipv4Addr, #[source] Errno),
    #[error("cannot open the proxy's socket {addr} in the sandbox's network namespace")]
    Listen {
        addr: SocketAddrV4,
        #[source]
        source: std::io::Error,
    },
}

/// Wire the namespace and return the proxy's listening TCP socket and the
/// DNS responder's UDP socket, both bound inside it.
pub fn configure_namespace() -> Result<(OwnedFd, OwnedFd), NetnsError> {
    route_everything_through_loopback().map_err(NetnsError::Route)?;
    install_redirect()?;
    let tcp_addr = SocketAddrV4::new(Ipv4Addr::LOCALHOST, PROXY_PORT);
    let tcp = TcpListener::bind(tcp_addr).map_err(|source| NetnsError::Listen {
        addr: tcp_addr,
        source,
    })?;
    let udp = UdpSocket::bind(DNS_ADDR).map_err(|source| NetnsError::Listen {
        addr: DNS_ADDR,
        source,
    })?;
    Ok((OwnedFd::from(tcp), OwnedFd::from(udp)))
}

/// The sandbox's own address, on `lo`: the source of its outgoing
/// connections (without one, they would leave from 0.0.0.0 and replies
/// would find no way back).
pub const SANDBOX_ADDR: Ipv4Addr = Ipv4Addr::new(10, 255, 255, 1);

fn sockaddr(ip: Ipv4Addr) -> libc::sockaddr {
    let sin = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: 0,
        sin_addr: libc::in_addr {
            s_addr: u32::from(ip).to_be(),
        },
        sin_zero: [0; 8],
    };
    // SAFETY: sockaddr_in and sockaddr are both 16 bytes, and the kernel
    // reads an AF_INET sockaddr as a sockaddr_in.
    unsafe { std::mem::transmute::<libc::sockaddr_in, libc::sockaddr>(sin) }
}

/// A datagram socket to configure interfaces through, and an `ifreq`
/// naming `name`.
fn interface_request(name: &[u8]) -> Result<(OwnedFd, libc::ifreq), Errno> {
    use nix::sys::socket::{socket, AddressFamily, SockFlag, SockType};
    let sock = socket(
        AddressFamily::Inet,
        SockType::Datagram,
        SockFlag::SOCK_CLOEXEC,
        None,
    )?;
    // SAFETY: `ifreq` is plain old data; zeroed is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    if name.len() >= req.ifr_name.len() {
        return Err(Errno::ENAMETOOLONG);
    }
    for (dst, src) in req.ifr_name.iter_mut().zip(name) {
        *dst = *src as libc::c_char;
    }
    Ok((sock, req))
}

/// Bring up `lo` in the calling process's network namespace (a new one
/// starts with it down, so even 127.0.0.1 would be unreachable).
pub fn bring_loopback_up() -> Result<(), NetnsError> {
    set_loopback_up().map_err(NetnsError::Loopback)
}

fn set_loopback_up() -> Result<(), Errno> {
    let (sock, mut req) = interface_request(b"lo")?;
    // SAFETY: SIOCGIFFLAGS and SIOCSIFFLAGS read and write one `ifreq`
    // that lives across both calls; the socket is open.
    unsafe {
        Errno::result(libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req))?;
        req.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
        Errno::result(libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFFLAGS, &req))?;
    }
    Ok(())
}

/// `ip addr add ADDR/NETMASK dev NAME; ip link set NAME up`, through the
/// SIOCSIFADDR, SIOCSIFNETMASK and SIOCSIFFLAGS ioctls.
pub fn configure_interface(
    name: &str,
    addr: Ipv4Addr,
    netmask: Ipv4Addr,
) -> Result<(), NetnsError> {
    let set = || -> Result<(), Errno> {
        let (sock, mut req) = interface_request(name.as_bytes())?;
        req.ifr_ifru.ifru_addr = sockaddr(addr);
        // SAFETY: SIOCSIFADDR reads one `ifreq` that lives across the call.
        Errno::result(unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFADDR, &req) })?;
        req.ifr_ifru.ifru_netmask = sockaddr(netmask);
        // SAFETY: SIOCSIFNETMASK reads one `ifreq` that lives across the call.
        Errno::result(unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFNETMASK, &req) })?;
        // SAFETY: SIOCGIFFLAGS and SIOCSIFFLAGS read and write one `ifreq`
        // that lives across both calls; the socket is open.
        unsafe {
            Errno::result(libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req))?;
            req.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
            Errno::result(libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFFLAGS, &req))?;
        }
        Ok(())
    };
    set().map_err(|source| NetnsError::Interface {
        name: name.to_string(),
        addr,
        source,
    })
}

/// `ip route add default via GATEWAY`, through the SIOCADDRT ioctl (the
/// gateway must be on a configured interface's network).
pub fn add_default_route(gateway: Ipv4Addr) -> Result<(), NetnsError> {
    let add = || -> Result<(), Errno> {
        let (sock, _) = interface_request(b"lo")?;
        // SAFETY: `rtentry` is plain old data; zeroed is a valid value.
        let mut rt: libc::rtentry = unsafe { std::mem::zeroed() };
        rt.rt_dst = sockaddr(Ipv4Addr::UNSPECIFIED);
        rt.rt_genmask = sockaddr(Ipv4Addr::UNSPECIFIED);
        rt.rt_gateway = sockaddr(gateway);
        rt.rt_flags = libc::RTF_UP | libc::RTF_GATEWAY;
        // SAFETY: SIOCADDRT reads one `rtentry` that lives across the call;
        // its device pointer is null (the kernel finds the interface).
        Errno::result(unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCADDRT, &rt) }).map(drop)
    };
    add().map_err(|source| NetnsError::Gateway(gateway, source))
}

/// `ip addr add 10.255.255.1/32 dev lo label lo:1`, then `ip route add
/// default dev lo`, through the SIOCSIFADDR, SIOCSIFNETMASK and SIOCADDRT
/// ioctls.
fn route_everything_through_loopback() -> Result<(), Errno> {
    let (sock, mut req) = interface_request(b"lo:1")?;
    req.ifr_ifru.ifru_addr = sockaddr(SANDBOX_ADDR);
    // SAFETY: SIOCSIFADDR reads one `ifreq` that lives across the call.
    Errno::result(unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFADDR, &req) })?;
    req.ifr_ifru.ifru_netmask = sockaddr(Ipv4Addr::BROADCAST);
    // SAFETY: SIOCSIFNETMASK reads one `ifreq` that lives across the call.
    Errno::result(unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFNETMASK, &req) })?;
    let any = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: 0,
        sin_addr: libc::in_addr { s_addr: 0 },
        sin_zero: [0; 8],
    };
    let mut dev = *b"lo\0";
    // SAFETY: `rtentry` is plain old data; zeroed is a valid value.
    let mut rt: libc::rtentry = unsafe { std::mem::zeroed() };
    // SAFETY: sockaddr_in and sockaddr have compatible layouts for the
    // first 16 bytes, which is all the kernel reads for AF_INET.
    unsafe {
        rt.rt_dst = std::mem::transmute::<libc::sockaddr_in, libc::sockaddr>(any);
        rt.rt_genmask = std::mem::transmute::<libc::sockaddr_in, libc::sockaddr>(any);
        rt.rt_gateway = std::mem::transmute::<libc::sockaddr_in, libc::sockaddr>(any);
    }
    rt.rt_flags = libc::RTF_UP;
    rt.rt_dev = dev.as_mut_ptr().cast();
    // SAFETY: SIOCADDRT reads one `rtentry` and the NUL-terminated device
    // name it points to; both live across the call.
    let rc = unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCADDRT, &rt) };
    Errno::result(rc).map(drop)
}

/// `table ip warden { chain redirect { type nat hook output priority -100;
/// ip daddr 127.0.0.0/8 accept; meta l4proto tcp dnat to 127.0.0.1:PORT } }`
fn install_redirect() -> Result<(), NetnsError> {
    let mut batch = Batch::new();
    let table = Table::new(ProtocolFamily::Ipv4)
        .with_name("warden")
        .add_to_batch(&mut batch);
    let chain = Chain::new(&table)
        .with_name("redirect")
        .with_hook(Hook::new(HookClass::Out, -100))
        .with_type(ChainType::Nat)
        .add_to_batch(&mut batch);
    // The sandbox's own loopback stays its own.
    let loopback = "127.0.0.0/8".parse().map_err(|_| {
        NetnsError::Build(rustables::error::BuilderError::MissingChainInformationError)
    })?;
    Rule::new(&chain)
        .map_err(NetnsError::Build)?
        .match_network(loopback, false)
        .map_err(NetnsError::Build)?
        .accept()
        .add_to_batch(&mut batch);
    let mut redirect = Rule::new(&chain)
        .map_err(NetnsError::Build)?
        .protocol(Protocol::TCP);
    redirect.add_expr(Immediate::new_data(
        Ipv4Addr::LOCALHOST.octets().to_vec(),
        Register::Reg1,
    ));
    redirect.add_expr(Immediate::new_data(
        PROXY_PORT.to_be_bytes().to_vec(),
        Register::Reg2,
    ));
    redirect.add_expr(
        Nat::default()
            .with_nat_type(NatType::DNat)
            .with_family(ProtocolFamily::Ipv4)
            .with_ip_register(Register::Reg1)
            .with_port_register(Register::Reg2),
    );
    redirect.add_to_batch(&mut batch);
    batch.send().map_err(NetnsError::Nftables)
}
