//! The one JSON writer of what warden prints or appends for people and
//! programs to read (`--json` of every command, `--json-events`, the
//! audit log): serde_json's own output, except that every character a
//! terminal may act on or that makes a line read otherwise than it is
//! ([`escaped`]: C0 and C1 controls, DEL, the line and paragraph
//! separators, direction overrides and the other format characters) is
//! written `\uXXXX`. serde_json escapes only C0 controls; a sandbox-chosen
//! path holding U+009B (CSI) or U+202E would otherwise reach a terminal
//! raw. The JSON means the same: a reader gets the same strings back.
//!
//! It never prints; callers write what it returns.

use serde::Serialize;
use serde_json::ser::{CompactFormatter, Formatter, PrettyFormatter};
use std::io::{self, Write};

/// Whether `c` is written as an escape: a control character (C0, DEL,
/// C1) or a format character ([`is_format`]). The same set
/// `warden_workspace::printable` escapes in a line.
pub fn escaped(c: char) -> bool {
    c.is_control() || is_format(c)
}

/// Unicode's format characters (general category Cf) and the other
/// characters drawn as nothing that a terminal may still act on: what
/// makes a line read otherwise than it is.
pub fn is_format(c: char) -> bool {
    matches!(
        u32::from(c),
        0xAD                       // soft hyphen
            | 0x34F                // combining grapheme joiner
            | 0x600..=0x605        // Arabic number signs
            | 0x61C                // Arabic letter mark
            | 0x6DD
            | 0x70F
            | 0x890..=0x891
            | 0x8E2
            | 0x115F..=0x1160      // Hangul fillers
            | 0x17B4..=0x17B5
            | 0x180B..=0x180F      // Mongolian selectors and vowel separator
            | 0x200B..=0x200F      // zero-width space, joiners, LRM, RLM
            | 0x2028..=0x202E      // line and paragraph separators, bidi embeddings and overrides
            | 0x2060..=0x206F      // word joiner, invisible operators, bidi isolates
            | 0x3164               // Hangul filler
            | 0xFE00..=0xFE0F      // variation selectors
            | 0xFEFF               // byte-order mark
            | 0xFFA0
            | 0xFFF0..=0xFFFB      // interlinear annotations
            | 0x110BD
            | 0x110CD
            | 0x13430..=0x1343F
            | 0x1BCA0..=0x1BCA3
            | 0x1D173..=0x1D17A
            | 0xE0000..=0xE0FFF    // tags and variation selectors supplement
    )
}

/// A formatter that writes string fragments with [`escaped`] characters
/// as `\uXXXX` (a surrogate pair above U+FFFF), everything else as the
/// inner formatter does.
struct Escaping<F>(F);

fn write_fragment<W: ?Sized + Write>(w: &mut W, fragment: &str) -> io::Result<()> {
    // Printable ASCII, most of what is written, as it is.
    if fragment.bytes().all(|b| (0x20..0x7f).contains(&b)) {
        return w.write_all(fragment.as_bytes());
    }
    let mut start = 0;
    for (at, c) in fragment.char_indices() {
        if !escaped(c) {
            continue;
        }
        w.write_all(&fragment.as_bytes()[start..at])?;
        let mut units = [0u16; 2];
        for u in c.encode_utf16(&mut units) {
            write!(w, "\\u{u:04X}")?;
        }
        start = at + c.len_utf8();
    }
    w.write_all(&fragment.as_bytes()[start..])
}

macro_rules! delegate {
    ($($name:ident($($arg:ident: $ty:ty),*);)*) => {
        $(
            #[inline]
            fn $name<W: ?Sized + Write>(&mut self, w: &mut W $(, $arg: $ty)*) -> io::Result<()> {
                self.0.$name(w $(, $arg)*)
            }
        )*
    };
}

impl<F: Formatter> Formatter for Escaping<F> {
    fn write_string_fragment<W: ?Sized + Write>(
        &mut self,
        w: &mut W,
        fragment: &str,
    ) -> io::Result<()> {
        write_fragment(w, fragment)
    }

    // The pretty formatter keeps state between these calls: each one is
    // handed on, so indentation stays its own.
    delegate! {
        begin_array();
        end_array();
        begin_array_value(first: bool);
        end_array_value();
        begin_object();
        end_object();
        begin_object_key(first: bool);
        end_object_key();
        begin_object_value();
        end_object_value();
    }
}

fn write_with<T: Serialize + ?Sized, F: Formatter>(value: &T, f: F) -> serde_json::Result<Vec<u8>> {
    let mut out = Vec::with_capacity(128);
    let mut ser = serde_json::Serializer::with_formatter(&mut out, Escaping(f));
    value.serialize(&mut ser)?;
    Ok(out)
}

/// `value` as one line of JSON (no newline), with [`escaped`] characters
/// as escapes.
pub fn to_vec<T: Serialize + ?Sized>(value: &T) -> serde_json::Result<Vec<u8>> {
    write_with(value, CompactFormatter)
}

/// `value` as one line of JSON (no newline), with [`escaped`] characters
/// as escapes.
pub fn to_string<T: Serialize + ?Sized>(value: &T) -> serde_json::Result<String> {
    to_vec(value).map(into_string)
}

/// `value` as indented JSON, with [`escaped`] characters as escapes.
pub fn to_string_pretty<T: Serialize + ?Sized>(value: &T) -> serde_json::Result<String> {
    write_with(value, PrettyFormatter::new()).map(into_string)
}

/// A line of JSON already written (an audit record an older warden wrote)
/// with every [`escaped`] character past the C0 controls written as an
/// escape. The same JSON: such a character can stand only inside a
/// string (JSON's whitespace is C0), where the escape means it.
pub fn escape_line(line: &str) -> std::borrow::Cow<'_, str> {
    if !line.chars().any(|c| u32::from(c) >= 0x7F && escaped(c)) {
        return line.into();
    }
    let mut out = Vec::with_capacity(line.len() + 16);
    let mut start = 0;
    for (at, c) in line.char_indices() {
        if u32::from(c) >= 0x7F && escaped(c) {
            out.extend_from_slice(&line.as_bytes()[start..at]);
            let mut units = [0u16; 2];
            for u in c.encode_utf16(&mut units) {
                out.extend_from_slice(format!("\\u{u:04X}").as_bytes());
            }
            start = at + c.len_utf8();
        }
    }
    out.extend_from_slice(&line.as_bytes()[start..]);
    into_string(out).into()
}

fn into_string(bytes: Vec<u8>) -> String {
    // The serializer writes UTF-8 (whole characters between escapes).
    String::from_utf8(bytes).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Strings a sandbox can choose, each with characters that must not
    /// reach a terminal raw.
    const HOSTILE: &[&str] = &[
        "/x\u{9b}31m",
        "a\u{202e}evil",
        "line\u{2028}sep\u{2029}",
        "del\u{7f}",
        "nul\u{0}esc\u{1b}[2J",
        "bom\u{feff}",
        "tag\u{e0041}",
        "nel\u{85}",
        "plain é 日本 🦀 \"quoted\" \\back",
    ];

    #[test]
    fn no_control_or_format_character_is_written_raw_and_the_json_means_the_same() {
        for s in HOSTILE {
            for text in [to_string(s).unwrap(), to_string_pretty(&[s]).unwrap()] {
                // The pretty form's own line breaks are its layout.
                assert!(!text.chars().any(|c| escaped(c) && c != '\n'), "{text:?}");
                let back: serde_json::Value = serde_json::from_str(&text).unwrap();
                let back = back
                    .as_str()
                    .or_else(|| back[0].as_str())
                    .unwrap()
                    .to_string();
                assert_eq!(back, *s);
            }
        }
    }

    #[test]
    fn ordinary_text_is_written_as_serde_json_writes_it() {
        let v = serde_json::json!({"a": ["b", 1, {"c": "é 日本 🦀"}], "d": null});
        assert_eq!(to_string(&v).unwrap(), serde_json::to_string(&v).unwrap());
        assert_eq!(
            to_string_pretty(&v).unwrap(),
            serde_json::to_string_pretty(&v).unwrap()
        );
    }

    #[test]
    fn a_line_written_raw_is_shown_escaped_and_means_the_same() {
        for s in HOSTILE {
            let raw = serde_json::to_string(&serde_json::json!({"detail": s})).unwrap();
            let shown = escape_line(&raw);
            assert!(!shown.chars().any(escaped), "{shown:?}");
            let back: serde_json::Value = serde_json::from_str(&shown).unwrap();
            assert_eq!(back["detail"], *s);
        }
        assert!(matches!(
            escape_line("{\"a\":\"b\"}"),
            std::borrow::Cow::Borrowed(_)
        ));
    }

    #[test]
    fn keys_are_escaped_as_values_are() {
        let mut m = std::collections::BTreeMap::new();
        m.insert("k\u{202e}", "v\u{9b}");
        let text = to_string(&m).unwrap();
        assert_eq!(text, "{\"k\\u202E\":\"v\\u009B\"}");
    }
}
