//! How each listener is served, so that no caller without a token can
//! starve the daemon. Each TCP listener (the API's, the E2B door's) holds
//! at most a bounded number of connections, and each peer address a
//! bounded share of them. Past either bound, a new connection takes the
//! place of the oldest one under it whose latest request no credential
//! let in (one still waiting for its first head included); where every
//! connection under the bound was let in, of the oldest connection of the
//! token holding the most of them (when it holds more than one), and
//! otherwise the new one is closed as it is accepted. So one token that
//! fills a listener, from however many addresses, is the one that gives
//! room, never another token with a connection of its own. So a crowd of connections without a token, from however many
//! loopback addresses, never keeps out the owner's client, whose
//! connection holds its place once its first request shows a good token.
//! A connection has [`HEAD_TIMEOUT`] to send each request head, the first
//! and every one after an answer (an idle keep-alive), or it is closed;
//! what follows a head is bounded by [`crate::deadline`]. The owner's Unix
//! socket is served by a loop of its own, with bounds of its own, and only
//! to a peer that is its owner on the host ([`warden_runtime::peer`]):
//! whatever the TCP side suffers, the owner's socket answers. The
//! descriptor limit is raised to what the host allows before any of this
//! ([`raise_open_files`]).

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use std::collections::{BTreeMap, HashMap};
use std::convert::Infallible;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{watch, Notify, Semaphore};

use crate::deadline::{Guarded, Proof, StallGuard, Timeouts};

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

/// The connections one TCP listener holds, oldest first.
struct Places {
    bounds: Bounds,
    book: Mutex<Book>,
}

#[derive(Default)]
struct Book {
    next: u64,
    open: BTreeMap<u64, Place>,
    per_peer: HashMap<IpAddr, usize>,
}

struct Place {
    peer: IpAddr,
    proof: Proof,
    evict: Arc<Notify>,
}

impl Book {
    /// The oldest connection (of `peer`, if given) whose latest request
    /// no credential let in.
    fn oldest_unproven(&self, peer: Option<IpAddr>) -> Option<u64> {
        self.open
            .iter()
            .find(|(_, p)| peer.is_none_or(|ip| p.peer == ip) && !p.proof.stands())
            .map(|(id, _)| *id)
    }

    /// The connection (of `peer`, if given) to let go of for a newcomer:
    /// the oldest no credential let in; failing that, the oldest of the
    /// token holding the most connections, if it holds more than one. A
    /// token's own connections are only ever made to give room while it
    /// holds more than any other: one token filling the listener never
    /// keeps out another, nor takes the one place another holds.
    fn victim(&self, peer: Option<IpAddr>) -> Option<u64> {
        if let Some(id) = self.oldest_unproven(peer) {
            return Some(id);
        }
        let mine = |p: &Place| peer.is_none_or(|ip| p.peer == ip);
        let mut held: HashMap<Arc<str>, usize> = HashMap::new();
        for p in self.open.values().filter(|p| mine(p) && p.proof.stands()) {
            if let Some(h) = p.proof.holder() {
                *held.entry(h).or_default() += 1;
            }
        }
        let (largest, n) = held.into_iter().max_by_key(|(_, n)| *n)?;
        if n < 2 {
            return None;
        }
        self.open
            .iter()
            .find(|(_, p)| mine(p) && p.proof.stands() && p.proof.holder() == Some(largest.clone()))
            .map(|(id, _)| *id)
    }

    /// Take connection `id` off the book, and tell it to close.
    fn remove(&mut self, id: u64) -> Option<Place> {
        let place = self.open.remove(&id)?;
        if let Some(n) = self.per_peer.get_mut(&place.peer) {
            *n -= 1;
            if *n == 0 {
                self.per_peer.remove(&place.peer);
            }
        }
        Some(place)
    }

    fn evict(&mut self, id: u64) {
        if let Some(place) = self.remove(id) {
            // Stored if the connection is not yet waiting for it.
            place.evict.notify_one();
        }
    }
}

impl Places {
    /// A place for a connection from `peer`, making room past a bound;
    /// `None`: every connection under the bound was let in by a
    /// credential, and this one is closed.
    fn admit(self: &Arc<Self>, peer: IpAddr) -> Option<Held> {
        let mut book = self.book.lock().ok()?;
        if book.per_peer.get(&peer).copied().unwrap_or(0) >= self.bounds.per_peer {
            let victim = book.victim(Some(peer))?;
            book.evict(victim);
        }
        if book.open.len() >= self.bounds.per_listener {
            let victim = book.victim(None)?;
            book.evict(victim);
        }
        let id = book.next;
        book.next += 1;
        let proof = Proof::default();
        let evict = Arc::new(Notify::new());
        book.open.insert(
            id,
            Place {
                peer,
                proof: proof.clone(),
                evict: evict.clone(),
            },
        );
        *book.per_peer.entry(peer).or_insert(0) += 1;
        Some(Held {
            _permit: None,
            place: Some((self.clone(), id)),
            proof,
            evict: Some(evict),
        })
    }

    fn is_empty(&self) -> bool {
        self.book.lock().map(|b| b.open.is_empty()).unwrap_or(true)
    }
}

/// What one served connection holds: a place on its listener, and how it
/// is told to give the place up.
struct Held {
    _permit: Option<tokio::sync::OwnedSemaphorePermit>,
    place: Option<(Arc<Places>, u64)>,
    proof: Proof,
    evict: Option<Arc<Notify>>,
}

impl Held {
    /// Resolves when a newer connection took this one's place.
    async fn evicted(&self) {
        match &self.evict {
            Some(n) => n.notified().await,
            None => std::future::pending().await,
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Some((places, id)) = &self.place {
            if let Ok(mut book) = places.book.lock() {
                book.remove(*id);
            }
        }
    }
}

/// Serve `router` on a TCP listener within `bounds` and `timeouts`, to
/// requests for the names of `hosts` only ([`crate::host`]), until `stop`
/// says so.
pub async fn serve_tcp(
    listener: tokio::net::TcpListener,
    router: Router,
    hosts: Arc<crate::host::Hosts>,
    bounds: Bounds,
    timeouts: Timeouts,
    stop: watch::Receiver<bool>,
) -> std::io::Result<()> {
    let places = Arc::new(Places {
        bounds,
        book: Mutex::default(),
    });
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
        // Past a bound with no room to make, the connection is closed as
        // it came: no head is waited for, no descriptor kept.
        let Some(held) = places.admit(addr.ip()) else {
            continue;
        };
        // Streamed answers (NDJSON, SSE, WebSocket frames) are written a
        // message at a time: without TCP_NODELAY each small write after
        // the first waits for the client's delayed ACK (40 ms on Linux).
        let _ = stream.set_nodelay(true);
        // The host check is the first thing a request meets: a name the
        // listener does not answer to reaches no route (DNS rebinding).
        let service = Peered {
            peer: crate::denials::Peer::Ip(addr.ip()),
            inner: crate::host::Gate {
                inner: Guarded {
                    router: router.clone(),
                    proof: held.proof.clone(),
                    unproven: timeouts.unproven,
                    body_stall: timeouts.body_stall,
                },
                hosts: hosts.clone(),
                local: stream.local_addr().ok().map(|a| a.ip()),
            },
        };
        let io = StallGuard::new(stream, timeouts.write_stall);
        tokio::spawn(connection(io, service, held, stop.clone()));
    }
    // Wait (a while) for the connections in flight to finish.
    let _ = tokio::time::timeout(DRAIN, async {
        while !places.is_empty() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    Ok(())
}

/// What is done with a peer the owner's socket refuses besides telling it
/// why: the daemon records the refusal in its audit log.
pub type OnRefused = Arc<dyn Fn(&str, crate::denials::Peer) + Send + Sync>;

/// Serve `router` on the owner's Unix socket until `stop` says so: only
/// to the owner on the host, within bounds of its own; a peer refused is
/// handed to `refused`.
pub async fn serve_unix(
    listener: tokio::net::UnixListener,
    router: Router,
    stop: watch::Receiver<bool>,
    refused: OnRefused,
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
            _permit: Some(permit),
            place: None,
            proof: Proof::default(),
            evict: None,
        };
        let peer =
            nix::sys::socket::getsockopt(&stream, nix::sys::socket::sockopt::PeerCredentials)
                .map(|c| crate::denials::Peer::Uid(c.uid()))
                .unwrap_or_default();
        if let Err(why) = warden_runtime::peer::check(&stream) {
            tracing::warn!("refused a connection on the daemon's socket: {why}");
            let (why, refused) = (why.to_string(), refused.clone());
            tokio::spawn(async move {
                refused(&why, peer);
                refuse(stream, why, held).await;
            });
            continue;
        }
        let service = Peered {
            inner: router.clone(),
            peer,
        };
        tokio::spawn(connection(stream, service, held, stop.clone()));
    }
    drain(&places, MAX_PER_LISTENER).await;
    Ok(())
}

/// A connection's service that marks each of its requests with the peer
/// it came from ([`crate::denials::Peer`]): a refusal without a token is
/// bounded per peer.
#[derive(Clone)]
struct Peered<S> {
    inner: S,
    peer: crate::denials::Peer,
}

impl<S, B> tower::Service<http::Request<B>> for Peered<S>
where
    S: tower::Service<http::Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: http::Request<B>) -> Self::Future {
        req.extensions_mut().insert(self.peer);
        self.inner.call(req)
    }
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
        // A request head of any caller of the API (a token, a cookie, a
        // few headers) fits many times over; hyper's default (~400 KiB)
        // would let a process with no token hold that much per connection
        // for the head's whole timeout, gigabytes at the listeners' caps.
        .max_buf_size(HEAD_BUFFER)
        .keep_alive(true);
    b
}

/// The most a connection's read buffer holds (a request head must fit).
const HEAD_BUFFER: usize = 64 << 10;

/// One connection, HTTP/1.1 with upgrades (WebSockets), ended gracefully
/// when the daemon stops, and at once when a newer connection took its
/// place.
async fn connection<I, S>(io: I, service: S, held: Held, mut stop: watch::Receiver<bool>)
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    S: tower::Service<
            http::Request<Tracked>,
            Response = axum::response::Response,
            Error = Infallible,
        > + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    let service = TowerToHyperService::new(Closing { inner: service });
    let conn = builder()
        .serve_connection(TokioIo::new(io), service)
        .with_upgrades();
    tokio::pin!(conn);
    tokio::select! {
        _ = conn.as_mut() => return,
        () = held.evicted() => return,
        () = stopped(&mut stop) => conn.as_mut().graceful_shutdown(),
    }
    tokio::select! {
        _ = conn => {}
        () = held.evicted() => {}
    }
}

/// A request's body that says whether it was read to its end.
pub(crate) struct Tracked {
    inner: hyper::body::Incoming,
    ended: Arc<std::sync::atomic::AtomicBool>,
}

impl hyper::body::Body for Tracked {
    type Data = bytes::Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        let polled = std::pin::Pin::new(&mut self.inner).poll_frame(cx);
        if let std::task::Poll::Ready(None) = polled {
            self.ended.store(true, std::sync::atomic::Ordering::Relaxed);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}

/// An answer made while its request's body was still unread (a refusal
/// before the body is read, such as a stream's place refused, which the
/// E2B door answers with a Connect error stream of status 200) closes its
/// connection, and says so. hyper closes such a connection after the
/// answer anyway (the rest of the body cannot be told from the next
/// request), but without `Connection: close` a client keeps it for its
/// next request and sends that on it as it closes: the next call then
/// fails with "connection closed before message completed" (the E2B
/// SDK's call after a refused stream did, now and then). An upgrade's 101
/// is left alone.
#[derive(Clone)]
struct Closing<S> {
    inner: S,
}

impl<S> tower::Service<http::Request<hyper::body::Incoming>> for Closing<S>
where
    S: tower::Service<
            http::Request<Tracked>,
            Response = axum::response::Response,
            Error = Infallible,
        > + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    type Response = axum::response::Response;
    type Error = Infallible;
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<Self::Response, Infallible>> + Send>,
    >;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<hyper::body::Incoming>) -> Self::Future {
        use hyper::body::Body as _;
        let ended = Arc::new(std::sync::atomic::AtomicBool::new(
            req.body().is_end_stream(),
        ));
        let req = req.map(|inner| Tracked {
            inner,
            ended: ended.clone(),
        });
        let answer = self.inner.call(req);
        Box::pin(async move {
            let mut response = answer.await?;
            if response.status() != http::StatusCode::SWITCHING_PROTOCOLS
                && !ended.load(std::sync::atomic::Ordering::Relaxed)
            {
                response.headers_mut().insert(
                    http::header::CONNECTION,
                    http::HeaderValue::from_static("close"),
                );
            }
            Ok(response)
        })
    }
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
    fn a_full_listener_lets_go_of_its_oldest_connection_no_credential_let_in() {
        let places = Arc::new(Places {
            bounds: Bounds {
                per_listener: 3,
                per_peer: 2,
            },
            book: Mutex::default(),
        });
        let (a, b, c): (IpAddr, IpAddr, IpAddr) = (
            "127.0.0.2".parse().unwrap(),
            "127.0.0.3".parse().unwrap(),
            "127.0.0.1".parse().unwrap(),
        );
        let first = places.admit(a).unwrap();
        let second = places.admit(a).unwrap();
        let third = places.admit(b).unwrap();
        first.proof.mark(true);
        // A peer at its bound makes room among its own: the oldest
        // unproven one goes, the proven one stays.
        let _fourth = places.admit(a).unwrap();
        assert!(is_evicted(&second) && !is_evicted(&first));
        // A full listener: the oldest unproven of all goes.
        let owner = places.admit(c).unwrap();
        assert!(is_evicted(&third));
        owner.proof.mark(true);
        // Only proven connections under the peer's bound: refused.
        _fourth.proof.mark(true);
        assert!(places.admit(a).is_none());
    }

    #[test]
    fn a_full_listener_of_proven_connections_lets_go_of_the_largest_tokens_oldest() {
        let places = Arc::new(Places {
            bounds: Bounds {
                per_listener: 4,
                per_peer: 4,
            },
            book: Mutex::default(),
        });
        let ip: IpAddr = "127.0.0.1".parse().unwrap();
        let a: Vec<Held> = (0..3).map(|_| places.admit(ip).unwrap()).collect();
        for h in &a {
            h.proof.mark_by(Some("a"));
        }
        let b = places.admit(ip).unwrap();
        b.proof.mark_by(Some("b"));
        // Full, every connection let in: token a, holding three, gives
        // its oldest; b's one connection stays.
        let newcomer = places.admit(ip).unwrap();
        assert!(is_evicted(&a[0]) && !is_evicted(&a[1]) && !is_evicted(&b));
        newcomer.proof.mark_by(Some("b"));
        // Two each: a is still the first of the largest found; once every
        // token holds one place, a newcomer is refused.
        let _c = places.admit(ip).unwrap();
        assert!(is_evicted(&a[1]) || is_evicted(&b));
    }

    fn is_evicted(h: &Held) -> bool {
        let Some((places, id)) = &h.place else {
            return false;
        };
        !places.book.lock().unwrap().open.contains_key(id)
    }

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
