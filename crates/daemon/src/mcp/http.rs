//! The daemon's `/mcp`: MCP over streamable HTTP. The route is behind the
//! same scope check as every other (`auth::ROUTES`: the `mcp` scope), and
//! each tool is then checked again as the API route it calls, with the
//! caller's own token. Every session is bound to the caller that began
//! it before the server sees a request ([`super::bound`]).

use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use std::sync::Arc;

use super::{Session, Settings};
use crate::app::App;

pub use super::bound::RecordedAs;

/// The session check of an endpoint at `path` (see [`super::bound`]).
fn bound(app: Arc<App>, path: &'static str) -> Arc<super::bound::Door> {
    Arc::new(super::bound::Door { app, path })
}

/// The service mounted at `/mcp`: one [`Session`] per MCP session, ended
/// by its client or after five minutes without a request (its sandboxes
/// are then removed, unless kept).
pub fn service(app: Arc<App>) -> axum::Router {
    axum::Router::new()
        .route_service("/mcp", sessions(app.clone()))
        .layer(axum::middleware::from_fn(ended_is_no_content))
        .layer(axum::middleware::from_fn_with_state(
            bound(app, "/mcp"),
            super::bound::layer,
        ))
}

/// A session ended with `DELETE /mcp` is answered 204: the SDK's server
/// answers 202 (accepted, as if the end were still to come), which
/// clients log as a failure; the session is gone when the answer leaves.
async fn ended_is_no_content(
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let delete = req.method() == axum::http::Method::DELETE;
    let mut res = next.run(req).await;
    if delete && res.status() == axum::http::StatusCode::ACCEPTED {
        *res.status_mut() = axum::http::StatusCode::NO_CONTENT;
    }
    res
}

fn sessions(app: Arc<App>) -> StreamableHttpService<Session, LocalSessionManager> {
    let settings = Arc::new(Settings {
        profiles: Vec::new(),
        default_profile: None,
        default_workspace: None,
        workspace_roots: app.workspace_roots.clone(),
        door: "http",
    });
    let config = StreamableHttpServerConfig::default()
        // The token is the guard, on any address the daemon listens on.
        .disable_allowed_hosts()
        // No browser page is an MCP client of the daemon: a request that
        // says it comes from one is refused.
        .enforce_origin_validation();
    let api = super::inner::Api::new(app);
    // Sessions do not outlive the daemon: the sandboxes of a daemon that
    // was killed outright are removed as this one starts serving. Once per
    // process: the reaper's own in-process calls build a router, which
    // mounts this service again.
    static REAPER: std::sync::Once = std::sync::Once::new();
    if let Ok(rt) = tokio::runtime::Handle::try_current() {
        REAPER.call_once(|| {
            let api = api.clone();
            rt.spawn(async move {
                super::lease::reap(&api).await;
            });
        });
    }
    StreamableHttpService::new(
        move || Ok(Session::with_api(api.clone(), settings.clone(), None)),
        Arc::new(LocalSessionManager::default()),
        config,
    )
}

/// `/mcp` for one sandbox that the sessions did not make: each session
/// adopts it ([`Session::adopting`]) and never removes it. The E2B door
/// serves it behind its own check of the caller (`crate::e2b`).
pub fn one_sandbox(app: Arc<App>, sandbox: String) -> axum::Router {
    let settings = Arc::new(Settings {
        profiles: Vec::new(),
        default_profile: None,
        default_workspace: None,
        workspace_roots: Vec::new(),
        door: "http",
    });
    let config = StreamableHttpServerConfig::default()
        .disable_allowed_hosts()
        .enforce_origin_validation();
    let door = bound(app.clone(), "/e2b/mcp");
    let service = StreamableHttpService::new(
        move || Ok(Session::adopting(app.clone(), settings.clone(), &sandbox)),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    axum::Router::new()
        .route_service("/mcp", service)
        .layer(axum::middleware::from_fn(ended_is_no_content))
        .layer(axum::middleware::from_fn_with_state(
            door,
            super::bound::layer,
        ))
}
