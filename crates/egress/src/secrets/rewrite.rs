//! Rewriting: where a secret's value is put in and taken out.
//!
//! This module owns the pattern (what is looked for, how, and what is done
//! where it is found), the set of patterns one stream is rewritten by, and
//! the [`Rewriter`] that applies them to a stream, holding back as many
//! bytes as the longest pattern could still need, and to headers. The
//! patterns made from secrets (a secret's placeholder and the real value in
//! the spellings a request or an echoing server may use: raw, percent
//! encoded, base64 at each alignment, JSON escapes, hexadecimal; for
//! requests to one host and for responses) are `forms`'s; the rewriter as
//! a streaming body is `body`'s. It never sends or records anything: what
//! a match means is the session's to say.

mod body;
mod forms;
mod nested;

pub(super) use body::RewriteBody;
pub(super) use forms::{outgoing, scrub_patterns};

use super::coding::Budget;
use super::scan::{Cores, Scan};
use super::{b64, spelled, zero};
use std::collections::VecDeque;
use std::ops::Range;
use std::sync::Arc;

/// Where in a request bytes stand: how a substituted value is written.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Place {
    Header,
    /// The request target: the value is percent-encoded.
    Target,
    Body,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Violation {
    /// A secret's placeholder on its way to a host that is not its own.
    Placeholder,
    /// A secret's real value leaving from inside the sandbox.
    Value,
    /// An escape nested deeper than the scrub reads (see
    /// [`spelled::DEPTH`]), spelling a byte of a value: what follows is
    /// withheld, not passed unread.
    Nested,
}

#[derive(Debug, Clone)]
pub(super) enum Action {
    Replace(Vec<u8>),
    Block(Violation),
}

/// How a pattern's bytes are looked for.
#[derive(Debug, Clone)]
pub(super) enum Kind {
    /// Byte for byte.
    Exact,
    /// In any common spelling of the bytes, each byte on its own: itself
    /// (letters in either case), percent-encoded (either case), a JSON or
    /// JavaScript escape (`\u00XX`, `\xXX`, `\/`, `\"`, `\\`), an HTML
    /// character reference (decimal, hexadecimal or named), `+` for a space.
    /// Spellings mixed in one occurrence are found too.
    Spelled,
    /// Inside base64 at one alignment: replaced so that the text stays
    /// valid base64 (see [`b64`]).
    Base64(Box<b64::Form>),
}

#[derive(Debug, Clone)]
pub(super) struct Pattern {
    pub(super) from: Vec<u8>,
    pub(super) kind: Kind,
    pub(super) action: Action,
    pub(super) secret: usize,
}

impl Pattern {
    fn exact(from: Vec<u8>, action: Action, secret: usize) -> Pattern {
        Pattern {
            from,
            kind: Kind::Exact,
            action,
            secret,
        }
    }

    fn spelled(from: Vec<u8>, action: Action, secret: usize) -> Pattern {
        Pattern {
            from,
            kind: Kind::Spelled,
            action,
            secret,
        }
    }

    /// The most bytes an occurrence can take.
    fn longest(&self) -> usize {
        match &self.kind {
            Kind::Exact => self.from.len(),
            Kind::Spelled => spelled::longest(self.from.len()),
            Kind::Base64(f) => f.len(),
        }
    }

    /// The length of an occurrence at the start of `text`.
    fn at(&self, text: &[u8]) -> Option<usize> {
        match &self.kind {
            Kind::Exact => text.starts_with(&self.from).then_some(self.from.len()),
            Kind::Spelled => spelled::find_at(&self.from, text),
            Kind::Base64(f) => f.at(text),
        }
    }

    /// What an occurrence `matched` becomes under `Replace(to)`.
    fn replacement(&self, matched: &[u8], to: &[u8]) -> Vec<u8> {
        match &self.kind {
            Kind::Base64(f) => f.replace(matched, to),
            _ => to.to_vec(),
        }
    }

    /// The literal bytes every occurrence holds (in some reading of the
    /// text, letters in either case), for the [`scan`](super::scan).
    fn core(&self) -> &[u8] {
        match &self.kind {
            Kind::Exact | Kind::Spelled => &self.from,
            Kind::Base64(f) => &f.middle,
        }
    }

    /// The byte an occurrence has second, when only one can be.
    fn second(&self) -> Option<u8> {
        match &self.kind {
            Kind::Exact => self.from.get(1).copied(),
            // A letter in either case, or an escape: any byte.
            Kind::Spelled => None,
            Kind::Base64(f) => f.second(),
        }
    }

    /// Bytes an occurrence may start with.
    fn firsts(&self) -> Vec<u8> {
        let Some(&b) = self.from.first() else {
            return Vec::new();
        };
        match &self.kind {
            Kind::Exact => vec![b],
            Kind::Spelled => spelled::openers(b).to_vec(),
            Kind::Base64(f) => f.firsts(),
        }
    }
}

impl Drop for Pattern {
    fn drop(&mut self) {
        // Forms of real values: erased when no longer needed.
        zero(&mut self.from);
        if let Action::Replace(to) = &mut self.action {
            zero(to);
        }
    }
}

pub(super) fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() || needle.len() > hay.len() {
        return None;
    }
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Patterns in priority order, with what lets the [`Rewriter`] look at
/// only the few places where one may occur: made once per set, shared by
/// every stream it applies to.
pub(super) struct Patterns {
    list: Vec<Pattern>,
    /// The automaton that finds where an occurrence may end; `None` when
    /// there is nothing to look for (or, should it not build, the
    /// rewriter looks everywhere).
    cores: Option<Cores>,
    /// For each byte, the patterns an occurrence may start with it, in
    /// priority order (by their place in `list`).
    by_first: Vec<Vec<usize>>,
    /// For each pattern, the one byte its occurrence has second, if only
    /// one can be.
    second: Vec<Option<u8>>,
    /// The most bytes an occurrence of any can take.
    longest: usize,
    /// Text is not passed beyond an escape nested deeper than the scan
    /// reads: set for a scrub (real values replaced in their spellings).
    withhold_deep: bool,
}

impl Patterns {
    pub(super) fn new(list: Vec<Pattern>) -> Patterns {
        let mut by_first = vec![Vec::new(); 256];
        for (i, p) in list.iter().enumerate() {
            let mut firsts = p.firsts();
            firsts.sort_unstable();
            firsts.dedup();
            for b in firsts {
                by_first[b as usize].push(i);
            }
        }
        let cores: Vec<&[u8]> = list.iter().map(Pattern::core).collect();
        let withhold_deep = list
            .iter()
            .any(|p| matches!((&p.kind, &p.action), (Kind::Spelled, Action::Replace(_))));
        Patterns {
            withhold_deep,
            cores: Cores::new(&cores),
            second: list.iter().map(Pattern::second).collect(),
            longest: list.iter().map(Pattern::longest).max().unwrap_or(0),
            by_first,
            list,
        }
    }

    /// The placeholder a value of `secret` is scrubbed to, where these
    /// patterns scrub it.
    fn placeholder(&self, secret: usize) -> Option<&[u8]> {
        self.list.iter().find_map(|p| match (&p.kind, &p.action) {
            (Kind::Exact | Kind::Spelled, Action::Replace(to)) if p.secret == secret => {
                Some(&to[..])
            }
            _ => None,
        })
    }

    /// Every pattern, in priority order.
    pub(super) fn iter(&self) -> std::slice::Iter<'_, Pattern> {
        self.list.iter()
    }

    /// The first pattern with an occurrence at the start of `text`, and
    /// its length.
    fn first_at(&self, text: &[u8]) -> Option<(&Pattern, usize)> {
        let &b = text.first()?;
        for &i in &self.by_first[b as usize] {
            if let (Some(want), Some(&got)) = (self.second[i], text.get(1)) {
                // Blank space may stand second in wrapped base64.
                if want != got && !matches!(got, b'\r' | b'\n' | b' ' | b'\t' | b'\\') {
                    continue;
                }
            }
            let p = &self.list[i];
            if let Some(len) = p.at(text) {
                return Some((p, len));
            }
        }
        None
    }
}

/// A blocked pattern was found.
#[derive(Debug, Clone, Copy)]
pub(super) struct Blocked {
    pub(super) secret: usize,
    pub(super) violation: Violation,
}

/// Applies patterns to a stream of bytes: replaces, or stops at a blocked
/// pattern. Holds back as many bytes as the longest pattern could still
/// need (and the scan's look-ahead).
///
/// Every byte is read once by the [`Scan`]; patterns are tried, in
/// priority order, only at the places it marks (the `longest` bytes
/// before each place where an occurrence may end), and everything else is
/// copied as it is. The output is the same as trying every pattern at
/// every byte (the leftmost occurrence first, the first pattern in
/// priority order there, its longest occurrence), which the tests check.
pub(super) struct Rewriter {
    patterns: Arc<Patterns>,
    /// Bytes read and not yet written out; the first stands at position
    /// `base` of the stream.
    pending: Vec<u8>,
    base: usize,
    scan: Option<Scan>,
    /// Positions of the stream where an occurrence may start, in order,
    /// not overlapping.
    hot: VecDeque<Range<usize>>,
    /// Secrets whose pattern was replaced at least once.
    replaced: Vec<usize>,
    /// For a scrub, the runs of base64 and hexadecimal in what the
    /// patterns let through, decoded and read again (see [`nested`]).
    nested: Option<nested::Runs>,
}

impl Rewriter {
    pub(super) fn new(patterns: Arc<Patterns>) -> Rewriter {
        let mut r = Rewriter::flat_stream(patterns);
        if r.patterns.withhold_deep {
            r.nested = Some(nested::Runs::new());
        }
        r
    }

    /// A rewriter whose reading inside runs is counted in `body`'s bound
    /// (`wire`: what it is given is the body's coded bytes).
    pub(in crate::secrets) fn within(
        patterns: Arc<Patterns>,
        body: Arc<Budget>,
        wire: bool,
    ) -> Rewriter {
        let mut r = Rewriter::flat_stream(patterns);
        if r.patterns.withhold_deep {
            r.nested = Some(nested::Runs::within(body, wire));
        }
        r
    }

    /// A rewriter by the patterns alone, without reading inside runs.
    fn flat_stream(patterns: Arc<Patterns>) -> Rewriter {
        Rewriter {
            scan: patterns.cores.as_ref().map(Scan::new),
            patterns,
            pending: Vec::new(),
            base: 0,
            hot: VecDeque::new(),
            replaced: Vec::new(),
            nested: None,
        }
    }

    /// The first secret whose value `data` holds as the patterns alone
    /// read it (a decoded run's bytes), if any.
    fn flat(patterns: &Arc<Patterns>, data: &[u8]) -> Result<Option<usize>, Blocked> {
        // (What it writes out holds no value: each is replaced.)
        let mut r = Rewriter::flat_stream(patterns.clone());
        r.push(data)?;
        r.finish()?;
        Ok(r.replaced.first().copied())
    }

    /// Whole input at once.
    pub(super) fn all(
        patterns: Arc<Patterns>,
        input: &[u8],
    ) -> Result<(Vec<u8>, Vec<usize>), Blocked> {
        let mut r = Rewriter::new(patterns);
        let mut out = r.push(input)?;
        out.extend(r.finish()?);
        Ok((out, r.replaced))
    }

    /// Rewrite `data`, the stream's next bytes: what can be written out
    /// (a possible occurrence's start is kept until it is decided).
    pub(super) fn push(&mut self, data: &[u8]) -> Result<Vec<u8>, Blocked> {
        self.pending.extend_from_slice(data);
        let out = self.run(false)?;
        self.nest(out, false)
    }

    /// The stream's end: the rest written out.
    pub(super) fn finish(&mut self) -> Result<Vec<u8>, Blocked> {
        let out = self.run(true)?;
        self.nest(out, true)
    }

    /// `out`, what the patterns let through, with the runs that hold a
    /// value inside their decodings replaced.
    fn nest(&mut self, out: Vec<u8>, last: bool) -> Result<Vec<u8>, Blocked> {
        match &mut self.nested {
            Some(runs) => runs.push(&self.patterns, &out, last, &mut self.replaced),
            None => Ok(out),
        }
    }

    /// The secrets replaced so far.
    pub(super) fn replaced(&self) -> &[usize] {
        &self.replaced
    }

    /// Read the pending bytes with the scan, marking where occurrences may
    /// start.
    fn mark(&mut self, last: bool) {
        let longest = self.patterns.longest;
        let (hot, pending, base) = (&mut self.hot, &self.pending, self.base);
        match (&mut self.scan, &self.patterns.cores) {
            (Some(scan), Some(cores)) => {
                // An occurrence ending at `end` starts at `end - longest`
                // or later, so at `unit + 1 - longest` or later: a bound
                // that never decreases from one call to the next.
                scan.feed(cores, pending, base, last, &mut |unit, end| {
                    let from = (unit + 1).saturating_sub(longest);
                    match hot.back_mut() {
                        Some(r) if r.end >= from => r.end = r.end.max(end),
                        _ => hot.push_back(from..end),
                    }
                });
            }
            // No automaton: every place is looked at.
            _ if !self.patterns.list.is_empty() => {
                let end = base + pending.len();
                match hot.back_mut() {
                    Some(r) if r.end >= base => r.end = end,
                    _ => hot.push_back(base..end),
                }
            }
            _ => {}
        }
    }

    fn run(&mut self, last: bool) -> Result<Vec<u8>, Blocked> {
        self.mark(last);
        let buf = std::mem::take(&mut self.pending);
        let mut out = Vec::with_capacity(buf.len());
        let patterns = self.patterns.clone();
        // Where the next occurrence may start at most: the bytes after
        // are held back unless this is the end (an occurrence starting
        // before the limit ends before what the scan has read).
        let read = match &self.scan {
            Some(scan) => scan.at().saturating_sub(self.base).min(buf.len()),
            None => buf.len(),
        };
        let limit = if last {
            buf.len()
        } else {
            (read + 1).saturating_sub(patterns.longest).min(buf.len())
        };
        // Nothing from an escape nested deeper than the scan reads on.
        let deep = match &self.scan {
            Some(scan) if patterns.withhold_deep => scan.deep(),
            _ => None,
        };
        let limit = match deep {
            Some(d) => limit.min(d.saturating_sub(self.base)),
            None => limit,
        };
        let mut i = 0;
        while i < limit {
            let at = self.base + i;
            while self.hot.front().is_some_and(|r| r.end <= at) {
                self.hot.pop_front();
            }
            // Bytes before the next marked place are copied at once.
            let cold_until = match self.hot.front() {
                Some(r) if r.start <= at => i,
                Some(r) => (r.start - self.base).min(limit),
                None => limit,
            };
            if cold_until > i {
                out.extend_from_slice(&buf[i..cold_until]);
                i = cold_until;
                continue;
            }
            let rest = &buf[i..];
            match patterns.first_at(rest) {
                None => {
                    out.push(buf[i]);
                    i += 1;
                }
                Some((p, len)) => match &p.action {
                    Action::Block(v) => {
                        return Err(Blocked {
                            secret: p.secret,
                            violation: *v,
                        })
                    }
                    Action::Replace(to) => {
                        out.extend(p.replacement(&rest[..len], to));
                        if !self.replaced.contains(&p.secret) {
                            self.replaced.push(p.secret);
                        }
                        i += len;
                    }
                },
            }
        }
        self.pending = buf[i..].to_vec();
        self.base += i;
        if deep.is_some_and(|d| self.base >= d) {
            return Err(Blocked {
                secret: 0,
                violation: Violation::Nested,
            });
        }
        Ok(out)
    }
}

/// Headers (or trailers) passed through `patterns` one by one, names and
/// values, leaving out those in `skip` (lower case): a header whose name
/// or value a pattern blocks, or whose name is no longer a name after a
/// replacement, is left out. Returns the new map and the secrets replaced.
pub(super) fn rewrite_headers(
    patterns: &Arc<Patterns>,
    headers: &http::HeaderMap,
    skip: &[&str],
) -> (http::HeaderMap, Vec<usize>) {
    let mut out = http::HeaderMap::new();
    let mut replaced = Vec::new();
    for (k, v) in headers.iter() {
        if skip.contains(&k.as_str()) {
            continue;
        }
        let Ok((name, rn)) = Rewriter::all(patterns.clone(), k.as_str().as_bytes()) else {
            continue;
        };
        let Ok((value, rv)) = Rewriter::all(patterns.clone(), v.as_bytes()) else {
            continue;
        };
        let (Ok(name), Ok(value)) = (
            http::HeaderName::from_bytes(&name),
            http::HeaderValue::from_bytes(&value),
        ) else {
            continue;
        };
        replaced.extend(rn);
        replaced.extend(rv);
        out.append(name, value);
    }
    (out, replaced)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::secrets::Secret;
    use base64::Engine;

    fn scrub_set(secrets: &[Secret]) -> Arc<Patterns> {
        Arc::new(Patterns::new(scrub_patterns(secrets)))
    }

    fn pats(list: &[(&str, Option<&str>)]) -> Arc<Patterns> {
        Arc::new(Patterns::new(
            list.iter()
                .enumerate()
                .map(|(i, (from, to))| Pattern {
                    from: from.as_bytes().to_vec(),
                    kind: Kind::Exact,
                    action: match to {
                        Some(t) => Action::Replace(t.as_bytes().to_vec()),
                        None => Action::Block(Violation::Value),
                    },
                    secret: i,
                })
                .collect(),
        ))
    }

    /// Not a timed test: how fast responses are scrubbed, printed (run
    /// with `--ignored --nocapture`; `docs/performance.md` has figures).
    #[test]
    #[ignore]
    fn scrub_throughput() {
        // Two API keys, and a token that starts with the letter the
        // 'x' text is made of (as Slack's do).
        let values = [
            "sk-live-0aB3dE5gH7jK9mN1pQ3sT5vX7zA9cE1gI",
            "sk-live-1aB3dE5gH7jK9mN1pQ3sT5vX7zA9cE1gI",
            "xoxb-1234567890-0987654321-aBcDeFgHiJkLmNoP",
        ];
        let secrets: Vec<Secret> = values
            .iter()
            .enumerate()
            .map(|(i, v)| {
                Secret::new(
                    format!("S{i}"),
                    format!("warden-secret-{i:032x}"),
                    v.as_bytes().to_vec(),
                    Vec::new(),
                    false,
                )
            })
            .collect();
        let patterns = scrub_set(&secrets);
        // Text drawn from the base64 alphabet (the worst case: every byte
        // may open a form), and English-like prose.
        let mut seed = 0x9e3779b97f4a7c15u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let b64: Vec<u8> = (0..8 << 20)
            .map(|_| alphabet[(next() % 64) as usize])
            .collect();
        let prose: Vec<u8> = b"The quick brown fox jumps over the lazy dog; "
            .iter()
            .copied()
            .cycle()
            .take(8 << 20)
            .collect();
        let xs = vec![b'x'; 8 << 20];
        let random: Vec<u8> = (0..8 << 20).map(|_| next() as u8).collect();
        // Escapes everywhere, nested ones too (the worst case for the
        // readings: every byte may open one).
        let escapes: Vec<u8> = b"%25%32%46&amp;#115;%5Cu0073\\u00=\r\n\\_"
            .iter()
            .copied()
            .cycle()
            .take(8 << 20)
            .collect();
        let percents = vec![b'%'; 8 << 20];
        for (what, text) in [
            ("base64 text", &b64),
            ("prose", &prose),
            ("'x' text", &xs),
            ("random bytes", &random),
            ("nested escapes", &escapes),
            ("'%' text", &percents),
        ] {
            let mut r = Rewriter::new(patterns.clone());
            let start = std::time::Instant::now();
            let mut n = 0;
            for chunk in text.chunks(16 << 10) {
                n += r.push(chunk).unwrap().len();
            }
            n += r.finish().unwrap().len();
            let secs = start.elapsed().as_secs_f64();
            assert_eq!(n, text.len());
            println!("scrub {what}: {:.0} MB/s", text.len() as f64 / secs / 1e6);
        }
    }

    /// What the rewriter must produce: every pattern tried at every byte,
    /// the leftmost occurrence first, the first pattern in priority order
    /// there (the scrubber before it had a prefilter).
    fn everywhere(p: &Patterns, text: &[u8]) -> Option<Vec<u8>> {
        let mut out = Vec::new();
        let mut i = 0;
        while i < text.len() {
            match p.first_at(&text[i..]) {
                None => {
                    out.push(text[i]);
                    i += 1;
                }
                Some((pat, len)) => match &pat.action {
                    Action::Block(_) => return None,
                    Action::Replace(to) => {
                        out.extend(pat.replacement(&text[i..i + len], to));
                        i += len;
                    }
                },
            }
        }
        Some(out)
    }

    /// `text` through a rewriter in the pieces `cuts` make.
    fn in_pieces(p: &Arc<Patterns>, text: &[u8], cuts: &[usize]) -> Option<Vec<u8>> {
        let mut r = Rewriter::new(p.clone());
        let mut out = Vec::new();
        let mut from = 0;
        for &c in cuts.iter().chain(std::iter::once(&text.len())) {
            out.extend(r.push(&text[from..c]).ok()?);
            from = c;
        }
        out.extend(r.finish().ok()?);
        Some(out)
    }

    fn test_secrets(value: &str) -> Vec<Secret> {
        vec![Secret::new(
            "S".into(),
            "warden-secret-00112233445566778899aabbccddeeff".into(),
            value.as_bytes().to_vec(),
            Vec::new(),
            false,
        )]
    }

    /// The spellings of `value` the scrubber knows, each in some text.
    fn spelled_texts(value: &[u8]) -> Vec<Vec<u8>> {
        use base64::engine::general_purpose::{
            STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD,
        };
        let mut texts: Vec<Vec<u8>> = Vec::new();
        let wrap = |inner: &[u8]| [&b"{\"token\": \""[..], inner, b"\", \"more\": 1}"].concat();
        texts.push(wrap(value));
        texts.push(wrap(&value.to_ascii_uppercase()));
        let percent = |upper: bool, all: bool| -> Vec<u8> {
            value
                .iter()
                .flat_map(|&b| {
                    if !all && b.is_ascii_alphanumeric() {
                        vec![b]
                    } else if upper {
                        format!("%{b:02X}").into_bytes()
                    } else {
                        format!("%{b:02x}").into_bytes()
                    }
                })
                .collect()
        };
        for (upper, all) in [(true, false), (false, false), (true, true), (false, true)] {
            texts.push(wrap(&percent(upper, all)));
        }
        let json: Vec<u8> = value
            .iter()
            .flat_map(|&b| format!("\\u{b:04x}").into_bytes())
            .collect();
        texts.push(wrap(&json));
        let html: Vec<u8> = value
            .iter()
            .flat_map(|&b| {
                if b.is_ascii_alphanumeric() {
                    vec![b]
                } else {
                    format!("&#{b};").into_bytes()
                }
            })
            .collect();
        texts.push(wrap(&html));
        let hex: String = value.iter().map(|b| format!("{b:02X}")).collect();
        texts.push(wrap(hex.as_bytes()));
        for engine in [&STANDARD, &STANDARD_NO_PAD, &URL_SAFE, &URL_SAFE_NO_PAD] {
            for prefix in ["", "u:", "us:"] {
                let data = [prefix.as_bytes(), value, b"!tail"].concat();
                texts.push(wrap(engine.encode(&data).as_bytes()));
            }
        }
        texts
    }

    #[test]
    fn a_value_split_at_every_offset_is_found_in_every_spelling() {
        let value = "sk/Live+tok:x=Q-0123_abc";
        let secrets = test_secrets(value);
        let p = scrub_set(&secrets);
        for text in spelled_texts(value.as_bytes()) {
            let whole = everywhere(&p, &text).unwrap();
            assert_ne!(whole, text, "{}", String::from_utf8_lossy(&text));
            assert_eq!(in_pieces(&p, &text, &[]).unwrap(), whole);
            for cut in 0..=text.len() {
                assert_eq!(
                    in_pieces(&p, &text, &[cut]).unwrap(),
                    whole,
                    "{} cut at {cut}",
                    String::from_utf8_lossy(&text)
                );
            }
            let every: Vec<usize> = (1..text.len()).collect();
            assert_eq!(in_pieces(&p, &text, &every).unwrap(), whole);
        }
    }

    #[test]
    fn base64_wrapped_across_runs_of_blank_space_at_any_column_is_scrubbed_in_any_pieces() {
        // GitHub's contents API and MIME wrap what they echo at 60 and 76
        // columns; the sandbox chooses where its value falls.
        let value = "sk-live-0123456789abcdefghijklmnopqrstuv";
        let p = scrub_set(&test_secrets(value));
        let to = b64::congruent(
            b"warden-secret-00112233445566778899aabbccddeeff",
            value.len(),
        );
        let engine = &base64::engine::general_purpose::STANDARD;
        // Runs of blank space too: blank lines, indentation (PEM inside
        // YAML or JSON), groups set apart by spaces or tabs.
        for sep in [
            "\n",
            "\r\n",
            "\\n",
            "\\r\\n",
            "\n\n",
            "\r\n\r\n",
            "\n      ",
            "\\r\\n    ",
            "\\n\\t",
            " ",
            "\t",
            " \t\r\n  ",
        ] {
            for width in [1, 5, 60, 76] {
                for pad in 0..6 {
                    let data = ["A".repeat(pad).as_bytes(), value.as_bytes(), b"!tail"].concat();
                    let lines: Vec<String> = engine
                        .encode(&data)
                        .as_bytes()
                        .chunks(width)
                        .map(|c| String::from_utf8_lossy(c).into_owned())
                        .collect();
                    let inner = lines.join(sep);
                    let text = format!("{{\"content\": \"{inner}\"}}").into_bytes();
                    let whole = everywhere(&p, &text).unwrap();
                    let cuts: Vec<usize> = (1..text.len()).step_by(7).collect();
                    for pieces in [&[][..], &[text.len() / 2], &cuts] {
                        assert_eq!(in_pieces(&p, &text, pieces).unwrap(), whole);
                    }
                    let out = String::from_utf8(whole).unwrap();
                    let inner = &out["{\"content\": \"".len()..out.len() - 2];
                    let decoded = engine.decode(inner.replace(sep, "")).unwrap();
                    let want = ["A".repeat(pad).as_bytes(), &to, b"!tail"].concat();
                    assert_eq!(decoded, want, "{sep:?} every {width}, {pad} before");
                    if width >= 5 {
                        assert_eq!(inner.matches(sep).count(), lines.len() - 1);
                    }
                }
            }
        }
    }

    #[test]
    fn the_scan_finds_what_trying_every_byte_finds() {
        // Texts made of pieces of the value, its escapes, base64 letters
        // and noise, cut anywhere: the rewriter must agree with trying
        // every pattern at every byte, and find the planted spellings.
        let value = b"Ab%+/c:&x;Z9_q";
        let secrets = test_secrets(std::str::from_utf8(value).unwrap());
        let p = scrub_set(&secrets);
        let mut seed = 0x2545f4914f6cdd1du64;
        let mut next = move |n: usize| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % n as u64) as usize
        };
        let spelled = spelled_texts(value);
        for round in 0..400 {
            let mut text = Vec::new();
            while text.len() < 300 {
                match next(6) {
                    0 => text.extend_from_slice(&spelled[next(spelled.len())]),
                    1 => {
                        let from = next(value.len());
                        text.extend_from_slice(&value[from..]);
                    }
                    2 => text
                        .extend_from_slice(format!("%{:02X}", value[next(value.len())]).as_bytes()),
                    3 => text.extend_from_slice(b"&#x25;\\u0026+%25&amp;"),
                    4 => text.extend((0..next(20)).map(|_| b"xAb+/=%&;#"[next(10)])),
                    _ => text.extend((0..next(40)).map(|_| next(256) as u8)),
                }
            }
            let want = everywhere(&p, &text);
            let cuts: Vec<usize> = {
                let mut c: Vec<usize> = (0..next(6)).map(|_| next(text.len())).collect();
                c.sort_unstable();
                c
            };
            assert_eq!(
                in_pieces(&p, &text, &cuts),
                want,
                "round {round}: {}",
                String::from_utf8_lossy(&text)
            );
        }
    }

    #[test]
    fn without_patterns_a_stream_passes_unchanged() {
        let p = Arc::new(Patterns::new(Vec::new()));
        assert_eq!(
            in_pieces(&p, b"any bytes at all", &[3, 9]).unwrap(),
            b"any bytes at all"
        );
        let empty = scrub_set(&test_secrets(""));
        assert_eq!(in_pieces(&empty, b"abc", &[1]).unwrap(), b"abc");
    }

    #[test]
    fn a_pattern_split_across_chunks_is_still_replaced() {
        let p = pats(&[("PLACEHOLDER", Some("value"))]);
        let mut r = Rewriter::new(p.clone());
        let mut out = Vec::new();
        for chunk in [&b"abc PLACE"[..], b"HOLD", b"ER def PLA", b"CEHOLDER"] {
            out.extend(r.push(chunk).unwrap());
        }
        out.extend(r.finish().unwrap());
        assert_eq!(out, b"abc value def value");
        assert_eq!(r.replaced, [0]);
        let (whole, _) = Rewriter::all(p, b"no match here, PLACEHOLDE").unwrap();
        assert_eq!(whole, b"no match here, PLACEHOLDE");
    }

    #[test]
    fn a_blocked_pattern_stops_the_stream() {
        let p = pats(&[("ok", Some("OK")), ("leak-value", None)]);
        let mut r = Rewriter::new(p);
        assert!(r.push(b"ok then leak-").is_ok());
        let e = r.push(b"value!").unwrap_err();
        assert_eq!(e.secret, 1);
    }
}
