//! The mount primitives the assembly is written in: a mount or a bind
//! whose error names the place, attributes set on a mount just made
//! (found again beneath the new root), a host path resolved again below
//! `/oldroot` with no link on the way.
//!
//! It owns no part of the tree: which mounts the sandbox gets, and in what
//! order, is the other files' to say. It never walks a path below the new
//! root by text; places there come from [`super::inside`].

use super::inside::{Kind, Root, Spot};
use super::{MountError, OLDROOT};
use crate::sys;
use nix::mount::{mount, MsFlags};
use std::ffi::CString;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

pub(super) fn cpath(p: &Path) -> Result<CString, MountError> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| MountError::Nul(p.to_path_buf()))
}

pub(super) fn do_mount(
    src: Option<&str>,
    target: &Path,
    fstype: Option<&str>,
    flags: MsFlags,
    data: Option<&str>,
    what: &str,
) -> Result<(), MountError> {
    mount(src, target, fstype, flags, data).map_err(|source| MountError::Mount {
        what: what.to_string(),
        target: target.to_path_buf(),
        source,
    })
}

pub(super) fn set_attr(target: &Path, attrs: u64, recursive: bool) -> Result<(), MountError> {
    sys::mount_setattr_path(&cpath(target)?, attrs, recursive).map_err(|source| {
        MountError::ReadOnly {
            target: target.to_path_buf(),
            source,
        }
    })
}

/// [`set_attr`] on the mount now at `inside` (found again, beneath the
/// new root, so the attributes land on the mount just made there; set
/// through the descriptor itself, with no path to walk again).
pub(super) fn set_attr_inside(
    root: &Root,
    inside: &Path,
    attrs: u64,
    recursive: bool,
) -> Result<(), MountError> {
    let top = root.again(inside)?;
    sys::mount_setattr_fd(top.fd().as_fd(), attrs, recursive).map_err(|source| {
        MountError::ReadOnly {
            target: inside.to_path_buf(),
            source,
        }
    })
}

/// [`do_mount`] onto `spot`, its error naming the place as the sandbox
/// sees it.
pub(super) fn mount_on(
    src: Option<&str>,
    spot: &Spot,
    fstype: Option<&str>,
    flags: MsFlags,
    data: Option<&str>,
    what: &str,
) -> Result<(), MountError> {
    mount(src, &spot.at(), fstype, flags, data).map_err(|source| MountError::Mount {
        what: what.to_string(),
        target: spot.inside.clone(),
        source,
    })
}

/// Resolve a host path again in the sandbox's own mount namespace (below
/// /oldroot), with the supervisor's rule: no symbolic link on the way. A
/// link swapped in since the supervisor looked fails here.
pub(super) fn resolve_again(host_path: &Path) -> Result<OwnedFd, MountError> {
    let path = under(OLDROOT, host_path);
    sys::open_path_no_symlinks(&cpath(&path)?).map_err(|source| MountError::Resolve {
        path: host_path.to_path_buf(),
        source,
    })
}

/// The path, below the host's /proc still mounted at /oldroot, through which
/// a descriptor resolved in this mount namespace can be bound.
pub(super) fn fd_path(fd: &OwnedFd) -> PathBuf {
    PathBuf::from(format!("{OLDROOT}/proc/self/fd/{}", fd.as_raw_fd()))
}

/// Inside-the-new-root path for `p` (absolute).
pub(super) fn under(root: &str, p: &Path) -> PathBuf {
    let rel = p.strip_prefix("/").unwrap_or(p);
    Path::new(root).join(rel)
}

pub(super) fn mkdir_p(p: &Path) -> Result<(), MountError> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(p)
        .map_err(|source| MountError::MountPoint {
            path: p.to_path_buf(),
            source,
        })
}

/// The kind of mount point (directory or file) a bind of `src` needs.
pub(super) fn kind_of(src: &Path) -> Kind {
    match std::fs::metadata(src) {
        Ok(m) if !m.is_dir() => Kind::File,
        _ => Kind::Dir,
    }
}

/// Bind `src` (a path of the assembly's own tree) at `dst`, a place inside
/// the new root made beneath it (see [`super::inside`]).
pub(super) fn bind(root: &Root, src: &Path, dst: &Path, writable: bool) -> Result<(), MountError> {
    let spot = root.make(dst, kind_of(src))?;
    mount(
        Some(src),
        &spot.at(),
        None::<&str>,
        MsFlags::MS_BIND | MsFlags::MS_REC,
        None::<&str>,
    )
    .map_err(|source| MountError::Bind {
        src: src.to_path_buf(),
        dst: dst.to_path_buf(),
        source,
    })?;
    // Recursively: a read-only bind must not leave a writable submount
    // below it, and nothing bound in may carry setuid or device files.
    let mut attrs = sys::MOUNT_ATTR_NOSUID | sys::MOUNT_ATTR_NODEV;
    if !writable {
        attrs |= sys::MOUNT_ATTR_RDONLY;
    }
    set_attr_inside(root, dst, attrs, true)
}
