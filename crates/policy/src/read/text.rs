//! A profile file's text read whole: its YAML parsed with every problem
//! said at once (each entry the parser stops at blanked out and the text
//! read again), then its tree read by the table, and the one question
//! other crates ask of a file's text (its `egress.domains`).
//!
//! This file never reads a value itself: the tree comes from
//! [`super::tree`], the values from [`super::read`]; nor does it touch a
//! file (its caller hands it the text).

use std::path::PathBuf;

use super::tree::{parse_yaml, Node, Place, Placed};
use super::{read, Read, Reading};
use crate::fields::{Door, Field};
use crate::layer::{Origin, Val};
use crate::profile::{At, Pos};

/// Read a profile file's text by the table: its values and every problem
/// of it (parse-level ones included), each at its line and column. Paths
/// are kept as written.
pub fn read_profile_text(text: &str) -> (Read, Vec<crate::profile::ParseError>) {
    let (tree, mut errors) = parse_profile_tree(text);
    let origin = |p: &Place| Origin::File {
        file: String::new(),
        pos: p.pos(),
    };
    let path = |raw: &str| Ok(PathBuf::from(raw));
    let read = read(
        &tree,
        &Reading {
            origin: &origin,
            path: &path,
            door: Door::Profile,
        },
    );
    errors.extend(read.findings.iter().map(|f| crate::profile::ParseError {
        pos: f.place.pos(),
        message: f.message.clone(),
    }));
    (read, errors)
}

/// The `egress.domains` of a profile file's text, each at its place; the
/// first problem when the text is not a profile warden reads.
pub fn profile_domains(text: &str) -> Result<Vec<At<String>>, crate::profile::ParseError> {
    let (read, errors) = read_profile_text(text);
    if let Some(e) = errors.into_iter().next() {
        return Err(e);
    }
    Ok(read
        .layer
        .list(Field::AllowDomain)
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

/// Parse a profile file's text into its tree with every problem of its
/// YAML said at once: the parser stops at its first error; each entry it
/// stops at is said, blanked out (its lines, and the lines nested below
/// it, become empty, so every other position stays where it was written)
/// and the text read again, up to [`MAX_FINDINGS`] times.
pub fn parse_profile_tree(text: &str) -> (Placed<Node>, Vec<crate::profile::ParseError>) {
    let mut lines: Vec<String> = text.split('\n').map(str::to_string).collect();
    let mut errors: Vec<crate::profile::ParseError> = Vec::new();
    for _ in 0..MAX_FINDINGS {
        match parse_yaml(&lines.join("\n")) {
            Ok(tree) => return (tree, errors),
            Err(e) => {
                let again = errors.contains(&e);
                if !again {
                    errors.push(e.clone());
                }
                if again || !blank_entry(&mut lines, usize::try_from(e.pos.line).unwrap_or(0)) {
                    break;
                }
            }
        }
    }
    let empty = Placed {
        value: Node::Null,
        place: Place::Line(Pos { line: 1, column: 1 }),
    };
    (empty, errors)
}

/// Parse-level findings of one file said at most.
pub const MAX_FINDINGS: usize = 64;

/// Blank the entry at `line` (1-based): the key or list item written there
/// (or, for a value on a line of its own, the key it belongs to) and the
/// lines nested below it. False when there is nothing to blank.
fn blank_entry(lines: &mut [String], line: usize) -> bool {
    let indent = |l: &str| l.len() - l.trim_start_matches(' ').len();
    let content = |l: &str| {
        let t = l.trim();
        !t.is_empty() && !t.starts_with('#')
    };
    let Some(mut start) = line.checked_sub(1).filter(|&i| i < lines.len()) else {
        return false;
    };
    if !content(&lines[start]) {
        return false;
    }
    let entry = |l: &str| {
        let t = l.trim_start();
        t.starts_with('-') || t.contains(':')
    };
    if !entry(&lines[start]) {
        // A value on a line of its own: its key is the line above it that
        // is indented less.
        let own = indent(&lines[start]);
        if let Some(k) = (0..start)
            .rev()
            .find(|&k| content(&lines[k]) && indent(&lines[k]) < own)
        {
            start = k;
        }
    }
    let base = indent(&lines[start]);
    lines[start].clear();
    for l in lines.iter_mut().skip(start + 1) {
        if content(l) && indent(l) <= base {
            break;
        }
        l.clear();
    }
    true
}
