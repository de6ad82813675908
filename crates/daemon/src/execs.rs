//! Commands the daemon starts in sandboxes. A command's output goes to
//! files in its sandbox's state directory (not through the daemon: through
//! pipes to relays in the sandbox's supervisor, which keep the files within
//! the sandbox's output budget and note what they dropped, see
//! [`warden_runtime::output`]), so it keeps running, and its output is
//! kept, when the daemon is killed; the daemon streams from those files,
//! and learns of the end from the supervisor (or, after a restart, from
//! the sandbox's event log).

use std::collections::HashMap;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;
use warden_runtime::client::{ClientError, Connection};
use warden_runtime::protocol;
use warden_workspace::Sandbox;

use crate::api::{ExecEvent, ExecRequest};
use crate::db::ExecRow;
use crate::error::{chain, ApiError};

/// How a command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ended {
    pub status: i32,
    pub signal: Option<i32>,
    pub timed_out: bool,
}

/// A command started by this daemon (or found running at its start).
pub struct ExecHandle {
    pub row: ExecRow,
    pub pid: Option<i32>,
    pub stdout: PathBuf,
    pub stderr: PathBuf,
    stdin: Mutex<Option<File>>,
    pub ended: watch::Receiver<Option<Ended>>,
    ended_tx: watch::Sender<Option<Ended>>,
    timed_out: std::sync::atomic::AtomicBool,
    /// When it ended (ms since the epoch), 0 while it runs.
    finished_ms: std::sync::atomic::AtomicU64,
    control: PathBuf,
}

/// The directory of a sandbox's command outputs.
pub fn dir_of(sb: &Sandbox) -> PathBuf {
    sb.dir().join(warden_runtime::output::EXECS_DIR)
}

/// Where command `id`'s output is kept: where every door's detached
/// commands keep theirs (`warden logs --exec` reads them there too).
fn output_paths(sb: &Sandbox, id: &str) -> (PathBuf, PathBuf) {
    let [out, err] = warden_runtime::output::kept_paths(sb.dir(), id);
    (out, err)
}

fn create_output(path: &Path) -> Result<File, ApiError> {
    std::fs::OpenOptions::new()
        .create_new(true)
        .append(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| ApiError::internal(format!("cannot create {}: {e}", path.display())))
}

/// The argv an exec request names.
pub fn argv_of(req: &ExecRequest, default: &[String]) -> Result<Vec<String>, ApiError> {
    match (&req.argv, &req.shell) {
        (Some(_), Some(_)) => {
            Err(ApiError::bad_request("give `argv` or `shell`, not both")
                .with_field(Some("/shell")))
        }
        (Some(a), None) if a.is_empty() || a[0].is_empty() => {
            Err(ApiError::bad_request("`argv` is empty: name a program").with_field(Some("/argv")))
        }
        (Some(a), None) => Ok(a.clone()),
        (None, Some(s)) => Ok(vec!["sh".into(), "-c".into(), s.clone()]),
        (None, None) if default.is_empty() => Err(ApiError::bad_request(
            "no command: give `argv` (e.g. [\"ls\", \"-l\"]) or `shell` (e.g. \"ls -l | wc -l\")",
        )),
        (None, None) => Ok(default.to_vec()),
    }
}

/// Refuse variables and arguments the spawn protocol cannot carry.
pub fn check_command(
    argv: &[String],
    env: &std::collections::BTreeMap<String, String>,
) -> Result<(), ApiError> {
    for (k, v) in env {
        if k.is_empty() || k.contains('=') || k.contains('\0') || v.contains('\0') {
            return Err(ApiError::bad_request(format!(
                "environment variable {k:?} is not a valid NAME (no '=', no NUL)"
            ))
            .with_field(Some("/env")));
        }
    }
    if argv.iter().any(|a| a.contains('\0')) {
        return Err(ApiError::bad_request("an argument holds a NUL byte").with_field(Some("/argv")));
    }
    Ok(())
}

/// Start `req` in the running sandbox `sb`, holding `lease` (the caller's
/// place among its long-lived answers, [`crate::leases`]) for as long as
/// the command runs: its connection to the supervisor and the thread that
/// waits for its end are held that long, whoever reads it. Blocking: call
/// it off the async runtime.
pub fn start(
    sb: &Sandbox,
    id: &str,
    argv: Vec<String>,
    req: &ExecRequest,
    lease: Option<crate::leases::Lease>,
) -> Result<Arc<ExecHandle>, ApiError> {
    start_as(sb, id, argv, req, lease, None)
}

/// [`start`] for a command of the daemon's own, recorded as `role` (a
/// caller's command has none): a restarted daemon knows it again by its
/// record, never by what runs in the sandbox.
pub fn start_as(
    sb: &Sandbox,
    id: &str,
    argv: Vec<String>,
    req: &ExecRequest,
    lease: Option<crate::leases::Lease>,
    role: Option<crate::db::ExecRole>,
) -> Result<Arc<ExecHandle>, ApiError> {
    check_command(&argv, &req.env)?;
    let d = dir_of(sb);
    std::fs::create_dir_all(&d)
        .map_err(|e| ApiError::internal(format!("cannot create {}: {e}", d.display())))?;
    let (out_path, err_path) = output_paths(sb, id);
    let out = create_output(&out_path)?;
    let err = create_output(&err_path)?;
    // Standard input: a pipe kept (or fed and closed), else /dev/null.
    let (stdin_r, stdin_w): (OwnedFd, Option<File>) = if req.stdin_open || req.stdin.is_some() {
        let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
            .map_err(|e| ApiError::internal(format!("cannot make a pipe: {e}")))?;
        (r, Some(File::from(w)))
    } else {
        let null = File::open("/dev/null")
            .map_err(|e| ApiError::internal(format!("cannot open /dev/null: {e}")))?;
        (OwnedFd::from(null), None)
    };
    let control = warden_runtime::lifecycle::control(sb);
    // A command refused before it starts leaves no output behind.
    let unkept = || {
        let _ = std::fs::remove_file(&out_path);
        let _ = std::fs::remove_file(&err_path);
    };
    let conn = Connection::open(&control).map_err(|e| {
        unkept();
        match e {
            ClientError::NotRunning { .. } => ApiError::not_running(format!(
                "sandbox {} is not running: start it with POST /v1/sandboxes/{0}/start",
                sb.name()
            )),
            e => ApiError::supervisor(&e),
        }
    })?;
    let supervisor_pid = conn.supervisor_pid;
    let preq = protocol::ExecRequest {
        argv: argv.clone(),
        env: req
            .env
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        cwd: req.cwd.clone(),
        tty: false,
        winsize: None,
        keep_output: Some(id.to_string()),
    };
    let running = match conn.exec(preq, &[stdin_r.as_fd(), out.as_fd(), err.as_fd()]) {
        Ok(r) => r,
        Err(ClientError::ExecFailed { status, message }) => {
            unkept();
            let code = if status == 127 {
                "not_found"
            } else {
                "not_executable"
            };
            return Err(
                ApiError::new(axum::http::StatusCode::UNPROCESSABLE_ENTITY, code, message)
                    .with_field(Some("/argv")),
            );
        }
        Err(e @ ClientError::Rejected { .. }) => {
            unkept();
            return Err(crate::routes::pause::refusal(sb.name(), e));
        }
        Err(e) => {
            unkept();
            return Err(ApiError::internal(chain(&e)));
        }
    };
    drop(stdin_r);
    let mut stdin_w = stdin_w;
    if let (Some(data), Some(w)) = (req.stdin.clone(), stdin_w.as_ref()) {
        // Fed from a thread: more than a pipe holds must not block here.
        let keep_open = req.stdin_open;
        let mut w = match w.try_clone() {
            Ok(w) => w,
            Err(e) => return Err(ApiError::internal(format!("cannot feed stdin: {e}"))),
        };
        std::thread::spawn(move || {
            let _ = w.write_all(data.as_bytes());
        });
        if !keep_open {
            stdin_w = None;
        }
    }
    let (tx, rx) = watch::channel(None);
    let row = ExecRow {
        holder: lease.as_ref().and_then(|l| l.holder()).map(str::to_string),
        role,
        ..ExecRow::started(
            id.to_string(),
            sb.name().to_string(),
            running.exec,
            supervisor_pid,
            argv,
            false,
        )
    };
    let handle = Arc::new(ExecHandle {
        row,
        pid: Some(running.pid),
        stdout: out_path,
        stderr: err_path,
        stdin: Mutex::new(stdin_w),
        ended: rx,
        ended_tx: tx,
        timed_out: std::sync::atomic::AtomicBool::new(false),
        finished_ms: std::sync::atomic::AtomicU64::new(0),
        control,
    });
    let h = handle.clone();
    std::thread::spawn(move || {
        let _held = lease;
        let ended = match running.wait() {
            Ok(s) => Ended {
                status: s.status,
                signal: s.signal,
                timed_out: false,
            },
            Err(_) => Ended {
                status: 128 + libc_sigkill(),
                signal: Some(libc_sigkill()),
                timed_out: false,
            },
        };
        h.finish(ended);
    });
    if let Some(t) = req.timeout_seconds {
        let h = handle.clone();
        let t = Duration::from_secs_f64(t);
        std::thread::spawn(move || {
            let mut rx = h.ended.clone();
            let start = std::time::Instant::now();
            while start.elapsed() < t {
                if rx.borrow_and_update().is_some() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20).min(t));
            }
            h.timed_out.store(true, std::sync::atomic::Ordering::SeqCst);
            let _ = h.signal(libc_sigkill());
        });
    }
    Ok(handle)
}

fn libc_sigkill() -> i32 {
    nix::sys::signal::Signal::SIGKILL as i32
}

impl ExecHandle {
    /// A handle for a command the records say was running when the
    /// daemon (re)started; `watch` learns its end.
    pub fn adopt(sb: &Sandbox, row: ExecRow) -> Arc<ExecHandle> {
        let (out, err) = output_paths(sb, &row.id);
        let (tx, rx) = watch::channel(None);
        Arc::new(ExecHandle {
            row,
            pid: None,
            stdout: out,
            stderr: err,
            stdin: Mutex::new(None),
            ended: rx,
            ended_tx: tx,
            timed_out: std::sync::atomic::AtomicBool::new(false),
            finished_ms: std::sync::atomic::AtomicU64::new(0),
            control: warden_runtime::lifecycle::control(sb),
        })
    }

    /// Record its end (once).
    pub fn finish(&self, mut ended: Ended) {
        if self.timed_out.load(std::sync::atomic::Ordering::SeqCst) {
            ended.timed_out = true;
            ended.status = 124;
        }
        self.ended_tx.send_if_modified(|e| {
            if e.is_none() {
                self.finished_ms.store(
                    warden_runtime::state::now_ms(),
                    std::sync::atomic::Ordering::SeqCst,
                );
                *e = Some(ended);
                true
            } else {
                false
            }
        });
    }

    /// When it ended.
    pub fn finished_ms(&self) -> Option<u64> {
        match self.finished_ms.load(std::sync::atomic::Ordering::SeqCst) {
            0 => self.row.finished_ms,
            t => Some(t),
        }
    }

    /// What its output relays dropped past the sandbox's output budget.
    pub fn cut(&self) -> warden_runtime::output::OutputCut {
        match self.stdout.parent() {
            Some(dir) => warden_runtime::output::OutputCut::read(dir, &self.row.id),
            None => Default::default(),
        }
    }

    pub fn ended_now(&self) -> Option<Ended> {
        *self.ended.borrow()
    }

    /// Send a signal to it (and its group). Blocking.
    pub fn signal(&self, signal: i32) -> Result<(), ApiError> {
        let ended = || ApiError::conflict(format!("command {} has ended", self.row.id));
        if self.ended_now().is_some() {
            return Err(ended());
        }
        let conn = Connection::open(&self.control).map_err(|e| ApiError::conflict(chain(&e)))?;
        // The supervisor's numbers start again with each start of the
        // sandbox: under another supervisor than the one that ran it, its
        // number names another command (one a caller started since),
        // never this one, which ended with its supervisor.
        if conn.supervisor_pid != self.row.supervisor_pid {
            return Err(ended());
        }
        conn.signal(self.row.runtime_exec, signal)
            .map_err(|e| ApiError::internal(chain(&e)))
    }

    /// Write to its standard input; `close` closes it after.
    pub fn write_stdin(&self, data: &[u8], close: bool) -> Result<(), ApiError> {
        let mut guard = self
            .stdin
            .lock()
            .map_err(|_| ApiError::internal("stdin lock poisoned"))?;
        let Some(w) = guard.as_mut() else {
            return Err(ApiError::conflict(format!(
                "command {}'s standard input is closed (start it with \"stdin_open\": true to write to it later)",
                self.row.id
            )));
        };
        if !data.is_empty() {
            // A command that does not read must not hold a request: the
            // pipe is written without blocking, and what does not fit is
            // refused.
            let fd = w.as_fd();
            let flags = nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_GETFL)
                .map(nix::fcntl::OFlag::from_bits_truncate)
                .unwrap_or(nix::fcntl::OFlag::empty());
            let _ = nix::fcntl::fcntl(
                fd,
                nix::fcntl::FcntlArg::F_SETFL(flags | nix::fcntl::OFlag::O_NONBLOCK),
            );
            match w.write_all(data) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    return Err(ApiError::new(
                        axum::http::StatusCode::SERVICE_UNAVAILABLE,
                        "stdin_full",
                        "the command is not reading its standard input fast enough; try again",
                    ))
                }
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
                    *guard = None;
                    return Err(ApiError::conflict("the command closed its standard input"));
                }
                Err(e) => return Err(ApiError::internal(format!("cannot write stdin: {e}"))),
            }
        }
        if close {
            *guard = None;
        }
        Ok(())
    }
}

/// Output read so far, per stream.
#[derive(Debug, Clone, Copy, Default)]
pub struct Offsets {
    pub stdout: u64,
    pub stderr: u64,
}

/// New output since `from`, at most `max` bytes per stream.
pub fn read_new(h: &ExecHandle, from: &mut Offsets, max: usize) -> Vec<ExecEvent> {
    let mut out = Vec::new();
    for (path, off, is_out) in [
        (&h.stdout, &mut from.stdout, true),
        (&h.stderr, &mut from.stderr, false),
    ] {
        let Ok(mut f) = File::open(path) else {
            continue;
        };
        if f.seek(SeekFrom::Start(*off)).is_err() {
            continue;
        }
        let mut buf = vec![0u8; max];
        let n = f.read(&mut buf).unwrap_or(0);
        if n == 0 {
            continue;
        }
        buf.truncate(n);
        // Whole UTF-8 characters only, unless the bytes are not UTF-8.
        let cut = utf8_prefix(&buf);
        let chunk = if cut > 0 { &buf[..cut] } else { &buf[..] };
        let (data, data_base64) = text_or_base64(chunk);
        let offset = *off;
        *off += chunk.len() as u64;
        out.push(if is_out {
            ExecEvent::Stdout {
                data,
                data_base64,
                offset,
            }
        } else {
            ExecEvent::Stderr {
                data,
                data_base64,
                offset,
            }
        });
    }
    out
}

/// The longest prefix of `buf` that does not end inside a UTF-8
/// character (0 when none is).
fn utf8_prefix(buf: &[u8]) -> usize {
    match std::str::from_utf8(buf) {
        Ok(_) => buf.len(),
        Err(e) if e.error_len().is_none() => e.valid_up_to(),
        Err(_) => buf.len(),
    }
}

/// Text when the bytes are UTF-8, else base64.
pub fn text_or_base64(bytes: &[u8]) -> (Option<String>, Option<String>) {
    use base64::Engine;
    match std::str::from_utf8(bytes) {
        Ok(s) => (Some(s.to_string()), None),
        Err(_) => (
            None,
            Some(base64::engine::general_purpose::STANDARD.encode(bytes)),
        ),
    }
}

/// The commands this daemon knows of, by id.
pub type Table = Mutex<HashMap<String, Arc<ExecHandle>>>;

/// Whether the sandbox whose state is in `dir` is still run by the
/// supervisor of PID `pid`: its record names that PID, and the process of
/// that PID is the one that started then. A PID alone could have been
/// taken by any process since (the sandbox stopped and started, or gone,
/// while no daemon watched), and a command of a gone supervisor, taken for
/// running, would hold its place for good.
fn supervised_by(dir: &Path, pid: u32) -> bool {
    use warden_runtime::state;
    state::read_json::<state::SupervisorRecord>(&dir.join(state::SUPERVISOR))
        .is_ok_and(|rec| rec.pid == pid && state::alive(&rec))
}

/// Learn how an adopted command ended: from the sandbox's event log if it
/// is there, else by following the supervisor until it is; `lease` (its
/// place, restored from its record) is held until then.
pub fn watch_adopted(sb: &Sandbox, h: Arc<ExecHandle>, lease: Option<crate::leases::Lease>) {
    let dir = sb.dir().to_path_buf();
    // Followed from where the last look ended (see [`crate::exitwatch`]).
    let mut watch = crate::exitwatch::ExitWatch::new(
        sb.dir().join("audit.jsonl"),
        h.row.runtime_exec,
        h.row.started_ms,
    );
    let mut find = move |_: &ExecHandle| -> Option<Ended> {
        watch.look().map(|(status, signal)| Ended {
            status,
            signal,
            timed_out: false,
        })
    };
    std::thread::spawn(move || loop {
        let _held = &lease;
        if let Some(e) = find(&h) {
            h.finish(e);
            return;
        }
        // The supervisor that ran it is gone: so is the command.
        if !supervised_by(&dir, h.row.supervisor_pid) {
            if let Some(e) = find(&h) {
                h.finish(e);
            } else {
                h.finish(Ended {
                    status: 128 + libc_sigkill(),
                    signal: Some(libc_sigkill()),
                    timed_out: false,
                });
            }
            return;
        }
        std::thread::sleep(Duration::from_millis(200));
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(dir: &Path, pid: u32, start_ticks: u64) {
        let rec = serde_json::json!({
            "pid": pid, "start_ticks": start_ticks, "started_ms": 1, "cgroups": [],
        });
        std::fs::write(dir.join(warden_runtime::state::SUPERVISOR), rec.to_string()).unwrap();
    }

    #[test]
    fn an_adopted_command_runs_only_while_the_supervisor_that_ran_it_does() {
        let dir = std::env::temp_dir().join(format!("warden-supervised-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let me = std::process::id();
        let ticks = warden_runtime::state::start_ticks(me).unwrap();
        // No record: the sandbox stopped.
        assert!(!supervised_by(&dir, me));
        record(&dir, me, ticks);
        assert!(supervised_by(&dir, me));
        // Another supervisor runs the sandbox now (a stop and a start): the
        // command's own is gone, even though a process has its PID.
        let parent = std::os::unix::process::parent_id();
        record(
            &dir,
            parent,
            warden_runtime::state::start_ticks(parent).unwrap(),
        );
        assert!(!supervised_by(&dir, me));
        // A reused PID: the process of that PID started at another time.
        record(&dir, me, ticks + 1);
        assert!(!supervised_by(&dir, me));
        let _ = std::fs::remove_file(dir.join(warden_runtime::state::SUPERVISOR));
        let _ = std::fs::remove_dir(&dir);
    }
}
