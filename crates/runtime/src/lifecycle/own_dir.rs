//! A sandbox's own workspace (`workspaces/NAME`, the directory of one made
//! without a workspace of its caller's) as a create or a copy takes it,
//! and as a removal lets it go. The rule: a call removes only what it made
//! itself, and only while it holds the name. The directory belongs to
//! whoever holds `sandboxes/NAME`: a create that finds the name taken
//! touches nothing (the directory is the holder's, its overlay's lower), a
//! create that made the directory and lost the name to another at the
//! same moment leaves it to the winner, and an undo or a removal takes the
//! directory away before it lets the name go, so a create that comes next
//! never finds it half gone.

use std::path::{Path, PathBuf};
use warden_workspace::{Store, StoreError};

use super::LifecycleError;

/// `workspaces/NAME` as a create took it.
#[derive(Debug)]
pub struct OwnDir {
    path: PathBuf,
    /// Made by this call; a directory found there (one left by an
    /// earlier sandbox of the name) is used but never removed by it.
    made: bool,
}

impl OwnDir {
    /// Take `path` for sandbox `name`: refused, with nothing touched,
    /// while the name is held; else made, or found and used as it is.
    pub fn take(store: &Store, name: &str, path: &Path) -> Result<OwnDir, LifecycleError> {
        if name_held(store, name) {
            return Err(StoreError::Exists(name.to_string()).into());
        }
        let create = |p: &Path, source| LifecycleError::Create {
            path: p.to_path_buf(),
            source,
        };
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| create(parent, e))?;
        }
        let made = match std::fs::create_dir(path) {
            Ok(()) => true,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => false,
            Err(e) => return Err(create(path, e)),
        };
        Ok(OwnDir {
            path: path.to_path_buf(),
            made,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The store refused the name (`err`): this call holds nothing. A
    /// name taken meanwhile by another create is that create's, and so is
    /// the directory (it may be its overlay's lower already): left alone.
    /// Any other refusal leaves an empty directory this call made, which
    /// is taken back.
    pub fn refused(self, err: &StoreError) {
        if self.made && !matches!(err, StoreError::Exists(_)) {
            let _ = std::fs::remove_dir(&self.path);
        }
    }

    /// This call made sandbox `name` and undoes it: its directory (only
    /// if this call made it) first, then the name.
    pub fn undo(self, store: &Store, name: &str) {
        if self.made {
            let _ = warden_workspace::fsutil::remove_tree(&self.path);
        }
        let _ = store.remove(name);
    }
}

/// `e`, once what a create of sandbox `name` did is undone: the sandbox
/// (when `made`), its own workspace first, only if this call made it; or,
/// when the store refused the name, what [`OwnDir::refused`] leaves.
pub fn undone(
    store: &Store,
    name: &str,
    own: Option<OwnDir>,
    e: LifecycleError,
    made: bool,
) -> LifecycleError {
    match (own, made) {
        (Some(o), true) => o.undo(store, name),
        (None, true) => {
            let _ = store.remove(name);
        }
        (Some(o), false) => {
            if let LifecycleError::Store(se) = &e {
                o.refused(se);
            }
        }
        (None, false) => {}
    }
    e
}

/// Whether sandbox `name` is held in `store` (made, or being made).
fn name_held(store: &Store, name: &str) -> bool {
    store
        .root()
        .join("sandboxes")
        .join(name)
        .symlink_metadata()
        .is_ok()
}

/// Remove sandbox `name` and, when `own` is its own workspace, that
/// directory too, the directory before the name: it is moved aside under
/// a name no sandbox can have (a leading `.`) while the name is still
/// held, put back if the sandbox cannot be removed, and removed once the
/// name is gone. `remove` removes the sandbox (and may be retried by it).
pub fn remove_with(
    own: Option<&Path>,
    remove: impl FnOnce() -> Result<(), LifecycleError>,
) -> Result<(), LifecycleError> {
    let aside = own.and_then(|own| {
        let parent = own.parent()?;
        let base = own.file_name()?.to_string_lossy().into_owned();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let aside = parent.join(format!(".removing-{base}-{}-{now}", std::process::id()));
        std::fs::rename(own, &aside).ok().map(|()| (own, aside))
    });
    match remove() {
        Ok(()) => {
            if let Some((_, aside)) = aside {
                // By descriptors, however deep the tree grew.
                let _ = warden_workspace::fsutil::remove_tree(&aside);
            }
            Ok(())
        }
        Err(e) => {
            if let Some((own, aside)) = aside {
                let _ = std::fs::rename(aside, own);
            }
            Err(e)
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use warden_workspace::CreateOptions;

    fn store(tag: &str) -> (PathBuf, Store) {
        let root =
            std::env::temp_dir().join(format!("warden-own-dir-{tag}-{}", std::process::id()));
        let _ = warden_workspace::fsutil::remove_tree(&root);
        std::fs::create_dir_all(&root).unwrap();
        let store = Store::open(&root).unwrap();
        (root, store)
    }

    fn hold(store: &Store, name: &str, ws: &Path) {
        store
            .create(name, &CreateOptions::new(ws.to_path_buf()))
            .unwrap();
    }

    #[test]
    fn a_held_name_is_refused_before_its_workspace_is_touched() {
        let (root, store) = store("held");
        let ws = root.join("workspaces/a");
        let a = OwnDir::take(&store, "a", &ws).unwrap();
        assert!(a.made);
        hold(&store, "a", &ws);
        let b = OwnDir::take(&store, "a", &ws);
        assert!(matches!(
            b,
            Err(LifecycleError::Store(StoreError::Exists(_)))
        ));
        assert!(ws.is_dir());
        let _ = warden_workspace::fsutil::remove_tree(&root);
    }

    #[test]
    fn a_directory_made_by_a_create_that_lost_the_name_is_left_to_the_winner() {
        // B makes the directory, A takes it (found) and the name; B's
        // store refuses the name: B removes nothing.
        let (root, store) = store("lost");
        let ws = root.join("workspaces/a");
        let b = OwnDir::take(&store, "a", &ws).unwrap();
        let a = OwnDir::take(&store, "a", &ws).unwrap();
        assert!(b.made && !a.made);
        hold(&store, "a", &ws);
        let refused = store
            .create("a", &CreateOptions::new(ws.clone()))
            .unwrap_err();
        b.refused(&refused);
        assert!(ws.is_dir(), "the winner's workspace was removed");
        // The winner's own undo keeps a directory it found.
        a.undo(&store, "a");
        assert!(ws.is_dir());
        assert!(store.get("a").is_err());
        let _ = warden_workspace::fsutil::remove_tree(&root);
    }

    #[test]
    fn an_undo_takes_its_directory_away_before_the_name_and_a_removal_too() {
        let (root, store) = store("undo");
        let ws = root.join("workspaces/a");
        let a = OwnDir::take(&store, "a", &ws).unwrap();
        hold(&store, "a", &ws);
        a.undo(&store, "a");
        assert!(!ws.exists() && store.get("a").is_err());
        // A removal that fails puts the directory back; one that goes
        // through leaves nothing.
        let a = OwnDir::take(&store, "a", &ws).unwrap();
        hold(&store, "a", &ws);
        std::fs::write(ws.join("kept"), "kept").unwrap();
        let failed = remove_with(Some(&ws), || {
            assert!(
                !ws.exists(),
                "the directory is aside while the name is held"
            );
            Err(StoreError::NotFound("a".into()).into())
        });
        assert!(failed.is_err());
        assert_eq!(std::fs::read_to_string(ws.join("kept")).unwrap(), "kept");
        remove_with(Some(&ws), || Ok(store.remove("a")?)).unwrap();
        assert!(!ws.exists() && store.get("a").is_err());
        let left: Vec<_> = std::fs::read_dir(root.join("workspaces"))
            .unwrap()
            .collect();
        assert!(left.is_empty(), "{left:?}");
        drop(a);
        let _ = warden_workspace::fsutil::remove_tree(&root);
    }
}
