//! Published ports (`--publish HOSTPORT:PORT`): a server inside the
//! sandbox (an agent's dev server) reached from the host's loopback.
//!
//! The supervisor listens on the host's `127.0.0.1:HOSTPORT`. For each
//! connection it takes a fresh, unconnected TCP socket that was created
//! inside the sandbox's network namespace (a socket belongs to the namespace
//! it was made in, wherever its descriptor goes), connects it to the
//! sandbox's `127.0.0.1:PORT`, and copies bytes both ways. Nothing of the
//! sandbox's own egress changes: what the server inside sends out still goes
//! through the proxy.

use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpSocket};

/// Where fresh sockets of the sandbox's network namespace come from (the
/// jail asks the sandbox's init for one per connection).
pub type SocketSource = Arc<dyn Fn() -> io::Result<OwnedFd> + Send + Sync>;

/// Connections through published ports open at once; more are closed at
/// once (the supervisor's memory stays bounded whoever connects).
const MAX_CONNECTIONS: usize = 1024;

/// How long connecting to the server inside may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Why publishing could not start.
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    #[error("cannot start the runtime that serves published ports")]
    Runtime(#[source] io::Error),
    #[error("cannot serve published port {port}")]
    Listener {
        port: u16,
        #[source]
        source: io::Error,
    },
}

impl PublishError {
    /// Its stable code.
    pub fn reason(&self) -> crate::decision::Reason {
        crate::decision::Reason::StartFailed
    }
}

/// Serves published ports until stopped.
pub struct Publisher {
    runtime: tokio::runtime::Runtime,
}

impl Publisher {
    /// Serve each `(listener, sandbox_port)`: the listener is bound on the
    /// host already (so a port in use is an error before the sandbox
    /// starts).
    pub fn start(
        listeners: Vec<(std::net::TcpListener, u16)>,
        source: SocketSource,
    ) -> Result<Publisher, PublishError> {
        Publisher::start_to(listeners, source, Ipv4Addr::LOCALHOST)
    }

    /// [`Publisher::start`], connecting to `inside:PORT` instead of the
    /// sandbox's loopback (a VM guest's address in the VM's network
    /// namespace).
    pub fn start_to(
        listeners: Vec<(std::net::TcpListener, u16)>,
        source: SocketSource,
        inside: Ipv4Addr,
    ) -> Result<Publisher, PublishError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("warden-publish")
            .enable_io()
            .enable_time()
            .build()
            .map_err(PublishError::Runtime)?;
        let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
        for (listener, sandbox_port) in listeners {
            let host_port = listener.local_addr().map(|a| a.port()).unwrap_or(0);
            let err = |source| PublishError::Listener {
                port: host_port,
                source,
            };
            listener.set_nonblocking(true).map_err(err)?;
            let listener = {
                let _guard = runtime.enter();
                TcpListener::from_std(listener).map_err(err)?
            };
            let source = source.clone();
            let slots = slots.clone();
            runtime.spawn(async move {
                loop {
                    let Ok((conn, _)) = listener.accept().await else {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    };
                    let Ok(permit) = slots.clone().try_acquire_owned() else {
                        drop(conn);
                        continue;
                    };
                    let source = source.clone();
                    tokio::spawn(async move {
                        if let Ok(inner) = connect_inside(&source, inside, sandbox_port).await {
                            let (mut a, mut b) = (conn, inner);
                            let _ = tokio::io::copy_bidirectional(&mut a, &mut b).await;
                        }
                        drop(permit);
                    });
                }
            });
        }
        Ok(Publisher { runtime })
    }

    /// Stop serving; open connections are cut.
    pub fn stop(self) {
        self.runtime.shutdown_timeout(Duration::from_millis(100));
    }
}

/// A connection to the sandbox's `inside:port`, made from a socket of its
/// namespace.
async fn connect_inside(
    source: &SocketSource,
    inside: Ipv4Addr,
    port: u16,
) -> io::Result<tokio::net::TcpStream> {
    let source = source.clone();
    let fd = tokio::task::spawn_blocking(move || source())
        .await
        .map_err(io::Error::other)??;
    // Only an unconnected TCP socket will do; anything else handed over is
    // refused rather than used.
    let kind = nix::sys::socket::getsockopt(&fd, nix::sys::socket::sockopt::SockType)
        .map_err(io::Error::from)?;
    if kind != nix::sys::socket::SockType::Stream
        || nix::sys::socket::getpeername::<nix::sys::socket::SockaddrStorage>(
            std::os::fd::AsRawFd::as_raw_fd(&fd),
        )
        .is_ok()
    {
        return Err(io::Error::other("not a fresh TCP socket"));
    }
    let std_stream = std::net::TcpStream::from(fd);
    std_stream.set_nonblocking(true)?;
    let socket = TcpSocket::from_std_stream(std_stream);
    let addr = SocketAddr::from((inside, port));
    tokio::time::timeout(CONNECT_TIMEOUT, socket.connect(addr))
        .await
        .map_err(|_| io::Error::from(io::ErrorKind::TimedOut))?
}
