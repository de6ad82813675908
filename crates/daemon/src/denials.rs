//! How many of one caller's refused calls the daemon's own audit log
//! records one by one: a token that is refused again and again (a
//! thousand a second, from a loop) would otherwise grow the log on the
//! host's disk at its own rate, outside every quota. Past
//! [`PER_WINDOW`] refusals of one caller in a [`WINDOW`], the rest of the
//! window's are counted, and the count is recorded once, with the next
//! refusal recorded after the window.

use std::collections::HashMap;
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
}

impl Rate {
    /// Whether the refusal of `caller` (a token id, or `-` for the
    /// owner) at `now` is recorded.
    pub fn admit(&self, caller: &str, now: Instant) -> Admit {
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
        if w.recorded < PER_WINDOW {
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
}
