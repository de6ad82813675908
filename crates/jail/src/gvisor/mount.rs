//! The workspace as runsc's file server sees it, mounted in runsc's own
//! mount namespace (made between fork and exec of `runsc run`): the host
//! never sees these mounts, and nothing is left mounted should warden be
//! killed.
//!
//! Two things may be mounted at the bundle's `workspace` point: the overlay
//! of a reviewable workspace, and a view of the workspace, idmapped where
//! its owner is root or a system account, whose IDs the sandbox never
//! takes ([`crate::identity::SwapMap`]): the sandbox (nobody) writes the
//! workspace as its own and what it makes lands on disk as the owner's,
//! while every other host file keeps its owner, so root-only files stay
//! root's.
//!
//! Each view is made from the workspace's directory as warden opened and
//! checked it ([`crate::open_workspace`]), never from its path: runsc
//! would otherwise open whatever the path holds when it looks, and a
//! directory swapped in there since would be the sandbox's.

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
    #[error("cannot show runsc the workspace {path} as the directory warden opened (a detached copy of its mount)")]
    View {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot show the workspace {path} with its owner mapped to the sandbox's user (nobody): its file system needs idmapped mounts")]
    Idmap {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl WorkspaceMount {
    /// The overlay of `lower` (its path, and the directory opened there)
    /// and the sandbox's layer (`dirs`) at `target`. The lower is a view
    /// of the directory opened, attached at a point made in `state`. With
    /// `swap`, overlayfs cannot be idmapped itself, so its layers are:
    /// idmapped views of `lower` and of the layer's directory (upper and
    /// work side by side), attached at points made in `state`.
    ///
    /// With `kept`, the layer is not `dirs` but the `upper` and `work`
    /// directories of that tmpfs of the disk budget ([`super::kept`]): a
    /// view of it (idmapped with `swap`) is attached in `state` instead.
    pub fn overlay(
        target: &Path,
        (lower, lower_dir): (&Path, &OwnedFd),
        dirs: &warden_policy::OverlayDirs,
        swap: Option<&SwapMap>,
        state: &Path,
        kept: Option<&OwnedFd>,
    ) -> Result<WorkspaceMount, MountError> {
        let mut views = Vec::new();
        let lower_at = state.join("lower-view");
        std::fs::create_dir_all(&lower_at).map_err(|source| MountError::Point {
            path: lower_at.clone(),
            source,
        })?;
        views.push((
            view(lower, lower_dir, swap)?,
            c(lower_at.as_os_str().as_bytes())?,
        ));
        let mut options = warden_workspace::MountOptions {
            lowerdir: lower_at,
            upperdir: dirs.upper.clone(),
            workdir: dirs.work.clone(),
            userxattr: true,
        };
        if let Some(kept) = kept {
            let layer_at = state.join("layer-view");
            std::fs::create_dir_all(&layer_at).map_err(|source| MountError::Point {
                path: layer_at.clone(),
                source,
            })?;
            let tree = view(&layer_at, kept, swap)?;
            views.push((tree, c(layer_at.as_os_str().as_bytes())?));
            options.upperdir = layer_at.join("upper");
            options.workdir = layer_at.join("work");
        } else if let Some(swap) = swap {
            let layer = dirs.upper.parent().unwrap_or(Path::new("/"));
            let (Some(upper), Some(work)) = (dirs.upper.file_name(), dirs.work.file_name()) else {
                return Err(MountError::Layout);
            };
            if dirs.work.parent() != Some(layer) {
                return Err(MountError::Layout);
            }
            // The layer is warden's own state, of no path anyone else
            // may change.
            let layer_at = state.join("layer-view");
            std::fs::create_dir_all(&layer_at).map_err(|source| MountError::Point {
                path: layer_at.clone(),
                source,
            })?;
            let tree = crate::identity::idmapped_view(layer, swap).map_err(|source| {
                MountError::Idmap {
                    path: layer.to_path_buf(),
                    source,
                }
            })?;
            views.push((tree, c(layer_at.as_os_str().as_bytes())?));
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

    /// The workspace (its path, and the directory opened there) at
    /// `target`, shown through `swap` when there is one.
    pub fn attached(
        target: &Path,
        (workspace, dir): (&Path, &OwnedFd),
        swap: Option<&SwapMap>,
    ) -> Result<WorkspaceMount, MountError> {
        let at = c(target.as_os_str().as_bytes())?;
        Ok(WorkspaceMount {
            views: vec![(view(workspace, dir, swap)?, at.clone())],
            target: at,
            overlay: None,
        })
    }

    /// Nothing at a target of its own: only views to attach (the kept
    /// home of a sandbox without a workspace).
    pub fn views_only() -> WorkspaceMount {
        WorkspaceMount {
            target: CString::default(),
            views: Vec::new(),
            overlay: None,
        }
    }

    /// Also attach a plain view of the directory opened as `dir` at
    /// `at` (a point made in warden's state), before the workspace's.
    pub fn also(&mut self, dir: &OwnedFd, at: &Path) -> Result<(), MountError> {
        std::fs::create_dir_all(at).map_err(|source| MountError::Point {
            path: at.to_path_buf(),
            source,
        })?;
        let tree = view(at, dir, None)?;
        self.views.insert(0, (tree, c(at.as_os_str().as_bytes())?));
        Ok(())
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

/// A view of the directory opened as `dir` (at `path`), idmapped to show
/// `swap` when there is one.
fn view(path: &Path, dir: &OwnedFd, swap: Option<&SwapMap>) -> Result<OwnedFd, MountError> {
    let path = path.to_path_buf();
    crate::identity::view_of_dir(dir.as_fd(), swap).map_err(|source| match swap {
        Some(_) => MountError::Idmap { path, source },
        None => MountError::View { path, source },
    })
}
