//! What of the host the sandbox gets: the paths it binds (resolved on the
//! host, through no link), the IDs it runs as, its overlay.

use super::host_paths::{open_network_namespace, resolve_host_path};
use super::{JailError, NOBODY};
use crate::kept::{KeptBind, KeptPlan, KeptSave};
use crate::mounts::{BindPlan, OverlayPlan, RootfsPlan};
use crate::sys;
use nix::errno::Errno;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use warden_policy::{Home, NetworkSpec, OverlayDirs, SandboxSpec, WORKSPACE_MOUNT};

/// The host's side of the sandbox, resolved before the clone.
pub(super) struct HostPlan {
    /// A network namespace to join, the supervisor's own, and its path.
    pub join_network: Option<(OwnedFd, OwnedFd, PathBuf)>,
    pub rootfs: Option<RootfsPlan>,
    /// The workspace as the person named it (lexically normalised).
    pub workspace: Option<PathBuf>,
    /// The sandbox's IDs inside, and the host IDs they map to.
    pub uid: u32,
    pub gid: u32,
    pub host_uid: u32,
    pub host_gid: u32,
    pub binds: Vec<BindPlan>,
    /// What the sandbox may write (Landlock), inside paths.
    pub writable: Vec<PathBuf>,
    /// The home is a tmpfs of its own.
    pub home_tmpfs: bool,
    /// `--disk`: the tmpfs that holds the sandbox's kept state while it
    /// runs, and what the supervisor writes back from it.
    pub kept: Option<(KeptPlan, KeptSave)>,
}

/// `--disk` as this host can enforce it: the size, and whether overlays
/// (the workspace's, the caches') may be made on the tmpfs.
#[derive(Debug, Clone, Copy)]
pub(super) struct Disk {
    pub size: Option<u64>,
    pub overlays: bool,
}

pub(super) fn host_plan(
    spec: &SandboxSpec,
    disk: Disk,
    degraded_mode: bool,
    root_mode: bool,
) -> Result<HostPlan, JailError> {
    let fs = &spec.filesystem;
    let join_network = join_network(spec, degraded_mode, root_mode)?;
    // Host-side paths are resolved here, on the host, without following
    // symbolic links; what gets mounted is the descriptor resolved now.
    let rootfs = match &fs.rootfs {
        Some(r) => Some(rootfs_plan(r, root_mode)?),
        None => None,
    };
    let (workspace, workspace_fd) = match fs.workspace.as_deref() {
        Some(w) => {
            let (path, fd, owner) = open_workspace(w, fs.workspace_identity)?;
            (Some(path), Some((fd, owner)))
        }
        None => (None, None),
    };

    let owner = workspace_fd.as_ref().map(|(_, o)| *o);
    let (uid, gid, host_uid, host_gid) =
        sandbox_ids(root_mode, degraded_mode, workspace.as_deref(), owner)?;

    let mut binds = Binds {
        binds: Vec::new(),
        writable: vec![PathBuf::from("/tmp"), PathBuf::from("/dev/shm")],
        root_mode,
        degraded_mode,
        uid,
    };
    if let (Some(w), Some((fd, _))) = (&workspace, workspace_fd) {
        let b = binds.make(w.clone(), fd, PathBuf::from(WORKSPACE_MOUNT), true)?;
        binds.add(b);
    }
    for b in &fs.binds {
        let what = if b.writable {
            "`filesystem.read_write`"
        } else {
            "`filesystem.read_only`"
        };
        let (src, fd) = resolve_host_path(what, &b.path)?;
        let b = binds.make(src, fd, b.path.components().collect(), b.writable)?;
        binds.add(b);
    }
    let home_tmpfs = fs.home == Home::Tmpfs && !degraded_mode;
    let mut save = KeptSave {
        upper: None,
        home: None,
        caches: Vec::new(),
        profile: None,
        volumes: Vec::new(),
        limit: disk.size.unwrap_or(0),
    };
    if !degraded_mode {
        binds.add_state_dirs(fs, disk, (gid, host_uid, host_gid), &mut save)?;
    }
    // Volumes last: one may be below the home. Without a mount namespace
    // there is nowhere to put them, and a sandbox that runs without the
    // data it was promised would be silently wrong.
    if degraded_mode && !fs.volumes.is_empty() {
        return Err(JailError::VolumesDegraded);
    }
    // A writable volume is an overlay whose writes land in the kept tmpfs
    // (within `--disk`) and are merged into the volume when the sandbox
    // stops: a volume the sandbox could write directly would let it fill
    // the host's disk. Where the tmpfs cannot hold overlays, or no disk
    // limit is set, it is refused rather than bound unbounded.
    let kept_volumes = disk.size.is_some() && disk.overlays;
    for v in &fs.volumes {
        if v.writable && !kept_volumes {
            return Err(JailError::VolumeUnbounded(v.inside.clone()));
        }
        let (src, fd) = resolve_host_path("`filesystem.volumes`", &v.host)?;
        let mut b = binds.make(src.clone(), fd, v.inside.clone(), v.writable)?;
        if v.writable {
            b.kept = Some(KeptBind::Volume(save.volumes.len()));
            save.volumes.push(src);
        }
        binds.add(b);
    }
    let Binds {
        mut binds,
        mut writable,
        ..
    } = binds;
    if home_tmpfs {
        writable.push(fs.home_mount().to_path_buf());
    }
    if let Some(dirs) = &fs.overlay {
        if degraded_mode {
            // No mount namespace: no overlay. Refused rather than writing
            // the real workspace, which --overlay promised not to do.
            return Err(JailError::OverlayDegraded);
        }
        let limited = disk.size.filter(|_| disk.overlays);
        let overlay = overlay_plan(dirs, limited, root_mode, host_uid, host_gid)?;
        if limited.is_some() {
            save.upper = Some(dirs.upper.clone());
        }
        if let Some(b) = binds
            .iter_mut()
            .find(|b| b.dst == Path::new(WORKSPACE_MOUNT))
        {
            b.overlay = Some(overlay);
        }
    }

    Ok(HostPlan {
        join_network,
        rootfs,
        workspace,
        uid,
        gid,
        host_uid,
        host_gid,
        binds,
        writable,
        home_tmpfs,
        kept: match disk.size {
            Some(size)
                if save.upper.is_some()
                    || save.home.is_some()
                    || !save.caches.is_empty()
                    || !save.volumes.is_empty() =>
            {
                Some((
                    KeptPlan {
                        size,
                        overlays: disk.overlays,
                    },
                    save,
                ))
            }
            _ => None,
        },
    })
}

/// A namespace to join is opened now (and checked to be another network
/// namespace than the supervisor's own, never the host's).
fn join_network(
    spec: &SandboxSpec,
    degraded_mode: bool,
    root_mode: bool,
) -> Result<Option<(OwnedFd, OwnedFd, PathBuf)>, JailError> {
    Ok(match &spec.join_network {
        Some(p) => {
            if matches!(spec.network, NetworkSpec::Egress(_)) || !spec.publish.is_empty() {
                return Err(JailError::JoinNetwork {
                    path: p.clone(),
                    why: "a sandbox that joins another's network namespace goes out through that one's proxy: it cannot have an egress policy or published ports of its own".into(),
                    source: Errno::EINVAL,
                });
            }
            Some(open_network_namespace(p, degraded_mode, root_mode)?)
        }
        None => None,
    })
}

/// The prepared root tree `r`, resolved through no link; as root, a clone
/// of it made here.
fn rootfs_plan(r: &Path, root_mode: bool) -> Result<RootfsPlan, JailError> {
    let (r, fd) = resolve_host_path("`filesystem.rootfs`", r)?;
    if !r.join("usr").is_dir() && !r.join("bin").exists() {
        return Err(JailError::BadRootfs(r));
    }
    let tree = if root_mode {
        Some(clone_tree(&fd, &r)?)
    } else {
        None
    };
    Ok(RootfsPlan { path: r, tree })
}

/// A host path a backend is given besides the workspace (a VM's share or
/// root tree), opened once from `/` through no symbolic link and no `..`
/// (`openat2(RESOLVE_NO_SYMLINKS)`), as an `O_PATH` descriptor: the
/// process backend's own rule for its binds. A backend checks what it
/// opened on this descriptor and serves, views and confines that, never
/// the path again: a link swapped into an earlier component afterwards
/// changes nothing it was given.
pub fn open_host_path(what: &'static str, p: &Path) -> Result<(PathBuf, OwnedFd), JailError> {
    resolve_host_path(what, p)
}

/// The workspace `w`, resolved through no link and checked to be a
/// directory (and, when `expected` is given, that very directory, by its
/// device and inode): its path, its descriptor (`O_PATH`: what gets
/// mounted) and its owner. Every backend opens the workspace here, once,
/// and shares or mounts that descriptor, never the path again: a
/// directory swapped in at the path after this check is never what the
/// sandbox gets (the VM's share, runsc's bind, the process's mount).
pub fn open_workspace(
    w: &Path,
    expected: Option<(u64, u64)>,
) -> Result<(PathBuf, OwnedFd, (u32, u32)), JailError> {
    let (path, fd) = resolve_host_path("`filesystem.workspace`", w)?;
    let st = nix::sys::stat::fstat(&fd).map_err(|e| JailError::MissingPath {
        what: "`filesystem.workspace`",
        path: path.clone(),
        source: e.into(),
    })?;
    if st.st_mode & libc::S_IFMT != libc::S_IFDIR {
        return Err(JailError::NotADirectory {
            what: "`filesystem.workspace`",
            path,
        });
    }
    let found = (st.st_dev, st.st_ino);
    if let Some(want) = expected.filter(|w| *w != found) {
        return Err(JailError::WorkspaceMoved { path, want, found });
    }
    Ok((path, fd, (st.st_uid, st.st_gid)))
}

/// The binds being planned, and the inside paths the sandbox may write.
struct Binds {
    binds: Vec<BindPlan>,
    writable: Vec<PathBuf>,
    root_mode: bool,
    degraded_mode: bool,
    /// The sandbox's user ID inside.
    uid: u32,
}

impl Binds {
    fn make(
        &self,
        src: PathBuf,
        source: OwnedFd,
        dst: PathBuf,
        writable_bind: bool,
    ) -> Result<BindPlan, JailError> {
        let (root_mode, degraded_mode, uid) = (self.root_mode, self.degraded_mode, self.uid);
        // As root, binds are cloned here, where the host's permissions
        // allow the lookup (the sandbox's ID is nobody on the host), and
        // writable ones are then idmapped so that the sandbox can write them
        // while files keep their owners on disk.
        let tree = if root_mode && !degraded_mode {
            Some(clone_tree(&source, &src)?)
        } else {
            None
        };
        Ok(BindPlan {
            src,
            source,
            dst,
            writable: writable_bind,
            tree,
            // Read-only binds too, so that a bound repository is owned
            // inside by the user who owns it (git refuses a repository of
            // another owner), but only for an ordinary user inside: mapped
            // to the sandbox's root, every root-only file of the bind
            // would become its own to read.
            idmap: root_mode && !degraded_mode && (writable_bind || uid != 0),
            overlay: None,
            kept: None,
        })
    }

    fn add(&mut self, b: BindPlan) {
        if b.writable {
            self.writable.push(b.dst.clone());
        }
        self.binds.push(b);
    }

    /// The sandbox's own home and the profile's caches: directories of
    /// warden's state, bound writable after every other bind (the caches
    /// below the home). As root they are idmapped like the workspace, so
    /// they are given to the IDs the sandbox has inside. With `--disk` the
    /// home is restored into the sandbox's tmpfs instead, and the caches
    /// are overlays whose writes land there (see `crate::kept`); what is
    /// to be saved from there goes in `save`. `ids`: the sandbox's group
    /// inside, and its user and group on the host.
    fn add_state_dirs(
        &mut self,
        fs: &warden_policy::FilesystemSpec,
        disk: Disk,
        (gid, host_uid, host_gid): (u32, u32, u32),
        save: &mut KeptSave,
    ) -> Result<(), JailError> {
        let (root_mode, uid) = (self.root_mode, self.uid);
        if let (Home::Dir(d), Some(_)) = (&fs.home, disk.size) {
            self.add(kept_home(
                d,
                fs.home_mount(),
                root_mode,
                host_uid,
                host_gid,
            )?);
            save.home = Some(d.clone());
        }
        let kept_home = match (&fs.home, disk.size) {
            (Home::Dir(d), None) => Some((d.as_path(), fs.home_mount())),
            _ => None,
        };
        let caches = fs
            .caches
            .iter()
            .map(|c| (c.host.as_path(), c.inside.as_path()));
        let kept_caches = disk.size.is_some() && disk.overlays;
        for (dir, inside) in kept_home.into_iter().chain(caches) {
            let (src, fd) = resolve_host_path("the sandbox's home or cache", dir)?;
            if root_mode {
                nix::unistd::fchownat(
                    &fd,
                    "",
                    Some(nix::unistd::Uid::from_raw(uid)),
                    Some(nix::unistd::Gid::from_raw(gid)),
                    nix::fcntl::AtFlags::AT_EMPTY_PATH,
                )
                .map_err(|source| JailError::Sys {
                    what: "give the sandbox's home or cache to its user",
                    source,
                })?;
            }
            let mut b = self.make(src, fd, inside.to_path_buf(), true)?;
            if kept_caches && inside != fs.home_mount() {
                b.kept = Some(KeptBind::Cache(save.caches.len()));
                save.caches.push(dir.to_path_buf());
                // The profile's directory: `PROFILE/NAME/LEAF`.
                save.profile = dir.parent().and_then(Path::parent).map(Path::to_path_buf);
            }
            self.add(b);
        }
        Ok(())
    }
}

/// A named sandbox's saved home, restored into its tmpfs by the init. As
/// root it is reached through a clone made here and is the sandbox's host
/// user's (nobody), as the saved layer is: that user copies it in, and the
/// supervisor writes it back with the owners it had in the tmpfs. A home
/// kept before `--disk` held it (owned by the sandbox's IDs through an
/// idmapped bind) is given to that user once.
fn kept_home(
    dir: &Path,
    at: &Path,
    root_mode: bool,
    host_uid: u32,
    host_gid: u32,
) -> Result<BindPlan, JailError> {
    let (src, source) = resolve_host_path("the sandbox's home", dir)?;
    let tree = if root_mode {
        let st = nix::sys::stat::fstat(&source).map_err(|source| JailError::Sys {
            what: "read the owner of the sandbox's saved home",
            source,
        })?;
        if (st.st_uid, st.st_gid) != (host_uid, host_gid) {
            give_tree(&src, host_uid, host_gid).map_err(|e| JailError::Sys {
                what: "give the sandbox's saved home to its user",
                source: Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)),
            })?;
        }
        Some(clone_tree(&source, &src)?)
    } else {
        None
    };
    Ok(BindPlan {
        src,
        source,
        dst: at.to_path_buf(),
        writable: true,
        tree,
        idmap: false,
        overlay: None,
        kept: Some(KeptBind::Home),
    })
}

/// Give the tree at `path` (never following a link; the sandbox that
/// wrote it is not running) to `uid`:`gid`.
pub(crate) fn give_tree(path: &Path, uid: u32, gid: u32) -> std::io::Result<()> {
    std::os::unix::fs::lchown(path, Some(uid), Some(gid))?;
    if std::fs::symlink_metadata(path)?.is_dir() {
        for e in std::fs::read_dir(path)? {
            give_tree(&e?.path(), uid, gid)?;
        }
    }
    Ok(())
}

/// The sandbox's own IDs. Rootless: the caller's own. As root: the owner
/// of the workspace (so its files look like the sandbox's own), mapped to
/// nobody on the host.
/// `owner` is the workspace's owner, when there is a workspace. Returns the
/// IDs inside (uid, gid) and the host IDs they map to.
fn sandbox_ids(
    root_mode: bool,
    degraded_mode: bool,
    workspace: Option<&Path>,
    owner: Option<(u32, u32)>,
) -> Result<(u32, u32, u32, u32), JailError> {
    if root_mode && degraded_mode {
        // No user namespace to map through: the IDs are the host's. The
        // workspace owner's, so that it stays writable; nobody without one.
        // Never root or a system account: the sandbox would be that
        // account on the host, owner of its files.
        let (u, g) = owner.unwrap_or((NOBODY, NOBODY));
        if !crate::identity::is_ordinary_uid(u) || !crate::identity::is_ordinary_gid(g) {
            return Err(JailError::DegradedRootWorkspace(
                workspace.map(Path::to_path_buf).unwrap_or_default(),
            ));
        }
        Ok((u, g, u, g))
    } else if root_mode {
        let (u, g) = owner.unwrap_or((0, 0));
        Ok((u, g, NOBODY, NOBODY))
    } else {
        let (u, g) = (
            nix::unistd::getuid().as_raw(),
            nix::unistd::getgid().as_raw(),
        );
        Ok((u, g, u, g))
    }
}

/// The overlay over the workspace: its upper and work directories, resolved
/// on the host; as root, given to the sandbox's host user and cloned to be
/// idmapped.
fn overlay_plan(
    dirs: &OverlayDirs,
    disk: Option<u64>,
    root_mode: bool,
    host_uid: u32,
    host_gid: u32,
) -> Result<OverlayPlan, JailError> {
    let (upper, upper_fd) = resolve_host_path("the overlay's upper directory", &dirs.upper)?;
    let (work, work_fd) = resolve_host_path("the overlay's work directory", &dirs.work)?;
    let parent = upper.parent().map(Path::to_path_buf).unwrap_or_default();
    if work.parent() != Some(parent.as_path()) {
        return Err(JailError::OverlayLayout { upper, work });
    }
    let tree = if root_mode {
        // The overlay is mounted by the sandbox's user (nobody on the
        // host): its directories must be that user's, and their parent
        // traversable (not listable) by it.
        for fd in [&upper_fd, &work_fd] {
            nix::unistd::fchownat(
                fd,
                "",
                Some(nix::unistd::Uid::from_raw(host_uid)),
                Some(nix::unistd::Gid::from_raw(host_gid)),
                nix::fcntl::AtFlags::AT_EMPTY_PATH,
            )
            .map_err(|source| JailError::Sys {
                what: "give the overlay's directories to the sandbox's user",
                source,
            })?;
        }
        let (_, parent_fd) = resolve_host_path("the overlay's state directory", &parent)?;
        std::fs::set_permissions(
            format!("/proc/self/fd/{}", parent_fd.as_raw_fd()),
            std::os::unix::fs::PermissionsExt::from_mode(0o711),
        )
        .map_err(|e| Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)))
        .map_err(|source| JailError::Sys {
            what: "let the sandbox's user reach the overlay's directories",
            source,
        })?;
        Some(clone_tree(&parent_fd, &parent)?)
    } else {
        None
    };
    Ok(OverlayPlan {
        upper,
        work,
        tree,
        disk,
    })
}

/// The overlay's size limit on a kernel of `release`: overlayfs keeps its
/// marks in `user.*` attributes, which tmpfs takes from Linux 6.6. On an
/// older kernel a limit that was asked for is refused; a default one is
/// dropped (`None`: the layer stays on disk, said as degraded by the
/// caller).
pub(super) fn disk_on_this_kernel(
    disk: Option<u64>,
    asked: bool,
    release: &str,
) -> Result<Option<u64>, JailError> {
    let mut parts = release
        .split(|c: char| !c.is_ascii_digit())
        .map(|p| p.parse::<u32>().unwrap_or(0));
    let version = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    match disk {
        Some(_) if version < (6, 6) && asked => Err(JailError::DiskNeedsKernel {
            release: release.to_string(),
        }),
        Some(_) if version < (6, 6) => Ok(None),
        other => Ok(other),
    }
}

/// A detached copy of the mount tree at `fd` (the resolved `path`), to be
/// idmapped and attached in the sandbox's root.
fn clone_tree(fd: &OwnedFd, path: &Path) -> Result<OwnedFd, JailError> {
    sys::open_tree_clone_fd(fd.as_fd()).map_err(|source| JailError::Idmap {
        path: path.to_path_buf(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::{disk_on_this_kernel, open_workspace, JailError};

    #[test]
    fn a_disk_limit_needs_linux_6_6_and_an_asked_one_is_refused_before() {
        assert_eq!(
            disk_on_this_kernel(Some(9), true, "6.18.0-1-amd64").ok(),
            Some(Some(9))
        );
        assert_eq!(
            disk_on_this_kernel(Some(9), true, "6.6.0").ok(),
            Some(Some(9))
        );
        assert_eq!(
            disk_on_this_kernel(Some(9), false, "6.1.0-27-amd64").ok(),
            Some(None)
        );
        assert_eq!(
            disk_on_this_kernel(Some(9), false, "5.15.0-91-generic").ok(),
            Some(None)
        );
        assert!(disk_on_this_kernel(Some(9), true, "6.1.0").is_err());
        assert_eq!(disk_on_this_kernel(None, false, "5.4.0").ok(), Some(None));
    }

    #[test]
    fn a_workspace_whose_directory_is_not_the_recorded_one_is_refused_on_the_descriptor_opened() {
        let dir = tempfile::tempdir().unwrap();
        let w = std::fs::canonicalize(dir.path()).unwrap().join("w");
        std::fs::create_dir(&w).unwrap();
        let st = nix::sys::stat::stat(&w).unwrap();
        let own = (st.st_dev, st.st_ino);
        assert!(open_workspace(&w, Some(own)).is_ok());
        assert!(open_workspace(&w, None).is_ok());
        // Moved away, another directory made at its path.
        std::fs::rename(&w, w.with_extension("old")).unwrap();
        std::fs::create_dir(&w).unwrap();
        match open_workspace(&w, Some(own)) {
            Err(JailError::WorkspaceMoved { want, found, .. }) => {
                assert_eq!(want, own);
                assert_ne!(found, own);
            }
            other => panic!("not refused: {:?}", other.map(|(p, _, _)| p)),
        }
    }
}
