//! What keeps a terminated host's answer readable to the scrub, and whole
//! to it: the request headers that let the sandbox choose how the answer
//! is written or cut (the accepted encodings and charsets, and towards a
//! secret's own host a `Range`), left out of what goes upstream; and the
//! charsets a response may declare and still be scrubbed. It never reads
//! a body (the scrub does) and never decides a request (the rules do).

/// Request headers never forwarded on a terminated connection, and why:
/// each lets the sandbox ask for an answer the scrub cannot read.
const LEFT_OUT: &[(&str, &str)] = &[
    (
        "accept-encoding",
        "a compressed answer is decoded to be scrubbed; the sandbox does not choose the coding",
    ),
    (
        "accept-charset",
        "a server that negotiates its charset answers in UTF-16, UTF-32 or EBCDIC when asked, spellings of the value the scrub does not read",
    ),
];

/// Request headers not forwarded to a secret's own host, and why: each
/// would let the sandbox read an echoed value back in pieces, none of
/// which holds the whole value the scrub looks for.
const LEFT_OUT_TO_SECRET_HOST: &[(&str, &str)] = &[
    (
        "range",
        "an echo read back a few bytes at a time holds the value in no one answer",
    ),
    (
        "if-range",
        "meaningless without its Range, and one more way to ask for a part",
    ),
];

/// Whether the request header `key` (lower case) stays out of what goes
/// upstream on a terminated connection; `secret_host`: the connection's
/// name and port are a secret's own host.
pub(super) fn left_out(key: &str, secret_host: bool) -> bool {
    LEFT_OUT.iter().any(|(k, _)| *k == key)
        || (secret_host && LEFT_OUT_TO_SECRET_HOST.iter().any(|(k, _)| *k == key))
}

/// Charsets whose text spells every ASCII byte as that byte, so that a
/// value the scrub knows stands in it as the scrub looks for it: a
/// charset's lower-case name, or the start of a family's names and `*`.
/// Any other declared charset (UTF-16, UTF-32, UTF-7, EBCDIC, or
/// a name warden does not know) cannot be read to be checked.
const ASCII_COMPATIBLE: &[&str] = &[
    "utf-8",
    "utf8",
    "us-ascii",
    "ascii",
    "iso-8859-*",
    "iso8859-*",
    "iso_8859-*",
    "latin1",
    "latin-1",
    "l1",
    "windows-125*",
    "cp125*",
    "koi8-*",
    "euc-*",
    "shift_jis",
    "shift-jis",
    "sjis",
    "windows-31j",
    "gb2312",
    "gbk",
    "gb18030",
    "big5*",
    "tis-620",
    "windows-874",
    "macintosh",
    "x-mac-*",
    "ibm437",
    "cp437",
    "cp850",
    "ibm850",
];

/// The charset `content_type` declares, when it is one the scrub cannot
/// read (see [`ASCII_COMPATIBLE`]); `None` when it declares none or a
/// readable one.
pub(super) fn unreadable_charset(content_type: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(content_type).to_ascii_lowercase();
    for param in text.split(';').skip(1) {
        let Some((key, value)) = param.split_once('=') else {
            continue;
        };
        if key.trim() != "charset" {
            continue;
        }
        let name = value.trim().trim_matches('"').trim();
        let readable = ASCII_COMPATIBLE.iter().any(|c| match c.strip_suffix('*') {
            Some(family) => name.starts_with(family),
            None => name == *c,
        });
        if !readable {
            let shown: String = name
                .chars()
                .take(40)
                .map(|c| if c.is_ascii_graphic() { c } else { '?' })
                .collect();
            return Some(shown);
        }
    }
    None
}

/// Media types whose data is compressed (or holds compressed parts) as
/// the server writes it, with no Content-Encoding to undo: an archive of
/// what a host stores (GitHub's tarball and zipball, a git pack) holds a
/// value the request put there in bytes the scrub cannot read. A type's
/// lower-case name, or the start of a family's names and `*`. A plain
/// tar is not among them: its members are stored as they are, and read.
const PACKED: &[&str] = &[
    "application/gzip",
    "application/x-gzip",
    "application/x-gunzip",
    "application/gzipped",
    "application/x-tgz",
    "application/x-compressed-tar",
    "application/x-compress",
    "application/x-compressed",
    "application/zip",
    "application/x-zip",
    "application/x-zip-compressed",
    "application/zip-compressed",
    "application/x-bzip",
    "application/x-bzip2",
    "application/x-xz",
    "application/x-lzma",
    "application/x-lzip",
    "application/x-lz4",
    "application/zstd",
    "application/x-zstd",
    "application/x-brotli",
    "application/x-7z-compressed",
    "application/vnd.rar",
    "application/x-rar-compressed",
    "application/java-archive",
    "application/x-git-*",
    "application/pdf",
    "application/vnd.openxmlformats-*",
    "application/vnd.oasis.opendocument.*",
    "application/epub+zip",
];

/// The media type `content_type` declares, when its data is compressed
/// as the server writes it (see [`PACKED`]); `None` otherwise.
pub(super) fn packed_type(content_type: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(content_type).to_ascii_lowercase();
    let name = text.split(';').next().unwrap_or_default().trim();
    let packed = name.ends_with("+zip")
        || PACKED.iter().any(|c| match c.strip_suffix('*') {
            Some(family) => name.starts_with(family),
            None => name == *c,
        });
    packed.then(|| {
        name.chars()
            .take(60)
            .map(|c| if c.is_ascii_graphic() { c } else { '?' })
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_charsets_a_server_may_answer_in_are_left_out_and_ranges_only_to_a_secrets_host() {
        for key in ["accept-encoding", "accept-charset"] {
            assert!(left_out(key, false) && left_out(key, true), "{key}");
        }
        for key in ["range", "if-range"] {
            assert!(left_out(key, true) && !left_out(key, false), "{key}");
        }
        for key in ["accept", "content-type", "authorization", "te"] {
            assert!(!left_out(key, true), "{key}");
        }
    }

    #[test]
    fn archives_and_compressed_data_a_server_writes_are_unreadable_and_text_is_not() {
        for (ct, name) in [
            (&b"application/x-gzip"[..], "application/x-gzip"),
            (b"Application/GZIP", "application/gzip"),
            (b"application/zip; name=main.zip", "application/zip"),
            (
                b"application/x-git-upload-pack-result",
                "application/x-git-upload-pack-result",
            ),
            (b"application/zstd", "application/zstd"),
            (
                b"application/vnd.example+zip",
                "application/vnd.example+zip",
            ),
        ] {
            assert_eq!(packed_type(ct).as_deref(), Some(name));
        }
        for ct in [
            &b"application/json"[..],
            b"text/plain; charset=utf-8",
            b"application/x-tar",
            b"application/octet-stream",
            b"application/vnd.github+json",
        ] {
            assert_eq!(packed_type(ct), None, "{}", String::from_utf8_lossy(ct));
        }
    }

    #[test]
    fn only_charsets_that_spell_ascii_as_ascii_are_readable() {
        for ct in [
            &b"application/json"[..],
            b"text/html; charset=utf-8",
            b"text/plain;charset=\"UTF-8\"",
            b"text/plain; charset=ISO-8859-1",
            b"text/plain; charset=windows-1252",
            b"text/plain; charset=Shift_JIS",
        ] {
            assert_eq!(
                unreadable_charset(ct),
                None,
                "{}",
                String::from_utf8_lossy(ct)
            );
        }
        for (ct, name) in [
            (&b"application/json; charset=utf-16"[..], "utf-16"),
            (b"text/plain; charset=\"UTF-16LE\"", "utf-16le"),
            (b"text/plain; charset=utf-32be", "utf-32be"),
            (b"text/plain; charset=utf-7", "utf-7"),
            (b"text/plain; charset=IBM037", "ibm037"),
            (b"text/plain; charset=ebcdic-cp-us", "ebcdic-cp-us"),
            (b"text/plain; charset=ucs-2", "ucs-2"),
            (b"text/plain; charset=utf-8; charset=utf-16", "utf-16"),
            (b"text/plain; charset=made-up", "made-up"),
        ] {
            assert_eq!(unreadable_charset(ct).as_deref(), Some(name));
        }
    }
}
