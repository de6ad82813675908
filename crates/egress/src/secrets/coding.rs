//! Content and transfer codings of responses from a secret's host: a body
//! in a coding the scrubber can read (gzip, deflate in its zlib or raw
//! form, brotli, stacked in any order) is decoded as it streams, so that
//! it reaches the sandbox in the identity coding and scrubbed; any other
//! coding is named, and the session withholds the response. It never
//! passes coded bytes on.

use super::{BoxError, OutBody};
use bytes::Bytes;
use hyper::body::{Body, Frame};
use std::collections::VecDeque;
use std::io::Read;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

/// More codings than this on one body are refused (nobody stacks them so
/// deep but someone hiding something).
const MAX_CODINGS: usize = 4;

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
}

impl Stage {
    fn new(coding: Coding) -> Stage {
        Stage {
            input: Queue::default(),
            coding,
            decoder: None,
            done: false,
        }
    }

    /// Up to `buf.len()` decoded bytes: `Ok(0)` at the end, `WouldBlock`
    /// when its input ran dry first.
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.done {
            return Ok(0);
        }
        if self.decoder.is_none() {
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
            self.done = true;
        }
        Ok(n)
    }
}

/// What a pull from the codings gave.
enum Pulled {
    Data(Vec<u8>),
    /// The first stage wants more of the body.
    NeedInput,
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
            if k == 0 {
                return Ok(Pulled::NeedInput);
            }
            // Stage k is dry: one step of the stage before it.
            match self.pull(k - 1)? {
                Pulled::Data(d) => self.stages[k].input.push(&d),
                Pulled::End => self.stages[k].input.end(),
                Pulled::NeedInput => return Ok(Pulled::NeedInput),
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
}

impl DecodeBody {
    pub(super) fn new(inner: OutBody, codings: &[Coding]) -> DecodeBody {
        DecodeBody {
            inner,
            pipeline: Pipeline {
                stages: codings.iter().map(|c| Stage::new(*c)).collect(),
            },
            ended: false,
            trailers: None,
            done: false,
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
            stages: undo.iter().map(|c| Stage::new(*c)).collect(),
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
            stages: vec![Stage::new(Coding::Gzip), Stage::new(Coding::Gzip)],
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
