//! How each listener is served, so that no caller without a token can
//! starve the daemon. Each TCP listener (the API's, the E2B door's) holds
//! at most a bounded number of connections, and each peer address a
//! bounded share of them; a connection past either bound is closed as it
//! is accepted. A connection has [`HEAD_TIMEOUT`] to send each request
//! head, the first and every one after an answer (an idle keep-alive),
//! or it is closed. The owner's Unix socket is served by a loop of its
//! own, with bounds of its own, and only to a peer that is its owner on
//! the host ([`warden_runtime::peer`]): whatever the TCP side suffers,
//! the owner's socket answers. The descriptor limit is raised to what the
//! host allows before any of this ([`raise_open_files`]).

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{watch, Semaphore};

/// How long a connection may take to send a request head, and how long
/// it may stay idle between two requests.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// The most connections one listener holds (lowered to fit the host's
/// descriptor limit: see [`Bounds::for_open_files`]).
const MAX_PER_LISTENER: usize = 4096;
/// How long serving waits at shutdown for answers in flight.
const DRAIN: Duration = Duration::from_secs(10);

/// Raise the soft limit of open files to the hard one, and say what it
/// now is: idle connections must not be what runs the daemon out of
/// descriptors. Where the limit cannot be read or raised (a confined
/// service), the bounds follow the limit as it is.
pub fn raise_open_files() -> u64 {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return 1024;
    };
    if soft < hard && setrlimit(Resource::RLIMIT_NOFILE, hard, hard).is_ok() {
        return hard;
    }
    soft
}

/// How many connections a listener, and one peer of it, may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    pub per_listener: usize,
    pub per_peer: usize,
}

impl Bounds {
    /// Bounds that leave most of `open_files` to the sandboxes' pipes,
    /// the database and the owner's socket: two TCP listeners together
    /// hold at most half of it.
    pub fn for_open_files(open_files: u64) -> Bounds {
        let per_listener = usize::try_from(open_files / 4)
            .unwrap_or(usize::MAX)
            .clamp(16, MAX_PER_LISTENER);
        Bounds {
            per_listener,
            per_peer: (per_listener / 2).max(8),
        }
    }
}

/// How many connections each peer address holds on one listener.
type PeerCounts = Arc<Mutex<HashMap<IpAddr, usize>>>;

/// What one served connection holds: a place on its listener, and one
/// in its peer's count.
struct Held {
    _permit: tokio::sync::OwnedSemaphorePermit,
    peer: Option<(PeerCounts, IpAddr)>,
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Some((counts, ip)) = &self.peer {
            if let Ok(mut c) = counts.lock() {
                if let Some(n) = c.get_mut(ip) {
                    *n -= 1;
                    if *n == 0 {
                        c.remove(ip);
                    }
                }
            }
        }
    }
}

/// Serve `router` on a TCP listener within `bounds` until `stop` says so.
pub async fn serve_tcp(
    listener: tokio::net::TcpListener,
    router: Router,
    bounds: Bounds,
    stop: watch::Receiver<bool>,
) -> std::io::Result<()> {
    let places = Arc::new(Semaphore::new(bounds.per_listener));
    let counts: PeerCounts = Arc::default();
    let mut stopping = stop.clone();
    loop {
        let (stream, addr) = tokio::select! {
            () = stopped(&mut stopping) => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    pause_after(&e).await;
                    continue;
                }
            },
        };
        // Past a bound, the connection is closed as it came: no head is
        // waited for, no descriptor kept.
        let Ok(permit) = places.clone().try_acquire_owned() else {
            continue;
        };
        let ip = addr.ip();
        {
            let Ok(mut c) = counts.lock() else { continue };
            let n = c.entry(ip).or_insert(0);
            if *n >= bounds.per_peer {
                continue;
            }
            *n += 1;
        }
        let held = Held {
            _permit: permit,
            peer: Some((counts.clone(), ip)),
        };
        // Streamed answers (NDJSON, SSE, WebSocket frames) are written a
        // message at a time: without TCP_NODELAY each small write after
        // the first waits for the client's delayed ACK (40 ms on Linux).
        let _ = stream.set_nodelay(true);
        tokio::spawn(connection(stream, router.clone(), held, stop.clone()));
    }
    drain(&places, bounds.per_listener).await;
    Ok(())
}

/// Serve `router` on the owner's Unix socket until `stop` says so: only
/// to the owner on the host, within bounds of its own.
pub async fn serve_unix(
    listener: tokio::net::UnixListener,
    router: Router,
    stop: watch::Receiver<bool>,
) -> std::io::Result<()> {
    let places = Arc::new(Semaphore::new(MAX_PER_LISTENER));
    let mut stopping = stop.clone();
    loop {
        let stream = tokio::select! {
            () = stopped(&mut stopping) => break,
            accepted = listener.accept() => match accepted {
                Ok((s, _)) => s,
                Err(e) => {
                    pause_after(&e).await;
                    continue;
                }
            },
        };
        // A refused peer holds a place too, until it is told why.
        let Ok(permit) = places.clone().try_acquire_owned() else {
            continue;
        };
        let held = Held {
            _permit: permit,
            peer: None,
        };
        if let Err(why) = warden_runtime::peer::check(&stream) {
            tracing::warn!("refused a connection on the daemon's socket: {why}");
            tokio::spawn(refuse(stream, why.to_string(), held));
            continue;
        }
        tokio::spawn(connection(stream, router.clone(), held, stop.clone()));
    }
    drain(&places, MAX_PER_LISTENER).await;
    Ok(())
}

/// Resolves once the daemon stops.
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

/// After a failed accept: out of descriptors (or another passing
/// failure), wait a moment rather than spin.
async fn pause_after(e: &std::io::Error) {
    tracing::warn!("accept failed: {e}");
    tokio::time::sleep(Duration::from_millis(100)).await;
}

/// Wait (a while) for the connections in flight to finish.
async fn drain(places: &Arc<Semaphore>, all: usize) {
    let all = u32::try_from(all).unwrap_or(u32::MAX);
    let _ = tokio::time::timeout(DRAIN, places.acquire_many(all)).await;
}

fn builder() -> http1::Builder {
    let mut b = http1::Builder::new();
    b.timer(TokioTimer::new())
        .header_read_timeout(HEAD_TIMEOUT)
        .keep_alive(true);
    b
}

/// One connection, HTTP/1.1 with upgrades (WebSockets), ended gracefully
/// when the daemon stops.
async fn connection<I>(io: I, router: Router, held: Held, mut stop: watch::Receiver<bool>)
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let _held = held;
    let service = TowerToHyperService::new(router);
    let conn = builder()
        .serve_connection(TokioIo::new(io), service)
        .with_upgrades();
    tokio::pin!(conn);
    tokio::select! {
        _ = conn.as_mut() => return,
        () = stopped(&mut stop) => conn.as_mut().graceful_shutdown(),
    }
    let _ = conn.await;
}

/// Answer a refused peer of the owner's socket with 403 and why.
async fn refuse(stream: tokio::net::UnixStream, why: String, held: Held) {
    let _held = held;
    let service = hyper::service::service_fn(move |_req| {
        let refused = crate::error::ApiError::new(
            axum::http::StatusCode::FORBIDDEN,
            "forbidden",
            why.clone(),
        );
        async move {
            Ok::<_, std::convert::Infallible>(axum::response::IntoResponse::into_response(refused))
        }
    });
    let conn = builder()
        .keep_alive(false)
        .serve_connection(TokioIo::new(stream), service);
    let _ = tokio::time::timeout(HEAD_TIMEOUT, conn).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bounds_leave_most_descriptors_to_everything_else() {
        assert_eq!(
            Bounds::for_open_files(1024),
            Bounds {
                per_listener: 256,
                per_peer: 128
            }
        );
        let big = Bounds::for_open_files(1 << 20);
        assert_eq!(big.per_listener, MAX_PER_LISTENER);
        assert!(Bounds::for_open_files(0).per_peer >= 8);
    }
}
