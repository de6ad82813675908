//! `get_metrics` (`GET /sandboxes/{id}/metrics?start=&end=`): CPU, memory
//! and disk of a sandbox over time. Each sample is what the sandbox's
//! supervisor reads from its cgroup (CPU time, memory in use) and the
//! bytes of its workspace layer (its disk use), as the native `GET
//! /v1/sandboxes/{id}` shows them; the door takes one every [`EVERY`]
//! for each running sandbox it made, and keeps the last [`KEPT`]. The CPU
//! share of a sample is the CPU time used since the one before it (or,
//! for the first, since the sandbox started) over the time between them
//! and the cores it may use. Samples live in the daemon's memory: a
//! daemon restart starts them again.

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::answer::error;
use super::{permit, E2b};
use crate::api::SandboxInfo;
use crate::auth::Caller;

/// How often a running E2B sandbox is sampled (E2B samples every 5 s).
const EVERY: Duration = Duration::from_secs(5);
/// Samples kept per sandbox: an hour of them.
const KEPT: usize = 720;

/// One look at a sandbox.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    ms: u64,
    cpu_usec: u64,
    memory: u64,
    disk: u64,
}

/// The samples of each sandbox, oldest first, with the identity of the
/// sandbox they were taken of: a sandbox given the name of an earlier one
/// starts with none of the earlier one's.
#[derive(Default)]
pub struct Samples(Mutex<HashMap<String, (String, VecDeque<Sample>)>>);

impl Samples {
    fn push(&self, id: &str, uid: &str, s: Sample) {
        if let Ok(mut all) = self.0.lock() {
            let (of, q) = all
                .entry(id.to_string())
                .or_insert_with(|| (uid.to_string(), VecDeque::new()));
            if of != uid {
                *of = uid.to_string();
                q.clear();
            }
            q.push_back(s);
            while q.len() > KEPT {
                q.pop_front();
            }
        }
    }

    fn of(&self, id: &str, uid: &str) -> Vec<Sample> {
        self.0
            .lock()
            .map(|all| match all.get(id) {
                Some((of, q)) if of == uid => q.iter().copied().collect(),
                _ => Vec::new(),
            })
            .unwrap_or_default()
    }

    /// Forget the sandboxes not in `live`.
    fn keep(&self, live: &[String]) {
        if let Ok(mut all) = self.0.lock() {
            all.retain(|id, _| live.contains(id));
        }
    }
}

fn sample_of(info: &SandboxInfo) -> Option<Sample> {
    (info.state == "running" || info.state == "paused").then(|| Sample {
        ms: warden_runtime::state::now_ms(),
        cpu_usec: info.cpu_usec.unwrap_or(0),
        memory: info.memory_bytes.unwrap_or(0),
        disk: info.changes_bytes,
    })
}

/// Sample every running sandbox the door made, every [`EVERY`], for the
/// daemon's life.
pub fn sample_sandboxes(e: Arc<E2b>) {
    let Ok(rt) = tokio::runtime::Handle::try_current() else {
        return;
    };
    // Held weakly: the sampling ends with the router that holds the door.
    let weak = Arc::downgrade(&e);
    drop(e);
    rt.spawn(async move {
        loop {
            tokio::time::sleep(EVERY).await;
            let Some(e) = weak.upgrade() else {
                return;
            };
            let _ = tokio::task::spawn_blocking(move || sample_once(&e)).await;
        }
    });
}

fn sample_once(e: &E2b) {
    let Ok(rows) = e.app.db().and_then(|db| {
        db.sandboxes()
            .map_err(|err| crate::error::ApiError::internal(crate::error::chain(&err)))
    }) else {
        return;
    };
    let mut live = Vec::new();
    for row in rows
        .iter()
        .filter(|r| r.labels.contains_key("e2b.template"))
    {
        let Ok(sb) = e.app.sandbox(&row.id) else {
            continue;
        };
        // Only the sandbox the record was made for: a record left of an
        // earlier sandbox of the name (the name now the owner's CLI
        // sandbox's) is not the door's to sample.
        if !row.is_of(&sb) {
            continue;
        }
        if let Some(s) = sample_of(&e.app.info(&sb, Some(row))) {
            e.samples.push(&row.id, &sb.uid(), s);
            live.push(row.id.clone());
        }
    }
    e.samples.keep(&live);
}

/// A metric as E2B answers it.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Metric {
    timestamp: String,
    timestamp_unix: u64,
    cpu_count: u32,
    cpu_used_pct: f64,
    mem_used: u64,
    mem_total: u64,
    mem_cache: u64,
    disk_used: u64,
    disk_total: u64,
}

#[derive(Debug, Deserialize)]
pub struct MetricsQuery {
    /// Unix seconds.
    #[serde(default)]
    start: Option<u64>,
    #[serde(default)]
    end: Option<u64>,
}

/// The CPU share of `s` after `before` (or since `started_ms`), in
/// percent of `cpus` cores (of one core for a sandbox with no CPU quota).
fn cpu_pct(s: &Sample, before: Option<&Sample>, started_ms: u64, cpus: u32) -> f64 {
    let (cpu0, ms0) = before.map_or((0, started_ms), |b| (b.cpu_usec, b.ms));
    let wall_us = s.ms.saturating_sub(ms0).saturating_mul(1000);
    if wall_us == 0 {
        return 0.0;
    }
    let used = s.cpu_usec.saturating_sub(cpu0) as f64;
    let pct = used / wall_us as f64 / f64::from(cpus.max(1)) * 100.0;
    (pct * 100.0).round() / 100.0
}

pub async fn get(
    State(e): State<Arc<E2b>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    query: Result<Query<MetricsQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    if let Err(d) = permit(&e.app, &caller, "GET", "/v1/sandboxes/{id}", Some(&id)) {
        return d.response();
    }
    let Ok(Query(q)) = query else {
        return error(
            StatusCode::BAD_REQUEST,
            "the query does not fit: start and end are Unix seconds",
        );
    };
    let info = match super::control::running(&e, &id).await {
        Ok(i) => i,
        Err(r) => return r,
    };
    let e2 = e.clone();
    let sid = id.clone();
    // The sandbox's own limits ([`super::control::limits`]), never the
    // host's; a spec that cannot be read is said, not made up.
    let own = tokio::task::spawn_blocking(move || super::control::limits(&e2.app, &sid)).await;
    let (own, uid) = match own {
        Ok(Ok(o)) => o,
        Ok(Err(why)) => return error(StatusCode::INTERNAL_SERVER_ERROR, why),
        Err(_) => {
            return error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "the sandbox's limits could not be read",
            )
        }
    };
    let (cpus, mem_total, disk_total) = (own.cpus, own.memory, own.disk);
    let mut samples = e.samples.of(&id, &uid);
    // A sandbox younger than the first sample: one look now.
    if samples.is_empty() {
        samples.extend(sample_of(&info));
    }
    let from = q.start.map(|s| s.saturating_mul(1000)).unwrap_or(0);
    let to = q.end.map(|s| s.saturating_mul(1000)).unwrap_or(u64::MAX);
    let mut out = Vec::new();
    for (i, s) in samples.iter().enumerate() {
        if s.ms < from || s.ms > to {
            continue;
        }
        let before = i.checked_sub(1).and_then(|j| samples.get(j));
        let t = std::time::UNIX_EPOCH + Duration::from_millis(s.ms);
        out.push(Metric {
            timestamp: humantime::format_rfc3339_millis(t).to_string(),
            timestamp_unix: s.ms / 1000,
            cpu_count: cpus,
            cpu_used_pct: cpu_pct(s, before, info.created_ms, cpus),
            mem_used: s.memory,
            mem_total,
            mem_cache: 0,
            disk_used: s.disk,
            disk_total,
        });
    }
    Json(out).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cpu_share_is_the_time_used_over_the_time_passed_and_the_cores() {
        let a = Sample {
            ms: 1_000,
            cpu_usec: 0,
            memory: 0,
            disk: 0,
        };
        let b = Sample {
            ms: 6_000,
            cpu_usec: 5_000_000,
            ..a
        };
        assert_eq!(cpu_pct(&b, Some(&a), 0, 1), 100.0);
        assert_eq!(cpu_pct(&b, Some(&a), 0, 2), 50.0);
        assert_eq!(cpu_pct(&a, None, 1_000, 1), 0.0);
    }
}
