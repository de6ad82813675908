//! How many of one caller's refused calls the daemon's own audit log
//! records one by one: a token that is refused again and again (a
//! thousand a second, from a loop) would otherwise grow the log on the
//! host's disk at its own rate, outside every quota. Past
//! [`PER_WINDOW`] refusals of one caller in a [`WINDOW`], the rest of the
//! window's are counted, and the count is recorded once, with the next
//! refusal recorded after the window.
//!
//! A refusal without a token has no caller to name: it is kept in a
//! window of its door's and its peer's (the TCP peer's address, the Unix
//! peer's uid), so that one client's flood at one door never turns
//! another client's, or another door's, refusals into a bare count. The
//! first refusals of each (door, peer) in a window ([`PER_STRANGER`]) are
//! recorded in full; past [`STRANGERS`] peers at one door in a window,
//! the next peers' refusals share one window of that door's.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Refusals of one caller recorded one by one in a window.
pub const PER_WINDOW: u32 = 60;
/// The window.
pub const WINDOW: Duration = Duration::from_secs(60);
/// Callers remembered at once; past it, windows that ended with nothing
/// counted are forgotten (a window with a count is kept until the count
/// is recorded).
const CALLERS: usize = 4096;
/// Refusals of one peer without a token at one door recorded one by one
/// in a window.
pub const PER_STRANGER: u32 = 10;
/// Peers without a token given a window of their own at one door in a
/// window; past it, that door's further peers share one.
pub const STRANGERS: u32 = 16;

/// The door a refusal without a token came through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Door {
    /// The native API (`/v1`), on TCP or the owner's socket.
    Api,
    /// The dashboard's login and browser sessions.
    Dashboard,
    /// The E2B door's control API (`X-API-Key`).
    E2bControl,
    /// The E2B door's sandbox API: envd access tokens, signed file URLs,
    /// a sandbox's ports.
    E2bSandbox,
    /// warden's MCP of a sandbox through the E2B door.
    E2bMcp,
    /// The owner's socket, to a peer that is not its owner.
    OwnerSocket,
}

impl Door {
    /// The door's name in a record.
    pub fn name(self) -> &'static str {
        match self {
            Door::Api => "api",
            Door::Dashboard => "dashboard",
            Door::E2bControl => "e2b",
            Door::E2bSandbox => "e2b-sandbox",
            Door::E2bMcp => "e2b-mcp",
            Door::OwnerSocket => "owner-socket",
        }
    }
}

/// Who a connection came from, as far as the daemon can tell: put in
/// each request's extensions by the listener that served it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Peer {
    /// A TCP peer's address.
    Ip(IpAddr),
    /// A Unix peer's uid.
    Uid(u32),
    /// Not known (a request no listener marked).
    #[default]
    Unknown,
}

impl Peer {
    /// The peer a request's listener marked it with.
    pub fn of(extensions: &http::Extensions) -> Peer {
        extensions.get::<Peer>().copied().unwrap_or_default()
    }
}

impl std::fmt::Display for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Peer::Ip(ip) => write!(f, "{ip}"),
            Peer::Uid(uid) => write!(f, "uid {uid}"),
            Peer::Unknown => f.write_str("unknown"),
        }
    }
}

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for Peer {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut http::request::Parts,
        _state: &S,
    ) -> Result<Peer, Self::Rejection> {
        Ok(Peer::of(&parts.extensions))
    }
}

/// What to do with one refusal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    /// Record it; before it, when `counted` is not zero, one line saying
    /// that many of this caller's refusals were counted, not recorded.
    Record { counted: u64 },
    /// Count it only.
    Count,
}

#[derive(Debug)]
struct Window {
    start: Instant,
    recorded: u32,
    counted: u64,
}

/// The windows of the callers refused lately.
#[derive(Debug, Default)]
pub struct Rate {
    windows: Mutex<HashMap<String, Window>>,
    /// Per door, when its window of peers began and how many peers it
    /// gave a window of their own.
    doors: Mutex<HashMap<Door, (Instant, u32)>>,
}

impl Rate {
    /// Whether the refusal of `caller` (a token id, or `-` for the
    /// owner) at `now` is recorded.
    pub fn admit(&self, caller: &str, now: Instant) -> Admit {
        self.admit_as(caller, PER_WINDOW, now)
    }

    /// Whether a refusal without a token, of `peer` at `door`, at `now`
    /// is recorded; and under which key (`?door|peer`, or `?door|*` for
    /// the peers past [`STRANGERS`]).
    pub fn admit_stranger(&self, door: Door, peer: Peer, now: Instant) -> (Admit, String) {
        let own = format!("?{}|{peer}", door.name());
        let live = self.windows.lock().is_ok_and(|w| {
            w.get(&own)
                .is_some_and(|w| now.duration_since(w.start) < WINDOW)
        });
        let own_window = live || {
            let Ok(mut doors) = self.doors.lock() else {
                return (Admit::Record { counted: 0 }, own);
            };
            let (start, peers) = doors.entry(door).or_insert((now, 0));
            if now.duration_since(*start) >= WINDOW {
                (*start, *peers) = (now, 0);
            }
            *peers += 1;
            *peers <= STRANGERS
        };
        if own_window {
            let admit = self.admit_as(&own, PER_STRANGER, now);
            (admit, own)
        } else {
            let shared = format!("?{}|*", door.name());
            (self.admit_as(&shared, PER_WINDOW, now), shared)
        }
    }

    fn admit_as(&self, caller: &str, share: u32, now: Instant) -> Admit {
        let Ok(mut windows) = self.windows.lock() else {
            return Admit::Record { counted: 0 };
        };
        if windows.len() >= CALLERS && !windows.contains_key(caller) {
            windows.retain(|_, w| now.duration_since(w.start) < WINDOW || w.counted > 0);
        }
        let w = windows.entry(caller.to_string()).or_insert(Window {
            start: now,
            recorded: 0,
            counted: 0,
        });
        if now.duration_since(w.start) >= WINDOW {
            let counted = std::mem::take(&mut w.counted);
            *w = Window {
                start: now,
                recorded: 1,
                counted: 0,
            };
            return Admit::Record { counted };
        }
        if w.recorded < share {
            w.recorded += 1;
            return Admit::Record { counted: 0 };
        }
        w.counted += 1;
        Admit::Count
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn past_the_window_s_share_refusals_are_counted_and_the_count_comes_with_the_next_window() {
        let rate = Rate::default();
        let t0 = Instant::now();
        for _ in 0..PER_WINDOW {
            assert_eq!(rate.admit("tok", t0), Admit::Record { counted: 0 });
        }
        for _ in 0..500 {
            assert_eq!(rate.admit("tok", t0 + Duration::from_secs(1)), Admit::Count);
        }
        // Another caller has a window of its own.
        assert_eq!(rate.admit("other", t0), Admit::Record { counted: 0 });
        assert_eq!(
            rate.admit("tok", t0 + WINDOW + Duration::from_secs(1)),
            Admit::Record { counted: 500 }
        );
        assert_eq!(
            rate.admit("tok", t0 + WINDOW + Duration::from_secs(2)),
            Admit::Record { counted: 0 }
        );
    }

    #[test]
    fn one_peer_s_flood_at_one_door_leaves_every_other_door_and_peer_its_first_refusals_in_full() {
        let rate = Rate::default();
        let t0 = Instant::now();
        let flooder = Peer::Ip("127.0.0.1".parse().unwrap());
        let mut recorded = 0;
        for _ in 0..1000 {
            if let (Admit::Record { .. }, _) = rate.admit_stranger(Door::Api, flooder, t0) {
                recorded += 1;
            }
        }
        assert_eq!(recorded, PER_STRANGER);
        // Another door, the same peer; the same door, another peer; a
        // stranger on the owner's socket: each first refusal is recorded.
        let other = Peer::Ip("127.0.0.2".parse().unwrap());
        for (door, peer) in [
            (Door::E2bSandbox, flooder),
            (Door::Api, other),
            (Door::OwnerSocket, Peer::Uid(1000)),
            (Door::Dashboard, flooder),
        ] {
            let (admit, key) = rate.admit_stranger(door, peer, t0);
            assert_eq!(admit, Admit::Record { counted: 0 }, "{key}");
        }
        // The next window tells the flood's count.
        let (admit, key) = rate.admit_stranger(Door::Api, flooder, t0 + WINDOW);
        assert_eq!(key, "?api|127.0.0.1");
        assert_eq!(
            admit,
            Admit::Record {
                counted: u64::from(1000 - PER_STRANGER)
            }
        );
    }

    #[test]
    fn past_its_share_of_peers_a_door_s_further_peers_share_one_window_and_the_whole_stays_bounded()
    {
        let rate = Rate::default();
        let t0 = Instant::now();
        let mut recorded = 0u32;
        for a in 0..=255u8 {
            for b in 0..8u8 {
                let peer = Peer::Ip(std::net::IpAddr::from([127, 0, b, a]));
                for _ in 0..20 {
                    if let (Admit::Record { .. }, _) =
                        rate.admit_stranger(Door::E2bSandbox, peer, t0)
                    {
                        recorded += 1;
                    }
                }
            }
        }
        assert_eq!(recorded, STRANGERS * PER_STRANGER + PER_WINDOW);
        // Other doors keep their own share of peers.
        let (admit, _) = rate.admit_stranger(Door::OwnerSocket, Peer::Uid(1000), t0);
        assert_eq!(admit, Admit::Record { counted: 0 });
        assert!(rate.windows.lock().unwrap().len() <= (STRANGERS + 2) as usize);
    }
}
