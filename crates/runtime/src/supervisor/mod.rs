//! The supervisor of a long-lived sandbox: its own process (started by
//! `warden start`, detached from whoever started it), which holds the
//! sandbox's init, cgroup, egress proxy, secrets and audit writer, and
//! serves the control socket. It ends when the sandbox ends; if it is
//! killed, the sandbox's init dies with it (parent-death signal) and the
//! next look at the sandbox cleans what is left ([`crate::state`]).

mod control;
mod execs;
mod idle;
mod inside;
mod pause;
mod record;

pub use pause::{VM_COPY, VM_PAUSED};

use crate::allowlist::Allowlist;
use crate::approvals::Approvals;
use crate::events::{Bus, BusSink, Sink};
use crate::net::Wiring;
use crate::procs::descendants;
use crate::protocol::ExecRequest;
use crate::state::{self, StopPhase, Stored, SupervisorRecord};
use control::{accept, listen};
use execs::{read_notices, DesktopLauncher};
use std::collections::HashMap;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::SyncSender;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use warden_audit::{EventKind, StopReason};
use warden_jail::spawn;
use warden_jail::{Pid, Program};
use warden_protocol::spawn::{FromInit, ToInit};

/// Connections served at once; more are refused, except into the places
/// kept back ([`KEPT_BACK`]).
const MAX_CONNECTIONS: usize = 256;
/// Places past the bound kept for a stop or a status only: a caller whose
/// commands hold every other connection (each exec holds one for as long
/// as its command runs) cannot make the supervisor refuse its owner's stop.
/// Such a connection has the hello's few seconds for its request too, so
/// a silent one does not keep its place.
const KEPT_BACK: usize = 8;
/// How often an exec's connection is looked at for a caller that left
/// (`exec -d`, or killed): its slot goes back then.
const CALLER_CHECK: Duration = Duration::from_millis(500);
/// Grace of a stop the TTL asks for.
const TTL_GRACE: Duration = Duration::from_secs(10);
/// How long the init has to end the sandbox's last processes once told
/// to, before it is killed.
const INIT_SHUTDOWN: Duration = Duration::from_secs(2);

/// Why a supervisor could not start its sandbox.
#[derive(Debug, thiserror::Error)]
pub enum SuperviseError {
    #[error(transparent)]
    Store(#[from] warden_workspace::StoreError),
    #[error(transparent)]
    State(#[from] state::StateError),
    #[error("cannot open the sandbox's event sinks: {0}")]
    Sinks(String),
    #[error("the sandbox's record is incomplete: {0}")]
    LostRecords(String),
    #[error("cannot listen on the control socket {path}")]
    Listen {
        path: PathBuf,
        #[source]
        source: nix::Error,
    },
    #[error(transparent)]
    Jail(#[from] warden_jail::JailError),
    /// The workspace is not the directory the sandbox was created over,
    /// or goes through a link (checked again under the sandbox's lock).
    #[error("refused ({code}): {refused}", code = .refused.code())]
    Workspace {
        refused: warden_workspace::WorkspaceRefused,
    },
}

impl SuperviseError {
    /// The stable reason code (and field) of a refusal a door words, if
    /// this is one.
    fn refusal(&self) -> Option<crate::lifecycle::refusal::StartRefusal> {
        use crate::lifecycle::refusal::StartRefusal;
        match self {
            SuperviseError::Workspace { refused } => StartRefusal::new(refused.code(), None, None),
            SuperviseError::Jail(warden_jail::JailError::Secrets(e)) => {
                let (code, name) = e.refusal()?;
                StartRefusal::new(code, Some(warden_policy::Field::Secret), Some(name))
            }
            SuperviseError::Jail(warden_jail::JailError::BindRefused {
                code,
                bind: (option, index),
                ..
            }) => {
                let field = warden_policy::Field::all().find(|f| f.profile_key() == Some(option));
                StartRefusal::new(code, field, index.map(|i| i.to_string()).as_deref())
            }
            SuperviseError::Jail(warden_jail::JailError::WorkspaceMoved { .. }) => {
                StartRefusal::new(warden_workspace::WORKSPACE_MOVED, None, None)
            }
            _ => None,
        }
    }
}

/// Where the init's answer to one file operation goes: its errno and the
/// descriptor it opened.
type FileWaiter = SyncSender<(i32, Option<OwnedFd>)>;

/// Everything the sandbox's threads share.
struct Shared {
    bus: Arc<Bus>,
    channel: OwnedFd,
    init: Pid,
    started_ms: u64,
    /// When the TTL and the hard lifetime end the sandbox, and since when
    /// it is paused; watched by the clocks' thread ([`pause::watch_clocks`]).
    clocks: Mutex<pause::Clocks>,
    clocks_changed: std::sync::Condvar,
    /// What isolates the sandbox: what pauses and resumes it.
    backend: crate::backend::Backend,
    /// What the backend pauses and resumes it by.
    held: crate::backend::Held,
    /// The supervisor's record, and where it is.
    record: Arc<record::Keeper>,
    record_path: PathBuf,
    /// The sandbox keeps state to write back when it stops (`--disk`).
    keeps: bool,
    next_exec: AtomicU64,
    execs: Mutex<HashMap<u64, Slot>>,
    next_file: AtomicU64,
    /// File operations sent to the init, waiting for its answer.
    files: Mutex<HashMap<u64, FileWaiter>>,
    stopping: AtomicBool,
    /// The hard lifetime (`--timeout`) ended the sandbox.
    timed_out: AtomicBool,
    /// The init closed its channel: it has exited.
    init_gone: AtomicBool,
    /// `warden run -d`: the end of the first exec ends the sandbox.
    one_shot: bool,
    /// The variables that hold secrets' placeholders.
    secret_names: Vec<String>,
    cgroups: Vec<PathBuf>,
    connections: AtomicU64,
    /// Connections in the places kept back for a stop or a status.
    kept_back: AtomicU64,
    /// Requests accepted and notices received so far: the supervisor is
    /// idle while this stays the same ([`idle::Idle`]).
    activity: AtomicU64,
    /// The running proxy's allowlist, changed live.
    allowlist: Arc<Allowlist>,
    /// With `--ask`: the questions waiting for an answer.
    approvals: Option<Arc<Approvals>>,
    /// The held first process ([`Request::Hold`]).
    main: Mutex<Main>,
    /// Its status once it ended: the supervisor's own exit status.
    main_status: Arc<Mutex<Option<i32>>>,
    /// A desktop sandbox's programs, as their keepers report them.
    desktop: Mutex<Option<crate::desktop::services::Board>>,
    /// What kept command outputs may still take on the host's disk.
    output: Arc<crate::output::OutputBudget>,
}

/// The held first process.
enum Main {
    None,
    /// With a terminal: the id of the one the init opened ahead.
    Held(ExecRequest, Vec<OwnedFd>, Option<u64>),
    Running {
        exec: u64,
        pid: i32,
    },
    Exited(i32),
}

/// An exec's notices, as the init sends them.
type Notices = std::sync::mpsc::Receiver<(FromInit, Option<OwnedFd>)>;

struct Slot {
    argv: Vec<String>,
    /// Its PID inside the sandbox, once it runs.
    pid: Option<i32>,
    tty: bool,
    started: Instant,
    waiter: Option<SyncSender<(FromInit, Option<OwnedFd>)>>,
}

/// Run the supervisor of the named sandbox in this process; returns the
/// process's exit status. Tells whoever started it how the start went on
/// `ready` ("ready PID", after a "degraded: LAYER: what" line for each
/// layer it runs without, or "error: why"), then lets it go.
///
/// Must be called single-threaded (the sandbox is cloned from here).
/// `owner` is the owner's catalogue (the door's, read from the
/// environment the door started this process with): the files it reads
/// are what the sandbox's writable volumes' merges leave alone at the
/// stop.
pub fn run_main(
    state_root: &Path,
    name: &str,
    sink_extra: Vec<Sink>,
    ready: OwnedFd,
    owner: &warden_policy::compose::Catalog,
) -> i32 {
    // Out of the caller's session: its terminal closing hangs nothing up.
    let _ = nix::unistd::setsid();
    let ready = Ready(Arc::new(Mutex::new(Some(ready))));
    let main_status = Arc::new(Mutex::new(None));
    match supervise(
        state_root,
        name,
        sink_extra,
        &ready,
        (main_status.clone(), owner),
    ) {
        // A held first process's status is the supervisor's: containerd's
        // shim reaps this process for the container's exit.
        Ok(()) => main_status.lock().ok().and_then(|s| *s).unwrap_or(0),
        Err(e) => {
            // Its reason code and field first, on a line of their own,
            // for the door to word (`lifecycle::refusal`).
            let code = e.refusal().map(|r| r.line()).unwrap_or_default();
            ready.tell(&format!("{code}error: {}\n", warden_jail::chain_str(&e)));
            125
        }
    }
}

/// The starter's pipe, which the door's `__supervise` entry is started
/// with as its stdout: kept for [`run_main`], and stdout pointed at
/// /dev/null (nothing reads it once the start is told). Both doors that
/// start supervisors (the CLI and warden-oci) call this first.
pub fn take_ready_pipe() -> std::io::Result<OwnedFd> {
    let ready = std::io::stdout().as_fd().try_clone_to_owned()?;
    let null = std::fs::OpenOptions::new().write(true).open("/dev/null")?;
    nix::unistd::dup2_stdout(&null)?;
    Ok(ready)
}

/// The starter's pipe: told once ("ready PID" or "error: why"), then
/// closed, which lets the starter go.
#[derive(Clone)]
struct Ready(Arc<Mutex<Option<OwnedFd>>>);

impl Ready {
    fn tell(&self, line: &str) {
        if let Some(fd) = self.0.lock().ok().and_then(|mut r| r.take()) {
            let _ = nix::unistd::write(&fd, line.as_bytes());
        }
    }
}

fn supervise(
    state_root: &Path,
    name: &str,
    mut sinks: Vec<Sink>,
    ready: &Ready,
    (main_status, owner): (Arc<Mutex<Option<i32>>>, &warden_policy::compose::Catalog),
) -> Result<(), SuperviseError> {
    let store = warden_workspace::Store::open(state_root)?;
    let sb = store.get(name)?;
    let lock = sb.lock()?;
    let dir = sb.dir().to_path_buf();
    if let Ok(rec) = state::read_json::<SupervisorRecord>(&dir.join(state::SUPERVISOR)) {
        state::clean_dead(&dir, &rec);
    }
    // Checked by whoever started this supervisor, and again here, under
    // the sandbox's lock, before the backend opens the workspace (by its
    // path, through no link): every backend compares the descriptor it
    // then mounts or shares with the identity recorded (below), the
    // process backend's mount, the VM's share (at each launch of its
    // VMM: a resume from disk too) and runsc's view alike.
    let meta = sb.meta();
    if let Some(r) = warden_workspace::refused_at_start(&meta.workspace, meta.workspace_id) {
        return Err(SuperviseError::Workspace { refused: r });
    }
    let stored: Stored = state::read_json(&dir.join(state::STORED))?;
    // A VM's memory saved by a pause to disk whose supervisor was killed
    // (or the host rebooted): this start restores it, its processes going
    // on where they were. Anything else there is a leftover.
    let on_disk = dir.join(pause::VM_PAUSED);
    let is_vm = crate::backend::Backend::of(&stored.spec) == crate::backend::Backend::Vm;
    let restoring = (is_vm && warden_vm::pause::is_paused(&on_disk))
        .then(|| warden_vm::pause::paused_at(&on_disk));
    if restoring.is_none() {
        let _ = warden_workspace::fsutil::remove_tree(&on_disk);
    }
    // A fork's copy of its source's saved memory: restored (once) as a
    // copy of its own, unless a pause to disk of its own came since.
    let as_copy = dir.join(pause::VM_COPY);
    let copying = restoring.is_none() && is_vm && warden_vm::pause::is_paused(&as_copy);
    if !copying {
        let _ = warden_workspace::fsutil::remove_tree(&as_copy);
    }
    open_sinks(&stored, &mut sinks)?;
    let socket_path = dir.join(state::CONTROL);
    let listener = listen(&socket_path)?;
    lock.set_state(warden_workspace::SandboxState::Running)?;

    // The spec's --timeout is the sandbox's hard lifetime: kept here (not
    // given to the jail), so that the execs it cuts short are told 124.
    let mut spec = stored.spec.clone();
    // The backend compares the workspace it mounts, on the descriptor it
    // mounts or shares, with the identity recorded at create.
    spec.filesystem.workspace_identity = meta
        .workspace_id
        .filter(|_| spec.filesystem.workspace.as_deref() == Some(meta.workspace.as_path()))
        .map(|w| (w.dev, w.ino));
    // What was changed live in earlier starts (`warden egress`, the API,
    // "always" answers) holds in this one too.
    crate::allowlist::apply_saved(&dir, &mut spec);
    crate::programs::apply_saved(&dir, &mut spec);
    let hard_limit = spec.resources.timeout.take();
    // Kept command outputs count against the sandbox's own budget, less
    // what earlier starts kept.
    let output = Arc::new(crate::output::OutputBudget::new(
        dir.join(crate::output::EXECS_DIR),
        crate::output::budget_of(spec.filesystem.disk.map(|d| d.bytes)),
    ));
    let bus = Bus::new(name, sinks);
    // The sandbox's own log holds what its earlier starts wrote, which
    // counts against the same budget (a log shared with other runs does
    // not).
    let before = stored
        .sinks
        .audit_log
        .as_deref()
        .filter(|p| p.starts_with(&dir))
        .and_then(|p| std::fs::metadata(p).ok())
        .map_or(0, |m| m.len());
    bus.set_budget(spec.resources.audit_budget, before);
    let mut wiring = Wiring::new(&spec, bus.clone());
    // What the sandbox wrote into a writable volume is merged into the
    // volume's directory at the stop, never into a file the owner's
    // configuration is read from by then.
    wiring.fence_volumes(owner.clone(), Some(state_root));
    // Nor into a volume the owner has since taken back from the token
    // the sandbox is for (the daemon records it when it reads its
    // configuration).
    wiring.withhold_withdrawn(&dir);
    // This start's own id (the cgroup's name, the prefix of its questions'
    // ids): sandboxes of one name in two state directories, or one started
    // again before its old cgroup was removed, never meet.
    let start = start_suffix();
    let allowlist = Arc::new(Allowlist::new(
        wiring.egress_control(),
        dir.clone(),
        bus.clone(),
    ));
    // Ask mode without a terminal: questions wait for an answer over the
    // control socket.
    let approvals = match &spec.network {
        // Ask rules put single requests to the same desk.
        warden_policy::NetworkSpec::Egress(e)
            if e.ask
                || e.requests
                    .iter()
                    .any(|r| r.action == warden_policy::requests::RequestAction::Ask) =>
        {
            let mut a = Approvals::new(bus.clone(), &start, allowlist.clone());
            // Programs the allowlist refuses are asked about too; their
            // "always" is kept where the names' is: beside the project's
            // grants, or in the profile's own `process.allow_exec`.
            if !spec.allow_exec.is_empty() {
                let grants =
                    stored.sinks.grants.as_deref().and_then(|f| {
                        crate::programs::Keep::of(f, stored.sinks.grants_into_profile)
                    });
                a = a.with_programs(dir.clone(), grants);
            }
            let a = Arc::new(a);
            wiring.set_asker(a.clone());
            Some(a)
        }
        _ => None,
    };
    let secret_names: Vec<String> = match &spec.network {
        warden_policy::NetworkSpec::Egress(e) => e.secrets.iter().map(|x| x.name.clone()).collect(),
        warden_policy::NetworkSpec::LoopbackOnly => Vec::new(),
    };
    let keeper = Arc::new(record::Keeper::new(dir.join(state::SUPERVISOR)));
    let mut service = Service {
        bus: bus.clone(),
        record: keeper.clone(),
        record_path: dir.join(state::SUPERVISOR),
        keeps: spec.filesystem.disk.is_some(),
        ttl: stored.ttl_ms.map(Duration::from_millis),
        one_shot: stored.one_shot,
        secret_names,
        allowlist,
        approvals: approvals.clone(),
        main_status,
        output,
        hard_limit,
        backend: crate::backend::Backend::of(&spec),
        vm: warden_vm::control::Control::default(),
        restored: match (restoring, copying) {
            (Some(since), _) => Some((
                since,
                "a new supervisor (the one that paused it to disk is gone)",
            )),
            (None, true) => Some((None, "restored as a copy of its source's saved memory")),
            (None, false) => None,
        },
        desktop: spec.desktop,
        listener: Some(listener),
        ready: ready.clone(),
    };
    if restoring.is_some() {
        service.vm.restore_from(on_disk);
    } else if copying {
        service.vm.restore_copy_from(as_copy);
    }
    let held = crate::backend::Held {
        cgroups: Vec::new(),
        vm: service.vm.clone(),
    };
    wiring.on_service(move |channel, init| service.begin(channel, init));
    let mut sink = crate::approvals::AskingSink {
        inner: BusSink(bus.clone()),
        approvals: approvals.clone(),
    };
    let id = format!("{name}-{start}");
    let backend = crate::backend::Backend::of(&spec);
    let result = backend.run_held(&spec, &id, Program::Service, &mut sink, &mut wiring, &held);
    drop(wiring);
    bus.close();
    let _ = std::fs::remove_file(&socket_path);
    keeper.remove();
    let _ = lock.set_state(warden_workspace::SandboxState::Stopped);
    result?;
    let lost = bus.lost_records();
    if !lost.is_empty() {
        return Err(SuperviseError::LostRecords(lost.join("; ")));
    }
    Ok(())
}

/// The stored spec's own sinks, after the caller's: its audit log, its
/// JSON events, and where its "always" answers are kept.
fn open_sinks(stored: &Stored, sinks: &mut Vec<Sink>) -> Result<(), SuperviseError> {
    if let Some(path) = &stored.sinks.audit_log {
        let log = warden_audit::chain::ChainedLog::open(path)
            .map_err(|e| SuperviseError::Sinks(warden_jail::chain_str(&e)))?;
        sinks.push(Box::new(log));
    }
    if let Some(path) = &stored.sinks.json_events {
        let s = warden_audit::JsonLinesSink::open(path)
            .map_err(|e| SuperviseError::Sinks(warden_jail::chain_str(&e)))?;
        sinks.push(Box::new(s));
    }
    // "Always" answers to its questions are kept for the sandbox's
    // project (or written into its profile), as a run's are.
    if let Some(path) = &stored.sinks.grants {
        sinks.push(Box::new(crate::grants::GrantsSink::new(
            path.clone(),
            stored.sinks.grants_into_profile,
        )));
    }
    Ok(())
}

/// What the supervisor's service needs once the sandbox is cloned: the
/// wiring hands it the spawn channel and the init then
/// ([`Service::begin`]).
struct Service {
    bus: Arc<Bus>,
    /// This supervisor's record, and where it is written.
    record: Arc<record::Keeper>,
    record_path: PathBuf,
    keeps: bool,
    ttl: Option<Duration>,
    one_shot: bool,
    secret_names: Vec<String>,
    allowlist: Arc<Allowlist>,
    approvals: Option<Arc<Approvals>>,
    main_status: Arc<Mutex<Option<i32>>>,
    output: Arc<crate::output::OutputBudget>,
    /// The spec's hard lifetime, kept out of the jail's spec.
    hard_limit: Option<Duration>,
    backend: crate::backend::Backend,
    /// A VM's control, which its backend serves while the VM runs.
    vm: warden_vm::control::Control,
    /// The VM is restored from a pause to disk made by a supervisor that
    /// is gone, paused since then (ms since the epoch, if known), or as a
    /// copy of another's saved memory; with who the event says resumed it.
    restored: Option<(Option<u64>, &'static str)>,
    desktop: Option<warden_policy::DesktopSpec>,
    /// The control socket, served from the first call on.
    listener: Option<OwnedFd>,
    ready: Ready,
}

impl Service {
    fn begin(&mut self, channel: OwnedFd, init: Pid) {
        // From here on threads may run: the sandbox is cloned.
        self.bus.start_writer();
        let shared = self.share(channel, init);
        self.spawn_threads(&shared);
        // A desktop's programs start with the sandbox, each kept running
        // by a thread of its own.
        if let Some(d) = &self.desktop {
            let board =
                crate::desktop::services::keep(d, Arc::new(DesktopLauncher(shared.clone())));
            if let Ok(mut b) = shared.desktop.lock() {
                *b = Some(board);
            }
        }
        if let Some((since, by)) = self.restored {
            shared.bus.emit(EventKind::Resumed {
                by: by.into(),
                paused_ms: since.map_or(0, |t| state::now_ms().saturating_sub(t)),
            });
        }
        self.tell_ready(init);
    }

    /// The supervisor's record (which a later look at the sandbox cleans
    /// by), and what the sandbox's threads share.
    fn share(&self, channel: OwnedFd, init: Pid) -> Arc<Shared> {
        let started_ms = state::now_ms();
        let cgroups = state::sandbox_cgroups(init.as_raw());
        let record = SupervisorRecord {
            pid: std::process::id(),
            start_ticks: state::start_ticks(std::process::id()).unwrap_or(0),
            started_ms,
            cgroups: cgroups.clone(),
            paused_ms: None,
            stopping: None,
        };
        self.record.start(record);
        let after =
            |d: Option<Duration>| d.map(|t| started_ms.saturating_add(t.as_millis() as u64));
        Arc::new(Shared {
            bus: self.bus.clone(),
            channel,
            init,
            started_ms,
            clocks: Mutex::new(pause::Clocks {
                ttl_ms: after(self.ttl),
                hard_ms: after(self.hard_limit),
                paused_ms: None,
            }),
            clocks_changed: std::sync::Condvar::new(),
            backend: self.backend,
            held: crate::backend::Held {
                cgroups: cgroups.clone(),
                vm: self.vm.clone(),
            },
            record: self.record.clone(),
            record_path: self.record_path.clone(),
            keeps: self.keeps,
            // A restored guest may still run processes of the supervisor
            // before (their numbers counted from 1): this one's never meet
            // them.
            next_exec: AtomicU64::new(if self.restored.is_some() {
                started_ms
            } else {
                1
            }),
            execs: Mutex::new(HashMap::new()),
            next_file: AtomicU64::new(1),
            files: Mutex::new(HashMap::new()),
            stopping: AtomicBool::new(false),
            timed_out: AtomicBool::new(false),
            init_gone: AtomicBool::new(false),
            one_shot: self.one_shot,
            secret_names: self.secret_names.clone(),
            cgroups,
            connections: AtomicU64::new(0),
            kept_back: AtomicU64::new(0),
            activity: AtomicU64::new(0),
            allowlist: self.allowlist.clone(),
            approvals: self.approvals.clone(),
            main: Mutex::new(Main::None),
            main_status: self.main_status.clone(),
            desktop: Mutex::new(None),
            output: self.output.clone(),
        })
    }

    /// The supervisor's threads: the init's notices, the control server,
    /// the hard lifetime and the TTL.
    fn spawn_threads(&mut self, shared: &Arc<Shared>) {
        let s = shared.clone();
        let _ = std::thread::Builder::new()
            .name("warden-init".into())
            .spawn(move || read_notices(&s));
        if let Some(l) = self.listener.take() {
            let s = shared.clone();
            let _ = std::thread::Builder::new()
                .name("warden-control".into())
                .spawn(move || accept(&s, l));
        }
        // The TTL and the hard lifetime, which stand still while the
        // sandbox is paused.
        let s = shared.clone();
        let _ = std::thread::Builder::new()
            .name("warden-clocks".into())
            .spawn(move || pause::watch_clocks(&s));
    }

    /// Ready once the record is written and the control server runs: a
    /// `stop` right after `start` finds it. What the sandbox runs without
    /// is said to the starter too, each on a line before `ready`: a
    /// detached supervisor's stderr is its log, which nobody reads at
    /// start.
    fn tell_ready(&self, init: Pid) {
        let mut told: String = self
            .bus
            .degraded()
            .iter()
            .map(|d| format!("degraded: {}\n", d.replace('\n', " ")))
            .collect();
        told.push_str(&format!("ready {}\n", init.as_raw()));
        self.ready.tell(&told);
    }
}

/// The connections served at once before the places kept back: the
/// bound, or a test's lower one.
fn connection_bound() -> usize {
    warden_policy::TestHooks::current()
        .supervisor_connections
        .unwrap_or(MAX_CONNECTIONS)
}

/// SIGTERM to every process, then, after `grace` (or as soon as none is
/// left), the end of the sandbox.
fn stop(shared: &Arc<Shared>, reason: StopReason, grace: Duration) {
    if shared.stopping.swap(true, Ordering::SeqCst) {
        return;
    }
    shared.bus.emit(EventKind::Stopping { reason });
    pause::thaw_for_stop(shared);
    // A first process still held never runs: the sandbox's end is its
    // end, as if it had been killed (the status containerd's shim reports
    // for a container killed before it started); its stdio is let go.
    if let Ok(mut main) = shared.main.lock() {
        if matches!(*main, Main::Held(..)) {
            *main = Main::Exited(128 + libc::SIGKILL);
            if let Ok(mut s) = shared.main_status.lock() {
                *s = Some(128 + libc::SIGKILL);
            }
        }
    }
    let _ = spawn::send(shared.channel.as_fd(), &ToInit::TermAll, &[]);
    // Said in the record, where a caller waiting for the stop sees it.
    shared.record.stop_phase(StopPhase::Terminating);
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline
        && shared
            .root_pid()
            .is_some_and(|p| !descendants(p).is_empty())
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    if !shared.init_gone.load(Ordering::SeqCst) {
        shared.record.stop_phase(StopPhase::Ending);
    }
    let _ = spawn::send(shared.channel.as_fd(), &ToInit::Shutdown, &[]);
    // An init that does not go (it always does) is killed, and with it
    // the whole sandbox; one that went has closed the channel (its PID may
    // be another process's by now: never signalled then).
    let deadline = Instant::now() + INIT_SHUTDOWN;
    while !shared.init_gone.load(Ordering::SeqCst) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    if !shared.init_gone.load(Ordering::SeqCst) {
        if let Some(pid) = shared.root_pid() {
            let _ = nix::sys::signal::kill(Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
        }
    }
}

impl Shared {
    /// The PID the sandbox's processes descend from on the host now: its
    /// init, or a VM's current VMM (a resume from disk starts another;
    /// none runs while it is on disk).
    fn root_pid(&self) -> Option<i32> {
        self.held.root_pid(self.backend, self.init.as_raw())
    }
}

/// Six hexadecimal digits that tell one start of a sandbox from another.
fn start_suffix() -> String {
    let mut b = [0u8; 3];
    let read = std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut b));
    if read.is_err() {
        let n = std::process::id() ^ (state::now_ms() as u32);
        b.copy_from_slice(&n.to_le_bytes()[..3]);
    }
    b.iter().map(|x| format!("{x:02x}")).collect()
}
