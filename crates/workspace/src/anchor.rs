//! The real workspace's own directory, as every operation on the host
//! reaches it (commit, diff, discard, a copy's first fill): its recorded
//! path opened from `/` with `openat2(RESOLVE_NO_SYMLINKS |
//! RESOLVE_NO_MAGICLINKS)`, so that a symbolic link in ANY component of
//! the path is refused (not only the last one, which is all `O_NOFOLLOW`
//! covers), and, once the sandbox's record holds it, the directory's
//! identity (device and inode) compared with the one it was created over.
//!
//! Why: a workspace's parent that code (a sandbox's, or anyone's that can
//! write there) swaps for a link to another directory, or the workspace
//! moved away and another made at its path, would otherwise take the
//! commit's writes and the diff's reads to a directory that was never the
//! sandbox's. `warden start` refuses the same path for the same reason.

use rustix::fs::{Mode, OFlags, ResolveFlags, CWD};
use rustix::io::Errno;
use serde::{Deserialize, Serialize};
use std::io;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

/// What identifies the workspace's directory for as long as it exists:
/// its device and inode numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkspaceId {
    pub dev: u64,
    pub ino: u64,
}

impl WorkspaceId {
    pub(crate) fn of(fd: &OwnedFd) -> io::Result<WorkspaceId> {
        let st = rustix::fs::fstat(fd)?;
        Ok(WorkspaceId {
            dev: st.st_dev,
            ino: st.st_ino,
        })
    }
}

const NO_LINKS: ResolveFlags = ResolveFlags::NO_SYMLINKS.union(ResolveFlags::NO_MAGICLINKS);

/// Open the workspace directory at `path` (absolute, as recorded) through
/// no symbolic link. A link on the way is refused with an error naming it
/// and where it leads; `NotFound` is left as such for the callers that
/// take a missing workspace as an empty one.
pub(crate) fn open(path: &Path) -> io::Result<OwnedFd> {
    match rustix::fs::openat2(
        CWD,
        path,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
        NO_LINKS,
    ) {
        Ok(fd) => Ok(fd),
        Err(Errno::LOOP) => Err(through_link(path)),
        Err(e) => Err(e.into()),
    }
}

/// Open the workspace at `path` and check that it is the directory
/// `expected` (when the record holds one).
pub(crate) fn open_checked(path: &Path, expected: Option<WorkspaceId>) -> io::Result<OwnedFd> {
    let fd = open(path)?;
    if let Some(want) = expected {
        let found = WorkspaceId::of(&fd)?;
        if found != want {
            return Err(io::Error::other(WorkspaceRefused::Moved {
                path: path.to_path_buf(),
                want,
                found,
            }));
        }
    }
    Ok(fd)
}

/// What a start finds at the workspace `path` the sandbox records, with
/// the identity it was created over (`expected`): the refusal when the
/// directory there is not that one (moved or replaced since) or the path
/// goes through a link; `None` when it is the sandbox's directory, and
/// also when it cannot be opened for another reason (missing: the
/// backend's own mount says so in its words).
pub fn refused_at_start(path: &Path, expected: Option<WorkspaceId>) -> Option<WorkspaceRefused> {
    match open_checked(path, expected) {
        Ok(_) => None,
        Err(e) => {
            let inner = e.into_inner()?;
            inner.downcast::<WorkspaceRefused>().ok().map(|r| *r)
        }
    }
}

/// Why the workspace's own directory was refused: each door words it
/// by its stable reason code ([`WorkspaceRefused::code`]). Carried inside
/// the `io::Error` of the operation that opened it; [`WorkspaceRefused::find`]
/// finds it in any error's chain.
#[derive(Debug, thiserror::Error)]
pub enum WorkspaceRefused {
    /// The directory at the recorded path is not the one the sandbox was
    /// created over: it was moved away (or replaced) since.
    #[error("workspace {} is not the directory the sandbox was created over (device {} inode {} then, device {} inode {} now): it was moved or replaced since; warden does not land changes in, nor compare with, another directory: put the sandbox's directory back at that path", .path.display(), .want.dev, .want.ino, .found.dev, .found.ino)]
    Moved {
        path: PathBuf,
        want: WorkspaceId,
        found: WorkspaceId,
    },
    /// A component of the recorded path is a symbolic link.
    #[error("workspace {} goes through a symbolic link{}: a link swapped into its path could redirect the commit or the diff to another directory, so warden does not follow links here", .path.display(), .link.as_ref().map(|(l, t)| format!(" ({} -> {})", l.display(), t.display())).unwrap_or_default())]
    ThroughLink {
        path: PathBuf,
        /// The first component that is a link, and its target.
        link: Option<(PathBuf, PathBuf)>,
    },
}

/// The reason code of [`WorkspaceRefused::Moved`].
pub const WORKSPACE_MOVED: &str = "workspace_moved";
/// The reason code of [`WorkspaceRefused::ThroughLink`].
pub const WORKSPACE_LINK: &str = "workspace_link";

impl WorkspaceRefused {
    /// Its stable reason code, the same at every door.
    pub fn code(&self) -> &'static str {
        match self {
            WorkspaceRefused::Moved { .. } => WORKSPACE_MOVED,
            WorkspaceRefused::ThroughLink { .. } => WORKSPACE_LINK,
        }
    }

    /// The refusal somewhere in `e`'s chain, if any: as an error of the
    /// chain itself, or inside an `io::Error` of it (whose own `source`
    /// skips what it wraps).
    pub fn find<'a>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a WorkspaceRefused> {
        let mut at = Some(e);
        while let Some(err) = at {
            if let Some(r) = err.downcast_ref::<WorkspaceRefused>() {
                return Some(r);
            }
            if let Some(inner) = err.downcast_ref::<io::Error>().and_then(|io| io.get_ref()) {
                if let Some(r) = inner.downcast_ref::<WorkspaceRefused>() {
                    return Some(r);
                }
            }
            at = err.source();
        }
        None
    }
}

/// The refusal of a path that goes through a symbolic link: the first
/// component of `path` that is one, and its target.
fn through_link(path: &Path) -> io::Error {
    let mut at = PathBuf::new();
    let mut link = None;
    for c in path.components() {
        at.push(c);
        if let Ok(md) = std::fs::symlink_metadata(&at) {
            if md.file_type().is_symlink() {
                let target = std::fs::read_link(&at).unwrap_or_default();
                link = Some((at.clone(), target));
                break;
            }
        }
    }
    io::Error::other(WorkspaceRefused::ThroughLink {
        path: path.to_path_buf(),
        link,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_link_in_a_parent_component_is_refused_and_named() {
        let base = std::env::temp_dir().join(format!("warden-anchor-{}", std::process::id()));
        let real = base.join("real/ws");
        std::fs::create_dir_all(&real).expect("mkdir");
        std::os::unix::fs::symlink(base.join("real"), base.join("link")).expect("symlink");
        assert!(open(&real).is_ok());
        let err = open(&base.join("link/ws")).expect_err("through a link");
        let text = err.to_string();
        assert!(text.contains("symbolic link"), "{text}");
        assert!(
            text.contains(&base.join("link").display().to_string()),
            "{text}"
        );
        let id = WorkspaceId::of(&open(&real).expect("open")).expect("id");
        assert!(open_checked(&real, Some(id)).is_ok());
        let other = WorkspaceId {
            dev: id.dev,
            ino: id.ino.wrapping_add(1),
        };
        let moved = open_checked(&real, Some(other)).expect_err("another directory");
        assert_eq!(
            WorkspaceRefused::find(&moved).map(WorkspaceRefused::code),
            Some(WORKSPACE_MOVED)
        );
        assert_eq!(
            WorkspaceRefused::find(&err).map(WorkspaceRefused::code),
            Some(WORKSPACE_LINK)
        );
        let _ = crate::fsutil::remove_tree(&base);
    }
}
