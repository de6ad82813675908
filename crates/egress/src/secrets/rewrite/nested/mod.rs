//! A value inside encodings of different kinds: runs of base64 (standard
//! or URL-safe, padded or not) and of hexadecimal in a scrubbed text are
//! decoded, and what they hold is read again, as the scrub reads any
//! text (every spelling of a value, base64 at each alignment,
//! hexadecimal, UTF-16 and UTF-32), as compressed data (gzip, zlib, raw
//! deflate) and as text that holds runs of its own, to [`DEPTH`] steps of
//! decoding. Base64 is decoded from each of a run's first four
//! characters and hexadecimal from each of its first two digits (a
//! server may glue `v1` or `0x` to an encoding), compressed data is
//! found at the start of what they give, after each stream in it, and
//! (gzip and zlib) anywhere inside it ([`inflate`]). A run that holds a
//! value is replaced whole by its secret's
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
//! [`INFLATE_MOST`] or is of a kind the scrub does not read (bzip2, xz,
//! zstd, a zlib stream with a preset dictionary, and the rest a body's
//! sniff withholds), where a window of a long run ends inside a
//! compressed stream, or where one run's decoding works through more
//! than its [`budget`], the response is withheld rather than passed
//! unread.
//! Ordinary content does not come near the bound: an image, a hash, an
//! npm integrity field decode to bytes with no run and no text in them,
//! a JWT to JSON whose runs are short. It only reads: what a found value
//! means is the rewriter's to say.

mod decode;
mod inflate;
mod read;
#[cfg(test)]
mod tests;

use super::{Blocked, Patterns, Violation};
use crate::secrets::coding::Budget;
use crate::secrets::zero;
use read::read_spent;
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

/// The most capacity of a run's buffer kept for the next run.
const SPARE_MOST: usize = 4 << 10;

/// How much further than [`INFLATE_MOST`] raw deflate (which has no
/// signature) is read to tell whether it is a stream that ends.
const RAW_PROBE: usize = 4 << 20;

/// The bytes decoding one run of `chars` characters may work through, its
/// inflated streams and nested runs included.
fn budget(chars: usize) -> usize {
    // Each run is decoded six ways (four alignments of base64, two of
    // hexadecimal) at each step, and may hold several streams.
    16 * chars + 4 * INFLATE_MOST
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
    /// The body's bound, which the runs' decoding is counted in (see
    /// [`Budget::runs_left`]): so that many short runs that each inflate
    /// far cannot make the proxy work through more than a bound of the
    /// body's coded bytes, those the server sent.
    body: Arc<Budget>,
    /// The stream is the body's coded bytes (no stage decoded it): what
    /// is pushed is counted as such.
    wire: bool,
    /// The characters of the last run that ended, kept (cleared) for
    /// the next one: a run may start at every word of text, and most
    /// words are short.
    spare: Vec<u8>,
}

impl Runs {
    /// The runs of a stream that is a body's coded bytes, bounded alone.
    pub(super) fn new() -> Runs {
        Runs::within(Arc::new(Budget::new(None)), true)
    }

    /// The runs of a stream of `body` (`wire`: the stream is its coded
    /// bytes, else what a stage decoded them to, counted by the stage).
    pub(super) fn within(body: Arc<Budget>, wire: bool) -> Runs {
        Runs {
            held: Vec::new(),
            pos: 0,
            run: None,
            seen: 0,
            body,
            wire,
            spare: Vec::new(),
        }
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
        if self.wire {
            self.body.seen(self.seen);
        }
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
                            let mut chars = std::mem::take(&mut self.spare);
                            chars.push(c);
                            self.run = Some(Run {
                                start: self.pos,
                                chars,
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
                self.end_run(patterns, &mut out, &mut written, replaced)?;
            }
        }
        if last {
            self.end_run(patterns, &mut out, &mut written, replaced)?;
            out.extend_from_slice(&self.held[written..]);
            written = self.held.len();
            // (A line break ending the text was left unread.)
            self.pos = written;
        } else if let Some(run) = self.run.as_mut() {
            if self.pos - run.start > HELD_MOST {
                // A long run (an image in JSON) is read a window at a
                // time: a value nested in it is inside one window or in
                // the overlap kept for the next.
                let verdict = read_spent(patterns, &run.chars, &self.body, true);
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
        out: &mut Vec<u8>,
        written: &mut usize,
        replaced: &mut Vec<usize>,
    ) -> Result<(), Blocked> {
        let Some(mut run) = self.run.take() else {
            return Ok(());
        };
        out.extend_from_slice(&self.held[*written..run.start]);
        *written = run.start;
        let verdict = read_spent(patterns, &run.chars, &self.body, false);
        let to = self.decide(patterns, verdict, &mut run, replaced)?;
        // (Erased where it held a value.) A long run's buffer is let go,
        // not held for the rest of the body.
        run.chars.clear();
        if run.chars.capacity() <= SPARE_MOST {
            self.spare = run.chars;
        }
        if let Some(to) = to {
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
