//! Changing the upper layer itself: discarding changes, snapshots of the
//! layer and restoring them. All of it happens under the sandbox's lock,
//! never while the overlay is mounted (the kernel does not expect its upper
//! directory to change underneath a mount).

use crate::diff::normalize_filter;
use crate::fsutil::{self, FsError};
use crate::overlay;
use crate::store::{self, validate_name, FsTime, Layout, Locked, Sandbox, StoreError};
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
    pub fn discard(&self, paths: &[PathBuf]) -> Result<(), LayerError> {
        let sb = self.sandbox;
        let upper = sb.upper();
        let meta = self.fresh_meta()?;
        if meta.layout == Layout::Copy {
            return self.discard_in_copy(paths, &meta.workspace);
        }
        if paths.is_empty() {
            self.replace_upper(None)?;
            let mut meta = self.fresh_meta()?;
            meta.baseline = self.new_baseline()?;
            meta.own_writes.clear();
            self.write_meta(&meta)?;
            return Ok(());
        }
        let workspace = self.fresh_meta()?.workspace;
        for p in paths {
            let rel = normalize_filter(&workspace, p)?;
            if rel.as_os_str().is_empty() {
                return self.discard(&[]);
            }
            // What hides the real entry above `rel` in the layer?
            let mut opaque_above = false;
            for a in rel
                .ancestors()
                .skip(1)
                .filter(|a| !a.as_os_str().is_empty())
            {
                let ua = upper.join(a);
                match fs::symlink_metadata(&ua) {
                    Ok(m) if overlay::is_whiteout(&ua, &m) => {
                        return Err(LayerError::HiddenByDeletedDir {
                            path: rel.clone(),
                            dir: a.to_path_buf(),
                        })
                    }
                    Ok(m) if m.is_dir() => opaque_above |= overlay::is_opaque(&ua),
                    _ => {}
                }
            }
            let up = upper.join(&rel);
            fsutil::remove_tree(&up)?;
            let real = workspace.join(&rel);
            if opaque_above && fs::symlink_metadata(&real).is_ok() {
                if let Some(parent) = up.parent() {
                    fs::DirBuilder::new()
                        .recursive(true)
                        .mode(0o755)
                        .create(parent)
                        .map_err(io_err("create", parent))?;
                }
                fsutil::copy_tree(&real, &up)?;
            }
        }
        Ok(())
    }

    /// Discard in a copy-layout sandbox: the copy's entries at `paths` (or
    /// the whole copy) become copies of the real ones again.
    fn discard_in_copy(&self, paths: &[PathBuf], workspace: &Path) -> Result<(), LayerError> {
        // Taken before the copy: a host change made while copying is newer.
        let baseline = self.new_baseline()?;
        if paths.is_empty() {
            self.replace_upper(Some(workspace))?;
        } else {
            let upper = self.sandbox.upper();
            for p in paths {
                let rel = normalize_filter(workspace, p)?;
                if rel.as_os_str().is_empty() {
                    return self.discard_in_copy(&[], workspace);
                }
                let copy = upper.join(&rel);
                fsutil::remove_tree(&copy)?;
                let real = workspace.join(&rel);
                if fs::symlink_metadata(&real).is_ok() {
                    fsutil::copy_tree(&real, &copy)?;
                }
            }
        }
        if paths.is_empty() {
            let mut meta = self.fresh_meta()?;
            meta.baseline = baseline;
            meta.own_writes.clear();
            self.write_meta(&meta)?;
        }
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
            fsutil::copy_layer(&upper, &tmp, &opened)?;
            fs::rename(&tmp, dir.join("upper")).map_err(io_err("rename", &tmp))?;
            let info = SnapshotInfo {
                label: label.clone(),
                created,
                bytes: fsutil::tree_size(&dir.join("upper")),
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
        self.replace_upper(Some(&snap))
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
    fn replace_upper(&self, from: Option<&Path>) -> Result<(), LayerError> {
        let sb = self.sandbox;
        let upper = sb.upper();
        let next = sb.dir().join("upper.next");
        fsutil::remove_tree(&next)?;
        match from {
            Some(src) => {
                let opened = fsutil::Opened::up(src);
                fsutil::copy_layer(src, &next, &opened)?
            }
            None => {
                // An empty layer: the merged root shows the workspace's mode.
                let workspace = self.fresh_meta()?.workspace;
                let mode = fs::metadata(&workspace)
                    .map(|m| m.permissions().mode() & 0o7777)
                    .map_err(io_err("read", &workspace))?;
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
