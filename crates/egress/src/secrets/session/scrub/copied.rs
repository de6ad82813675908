//! A response body from a host sent secrets in headers only, read through
//! a decoded copy: when its first bytes show compressed data nobody
//! declared (gzip, zlib, and again inside each), the sandbox gets the
//! bytes as the server sent them (a package's tarball keeps its digest),
//! while a copy is decoded, within the body's bound ([`Budget`]), and
//! read for every secret's value in every spelling the scrub reads.
//!
//! Coded bytes are held back until what they decode to has been read
//! clean: a prefix of the body goes on only once the copy's decoder has
//! taken it and given all it decodes to, and the scrub has decided every
//! byte of that (an occurrence of a value that begins there, even one
//! that ends further on, is found before the prefix goes). So the sandbox
//! never holds coded bytes whose decoding holds a value. A copy that
//! holds one, that goes past its bound, that does not decode, or that
//! would hold back more than [`HOLD_MAX`] coded bytes cuts the body: the
//! sandbox gets what was proved clean, then an error (a cut-off
//! response), and the session records why.
//!
//! Compressed data the copy cannot read (zip, zstd, ...) and data that
//! is not compressed pass as they came: this module never changes a
//! byte, and never decides what a host's plain bytes are scrubbed of (the
//! body's rewriter after it does).

use crate::decision::{Reason, SecretAction};
use crate::secrets::coding::{self, Budget, Over, Pipeline, Pulled, Waiting};
use crate::secrets::paid::Bill;
use crate::secrets::rewrite::{Blocked, Rewriter, Violation};
use crate::secrets::session::Session;
use crate::secrets::sniff::{self, Sniffed};
use crate::secrets::{BoxError, OutBody};
use bytes::{Buf, Bytes};
use hyper::body::{Body, Frame, SizeHint};
use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

/// The most coded bytes held back while their decoding is read (a
/// stream that decodes to nothing for megabytes, empty blocks or a
/// long header, holds them all).
pub(super) const HOLD_MAX: usize = 4 << 20;

/// Why the copy cut the body.
enum Cut {
    /// A secret's value in the decoded copy.
    Value(usize),
    /// Escapes nested deeper than the scrub reads.
    Nested,
    /// Past the body's bound (the budget has told the session already).
    Over,
    /// The copy cannot be read to the end.
    Unreadable(String),
}

/// What the body is, once its first bytes have come.
enum Phase {
    /// Reading its first [`sniff::HEAD`] bytes.
    Sniffing,
    /// Not compressed data the copy reads: passed as it is.
    Plain,
    /// Read through its decoded copy.
    Copied(Box<Copy>),
    /// Cut: nothing more.
    Cut,
}

/// The decoded copy and what it has proved.
struct Copy {
    pipeline: Pipeline,
    /// The first bytes of what the last stage gives, while they are read
    /// to tell whether it is compressed again.
    head: Option<Vec<u8>>,
    rw: Rewriter,
    /// Bytes of the copy's own (the last stage's output) given to the
    /// scrub, and how many of them it decided clean (what it let out:
    /// while nothing is replaced, its output is its input).
    scanned: u64,
    clean: u64,
    /// (coded bytes, copy bytes): each time the decoder ran dry, how much
    /// of the copy the coded bytes so far decode to.
    marks: VecDeque<(u64, u64)>,
    waiting: Option<(usize, Waiting)>,
    /// The copy is read to its end (and proved clean).
    done: bool,
}

/// A body read through its decoded copy (see the module's comment).
pub(super) struct Copied {
    inner: OutBody,
    s: Arc<Session>,
    budget: Arc<Budget>,
    counts_coded: bool,
    phase: Phase,
    /// Coded bytes read and not yet handed on; the first stands at
    /// `held_at` of the body.
    held: VecDeque<Bytes>,
    held_at: u64,
    held_len: usize,
    bill: Bill,
    /// Coded bytes read from `inner`.
    read: u64,
    /// Coded bytes that may go on.
    free: u64,
    ended: bool,
    trailers: Option<Frame<Bytes>>,
    fresh: bool,
}

impl Copied {
    /// `inner` read through a copy decoded within `budget`
    /// (`counts_coded`: `inner` is the body's coded bytes, not the output
    /// of codings its head declared, already counted).
    pub(super) fn new(
        inner: OutBody,
        s: Arc<Session>,
        budget: Arc<Budget>,
        counts_coded: bool,
    ) -> Copied {
        let bill = Bill::new(&s.term.decode_memory);
        Copied {
            inner,
            s,
            budget,
            phase: Phase::Sniffing,
            counts_coded,
            held: VecDeque::new(),
            held_at: 0,
            held_len: 0,
            bill,
            read: 0,
            free: 0,
            ended: false,
            trailers: None,
            fresh: true,
        }
    }

    /// Coded bytes that may go on now, at most one held piece.
    fn release(&mut self) -> Option<Bytes> {
        let front = self.held.front_mut()?;
        let may = self.free.saturating_sub(self.held_at);
        if may == 0 {
            return None;
        }
        let out = if (front.len() as u64) <= may {
            self.held.pop_front()?
        } else {
            let n = usize::try_from(may).unwrap_or(usize::MAX);
            let out = front.slice(..n);
            front.advance(n);
            out
        };
        self.held_at += out.len() as u64;
        self.held_len -= out.len();
        Some(out)
    }

    /// One frame of `inner` read: data held (and fed to the copy), the
    /// end or trailers noted. `Ready(Err)` ends the body.
    fn read_inner(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        match std::task::ready!(Pin::new(&mut self.inner).poll_frame(cx)) {
            Some(Err(e)) => Poll::Ready(Err(e)),
            Some(Ok(frame)) => match frame.into_data() {
                Ok(data) => {
                    self.read += data.len() as u64;
                    match &self.phase {
                        Phase::Copied(c) if !c.done => c.pipeline.feed(&data),
                        _ => {}
                    }
                    self.held_len += data.len();
                    self.held.push_back(data);
                    Poll::Ready(Ok(()))
                }
                Err(other) => {
                    self.ended = true;
                    self.trailers = Some(other);
                    Poll::Ready(Ok(()))
                }
            },
            None => {
                self.ended = true;
                Poll::Ready(Ok(()))
            }
        }
    }

    /// The first bytes have come (or all there are): what the body is.
    fn sniffed(&mut self) {
        let head: Vec<u8> = self
            .held
            .iter()
            .flat_map(|b| b.iter().copied())
            .take(sniff::HEAD)
            .collect();
        let Some(Sniffed::Coded(coding)) = sniff::sniff(&head) else {
            self.phase = Phase::Plain;
            self.free = u64::MAX;
            return;
        };
        let pipeline = Pipeline::new(
            &[coding],
            &self.s.term.decode_memory,
            Some(self.budget.clone()),
            self.counts_coded,
        );
        for piece in &self.held {
            pipeline.feed(piece);
        }
        self.phase = Phase::Copied(Box::new(Copy {
            pipeline,
            head: Some(Vec::new()),
            rw: Rewriter::within(self.s.scrub.clone(), self.budget.clone(), false),
            scanned: 0,
            clean: 0,
            marks: VecDeque::new(),
            waiting: None,
            done: false,
        }));
    }

    /// The body cut for `why`: recorded, and the error it ends with.
    fn cut(&mut self, why: Cut) -> BoxError {
        self.phase = Phase::Cut;
        self.held.clear();
        self.trailers = None;
        let s = &self.s;
        let said = match why {
            Cut::Value(secret) => {
                let name = s.term.secrets.get(secret).map_or("?", |x| x.name.as_str());
                (s.record)(s.decision_for(
                    secret,
                    SecretAction::Blocked,
                    format!("the rest of a response from {} was withheld: compressed data it passes as the server sent it decodes to the value of secret {name}", s.name),
                    Some(Reason::PackedValue),
                ));
                "compressed data that decodes to a secret's value"
            }
            Cut::Nested => {
                for i in 0..s.term.secrets.len() {
                    (s.record)(s.blocked(Blocked {
                        secret: i,
                        violation: Violation::Nested,
                    }));
                }
                "compressed data that decodes to escapes nested deeper than warden reads"
            }
            // Recorded by the budget when it was spent.
            Cut::Over => "compressed data that decodes past warden's bound",
            Cut::Unreadable(e) => {
                for i in 0..s.term.secrets.len() {
                    (s.record)(s.decision_for(
                        i,
                        SecretAction::Blocked,
                        format!("the rest of a response from {} was withheld: its compressed data could not be read to check it for the value ({e})", s.name),
                        Some(Reason::ResponseWithheld),
                    ));
                }
                "compressed data warden could not read to check it"
            }
        };
        format!("warden: the response was cut: {said}").into()
    }

    /// One step of the copy: `Ready(Ok)` when it moved (or the body must
    /// be read on), `Ready(Err)` when the body is cut.
    fn step(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Cut>> {
        let Phase::Copied(c) = &mut self.phase else {
            return Poll::Ready(Ok(()));
        };
        if let Some((k, wait)) = c.waiting.as_mut() {
            match std::task::ready!(wait.as_mut().poll(cx)) {
                Ok(paid) => {
                    let k = *k;
                    c.pipeline.paid(k, paid);
                    c.waiting = None;
                }
                Err(_) => {
                    return Poll::Ready(Err(Cut::Unreadable(
                        "the proxy's memory budget is closed".into(),
                    )))
                }
            }
        }
        match c.pipeline.next() {
            Ok(Pulled::Data(d)) => Poll::Ready(c.copied(&d, false)),
            Ok(Pulled::End) => {
                let r = c.copied(&[], true);
                // (Its first bytes may have shown one more coding.)
                if r.is_ok() && c.head.is_none() {
                    // Proved clean to its end: the rest of the body (a
                    // stream's end may leave bytes the decoder never
                    // wanted) goes as it is, through the scrub after.
                    c.done = true;
                    self.free = u64::MAX;
                }
                Poll::Ready(r)
            }
            Ok(Pulled::NeedMemory(k, kib)) => {
                c.waiting = Some((k, c.pipeline.wait_for(k, kib)));
                Poll::Ready(Ok(()))
            }
            Ok(Pulled::NeedInput) => {
                // Everything the coded bytes so far decode to is out.
                let given = c.scanned + c.head.as_ref().map_or(0, |h| h.len() as u64);
                c.marks.push_back((self.read, given));
                self.free = self.free.max(c.proved());
                if self.ended {
                    c.pipeline.end_input();
                    return Poll::Ready(Ok(()));
                }
                match std::task::ready!(self.read_inner(cx)) {
                    Ok(()) => Poll::Ready(Ok(())),
                    Err(e) => Poll::Ready(Err(Cut::Unreadable(e.to_string()))),
                }
            }
            Err(e) if e.get_ref().is_some_and(|e| e.is::<Over>()) => Poll::Ready(Err(Cut::Over)),
            Err(e) => Poll::Ready(Err(Cut::Unreadable(e.to_string()))),
        }
    }
}

impl Copy {
    /// `d`, the next bytes of the last stage's output (`last`: it
    /// ended), read: told whether it is compressed again, then scrubbed.
    fn copied(&mut self, d: &[u8], last: bool) -> Result<(), Cut> {
        if let Some(head) = self.head.as_mut() {
            head.extend_from_slice(d);
            if head.len() < sniff::HEAD && !last {
                return Ok(());
            }
            let head = self.head.take().unwrap_or_default();
            if let Some(Sniffed::Coded(coding)) = sniff::sniff(&head) {
                if self.pipeline.depth() >= coding::MAX_CODINGS {
                    return Err(Cut::Unreadable(format!(
                        "data compressed more than {} times over",
                        coding::MAX_CODINGS
                    )));
                }
                // What was marked was of the stage before: its output is
                // now read again.
                self.pipeline.then(coding, &head, last);
                self.marks.clear();
                self.head = Some(Vec::new());
                self.done = false;
                return Ok(());
            }
            return self.scrub(&head, last);
        }
        self.scrub(d, last)
    }

    fn scrub(&mut self, d: &[u8], last: bool) -> Result<(), Cut> {
        self.scanned += d.len() as u64;
        let mut out = Vec::new();
        if !d.is_empty() {
            out = self.rw.push(d).map_err(blocked)?;
        }
        if last {
            out.extend(self.rw.finish().map_err(blocked)?);
        }
        if let Some(secret) = self.rw.replaced().first() {
            return Err(Cut::Value(*secret));
        }
        // Nothing replaced: what came out is the copy's bytes as they
        // were, every one of them decided.
        self.clean += out.len() as u64;
        Ok(())
    }

    /// The coded bytes whose decoding the scrub has decided clean.
    fn proved(&mut self) -> u64 {
        let mut free = 0;
        while let Some(&(coded, copy)) = self.marks.front() {
            if copy > self.clean || self.head.is_some() {
                break;
            }
            free = coded;
            self.marks.pop_front();
        }
        free
    }
}

fn blocked(b: Blocked) -> Cut {
    match b.violation {
        Violation::Nested => Cut::Nested,
        _ => Cut::Value(b.secret),
    }
}

impl Body for Copied {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        this.fresh = false;
        loop {
            if let Some(out) = this.release() {
                return Poll::Ready(Some(Ok(Frame::data(out))));
            }
            match &this.phase {
                Phase::Cut => return Poll::Ready(None),
                Phase::Plain => {
                    if this.ended {
                        return Poll::Ready(this.trailers.take().map(Ok));
                    }
                    // Nothing held: frames go on as they come.
                    return match std::task::ready!(Pin::new(&mut this.inner).poll_frame(cx)) {
                        Some(Ok(frame)) => Poll::Ready(Some(Ok(frame))),
                        Some(Err(e)) => Poll::Ready(Some(Err(e))),
                        None => {
                            this.ended = true;
                            Poll::Ready(None)
                        }
                    };
                }
                Phase::Sniffing => {
                    if this.held_len >= sniff::HEAD || this.ended {
                        this.sniffed();
                        continue;
                    }
                    if let Err(e) = std::task::ready!(this.read_inner(cx)) {
                        return Poll::Ready(Some(Err(e)));
                    }
                    continue;
                }
                Phase::Copied(c) if c.done => {
                    if this.ended {
                        return Poll::Ready(this.trailers.take().map(Ok));
                    }
                    if let Err(e) = std::task::ready!(this.read_inner(cx)) {
                        return Poll::Ready(Some(Err(e)));
                    }
                    continue;
                }
                Phase::Copied(_) => {}
            }
            // Each step costs a unit of the task's budget: a long body's
            // copy gives its thread back to the runtime now and then.
            let coop = std::task::ready!(tokio::task::coop::poll_proceed(cx));
            let step = this.step(cx);
            coop.made_progress();
            match step {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Ok(())) => {}
                Poll::Ready(Err(why)) => return Poll::Ready(Some(Err(this.cut(why)))),
            }
            if this.held_len > HOLD_MAX || this.bill.cover(this.held_len).is_err() {
                let why = Cut::Unreadable(format!(
                    "more than {} KiB of it decode to nothing read yet",
                    this.held_len / 1024
                ));
                return Poll::Ready(Some(Err(this.cut(why))));
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.fresh && self.inner.is_end_stream()
    }

    /// Its bytes are the server's: as long as `inner` says.
    fn size_hint(&self) -> SizeHint {
        if self.fresh {
            self.inner.size_hint()
        } else {
            SizeHint::default()
        }
    }
}

#[cfg(test)]
mod tests;
