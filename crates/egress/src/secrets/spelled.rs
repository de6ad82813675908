//! Finding bytes in any common text spelling of themselves: what a server
//! (or code inside the sandbox) may turn a secret's value into without
//! changing what it means. Each byte of the sought bytes may stand as
//! itself (letters in either case), percent-encoded (`%2f`, `%2F`), as a
//! JSON or JavaScript escape (`\u002f`, `\x2f`, `\/`, `\"`, `\\`), as an
//! HTML character reference (`&#47;`, `&#x2F;`, `&sol;`), or `+` for a
//! space; spellings may be mixed within one occurrence (as encoders that
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

/// The byte an escape at the start of `text` stands for, and the escape's
/// length: `%2F` (either case), `\u002f`, `\x2f`, `\/` (and `\"`, `\\`,
/// `\'`), `&#47;`, `&#x2F;`, `&sol;`, or `+` for a space. `None` when
/// `text` starts with no escape (a byte that stands for itself).
pub(super) fn escape_at(text: &[u8]) -> Option<(u8, usize)> {
    let byte = |code: Option<u32>| code.and_then(|c| u8::try_from(c).ok());
    match *text.first()? {
        b'%' => byte(text.get(1..3).and_then(hex)).map(|b| (b, 3)),
        b'+' => Some((b' ', 1)),
        b'\\' => match text.get(1) {
            Some(b'u' | b'U') => byte(text.get(2..6).and_then(hex)).map(|b| (b, 6)),
            Some(b'x' | b'X') => byte(text.get(2..4).and_then(hex)).map(|b| (b, 4)),
            Some(&c) if b"/\"\\'".contains(&c) => Some((c, 2)),
            _ => None,
        },
        b'&' => {
            let end = text.iter().take(LONGEST + 4).position(|&c| c == b';')?;
            if end >= LONGEST {
                return None;
            }
            let code = match &text[1..end] {
                [b'#', b'x' | b'X', digits @ ..] if digits.len() <= 6 => hex(digits),
                [b'#', digits @ ..]
                    if !digits.is_empty()
                        && digits.len() <= 7
                        && digits.iter().all(u8::is_ascii_digit) =>
                {
                    std::str::from_utf8(digits)
                        .ok()
                        .and_then(|d| d.parse().ok())
                }
                name => NAMED
                    .iter()
                    .find(|(n, _)| *n == name)
                    .map(|(_, c)| *c as u32),
            };
            byte(code).map(|b| (b, end + 1))
        }
        _ => None,
    }
}

/// The lengths of the spellings of `b` at the start of `text`: at most
/// two (the byte itself, and one escape).
fn spellings(b: u8, text: &[u8]) -> SmallVec<[usize; 2]> {
    let mut out = SmallVec::new();
    let Some(&first) = text.first() else {
        return out;
    };
    if first.eq_ignore_ascii_case(&b) {
        out.push(1);
    }
    if let Some((_, n)) = escape_at(text).filter(|&(d, _)| d == b) {
        out.push(n);
    }
    out
}

/// Bytes an occurrence of `b`, spelled, may start with.
pub(super) fn openers(b: u8) -> SmallVec<[u8; 6]> {
    let mut out = SmallVec::new();
    out.extend_from_slice(&[
        b.to_ascii_lowercase(),
        b.to_ascii_uppercase(),
        b'%',
        b'\\',
        b'&',
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

    #[test]
    fn every_common_spelling_is_found_whole() {
        let v = b"sk/Live+tok:x=Q";
        for text in [
            &b"sk/Live+tok:x=Q"[..],
            b"SK/LIVE+TOK:X=Q",
            b"sk%2FLive%2btok%3Ax%3DQ",
            b"sk/Live%2Btok:x=Q",
            b"%73%6B%2F%4C%69%76%65%2B%74%6F%6B%3A%78%3D%51",
            b"sk\\/Live\\u002btok\\u003Ax\\x3dQ",
            b"sk&#x2F;Live&#43;tok&colon;x&equals;Q",
            b"sk&sol;Live&plus;tok&#58;x&#x0003D;Q",
        ] {
            let mut padded = text.to_vec();
            padded.extend_from_slice(b" and more");
            assert_eq!(
                find_at(v, &padded),
                Some(text.len()),
                "{}",
                String::from_utf8_lossy(text)
            );
        }
        assert_eq!(find_at(v, b"sk/Live+tok:x=R"), None);
        assert_eq!(find_at(v, b"sk/Live+tok:x="), None);
        // A `%` in the value itself, written raw or encoded.
        assert_eq!(find_at(b"a%25b", b"a%25b"), Some(5));
        assert_eq!(find_at(b"a%25b", b"a%2525b"), Some(7));
    }
}
