//! The router: each route, its handler, the scope check of [`crate::auth`]
//! in front of every one, and request bodies read with the API's own
//! errors (a body too large is 413, bad JSON 400, a wrong field 422, each
//! as a problem object).

mod cdp;
mod changes;
pub(crate) mod copies;
pub(crate) mod desktop;
pub(crate) mod egress;
pub(crate) mod events;
pub(crate) mod exec;
mod fields;
pub(crate) mod files;
mod inside;
pub(crate) mod pause;
mod pools;
pub(crate) mod profiles;
pub(crate) mod pty;
pub(crate) mod redact;
mod rfb;
mod said;
pub(crate) mod sandboxes;
mod tokens;
mod vnc;
pub(crate) mod watch;

pub use tokens::{info as token_info, infos as token_infos, parse_scopes};

use axum::extract::{MatchedPath, Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, patch, post};
use axum::{Extension, Router};
use std::sync::Arc;
use utoipa::OpenApi;

use crate::app::App;
use crate::auth::{self, Caller};
use crate::error::ApiError;

// The JSON body extractor, where the routes and the E2B door name it.

/// How a request arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// The owner-only Unix socket.
    Unix,
    Tcp,
}

#[derive(OpenApi)]
#[openapi(
    info(title = "warden", description = "Sandboxes for AI agents and untrusted code: create them, run commands in them, watch what they do."),
    paths(
        sandboxes::health,
        sandboxes::create,
        sandboxes::list,
        sandboxes::get_one,
        sandboxes::remove,
        sandboxes::start,
        sandboxes::stop,
        sandboxes::set_timeout,
        pause::pause_asked,
        pause::resume,
        copies::create,
        copies::list,
        copies::delete,
        copies::sandbox_from,
        copies::fork,
        exec::exec,
        exec::list,
        exec::get_one,
        exec::output,
        exec::stdin,
        exec::signal,
        pty::pty,
        events::events,
        egress::patch,
        egress::list,
        egress::answer,
        changes::changes,
        changes::commit,
        changes::discard,
        files::read,
        files::write,
        files::remove,
        files::list,
        files::mkdir,
        files::rename,
        watch::watch,
        desktop::info,
        desktop::screenshot,
        desktop::act,
        pools::list,
        profiles::list,
        fields::list,
        tokens::list,
        tokens::create,
        tokens::revoke,
        vnc::vnc,
        cdp::json_version,
        cdp::json_version_slash,
        cdp::json_list,
        cdp::devtools,
    ),
    components(schemas(
        crate::error::Problem,
        crate::api::PtyClientMessage,
        crate::api::PtyServerMessage,
        crate::api::PtyStart,
        watch::FileChange,
        desktop::DesktopInfo,
        desktop::ActionDone,
        watch::Kind,
        profiles::ProfileList,
        profiles::ProfileEntry,
        fields::FieldList,
        fields::FieldEntry
    )),
    modifiers(&Security)
)]
pub struct ApiDoc;

struct Security;

impl utoipa::Modify for Security {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "token",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

async fn openapi() -> impl IntoResponse {
    axum::Json(ApiDoc::openapi())
}

/// The API's routes, each behind its scope check.
pub fn router(app: Arc<App>) -> Router {
    let body_limit = app.limits.body_bytes;
    Router::new()
        .route("/v1/openapi.json", get(openapi))
        .route("/v1/health", get(sandboxes::health))
        .route(
            "/v1/sandboxes",
            post(sandboxes::create).get(sandboxes::list),
        )
        .route(
            "/v1/sandboxes/{id}",
            get(sandboxes::get_one).delete(sandboxes::remove),
        )
        .route("/v1/sandboxes/{id}/start", post(sandboxes::start))
        .route("/v1/sandboxes/{id}/stop", post(sandboxes::stop))
        .route("/v1/sandboxes/{id}/timeout", post(sandboxes::set_timeout))
        .route("/v1/sandboxes/{id}/pause", post(pause::pause_asked))
        .route("/v1/sandboxes/{id}/resume", post(pause::resume))
        .route("/v1/sandboxes/{id}/snapshots", post(copies::create))
        .route("/v1/sandboxes/{id}/fork", post(copies::fork))
        .route("/v1/snapshots", get(copies::list))
        .route("/v1/snapshots/{name}", delete(copies::delete))
        .route("/v1/snapshots/{name}/sandboxes", post(copies::sandbox_from))
        .route("/v1/sandboxes/{id}/exec", post(exec::exec))
        .route("/v1/sandboxes/{id}/execs", get(exec::list))
        .route("/v1/sandboxes/{id}/execs/{exec}", get(exec::get_one))
        .route("/v1/sandboxes/{id}/execs/{exec}/output", get(exec::output))
        .route("/v1/sandboxes/{id}/execs/{exec}/stdin", post(exec::stdin))
        .route("/v1/sandboxes/{id}/execs/{exec}/signal", post(exec::signal))
        .route("/v1/sandboxes/{id}/pty", get(pty::pty))
        .route("/v1/sandboxes/{id}/changes", get(changes::changes))
        .route("/v1/sandboxes/{id}/commit", post(changes::commit))
        .route("/v1/sandboxes/{id}/discard", post(changes::discard))
        .route("/v1/sandboxes/{id}/events", get(events::events))
        .route("/v1/sandboxes/{id}/egress", patch(egress::patch))
        .route("/v1/approvals", get(egress::list))
        .route("/v1/approvals/{id}", post(egress::answer))
        .route(
            "/v1/sandboxes/{id}/files",
            get(files::read).put(files::write).delete(files::remove),
        )
        .route("/v1/sandboxes/{id}/files/list", get(files::list))
        .route("/v1/sandboxes/{id}/files/mkdir", post(files::mkdir))
        .route("/v1/sandboxes/{id}/files/move", post(files::rename))
        .route("/v1/sandboxes/{id}/files/watch", get(watch::watch))
        .route("/v1/sandboxes/{id}/desktop", get(desktop::info))
        .route(
            "/v1/sandboxes/{id}/desktop/screenshot",
            get(desktop::screenshot),
        )
        .route("/v1/sandboxes/{id}/desktop/{action}", post(desktop::act))
        .route("/v1/sandboxes/{id}/desktop/vnc", get(vnc::vnc))
        .route(
            "/v1/sandboxes/{id}/desktop/cdp/json/version",
            get(cdp::json_version),
        )
        .route(
            "/v1/sandboxes/{id}/desktop/cdp/json/version/",
            get(cdp::json_version_slash),
        )
        .route(
            "/v1/sandboxes/{id}/desktop/cdp/json/list",
            get(cdp::json_list),
        )
        .route(
            "/v1/sandboxes/{id}/desktop/cdp/devtools/{kind}/{target}",
            get(cdp::devtools),
        )
        .route("/v1/pools", get(pools::list))
        .route("/v1/profiles", get(profiles::list))
        .route("/v1/fields", get(fields::list))
        .route("/v1/tokens", get(tokens::list).post(tokens::create))
        .route("/v1/tokens/{token}", delete(tokens::revoke))
        .route_service("/mcp", crate::mcp::http::service(app.clone()))
        // Inside the scope check, which tells it who calls.
        .route_layer(axum::middleware::from_fn_with_state(
            app.clone(),
            redact::layer,
        ))
        .route_layer(axum::middleware::from_fn_with_state(app.clone(), authorize))
        .merge(crate::dashboard::router())
        .layer(axum::extract::DefaultBodyLimit::max(body_limit))
        .fallback(not_found)
        .layer(axum::middleware::from_fn(close_when_body_unread))
        .layer(axum::middleware::from_fn(crate::dashboard::secure_headers))
        .with_state(app)
}

/// An error answer to a request that carried a body ends the connection,
/// and says so. A refusal in front of the handlers (no token, a missing
/// scope, an unknown route) answers before the body is read, and hyper
/// does not keep a connection whose request body was left unread: without
/// `Connection: close` a client that keeps connections alive sends its
/// next request into one that is closing and gets no answer. The body is
/// not drained instead: a caller who was refused gets no more of the
/// daemon's reading.
async fn close_when_body_unread(req: Request, next: Next) -> Response {
    use axum::http::header::{CONNECTION, CONTENT_LENGTH, TRANSFER_ENCODING};
    let headers = req.headers();
    let has_body = headers.contains_key(TRANSFER_ENCODING)
        || headers
            .get(CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim() != "0");
    let mut response = next.run(req).await;
    let status = response.status();
    if has_body && (status.is_client_error() || status.is_server_error()) {
        response
            .headers_mut()
            .insert(CONNECTION, axum::http::HeaderValue::from_static("close"));
    }
    response
}

async fn not_found() -> ApiError {
    ApiError::not_found("no such route: see /v1/openapi.json")
}

/// The sandbox a path names (`/v1/sandboxes/{id}/...`).
fn sandbox_of(path: &str) -> Option<&str> {
    let mut parts = path.trim_start_matches('/').split('/');
    match (parts.next(), parts.next(), parts.next()) {
        (Some("v1"), Some("sandboxes"), Some(id)) if !id.is_empty() => Some(id),
        _ => None,
    }
}

/// Who calls, and whether they may: the scope table decides.
async fn authorize(
    State(app): State<Arc<App>>,
    matched: Option<MatchedPath>,
    transport: Option<Extension<Transport>>,
    mut req: Request,
    next: Next,
) -> Response {
    let Some(route) = matched
        .as_ref()
        .and_then(|m| auth::route(req.method(), m.as_str()))
    else {
        // A path the table knows under other methods only: nothing runs,
        // and the caller learns what the path takes.
        let methods: Vec<&str> = matched
            .as_ref()
            .map(|m| {
                auth::ROUTES
                    .iter()
                    .filter(|r| r.path == m.as_str())
                    .map(|r| r.method)
                    .collect()
            })
            .unwrap_or_default();
        if !methods.is_empty() {
            let allow = methods.join(", ");
            let mut r = ApiError::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "method_not_allowed",
                format!(
                    "{} {} is not a route: {} takes {allow}",
                    req.method(),
                    req.uri().path(),
                    matched.as_ref().map(|m| m.as_str()).unwrap_or_default()
                ),
            )
            .into_response();
            if let Ok(v) = axum::http::HeaderValue::from_str(&allow) {
                r.headers_mut().insert(axum::http::header::ALLOW, v);
            }
            return r;
        }
        // A route missing from the table is refused to everyone.
        return ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            "this route has no entry in the scope table",
        )
        .into_response();
    };
    let header = req
        .headers()
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let unix = transport.map(|t| t.0) == Some(Transport::Unix);
    let cookies = crate::session::cookies(req.headers());
    let mut session = None;
    let caller = match (&header, unix) {
        (None, true) => Caller::Owner,
        // A public route on TCP with no credential: nobody, who gets a
        // visitor and no caller at all (see [`auth::Visitor`]). A cookie
        // does not make it somebody: a browser sends its cookie to every
        // page of the host, and a public route needs none.
        (None, false) if route.scope.is_none() => {
            // No public route names a sandbox; were one to, nobody would
            // find it as one that does not exist.
            if let Some(id) = sandbox_of(req.uri().path()) {
                return ApiError::not_found(format!(
                    "no sandbox {id:?}: GET /v1/sandboxes lists them"
                ))
                .into_response();
            }
            req.extensions_mut().insert(auth::Visitor::Anonymous);
            return next.run(req).await;
        }
        (None, false) if !cookies.is_empty() => match browser(&app, route, &cookies, &mut req) {
            Ok((c, id)) => {
                session = Some(id);
                c
            }
            Err(e) => return e.into_response(),
        },
        _ => {
            let checked = match app.db() {
                Ok(db) => auth::check(&db, &app.store, header.as_deref()),
                Err(e) => return e.into_response(),
            };
            match checked {
                Ok(t) => Caller::Token(t),
                Err(auth::AuthError::Db(e)) => {
                    return ApiError::internal(crate::error::chain(&e)).into_response()
                }
                Err(e) => {
                    let why = e.to_string();
                    let peer = crate::denials::Peer::of(req.extensions());
                    app.record_unauthenticated(crate::denials::Door::Api, peer, route, &why);
                    return ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", why)
                        .into_response();
                }
            }
        }
    };
    let sandbox = sandbox_of(req.uri().path()).map(str::to_string);
    if let Err(why) = caller.may(route, sandbox.as_deref()) {
        tracing::warn!(route = route.path, method = route.method, "denied: {why}");
        app.record_denial(&caller, route, &why);
        return ApiError::new(StatusCode::FORBIDDEN, "forbidden", why).into_response();
    }
    // Which sandboxes: a token reaches only those it made.
    if let Some(id) = &sandbox {
        if let Err(e) = crate::reach::check(&app, &caller, id) {
            app.record_denial(&caller, route, "the sandbox is not this caller's");
            return e.into_response();
        }
    }
    let credential = crate::credential::Credential {
        token: caller.token_id().map(str::to_string),
        session,
        envd: None,
    };
    req.extensions_mut().insert(credential.clone());
    req.extensions_mut()
        .insert(auth::Visitor::Known(caller.clone()));
    req.extensions_mut().insert(caller);
    if credential.revocable() {
        // Let in by a credential: bound by it, not by the deadline of
        // requests with none.
        crate::deadline::proven(&req);
    }
    // Whatever is read and answered, it ends with what let it in.
    let req = crate::revocation::bound_request(&app, &credential, req);
    let response = next.run(req).await;
    crate::revocation::bound(&app, credential, response, None)
}

/// The caller a browser request's session cookie stands for, under the
/// session's rules (see [`crate::session::check_request`]), and the
/// session's cookie value; the query's CSRF token, once checked, is taken
/// out of the request.
/// A refusal of the session rules is recorded in the daemon's audit log
/// as any other refused call, under the session's token.
fn browser(
    app: &App,
    route: &auth::Route,
    cookies: &[String],
    req: &mut Request,
) -> Result<(Caller, String), ApiError> {
    use crate::session::{given_csrf, strip_csrf};
    let peer = crate::denials::Peer::of(req.extensions());
    // A cookie that names no live session, or a session whose token no
    // longer stands, is a refused credential: recorded as a bad Bearer is.
    let unauthorized = |m: String| {
        app.record_unauthenticated(
            crate::denials::Door::Api,
            peer,
            route,
            &format!("browser session: {m}"),
        );
        ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", m)
    };
    let csrf = given_csrf(req.method(), req.headers(), req.uri());
    let (id, s) = app
        .sessions
        .find(cookies, csrf, warden_runtime::state::now_ms())
        .ok_or_else(|| unauthorized(crate::session::SessionError::Unknown.to_string()))?;
    let judged = {
        let db = app.db()?;
        db.token(&s.token_id)
            .map_err(|e| ApiError::internal(crate::error::chain(&e)))?
            .map(|row| auth::standing(&db, &app.store, row))
    };
    let caller = match judged {
        Some(Ok(row)) => Caller::Token(row),
        Some(Err(e @ auth::AuthError::Outlived { .. })) => return Err(unauthorized(e.to_string())),
        _ => {
            return Err(unauthorized(format!(
                "the token {} this session logged in with was revoked: log in again",
                s.token_id
            )))
        }
    };
    if let Err(e) = crate::session::check_request(&s, req.method(), req.headers(), csrf) {
        let why = e.to_string();
        tracing::warn!(route = route.path, method = route.method, "denied: {why}");
        app.record_denial(&caller, route, &format!("browser session: {why}"));
        return Err(ApiError::new(StatusCode::FORBIDDEN, "csrf", why));
    }
    if let Some(uri) = strip_csrf(req.uri()) {
        *req.uri_mut() = uri;
    }
    Ok((caller, id))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scope_table_and_the_openapi_document_name_the_same_routes() {
        let doc = ApiDoc::openapi();
        let mut documented: Vec<(String, String)> = Vec::new();
        for (path, item) in doc.paths.paths.iter() {
            for (method, op) in [
                ("GET", &item.get),
                ("POST", &item.post),
                ("PUT", &item.put),
                ("DELETE", &item.delete),
                ("PATCH", &item.patch),
            ] {
                if op.is_some() {
                    documented.push((method.to_string(), path.clone()));
                }
            }
        }
        documented.sort();
        let mut table: Vec<(String, String)> = auth::ROUTES
            .iter()
            .map(|r| (r.method.to_string(), r.path.to_string()))
            .collect();
        table.sort();
        // The document itself is served, not described; /mcp speaks MCP,
        // not this API.
        table.retain(|(_, p)| p != "/v1/openapi.json" && p != "/mcp");
        assert_eq!(documented, table);
    }

    #[test]
    fn a_sandbox_id_is_taken_from_its_place_in_the_path_only() {
        assert_eq!(sandbox_of("/v1/sandboxes/a/exec"), Some("a"));
        assert_eq!(sandbox_of("/v1/sandboxes"), None);
        assert_eq!(sandbox_of("/v1/tokens/x"), None);
    }
}
