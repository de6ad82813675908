//! Pause and resume (`POST /v1/sandboxes/{id}/pause`, `/resume`): a
//! running sandbox's processes frozen in place and let go on. The
//! sandbox's supervisor does the work and keeps the state (a paused
//! sandbox stays paused across a restart of the daemon: its supervisor is
//! detached); these handlers carry the request there and its refusals
//! back as problems.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::{Extension, Json};
use std::sync::Arc;
use warden_runtime::client::ClientError;
use warden_runtime::lifecycle::{self, LifecycleError};
use warden_runtime::protocol::Refusal;

use super::redact;
use super::sandboxes::blocking;
use crate::api::SandboxInfo;
use crate::app::App;
use crate::auth::Caller;
use crate::error::{chain, ApiError, Problem};

/// Who asked, as the sandbox's audit log says it.
fn who(caller: &Caller) -> String {
    match caller.token_id() {
        Some(t) => format!("token {t} (API)"),
        None => "the owner (API)".into(),
    }
}

/// A supervisor's refusal of a request about a running sandbox, as a
/// problem: `paused` (409) for one that needs the processes of a paused
/// sandbox, `conflict` for one that does not fit its state, `unsupported`
/// (409) for one its backend cannot do.
pub(crate) fn refusal(id: &str, e: ClientError) -> ApiError {
    match e {
        ClientError::NotRunning { .. } => {
            ApiError::not_running(format!("sandbox {id} is not running"))
        }
        // A share the restore of a VM paused to disk refused (a bind
        // that became a link, or another directory): the world's state,
        // with its code at its field's pointer in the spec, as a start's
        // refusal of the same bind is.
        ClientError::Rejected {
            message,
            reason: Some(r),
            ..
        } => {
            let pointer = r.json_pointer().map(|p| format!("/spec{p}"));
            ApiError::conflict(message)
                .with_reason(Some(r.code))
                .with_field(pointer.as_deref())
        }
        ClientError::Rejected { code, message, .. } => match code {
            Refusal::Paused => ApiError::new(
                StatusCode::CONFLICT,
                "paused",
                format!("{message} (POST /v1/sandboxes/{id}/resume)"),
            ),
            Refusal::Unsupported => ApiError::new(StatusCode::CONFLICT, "unsupported", message),
            Refusal::NotFound => ApiError::not_found(message),
            Refusal::Invalid => ApiError::bad_request(message),
            Refusal::Conflict => ApiError::conflict(message),
            Refusal::Busy => ApiError::busy(&message),
        },
        ClientError::Unsupported(_) => ApiError::conflict(format!(
            "{}: stop and start sandbox {id} to pause it",
            chain(&e)
        )),
        e => ApiError::supervisor(&e),
    }
}

fn lifecycle_refusal(id: &str, e: LifecycleError) -> ApiError {
    match e {
        LifecycleError::Client(c) => refusal(id, c),
        e => e.into(),
    }
}

/// What a pause may ask (the body is optional): `{"to_disk": true}` saves
/// a VM sandbox's memory to its state and frees its RAM (its VMM ends);
/// refused 409 `unsupported` by a backend that cannot, and by a VM that
/// cannot be saved (a mounted share), which runs on.
#[derive(Debug, Default, serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PauseBody {
    #[serde(default)]
    pub to_disk: bool,
}

/// How `id` is to change.
#[derive(Clone, Copy)]
enum Change {
    Pause { to_disk: bool },
    Resume,
}

/// Pause or resume `id` for `caller`; the sandbox as it is afterwards.
async fn change(
    app: Arc<App>,
    caller: Caller,
    id: String,
    how: Change,
) -> Result<Json<SandboxInfo>, ApiError> {
    let by = who(&caller);
    let info = blocking(move || {
        let sb = app.sandbox(&id)?;
        if matches!(how, Change::Resume) && lifecycle::on_disk(&sb) {
            // Paused to disk by a supervisor that is gone (killed, or the
            // host rebooted): a new one restores it, a new run held to
            // the token's quotas, and to what the owner grants a token
            // now, as a start is.
            super::copies::grants::may_run_again(&app, &sb)?;
            crate::quota::may_start(&app, &caller, &sb)?;
            lifecycle::resume_from_disk(&app.state_dir, &sb, &app.exe).map_err(|e| {
                redact::lifecycle_error(
                    &caller,
                    Some(&sb),
                    &id,
                    "its resume",
                    lifecycle_refusal(&id, e),
                )
            })?;
            let row = app.record(&sb).ok().flatten();
            return Ok(app.info(&sb, row.as_ref()));
        }
        if !lifecycle::liveness(&sb).running() {
            return Err(ApiError::not_running(format!(
                "sandbox {id} is not running: start it with POST /v1/sandboxes/{id}/start"
            )));
        }
        let done = match how {
            Change::Pause { to_disk: false } => lifecycle::pause(&sb, &by),
            Change::Pause { to_disk: true } => lifecycle::pause_to_disk(&sb, &by),
            Change::Resume => lifecycle::resume(&sb, &by),
        };
        done.map_err(|e| {
            let doing = match how {
                Change::Pause { .. } => "its pause",
                Change::Resume => "its resume",
            };
            redact::lifecycle_error(&caller, Some(&sb), &id, doing, lifecycle_refusal(&id, e))
        })?;
        let row = app.record(&sb).ok().flatten();
        Ok(app.info(&sb, row.as_ref()))
    })
    .await?;
    Ok(Json(info))
}

#[utoipa::path(post, path = "/v1/sandboxes/{id}/pause", params(("id" = String, Path)),
    request_body(content = PauseBody, description = "optional: `{\"to_disk\": true}` saves a VM sandbox's memory to its state and frees its RAM"),
    responses((status = 200, description = "paused: its processes are frozen in place, its memory kept (not across a reboot of the host), its TTL stands still; commands and file operations are refused (409 `paused`) until it is resumed", body = SandboxInfo),
        (status = 404, body = Problem),
        (status = 409, description = "not running, paused already, or its backend cannot pause (`unsupported`)", body = Problem)),
    security(("token" = [])))]
pub async fn pause_asked(
    State(app): State<Arc<App>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    body: axum::body::Bytes,
) -> Result<Json<SandboxInfo>, ApiError> {
    let asked: PauseBody = if body.iter().all(u8::is_ascii_whitespace) {
        PauseBody::default()
    } else {
        serde_json::from_slice(&body)
            .map_err(|e| ApiError::bad_request(format!("the pause's body: {e}")))?
    };
    let to_disk = asked.to_disk;
    change(app, caller, id, Change::Pause { to_disk }).await
}

/// Pause `id` in place for `caller` (what the E2B door's pause calls).
pub async fn pause(
    State(app): State<Arc<App>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Json<SandboxInfo>, ApiError> {
    change(app, caller, id, Change::Pause { to_disk: false }).await
}

#[utoipa::path(post, path = "/v1/sandboxes/{id}/resume", params(("id" = String, Path)),
    responses((status = 200, description = "its processes go on where they were; its TTL moved on by the time it was paused", body = SandboxInfo),
        (status = 404, body = Problem),
        (status = 403, description = "a token's VM paused to disk whose supervisor is gone (its resume is a new run), whose spec reaches the host where the owner no longer lets a token: nothing is started, its saved memory kept, at the field's pointer", body = Problem),
        (status = 409, description = "not running, or not paused; or (`workspace_moved`, `workspace_link`) its workspace is not the directory it was made over; or (`share_link`, `share_changed`, `share_unreadable`, at the bind's pointer in the spec) a VM paused to disk whose share became a link or another directory, or can no longer be opened: nothing of it is served, and nothing changes (the sandbox stays paused to disk, its saved memory kept, and resumes once the share is back)", body = Problem)),
    security(("token" = [])))]
pub async fn resume(
    State(app): State<Arc<App>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Json<SandboxInfo>, ApiError> {
    change(app, caller, id, Change::Resume).await
}
