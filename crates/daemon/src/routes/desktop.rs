//! A desktop sandbox's screen and input, for agents: what it is and
//! whether it is up (`GET .../desktop`), a screenshot (PNG), mouse,
//! keyboard and the browser, shaped like the desktop SDKs. Each call is
//! checked here (a sandbox without a desktop, an unknown action, a point
//! off the screen are refused before anything runs) and done inside the
//! sandbox by the runtime ([`warden_runtime::desktop::actions`]).

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::Serialize;
use std::sync::Arc;
use utoipa::ToSchema;
use warden_runtime::client::{ClientError, Connection};
use warden_runtime::desktop::actions::{self, Action, ActionError};
use warden_runtime::protocol::DesktopService;

use super::inside;
use super::sandboxes::blocking;
use crate::app::App;
use crate::auth::Caller;
use crate::error::{chain, ApiError, Problem};

/// A desktop sandbox's screen, where people and tools reach it, whether
/// it is up, and what the caller may do with it: the one answer a viewer,
/// a client or a test waits on.
#[derive(Debug, Serialize, ToSchema)]
pub struct DesktopInfo {
    /// The X display inside the sandbox (`:99`).
    pub display: String,
    pub width: u32,
    pub height: u32,
    /// The VNC stream (a WebSocket of this daemon).
    pub vnc: String,
    /// The browser's DevTools endpoint (a WebSocket of this daemon), for
    /// Playwright's `connect_over_cdp` and the like.
    pub cdp: String,
    /// The dashboard's page where a person watches and takes over.
    pub stream_url: String,
    /// Whether the sandbox runs.
    pub running: bool,
    /// Its programs (the X server, the window manager, the browser, ...) as
    /// the sandbox's supervisor keeps them; empty while it is stopped.
    #[schema(value_type = Vec<Object>)]
    pub services: Vec<DesktopService>,
    /// The VNC server answers on the sandbox's own loopback: the screen
    /// can be watched now (`vnc`).
    pub screen: bool,
    /// The browser's DevTools answer on the sandbox's own loopback
    /// (`cdp`).
    pub devtools: bool,
    /// The caller may drive the desktop (`desktop:control`); otherwise it
    /// only watches: its actions are refused and the daemon drops the
    /// keys, pointer and clipboard of its VNC session.
    pub control: bool,
}

/// An action's answer.
#[derive(Debug, Serialize, ToSchema)]
pub struct ActionDone {
    pub action: String,
}

/// The sandbox's desktop, or a 409 that says it has none.
fn desktop_of(
    app: &App,
    id: &str,
) -> Result<(warden_workspace::Sandbox, warden_policy::DesktopSpec), ApiError> {
    let sb = app.sandbox(id)?;
    let stored: warden_runtime::state::Stored =
        warden_runtime::state::read_json(&sb.dir().join(warden_runtime::state::STORED))
            .map_err(|e| ApiError::internal(chain(&e)))?;
    match stored.spec.desktop {
        Some(d) => Ok((sb, d)),
        None => Err(ApiError::new(
            StatusCode::CONFLICT,
            "not_a_desktop",
            format!("sandbox {id} has no desktop: create one with the `desktop` profile (`\"profile\": \"desktop\"`) or `desktop: true` in its spec"),
        )),
    }
}

fn failed(id: &str, e: ActionError) -> ApiError {
    match &e {
        e if e.is_bad_input() => ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            match e {
                ActionError::Unknown { .. } => "unknown_action",
                ActionError::OffScreen { .. } => "off_screen",
                _ => "invalid_body",
            },
            e.to_string(),
        )
        .with_field(e.field().filter(|f| !f.is_empty())),
        ActionError::Client(ClientError::NotRunning { .. }) => ApiError::not_running(format!(
            "sandbox {id} is not running: start it (POST /v1/sandboxes/{id}/start)"
        )),
        ActionError::Client(_) => ApiError::conflict(chain(&e)),
        ActionError::Failed { .. } | ActionError::Timeout { .. } => {
            ApiError::new(StatusCode::BAD_GATEWAY, "desktop_failed", chain(&e))
        }
        _ => ApiError::internal(chain(&e)),
    }
}

#[utoipa::path(get, path = "/v1/sandboxes/{id}/desktop", params(("id" = String, Path)),
    responses((status = 200, body = DesktopInfo), (status = 404, body = Problem), (status = 409, body = Problem)),
    security(("token" = [])))]
pub async fn info(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    caller: Option<Extension<Caller>>,
) -> Result<Json<DesktopInfo>, ApiError> {
    let (a, i) = (app.clone(), id.clone());
    let (d, status) = blocking(move || {
        let (sb, d) = desktop_of(&a, &i)?;
        let status = Connection::open(&warden_runtime::lifecycle::control(&sb))
            .and_then(|c| c.status())
            .ok();
        Ok((d, status))
    })
    .await?;
    let running = status.is_some();
    // Up means answering: a program that runs may not listen yet.
    let (screen, devtools) = if running {
        (
            inside::listens(&app, &id, d.vnc_port).await?,
            inside::listens(&app, &id, d.cdp_port).await?,
        )
    } else {
        (false, false)
    };
    Ok(Json(DesktopInfo {
        display: d.display_name(),
        width: d.width,
        height: d.height,
        vnc: format!("/v1/sandboxes/{id}/desktop/vnc"),
        cdp: format!("/v1/sandboxes/{id}/desktop/cdp"),
        stream_url: format!("/#/sandboxes/{id}/desktop"),
        running,
        services: status.and_then(|s| s.desktop).unwrap_or_default(),
        screen,
        devtools,
        control: inside::may_control(caller.as_ref().map(|c| &c.0)),
    }))
}

#[utoipa::path(get, path = "/v1/sandboxes/{id}/desktop/screenshot", params(("id" = String, Path)),
    responses((status = 200, description = "the screen now", content_type = "image/png"),
        (status = 404, body = Problem), (status = 409, body = Problem), (status = 502, body = Problem)),
    security(("token" = [])))]
pub async fn screenshot(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let png = blocking(move || {
        let (sb, _) = desktop_of(&app, &id)?;
        actions::screenshot(&warden_runtime::lifecycle::control(&sb)).map_err(|e| failed(&id, e))
    })
    .await?;
    Ok((
        [
            (header::CONTENT_TYPE, "image/png"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        png,
    )
        .into_response())
}

#[utoipa::path(post, path = "/v1/sandboxes/{id}/desktop/{action}",
    params(("id" = String, Path), ("action" = String, Path, description = "move_mouse {x,y}; left_click, right_click, double_click {x?,y?}; scroll {dx?,dy?} or {direction, amount?}; write {text}; press {keys}; open {url}")),
    request_body(content = Object, description = "the action's values (none for a click where the pointer is)"),
    responses((status = 200, body = ActionDone), (status = 404, body = Problem), (status = 409, body = Problem),
        (status = 422, body = Problem), (status = 502, body = Problem)),
    security(("token" = [])))]
pub async fn act(
    State(app): State<Arc<App>>,
    Path((id, action)): Path<(String, String)>,
    body: Bytes,
) -> Result<Json<ActionDone>, ApiError> {
    let value: serde_json::Value = if body.iter().all(u8::is_ascii_whitespace) {
        serde_json::Value::Null
    } else {
        serde_json::from_slice(&body).map_err(|e| {
            ApiError::bad_request(format!("the request body is not valid JSON: {e}"))
        })?
    };
    blocking(move || {
        let (sb, d) = desktop_of(&app, &id)?;
        let a = Action::parse(&action, value, &d).map_err(|e| failed(&id, e))?;
        actions::perform(&warden_runtime::lifecycle::control(&sb), &a)
            .map_err(|e| failed(&id, e))?;
        Ok(Json(ActionDone { action }))
    })
    .await
}
