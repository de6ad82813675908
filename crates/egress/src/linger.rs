//! A lingering close for the sandbox's side of a connection warden serves
//! HTTP on (a terminated one, or plain HTTP).
//!
//! When warden answers a request in the upstream's place (a refusal) and
//! the request's body was never read, hyper closes the connection after the
//! answer. Closing a socket with unread bytes in its receive queue, or
//! receiving more of the body once closed, makes the kernel send a reset,
//! and a client that gets the reset loses the answer still waiting in its
//! own receive queue: the sandbox's `curl` saw a reset where warden had
//! written a 403. So closing first ends warden's writing (TLS close and a
//! TCP FIN), then reads and drops what the client still sends, until it
//! closes, [`LINGER_BYTES`] were read or [`LINGER_TIME`] passed; only then
//! is the socket closed. This is the lingering close web servers do.
//!
//! On a connection that stays open (HTTP/1.1 kept alive, each stream of
//! HTTP/2) the same happens one request at a time: a request body dropped
//! unread ([`Drained`]) is read to its end and dropped within the same
//! bounds, so HTTP/2 ends the refused stream cleanly instead of resetting
//! it (curl: "Stream error in the HTTP/2 framing layer") and HTTP/1.1 can
//! read the next request.

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};
use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// At most this many bytes are read and dropped after warden's own side is
/// closed.
pub(crate) const LINGER_BYTES: usize = 1 << 20;

/// For at most this long.
pub(crate) const LINGER_TIME: Duration = Duration::from_secs(2);

/// A stream whose shutdown lingers (see the module's words).
pub(crate) struct Lingering<S> {
    inner: S,
    state: Closing,
}

enum Closing {
    Open,
    /// Warden's side is closed; the client's bytes are read until the
    /// deadline or the budget ends.
    Draining {
        deadline: Pin<Box<tokio::time::Sleep>>,
        left: usize,
    },
    Closed,
}

impl<S> Lingering<S> {
    pub(crate) fn new(inner: S) -> Self {
        Lingering {
            inner,
            state: Closing::Open,
        }
    }

    pub(crate) fn into_inner(self) -> S {
        self.inner
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Lingering<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for Lingering<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let this = &mut *self;
        loop {
            match &mut this.state {
                Closing::Open => {
                    ready!(Pin::new(&mut this.inner).poll_shutdown(cx))?;
                    this.state = Closing::Draining {
                        deadline: Box::pin(tokio::time::sleep(LINGER_TIME)),
                        left: LINGER_BYTES,
                    };
                }
                Closing::Draining { deadline, left } => {
                    let mut scratch = [0u8; 8192];
                    let mut buf = ReadBuf::new(&mut scratch);
                    match Pin::new(&mut this.inner).poll_read(cx, &mut buf) {
                        // Closed by the client, or broken: nothing to wait for.
                        Poll::Ready(Ok(())) if buf.filled().is_empty() => {
                            this.state = Closing::Closed
                        }
                        Poll::Ready(Err(_)) => this.state = Closing::Closed,
                        Poll::Ready(Ok(())) => {
                            *left = left.saturating_sub(buf.filled().len());
                            if *left == 0 {
                                this.state = Closing::Closed;
                            }
                        }
                        Poll::Pending => {
                            ready!(deadline.as_mut().poll(cx));
                            this.state = Closing::Closed;
                        }
                    }
                }
                Closing::Closed => return Poll::Ready(Ok(())),
            }
        }
    }
}

/// A request body that, dropped before its end, is read to its end apart
/// (at most [`LINGER_BYTES`] for at most [`LINGER_TIME`]) and dropped then.
pub(crate) struct Drained<B: Body<Data = Bytes> + Unpin + Send + 'static> {
    body: Option<B>,
}

impl<B: Body<Data = Bytes> + Unpin + Send + 'static> Drained<B> {
    pub(crate) fn new(body: B) -> Self {
        Drained { body: Some(body) }
    }
}

impl<B: Body<Data = Bytes> + Unpin + Send + 'static> Body for Drained<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let frame = match self.body.as_mut() {
            Some(b) => ready!(Pin::new(b).poll_frame(cx)),
            None => None,
        };
        // Read to its end: nothing is left to drain.
        if frame.is_none() {
            self.body = None;
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.body.as_ref().is_none_or(Body::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        self.body
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), Body::size_hint)
    }
}

impl<B: Body<Data = Bytes> + Unpin + Send + 'static> Drop for Drained<B> {
    fn drop(&mut self) {
        let Some(mut body) = self.body.take() else {
            return;
        };
        if body.is_end_stream() {
            return;
        }
        // Outside a runtime (never, on the proxy's threads) it is dropped
        // as it is.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        runtime.spawn(async move {
            let drain = async {
                let mut left = LINGER_BYTES;
                while let Some(Ok(frame)) =
                    std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await
                {
                    let n = frame.data_ref().map_or(0, Bytes::len);
                    left = left.saturating_sub(n);
                    if left == 0 {
                        break;
                    }
                }
            };
            let _ = tokio::time::timeout(LINGER_TIME, drain).await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn an_answer_written_before_close_is_read_whole_though_the_client_was_still_sending() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let (tcp, _) = listener.accept().await.unwrap();
            let mut s = Lingering::new(tcp);
            let mut head = [0u8; 4];
            s.read_exact(&mut head).await.unwrap();
            // The answer, without reading the rest of what was sent.
            s.write_all(b"403 refused").await.unwrap();
            s.shutdown().await.unwrap();
        });
        let mut client = tokio::net::TcpStream::connect(addr).await.unwrap();
        client.write_all(b"HEAD").await.unwrap();
        // The body goes on after the answer was written and closed, as a
        // client sending a body does: without the lingering close the
        // server's kernel answers it with a reset, and the client's next
        // write fails (curl then gives up without reading the answer).
        for _ in 0..3 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            client
                .write_all(&[b'x'; 16 << 10])
                .await
                .expect("the body is taken while the server lingers");
        }
        client.shutdown().await.unwrap();
        let mut answer = Vec::new();
        client.read_to_end(&mut answer).await.unwrap();
        assert_eq!(answer, b"403 refused");
        drop(client);
        server.await.unwrap();
    }

    #[tokio::test]
    async fn a_client_that_never_closes_holds_the_close_no_longer_than_the_linger_time() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let _client = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (tcp, _) = listener.accept().await.unwrap();
        let mut s = Lingering::new(tcp);
        let start = std::time::Instant::now();
        s.shutdown().await.unwrap();
        let took = start.elapsed();
        assert!(
            took >= LINGER_TIME && took < LINGER_TIME + Duration::from_secs(2),
            "{took:?}"
        );
    }
}
