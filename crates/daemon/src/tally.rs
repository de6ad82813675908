//! What a sandbox's audit log counts for the list of sandboxes: its denied
//! connections and its other refusals. Each log is read once: the counts
//! of a log are kept with how far it was read, and a later look reads
//! only the lines written since (a log that shrank, a new sandbox of the
//! same name, is read again from its start).

use std::collections::HashMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use warden_audit::{Event, EventKind};

/// One log's counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
    /// Bytes read (whole lines only).
    offset: u64,
    /// Connections and DNS queries the egress proxy denied.
    pub denied: u64,
    /// Programs the exec allowlist refused inside (`exec_refused`, or a
    /// window's count of them), counted as a denied name is.
    pub refused_execs: u64,
    /// Other refusals (see [`counts`]).
    pub violations: u64,
    /// Layers of isolation lost (`degraded` events).
    pub degraded: u64,
    /// Whether the sandbox runs rootless, as its `created` event says.
    pub rootless: Option<bool>,
}

/// Add what one event counts to `t`: a denied connection (or a window's
/// count of them) to `denied`; a refused program (or a window's count) to
/// `refused_execs`; any other event the audit log calls a
/// denial (a blocked secret, a denied or unanswered question, a refused
/// commit) to `violations`; a layer of isolation lost to `degraded` (the
/// host's doing, not the sandbox's: a fresh rootless sandbox without a
/// cgroup showed one "violation").
pub fn counts(t: &mut Tally, e: &Event) {
    match &e.kind {
        EventKind::Connection { allowed, .. } => t.denied += u64::from(!allowed),
        EventKind::ConnectionsAggregated { allowed, count, .. } if !allowed => t.denied += count,
        EventKind::ConnectionsNotRecorded { denied, .. } => t.denied += denied,
        EventKind::ExecRefused { .. } => t.refused_execs += 1,
        EventKind::ExecRefusedAggregated { count, .. } => t.refused_execs += count,
        EventKind::Degraded { .. } => t.degraded += 1,
        EventKind::SecretsAggregated { count, .. } if e.is_denial() => t.violations += count,
        EventKind::Created { rootless, .. } => t.rootless = Some(*rootless),
        _ if e.is_denial() => t.violations += 1,
        _ => {}
    }
}

/// The counts of every log looked at.
#[derive(Debug, Default)]
pub struct Tallies {
    map: Mutex<HashMap<PathBuf, Tally>>,
}

impl Tallies {
    /// The counts of the log at `path` as it is now (zero for a log that
    /// cannot be read).
    pub fn of(&self, path: &Path) -> Tally {
        let Ok(mut map) = self.map.lock() else {
            return Tally::default();
        };
        let mut t = map.get(path).copied().unwrap_or_default();
        let Ok(mut file) = std::fs::File::open(path) else {
            map.remove(path);
            return Tally::default();
        };
        let len = file.metadata().map(|m| m.len()).unwrap_or(0);
        if len < t.offset {
            t = Tally::default();
        }
        if file.seek(SeekFrom::Start(t.offset)).is_err() {
            return t;
        }
        let mut new = Vec::new();
        if file.read_to_end(&mut new).is_err() {
            return t;
        }
        // Whole lines only: a line being written is counted next time.
        let whole = new.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
        for line in new[..whole].split(|b| *b == b'\n') {
            if let Ok(e) = serde_json::from_slice::<Event>(line) {
                counts(&mut t, &e);
            }
        }
        t.offset += whole as u64;
        map.insert(path.to_path_buf(), t);
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use warden_audit::Protocol;

    fn conn(allowed: bool) -> Event {
        Event::now(
            "sb",
            EventKind::Connection {
                protocol: Protocol::Dns,
                conn: None,
                name: Some("x.test".into()),
                port: 53,
                original_destination: None,
                allowed,
                rule: None,
                detail: String::new(),
                bytes_out: 0,
                bytes_in: 0,
                duration_ms: 0,
                reason: None,
            },
        )
    }

    #[test]
    fn a_log_is_counted_once_and_then_only_its_new_whole_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let mut f = std::fs::File::create(&path).unwrap();
        for e in [conn(false), conn(true), conn(false)] {
            writeln!(f, "{}", serde_json::to_string(&e).unwrap()).unwrap();
        }
        let tallies = Tallies::default();
        assert_eq!(tallies.of(&path).denied, 2);
        // A line half written is not counted until it is whole.
        let line = serde_json::to_string(&conn(false)).unwrap();
        write!(f, "{}", &line[..10]).unwrap();
        assert_eq!(tallies.of(&path).denied, 2);
        writeln!(f, "{}", &line[10..]).unwrap();
        let degraded = Event::now(
            "sb",
            EventKind::Degraded {
                layer: "seccomp".into(),
                lost: "x".into(),
            },
        );
        writeln!(f, "{}", serde_json::to_string(&degraded).unwrap()).unwrap();
        let t = tallies.of(&path);
        assert_eq!((t.denied, t.violations, t.degraded), (3, 0, 1));
        // A refused program, and a window's count of more, are refused
        // programs, not other violations.
        for kind in [
            EventKind::ExecRefused {
                program: Some("/usr/bin/curl".into()),
                rule: "allow_exec".into(),
                by: "landlock".into(),
            },
            EventKind::ExecRefusedAggregated {
                program: Some("/usr/bin/curl".into()),
                rule: "allow_exec".into(),
                count: 4,
                since_ms: 0,
            },
        ] {
            let e = Event::now("sb", kind);
            writeln!(f, "{}", serde_json::to_string(&e).unwrap()).unwrap();
        }
        let t = tallies.of(&path);
        assert_eq!((t.refused_execs, t.violations), (5, 0));
        // A new log of the same name is read from its start.
        std::fs::write(
            &path,
            format!("{}\n", serde_json::to_string(&conn(false)).unwrap()),
        )
        .unwrap();
        assert_eq!(tallies.of(&path).denied, 1);
    }
}
