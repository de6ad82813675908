//! A sandbox's logs as E2B's control API gives them (`GET
//! /sandboxes/{id}/logs?start=&limit=` and `GET
//! /v2/sandboxes/{id}/logs?cursor=&limit=&direction=`): its audit log,
//! each event one line, with the same redaction for a token holder as the
//! native `GET /v1/sandboxes/{id}/events` (no host path). A denial is a
//! `warn` entry, every other event `info`.
//!
//! The log is never read whole: an answer seeks to its cursor's time and
//! reads at most its page ([`MOST`] entries), looking through at most
//! [`crate::logpage::SCAN_BYTES`] of the log (a `search` that matches
//! nothing there answers what it found), so an answer on a large log is
//! as quick as on a small one.

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

use super::answer::error;
use super::{permit, E2b};
use crate::auth::Caller;
use crate::logpage;
use crate::routes::redact;

/// The most entries one answer holds.
const MOST: usize = 1000;

/// One event of the log.
struct Line {
    ts_ms: u64,
    text: String,
    kind: &'static str,
    denial: bool,
}

/// Which way from the cursor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Direction {
    Forward,
    Backward,
}

/// What one answer asks of the log.
struct Ask {
    cursor: u64,
    direction: Direction,
    limit: usize,
    search: Option<String>,
}

/// The sandbox's audit events from the cursor on (or back), as `caller`
/// may see them: at most `ask.limit`, oldest first forward and newest
/// first backward. A search is matched against what the caller is shown.
fn read(
    e: &E2b,
    caller: &Caller,
    id: &str,
    ask: &Ask,
) -> Result<Vec<Line>, crate::error::ApiError> {
    let sb = e.app.sandbox(id)?;
    let holder = matches!(caller, Caller::Token(_));
    let hidden = redact::Hidden::new()
        .path(&e.app.state_dir, "(warden's state directory)")
        .path(&sb.meta().workspace, "(the workspace on the host)");
    let shown = |line: &str| {
        if holder {
            redact::event_line(line, &hidden)
        } else {
            line.to_string()
        }
    };
    let found = |_: u64, line: &str| {
        ask.search
            .as_deref()
            .is_none_or(|s| shown(line).contains(s))
    };
    let path = sb.dir().join("audit.jsonl");
    let lines = match ask.direction {
        Direction::Forward => logpage::since(&path, ask.cursor, ask.limit, found),
        Direction::Backward => logpage::until(&path, ask.cursor, ask.limit, found),
    }
    .map_err(|err| {
        crate::error::ApiError::internal(format!("the sandbox's log cannot be read: {err}"))
    })?;
    Ok(lines
        .iter()
        .filter_map(|l| {
            let ev = serde_json::from_str::<warden_audit::Event>(&l.text).ok()?;
            Some(Line {
                ts_ms: ev.ts_ms,
                text: shown(&l.text),
                kind: ev.kind.name(),
                denial: ev.is_denial(),
            })
        })
        .collect())
}

fn rfc3339(ms: u64) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms);
    humantime::format_rfc3339_millis(t).to_string()
}

#[derive(Serialize)]
struct Entry {
    timestamp: String,
    message: String,
    level: &'static str,
    fields: serde_json::Value,
}

fn entry(l: &Line) -> Entry {
    Entry {
        timestamp: rfc3339(l.ts_ms),
        message: l.text.clone(),
        level: if l.denial { "warn" } else { "info" },
        fields: serde_json::json!({ "kind": l.kind }),
    }
}

async fn lines(e: &Arc<E2b>, caller: &Caller, id: &str, ask: Ask) -> Result<Vec<Line>, Response> {
    if let Err(d) = permit(&e.app, caller, "GET", "/v1/sandboxes/{id}/events", Some(id)) {
        return Err(d.response());
    }
    let e2 = e.clone();
    let who = caller.clone();
    let sid = id.to_string();
    match tokio::task::spawn_blocking(move || read(&e2, &who, &sid, &ask)).await {
        Ok(Ok(l)) => Ok(l),
        Ok(Err(err)) => Err(super::control::from_api(err)),
        Err(err) => Err(error(StatusCode::INTERNAL_SERVER_ERROR, err.to_string())),
    }
}

#[derive(Debug, Deserialize)]
pub struct V1Query {
    /// Unix milliseconds.
    #[serde(default)]
    start: Option<u64>,
    #[serde(default)]
    limit: Option<usize>,
}

/// `{"logs": [{timestamp, line}], "logEntries": [...]}`, from `start`.
pub async fn v1(
    State(e): State<Arc<E2b>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    query: Result<Query<V1Query>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let Ok(Query(q)) = query else {
        return error(StatusCode::BAD_REQUEST, "the query does not fit");
    };
    let ask = Ask {
        cursor: q.start.unwrap_or(0),
        direction: Direction::Forward,
        limit: q.limit.unwrap_or(MOST).min(MOST),
        search: None,
    };
    let picked = match lines(&e, &caller, &id, ask).await {
        Ok(l) => l,
        Err(r) => return r,
    };
    let logs: Vec<serde_json::Value> = picked
        .iter()
        .map(|l| serde_json::json!({ "timestamp": rfc3339(l.ts_ms), "line": l.text }))
        .collect();
    let entries: Vec<Entry> = picked.iter().map(entry).collect();
    Json(serde_json::json!({ "logs": logs, "logEntries": entries })).into_response()
}

#[derive(Debug, Deserialize)]
pub struct V2Query {
    /// Unix milliseconds to start from.
    #[serde(default)]
    cursor: Option<u64>,
    #[serde(default)]
    limit: Option<usize>,
    /// `forward` (the default) or `backward`.
    #[serde(default)]
    direction: Option<String>,
    #[serde(default)]
    search: Option<String>,
}

/// `{"logs": [entry]}`, from `cursor` forward or backward.
pub async fn v2(
    State(e): State<Arc<E2b>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    query: Result<Query<V2Query>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let Ok(Query(q)) = query else {
        return error(StatusCode::BAD_REQUEST, "the query does not fit");
    };
    let (direction, cursor) = match q.direction.as_deref() {
        Some("backward") => (Direction::Backward, q.cursor.unwrap_or(u64::MAX)),
        None | Some("forward") => (Direction::Forward, q.cursor.unwrap_or(0)),
        Some(d) => {
            return error(
                StatusCode::BAD_REQUEST,
                format!("direction {d:?}: forward or backward"),
            )
        }
    };
    let ask = Ask {
        cursor,
        direction,
        limit: q.limit.unwrap_or(MOST).min(MOST),
        search: q.search,
    };
    let picked: Vec<Entry> = match lines(&e, &caller, &id, ask).await {
        Ok(l) => l.iter().map(entry).collect(),
        Err(r) => return r,
    };
    Json(serde_json::json!({ "logs": picked })).into_response()
}
