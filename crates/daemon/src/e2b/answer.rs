//! The sandbox as the E2B door's create, connect and resume answer it
//! (its template, the door's fixed identity, the domain its ports are
//! served under) and each caller's envd access token for it; and E2B's
//! shape of an error, which every handler of the door answers with.
//! Below create, lifecycle, control, copies and permit.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;

use super::{E2b, ENVD_VERSION};
use crate::api::SandboxInfo;
use crate::auth::{self, Caller};

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

/// A refusal that carries warden's stable reason code: E2B's error body
/// with the code in E2B's own machine-readable `error_code` (the API's
/// `Error` schema has it; the SDK reads it for the cases it knows and
/// keeps the rest), and the message as given (the SDK's exception's text
/// is `STATUS: message`, so a message meant to reach a person names the
/// code itself: [`super::control::from_api`]).
pub fn refusal(status: StatusCode, code: &str, message: impl Into<String>) -> Response {
    (
        status,
        Json(serde_json::json!({
            "code": status.as_u16(),
            "message": message.into(),
            "error_code": code,
        })),
    )
        .into_response()
}

/// The name every sandbox domain the door answers ends with.
pub const DOMAIN: &str = "localhost";

tokio::task_local! {
    /// The sandbox domain for the request being answered.
    pub(super) static DOOR: String;
}

/// The sandbox domain to answer a create or connect with: `localhost`
/// with the port the caller reached the door on, so that
/// `get_host(port)` names this door.
pub fn sandbox_domain() -> String {
    DOOR.try_with(Clone::clone)
        .unwrap_or_else(|_| DOMAIN.to_string())
}

/// E2B's default template.
pub(super) const DEFAULT_TEMPLATE: &str = "base";

/// A sandbox as E2B's create and connect answer it.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Created {
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
/// on every sandbox call and signs file URLs with: one of its own for
/// each token that creates, connects to, resumes, forks or looks up the
/// sandbox through the door, whatever made it (an E2B create, a copy of
/// a native snapshot, a fork of a native sandbox, the native API), kept
/// by the daemon and standing for that token's power over that sandbox
/// only ([`super::signing`]). The caller's own API key is never answered
/// back: it creates and lists sandboxes, which no sandbox's key may. A
/// sandbox made natively gets its key when the door first answers for
/// it: the caller already holds the token's power over it, and the key
/// is less. When no key can be kept the call fails (500) rather than
/// answer the API key. The owner (on the daemon's socket, with no token)
/// is answered no key: its calls need none.
pub(super) fn access_token(
    e: &E2b,
    caller: &Caller,
    info: &SandboxInfo,
) -> Result<String, Box<Response>> {
    let Caller::Token(t) = caller else {
        return Ok(String::new());
    };
    // Bound to this sandbox's identity: a key kept for an earlier
    // sandbox of the name is never handed out again.
    let sb = e.app.store.get(&info.id).ok();
    let minted = sb
        .zip(e.app.db().ok())
        .and_then(|(sb, db)| match db.e2b_key(&info.id, &t.id) {
            Ok(Some(k)) if auth::made_for(&sb, k.uid.as_deref(), k.created_ms) => Some(k.key),
            Ok(_) => {
                let key = super::signing::new_key();
                (!key.is_empty())
                    .then(|| db.insert_e2b_key(&info.id, &sb.uid(), &t.id, &key).ok())
                    .flatten()
            }
            Err(_) => None,
        });
    match minted {
        Some(k) if k.starts_with(super::signing::KEY_PREFIX) => Ok(k),
        _ => {
            tracing::warn!(sandbox = %info.id, "e2b: no envd access token could be kept for the sandbox");
            Err(Box::new(error(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!(
                    "sandbox {}: no envd access token could be kept for it (the daemon's log says why); ask again",
                    info.id
                ),
            )))
        }
    }
}

pub(super) fn template_of(info: &SandboxInfo) -> String {
    info.labels
        .get("e2b.template")
        .cloned()
        .or_else(|| info.profile.clone())
        .unwrap_or_else(|| DEFAULT_TEMPLATE.to_string())
}

pub(super) fn created(info: &SandboxInfo, key: String) -> Created {
    let t = template_of(info);
    Created {
        template_id: t.clone(),
        sandbox_id: info.id.clone(),
        client_id: "warden",
        envd_version: ENVD_VERSION,
        envd_access_token: key,
        alias: t,
        domain: Some(sandbox_domain()),
    }
}
