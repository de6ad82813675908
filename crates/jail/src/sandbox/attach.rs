//! The caller's side of a sandbox: what it plugs in as the sandbox starts
//! (its network's services, the channel of a long-lived sandbox's init).
//! The jail is mechanism only: what serves the network is the caller's
//! (the runtime's) choice.

use crate::secrets::Keeper;
use crate::sys;
use nix::unistd::Pid;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::sync::Arc;

/// Where fresh TCP sockets of the sandbox's network namespace come from,
/// one per connection to a published port.
pub type SocketSource = Arc<dyn Fn() -> std::io::Result<OwnedFd> + Send + Sync>;

/// What the caller plugs into a sandbox as it starts: the custody of its
/// secrets' values (as a [`Keeper`]), its network service (the egress
/// proxy, published ports) and, for a long-lived sandbox, the channel its
/// init takes spawn requests on. The jail is mechanism only: what serves
/// the network is the caller's (the runtime's) choice.
pub trait Attach: Keeper {
    /// After the clone, before the sandbox may go on: serve its network.
    /// With [`Network::terminal`], the caller may return a [`Desk`] that
    /// puts its questions to the person at that terminal. An error stops
    /// the sandbox before anything of it runs.
    fn network(&mut self, network: Network) -> Result<Option<Box<dyn Desk>>, String>;
    /// A long-lived sandbox runs: `channel` carries spawn requests to its
    /// init (see [`crate::spawn`]), whose host PID is `init`.
    fn service(&mut self, channel: OwnedFd, init: Pid);
    /// Every process of the sandbox is gone; stop serving its network
    /// (before the exit is recorded, so that its last decisions come first).
    fn stopping(&mut self);
    /// Every process of the sandbox is gone and its writable volumes and
    /// caches are about to take what it wrote into them: what those merges must
    /// leave alone (see [`crate::cache::Fence`]), asked now, since the
    /// caller's rule may have changed while the sandbox ran. `None`:
    /// nothing.
    fn fence(&self) -> Option<Box<dyn crate::cache::Fence>> {
        None
    }
}

/// The sandbox's network, handed to [`Attach::network`].
pub struct Network {
    /// With egress: the proxy's listening TCP socket and the resolver's UDP
    /// socket, opened by the init inside the sandbox's network namespace.
    pub egress: Option<(OwnedFd, OwnedFd)>,
    /// A person is at a terminal this supervisor relays: `--ask` may put
    /// its questions there (through the [`Desk`] the caller returns).
    pub terminal: bool,
    /// `--publish`: the host's listeners, bound already, and the sandbox
    /// port each leads to.
    pub published: Vec<(std::net::TcpListener, u16)>,
    /// Fresh TCP sockets of the sandbox's namespace, for published ports.
    pub sockets: Option<SocketSource>,
    /// Where in that namespace published ports lead: its loopback for a
    /// process sandbox, the guest's address for a VM.
    pub publish_to: std::net::Ipv4Addr,
}

/// Questions put to the person at the terminal this supervisor relays,
/// answered from what they type (`--ask`; the runtime's desk). The
/// supervisor's loop wakes it when [`Desk::fd`] is readable, holds the
/// sandbox's output back and hands it the typed keys while it asks, and
/// writes what it returns to the supervisor's stderr, the terminal the
/// person reads.
pub trait Desk {
    /// Readable when questions have arrived.
    fn fd(&self) -> BorrowedFd<'_>;
    /// A question is on screen: typed keys are its answer, and the
    /// sandbox's output waits.
    fn is_asking(&self) -> bool;
    /// Take the questions that arrived; returns what to print.
    fn on_wake(&mut self) -> Option<String>;
    /// Time passes (at least once a second while asking); returns what to
    /// print.
    fn tick(&mut self) -> Option<String>;
    /// Keys typed while a question is on screen; returns what to print.
    fn on_input(&mut self, keys: &[u8]) -> Option<String>;
    /// The person's input ended: nobody is left to answer. Returns what to
    /// print.
    fn input_ended(&mut self) -> Option<String>;
}

/// Fresh sockets of the sandbox's network namespace, asked of its init over
/// `channel` (or of the process serving a VM's namespace), for published
/// ports.
pub(crate) fn socket_source(channel: OwnedFd) -> SocketSource {
    // The init answers at once; a stuck or gone init must not hold a
    // connection for ever.
    let _ = nix::sys::socket::setsockopt(
        &channel,
        nix::sys::socket::sockopt::ReceiveTimeout,
        &nix::sys::time::TimeVal::new(5, 0),
    );
    let channel = std::sync::Mutex::new(channel);
    Arc::new(move || {
        let channel = channel
            .lock()
            .map_err(|_| std::io::Error::other("the socket channel is unusable"))?;
        nix::sys::socket::send(
            channel.as_raw_fd(),
            b"s",
            nix::sys::socket::MsgFlags::empty(),
        )?;
        sys::recv_fds(&channel, 1)?
            .pop()
            .ok_or_else(|| std::io::Error::other("the sandbox's init sent no socket"))
    })
}
