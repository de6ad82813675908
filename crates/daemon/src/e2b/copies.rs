//! E2B's snapshots and forks onto warden's (`docs/snapshots.md`):
//! `create_snapshot` is the native snapshot (its workspace layer, home and
//! options; the source keeps running), `list_snapshots` the native list
//! (a token sees only its own), `delete_snapshot` (E2B deletes a snapshot
//! as the template it is) the native delete, and a create whose template
//! names one of the caller's snapshots the native create from it; `fork`
//! is the native fork. A snapshot's E2B id is its warden name.
//!
//! What a copy carries is the backend's to say: a VM sandbox that can be
//! paused to disk is saved with its memory, the process backend's
//! processes never are (that needs CRIU). E2B's `mode` is held to it,
//! never answered with less than it asked: `mode="full"` of a sandbox
//! whose memory cannot be kept is refused (400, with why and what to ask
//! instead; nothing is kept), and `mode="filesystem"` of a VM whose
//! snapshot would keep its memory too is refused rather than keep the
//! guest's memory (its secrets included) that the caller asked to drop.
//! Without a mode, the snapshot keeps what the backend can. E2B's fork
//! always carries memory; warden's says in each fork's log (E2B's `logs`)
//! whether it did and why not.

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

use super::answer::error;
use super::control::{self, from_api, permitted_body, set_labels};
use super::record::{Seen, ALLOW_OUT, PAUSED};
use super::{permit, E2b};
use crate::api::SandboxInfo;
use crate::auth::Caller;
use crate::body::Body;
use crate::routes::copies::{self as native, FromSnapshot, NewSnapshot};

/// The most sandboxes one fork makes (E2B's SDK allows up to 20; warden's
/// native fork 16).
const MAX_FORK: usize = 16;
/// E2B's time to live of a fork when the request names none.
const FORK_TIMEOUT: u64 = 15;

/// A snapshot as E2B answers it.
#[derive(Serialize)]
struct SnapshotInfo {
    #[serde(rename = "snapshotID")]
    snapshot_id: String,
    names: Vec<String>,
}

fn shown(name: String) -> SnapshotInfo {
    SnapshotInfo {
        snapshot_id: name.clone(),
        names: vec![name],
    }
}

/// `POST /sandboxes/{id}/snapshots` (`name`, `memory`, both optional).
#[derive(Debug, Deserialize, Default)]
pub struct SnapshotBody {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    memory: Option<bool>,
}

pub async fn create_snapshot(
    State(e): State<Arc<E2b>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    body: axum::body::Bytes,
) -> Response {
    let body: SnapshotBody =
        match permitted_body(&e, &caller, "/v1/sandboxes/{id}/snapshots", &id, &body) {
            Ok(b) => b,
            Err(r) => return *r,
        };
    if let Err(r) = control::running(&e, &id).await {
        return r;
    }
    if body.memory == Some(true) {
        if let Some(why) = no_memory_kept(&e, &id).await {
            return full_refused(&id, &why);
        }
    }
    let name = match body.name {
        Some(n) => n,
        None => format!("{id}-{}", crate::auth::random_id(4)),
    };
    // A snapshot is named as a template is when a sandbox is made from
    // it: a name the owner's catalogue gives a profile would be two things.
    if e.app.catalog.profile(&name).is_ok() || name == super::answer::DEFAULT_TEMPLATE {
        return error(
            StatusCode::BAD_REQUEST,
            format!("snapshot name {name:?} is the name of a template (a profile of the daemon's owner); give the snapshot another name"),
        );
    }
    let made = native::create(
        State(e.app.clone()),
        Extension(caller.clone()),
        Path(id.clone()),
        Body(NewSnapshot { name }),
    )
    .await;
    let made = match made {
        Ok((_, Json(s))) => s,
        Err(err) => return from_api(err),
    };
    // Held to the mode asked: a snapshot with less, or more, than it
    // asked is not kept.
    let unfit = match body.memory {
        Some(true) if !made.memory => Some(full_refused(
            &id,
            "the VM could not be paused to disk (a VM without a root image, --rootfs, or a process holding one of its shares)",
        )),
        Some(false) if made.memory => Some(error(
            StatusCode::BAD_REQUEST,
            format!("a files-only snapshot (mode=\"filesystem\") of sandbox {id} is not taken here: warden's snapshot of a VM sandbox that can be paused to disk keeps its memory (its processes go on in a sandbox made from it); leave mode out, or ask mode=\"full\", to take it with its memory"),
        )),
        _ => None,
    };
    if let Some(r) = unfit {
        let _ = native::delete(
            State(e.app.clone()),
            Extension(caller),
            Path(made.name.clone()),
        )
        .await;
        return r;
    }
    if let Err(r) = keep_record(&e, &caller, &id, &made.name).await {
        // A snapshot without the door's record would give back less than
        // its source on an update: none rather than a lesser one.
        let _ = native::delete(
            State(e.app.clone()),
            Extension(caller),
            Path(made.name.clone()),
        )
        .await;
        return r;
    }
    (StatusCode::CREATED, Json(shown(made.name))).into_response()
}

/// Why a snapshot of sandbox `id` cannot keep its memory, when its
/// backend says so before anything is copied (a process or gVisor
/// sandbox); `None` for a VM, which is found out by the copy.
async fn no_memory_kept(e: &E2b, id: &str) -> Option<String> {
    let (app, id) = (e.app.clone(), id.to_string());
    let backend = crate::routes::sandboxes::blocking(move || {
        let sb = app.sandbox(&id)?;
        Ok(warden_runtime::state::stored_spec(sb.dir())
            .map(|spec| warden_runtime::backend::Backend::of(&spec)))
    })
    .await;
    match backend {
        Ok(Some(warden_runtime::backend::Backend::Vm)) => None,
        _ => Some(
            "its processes run in the process backend, whose memory no copy carries (saving processes needs CRIU, which does not work on this kernel)".to_string(),
        ),
    }
}

/// The refusal of a snapshot with memory (`mode="full"`) of sandbox `id`,
/// which cannot keep it for `why`.
fn full_refused(id: &str, why: &str) -> Response {
    error(
        StatusCode::BAD_REQUEST,
        format!("a snapshot with memory (mode=\"full\") of sandbox {id} is not taken: {why}; ask for mode=\"filesystem\" (or leave mode out) to keep its files, home and options, and pause() the sandbox to keep its processes"),
    )
}

/// What the door keeps of a sandbox in a snapshot of it, beside the
/// snapshot's own files (`e2b.json` in its directory, so it goes with the
/// snapshot and no later snapshot of that name finds it): the
/// template's names the door took away (the `e2b.denied` label), which
/// the snapshot's spec no longer holds, so that an update of a sandbox
/// made from it gives them back as it would to the source.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Record {
    #[serde(default)]
    denied: Vec<String>,
    /// The template's names the snapshot's spec may lack (see
    /// `network::TEMPLATE`).
    #[serde(default)]
    template: Vec<String>,
}

/// The file of the door's record of snapshot `name` of `caller`'s.
fn record_path(e: &E2b, caller: &Caller, name: &str) -> Result<std::path::PathBuf, String> {
    use warden_runtime::lifecycle::{snapshots, Owner};
    let owner = match caller.token_id() {
        Some(t) => Owner::Token(t),
        None => Owner::Machine,
    };
    let info = snapshots(&e.app.store, owner)
        .map_err(|err| err.to_string())?
        .into_iter()
        .find(|s| s.name == name)
        .ok_or_else(|| format!("no snapshot {name:?} of this caller's"))?;
    let saved =
        warden_workspace::saved::Saved::open(e.app.store.root()).map_err(|err| err.to_string())?;
    Ok(saved.dir(&info).join("e2b.json"))
}

/// Keep in snapshot `name` the door's record of sandbox `id` as it is.
async fn keep_record(e: &E2b, caller: &Caller, id: &str, name: &str) -> Result<(), Response> {
    let source = control::running(e, id).await?;
    let (denied, template) = super::network::carried(&source.labels);
    let record = Record { denied, template };
    let path =
        record_path(e, caller, name).map_err(|m| error(StatusCode::INTERNAL_SERVER_ERROR, m))?;
    warden_runtime::state::write_json(&path, &record).map_err(|err| {
        error(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("the snapshot's record cannot be kept: {err}"),
        )
    })
}

/// The door's record of snapshot `name` of `caller`'s: empty for one
/// made natively (the door took nothing away from its source).
fn record_of(e: &E2b, caller: &Caller, name: &str) -> Record {
    record_path(e, caller, name)
        .ok()
        .and_then(|p| warden_runtime::state::read_json::<Record>(&p).ok())
        .unwrap_or_default()
}

/// `GET /snapshots` (`sandboxID`, `name`, `limit`, `nextToken`).
#[derive(Debug, Deserialize)]
pub struct ListQuery {
    #[serde(default, rename = "sandboxID")]
    sandbox_id: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    limit: Option<usize>,
    #[serde(default, rename = "nextToken")]
    #[allow(dead_code)]
    next_token: Option<String>,
}

/// The caller's snapshots, one page (warden keeps few: no next token).
pub async fn list(
    State(e): State<Arc<E2b>>,
    Extension(caller): Extension<Caller>,
    query: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    if let Err(d) = permit(&e.app, &caller, "GET", "/v1/snapshots", None) {
        return d.response();
    }
    let Ok(Query(q)) = query else {
        return error(StatusCode::BAD_REQUEST, "the query does not fit");
    };
    let all = match native::list(State(e.app.clone()), Extension(caller)).await {
        Ok(Json(l)) => l.snapshots,
        Err(err) => return from_api(err),
    };
    let mut out: Vec<SnapshotInfo> = all
        .into_iter()
        .filter(|s| q.sandbox_id.as_ref().is_none_or(|id| &s.source == id))
        .filter(|s| q.name.as_ref().is_none_or(|n| tagless(n) == s.name))
        .map(|s| shown(s.name))
        .collect();
    if let Some(n) = q.limit {
        out.truncate(n);
    }
    Json(out).into_response()
}

/// A snapshot name as E2B may qualify it (`name:tag`): the name.
fn tagless(id: &str) -> &str {
    id.split_once(':').map_or(id, |(n, _)| n)
}

/// `DELETE /templates/{id}`: the caller's snapshot of that name (E2B's
/// `delete_snapshot`); 404 (the SDK's `False`) when it has none. A
/// template is a profile of the daemon's owner, never deleted from here.
pub async fn delete(
    State(e): State<Arc<E2b>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Response {
    if let Err(d) = permit(&e.app, &caller, "DELETE", "/v1/snapshots/{name}", None) {
        return d.response();
    }
    let name = tagless(&id).to_string();
    match native::delete(State(e.app.clone()), Extension(caller), Path(name)).await {
        Ok(_) => StatusCode::NO_CONTENT.into_response(),
        Err(err) if err.status == StatusCode::BAD_REQUEST => error(
            StatusCode::NOT_FOUND,
            format!("no snapshot {id:?} of this caller's (templates are the daemon owner's profiles and are not deleted through E2B)"),
        ),
        Err(err) => from_api(err),
    }
}

/// Whether `template` names one of `caller`'s snapshots.
pub async fn is_snapshot(e: &E2b, caller: &Caller, template: &str) -> bool {
    match native::list(State(e.app.clone()), Extension(caller.clone())).await {
        Ok(Json(l)) => l.snapshots.iter().any(|s| s.name == tagless(template)),
        Err(_) => false,
    }
}

/// A new sandbox from the caller's snapshot `template`, started, with the
/// E2B labels and timeout of its create.
pub async fn create_from(
    e: &E2b,
    caller: &Caller,
    template: &str,
    labels: std::collections::BTreeMap<String, String>,
    timeout: u64,
) -> Result<SandboxInfo, Response> {
    if let Err(d) = permit(
        &e.app,
        caller,
        "POST",
        "/v1/snapshots/{name}/sandboxes",
        None,
    ) {
        return Err(d.response());
    }
    let body = FromSnapshot {
        name: format!("sb-{}", crate::auth::random_id(6)),
        start: Some(true),
    };
    let made = native::sandbox_from(
        State(e.app.clone()),
        Extension(caller.clone()),
        Path(tagless(template).to_string()),
        Body(body),
    )
    .await;
    let info = match made {
        Ok((_, Json(i))) => i,
        Err(err) => return Err(from_api(err)),
    };
    let mut labels = labels;
    let given = match client_names(e, &info.id).await {
        Ok(g) => g,
        Err(r) => {
            remove(e, &info.id).await;
            return Err(r);
        }
    };
    if !given.is_empty() {
        labels.insert(ALLOW_OUT.into(), super::network::label_of(&given));
    }
    let record = record_of(e, caller, tagless(template));
    super::network::keep_carried(&mut labels, &record.denied, &record.template);
    adopt(e, &info.id, labels, timeout).await
}

/// The names a caller gave sandbox `id` (its spec's entries marked as a
/// caller's): for a sandbox made from a snapshot, the client's names of
/// its source, kept in the spec the snapshot carries (`e2b.allow_out`
/// is the source's row's, which a snapshot does not keep), so that an
/// update replaces them as it would have replaced them in the source.
async fn client_names(e: &E2b, id: &str) -> Result<Vec<String>, Response> {
    let (app, id) = (e.app.clone(), id.to_string());
    let read = crate::routes::sandboxes::blocking(move || {
        let sb = app.sandbox(&id)?;
        let stored: warden_runtime::state::Stored =
            warden_runtime::state::read_json(&sb.dir().join(warden_runtime::state::STORED))
                .map_err(|err| {
                    crate::error::ApiError::internal(format!(
                        "the new sandbox's spec cannot be read: {err}"
                    ))
                })?;
        Ok(match &stored.spec.network {
            warden_policy::NetworkSpec::Egress(eg) => eg
                .domains
                .iter()
                .filter(|d| d.caller)
                .map(|d| d.source.clone())
                .collect(),
            _ => Vec::new(),
        })
    })
    .await;
    read.map_err(from_api)
}

/// Remove sandbox `id`, made for a request that then failed.
async fn remove(e: &E2b, id: &str) {
    let _ = crate::routes::sandboxes::remove(
        State(e.app.clone()),
        Path(id.to_string()),
        Ok(Query(crate::routes::sandboxes::RemoveQuery {
            force: Some(true),
        })),
    )
    .await;
}

/// Give a sandbox the snapshot or fork made its E2B labels and timeout;
/// the sandbox as it is then.
async fn adopt(
    e: &E2b,
    id: &str,
    labels: std::collections::BTreeMap<String, String>,
    timeout: u64,
) -> Result<SandboxInfo, Response> {
    set_labels(&e.app, id, move |l| {
        l.extend(labels);
        l.remove(PAUSED);
    })
    .await?;
    control::set_ttl(e, id, timeout).await?;
    control::running(e, id).await
}

/// `POST /sandboxes/{id}/fork` (`timeout`, `count`).
#[derive(Debug, Deserialize, Default)]
pub struct ForkBody {
    #[serde(default)]
    timeout: Option<u64>,
    #[serde(default)]
    count: Option<usize>,
}

/// One fork as E2B answers it: the sandbox, or why it did not start.
#[derive(Serialize)]
struct ForkResult {
    #[serde(skip_serializing_if = "Option::is_none")]
    sandbox: Option<super::answer::Created>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<serde_json::Value>,
}

/// The native fork (all or nothing): 201 with one entry per fork, each
/// started with the source's metadata and template, its own access token
/// and the timeout asked (E2B's 15 s when none is).
pub async fn fork(
    State(e): State<Arc<E2b>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    body: axum::body::Bytes,
) -> Response {
    let body: ForkBody = match permitted_body(&e, &caller, "/v1/sandboxes/{id}/fork", &id, &body) {
        Ok(b) => b,
        Err(r) => return *r,
    };
    let count = body.count.unwrap_or(1);
    if count == 0 || count > MAX_FORK {
        return from_api(
            crate::error::ApiError::bad_request(format!(
                "count {count}: warden forks a sandbox into 1 to {MAX_FORK} at once; fork again for more"
            ))
            .with_reason(Some(native::COUNT_OUT_OF_RANGE)),
        );
    }
    let source = match control::running(&e, &id).await {
        Ok(i) if Seen::of(&i) == Seen::Running => i,
        // The native refusal of what needs a paused sandbox's processes.
        Ok(_) => {
            return from_api(crate::error::ApiError::new(
                StatusCode::CONFLICT,
                "paused",
                format!("sandbox {id} is paused: connect to it (resume it) first, then fork it"),
            ))
        }
        Err(r) => return r,
    };
    let made = native::fork(
        State(e.app.clone()),
        Extension(caller.clone()),
        Path(id),
        axum::body::Bytes::from(serde_json::json!({ "count": count }).to_string()),
    )
    .await;
    let forks = match made {
        Ok((_, Json(f))) => f.sandboxes,
        Err(err) => return from_api(err),
    };
    let timeout = body.timeout.unwrap_or(FORK_TIMEOUT);
    let mut labels = source.labels.clone();
    let (denied, template) = super::network::carried(&labels);
    super::network::keep_carried(&mut labels, &denied, &template);
    let mut out = Vec::new();
    for f in forks {
        let entry = match adopt(&e, &f.id, labels.clone(), timeout).await {
            Ok(info) => match super::answer::access_token(&e, &caller, &info) {
                Ok(key) => ForkResult {
                    sandbox: Some(super::answer::created(&info, key)),
                    error: None,
                },
                Err(_) => ForkResult {
                    sandbox: None,
                    error: Some(serde_json::json!({
                        "code": 500,
                        "message": format!("fork {}: no envd access token could be kept for it (reason: internal)", info.id),
                        "error_code": "internal",
                    })),
                },
            },
            Err(r) => ForkResult {
                sandbox: None,
                error: Some(fork_failed(&f.id, r).await),
            },
        };
        out.push(entry);
    }
    (StatusCode::CREATED, Json(out)).into_response()
}

/// Why fork `id` did not start, as E2B's error: the status, the door's
/// answer's `error_code` (the native reason, else `internal`) and its
/// message, which names the code.
async fn fork_failed(id: &str, r: Response) -> serde_json::Value {
    let status = r.status().as_u16();
    let body = axum::body::to_bytes(r.into_body(), 64 * 1024)
        .await
        .ok()
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        .unwrap_or_default();
    let code = body["error_code"]
        .as_str()
        .unwrap_or("internal")
        .to_string();
    let why = body["message"].as_str().unwrap_or_default();
    let message = match why {
        "" => format!("fork {id} did not start (reason: {code})"),
        why if why.contains(code.as_str()) => format!("fork {id} did not start: {why}"),
        why => format!("fork {id} did not start: {why} (reason: {code})"),
    };
    serde_json::json!({ "code": status, "message": message, "error_code": code })
}
