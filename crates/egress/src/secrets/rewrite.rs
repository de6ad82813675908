//! Rewriting: where a secret's value is put in and taken out.
//!
//! This module owns the patterns (a secret's placeholder and the real value
//! in the spellings a request or an echoing server may use: raw, percent
//! encoded, base64 at each alignment, JSON escapes, hexadecimal), the
//! patterns for requests to one host (substitute its own secrets, block
//! other secrets' placeholders and every real value) and for responses
//! (scrub real values back to placeholders), and the [`Rewriter`] that
//! applies them to a stream, holding back as many bytes as the longest
//! pattern could still need, alone or as a streaming body. It never sends
//! or records anything: what a match means is the session's to say.

use super::scan::{Cores, Scan};
use super::{b64, spelled};
use super::{zero, BoxError, OutBody, Secret};
use base64::Engine;
use bytes::Bytes;
use hyper::body::{Body, Frame};
use std::collections::VecDeque;
use std::ops::Range;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

/// Encoded forms of a value shorter than this are not looked for: too
/// likely to occur by chance.
const MIN_FORM: usize = 8;

/// Patterns for requests to `name:port`, in priority order.
pub(super) fn outgoing(secrets: &[Secret], name: &str, port: u16, place: Place) -> Vec<Pattern> {
    let mut out = Vec::new();
    for (i, s) in secrets.iter().enumerate() {
        let own = s.covers(name, port);
        if own {
            let replacement = match place {
                Place::Header => Some(s.value.clone()),
                Place::Target => Some(percent_encode(&s.value)),
                Place::Body if s.in_bodies => Some(s.value.clone()),
                Place::Body => None,
            };
            if let Some(to) = replacement {
                out.push(Pattern::exact(
                    s.placeholder.as_bytes().to_vec(),
                    Action::Replace(to),
                    i,
                ));
            }
        } else {
            for from in std::iter::once(s.placeholder.as_bytes().to_vec())
                .chain(base64_forms(s.placeholder.as_bytes()))
            {
                out.push(Pattern::exact(
                    from,
                    Action::Block(Violation::Placeholder),
                    i,
                ));
            }
        }
        out.extend(value_forms(&s.value, Action::Block(Violation::Value), i));
    }
    out
}

/// Patterns that turn real values in responses back into placeholders.
pub(super) fn scrub_patterns(secrets: &[Secret]) -> Vec<Pattern> {
    let mut out = Vec::new();
    for (i, s) in secrets.iter().enumerate() {
        if s.value.is_empty() {
            continue;
        }
        let p = s.placeholder.as_bytes();
        if s.value.len() < 6 {
            // Too short to look for in its spellings: only as it is.
            out.push(Pattern::exact(
                s.value.clone(),
                Action::Replace(p.to_vec()),
                i,
            ));
        }
        out.extend(value_forms(&s.value, Action::Replace(p.to_vec()), i));
        // Base64 at each alignment becomes the placeholder's base64, the
        // text around it still valid base64 of the same data.
        let to = b64::congruent(p, s.value.len());
        for f in b64::forms(&s.value, MIN_FORM) {
            out.push(Pattern {
                from: s.value.clone(),
                kind: Kind::Base64(Box::new(f)),
                action: Action::Replace(to.clone()),
                secret: i,
            });
        }
    }
    out
}

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
            Kind::Spelled => self.from.len() * spelled::LONGEST,
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

/// Every byte but the unreserved ones (RFC 3986) as `%XX`.
fn percent_encode(v: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(v.len());
    for &b in v {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b);
        } else {
            out.extend_from_slice(format!("%{b:02X}").as_bytes());
        }
    }
    out
}

/// The part of `v`'s base64 encoding that does not depend on the bytes
/// around it, for each of the three alignments `v` can have in a longer
/// encoded string (as in `Basic base64(user:value)`), in the standard
/// and the URL-safe alphabets.
fn base64_forms(v: &[u8]) -> Vec<Vec<u8>> {
    base64_pairs(v, v).into_iter().map(|(f, _)| f).collect()
}

/// [`base64_forms`] of `from`, each with the same form of `to`.
fn base64_pairs(from: &[u8], to: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut out = Vec::new();
    let middle = |engine: &base64::engine::GeneralPurpose, v: &[u8], k: usize| {
        let mut data = vec![0u8; k];
        data.extend_from_slice(v);
        let enc = engine.encode(&data).into_bytes();
        let start = (8 * k).div_ceil(6);
        let end = (8 * (k + v.len()) / 6).min(enc.len());
        enc.get(start..end).map(<[u8]>::to_vec).unwrap_or_default()
    };
    for engine in [
        &base64::engine::general_purpose::STANDARD,
        &base64::engine::general_purpose::URL_SAFE,
    ] {
        for k in 0..3 {
            let f = middle(engine, from, k);
            if f.len() >= MIN_FORM && !out.iter().any(|(o, _)| *o == f) {
                out.push((f, middle(engine, to, k)));
            }
        }
    }
    out
}

/// A real value as it may appear in a request or a response, and what
/// is done where it does: in any common text spelling (raw, percent,
/// JSON, HTML, either case), in hexadecimal (either case), and in base64
/// (standard or URL-safe, padded or not, at each alignment; for a block:
/// a replacement keeps its own base64 pairs, see [`base64_pairs`]).
fn value_forms(v: &[u8], action: Action, secret: usize) -> Vec<Pattern> {
    if v.len() < 6 {
        return Vec::new();
    }
    let mut out = vec![Pattern::spelled(v.to_vec(), action.clone(), secret)];
    let hex: String = v.iter().map(|b| format!("{b:02x}")).collect();
    out.push(Pattern::spelled(hex.into_bytes(), action.clone(), secret));
    if matches!(action, Action::Block(_)) {
        for from in base64_forms(v) {
            out.push(Pattern::exact(from, action.clone(), secret));
        }
    }
    out
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
        Patterns {
            cores: Cores::new(&cores),
            second: list.iter().map(Pattern::second).collect(),
            longest: list.iter().map(Pattern::longest).max().unwrap_or(0),
            by_first,
            list,
        }
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
                if want != got {
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
}

impl Rewriter {
    pub(super) fn new(patterns: Arc<Patterns>) -> Rewriter {
        Rewriter {
            scan: patterns.cores.as_ref().map(Scan::new),
            patterns,
            pending: Vec::new(),
            base: 0,
            hot: VecDeque::new(),
            replaced: Vec::new(),
        }
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

    fn push(&mut self, data: &[u8]) -> Result<Vec<u8>, Blocked> {
        self.pending.extend_from_slice(data);
        self.run(false)
    }

    fn finish(&mut self) -> Result<Vec<u8>, Blocked> {
        self.run(true)
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

/// Told once which secrets a body had replaced.
type OnReplace = Box<dyn FnOnce(&[usize]) + Send + Sync>;
/// Told what stopped a body.
type OnBlock = Box<dyn FnOnce(Blocked) + Send + Sync>;

/// The most bytes a body rewrites for one unit of tokio's task budget: a
/// task that scrubs a long body gives its thread back to the runtime after
/// at most 128 such slices, so others on the same runtime get their turn.
const SLICE: usize = 16 << 10;

/// A body passed through a [`Rewriter`]; a blocked pattern ends it with an
/// error (the request or response is cut off), reported through `on_block`.
pub(super) struct RewriteBody {
    inner: OutBody,
    rw: Rewriter,
    /// Data read from `inner` and not yet rewritten.
    rest: Bytes,
    done: bool,
    trailers: Option<Frame<Bytes>>,
    /// Trailers are dropped (a request's: they are not looked into).
    drop_trailers: bool,
    on_replace: Option<OnReplace>,
    on_block: Option<OnBlock>,
}

impl RewriteBody {
    /// `inner` rewritten by `patterns`; `on_replace` is told once which
    /// secrets were replaced, `on_block` what stopped the body; trailers
    /// are dropped when `drop_trailers`, else rewritten as headers are.
    pub(super) fn new(
        inner: OutBody,
        patterns: Arc<Patterns>,
        drop_trailers: bool,
        on_replace: Option<OnReplace>,
        on_block: Option<OnBlock>,
    ) -> RewriteBody {
        RewriteBody {
            inner,
            rw: Rewriter::new(patterns),
            rest: Bytes::new(),
            done: false,
            trailers: None,
            drop_trailers,
            on_replace,
            on_block,
        }
    }
}

impl Body for RewriteBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        loop {
            if this.done {
                return Poll::Ready(this.trailers.take().map(Ok));
            }
            // Each slice costs a unit of the task's budget; without one
            // left, the task yields (and is woken to go on).
            let coop = std::task::ready!(tokio::task::coop::poll_proceed(cx));
            if this.rw.patterns.list.is_empty() && this.rest.is_empty() {
                // Nothing to look for (a name with request rules and no
                // secret): each frame of data goes on as it came, not
                // copied twice through the rewriter.
                let frame = match std::task::ready!(Pin::new(&mut this.inner).poll_frame(cx)) {
                    Some(Ok(frame)) => frame,
                    Some(Err(e)) => return Poll::Ready(Some(Err(e))),
                    None => {
                        this.done = true;
                        continue;
                    }
                };
                coop.made_progress();
                match frame.into_data() {
                    Ok(data) if data.is_empty() => continue,
                    Ok(data) => return Poll::Ready(Some(Ok(Frame::data(data)))),
                    Err(other) => {
                        this.done = true;
                        this.trailers = if this.drop_trailers {
                            None
                        } else {
                            other.into_trailers().ok().map(Frame::trailers)
                        };
                        continue;
                    }
                }
            }
            let step = if !this.rest.is_empty() {
                // (`inner` is read only once `rest` is empty, so the body
                // cannot have ended while data is left here.)
                let piece = this.rest.split_to(this.rest.len().min(SLICE));
                this.rw.push(&piece)
            } else {
                match Pin::new(&mut this.inner).poll_frame(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e))),
                    Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                        Ok(data) => {
                            this.rest = data;
                            continue;
                        }
                        Err(other) => {
                            this.done = true;
                            // Trailers pass through the same patterns as the
                            // body (an echoing server may put the value there);
                            // a value that would be blocked is left out.
                            this.trailers = if this.drop_trailers {
                                None
                            } else {
                                other.into_trailers().ok().map(|t| {
                                    let (map, replaced) =
                                        rewrite_headers(&this.rw.patterns, &t, &[]);
                                    this.rw.replaced.extend(replaced);
                                    Frame::trailers(map)
                                })
                            };
                            this.rw.finish()
                        }
                    },
                    Poll::Ready(None) => {
                        this.done = true;
                        this.rw.finish()
                    }
                }
            };
            coop.made_progress();
            match step {
                Err(b) => {
                    this.done = true;
                    this.rest = Bytes::new();
                    this.trailers = None;
                    if let Some(f) = this.on_block.take() {
                        f(b);
                    }
                    return Poll::Ready(Some(Err("warden: blocked a secret in the body".into())));
                }
                Ok(out) => {
                    if !this.rw.replaced.is_empty() {
                        if let Some(f) = this.on_replace.take() {
                            f(&this.rw.replaced);
                        }
                    }
                    if !out.is_empty() {
                        return Poll::Ready(Some(Ok(Frame::data(Bytes::from(out)))));
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::secrets::Secret;

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
        for (what, text) in [
            ("base64 text", &b64),
            ("prose", &prose),
            ("'x' text", &xs),
            ("random bytes", &random),
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

    #[test]
    fn base64_forms_find_a_value_inside_basic_credentials() {
        let engine = &base64::engine::general_purpose::STANDARD;
        let value = b"s3cr3t-token-value";
        for user in ["u", "us", "use", "someone"] {
            let mut plain = format!("{user}:").into_bytes();
            plain.extend_from_slice(value);
            let encoded = engine.encode(&plain);
            assert!(
                base64_forms(value)
                    .iter()
                    .any(|f| find(encoded.as_bytes(), f).is_some()),
                "{user}"
            );
        }
        // Scrubbed to the placeholder's form at the same alignment: the
        // decoded echo holds the placeholder where the value was.
        let placeholder = b"warden-secret-00112233445566778899aabbccddeeff";
        let mut plain = b"me:".to_vec();
        plain.extend_from_slice(value);
        let encoded = engine.encode(&plain);
        let pairs: Vec<Pattern> = base64_pairs(value, placeholder)
            .into_iter()
            .map(|(from, to)| Pattern::exact(from, Action::Replace(to), 0))
            .collect();
        let (out, _) = Rewriter::all(Arc::new(Patterns::new(pairs)), encoded.as_bytes()).unwrap();
        assert!(base64_forms(value).iter().all(|f| find(&out, f).is_none()));
        let decoded = engine
            .decode(&out)
            .unwrap_or_else(|_| engine.decode(&out[..out.len() / 4 * 4]).unwrap_or_default());
        assert!(
            String::from_utf8_lossy(&decoded).contains("secret-00112233"),
            "{out:?}"
        );
    }
}
