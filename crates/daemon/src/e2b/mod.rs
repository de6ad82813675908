//! An E2B-compatible front door (`warden serve --e2b ADDR`): the control
//! API and the sandbox API (envd) the way the unmodified `e2b` SDK calls
//! them, routed onto the daemon's own handlers and the runtime. Nothing
//! here runs or confines anything: a create is the native create (an E2B
//! template is a warden profile), a command is the native exec path
//! ([`crate::execs`]) or the terminal path, a file operation is the
//! sandbox init's confined file operation, a watch is the native watch.
//!
//! The SDK is pointed here with `E2B_API_URL` and `E2B_SANDBOX_URL` (both
//! this listener; sandbox calls name their sandbox in the
//! `E2b-Sandbox-Id` header), and `E2B_API_KEY` holding a warden token.
//! The control API takes the token in `X-API-Key`; each sandbox answers
//! its token back as the envd access token, which the SDK then sends in
//! `X-Access-Token` and which is checked on every sandbox call. Each call
//! is allowed by the same scope table as the native route it maps to
//! ([`crate::auth::ROUTES`]), so a token may do through E2B exactly what
//! it may do natively.

mod connect;
mod control;
mod filesystem;
mod paths;
mod process;
mod terminal;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post, put};
use axum::Router;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::app::App;
use crate::auth::{self, Caller};
use crate::error::chain;

/// The envd version warden answers as: the SDK enables features by it
/// (stdin control 0.3.0, no default user 0.4.0, octet-stream uploads
/// 0.5.7); those past it (file metadata, entry info in watch events) are
/// refused by the SDK itself with its own message.
pub const ENVD_VERSION: &str = "0.5.7";

/// What the E2B door keeps beside the daemon's own state.
pub struct E2b {
    pub app: Arc<App>,
    /// Processes started through the sandbox API, by sandbox.
    pub procs: Mutex<HashMap<String, Vec<Arc<process::Proc>>>>,
    /// Watchers of the polling watch calls, by id.
    pub watchers: Mutex<HashMap<String, Arc<filesystem::Watcher>>>,
}

/// The E2B routes: the control API (`X-API-Key`) and the sandbox API
/// (`X-Access-Token`, `E2b-Sandbox-Id`).
pub fn router(app: Arc<App>) -> Router {
    let body_limit = app.limits.body_bytes;
    let state = Arc::new(E2b {
        app,
        procs: Mutex::new(HashMap::new()),
        watchers: Mutex::new(HashMap::new()),
    });
    let control = Router::new()
        .route("/sandboxes", post(control::create).get(control::list))
        .route("/v2/sandboxes", post(control::create).get(control::list))
        .route(
            "/sandboxes/{id}",
            get(control::get_one).delete(control::kill),
        )
        .route("/sandboxes/{id}/timeout", post(control::set_timeout))
        .route("/sandboxes/{id}/connect", post(control::connect))
        .route("/v2/sandboxes/{id}/connect", post(control::connect))
        .route("/sandboxes/{id}/pause", post(control::not_supported))
        .route("/sandboxes/{id}/resume", post(control::not_supported))
        .route("/sandboxes/{id}/snapshots", post(control::not_supported))
        .route("/sandboxes/{id}/fork", post(control::not_supported))
        .route("/sandboxes/{id}/refreshes", post(control::not_supported))
        .route("/sandboxes/{id}/network", put(control::not_supported))
        .route("/sandboxes/{id}/metrics", get(control::not_supported))
        .route("/sandboxes/{id}/logs", get(control::not_supported))
        .route("/v2/sandboxes/{id}/logs", get(control::not_supported))
        .route("/sandboxes/metrics", get(control::not_supported))
        .route("/snapshots", get(control::not_supported))
        .route("/templates", get(control::not_supported))
        .route("/templates/{id}", delete(control::not_supported))
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            control_auth,
        ));
    let envd = Router::new()
        .route("/process.Process/{method}", post(process::rpc))
        .route("/filesystem.Filesystem/{method}", post(filesystem::rpc))
        .route("/health", get(health))
        .layer(axum::extract::DefaultBodyLimit::max(body_limit));
    // Uploads stream into the sandbox (the native write), up to the files
    // API's own limit.
    let transfer = Router::new()
        .route("/files", get(filesystem::download).post(filesystem::upload))
        .layer(axum::extract::DefaultBodyLimit::disable());
    let sandbox_api = envd
        .merge(transfer)
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            envd_auth,
        ));
    Router::new()
        .merge(control.layer(axum::extract::DefaultBodyLimit::max(body_limit)))
        .merge(sandbox_api)
        .fallback(control::unknown)
        .with_state(state)
}

/// envd's health probe: the SDK asks it after a failed call, to tell a
/// stopped sandbox from a network fault (with the sandbox's access token,
/// like every sandbox call).
async fn health(
    State(e): State<Arc<E2b>>,
    axum::Extension(caller): axum::Extension<Caller>,
    headers: HeaderMap,
) -> Response {
    let Some(id) = sandbox_header(&headers) else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    // Asked quietly: a probe is not a refused call.
    let may = |path: &str| {
        auth::ROUTES
            .iter()
            .find(|r| r.method == "POST" && r.path == path)
            .is_some_and(|r| caller.may(r, Some(&id)).is_ok())
    };
    if !may("/v1/sandboxes/{id}/exec") && !may("/v1/sandboxes/{id}/files/mkdir") {
        return StatusCode::FORBIDDEN.into_response();
    }
    let app = e.app.clone();
    let sid = id.clone();
    let running = tokio::task::spawn_blocking(move || {
        app.sandbox(&sid)
            .map(|sb| warden_runtime::lifecycle::liveness(&sb).running())
            .unwrap_or(false)
    })
    .await
    .unwrap_or(false);
    if running {
        StatusCode::NO_CONTENT.into_response()
    } else {
        control::error(
            StatusCode::BAD_GATEWAY,
            format!("sandbox {id} was not found: it was killed, or its timeout ended"),
        )
    }
}

/// The sandbox a sandbox-API call is for.
pub(crate) fn sandbox_header(headers: &HeaderMap) -> Option<String> {
    headers
        .get("e2b-sandbox-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

/// The token in `value`, checked.
fn check_token(app: &App, value: Option<&str>) -> Result<Caller, (StatusCode, String)> {
    let Some(value) = value.filter(|v| !v.is_empty()) else {
        return Err((
            StatusCode::UNAUTHORIZED,
            "no API key: set E2B_API_KEY to a warden token (`warden token create NAME --scope ...`)"
                .into(),
        ));
    };
    let db = app.db().map_err(|e| (e.status, e.problem.message))?;
    match auth::check(&db, Some(&format!("Bearer {}", value.trim()))) {
        Ok(t) => Ok(Caller::Token(t)),
        Err(auth::AuthError::Db(e)) => Err((StatusCode::INTERNAL_SERVER_ERROR, chain(&e))),
        Err(auth::AuthError::Malformed) => Err((
            StatusCode::UNAUTHORIZED,
            "the API key is not a warden token (wdn_...): set E2B_API_KEY to one".into(),
        )),
        Err(e) => Err((StatusCode::UNAUTHORIZED, e.to_string())),
    }
}

/// Whether `caller` may do what the native route `method path` does, for
/// `sandbox`: the native scope table decides, and a refusal is recorded
/// in the daemon's audit log as the native door records it.
pub(crate) fn permit(
    app: &App,
    caller: &Caller,
    method: &str,
    path: &str,
    sandbox: Option<&str>,
) -> Result<(), String> {
    let Some(route) = auth::ROUTES
        .iter()
        .find(|r| r.method == method && r.path == path)
    else {
        return Err(format!("{method} {path} has no entry in the scope table"));
    };
    caller.may(route, sandbox).inspect_err(|why| {
        tracing::warn!(
            route = route.path,
            method = route.method,
            "e2b: denied: {why}"
        );
        app.record_denial(caller, route, why);
    })
}

/// The control API's callers: `X-API-Key`.
async fn control_auth(State(e): State<Arc<E2b>>, mut req: Request, next: Next) -> Response {
    let key = req
        .headers()
        .get("x-api-key")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    match check_token(&e.app, key.as_deref()) {
        Ok(caller) => {
            req.extensions_mut().insert(caller);
            next.run(req).await
        }
        Err((status, message)) => control::error(status, message),
    }
}

/// The sandbox API's callers: `X-Access-Token` (the token the control API
/// answered as the sandbox's envd access token).
async fn envd_auth(State(e): State<Arc<E2b>>, mut req: Request, next: Next) -> Response {
    let token = req
        .headers()
        .get("x-access-token")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    if sandbox_header(req.headers()).is_none() {
        return connect::RpcError::new(
            connect::Code::InvalidArgument,
            "no E2b-Sandbox-Id header: point the SDK at warden with E2B_SANDBOX_URL, which sends it",
        )
        .into_response();
    }
    match check_token(&e.app, token.as_deref()) {
        Ok(caller) => {
            // A sandbox that is gone or stopped is answered as E2B's proxy
            // answers for one: the SDK then raises SandboxNotRunningException.
            let id = sandbox_header(req.headers()).unwrap_or_default();
            let app = e.app.clone();
            let sid = id.clone();
            let running = tokio::task::spawn_blocking(move || {
                app.sandbox(&sid)
                    .map(|sb| warden_runtime::lifecycle::liveness(&sb).running())
                    .unwrap_or(false)
            })
            .await
            .unwrap_or(false);
            if !running && req.uri().path() != "/health" {
                let message =
                    format!("sandbox {id} was not found: it was killed, or its timeout ended");
                return if req.uri().path() == "/files" {
                    control::error(StatusCode::BAD_GATEWAY, message)
                } else {
                    connect::RpcError::new(connect::Code::Unavailable, message).into_response()
                };
            }
            req.extensions_mut().insert(caller);
            next.run(req).await
        }
        Err((status, message)) => {
            let code = if status == StatusCode::UNAUTHORIZED {
                connect::Code::Unauthenticated
            } else {
                connect::Code::Internal
            };
            connect::RpcError::new(code, message).into_response()
        }
    }
}
