//! When a review stops before its end: its caller left (a flag the door
//! sets when the connection that asked closes), it ran past its time, or
//! it walked more entries than one review may. A layer of a hundred
//! thousand files takes seconds to minutes to walk; a door that answers
//! a network caller hands the walk a [`Stop`] so that a caller asking and
//! hanging up over and over never keeps the host's threads walking for
//! nobody. Each stop is an error with its reason code ([`Stopped::code`]),
//! never a partial answer shown as a whole one.
//!
//! The walk asks [`Stop::entry`] for each entry it visits and
//! [`Stop::check`] between the steps that read contents; both cost an
//! atomic load (and a clock read when a deadline is set).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Why a review stopped before its end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Stopped {
    #[error("the review was stopped: whoever asked for it left before its answer")]
    CallerLeft,
    #[error("the review was stopped after {seconds} s, the longest one review may run: review a part of the workspace (a path), or discard what is not wanted")]
    TooLong { seconds: u64 },
    #[error("the review was stopped after {most} entries of the sandbox's layer, the most one review may walk: review a part of the workspace (a path), or discard what is not wanted")]
    TooLarge { most: u64 },
}

/// The reason code of a caller that left.
pub const CALLER_LEFT: &str = "caller_left";
/// The reason code of a review past its time.
pub const REVIEW_TOO_LONG: &str = "review_too_long";
/// The reason code of a review past its entries.
pub const REVIEW_TOO_LARGE: &str = "review_too_large";

impl Stopped {
    /// The stable reason code a door words.
    pub fn code(&self) -> &'static str {
        match self {
            Stopped::CallerLeft => CALLER_LEFT,
            Stopped::TooLong { .. } => REVIEW_TOO_LONG,
            Stopped::TooLarge { .. } => REVIEW_TOO_LARGE,
        }
    }
}

/// What stops a walk: nothing by default (a person at a terminal stops a
/// review with its interrupt key).
#[derive(Debug, Clone, Default)]
pub struct Stop {
    /// Set by the door when the caller left.
    left: Option<Arc<AtomicBool>>,
    /// When the walk must have ended, and its length for the message.
    deadline: Option<(Instant, Duration)>,
    /// The most entries the walk visits.
    most: Option<u64>,
    /// Entries visited so far (shared by the clones of one walk).
    seen: Arc<AtomicU64>,
}

/// The door's end of [`Stop::on_leaving`]: dropped (the caller's request
/// dropped with its connection), it tells the walk its caller left.
#[derive(Debug)]
pub struct Leaving(Arc<AtomicBool>);

impl Drop for Leaving {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

impl Stop {
    /// A stop its caller's leaving sets: the walk's end and the door's.
    pub fn on_leaving() -> (Stop, Leaving) {
        let flag = Arc::new(AtomicBool::new(false));
        let stop = Stop {
            left: Some(flag.clone()),
            ..Stop::default()
        };
        (stop, Leaving(flag))
    }

    /// Stop after `within` from now.
    pub fn within(mut self, within: Duration) -> Stop {
        self.deadline = Some((Instant::now() + within, within));
        self
    }

    /// Stop after `most` entries.
    pub fn at_most(mut self, most: u64) -> Stop {
        self.most = Some(most);
        self
    }

    /// Whether the walk must stop now, and why.
    pub fn check(&self) -> Result<(), Stopped> {
        if self
            .left
            .as_ref()
            .is_some_and(|f| f.load(Ordering::Relaxed))
        {
            return Err(Stopped::CallerLeft);
        }
        if let Some((at, within)) = self.deadline {
            if Instant::now() >= at {
                return Err(Stopped::TooLong {
                    seconds: within.as_secs(),
                });
            }
        }
        Ok(())
    }

    /// One more entry visited: [`Stop::check`], and the entries' bound.
    pub fn entry(&self) -> Result<(), Stopped> {
        let seen = self.seen.fetch_add(1, Ordering::Relaxed) + 1;
        if let Some(most) = self.most {
            if seen > most {
                return Err(Stopped::TooLarge { most });
            }
        }
        self.check()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stop_says_why_once_its_caller_left_its_time_passed_or_its_entries_ran_out() {
        assert_eq!(Stop::default().entry(), Ok(()));
        let (stop, leaving) = Stop::on_leaving();
        assert_eq!(stop.check(), Ok(()));
        drop(leaving);
        assert_eq!(stop.check(), Err(Stopped::CallerLeft));
        assert_eq!(stop.check().unwrap_err().code(), CALLER_LEFT);
        let late = Stop::default().within(Duration::ZERO);
        assert_eq!(late.check(), Err(Stopped::TooLong { seconds: 0 }));
        let small = Stop::default().at_most(2);
        assert!(small.entry().is_ok() && small.entry().is_ok());
        assert_eq!(small.clone().entry(), Err(Stopped::TooLarge { most: 2 }));
    }
}
