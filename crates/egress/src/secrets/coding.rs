//! Content and transfer codings of responses from a secret's host: a body
//! in a coding the scrubber can read (gzip, deflate in its zlib or raw
//! form, brotli, stacked in any order) is decoded as it streams, so that
//! it reaches the sandbox in the identity coding and scrubbed; any other
//! coding is named, and the session withholds the response. It never
//! passes coded bytes on.
//!
//! What decoding holds is paid from the proxy's memory budget
//! ([`DECODE_POOL_KIB`]): each stage when it starts, a brotli stage for
//! the window its stream declares (up to 16 MiB) and its tables. A body
//! whose codings could need more than the pool holds is withheld (502);
//! one whose stage cannot be paid yet waits (reads nothing more from the
//! upstream) until other bodies give memory back.

pub(in crate::secrets) mod bound;

pub(super) use bound::{allowed as bound_of, Budget, OnOver, Over};

use super::{BoxError, OutBody};
use bytes::Bytes;
use hyper::body::{Body, Frame};
use std::collections::VecDeque;
use std::io::Read;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// More codings than this on one body are refused (nobody stacks them so
/// deep but someone hiding something).
pub(super) const MAX_CODINGS: usize = 4;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Coding {
    Gzip,
    Deflate,
    Brotli,
}

/// The codings to undo on a response's body, in the order to undo them
/// (the last applied first); `Err` names a coding that cannot be read.
pub(super) fn to_undo(headers: &http::HeaderMap) -> Result<Vec<Coding>, String> {
    let listed = |name: http::header::HeaderName| -> Vec<String> {
        headers
            .get_all(name)
            .iter()
            .flat_map(|v| {
                String::from_utf8_lossy(v.as_bytes())
                    .split(',')
                    .map(|c| c.trim().to_ascii_lowercase())
                    .filter(|c| !c.is_empty())
                    .collect::<Vec<_>>()
            })
            .collect()
    };
    // Content codings were applied first, transfer codings after them;
    // `chunked` is the framing hyper has already undone.
    let mut applied = listed(http::header::CONTENT_ENCODING);
    applied.extend(
        listed(http::header::TRANSFER_ENCODING)
            .into_iter()
            .filter(|c| c != "chunked"),
    );
    let mut out = Vec::new();
    for c in applied.iter().rev() {
        match c.as_str() {
            "identity" => {}
            "gzip" | "x-gzip" => out.push(Coding::Gzip),
            "deflate" => out.push(Coding::Deflate),
            "br" => out.push(Coding::Brotli),
            other => return Err(other.to_string()),
        }
    }
    if out.len() > MAX_CODINGS {
        return Err(applied.join(", "));
    }
    Ok(out)
}

/// What decoding all the bodies of a sandbox's terminated connections may
/// hold at once, in KiB: the half of the proxy's memory budget that large
/// relay buffers are lent from (they are lent, and given back, from the
/// same semaphore).
pub const DECODE_POOL_KIB: u32 = crate::proxy::MEMORY_BUDGET_KIB / 2;

/// What any stage holds besides its coding's own state, in KiB: the
/// coded bytes waiting for it and a step decoded, [`STEP`] each, and
/// gzip's or deflate's 32 KiB window with its tables.
const STAGE_KIB: u32 = 192;

/// What a brotli stage holds besides its window, in KiB: its Huffman
/// tables (literals, commands and distances, up to 256 trees each of
/// 1,080 four-byte codes) and its context maps.
const BROTLI_TABLES_KIB: u32 = 3 * 256 * 1080 * 4 / 1024 + 64;

/// The largest window of the `br` coding (RFC 7932: 16 MiB less 16).
const BROTLI_MAX_WINDOW_BITS: u32 = 24;

/// The most a stage of `coding` can hold, in KiB.
fn most_kib(coding: Coding) -> u32 {
    match coding {
        Coding::Brotli => STAGE_KIB + BROTLI_TABLES_KIB + (1 << (BROTLI_MAX_WINDOW_BITS - 10)),
        Coding::Gzip | Coding::Deflate => STAGE_KIB,
    }
}

/// Why a body is withheld before any of it is decoded: its codings could
/// need more memory than the whole pool (two brotli stages do).
pub(super) fn too_costly(codings: &[Coding]) -> Option<String> {
    let most: u32 = codings.iter().map(|c| most_kib(*c)).sum();
    (most > DECODE_POOL_KIB).then(|| {
        format!(
            "its codings could need {} MiB to decode, more than the {} MiB the proxy's memory budget keeps for decoding",
            most.div_ceil(1024),
            DECODE_POOL_KIB / 1024
        )
    })
}

/// The window a brotli stream declares, from its first byte (RFC 7932,
/// section 9.1: WBITS, 1 to 7 bits). Large-window brotli (not the `br`
/// coding, but what the decoder would otherwise accept, with windows up
/// to 1 GiB) is refused.
fn brotli_window_kib(first: u8) -> std::io::Result<u32> {
    let bits = if first & 1 == 0 {
        16
    } else if (first >> 1) & 7 != 0 {
        17 + u32::from((first >> 1) & 7)
    } else {
        match (first >> 4) & 7 {
            0 => 17,
            1 => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    "a large-window brotli stream, which is not the br coding (RFC 7932)",
                ))
            }
            n => 8 + u32::from(n),
        }
    };
    // A window of 2^bits, at least a KiB.
    Ok(1u32 << bits.saturating_sub(10))
}

/// The most a decoded body yields at once, and the most any stage of its
/// decoding holds decoded: a small coded body can stand for gigabytes
/// (a "bomb", several codings stacked multiply it), so nothing is decoded
/// ahead of what the sandbox takes.
const STEP: usize = 64 * 1024;

/// Coded bytes not yet decoded, shared between whoever adds them and the
/// decoder reading them. Read dry, it says `WouldBlock` (more may come),
/// which the decoders return unchanged and resume after; ended, EOF.
#[derive(Clone, Default)]
struct Queue(Arc<Mutex<QueueState>>);

#[derive(Default)]
struct QueueState {
    bytes: VecDeque<u8>,
    ended: bool,
}

impl Queue {
    fn with<R>(&self, f: impl FnOnce(&mut QueueState) -> R) -> R {
        f(&mut self.0.lock().unwrap_or_else(|e| e.into_inner()))
    }
    fn push(&self, data: &[u8]) {
        self.with(|q| q.bytes.extend(data));
    }
    fn end(&self) {
        self.with(|q| q.ended = true);
    }
    /// Whether enough has come to tell zlib from raw deflate (or all has).
    fn head(&self) -> Option<Vec<u8>> {
        self.with(|q| {
            (q.bytes.len() >= 2 || q.ended).then(|| q.bytes.iter().take(2).copied().collect())
        })
    }
}

impl Read for Queue {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.with(|q| {
            if q.bytes.is_empty() {
                return if q.ended {
                    Ok(0)
                } else {
                    Err(std::io::ErrorKind::WouldBlock.into())
                };
            }
            let n = buf.len().min(q.bytes.len());
            for (b, v) in buf.iter_mut().zip(q.bytes.drain(..n)) {
                *b = v;
            }
            Ok(n)
        })
    }
}

/// One coding undone, reading its coded bytes from `input`.
struct Stage {
    input: Queue,
    coding: Coding,
    /// Made once the first bytes tell which it is (`deflate` is zlib or raw).
    decoder: Option<Box<dyn Read + Send + Sync>>,
    done: bool,
    /// What this stage holds, paid from the pool while its decoder lives.
    paid: Option<OwnedSemaphorePermit>,
    /// KiB it waits for before it can start (see [`Pulled::NeedMemory`]).
    wants: Option<u32>,
    pool: Arc<Semaphore>,
}

impl Stage {
    fn new(coding: Coding, pool: Arc<Semaphore>) -> Stage {
        Stage {
            input: Queue::default(),
            coding,
            decoder: None,
            done: false,
            paid: None,
            wants: None,
            pool,
        }
    }

    /// What this stage will hold, in KiB, once its first bytes are here
    /// (`None` until then).
    fn cost_kib(&self) -> std::io::Result<Option<u32>> {
        match self.coding {
            Coding::Gzip | Coding::Deflate => Ok(Some(STAGE_KIB)),
            Coding::Brotli => match self.input.head() {
                None => Ok(None),
                Some(head) => match head.first() {
                    // An empty body: the decoder says what is wrong.
                    None => Ok(Some(STAGE_KIB)),
                    Some(b) => Ok(Some(STAGE_KIB + BROTLI_TABLES_KIB + brotli_window_kib(*b)?)),
                },
            },
        }
    }

    /// Pay for this stage before its decoder is made: `WouldBlock` with
    /// [`Stage::wants`] set when the pool cannot pay now, or when its first
    /// bytes have not come.
    fn pay(&mut self) -> std::io::Result<()> {
        if self.paid.is_some() {
            return Ok(());
        }
        let Some(kib) = self.cost_kib()? else {
            return Err(std::io::ErrorKind::WouldBlock.into());
        };
        match self.pool.clone().try_acquire_many_owned(kib) {
            Ok(p) => {
                self.paid = Some(p);
                Ok(())
            }
            Err(_) => {
                self.wants = Some(kib);
                Err(std::io::ErrorKind::WouldBlock.into())
            }
        }
    }

    /// Up to `buf.len()` decoded bytes: `Ok(0)` at the end, `WouldBlock`
    /// when its input ran dry first.
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.done {
            return Ok(0);
        }
        if self.decoder.is_none() {
            self.pay()?;
            let src = std::io::BufReader::with_capacity(8 * 1024, self.input.clone());
            self.decoder = Some(match self.coding {
                Coding::Gzip => Box::new(flate2::bufread::MultiGzDecoder::new(src)),
                Coding::Brotli => Box::new(brotli::Decompressor::new(self.input.clone(), 4096)),
                Coding::Deflate => {
                    let Some(head) = self.input.head() else {
                        return Err(std::io::ErrorKind::WouldBlock.into());
                    };
                    if head.len() < 2 {
                        self.done = true;
                        return if head.is_empty() {
                            Ok(0)
                        } else {
                            Err(std::io::Error::new(
                                std::io::ErrorKind::InvalidData,
                                "a deflate body of one byte",
                            ))
                        };
                    }
                    // RFC 1950's header: compression method 8, and a check
                    // making the first two bytes a multiple of 31.
                    let zlib = head[0] & 0x0f == 8
                        && (u16::from(head[0]) << 8 | u16::from(head[1])) % 31 == 0;
                    if zlib {
                        Box::new(flate2::bufread::ZlibDecoder::new(src))
                    } else {
                        Box::new(flate2::bufread::DeflateDecoder::new(src))
                    }
                }
            });
        }
        let Some(d) = self.decoder.as_mut() else {
            return Ok(0);
        };
        let n = d.read(buf)?;
        if n == 0 {
            // What it held is given back at once.
            self.done = true;
            self.decoder = None;
            self.paid = None;
        }
        Ok(n)
    }
}

/// What a pull from the codings gave.
pub(super) enum Pulled {
    Data(Vec<u8>),
    /// The first stage wants more of the body.
    NeedInput,
    /// Stage `k` waits for this many KiB of the pool to start.
    NeedMemory(usize, u32),
    End,
}

/// The codings to undo, the last applied first; each stage is fed by the
/// one before, a step at a time, only when it has run dry. What every
/// stage decodes is counted against the body's [`Budget`], where it has
/// one.
pub(super) struct Pipeline {
    stages: Vec<Stage>,
    budget: Option<Arc<Budget>>,
    /// What is fed is the body's coded bytes (not the output of another
    /// pipeline under the same budget).
    counts_coded: bool,
}

impl Pipeline {
    /// `codings` undone with memory paid from `pool`, within `budget`
    /// (its coded bytes counted here when `counts_coded`).
    pub(super) fn new(
        codings: &[Coding],
        pool: &Arc<Semaphore>,
        budget: Option<Arc<Budget>>,
        counts_coded: bool,
    ) -> Pipeline {
        Pipeline {
            stages: codings
                .iter()
                .map(|c| Stage::new(*c, pool.clone()))
                .collect(),
            budget,
            counts_coded,
        }
    }

    /// How many codings are undone.
    pub(super) fn depth(&self) -> usize {
        self.stages.len()
    }

    /// One more coding to undo, on what the last stage gives: `head`,
    /// what it gave already, and (when `ended`) nothing more.
    pub(super) fn then(&mut self, coding: Coding, head: &[u8], ended: bool) {
        let pool = match self.stages.last() {
            Some(s) => s.pool.clone(),
            None => return,
        };
        let stage = Stage::new(coding, pool);
        stage.input.push(head);
        if ended {
            stage.input.end();
        }
        self.stages.push(stage);
    }

    /// Memory for stage `k`, once the pool can pay `kib` KiB.
    pub(super) fn wait_for(&self, k: usize, kib: u32) -> Waiting {
        Box::pin(self.stages[k].pool.clone().acquire_many_owned(kib))
    }

    /// Stage `k` paid for.
    pub(super) fn paid(&mut self, k: usize, permit: OwnedSemaphorePermit) {
        self.stages[k].paid = Some(permit);
    }

    pub(super) fn feed(&self, data: &[u8]) {
        if self.counts_coded {
            if let Some(b) = &self.budget {
                b.coded(data.len());
            }
        }
        if let Some(s) = self.stages.first() {
            s.input.push(data);
        }
    }

    pub(super) fn end_input(&self) {
        if let Some(s) = self.stages.first() {
            s.input.end();
        }
    }

    /// Count `n` decoded bytes against the budget.
    fn spent(&self, n: usize) -> std::io::Result<()> {
        match &self.budget {
            Some(b) => b.decoded(n).map_err(std::io::Error::other),
            None => Ok(()),
        }
    }

    /// At most [`STEP`] decoded bytes from stage `k` (the last for the
    /// body's own).
    fn pull(&mut self, k: usize) -> std::io::Result<Pulled> {
        let mut buf = vec![0u8; STEP];
        loop {
            match self.stages[k].read(&mut buf) {
                Ok(0) => return Ok(Pulled::End),
                Ok(n) => {
                    self.spent(n)?;
                    buf.truncate(n);
                    return Ok(Pulled::Data(buf));
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
            if let Some(kib) = self.stages[k].wants.take() {
                return Ok(Pulled::NeedMemory(k, kib));
            }
            if k == 0 {
                return Ok(Pulled::NeedInput);
            }
            // Stage k is dry: one step of the stage before it.
            match self.pull(k - 1)? {
                Pulled::Data(d) => self.stages[k].input.push(&d),
                Pulled::End => self.stages[k].input.end(),
                Pulled::NeedInput => return Ok(Pulled::NeedInput),
                wait @ Pulled::NeedMemory(..) => return Ok(wait),
            }
        }
    }

    /// At most [`STEP`] bytes of the body's own (the last stage's).
    pub(super) fn next(&mut self) -> std::io::Result<Pulled> {
        match self.stages.len() {
            0 => Ok(Pulled::End),
            n => self.pull(n - 1),
        }
    }
}

/// A body with its codings undone as it streams, a bounded step at a time
/// as the sandbox reads it. A body that does not decode ends with an
/// error: the sandbox gets a cut-off response, never the coded bytes.
pub(super) struct DecodeBody {
    inner: OutBody,
    pipeline: Pipeline,
    /// The upstream's body has ended (its trailers, if any, kept).
    ended: bool,
    trailers: Option<Frame<Bytes>>,
    done: bool,
    /// A stage waiting for the pool to pay for it.
    waiting: Option<(usize, Waiting)>,
}

pub(super) type Waiting = Pin<
    Box<
        dyn std::future::Future<Output = Result<OwnedSemaphorePermit, tokio::sync::AcquireError>>
            + Send
            + Sync,
    >,
>;

impl DecodeBody {
    /// `codings` decoded with memory paid from `pool` (check them with
    /// [`too_costly`] first: a body that could need more than the pool
    /// holds would wait for ever), within `budget` (`counts_coded`: what
    /// `inner` gives is the body's coded bytes, see [`Pipeline::new`]).
    pub(super) fn new(
        inner: OutBody,
        codings: &[Coding],
        pool: Arc<Semaphore>,
        budget: Option<Arc<Budget>>,
        counts_coded: bool,
    ) -> DecodeBody {
        DecodeBody {
            inner,
            pipeline: Pipeline::new(codings, &pool, budget, counts_coded),
            ended: false,
            trailers: None,
            done: false,
            waiting: None,
        }
    }
}

impl Body for DecodeBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        loop {
            if this.done {
                return Poll::Ready(this.trailers.take().map(Ok));
            }
            if let Some((k, wait)) = this.waiting.as_mut() {
                match wait.as_mut().poll(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(Ok(paid)) => {
                        this.pipeline.paid(*k, paid);
                        this.waiting = None;
                    }
                    Poll::Ready(Err(_)) => {
                        this.done = true;
                        this.trailers = None;
                        return Poll::Ready(Some(Err(
                            "warden: the proxy's memory budget is closed".into(),
                        )));
                    }
                }
            }
            match this.pipeline.next() {
                Ok(Pulled::Data(out)) => {
                    return Poll::Ready(Some(Ok(Frame::data(Bytes::from(out)))))
                }
                Ok(Pulled::End) => {
                    this.done = true;
                    continue;
                }
                Ok(Pulled::NeedInput) if this.ended => {
                    // Cannot happen: an ended input reads as its end.
                    this.done = true;
                    this.trailers = None;
                    return Poll::Ready(Some(Err(
                        "warden: the response body ended inside its coding".into(),
                    )));
                }
                Ok(Pulled::NeedInput) => {}
                Ok(Pulled::NeedMemory(k, kib)) => {
                    this.waiting = Some((k, this.pipeline.wait_for(k, kib)));
                    continue;
                }
                Err(e) => {
                    this.done = true;
                    this.trailers = None;
                    return Poll::Ready(Some(Err(format!(
                        "warden: the response body does not decode: {e}"
                    )
                    .into())));
                }
            }
            match Pin::new(&mut this.inner).poll_frame(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e))),
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) => this.pipeline.feed(&data),
                    Err(other) => {
                        this.ended = true;
                        this.trailers = Some(other);
                        this.pipeline.end_input();
                    }
                },
                Poll::Ready(None) => {
                    this.ended = true;
                    this.pipeline.end_input();
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
