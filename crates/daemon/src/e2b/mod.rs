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
//! The control API takes the token in `X-API-Key`; a sandbox the E2B
//! door made answers each token that creates or connects to it with an
//! envd access token of its own ([`signing`]), which the SDK then sends in
//! `X-Access-Token` (checked on every sandbox call) and signs file URLs
//! with (a `/files` request with no token is checked by its signature).
//! Each call
//! is allowed by the same scope table as the native route it maps to
//! ([`crate::auth::ROUTES`]), so a token may do through E2B exactly what
//! it may do natively.

mod answer;
mod connect;
mod control;
mod copies;
mod create;
pub mod declared;
mod filesystem;
mod inside;
pub(crate) mod interpreter;
pub(crate) mod lifecycle;
mod logs;
mod mcp;
mod metrics;
mod network;
mod paths;
mod permit;
mod ports;
mod process;
pub(crate) mod record;
mod signing;
mod templates;
mod volumes;

pub(crate) use permit::permit;
pub(crate) use volumes::bytes_of_token as volume_bytes;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::Router;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use subtle::ConstantTimeEq;

use crate::app::App;
use crate::auth::{self, Caller};
use crate::denials::{Door, Peer};
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
    /// One pause, resume or pause-on-timeout at a time, so that a
    /// sandbox resumed and given its new timeout is never paused between
    /// the two for the old one.
    pub transitions: tokio::sync::Mutex<()>,
    /// CPU, memory and disk of the sandboxes the door made, over time.
    pub samples: metrics::Samples,
    /// MCP tokens of the sandboxes made with `mcp`, and their sessions.
    pub mcp: mcp::Grants,
}

/// The E2B routes: the control API (`X-API-Key`) and the sandbox API
/// (`X-Access-Token`, `E2b-Sandbox-Id`).
pub fn router(app: Arc<App>) -> Router {
    let body_limit = app.limits.body_bytes;
    mcp::revoke_leftovers(&app);
    let state = Arc::new(E2b {
        app,
        procs: Mutex::new(HashMap::new()),
        watchers: Mutex::new(HashMap::new()),
        transitions: tokio::sync::Mutex::new(()),
        samples: metrics::Samples::default(),
        mcp: mcp::Grants::default(),
    });
    lifecycle::sweep_timeouts(state.clone());
    mcp::sweep(state.clone());
    metrics::sample_sandboxes(state.clone());
    let control = Router::new()
        .route("/sandboxes", post(create::create).get(control::list))
        .route("/v2/sandboxes", post(create::create).get(control::list))
        .route(
            "/sandboxes/{id}",
            get(control::get_one).delete(control::kill),
        )
        .route("/sandboxes/{id}/timeout", post(control::set_timeout))
        .route("/sandboxes/{id}/connect", post(lifecycle::connect))
        .route("/v2/sandboxes/{id}/connect", post(lifecycle::connect))
        .route("/sandboxes/{id}/pause", post(lifecycle::pause))
        .route("/sandboxes/{id}/resume", post(lifecycle::resume))
        .route("/sandboxes/{id}/snapshots", post(copies::create_snapshot))
        .route("/sandboxes/{id}/fork", post(copies::fork))
        .route("/sandboxes/{id}/refreshes", post(control::refresh))
        .route("/sandboxes/{id}/network", put(network::update))
        .route("/sandboxes/{id}/metrics", get(metrics::get))
        .route("/sandboxes/{id}/logs", get(logs::v1))
        .route("/v2/sandboxes/{id}/logs", get(logs::v2))
        .route("/sandboxes/metrics", get(control::not_supported))
        .route("/snapshots", get(copies::list))
        .route("/volumes", post(volumes::create).get(volumes::list))
        .route("/volumes/{id}", get(volumes::get).delete(volumes::delete))
        .route("/templates", get(templates::list))
        .route("/v2/templates", get(templates::list))
        .route("/templates/aliases/{alias}", get(templates::alias))
        .route("/v3/templates", post(templates::build_refused))
        .route(
            "/v2/templates/{id}/builds/{build}",
            post(templates::build_refused),
        )
        .route(
            "/templates/{id}",
            get(templates::get_one).delete(copies::delete),
        )
        // Inside the key check, which tells it who calls.
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            hide_host_paths,
        ))
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
        // A request for a sandbox's port (not envd's) is relayed there.
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            ports::route,
        ))
        .with_state(state)
}

/// The control API's answers to a token holder with warden's host paths
/// taken out, as the native API's are ([`crate::routes::redact::layer`]):
/// its refusals come from the same handlers (a resume, a snapshot, a copy
/// of one), whose words may name the state directory. The sandbox API's
/// answers (a command's output, a file) are the sandbox's own data, and
/// are not looked through.
async fn hide_host_paths(State(e): State<Arc<E2b>>, req: Request, next: Next) -> Response {
    crate::routes::redact::layer(State(e.app.clone()), req, next).await
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
    // A paused sandbox does not run: the SDK's is_running() is False then,
    // as E2B's proxy answers for one.
    let running = tokio::task::spawn_blocking(move || {
        app.sandbox(&sid)
            .map(|sb| {
                warden_runtime::lifecycle::liveness(&sb).running()
                    && warden_runtime::lifecycle::paused_since(&sb).is_none()
            })
            .unwrap_or(false)
    })
    .await
    .unwrap_or(false);
    if running {
        StatusCode::NO_CONTENT.into_response()
    } else {
        answer::error(
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

/// The token in `value`, checked; a refusal for the credential is
/// recorded in the daemon's log, as the native API's are.
fn check_token(
    app: &App,
    at: (Door, Peer),
    value: Option<&str>,
) -> Result<Caller, (StatusCode, String)> {
    let checked = checked_token(app, value);
    if let Err((StatusCode::UNAUTHORIZED, why)) = &checked {
        let route = auth::Route {
            method: "*",
            path: "/e2b",
            scope: None,
            data: false,
        };
        app.record_unauthenticated(at.0, at.1, &route, why);
    }
    checked
}

fn checked_token(app: &App, value: Option<&str>) -> Result<Caller, (StatusCode, String)> {
    let Some(value) = value.filter(|v| !v.is_empty()) else {
        return Err((
            StatusCode::UNAUTHORIZED,
            "no API key: set E2B_API_KEY to a warden token (`warden token create NAME --scope ...`)"
                .into(),
        ));
    };
    let db = app.db().map_err(|e| (e.status, e.problem.message))?;
    match auth::check(&db, &app.store, Some(&format!("Bearer {}", value.trim()))) {
        Ok(t) => Ok(Caller::Token(t)),
        Err(auth::AuthError::Db(e)) => Err((StatusCode::INTERNAL_SERVER_ERROR, chain(&e))),
        Err(auth::AuthError::Malformed) => Err((
            StatusCode::UNAUTHORIZED,
            "the API key is not a warden token (wdn_...): set E2B_API_KEY to one".into(),
        )),
        Err(e) => Err((StatusCode::UNAUTHORIZED, e.to_string())),
    }
}

/// The control API's callers: `X-API-Key`.
async fn control_auth(State(e): State<Arc<E2b>>, mut req: Request, next: Next) -> Response {
    let key = req
        .headers()
        .get("x-api-key")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let at = (Door::E2bControl, Peer::of(req.extensions()));
    match check_token(&e.app, at, key.as_deref()) {
        Ok(caller) => {
            req.extensions_mut().insert(caller);
            crate::deadline::proven(&req);
            next.run(req).await
        }
        Err((status, message)) => answer::error(status, message),
    }
}

/// The sandbox a sandbox-API call is for, and, for a signed file URL,
/// the one file it was signed for (the `/files` handlers take that path
/// and no other).
#[derive(Debug, Clone)]
pub(crate) struct Target {
    pub sandbox: String,
    pub signed_path: Option<String>,
    /// The envd access token a signed URL's signature matched: what the
    /// URL's answer ends with, as a header's token would.
    pub signed_by: Option<String>,
}

/// The caller an `X-Access-Token` names for `sandbox`: a sandbox's envd
/// access token (that token's power over that sandbox only), or a warden
/// token. A refusal is recorded in the daemon's log at `route` as a
/// refused credential (a warden token's by [`check_token`]), bounded as
/// every refusal is: a loop guessing keys leaves its trace.
fn check_access(
    app: &App,
    peer: Peer,
    route: &auth::Route,
    sandbox: &str,
    value: Option<&str>,
) -> Result<Caller, (StatusCode, String)> {
    let Some(key) = value
        .map(str::trim)
        .filter(|v| v.starts_with(signing::KEY_PREFIX))
    else {
        return check_token(app, (Door::E2bSandbox, peer), value);
    };
    let checked = key_access(app, sandbox, key);
    record_refused(app, peer, route, &checked);
    checked
}

/// Record a refusal of a credential at the sandbox API: a key or a
/// signature that is not one, a sandbox's key it outlived (the 502 E2B
/// gives a killed sandbox's). A fault of the daemon's own, or a request
/// that does not fit, is no refusal of the caller's credential.
fn record_refused<T>(
    app: &App,
    peer: Peer,
    route: &auth::Route,
    checked: &Result<T, (StatusCode, String)>,
) {
    if let Err((status, why)) = checked {
        if matches!(
            *status,
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN | StatusCode::BAD_GATEWAY
        ) {
            app.record_unauthenticated(Door::E2bSandbox, peer, route, why);
        }
    }
}

/// [`check_access`] for an envd access token `key`.
fn key_access(app: &App, sandbox: &str, key: &str) -> Result<Caller, (StatusCode, String)> {
    let db = app.db().map_err(|e| (e.status, e.problem.message))?;
    let keys = db
        .e2b_keys(Some(sandbox))
        .map_err(|e| (StatusCode::INTERNAL_SERVER_ERROR, chain(&e)))?;
    let mut found = None;
    for k in &keys {
        let same: bool = k.key.as_bytes().ct_eq(key.as_bytes()).into();
        if same {
            found = Some(k);
        }
    }
    let Some(k) = found else {
        // A killed sandbox's token: told as E2B tells it (the SDK's
        // is_running() is then False), the sandbox is gone.
        if db.was_e2b_key(sandbox, key).unwrap_or(false) {
            return Err((
                StatusCode::BAD_GATEWAY,
                format!("sandbox {sandbox} was not found: it was killed, or its timeout ended"),
            ));
        }
        return Err((
            StatusCode::UNAUTHORIZED,
            format!("the access token is not one of sandbox {sandbox}'s (each sandbox answers its own on create and connect; a killed sandbox's are gone)"),
        ));
    };
    key_caller(app, &db, k)
}

/// The caller an envd access token stands for: its token, as long as that
/// stands, good for its sandbox's data API only, and only while the
/// sandbox it was made for has its name (not a later sandbox that took
/// the name after it was removed).
fn key_caller(
    app: &App,
    db: &crate::db::Db,
    k: &crate::db::E2bKey,
) -> Result<Caller, (StatusCode, String)> {
    let current = app
        .store
        .get(&k.sandbox)
        .is_ok_and(|sb| auth::made_for(&sb, k.uid.as_deref(), k.created_ms));
    if !current {
        return Err((
            StatusCode::UNAUTHORIZED,
            format!(
                "the access token was made for a sandbox named {} that was removed; a sandbox's access tokens end with it",
                k.sandbox
            ),
        ));
    }
    match db
        .token(&k.token)
        .map(|r| r.map(|t| auth::standing(db, &app.store, t)))
    {
        Ok(Some(Err(e @ auth::AuthError::Outlived { .. }))) => {
            Err((StatusCode::UNAUTHORIZED, e.to_string()))
        }
        Ok(Some(Ok(mut t))) => {
            if t.sandbox.as_deref().is_some_and(|only| only != k.sandbox) {
                return Err((
                    StatusCode::FORBIDDEN,
                    format!(
                        "token {} is for sandbox {} only",
                        t.id,
                        t.sandbox.unwrap_or_default()
                    ),
                ));
            }
            t.sandbox = Some(k.sandbox.clone());
            Ok(Caller::Token(t))
        }
        Ok(Some(Err(_))) => Err((
            StatusCode::UNAUTHORIZED,
            format!(
                "the token {} this access token stands for was revoked",
                k.token
            ),
        )),
        Ok(None) => Err((
            StatusCode::UNAUTHORIZED,
            "the token this access token stands for no longer exists".into(),
        )),
        Err(e) => Err((StatusCode::INTERNAL_SERVER_ERROR, chain(&e))),
    }
}

/// A signed file URL's query.
#[derive(Debug, Default, serde::Deserialize)]
struct SignedQuery {
    path: Option<String>,
    username: Option<String>,
    signature: Option<String>,
    signature_expiration: Option<String>,
}

/// The caller and file a signed `/files` request (no token) stands for:
/// the signature checked against the envd access tokens (of the sandbox
/// `E2b-Sandbox-Id` names, or of every sandbox when none is named, as in
/// a URL the SDK made for `E2B_SANDBOX_URL`). A signature refused (none,
/// forged, expired, of a removed sandbox) is recorded in the daemon's log
/// as a refused credential.
fn signed_caller(app: &App, req: &Request) -> Result<(Caller, Target), (StatusCode, String)> {
    let checked = signature_caller(app, req);
    let route = auth::Route::refused_at(req.method(), SIGNED_URL);
    record_refused(app, Peer::of(req.extensions()), &route, &checked);
    checked
}

/// Where the records of the sandbox API's refusals place them: a call
/// with `X-Access-Token`, and a signed file URL.
const SANDBOX_API: &str = "/e2b/envd";
const SIGNED_URL: &str = "/e2b/files?signature";

fn signature_caller(app: &App, req: &Request) -> Result<(Caller, Target), (StatusCode, String)> {
    let unauthorized = |m: String| (StatusCode::UNAUTHORIZED, m);
    let op = match *req.method() {
        axum::http::Method::GET => signing::Operation::Read,
        axum::http::Method::POST => signing::Operation::Write,
        _ => return Err((StatusCode::METHOD_NOT_ALLOWED, "GET or POST /files".into())),
    };
    let q = axum::extract::Query::<SignedQuery>::try_from_uri(req.uri())
        .map(|q| q.0)
        .map_err(|e| {
            (
                StatusCode::BAD_REQUEST,
                format!("the query does not fit: {}", e.body_text()),
            )
        })?;
    let Some(sig) = q.signature.as_deref() else {
        return Err(unauthorized(
            "no access token and no signature: send X-Access-Token, or use a URL from the SDK's download_url/upload_url".into(),
        ));
    };
    let path = q.path.clone().unwrap_or_default();
    let signed = signing::Signed {
        path: &path,
        op,
        user: q.username.as_deref().unwrap_or(""),
        signature: sig,
        expiration: q.signature_expiration.as_deref(),
    };
    let db = app.db().map_err(|e| (e.status, e.problem.message))?;
    let only = sandbox_header(req.headers());
    let keys = db
        .e2b_keys(only.as_deref())
        .map_err(|e| (StatusCode::INTERNAL_SERVER_ERROR, chain(&e)))?;
    let texts: Vec<&str> = keys.iter().map(|k| k.key.as_str()).collect();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(i64::MAX);
    let i = signing::verify(&signed, &texts, now).map_err(|e| unauthorized(e.to_string()))?;
    let Some(k) = keys.get(i) else {
        return Err(unauthorized(signing::SignError::NoMatch.to_string()));
    };
    let caller = key_caller(app, &db, k)?;
    Ok((
        caller,
        Target {
            sandbox: k.sandbox.clone(),
            signed_path: Some(path),
            signed_by: Some(k.key.clone()),
        },
    ))
}

/// The user a sandbox-API call asks for: `username` in a `/files` query,
/// `Authorization: Basic base64(USER:)` on the RPCs. A sandbox has one
/// identity, which E2B code may call "user" or "root"; another name is
/// refused, as envd refuses a user its image lacks.
fn check_user(req: &Request) -> Result<(), String> {
    use base64::Engine;
    let mut asked = Vec::new();
    if let Ok(axum::extract::Query(q)) =
        axum::extract::Query::<SignedQuery>::try_from_uri(req.uri())
    {
        asked.extend(q.username);
    }
    if let Some(v) = req
        .headers()
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
    {
        let basic = v
            .strip_prefix("Basic ")
            .and_then(|b| {
                base64::engine::general_purpose::STANDARD
                    .decode(b.trim())
                    .ok()
            })
            .and_then(|b| String::from_utf8(b).ok())
            .ok_or_else(|| "the Authorization header is not `Basic base64(USER:)`".to_string())?;
        asked.push(basic.split(':').next().unwrap_or("").to_string());
    }
    match asked.iter().find(|u| !KNOWN_USERS.contains(&u.as_str())) {
        Some(u) => Err(format!(
            "user {u:?}: a warden sandbox has one identity, which E2B code names \"user\" or \"root\" (see docs/e2b.md)"
        )),
        None => Ok(()),
    }
}

/// How much of a refused request's body from a known caller is read so
/// that its connection can carry the next call.
const REFUSED_BODY_READ: usize = 1 << 20;

/// The users E2B's images have (and the empty name, envd's default).
const KNOWN_USERS: &[&str] = &["", "user", "root"];

/// The sandbox API's callers: `X-Access-Token` (the envd access token the
/// control API answered, or a warden token), or a signed `/files` URL.
async fn envd_auth(State(e): State<Arc<E2b>>, mut req: Request, next: Next) -> Response {
    let token = req
        .headers()
        .get("x-access-token")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let files = req.uri().path() == "/files";
    // `/files` and `/health` are plain HTTP, answered in E2B's JSON.
    let plain = files || req.uri().path() == "/health";
    let refuse = |status: StatusCode, message: String| {
        if plain {
            return answer::error(status, message);
        }
        let code = match status {
            StatusCode::UNAUTHORIZED => connect::Code::Unauthenticated,
            StatusCode::FORBIDDEN => connect::Code::PermissionDenied,
            StatusCode::BAD_REQUEST => connect::Code::InvalidArgument,
            StatusCode::BAD_GATEWAY => connect::Code::Unavailable,
            _ => connect::Code::Internal,
        };
        connect::RpcError::new(code, message).into_response()
    };
    let checked = if token.is_none() && files {
        signed_caller(&e.app, &req)
    } else {
        let Some(id) = sandbox_header(req.headers()) else {
            return refuse(
                StatusCode::BAD_REQUEST,
                "no E2b-Sandbox-Id header: point the SDK at warden with E2B_SANDBOX_URL, which sends it".into(),
            );
        };
        let route = auth::Route::refused_at(req.method(), SANDBOX_API);
        let peer = Peer::of(req.extensions());
        check_access(&e.app, peer, &route, &id, token.as_deref()).map(|c| {
            (
                c,
                Target {
                    sandbox: id,
                    signed_path: None,
                    signed_by: None,
                },
            )
        })
    };
    let (caller, target) = match checked {
        Ok(c) => c,
        Err((status, message)) => return refuse(status, message),
    };
    if let Err(message) = check_user(&req) {
        // The caller is known: a small body (an upload of a few bytes) is
        // read before the refusal, so the connection stays usable; an
        // unread body ends it, and a client's pool that sends its next
        // call on it as it closes sees that call fail.
        let _ = axum::body::to_bytes(req.into_body(), REFUSED_BODY_READ).await;
        return refuse(StatusCode::BAD_REQUEST, message);
    }
    // A sandbox that is gone or stopped is answered as E2B's proxy answers
    // for one: the SDK then raises SandboxNotRunningException. Another
    // token's sandbox (a warden token in X-Access-Token names any id) is
    // answered so too, its health probe included: whether it exists, or
    // runs, is not this caller's to learn.
    let app = e.app.clone();
    let sid = target.sandbox.clone();
    let who = caller.clone();
    let (reached, running) = tokio::task::spawn_blocking(move || {
        let reached = crate::reach::reaches(&app, &who, &sid).unwrap_or(false);
        // Only a sandbox the caller reaches is looked up: another token's
        // and a missing one take the same path, so in the same time.
        let running = reached
            && app
                .sandbox(&sid)
                .map(|sb| warden_runtime::lifecycle::liveness(&sb).running())
                .unwrap_or(false);
        (reached, running)
    })
    .await
    .unwrap_or((false, false));
    if !reached {
        // Recorded as the native door records a call for a sandbox the
        // caller does not reach: a missing one and another's alike.
        let route = auth::Route::refused_at(req.method(), SANDBOX_API);
        e.app.record_denial(&caller, &route, permit::NOT_REACHED);
    }
    if !reached || (!running && req.uri().path() != "/health") {
        let message = format!(
            "sandbox {} was not found: it was killed, or its timeout ended",
            target.sandbox
        );
        return if plain {
            answer::error(StatusCode::BAD_GATEWAY, message)
        } else {
            connect::RpcError::new(connect::Code::Unavailable, message).into_response()
        };
    }
    // Every answer, a process stream or a directory watch above all,
    // ends with the envd access token or warden token that opened it.
    let credential = crate::credential::Credential {
        token: caller.token_id().map(str::to_string),
        session: None,
        envd: token
            .as_deref()
            .map(str::trim)
            .filter(|t| t.starts_with(signing::KEY_PREFIX))
            .map(str::to_string)
            .or_else(|| target.signed_by.clone())
            .map(|k| (target.sandbox.clone(), k)),
    };
    req.extensions_mut().insert(credential.clone());
    req.extensions_mut().insert(caller);
    req.extensions_mut().insert(target);
    crate::deadline::proven(&req);
    // An upload or a process's input stops with the credential too.
    let req = crate::revocation::bound_request(&e.app, &credential, req);
    let response = next.run(req).await;
    let streamed = response
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/connect+"));
    // A Connect stream says why it ended, as envd would.
    let last = streamed.then(|| {
        connect::end(Some(&connect::RpcError::new(
            connect::Code::Unauthenticated,
            "the access token or API key this stream was opened with was revoked, or its sandbox was killed",
        )))
    });
    crate::revocation::bound(&e.app, credential, response, last)
}
