//! The supervisor side: prepares a sandbox from a spec, spawns its init into
//! new namespaces, writes its ID maps, confines it in a cgroup, relays its
//! terminal, enforces the deadline, and maps how it ended to an exit status.

use crate::cgroup::{self, Cgroup, Limits};
use crate::error::chain_str;
use crate::host;
use crate::init::{self, ChildPlan, FORWARDED};
use crate::mounts::{BindPlan, RootPlan, RootfsPlan};
use crate::privileges::Rlimits;
use crate::pty::{self, RawMode};
use crate::quotas;
use crate::report::{parse_reports, Report};
use crate::sys::{self, Forked};
use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{kill, SigSet, SigmaskHow, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::unistd::Pid;
use std::ffi::CString;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use warden_audit::{Event, EventKind, EventSink, ExitReason, ResourcePeaks};
use warden_policy::{Home, NetworkSpec, SandboxSpec, Terminal, HOME_MOUNT, WORKSPACE_MOUNT};

/// The host ID that the sandbox's user maps to when warden runs as root.
pub const NOBODY: u32 = 65534;

/// Why a sandbox could not be run. Every message says what to do.
#[derive(Debug, thiserror::Error)]
pub enum JailError {
    #[error(transparent)]
    Quota(#[from] quotas::QuotaError),
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
    #[error("--rootfs {0} has no /usr or /bin: pass a prepared root tree, e.g. the output of debootstrap")]
    BadRootfs(PathBuf),
    #[error("cannot create the sandbox's namespaces ({errno:?}): {why}. Without them {lost}; pass --allow-degraded to run that way anyway")]
    UserNamespaces {
        why: String,
        lost: &'static str,
        errno: Errno,
    },
    #[error("cannot enforce {what}: cgroups are not usable here; run as root, on a host with a delegated cgroup v2 subtree (e.g. under `systemd-run --user --scope -p Delegate=yes`), or pass --allow-degraded to fall back to per-process rlimits")]
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
    #[error("without namespaces the sandbox runs with the workspace owner's host IDs, and {0} belongs to root: the sandbox would be root on the host; give the workspace to a regular user (chown) or run warden as that user")]
    DegradedRootWorkspace(PathBuf),
    #[error(
        "the overlay's upper directory {upper} and work directory {work} must be side by side"
    )]
    OverlayLayout { upper: PathBuf, work: PathBuf },
    #[error("--overlay needs a mount namespace, which this host does not give (degraded mode); run without --overlay, or fix the host (see `warden doctor`)")]
    OverlayDegraded,
    #[error("cannot serve the sandbox's network: {0}")]
    Attach(String),
    #[error("cannot publish port {port} on the host's 127.0.0.1 (is it in use? pick another HOSTPORT in --publish HOSTPORT:PORT)")]
    Publish {
        port: u16,
        #[source]
        source: std::io::Error,
    },
    #[error("--rootfs needs the sandbox's own mount namespace, which this host does not allow; leave --rootfs out to run degraded")]
    RootfsNeedsNamespaces,
    #[error("a long-lived sandbox (create, start, run -d) needs its own namespaces, which this host does not allow; use `warden run --allow-degraded` for one command at a time")]
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
    #[error("--secret needs the sandbox's own network namespace (the proxy substitutes the values), which this host does not allow")]
    SecretsNeedNamespaces,
    #[error("cannot join the network namespace {path}: {why}")]
    JoinNetwork {
        path: PathBuf,
        why: String,
        #[source]
        source: Errno,
    },
}

fn sys_err(what: &'static str) -> impl FnOnce(Errno) -> JailError {
    move |source| JailError::Sys { what, source }
}

/// How the sandbox ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// The status warden exits with (see the exit-status conventions).
    pub status: i32,
    pub reason: ExitReason,
    pub signal: Option<i32>,
    /// A line for the person, printed on stderr by the front door.
    pub message: Option<String>,
}

const NS_FLAGS: libc::c_int = libc::CLONE_NEWUSER
    | libc::CLONE_NEWNS
    | libc::CLONE_NEWPID
    | libc::CLONE_NEWIPC
    | libc::CLONE_NEWUTS
    | libc::CLONE_NEWNET;

/// Open the network namespace at `path` to join, with the supervisor's
/// own to come back to. Refused: degraded or rootless runs (entering a
/// namespace the host's root owns needs host root), a file that is not a
/// network namespace, and the supervisor's own (the host's) namespace.
fn open_network_namespace(
    path: &Path,
    degraded: bool,
    root: bool,
) -> Result<(OwnedFd, OwnedFd, PathBuf), JailError> {
    let err = |why: &str, source: Errno| JailError::JoinNetwork {
        path: path.to_path_buf(),
        why: why.to_string(),
        source,
    };
    if degraded || !root {
        return Err(err(
            "joining a network namespace needs host root and the sandbox's own namespaces",
            Errno::EPERM,
        ));
    }
    let open = |p: &Path| {
        nix::fcntl::open(
            p,
            nix::fcntl::OFlag::O_RDONLY | nix::fcntl::OFlag::O_CLOEXEC,
            nix::sys::stat::Mode::empty(),
        )
    };
    let ns = open(path).map_err(|e| err("it cannot be opened", e))?;
    let own = open(Path::new("/proc/self/ns/net"))
        .map_err(|e| err("the supervisor's own namespace cannot be opened", e))?;
    // SAFETY: NS_GET_NSTYPE takes no argument and only reads the
    // descriptor's namespace type.
    let kind = unsafe { libc::ioctl(ns.as_raw_fd(), NS_GET_NSTYPE) };
    if kind != libc::CLONE_NEWNET {
        return Err(err("it is not a network namespace", Errno::EINVAL));
    }
    let a = nix::sys::stat::fstat(&ns).map_err(|e| err("it cannot be read", e))?;
    let b = nix::sys::stat::fstat(&own).map_err(|e| err("it cannot be read", e))?;
    if (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino) {
        return Err(err(
            "it is the host's network namespace, which a sandbox never shares",
            Errno::EPERM,
        ));
    }
    Ok((ns, own, path.to_path_buf()))
}

/// The trust files of the sandbox whose network namespace is joined (its
/// proxy's authority), opened here as the supervisor.
fn joined_trust(dir: &Path) -> Result<crate::secrets::TrustFiles, JailError> {
    let open = |name: &str| {
        let path = dir.join(name);
        nix::fcntl::open(
            &path,
            nix::fcntl::OFlag::O_RDONLY | nix::fcntl::OFlag::O_CLOEXEC,
            nix::sys::stat::Mode::empty(),
        )
        .map_err(|source| JailError::JoinNetwork {
            path: path.clone(),
            why: "the joined sandbox's trust file cannot be opened".into(),
            source,
        })
    };
    Ok(crate::secrets::TrustFiles {
        bundle: open("ca-bundle.crt")?,
        ca: open("ca.crt")?,
    })
}

/// `NS_GET_NSTYPE` (linux/nsfs.h): `_IO(0xb7, 0x3)`.
const NS_GET_NSTYPE: libc::c_ulong = 0xb703;

fn setns_net(ns: &OwnedFd, path: &Path, what: &str) -> Result<(), JailError> {
    nix::sched::setns(ns, nix::sched::CloneFlags::CLONE_NEWNET).map_err(|source| {
        JailError::JoinNetwork {
            path: path.to_path_buf(),
            why: format!("cannot {what} network namespace"),
            source,
        }
    })
}

/// Resolve a host path the person named, refusing symbolic links and `..`
/// on the way: earlier sandbox code may have planted a link in a directory
/// it could write (`project/pkg -> /etc`), and a later run through that
/// path must not mount what the link points at. The returned descriptor is
/// what gets mounted, so nothing can be swapped in between.
fn resolve_host_path(what: &'static str, p: &Path) -> Result<(PathBuf, OwnedFd), JailError> {
    if p.components().any(|c| c == std::path::Component::ParentDir) {
        return Err(JailError::DotDot {
            what,
            path: p.to_path_buf(),
        });
    }
    let lexical: PathBuf = p.components().collect();
    let c = CString::new(lexical.as_os_str().as_bytes())
        .map_err(|_| JailError::Nul(lexical.display().to_string()))?;
    match sys::open_path_no_symlinks(&c) {
        Ok(fd) => Ok((lexical, fd)),
        Err(Errno::ELOOP) => Err(JailError::ThroughSymlink {
            what,
            path: lexical.clone(),
            target: std::fs::canonicalize(&lexical).unwrap_or_default(),
        }),
        Err(Errno::ENOSYS) => {
            // Kernels before 5.6: the same rule, checked on the resolved
            // path (without the guarantee against a later swap).
            let resolved =
                std::fs::canonicalize(&lexical).map_err(|source| JailError::MissingPath {
                    what,
                    path: lexical.clone(),
                    source,
                })?;
            if resolved != lexical {
                return Err(JailError::ThroughSymlink {
                    what,
                    path: lexical,
                    target: resolved,
                });
            }
            let fd = nix::fcntl::open(
                &lexical,
                nix::fcntl::OFlag::O_PATH | nix::fcntl::OFlag::O_CLOEXEC,
                nix::sys::stat::Mode::empty(),
            )
            .map_err(|e| JailError::MissingPath {
                what,
                path: lexical.clone(),
                source: e.into(),
            })?;
            Ok((lexical, fd))
        }
        Err(e) => Err(JailError::MissingPath {
            what,
            path: lexical,
            source: e.into(),
        }),
    }
}

fn cstring(s: &str) -> Result<CString, JailError> {
    CString::new(s).map_err(|_| JailError::Nul(s.to_string()))
}

/// A layer the host cannot give, as an event: the front door says it to
/// the person (the jail prints nothing).
fn degraded(events: &mut dyn EventSink, id: &str, layer: &str, lost: &str) {
    events.emit(&Event::now(
        id,
        EventKind::Degraded {
            layer: layer.to_string(),
            lost: lost.to_string(),
        },
    ));
}

/// What the caller plugs into a sandbox as it starts: its network service
/// (the egress proxy, published ports) and, for a long-lived sandbox, the
/// channel its init takes spawn requests on. The jail is mechanism only:
/// what serves the network is the caller's (the runtime's) choice.
pub trait Attach {
    /// After the clone, before the sandbox may go on: serve its network.
    /// An error stops the sandbox before anything of it runs.
    fn network(&mut self, network: Network) -> Result<(), String>;
    /// A long-lived sandbox runs: `channel` carries spawn requests to its
    /// init (see [`crate::spawn`]), whose host PID is `init`.
    fn service(&mut self, channel: OwnedFd, init: Pid);
    /// Every process of the sandbox is gone; stop serving its network
    /// (before the exit is recorded, so that its last decisions come first).
    fn stopping(&mut self);
}

/// The sandbox's network, handed to [`Attach::network`].
pub struct Network {
    /// With egress: the proxy's listening TCP socket and the resolver's UDP
    /// socket, opened by the init inside the sandbox's network namespace.
    pub egress: Option<(OwnedFd, OwnedFd)>,
    /// With secrets: what substitutes them towards their hosts.
    pub terminator: Option<warden_egress::secrets::Terminator>,
    /// With `--ask` and a terminal: answers for names on no list.
    pub asker: Option<std::sync::Arc<dyn warden_egress::proxy::Asker>>,
    /// `--publish`: the host's listeners, bound already, and the sandbox
    /// port each leads to.
    pub published: Vec<(std::net::TcpListener, u16)>,
    /// Fresh TCP sockets of the sandbox's namespace, for published ports.
    pub sockets: Option<warden_egress::publish::SocketSource>,
}

/// How the sandbox runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Program {
    /// The spec's command; the sandbox ends with it (`warden run`).
    Command,
    /// No command of its own: the init serves spawn requests until the
    /// caller ends it (`warden create`/`start`, the daemon).
    Service,
}

/// Run `spec` in a new sandbox named `id` and return when every process of
/// it is gone. Events go to `events`; the network is served by `attach`.
pub fn run(
    spec: &SandboxSpec,
    id: &str,
    program: Program,
    events: &mut dyn EventSink,
    attach: &mut dyn Attach,
) -> Result<Outcome, JailError> {
    if crate::SECCOMP_PROGRAM.is_empty() {
        return Err(JailError::UnsupportedArch(std::env::consts::ARCH));
    }
    match run_mode(spec, id, events, Mode::Namespaces, program, attach) {
        // Nothing of the command ran: the namespaces failed before it could.
        Err(JailError::UserNamespaces { why, .. }) if spec.allow_degraded => {
            degraded(
                events,
                id,
                "namespaces",
                &format!("{why}; {}", host::LOST_WITHOUT_NAMESPACES),
            );
            run_mode(spec, id, events, Mode::Degraded, program, attach)
        }
        other => other,
    }
}

/// How the sandbox is built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Every namespace, the assembled root: full isolation.
    Namespaces,
    /// No namespaces (the host forbids them and the person allowed a
    /// degraded run): Landlock, seccomp, no capabilities, rlimits, cgroups
    /// where root allows, and a subreaper that kills every descendant.
    Degraded,
}

fn run_mode(
    spec: &SandboxSpec,
    id: &str,
    events: &mut dyn EventSink,
    mode: Mode,
    program: Program,
    attach: &mut dyn Attach,
) -> Result<Outcome, JailError> {
    let degraded_mode = mode == Mode::Degraded;
    let root_mode = host::is_root();
    let fs = &spec.filesystem;
    if host::root_inside_maps_to_outer_root() {
        return Err(JailError::OuterRoot);
    }
    if degraded_mode && fs.rootfs.is_some() {
        return Err(JailError::RootfsNeedsNamespaces);
    }
    if degraded_mode && program == Program::Service {
        // Without a PID namespace the init's stop (SIGTERM to -1) would
        // reach every process of the user on the host.
        return Err(JailError::ServiceNeedsNamespaces);
    }

    // A namespace to join is opened now (and checked to be another
    // network namespace than the supervisor's own, never the host's).
    let join_network = match &spec.join_network {
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
    };

    // Host-side paths are resolved here, on the host, without following
    // symbolic links; what gets mounted is the descriptor resolved now.
    let rootfs = match &fs.rootfs {
        Some(r) => {
            let (r, fd) = resolve_host_path("--rootfs", r)?;
            if !r.join("usr").is_dir() && !r.join("bin").exists() {
                return Err(JailError::BadRootfs(r));
            }
            let tree = if root_mode {
                Some(
                    sys::open_tree_clone_fd(fd.as_fd()).map_err(|source| JailError::Idmap {
                        path: r.clone(),
                        source,
                    })?,
                )
            } else {
                None
            };
            Some(RootfsPlan { path: r, tree })
        }
        None => None,
    };
    let (workspace, workspace_fd) = match fs.workspace.as_deref() {
        Some(w) => {
            let (path, fd) = resolve_host_path("--workspace", w)?;
            let st = nix::sys::stat::fstat(&fd).map_err(|e| JailError::MissingPath {
                what: "--workspace",
                path: path.clone(),
                source: e.into(),
            })?;
            if st.st_mode & libc::S_IFMT != libc::S_IFDIR {
                return Err(JailError::NotADirectory {
                    what: "--workspace",
                    path,
                });
            }
            (Some(path), Some((fd, st.st_uid, st.st_gid)))
        }
        None => (None, None),
    };

    // The sandbox's own IDs. Rootless: the caller's own. As root: the owner
    // of the workspace (so its files look like the sandbox's own), mapped to
    // nobody on the host.
    let (uid, gid, host_uid, host_gid) = if root_mode && degraded_mode {
        // No user namespace to map through: the IDs are the host's. The
        // workspace owner's, so that it stays writable; nobody without one.
        // Never root: that would be root on the host.
        let (u, g) = match &workspace_fd {
            Some((_, u, g)) => (*u, *g),
            None => (NOBODY, NOBODY),
        };
        if u == 0 || g == 0 {
            return Err(JailError::DegradedRootWorkspace(
                workspace.clone().unwrap_or_default(),
            ));
        }
        (u, g, u, g)
    } else if root_mode {
        let (u, g) = match &workspace_fd {
            Some((_, u, g)) => (*u, *g),
            None => (0, 0),
        };
        (u, g, NOBODY, NOBODY)
    } else {
        let (u, g) = (
            nix::unistd::getuid().as_raw(),
            nix::unistd::getgid().as_raw(),
        );
        (u, g, u, g)
    };

    let mut binds = Vec::new();
    let mut writable = vec![PathBuf::from("/tmp"), PathBuf::from("/dev/shm")];
    let mut add_bind = |src: PathBuf,
                        source: OwnedFd,
                        dst: PathBuf,
                        writable_bind: bool|
     -> Result<(), JailError> {
        // As root, binds are cloned here, where the host's permissions
        // allow the lookup (the sandbox's ID is nobody on the host), and
        // writable ones are then idmapped so that the sandbox can write them
        // while files keep their owners on disk.
        let tree = if root_mode && !degraded_mode {
            Some(
                sys::open_tree_clone_fd(source.as_fd()).map_err(|source| JailError::Idmap {
                    path: src.clone(),
                    source,
                })?,
            )
        } else {
            None
        };
        if writable_bind {
            writable.push(dst.clone());
        }
        binds.push(BindPlan {
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
        });
        Ok(())
    };
    if let (Some(w), Some((fd, _, _))) = (&workspace, workspace_fd) {
        add_bind(w.clone(), fd, PathBuf::from(WORKSPACE_MOUNT), true)?;
    }
    for b in &fs.binds {
        let what = if b.writable { "--rw" } else { "--ro" };
        let (src, fd) = resolve_host_path(what, &b.path)?;
        add_bind(src, fd, b.path.components().collect(), b.writable)?;
    }
    // The sandbox's own home and the profile's caches: directories of
    // warden's state, bound writable after every other bind (the caches
    // below the home). As root they are idmapped like the workspace, so
    // they are given to the IDs the sandbox has inside.
    let home_tmpfs = fs.home == Home::Tmpfs && !degraded_mode;
    if !degraded_mode {
        let kept_home = match &fs.home {
            Home::Dir(d) => Some((d.as_path(), Path::new(HOME_MOUNT))),
            _ => None,
        };
        let caches = fs
            .caches
            .iter()
            .map(|c| (c.host.as_path(), c.inside.as_path()));
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
            add_bind(src, fd, inside.to_path_buf(), true)?;
        }
    }
    if home_tmpfs {
        writable.push(PathBuf::from(HOME_MOUNT));
    }
    if let Some(dirs) = &fs.overlay {
        if degraded_mode {
            // No mount namespace: no overlay. Refused rather than writing
            // the real workspace, which --overlay promised not to do.
            return Err(JailError::OverlayDegraded);
        }
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
            Some(
                sys::open_tree_clone_fd(parent_fd.as_fd()).map_err(|source| JailError::Idmap {
                    path: parent.clone(),
                    source,
                })?,
            )
        } else {
            None
        };
        if let Some(b) = binds
            .iter_mut()
            .find(|b| b.dst == Path::new(WORKSPACE_MOUNT))
        {
            b.overlay = Some(crate::mounts::OverlayPlan { upper, work, tree });
        }
    }

    // Resources: a cgroup where the host allows one; otherwise rlimits, and
    // only with consent when the person asked for a limit explicitly.
    let res = &spec.resources;
    let limits = Limits {
        memory: Some(res.memory.value),
        pids: Some(res.pids.value),
        cpus: res.cpus,
    };
    // The cgroup exists before the init does: the init is born in its v2
    // directory and moves itself into the v1 ones first thing (see
    // `cgroup::join`), so that no pid is written into `cgroup.procs`, whose
    // global lock can cost an RCU grace period on every start.
    let cgroup = confine(spec, id, &limits, events)?;
    let joining = match &cgroup {
        Some(cg) => cg.joining().map_err(|source| JailError::CgroupRequired {
            what: "the sandbox's limits".into(),
            source,
        })?,
        None => cgroup::Joining::default(),
    };
    // Fallback limits for hosts without usable cgroups; the init applies
    // them only when the final message says that no cgroup confines it.
    let user_limits = quotas::UserLimits::for_sandbox();
    let rlimits = Rlimits {
        open_files: res.open_files,
        file_size: res.file_size,
        nproc: Some(res.pids.value),
        data: Some(res.memory.value),
        sigpending: user_limits.sigpending,
        msgqueue: user_limits.msgqueue,
        memlock: user_limits.memlock,
    };

    // The command's terminal: opened by the init in the sandbox's own
    // devpts, its master side sent back over `tty_pair`; without a mount
    // namespace (degraded), the host's devpts is the sandbox's, and it is
    // opened here.
    let wants_tty = spec.terminal == Terminal::Pty && program == Program::Command;
    let terminal = if wants_tty && degraded_mode {
        Some(pty::open()?)
    } else {
        None
    };
    let (tty_parent, tty_child) = if wants_tty && !degraded_mode {
        let (p, c) = nix::sys::socket::socketpair(
            nix::sys::socket::AddressFamily::Unix,
            nix::sys::socket::SockType::SeqPacket,
            None,
            nix::sys::socket::SockFlag::SOCK_CLOEXEC,
        )
        .map_err(sys_err("create the terminal's socket pair"))?;
        (Some(p), Some(c))
    } else {
        (None, None)
    };

    // Without a mount namespace the sandbox lives in the host's tree: its
    // scratch space is a private directory, its paths are host paths, and
    // Landlock alone says what it may touch.
    let private_tmp = if degraded_mode {
        Some(PrivateTmp::create(id, uid, gid)?)
    } else {
        None
    };
    let mut env_pairs = spec.env.clone();
    // Secrets: placeholders in the sandbox's environment; the values are
    // read after the clone, or kept where the clone does not get them.
    let secret_plan = match &spec.network {
        NetworkSpec::Egress(e) if !e.secrets.is_empty() => {
            if degraded_mode {
                return Err(JailError::SecretsNeedNamespaces);
            }
            let plan = crate::secrets::SecretPlan::prepare(&e.secrets)?;
            for (name, placeholder) in plan.placeholders() {
                env_pairs.retain(|(k, _)| k != name);
                env_pairs.push((name.to_string(), placeholder.to_string()));
            }
            Some(plan)
        }
        _ => None,
    };
    let mut landlock_read = vec![PathBuf::from("/")];
    let cwd = match (&private_tmp, &workspace) {
        (Some(tmp), ws) => {
            // The private scratch directory is the home too: never the
            // workspace, which would collect the tools' dotfiles.
            let home = ws.clone().unwrap_or_else(|| tmp.0.clone());
            for (k, v) in env_pairs.iter_mut() {
                if k == "HOME" {
                    *v = tmp.0.display().to_string();
                }
            }
            env_pairs.push(("TMPDIR".into(), tmp.0.display().to_string()));
            landlock_read = degraded_read_paths();
            writable = vec![tmp.0.clone()];
            if let Some(w) = ws {
                landlock_read.push(w.clone());
            }
            for b in &binds {
                landlock_read.push(b.src.clone());
                if b.writable {
                    writable.push(b.src.clone());
                }
            }
            home
        }
        (None, Some(_)) => PathBuf::from(WORKSPACE_MOUNT),
        (None, None) => PathBuf::from("/"),
    };

    let argv = spec
        .command
        .iter()
        .map(|a| cstring(a))
        .collect::<Result<Vec<_>, _>>()?;
    let env = env_pairs
        .iter()
        .map(|(k, v)| cstring(&format!("{k}={v}")))
        .collect::<Result<Vec<_>, _>>()?;
    let path_var = spec
        .env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.clone())
        .unwrap_or_default();

    let (go_rd, go_wr) =
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(sys_err("create a pipe"))?;
    let (rep_rd, rep_wr) =
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(sys_err("create a pipe"))?;

    // With egress, the init opens the proxy's sockets inside the sandbox's
    // network namespace and hands them over this pair.
    let egress = match (&spec.network, degraded_mode) {
        (NetworkSpec::Egress(e), false) => Some(e.clone()),
        (NetworkSpec::Egress(_), true) => {
            degraded(
                events,
                id,
                "network",
                "without a network namespace --allow-domain cannot be enforced: the sandbox has the host's network",
            );
            None
        }
        (NetworkSpec::LoopbackOnly, _) => None,
    };
    // --publish: the host's listeners are bound now, so that a port in use
    // is an error before anything starts. Without a network namespace the
    // sandbox's servers are on the host's own loopback already.
    let mut published = Vec::new();
    if !spec.publish.is_empty() {
        if degraded_mode {
            degraded(
                events,
                id,
                "publish",
                "without a network namespace --publish does nothing: servers in the sandbox listen on the host's network",
            );
        } else {
            for m in &spec.publish {
                let listener =
                    std::net::TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, m.host_port))
                        .map_err(|source| JailError::Publish {
                            port: m.host_port,
                            source,
                        })?;
                published.push((listener, m.sandbox_port));
            }
        }
    }
    let egress_pair = match egress.is_some() || !published.is_empty() {
        true => Some(
            nix::sys::socket::socketpair(
                nix::sys::socket::AddressFamily::Unix,
                nix::sys::socket::SockType::SeqPacket,
                None,
                nix::sys::socket::SockFlag::SOCK_CLOEXEC,
            )
            .map_err(sys_err("create the egress socket pair"))?,
        ),
        false => None,
    };
    // A long-lived sandbox: the channel its init takes spawn requests on.
    let (service_parent, service_child) = match program {
        Program::Service => {
            let (p, c) = nix::sys::socket::socketpair(
                nix::sys::socket::AddressFamily::Unix,
                nix::sys::socket::SockType::SeqPacket,
                None,
                nix::sys::socket::SockFlag::SOCK_CLOEXEC,
            )
            .map_err(sys_err("create the spawn channel"))?;
            (Some(p), Some(c))
        }
        Program::Command => (None, None),
    };
    let mut close_in_child = vec![go_wr.as_raw_fd(), rep_rd.as_raw_fd()];
    if let Some(p) = &service_parent {
        close_in_child.push(p.as_raw_fd());
    }
    for (l, _) in &published {
        close_in_child.push(l.as_raw_fd());
    }
    if let Some((parent_end, _)) = &egress_pair {
        close_in_child.push(parent_end.as_raw_fd());
    }
    let (egress_parent, egress_child) = match egress_pair {
        Some((p, c)) => (Some(p), Some(c)),
        None => (None, None),
    };
    if let Some(p) = &tty_parent {
        close_in_child.push(p.as_raw_fd());
    }
    if let Some(t) = &terminal {
        close_in_child.push(t.master.as_raw_fd());
    }
    let weakened = crate::Weakened::from_env();
    for (off, layer) in [
        (weakened.seccomp, "seccomp"),
        (weakened.landlock, "landlock"),
    ] {
        if off {
            eprintln!("warden: TEST BUILD: the {layer} layer is OFF (WARDEN_TEST_WEAKEN)");
            degraded(
                events,
                id,
                layer,
                "switched off for a test (WARDEN_TEST_WEAKEN, debug build)",
            );
        }
    }
    if let Some(dir) = &joining.v2 {
        close_in_child.push(dir.as_raw_fd());
    }
    let plan = ChildPlan {
        weakened,
        root: RootPlan {
            rootfs,
            binds,
            tmp_size: fs.tmp_size,
            hostname: spec.hostname.clone(),
            resolv_conf: egress
                .as_ref()
                .map(|_| "nameserver 127.0.0.1\noptions ndots:1 timeout:2\n".to_string()),
            trust: match (&secret_plan, &spec.join_trust) {
                (Some(p), _) => Some(p.trust_files()?),
                (None, Some(dir)) if spec.join_network.is_some() => Some(joined_trust(dir)?),
                _ => None,
            },
            hidden: fs.hidden.clone(),
            home_tmpfs,
        },
        egress_channel: egress_child,
        egress: egress.is_some(),
        joined_network: spec.join_network.is_some(),
        serve_sockets: !published.is_empty(),
        uid,
        gid,
        rlimits,
        user_limits: if degraded_mode {
            quotas::UserLimits::default()
        } else {
            user_limits
        },
        landlock_read,
        writable,
        cwd,
        degraded: degraded_mode,
        argv,
        env,
        path_var,
        pty_slave: terminal.as_ref().and_then(|t| t.slave.try_clone().ok()),
        close_in_child,
        cgroup_tasks: joining.v1_tasks,
        service: service_child,
        tty_channel: tty_child,
    };
    let mut master = terminal.map(|t| t.master);

    // Signals are taken through a signalfd from here on; the child starts
    // with the same mask and restores `original` just before exec.
    let mut handled = SigSet::empty();
    handled.add(Signal::SIGCHLD);
    for s in FORWARDED {
        handled.add(*s);
    }
    let mut original = SigSet::empty();
    nix::sys::signal::pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&handled), Some(&mut original))
        .map_err(sys_err("block signals"))?;
    let _restore_mask = MaskGuard(original);

    if root_mode {
        // Supplementary groups are host groups the sandbox must not keep
        // (group root can read files that "others" cannot).
        nix::unistd::setgroups(&[]).map_err(sys_err("drop supplementary groups"))?;
    }

    if degraded_mode {
        // Without a PID namespace, orphans of the sandbox would be adopted
        // by the host's init; as a subreaper the supervisor adopts them and
        // kills them when the run ends.
        // SAFETY: prctl with integer arguments only.
        let rc = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1 as libc::c_ulong, 0, 0, 0) };
        Errno::result(rc).map_err(sys_err("become the sandbox's subreaper"))?;
    }
    let start = Instant::now();
    let flags = match (degraded_mode, &join_network) {
        (true, _) => 0,
        (false, None) => NS_FLAGS,
        (false, Some(_)) => NS_FLAGS & !libc::CLONE_NEWNET,
    };
    // Joining: the clone is made from inside the namespace (the supervisor
    // enters it for the clone only, as host root, which its owner needs),
    // so the sandbox's processes are born there and hold no capability
    // over it; the supervisor goes back to its own at once.
    let back = match &join_network {
        Some((ns, own, path)) => {
            setns_net(ns, path, "enter it")?;
            Some((own, path))
        }
        None => None,
    };
    // As root, the namespace is owned by the user the sandbox maps to, not
    // by root, so that the per-user counters it spends are never root's
    // (see `quotas`).
    let owner = if root_mode && !degraded_mode {
        Some(quotas::OwnerSwitch::enter(host_uid)?)
    } else {
        None
    };
    // SAFETY: warden's supervisor is single-threaded up to this point (no
    // runtime or helper thread has been started), which is the contract of
    // `clone_process`.
    // Born in the v2 directory where the kernel can do it (clone3, Linux
    // 5.7); otherwise cloned the old way and moved in below.
    let (cloned, born_in_cgroup) = match &joining.v2 {
        // SAFETY: as above.
        Some(dir) => match unsafe { sys::clone_into_cgroup(flags, dir.as_fd()) } {
            Err(e) => {
                tracing::debug!(error = %e, "clone3 into the cgroup refused; cloning the old way");
                // SAFETY: as above.
                (unsafe { sys::clone_process(flags) }, false)
            }
            done => (done, true),
        },
        // SAFETY: as above.
        None => (unsafe { sys::clone_process(flags) }, false),
    };
    if let (Some(owner), false) = (owner, matches!(cloned, Ok(Forked::Child))) {
        if let Err(e) = owner.leave() {
            if let Ok(Forked::Parent(pid)) = cloned {
                let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
                let _ = nix::sys::wait::waitpid(pid, None);
            }
            return Err(e.into());
        }
    }
    if let (Some((own, path)), false) = (back, matches!(cloned, Ok(Forked::Child))) {
        if let Err(e) = setns_net(own, path, "return to the supervisor's own") {
            if let Ok(Forked::Parent(pid)) = cloned {
                let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
                let _ = nix::sys::wait::waitpid(pid, None);
            }
            return Err(e);
        }
    }
    let child = match cloned {
        Ok(Forked::Child) => init::child_main(plan, go_rd, rep_wr, original),
        Ok(Forked::Parent(pid)) => pid,
        Err(source) => {
            let why = host::userns_blocker().unwrap_or_else(|| match source {
                Errno::EPERM | Errno::EACCES => {
                    "the kernel refused to create a user namespace (a container or security module may forbid it)".into()
                }
                Errno::ENOSPC | Errno::EUSERS => {
                    "the limit of user namespaces (user.max_user_namespaces) is reached".into()
                }
                _ => "clone() with namespace flags failed".into(),
            });
            return Err(JailError::UserNamespaces {
                why,
                lost: host::LOST_WITHOUT_NAMESPACES,
                errno: source,
            });
        }
    };
    drop(go_rd);
    drop(rep_wr);
    drop(joining.v2);
    let mut guard = ChildGuard {
        pid: child,
        cgroup,
        reaped: false,
    };

    let ready = if degraded_mode {
        Ok(())
    } else {
        prepare_child(child, uid, gid, host_uid, host_gid, &plan)
    };
    drop(plan);
    ready?;
    // The values, now that the init exists (and before it builds the root,
    // which holds the authority's certificate).
    let mut terminator = match (secret_plan, &egress) {
        (Some(p), Some(e)) => Some(p.into_terminator(&e.upstream_ca, &e.secret_rules)?),
        _ => None,
    };
    // The child builds its root while the supervisor confines it: both
    // sides work at once, and the child cannot go past its root before the
    // final message below.
    nix::unistd::write(&go_wr, b"g").map_err(sys_err("start the sandbox"))?;
    let flags = match &guard.cgroup {
        Some(cg) => {
            if !born_in_cgroup {
                cg.add_process_v2(child.as_raw())
                    .map_err(|source| JailError::CgroupRequired {
                        what: "the sandbox's limits".into(),
                        source,
                    })?;
            }
            init::FINAL_IN_CGROUP
        }
        None => init::FINAL_RLIMIT_FALLBACK,
    };
    events.emit(&Event::now(
        id,
        EventKind::Created {
            command: spec.command.clone(),
            workspace: workspace.clone(),
            rootless: !root_mode,
            cgroup: guard
                .cgroup
                .as_ref()
                .and_then(|c| c.paths().first().map(|p| p.display().to_string())),
        },
    ));
    // The terminal the init opened once its root was built (`--ask`
    // below needs to know there is one); a child that
    // failed before sends none (and says why on the report pipe).
    if let Some(p) = &tty_parent {
        if let Some(m) = sys::recv_fds(p, 1).unwrap_or_default().pop() {
            if pty::is_terminal(m.as_fd()) {
                pty::copy_window_size(std::io::stdin().as_fd(), m.as_fd());
                master = Some(m);
            }
        }
    }
    drop(tty_parent);
    // The caller serves the sockets the init opened in the sandbox's
    // network namespace; a child that failed before sending them has said
    // why on the report pipe.
    let mut desk = None;
    let mut network = Network {
        egress: None,
        terminator: None,
        asker: None,
        published: Vec::new(),
        sockets: None,
    };
    if let (Some(spec), Some(channel)) = (&egress, &egress_parent) {
        let mut fds = sys::recv_fds(channel, 2).unwrap_or_default().into_iter();
        if let (Some(tcp), Some(dns)) = (fds.next(), fds.next()) {
            // --ask needs a person at a terminal this supervisor relays;
            // without one, names on no list are denied (and the log says
            // why).
            if spec.ask && master.is_some() {
                let (asker, d) = crate::ask::pair().map_err(sys_err("create the --ask pipe"))?;
                desk = Some(d);
                network.asker = Some(std::sync::Arc::new(asker));
            }
            network.egress = Some((tcp, dns));
            network.terminator = terminator.take();
        }
    }
    if let (false, Some(channel)) = (published.is_empty(), egress_parent) {
        network.published = std::mem::take(&mut published);
        network.sockets = Some(socket_source(channel));
    }
    if network.egress.is_some() || !network.published.is_empty() {
        attach.network(network).map_err(JailError::Attach)?;
    }
    // A child that failed to build its root has already said why on the
    // report pipe; its message is the better one, so a failed send is kept
    // for the case that there is none.
    let send_error = send_final(&go_wr, flags).err();
    drop(go_wr);
    if send_error.is_some() {
        let _ = kill(child, Signal::SIGKILL);
    }
    events.emit(&Event::now(
        id,
        EventKind::Started {
            pid: child.as_raw(),
        },
    ));
    if let Some(channel) = service_parent {
        attach.service(channel, child);
    }

    let raw = if master.is_some() {
        RawMode::enable()?
    } else {
        None
    };
    let sfd = SignalFd::with_flags(&handled, SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK)
        .map_err(sys_err("create a signal descriptor"))?;
    let deadline = spec.resources.timeout.map(|t| start + t);
    // Never blocked by the sandbox: a command that does not read its
    // terminal must not stop this loop (and with it the deadline).
    if let Some(m) = &master {
        let _ = nix::fcntl::fcntl(
            m,
            nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK),
        );
    }
    let mut sv = Supervision {
        child,
        rep_rd: Some(rep_rd),
        reports: Vec::new(),
        master,
        stdin_open: true,
        pending_in: Vec::new(),
        timed_out: false,
        wait_status: None,
        usage: None,
        degraded: degraded_mode,
        desk,
    };
    sv.run(&sfd, deadline, &guard)?;
    drop(raw);
    guard.reaped = true;
    drop(private_tmp);

    attach.stopping();
    let stats = guard.cgroup.as_ref().map(|c| c.stats());
    let oom_kills = stats.as_ref().and_then(|s| s.oom_kills).unwrap_or(0);
    let (rusage_rss, rusage_user, rusage_sys) = sv.rusage();
    let peaks = ResourcePeaks {
        max_rss_bytes: stats.as_ref().and_then(|s| s.memory_peak).or(rusage_rss),
        cpu_user_ms: stats.as_ref().and_then(|s| s.cpu_user_ms).or(rusage_user),
        cpu_system_ms: stats.as_ref().and_then(|s| s.cpu_system_ms).or(rusage_sys),
        oom_kills: stats.as_ref().and_then(|s| s.oom_kills),
    };
    if let Some(cg) = guard.cgroup.take() {
        if let Err(e) = cg.remove() {
            eprintln!("warden: {}", chain_str(&e));
        }
    }

    let reports = parse_reports(&sv.reports);
    if let Some(e) = send_error {
        if !reports.iter().any(|r| matches!(r, Report::SetupFailed(_))) {
            return Err(e);
        }
    }
    let outcome = outcome_from(&reports, sv.timed_out, oom_kills, spec, sv.wait_status)?;
    events.emit(&Event::now(
        id,
        EventKind::Exited {
            status: outcome.status,
            reason: outcome.reason,
            signal: outcome.signal,
            duration_ms: start.elapsed().as_millis() as u64,
            peaks,
        },
    ));
    Ok(outcome)
}

/// Fresh sockets of the sandbox's network namespace, asked of its init over
/// `channel`, for published ports.
fn socket_source(channel: OwnedFd) -> warden_egress::publish::SocketSource {
    // The init answers at once; a stuck or gone init must not hold a
    // connection for ever.
    let _ = nix::sys::socket::setsockopt(
        &channel,
        nix::sys::socket::sockopt::ReceiveTimeout,
        &nix::sys::time::TimeVal::new(5, 0),
    );
    let channel = std::sync::Mutex::new(channel);
    std::sync::Arc::new(move || {
        let channel = channel
            .lock()
            .map_err(|_| std::io::Error::other("the socket channel is unusable"))?;
        nix::sys::socket::send(
            channel.as_raw_fd(),
            b"s",
            nix::sys::socket::MsgFlags::empty(),
        )?;
        sys::recv_fds(&channel, 1)?
            .pop()
            .ok_or_else(|| std::io::Error::other("the sandbox's init sent no socket"))
    })
}

/// A directory of its own for a sandbox without a mount namespace (its
/// TMPDIR, and HOME when there is no workspace); removed when dropped.
struct PrivateTmp(PathBuf);

impl PrivateTmp {
    fn create(id: &str, uid: u32, gid: u32) -> Result<PrivateTmp, JailError> {
        use std::os::unix::fs::DirBuilderExt;
        let path = std::env::temp_dir().join(format!("warden-{id}"));
        let err = |source| JailError::PrivateTmp {
            path: path.clone(),
            source,
        };
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&path)
            .map_err(err)?;
        let dir = PrivateTmp(path.clone());
        if host::is_root() {
            std::os::unix::fs::chown(&path, Some(uid), Some(gid)).map_err(err)?;
        }
        Ok(dir)
    }
}

impl Drop for PrivateTmp {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// What a sandbox without a mount namespace may read: the host's system
/// directories, `/etc` without its secrets, `/proc` and `/dev`.
fn degraded_read_paths() -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = crate::mounts::SYSTEM_DIRS
        .iter()
        .filter(|d| **d != "/etc")
        .map(PathBuf::from)
        .filter(|p| p.exists())
        .collect();
    out.push(PathBuf::from("/proc"));
    out.push(PathBuf::from("/dev"));
    // Landlock grants by hierarchy, so /etc is granted entry by entry,
    // leaving out the secrets the mount namespace would have covered.
    if let Ok(entries) = std::fs::read_dir("/etc") {
        for e in entries.flatten() {
            let name = e.file_name();
            let name = name.to_string_lossy();
            let hidden = crate::mounts::HIDDEN_IN_ETC
                .iter()
                .any(|(h, _)| *h == name || h.starts_with(&format!("{name}/")));
            if !hidden {
                out.push(e.path());
            }
        }
    }
    // Directories that hold a hidden entry are granted entry by entry too.
    for dir in ["ssh", "ssl", "security"] {
        if let Ok(entries) = std::fs::read_dir(Path::new("/etc").join(dir)) {
            for e in entries.flatten() {
                let rel = format!("{dir}/{}", e.file_name().to_string_lossy());
                if !crate::mounts::HIDDEN_IN_ETC.iter().any(|(h, _)| *h == rel) {
                    out.push(e.path());
                }
            }
        }
    }
    out
}

/// Kill every process the supervisor adopted as subreaper (what the
/// sandbox left behind), until none is left.
fn kill_adopted_descendants() {
    let me = std::process::id() as i32;
    // Bounded: a process stuck in the kernel cannot keep warden forever.
    for _ in 0..2000 {
        let children = children_of(me);
        for pid in &children {
            let _ = kill(Pid::from_raw(*pid), Signal::SIGKILL);
        }
        while let Ok(status) =
            nix::sys::wait::waitpid(None, Some(nix::sys::wait::WaitPidFlag::WNOHANG))
        {
            if status == nix::sys::wait::WaitStatus::StillAlive {
                break;
            }
        }
        if children.is_empty() {
            return;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// PIDs whose parent is `parent`, from /proc/PID/stat.
fn children_of(parent: i32) -> Vec<i32> {
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in dir.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        // The command name may hold spaces and parentheses: fields start
        // after the last ')'.
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<i32>().ok());
        if ppid == Some(parent) {
            out.push(pid);
        }
    }
    out
}

/// Create the sandbox's cgroup, or decide to run without one: refused when
/// a limit was asked for explicitly (unless degraded runs are allowed),
/// otherwise said loudly.
fn confine(
    spec: &SandboxSpec,
    id: &str,
    limits: &Limits,
    events: &mut dyn EventSink,
) -> Result<Option<Cgroup>, JailError> {
    let res = &spec.resources;
    match Cgroup::create(id, limits) {
        Ok(cg) => Ok(Some(cg)),
        Err(source) => {
            let mut explicit = Vec::new();
            if res.memory.explicit {
                explicit.push("--memory");
            }
            if res.pids.explicit {
                explicit.push("--pids");
            }
            if res.cpus.is_some() {
                explicit.push("--cpus");
            }
            if !explicit.is_empty() && !spec.allow_degraded {
                return Err(JailError::CgroupRequired {
                    what: explicit.join(", "),
                    source,
                });
            }
            let lost = format!(
                "cgroups are not usable ({}): processes are limited by RLIMIT_NPROC={} (counted per user, host-wide), memory by RLIMIT_DATA={} per process, not for the sandbox as a whole{}",
                chain_str(&source),
                res.pids.value,
                bytes(res.memory.value),
                if res.cpus.is_some() {
                    ", CPU is not limited"
                } else {
                    ""
                },
            );
            degraded(events, id, "resources", &lost);
            Ok(None)
        }
    }
}

/// The final message to the child: flags, and a trailer that proves the
/// message complete.
fn send_final(go: &OwnedFd, flags: u8) -> Result<(), JailError> {
    let mut msg = [0u8; 9];
    msg[0] = flags;
    msg[1..].copy_from_slice(init::FINAL_TRAILER);
    write_all(go.as_fd(), &msg).map_err(sys_err("let the sandbox start"))
}

fn outcome_from(
    reports: &[Report],
    timed_out: bool,
    oom_kills: u64,
    spec: &SandboxSpec,
    init_status: Option<i32>,
) -> Result<Outcome, JailError> {
    if timed_out {
        let t = spec.resources.timeout.unwrap_or_default();
        return Ok(Outcome {
            status: 124,
            reason: ExitReason::Timeout,
            signal: None,
            message: Some(format!(
                "the sandbox reached its --timeout of {} and was killed",
                humanize(t)
            )),
        });
    }
    for r in reports {
        if let Report::SetupFailed(m) = r {
            return Err(JailError::Setup(m.clone()));
        }
    }
    if let Some(errno) = reports.iter().find_map(|r| match r {
        Report::ExecFailed(e) => Some(*e),
        _ => None,
    }) {
        let cmd = spec.command.first().cloned().unwrap_or_default();
        let (status, what) = if errno == libc::ENOENT {
            (127, "command not found in the sandbox".to_string())
        } else {
            (
                126,
                format!("cannot execute: {}", Errno::from_raw(errno).desc()),
            )
        };
        return Ok(Outcome {
            status,
            reason: ExitReason::ExecFailed,
            signal: None,
            message: Some(format!("{cmd}: {what}")),
        });
    }
    let memory = spec.resources.memory.value;
    for r in reports {
        match r {
            Report::Exited(code) if *code == 128 + libc::SIGKILL && oom_kills > 0 => {
                // A shell reports its child's OOM kill as 137.
                return Ok(Outcome {
                    status: *code,
                    reason: ExitReason::OutOfMemory,
                    signal: None,
                    message: Some(format!(
                        "the command exceeded the sandbox's memory limit of {} and was killed",
                        bytes(memory)
                    )),
                });
            }
            Report::Exited(code) => {
                return Ok(Outcome {
                    status: *code,
                    reason: ExitReason::Exited,
                    signal: None,
                    message: (oom_kills > 0).then(|| {
                        format!(
                        "a process of the sandbox was killed for exceeding the memory limit of {}",
                        bytes(memory)
                    )
                    }),
                })
            }
            Report::Signaled(sig) => {
                if *sig == libc::SIGKILL && oom_kills > 0 {
                    return Ok(Outcome {
                        status: 137,
                        reason: ExitReason::OutOfMemory,
                        signal: Some(*sig),
                        message: Some(format!(
                            "the command exceeded the sandbox's memory limit of {} and was killed",
                            bytes(memory)
                        )),
                    });
                }
                return Ok(Outcome {
                    status: 128 + sig,
                    reason: ExitReason::Signaled,
                    signal: Some(*sig),
                    message: None,
                });
            }
            _ => {}
        }
    }
    if oom_kills > 0 {
        return Ok(Outcome {
            status: 137,
            reason: ExitReason::OutOfMemory,
            signal: Some(libc::SIGKILL),
            message: Some(format!(
                "the sandbox exceeded its memory limit of {} and was killed",
                bytes(memory)
            )),
        });
    }
    Err(JailError::InitDied(match init_status {
        Some(s) if s < 0 => format!("killed by signal {}", -s),
        Some(s) => format!("exit status {s}"),
        None => "unknown status".into(),
    }))
}

fn humanize(d: Duration) -> String {
    let ms = d.as_millis();
    if !ms.is_multiple_of(1000) {
        format!("{ms}ms")
    } else {
        format!("{}s", ms / 1000)
    }
}

fn bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "K", "M", "G", "T"];
    let mut v = b;
    let mut i = 0;
    while v >= 1024 && v.is_multiple_of(1024) && i < UNITS.len() - 1 {
        v /= 1024;
        i += 1;
    }
    format!("{v}{}", UNITS[i])
}

/// Write the child's ID maps, put it in the cgroup, and make its writable
/// binds idmapped (root mode), before it may go on.
fn prepare_child(
    child: Pid,
    uid: u32,
    gid: u32,
    host_uid: u32,
    host_gid: u32,
    plan: &ChildPlan,
) -> Result<(), JailError> {
    let proc_dir = PathBuf::from(format!("/proc/{}", child.as_raw()));
    let write = |name: &str, content: String| -> Result<(), JailError> {
        let path = proc_dir.join(name);
        std::fs::write(&path, content).map_err(|source| JailError::IdMap { path, source })
    };
    if !host::is_root() {
        // An unprivileged user may write a gid map only after giving up
        // setgroups(2) for the namespace.
        write("setgroups", "deny".into())?;
    }
    write("uid_map", format!("{uid} {host_uid} 1\n")).map_err(annotate_userns)?;
    write("gid_map", format!("{gid} {host_gid} 1\n")).map_err(annotate_userns)?;
    let idmapped: Vec<_> = plan
        .root
        .binds
        .iter()
        .filter(|b| b.idmap)
        .filter_map(|b| b.tree.as_ref().map(|fd| (b, fd)))
        .collect();
    if !idmapped.is_empty() {
        let userns =
            std::fs::File::open(proc_dir.join("ns/user")).map_err(|source| JailError::IdMap {
                path: proc_dir.join("ns/user"),
                source,
            })?;
        for (b, fd) in idmapped {
            let done = sys::idmap_tree(fd.as_fd(), userns.as_fd());
            if !b.writable && matches!(done, Err(Errno::EINVAL | Errno::EOPNOTSUPP)) {
                // A file system without idmapped mounts: a read-only bind
                // is still shown, with its owners as the host has them
                // (the tree is unchanged by the refused attribute).
                continue;
            }
            done.map_err(|source| match source {
                Errno::EINVAL | Errno::EOPNOTSUPP => JailError::IdmapUnsupported {
                    path: b.src.clone(),
                    source,
                },
                _ => JailError::Idmap {
                    path: b.src.clone(),
                    source,
                },
            })?;
        }
    }
    Ok(())
}

fn annotate_userns(e: JailError) -> JailError {
    match (&e, host::userns_blocker()) {
        (JailError::IdMap { source, .. }, Some(why)) => JailError::UserNamespaces {
            why,
            lost: host::LOST_WITHOUT_NAMESPACES,
            errno: Errno::from_raw(source.raw_os_error().unwrap_or(libc::EPERM)),
        },
        _ => e,
    }
}

/// Restores the signal mask warden started with.
struct MaskGuard(SigSet);

impl Drop for MaskGuard {
    fn drop(&mut self) {
        let _ = nix::sys::signal::pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&self.0), None);
    }
}

/// Kills and reaps the sandbox and removes its cgroup if the supervisor
/// leaves early (an error, a panic): no sandbox process outlives warden.
struct ChildGuard {
    pid: Pid,
    cgroup: Option<Cgroup>,
    reaped: bool,
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if !self.reaped {
            let _ = kill(self.pid, Signal::SIGKILL);
            let _ = nix::sys::wait::waitpid(self.pid, None);
        }
        if let Some(cg) = self.cgroup.take() {
            let _ = cg.kill_all();
            let _ = cg.remove();
        }
    }
}

struct Supervision {
    child: Pid,
    rep_rd: Option<OwnedFd>,
    reports: Vec<u8>,
    master: Option<OwnedFd>,
    stdin_open: bool,
    /// Typed input the sandbox's terminal has not taken yet; stdin is not
    /// read while it waits (bounded by one read).
    pending_in: Vec<u8>,
    timed_out: bool,
    /// The init's wait status: exit code, or minus the signal number.
    wait_status: Option<i32>,
    /// Peak RSS in bytes, user and system CPU in ms, of the whole tree.
    usage: Option<(u64, u64, u64)>,
    /// No PID namespace: orphans are this supervisor's to kill.
    degraded: bool,
    /// `--ask`: the proxy's questions, answered from the terminal.
    desk: Option<crate::ask::Desk>,
}

const MAX_REPORT_BYTES: usize = 64 * 1024;

impl Supervision {
    fn run(
        &mut self,
        sfd: &SignalFd,
        deadline: Option<Instant>,
        guard: &ChildGuard,
    ) -> Result<(), JailError> {
        let mut rusage_done = false;
        while !rusage_done {
            let timeout = match deadline {
                Some(d) if !self.timed_out => {
                    let left = d.saturating_duration_since(Instant::now());
                    PollTimeout::try_from(left.as_millis().min(i32::MAX as u128) as i32)
                        .unwrap_or(PollTimeout::MAX)
                }
                _ => PollTimeout::NONE,
            };
            let stdin = std::io::stdin();
            let mut fds = vec![PollFd::new(sfd.as_fd(), PollFlags::POLLIN)];
            let rep_idx = self.rep_rd.as_ref().map(|r| {
                fds.push(PollFd::new(r.as_fd(), PollFlags::POLLIN));
                fds.len() - 1
            });
            // While --ask has a question on screen, the sandbox's output
            // waits: the question stays the last thing the person sees.
            let asking = self.desk.as_ref().is_some_and(|d| d.is_asking());
            let master_idx = self.master.as_ref().filter(|_| !asking).map(|m| {
                fds.push(PollFd::new(m.as_fd(), PollFlags::POLLIN));
                fds.len() - 1
            });
            let waiting = !self.pending_in.is_empty();
            let stdin_idx = (self.master.is_some() && self.stdin_open && !waiting).then(|| {
                fds.push(PollFd::new(stdin.as_fd(), PollFlags::POLLIN));
                fds.len() - 1
            });
            let room_idx = self.master.as_ref().filter(|_| waiting).map(|m| {
                fds.push(PollFd::new(m.as_fd(), PollFlags::POLLOUT));
                fds.len() - 1
            });
            let desk_idx = self.desk.as_ref().map(|d| {
                fds.push(PollFd::new(d.fd(), PollFlags::POLLIN));
                fds.len() - 1
            });
            // An open question is checked for its deadline every second.
            let timeout = if asking && (timeout == PollTimeout::NONE || i32::from(timeout) > 1000) {
                PollTimeout::from(1000u16)
            } else {
                timeout
            };
            let n = match poll(&mut fds, timeout) {
                Ok(n) => n,
                Err(Errno::EINTR) => continue,
                Err(e) => {
                    return Err(JailError::Sys {
                        what: "wait for the sandbox",
                        source: e,
                    })
                }
            };
            let ready = |i: Option<usize>| {
                i.and_then(|i| fds.get(i))
                    .and_then(|f| f.revents())
                    .is_some_and(|r| !r.is_empty())
            };
            let (sig_ready, rep_ready, master_ready, stdin_ready, desk_ready) = (
                ready(Some(0)),
                ready(rep_idx),
                ready(master_idx),
                ready(stdin_idx) || ready(room_idx),
                ready(desk_idx),
            );
            drop(fds);
            if let Some(out) = self.desk.as_mut().and_then(|d| d.tick()) {
                let _ = write_all(std::io::stderr().as_fd(), out.as_bytes());
            }
            if n == 0 {
                if let Some(d) = deadline {
                    if Instant::now() >= d && !self.timed_out {
                        self.timed_out = true;
                        let _ = kill(self.child, Signal::SIGKILL);
                        if let Some(cg) = &guard.cgroup {
                            let _ = cg.kill_all();
                        }
                    }
                }
                continue;
            }
            if rep_ready {
                self.read_reports();
            }
            if master_ready {
                self.relay_master();
            }
            if desk_ready {
                if let Some(prompt) = self.desk.as_mut().and_then(|d| d.on_wake()) {
                    let _ = write_all(std::io::stderr().as_fd(), prompt.as_bytes());
                }
            }
            if stdin_ready {
                if self.pending_in.is_empty() {
                    self.relay_stdin();
                }
                self.flush_input();
            }
            if sig_ready {
                while let Ok(Some(info)) = sfd.read_signal() {
                    let signo = info.ssi_signo as i32;
                    if signo == libc::SIGCHLD {
                        if self.try_reap() {
                            rusage_done = true;
                        }
                    } else if signo == libc::SIGWINCH {
                        if let Some(m) = &self.master {
                            pty::copy_window_size(std::io::stdin().as_fd(), m.as_fd());
                        }
                    } else if info.ssi_code != libc::SI_KERNEL {
                        // kill(2) from outside (a supervisor of warden, a
                        // person): pass it on. Terminal signals already
                        // reached the command's process group.
                        if let Ok(sig) = Signal::try_from(signo) {
                            let _ = kill(self.child, sig);
                        }
                    }
                }
            }
        }
        if self.degraded {
            // Without a PID namespace, processes the sandbox left behind
            // were adopted by this supervisor: they die before anything
            // else, so that none can hold the terminal or a pipe open.
            kill_adopted_descendants();
        }
        // Every process of the sandbox is gone; drain what is left, without
        // blocking and for a bounded time, whatever holds the other ends.
        let drain_until = Instant::now() + Duration::from_millis(500);
        for fd in [self.rep_rd.as_ref(), self.master.as_ref()]
            .into_iter()
            .flatten()
        {
            let _ = nix::fcntl::fcntl(
                fd,
                nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK),
            );
        }
        while self.rep_rd.is_some() && Instant::now() < drain_until {
            if !self.read_reports() {
                break;
            }
        }
        while self.master.is_some() && Instant::now() < drain_until {
            if !self.relay_master() {
                break;
            }
        }
        Ok(())
    }

    /// Read what the init reported; false when nothing more is to be had
    /// now (end of file, or nothing waiting on a non-blocking pipe).
    fn read_reports(&mut self) -> bool {
        let Some(fd) = &self.rep_rd else {
            return false;
        };
        let mut buf = [0u8; 4096];
        match nix::unistd::read(fd, &mut buf) {
            Ok(0) | Err(Errno::EBADF) | Err(Errno::EIO) => {
                self.rep_rd = None;
                false
            }
            Ok(n) => {
                if self.reports.len() < MAX_REPORT_BYTES {
                    self.reports.extend_from_slice(&buf[..n]);
                }
                true
            }
            Err(Errno::EINTR) => true,
            Err(Errno::EAGAIN) => false,
            Err(_) => {
                self.rep_rd = None;
                false
            }
        }
    }

    /// Copy what the command wrote to its terminal; false when it is closed.
    fn relay_master(&mut self) -> bool {
        let Some(m) = &self.master else { return false };
        let mut buf = [0u8; 16384];
        match nix::unistd::read(m, &mut buf) {
            Ok(0) | Err(Errno::EIO) => {
                self.master = None;
                false
            }
            Ok(n) => {
                let _ = write_all(std::io::stdout().as_fd(), &buf[..n]);
                true
            }
            Err(Errno::EINTR) => true,
            Err(Errno::EAGAIN) => false,
            Err(_) => {
                self.master = None;
                false
            }
        }
    }

    /// Pass what is typed to the sandbox's terminal, or, while `--ask` has
    /// a question on screen, take it as the answer.
    fn relay_stdin(&mut self) {
        if self.master.is_none() {
            return;
        }
        let mut buf = [0u8; 4096];
        let ended = match nix::unistd::read(std::io::stdin().as_fd(), &mut buf) {
            Ok(0) => true,
            Ok(n) => {
                match self.desk.as_mut().filter(|d| d.is_asking()) {
                    Some(desk) => {
                        if let Some(out) = desk.on_input(&buf[..n]) {
                            let _ = write_all(std::io::stderr().as_fd(), out.as_bytes());
                        }
                    }
                    None => self.pending_in.extend_from_slice(&buf[..n]),
                }
                false
            }
            Err(Errno::EINTR) | Err(Errno::EAGAIN) => false,
            Err(_) => true,
        };
        if ended {
            self.stdin_open = false;
            // Nobody is left to answer --ask: its questions end now.
            if let Some(out) = self.desk.as_mut().and_then(|d| d.input_ended()) {
                let _ = write_all(std::io::stderr().as_fd(), out.as_bytes());
            }
        }
    }

    /// Give the sandbox's terminal what it has room for of the typed input.
    fn flush_input(&mut self) {
        let Some(m) = &self.master else {
            self.pending_in.clear();
            return;
        };
        while !self.pending_in.is_empty() {
            match nix::unistd::write(m, &self.pending_in) {
                Ok(k) => {
                    self.pending_in.drain(..k);
                }
                Err(Errno::EINTR) => continue,
                Err(Errno::EAGAIN) => return,
                Err(_) => {
                    self.pending_in.clear();
                    return;
                }
            }
        }
    }

    /// Reap the init if it ended; true when it did.
    fn try_reap(&mut self) -> bool {
        let mut status: libc::c_int = 0;
        let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
        // SAFETY: wait4 writes an int status and one `rusage` into valid,
        // properly aligned memory that we own.
        let rc = unsafe {
            libc::wait4(
                self.child.as_raw(),
                &mut status,
                libc::WNOHANG,
                usage.as_mut_ptr(),
            )
        };
        if rc == self.child.as_raw() {
            // SAFETY: wait4 returned the child's PID, so it filled `usage`
            // (and it was zero-initialised before in any case).
            let usage = unsafe { usage.assume_init() };
            self.wait_status = Some(if libc::WIFSIGNALED(status) {
                -libc::WTERMSIG(status)
            } else {
                libc::WEXITSTATUS(status)
            });
            self.usage = Some(usage_triplet(&usage));
            return true;
        }
        rc == -1 && Errno::last() == Errno::ECHILD
    }

    fn rusage(&self) -> (Option<u64>, Option<u64>, Option<u64>) {
        self.usage
            .map_or((None, None, None), |(a, b, c)| (Some(a), Some(b), Some(c)))
    }
}

fn usage_triplet(u: &libc::rusage) -> (u64, u64, u64) {
    let ms = |t: libc::timeval| (t.tv_sec as u64) * 1000 + (t.tv_usec as u64) / 1000;
    ((u.ru_maxrss as u64) * 1024, ms(u.ru_utime), ms(u.ru_stime))
}

fn write_all(fd: std::os::fd::BorrowedFd<'_>, mut data: &[u8]) -> nix::Result<()> {
    while !data.is_empty() {
        match nix::unistd::write(fd, data) {
            Ok(n) => data = &data[n..],
            Err(Errno::EINTR) | Err(Errno::EAGAIN) => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
