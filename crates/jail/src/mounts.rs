//! The sandbox's file tree: assembled from bind mounts in the sandbox's own
//! mount namespace and entered with `pivot_root`, so that nothing of the host
//! is reachable but what is mounted here.
//!
//! Runs in the sandbox's init, after the ID maps are written and before any
//! other restriction. The host's root stays reachable at `/oldroot` only
//! until the new root is complete; then it is detached.
//!
//! The assembly in order, one file each: `pivot` enters a scratch root
//! and lays the new root's base, `fresh` makes `/proc`, `/dev`, `/tmp`
//! and the home, `binds` (with `overlay`) mounts the plan's binds,
//! `etc` binds warden's own files, and `pivot` leaves the host. Every
//! place inside the new root is found and made through `inside`; the
//! mount calls themselves are `ops`. This file holds the plan and the
//! order.

mod binds;
mod etc;
mod fresh;
mod inside;
mod ops;
mod overlay;
mod pivot;

use binds::{cover_hidden, mount_binds};
use etc::{provide_hosts, provide_resolv_conf, provide_trust, provide_user};
use fresh::mount_fresh;
use nix::errno::Errno;
use pivot::{enter_scratch, leave_host, mount_host_system, mount_rootfs};
use std::os::fd::OwnedFd;
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
