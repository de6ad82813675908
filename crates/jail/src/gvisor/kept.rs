//! What a gVisor sandbox keeps on the host's disk (a workspace overlay's
//! upper layer, a named sandbox's home), held while it runs in one tmpfs
//! of its disk budget (`resources.disk`, asked or the default), as the
//! process backend holds it ([`crate::kept`]): a write past the budget
//! fails with ENOSPC inside, and the host's disk is spent only when the
//! sandbox stops, by at most the budget.
//!
//! The tmpfs is made detached (`fsopen`, `fsmount`): it is in no mount
//! namespace of the host's, a child of the supervisor placed in runsc's
//! cgroup fills it from the saved state through its descriptor (so its
//! pages count against the sandbox's memory limit, [`crate::kept::fill`]), and runsc's child attaches views of it in its
//! own mount namespace ([`super::mount`]): the overlay's upper and work
//! directories, the home bound from it. runsc's file server writes into
//! it, never onto the host's disk. When runsc is gone the supervisor
//! writes it back ([`crate::kept::save`]); a supervisor killed before
//! that loses what the sandbox wrote since it started (the `layer-unsaved`
//! mark says so, as for a process sandbox).

use crate::kept::{KeptError, KeptSave, TmpfsError};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use warden_policy::{Home, SandboxSpec};

/// The tmpfs of a running gVisor sandbox and what goes back where.
pub(super) struct Kept {
    fd: OwnedFd,
    save: KeptSave,
    /// Not yet written back: a run that fails after the tmpfs was made
    /// (runsc never started, or the supervisor's service failed) writes
    /// it back when it is dropped, so that neither the sandbox's writes
    /// nor a stale `layer-unsaved` mark are left behind.
    pending: bool,
}

/// Why the kept state could not be held within the budget.
#[derive(Debug, thiserror::Error)]
pub enum KeptStateError {
    #[error("cannot make the sandbox's size-limited state (`resources.disk`) for runsc")]
    Tmpfs(#[source] std::io::Error),
    #[error(transparent)]
    Fill(#[from] TmpfsError),
    #[error("cannot make {path} in the sandbox's size-limited state")]
    Create {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Charge(#[from] crate::kept::fill::FillError),
    #[error("cannot save the sandbox's changes to {saved}")]
    Save {
        saved: PathBuf,
        #[source]
        source: KeptError,
    },
}

impl Kept {
    /// The tmpfs of `spec`'s disk budget holding the saved layer
    /// (`upper`, `work`) of an overlay whose saved upper is `upper`, and
    /// the saved home of a named sandbox; `None` when the spec keeps
    /// nothing or has no budget. The tmpfs is filled by a process in
    /// `cgroup`, runsc's, so that its pages count against the sandbox's
    /// memory limit ([`crate::kept::fill`]).
    pub(super) fn make(
        spec: &SandboxSpec,
        upper: Option<&Path>,
        cgroup: Option<&crate::cgroup::Cgroup>,
    ) -> Result<Option<Kept>, KeptStateError> {
        let Some(disk) = spec.filesystem.disk else {
            return Ok(None);
        };
        let home = match &spec.filesystem.home {
            Home::Dir(d) => Some(d.clone()),
            _ => None,
        };
        if upper.is_none() && home.is_none() {
            return Ok(None);
        }
        let fd = crate::kept::detached::tmpfs(disk.bytes).map_err(KeptStateError::Tmpfs)?;
        let live = live(&fd);
        crate::kept::fill::in_cgroup(cgroup, || {
            if let Some(upper) = upper {
                restore(upper, &live.join("upper"), disk.bytes)?;
                make_dir(&live.join("work"))?;
            }
            if let Some(home) = &home {
                restore(home, &live.join("home"), disk.bytes)?;
            }
            Ok::<(), KeptStateError>(())
        })??;
        let save = KeptSave {
            upper: upper.map(Path::to_path_buf),
            home,
            caches: Vec::new(),
            profile: None,
            volumes: Vec::new(),
            limit: disk.bytes,
        };
        if let Some(mark) = save.mark() {
            // Review commands read the running layer through this mark,
            // as a process sandbox's.
            let text = warden_workspace::UnsavedMark::of_own(fd.as_raw_fd())
                .map(|m| m.text())
                .unwrap_or_else(|| "unidentified\n".to_string());
            let _ = std::fs::write(mark, text);
        }
        Ok(Some(Kept {
            fd,
            save,
            pending: true,
        }))
    }

    /// The tmpfs's root (for the views runsc's child attaches).
    pub(super) fn root(&self) -> &OwnedFd {
        &self.fd
    }

    /// The home directory in the tmpfs, opened, when one is kept.
    pub(super) fn home(&self) -> Option<OwnedFd> {
        self.save.home.as_ref()?;
        nix::fcntl::open(
            &live(&self.fd).join("home"),
            nix::fcntl::OFlag::O_PATH
                | nix::fcntl::OFlag::O_DIRECTORY
                | nix::fcntl::OFlag::O_NOFOLLOW
                | nix::fcntl::OFlag::O_CLOEXEC,
            nix::sys::stat::Mode::empty(),
        )
        .ok()
    }

    /// Write the state back once runsc is gone.
    pub(super) fn save(mut self) -> Result<(), KeptStateError> {
        self.pending = false;
        // No fence: a gVisor sandbox has no volumes (refused at its
        // start), and what it keeps is its own (its layer and home, in
        // the state), reviewed before anything of it reaches the host.
        crate::kept::save(&self.fd, &self.save, None)
            .map(drop)
            .map_err(|source| KeptStateError::Save {
                saved: self.save.place(),
                source,
            })
    }
}

impl Drop for Kept {
    fn drop(&mut self) {
        if self.pending {
            let _ = crate::kept::save(&self.fd, &self.save, None);
        }
    }
}

fn live(fd: &OwnedFd) -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()))
}

fn make_dir(p: &Path) -> Result<(), KeptStateError> {
    std::fs::create_dir(p).map_err(|source| KeptStateError::Create {
        path: p.to_path_buf(),
        source,
    })
}

fn restore(saved: &Path, into: &Path, size: u64) -> Result<(), KeptStateError> {
    if !saved.exists() {
        return make_dir(into);
    }
    crate::layer::copy_layer(saved, into, false)
        .map_err(|source| TmpfsError::Restore { size, source }.into())
}
