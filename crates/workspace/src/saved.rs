//! Snapshots of a sandbox's state kept apart from any sandbox: its
//! workspace layer and its home, named, owned by whoever made them,
//! bounded in number and disk, and the source of new sandboxes (`warden
//! create NAME --from-snapshot SNAP`); forks copy a running sandbox's state
//! the same way ([`copy_state`]).
//!
//! ```text
//! ROOT/saved/NAME/
//!   meta.json   name, owner, source, workspace, layout, bytes, digest
//!   upper/      the layer (whiteouts included)
//!   home/       the sandbox's home, when it had one
//!   spec.json   the source's resolved spec, as its runtime stored it
//! ```
//! A snapshot is written under a temporary name and renamed whole, so a
//! half-made one is never listed. Its digest covers every entry's path,
//! type, mode, size and content (SHA-256) and the spec: a snapshot damaged
//! or truncated on disk is refused before anything is made from it, never
//! half-restored. Copies are reflinks where the file system has them (a
//! copy of the data otherwise). It never mounts anything, and never reads
//! a snapshot on behalf of an owner that did not make it.

use crate::fsutil::{self, FsError, Opened};
use crate::store::{validate_name, Layout, Sandbox, StoreError};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::fs;
use std::io::{self, Read};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// The most snapshots one owner keeps.
pub const MAX_PER_OWNER: usize = 16;
/// The most bytes (regular files' sizes) one owner's snapshots take.
pub const MAX_BYTES_PER_OWNER: u64 = 8 << 30;

#[derive(Debug, thiserror::Error)]
pub enum SavedError {
    #[error("a snapshot named {0} already exists; delete it first or choose another name")]
    Exists(String),
    /// Also what another owner's snapshot looks like: its existence is
    /// not told.
    #[error("no snapshot named {0}")]
    NotFound(String),
    #[error("{owner} keeps {MAX_PER_OWNER} snapshots already, the most one owner may keep: delete one first")]
    TooMany { owner: String },
    #[error("{owner}'s snapshots would take {would} bytes of the host's disk, more than the {MAX_BYTES_PER_OWNER} one owner may keep: delete one first")]
    TooLarge { owner: String, would: u64 },
    #[error("snapshot {name} is damaged ({why}); it was not used: delete it")]
    Damaged { name: String, why: String },
    #[error("cannot {op} {}", crate::printable_path(.path))]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error(transparent)]
    Fs(#[from] FsError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

fn io_err<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> SavedError + 'a {
    move |source| SavedError::Io {
        op,
        path: path.to_path_buf(),
        source,
    }
}

/// `meta.json` of one snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SavedInfo {
    pub name: String,
    /// Who made it: `owner` (the machine's owner: the CLI, the daemon's
    /// owner-only socket) or `token:ID`.
    pub owner: String,
    /// The sandbox it was taken from.
    pub source: String,
    pub created_ms: u64,
    /// Bytes of regular files in it.
    pub bytes: u64,
    /// The workspace its layer lies over.
    #[serde(with = "crate::wire::path")]
    pub workspace: PathBuf,
    /// The source had a workspace of its own (made without one): a sandbox
    /// made from the snapshot gets an empty one of its own too.
    pub own_workspace: bool,
    pub layout: Layout,
    pub profile: Option<String>,
    /// SHA-256 over its entries and spec (see the module's doc).
    pub digest: String,
}

/// What a snapshot or a fork is taken from: a sandbox's layer (the running
/// one where it is held in memory) and its home.
pub struct StateOf {
    pub upper: PathBuf,
    pub home: Option<PathBuf>,
}

impl StateOf {
    /// The state of `sb` as it is now.
    pub fn of(sb: &Sandbox) -> StateOf {
        // A layer held in memory (`--disk`) keeps its home beside it.
        let (upper, home) = match sb.live_upper() {
            Some(live) => {
                let home = live.parent().map(|p| p.join("home"));
                (live, home)
            }
            None => (sb.upper(), Some(sb.dir().join("home"))),
        };
        StateOf {
            upper,
            home: home.filter(|h| h.is_dir()),
        }
    }
}

/// Copy `from` into the new (never run) sandbox `to`: its layer replaced
/// by a copy of `from`'s, and its home made a copy of `from`'s. Reflinks
/// where the file system has them.
pub fn copy_state(from: &StateOf, to: &Sandbox) -> Result<(), SavedError> {
    let upper = to.upper();
    fsutil::remove_tree(&upper)?;
    let opened = Opened::up(&from.upper);
    crate::treecopy::copy_layer(&from.upper, &upper, &opened)?;
    drop(opened);
    if let Some(home) = &from.home {
        let dst = to.dir().join("home");
        fsutil::remove_tree(&dst)?;
        let opened = Opened::up(home);
        crate::treecopy::copy_layer(home, &dst, &opened)?;
    }
    Ok(())
}

/// The snapshots of one state directory.
pub struct Saved {
    root: PathBuf,
}

impl Saved {
    /// The snapshots under `state_root` (`ROOT/saved`, made owner-only when
    /// missing).
    pub fn open(state_root: &Path) -> Result<Saved, SavedError> {
        let root = state_root.join("saved");
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&root)
            .map_err(io_err("create", &root))?;
        Ok(Saved { root })
    }

    fn read_info(&self, name: &str) -> Option<SavedInfo> {
        let bytes = fs::read(self.root.join(name).join("meta.json")).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    /// The snapshots `owner` may see (every one for `None`, the machine's
    /// owner), oldest first.
    pub fn list(&self, owner: Option<&str>) -> Vec<SavedInfo> {
        let mut out: Vec<SavedInfo> = fs::read_dir(&self.root)
            .map(|rd| {
                rd.flatten()
                    .filter_map(|e| {
                        let name = e.file_name().to_str()?.to_string();
                        (!name.starts_with('.')).then(|| self.read_info(&name))?
                    })
                    .filter(|i| owner.is_none_or(|o| i.owner == o))
                    .collect()
            })
            .unwrap_or_default();
        out.sort_by(|a, b| (a.created_ms, &a.name).cmp(&(b.created_ms, &b.name)));
        out
    }

    /// Snapshot `name`, when `owner` may use it (`None`: the machine's
    /// owner, who may use every one). Another owner's is not found.
    pub fn get(&self, name: &str, owner: Option<&str>) -> Result<SavedInfo, SavedError> {
        validate_name("snapshot name", name)?;
        match self.read_info(name) {
            Some(i) if owner.is_none_or(|o| i.owner == o) => Ok(i),
            _ => Err(SavedError::NotFound(name.to_string())),
        }
    }

    /// Where snapshot `info` keeps its layer, home and spec.
    pub fn dir(&self, info: &SavedInfo) -> PathBuf {
        self.root.join(&info.name)
    }

    /// Save `state` (of sandbox `sb`, whose resolved spec is the file
    /// `spec`) as snapshot `name`, owned by `owner`. Bounded per owner in
    /// number and bytes, counted before the copy and again after it, one
    /// save at a time (of any process: a lock file of the store), so that
    /// saves made at once cannot each pass a bound the others fill.
    pub fn save(
        &self,
        name: &str,
        owner: &str,
        sb: &Sandbox,
        state: &StateOf,
        spec: &Path,
    ) -> Result<SavedInfo, SavedError> {
        validate_name("snapshot name", name)?;
        let lock_path = self.root.join(".lock");
        let lock = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(&lock_path)
            .map_err(io_err("open", &lock_path))?;
        lock.lock().map_err(io_err("lock", &lock_path))?;
        let dir = self.root.join(name);
        if dir.exists() {
            return Err(SavedError::Exists(name.to_string()));
        }
        let mine = self.list(Some(owner));
        if mine.len() >= MAX_PER_OWNER {
            return Err(SavedError::TooMany {
                owner: owner.to_string(),
            });
        }
        // Saturating: a tree that cannot be measured is `u64::MAX`.
        let held = mine.iter().fold(0u64, |a, i| a.saturating_add(i.bytes));
        let size = fsutil::tree_size(&state.upper)
            .saturating_add(state.home.as_deref().map(fsutil::tree_size).unwrap_or(0));
        if held.saturating_add(size) > MAX_BYTES_PER_OWNER {
            return Err(SavedError::TooLarge {
                owner: owner.to_string(),
                would: held + size,
            });
        }
        let tmp = self.root.join(format!(".{name}.partial"));
        fsutil::remove_tree(&tmp)?;
        let made = (|| {
            fs::DirBuilder::new()
                .mode(0o700)
                .create(&tmp)
                .map_err(io_err("create", &tmp))?;
            // What the copies cost, priced as they were made.
            let opened = Opened::up(&state.upper);
            let mut bytes = crate::treecopy::copy_layer(&state.upper, &tmp.join("upper"), &opened)?;
            drop(opened);
            if let Some(home) = &state.home {
                let opened = Opened::up(home);
                let home = crate::treecopy::copy_layer(home, &tmp.join("home"), &opened)?;
                bytes = bytes.saturating_add(home);
            }
            fs::copy(spec, tmp.join("spec.json")).map_err(io_err("copy", spec))?;
            let own_workspace = sb
                .dir()
                .parent()
                .and_then(Path::parent)
                .map(|root| root.join("workspaces").join(sb.name()))
                .and_then(|w| fs::canonicalize(w).ok())
                .is_some_and(|w| w == sb.meta().workspace);
            let info = SavedInfo {
                name: name.to_string(),
                owner: owner.to_string(),
                source: sb.name().to_string(),
                created_ms: now_ms(),
                bytes,
                workspace: sb.meta().workspace.clone(),
                own_workspace,
                layout: sb.meta().layout,
                profile: sb.meta().profile.clone(),
                digest: digest(&tmp)?,
            };
            // What was copied, not what was measured before the copy:
            // the layer may have grown meanwhile.
            if held + info.bytes > MAX_BYTES_PER_OWNER {
                return Err(SavedError::TooLarge {
                    owner: owner.to_string(),
                    would: held + info.bytes,
                });
            }
            crate::store::write_json(&tmp.join("meta.json"), &info)?;
            fs::rename(&tmp, &dir).map_err(io_err("rename", &tmp))?;
            Ok(info)
        })();
        if made.is_err() {
            let _ = fsutil::remove_tree(&tmp);
        }
        made
    }

    /// Check snapshot `info` against its digest: an error says what is
    /// damaged.
    pub fn verify(&self, info: &SavedInfo) -> Result<(), SavedError> {
        let dir = self.dir(info);
        let damaged = |why: String| SavedError::Damaged {
            name: info.name.clone(),
            why,
        };
        if !dir.join("upper").is_dir() {
            return Err(damaged("its layer is missing".into()));
        }
        if !dir.join("spec.json").is_file() {
            return Err(damaged("its spec is missing".into()));
        }
        let now = digest(&dir).map_err(|e| damaged(e.to_string()))?;
        if now != info.digest {
            return Err(damaged(
                "its files are not what was saved (changed, truncated or removed)".into(),
            ));
        }
        Ok(())
    }

    /// Delete snapshot `name` of `owner` (`None`: the machine's owner).
    pub fn delete(&self, name: &str, owner: Option<&str>) -> Result<SavedInfo, SavedError> {
        let info = self.get(name, owner)?;
        fsutil::remove_tree(&self.root.join(name))?;
        Ok(info)
    }
}

/// A verified snapshot's state, to copy into a new sandbox.
pub fn state_of(saved: &Saved, info: &SavedInfo) -> StateOf {
    let dir = saved.dir(info);
    let home = dir.join("home");
    StateOf {
        upper: dir.join("upper"),
        home: home.is_dir().then_some(home),
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// SHA-256 over the snapshot's spec and every entry of its layer and home:
/// path, type, mode, size, and a regular file's content or a link's
/// target, in a fixed order.
fn digest(dir: &Path) -> Result<String, SavedError> {
    let mut h = Sha256::new();
    let spec = dir.join("spec.json");
    let bytes = fs::read(&spec).map_err(io_err("read", &spec))?;
    h.update((bytes.len() as u64).to_le_bytes());
    h.update(&bytes);
    for part in ["upper", "home"] {
        let root = dir.join(part);
        if root.exists() {
            h.update(part.as_bytes());
            fsutil::deep_stack(|| walk(&root, &root, &mut h))?;
        }
    }
    Ok(h.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

fn walk(root: &Path, path: &Path, h: &mut Sha256) -> Result<(), SavedError> {
    let meta = fs::symlink_metadata(path).map_err(io_err("read", path))?;
    let rel = path.strip_prefix(root).unwrap_or(path);
    h.update(rel.as_os_str().as_encoded_bytes());
    h.update([0]);
    h.update(meta.mode().to_le_bytes());
    if meta.is_dir() {
        let mut names: Vec<PathBuf> = fs::read_dir(path)
            .map_err(io_err("read", path))?
            .flatten()
            .map(|e| e.path())
            .collect();
        names.sort();
        h.update((names.len() as u64).to_le_bytes());
        for n in names {
            walk(root, &n, h)?;
        }
    } else if meta.is_file() {
        h.update(meta.len().to_le_bytes());
        let mut f = fs::File::open(path).map_err(io_err("read", path))?;
        let mut buf = vec![0u8; 64 << 10];
        let mut seen = 0u64;
        loop {
            let n = f.read(&mut buf).map_err(io_err("read", path))?;
            if n == 0 {
                break;
            }
            seen += n as u64;
            h.update(&buf[..n]);
        }
        h.update(seen.to_le_bytes());
    } else if meta.file_type().is_symlink() {
        let target = fs::read_link(path).map_err(io_err("read", path))?;
        h.update(target.as_os_str().as_encoded_bytes());
    } else {
        h.update(meta.rdev().to_le_bytes());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;
    use crate::store::{CreateOptions, Store};

    fn setup(tag: &str) -> (PathBuf, Store, Sandbox) {
        let root = std::env::temp_dir().join(format!("warden-saved-{tag}-{}", std::process::id()));
        let _ = fsutil::remove_tree(&root);
        fs::create_dir_all(root.join("ws")).unwrap();
        let store = Store::open(root.join("state")).unwrap();
        let sb = store
            .create("src", &CreateOptions::new(root.join("ws")))
            .unwrap();
        fs::write(sb.upper().join("made.txt"), "in the layer\n").unwrap();
        fs::create_dir_all(sb.dir().join("home")).unwrap();
        fs::write(sb.dir().join("home/.profile"), "home\n").unwrap();
        fs::write(sb.dir().join("sandbox.json"), "{}").unwrap();
        (root, store, sb)
    }

    #[test]
    fn a_snapshot_is_owned_verified_and_copied_into_a_new_sandbox() {
        let (root, store, sb) = setup("own");
        let saved = Saved::open(&root.join("state")).unwrap();
        let info = saved
            .save(
                "s1",
                "token:a",
                &sb,
                &StateOf::of(&sb),
                &sb.dir().join("sandbox.json"),
            )
            .unwrap();
        assert_eq!(info.source, "src");
        assert!(matches!(
            saved.get("s1", Some("token:b")),
            Err(SavedError::NotFound(_))
        ));
        assert!(saved.list(Some("token:b")).is_empty());
        assert_eq!(saved.list(None).len(), 1);
        saved.verify(&info).unwrap();
        let new = store
            .create("dst", &CreateOptions::new(root.join("ws")))
            .unwrap();
        copy_state(&state_of(&saved, &info), &new).unwrap();
        assert_eq!(
            fs::read_to_string(new.upper().join("made.txt")).unwrap(),
            "in the layer\n"
        );
        assert_eq!(
            fs::read_to_string(new.dir().join("home/.profile")).unwrap(),
            "home\n"
        );
        fsutil::remove_tree(&root).unwrap();
    }

    #[test]
    fn a_damaged_or_truncated_snapshot_is_refused() {
        let (root, _store, sb) = setup("damage");
        let saved = Saved::open(&root.join("state")).unwrap();
        let info = saved
            .save(
                "s1",
                "owner",
                &sb,
                &StateOf::of(&sb),
                &sb.dir().join("sandbox.json"),
            )
            .unwrap();
        let file = saved.dir(&info).join("upper/made.txt");
        fs::write(&file, "in the").unwrap();
        assert!(matches!(
            saved.verify(&info),
            Err(SavedError::Damaged { .. })
        ));
        fs::write(&file, "in the layer\n").unwrap();
        saved.verify(&info).unwrap();
        fs::write(&file, "IN the layer\n").unwrap();
        assert!(matches!(
            saved.verify(&info),
            Err(SavedError::Damaged { .. })
        ));
        fsutil::remove_tree(&root).unwrap();
    }

    #[test]
    fn an_owner_keeps_a_bounded_number_of_snapshots() {
        let (root, _store, sb) = setup("bound");
        let saved = Saved::open(&root.join("state")).unwrap();
        let spec = sb.dir().join("sandbox.json");
        for i in 0..MAX_PER_OWNER {
            saved
                .save(&format!("s{i}"), "token:a", &sb, &StateOf::of(&sb), &spec)
                .unwrap();
        }
        assert!(matches!(
            saved.save("one-more", "token:a", &sb, &StateOf::of(&sb), &spec),
            Err(SavedError::TooMany { .. })
        ));
        // Another owner's count is its own.
        saved
            .save("theirs", "token:b", &sb, &StateOf::of(&sb), &spec)
            .unwrap();
        assert!(matches!(
            saved.save("theirs", "token:a", &sb, &StateOf::of(&sb), &spec),
            Err(SavedError::Exists(_)) | Err(SavedError::TooMany { .. })
        ));
        fsutil::remove_tree(&root).unwrap();
    }
}
