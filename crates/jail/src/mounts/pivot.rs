//! The new root's frame and the way in and out: the scratch tmpfs the
//! assembly runs in (the host's root below it at `/oldroot`), the base of
//! the new root (a prepared root tree, or the host's system directories
//! bound read-only with the secrets of its `/etc` covered), and, once all
//! is in place, the read-only root, the host's root detached and the final
//! `pivot_root`.
//!
//! It never mounts what the sandbox writes to (that is `fresh`, `binds`
//! and `overlay`), and nothing it does propagates to the host's mount
//! namespace.

use super::inside::{Kind, Root};
use super::ops::{bind, cpath, do_mount, fd_path, mkdir_p, resolve_again, set_attr, under};
use super::{MountError, RootfsPlan, BASE, HIDDEN_IN_ETC, NEWROOT, OLDROOT, SYSTEM_DIRS};
use crate::sys;
use nix::mount::{umount2, MntFlags, MsFlags};
use nix::sys::stat::Mode;
use std::os::fd::AsFd;
use std::os::unix::fs::symlink;
use std::path::Path;

/// Make this mount namespace private, and pivot into a scratch tmpfs that
/// holds the new root (at [`NEWROOT`]) being assembled and the host's root
/// (at [`OLDROOT`]).
pub(super) fn enter_scratch() -> Result<(), MountError> {
    // Nothing done here may propagate back to the host's mount namespace.
    do_mount(
        None,
        Path::new("/"),
        None,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None,
        "private propagation",
    )?;
    // A scratch tmpfs becomes the root for the time of the assembly, with
    // the host's root below it at /oldroot, so that every source path,
    // including ones under the host's /tmp, stays reachable.
    do_mount(
        Some("tmpfs"),
        Path::new(BASE),
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        // Room for the staged files (resolv.conf, a trust bundle).
        Some("size=4m,mode=0755"),
        "the scratch tmpfs",
    )?;
    let base = Path::new(BASE);
    for d in ["newroot", "oldroot"] {
        mkdir_p(&base.join(d))?;
    }
    std::env::set_current_dir(base).map_err(|source| MountError::MountPoint {
        path: base.to_path_buf(),
        source,
    })?;
    sys::pivot_root(c".", c"oldroot").map_err(MountError::Pivot)?;
    std::env::set_current_dir("/").map_err(|source| MountError::MountPoint {
        path: "/".into(),
        source,
    })
}

/// A prepared root tree as the new root (in root mode the supervisor's
/// detached clone, else the path resolved again here), with the mount
/// points the sandbox needs.
pub(super) fn mount_rootfs(rootfs: &mut RootfsPlan) -> Result<Root, MountError> {
    let newroot = Path::new(NEWROOT);
    match rootfs.tree.take() {
        Some(tree) => sys::move_mount_to(tree.as_fd(), &cpath(newroot)?).map_err(|source| {
            MountError::AttachIdmapped {
                target: rootfs.path.clone(),
                source,
            }
        })?,
        None => {
            let fd = resolve_again(&rootfs.path)?;
            do_mount(
                Some(&fd_path(&fd).to_string_lossy()),
                newroot,
                None,
                MsFlags::MS_BIND | MsFlags::MS_REC,
                None,
                "the prepared root tree",
            )?;
        }
    }
    // The tree is the image author's: its own entries are made and found
    // beneath it, never through its links.
    let root = Root::open()?;
    for d in ["/proc", "/dev", "/tmp"] {
        root.make(Path::new(d), Kind::Dir)?;
    }
    Ok(root)
}

/// A root built from the host: a small tmpfs with the host's
/// [`SYSTEM_DIRS`] bound read-only (their links kept as links), its
/// `/etc` secrets hidden.
pub(super) fn mount_host_system() -> Result<Root, MountError> {
    let newroot = Path::new(NEWROOT);
    do_mount(
        Some("tmpfs"),
        newroot,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some("size=1m,mode=0755"),
        "the root tmpfs",
    )?;
    let root = Root::open()?;
    for dir in SYSTEM_DIRS {
        let host = under(OLDROOT, Path::new(dir));
        let inside = under(NEWROOT, Path::new(dir));
        match std::fs::symlink_metadata(&host) {
            Ok(m) if m.file_type().is_symlink() => {
                // Merged-/usr hosts: /bin -> usr/bin and so on.
                let target = std::fs::read_link(&host).map_err(|source| MountError::Create {
                    path: host.clone(),
                    source,
                })?;
                symlink(&target, &inside).map_err(|source| MountError::Create {
                    path: inside.clone(),
                    source,
                })?;
            }
            Ok(m) if m.is_dir() => bind(&root, &host, Path::new(dir), false)?,
            _ => {}
        }
    }
    hide_etc_secrets()?;
    for d in ["proc", "dev", "tmp", "var"] {
        mkdir_p(&newroot.join(d))?;
    }
    let var_tmp = newroot.join("var/tmp");
    symlink("/tmp", &var_tmp).map_err(|source| MountError::Create {
        path: var_tmp,
        source,
    })?;
    Ok(root)
}

/// Make the new root read-only, detach the host's root and pivot into the
/// new one.
pub(super) fn leave_host() -> Result<(), MountError> {
    let newroot = Path::new(NEWROOT);
    // The root directory itself is read-only: the sandbox writes only to
    // its workspace, /tmp, /dev/shm and declared read-write paths.
    set_attr(
        newroot,
        sys::MOUNT_ATTR_RDONLY | sys::MOUNT_ATTR_NOSUID | sys::MOUNT_ATTR_NODEV,
        false,
    )?;

    // Leave the host behind: detach /oldroot, then make /newroot the root.
    do_mount(
        None,
        Path::new(OLDROOT),
        None,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None,
        "private propagation of the old root",
    )?;
    umount2(OLDROOT, MntFlags::MNT_DETACH).map_err(MountError::DetachOldRoot)?;
    std::env::set_current_dir(newroot).map_err(|source| MountError::MountPoint {
        path: newroot.to_path_buf(),
        source,
    })?;
    sys::pivot_root(c".", c".").map_err(MountError::Pivot)?;
    umount2(".", MntFlags::MNT_DETACH).map_err(MountError::DetachOldRoot)?;
    std::env::set_current_dir("/").map_err(|source| MountError::MountPoint {
        path: "/".into(),
        source,
    })?;
    Ok(())
}

/// Cover the secrets of the host's `/etc` with empty, unreadable stand-ins.
fn hide_etc_secrets() -> Result<(), MountError> {
    let empty_file = Path::new("/.hidden-file");
    std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(empty_file)
        .map_err(|source| MountError::Create {
            path: empty_file.to_path_buf(),
            source,
        })?;
    nix::sys::stat::fchmodat(
        nix::fcntl::AT_FDCWD,
        empty_file,
        Mode::empty(),
        nix::sys::stat::FchmodatFlags::FollowSymlink,
    )
    .map_err(|e| MountError::Create {
        path: empty_file.to_path_buf(),
        source: e.into(),
    })?;
    for (rel, _why) in HIDDEN_IN_ETC {
        let target = Path::new(NEWROOT).join("etc").join(rel);
        let Ok(meta) = std::fs::symlink_metadata(&target) else {
            continue;
        };
        if meta.file_type().is_symlink() {
            // A symlink resolves against the sandbox's own root, where its
            // target is covered (or absent) by the same rules.
            continue;
        }
        if meta.is_dir() {
            do_mount(
                Some("tmpfs"),
                &target,
                Some("tmpfs"),
                MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC | MsFlags::MS_RDONLY,
                Some("size=4k,mode=0000"),
                "an empty stand-in",
            )?;
        } else {
            do_mount(
                Some(&empty_file.to_string_lossy()),
                &target,
                None,
                MsFlags::MS_BIND,
                None,
                "an empty stand-in",
            )?;
            set_attr(
                &target,
                sys::MOUNT_ATTR_RDONLY | sys::MOUNT_ATTR_NOSUID | sys::MOUNT_ATTR_NODEV,
                false,
            )?;
        }
    }
    Ok(())
}
