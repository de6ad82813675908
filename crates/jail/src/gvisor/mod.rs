//! The gVisor backend: a sandbox whose processes run under runsc, gVisor's
//! kernel in user space, which answers every system call itself (with the
//! ptrace platform, [`runsc::PLATFORM`]), so the host's kernel sees only
//! gVisor's own small set of calls.
//!
//! [`run`] has the process backend's contract ([`crate::run`]): the same
//! spec, the same events, exit statuses and, for a long-lived sandbox, a
//! spawn channel handed to [`Attach::service`], served on the host by
//! [`serve`] with `runsc exec`. The file tree is the process backend's,
//! as an OCI bundle ([`bundle`]); the network is a namespace of warden's
//! own wired to the same egress proxy ([`net`]), in which runsc runs with
//! the host's network stack; the secrets' values stay on the host with
//! the proxy; runsc and everything it starts sit in one cgroup of the
//! spec's limits. What gVisor cannot give here is said in `docs/gvisor.md`.

pub mod bundle;
mod ended;
mod exits;
mod hold;
mod kept;
mod leftovers;
mod limits;
pub(crate) mod modes;
mod mount;
pub mod net;
pub mod runsc;
mod serve;
pub mod shim;
mod signal;

use crate::secrets::{SecretPlan, TrustFiles};
use crate::{Attach, Network, Outcome, Program};
use ended::{end_runsc, outcome_of, wait_first, Ended};
pub use limits::cgroup_memory;
use limits::{confine, release};
use runsc::Runsc;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use warden_audit::{Event, EventKind, EventSink};
use warden_policy::{Home, NetworkSpec, SandboxSpec};

/// How long a long-lived sandbox may take to be running.
const START_LIMIT: Duration = Duration::from_secs(60);

/// Why a gVisor sandbox could not run.
#[derive(Debug, thiserror::Error)]
pub enum GvisorError {
    #[error(
        "`isolation gvisor` needs runsc, which is not on this host: {}",
        runsc::INSTALL
    )]
    Missing,
    #[error(
        "{0} is not supported with `isolation gvisor` yet; leave it out or use `isolation process`"
    )]
    Unsupported(&'static str),
    #[error("{0} with `isolation gvisor` needs warden to run as root here: runsc, run by another user, cannot enter the network namespace warden wires to its proxy; run as root, or use `isolation process`")]
    Rootless(&'static str),
    #[error("warden has no state directory for its gVisor sandboxes: set WARDEN_STATE_DIR")]
    NoStateDir,
    #[error("cannot make {path} for the gVisor sandbox")]
    Dir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Bundle(#[from] bundle::BundleError),
    #[error(transparent)]
    Net(#[from] net::NetError),
    #[error(transparent)]
    Secrets(#[from] crate::secrets::SecretsError),
    #[error("cannot publish port {port} on the host's 127.0.0.1 (is it in use? pick another HOSTPORT in `egress.publish HOSTPORT:PORT`)")]
    Publish {
        port: u16,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot confine runsc in a cgroup ({0}): run as root or in a delegated cgroup v2 subtree, or give `allow_degraded`")]
    Cgroup(String),
    #[error("cannot serve the sandbox's network: {0}")]
    Serve(String),
    #[error("nothing was started: the run cannot be recorded ({0})")]
    Unrecorded(String),
    #[error("cannot start runsc {path}")]
    Start {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("runsc could not start the sandbox: {0}")]
    Failed(String),
    #[error("cannot mount the workspace's overlay for runsc: {0}")]
    Overlay(String),
    #[error("cannot prepare the workspace for runsc")]
    Mount(#[from] mount::MountError),
    /// The workspace is not the directory the sandbox was created over
    /// (the process backend's refusal and reason code, `workspace_moved`),
    /// or goes through a link, or is missing.
    #[error(transparent)]
    Workspace(crate::JailError),
    #[error(transparent)]
    Kept(#[from] kept::KeptStateError),
    /// Rootless, runsc's file server would write a kept layer or home
    /// straight onto the host's disk, past the sandbox's disk budget.
    #[error("a named sandbox's kept workspace layer or home with `isolation gvisor` needs warden to run as root here: rootless, nothing holds what runsc writes there within the sandbox's disk budget (`resources.disk`, half its memory unless given); run as root, or use `isolation process`")]
    DiskRootless,
    #[error("cannot give the sandbox's kept home to its user (nobody)")]
    Home(#[source] std::io::Error),
    #[error("cannot create the spawn channel")]
    Channel(#[source] nix::errno::Errno),
    /// Every later process of a long-lived sandbox starts through the
    /// shim, which gives it the first process's filter: none runs without.
    #[error("{} is not installed beside warden: a long-lived gVisor sandbox's commands start through it", shim::BINARY)]
    NoShim,
}

static RUNS: AtomicU64 = AtomicU64::new(0);

/// Run `spec` under gVisor, as [`crate::run`] runs it in a process
/// sandbox: returns when every process of the sandbox is gone.
pub fn run(
    spec: &SandboxSpec,
    id: &str,
    program: Program,
    events: &mut dyn EventSink,
    attach: &mut dyn Attach,
) -> Result<Outcome, GvisorError> {
    let start = Instant::now();
    let path = runsc::find().ok_or(GvisorError::Missing)?;
    let shim = shim_for(program)?;
    let root = crate::host::is_root();
    let workspace = check(spec, root)?;
    let with_egress = matches!(spec.network, NetworkSpec::Egress(_));
    if !root && with_egress {
        return Err(GvisorError::Rootless("egress"));
    }
    if !root && !spec.publish.is_empty() {
        return Err(GvisorError::Rootless("a published port"));
    }
    // Secrets: the sandbox's environment holds placeholders; the values
    // are read on the host and reach only the secret proxy, which runs here.
    let (secret_plan, own) = SecretPlan::for_spec(spec, attach)?;
    let spec = &own;
    let dir = Dir::make(id)?;
    let runsc = Arc::new(Runsc {
        path,
        root: dir.0.join("runsc"),
        id: container_id(id),
        log: dir.0.join("runsc.log"),
        host_network: root,
        rootless: !root,
    });
    let published = publish(spec)?;
    // As root, a network namespace of warden's own (loopback only, or
    // wired to the proxy); rootless, gVisor's own stack with loopback only.
    let ns = if root {
        Some(net::make(with_egress)?)
    } else {
        None
    };
    let cgroup = confine(spec, id, &container_id(id), events).map_err(GvisorError::Cgroup)?;
    let mut trust = Vec::new();
    if let (Some(plan), NetworkSpec::Egress(_)) = (secret_plan, &spec.network) {
        let files = plan.trust_files()?;
        plan.hand_over(attach)?;
        trust = write_trust(&dir.0, files)?;
    }
    events.emit(&Event::now(
        id,
        EventKind::Created {
            command: spec.command.clone(),
            workspace: spec.filesystem.workspace.clone(),
            rootless: !root,
            cgroup: cgroup
                .as_ref()
                .and_then(|c| c.paths().first().map(|p| p.display().to_string())),
        },
    ));
    let (netns, egress, sockets) = match ns {
        Some(n) => (
            Some(n.namespace.clone()),
            n.egress,
            Some(net::socket_source(n.namespace)),
        ),
        None => (None, None, None),
    };
    if egress.is_some() || !published.is_empty() {
        attach
            .network(Network {
                egress,
                // runsc's first process has the person's terminal itself:
                // `--ask` has no desk here.
                terminal: false,
                published,
                sockets,
                publish_to: std::net::Ipv4Addr::LOCALHOST,
            })
            .map_err(GvisorError::Serve)?;
    }
    if let Some(why) = events.failure() {
        return Err(GvisorError::Unrecorded(why));
    }
    let (uid, gid, shown, mount, kept) =
        workspace_ids_and_mount(spec, &workspace, root, &dir.0, cgroup.as_ref())?;
    // The kept home is shown from the tmpfs of the disk budget.
    let with_home;
    let spec = match kept.as_ref().and_then(|k| k.home()) {
        Some(_) => {
            let mut s = spec.clone();
            s.filesystem.home = warden_policy::Home::Dir(dir.0.join(HOME_VIEW));
            with_home = s;
            &with_home
        }
        None => spec,
    };
    let terminal = spec.terminal == warden_policy::Terminal::Pty
        && nix::unistd::isatty(std::io::stdin()).unwrap_or(false);
    let layout = bundle::Layout {
        spec,
        workspace: shown.as_deref(),
        workspace_named: workspace.named(),
        uid,
        gid,
        netns: netns
            .as_ref()
            .map(|n| PathBuf::from(format!("/proc/{}/fd/{}", std::process::id(), n.as_raw_fd()))),
        trust,
        args: first_args(spec, program, shim.as_ref()),
        terminal: terminal && program == Program::Command,
        cover_etc: root,
        shim: shim.as_ref(),
    };
    let process = bundle::write(&dir.0, &layout)?;
    let in_ns = mount.is_some();
    // A one-shot command's end told from runsc's own death (`exits`).
    let exits = (program == Program::Command).then(|| exits::ExitWatch::start(&runsc.root));
    let mut first = start_runsc(
        &runsc,
        &dir.0,
        program,
        cgroup.as_ref(),
        mount,
        spec.resources.cpus,
    )?;
    events.emit(&Event::now(
        id,
        EventKind::Started {
            pid: first.id() as i32,
        },
    ));
    let deadline = spec.resources.timeout.map(|t| Instant::now() + t);
    let ended = match program {
        Program::Command => wait_first(&mut first, deadline),
        Program::Service => {
            // The workspace as runsc's file server sees it: an overlay is
            // reached through runsc's own mount namespace.
            let files_root = match (&shown, &workspace) {
                (Some(m), _) if in_ns => open_path(
                    &Path::new(&format!("/proc/{}/root", first.id()))
                        .join(m.strip_prefix("/").unwrap_or(m)),
                ),
                // The directory opened and checked, never its path again.
                (Some(_), Workspace::Direct(w)) => w.dir.try_clone().ok(),
                (Some(w), _) => open_path(w),
                (None, _) => None,
            }
            .map(Arc::new);
            let ctx = Serving {
                runsc: &runsc,
                dir: &dir.0,
                process,
                files_root,
                file_ids: root.then_some((uid, gid)),
                netns,
                shim: shim.clone().ok_or(GvisorError::NoShim)?,
            };
            service(ctx, &mut first, deadline, attach)?
        }
    };
    let (status, died) = end_runsc(&runsc, &mut first, exits.flatten(), cgroup.as_ref());
    // Every process of runsc is gone: the kept state goes back to disk.
    let saved = kept.map(kept::Kept::save).transpose();
    attach.stopping();
    let peaks = release(cgroup);
    saved?;
    let outcome = outcome_of(ended, status, spec, &runsc, died).map_err(GvisorError::Failed)?;
    outcome.record(events, id, start, peaks);
    Ok(outcome)
}

/// The first process: the spec's command, or (a long-lived sandbox) the
/// shim waiting for the processes handed to it (orphans of later ones,
/// which would otherwise stay zombies counting against `--pids`), each
/// exec being a `runsc exec`.
fn first_args(spec: &SandboxSpec, program: Program, shim: Option<&shim::Shim>) -> Vec<String> {
    match (program, shim) {
        (Program::Command, _) => spec.command.clone(),
        (Program::Service, Some(shim)) => shim.reaper_args(),
        (Program::Service, None) => vec!["sleep".into(), "infinity".into()],
    }
}

/// The shim a long-lived sandbox's later processes start through: none
/// runs without it.
fn shim_for(program: Program) -> Result<Option<shim::Shim>, GvisorError> {
    match program {
        Program::Service => shim::Shim::find().map(Some).ok_or(GvisorError::NoShim),
        Program::Command => Ok(None),
    }
}

/// The sandbox's IDs ([`ids`]), the workspace as runsc is shown it, and
/// what runsc's child mounts there (an overlay, a view).
///
/// runsc is never shown the workspace's path: it would open it itself,
/// later, and a directory swapped in at that path since it was checked
/// would be the sandbox's. As root, a view of the directory opened (and
/// checked) is attached at a point of warden's own state in runsc's own
/// mount namespace; rootless, runsc is shown this process's descriptor of
/// it (`/proc/PID/fd/N`, as the network namespace is).
#[allow(clippy::type_complexity)]
fn workspace_ids_and_mount(
    spec: &SandboxSpec,
    workspace: &Workspace,
    root: bool,
    state: &Path,
    cgroup: Option<&crate::cgroup::Cgroup>,
) -> Result<
    (
        u32,
        u32,
        Option<PathBuf>,
        Option<mount::WorkspaceMount>,
        Option<kept::Kept>,
    ),
    GvisorError,
> {
    let merged = state.join("workspace");
    let owner = match workspace {
        Workspace::None => None,
        Workspace::Direct(w) | Workspace::Overlay { lower: w, .. } => Some(w.owner),
    };
    let (uid, gid, swap) = ids(owner, root);
    // As root, what is kept (the overlay's layer, the home) is held in a
    // tmpfs of the disk budget while runsc runs (`kept`); rootless, a
    // budget is refused in `check`.
    let kept = if root {
        give_home(spec, uid, gid)?;
        let upper = match workspace {
            Workspace::Overlay { dirs, .. } => Some(dirs.upper.as_path()),
            _ => None,
        };
        kept::Kept::make(spec, upper, cgroup)?
    } else {
        None
    };
    let (shown, mut mount) = match workspace {
        Workspace::None => (None, None),
        Workspace::Direct(w) if !root => (
            Some(PathBuf::from(format!(
                "/proc/{}/fd/{}",
                std::process::id(),
                w.dir.as_raw_fd()
            ))),
            None,
        ),
        Workspace::Direct(w) => {
            mkdir(&merged)?;
            let m = mount::WorkspaceMount::attached(&merged, (&w.path, &w.dir), swap.as_ref())?;
            (Some(merged.clone()), Some(m))
        }
        Workspace::Overlay { lower, dirs } => {
            mkdir(&merged)?;
            let m = mount::WorkspaceMount::overlay(
                &merged,
                (&lower.path, &lower.dir),
                dirs,
                swap.as_ref(),
                state,
                kept.as_ref().map(kept::Kept::root),
            )?;
            (Some(merged.clone()), Some(m))
        }
    };
    if let Some(home) = kept.as_ref().and_then(kept::Kept::home) {
        mount
            .get_or_insert_with(mount::WorkspaceMount::views_only)
            .also(&home, &state.join(HOME_VIEW))?;
    }
    Ok((uid, gid, shown, mount, kept))
}

/// Where runsc's child attaches the kept home of the disk budget's tmpfs,
/// in the sandbox's directory of warden's state.
const HOME_VIEW: &str = "home-view";

/// The workspace as the sandbox sees it.
enum Workspace {
    None,
    /// A directory bound as it is.
    Direct(Opened),
    /// A reviewable workspace: an overlay of the project (lower) and the
    /// sandbox's layer, mounted by the runsc it serves, in a mount
    /// namespace of runsc's own (root only), at the bundle's `workspace`.
    Overlay {
        lower: Opened,
        dirs: warden_policy::OverlayDirs,
    },
}

impl Workspace {
    /// The workspace's path as named, where warden's hidden directories
    /// are looked for.
    fn named(&self) -> Option<&Path> {
        match self {
            Workspace::None => None,
            Workspace::Direct(w) | Workspace::Overlay { lower: w, .. } => Some(&w.path),
        }
    }
}

/// A workspace directory opened once, through no link, and checked to
/// be the one the sandbox was created over ([`crate::open_workspace`]):
/// what runsc is shown is this descriptor's directory, never its path's.
struct Opened {
    path: PathBuf,
    dir: OwnedFd,
    owner: (u32, u32),
}

fn opened(path: &Path, expected: Option<(u64, u64)>) -> Result<Opened, GvisorError> {
    let (path, dir, owner) =
        crate::open_workspace(path, expected).map_err(GvisorError::Workspace)?;
    Ok(Opened { path, dir, owner })
}

/// What the spec asks that this backend cannot give, refused before
/// anything is made; the workspace as the sandbox will write it.
fn check(spec: &SandboxSpec, root: bool) -> Result<Workspace, GvisorError> {
    if spec.join_network.is_some() {
        return Err(GvisorError::Unsupported(
            "joining another sandbox's network",
        ));
    }
    if spec.desktop.is_some() {
        return Err(GvisorError::Unsupported("a desktop"));
    }
    // A budget is held in a tmpfs of runsc's mount namespace, which only
    // root makes; rootless, runsc's file server would write a kept layer
    // or home straight onto the host's disk.
    let keeps = spec.filesystem.overlay.is_some() || matches!(spec.filesystem.home, Home::Dir(_));
    if !root && keeps && spec.filesystem.disk.is_some() {
        return Err(GvisorError::DiskRootless);
    }
    // A cache's writes would reach the profile's shared cache directly,
    // past the disk budget the process backend holds them to.
    if !spec.filesystem.caches.is_empty() {
        return Err(GvisorError::Unsupported(
            "package caches (`filesystem.caches`)",
        ));
    }
    // runsc's file server would bind a volume, but not within the disk
    // limit the process backend holds its writes to: refused, never dropped.
    if !spec.filesystem.volumes.is_empty() {
        return Err(GvisorError::Unsupported("volumes (`filesystem.volumes`)"));
    }
    let fs = &spec.filesystem;
    // As for a VM: an overlay over an empty workspace (a named sandbox's
    // own) is exactly its upper layer; over a project's files it would
    // need an overlay runsc's file server does not build.
    // The workspace (an overlay's lower) is opened here, once, and
    // checked to be the directory the sandbox was created over.
    let expected = fs.workspace_identity;
    match (&fs.overlay, &fs.workspace) {
        (None, None) => Ok(Workspace::None),
        (None, Some(ws)) => Ok(Workspace::Direct(opened(ws, expected)?)),
        (Some(o), Some(lower)) if root => Ok(Workspace::Overlay {
            lower: opened(lower, expected)?,
            dirs: o.clone(),
        }),
        (Some(o), Some(lower)) if is_empty_dir(&opened(lower, expected)?.dir) => {
            Ok(Workspace::Direct(opened(&o.upper, None)?))
        }
        (Some(_), _) => Err(GvisorError::Rootless(
            "a reviewable (overlay) workspace over existing files",
        )),
    }
}

fn mkdir(p: &Path) -> Result<(), GvisorError> {
    std::fs::create_dir_all(p).map_err(|source| GvisorError::Dir {
        path: p.to_path_buf(),
        source,
    })
}

/// Is the directory opened as `dir` empty?
fn is_empty_dir(dir: &OwnedFd) -> bool {
    std::fs::read_dir(format!("/proc/self/fd/{}", dir.as_raw_fd()))
        .is_ok_and(|mut d| d.next().is_none())
}

/// The sandbox's IDs inside gVisor, and the swap that shows the
/// workspace as theirs. As root: the workspace owner's where they are an
/// ordinary person's (what it makes stays its owner's), nobody's otherwise
/// (never root, never a system account: gVisor's kernel judges host files
/// by their host owners, so a sandbox of uid 0 owned every root-only file
/// it was shown), with the workspace mapped to nobody for its writes.
/// Rootless, runsc maps the caller to gVisor's root, whose files are the
/// caller's.
/// `owner`: the workspace's owner, read on the directory opened.
fn ids(owner: Option<(u32, u32)>, root: bool) -> (u32, u32, Option<crate::identity::SwapMap>) {
    if !root {
        return (0, 0, None);
    }
    let (uid, gid) = crate::identity::sandbox_ids(owner);
    let swap = owner.and_then(|o| crate::identity::SwapMap::new(o, (uid, gid)));
    (uid, gid, swap)
}

/// A named sandbox's kept home is its user's: a home kept when the
/// sandbox still ran as its workspace's root-owned IDs is given to it.
fn give_home(spec: &SandboxSpec, uid: u32, gid: u32) -> Result<(), GvisorError> {
    use std::os::unix::fs::MetadataExt;
    if let warden_policy::Home::Dir(d) = &spec.filesystem.home {
        let owned = std::fs::symlink_metadata(d).map_err(GvisorError::Home)?;
        if (owned.uid(), owned.gid()) != (uid, gid) {
            crate::sandbox::give_tree(d, uid, gid).map_err(GvisorError::Home)?;
        }
    }
    Ok(())
}

fn open_path(p: &Path) -> Option<OwnedFd> {
    nix::fcntl::open(
        p,
        nix::fcntl::OFlag::O_PATH | nix::fcntl::OFlag::O_DIRECTORY | nix::fcntl::OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )
    .ok()
}

/// runsc's container id: the sandbox's id in the characters runsc takes.
fn container_id(id: &str) -> String {
    let safe: String = id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '_'
            }
        })
        .take(60)
        .collect();
    format!("warden-{safe}")
}

/// The sandbox's directory of warden's state (bundle, runsc's state, its
/// log), removed when the run ends.
struct Dir(PathBuf);

impl Dir {
    fn make(id: &str) -> Result<Dir, GvisorError> {
        use std::os::unix::fs::DirBuilderExt;
        let base = state_dir().ok_or(GvisorError::NoStateDir)?.join("gvisor");
        let n = RUNS.fetch_add(1, Ordering::Relaxed);
        leftovers::sweep(&base);
        let path = base.join(format!("{}-{}-{n}", container_id(id), std::process::id()));
        let _ = warden_workspace::fsutil::remove_tree(&path);
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&path)
            .map_err(|source| GvisorError::Dir {
                path: path.clone(),
                source,
            })?;
        Ok(Dir(path))
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = warden_workspace::fsutil::remove_tree(&self.0);
    }
}

/// warden's state directory, as the binary read it ([`crate::settings`]).
fn state_dir() -> Option<PathBuf> {
    crate::settings::Settings::current().state_dir.clone()
}

/// The proxy's authority, as files the bundle shows at their paths.
fn write_trust(dir: &Path, files: TrustFiles) -> Result<Vec<(PathBuf, &'static str)>, GvisorError> {
    use std::os::unix::fs::FileExt;
    let mut shown = Vec::new();
    for (fd, inside, name) in [
        (files.bundle, warden_policy::CA_BUNDLE_PATH, "ca-bundle.crt"),
        (files.ca, warden_policy::CA_CERT_PATH, "ca.crt"),
    ] {
        let f = std::fs::File::from(fd);
        let mut data = Vec::new();
        let mut chunk = vec![0u8; 64 * 1024];
        let path = dir.join(name);
        loop {
            let n =
                f.read_at(&mut chunk, data.len() as u64)
                    .map_err(|source| GvisorError::Dir {
                        path: path.clone(),
                        source,
                    })?;
            if n == 0 {
                break;
            }
            data.extend_from_slice(&chunk[..n]);
        }
        bundle::write_file(&path, &data)?;
        shown.push((path, inside));
    }
    Ok(shown)
}

/// Published ports: the host's listeners, bound now, so that a port in use
/// is an error before anything starts.
fn publish(spec: &SandboxSpec) -> Result<Vec<(std::net::TcpListener, u16)>, GvisorError> {
    spec.publish
        .iter()
        .map(|m| {
            std::net::TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, m.host_port))
                .map(|l| (l, m.sandbox_port))
                .map_err(|source| GvisorError::Publish {
                    port: m.host_port,
                    source,
                })
        })
        .collect()
}

/// `runsc run`: the sandbox and its first process, in the cgroup before
/// runsc runs a line of its own (so that every process it starts is
/// born there). The command's streams are this process's own.
fn start_runsc(
    runsc: &Runsc,
    bundle: &Path,
    program: Program,
    cgroup: Option<&crate::cgroup::Cgroup>,
    mount: Option<mount::WorkspaceMount>,
    cpus: Option<f64>,
) -> Result<Child, GvisorError> {
    use std::os::unix::process::CommandExt;
    let procs: Vec<OwnedFd> = cgroup
        .map(|c| c.paths())
        .unwrap_or_default()
        .iter()
        .filter_map(|p| {
            nix::fcntl::open(
                &p.join("cgroup.procs"),
                nix::fcntl::OFlag::O_WRONLY | nix::fcntl::OFlag::O_CLOEXEC,
                nix::sys::stat::Mode::empty(),
            )
            .ok()
        })
        .collect();
    let raw: Vec<i32> = procs.iter().map(|f| f.as_raw_fd()).collect();
    // runsc changes the host's files for the sandbox: its mode changes are
    // judged as the process backend's are (see `modes`).
    let (filter, watch) = modes::ModeFilter::prepare().map_err(|source| GvisorError::Start {
        path: runsc.path.clone(),
        source,
    })?;
    let since = crate::modes::now();
    let mut cmd = runsc.command();
    cmd.arg("run")
        .arg(format!("--bundle={}", bundle.display()))
        .arg(&runsc.id);
    if program == Program::Service {
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
    }
    // runsc ends with this process, however it ends (`leftovers`).
    let supervisor = std::process::id() as libc::pid_t;
    // SAFETY: the closure runs in the child between fork and exec and
    // calls only prctl(2), getppid(2), write(2), the mount calls of
    // `WorkspaceMount::in_child` and the seccomp, sendmsg and close calls
    // of `ModeFilter::in_child`, which are async-signal-safe, on
    // descriptors opened and strings and filters made before the fork and
    // buffers on the stack; "0" moves the writer.
    unsafe {
        cmd.pre_exec(move || {
            leftovers::dies_with(supervisor)?;
            for fd in &raw {
                if libc::write(*fd, b"0".as_ptr().cast(), 1) != 1 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            if let Some(m) = &mount {
                m.in_child()?;
            }
            filter.in_child()
        });
    }
    let child = cmd.spawn().map_err(|source| GvisorError::Start {
        path: runsc.path.clone(),
        source,
    });
    drop((procs, cmd));
    let mut child = child?;
    if let Err(source) = watch.watch(since, cpus) {
        let _ = child.kill();
        let _ = child.wait();
        return Err(GvisorError::Start {
            path: runsc.path.clone(),
            source,
        });
    }
    Ok(child)
}

/// What serving a long-lived sandbox needs.
struct Serving<'a> {
    runsc: &'a Arc<Runsc>,
    dir: &'a Path,
    process: serde_json::Value,
    files_root: Option<Arc<OwnedFd>>,
    file_ids: Option<(u32, u32)>,
    netns: Option<Arc<OwnedFd>>,
    shim: shim::Shim,
}

/// A long-lived sandbox: once runsc says it runs, its spawn channel goes
/// to the caller and is served until the caller ends it.
fn service(
    ctx: Serving<'_>,
    first: &mut Child,
    deadline: Option<Instant>,
    attach: &mut dyn Attach,
) -> Result<Ended, GvisorError> {
    let begun = Instant::now();
    loop {
        if matches!(first.try_wait(), Ok(Some(_)) | Err(_)) {
            let why = ctx
                .runsc
                .last_error()
                .unwrap_or_else(|| "runsc ended before the sandbox ran".into());
            return Ok(Ended::NeverRan(why));
        }
        if ctx.runsc.status().as_deref() == Some("running") {
            break;
        }
        if begun.elapsed() > START_LIMIT {
            return Ok(Ended::NeverRan(format!(
                "the sandbox was not running after {} s",
                START_LIMIT.as_secs()
            )));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let (ours, theirs) = nix::sys::socket::socketpair(
        nix::sys::socket::AddressFamily::Unix,
        nix::sys::socket::SockType::SeqPacket,
        None,
        nix::sys::socket::SockFlag::SOCK_CLOEXEC,
    )
    .map_err(GvisorError::Channel)?;
    let ours = Arc::new(ours);
    attach.service(theirs, nix::unistd::Pid::from_raw(first.id() as i32));
    let mut server = serve::Server {
        runsc: ctx.runsc.clone(),
        channel: ours.clone(),
        process: ctx.process,
        dir: ctx.dir.to_path_buf(),
        files_root: ctx.files_root,
        file_ids: ctx.file_ids,
        netns: ctx.netns,
        running: Default::default(),
        shim: ctx.shim,
        terminals: Default::default(),
        next: AtomicU64::new(0),
        termed: false,
    };
    let ended = server.serve(first, deadline);
    // The supervisor's reader sees the end at once.
    let _ = nix::sys::socket::shutdown(ours.as_raw_fd(), nix::sys::socket::Shutdown::Both);
    Ok(match ended {
        serve::Ended::Timeout => Ended::Timeout,
        serve::Ended::Gone | serve::Ended::Shutdown => Ended::Exited,
        serve::Ended::Died => Ended::Died,
    })
}
