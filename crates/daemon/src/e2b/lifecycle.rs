//! A sandbox's life as E2B tells it: pause (with its memory: the native
//! pause, its processes frozen in place; or its files only: the native
//! stop, its files kept), `connect` and the older `resume` (the native
//! resume, or the native start of one paused to its files), and
//! `lifecycle={"on_timeout": "pause"}` (a sandbox paused, not stopped,
//! when its timeout ends).
//!
//! What the door must remember is kept in the sandbox's labels (in the
//! daemon's database, so it outlives a daemon restart), under `e2b.`
//! keys that E2B clients neither see in their metadata nor may set:
//! `e2b.paused` for a sandbox paused to its files, `e2b.on_timeout` for
//! what its timeout does. A stopped sandbox carrying either is paused
//! for E2B; any other stopped sandbox is gone (404).
//!
//! Pause on timeout with memory: the sandbox's TTL is its timeout plus
//! [`super::record::GRACE`], and the door pauses it when its timeout ends (a paused
//! sandbox's TTL stands still). Were the daemon down at that moment, its
//! supervisor stops it at the TTL, and it is then paused to its files:
//! its processes are lost, never its files, and it never runs on past
//! what was asked. With `mode: "filesystem"` the TTL is the timeout and
//! the stop at its end is the pause.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::Deserialize;
use std::sync::Arc;
use std::time::Duration;

use super::answer::error;
use super::control::{self, from_api, permitted_body, permitted_body_as, running, set_labels};
use super::record::{end_ms, pauses_on_timeout, Seen, GRACE, PAUSED};
use super::{permit, E2b};
use crate::api::SandboxInfo;
use crate::app::App;
use crate::auth::Caller;
use crate::routes::sandboxes;

/// How often the door looks for timeouts that end in a pause.
const SWEEP: Duration = Duration::from_secs(1);
/// E2B's timeout when a connect or resume names none.
const DEFAULT_TIMEOUT: u64 = 300;

/// `POST /sandboxes/{id}/pause` (`memory` and `requireHealthyGuest`, both
/// optional).
#[derive(Debug, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct PauseBody {
    #[serde(default)]
    memory: Option<bool>,
    /// The sandbox's guest is warden's own init, answering or gone: there
    /// is no unresponsive agent to pause past.
    #[serde(default)]
    #[allow(dead_code)]
    require_healthy_guest: Option<bool>,
}

/// Pause: 204; 409 when it is paused already (the SDK's `pause()` answers
/// `False` then); 404 when it does not run. With its memory (the default)
/// the native pause; `memory: false` the native stop, its files kept.
pub async fn pause(
    State(e): State<Arc<E2b>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    body: axum::body::Bytes,
) -> Response {
    let route = "/v1/sandboxes/{id}/pause";
    let body: PauseBody = match permitted_body(&e, &caller, route, &id, &body) {
        Ok(b) => b,
        Err(r) => return *r,
    };
    let _one = e.transitions.lock().await;
    let info = match running(&e, &id).await {
        Ok(i) => i,
        Err(r) => return r,
    };
    if Seen::of(&info) != Seen::Running {
        return error(
            StatusCode::CONFLICT,
            format!("sandbox {id} is paused already"),
        );
    }
    if body.memory == Some(false) {
        return match to_files(&e, &id).await {
            Ok(()) => StatusCode::NO_CONTENT.into_response(),
            Err(r) => r,
        };
    }
    match crate::routes::pause::pause(State(e.app.clone()), Extension(caller), Path(id)).await {
        Ok(_) => StatusCode::NO_CONTENT.into_response(),
        Err(err) => from_api(err),
    }
}

/// Pause `id` to its files: marked first (so that no moment shows it
/// stopped and unmarked, which is gone), then stopped.
async fn to_files(e: &E2b, id: &str) -> Result<(), Response> {
    set_labels(&e.app, id, |l| {
        l.insert(PAUSED.into(), "filesystem".into());
    })
    .await?;
    let body = axum::body::Bytes::from_static(b"{\"grace_seconds\": 2}");
    match sandboxes::stop(State(e.app.clone()), Path(id.to_string()), body).await {
        Ok(_) => Ok(()),
        Err(err) => {
            let _ = set_labels(&e.app, id, |l| {
                l.remove(PAUSED);
            })
            .await;
            Err(from_api(err))
        }
    }
}

/// Bring a paused sandbox back: resumed in place, or (paused to its
/// files, or `reboot` asked) started afresh from its files; its timeout
/// then set anew, as E2B sets it on resume.
async fn wake(
    e: &E2b,
    caller: &Caller,
    info: &SandboxInfo,
    reboot: bool,
    timeout: u64,
) -> Result<SandboxInfo, Response> {
    let id = info.id.clone();
    if let Err(d) = permit(
        &e.app,
        caller,
        "POST",
        "/v1/sandboxes/{id}/resume",
        Some(&id),
    ) {
        return Err(d.response());
    }
    let mut seen = Seen::of(info);
    if seen == Seen::Paused && reboot {
        // A cold boot from its files: stopped, then started as one paused
        // to its files is. A token's sandbox runs again only with what
        // the owner grants a token now: asked before the stop, so that a
        // refusal leaves it paused as it was.
        let (app, sid) = (e.app.clone(), id.clone());
        sandboxes::blocking(move || {
            let sb = app.sandbox(&sid)?;
            crate::routes::copies::grants::may_run_again(&app, &sb)
        })
        .await
        .map_err(from_api)?;
        to_files(e, &id).await?;
        seen = Seen::PausedToFiles;
    }
    match seen {
        Seen::Paused => {
            let _resumed = crate::routes::pause::resume(
                State(e.app.clone()),
                Extension(caller.clone()),
                Path(id.clone()),
            )
            .await
            .map_err(from_api)?;
        }
        Seen::PausedToFiles => {
            let _started = sandboxes::start(
                State(e.app.clone()),
                Extension(caller.clone()),
                Path(id.clone()),
            )
            .await
            .map_err(from_api)?;
            set_labels(&e.app, &id, |l| {
                l.remove(PAUSED);
            })
            .await?;
        }
        Seen::Running | Seen::Gone => {}
    }
    control::set_ttl(e, &id, timeout).await?;
    control::running(e, &id).await
}

#[derive(Debug, Deserialize, Default)]
pub struct ConnectBody {
    #[serde(default)]
    timeout: Option<u64>,
    /// `false` (`on_resume="reboot"`): start it afresh from its files.
    #[serde(default)]
    memory: Option<bool>,
}

/// `connect`: 200 with the sandbox when it runs (its timeout moved only
/// when the new one ends later), 201 when it was paused and is resumed.
pub async fn connect(
    State(e): State<Arc<E2b>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    body: axum::body::Bytes,
) -> Response {
    let body: ConnectBody =
        match permitted_body_as(&e, &caller, "GET", "/v1/sandboxes/{id}", &id, &body) {
            Ok(b) => b,
            Err(r) => return *r,
        };
    let _one = e.transitions.lock().await;
    let info = match running(&e, &id).await {
        Ok(i) => i,
        Err(r) => return r,
    };
    let (info, status) = if Seen::of(&info) == Seen::Running {
        if let Some(t) = body.timeout {
            if let Err(r) = extend(&e, &caller, &info, t).await {
                return r;
            }
        }
        (info, StatusCode::OK)
    } else {
        let timeout = body.timeout.unwrap_or(DEFAULT_TIMEOUT);
        match wake(&e, &caller, &info, body.memory == Some(false), timeout).await {
            Ok(i) => (i, StatusCode::CREATED),
            Err(r) => return r,
        }
    };
    match super::answer::access_token(&e, &caller, &info) {
        Ok(key) => (status, Json(super::answer::created(&info, key))).into_response(),
        Err(r) => *r,
    }
}

/// Move a running sandbox's timeout to `seconds` from now when that ends
/// later than it does now (E2B's connect never shortens it).
async fn extend(
    e: &E2b,
    caller: &Caller,
    info: &SandboxInfo,
    seconds: u64,
) -> Result<(), Response> {
    if let Err(d) = permit(
        &e.app,
        caller,
        "POST",
        "/v1/sandboxes/{id}/timeout",
        Some(&info.id),
    ) {
        return Err(d.response());
    }
    let wanted = warden_runtime::state::now_ms().saturating_add(seconds.saturating_mul(1000));
    match end_ms(info) {
        Some(end) if end >= wanted => Ok(()),
        _ => control::set_ttl(e, &info.id, seconds).await,
    }
}

/// `POST /sandboxes/{id}/resume` (`timeout`, `autoPause`), E2B's older
/// way to resume: 201 with the sandbox; 409 when it is not paused.
#[derive(Debug, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct ResumeBody {
    #[serde(default)]
    timeout: Option<u64>,
    #[serde(default)]
    auto_pause: Option<bool>,
}

pub async fn resume(
    State(e): State<Arc<E2b>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    body: axum::body::Bytes,
) -> Response {
    let body: ResumeBody =
        match permitted_body_as(&e, &caller, "GET", "/v1/sandboxes/{id}", &id, &body) {
            Ok(b) => b,
            Err(r) => return *r,
        };
    if body.auto_pause == Some(true) {
        return error(
            StatusCode::BAD_REQUEST,
            "autoPause on resume is not taken: give lifecycle={\"on_timeout\": \"pause\"} when the sandbox is created",
        );
    }
    let _one = e.transitions.lock().await;
    let info = match running(&e, &id).await {
        Ok(i) if Seen::of(&i) != Seen::Running => i,
        Ok(_) => return error(StatusCode::CONFLICT, format!("sandbox {id} is not paused")),
        Err(r) => return r,
    };
    let timeout = body.timeout.unwrap_or(DEFAULT_TIMEOUT);
    let info = match wake(&e, &caller, &info, false, timeout).await {
        Ok(i) => i,
        Err(r) => return r,
    };
    match super::answer::access_token(&e, &caller, &info) {
        Ok(key) => (
            StatusCode::CREATED,
            Json(super::answer::created(&info, key)),
        )
            .into_response(),
        Err(r) => *r,
    }
}

/// Pause, every [`SWEEP`], each sandbox whose timeout ended and whose
/// timeout ends in a pause with its memory. Runs for the daemon's life.
pub fn sweep_timeouts(e: Arc<E2b>) {
    let Ok(rt) = tokio::runtime::Handle::try_current() else {
        tracing::warn!("e2b: no runtime to pause sandboxes on timeout in; they stop instead");
        return;
    };
    // Held weakly: the sweep ends with the router that holds the door.
    let weak = Arc::downgrade(&e);
    drop(e);
    rt.spawn(async move {
        loop {
            tokio::time::sleep(SWEEP).await;
            let Some(e) = weak.upgrade() else {
                return;
            };
            let _one = e.transitions.lock().await;
            let app = e.app.clone();
            let _ = tokio::task::spawn_blocking(move || pause_ended(&app)).await;
        }
    });
}

/// One sweep: the sandboxes to pause, paused.
fn pause_ended(app: &App) {
    // The records read, and the database let go, before anything else
    // takes it (one lock, not reentrant).
    let rows = match app.db().map(|db| db.sandboxes()) {
        Ok(Ok(rows)) => rows,
        _ => return,
    };
    let now = warden_runtime::state::now_ms();
    let grace = GRACE.as_millis() as u64;
    for row in rows.iter().filter(|r| pauses_on_timeout(&r.labels)) {
        let Ok(sb) = app.sandbox(&row.id) else {
            continue;
        };
        // A record older than the sandbox holding its name now was the
        // door's for an earlier sandbox of that name (removed behind the
        // daemon's back, the name given to one of the owner's): the one
        // there now is not the door's to pause.
        if !row.is_of(&sb) {
            continue;
        }
        let info = app.info(&sb, Some(row));
        let ended = info
            .ttl_deadline_ms
            .is_some_and(|d| now.saturating_add(grace) >= d);
        if info.state == "running" && ended {
            if let Err(err) = warden_runtime::lifecycle::pause(
                &sb,
                "the E2B door (its timeout ended: on_timeout pause)",
            ) {
                tracing::warn!(sandbox = %row.id, "e2b: could not pause on timeout: {}", crate::error::chain(&err));
            }
        }
    }
}
