//! Content and transfer codings of responses from a secret's host: a body
//! in a coding the scrubber can read (gzip, deflate in its zlib or raw
//! form, brotli, stacked in any order) is decoded as it streams, so that
//! it reaches the sandbox in the identity coding and scrubbed; any other
//! coding is named, and the session withholds the response. It never
//! passes coded bytes on.

use super::{BoxError, OutBody};
use bytes::Bytes;
use hyper::body::{Body, Frame};
use std::io::Write;
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

/// Where a decoder writes: shared so that each step's output can be taken.
#[derive(Clone, Default)]
struct Sink(Arc<Mutex<Vec<u8>>>);

impl Sink {
    fn take(&self) -> Vec<u8> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

impl Write for Sink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

enum Stage {
    Gzip(flate2::write::MultiGzDecoder<Sink>),
    Zlib(flate2::write::ZlibDecoder<Sink>),
    Raw(flate2::write::DeflateDecoder<Sink>),
    Brotli(Box<brotli::DecompressorWriter<Sink>>),
    /// `deflate` whose first bytes have not come yet: zlib or raw is told
    /// by its header.
    Deflate(Vec<u8>),
}

struct Decoder {
    stage: Stage,
    sink: Sink,
}

impl Decoder {
    fn new(c: Coding) -> Decoder {
        let sink = Sink::default();
        let stage = match c {
            Coding::Gzip => Stage::Gzip(flate2::write::MultiGzDecoder::new(sink.clone())),
            Coding::Deflate => Stage::Deflate(Vec::new()),
            Coding::Brotli => Stage::Brotli(Box::new(brotli::DecompressorWriter::new(
                sink.clone(),
                4096,
            ))),
        };
        Decoder { stage, sink }
    }

    fn push(&mut self, data: &[u8]) -> std::io::Result<Vec<u8>> {
        if let Stage::Deflate(head) = &mut self.stage {
            head.extend_from_slice(data);
            if head.len() < 2 {
                return Ok(Vec::new());
            }
            // RFC 1950's header: compression method 8, and a check making
            // the first two bytes a multiple of 31.
            let zlib =
                head[0] & 0x0f == 8 && (u16::from(head[0]) << 8 | u16::from(head[1])) % 31 == 0;
            let head = std::mem::take(head);
            self.stage = if zlib {
                Stage::Zlib(flate2::write::ZlibDecoder::new(self.sink.clone()))
            } else {
                Stage::Raw(flate2::write::DeflateDecoder::new(self.sink.clone()))
            };
            return self.push(&head);
        }
        match &mut self.stage {
            Stage::Gzip(d) => d.write_all(data)?,
            Stage::Zlib(d) => d.write_all(data)?,
            Stage::Raw(d) => d.write_all(data)?,
            Stage::Brotli(d) => d.write_all(data)?,
            Stage::Deflate(_) => {}
        }
        Ok(self.sink.take())
    }

    fn finish(&mut self) -> std::io::Result<Vec<u8>> {
        match &mut self.stage {
            Stage::Gzip(d) => d.try_finish()?,
            Stage::Zlib(d) => d.try_finish()?,
            Stage::Raw(d) => d.try_finish()?,
            Stage::Brotli(d) => d.close()?,
            Stage::Deflate(head) if head.is_empty() => {}
            Stage::Deflate(_) => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    "a deflate body of one byte",
                ))
            }
        }
        Ok(self.sink.take())
    }
}

/// A body with its codings undone as it streams. A body that does not
/// decode ends with an error: the sandbox gets a cut-off response, never
/// the coded bytes.
pub(super) struct DecodeBody {
    inner: OutBody,
    decoders: Vec<Decoder>,
    trailers: Option<Frame<Bytes>>,
    done: bool,
}

impl DecodeBody {
    pub(super) fn new(inner: OutBody, codings: &[Coding]) -> DecodeBody {
        DecodeBody {
            inner,
            decoders: codings.iter().map(|c| Decoder::new(*c)).collect(),
            trailers: None,
            done: false,
        }
    }

    fn run(&mut self, data: &[u8], last: bool) -> std::io::Result<Vec<u8>> {
        let mut bytes = data.to_vec();
        for d in &mut self.decoders {
            let mut out = d.push(&bytes)?;
            if last {
                out.extend(d.finish()?);
            }
            bytes = out;
        }
        Ok(bytes)
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
            let step = match Pin::new(&mut this.inner).poll_frame(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e))),
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) => this.run(&data, false),
                    Err(other) => {
                        this.done = true;
                        this.trailers = Some(other);
                        this.run(&[], true)
                    }
                },
                Poll::Ready(None) => {
                    this.done = true;
                    this.run(&[], true)
                }
            };
            match step {
                Err(e) => {
                    this.done = true;
                    this.trailers = None;
                    return Poll::Ready(Some(Err(format!(
                        "warden: the response body does not decode: {e}"
                    )
                    .into())));
                }
                Ok(out) if !out.is_empty() => {
                    return Poll::Ready(Some(Ok(Frame::data(Bytes::from(out)))))
                }
                Ok(_) => {}
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
}
