//! Who may call what. The Unix socket is owner-only: a caller there
//! without a token is the owner. Every other call carries a token
//! (`Authorization: Bearer wdn_ID_SECRET`); tokens are kept hashed
//! (SHA-256), compared in constant time, and carry scopes. [`ROUTES`] is
//! the one table that says which scope each route needs; a route missing
//! from it is refused to everyone (fail closed), and a test walks every
//! route with a token that lacks its scope.

use axum::http::Method;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::db::{Db, DbError, TokenRow};
use warden_workspace::{Sandbox, Store, StoreError};

/// What a token may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Scope {
    /// List and look at sandboxes, their events and changes.
    #[serde(rename = "sandboxes:read")]
    SandboxesRead,
    /// Create, stop, pause, resume, remove sandboxes; change their TTL;
    /// commit changes.
    #[serde(rename = "sandboxes:write")]
    SandboxesWrite,
    /// Run commands in sandboxes.
    #[serde(rename = "exec")]
    Exec,
    /// Read and write files in sandboxes' workspaces.
    #[serde(rename = "files")]
    Files,
    /// Answer ask-mode questions.
    #[serde(rename = "approvals")]
    Approvals,
    /// Use the MCP endpoint (`/mcp`); each tool is checked again against
    /// the scope of the API route it calls.
    #[serde(rename = "mcp")]
    Mcp,
    /// Watch a desktop sandbox's screen: screenshots and the view-only
    /// stream.
    #[serde(rename = "desktop:view")]
    DesktopView,
    /// Drive a desktop sandbox: mouse, keyboard, the interactive stream
    /// and the browser's DevTools endpoint; it grants `desktop:view` too
    /// ([`IMPLIED`]).
    #[serde(rename = "desktop:control")]
    DesktopControl,
    /// Everything, tokens included.
    #[serde(rename = "admin")]
    Admin,
}

impl Scope {
    pub const ALL: [Scope; 9] = [
        Scope::SandboxesRead,
        Scope::SandboxesWrite,
        Scope::Exec,
        Scope::Files,
        Scope::Approvals,
        Scope::Mcp,
        Scope::DesktopView,
        Scope::DesktopControl,
        Scope::Admin,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Scope::SandboxesRead => "sandboxes:read",
            Scope::SandboxesWrite => "sandboxes:write",
            Scope::Exec => "exec",
            Scope::Files => "files",
            Scope::Approvals => "approvals",
            Scope::Mcp => "mcp",
            Scope::DesktopView => "desktop:view",
            Scope::DesktopControl => "desktop:control",
            Scope::Admin => "admin",
        }
    }

    pub fn parse(s: &str) -> Option<Scope> {
        Scope::ALL.into_iter().find(|x| x.as_str() == s)
    }

    /// Whether a token that holds `self` may do what `needed` allows:
    /// the scope itself, `admin`, or a scope that [`IMPLIED`] says grants
    /// it.
    pub fn grants(self, needed: Scope) -> bool {
        self == needed
            || self == Scope::Admin
            || IMPLIED
                .iter()
                .any(|(held, implied, _)| *held == self && *implied == needed)
    }
}

/// Scopes that grant another, and why.
pub const IMPLIED: &[(Scope, Scope, &str)] = &[(
    Scope::DesktopControl,
    Scope::DesktopView,
    "a token that drives a desktop sees it: every action is aimed at what the screen shows",
)];

/// One route of the API and what it needs.
#[derive(Debug, Clone, Copy)]
pub struct Route {
    pub method: &'static str,
    /// As the router writes it, `{id}` for a sandbox.
    pub path: &'static str,
    /// `None`: anyone may call it (the OpenAPI document, the health check).
    pub scope: Option<Scope>,
    /// Part of one sandbox's data API: a per-sandbox token of that
    /// sandbox may call it.
    pub data: bool,
}

impl Route {
    /// A door's own place, outside the scope table, for the record of a
    /// refusal made there (the E2B door's sandbox API, a session's
    /// check): `path` names the place, `method` is the request's as the
    /// table spells methods (`*` for one it does not).
    pub fn refused_at(method: &Method, path: &'static str) -> Route {
        let method = match *method {
            Method::GET => "GET",
            Method::POST => "POST",
            Method::PUT => "PUT",
            Method::PATCH => "PATCH",
            Method::DELETE => "DELETE",
            Method::HEAD => "HEAD",
            Method::OPTIONS => "OPTIONS",
            _ => "*",
        };
        Route {
            method,
            path,
            scope: None,
            data: false,
        }
    }
}

const fn r(method: &'static str, path: &'static str, scope: Scope, data: bool) -> Route {
    Route {
        method,
        path,
        scope: Some(scope),
        data,
    }
}

/// Every route, with the scope it needs. The router and the OpenAPI
/// document are tested against this table.
pub const ROUTES: &[Route] = &[
    Route {
        method: "GET",
        path: "/v1/openapi.json",
        scope: None,
        data: false,
    },
    Route {
        method: "GET",
        path: "/v1/health",
        scope: None,
        data: false,
    },
    r("POST", "/v1/sandboxes", Scope::SandboxesWrite, false),
    r("GET", "/v1/sandboxes", Scope::SandboxesRead, false),
    r("GET", "/v1/sandboxes/{id}", Scope::SandboxesRead, true),
    r("DELETE", "/v1/sandboxes/{id}", Scope::SandboxesWrite, false),
    r(
        "POST",
        "/v1/sandboxes/{id}/start",
        Scope::SandboxesWrite,
        false,
    ),
    r(
        "POST",
        "/v1/sandboxes/{id}/stop",
        Scope::SandboxesWrite,
        false,
    ),
    r(
        "POST",
        "/v1/sandboxes/{id}/timeout",
        Scope::SandboxesWrite,
        false,
    ),
    r(
        "POST",
        "/v1/sandboxes/{id}/pause",
        Scope::SandboxesWrite,
        false,
    ),
    r(
        "POST",
        "/v1/sandboxes/{id}/resume",
        Scope::SandboxesWrite,
        false,
    ),
    r(
        "POST",
        "/v1/sandboxes/{id}/snapshots",
        Scope::SandboxesWrite,
        false,
    ),
    r(
        "POST",
        "/v1/sandboxes/{id}/fork",
        Scope::SandboxesWrite,
        false,
    ),
    r("GET", "/v1/snapshots", Scope::SandboxesRead, false),
    r(
        "DELETE",
        "/v1/snapshots/{name}",
        Scope::SandboxesWrite,
        false,
    ),
    r(
        "POST",
        "/v1/snapshots/{name}/sandboxes",
        Scope::SandboxesWrite,
        false,
    ),
    r("POST", "/v1/sandboxes/{id}/exec", Scope::Exec, true),
    r("GET", "/v1/sandboxes/{id}/execs", Scope::Exec, true),
    r("GET", "/v1/sandboxes/{id}/execs/{exec}", Scope::Exec, true),
    r(
        "GET",
        "/v1/sandboxes/{id}/execs/{exec}/output",
        Scope::Exec,
        true,
    ),
    r(
        "POST",
        "/v1/sandboxes/{id}/execs/{exec}/stdin",
        Scope::Exec,
        true,
    ),
    r(
        "POST",
        "/v1/sandboxes/{id}/execs/{exec}/signal",
        Scope::Exec,
        true,
    ),
    r("GET", "/v1/sandboxes/{id}/pty", Scope::Exec, true),
    r(
        "GET",
        "/v1/sandboxes/{id}/changes",
        Scope::SandboxesRead,
        true,
    ),
    r(
        "POST",
        "/v1/sandboxes/{id}/commit",
        Scope::SandboxesWrite,
        false,
    ),
    r(
        "POST",
        "/v1/sandboxes/{id}/discard",
        Scope::SandboxesWrite,
        false,
    ),
    r(
        "GET",
        "/v1/sandboxes/{id}/events",
        Scope::SandboxesRead,
        true,
    ),
    r("GET", "/v1/sandboxes/{id}/files", Scope::Files, true),
    r("PUT", "/v1/sandboxes/{id}/files", Scope::Files, true),
    r("DELETE", "/v1/sandboxes/{id}/files", Scope::Files, true),
    r("GET", "/v1/sandboxes/{id}/files/list", Scope::Files, true),
    r("POST", "/v1/sandboxes/{id}/files/mkdir", Scope::Files, true),
    r("POST", "/v1/sandboxes/{id}/files/move", Scope::Files, true),
    // Changing a sandbox's network, and answering its questions, are the
    // owner's or a person's, never a per-sandbox token's: the agent a
    // sandbox's token is given to must not widen its own egress.
    r(
        "PATCH",
        "/v1/sandboxes/{id}/egress",
        Scope::SandboxesWrite,
        false,
    ),
    r("GET", "/v1/approvals", Scope::Approvals, false),
    r("POST", "/v1/approvals/{id}", Scope::Approvals, false),
    r("GET", "/v1/sandboxes/{id}/files/watch", Scope::Files, true),
    // A desktop sandbox's screen and browser, through the daemon only
    // (nothing of them listens on the host), part of its data API so that
    // the agent given its token can use its desktop. Watching (the state,
    // screenshots, the view-only stream) needs desktop:view; input (the
    // actions, the VNC session's input) and the browser's DevTools, which
    // are control whole, need desktop:control, which grants desktop:view.
    r(
        "GET",
        "/v1/sandboxes/{id}/desktop",
        Scope::DesktopView,
        true,
    ),
    r(
        "GET",
        "/v1/sandboxes/{id}/desktop/screenshot",
        Scope::DesktopView,
        true,
    ),
    r(
        "POST",
        "/v1/sandboxes/{id}/desktop/{action}",
        Scope::DesktopControl,
        true,
    ),
    r(
        "GET",
        "/v1/sandboxes/{id}/desktop/vnc",
        Scope::DesktopView,
        true,
    ),
    r(
        "GET",
        "/v1/sandboxes/{id}/desktop/cdp/json/version",
        Scope::DesktopControl,
        true,
    ),
    r(
        "GET",
        "/v1/sandboxes/{id}/desktop/cdp/json/version/",
        Scope::DesktopControl,
        true,
    ),
    r(
        "GET",
        "/v1/sandboxes/{id}/desktop/cdp/json/list",
        Scope::DesktopControl,
        true,
    ),
    r(
        "GET",
        "/v1/sandboxes/{id}/desktop/cdp/devtools/{kind}/{target}",
        Scope::DesktopControl,
        true,
    ),
    r("GET", "/v1/pools", Scope::SandboxesRead, false),
    r("GET", "/v1/profiles", Scope::SandboxesRead, false),
    r("GET", "/v1/fields", Scope::SandboxesRead, false),
    r("GET", "/v1/tokens", Scope::Admin, false),
    r("POST", "/v1/tokens", Scope::Admin, false),
    r("DELETE", "/v1/tokens/{token}", Scope::Admin, false),
    // MCP over streamable HTTP (one route, three methods). The scope lets a
    // token in; each tool is then one of the routes above, called with the
    // same token and checked against its own row.
    r("POST", "/mcp", Scope::Mcp, false),
    r("GET", "/mcp", Scope::Mcp, false),
    r("DELETE", "/mcp", Scope::Mcp, false),
];

/// The table's row for a request, if any.
pub fn route(method: &Method, matched: &str) -> Option<&'static Route> {
    ROUTES
        .iter()
        .find(|r| r.method == method.as_str() && r.path == matched)
}

/// Who is calling, as a credential (or the owner's socket) proved it:
/// the only type a handler that acts, and every helper that grants the
/// owner's rights (`reach`, the trust of a request, a review's override,
/// what a refusal shows), takes. Nobody, a request on TCP with no
/// credential, is never a `Caller`: the routes that need none receive a
/// [`Visitor`] instead, so that no such helper can be handed a stranger.
#[derive(Debug, Clone)]
pub enum Caller {
    /// On the owner-only Unix socket, without a token.
    Owner,
    Token(TokenRow),
}

/// Who calls a route that needs no credential (the scope table's public
/// rows, the dashboard's page, assets and login): a [`Caller`] when the
/// request carried one that stands (or came on the owner's socket),
/// otherwise nobody. The authorizing middleware gives a public route's
/// request a `Visitor`, and a [`Caller`] only when it is `Known`: a
/// handler of a public route that asked for a `Caller` would find none
/// and fail, never act as somebody.
#[derive(Debug, Clone)]
pub enum Visitor {
    /// On TCP, with no credential: anyone who can reach the listener.
    Anonymous,
    Known(Caller),
}

impl Visitor {
    /// The caller behind this visit, if any.
    pub fn caller(&self) -> Option<&Caller> {
        match self {
            Visitor::Anonymous => None,
            Visitor::Known(c) => Some(c),
        }
    }
}

/// Whom the daemon's audit log records a refused call against: a token by
/// its id; the owner and nobody have none (the reason says which).
pub trait Recorded {
    fn recorded_token(&self) -> Option<&str>;
}

impl Recorded for Caller {
    fn recorded_token(&self) -> Option<&str> {
        self.token_id()
    }
}

impl Recorded for Visitor {
    fn recorded_token(&self) -> Option<&str> {
        self.caller().and_then(Caller::token_id)
    }
}

impl Caller {
    /// The token's id (for records), none for the owner.
    pub fn token_id(&self) -> Option<&str> {
        match self {
            Caller::Owner => None,
            Caller::Token(t) => Some(&t.id),
        }
    }

    /// Whose the sandboxes this caller makes are, for what warden keeps
    /// beyond one sandbox (snapshots, a profile's caches): the owner's,
    /// or the token's by its id.
    pub fn owner(&self) -> warden_runtime::lifecycle::Owner<'_> {
        match self {
            Caller::Owner => warden_runtime::lifecycle::Owner::Machine,
            Caller::Token(t) => warden_runtime::lifecycle::Owner::Token(&t.id),
        }
    }

    /// Whether this caller holds `scope`, itself or through a scope that
    /// grants it (the owner holds every scope).
    pub fn holds(&self, scope: Scope) -> bool {
        match self {
            Caller::Owner => true,
            Caller::Token(t) => t
                .scopes
                .iter()
                .filter_map(|s| Scope::parse(s))
                .any(|held| held.grants(scope)),
        }
    }

    /// Whether this caller may call `route` for sandbox `sandbox`;
    /// otherwise why not.
    pub fn may(&self, route: &Route, sandbox: Option<&str>) -> Result<(), String> {
        let Some(needed) = route.scope else {
            return Ok(());
        };
        let token = match self {
            Caller::Owner => return Ok(()),
            Caller::Token(t) => t,
        };
        if let Some(only) = &token.sandbox {
            if !route.data {
                return Err(format!(
                    "token {} is for sandbox {only}'s data API only; {} {} is not part of it",
                    token.id, route.method, route.path
                ));
            }
            if sandbox != Some(only.as_str()) {
                return Err(format!("token {} is for sandbox {only} only", token.id));
            }
        }
        if self.holds(needed) {
            Ok(())
        } else {
            Err(format!(
                "token {} lacks the scope {} that {} {} needs",
                token.id,
                needed.as_str(),
                route.method,
                route.path
            ))
        }
    }
}

/// Why a token was not accepted.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error(
        "no token: send `Authorization: Bearer TOKEN` (create one with `warden token create`)"
    )]
    Missing,
    #[error("the Authorization header is not `Bearer wdn_...`")]
    Malformed,
    #[error("the token is not valid")]
    Invalid,
    #[error("the token {0} was revoked")]
    Revoked(String),
    #[error("the token {token} was made for a sandbox named {sandbox} that was removed; a sandbox's tokens end with it (make one for the sandbox that has the name now)")]
    Outlived { token: String, sandbox: String },
    #[error("the token {0} was made by a token that was revoked; a token ends with its maker")]
    MakerRevoked(String),
    #[error(transparent)]
    Db(#[from] DbError),
}

fn hash(secret: &str) -> String {
    let digest = Sha256::digest(secret.as_bytes());
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

fn random_bytes<const N: usize>() -> [u8; N] {
    let mut out = [0u8; N];
    // The kernel's generator; it fails only on kernels older than 3.17,
    // which warden does not run on (the bytes would then be all zero and
    // every token check would still compare hashes of them).
    let _ = getrandom::fill(&mut out);
    out
}

/// A new random identifier of `n` bytes, hex.
pub fn random_id(n: usize) -> String {
    let bytes: [u8; 16] = random_bytes();
    bytes[..n.min(16)]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

pub use crate::db::made_for;

/// What a token is now, as the check decides it: the one judgement both
/// the check of a request ([`standing`]) and the listings (`GET
/// /v1/tokens`, `warden token list`) show. Tokens do not expire, so no
/// state says so.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenState {
    /// Accepted.
    Live,
    /// Revoked itself.
    Revoked,
    /// Its maker (or its maker's maker) was revoked, or is not in the
    /// records: a token ends with the token that made it, even one a
    /// revocation's cascade did not reach (made while its maker was being
    /// revoked, or revoked by a warden before the cascade).
    MakerRevoked,
    /// A per-sandbox token whose sandbox is gone, or is a later sandbox
    /// that took the name.
    SandboxGone,
}

impl TokenState {
    /// Its stable name, as the listings show it.
    pub fn as_str(self) -> &'static str {
        match self {
            TokenState::Live => "live",
            TokenState::Revoked => "revoked",
            TokenState::MakerRevoked => "maker_revoked",
            TokenState::SandboxGone => "sandbox_gone",
        }
    }
}

/// How many makers up a token's line is followed: tokens made by tokens
/// are one generation deep; a longer line (a damaged record, a loop) is
/// taken as one that ends.
const MAKERS_FOLLOWED: usize = 8;

/// What token `row` is now (see [`TokenState`]).
pub fn state_of(db: &Db, store: &Store, row: &TokenRow) -> Result<TokenState, DbError> {
    if row.revoked {
        return Ok(TokenState::Revoked);
    }
    let mut maker = db.maker_of(&row.id)?;
    let mut followed = 0;
    while let Some(id) = maker {
        followed += 1;
        match db.token(&id)? {
            Some(t) if !t.revoked && followed <= MAKERS_FOLLOWED => maker = db.maker_of(&t.id)?,
            _ => return Ok(TokenState::MakerRevoked),
        }
    }
    if let Some(name) = &row.sandbox {
        // Anything but the sandbox it was made for (gone, a later one of
        // its name, a damaged record whose identity cannot be told): the
        // token is not taken.
        match store.get(name) {
            Ok(sb) if made_for(&sb, row.sandbox_uid.as_deref(), row.created_ms) => {}
            Ok(_) | Err(StoreError::NotFound(_)) | Err(_) => return Ok(TokenState::SandboxGone),
        }
    }
    Ok(TokenState::Live)
}

/// A token that matched, if it still stands ([`state_of`] says it is
/// live): not revoked, nor made by a token that was, and a per-sandbox
/// token's sandbox still there and still the one it was made for (not a
/// later sandbox that took the name).
pub fn standing(db: &Db, store: &Store, row: TokenRow) -> Result<TokenRow, AuthError> {
    match state_of(db, store, &row)? {
        TokenState::Live => Ok(row),
        TokenState::Revoked => Err(AuthError::Revoked(row.id)),
        TokenState::MakerRevoked => Err(AuthError::MakerRevoked(row.id)),
        TokenState::SandboxGone => Err(AuthError::Outlived {
            sandbox: row.sandbox.clone().unwrap_or_default(),
            token: row.id,
        }),
    }
}

/// The quotas a token is made with, whichever door makes it (`warden
/// token create`'s flags, `POST /v1/tokens`'s body): each one unset is
/// the daemon's `quotas:`, or without it the default ([`crate::quota`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TokenQuotas {
    /// Sandboxes it may have at once.
    pub max_sandboxes: Option<u64>,
    /// The memory limits of its sandboxes together, in bytes.
    pub max_memory: Option<u64>,
    /// The processes and threads of its sandboxes together.
    pub max_pids: Option<std::num::NonZeroU64>,
}

/// A new token held to `quotas`: its record (kept) and its text (shown
/// once). What both doors that make tokens call.
pub fn new_token_with(
    name: &str,
    scopes: &[Scope],
    sandbox: Option<&Sandbox>,
    quotas: TokenQuotas,
) -> (TokenRow, String) {
    let (row, text) = new_token(name, scopes, sandbox);
    let row = TokenRow {
        max_sandboxes: quotas.max_sandboxes,
        max_memory: quotas.max_memory,
        max_pids: quotas.max_pids,
        ..row
    };
    (row, text)
}

/// A new token: its record (kept) and its text (shown once). A
/// per-sandbox token is bound to `sandbox`'s identity.
pub fn new_token(name: &str, scopes: &[Scope], sandbox: Option<&Sandbox>) -> (TokenRow, String) {
    use base64::Engine;
    let id = random_id(6);
    let secret = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(random_bytes::<32>());
    let row = TokenRow {
        id: id.clone(),
        name: name.to_string(),
        hash: hash(&secret),
        scopes: scopes.iter().map(|s| s.as_str().to_string()).collect(),
        sandbox: sandbox.map(|sb| sb.name().to_string()),
        created_ms: warden_runtime::state::now_ms(),
        revoked: false,
        max_sandboxes: None,
        max_memory: None,
        max_pids: None,
        sandbox_uid: sandbox.map(Sandbox::uid),
    };
    (row, format!("wdn_{id}_{secret}"))
}

/// The token an `Authorization` header value names, checked: whole, not
/// revoked, and (a per-sandbox token) for the sandbox that has its
/// sandbox's name in `store` now.
pub fn check(db: &Db, store: &Store, header: Option<&str>) -> Result<TokenRow, AuthError> {
    let value = header.ok_or(AuthError::Missing)?;
    let token = value
        .strip_prefix("Bearer ")
        .ok_or(AuthError::Malformed)?
        .trim();
    let rest = token.strip_prefix("wdn_").ok_or(AuthError::Malformed)?;
    let (id, secret) = rest.split_once('_').ok_or(AuthError::Malformed)?;
    // The same work whether or not the id exists.
    let given = hash(secret);
    let row = db.token(id)?;
    let stored = row
        .as_ref()
        .map(|r| r.hash.clone())
        .unwrap_or_else(|| "0".repeat(64));
    let same: bool = given.as_bytes().ct_eq(stored.as_bytes()).into();
    match row {
        Some(r) if same => standing(db, store, r),
        _ => Err(AuthError::Invalid),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn db() -> (tempfile::TempDir, Db, Store) {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(&dir.path().join("d.db")).unwrap();
        let store = Store::open(dir.path().join("state")).unwrap();
        (dir, db, store)
    }

    fn sandbox(dir: &tempfile::TempDir, store: &Store, name: &str) -> Sandbox {
        let ws = dir.path().join(format!("ws-{name}"));
        std::fs::create_dir_all(&ws).unwrap();
        store
            .create(name, &warden_workspace::CreateOptions::new(ws))
            .unwrap()
    }

    #[test]
    fn a_token_is_accepted_only_whole_and_until_revoked() {
        let (_d, db, store) = db();
        let check = |h: Option<&str>| check(&db, &store, h);
        let (row, text) = new_token("ci", &[Scope::Exec], None);
        db.insert_token(&row).unwrap();
        let ok = check(Some(&format!("Bearer {text}"))).unwrap();
        assert_eq!(ok.id, row.id);
        assert!(!ok.hash.contains(&text[4..]), "kept hashed");
        let wrong = format!("Bearer {}x", text);
        assert!(matches!(check(Some(&wrong)), Err(AuthError::Invalid)));
        assert!(matches!(check(None), Err(AuthError::Missing)));
        assert!(matches!(
            check(Some("Basic abc")),
            Err(AuthError::Malformed)
        ));
        assert!(db.revoke_token(&row.id).unwrap());
        assert!(matches!(
            check(Some(&format!("Bearer {text}"))),
            Err(AuthError::Revoked(_))
        ));
    }

    #[test]
    fn a_per_sandbox_token_ends_with_its_sandbox_and_never_serves_a_namesake() {
        let (d, db, store) = db();
        let first = sandbox(&d, &store, "sb-a");
        let (row, text) = new_token("agent", &[Scope::Exec], Some(&first));
        db.insert_token(&row).unwrap();
        let bearer = format!("Bearer {text}");
        assert!(check(&db, &store, Some(&bearer)).is_ok());
        // Removed (behind the daemon's back, so nothing revoked it).
        store.remove("sb-a").unwrap();
        assert!(matches!(
            check(&db, &store, Some(&bearer)),
            Err(AuthError::Outlived { .. })
        ));
        let second = sandbox(&d, &store, "sb-a");
        assert_ne!(first.uid(), second.uid());
        assert!(matches!(
            check(&db, &store, Some(&bearer)),
            Err(AuthError::Outlived { .. })
        ));
        // A token the new sandbox was given works.
        let (row, text) = new_token("agent2", &[Scope::Exec], Some(&second));
        db.insert_token(&row).unwrap();
        assert!(check(&db, &store, Some(&format!("Bearer {text}"))).is_ok());
    }

    #[test]
    fn a_token_made_by_a_token_revoked_before_it_was_recorded_is_refused_and_listed_so() {
        let (d, db, store) = db();
        let (maker, _) = new_token("maker", &[Scope::Exec], None);
        db.insert_token(&maker).unwrap();
        // The maker's revocation lands between a create's check of the
        // maker and its record of the child: the cascade missed it.
        assert!(db.revoke_token(&maker.id).unwrap());
        let (child, text) = new_token("child", &[Scope::Exec], None);
        db.insert_token_by(&child, Some(&maker.id)).unwrap();
        assert!(matches!(
            check(&db, &store, Some(&format!("Bearer {text}"))),
            Err(AuthError::MakerRevoked(_))
        ));
        assert_eq!(
            state_of(&db, &store, &db.token(&child.id).unwrap().unwrap()).unwrap(),
            TokenState::MakerRevoked
        );
        // A per-sandbox token whose sandbox was removed behind the
        // daemon's back is listed as the check finds it.
        let sb = sandbox(&d, &store, "sb-a");
        let (only, _) = new_token("only", &[Scope::Exec], Some(&sb));
        db.insert_token(&only).unwrap();
        assert_eq!(state_of(&db, &store, &only).unwrap(), TokenState::Live);
        store.remove("sb-a").unwrap();
        assert_eq!(
            state_of(&db, &store, &only).unwrap(),
            TokenState::SandboxGone
        );
    }

    #[test]
    fn a_token_recorded_without_an_identity_is_held_to_when_it_was_made() {
        let (d, _db, store) = db();
        let sb = sandbox(&d, &store, "sb-a");
        let made = sb.created_ms();
        assert!(made_for(&sb, None, made + 5));
        assert!(!made_for(&sb, None, made.saturating_sub(1)));
        assert!(made_for(&sb, Some(&sb.uid()), 0));
        assert!(!made_for(&sb, Some("another"), u64::MAX));
    }

    #[test]
    fn a_per_sandbox_token_reaches_only_its_own_sandboxs_data_api() {
        let (d, _db, store) = db();
        let sb = sandbox(&d, &store, "sb-a");
        let (row, _) = new_token("agent", &[Scope::Exec, Scope::SandboxesWrite], Some(&sb));
        let caller = Caller::Token(row);
        let exec = ROUTES
            .iter()
            .find(|r| r.path == "/v1/sandboxes/{id}/exec")
            .unwrap();
        let delete = ROUTES
            .iter()
            .find(|r| r.method == "DELETE" && r.path == "/v1/sandboxes/{id}")
            .unwrap();
        assert!(caller.may(exec, Some("sb-a")).is_ok());
        assert!(caller.may(exec, Some("sb-b")).is_err());
        assert!(caller.may(delete, Some("sb-a")).is_err());
    }

    #[test]
    fn desktop_control_grants_desktop_view_and_not_the_other_way() {
        let route = |method: &str, path: &str| {
            ROUTES
                .iter()
                .find(|r| r.method == method && r.path == path)
                .unwrap()
        };
        let look = route("GET", "/v1/sandboxes/{id}/desktop/screenshot");
        let touch = route("POST", "/v1/sandboxes/{id}/desktop/{action}");
        let (control, _) = new_token("c", &[Scope::DesktopControl], None);
        let (view, _) = new_token("v", &[Scope::DesktopView], None);
        let (control, view) = (Caller::Token(control), Caller::Token(view));
        assert!(control.may(look, Some("a")).is_ok());
        assert!(control.may(touch, Some("a")).is_ok());
        assert!(view.may(look, Some("a")).is_ok());
        assert!(view.may(touch, Some("a")).is_err());
        // Nothing else is granted by desktop:control.
        for s in Scope::ALL {
            if ![Scope::DesktopControl, Scope::DesktopView].contains(&s) {
                assert!(!Scope::DesktopControl.grants(s), "{}", s.as_str());
            }
        }
    }

    #[test]
    fn every_route_but_the_public_ones_needs_a_scope() {
        for r in ROUTES {
            if r.scope.is_none() {
                assert!(
                    ["/v1/openapi.json", "/v1/health"].contains(&r.path),
                    "{} {} is public",
                    r.method,
                    r.path
                );
            }
        }
    }
}
