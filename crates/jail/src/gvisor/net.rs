//! The network namespace a gVisor sandbox runs in: made on the host by a
//! short-lived thread (a network namespace is a thread's own, so no
//! process is cloned), wired as the process backend's init wires its own
//! ([`crate::netns`]): with egress, every address routed through `lo`, an
//! nftables `nat output` rule sending every TCP connection to the proxy's
//! socket and the resolver's socket on 127.0.0.1; without, `lo` alone.
//!
//! runsc then runs with `--network=host` inside this namespace: gVisor's
//! kernel makes its sockets with the host's, in this namespace, so every
//! connection the sandbox starts meets the rule and the proxy, which reads
//! the address asked for with `SO_ORIGINAL_DST`, exactly as for a process
//! sandbox. Nothing here decides a connection.

use crate::netns::{self, NetnsError};
use nix::errno::Errno;
use nix::sched::CloneFlags;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;

/// Why the namespace could not be made or entered.
#[derive(Debug, thiserror::Error)]
pub enum NetError {
    #[error("cannot create the gVisor sandbox's network namespace")]
    Unshare(#[source] Errno),
    #[error("cannot open the gVisor sandbox's network namespace")]
    Open(#[source] Errno),
    #[error("cannot enter the gVisor sandbox's network namespace")]
    Enter(#[source] Errno),
    #[error(transparent)]
    Wire(#[from] NetnsError),
    #[error("the thread making the gVisor sandbox's network namespace ended without an answer")]
    Lost,
}

/// The namespace, and with egress the proxy's listening TCP socket and the
/// resolver's UDP socket bound inside it. The namespace lives as long as
/// any of these descriptors (or a process in it) does.
pub struct Namespace {
    pub namespace: Arc<OwnedFd>,
    pub egress: Option<(OwnedFd, OwnedFd)>,
}

/// Make the namespace (with egress: wired to the proxy's sockets).
pub fn make(egress: bool) -> Result<Namespace, NetError> {
    let made = std::thread::spawn(move || -> Result<Namespace, NetError> {
        nix::sched::unshare(CloneFlags::CLONE_NEWNET).map_err(NetError::Unshare)?;
        netns::bring_loopback_up()?;
        let sockets = if egress {
            Some(netns::configure_namespace()?)
        } else {
            None
        };
        let namespace = nix::fcntl::open(
            "/proc/thread-self/ns/net",
            nix::fcntl::OFlag::O_RDONLY | nix::fcntl::OFlag::O_CLOEXEC,
            nix::sys::stat::Mode::empty(),
        )
        .map_err(NetError::Open)?;
        Ok(Namespace {
            namespace: Arc::new(namespace),
            egress: sockets,
        })
    });
    made.join().map_err(|_| NetError::Lost)?
}

/// Run `f` on a thread of its own inside `namespace` (sockets it makes
/// belong there), and return what it returns.
pub fn inside<T: Send + 'static>(
    namespace: &Arc<OwnedFd>,
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, NetError> {
    let ns = namespace.clone();
    std::thread::spawn(move || -> Result<T, NetError> {
        nix::sched::setns(ns.as_fd(), CloneFlags::CLONE_NEWNET).map_err(NetError::Enter)?;
        Ok(f())
    })
    .join()
    .map_err(|_| NetError::Lost)?
}

/// Fresh TCP sockets of the namespace, one per connection to a published
/// port.
pub fn socket_source(namespace: Arc<OwnedFd>) -> crate::SocketSource {
    Arc::new(move || {
        inside(&namespace, || {
            nix::sys::socket::socket(
                nix::sys::socket::AddressFamily::Inet,
                nix::sys::socket::SockType::Stream,
                nix::sys::socket::SockFlag::SOCK_CLOEXEC,
                None,
            )
            .map_err(std::io::Error::from)
        })
        .map_err(std::io::Error::other)?
    })
}
