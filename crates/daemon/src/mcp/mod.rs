//! MCP: warden as "a computer" for any Model Context Protocol client, on
//! the official SDK (`rmcp`). Two front doors share this module: `warden
//! mcp` over stdio ([`serve_stdio`], as the owner of the state directory)
//! and the daemon's `/mcp` over streamable HTTP ([`http::service`], as the
//! caller's token says).
//!
//! It holds no sandbox logic. Each tool is a call to the daemon's own API,
//! made in-process ([`inner`]): the same handlers, the same scope check,
//! the same confinement of file paths (the sandbox's init resolves them),
//! the same review and commit rules. What this module adds is a session:
//! the sandboxes it made (the only ones it may touch), its commands in
//! flight, questions of ask mode put to the client as elicitation
//! requests, and the removal of its sandboxes when it ends.
//!
//! The model on the other side is the untrusted party: it may choose only
//! among the profiles the person allowed (`--profile`; over HTTP, those the
//! token may use), name workspaces only under the roots the person gave,
//! never accept a flagged change or overwrite a conflict, and never widen
//! a sandbox's network (an ask-mode question goes to the person through
//! the client, or is denied).

mod ask;
mod bound;
mod commands;
mod describe;
mod desktop;
mod files;
pub mod http;
mod inner;
mod lease;
pub mod ledger;
mod tools;

use axum::http::Method;
use rmcp::model::{
    ErrorCode, ListResourceTemplatesResult, ListResourcesResult, ListToolsResult,
    PaginatedRequestParams, ProtocolVersion, ReadResourceRequestParams, ReadResourceResponse,
    ReadResourceResult, Resource, ResourceContents, ResourceTemplate, ServerCapabilities,
    ServerConfig,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ErrorData, ServerHandler, ServiceExt};
use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use crate::app::App;
pub use inner::Identity;
use inner::{Api, Refused, Send};

/// Sandboxes one session may have at once: a model that makes them in a
/// loop does not fill the host (each has its own limits besides).
pub const MAX_SANDBOXES: usize = 8;

/// What the person who started the server allows its sessions.
#[derive(Debug, Clone, Default)]
pub struct Settings {
    /// Profiles `create_sandbox` may name. Empty: over HTTP, any the
    /// caller's token may use through the API; over stdio, only the default.
    pub profiles: Vec<String>,
    /// The profile of a sandbox made without one (`None`: warden's own
    /// defaults, with no network at all).
    pub default_profile: Option<String>,
    /// The workspace of a sandbox made without one (stdio: the current
    /// directory); `None`: an empty workspace of the sandbox's own.
    pub default_workspace: Option<PathBuf>,
    /// Directories under which `create_sandbox` may name a workspace
    /// (canonical).
    pub workspace_roots: Vec<PathBuf>,
    /// `stdio` or `http`, for labels and messages.
    pub door: &'static str,
}

/// A sandbox this session made.
struct Owned {
    /// Left behind when the session ends.
    keep: bool,
    /// What it allows, for the tool descriptions.
    allows: String,
    /// The question watcher of an ask-mode sandbox.
    watcher: Option<tokio::task::JoinHandle<()>>,
    /// Events of its log already looked through for denials.
    events_seen: u64,
}

/// A command started with `start_command`: what has been read of it.
struct Started {
    sandbox: String,
    stdout: u64,
    stderr: u64,
}

#[derive(Default)]
struct State {
    sandboxes: BTreeMap<String, Owned>,
    commands: HashMap<String, Started>,
    /// The `Authorization` the session began with (HTTP): a later request
    /// with another is refused.
    caller: Option<Option<String>>,
    /// Things to tell the model with the next tool result.
    notes: Vec<String>,
}

struct Shared {
    id: String,
    api: Api,
    settings: Arc<Settings>,
    /// Stdio: the owner, always. HTTP: taken from each request.
    fixed: Option<Identity>,
    state: Mutex<State>,
    /// What a sandbox of the default profile allows (worked out once).
    default_allows: std::sync::OnceLock<String>,
    /// Held while a tool makes the session's first sandbox: tools called
    /// at once share the one it makes.
    first: tokio::sync::Mutex<()>,
}

/// One MCP session (one client connection).
#[derive(Clone)]
pub struct Session {
    shared: Arc<Shared>,
}

impl Session {
    pub fn new(app: Arc<App>, settings: Arc<Settings>, fixed: Option<Identity>) -> Session {
        Session::with_api(Api::new(app), settings, fixed)
    }

    /// A session whose one sandbox is `id`, which it did not make and
    /// never removes (the E2B door's `get_mcp_url`: its caller's token is
    /// for that sandbox only, so the API refuses it any other, and any
    /// create).
    pub fn adopting(app: Arc<App>, settings: Arc<Settings>, id: &str) -> Session {
        let s = Session::new(app, settings, None);
        let (allows, _) = s.allows_of(id, None);
        s.state().sandboxes.insert(
            id.to_string(),
            Owned {
                keep: true,
                allows,
                watcher: None,
                events_seen: 0,
            },
        );
        s
    }

    fn with_api(api: Api, settings: Arc<Settings>, fixed: Option<Identity>) -> Session {
        Session {
            shared: Arc::new(Shared {
                id: crate::auth::random_id(6),
                api,
                settings,
                fixed,
                state: Mutex::new(State::default()),
                default_allows: std::sync::OnceLock::new(),
                first: tokio::sync::Mutex::new(()),
            }),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while the lock was held leaves plain data behind.
        self.shared
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn api(&self) -> &Api {
        &self.shared.api
    }

    fn settings(&self) -> &Settings {
        &self.shared.settings
    }

    /// Who a request of this session is made as; a session begun with one
    /// token is not continued with another.
    fn identity(&self, ctx: &RequestContext<RoleServer>) -> Result<Identity, Refused> {
        if let Some(f) = &self.shared.fixed {
            return Ok(f.clone());
        }
        let Some(parts) = ctx.extensions.get::<::http::request::Parts>() else {
            return Err(Refused::new(
                "internal",
                "the request carries no HTTP parts to know its caller by",
            ));
        };
        let who = Identity::of(parts);
        let mut state = self.state();
        match &state.caller {
            None => state.caller = Some(who.authorization.clone()),
            Some(first) => {
                use subtle::ConstantTimeEq;
                let a = first.as_deref().unwrap_or("").as_bytes();
                let b = who.authorization.as_deref().unwrap_or("").as_bytes();
                let same: bool =
                    a.ct_eq(b).into() && first.is_some() == who.authorization.is_some();
                if !same {
                    return Err(Refused::new(
                        "forbidden",
                        "this MCP session was begun with another token: start a session of your own",
                    ));
                }
            }
        }
        Ok(who)
    }

    /// The session's sandbox `given`, its only one, or a new one of the
    /// defaults when it has none.
    async fn pick(
        &self,
        given: Option<&str>,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<String, Refused> {
        let mut owned: Vec<String> = self.state().sandboxes.keys().cloned().collect();
        let _first = match given {
            None if owned.is_empty() => {
                let guard = self.shared.first.lock().await;
                owned = self.state().sandboxes.keys().cloned().collect();
                Some(guard)
            }
            _ => None,
        };
        match given {
            Some(id) if owned.iter().any(|o| o == id) => Ok(id.to_string()),
            Some(id) => Err(Refused::new(
                "not_found",
                format!(
                    "no sandbox {id:?} in this session (a session reaches only the sandboxes it made){}",
                    listed(&owned)
                ),
            )),
            None => match owned.as_slice() {
                [one] => Ok(one.clone()),
                [] => {
                    let made = self.create(None, None, false, None, ctx).await?;
                    Ok(made.0)
                }
                _ => Err(Refused::new(
                    "bad_request",
                    format!(
                        "this session has several sandboxes: name one with \"sandbox\"{}",
                        listed(&owned)
                    ),
                )),
            },
        }
    }

    /// Make and start a sandbox through the API; its id and what it allows.
    async fn create(
        &self,
        profile: Option<String>,
        workspace: Option<String>,
        keep: bool,
        ttl_seconds: Option<u64>,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<(String, String), Refused> {
        let who = self.identity(ctx)?;
        let s = self.settings();
        let have = self.state().sandboxes.len();
        if have >= MAX_SANDBOXES {
            // A bound of the session's, not a token's quota: it passes
            // when the session destroys one of its sandboxes.
            return Err(Refused::new(
                "too_many_sandboxes",
                format!(
                    "this session has {have} sandboxes, the most it may have at once: destroy_sandbox one first"
                ),
            ));
        }
        let profile = match profile {
            None => s.default_profile.clone(),
            Some(p) => {
                // Over HTTP the model names any profile of the owner's
                // catalogue, by its plain name only, whichever listener
                // carried the session (the owner's socket included: the
                // model is not the owner).
                let allowed = if s.profiles.is_empty() {
                    (s.door == "http" && warden_policy::trust::is_catalog_name(&p))
                        || s.default_profile.as_deref() == Some(p.as_str())
                } else {
                    s.profiles.contains(&p)
                };
                if !allowed {
                    return Err(Refused::new(
                        "forbidden",
                        format!(
                            "profile {p:?} is not one this server offers; {}",
                            match (&s.default_profile, s.profiles.is_empty()) {
                                (_, false) => format!("use one of: {}", s.profiles.join(", ")),
                                (Some(d), true) => format!("use {d:?} or name none"),
                                (None, true) => "name none (warden's defaults: no network)".into(),
                            }
                        ),
                    ));
                }
                Some(p)
            }
        };
        let workspace = match workspace {
            None => s.default_workspace.clone(),
            Some(w) => Some(self.workspace_allowed(&w)?),
        };
        let ws_text = workspace.as_ref().map(|w| w.display().to_string());
        let mut body = serde_json::json!({
            "labels": {"mcp-session": self.shared.id, "mcp": s.door},
            "start": true,
        });
        if let Some(p) = &profile {
            body["profile"] = p.clone().into();
        }
        if let Some(w) = &ws_text {
            body["workspace"] = w.clone().into();
        }
        if let Some(t) = ttl_seconds {
            body["ttl_seconds"] = t.into();
        }
        // One not kept is leased to this process: when it dies without
        // ending the session, the next server removes the sandbox.
        if let (false, Some(l)) = (keep, lease::mine()) {
            body["labels"][lease::LABEL] = l.into();
        }
        let info: crate::api::SandboxInfo = self
            .api()
            .json(&who, Method::POST, "/v1/sandboxes", Send::Json(body))
            .await?;
        let (allows, ask) = self.allows_of(&info.id, ws_text.as_deref());
        let watcher =
            ask.then(|| self.watch_questions(info.id.clone(), who.clone(), ctx.peer.clone()));
        self.state().sandboxes.insert(
            info.id.clone(),
            Owned {
                keep,
                allows: allows.clone(),
                watcher,
                events_seen: 0,
            },
        );
        let _ = ctx.peer.notify_tool_list_changed().await;
        let _ = ctx.peer.notify_resource_list_changed().await;
        Ok((info.id, allows))
    }

    /// A workspace `create_sandbox` named: it must resolve under one of
    /// the roots the person gave.
    fn workspace_allowed(&self, w: &str) -> Result<PathBuf, Refused> {
        let s = self.settings();
        let roots = &s.workspace_roots;
        let p = PathBuf::from(w);
        // Over HTTP the model holds a token: every refusal is one answer,
        // which tells nothing of the host (whether a path exists, what
        // the owner's roots or configuration directories are), as the
        // native API's.
        // The path is judged as the native API judges it, by its spelling
        // before anything of the host is looked at
        // ([`App::workspace_refused`](crate::app::App::workspace_refused)),
        // and is never said back.
        if s.door == "http" {
            return match self.api().app().workspace_refused(&p) {
                None => Ok(p),
                Some(_) => Err(Refused::new(
                    "forbidden",
                    crate::routes::sandboxes::NOT_UNDER_A_ROOT,
                )),
            };
        }
        let real = std::fs::canonicalize(&p).map_err(|e| {
            Refused::new(
                "bad_request",
                format!("workspace {w:?} cannot be used: {e}"),
            )
        })?;
        let under_root = roots.iter().any(|r| real.starts_with(r));
        if under_root && self.api().app().holds_configuration(&real) {
            return Err(Refused::new(
                "forbidden",
                format!("workspace {w:?} holds warden's own configuration (profiles, presets or state): name a project's directory"),
            ));
        }
        if under_root {
            return Ok(real);
        }
        Err(Refused::new(
            "forbidden",
            if roots.is_empty() {
                "this server lets no workspace be named: leave \"workspace\" out (the sandbox gets the default one)".to_string()
            } else {
                format!(
                    "workspace {w:?} is not under a directory this server offers: {}",
                    roots
                        .iter()
                        .map(|r| r.display().to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            },
        ))
    }

    /// What sandbox `id` allows (from its stored spec), and whether it asks.
    fn allows_of(&self, id: &str, workspace: Option<&str>) -> (String, bool) {
        let app = self.api().app();
        let Ok(sb) = app.store.get(id) else {
            return (String::new(), false);
        };
        match warden_runtime::state::read_json::<warden_runtime::state::Stored>(
            &sb.dir().join(warden_runtime::state::STORED),
        ) {
            Ok(stored) => {
                // Questions come from ask mode and from ask rules alike.
                let asks = |e: &warden_policy::EgressSpec| {
                    use warden_policy::requests::RequestAction;
                    e.ask || e.requests.iter().any(|r| r.action == RequestAction::Ask)
                };
                let ask = match &stored.spec.network {
                    warden_policy::NetworkSpec::Egress(e) => asks(e),
                    _ => false,
                };
                (describe::allows(&stored.spec, workspace), ask)
            }
            Err(_) => (String::new(), false),
        }
    }

    /// What a sandbox of the default profile would allow.
    fn default_allows(&self) -> String {
        self.shared
            .default_allows
            .get_or_init(|| {
                let app = self.api().app();
                let s = self.settings();
                let input = warden_runtime::resolve::Input {
                    profile: s
                        .default_profile
                        .clone()
                        .map(warden_runtime::resolve::ProfileSource::Named),
                    // Only what it allows is read: any command will do.
                    flags: {
                        let mut flags = warden_policy::compose::Layer::default();
                        flags.add_one(
                            warden_policy::Field::Command,
                            warden_policy::compose::Val::Argv(vec!["sh".into()]),
                            warden_policy::compose::Origin::CommandLine,
                        );
                        flags
                    },
                    ..Default::default()
                };
                let ctx = warden_runtime::resolve::Context {
                    catalog: &app.catalog,
                    defaults: &app.defaults,
                    state_dir: Some(&app.state_dir),
                    otlp: false,
                    id: "mcp-preview",
                    // As the session's sandboxes will be made: over HTTP
                    // for a token holder, over stdio for the owner.
                    trust: if s.door == "http" {
                        warden_policy::Trust::Caller
                    } else {
                        warden_policy::Trust::Owner
                    },
                    // Only what it allows is read, which is nobody's own.
                    owner: warden_runtime::lifecycle::Owner::Machine,
                };
                match warden_runtime::resolve::resolve(input, &ctx, None) {
                    Ok(r) => describe::allows(
                        &r.spec,
                        s.default_workspace
                            .as_ref()
                            .map(|w| w.display().to_string())
                            .as_deref(),
                    ),
                    Err(e) => format!(
                        "(the default profile cannot be resolved: {})",
                        crate::error::chain(&e)
                    ),
                }
            })
            .clone()
    }

    pub(super) fn note(&self, n: String) {
        self.state().notes.push(n);
    }

    fn take_notes(&self) -> Vec<String> {
        std::mem::take(&mut self.state().notes)
    }

    /// End the session: remove every sandbox it made and did not keep.
    /// Committed changes are on the host already; the rest go with them.
    pub async fn close(&self) {
        let gone = self.state().release();
        remove_all(self.api(), gone).await;
    }
}

impl State {
    /// The session lets go of its sandboxes: their watchers stop, and the
    /// ids of those it made and did not keep are returned, to be removed.
    fn release(&mut self) -> Vec<String> {
        let ids: Vec<String> = self
            .sandboxes
            .iter()
            .filter(|(_, o)| !o.keep)
            .map(|(id, _)| id.clone())
            .collect();
        for o in self.sandboxes.values_mut() {
            if let Some(w) = o.watcher.take() {
                w.abort();
            }
        }
        self.sandboxes.clear();
        ids
    }
}

/// Removes sandboxes a session made, as the owner: the session made them,
/// and its end removes them.
async fn remove_all(api: &Api, ids: Vec<String>) {
    for id in ids {
        let _ = api
            .call(
                &Identity::owner(),
                Method::DELETE,
                &format!("/v1/sandboxes/{}?force=true", inner::enc(&id)),
                Send::None,
                1 << 16,
            )
            .await;
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        // An HTTP session that ends (closed by its client, or idle too
        // long) takes its sandboxes with it. Stdio closes explicitly.
        let ids = self
            .state
            .get_mut()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .release();
        if ids.is_empty() {
            return;
        }
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let api = self.api.clone();
        handle.spawn(async move { remove_all(&api, ids).await });
    }
}

fn listed(ids: &[String]) -> String {
    if ids.is_empty() {
        " (it has none yet: create_sandbox makes one)".into()
    } else {
        format!("; it has: {}", ids.join(", "))
    }
}

/// The URI of a sandbox's event log.
fn events_uri(id: &str) -> String {
    format!("warden://sandboxes/{id}/events")
}

impl ServerHandler for Session {
    fn get_info(&self) -> ServerConfig {
        let mut info = ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .enable_resources()
                .enable_resources_list_changed()
                .build(),
        );
        info.server_info.name = "warden".into();
        info.server_info.version = env!("CARGO_PKG_VERSION").into();
        info.instructions = Some(tools::INSTRUCTIONS.into());
        info
    }

    /// Up to 2025-11-25: the versions in which a server may send a
    /// request (elicitation) to its client while a tool runs.
    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(ProtocolVersion::known_up_to(&ProtocolVersion::V_2025_11_25))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.tool_list()))
    }

    async fn call_tool(
        &self,
        request: rmcp::model::CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::CallToolResponse, ErrorData> {
        Ok(self.dispatch(request, context).await.into())
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let ids: Vec<String> = self.state().sandboxes.keys().cloned().collect();
        Ok(ListResourcesResult::with_all_items(
            ids.iter()
                .map(|id| {
                    let mut r = Resource::new(events_uri(id), format!("events of {id}"));
                    r.description = Some(format!("Sandbox {id}'s event log (its audit log): every command started and ended, every network decision with its rule, secrets substituted, workspace actions. One JSON object per line."));
                    r.mime_type = Some("application/x-ndjson".into());
                    r
                })
                .collect(),
        ))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        let mut t = ResourceTemplate::new("warden://sandboxes/{sandbox}/events", "events");
        t.description = Some("A sandbox's event log, one JSON object per line".into());
        t.mime_type = Some("application/x-ndjson".into());
        Ok(ListResourceTemplatesResult::with_all_items(vec![t]))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let uri = request.uri.clone();
        let id = uri
            .strip_prefix("warden://sandboxes/")
            .and_then(|r| r.strip_suffix("/events"))
            .filter(|id| !id.contains('/'))
            .ok_or_else(|| {
                ErrorData::resource_not_found(
                    format!("no resource {uri:?}: warden://sandboxes/ID/events names a sandbox's event log"),
                    None,
                )
            })?;
        let not_found = |m: String| ErrorData::new(ErrorCode::RESOURCE_NOT_FOUND, m, None);
        if !self.state().sandboxes.contains_key(id) {
            return Err(not_found(format!(
                "no sandbox {id:?} in this session (a session reads only the logs of the sandboxes it made)"
            )));
        }
        let who = self.identity(&context).map_err(|e| not_found(e.message))?;
        let text = commands::events_text(self.api(), &who, id)
            .await
            .map_err(|e| not_found(e.message))?;
        Ok(ReadResourceResult::new(vec![ResourceContents::text(text, uri)]).into())
    }
}

/// `warden mcp`: serve one session over standard input and output until
/// the client goes, then remove the sandboxes it made (those not kept).
pub async fn serve_stdio(app: Arc<App>, settings: Settings) -> Result<(), McpError> {
    let session = Session::new(app, Arc::new(settings), Some(Identity::owner()));
    // Sandboxes of servers killed outright before this one.
    lease::reap(session.api()).await;
    let running = session
        .clone()
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| McpError::Start(e.to_string()))?;
    // The client closing our input ends the session; so does a signal
    // (a client that kills its server, a closed terminal): either way the
    // session's sandboxes are removed before the process goes.
    let ended = tokio::select! {
        r = running.waiting() => r.map(|_| ()).map_err(|e| McpError::Ended(e.to_string())),
        _ = terminated() => Ok(()),
    };
    session.close().await;
    ended
}

/// SIGTERM, SIGINT or SIGHUP.
async fn terminated() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut waits = Vec::new();
    for kind in [
        SignalKind::terminate(),
        SignalKind::interrupt(),
        SignalKind::hangup(),
    ] {
        if let Ok(s) = signal(kind) {
            waits.push(s);
        }
    }
    if waits.is_empty() {
        return std::future::pending().await;
    }
    let recvs = waits.iter_mut().map(|s| Box::pin(s.recv()));
    futures_util::future::select_all(recvs).await;
}

/// Why an MCP server could not serve.
#[derive(Debug, thiserror::Error)]
pub enum McpError {
    #[error("the MCP session could not begin: {0}")]
    Start(String),
    #[error("the MCP session ended in an error: {0}")]
    Ended(String),
}
