//! Overlays inside the sandbox: a workspace's copy-on-write layer, a
//! named sandbox's kept home restored into its `--disk` tmpfs, the
//! profile's package caches and writable volumes whose writes land in that
//! tmpfs.
//!
//! It owns attaching the lower layer (the supervisor's clone, or the path
//! resolved again) for the time of the mount. It never decides the
//! layer's format: the mount data is the workspace crate's, whose diff and
//! commit read the marks the mount leaves.

use super::inside::{Kind, Root, Spot};
use super::ops::{bind, cpath, fd_path, mkdir_p, resolve_again, under};
use super::{BindPlan, MountError, OverlayPlan, OLDROOT};
use crate::sys;
use nix::mount::{mount, umount2, MntFlags, MsFlags};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

/// Mount the overlay of bind `b` at `dst`: its source is the lower layer
/// (in root mode the idmapped clone, attached for the time of the mount
/// outside the new root), `ov` the upper and work directories; with
/// `--disk` the saved upper layer is restored into the sandbox's tmpfs and
/// the overlay's layer is that copy.
pub(super) fn mount_overlay(
    root: &Root,
    b: &mut BindPlan,
    ov: &OverlayPlan,
    dst: &Path,
) -> Result<(), MountError> {
    let (lower, _keep) = attach_lower(b)?;
    let state_mount = Path::new("/overlay-state");
    let (upper, work) = match &ov.tree {
        Some(tree) => {
            mkdir_p(state_mount)?;
            sys::move_mount_to(tree.as_fd(), &cpath(state_mount)?).map_err(|source| {
                MountError::AttachIdmapped {
                    target: ov.upper.clone(),
                    source,
                }
            })?;
            let name = |p: &Path| state_mount.join(p.file_name().unwrap_or_default());
            (name(&ov.upper), name(&ov.work))
        }
        None => (under(OLDROOT, &ov.upper), under(OLDROOT, &ov.work)),
    };
    let (upper, work) = match ov.disk {
        Some(size) => {
            let upper = crate::kept::restore(&upper, "upper", size)?;
            let work = Path::new(crate::kept::KEPT_MOUNT).join("work");
            std::fs::create_dir(&work).map_err(|source| MountError::Create {
                path: work.clone(),
                source,
            })?;
            (upper, work)
        }
        None => (upper, work),
    };
    let spot = root.make(dst, Kind::Dir)?;
    overlay_at(&lower, &upper, &work, &spot, "the workspace overlay")?;
    // The overlay holds its own references to its layers.
    detach_lower(&lower);
    if ov.tree.is_some() {
        let _ = umount2(state_mount, MntFlags::MNT_DETACH);
    }
    Ok(())
}

/// Where a lower layer cloned by the supervisor is attached while an
/// overlay is made.
const LOWER_MOUNT: &str = "/lower";

/// The lower layer of an overlay over bind `b`: its clone (root mode)
/// attached at [`LOWER_MOUNT`], or its source resolved again here (the
/// descriptor is returned, to be kept until the overlay is mounted).
fn attach_lower(b: &mut BindPlan) -> Result<(PathBuf, Option<OwnedFd>), MountError> {
    match b.tree.take() {
        Some(tree) => Ok((attach_clone(&tree, &b.dst)?, None)),
        None => {
            let fd = resolve_again(&b.src)?;
            Ok((fd_path(&fd), Some(fd)))
        }
    }
}

/// Attaches a tree the supervisor cloned (for the bind at `dst`) at
/// [`LOWER_MOUNT`], and says where.
fn attach_clone(tree: &OwnedFd, dst: &Path) -> Result<PathBuf, MountError> {
    let at = Path::new(LOWER_MOUNT);
    mkdir_p(at)?;
    sys::move_mount_to(tree.as_fd(), &cpath(at)?).map_err(|source| MountError::AttachIdmapped {
        target: dst.to_path_buf(),
        source,
    })?;
    Ok(at.to_path_buf())
}

fn detach_lower(lower: &Path) {
    if lower == Path::new(LOWER_MOUNT) {
        let _ = umount2(LOWER_MOUNT, MntFlags::MNT_DETACH);
    }
}

/// Mount an overlay of `lower`, `upper` and `work` at `dst`, always inside
/// the sandbox's user namespace, where the kernel keeps the overlay's marks
/// in `user.overlay.*`. The mount data is the workspace crate's
/// ([`warden_workspace::MountOptions`]), which owns the layer's format: the
/// marks this mount leaves are the ones its diff and commit read.
fn overlay_at(
    lower: &Path,
    upper: &Path,
    work: &Path,
    dst: &Spot,
    what: &str,
) -> Result<(), MountError> {
    let data = warden_workspace::MountOptions {
        lowerdir: lower.to_path_buf(),
        upperdir: upper.to_path_buf(),
        workdir: work.to_path_buf(),
        userxattr: true,
    }
    .data()
    .map_err(|source| MountError::OverlayData {
        what: what.to_string(),
        source,
    })?;
    mount(
        Some("overlay"),
        &dst.at(),
        Some("overlay"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some(data.as_os_str()),
    )
    .map_err(|source| MountError::Mount {
        what: what.to_string(),
        target: dst.inside.clone(),
        source,
    })
}

/// A named sandbox's kept home, with `--disk`: its saved copy (bind `b`'s
/// source: in root mode a clone attached for the time of the copy) is
/// restored into the sandbox's tmpfs, whose `home/` is bound at `dst`.
pub(super) fn mount_kept_home(
    root: &Root,
    b: &mut BindPlan,
    dst: &Path,
    size: u64,
) -> Result<(), MountError> {
    let (saved, attached) = match b.tree.take() {
        Some(tree) => (attach_clone(&tree, &b.dst)?, true),
        None => (under(OLDROOT, &b.src), false),
    };
    let restored = crate::kept::restore(&saved, "home", size);
    if attached {
        detach_lower(&saved);
    }
    bind(root, &restored?, dst, true)
}

/// The `n`th package cache, with `--disk`: an overlay whose lower layer is
/// the profile's shared cache (bind `b`'s source) and whose upper layer is
/// in the sandbox's tmpfs, merged into the shared cache when it stops.
pub(super) fn mount_cache(
    root: &Root,
    b: &mut BindPlan,
    n: usize,
    dst: &Path,
) -> Result<(), MountError> {
    let (lower, _keep) = attach_lower(b)?;
    let (upper, work) = crate::kept::cache_dirs(n)?;
    let spot = root.make(dst, Kind::Dir)?;
    let made = overlay_at(&lower, &upper, &work, &spot, "a package cache");
    detach_lower(&lower);
    made
}

/// The `n`th writable volume: an overlay of the volume's directory whose
/// writes land in the kept tmpfs (within `--disk`), merged into the
/// volume when the sandbox stops (see `crate::kept`).
pub(super) fn mount_volume(
    root: &Root,
    b: &mut BindPlan,
    n: usize,
    dst: &Path,
) -> Result<(), MountError> {
    let (lower, _keep) = attach_lower(b)?;
    let (upper, work) = crate::kept::volume_dirs(n)?;
    let spot = root.make(dst, Kind::Dir)?;
    let made = overlay_at(&lower, &upper, &work, &spot, "a volume");
    detach_lower(&lower);
    made
}
