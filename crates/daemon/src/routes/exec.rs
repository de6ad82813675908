//! Commands in a sandbox: start one (answered whole, streamed, or in the
//! background), list them, read a command's output from any offset (a
//! client that lost its connection reconnects here), write its standard
//! input, signal it.

use axum::body::Body as HttpBody;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use std::sync::Arc;
use std::time::Duration;
use tokio_stream::wrappers::ReceiverStream;

use super::sandboxes::blocking;
use crate::api::{ExecEvent, ExecInfo, ExecRequest, ExecResult, SignalRequest, StdinRequest};
use crate::app::App;
use crate::body::Body;
use crate::error::{ApiError, Problem};
use crate::execs::{self, ExecHandle, Offsets};

/// How often a quiet stream says it is alive.
const KEEPALIVE: Duration = Duration::from_secs(15);
/// How often a running command's output files are looked at.
const POLL: Duration = Duration::from_millis(20);
/// Most bytes of one stream in one event.
const CHUNK: usize = 64 * 1024;

fn info_of(h: &ExecHandle) -> ExecInfo {
    let ended = h.ended_now();
    let cut = h.cut();
    ExecInfo {
        id: h.row.id.clone(),
        sandbox: h.row.sandbox.clone(),
        argv: h.row.argv.clone(),
        pid: h.pid,
        started_ms: h.row.started_ms,
        exit_status: ended.map(|e| e.status),
        signal: ended.and_then(|e| e.signal),
        finished_ms: h.finished_ms(),
        tty: h.row.tty,
        stdout_dropped: cut.stdout_dropped,
        stderr_dropped: cut.stderr_dropped,
    }
}

/// A terminal session, from its record.
fn info_of_row(r: &crate::db::ExecRow) -> ExecInfo {
    ExecInfo {
        id: r.id.clone(),
        sandbox: r.sandbox.clone(),
        argv: r.argv.clone(),
        pid: None,
        started_ms: r.started_ms,
        exit_status: r.exit_status,
        signal: r.exit_signal,
        finished_ms: r.finished_ms,
        tty: r.tty,
        stdout_dropped: 0,
        stderr_dropped: 0,
    }
}

fn wants_sse(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("text/event-stream"))
}

#[utoipa::path(post, path = "/v1/sandboxes/{id}/exec", params(("id" = String, Path)), request_body = ExecRequest,
    responses(
        (status = 200, description = "ended (or, with `stream`, a stream of ExecEvent lines)", body = ExecResult),
        (status = 202, description = "`background`: it runs", body = ExecInfo),
        (status = 404, body = Problem), (status = 409, body = Problem), (status = 422, body = Problem),
        (status = 429, description = "the caller holds as many long-lived answers (running commands among them) as it may, or (reason `busy`, with `Retry-After`) the sandbox's supervisor serves as many connections as it may: nothing started", body = Problem)),
    security(("token" = [])))]
pub async fn exec(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    credential: axum::Extension<crate::credential::Credential>,
    headers: HeaderMap,
    Body(req): Body<ExecRequest>,
) -> Result<Response, ApiError> {
    if let Some(t) = req.timeout_seconds {
        if !(t.is_finite() && t > 0.0 && t <= 7.0 * 86400.0) {
            return Err(ApiError::bad_request(
                "timeout_seconds: a number of seconds above 0, at most a week",
            )
            .with_field(Some("/timeout_seconds")));
        }
    }
    if req.background && req.stream {
        return Err(
            ApiError::bad_request("`background` and `stream` exclude each other")
                .with_field(Some("/background")),
        );
    }
    // Every command holds a place from before it starts until it ends,
    // streamed, whole or in the background: each holds a connection to its
    // supervisor and a thread here for as long as it runs, so a token past
    // its bound starts nothing (see [`crate::leases`]).
    let axum::Extension(credential) = credential;
    let lease = app.leases.take(&credential, crate::leases::Kind::Command)?;
    let a = app.clone();
    let handle = blocking(move || {
        let sb = a.sandbox(&id)?;
        let stored: Option<warden_runtime::state::Stored> =
            warden_runtime::state::read_json(&sb.dir().join(warden_runtime::state::STORED)).ok();
        let default = stored.map(|s| s.spec.command).unwrap_or_default();
        let argv = execs::argv_of(&req, &default)?;
        let exec_id = format!("ex-{}", crate::auth::random_id(8));
        let h = execs::start(&sb, &exec_id, argv, &req, Some(lease))?;
        a.db()?
            .insert_exec(&h.row)
            .map_err(|e| ApiError::internal(crate::error::chain(&e)))?;
        if let Ok(mut t) = a.execs.lock() {
            t.insert(exec_id, h.clone());
        }
        Ok((h, req.stream, req.background))
    })
    .await?;
    let (h, stream, background) = handle;
    app.watch_end(h.clone());
    if background {
        return Ok((StatusCode::ACCEPTED, Json(info_of(&h))).into_response());
    }
    if stream {
        let first = ExecEvent::Started {
            id: h.row.id.clone(),
            pid: h.pid.unwrap_or(0),
        };
        // Its command's place holds it: one place, whether or not its
        // client stays.
        return Ok(stream_response(
            h,
            Offsets::default(),
            Some(first),
            (wants_sse(&headers), None),
        ));
    }
    // Whole: wait for the end, then read what it wrote.
    let mut rx = h.ended.clone();
    let ended = loop {
        if let Some(e) = *rx.borrow_and_update() {
            break e;
        }
        if rx.changed().await.is_err() {
            return Err(ApiError::internal("lost track of the command"));
        }
    };
    let limit = app.limits.output_bytes;
    let exec_id = h.row.id.clone();
    let (stdout, stderr, cut) = blocking(move || {
        let read = |p: &std::path::Path| -> Vec<u8> {
            use std::io::Read;
            let mut v = Vec::new();
            if let Ok(f) = std::fs::File::open(p) {
                let _ = f.take(limit as u64).read_to_end(&mut v);
            }
            v
        };
        Ok((read(&h.stdout), read(&h.stderr), h.cut()))
    })
    .await?;
    let flagged = [("stdout", &stdout), ("stderr", &stderr)]
        .into_iter()
        .flat_map(|(stream, bytes)| {
            warden_detect::scan(bytes)
                .into_iter()
                .map(move |f| crate::api::OutputFinding {
                    stream: stream.to_string(),
                    rule: f.rule,
                    offset: f.offset,
                    len: f.len,
                    line: f.line,
                    hash: f.hash,
                })
        })
        .collect();
    let (out_text, out_b64) = lossy(&stdout);
    let (err_text, err_b64) = lossy(&stderr);
    Ok(Json(ExecResult {
        id: exec_id,
        exit_status: ended.status,
        signal: ended.signal,
        timed_out: ended.timed_out,
        stdout: out_text,
        stderr: err_text,
        stdout_base64: out_b64,
        stderr_base64: err_b64,
        stdout_dropped: cut.stdout_dropped,
        stderr_dropped: cut.stderr_dropped,
        flagged,
    })
    .into_response())
}

/// Text (lossy), and the exact bytes in base64 when they were not UTF-8.
fn lossy(bytes: &[u8]) -> (String, Option<String>) {
    use base64::Engine;
    match std::str::from_utf8(bytes) {
        Ok(s) => (s.to_string(), None),
        Err(_) => (
            String::from_utf8_lossy(bytes).into_owned(),
            Some(base64::engine::general_purpose::STANDARD.encode(bytes)),
        ),
    }
}

/// The command's events from `from` on, until it ends: NDJSON, or
/// server-sent events.
fn stream_response(
    h: Arc<ExecHandle>,
    mut from: Offsets,
    first: Option<ExecEvent>,
    (sse, lease): (bool, Option<crate::leases::Lease>),
) -> Response {
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<bytes::Bytes, std::io::Error>>(16);
    let frame = move |e: &ExecEvent| -> bytes::Bytes {
        let json = serde_json::to_string(e).unwrap_or_default();
        if sse {
            bytes::Bytes::from(format!("data: {json}\n\n"))
        } else {
            bytes::Bytes::from(format!("{json}\n"))
        }
    };
    tokio::spawn(async move {
        let _held = lease;
        if let Some(f) = first {
            if tx.send(Ok(frame(&f))).await.is_err() {
                return;
            }
        }
        let mut rx_end = h.ended.clone();
        let mut quiet = Duration::ZERO;
        loop {
            // A client that left gives its place back now, not at the
            // next keepalive of a quiet command.
            if tx.is_closed() {
                return;
            }
            let ended = *rx_end.borrow_and_update();
            let hh = h.clone();
            let (events, off) = match tokio::task::spawn_blocking(move || {
                let mut off = from;
                let ev = execs::read_new(&hh, &mut off, CHUNK);
                (ev, off)
            })
            .await
            {
                Ok(r) => r,
                Err(_) => return,
            };
            from = off;
            let got = !events.is_empty();
            for e in &events {
                if tx.send(Ok(frame(e))).await.is_err() {
                    return;
                }
            }
            if got {
                quiet = Duration::ZERO;
                continue;
            }
            if let Some(end) = ended {
                let hh = h.clone();
                let cut = tokio::task::spawn_blocking(move || hh.cut())
                    .await
                    .unwrap_or_default();
                let _ = tx
                    .send(Ok(frame(&ExecEvent::Exited {
                        exit_status: end.status,
                        signal: end.signal,
                        timed_out: end.timed_out,
                        stdout_dropped: cut.stdout_dropped,
                        stderr_dropped: cut.stderr_dropped,
                    })))
                    .await;
                return;
            }
            if quiet >= KEEPALIVE {
                quiet = Duration::ZERO;
                if tx.send(Ok(frame(&ExecEvent::Keepalive))).await.is_err() {
                    return;
                }
            }
            // Woken by the end, or looked at again shortly.
            let _ = tokio::time::timeout(POLL, rx_end.changed()).await;
            quiet += POLL;
        }
    });
    let content_type = if sse {
        "text/event-stream"
    } else {
        "application/x-ndjson"
    };
    Response::builder()
        .header(header::CONTENT_TYPE, content_type)
        .header(header::CACHE_CONTROL, "no-store")
        .body(HttpBody::from_stream(ReceiverStream::new(rx)))
        .unwrap_or_else(|_| ApiError::internal("cannot build the stream").into_response())
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
pub struct ExecPath {
    pub id: String,
    pub exec: String,
}

#[utoipa::path(get, path = "/v1/sandboxes/{id}/execs", params(("id" = String, Path)),
    responses((status = 200, body = [ExecInfo]), (status = 404, body = Problem)),
    security(("token" = [])))]
pub async fn list(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
) -> Result<Json<Vec<ExecInfo>>, ApiError> {
    let a = app.clone();
    let sid = id.clone();
    let (sessions, made_ms) = blocking(move || {
        let sb = a.sandbox(&sid)?;
        let rows = a
            .db()?
            .execs_of(&sid)
            .map_err(|e| ApiError::internal(crate::error::chain(&e)))?;
        Ok((rows, sb.created_ms()))
    })
    .await?;
    // A command started before this sandbox was made was an earlier
    // sandbox's of its name (removed behind the daemon's back): not this
    // one's to list.
    let sessions: Vec<_> = sessions
        .into_iter()
        .filter(|r| r.started_ms >= made_ms)
        .collect();
    let mut out: Vec<ExecInfo> = app
        .execs
        .lock()
        .map_err(|_| ApiError::internal("the command table lock is poisoned"))?
        .values()
        .filter(|h| h.row.sandbox == id && h.row.started_ms >= made_ms)
        .map(|h| info_of(h))
        .collect();
    // Terminal sessions are in the records only.
    out.extend(sessions.iter().filter(|r| r.tty).map(info_of_row));
    out.sort_by_key(|e| e.started_ms);
    Ok(Json(out))
}

#[utoipa::path(get, path = "/v1/sandboxes/{id}/execs/{exec}", params(("id" = String, Path), ("exec" = String, Path)),
    responses((status = 200, body = ExecInfo), (status = 404, body = Problem)),
    security(("token" = [])))]
pub async fn get_one(
    State(app): State<Arc<App>>,
    Path(p): Path<ExecPath>,
) -> Result<Json<ExecInfo>, ApiError> {
    match app.exec(&p.id, &p.exec) {
        Ok(h) => Ok(Json(info_of(&h))),
        Err(not_running) => {
            let (a, exec) = (app.clone(), p.exec.clone());
            let row = blocking(move || {
                a.db()?
                    .exec(&exec)
                    .map_err(|e| ApiError::internal(crate::error::chain(&e)))
            })
            .await?;
            match row {
                Some(r) if r.tty && r.sandbox == p.id => Ok(Json(info_of_row(&r))),
                _ => Err(not_running),
            }
        }
    }
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct OutputQuery {
    /// Resume standard output from this byte.
    pub stdout_offset: Option<u64>,
    /// Resume standard error from this byte.
    pub stderr_offset: Option<u64>,
}

#[utoipa::path(get, path = "/v1/sandboxes/{id}/execs/{exec}/output",
    params(("id" = String, Path), ("exec" = String, Path), OutputQuery),
    responses((status = 200, description = "ExecEvent lines (NDJSON, or server-sent events) until it ends", body = ExecEvent), (status = 404, body = Problem)),
    security(("token" = [])))]
pub async fn output(
    State(app): State<Arc<App>>,
    Path(p): Path<ExecPath>,
    credential: axum::Extension<crate::credential::Credential>,
    headers: HeaderMap,
    query: Result<Query<OutputQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(q) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let lease = stream_lease(&app, credential)?;
    let h = match app.exec(&p.id, &p.exec) {
        Ok(h) => h,
        Err(not_ours) => kept_elsewhere(&app, &p, not_ours).await?,
    };
    let from = Offsets {
        stdout: q.stdout_offset.unwrap_or(0),
        stderr: q.stderr_offset.unwrap_or(0),
    };
    Ok(stream_response(
        h,
        from,
        None,
        (wants_sse(&headers), Some(lease)),
    ))
}

/// A place for a command's output stream among what its caller holds.
fn stream_lease(
    app: &App,
    credential: axum::Extension<crate::credential::Credential>,
) -> Result<crate::leases::Lease, ApiError> {
    let axum::Extension(credential) = credential;
    app.leases
        .take(&credential, crate::leases::Kind::CommandStream)
}

/// How often the end of a command this daemon did not start is looked
/// for in its sandbox's event log.
const KEPT_POLL: Duration = Duration::from_millis(250);
/// How long after its exit a command's output relays may take the last of
/// it (as long as the supervisor waits for them before telling its own
/// caller).
const KEPT_DRAIN: Duration = Duration::from_secs(2);

/// A command this daemon did not start whose output its sandbox keeps
/// (`warden exec -d`'s, `run -d`'s under `run`, or one of the daemon's own
/// whose handle is gone): a handle on its files, read as the daemon's own
/// are. Every detached command keeps its output the same way, so every
/// door reads it; `not_ours` answers when its sandbox keeps no such
/// command.
async fn kept_elsewhere(
    app: &Arc<App>,
    p: &ExecPath,
    not_ours: ApiError,
) -> Result<Arc<ExecHandle>, ApiError> {
    use warden_runtime::output::KeptExec;
    let (a, sandbox, exec) = (app.clone(), p.id.clone(), p.exec.clone());
    let found = blocking(move || {
        let sb = a.sandbox(&sandbox)?;
        Ok(KeptExec::read(sb.dir(), &exec).map(|k| (sb, k)))
    })
    .await?;
    let Some((sb, kept)) = found else {
        return Err(not_ours);
    };
    // Started when its record says, not now.
    let row = crate::db::ExecRow {
        started_ms: kept.started_ms,
        ..crate::db::ExecRow::started(
            p.exec.clone(),
            p.id.clone(),
            kept.exec,
            kept.supervisor_pid,
            kept.argv,
            false,
        )
    };
    let h = ExecHandle::adopt(&sb, row);
    watch_kept(sb.dir().to_path_buf(), Arc::downgrade(&h));
    Ok(h)
}

/// Learn the end of a command [`kept_elsewhere`] found, for as long as
/// someone reads it (the watcher holds the handle weakly: a reader that
/// left takes it away). It ended when the event log says it exited and
/// its relays have taken all it wrote (or a moment after), or when the
/// supervisor that ran it is gone.
fn watch_kept(sandbox_dir: std::path::PathBuf, h: std::sync::Weak<ExecHandle>) {
    use warden_runtime::output::KeptExec;
    let log = sandbox_dir.join("audit.jsonl");
    let killed = || {
        let kill = nix::sys::signal::Signal::SIGKILL as i32;
        execs::Ended {
            status: 128 + kill,
            signal: Some(kill),
            timed_out: false,
        }
    };
    std::thread::spawn(move || {
        let mut exited_at: Option<std::time::Instant> = None;
        // Followed from where the last look ended (see
        // [`crate::exitwatch`]), once the kept record says which exec.
        let mut watch: Option<crate::exitwatch::ExitWatch> = None;
        loop {
            let Some(h) = h.upgrade() else { return };
            let Some(kept) = KeptExec::read(&sandbox_dir, &h.row.id) else {
                // Its sandbox was removed, and its output with it.
                h.finish(killed());
                return;
            };
            // Looked at before the log: a supervisor gone by then has
            // written every event it will.
            let alive = warden_runtime::state::live_ticks(kept.supervisor_pid).is_some();
            let watch = watch.get_or_insert_with(|| {
                crate::exitwatch::ExitWatch::new(log.clone(), kept.exec, kept.started_ms)
            });
            match watch.look() {
                Some((status, signal)) => {
                    let since = *exited_at.get_or_insert_with(std::time::Instant::now);
                    if kept.drained_ms.is_some() || !alive || since.elapsed() >= KEPT_DRAIN {
                        h.finish(execs::Ended {
                            status,
                            signal,
                            timed_out: false,
                        });
                        return;
                    }
                }
                None if !alive => {
                    h.finish(killed());
                    return;
                }
                None => {}
            }
            drop(h);
            std::thread::sleep(KEPT_POLL);
        }
    });
}

#[utoipa::path(post, path = "/v1/sandboxes/{id}/execs/{exec}/stdin",
    params(("id" = String, Path), ("exec" = String, Path)), request_body = StdinRequest,
    responses((status = 204), (status = 404, body = Problem), (status = 409, body = Problem)),
    security(("token" = [])))]
pub async fn stdin(
    State(app): State<Arc<App>>,
    Path(p): Path<ExecPath>,
    Body(req): Body<StdinRequest>,
) -> Result<StatusCode, ApiError> {
    use base64::Engine;
    let h = app.exec(&p.id, &p.exec)?;
    let data = match (req.data, req.data_base64) {
        (Some(_), Some(_)) => {
            return Err(ApiError::bad_request(
                "give `data` or `data_base64`, not both",
            ))
        }
        (Some(d), None) => d.into_bytes(),
        (None, Some(b)) => base64::engine::general_purpose::STANDARD
            .decode(b.as_bytes())
            .map_err(|e| {
                ApiError::bad_request(format!("data_base64 is not base64: {e}"))
                    .with_field(Some("/data_base64"))
            })?,
        (None, None) => Vec::new(),
    };
    let close = req.close;
    blocking(move || h.write_stdin(&data, close)).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// A signal by number or name.
pub(super) fn signal_number(v: &serde_json::Value) -> Option<i32> {
    use nix::sys::signal::Signal;
    match v {
        serde_json::Value::Number(n) => {
            let n = n.as_i64()?;
            Signal::try_from(i32::try_from(n).ok()?)
                .ok()
                .map(|s| s as i32)
        }
        serde_json::Value::String(s) => {
            let name = s.to_ascii_uppercase();
            let name = if name.starts_with("SIG") {
                name
            } else {
                format!("SIG{name}")
            };
            name.parse::<Signal>().ok().map(|s| s as i32)
        }
        _ => None,
    }
}

#[utoipa::path(post, path = "/v1/sandboxes/{id}/execs/{exec}/signal",
    params(("id" = String, Path), ("exec" = String, Path)), request_body = SignalRequest,
    responses((status = 204), (status = 404, body = Problem), (status = 409, body = Problem)),
    security(("token" = [])))]
pub async fn signal(
    State(app): State<Arc<App>>,
    Path(p): Path<ExecPath>,
    Body(req): Body<SignalRequest>,
) -> Result<StatusCode, ApiError> {
    let h = app.exec(&p.id, &p.exec)?;
    let sig = signal_number(&req.signal).ok_or_else(|| {
        ApiError::bad_request(format!(
            "{} is not a signal: give a number or a name such as \"SIGTERM\"",
            req.signal
        ))
        .with_field(Some("/signal"))
    })?;
    blocking(move || h.signal(sig)).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_api_document_describes_a_results_flagged_output() {
        let doc = <crate::routes::ApiDoc as utoipa::OpenApi>::openapi();
        let text = serde_json::to_string(&doc).unwrap_or_default();
        assert!(
            text.contains("\"OutputFinding\""),
            "no OutputFinding schema"
        );
        assert!(text.contains("\"flagged\""));
    }

    use super::*;

    #[test]
    fn signals_are_taken_by_number_or_by_name() {
        assert_eq!(signal_number(&serde_json::json!(15)), Some(15));
        assert_eq!(signal_number(&serde_json::json!("TERM")), Some(15));
        assert_eq!(signal_number(&serde_json::json!("sigkill")), Some(9));
        assert_eq!(signal_number(&serde_json::json!(0)), None);
        assert_eq!(signal_number(&serde_json::json!("NOPE")), None);
        assert_eq!(signal_number(&serde_json::json!(9999)), None);
    }
}
