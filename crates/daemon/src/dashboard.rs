//! The web dashboard at `/`: its page and assets, built from `dashboard/`
//! by `dashboard/build.sh` and embedded in the binary (a build needs no
//! node and the page fetches nothing from elsewhere), the login that
//! turns a token into a browser session ([`crate::session`]), and the
//! headers every answer of the daemon carries (a Content-Security-Policy
//! that allows only the daemon's own scripts, styles and connections, no
//! framing, no sniffing). The dashboard is a front end onto the API: it
//! holds no sandbox logic of its own.

use axum::extract::{Request, State};
use axum::http::header::{
    CACHE_CONTROL, CONTENT_SECURITY_POLICY, CONTENT_TYPE, REFERRER_POLICY, SET_COOKIE,
    X_CONTENT_TYPE_OPTIONS, X_FRAME_OPTIONS,
};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use std::sync::Arc;

use crate::app::App;
use crate::auth;
use crate::error::{chain, ApiError};
use crate::session;

/// What the page may load and where it may connect: its own scripts and
/// styles only (no inline script, no eval), its own origin for fetch,
/// server-sent events and WebSockets, never framed. xterm.js writes the
/// terminal's own style elements, which a nonce cannot reach, hence
/// `'unsafe-inline'` for styles only; scripts stay strict.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; font-src 'self'; connect-src 'self'; manifest-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

/// The built dashboard: path, content type, bytes.
const ASSETS: &[(&str, &str, &[u8])] = &[
    (
        "/",
        "text/html; charset=utf-8",
        include_bytes!("../assets/dashboard/index.html"),
    ),
    (
        "/assets/app.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../assets/dashboard/app.js"),
    ),
    (
        "/assets/app.css",
        "text/css; charset=utf-8",
        include_bytes!("../assets/dashboard/app.css"),
    ),
    (
        "/assets/icon.svg",
        "image/svg+xml",
        include_bytes!("../assets/dashboard/icon.svg"),
    ),
];

async fn asset(req: Request) -> Response {
    let path = req.uri().path();
    match ASSETS.iter().find(|(p, _, _)| *p == path) {
        Some((_, kind, bytes)) => (
            [
                (CONTENT_TYPE, HeaderValue::from_static(kind)),
                (CACHE_CONTROL, HeaderValue::from_static("no-cache")),
            ],
            *bytes,
        )
            .into_response(),
        None => ApiError::not_found(format!("no dashboard asset {path}")).into_response(),
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Login {
    token: String,
}

/// A refusal of a dashboard route, recorded in the daemon's audit log as
/// any refused call is.
fn refused(
    app: &App,
    caller: &impl auth::Recorded,
    method: &'static str,
    path: &'static str,
    e: session::SessionError,
) -> ApiError {
    let why = e.to_string();
    let route = auth::Route {
        method,
        path,
        scope: None,
        data: false,
    };
    app.record_denial(caller, &route, &format!("browser session: {why}"));
    ApiError::new(StatusCode::FORBIDDEN, "csrf", why)
}

/// `POST /login {"token": "wdn_..."}`: a session for a valid token.
async fn login(
    State(app): State<Arc<App>>,
    peer: crate::denials::Peer,
    headers: HeaderMap,
    crate::body::Body(body): crate::body::Body<Login>,
) -> Result<Response, ApiError> {
    // Nobody logs in: no credential stands yet, and a refusal is
    // recorded against no token (never as the owner's).
    session::check_origin(&headers, true)
        .map_err(|e| refused(&app, &auth::Visitor::Anonymous, "POST", "/login", e))?;
    let header = format!("Bearer {}", body.token.trim());
    let checked = auth::check(&*app.db()?, &app.store, Some(&header));
    let row = match checked {
        Ok(row) => row,
        Err(auth::AuthError::Db(e)) => return Err(ApiError::internal(chain(&e))),
        Err(e) => {
            let route = auth::Route {
                method: "POST",
                path: "/login",
                scope: None,
                data: false,
            };
            app.record_unauthenticated(
                crate::denials::Door::Dashboard,
                peer,
                &route,
                &e.to_string(),
            );
            return Err(ApiError::new(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                format!("{e}: give a token made with `warden token create`"),
            ));
        }
    };
    // Counted against the token behind it, as its other places are.
    let behind = app.leases.behind(&row.id);
    let (id, s) = match app
        .sessions
        .open(&row.id, &behind, warden_runtime::state::now_ms())
    {
        Ok(opened) => opened,
        Err(e) => {
            let why = e.to_string();
            let route = auth::Route {
                method: "POST",
                path: "/login",
                scope: None,
                data: false,
            };
            let caller = auth::Caller::Token(row.clone());
            app.record_denial(&caller, &route, &format!("browser session: {why}"));
            let mut e = ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "too_many_sessions", why)
                .with_details(serde_json::json!({
                    "bound": "per_daemon",
                    "limit": session::MAX_SESSIONS,
                }));
            e.retry_after = Some(crate::error::BUSY_RETRY_AFTER);
            return Err(e);
        }
    };
    let cookie = HeaderValue::from_str(&session::set_cookie(&id))
        .map_err(|e| ApiError::internal(format!("cannot make the session cookie: {e}")))?;
    let answer = serde_json::json!({
        "csrf": s.csrf,
        "token": {"id": row.id, "name": row.name, "scopes": row.scopes},
    });
    Ok((
        [
            (SET_COOKIE, cookie),
            (CACHE_CONTROL, HeaderValue::from_static("no-store")),
        ],
        Json(answer),
    )
        .into_response())
}

/// The live session a request's cookies name, under the session's rules
/// ([`session::check_request`]: the CSRF token always, the own origin
/// where it must be); a refusal is recorded under the session's token.
fn current(
    app: &App,
    peer: crate::denials::Peer,
    method: &axum::http::Method,
    path: &'static str,
    headers: &HeaderMap,
) -> Result<(String, session::Session), ApiError> {
    let name = if *method == axum::http::Method::GET {
        "GET"
    } else {
        "POST"
    };
    // A cookie that names no live session is a refused credential,
    // recorded as a bad Bearer is.
    let unknown = || {
        let why = session::SessionError::Unknown.to_string();
        unauthenticated(app, peer, name, path, &why);
        ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", why)
    };
    let csrf = headers
        .get(session::CSRF_HEADER)
        .and_then(|v| v.to_str().ok());
    let (id, s) = app
        .sessions
        .find(
            &session::cookies(headers),
            csrf,
            warden_runtime::state::now_ms(),
        )
        .ok_or_else(unknown)?;
    session::check_request(&s, method, headers, csrf)
        .map_err(|e| refused(app, &session_caller(app, &s), name, path, e))?;
    Ok((id, s))
}

/// Record a dashboard call refused for its credential (a session that is
/// not live, a token that no longer stands) in the daemon's audit log.
fn unauthenticated(
    app: &App,
    peer: crate::denials::Peer,
    method: &'static str,
    path: &'static str,
    why: &str,
) {
    let route = auth::Route {
        method,
        path,
        scope: None,
        data: false,
    };
    app.record_unauthenticated(
        crate::denials::Door::Dashboard,
        peer,
        &route,
        &format!("browser session: {why}"),
    );
}

/// Who a session stands for in a record: its token, or nobody when the
/// token is gone (never the owner).
fn session_caller(app: &App, s: &session::Session) -> auth::Visitor {
    match app
        .db()
        .ok()
        .and_then(|db| db.token(&s.token_id).ok().flatten())
    {
        Some(row) => auth::Visitor::Known(auth::Caller::Token(row)),
        None => auth::Visitor::Anonymous,
    }
}

/// `GET /session`: who is logged in. It takes the session's CSRF token
/// as every request through the cookie does, so that the cookie alone
/// (which the browser sends to every port of the host) never learns it.
async fn whoami(
    State(app): State<Arc<App>>,
    peer: crate::denials::Peer,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let (_, s) = current(&app, peer, &axum::http::Method::GET, "/session", &headers)?;
    let judged = {
        let db = app.db()?;
        db.token(&s.token_id)
            .map(|r| r.map(|row| auth::standing(&db, &app.store, row)))
    };
    let row = match judged {
        Ok(Some(Ok(row))) => row,
        Ok(Some(Err(e @ auth::AuthError::Outlived { .. }))) => {
            let why = format!("{e}: log in again");
            unauthenticated(&app, peer, "GET", "/session", &why);
            return Err(ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", why));
        }
        Ok(_) => {
            let why = format!("the token {} was revoked: log in again", s.token_id);
            unauthenticated(&app, peer, "GET", "/session", &why);
            return Err(ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", why));
        }
        Err(e) => return Err(ApiError::internal(chain(&e))),
    };
    // The CSRF token is kept by no cache.
    let answer = serde_json::json!({
        "csrf": s.csrf,
        "token": {"id": row.id, "name": row.name, "scopes": row.scopes},
    });
    Ok((
        [(CACHE_CONTROL, HeaderValue::from_static("no-store"))],
        Json(answer),
    )
        .into_response())
}

/// `POST /logout`: the session ends and its cookie is removed.
async fn logout(
    State(app): State<Arc<App>>,
    peer: crate::denials::Peer,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let (id, _) = current(&app, peer, &axum::http::Method::POST, "/logout", &headers)?;
    app.sessions.close(&id);
    let cookie = HeaderValue::from_str(&session::clear_cookie())
        .map_err(|e| ApiError::internal(format!("cannot clear the session cookie: {e}")))?;
    Ok(([(SET_COOKIE, cookie)], StatusCode::NO_CONTENT).into_response())
}

/// The dashboard's routes (outside `/v1`, so outside the scope table:
/// the page and its assets are public, as the OpenAPI document is; the
/// session routes check what they need themselves).
pub fn router() -> Router<Arc<App>> {
    let mut r = Router::new()
        .route("/login", post(login))
        .route("/logout", post(logout))
        .route("/session", get(whoami));
    for (path, _, _) in ASSETS {
        r = r.route(path, get(asset));
    }
    r
}

/// The headers every answer carries (and `Cache-Control: no-store` where
/// the route set none).
pub async fn secure_headers(req: Request, next: Next) -> Response {
    let mut response = next.run(req).await;
    let h = response.headers_mut();
    // No answer stays in a browser's cache (tokens, files, a command's
    // output) unless its route says otherwise (the assets).
    if !h.contains_key(CACHE_CONTROL) {
        h.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    h.insert(CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    h.insert(X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    h.insert(
        "cross-origin-opener-policy",
        HeaderValue::from_static("same-origin"),
    );
    h.insert(
        "cross-origin-resource-policy",
        HeaderValue::from_static("same-origin"),
    );
    response
}
