//! Where an occurrence of a pattern may end, found in one pass over the
//! text whatever its bytes: a single Aho-Corasick automaton over every
//! pattern's literal core (an exact pattern's bytes, a spelled pattern's
//! bytes, a base64 form's middle), letters in either case, run over every
//! *reading* of the text at once. A byte stands for itself, and an escape
//! (`%2F`, `\u002f`, `\x2f`, `\/`, `&#47;`, `&sol;`, `+` for a space, and
//! escapes inside escapes, `%252F`; the ones [`spelled`] knows) also for
//! the byte it spells, so the text is a graph of readings; the
//! automaton's states at each position are those of every path through
//! it, each kept once. Where an escape is nested deeper than
//! [`spelled::DEPTH`] levels the scan notes the first such place
//! ([`Scan::deep`]): the scrub reads no further.
//!
//! This is the scrubber's prefilter, never its judge: it reports a
//! superset of the places where an occurrence ends (the automaton ignores
//! case everywhere, escapes are read wherever they stand), and the
//! [`super::rewrite::Rewriter`] decides, with each pattern's exact rules,
//! only in the few bytes before such a place. It costs one automaton step
//! per byte (two or three at an escape), the same for text of one repeated letter,
//! random base64 or prose, so no text a server sends can make scrubbing
//! slower than that.
//!
//! Blank space (`\r`, `\n`, a space, a tab, or JSON's escapes of the
//! first two and the last: `\n`, `\r`, `\t`) is also read as nothing, so
//! that a core wrapped across lines, indented or set apart in groups
//! (base64 as MIME, PEM, YAML and GitHub's contents API write it) is
//! found too, however long the run: the automaton keeps its state over
//! it. A blank byte that some core holds is read both ways (as nothing
//! and as itself), so that a value with a space in it does not stop the
//! wrapped forms of every other value from being found. Quoted-printable's
//! soft line break (`=`, padding, and CRLF or LF) and a backslash line
//! continuation (`\` and CRLF or LF) are read as nothing too.

use super::spelled::{self, escapes_in, soft_break, Memo};
use aho_corasick::automaton::{Automaton, StateID};
use aho_corasick::dfa::DFA;
use aho_corasick::{Anchored, MatchKind, StartKind};
use smallvec::SmallVec;

/// How far ahead of a position its escape may need to be read.
const LOOKAHEAD: usize = spelled::WINDOW;

/// Positions whose states are kept at once: an escape reaches at most
/// `LONGEST` positions ahead, a soft line break 3.
const RING: usize = 64;
const _: () = assert!(spelled::LONGEST + 3 < RING);

/// The automaton over the cores of one set of patterns.
pub(super) struct Cores {
    dfa: DFA,
    start: StateID,
    /// How each byte is read, by its value.
    reading: [Reading; 256],
    /// The bytes some core holds, in either case.
    held: [bool; 256],
}

/// How the scan reads a byte.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Reading {
    /// As itself only.
    Itself,
    /// As nothing: blank space that no core holds.
    Nothing,
    /// More than one way, which the scan's slow path follows: a byte
    /// that may open an escape, or blank space that some core holds.
    Several,
}

impl std::fmt::Debug for Cores {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cores").finish_non_exhaustive()
    }
}

impl Cores {
    /// The automaton over `cores`; `None` when there is nothing to look
    /// for, or the automaton cannot be built (the caller then looks
    /// everywhere: slower, never weaker).
    pub(super) fn new(cores: &[&[u8]]) -> Option<Cores> {
        if cores.iter().all(|c| c.is_empty()) {
            return None;
        }
        let dfa = DFA::builder()
            .match_kind(MatchKind::Standard)
            .start_kind(StartKind::Unanchored)
            .ascii_case_insensitive(true)
            .build(cores.iter().filter(|c| !c.is_empty()))
            .ok()?;
        let start = dfa.start_state(Anchored::No).ok()?;
        let mut reading = [Reading::Itself; 256];
        for (b, r) in reading.iter_mut().enumerate() {
            let b = b as u8;
            if opens_escape(b) {
                *r = Reading::Several;
            } else if is_blank(b) {
                let held = cores.iter().any(|c| c.contains(&b));
                *r = if held {
                    Reading::Several
                } else {
                    Reading::Nothing
                };
            }
        }
        let mut held = [false; 256];
        for &b in cores.iter().flat_map(|c| c.iter()) {
            held[b.to_ascii_lowercase() as usize] = true;
            held[b.to_ascii_uppercase() as usize] = true;
        }
        Some(Cores {
            dfa,
            start,
            reading,
            held,
        })
    }

    /// The state after `byte` read as itself, or as nothing where it is
    /// blank space no core holds.
    fn step(&self, state: StateID, byte: u8) -> StateID {
        if self.reading[byte as usize] == Reading::Nothing {
            return state;
        }
        self.dfa.next_state(Anchored::No, state, byte)
    }

    fn is_match(&self, state: StateID) -> bool {
        self.dfa.is_match(state)
    }
}

fn is_blank(b: u8) -> bool {
    matches!(b, b'\r' | b'\n' | b' ' | b'\t')
}

/// Bytes that may open an escape: where a second reading starts.
fn opens_escape(b: u8) -> bool {
    spelled::opens(b)
}

type States = SmallVec<[StateID; 4]>;

/// The scan of one stream: the automaton's states at the next positions.
pub(super) struct Scan {
    /// The states at position `p` are in `ring[p % RING]`, for `p` from
    /// `at` to `at + LONGEST`.
    ring: [States; RING],
    /// The next position to read from.
    at: usize,
    /// Positions after `at` that some escape reaches (their sets are not
    /// empty): while there are none the scan runs one path.
    ahead: usize,
    /// The first position where an escape nested deeper than
    /// [`spelled::DEPTH`] starts that spells a byte some core holds, once
    /// one is read.
    deep: Option<usize>,
    /// The readings of escapes worked out so far.
    memo: Memo,
    /// The last position read inside a run of one byte, and its reading.
    run: Option<(usize, spelled::Escapes)>,
}

impl Scan {
    pub(super) fn new(cores: &Cores) -> Scan {
        let mut ring: [States; RING] = std::array::from_fn(|_| States::new());
        ring[0].push(cores.start);
        Scan {
            ring,
            at: 0,
            ahead: 0,
            deep: None,
            memo: Memo::new(),
            run: None,
        }
    }

    /// The first position where an escape nested deeper than the scan
    /// reads starts, if one was read.
    pub(super) fn deep(&self) -> Option<usize> {
        self.deep
    }

    /// The next position the scan will read.
    pub(super) fn at(&self) -> usize {
        self.at
    }

    fn put(&mut self, position: usize, state: StateID) {
        let set = &mut self.ring[position % RING];
        if set.is_empty() && position > self.at + 1 {
            self.ahead += 1;
        }
        if !set.contains(&state) {
            set.push(state);
        }
    }

    /// Read `text` (whose first byte stands at position `base`) from the
    /// scan's position on, as far as every escape can be read (to its end
    /// when `last`), calling `hit(unit, end)` where a core ends: `end` is
    /// the position just past it, `unit` where its last byte's reading
    /// starts (never smaller than at the call before).
    pub(super) fn feed(
        &mut self,
        cores: &Cores,
        text: &[u8],
        base: usize,
        last: bool,
        hit: &mut dyn FnMut(usize, usize),
    ) {
        // A byte that opens an escape is read once the whole escape can
        // be: up to `LOOKAHEAD` bytes after it, or the end.
        let ready = |r: usize| {
            r < text.len() && (last || r + LOOKAHEAD <= text.len() || !opens_escape(text[r]))
        };
        while self.at >= base && ready(self.at - base) {
            let r = self.at - base;
            // One path and no escape ahead: step through the bytes that
            // open none, with nothing else to keep.
            if self.ahead == 0 && self.ring[self.at % RING].len() == 1 {
                let mut state = self.ring[self.at % RING][0];
                let mut r = r;
                while r < text.len() && cores.reading[text[r] as usize] != Reading::Several {
                    state = cores.step(state, text[r]);
                    if cores.is_match(state) {
                        hit(base + r, base + r + 1);
                    }
                    r += 1;
                }
                self.ring[self.at % RING].clear();
                self.at = base + r;
                self.ring[self.at % RING].clear();
                self.ring[self.at % RING].push(state);
                if !ready(r) {
                    break;
                }
            }
            let r = self.at - base;
            let states = std::mem::take(&mut self.ring[self.at % RING]);
            let byte = text[r];
            let escapes = if opens_escape(byte) {
                // Inside a run of one byte longer than an escape reaches
                // (a thousand backslashes), every position reads as the
                // one before it.
                let run = text
                    .get(r..r + spelled::WINDOW + 1)
                    .is_some_and(|w| w.iter().all(|&c| c == byte));
                let found = match &self.run {
                    Some((at, was)) if run && *at + 1 == self.at => was.clone(),
                    _ => escapes_in(&mut self.memo, text, base, r),
                };
                self.run = run.then(|| (self.at, found.clone()));
                if self.deep.is_none()
                    && (found.any || found.deep.iter().any(|&b| cores.held[b as usize]))
                {
                    self.deep = Some(self.at);
                }
                found.read
            } else {
                SmallVec::new()
            };
            // What the next position holds was reached ahead of it (by an
            // escape) or is about to be (by this byte).
            if !self.ring[(self.at + 1) % RING].is_empty() {
                self.ahead -= 1;
            }
            // JSON's escaped blank space, and blank space some core
            // holds, read as nothing too.
            let escaped_blank =
                byte == b'\\' && matches!(text.get(r + 1), Some(b'n' | b'r' | b't'));
            let held_blank = is_blank(byte);
            let soft = soft_break(&text[r..]);
            for &s in &states {
                if escaped_blank {
                    self.put(self.at + 2, s);
                }
                if let Some(n) = soft {
                    self.put(self.at + n, s);
                }
                if held_blank {
                    self.put(self.at + 1, s);
                }
                let next = cores.step(s, byte);
                if cores.is_match(next) {
                    hit(base + r, base + r + 1);
                }
                self.put(self.at + 1, next);
                for &(decoded, len) in &escapes {
                    let next = cores.step(s, decoded);
                    if cores.is_match(next) {
                        hit(base + r, base + r + len);
                    }
                    self.put(self.at + len, next);
                }
            }
            self.at += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ends(cores: &[&[u8]], text: &[u8], pieces: usize) -> Vec<usize> {
        let c = Cores::new(cores).unwrap();
        let mut scan = Scan::new(&c);
        let mut out = Vec::new();
        // Fed as a stream keeps it: the text so far, every time.
        let step = text.len().div_ceil(pieces.max(1)).max(1);
        let mut upto = 0;
        while upto < text.len() {
            upto = (upto + step).min(text.len());
            scan.feed(&c, &text[..upto], 0, false, &mut |_, e| out.push(e));
        }
        scan.feed(&c, text, 0, true, &mut |_, e| out.push(e));
        out.sort_unstable();
        out.dedup();
        out
    }

    #[test]
    fn a_core_is_found_in_every_reading_of_the_text() {
        let core: &[u8] = b"sk/live";
        for (text, end) in [
            (&b"..sk/live.."[..], 9),
            (b"..SK/LiVe..", 9),
            (b"..sk%2Flive..", 11),
            (b"..%73%6b%2f%6c%69%76%65..", 23),
            (b"..sk\\/live..", 10),
            (b"..sk\\u002Flive..", 14),
            (b"..sk&sol;live..", 13),
            (b"..sk&#x2F;live..", 14),
            (b"..sk&#47;live..", 13),
        ] {
            for pieces in [1, 3, text.len()] {
                assert_eq!(
                    ends(&[core], text, pieces),
                    [end],
                    "{} in {pieces}",
                    String::from_utf8_lossy(text)
                );
            }
        }
        // A `%` of the value itself, and the escape of one.
        assert_eq!(ends(&[b"a%25b"], b"xa%25bx", 1), [6]);
        assert_eq!(ends(&[b"a%25b"], b"xa%2525bx", 1), [8]);
        assert_eq!(ends(&[b"a b"], b"a+b", 1), [3]);
        assert!(ends(&[core], b"sk/liv-e sk%2live", 1).is_empty());
    }

    #[test]
    fn a_core_is_found_across_runs_of_blank_space_even_where_a_core_holds_a_blank() {
        let core: &[u8] = b"QXNrLWxpdmUt";
        // Each text ends with the core and two dots.
        for text in [
            &b"..QXNr\nLWxp\r\n  dmUt.."[..],
            b"..QXNr\n\n\n\n\nLWxpdmUt..",
            b"..QX\t\tNrLW   xpdm\n        Ut..",
            b"..QXNr\\r\\n    LWxpdmUt..",
            b"..QXNrLWxp\\n\\tdmUt..",
        ] {
            let end = text.len() - 2;
            for pieces in [1, 4, text.len()] {
                // Alone, and beside a core that holds a space and a line
                // break (read both ways then).
                for with in [&[core][..], &[core, b"a b\nc"]] {
                    assert_eq!(
                        ends(with, text, pieces),
                        [end],
                        "{} in {pieces}",
                        String::from_utf8_lossy(text)
                    );
                }
            }
        }
        // A core's own blanks are still read as themselves.
        assert_eq!(ends(&[b"a b\nc"], b"xa b\ncx", 1), [6]);
    }

    #[test]
    fn line_breaks_that_decoders_delete_are_read_as_nothing() {
        for (text, end) in [
            (&b"..sk/li=\nve.."[..], 11),
            (b"..sk/li=  \t\r\nve..", 15),
            (b"..sk/li\\\nve..", 11),
            (b"..sk/li\\\r\nve..", 12),
        ] {
            assert_eq!(
                ends(&[b"sk/live"], text, 3),
                [end],
                "{}",
                String::from_utf8_lossy(text)
            );
        }
    }

    #[test]
    fn an_escape_nested_past_the_depth_ends_the_reading_at_any_depth() {
        let cores = Cores::new(&[b"sk/live"]).unwrap();
        let mut text = b"..%2F..".to_vec();
        for level in 1..=8 {
            let mut scan = Scan::new(&cores);
            scan.feed(&cores, &text, 0, true, &mut |_, _| {});
            let want = (level > spelled::DEPTH).then_some(2);
            assert_eq!(scan.deep(), want, "{}", String::from_utf8_lossy(&text));
            text.splice(3..3, *b"25");
        }
    }
}
