//! What the VMM is given: the IDs it runs as, the views of the shares it
//! serves, the files it is handed as descriptors, and what its jail lets
//! it open.

use super::*;

/// The IDs the VMM runs as when warden is root: the workspace owner's
/// where they are an ordinary person's, so that its 9p server creates and
/// writes the workspace's files as their owner would (and nothing of
/// anyone else's it could not); nobody's otherwise (never root or a
/// system account, which would own that account's host files the VMM
/// serves the guest), with the swap that shows the workspace as nobody's.
/// Rootless, the VMM stays warden's own user. `owner`: the workspace's
/// owner, read on the directory opened (`warden_jail::open_workspace`).
pub(super) fn vmm_ids(
    owner: Option<(u32, u32)>,
) -> ((u32, u32), Option<warden_jail::identity::SwapMap>) {
    let ids = warden_jail::identity::sandbox_ids(owner);
    let swap = owner
        .filter(|_| warden_jail::host::is_root())
        .and_then(|o| warden_jail::identity::SwapMap::new(o, ids));
    (ids, swap)
}

/// The swap a share is served through when warden is root: a writable
/// share of another owner's than the VMM's user (root's, a system
/// account's, another person's) is shown with its owner's IDs exchanged
/// with the VMM's, as the process backend idmaps its writable binds, so
/// that the guest writes it, what it makes lands on disk as the owner's,
/// and no other file of the host changes owner or becomes the VMM's.
/// Read-only shares are served as they are (read as the VMM's user);
/// rootless, nothing is swapped (the VMM is warden's own user).
pub(super) fn share_swap(
    share: &crate::shares::Share,
    ids: (u32, u32),
) -> Option<warden_jail::identity::SwapMap> {
    if !share.writable || !warden_jail::host::is_root() {
        return None;
    }
    // The owner read on the descriptor opened and checked (`Share::reopen`
    // refuses one whose owner changed since), never on the path again.
    warden_jail::identity::SwapMap::new((share.id.uid, share.id.gid), ids)
}

/// Each share and the root tree as one launch of the VMM opened them
/// (a boot, a resume from disk, a fork's copy, a restore from a
/// snapshot): from `/`, through no symbolic link, and checked to be the
/// very file the sandbox was made with, of the same kind and owner
/// (`crate::shares::reopen`). The view each is served through, its
/// Landlock rule and its place in the VMM's root are all made from these
/// descriptors, never from the paths again.
pub(crate) struct OpenedShares {
    /// By the index of `Config::shares`.
    pub(super) shares: Vec<std::sync::Arc<std::os::fd::OwnedFd>>,
    /// The `--rootfs` tree served over 9p (none with a root image).
    pub(super) rootfs: Option<std::sync::Arc<std::os::fd::OwnedFd>>,
}

impl OpenedShares {
    /// Every share of `cfg` and its root tree opened and checked, or the
    /// first refused (`share_link`, `share_changed`). Only opens: a
    /// restore calls it before it touches its saved state, so that a
    /// refusal leaves that state as it was.
    pub(crate) fn open(cfg: &Config) -> Result<OpenedShares, crate::shares::ShareError> {
        let shares = cfg
            .shares
            .iter()
            .map(|s| s.reopen().map(std::sync::Arc::new))
            .collect::<Result<Vec<_>, _>>()?;
        let what = "`filesystem.rootfs`";
        let rootfs = match cfg.rootfs.as_deref().filter(|_| cfg.root_image.is_none()) {
            None => None,
            Some(r) => {
                let id = cfg.rootfs_id.ok_or(crate::shares::ShareError::Changed {
                    what,
                    path: r.to_path_buf(),
                    why: "was never checked",
                })?;
                Some(std::sync::Arc::new(crate::shares::reopen(
                    what, r, id, false,
                )?))
            }
        };
        Ok(OpenedShares { shares, rootfs })
    }
}

/// An idmapped view of the workspace `dir` (opened and checked) through
/// `swap`, detached, as a descriptor: a view of that very directory.
pub(super) fn workspace_view(
    (path, dir): (&Path, &std::os::fd::OwnedFd),
    swap: Option<&warden_jail::identity::SwapMap>,
) -> Result<std::os::fd::OwnedFd, MachineError> {
    use std::os::fd::AsFd;
    warden_jail::identity::helper_view_of(dir.as_fd(), swap).map_err(|source| MachineError::Open {
        path: path.to_path_buf(),
        source,
    })
}

/// A share the VMM serves, opened and checked (`fd`), as a view it cannot
/// open a device node, honour a set-ID bit or execute in (idmapped
/// through `swap` when there is one; `warden_jail::identity::helper_view_of`),
/// whatever the host's mount of it allows: a view of that very file or
/// directory, whatever its path holds by now. Rootless there is no view
/// to make (nor a device of another's the VMM could open): the directory
/// itself, reopened through its descriptor.
pub(super) fn helper_dir(
    (path, fd): (&Path, &std::os::fd::OwnedFd),
    swap: Option<&warden_jail::identity::SwapMap>,
    open: &dyn Fn(&Path, bool) -> Result<std::os::fd::OwnedFd, MachineError>,
) -> Result<std::os::fd::OwnedFd, MachineError> {
    use std::os::fd::AsFd;
    if swap.is_none() && !warden_jail::host::is_root() {
        return reopen_fd((path, fd), open);
    }
    warden_jail::identity::helper_view_of(fd.as_fd(), swap).map_err(|source| MachineError::Open {
        path: path.to_path_buf(),
        source,
    })
}

/// The directory `fd` (an `O_PATH` descriptor opened and checked)
/// opened for reading through `/proc/self/fd/N`, which reaches that very
/// directory and looks no path up again; errors name `path`.
fn reopen_fd(
    (path, fd): (&Path, &std::os::fd::OwnedFd),
    open: &dyn Fn(&Path, bool) -> Result<std::os::fd::OwnedFd, MachineError>,
) -> Result<std::os::fd::OwnedFd, MachineError> {
    use std::os::fd::AsRawFd;
    open(
        Path::new(&format!("/proc/self/fd/{}", fd.as_raw_fd())),
        true,
    )
    .map_err(|e| match e {
        MachineError::Open { source, .. } => MachineError::Open {
            path: path.to_path_buf(),
            source,
        },
        e => e,
    })
}

/// What the VMM may open (see `warden_jail::vmm`), and all its root holds:
/// its binary, the system's libraries and firmware and `/usr` (which it
/// serves read-only anyway; on a merged system `/bin`, `/lib` and `/lib64`
/// are links into it), the dynamic linker's cache (the one file of `/etc`),
/// the CPU and NUMA topology in `/sys`, the kernel, the initramfs, the
/// trust files, `/dev/kvm` under KVM; and write its console log and
/// beneath the workspace only (over virtio-fs, not even that). Its root is
/// built in `root`.
pub(super) fn vmm_access(
    cfg: &Config,
    console: &Path,
    root: &Path,
    workspace: Option<&std::sync::Arc<std::os::fd::OwnedFd>>,
    opened: &OpenedShares,
    file_views: &[Option<std::sync::Arc<std::os::fd::OwnedFd>>],
) -> warden_jail::vmm::VmmAccess {
    let virtiofs = workspace.is_none() && cfg.workspace.is_some();
    let mut readable: Vec<PathBuf> = [
        "/usr",
        "/bin",
        "/sbin",
        "/lib",
        "/lib32",
        "/lib64",
        "/libx32",
        "/etc/ld.so.cache",
        "/sys/devices/system/cpu",
        "/sys/devices/system/node",
    ]
    .iter()
    .map(PathBuf::from)
    .filter(|p| p.exists())
    .collect();
    readable.push(cfg.vmm.clone());
    readable.push(cfg.kernel.clone());
    readable.push(cfg.initramfs.clone());
    readable.extend(cfg.trust.clone());
    readable.extend(cfg.root_image.clone());
    // The shares' directories and the root tree are handed as descriptors
    // and placed nowhere in its root: its Landlock rules are on the
    // directories opened and checked for this launch.
    let dirs = |writable: bool| {
        cfg.shares
            .iter()
            .zip(&opened.shares)
            .filter(move |(s, _)| s.writable == writable && !s.file)
            .map(|(_, fd)| fd.clone())
    };
    let readable_dirs = dirs(false).chain(opened.rootfs.clone()).collect();
    // A single file is placed alone in a directory of its own (see
    // `HandedFiles::open`), and nothing else of the host's around it:
    // bound from its descriptor. A writable one of another owner's is its
    // idmapped view.
    let mut placed = Vec::new();
    for (i, (s, fd)) in cfg
        .shares
        .iter()
        .zip(&opened.shares)
        .enumerate()
        .filter(|(_, (s, _))| s.file)
    {
        let dir = file_share_dir(&cfg.run_dir, s);
        placed.push(warden_jail::vmm::Placed {
            host: s.path.clone(),
            source: fd.clone(),
            inside: dir.join(s.path.file_name().unwrap_or_default()),
            writable: s.writable,
            view: file_views.get(i).cloned().flatten(),
        });
        readable.push(dir);
    }
    warden_jail::vmm::VmmAccess {
        readable,
        // The workspace, by the descriptor it is handed (never its path,
        // which may hold another directory by now); over virtio-fs,
        // virtiofsd serves it: the VMM gets no right on it at all. The
        // read-write shares likewise, by the descriptors opened for this
        // launch.
        writable_dirs: workspace.cloned().into_iter().chain(dirs(true)).collect(),
        readable_dirs,
        writable: [console.to_path_buf()]
            .into_iter()
            .chain(cfg.ram.path().filter(|_| !virtiofs).map(Path::to_path_buf))
            .collect(),
        devices: if cfg.accel == Accel::Kvm {
            vec![PathBuf::from("/dev/kvm")]
        } else {
            Vec::new()
        },
        placed,
        root: root.to_path_buf(),
    }
}

/// The directory of the VMM's root that holds the single file `share`
/// alone.
pub(super) fn file_share_dir(run_dir: &Path, share: &crate::shares::Share) -> PathBuf {
    run_dir.join("files").join(&share.tag)
}

/// The files the VMM is handed, opened here (it may have no right on the
/// way to them).
pub(super) struct HandedFiles {
    pub(super) console: std::os::fd::OwnedFd,
    /// The console's copy into its bounded log, waited for when the VMM
    /// has ended and its last lines are read.
    pub(super) console_copy: Option<warden_jail::vmm::LogCopy>,
    pub(super) kernel: std::os::fd::OwnedFd,
    pub(super) initramfs: std::os::fd::OwnedFd,
    pub(super) trust: Option<std::os::fd::OwnedFd>,
    pub(super) workspace: Option<std::os::fd::OwnedFd>,
    /// Each bind's directory (a writable one of another owner's as its
    /// idmapped view); none for a single file (served by path from the
    /// VMM's own root).
    pub(super) shares: Vec<Option<std::os::fd::OwnedFd>>,
    /// For each bind, by its index: a writable single file of another
    /// owner's as its idmapped view, attached in the VMM's root.
    pub(super) file_views: Vec<Option<std::sync::Arc<std::os::fd::OwnedFd>>>,
    pub(super) rootfs: Option<std::os::fd::OwnedFd>,
    pub(super) root_image: Option<std::os::fd::OwnedFd>,
    /// The guest's RAM file (a fresh one made for a VM that boots).
    pub(super) ram: Option<std::os::fd::OwnedFd>,
}

impl HandedFiles {
    /// `workspace`: the workspace opened and checked, when the VMM
    /// serves it (none over virtio-fs).
    pub(super) fn open(
        cfg: &Config,
        console: &Path,
        ids: (u32, u32),
        workspace: Option<(&Path, &std::os::fd::OwnedFd)>,
        swap: Option<&warden_jail::identity::SwapMap>,
        opened: &OpenedShares,
    ) -> Result<HandedFiles, MachineError> {
        let virtiofs = workspace.is_none() && cfg.workspace.is_some();
        let open = |path: &Path, dir: bool| -> Result<std::os::fd::OwnedFd, MachineError> {
            let mut o = std::fs::OpenOptions::new();
            o.read(true);
            if dir {
                use std::os::unix::fs::OpenOptionsExt;
                o.custom_flags(nix::libc::O_DIRECTORY);
            }
            o.open(path)
                .map(std::os::fd::OwnedFd::from)
                .map_err(|source| MachineError::Open {
                    path: path.to_path_buf(),
                    source,
                })
        };
        let root = warden_jail::host::is_root();
        // The guest writes its console as much as it likes: the VMM gets
        // a pipe, and the log on the host stays within a bound
        // (`warden_jail::vmm::bounded_log`).
        let (console_file, console_copy) =
            warden_jail::vmm::bounded_log(console, root.then_some(ids)).map_err(|source| {
                MachineError::RunDir {
                    path: console.to_path_buf(),
                    source,
                }
            })?;
        let give = |path: &Path| -> Result<(), MachineError> {
            if !root {
                return Ok(());
            }
            std::os::unix::fs::chown(path, Some(ids.0), Some(ids.1)).map_err(|source| {
                MachineError::Chown {
                    path: path.to_path_buf(),
                    source,
                }
            })
        };
        // The VMM reopens what it writes or serves through
        // `/proc/self/fd/N`, which checks the file's own permissions: the
        // console log and the trust files become its user's.
        give(console)?;
        // Each single file's directory, with an empty placeholder the file
        // is bound over in the VMM's mount namespace (never on the host).
        for s in cfg.shares.iter().filter(|s| s.file) {
            let dir = file_share_dir(&cfg.run_dir, s);
            let placeholder = dir.join(s.path.file_name().unwrap_or_default());
            let made = std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&dir)
                .and_then(|_| std::fs::File::create(&placeholder).map(drop));
            made.map_err(|source| MachineError::RunDir {
                path: placeholder.clone(),
                source,
            })?;
            give(&dir)?;
        }
        let mut shares = Vec::new();
        let mut file_views = Vec::new();
        for (s, fd) in cfg.shares.iter().zip(&opened.shares) {
            let swap = share_swap(s, ids);
            let handed = match (&swap, s.file) {
                (None, true) => None,
                (swap, _) => Some(helper_dir((&s.path, fd), swap.as_ref(), &open)?),
            };
            if s.file {
                shares.push(None);
                file_views.push(handed.map(std::sync::Arc::new));
            } else {
                shares.push(handed);
                file_views.push(None);
            }
        }
        if let Some(t) = &cfg.trust {
            give(t)?;
            for e in std::fs::read_dir(t)
                .map_err(|source| MachineError::Open {
                    path: t.clone(),
                    source,
                })?
                .flatten()
            {
                give(&e.path())?;
            }
        }
        Ok(HandedFiles {
            console: console_file,
            console_copy: Some(console_copy),
            kernel: open(&cfg.kernel, false)?,
            initramfs: open(&cfg.initramfs, false)?,
            trust: cfg.trust.as_deref().map(|t| open(t, true)).transpose()?,
            // The directory opened and checked, reopened through its own
            // descriptor (or viewed from it): never its path again.
            workspace: workspace
                .map(|(path, dir)| {
                    if swap.is_none() && !root {
                        reopen_fd((path, dir), &open)
                    } else {
                        workspace_view((path, dir), swap)
                    }
                })
                .transpose()?,
            shares,
            file_views,
            // The tree opened and checked for this launch, reopened
            // through its own descriptor: never its path again.
            rootfs: cfg
                .rootfs
                .as_deref()
                .zip(opened.rootfs.as_deref())
                .map(|(r, fd)| reopen_fd((r, fd), &open))
                .transpose()?,
            root_image: cfg
                .root_image
                .as_deref()
                .map(|r| open(r, false))
                .transpose()?,
            ram: match cfg.ram.path().filter(|_| !virtiofs) {
                None => None,
                Some(p) => {
                    // A boot starts from a fresh file, never one a failed
                    // restore left (a template's memory, a paused guest's);
                    // a restore's was placed for it.
                    let booting = !matches!(cfg.start, Start::Restore(_));
                    if matches!(cfg.ram, crate::ram::Ram::Shared(_)) && booting {
                        let _ = std::fs::remove_file(p);
                        crate::ram::fresh(p, cfg.memory_mib).map_err(|source| {
                            MachineError::RunDir {
                                path: p.to_path_buf(),
                                source,
                            }
                        })?;
                    }
                    // QEMU 7.2 opens it read-write, to map it privately as
                    // well (see `crate::ram`): it is always the VM's own
                    // file (never a base), and becomes its VMM's user's.
                    give(p)?;
                    Some(open(p, false)?)
                }
            },
        })
    }
}
