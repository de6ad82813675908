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

/// One change as a review recorded it. Every field is required: a record
/// written before warden kept `shown` is unreadable, so counts as no
/// review at all.
#[derive(Serialize, Deserialize)]
struct Reviewed {
    #[serde(with = "crate::wire::path")]
    path: PathBuf,
    digest: String,
    shown: Shown,
}

/// What a review recorded of one path: the digest of the change shown
/// and how much of it was shown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Seen {
    pub(crate) digest: String,
    pub(crate) shown: Shown,
}

impl Sandbox {
    /// Remember that a person was shown `changes`, and how much of each
    /// ([`Shown`]): a later commit with [`crate::CommitOptions::reviewed`]
    /// applies a change only while its digest is the one shown (for its
    /// path, by any diff since), and [`Sandbox::hold_to_review`] flags one
    /// whose content was not shown.
    pub fn record_review(&self, changes: &[Change]) -> Result<(), StoreError> {
        let mut known = self.reviewed();
        for c in changes {
            let shown = match known.get(&c.path) {
                Some(seen) if seen.digest == c.digest => seen.shown.with(Shown::of(c)),
                _ => Shown::of(c),
            };
            known.insert(
                c.path.clone(),
                Seen {
                    digest: c.digest.clone(),
                    shown,
                },
            );
        }
        let record = Record {
            changes: known
                .into_iter()
                .map(|(path, seen)| Reviewed {
                    path,
                    digest: seen.digest,
                    shown: seen.shown,
                })
                .collect(),
        };
        store::write_json(&self.dir().join(RECORD), &record)
    }

    /// What was shown, path by path. A missing or damaged record counts as
    /// nothing shown.
    pub(crate) fn reviewed(&self) -> BTreeMap<PathBuf, Seen> {
        std::fs::read(self.dir().join(RECORD))
            .ok()
            .and_then(|b| serde_json::from_slice::<Record>(&b).ok())
            .unwrap_or_default()
            .changes
            .into_iter()
            .map(|r| {
                (
                    r.path,
                    Seen {
                        digest: r.digest,
                        shown: r.shown,
                    },
                )
            })
            .collect()
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
    /// judgement. A change with another digest, or none recorded (no
    /// record, or an unreadable one, is no review), is left to the commit,
    /// which applies none of it.
    pub fn hold_to_review(&self, changes: &mut [Change]) {
        let known = self.reviewed();
        for c in changes.iter_mut() {
            let Some(seen) = known.get(&c.path).filter(|s| s.digest == c.digest) else {
                continue;
            };
            match seen.shown {
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
