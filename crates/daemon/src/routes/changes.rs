//! A sandbox's changes to its workspace, and committing them to the real
//! workspace. The review and its rules are the runtime's
//! (`warden_runtime::review`, the same as `warden diff` and `warden
//! commit`): this door only takes the request and says the answer.

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::Json;
use serde::Deserialize;
use std::path::PathBuf;
use std::sync::Arc;
use warden_runtime::review::{self, ReviewError};
use warden_workspace::{
    Change, CommitError, DiffError, LayerError, Stop, Stopped, StoreError, WorkspaceRefused,
};

use super::files::relative;
use super::sandboxes::blocking;
use crate::api::{ChangesAnswer, CommitAnswer, CommitRequest, DiscardAnswer, DiscardRequest};
use crate::app::App;
use crate::body::Body;
use crate::error::{chain, ApiError, Problem};

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct ChangesQuery {
    /// Only changes at or below this path (relative to the workspace, or
    /// under /workspace).
    pub path: Option<String>,
    /// With each file's content difference (a unified diff for text).
    pub content: Option<bool>,
}

/// A path of a request as the review takes it (relative to the
/// workspace); the workspace itself is every path.
fn filter(path: &str, field: &str) -> Result<Option<PathBuf>, ApiError> {
    let rel = relative(Some(path)).map_err(|e| e.with_field(Some(field)))?;
    Ok((!rel.is_empty()).then(|| PathBuf::from(rel)))
}

/// The longest one review of the daemon may run, its client still there.
pub const REVIEW_WITHIN: std::time::Duration = std::time::Duration::from_secs(300);
/// The most entries of a layer one review of the daemon walks: beyond it
/// the answer would be hundreds of megabytes of JSON nobody reads.
pub const REVIEW_ENTRIES: u64 = 500_000;

/// What stops a review the daemon runs: its caller leaving (the returned
/// guard, dropped with the request's future when the connection closes:
/// axum drops a handler whose client is gone), its time and its entries.
fn review_stop() -> (Stop, warden_workspace::Leaving) {
    let (stop, leaving) = Stop::on_leaving();
    (stop.within(REVIEW_WITHIN).at_most(REVIEW_ENTRIES), leaving)
}

/// A review stopped before its end: its reason code as its code.
fn stopped(s: Stopped) -> ApiError {
    let status = match s {
        // Nobody reads it: the status says what happened all the same.
        Stopped::CallerLeft => StatusCode::REQUEST_TIMEOUT,
        Stopped::TooLong { .. } | Stopped::TooLarge { .. } => StatusCode::UNPROCESSABLE_ENTITY,
    };
    ApiError::new(status, s.code(), s.to_string()).with_reason(Some(s.code()))
}

/// The sandbox, which must have a layer to review.
fn layered(app: &App, id: &str) -> Result<warden_workspace::Sandbox, ApiError> {
    let sb = app.sandbox(id)?;
    if !sb.upper().is_dir() {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "no_layer",
            format!("sandbox {id} has no workspace layer (it was not made with an overlay): its changes went straight to its workspace, there is nothing to review or commit"),
        ));
    }
    Ok(sb)
}

fn flag_list(changes: &[Change]) -> serde_json::Value {
    serde_json::Value::Array(
        changes
            .iter()
            .map(|c| {
                serde_json::json!({
                    "path": c.path.to_string_lossy(),
                    "kind": c.kind,
                    "flags": c.flags,
                })
            })
            .collect(),
    )
}

/// The workspace's own directory refused: moved or replaced on the host
/// since the sandbox was made, or reached through a link. A 409 with its
/// reason code as its code; the message names no host path.
fn workspace_refused(refused: &WorkspaceRefused, id: &str) -> ApiError {
    let message = match refused {
        WorkspaceRefused::Moved { .. } => format!(
            "nothing read or written: sandbox {id}'s workspace on the daemon's host is not the directory the sandbox was made over (it was moved or replaced since), and warden neither compares with nor lands changes in another directory; the daemon's owner puts the sandbox's directory back at its path"
        ),
        WorkspaceRefused::ThroughLink { .. } => format!(
            "nothing read or written: the path of sandbox {id}'s workspace on the daemon's host goes through a symbolic link, which could lead the review or the commit to another directory; the daemon's owner puts the directory itself back at that path"
        ),
    };
    ApiError::new(StatusCode::CONFLICT, refused.code(), message).with_reason(Some(refused.code()))
}

/// Who asked for a commit, as far as the refusal of a flagged or
/// conflicting one should offer them a way on: a way the caller is
/// refused is no way.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Asker {
    /// The owner or its stand-in, through the native API: it may send
    /// `accept_flagged` and `force`.
    Decides,
    /// A token that may not, or MCP's model (whose tool takes neither):
    /// the owner decides.
    Asks,
}

impl Asker {
    /// The running request's asker. Read in the handler itself: the door
    /// is known within its task, not on the blocking pool.
    fn of(caller: &crate::auth::Caller) -> Asker {
        if crate::reach::may_override_review(caller) && !crate::labels::model_facing() {
            Asker::Decides
        } else {
            Asker::Asks
        }
    }
}

fn review_error(e: ReviewError, id: &str, asker: Asker) -> ApiError {
    if !matches!(e, ReviewError::RefusalUnrecorded { .. }) {
        if let Some(refused) = WorkspaceRefused::find(&e) {
            return workspace_refused(refused, id);
        }
    }
    match e {
        // Answered as the refusal is, saying that it is not recorded.
        ReviewError::RefusalUnrecorded { refusal, source } => {
            let mut answer = review_error(*refusal, id, asker);
            answer.problem.message.push_str(&format!(
                "; and this is not recorded in the sandbox's audit log: {}",
                chain(&source)
            ));
            answer
        }
        ReviewError::Running(_) | ReviewError::Store(StoreError::InUse { .. }) => ApiError::new(
            StatusCode::CONFLICT,
            "running",
            format!("nothing committed: sandbox {id} is running, so its changes are not final; stop it (POST /v1/sandboxes/{id}/stop), look at GET .../changes, then commit"),
        ),
        ReviewError::Flagged(changes) => {
            let lines: Vec<String> = changes
                .iter()
                .flat_map(|c| {
                    c.flags.iter().map(move |f| {
                        format!(
                            "{}: {} ({})",
                            warden_workspace::printable_path(&c.path),
                            f.rule,
                            warden_workspace::printable(&f.reason)
                        )
                    })
                })
                .collect();
            let how = match asker {
                Asker::Decides => {
                    "are flagged and need \"accept_flagged\": true (or commit the other paths by name)"
                }
                Asker::Asks => {
                    "are flagged: landing them is the daemon's owner's decision, after a review on the host; commit the other paths by name"
                }
            };
            ApiError::new(
                StatusCode::CONFLICT,
                "flagged",
                format!(
                    "nothing committed: {} change(s) {how}: {}",
                    changes.len(),
                    lines.join("; ")
                ),
            )
            .with_details(flag_list(&changes))
        }
        ReviewError::OwnersFiles(changes) => {
            let code = warden_runtime::owners_files::HOLDS_CONFIGURATION;
            ApiError::new(
                StatusCode::FORBIDDEN,
                "forbidden",
                format!(
                    "nothing committed: {} change(s) write a file the daemon owner's configuration is read from (a profile, a file a profile extends or names, the daemon's settings), which only the owner commits: {}; commit the other paths by name",
                    changes.len(),
                    changes
                        .iter()
                        .map(|c| warden_workspace::printable_path(&c.path))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            )
            .with_reason(Some(code))
            .with_field(Some("/paths"))
            .with_details(flag_list(&changes))
        }
        ReviewError::Commit(CommitError::Conflicts { conflicts, .. }) => {
            let details = conflicts
                .iter()
                .map(|c| serde_json::json!({"path": c.path.to_string_lossy(), "reason": c.reason}))
                .collect();
            ApiError::new(
                StatusCode::CONFLICT,
                "conflicts",
                format!(
                    "nothing committed: {} path(s) changed in the real workspace since the sandbox started; {}",
                    conflicts.len(),
                    match asker {
                        Asker::Decides => "look at them, then commit with \"force\": true to overwrite, or commit the other paths by name",
                        Asker::Asks => "overwriting them is the daemon's owner's decision; commit the other paths by name",
                    }
                ),
            )
            .with_details(serde_json::Value::Array(details))
        }
        ReviewError::Commit(e @ CommitError::Unsafe(_)) => {
            ApiError::new(StatusCode::CONFLICT, "unsafe", chain(&e))
        }
        ReviewError::Commit(CommitError::Unreviewed(items)) => {
            let details = items
                .iter()
                .map(|c| serde_json::json!({"path": c.path.to_string_lossy(), "reason": c.reason}))
                .collect();
            ApiError::new(
                StatusCode::CONFLICT,
                "unreviewed",
                format!(
                    "nothing committed: {} change(s) are not what GET /v1/sandboxes/{id}/changes?content=true showed this caller or the owner (made since, or never shown with their content; a listing without content, or one read with a sandbox's own token, reviews nothing); look at them there, then commit",
                    items.len()
                ),
            )
            .with_details(serde_json::Value::Array(details))
        }
        e @ ReviewError::NoPaths => ApiError::bad_request(e.to_string()).with_field(Some("/paths")),
        ReviewError::RunningDiscard(_) => ApiError::new(
            StatusCode::CONFLICT,
            "running",
            format!("nothing discarded: sandbox {id} is running, so its changes are not final; stop it (POST /v1/sandboxes/{id}/stop), look at GET .../changes, then discard"),
        ),
        ReviewError::Diff(e @ DiffError::Filter(_))
        | ReviewError::Commit(CommitError::Diff(e @ DiffError::Filter(_))) => {
            ApiError::bad_request(chain(&e)).with_field(Some("/paths"))
        }
        ReviewError::Discard(
            e @ (LayerError::ThroughLink { .. } | LayerError::HiddenByDeletedDir { .. }),
        ) => ApiError::bad_request(chain(&e)).with_field(Some("/paths")),
        // The layer of a running sandbox changed under the review (a link
        // swapped in is refused, never followed): ask again.
        ReviewError::Diff(e @ DiffError::Read { .. }) => ApiError::conflict(chain(&e)),
        ReviewError::Diff(DiffError::Stopped(s))
        | ReviewError::Commit(CommitError::Diff(DiffError::Stopped(s))) => stopped(s),
        ReviewError::Diff(e @ DiffError::TooLong { .. })
        | ReviewError::Commit(CommitError::Diff(e @ DiffError::TooLong { .. })) => {
            ApiError::conflict(chain(&e))
        }
        ReviewError::Commit(e @ CommitError::Apply { .. }) => {
            let applied = match &e {
                CommitError::Apply { applied, .. } => applied
                    .iter()
                    .map(|p| serde_json::Value::from(p.to_string_lossy().into_owned()))
                    .collect(),
                _ => Vec::new(),
            };
            ApiError::internal(chain(&e)).with_details(serde_json::Value::Array(applied))
        }
        e => ApiError::internal(chain(&e)),
    }
}

/// Who a principal's reviews are recorded as: the owner (on the owner's
/// socket, or a token that stands for the owner), or one token.
fn principal(caller: &crate::auth::Caller) -> String {
    match caller {
        crate::auth::Caller::Token(t) if !crate::reach::stands_for_owner(caller) => {
            format!("token:{}", t.id)
        }
        _ => warden_workspace::review::OWNER.to_string(),
    }
}

/// Whom a listing of the changes is recorded as shown to, when it shows
/// content: a person who may commit (the owner, a token that is not a
/// sandbox's own). A per-sandbox token is the one handed to the agent
/// in the sandbox: what it reads is no person's review, so it records
/// none. MCP's `get_changes` is read by the model: it is recorded as
/// the model's own listing, which only MCP's `commit_changes` counts.
fn reviewer(caller: &crate::auth::Caller) -> Option<String> {
    if crate::labels::model_facing() {
        return Some(format!("model:{}", principal(caller)));
    }
    match caller {
        crate::auth::Caller::Token(t) if t.sandbox.is_some() => None,
        _ => Some(principal(caller)),
    }
}

/// Whose reviews a commit by `caller` counts: its own and the owner's;
/// over MCP, only the model's own listing (the flags decide the rest).
fn reviewers(caller: &crate::auth::Caller) -> Vec<String> {
    if crate::labels::model_facing() {
        return vec![format!("model:{}", principal(caller))];
    }
    let own = principal(caller);
    let mut all = vec![warden_workspace::review::OWNER.to_string()];
    if own != all[0] {
        all.push(own);
    }
    all
}

#[utoipa::path(get, path = "/v1/sandboxes/{id}/changes", params(("id" = String, Path), ChangesQuery),
    responses((status = 200, body = ChangesAnswer), (status = 400, body = Problem),
        (status = 404, body = Problem), (status = 409, body = Problem)),
    security(("token" = [])))]
pub async fn changes(
    State(app): State<Arc<App>>,
    axum::Extension(caller): axum::Extension<crate::auth::Caller>,
    axum::Extension(credential): axum::Extension<crate::credential::Credential>,
    Path(id): Path<String>,
    query: Result<Query<ChangesQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<ChangesAnswer>, ApiError> {
    let Query(q) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    // A review holds a thread of the daemon for as long as it runs: it is
    // one of its token's places (see [`crate::leases`]) until it has ended.
    // Its client leaving ends it soon after (`_leaving`, dropped with this
    // future), and it is bounded besides ([`review_stop`]).
    let lease = app.leases.take(&credential, crate::leases::Kind::Review)?;
    let (stop, _leaving) = review_stop();
    let paths: Vec<PathBuf> = match &q.path {
        Some(p) => filter(p, "/path")?.into_iter().collect(),
        None => Vec::new(),
    };
    let content = q.content.unwrap_or(false);
    let by = reviewer(&caller);
    blocking(move || {
        let _lease = lease;
        let sb = layered(&app, &id)?;
        let owners = app.owners_files();
        let changes = review::review(&sb, paths, content, &owners, by.as_deref(), &stop)
            .map_err(|e| review_error(e, &id, Asker::Asks))?;
        let flagged = changes.iter().filter(|c| !c.flags.is_empty()).count();
        let ignored = changes.iter().filter(|c| c.ignored).count();
        let changes = changes
            .iter()
            .map(serde_json::to_value)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| ApiError::internal(format!("cannot show a change: {e}")))?;
        // Asked after the review: a layer found lost is never shown as
        // the sandbox's whole state without saying so.
        let lost =
            (!warden_runtime::lifecycle::liveness(&sb).running() && sb.changes_lost()).then(|| {
                warden_runtime::lifecycle::LifecycleError::ChangesLost { name: id.clone() }
                    .to_string()
                    + "; these are the changes it saved before that run"
            });
        Ok(Json(ChangesAnswer {
            changes,
            flagged,
            ignored,
            lost,
        }))
    })
    .await
}

#[utoipa::path(post, path = "/v1/sandboxes/{id}/commit", params(("id" = String, Path)), request_body = CommitRequest,
    responses((status = 200, body = CommitAnswer), (status = 400, body = Problem),
        (status = 404, body = Problem), (status = 409, description = "nothing committed: `running`, `flagged`, `conflicts`, `unsafe`, `unreviewed` or `no_layer`, with `details`; or `workspace_moved`, `workspace_link`: the workspace on the host is not the sandbox's own directory", body = Problem)),
    security(("token" = [])))]
pub async fn commit(
    State(app): State<Arc<App>>,
    axum::Extension(caller): axum::Extension<crate::auth::Caller>,
    Path(id): Path<String>,
    Body(req): Body<CommitRequest>,
) -> Result<Json<CommitAnswer>, ApiError> {
    // Landing what a review flagged (a git hook, an executable) or
    // overwriting the real workspace's own changes is a person's call:
    // the owner's or an admin token's, never an agent's token's.
    for (asked, field) in [
        (req.accept_flagged, "/accept_flagged"),
        (req.force, "/force"),
    ] {
        if asked && !crate::reach::may_override_review(&caller) {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "forbidden",
                format!(
                    "`{}` is the owner's decision (or an admin token's): commit the unflagged paths by name, and ask the owner to review the rest",
                    &field[1..]
                ),
            )
            .with_field(Some(field)));
        }
    }
    let mut paths = Vec::new();
    for p in &req.paths {
        match filter(p, "/paths")? {
            Some(p) => paths.push(p),
            // The workspace itself: every change.
            None => {
                paths.clear();
                break;
            }
        }
    }
    if !req.paths.is_empty() && paths.is_empty() && req.paths.iter().all(|p| p.is_empty()) {
        return Err(ApiError::bad_request(
            "`paths` holds only empty paths: leave it out to commit all",
        )
        .with_field(Some("/paths")));
    }
    let counted = reviewers(&caller);
    let asker = Asker::of(&caller);
    // Stopped while it reviews, before anything lands, when its client
    // leaves; bounded as a review is.
    let (stop, _leaving) = review_stop();
    blocking(move || {
        let sb = layered(&app, &id)?;
        let report = review::commit(
            &sb,
            paths,
            review::CommitRules {
                force: req.force,
                accept_flagged: req.accept_flagged,
                include_ignored: req.include_ignored,
                // The owner's word is the owner's to write: no token's
                // commit lands a change to the owner's configuration,
                // an admin's with `accept_flagged` included.
                owners_files: matches!(caller, crate::auth::Caller::Owner),
            },
            &app.owners_files(),
            &counted,
            &stop,
        )
        .map_err(|e| review_error(e, &id, asker))?;
        Ok(Json(CommitAnswer {
            applied: report
                .applied
                .iter()
                .map(|c| c.path.to_string_lossy().into_owned())
                .collect(),
            forced: report
                .forced
                .iter()
                .map(|c| c.path.to_string_lossy().into_owned())
                .collect(),
            ignored: report
                .ignored
                .iter()
                .map(|c| c.path.to_string_lossy().into_owned())
                .collect(),
        }))
    })
    .await
}

#[utoipa::path(post, path = "/v1/sandboxes/{id}/discard", params(("id" = String, Path)), request_body = DiscardRequest,
    responses((status = 200, body = DiscardAnswer), (status = 400, description = "no path, or one outside the workspace: nothing discarded", body = Problem),
        (status = 404, body = Problem), (status = 409, description = "nothing discarded: `running`, `no_layer`, `workspace_moved` or `workspace_link`", body = Problem)),
    security(("token" = [])))]
pub async fn discard(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    Body(req): Body<DiscardRequest>,
) -> Result<Json<DiscardAnswer>, ApiError> {
    let mut paths = Vec::new();
    for (i, p) in req.paths.iter().enumerate() {
        match filter(p, &format!("/paths/{i}"))? {
            Some(p) => paths.push(p),
            None => {
                return Err(ApiError::bad_request(
                    "a path names the whole workspace: discard names files or directories in it (DELETE the sandbox to throw away all of it)",
                )
                .with_field(Some(&format!("/paths/{i}"))))
            }
        }
    }
    if paths.is_empty() {
        return Err(
            ApiError::bad_request("`paths` is empty: name the paths to discard")
                .with_field(Some("/paths")),
        );
    }
    blocking(move || {
        let sb = layered(&app, &id)?;
        let thrown = review::discard(&sb, paths).map_err(|e| review_error(e, &id, Asker::Asks))?;
        Ok(Json(DiscardAnswer {
            discarded: thrown
                .iter()
                .map(|c| c.path.to_string_lossy().into_owned())
                .collect(),
        }))
    })
    .await
}
