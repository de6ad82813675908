//! What a run's decodings hold: each decoding read as any text is, as
//! compressed data, and for runs of its own, within a budget of work.

use super::decode::{decodings, promising, TEXT};
use super::inflate::{streams, Place};
use super::{budget, unit, Unit, Verdict, DEPTH, MIN_RUN, MIN_TEXT, RUN};
use crate::secrets::coding::Budget;
use crate::secrets::rewrite::{Patterns, Rewriter};
use crate::secrets::zero;
use std::sync::Arc;

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

/// [`read_run`] within what is left of the body's bound for its runs
/// (see [`Budget::runs_left`]), the work done counted in it; past the
/// bound, withheld. `cut`: the characters are a window of a longer run,
/// which goes on.
pub(super) fn read_spent(
    patterns: &Arc<Patterns>,
    chars: &[u8],
    body: &Budget,
    cut: bool,
) -> Verdict {
    if chars.len() < MIN_RUN {
        return Verdict::Clean;
    }
    let allowed = budget(chars.len()).min(body.runs_left());
    let mut work = Work(allowed);
    let verdict = read_chars(patterns, chars, 1, &mut work, cut);
    // (Within what was left: past the bound only where the body's
    // codings spent the rest meanwhile, and then withheld.)
    match body.runs_spent(allowed - work.0) {
        Ok(()) => verdict,
        Err(_) => Verdict::Withhold,
    }
}

/// What a run of `chars` (its characters, escapes and breaks read) holds.
#[cfg(test)]
pub(super) fn read_run(patterns: &Arc<Patterns>, chars: &[u8]) -> Verdict {
    if chars.len() < MIN_RUN {
        return Verdict::Clean;
    }
    let mut work = Work(budget(chars.len()));
    read_chars(patterns, chars, 1, &mut work, false)
}

/// Each decoding of a run's characters read at `depth` (`cut`: they end
/// where a window of a longer run ends).
fn read_chars(
    patterns: &Arc<Patterns>,
    chars: &[u8],
    depth: usize,
    work: &mut Work,
    cut: bool,
) -> Verdict {
    for decoding in decodings(chars) {
        let mut decoded = decoding.bytes;
        let at = Place {
            natural: decoding.natural,
            cut,
        };
        let v = if depth > DEPTH {
            // One step past the bound: withheld where a value could still
            // hide in what it gives.
            if promising(&decoded) {
                Verdict::Withhold
            } else {
                Verdict::Clean
            }
        } else {
            read_data(patterns, &decoded, depth, work, at)
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
fn read_data(
    patterns: &Arc<Patterns>,
    data: &[u8],
    depth: usize,
    work: &mut Work,
    at: Place,
) -> Verdict {
    if !work.spend(data.len()) {
        return Verdict::Withhold;
    }
    // Every spelling of a value the patterns read is text: in bytes that
    // are mostly not (an image, a hash, compressed data) only the
    // stretches of text are read. (The value's own bytes among them are
    // found by the base64 and hexadecimal forms of the text the run
    // stood in.)
    //
    // A run decoded at another alignment than its own (behind a prefix
    // glued to it) is read as text only where it is mostly text (what
    // the prefix stood before), else for compressed data alone: at the
    // wrong alignment an image is noise, and its short stretches of
    // text would triple the work for nothing.
    let pieces = if at.natural || promising(data) {
        texts(data)
    } else {
        Vec::new()
    };
    for piece in &pieces {
        match Rewriter::flat(patterns, piece) {
            Err(_) => return Verdict::Withhold,
            Ok(Some(secret)) => return Verdict::Found(secret),
            Ok(None) => {}
        }
    }
    let v = streams(data, at, &mut |plain, cut| {
        if depth >= DEPTH {
            // One step past the bound.
            if promising(plain) {
                Verdict::Withhold
            } else {
                Verdict::Clean
            }
        } else {
            let at = Place { natural: true, cut };
            read_data(patterns, plain, depth + 1, work, at)
        }
    });
    if v != Verdict::Clean {
        return v;
    }
    let mut found = Verdict::Clean;
    for piece in &pieces {
        // A run that reaches the end of bytes that end at a window's end
        // goes on in the next window.
        let last = std::ptr::eq(piece.as_ptr_range().end, data.as_ptr_range().end);
        runs_in(piece, &mut |chars, ends| {
            if found == Verdict::Clean && chars.len() >= MIN_RUN {
                let cut = at.cut && last && ends;
                found = read_chars(patterns, chars, depth + 1, work, cut);
            }
        });
    }
    found
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

/// Calls `f` with the characters of each run of `text` (whole), and
/// whether the run reaches the end of `text`.
pub(super) fn runs_in(text: &[u8], f: &mut dyn FnMut(&[u8], bool)) {
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
                        f(&chars, false);
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
                        f(&chars, false);
                        chars.clear();
                    }
                    padded = false;
                    pos += 1;
                }
            }
        }
        if !chars.is_empty() {
            f(&chars, true);
        }
    }
}
