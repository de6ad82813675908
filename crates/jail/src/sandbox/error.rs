//! Why a sandbox could not be run.

use crate::{cgroup, pty, quotas};
use nix::errno::Errno;
use std::path::PathBuf;

/// Why a sandbox could not be run. Every message says what to do.
#[derive(Debug, thiserror::Error)]
pub enum JailError {
    #[error(transparent)]
    Quota(#[from] quotas::QuotaError),
    #[error(
        "the sandbox's changes were not all saved ({saved}); what it wrote while running that was not saved is lost"
    )]
    LayerSave {
        saved: PathBuf,
        #[source]
        source: crate::kept::KeptError,
    },
    #[error("{what} {path} does not exist; create it or pass another path")]
    MissingPath {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{what} {path} is a file, not a directory: pass the directory that holds the project")]
    NotADirectory { what: &'static str, path: PathBuf },
    #[error("{what} {path} contains '..'; pass the directory itself")]
    DotDot { what: &'static str, path: PathBuf },
    #[error("{what} {path} goes through a symbolic link (to {target}): a link left by earlier code in the sandbox could redirect the mount, so warden does not follow links here; pass the real path")]
    ThroughSymlink {
        what: &'static str,
        path: PathBuf,
        target: PathBuf,
    },
    /// The directory at the workspace's path is not the one the sandbox
    /// was created over (reason code `workspace_moved`).
    #[error("refused (workspace_moved): workspace {path} is not the directory the sandbox was created over (device {} inode {} then, device {} inode {} now): it was moved or replaced since; warden does not run a sandbox over another directory: put the sandbox's directory back at that path", .want.0, .want.1, .found.0, .found.1)]
    WorkspaceMoved {
        path: PathBuf,
        want: (u64, u64),
        found: (u64, u64),
    },
    #[error("`filesystem.rootfs` {0} has no /usr or /bin: pass a prepared root tree, e.g. the output of debootstrap")]
    BadRootfs(PathBuf),
    #[error("cannot create the sandbox's namespaces ({errno:?}): {why}. Without them {lost}; give `allow_degraded` to run that way anyway")]
    UserNamespaces {
        why: String,
        lost: &'static str,
        errno: Errno,
    },
    #[error("cannot enforce {what}: cgroups are not usable here; run as root, on a host with a delegated cgroup v2 subtree (e.g. under `systemd-run --user --scope -p Delegate=yes`), or give `allow_degraded` to fall back to per-process rlimits")]
    CgroupRequired {
        what: String,
        #[source]
        source: cgroup::CgroupError,
    },
    #[error("cannot prepare {path} for the sandbox's unprivileged host ID")]
    Idmap {
        path: PathBuf,
        #[source]
        source: Errno,
    },
    #[error("the file system of {path} does not support idmapped mounts, which root mode needs to keep it writable by the sandbox's unprivileged ID; run warden as a regular user instead of root")]
    IdmapUnsupported {
        path: PathBuf,
        #[source]
        source: Errno,
    },
    #[error("cannot write the ID map {path}")]
    IdMap {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot set up the sandbox: {0}")]
    Setup(String),
    /// A bind of the spec refused at a launch with a stable reason code (a
    /// VM's share that goes through a link or was swapped since it was
    /// checked): `bind` is the option (`filesystem.read_write`, ...) and,
    /// for a list, the entry's position in it.
    #[error("cannot set up the sandbox: {why}")]
    BindRefused {
        code: &'static str,
        bind: (&'static str, Option<usize>),
        why: String,
    },
    #[error("the sandbox's init ended without reporting the command's status ({0})")]
    InitDied(String),
    #[error("cannot {what}")]
    Sys {
        what: &'static str,
        #[source]
        source: Errno,
    },
    #[error(transparent)]
    Pty(#[from] pty::PtyError),
    #[error("warden runs as UID 0 of a user namespace that maps it to the host's root, so the sandbox would be the host's root; run warden as a regular user, or as root outside any user namespace")]
    OuterRoot,
    #[error("without namespaces the sandbox runs with the workspace owner's host IDs, and {0} belongs to root or a system account: the sandbox would be that account on the host; give the workspace to a regular user (chown) or run warden as that user")]
    DegradedRootWorkspace(PathBuf),
    #[error(
        "the overlay's upper directory {upper} and work directory {work} must be side by side"
    )]
    OverlayLayout { upper: PathBuf, work: PathBuf },
    #[error("an overlay workspace (`filesystem.mode`) needs a mount namespace, which this host does not give (degraded mode); run without it, or fix the host (see `warden doctor`)")]
    OverlayDegraded,
    #[error("volumes (`filesystem.volumes`) need a mount namespace, which this host does not give (degraded mode); run without them, or fix the host (see `warden doctor`)")]
    VolumesDegraded,
    #[error("the writable volume at {} (`filesystem.volumes`) needs the sandbox's disk limit (`resources.disk`) to bound what is written into it, and this sandbox has none this host can enforce (Linux 6.6 or later, with a mount namespace): mount it read-only, or run where the disk limit holds", .0.display())]
    VolumeUnbounded(PathBuf),
    #[error("`resources.disk` needs Linux 6.6 or later (overlayfs keeps its marks in user.* attributes, which tmpfs takes from 6.6); this kernel is {release}: leave `resources.disk` out to keep the layer on disk without a size limit, or run on a newer kernel")]
    DiskNeedsKernel { release: String },
    #[error("cannot serve the sandbox's network: {0}")]
    Attach(String),
    #[error("nothing was started: the run cannot be recorded ({0})")]
    Unrecorded(String),
    #[error("cannot publish port {port} on the host's 127.0.0.1 (is it in use? pick another HOSTPORT in `egress.publish HOSTPORT:PORT`)")]
    Publish {
        port: u16,
        #[source]
        source: std::io::Error,
    },
    #[error("`filesystem.rootfs` needs the sandbox's own mount namespace, which this host does not allow; leave `filesystem.rootfs` out to run degraded")]
    RootfsNeedsNamespaces,
    #[error("the exec allowlist (`process.allow_exec`) is enforced by Landlock, which this kernel does not offer ({0}); run without it, or give `allow_degraded` to run with every program executable")]
    ExecAllowlistNeedsLandlock(nix::errno::Errno),
    #[error("a long-lived sandbox (create, start, run -d) needs its own namespaces, which this host does not allow; only a run of one command may go without them (with `allow_degraded`)")]
    ServiceNeedsNamespaces,
    #[error("cannot create the sandbox's private directory {path}")]
    PrivateTmp {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "warden has no seccomp filter for the {0} architecture (it supports x86_64 and aarch64)"
    )]
    UnsupportedArch(&'static str),
    #[error("a string in the command or environment contains a NUL byte: {0:?}")]
    Nul(String),
    #[error(transparent)]
    Secrets(#[from] crate::secrets::SecretsError),
    #[error("a secret (`secrets`) needs the sandbox's own network namespace (the proxy substitutes the values), which this host does not allow")]
    SecretsNeedNamespaces,
    #[error("warden has {0} threads where it clones the sandbox, whose init would inherit the locks the others hold; the clone is made only from a single-threaded process (the caller starts its threads after it)")]
    Threaded(usize),
    #[error("cannot count warden's threads (/proc/self/stat), which must be one at the clone")]
    Threads(#[source] std::io::Error),
    #[error("cannot join the network namespace {path}: {why}")]
    JoinNetwork {
        path: PathBuf,
        why: String,
        #[source]
        source: Errno,
    },
}

pub(super) fn sys_err(what: &'static str) -> impl FnOnce(Errno) -> JailError {
    move |source| JailError::Sys { what, source }
}
