//! Changing the upper layer itself: discarding changes, snapshots of the
//! layer and restoring them. All of it happens under the sandbox's lock,
//! never while the overlay is mounted (the kernel does not expect its upper
//! directory to change underneath a mount).

use crate::beneath::{self, Tree};
use crate::diff::normalize_filter;
use crate::fsutil::{self, FsError};
use crate::overlay;
use crate::store::{self, validate_name, FsTime, Layout, Locked, Sandbox, StoreError};
use rustix::fs::FileType;
use serde::{Deserialize, Serialize};
use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum LayerError {
    #[error("cannot discard {}: its directory {d} was deleted as a whole in the sandbox; discard {d} instead", crate::printable_path(.path), d = crate::printable_path(.dir))]
    HiddenByDeletedDir { path: PathBuf, dir: PathBuf },
    #[error("a snapshot labelled {0} already exists")]
    SnapshotExists(String),
    #[error("no snapshot labelled {0}; `warden snapshot NAME --list` shows them")]
    NoSnapshot(String),
    #[error("sandbox {name} keeps {MAX_SNAPSHOTS} snapshots already, the most a sandbox may keep (each costs up to its `resources.disk` of the host's disk): remove one with `warden snapshot {name} --delete LABEL` (`warden snapshot {name} --list` shows them)")]
    TooManySnapshots { name: String },
    #[error("cannot discard {}: {} in the sandbox's layer is a symbolic link, and warden never follows a link the sandbox made; discard {} itself", crate::printable_path(.path), crate::printable_path(.link), crate::printable_path(.link))]
    ThroughLink { path: PathBuf, link: PathBuf },
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
    #[error(transparent)]
    Diff(#[from] crate::diff::DiffError),
}

/// The real workspace, opened once and checked to be the sandbox's own
/// directory ([`crate::real_of`]): a path through a link, or another
/// directory at its path, is refused; a missing one is an empty tree.
/// Whatever a discard reads of the host's side, it reads through this.
fn checked_workspace(meta: &crate::Meta) -> Result<Tree, LayerError> {
    Ok(crate::real_of(meta)?)
}

fn io_err<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> LayerError + 'a {
    move |source| LayerError::Io {
        op,
        path: path.to_path_buf(),
        source,
    }
}

/// The most snapshots a sandbox keeps: each is a copy of a layer of at
/// most `--disk` bytes, so what snapshots take of the host's disk is at
/// most this many times `--disk`.
pub const MAX_SNAPSHOTS: usize = 16;

/// One snapshot of a sandbox's upper layer.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SnapshotInfo {
    pub label: String,
    pub created: FsTime,
    /// Bytes of regular files in the copied layer.
    pub bytes: u64,
}

impl Sandbox {
    /// The sandbox's snapshots, oldest first.
    pub fn snapshot_list(&self) -> Result<Vec<SnapshotInfo>, LayerError> {
        let dir = self.snapshots();
        let mut out = Vec::new();
        for e in fs::read_dir(&dir).map_err(io_err("read", &dir))?.flatten() {
            let path = e.path().join("meta.json");
            if let Ok(bytes) = fs::read(&path) {
                if let Ok(info) = serde_json::from_slice::<SnapshotInfo>(&bytes) {
                    out.push(info);
                }
            }
        }
        out.sort_by(|a, b| (a.created, &a.label).cmp(&(b.created, &b.label)));
        Ok(out)
    }
}

impl Locked<'_> {
    /// Throw away the sandbox's changes at or below `paths` (relative to
    /// the workspace, or absolute inside it), or all of them when `paths` is
    /// empty: their entries leave the upper layer, whiteouts included, so
    /// deleted files reappear. A path hidden below an opaque directory is
    /// brought back by copying the real entry into the layer.
    ///
    /// Each path is judged on its own, and only one at or below which the
    /// layer holds a change is acted on: a path that merely rides along with
    /// another is left alone. Nothing is resolved by path: the layer and
    /// the real workspace are reached beneath their descriptors, entries
    /// are removed with `unlinkat` from their directory's descriptor, and a
    /// symbolic link of the layer on a path's way is never followed; a path
    /// through one is refused ([`LayerError::ThroughLink`]) when no other
    /// path named is a change.
    pub fn discard(&self, paths: &[PathBuf]) -> Result<(), LayerError> {
        let meta = self.fresh_meta()?;
        let overlay = meta.layout == Layout::Overlay;
        let mut rels = Vec::new();
        for p in paths {
            let rel = normalize_filter(&meta.workspace, p)?;
            if rel.as_os_str().is_empty() {
                rels.clear();
                break;
            }
            rels.push(rel);
        }
        if rels.is_empty() {
            return if overlay {
                self.discard_all()
            } else {
                self.discard_in_copy(&meta)
            };
        }
        let upper = Tree::layer(&self.sandbox.upper()).map_err(io_err("open", Path::new("")))?;
        let real = checked_workspace(&meta)?;
        let mut acted = Vec::new();
        let mut through = None;
        for rel in rels {
            let above = above(&upper, &rel, overlay)?;
            if let Some(link) = above.link {
                through.get_or_insert(LayerError::ThroughLink { path: rel, link });
                continue;
            }
            if self.pending(&meta, &real, &rel)? {
                acted.push((rel, above.opaque || !overlay));
            }
        }
        if acted.is_empty() {
            return through.map_or(Ok(()), Err);
        }
        // A change thrown away is no longer what anyone reviewed: made
        // again, byte for byte, it is shown again before it lands.
        // Forgotten first, so that a record that cannot be written leaves
        // the layer as it was.
        let thrown: Vec<PathBuf> = acted.iter().map(|(rel, _)| rel.clone()).collect();
        self.sandbox.forget_reviews(&thrown, true)?;
        for (rel, restore) in acted {
            match upper.parent(&rel) {
                Ok((dir, name)) => fsutil::remove_at(&dir, name, &rel)?,
                Err(e) if beneath::absent(&e) => {}
                Err(e) => return Err(io_err("open", &rel)(e)),
            }
            // The real entry shows through again by itself, unless an
            // opaque directory above hides it (or the layer is a copy).
            if restore && real.lstat(&rel).map_err(io_err("read", &rel))?.is_some() {
                make_parents(&upper, &rel)?;
                crate::treecopy::copy_below(&real, &rel, &upper, &rel, None)?;
            }
        }
        Ok(())
    }

    /// Whether the layer holds a change at or below `rel`. A layer too deep
    /// to review there holds one: discarding it is the way out.
    fn pending(&self, meta: &store::Meta, real: &Tree, rel: &Path) -> Result<bool, LayerError> {
        let opts = crate::diff::DiffOptions {
            paths: vec![rel.to_path_buf()],
            content: false,
            patches: false,
            renames: false,
            ..Default::default()
        };
        match crate::changes_in(meta, &self.sandbox.upper(), real, &opts) {
            Ok(found) => Ok(!found.is_empty()),
            Err(crate::diff::DiffError::TooLong { .. }) => Ok(true),
            Err(e) => Err(e.into()),
        }
    }

    /// Discard every change of an overlay sandbox: an empty layer.
    fn discard_all(&self) -> Result<(), LayerError> {
        self.replace_upper(Source::Empty)?;
        let mut meta = self.fresh_meta()?;
        meta.baseline = self.new_baseline()?;
        meta.own_writes.clear();
        self.write_meta(&meta)?;
        Ok(())
    }

    /// Discard every change of a copy-layout sandbox: the copy becomes a
    /// copy of the real workspace again.
    fn discard_in_copy(&self, meta: &crate::Meta) -> Result<(), LayerError> {
        let real = checked_workspace(meta)?;
        // Taken before the copy: a host change made while copying is newer.
        let baseline = self.new_baseline()?;
        self.replace_upper(Source::Real(&real))?;
        let mut meta = self.fresh_meta()?;
        meta.baseline = baseline;
        meta.own_writes.clear();
        self.write_meta(&meta)?;
        Ok(())
    }

    /// Copy the upper layer to `snapshots/LABEL/` (reflinks where the file
    /// system has them). Without a label, one is made from the time.
    pub fn snapshot(&self, label: Option<&str>) -> Result<SnapshotInfo, LayerError> {
        let created = FsTime::now();
        let label = match label {
            Some(l) => l.to_string(),
            None => format!("snap-{}-{:09}", created.sec, created.nsec),
        };
        validate_name("snapshot label", &label)?;
        let dir = self.sandbox.snapshots().join(&label);
        // Every entry counts, a half-made one too: what is on disk is
        // what is bounded.
        let held = match fs::read_dir(self.sandbox.snapshots()) {
            Ok(rd) => rd.count(),
            Err(e) if e.kind() == io::ErrorKind::NotFound => 0,
            Err(e) => return Err(io_err("list", &self.sandbox.snapshots())(e)),
        };
        if held >= MAX_SNAPSHOTS && !dir.exists() {
            return Err(LayerError::TooManySnapshots {
                name: self.sandbox.name().to_string(),
            });
        }
        match fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                return Err(LayerError::SnapshotExists(label))
            }
            Err(e) => return Err(io_err("create", &dir)(e)),
        }
        let made = (|| {
            let tmp = dir.join("upper.partial");
            let upper = self.sandbox.upper();
            let opened = fsutil::Opened::up(&upper);
            // What the copy costs, priced as it was made.
            let bytes = crate::treecopy::copy_layer(&upper, &tmp, &opened)?;
            fs::rename(&tmp, dir.join("upper")).map_err(io_err("rename", &tmp))?;
            let info = SnapshotInfo {
                label: label.clone(),
                created,
                bytes,
            };
            store::write_json(&dir.join("meta.json"), &info)?;
            Ok(info)
        })();
        if made.is_err() {
            let _ = fsutil::remove_tree(&dir);
        }
        made
    }

    /// Make the upper layer what it was at snapshot `label`. The swap is
    /// one `renameat2(RENAME_EXCHANGE)`: at every instant the sandbox has
    /// either its old layer or the restored one.
    pub fn restore(&self, label: &str) -> Result<(), LayerError> {
        validate_name("snapshot label", label)?;
        let snap = self.sandbox.snapshots().join(label).join("upper");
        if !snap.is_dir() {
            return Err(LayerError::NoSnapshot(label.to_string()));
        }
        self.replace_upper(Source::Layer(&snap))
    }

    /// Delete snapshot `label`.
    pub fn delete_snapshot(&self, label: &str) -> Result<(), LayerError> {
        validate_name("snapshot label", label)?;
        let dir = self.sandbox.snapshots().join(label);
        if !dir.is_dir() {
            return Err(LayerError::NoSnapshot(label.to_string()));
        }
        fsutil::remove_tree(&dir)?;
        Ok(())
    }

    /// Swap in a new upper layer: a copy of `from`, or an empty one.
    fn replace_upper(&self, from: Source<'_>) -> Result<(), LayerError> {
        let sb = self.sandbox;
        // The layer's changes are replaced whole (a snapshot restored, all
        // discarded): none of them is what anyone reviewed any more.
        sb.forget_reviews(&[], true)?;
        let upper = sb.upper();
        let next = sb.dir().join("upper.next");
        fsutil::remove_tree(&next)?;
        // A copy refused half way (a bound of its own, the host's
        // fault) leaves nothing of itself behind.
        let copied = match &from {
            Source::Real(real) => crate::treecopy::copy_real(real, &next),
            Source::Layer(src) => {
                let opened = fsutil::Opened::up(src);
                crate::treecopy::copy_layer(src, &next, &opened).map(|_| ())
            }
            Source::Empty => Ok(()),
        };
        if let Err(e) = copied {
            let _ = fsutil::remove_tree(&next);
            return Err(e.into());
        }
        match from {
            Source::Real(_) | Source::Layer(_) => {}
            Source::Empty => {
                // An empty layer: the merged root shows the workspace's
                // mode, read from the checked directory (a missing one:
                // the recorded path's, as before).
                let meta = self.fresh_meta()?;
                let workspace = meta.workspace.clone();
                let mode = match checked_workspace(&meta)?.lstat(Path::new("")) {
                    Ok(Some(st)) => st.st_mode & 0o7777,
                    Ok(None) => fs::metadata(&workspace)
                        .map(|m| m.permissions().mode() & 0o7777)
                        .map_err(io_err("read", &workspace))?,
                    Err(e) => return Err(io_err("read", &workspace)(e)),
                };
                fs::DirBuilder::new()
                    .mode(0o700)
                    .create(&next)
                    .map_err(io_err("create", &next))?;
                fs::set_permissions(&next, fs::Permissions::from_mode(mode))
                    .map_err(io_err("set the mode of", &next))?;
            }
        }
        rustix::fs::renameat_with(
            rustix::fs::CWD,
            &next,
            rustix::fs::CWD,
            &upper,
            rustix::fs::RenameFlags::EXCHANGE,
        )
        .map_err(|e| io_err("swap in", &upper)(e.into()))?;
        // `next` now holds the old layer.
        fsutil::remove_tree(&next)?;
        // The kernel's leftovers in work/ belong to the old layer.
        let work = sb.work();
        fsutil::remove_tree(&work)?;
        fs::DirBuilder::new()
            .mode(0o700)
            .create(&work)
            .map_err(io_err("create", &work))?;
        Ok(())
    }
}

/// What a new upper layer is made of.
enum Source<'a> {
    /// A copy of the real workspace, through its checked descriptor.
    Real(&'a Tree),
    /// A copy of a layer of warden's own (a snapshot).
    Layer(&'a Path),
    /// Nothing.
    Empty,
}

/// What lies above `rel` in the layer.
struct Above {
    /// An opaque directory hides the real entries below it.
    opaque: bool,
    /// The first symbolic link on the way, if any.
    link: Option<PathBuf>,
}

/// Read the layer's entries above `rel`, from the top down, each beneath
/// the layer's descriptor: a whiteout above (a directory deleted as a
/// whole) is refused, a link is reported, and nothing below a missing
/// entry is looked at.
fn above(upper: &Tree, rel: &Path, overlay_marks: bool) -> Result<Above, LayerError> {
    let mut out = Above {
        opaque: false,
        link: None,
    };
    let mut ancestors: Vec<&Path> = rel
        .ancestors()
        .skip(1)
        .filter(|a| !a.as_os_str().is_empty())
        .collect();
    ancestors.reverse();
    for a in ancestors {
        let Some(st) = upper.lstat(a).map_err(io_err("read", a))? else {
            break;
        };
        if overlay_marks && overlay::is_whiteout_at(upper, a, &st) {
            return Err(LayerError::HiddenByDeletedDir {
                path: rel.to_path_buf(),
                dir: a.to_path_buf(),
            });
        }
        match beneath::file_type(&st) {
            FileType::Symlink => {
                out.link = Some(a.to_path_buf());
                break;
            }
            FileType::Directory => {
                out.opaque |= overlay_marks && overlay::is_opaque_at(upper, a);
            }
            _ => break,
        }
    }
    Ok(out)
}

/// Make the missing directories above `rel` in the layer (mode 0755),
/// each with `mkdirat` from its parent's descriptor.
fn make_parents(upper: &Tree, rel: &Path) -> Result<(), LayerError> {
    let mut ancestors: Vec<&Path> = rel
        .ancestors()
        .skip(1)
        .filter(|a| !a.as_os_str().is_empty())
        .collect();
    ancestors.reverse();
    for a in ancestors {
        let (dir, name) = upper.parent(a).map_err(io_err("create", a))?;
        match rustix::fs::mkdirat(&dir, name, rustix::fs::Mode::from_raw_mode(0o755)) {
            Ok(()) | Err(rustix::io::Errno::EXIST) => {}
            Err(e) => return Err(io_err("create", a)(e.into())),
        }
    }
    Ok(())
}
