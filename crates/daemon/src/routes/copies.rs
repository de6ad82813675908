//! Snapshots of a sandbox's state and the sandboxes made from them
//! (`POST /v1/sandboxes/{id}/snapshots`, `GET /v1/snapshots`, `DELETE
//! /v1/snapshots/{name}`, `POST /v1/snapshots/{name}/sandboxes`), and
//! forks (`POST /v1/sandboxes/{id}/fork`). A snapshot belongs to whoever
//! made it: a token sees, uses and deletes only its own (another's is not
//! found), the owner every one. New sandboxes count against the caller's
//! quota as creates do (a fork's copies of its source's layer, home and
//! saved memory counted before any is made: [`crate::quota::reserve`]),
//! and are recorded as the caller's. The runtime does the work
//! ([`warden_runtime::lifecycle`]); files are carried, and a VM's memory
//! where it can be paused to disk: the answers say which (a snapshot's
//! `memory`, a fork's `memory` and `memory_why`), and each fork's log.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::{Extension, Json};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use warden_runtime::lifecycle::{self, LifecycleError, Owner};
use warden_workspace::saved::{SavedError, SavedInfo};

use super::redact;
use super::sandboxes::{blocking, within_quota};
use crate::api::SandboxInfo;
use crate::app::App;
use crate::auth::Caller;
use crate::body::Body;
use crate::db::SandboxRow;
use crate::error::{chain, ApiError, Problem};

pub(crate) mod grants;

/// The most sandboxes one fork makes.
const MAX_FORK: usize = 16;

/// A snapshot as the API shows it.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Snapshot {
    pub name: String,
    /// The sandbox it was taken from.
    pub source: String,
    pub created_ms: u64,
    /// Bytes of files it holds (a VM's saved memory included).
    pub bytes: u64,
    /// It keeps a VM's memory: a sandbox made from it goes on from the
    /// source's processes, as a copy with its own identity.
    #[serde(default)]
    pub memory: bool,
    /// Its workspace directory on the daemon's host, shown to the owner
    /// only (empty for a token holder).
    pub workspace: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SnapshotList {
    pub snapshots: Vec<Snapshot>,
}

/// `POST /v1/sandboxes/{id}/snapshots`.
#[derive(Debug, Clone, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewSnapshot {
    /// Its name: lowercase letters, digits, '_', '.', '-'.
    pub name: String,
}

/// `POST /v1/snapshots/{name}/sandboxes`.
#[derive(Debug, Clone, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FromSnapshot {
    /// The new sandbox's name.
    pub name: String,
    /// Start it at once (the default).
    #[serde(default)]
    pub start: Option<bool>,
}

/// `POST /v1/sandboxes/{id}/fork`.
#[derive(Debug, Clone, Default, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Fork {
    /// How many (1 to 16, default 1).
    #[serde(default)]
    pub count: Option<usize>,
}

#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Forked {
    pub sandboxes: Vec<SandboxInfo>,
    /// Whether the forks carry the source's memory: a VM sandbox that
    /// could be paused to disk (its forks' processes go on from the
    /// source's, each reseeded, with its own hostname). False: its files
    /// only, and `memory_why` says why.
    #[serde(default)]
    pub memory: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_why: Option<String>,
}

fn owner_of(caller: &Caller) -> Owner<'_> {
    match caller.token_id() {
        Some(t) => Owner::Token(t),
        None => Owner::Machine,
    }
}

/// The bytes of disk the caller's quota has room for (the owner: no
/// quota), asked when a copy is about to be made and again when it
/// lands: what is free of it, and what this copy reserved of it already
/// (`held`: counted in every other check meanwhile,
/// [`crate::quota::reserve_tally`]). Asked under [`App::quota_lock`],
/// held until the asker's `f` returns: a snapshot's last check and its
/// landing happen within it, so no create, fork or other copy reserves
/// between them, and each of those counts the snapshot once it has
/// landed ([`warden_workspace::saved::Room`]).
fn room_of<'a>(app: &'a App, caller: &'a Caller, held: u64) -> impl Fn(&mut dyn FnMut(u64)) + 'a {
    move |f: &mut dyn FnMut(u64)| match caller {
        Caller::Owner => f(u64::MAX),
        Caller::Token(t) => {
            let _one_at_a_time = app.quota_lock.lock().unwrap_or_else(|p| p.into_inner());
            f(crate::quota::disk_room(app, t).saturating_add(held))
        }
    }
}

/// [`room_of`]'s figure alone, for a check that lands nothing itself (a
/// copy of a snapshot into a sandbox is checked again as the sandbox is
/// recorded, [`adopt`]).
fn room_now(room: warden_workspace::saved::Room<'_>) -> u64 {
    let mut now = 0;
    room(&mut |r| now = r);
    now
}

fn shown(info: SavedInfo, caller: &Caller) -> Snapshot {
    Snapshot {
        name: info.name,
        source: info.source,
        created_ms: info.created_ms,
        bytes: info.bytes,
        memory: info.memory,
        workspace: match caller {
            Caller::Owner => info.workspace.display().to_string(),
            Caller::Token(_) => String::new(),
        },
    }
}

/// A refusal of the snapshot store as a problem.
fn refused(e: LifecycleError) -> ApiError {
    // A copy refused for what the sandbox's tree holds (more hard links
    // than a copy keeps as links, a tree that outgrew its measure while
    // it was copied): the caller's input, with its reason code.
    let copy = match &e {
        LifecycleError::Saved(s) => warden_workspace::refused_copy(s),
        LifecycleError::Store(s) => warden_workspace::refused_copy(s),
        _ => None,
    };
    if let Some(code) = copy.and_then(|f| f.code()) {
        if code != "unsupported_entry" {
            return ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "refused", chain(&e))
                .with_reason(Some(code));
        }
    }
    match &e {
        LifecycleError::Saved(s) => match s {
            SavedError::NotFound(_) => ApiError::not_found(chain(&e)),
            SavedError::Exists(_) => ApiError::conflict(chain(&e)).with_field(Some("/name")),
            SavedError::TooMany { .. }
            | SavedError::TooLarge { .. }
            | SavedError::OverQuota { .. } => {
                ApiError::new(StatusCode::TOO_MANY_REQUESTS, "quota", chain(&e))
            }
            SavedError::Damaged { .. } => {
                ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "damaged", chain(&e))
            }
            SavedError::Store(warden_workspace::StoreError::InvalidName { .. }) => {
                ApiError::bad_request(chain(&e)).with_field(Some("/name"))
            }
            // What the layer holds is the caller's input: a socket has
            // nothing to copy.
            SavedError::Fs(warden_workspace::fsutil::FsError::Unsupported { .. }) => ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "unsupported_entry",
                chain(&e),
            ),
            _ => ApiError::internal(chain(&e)),
        },
        _ => e.into(),
    }
}

#[utoipa::path(post, path = "/v1/sandboxes/{id}/snapshots", params(("id" = String, Path)), request_body = NewSnapshot,
    responses((status = 201, description = "its workspace layer, home and options saved (a running sandbox is paused for the copy); processes are not carried", body = Snapshot),
        (status = 400, body = Problem), (status = 404, body = Problem),
        (status = 409, description = "a snapshot of that name exists, or (reason `changes_lost`) the sandbox's last supervisor ended before saving its layer: nothing was made", body = Problem),
        (status = 429, description = "the caller keeps the most snapshots, or bytes of them, it may", body = Problem)),
    security(("token" = [])))]
pub async fn create(
    State(app): State<Arc<App>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    Body(body): Body<NewSnapshot>,
) -> Result<(StatusCode, Json<Snapshot>), ApiError> {
    let snap = blocking(move || {
        let sb = app.sandbox(&id)?;
        // A token's snapshot reserves what it will hold under the quota's
        // lock before anything is copied, as a fork does: creates and
        // forks meanwhile count it, and it counts them. Given back once
        // the snapshot is counted as itself, or failed.
        let reserved = match &caller {
            Caller::Token(t) => Some(crate::quota::reserve_snapshot(
                &app,
                t,
                crate::quota::snapshot_disk(&sb),
            )?),
            Caller::Owner => None,
        };
        let held = reserved.as_ref().map_or(0, |r| r.disk());
        let room = room_of(&app, &caller, held);
        let info = lifecycle::snapshot(&app.store, &sb, &body.name, owner_of(&caller), &room)
            .map_err(|e| {
                redact::lifecycle_error(&caller, Some(&sb), &id, "its snapshot", refused(e))
            })?;
        drop(reserved);
        Ok(shown(info, &caller))
    })
    .await?;
    Ok((StatusCode::CREATED, Json(snap)))
}

#[utoipa::path(get, path = "/v1/snapshots",
    responses((status = 200, description = "the caller's snapshots (the owner's: every one)", body = SnapshotList)),
    security(("token" = [])))]
pub async fn list(
    State(app): State<Arc<App>>,
    Extension(caller): Extension<Caller>,
) -> Result<Json<SnapshotList>, ApiError> {
    let list = blocking(move || {
        let all = lifecycle::snapshots(&app.store, owner_of(&caller)).map_err(refused)?;
        Ok(all.into_iter().map(|i| shown(i, &caller)).collect())
    })
    .await?;
    Ok(Json(SnapshotList { snapshots: list }))
}

#[utoipa::path(delete, path = "/v1/snapshots/{name}", params(("name" = String, Path)),
    responses((status = 204), (status = 404, description = "no such snapshot of the caller's", body = Problem)),
    security(("token" = [])))]
pub async fn delete(
    State(app): State<Arc<App>>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    blocking(move || {
        lifecycle::delete_snapshot(&app.store, &name, owner_of(&caller)).map_err(refused)?;
        Ok(())
    })
    .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Record `sb` as the caller's new sandbox (within its quota: otherwise
/// it is removed) and start it when asked; the sandbox as it is then. A
/// fork's copy hands in the fork's reservation, which stops counting it
/// as reserved as it is counted as itself.
fn adopt(
    app: &App,
    caller: &Caller,
    sb: &warden_workspace::Sandbox,
    start: bool,
    reserved: Option<&mut crate::quota::Reservation<'_>>,
) -> Result<SandboxInfo, ApiError> {
    let id = sb.name().to_string();
    // A token's copy keeps only what the owner grants a token now (its
    // source's grants are not replayed: [`grants`]); the owner's copies
    // keep what the owner gave.
    if let Caller::Token(_) = caller {
        if let Err(e) = copy_granted(app, sb, caller) {
            let _ = lifecycle::remove(&app.store, &id, true);
            return Err(e);
        }
    } else if let Err(e) = lifecycle::make_own(sb, &app.state_dir, caller.owner()) {
        // The owner's copy of a token's sandbox is the owner's: its
        // caches and grants file are the owner's own, never the token's.
        let _ = lifecycle::remove(&app.store, &id, true);
        return Err(refused(e));
    }
    let one_at_a_time = app.quota_lock.lock();
    if let Some(r) = reserved {
        r.take_one();
    }
    if let Caller::Token(t) = caller {
        if let Err(e) = within_quota(app, t, sb) {
            let _ = lifecycle::remove(&app.store, &id, true);
            return Err(e);
        }
    }
    let row = SandboxRow::of(
        sb,
        Default::default(),
        sb.meta().profile.clone(),
        caller.token_id().map(str::to_string),
    );
    app.db()?
        .insert_sandbox(&row)
        .map_err(|e| ApiError::internal(chain(&e)))?;
    drop(one_at_a_time);
    if start {
        let started = crate::secret_programs::allowed(app, caller, sb).and_then(|()| {
            lifecycle::start(&app.state_dir, sb, &app.exe)
                .map_err(|e| redact::lifecycle_error(caller, Some(sb), &id, "its start", e.into()))
        });
        if let Err(e) = started {
            let _ = lifecycle::remove(&app.store, &id, true);
            let _ = app.db().map(|db| db.remove_sandbox(&id));
            return Err(e);
        }
    }
    Ok(app.info(sb, Some(&row)))
}

#[utoipa::path(post, path = "/v1/snapshots/{name}/sandboxes", params(("name" = String, Path)), request_body = FromSnapshot,
    responses((status = 201, description = "a new sandbox with the snapshot's files, home and options (no process of its source runs in it)", body = SandboxInfo),
        (status = 403, description = "a token's copy whose source reaches the host where the owner no longer lets a token (a bind taken out of its profile, a workspace root given up): nothing was made", body = Problem),
        (status = 404, description = "no such snapshot of the caller's", body = Problem),
        (status = 409, description = "a sandbox of that name exists", body = Problem),
        (status = 422, description = "the snapshot is damaged: nothing was made", body = Problem),
        (status = 429, body = Problem)),
    security(("token" = [])))]
pub async fn sandbox_from(
    State(app): State<Arc<App>>,
    Extension(caller): Extension<Caller>,
    Path(snap): Path<String>,
    Body(body): Body<FromSnapshot>,
) -> Result<(StatusCode, Json<SandboxInfo>), ApiError> {
    let info = blocking(move || {
        // A token's copy is checked against what the owner grants now,
        // and its quota reserved, before anything is copied: a snapshot
        // that no longer holds, or does not fit, makes nothing.
        let mut reserved = match &caller {
            Caller::Token(t) => {
                let (stored, profile, bytes) = snapshot_spec(&app, &caller, &snap)?;
                let spec = &stored.spec;
                grants::still_granted(
                    &app,
                    &stored,
                    profile.as_deref(),
                    &body.name,
                    grants::Again::Copy,
                    caller.owner(),
                )?;
                Some(crate::quota::reserve_from_snapshot(&app, t, spec, bytes)?)
            }
            Caller::Owner => None,
        };
        let held = reserved.as_ref().map_or(0, |r| r.disk());
        let room = room_of(&app, &caller, held);
        let sb = lifecycle::create_from_snapshot(
            &app.store,
            &body.name,
            &snap,
            owner_of(&caller),
            &|| room_now(&room),
        )
        .map_err(|e| {
            redact::lifecycle_error(
                &caller,
                None,
                &body.name,
                "its copy of a snapshot",
                refused(e),
            )
        })?;
        adopt(
            &app,
            &caller,
            &sb,
            body.start.unwrap_or(true),
            reserved.as_mut(),
        )
    })
    .await?;
    Ok((StatusCode::CREATED, Json(info)))
}

/// The spec snapshot `snap` of the caller's keeps, the owner's profile
/// its source was made from, and its bytes; read before a copy is made
/// (the copy reads it again, digest checked: a spec changed between the
/// two is refused there, and the copy is checked again once made).
fn snapshot_spec(
    app: &App,
    caller: &Caller,
    snap: &str,
) -> Result<(warden_runtime::state::Stored, Option<String>, u64), ApiError> {
    let saved = warden_workspace::saved::Saved::open(app.store.root())
        .map_err(|e| refused(LifecycleError::from(e)))?;
    let info = saved
        .get(snap, &owner_of(caller).label())
        .map_err(|e| refused(LifecycleError::from(e)))?;
    let stored: warden_runtime::state::Stored =
        warden_runtime::state::read_json(&saved.dir(&info).join("spec.json")).map_err(|e| {
            ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "damaged",
                format!("snapshot {snap} is damaged: {}", chain(&e)),
            )
        })?;
    Ok((stored, info.profile, info.bytes))
}

/// Whether a token's copy `sb`, just made, reaches nothing of the host
/// the owner does not grant a token now ([`grants::still_granted`]).
fn copy_granted(
    app: &App,
    sb: &warden_workspace::Sandbox,
    caller: &Caller,
) -> Result<(), ApiError> {
    let stored = grants::stored_of(sb)?;
    grants::still_granted(
        app,
        &stored,
        sb.meta().profile.as_deref(),
        sb.name(),
        grants::Again::Copy,
        caller.owner(),
    )
}

/// The reason of a fork's `count` outside 1 to [`MAX_FORK`], whichever
/// door asked.
pub const COUNT_OUT_OF_RANGE: &str = "count_out_of_range";

/// What a fork of sandbox `source` carries, as its log says it.
fn carried(source: &str, memory: &Result<(), String>) -> String {
    match memory {
        Ok(()) => format!(
            "what it carries of sandbox {source}: its files and its memory (its processes go on from the source's, reseeded, with a hostname of its own)"
        ),
        Err(why) => format!(
            "what it carries of sandbox {source}: its files only, not its memory: {why}"
        ),
    }
}

#[utoipa::path(post, path = "/v1/sandboxes/{id}/fork", params(("id" = String, Path)), request_body = Fork,
    responses((status = 201, description = "new sandboxes from its current files, home and options (a running one is paused for the copy and its forks started); a VM's memory and processes are carried where it can be paused to disk (`memory` says whether, `memory_why` why not)", body = Forked),
        (status = 400, body = Problem),
        (status = 403, description = "a token's fork of a source that reaches the host where the owner no longer lets a token: nothing was copied", body = Problem),
        (status = 404, body = Problem),
        (status = 409, description = "(reason `changes_lost`) the sandbox's last supervisor ended before saving its layer, whose changes are lost: nothing was made", body = Problem),
        (status = 429, body = Problem)),
    security(("token" = [])))]
pub async fn fork(
    State(app): State<Arc<App>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    body: axum::body::Bytes,
) -> Result<(StatusCode, Json<Forked>), ApiError> {
    let body: Fork = if body.iter().all(u8::is_ascii_whitespace) {
        Fork::default()
    } else {
        serde_json::from_slice(&body)
            .map_err(|e| ApiError::bad_request(format!("the request body does not fit: {e}")))?
    };
    let count = body.count.unwrap_or(1);
    if count == 0 || count > MAX_FORK {
        return Err(
            ApiError::bad_request(format!("count {count}: fork into 1 to {MAX_FORK}"))
                .with_field(Some("/count"))
                .with_reason(Some(COUNT_OUT_OF_RANGE)),
        );
    }
    let made = blocking(move || {
        let sb = app.sandbox(&id)?;
        let live = lifecycle::liveness(&sb).running();
        // A token's fork keeps only what the owner grants a token now,
        // checked on its source before anything is copied (and on each
        // copy once made); its quota for every copy is reserved before
        // the first is written: a fork that does not fit copies nothing.
        let mut reserved = match &caller {
            Caller::Token(t) => {
                copy_granted(&app, &sb, &caller)?;
                Some(crate::quota::reserve(&app, t, &sb, count as u64)?)
            }
            Caller::Owner => None,
        };
        let forked = lifecycle::fork_with_memory(&app.store, &sb, count).map_err(|e| {
            redact::lifecycle_error(&caller, Some(&sb), &id, "its fork", refused(e))
        })?;
        let memory = forked.memory;
        let made = forked.made;
        // Each fork's own log says what it carries of its source, where
        // every door's reader sees it (E2B's logs, the events): written
        // before it starts. A fork whose log cannot say it is not made:
        // none of them is, as for any fork that fails part-way.
        let unrecorded = made.iter().find_map(|m| {
            lifecycle::record(
                m,
                warden_audit::WorkspaceAction::Create,
                Vec::new(),
                carried(&id, &memory),
            )
            .err()
            .map(|source| (m.name().to_string(), source))
        });
        if let Some((name, source)) = unrecorded {
            for m in &made {
                let _ = lifecycle::remove(&app.store, m.name(), true);
            }
            return Err(ApiError::from(LifecycleError::NotRecorded {
                what: format!("the fork of sandbox {id}"),
                name,
                source: Box::new(source),
            }));
        }
        let mut out = Vec::new();
        let mut failed = None;
        for m in &made {
            match failed {
                None => match adopt(&app, &caller, m, live, reserved.as_mut()) {
                    Ok(i) => out.push(i),
                    Err(e) => failed = Some(e),
                },
                // All or nothing: the rest of a fork over quota goes too.
                Some(_) => {
                    let _ = lifecycle::remove(&app.store, m.name(), true);
                }
            }
        }
        if let Some(e) = failed {
            for i in &out {
                let _ = lifecycle::remove(&app.store, &i.id, true);
                let _ = app.db().map(|db| db.remove_sandbox(&i.id));
            }
            return Err(e);
        }
        Ok((out, memory))
    })
    .await?;
    let (made, memory) = made;
    Ok((
        StatusCode::CREATED,
        Json(Forked {
            sandboxes: made,
            memory: memory.is_ok(),
            memory_why: memory.err(),
        }),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use warden_workspace::fsutil::{FsError, COPY_PAST_SIZE, TOO_MANY_LINKS};

    #[test]
    fn a_copy_refused_for_its_trees_links_or_growth_is_a_422_with_its_reason_code() {
        for (fs, code) in [
            (FsError::TooManyLinks { slack: 64 << 20 }, TOO_MANY_LINKS),
            (
                FsError::PastSize {
                    size: 1 << 20,
                    limit: 2 << 20,
                },
                COPY_PAST_SIZE,
            ),
        ] {
            let e = refused(LifecycleError::Saved(SavedError::Fs(fs)));
            assert_eq!(e.status, StatusCode::UNPROCESSABLE_ENTITY);
            assert_eq!(e.problem.reason.as_deref(), Some(code));
        }
        // A socket in the tree keeps its own code.
        let e = refused(LifecycleError::Saved(SavedError::Fs(
            FsError::Unsupported {
                src: "s".into(),
                what: "a socket",
            },
        )));
        assert_eq!(e.problem.code, "unsupported_entry");
    }
}
