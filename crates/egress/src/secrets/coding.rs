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
enum Pulled {
    Data(Vec<u8>),
    /// The first stage wants more of the body.
    NeedInput,
    /// Stage `k` waits for this many KiB of the pool to start.
    NeedMemory(usize, u32),
    End,
}

/// The codings to undo, the last applied first; each stage is fed by the
/// one before, a step at a time, only when it has run dry.
struct Pipeline {
    stages: Vec<Stage>,
}

impl Pipeline {
    fn feed(&self, data: &[u8]) {
        if let Some(s) = self.stages.first() {
            s.input.push(data);
        }
    }

    fn end_input(&self) {
        if let Some(s) = self.stages.first() {
            s.input.end();
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

    fn next(&mut self) -> std::io::Result<Pulled> {
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

type Waiting = Pin<
    Box<
        dyn std::future::Future<Output = Result<OwnedSemaphorePermit, tokio::sync::AcquireError>>
            + Send
            + Sync,
    >,
>;

impl DecodeBody {
    /// `codings` decoded with memory paid from `pool` (check them with
    /// [`too_costly`] first: a body that could need more than the pool
    /// holds would wait for ever).
    pub(super) fn new(inner: OutBody, codings: &[Coding], pool: Arc<Semaphore>) -> DecodeBody {
        DecodeBody {
            inner,
            pipeline: Pipeline {
                stages: codings
                    .iter()
                    .map(|c| Stage::new(*c, pool.clone()))
                    .collect(),
            },
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
                        this.pipeline.stages[*k].paid = Some(paid);
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
                    let pool = this.pipeline.stages[k].pool.clone();
                    this.waiting = Some((k, Box::pin(pool.acquire_many_owned(kib))));
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
mod tests {
    use super::*;

    fn pool() -> Arc<Semaphore> {
        Arc::new(Semaphore::new(DECODE_POOL_KIB as usize))
    }

    fn brotli(data: &[u8], window_bits: u32, large: bool) -> Vec<u8> {
        use std::io::Write;
        let params = brotli::enc::BrotliEncoderParams {
            quality: 1,
            lgwin: window_bits as i32,
            large_window: large,
            ..Default::default()
        };
        let mut o = Vec::new();
        {
            let mut e = brotli::CompressorWriter::with_params(&mut o, 4096, &params);
            e.write_all(data).unwrap();
        }
        o
    }

    #[test]
    fn codings_that_could_need_more_than_the_pool_are_withheld_before_decoding() {
        use Coding::*;
        assert!(too_costly(&[Brotli, Brotli]).is_some());
        assert!(too_costly(&[Brotli, Brotli, Brotli, Brotli]).is_some());
        assert!(too_costly(&[Gzip, Brotli, Deflate, Gzip]).is_none());
        assert!(too_costly(&[Gzip, Gzip, Gzip, Gzip]).is_none());
    }

    #[test]
    fn a_brotli_stage_pays_for_the_window_its_stream_declares_and_gives_it_back() {
        let data = vec![b'a'; 100_000];
        for bits in [16, 17, 18, 22, 24] {
            let coded = brotli(&data, bits, false);
            // The encoder may widen a small window (quality 1 does).
            let window = brotli_window_kib(coded[0]).unwrap();
            assert!(
                (1 << (bits - 10)..=16 * 1024).contains(&window),
                "{bits}: {window}"
            );
            if bits >= 18 {
                assert_eq!(window, 1 << (bits - 10));
            }
            let pool = pool();
            let mut p = Pipeline {
                stages: vec![Stage::new(Coding::Brotli, pool.clone())],
            };
            p.feed(&coded);
            p.end_input();
            let Pulled::Data(_) = p.next().unwrap() else {
                panic!("nothing decoded")
            };
            let held = DECODE_POOL_KIB as usize - pool.available_permits();
            assert_eq!(held, (STAGE_KIB + BROTLI_TABLES_KIB + window) as usize);
            while let Pulled::Data(_) = p.next().unwrap() {}
            assert_eq!(pool.available_permits(), DECODE_POOL_KIB as usize);
        }
    }

    #[test]
    fn a_stage_the_pool_cannot_pay_for_waits_and_decodes_nothing() {
        let coded = brotli(&vec![b'a'; 100_000], 24, false);
        let pool = Arc::new(Semaphore::new(8 * 1024));
        let mut p = Pipeline {
            stages: vec![Stage::new(Coding::Brotli, pool.clone())],
        };
        p.feed(&coded);
        p.end_input();
        match p.next().unwrap() {
            Pulled::NeedMemory(0, kib) => assert!(kib > 16 * 1024),
            _ => panic!("a stage the pool cannot pay for decoded"),
        }
        assert!(p.stages[0].decoder.is_none());
        assert_eq!(pool.available_permits(), 8 * 1024);
    }

    #[test]
    fn a_large_window_brotli_stream_is_refused() {
        let coded = brotli(&vec![b'a'; 100_000], 30, true);
        let mut p = Pipeline {
            stages: vec![Stage::new(Coding::Brotli, pool())],
        };
        p.feed(&coded);
        p.end_input();
        let e = p.next().err().expect("a large-window stream decoded");
        assert!(e.to_string().contains("large-window"), "{e}");
    }

    #[test]
    fn codings_are_undone_last_first_and_unknown_ones_named() {
        let mut h = http::HeaderMap::new();
        h.append("content-encoding", "gzip".parse().unwrap());
        h.append("content-encoding", "br".parse().unwrap());
        h.append("transfer-encoding", "deflate, chunked".parse().unwrap());
        assert_eq!(
            to_undo(&h).unwrap(),
            [Coding::Deflate, Coding::Brotli, Coding::Gzip]
        );
        h.append("content-encoding", "zstd".parse().unwrap());
        assert_eq!(to_undo(&h).unwrap_err(), "zstd");
    }

    fn code(data: &[u8], applied: &[(Coding, bool)]) -> Vec<u8> {
        use std::io::Write;
        let mut out = data.to_vec();
        for (c, raw) in applied {
            out = match (c, raw) {
                (Coding::Gzip, _) => {
                    let mut e = flate2::write::GzEncoder::new(Vec::new(), Default::default());
                    e.write_all(&out).unwrap();
                    e.finish().unwrap()
                }
                (Coding::Deflate, false) => {
                    let mut e = flate2::write::ZlibEncoder::new(Vec::new(), Default::default());
                    e.write_all(&out).unwrap();
                    e.finish().unwrap()
                }
                (Coding::Deflate, true) => {
                    let mut e = flate2::write::DeflateEncoder::new(Vec::new(), Default::default());
                    e.write_all(&out).unwrap();
                    e.finish().unwrap()
                }
                (Coding::Brotli, _) => {
                    let mut o = Vec::new();
                    {
                        let mut e = brotli::CompressorWriter::new(&mut o, 4096, 5, 22);
                        e.write_all(&out).unwrap();
                    }
                    o
                }
            };
        }
        out
    }

    /// Feed `coded` in pieces of `piece` bytes, taking what each gives.
    fn decode_in_pieces(coded: &[u8], undo: &[Coding], piece: usize) -> Vec<u8> {
        let mut p = Pipeline {
            stages: undo.iter().map(|c| Stage::new(*c, pool())).collect(),
        };
        let mut out = Vec::new();
        let mut drain = |p: &mut Pipeline| loop {
            match p.next().unwrap() {
                Pulled::Data(d) => {
                    assert!(d.len() <= STEP);
                    out.extend(d);
                }
                Pulled::NeedInput => return false,
                Pulled::End => return true,
                Pulled::NeedMemory(..) => panic!("the pool cannot pay for one body"),
            }
        };
        // A coding that knows its own end may end before the last bytes of
        // the codings around it (their checksums); what it gave must still
        // be the whole body, which the caller compares.
        for c in coded.chunks(piece) {
            p.feed(c);
            if drain(&mut p) {
                return out;
            }
        }
        p.end_input();
        assert!(drain(&mut p));
        out
    }

    #[test]
    fn every_coding_and_stack_decodes_whole_however_the_body_is_cut() {
        let data: Vec<u8> = (0..300_000u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8 & 0x3f | 0x20)
            .collect();
        let stacks: &[&[(Coding, bool)]] = &[
            &[(Coding::Gzip, false)],
            &[(Coding::Deflate, false)],
            &[(Coding::Deflate, true)],
            &[(Coding::Brotli, false)],
            &[(Coding::Gzip, false), (Coding::Brotli, false)],
            &[
                (Coding::Brotli, false),
                (Coding::Deflate, true),
                (Coding::Gzip, false),
            ],
        ];
        for applied in stacks {
            let coded = code(&data, applied);
            let undo: Vec<Coding> = applied.iter().rev().map(|(c, _)| *c).collect();
            for piece in [1, 7, 4096, coded.len()] {
                let got = decode_in_pieces(&coded, &undo, piece);
                assert!(got == data, "{applied:?} in pieces of {piece}");
            }
        }
    }

    #[test]
    fn a_bomb_is_decoded_a_bounded_step_at_a_time() {
        // 4 GiB of zeros as 4096 gzip members of 1 MiB each, gzipped again:
        // a few kilobytes on the wire.
        let member = code(&vec![0u8; 1 << 20], &[(Coding::Gzip, false)]);
        let inner: Vec<u8> = member.repeat(4096);
        let bomb = code(&inner, &[(Coding::Gzip, false)]);
        assert!(bomb.len() < 64 * 1024, "{}", bomb.len());
        let mut p = Pipeline {
            stages: vec![
                Stage::new(Coding::Gzip, pool()),
                Stage::new(Coding::Gzip, pool()),
            ],
        };
        p.feed(&bomb);
        p.end_input();
        let mut taken = 0;
        for _ in 0..64 {
            match p.next().unwrap() {
                Pulled::Data(d) => {
                    assert!(d.len() <= STEP);
                    assert!(d.iter().all(|b| *b == 0));
                    taken += d.len();
                }
                _ => panic!("the bomb ended early"),
            }
            // What waits between the stages is one step at most.
            let between = p.stages[1].input.with(|q| q.bytes.len());
            assert!(between <= STEP, "{between} bytes decoded ahead");
        }
        assert!(taken >= 64 * 1024);
    }
}
