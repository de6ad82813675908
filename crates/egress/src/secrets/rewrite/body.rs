//! A body passed through a [`Rewriter`] as it streams: data rewritten in
//! slices that yield to the runtime, trailers rewritten as headers are (or
//! dropped, for a request), and a blocked pattern ending the body with an
//! error. It never decides what a replacement or a block means: it tells
//! its caller once which secrets were replaced, and what stopped it.

use super::super::coding::Budget;
use super::super::{BoxError, OutBody};
use super::{rewrite_headers, Action, Blocked, Patterns, Rewriter};
use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

/// Told once which secrets a body had replaced.
type OnReplace = Box<dyn FnOnce(&[usize]) + Send + Sync>;
/// Told what stopped a body.
type OnBlock = Box<dyn FnOnce(Blocked) + Send + Sync>;

/// The most bytes a body rewrites for one unit of tokio's task budget: a
/// task that scrubs a long body gives its thread back to the runtime after
/// at most 128 such slices, so others on the same runtime get their turn.
const SLICE: usize = 16 << 10;

/// A body passed through a [`Rewriter`]; a blocked pattern ends it with an
/// error (the request or response is cut off), reported through `on_block`.
pub(in crate::secrets) struct RewriteBody {
    inner: OutBody,
    rw: Rewriter,
    /// Data read from `inner` and not yet rewritten.
    rest: Bytes,
    /// Nothing has been read from `inner` yet: what `inner` says of its
    /// end and its length is still true of this body (see `size_hint`).
    fresh: bool,
    done: bool,
    trailers: Option<Frame<Bytes>>,
    /// Trailers are dropped (a request's: they are not looked into).
    drop_trailers: bool,
    on_replace: Option<OnReplace>,
    on_block: Option<OnBlock>,
}

impl RewriteBody {
    /// `inner` rewritten by `patterns`; `on_replace` is told once which
    /// secrets were replaced, `on_block` what stopped the body; trailers
    /// are dropped when `drop_trailers`, else rewritten as headers are.
    pub(in crate::secrets) fn new(
        inner: OutBody,
        patterns: Arc<Patterns>,
        drop_trailers: bool,
        on_replace: Option<OnReplace>,
        on_block: Option<OnBlock>,
    ) -> RewriteBody {
        RewriteBody {
            inner,
            rw: Rewriter::new(patterns),
            rest: Bytes::new(),
            fresh: true,
            done: false,
            trailers: None,
            drop_trailers,
            on_replace,
            on_block,
        }
    }
}

impl RewriteBody {
    /// This body's reading inside runs counted in `budget`, the bound of
    /// the body it is (`wire`: what it reads is the body's coded bytes).
    pub(in crate::secrets) fn within(mut self, budget: Arc<Budget>, wire: bool) -> RewriteBody {
        self.rw = Rewriter::within(self.rw.patterns.clone(), budget, wire);
        self
    }
}

impl Body for RewriteBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        this.fresh = false;
        loop {
            if this.done {
                return Poll::Ready(this.trailers.take().map(Ok));
            }
            // Each slice costs a unit of the task's budget; without one
            // left, the task yields (and is woken to go on).
            let coop = std::task::ready!(tokio::task::coop::poll_proceed(cx));
            if this.rw.patterns.list.is_empty() && this.rest.is_empty() {
                // Nothing to look for (a name with request rules and no
                // secret): each frame of data goes on as it came, not
                // copied twice through the rewriter.
                let frame = match std::task::ready!(Pin::new(&mut this.inner).poll_frame(cx)) {
                    Some(Ok(frame)) => frame,
                    Some(Err(e)) => return Poll::Ready(Some(Err(e))),
                    None => {
                        this.done = true;
                        continue;
                    }
                };
                coop.made_progress();
                match frame.into_data() {
                    Ok(data) if data.is_empty() => continue,
                    Ok(data) => return Poll::Ready(Some(Ok(Frame::data(data)))),
                    Err(other) => {
                        this.done = true;
                        this.trailers = if this.drop_trailers {
                            None
                        } else {
                            other.into_trailers().ok().map(Frame::trailers)
                        };
                        continue;
                    }
                }
            }
            let step = if !this.rest.is_empty() {
                // (`inner` is read only once `rest` is empty, so the body
                // cannot have ended while data is left here.)
                let piece = this.rest.split_to(this.rest.len().min(SLICE));
                this.rw.push(&piece)
            } else {
                match Pin::new(&mut this.inner).poll_frame(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e))),
                    Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                        Ok(data) => {
                            this.rest = data;
                            continue;
                        }
                        Err(other) => {
                            this.done = true;
                            // Trailers pass through the same patterns as the
                            // body (an echoing server may put the value there);
                            // a value that would be blocked is left out.
                            this.trailers = if this.drop_trailers {
                                None
                            } else {
                                other.into_trailers().ok().map(|t| {
                                    let (map, replaced) =
                                        rewrite_headers(&this.rw.patterns, &t, &[]);
                                    this.rw.replaced.extend(replaced);
                                    Frame::trailers(map)
                                })
                            };
                            this.rw.finish()
                        }
                    },
                    Poll::Ready(None) => {
                        this.done = true;
                        this.rw.finish()
                    }
                }
            };
            coop.made_progress();
            match step {
                Err(b) => {
                    this.done = true;
                    this.rest = Bytes::new();
                    this.trailers = None;
                    if let Some(f) = this.on_block.take() {
                        f(b);
                    }
                    return Poll::Ready(Some(Err("warden: blocked a secret in the body".into())));
                }
                Ok(out) => {
                    if !this.rw.replaced.is_empty() {
                        if let Some(f) = this.on_replace.take() {
                            f(&this.rw.replaced);
                        }
                    }
                    if !out.is_empty() {
                        return Poll::Ready(Some(Ok(Frame::data(Bytes::from(out)))));
                    }
                }
            }
        }
    }

    /// A body that has nothing says so before it is read: a request's
    /// client then sends no body at all, where it would otherwise frame
    /// an empty one (`Transfer-Encoding: chunked`) on a DELETE, an
    /// OPTIONS or a TRACE that had none.
    fn is_end_stream(&self) -> bool {
        if self.done {
            return self.trailers.is_none();
        }
        // Nothing read, so nothing held by the rewriter either.
        self.fresh && self.inner.is_end_stream()
    }

    /// Before anything is read, `inner`'s length, when the patterns
    /// cannot change it (they only block): a body with a length goes on
    /// with that length, as it was sent.
    fn size_hint(&self) -> SizeHint {
        if self.fresh && keeps_length(&self.rw.patterns) {
            self.inner.size_hint()
        } else if self.is_end_stream() {
            SizeHint::with_exact(0)
        } else {
            SizeHint::default()
        }
    }
}

/// Whether what `patterns` let through is as long as what they were
/// given: they replace nothing (they only block).
fn keeps_length(patterns: &Patterns) -> bool {
    patterns
        .list
        .iter()
        .all(|p| matches!(p.action, Action::Block(_)))
}
