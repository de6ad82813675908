//! A sandbox's events as server-sent events: its log from an offset (each
//! event's SSE `id` is its line in the log, so a client resumes with
//! `?from=` or `Last-Event-ID`), then, while it runs, each new one as it
//! happens. A denial whose reason names an option that would change it
//! gets a `remedy` in this door's words (the option's JSON path in the
//! API's body), beside the keys the log recorded.
//!
//! The log is read a page at a time from the event asked for
//! ([`crate::logpage`]), never whole: without `follow` one answer holds
//! at most `limit` events ([`MOST`] at most; the client asks again from
//! the last id it got), and a following stream sends what the log holds
//! page by page at its client's pace, then each new event. Either holds
//! a place among its caller's long-lived answers ([`crate::leases`]) for
//! as long as it is open.

use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use serde::Deserialize;
use std::convert::Infallible;
use std::sync::Arc;
use tokio_stream::wrappers::ReceiverStream;
use warden_policy::Field;
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
    /// Without `follow`, the most events the answer holds (at most, and
    /// by default, 10000); ask again from the last id for more.
    pub limit: Option<usize>,
    /// Without `follow`, the newest N events (at most 10000) instead of
    /// the events from `from`: the view of a long log's end.
    pub tail: Option<usize>,
}

/// The most events one answer without `follow` holds.
pub const MOST: usize = 10_000;
/// Events read from the log at a time.
const PAGE: usize = 512;

#[utoipa::path(get, path = "/v1/sandboxes/{id}/events", params(("id" = String, Path), EventsQuery),
    responses((status = 200, description = "text/event-stream of audit events (JSON)"), (status = 404, body = Problem)),
    security(("token" = [])))]
pub async fn events(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    axum::Extension(credential): axum::Extension<crate::credential::Credential>,
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
    let mut from = q.from.or(last_id).unwrap_or(0);
    let follow = q.follow.unwrap_or(true);
    let tail = match (follow, q.tail, q.from.is_some() || q.limit.is_some()) {
        (_, None, _) => None,
        (_, Some(0), _) => return Err(ApiError::bad_request("tail is at least 1")),
        (true, Some(_), _) | (_, Some(_), true) => {
            return Err(ApiError::bad_request(
                "tail is the newest events of the log as it is: give it with follow=false, and without from or limit",
            ))
        }
        (false, Some(n), false) => Some(n.min(MOST)),
    };
    let limit = match (follow, tail.or(q.limit)) {
        (_, Some(0)) => return Err(ApiError::bad_request("limit is at least 1")),
        (false, Some(n)) => n.min(MOST),
        (false, None) => MOST,
        // Followed: the whole log, page by page, at the client's pace.
        (true, _) => usize::MAX,
    };
    let a = app.clone();
    let sb = blocking(move || a.sandbox(&id)).await?;
    if let Some(n) = tail {
        // The log's whole lines counted from its marks (see
        // [`crate::logpage`]): a page asked from past its end says where
        // the end is.
        let log = sb.dir().join("audit.jsonl");
        let lines = blocking(move || {
            crate::logpage::from_line(&log, u64::MAX, 0)
                .map(|p| p.next)
                .map_err(|e| ApiError::internal(format!("the event log cannot be read: {e}")))
        })
        .await?;
        from = lines.saturating_sub(n as u64);
    }
    // Held as long as the stream is (see [`crate::leases`]).
    let lease = app
        .leases
        .take(&credential, crate::leases::Kind::EventStream)?;
    // Anyone but the owner is shown no host path (see [`super::redact`]):
    // a request that reached here with no caller is nobody's.
    let holder = !matches!(caller.map(|c| c.0), Some(crate::auth::Caller::Owner));
    let hidden = super::redact::Hidden::new()
        .path(&app.state_dir, "(warden's state directory)")
        .path(&sb.meta().workspace, "(the workspace on the host)");
    let shown = move |line: &str| -> String {
        let line = if holder {
            super::redact::event_line(line, &hidden)
        } else {
            line.to_string()
        };
        // The records as the CLI's `--json` shows them: no control or
        // format character raw, whichever warden wrote the line.
        warden_audit::json::escape_line(&with_remedy(&line)).into_owned()
    };
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<SseEvent, Infallible>>(64);
    // The lease is the thread's, which holds the supervisor's socket: it
    // is given back when the thread ends, not when the response does. The
    // response holds the hang-up, which ends the thread's wait on a quiet
    // sandbox as soon as the client leaves (see [`crate::hangup`]).
    let (watched, hangup) = crate::hangup::pair();
    std::thread::spawn(move || {
        let _lease = lease;
        // Subscribe first, so that nothing falls between the log and the
        // feed.
        let feed = if follow && lifecycle::liveness(&sb).running() {
            Connection::open(&lifecycle::control(&sb))
                .ok()
                .filter(|c| watched.watch(c.fd()))
        } else {
            None
        };
        let log = sb.dir().join("audit.jsonl");
        let (mut n, mut sent, mut last_ts) = (from, 0usize, 0);
        loop {
            let Ok(page) = crate::logpage::from_line(&log, n, PAGE.min(limit - sent)) else {
                return;
            };
            for line in &page.lines {
                let Ok(e) = serde_json::from_str::<warden_audit::Event>(&line.text) else {
                    continue;
                };
                last_ts = e.ts_ms;
                let ev = SseEvent::default()
                    .id(line.n.to_string())
                    .data(shown(&line.text));
                if tx.blocking_send(Ok(ev)).is_err() {
                    return;
                }
                sent += 1;
            }
            n = page.next;
            if page.end || sent >= limit || page.lines.is_empty() {
                break;
            }
        }
        // Asked from past the log's end: the feed still knows the time
        // of the log's last event, to send nothing the log had.
        if last_ts == 0 && n > 0 {
            let last = crate::logpage::from_line(&log, n - 1, 1).unwrap_or_default();
            if let Some(e) = last
                .lines
                .first()
                .and_then(|l| serde_json::from_str::<warden_audit::Event>(&l.text).ok())
            {
                last_ts = e.ts_ms;
            }
        }
        if !follow {
            return;
        }
        if let Some(conn) = feed {
            let _ = conn.follow(|e| {
                if e.ts_ms < last_ts {
                    return true;
                }
                let Ok(line) = warden_audit::json::to_string(&e) else {
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
    let stream = futures_util::StreamExt::take_until(
        ReceiverStream::new(rx),
        Box::pin(app.revoked(credential)),
    );
    let stream = futures_util::StreamExt::map(stream, move |e| {
        let _held = &hangup;
        e
    });
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()))
}

/// What would change a decision, in the API's words: the option's JSON
/// path in a sandbox's body and the entries that would allow it (the CLI
/// says a flag; below the doors the option is only a field).
pub fn remedy(field: Field, entries: &[String]) -> Option<String> {
    let path = field.json_path()?;
    let them = if entries.len() > 1 { "them" } else { "it" };
    Some(match (entries, field.ty()) {
        ([], "bool") => format!("setting {path} to true would allow {them}"),
        ([], "size") => format!("a larger {path} would allow {them}"),
        ([], _) => format!("see {path}"),
        (entries, _) => {
            let quoted: Vec<String> = entries.iter().map(|e| format!("{e:?}")).collect();
            format!("adding {} to {path} would allow {them}", quoted.join(", "))
        }
    })
}

/// What would have allowed a refusal, in the API's words.
fn word(key: &str, entries: &[String]) -> Option<String> {
    remedy(Field::from_profile_key(key)?, entries)
}

/// An event as one line for the API's readers (MCP's denial lists), with
/// its remedy in the API's words.
pub fn describe(event: &warden_audit::Event) -> String {
    event.describe_with(word)
}

/// A log line with its `remedy` key added, when it has one: appended
/// before the closing brace, so the recorded keys keep their order and
/// bytes.
fn with_remedy(line: &str) -> String {
    let remedy = serde_json::from_str::<warden_audit::Event>(line)
        .ok()
        .and_then(|e| e.kind.remedy(word));
    match (remedy, line.trim_end().strip_suffix('}')) {
        (Some(r), Some(head)) => match serde_json::to_string(&r) {
            Ok(r) => format!("{head},\"remedy\":{r}}}"),
            Err(_) => line.to_string(),
        },
        _ => line.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_denial_is_told_its_remedy_as_a_json_path_and_keeps_its_keys() {
        let line = r#"{"ts_ms":1,"sandbox":"sb","event":"connection","protocol":"tcp","name":"a.test","port":22,"original_destination":null,"allowed":false,"rule":null,"detail":"no allowlist entry allows port 22 for any name","bytes_out":0,"bytes_in":0,"duration_ms":0,"reason":{"code":"port_not_allowed","field":"egress.domains","allow":{"field":"egress.domains","value":"a.test:22"}}}"#;
        let out = with_remedy(line);
        assert!(out.starts_with(&line[..line.len() - 1]), "{out}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(
            v["remedy"],
            "adding \"a.test:22\" to /egress/domains would allow it"
        );
        assert_eq!(v["reason"]["code"], "port_not_allowed");
        assert!(!out.contains("--"), "{out}");
        // Plain HTTP: a switch.
        assert_eq!(
            remedy(Field::AllowHttp, &[]).as_deref(),
            Some("setting /egress/allow_http to true would allow it")
        );
        // An allowed connection, or a denial no option changes: as recorded.
        let allowed = line.replace(r#""allowed":false"#, r#""allowed":true"#);
        assert_eq!(with_remedy(&allowed), allowed);
    }
}
