//! Finding bytes in any common text spelling of themselves: what a server
//! (or code inside the sandbox) may turn a secret's value into without
//! changing what it means. Each byte of the sought bytes may stand as
//! itself (letters in either case), percent-encoded (`%2f`, `%2F`, IIS's
//! `%u002f`), quoted-printable (`=2F`), as a JSON, JavaScript, C or CSS
//! escape (`\u002f`, `\u{2f}`, `\x2f`, octal `\057`, CSS's `\2f `, and a
//! backslash before any other character that is not a digit: `\/`, `\_`,
//! `\-`, as JavaScript's and CSS's identity escapes, Markdown and regular
//! expression escapers write them), as an HTML character reference
//! (`&#47;`, `&#x2F;`, `&sol;`, and a numeric one without its `;`), as an
//! overlong UTF-8 pair (`C0 AF`), or `+` for a space; spellings may be
//! mixed within one occurrence (as encoders that leave reserved
//! characters alone produce), and quoted-printable's soft line break
//! (`=`, padding of spaces or tabs, and a line break) or a backslash line
//! continuation (`\` and a line break) may stand between any two bytes.
//!
//! Escapes are read inside escapes: the characters of an escape may
//! themselves be spelled, up to [`DEPTH`] levels (`%252F` is a percent
//! escape of `%` followed by `2F`; `&amp;#47;`, `%5Cu002f`, `\\u002f`,
//! `%25%32%46` likewise), as a server that encodes what is already
//! encoded writes them (a redirect's `next=` quoting a target whose value
//! warden percent-encoded). One byte's spelling takes at most
//! [`LONGEST`] bytes. A spelling nested deeper than [`DEPTH`] is not
//! decoded: [`escapes_at`] says it is there and which byte it spells one
//! level further, and the scrub withholds the rest of the text (fail
//! closed) where that byte is one of a value's, rather than let a value
//! through one more level of encoding; where the byte one level further
//! is itself an opener (five levels and more), whatever byte it may
//! spell. Reading costs a bounded number of steps
//! per byte whatever the text holds, and nothing here allocates per byte.

use smallvec::SmallVec;

/// How many levels of escape inside escape one byte's spelling is read
/// through (`%2F` is one, `%252F` two, `%25252F` three).
pub(super) const DEPTH: usize = 3;

/// The most bytes one byte's spelling takes, nested ones included
/// (`%25%32%46` is 9, `&amp;#x0002F;` 13).
pub(super) const LONGEST: usize = 32;

/// The bytes after a position that reading an escape there may look at:
/// an escape, and the characters read to tell where the escapes inside it
/// end.
pub(super) const WINDOW: usize = 2 * LONGEST + 8;

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

/// The longest name in [`NAMED`].
const LONGEST_NAME: usize = 16;

/// Readings: a value and the bytes it takes.
type Reads = SmallVec<[(u32, usize); 8]>;

fn add(out: &mut Reads, r: (u32, usize)) {
    if !out.contains(&r) {
        out.push(r);
    }
}

/// Bytes that may open an escape (at any depth: an escape of an opener
/// starts with an opener too).
pub(super) fn opens(b: u8) -> bool {
    matches!(b, b'%' | b'\\' | b'&' | b'+' | b'=' | 0xc0 | 0xc1)
}

fn digit(c: Option<&u8>, radix: u32) -> bool {
    c.is_some_and(|&c| char::from(c).is_digit(radix))
}

/// Positions whose readings a [`Memo`] keeps: more than an escape and
/// the escapes inside it reach.
const SLOTS: usize = 4 * LONGEST;

/// The readings of a stream's characters already worked out, by position
/// and depth: each is worked out once however many escapes around it ask,
/// so that reading costs a bounded number of steps per byte (escapes
/// inside escapes, read without it, cost exponentially many in a run of
/// backslashes).
pub(super) struct Memo {
    slots: Vec<Slot>,
}

struct Slot {
    /// The position the slot holds, and which depths it has.
    at: usize,
    have: u8,
    reads: [Reads; DEPTH + 2],
}

impl Memo {
    /// An empty memo; its slots are made when the first reading is kept
    /// (most text asked about holds no escape).
    pub(super) fn new() -> Memo {
        Memo { slots: Vec::new() }
    }
}

/// A stream's text (its first byte at position `base`) read through a
/// [`Memo`].
struct Reader<'a> {
    text: &'a [u8],
    base: usize,
    memo: &'a mut Memo,
    /// Bytes that readings left out (past [`MOST_READINGS`]) spell.
    dropped: SmallVec<[u8; 4]>,
}

/// The most readings one byte has at one depth.
const MOST_READINGS: usize = 6;

impl Reader<'_> {
    /// The readings of the character at `p` at `depth`: itself, and each
    /// escape there whose own characters are read at `depth - 1`, none
    /// longer than [`LONGEST`].
    fn at(&mut self, p: usize, depth: usize) -> Reads {
        let mut out = Reads::new();
        let Some(&c) = self.text.get(p) else {
            return out;
        };
        out.push((u32::from(c), 1));
        if depth == 0 || !opens(c) {
            return out;
        }
        let at = self.base + p;
        let slots = self.memo.slots.len().max(1);
        if let Some(slot) = self.memo.slots.get(at % slots) {
            if slot.at == at && slot.have & (1 << depth) != 0 {
                return slot.reads[depth].clone();
            }
        }
        // An escape inside an escape has its opener spelled too (an
        // encoder of escaped text escapes the escapes' openers, `%` as
        // `%25`, `&` as `&amp;`, `\` as `%5C` or `\\`, or leaves the
        // escape as it is): a level deeper is read only where the one
        // above spells an opener, so that text whose escapes are not
        // nested costs one level's reading.
        let shallower = if depth > 1 {
            Some(self.at(p, depth - 1))
        } else {
            None
        };
        match shallower {
            Some(r)
                if !r
                    .iter()
                    .any(|&(v, n)| n > 1 && u8::try_from(v).is_ok_and(opens)) =>
            {
                out = r;
            }
            _ => self.escapes(p, depth, &mut out),
        }
        out.retain(|r| r.1 <= LONGEST);
        if out.len() > MOST_READINGS {
            // A run of escapes of escapes (a thousand backslashes) reads
            // many ways at each byte; the shortest are kept, each spelling
            // a byte, and what more there would be is told.
            out.sort_unstable_by_key(|r| r.1);
            for &(v, _) in &out[MOST_READINGS..] {
                if let Ok(b) = u8::try_from(v) {
                    if !self.dropped.contains(&b) {
                        self.dropped.push(b);
                    }
                }
            }
            out.truncate(MOST_READINGS);
        }
        if self.memo.slots.len() < SLOTS.min(self.text.len()) {
            // As many as the text has positions, up to SLOTS: a header's
            // value needs a few, a body's stream all of them (made again,
            // larger, when a stream's text grows past them).
            self.memo.slots = (0..SLOTS.min(self.text.len().max(8)))
                .map(|_| Slot {
                    at: usize::MAX,
                    have: 0,
                    reads: Default::default(),
                })
                .collect();
        }
        let slots = self.memo.slots.len();
        let slot = &mut self.memo.slots[at % slots];
        if slot.at != at {
            slot.at = at;
            slot.have = 0;
        }
        slot.have |= 1 << depth;
        slot.reads[depth] = out.clone();
        out
    }

    /// Where `want` (read at `depth`, maybe spelled) ends, from `p`.
    fn expect(&mut self, p: usize, depth: usize, want: &[u8]) -> SmallVec<[usize; 4]> {
        self.at(p, depth)
            .into_iter()
            .filter(|(c, _)| u8::try_from(*c).is_ok_and(|c| want.contains(&c)))
            .map(|(_, n)| p + n)
            .collect()
    }

    /// The numbers of `radix` digits from `p` (read at `depth`): exactly
    /// `most` of them when `fixed` (`%2F`, `\u002F`), else every run of one
    /// to `most` that no further digit continues (`&#47`, `\57`, CSS's
    /// `\2f`), as decoders read them.
    fn number(&mut self, p: usize, depth: usize, radix: u32, most: usize, fixed: bool) -> Reads {
        let mut out = Reads::new();
        if !digit(self.text.get(p), radix) {
            // A digit, spelled or not, starts with a digit or an opener.
            if !self.text.get(p).is_some_and(|&c| opens(c)) {
                return out;
            }
        }
        let mut cur: Reads = SmallVec::from_slice(&[(0, p)]);
        for count in 0..most {
            let mut next = Reads::new();
            for &(v, at) in &cur {
                let mut more = false;
                for (c, n) in self.at(at, depth) {
                    if let Some(d) = char::from_u32(c).and_then(|c| c.to_digit(radix)) {
                        add(&mut next, (v * radix + d, at + n));
                        more = true;
                    }
                }
                if !more && !fixed && count > 0 {
                    add(&mut out, (v, at));
                }
            }
            cur = next;
            if cur.is_empty() {
                return out;
            }
        }
        for r in cur {
            add(&mut out, r);
        }
        out
    }

    /// The escapes at `p` read at `depth` (their characters at `depth -
    /// 1`), added to `out` as (value, length).
    fn escapes(&mut self, p: usize, depth: usize, out: &mut Reads) {
        let d = depth - 1;
        for (c, n) in self.at(p, d) {
            let q = p + n;
            let found = match c {
                0x25 => self.percent(q, d),
                0x3d => self.number(q, d, 16, 2, true),
                0x2b => SmallVec::from_slice(&[(u32::from(b' '), q)]),
                0x5c => self.backslash(q, d),
                0x26 => self.reference(q, d),
                // An overlong UTF-8 pair for an ASCII byte, as lenient
                // decoders read it.
                0xc0 | 0xc1 => self
                    .at(q, d)
                    .into_iter()
                    .filter(|(x, _)| (0x80..=0xbf).contains(x))
                    .map(|(x, m)| (((c & 0x1f) << 6) | (x & 0x3f), q + m))
                    .collect(),
                _ => Reads::new(),
            };
            for (v, end) in found {
                add(out, (v, end - p));
            }
        }
    }

    /// `%2F` (either case) and IIS's `%u002F`, after a `%` that ends at
    /// `p`: (value, end).
    fn percent(&mut self, p: usize, d: usize) -> Reads {
        let mut out = self.number(p, d, 16, 2, true);
        for q in self.expect(p, d, b"uU") {
            for r in self.number(q, d, 16, 4, true) {
                add(&mut out, r);
            }
        }
        out
    }

    /// After a backslash that ends at `p`: JSON's and JavaScript's
    /// `\u002f`, ES6's `\u{2f}`, `\x2f`, C's and PHP's octal (`\057`),
    /// CSS's hexadecimal (`\2f`, ended by one blank if it has one), and a
    /// backslash before any ASCII punctuation or a space, read as that
    /// character (`\/`, `\"`, `\\`, `\_`, `\-`: JavaScript's and CSS's
    /// identity escapes, Markdown's and regular expressions'). `\167` is
    /// octal to one reader and CSS to another: both readings are given.
    fn backslash(&mut self, p: usize, d: usize) -> Reads {
        let mut out = Reads::new();
        for (c, n) in self.at(p, d) {
            let q = p + n;
            match u8::try_from(c) {
                Ok(b'u' | b'U') => {
                    for q in self.expect(q, d, b"{") {
                        for (v, e) in self.number(q, d, 16, 6, false) {
                            for e in self.expect(e, d, b"}") {
                                add(&mut out, (v, e));
                            }
                        }
                    }
                    for r in self.number(q, d, 16, 4, true) {
                        add(&mut out, r);
                    }
                }
                Ok(b'x' | b'X') => {
                    for r in self.number(q, d, 16, 2, true) {
                        add(&mut out, r);
                    }
                }
                Ok(b) if b == b' ' || b.is_ascii_punctuation() => add(&mut out, (c, q)),
                _ => {}
            }
        }
        for r in self.number(p, d, 8, 3, false) {
            add(&mut out, r);
        }
        for (v, e) in self.number(p, d, 16, 6, false) {
            // CSS ends the escape with one blank, CRLF as one.
            let mut blank = false;
            for (c, n) in self.at(e, d) {
                if c == u32::from(b'\r') {
                    for m in self.expect(e + n, d, b"\n") {
                        add(&mut out, (v, m));
                    }
                }
                if [b' ', b'\t', b'\n', b'\r', b'\x0c']
                    .map(u32::from)
                    .contains(&c)
                {
                    add(&mut out, (v, e + n));
                    blank = true;
                }
            }
            if !blank {
                add(&mut out, (v, e));
            }
        }
        out
    }

    /// After an `&` that ends at `p`: `&#47;`, `&#x2F;` (a numeric one
    /// without its `;` too, as HTML parsers read `&#119&#74`), and the
    /// names of [`NAMED`] (`&sol;`).
    fn reference(&mut self, p: usize, d: usize) -> Reads {
        let mut out = Reads::new();
        let mut numbers = Reads::new();
        for q in self.expect(p, d, b"#") {
            for r in self.expect(q, d, b"xX") {
                numbers.extend(self.number(r, d, 16, 6, false));
            }
            numbers.extend(self.number(q, d, 10, 7, false));
        }
        for (v, e) in numbers {
            let ends = self.expect(e, d, b";");
            if ends.is_empty() {
                add(&mut out, (v, e));
            }
            for e in ends {
                add(&mut out, (v, e));
            }
        }
        // Names, letter by letter (each maybe spelled), up to their `;`.
        type Names = SmallVec<[(SmallVec<[u8; LONGEST_NAME]>, usize); 2]>;
        let mut names: Names = SmallVec::from_elem((SmallVec::new(), p), 1);
        for _ in 0..=LONGEST_NAME {
            let mut next: Names = SmallVec::new();
            for (name, at) in &names {
                for (c, n) in self.at(*at, d) {
                    let Ok(b) = u8::try_from(c) else { continue };
                    if b == b';' {
                        if let Some((_, v)) = NAMED.iter().find(|(k, _)| *k == name.as_slice()) {
                            add(&mut out, (u32::from(*v), at + n));
                        }
                    } else if b.is_ascii_alphabetic() && name.len() < LONGEST_NAME {
                        let mut longer = name.clone();
                        longer.push(b);
                        // Only a prefix of some name goes on.
                        if NAMED.iter().any(|(k, _)| k.starts_with(&longer)) {
                            next.push((longer, at + n));
                        }
                    }
                }
            }
            if next.is_empty() {
                break;
            }
            names = next;
        }
        out
    }
}

/// What the text at a position may stand for.
#[derive(Debug, Default, Clone)]
pub(super) struct Escapes {
    /// Each byte an escape there is read as, with the escape's length
    /// (an escape read two ways, `\101`, gives both).
    pub(super) read: SmallVec<[(u8, usize); 2]>,
    /// The bytes an escape nested deeper than [`DEPTH`] that starts there
    /// spells (read one level further, where an escape at the deepest
    /// level spells an opener): the scrub reads no further than such an
    /// escape when it spells a byte of what it looks for.
    pub(super) deep: SmallVec<[u8; 2]>,
    /// An escape nested deeper than [`DEPTH`] starts there and spells an
    /// opener one level further: an escape nested deeper still, which
    /// may spell any byte (`%252525252F`, five levels), is there. The
    /// scrub reads no further than it, whatever the values.
    pub(super) any: bool,
}

/// The bytes an escape at the start of `text` may stand for, each with
/// the escape's length, read through nested escapes up to [`DEPTH`]
/// levels: `%2F` (either case) and IIS's `%u002F`, `+` for a space,
/// quoted-printable's `=2F`, the backslash escapes of JSON, JavaScript, C
/// and CSS, HTML's character references, overlong UTF-8. Nothing read
/// when `text` starts with no escape (a byte that stands for itself).
#[cfg(test)]
pub(super) fn escapes_at(text: &[u8]) -> Escapes {
    escapes_in(&mut Memo::new(), text, 0, 0)
}

/// [`escapes_at`] position `p` of `text`, a stream whose first byte
/// stands at position `base`, with what `memo` holds of it.
pub(super) fn escapes_in(memo: &mut Memo, text: &[u8], base: usize, p: usize) -> Escapes {
    let mut found = Escapes::default();
    if !text.get(p).is_some_and(|&c| opens(c)) {
        return found;
    }
    let mut r = Reader {
        text,
        base,
        memo,
        dropped: SmallVec::new(),
    };
    let read = r.at(p, DEPTH);
    // A level deeper is looked at only where an escape at the deepest
    // level read spells an opener (`%252525`): where one more level
    // could hold an escape.
    let opener = read
        .iter()
        .any(|&(v, n)| n > 1 && u8::try_from(v).is_ok_and(opens));
    if opener {
        for (v, n) in r.at(p, DEPTH + 1) {
            if let (false, Ok(b)) = (read.contains(&(v, n)), u8::try_from(v)) {
                if n > 1 && opens(b) {
                    found.any = true;
                }
                if !found.deep.contains(&b) {
                    found.deep.push(b);
                }
            }
        }
    }
    // What was left out is withheld as what is nested too deep is (an
    // opener left out, whatever it may spell).
    for b in std::mem::take(&mut r.dropped) {
        found.any |= opens(b) && b != b'+';
        if !found.deep.contains(&b) {
            found.deep.push(b);
        }
    }
    found.read = read
        .into_iter()
        .filter(|&(_, n)| n > 1 || text[p] == b'+')
        .filter_map(|(v, n)| u8::try_from(v).ok().map(|b| (b, n)))
        .filter(|&(b, n)| n > 1 || b != text[p])
        .collect();
    found
}

/// The length of a line break that decoders delete, at the start of
/// `text`, if one is there: read as nothing. Quoted-printable's soft line
/// break (`=`, then up to [`LONGEST`] spaces or tabs, the padding RFC 2045
/// deletes, then CRLF or LF), and a backslash line continuation (`\`
/// and CRLF or LF, which JavaScript, CSS, Python, C and shell strings and
/// Java's .properties delete). At most `LONGEST + 3` bytes.
pub(super) fn soft_break(text: &[u8]) -> Option<usize> {
    let (&first, rest) = text.split_first()?;
    let pad = match first {
        b'=' => rest
            .iter()
            .take(LONGEST + 1)
            .take_while(|&&c| c == b' ' || c == b'\t')
            .count(),
        b'\\' => 0,
        _ => return None,
    };
    if pad > LONGEST {
        return None;
    }
    match rest.get(pad..)? {
        [b'\r', b'\n', ..] => Some(pad + 3),
        [b'\n', ..] => Some(pad + 2),
        _ => None,
    }
}

/// The lengths of the spellings of `b` at the start of `text`: the byte
/// itself, and each escape that reads as it.
fn spellings(b: u8, memo: &mut Memo, text: &[u8], at: usize) -> SmallVec<[usize; 3]> {
    let mut out = SmallVec::new();
    let Some(&first) = text.get(at) else {
        return out;
    };
    if first.eq_ignore_ascii_case(&b) {
        out.push(1);
    }
    for (d, n) in escapes_in(memo, text, 0, at).read {
        if d == b && !out.contains(&n) {
            out.push(n);
        }
    }
    out
}

/// Bytes an occurrence of `b`, spelled, may start with.
pub(super) fn openers(b: u8) -> SmallVec<[u8; 8]> {
    let mut out = SmallVec::new();
    out.extend_from_slice(&[
        b.to_ascii_lowercase(),
        b.to_ascii_uppercase(),
        b'%',
        b'\\',
        b'&',
        b'=',
        0xc0,
        0xc1,
    ]);
    if b == b' ' {
        out.push(b'+');
    }
    out
}

/// The most bytes an occurrence of `n` bytes, spelled, takes: each byte's
/// longest spelling and a soft line break (its padding included) before
/// each but the first.
pub(super) fn longest(n: usize) -> usize {
    n * (2 * LONGEST + 3)
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
    let mut memo = Memo::new();
    let mut places: SmallVec<[usize; 8]> = spellings(b, &mut memo, text, 0).into_iter().collect();
    let mut next: SmallVec<[usize; 8]> = SmallVec::new();
    for &b in rest {
        if places.is_empty() {
            return None;
        }
        // A soft line break or a backslash line continuation may stand
        // between two bytes (one: encoders break a line once, and never
        // inside an escape).
        let count = places.len();
        for i in 0..count {
            let at = places[i];
            if let Some(n) = soft_break(text.get(at..).unwrap_or_default()) {
                if !places.contains(&(at + n)) {
                    places.push(at + n);
                }
            }
        }
        next.clear();
        for &at in &places {
            for n in spellings(b, &mut memo, text, at) {
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

    #[test]
    fn escapes_nested_up_to_the_depth_are_read_whole() {
        // Each as a server that encodes what is already encoded writes
        // it: percent twice (a redirect's `next=` quoting a target whose
        // value warden percent-encoded) and three times, HTML of HTML,
        // percent of a JSON escape, JSON in JSON, percent of every byte
        // of a percent escape, HTML of percent, percent of HTML, HTML
        // three times, JSON's `\x` in JSON.
        found_whole(&[
            &b"sk%252FLive%252Btok%253Ax%253DQ"[..],
            b"sk%25252FLive%25252Btok%25253Ax%25253DQ",
            b"&amp;#115;&amp;#107;&amp;#47;&amp;#76;&amp;#105;&amp;#118;&amp;#101;&amp;#43;&amp;#116;&amp;#111;&amp;#107;&amp;#58;&amp;#120;&amp;#61;&amp;#81;",
            b"%5Cu0073%5Cu006b%5Cu002f%5Cu004c%5Cu0069%5Cu0076%5Cu0065%5Cu002b%5Cu0074%5Cu006f%5Cu006b%5Cu003a%5Cu0078%5Cu003d%5Cu0051",
            b"\\\\u0073\\\\u006b\\\\u002f\\\\u004c\\\\u0069\\\\u0076\\\\u0065\\\\u002b\\\\u0074\\\\u006f\\\\u006b\\\\u003a\\\\u0078\\\\u003d\\\\u0051",
            b"%25%37%33%25%36%42%25%32%46%25%34%43%25%36%39%25%37%36%25%36%35%25%32%42%25%37%34%25%36%46%25%36%42%25%33%41%25%37%38%25%33%44%25%35%31",
            b"&#37;73&#37;6B&#37;2F&#37;4C&#37;69&#37;76&#37;65&#37;2B&#37;74&#37;6F&#37;6B&#37;3A&#37;78&#37;3D&#37;51",
            b"%26%23%31%31%35%3B%26%23%31%30%37%3B%26%23%34%37%3B%26%23%37%36%3B%26%23%31%30%35%3B%26%23%31%31%38%3B%26%23%31%30%31%3B%26%23%34%33%3B%26%23%31%31%36%3B%26%23%31%31%31%3B%26%23%31%30%37%3B%26%23%35%38%3B%26%23%31%32%30%3B%26%23%36%31%3B%26%23%38%31%3B",
            b"&amp;amp;#x73;&amp;amp;#x6b;&amp;amp;#x2f;&amp;amp;#x4c;&amp;amp;#x69;&amp;amp;#x76;&amp;amp;#x65;&amp;amp;#x2b;&amp;amp;#x74;&amp;amp;#x6f;&amp;amp;#x6b;&amp;amp;#x3a;&amp;amp;#x78;&amp;amp;#x3d;&amp;amp;#x51;",
            b"\\\\x73\\\\x6b\\\\x2f\\\\x4c\\\\x69\\\\x76\\\\x65\\\\x2b\\\\x74\\\\x6f\\\\x6b\\\\x3a\\\\x78\\\\x3d\\\\x51",
            // Mixed levels in one occurrence, and overlong UTF-8.
            b"sk%2FLive%252Btok&amp;#58;x\\=Q",
            b"sk\xc0\xafLive%C0%ABtok:x=Q",
        ]);
        // A `%` of the value itself, encoded twice.
        assert_eq!(find_at(b"a%25b", b"a%252525b"), Some(9));
    }

    #[test]
    fn a_backslash_before_any_punctuation_is_read_as_it() {
        // Markdown escapers, Python's `re.escape`, JavaScript's and CSS's
        // identity escapes.
        found_whole(&[&b"sk\\/Live\\+tok\\:x\\=Q"[..], b"sk/Live\\+tok:x=Q"]);
        assert_eq!(find_at(b"ghp_Real", b"ghp\\_Real"), Some(9));
        assert_eq!(find_at(b"a-b.c", b"a\\-b\\.c"), Some(7));
        // A digit after a backslash is an octal or CSS escape, not itself.
        assert_eq!(find_at(b"a1", b"a\\1"), None);
    }

    #[test]
    fn a_soft_line_break_between_two_bytes_is_read_as_nothing() {
        // Quoted-printable wrapping at 76 columns, where the value falls.
        found_whole(&[
            &b"sk/Live+tok:x=\n=3DQ"[..],
            b"sk/Li=\r\nve+tok:x=3DQ",
            b"sk=2FLive=2B=\ntok=3Ax=3DQ",
            b"s=\nk=\n/Live+tok:x=3DQ",
        ]);
        // Not inside an escape, and not as a byte of its own.
        assert_eq!(find_at(V, b"sk=\n2FLive+tok:x=3DQ"), None);
        // Padded: RFC 2045 deletes the spaces and tabs before the break.
        found_whole(&[
            &b"sk/Li= \r\nve+tok:x=3DQ"[..],
            b"sk/Live+=\t \t\ntok:x=3DQ",
            b"sk=2FLive=2B=                                \r\ntok=3Ax=3DQ",
        ]);
        assert_eq!(find_at(V, b"sk/Li= x\nve+tok:x=3DQ"), None);
    }

    #[test]
    fn a_backslash_line_continuation_between_two_bytes_is_read_as_nothing() {
        // JavaScript, CSS, Python, C and shell strings and Java's
        // .properties delete a backslash and the line break after it.
        found_whole(&[
            &b"sk/Li\\\nve+tok:x=Q"[..],
            b"sk/Live+tok:\\\r\nx=Q",
            b"s\\\nk\\\n/Live\\u002btok:x=Q",
        ]);
        assert_eq!(find_at(V, b"sk/Li\\\\\nve+tok:x=Q"), None);
    }

    #[test]
    fn an_escape_nested_past_the_depth_is_told_with_the_byte_it_spells() {
        for (text, byte) in [
            (&b"%2525252F"[..], b'/'),
            (b"&amp;amp;amp;#47;", b'/'),
            (b"%25252541", b'A'),
        ] {
            let found = escapes_at(text);
            assert!(
                found.deep.contains(&byte),
                "{}: {:?}",
                String::from_utf8_lossy(text),
                found
            );
        }
        // Within the depth: read, nothing deeper.
        for text in [
            &b"%25252F"[..],
            b"&amp;amp;#47;",
            b"%2525",
            b"&amp;amp;amp;",
        ] {
            let found = escapes_at(text);
            assert!(found.deep.is_empty(), "{}", String::from_utf8_lossy(text));
        }
        assert!(escapes_at(b"%25252F").read.contains(&(b'/', 7)));
    }

    #[test]
    fn an_escape_nested_at_any_depth_past_the_limit_is_told() {
        // Four levels spell `/` one level past the depth; five, six and
        // more spell an opener there, which may stand for any byte.
        let mut text = b"%2F".to_vec();
        for level in 1..=8 {
            let found = escapes_at(&text);
            if level > DEPTH {
                assert!(
                    found.deep.contains(&b'/') || found.any,
                    "{} levels, {}: {:?}",
                    level,
                    String::from_utf8_lossy(&text),
                    found
                );
            } else {
                assert!(!found.any && found.deep.is_empty(), "{level} levels");
            }
            text.splice(1..1, *b"25");
        }
        // HTML five levels, and JSON five levels: sixteen backslashes spell
        // a backslash four levels down.
        let mut json = vec![b'\\'; 16];
        json.extend_from_slice(b"u002f");
        for text in [&b"&amp;amp;amp;amp;#47;"[..], &json] {
            assert!(escapes_at(text).any, "{}", String::from_utf8_lossy(text));
        }
    }
}
