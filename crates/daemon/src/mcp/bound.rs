//! Each `/mcp` session bound to the credential that began it, at the
//! transport: every request naming a session (a POST of any message,
//! responses and notifications included; the GET stream; the DELETE) is
//! looked up here together with its caller, before the MCP server sees
//! it. A session begun by another caller is answered exactly as an
//! unknown one (404), so neither its stream, nor its questions, nor its
//! end, nor its sandboxes' list reach anyone but the caller that began
//! it, and no route of the session can forget the check.

use axum::extract::{Request, State};
use axum::http::{header, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::auth::Caller;

/// The header that names a session (`Mcp-Session-Id`).
const SESSION: &str = "mcp-session-id";

/// The most sessions remembered; past it the longest unused go first
/// (the server ends a session long before this many pile up).
const MOST: usize = 4096;

/// Who began each live session: a digest of its caller.
#[derive(Default)]
pub(super) struct Bindings {
    map: Mutex<HashMap<String, ([u8; 32], Instant)>>,
}

impl Bindings {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, ([u8; 32], Instant)>> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn begun(&self, session: String, who: [u8; 32]) {
        let mut map = self.map();
        if map.len() >= MOST {
            let oldest = map
                .iter()
                .min_by_key(|(_, (_, used))| *used)
                .map(|(k, _)| k.clone());
            if let Some(k) = oldest {
                map.remove(&k);
            }
        }
        map.insert(session, (who, Instant::now()));
    }

    /// Whether `session` was begun by `who` (and mark it used).
    fn holds(&self, session: &str, who: &[u8; 32]) -> bool {
        use subtle::ConstantTimeEq;
        let mut map = self.map();
        match map.get_mut(session) {
            Some((began, used)) if bool::from(began.ct_eq(who)) => {
                *used = Instant::now();
                true
            }
            _ => false,
        }
    }

    fn ended(&self, session: &str) {
        self.map().remove(session);
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

/// The answer to a session that is not the caller's: the MCP server's
/// own answer to an unknown session, word for word.
fn missing() -> Response {
    (StatusCode::NOT_FOUND, "Not Found: Session not found").into_response()
}

/// The middleware: see the module's comment.
pub(super) async fn layer(
    State(bindings): State<Arc<Bindings>>,
    req: Request,
    next: Next,
) -> Response {
    let who = caller_of(&req);
    let named = req
        .headers()
        .get(SESSION)
        .map(|v| v.to_str().map(str::to_string));
    let session = match named {
        None => {
            // A session begins here (an `initialize`): bound to its caller
            // as its ID leaves.
            let res = next.run(req).await;
            if let Some(id) = res.headers().get(SESSION).and_then(|v| v.to_str().ok()) {
                bindings.begun(id.to_string(), who);
            }
            return res;
        }
        Some(Ok(s)) => s,
        Some(Err(_)) => return missing(),
    };
    if !bindings.holds(&session, &who) {
        return missing();
    }
    let delete = req.method() == Method::DELETE;
    let res = next.run(req).await;
    if res.status() == StatusCode::NOT_FOUND || (delete && res.status().is_success()) {
        bindings.ended(&session);
    }
    res
}
