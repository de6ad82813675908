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
    (b"\x5d\x00\x00", Sniffed::Opaque("lzma")),
    (b"LZIP", Sniffed::Opaque("lzip")),
    (b"\x04\x22\x4d\x18", Sniffed::Opaque("lz4")),
    (b"\x1f\x9d", Sniffed::Opaque("compress")),
    // A zip's local file header, and a spanned archive's marker.
    (b"PK\x03\x04", Sniffed::Opaque("zip")),
    (b"PK\x07\x08", Sniffed::Opaque("zip")),
    (b"7z\xbc\xaf\x27\x1c", Sniffed::Opaque("7z")),
    (b"Rar!\x1a\x07", Sniffed::Opaque("rar")),
    // A git pack: its objects are zlib streams.
    (b"PACK\x00\x00\x00", Sniffed::Opaque("git pack")),
];

/// What `head` (a body's first bytes: at least [`HEAD`] of them, or the
/// whole body) says the body is; `None`: no compressed data warden knows.
pub(super) fn sniff(head: &[u8]) -> Option<Sniffed> {
    if let Some((_, what)) = SIGNATURES.iter().find(|(sig, _)| head.starts_with(sig)) {
        return Some(*what);
    }
    if bzip2(head) {
        return Some(Sniffed::Opaque("bzip2"));
    }
    zlib(head).then_some(Sniffed::Coded(Coding::Deflate))
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

/// A zlib header (RFC 1950) as writers make it: method 8 with a 32 KiB
/// window (0x78), no preset dictionary, the check making the pair a
/// multiple of 31; and what follows it decodes as far as it goes. A
/// looser reading (any window, any flags) would take text starting `80`
/// or `(S` for zlib, and the header alone text starting `x^` (of which
/// some, `x^2 + 1`, still decodes as far as ten bytes go: such a text
/// from a host sent secrets in bodies is cut where it stops decoding).
fn zlib(head: &[u8]) -> bool {
    let [0x78, flg, _, ..] = *head else {
        return false;
    };
    if !(0x78u16 << 8 | u16::from(flg)).is_multiple_of(31) || flg & 0x20 != 0 {
        return false;
    }
    // Ten bytes decode to a few KiB at most (a handful of matches of
    // 258 bytes each).
    let mut out = vec![0u8; 4096];
    flate2::Decompress::new(true)
        .decompress(head, &mut out, flate2::FlushDecompress::None)
        .is_ok()
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
}
