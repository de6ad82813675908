//! The fallback where overlayfs cannot be mounted: the sandbox works on a
//! copy of the workspace (reflinked where the file system allows), and the
//! diff compares the copy with the real workspace.
//!
//! Unlike the overlay diff, this one must scan both trees in full: without
//! an upper layer nothing records which files were touched. Its cost is
//! O(files in the workspace).

use crate::diff::{Change, DiffError, DiffOptions};
use crate::fsutil::FsError;
use std::path::Path;

#[derive(Debug, thiserror::Error)]
pub enum CopyError {
    #[error("cannot prepare a copy of workspace {src} at {dst}")]
    Prepare {
        src: std::path::PathBuf,
        dst: std::path::PathBuf,
        #[source]
        source: FsError,
    },
    #[error(transparent)]
    Diff(#[from] DiffError),
}

/// Copy `workspace` to the new directory `dst` for the jail to bind in place
/// of the real one.
pub fn prepare_copy(workspace: &Path, dst: &Path) -> Result<(), CopyError> {
    crate::treecopy::copy_tree(workspace, dst).map_err(|source| CopyError::Prepare {
        src: workspace.to_path_buf(),
        dst: dst.to_path_buf(),
        source,
    })
}

/// The changes in `copy` relative to `workspace` (full scan of both).
pub fn diff_copy(
    copy: &Path,
    workspace: &Path,
    opts: &DiffOptions,
) -> Result<Vec<Change>, CopyError> {
    Ok(crate::diff::diff_trees(copy, workspace, opts)?)
}
