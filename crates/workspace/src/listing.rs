//! What a review lists: a sandbox's changes less those the workspace's own
//! ignore files (`.gitignore`, `.git/info/exclude`) ignore, unless they
//! are asked for, and the line that says how many were left out. Every
//! door that lists changes (`warden diff`, its `--host` form, MCP's
//! `get_changes`) lists them through this, so that no door shows a change
//! another leaves out, nor leaves one out without saying so. A commit
//! leaves the same changes out ([`crate::CommitOptions::include_ignored`]).

use crate::change::Change;

/// The changes a door shows, and how many it left out because the
/// workspace's own ignore files ignore them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listing<T> {
    pub shown: Vec<T>,
    pub left_out: usize,
}

impl<T> Listing<T> {
    /// The listing of `changes`, each of which `is_ignored` says whether
    /// the workspace's ignore files ignore (a door that has the changes as
    /// JSON reads their `ignored`); with `include_ignored`, nothing is
    /// left out.
    pub fn of(
        changes: impl IntoIterator<Item = T>,
        is_ignored: impl Fn(&T) -> bool,
        include_ignored: bool,
    ) -> Listing<T> {
        let mut shown = Vec::new();
        let mut left_out = 0;
        for c in changes {
            if include_ignored || !is_ignored(&c) {
                shown.push(c);
            } else {
                left_out += 1;
            }
        }
        Listing { shown, left_out }
    }

    /// The line that says what was left out (`None` when nothing was):
    /// `verb` is what was not done to them ("shown", "committed"), `hint`
    /// how the door's user gets them.
    pub fn left_out_line(&self, verb: &str, hint: &str) -> Option<String> {
        left_out_line(self.left_out, verb, hint)
    }
}

impl Listing<Change> {
    /// The listing of a diff's changes.
    pub fn new(changes: Vec<Change>, include_ignored: bool) -> Listing<Change> {
        Listing::of(changes, |c| c.ignored, include_ignored)
    }
}

impl Listing<serde_json::Value> {
    /// The listing of changes as the API sends them (`ignored: true` on
    /// those the workspace's ignore files ignore).
    pub fn of_json(
        changes: impl IntoIterator<Item = serde_json::Value>,
        include_ignored: bool,
    ) -> Listing<serde_json::Value> {
        Listing::of(
            changes,
            |c| c.get("ignored").and_then(|i| i.as_bool()) == Some(true),
            include_ignored,
        )
    }
}

/// The line that says `n` changes the workspace's ignore files ignore
/// were not `verb` (`None` when `n` is 0), with how to get them.
pub fn left_out_line(n: usize, verb: &str, hint: &str) -> Option<String> {
    (n > 0).then(|| {
        format!(
            "{n} change(s) ignored by the workspace's .gitignore or .git/info/exclude not {verb} ({hint})"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ignored_changes_are_left_out_and_counted_unless_asked_for() {
        let changes = vec![
            serde_json::json!({"path": "a.rs"}),
            serde_json::json!({"path": "build.log", "ignored": true}),
        ];
        let l = Listing::of_json(changes.clone(), false);
        assert_eq!(l.shown, changes[..1]);
        assert_eq!(l.left_out, 1);
        assert_eq!(
            l.left_out_line("shown", "--ignored shows them").as_deref(),
            Some("1 change(s) ignored by the workspace's .gitignore or .git/info/exclude not shown (--ignored shows them)")
        );
        let all = Listing::of_json(changes.clone(), true);
        assert_eq!(all.left_out_line("shown", "x"), None);
        assert_eq!((all.shown, all.left_out), (changes, 0));
    }
}
