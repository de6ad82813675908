//! E2B's control API: create, list, get, kill, set timeout and refresh.
//! Each is the native handler of [`crate::routes::sandboxes`] called with
//! the request in warden's terms, and its answer put in E2B's: a template
//! is a profile of that name (E2B's default `base`, when no profile has
//! that name, is warden's default profile) or one of the caller's
//! snapshots ([`super::copies`]), `timeout` is the TTL, `metadata` the
//! labels, `envVars` the profile's `env.set`, the network allowlist the
//! profile's `egress.domains` ([`super::network`]), `lifecycle` what the
//! timeout does ([`super::lifecycle`]). An E2B sandbox lives until it is
//! killed or its timeout ends; a warden sandbox whose TTL ended is
//! stopped and kept (its workspace can still be reviewed natively), so
//! through this door only running and paused sandboxes exist. Pause,
//! connect and resume are in [`super::lifecycle`], snapshots and forks in
//! [`super::copies`], metrics and logs in [`super::metrics`] and
//! [`super::logs`].

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;

use super::answer::{access_token, error, refusal, template_of};
use super::record::{end_ms, ttl_for, Seen, ON_TIMEOUT, PAUSED};
use super::{permit, E2b, ENVD_VERSION};
use crate::api::{SandboxInfo, SetTimeout};
use crate::app::App;
use crate::auth::Caller;
use crate::body::Body;
use crate::error::{spec_pointer, ApiError};
use crate::routes::sandboxes;
use warden_policy::Field;

/// The metadata key that keeps a killed sandbox, stopped, for review.
const KEEP: &str = "warden.keep";

/// The native problem's codes that only restate their status (a 404 is
/// `not_found`, a 422 `refused`): the message does not repeat them.
const STATUS_WORDS: &[&str] = &[
    "bad_request",
    "not_found",
    "conflict",
    "internal",
    "refused",
];

/// A native refusal as E2B answers one. The status class is the native
/// one, which the SDK turns into its exceptions (429 `quota` and
/// `too_many_sessions`: `RateLimitException`; 507 `no_disk`, 409
/// `workspace_moved`, 403: `SandboxException` with that status), but for
/// a refusal of what the request holds (422: a spec, a copy refused for
/// the tree's hard links, `too_many_links`, or its growth,
/// `copy_past_size`), which E2B calls bad input, 400. The reason code
/// (the problem's `reason`, else its own code) is kept in E2B's
/// `error_code`, and the codes are named in the message, whose text is
/// all the SDK keeps: without them a copy refused for the sandbox's hard
/// links read as any other 400, a full supervisor as a quota. A
/// `Retry-After` is kept.
pub(super) fn from_api(e: ApiError) -> Response {
    let status = match e.status.as_u16() {
        422 => StatusCode::BAD_REQUEST,
        _ => e.status,
    };
    let problem = *e.problem;
    let message = naming_codes(&problem);
    let code = problem.reason.as_deref().unwrap_or(&problem.code);
    let mut r = refusal(status, code, message);
    if let Some(secs) = e.retry_after {
        r.headers_mut()
            .insert(axum::http::header::RETRY_AFTER, secs.into());
    }
    r
}

/// A native problem's message as the door passes it on, naming its codes
/// (`... (reason: too_many_watches)`) where the message does not already
/// say them and they say more than the status: the SDK keeps only the
/// text of an error, of a REST call as of an envd one.
pub(super) fn naming_codes(problem: &crate::error::Problem) -> String {
    let mut named: Vec<&str> = Vec::new();
    for c in [Some(problem.code.as_str()), problem.reason.as_deref()]
        .into_iter()
        .flatten()
    {
        if !STATUS_WORDS.contains(&c) && !problem.message.contains(c) && !named.contains(&c) {
            named.push(c);
        }
    }
    match named.as_slice() {
        [] => problem.message.clone(),
        codes => format!("{} (reason: {})", problem.message, codes.join(", ")),
    }
}

/// A refusal of the native create in the words of the E2B body it came
/// from: the place the native API names (`/spec/egress/domains/1`, a
/// pointer into a body this client never wrote) becomes the place in
/// E2B's (`network.allowOut[1]`, `envVars.NAME`); the reason is kept as
/// it is.
pub(super) fn in_e2b_words(mut e: ApiError) -> ApiError {
    let Some(pointer) = e.problem.field.clone() else {
        return e;
    };
    // The places of the native body, from the field table (and the live
    // egress change's `/allow`), that E2B's create writes.
    let domains = spec_pointer(Field::AllowDomain).unwrap_or_default();
    let env = spec_pointer(Field::Env).unwrap_or_default();
    let allow = pointer
        .strip_prefix(domains.as_str())
        .or_else(|| pointer.strip_prefix("/allow"));
    let place = if let Some(rest) = allow {
        match rest.strip_prefix('/') {
            Some(i) => format!("network.allowOut[{i}]"),
            None => "network.allowOut".to_string(),
        }
    } else if let Some(rest) = pointer.strip_prefix(env.as_str()) {
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

pub async fn unknown() -> Response {
    error(
        StatusCode::NOT_FOUND,
        "no such route in warden's E2B-compatible API (docs/e2b.md lists what it answers)",
    )
}

/// What has no meaning on a self-hosted machine, or no counterpart in
/// warden yet: 501 with what to do instead (docs/e2b.md lists each).
pub async fn not_supported() -> Response {
    error(
        StatusCode::NOT_IMPLEMENTED,
        "not supported by warden's E2B-compatible API: templates are the daemon owner's profiles (`warden profile list` on its host), and the metrics of many sandboxes at once are read one by one (get_metrics) or natively (GET /v1/sandboxes)",
    )
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

/// What a sandbox may use, as the door tells it (`get_info`'s
/// `cpuCount` and `memoryMB`, `get_metrics`' totals): its own limits,
/// never a fact of the host (its cores, its memory), which are the
/// owner's to know and not what the sandbox has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Limits {
    /// Its CPU quota in whole cores (rounded up); 0: it has no quota of
    /// its own (warden sets none by default).
    pub cpus: u32,
    /// Its memory limit: the one it was made with, the daemon's default
    /// when it was given none.
    pub memory: u64,
    /// The most it may write (`resources.disk`); 0: none of its own.
    pub disk: u64,
}

/// Sandbox `id`'s limits, from the spec it runs under (the one its
/// cgroup is given at each start), and its identity; an error says why
/// they cannot be told (a missing or unreadable spec), rather than
/// inventing any.
pub(super) fn limits(app: &App, id: &str) -> Result<(Limits, String), String> {
    let sb = app
        .store
        .get(id)
        .map_err(|e| format!("sandbox {id} cannot be read: {e}"))?;
    let stored: warden_runtime::state::Stored = warden_runtime::state::read_json(
        &sb.dir().join(warden_runtime::state::STORED),
    )
    .map_err(|_| format!("sandbox {id}'s spec cannot be read, so its limits cannot be told"))?;
    let r = &stored.spec.resources;
    let memory = match r.memory.value {
        0 => app.defaults.memory,
        m => m,
    };
    let limits = Limits {
        cpus: r.cpus.map_or(0, |c| c.ceil() as u32),
        memory,
        disk: stored.spec.filesystem.disk.map_or(0, |d| d.bytes),
    };
    Ok((limits, sb.uid()))
}

/// Sandbox `info` as E2B describes it; an error says why its limits
/// cannot be told.
fn detail(e: &E2b, info: &SandboxInfo, key: Option<String>) -> Result<Detail, String> {
    let (own, _) = limits(&e.app, &info.id)?;
    // The door's own record (`e2b.` keys) is not the client's metadata.
    let metadata = info
        .labels
        .iter()
        .filter(|(k, _)| !k.starts_with("e2b."))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let t = template_of(info);
    Ok(Detail {
        template_id: t.clone(),
        sandbox_id: info.id.clone(),
        client_id: "warden",
        alias: t,
        started_at: rfc3339(info.created_ms),
        end_at: rfc3339(end_ms(info).unwrap_or(info.created_ms)),
        envd_version: ENVD_VERSION,
        cpu_count: own.cpus,
        memory_mb: own.memory >> 20,
        disk_size_mb: own.disk >> 20,
        state: Seen::of(info).name().to_string(),
        metadata,
        envd_access_token: key,
    })
}

/// Sandbox `id` as the native API shows it, when it is running or paused
/// for E2B ([`Seen`]); 404 when it is gone (a stopped one not paused is),
/// in the words of [`super::permit`] when there is no such sandbox at
/// all.
pub(super) async fn running(e: &E2b, id: &str) -> Result<SandboxInfo, Response> {
    match sandboxes::get_one(State(e.app.clone()), Path(id.to_string())).await {
        Ok(Json(info)) if Seen::of(&info) != Seen::Gone => Ok(info),
        Ok(_) => Err(from_api(ApiError::new(
            StatusCode::NOT_FOUND,
            crate::error::NOT_RUNNING,
            format!("sandbox {id} is not running (its timeout ended, or it was stopped); it is kept stopped for review: `warden diff {id}`"),
        ))),
        Err(err) if err.status == StatusCode::NOT_FOUND => Err(super::permit::no_such_sandbox(id)),
        Err(err) => Err(from_api(err)),
    }
}

pub async fn get_one(
    State(e): State<Arc<E2b>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Response {
    if let Err(d) = permit(&e.app, &caller, "GET", "/v1/sandboxes/{id}", Some(&id)) {
        return d.response();
    }
    match running(&e, &id).await {
        Ok(info) => {
            let key = match access_token(&e, &caller, &info) {
                Ok(k) => k,
                Err(r) => return *r,
            };
            match detail(&e, &info, Some(key)) {
                Ok(d) => Json(d).into_response(),
                Err(why) => error(StatusCode::INTERNAL_SERVER_ERROR, why),
            }
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
    if let Err(d) = permit(&e.app, &caller, "GET", "/v1/sandboxes", None) {
        return d.response();
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
    let shown = list
        .iter()
        .filter(|s| states.iter().any(|w| w == Seen::of(s).name()))
        .filter(|s| wanted.iter().all(|(k, v)| s.labels.get(k) == Some(v)))
        .filter(|s| q.template.as_ref().is_none_or(|t| &template_of(s) == t))
        .map(|s| detail(&e, s, None))
        .collect::<Result<Vec<Detail>, String>>();
    let mut out = match shown {
        Ok(o) => o,
        Err(why) => return error(StatusCode::INTERNAL_SERVER_ERROR, why),
    };
    if q.order.as_deref() == Some("desc") {
        out.reverse();
    }
    if let Some(n) = q.limit {
        out.truncate(n);
    }
    Json(out).into_response()
}

/// `k=v&k2=v2`, percent-decoded as a form is (the SDK's metadata
/// filter).
fn url_pairs(s: &str) -> Vec<(String, String)> {
    form_urlencoded::parse(s.as_bytes())
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect()
}

pub async fn kill(
    State(e): State<Arc<E2b>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Response {
    if let Err(d) = permit(&e.app, &caller, "DELETE", "/v1/sandboxes/{id}", Some(&id)) {
        return d.response();
    }
    // `warden.keep: "true"` in the metadata: killed is stopped and kept,
    // its workspace's changes reviewable natively (`warden --host diff`,
    // `commit`); for the E2B API it is gone either way.
    if let Ok(Json(info)) = sandboxes::get_one(State(e.app.clone()), Path(id.clone())).await {
        if info.labels.get(KEEP).map(String::as_str) == Some("true") {
            return match keep(&e, &caller, &info).await {
                Ok(()) => {
                    forget(&e, &id);
                    StatusCode::NO_CONTENT.into_response()
                }
                Err(r) => r,
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

/// Whether `id` has no supervisor running (one paused to its disk whose
/// supervisor ended).
async fn supervisor_gone(app: &Arc<App>, id: &str) -> bool {
    let (app, id) = (app.clone(), id.to_string());
    sandboxes::blocking(move || {
        let sb = app.sandbox(&id)?;
        Ok(!warden_runtime::lifecycle::liveness(&sb).running())
    })
    .await
    .unwrap_or(false)
}

/// Kill a sandbox kept by its metadata: stopped (a paused one resumed
/// first, so that its processes can end), and no longer paused for E2B.
async fn keep(e: &E2b, caller: &Caller, info: &SandboxInfo) -> Result<(), Response> {
    let id = info.id.clone();
    let seen = Seen::of(info);
    if seen == Seen::Gone {
        return Err(super::permit::no_such_sandbox(&id));
    }
    set_labels(&e.app, &id, |l| {
        l.remove(PAUSED);
        l.remove(ON_TIMEOUT);
    })
    .await?;
    // Paused to its disk by a supervisor that is gone: stopped and kept
    // already. Resuming it only to stop it would be a new run, held to
    // the token's quotas: a token over its quota could never kill it.
    if seen == Seen::Paused && supervisor_gone(&e.app, &id).await {
        return Ok(());
    }
    if seen == Seen::Paused {
        let _resumed = crate::routes::pause::resume(
            State(e.app.clone()),
            Extension(caller.clone()),
            Path(id.clone()),
        )
        .await
        .map_err(from_api)?;
    }
    if seen == Seen::PausedToFiles {
        return Ok(());
    }
    let body = axum::body::Bytes::from_static(b"{\"grace_seconds\": 2}");
    sandboxes::stop(State(e.app.clone()), Path(id), body)
        .await
        .map(|_| ())
        .map_err(from_api)
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

/// Read an optional JSON body of E2B's; an error is the message of a 400.
pub(super) fn optional_body<T: for<'de> Deserialize<'de> + Default>(
    body: &[u8],
) -> Result<T, String> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    serde_json::from_slice(body).map_err(|err| format!("the request body does not fit: {err}"))
}

/// The body of a `POST` to `route` on sandbox `id`, once the caller is
/// let in: another caller's sandbox answered as a missing one, a body that
/// does not fit 400.
pub(super) fn permitted_body<T: for<'de> Deserialize<'de> + Default>(
    e: &E2b,
    caller: &Caller,
    route: &str,
    id: &str,
    body: &[u8],
) -> Result<T, Box<Response>> {
    permitted_body_as(e, caller, "POST", route, id, body)
}

/// As [`permitted_body`], for a call the native API holds as `method`
/// on `route` (connect and resume are the caller's `GET` of the sandbox).
pub(super) fn permitted_body_as<T: for<'de> Deserialize<'de> + Default>(
    e: &E2b,
    caller: &Caller,
    method: &str,
    route: &str,
    id: &str,
    body: &[u8],
) -> Result<T, Box<Response>> {
    permit(&e.app, caller, method, route, Some(id)).map_err(|d| Box::new(d.response()))?;
    optional_body(body).map_err(|why| {
        Box::new(from_api(ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_body",
            why,
        )))
    })
}

/// Give sandbox `id` the E2B timeout `seconds` from now (its TTL, with
/// [`GRACE`] more when its timeout ends in a pause).
pub(super) async fn set_ttl(e: &E2b, id: &str, seconds: u64) -> Result<(), Response> {
    let info = running(e, id).await?;
    let body = SetTimeout {
        ttl_seconds: Some(ttl_for(&info.labels, seconds)),
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
    if let Err(d) = permit(
        &e.app,
        &caller,
        "POST",
        "/v1/sandboxes/{id}/timeout",
        Some(&id),
    ) {
        return d.response();
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

/// `POST /sandboxes/{id}/refreshes` (`duration`, optional): keep the
/// sandbox alive `duration` seconds from now (E2B's default 60 when none
/// is given), as set_timeout does.
#[derive(Debug, Deserialize, Default)]
pub struct RefreshBody {
    #[serde(default)]
    duration: Option<u64>,
}

pub async fn refresh(
    State(e): State<Arc<E2b>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    body: axum::body::Bytes,
) -> Response {
    let body: RefreshBody =
        match permitted_body(&e, &caller, "/v1/sandboxes/{id}/timeout", &id, &body) {
            Ok(b) => b,
            Err(r) => return *r,
        };
    match set_ttl(&e, &id, body.duration.unwrap_or(60)).await {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(r) => r,
    }
}

/// Change the labels of sandbox `id`'s record.
pub async fn set_labels(
    app: &Arc<App>,
    id: &str,
    change: impl FnOnce(&mut BTreeMap<String, String>) + Send + 'static,
) -> Result<(), Response> {
    let app = app.clone();
    let id = id.to_string();
    sandboxes::blocking(move || {
        // Only the record of the sandbox that has the name now.
        let Ok(sb) = app.store.get(&id) else {
            return Ok(());
        };
        let db = app.db()?;
        let Some(mut row) = db
            .record_of(&sb)
            .map_err(|e| ApiError::internal(crate::error::chain(&e)))?
        else {
            return Ok(());
        };
        change(&mut row.labels);
        db.insert_sandbox(&row)
            .map_err(|e| ApiError::internal(crate::error::chain(&e)))
    })
    .await
    .map_err(from_api)
}

#[cfg(test)]
mod tests {
    use super::super::network::{domains_of, Network};
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

    /// The status and E2B body `from_api` answers for `e`.
    async fn answered(e: ApiError) -> (StatusCode, serde_json::Value, Option<String>) {
        let r = from_api(e);
        let status = r.status();
        let after = r
            .headers()
            .get(axum::http::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let bytes = axum::body::to_bytes(r.into_body(), 1 << 20).await.unwrap();
        (status, serde_json::from_slice(&bytes).unwrap(), after)
    }

    #[tokio::test]
    async fn a_native_refusal_keeps_its_status_class_and_names_its_reason_code() {
        let quota = crate::error::ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "quota",
            "token t may have 1 sandbox",
        );
        let links = crate::error::ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "refused",
            "the tree holds more hard-linked files than a copy keeps as links",
        )
        .with_reason(Some("too_many_links"));
        let disk = crate::error::ApiError::new(
            StatusCode::INSUFFICIENT_STORAGE,
            "no_disk",
            "the daemon's host has no room left",
        );
        let moved = crate::error::ApiError::new(
            StatusCode::CONFLICT,
            "workspace_moved",
            "sandbox s is not started",
        )
        .with_reason(Some("workspace_moved"));
        for (e, status, code) in [
            (quota, 429, "quota"),
            (links, 400, "too_many_links"),
            (disk, 507, "no_disk"),
            (moved, 409, "workspace_moved"),
        ] {
            let (got, body, _) = answered(e).await;
            assert_eq!(got.as_u16(), status, "{body}");
            assert_eq!(body["code"], status, "{body}");
            assert_eq!(body["error_code"], code, "{body}");
            let message = body["message"].as_str().unwrap();
            assert!(message.contains(code), "{message}");
        }
        // A busy supervisor's refusal says when to ask again.
        let (status, body, after) =
            answered(ApiError::busy("sandbox s serves every connection it may")).await;
        assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(body["error_code"], "busy", "{body}");
        let message = body["message"].as_str().unwrap();
        assert!(
            message.ends_with("(reason: too_many_sessions, busy)"),
            "{message}"
        );
        assert_eq!(after.as_deref(), Some("1"));
        // A code that only restates the status is not repeated.
        let (_, body, _) = answered(ApiError::not_found("no sandbox \"x\"")).await;
        assert_eq!(body["message"], "no sandbox \"x\"");
        assert_eq!(body["error_code"], "not_found");
    }

    #[test]
    fn the_metadata_filter_is_read_as_the_sdk_encodes_it() {
        assert_eq!(
            url_pairs("a=b%20c&k=v+w&%E2%9C%93=%zz"),
            vec![
                ("a".into(), "b c".into()),
                ("k".into(), "v w".into()),
                ("\u{2713}".into(), "%zz".into())
            ]
        );
    }
}
