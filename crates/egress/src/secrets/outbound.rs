//! Request bodies leaving through a terminated connection, scanned for
//! credential-shaped values (`warden_detect`) on the sandbox's bytes,
//! before any placeholder is substituted: the sandbox's own placeholders
//! are what it is meant to send, and are never findings; a token it read
//! somewhere and tries to send out is.
//!
//! A body that ends within [`HELD`] bytes (an API call's JSON, a form) is
//! read whole first and, when it carries one, refused with a 403 before
//! anything of the request goes upstream. A longer body is streamed, and
//! the last [`OVERLAP`] bytes seen are always held back until what follows
//! them has been scanned: a value is found before its first byte leaves,
//! and the request is then cut (the upstream gets an unfinished body,
//! never the value). What is recorded names the rule, the line and the
//! value's hash, never the value.

use super::paid::Bill;
use super::paid::Prefixed;
use super::{BoxError, OutBody};
use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, SizeHint};
use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll};
use warden_detect::{scan, Finding, OVERLAP};

/// Bytes of a body read before it is forwarded, so that a small body is
/// refused whole (paid for from the proxy's decoding pool while held).
pub(super) const HELD: usize = 64 << 10;

/// What a body's first finding says of it: rule, line, hash; never the
/// value.
pub(super) fn described(f: &Finding) -> String {
    format!(
        "a credential-shaped value (rule {}, line {}, sha256 {}…) in the request body",
        f.rule, f.line, f.hash
    )
}

/// `body` with its start read (within [`HELD`] and the pool `pool`, in
/// KiB, paid for until it is passed on): `Err` with the finding when a
/// body that ended there carries one; else the body, checked as it
/// streams.
pub(super) async fn checked(
    mut body: OutBody,
    pool: &std::sync::Arc<tokio::sync::Semaphore>,
    on_cut: Box<dyn FnOnce(Finding) + Send + Sync>,
) -> Result<OutBody, Finding> {
    if body.is_end_stream() {
        return Ok(body);
    }
    // Paid for until the start read is passed on; without room in the
    // budget, nothing is read ahead (the body is scanned as it streams).
    let paid = Bill::of(pool, HELD).ok();
    let mut read: VecDeque<Frame<Bytes>> = VecDeque::new();
    let mut data: Vec<u8> = Vec::new();
    let mut ended = false;
    while paid.is_some() && data.len() < HELD {
        match body.frame().await {
            Some(Ok(frame)) => {
                if let Some(d) = frame.data_ref() {
                    data.extend_from_slice(d);
                }
                read.push_back(frame);
            }
            // The client's own error: it meets it again as the rest of
            // the body.
            Some(Err(_)) => break,
            None => {
                ended = true;
                break;
            }
        }
    }
    if ended {
        if let Some(f) = scan(&data).into_iter().next() {
            return Err(f);
        }
        return Ok(Prefixed::paid(read, None, paid).boxed());
    }
    let rest = Prefixed::paid(read, Some(body), paid).boxed();
    Ok(Scanned {
        inner: rest,
        tail: Vec::new(),
        out: VecDeque::new(),
        trailers: None,
        ended: false,
        on_cut: Some(on_cut),
    }
    .boxed())
}

/// A body scanned as it streams, its last [`OVERLAP`] bytes held back
/// until what follows them is scanned (a value is shorter than that, so
/// one that starts in the held bytes is seen whole before any of it is
/// let go).
struct Scanned {
    inner: OutBody,
    /// Seen, not yet let go.
    tail: Vec<u8>,
    /// Judged, to be let go.
    out: VecDeque<Bytes>,
    trailers: Option<http::HeaderMap>,
    ended: bool,
    on_cut: Option<Box<dyn FnOnce(Finding) + Send + Sync>>,
}

impl Scanned {
    /// Judge `window` (the tail and what came after it) up to `cut`: what
    /// starts before `cut` is seen whole.
    fn judge(&mut self, window: Vec<u8>, cut: usize) -> Result<(), BoxError> {
        if let Some(f) = scan(&window).into_iter().find(|f| f.offset < cut as u64) {
            let why = described(&f);
            if let Some(cut) = self.on_cut.take() {
                cut(f);
            }
            return Err(why.into());
        }
        let mut window = window;
        self.tail = window.split_off(cut);
        if !window.is_empty() {
            self.out.push_back(Bytes::from(window));
        }
        Ok(())
    }
}

impl Body for Scanned {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        loop {
            if let Some(d) = this.out.pop_front() {
                return Poll::Ready(Some(Ok(Frame::data(d))));
            }
            if this.ended {
                return Poll::Ready(this.trailers.take().map(|t| Ok(Frame::trailers(t))));
            }
            match Pin::new(&mut this.inner).poll_frame(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e))),
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(d) => {
                        let mut window = std::mem::take(&mut this.tail);
                        window.extend_from_slice(&d);
                        let cut = window.len().saturating_sub(OVERLAP);
                        if let Err(e) = this.judge(window, cut) {
                            return Poll::Ready(Some(Err(e)));
                        }
                    }
                    Err(other) => {
                        this.trailers = other.into_trailers().ok();
                    }
                },
                Poll::Ready(None) => {
                    this.ended = true;
                    let window = std::mem::take(&mut this.tail);
                    let cut = window.len();
                    if let Err(e) = this.judge(window, cut) {
                        return Poll::Ready(Some(Err(e)));
                    }
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.ended && self.out.is_empty() && self.trailers.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        // The length is kept (only whole bodies go out), so a
        // Content-Length framing stays true.
        let mut hint = self.inner.size_hint();
        let held = (self.tail.len() + self.out.iter().map(Bytes::len).sum::<usize>()) as u64;
        // The upper bound first: a lower one may never pass it (an exact
        // hint of the inner body would panic the other way round).
        if let Some(u) = hint.upper() {
            hint.set_upper(u + held);
        }
        hint.set_lower(hint.lower() + held);
        hint
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// A credential-shaped value of a rule warden-detect has (an AWS
    /// access key id), made at run time so no scanner flags this file.
    fn token() -> String {
        format!("AKIA{}", "QZTX4X2MWPLK3VNB")
    }

    fn body(pieces: Vec<Vec<u8>>) -> OutBody {
        let frames: VecDeque<Frame<Bytes>> = pieces
            .into_iter()
            .map(|p| Frame::data(Bytes::from(p)))
            .collect();
        Prefixed::new(frames, None).boxed()
    }

    fn pool() -> Arc<tokio::sync::Semaphore> {
        Arc::new(tokio::sync::Semaphore::new(1024))
    }

    #[tokio::test]
    async fn a_small_body_with_a_credential_is_refused_whole_and_a_placeholder_is_not() {
        let bad = format!("{{\"key\": \"{}\"}}", token());
        let cut = Box::new(|_| {});
        let e = checked(body(vec![bad.into_bytes()]), &pool(), cut).await;
        let Err(f) = e else { panic!("refused") };
        assert!(!described(&f).contains(&token()), "never the value");
        let fine = format!("{{\"key\": \"warden-secret-{}\"}}", "0".repeat(32));
        let ok = checked(
            body(vec![fine.clone().into_bytes()]),
            &pool(),
            Box::new(|_| {}),
        )
        .await
        .unwrap_or_else(|_| panic!("a placeholder passes"));
        let sent = ok.collect().await.unwrap().to_bytes();
        assert_eq!(sent, fine.as_bytes());
    }

    #[tokio::test]
    async fn a_long_body_is_cut_before_any_byte_of_a_credential_leaves() {
        // The value straddles two pieces, well past what is read first.
        let mut whole = vec![b'a'; HELD + 100_000];
        whole.extend_from_slice(format!(" {} ", token()).as_bytes());
        whole.extend_from_slice(&vec![b'b'; 50_000]);
        let at = HELD + 100_001;
        let pieces: Vec<Vec<u8>> = whole.chunks(7000).map(<[u8]>::to_vec).collect();
        let seen = Arc::new(Mutex::new(None));
        let s = seen.clone();
        let mut b = checked(
            body(pieces),
            &pool(),
            Box::new(move |f| *s.lock().unwrap() = Some(f)),
        )
        .await
        .unwrap_or_else(|_| panic!("streamed"));
        let mut sent = Vec::new();
        let mut failed = false;
        while let Some(frame) = b.frame().await {
            match frame {
                Ok(f) => sent.extend_from_slice(f.data_ref().unwrap()),
                Err(_) => {
                    failed = true;
                    break;
                }
            }
        }
        assert!(failed, "the body ends in an error, never whole");
        assert!(
            sent.len() <= at,
            "nothing of the value left: {}",
            sent.len()
        );
        assert!(seen.lock().unwrap().is_some(), "the cut is recorded");
        // A clean body of the same size goes through byte for byte.
        let clean = vec![b'c'; HELD * 3 + 5];
        let pieces: Vec<Vec<u8>> = clean.chunks(9000).map(<[u8]>::to_vec).collect();
        let b = checked(body(pieces), &pool(), Box::new(|_| {}))
            .await
            .unwrap_or_else(|_| panic!("streamed"));
        assert_eq!(b.collect().await.unwrap().to_bytes(), Bytes::from(clean));
    }
}
