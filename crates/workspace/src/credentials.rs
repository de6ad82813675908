//! The `credential` flag: a change that added a credential-shaped string
//! (a cloud key, a forge token, a private key, ... as `warden-detect`'s
//! rules find them) to a file of the workspace. What the file held before
//! is scanned too, so a key that was already there (and is only moved
//! about by an edit) does not flag the change: only what the sandbox
//! added does.
//!
//! The flag names the rules and the lines, and carries each finding's
//! hash and place, never the value: a review's JSON, the API's answer and
//! a refused commit's record can go where the value must not.

use crate::change::{Change, ChangeKind, Entry, EntryKind, Flag};
use std::collections::HashMap;
use std::io::{self, Read};
use std::path::Path;
use warden_detect::{Finding, Scanner, CHUNK};

/// The flag's rule.
pub(crate) const RULE: &str = "credential";

/// How much of a file is scanned: its first 8 MiB. A review must not cost
/// what the sandbox chooses (a sparse file of terabytes reads as zeros for
/// hours); a credential placed past this point is not looked for, which
/// docs/detection.md says.
pub(crate) const SCAN_LIMIT: u64 = 8 << 20;

/// Which tree a file is read from.
#[derive(Clone, Copy)]
pub(crate) enum Side {
    /// The real workspace (the lower layer).
    Real,
    /// The sandbox's layer.
    Layer,
}

/// The `credential` flag of change `c`, if it added a credential-shaped
/// string. `open` opens a file of either tree by its path there (beneath
/// the tree, as the diff reads it); each file is read no further than the
/// size the diff recorded.
pub(crate) fn flag<R: Read>(
    c: &Change,
    open: impl Fn(Side, &Path) -> io::Result<R>,
) -> io::Result<Option<Flag>> {
    let file = |e: &Option<Entry>| {
        e.as_ref()
            .filter(|e| e.kind == EntryKind::File)
            .map(|e| e.size)
    };
    // A rename or a mode change brings no new content.
    let Some(new_size) = file(&c.new) else {
        return Ok(None);
    };
    if matches!(c.kind, ChangeKind::Renamed | ChangeKind::Mode) {
        return Ok(None);
    }
    let new = scan(open(Side::Layer, &c.path)?.take(new_size.min(SCAN_LIMIT)))?;
    if new.is_empty() {
        return Ok(None);
    }
    // What was there before, counted by rule and value: each of those
    // takes one finding of the same value off the new side.
    let mut before: HashMap<(String, String), usize> = HashMap::new();
    if let Some(old_size) = file(&c.old) {
        let old_path = c.from.as_deref().unwrap_or(&c.path);
        for f in scan(open(Side::Real, old_path)?.take(old_size.min(SCAN_LIMIT)))? {
            *before.entry((f.rule, f.hash)).or_default() += 1;
        }
    }
    let mut added = Vec::new();
    for f in new {
        match before.get_mut(&(f.rule.clone(), f.hash.clone())) {
            Some(n) if *n > 0 => *n -= 1,
            _ => added.push(f),
        }
    }
    if added.is_empty() {
        return Ok(None);
    }
    let places: Vec<String> = added
        .iter()
        .map(|f| format!("{} (line {})", f.rule, f.line))
        .collect();
    Ok(Some(Flag {
        rule: RULE,
        reason: format!(
            "a credential-shaped string was added: {}; a commit would put it in the real workspace",
            places.join(", ")
        ),
        findings: added,
    }))
}

/// The findings of a whole file, read in pieces.
fn scan(mut f: impl Read) -> io::Result<Vec<Finding>> {
    let mut scanner = Scanner::new();
    let mut buf = vec![0u8; CHUNK];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        scanner.feed(&buf[..n]);
    }
    Ok(scanner.finish())
}
