//! The sandbox's file tree: assembled from bind mounts in the sandbox's own
//! mount namespace and entered with `pivot_root`, so that nothing of the host
//! is reachable but what is mounted here.
//!
//! Runs in the sandbox's init, after the ID maps are written and before any
//! other restriction. The host's root stays reachable at `/oldroot` only
//! until the new root is complete; then it is detached.

mod inside;

use crate::sys;
use inside::{Kind, Root, Spot};
use nix::errno::Errno;
use nix::mount::{mount, umount2, MntFlags, MsFlags};
use nix::sys::stat::Mode;
use std::ffi::{CString, OsStr};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{symlink, DirBuilderExt};
use std::path::{Path, PathBuf};

/// Host directories shown read-only in a sandbox built from the host.
pub const SYSTEM_DIRS: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc",
];

/// Files and directories under `/etc` hidden from the sandbox, and why.
pub const HIDDEN_IN_ETC: &[(&str, &str)] = &[
    ("shadow", "password hashes"),
    ("shadow-", "password hashes (backup)"),
    ("gshadow", "group password hashes"),
    ("gshadow-", "group password hashes (backup)"),
    ("sudoers", "who may become root, and how"),
    ("sudoers.d", "who may become root, and how"),
    ("security/opasswd", "old password hashes"),
    ("ssl/private", "TLS private keys"),
    ("ssh/ssh_host_rsa_key", "the host's SSH identity"),
    ("ssh/ssh_host_ecdsa_key", "the host's SSH identity"),
    ("ssh/ssh_host_ed25519_key", "the host's SSH identity"),
    ("ssh/ssh_host_dsa_key", "the host's SSH identity"),
];

/// Device nodes bound from the host into the sandbox's `/dev`.
const DEVICES: &[&str] = &["null", "zero", "full", "random", "urandom", "tty"];

/// Why the sandbox's file tree could not be built.
#[derive(Debug, thiserror::Error)]
pub enum MountError {
    #[error("cannot mount {what} at {target}")]
    Mount {
        what: String,
        target: PathBuf,
        #[source]
        source: Errno,
    },
    #[error("cannot bind {src} to {dst} inside the sandbox")]
    Bind {
        src: PathBuf,
        dst: PathBuf,
        #[source]
        source: Errno,
    },
    #[error("cannot make {target} read-only inside the sandbox")]
    ReadOnly {
        target: PathBuf,
        #[source]
        source: Errno,
    },
    #[error("cannot attach the idmapped workspace at {target}")]
    AttachIdmapped {
        target: PathBuf,
        #[source]
        source: Errno,
    },
    /// The tmpfs of what is kept (`resources.disk`).
    #[error(transparent)]
    Kept(#[from] crate::kept::TmpfsError),
    #[error("cannot mount {what}")]
    OverlayData {
        what: String,
        #[source]
        source: warden_workspace::OverlayError,
    },
    #[error("cannot create mount point {path}")]
    MountPoint {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot create {path} in the sandbox's root")]
    Create {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot open {path} for binding without following symbolic links")]
    Resolve {
        path: PathBuf,
        #[source]
        source: Errno,
    },
    /// A link planted in a tree the sandbox or an image wrote, where the
    /// start would make or mount on a place: followed, it could reach the
    /// host's root, still visible while the root is assembled.
    #[error("refusing to mount at {path} inside the sandbox: a symbolic link is on the way there (it is never followed while the root is assembled)")]
    Link { path: PathBuf },
    #[error("pivot_root into the new root failed")]
    Pivot(#[source] Errno),
    #[error("cannot detach the host's root from the sandbox")]
    DetachOldRoot(#[source] Errno),
    #[error("path {0} contains a NUL byte")]
    Nul(PathBuf),
}

/// One bind into the sandbox, with host-side paths already made canonical.
#[derive(Debug)]
pub struct BindPlan {
    /// The host path, for messages.
    pub src: PathBuf,
    /// `src` resolved by the supervisor (`O_PATH`, no symbolic links). It
    /// belongs to the host's mount namespace, so the sandbox binds through
    /// `tree` (root mode) or resolves `src` again, the same way, in its own.
    pub source: OwnedFd,
    pub dst: PathBuf,
    pub writable: bool,
    /// A detached copy of `src` prepared by the supervisor (root mode),
    /// attached instead of a plain bind.
    pub tree: Option<OwnedFd>,
    /// `tree` is made idmapped through the sandbox's user namespace.
    pub idmap: bool,
    /// Seen through an overlay: `src` (or `tree`) is the read-only lower
    /// layer, and writes go to these directories of warden's state store.
    pub overlay: Option<OverlayPlan>,
    /// Kept in the sandbox's size-limited tmpfs instead of bound as it is
    /// (see [`crate::kept`]).
    pub kept: Option<crate::kept::KeptBind>,
}

/// The writable half of a workspace overlay: two directories side by side
/// in warden's state store. The kernel wants them in the sandbox's own
/// mount namespace: rootless, they are looked up again there by path; as
/// root (where the sandbox, nobody on the host, could not look them up),
/// `tree` is a detached clone of their common parent, attached for the
/// time of the mount.
#[derive(Debug)]
pub struct OverlayPlan {
    pub upper: PathBuf,
    pub work: PathBuf,
    pub tree: Option<OwnedFd>,
    /// `--disk`: the layer is restored into the sandbox's tmpfs of this
    /// many bytes and lives there while the sandbox runs (see
    /// [`crate::kept`]).
    pub disk: Option<u64>,
}

/// A prepared root tree: its host path and, in root mode, a detached clone
/// made by the supervisor.
#[derive(Debug)]
pub struct RootfsPlan {
    pub path: PathBuf,
    pub tree: Option<OwnedFd>,
}

/// The sandbox's user and group as its own `/etc/passwd` and `/etc/group`
/// name them: its IDs inside, under a name warden was given.
#[derive(Debug, Clone)]
pub struct UserEntry {
    /// Checked by the policy as a plain user name: no `:`, no newline.
    pub name: String,
    pub uid: u32,
    pub gid: u32,
}

/// Everything `build_root` needs, computed before the sandbox was spawned.
#[derive(Debug)]
pub struct RootPlan {
    /// A prepared root tree.
    pub rootfs: Option<RootfsPlan>,
    pub binds: Vec<BindPlan>,
    pub tmp_size: u64,
    pub hostname: String,
    /// Contents for the sandbox's `/etc/resolv.conf` (egress: warden's
    /// resolver), or `None` to leave the host's file.
    pub resolv_conf: Option<String>,
    /// With secrets: the trust bundle and the authority's certificate
    /// (memory files the supervisor fills before the root is built),
    /// mounted read-only under `/run/warden` and over the host's bundle.
    pub trust: Option<crate::secrets::TrustFiles>,
    /// Host directories covered wherever a bind shows them.
    pub hidden: Vec<PathBuf>,
    /// A fresh tmpfs is the sandbox's home, at `home` (a kept home is one
    /// of `binds`).
    pub home_tmpfs: bool,
    /// Where the sandbox's home is, inside (`filesystem.home`).
    pub home: PathBuf,
    /// The sandbox's user as its `/etc/passwd` and `/etc/group` name it
    /// (`process.user`); `None`: the root tree's files as they are.
    pub user: Option<UserEntry>,
    /// `--disk`: the tmpfs that holds what warden keeps for the sandbox
    /// while it runs (see [`crate::kept`]).
    pub kept: Option<crate::kept::KeptPlan>,
    /// Set by `build_root`: that tmpfs (the overlay's running upper layer
    /// as `upper/`, the home as `home/`, the caches' writes), for the
    /// supervisor to save.
    pub layer: Option<OwnedFd>,
}

const BASE: &str = "/tmp";
const NEWROOT: &str = "/newroot";
const OLDROOT: &str = "/oldroot";

fn cpath(p: &Path) -> Result<CString, MountError> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| MountError::Nul(p.to_path_buf()))
}

fn do_mount(
    src: Option<&str>,
    target: &Path,
    fstype: Option<&str>,
    flags: MsFlags,
    data: Option<&str>,
    what: &str,
) -> Result<(), MountError> {
    mount(src, target, fstype, flags, data).map_err(|source| MountError::Mount {
        what: what.to_string(),
        target: target.to_path_buf(),
        source,
    })
}

fn set_attr(target: &Path, attrs: u64, recursive: bool) -> Result<(), MountError> {
    sys::mount_setattr_path(&cpath(target)?, attrs, recursive).map_err(|source| {
        MountError::ReadOnly {
            target: target.to_path_buf(),
            source,
        }
    })
}

/// [`set_attr`] on the mount now at `inside` (found again, beneath the
/// new root, so the attributes land on the mount just made there; set
/// through the descriptor itself, with no path to walk again).
fn set_attr_inside(
    root: &Root,
    inside: &Path,
    attrs: u64,
    recursive: bool,
) -> Result<(), MountError> {
    let top = root.again(inside)?;
    sys::mount_setattr_fd(top.fd().as_fd(), attrs, recursive).map_err(|source| {
        MountError::ReadOnly {
            target: inside.to_path_buf(),
            source,
        }
    })
}

/// [`do_mount`] onto `spot`, its error naming the place as the sandbox
/// sees it.
fn mount_on(
    src: Option<&str>,
    spot: &Spot,
    fstype: Option<&str>,
    flags: MsFlags,
    data: Option<&str>,
    what: &str,
) -> Result<(), MountError> {
    mount(src, &spot.at(), fstype, flags, data).map_err(|source| MountError::Mount {
        what: what.to_string(),
        target: spot.inside.clone(),
        source,
    })
}

/// Resolve a host path again in the sandbox's own mount namespace (below
/// /oldroot), with the supervisor's rule: no symbolic link on the way. A
/// link swapped in since the supervisor looked fails here.
fn resolve_again(host_path: &Path) -> Result<OwnedFd, MountError> {
    let path = under(OLDROOT, host_path);
    sys::open_path_no_symlinks(&cpath(&path)?).map_err(|source| MountError::Resolve {
        path: host_path.to_path_buf(),
        source,
    })
}

/// The path, below the host's /proc still mounted at /oldroot, through which
/// a descriptor resolved in this mount namespace can be bound.
fn fd_path(fd: &OwnedFd) -> PathBuf {
    PathBuf::from(format!("{OLDROOT}/proc/self/fd/{}", fd.as_raw_fd()))
}

/// Inside-the-new-root path for `p` (absolute).
fn under(root: &str, p: &Path) -> PathBuf {
    let rel = p.strip_prefix("/").unwrap_or(p);
    Path::new(root).join(rel)
}

fn mkdir_p(p: &Path) -> Result<(), MountError> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(p)
        .map_err(|source| MountError::MountPoint {
            path: p.to_path_buf(),
            source,
        })
}

/// The kind of mount point (directory or file) a bind of `src` needs.
fn kind_of(src: &Path) -> Kind {
    match std::fs::metadata(src) {
        Ok(m) if !m.is_dir() => Kind::File,
        _ => Kind::Dir,
    }
}

/// Bind `src` (a path of the assembly's own tree) at `dst`, a place inside
/// the new root made beneath it (see [`inside`]).
fn bind(root: &Root, src: &Path, dst: &Path, writable: bool) -> Result<(), MountError> {
    let spot = root.make(dst, kind_of(src))?;
    mount(
        Some(src),
        &spot.at(),
        None::<&str>,
        MsFlags::MS_BIND | MsFlags::MS_REC,
        None::<&str>,
    )
    .map_err(|source| MountError::Bind {
        src: src.to_path_buf(),
        dst: dst.to_path_buf(),
        source,
    })?;
    // Recursively: a read-only bind must not leave a writable submount
    // below it, and nothing bound in may carry setuid or device files.
    let mut attrs = sys::MOUNT_ATTR_NOSUID | sys::MOUNT_ATTR_NODEV;
    if !writable {
        attrs |= sys::MOUNT_ATTR_RDONLY;
    }
    set_attr_inside(root, dst, attrs, true)
}

/// Assemble the sandbox's root and pivot into it. On return the process's
/// root is the sandbox's and the host's tree is no longer reachable.
pub fn build_root(plan: &mut RootPlan) -> Result<(), MountError> {
    enter_scratch()?;
    // One descriptor of the new root for every place below (see
    // [`Root`]), taken once the root's own mount is there.
    let root = match &mut plan.rootfs {
        Some(rootfs) => mount_rootfs(rootfs)?,
        None => mount_host_system()?,
    };
    mount_fresh(&root, plan)?;
    mount_binds(&root, plan)?;
    cover_hidden(&root, &plan.binds, &plan.hidden)?;

    if let Some(content) = &plan.resolv_conf {
        provide_resolv_conf(&root, content)?;
    }
    // The sandbox's own name resolves inside it (sudo, Java, many test
    // runners look it up, for both address families) without a question
    // to the resolver, whose refusal would read as a rule to add. A bind
    // the caller gave for the file (an OCI runtime's pod hosts file) wins.
    if !plan.binds.iter().any(|b| b.dst == Path::new("/etc/hosts")) {
        provide_hosts(&root, &plan.hostname)?;
    }
    if let Some(user) = &plan.user {
        provide_user(&root, user, &plan.home)?;
    }
    if let Some(trust) = plan.trust.take() {
        provide_trust(&root, trust, plan.rootfs.is_some())?;
    }
    drop(root);
    leave_host()
}

/// Make this mount namespace private, and pivot into a scratch tmpfs that
/// holds the new root (at [`NEWROOT`]) being assembled and the host's root
/// (at [`OLDROOT`]).
fn enter_scratch() -> Result<(), MountError> {
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
fn mount_rootfs(rootfs: &mut RootfsPlan) -> Result<Root, MountError> {
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
fn mount_host_system() -> Result<Root, MountError> {
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

/// The sandbox's own file systems: a fresh /proc, /dev, /tmp and, if
/// asked, a tmpfs home.
fn mount_fresh(root: &Root, plan: &RootPlan) -> Result<(), MountError> {
    // A fresh /proc for the sandbox's own PID namespace. It must be mounted
    // while the host's /proc is still visible (the kernel refuses a new proc
    // mount in a user namespace otherwise).
    mount_on(
        Some("proc"),
        &root.make(Path::new("/proc"), Kind::Dir)?,
        Some("proc"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        None,
        "a fresh /proc",
    )?;
    build_dev(root, plan.tmp_size)?;
    let tmp_opts = format!("size={},mode=1777", plan.tmp_size);
    mount_on(
        Some("tmpfs"),
        &root.make(Path::new("/tmp"), Kind::Dir)?,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some(&tmp_opts),
        "the sandbox's /tmp",
    )?;

    if plan.home_tmpfs {
        // Owner-only and the size of /tmp: what tools write to HOME
        // (history, global configuration, logs) stays in the sandbox.
        mount_on(
            Some("tmpfs"),
            &root.make(&plan.home, Kind::Dir)?,
            Some("tmpfs"),
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
            Some(&format!("size={},mode=0700", plan.tmp_size)),
            "the sandbox's home",
        )?;
    }
    Ok(())
}

/// The plan's binds, each where it belongs: through an overlay, from the
/// kept tmpfs of a sandbox with a disk limit (mounted first and detached
/// once all are in place), or bound as it is.
fn mount_binds(root: &Root, plan: &mut RootPlan) -> Result<(), MountError> {
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

/// Make the new root read-only, detach the host's root and pivot into the
/// new one.
fn leave_host() -> Result<(), MountError> {
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

/// Mount the overlay of bind `b` at `dst`: its source is the lower layer
/// (in root mode the idmapped clone, attached for the time of the mount
/// outside the new root), `ov` the upper and work directories; with
/// `--disk` the saved upper layer is restored into the sandbox's tmpfs and
/// the overlay's layer is that copy.
fn mount_overlay(
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
fn mount_kept_home(root: &Root, b: &mut BindPlan, dst: &Path, size: u64) -> Result<(), MountError> {
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
fn mount_cache(root: &Root, b: &mut BindPlan, n: usize, dst: &Path) -> Result<(), MountError> {
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
fn mount_volume(root: &Root, b: &mut BindPlan, n: usize, dst: &Path) -> Result<(), MountError> {
    let (lower, _keep) = attach_lower(b)?;
    let (upper, work) = crate::kept::volume_dirs(n)?;
    let spot = root.make(dst, Kind::Dir)?;
    let made = overlay_at(&lower, &upper, &work, &spot, "a volume");
    detach_lower(&lower);
    made
}

/// Stage the secret proxy's trust files and mount them read-only at
/// [`warden_policy::CA_BUNDLE_PATH`] and [`warden_policy::CA_CERT_PATH`],
/// and the bundle over the system's own bundle where the root has one (for
/// programs that read no variable). A prepared root tree gets a tmpfs on
/// its `/run` rather than a directory written into the host's copy.
fn provide_trust(
    root: &Root,
    trust: crate::secrets::TrustFiles,
    prepared_root: bool,
) -> Result<(), MountError> {
    use std::os::unix::fs::FileExt;
    let read_all = |fd: OwnedFd, what: &str| -> Result<Vec<u8>, MountError> {
        let f = std::fs::File::from(fd);
        let mut out = Vec::new();
        let mut chunk = vec![0u8; 64 * 1024];
        loop {
            let n =
                f.read_at(&mut chunk, out.len() as u64)
                    .map_err(|source| MountError::Create {
                        path: PathBuf::from(what),
                        source,
                    })?;
            if n == 0 {
                return Ok(out);
            }
            out.extend_from_slice(&chunk[..n]);
        }
    };
    let files = [
        (
            read_all(trust.bundle, warden_policy::CA_BUNDLE_PATH)?,
            Path::new("/.ca-bundle.crt"),
            Path::new(warden_policy::CA_BUNDLE_PATH),
        ),
        (
            read_all(trust.ca, warden_policy::CA_CERT_PATH)?,
            Path::new("/.ca.crt"),
            Path::new(warden_policy::CA_CERT_PATH),
        ),
    ];
    if prepared_root {
        let run = root
            .find(Path::new("/run"))?
            .filter(|spot| spot.file_type() == Some(rustix::fs::FileType::Directory))
            .ok_or_else(|| MountError::MountPoint {
                path: PathBuf::from("/run"),
                source: std::io::Error::other(
                    "the prepared root tree has no /run directory, where warden puts the trust files of `secrets`",
                ),
            })?;
        mount_on(
            Some("tmpfs"),
            &run,
            Some("tmpfs"),
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
            Some("size=1m,mode=0755"),
            "a tmpfs for /run",
        )?;
    }
    for (content, staged, inside) in &files {
        std::fs::write(staged, content).map_err(|source| MountError::Create {
            path: staged.to_path_buf(),
            source,
        })?;
        bind(root, staged, inside, false)?;
    }
    let system = Path::new(crate::secrets::HOST_BUNDLE);
    if root.entry(system)? == Some(rustix::fs::FileType::RegularFile) {
        bind(root, files[0].1, system, false)?;
    }
    Ok(())
}

/// Put warden's resolver in the sandbox's `/etc/resolv.conf`: over the
/// host's file, or, where that is a link into a directory the sandbox does
/// not have (`/run/systemd/resolve/...`), at the link's target, created in
/// the sandbox's own root.
fn provide_resolv_conf(root: &Root, content: &str) -> Result<(), MountError> {
    let staged = Path::new("/.resolv.conf");
    std::fs::write(staged, content).map_err(|source| MountError::Create {
        path: staged.to_path_buf(),
        source,
    })?;
    let etc_entry = Path::new("/etc/resolv.conf");
    // The link's text is the tree's (an image's): it names a place inside
    // the new root, its `..` stopping at that root as in the sandbox, and
    // that place is made beneath the root, never through another link.
    let target = match root.entry(etc_entry)? {
        Some(rustix::fs::FileType::Symlink) => {
            inside::link_target(Path::new("/etc"), &root.read_link(etc_entry)?)
        }
        _ => etc_entry.to_path_buf(),
    };
    let spot = root.make(&target, Kind::File)?;
    mount_on(
        Some(&staged.to_string_lossy()),
        &spot,
        None,
        MsFlags::MS_BIND,
        None,
        "warden's resolv.conf",
    )?;
    set_attr_inside(
        root,
        &target,
        sys::MOUNT_ATTR_RDONLY | sys::MOUNT_ATTR_NOSUID | sys::MOUNT_ATTR_NODEV,
        false,
    )
}

/// The sandbox's `/etc/hosts`: loopback names and its own hostname, bound
/// read-only over the tree's file (the host's entries are the host's; with
/// no route out the sandbox has no use for them, and with egress every
/// other name goes to warden's resolver). A hostname that is not a plain
/// DNS name gets no line.
fn provide_hosts(root: &Root, hostname: &str) -> Result<(), MountError> {
    let plain = !hostname.is_empty()
        && hostname.len() <= 253
        && hostname
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.');
    let mut text =
        String::from("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n");
    if plain && hostname != "localhost" {
        text.push_str(&format!("127.0.1.1\t{hostname}\n::1\t{hostname}\n"));
    }
    let staged = Path::new("/.hosts");
    std::fs::write(staged, text).map_err(|source| MountError::Create {
        path: staged.to_path_buf(),
        source,
    })?;
    let target = Path::new("/etc/hosts");
    let spot = match root.entry(target)? {
        Some(rustix::fs::FileType::RegularFile) => root.again(target)?,
        // A tree with no file there (or a link, which a bind would
        // follow): the tree's own is left as it is.
        Some(_) => return Ok(()),
        None => match root.make(target, Kind::File) {
            Ok(spot) => spot,
            Err(MountError::Link { path }) => return Err(MountError::Link { path }),
            Err(_) => return Ok(()),
        },
    };
    mount_on(
        Some(&staged.to_string_lossy()),
        &spot,
        None,
        MsFlags::MS_BIND,
        None,
        "warden's hosts file",
    )?;
    set_attr_inside(
        root,
        target,
        sys::MOUNT_ATTR_RDONLY | sys::MOUNT_ATTR_NOSUID | sys::MOUNT_ATTR_NODEV,
        false,
    )
}

/// The root tree's `/etc/passwd` and `/etc/group` with the sandbox's
/// user and group under their given name (any entry of that name or ID
/// taken out), bound read-only over the tree's own: `whoami`, `id`, `ls
/// -l` and a shell's prompt say the name, and the home is the sandbox's.
fn provide_user(root: &Root, user: &UserEntry, home: &Path) -> Result<(), MountError> {
    let shell = if root.seen(Path::new("/bin/bash")) {
        "/bin/bash"
    } else {
        "/bin/sh"
    };
    let passwd = format!(
        "{}:x:{}:{}:{}:{}:{shell}\n",
        user.name,
        user.uid,
        user.gid,
        user.name,
        home.display()
    );
    let group = format!("{}:x:{}:\n", user.name, user.gid);
    for (file, entry, id) in [("passwd", passwd, user.uid), ("group", group, user.gid)] {
        let inside = Path::new("/etc").join(file);
        // Only a regular file of the tree is read, never through a link.
        let regular = root.entry(&inside)? == Some(rustix::fs::FileType::RegularFile);
        let mut content = root
            .read(&inside)?
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default();
        content = without_entry(&content, &user.name, id);
        content.push_str(&entry);
        let staged = Path::new("/").join(format!(".{file}"));
        std::fs::write(&staged, content).map_err(|source| MountError::Create {
            path: staged.clone(),
            source,
        })?;
        if regular {
            bind(root, &staged, &inside, false)?;
        }
    }
    Ok(())
}

/// The lines of a passwd or group file but those naming `name` or the ID
/// `id` (its third field).
fn without_entry(content: &str, name: &str, id: u32) -> String {
    let id = id.to_string();
    let mut out = String::new();
    for line in content.lines() {
        let mut fields = line.split(':');
        let (n, i) = (fields.next(), fields.nth(1));
        if n == Some(name) || i == Some(id.as_str()) {
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// Cover each of `hidden` (host paths) with an empty, unreadable,
/// read-only stand-in wherever a bind shows it: a bind of `~` holds
/// warden's state directory, which no sandbox may read.
fn cover_hidden(root: &Root, binds: &[BindPlan], hidden: &[PathBuf]) -> Result<(), MountError> {
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

/// The sandbox's devpts: private, and at most `max` terminals at once.
const PTS_OPTIONS: &str = "newinstance,ptmxmode=0666,mode=0620,max=64";

/// A minimal `/dev`: the harmless character devices bound from the host, a
/// private devpts instance, a size-capped `/dev/shm`, and the usual links.
fn build_dev(root: &Root, tmp_size: u64) -> Result<(), MountError> {
    mount_on(
        Some("tmpfs"),
        &root.make(Path::new("/dev"), Kind::Dir)?,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC,
        Some("size=64k,mode=0755"),
        "the sandbox's /dev",
    )?;
    // Below here the tmpfs just made, entered through its own descriptor:
    // its names are warden's own, reached relative to it rather than each
    // through the descriptor's magic link in /proc (a walk of /proc for
    // every node costs more than the node).
    let top = root.again(Path::new("/dev"))?;
    rustix::process::fchdir(top.fd()).map_err(|e| MountError::MountPoint {
        path: top.inside.clone(),
        source: e.into(),
    })?;
    let filled = fill_dev(tmp_size);
    // Back to the scratch root, whatever happened: every other path of
    // the assembly is absolute, and nothing should run from inside /dev.
    let back = std::env::set_current_dir("/").map_err(|source| MountError::MountPoint {
        path: "/".into(),
        source,
    });
    filled?;
    back?;
    // Nothing can be created in /dev itself afterwards.
    set_attr_inside(root, Path::new("/dev"), sys::MOUNT_ATTR_RDONLY, false)
}

/// The contents of the sandbox's `/dev`, made in the working directory
/// (its fresh tmpfs, entered by [`build_dev`]); errors name the places as
/// the sandbox sees them.
fn fill_dev(tmp_size: u64) -> Result<(), MountError> {
    let inside = |name: &str| Path::new("/dev").join(name);
    let mount_here = |src: &str, name: &str, fstype, flags, data, what: &str| {
        mount(Some(src), name, fstype, flags, data).map_err(|source| MountError::Mount {
            what: what.to_string(),
            target: inside(name),
            source,
        })
    };
    let mkdir = |name: &str| {
        std::fs::DirBuilder::new()
            .mode(0o755)
            .create(name)
            .map_err(|source| MountError::MountPoint {
                path: inside(name),
                source,
            })
    };
    for name in DEVICES {
        let src = Path::new(OLDROOT).join("dev").join(name);
        if !src.exists() {
            continue;
        }
        std::fs::File::create(name).map_err(|source| MountError::MountPoint {
            path: inside(name),
            source,
        })?;
        // A device node cannot be executed or carry setuid bits; the bind
        // needs no further flags.
        mount_here(
            &src.to_string_lossy(),
            name,
            None,
            MsFlags::MS_BIND,
            None,
            "a device node",
        )?;
    }
    mkdir("pts")?;
    mount_here(
        "devpts",
        "pts",
        Some("devpts"),
        MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC,
        // `max`: terminals come from one pool for every devpts instance
        // but the host's own (kernel.pty.max less kernel.pty.reserve, 3072
        // by default); without a cap, one sandbox could take them all and
        // leave other sandboxes and containers without a terminal.
        Some(PTS_OPTIONS),
        "a private devpts",
    )?;
    mkdir("shm")?;
    let shm_opts = format!("size={tmp_size},mode=1777");
    mount_here(
        "tmpfs",
        "shm",
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some(&shm_opts),
        "the sandbox's /dev/shm",
    )?;
    let links: [(&str, &str); 5] = [
        ("ptmx", "pts/ptmx"),
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ];
    for (name, target) in links {
        symlink(OsStr::new(target), name).map_err(|source| MountError::Create {
            path: inside(name),
            source,
        })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sandboxs_user_replaces_any_entry_of_its_name_or_id() {
        let passwd = "root:x:0:0:root:/root:/bin/bash\nuser:x:1000:1000::/home/user:/bin/sh\nbin:x:2:2::/bin:/usr/sbin/nologin\n";
        assert_eq!(
            without_entry(passwd, "user", 0),
            "bin:x:2:2::/bin:/usr/sbin/nologin\n"
        );
        assert_eq!(without_entry("", "user", 0), "");
    }
}
