//! The ledger of the daemon's MCP sessions, one for every MCP endpoint
//! (`/mcp` and each sandbox's `/e2b/.../mcp`): who began each live
//! session (a digest of its caller), the token it counts against, and the
//! sessions being begun; and the bounds a new session is held to (see
//! [`super::bound`], which checks requests against it). It knows nothing
//! of the daemon's state, so that the daemon's state can hold it.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The most live sessions of the daemon's `/mcp`: past it a new one is
/// refused (never another caller's ended to make room).
pub(super) const MOST: usize = 4096;
/// The most live sessions of one token (with the tokens acting for it or
/// made by it), over all the daemon's MCP endpoints: past it its new one
/// is refused until it ends one or one idles out. A session costs the
/// daemon memory, and a token's sessions must not crowd out another's.
pub(super) const PER_TOKEN: usize = 32;
/// How long the MCP server keeps an unused session (rmcp's default
/// keep-alive), with a margin: a binding unused for longer is of a
/// session the server has ended.
pub(super) const UNUSED: Duration = Duration::from_secs(300 + 30);

/// Who began each live session: a digest of its caller, and the token it
/// counts against; and the sessions being begun (their `initialize`
/// under way), counted by that token. One for the whole daemon.
#[derive(Default)]
pub struct Bindings {
    map: Mutex<Live>,
}

/// One live session: who began it, the token it counts against (`None`:
/// the owner's), when it was last used.
struct Held {
    who: [u8; 32],
    counted: Option<String>,
    used: Instant,
}

#[derive(Default)]
struct Live {
    sessions: HashMap<String, Held>,
    beginning: HashMap<String, usize>,
}

/// Why a new session was refused.
pub(super) enum Full {
    /// The token behind the caller holds this many.
    Token(String),
    Daemon,
}

/// A session being begun: its place is held until the answer says
/// whether the server made one.
pub(super) struct Beginning<'a> {
    bindings: &'a Bindings,
    counted: Option<String>,
}

impl Drop for Beginning<'_> {
    fn drop(&mut self) {
        let Some(counted) = &self.counted else {
            return;
        };
        let mut live = self.bindings.map();
        if let Some(n) = live.beginning.get_mut(counted) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                live.beginning.remove(counted);
            }
        }
    }
}

impl Bindings {
    fn map(&self) -> std::sync::MutexGuard<'_, Live> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Hold a place for a new session counted against `counted` (`None`:
    /// the owner's, which neither bound refuses), if the token's bound and
    /// the daemon's allow one.
    pub(super) fn begin(&self, counted: Option<String>) -> Result<Beginning<'_>, Full> {
        let mut live = self.map();
        live.sessions.retain(|_, h| h.used.elapsed() < UNUSED);
        if let Some(token) = &counted {
            let pending: usize = live.beginning.values().sum();
            if live.sessions.len() + pending >= MOST {
                return Err(Full::Daemon);
            }
            let mine = live
                .sessions
                .values()
                .filter(|h| h.counted.as_ref() == Some(token))
                .count()
                + live.beginning.get(token).copied().unwrap_or(0);
            if mine >= PER_TOKEN {
                return Err(Full::Token(token.clone()));
            }
            *live.beginning.entry(token.clone()).or_default() += 1;
        }
        Ok(Beginning {
            bindings: self,
            counted,
        })
    }

    pub(super) fn begun(&self, session: String, who: [u8; 32], counted: Option<String>) {
        let held = Held {
            who,
            counted,
            used: Instant::now(),
        };
        self.map().sessions.insert(session, held);
    }

    /// Whether `session` was begun by `who` (and mark it used).
    pub(super) fn holds(&self, session: &str, who: &[u8; 32]) -> bool {
        use subtle::ConstantTimeEq;
        let mut live = self.map();
        match live.sessions.get_mut(session) {
            Some(h) if bool::from(h.who.ct_eq(who)) => {
                h.used = Instant::now();
                true
            }
            _ => false,
        }
    }

    pub(super) fn ended(&self, session: &str) {
        self.map().sessions.remove(session);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tok(t: &str) -> Option<String> {
        Some(t.to_string())
    }

    fn begin_and_bind(b: &Bindings, who: [u8; 32], counted: Option<String>, id: &str) -> bool {
        match b.begin(counted.clone()) {
            Ok(place) => {
                b.begun(id.to_string(), who, counted);
                drop(place);
                true
            }
            Err(_) => false,
        }
    }

    #[test]
    fn a_token_past_its_bound_is_refused_and_another_tokens_session_stays() {
        let b = Bindings::default();
        let (greedy, other) = ([1u8; 32], [2u8; 32]);
        assert!(begin_and_bind(&b, other, tok("b"), "theirs"));
        for i in 0..PER_TOKEN {
            assert!(begin_and_bind(&b, greedy, tok("a"), &format!("s{i}")));
        }
        assert!(!begin_and_bind(&b, greedy, tok("a"), "one-more"));
        assert!(b.holds("theirs", &other));
        // Ending one of its own makes room for it.
        b.ended("s0");
        assert!(begin_and_bind(&b, greedy, tok("a"), "again"));
    }

    #[test]
    fn credentials_counted_against_one_token_share_its_bound_and_the_owner_is_never_refused() {
        let b = Bindings::default();
        // Each session begun by a credential of its own (minted tokens,
        // children), all counted against token "a".
        for i in 0..PER_TOKEN {
            let mut who = [7u8; 32];
            who[0] = i as u8;
            assert!(begin_and_bind(&b, who, tok("a"), &format!("s{i}")));
        }
        assert!(!begin_and_bind(&b, [8u8; 32], tok("a"), "minted-more"));
        // A session stays bound to the credential that began it.
        let mut first = [7u8; 32];
        first[0] = 0;
        assert!(b.holds("s0", &first));
        assert!(!b.holds("s0", &[8u8; 32]));
        for i in 0..(2 * PER_TOKEN) {
            assert!(begin_and_bind(&b, [0u8; 32], None, &format!("o{i}")));
        }
    }

    #[test]
    fn a_full_daemon_refuses_a_new_session_rather_than_end_a_live_one() {
        let b = Bindings::default();
        let victim = [9u8; 32];
        assert!(begin_and_bind(&b, victim, tok("victim"), "victim"));
        for i in 0..MOST {
            let mut who = [0u8; 32];
            who[..8].copy_from_slice(&(i as u64).to_le_bytes());
            who[31] = 1;
            if !begin_and_bind(&b, who, Some(format!("t{i}")), &format!("s{i}")) {
                break;
            }
        }
        assert_eq!(b.map().sessions.len(), MOST);
        assert!(b.holds("victim", &victim), "a live session was ended");
        // The owner's is still let in.
        assert!(begin_and_bind(&b, [0u8; 32], None, "owner"));
    }

    #[test]
    fn sessions_unused_past_the_servers_keep_alive_no_longer_count() {
        let b = Bindings::default();
        let who = [3u8; 32];
        let long_ago = Instant::now()
            .checked_sub(UNUSED * 2)
            .unwrap_or_else(Instant::now);
        for i in 0..PER_TOKEN {
            let held = Held {
                who,
                counted: tok("c"),
                used: long_ago,
            };
            b.map().sessions.insert(format!("old{i}"), held);
        }
        assert!(begin_and_bind(&b, who, tok("c"), "new"));
    }

    #[test]
    fn sessions_being_begun_count_against_the_bound() {
        let b = Bindings::default();
        let places: Vec<_> = (0..PER_TOKEN)
            .map(|_| b.begin(tok("d")).ok().unwrap())
            .collect();
        assert!(b.begin(tok("d")).is_err());
        drop(places);
        assert!(b.begin(tok("d")).is_ok());
    }
}
