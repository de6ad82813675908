//! What a request on a terminated connection makes the terminator hold
//! beyond the connection's fixed buffers (those
//! [`crate::proxy::TERMINATED_COST`] pays for, each bounded by
//! [`super::BUFFER_LIMIT`]), paid from the proxy's pool for large buffers
//! ([`super::Terminator::decode_memory`], in KiB) for as long as it is
//! held: each request's own cost until it and its answer are done (its
//! head and the copy substituted from it, and the pieces of its body, and
//! of its answer's as it is scrubbed, in hand between stages,
//! [`request_cost`]); the start of a body read to decide it or to scan it
//! (`ruled`, `outbound`); a body read whole to substitute in it
//! ([`substituted`]); a WebSocket's relay ([`UPGRADE_COST`]).
//!
//! What the pool cannot pay for now is refused at once: it is never
//! waited for (the bytes would be held unpaid meanwhile, and a sandbox
//! could hold the pool's every byte waiting), and the session answers 503
//! with the reason `memory_budget` and records it as a denied decision.
//! Nothing here decides whether a request may go, or answers it.

use super::rewrite::{Blocked, Patterns, Rewriter};
use super::{BoxError, OutBody, BUFFER_LIMIT};
use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, SizeHint};
use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// What every request costs on top of its head, in bytes, until it and
/// its answer are done: the pieces of a body in hand between stages (a
/// frame read and not yet passed on, at most a read buffer's
/// [`BUFFER_LIMIT`]; the last [`warden_detect::OVERLAP`] bytes the
/// credential scan holds back; the rewriter's tail).
pub(super) const REQUEST_SLACK: usize = BUFFER_LIMIT + warden_detect::OVERLAP + 16 * 1024;

/// What a WebSocket's relay holds beyond its connection's fixed buffers,
/// in bytes, for as long as it runs: the TLS buffers of its own upstream
/// connection (each way), the HTTP/1.1 buffer its upgrade is read
/// through, and the two copy buffers.
pub(super) const UPGRADE_COST: usize = 3 * BUFFER_LIMIT + 16 * 1024;

/// The pool could not pay for `0` KiB more now.
#[derive(Debug, thiserror::Error)]
#[error("the proxy's memory budget cannot hold {0} KiB more now")]
pub(super) struct Unpaid(pub(super) usize);

/// What one holder has paid from the pool: given back when dropped.
pub(super) struct Bill {
    pool: Arc<Semaphore>,
    paid: Option<OwnedSemaphorePermit>,
}

impl Bill {
    /// Nothing paid yet, from `pool` (KiB).
    pub(super) fn new(pool: &Arc<Semaphore>) -> Bill {
        Bill {
            pool: pool.clone(),
            paid: None,
        }
    }

    /// A bill for `bytes`, or `Unpaid` when the pool cannot pay for them
    /// now.
    pub(super) fn of(pool: &Arc<Semaphore>, bytes: usize) -> Result<Bill, Unpaid> {
        let mut bill = Bill::new(pool);
        bill.cover(bytes)?;
        Ok(bill)
    }

    /// KiB paid.
    pub(super) fn kib(&self) -> usize {
        self.paid.as_ref().map_or(0, |p| p.num_permits())
    }

    /// Pay what is missing for `bytes` (rounded up to KiB) to be covered,
    /// at once or not at all.
    pub(super) fn cover(&mut self, bytes: usize) -> Result<(), Unpaid> {
        let more = bytes.div_ceil(1024).saturating_sub(self.kib());
        if more == 0 {
            return Ok(());
        }
        let count = u32::try_from(more).map_err(|_| Unpaid(more))?;
        let permit = self
            .pool
            .clone()
            .try_acquire_many_owned(count)
            .map_err(|_| Unpaid(more))?;
        match &mut self.paid {
            Some(paid) => paid.merge(permit),
            None => self.paid = Some(permit),
        }
        Ok(())
    }
}

/// What a request costs while it is in the terminator, in bytes: its
/// head twice (the sandbox's, and the copy substituted from it that goes
/// upstream) and [`REQUEST_SLACK`].
pub(super) fn request_cost(parts: &http::request::Parts) -> usize {
    let head: usize = parts
        .headers
        .iter()
        .map(|(k, v)| k.as_str().len() + v.len() + 32)
        .sum::<usize>()
        + parts.uri.path_and_query().map_or(0, |p| p.as_str().len())
        + parts.uri.authority().map_or(0, |a| a.as_str().len());
    2 * head + REQUEST_SLACK
}

/// A body that holds its request's [`Bill`] for as long as it lives
/// (until its last frame is passed on, or the exchange is cut): the
/// request's body and its answer's share one.
pub(super) struct Held {
    inner: OutBody,
    _bill: Arc<Bill>,
}

impl Held {
    pub(super) fn new(inner: OutBody, bill: Arc<Bill>) -> Held {
        Held { inner, _bill: bill }
    }
}

impl Body for Held {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Why a body could not be read whole for substitution.
pub(super) enum NotRead {
    /// Longer than the bound once substituted.
    TooLarge,
    /// The pool could not pay for it.
    Unpaid(Unpaid),
    /// A pattern of the body's is blocked.
    Blocked(Blocked),
    /// The sandbox's own error (its stream reset, a bad chunk).
    Failed,
}

/// A body read whole and substituted: its frames, its length, and the
/// secrets substituted in it.
pub(super) struct Substituted {
    pub(super) body: OutBody,
    pub(super) len: usize,
    pub(super) replaced: Vec<usize>,
}

/// `body` read whole through `patterns` (its trailers dropped), at most
/// `max` bytes once substituted, each piece paid from `pool` before it is
/// kept: a body that declares its length (`declared`) is paid for whole
/// before any of it is read, so that a body the pool cannot hold is
/// refused before the sandbox has sent it. The frames come back with
/// their bill, given back as they are passed on.
pub(super) async fn substituted(
    mut body: OutBody,
    patterns: Arc<Patterns>,
    pool: &Arc<Semaphore>,
    declared: Option<usize>,
    max: usize,
) -> Result<Substituted, NotRead> {
    let mut bill = Bill::new(pool);
    if let Some(n) = declared {
        if n > max {
            return Err(NotRead::TooLarge);
        }
        bill.cover(n).map_err(NotRead::Unpaid)?;
    }
    let mut rw = Rewriter::new(patterns);
    let mut frames: VecDeque<Frame<Bytes>> = VecDeque::new();
    let mut len = 0usize;
    let mut keep = |out: Vec<u8>, bill: &mut Bill| {
        if out.is_empty() {
            return Ok(());
        }
        len += out.len();
        if len > max {
            return Err(NotRead::TooLarge);
        }
        bill.cover(len).map_err(NotRead::Unpaid)?;
        frames.push_back(Frame::data(Bytes::from(out)));
        Ok(())
    };
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame.map_err(|_| NotRead::Failed)?.into_data() else {
            continue;
        };
        let out = rw.push(&data).map_err(NotRead::Blocked)?;
        keep(out, &mut bill)?;
    }
    let out = rw.finish().map_err(NotRead::Blocked)?;
    keep(out, &mut bill)?;
    let replaced = rw.replaced().to_vec();
    Ok(Substituted {
        body: Prefixed::paid(frames, None, Some(bill)).boxed(),
        len,
        replaced,
    })
}

/// A body whose first frames were read already, and what holding them
/// costs the proxy's memory budget (given back once they are passed on).
pub(super) struct Prefixed {
    read: VecDeque<Frame<Bytes>>,
    rest: Option<OutBody>,
    bill: Option<Bill>,
}

impl Prefixed {
    #[cfg(test)]
    pub(super) fn new(read: VecDeque<Frame<Bytes>>, rest: Option<OutBody>) -> Prefixed {
        Prefixed::paid(read, rest, None)
    }

    /// `read` paid for by `bill`, in front of `rest`.
    pub(super) fn paid(
        read: VecDeque<Frame<Bytes>>,
        rest: Option<OutBody>,
        bill: Option<Bill>,
    ) -> Prefixed {
        Prefixed { read, rest, bill }
    }
}

impl Body for Prefixed {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if let Some(f) = self.read.pop_front() {
            if self.read.is_empty() {
                self.bill = None;
            }
            return Poll::Ready(Some(Ok(f)));
        }
        match self.rest.as_mut() {
            Some(rest) => Pin::new(rest).poll_frame(cx),
            None => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.read.is_empty() && self.rest.as_ref().is_none_or(|r| r.is_end_stream())
    }

    /// What was read and what is left: a body's length is kept whole
    /// through the read.
    fn size_hint(&self) -> SizeHint {
        let held: u64 = self
            .read
            .iter()
            .filter_map(|f| f.data_ref().map(|d| d.len() as u64))
            .sum();
        let mut hint = match &self.rest {
            Some(rest) => rest.size_hint(),
            None => SizeHint::with_exact(0),
        };
        // The upper bound first: a lower one may never pass it.
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

    /// A bill pays at once or not at all, never more than it is asked
    /// for, and gives back all it paid when dropped.
    #[test]
    fn a_bill_pays_whole_or_not_at_all_and_gives_everything_back() {
        let pool = Arc::new(Semaphore::new(100));
        let mut a = Bill::of(&pool, 60 * 1024).unwrap();
        assert_eq!(pool.available_permits(), 40);
        assert!(a.cover(50 * 1024).is_ok(), "already covered");
        assert_eq!(pool.available_permits(), 40);
        assert!(a.cover(120 * 1024).is_err());
        assert_eq!(
            pool.available_permits(),
            40,
            "a refused payment takes nothing"
        );
        a.cover(100 * 1024 - 1).unwrap();
        assert_eq!((a.kib(), pool.available_permits()), (100, 0));
        assert!(Bill::of(&pool, 1).is_err());
        drop(a);
        assert_eq!(pool.available_permits(), 100);
    }

    /// A request's bill is given back only once both its body and its
    /// answer's are done, whichever ends first.
    #[tokio::test]
    async fn a_requests_bill_is_held_until_its_body_and_its_answer_are_both_done() {
        let pool = Arc::new(Semaphore::new(200));
        let bill = Arc::new(Bill::of(&pool, REQUEST_SLACK).unwrap());
        let held = pool.available_permits();
        assert_eq!(held, 200 - REQUEST_SLACK / 1024);
        let request = Held::new(body_of(&[b"up"]), bill.clone());
        let answer = Held::new(body_of(&[b"down"]), bill);
        assert_eq!(request.collect().await.unwrap().to_bytes(), "up");
        assert_eq!(pool.available_permits(), held, "the answer still holds it");
        assert_eq!(answer.collect().await.unwrap().to_bytes(), "down");
        assert_eq!(pool.available_permits(), 200);
    }

    fn body_of(pieces: &[&'static [u8]]) -> OutBody {
        let frames: VecDeque<Frame<Bytes>> = pieces
            .iter()
            .map(|p| Frame::data(Bytes::from_static(p)))
            .collect();
        Prefixed::new(frames, None).boxed()
    }

    /// A body read whole for substitution is paid for while it is held and
    /// until its last frame has been passed on; one the pool cannot hold
    /// is refused (a declared length before anything is read), and the
    /// pool gets everything back either way.
    #[tokio::test]
    async fn a_substituted_body_is_paid_while_held_and_refused_when_it_cannot_be() {
        let pool = Arc::new(Semaphore::new(8));
        let patterns = Arc::new(Patterns::new(Vec::new()));
        let piece: &'static [u8] = &[b'x'; 3 * 1024];
        let got = substituted(
            body_of(&[piece, piece]),
            patterns.clone(),
            &pool,
            None,
            1 << 20,
        )
        .await
        .ok()
        .unwrap();
        assert_eq!(got.len, 6 * 1024);
        assert_eq!(pool.available_permits(), 2, "held: 6 KiB paid");
        let whole = got.body.collect().await.unwrap().to_bytes();
        assert_eq!(whole.len(), 6 * 1024);
        assert_eq!(pool.available_permits(), 8, "passed on: given back");
        // More than the pool holds, as it arrives and as declared.
        let r = substituted(
            body_of(&[piece, piece, piece]),
            patterns.clone(),
            &pool,
            None,
            1 << 20,
        )
        .await;
        assert!(matches!(r, Err(NotRead::Unpaid(_))));
        let r = substituted(
            body_of(&[]),
            patterns.clone(),
            &pool,
            Some(9 * 1024),
            1 << 20,
        )
        .await;
        assert!(matches!(r, Err(NotRead::Unpaid(_))));
        let r = substituted(body_of(&[piece]), patterns, &pool, None, 1024).await;
        assert!(matches!(r, Err(NotRead::TooLarge)));
        assert_eq!(pool.available_permits(), 8);
    }
}
