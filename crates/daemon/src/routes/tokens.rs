//! Tokens over the API (admin scope): list, create, revoke. The same as
//! `warden token`, which works on the database directly.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use std::sync::Arc;

use crate::api::{CreateToken, NewToken, Size, TokenInfo, TokenList};
use crate::app::App;
use crate::auth::{self, Scope, TokenQuotas};
use crate::body::Body;
use crate::db::TokenRow;
use crate::error::{chain, ApiError, Problem};

pub fn info(t: &TokenRow) -> TokenInfo {
    TokenInfo {
        id: t.id.clone(),
        name: t.name.clone(),
        scopes: t.scopes.clone(),
        sandbox: t.sandbox.clone(),
        created_ms: t.created_ms,
        revoked: t.revoked,
    }
}

/// Scopes named in words, checked.
pub fn parse_scopes(names: &[String]) -> Result<Vec<Scope>, String> {
    if names.is_empty() {
        return Err("give at least one scope".into());
    }
    names
        .iter()
        .map(|n| {
            Scope::parse(n).ok_or_else(|| {
                format!(
                    "{n:?} is not a scope; scopes: {}",
                    Scope::ALL.map(|s| s.as_str()).join(", ")
                )
            })
        })
        .collect()
}

#[utoipa::path(get, path = "/v1/tokens", responses((status = 200, body = TokenList)), security(("token" = [])))]
pub async fn list(State(app): State<Arc<App>>) -> Result<Json<TokenList>, ApiError> {
    let tokens = app
        .db()?
        .tokens()
        .map_err(|e| ApiError::internal(chain(&e)))?;
    Ok(Json(TokenList {
        tokens: tokens.iter().map(info).collect(),
    }))
}

/// The quotas a create asks for, checked as `warden token create` checks
/// its flags (the same size parser, the same bounds): a value refused is
/// 400 at its JSON pointer.
fn quotas_of(req: &CreateToken) -> Result<TokenQuotas, ApiError> {
    let bad = |field: &str, why: String| {
        ApiError::bad_request(format!("{}: {why}", &field[1..])).with_field(Some(field))
    };
    let max_memory = match &req.max_memory {
        None => None,
        Some(Size::Bytes(n)) => Some(*n),
        Some(Size::Text(t)) => Some(
            warden_policy::parse_size(t)
                .map_err(|e| bad("/max_memory", format!("{e}, or a number of bytes")))?,
        ),
    };
    let max_pids = match req.max_pids {
        None => None,
        Some(n) => Some(
            std::num::NonZeroU64::new(n).ok_or_else(|| bad("/max_pids", "at least 1".into()))?,
        ),
    };
    Ok(TokenQuotas {
        max_sandboxes: req.max_sandboxes,
        max_memory,
        max_pids,
    })
}

/// The body of a create, read by its fields: a value of the wrong kind
/// (`"max_pids": -1`, `"max_memory": true`) is 422 at its JSON pointer.
fn read_create(body: serde_json::Value) -> Result<CreateToken, ApiError> {
    serde_path_to_error::deserialize::<_, CreateToken>(body).map_err(|e| {
        use serde_path_to_error::Segment;
        let pointer: String = e
            .path()
            .iter()
            .filter_map(|s| match s {
                Segment::Map { key } => Some(format!("/{key}")),
                Segment::Seq { index } => Some(format!("/{index}")),
                _ => None,
            })
            .collect();
        let a = ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_body",
            format!("the request body does not fit: {}", e.inner()),
        );
        if pointer.is_empty() {
            a
        } else {
            a.with_field(Some(&pointer))
        }
    })
}

#[utoipa::path(post, path = "/v1/tokens", request_body = CreateToken,
    responses((status = 201, body = NewToken), (status = 400, body = Problem), (status = 422, body = Problem)), security(("token" = [])))]
pub async fn create(
    State(app): State<Arc<App>>,
    Body(body): Body<serde_json::Value>,
) -> Result<(StatusCode, Json<NewToken>), ApiError> {
    let req = read_create(body)?;
    if req.name.is_empty() || req.name.len() > 128 {
        return Err(ApiError::bad_request("name: 1 to 128 bytes").with_field(Some("/name")));
    }
    let scopes = parse_scopes(&req.scopes)
        .map_err(|m| ApiError::bad_request(m).with_field(Some("/scopes")))?;
    // A per-sandbox token is bound to the sandbox that has the name now.
    let sandbox = match &req.sandbox {
        Some(sb) => Some(
            app.sandbox(sb)
                .map_err(|e| e.with_field(Some("/sandbox")))?,
        ),
        None => None,
    };
    let quotas = quotas_of(&req)?;
    let (row, text) = auth::new_token_with(&req.name, &scopes, sandbox.as_ref(), quotas);
    app.db()?
        .insert_token(&row)
        .map_err(|e| ApiError::internal(chain(&e)))?;
    Ok((
        StatusCode::CREATED,
        Json(NewToken {
            info: info(&row),
            token: text,
        }),
    ))
}

#[utoipa::path(delete, path = "/v1/tokens/{token}", params(("token" = String, Path, description = "id or name")),
    responses((status = 204), (status = 404, body = Problem)), security(("token" = [])))]
pub async fn revoke(
    State(app): State<Arc<App>>,
    Path(token): Path<String>,
) -> Result<StatusCode, ApiError> {
    if app
        .db()?
        .revoke_token(&token)
        .map_err(|e| ApiError::internal(chain(&e)))?
    {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::not_found(format!("no live token {token:?}")))
    }
}
