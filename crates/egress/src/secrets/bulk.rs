//! The upstream's side of a terminated connection read in bulk, so that a
//! large response crosses the proxy in few, large pieces.
//!
//! Two layers, one below the upstream's TLS and one above it:
//! - below, the socket is read ahead ([`read_ahead`]): rustls asks its
//!   transport for at most 4 KiB at a time, four or five system calls per
//!   16 KiB record of a download; read ahead, one call takes whatever the
//!   kernel holds (up to [`crate::secrets::BUFFER_LIMIT`]) and rustls's
//!   small reads are copies from memory;
//! - above, [`Gathered`] hands HTTP every decrypted record already there
//!   in one read, where the TLS stream gives what one read of its
//!   transport completed (in a download, one 16 KiB record): hyper's
//!   client then reads a response's body in pieces of up to its buffer's
//!   size, not of a record, and each piece is one frame passed from the
//!   upstream's task to the sandbox's (a wake-up of another task, often
//!   on the other thread) and one write towards the sandbox.
//!
//! Neither layer looks at or changes a byte: what the response scrub and
//! the rules see is the same stream, in larger frames.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, BufReader, ReadBuf};

/// `stream` with its reads taken ahead into a buffer of `capacity`
/// bytes; writes pass through untouched.
pub(super) fn read_ahead<S: AsyncRead + AsyncWrite>(stream: S, capacity: usize) -> BufReader<S> {
    BufReader::with_capacity(capacity, stream)
}

/// A stream whose reads fill the caller's buffer with whatever the inner
/// stream can give without waiting, not only its first piece.
pub(super) struct Gathered<S> {
    inner: S,
    /// An error met after some bytes had been read: those bytes are
    /// handed over first, the error at the next read (never lost, so a
    /// cut response cannot look complete).
    failed: Option<io::Error>,
}

impl<S> Gathered<S> {
    pub(super) fn new(inner: S) -> Gathered<S> {
        Gathered {
            inner,
            failed: None,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Gathered<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Some(e) = this.failed.take() {
            return Poll::Ready(Err(e));
        }
        let start = buf.filled().len();
        loop {
            let before = buf.filled().len();
            match Pin::new(&mut this.inner).poll_read(cx, buf) {
                Poll::Ready(Ok(())) => {
                    // The end (nothing more), or the caller's buffer full.
                    if buf.filled().len() == before || buf.remaining() == 0 {
                        return Poll::Ready(Ok(()));
                    }
                }
                Poll::Ready(Err(e)) if buf.filled().len() > start => {
                    this.failed = Some(e);
                    return Poll::Ready(Ok(()));
                }
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                // Waiting is only for a read that has nothing yet (the
                // inner stream keeps the waker and wakes the task later,
                // which then finds what came).
                Poll::Pending if buf.filled().len() > start => return Poll::Ready(Ok(())),
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Gathered<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests;
