//! The host's own addresses: never an upstream, whatever a name resolves
//! to, including an address that appeared after the proxy started.
//!
//! Reading them (`getifaddrs`: a netlink dump of every interface and
//! address) on every resolved connection was most of that connection's
//! system calls on the proxy's side. They are read once and kept, and the
//! copy is exact: before the first read, the proxy subscribes a netlink
//! socket of its own to the kernel's address notifications
//! (`RTMGRP_IPV4_IFADDR`, `RTMGRP_IPV6_IFADDR`); the kernel queues a
//! message on it within the very system call that adds or removes an
//! address, before that call returns. Each use first drains the socket
//! without blocking: any message (or an overflow, `ENOBUFS`, or any other
//! error of the socket) throws the copy away and the addresses are read
//! again. An address added by the time a connection is judged is always in
//! the list it is judged by; the cost when nothing changed is one
//! non-blocking `recv`.
//!
//! Chosen over polling the list on a timer (a window in which a new
//! address is not known) and over parsing the notifications into the copy
//! (the kernel's dump is the one source of truth; a notification only says
//! when to read it again).
//!
//! Fails closed: when the addresses cannot be read, [`OwnAddresses::current`]
//! says so and the connection that needed them is refused, never judged
//! against an empty list. When the notification socket cannot be opened,
//! the addresses are read afresh for every use (exact, as before, only
//! slower).

use nix::errno::Errno;
use nix::sys::socket::{
    bind, recv, socket, AddressFamily, MsgFlags, NetlinkAddr, SockFlag, SockProtocol, SockType,
};
use std::net::IpAddr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;

/// Why the host's own addresses could not be told.
#[derive(Debug, thiserror::Error)]
pub(crate) enum OwnError {
    #[error("cannot read the host's own addresses (getifaddrs: {0})")]
    Read(#[source] Errno),
    #[error("cannot read the host's own addresses (the proxy's copy is unusable after a panic)")]
    Poisoned,
}

/// The host's addresses, kept while the kernel says nothing changed.
#[derive(Default)]
pub(crate) struct OwnAddresses {
    /// Subscribed to address changes; `None` until the first use, or when
    /// it could not be opened (then every use reads afresh).
    watch: Option<OwnedFd>,
    /// Whether opening `watch` was tried already.
    tried: bool,
    /// The addresses as last read; `None` when they must be read again.
    cached: Option<Arc<[IpAddr]>>,
}

impl OwnAddresses {
    /// The host's addresses as they are now.
    pub(crate) fn current(&mut self) -> Result<Arc<[IpAddr]>, OwnError> {
        self.current_with(read)
    }

    /// [`OwnAddresses::current`], reading with `read_all` (tests give a
    /// reader that fails).
    fn current_with(
        &mut self,
        read_all: impl FnOnce() -> Result<Vec<IpAddr>, OwnError>,
    ) -> Result<Arc<[IpAddr]>, OwnError> {
        if !self.tried {
            self.tried = true;
            // Subscribed before the first read: a change made after this
            // point is queued on it, even one made while the list is read.
            self.watch = subscribe().ok();
        }
        let changed = match &self.watch {
            Some(fd) => drain(fd),
            None => true,
        };
        if changed {
            self.cached = None;
        }
        if let Some(c) = &self.cached {
            return Ok(c.clone());
        }
        let fresh: Arc<[IpAddr]> = read_all()?.into();
        if self.watch.is_some() {
            self.cached = Some(fresh.clone());
        }
        Ok(fresh)
    }
}

/// A netlink socket that hears every address added to or removed from an
/// interface of the proxy's network namespace.
fn subscribe() -> Result<OwnedFd, Errno> {
    let fd = socket(
        AddressFamily::Netlink,
        SockType::Raw,
        SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK,
        SockProtocol::NetlinkRoute,
    )?;
    let groups = (libc::RTMGRP_IPV4_IFADDR | libc::RTMGRP_IPV6_IFADDR) as u32;
    bind(fd.as_raw_fd(), &NetlinkAddr::new(0, groups))?;
    Ok(fd)
}

/// Read whatever the kernel queued on `fd`, without blocking: true when
/// anything was there (or the socket failed, which may have lost a
/// notification), false when it was empty.
fn drain(fd: &OwnedFd) -> bool {
    let mut buf = [0u8; 4096];
    let mut changed = false;
    loop {
        match recv(fd.as_raw_fd(), &mut buf, MsgFlags::MSG_DONTWAIT) {
            Ok(0) => return true,
            Ok(_) => changed = true,
            Err(Errno::EAGAIN) => return changed,
            Err(Errno::EINTR) => {}
            // ENOBUFS: notifications were dropped; anything else: the
            // socket cannot be trusted to have heard everything.
            Err(_) => return true,
        }
    }
}

/// Every address of every interface, read now.
fn read() -> Result<Vec<IpAddr>, OwnError> {
    let addrs = nix::ifaddrs::getifaddrs().map_err(OwnError::Read)?;
    Ok(addrs
        .filter_map(|a| {
            let addr = a.address?;
            if let Some(v4) = addr.as_sockaddr_in() {
                return Some(IpAddr::V4(v4.ip()));
            }
            addr.as_sockaddr_in6().map(|v6| IpAddr::V6(v6.ip()))
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unreadable_list_is_an_error_never_an_empty_list() {
        let mut own = OwnAddresses::default();
        let got = own.current_with(|| Err(OwnError::Read(Errno::ENOBUFS)));
        assert!(got.is_err(), "{got:?}");
        // And the failure is not remembered as a list either.
        let got = own.current_with(|| Err(OwnError::Read(Errno::ENOMEM)));
        assert!(got.is_err(), "{got:?}");
    }

    #[test]
    fn the_hosts_loopback_is_among_its_own_addresses() {
        let mut own = OwnAddresses::default();
        let first = own.current().unwrap();
        assert!(first.contains(&IpAddr::from([127, 0, 0, 1])), "{first:?}");
        // Nothing changed: the same copy, not a new read.
        let again = own.current().unwrap();
        if own.watch.is_some() {
            assert!(Arc::ptr_eq(&first, &again));
        }
    }
}
