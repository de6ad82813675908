//! The daemon's `/mcp`: MCP over streamable HTTP. The route is behind the
//! same scope check as every other (`auth::ROUTES`: the `mcp` scope), and
//! each tool is then checked again as the API route it calls, with the
//! caller's own token.

use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use std::sync::Arc;

use super::{Session, Settings};
use crate::app::App;

/// The service mounted at `/mcp`: one [`Session`] per MCP session, ended
/// by its client or after five minutes without a request (its sandboxes
/// are then removed, unless kept).
pub fn service(app: Arc<App>) -> StreamableHttpService<Session, LocalSessionManager> {
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
    StreamableHttpService::new(
        move || Ok(Session::with_api(api.clone(), settings.clone(), None)),
        Arc::new(LocalSessionManager::default()),
        config,
    )
}
