//! Edits of a profile file's text that keep the person's layout and
//! comments: today, one more `egress.domains` entry (an "always" answer to
//! `--ask` saved into the profile in use).
//!
//! The edit is made on the text, next to where the list already is, in its
//! own style (one `- entry` line more in a block list, `, entry` in a flow
//! list), and then judged by what it means: the new text is read again and
//! must give the same domains plus the new one. An edit that would mean
//! anything else is refused, and the file is left as it was.

use crate::read::profile_domains;

/// Why a domain could not be added to a profile's text.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum EditError {
    #[error("the profile does not read as a profile ({0}); fix it first")]
    Invalid(String),
    #[error(
        "the profile's `egress` is written in a form warden does not edit ({0}); add the entry yourself"
    )]
    Unsupported(&'static str),
    #[error("adding the entry would change more than the domains list; add it yourself")]
    Unsafe,
}

/// `text` with `entry` added to `egress.domains`; `Ok(None)` when the list
/// has it already.
pub fn add_domain(text: &str, entry: &str) -> Result<Option<String>, EditError> {
    let before = profile_domains(text).map_err(|e| EditError::Invalid(e.to_string()))?;
    let old: Vec<String> = before.iter().map(|d| d.value.clone()).collect();
    if old.iter().any(|d| d == entry) {
        return Ok(None);
    }
    let quoted = serde_json::Value::from(entry).to_string();
    let edited = match before.last().map(|d| d.pos) {
        Some(pos) => after_last(text, pos.line, pos.column, &quoted)?,
        None => into_egress(text, &quoted)?,
    };
    // Judged by what it means, not by how it looks.
    let after = profile_domains(&edited).map_err(|_| EditError::Unsafe)?;
    let mut expected = old;
    expected.push(entry.to_string());
    if after
        .iter()
        .map(|d| d.value.as_str())
        .ne(expected.iter().map(String::as_str))
    {
        return Err(EditError::Unsafe);
    }
    Ok(Some(edited))
}

/// Lines of `text`, each with its line ending.
fn lines(text: &str) -> Vec<&str> {
    text.split_inclusive('\n').collect()
}

/// One more entry after the last one, at 1-based `line`/`column`.
fn after_last(text: &str, line: u64, column: u64, quoted: &str) -> Result<String, EditError> {
    let ls = lines(text);
    let idx = usize::try_from(line.saturating_sub(1)).map_err(|_| EditError::Unsafe)?;
    let at = *ls.get(idx).ok_or(EditError::Unsafe)?;
    let col = usize::try_from(column.saturating_sub(1)).map_err(|_| EditError::Unsafe)?;
    let start = at
        .char_indices()
        .nth(col)
        .map(|(i, _)| i)
        .ok_or(EditError::Unsafe)?;
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
        return Err(EditError::Unsupported(
            "a domains list neither in block nor flow style",
        ));
    }
    // A flow list: `, entry` right after the last entry's end.
    let end = start + scalar_len(&at[start..]).ok_or(EditError::Unsafe)?;
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

/// A first entry: into `egress:` (made when there is none).
fn into_egress(text: &str, quoted: &str) -> Result<String, EditError> {
    let ls = lines(text);
    let Some(e) = ls.iter().position(|l| key_rest(l, "egress").is_some()) else {
        let sep = if text.is_empty() || text.ends_with('\n') {
            ""
        } else {
            "\n"
        };
        return Ok(format!("{text}{sep}egress:\n  domains: [{quoted}]\n"));
    };
    if !key_rest(ls[e], "egress").is_some_and(str::is_empty) {
        return Err(EditError::Unsupported("egress: on one line"));
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
    let new_line = format!("{pad}domains: [{quoted}]\n");
    let mut out = String::with_capacity(text.len() + new_line.len());
    let mut replaced = false;
    for (i, l) in ls.iter().enumerate() {
        let is_domains = children.contains(&i)
            && l.starts_with(&pad)
            && !l[indent..].starts_with(' ')
            && key_rest(&l[indent..], "domains").is_some();
        if is_domains {
            // `domains:` with nothing, or `domains: []`.
            match key_rest(&l[indent..], "domains") {
                Some("" | "[]" | "~" | "null") => {
                    out.push_str(&new_line);
                    replaced = true;
                    continue;
                }
                _ => {
                    return Err(EditError::Unsupported(
                        "an empty domains list spelled otherwise",
                    ))
                }
            }
        }
        out.push_str(l);
        if i == e && !l.ends_with('\n') {
            out.push('\n');
        }
    }
    if !replaced {
        // Right after `egress:`.
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
                    let d = profile_domains(&t).unwrap();
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
}
