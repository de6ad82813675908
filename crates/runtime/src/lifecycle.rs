//! A named sandbox's life as the front doors drive it: create (the spec
//! resolved once and kept), start (a detached supervisor), whether it
//! runs, stop, remove. The CLI, the daemon and the OCI verbs all call
//! these; none of them holds this logic itself. Snapshots, the sandboxes
//! made from them and forks are [`copies`]'.

mod copies;
pub mod granted;
mod own;
mod own_dir;
mod records;
pub mod refusal;
mod stopping;
pub mod withdrawn;

pub use copies::{
    create_from_snapshot, delete_snapshot, fork, fork_with_memory, no_copy_meanwhile, snapshot,
    snapshots, Forked, Owner,
};
pub use own::make_own;
pub use records::{record, RecordError};
pub use stopping::{Stopping, MIN_QUIET};

use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;
use warden_audit::WorkspaceAction;
use warden_workspace::{Layout, Sandbox, Store};

use crate::client::{ClientError, Connection};
use crate::resolve::{self, Context, Input, ResolveError};
use crate::state::{self, StopPhase, Stored, SupervisorRecord};
use own_dir::OwnDir;

/// Why a sandbox could not be created, started, stopped or removed.
#[derive(Debug, thiserror::Error)]
pub enum LifecycleError {
    #[error(transparent)]
    Store(#[from] warden_workspace::StoreError),
    #[error(transparent)]
    Resolve(Box<ResolveError>),
    #[error(transparent)]
    State(#[from] state::StateError),
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error(transparent)]
    Saved(#[from] warden_workspace::saved::SavedError),
    #[error("cannot create {path}")]
    Create {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot start the sandbox's supervisor ({exe})")]
    Spawn {
        exe: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The supervisor said why it could not run the sandbox.
    #[error("{0}")]
    Refused(String),
    /// The supervisor refused the start for a reason with a stable code
    /// (a secret that cannot be read, a workspace moved): each door words
    /// it by its code and field ([`refusal::StartRefusal`]).
    #[error("{why}")]
    SupervisorRefused {
        why: String,
        refusal: refusal::StartRefusal,
    },
    #[error("the sandbox's supervisor stopped before the sandbox ran; see {log}")]
    SupervisorDied { log: PathBuf },
    #[error("`json_events -` (standard output) is for one run at a terminal; a named sandbox's events are read with `warden logs -f {name}`, or give a FILE")]
    EventsToStdout { name: String },
    // Each door says how to stop it or force the removal in its own words.
    #[error("sandbox {name} is running: stop it first, or remove it with force")]
    Running { name: String },
    /// What was done to sandbox `name` was undone (`what`: nothing of it
    /// is kept), because its record could not be written in the
    /// sandbox's audit log.
    #[error("nothing was kept of {what}: its record could not be written in the audit log of sandbox {name}")]
    NotRecorded {
        what: String,
        name: String,
        #[source]
        source: Box<RecordError>,
    },
    /// Its supervisor made no progress while stopping: it was killed.
    #[error("{}", did_not_stop(.0))]
    DidNotStop(Box<Stuck>),
    /// Sandbox `name`'s last supervisor ended before saving its layer
    /// (held in memory): a copy would pass the layer as it was before that
    /// run off as the sandbox's state. Each door says how to copy what it
    /// saved (a start and a stop) in its own words.
    #[error("sandbox {name}: its supervisor ended before saving its layer; its unsaved changes are lost")]
    ChangesLost { name: String },
    /// Sandbox `name`'s workspace is not the directory it was created
    /// over (moved or replaced since), or its path goes through a link:
    /// it is not started over whatever is at that path now. Each door
    /// words it by its reason code ([`WorkspaceRefused::code`]).
    #[error("sandbox {name} is not started")]
    Workspace {
        name: String,
        #[source]
        refused: warden_workspace::WorkspaceRefused,
    },
}

impl LifecycleError {
    /// The stable reason code of a refusal every door words alike.
    pub fn reason(&self) -> Option<&'static str> {
        match self {
            LifecycleError::ChangesLost { .. } => Some(CHANGES_LOST),
            LifecycleError::Workspace { refused, .. } => Some(refused.code()),
            LifecycleError::SupervisorRefused { refusal, .. } => Some(refusal.code),
            _ => None,
        }
    }
}

/// The reason code of [`LifecycleError::ChangesLost`].
pub const CHANGES_LOST: &str = "changes_lost";

/// A supervisor that made no progress for `quiet` while stopping (in
/// `phase`, as its record said): it was killed, and what it held is
/// cleaned, except `left`.
#[derive(Debug)]
pub struct Stuck {
    pub name: String,
    pub pid: u32,
    pub phase: Option<StopPhase>,
    pub quiet: Duration,
    pub left: Vec<String>,
}

fn did_not_stop(s: &Stuck) -> String {
    let Stuck {
        name,
        pid,
        phase,
        quiet,
        left,
    } = s;
    format!(
        "sandbox {name} did not stop: its supervisor (PID {pid}) made no progress for {} s {}; it was killed, and the sandbox with it{}",
        quiet.as_secs(),
        match phase {
            Some(p) => format!("while {}", p.doing()),
            None => "and did not take the stop".to_string(),
        },
        if left.is_empty() {
            String::new()
        } else {
            format!(" (left behind: {})", left.join(", "))
        }
    )
}

impl From<ResolveError> for LifecycleError {
    fn from(e: ResolveError) -> LifecycleError {
        LifecycleError::Resolve(Box::new(e))
    }
}

/// Said when a VM sandbox gets a copy of its project rather than a layer.
const VM_COPY_NOTICE: &str = "a VM sandbox works on a copy of the workspace (reflinked where the file system allows): `warden diff` compares whole trees, `warden commit` applies the changes";

fn is_empty_dir(p: &Path) -> bool {
    std::fs::read_dir(p).is_ok_and(|mut d| d.next().is_none())
}

/// Make the sandbox `name` with `layout` and store its resolved spec;
/// true when that spec runs in a VM. The error says whether the sandbox
/// had been made (a name already taken is not, and its workspace is
/// another sandbox's): one made is the caller's to undo.
fn make(
    store: &Store,
    name: &str,
    req: &CreateRequest,
    workspace: &Path,
    layout: Layout,
    ctx: &Context<'_>,
) -> Result<(Sandbox, bool), (LifecycleError, bool)> {
    let mut opts = warden_workspace::CreateOptions::new(workspace.to_path_buf());
    opts.profile = req.profile_name.clone();
    opts.layout = layout;
    let sb = store.create(name, &opts).map_err(|e| (e.into(), false))?;
    let made = (|| -> Result<bool, LifecycleError> {
        let resolved = resolve::resolve(req.input.clone(), ctx, Some(&sb))?;
        if resolved.sinks.json_events.as_deref() == Some(Path::new("-")) {
            return Err(LifecycleError::EventsToStdout {
                name: name.to_string(),
            });
        }
        let vm = resolved.spec.isolation == warden_policy::Isolation::Vm;
        let stored = Stored {
            spec: resolved.spec,
            sinks: resolved.sinks,
            ttl_ms: req.ttl.map(|t| t.as_millis() as u64),
            one_shot: req.one_shot,
            secret_origins: resolved.secret_origins,
        };
        state::write_json(&sb.dir().join(state::STORED), &stored)?;
        Ok(vm)
    })();
    // The caller undoes a sandbox made here: its own workspace goes
    // before its name ([`own_dir`]).
    made.map(|vm| (sb, vm)).map_err(|e| (e, true))
}

/// What a named sandbox is made from.
#[derive(Debug, Clone, Default)]
pub struct CreateRequest {
    /// The directory it works on; without one it gets an empty workspace
    /// of its own (kept and reviewable like any other, removed with it).
    pub workspace: Option<PathBuf>,
    /// The profile's name, recorded for `warden ls`.
    pub profile_name: Option<String>,
    pub input: Input,
    /// Stop it this long after it starts.
    pub ttl: Option<Duration>,
    /// `warden run -d`: it stops when its first exec ends.
    pub one_shot: bool,
}

/// The directory of the state that holds the sandboxes' own workspaces.
pub const OWN_WORKSPACES: &str = "workspaces";

/// The directory of a sandbox's own workspace (one made without `-w`).
pub fn own_workspace(store: &Store, name: &str) -> PathBuf {
    store.root().join(OWN_WORKSPACES).join(name)
}

/// Create the sandbox `name`: its workspace layer and its spec, resolved
/// once (every later start and exec runs under exactly it). Returns the
/// sandbox and a notice for the person, if any. Nothing of a refused
/// create stays behind.
pub fn create(
    store: &Store,
    name: &str,
    req: CreateRequest,
    ctx: &Context<'_>,
) -> Result<(Sandbox, Option<String>), LifecycleError> {
    warden_workspace::validate_name("sandbox name", name)?;
    // A name held by another sandbox is refused before its own workspace
    // (maybe that sandbox's) is touched; one made here is the only one
    // an undo removes ([`own_dir`]).
    let (own, workspace) = match &req.workspace {
        Some(w) => (None, w.clone()),
        None => {
            let o = OwnDir::take(store, name, &own_workspace(store, name))?;
            let path = o.path().to_path_buf();
            (Some(o), path)
        }
    };
    let undone = |own, e, made| own_dir::undone(store, name, own, e, made);
    let (layout, notice) = resolve::layout_for_host();
    let (sb, notice) = match make(store, name, &req, &workspace, layout, ctx) {
        // A VM's guest cannot lay an overlay over a project shared from
        // the host: a VM sandbox works on a copy of it (reflinked where
        // the file system allows), reviewable like a layer.
        Ok((_, true)) if layout == Layout::Overlay && !is_empty_dir(&workspace) => {
            let _ = store.remove(name);
            match make(store, name, &req, &workspace, Layout::Copy, ctx) {
                Ok((sb, _)) => (sb, Some(VM_COPY_NOTICE.to_string())),
                Err((e, made)) => return Err(undone(own, e, made)),
            }
        }
        Ok((sb, _)) => (sb, notice),
        Err((e, made)) => return Err(undone(own, e, made)),
    };
    // A sandbox whose making is not in its log is not made: nothing ran
    // in it yet, so undoing it loses nothing.
    if let Err(source) = record(
        &sb,
        WorkspaceAction::Create,
        Vec::new(),
        format!("workspace {}", sb.meta().workspace.display()),
    ) {
        let e = LifecycleError::NotRecorded {
            what: format!("sandbox {name}"),
            name: name.to_string(),
            source: Box::new(source),
        };
        return Err(undone(own, e, true));
    }
    Ok((sb, notice))
}

/// The control socket of a sandbox's supervisor.
pub fn control(sb: &Sandbox) -> PathBuf {
    sb.dir().join(state::CONTROL)
}

/// Start the sandbox's supervisor (`exe __supervise NAME`, detached, its
/// own session); returns once the sandbox runs, with each layer it runs
/// without (`LAYER: what is lost`, as its `degraded` events say), or says
/// why it cannot.
pub fn start(state_root: &Path, sb: &Sandbox, exe: &Path) -> Result<Vec<String>, LifecycleError> {
    // The workspace must be the directory the sandbox was created over,
    // reached through no link (as a commit and a diff check it): one
    // moved away and another put at its path is not run over. The
    // supervisor checks it again, under the sandbox's lock, right
    // before the backend opens it.
    workspace_is_its_own(sb)?;
    // What sandboxes killed outright left (see `cgroup::sweep_if_due`).
    let _ = warden_jail::cgroup::sweep_if_due();
    let log_path = sb.dir().join("supervisor.log");
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .map_err(|source| LifecycleError::Create {
            path: log_path.clone(),
            source,
        })?;
    let mut child = std::process::Command::new(exe)
        .arg("__supervise")
        .arg(sb.name())
        .env("WARDEN_STATE_DIR", state_root)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(log)
        .spawn()
        .map_err(|source| LifecycleError::Spawn {
            exe: exe.to_path_buf(),
            source,
        })?;
    let mut said = String::new();
    if let Some(mut out) = child.stdout.take() {
        let _ = out.read_to_string(&mut said);
    }
    // The supervisor closed its side: it runs the sandbox, or it has
    // failed and exits (reaped here, or by whoever adopts it).
    let degraded: Vec<String> = said
        .lines()
        .filter_map(|l| l.strip_prefix("degraded: "))
        .map(str::to_string)
        .collect();
    let refusal = said.lines().find_map(refusal::StartRefusal::parse);
    let line = said
        .lines()
        .find(|l| !l.starts_with("degraded: ") && refusal::StartRefusal::parse(l).is_none())
        .unwrap_or("");
    if line.starts_with("ready") {
        // It lives on detached; its exit is reaped by a thread so that a
        // long-lived caller (the daemon) keeps no zombie.
        std::thread::spawn(move || {
            let _ = child.wait();
        });
        return Ok(degraded);
    }
    let _ = child.wait();
    match (line.strip_prefix("error: "), refusal) {
        (Some(why), Some(refusal)) => Err(LifecycleError::SupervisorRefused {
            why: why.to_string(),
            refusal,
        }),
        (Some(why), None) => Err(LifecycleError::Refused(why.to_string())),
        (None, _) => Err(LifecycleError::SupervisorDied { log: log_path }),
    }
}

/// Whether `sb`'s workspace is still the directory it was created over
/// (its device and inode as recorded), reached through no link.
pub fn workspace_is_its_own(sb: &Sandbox) -> Result<(), LifecycleError> {
    let meta = sb.meta();
    match warden_workspace::refused_at_start(&meta.workspace, meta.workspace_id) {
        None => Ok(()),
        Some(refused) => Err(LifecycleError::Workspace {
            name: sb.name().to_string(),
            refused,
        }),
    }
}

/// Whether a sandbox runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Liveness {
    Running,
    Stopped,
    /// Its supervisor died (PID `pid`): what it left was cleaned, except
    /// `left`; `on_disk`: its VM was paused to disk, and that state is
    /// kept for [`resume_from_disk`].
    Died {
        pid: u32,
        left: Vec<String>,
        on_disk: bool,
    },
}

/// Whether the sandbox runs now; a dead supervisor's leftovers are
/// cleaned on the way (and said in the answer).
pub fn liveness(sb: &Sandbox) -> Liveness {
    let record = sb.dir().join(state::SUPERVISOR);
    match state::read_json::<SupervisorRecord>(&record) {
        Ok(rec) if state::alive(&rec) => Liveness::Running,
        Ok(rec) => {
            let left = state::clean_dead(sb.dir(), &rec);
            Liveness::Died {
                pid: rec.pid,
                left,
                on_disk: on_disk(sb),
            }
        }
        Err(_) => Liveness::Stopped,
    }
}

impl Liveness {
    pub fn running(&self) -> bool {
        matches!(self, Liveness::Running)
    }

    /// A line for the person when a supervisor was found dead.
    pub fn notice(&self, name: &str) -> Option<String> {
        match self {
            Liveness::Died {
                pid,
                left,
                on_disk,
            } => Some(format!(
                "the supervisor of sandbox {name} died (PID {pid}); {} and what it left is cleaned{}",
                if *on_disk {
                    "its VM, paused to disk, is kept there (resuming it restores it)"
                } else {
                    "its processes are gone"
                },
                if left.is_empty() {
                    String::new()
                } else {
                    format!(", except {}", left.join(", "))
                }
            )),
            _ => None,
        }
    }
}

/// Since when a running sandbox is paused (ms since the epoch), as its
/// supervisor recorded it; `None` when it runs or is stopped.
pub fn paused_since(sb: &Sandbox) -> Option<u64> {
    let rec = state::read_json::<SupervisorRecord>(&sb.dir().join(state::SUPERVISOR)).ok()?;
    if !state::alive(&rec) {
        return None;
    }
    rec.paused_ms
}

/// Pause a running sandbox: its processes frozen in place, their memory
/// kept (not across a host reboot), its TTL and timeout stopped; `by`
/// says who asked, for the audit log.
pub fn pause(sb: &Sandbox, by: &str) -> Result<(), LifecycleError> {
    Ok(Connection::open(&control(sb))?.pause(by)?)
}

/// Pause a running VM sandbox to disk: its guest's memory and devices
/// saved to the sandbox's state and its VMM ended (its RAM freed), until
/// [`resume`]. Refused (`unsupported`) for a backend that cannot, and for
/// a VM that cannot be saved (a mounted share), which runs on untouched.
pub fn pause_to_disk(sb: &Sandbox, by: &str) -> Result<(), LifecycleError> {
    Ok(Connection::open(&control(sb))?.pause_with(by, true)?)
}

/// Whether the sandbox, not running, holds a VM paused to disk by a
/// supervisor that is gone (killed, or the host rebooted): its next start
/// restores it ([`resume_from_disk`]).
pub fn on_disk(sb: &Sandbox) -> bool {
    let rec = state::read_json::<SupervisorRecord>(&sb.dir().join(state::SUPERVISOR));
    if rec.as_ref().is_ok_and(state::alive) {
        return false;
    }
    let spec = state::read_json::<Stored>(&sb.dir().join(state::STORED));
    spec.is_ok_and(|s| s.spec.isolation == warden_policy::Isolation::Vm)
        && warden_vm::pause::is_paused(&sb.dir().join(crate::supervisor::VM_PAUSED))
}

/// Resume a sandbox whose VM was paused to disk by a supervisor that is
/// gone: a new supervisor restores the saved guest (its processes go on
/// where they were) around this start's network, proxy, cgroup and
/// shares. A state that cannot be restored is refused, saying why.
pub fn resume_from_disk(
    state_root: &Path,
    sb: &Sandbox,
    exe: &Path,
) -> Result<Vec<String>, LifecycleError> {
    start(state_root, sb, exe)
}

/// Let a paused sandbox's processes go on where they were.
pub fn resume(sb: &Sandbox, by: &str) -> Result<(), LifecycleError> {
    Ok(Connection::open(&control(sb))?.resume(by)?)
}

/// Stop a running sandbox: SIGTERM to its processes, SIGKILL after
/// `grace`; returns once its supervisor is gone. It is waited for as long
/// as it makes progress (writing back a large home may take past the
/// grace); one that makes none for the grace (at least [`MIN_QUIET`]) is
/// killed, and the stop refused ([`LifecycleError::DidNotStop`]).
pub fn stop(sb: &Sandbox, grace: Duration) -> Result<(), LifecycleError> {
    stop_watching(sb, grace, &mut |_| {})
}

/// [`stop`], telling `on_wait` what the supervisor is doing when the stop
/// takes a while past the grace (then every few seconds).
pub fn stop_watching(
    sb: &Sandbox,
    grace: Duration,
    on_wait: &mut dyn FnMut(&Stopping),
) -> Result<(), LifecycleError> {
    // A fork or snapshot being made of it finishes first: a stop takes
    // away what the copy reads (its mounted layer).
    let _no_copy = no_copy_meanwhile(sb)?;
    let control = control(sb);
    let (target, rx) = match state::read_json::<SupervisorRecord>(&sb.dir().join(state::SUPERVISOR))
    {
        // Asked from a thread of its own, again until the supervisor
        // takes it: a supervisor that is stuck does not answer, and is
        // then killed when the grace and the quiet window are out.
        Ok(rec) if state::alive(&rec) => {
            let target = stopping::Target {
                pid: rec.pid,
                start_ticks: rec.start_ticks,
            };
            let rx = stopping::ask(control, grace, rec.pid);
            (target, rx)
        }
        // No supervisor on record: whether one listens, the control
        // socket says.
        _ => {
            let pid = Connection::open(&control)?.stop(grace)?;
            let (tx, rx) = std::sync::mpsc::channel();
            let _ = tx.send(Ok(pid));
            let target = stopping::Target {
                pid,
                start_ticks: state::start_ticks(pid).unwrap_or(0),
            };
            (target, rx)
        }
    };
    stopping::wait(sb, &target, grace, &rx, on_wait)
}

/// Remove the sandbox `name`: its layer, state and (if it was made
/// without `-w`) its own workspace. A running one is refused unless
/// `force`, which stops it first.
pub fn remove(store: &Store, name: &str, force: bool) -> Result<(), LifecycleError> {
    let sb = store.get(name)?;
    if liveness(&sb).running() {
        if !force {
            return Err(LifecycleError::Running {
                name: name.to_string(),
            });
        }
        // `stop` waits for a copy being made to finish.
        match stop(&sb, Duration::from_secs(10)) {
            // It ended on its own meanwhile.
            Err(LifecycleError::Client(ClientError::NotRunning { .. })) => {}
            // It was ending on its own (a one-shot sandbox whose command
            // could not start): what it said no longer matters once it is
            // gone. Its control socket goes a moment before its record
            // does, so a refused connection is given that moment.
            Err(e) => {
                let deadline = std::time::Instant::now() + Duration::from_secs(5);
                while liveness(&sb).running() {
                    if std::time::Instant::now() >= deadline {
                        return Err(e);
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
            Ok(()) => {}
        }
    }
    // A fork or snapshot of it being made finishes first: its files are
    // not pulled from under the copy.
    let _no_copy = no_copy_meanwhile(&sb)?;
    let own = own_workspace(store, name);
    let owned = std::fs::canonicalize(&own).is_ok_and(|o| o == sb.meta().workspace);
    // Its own workspace goes with the name, never after it: a create of
    // the name that comes next finds neither ([`own_dir`]).
    own_dir::remove_with(owned.then_some(own.as_path()), || {
        // A supervisor that was just stopped may hold the sandbox's lock
        // for the last moments of its exit.
        let mut tries = 0;
        loop {
            match store.remove(name) {
                Err(warden_workspace::StoreError::InUse { .. }) if force && tries < 50 => {
                    tries += 1;
                    std::thread::sleep(Duration::from_millis(100));
                }
                r => break r.map_err(LifecycleError::from),
            }
        }
    })
}
