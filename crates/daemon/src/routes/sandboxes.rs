//! Sandboxes: create, list, look at, start, stop, change the TTL, remove
//! (pause and resume are [`super::pause`]'s).
//! Each handler turns the request into the runtime's terms and back; the
//! runtime's lifecycle does the work (off the async threads: it blocks).

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::{Extension, Json};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use warden_policy::{Field, Trust};
use warden_runtime::lifecycle::{self, CreateRequest};
use warden_runtime::resolve::{Context, Input, ProfileSource};

use crate::api::{CreateSandbox, Health, SandboxInfo, SandboxList, SetTimeout, StopSandbox};
use crate::app::App;
use crate::auth::Caller;
use crate::body::Body;
use crate::db::SandboxRow;
use crate::error::{chain, spec_pointer, ApiError, Problem};

/// Run blocking work off the async threads.
pub async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ApiError::internal(format!("a worker failed: {e}")))?
}

#[utoipa::path(get, path = "/v1/health", responses((status = 200, body = Health)))]
pub async fn health(
    State(app): State<Arc<App>>,
    Extension(visitor): Extension<crate::auth::Visitor>,
) -> Result<Json<Health>, ApiError> {
    // A public route: nobody (TCP without a credential) learns that the
    // daemon answers and its version, never how many sandboxes it has.
    let sandboxes = match visitor {
        crate::auth::Visitor::Anonymous => None,
        crate::auth::Visitor::Known(caller) => Some(
            blocking(move || {
                let visible = crate::reach::visible(&app, &caller);
                Ok(app
                    .store
                    .list()
                    .map_err(|e| ApiError::internal(chain(&e)))?
                    .iter()
                    .filter(|e| visible(&e.name))
                    .count())
            })
            .await?,
        ),
    };
    Ok(Json(Health {
        version: env!("CARGO_PKG_VERSION").to_string(),
        sandboxes,
    }))
}

/// The trust a caller's request is resolved with: the owner's socket is
/// the owner; a token holder is held to the trust rule (`warden_policy::trust`:
/// catalogue names only, nothing that reaches the host), wherever in the
/// request a value arrives.
pub(crate) fn trust_of(caller: &Caller) -> Trust {
    match caller {
        Caller::Owner => Trust::Owner,
        Caller::Token(_) => Trust::Caller,
    }
}

/// A token's workspace refused for where it is: in the same words
/// whatever the path, which are never said back, so that the answer tells
/// nothing of the host (see [`App::workspace_refused`]).
pub(crate) const NOT_UNDER_A_ROOT: &str = "the workspace is not a directory the daemon lets token holders use: one under a directory given with `warden serve --workspace-root DIR`, named as it is (no symbolic link, `.` or `..` on the way), in a directory of the root that holds none of the daemon owner's configuration";

fn input_of(body: &CreateSandbox, caller: &Caller) -> Result<Input, ApiError> {
    let mut input = Input::default();
    // The profile's name is checked here only to point at `/profile`
    // rather than at the `extends` it becomes below; the resolver applies
    // the same rule again to everything the request names.
    if let Some(p) = &body.profile {
        if let Err(refusal) = warden_policy::trust::may_name_profile(p, trust_of(caller)) {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                refusal.code(),
                format!("profile {p:?}: {refusal} (`warden profile list` on the daemon's host)"),
            )
            .with_field(Some("/profile")));
        }
    }
    let spec = match &body.spec {
        None => None,
        // What a request's document may set is the field table's `doors`
        // column, read with the rest of it: where events go is the
        // daemon's to decide (a request must not make it write files of
        // its choosing), refused at its pointer as `not_this_door`.
        Some(serde_json::Value::Object(map)) => {
            let mut map = map.clone();
            if let Some(p) = &body.profile {
                // The named profile first, the inline document over it.
                let mut extends = vec![serde_json::Value::String(p.clone())];
                match map.remove("extends") {
                    Some(serde_json::Value::Array(more)) => extends.extend(more),
                    None | Some(serde_json::Value::Null) => {}
                    Some(_) => {
                        return Err(ApiError::new(
                            StatusCode::UNPROCESSABLE_ENTITY,
                            "invalid_spec",
                            "`extends` is a list of profile names",
                        )
                        .with_field(spec_pointer(Field::Extends).as_deref()))
                    }
                }
                map.insert("extends".into(), serde_json::Value::Array(extends));
            }
            Some(serde_json::Value::Object(map))
        }
        Some(_) => {
            return Err(ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "invalid_spec",
                "`spec` must be an object with the keys of a profile file",
            )
            .with_field(Some("/spec")))
        }
    };
    input.profile = match (spec, &body.profile) {
        (Some(doc), _) => Some(ProfileSource::Inline {
            label: "request spec".into(),
            body: doc,
        }),
        (None, Some(p)) => Some(ProfileSource::Named(p.clone())),
        (None, None) => None,
    };
    Ok(input)
}

/// A create's refusal where the request wrote what was refused. The
/// document a request's `spec` becomes has the named `profile` first in
/// its `extends` (`named_first`, [`input_of`]): a finding at an entry of
/// that list is said one entry back (the document's `/extends/1` is the
/// request's `/spec/extends/0`), and one at the named profile at
/// `/profile`.
fn as_written(caller: &Caller, mut e: lifecycle::LifecycleError, named_first: bool) -> ApiError {
    use warden_policy::compose::ComposeError;
    use warden_runtime::resolve::ResolveError;
    // Is the finding at the named profile?
    let written = |pointer: &mut Option<String>| {
        let Some(entry) = pointer.as_deref().and_then(|p| p.strip_prefix("/extends/")) else {
            return false;
        };
        let (n, tail) = entry
            .split_once('/')
            .map_or((entry, None), |(n, t)| (n, Some(t)));
        match n.parse::<usize>().ok().map(|n| n.checked_sub(1)) {
            Some(Some(n)) => {
                *pointer = Some(match tail {
                    Some(t) => format!("/extends/{n}/{t}"),
                    None => format!("/extends/{n}"),
                });
                false
            }
            Some(None) => {
                *pointer = None;
                true
            }
            None => false,
        }
    };
    let mut at_profile = false;
    if let (true, lifecycle::LifecycleError::Resolve(r)) = (named_first, &mut e) {
        match r.as_mut() {
            ResolveError::Compose(ComposeError::Invalid(diags)) => {
                for d in diags.iter_mut() {
                    if written(&mut d.pointer) {
                        // Said without a pointer into the spec.
                        d.field = Some(Field::Profile);
                        at_profile = true;
                    }
                }
            }
            ResolveError::InProfile { pointer, .. } => at_profile = written(pointer),
            _ => {}
        }
    }
    let err = crate::quota::as_caller_sees(caller, e);
    match at_profile && err.problem.field.is_none() {
        true => err.with_field(Some("/profile")),
        false => err,
    }
}

#[utoipa::path(post, path = "/v1/sandboxes", request_body = CreateSandbox,
    responses((status = 201, body = SandboxInfo), (status = 400, body = Problem), (status = 409, body = Problem), (status = 422, body = Problem)),
    security(("token" = [])))]
pub async fn create(
    State(app): State<Arc<App>>,
    Extension(caller): Extension<Caller>,
    Body(body): Body<CreateSandbox>,
) -> Result<(StatusCode, Json<SandboxInfo>), ApiError> {
    let id = match &body.name {
        Some(n) => n.clone(),
        None => format!("sb-{}", crate::auth::random_id(6)),
    };
    warden_workspace::validate_name("sandbox id", &id)
        .map_err(|e| ApiError::bad_request(chain(&e)).with_field(Some("/name")))?;
    let workspace = match &body.workspace {
        None => None,
        Some(w) => {
            let p = std::path::PathBuf::from(w);
            if !p.is_absolute() {
                return Err(ApiError::bad_request(format!(
                    "workspace {w:?} is not an absolute path on the daemon's host"
                ))
                .with_field(Some("/workspace")));
            }
            match app
                .workspace_refused(&p)
                .filter(|_| !matches!(caller, Caller::Owner))
            {
                None => {}
                Some(code) => {
                    // The token is told `forbidden` in one set of words
                    // whatever the reason, so that which directory under
                    // a root holds the owner's configuration tells in
                    // nothing (outside review 34, F3); the owner's log
                    // has the reason.
                    if code == warden_runtime::owners_files::HOLDS_CONFIGURATION {
                        tracing::warn!(
                            workspace = %p.display(),
                            reason = code,
                            "a token holder's workspace was refused: it holds, or lies beside, a file the owner's configuration is read from"
                        );
                    }
                    return Err(ApiError::new(
                        StatusCode::FORBIDDEN,
                        "forbidden",
                        NOT_UNDER_A_ROOT,
                    )
                    .with_field(Some("/workspace")));
                }
            }
            Some(p)
        }
    };
    for (k, v) in &body.labels {
        if k.is_empty() || k.len() > 128 || v.len() > 1024 {
            return Err(ApiError::bad_request(
                "labels: keys of 1 to 128 bytes, values of at most 1024",
            )
            .with_field(Some("/labels")));
        }
    }
    // A door's own record is that door's to write (see [`crate::labels`]).
    crate::labels::check(&body.labels)?;
    let input = input_of(&body, &caller)?;
    let named_first = body.profile.is_some() && body.spec.is_some();
    let owners_profiles = crate::quota::profiles_named(&body);
    let start = body.start.unwrap_or(true);
    let ttl = body.ttl_seconds.map(Duration::from_secs);
    let labels = body.labels.clone();
    let profile = body.profile.clone();
    let token = caller.token_id().map(str::to_string);
    let caller = caller.clone();
    let pooled_profile = match (&body.profile, &workspace, &body.name, start) {
        (Some(p), None, None, true) => Some(p.clone()),
        _ => None,
    };
    if let Some(p) = &pooled_profile {
        crate::pools::note_demand(&app, p);
    }
    let info = blocking(move || {
        if let Some(p) = &pooled_profile {
            let claim = crate::pools::Claim {
                profile: p,
                input: &input,
                caller: &caller,
                trust: trust_of(&caller),
                labels: labels.clone(),
                ttl,
            };
            if let Some(info) = crate::pools::claim(&app, claim)? {
                return Ok(info);
            }
        }
        let ctx = Context {
            catalog: &app.catalog,
            defaults: &app.defaults,
            state_dir: Some(&app.state_dir),
            otlp: false,
            id: &id,
            trust: trust_of(&caller),
            // A profile's caches are the caller's own: a token's sandboxes
            // share theirs, never another token's or the owner's.
            owner: caller.owner(),
        };
        let req = CreateRequest {
            workspace,
            profile_name: profile.clone(),
            input,
            ttl,
            one_shot: false,
        };
        let (sb, _notice) = match lifecycle::create(&app.store, &id, req, &ctx) {
            Ok(r) => r,
            Err(e) => return Err(as_written(&caller, e, named_first)),
        };
        // A token's quota is checked and its new sandbox recorded in one
        // step: two creates at once cannot both pass.
        let one_at_a_time = app.quota_lock.lock();
        if let Caller::Token(t) = &caller {
            let held = crate::quota::within_host_defaults(&app, &sb, &owners_profiles)
                .and_then(|()| within_quota(&app, t, &sb));
            if let Err(e) = held {
                let _ = lifecycle::remove(&app.store, &id, true);
                return Err(e);
            }
        }
        let row = SandboxRow::of(&sb, labels, profile, token);
        app.db()?
            .insert_sandbox(&row)
            .map_err(|e| ApiError::internal(chain(&e)))?;
        drop(one_at_a_time);
        if start {
            let started = crate::secret_programs::allowed(&app, &caller, &sb).and_then(|()| {
                lifecycle::start(&app.state_dir, &sb, &app.exe)
                    .map_err(|e| start_error(&caller, &id, e))
            });
            if let Err(e) = started {
                let _ = lifecycle::remove(&app.store, &id, true);
                let _ = app.db().map(|db| db.remove_sandbox(&id));
                return Err(e);
            }
        }
        Ok(app.info(&sb, Some(&row)))
    })
    .await?;
    Ok((StatusCode::CREATED, Json(info)))
}

/// A start's error as the caller may see it: the owner sees why; anyone
/// else only that it failed and what to ask, since what failed may be in
/// the owner's configuration (a secret's file, a program, a path).
fn start_error(caller: &Caller, id: &str, e: lifecycle::LifecycleError) -> ApiError {
    match caller {
        Caller::Owner => e.into(),
        // The supervisor's refusal names what failed on the host (a
        // secret's file, its program): a token is told its code and
        // field, not the host's words.
        Caller::Token(_) if matches!(e, lifecycle::LifecycleError::SupervisorRefused { .. }) => {
            tracing::warn!(sandbox = id, error = %chain(&e), "a token holder's sandbox was refused at its start");
            let mut err = ApiError::from(e);
            err.problem.message = format!(
                "sandbox {id} could not be started: refused ({}); the daemon's owner sees why in its log",
                err.problem.reason.as_deref().unwrap_or("refused")
            );
            err
        }
        // A refusal with a reason code is worded for any caller.
        Caller::Token(_) if e.reason().is_some() => e.into(),
        Caller::Token(_) => {
            tracing::warn!(sandbox = id, error = %chain(&e), "a token holder's sandbox could not be started");
            let mut err = ApiError::from(e);
            err.problem.message = format!(
                "sandbox {id} could not be started; the daemon's owner sees why in its log"
            );
            err.problem.details = None;
            err
        }
    }
}

pub(crate) use crate::quota::within_quota;

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    /// `running`, `paused` or `stopped`.
    pub state: Option<String>,
    /// `KEY=VALUE`: only sandboxes with this label.
    pub label: Option<String>,
}

#[utoipa::path(get, path = "/v1/sandboxes", params(ListQuery),
    responses((status = 200, body = SandboxList), (status = 400, body = Problem)),
    security(("token" = [])))]
pub async fn list(
    State(app): State<Arc<App>>,
    Extension(caller): Extension<Caller>,
    query: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<SandboxList>, ApiError> {
    let Query(q) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    if let Some(s) = &q.state {
        if !["running", "paused", "stopped"].contains(&s.as_str()) {
            return Err(ApiError::bad_request(format!(
                "state {s:?}: use `running`, `paused` or `stopped`"
            )));
        }
    }
    let label = match &q.label {
        None => None,
        Some(l) => Some(
            l.split_once('=')
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .ok_or_else(|| ApiError::bad_request(format!("label {l:?} is not KEY=VALUE")))?,
        ),
    };
    let sandboxes = blocking(move || {
        let rows: BTreeMap<String, SandboxRow> = app
            .db()?
            .sandboxes()
            .map_err(|e| ApiError::internal(chain(&e)))?
            .into_iter()
            .map(|r| (r.id.clone(), r))
            .collect();
        let pooled: std::collections::HashSet<String> = app
            .db()?
            .pooled(None)
            .map_err(|e| ApiError::internal(chain(&e)))?
            .into_iter()
            .map(|(id, _)| id)
            .collect();
        let entries = app
            .store
            .list()
            .map_err(|e| ApiError::internal(chain(&e)))?;
        let mut out = Vec::new();
        // A token sees the sandboxes it made (crate::reach).
        let sees = crate::reach::visible(&app, &caller);
        for e in entries {
            if !sees(&e.name) {
                continue;
            }
            let Ok(sb) = app.store.get(&e.name) else {
                continue;
            };
            // Pooled: the very sandbox the pool made, not a later one
            // that took its name.
            if pooled.contains(&e.name) && app.db()?.is_pooled_sandbox(&sb).unwrap_or(true) {
                continue;
            }
            // A record kept of an earlier sandbox of this name is not this
            // one's: its labels are not matched (as `App::info` shows none).
            let row = rows.get(&e.name).filter(|r| r.is_of(&sb));
            if let Some((k, v)) = &label {
                if row.and_then(|r| r.labels.get(k)) != Some(v) {
                    continue;
                }
            }
            let mut info = app.info(&sb, row);
            info.changes_bytes = e.changes_bytes;
            if q.state.as_deref().is_some_and(|s| s != info.state) {
                continue;
            }
            out.push(info);
        }
        Ok(out)
    })
    .await?;
    Ok(Json(SandboxList { sandboxes }))
}

#[utoipa::path(get, path = "/v1/sandboxes/{id}", params(("id" = String, Path)),
    responses((status = 200, body = SandboxInfo), (status = 404, body = Problem)),
    security(("token" = [])))]
pub async fn get_one(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
) -> Result<Json<SandboxInfo>, ApiError> {
    let info = blocking(move || {
        let sb = app.sandbox(&id)?;
        let row = app.record(&sb).ok().flatten();
        Ok(app.info(&sb, row.as_ref()))
    })
    .await?;
    Ok(Json(info))
}

#[utoipa::path(post, path = "/v1/sandboxes/{id}/start", params(("id" = String, Path)),
    responses((status = 200, body = SandboxInfo), (status = 404, body = Problem),
        (status = 403, description = "a token's sandbox that reaches the host where the owner no longer lets a token (a bind taken out of its profile, a secret, a workspace root given up): nothing is started, at the field's pointer", body = Problem),
        (status = 409, description = "already running, or (`workspace_moved`, `workspace_link`) its workspace is not the directory it was made over, or is reached through a link: nothing is started", body = Problem),
        (status = 429, description = "a token's sandbox, while the token holds more than a quota allows (`quota`): nothing is started", body = Problem)),
    security(("token" = [])))]
pub async fn start(
    State(app): State<Arc<App>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Json<SandboxInfo>, ApiError> {
    let info = blocking(move || {
        let sb = app.sandbox(&id)?;
        if lifecycle::liveness(&sb).running() {
            return Err(ApiError::conflict(format!(
                "sandbox {id} is already running"
            )));
        }
        // A token's sandbox runs again only with what the owner grants
        // a token now (a bind, a secret, a pinned host taken back since
        // its create is not replayed), and within its quotas as its
        // create was (a run may grow its volumes by its disk budget).
        super::copies::grants::may_run_again(&app, &sb)?;
        crate::quota::may_start(&app, &caller, &sb)?;
        crate::secret_programs::allowed(&app, &caller, &sb)?;
        lifecycle::start(&app.state_dir, &sb, &app.exe)
            .map_err(|e| start_error(&caller, &id, e))?;
        let row = app.record(&sb).ok().flatten();
        Ok(app.info(&sb, row.as_ref()))
    })
    .await?;
    Ok(Json(info))
}

#[utoipa::path(post, path = "/v1/sandboxes/{id}/stop", params(("id" = String, Path)), request_body = StopSandbox,
    responses((status = 200, body = SandboxInfo), (status = 404, body = Problem), (status = 409, body = Problem)),
    security(("token" = [])))]
pub async fn stop(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    body: axum::body::Bytes,
) -> Result<Json<SandboxInfo>, ApiError> {
    // The body may be left out.
    let body: StopSandbox = if body.iter().all(u8::is_ascii_whitespace) {
        StopSandbox::default()
    } else {
        serde_json::from_slice(&body)
            .map_err(|e| ApiError::bad_request(format!("the request body does not fit: {e}")))?
    };
    let grace = Duration::from_secs(body.grace_seconds.unwrap_or(10).min(3600));
    let info = blocking(move || {
        let sb = app.sandbox(&id)?;
        if !lifecycle::liveness(&sb).running() {
            return Err(ApiError::not_running(format!(
                "sandbox {id} is not running"
            )));
        }
        lifecycle::stop(&sb, grace)?;
        let row = app.record(&sb).ok().flatten();
        Ok(app.info(&sb, row.as_ref()))
    })
    .await?;
    Ok(Json(info))
}

#[utoipa::path(post, path = "/v1/sandboxes/{id}/timeout", params(("id" = String, Path)), request_body = SetTimeout,
    responses((status = 200, body = SandboxInfo), (status = 404, body = Problem), (status = 409, body = Problem)),
    security(("token" = [])))]
pub async fn set_timeout(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    Body(body): Body<SetTimeout>,
) -> Result<Json<SandboxInfo>, ApiError> {
    let info = blocking(move || {
        let sb = app.sandbox(&id)?;
        let conn = warden_runtime::client::Connection::open(&lifecycle::control(&sb))
            .map_err(|_| ApiError::not_running(format!("sandbox {id} is not running")))?;
        conn.set_ttl(body.ttl_seconds.map(Duration::from_secs))
            .map_err(|e| ApiError::internal(chain(&e)))?;
        let row = app.record(&sb).ok().flatten();
        Ok(app.info(&sb, row.as_ref()))
    })
    .await?;
    Ok(Json(info))
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct RemoveQuery {
    /// Stop it first if it runs.
    pub force: Option<bool>,
}

#[utoipa::path(delete, path = "/v1/sandboxes/{id}", params(("id" = String, Path), RemoveQuery),
    responses((status = 204), (status = 404, body = Problem), (status = 409, body = Problem)),
    security(("token" = [])))]
pub async fn remove(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    query: Result<Query<RemoveQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<StatusCode, ApiError> {
    let Query(q) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let force = q.force.unwrap_or(true);
    blocking(move || {
        app.sandbox(&id)?;
        lifecycle::remove(&app.store, &id, force)?;
        let db = app.db()?;
        db.remove_sandbox(&id)
            .map_err(|e| ApiError::internal(chain(&e)))?;
        // The last sandbox of a revoked token takes what it kept with it.
        crate::revocation::files::forget_revoked(&app.state_dir, &db);
        drop(db);
        if let Ok(mut t) = app.execs.lock() {
            t.retain(|_, h| h.row.sandbox != id);
        }
        Ok(())
    })
    .await?;
    Ok(StatusCode::NO_CONTENT)
}
