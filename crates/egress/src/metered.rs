//! The sandbox's side of a connection served by hyper (plain HTTP request
//! by request, a terminated TLS connection): the bytes already read to
//! decide it are replayed first, then the socket's; every byte is counted
//! both ways, with the moment of the last one (for the idle timeout), and,
//! when the connection counts towards the egress quota, charged to it as
//! it passes. It never decides anything about the bytes.

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// A stream with what was read before it replayed and its bytes counted.
pub(crate) struct Metered<S> {
    inner: S,
    /// Bytes before `inner`'s own (what was read to decide), and how many
    /// of them have been replayed: an offset, so a replay in small reads
    /// moves nothing.
    prefix: Vec<u8>,
    replayed: usize,
    meter: Meter,
    /// The quota's running total, when these bytes count towards it.
    quota: Option<Arc<AtomicU64>>,
}

/// What a [`Metered`] stream has moved, read while it is in use.
#[derive(Clone)]
pub(crate) struct Meter {
    read: Arc<AtomicU64>,
    written: Arc<AtomicU64>,
    /// Milliseconds since `start` of the last byte either way.
    last: Arc<AtomicU64>,
    start: Instant,
}

impl Meter {
    /// Bytes read from the stream so far (the replayed prefix included).
    pub(crate) fn read(&self) -> u64 {
        self.read.load(Relaxed)
    }

    /// Bytes written to the stream so far.
    pub(crate) fn written(&self) -> u64 {
        self.written.load(Relaxed)
    }

    /// Resolves once neither way has moved a byte for `idle`.
    pub(crate) async fn silent_for(&self, idle: Duration) {
        let idle_ms = idle.as_millis() as u64;
        loop {
            let since =
                (self.start.elapsed().as_millis() as u64).saturating_sub(self.last.load(Relaxed));
            if since >= idle_ms {
                return;
            }
            tokio::time::sleep(Duration::from_millis(idle_ms - since)).await;
        }
    }
}

impl<S> Metered<S> {
    /// `inner`, with `prefix` read first; its bytes charged to `quota`
    /// too, when there is one.
    pub(crate) fn new(inner: S, prefix: Vec<u8>, quota: Option<Arc<AtomicU64>>) -> Metered<S> {
        Metered {
            inner,
            prefix,
            replayed: 0,
            meter: Meter {
                read: Arc::new(AtomicU64::new(0)),
                written: Arc::new(AtomicU64::new(0)),
                last: Arc::new(AtomicU64::new(0)),
                start: Instant::now(),
            },
            quota,
        }
    }

    /// A handle on the counts, for whoever waits on the connection.
    pub(crate) fn meter(&self) -> Meter {
        self.meter.clone()
    }

    fn count(&self, written: bool, n: usize) {
        let way = if written {
            &self.meter.written
        } else {
            &self.meter.read
        };
        way.fetch_add(n as u64, Relaxed);
        if let Some(q) = &self.quota {
            q.fetch_add(n as u64, Relaxed);
        }
        self.meter
            .last
            .store(self.meter.start.elapsed().as_millis() as u64, Relaxed);
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Metered<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if self.replayed < self.prefix.len() {
            let from = self.replayed;
            let n = (self.prefix.len() - from).min(buf.remaining());
            buf.put_slice(&self.prefix[from..from + n]);
            self.replayed += n;
            if self.replayed == self.prefix.len() {
                // What was read to decide goes back with its last byte.
                self.prefix = Vec::new();
                self.replayed = 0;
            }
            self.count(false, n);
            return Poll::Ready(Ok(()));
        }
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        let n = buf.filled().len() - before;
        if n > 0 {
            self.count(false, n);
        }
        r
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Metered<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = &r {
            self.count(true, *n);
        }
        r
    }
    /// Several pieces in one system call: TLS writes its records as a
    /// list, and without this each record took a write of its own.
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if let Poll::Ready(Ok(n)) = &r {
            self.count(true, *n);
        }
        r
    }
    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn the_prefix_is_read_before_the_stream_and_every_byte_is_counted_and_charged() {
        let (a, mut b) = tokio::io::duplex(64);
        let quota = Arc::new(AtomicU64::new(10));
        let mut m = Metered::new(a, b"GET ".to_vec(), Some(quota.clone()));
        let meter = m.meter();
        b.write_all(b"/ HTTP/1.1").await.unwrap();
        let mut got = [0u8; 14];
        // Small reads: the prefix comes back in pieces, in order.
        m.read_exact(&mut got[..2]).await.unwrap();
        m.read_exact(&mut got[2..]).await.unwrap();
        assert_eq!(&got, b"GET / HTTP/1.1");
        m.write_all(b"ok").await.unwrap();
        assert_eq!((meter.read(), meter.written()), (14, 2));
        assert_eq!(quota.load(Relaxed), 10 + 16);
        let unmetered = Metered::new(tokio::io::empty(), b"x".to_vec(), None);
        let meter = unmetered.meter();
        let mut unmetered = unmetered;
        let mut one = Vec::new();
        unmetered.read_to_end(&mut one).await.unwrap();
        assert_eq!((one.as_slice(), meter.read()), (&b"x"[..], 1));
    }
}
