//! A sandbox's events as server-sent events: its log from an offset (each
//! event's SSE `id` is its line in the log, so a client resumes with
//! `?from=` or `Last-Event-ID`), then, while it runs, each new one as it
//! happens.

use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use serde::Deserialize;
use std::convert::Infallible;
use std::sync::Arc;
use tokio_stream::wrappers::ReceiverStream;
use warden_runtime::client::Connection;
use warden_runtime::lifecycle;

use super::sandboxes::blocking;
use crate::app::App;
use crate::error::{ApiError, Problem};

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct EventsQuery {
    /// Start at this event (its SSE id); 0 for all.
    pub from: Option<u64>,
    /// Keep the stream open for new events while the sandbox runs
    /// (default true).
    pub follow: Option<bool>,
}

#[utoipa::path(get, path = "/v1/sandboxes/{id}/events", params(("id" = String, Path), EventsQuery),
    responses((status = 200, description = "text/event-stream of audit events (JSON)"), (status = 404, body = Problem)),
    security(("token" = [])))]
pub async fn events(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    credential: Option<axum::Extension<crate::app::Credential>>,
    caller: Option<axum::Extension<crate::auth::Caller>>,
    headers: HeaderMap,
    query: Result<Query<EventsQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<impl axum::response::IntoResponse, ApiError> {
    let Query(q) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let last_id = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(|n| n + 1);
    let from = q.from.or(last_id).unwrap_or(0);
    let follow = q.follow.unwrap_or(true);
    let a = app.clone();
    let sb = blocking(move || a.sandbox(&id)).await?;
    // A token holder is shown no host path (see [`super::redact`]).
    let holder = matches!(caller.map(|c| c.0), Some(crate::auth::Caller::Token(_)));
    let hidden = super::redact::Hidden::new()
        .path(&app.state_dir, "(warden's state directory)")
        .path(&sb.meta().workspace, "(the workspace on the host)");
    let shown = move |line: &str| -> String {
        if holder {
            super::redact::event_line(line, &hidden)
        } else {
            line.to_string()
        }
    };
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<SseEvent, Infallible>>(64);
    std::thread::spawn(move || {
        // Subscribe first, so that nothing falls between the log and the
        // feed.
        let feed = if follow && lifecycle::liveness(&sb).running() {
            Connection::open(&lifecycle::control(&sb)).ok()
        } else {
            None
        };
        let mut n: u64 = 0;
        let mut last_ts = 0;
        if let Ok(text) = std::fs::read_to_string(sb.dir().join("audit.jsonl")) {
            for line in text.lines() {
                let Ok(e) = serde_json::from_str::<warden_audit::Event>(line) else {
                    continue;
                };
                last_ts = e.ts_ms;
                if n >= from {
                    let ev = SseEvent::default().id(n.to_string()).data(shown(line));
                    if tx.blocking_send(Ok(ev)).is_err() {
                        return;
                    }
                }
                n += 1;
            }
        }
        if let Some(conn) = feed {
            let _ = conn.follow(|e| {
                if e.ts_ms < last_ts {
                    return true;
                }
                let Ok(line) = serde_json::to_string(&e) else {
                    return true;
                };
                let keep = n < from
                    || tx
                        .blocking_send(Ok(SseEvent::default().id(n.to_string()).data(shown(&line))))
                        .is_ok();
                n += 1;
                keep
            });
        }
    });
    // The stream ends when its token is revoked or its session ends.
    let credential = credential.map(|c| c.0).unwrap_or_default();
    let stream = futures_util::StreamExt::take_until(
        ReceiverStream::new(rx),
        Box::pin(app.revoked(credential)),
    );
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()))
}
