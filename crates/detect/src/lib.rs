//! Credential-shaped strings in what an agent produces: the rule table
//! ([`RULES`]), a scan that reports findings ([`scan`]), and redaction
//! ([`redact`], [`redact_argv`]) for what warden itself records.
//!
//! A [`Finding`] holds its rule, where the value stands and a hash of it,
//! never the value: it can go into an audit log, an API answer or an
//! event without carrying the credential along. The sandbox's own secret
//! placeholders (`warden-secret-` and 32 hex digits, what the egress proxy
//! substitutes) are never findings: they are what an agent is meant to
//! use.
//!
//! Pure: no I/O, no printing. The front doors and the recorders decide
//! what a finding means (a flag on a review, a refusal, a redaction).

#![forbid(unsafe_code)]
#![cfg_attr(not(test), deny(clippy::print_stdout, clippy::print_stderr))]

mod argv;
mod engine;
mod rules;

pub use rules::{Rule, RULES};

use regex::bytes::Regex;
use rules::Check;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::borrow::Cow;
use std::sync::LazyLock;

/// What every secret placeholder of the egress proxy starts with
/// (`warden_egress::secrets::PLACEHOLDER_PREFIX`); followed by 32
/// hexadecimal digits.
pub const PLACEHOLDER_PREFIX: &str = "warden-secret-";

/// Bytes scanned at once by [`Scanner`]; a file is read in pieces of this
/// size that overlap by [`OVERLAP`].
pub const CHUNK: usize = 1 << 20;
/// How far two pieces overlap: longer than any value a rule matches but a
/// private key block, whose body fits too (an RSA 8192 key is ~6.4 KiB).
pub const OVERLAP: usize = 16 << 10;

/// One credential-shaped value: its rule, where it stands and its hash.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Finding {
    /// The rule's id ([`Rule::id`]).
    pub rule: String,
    /// Byte offset of the value in what was scanned.
    pub offset: u64,
    /// Its length in bytes.
    pub len: u64,
    /// The line it starts on, from 1.
    pub line: u64,
    /// The first 16 hex digits of the SHA-256 of the value: the same value
    /// found twice has the same hash, and the hash does not give the value
    /// back (for values of a credential's entropy).
    pub hash: String,
}

impl Finding {
    /// The rule this finding was made by.
    pub fn rule(&self) -> Option<&'static Rule> {
        rule(&self.rule)
    }
}

/// The rule with id `id`.
pub fn rule(id: &str) -> Option<&'static Rule> {
    RULES.iter().find(|r| r.id == id)
}

static PLACEHOLDER: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"(?-u)warden-secret-[0-9a-f]{32}").ok());

/// Every credential-shaped value in `bytes`, in order of position.
/// Overlapping matches keep the earlier rule's (the more specific).
pub fn scan(bytes: &[u8]) -> Vec<Finding> {
    // Spans come in order of position: lines are counted once, onwards.
    let (mut at, mut line) = (0, 1);
    spans(bytes)
        .into_iter()
        .map(|s| {
            line += newlines(&bytes[at..s.start]);
            at = s.start;
            finding(bytes, &s, line)
        })
        .collect()
}

fn newlines(bytes: &[u8]) -> u64 {
    bytes.iter().filter(|&&b| b == b'\n').count() as u64
}

/// A value's span and its rule.
struct Span {
    rule: usize,
    start: usize,
    end: usize,
}

fn finding(bytes: &[u8], s: &Span, line: u64) -> Finding {
    Finding {
        rule: RULES[s.rule].id.to_string(),
        offset: s.start as u64,
        len: (s.end - s.start) as u64,
        line,
        hash: hash(&bytes[s.start..s.end]),
    }
}

/// The hash a finding carries for `value`.
pub fn hash(value: &[u8]) -> String {
    Sha256::digest(value)
        .iter()
        .take(8)
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn spans(bytes: &[u8]) -> Vec<Span> {
    let candidates = engine::rules_for(bytes);
    let mut out: Vec<Span> = Vec::new();
    // In the table's order: where two values overlap, the earlier rule's
    // is kept.
    for (i, rule) in RULES.iter().enumerate() {
        if !candidates.contains(i) {
            continue;
        }
        let Some(expression) = engine::expression(i) else {
            continue;
        };
        for caps in expression.captures_iter(bytes) {
            let Some(m) = caps.get(rule.value) else {
                continue;
            };
            let value = m.as_bytes();
            if !passes(rule.check, value) || placeholder(value) {
                continue;
            }
            let (start, end) = (m.start(), m.end());
            if out.iter().any(|s| s.start < end && start < s.end) {
                continue;
            }
            out.push(Span {
                rule: i,
                start,
                end,
            });
        }
    }
    out.sort_by_key(|s| s.start);
    out
}

/// Whether `value` is, or is made of, a sandbox's secret placeholder.
fn placeholder(value: &[u8]) -> bool {
    PLACEHOLDER
        .as_ref()
        .is_some_and(|p| p.find(value).is_some())
}

fn passes(check: Check, value: &[u8]) -> bool {
    match check {
        Check::Shape => true,
        Check::Entropy(min) => entropy(value) >= min,
        Check::Assignment(min) => {
            value.iter().any(u8::is_ascii_digit)
                && value.iter().any(u8::is_ascii_alphabetic)
                && entropy(value) >= min
        }
    }
}

/// Shannon entropy of `bytes`, in bits per byte.
pub fn entropy(bytes: &[u8]) -> f64 {
    if bytes.is_empty() {
        return 0.0;
    }
    let mut counts = [0u32; 256];
    for &b in bytes {
        counts[usize::from(b)] += 1;
    }
    let n = bytes.len() as f64;
    counts
        .iter()
        .filter(|&&c| c > 0)
        .map(|&c| {
            let p = f64::from(c) / n;
            -p * p.log2()
        })
        .sum()
}

/// What stands in for a value of rule `id`.
pub fn mark(id: &str) -> String {
    format!("[REDACTED:{id}]")
}

/// `text` with every credential-shaped value replaced by
/// `[REDACTED:rule]`. Idempotent: a mark is no finding.
pub fn redact(text: &str) -> Cow<'_, str> {
    let found = spans(text.as_bytes());
    if found.is_empty() {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for s in found {
        // Spans are found on bytes with ASCII patterns; a value that would
        // cut a character in two is widened to whole characters.
        let start = floor_char(text, s.start);
        let end = ceil_char(text, s.end);
        if start < at {
            continue;
        }
        out.push_str(&text[at..start]);
        out.push_str(&mark(RULES[s.rule].id));
        at = end;
    }
    out.push_str(&text[at..]);
    Cow::Owned(out)
}

fn floor_char(s: &str, mut i: usize) -> usize {
    while i > 0 && !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

fn ceil_char(s: &str, mut i: usize) -> usize {
    while i < s.len() && !s.is_char_boundary(i) {
        i += 1;
    }
    i
}

/// A command line as warden records it: each argument [`redact`]ed, and
/// what the command line hands a secret through replaced whatever it
/// looks like: an option naming a secret (`--password X`,
/// `--db-password=X`), a secret-named assignment (`PGPASSWORD=x`), the
/// short forms of well-known tools (`curl -u user:pw`, `mysql -pPW`), in
/// the argv and in the words of a shell string (`bash -l -c "..."`).
/// Idempotent.
pub fn redact_argv(argv: &[String]) -> Vec<String> {
    argv::redact_argv(argv)
}

/// An environment as warden records it: a variable whose name says
/// secret has its value replaced whatever it looks like; the others are
/// [`redact`]ed.
pub fn redact_env(name: &str, value: &str) -> String {
    if argv::secret_name(name) && !value.is_empty() && !placeholder(value.as_bytes()) {
        return mark("secret-variable");
    }
    redact(value).into_owned()
}

/// A scan over a stream read in pieces: each piece is scanned with the
/// end of the one before it, so a value that straddles two pieces is
/// found once, at its offset in the whole stream.
#[derive(Default)]
pub struct Scanner {
    /// The bytes not yet judged (the last [`OVERLAP`] seen), and where
    /// they start in the stream.
    tail: Vec<u8>,
    tail_at: u64,
    /// Lines before the tail.
    tail_lines: u64,
    found: Vec<Finding>,
}

impl Scanner {
    pub fn new() -> Scanner {
        Scanner::default()
    }

    /// Scan the next piece of the stream. What starts in its last
    /// [`OVERLAP`] bytes is left for the next piece (or [`Scanner::finish`]),
    /// which sees it whole.
    pub fn feed(&mut self, piece: &[u8]) {
        let mut window = std::mem::take(&mut self.tail);
        window.extend_from_slice(piece);
        let cut = window.len().saturating_sub(OVERLAP);
        self.record(&window, cut);
        self.tail_lines += newlines(&window[..cut]);
        self.tail = window.split_off(cut);
        self.tail_at += cut as u64;
    }

    /// What was found, in order of position.
    pub fn finish(mut self) -> Vec<Finding> {
        let window = std::mem::take(&mut self.tail);
        self.record(&window, window.len());
        self.found.sort_by_key(|f| f.offset);
        self.found
    }

    /// Keep the findings of `window` that start before `cut`.
    fn record(&mut self, window: &[u8], cut: usize) {
        for mut f in scan(window) {
            if f.offset >= cut as u64 {
                continue;
            }
            f.offset += self.tail_at;
            f.line += self.tail_lines;
            // The rest of a value recorded from the piece before.
            let inside = self
                .found
                .iter()
                .any(|g| g.offset <= f.offset && f.offset < g.offset + g.len);
            if !inside {
                self.found.push(f);
            }
        }
    }
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_argv;
