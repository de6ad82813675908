//! Edits of a profile file's text that keep the person's layout and
//! comments: one more entry of a list the answers of `--ask` are saved
//! into (an "always" saved into the profile in use): `egress.domains` for
//! a name, `process.allow_exec` for a program.
//!
//! The list is the field's, found by its row's profile key (a section and
//! a key in it). The edit is made on the text, next to where the list
//! already is, in its own style (one `- entry` line more in a block list,
//! `, entry` in a flow list), and then judged by what it means: the new
//! text is read again and must give the same entries plus the new one. An
//! edit that would mean anything else is refused, and the file is left as
//! it was.

use crate::fields::Field;
use crate::layer::{Origin, Val};
use crate::profile::At;
use crate::read::read_profile_text;

/// Why an entry could not be added to a profile's text.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum EditError {
    #[error("the profile does not read as a profile ({0}); fix it first")]
    Invalid(String),
    #[error(
        "the profile's `{section}` is written in a form warden does not edit ({why}); add the entry yourself"
    )]
    Unsupported {
        section: &'static str,
        why: &'static str,
    },
    #[error("adding the entry would change more than the `{0}` list; add it yourself")]
    Unsafe(&'static str),
    #[error("`{0}` is not a list in a section of a profile; warden does not add entries to it")]
    NotAList(&'static str),
}

/// `text` with `entry` added to `egress.domains`; `Ok(None)` when the list
/// has it already.
pub fn add_domain(text: &str, entry: &str) -> Result<Option<String>, EditError> {
    add_entry(text, Field::AllowDomain, entry)
}

/// The entries of `field`'s list in a profile's text, each where it is
/// written.
pub fn entries(text: &str, field: Field) -> Result<Vec<At<String>>, EditError> {
    let (read, errors) = read_profile_text(text);
    if let Some(e) = errors.into_iter().next() {
        return Err(EditError::Invalid(e.to_string()));
    }
    Ok(read
        .layer
        .list(field)
        .iter()
        .filter_map(|s| match (&s.val, &s.origin) {
            (Val::Text(t), Origin::File { pos, .. }) => Some(At {
                value: t.clone(),
                pos: *pos,
            }),
            _ => None,
        })
        .collect())
}

/// `text` with `entry` added to the list of `field` (a list of text, its
/// profile key a section and a key: `process.allow_exec`); `Ok(None)` when
/// the list has it already.
pub fn add_entry(text: &str, field: Field, entry: &str) -> Result<Option<String>, EditError> {
    let key = field.profile_key().unwrap_or_default();
    let place = match key.split_once('.') {
        Some((section, name))
            if field.shape() == crate::fields::Shape::List
                && field.kind() == crate::fields::Kind::Text
                && !name.contains(['.', '*']) =>
        {
            Place { key, section, name }
        }
        _ => return Err(EditError::NotAList(key)),
    };
    let before = entries(text, field)?;
    let old: Vec<String> = before.iter().map(|d| d.value.clone()).collect();
    if old.iter().any(|d| d == entry) {
        return Ok(None);
    }
    let quoted = yaml_quoted(entry, |_| false);
    let edited = match before.last().map(|d| d.pos) {
        Some(pos) => after_last(text, pos.line, pos.column, &quoted, &place)?,
        None => into_section(text, &quoted, &place)?,
    };
    // Judged by what it means, not by how it looks.
    let after = entries(&edited, field).map_err(|_| EditError::Unsafe(key))?;
    let mut expected = old;
    expected.push(entry.to_string());
    if after
        .iter()
        .map(|d| d.value.as_str())
        .ne(expected.iter().map(String::as_str))
    {
        return Err(EditError::Unsafe(key));
    }
    Ok(Some(edited))
}

/// `text` as a YAML double-quoted scalar the reader takes back as the
/// same string, whatever is in it: `"` and `\` escaped, and written as
/// `\u009B` or `\U000E0041` every character outside YAML's printable
/// set, every control (C0, DEL, C1), every non-character (U+FDD0 to
/// U+FDEF, U+xFFFE, U+xFFFF), the byte-order mark, the line and paragraph
/// separators and Unicode's bidi controls, and whatever `also` names. An
/// entry a sandbox chose (a request's path, a program's) written raw
/// could make a file the reader refuses, and shut its owner out.
pub fn yaml_quoted(text: &str, also: impl Fn(char) -> bool) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        let n = u32::from(c);
        let printable =
            matches!(n, 0x20..=0x7E | 0xA0..=0xD7FF | 0xE000..=0xFFFD | 0x10000..=0x10FFFF);
        let noncharacter = (0xFDD0..=0xFDEF).contains(&n) || n & 0xFFFE == 0xFFFE;
        let special = matches!(
            n,
            0xFEFF | 0x2028 | 0x2029 | 0x061C | 0x200E | 0x200F | 0x202A..=0x202E | 0x2066..=0x2069
        );
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            _ if printable && !noncharacter && !special && !also(c) => out.push(c),
            _ if n <= 0xFFFF => out.push_str(&format!("\\u{n:04X}")),
            _ => out.push_str(&format!("\\U{n:08X}")),
        }
    }
    out.push('"');
    out
}

/// Profile lines that give `field`'s list `entries` (YAML, a flow list,
/// each entry quoted), under its profile key's section: what a person
/// pastes into a profile. A field whose key has no section is one line.
pub fn list_lines(field: Field, entries: &[String]) -> String {
    let quoted: Vec<String> = entries.iter().map(|e| yaml_quoted(e, |_| false)).collect();
    let list = quoted.join(", ");
    match field.profile_key().unwrap_or_default().split_once('.') {
        Some((section, name)) => format!("{section}:\n  {name}: [{list}]"),
        None => format!("{}: [{list}]", field.profile_name()),
    }
}

/// Where a field's list is written: `section:` at column 0, `name:` in it.
struct Place {
    /// `section.name`.
    key: &'static str,
    section: &'static str,
    name: &'static str,
}

/// Lines of `text`, each with its line ending.
fn lines(text: &str) -> Vec<&str> {
    text.split_inclusive('\n').collect()
}

/// One more entry after the last one, at 1-based `line`/`column`.
fn after_last(
    text: &str,
    line: u64,
    column: u64,
    quoted: &str,
    place: &Place,
) -> Result<String, EditError> {
    let unsafe_ = || EditError::Unsafe(place.key);
    let ls = lines(text);
    let idx = usize::try_from(line.saturating_sub(1)).map_err(|_| unsafe_())?;
    let at = *ls.get(idx).ok_or_else(unsafe_)?;
    let col = usize::try_from(column.saturating_sub(1)).map_err(|_| unsafe_())?;
    let start = at
        .char_indices()
        .nth(col)
        .map(|(i, _)| i)
        .ok_or_else(unsafe_)?;
    let prefix = &at[..start];
    if prefix.trim_end().ends_with('-') {
        // A block list: a line like the last one's.
        let ending = if at.ends_with('\n') { "" } else { "\n" };
        let new_line = format!("{ending}{prefix}{quoted}\n");
        let mut out = String::with_capacity(text.len() + new_line.len());
        for l in &ls[..=idx] {
            out.push_str(l);
        }
        out.push_str(&new_line);
        for l in &ls[idx + 1..] {
            out.push_str(l);
        }
        return Ok(out);
    }
    let t = prefix.trim_end();
    if !(t.ends_with('[') || t.ends_with(',')) {
        return Err(EditError::Unsupported {
            section: place.section,
            why: "a list neither in block nor flow style",
        });
    }
    // A flow list: `, entry` right after the last entry's end.
    let end = start + scalar_len(&at[start..]).ok_or_else(unsafe_)?;
    let edited = format!("{}, {quoted}{}", &at[..end], &at[end..]);
    let mut out = String::with_capacity(text.len() + quoted.len() + 2);
    for (i, l) in ls.iter().enumerate() {
        if i == idx {
            out.push_str(&edited);
        } else {
            out.push_str(l);
        }
    }
    Ok(out)
}

/// The length in bytes of the flow scalar at the start of `s`.
fn scalar_len(s: &str) -> Option<usize> {
    let mut chars = s.char_indices();
    match chars.next()? {
        (_, '"') => {
            let mut escaped = false;
            for (i, c) in chars {
                match c {
                    _ if escaped => escaped = false,
                    '\\' => escaped = true,
                    '"' => return Some(i + 1),
                    _ => {}
                }
            }
            None
        }
        (_, '\'') => {
            let b = s.as_bytes();
            let mut i = 1;
            while i < b.len() {
                if b[i] == b'\'' {
                    if b.get(i + 1) == Some(&b'\'') {
                        i += 2;
                        continue;
                    }
                    return Some(i + 1);
                }
                i += 1;
            }
            None
        }
        _ => {
            let end = s
                .find([',', ']', '\n'])
                .unwrap_or(s.len())
                .min(s.find(" #").unwrap_or(s.len()));
            Some(s[..end].trim_end().len())
        }
    }
}

/// A first entry: into the section (made when there is none).
fn into_section(text: &str, quoted: &str, place: &Place) -> Result<String, EditError> {
    let (section, name) = (place.section, place.name);
    let unsupported = |why| EditError::Unsupported { section, why };
    let ls = lines(text);
    let Some(e) = ls.iter().position(|l| key_rest(l, section).is_some()) else {
        let sep = if text.is_empty() || text.ends_with('\n') {
            ""
        } else {
            "\n"
        };
        return Ok(format!("{text}{sep}{section}:\n  {name}: [{quoted}]\n"));
    };
    if !key_rest(ls[e], section).is_some_and(str::is_empty) {
        return Err(unsupported("the section on one line"));
    }
    // The children's indentation, from the first of them.
    let children: Vec<usize> = (e + 1..ls.len())
        .take_while(|&i| {
            let l = ls[i].trim();
            l.is_empty() || l.starts_with('#') || ls[i].starts_with(' ')
        })
        .filter(|&i| {
            let l = ls[i].trim();
            !l.is_empty() && !l.starts_with('#')
        })
        .collect();
    let indent = children
        .first()
        .map(|&i| ls[i].len() - ls[i].trim_start_matches(' ').len())
        .unwrap_or(2);
    let pad = " ".repeat(indent);
    let new_line = format!("{pad}{name}: [{quoted}]\n");
    let mut out = String::with_capacity(text.len() + new_line.len());
    let mut replaced = false;
    for (i, l) in ls.iter().enumerate() {
        let is_list = children.contains(&i)
            && l.starts_with(&pad)
            && !l[indent..].starts_with(' ')
            && key_rest(&l[indent..], name).is_some();
        if is_list {
            // `name:` with nothing, or `name: []`.
            match key_rest(&l[indent..], name) {
                Some("" | "[]" | "~" | "null") => {
                    out.push_str(&new_line);
                    replaced = true;
                    continue;
                }
                _ => return Err(unsupported("an empty list spelled otherwise")),
            }
        }
        out.push_str(l);
        if i == e && !l.ends_with('\n') {
            out.push('\n');
        }
    }
    if !replaced {
        // Right after the section's line.
        let mut with = String::with_capacity(out.len() + new_line.len());
        for (i, l) in lines(&out).iter().enumerate() {
            with.push_str(l);
            if i == e {
                with.push_str(&new_line);
            }
        }
        out = with;
    }
    Ok(out)
}

/// For a line `KEY: REST # comment` at column 0: REST, trimmed, without
/// the comment.
fn key_rest<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let rest = line.strip_prefix(key)?.strip_prefix(':')?;
    if !(rest.is_empty() || rest.starts_with([' ', '\t', '\n', '\r'])) {
        return None;
    }
    let rest = match rest.find(" #") {
        Some(i) => &rest[..i],
        None => rest,
    };
    Some(rest.trim())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn add(text: &str) -> String {
        add_domain(text, "new.example.com").unwrap().unwrap()
    }

    #[test]
    fn a_block_list_gets_one_line_like_its_last() {
        let text = "# mine\negress:\n  domains:\n    - pypi.org   # pip\n    - \"files.pythonhosted.org\"\nresources:\n  pids: 64\n";
        assert_eq!(
            add(text),
            "# mine\negress:\n  domains:\n    - pypi.org   # pip\n    - \"files.pythonhosted.org\"\n    - \"new.example.com\"\nresources:\n  pids: 64\n"
        );
    }

    #[test]
    fn a_flow_list_gets_the_entry_after_its_last() {
        assert_eq!(
            add("egress:\n  domains: [pypi.org, 'a''b.example'] # two\n"),
            "egress:\n  domains: [pypi.org, 'a''b.example', \"new.example.com\"] # two\n"
        );
        assert_eq!(
            add("egress:\n  domains: [\"x.example\"]"),
            "egress:\n  domains: [\"x.example\", \"new.example.com\"]"
        );
    }

    #[test]
    fn a_profile_without_domains_gets_its_first() {
        assert_eq!(
            add("name: p\n"),
            "name: p\negress:\n  domains: [\"new.example.com\"]\n"
        );
        assert_eq!(
            add("egress:\n    allow_http: true\nname: p\n"),
            "egress:\n    domains: [\"new.example.com\"]\n    allow_http: true\nname: p\n"
        );
        assert_eq!(
            add("egress:\n  domains: []\n  ask: true\n"),
            "egress:\n  domains: [\"new.example.com\"]\n  ask: true\n"
        );
        assert_eq!(add(""), "egress:\n  domains: [\"new.example.com\"]\n");
    }

    #[test]
    fn an_entry_already_there_changes_nothing() {
        assert_eq!(
            add_domain("egress:\n  domains: [new.example.com]\n", "new.example.com"),
            Ok(None)
        );
    }

    #[test]
    fn forms_it_cannot_edit_safely_are_refused_not_guessed() {
        for text in [
            "egress: {domains: [a.example]}\n",
            "egress: {allow_http: true}\n",
            "egress:\n  domains: [a.example,\n    b.example]\n  ask: true\n  hosts: {x: 1.2.3.4}\n",
        ] {
            match add_domain(text, "new.example.com") {
                Ok(Some(t)) => {
                    // Whatever it wrote must mean exactly one more entry.
                    let d = entries(&t, Field::AllowDomain).unwrap();
                    assert_eq!(
                        d.last().map(|d| d.value.as_str()),
                        Some("new.example.com"),
                        "{t}"
                    );
                }
                Ok(None) => panic!("{text}: nothing added"),
                Err(_) => {}
            }
        }
        assert!(matches!(
            add_domain("egress: [\n", "x.example"),
            Err(EditError::Invalid(_))
        ));
    }

    fn program(text: &str) -> String {
        add_entry(text, Field::AllowExec, "/usr/bin/id")
            .unwrap()
            .unwrap()
    }

    #[test]
    fn a_program_goes_into_process_allow_exec_in_its_own_layout() {
        // A block list, its comments and the other sections kept.
        let text = "# mine\nprocess:\n  allow_exec:\n    - sh   # the shell\n    - /usr/bin/git\negress:\n  domains: [pypi.org]\n";
        assert_eq!(
            program(text),
            "# mine\nprocess:\n  allow_exec:\n    - sh   # the shell\n    - /usr/bin/git\n    - \"/usr/bin/id\"\negress:\n  domains: [pypi.org]\n"
        );
        // A flow list.
        assert_eq!(
            program("process:\n  allow_exec: [sh] # one\n"),
            "process:\n  allow_exec: [sh, \"/usr/bin/id\"] # one\n"
        );
        // A section without the list, and no section at all.
        assert_eq!(
            program("process:\n  user: agent\n"),
            "process:\n  allow_exec: [\"/usr/bin/id\"]\n  user: agent\n"
        );
        assert_eq!(
            program("egress:\n  domains: [pypi.org]\n"),
            "egress:\n  domains: [pypi.org]\nprocess:\n  allow_exec: [\"/usr/bin/id\"]\n"
        );
        // Never into another section's list of the same name.
        let t = program("egress:\n  domains: [a.example]\nprocess:\n  allow_exec: [sh]\n");
        assert_eq!(
            entries(&t, Field::AllowDomain).unwrap()[0].value,
            "a.example"
        );
        assert_eq!(
            add_entry(
                "process:\n  allow_exec: [/usr/bin/id]\n",
                Field::AllowExec,
                "/usr/bin/id"
            ),
            Ok(None)
        );
    }

    #[test]
    fn pasted_lines_read_back_as_the_entries_they_list() {
        let entries = vec!["pypi.org".to_string(), "a \"b\".example".to_string()];
        for f in [Field::AllowDomain, Field::AllowRequest, Field::AllowExec] {
            let text = list_lines(f, &entries);
            let back: Vec<String> = entries_of(&text, f);
            assert_eq!(back, entries, "{f:?}: {text}");
        }
        assert_eq!(
            list_lines(Field::AllowDomain, &["pypi.org".into()]),
            "egress:\n  domains: [\"pypi.org\"]"
        );
    }

    /// A program's path is the sandbox's choice: whatever it holds, the
    /// profile edited for it and the lines pasted from it read back as
    /// that path (with it raw, the reader refused the edit, and the
    /// owner's "always" could never be kept).
    #[test]
    fn hostile_entries_are_written_so_that_they_read_back_the_same() {
        let hostile = [
            "/w/x\u{9b}31m",
            "/w/a\u{202e}b\u{2066}c",
            "/w/bom\u{feff}\u{fffe}\u{ffff}\u{fdd0}\u{10fffe}",
            "/w/nel\u{85}ls\u{2028}ps\u{2029}",
            "/w/c0\u{1}\u{1b}[2J\u{7f}\ttab",
            "/w/q\"b\\s#h: c, [x] {y} &a *b !c %d @e `f",
            "/w/\u{1f980} caf\u{e9}",
        ];
        let mut text = "process:\n  allow_exec: [sh]\n".to_string();
        for h in hostile {
            text = add_entry(&text, Field::AllowExec, h).unwrap().unwrap();
        }
        let mut want = vec!["sh".to_string()];
        want.extend(hostile.iter().map(|h| h.to_string()));
        assert_eq!(entries_of(&text, Field::AllowExec), want, "{text}");
        assert!(!text.contains(['\u{9b}', '\u{202e}', '\u{feff}', '\u{85}', '\u{1b}']));
        let pasted = list_lines(Field::AllowExec, &want);
        assert_eq!(entries_of(&pasted, Field::AllowExec), want, "{pasted}");
    }

    fn entries_of(text: &str, f: Field) -> Vec<String> {
        entries(text, f)
            .unwrap()
            .into_iter()
            .map(|a| a.value)
            .collect()
    }

    #[test]
    fn a_field_that_is_not_a_list_of_a_section_is_never_edited() {
        for f in [Field::Memory, Field::Env, Field::Hostname, Field::Command] {
            assert!(
                matches!(add_entry("", f, "x"), Err(EditError::NotAList(_))),
                "{f:?}"
            );
        }
    }
}
