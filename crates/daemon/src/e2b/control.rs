//! E2B's control API: create, list, get, kill, set timeout, connect. Each
//! is the native handler of [`crate::routes::sandboxes`] called with the
//! request in warden's terms, and its answer put in E2B's: a template is
//! a profile of that name (E2B's default `base`, when no profile has that
//! name, is warden's default profile), `timeout` is the TTL, `metadata`
//! the labels, `envVars` the profile's `env.set`, the network allowlist
//! the profile's `egress.domains`. An E2B sandbox lives until it is killed
//! or its timeout ends; a warden sandbox whose TTL ended is stopped and
//! kept (its workspace can still be reviewed natively), so through this
//! door only running and paused sandboxes exist. Pause is the native
//! pause (processes frozen in place, memory kept); `connect` and the older
//! `resume` resume a paused sandbox. Snapshots, forks, metrics and logs
//! are answered 501 with what to do instead.

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;

use super::{permit, E2b, ENVD_VERSION};
use crate::api::{CreateSandbox, SandboxInfo, SetTimeout};
use crate::auth::{self, Caller};
use crate::error::ApiError;
use crate::routes::sandboxes;
use crate::routes::Body;

/// E2B's default template.
const DEFAULT_TEMPLATE: &str = "base";
/// The metadata key that keeps a killed sandbox, stopped, for review.
const KEEP: &str = "warden.keep";

/// An error in E2B's shape: `{"code": STATUS, "message": ...}`; the SDK
/// raises AuthenticationException for 401, RateLimitException for 429,
/// NotFoundException (SandboxNotFoundException) for 404.
pub fn error(status: StatusCode, message: impl Into<String>) -> Response {
    (
        status,
        Json(serde_json::json!({"code": status.as_u16(), "message": message.into()})),
    )
        .into_response()
}

fn from_api(e: ApiError) -> Response {
    let status = match e.status.as_u16() {
        422 => StatusCode::BAD_REQUEST,
        _ => e.status,
    };
    error(status, e.problem.message)
}

/// A refusal of the native create in the words of the E2B body it came
/// from: the place the native API names (`/spec/egress/domains/1`, a
/// pointer into a body this client never wrote) becomes the place in
/// E2B's (`network.allowOut[1]`, `envVars.NAME`); the reason is kept as
/// it is.
fn in_e2b_words(mut e: ApiError) -> ApiError {
    let Some(pointer) = e.problem.field.clone() else {
        return e;
    };
    let place = if let Some(rest) = pointer.strip_prefix("/spec/egress/domains") {
        match rest.strip_prefix('/') {
            Some(i) => format!("network.allowOut[{i}]"),
            None => "network.allowOut".to_string(),
        }
    } else if let Some(rest) = pointer.strip_prefix("/spec/env/set") {
        match rest.strip_prefix('/') {
            Some(name) => format!("envVars.{name}"),
            None => "envVars".to_string(),
        }
    } else {
        return e;
    };
    e.problem.message = e.problem.message.replace(&pointer, &place);
    e.problem.field = Some(place);
    e
}

fn denied(why: String) -> Response {
    error(StatusCode::FORBIDDEN, why)
}

pub async fn unknown() -> Response {
    error(
        StatusCode::NOT_FOUND,
        "no such route in warden's E2B-compatible API (docs/e2b.md lists what it answers)",
    )
}

pub async fn not_supported() -> Response {
    error(
        StatusCode::NOT_IMPLEMENTED,
        "not supported by warden's E2B-compatible API: sandboxes are not snapshotted or forked here, and metrics and logs are read natively (GET /v1/sandboxes/{id} and /v1/sandboxes/{id}/events on the daemon's API)",
    )
}

/// `POST /sandboxes` and `/v2/sandboxes` (NewSandbox / NewSandboxV2).
/// Keys not named here are taken and change nothing: `autoResume`,
/// `autoPauseMemory` (nothing is paused), `allow_internet_access` (what a
/// sandbox reaches is its profile's allowlist and `allowOut`, never more).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NewSandbox {
    #[serde(rename = "templateID")]
    template_id: String,
    #[serde(default)]
    timeout: Option<u64>,
    #[serde(default)]
    metadata: Option<BTreeMap<String, String>>,
    #[serde(default)]
    env_vars: Option<BTreeMap<String, String>>,
    #[serde(default)]
    auto_pause: Option<bool>,
    #[serde(default)]
    network: Option<Network>,
    #[serde(default)]
    volume_mounts: Option<serde_json::Value>,
    #[serde(default)]
    mcp: Option<serde_json::Value>,
}

/// E2B's network options.
#[derive(Debug, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct Network {
    #[serde(default)]
    allow_out: Option<Vec<String>>,
    #[serde(default)]
    deny_out: Option<Vec<String>>,
    #[serde(default)]
    rules: Option<serde_json::Value>,
    #[serde(default)]
    egress_proxy: Option<serde_json::Value>,
    #[serde(default)]
    dns_servers: Option<serde_json::Value>,
}

/// The egress allowlist E2B's network options ask for, by name. warden
/// decides by the name a program asks for, never by an address it picked,
/// so an address or a range in `allowOut` is refused with what to give
/// instead; `denyOut` needs no rule (what is not allowed is denied).
fn domains_of(net: &Network) -> Result<Vec<String>, String> {
    if net.rules.is_some() || net.egress_proxy.is_some() || net.dns_servers.is_some() {
        return Err("network.rules, egressProxy and dnsServers are not supported: warden's egress proxy decides by name (allow_out), and secrets are given through a warden profile (the template)".into());
    }
    let mut out = Vec::new();
    for entry in net.allow_out.iter().flatten() {
        let e = entry.trim();
        if e.parse::<std::net::IpAddr>().is_ok() || e.contains('/') {
            return Err(format!(
                "network.allow_out {e:?} is an address or a range: warden allows egress by name (give the host names the sandbox may reach)"
            ));
        }
        out.push(e.to_ascii_lowercase());
    }
    for entry in net.deny_out.iter().flatten() {
        let e = entry.trim();
        if e.is_empty() {
            return Err("network.deny_out holds an empty entry".into());
        }
    }
    Ok(out)
}

/// The native create request for an E2B one.
fn create_request(app: &crate::app::App, body: &NewSandbox) -> Result<CreateSandbox, String> {
    if body.auto_pause == Some(true) {
        return Err("autoPause is not supported: warden does not pause a sandbox when its timeout ends (it stops it); leave it out and pause it yourself".into());
    }
    if body.volume_mounts.as_ref().is_some_and(|v| !v.is_null()) {
        return Err("volumeMounts are not supported: give the sandbox a workspace through a warden profile (the template)".into());
    }
    if body.mcp.as_ref().is_some_and(|v| !v.is_null()) {
        return Err("mcp is not supported through the E2B API".into());
    }
    let profile = match body.template_id.as_str() {
        "" => None,
        DEFAULT_TEMPLATE if app.catalog.profile(DEFAULT_TEMPLATE).is_err() => None,
        // An E2B client names a profile as every caller who is not the
        // owner does: a plain name of the owner's catalogue, never a path.
        t if !warden_policy::trust::is_catalog_name(t) => {
            return Err(format!(
                "template {t:?}: a template is the plain name of a warden profile of the daemon owner's catalogue (see `warden profile list` on the daemon's host), never a path"
            ))
        }
        t => Some(t.to_string()),
    };
    let mut spec = serde_json::Map::new();
    if let Some(envs) = body.env_vars.as_ref().filter(|e| !e.is_empty()) {
        spec.insert("env".into(), serde_json::json!({ "set": envs }));
    }
    let mut domains = Vec::new();
    if let Some(net) = &body.network {
        domains = domains_of(net)?;
    }
    if !domains.is_empty() {
        spec.insert("egress".into(), serde_json::json!({ "domains": domains }));
    }
    let mut labels = body.metadata.clone().unwrap_or_default();
    labels.insert("e2b.template".into(), body.template_id.clone());
    Ok(CreateSandbox {
        name: None,
        profile,
        spec: (!spec.is_empty()).then_some(serde_json::Value::Object(spec)),
        workspace: None,
        ttl_seconds: Some(body.timeout.unwrap_or(300)),
        labels,
        start: Some(true),
    })
}

/// A sandbox as E2B's create and connect answer it.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Created {
    #[serde(rename = "templateID")]
    template_id: String,
    #[serde(rename = "sandboxID")]
    sandbox_id: String,
    #[serde(rename = "clientID")]
    client_id: &'static str,
    envd_version: &'static str,
    envd_access_token: String,
    alias: String,
    domain: Option<String>,
}

/// The sandbox's envd access token for this caller, which the SDK sends
/// on every sandbox call and signs file URLs with. A sandbox the E2B door
/// made has one of its own for each token that creates or connects to it
/// (kept by the daemon, standing for that token's power over that sandbox
/// only: [`super::signing`]); another sandbox answers the caller's own
/// token back, which works the same except for signed URLs.
fn access_token(e: &E2b, caller: &Caller, info: &SandboxInfo, headers: &HeaderMap) -> String {
    if let (Caller::Token(t), true) = (caller, info.labels.contains_key("e2b.template")) {
        // Bound to this sandbox's identity: a key kept for an earlier
        // sandbox of the name is never handed out again.
        let sb = e.app.store.get(&info.id).ok();
        let minted =
            sb.zip(e.app.db().ok())
                .and_then(|(sb, db)| match db.e2b_key(&info.id, &t.id) {
                    Ok(Some(k)) if auth::made_for(&sb, k.uid.as_deref(), k.created_ms) => {
                        Some(k.key)
                    }
                    Ok(_) => {
                        let key = super::signing::new_key();
                        (!key.is_empty())
                            .then(|| db.insert_e2b_key(&info.id, &sb.uid(), &t.id, &key).ok())
                            .flatten()
                    }
                    Err(_) => None,
                });
        if let Some(k) = minted {
            return k;
        }
        tracing::warn!(sandbox = %info.id, "e2b: no envd access token could be kept; answering the caller's token");
    }
    api_key(headers)
}

/// The token the caller came with.
fn api_key(headers: &HeaderMap) -> String {
    headers
        .get("x-api-key")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .trim()
        .to_string()
}

fn template_of(info: &SandboxInfo) -> String {
    info.labels
        .get("e2b.template")
        .cloned()
        .or_else(|| info.profile.clone())
        .unwrap_or_else(|| DEFAULT_TEMPLATE.to_string())
}

fn created(info: &SandboxInfo, key: String) -> Created {
    let t = template_of(info);
    Created {
        template_id: t.clone(),
        sandbox_id: info.id.clone(),
        client_id: "warden",
        envd_version: ENVD_VERSION,
        envd_access_token: key,
        alias: t,
        domain: Some(super::ports::sandbox_domain()),
    }
}

pub async fn create(
    State(e): State<Arc<E2b>>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    if let Err(why) = permit(&e.app, &caller, "POST", "/v1/sandboxes", None) {
        return denied(why);
    }
    let body: NewSandbox = match serde_json::from_slice(&body) {
        Ok(b) => b,
        Err(err) => {
            return error(
                StatusCode::BAD_REQUEST,
                format!("the request body does not fit: {err}"),
            )
        }
    };
    let req = match create_request(&e.app, &body) {
        Ok(r) => r,
        Err(m) => return error(StatusCode::BAD_REQUEST, m),
    };
    match sandboxes::create(State(e.app.clone()), Extension(caller.clone()), Body(req)).await {
        Ok((_, Json(info))) => {
            let key = access_token(&e, &caller, &info, &headers);
            (StatusCode::CREATED, Json(created(&info, key))).into_response()
        }
        Err(err) => from_api(in_e2b_words(err)),
    }
}

/// A sandbox as E2B's get and list answer it.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Detail {
    #[serde(rename = "templateID")]
    template_id: String,
    #[serde(rename = "sandboxID")]
    sandbox_id: String,
    #[serde(rename = "clientID")]
    client_id: &'static str,
    alias: String,
    started_at: String,
    end_at: String,
    envd_version: &'static str,
    cpu_count: u32,
    #[serde(rename = "memoryMB")]
    memory_mb: u64,
    #[serde(rename = "diskSizeMB")]
    disk_size_mb: u64,
    state: String,
    metadata: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    envd_access_token: Option<String>,
}

fn rfc3339(ms: u64) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms);
    humantime::format_rfc3339_millis(t).to_string()
}

fn detail(e: &E2b, info: &SandboxInfo, key: Option<String>) -> Detail {
    let (cpus, memory) = e
        .app
        .store
        .get(&info.id)
        .ok()
        .and_then(|sb| {
            warden_runtime::state::read_json::<warden_runtime::state::Stored>(
                &sb.dir().join(warden_runtime::state::STORED),
            )
            .ok()
        })
        .map(|s| {
            (
                s.spec.resources.cpus.map(|c| c.ceil() as u32).unwrap_or(0),
                s.spec.resources.memory.value,
            )
        })
        .unwrap_or((0, 0));
    let cpus = if cpus == 0 {
        std::thread::available_parallelism()
            .map(|n| n.get() as u32)
            .unwrap_or(1)
    } else {
        cpus
    };
    let mut metadata = info.labels.clone();
    metadata.remove("e2b.template");
    let t = template_of(info);
    Detail {
        template_id: t.clone(),
        sandbox_id: info.id.clone(),
        client_id: "warden",
        alias: t,
        started_at: rfc3339(info.created_ms),
        end_at: rfc3339(info.ttl_deadline_ms.unwrap_or(info.created_ms)),
        envd_version: ENVD_VERSION,
        cpu_count: cpus,
        memory_mb: memory >> 20,
        disk_size_mb: 0,
        state: info.state.clone(),
        metadata,
        envd_access_token: key,
    }
}

/// The running or paused sandbox `id` as the native API shows it; 404
/// when there is none (a stopped one counts as gone).
async fn running(e: &E2b, id: &str) -> Result<SandboxInfo, Response> {
    match sandboxes::get_one(State(e.app.clone()), Path(id.to_string())).await {
        Ok(Json(info)) if info.state == "running" || info.state == "paused" => Ok(info),
        Ok(_) => Err(error(
            StatusCode::NOT_FOUND,
            format!("sandbox {id} is not running (its timeout ended, or it was stopped); it is kept stopped for review: `warden diff {id}`"),
        )),
        Err(err) => Err(from_api(err)),
    }
}

pub async fn get_one(
    State(e): State<Arc<E2b>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    if let Err(why) = permit(&e.app, &caller, "GET", "/v1/sandboxes/{id}", Some(&id)) {
        return denied(why);
    }
    match running(&e, &id).await {
        Ok(info) => {
            let key = access_token(&e, &caller, &info, &headers);
            Json(detail(&e, &info, Some(key))).into_response()
        }
        Err(r) => r,
    }
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListQuery {
    #[serde(default)]
    metadata: Option<String>,
    #[serde(default)]
    state: Option<String>,
    #[serde(default)]
    limit: Option<usize>,
    #[serde(default)]
    order: Option<String>,
    #[serde(default)]
    template: Option<String>,
}

pub async fn list(
    State(e): State<Arc<E2b>>,
    Extension(caller): Extension<Caller>,
    query: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    if let Err(why) = permit(&e.app, &caller, "GET", "/v1/sandboxes", None) {
        return denied(why);
    }
    let Ok(Query(q)) = query else {
        return error(StatusCode::BAD_REQUEST, "the query does not fit");
    };
    // Only running and paused sandboxes exist here (both when no state
    // is asked for).
    let states: Vec<String> = match &q.state {
        Some(s) => s.split(',').map(|s| s.trim().to_string()).collect(),
        None => vec!["running".into(), "paused".into()],
    };
    let wanted: Vec<(String, String)> = q
        .metadata
        .as_deref()
        .map(|m| {
            url_pairs(m)
                .into_iter()
                .filter(|(k, _)| !k.is_empty())
                .collect()
        })
        .unwrap_or_default();
    let native = sandboxes::ListQuery {
        state: None,
        label: None,
    };
    let list = match sandboxes::list(
        State(e.app.clone()),
        Extension(caller.clone()),
        Ok(Query(native)),
    )
    .await
    {
        Ok(Json(l)) => l.sandboxes,
        Err(err) => return from_api(err),
    };
    let mut out: Vec<Detail> = list
        .iter()
        .filter(|s| states.contains(&s.state))
        .filter(|s| wanted.iter().all(|(k, v)| s.labels.get(k) == Some(v)))
        .filter(|s| q.template.as_ref().is_none_or(|t| &template_of(s) == t))
        .map(|s| detail(&e, s, None))
        .collect();
    if q.order.as_deref() == Some("desc") {
        out.reverse();
    }
    if let Some(n) = q.limit {
        out.truncate(n);
    }
    Json(out).into_response()
}

/// `k=v&k2=v2`, percent-decoded (the SDK's metadata filter).
fn url_pairs(s: &str) -> Vec<(String, String)> {
    fn decode(s: &str) -> String {
        let bytes = s.as_bytes();
        let mut out = Vec::with_capacity(bytes.len());
        let mut i = 0;
        while i < bytes.len() {
            match bytes[i] {
                b'+' => out.push(b' '),
                b'%' if i + 2 < bytes.len() => match u8::from_str_radix(&s[i + 1..i + 3], 16) {
                    Ok(b) => {
                        out.push(b);
                        i += 2;
                    }
                    Err(_) => out.push(b'%'),
                },
                b => out.push(b),
            }
            i += 1;
        }
        String::from_utf8_lossy(&out).into_owned()
    }
    s.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (decode(k), decode(v)),
            None => (decode(p), String::new()),
        })
        .collect()
}

pub async fn kill(
    State(e): State<Arc<E2b>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Response {
    if let Err(why) = permit(&e.app, &caller, "DELETE", "/v1/sandboxes/{id}", Some(&id)) {
        return denied(why);
    }
    // `warden.keep: "true"` in the metadata: killed is stopped and kept,
    // its workspace's changes reviewable natively (`warden --host diff`,
    // `commit`); for the E2B API it is gone either way.
    if let Ok(Json(info)) = sandboxes::get_one(State(e.app.clone()), Path(id.clone())).await {
        if info.labels.get(KEEP).map(String::as_str) == Some("true") {
            if info.state != "running" {
                return error(
                    StatusCode::NOT_FOUND,
                    format!("sandbox {id} is not running"),
                );
            }
            let body = axum::body::Bytes::from_static(b"{\"grace_seconds\": 2}");
            return match sandboxes::stop(State(e.app.clone()), Path(id.clone()), body).await {
                Ok(_) => {
                    forget(&e, &id);
                    StatusCode::NO_CONTENT.into_response()
                }
                Err(err) => from_api(err),
            };
        }
    }
    let q: Result<Query<sandboxes::RemoveQuery>, _> =
        Ok(Query(sandboxes::RemoveQuery { force: Some(true) }));
    match sandboxes::remove(State(e.app.clone()), Path(id.clone()), q).await {
        Ok(_) => {
            forget(&e, &id);
            StatusCode::NO_CONTENT.into_response()
        }
        Err(err) => from_api(err),
    }
}

/// Forget a killed sandbox's envd access tokens (a kept one's too: its
/// signed URLs end with the kill), processes and watchers (a watcher's native
/// watch, and its place among the daemon's watches, go with it).
fn forget(e: &E2b, id: &str) {
    if let Ok(db) = e.app.db() {
        let _ = db.remove_e2b_keys(id);
    }
    if let Ok(mut p) = e.procs.lock() {
        p.remove(id);
    }
    if let Ok(mut w) = e.watchers.lock() {
        w.retain(|_, w| w.sandbox() != id);
    }
}

#[derive(Debug, Deserialize)]
pub struct TimeoutBody {
    timeout: u64,
}

async fn set_ttl(e: &E2b, id: &str, seconds: u64) -> Result<(), Response> {
    running(e, id).await?;
    let body = SetTimeout {
        ttl_seconds: Some(seconds),
    };
    match sandboxes::set_timeout(State(e.app.clone()), Path(id.to_string()), Body(body)).await {
        Ok(_) => Ok(()),
        Err(err) if err.status == StatusCode::CONFLICT => Err(error(
            StatusCode::NOT_FOUND,
            format!("sandbox {id} is not running"),
        )),
        Err(err) => Err(from_api(err)),
    }
}

pub async fn set_timeout(
    State(e): State<Arc<E2b>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    body: axum::body::Bytes,
) -> Response {
    if let Err(why) = permit(
        &e.app,
        &caller,
        "POST",
        "/v1/sandboxes/{id}/timeout",
        Some(&id),
    ) {
        return denied(why);
    }
    let body: TimeoutBody = match serde_json::from_slice(&body) {
        Ok(b) => b,
        Err(err) => {
            return error(
                StatusCode::BAD_REQUEST,
                format!("the request body does not fit: {err}"),
            )
        }
    };
    match set_ttl(&e, &id, body.timeout).await {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(r) => r,
    }
}

#[derive(Debug, Deserialize, Default)]
pub struct ConnectBody {
    #[serde(default)]
    timeout: Option<u64>,
}

pub async fn connect(
    State(e): State<Arc<E2b>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    if let Err(why) = permit(&e.app, &caller, "GET", "/v1/sandboxes/{id}", Some(&id)) {
        return denied(why);
    }
    let body: ConnectBody = if body.iter().all(u8::is_ascii_whitespace) {
        ConnectBody::default()
    } else {
        match serde_json::from_slice(&body) {
            Ok(b) => b,
            Err(err) => {
                return error(
                    StatusCode::BAD_REQUEST,
                    format!("the request body does not fit: {err}"),
                )
            }
        }
    };
    let mut info = match running(&e, &id).await {
        Ok(i) => i,
        Err(r) => return r,
    };
    // Connecting to a paused sandbox resumes it (E2B answers 201 then).
    let resumed = info.state == "paused";
    if resumed {
        info = match resume_for(&e, &caller, &id).await {
            Ok(i) => i,
            Err(r) => return r,
        };
    }
    if let Some(t) = body.timeout {
        if let Err(why) = permit(
            &e.app,
            &caller,
            "POST",
            "/v1/sandboxes/{id}/timeout",
            Some(&id),
        ) {
            return denied(why);
        }
        if let Err(r) = set_ttl(&e, &id, t).await {
            return r;
        }
    }
    let key = access_token(&e, &caller, &info, &headers);
    let status = if resumed {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    (status, Json(created(&info, key))).into_response()
}

/// `POST /sandboxes/{id}/pause` (`memory` and `requireHealthyGuest`, both
/// optional).
#[derive(Debug, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct PauseBody {
    #[serde(default)]
    memory: Option<bool>,
    #[serde(default)]
    #[allow(dead_code)]
    require_healthy_guest: Option<bool>,
}

/// Read an optional JSON body of E2B's; an error is the message of a 400.
fn optional_body<T: for<'de> Deserialize<'de> + Default>(body: &[u8]) -> Result<T, String> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    serde_json::from_slice(body).map_err(|err| format!("the request body does not fit: {err}"))
}

/// The native pause: 204; 409 when it is paused already (the SDK's
/// `pause()` answers `False` then); 404 when it does not run.
pub async fn pause(
    State(e): State<Arc<E2b>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    body: axum::body::Bytes,
) -> Response {
    if let Err(why) = permit(
        &e.app,
        &caller,
        "POST",
        "/v1/sandboxes/{id}/pause",
        Some(&id),
    ) {
        return denied(why);
    }
    let body: PauseBody = match optional_body(&body) {
        Ok(b) => b,
        Err(why) => return error(StatusCode::BAD_REQUEST, why),
    };
    if body.memory == Some(false) {
        return error(
            StatusCode::BAD_REQUEST,
            "a filesystem-only pause (`memory: false`) is not offered: warden pauses a sandbox with its memory (its processes frozen in place); kill it with `warden.keep` in its metadata to keep only its files",
        );
    }
    let info = match running(&e, &id).await {
        Ok(i) => i,
        Err(r) => return r,
    };
    if info.state == "paused" {
        return error(
            StatusCode::CONFLICT,
            format!("sandbox {id} is paused already"),
        );
    }
    match crate::routes::pause::pause(State(e.app.clone()), Extension(caller), Path(id)).await {
        Ok(_) => StatusCode::NO_CONTENT.into_response(),
        Err(err) => from_api(err),
    }
}

/// Resume a paused sandbox for `caller` (the native route's scope).
async fn resume_for(e: &E2b, caller: &Caller, id: &str) -> Result<SandboxInfo, Response> {
    if let Err(why) = permit(
        &e.app,
        caller,
        "POST",
        "/v1/sandboxes/{id}/resume",
        Some(id),
    ) {
        return Err(denied(why));
    }
    crate::routes::pause::resume(
        State(e.app.clone()),
        Extension(caller.clone()),
        Path(id.to_string()),
    )
    .await
    .map(|Json(i)| i)
    .map_err(from_api)
}

/// `POST /sandboxes/{id}/resume` (`timeout`, `autoPause`), E2B's older
/// way to resume: 201 with the sandbox; 409 when it is not paused.
#[derive(Debug, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct ResumeBody {
    #[serde(default)]
    timeout: Option<u64>,
    #[serde(default)]
    auto_pause: Option<bool>,
}

pub async fn resume(
    State(e): State<Arc<E2b>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let body: ResumeBody = match optional_body(&body) {
        Ok(b) => b,
        Err(why) => return error(StatusCode::BAD_REQUEST, why),
    };
    if body.auto_pause == Some(true) {
        return error(
            StatusCode::BAD_REQUEST,
            "autoPause is not supported: a sandbox stops when its timeout ends; pause it yourself",
        );
    }
    let info = match running(&e, &id).await {
        Ok(i) if i.state == "paused" => i,
        Ok(_) => return error(StatusCode::CONFLICT, format!("sandbox {id} is not paused")),
        Err(r) => return r,
    };
    let mut info = match resume_for(&e, &caller, &info.id).await {
        Ok(i) => i,
        Err(r) => return r,
    };
    if let Some(t) = body.timeout {
        if let Err(r) = set_ttl(&e, &id, t).await {
            return r;
        }
        if let Ok(Json(i)) = sandboxes::get_one(State(e.app.clone()), Path(id.clone())).await {
            info = i;
        }
    }
    let key = access_token(&e, &caller, &info, &headers);
    (StatusCode::CREATED, Json(created(&info, key))).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_allowlist_is_taken_by_name_and_an_address_is_refused_with_what_to_give() {
        let net = Network {
            allow_out: Some(vec!["API.example.com".into()]),
            deny_out: Some(vec!["0.0.0.0/0".into()]),
            ..Default::default()
        };
        assert_eq!(domains_of(&net).unwrap(), vec!["api.example.com"]);
        let net = Network {
            allow_out: Some(vec!["1.1.1.1".into()]),
            ..Default::default()
        };
        assert!(domains_of(&net).unwrap_err().contains("by name"));
        let net = Network {
            allow_out: Some(vec!["8.8.8.0/24".into()]),
            ..Default::default()
        };
        assert!(domains_of(&net).is_err());
    }

    #[test]
    fn the_metadata_filter_is_read_as_the_sdk_encodes_it() {
        assert_eq!(
            url_pairs("a=b%20c&k=v"),
            vec![("a".into(), "b c".into()), ("k".into(), "v".into())]
        );
    }
}
