//! What a person reviewed: a digest of each change a diff showed, kept in
//! the sandbox's state directory (out of the sandbox's reach), so that a
//! commit applies exactly that and nothing the sandbox changed since.
//!
//! A change's digest covers everything the commit would apply for it: its
//! kind, its paths, both entries (kind, mode, size, link target) and the
//! new file's content. Holes of a sparse file are hashed as their places,
//! not as their zeros, so a 1 GiB file of holes costs nothing to hash.

use crate::beneath::Tree;
use crate::change::{Change, Entry, EntryKind};
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
    let mut h = Sha256::new();
    fn field(h: &mut Sha256, bytes: &[u8]) {
        h.update((bytes.len() as u64).to_le_bytes());
        h.update(bytes);
    }
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
    Ok(h.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

fn entry_bytes(e: &Option<Entry>) -> String {
    match e {
        None => "none".into(),
        Some(e) => format!("{:?} {:o} {}", e.kind, e.mode, e.size),
    }
}

#[derive(Default, Serialize, Deserialize)]
struct Record {
    changes: Vec<Reviewed>,
}

#[derive(Serialize, Deserialize)]
struct Reviewed {
    #[serde(with = "crate::wire::path")]
    path: PathBuf,
    digest: String,
}

impl Sandbox {
    /// Remember that a person was shown `changes`: a later commit with
    /// [`crate::CommitOptions::reviewed`] applies a change only while its
    /// digest is the one shown (for its path, by any diff since).
    pub fn record_review(&self, changes: &[Change]) -> Result<(), StoreError> {
        let mut known = self.reviewed();
        for c in changes {
            known.insert(c.path.clone(), c.digest.clone());
        }
        let record = Record {
            changes: known
                .into_iter()
                .map(|(path, digest)| Reviewed { path, digest })
                .collect(),
        };
        store::write_json(&self.dir().join(RECORD), &record)
    }

    /// What was shown, path by path. A damaged record counts as nothing
    /// shown.
    pub(crate) fn reviewed(&self) -> BTreeMap<PathBuf, String> {
        std::fs::read(self.dir().join(RECORD))
            .ok()
            .and_then(|b| serde_json::from_slice::<Record>(&b).ok())
            .unwrap_or_default()
            .changes
            .into_iter()
            .map(|r| (r.path, r.digest))
            .collect()
    }
}
