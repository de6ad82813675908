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
mod behind;
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
mod hidden;
mod hostexec;
mod ignored;
mod judge;
pub mod layer;
pub mod links;
mod listing;
mod loads;
pub mod overlay;
mod real;
pub mod review;
pub mod saved;
pub mod stop;
pub mod store;
pub mod textdiff;
pub mod treecopy;
mod unseen;
mod view;
mod wire;

pub use anchor::{
    refused_at_start, WorkspaceId, WorkspaceRefused, WORKSPACE_LINK, WORKSPACE_MOVED,
};
pub use change::{
    is_format, patch_lines, printable, printable_name, printable_path, Cut, COARSE_NOTE, NOT_SHOWN,
};
pub use commit::{CommitError, CommitOptions, CommitReport, Conflict, Decision};
pub use copy::{diff_copy, prepare_copy, CopyError};
pub use diff::{
    diff_layers, normalize_filter, stat, Change, ChangeKind, Content, DiffError, DiffOptions,
    Entry, EntryKind,
};
pub use flags::Flag;
pub use git::{host_config_includes, host_hooks_paths};
pub use layer::{LayerError, SnapshotInfo, MAX_SNAPSHOTS};
pub use listing::{left_out_line, Listing};
pub use overlay::{MountOptions, OverlayError};
pub use stop::{Leaving, Stop, Stopped};
pub use store::{
    default_state_dir, validate_name, CreateOptions, FsTime, Layout, ListEntry, Locked, Meta,
    Sandbox, SandboxState, Store, StoreError, UnsavedMark,
};

/// The refused copy somewhere in `e`'s chain, if any. This crate's errors
/// that carry an [`fsutil::FsError`] transparently are looked into: their
/// `source` skips it. (A door's own transparent wrapper of them must be
/// opened by the door.) It lives here, above `fsutil` and `saved`, so that
/// neither of those uses the other's errors.
pub fn refused_copy<'a>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a fsutil::FsError> {
    use fsutil::FsError;
    use saved::SavedError;
    let mut at = Some(e);
    while let Some(err) = at {
        let found = err
            .downcast_ref::<FsError>()
            .or(match err.downcast_ref::<SavedError>() {
                Some(SavedError::Fs(f)) => Some(f),
                _ => None,
            })
            .or(match err.downcast_ref::<LayerError>() {
                Some(LayerError::Fs(f)) => Some(f),
                _ => None,
            })
            .or(match err.downcast_ref::<StoreError>() {
                Some(StoreError::Fs(f)) => Some(f),
                _ => None,
            });
        if let Some(f) = found.filter(|f| f.code().is_some()) {
            return Some(f);
        }
        at = err.source();
    }
    None
}

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
    changes_in(meta, upper, &real_of(meta)?, opts)
}

/// The real workspace of a sandbox with metadata `meta`: the directory
/// the sandbox was created over, or none (an empty tree when it is
/// missing), never another directory that a link or a replacement put at
/// its path. Opened once and checked once: a review walks this
/// descriptor, so the directory checked is the directory read.
pub(crate) fn real_of(meta: &Meta) -> Result<beneath::Tree, DiffError> {
    beneath::Tree::real_checked(&meta.workspace, meta.workspace_id).map_err(DiffError::Workspace)
}

/// The changes of a sandbox with metadata `meta` and layer `upper`
/// against its real workspace `real` ([`real_of`]).
pub(crate) fn changes_in(
    meta: &Meta,
    upper: &std::path::Path,
    real: &beneath::Tree,
    opts: &DiffOptions,
) -> Result<Vec<Change>, DiffError> {
    #[cfg(test)]
    tests::between_check_and_walk();
    let plain = meta.layout == Layout::Copy;
    diff::diff_real(upper, &meta.workspace, real, opts, plain)
}

#[cfg(test)]
mod tests {
    //! The race between the check of the workspace's identity and the
    //! walk of its tree, made deterministic: a hook runs at the one
    //! moment between them and swaps the workspace's parent directory for
    //! another directory (a rename, no link: `RESOLVE_NO_SYMLINKS` already
    //! refuses a link on the way when a path is opened again).

    use super::*;
    use std::cell::RefCell;
    use std::path::{Path, PathBuf};

    thread_local! {
        static BETWEEN: RefCell<Option<Box<dyn FnOnce()>>> = const { RefCell::new(None) };
    }

    /// Called once the workspace is checked and before anything of it is
    /// read: runs what a test planted there, once.
    pub(super) fn between_check_and_walk() {
        if let Some(f) = BETWEEN.with(|b| b.borrow_mut().take()) {
            f()
        }
    }

    struct Scene {
        base: PathBuf,
        land: PathBuf,
        sb: Sandbox,
        store: Store,
    }

    /// `base/proj/w2/land` (a project with `notes`), a sandbox over it
    /// whose layer changed `notes` and added `planted`, and
    /// `base/victim/land/notes` holding a host secret.
    fn scene(tag: &str) -> Scene {
        let base = std::env::temp_dir().join(format!("warden-race-{tag}-{}", std::process::id()));
        let _ = fsutil::remove_tree(&base);
        let land = base.join("proj/w2/land");
        std::fs::create_dir_all(&land).expect("mkdir");
        std::fs::write(land.join("notes"), "the project's notes\n").expect("write");
        std::fs::create_dir_all(base.join("victim/land")).expect("mkdir");
        std::fs::write(base.join("victim/land/notes"), "HOST-SECRET-RACE\n").expect("write");
        std::fs::write(base.join("victim/land/.gitignore"), "*\n").expect("write");
        let store = Store::open(base.join("state")).expect("store");
        let sb = store
            .create("race", &CreateOptions::new(&land))
            .expect("create");
        std::fs::write(
            sb.upper().join("notes"),
            "the project's notes\nchanged in the sandbox\n",
        )
        .expect("write");
        std::fs::write(sb.upper().join("planted"), "planted\n").expect("write");
        Scene {
            base,
            land,
            sb,
            store,
        }
    }

    /// At the moment between check and walk, `proj/w2` goes aside and the
    /// victim's directory takes its place.
    fn swap_between(base: &Path) {
        let base = base.to_path_buf();
        BETWEEN.with(|b| {
            *b.borrow_mut() = Some(Box::new(move || {
                std::fs::rename(base.join("proj/w2"), base.join("proj/w2.old")).expect("aside");
                std::fs::rename(base.join("victim"), base.join("proj/w2")).expect("swap in");
            }))
        });
    }

    #[test]
    fn a_workspace_swapped_between_its_check_and_the_walk_is_never_what_diff_reads() {
        let s = scene("diff");
        swap_between(&s.base);
        let changes = s.sb.diff(&DiffOptions::default()).expect("diff");
        assert!(BETWEEN.with(|b| b.borrow().is_none()), "the swap never ran");
        let shown = serde_json::to_string(&changes).expect("json");
        assert!(!shown.contains("HOST-SECRET-RACE"), "{shown}");
        // What it read is the directory it checked: the project's notes,
        // and no pattern of the victim's .gitignore hid anything.
        assert!(shown.contains("the project's notes"), "{shown}");
        let notes = changes
            .iter()
            .find(|c| c.path == Path::new("notes"))
            .expect("notes changed");
        assert_eq!(notes.kind, ChangeKind::Modified);
        assert!(changes.iter().all(|c| !c.ignored), "{changes:#?}");
        drop(s.store);
        let _ = fsutil::remove_tree(&s.base);
    }

    #[test]
    fn a_workspace_swapped_between_its_check_and_a_discard_is_never_what_the_discard_copies() {
        let s = scene("discard");
        // An opaque directory of the layer over the real `d`: discarding
        // `d/notes` brings the real file back by copying it into the
        // layer, where the sandbox reads it.
        std::fs::create_dir_all(s.land.join("d")).expect("mkdir");
        std::fs::write(s.land.join("d/notes"), "the project's notes\n").expect("write");
        std::fs::create_dir_all(s.base.join("victim/land/d")).expect("mkdir");
        std::fs::write(s.base.join("victim/land/d/notes"), "HOST-SECRET-RACE\n").expect("write");
        let d = s.sb.upper().join("d");
        std::fs::create_dir(&d).expect("mkdir");
        std::fs::write(d.join("notes"), "the sandbox's own\n").expect("write");
        if rustix::fs::setxattr(
            &d,
            "user.overlay.opaque",
            b"y",
            rustix::fs::XattrFlags::empty(),
        )
        .is_err()
        {
            eprintln!("skipped: this file system takes no user extended attributes");
            let _ = fsutil::remove_tree(&s.base);
            return;
        }
        swap_between(&s.base);
        let lock = s.sb.lock().expect("lock");
        lock.discard(&[PathBuf::from("d/notes")]).expect("discard");
        assert!(BETWEEN.with(|b| b.borrow().is_none()), "the swap never ran");
        assert_eq!(
            std::fs::read_to_string(d.join("notes")).expect("read"),
            "the project's notes\n",
            "the discard copied another directory's file into the layer"
        );
        drop(lock);
        drop(s.store);
        let _ = fsutil::remove_tree(&s.base);
    }
}
