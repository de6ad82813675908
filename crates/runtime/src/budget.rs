//! A sandbox's byte budget for its events in the log. Aggregation
//! (`aggregate.rs`) bounds how many lines a flood writes per second, not
//! how many over a sandbox's life: a sandbox that makes up a new name or
//! path every moment would fill the host's disk at a rate of its choosing.
//! So the bytes its events took in the log are counted, and past the
//! budget the sandbox's own stream of decisions (connections, DNS
//! answers, requests, secret actions, refused programs and their counts
//! by name) is only counted, by kind, protocol and verdict, and said once
//! per period as an `events_over_budget` event, and at the end. What is never held back:
//! lifecycle events, what people did (execs, answers, allowlist changes,
//! commits, API refusals), and those counts: the budget fails closed on
//! the sandbox's noise, not on the record of what happened to it.
//!
//! A blocked secret (a placeholder sent towards a host that is not the
//! secret's) is an attempt a person must see by name, and a flood of
//! names must not hide it: past the budget such blocks are still written
//! while the log stays within a reserve of an eighth of the budget
//! ([`RESERVE_DIVISOR`]); only past that are they counted like the rest.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};
use warden_audit::{EventKind, Protocol, SecretAction};

/// The budget when its field (`audit_budget`) says none.
pub const DEFAULT_BUDGET: u64 = warden_policy::DEFAULT_AUDIT_BUDGET;
/// How often the counts past the budget are written.
pub const PERIOD: Duration = Duration::from_secs(60);
/// The first counts come this soon after the budget is reached, so a
/// reader learns of it at once.
const FIRST_PERIOD: Duration = Duration::from_secs(1);

/// The reserve past the budget in which blocked secrets are still
/// written by name: the budget divided by this.
pub const RESERVE_DIVISOR: u64 = 8;

/// What the counts past the budget are kept by: the kind left out, its
/// protocol, its verdict.
type Key = (&'static str, Option<Protocol>, Option<bool>);

/// The budget and what was counted past it.
#[derive(Debug)]
pub struct Budget {
    limit: u64,
    /// Bytes this sandbox's events took in its log before this writer
    /// (an earlier start of the same sandbox).
    before: u64,
    over: Option<Over>,
}

#[derive(Debug)]
struct Over {
    since_ms: u64,
    due: Instant,
    counts: HashMap<Key, u64>,
    /// Allowed connections whose opening was only counted: their
    /// closings are counted too (a closing whose opening is in the log is
    /// written, so that the two still pair).
    unopened: HashSet<u64>,
}

/// What to do with an event.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    Write,
    Counted,
}

impl Budget {
    /// A budget of `limit` bytes, `before` of them taken already.
    pub fn new(limit: u64, before: u64) -> Budget {
        Budget {
            limit,
            before,
            over: None,
        }
    }

    /// Whether `kind` is written, given that the log took `written` bytes
    /// so far under this writer.
    pub fn admit(&mut self, kind: &EventKind, written: u64) -> Verdict {
        if self.over.is_none() && self.before.saturating_add(written) >= self.limit {
            self.over = Some(Over {
                since_ms: crate::state::now_ms(),
                due: Instant::now() + FIRST_PERIOD,
                counts: HashMap::new(),
                unopened: HashSet::new(),
            });
        }
        let Some(over) = &mut self.over else {
            return Verdict::Write;
        };
        let blocked_secret = matches!(
            kind,
            EventKind::Secret {
                action: SecretAction::Blocked,
                ..
            } | EventKind::SecretsAggregated {
                action: SecretAction::Blocked,
                ..
            }
        );
        let reserve = self.limit.saturating_add(self.limit / RESERVE_DIVISOR);
        if blocked_secret && self.before.saturating_add(written) < reserve {
            return Verdict::Write;
        }
        let (key, count) = match kind {
            EventKind::Connection {
                protocol,
                allowed,
                conn,
                ..
            } => {
                if let Some(c) = conn {
                    over.unopened.insert(*c);
                }
                (("connection", Some(*protocol), Some(*allowed)), 1)
            }
            EventKind::ConnectionClosed { conn, .. } => {
                if !over.unopened.remove(conn) {
                    return Verdict::Write;
                }
                (("connection_closed", None, Some(true)), 1)
            }
            EventKind::ConnectionsAggregated {
                protocol,
                allowed,
                count,
                ..
            } => (("connection", Some(*protocol), Some(*allowed)), *count),
            EventKind::Secret { action, .. } => {
                (("secret", None, Some(*action != SecretAction::Blocked)), 1)
            }
            EventKind::SecretsAggregated { action, count, .. } => (
                ("secret", None, Some(*action != SecretAction::Blocked)),
                *count,
            ),
            EventKind::ExecRefused { .. } => (("exec_refused", None, Some(false)), 1),
            EventKind::ExecRefusedAggregated { count, .. } => {
                (("exec_refused", None, Some(false)), *count)
            }
            // Written past the budget: lifecycle, what people did, and
            // the counts themselves. Every kind is named, so that a new
            // one the sandbox can repeat at will is not written by default.
            EventKind::Created { .. }
            | EventKind::Degraded { .. }
            | EventKind::Started { .. }
            | EventKind::ExecStarted { .. }
            | EventKind::ExecExited { .. }
            | EventKind::Workspace { .. }
            | EventKind::ConnectionsNotRecorded { .. }
            | EventKind::Stopping { .. }
            | EventKind::TtlChanged { .. }
            | EventKind::Paused { .. }
            | EventKind::Resumed { .. }
            | EventKind::EgressChanged { .. }
            | EventKind::Ask { .. }
            | EventKind::AskAnswered { .. }
            | EventKind::ApiDenied { .. }
            | EventKind::EventsDropped { .. }
            | EventKind::CacheLeftOut { .. }
            | EventKind::VolumeHeldBack { .. }
            | EventKind::EventsOverBudget { .. }
            | EventKind::ExecOutputCut { .. }
            | EventKind::VmCutOff { .. }
            | EventKind::Exited { .. } => return Verdict::Write,
        };
        *over.counts.entry(key).or_default() += count;
        Verdict::Counted
    }

    /// The counts of the period, when it has run its time.
    pub fn due(&mut self) -> Vec<EventKind> {
        match &self.over {
            Some(o) if Instant::now() >= o.due => self.counts(),
            _ => Vec::new(),
        }
    }

    /// The counts so far (at the end, whatever the period).
    pub fn counts(&mut self) -> Vec<EventKind> {
        let limit = self.limit;
        let Some(over) = &mut self.over else {
            return Vec::new();
        };
        let now = crate::state::now_ms();
        let since_ms = std::mem::replace(&mut over.since_ms, now);
        over.due = Instant::now() + PERIOD;
        let mut counts: Vec<(Key, u64)> = std::mem::take(&mut over.counts).into_iter().collect();
        // A stable order, so that two runs of the same flood read alike.
        counts.sort_by_key(|(k, _)| format!("{k:?}"));
        counts
            .into_iter()
            .map(
                |((of, protocol, allowed), count)| EventKind::EventsOverBudget {
                    budget_bytes: limit,
                    of: of.to_string(),
                    protocol,
                    allowed,
                    count,
                    since_ms,
                },
            )
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dns(name: &str) -> EventKind {
        EventKind::Connection {
            protocol: Protocol::Dns,
            conn: None,
            name: Some(name.into()),
            port: 53,
            original_destination: None,
            allowed: false,
            rule: None,
            detail: "A".into(),
            bytes_out: 0,
            bytes_in: 0,
            duration_ms: 0,
            reason: None,
        }
    }

    #[test]
    fn past_the_budget_decisions_are_counted_and_lifecycle_events_written() {
        let mut b = Budget::new(1000, 0);
        assert_eq!(b.admit(&dns("a.test"), 10), Verdict::Write);
        assert_eq!(b.admit(&dns("b.test"), 1000), Verdict::Counted);
        assert_eq!(
            b.admit(
                &EventKind::ConnectionsAggregated {
                    protocol: Protocol::Dns,
                    name: None,
                    allowed: false,
                    count: 41,
                    since_ms: 0,
                    detail: String::new(),
                    reason: None,
                },
                1000
            ),
            Verdict::Counted
        );
        assert_eq!(
            b.admit(&EventKind::Started { pid: 1 }, 5000),
            Verdict::Write
        );
        let counts = b.counts();
        assert!(
            matches!(
                counts.as_slice(),
                [EventKind::EventsOverBudget {
                    count: 42,
                    allowed: Some(false),
                    protocol: Some(Protocol::Dns),
                    ..
                }]
            ),
            "{counts:?}"
        );
        assert!(b.counts().is_empty());
    }

    #[test]
    fn refused_programs_past_the_budget_are_counted_and_the_end_still_written() {
        let refused = EventKind::ExecRefused {
            program: Some("/usr/bin/curl".into()),
            rule: "allow_exec".into(),
            by: "landlock".into(),
        };
        let mut b = Budget::new(8000, 0);
        assert_eq!(b.admit(&refused, 100), Verdict::Write);
        assert_eq!(b.admit(&refused, 8000), Verdict::Counted);
        let more = EventKind::ExecRefusedAggregated {
            program: None,
            rule: "allow_exec".into(),
            count: 41,
            since_ms: 0,
        };
        assert_eq!(b.admit(&more, 8000), Verdict::Counted);
        let resumed = EventKind::Resumed {
            by: "owner".into(),
            paused_ms: 1,
        };
        assert_eq!(b.admit(&resumed, 9000), Verdict::Write);
        let counts = b.counts();
        assert!(
            counts.iter().any(|k| matches!(
                k,
                EventKind::EventsOverBudget { of, count: 42, .. } if of == "exec_refused"
            )),
            "{counts:?}"
        );
    }

    #[test]
    fn a_blocked_secret_past_the_budget_is_written_by_name_within_the_reserve() {
        let blocked = EventKind::Secret {
            name: "GITHUB_TOKEN".into(),
            host: "evil.test".into(),
            action: SecretAction::Blocked,
            detail: String::new(),
            reason: None,
        };
        let mut b = Budget::new(8000, 0);
        assert_eq!(b.admit(&dns("flood.test"), 8000), Verdict::Counted);
        assert_eq!(b.admit(&blocked, 8000), Verdict::Write);
        assert_eq!(b.admit(&blocked, 8999), Verdict::Write);
        // Past the reserve, a flood of blocks is counted like the rest.
        assert_eq!(b.admit(&blocked, 9000), Verdict::Counted);
        let substituted = EventKind::Secret {
            name: "GITHUB_TOKEN".into(),
            host: "api.github.com".into(),
            action: SecretAction::Substituted,
            detail: String::new(),
            reason: None,
        };
        assert_eq!(b.admit(&substituted, 8000), Verdict::Counted);
    }

    #[test]
    fn what_earlier_starts_wrote_counts_against_the_budget() {
        let mut b = Budget::new(1000, 1000);
        assert_eq!(b.admit(&dns("a.test"), 0), Verdict::Counted);
    }

    #[test]
    fn a_connection_opened_before_the_budget_is_closed_in_the_log() {
        let mut b = Budget::new(1000, 0);
        let closed = |conn| EventKind::ConnectionClosed {
            conn,
            name: None,
            port: 443,
            bytes_out: 0,
            bytes_in: 0,
            duration_ms: 0,
        };
        let mut open = dns("a.test");
        if let EventKind::Connection {
            conn,
            protocol,
            allowed,
            ..
        } = &mut open
        {
            *conn = Some(7);
            *protocol = Protocol::Tls;
            *allowed = true;
        }
        assert_eq!(b.admit(&open, 2000), Verdict::Counted);
        assert_eq!(b.admit(&closed(7), 2000), Verdict::Counted);
        // Opened (and written) before: its closing pairs with it.
        assert_eq!(b.admit(&closed(3), 2000), Verdict::Write);
    }
}
