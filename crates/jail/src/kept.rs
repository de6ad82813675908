//! What warden keeps on the host's disk for a sandbox, held while it runs
//! in one tmpfs of `--disk` bytes (see [`crate::layer`] for the copy): a
//! workspace overlay's upper layer (`upper/`, `work/`), a named sandbox's
//! kept home (`home/`, bound at [`warden_policy::HOME_MOUNT`]), and the
//! upper layers of the package caches it declares (`caches/N/`, each an
//! overlay over the profile's shared cache) and of its writable volumes
//! (`volumes/N/`, each an overlay over the volume's directory). All of it
//! counts against the
//! one limit, in bytes and in inodes (one per [`ENTRY_BYTES`]): a write
//! or a new file past it fails with ENOSPC inside, and the host's disk is
//! spent only when the sandbox stops, by at most the limit.
//!
//! The init makes the tmpfs and fills it from the saved state
//! ([`mount_tmpfs`], [`mount_home`], [`mount_cache`]); the supervisor,
//! which holds a descriptor of it, writes it back when every process of
//! the sandbox is gone ([`save`]).

pub mod detached;
pub mod fill;

use crate::cache::{self, CacheError, Merged};
use crate::layer::{self, LayerError};
use nix::errno::Errno;
use nix::mount::MsFlags;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use warden_workspace::fsutil::ENTRY_BYTES;

/// Where the tmpfs is mounted while the sandbox's root is built.
pub(crate) const KEPT_MOUNT: &str = "/overlay-layer";

/// What of a bind is kept in the tmpfs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeptBind {
    /// The named sandbox's home: restored from the bind's source into
    /// `home/` of the tmpfs, which is bound in its place.
    Home,
    /// A package cache, the `N`th: an overlay whose lower layer is the
    /// bind's source and whose upper layer is `caches/N/` of the tmpfs.
    Cache(usize),
    /// A writable volume, the `N`th: an overlay whose lower layer is the
    /// volume's directory and whose upper layer is `volumes/N/` of the
    /// tmpfs, so that what the sandbox writes there is within `--disk`.
    Volume(usize),
}

/// The tmpfs of a sandbox that keeps state: its size, and whether
/// overlays will be made on it (their marks need `user.*` attributes on
/// tmpfs, Linux 6.6).
#[derive(Debug, Clone, Copy)]
pub struct KeptPlan {
    pub size: u64,
    pub overlays: bool,
}

/// What the supervisor writes back when the sandbox stops.
#[derive(Debug, Clone)]
pub struct KeptSave {
    /// The saved upper layer of a workspace overlay.
    pub upper: Option<PathBuf>,
    /// The saved home of a named sandbox.
    pub home: Option<PathBuf>,
    /// The shared directory of each cache, in the order of `caches/N/`.
    pub caches: Vec<PathBuf>,
    /// The profile's directory of caches, which the merges keep within
    /// `limit`.
    pub profile: Option<PathBuf>,
    /// The directory of each writable volume, in the order of
    /// `volumes/N/`: each grows by at most `limit` when the sandbox's
    /// writes are merged into it.
    pub volumes: Vec<PathBuf>,
    pub limit: u64,
}

impl KeptSave {
    /// Where the state is written back, for messages.
    pub fn place(&self) -> PathBuf {
        self.upper
            .as_ref()
            .or(self.home.as_ref())
            .or(self.profile.as_ref())
            .or(self.volumes.first())
            .cloned()
            .unwrap_or_default()
    }

    /// Where the mark saying that the sandbox's state is in memory only
    /// goes (see [`layer::UNSAVED_MARK`]): beside the saved layer or home.
    /// A run that keeps only cache writes has none: what it loses when its
    /// supervisor is killed is what it would have added to a cache.
    pub fn mark(&self) -> Option<PathBuf> {
        self.upper
            .as_ref()
            .or(self.home.as_ref())
            .map(|p| p.with_file_name(layer::UNSAVED_MARK))
    }
}

#[derive(Debug, thiserror::Error)]
pub enum KeptError {
    #[error(transparent)]
    Layer(#[from] LayerError),
    #[error(transparent)]
    Cache(#[from] CacheError),
}

/// Why the tmpfs of what is kept could not be made or filled (the
/// sandbox's root is then not built: [`crate::mounts::MountError`]
/// carries it).
#[derive(Debug, thiserror::Error)]
pub enum TmpfsError {
    #[error("cannot mount {what} at {target}")]
    Mount {
        what: String,
        target: PathBuf,
        #[source]
        source: Errno,
    },
    #[error("cannot create {path} in the sandbox's root")]
    Create {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("this kernel's tmpfs cannot hold overlay marks (user.* extended attributes on tmpfs need Linux 6.6), so `resources.disk` cannot be enforced")]
    Xattrs(#[source] Errno),
    #[error("cannot restore the sandbox's saved changes into its layer of {} (`resources.disk`): if they are larger, raise `resources.disk`", warden_policy::format_size(*size))]
    Restore {
        size: u64,
        #[source]
        source: LayerError,
    },
}

fn mount_err(what: &str, target: &Path) -> impl FnOnce(Errno) -> TmpfsError {
    let (what, target) = (what.to_string(), target.to_path_buf());
    move |source| TmpfsError::Mount {
        what,
        target,
        source,
    }
}

fn create_err(path: &Path) -> impl FnOnce(std::io::Error) -> TmpfsError {
    let path = path.to_path_buf();
    move |source| TmpfsError::Create { path, source }
}

/// Warden's own directories in the tmpfs (`upper/`, `work/`, `home/`,
/// `caches/N/`, `volumes/N/` and what overlayfs makes in a work
/// directory), beyond what the sandbox is given.
const OWN_INODES: u64 = 64;

/// The inodes the tmpfs of `size` bytes holds: one for every
/// [`ENTRY_BYTES`] of it, what each entry costs when it is kept or merged
/// on the host. Without a bound a tmpfs holds as many empty files and
/// directories as memory allows (millions), which cost its bytes nothing
/// and the host's disk an inode, a block and a name each.
pub(crate) fn inodes(size: u64) -> u64 {
    (size / ENTRY_BYTES).saturating_add(OWN_INODES)
}

/// Mount the tmpfs of `plan.size` bytes at [`KEPT_MOUNT`]; returns a
/// descriptor of its root, which keeps it alive once detached.
pub(crate) fn mount_tmpfs(plan: KeptPlan) -> Result<OwnedFd, TmpfsError> {
    let root = Path::new(KEPT_MOUNT);
    std::fs::DirBuilder::new()
        .recursive(true)
        .create(root)
        .map_err(create_err(root))?;
    nix::mount::mount(
        Some("tmpfs"),
        root,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some(
            format!(
                "size={},nr_inodes={},mode=0700",
                plan.size,
                inodes(plan.size)
            )
            .as_str(),
        ),
    )
    .map_err(mount_err(
        "the sandbox's size-limited state (`resources.disk`)",
        root,
    ))?;
    if plan.overlays {
        // overlayfs keeps its marks in user.* attributes, which a tmpfs
        // takes since Linux 6.6; without them an overlay would fail later
        // with EIO.
        if let Err(e) = rustix::fs::setxattr(
            root,
            "user.warden.probe",
            b"y",
            rustix::fs::XattrFlags::empty(),
        ) {
            return Err(TmpfsError::Xattrs(Errno::from_raw(e.raw_os_error())));
        }
        let _ = rustix::fs::removexattr(root, "user.warden.probe");
    }
    nix::fcntl::open(
        root,
        nix::fcntl::OFlag::O_DIRECTORY | nix::fcntl::OFlag::O_RDONLY | nix::fcntl::OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )
    .map_err(mount_err(
        "the sandbox's size-limited state (`resources.disk`)",
        root,
    ))
}

/// Copy the saved tree `saved` into `name` of the tmpfs.
pub(crate) fn restore(saved: &Path, name: &str, size: u64) -> Result<PathBuf, TmpfsError> {
    let into = Path::new(KEPT_MOUNT).join(name);
    layer::copy_layer(saved, &into, false)
        .map_err(|source| TmpfsError::Restore { size, source })?;
    Ok(into)
}

/// The upper and work directories of the `n`th cache's overlay, made
/// empty in the tmpfs.
pub(crate) fn cache_dirs(n: usize) -> Result<(PathBuf, PathBuf), TmpfsError> {
    let base = Path::new(KEPT_MOUNT).join("caches").join(n.to_string());
    let (upper, work) = (base.join("upper"), base.join("work"));
    for d in [&upper, &work] {
        std::fs::DirBuilder::new()
            .recursive(true)
            .create(d)
            .map_err(create_err(d))?;
    }
    Ok((upper, work))
}

/// The upper and work directories of the `n`th writable volume's
/// overlay, made empty in the tmpfs.
pub(crate) fn volume_dirs(n: usize) -> Result<(PathBuf, PathBuf), TmpfsError> {
    let base = Path::new(KEPT_MOUNT).join("volumes").join(n.to_string());
    let (upper, work) = (base.join("upper"), base.join("work"));
    for d in [&upper, &work] {
        std::fs::DirBuilder::new()
            .recursive(true)
            .create(d)
            .map_err(create_err(d))?;
    }
    Ok((upper, work))
}

/// Write the sandbox's state back from the tmpfs `fd`: the upper layer
/// and the home over their saved copies (each whole or not at all), the
/// caches' and the volumes' writes merged into them; then drop the mark that
/// said the state was in memory only. Every part is tried; the first
/// failure is returned. What `fence` names is held back from the caches'
/// and the volumes' merges (see [`cache::Fence`]).
pub fn save(
    fd: &OwnedFd,
    what: &KeptSave,
    fence: Option<&dyn cache::Fence>,
) -> Result<Merged, KeptError> {
    let live = PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()));
    let mut first: Option<KeptError> = None;
    for (name, saved) in [("upper", &what.upper), ("home", &what.home)] {
        if let Some(saved) = saved {
            if let Err(e) = layer::save(&live.join(name), saved) {
                first.get_or_insert(e.into());
            }
        }
    }
    if first.is_none() {
        if let Some(mark) = what.mark() {
            let _ = std::fs::remove_file(mark);
        }
    }
    let mut merged = Merged::default();
    if let Some(profile) = &what.profile {
        for (n, dest) in what.caches.iter().enumerate() {
            let upper = live.join("caches").join(n.to_string()).join("upper");
            match cache::merge(&upper, dest, (profile, what.limit), fence) {
                Ok(m) => {
                    merged.added += m.added;
                    merged.left_out += m.left_out;
                    merged.held_back.extend(m.held_back);
                }
                Err(e) => {
                    first.get_or_insert(e.into());
                }
            }
        }
    }
    for (n, dest) in what.volumes.iter().enumerate() {
        let upper = live.join("volumes").join(n.to_string()).join("upper");
        match cache::merge_volume(&upper, dest, what.limit, fence) {
            Ok(m) => {
                merged.added += m.added;
                merged.left_out += m.left_out;
                merged.held_back.extend(m.held_back);
            }
            Err(e) => {
                first.get_or_insert(e.into());
            }
        }
    }
    match first {
        Some(e) => Err(e),
        None => Ok(merged),
    }
}
