//! Decoding a run's characters: base64 of either alphabet from each of
//! its first four characters, and each long stretch of hexadecimal
//! digits in it from each of its first two. A server that glues a
//! prefix to an encoding with no separator (`v1`, `0x`, a letter) puts
//! the encoded data at another alignment than the run's own.

use super::{hex_digit, MIN_RUN};
use crate::secrets::sniff::sniff;

/// One decoding of a run's characters.
pub(super) struct Decoding {
    pub(super) bytes: Vec<u8>,
    /// Decoded whole from the run's first character.
    pub(super) natural: bool,
}

/// The decodings of a run's characters (what precedes its padding):
/// hexadecimal for each stretch of at least [`MIN_RUN`] hexadecimal
/// digits, from its first and second digit, and base64 (either
/// alphabet) from each of the first four characters (a padded run: from
/// the one its padding says).
pub(super) fn decodings(chars: &[u8]) -> Vec<Decoding> {
    let body: &[u8] = match chars.iter().position(|&c| c == b'=') {
        Some(p) => &chars[..p],
        None => chars,
    };
    let mut out = Vec::with_capacity(6);
    let mut start = 0;
    while start < body.len() {
        let n = body[start..]
            .iter()
            .take_while(|c| c.is_ascii_hexdigit())
            .count();
        if n >= MIN_RUN {
            for shift in 0..2 {
                let digits = &body[start + shift..start + n];
                out.push(Decoding {
                    bytes: digits
                        .chunks_exact(2)
                        .filter_map(|p| Some(hex_digit(p[0])? << 4 | hex_digit(p[1])?))
                        .collect(),
                    natural: n == body.len() && shift == 0,
                });
            }
        }
        start += n + 1;
    }
    // Padding ends a run only where what it pads starts a multiple of
    // four characters before it: a padded run is read at that alignment
    // alone.
    let padded = body.len() < chars.len();
    for shift in 0..4 {
        if padded && shift != chars.len() % 4 {
            continue;
        }
        if shift == 0 || body.len() >= shift + MIN_RUN {
            out.push(Decoding {
                bytes: base64(&body[shift..]),
                natural: shift == 0,
            });
        }
    }
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

/// Whether `data` is what a value could still hide in one step further:
/// text (most of its bytes printable ASCII), or compressed data of any
/// kind a body's sniff knows.
pub(super) fn promising(data: &[u8]) -> bool {
    if data.len() < MIN_RUN / 2 {
        return false;
    }
    if sniff(data).is_some() {
        return true;
    }
    let text = data.iter().filter(|&&b| is_text(b)).count();
    text * 10 >= data.len() * 9
}

/// Bytes of text: printable ASCII and blank space.
fn is_text(b: u8) -> bool {
    TEXT[b as usize]
}

/// [`is_text`] by byte.
pub(super) const TEXT: [bool; 256] = {
    let mut t = [false; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        t[b] = c.is_ascii_graphic() || matches!(c, b' ' | b'\t' | b'\r' | b'\n');
        b += 1;
    }
    t
};
