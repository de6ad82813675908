//! The sandbox's first bytes on an upgraded WebSocket, held until they
//! read as a client's frame header (RFC 6455 §5.2) and refused otherwise.
//!
//! A WebSocket client sends nothing between its upgrade request and the
//! server's `101`, and after it only frames, each masked (§5.1). Bytes the
//! sandbox wrote behind the upgrade's head before the `101` (a second
//! HTTP request, pipelined) are indistinguishable by their timing once
//! they sit in the kernel's or TLS's buffers, but not by their shape: an
//! HTTP request is ASCII, and ASCII never has the high bit of its second
//! byte set, which in a frame header is the mask bit a client's frame
//! must carry. So the relay towards the upstream starts only once the
//! first bytes make a frame header a client may send; until then nothing
//! of the sandbox's side goes upstream (the other way flows from the
//! start: a server may speak first). Held bytes are handed on once, in
//! order, ahead of everything after them.
//!
//! Only the first frame is checked. The risk is an undecided request
//! reaching a server still reading HTTP; the relay starts only after the
//! upstream's `101`, so the server reads frames from its first byte on,
//! and whatever a frame's length says comes next is read as the next
//! frame's header, where an HTTP request's ASCII is an unmasked frame
//! that §5.1 obliges the server to fail. Checking every frame would cost
//! the relay a parse of every byte and close nothing more: a frame's
//! payload is relayed unread and may carry anything its server accepts.
//!
//! It never records anything itself: `refused` is told how many bytes were
//! held when the header is not a frame's.

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The most bytes a frame header takes before its masking key: two, and
/// eight of extended length.
const HEADER_MAX: usize = 10;

/// What a frame header's first bytes, read so far, say.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Verdict {
    /// Not enough bytes yet to tell.
    Undecided,
    /// A header a client may send first.
    Frame,
    /// Not a client's first frame header, for the reason given.
    NotAFrame(&'static str),
}

/// Whether `head` (the first bytes the sandbox sent after its upgrade)
/// starts a frame a client may send first. `extensions`: the `101` agreed
/// an extension, which may give the reserved bits a meaning.
pub(super) fn verdict(head: &[u8], extensions: bool) -> Verdict {
    let Some(&b0) = head.first() else {
        return Verdict::Undecided;
    };
    let (fin, rsv, opcode) = (b0 & 0x80 != 0, b0 & 0x70, b0 & 0x0f);
    if rsv != 0 && !extensions {
        return Verdict::NotAFrame("reserved bits set with no extension agreed");
    }
    let control = match opcode {
        0x1 | 0x2 => false,
        0x8..=0xa => true,
        0x0 => return Verdict::NotAFrame("a continuation with no message to continue"),
        _ => return Verdict::NotAFrame("a reserved opcode"),
    };
    if control && !fin {
        return Verdict::NotAFrame("a fragmented control frame");
    }
    let Some(&b1) = head.get(1) else {
        return Verdict::Undecided;
    };
    if b1 & 0x80 == 0 {
        return Verdict::NotAFrame("not masked");
    }
    let length = b1 & 0x7f;
    if control && length > 125 {
        return Verdict::NotAFrame("a control frame longer than 125 bytes");
    }
    match length {
        126 => {
            let Some(ext) = head.get(2..4) else {
                return Verdict::Undecided;
            };
            if u16::from_be_bytes([ext[0], ext[1]]) < 126 {
                return Verdict::NotAFrame("a length not in its shortest form");
            }
        }
        127 => {
            let Some(ext) = head.get(2..HEADER_MAX) else {
                return Verdict::Undecided;
            };
            let mut bytes = [0u8; 8];
            bytes.copy_from_slice(ext);
            let n = u64::from_be_bytes(bytes);
            if n >> 63 != 0 {
                return Verdict::NotAFrame("a length with its most significant bit set");
            }
            if n <= u64::from(u16::MAX) {
                return Verdict::NotAFrame("a length not in its shortest form");
            }
        }
        _ => {}
    }
    Verdict::Frame
}

/// Where the check stands.
enum State {
    /// Reading the first header; `refused` still to be told if it fails.
    Checking {
        head: Vec<u8>,
        refused: Box<dyn FnOnce(usize) + Send>,
    },
    /// The header passed: its bytes, from `at`, still to be handed on.
    Handing { head: Vec<u8>, at: usize },
    /// Everything after goes through as it comes.
    Through,
    /// Not a frame: the sandbox's side reads as an error from now on.
    Refused,
}

/// The sandbox's side of an upgraded WebSocket, its reads held until they
/// start with a client's frame header; writes go through unchanged.
pub(super) struct FirstFrame<S> {
    inner: S,
    extensions: bool,
    state: State,
}

impl<S> FirstFrame<S> {
    /// `refused` is told how many bytes were held if the first bytes
    /// prove not to be a frame.
    pub(super) fn new(inner: S, extensions: bool, refused: Box<dyn FnOnce(usize) + Send>) -> Self {
        FirstFrame {
            inner,
            extensions,
            state: State::Checking {
                head: Vec::with_capacity(HEADER_MAX),
                refused,
            },
        }
    }

    /// Refuse with `why`: `refused` told the bytes held, reads fail from
    /// now on.
    fn refuse(&mut self, why: &'static str) -> io::Error {
        if let State::Checking { head, refused } =
            std::mem::replace(&mut self.state, State::Refused)
        {
            refused(head.len());
        }
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("the first bytes after the upgrade are not a WebSocket frame: {why}"),
        )
    }
}

fn refused_error() -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        "the first bytes after the upgrade were not a WebSocket frame",
    )
}

impl<S: AsyncRead + Unpin> AsyncRead for FirstFrame<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            match &mut this.state {
                State::Through => return Pin::new(&mut this.inner).poll_read(cx, buf),
                State::Refused => return Poll::Ready(Err(refused_error())),
                State::Handing { head, at } => {
                    let n = (head.len() - *at).min(buf.remaining());
                    buf.put_slice(&head[*at..*at + n]);
                    *at += n;
                    if *at == head.len() {
                        this.state = State::Through;
                    }
                    return Poll::Ready(Ok(()));
                }
                State::Checking { head, .. } => {
                    // Only as many bytes as the header may still need: the
                    // rest stays where it is until the header is judged.
                    let mut more = [0u8; HEADER_MAX];
                    let mut read = ReadBuf::new(&mut more[..HEADER_MAX - head.len()]);
                    ready!(Pin::new(&mut this.inner).poll_read(cx, &mut read))?;
                    let got = read.filled();
                    if got.is_empty() {
                        if head.is_empty() {
                            // Closed before sending anything: an ordinary end.
                            this.state = State::Through;
                            return Poll::Ready(Ok(()));
                        }
                        return Poll::Ready(Err(this.refuse("it ends within a frame header")));
                    }
                    head.extend_from_slice(got);
                    match verdict(head, this.extensions) {
                        Verdict::Undecided => {}
                        Verdict::NotAFrame(why) => return Poll::Ready(Err(this.refuse(why))),
                        Verdict::Frame => {
                            let head = std::mem::take(head);
                            this.state = State::Handing { head, at: 0 };
                        }
                    }
                }
            }
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for FirstFrame<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A masked text frame carrying `payload` (its mask all zero, which
    /// leaves the payload as it is).
    fn frame(payload: &[u8]) -> Vec<u8> {
        let mut f = vec![0x81, 0x80 | payload.len() as u8, 0, 0, 0, 0];
        f.extend_from_slice(payload);
        f
    }

    #[test]
    fn no_http_request_line_reads_as_a_clients_frame() {
        for line in [
            &b"GET / HTTP/1.1\r\n"[..],
            b"DELETE /admin HTTP/1.1\r\n",
            b"POST /x HTTP/1.1\r\n",
            b"PRI * HTTP/2.0\r\n",
            b"\r\nGET / HTTP/1.1\r\n",
            b"\x16\x03\x01\x02\x00",
        ] {
            assert!(
                matches!(verdict(line, true), Verdict::NotAFrame(_)),
                "{:?}",
                String::from_utf8_lossy(line)
            );
        }
        // Every ASCII second byte lacks the mask bit, whatever the first.
        for b0 in 0..=u8::MAX {
            for b1 in 0..0x80u8 {
                assert!(matches!(
                    verdict(&[b0, b1, 0, 0, 0, 0, 0, 0, 0, 0], true),
                    Verdict::NotAFrame(_)
                ));
            }
        }
    }

    #[test]
    fn a_clients_frames_pass_and_malformed_ones_do_not() {
        assert_eq!(verdict(&frame(b"hi"), false), Verdict::Frame);
        assert_eq!(verdict(&[0x82, 0xfe, 0x01, 0x00], false), Verdict::Frame);
        assert_eq!(
            verdict(&[0x82, 0xff, 0, 0, 0, 0, 0, 1, 0, 0], false),
            Verdict::Frame
        );
        assert_eq!(verdict(&[0x89, 0x80], false), Verdict::Frame);
        assert_eq!(verdict(&[0x88, 0x82], false), Verdict::Frame);
        // Deflated (RSV1) only when an extension was agreed.
        assert_eq!(verdict(&[0xc1, 0x85], true), Verdict::Frame);
        assert!(matches!(
            verdict(&[0xc1, 0x85], false),
            Verdict::NotAFrame(_)
        ));
        for bad in [
            &[0x81, 0x05][..],                           // unmasked
            &[0x80, 0x85],                               // continuation first
            &[0x83, 0x85],                               // reserved opcode
            &[0x09, 0x80],                               // fragmented ping
            &[0x89, 0xfe, 0x01, 0x00],                   // ping over 125 bytes
            &[0x82, 0xfe, 0x00, 0x05],                   // length not shortest
            &[0x82, 0xff, 0x80, 0, 0, 0, 0, 0, 0, 0],    // top bit of length
            &[0x82, 0xff, 0, 0, 0, 0, 0, 0, 0xff, 0xff], // not shortest
        ] {
            assert!(
                matches!(verdict(bad, false), Verdict::NotAFrame(_)),
                "{bad:?}"
            );
        }
        assert_eq!(verdict(&[0x81], false), Verdict::Undecided);
        assert_eq!(verdict(&[0x82, 0xfe, 0x01], false), Verdict::Undecided);
        assert_eq!(verdict(&[0x82, 0xff, 0, 0, 0], false), Verdict::Undecided);
    }

    /// Reads everything `FirstFrame` lets through of `sent`, written in
    /// pieces of `piece` bytes, and what `refused` was told.
    async fn through(sent: Vec<u8>, piece: usize) -> (io::Result<Vec<u8>>, Option<usize>) {
        let (mut a, b) = tokio::io::duplex(64);
        let told = std::sync::Arc::new(std::sync::Mutex::new(None));
        let t = told.clone();
        let mut checked =
            FirstFrame::new(b, false, Box::new(move |n| *t.lock().unwrap() = Some(n)));
        let writer = tokio::spawn(async move {
            for chunk in sent.chunks(piece) {
                if a.write_all(chunk).await.is_err() {
                    return;
                }
                tokio::task::yield_now().await;
            }
        });
        let mut out = Vec::new();
        let got = checked.read_to_end(&mut out).await.map(|_| out);
        let _ = writer.await;
        let told = *told.lock().unwrap();
        (got, told)
    }

    #[tokio::test]
    async fn a_frame_is_handed_on_once_and_whole_however_it_was_written() {
        let mut sent = frame(b"first message");
        sent.extend_from_slice(&frame(b"second"));
        for piece in [1, 2, 3, 7, 64] {
            let (got, told) = through(sent.clone(), piece).await;
            assert_eq!(got.unwrap(), sent, "written {piece} bytes at a time");
            assert_eq!(told, None);
        }
    }

    #[tokio::test]
    async fn a_request_is_refused_with_nothing_handed_on_however_it_was_written() {
        let sent = b"DELETE /admin HTTP/1.1\r\nHost: x\r\n\r\n".to_vec();
        for piece in [1, 2, 64] {
            let (got, told) = through(sent.clone(), piece).await;
            assert_eq!(got.unwrap_err().kind(), io::ErrorKind::InvalidData);
            assert!(
                told.is_some_and(|n| (1..=HEADER_MAX).contains(&n)),
                "{told:?}"
            );
        }
    }

    #[tokio::test]
    async fn a_side_that_ends_without_sending_ends_cleanly_and_one_that_ends_in_a_header_is_refused(
    ) {
        let (got, told) = through(Vec::new(), 1).await;
        assert_eq!(got.unwrap(), Vec::<u8>::new());
        assert_eq!(told, None);
        let (got, told) = through(vec![0x82, 0xfe, 0x01], 1).await;
        assert!(got.is_err());
        assert_eq!(told, Some(3));
    }
}
