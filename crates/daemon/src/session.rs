//! Browser sessions for the dashboard. A person logs in with a token
//! (`POST /login`); the daemon checks it as it checks a bearer token,
//! keeps a session in memory, and sets a cookie naming it (`HttpOnly`:
//! no script reads it; `SameSite=Strict`: no other site's page sends
//! it). The API then takes that cookie in place of `Authorization`, with
//! the token's own scopes, and only under the rules of [`check_request`]:
//! every request carries the session's CSRF token (in `X-Warden-CSRF`;
//! a read that cannot set headers, an `EventSource` or a WebSocket, in
//! the query's `csrf`), a request that changes anything or opens a
//! WebSocket comes from the daemon's own origin.
//!
//! The cookie alone is worth nothing: a browser sends it to every port of
//! the daemon's host (cookies do not separate ports, and `SameSite` counts
//! the ports of one host as one site), so a sandbox's published dev
//! server the person opens, or any other local service, receives it. The
//! CSRF token is kept by the page in its origin's own storage, which no
//! other port reads, and is given out only at login. Sessions hold the
//! token's id, not the token: revoking the token ends its sessions at
//! their next request.
//!
//! Sessions are counted against the token behind the one that logged in
//! (the token that made it over the API, or the one a per-sandbox token
//! was minted for, up to the one the owner made: [`crate::leases`]'s
//! `behind`), so that a brood of child tokens logging in does not
//! multiply one token's share. A full daemon never ends another token's
//! session to make room: the login is refused instead.

use axum::http::{HeaderMap, Method, Uri};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::Mutex;
use subtle::ConstantTimeEq;

use crate::auth::random_id;

/// The cookie that names a session.
pub const COOKIE: &str = "warden_session";
/// The header that carries a session's CSRF token.
pub const CSRF_HEADER: &str = "x-warden-csrf";
/// How long a session lasts without a new login.
pub const LIFETIME_MS: u64 = 12 * 3600 * 1000;
/// Sessions kept at most: past it a login is refused, never another
/// token's session ended.
pub const MAX_SESSIONS: usize = 256;
/// Sessions of one token (with the tokens made by it or minted for it)
/// kept at most: a new login past it drops that token's own oldest, so
/// that logging in over and over (any token holder can) never pushes out
/// another's.
pub const MAX_PER_TOKEN: usize = 16;

/// One logged-in browser.
#[derive(Debug, Clone)]
pub struct Session {
    /// The token it logged in with (its id; the secret is not kept).
    pub token_id: String,
    /// The token it is counted against: `token_id`'s maker at the top,
    /// or the token it was minted for.
    pub counted_as: String,
    /// What a state-changing request must carry in [`CSRF_HEADER`].
    pub csrf: String,
    pub created_ms: u64,
}

/// Why a browser request was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SessionError {
    #[error("the session is unknown or has expired: log in again")]
    Unknown,
    #[error("the request comes from {origin}, not from this daemon's own page ({expected}): cross-site requests are refused")]
    ForeignOrigin { origin: String, expected: String },
    #[error("the request says neither where it comes from (Origin) nor that it is same-origin (Sec-Fetch-Site): a state-changing browser request must")]
    NoOrigin,
    #[error("the request lacks the session's CSRF token in the X-Warden-CSRF header (the dashboard sends it with every request; POST /login gives it)")]
    Csrf,
    #[error("the daemon keeps {MAX_SESSIONS} browser sessions, the most it keeps, none of them this token's: log out of another browser, or try again when one expires")]
    Full,
}

fn hash(secret: &str) -> String {
    let digest = Sha256::digest(secret.as_bytes());
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// The sessions of this daemon's life (a restart logs everyone out).
#[derive(Debug, Default)]
pub struct Sessions {
    /// By the SHA-256 of the cookie's value.
    map: Mutex<HashMap<String, Session>>,
}

impl Sessions {
    /// A new session for `token_id`, counted against `counted_as` (the
    /// token behind it): the cookie's value and the session. Past the
    /// token's bound its own oldest session ends; a full daemon ends the
    /// token's own oldest if it has one, else refuses ([`SessionError::Full`]).
    pub fn open(
        &self,
        token_id: &str,
        counted_as: &str,
        now_ms: u64,
    ) -> Result<(String, Session), SessionError> {
        let id = format!("{}{}", random_id(16), random_id(16));
        let session = Session {
            token_id: token_id.to_string(),
            counted_as: counted_as.to_string(),
            csrf: format!("{}{}", random_id(16), random_id(16)),
            created_ms: now_ms,
        };
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        map.retain(|_, s| now_ms.saturating_sub(s.created_ms) < LIFETIME_MS);
        let mut own: Vec<(String, u64)> = map
            .iter()
            .filter(|(_, s)| s.counted_as == counted_as)
            .map(|(k, s)| (k.clone(), s.created_ms))
            .collect();
        own.sort_by_key(|(_, created)| *created);
        let over_own = (own.len() + 1).saturating_sub(MAX_PER_TOKEN);
        let over_all = (map.len() + 1).saturating_sub(MAX_SESSIONS);
        let extra = over_own.max(over_all);
        if extra > own.len() {
            return Err(SessionError::Full);
        }
        for (k, _) in own.into_iter().take(extra) {
            map.remove(&k);
        }
        map.insert(hash(&id), session.clone());
        Ok((id, session))
    }

    /// The session a cookie's value names, if it is alive.
    pub fn get(&self, id: &str, now_ms: u64) -> Option<Session> {
        let map = self.map.lock().ok()?;
        map.get(&hash(id))
            .filter(|s| now_ms.saturating_sub(s.created_ms) < LIFETIME_MS)
            .cloned()
    }

    /// The live session among those a request's cookies name (another
    /// page of the host may have planted cookies of the same name): the
    /// one whose CSRF token the request carries, else the first live one
    /// (which [`check_request`] then refuses).
    pub fn find(
        &self,
        ids: &[String],
        csrf: Option<&str>,
        now_ms: u64,
    ) -> Option<(String, Session)> {
        let live: Vec<(String, Session)> = ids
            .iter()
            .filter_map(|id| self.get(id, now_ms).map(|s| (id.clone(), s)))
            .collect();
        let given = csrf.unwrap_or("");
        live.iter()
            .find(|(_, s)| bool::from(given.as_bytes().ct_eq(s.csrf.as_bytes())))
            .or(live.first())
            .cloned()
    }

    /// End the session a cookie's value names.
    pub fn close(&self, id: &str) {
        if let Ok(mut map) = self.map.lock() {
            map.remove(&hash(id));
        }
    }
}

/// The session cookie's values in a request's `Cookie` headers (more
/// than one when a page of another port of the host planted its own).
pub fn cookies(headers: &HeaderMap) -> Vec<String> {
    headers
        .get_all(axum::http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .filter(|(k, _)| *k == COOKIE)
        .map(|(_, v)| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .take(8)
        .collect()
}

/// The CSRF token a query carries (`csrf=`), for the reads a browser
/// cannot give headers to.
fn query_csrf(uri: &Uri) -> Option<&str> {
    uri.query()?
        .split('&')
        .find_map(|kv| kv.strip_prefix("csrf="))
}

/// The CSRF token a request carries: its header, or for a read its
/// query's.
pub fn given_csrf<'a>(method: &Method, headers: &'a HeaderMap, uri: &'a Uri) -> Option<&'a str> {
    match headers.get(CSRF_HEADER).and_then(|v| v.to_str().ok()) {
        Some(v) => Some(v),
        None if safe(method) => query_csrf(uri),
        None => None,
    }
}

/// `uri` without its query's CSRF token, which is the session's business
/// and no route's (routes refuse query fields they do not know).
pub fn strip_csrf(uri: &Uri) -> Option<Uri> {
    let query = uri.query()?;
    if query_csrf(uri).is_none() && !query.split('&').any(|kv| kv == "csrf") {
        return None;
    }
    let rest: Vec<&str> = query
        .split('&')
        .filter(|kv| *kv != "csrf" && !kv.starts_with("csrf="))
        .collect();
    let path_and_query = if rest.is_empty() {
        uri.path().to_string()
    } else {
        format!("{}?{}", uri.path(), rest.join("&"))
    };
    let mut parts = uri.clone().into_parts();
    parts.path_and_query = path_and_query.parse().ok();
    Uri::from_parts(parts).ok()
}

/// `Set-Cookie` for a new session.
pub fn set_cookie(id: &str) -> String {
    format!(
        "{COOKIE}={id}; HttpOnly; SameSite=Strict; Path=/; Max-Age={}",
        LIFETIME_MS / 1000
    )
}

/// `Set-Cookie` that removes the session's cookie.
pub fn clear_cookie() -> String {
    format!("{COOKIE}=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0")
}

/// The daemon's own origin as the browser names it: `http://` and the
/// `Host` it was reached at.
fn own_origin(headers: &HeaderMap) -> Option<String> {
    headers
        .get(axum::http::header::HOST)
        .and_then(|v| v.to_str().ok())
        .map(|h| format!("http://{}", h.trim()))
}

/// Whether `origin` is the daemon's own: the `Host` it was reached at,
/// over HTTP or (behind a TLS proxy that keeps `Host`) HTTPS.
fn is_own(origin: &str, expected: &str) -> bool {
    let Some(host) = expected.strip_prefix("http://") else {
        return false;
    };
    !host.is_empty() && (origin == expected || origin == format!("https://{host}"))
}

/// Whether a request comes from the daemon's own page. An `Origin` that
/// names anything else is refused whatever the method; a request without
/// one passes only when `required` is false or `Sec-Fetch-Site` says
/// `same-origin`.
pub fn check_origin(headers: &HeaderMap, required: bool) -> Result<(), SessionError> {
    let expected = own_origin(headers).unwrap_or_default();
    match headers.get(axum::http::header::ORIGIN) {
        Some(o) => {
            let origin = o.to_str().unwrap_or("(not text)").to_string();
            if is_own(&origin, &expected) {
                Ok(())
            } else {
                Err(SessionError::ForeignOrigin { origin, expected })
            }
        }
        None => {
            let same = headers
                .get("sec-fetch-site")
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| v == "same-origin");
            if required && !same {
                Err(SessionError::NoOrigin)
            } else {
                Ok(())
            }
        }
    }
}

/// Whether a method changes nothing (and so needs no CSRF token).
fn safe(method: &Method) -> bool {
    matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// Whether a request asks for a WebSocket.
fn websocket(headers: &HeaderMap) -> bool {
    headers
        .get(axum::http::header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"))
}

/// The rules a request that authenticates with the session cookie must
/// meet, besides naming a live session: from the daemon's own origin
/// when it says where it comes from; when it changes anything, or opens
/// a WebSocket (which a page of another origin could open with the
/// cookie), from the daemon's own origin for certain; always with the
/// session's CSRF token (`csrf`, from [`given_csrf`]), since the cookie
/// reaches every port of the host.
pub fn check_request(
    session: &Session,
    method: &Method,
    headers: &HeaderMap,
    csrf: Option<&str>,
) -> Result<(), SessionError> {
    let changes = !safe(method);
    check_origin(headers, changes || websocket(headers))?;
    let given = csrf.unwrap_or("");
    let same: bool = given.as_bytes().ct_eq(session.csrf.as_bytes()).into();
    if !same {
        return Err(SessionError::Csrf);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn chk(session: &Session, method: &Method, h: &HeaderMap) -> Result<(), SessionError> {
        let uri = Uri::from_static("/v1/x");
        check_request(session, method, h, given_csrf(method, h, &uri))
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn a_session_is_found_by_its_cookie_only_until_it_expires_or_closes() {
        let s = Sessions::default();
        let (id, session) = s.open("tok1", "tok1", 1000).unwrap();
        assert_eq!(s.get(&id, 2000).unwrap().token_id, "tok1");
        assert!(s.get(&format!("{id}x"), 2000).is_none());
        assert!(s.get(&id, 1000 + LIFETIME_MS).is_none());
        assert_ne!(session.csrf, id);
        s.close(&id);
        assert!(s.get(&id, 2000).is_none());
        let h = headers(&[("cookie", &format!("a=b; {COOKIE}={id}; c=d"))]);
        assert_eq!(cookies(&h), vec![id.clone()]);
        let planted = headers(&[("cookie", &format!("{COOKIE}=x; a=b; {COOKIE}={id}"))]);
        let found = s.find(&cookies(&planted), Some(&session.csrf), 2000);
        assert!(found.is_none(), "closed");
        let (id2, s2) = s.open("tok2", "tok2", 1000).unwrap();
        let (id3, s3) = s.open("tok3", "tok3", 1000).unwrap();
        let both = vec![id2.clone(), id3.clone()];
        assert_eq!(s.find(&both, Some(&s3.csrf), 2000).unwrap().0, id3);
        assert_eq!(s.find(&both, Some(&s2.csrf), 2000).unwrap().0, id2);
        assert_eq!(s.find(&both, None, 2000).unwrap().0, id2);
    }

    #[test]
    fn one_token_logging_in_again_and_again_drops_only_its_own_oldest() {
        let s = Sessions::default();
        let (person, _) = s.open("admin", "admin", 1).unwrap();
        let first: Vec<String> = (0..MAX_PER_TOKEN as u64)
            .map(|i| s.open("agent", "agent", 10 + i).unwrap().0)
            .collect();
        for i in 0..(2 * MAX_SESSIONS as u64) {
            s.open("agent", "agent", 100 + i).unwrap();
        }
        assert!(s.get(&person, 2000).is_some());
        assert!(first.iter().all(|id| s.get(id, 2000).is_none()));
    }

    #[test]
    fn a_brood_of_child_tokens_shares_its_makers_bound_and_never_ends_anothers_session() {
        let s = Sessions::default();
        let (person, _) = s.open("admin", "admin", 1).unwrap();
        // 300 children of "agent", each logging in once.
        for i in 0..300u64 {
            s.open(&format!("child-{i}"), "agent", 10 + i).unwrap();
        }
        assert!(s.get(&person, 2000).is_some());
        let counted = s.map.lock().unwrap();
        let agents = counted.values().filter(|x| x.counted_as == "agent").count();
        assert_eq!(agents, MAX_PER_TOKEN);
        drop(counted);
        // A daemon full of other tokens' sessions refuses a new token's
        // login rather than end one of theirs.
        let full = Sessions::default();
        for t in 0..(MAX_SESSIONS / MAX_PER_TOKEN) {
            for i in 0..MAX_PER_TOKEN as u64 {
                full.open(&format!("t{t}"), &format!("t{t}"), i).unwrap();
            }
        }
        assert_eq!(
            full.open("late", "late", 50).err(),
            Some(SessionError::Full)
        );
        // One of the daemon's tokens logging in again ends its own oldest.
        assert!(full.open("t0", "t0", 60).is_ok());
    }

    #[test]
    fn a_state_change_needs_the_csrf_token_and_the_own_origin() {
        let s = Sessions::default();
        let (_, session) = s.open("tok1", "tok1", 1000).unwrap();
        let own = [
            ("host", "127.0.0.1:7000"),
            ("origin", "http://127.0.0.1:7000"),
        ];
        let mut with = own.to_vec();
        let csrf = session.csrf.clone();
        with.push(("x-warden-csrf", &csrf));
        assert_eq!(chk(&session, &Method::POST, &headers(&with)), Ok(()));
        assert_eq!(
            chk(&session, &Method::POST, &headers(&own)),
            Err(SessionError::Csrf)
        );
        let foreign = [
            ("host", "127.0.0.1:7000"),
            ("origin", "http://127.0.0.1:7001"),
            ("x-warden-csrf", &csrf),
        ];
        assert!(matches!(
            chk(&session, &Method::DELETE, &headers(&foreign)),
            Err(SessionError::ForeignOrigin { .. })
        ));
        assert!(matches!(
            chk(&session, &Method::GET, &headers(&foreign)),
            Err(SessionError::ForeignOrigin { .. })
        ));
        let bare = [("host", "127.0.0.1:7000"), ("x-warden-csrf", &csrf)];
        assert_eq!(
            chk(&session, &Method::PATCH, &headers(&bare)),
            Err(SessionError::NoOrigin)
        );
        assert_eq!(chk(&session, &Method::GET, &headers(&bare[1..])), Ok(()));
        assert_eq!(
            chk(&session, &Method::GET, &headers(&bare[..1])),
            Err(SessionError::Csrf)
        );
        // A read may carry the token in its query; a change may not.
        let q = Uri::try_from(format!("/v1/x?since=3&csrf={csrf}")).unwrap();
        let h = headers(&own);
        let given = given_csrf(&Method::GET, &h, &q);
        assert_eq!(check_request(&session, &Method::GET, &h, given), Ok(()));
        let given = given_csrf(&Method::POST, &h, &q);
        assert_eq!(
            check_request(&session, &Method::POST, &h, given),
            Err(SessionError::Csrf)
        );
        assert_eq!(strip_csrf(&q).unwrap(), "/v1/x?since=3");
        let only = Uri::try_from(format!("/v1/x?csrf={csrf}")).unwrap();
        assert_eq!(strip_csrf(&only).unwrap(), "/v1/x");
        assert!(strip_csrf(&Uri::from_static("/v1/x?since=3")).is_none());
        let tls = [
            ("host", "warden.example"),
            ("origin", "https://warden.example"),
            ("x-warden-csrf", &csrf),
        ];
        assert_eq!(chk(&session, &Method::GET, &headers(&tls)), Ok(()));
        let ws = [("host", "127.0.0.1:7000"), ("upgrade", "websocket")];
        assert_eq!(
            chk(&session, &Method::GET, &headers(&ws)),
            Err(SessionError::NoOrigin)
        );
    }
}
