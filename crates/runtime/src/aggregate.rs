//! Repeated decisions counted instead of written one by one, so that a
//! sandbox cannot bury what matters under volume. Every decision that opens
//! no connection (a DNS answer, a denial, a request judged on a terminated
//! connection, a secret action) and every program a rule refused passes
//! through a [`Window`]: the first of each protocol, name, verdict and
//! reason (each program) in a window is written in full, the repeats are
//! counted and written as one `connections_aggregated` (`secrets_aggregated`,
//! `exec_refused_aggregated`) event when the window ends. Distinct names per
//! window are bounded; past the bound, decisions are counted per protocol
//! and verdict under no name. Nothing is dropped: everything is a line or
//! a count, and what a window holds is bounded whatever the sandbox does.
//! Allowed connections never come here: each has its own lines.
//!
//! Requests judged on a terminated connection carry their path in their
//! detail, and a sandbox can make every path new: past the first
//! [`REQUEST_DETAILS`] distinct ones of a name in a window, requests are
//! counted by their rule, verdict and method (the detail up to the
//! path), not by path.

use std::collections::HashMap;
use std::time::{Duration, Instant};
use warden_audit::{EventKind, Protocol, SecretAction};

/// How long repeats are counted before their count is written. A flood
/// costs the log at most [`WINDOW_NAMES`] lines of first decisions and as
/// many counts per window.
pub const AGGREGATION_WINDOW: Duration = Duration::from_secs(1);
/// Distinct names (per protocol and verdict) written in full per window;
/// past them, decisions are counted under no name.
pub const WINDOW_NAMES: usize = 256;
/// Distinct request details (paths) of one name written in full per
/// window; past them, requests are counted by rule, verdict and method.
pub const REQUEST_DETAILS: usize = 16;

/// A request's detail without its path: `no request rule for NAME allows
/// GET NAME/...` and `denied by the request rule "RULE": GET NAME/...` are
/// kept up to the `NAME` the path follows (the method and the rule stay);
/// a detail of another shape, up to its first `/`.
fn request_class(name: &str, detail: &str) -> String {
    let at = format!(" {name}/");
    match detail.rfind(&at) {
        Some(i) => detail[..i + at.len() - 1].to_string(),
        None => detail.split('/').next().unwrap_or_default().to_string(),
    }
}

/// What repeats are counted by.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Key {
    Connection {
        protocol: Protocol,
        /// `None`: a name past the window's bound.
        name: Option<String>,
        allowed: bool,
        /// Why (empty past the bound): a decision with another reason is
        /// news, and is written in full.
        detail: String,
    },
    Secret {
        name: String,
        host: String,
        action: SecretAction,
        detail: String,
    },
    /// A program refused by a rule: a sandbox that tries it in a loop is
    /// counted (each try is one record of the kernel's).
    Exec {
        /// `None`: a program past the window's bound.
        program: Option<std::path::PathBuf>,
        rule: String,
    },
}

#[derive(Debug, Default)]
struct Tally {
    repeats: u64,
    detail: String,
    /// The last repeat's reason, as its event carried it.
    reason: Option<Box<warden_audit::Reason>>,
}

/// One aggregation window.
pub struct Window {
    started: Instant,
    since_ms: u64,
    tallies: HashMap<Key, Tally>,
    /// Named keys in this window (the unnamed ones are not bounded by it,
    /// and are few: one per protocol and verdict).
    named: usize,
    /// Distinct request details per name in this window.
    requests: HashMap<String, usize>,
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

impl Default for Window {
    fn default() -> Self {
        Window {
            started: Instant::now(),
            since_ms: now_ms(),
            tallies: HashMap::new(),
            named: 0,
            requests: HashMap::new(),
        }
    }
}

impl Window {
    /// Count `kind`: `Some(kind)` when it is the first of its key in this
    /// window (write it now), `None` when it was counted.
    pub fn admit(&mut self, kind: EventKind) -> Option<EventKind> {
        let reason = match &kind {
            EventKind::Connection { reason, .. } | EventKind::Secret { reason, .. } => {
                reason.clone()
            }
            _ => None,
        };
        let (mut key, detail) = match &kind {
            EventKind::Connection {
                protocol,
                name,
                allowed,
                detail,
                original_destination,
                ..
            } => (
                Key::Connection {
                    protocol: *protocol,
                    // A connection without a name is counted by the
                    // address it was made to (without its port).
                    name: name.clone().or_else(|| {
                        original_destination
                            .as_deref()
                            .map(|a| a.rsplit_once(':').map(|(ip, _)| ip).unwrap_or(a))
                            .map(str::to_string)
                    }),
                    allowed: *allowed,
                    detail: detail.clone(),
                },
                detail.clone(),
            ),
            EventKind::Secret {
                name,
                host,
                action,
                detail,
                ..
            } => (
                Key::Secret {
                    name: name.clone(),
                    host: host.clone(),
                    action: *action,
                    detail: detail.clone(),
                },
                detail.clone(),
            ),
            EventKind::ExecRefused { program, rule, .. } => (
                Key::Exec {
                    program: program.clone(),
                    rule: rule.clone(),
                },
                String::new(),
            ),
            _ => return Some(kind),
        };
        if let Some(t) = self.tallies.get_mut(&key) {
            t.repeats += 1;
            t.detail = detail;
            t.reason = reason;
            return None;
        }
        if let Key::Connection {
            protocol: Protocol::Request,
            name: Some(name),
            detail: d,
            ..
        } = &mut key
        {
            let seen = self.requests.entry(name.clone()).or_default();
            if *seen < REQUEST_DETAILS {
                *seen += 1;
            } else {
                // Many paths of one name: by rule, verdict and method.
                *d = request_class(name, d);
                if let Some(t) = self.tallies.get_mut(&key) {
                    t.repeats += 1;
                    t.detail = detail;
                    t.reason = reason;
                    return None;
                }
            }
        }
        if self.named < WINDOW_NAMES {
            self.named += 1;
            self.tallies.insert(key, Tally::default());
            return Some(kind);
        }
        // Past the bound: counted under no name.
        let key = match key {
            Key::Connection {
                protocol, allowed, ..
            } => Key::Connection {
                protocol,
                name: None,
                allowed,
                detail: String::new(),
            },
            Key::Secret { action, .. } => Key::Secret {
                name: String::new(),
                host: String::new(),
                action,
                detail: String::new(),
            },
            Key::Exec { rule, .. } => Key::Exec {
                program: None,
                rule,
            },
        };
        let t = self.tallies.entry(key).or_default();
        t.repeats += 1;
        t.detail = detail;
        t.reason = reason;
        None
    }

    /// Whether the window has run its time.
    pub fn expired(&self) -> bool {
        self.started.elapsed() >= AGGREGATION_WINDOW
    }

    /// End the window: the counts of its repeats, as events; a fresh
    /// window starts.
    pub fn close(&mut self) -> Vec<EventKind> {
        let old = std::mem::take(self);
        let mut out: Vec<EventKind> = old
            .tallies
            .into_iter()
            .filter(|(_, t)| t.repeats > 0)
            .map(|(key, t)| match key {
                Key::Connection {
                    protocol,
                    name,
                    allowed,
                    ..
                } => EventKind::ConnectionsAggregated {
                    protocol,
                    name,
                    allowed,
                    count: t.repeats,
                    since_ms: old.since_ms,
                    detail: t.detail,
                    reason: t.reason,
                },
                Key::Secret {
                    name, host, action, ..
                } => EventKind::SecretsAggregated {
                    name,
                    host,
                    action,
                    count: t.repeats,
                    since_ms: old.since_ms,
                    reason: t.reason,
                },
                Key::Exec { program, rule } => EventKind::ExecRefusedAggregated {
                    program,
                    rule,
                    count: t.repeats,
                    since_ms: old.since_ms,
                },
            })
            .collect();
        // A stable order, so that two runs of the same flood read alike.
        out.sort_by_key(|k| format!("{k:?}"));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(program: &str) -> EventKind {
        EventKind::ExecRefused {
            program: Some(program.into()),
            rule: "allow_exec".into(),
            by: "landlock".into(),
        }
    }

    #[test]
    fn a_program_refused_again_and_again_is_written_once_and_counted() {
        let mut w = Window::default();
        assert!(w.admit(refused("/usr/bin/curl")).is_some());
        assert!(w.admit(refused("/usr/bin/wget")).is_some());
        for _ in 0..500 {
            assert!(w.admit(refused("/usr/bin/curl")).is_none());
        }
        let counts = w.close();
        assert!(
            counts.iter().any(|k| matches!(
                k,
                EventKind::ExecRefusedAggregated { program: Some(p), count: 500, .. }
                    if p.as_os_str() == "/usr/bin/curl"
            )),
            "{counts:?}"
        );
        // Past the window's bound of distinct programs: counted unnamed.
        let mut w = Window::default();
        let written = (0..WINDOW_NAMES + 300)
            .filter(|i| w.admit(refused(&format!("/tmp/p{i}"))).is_some())
            .count();
        assert_eq!(written, WINDOW_NAMES);
        assert!(w.close().iter().any(|k| matches!(
            k,
            EventKind::ExecRefusedAggregated {
                program: None,
                count: 300,
                ..
            }
        )));
    }

    fn denied(name: Option<&str>, dest: &str) -> EventKind {
        EventKind::Connection {
            protocol: Protocol::Dns,
            conn: None,
            name: name.map(str::to_string),
            port: 53,
            original_destination: Some(dest.into()),
            allowed: false,
            rule: None,
            detail: "A".into(),
            bytes_out: 0,
            bytes_in: 0,
            duration_ms: 0,
            reason: Some(Box::new(warden_audit::Reason {
                code: "not_allowed".into(),
                field: Some("egress.domains".into()),
                addresses: Vec::new(),
                allow: None,
            })),
        }
    }

    #[test]
    fn the_first_of_a_name_is_written_and_its_repeats_counted() {
        let mut w = Window::default();
        assert!(w.admit(denied(Some("a.test"), "x")).is_some());
        for _ in 0..9 {
            assert!(w.admit(denied(Some("a.test"), "x")).is_none());
        }
        assert!(w.admit(EventKind::Started { pid: 1 }).is_some());
        let out = w.close();
        assert!(matches!(
            out.as_slice(),
            [EventKind::ConnectionsAggregated { count: 9, allowed: false, name: Some(n), .. }] if n == "a.test"
        ));
        // The repeats keep their reason's code, as the first one's event.
        assert!(matches!(
            out.as_slice(),
            [EventKind::ConnectionsAggregated { reason: Some(r), .. }] if r.code == "not_allowed"
        ));
        assert!(w.close().is_empty());
    }

    fn request(path: &str) -> EventKind {
        EventKind::Connection {
            protocol: Protocol::Request,
            conn: None,
            name: Some("api.test".into()),
            port: 443,
            original_destination: None,
            allowed: false,
            rule: None,
            detail: format!("no request rule for api.test allows GET api.test{path}"),
            bytes_out: 0,
            bytes_in: 0,
            duration_ms: 0,
            reason: None,
        }
    }

    #[test]
    fn many_paths_of_one_name_are_counted_by_rule_and_method_not_by_path() {
        let mut w = Window::default();
        let written = (0..5000)
            .filter(|i| w.admit(request(&format!("/nope/{i}"))).is_some())
            .count();
        // The first paths in full, then one line for the method's class.
        assert_eq!(written, REQUEST_DETAILS + 1);
        let out = w.close();
        assert!(
            matches!(
                out.as_slice(),
                [EventKind::ConnectionsAggregated { count, name: Some(n), .. }]
                    if *count == 5000 - written as u64 && n == "api.test"
            ),
            "{out:?}"
        );
        assert_eq!(
            request_class(
                "api.test",
                "no request rule for api.test allows POST api.test/a/b"
            ),
            "no request rule for api.test allows POST api.test"
        );
        assert_eq!(
            request_class(
                "api.test",
                "denied by the request rule \"* api.test/admin/**\": GET api.test/admin/x"
            ),
            "denied by the request rule \"* api.test/admin/**\": GET api.test"
        );
    }

    #[test]
    fn names_past_the_bound_are_counted_under_no_name() {
        let mut w = Window::default();
        let mut written = 0;
        for i in 0..10_000 {
            let addr = format!("203.0.113.{}:{}", i % 250, i);
            if w.admit(denied(None, &addr)).is_some() {
                written += 1;
            }
            if w.admit(denied(Some(&format!("n{i}.test")), "x")).is_some() {
                written += 1;
            }
        }
        assert_eq!(written, WINDOW_NAMES);
        let counted: u64 = w
            .close()
            .iter()
            .map(|k| match k {
                EventKind::ConnectionsAggregated { count, .. } => *count,
                _ => 0,
            })
            .sum();
        assert_eq!(counted + WINDOW_NAMES as u64, 20_000);
    }
}
