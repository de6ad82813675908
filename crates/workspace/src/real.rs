//! The real workspace as a commit writes it: every path reached from the
//! workspace's directory descriptor with `openat2(RESOLVE_BENEATH |
//! RESOLVE_NO_SYMLINKS)`, so that a symbolic link on the way (planted by
//! the host or by an earlier commit) is refused, never followed; files
//! written through a temporary file in their own directory and renamed
//! into place; ownership kept for the project's owner when root commits.
//! What to write and in which order is `commit`'s business.

use crate::diff::{Change, ChangeKind, Entry, EntryKind};
use crate::fsutil;
use crate::store::FsTime;
use rustix::fs::{AtFlags, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

/// Why the real workspace could not be opened or written; a commit
/// ([`crate::commit::CommitError`]) says it with what it had applied.
#[derive(Debug, thiserror::Error)]
pub enum RealError {
    #[error("cannot open workspace {path}")]
    Workspace {
        path: std::path::PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot {op} {}", crate::printable_path(.path))]
    Apply {
        op: &'static str,
        path: std::path::PathBuf,
        #[source]
        source: io::Error,
    },
}

/// The workspace root, opened once; every path is resolved beneath it.
pub(crate) struct Real {
    root: OwnedFd,
}

pub(crate) enum Parent {
    Dir(OwnedFd),
    /// A directory on the way does not exist, or is not a directory (yet:
    /// the commit may be about to make it one).
    Missing,
    Refused(&'static str),
}

pub(crate) const RESOLVE: ResolveFlags = ResolveFlags::BENEATH
    .union(ResolveFlags::NO_SYMLINKS)
    .union(ResolveFlags::NO_MAGICLINKS);

impl Real {
    /// The workspace at `path`, reached through no symbolic link in any
    /// component, and the directory `expected` when the record holds its
    /// identity (see [`crate::anchor`]).
    pub(crate) fn open(
        path: &Path,
        expected: Option<crate::WorkspaceId>,
    ) -> Result<Real, RealError> {
        let root =
            crate::anchor::open_checked(path, expected).map_err(|source| RealError::Workspace {
                path: path.to_path_buf(),
                source,
            })?;
        Ok(Real { root })
    }

    /// The same directory as a tree to read (a duplicate of its
    /// descriptor): a commit's diff reads what it writes.
    pub(crate) fn tree(&self) -> io::Result<crate::beneath::Tree> {
        Ok(crate::beneath::Tree::real_at(self.root.try_clone()?))
    }

    /// The directory holding `rel`, reached without following any link.
    pub(crate) fn parent(&self, rel: &Path) -> io::Result<Parent> {
        let parent = match rel.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        match rustix::fs::openat2(
            &self.root,
            parent,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
            RESOLVE,
        ) {
            Ok(fd) => Ok(Parent::Dir(fd)),
            Err(Errno::NOENT) => Ok(Parent::Missing),
            Err(Errno::LOOP) => Ok(Parent::Refused("a directory on the way is a symbolic link")),
            Err(Errno::NOTDIR) => Ok(Parent::Missing),
            Err(Errno::XDEV) => Ok(Parent::Refused("the path leaves the workspace")),
            Err(e) => Err(e.into()),
        }
    }
}

pub(crate) fn name_of(rel: &Path) -> &std::ffi::OsStr {
    rel.file_name().unwrap_or(rel.as_os_str())
}

pub(crate) fn lstat_at(dir: &OwnedFd, rel: &Path) -> io::Result<Option<rustix::fs::Stat>> {
    match rustix::fs::statat(dir, name_of(rel), AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => Ok(Some(st)),
        Err(Errno::NOENT) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

pub(crate) fn kind_of(st: &rustix::fs::Stat) -> EntryKind {
    match rustix::fs::FileType::from_raw_mode(st.st_mode) {
        rustix::fs::FileType::RegularFile => EntryKind::File,
        rustix::fs::FileType::Directory => EntryKind::Dir,
        rustix::fs::FileType::Symlink => EntryKind::Symlink,
        _ => EntryKind::Other,
    }
}

pub(crate) fn ctime_of(st: &rustix::fs::Stat) -> FsTime {
    FsTime {
        sec: st.st_ctime,
        nsec: st.st_ctime_nsec as i64,
    }
}

pub(crate) fn apply_err<'a>(
    op: &'static str,
    rel: &'a Path,
) -> impl FnOnce(Errno) -> RealError + 'a {
    move |e| RealError::Apply {
        op,
        path: rel.to_path_buf(),
        source: e.into(),
    }
}

pub(crate) fn open_parent(real: &Real, rel: &Path) -> Result<OwnedFd, RealError> {
    let err = |source| RealError::Apply {
        op: "open directory",
        path: rel.to_path_buf(),
        source,
    };
    match real.parent(rel).map_err(err)? {
        Parent::Dir(fd) => Ok(fd),
        Parent::Missing => Err(err(io::ErrorKind::NotFound.into())),
        Parent::Refused(why) => Err(err(io::Error::other(why))),
    }
}

/// When the commit runs as root, what it creates takes the owner of what
/// it replaces, or else of the directory it lands in: a project that
/// belongs to a person keeps belonging to them.
pub(crate) fn keep_owner(parent: &OwnedFd, name: &std::ffi::OsStr, replaced: Option<(u32, u32)>) {
    if !rustix::process::geteuid().is_root() {
        return;
    }
    let owner = replaced.or_else(|| {
        rustix::fs::fstat(parent)
            .ok()
            .map(|st| (st.st_uid, st.st_gid))
    });
    if let Some((uid, gid)) = owner {
        let _ = rustix::fs::chownat(
            parent,
            name,
            Some(rustix::fs::Uid::from_raw(uid)),
            Some(rustix::fs::Gid::from_raw(gid)),
            AtFlags::SYMLINK_NOFOLLOW,
        );
    }
}

/// Create the missing directories above `rel` (mode 0755), never through a
/// symbolic link.
pub(crate) fn make_parents(real: &Real, rel: &Path) -> Result<(), RealError> {
    let mut above: Vec<&Path> = rel
        .ancestors()
        .skip(1)
        .filter(|a| !a.as_os_str().is_empty())
        .collect();
    above.reverse();
    for dir in above {
        let parent = open_parent(real, dir)?;
        match rustix::fs::mkdirat(&parent, name_of(dir), Mode::from_raw_mode(0o755)) {
            Ok(()) => keep_owner(&parent, name_of(dir), None),
            Err(Errno::EXIST) => {}
            Err(e) => return Err(apply_err("create directory", dir)(e)),
        }
    }
    Ok(())
}

pub(crate) fn remove_real(real: &Real, rel: &Path, kind: EntryKind) -> Result<(), RealError> {
    let parent = open_parent(real, rel)?;
    let flags = if kind == EntryKind::Dir {
        AtFlags::REMOVEDIR
    } else {
        AtFlags::empty()
    };
    match rustix::fs::unlinkat(&parent, name_of(rel), flags) {
        Ok(()) | Err(Errno::NOENT) => Ok(()),
        Err(e) => Err(apply_err("remove", rel)(e)),
    }
}

pub(crate) static TMP_SEQ: AtomicU64 = AtomicU64::new(0);

pub(crate) fn tmp_name() -> String {
    format!(
        ".warden-commit.{}.{}",
        std::process::id(),
        TMP_SEQ.fetch_add(1, Ordering::Relaxed)
    )
}

/// Write the changed entry `new` of `c` from the layer `upper` into the
/// real workspace; answers the permission bits it landed with (for a
/// directory, set once its content is in).
pub(crate) fn write_real(
    real: &Real,
    upper: &Path,
    c: &Change,
    new: &Entry,
) -> Result<u32, RealError> {
    let rel = c.path.as_path();
    let parent = open_parent(real, rel)?;
    let name = name_of(rel);
    let existing = lstat_at(&parent, rel).map_err(|source| RealError::Apply {
        op: "stat",
        path: rel.to_path_buf(),
        source,
    })?;
    let landed = landing_mode(new, existing.as_ref().map(|st| st.st_mode));
    let mode = Mode::from_raw_mode(landed);
    match new.kind {
        EntryKind::Dir => {
            match existing.as_ref().map(kind_of) {
                Some(EntryKind::Dir) => {}
                Some(_) => rustix::fs::unlinkat(&parent, name, AtFlags::empty())
                    .map_err(apply_err("remove", rel))?,
                None => {}
            }
            if !matches!(existing.as_ref().map(kind_of), Some(EntryKind::Dir)) {
                rustix::fs::mkdirat(&parent, name, Mode::from_raw_mode(0o700))
                    .map_err(apply_err("create directory", rel))?;
                keep_owner(&parent, name, None);
            }
            // Its mode is set once its content is in (`apply`).
        }
        EntryKind::File if c.kind == ChangeKind::Mode => {
            // Through the entry's own descriptor, never following it: a
            // link put in its place since the check is refused, and the
            // change never lands on the file it leads to.
            fsutil::chmod_entry(&parent, name, landed).map_err(|source| RealError::Apply {
                op: "set mode",
                path: rel.to_path_buf(),
                source,
            })?;
        }
        EntryKind::File | EntryKind::Symlink => {
            if matches!(existing.as_ref().map(kind_of), Some(EntryKind::Dir)) {
                // Its content went in the removal pass.
                rustix::fs::unlinkat(&parent, name, AtFlags::REMOVEDIR)
                    .map_err(apply_err("remove directory", rel))?;
            }
            let tmp = tmp_name();
            let made = if new.kind == EntryKind::File {
                // The new content, read beneath the layer's descriptor:
                // a link the sandbox left on the way is refused.
                crate::beneath::Tree::layer(upper)
                    .and_then(|layer| layer.file(rel))
                    .and_then(|from| write_tmp_file(&parent, &tmp, &from, mode))
            } else {
                let target = new.target.clone().unwrap_or_default();
                rustix::fs::symlinkat(&target, &parent, &tmp).map_err(io::Error::from)
            };
            let moved = made.and_then(|()| {
                rustix::fs::renameat(&parent, &tmp, &parent, name).map_err(io::Error::from)
            });
            if let Err(source) = moved {
                let _ = rustix::fs::unlinkat(&parent, &tmp, AtFlags::empty());
                return Err(RealError::Apply {
                    op: "write",
                    path: rel.to_path_buf(),
                    source,
                });
            }
            keep_owner(
                &parent,
                name,
                existing.as_ref().map(|st| (st.st_uid, st.st_gid)),
            );
        }
        EntryKind::Other => {}
    }
    Ok(landed)
}

/// The mode a changed entry lands with in the real workspace, over the
/// host entry whose `st_mode` is `host` (if any):
/// - a regular file never carries set-user-ID or set-group-ID bits onto
///   the host. A sandbox's root may set them on its own files (gVisor's
///   and a VM's kernels allow it, and a layer keeps them); landed in a
///   workspace on a file system without `nosuid`, such a file would run
///   as its owner (root, when warden ran as root) for anyone who runs it;
/// - an existing host entry gains no group or other bit that the rule of
///   [`crate::exposure`] would not give it: in the layer the sandbox
///   changed a copy (born in the run, so the live rule let it widen the
///   copy), and what lands is the original;
/// - a new entry lands under the committer's umask
///   ([`crate::exposure::landed_under`]), as one the committer made would.
fn landing_mode(new: &Entry, host: Option<u32>) -> u32 {
    let mode = if matches!(new.kind, EntryKind::File) {
        new.mode & !0o6000
    } else {
        new.mode
    };
    crate::exposure::landed_under(host, mode, new.kind == EntryKind::Dir, committer_umask())
}

/// This process's umask, read from `/proc/self/status` (setting it to
/// learn it would race the other threads' files). When it cannot be read,
/// the strictest: new entries then land for their owner alone.
fn committer_umask() -> u32 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Umask:"))
                .and_then(|v| u32::from_str_radix(v.trim(), 8).ok())
        })
        .unwrap_or(0o077)
}

pub(crate) fn write_tmp_file(
    parent: &OwnedFd,
    tmp: &str,
    from: &File,
    mode: Mode,
) -> io::Result<()> {
    let fd = rustix::fs::openat(
        parent,
        tmp,
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o600),
    )?;
    let mut to = File::from(fd);
    fsutil::fill(from, &mut to)?;
    rustix::fs::fchmod(to.as_fd(), mode)?;
    to.sync_all()?;
    Ok(())
}
