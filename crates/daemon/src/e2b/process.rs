//! envd's process service (`process.Process`): start a process (on pipes
//! or a terminal) and stream its output and end, connect to a running one,
//! list them, write to standard input, close it, signal, resize a
//! terminal. A process on pipes is the native exec ([`crate::execs`]: its
//! output goes to files in the sandbox's state directory, so a later
//! connect reads it there, and it is listed by the native API too); one
//! on a terminal is started by the supervisor as the native terminal
//! route starts one, its output appended to a file of the same place by
//! the terminal reader of [`crate::routes::pty`]. E2B selects a process by
//! its PID: the PID inside the sandbox.
//!
//! Each stream (Start, Connect, StreamInput) takes a place among its
//! caller's long-lived answers ([`crate::leases`]) before anything starts,
//! and gives it back when its client goes or its process ends; a process
//! keeps the place its Start took for as long as it runs, on a terminal or
//! on pipes (either holds threads of the daemon and a connection to its
//! supervisor whether or not a client reads it). Past the caller's bound
//! the stream ends at once with `resource_exhausted` (the SDK's
//! `RateLimitException`).
//!
//! A process on a terminal is `terminal.rs`'s, the input streamed to a
//! process `stream_input.rs`'s: both parts of this service.

mod stream_input;
mod terminal;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use axum::Extension;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom};
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use warden_runtime::client::Connection;

use super::connect::{self, Code, RpcError};
use super::{paths, permit, E2b};
use crate::api::ExecRequest;
use crate::auth::Caller;
use crate::credential::Credential;
use crate::execs::{self, Ended, ExecHandle};
use crate::leases::{self, Lease};
use terminal::Terminal;

/// How often a running process's output files are looked at.
const POLL: Duration = Duration::from_millis(20);
/// Most bytes of one stream in one message.
const CHUNK: u64 = 64 * 1024;
/// How often a quiet stream says it is alive, unless the client asks for
/// another interval (`Keepalive-Ping-Interval`, seconds, as envd takes it).
const KEEPALIVE: Duration = Duration::from_secs(50);

/// The keepalive interval a request asks for, between 1 s and 10 min.
fn keepalive_of(headers: &HeaderMap) -> Duration {
    headers
        .get("keepalive-ping-interval")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(|s| Duration::from_secs(s.clamp(1, 600)))
        .unwrap_or(KEEPALIVE)
}

/// `process.ProcessConfig`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ProcessConfig {
    cmd: String,
    args: Vec<String>,
    pub(super) envs: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) cwd: Option<String>,
}

#[derive(Debug, Clone, Copy, Default, Deserialize)]
#[serde(default)]
pub(super) struct Size {
    pub(super) cols: u16,
    pub(super) rows: u16,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub(super) struct Pty {
    pub(super) size: Option<Size>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct StartRequest {
    process: ProcessConfig,
    pty: Option<Pty>,
    tag: Option<String>,
    stdin: Option<bool>,
}

/// `process.ProcessSelector`: a PID (a number, or its decimal text as
/// proto3 JSON allows) or a tag.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub(super) struct Selector {
    pid: Option<serde_json::Value>,
    tag: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct Selected {
    pub(super) process: Selector,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct Input {
    stdin: Option<String>,
    pty: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct SendInputRequest {
    pub(super) process: Selector,
    pub(super) input: Input,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct SendSignalRequest {
    process: Selector,
    signal: serde_json::Value,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct UpdateRequest {
    process: Selector,
    pty: Option<Pty>,
}

/// Which output a file holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Stream {
    Stdout,
    Stderr,
    Pty,
}

pub(super) enum Kind {
    Pipes(Arc<ExecHandle>),
    Terminal(Terminal),
}

/// A process started through the sandbox API.
pub struct Proc {
    pub(super) pid: u32,
    pub(super) tag: Option<String>,
    pub(super) config: ProcessConfig,
    pub(super) outputs: Vec<(PathBuf, Stream)>,
    pub(super) ended: watch::Receiver<Option<Ended>>,
    pub(super) kind: Kind,
}

impl Proc {
    fn running(&self) -> bool {
        self.ended.borrow().is_none()
    }

    /// Blocking.
    fn signal(&self, sig: i32) -> Result<(), RpcError> {
        if !self.running() {
            return Err(RpcError::new(
                Code::NotFound,
                format!("process {} has ended", self.pid),
            ));
        }
        match &self.kind {
            Kind::Pipes(h) => h.signal(sig).map_err(RpcError::from),
            Kind::Terminal(t) => Connection::open(&t.control)
                .and_then(|c| c.signal(t.exec, sig))
                .map_err(|e| RpcError::new(Code::Internal, crate::error::chain(&e))),
        }
    }
}

fn b64(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn unb64(s: &str) -> Result<Vec<u8>, RpcError> {
    use base64::Engine;
    let e = base64::engine::general_purpose::STANDARD;
    e.decode(s.as_bytes())
        .or_else(|_| base64::engine::general_purpose::URL_SAFE.decode(s.as_bytes()))
        .map_err(|err| RpcError::new(Code::InvalidArgument, format!("input is not base64: {err}")))
}

/// The process `sel` names in sandbox `sb`.
pub(super) fn find(e: &E2b, sb: &str, sel: &Selector) -> Result<Arc<Proc>, RpcError> {
    let pid = match &sel.pid {
        Some(serde_json::Value::Number(n)) => n.as_u64(),
        Some(serde_json::Value::String(s)) => s.parse().ok(),
        _ => None,
    };
    let procs = e
        .procs
        .lock()
        .map_err(|_| RpcError::new(Code::Internal, "the process table lock is poisoned"))?;
    let found = procs.get(sb).and_then(|list| {
        list.iter()
            .rev()
            .find(|p| match (pid, &sel.tag) {
                (Some(pid), _) => u64::from(p.pid) == pid,
                (None, Some(tag)) => p.tag.as_deref() == Some(tag.as_str()),
                (None, None) => false,
            })
            .cloned()
    });
    found.ok_or_else(|| {
        RpcError::new(
            Code::NotFound,
            format!(
                "no process {} in sandbox {sb}",
                pid.map(|p| p.to_string())
                    .or_else(|| sel.tag.clone())
                    .unwrap_or_default()
            ),
        )
    })
}

/// `POST /process.Process/{method}`.
pub async fn rpc(
    State(e): State<Arc<E2b>>,
    Extension(caller): Extension<Caller>,
    Extension(credential): Extension<Credential>,
    Path(method): Path<String>,
    req: axum::extract::Request,
) -> Response {
    let (parts, body) = req.into_parts();
    let headers = parts.headers;
    let Some(sb) = super::sandbox_header(&headers) else {
        return RpcError::new(Code::InvalidArgument, "no E2b-Sandbox-Id header")
            .into_response_unary();
    };
    let allowed = permit(
        &e.app,
        &caller,
        "POST",
        "/v1/sandboxes/{id}/exec",
        Some(&sb),
    );
    let streaming = matches!(method.as_str(), "Start" | "Connect" | "StreamInput");
    let codec = match connect::Codec::of(&headers, "process.Process", &method, streaming) {
        Ok(c) => c,
        Err(r) => return *r,
    };
    if let Err(why) = allowed {
        let err = RpcError::new(Code::PermissionDenied, why);
        return if streaming {
            codec.stream_error(err)
        } else {
            err.into_response_unary()
        };
    }
    // A stream's place, before its body is read or anything started.
    let lease = match streaming {
        true => match e.app.leases.take(&credential, leases::Kind::CommandStream) {
            Ok(l) => Some(l),
            Err(err) => return codec.stream_error(RpcError::from(err)),
        },
        false => None,
    };
    if method == "StreamInput" {
        let answer = stream_input::serve(&e, &sb, &codec, body).await;
        drop(lease);
        return answer;
    }
    // Every other call is one message, read whole (up to the API's limit).
    let body = match axum::body::to_bytes(body, e.app.limits.body_bytes).await {
        Ok(b) => b,
        Err(err) => {
            let err = RpcError::new(
                Code::InvalidArgument,
                format!("the request could not be read whole: {err}"),
            );
            return if streaming {
                codec.stream_error(err)
            } else {
                err.into_response_unary()
            };
        }
    };
    match method.as_str() {
        "Start" => match (codec.stream_request::<StartRequest>(&body), lease) {
            (Ok(req), Some(lease)) => match mcp_gateway(&e, &caller, &sb, req).await {
                Ok(req) => start(e, sb, req, (keepalive_of(&headers), lease), codec).await,
                Err(err) => codec.stream_error(err),
            },
            (Err(r), _) => *r,
            (Ok(_), None) => {
                codec.stream_error(RpcError::new(Code::Internal, "a stream without its place"))
            }
        },
        "Connect" => match (codec.stream_request::<Selected>(&body), lease) {
            (Ok(req), Some(lease)) => {
                attach(e, sb, req.process, (keepalive_of(&headers), lease), codec).await
            }
            (Err(r), _) => *r,
            (Ok(_), None) => {
                codec.stream_error(RpcError::new(Code::Internal, "a stream without its place"))
            }
        },
        "List" => match codec.request::<serde_json::Value>(&body) {
            Ok(_) => codec.response(list(&e, &sb)),
            Err(r) => *r,
        },
        "SendInput" => match codec.request::<SendInputRequest>(&body) {
            Ok(req) => codec.response(send_input(&e, &sb, req).await),
            Err(r) => *r,
        },
        "SendSignal" => match codec.request::<SendSignalRequest>(&body) {
            Ok(req) => codec.response(send_signal(&e, &sb, req).await),
            Err(r) => *r,
        },
        "CloseStdin" => match codec.request::<Selected>(&body) {
            Ok(req) => codec.response(close_stdin(&e, &sb, req.process).await),
            Err(r) => *r,
        },
        "Update" => match codec.request::<UpdateRequest>(&body) {
            Ok(req) => codec.response(update(&e, &sb, req)),
            Err(r) => *r,
        },
        other => RpcError::new(
            Code::Unimplemented,
            format!("process.Process/{other} is not served by warden"),
        )
        .into_response_unary(),
    }
}

impl RpcError {
    fn into_response_unary(self) -> Response {
        axum::response::IntoResponse::into_response(self)
    }
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, RpcError> + Send + 'static,
) -> Result<T, RpcError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|err| RpcError::new(Code::Internal, format!("a worker failed: {err}")))?
}

/// The SDK's start of E2B's MCP gateway, on a sandbox made with `mcp`:
/// its token taken, the command made `true` ([`super::mcp::gateway`]).
async fn mcp_gateway(
    e: &Arc<E2b>,
    caller: &Caller,
    sb: &str,
    mut req: StartRequest,
) -> Result<StartRequest, RpcError> {
    let (e, caller, sb) = (e.clone(), caller.clone(), sb.to_string());
    blocking(move || {
        let p = &mut req.process;
        super::mcp::gateway(&e, &caller, &sb, &p.cmd, &mut p.args, &mut p.envs).map_err(|r| {
            let code = match r.status {
                StatusCode::BAD_REQUEST => Code::InvalidArgument,
                StatusCode::FORBIDDEN => Code::PermissionDenied,
                StatusCode::NOT_FOUND => Code::NotFound,
                _ => Code::Internal,
            };
            RpcError::new(code, r.message)
        })?;
        Ok(req)
    })
    .await
}

async fn start(
    e: Arc<E2b>,
    sb: String,
    req: StartRequest,
    (keepalive, lease): (Duration, Lease),
    codec: connect::Codec,
) -> Response {
    let mut config = req.process;
    if config.cmd.is_empty() {
        return codec.stream_error(RpcError::new(
            Code::InvalidArgument,
            "process.cmd is empty: name a program",
        ));
    }
    let home = paths::home(&e.app, &sb);
    config.cwd = Some(paths::cwd(&home, config.cwd.as_deref()));
    let tag = req.tag;
    let stdin = req.stdin.unwrap_or(false);
    let e2 = e.clone();
    let cfg = config.clone();
    // The process keeps the stream's place for as long as it runs, on a
    // terminal or on pipes: either holds threads of the daemon and a
    // connection to the supervisor whether or not a client reads it.
    let proc = match req.pty {
        Some(pty) => blocking(move || terminal::start(&e2, &sb, cfg, tag, pty, lease)).await,
        None => blocking(move || start_pipes(&e2, &sb, cfg, tag, stdin, lease)).await,
    };
    let proc = match proc {
        Ok(p) => p,
        Err(err) => return codec.stream_error(err),
    };
    if let Some(h) = match &proc.kind {
        Kind::Pipes(h) => Some(h.clone()),
        Kind::Terminal(_) => None,
    } {
        e.app.watch_end(h);
    }
    let (tx, response) = codec.channel();
    tokio::spawn(async move {
        relay(proc, tx, None, keepalive).await;
    });
    response
}

pub(super) fn argv_of(config: &ProcessConfig) -> Vec<String> {
    let mut argv = vec![config.cmd.clone()];
    argv.extend(config.args.iter().cloned());
    argv
}

pub(super) fn remember(e: &E2b, sb: &str, proc: Arc<Proc>) -> Result<(), RpcError> {
    let mut procs = e
        .procs
        .lock()
        .map_err(|_| RpcError::new(Code::Internal, "the process table lock is poisoned"))?;
    let list = procs.entry(sb.to_string()).or_default();
    // Ended processes are forgotten once a newer one starts.
    list.retain(|p| p.running());
    list.push(proc);
    Ok(())
}

/// A process refused because its sandbox's supervisor serves as many
/// connections as it may (each running process holds one), in this door's
/// words: `resource_exhausted`, Connect's 429, which the SDK raises as
/// RateLimitException. Nothing was started.
pub(super) fn busy(sb: &str) -> RpcError {
    RpcError::new(
        Code::ResourceExhausted,
        format!(
            "sandbox {sb} runs as many processes as it serves at once: nothing was started; start it again once one of them ends, or kill one"
        ),
    )
}

/// The native exec's refusal in this door's words.
fn refused(sb: &str, e: crate::error::ApiError) -> RpcError {
    if e.problem.reason.as_deref() == Some("busy") {
        return busy(sb);
    }
    e.into()
}

/// The native exec, on pipes. Blocking.
fn start_pipes(
    e: &E2b,
    sb: &str,
    config: ProcessConfig,
    tag: Option<String>,
    stdin: bool,
    lease: Lease,
) -> Result<Arc<Proc>, RpcError> {
    let app = &e.app;
    let sandbox = app.sandbox(sb)?;
    let req = ExecRequest {
        argv: Some(argv_of(&config)),
        env: config.envs.clone(),
        cwd: config.cwd.clone(),
        stdin_open: stdin,
        ..Default::default()
    };
    let exec_id = format!("ex-{}", crate::auth::random_id(8));
    let h = execs::start(&sandbox, &exec_id, argv_of(&config), &req, Some(lease))
        .map_err(|e| refused(sb, e))?;
    app.db()?
        .insert_exec(&h.row)
        .map_err(|err| RpcError::new(Code::Internal, crate::error::chain(&err)))?;
    if let Ok(mut t) = app.execs.lock() {
        t.insert(exec_id, h.clone());
    }
    let proc = Arc::new(Proc {
        pid: h.pid.unwrap_or(0).max(0) as u32,
        tag,
        config,
        outputs: vec![
            (h.stdout.clone(), Stream::Stdout),
            (h.stderr.clone(), Stream::Stderr),
        ],
        ended: h.ended.clone(),
        kind: Kind::Pipes(h),
    });
    remember(e, sb, proc.clone())?;
    Ok(proc)
}

/// `ProcessEvent` in its JSON mapping, wrapped as Start/ConnectResponse.
fn event(ev: serde_json::Value) -> serde_json::Value {
    serde_json::json!({ "event": ev })
}

fn end_event(end: Ended) -> serde_json::Value {
    // As envd reports it (Go's ProcessState): a signal is exit code -1.
    let (code, status) = match end.signal {
        Some(sig) => {
            let name = nix::sys::signal::Signal::try_from(sig)
                .map(|s| s.as_str().trim_start_matches("SIG").to_ascii_lowercase())
                .unwrap_or_else(|_| sig.to_string());
            let name = if name == "kill" {
                "killed".into()
            } else {
                name
            };
            (-1, format!("signal: {name}"))
        }
        None => (end.status, format!("exit status {}", end.status)),
    };
    let mut v =
        serde_json::json!({ "exitCode": code, "exited": end.signal.is_none(), "status": status });
    if end.timed_out {
        v["error"] = "timed out".into();
    }
    event(serde_json::json!({ "end": v }))
}

/// New bytes of `path` from `*off`, at most [`CHUNK`].
fn read_from(path: &std::path::Path, off: &mut u64) -> Vec<u8> {
    let Ok(mut f) = std::fs::File::open(path) else {
        return Vec::new();
    };
    if f.seek(SeekFrom::Start(*off)).is_err() {
        return Vec::new();
    }
    let mut buf = Vec::new();
    let n = f.take(CHUNK).read_to_end(&mut buf).unwrap_or(0);
    *off += n as u64;
    buf
}

/// Stream the process's start, its output from `from` (each file's size
/// now when `None`: a connect gets what comes after it) and its end.
async fn relay(proc: Arc<Proc>, tx: connect::Sender, from: Option<Vec<u64>>, keepalive: Duration) {
    let mut offsets = from.unwrap_or_else(|| vec![0; proc.outputs.len()]);
    if tx
        .send(&event(serde_json::json!({"start": {"pid": proc.pid}})))
        .await
        .is_none()
    {
        return;
    }
    let mut ended_rx = proc.ended.clone();
    let mut quiet = Duration::ZERO;
    loop {
        // A client that left gives its place back now, not at the next
        // keepalive.
        if tx.is_closed() {
            return;
        }
        let ended = *ended_rx.borrow_and_update();
        let p = proc.clone();
        let offs = offsets.clone();
        let Ok((chunks, offs)) = tokio::task::spawn_blocking(move || {
            let mut offs = offs;
            let mut chunks = Vec::new();
            for (i, (path, stream)) in p.outputs.iter().enumerate() {
                let data = read_from(path, &mut offs[i]);
                if !data.is_empty() {
                    chunks.push((*stream, data));
                }
            }
            (chunks, offs)
        })
        .await
        else {
            return;
        };
        offsets = offs;
        let got = !chunks.is_empty();
        for (stream, data) in chunks {
            let key = match stream {
                Stream::Stdout => "stdout",
                Stream::Stderr => "stderr",
                Stream::Pty => "pty",
            };
            let mut d = serde_json::Map::new();
            d.insert(key.into(), b64(&data).into());
            if tx
                .send(&event(serde_json::json!({ "data": d })))
                .await
                .is_none()
            {
                return;
            }
        }
        if got {
            quiet = Duration::ZERO;
            continue;
        }
        if let Some(end) = ended {
            let _ = tx.send(&end_event(end)).await;
            tx.finish(None).await;
            return;
        }
        if quiet >= keepalive {
            quiet = Duration::ZERO;
            if tx
                .send(&event(serde_json::json!({"keepalive": {}})))
                .await
                .is_none()
            {
                return;
            }
        }
        let _ = tokio::time::timeout(POLL, ended_rx.changed()).await;
        quiet += POLL;
    }
}

async fn attach(
    e: Arc<E2b>,
    sb: String,
    sel: Selector,
    (keepalive, lease): (Duration, Lease),
    codec: connect::Codec,
) -> Response {
    let proc = match find(&e, &sb, &sel) {
        Ok(p) => p,
        Err(err) => return codec.stream_error(err),
    };
    let p = proc.clone();
    let sizes = tokio::task::spawn_blocking(move || {
        p.outputs
            .iter()
            .map(|(path, _)| std::fs::metadata(path).map(|m| m.len()).unwrap_or(0))
            .collect::<Vec<u64>>()
    })
    .await
    .unwrap_or_default();
    let (tx, response) = codec.channel();
    tokio::spawn(async move {
        relay(proc, tx, Some(sizes), keepalive).await;
        drop(lease);
    });
    response
}

fn list(e: &E2b, sb: &str) -> Result<serde_json::Value, RpcError> {
    let procs = e
        .procs
        .lock()
        .map_err(|_| RpcError::new(Code::Internal, "the process table lock is poisoned"))?;
    let list: Vec<serde_json::Value> = procs
        .get(sb)
        .map(|l| {
            l.iter()
                .filter(|p| p.running())
                .map(|p| {
                    let mut v = serde_json::json!({"config": p.config, "pid": p.pid});
                    if let Some(t) = &p.tag {
                        v["tag"] = t.clone().into();
                    }
                    v
                })
                .collect()
        })
        .unwrap_or_default();
    Ok(serde_json::json!({ "processes": list }))
}

pub(super) async fn send_input(
    e: &E2b,
    sb: &str,
    req: SendInputRequest,
) -> Result<serde_json::Value, RpcError> {
    let proc = find(e, sb, &req.process)?;
    match (&proc.kind, req.input.stdin, req.input.pty) {
        (Kind::Pipes(h), Some(data), None) => {
            let data = unb64(&data)?;
            let h = h.clone();
            blocking(move || h.write_stdin(&data, false).map_err(RpcError::from)).await?;
        }
        (Kind::Terminal(t), None, Some(data)) | (Kind::Terminal(t), Some(data), None) => {
            let data = unb64(&data)?;
            t.input
                .send(bytes::Bytes::from(data))
                .await
                .map_err(|_| RpcError::new(Code::NotFound, "the terminal is closed"))?;
        }
        (Kind::Pipes(_), None, Some(_)) => {
            return Err(RpcError::new(
                Code::InvalidArgument,
                "the process has no terminal: send its input as stdin",
            ))
        }
        _ => {
            return Err(RpcError::new(
                Code::InvalidArgument,
                "give input.stdin or input.pty (one of them)",
            ))
        }
    }
    Ok(serde_json::json!({}))
}

/// `process.Signal` (SIGNAL_SIGKILL, SIGNAL_SIGTERM), by name or number.
fn signal_of(v: &serde_json::Value) -> Option<i32> {
    use nix::sys::signal::Signal;
    match v {
        serde_json::Value::String(s) => match s.as_str() {
            "SIGNAL_SIGKILL" => Some(Signal::SIGKILL as i32),
            "SIGNAL_SIGTERM" => Some(Signal::SIGTERM as i32),
            _ => None,
        },
        serde_json::Value::Number(n) => match n.as_i64() {
            Some(9) => Some(Signal::SIGKILL as i32),
            Some(15) => Some(Signal::SIGTERM as i32),
            _ => None,
        },
        _ => None,
    }
}

async fn send_signal(
    e: &E2b,
    sb: &str,
    req: SendSignalRequest,
) -> Result<serde_json::Value, RpcError> {
    let proc = find(e, sb, &req.process)?;
    let sig = signal_of(&req.signal).ok_or_else(|| {
        RpcError::new(
            Code::InvalidArgument,
            format!("signal {}: SIGNAL_SIGKILL or SIGNAL_SIGTERM", req.signal),
        )
    })?;
    blocking(move || proc.signal(sig)).await?;
    Ok(serde_json::json!({}))
}

async fn close_stdin(e: &E2b, sb: &str, sel: Selector) -> Result<serde_json::Value, RpcError> {
    let proc = find(e, sb, &sel)?;
    match &proc.kind {
        Kind::Pipes(h) => {
            let h = h.clone();
            blocking(move || h.write_stdin(&[], true).map_err(RpcError::from)).await?;
            Ok(serde_json::json!({}))
        }
        Kind::Terminal(_) => Err(RpcError::new(
            Code::FailedPrecondition,
            "a terminal's input is not closed: send it an end of file (Ctrl-D, \\x04)",
        )),
    }
}

fn update(e: &E2b, sb: &str, req: UpdateRequest) -> Result<serde_json::Value, RpcError> {
    let proc = find(e, sb, &req.process)?;
    let Kind::Terminal(t) = &proc.kind else {
        return Err(RpcError::new(
            Code::InvalidArgument,
            "the process has no terminal to resize",
        ));
    };
    if let Some(size) = req.pty.and_then(|p| p.size) {
        warden_runtime::client::resize_terminal(
            t.master.as_fd(),
            size.rows.clamp(1, 4096),
            size.cols.clamp(1, 4096),
        );
    }
    Ok(serde_json::json!({}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_end_says_the_code_or_the_signal_as_envd_does() {
        let e = end_event(Ended {
            status: 3,
            signal: None,
            timed_out: false,
        });
        assert_eq!(e["event"]["end"]["exitCode"], 3);
        assert_eq!(e["event"]["end"]["status"], "exit status 3");
        let e = end_event(Ended {
            status: 137,
            signal: Some(9),
            timed_out: false,
        });
        assert_eq!(e["event"]["end"]["exitCode"], -1);
        assert_eq!(e["event"]["end"]["status"], "signal: killed");
        assert_eq!(e["event"]["end"]["exited"], false);
    }

    #[test]
    fn the_keepalive_interval_is_the_clients_within_bounds() {
        let mut h = HeaderMap::new();
        assert_eq!(keepalive_of(&h), KEEPALIVE);
        h.insert("keepalive-ping-interval", "5".parse().unwrap());
        assert_eq!(keepalive_of(&h), Duration::from_secs(5));
        h.insert("keepalive-ping-interval", "0".parse().unwrap());
        assert_eq!(keepalive_of(&h), Duration::from_secs(1));
    }

    #[test]
    fn signals_are_the_two_envd_names() {
        assert_eq!(signal_of(&serde_json::json!("SIGNAL_SIGKILL")), Some(9));
        assert_eq!(signal_of(&serde_json::json!(15)), Some(15));
        assert_eq!(signal_of(&serde_json::json!("SIGNAL_UNSPECIFIED")), None);
    }
}
