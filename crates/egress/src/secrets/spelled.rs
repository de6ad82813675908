//! Finding bytes in any common text spelling of themselves: what a server
//! (or code inside the sandbox) may turn a secret's value into without
//! changing what it means. Each byte of the sought bytes may stand as
//! itself (letters in either case), percent-encoded (`%2f`, `%2F`, IIS's
//! `%u002f`), quoted-printable (`=2F`), as a JSON, JavaScript, C or CSS
//! escape (`\u002f`, `\u{2f}`, `\x2f`, `\/`, `\"`, `\\`, octal `\057`,
//! CSS's `\2f `), as an HTML character reference (`&#47;`, `&#x2F;`,
//! `&sol;`, and a numeric one without its `;`), or `+` for a space;
//! spellings may be mixed within one occurrence (as encoders that
//! leave reserved characters alone produce). Nothing here allocates per
//! byte of the text or can take more than quadratic time.

use smallvec::SmallVec;

/// The most bytes one byte's spelling takes (`&#x0002F;`).
pub(super) const LONGEST: usize = 10;

/// Named HTML references for ASCII characters (HTML's own table, the ones
/// with one character).
const NAMED: &[(&[u8], u8)] = &[
    (b"excl", b'!'),
    (b"quot", b'"'),
    (b"QUOT", b'"'),
    (b"num", b'#'),
    (b"dollar", b'$'),
    (b"percnt", b'%'),
    (b"amp", b'&'),
    (b"AMP", b'&'),
    (b"apos", b'\''),
    (b"lpar", b'('),
    (b"rpar", b')'),
    (b"ast", b'*'),
    (b"midast", b'*'),
    (b"plus", b'+'),
    (b"comma", b','),
    (b"period", b'.'),
    (b"sol", b'/'),
    (b"colon", b':'),
    (b"semi", b';'),
    (b"lt", b'<'),
    (b"LT", b'<'),
    (b"equals", b'='),
    (b"gt", b'>'),
    (b"GT", b'>'),
    (b"quest", b'?'),
    (b"commat", b'@'),
    (b"lsqb", b'['),
    (b"lbrack", b'['),
    (b"bsol", b'\\'),
    (b"rsqb", b']'),
    (b"rbrack", b']'),
    (b"Hat", b'^'),
    (b"lowbar", b'_'),
    (b"UnderBar", b'_'),
    (b"grave", b'`'),
    (b"DiacriticalGrave", b'`'),
    (b"lcub", b'{'),
    (b"lbrace", b'{'),
    (b"verbar", b'|'),
    (b"vert", b'|'),
    (b"VerticalLine", b'|'),
    (b"rcub", b'}'),
    (b"rbrace", b'}'),
    (b"tilde", b'~'),
    (b"Tab", b'\t'),
    (b"NewLine", b'\n'),
    (b"nbsp", b' '),
];

fn hex(digits: &[u8]) -> Option<u32> {
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_hexdigit) {
        return None;
    }
    u32::from_str_radix(std::str::from_utf8(digits).ok()?, 16).ok()
}

/// The value of the longest run (at most `most` digits) of digits of
/// `radix` at the start of `text`, and its length: escapes that end where
/// their digits do (`&#119`, `\167`, CSS's `\77`) are read as their
/// decoders read them, as far as a digit goes.
fn digits(text: &[u8], radix: u32, most: usize) -> Option<(u32, usize)> {
    let n = text
        .iter()
        .take(most)
        .take_while(|c| char::from(**c).is_digit(radix))
        .count();
    if n == 0 {
        return None;
    }
    let run = std::str::from_utf8(text.get(..n)?).ok()?;
    u32::from_str_radix(run, radix).ok().map(|v| (v, n))
}

/// The readings of an HTML character reference at the start of `text`
/// (`&#47;`, `&#x2F;`, `&sol;`; a numeric one without its `;` too, as
/// HTML parsers read `&#119&#74`).
fn reference(text: &[u8]) -> Option<(u32, usize)> {
    let numeric = match text.get(1..3) {
        Some([b'#', b'x' | b'X']) => digits(&text[3..], 16, 6).map(|(v, n)| (v, n + 3)),
        Some([b'#', _]) => digits(&text[2..], 10, 7).map(|(v, n)| (v, n + 2)),
        _ => None,
    };
    if let Some((v, n)) = numeric {
        let semi = usize::from(text.get(n) == Some(&b';'));
        return Some((v, n + semi));
    }
    let end = text.iter().take(LONGEST + 4).position(|&c| c == b';')?;
    if end >= LONGEST {
        return None;
    }
    NAMED
        .iter()
        .find(|(n, _)| *n == &text[1..end])
        .map(|(_, c)| (u32::from(*c), end + 1))
}

/// The readings of a backslash escape at the start of `text`: JSON's and
/// JavaScript's (`\u002f`, ES6's `\u{2f}`, `\x2f`, `\/`, `\"`, `\\`,
/// `\'`), C's and PHP's octal (`\057`), and CSS's hexadecimal (`\2f`,
/// ended by one space if it has one). `\167` is octal to one reader and
/// CSS to another: both readings are given.
fn backslash(text: &[u8], out: &mut SmallVec<[(u32, usize); 2]>) {
    match text.get(1) {
        Some(b'u' | b'U') if text.get(2) == Some(&b'{') => {
            if let Some((v, n)) = digits(&text[3..], 16, 6) {
                if text.get(3 + n) == Some(&b'}') {
                    out.push((v, n + 4));
                }
            }
        }
        Some(b'u' | b'U') => out.extend(text.get(2..6).and_then(hex).map(|v| (v, 6))),
        Some(b'x' | b'X') => out.extend(text.get(2..4).and_then(hex).map(|v| (v, 4))),
        Some(&c) if b"/\"\\'".contains(&c) => out.push((u32::from(c), 2)),
        Some(c) if c.is_ascii_hexdigit() => {
            if let Some((v, n)) = digits(&text[1..], 8, 3) {
                out.push((v, n + 1));
            }
            if let Some((v, n)) = digits(&text[1..], 16, 6) {
                let space = match text.get(1 + n..) {
                    Some([b'\r', b'\n', ..]) => 2,
                    Some([b' ' | b'\t' | b'\n' | b'\r' | b'\x0c', ..]) => 1,
                    _ => 0,
                };
                if !out.contains(&(v, n + 1 + space)) {
                    out.push((v, n + 1 + space));
                }
            }
        }
        _ => {}
    }
}

/// The bytes an escape at the start of `text` may stand for, each with
/// the escape's length: `%2F` (either case) and IIS's `%u002F`, `+` for a
/// space, quoted-printable's `=2F`, the backslash escapes of JSON,
/// JavaScript, C and CSS ([`backslash`]), and HTML's character references
/// ([`reference`]). Empty when `text` starts with no escape (a byte that
/// stands for itself). An escape read two ways (`\101`) gives both.
pub(super) fn escapes_at(text: &[u8]) -> SmallVec<[(u8, usize); 2]> {
    let mut read: SmallVec<[(u32, usize); 2]> = SmallVec::new();
    match text.first() {
        Some(b'%') if matches!(text.get(1), Some(b'u' | b'U')) => {
            read.extend(text.get(2..6).and_then(hex).map(|v| (v, 6)));
        }
        Some(b'%' | b'=') => read.extend(text.get(1..3).and_then(hex).map(|v| (v, 3))),
        Some(b'+') => read.push((u32::from(b' '), 1)),
        Some(b'\\') => backslash(text, &mut read),
        Some(b'&') => read.extend(reference(text)),
        _ => {}
    }
    read.into_iter()
        .filter_map(|(v, n)| u8::try_from(v).ok().map(|b| (b, n)))
        .collect()
}

/// The lengths of the spellings of `b` at the start of `text`: the byte
/// itself, and each escape that reads as it.
fn spellings(b: u8, text: &[u8]) -> SmallVec<[usize; 3]> {
    let mut out = SmallVec::new();
    let Some(&first) = text.first() else {
        return out;
    };
    if first.eq_ignore_ascii_case(&b) {
        out.push(1);
    }
    for (d, n) in escapes_at(text) {
        if d == b && !out.contains(&n) {
            out.push(n);
        }
    }
    out
}

/// Bytes an occurrence of `b`, spelled, may start with.
pub(super) fn openers(b: u8) -> SmallVec<[u8; 7]> {
    let mut out = SmallVec::new();
    out.extend_from_slice(&[
        b.to_ascii_lowercase(),
        b.to_ascii_uppercase(),
        b'%',
        b'\\',
        b'&',
        b'=',
    ]);
    if b == b' ' {
        out.push(b'+');
    }
    out
}

/// The length of an occurrence of `sought`, spelled in any of the ways
/// above, at the start of `text` (the longest, when spellings overlap).
pub(super) fn find_at(sought: &[u8], text: &[u8]) -> Option<usize> {
    let Some((&b, rest)) = sought.split_first() else {
        return Some(0);
    };
    // Where an occurrence may stand after each byte of `sought`, each
    // place once: spellings that overlap (a `%` that is itself part of
    // the value) cannot make the search exponential. Most places a
    // scrubber asks about spell not even the first two bytes: answered
    // without allocating.
    let mut places: SmallVec<[usize; 8]> = spellings(b, text).into_iter().collect();
    let mut next: SmallVec<[usize; 8]> = SmallVec::new();
    for &b in rest {
        if places.is_empty() {
            return None;
        }
        next.clear();
        for &at in &places {
            for n in spellings(b, text.get(at..).unwrap_or_default()) {
                if !next.contains(&(at + n)) {
                    next.push(at + n);
                }
            }
        }
        std::mem::swap(&mut places, &mut next);
    }
    places.into_iter().max()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The value every spelling below writes.
    const V: &[u8] = b"sk/Live+tok:x=Q";

    /// Each of `texts`, followed by more text, is found as a spelling of
    /// [`V`] that ends where the text does.
    fn found_whole(texts: &[&[u8]]) {
        for text in texts {
            let mut padded = text.to_vec();
            padded.extend_from_slice(b" and more");
            assert_eq!(
                find_at(V, &padded),
                Some(text.len()),
                "{}",
                String::from_utf8_lossy(text)
            );
        }
    }

    #[test]
    fn every_common_spelling_is_found_whole() {
        found_whole(&[
            &b"sk/Live+tok:x=Q"[..],
            b"SK/LIVE+TOK:X=Q",
            b"sk%2FLive%2btok%3Ax%3DQ",
            b"sk/Live%2Btok:x=Q",
            b"%73%6B%2F%4C%69%76%65%2B%74%6F%6B%3A%78%3D%51",
            b"sk\\/Live\\u002btok\\u003Ax\\x3dQ",
            b"sk&#x2F;Live&#43;tok&colon;x&equals;Q",
            b"sk&sol;Live&plus;tok&#58;x&#x0003D;Q",
        ]);
        assert_eq!(find_at(V, b"sk/Live+tok:x=R"), None);
        assert_eq!(find_at(V, b"sk/Live+tok:x=q="), Some(15));
    }

    #[test]
    fn spellings_servers_emit_where_they_echo_a_token_are_found_whole() {
        // Each as the review of a reflecting server found it unscrubbed:
        // quoted-printable, HTML references without `;`, C and PHP octal,
        // CSS escapes (ended by a space or not), ES6 `\u{..}`, IIS `%u`.
        found_whole(&[
            &b"sk=2FLive=2Btok=3Ax=3DQ"[..],
            b"&#115&#107&#47Live&#43tok&#58x&#61Q",
            b"sk&#x2FLive&#x2Btok&#x3Ax&#x3DQ",
            b"\\163\\153\\057Live\\053tok\\072x\\075Q",
            b"sk\\2f Live\\2B tok\\3a x\\3d Q",
            b"sk\\00002fLive\\2btok\\3ax\\3d\r\nQ",
            b"sk\\u{2f}Live\\u{2B}tok\\u{3a}x\\u{00003d}Q",
            b"sk%u002FLive%u002Btok%u003Ax%u003DQ",
        ]);
        // Octal to one reader, CSS to another: both are read.
        assert_eq!(find_at(b"w", b"\\167"), Some(4));
        assert_eq!(find_at(b"A", b"\\41"), Some(3));
        assert_eq!(find_at(b"!", b"\\41"), Some(3));
        assert_eq!(find_at(V, b"sk/Live+tok:x="), None);
        // A `%` in the value itself, written raw or encoded.
        assert_eq!(find_at(b"a%25b", b"a%25b"), Some(5));
        assert_eq!(find_at(b"a%25b", b"a%2525b"), Some(7));
    }
}
