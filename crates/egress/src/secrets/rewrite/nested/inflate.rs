//! Compressed data found in what a run decodes to, and inflated: from
//! the decoded bytes' start and from where each stream in them ends,
//! every signature a body's sniff knows (gzip and zlib read, the others
//! withheld), raw deflate where it is the whole of them; and gzip and
//! zlib headers at any offset inside them, where a run glued to other
//! letters of its alphabet puts its stream. What a window of a longer
//! run holds that runs on past the window's end is withheld: it cannot
//! be read whole.

use super::decode::promising;
use super::{Verdict, INFLATE_MOST, RAW_PROBE};
use crate::secrets::sniff::{self, sniff, Sniffed};
use crate::secrets::{coding::Coding, zero};

/// Where decoded bytes stand in the run they came from.
#[derive(Debug, Clone, Copy)]
pub(super) struct Place {
    /// The run decoded whole from its first character: the only place a
    /// signature too short to tell in random bytes (`compress`'s) is
    /// taken.
    pub(super) natural: bool,
    /// The bytes end where a window of a longer run ends: what runs on
    /// to their end goes on in the next window, unread.
    pub(super) cut: bool,
}

/// How a stream read from the start of some bytes went.
enum Stream {
    /// It ended after this many bytes, having given these.
    Ended(Vec<u8>, usize),
    /// The bytes ran out before its end, all read without a fault.
    Cut(Vec<u8>),
    /// A fault in it: what it gave before.
    Broken(Vec<u8>),
    /// It inflates past [`INFLATE_MOST`]: its first bytes.
    Over(Vec<u8>),
    /// Not a stream the scrub reads.
    Not,
}

thread_local! {
    /// One deflate decoder per thread, reset for each attempt: most
    /// attempts fail within a few bytes, and a decoder's state is tens of
    /// kilobytes to make.
    static INFLATER: std::cell::RefCell<flate2::Decompress> =
        std::cell::RefCell::new(flate2::Decompress::new(false));
}

/// Calls `read` with what each compressed stream in `data` inflates to
/// (and whether that ends where a window does), until one is not clean;
/// withheld where a stream cannot be read: a kind the scrub does not
/// read, a zlib stream with a preset dictionary, one past
/// [`INFLATE_MOST`], one cut at a window's end.
pub(super) fn streams(
    data: &[u8],
    at: Place,
    read: &mut dyn FnMut(&[u8], bool) -> Verdict,
) -> Verdict {
    // From the start, and from where each stream ends (what follows a
    // gzip member or a zlib stream: another, of any kind).
    let mut pos = 0;
    loop {
        let rest = &data[pos..];
        let first = pos == 0;
        let found = match sniff(rest) {
            None if first => raw_here(rest, at.cut),
            None => Stream::Not,
            Some(Sniffed::Coded(Coding::Gzip)) => gzip(rest),
            Some(Sniffed::Coded(Coding::Deflate)) => zlib(rest),
            Some(Sniffed::Coded(_)) => Stream::Not,
            Some(Sniffed::Opaque("compress")) if !(first && at.natural) => Stream::Not,
            Some(Sniffed::Opaque(sniff::ZLIB_DICTIONARY)) => match with_dictionary(rest) {
                Some(found) => found,
                None => return Verdict::Withhold,
            },
            Some(Sniffed::Opaque(_)) => return Verdict::Withhold,
        };
        match found {
            Stream::Ended(mut plain, used) => {
                let v = read(&plain, false);
                zero(&mut plain);
                if v != Verdict::Clean {
                    return v;
                }
                pos += used;
                if pos >= data.len() {
                    return Verdict::Clean;
                }
            }
            Stream::Cut(mut plain) => {
                let v = if at.cut && coded(rest) {
                    Verdict::Withhold
                } else {
                    read(&plain, false)
                };
                zero(&mut plain);
                return v;
            }
            Stream::Broken(mut plain) => {
                let v = read(&plain, false);
                zero(&mut plain);
                if v != Verdict::Clean {
                    return v;
                }
                break;
            }
            Stream::Over(mut plain) => {
                zero(&mut plain);
                return Verdict::Withhold;
            }
            Stream::Not => break,
        }
    }
    inside(data, pos + 1, at, read)
}

/// Gzip and zlib streams that start inside `data` (from `from`): gzip by
/// its three bytes and flags, as strictly as at the start; zlib by the
/// header every writer makes (`x` and a check, no dictionary), read as
/// far as it goes. A zlib stream inside binary data is common (a PNG's
/// pixels, a PDF's pages) and may inflate far: past the bound, or cut at
/// a window's end, it is withheld only where what it gave is text.
fn inside(
    data: &[u8],
    from: usize,
    at: Place,
    read: &mut dyn FnMut(&[u8], bool) -> Verdict,
) -> Verdict {
    let mut i = from;
    while i + 2 < data.len() {
        let Some(n) = data[i..].iter().position(|&b| b == 0x1f || b == 0x78) else {
            break;
        };
        i += n;
        let rest = &data[i..];
        let (found, strict) = match rest {
            [0x1f, 0x8b, 0x08, flg, ..] if flg & 0xe0 == 0 => (gzip(rest), true),
            [0x78, flg, ..]
                if sniff::zlib_header(0x78, *flg) == Some(false) && block_may_start(&rest[2..]) =>
            {
                (zlib(rest), false)
            }
            _ => {
                i += 1;
                continue;
            }
        };
        let (mut plain, next) = match found {
            Stream::Ended(plain, used) => (plain, Some(i + used)),
            Stream::Cut(plain) if at.cut && coded(rest) && (strict || promising(&plain)) => {
                let mut plain = plain;
                zero(&mut plain);
                return Verdict::Withhold;
            }
            Stream::Over(plain) if strict || promising(&plain) => {
                let mut plain = plain;
                zero(&mut plain);
                return Verdict::Withhold;
            }
            Stream::Cut(plain) | Stream::Broken(plain) | Stream::Over(plain) => (plain, None),
            Stream::Not => (Vec::new(), None),
        };
        let v = if plain.is_empty() {
            Verdict::Clean
        } else {
            read(&plain, false)
        };
        zero(&mut plain);
        if v != Verdict::Clean {
            return v;
        }
        i = next.unwrap_or(i + 1);
    }
    Verdict::Clean
}

/// Whether `data` looks like coded bits (most byte values met in its
/// first 4 KiB), as a compressed stream's do: a run of one letter
/// repeated (`aaaa...`) decodes to a few byte values that may read as
/// deflate's fixed codes without a fault to a window's end, and is not
/// withheld for it.
fn coded(data: &[u8]) -> bool {
    let mut seen = [false; 256];
    for &b in data.iter().take(4 << 10) {
        seen[b as usize] = true;
    }
    seen.iter().filter(|&&s| s).count() >= 128
}

/// `input` inflated by `d` (reset for its kind) into at most
/// [`INFLATE_MOST`] bytes.
fn inflate(d: &mut flate2::Decompress, input: &[u8]) -> Stream {
    let mut out = Vec::new();
    let mut buf = [0u8; 2 << 10];
    loop {
        let (before_in, before_out) = (d.total_in(), d.total_out());
        let at = usize::try_from(before_in)
            .unwrap_or(usize::MAX)
            .min(input.len());
        let status = d.decompress(&input[at..], &mut buf, flate2::FlushDecompress::None);
        let made = usize::try_from(d.total_out() - before_out).unwrap_or(0);
        out.extend_from_slice(&buf[..made]);
        buf[..made].fill(0);
        if out.len() > INFLATE_MOST {
            zero(&mut out[INFLATE_MOST..]);
            out.truncate(INFLATE_MOST);
            return Stream::Over(out);
        }
        let used = usize::try_from(d.total_in()).unwrap_or(usize::MAX);
        match status {
            Err(_) => return Stream::Broken(out),
            Ok(flate2::Status::StreamEnd) => return Stream::Ended(out, used),
            Ok(_) if used >= input.len() && made < buf.len() => return Stream::Cut(out),
            Ok(_) if d.total_in() == before_in && made == 0 => return Stream::Cut(out),
            Ok(_) => {}
        }
    }
}

/// Input of a zlib stream with a preset dictionary past which it is
/// withheld rather than read.
const DICTIONARY_READ_MOST: usize = 1 << 10;

/// A zlib stream with a preset dictionary (FDICT) at the start of
/// `data`, read with zeros in place of the dictionary, which is not in
/// the response: what it codes as literals (a value the sandbox had
/// stored, which no server's dictionary holds) is read, what it copies
/// from the dictionary is not. Such a header is met once in two
/// thousand places of random bytes (a hash decoded at its alignments),
/// whose first bytes then read as deflate with no fault often enough
/// that withholding them all would withhold ordinary responses; a stream
/// that reads on without a fault past [`DICTIONARY_READ_MOST`] bytes is
/// one (random bytes fault within a few dozen) and is withheld (`None`).
fn with_dictionary(data: &[u8]) -> Option<Stream> {
    const DICTIONARY: usize = 32 << 10;
    let body = data.get(6..)?;
    // A stored block that is not the last (a header byte of 0, LEN 32768,
    // NLEN its complement) of 32 KiB of zeros, then the stream.
    let mut input = vec![0u8; 5 + DICTIONARY];
    input[1..5].copy_from_slice(&[0x00, 0x80, 0xff, 0x7f]);
    input.extend_from_slice(body);
    let found = INFLATER.with(|d| {
        let Ok(mut d) = d.try_borrow_mut() else {
            return Stream::Not;
        };
        d.reset(false);
        inflate(&mut d, &input)
    });
    // The dictionary's zeros are not what the stream gives.
    let past = |mut plain: Vec<u8>| plain.split_off(DICTIONARY.min(plain.len()));
    match found {
        Stream::Ended(plain, used) => {
            let used = used - (input.len() - body.len());
            if used > DICTIONARY_READ_MOST {
                return None;
            }
            // Its Adler-32 follows.
            Some(Stream::Ended(past(plain), (6 + used + 4).min(data.len())))
        }
        Stream::Cut(_) | Stream::Over(_) if body.len() > DICTIONARY_READ_MOST => None,
        Stream::Cut(plain) => Some(Stream::Cut(past(plain))),
        Stream::Broken(plain) => Some(Stream::Broken(past(plain))),
        Stream::Over(_) => None,
        Stream::Not => Some(Stream::Not),
    }
}

/// A zlib stream (RFC 1950) at the start of `data`.
fn zlib(data: &[u8]) -> Stream {
    INFLATER.with(|d| {
        let Ok(mut d) = d.try_borrow_mut() else {
            return Stream::Not;
        };
        d.reset(true);
        inflate(&mut d, data)
    })
}

/// A gzip member (RFC 1952) at the start of `data`: its header, its
/// deflate stream, its trailer.
fn gzip(data: &[u8]) -> Stream {
    let Some(&flg) = data.get(3) else {
        return Stream::Cut(Vec::new());
    };
    if flg & 0xe0 != 0 {
        return Stream::Broken(Vec::new());
    }
    let mut at = 10;
    if flg & 0x04 != 0 {
        let Some(&[lo, hi]) = data.get(at..at + 2) else {
            return Stream::Cut(Vec::new());
        };
        at += 2 + usize::from(u16::from_le_bytes([lo, hi]));
    }
    // The name and the comment end with a NUL.
    for field in [0x08, 0x10] {
        if flg & field != 0 {
            match data.get(at..).and_then(|r| r.iter().position(|&b| b == 0)) {
                Some(n) => at += n + 1,
                None => return Stream::Cut(Vec::new()),
            }
        }
    }
    if flg & 0x02 != 0 {
        at += 2;
    }
    let Some(body) = data.get(at..) else {
        return Stream::Cut(Vec::new());
    };
    let found = INFLATER.with(|d| {
        let Ok(mut d) = d.try_borrow_mut() else {
            return Stream::Not;
        };
        d.reset(false);
        inflate(&mut d, body)
    });
    match found {
        // Its CRC-32 and length follow.
        Stream::Ended(plain, used) if at + used + 8 <= data.len() => {
            Stream::Ended(plain, at + used + 8)
        }
        Stream::Ended(plain, _) => Stream::Cut(plain),
        other => other,
    }
}

/// [`raw`] where `data` can start a deflate block.
fn raw_here(data: &[u8], cut: bool) -> Stream {
    if !block_may_start(data) {
        return Stream::Not;
    }
    raw(data, cut)
}

/// Whether `data` starts with a deflate block's header that can be one:
/// not the reserved type, a stored block's length matched by its
/// complement, a dynamic block's counts of codes in range. Told here, in
/// a few instructions, for the half of random bytes that are not; a
/// decoder's reset and tables cost more than reading the bytes does.
fn block_may_start(data: &[u8]) -> bool {
    let Some(&first) = data.first() else {
        return false;
    };
    match (first >> 1) & 3 {
        0 => matches!(*data, [_, l0, l1, n0, n1, ..] if l0 == !n0 && l1 == !n1),
        1 => true,
        2 => data
            .get(1)
            .is_some_and(|&next| first >> 3 <= 29 && next & 0x1f <= 29),
        _ => false,
    }
}

/// `data` as raw deflate (which has no signature): read only where it is
/// one whole stream ending where `data` ends (any bytes start a raw
/// deflate stream of some kind, but almost none end as one), or, where
/// `data` ends at a window's end (`cut`), one that runs to that end with
/// no fault (withheld then: random bytes fault within a few dozen).
/// Past [`INFLATE_MOST`], it is read [`RAW_PROBE`] bytes further (into
/// nothing) to tell.
fn raw(data: &[u8], cut: bool) -> Stream {
    let mut out = Vec::new();
    let whole = INFLATER.with(|d| {
        let Ok(mut d) = d.try_borrow_mut() else {
            return Some(false);
        };
        d.reset(false);
        let mut buf = [0u8; 2 << 10];
        let mut discarded = 0usize;
        loop {
            let (before_in, before_out) = (d.total_in(), d.total_out());
            let at = usize::try_from(before_in)
                .unwrap_or(usize::MAX)
                .min(data.len());
            let status = d.decompress(&data[at..], &mut buf, flate2::FlushDecompress::None);
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
                Ok(flate2::Status::StreamEnd) => return Some(d.total_in() == data.len() as u64),
                // The input ran out with no fault.
                Ok(_) if d.total_in() >= data.len() as u64 && made < buf.len() => return None,
                Ok(_) if d.total_in() == before_in && made == 0 => return None,
                Ok(_) if discarded > RAW_PROBE => return Some(false),
                Ok(_) => {}
                Err(_) => return Some(false),
            }
        }
    });
    match whole {
        Some(true) if out.len() > INFLATE_MOST => Stream::Over(out),
        Some(true) => Stream::Ended(out, data.len()),
        None if cut => Stream::Cut(out),
        _ => {
            zero(&mut out);
            Stream::Not
        }
    }
}
