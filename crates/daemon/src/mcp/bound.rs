//! Each `/mcp` session bound to the credential that began it, at the
//! transport: every request naming a session (a POST of any message,
//! responses and notifications included; the GET stream; the DELETE) is
//! looked up here together with its caller, before the MCP server sees
//! it. A session begun by another caller is answered exactly as an
//! unknown one (404), so neither its stream, nor its questions, nor its
//! end, nor its sandboxes' list reach anyone but the caller that began
//! it, and no route of the session can forget the check. Each such
//! refusal, and each new session past a bound, is recorded in the
//! daemon's audit log under its caller (in the same words for another's
//! session and an unknown one), bounded as every refusal is.
//!
//! A session is bound to its caller's credential, but counted against
//! the token behind it (the token a per-sandbox MCP token was minted for,
//! the token that made a child over the API, up to the one the owner
//! made: `Leases::behind`), in one ledger for every MCP endpoint of the
//! daemon (`/mcp` and each sandbox's `/e2b/.../mcp`): neither minted
//! tokens, nor children, nor sandboxes multiply one token's share. Past
//! it the new session is refused; no live session, the token's own or
//! another's, is ever ended to make room. The owner's sessions are
//! refused by neither bound.

use axum::extract::{Request, State};
use axum::http::{header, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};
use std::sync::Arc;

use super::ledger::{Full, MOST, PER_TOKEN};
use crate::app::App;
use crate::auth::{Caller, Recorded, Route};

/// The header that names a session (`Mcp-Session-Id`).
const SESSION: &str = "mcp-session-id";

/// One `/mcp` endpoint's check: where its refusals are recorded (the
/// daemon's log, at `path`); the bindings are the daemon's
/// (`App::mcp_sessions`).
pub(super) struct Door {
    pub app: Arc<App>,
    pub path: &'static str,
}

/// The token a request's refusal is recorded under where no [`Caller`]
/// is on it: the E2B door's per-sandbox MCP puts the token its MCP token
/// stands for here.
#[derive(Debug, Clone)]
pub struct RecordedAs(pub String);

/// Who a refusal is recorded under: the request's caller, else the token
/// the door that let it in named, else nobody.
struct Refused<'a>(Option<&'a str>);

impl Recorded for Refused<'_> {
    fn recorded_token(&self) -> Option<&str> {
        self.0
    }
}

fn recorded_under(req: &Request) -> Refused<'_> {
    match req.extensions().get::<Caller>() {
        Some(c) => Refused(c.token_id()),
        None => Refused(req.extensions().get::<RecordedAs>().map(|r| r.0.as_str())),
    }
}

/// A digest of the request's caller: the daemon's authorization decided
/// it (the owner, or a token by its ID); where no such decision is on the
/// request (the E2B door's per-sandbox MCP, whose door checked the
/// caller), the credential it carries.
fn caller_of(req: &Request) -> [u8; 32] {
    let mut h = Sha256::new();
    match req.extensions().get::<Caller>() {
        Some(Caller::Owner) => h.update(b"owner"),
        Some(Caller::Token(t)) => {
            h.update(b"token\0");
            h.update(t.id.as_bytes());
        }
        None => {
            h.update(b"credential\0");
            if let Some(v) = req.headers().get(header::AUTHORIZATION) {
                h.update(v.as_bytes());
            }
        }
    }
    h.finalize().into()
}

/// The token a new session counts against: the token behind the caller's
/// (see the module's comment); for the E2B door's per-sandbox MCP, whose
/// door checked the caller, the token behind the one its MCP token stands
/// for. `None` for the owner.
fn counted_as(app: &App, req: &Request) -> Option<String> {
    let token = match req.extensions().get::<Caller>() {
        Some(Caller::Owner) => return None,
        Some(Caller::Token(t)) => t.id.clone(),
        None => match req.extensions().get::<RecordedAs>() {
            Some(r) => r.0.clone(),
            // Neither: the credential itself, as its own holder.
            None => {
                let who = caller_of(req);
                return Some(who.iter().map(|b| format!("{b:02x}")).collect());
            }
        },
    };
    Some(app.leases.behind(&token))
}

/// The answer to a session that is not the caller's: the MCP server's
/// own answer to an unknown session, word for word.
fn missing() -> Response {
    (StatusCode::NOT_FOUND, "Not Found: Session not found").into_response()
}

/// What the daemon's log says of a session named that is not one of the
/// caller's: the same words for another caller's and an unknown one.
const NOT_HELD: &str = "MCP session: the Mcp-Session-Id is not one of this caller's live sessions";

/// The answer to a session past a bound, as the API words the bounds of
/// its long-lived answers: `too_many_sessions`, the bound named in
/// `details.bound` (not `quota`, which is a token's quotas, passed only
/// by removing something: a session bound passes when a session ends).
fn refused(full: &Full) -> (StatusCode, String) {
    match full {
        Full::Token(token) => (
            StatusCode::TOO_MANY_REQUESTS,
            format!("token {token} (with the tokens acting for it or made by it) has {PER_TOKEN} MCP sessions open over the daemon's MCP endpoints, the most one token may: end one (DELETE /mcp with its Mcp-Session-Id) or let one idle out"),
        ),
        Full::Daemon => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("the daemon serves {MOST} MCP sessions, the most it may; try again later"),
        ),
    }
}

fn refused_answer(full: &Full, (status, message): (StatusCode, String)) -> Response {
    let mut e = crate::error::ApiError::new(status, "too_many_sessions", message);
    e = match full {
        // The caller's own: it passes when the caller ends one.
        Full::Token(_) => {
            e.with_details(serde_json::json!({ "bound": "per_token", "limit": PER_TOKEN }))
        }
        // Filled by every caller's sessions, which end without this one.
        Full::Daemon => {
            e.retry_after = Some(crate::error::BUSY_RETRY_AFTER);
            e.with_details(serde_json::json!({ "bound": "per_daemon", "limit": MOST }))
        }
    };
    e.into_response()
}

/// The middleware: see the module's comment.
pub(super) async fn layer(State(door): State<Arc<Door>>, req: Request, next: Next) -> Response {
    let bindings = &door.app.mcp_sessions;
    let route = Route::refused_at(req.method(), door.path);
    let who = caller_of(&req);
    let named = req
        .headers()
        .get(SESSION)
        .map(|v| v.to_str().map(str::to_string));
    let session = match named {
        None => {
            // A session begins here (an `initialize`), within the caller's
            // bound and the daemon's: bound to its caller as its ID leaves.
            let counted = counted_as(&door.app, &req);
            let _place = match bindings.begin(counted.clone()) {
                Ok(place) => place,
                Err(full) => {
                    let said = refused(&full);
                    let why = format!("MCP session: {}", said.1);
                    door.app.record_denial(&recorded_under(&req), &route, &why);
                    return refused_answer(&full, said);
                }
            };
            let res = next.run(req).await;
            if let Some(id) = res.headers().get(SESSION).and_then(|v| v.to_str().ok()) {
                bindings.begun(id.to_string(), who, counted);
            }
            return res;
        }
        Some(Ok(s)) if bindings.holds(&s, &who) => s,
        Some(_) => {
            door.app
                .record_denial(&recorded_under(&req), &route, NOT_HELD);
            return missing();
        }
    };
    let delete = req.method() == Method::DELETE;
    let res = next.run(req).await;
    if res.status() == StatusCode::NOT_FOUND || (delete && res.status().is_success()) {
        bindings.ended(&session);
    }
    res
}
