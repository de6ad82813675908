//! The `hidden-text` flag: a change whose name holds characters drawn as
//! nothing or not as themselves (controls, bidi overrides and isolates,
//! zero-width characters: [`crate::change::is_format`]), or whose content
//! added bidi controls. Every door shows such characters escaped; the
//! flag says why the escapes are there, and makes a commit of the file
//! ask first. A bidi control in source code makes a line read as other
//! logic than it runs ("Trojan Source", CVE-2021-42574): `if access !=
//! "user\u{202e} \u{2066}// admin only\u{2069} \u{2066}"` reads as a
//! comparison with `"user"` followed by a comment.

use crate::change::{is_format, Change, ChangeKind, Entry, EntryKind, Flag};
use crate::credentials::{Side, SCAN_LIMIT};
use std::io::{self, Read};
use std::path::Path;

/// The flag's rule.
pub(crate) const RULE: &str = "hidden-text";

/// The `hidden-text` flag of change `c`, if its name (or the name it was
/// renamed from) holds a control or format character, or its content
/// holds more of some bidi control than the real workspace's file did. `open`
/// opens a file of either tree beneath it, as `crate::credentials::flag`
/// takes it; each file is read no further than the size the diff
/// recorded, and no further than [`SCAN_LIMIT`].
pub(crate) fn flag<R: Read>(
    c: &Change,
    open: impl Fn(Side, &Path) -> io::Result<R>,
) -> io::Result<Option<Flag>> {
    if c.paths().any(odd_name) {
        return Ok(Some(Flag {
            rule: RULE,
            reason: "its name holds a control, bidi or invisible character (shown escaped): it can read as another name".to_string(),
            findings: Vec::new(),
        }));
    }
    let file = |e: &Option<Entry>| {
        e.as_ref()
            .filter(|e| e.kind == EntryKind::File)
            .map(|e| e.size)
    };
    let Some(new_size) = file(&c.new) else {
        return Ok(None);
    };
    if matches!(c.kind, ChangeKind::Renamed | ChangeKind::Mode) {
        return Ok(None);
    }
    let new = bidi_controls(open(Side::Layer, &c.path)?.take(new_size.min(SCAN_LIMIT)))?;
    if new.iter().all(|&n| n == 0) {
        return Ok(None);
    }
    let old = match file(&c.old) {
        Some(old_size) => {
            let old_path = c.from.as_deref().unwrap_or(&c.path);
            bidi_controls(open(Side::Real, old_path)?.take(old_size.min(SCAN_LIMIT)))?
        }
        None => [0; KINDS],
    };
    // Each control counted apart: marks the file held (U+200F in a
    // Hebrew string) traded for as many overrides is still an addition.
    if new.iter().zip(&old).all(|(n, o)| n <= o) {
        return Ok(None);
    }
    let new: usize = new.iter().sum();
    Ok(Some(Flag {
        rule: RULE,
        reason: format!(
            "bidi controls were added ({new} in all, shown escaped): a line can read as other logic than it runs (Trojan Source, CVE-2021-42574)"
        ),
        findings: Vec::new(),
    }))
}

fn odd_name(path: &Path) -> bool {
    path.to_string_lossy()
        .chars()
        .any(|c| c.is_control() || is_format(c))
}

/// The bidi controls counted, each apart: U+061C, U+200E, U+200F,
/// U+202A-U+202E, U+2066-U+2069.
const KINDS: usize = 12;

/// How many of each bidi control (see [`KINDS`]) a file's UTF-8 holds,
/// read in pieces (a character split between two reads is counted).
fn bidi_controls(mut f: impl Read) -> io::Result<[usize; KINDS]> {
    let mut buf = vec![0u8; 64 << 10];
    let (mut p2, mut p1) = (0u8, 0u8);
    let mut n = [0; KINDS];
    loop {
        let got = f.read(&mut buf)?;
        if got == 0 {
            return Ok(n);
        }
        for &b in &buf[..got] {
            let kind = match (p2, p1, b) {
                (_, 0xd8, 0x9c) => Some(0),
                (0xe2, 0x80, 0x8e) => Some(1),
                (0xe2, 0x80, 0x8f) => Some(2),
                (0xe2, 0x80, c @ 0xaa..=0xae) => Some(3 + usize::from(c - 0xaa)),
                (0xe2, 0x81, c @ 0xa6..=0xa9) => Some(8 + usize::from(c - 0xa6)),
                _ => None,
            };
            if let Some(k) = kind {
                n[k] += 1;
            }
            (p2, p1) = (p1, b);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bidi_controls_are_counted_across_reads_and_other_text_is_not() {
        struct Bytewise<'a>(&'a [u8]);
        impl Read for Bytewise<'_> {
            fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
                let Some((first, rest)) = self.0.split_first() else {
                    return Ok(0);
                };
                buf[0] = *first;
                self.0 = rest;
                Ok(1)
            }
        }
        let text = "if a != \"user\u{202e} \u{2066}# admin\u{2069} \u{2066}\": \u{200f}\u{61c}";
        let sum = |n: [usize; KINDS]| n.iter().sum::<usize>();
        assert_eq!(sum(bidi_controls(text.as_bytes()).unwrap()), 6);
        assert_eq!(
            bidi_controls(Bytewise(text.as_bytes())).unwrap(),
            bidi_controls(text.as_bytes()).unwrap()
        );
        assert_eq!(
            sum(bidi_controls("plain → “quoted” ‘text’ … ‰".as_bytes()).unwrap()),
            0
        );
        // Each control is its own count: four marks are not four overrides.
        let marks = bidi_controls("\u{200f}\u{200f}\u{200f}\u{200f}".as_bytes()).unwrap();
        let overrides = bidi_controls("\u{202e}\u{2066}\u{2069}\u{2066}".as_bytes()).unwrap();
        assert_eq!(sum(marks), sum(overrides));
        assert!(overrides.iter().zip(&marks).any(|(n, o)| n > o));
        assert!(odd_name(Path::new("notes\u{202e}txt.sh")));
        assert!(odd_name(Path::new("new\nadded")));
        assert!(odd_name(Path::new("zero\u{200b}width")));
        assert!(!odd_name(Path::new("src/main.rs")));
    }
}
