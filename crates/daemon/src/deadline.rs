//! How long a client of a TCP listener may keep the daemon waiting.
//!
//! The head of each request has its own bound ([`crate::listen`]); what
//! comes after it has two more, each closing a way to hold a connection
//! without a token:
//! - a request that no credential let in (health, the OpenAPI document,
//!   the dashboard's login and assets, an unknown route, a refusal) has
//!   [`Timeouts::unproven`] from its head to the end of its answer: a body
//!   that trickles in, or an answer still unfinished past it, is cut (408
//!   and `Connection: close`, or the connection dropped mid-answer). The
//!   middleware that checks a token, a browser session or an envd access
//!   token marks what it lets in ([`proven`]), and that request is bound
//!   by its credential instead ([`crate::revocation`]);
//! - every request's body, let in or not, must keep coming once its head
//!   is in ([`Paced`]: nothing for [`Timeouts::body_stall`], or less than
//!   [`BODY_RATE`] on average after it, and the body fails): a credential
//!   lifts the request's deadline, never the bound on what the daemon
//!   holds a connection and a buffer for;
//! - every answer must be taken: a write that cannot proceed for
//!   [`Timeouts::write_stall`] closes the connection ([`StallGuard`]), so
//!   a client that pipelines requests without reading the answers, or
//!   stops reading a stream or a WebSocket, holds nothing for longer. A
//!   stream with nothing to say is not a stalled write: events, followed
//!   output and WebSockets last as long as their client reads them.
//!
//! Whether a connection's latest request was let in, and by whose token,
//! also decides which connections a full listener lets go first
//! ([`crate::listen`]).

use axum::body::Body;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use hyper::body::{Body as HttpBody, Frame, SizeHint};
use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

/// The bounds of what follows a request head on a TCP listener.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// From the head of a request no credential let in to the end of its
    /// answer.
    pub unproven: Duration,
    /// How long a connection may take to send a request's body once its
    /// head is in, proven or not: no byte of it for this long, or on
    /// average fewer than [`BODY_RATE`] bytes a second after it, and the
    /// body is cut ([`Paced`]).
    pub body_stall: Duration,
    /// How long a write to the client may make no progress.
    pub write_stall: Duration,
}

/// The least pace a request's body keeps, on average from its head on,
/// past its first [`Timeouts::body_stall`]: 4 MiB (the largest JSON body)
/// in about four minutes.
pub const BODY_RATE: u64 = 16 << 10;

impl Default for Timeouts {
    fn default() -> Timeouts {
        Timeouts {
            // A login's body and a health answer take milliseconds.
            unproven: Duration::from_secs(10),
            // An upload from a client that is still there sends something
            // every few milliseconds.
            body_stall: Duration::from_secs(10),
            // A client that takes no byte of an answer for this long is
            // gone or holding the connection on purpose.
            write_stall: Duration::from_secs(30),
        }
    }
}

/// Whether a connection's latest request was let in by a credential, and
/// by whose token: a full listener counts connections by token and lets
/// go of the largest holder's ([`crate::listen`]).
#[derive(Debug, Clone, Default)]
pub struct Proof(Arc<AtomicBool>, Arc<std::sync::Mutex<Option<Arc<str>>>>);

impl Proof {
    pub fn stands(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }

    pub(crate) fn mark(&self, let_in: bool) {
        self.0.store(let_in, Ordering::Release);
    }

    /// The token whose request the connection's latest proof was for.
    pub(crate) fn holder(&self) -> Option<Arc<str>> {
        self.1.lock().ok().and_then(|h| h.clone())
    }

    pub(crate) fn mark_by(&self, holder: Option<&str>) {
        if let Ok(mut h) = self.1.lock() {
            *h = holder.map(Arc::from);
        }
        self.mark(true);
    }
}

/// Mark `req` as let in by a credential: its deadline is lifted. Called
/// by each middleware that checks one, after it was found good; the
/// token is read from the request's credential or caller, when it has
/// one of them already.
pub fn proven<B>(req: &http::Request<B>) {
    let ext = req.extensions();
    let token = ext
        .get::<crate::credential::Credential>()
        .and_then(|c| c.token.as_deref())
        .or_else(|| ext.get::<crate::auth::Caller>().and_then(|c| c.token_id()));
    proven_by(req, token);
}

/// [`proven`], for the token `token`.
pub fn proven_by<B>(req: &http::Request<B>, token: Option<&str>) {
    if let Some(p) = req.extensions().get::<Proof>() {
        p.mark_by(token);
    }
}

/// A TCP connection's router, with [`Timeouts::unproven`] on each
/// request that no credential lets in.
#[derive(Clone)]
pub struct Guarded {
    pub router: axum::Router,
    pub proof: Proof,
    pub unproven: Duration,
    pub body_stall: Duration,
}

impl<B> tower::Service<http::Request<B>> for Guarded
where
    B: HttpBody<Data = Bytes> + Send + 'static,
    B::Error: Into<axum::BoxError>,
{
    type Response = Response;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut req: http::Request<B>) -> Self::Future {
        // Requests on one HTTP/1 connection come one after another: the
        // flag is this request's until its answer has ended.
        self.proof.mark(false);
        req.extensions_mut().insert(self.proof.clone());
        // A body is held to its pace whoever sends it: a credential lifts
        // the request's deadline, never the bound on its body, which the
        // daemon holds a connection and a buffer for.
        let stall = self.body_stall;
        let req = req.map(|b| Paced::body(Body::new(b), stall));
        let proof = self.proof.clone();
        let deadline = Instant::now() + self.unproven;
        let limit = self.unproven;
        let answer = tower::ServiceExt::oneshot(self.router.clone(), req);
        Box::pin(async move {
            tokio::select! {
                answer = answer => {
                    let response = answer?;
                    if proof.stands() {
                        return Ok(response);
                    }
                    // An answer that breaks off at its request's deadline:
                    // hyper then drops the connection.
                    Ok(response.map(|inner| {
                        CutOff::body(
                            inner,
                            Box::pin(expiry(proof, deadline)),
                            End::Broken(io::ErrorKind::TimedOut, "the request's deadline passed"),
                        )
                    }))
                }
                () = expiry(proof.clone(), deadline) => Ok(too_slow(limit)),
            }
        })
    }
}

/// Resolves at `deadline` unless the request was let in by then.
async fn expiry(proof: Proof, deadline: Instant) {
    tokio::time::sleep_until(deadline).await;
    if proof.stands() {
        std::future::pending::<()>().await;
    }
}

/// The answer to a request that took too long: the body it did not
/// finish sending is not waited for, and the connection ends with it.
fn too_slow(limit: Duration) -> Response {
    let mut r = crate::error::ApiError::new(
        http::StatusCode::REQUEST_TIMEOUT,
        "too_slow",
        format!(
            "the request was not whole and answered within {}s; send it at once",
            limit.as_secs_f32()
        ),
    )
    .into_response();
    r.headers_mut().insert(
        http::header::CONNECTION,
        http::HeaderValue::from_static("close"),
    );
    r
}

/// A body that ends when a moment comes (its request's deadline, its
/// credential's revocation), however much it still has to say.
pub(crate) struct CutOff {
    inner: Body,
    at: Pin<Box<dyn Future<Output = ()> + Send>>,
    end: End,
    ended: bool,
}

/// How a cut-off body ends.
pub(crate) enum End {
    /// As if it were whole, after these last bytes: an answer.
    Last(Option<Bytes>),
    /// With an error of this kind: a request, whose reader must not take a
    /// cut-off upload for a whole one, or an answer hyper is to drop the
    /// connection under.
    Broken(io::ErrorKind, &'static str),
}

impl CutOff {
    /// `inner`, ended by `end` once `at` resolves.
    pub(crate) fn body(
        inner: Body,
        at: Pin<Box<dyn Future<Output = ()> + Send>>,
        end: End,
    ) -> Body {
        Body::new(CutOff {
            inner,
            at,
            end,
            ended: false,
        })
    }
}

impl HttpBody for CutOff {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let this = self.get_mut();
        if this.ended {
            return Poll::Ready(None);
        }
        // Asked first: a stream that always has something to say must
        // still end.
        if this.at.as_mut().poll(cx).is_ready() {
            this.ended = true;
            return Poll::Ready(match &mut this.end {
                End::Last(last) => last.take().map(|b| Ok(Frame::data(b))),
                End::Broken(kind, why) => Some(Err(axum::Error::new(io::Error::new(*kind, *why)))),
            });
        }
        Pin::new(&mut this.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.ended || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A request's body that must keep coming: the body fails (as an upload
/// cut off, never taken for a whole one) once nothing of it has come for
/// its stall bound, or once it has come more slowly than [`BODY_RATE`]
/// on average after that bound's grace. Only the wait for the client is
/// timed: a handler that does not read the body is not hurried.
pub(crate) struct Paced {
    inner: Body,
    began: Instant,
    received: u64,
    stall: Duration,
    timer: Pin<Box<Sleep>>,
    ended: bool,
}

impl Paced {
    pub(crate) fn body(inner: Body, stall: Duration) -> Body {
        let began = Instant::now();
        Body::new(Paced {
            inner,
            began,
            received: 0,
            stall,
            timer: Box::pin(tokio::time::sleep_until(began + stall)),
            ended: false,
        })
    }

    /// When the body must have sent more: the sooner of the stall bound
    /// from now and the moment its average pace falls below the least.
    fn next_due(&self) -> Instant {
        let paced = Duration::from_secs_f64(self.received as f64 / BODY_RATE as f64);
        (Instant::now() + self.stall).min(self.began + self.stall + paced)
    }
}

impl HttpBody for Paced {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let this = self.get_mut();
        if this.ended {
            return Poll::Ready(None);
        }
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    this.received += data.len() as u64;
                }
                let due = this.next_due();
                this.timer.as_mut().reset(due);
                return Poll::Ready(Some(Ok(frame)));
            }
            Poll::Ready(other) => {
                this.ended = other.is_none();
                return Poll::Ready(other);
            }
            Poll::Pending => {}
        }
        if this.timer.as_mut().poll(cx).is_ready() {
            this.ended = true;
            return Poll::Ready(Some(Err(axum::Error::new(io::Error::new(
                io::ErrorKind::TimedOut,
                "the request's body came too slowly",
            )))));
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.ended || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A connection whose writes fail once one has made no progress for its
/// limit. The clock runs only while a write waits on the client, never
/// while the daemon has nothing to send.
pub struct StallGuard<T> {
    io: T,
    limit: Duration,
    stalled: Option<Pin<Box<Sleep>>>,
}

impl<T> StallGuard<T> {
    pub fn new(io: T, limit: Duration) -> StallGuard<T> {
        StallGuard {
            io,
            limit,
            stalled: None,
        }
    }

    /// After a write returned `Pending`: the error once the stall has
    /// lasted its limit (the timer wakes the task then).
    fn stall(&mut self, cx: &mut Context<'_>) -> Poll<io::Error> {
        let limit = self.limit;
        let timer = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        match timer.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(io::Error::new(
                io::ErrorKind::TimedOut,
                "the client took none of the answer in time",
            )),
            Poll::Pending => Poll::Pending,
        }
    }

    fn progress<R>(&mut self, p: Poll<io::Result<R>>, cx: &mut Context<'_>) -> Poll<io::Result<R>> {
        match p {
            Poll::Pending => self.stall(cx).map(Err),
            ready => {
                self.stalled = None;
                ready
            }
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for StallGuard<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for StallGuard<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let p = Pin::new(&mut this.io).poll_write(cx, buf);
        this.progress(p, cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let p = Pin::new(&mut this.io).poll_write_vectored(cx, bufs);
        this.progress(p, cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let p = Pin::new(&mut this.io).poll_flush(cx);
        this.progress(p, cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let p = Pin::new(&mut this.io).poll_shutdown(cx);
        this.progress(p, cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    const LIMIT: Duration = Duration::from_millis(300);

    #[tokio::test]
    async fn a_write_the_peer_does_not_take_fails_after_the_limit() {
        let (a, _b) = tokio::io::duplex(16);
        let mut guarded = StallGuard::new(a, LIMIT);
        let began = Instant::now();
        let e = guarded.write_all(&[0u8; 64]).await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        assert!(began.elapsed() >= LIMIT);
    }

    #[tokio::test]
    async fn a_slow_reader_that_keeps_taking_is_not_cut() {
        let (a, mut b) = tokio::io::duplex(16);
        let mut guarded = StallGuard::new(a, LIMIT);
        let reader = tokio::spawn(async move {
            let mut buf = [0u8; 16];
            let mut got = 0;
            while got < 128 {
                tokio::time::sleep(LIMIT / 2).await;
                got += tokio::io::AsyncReadExt::read(&mut b, &mut buf)
                    .await
                    .unwrap();
            }
        });
        // Longer in all than the limit, never stalled for it.
        guarded.write_all(&[0u8; 128]).await.unwrap();
        reader.await.unwrap();
    }
}
