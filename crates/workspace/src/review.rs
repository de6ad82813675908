//! What a person reviewed: a digest of each change a diff showed, kept in
//! the sandbox's state directory (out of the sandbox's reach), so that a
//! commit applies exactly that and nothing the sandbox changed since.
//!
//! A change's digest covers everything the commit would apply for it: its
//! kind, its paths, both entries (kind, mode, size, link target) and the
//! new file's content. Holes of a sparse file are hashed as their places,
//! not as their zeros, so a 1 GiB file of holes costs nothing to hash.
//! A change whose text a review showed is hashed from the bytes shown.
//!
//! The record also keeps how much of each change the review showed
//! ([`Shown`]): a commit holds a change the review did not show in full
//! as the review flagged it, `not-shown`, even when the commit itself
//! could diff it (see [`Sandbox::hold_to_review`]).

use crate::beneath::Tree;
use crate::change::{Change, ChangeKind, Content, Entry, EntryKind, NOT_SHOWN, TEXT_DIFF_LIMIT};
use crate::fsutil;
use crate::store::{self, Sandbox, StoreError};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// The file below the sandbox's directory.
const RECORD: &str = "reviewed.json";

/// The digest of change `c`, whose new content (if any) is at `c.path`
/// in the layer `upper`.
pub(crate) fn digest(upper: &Path, c: &Change) -> io::Result<String> {
    let mut h = described(c);
    if let Some(new) = c.new.as_ref().filter(|n| n.kind == EntryKind::File) {
        // Read beneath the layer's descriptor from the descriptor `fstat`
        // showed to be a regular file, and no further than the size the
        // walk recorded: a link the sandbox swapped in is refused, and a
        // file that grew since hashes differently from the one shown,
        // which a commit then refuses to apply.
        let f = Tree::layer(upper)?.file(&c.path)?;
        let len = f.metadata()?.len().min(new.size);
        field(&mut h, &len.to_le_bytes());
        let mut buf = vec![0u8; 1 << 20];
        for (start, end) in fsutil::data_extents(&f, len)? {
            field(&mut h, &start.to_le_bytes());
            let mut at = start;
            while at < end {
                let want = usize::try_from(end - at)
                    .unwrap_or(buf.len())
                    .min(buf.len());
                let n = f.read_at(&mut buf[..want], at)?;
                if n == 0 {
                    break;
                }
                h.update(&buf[..n]);
                at += n as u64;
            }
        }
    }
    Ok(hex(h))
}

/// The digest of change `c` whose new file's content is `shown`: the bytes
/// a review read and showed as text. The same digest [`digest`] gives for
/// a file of those bytes (text holds no zero byte, so the file has no
/// hole: one extent, from 0). A review records this one, never the file
/// read again: a sandbox that still runs may rewrite the file between the
/// review's reading it for the patch and its digest, and the commit would
/// then apply, as reviewed, content no one was shown.
pub(crate) fn digest_shown(c: &Change, shown: &[u8]) -> String {
    let mut h = described(c);
    if c.new.as_ref().is_some_and(|n| n.kind == EntryKind::File) {
        let len = shown.len() as u64;
        field(&mut h, &len.to_le_bytes());
        if len > 0 {
            field(&mut h, &0u64.to_le_bytes());
            h.update(shown);
        }
    }
    hex(h)
}

fn field(h: &mut Sha256, bytes: &[u8]) {
    h.update((bytes.len() as u64).to_le_bytes());
    h.update(bytes);
}

/// The hash of what describes change `c`: kind, paths, both entries.
fn described(c: &Change) -> Sha256 {
    let mut h = Sha256::new();
    field(&mut h, format!("{:?}", c.kind).as_bytes());
    field(&mut h, c.path.as_os_str().as_bytes());
    field(
        &mut h,
        c.from
            .as_deref()
            .map_or(&[][..], |p| p.as_os_str().as_bytes()),
    );
    for e in [&c.old, &c.new] {
        field(&mut h, entry_bytes(e).as_bytes());
        if let Some(Entry {
            target: Some(t), ..
        }) = e
        {
            field(&mut h, t.as_os_str().as_bytes());
        }
    }
    h
}

fn hex(h: Sha256) -> String {
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

fn entry_bytes(e: &Option<Entry>) -> String {
    match e {
        None => "none".into(),
        Some(e) => format!("{:?} {:o} {}", e.kind, e.mode, e.size),
    }
}

/// How much of a change a review showed (a stable code in
/// `reviewed.json`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Shown {
    /// All of it: the exact line diff, a binary file for what it is, or a
    /// change with no content to show (a directory, a link, a mode, a
    /// rename of identical content).
    Full,
    /// Every line, as runs removed and added whole (the line diff stopped
    /// at its deadline): all of it is there, less neatly.
    Coarse,
    /// Not its content: a text file not diffed (too many differing lines,
    /// or the review's time spent on other files), or one too large to be
    /// read as text. What the review flagged `not-shown`.
    NotDiffed,
    /// A review that asked for no content (the API's listing without
    /// `content`): it showed the change's entries, not its content.
    Listed,
}

impl Shown {
    /// What the review that computed `c` showed of it.
    pub fn of(c: &Change) -> Shown {
        match &c.content {
            Some(Content::Text { coarse: false, .. }) => Shown::Full,
            Some(Content::Text { coarse: true, .. }) => Shown::Coarse,
            Some(Content::NotDiffed { .. }) => Shown::NotDiffed,
            Some(Content::Binary { old_size, new_size }) => {
                if (*old_size).max(*new_size) > TEXT_DIFF_LIMIT {
                    Shown::NotDiffed
                } else {
                    Shown::Full
                }
            }
            // A change to a regular file's content has a content
            // difference whenever the review compared content.
            None if has_content(c) => Shown::Listed,
            None => Shown::Full,
        }
    }

    /// What two reviews of the same digest showed together: a person who
    /// was shown it in full once has seen it, and a review that could not
    /// show it says more than a listing that did not try.
    fn with(self, other: Shown) -> Shown {
        use Shown::*;
        match (self, other) {
            (Full, _) | (_, Full) => Full,
            (Coarse, _) | (_, Coarse) => Coarse,
            (NotDiffed, _) | (_, NotDiffed) => NotDiffed,
            (Listed, Listed) => Listed,
        }
    }
}

/// Whether a review that compares content has a content difference for
/// `c` (as `diff::content_of` computes it): a regular file on one side,
/// and content that is not the same by definition.
fn has_content(c: &Change) -> bool {
    let file = |e: &Option<Entry>| e.as_ref().is_some_and(|e| e.kind == EntryKind::File);
    (file(&c.old) || file(&c.new)) && !matches!(c.kind, ChangeKind::Mode | ChangeKind::Renamed)
}

#[derive(Default, Serialize, Deserialize)]
struct Record {
    changes: Vec<Reviewed>,
}

/// Who a review is recorded for: the owner at the command line (or on
/// the owner's socket), one of the daemon's tokens, or a model's listing
/// over MCP. A commit counts only the reviews of the principals it names
/// ([`crate::CommitOptions::reviewers`]).
pub const OWNER: &str = "owner";

/// One change as a review recorded it. Every field is required: a record
/// written before warden kept `shown`, or who reviewed (`by`), is
/// unreadable, so counts as no review at all.
#[derive(Serialize, Deserialize)]
struct Reviewed {
    #[serde(with = "crate::wire::path")]
    path: PathBuf,
    digest: String,
    shown: Shown,
    by: String,
}

/// What a review recorded of one path: the digest of the change shown
/// and how much of it was shown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Seen {
    pub(crate) digest: String,
    pub(crate) shown: Shown,
}

/// What the reviews of `path` counted for a commit showed of the change
/// of `digest`: none when no such review showed this very change.
pub(crate) fn seen(
    known: &BTreeMap<PathBuf, Vec<Seen>>,
    path: &Path,
    digest: &str,
) -> Option<Shown> {
    known
        .get(path)?
        .iter()
        .filter(|s| s.digest == digest)
        .map(|s| s.shown)
        .reduce(Shown::with)
}

/// Put what `by` was shown of `changes` into the record `all`. `by`'s
/// entries are found by path through an index made once: looking each
/// change up by a scan of the record made a review of n files cost n²
/// comparisons (10,000 files took 14 s of the daemon's CPU, 100,000 did
/// not end), whatever bound the line diffs kept.
fn merge_review(all: &mut Vec<Reviewed>, changes: &[Change], by: &str) {
    let mut mine: std::collections::HashMap<PathBuf, usize> = all
        .iter()
        .enumerate()
        .filter(|(_, r)| r.by == by)
        .map(|(i, r)| (r.path.clone(), i))
        .collect();
    for c in changes {
        match mine.get(&c.path) {
            Some(&i) => {
                let r = &mut all[i];
                r.shown = if r.digest == c.digest {
                    r.shown.with(Shown::of(c))
                } else {
                    Shown::of(c)
                };
                r.digest = c.digest.clone();
            }
            None => {
                mine.insert(c.path.clone(), all.len());
                all.push(Reviewed {
                    path: c.path.clone(),
                    digest: c.digest.clone(),
                    shown: Shown::of(c),
                    by: by.to_string(),
                });
            }
        }
    }
}

/// Whether `path` is one of `paths`, or below one when `below` (every
/// path when `paths` is empty).
fn under(path: &Path, paths: &[PathBuf], below: bool) -> bool {
    paths.is_empty()
        || paths
            .iter()
            .any(|p| path == p || (below && path.starts_with(p)))
}

impl Sandbox {
    /// Remember that principal `by` ([`OWNER`], a token, a model) was
    /// shown `changes`, and how much of each ([`Shown`]): a later commit
    /// with [`crate::CommitOptions::reviewed`] that counts `by`'s reviews
    /// applies a change only while its digest is the one shown, and
    /// [`Sandbox::hold_to_review`] flags one whose content was not shown.
    /// Each principal's record is its own: one principal's review never
    /// stands for another's.
    pub fn record_review(&self, changes: &[Change], by: &str) -> Result<(), StoreError> {
        let mut all = self.record();
        merge_review(&mut all, changes, by);
        store::write_json(&self.dir().join(RECORD), &Record { changes: all })
    }

    /// Forget every review of the changes at `paths`, or at or below them
    /// when `below` (all of them when `paths` is empty), whoever made it:
    /// a change discarded, restored over or committed is no longer what
    /// anyone reviewed, and the same bytes put back later are a new change
    /// to show. A record that cannot be read is no review already.
    pub fn forget_reviews(&self, paths: &[PathBuf], below: bool) -> Result<(), StoreError> {
        let file = self.dir().join(RECORD);
        if !file.exists() {
            return Ok(());
        }
        let mut all = self.record();
        all.retain(|r| !under(&r.path, paths, below));
        store::write_json(&file, &Record { changes: all })
    }

    fn record(&self) -> Vec<Reviewed> {
        std::fs::read(self.dir().join(RECORD))
            .ok()
            .and_then(|b| serde_json::from_slice::<Record>(&b).ok())
            .unwrap_or_default()
            .changes
    }

    /// What the reviews of `reviewers` showed, path by path. A missing or
    /// damaged record counts as nothing shown.
    pub(crate) fn reviewed(&self, reviewers: &[String]) -> BTreeMap<PathBuf, Vec<Seen>> {
        let mut known: BTreeMap<PathBuf, Vec<Seen>> = BTreeMap::new();
        for r in self.record() {
            if reviewers.contains(&r.by) {
                known.entry(r.path).or_default().push(Seen {
                    digest: r.digest,
                    shown: r.shown,
                });
            }
        }
        known
    }

    /// Hold a commit's `changes` (computed with content, as the commit's
    /// preview is) to what the recorded review showed, for a commit that
    /// applies only what was reviewed: a change the review recorded with
    /// this very digest but did not show in full ([`Shown::NotDiffed`]) is
    /// flagged `not-shown`, however fully the commit's own comparison could
    /// show it now (the review's time spent on a flood of other files, and
    /// the file then committed by itself); one the review showed in full
    /// loses a `not-shown` the commit's own comparison gave it (a person
    /// saw it). A change listed without content keeps the commit's own
    /// judgement. Only the reviews of `reviewers` count. A change with
    /// another digest, or none recorded (no record, or an unreadable one,
    /// is no review), is left to the commit,
    /// which applies none of it.
    pub fn hold_to_review(&self, changes: &mut [Change], reviewers: &[String]) {
        let known = self.reviewed(reviewers);
        for c in changes.iter_mut() {
            let Some(shown) = seen(&known, &c.path, &c.digest) else {
                continue;
            };
            match shown {
                Shown::Full | Shown::Coarse => c.flags.retain(|f| f.rule != NOT_SHOWN),
                Shown::NotDiffed => {
                    c.flags.retain(|f| f.rule != NOT_SHOWN);
                    c.flags.push(crate::flags::not_shown_at_review());
                }
                Shown::Listed => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn added(i: usize, digest: &str) -> Change {
        Change {
            path: PathBuf::from(format!("d/f{i}")),
            kind: ChangeKind::Added,
            from: None,
            old: None,
            new: None,
            content: None,
            flags: Vec::new(),
            digest: digest.to_string(),
            ignored: false,
            copied_up: false,
        }
    }

    #[test]
    fn recording_a_review_costs_time_linear_in_its_changes() {
        // 60,000 changes against a record of 60,000 of another reviewer's
        // and 60,000 of the same one's: by a scan of the record per change,
        // billions of path comparisons (minutes); by the index, a moment.
        let changes: Vec<Change> = (0..60_000).map(|i| added(i, "new")).collect();
        let mut all = Vec::new();
        merge_review(&mut all, &changes, "other");
        merge_review(&mut all, &changes, OWNER);
        let began = std::time::Instant::now();
        merge_review(&mut all, &changes, OWNER);
        assert!(
            began.elapsed() < std::time::Duration::from_secs(5),
            "took {:?}",
            began.elapsed()
        );
        assert_eq!(all.len(), 120_000);
        // A change shown again with another digest replaces what was shown.
        merge_review(&mut all, &[added(7, "newer")], OWNER);
        let mine: Vec<&Reviewed> = all
            .iter()
            .filter(|r| r.by == OWNER && r.path == Path::new("d/f7"))
            .collect();
        assert_eq!(mine.len(), 1);
        assert_eq!(mine[0].digest, "newer");
        assert_eq!(all.len(), 120_000);
    }
}
