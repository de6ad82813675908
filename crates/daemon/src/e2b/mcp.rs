//! E2B's MCP (`Sandbox.create(mcp=...)`, `get_mcp_url`, `get_mcp_token`)
//! onto warden's own MCP server ([`crate::mcp`]). E2B runs an MCP gateway
//! inside the sandbox, on port 50005, that starts MCP servers of its
//! catalogue; warden does not run those (each is a container image with
//! credentials of its own). What it gives instead is warden's MCP tools
//! (commands, files) for that one sandbox, at the address `get_mcp_url()`
//! names (`PORT-ID.localhost:DOOR/mcp`, relayed here by [`super::ports`]):
//! a create asks for it with `mcp={}`; a non-empty configuration is
//! refused (400) saying so.
//!
//! The MCP token is the door's, standing for its caller's power over that
//! sandbox only, as an envd access token does ([`super::signing`]). The
//! SDK picks it itself at create (a random UUID it hands to the
//! `mcp-gateway` command it runs in the sandbox): that command, on a
//! sandbox made with `mcp`, is taken here and never runs, so the token
//! never enters the sandbox ([`gateway`]). A client that connects later
//! reads it from `/etc/mcp-gateway/.token`, which the door answers with a
//! token of its own making for that caller ([`token_file`]). Behind the
//! token the MCP session acts with a per-sandbox warden token minted
//! here, never shown to anyone, whose scopes are those of `sandboxes:read`,
//! `exec` and `files` that the caller holds: the native scope check then
//! refuses it every other sandbox and every create. The caller needs the
//! `mcp` scope, as the native `/mcp` does.
//!
//! A token ends with its sandbox (killed, or its timeout ended), with the
//! caller's token (revoked), and with the daemon (kept in its memory
//! only; the per-sandbox tokens behind them are revoked as it starts).

use axum::extract::Request;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::Response;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use subtle::ConstantTimeEq;
use tower::ServiceExt;

use super::{answer, E2b};
use crate::app::App;
use crate::auth::{self, Caller, Scope};
use crate::credential::Credential;
use crate::error::chain;

/// The port E2B's MCP gateway listens on inside a sandbox: the SDK's
/// `get_mcp_url()` names it.
pub const MCP_PORT: u16 = 50005;
/// The label of a sandbox made with `mcp`.
pub const LABEL: &str = "e2b.mcp";
/// The template the SDK names when a create with `mcp` names none.
pub const TEMPLATE: &str = "mcp-gateway";
/// Where the SDK's `get_mcp_token()` reads a connected sandbox's token.
pub const TOKEN_FILE: &str = "/etc/mcp-gateway/.token";
/// The variable the SDK hands its token to the gateway in.
const TOKEN_VAR: &str = "GATEWAY_ACCESS_TOKEN";
/// The name of the per-sandbox warden tokens minted here.
const MINTED: &str = "e2b-mcp";
/// What of the caller's power the MCP session gets: the routes of a
/// sandbox's own data API.
const SCOPES: [Scope; 3] = [Scope::SandboxesRead, Scope::Exec, Scope::Files];
/// The shortest token a client may choose: the SDK's is a UUID (36).
const MIN_CHOSEN: usize = 32;
/// The longest.
const MAX_CHOSEN: usize = 256;

/// One MCP token: the sandbox it reaches, whose power it stands for, and
/// the per-sandbox warden token the session acts with.
struct Grant {
    key: String,
    sandbox: String,
    /// The identity of the sandbox it was made for (a later sandbox given
    /// the name is not reached).
    uid: String,
    /// The caller's token's id.
    parent: String,
    native_id: String,
    native: String,
}

/// The door's MCP tokens and, per sandbox, the MCP service its sessions
/// live in.
#[derive(Default)]
pub struct Grants {
    grants: Mutex<Vec<Grant>>,
    services: Mutex<HashMap<String, axum::Router>>,
}

/// Why a token cannot be had or used, with the status to answer.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct Refusal {
    pub status: StatusCode,
    pub message: String,
}

fn refuse(status: StatusCode, message: impl Into<String>) -> Refusal {
    Refusal {
        status,
        message: message.into(),
    }
}

impl Grants {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Grant>> {
        self.grants.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Whether sandbox `id` has the label `label`.
fn labelled(app: &App, id: &str, label: &str) -> Result<bool, Refusal> {
    // A record kept of an earlier sandbox of this name is not this one's.
    let Ok(sb) = app.store.get(id) else {
        return Ok(false);
    };
    let row = app
        .record(&sb)
        .map_err(|e| refuse(e.status, e.problem.message))?;
    Ok(row.is_some_and(|r| r.labels.contains_key(label)))
}

/// Whether MCP was turned on for sandbox `id`.
fn enabled(app: &App, id: &str) -> Result<bool, Refusal> {
    labelled(app, id, LABEL)
}

/// Turn MCP on for sandbox `id`: its label, kept by the door.
fn enable(app: &App, id: &str) -> Result<(), Refusal> {
    let internal = |e: crate::db::DbError| refuse(StatusCode::INTERNAL_SERVER_ERROR, chain(&e));
    let Ok(sb) = app.store.get(id) else {
        return Ok(());
    };
    let db = app.db().map_err(|e| refuse(e.status, e.problem.message))?;
    if let Some(mut row) = db.record_of(&sb).map_err(internal)? {
        row.labels.insert(LABEL.into(), "on".into());
        db.insert_sandbox(&row).map_err(internal)?;
    }
    Ok(())
}

/// The MCP token of `caller` for sandbox `id` (made with `mcp`): the one
/// it has, replaced by `chosen` when the client picked one, or a new one.
/// A caller refused one (the owner, a token without the scopes) is
/// recorded in the daemon's log as any refused call is. Blocking.
pub fn mint(e: &E2b, caller: &Caller, id: &str, chosen: Option<&str>) -> Result<String, Refusal> {
    let minted = mint_for(e, caller, id, chosen);
    if let Err(r) = &minted {
        if r.status == StatusCode::FORBIDDEN {
            let route = auth::Route {
                method: "*",
                path: "/e2b/mcp-token",
                scope: Some(Scope::Mcp),
                data: false,
            };
            e.app.record_denial(caller, &route, &r.message);
        }
    }
    minted
}

fn mint_for(e: &E2b, caller: &Caller, id: &str, chosen: Option<&str>) -> Result<String, Refusal> {
    let Caller::Token(t) = caller else {
        return Err(refuse(
            StatusCode::FORBIDDEN,
            "the E2B door's MCP tokens stand for a warden token; the owner uses `warden mcp`",
        ));
    };
    if !caller.holds(Scope::Mcp) {
        return Err(refuse(
            StatusCode::FORBIDDEN,
            format!(
                "token {} lacks the scope mcp that an MCP token needs (as /mcp does)",
                t.id
            ),
        ));
    }
    // The SDK's own start turns MCP on ([`gateway`]); a token read
    // later is for a sandbox it was turned on for.
    if chosen.is_none() && !enabled(&e.app, id)? {
        return Err(refuse(
            StatusCode::NOT_FOUND,
            format!("sandbox {id} was not made with MCP: create it with mcp={{}} to reach warden's MCP tools for it"),
        ));
    }
    let sb = e
        .app
        .sandbox(id)
        .map_err(|err| refuse(err.status, err.problem.message))?;
    let uid = sb.uid();
    let mut grants = e.mcp.lock();
    if let Some(g) = grants
        .iter_mut()
        .find(|g| g.sandbox == id && g.parent == t.id && g.uid == uid)
    {
        if let Some(c) = chosen {
            g.key = c.to_string();
        }
        return Ok(g.key.clone());
    }
    let scopes: Vec<Scope> = SCOPES.into_iter().filter(|s| caller.holds(*s)).collect();
    if scopes.is_empty() {
        return Err(refuse(
            StatusCode::FORBIDDEN,
            format!(
                "token {} holds none of sandboxes:read, exec, files: an MCP token would reach nothing",
                t.id
            ),
        ));
    }
    let (row, native) = auth::new_token(MINTED, &scopes, Some(&sb));
    e.app
        .db()
        .map_err(|err| refuse(err.status, err.problem.message))?
        .insert_token(&row)
        .map_err(|err| refuse(StatusCode::INTERNAL_SERVER_ERROR, chain(&err)))?;
    // The session's long-lived answers are the caller's token's places,
    // not a new holder's: one token's bound is not multiplied by its
    // sandboxes (see [`crate::leases`]).
    e.app.leases.acts_for(&row.id, &t.id);
    let key = match chosen {
        Some(c) => c.to_string(),
        None => {
            let k = super::signing::new_key();
            if k.is_empty() {
                return Err(refuse(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "the kernel's random generator failed",
                ));
            }
            // Not an envd access token: told apart by its prefix.
            k.replacen(super::signing::KEY_PREFIX, "e2bmcp_", 1)
        }
    };
    grants.push(Grant {
        key: key.clone(),
        sandbox: id.to_string(),
        uid,
        parent: t.id.clone(),
        native_id: row.id,
        native,
    });
    Ok(key)
}

/// The SDK's start of its MCP gateway (`mcp-gateway --config '{}'`
/// through `bash -l -c`, with the token it picked in [`TOKEN_VAR`]) on a
/// sandbox the door made: MCP is turned on for the sandbox, the token is
/// taken as the caller's MCP token and the command becomes `true`, so
/// neither the gateway (which warden does not have) nor the token reaches
/// the sandbox. This command is the only sign of `mcp={}` the door gets:
/// the SDK leaves an empty configuration out of the create. Another
/// configuration is refused as at create. `Ok(false)`: not that command.
pub fn gateway(
    e: &E2b,
    caller: &Caller,
    id: &str,
    cmd: &str,
    args: &mut [String],
    envs: &mut std::collections::BTreeMap<String, String>,
) -> Result<bool, Refusal> {
    let is_gateway = cmd == "/bin/bash"
        && args.len() == 3
        && args[0] == "-l"
        && args[1] == "-c"
        && args[2].starts_with("mcp-gateway ");
    if !is_gateway || !labelled(&e.app, id, "e2b.template")? {
        return Ok(false);
    }
    // `shlex.quote(json.dumps(mcp))` of an empty configuration.
    if args[2] != "mcp-gateway --config '{}'" {
        return Err(refuse(
            StatusCode::BAD_REQUEST,
            "mcp: warden does not run the MCP servers of E2B's catalogue in a sandbox; create with mcp={} to reach warden's own MCP tools for the sandbox (commands and files) at get_mcp_url()",
        ));
    }
    let Some(chosen) = envs.remove(TOKEN_VAR) else {
        return Err(refuse(
            StatusCode::BAD_REQUEST,
            format!("{TOKEN_VAR}: the MCP gateway's start names no token"),
        ));
    };
    let n = chosen.chars().count();
    if !(MIN_CHOSEN..=MAX_CHOSEN).contains(&n) || chosen.chars().any(|c| c.is_control()) {
        return Err(refuse(
            StatusCode::BAD_REQUEST,
            format!("{TOKEN_VAR}: an MCP token is {MIN_CHOSEN} to {MAX_CHOSEN} printable characters (the SDK's is a random UUID)"),
        ));
    }
    mint(e, caller, id, Some(&chosen))?;
    enable(&e.app, id)?;
    args[2] = "true".into();
    Ok(true)
}

/// `/etc/mcp-gateway/.token` of a sandbox made with `mcp`, as the SDK's
/// `get_mcp_token()` reads it after a connect: the caller's MCP token.
pub async fn token_file(e: Arc<E2b>, caller: Caller, id: String) -> Response {
    let answer = tokio::task::spawn_blocking(move || mint(&e, &caller, &id, None)).await;
    match answer {
        Ok(Ok(key)) => Response::builder()
            .header(header::CONTENT_TYPE, "application/octet-stream")
            .body(axum::body::Body::from(key))
            .unwrap_or_default(),
        Ok(Err(r)) => answer::error(r.status, r.message),
        Err(err) => answer::error(StatusCode::INTERNAL_SERVER_ERROR, err.to_string()),
    }
}

/// What an MCP request to sandbox `id` may act with: its grant, checked
/// to be for this sandbox, as it is now, and for a token that stands.
/// Blocking.
fn check(e: &E2b, id: &str, key: &str) -> Result<(String, String), Refusal> {
    let unknown = || {
        refuse(
            StatusCode::UNAUTHORIZED,
            format!("not an MCP token of sandbox {id}: send `Authorization: Bearer TOKEN` with the token get_mcp_token() answers for it"),
        )
    };
    let (parent, native, uid, native_id) = {
        let grants = e.mcp.lock();
        // A grant is its key for its sandbox: a caller chooses its keys
        // (the SDK a random UUID each), so one key may stand for several
        // of its sandboxes and each is found by both halves. Every key is
        // compared, in constant time, whatever matches first.
        let mut found = None;
        for g in grants.iter() {
            let same: bool = g.key.as_bytes().ct_eq(key.as_bytes()).into();
            if same && g.sandbox == id {
                found = Some(g);
            }
        }
        match found {
            Some(g) => (
                g.parent.clone(),
                g.native.clone(),
                g.uid.clone(),
                g.native_id.clone(),
            ),
            _ => return Err(unknown()),
        }
    };
    let current = e.app.store.get(id).is_ok_and(|sb| sb.uid() == uid);
    // The database's lock is let go before [`forget`] takes it again.
    let standing = {
        let db = e
            .app
            .db()
            .map_err(|err| refuse(err.status, err.problem.message))?;
        match db.token(&parent) {
            Ok(Some(t)) => auth::standing(&db, &e.app.store, t).is_ok(),
            Ok(None) => false,
            Err(err) => return Err(refuse(StatusCode::INTERNAL_SERVER_ERROR, chain(&err))),
        }
    };
    if !current || !standing {
        forget(e, |g| g.native_id == native_id);
        return Err(refuse(
            StatusCode::UNAUTHORIZED,
            format!("the MCP token of sandbox {id} has ended: its sandbox was killed, its timeout ended, or the token it stood for was revoked"),
        ));
    }
    Ok((parent, native))
}

/// Drop the grants `which` picks and revoke the warden tokens behind
/// them. Blocking.
fn forget(e: &E2b, which: impl Fn(&Grant) -> bool) {
    let gone: Vec<Grant> = {
        let mut grants = e.mcp.lock();
        let (gone, kept) = std::mem::take(&mut *grants).into_iter().partition(which);
        *grants = kept;
        gone
    };
    if gone.is_empty() {
        return;
    }
    let mut services = e.mcp.services.lock().unwrap_or_else(|p| p.into_inner());
    let left: std::collections::HashSet<String> =
        e.mcp.lock().iter().map(|g| g.sandbox.clone()).collect();
    services.retain(|sb, _| left.contains(sb));
    drop(services);
    if let Ok(db) = e.app.db() {
        for g in gone {
            let _ = db.revoke_token(&g.native_id);
            e.app.leases.forget(&g.native_id);
        }
    }
}

/// At the door's start: the per-sandbox tokens an earlier daemon minted
/// for MCP are revoked, their MCP tokens having ended with it.
pub fn revoke_leftovers(app: &App) {
    let Ok(db) = app.db() else { return };
    if let Ok(tokens) = db.tokens() {
        for t in tokens.iter().filter(|t| t.name == MINTED && !t.revoked) {
            let _ = db.revoke_token(&t.id);
        }
    }
}

/// Every 30 s, the grants of sandboxes that are gone or of tokens that no
/// longer stand are dropped (a request checks its own grant as it comes).
pub fn sweep(e: Arc<E2b>) {
    let Ok(rt) = tokio::runtime::Handle::try_current() else {
        return;
    };
    rt.spawn(async move {
        loop {
            tokio::time::sleep(std::time::Duration::from_secs(30)).await;
            let e2 = e.clone();
            let _ = tokio::task::spawn_blocking(move || {
                let dead: Vec<String> = {
                    let grants = e2.mcp.lock();
                    grants
                        .iter()
                        .filter(|g| {
                            let current = e2
                                .app
                                .store
                                .get(&g.sandbox)
                                .is_ok_and(|sb| sb.uid() == g.uid);
                            let standing = e2.app.db().ok().is_some_and(|db| {
                                db.token(&g.parent)
                                    .ok()
                                    .flatten()
                                    .is_some_and(|t| auth::standing(&db, &e2.app.store, t).is_ok())
                            });
                            !current || !standing
                        })
                        .map(|g| g.native_id.clone())
                        .collect()
                };
                forget(&e2, |g| dead.contains(&g.native_id));
            })
            .await;
        }
    });
}

/// A request for port [`MCP_PORT`] of sandbox `id`: warden's MCP for that
/// sandbox, with the MCP token in `Authorization: Bearer`.
pub async fn serve(e: Arc<E2b>, req: Request, id: String) -> Response {
    if req.uri().path() != "/mcp" {
        return answer::error(
            StatusCode::NOT_FOUND,
            "warden's MCP for this sandbox is at /mcp (get_mcp_url())",
        );
    }
    let key = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(|v| v.trim().to_string());
    // A refused MCP token is recorded in the daemon's log as any refused
    // credential is.
    let route = auth::Route::refused_at(req.method(), "/e2b/mcp");
    let peer = crate::denials::Peer::of(req.extensions());
    let door = crate::denials::Door::E2bMcp;
    let Some(key) = key.filter(|k| !k.is_empty()) else {
        let why = "no MCP token: send `Authorization: Bearer TOKEN` with the token get_mcp_token() answers";
        e.app.record_unauthenticated(door, peer, &route, why);
        return answer::error(StatusCode::UNAUTHORIZED, why);
    };
    let (e2, sid) = (e.clone(), id.clone());
    let checked = tokio::task::spawn_blocking(move || check(&e2, &sid, &key)).await;
    let (parent, native) = match checked {
        Ok(Ok(c)) => c,
        Ok(Err(r)) => {
            if r.status == StatusCode::UNAUTHORIZED {
                e.app.record_unauthenticated(door, peer, &route, &r.message);
            }
            return answer::error(r.status, r.message);
        }
        Err(err) => return answer::error(StatusCode::INTERNAL_SERVER_ERROR, err.to_string()),
    };
    let service = {
        let mut services = e.mcp.services.lock().unwrap_or_else(|p| p.into_inner());
        services
            .entry(id.clone())
            .or_insert_with(|| crate::mcp::http::one_sandbox(e.app.clone(), id.clone()))
            .clone()
    };
    let (mut parts, body) = req.into_parts();
    // The session acts with the per-sandbox token; the door's own
    // credentials and routing headers go no further.
    for h in [
        "x-access-token",
        "e2b-traffic-access-token",
        "x-api-key",
        "e2b-sandbox-id",
        "e2b-sandbox-port",
    ] {
        parts.headers.remove(h);
    }
    let Ok(bearer) = HeaderValue::from_str(&format!("Bearer {native}")) else {
        return answer::error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "a minted token is not a header value",
        );
    };
    parts.headers.insert(header::AUTHORIZATION, bearer);
    // Never the owner's socket, whatever the request carried.
    parts.extensions.insert(crate::routes::Transport::Tcp);
    // Whom a refusal of the session's checks is recorded under.
    parts
        .extensions
        .insert(crate::mcp::http::RecordedAs(parent.clone()));
    // A message is read whole by the MCP service: bounded as the API's
    // bodies are.
    let body = axum::body::Body::new(http_body_util::Limited::new(body, e.app.limits.body_bytes));
    let req = Request::from_parts(parts, body);
    let response = match service.oneshot(req).await {
        Ok(r) => r,
        Err(never) => match never {},
    };
    // A stream (the session's events) ends with the token it stood for.
    let credential = Credential {
        token: Some(parent),
        session: None,
        envd: None,
    };
    crate::revocation::bound(&e.app, credential, response, None)
}

/// Why create's `mcp` cannot be had: E2B's gateway configuration names
/// MCP servers of its catalogue to run in the sandbox, which warden does
/// not run; `{}` (or none) asks for warden's own MCP for the sandbox.
pub fn config_refused(mcp: Option<&serde_json::Value>) -> Result<(), String> {
    match mcp {
        None | Some(serde_json::Value::Null) => Ok(()),
        Some(serde_json::Value::Object(m)) if m.is_empty() => Ok(()),
        Some(serde_json::Value::Object(m)) => {
            let names: Vec<&str> = m.keys().map(String::as_str).collect();
            Err(format!(
                "mcp.{}: warden does not run the MCP servers of E2B's catalogue in a sandbox; create with mcp={{}} to reach warden's own MCP tools for the sandbox (commands and files) at get_mcp_url(), or run the server yourself with commands.run and reach its port with get_host()",
                names.join(", mcp.")
            ))
        }
        Some(_) => Err("mcp: an object naming MCP servers (warden takes only {})".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_empty_mcp_configuration_is_taken() {
        assert!(config_refused(None).is_ok());
        assert!(config_refused(Some(&serde_json::json!({}))).is_ok());
        let m = config_refused(Some(&serde_json::json!({"github": {"token": "x"}}))).unwrap_err();
        assert!(m.starts_with("mcp.github: "), "{m}");
        assert!(config_refused(Some(&serde_json::json!([1]))).is_err());
    }
}
