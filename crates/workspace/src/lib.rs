//! Reviewable workspaces: the sandbox writes into an overlayfs upper layer
//! over the real workspace, and a person diffs, commits, discards or
//! snapshots those changes afterwards.
//!
//! This crate owns warden's state directory for named sandboxes
//! ([`Store`]), the reading of overlay layers ([`diff_layers`]), the
//! dangerous-change flags, the commit into the real workspace, discards and
//! snapshots. It never mounts anything and never runs sandboxed code: the
//! jail mounts the overlay with [`MountOptions`] (see [`overlay`] for the
//! options that work on this kernel and why) while it holds the sandbox's
//! lock.

#![forbid(unsafe_code)]
// Below the doors nothing prints: a library reports through its return
// values and observers, and each front door chooses what the person sees
// (tests may say why they skipped).
#![cfg_attr(not(test), deny(clippy::print_stdout, clippy::print_stderr))]

mod anchor;
mod beneath;
mod change;
pub mod commit;
pub mod copy;
mod credentials;
pub mod diff;
pub mod exposure;
pub mod flags;
pub mod fsutil;
mod git;
mod ignored;
mod judge;
pub mod layer;
mod listing;
pub mod overlay;
mod real;
pub mod review;
pub mod saved;
pub mod store;
pub mod treecopy;
mod view;
mod wire;

pub use anchor::WorkspaceId;
pub use change::{is_format, printable, printable_name, printable_path};
pub use commit::{CommitError, CommitOptions, CommitReport, Conflict, Decision};
pub use copy::{diff_copy, prepare_copy, CopyError};
pub use diff::{
    diff_layers, normalize_filter, stat, Change, ChangeKind, Content, DiffError, DiffOptions,
    Entry, EntryKind,
};
pub use flags::Flag;
pub use git::host_hooks_paths;
pub use layer::{LayerError, SnapshotInfo, MAX_SNAPSHOTS};
pub use listing::{left_out_line, Listing};
pub use overlay::{MountOptions, OverlayError};
pub use store::{
    default_state_dir, validate_name, CreateOptions, FsTime, Layout, ListEntry, Locked, Meta,
    Sandbox, SandboxState, Store, StoreError, UnsavedMark,
};

impl Sandbox {
    /// The sandbox's changes relative to its real workspace.
    pub fn diff(&self, opts: &DiffOptions) -> Result<Vec<Change>, DiffError> {
        let mut opts = opts.clone();
        opts.runs_on_host
            .extend(self.meta().runs_on_host.iter().cloned());
        opts.paths = opts
            .paths
            .iter()
            .map(|p| normalize_filter(&self.meta().workspace, p))
            .collect::<Result<_, _>>()?;
        changes(self.meta(), &self.layer(), &opts)
    }
}

/// The changes of a sandbox with metadata `meta` and layer `upper`.
pub(crate) fn changes(
    meta: &Meta,
    upper: &std::path::Path,
    opts: &DiffOptions,
) -> Result<Vec<Change>, DiffError> {
    // The workspace the sandbox was created over, or none: never another
    // directory that a link or a replacement put at its path.
    match anchor::open_checked(&meta.workspace, meta.workspace_id) {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(source) => {
            return Err(DiffError::Read {
                path: std::path::PathBuf::new(),
                source,
            })
        }
    }
    match meta.layout {
        Layout::Overlay => diff_layers(upper, &meta.workspace, opts),
        Layout::Copy => diff::diff_trees(upper, &meta.workspace, opts),
    }
}
