//! A sandbox's logs as E2B's control API gives them (`GET
//! /sandboxes/{id}/logs?start=&limit=` and `GET
//! /v2/sandboxes/{id}/logs?cursor=&limit=&direction=`): its audit log,
//! each event one line, read as the native `GET /v1/sandboxes/{id}/events`
//! reads it, with the same redaction for a token holder (no host path).
//! A denial is a `warn` entry, every other event `info`.

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

use super::control::error;
use super::{permit, E2b};
use crate::auth::Caller;
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

/// The sandbox's audit events, oldest first, as `caller` may see them.
fn read(e: &E2b, caller: &Caller, id: &str) -> Result<Vec<Line>, crate::error::ApiError> {
    let sb = e.app.sandbox(id)?;
    let holder = matches!(caller, Caller::Token(_));
    let hidden = redact::Hidden::new()
        .path(&e.app.state_dir, "(warden's state directory)")
        .path(&sb.meta().workspace, "(the workspace on the host)");
    let text = std::fs::read_to_string(sb.dir().join("audit.jsonl")).unwrap_or_default();
    Ok(text
        .lines()
        .filter_map(|line| {
            let ev = serde_json::from_str::<warden_audit::Event>(line).ok()?;
            let text = if holder {
                redact::event_line(line, &hidden)
            } else {
                line.to_string()
            };
            Some(Line {
                ts_ms: ev.ts_ms,
                text,
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

async fn lines(e: &Arc<E2b>, caller: &Caller, id: &str) -> Result<Vec<Line>, Response> {
    if let Err(d) = permit(&e.app, caller, "GET", "/v1/sandboxes/{id}/events", Some(id)) {
        return Err(d.response());
    }
    let e2 = e.clone();
    let who = caller.clone();
    let sid = id.to_string();
    match tokio::task::spawn_blocking(move || read(&e2, &who, &sid)).await {
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
    let all = match lines(&e, &caller, &id).await {
        Ok(l) => l,
        Err(r) => return r,
    };
    let from = q.start.unwrap_or(0);
    let picked: Vec<&Line> = all
        .iter()
        .filter(|l| l.ts_ms >= from)
        .take(q.limit.unwrap_or(MOST).min(MOST))
        .collect();
    let logs: Vec<serde_json::Value> = picked
        .iter()
        .map(|l| serde_json::json!({ "timestamp": rfc3339(l.ts_ms), "line": l.text }))
        .collect();
    let entries: Vec<Entry> = picked.iter().map(|l| entry(l)).collect();
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
    let all = match lines(&e, &caller, &id).await {
        Ok(l) => l,
        Err(r) => return r,
    };
    let limit = q.limit.unwrap_or(MOST).min(MOST);
    let found = |l: &&Line| {
        q.search
            .as_ref()
            .is_none_or(|s| l.text.contains(s.as_str()))
    };
    let picked: Vec<Entry> = match q.direction.as_deref() {
        Some("backward") => {
            let to = q.cursor.unwrap_or(u64::MAX);
            all.iter()
                .rev()
                .filter(|l| l.ts_ms <= to)
                .filter(found)
                .take(limit)
                .map(entry)
                .collect()
        }
        None | Some("forward") => {
            let from = q.cursor.unwrap_or(0);
            all.iter()
                .filter(|l| l.ts_ms >= from)
                .filter(found)
                .take(limit)
                .map(entry)
                .collect()
        }
        Some(d) => {
            return error(
                StatusCode::BAD_REQUEST,
                format!("direction {d:?}: forward or backward"),
            )
        }
    };
    Json(serde_json::json!({ "logs": picked })).into_response()
}
