//! A running sandbox's allowlist, changed live (`PATCH
//! /v1/sandboxes/{id}/egress`), and the questions of ask mode answered
//! over the API (`/v1/approvals`). The sandbox's supervisor does the work
//! (it reads the entries as a profile's, swaps its proxy's list, cuts
//! connections to removed names, records each change and answer); these
//! handlers carry the request there and its refusals back as problems.

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::{Extension, Json};
use serde::Deserialize;
use std::sync::Arc;
use warden_runtime::client::{ClientError, Connection};
use warden_runtime::lifecycle;
use warden_runtime::protocol::{AskDecision, Refusal};

use super::sandboxes::blocking;
use crate::api::{Answer, Approval, ApprovalList, Decision, EgressList, EgressPatch};
use crate::app::App;
use crate::auth::Caller;
use crate::body::Body;
use crate::error::{chain, ApiError, Problem};

/// Who asked, as the sandbox's audit log says it.
fn who(caller: &Caller) -> String {
    match caller.token_id() {
        Some(t) => format!("token {t} (API)"),
        None => "the owner (API)".into(),
    }
}

/// A supervisor's refusal as a problem.
fn refused(id: &str, e: ClientError) -> ApiError {
    match e {
        ClientError::NotRunning { .. } => {
            ApiError::not_running(format!("sandbox {id} is not running"))
        }
        // An allowlist's refusal is about the request's entries: it carries
        // no reason about the sandbox's own options.
        ClientError::Rejected {
            code,
            message,
            field,
            ..
        } => match code {
            Refusal::Invalid => ApiError::bad_request(match &field {
                Some(f) => format!("{f}: {message}"),
                None => message,
            })
            .with_field(field.as_deref()),
            Refusal::NotFound => ApiError::not_found(message),
            Refusal::Conflict | Refusal::Paused | Refusal::Unsupported => {
                ApiError::conflict(message)
            }
            Refusal::Busy => ApiError::busy(&message),
        },
        ClientError::Unsupported(_) => ApiError::conflict(chain(&e)),
        e => ApiError::supervisor(&e),
    }
}

#[utoipa::path(patch, path = "/v1/sandboxes/{id}/egress", params(("id" = String, Path)), request_body = EgressPatch,
    responses((status = 200, description = "the allowlist as it is now", body = EgressList),
        (status = 400, description = "an entry that does not read, or a removal of one not on the list: nothing changed", body = Problem),
        (status = 404, body = Problem), (status = 409, description = "not running, or without egress", body = Problem)),
    security(("token" = [])))]
pub async fn patch(
    State(app): State<Arc<App>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    Body(body): Body<EgressPatch>,
) -> Result<Json<EgressList>, ApiError> {
    let by = who(&caller);
    // A token holder's entries reach public addresses only.
    let trust = super::sandboxes::trust_of(&caller);
    let allow = blocking(move || {
        let sb = app.sandbox(&id)?;
        let conn = Connection::open(&lifecycle::control(&sb)).map_err(|e| refused(&id, e))?;
        conn.set_egress(body.allow, body.remove, &by, trust)
            .map_err(|e| refused(&id, e))
    })
    .await?;
    Ok(Json(EgressList { allow }))
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct ApprovalsQuery {
    /// Only this sandbox's questions.
    pub sandbox: Option<String>,
}

#[utoipa::path(get, path = "/v1/approvals", params(ApprovalsQuery),
    responses((status = 200, body = ApprovalList), (status = 404, body = Problem)),
    security(("token" = [])))]
pub async fn list(
    State(app): State<Arc<App>>,
    Extension(caller): Extension<Caller>,
    query: Result<Query<ApprovalsQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<ApprovalList>, ApiError> {
    let Query(q) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let approvals = blocking(move || {
        // A token sees the questions of the sandboxes it made.
        let sees = crate::reach::visible(&app, &caller);
        let names: Vec<String> = match &q.sandbox {
            Some(id) => {
                crate::reach::check(&app, &caller, id)?;
                vec![app.sandbox(id)?.name().to_string()]
            }
            None => app
                .store
                .list()
                .map_err(|e| ApiError::internal(chain(&e)))?
                .into_iter()
                .map(|e| e.name)
                .collect(),
        };
        let mut out = Vec::new();
        for name in names.into_iter().filter(|n| sees(n)) {
            // A pooled sandbox is nobody's until a create takes it.
            let Ok(sb) = app.sandbox(&name) else {
                continue;
            };
            if !lifecycle::liveness(&sb).running() {
                continue;
            }
            // A sandbox that stops meanwhile, or whose supervisor predates
            // approvals, has none to show.
            let Ok(pending) =
                Connection::open(&lifecycle::control(&sb)).and_then(|c| c.approvals())
            else {
                continue;
            };
            out.extend(pending.into_iter().map(|p| Approval {
                id: p.id,
                sandbox: p.sandbox,
                protocol: p.protocol,
                name: p.name,
                port: p.port,
                note: p.note,
                request: p.request,
                asked_ms: p.asked_ms,
                deadline_ms: p.deadline_ms,
            }));
        }
        out.sort_by_key(|a| a.asked_ms);
        Ok(out)
    })
    .await?;
    Ok(Json(ApprovalList { approvals }))
}

#[utoipa::path(post, path = "/v1/approvals/{id}", params(("id" = String, Path)), request_body = Answer,
    responses((status = 204, description = "answered"), (status = 404, body = Problem),
        (status = 409, description = "answered already, or denied when its time ran out", body = Problem)),
    security(("token" = [])))]
pub async fn answer(
    State(app): State<Arc<App>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    Body(body): Body<Answer>,
) -> Result<StatusCode, ApiError> {
    let by = who(&caller);
    // A token holder's allow reaches public addresses only.
    let trust = super::sandboxes::trust_of(&caller);
    let decision = match body.decision {
        Decision::AllowOnce => AskDecision::AllowOnce,
        Decision::AllowAlways => AskDecision::AllowAlways,
        Decision::Deny => AskDecision::Deny,
    };
    blocking(move || {
        // `SANDBOX.START-N`: the sandbox is what comes before the last dot.
        let no_such =
            || ApiError::not_found(format!("no question {id} waits (see GET /v1/approvals)"));
        let (sandbox, _) = id.rsplit_once('.').ok_or_else(no_such)?;
        // Another caller's sandbox has no question for this one.
        crate::reach::check(&app, &caller, sandbox).map_err(|_| no_such())?;
        let sb = app.sandbox(sandbox).map_err(|_| no_such())?;
        if decision == AskDecision::AllowAlways {
            always_kept_as_its_principal_s(&app, &sb)?;
        }
        let conn = Connection::open(&lifecycle::control(&sb)).map_err(|_| no_such())?;
        conn.answer(&id, decision, &by, trust)
            .map_err(|e| refused(sandbox, e))
    })
    .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Whether an "always" answer to a question of `sb` would be kept in its
/// own principal's grants file. Its supervisor writes the answer into the
/// file its kept spec names, read when it started. A token's sandbox made
/// before answers were kept per principal names the owner's
/// `STATE/grants/PROJECT.yaml`; its start and its copies are refused now
/// (`copies::grants::may_run_again`), but a supervisor started before that
/// check (by an earlier warden, whose code it still runs) goes on with it,
/// and would write the token's answer into the owner's file, widening the
/// owner's next sandboxes over the project. Such an answer is refused
/// (403 at `/spec/egress/ask`), whoever gives it; "once" and "deny" still
/// answer (the sandbox is not started again with that file).
fn always_kept_as_its_principal_s(
    app: &App,
    sb: &warden_workspace::Sandbox,
) -> Result<(), ApiError> {
    // The record of this very sandbox: one kept under its name of an
    // earlier sandbox (a token's, removed behind the daemon's back) does
    // not make the owner's sandbox that took the name a token's.
    let row = app.record(sb)?;
    let Some(token) = row.and_then(|r| r.token) else {
        return Ok(());
    };
    let stored = super::copies::grants::stored_of(sb)?;
    let owner = lifecycle::Owner::Token(&token);
    if lifecycle::granted::grants_file_is_own(&stored, &app.state_dir, owner) {
        return Ok(());
    }
    Err(ApiError::new(
        StatusCode::FORBIDDEN,
        "forbidden",
        format!(
            "sandbox {} keeps its \"always\" answers in a grants file that is not its own principal's (made before answers were kept per principal): answer once or deny",
            sb.name()
        ),
    )
    .with_field(crate::error::spec_pointer(warden_policy::Field::Ask).as_deref()))
}
