//! The network of a VM sandbox, made on the host: a network namespace of
//! its own holding one TAP device (the host side of the guest's
//! virtio-net, handed to the VMM as a descriptor), the rules that send
//! every TCP connection and DNS query arriving on it to the egress proxy's
//! sockets, and those sockets. It never decides a connection: the proxy
//! (the runtime's) does, on the sockets it is handed, exactly as for a
//! process sandbox.
//!
//! The namespace has no route anywhere but the TAP's own network: it does
//! not forward, and its input chain accepts only the proxy's and the
//! resolver's ports (everything else, UDP, ICMP and IPv6 included, is
//! dropped). A guest that connects to any address and port meets the
//! proxy, which reads the address asked for with `SO_ORIGINAL_DST`.

use crate::netns::{self, NetnsError, PROXY_PORT};
use crate::sys::Forked;
use nix::errno::Errno;
use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};
use rustables::expr::{Immediate, Nat, NatType, Register};
use rustables::{
    Batch, Chain, ChainPolicy, ChainType, Hook, HookClass, Protocol, ProtocolFamily, Rule, Table,
};
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener, UdpSocket};
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::time::Duration;

/// The TAP device's name in the VM's namespace.
pub const TAP_NAME: &str = "warden0";
/// The namespace's address on the TAP: the guest's gateway and resolver.
pub const GATEWAY: Ipv4Addr = Ipv4Addr::new(10, 0, 2, 2);
/// The guest's address.
pub const GUEST_ADDR: Ipv4Addr = Ipv4Addr::new(10, 0, 2, 15);
/// The TAP network's mask (a /24).
pub const NETMASK: Ipv4Addr = Ipv4Addr::new(255, 255, 255, 0);
/// The guest's interface (its only one besides `lo`).
pub const GUEST_INTERFACE: &str = "eth0";
/// Where the guest's resolver is.
pub const DNS_PORT: u16 = 53;

/// How long wiring the namespace may take.
const WIRE_TIMEOUT: Duration = Duration::from_secs(20);

/// Why the VM's network could not be made.
#[derive(Debug, thiserror::Error)]
pub enum VmNetError {
    #[error("cannot create the channel to the process that wires the VM's network")]
    Channel(#[source] Errno),
    #[error("cannot create the VM's network namespace")]
    Clone(#[source] Errno),
    #[error("cannot make the VM's network from this process")]
    Threads(#[source] Box<crate::JailError>),
    #[error("cannot wire the VM's network namespace: {0}")]
    Wire(String),
    #[error(
        "the process wiring the VM's network namespace ended without handing over its sockets"
    )]
    Silent,
    #[error("cannot write {path} (the VM network's user namespace)")]
    Map {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot open the VM's network namespace")]
    Namespace(#[source] Errno),
    #[error("cannot open /dev/net/tun for the VM's network device: the host needs the tun module")]
    OpenTun(#[source] Errno),
    #[error("cannot create the TAP device {TAP_NAME}")]
    Tap(#[source] Errno),
    #[error(transparent)]
    Netns(#[from] NetnsError),
    #[error("cannot install the VM's interception rules (nftables) in its network namespace; the kernel needs nf_tables and nf_nat")]
    Nftables(#[source] rustables::error::QueryError),
    #[error("cannot build the VM's interception rules")]
    Build(#[source] rustables::error::BuilderError),
    #[error("cannot open the proxy's socket {addr} in the VM's network namespace")]
    Listen {
        addr: SocketAddrV4,
        #[source]
        source: std::io::Error,
    },
}

/// The VM's network, made: the TAP for the VMM, and the proxy's listening
/// TCP socket and the resolver's UDP socket for the egress proxy. The
/// namespace lives as long as any of them is open.
pub struct VmNetwork {
    pub tap: OwnedFd,
    pub tcp: OwnedFd,
    pub dns: OwnedFd,
    /// The namespace itself, for the VMM to run in (see
    /// [`crate::vmm::VmmJail`]).
    pub namespace: OwnedFd,
    /// With published ports: the channel to the process that hands out
    /// fresh TCP sockets of the namespace (see [`socket_source`]); it ends
    /// when this closes, or with warden.
    pub sockets: Option<OwnedFd>,
}
/// Fresh TCP sockets of the VM's network namespace, one per connection to
/// a published port, from the process [`open`] left serving `channel`.
pub fn socket_source(channel: OwnedFd) -> crate::SocketSource {
    crate::sandbox::socket_source(channel)
}

/// In the namespace's process: answer each request on `channel` with a
/// fresh TCP socket, until warden closes it.
fn serve_sockets(channel: &OwnedFd) {
    loop {
        let mut byte = [0u8; 1];
        match nix::sys::socket::recv(
            channel.as_raw_fd(),
            &mut byte,
            nix::sys::socket::MsgFlags::empty(),
        ) {
            Ok(0) => return,
            Ok(_) | Err(Errno::EINTR) => {}
            Err(_) => return,
        }
        if crate::sys::hand_out_socket(channel).is_err() {
            return;
        }
    }
}

/// Make the VM's network namespace and its devices, rules and sockets, in
/// a short-lived child (in a user namespace of its own when warden is not
/// root). Like [`crate::run`], it refuses unless the process is
/// single-threaded ([`crate::SingleThreaded`]): the child is a copy of the
/// calling thread only. With
/// `sockets` (published ports) the child stays, serving fresh sockets of
/// the namespace over [`VmNetwork::sockets`].
pub fn open(sockets: bool) -> Result<VmNetwork, VmNetError> {
    let (ours, theirs) = socketpair(
        AddressFamily::Unix,
        SockType::SeqPacket,
        None,
        SockFlag::SOCK_CLOEXEC,
    )
    .map_err(VmNetError::Channel)?;
    let flags = if crate::host::is_root() {
        libc::CLONE_NEWNET
    } else {
        libc::CLONE_NEWUSER | libc::CLONE_NEWNET
    };
    let proof = crate::SingleThreaded::check().map_err(|e| VmNetError::Threads(Box::new(e)))?;
    match proof.clone_process(flags) {
        Ok(Forked::Child) => {
            drop(ours);
            let code = match wire() {
                Ok(fds) => {
                    let raw: Vec<RawFd> = fds.iter().map(|f| f.as_raw_fd()).collect();
                    let sent = crate::fdpass::send(theirs.as_fd(), b"ok", &raw);
                    if sent.is_ok() && sockets {
                        // Serving published ports (the parent writes this
                        // user namespace's maps meanwhile): it holds
                        // nothing of warden's but its channel (not the
                        // listeners, not the TAP), and is gone with warden.
                        drop(fds);
                        crate::sys::close_fds_except(&[theirs.as_raw_fd()]);
                        let _ = nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL);
                        serve_sockets(&theirs);
                        // SAFETY: `_exit` ends this child at once, running
                        // no exit handlers of the parent's copy.
                        unsafe { libc::_exit(0) }
                    }
                    // Stay (so that the parent can write this user
                    // namespace's maps) until the parent is done with us.
                    let mut byte = [0u8; 1];
                    let _ = nix::unistd::read(&theirs, &mut byte);
                    i32::from(sent.is_err())
                }
                Err(e) => {
                    let msg = crate::chain_str(&e);
                    let _ = crate::fdpass::send(theirs.as_fd(), msg.as_bytes(), &[]);
                    1
                }
            };
            // SAFETY: `_exit` ends this child at once, running no exit
            // handlers of the parent's copy.
            unsafe { libc::_exit(code) }
        }
        Ok(Forked::Parent(pid)) => {
            drop(theirs);
            let _ = nix::sys::socket::setsockopt(
                &ours,
                nix::sys::socket::sockopt::ReceiveTimeout,
                &nix::sys::time::TimeVal::new(WIRE_TIMEOUT.as_secs() as i64, 0),
            );
            let mut buf = vec![0u8; 4096];
            let got = crate::fdpass::recv(ours.as_fd(), &mut buf);
            // Rootless, the namespace belongs to a user namespace of its
            // own, which the VMM enters too: warden's user and group map to
            // themselves there, so that the VMM's 9p server creates the
            // workspace's files as their owner (unmapped, it could not).
            let mapped = match &got {
                Ok((_, fds)) if fds.len() == 4 && !crate::host::is_root() => map_self(pid),
                _ => Ok(()),
            };
            let serving = sockets && matches!(&got, Ok((_, fds)) if fds.len() == 4);
            if serving && mapped.is_ok() {
                // It serves until `ours` closes; then it is reaped here.
                std::thread::spawn(move || nix::sys::wait::waitpid(pid, None));
            } else {
                let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
                let _ = nix::sys::wait::waitpid(pid, None);
            }
            mapped?;
            let mut ours = Some(ours);
            match got {
                Ok((_, fds)) if fds.len() == 4 => {
                    let mut fds = fds.into_iter();
                    match (fds.next(), fds.next(), fds.next(), fds.next()) {
                        (Some(tap), Some(tcp), Some(dns), Some(namespace)) => Ok(VmNetwork {
                            tap,
                            tcp,
                            dns,
                            namespace,
                            sockets: ours.take().filter(|_| serving),
                        }),
                        _ => Err(VmNetError::Silent),
                    }
                }
                Ok((0, _)) | Err(_) => Err(VmNetError::Silent),
                Ok((n, _)) => Err(VmNetError::Wire(
                    String::from_utf8_lossy(&buf[..n]).to_string(),
                )),
            }
        }
        Err(e) => Err(VmNetError::Clone(e)),
    }
}

/// Map warden's own user and group to themselves in the user namespace of
/// `pid` (which warden made).
fn map_self(pid: nix::unistd::Pid) -> Result<(), VmNetError> {
    let (uid, gid) = (
        nix::unistd::getuid().as_raw(),
        nix::unistd::getgid().as_raw(),
    );
    for (file, line) in [
        ("setgroups", "deny".to_string()),
        ("uid_map", format!("{uid} {uid} 1\n")),
        ("gid_map", format!("{gid} {gid} 1\n")),
    ] {
        let path = format!("/proc/{pid}/{file}");
        std::fs::write(&path, line).map_err(|source| VmNetError::Map { path, source })?;
    }
    Ok(())
}

/// In the new namespace: loopback up, the TAP with the gateway's address,
/// the rules, the sockets.
fn wire() -> Result<[OwnedFd; 4], VmNetError> {
    netns::bring_loopback_up()?;
    let tap = create_tap()?;
    netns::configure_interface(TAP_NAME, GATEWAY, NETMASK)?;
    install_rules()?;
    let tcp_addr = SocketAddrV4::new(GATEWAY, PROXY_PORT);
    let tcp = TcpListener::bind(tcp_addr).map_err(|source| VmNetError::Listen {
        addr: tcp_addr,
        source,
    })?;
    let dns_addr = SocketAddrV4::new(GATEWAY, DNS_PORT);
    let dns = UdpSocket::bind(dns_addr).map_err(|source| VmNetError::Listen {
        addr: dns_addr,
        source,
    })?;
    let namespace = nix::fcntl::open(
        "/proc/self/ns/net",
        nix::fcntl::OFlag::O_RDONLY | nix::fcntl::OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )
    .map_err(VmNetError::Namespace)?;
    Ok([tap, OwnedFd::from(tcp), OwnedFd::from(dns), namespace])
}

/// A TAP device (Ethernet frames, no packet information header): the
/// descriptor is the device's other end; the device goes when it closes.
fn create_tap() -> Result<OwnedFd, VmNetError> {
    let fd = nix::fcntl::open(
        "/dev/net/tun",
        nix::fcntl::OFlag::O_RDWR | nix::fcntl::OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )
    .map_err(VmNetError::OpenTun)?;
    // SAFETY: `ifreq` is plain old data; zeroed is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(TAP_NAME.as_bytes()) {
        *dst = *src as libc::c_char;
    }
    req.ifr_ifru.ifru_flags = (libc::IFF_TAP | libc::IFF_NO_PI) as libc::c_short;
    // SAFETY: TUNSETIFF reads (and writes back the name into) one `ifreq`
    // that lives across the call; the descriptor is open.
    Errno::result(unsafe { libc::ioctl(fd.as_raw_fd(), libc::TUNSETIFF, &mut req) })
        .map_err(VmNetError::Tap)?;
    Ok(fd)
}

/// ```text
/// table ip warden_vm { chain intercept { type nat hook prerouting priority -100;
///     iifname "warden0" meta l4proto tcp dnat to GATEWAY:PROXY_PORT
///     iifname "warden0" udp dport 53 dnat to GATEWAY:53 } }
/// table inet warden_vm_filter {
///     chain input { type filter hook input priority 0; policy drop;
///         iifname "lo" accept
///         ct state established accept
///         ip daddr GATEWAY tcp dport PROXY_PORT accept
///         ip daddr GATEWAY udp dport 53 accept }
///     chain forward { type filter hook forward priority 0; policy drop; } }
/// ```
fn install_rules() -> Result<(), VmNetError> {
    let mut batch = Batch::new();
    let nat = Table::new(ProtocolFamily::Ipv4)
        .with_name("warden_vm")
        .add_to_batch(&mut batch);
    let intercept = Chain::new(&nat)
        .with_name("intercept")
        .with_hook(Hook::new(HookClass::PreRouting, -100))
        .with_type(ChainType::Nat)
        .add_to_batch(&mut batch);
    let dnat = |rule: Rule, port: u16| -> Rule {
        let mut rule = rule;
        rule.add_expr(Immediate::new_data(
            GATEWAY.octets().to_vec(),
            Register::Reg1,
        ));
        rule.add_expr(Immediate::new_data(
            port.to_be_bytes().to_vec(),
            Register::Reg2,
        ));
        rule.add_expr(
            Nat::default()
                .with_nat_type(NatType::DNat)
                .with_family(ProtocolFamily::Ipv4)
                .with_ip_register(Register::Reg1)
                .with_port_register(Register::Reg2),
        );
        rule
    };
    let from_tap = || -> Result<Rule, VmNetError> {
        Rule::new(&intercept)
            .map_err(VmNetError::Build)?
            .iiface(TAP_NAME)
            .map_err(VmNetError::Build)
    };
    dnat(from_tap()?.protocol(Protocol::TCP), PROXY_PORT).add_to_batch(&mut batch);
    dnat(from_tap()?.dport(DNS_PORT, Protocol::UDP), DNS_PORT).add_to_batch(&mut batch);

    let filter = Table::new(ProtocolFamily::Inet)
        .with_name("warden_vm_filter")
        .add_to_batch(&mut batch);
    let input = Chain::new(&filter)
        .with_name("input")
        .with_hook(Hook::new(HookClass::In, 0))
        .with_type(ChainType::Filter)
        .with_policy(ChainPolicy::Drop)
        .add_to_batch(&mut batch);
    Rule::new(&input)
        .map_err(VmNetError::Build)?
        .iiface("lo")
        .map_err(VmNetError::Build)?
        .accept()
        .add_to_batch(&mut batch);
    // Answers on connections the namespace opened itself (to a published
    // port of the guest); a connection the guest starts is judged by the
    // rules below when it starts.
    Rule::new(&input)
        .map_err(VmNetError::Build)?
        .established()
        .map_err(VmNetError::Build)?
        .accept()
        .add_to_batch(&mut batch);
    for (port, protocol) in [(PROXY_PORT, Protocol::TCP), (DNS_PORT, Protocol::UDP)] {
        Rule::new(&input)
            .map_err(VmNetError::Build)?
            .match_ip(std::net::IpAddr::V4(GATEWAY), false)
            .dport(port, protocol)
            .accept()
            .add_to_batch(&mut batch);
    }
    Chain::new(&filter)
        .with_name("forward")
        .with_hook(Hook::new(HookClass::Forward, 0))
        .with_type(ChainType::Filter)
        .with_policy(ChainPolicy::Drop)
        .add_to_batch(&mut batch);
    batch.send().map_err(VmNetError::Nftables)
}

/// Have `cmd`'s program inherit `fd` (under the same number, returned):
/// warden opens every descriptor close-on-exec, so that no other child
/// gets it; this one's copy is kept open across its `exec`.
pub fn inherit(cmd: &mut std::process::Command, fd: &OwnedFd) -> RawFd {
    use std::os::unix::process::CommandExt;
    let raw = fd.as_raw_fd();
    // SAFETY: the closure runs in the child between fork and exec, where
    // it calls only fcntl(2), which is async-signal-safe, on a descriptor
    // number the child has (a copy of the parent's table).
    unsafe {
        cmd.pre_exec(move || {
            let flags = libc::fcntl(raw, libc::F_GETFD);
            if flags < 0 || libc::fcntl(raw, libc::F_SETFD, flags & !libc::FD_CLOEXEC) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })
    };
    raw
}
