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

use axum::extract::{Request, State};
use axum::http::{header, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::app::App;
use crate::auth::{Caller, Recorded, Route};

/// The header that names a session (`Mcp-Session-Id`).
const SESSION: &str = "mcp-session-id";

/// The most live sessions of the daemon's `/mcp`: past it a new one is
/// refused (never another caller's ended to make room).
const MOST: usize = 4096;
/// The most live sessions of one caller: past it its new one is refused
/// until it ends one or one idles out. A session costs the daemon memory,
/// and a caller's sessions must not crowd out another's.
const PER_CALLER: usize = 16;
/// How long the MCP server keeps an unused session (rmcp's default
/// keep-alive), with a margin: a binding unused for longer is of a
/// session the server has ended.
const UNUSED: Duration = Duration::from_secs(300 + 30);

/// Who began each live session: a digest of its caller; and the sessions
/// being begun (their `initialize` under way), counted by caller.
#[derive(Default)]
pub(super) struct Bindings {
    map: Mutex<Live>,
}

/// One `/mcp` endpoint's check: its bindings, and where its refusals are
/// recorded (the daemon's log, at `path`).
pub(super) struct Door {
    pub bindings: Bindings,
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

#[derive(Default)]
struct Live {
    sessions: HashMap<String, ([u8; 32], Instant)>,
    beginning: HashMap<[u8; 32], usize>,
}

/// Why a new session was refused.
enum Full {
    Caller,
    Daemon,
}

/// A session being begun: its place is held until the answer says
/// whether the server made one.
struct Beginning<'a> {
    bindings: &'a Bindings,
    who: [u8; 32],
}

impl Drop for Beginning<'_> {
    fn drop(&mut self) {
        let mut live = self.bindings.map();
        if let Some(n) = live.beginning.get_mut(&self.who) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                live.beginning.remove(&self.who);
            }
        }
    }
}

impl Bindings {
    fn map(&self) -> std::sync::MutexGuard<'_, Live> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Hold a place for a new session of `who`, if its bound and the
    /// daemon's allow one.
    fn begin(&self, who: [u8; 32], owner: bool) -> Result<Beginning<'_>, Full> {
        let mut live = self.map();
        live.sessions.retain(|_, (_, used)| used.elapsed() < UNUSED);
        let pending: usize = live.beginning.values().sum();
        if live.sessions.len() + pending >= MOST {
            return Err(Full::Daemon);
        }
        let mine = live.sessions.values().filter(|(w, _)| *w == who).count()
            + live.beginning.get(&who).copied().unwrap_or(0);
        if !owner && mine >= PER_CALLER {
            return Err(Full::Caller);
        }
        *live.beginning.entry(who).or_default() += 1;
        Ok(Beginning {
            bindings: self,
            who,
        })
    }

    fn begun(&self, session: String, who: [u8; 32]) {
        self.map().sessions.insert(session, (who, Instant::now()));
    }

    /// Whether `session` was begun by `who` (and mark it used).
    fn holds(&self, session: &str, who: &[u8; 32]) -> bool {
        use subtle::ConstantTimeEq;
        let mut live = self.map();
        match live.sessions.get_mut(session) {
            Some((began, used)) if bool::from(began.ct_eq(who)) => {
                *used = Instant::now();
                true
            }
            _ => false,
        }
    }

    fn ended(&self, session: &str) {
        self.map().sessions.remove(session);
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

/// What the daemon's log says of a session named that is not one of the
/// caller's: the same words for another caller's and an unknown one.
const NOT_HELD: &str = "MCP session: the Mcp-Session-Id is not one of this caller's live sessions";

/// The answer to a session past a bound, as the API words the bounds of
/// its long-lived answers: `too_many_sessions`, the bound named in
/// `details.bound` (not `quota`, which is a token's quotas, passed only
/// by removing something: a session bound passes when a session ends).
fn refused(full: &Full) -> (StatusCode, String) {
    match full {
        Full::Caller => (
            StatusCode::TOO_MANY_REQUESTS,
            format!("this caller has {PER_CALLER} MCP sessions open, the most it may: end one (DELETE /mcp with its Mcp-Session-Id) or let one idle out"),
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
        Full::Caller => {
            e.with_details(serde_json::json!({ "bound": "per_token", "limit": PER_CALLER }))
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
    let bindings = &door.bindings;
    let route = Route::refused_at(req.method(), door.path);
    let who = caller_of(&req);
    let owner = matches!(req.extensions().get::<Caller>(), Some(Caller::Owner));
    let named = req
        .headers()
        .get(SESSION)
        .map(|v| v.to_str().map(str::to_string));
    let session = match named {
        None => {
            // A session begins here (an `initialize`), within the caller's
            // bound and the daemon's: bound to its caller as its ID leaves.
            let _place = match bindings.begin(who, owner) {
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
                bindings.begun(id.to_string(), who);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn begin_and_bind(b: &Bindings, who: [u8; 32], id: &str) -> bool {
        match b.begin(who, false) {
            Ok(place) => {
                b.begun(id.to_string(), who);
                drop(place);
                true
            }
            Err(_) => false,
        }
    }

    #[test]
    fn a_caller_past_its_bound_is_refused_and_another_callers_session_stays() {
        let b = Bindings::default();
        let (greedy, other) = ([1u8; 32], [2u8; 32]);
        assert!(begin_and_bind(&b, other, "theirs"));
        for i in 0..PER_CALLER {
            assert!(begin_and_bind(&b, greedy, &format!("s{i}")));
        }
        assert!(!begin_and_bind(&b, greedy, "one-more"));
        assert!(b.holds("theirs", &other));
        // Ending one of its own makes room for it.
        b.ended("s0");
        assert!(begin_and_bind(&b, greedy, "again"));
    }

    #[test]
    fn a_full_daemon_refuses_a_new_session_rather_than_end_a_live_one() {
        let b = Bindings::default();
        let victim = [9u8; 32];
        assert!(begin_and_bind(&b, victim, "victim"));
        for i in 0..MOST {
            let mut who = [0u8; 32];
            who[..8].copy_from_slice(&(i as u64).to_le_bytes());
            who[31] = 1;
            if !begin_and_bind(&b, who, &format!("s{i}")) {
                break;
            }
        }
        assert_eq!(b.map().sessions.len(), MOST);
        assert!(b.holds("victim", &victim), "a live session was ended");
    }

    #[test]
    fn sessions_unused_past_the_servers_keep_alive_no_longer_count() {
        let b = Bindings::default();
        let who = [3u8; 32];
        let long_ago = Instant::now()
            .checked_sub(UNUSED * 2)
            .unwrap_or_else(Instant::now);
        for i in 0..PER_CALLER {
            b.map().sessions.insert(format!("old{i}"), (who, long_ago));
        }
        assert!(begin_and_bind(&b, who, "new"));
    }

    #[test]
    fn sessions_being_begun_count_against_the_bound() {
        let b = Bindings::default();
        let who = [4u8; 32];
        let places: Vec<_> = (0..PER_CALLER)
            .map(|_| b.begin(who, false).ok().unwrap())
            .collect();
        assert!(b.begin(who, false).is_err());
        drop(places);
        assert!(b.begin(who, false).is_ok());
    }
}
