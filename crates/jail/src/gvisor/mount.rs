//! The workspace as runsc's file server sees it, mounted in runsc's own
//! mount namespace (made between fork and exec of `runsc run`): the host
//! never sees these mounts, and nothing is left mounted should warden be
//! killed.
//!
//! Two things may be mounted at the bundle's `workspace` point: the overlay
//! of a reviewable workspace, and an idmapped view of the workspace that
//! swaps its owner with the sandbox's IDs ([`crate::identity::SwapMap`]),
//! where the owner is root or a system account, whose IDs the sandbox
//! never takes: the sandbox (nobody) writes the workspace as its own and
//! what it makes lands on disk as the owner's, while every other host file
//! keeps its owner, so root-only files stay root's.

use crate::identity::SwapMap;
use std::ffi::CString;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// What the child of `runsc run` mounts at `target`, prepared before the
/// fork so that the child only makes system calls.
pub struct WorkspaceMount {
    target: CString,
    /// Idmapped views, made here (detached trees: a mount of this
    /// namespace cannot be cloned from runsc's new one), and where each is
    /// attached: the workspace itself at `target`, or an overlay's layers.
    views: Vec<(OwnedFd, CString)>,
    /// The overlay's mount data, mounted at `target` after the views.
    overlay: Option<CString>,
}

/// Why the workspace could not be prepared for runsc.
#[derive(Debug, thiserror::Error)]
pub enum MountError {
    #[error("a path holds a NUL byte")]
    Nul,
    #[error("the overlay's upper and work directories must be side by side")]
    Layout,
    #[error("cannot make {path}")]
    Point {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot write the overlay's options: {0}")]
    Options(String),
    #[error("cannot show the workspace {path} with its owner mapped to the sandbox's user (nobody): its file system needs idmapped mounts")]
    Idmap {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl WorkspaceMount {
    /// The overlay of `lower` and the sandbox's layer (`dirs`) at
    /// `target`. With `swap`, overlayfs cannot be idmapped itself, so its
    /// layers are: idmapped views of `lower` and of the layer's directory
    /// (upper and work side by side), attached at points made in `state`.
    pub fn overlay(
        target: &Path,
        lower: &Path,
        dirs: &warden_policy::OverlayDirs,
        swap: Option<&SwapMap>,
        state: &Path,
    ) -> Result<WorkspaceMount, MountError> {
        let mut views = Vec::new();
        let mut options = warden_workspace::MountOptions {
            lowerdir: lower.to_path_buf(),
            upperdir: dirs.upper.clone(),
            workdir: dirs.work.clone(),
            userxattr: true,
        };
        if let Some(swap) = swap {
            let layer = dirs.upper.parent().unwrap_or(Path::new("/"));
            let (Some(upper), Some(work)) = (dirs.upper.file_name(), dirs.work.file_name()) else {
                return Err(MountError::Layout);
            };
            if dirs.work.parent() != Some(layer) {
                return Err(MountError::Layout);
            }
            let (lower_at, layer_at) = (state.join("lower-view"), state.join("layer-view"));
            for (from, at) in [(lower, &lower_at), (layer, &layer_at)] {
                std::fs::create_dir_all(at).map_err(|source| MountError::Point {
                    path: at.clone(),
                    source,
                })?;
                let tree = view(from, swap)?;
                views.push((tree, c(at.as_os_str().as_bytes())?));
            }
            options.lowerdir = lower_at;
            options.upperdir = layer_at.join(upper);
            options.workdir = layer_at.join(work);
        }
        let data = options
            .data()
            .map_err(|e| MountError::Options(crate::chain_str(&e)))?;
        Ok(WorkspaceMount {
            target: c(target.as_os_str().as_bytes())?,
            overlay: Some(c(data.as_bytes())?),
            views,
        })
    }

    /// The directory `workspace` at `target`, shown through `swap`.
    pub fn idmapped(
        target: &Path,
        workspace: &Path,
        swap: &SwapMap,
    ) -> Result<WorkspaceMount, MountError> {
        let at = c(target.as_os_str().as_bytes())?;
        Ok(WorkspaceMount {
            views: vec![(view(workspace, swap)?, at.clone())],
            target: at,
            overlay: None,
        })
    }

    /// Mount it, in the child between fork and exec: a mount namespace of
    /// its own, the idmapped views, then the overlay.
    /// Async-signal-safe: system calls only, on what [`Self::overlay`] or
    /// [`Self::idmapped`] prepared.
    pub fn in_child(&self) -> std::io::Result<()> {
        let none = std::ptr::null::<libc::c_char>();
        // SAFETY: unshare and mount take valid NUL-terminated strings that
        // outlive the calls (or null where the call allows it); the kernel
        // only reads them.
        let ns = unsafe {
            libc::unshare(libc::CLONE_NEWNS) == 0
                && libc::mount(
                    none,
                    c"/".as_ptr(),
                    none,
                    libc::MS_REC | libc::MS_SLAVE,
                    std::ptr::null(),
                ) == 0
        };
        if !ns {
            return Err(std::io::Error::last_os_error());
        }
        for (tree, at) in &self.views {
            crate::sys::move_mount_to(tree.as_fd(), at)?;
        }
        if let Some(data) = &self.overlay {
            // SAFETY: as above; `data` is a NUL-terminated string.
            let rc = unsafe {
                libc::mount(
                    c"overlay".as_ptr(),
                    self.target.as_ptr(),
                    c"overlay".as_ptr(),
                    libc::MS_NOSUID | libc::MS_NODEV,
                    data.as_ptr().cast(),
                )
            };
            if rc != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
        Ok(())
    }
}

fn c(b: &[u8]) -> Result<CString, MountError> {
    CString::new(b).map_err(|_| MountError::Nul)
}

/// An idmapped view of `dir` showing `swap`.
fn view(dir: &Path, swap: &SwapMap) -> Result<OwnedFd, MountError> {
    crate::identity::idmapped_view(dir, swap).map_err(|source| MountError::Idmap {
        path: dir.to_path_buf(),
        source,
    })
}
