//! Decoding a run's characters (base64 of either alphabet, hexadecimal)
//! and inflating compressed data found in what they decode to.

use super::{hex_digit, INFLATE_MOST, RAW_PROBE};
use crate::secrets::sniff::{sniff, Sniffed};
use crate::secrets::{coding::Coding, zero};
use std::io::Read;

/// The decodings of a run's characters: hexadecimal where every one is a
/// hexadecimal digit, and base64 (either alphabet, padding or not).
pub(super) fn decodings(chars: &[u8]) -> Vec<Vec<u8>> {
    let body: &[u8] = match chars.iter().position(|&c| c == b'=') {
        Some(p) => &chars[..p],
        None => chars,
    };
    let mut out = Vec::with_capacity(2);
    if body.iter().all(u8::is_ascii_hexdigit) {
        out.push(
            body.chunks_exact(2)
                .filter_map(|p| Some(hex_digit(p[0])? << 4 | hex_digit(p[1])?))
                .collect(),
        );
    }
    out.push(base64(body));
    out
}

/// Base64 of either alphabet (mixed too), without padding: each group of
/// four characters is three bytes, a last group of two or three one or
/// two (a last single character is left).
fn base64(chars: &[u8]) -> Vec<u8> {
    let s = |c: u8| u32::from(SEXTET[c as usize]);
    let mut out = Vec::with_capacity(chars.len() / 4 * 3 + 2);
    let mut groups = chars.chunks_exact(4);
    for g in &mut groups {
        let n = s(g[0]) << 18 | s(g[1]) << 12 | s(g[2]) << 6 | s(g[3]);
        let b = n.to_be_bytes();
        out.extend_from_slice(&b[1..]);
    }
    let rest = groups.remainder();
    let mut n = 0u32;
    for (i, &c) in rest.iter().enumerate() {
        n |= s(c) << (18 - 6 * i);
    }
    let b = n.to_be_bytes();
    out.extend_from_slice(&b[1..rest.len().saturating_sub(1) + 1]);
    out
}

/// Each base64 character's six bits, in either alphabet.
const SEXTET: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut i = 0;
    while i < 26 {
        t[b'A' as usize + i] = i as u8;
        t[b'a' as usize + i] = 26 + i as u8;
        i += 1;
    }
    let mut d = 0;
    while d < 10 {
        t[b'0' as usize + d] = 52 + d as u8;
        d += 1;
    }
    t[b'+' as usize] = 62;
    t[b'-' as usize] = 62;
    t[b'/' as usize] = 63;
    t[b'_' as usize] = 63;
    t
};

thread_local! {
    /// One raw deflate decoder per thread, reset for each attempt: most
    /// attempts fail within a few bytes, and a decoder's state is tens of
    /// kilobytes to make.
    static RAW: std::cell::RefCell<flate2::Decompress> =
        std::cell::RefCell::new(flate2::Decompress::new(false));
}

/// `data` inflated as raw deflate into `out` (at most one byte past
/// [`INFLATE_MOST`]): whether it is one whole stream that ends where
/// `data` ends. Past the bound, it is read [`RAW_PROBE`] bytes further
/// (into nothing) to tell.
fn raw(data: &[u8], out: &mut Vec<u8>) -> bool {
    RAW.with(|d| {
        let Ok(mut d) = d.try_borrow_mut() else {
            return false;
        };
        d.reset(false);
        let mut buf = [0u8; 8 << 10];
        let mut discarded = 0usize;
        loop {
            let (before_in, before_out) = (d.total_in(), d.total_out());
            let at = usize::try_from(before_in)
                .unwrap_or(usize::MAX)
                .min(data.len());
            let status = d.decompress(&data[at..], &mut buf, flate2::FlushDecompress::Finish);
            let made = usize::try_from(d.total_out() - before_out).unwrap_or(0);
            if out.len() <= INFLATE_MOST {
                let room = INFLATE_MOST + 1 - out.len();
                out.extend_from_slice(&buf[..made.min(room)]);
                discarded += made.saturating_sub(room);
            } else {
                discarded += made;
            }
            buf[..made].fill(0);
            match status {
                Ok(flate2::Status::StreamEnd) => return d.total_in() == data.len() as u64,
                Ok(_) if d.total_in() == before_in && made == 0 => return false,
                Ok(_) if discarded > RAW_PROBE => return false,
                Ok(_) => {}
                Err(_) => return false,
            }
        }
    })
}

/// What inflating decoded data gave.
pub(super) enum Inflated {
    /// Not compressed data (or none the scrub reads).
    Not,
    /// More than [`INFLATE_MOST`] bytes.
    Over,
    /// What it inflated to (a cut or broken stream: as far as it went).
    To(Vec<u8>),
}

/// `data` inflated as gzip or zlib where its first bytes say so, else as
/// raw deflate (which has no signature): read as such only where it is
/// one whole stream, ending where `data` ends (any bytes start a raw
/// deflate stream of some kind, but almost none end as one).
pub(super) fn inflate(data: &[u8]) -> Inflated {
    let limit = INFLATE_MOST as u64 + 1;
    let mut out = Vec::new();
    match sniff(data) {
        // A broken stream still gives what it inflated before the break
        // (`read_to_end` keeps it).
        Some(Sniffed::Coded(Coding::Gzip)) => {
            let _ = flate2::read::MultiGzDecoder::new(data)
                .take(limit)
                .read_to_end(&mut out);
        }
        Some(Sniffed::Coded(Coding::Deflate)) => {
            let _ = flate2::read::ZlibDecoder::new(data)
                .take(limit)
                .read_to_end(&mut out);
        }
        Some(_) => return Inflated::Not,
        None => {
            if !raw(data, &mut out) {
                zero(&mut out);
                return Inflated::Not;
            }
        }
    }
    if out.len() > INFLATE_MOST {
        zero(&mut out);
        return Inflated::Over;
    }
    if out.is_empty() {
        return Inflated::Not;
    }
    Inflated::To(out)
}
