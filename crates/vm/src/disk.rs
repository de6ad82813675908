//! A named VM sandbox's workspace layer held to its disk budget
//! (`resources.disk`) while the VM runs, as the process backend holds it
//! (`warden_jail::kept`): the saved layer (`STATE/sandboxes/NAME/upper`)
//! is copied into a tmpfs of exactly the budget, made detached by the
//! supervisor (`warden_jail::kept::detached`), and the VMM's 9p server or
//! virtiofsd serves the guest that copy, by a descriptor of its `upper/`
//! directory, never the saved layer on the host's disk. The copy is made
//! by a process in the VMM's cgroup (`warden_jail::kept::fill`), so its
//! pages count against the sandbox's memory limit as the guest's writes
//! through the VMM do. A write past the
//! budget fails with ENOSPC in the guest, whose `df` shows the budget; the
//! host's disk is spent only when the sandbox stops (or its supervisor
//! ends with the VM paused to disk), by at most the budget, when the
//! layer is written back whole or not at all (`warden_jail::kept::save`).
//!
//! It never runs unbounded: where the tmpfs cannot be made (warden without
//! root, which the resolution refuses first with `vm_kept_layer_rootless`)
//! the sandbox does not start.

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use warden_jail::kept::{KeptSave, TmpfsError};
use warden_policy::SandboxSpec;

/// Why a VM sandbox's layer could not be held within its disk budget.
#[derive(Debug, thiserror::Error)]
pub enum DiskError {
    #[error("cannot make the sandbox's size-limited state (`resources.disk`) for the VM's workspace: only root can make it here, and the VM is not run without it")]
    Tmpfs(#[source] std::io::Error),
    #[error(transparent)]
    Fill(#[from] TmpfsError),
    #[error(transparent)]
    Charge(#[from] warden_jail::kept::fill::FillError),
    #[error("cannot make {path} in the sandbox's size-limited state")]
    Create {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot save the sandbox's changes to {saved}")]
    Save {
        saved: PathBuf,
        #[source]
        source: warden_jail::kept::KeptError,
    },
}

/// The tmpfs of a running VM sandbox and where its layer goes back.
#[derive(Debug)]
pub struct Held {
    fd: OwnedFd,
    /// Its `upper/`, opened once (`O_PATH`): what the VMM is handed.
    upper: Arc<OwnedFd>,
    save: KeptSave,
    /// Not yet written back: a run that fails after the tmpfs was made
    /// writes it back when it is dropped, so that neither the guest's
    /// writes nor a stale `layer-unsaved` mark are left behind.
    pending: AtomicBool,
}

impl Held {
    /// The tmpfs of `spec`'s disk budget holding the saved layer `upper`
    /// (the workspace the guest is shared: an overlay's upper over an
    /// empty workspace), filled by a process in the VMM's `cgroup`;
    /// `None` when the spec keeps no layer.
    pub(crate) fn make(
        spec: &SandboxSpec,
        upper: Option<&Path>,
        cgroup: Option<&warden_jail::cgroup::Cgroup>,
    ) -> Result<Option<Arc<Held>>, DiskError> {
        let Some(upper) = upper else {
            return Ok(None);
        };
        // A named sandbox always has a budget (its own or the default);
        // one without would be a spec made by hand, whose layer has no
        // bound under the process backend either.
        let Some(disk) = spec.filesystem.disk else {
            return Ok(None);
        };
        let fd = warden_jail::kept::detached::tmpfs(disk.bytes).map_err(DiskError::Tmpfs)?;
        let into = live(&fd).join("upper");
        // Filled from the VMM's cgroup, so that the copy's pages count
        // against the sandbox's memory limit, as the guest's writes do.
        warden_jail::kept::fill::in_cgroup(cgroup, || {
            // An empty `work/` beside `upper/`, as the other backends'
            // tmpfs has: the owner's review tools follow the
            // `layer-unsaved` mark only to a tmpfs holding both
            // (`UnsavedMark::live_upper`), so without it `warden diff` of
            // a running VM sandbox read the stale saved layer. The guest
            // is shared `upper/` alone and never sees it.
            let work = live(&fd).join("work");
            std::fs::create_dir(&work).map_err(|source| DiskError::Create {
                path: work.clone(),
                source,
            })?;
            if upper.exists() {
                warden_jail::layer::copy_layer(upper, &into, false).map_err(|source| {
                    DiskError::from(TmpfsError::Restore {
                        size: disk.bytes,
                        source,
                    })
                })
            } else {
                std::fs::create_dir(&into).map_err(|source| DiskError::Create {
                    path: into.clone(),
                    source,
                })
            }
        })??;
        let opened = nix::fcntl::open(
            &into,
            nix::fcntl::OFlag::O_PATH
                | nix::fcntl::OFlag::O_DIRECTORY
                | nix::fcntl::OFlag::O_NOFOLLOW
                | nix::fcntl::OFlag::O_CLOEXEC,
            nix::sys::stat::Mode::empty(),
        )
        .map_err(|e| DiskError::Create {
            path: into.clone(),
            source: e.into(),
        })?;
        let held = Held {
            fd,
            upper: Arc::new(opened),
            save: KeptSave {
                upper: Some(upper.to_path_buf()),
                home: None,
                caches: Vec::new(),
                profile: None,
                volumes: Vec::new(),
                limit: disk.bytes,
            },
            pending: AtomicBool::new(true),
        };
        held.mark();
        Ok(Some(Arc::new(held)))
    }

    /// The layer's directory in the tmpfs, shared as the guest's
    /// workspace.
    pub(crate) fn upper(&self) -> &Arc<OwnedFd> {
        &self.upper
    }

    /// Say that the layer is in this tmpfs only: review commands (and a
    /// snapshot or fork of the running sandbox) read it through the mark,
    /// as a process sandbox's.
    pub(crate) fn mark(&self) {
        if let Some(mark) = self.save.mark() {
            let text = warden_workspace::UnsavedMark::of_own(self.fd.as_raw_fd())
                .map(|m| m.text())
                .unwrap_or_else(|| "unidentified\n".to_string());
            let _ = std::fs::write(mark, text);
        }
    }

    /// Write the layer back while the tmpfs stays this supervisor's (the
    /// VM paused to disk, its shares given back: the saved state then
    /// outlives this process whole, layer and memory alike). The mark
    /// goes with it until the guest runs again ([`Held::mark`]).
    pub(crate) fn sync(&self) -> Result<(), DiskError> {
        warden_jail::kept::save(&self.fd, &self.save, None)
            .map(drop)
            .map_err(|source| DiskError::Save {
                saved: self.save.place(),
                source,
            })
    }

    /// Write the layer back once the VMM (and virtiofsd) are gone.
    pub(crate) fn save(&self) -> Result<(), DiskError> {
        self.pending.store(false, Ordering::SeqCst);
        // No fence: what is written back is the sandbox's own layer, in
        // the state, reviewed before anything of it reaches the host.
        self.sync()
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if self.pending.load(Ordering::SeqCst) {
            let _ = warden_jail::kept::save(&self.fd, &self.save, None);
        }
    }
}

fn live(fd: &OwnedFd) -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()))
}
