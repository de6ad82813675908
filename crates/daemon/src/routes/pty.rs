//! An interactive process on a terminal in a sandbox, over a WebSocket.
//!
//! The process is started through the sandbox's supervisor like any
//! exec (the same spawn path, the same restrictions, the same
//! `exec_started`/`exec_exited` events in the sandbox's audit log), with
//! a terminal the sandbox's init opens in the sandbox's own devpts; the
//! supervisor hands its master side back (SCM_RIGHTS) and the daemon
//! relays it: binary frames carry the terminal's bytes both ways, text
//! frames carry JSON control messages (`resize`, `signal`; from the
//! daemon `started`, then `exit` as the last message before the close).
//! A process whose WebSocket goes away is killed: nothing started here
//! outlives its session unseen.

use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use warden_runtime::client::{ClientError, Connection, ExecStatus};
use warden_runtime::{lifecycle, protocol};

use super::sandboxes::blocking;
use crate::api::{PtyClientMessage, PtyServerMessage, PtyStart};
use crate::app::App;
use crate::credential::Credential;
use crate::error::{chain, ApiError, Problem};
use crate::leases::Kind;

/// How long a session without a command in its query waits for `start`.
const START_WAIT: Duration = Duration::from_secs(30);
/// How long the daemon waits for the client's side of the close.
const CLOSE_WAIT: Duration = Duration::from_secs(5);
/// Most bytes of one message from the client.
const MAX_MESSAGE: usize = 1 << 20;
/// Most bytes read from the terminal into one frame.
const CHUNK: usize = 64 * 1024;
/// What is read from the terminal once the process has ended: as much as
/// a terminal holds (a process it left behind on the terminal may write
/// for ever).
const DRAIN: usize = 1 << 20;
/// How often the relay's threads look whether the session ended (ms).
const POLL_MS: u16 = 100;
/// Largest window the terminal takes, either way.
const MAX_SIDE: u16 = 4096;
/// How often a relay holding the client's input (its process reads
/// none) pings the client: the socket is not read meanwhile, so a client
/// that left would go unseen; a ping to a connection its peer closed
/// fails at the latest at the next one.
const PROBE: Duration = Duration::from_secs(1);

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct PtyQuery {
    /// A command line for `sh -c`, started at once. Without it the
    /// client's first message is a `start` (see `PtyClientMessage`).
    pub shell: Option<String>,
    /// Working directory inside the sandbox (default `/workspace`).
    pub cwd: Option<String>,
    /// The terminal's rows (24 when not given).
    pub rows: Option<u16>,
    /// The terminal's columns (80 when not given).
    pub cols: Option<u16>,
}

fn check_size(rows: Option<u16>, cols: Option<u16>) -> Result<(u16, u16), ApiError> {
    let rows = rows.unwrap_or(24);
    let cols = cols.unwrap_or(80);
    if rows == 0 || cols == 0 || rows > MAX_SIDE || cols > MAX_SIDE {
        return Err(ApiError::bad_request(format!(
            "a terminal of {rows} rows by {cols} columns: each from 1 to {MAX_SIDE}"
        )));
    }
    Ok((rows, cols))
}

/// What the session needs of its sandbox, learnt before the upgrade.
struct Target {
    sandbox: String,
    control: PathBuf,
    default: Vec<String>,
}

#[utoipa::path(get, path = "/v1/sandboxes/{id}/pty", params(("id" = String, Path), PtyQuery),
    responses(
        (status = 101, description = "a WebSocket: binary frames are the terminal's bytes both ways; text frames are JSON, PtyClientMessage from the client and PtyServerMessage from the daemon (`exit` last)", body = PtyServerMessage),
        (status = 400, body = Problem), (status = 404, body = Problem), (status = 409, body = Problem)),
    security(("token" = [])))]
pub async fn pty(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    axum::Extension(credential): axum::Extension<Credential>,
    query: Result<Query<PtyQuery>, axum::extract::rejection::QueryRejection>,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Result<Response, ApiError> {
    let Query(q) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let (rows, cols) = check_size(q.rows, q.cols)?;
    let start = q.shell.map(|shell| PtyStart {
        shell: Some(shell),
        cwd: q.cwd,
        rows: Some(rows),
        cols: Some(cols),
        ..PtyStart::default()
    });
    // The sandbox exists and runs: said in HTTP, before the upgrade.
    let a = app.clone();
    let target = blocking(move || {
        let sb = a.sandbox(&id)?;
        if !lifecycle::liveness(&sb).running() {
            return Err(ApiError::not_running(format!(
                "sandbox {id} is not running: start it with POST /v1/sandboxes/{id}/start"
            )));
        }
        let stored: Option<warden_runtime::state::Stored> =
            warden_runtime::state::read_json(&sb.dir().join(warden_runtime::state::STORED)).ok();
        Ok(Target {
            sandbox: sb.name().to_string(),
            control: lifecycle::control(&sb),
            default: stored.map(|s| s.spec.command).unwrap_or_default(),
        })
    })
    .await?;
    let upgrade = upgrade.map_err(|e| {
        ApiError::bad_request(format!(
            "GET .../pty is a WebSocket: connect with a WebSocket client ({})",
            e.body_text()
        ))
    })?;
    // Said in HTTP too: a token past its bound opens nothing.
    let lease = app.leases.take(&credential, Kind::Terminal)?;
    Ok(upgrade
        .max_message_size(MAX_MESSAGE)
        .on_upgrade(move |socket| async move {
            session(socket, app, credential, target, start).await;
            drop(lease);
        })
        .into_response())
}

async fn send_json(socket: &mut WebSocket, m: &PtyServerMessage) -> bool {
    let text = serde_json::to_string(m).unwrap_or_default();
    socket.send(Message::Text(text.into())).await.is_ok()
}

/// Say what went wrong and close.
async fn fail(mut socket: WebSocket, e: ApiError, shown: &Shown<'_>) {
    let m = PtyServerMessage::Error {
        code: e.problem.code,
        message: shown.text(&e.problem.message),
    };
    let _ = send_json(&mut socket, &m).await;
    let _ = socket
        .send(Message::Close(Some(CloseFrame {
            // 1008: policy violation; 1011 for the daemon's own faults.
            code: if e.status.is_server_error() {
                1011
            } else {
                1008
            },
            reason: "".into(),
        })))
        .await;
    closing(socket).await;
}

/// How a session's messages are shown to whoever opened it: a caller
/// (not the owner) is shown no host path ([`super::redact::for_caller`]),
/// and what it asked to start (its argv, working directory, variables)
/// as it asked it.
struct Shown<'a> {
    app: &'a App,
    caller: bool,
    said: Vec<String>,
}

impl Shown<'_> {
    fn text(&self, message: &str) -> String {
        match self.caller {
            true => super::redact::for_caller(self.app, message, &self.said),
            false => message.to_string(),
        }
    }

    /// The words of `start`, the caller's own.
    fn asked(&mut self, start: &PtyStart) {
        self.said = start
            .argv
            .iter()
            .flatten()
            .chain(start.shell.iter())
            .chain(start.cwd.iter())
            .chain(start.env.iter().flat_map(|(k, v)| [k, v]))
            .cloned()
            .collect();
    }
}

/// What a session is told when its credential no longer stands.
fn gone() -> ApiError {
    ApiError::new(
        axum::http::StatusCode::UNAUTHORIZED,
        "unauthorized",
        "the token this terminal was opened with was revoked, or its session ended: nothing was started",
    )
}

/// The client's `start` message.
async fn first_start(socket: &mut WebSocket) -> Result<PtyStart, ApiError> {
    let wrong = || {
        ApiError::bad_request(
            "the first message of a session whose query names no `shell` is {\"type\":\"start\", ...}",
        )
    };
    let m = tokio::time::timeout(START_WAIT, socket.recv())
        .await
        .map_err(|_| {
            ApiError::bad_request(format!("no start message within {}s", START_WAIT.as_secs()))
        })?;
    match m {
        Some(Ok(Message::Text(t))) => match serde_json::from_str::<PtyClientMessage>(&t) {
            Ok(PtyClientMessage::Start(s)) => Ok(s),
            Ok(_) => Err(wrong()),
            Err(e) => Err(ApiError::bad_request(format!(
                "the start message does not fit: {e}"
            ))),
        },
        _ => Err(wrong()),
    }
}

/// Start the process on a terminal (blocking): the supervisor's answer
/// and the terminal's master side.
/// A started session: its process, its terminal, and its record.
struct Spawned {
    running: warden_runtime::client::Running,
    master: OwnedFd,
    row: crate::db::ExecRow,
}

fn spawn(app: &App, target: &Target, start: PtyStart) -> Result<Spawned, ApiError> {
    let (rows, cols) = check_size(start.rows, start.cols)?;
    let default = if target.default.is_empty() {
        vec!["sh".to_string()]
    } else {
        target.default.clone()
    };
    let argv = match (start.argv, start.shell) {
        (Some(_), Some(_)) => {
            return Err(ApiError::bad_request("give `argv` or `shell`, not both"))
        }
        (Some(a), None) if a.is_empty() || a[0].is_empty() => {
            return Err(ApiError::bad_request("`argv` is empty: name a program"))
        }
        (Some(a), None) => a,
        (None, Some(s)) => vec!["sh".into(), "-c".into(), s],
        (None, None) => default,
    };
    crate::execs::check_command(&argv, &start.env)?;
    let conn = Connection::open(&target.control).map_err(|e| match e {
        ClientError::NotRunning { .. } => ApiError::not_running(chain(&e)),
        e => ApiError::supervisor(&e),
    })?;
    let supervisor_pid = conn.supervisor_pid;
    let req = protocol::ExecRequest {
        argv: argv.clone(),
        env: start.env.into_iter().collect(),
        cwd: start.cwd,
        tty: true,
        winsize: Some((rows, cols)),
        keep_output: None,
    };
    let mut running = match conn.exec(req, &[]) {
        Ok(r) => r,
        Err(ClientError::ExecFailed { status, message }) => {
            let code = if status == 127 {
                "not_found"
            } else {
                "not_executable"
            };
            return Err(ApiError::new(
                axum::http::StatusCode::UNPROCESSABLE_ENTITY,
                code,
                message,
            ));
        }
        Err(e @ ClientError::Refused(_)) => return Err(ApiError::conflict(chain(&e))),
        Err(e) if e.is_busy() => return Err(ApiError::supervisor(&e)),
        Err(e) => return Err(ApiError::internal(chain(&e))),
    };
    let Some(master) = running.take_master() else {
        let _ = signal(&target.control, running.exec, libc_sigkill());
        return Err(ApiError::internal("the supervisor sent no terminal"));
    };
    // In the sandbox's command records, as a terminal session.
    let row = crate::db::ExecRow::started(
        format!("ex-{}", crate::auth::random_id(8)),
        target.sandbox.clone(),
        running.exec,
        supervisor_pid,
        argv,
        true,
    );
    let recorded = app.db().and_then(|db| {
        db.insert_exec(&row)
            .map_err(|e| ApiError::internal(chain(&e)))
    });
    if let Err(e) = recorded {
        let _ = signal(&target.control, running.exec, libc_sigkill());
        return Err(e);
    }
    Ok(Spawned {
        running,
        master,
        row,
    })
}

/// The end of a session killed by the daemon.
fn killed() -> ExecStatus {
    ExecStatus {
        status: 128 + libc_sigkill(),
        signal: Some(libc_sigkill()),
    }
}

/// Record a session's end.
fn finish(app: &App, row: &crate::db::ExecRow, status: &ExecStatus) {
    if let Ok(db) = app.db() {
        let _ = db.finish_exec(
            &row.id,
            status.status,
            status.signal,
            warden_runtime::state::now_ms(),
        );
    }
}

/// Signal the session's process (and its group) through the supervisor.
fn signal(control: &std::path::Path, exec: u64, sig: i32) -> Result<(), ApiError> {
    let conn = Connection::open(control).map_err(|e| ApiError::conflict(chain(&e)))?;
    conn.signal(exec, sig)
        .map_err(|e| ApiError::internal(chain(&e)))
}

async fn session(
    mut socket: WebSocket,
    app: Arc<App>,
    credential: Credential,
    target: Target,
    start: Option<PtyStart>,
) {
    let app_ref = app.clone();
    let mut shown = Shown {
        app: &app_ref,
        caller: credential.revocable(),
        said: Vec::new(),
    };
    // One check from the upgrade on: the wait for the start message, the
    // spawn and the relay all end with the credential.
    let revoked = app.clone().revoked(credential.clone());
    tokio::pin!(revoked);
    let start = match start {
        Some(s) => s,
        None => {
            let first = tokio::select! {
                first = first_start(&mut socket) => first,
                () = &mut revoked => Err(gone()),
            };
            match first {
                Ok(s) => s,
                Err(e) => return fail(socket, e, &shown).await,
            }
        }
    };
    shown.asked(&start);
    let target = Arc::new(target);
    let (t, a, c) = (target.clone(), app.clone(), credential.clone());
    // Asked once more right before the process starts: a revocation
    // within the last second before the start message starts nothing.
    let spawned = match blocking(move || {
        if !a.still_granted(&c) {
            return Err(gone());
        }
        spawn(&a, &t, start)
    })
    .await
    {
        Ok(s) => s,
        Err(e) => return fail(socket, e, &shown).await,
    };
    let Spawned {
        running,
        master,
        row,
    } = spawned;
    let (exec, pid) = (running.exec, running.pid);
    if nix::fcntl::fcntl(
        &master,
        nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK),
    )
    .is_err()
    {
        let _ = blocking(move || {
            let _ = signal(&target.control, exec, libc_sigkill());
            finish(&app, &row, &killed());
            Ok(())
        })
        .await;
        return fail(
            socket,
            ApiError::internal("cannot relay the terminal"),
            &shown,
        )
        .await;
    }
    let master = Arc::new(master);
    if !send_json(&mut socket, &PtyServerMessage::Started { pid }).await {
        let _ = blocking(move || {
            let _ = signal(&target.control, exec, libc_sigkill());
            finish(&app, &row, &killed());
            Ok(())
        })
        .await;
        return;
    }
    // The end, learnt from the supervisor, on a thread of the session's
    // own: a wait as long as the process never holds a thread of the
    // runtime's pool, which every other request needs.
    let (ended_tx, ended_rx) = tokio::sync::watch::channel(false);
    let (status_tx, waiter) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let status = running.wait();
        let _ = ended_tx.send(true);
        let _ = status_tx.send(status);
    });
    let (out_tx, out_rx) = mpsc::channel::<bytes::Bytes>(8);
    let stop = Arc::new(AtomicBool::new(false));
    let (m, s) = (master.clone(), stop.clone());
    std::thread::spawn(move || read_terminal(m, out_tx, ended_rx, s));
    let (in_tx, in_rx) = mpsc::channel::<bytes::Bytes>(64);
    let (m, s) = (master.clone(), stop.clone());
    std::thread::spawn(move || write_terminal(m, in_rx, s));
    let io = Relay {
        master: &master,
        control: &target.control,
        exec,
        out_rx,
        in_tx,
    };
    let ended = relay(&mut socket, io, revoked).await;
    stop.store(true, Ordering::Relaxed);
    drop(master);
    if !ended {
        // The client went away: its process goes too.
        let control = target.control.clone();
        let _ = blocking(move || signal(&control, exec, libc_sigkill())).await;
    }
    let status = match waiter.await {
        Ok(Ok(s)) => s,
        Ok(Err(_)) | Err(_) => killed(),
    };
    let _ = blocking(move || {
        finish(&app, &row, &status);
        Ok(())
    })
    .await;
    if !ended {
        return;
    }
    let exit = PtyServerMessage::Exit {
        exit_status: status.status,
        signal: status.signal,
    };
    if send_json(&mut socket, &exit).await {
        let _ = socket
            .send(Message::Close(Some(CloseFrame {
                code: 1000,
                reason: "".into(),
            })))
            .await;
        closing(socket).await;
    }
}

/// Wait (a little) for the client's answer to our close: a client whose
/// reply meets a connection already gone may lose the messages it had
/// not yet handed on, the exit status among them.
async fn closing(mut socket: WebSocket) {
    let _ = tokio::time::timeout(CLOSE_WAIT, async {
        while let Some(Ok(_)) = socket.recv().await {}
    })
    .await;
}

/// The terminal's side of a relay.
struct Relay<'a> {
    master: &'a OwnedFd,
    control: &'a std::path::Path,
    exec: u64,
    out_rx: mpsc::Receiver<bytes::Bytes>,
    in_tx: mpsc::Sender<bytes::Bytes>,
}

/// Relay until the process has ended and its last output is sent (true),
/// or the client is gone (false), or what the client was let in with no
/// longer stands (its token revoked, its browser session ended: false,
/// after saying so).
async fn relay(
    socket: &mut WebSocket,
    io: Relay<'_>,
    mut revoked: std::pin::Pin<&mut impl std::future::Future<Output = ()>>,
) -> bool {
    let Relay {
        master,
        control,
        exec,
        mut out_rx,
        in_tx,
    } = io;
    // Input waiting for room: the socket is not read meanwhile, so a
    // process that reads nothing slows its client down, not the daemon;
    // and its client's leaving is learnt by pinging it ([`PROBE`]).
    let mut pending: Option<bytes::Bytes> = None;
    let mut probe = tokio::time::interval(PROBE);
    probe.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The one check every long-lived answer makes ([`crate::revocation`]).
    loop {
        tokio::select! {
            () = revoked.as_mut() => {
                let m = PtyServerMessage::Error {
                    code: "unauthorized".into(),
                    message: "the token this terminal was opened with was revoked, or its session ended: the terminal and its process end".into(),
                };
                send_json(socket, &m).await;
                return false;
            },
            out = out_rx.recv() => match out {
                Some(bytes) => {
                    if socket.send(Message::Binary(bytes)).await.is_err() {
                        return false;
                    }
                }
                // The reader ends after the process has ended and what it
                // wrote last was read.
                None => return true,
            },
            permit = in_tx.reserve(), if pending.is_some() => {
                if let (Ok(p), Some(data)) = (permit, pending.take()) {
                    p.send(data);
                }
            },
            _ = probe.tick(), if pending.is_some() => {
                if socket.send(Message::Ping(bytes::Bytes::new())).await.is_err() {
                    return false;
                }
            },
            m = socket.recv(), if pending.is_none() => match m {
                Some(Ok(Message::Binary(data))) => pending = Some(data),
                Some(Ok(Message::Text(text))) => {
                    if let Err(e) = control_message(master, control, exec, &text).await {
                        let m = PtyServerMessage::Error {
                            code: e.problem.code,
                            message: e.problem.message,
                        };
                        if !send_json(socket, &m).await {
                            return false;
                        }
                    }
                }
                Some(Ok(Message::Ping(_) | Message::Pong(_))) => {}
                Some(Ok(Message::Close(_)) | Err(_)) | None => return false,
            },
        }
    }
}

/// A `resize` or `signal` from the client.
async fn control_message(
    master: &OwnedFd,
    control: &std::path::Path,
    exec: u64,
    text: &str,
) -> Result<(), ApiError> {
    let m: PtyClientMessage = serde_json::from_str(text).map_err(|e| {
        ApiError::bad_request(format!(
            "a text message is {{\"type\":\"resize\",\"rows\":R,\"cols\":C}} or {{\"type\":\"signal\",\"signal\":\"SIGINT\"}}: {e}"
        ))
    })?;
    match m {
        PtyClientMessage::Resize { rows, cols } => {
            let (rows, cols) = check_size(Some(rows), Some(cols))?;
            warden_runtime::client::resize_terminal(master.as_fd(), rows, cols);
            Ok(())
        }
        PtyClientMessage::Signal { signal: s } => {
            let sig = super::exec::signal_number(&s).ok_or_else(|| {
                ApiError::bad_request(format!(
                    "{s} is not a signal: give a number or a name such as \"SIGINT\""
                ))
            })?;
            let control = control.to_path_buf();
            blocking(move || signal(&control, exec, sig)).await
        }
        PtyClientMessage::Start(_) => Err(ApiError::conflict("the session runs already")),
    }
}

/// Wait until `fd` is ready for `flags`, at most `POLL`: whether it is.
fn ready(fd: &OwnedFd, flags: nix::poll::PollFlags) -> Result<bool, nix::errno::Errno> {
    use nix::poll::{poll, PollFd, PollTimeout};
    let mut fds = [PollFd::new(fd.as_fd(), flags)];
    match poll(&mut fds, PollTimeout::from(POLL_MS)) {
        Ok(n) => Ok(n > 0),
        Err(nix::errno::Errno::EINTR) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Terminal output to `out` until the terminal is closed, or, once the
/// process has ended, until nothing more is there to read (a thread: the
/// terminal is read with poll, without registering its descriptor with
/// tokio, which would need `unsafe`).
pub(crate) fn read_terminal(
    master: Arc<OwnedFd>,
    out: mpsc::Sender<bytes::Bytes>,
    ended: tokio::sync::watch::Receiver<bool>,
    stop: Arc<AtomicBool>,
) {
    use nix::errno::Errno;
    let mut buf = vec![0u8; CHUNK];
    let mut drained = 0usize;
    let wait_end = |stop: &AtomicBool| {
        while !*ended.borrow() && !stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(POLL_MS.into()));
        }
    };
    loop {
        if stop.load(Ordering::Relaxed) {
            return;
        }
        let done = *ended.borrow();
        if !done {
            match ready(&master, nix::poll::PollFlags::POLLIN) {
                Ok(true) => {}
                Ok(false) => continue,
                Err(_) => return wait_end(&stop),
            }
        }
        match nix::unistd::read(&master, &mut buf) {
            Ok(n) if n > 0 => {
                if done {
                    drained += n;
                    if drained > DRAIN {
                        return;
                    }
                }
                if out
                    .blocking_send(bytes::Bytes::copy_from_slice(&buf[..n]))
                    .is_err()
                {
                    return;
                }
            }
            Err(Errno::EINTR) => {}
            Err(Errno::EAGAIN) if !done => {}
            // Nothing more now that it ended, or every holder of the
            // terminal's other side is gone (EIO): the end itself comes
            // through the supervisor.
            _ => return wait_end(&stop),
        }
    }
}

/// The client's input to the terminal (a thread, as the reader).
pub(crate) fn write_terminal(
    master: Arc<OwnedFd>,
    mut input: mpsc::Receiver<bytes::Bytes>,
    stop: Arc<AtomicBool>,
) {
    use nix::errno::Errno;
    while let Some(data) = input.blocking_recv() {
        let mut rest = &data[..];
        while !rest.is_empty() {
            if stop.load(Ordering::Relaxed) {
                return;
            }
            match nix::unistd::write(&*master, rest) {
                Ok(n) => rest = &rest[n..],
                Err(Errno::EAGAIN) => {
                    if ready(&master, nix::poll::PollFlags::POLLOUT).is_err() {
                        return;
                    }
                }
                Err(Errno::EINTR) => {}
                Err(_) => return,
            }
        }
    }
}

fn libc_sigkill() -> i32 {
    nix::sys::signal::Signal::SIGKILL as i32
}
