//! Processes on a terminal for the process service: started by the
//! supervisor as the native terminal route starts one (on a terminal of
//! the sandbox's own devpts), recorded as a terminal session, its output
//! appended by [`crate::routes::pty`]'s reader to a file beside the native
//! commands' outputs, its input written by that module's writer.

use std::io::Write;
use std::os::fd::OwnedFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use tokio::sync::{mpsc, watch};
use warden_runtime::client::{ClientError, Connection, Running};
use warden_runtime::{lifecycle, protocol};

use super::{argv_of, remember, Kind, Proc, ProcessConfig, Pty, Size, Stream};
use crate::e2b::connect::{Code, RpcError};
use crate::e2b::E2b;
use crate::execs::{self, Ended};
use crate::leases::Lease;

/// A terminal's end of things.
pub struct Terminal {
    pub(super) control: PathBuf,
    pub(super) exec: u64,
    pub(super) master: Arc<OwnedFd>,
    pub(super) input: mpsc::Sender<bytes::Bytes>,
}

/// A process on a terminal, as the native terminal route starts one; its
/// output is appended to a file beside the native commands' outputs, while
/// the sandbox's output budget lasts (then dropped).
/// Blocking.
pub(super) fn start(
    e: &E2b,
    sb: &str,
    config: ProcessConfig,
    tag: Option<String>,
    pty: Pty,
    lease: Lease,
) -> Result<Arc<Proc>, RpcError> {
    let argv = argv_of(&config);
    execs::check_command(&argv, &config.envs)?;
    let sandbox = e.app.sandbox(sb)?;
    let control = lifecycle::control(&sandbox);
    let mut spawned = spawn(sb, &control, &config, argv, &pty)?;
    let Some(master) = spawned.running.take_master() else {
        let _ = conn_signal(&control, spawned.running.exec);
        return Err(RpcError::new(
            Code::Internal,
            "the supervisor sent no terminal",
        ));
    };
    let _ = nix::fcntl::fcntl(
        &master,
        nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK),
    );
    let output = Output::create(&sandbox)?;
    let (exec, pid) = (spawned.running.exec, spawned.running.pid);
    let row = record(e, sb, &control, &spawned)?;
    let master = Arc::new(master);
    let (ended_tx, ended_rx) = watch::channel(None);
    let (gone_tx, gone_rx) = watch::channel(false);
    let status: Arc<Mutex<Option<Ended>>> = Arc::new(Mutex::new(None));
    watch_end(e, spawned.running, row, status.clone(), gone_tx);
    let out_path = output.path.clone();
    let ends = Ends {
        gone: gone_rx,
        status,
        ended: ended_tx,
        lease,
    };
    keep_output(&sandbox, output, master.clone(), ends);
    let (in_tx, in_rx) = mpsc::channel::<bytes::Bytes>(64);
    let m = master.clone();
    std::thread::spawn(move || {
        crate::routes::pty::write_terminal(m, in_rx, Arc::new(AtomicBool::new(false)))
    });
    let proc = Arc::new(Proc {
        pid: pid.max(0) as u32,
        tag,
        config,
        outputs: vec![(out_path, Stream::Pty)],
        ended: ended_rx,
        kind: Kind::Terminal(Terminal {
            control,
            exec,
            master,
            input: in_tx,
        }),
    });
    remember(e, sb, proc.clone())?;
    Ok(proc)
}

/// A command the supervisor started on a terminal, before its terminal is
/// taken.
struct Spawned {
    running: Running,
    supervisor_pid: u32,
    argv: Vec<String>,
}

/// Ask `sandbox`'s supervisor (at `control`) to start the command on a
/// terminal of the asked size (80x24 if none; each side within 1..=4096).
fn spawn(
    sandbox: &str,
    control: &Path,
    config: &ProcessConfig,
    argv: Vec<String>,
    pty: &Pty,
) -> Result<Spawned, RpcError> {
    let size = pty.size.unwrap_or(Size { cols: 80, rows: 24 });
    let (rows, cols) = (size.rows.clamp(1, 4096), size.cols.clamp(1, 4096));
    let conn = Connection::open(control).map_err(|err| match err {
        ClientError::NotRunning { .. } => {
            RpcError::new(Code::FailedPrecondition, crate::error::chain(&err))
        }
        err if err.is_busy() => super::busy(sandbox),
        err => RpcError::new(Code::Internal, crate::error::chain(&err)),
    })?;
    let supervisor_pid = conn.supervisor_pid;
    let req = protocol::ExecRequest {
        argv: argv.clone(),
        env: config
            .envs
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        cwd: config.cwd.clone(),
        tty: true,
        winsize: Some((rows, cols)),
        keep_output: None,
    };
    let running = match conn.exec(req, &[]) {
        Ok(r) => r,
        Err(ClientError::ExecFailed { message, .. }) => {
            return Err(RpcError::new(Code::InvalidArgument, message))
        }
        Err(err) if err.is_busy() => return Err(super::busy(sandbox)),
        Err(err) => return Err(RpcError::new(Code::Internal, crate::error::chain(&err))),
    };
    Ok(Spawned {
        running,
        supervisor_pid,
        argv,
    })
}

/// The file a terminal's output is appended to, beside the native
/// commands' outputs in the sandbox's directory.
struct Output {
    dir: PathBuf,
    path: PathBuf,
    file: std::fs::File,
}

impl Output {
    fn create(sandbox: &warden_workspace::Sandbox) -> Result<Self, RpcError> {
        let dir = execs::dir_of(sandbox);
        std::fs::create_dir_all(&dir).map_err(|err| {
            RpcError::new(
                Code::Internal,
                format!("cannot create {}: {err}", dir.display()),
            )
        })?;
        let path = dir.join(format!("pty-{}.out", crate::auth::random_id(8)));
        let file = std::fs::OpenOptions::new()
            .create_new(true)
            .append(true)
            .mode(0o600)
            .open(&path)
            .map_err(|err| {
                RpcError::new(
                    Code::Internal,
                    format!("cannot create {}: {err}", path.display()),
                )
            })?;
        Ok(Output { dir, path, file })
    }
}

/// In the sandbox's command records, as a terminal session (as the native
/// terminal route records one); a command that cannot be recorded is
/// killed.
fn record(
    e: &E2b,
    sb: &str,
    control: &Path,
    spawned: &Spawned,
) -> Result<crate::db::ExecRow, RpcError> {
    let row = crate::db::ExecRow::started(
        format!("ex-{}", crate::auth::random_id(8)),
        sb.to_string(),
        spawned.running.exec,
        spawned.supervisor_pid,
        spawned.argv.clone(),
        true,
    );
    if let Err(err) = e.app.db().and_then(|db| {
        db.insert_exec(&row)
            .map_err(|err| crate::error::ApiError::internal(crate::error::chain(&err)))
    }) {
        let _ = conn_signal(control, spawned.running.exec);
        return Err(err.into());
    }
    Ok(row)
}

/// The end, from the supervisor: recorded in the command's row and in
/// `status`, then told on `gone` (a command whose end cannot be read is
/// taken as killed).
fn watch_end(
    e: &E2b,
    running: Running,
    row: crate::db::ExecRow,
    status: Arc<Mutex<Option<Ended>>>,
    gone: watch::Sender<bool>,
) {
    let app = e.app.clone();
    std::thread::spawn(move || {
        let kill = nix::sys::signal::Signal::SIGKILL as i32;
        let ended = match running.wait() {
            Ok(s) => Ended {
                status: s.status,
                signal: s.signal,
                timed_out: false,
            },
            Err(_) => Ended {
                status: 128 + kill,
                signal: Some(kill),
                timed_out: false,
            },
        };
        if let Ok(db) = app.db() {
            let _ = db.finish_exec(
                &row.id,
                ended.status,
                ended.signal,
                warden_runtime::state::now_ms(),
            );
        }
        if let Ok(mut g) = status.lock() {
            *g = Some(ended);
        }
        let _ = gone.send(true);
    });
}

/// How a terminal's end is learnt and told, and the place among its
/// caller's long-lived answers it holds until then.
struct Ends {
    gone: watch::Receiver<bool>,
    status: Arc<Mutex<Option<Ended>>>,
    ended: watch::Sender<Option<Ended>>,
    lease: Lease,
}

/// The terminal's output, to its file; the end is told on `ended` once the
/// last of it is there, and the terminal's place given back then.
fn keep_output(
    sandbox: &warden_workspace::Sandbox,
    output: Output,
    master: Arc<OwnedFd>,
    ends: Ends,
) {
    let Ends {
        gone,
        status,
        ended,
        lease,
    } = ends;
    let (out_tx, mut out_rx) = mpsc::channel::<bytes::Bytes>(8);
    std::thread::spawn(move || {
        crate::routes::pty::read_terminal(master, out_tx, gone, Arc::new(AtomicBool::new(false)))
    });
    // Kept within the sandbox's output budget, as its commands' outputs
    // are (looked at again every MiB): past it, read on and dropped.
    let budget = warden_runtime::output::budget_of_sandbox(sandbox.dir());
    let Output { dir, mut file, .. } = output;
    let kept = move || warden_runtime::output::kept_bytes(&dir) >= budget;
    std::thread::spawn(move || {
        let mut full = kept();
        let mut since = 0;
        while let Some(chunk) = out_rx.blocking_recv() {
            if full {
                continue;
            }
            if file.write_all(&chunk).is_err() {
                break;
            }
            since += chunk.len();
            if since >= 1 << 20 {
                since = 0;
                full = kept();
            }
        }
        let end = status.lock().ok().and_then(|g| *g);
        let kill = nix::sys::signal::Signal::SIGKILL as i32;
        let _ = ended.send(Some(end.unwrap_or(Ended {
            status: 128 + kill,
            signal: Some(kill),
            timed_out: false,
        })));
        drop(lease);
    });
}

/// Kill a terminal's process that could not be recorded.
fn conn_signal(control: &Path, exec: u64) -> Result<(), ClientError> {
    Connection::open(control)?.signal(exec, nix::sys::signal::Signal::SIGKILL as i32)
}
