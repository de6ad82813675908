//! Tokens over the API (admin scope): list, create, revoke. The same as
//! `warden token`, which works on the database directly.
//!
//! A token made over the API by a token is never wider than its maker
//! ([`wider_than`]): each scope one the maker holds, bound to the maker's
//! sandbox when the maker is bound to one, each quota at most what the
//! maker has left ([`crate::quota::bounds_of`]). A token whose record sets
//! a quota of its own makes no tokens (the owner who set it does).
//!
//! A token made by a token is its maker's: its record names its maker
//! (the `parent` column), it is given every quota (each one left out is
//! all the maker has left), and its quotas are carved out of its maker's,
//! so the maker and its children together hold no more than the maker
//! alone. It makes no tokens itself (one generation). Revoking a token revokes the
//! tokens it made in the same transaction, and a token revokes only the
//! tokens it made. Tokens do not expire, so there is no expiry to
//! compare. The owner (the socket, `warden token create`) is bound by
//! none of it.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::{Extension, Json};
use std::sync::Arc;
use warden_workspace::Sandbox;

use super::sandboxes::blocking;
use crate::api::{CreateToken, NewToken, Size, TokenInfo, TokenList};
use crate::app::App;
use crate::auth::{self, Caller, Scope, TokenQuotas};
use crate::body::Body;
use crate::db::TokenRow;
use crate::error::{chain, ApiError, Problem};

/// Token `t` as listed, in state `state` ([`auth::state_of`]).
pub fn info(t: &TokenRow, state: auth::TokenState) -> TokenInfo {
    TokenInfo {
        id: t.id.clone(),
        name: t.name.clone(),
        scopes: t.scopes.clone(),
        sandbox: t.sandbox.clone(),
        created_ms: t.created_ms,
        revoked: t.revoked,
        state: state.as_str().to_string(),
    }
}

/// Every token as listed, each in the state the check of a request would
/// find it in now.
pub fn infos(
    db: &crate::db::Db,
    store: &warden_workspace::Store,
) -> Result<Vec<TokenInfo>, crate::db::DbError> {
    db.tokens()?
        .iter()
        .map(|t| Ok(info(t, auth::state_of(db, store, t)?)))
        .collect()
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
    let tokens =
        blocking(move || infos(&*app.db()?, &app.store).map_err(|e| ApiError::internal(chain(&e))))
            .await?;
    Ok(Json(TokenList { tokens }))
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

/// The quotas a token maker is held to, as the token it makes is compared
/// with them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Held {
    sandboxes: u64,
    memory: u64,
    pids: u64,
}

/// The first part of a token `maker` asks for (`scopes`, bound to
/// `sandbox`, held to `quotas`) that is wider than `maker` itself, held to
/// `held`: its JSON pointer and why. None when the token is no wider in
/// any part.
fn wider_than(
    maker: &Caller,
    held: Held,
    scopes: &[Scope],
    sandbox: Option<&Sandbox>,
    quotas: &TokenQuotas,
) -> Option<(String, String)> {
    let Caller::Token(row) = maker else {
        return None;
    };
    if let Some(i) = scopes.iter().position(|s| !maker.holds(*s)) {
        return Some((
            format!("/scopes/{i}"),
            format!(
                "token {} does not hold the scope {}, so it cannot give it",
                row.id,
                scopes[i].as_str()
            ),
        ));
    }
    if let Some(only) = &row.sandbox {
        let same = sandbox.is_some_and(|sb| {
            sb.name() == only && auth::made_for(sb, row.sandbox_uid.as_deref(), row.created_ms)
        });
        if !same {
            return Some((
                "/sandbox".into(),
                format!(
                    "token {} is for sandbox {only} only, so a token it makes is for that sandbox only",
                    row.id
                ),
            ));
        }
    }
    let asked = [
        (
            "/max_sandboxes",
            "sandboxes",
            quotas.max_sandboxes,
            held.sandboxes,
        ),
        (
            "/max_memory",
            "bytes of memory",
            quotas.max_memory,
            held.memory,
        ),
        (
            "/max_pids",
            "processes",
            quotas.max_pids.map(std::num::NonZeroU64::get),
            held.pids,
        ),
    ];
    asked.into_iter().find_map(|(pointer, what, asked, most)| {
        asked.filter(|n| *n > most).map(|n| {
            (
                pointer.to_string(),
                format!(
                    "{n} {what} is more than token {} may have itself ({most}): a token gives at most what it has",
                    row.id
                ),
            )
        })
    })
}

/// Whether `maker` may make a token of `scopes`, for `sandbox`, held to
/// `quotas`: the owner always; a token the owner made only one no wider
/// than itself (403 `wider_than_maker` at the pointer of the first part
/// that is), only when its own record sets no quota (403
/// `maker_has_quotas`), and never a token made over the API (403
/// `made_by_a_token`). What a token may make is given every quota, each
/// what it asked or else all the maker has left ([`crate::quota::bounds_of`]):
/// the quotas returned, carved out of the maker's.
fn may_make(
    app: &App,
    maker: &Caller,
    scopes: &[Scope],
    sandbox: Option<&Sandbox>,
    quotas: &TokenQuotas,
) -> Result<TokenQuotas, ApiError> {
    let Caller::Token(row) = maker else {
        return Ok(*quotas);
    };
    let made_by = app
        .db()?
        .maker_of(&row.id)
        .map_err(|e| ApiError::internal(chain(&e)))?;
    if made_by.is_some() {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "made_by_a_token",
            format!(
                "token {} was made by a token, and a token made by a token makes no tokens: ask its maker or the owner",
                row.id
            ),
        ));
    }
    let bounds = crate::quota::bounds_of(app, row)?;
    let held = Held {
        sandboxes: bounds.sandboxes,
        memory: bounds.memory,
        pids: bounds.pids,
    };
    if let Some((pointer, why)) = wider_than(maker, held, scopes, sandbox, quotas) {
        return Err(
            ApiError::new(StatusCode::FORBIDDEN, "wider_than_maker", why)
                .with_field(Some(&pointer)),
        );
    }
    if row.max_sandboxes.is_some() || row.max_memory.is_some() || row.max_pids.is_some() {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "maker_has_quotas",
            format!(
                "token {} is held to quotas of its own, and a token held to quotas makes no tokens (each would have quotas of its own beside it): ask the owner for the token",
                row.id
            ),
        ));
    }
    let given = TokenQuotas {
        max_sandboxes: Some(quotas.max_sandboxes.unwrap_or(held.sandboxes)),
        max_memory: Some(quotas.max_memory.unwrap_or(held.memory)),
        max_pids: quotas.max_pids.or(std::num::NonZeroU64::new(held.pids)),
    };
    let spent =
        given.max_sandboxes == Some(0) || given.max_memory == Some(0) || given.max_pids.is_none();
    if spent {
        return Err(crate::quota::over_quota_of(format!(
            "token {} has given all of its quotas to the tokens it made: revoke one first",
            row.id
        )));
    }
    Ok(given)
}

#[utoipa::path(post, path = "/v1/tokens", request_body = CreateToken,
    responses((status = 201, body = NewToken), (status = 400, body = Problem), (status = 403, body = Problem), (status = 422, body = Problem)), security(("token" = [])))]
pub async fn create(
    State(app): State<Arc<App>>,
    Extension(caller): Extension<Caller>,
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
    // One maker's children at once: each is carved out of what the one
    // before left.
    let _one_at_a_time = app.quota_lock.lock();
    let quotas = may_make(&app, &caller, &scopes, sandbox.as_ref(), &quotas)?;
    let (row, text) = auth::new_token_with(&req.name, &scopes, sandbox.as_ref(), quotas);
    // A name the owner lists for a declared volume is the owner's to give:
    // a token named so by a token would read as the one the owner meant.
    if let (Caller::Token(_), Some(volume)) = (
        &caller,
        crate::e2b::declared::listed_name(&app.e2b_volumes, &req.name),
    ) {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "name_reserved",
            format!(
                "the name {:?} is listed by the daemon owner's volume {volume:?} (e2b.volumes), and only the owner gives a token that name; choose another",
                req.name
            ),
        )
        .with_field(Some("/name")));
    }
    let parent = match &caller {
        Caller::Token(maker) => {
            crate::quota::room_for_child(&app, maker, crate::quota::bounds_of(&app, &row)?)?;
            Some(maker.id.as_str())
        }
        Caller::Owner => None,
    };
    app.db()?
        .insert_token_by(&row, parent)
        .map_err(|e| ApiError::internal(chain(&e)))?;
    Ok((
        StatusCode::CREATED,
        Json(NewToken {
            info: info(&row, auth::TokenState::Live),
            token: text,
        }),
    ))
}

#[utoipa::path(delete, path = "/v1/tokens/{token}", params(("token" = String, Path, description = "id or name")),
    responses((status = 204), (status = 404, body = Problem)), security(("token" = [])))]
pub async fn revoke(
    State(app): State<Arc<App>>,
    Extension(caller): Extension<Caller>,
    Path(token): Path<String>,
) -> Result<StatusCode, ApiError> {
    // A token revokes only the tokens it made and theirs (its maker, its
    // siblings and the owner's tokens are not found); the owner any.
    // Each takes its own descendants with it.
    let by = match &caller {
        Caller::Token(row) => Some(row.id.as_str()),
        Caller::Owner => None,
    };
    let by = by.map(str::to_string);
    blocking(move || {
        let db = app.db()?;
        let revoked = db
            .revoke_token_within(&token, by.as_deref())
            .map_err(|e| ApiError::internal(chain(&e)))?;
        if !revoked {
            return Err(ApiError::not_found(format!("no live token {token:?}")));
        }
        // What the revoked tokens kept for their next sandboxes goes
        // with them (once their last sandbox is gone).
        crate::revocation::files::forget_revoked(&app.state_dir, &db);
        Ok(())
    })
    .await?;
    Ok(StatusCode::NO_CONTENT)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HELD: Held = Held {
        sandboxes: 4,
        memory: 1 << 30,
        pids: 1000,
    };

    fn maker(scopes: &[Scope], sandbox: Option<&Sandbox>) -> Caller {
        Caller::Token(auth::new_token("maker", scopes, sandbox).0)
    }

    fn quotas(sandboxes: Option<u64>, memory: Option<u64>, pids: Option<u64>) -> TokenQuotas {
        TokenQuotas {
            max_sandboxes: sandboxes,
            max_memory: memory,
            max_pids: pids.and_then(std::num::NonZeroU64::new),
        }
    }

    fn pointer(w: Option<(String, String)>) -> Option<String> {
        w.map(|(p, _)| p)
    }

    #[test]
    fn a_token_gives_no_scope_it_does_not_hold() {
        let m = maker(&[Scope::Exec, Scope::DesktopControl], None);
        let none = TokenQuotas::default();
        let ok = [Scope::Exec, Scope::DesktopView, Scope::DesktopControl];
        assert_eq!(pointer(wider_than(&m, HELD, &ok, None, &none)), None);
        let wide = [Scope::Exec, Scope::Admin];
        assert_eq!(
            pointer(wider_than(&m, HELD, &wide, None, &none)).as_deref(),
            Some("/scopes/1")
        );
        let wide = [Scope::Files];
        assert_eq!(
            pointer(wider_than(&m, HELD, &wide, None, &none)).as_deref(),
            Some("/scopes/0")
        );
        // The owner is held to nothing.
        assert_eq!(
            pointer(wider_than(&Caller::Owner, HELD, &wide, None, &none)),
            None
        );
    }

    #[test]
    fn each_quota_is_at_most_the_makers_and_one_left_out_is_not_wider() {
        let m = maker(&[Scope::Admin], None);
        let w = |q: TokenQuotas| pointer(wider_than(&m, HELD, &[Scope::Exec], None, &q));
        assert_eq!(w(quotas(None, None, None)), None);
        assert_eq!(w(quotas(Some(4), Some(1 << 30), Some(1000))), None);
        assert_eq!(
            w(quotas(Some(5), None, None)).as_deref(),
            Some("/max_sandboxes")
        );
        assert_eq!(
            w(quotas(None, Some((1 << 30) + 1), None)).as_deref(),
            Some("/max_memory")
        );
        assert_eq!(
            w(quotas(Some(1), None, Some(1001))).as_deref(),
            Some("/max_pids")
        );
    }

    #[test]
    fn a_token_bound_to_a_sandbox_gives_only_tokens_bound_to_that_same_sandbox() {
        let dir = tempfile::tempdir().unwrap();
        let store = warden_workspace::Store::open(dir.path().join("state")).unwrap();
        let make = |name: &str| {
            let ws = dir.path().join(format!("ws-{name}"));
            std::fs::create_dir_all(&ws).unwrap();
            store
                .create(name, &warden_workspace::CreateOptions::new(ws))
                .unwrap()
        };
        let (a, b) = (make("sb-a"), make("sb-b"));
        let m = maker(&[Scope::Exec], Some(&a));
        let none = TokenQuotas::default();
        let w = |sb: Option<&Sandbox>| pointer(wider_than(&m, HELD, &[Scope::Exec], sb, &none));
        assert_eq!(w(Some(&a)), None);
        assert_eq!(w(None).as_deref(), Some("/sandbox"));
        assert_eq!(w(Some(&b)).as_deref(), Some("/sandbox"));
        // A later sandbox that took the name is not the maker's.
        store.remove("sb-a").unwrap();
        let again = make("sb-a");
        assert_eq!(w(Some(&again)).as_deref(), Some("/sandbox"));
    }
}
