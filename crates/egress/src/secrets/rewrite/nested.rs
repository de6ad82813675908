//! A value inside encodings of different kinds: runs of base64 (standard
//! or URL-safe, padded or not) and of hexadecimal in a scrubbed text are
//! decoded, and what they hold is read again, as the scrub reads any
//! text (every spelling of a value, base64 at each alignment,
//! hexadecimal, UTF-16 and UTF-32), as compressed data (gzip, zlib, raw
//! deflate) and as text that holds runs of its own, to [`DEPTH`] steps of
//! decoding. A run that holds a value is replaced whole by its secret's
//! placeholder: `base64(gzip(value))`, `hex(base64(value))`,
//! base64 three times, a Flask session cookie (URL-safe base64 of zlib of
//! JSON) no longer carry a value past the scrub that reads one level of
//! base64 at a time.
//!
//! A run is read through what commonly breaks it in the text around it:
//! its characters percent-escaped (`%2B`, `%2F`, `%3D`, as a URL's query
//! carries base64), JSON-escaped (`\/`, `\u002b`), and line breaks
//! (`\n`, `\r\n`, JSON's `\n` and `\r\n`, and the indentation after them)
//! between two of its characters, as MIME and PEM wrap it.
//!
//! Fail closed, and bounded: where a run would need one step of decoding
//! more than [`DEPTH`] and that step yields text or compressed data (what
//! a value could still hide in), where compressed data inflates past
//! [`INFLATE_MOST`], or where one run's decoding works through more than
//! its [`budget`], the response is withheld rather than passed unread.
//! Ordinary content does not come near the bound: an image, a hash, an
//! npm integrity field decode to bytes with no run and no text in them,
//! a JWT to JSON whose runs are short. It only reads: what a found value
//! means is the rewriter's to say.

use super::{Blocked, Patterns, Rewriter, Violation};
use crate::secrets::sniff::{sniff, Sniffed};
use crate::secrets::{coding::Coding, zero};
use std::io::Read;
use std::sync::Arc;

/// The steps of decoding read below a run in the text (each run decoded
/// and each compressed stream inflated is one): base64 inside base64
/// inside base64 of a value is two, as the last is read as the scrub
/// reads any base64.
pub(super) const DEPTH: usize = 4;

/// Runs shorter than this (in characters) are not decoded: prose is full
/// of short words, and a value's nested encodings are longer.
pub(super) const MIN_RUN: usize = 16;

/// The shortest stretch of text read inside bytes that are mostly not:
/// the shortest value looked for in its spellings.
const MIN_TEXT: usize = 6;

/// The most bytes a compressed stream inside a run inflates to: more, and
/// the run is withheld (a text run holds a small document, not an
/// archive).
pub(super) const INFLATE_MOST: usize = 256 << 10;

/// The most bytes of one run the scrub holds before it reads what it has
/// as a window and writes it out (all but an overlap that may hold the
/// start of a nested value).
pub(super) const HELD_MOST: usize = 256 << 10;

/// Characters of a long run kept from one window to the next: a nested
/// form of a value (with escapes, compressed, encoded again) fits.
const OVERLAP: usize = 4 << 10;

/// How much further than [`INFLATE_MOST`] raw deflate (which has no
/// signature) is read to tell whether it is a stream that ends.
const RAW_PROBE: usize = 4 << 20;

/// The bytes decoding one run of `chars` characters may work through, its
/// inflated streams and nested runs included.
fn budget(chars: usize) -> usize {
    4 * chars + 2 * INFLATE_MOST
}

/// Characters a run is made of: both base64 alphabets (hexadecimal is in
/// them); `=` only as padding at its end.
const fn run_table() -> [bool; 256] {
    let mut t = [false; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        t[b] = c.is_ascii_alphanumeric() || matches!(c, b'+' | b'/' | b'-' | b'_');
        b += 1;
    }
    t
}
const RUN: [bool; 256] = run_table();

/// What stands at a place of a run's text.
enum Unit {
    /// A character of the run (or `=`) and the bytes it takes.
    Char(u8, usize),
    /// A line break (and indentation) of this many bytes.
    Break(usize),
    /// Neither.
    Other,
    /// The text ends before it can be told.
    Short,
}

fn hex_digit(b: u8) -> Option<u8> {
    char::from(b)
        .to_digit(16)
        .and_then(|d| u8::try_from(d).ok())
}

/// The unit at the start of `text` (`last`: nothing follows it).
fn unit(text: &[u8], last: bool) -> Unit {
    let Some(&b) = text.first() else {
        return Unit::Short;
    };
    if RUN[b as usize] || b == b'=' {
        return Unit::Char(b, 1);
    }
    let need = |n: usize| text.len() < n && !last;
    let spelled = |c: u8, n: usize| {
        if RUN[c as usize] || c == b'=' {
            Unit::Char(c, n)
        } else {
            Unit::Other
        }
    };
    match b {
        b'%' => {
            if need(3) {
                return Unit::Short;
            }
            match (
                text.get(1).and_then(|&c| hex_digit(c)),
                text.get(2).and_then(|&c| hex_digit(c)),
            ) {
                (Some(h), Some(l)) => spelled(h << 4 | l, 3),
                _ => Unit::Other,
            }
        }
        b'\\' => {
            if need(6) {
                return Unit::Short;
            }
            match text.get(1) {
                Some(b'/') => Unit::Char(b'/', 2),
                Some(b'u') if text.get(2..4) == Some(b"00") => {
                    match (
                        text.get(4).and_then(|&c| hex_digit(c)),
                        text.get(5).and_then(|&c| hex_digit(c)),
                    ) {
                        (Some(h), Some(l)) => spelled(h << 4 | l, 6),
                        _ => Unit::Other,
                    }
                }
                Some(b'n' | b'r') => line_break(text, last),
                _ => Unit::Other,
            }
        }
        b'\r' | b'\n' => line_break(text, last),
        _ => Unit::Other,
    }
}

/// A line break at the start of `text` (`\n`, `\r\n`, JSON's `\n` or
/// `\r\n`) and the spaces and tabs after it.
fn line_break(text: &[u8], last: bool) -> Unit {
    let mut n = match text {
        [b'\r', b'\n', ..] => 2,
        [b'\n', ..] => 1,
        [b'\\', b'r', b'\\', b'n', ..] => 4,
        [b'\\', b'n', ..] => 2,
        [b'\r'] | [b'\\', b'r'] | [b'\\', b'r', b'\\'] if !last => return Unit::Short,
        _ => return Unit::Other,
    };
    while matches!(text.get(n), Some(b' ' | b'\t')) {
        n += 1;
    }
    if n == text.len() && !last {
        return Unit::Short;
    }
    Unit::Break(n)
}

/// One run being read: where it starts in the held text, its characters.
struct Run {
    start: usize,
    chars: Vec<u8>,
    /// `=` was read: only more `=` may follow.
    padded: bool,
    /// Windows of it were already written out: a value found now cannot
    /// be replaced whole.
    windowed: bool,
}

/// What reading a run's decodings found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Clean,
    /// A value of this secret.
    Found(usize),
    /// Past a bound with something a value could still hide in.
    Withhold,
}

/// The runs of a stream read as it passes (after the rewriter's own
/// scrub): bytes are held from the start of a run until it ends.
pub(super) struct Runs {
    held: Vec<u8>,
    /// The next byte of `held` to read.
    pos: usize,
    run: Option<Run>,
    /// Bytes of the stream pushed so far.
    seen: usize,
    /// Bytes of decoding done for the stream's runs so far: held to
    /// [`Runs::limit`], so that many short runs that each inflate far
    /// cannot make the proxy work through more than a bound of the
    /// stream's own length (as a body's decoding is bounded).
    spent: usize,
}

impl Runs {
    pub(super) fn new() -> Runs {
        Runs {
            held: Vec::new(),
            pos: 0,
            run: None,
            seen: 0,
            spent: 0,
        }
    }

    /// The most decoding the stream's runs may work through, all of them
    /// together: the bound of what a body may decode to (a floor and a
    /// ratio of the stream's bytes so far).
    fn limit(&self) -> usize {
        let ratio = crate::secrets::coding::bound::RATIO as usize;
        let floor = crate::secrets::coding::bound::FLOOR as usize;
        floor.saturating_add(self.seen.saturating_mul(ratio))
    }

    /// `data`, the stream's next bytes (`last`: its end), with every run
    /// that holds a value replaced by its secret's placeholder; the
    /// secrets replaced are added to `replaced`.
    pub(super) fn push(
        &mut self,
        patterns: &Arc<Patterns>,
        data: &[u8],
        last: bool,
        replaced: &mut Vec<usize>,
    ) -> Result<Vec<u8>, Blocked> {
        self.held.extend_from_slice(data);
        self.seen = self.seen.saturating_add(data.len());
        let limit = self.limit();
        let mut out = Vec::with_capacity(self.held.len());
        // Bytes of `held` before this are written out (or replaced).
        let mut written = 0;
        loop {
            let ended = match self.run.as_mut() {
                None => {
                    // The next byte that may start a run.
                    let Some(n) = self.held[self.pos..]
                        .iter()
                        .position(|&b| RUN[b as usize] || b == b'%' || b == b'\\')
                    else {
                        self.pos = self.held.len();
                        break;
                    };
                    self.pos += n;
                    match unit(&self.held[self.pos..], last) {
                        Unit::Char(c, n) if c != b'=' => {
                            self.run = Some(Run {
                                start: self.pos,
                                chars: vec![c],
                                padded: false,
                                windowed: false,
                            });
                            self.pos += n;
                        }
                        Unit::Short => break,
                        _ => self.pos += 1,
                    }
                    false
                }
                Some(run)
                    if !run.padded && self.held.get(self.pos).is_some_and(|&b| RUN[b as usize]) =>
                {
                    // Plain characters, as most of a run is: at once.
                    let n = self.held[self.pos..]
                        .iter()
                        .take_while(|&&b| RUN[b as usize])
                        .count();
                    run.chars
                        .extend_from_slice(&self.held[self.pos..self.pos + n]);
                    self.pos += n;
                    false
                }
                Some(run) => match unit(&self.held[self.pos..], last) {
                    Unit::Char(c, n) if !run.padded || c == b'=' => {
                        run.padded = c == b'=';
                        run.chars.push(c);
                        self.pos += n;
                        false
                    }
                    Unit::Break(n) if !run.padded => match unit(&self.held[self.pos + n..], last) {
                        Unit::Char(c, _) if c != b'=' => {
                            self.pos += n;
                            false
                        }
                        Unit::Short => break,
                        _ => true,
                    },
                    Unit::Short => break,
                    _ => true,
                },
            };
            if ended {
                self.end_run(patterns, limit, &mut out, &mut written, replaced)?;
            }
        }
        if last {
            self.end_run(patterns, limit, &mut out, &mut written, replaced)?;
            out.extend_from_slice(&self.held[written..]);
            written = self.held.len();
            // (A line break ending the text was left unread.)
            self.pos = written;
        } else if let Some(run) = self.run.as_mut() {
            if self.pos - run.start > HELD_MOST {
                // A long run (an image in JSON) is read a window at a
                // time: a value nested in it is inside one window or in
                // the overlap kept for the next.
                let verdict = read_spent(patterns, &run.chars, &mut self.spent, limit);
                if verdict != Verdict::Clean {
                    return Err(withheld());
                }
                // Cut at a multiple of four characters, so that what is
                // kept decodes at the same alignment.
                let keep = (run.chars.len().saturating_sub(OVERLAP)) / 4 * 4;
                let cut = byte_of_char(&self.held[run.start..], keep) + run.start;
                out.extend_from_slice(&self.held[written..cut]);
                written = cut;
                run.chars.drain(..keep);
                run.start = cut;
                run.windowed = true;
            } else {
                out.extend_from_slice(&self.held[written..run.start]);
                written = run.start;
            }
        } else {
            out.extend_from_slice(&self.held[written..self.pos]);
            written = self.pos;
        }
        self.held.drain(..written);
        self.pos -= written;
        if let Some(run) = self.run.as_mut() {
            run.start -= written;
        }
        Ok(out)
    }

    /// What a run with `verdict` becomes: its secret's placeholder, or
    /// nothing (it stays); withheld past a bound, or where windows of it
    /// were written out already.
    /// The run that ended at `pos`, if any, read within the stream's
    /// bound: what comes before it written out, then the run as it is or
    /// its placeholder (`written`: the next byte of `held` to write).
    fn end_run(
        &mut self,
        patterns: &Arc<Patterns>,
        limit: usize,
        out: &mut Vec<u8>,
        written: &mut usize,
        replaced: &mut Vec<usize>,
    ) -> Result<(), Blocked> {
        let Some(mut run) = self.run.take() else {
            return Ok(());
        };
        out.extend_from_slice(&self.held[*written..run.start]);
        *written = run.start;
        let verdict = read_spent(patterns, &run.chars, &mut self.spent, limit);
        if let Some(to) = self.decide(patterns, verdict, &mut run, replaced)? {
            out.extend_from_slice(&to);
            zero(&mut self.held[run.start..self.pos]);
            *written = self.pos;
        }
        Ok(())
    }

    fn decide(
        &self,
        patterns: &Arc<Patterns>,
        verdict: Verdict,
        run: &mut Run,
        replaced: &mut Vec<usize>,
    ) -> Result<Option<Vec<u8>>, Blocked> {
        if verdict != Verdict::Clean {
            // It holds a value (or may): its characters are erased.
            zero(&mut run.chars);
        }
        match verdict {
            Verdict::Clean => Ok(None),
            Verdict::Withhold => Err(withheld()),
            Verdict::Found(_) if run.windowed => Err(withheld()),
            Verdict::Found(secret) => match patterns.placeholder(secret) {
                Some(to) => {
                    if !replaced.contains(&secret) {
                        replaced.push(secret);
                    }
                    Ok(Some(to.to_vec()))
                }
                None => Err(withheld()),
            },
        }
    }
}

fn withheld() -> Blocked {
    Blocked {
        secret: 0,
        violation: Violation::Nested,
    }
}

/// The byte offset in `text` (a run's bytes from its start) of its
/// character `n`.
fn byte_of_char(text: &[u8], n: usize) -> usize {
    let mut pos = 0;
    let mut seen = 0;
    while seen < n && pos < text.len() {
        match unit(&text[pos..], true) {
            Unit::Char(_, len) => {
                seen += 1;
                pos += len;
            }
            Unit::Break(len) => pos += len,
            Unit::Other | Unit::Short => break,
        }
    }
    pos
}

/// Bytes of decoding left to one run.
struct Work(usize);

impl Work {
    fn spend(&mut self, n: usize) -> bool {
        match self.0.checked_sub(n) {
            Some(left) => {
                self.0 = left;
                true
            }
            None => false,
        }
    }
}

/// [`read_run`] within what is left of a stream's bound (`limit` less
/// `spent`), the work done added to `spent`; past the bound, withheld.
fn read_spent(patterns: &Arc<Patterns>, chars: &[u8], spent: &mut usize, limit: usize) -> Verdict {
    if chars.len() < MIN_RUN {
        return Verdict::Clean;
    }
    let allowed = budget(chars.len()).min(limit.saturating_sub(*spent));
    let mut work = Work(allowed);
    let verdict = read_chars(patterns, chars, 1, &mut work);
    *spent = spent.saturating_add(allowed - work.0);
    verdict
}

/// What a run of `chars` (its characters, escapes and breaks read) holds.
#[cfg(test)]
fn read_run(patterns: &Arc<Patterns>, chars: &[u8]) -> Verdict {
    if chars.len() < MIN_RUN {
        return Verdict::Clean;
    }
    let mut work = Work(budget(chars.len()));
    read_chars(patterns, chars, 1, &mut work)
}

/// Each decoding of a run's characters read at `depth`.
fn read_chars(patterns: &Arc<Patterns>, chars: &[u8], depth: usize, work: &mut Work) -> Verdict {
    for mut decoded in decodings(chars) {
        let v = if depth > DEPTH {
            // One step past the bound: withheld where a value could still
            // hide in what it gives.
            if promising(&decoded) {
                Verdict::Withhold
            } else {
                Verdict::Clean
            }
        } else {
            read_data(patterns, &decoded, depth, work)
        };
        if v != Verdict::Clean {
            // It holds a value (or may): erased.
            zero(&mut decoded);
            return v;
        }
    }
    Verdict::Clean
}

/// What decoded `data` (at `depth` steps below the text) holds: a value
/// as the scrub reads any text, or inside compressed data, or inside runs
/// of its own.
fn read_data(patterns: &Arc<Patterns>, data: &[u8], depth: usize, work: &mut Work) -> Verdict {
    if !work.spend(data.len()) {
        return Verdict::Withhold;
    }
    // Every spelling of a value the patterns read is text: in bytes that
    // are mostly not (an image, a hash, compressed data) only the
    // stretches of text are read. (The value's own bytes among them are
    // found by the base64 and hexadecimal forms of the text the run
    // stood in.)
    let pieces = texts(data);
    for piece in &pieces {
        match Rewriter::flat(patterns, piece) {
            Err(_) => return Verdict::Withhold,
            Ok(Some(secret)) => return Verdict::Found(secret),
            Ok(None) => {}
        }
    }
    match inflate(data) {
        Inflated::Not => {}
        Inflated::Over => return Verdict::Withhold,
        Inflated::To(mut plain) => {
            let v = if depth >= DEPTH {
                if promising(&plain) {
                    Verdict::Withhold
                } else {
                    Verdict::Clean
                }
            } else {
                read_data(patterns, &plain, depth + 1, work)
            };
            if v != Verdict::Clean {
                zero(&mut plain);
                return v;
            }
        }
    }
    let mut found = Verdict::Clean;
    for piece in &pieces {
        runs_in(piece, &mut |chars| {
            if found == Verdict::Clean && chars.len() >= MIN_RUN {
                found = read_chars(patterns, chars, depth + 1, work);
            }
        });
    }
    found
}

/// Bytes of text: printable ASCII and blank space.
fn is_text(b: u8) -> bool {
    TEXT[b as usize]
}

/// The parts of `data` a spelling of a value may stand in: all of it
/// where it is mostly text, else each stretch of text long enough to
/// hold the shortest spelling looked for.
fn texts(data: &[u8]) -> Vec<&[u8]> {
    if promising(data) {
        return vec![data];
    }
    let mut out = Vec::new();
    let mut start = 0;
    for (i, &b) in data.iter().enumerate() {
        if !TEXT[b as usize] {
            if i - start >= MIN_TEXT {
                out.push(&data[start..i]);
            }
            start = i + 1;
        }
    }
    if data.len() - start >= MIN_TEXT {
        out.push(&data[start..]);
    }
    out
}

/// [`is_text`] by byte.
const TEXT: [bool; 256] = {
    let mut t = [false; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        t[b] = c.is_ascii_graphic() || matches!(c, b' ' | b'\t' | b'\r' | b'\n');
        b += 1;
    }
    t
};

/// Calls `f` with the characters of each run of `text` (whole).
fn runs_in(text: &[u8], f: &mut dyn FnMut(&[u8])) {
    {
        let mut pos = 0;
        let mut chars: Vec<u8> = Vec::new();
        let mut padded = false;
        while pos < text.len() {
            if !padded && RUN[text[pos] as usize] {
                // Plain characters, as most of a run is: at once.
                let n = text[pos..].iter().take_while(|&&b| RUN[b as usize]).count();
                chars.extend_from_slice(&text[pos..pos + n]);
                pos += n;
                continue;
            }
            if chars.is_empty() && !matches!(text[pos], b'%' | b'\\') {
                pos += 1;
                continue;
            }
            let u = unit(&text[pos..], true);
            match u {
                Unit::Char(c, n) if c != b'=' || !chars.is_empty() => {
                    if padded && c != b'=' {
                        f(&chars);
                        chars.clear();
                    }
                    padded = c == b'=';
                    chars.push(c);
                    pos += n;
                }
                Unit::Break(n)
                    if !chars.is_empty()
                        && !padded
                        && matches!(unit(&text[pos + n..], true), Unit::Char(c, _) if c != b'=') =>
                {
                    pos += n;
                }
                _ => {
                    if !chars.is_empty() {
                        f(&chars);
                        chars.clear();
                    }
                    padded = false;
                    pos += 1;
                }
            }
        }
        if !chars.is_empty() {
            f(&chars);
        }
    }
}

/// Whether `data` is what a value could still hide in one step further:
/// text (most of its bytes printable ASCII), or compressed data.
fn promising(data: &[u8]) -> bool {
    if data.len() < MIN_RUN / 2 {
        return false;
    }
    if matches!(sniff(data), Some(Sniffed::Coded(_))) {
        return true;
    }
    let text = data.iter().filter(|&&b| is_text(b)).count();
    text * 10 >= data.len() * 9
}

/// The decodings of a run's characters: hexadecimal where every one is a
/// hexadecimal digit, and base64 (either alphabet, padding or not).
fn decodings(chars: &[u8]) -> Vec<Vec<u8>> {
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
enum Inflated {
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
fn inflate(data: &[u8]) -> Inflated {
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

#[cfg(test)]
mod tests {
    use super::super::{scrub_patterns, Patterns, Rewriter};
    use super::*;
    use crate::secrets::Secret;
    use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
    use base64::Engine;
    use std::io::Write;

    const VALUE: &str = "sk-Real/Secret+Value=1234567890abcdefXYZ";
    const PLACEHOLDER: &str = "warden-secret-00112233445566778899aabbccddeeff";

    fn scrub() -> Arc<Patterns> {
        let secrets = [Secret::new(
            "TOKEN".into(),
            PLACEHOLDER.into(),
            VALUE.as_bytes().to_vec(),
            Vec::new(),
            true,
        )];
        Arc::new(Patterns::new(scrub_patterns(&secrets)))
    }

    fn gzip(data: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    fn zlib(data: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    fn deflate(data: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    fn hex(data: &[u8]) -> Vec<u8> {
        data.iter()
            .flat_map(|b| format!("{b:02x}").into_bytes())
            .collect()
    }

    fn b64(data: &[u8]) -> Vec<u8> {
        STANDARD.encode(data).into_bytes()
    }

    fn pct(data: &[u8]) -> Vec<u8> {
        data.iter()
            .flat_map(|&b| {
                if b.is_ascii_alphanumeric() {
                    vec![b]
                } else {
                    format!("%{b:02X}").into_bytes()
                }
            })
            .collect()
    }

    fn unhex(h: &str) -> Vec<u8> {
        (0..h.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&h[i..i + 2], 16).unwrap())
            .collect()
    }

    /// Compressed forms of the value as Python's `gzip` and `zlib` write
    /// them (Huffman-coded: the value's bytes are not in them as they
    /// are, where a store-only encoder would leave them).
    const GZIP_OF_VALUE: &str =
        "H4sIAFLtDWsC/yvO1g1KTczRD05NLkot0Q5LzClNtTU0MjYxNTO3sDRITEpOSU2LiIwCAIDD+mcoAAAA";
    const ZLIB_OF_VALUE: &str =
        "78da2bced60d4a4dccd10f4e4d2e4a2dd10e4bcc294db535343236313533b7b034484c4a4e494d8b888c020010b60cf7";
    const DEFLATE_OF_VALUE: &str =
        "2bced60d4a4dccd10f4e4d2e4a2dd10e4bcc294db535343236313533b7b034484c4a4e494d8b888c0200";
    const GZIP_OF_B64_OF_VALUE: &str = "1f8b08000000000002034b362a2e09cd0dcb4872b60c890af7ab8c8a082c0acb752b4e090fb5f40df1acf2730935f2ab4a37f57577cb8c340aca89cac9880a4fb7b50500ec4797dd38000000";
    /// A Flask session cookie's payload: URL-safe base64 of zlib of
    /// `{"token":VALUE,"user":"someone"}`.
    const FLASK_SESSION: &str = "eNqrVirJz07NU7JSKs7WDUpNzNEPTk0uSi3RDkvMKU21NTQyNjE1M7ewNEhMSk5JTYuIjFLSUSotTi0C6cjPTc3PS1WqBQATNRZ1";

    /// The value inside two encodings of different kinds, or compressed
    /// and encoded, each as a server that stored it echoes it.
    fn nestings() -> Vec<(&'static str, Vec<u8>)> {
        let v = VALUE.as_bytes();
        let gz = STANDARD.decode(GZIP_OF_VALUE).unwrap();
        let json_u: Vec<u8> = v
            .iter()
            .flat_map(|b| format!("\\u{b:04x}").into_bytes())
            .collect();
        let cookie = format!("session=.{FLASK_SESSION}.ZxYzAb.c2lnbmF0dXJlLW9mLWl0");
        let wrapped: Vec<String> = b64(&gz)
            .chunks(20)
            .map(|c| String::from_utf8_lossy(c).into_owned())
            .collect();
        let json_escaped: Vec<u8> = b64(&gz)
            .iter()
            .flat_map(|&c| if c == b'/' { b"\\/".to_vec() } else { vec![c] })
            .collect();
        vec![
            ("b64_of_gzip", b64(&gz)),
            ("hex_of_gzip", hex(&gz)),
            ("b64_of_zlib", b64(&unhex(ZLIB_OF_VALUE))),
            ("b64_of_deflate", b64(&unhex(DEFLATE_OF_VALUE))),
            ("b64_of_pct", b64(&pct(v))),
            ("pct_b64_of_pct", pct(&b64(&pct(v)))),
            ("b64_of_json_u", b64(&json_u)),
            ("b64_hex", b64(&hex(v))),
            ("hex_b64", hex(&b64(v))),
            ("b64_b64_b64", b64(&b64(&b64(v)))),
            ("b64_of_gzip_of_b64", b64(&unhex(GZIP_OF_B64_OF_VALUE))),
            (
                "urlsafe_b64_of_gzip",
                URL_SAFE_NO_PAD.encode(&gz).into_bytes(),
            ),
            ("flask_cookie", cookie.into_bytes()),
            ("b64_of_gzip_wrapped", wrapped.join("\\r\\n").into_bytes()),
            ("b64_of_gzip_json_escaped", json_escaped),
            // A spelling among bytes that are not text.
            (
                "b64_of_pct_among_bytes",
                b64(&[&b"\x00\x9f\xfe\x01"[..], &pct(v), b"\xff\x00\x10"].concat()),
            ),
            // Compressed by this crate's encoder too.
            ("b64_of_flate2_gzip", b64(&gzip(v))),
            ("b64_of_flate2_zlib_of_b64", b64(&zlib(&b64(v)))),
            ("b64_of_flate2_deflate_of_hex", b64(&deflate(&hex(v)))),
        ]
    }

    fn frame(inner: &[u8]) -> Vec<u8> {
        [&b"{\"stored\": \""[..], inner, b"\", \"more\": 1}"].concat()
    }

    /// `text` through a scrub's rewriter in pieces of `piece` bytes.
    fn scrubbed(p: &Arc<Patterns>, text: &[u8], piece: usize) -> Result<Vec<u8>, Blocked> {
        let mut r = Rewriter::new(p.clone());
        let mut out = Vec::new();
        for chunk in text.chunks(piece.max(1)) {
            out.extend(r.push(chunk)?);
        }
        out.extend(r.finish()?);
        Ok(out)
    }

    /// Whether `text` holds the value anywhere in its runs' decodings.
    fn holds(text: &[u8]) -> bool {
        let p = scrub();
        let mut found = Rewriter::flat(&p, text).unwrap_or(Some(0)).is_some();
        runs_in(text, &mut |chars| {
            found |= read_run(&p, chars) != Verdict::Clean;
        });
        found
    }

    /// Outside review 31: every run had a budget of its own (about
    /// 512 KiB) and nothing bounded them together, so a 1 MiB body of
    /// short runs that each inflate far (base64 of gzip of base64 of
    /// gzip of 180 KiB) made the proxy decode and scan some 1.8 GB: 204 s
    /// of CPU in a debug build. The runs of one stream share the bound of
    /// what a body may decode to; past it the body is withheld.
    #[test]
    fn many_short_runs_that_each_inflate_far_are_withheld_at_the_streams_bound() {
        let p = scrub();
        let inner = b64(&gzip(&vec![b'A'; 180 << 10]));
        let run = b64(&gzip(&inner));
        assert!(run.len() < 1024, "{}", run.len());
        // A body whose runs together would decode to far more than its
        // bound (16 MiB and 64 times its bytes).
        let mut body = Vec::new();
        while body.len() < 96 << 10 {
            body.extend_from_slice(&run);
            body.push(b' ');
        }
        let runs = body.len() / (run.len() + 1);
        assert!(runs * (360 << 10) > (16 << 20) + 64 * body.len(), "{runs}");
        let err = scrubbed(&p, &body, 16 << 10).unwrap_err();
        assert!(matches!(err.violation, Violation::Nested), "{err:?}");
        // One such run alone is read and passes.
        let one = [&b"x "[..], &run, b" y"].concat();
        assert_eq!(scrubbed(&p, &one, 1 << 10).unwrap(), one);
    }

    #[test]
    fn a_value_inside_two_encodings_or_compressed_and_encoded_is_scrubbed_in_any_pieces() {
        let p = scrub();
        for (kind, inner) in nestings() {
            let text = frame(&inner);
            // The patterns alone (the scrub before) let it through.
            if !kind.contains("flate2") {
                let mut flat = Rewriter::flat_stream(p.clone());
                let mut before = flat.push(&text).unwrap();
                before.extend(flat.finish().unwrap());
                assert_eq!(before, text, "{kind}: the patterns alone read it");
            }
            for piece in [1, 7, 64, text.len()] {
                let out = scrubbed(&p, &text, piece).unwrap();
                let s = String::from_utf8_lossy(&out);
                // (A store-only encoder leaves the value's bytes as they
                // are: the patterns replace it inside the base64.)
                assert!(
                    s.contains(PLACEHOLDER) || kind.contains("flate2"),
                    "{kind} in {piece}: {s}"
                );
                assert!(
                    s.starts_with("{\"stored\": \"") && s.ends_with("\", \"more\": 1}"),
                    "{kind}: {s}"
                );
                assert!(!holds(&out), "{kind} in {piece}: {s}");
            }
        }
    }

    #[test]
    fn a_run_that_ends_the_text_with_a_line_break_is_read() {
        let p = scrub();
        let gz = STANDARD.decode(GZIP_OF_VALUE).unwrap();
        for end in ["\n", "\r\n", "\\n", "\n  "] {
            let text = [&b64(&gz)[..], end.as_bytes()].concat();
            for piece in [1, 5, text.len()] {
                let out = scrubbed(&p, &text, piece).unwrap();
                assert_eq!(out, [PLACEHOLDER.as_bytes(), end.as_bytes()].concat());
            }
            let clean = [&b"plain words, no run here"[..], end.as_bytes()].concat();
            assert_eq!(scrubbed(&p, &clean, 3).unwrap(), clean);
        }
    }

    #[test]
    fn ordinary_encoded_content_passes_unchanged() {
        let p = scrub();
        let mut seed = 0x9e3779b97f4a7c15u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let random: Vec<u8> = (0..30_000).map(|_| next() as u8).collect();
        let png = [&b"\x89PNG\r\n\x1a\n"[..], &random].concat();
        let header = URL_SAFE_NO_PAD.encode(b"{\"alg\":\"HS256\",\"typ\":\"JWT\"}");
        let claims = URL_SAFE_NO_PAD.encode(
            b"{\"sub\":\"1234567890\",\"name\":\"John Doe\",\"iat\":1516239022,\"scope\":\"repo read:org\"}",
        );
        let text = format!(
            "{{\"avatar\":\"data:image/png;base64,{}\",\"jwt\":\"{header}.{claims}.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c\",\
             \"integrity\":\"sha512-{}\",\"sha\":\"{}\",\"doc\":\"{}\",\"packed\":\"{}\",\
             \"prose\":\"The internationalization of configuration-management is straightforward.\"}}",
            STANDARD.encode(&png),
            STANDARD.encode(&random[..64]),
            String::from_utf8_lossy(&hex(&random[..20])),
            String::from_utf8_lossy(&b64(&b64(b"a readme that says nothing secret"))),
            String::from_utf8_lossy(&b64(&gzip(b"{\"name\":\"left-pad\",\"version\":\"1.3.0\"}"))),
        );
        for piece in [16 << 10, 100] {
            assert_eq!(
                scrubbed(&p, text.as_bytes(), piece).unwrap(),
                text.as_bytes()
            );
        }
    }

    #[test]
    fn nesting_past_the_bound_with_text_inside_is_withheld_and_binary_is_not() {
        let p = scrub();
        // Base64 applied again and again: read up to the bound, withheld
        // past it rather than passed unread.
        let mut inner = VALUE.as_bytes().to_vec();
        for times in 1..=9 {
            inner = b64(&inner);
            let r = scrubbed(&p, &frame(&inner), 1000);
            match r {
                Ok(out) => {
                    assert!(times <= DEPTH + 1, "{times} times passed");
                    assert!(!holds(&out), "{times}: {}", String::from_utf8_lossy(&out));
                }
                Err(b) => {
                    assert!(times > DEPTH, "{times} times withheld");
                    assert_eq!(b.violation, Violation::Nested);
                }
            }
        }
        // Hashes of hashes are bytes: nothing to hide a value in.
        let mut inner = vec![0x5a_u8; 32];
        for _ in 0..9 {
            inner = hex(&inner[..32]).iter().map(|b| b ^ 0x80).collect();
        }
        let text = frame(&b64(&inner));
        assert_eq!(scrubbed(&p, &text, 1000).unwrap(), text);
    }

    #[test]
    fn a_compressed_run_that_inflates_past_the_bound_is_withheld() {
        let p = scrub();
        let bomb = gzip(&vec![b'a'; INFLATE_MOST + 1]);
        assert!(scrubbed(&p, &frame(&b64(&bomb)), 4096).is_err());
        let fine = gzip(&vec![b'a'; INFLATE_MOST / 2]);
        let text = frame(&b64(&fine));
        assert_eq!(scrubbed(&p, &text, 4096).unwrap(), text);
    }

    #[test]
    fn a_long_run_is_read_a_window_at_a_time_and_a_value_inside_is_withheld() {
        let p = scrub();
        let mut seed = 0x2545f4914f6cdd1du64;
        let random: Vec<u8> = (0..(HELD_MOST * 2))
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                seed as u8
            })
            .collect();
        let text = frame(&b64(&random));
        assert_eq!(scrubbed(&p, &text, 16 << 10).unwrap(), text);
        // The value hidden far into a long run (a document holding the
        // value's base64-of-gzip, base64'd again with megabytes of data
        // around it): past the first window.
        let doc = [
            &random[..HELD_MOST],
            b" \"x\": \"",
            &b64(&gzip(VALUE.as_bytes())),
            b"\" ",
            &random[..HELD_MOST],
        ]
        .concat();
        assert!(scrubbed(&p, &frame(&b64(&doc)), 16 << 10).is_err());
    }

    /// Not a timed test: how fast a realistic JSON body with a lot of
    /// base64 is scrubbed with and without reading inside runs (run with
    /// `--ignored --nocapture`; `docs/performance.md` has figures).
    #[test]
    #[ignore]
    fn scrub_throughput_of_json_with_base64() {
        let p = scrub();
        let mut seed = 0x9e3779b97f4a7c15u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut body = b"[".to_vec();
        let mut i = 0u64;
        while body.len() < 10 << 20 {
            let image: Vec<u8> = (0..(next() % 6000 + 500)).map(|_| next() as u8).collect();
            let digest: Vec<u8> = (0..64).map(|_| next() as u8).collect();
            let claims = URL_SAFE_NO_PAD.encode(format!("{{\"sub\":\"user-{i}\",\"iat\":{i}}}"));
            body.extend_from_slice(
                format!(
                    "{{\"id\":\"{}\",\"name\":\"package-number-{i}\",\"description\":\"A library that does one thing well, \
                     version {i}.\",\"integrity\":\"sha512-{}\",\"token\":\"eyJhbGciOiJIUzI1NiJ9.{claims}.{}\",\
                     \"icon\":\"data:image/png;base64,{}\"}},\n",
                    String::from_utf8_lossy(&hex(&digest[..20])),
                    STANDARD.encode(&digest),
                    URL_SAFE_NO_PAD.encode(&digest[..32]),
                    STANDARD.encode(&image),
                )
                .as_bytes(),
            );
            i += 1;
        }
        body.push(b']');
        for (what, nested) in [
            ("patterns alone (before)", false),
            ("with runs read (after)", true),
        ] {
            let mut r = if nested {
                Rewriter::new(p.clone())
            } else {
                Rewriter::flat_stream(p.clone())
            };
            let start = std::time::Instant::now();
            let mut n = 0;
            for chunk in body.chunks(16 << 10) {
                n += r.push(chunk).unwrap().len();
            }
            n += r.finish().unwrap().len();
            let secs = start.elapsed().as_secs_f64();
            assert_eq!(n, body.len());
            println!(
                "scrub {} MB of JSON with base64, {what}: {:.1} MB/s",
                body.len() >> 20,
                body.len() as f64 / secs / 1e6
            );
        }
    }
}
