//! The supervisor of a long-lived sandbox: its own process (started by
//! `warden start`, detached from whoever started it), which holds the
//! sandbox's init, cgroup, egress proxy, secrets and audit writer, and
//! serves the control socket. It ends when the sandbox ends; if it is
//! killed, the sandbox's init dies with it (parent-death signal) and the
//! next look at the sandbox cleans what is left ([`crate::state`]).

use crate::allowlist::Allowlist;
use crate::approvals::Approvals;
use crate::events::{Bus, BusSink, Sink};
use crate::net::Wiring;
use crate::procs::{descendants, processes};
use crate::protocol::{
    self, ExecRequest, MainState, Process, Refusal, Reply, Request, Status, VERSION,
};
use crate::state::{self, Stored, SupervisorRecord};
use std::collections::HashMap;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, RecvTimeoutError, SyncSender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use warden_audit::{EventKind, StopReason};
use warden_jail::spawn::{self, FromInit, ToInit};
use warden_jail::{Pid, Program};

/// Connections served at once; more are refused.
const MAX_CONNECTIONS: usize = 256;
/// How often an exec's connection is looked at for a caller that left
/// (`exec -d`, or killed): its slot goes back then.
const CALLER_CHECK: Duration = Duration::from_millis(500);
/// Grace of a stop the TTL asks for.
const TTL_GRACE: Duration = Duration::from_secs(10);

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
    /// When the TTL stops the sandbox (ms since the epoch); changed by
    /// [`Request::SetTtl`], watched by the TTL thread.
    ttl_deadline_ms: Mutex<Option<u64>>,
    ttl_changed: std::sync::Condvar,
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
pub fn run_main(state_root: &Path, name: &str, sink_extra: Vec<Sink>, ready: OwnedFd) -> i32 {
    // Out of the caller's session: its terminal closing hangs nothing up.
    let _ = nix::unistd::setsid();
    let ready = Ready(Arc::new(Mutex::new(Some(ready))));
    let main_status = Arc::new(Mutex::new(None));
    match supervise(state_root, name, sink_extra, &ready, main_status.clone()) {
        // A held first process's status is the supervisor's: containerd's
        // shim reaps this process for the container's exit.
        Ok(()) => main_status.lock().ok().and_then(|s| *s).unwrap_or(0),
        Err(e) => {
            ready.tell(&format!("error: {}\n", warden_jail::chain_str(&e)));
            125
        }
    }
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
    main_status: Arc<Mutex<Option<i32>>>,
) -> Result<(), SuperviseError> {
    let store = warden_workspace::Store::open(state_root)?;
    let sb = store.get(name)?;
    let lock = sb.lock()?;
    let dir = sb.dir().to_path_buf();
    if let Ok(rec) = state::read_json::<SupervisorRecord>(&dir.join(state::SUPERVISOR)) {
        state::clean_dead(&dir, &rec);
    }
    let stored: Stored = state::read_json(&dir.join(state::STORED))?;
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
    let socket_path = dir.join(state::CONTROL);
    let listener = listen(&socket_path)?;
    lock.set_state(warden_workspace::SandboxState::Running)?;

    // The spec's --timeout is the sandbox's hard lifetime: kept here (not
    // given to the jail), so that the execs it cuts short are told 124.
    let mut spec = stored.spec.clone();
    // What was changed live in earlier starts (`warden egress`, the API,
    // "always" answers) holds in this one too.
    crate::allowlist::apply_saved(&dir, &mut spec);
    let hard_limit = spec.resources.timeout.take();
    let bus = Bus::new(name, sinks);
    let mut wiring = Wiring::new(&spec, bus.clone());
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
        warden_policy::NetworkSpec::Egress(e) if e.ask => {
            let a = Arc::new(Approvals::new(bus.clone(), &start, allowlist.clone()));
            wiring.set_asker(a.clone());
            Some(a)
        }
        _ => None,
    };
    let ttl = stored.ttl_ms.map(Duration::from_millis);
    let one_shot = stored.one_shot;
    let secret_names: Vec<String> = match &spec.network {
        warden_policy::NetworkSpec::Egress(e) => e.secrets.iter().map(|x| x.name.clone()).collect(),
        warden_policy::NetworkSpec::LoopbackOnly => Vec::new(),
    };
    let record_path = dir.join(state::SUPERVISOR);
    let desktop = spec.desktop;
    let service_bus = bus.clone();
    let listener = Mutex::new(Some(listener));
    let ready_out = ready.clone();
    wiring.on_service(move |channel, init| {
        // From here on threads may run: the sandbox is cloned.
        service_bus.start_writer();
        let started_ms = state::now_ms();
        let cgroups = state::sandbox_cgroups(init.as_raw());
        let _ = state::write_json(
            &record_path,
            &SupervisorRecord {
                pid: std::process::id(),
                start_ticks: state::start_ticks(std::process::id()).unwrap_or(0),
                started_ms,
                cgroups: cgroups.clone(),
            },
        );
        let shared = Arc::new(Shared {
            bus: service_bus.clone(),
            channel,
            init,
            started_ms,
            ttl_deadline_ms: Mutex::new(ttl.map(|t| started_ms + t.as_millis() as u64)),
            ttl_changed: std::sync::Condvar::new(),
            next_exec: AtomicU64::new(1),
            execs: Mutex::new(HashMap::new()),
            next_file: AtomicU64::new(1),
            files: Mutex::new(HashMap::new()),
            stopping: AtomicBool::new(false),
            timed_out: AtomicBool::new(false),
            init_gone: AtomicBool::new(false),
            one_shot,
            secret_names: secret_names.clone(),
            cgroups,
            connections: AtomicU64::new(0),
            allowlist: allowlist.clone(),
            approvals: approvals.clone(),
            main: Mutex::new(Main::None),
            main_status: main_status.clone(),
            desktop: Mutex::new(None),
        });
        let s = shared.clone();
        let _ = std::thread::Builder::new()
            .name("warden-init".into())
            .spawn(move || read_notices(&s));
        if let Some(l) = listener.lock().ok().and_then(|mut l| l.take()) {
            let s = shared.clone();
            let _ = std::thread::Builder::new()
                .name("warden-control".into())
                .spawn(move || accept(&s, l));
        }
        if let Some(limit) = hard_limit {
            let s = shared.clone();
            let _ = std::thread::Builder::new()
                .name("warden-timeout".into())
                .spawn(move || {
                    std::thread::sleep(limit);
                    s.timed_out.store(true, Ordering::SeqCst);
                    stop(&s, StopReason::Timeout, Duration::ZERO);
                });
        }
        let s = shared.clone();
        let _ = std::thread::Builder::new()
            .name("warden-ttl".into())
            .spawn(move || watch_ttl(&s));
        // A desktop's programs start with the sandbox, each kept running
        // by a thread of its own.
        if let Some(d) = &desktop {
            let board =
                crate::desktop::services::keep(d, Arc::new(DesktopLauncher(shared.clone())));
            if let Ok(mut b) = shared.desktop.lock() {
                *b = Some(board);
            }
        }
        // Ready once the record is written and the control server runs:
        // a `stop` right after `start` finds it.
        // What the sandbox runs without is said to the starter too, each
        // on a line before `ready`: a detached supervisor's stderr is its
        // log, which nobody reads at start.
        let mut told: String = service_bus
            .degraded()
            .iter()
            .map(|d| format!("degraded: {}\n", d.replace('\n', " ")))
            .collect();
        told.push_str(&format!("ready {}\n", init.as_raw()));
        ready_out.tell(&told);
    });
    let mut sink = BusSink(bus.clone());
    let id = format!("{name}-{start}");
    let backend = crate::backend::Backend::of(&spec);
    let result = backend.run(&spec, &id, Program::Service, &mut sink, &mut wiring);
    drop(wiring);
    bus.close();
    let _ = std::fs::remove_file(&socket_path);
    let _ = std::fs::remove_file(dir.join(state::SUPERVISOR));
    let _ = lock.set_state(warden_workspace::SandboxState::Stopped);
    result?;
    let lost = bus.lost_records();
    if !lost.is_empty() {
        return Err(SuperviseError::LostRecords(lost.join("; ")));
    }
    Ok(())
}

/// The control socket: owner-only, in the sandbox's own directory.
fn listen(path: &Path) -> Result<OwnedFd, SuperviseError> {
    use nix::sys::socket::{
        bind, listen, socket, AddressFamily, Backlog, SockFlag, SockType, UnixAddr,
    };
    let err = |source| SuperviseError::Listen {
        path: path.to_path_buf(),
        source,
    };
    let _ = std::fs::remove_file(path);
    let fd = socket(
        AddressFamily::Unix,
        SockType::SeqPacket,
        SockFlag::SOCK_CLOEXEC,
        None,
    )
    .map_err(err)?;
    let addr = UnixAddr::new(path).map_err(err)?;
    let old = nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o077));
    let bound = bind(fd.as_raw_fd(), &addr);
    nix::sys::stat::umask(old);
    bound.map_err(err)?;
    listen(&fd, Backlog::new(64).unwrap_or(Backlog::MAXCONN)).map_err(err)?;
    Ok(fd)
}

fn accept(shared: &Arc<Shared>, listener: OwnedFd) {
    let me = nix::unistd::getuid();
    loop {
        let conn = match warden_jail::fdpass::accept(listener.as_fd()) {
            Ok(fd) => fd,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(_) => {
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
        };
        // Only the sandbox's owner (or root) may drive it; the socket's
        // mode says the same, this holds even if the mode is changed.
        let peer = nix::sys::socket::getsockopt(&conn, nix::sys::socket::sockopt::PeerCredentials);
        let allowed = peer.is_ok_and(|c| c.uid() == me.as_raw() || c.uid() == 0);
        if !allowed {
            continue;
        }
        // ...and never from inside a sandbox: rootless, a sandbox's
        // processes are the owner's UID too, and any bind that shows the
        // state directory (`--ro ~`) shows this socket. The owner drives
        // it from this supervisor's own user namespace; a sandbox is in
        // one of its own (root's sandboxes are 65534, refused above).
        if peer.is_ok_and(|c| c.uid() != 0 && !in_my_user_namespace(c.pid())) {
            let _ = protocol::send(
                conn.as_fd(),
                &Reply::Error {
                    message: "the control socket serves its owner from the host, not from inside a sandbox or another user namespace".into(),
                },
                &[],
            );
            continue;
        }
        if shared.connections.load(Ordering::Relaxed) >= MAX_CONNECTIONS as u64 {
            let _ = protocol::send(
                conn.as_fd(),
                &Reply::Error {
                    message: format!(
                        "the supervisor serves {MAX_CONNECTIONS} connections at most; try again"
                    ),
                },
                &[],
            );
            continue;
        }
        shared.connections.fetch_add(1, Ordering::Relaxed);
        let s = shared.clone();
        let spawned = std::thread::Builder::new()
            .name("warden-conn".into())
            .spawn(move || {
                let _ = serve(&s, &conn);
                s.connections.fetch_sub(1, Ordering::Relaxed);
            });
        if spawned.is_err() {
            shared.connections.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// Whether process `pid` (a peer, as this process's PID namespace sees it;
/// 0 when it cannot) is in this process's user namespace.
fn in_my_user_namespace(pid: i32) -> bool {
    use std::os::unix::fs::MetadataExt;
    let ns = |path: String| std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()));
    pid > 0
        && ns(format!("/proc/{pid}/ns/user"))
            .is_some_and(|theirs| Some(theirs) == ns("/proc/self/ns/user".into()))
}

fn serve(shared: &Arc<Shared>, conn: &OwnedFd) -> Result<(), protocol::ProtocolError> {
    // A caller has a few seconds to say hello; a silent connection does
    // not keep its slot.
    let _ = nix::sys::socket::setsockopt(
        conn,
        nix::sys::socket::sockopt::ReceiveTimeout,
        &nix::sys::time::TimeVal::new(5, 0),
    );
    let (hello, _) = protocol::receive::<Request>(conn)?;
    let _ = nix::sys::socket::setsockopt(
        conn,
        nix::sys::socket::sockopt::ReceiveTimeout,
        &nix::sys::time::TimeVal::new(0, 0),
    );
    match hello {
        Request::Hello { version } if version == VERSION => protocol::send(
            conn.as_fd(),
            &Reply::Hello {
                version: VERSION,
                sandbox: shared.bus.sandbox().to_string(),
                pid: std::process::id(),
            },
            &[],
        )?,
        Request::Hello { version } => {
            return protocol::send(
                conn.as_fd(),
                &Reply::Error {
                    message: format!("this sandbox's supervisor speaks control protocol {VERSION}, the caller {version}: use the same warden for both"),
                },
                &[],
            )
        }
        _ => return Ok(()),
    }
    let (req, fds) = protocol::receive::<Request>(conn)?;
    let reply = |r: &Reply| protocol::send(conn.as_fd(), r, &[]);
    match req {
        Request::Hello { .. } => reply(&Reply::Error {
            message: "hello twice".into(),
        }),
        Request::Exec(r) => exec(shared, conn, r, fds),
        Request::Hold(r) => hold(shared, conn, r, fds),
        Request::Release => release(shared, conn),
        Request::File(op) => file_op(shared, conn, op),
        Request::Connect(target) => connect(shared, conn, target),
        Request::Signal { exec, signal } => {
            match spawn::send(
                shared.channel.as_fd(),
                &ToInit::Signal { id: exec, signal },
                &[],
            ) {
                Ok(()) => reply(&Reply::Ok),
                Err(e) => reply(&Reply::Error {
                    message: warden_jail::chain_str(&e),
                }),
            }
        }
        Request::Stop { grace_ms } => {
            reply(&Reply::Ok)?;
            stop(
                shared,
                StopReason::Requested,
                Duration::from_millis(grace_ms),
            );
            Ok(())
        }
        Request::Status => reply(&Reply::Status(status(shared))),
        Request::SetEgress { allow, remove, by } => {
            reply(&shared.allowlist.reply(&allow, &remove, &by))
        }
        Request::Approvals => reply(&crate::approvals::pending_reply(
            shared.approvals.as_deref(),
        )),
        Request::Answer {
            question,
            decision,
            by,
        } => reply(&crate::approvals::answer_reply(
            shared.approvals.as_deref(),
            &question,
            decision,
            &by,
        )),
        Request::SetTtl { ttl_ms } => {
            let deadline = ttl_ms.map(|t| state::now_ms().saturating_add(t));
            match shared.ttl_deadline_ms.lock() {
                Ok(mut d) => {
                    *d = deadline;
                    shared.ttl_changed.notify_all();
                    shared.bus.emit(EventKind::TtlChanged {
                        deadline_ms: deadline,
                    });
                    reply(&Reply::Ok)
                }
                Err(_) => reply(&Reply::Error {
                    message: "the supervisor's TTL is unusable".into(),
                }),
            }
        }
        Request::Ps => {
            let execs: HashMap<i32, u64> = shared
                .execs
                .lock()
                .map(|e| e.iter().filter_map(|(id, s)| Some((s.pid?, *id))).collect())
                .unwrap_or_default();
            let processes = processes(shared.init.as_raw())
                .into_iter()
                .map(|(host_pid, pid, command)| Process {
                    pid,
                    host_pid,
                    exec: execs.get(&pid).copied(),
                    command,
                })
                .collect();
            reply(&Reply::Ps { processes })
        }
        Request::Follow => {
            let rx = shared.bus.subscribe();
            loop {
                match rx.recv_timeout(CALLER_CHECK) {
                    Ok(e) => reply(&Reply::Event(e))?,
                    // A follower that left, in a quiet sandbox, would
                    // hold its slot until the next event.
                    Err(RecvTimeoutError::Timeout) if caller_gone(conn) => return Ok(()),
                    Err(RecvTimeoutError::Timeout) => {}
                    Err(RecvTimeoutError::Disconnected) => return Ok(()),
                }
            }
        }
    }
}

fn exec(
    shared: &Arc<Shared>,
    conn: &OwnedFd,
    r: ExecRequest,
    fds: Vec<OwnedFd>,
) -> Result<(), protocol::ProtocolError> {
    let reply = |m: &Reply| protocol::send(conn.as_fd(), m, &[]);
    let (id, rx) = match launch(shared, r, fds, None) {
        Ok(started) => started,
        Err(message) => return reply(&Reply::Error { message }),
    };
    loop {
        let (notice, master) = match rx.recv_timeout(CALLER_CHECK) {
            Ok(n) => n,
            // A caller that left holds no slot while its process runs on
            // (256 detached execs refused every later request, `stop` too).
            Err(RecvTimeoutError::Timeout) if caller_gone(conn) => break,
            Err(RecvTimeoutError::Timeout) => continue,
            Err(RecvTimeoutError::Disconnected) => break,
        };
        let (m, done) = match answer(id, notice) {
            Some(a) => a,
            None => continue,
        };
        // A terminal's master side goes to the caller with `spawned`.
        let fds: Vec<RawFd> = master.iter().map(|m| m.as_raw_fd()).collect();
        if protocol::send(conn.as_fd(), &m, &fds).is_err() || done {
            break;
        }
    }
    Ok(())
}

/// The caller's answer to one of the init's notices about exec `id`, and
/// whether it is the last.
fn answer(id: u64, notice: FromInit) -> Option<(Reply, bool)> {
    Some(match notice {
        FromInit::Spawned { pid, .. } => (Reply::Spawned { exec: id, pid }, false),
        FromInit::FileDone { .. } => return None,
        FromInit::Failed { errno, .. } => (
            Reply::Failed {
                status: if errno == libc::ENOENT { 127 } else { 126 },
                message: if errno == libc::ENOENT {
                    "command not found in the sandbox".into()
                } else {
                    format!(
                        "cannot execute: {}",
                        nix::errno::Errno::from_raw(errno).desc()
                    )
                },
            },
            true,
        ),
        FromInit::Exited { code, .. } => (
            Reply::Exited {
                exec: id,
                status: code,
                signal: None,
            },
            true,
        ),
        FromInit::Signaled { signal, .. } => (
            Reply::Exited {
                exec: id,
                status: 128 + signal,
                signal: Some(signal),
            },
            true,
        ),
    })
}

/// Keep the sandbox's first process until `release`.
fn hold(
    shared: &Arc<Shared>,
    conn: &OwnedFd,
    r: ExecRequest,
    fds: Vec<OwnedFd>,
) -> Result<(), protocol::ProtocolError> {
    let reply = |m: &Reply| protocol::send(conn.as_fd(), m, &[]);
    if let Err(message) = check_exec(shared, &r, fds.len()) {
        return reply(&Reply::Error { message });
    }
    let Ok(mut main) = shared.main.lock() else {
        return reply(&Reply::Error {
            message: "the supervisor's record of the first process is unusable".into(),
        });
    };
    if !matches!(*main, Main::None) {
        return reply(&Reply::Error {
            message: "this sandbox already has its first process".into(),
        });
    }
    // A terminal is opened now, in the sandbox's devpts, so that its
    // master side can be handed out before the process starts.
    let (terminal, master) = if r.tty {
        match open_terminal(shared, r.winsize) {
            Ok((id, master)) => (Some(id), Some(master)),
            Err(message) => return reply(&Reply::Error { message }),
        }
    } else {
        (None, None)
    };
    *main = Main::Held(r, fds, terminal);
    drop(main);
    let fds: Vec<RawFd> = master.iter().map(|m| m.as_raw_fd()).collect();
    protocol::send(conn.as_fd(), &Reply::Ok, &fds)
}

/// Have the init open a terminal in the sandbox's devpts ahead of a spawn:
/// its id and master side.
fn open_terminal(
    shared: &Arc<Shared>,
    winsize: Option<(u16, u16)>,
) -> Result<(u64, OwnedFd), String> {
    if shared.stopping.load(Ordering::Relaxed) || shared.init_gone.load(Ordering::SeqCst) {
        return Err("the sandbox is stopping".into());
    }
    let id = shared.next_file.fetch_add(1, Ordering::Relaxed);
    let (tx, rx) = sync_channel(1);
    if let Ok(mut files) = shared.files.lock() {
        files.insert(id, tx);
    }
    let forget = || {
        if let Ok(mut files) = shared.files.lock() {
            files.remove(&id);
        }
    };
    if let Err(e) = spawn::send(
        shared.channel.as_fd(),
        &ToInit::OpenTerminal { id, winsize },
        &[],
    ) {
        forget();
        return Err(warden_jail::chain_str(&e));
    }
    match rx.recv_timeout(FILE_OP_TIMEOUT) {
        Ok((0, Some(master))) => Ok((id, master)),
        Ok((errno, _)) => Err(format!(
            "cannot open the sandbox's terminal: {}",
            nix::errno::Errno::from_raw(errno).desc()
        )),
        Err(_) => {
            forget();
            Err("the sandbox's init did not open the terminal".into())
        }
    }
}

/// Start the held first process; its end ends the sandbox.
fn release(shared: &Arc<Shared>, conn: &OwnedFd) -> Result<(), protocol::ProtocolError> {
    let reply = |m: &Reply, fds: &[RawFd]| protocol::send(conn.as_fd(), m, fds);
    let Ok(mut main) = shared.main.lock() else {
        return reply(
            &Reply::Error {
                message: "the supervisor's record of the first process is unusable".into(),
            },
            &[],
        );
    };
    let (r, fds, terminal) = match std::mem::replace(&mut *main, Main::None) {
        Main::Held(r, fds, terminal) => (r, fds, terminal),
        other => {
            let message = match &other {
                Main::None => "this sandbox holds no first process to start",
                Main::Running { .. } => "the first process was started already",
                Main::Exited(_) | Main::Held(..) => "the first process has ended",
            };
            *main = other;
            return reply(
                &Reply::Error {
                    message: message.into(),
                },
                &[],
            );
        }
    };
    let (id, rx) = match launch(shared, r, fds, terminal) {
        Ok(started) => started,
        Err(message) => {
            *main = Main::Exited(126);
            drop(main);
            end_main(shared, 126);
            return reply(&Reply::Error { message }, &[]);
        }
    };
    // The first notice says whether it runs; the lock is held until then
    // so that a `status` never sees it neither held nor running.
    let (notice, master) = match rx.recv() {
        Ok(n) => n,
        Err(_) => (
            FromInit::Signaled {
                id,
                signal: libc::SIGKILL,
            },
            None,
        ),
    };
    let fds: Vec<RawFd> = master.iter().map(|m| m.as_raw_fd()).collect();
    if let FromInit::Spawned { pid, .. } = notice {
        *main = Main::Running { exec: id, pid };
        drop(main);
        let s = shared.clone();
        let _ = std::thread::Builder::new()
            .name("warden-main".into())
            .spawn(move || {
                let status = loop {
                    match rx.recv() {
                        Ok((n, _)) => match answer(id, n) {
                            Some((Reply::Exited { status, .. }, _)) => break status,
                            Some((Reply::Failed { status, .. }, _)) => break status,
                            _ => continue,
                        },
                        Err(_) => break 128 + libc::SIGKILL,
                    }
                };
                end_main(&s, status);
            });
        return reply(&Reply::Spawned { exec: id, pid }, &fds);
    }
    let (m, _) = answer(id, notice).unwrap_or((
        Reply::Error {
            message: "the first process did not start".into(),
        },
        true,
    ));
    let status = match &m {
        Reply::Failed { status, .. } | Reply::Exited { status, .. } => *status,
        _ => 126,
    };
    *main = Main::Exited(status);
    drop(main);
    end_main(shared, status);
    reply(&m, &[])
}

/// The first process ended with `status`: so does the sandbox, at once
/// (as a container's PID 1 ending takes its PID namespace with it).
fn end_main(shared: &Arc<Shared>, status: i32) {
    if let Ok(mut main) = shared.main.lock() {
        *main = Main::Exited(status);
    }
    if let Ok(mut s) = shared.main_status.lock() {
        *s = Some(status);
    }
    stop(shared, StopReason::Requested, Duration::ZERO);
}

/// Why an exec cannot be started as asked, if it cannot.
fn check_exec(shared: &Shared, r: &ExecRequest, fds: usize) -> Result<(), String> {
    if shared.stopping.load(Ordering::Relaxed) {
        return Err("the sandbox is stopping".into());
    }
    // A secret's variable holds its placeholder; an exec does not put
    // something else there (a value would be sent nowhere it should not,
    // but it would be in the sandbox), as `run --env` does not.
    if let Some((k, _)) = r.env.iter().find(|(k, _)| shared.secret_names.contains(k)) {
        return Err(format!(
            "{k} holds a secret's placeholder in this sandbox; an exec cannot set it"
        ));
    }
    if r.argv.is_empty() {
        return Err("no command to run: give one after --".into());
    }
    // Pipes come from the caller; a terminal is opened in the sandbox.
    let wanted = if r.tty { 0 } else { 3 };
    if fds != wanted {
        return Err(format!(
            "an exec {} descriptors, {} came",
            if r.tty {
                "with a terminal takes no"
            } else {
                "needs 3 (stdin, stdout, stderr)"
            },
            fds
        ));
    }
    Ok(())
}

/// Start a process in the sandbox; returns its exec number and where the
/// init's notices about it arrive.
fn launch(
    shared: &Arc<Shared>,
    r: ExecRequest,
    fds: Vec<OwnedFd>,
    terminal: Option<u64>,
) -> Result<(u64, Notices), String> {
    check_exec(shared, &r, fds.len())?;
    let id = shared.next_exec.fetch_add(1, Ordering::Relaxed);
    let (tx, rx) = sync_channel(4);
    if let Ok(mut execs) = shared.execs.lock() {
        execs.insert(
            id,
            Slot {
                argv: r.argv.clone(),
                pid: None,
                tty: r.tty,
                started: Instant::now(),
                waiter: Some(tx),
            },
        );
    }
    let raw: Vec<RawFd> = fds.iter().map(|f| f.as_raw_fd()).collect();
    let sent = spawn::send(
        shared.channel.as_fd(),
        &ToInit::Spawn {
            id,
            argv: r.argv,
            env: r.env,
            cwd: r.cwd,
            tty: r.tty,
            winsize: r.winsize,
            terminal,
        },
        &raw,
    );
    // The process holds its own copies now; ours would keep the caller's
    // pipes open after it ends.
    drop(fds);
    if let Err(e) = sent {
        if let Ok(mut execs) = shared.execs.lock() {
            execs.remove(&id);
        }
        return Err(warden_jail::chain_str(&e));
    }
    Ok((id, rx))
}

/// How long the init may take over one file operation.
const FILE_OP_TIMEOUT: Duration = Duration::from_secs(10);

/// Have the init do a file operation, and hand the caller its result (and
/// the descriptor it opened).
fn file_op(
    shared: &Arc<Shared>,
    conn: &OwnedFd,
    op: warden_jail::files::FileOp,
) -> Result<(), protocol::ProtocolError> {
    let error = |message: String| protocol::send(conn.as_fd(), &Reply::Error { message }, &[]);
    if shared.stopping.load(Ordering::Relaxed) || shared.init_gone.load(Ordering::SeqCst) {
        return error("the sandbox is stopping".into());
    }
    let id = shared.next_file.fetch_add(1, Ordering::Relaxed);
    let (tx, rx) = sync_channel(1);
    if let Ok(mut files) = shared.files.lock() {
        files.insert(id, tx);
    }
    let forget = || {
        if let Ok(mut files) = shared.files.lock() {
            files.remove(&id);
        }
    };
    if let Err(e) = spawn::send(shared.channel.as_fd(), &ToInit::File { id, file: op }, &[]) {
        forget();
        return error(warden_jail::chain_str(&e));
    }
    match rx.recv_timeout(FILE_OP_TIMEOUT) {
        Ok((errno, fd)) => {
            let fds: Vec<RawFd> = fd.iter().map(|f| f.as_raw_fd()).collect();
            protocol::send(conn.as_fd(), &Reply::File { errno }, &fds)
        }
        Err(_) => {
            forget();
            error("the sandbox's init did not answer the file operation".into())
        }
    }
}

/// How long a connection to a service inside the sandbox may take: on the
/// sandbox's own loopback it is answered at once, unless the listener's
/// queue is full.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Have the init open a socket inside the sandbox connected to `target`
/// (see `warden_jail::connect`), complete a TCP connection here (the init
/// never waits), and hand the caller the connected socket.
fn connect(
    shared: &Arc<Shared>,
    conn: &OwnedFd,
    target: warden_jail::connect::Target,
) -> Result<(), protocol::ProtocolError> {
    let error = |message: String| protocol::send(conn.as_fd(), &Reply::Error { message }, &[]);
    if let Err(e) = target.check() {
        return protocol::send(
            conn.as_fd(),
            &Reply::Refused {
                code: Refusal::Invalid,
                message: e.to_string(),
                field: None,
            },
            &[],
        );
    }
    if shared.stopping.load(Ordering::Relaxed) || shared.init_gone.load(Ordering::SeqCst) {
        return error("the sandbox is stopping".into());
    }
    let id = shared.next_file.fetch_add(1, Ordering::Relaxed);
    let (tx, rx) = sync_channel(1);
    if let Ok(mut files) = shared.files.lock() {
        files.insert(id, tx);
    }
    let tcp = matches!(target, warden_jail::connect::Target::Tcp { .. });
    if let Err(e) = spawn::send(
        shared.channel.as_fd(),
        &ToInit::Connect { id, to: target },
        &[],
    ) {
        if let Ok(mut files) = shared.files.lock() {
            files.remove(&id);
        }
        return error(warden_jail::chain_str(&e));
    }
    let (errno, fd) = match rx.recv_timeout(FILE_OP_TIMEOUT) {
        Ok(answer) => answer,
        Err(_) => {
            if let Ok(mut files) = shared.files.lock() {
                files.remove(&id);
            }
            return error("the sandbox's init did not answer the connection request".into());
        }
    };
    let (errno, fd) = match (errno, fd) {
        (0, Some(fd)) if tcp => match completed(&fd) {
            0 => (0, Some(fd)),
            e => (e, None),
        },
        (0, Some(fd)) => (0, Some(fd)),
        (0, None) => (libc::EIO, None),
        (e, _) => (e, None),
    };
    let fds: Vec<RawFd> = fd.iter().map(|f| f.as_raw_fd()).collect();
    protocol::send(conn.as_fd(), &Reply::Connect { errno }, &fds)
}

/// Wait for a TCP connection the init started: 0 once connected, else the
/// errno it failed with (ETIMEDOUT after [`CONNECT_TIMEOUT`]).
fn completed(fd: &OwnedFd) -> i32 {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    let deadline = std::time::Instant::now() + CONNECT_TIMEOUT;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return libc::ETIMEDOUT;
        }
        let mut fds = [PollFd::new(fd.as_fd(), PollFlags::POLLOUT)];
        let ms = u16::try_from(left.as_millis()).unwrap_or(u16::MAX);
        match poll(&mut fds, PollTimeout::from(ms)) {
            Ok(0) | Err(nix::errno::Errno::EINTR) => continue,
            Ok(_) => {
                return match nix::sys::socket::getsockopt(
                    fd,
                    nix::sys::socket::sockopt::SocketError,
                ) {
                    Ok(e) => e,
                    Err(e) => e as i32,
                }
            }
            Err(e) => return e as i32,
        }
    }
}

/// Whether the caller has closed its end of `conn` (it sends nothing after
/// its request).
fn caller_gone(conn: &OwnedFd) -> bool {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    let mut fds = [PollFd::new(conn.as_fd(), PollFlags::POLLIN)];
    poll(&mut fds, PollTimeout::ZERO).is_ok()
        && fds[0]
            .revents()
            .is_some_and(|r| r.intersects(PollFlags::POLLHUP | PollFlags::POLLERR))
}

/// Read the init's notices: record each exec's start and end, and tell the
/// caller waiting for it.
fn read_notices(shared: &Arc<Shared>) {
    while let Ok(Some((notice, master))) = spawn::receive(shared.channel.as_fd()) {
        if let FromInit::FileDone { id, errno } = notice {
            let waiter = shared.files.lock().ok().and_then(|mut f| f.remove(&id));
            if let Some(w) = waiter {
                let _ = w.try_send((errno, master));
            }
            continue;
        }
        let Ok(mut execs) = shared.execs.lock() else {
            break;
        };
        let id = match &notice {
            FromInit::FileDone { id, .. } => *id,
            FromInit::Spawned { id, .. }
            | FromInit::Failed { id, .. }
            | FromInit::Exited { id, .. }
            | FromInit::Signaled { id, .. } => *id,
        };
        let Some(slot) = execs.get_mut(&id) else {
            continue;
        };
        match &notice {
            FromInit::Spawned { pid, .. } => {
                slot.pid = Some(*pid);
                shared.bus.emit(EventKind::ExecStarted {
                    exec: id,
                    argv: slot.argv.clone(),
                    pid: *pid,
                    tty: slot.tty,
                })
            }
            other => {
                let (status, signal) = match other {
                    FromInit::Failed { errno, .. } => {
                        (if *errno == libc::ENOENT { 127 } else { 126 }, None)
                    }
                    FromInit::Exited { code, .. } => (*code, None),
                    FromInit::Signaled { signal, .. } => (128 + signal, Some(*signal)),
                    FromInit::Spawned { .. } | FromInit::FileDone { .. } => (0, None),
                };
                shared.bus.emit(EventKind::ExecExited {
                    exec: id,
                    status,
                    signal,
                    duration_ms: slot.started.elapsed().as_millis() as u64,
                });
            }
        }
        let ended = !matches!(notice, FromInit::Spawned { .. });
        if let Some(w) = &slot.waiter {
            if ended {
                // Whoever is told of the end may read the log next: the
                // exit is written there first (outside the table's lock).
                let w = w.clone();
                execs.remove(&id);
                drop(execs);
                shared.bus.written();
                let _ = w.try_send((notice.clone(), master));
                end_of_one_shot(shared, id);
                continue;
            }
            if w.try_send((notice.clone(), master)).is_err() {
                slot.waiter = None;
            }
        }
        if ended {
            execs.remove(&id);
            drop(execs);
            end_of_one_shot(shared, id);
        }
    }
    shared.init_gone.store(true, Ordering::SeqCst);
    // The init is gone, and every process with it: killed, or (at the
    // sandbox's --timeout) timed out, 124 as for `warden run`.
    let timed_out = shared.timed_out.load(Ordering::SeqCst);
    if let Ok(mut execs) = shared.execs.lock() {
        for (id, slot) in execs.drain() {
            let (status, signal) = if timed_out {
                (124, None)
            } else {
                (128 + libc::SIGKILL, Some(libc::SIGKILL))
            };
            shared.bus.emit(EventKind::ExecExited {
                exec: id,
                status,
                signal,
                duration_ms: slot.started.elapsed().as_millis() as u64,
            });
            if let Some(w) = slot.waiter {
                let notice = if timed_out {
                    FromInit::Exited { id, code: 124 }
                } else {
                    FromInit::Signaled {
                        id,
                        signal: libc::SIGKILL,
                    }
                };
                let _ = w.try_send((notice, None));
            }
        }
    }
}

/// After command `id` ended: in a detached run, the end of its first
/// command is the end of its sandbox (what it left behind gets a moment
/// to finish).
fn end_of_one_shot(shared: &Arc<Shared>, id: u64) {
    if shared.one_shot && id == 1 {
        let s = shared.clone();
        let _ = std::thread::Builder::new()
            .name("warden-one-shot".into())
            .spawn(move || stop(&s, StopReason::Requested, Duration::from_secs(2)));
    }
}

/// SIGTERM to every process, then, after `grace` (or as soon as none is
/// left), the end of the sandbox.
fn stop(shared: &Arc<Shared>, reason: StopReason, grace: Duration) {
    if shared.stopping.swap(true, Ordering::SeqCst) {
        return;
    }
    shared.bus.emit(EventKind::Stopping { reason });
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
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline && !descendants(shared.init.as_raw()).is_empty() {
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = spawn::send(shared.channel.as_fd(), &ToInit::Shutdown, &[]);
    // An init that does not go (it always does) is killed, and with it
    // the whole sandbox; one that went has closed the channel (its PID may
    // be another process's by now: never signalled then).
    std::thread::sleep(Duration::from_secs(2));
    if !shared.init_gone.load(Ordering::SeqCst) {
        let _ = nix::sys::signal::kill(shared.init, nix::sys::signal::Signal::SIGKILL);
    }
}

/// Stop the sandbox when its TTL deadline passes; the deadline may be
/// moved (or removed) while this waits.
fn watch_ttl(shared: &Arc<Shared>) {
    let Ok(mut deadline) = shared.ttl_deadline_ms.lock() else {
        return;
    };
    loop {
        if shared.stopping.load(Ordering::SeqCst) || shared.init_gone.load(Ordering::SeqCst) {
            return;
        }
        let wait = match *deadline {
            Some(d) => {
                let now = state::now_ms();
                if now >= d {
                    drop(deadline);
                    stop(shared, StopReason::Ttl, TTL_GRACE);
                    return;
                }
                Duration::from_millis(d - now)
            }
            // Looked at now and then: a sandbox that stops ends this thread.
            None => Duration::from_secs(5),
        };
        deadline = match shared.ttl_changed.wait_timeout(deadline, wait) {
            Ok((d, _)) => d,
            Err(_) => return,
        };
    }
}

fn status(shared: &Shared) -> Status {
    let memory_bytes = shared.cgroups.iter().find_map(|cg| {
        ["memory.current", "memory.usage_in_bytes"]
            .iter()
            .find_map(|f| {
                std::fs::read_to_string(cg.join(f))
                    .ok()?
                    .trim()
                    .parse()
                    .ok()
            })
    });
    // cgroup v2's cpu.stat, or v1's cpuacct (nanoseconds).
    let cpu_usec = shared.cgroups.iter().find_map(|cg| {
        let v2 = std::fs::read_to_string(cg.join("cpu.stat"))
            .ok()
            .and_then(|stat| {
                stat.lines()
                    .find_map(|l| l.strip_prefix("usage_usec "))
                    .and_then(|v| v.trim().parse().ok())
            });
        v2.or_else(|| {
            std::fs::read_to_string(cg.join("cpuacct.usage"))
                .ok()?
                .trim()
                .parse::<u64>()
                .ok()
                .map(|ns| ns / 1000)
        })
    });
    Status {
        sandbox: shared.bus.sandbox().to_string(),
        cpu_usec,
        init_pid: shared.init.as_raw(),
        started_ms: shared.started_ms,
        ttl_deadline_ms: shared.ttl_deadline_ms.lock().map(|d| *d).unwrap_or(None),
        processes: descendants(shared.init.as_raw()).len(),
        execs: shared.execs.lock().map(|e| e.len()).unwrap_or(0),
        memory_bytes,
        egress_bytes: shared.bus.egress_bytes(),
        main: shared.main.lock().ok().and_then(|m| match &*m {
            Main::None => None,
            Main::Held(..) => Some(MainState::Held),
            Main::Running { exec, pid } => Some(MainState::Running {
                exec: *exec,
                pid: *pid,
            }),
            Main::Exited(status) => Some(MainState::Exited { status: *status }),
        }),
        desktop: shared
            .desktop
            .lock()
            .ok()
            .and_then(|d| d.as_ref().and_then(|b| b.lock().ok().map(|b| b.clone()))),
    }
}

/// Starts a desktop's programs as execs of the sandbox.
struct DesktopLauncher(Arc<Shared>);

impl crate::desktop::services::Launcher for DesktopLauncher {
    fn launch(
        &self,
        argv: Vec<String>,
        stdio: [OwnedFd; 3],
    ) -> Result<(i32, crate::desktop::services::Ending), String> {
        let req = ExecRequest {
            argv,
            env: Vec::new(),
            cwd: None,
            tty: false,
            winsize: None,
        };
        let (id, rx) = launch(&self.0, req, stdio.into(), None)?;
        let ended = |n: &FromInit| match n {
            FromInit::Exited { code, .. } => Some(*code),
            FromInit::Signaled { signal, .. } => Some(128 + signal),
            _ => None,
        };
        match rx.recv() {
            Ok((FromInit::Spawned { pid, .. }, _)) => Ok((
                pid,
                Box::new(move || loop {
                    match rx.recv() {
                        Ok((n, _)) => {
                            if let Some(status) = ended(&n) {
                                return status;
                            }
                        }
                        Err(_) => return 128 + libc::SIGKILL,
                    }
                }),
            )),
            Ok((FromInit::Failed { errno, .. }, _)) => Err(format!(
                "exec {id} cannot start: {}",
                nix::errno::Errno::from_raw(errno).desc()
            )),
            Ok((n, _)) => Err(format!(
                "exec {id} ended before it ran (status {})",
                ended(&n).unwrap_or(-1)
            )),
            Err(_) => Err("the sandbox is gone".into()),
        }
    }

    fn stopping(&self) -> bool {
        self.0.stopping.load(Ordering::SeqCst) || self.0.init_gone.load(Ordering::SeqCst)
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
