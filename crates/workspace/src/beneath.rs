//! Host-side access to a tree the sandbox can write (its upper layer, a
//! copy-layout copy, its snapshots) and to the real workspace, never by a
//! joined path: the tree's top directory is opened once, and every entry
//! is reached from that descriptor with `openat2(RESOLVE_BENEATH |
//! RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)` (and `RESOLVE_NO_XDEV`
//! for a sandbox's trees), the last component with `O_NOFOLLOW`.
//!
//! Why: code in a running sandbox can swap a directory of its layer for a
//! symbolic link to the host's `/` (`renameat2(RENAME_EXCHANGE)` works on
//! overlayfs) between the host's `lstat` and its `open`, and a stopped
//! sandbox leaves its links in the stored layer. Resolved by the kernel
//! as a path, `upper/d/etc/shadow` then reads the host's file as the
//! daemon's user. Resolved here, a link anywhere on the way is refused
//! (`ELOOP`), and a file is read only from the descriptor that `fstat`
//! showed to be a regular file.
//!
//! Errors carry no host path: the callers name the entry by its path
//! relative to the tree, which is all a token holder may see.

use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags, Stat};
use rustix::io::Errno;
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Component, Path, PathBuf};

/// How a path of a sandbox's tree is resolved: beneath its top, through no
/// symbolic link, no magic link of /proc, and no mount point.
const LAYER: ResolveFlags = ResolveFlags::BENEATH
    .union(ResolveFlags::NO_SYMLINKS)
    .union(ResolveFlags::NO_MAGICLINKS)
    .union(ResolveFlags::NO_XDEV);

/// The real workspace: the same, except that a mount point inside the
/// project (the owner's own doing) is crossed.
const REAL: ResolveFlags = ResolveFlags::BENEATH
    .union(ResolveFlags::NO_SYMLINKS)
    .union(ResolveFlags::NO_MAGICLINKS);

/// One tree, opened once.
pub(crate) struct Tree {
    /// `None`: there is no tree (a workspace removed on the host); every
    /// entry is then absent.
    root: Option<OwnedFd>,
    resolve: ResolveFlags,
}

/// The error of an entry reached through a symbolic link (or out of the
/// tree): the kernel's `ELOOP`/`EXDEV`, worded.
pub(crate) fn refused() -> io::Error {
    io::Error::other("a directory on the way is a symbolic link or leaves the tree; warden does not follow links of a sandbox's tree")
}

fn worded(e: Errno) -> io::Error {
    match e {
        Errno::LOOP | Errno::XDEV => refused(),
        e => e.into(),
    }
}

impl Tree {
    /// A tree the sandbox can write, whose top is `path` (a directory of
    /// warden's own state: its own path is trusted, what lies below is not).
    pub(crate) fn layer(path: &Path) -> io::Result<Tree> {
        Tree::open(path, LAYER)
    }

    /// The real workspace at `path`. A missing workspace is an empty tree.
    /// Its path is opened through no symbolic link in any component
    /// ([`crate::anchor`]): a link swapped into a parent is refused.
    pub(crate) fn real(path: &Path) -> io::Result<Tree> {
        Tree::real_checked(path, None)
    }

    /// The real workspace at `path`, as [`Tree::real`] opens it, and
    /// checked to be the directory `expected` when the record holds its
    /// identity. Every read of the host's side of one review goes through
    /// the one tree this answers (or its [`Tree::try_clone`]s): the
    /// directory checked is the directory walked, whatever is renamed or
    /// linked at its path meanwhile.
    pub(crate) fn real_checked(
        path: &Path,
        expected: Option<crate::WorkspaceId>,
    ) -> io::Result<Tree> {
        match crate::anchor::open_checked(path, expected) {
            Ok(root) => Ok(Tree::real_at(root)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Tree {
                root: None,
                resolve: REAL,
            }),
            Err(e) => Err(e),
        }
    }

    /// The real workspace whose directory `root` holds (opened and
    /// checked by the caller).
    pub(crate) fn real_at(root: OwnedFd) -> Tree {
        Tree {
            root: Some(root),
            resolve: REAL,
        }
    }

    /// The same tree, by a duplicate of its descriptor: the same
    /// directory, never its path opened again.
    pub(crate) fn try_clone(&self) -> io::Result<Tree> {
        Ok(Tree {
            root: match &self.root {
                Some(fd) => Some(fd.try_clone()?),
                None => None,
            },
            resolve: self.resolve,
        })
    }

    fn open(path: &Path, resolve: ResolveFlags) -> io::Result<Tree> {
        let root = rustix::fs::open(
            path,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        Ok(Tree {
            root: Some(root),
            resolve,
        })
    }

    fn root(&self) -> io::Result<&OwnedFd> {
        self.root
            .as_ref()
            .ok_or_else(|| io::ErrorKind::NotFound.into())
    }

    /// Open `rel` (relative, `..` refused) with `flags`.
    fn openat(&self, rel: &Path, flags: OFlags) -> io::Result<OwnedFd> {
        let rel = if rel.as_os_str().is_empty() {
            Path::new(".")
        } else {
            rel
        };
        if rel
            .components()
            .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
        {
            return Err(refused());
        }
        rustix::fs::openat2(
            self.root()?,
            rel,
            flags | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NOCTTY,
            Mode::empty(),
            self.resolve,
        )
        .map_err(worded)
    }

    /// The directory at `rel` (`""`: the top).
    pub(crate) fn dir(&self, rel: &Path) -> io::Result<OwnedFd> {
        self.openat(rel, OFlags::RDONLY | OFlags::DIRECTORY)
    }

    /// The directory holding `rel`, and `rel`'s last name. `rel` must not
    /// be empty.
    pub(crate) fn parent<'a>(&self, rel: &'a Path) -> io::Result<(OwnedFd, &'a OsStr)> {
        let name = rel.file_name().ok_or_else(refused)?;
        let dir = self.dir(rel.parent().unwrap_or(Path::new("")))?;
        Ok((dir, name))
    }

    /// The entry at `rel` as `lstat` sees it; `None` when it is absent or
    /// a directory on the way is not one. A symbolic link on the way is an
    /// error, never "absent": the caller must not act as if nothing was
    /// there.
    pub(crate) fn lstat(&self, rel: &Path) -> io::Result<Option<Stat>> {
        if rel.as_os_str().is_empty() {
            return match &self.root {
                Some(fd) => Ok(Some(rustix::fs::fstat(fd)?)),
                None => Ok(None),
            };
        }
        let (dir, name) = match self.parent(rel) {
            Ok(p) => p,
            Err(e) if absent(&e) => return Ok(None),
            Err(e) => return Err(e),
        };
        match rustix::fs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => Ok(Some(st)),
            Err(Errno::NOENT | Errno::NOTDIR) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// The names in the directory `rel`, sorted by their bytes.
    pub(crate) fn names(&self, rel: &Path) -> io::Result<Vec<OsString>> {
        names_of(&self.dir(rel)?)
    }

    /// The target of the symbolic link at `rel`.
    pub(crate) fn read_link(&self, rel: &Path) -> io::Result<PathBuf> {
        let (dir, name) = self.parent(rel)?;
        let target = rustix::fs::readlinkat(&dir, name, Vec::new())?;
        Ok(PathBuf::from(OsString::from_vec(target.into_bytes())))
    }

    /// The regular file at `rel`, opened for reading. Anything else there
    /// now (a link, a FIFO, a device, a directory swapped in since the
    /// walk) is refused: `O_NONBLOCK` so a FIFO cannot hold the open, and
    /// `fstat` of the descriptor, not of the path, decides.
    pub(crate) fn file(&self, rel: &Path) -> io::Result<File> {
        regular(self.openat(rel, OFlags::RDONLY | OFlags::NONBLOCK)?)
    }

    /// The directory `name` of the directory held by `dir` (one of this
    /// tree's), opened with the tree's rules: one step of a walk that goes
    /// from descriptor to descriptor, whatever the depth.
    pub(crate) fn dir_in(&self, dir: &impl AsFd, name: &OsStr) -> io::Result<OwnedFd> {
        self.step(dir, name, OFlags::RDONLY | OFlags::DIRECTORY)
    }

    /// The regular file `name` of the directory held by `dir` (one of this
    /// tree's), opened for reading as [`Tree::file`] opens one.
    pub(crate) fn file_in(&self, dir: &impl AsFd, name: &OsStr) -> io::Result<File> {
        regular(self.step(dir, name, OFlags::RDONLY | OFlags::NONBLOCK)?)
    }

    fn step(&self, dir: &impl AsFd, name: &OsStr, flags: OFlags) -> io::Result<OwnedFd> {
        if name.is_empty() || name == "." || name == ".." || name.as_bytes().contains(&b'/') {
            return Err(refused());
        }
        rustix::fs::openat2(
            dir,
            name,
            flags | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NOCTTY,
            Mode::empty(),
            self.resolve,
        )
        .map_err(worded)
    }

    /// The extended attribute `attr` of the entry at `rel` (not following
    /// it), if it has one; a value longer than 256 bytes reads as empty.
    pub(crate) fn xattr(&self, rel: &Path, attr: &str) -> Option<Vec<u8>> {
        let mut buf = [0u8; 256];
        if rel.as_os_str().is_empty() {
            // The top itself, by its own descriptor.
            let dir = self.dir(rel).ok()?;
            if let Ok(n) = rustix::fs::fgetxattr(&dir, attr, &mut buf[..]) {
                return Some(buf[..n.min(buf.len())].to_vec());
            }
            return rustix::fs::fgetxattr_query(&dir, attr)
                .ok()
                .map(|_| Vec::new());
        }
        let (dir, name) = self.parent(rel).ok()?;
        let at = at_path(&dir, name);
        if let Ok(n) = rustix::fs::lgetxattr(&at, attr, &mut buf[..]) {
            return Some(buf[..n.min(buf.len())].to_vec());
        }
        rustix::fs::lgetxattr_query(&at, attr)
            .ok()
            .map(|_| Vec::new())
    }
}

/// `fd`, opened `O_NONBLOCK`, as a file to read if `fstat` of the
/// descriptor (not of a path) shows a regular file.
fn regular(fd: OwnedFd) -> io::Result<File> {
    let st = rustix::fs::fstat(&fd)?;
    if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
        return Err(io::Error::other(
            "it is no longer a regular file (it changed during the review)",
        ));
    }
    // Back to blocking reads: a regular file never blocks, and the
    // flag must not leak into code that expects a plain file.
    rustix::fs::fcntl_setfl(&fd, OFlags::empty())?;
    Ok(File::from(fd))
}

/// Whether an error means "nothing there" (a missing directory on the
/// way, or one that is not a directory).
pub(crate) fn absent(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(Errno::NOTDIR.raw_os_error())
}

/// `/proc/self/fd/N/NAME`: the entry `name` of the directory held by `dir`,
/// for the calls that have no `*at` form (extended attributes, chmod of an
/// `O_PATH` descriptor). The directory is the one the descriptor holds
/// (a magic link is not a path the sandbox can change), and `name` is one
/// component the `l*` calls do not follow.
pub(crate) fn at_path(dir: &impl AsRawFd, name: &OsStr) -> PathBuf {
    let mut p = PathBuf::from(format!("/proc/self/fd/{}", dir.as_raw_fd()));
    if name != "." {
        p.push(name);
    }
    p
}

/// The names in the directory held by `dir`, sorted by their bytes.
pub(crate) fn names_of(dir: &impl AsFd) -> io::Result<Vec<OsString>> {
    let mut names = Vec::new();
    for entry in rustix::fs::Dir::read_from(dir)? {
        let entry = entry?;
        let name = entry.file_name().to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        names.push(OsStr::from_bytes(name).to_os_string());
    }
    names.sort_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
    Ok(names)
}

/// What `lstat` says an entry is.
pub(crate) fn file_type(st: &Stat) -> FileType {
    FileType::from_raw_mode(st.st_mode)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn tmp(tag: &str) -> PathBuf {
        let p = std::env::temp_dir().join(format!("warden-beneath-{tag}-{}", std::process::id()));
        let _ = crate::fsutil::remove_tree(&p);
        fs::create_dir_all(&p).unwrap();
        p
    }

    #[test]
    fn a_link_on_the_way_is_refused_and_never_followed() {
        let top = tmp("link");
        let outside = tmp("outside");
        fs::write(outside.join("secret"), "host").unwrap();
        std::os::unix::fs::symlink(&outside, top.join("l")).unwrap();
        fs::write(top.join("f"), "mine").unwrap();
        let t = Tree::layer(&top).unwrap();
        assert!(t.file(Path::new("l/secret")).is_err());
        // Through a link there is no entry (refused, or absent as a path
        // through a non-directory is): never the file outside.
        assert!(!matches!(t.lstat(Path::new("l/secret")), Ok(Some(_))));
        assert!(t.names(Path::new("l")).is_err());
        assert!(t.file(Path::new("l")).is_err());
        assert!(t.file(Path::new("../f")).is_err());
        assert_eq!(
            t.lstat(Path::new("l"))
                .unwrap()
                .map(|st| file_type(&st) == FileType::Symlink),
            Some(true)
        );
        assert!(t.file(Path::new("f")).is_ok());
        assert_eq!(t.lstat(Path::new("missing/x")).unwrap().map(|_| ()), None);
        let _ = crate::fsutil::remove_tree(&top);
        let _ = crate::fsutil::remove_tree(&outside);
    }
}
