//! A value inside base64, replaced so that the text stays valid base64:
//! at each of the three alignments a value can have in the encoded data,
//! the characters wholly made of the value's bits are matched exactly and
//! the characters at its edges (which share bits with the bytes around
//! it) by the value's bits alone; the replacement keeps the neighbours'
//! bits and has a length congruent to the value's modulo 3, so everything
//! after it, padding included, is still the same data at the same
//! alignment.
//!
//! Base64 wrapped into lines (MIME at 76 characters, PEM and GitHub's
//! contents API at 60 or 64, any column, indented inside YAML or JSON,
//! blank lines between blocks) is the same data: a gap of blank space
//! between two characters (any run of `\r`, `\n`, spaces and tabs, and
//! of JSON's escaped `\n`, `\r`, `\t` in a string) is read past, and
//! kept where it stood in the replacement, so a server that wraps what it
//! echoes does not hand the value back across a break. The gaps of one
//! occurrence take at most [`gap_budget`] bytes together, so that an
//! occurrence has a bounded length and the scrub stays linear.

use super::zero;
use base64::Engine;

/// The bytes of blank space the gaps of one occurrence of `chars`
/// characters may take together: a line break as wide as JSON's escaped
/// `\r\n` and four spaces of indentation between any two characters,
/// and never less than 256 (a few lines of deep indentation).
pub(super) fn gap_budget(chars: usize) -> usize {
    (8 * chars.saturating_sub(1)).max(256)
}

/// The length of the blank space at the start of `text` (0 where there is
/// none), read no further than `most` bytes: a byte of it that would go
/// past is left unread, and the base64 character expected there is not
/// found.
pub(super) fn gap(text: &[u8], most: usize) -> usize {
    let mut n = 0;
    loop {
        let step = match &text[n..] {
            [b'\r' | b'\n' | b' ' | b'\t', ..] => 1,
            [b'\\', b'r' | b'n' | b't', ..] => 2,
            _ => return n,
        };
        if n + step > most {
            return n;
        }
        n += step;
    }
}

const STANDARD: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
const URL_SAFE: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// One alignment of one value in one alphabet.
#[derive(Clone)]
pub(super) struct Form {
    k: usize,
    url: bool,
    /// The characters made of the value's bits only.
    pub(super) middle: Vec<u8>,
    /// The value's bits in the leading and trailing shared characters:
    /// (mask, bits).
    lead: Option<(u8, u8)>,
    trail: Option<(u8, u8)>,
}

impl std::fmt::Debug for Form {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Form")
            .field("k", &self.k)
            .finish_non_exhaustive()
    }
}

impl Drop for Form {
    fn drop(&mut self) {
        zero(&mut self.middle);
        self.lead = None;
        self.trail = None;
    }
}

fn alphabet(url: bool) -> &'static [u8; 64] {
    if url {
        URL_SAFE
    } else {
        STANDARD
    }
}

/// Each byte's place in an alphabet (64: not in it), computed once: the
/// scrubber asks for every byte of every body it reads.
const fn table(alphabet: &[u8; 64]) -> [u8; 256] {
    let mut t = [64u8; 256];
    let mut i = 0;
    while i < 64 {
        t[alphabet[i] as usize] = i as u8;
        i += 1;
    }
    t
}

const STANDARD_INDEX: [u8; 256] = table(STANDARD);
const URL_SAFE_INDEX: [u8; 256] = table(URL_SAFE);

fn index(c: u8, url: bool) -> Option<u8> {
    let i = if url {
        URL_SAFE_INDEX[c as usize]
    } else {
        STANDARD_INDEX[c as usize]
    };
    (i < 64).then_some(i)
}

/// `[0; k] ++ v` encoded, without padding, as 6-bit indices.
fn sextets(v: &[u8], k: usize) -> Vec<u8> {
    let mut data = vec![0u8; k];
    data.extend_from_slice(v);
    let enc = base64::engine::general_purpose::STANDARD_NO_PAD.encode(&data);
    zero(&mut data);
    enc.bytes().filter_map(|c| index(c, false)).collect()
}

impl Form {
    fn new(v: &[u8], k: usize, url: bool) -> Form {
        let s = sextets(v, k);
        let start = (8 * k).div_ceil(6);
        let end = 8 * (k + v.len()) / 6;
        let a = alphabet(url);
        let middle = s
            .get(start..end)
            .unwrap_or_default()
            .iter()
            .map(|&i| a[i as usize])
            .collect();
        // The lead character holds 4 (k = 1) or 2 (k = 2) of the value's
        // first bits at its low end; the trail one 2 (r = 1) or 4 (r = 2)
        // of its last bits at its high end.
        let lead = match k {
            1 => Some(0x0f),
            2 => Some(0x03),
            _ => None,
        }
        .and_then(|mask| s.get(start - 1).map(|&i| (mask, i & mask)));
        let trail = match (k + v.len()) % 3 {
            1 => Some(0x30),
            2 => Some(0x3c),
            _ => None,
        }
        .and_then(|mask| s.get(end).map(|&i| (mask, i & mask)));
        Form {
            k,
            url,
            middle,
            lead,
            trail,
        }
    }

    /// The characters of an occurrence.
    fn chars(&self) -> usize {
        self.middle.len() + usize::from(self.lead.is_some()) + usize::from(self.trail.is_some())
    }

    /// The most bytes an occurrence takes: its characters and the blank
    /// space between them.
    pub(super) fn len(&self) -> usize {
        let n = self.chars();
        n + gap_budget(n)
    }

    /// Bytes an occurrence may start with.
    pub(super) fn firsts(&self) -> Vec<u8> {
        match self.lead {
            Some((mask, bits)) => alphabet(self.url)
                .iter()
                .enumerate()
                .filter(|(i, _)| *i as u8 & mask == bits)
                .map(|(_, &c)| c)
                .collect(),
            None => self.middle.first().copied().into_iter().collect(),
        }
    }

    /// The byte an occurrence has second, which the middle fixes.
    pub(super) fn second(&self) -> Option<u8> {
        match self.lead {
            Some(_) => self.middle.first().copied(),
            None => self.middle.get(1).copied(),
        }
    }

    /// The length of an occurrence at the start of `text` (the blank
    /// space between its characters included).
    pub(super) fn at(&self, text: &[u8]) -> Option<usize> {
        let mut pos = 0;
        let mut first = true;
        let mut budget = gap_budget(self.chars());
        // The next character, past blank space unless it is the first.
        let mut next = |pos: &mut usize| -> Option<u8> {
            if !first {
                let n = gap(text.get(*pos..)?, budget);
                budget -= n;
                *pos += n;
            }
            first = false;
            let c = *text.get(*pos)?;
            *pos += 1;
            Some(c)
        };
        if let Some((mask, bits)) = self.lead {
            let i = index(next(&mut pos)?, self.url)?;
            if i & mask != bits {
                return None;
            }
        }
        for &want in &self.middle {
            if next(&mut pos)? != want {
                return None;
            }
        }
        if let Some((mask, bits)) = self.trail {
            let i = index(next(&mut pos)?, self.url)?;
            if i & mask != bits {
                return None;
            }
        }
        Some(pos)
    }

    /// What replaces `matched` (an occurrence): `to` (whose length is
    /// congruent to the value's modulo 3) at the same alignment, the
    /// neighbours' bits of the edge characters kept.
    /// The blank space an occurrence held stays before the same characters
    /// (that past the replacement's end, after it).
    pub(super) fn replace(&self, matched: &[u8], to: &[u8]) -> Vec<u8> {
        let mut chars = Vec::with_capacity(matched.len());
        let mut breaks: Vec<(usize, &[u8])> = Vec::new();
        let mut i = 0;
        while i < matched.len() {
            match gap(&matched[i..], usize::MAX) {
                n if n > 0 && i > 0 => {
                    breaks.push((chars.len(), &matched[i..i + n]));
                    i += n;
                }
                _ => {
                    chars.push(matched[i]);
                    i += 1;
                }
            }
        }
        let out = self.replace_chars(&chars, to);
        zero(&mut chars);
        if breaks.is_empty() {
            return out;
        }
        let mut wrapped =
            Vec::with_capacity(out.len() + breaks.iter().map(|(_, b)| b.len()).sum::<usize>());
        let mut from = 0;
        for (at, b) in breaks {
            let at = at.min(out.len());
            wrapped.extend_from_slice(&out[from..at]);
            wrapped.extend_from_slice(b);
            from = at;
        }
        wrapped.extend_from_slice(&out[from..]);
        wrapped
    }

    /// [`Form::replace`] of an occurrence without blank space.
    fn replace_chars(&self, matched: &[u8], to: &[u8]) -> Vec<u8> {
        let s = sextets(to, self.k);
        let start = (8 * self.k).div_ceil(6);
        let end = 8 * (self.k + to.len()) / 6;
        let a = alphabet(self.url);
        let mut out = Vec::with_capacity(end - start + 2);
        let mut pos = 0;
        if let Some((mask, _)) = self.lead {
            let kept = matched
                .first()
                .and_then(|&c| index(c, self.url))
                .unwrap_or(0)
                & !mask
                & 0x3f;
            let new = s.get(start - 1).copied().unwrap_or(0) & mask;
            out.push(a[(kept | new) as usize]);
            pos = 1;
        }
        out.extend(
            s.get(start..end)
                .unwrap_or_default()
                .iter()
                .map(|&i| a[i as usize]),
        );
        pos += self.middle.len();
        if let Some((mask, _)) = self.trail {
            let kept = matched
                .get(pos)
                .and_then(|&c| index(c, self.url))
                .unwrap_or(0)
                & !mask
                & 0x3f;
            let new = s.get(end).copied().unwrap_or(0) & mask;
            out.push(a[(kept | new) as usize]);
        }
        out
    }
}

/// The forms of `v` worth looking for (at least `min` characters of its
/// own bits), in both alphabets and at each alignment.
pub(super) fn forms(v: &[u8], min: usize) -> Vec<Form> {
    let mut out: Vec<Form> = Vec::new();
    for url in [false, true] {
        for k in 0..3 {
            let f = Form::new(v, k, url);
            // Both alphabets are kept even where the value's own
            // characters are the same in both: the characters at its edges
            // are read and written in the form's own alphabet, and the
            // URL-safe form matches where the standard one cannot.
            if f.middle.len() >= min {
                out.push(f);
            }
        }
    }
    out
}

/// `to`, padded with spaces to a length congruent to `n` modulo 3, so
/// that it can stand for `n` bytes inside base64 without moving what
/// follows.
pub(super) fn congruent(to: &[u8], n: usize) -> Vec<u8> {
    let mut out = to.to_vec();
    while out.len() % 3 != n % 3 {
        out.push(b' ');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replaced_value_leaves_valid_base64_of_the_replacement() {
        let value = b"sk/Live+tok:x=Q-0123";
        let to = congruent(
            b"warden-secret-00112233445566778899aabbccddeeff",
            value.len(),
        );
        for (engine, url) in [
            (&base64::engine::general_purpose::STANDARD, false),
            (&base64::engine::general_purpose::URL_SAFE, true),
        ] {
            for prefix in ["", "u:", "us:", "use:"] {
                for suffix in ["", "!", "!t", "!tail of the data"] {
                    let data = format!("{prefix}{}{suffix}", String::from_utf8_lossy(value));
                    let enc = engine.encode(&data).into_bytes();
                    let mut done = false;
                    for f in forms(value, 8).iter().filter(|f| f.url == url) {
                        for at in 0..enc.len() {
                            if let Some(n) = f.at(&enc[at..]) {
                                let mut out = enc[..at].to_vec();
                                out.extend(f.replace(&enc[at..at + n], &to));
                                out.extend_from_slice(&enc[at + n..]);
                                let decoded = engine.decode(&out).unwrap();
                                let want =
                                    format!("{prefix}{}{suffix}", String::from_utf8_lossy(&to));
                                assert_eq!(String::from_utf8_lossy(&decoded), want);
                                done = true;
                            }
                        }
                    }
                    assert!(done, "{data}");
                }
            }
        }
    }
}
