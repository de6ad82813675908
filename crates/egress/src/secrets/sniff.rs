//! Compressed data told by its first bytes, whatever the response
//! declares: a secret's host may hand back what it stores compressed
//! under `text/plain` or `application/octet-stream`, with no
//! Content-Encoding, and the value the request put there is then in
//! bytes the scrub cannot read as they are. This module only names what
//! a body's first bytes are; the response scrub decides (decodes the
//! codings the scrub can read, withholds the rest).
//!
//! Raw deflate and brotli have no signature (any bytes may start one):
//! a body in either that declares neither is read as it is.

use super::coding::Coding;

/// The most bytes a signature needs to be told.
pub(super) const HEAD: usize = 10;

/// What a body's first bytes say it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Sniffed {
    /// Data in a coding the scrub decodes.
    Coded(Coding),
    /// Compressed data the scrub cannot read, by its format's name.
    Opaque(&'static str),
}

/// Signatures of compressed data a server may write, by their first
/// bytes, and what each is. Order does not matter: no signature starts
/// another. Each is long enough that text does not start with it.
const SIGNATURES: &[(&[u8], Sniffed)] = &[
    // RFC 1952: ID1 ID2, and CM 8 (deflate), the only method defined.
    (b"\x1f\x8b\x08", Sniffed::Coded(Coding::Gzip)),
    (b"\x28\xb5\x2f\xfd", Sniffed::Opaque("zstd")),
    (b"\xfd7zXZ\x00", Sniffed::Opaque("xz")),
    (b"LZIP", Sniffed::Opaque("lzip")),
    (b"\x04\x22\x4d\x18", Sniffed::Opaque("lz4")),
    // A zip's local file header, and a spanned archive's marker.
    (b"PK\x03\x04", Sniffed::Opaque("zip")),
    (b"PK\x07\x08", Sniffed::Opaque("zip")),
    (b"7z\xbc\xaf\x27\x1c", Sniffed::Opaque("7z")),
    (b"Rar!\x1a\x07", Sniffed::Opaque("rar")),
    // A git pack: its objects are zlib streams.
    (b"PACK\x00\x00\x00", Sniffed::Opaque("git pack")),
];

/// The name a zlib stream with a preset dictionary is withheld by.
pub(super) const ZLIB_DICTIONARY: &str = "zlib with a preset dictionary";

/// What `head` (a body's first bytes: at least [`HEAD`] of them, or the
/// whole body) says the body is; `None`: no compressed data warden knows.
pub(super) fn sniff(head: &[u8]) -> Option<Sniffed> {
    if let Some((_, what)) = SIGNATURES.iter().find(|(sig, _)| head.starts_with(sig)) {
        return Some(*what);
    }
    if bzip2(head) {
        return Some(Sniffed::Opaque("bzip2"));
    }
    if lzma(head) {
        return Some(Sniffed::Opaque("lzma"));
    }
    if compress(head) {
        return Some(Sniffed::Opaque("compress"));
    }
    zlib(head)
}

/// bzip2 (`BZh`, a block size `1`..`9`) followed by its first block's
/// magic (the digits of pi) or, for empty data, the end-of-stream one.
fn bzip2(head: &[u8]) -> bool {
    match head {
        [b'B', b'Z', b'h', b'1'..=b'9', rest @ ..] => {
            rest.starts_with(b"\x31\x41\x59\x26\x53\x59")
                || rest.starts_with(b"\x17\x72\x45\x38\x50\x90")
        }
        _ => false,
    }
}

/// LZMA-alone (`.lzma`): the properties byte writers use (`lc=3 lp=0
/// pb=2`), then a dictionary of 64 KiB or more whose size is a power of
/// two or three times one, as xz-utils and 7-Zip write it: three bytes
/// alone are met once in 16 million places in random bytes, and the
/// scrub looks inside many runs of them.
fn lzma(head: &[u8]) -> bool {
    let [0x5d, 0, 0, b3, b4, ..] = *head else {
        return false;
    };
    let dict = u32::from_le_bytes([0, 0, b3, b4]);
    dict.is_power_of_two() || (dict.is_multiple_of(3) && (dict / 3).is_power_of_two())
}

/// Unix `compress` (`.Z`): its two magic bytes, then flags with the
/// reserved bits clear and a code size of 9 to 16 bits, as `ncompress`
/// requires (two bytes alone are met every 64 KiB of random bytes).
fn compress(head: &[u8]) -> bool {
    let [0x1f, 0x9d, flags, ..] = *head else {
        return false;
    };
    flags & 0x60 == 0 && (9..=16).contains(&(flags & 0x1f))
}

/// A zlib header (RFC 1950): method 8, a window of 256 bytes to 32 KiB
/// (CINFO 0 to 7), the check making the pair a multiple of 31; and what
/// follows it decodes as far as it goes. A header with a preset
/// dictionary (FDICT) names data the scrub cannot read without that
/// dictionary, which is not in the response: it is opaque.
///
/// Text may start with a valid header (`80 items`, `(S`, `HK`, `x^`):
/// only `x` (the header every writer makes, 32 KiB and no dictionary) is
/// taken where the first bytes are all text; another header is taken
/// only where a byte of them is not text, as compressed data's are (its
/// dictionary's checksum and coded bits). Such a text from a host sent
/// secrets in bodies that starts `x^` and still decodes as far as ten
/// bytes go (`x^2 + 1`) is cut where it stops decoding.
fn zlib(head: &[u8]) -> Option<Sniffed> {
    let [cmf, flg, ..] = *head else {
        return None;
    };
    let dict = zlib_header(cmf, flg)?;
    let common = cmf == 0x78 && !dict;
    if !common
        && head
            .iter()
            .all(|&b| b.is_ascii_graphic() || b.is_ascii_whitespace())
    {
        return None;
    }
    if dict {
        return deflates_after_dictionary(head.get(6..)?)
            .then_some(Sniffed::Opaque(ZLIB_DICTIONARY));
    }
    // Ten bytes decode to a few KiB at most (a handful of matches of
    // 258 bytes each).
    let mut out = vec![0u8; 4096];
    flate2::Decompress::new(true)
        .decompress(head, &mut out, flate2::FlushDecompress::None)
        .is_ok()
        .then_some(Sniffed::Coded(Coding::Deflate))
}

/// Whether `cmf` and `flg` are a zlib header (RFC 1950), and whether it
/// says a preset dictionary follows (`None`: not a header).
pub(super) fn zlib_header(cmf: u8, flg: u8) -> Option<bool> {
    let header = cmf & 0x0f == 8
        && cmf >> 4 <= 7
        && (u16::from(cmf) << 8 | u16::from(flg)).is_multiple_of(31);
    header.then_some(flg & 0x20 != 0)
}

/// Whether `data` (what follows a zlib header with a preset dictionary
/// and the dictionary's checksum) decodes as deflate with no fault, to
/// its end or its stream's, given a dictionary of zeros in place of the
/// one it names (distances into the dictionary are then valid, the bytes
/// they copy unknown). Random bytes fault within a few dozen; a stream
/// that decodes past a few MiB is taken as one.
fn deflates_after_dictionary(data: &[u8]) -> bool {
    // A stored block that is not the last (a header byte of 0, LEN
    // 32768, NLEN its complement) of 32 KiB of zeros, then the stream.
    let mut input = vec![0u8; 5 + (32 << 10)];
    input[1..5].copy_from_slice(&[0x00, 0x80, 0xff, 0x7f]);
    input.extend_from_slice(data);
    let mut d = flate2::Decompress::new(false);
    let mut out = vec![0u8; 64 << 10];
    loop {
        let (at, before) = (d.total_in(), d.total_out());
        let from = usize::try_from(at).unwrap_or(usize::MAX).min(input.len());
        match d.decompress(&input[from..], &mut out, flate2::FlushDecompress::None) {
            Err(_) => return false,
            Ok(flate2::Status::StreamEnd) => return true,
            Ok(_) => {}
        }
        if d.total_in() == input.len() as u64 || d.total_out() > 4 << 20 {
            return true;
        }
        if d.total_in() == at && d.total_out() == before {
            return false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn compressed_data_is_told_by_its_first_bytes_and_text_is_not() {
        let echo = b"echo of the token: sk-live-0123456789 (end)\n";
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), Default::default());
        gz.write_all(echo).unwrap();
        let gz = gz.finish().unwrap();
        assert_eq!(sniff(&gz), Some(Sniffed::Coded(Coding::Gzip)));
        for level in [0, 1, 6, 9] {
            let mut z =
                flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::new(level));
            z.write_all(echo).unwrap();
            let z = z.finish().unwrap();
            assert_eq!(sniff(&z), Some(Sniffed::Coded(Coding::Deflate)), "{level}");
        }
        for (head, name) in [
            (&b"\x28\xb5\x2f\xfd\x04\x58\x19\x00\x00\x68"[..], "zstd"),
            (b"\xfd7zXZ\x00\x00\x04\xe6\xd6", "xz"),
            (b"BZh91AY&SY\x1d\x5e", "bzip2"),
            (b"BZh9\x17\x72\x45\x38\x50\x90", "bzip2"),
            (b"PK\x03\x04\x14\x00\x00\x00\x08\x00", "zip"),
            (b"7z\xbc\xaf\x27\x1c\x00\x04", "7z"),
            (b"PACK\x00\x00\x00\x02\x00\x00", "git pack"),
        ] {
            assert_eq!(sniff(head), Some(Sniffed::Opaque(name)), "{name}");
        }
        for text in [
            &b"80 items"[..],
            b"(Sorry, no)",
            b"hb",
            b"xylophone",
            b"x^x^x^x^x^",
            b"BZh9 is a name",
            b"PK tip",
            b"{\"ok\": true}",
            b"",
            b"\x1f",
        ] {
            assert_eq!(sniff(text), None, "{}", String::from_utf8_lossy(text));
        }
    }

    /// Outside review 31, F1: only `0x78` without a preset dictionary was
    /// taken for zlib, so a body from a writer with a smaller window, or
    /// one with a preset dictionary, was neither read nor withheld.
    #[test]
    fn every_zlib_header_is_told_and_one_with_a_dictionary_is_opaque() {
        let echo = b"echo of the token: sk-live-0123456789 (end), echo again: sk-live-0123456789";
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        z.write_all(echo).unwrap();
        let z = z.finish().unwrap();
        for cinfo in 0..=7u8 {
            let cmf = cinfo << 4 | 8;
            let flg = (0u8..32)
                .map(|c| 0x80 | c)
                .find(|f| (u16::from(cmf) << 8 | u16::from(*f)).is_multiple_of(31))
                .unwrap();
            let small = [&[cmf, flg][..], &z[2..]].concat();
            assert_eq!(
                sniff(&small),
                Some(Sniffed::Coded(Coding::Deflate)),
                "{cinfo}"
            );
            // And the body's decoder reads it.
            let mut plain = Vec::new();
            std::io::Read::read_to_end(&mut flate2::read::ZlibDecoder::new(&small[..]), &mut plain)
                .unwrap();
            assert_eq!(plain, echo);
        }
        let mut raw =
            flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::default());
        raw.write_all(echo).unwrap();
        let raw = raw.finish().unwrap();
        let flg = (0u8..32)
            .map(|c| 0xa0 | c)
            .find(|f| (0x7800u16 | u16::from(*f)).is_multiple_of(31))
            .unwrap();
        let dict = [&[0x78, flg][..], b"\x1d\x09\x04\xc1", &raw].concat();
        assert_eq!(sniff(&dict), Some(Sniffed::Opaque(ZLIB_DICTIONARY)));
        assert_eq!(sniff(&dict[..HEAD]), Some(Sniffed::Opaque(ZLIB_DICTIONARY)));
        // Text that starts with a valid header is still text.
        for text in [
            &b"80 items left"[..],
            b"HKEY_LOCAL_MACHINE",
            b"XG: done",
            b"hC is here",
            b"8O clock",
        ] {
            assert_eq!(sniff(text), None, "{}", String::from_utf8_lossy(text));
        }
    }
}
