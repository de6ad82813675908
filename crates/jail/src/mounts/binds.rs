//! The plan's binds, each mounted where it belongs (through an overlay,
//! from the kept tmpfs of a sandbox with a disk limit, or as it is), and
//! warden's state directory covered wherever a bind shows it.
//!
//! Every bind is made read-only unless the plan says otherwise, and
//! `nosuid,nodev` recursively; a host path is resolved again here, never
//! taken on the supervisor's word alone.

use super::inside::{Kind, Root};
use super::ops::{bind, fd_path, mount_on, resolve_again, set_attr_inside};
use super::overlay::{mount_cache, mount_kept_home, mount_overlay, mount_volume};
use super::{BindPlan, MountError, RootPlan};
use crate::sys;
use nix::mount::{umount2, MntFlags, MsFlags};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

/// The plan's binds, each where it belongs: through an overlay, from the
/// kept tmpfs of a sandbox with a disk limit (mounted first and detached
/// once all are in place), or bound as it is.
pub(super) fn mount_binds(root: &Root, plan: &mut RootPlan) -> Result<(), MountError> {
    if let Some(kept) = plan.kept {
        plan.layer = Some(crate::kept::mount_tmpfs(kept)?);
    }
    let kept_size = plan.kept.map(|k| k.size).unwrap_or(0);
    for b in &mut plan.binds {
        let dst = b.dst.clone();
        if let Some(ov) = b.overlay.take() {
            mount_overlay(root, b, &ov, &dst)?;
            continue;
        }
        match b.kept {
            Some(crate::kept::KeptBind::Home) => {
                mount_kept_home(root, b, &dst, kept_size)?;
                continue;
            }
            Some(crate::kept::KeptBind::Cache(n)) => {
                mount_cache(root, b, n, &dst)?;
                continue;
            }
            Some(crate::kept::KeptBind::Volume(n)) => {
                mount_volume(root, b, n, &dst)?;
                continue;
            }
            None => {}
        }
        mount_plain(root, b, &dst)?;
    }

    if plan.layer.is_some() {
        // Everything in the tmpfs is mounted where it belongs; the mounts
        // hold their own references.
        let _ = umount2(crate::kept::KEPT_MOUNT, MntFlags::MNT_DETACH);
    }
    Ok(())
}

/// Bind `b` at `dst` as it is: in root mode the supervisor's detached
/// (idmapped) clone, attached; else its path resolved again here.
fn mount_plain(root: &Root, b: &mut BindPlan, dst: &Path) -> Result<(), MountError> {
    match b.tree.take() {
        Some(tree) => {
            // A bind of a single file gets a file to be mounted on.
            let is_dir = nix::sys::stat::fstat(&tree)
                .map(|st| st.st_mode & libc::S_IFMT == libc::S_IFDIR)
                .unwrap_or(true);
            let kind = if is_dir { Kind::Dir } else { Kind::File };
            let spot = root.make(dst, kind)?;
            sys::move_mount_onto(tree.as_fd(), spot.fd().as_fd()).map_err(|source| {
                MountError::AttachIdmapped {
                    target: b.dst.clone(),
                    source,
                }
            })?;
            let mut attrs = sys::MOUNT_ATTR_NOSUID | sys::MOUNT_ATTR_NODEV;
            if !b.writable {
                attrs |= sys::MOUNT_ATTR_RDONLY;
            }
            set_attr_inside(root, dst, attrs, true)
        }
        None => {
            let fd = resolve_again(&b.src)?;
            bind(root, &fd_path(&fd), dst, b.writable)
        }
    }
}

/// Cover each of `hidden` (host paths) with an empty, unreadable,
/// read-only stand-in wherever a bind shows it: a bind of `~` holds
/// warden's state directory, which no sandbox may read.
pub(super) fn cover_hidden(
    root: &Root,
    binds: &[BindPlan],
    hidden: &[PathBuf],
) -> Result<(), MountError> {
    for h in hidden {
        for b in binds {
            let Ok(rest) = h.strip_prefix(&b.src) else {
                continue;
            };
            let Some(target) = root.find(&b.dst.join(rest))? else {
                continue;
            };
            if target.file_type() != Some(rustix::fs::FileType::Directory) {
                continue;
            }
            mount_on(
                Some("tmpfs"),
                &target,
                Some("tmpfs"),
                MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC | MsFlags::MS_RDONLY,
                Some("size=4k,mode=0000"),
                "an empty stand-in for warden's state directory",
            )?;
        }
    }
    Ok(())
}
