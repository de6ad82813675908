//! How many long-lived answers a caller holds open at once: terminals,
//! event and command streams, running commands (each holds a connection
//! to its sandbox's supervisor and a thread of the daemon for as long as
//! it runs, in the background or not), file watches, desktop views, relays
//! to a sandbox's port, reviews of a sandbox's changes and files lists
//! while they run, through every door (the native API, the E2B door,
//! MCP's calls of the native API). Each holds a
//! connection, a task, and often threads of its own for as long as its
//! client keeps it, so a token that opened them without end would take
//! the daemon's threads, descriptors and memory from everyone else,
//! its owner included. Every such answer takes a [`Lease`] before it
//! starts anything, and gives it back when it ends (its guard dropped).
//!
//! Two bounds apply, both the owner's to set in the daemon's
//! configuration (`sessions: {per_token, per_daemon}`): how many one
//! token (or one E2B access key) holds, and how many all of them hold
//! together. Past either the answer is 429 with the bound named. The
//! owner's own calls (the owner-only socket without a token) are counted
//! by neither: nothing a token does makes the owner wait for a place.
//! Some kinds have a bound of their own besides (files watches: half of
//! the daemon's inotify watches, so that one holder never takes them all).
//! No door keeps a count of its own: this ledger is the only one.
//!
//! A place is counted against the token that stands behind whatever
//! took it, not against each credential acting for it: a per-sandbox
//! token the E2B door mints for a sandbox's MCP counts against the token
//! it was minted for ([`Leases::acts_for`]), and a token made over the API
//! against the token that made it, up to the one the owner made
//! ([`Leases::with_makers`]). A child's sandbox quotas are carved out of
//! its maker's ([`crate::quota`]); its places are its maker's in the same
//! way, so neither a sandbox quota's worth of minted tokens nor a brood
//! of children multiplies one token's bound.
//!
//! The same configuration says how long a relay may carry nothing before
//! it is closed (`sessions: {idle_seconds}`, see [`crate::idle`]).

use axum::http::StatusCode;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::credential::Credential;
use crate::error::ApiError;

/// The bounds, as the daemon's configuration sets them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Bounds {
    /// Long-lived answers one token holds at once.
    #[serde(default = "default_per_token")]
    pub per_token: usize,
    /// Long-lived answers all tokens hold together.
    #[serde(default = "default_per_daemon")]
    pub per_daemon: usize,
    /// Seconds a relay may carry nothing either way before it is closed.
    #[serde(default = "default_idle_seconds")]
    pub idle_seconds: u64,
}

fn default_per_token() -> usize {
    32
}

fn default_per_daemon() -> usize {
    256
}

fn default_idle_seconds() -> u64 {
    600
}

impl Default for Bounds {
    fn default() -> Bounds {
        Bounds {
            per_token: default_per_token(),
            per_daemon: default_per_daemon(),
            idle_seconds: default_idle_seconds(),
        }
    }
}

impl Bounds {
    /// Bounds of zero would refuse every terminal, and a timeout of zero
    /// close every relay at once: said when read.
    pub fn check(&self) -> Result<(), String> {
        if self.per_token == 0 || self.per_daemon == 0 {
            return Err("sessions: per_token and per_daemon are at least 1".into());
        }
        if self.idle_seconds == 0 {
            return Err("sessions: idle_seconds is at least 1".into());
        }
        Ok(())
    }
}

/// What a lease is for, as a refusal names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Terminal,
    EventStream,
    CommandStream,
    /// A command started in a sandbox, for as long as it runs.
    Command,
    Watch,
    Desktop,
    /// A request or WebSocket relayed to a port inside a sandbox.
    PortRelay,
    /// A review of a sandbox's changes, for as long as it runs.
    Review,
    /// A page of a directory's entries, while it is read.
    List,
}

/// Files watches one holder may hold among its long-lived answers; the
/// watch route's own bound per token ([`crate::routes::watch`], 12) is
/// the lower and the one met first.
pub const WATCHES_PER_HOLDER: usize = 16;

impl Kind {
    fn what(self) -> &'static str {
        match self {
            Kind::Terminal => "a terminal",
            Kind::EventStream => "an event stream",
            Kind::CommandStream => "a command's input or output stream",
            Kind::Command => "a command",
            Kind::Watch => "a files watch",
            Kind::Desktop => "a desktop view",
            Kind::PortRelay => "a relay to a sandbox's port",
            Kind::Review => "a review of a sandbox's changes",
            Kind::List => "a files list",
        }
    }

    /// What several of the kind are called, for a refusal.
    fn plural(self) -> &'static str {
        match self {
            Kind::Terminal => "terminals",
            Kind::EventStream => "event streams",
            Kind::CommandStream => "command streams",
            Kind::Command => "running commands",
            Kind::Watch => "files watches",
            Kind::Desktop => "desktop views",
            Kind::PortRelay => "relays",
            Kind::Review => "reviews",
            Kind::List => "files lists",
        }
    }

    /// The kind's own bound per holder, below the token's, if it has one.
    fn own_bound(self) -> Option<usize> {
        match self {
            Kind::Watch => Some(WATCHES_PER_HOLDER),
            _ => None,
        }
    }
}

/// The token that made a token over the API, if one did (the daemon's
/// records answer it); `None` for a token the owner made.
pub type Makers = Box<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// How many makers up a token's chain is followed: deeper chains are
/// counted at the token this many makers up (tokens made over the API
/// nest no deeper in practice; a bound keeps a loop in the records from
/// holding the ledger).
const CHAIN: usize = 32;

/// The long-lived answers held now, by holder.
#[derive(Default)]
pub struct Leases {
    bounds: Bounds,
    held: Mutex<Held>,
    /// Tokens minted to act for another (the E2B door's per-sandbox MCP
    /// tokens): minted id -> the id of the token it acts for.
    acting: Mutex<HashMap<String, String>>,
    /// Who made a token (see [`Makers`]).
    makers: Option<Makers>,
}

impl std::fmt::Debug for Leases {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leases")
            .field("bounds", &self.bounds)
            .field("held", &self.held)
            .finish_non_exhaustive()
    }
}

#[derive(Debug, Default)]
struct Held {
    total: usize,
    by_holder: HashMap<String, usize>,
    /// Of the kinds with a bound of their own, by holder and kind.
    by_kind: HashMap<(String, KindKey), usize>,
}

/// A kind as a map key (its refusal words are not part of it).
type KindKey = std::mem::Discriminant<Kind>;

/// One count down, removed at zero.
fn release<K: std::hash::Hash + Eq>(map: &mut HashMap<K, usize>, key: &K) {
    if let Some(n) = map.get_mut(key) {
        *n = n.saturating_sub(1);
        if *n == 0 {
            map.remove(key);
        }
    }
}

/// One long-lived answer's place, given back when dropped. The owner's
/// holds none.
#[derive(Debug)]
pub struct Lease {
    place: Option<(Arc<Leases>, String, Kind)>,
}

impl Drop for Lease {
    fn drop(&mut self) {
        let Some((leases, holder, kind)) = self.place.take() else {
            return;
        };
        let Ok(mut held) = leases.held.lock() else {
            return;
        };
        held.total = held.total.saturating_sub(1);
        release(&mut held.by_holder, &holder);
        if kind.own_bound().is_some() {
            release(&mut held.by_kind, &(holder, std::mem::discriminant(&kind)));
        }
    }
}

impl Lease {
    /// Whose place it is, as the ledger keys it (a token's id, or a hash
    /// of an E2B access key or a browser session, never the secret
    /// itself): what a command's record keeps, so that a restarted daemon
    /// that adopts the command counts its place again ([`Leases::restore`]).
    /// `None` for the owner's, which holds none.
    pub fn holder(&self) -> Option<&str> {
        self.place.as_ref().map(|(_, holder, _)| holder.as_str())
    }
}

impl Leases {
    pub fn new(bounds: Bounds) -> Arc<Leases> {
        Arc::new(Leases {
            bounds,
            ..Leases::default()
        })
    }

    /// [`Leases::new`], with the daemon's records to say who made a token:
    /// a token's places are counted against the token the owner made at
    /// the top of its makers.
    pub fn with_makers(bounds: Bounds, makers: Makers) -> Arc<Leases> {
        Arc::new(Leases {
            bounds,
            makers: Some(makers),
            ..Leases::default()
        })
    }

    /// The token `minted` acts for `parent`: its places are `parent`'s.
    pub fn acts_for(&self, minted: &str, parent: &str) {
        if minted == parent {
            return;
        }
        let mut acting = self.acting.lock().unwrap_or_else(|p| p.into_inner());
        acting.insert(minted.to_string(), parent.to_string());
    }

    /// `minted` acts for nobody any more (revoked).
    pub fn forget(&self, minted: &str) {
        let mut acting = self.acting.lock().unwrap_or_else(|p| p.into_inner());
        acting.remove(minted);
    }

    /// The token that stands behind the token `id`: the one it was minted
    /// for, or the one that made it, followed up to the top.
    pub fn behind(&self, id: &str) -> String {
        let mut at = id.to_string();
        for _ in 0..CHAIN {
            let minted_for = {
                let acting = self.acting.lock().unwrap_or_else(|p| p.into_inner());
                acting.get(&at).cloned()
            };
            let up = minted_for.or_else(|| self.makers.as_ref().and_then(|m| m(&at)));
            match up {
                Some(next) if next != at => at = next,
                _ => break,
            }
        }
        at
    }

    /// Who a credential's places are counted against, as the ledger keys
    /// it (see [`Lease::holder`]); `None` for the owner's calls. Other
    /// per-holder bounds (the files watches') key by it too.
    pub fn holder_of(&self, credential: &Credential) -> Option<String> {
        self.holder_and_name(credential).map(|(h, _)| h)
    }

    fn holder_and_name(&self, credential: &Credential) -> Option<(String, String)> {
        if let Some(t) = &credential.token {
            let top = self.behind(t);
            let shown = if &top == t {
                format!("token {t}")
            } else {
                format!("token {top} (with the tokens acting for it or made by it)")
            };
            return Some((format!("token:{top}"), shown));
        }
        holder_of(credential)
    }

    /// How long a relay may carry nothing before it is closed.
    pub fn idle(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.bounds.idle_seconds)
    }

    /// A place for `kind` opened with `credential`, or 429 naming the
    /// bound it would pass.
    pub fn take(self: &Arc<Self>, credential: &Credential, kind: Kind) -> Result<Lease, ApiError> {
        let Some((holder, shown)) = self.holder_and_name(credential) else {
            return Ok(Lease { place: None });
        };
        let mut held = self
            .held
            .lock()
            .map_err(|_| ApiError::internal("the daemon's session count is poisoned"))?;
        let mine = held.by_holder.get(&holder).copied().unwrap_or(0);
        let too_many = |bound: &str, limit: usize, message: String| {
            ApiError::new(StatusCode::TOO_MANY_REQUESTS, "too_many_sessions", message)
                .with_details(serde_json::json!({ "bound": bound, "limit": limit }))
        };
        if mine >= self.bounds.per_token {
            return Err(too_many(
                "per_token",
                self.bounds.per_token,
                format!(
                    "{shown} holds {mine} long-lived sessions (terminals, streams, running commands, watches, desktop views, relays to a sandbox's port), the most one token may hold at once ({} per token); close one before opening {}",
                    self.bounds.per_token,
                    kind.what()
                ),
            ));
        }
        if held.total >= self.bounds.per_daemon {
            // Filled by every token's sessions, which end without this
            // caller: a refusal that passes by itself, so it says when to
            // ask again (the caller's own bounds pass only when it closes
            // one of its own, and say so instead).
            let mut e = too_many(
                "per_daemon",
                self.bounds.per_daemon,
                format!(
                    "the daemon holds {} long-lived sessions for its tokens, the most it holds at once ({} per daemon); ask again once one ends (Retry-After), or close one of yours before opening {}",
                    held.total,
                    self.bounds.per_daemon,
                    kind.what()
                ),
            );
            e.retry_after = Some(crate::error::BUSY_RETRY_AFTER);
            return Err(e);
        }
        let key = (holder.clone(), std::mem::discriminant(&kind));
        if let Some(bound) = kind.own_bound() {
            let of_kind = held.by_kind.get(&key).copied().unwrap_or(0);
            if of_kind >= bound {
                return Err(too_many(
                    "per_kind",
                    bound,
                    format!(
                        "{shown} holds {of_kind} {}, the most one holder may have at once ({bound} per token); close one before opening {}",
                        kind.plural(),
                        kind.what()
                    ),
                ));
            }
            *held.by_kind.entry(key).or_insert(0) += 1;
        }
        held.total += 1;
        *held.by_holder.entry(holder.clone()).or_insert(0) += 1;
        Ok(Lease {
            place: Some((self.clone(), holder, kind)),
        })
    }

    /// The place `holder` held for `kind` before the daemon restarted, for
    /// an answer that went on meanwhile (a running command the new daemon
    /// adopts): counted again whatever the bounds, since what holds it is
    /// already there; given back when dropped, as any.
    pub fn restore(self: &Arc<Self>, holder: &str, kind: Kind) -> Lease {
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        if kind.own_bound().is_some() {
            *held
                .by_kind
                .entry((holder.to_string(), std::mem::discriminant(&kind)))
                .or_insert(0) += 1;
        }
        held.total += 1;
        *held.by_holder.entry(holder.to_string()).or_insert(0) += 1;
        Lease {
            place: Some((self.clone(), holder.to_string(), kind)),
        }
    }

    /// How many leases `credential`'s holder has now.
    pub fn held_by(&self, credential: &Credential) -> usize {
        let Some(holder) = self.holder_of(credential) else {
            return 0;
        };
        self.held
            .lock()
            .map(|h| h.by_holder.get(&holder).copied().unwrap_or(0))
            .unwrap_or(0)
    }
}

/// Whose place a credential takes, and how a refusal names it, before
/// the token behind it is looked for ([`Leases::behind`]): a token
/// (its browser sessions are the token's), or an E2B access key; the
/// owner's calls carry neither and hold no place. A secret (a key, a
/// session's cookie) is keyed by its hash: a command's record keeps its
/// holder ([`Lease::holder`]).
fn holder_of(credential: &Credential) -> Option<(String, String)> {
    if let Some(t) = &credential.token {
        return Some((format!("token:{t}"), format!("token {t}")));
    }
    if let Some((sandbox, key)) = &credential.envd {
        return Some((
            format!("envd:{sandbox}:{}", hashed(key)),
            format!("the access key of sandbox {sandbox}"),
        ));
    }
    credential.session.as_ref().map(|s| {
        (
            format!("session:{}", hashed(s)),
            "this browser session".to_string(),
        )
    })
}

/// SHA-256 of a secret, hex.
fn hashed(secret: &str) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(secret.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(id: &str) -> Credential {
        Credential {
            token: Some(id.into()),
            ..Credential::default()
        }
    }

    #[test]
    fn a_token_past_its_bound_is_refused_and_its_place_comes_back_when_one_ends() {
        let leases = Leases::new(Bounds {
            per_token: 2,
            per_daemon: 3,
            ..Bounds::default()
        });
        let a1 = leases.take(&token("a"), Kind::Terminal).unwrap();
        let _a2 = leases.take(&token("a"), Kind::Watch).unwrap();
        let e = leases.take(&token("a"), Kind::Terminal).unwrap_err();
        assert_eq!(e.status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(e.problem.code, "too_many_sessions");
        assert!(
            e.problem.message.contains("2 per token"),
            "{}",
            e.problem.message
        );
        // Another token has its own share, until the daemon's bound.
        let _b1 = leases.take(&token("b"), Kind::EventStream).unwrap();
        let e = leases.take(&token("b"), Kind::EventStream).unwrap_err();
        assert!(
            e.problem.message.contains("3 per daemon"),
            "{}",
            e.problem.message
        );
        // The daemon's bound passes as others' sessions end: it says when
        // to ask again; a token's own bound passes only as it closes one.
        assert_eq!(e.retry_after, Some(crate::error::BUSY_RETRY_AFTER));
        let own = leases.take(&token("a"), Kind::Terminal).unwrap_err();
        assert_eq!(own.retry_after, None);
        // The owner is counted by neither.
        for _ in 0..10 {
            let owner = leases.take(&Credential::default(), Kind::Terminal).unwrap();
            std::mem::forget(owner);
        }
        drop(a1);
        assert_eq!(leases.held_by(&token("a")), 1);
        assert!(leases.take(&token("b"), Kind::Terminal).is_ok());
    }

    #[test]
    fn watches_have_a_bound_per_holder_of_their_own_below_the_tokens() {
        let leases = Leases::new(Bounds {
            per_token: 64,
            per_daemon: 256,
            ..Bounds::default()
        });
        let mut held: Vec<Lease> = (0..WATCHES_PER_HOLDER)
            .map(|_| leases.take(&token("a"), Kind::Watch).unwrap())
            .collect();
        let e = leases.take(&token("a"), Kind::Watch).unwrap_err();
        assert_eq!(e.status, StatusCode::TOO_MANY_REQUESTS);
        assert!(
            e.problem
                .message
                .contains(&format!("{WATCHES_PER_HOLDER} files watches")),
            "{}",
            e.problem.message
        );
        // Other kinds, and other holders, are not held back by it.
        assert!(leases.take(&token("a"), Kind::PortRelay).is_ok());
        assert!(leases.take(&token("b"), Kind::Watch).is_ok());
        held.pop();
        assert!(leases.take(&token("a"), Kind::Watch).is_ok());
    }

    #[test]
    fn a_place_restored_after_a_restart_counts_against_its_holder_and_comes_back_when_dropped() {
        let leases = Leases::new(Bounds {
            per_token: 2,
            per_daemon: 8,
            ..Bounds::default()
        });
        let first = leases.take(&token("a"), Kind::Command).unwrap();
        let holder = first.holder().map(str::to_string).unwrap();
        // The daemon restarts: a new ledger, the command's place restored
        // from its record.
        drop(first);
        let leases = Leases::new(Bounds {
            per_token: 2,
            per_daemon: 8,
            ..Bounds::default()
        });
        let restored = leases.restore(&holder, Kind::Command);
        assert_eq!(leases.held_by(&token("a")), 1);
        let _second = leases.take(&token("a"), Kind::Terminal).unwrap();
        assert!(leases.take(&token("a"), Kind::Terminal).is_err());
        drop(restored);
        assert_eq!(leases.held_by(&token("a")), 1);
        assert!(leases.take(&token("a"), Kind::Terminal).is_ok());
    }

    #[test]
    fn tokens_minted_for_a_token_or_made_by_it_share_its_bound() {
        let bounds = Bounds {
            per_token: 3,
            per_daemon: 64,
            ..Bounds::default()
        };
        // "child" was made by "maker", "grandchild" by "child".
        let leases = Leases::with_makers(
            bounds,
            Box::new(|id| match id {
                "child" => Some("maker".into()),
                "grandchild" => Some("child".into()),
                _ => None,
            }),
        );
        leases.acts_for("mcp-1", "maker");
        leases.acts_for("mcp-2", "grandchild");
        let _a = leases.take(&token("mcp-1"), Kind::Command).unwrap();
        let _b = leases.take(&token("mcp-2"), Kind::Command).unwrap();
        let _c = leases.take(&token("grandchild"), Kind::Command).unwrap();
        let e = leases.take(&token("maker"), Kind::Command).unwrap_err();
        assert_eq!(e.problem.code, "too_many_sessions");
        assert!(
            e.problem.message.contains("3 per token"),
            "{}",
            e.problem.message
        );
        assert!(leases.take(&token("mcp-1"), Kind::Command).is_err());
        assert_eq!(leases.held_by(&token("maker")), 3);
        // Another token the owner made has its own share.
        assert!(leases.take(&token("other"), Kind::Command).is_ok());
        // A minted token revoked acts for nobody: its next place is its own.
        leases.forget("mcp-1");
        assert!(leases.take(&token("mcp-1"), Kind::Command).is_ok());
    }

    #[test]
    fn a_holder_kept_in_the_records_holds_no_secret() {
        let leases = Leases::new(Bounds::default());
        let key = Credential {
            envd: Some(("sb-1".into(), "e2b_secretkey".into())),
            ..Credential::default()
        };
        let session = Credential {
            session: Some("cookie-secret".into()),
            ..Credential::default()
        };
        for c in [&key, &session] {
            let lease = leases.take(c, Kind::Command).unwrap();
            let holder = lease.holder().unwrap();
            assert!(
                !holder.contains("secret"),
                "the holder names the secret: {holder}"
            );
            // The same credential is the same holder.
            assert_eq!(leases.held_by(c), 1);
        }
    }
}
