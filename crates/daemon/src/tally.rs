//! What a sandbox's audit log counts for the list of sandboxes: its denied
//! connections and its other refusals. Each log is read once: the counts
//! of a log are kept with how far it was read, in memory and in a small
//! file beside the log (replaced whole), and a later look, by this daemon
//! or the next one, reads only the lines written since (a log that
//! shrank, a new sandbox of the same name, is read again from its start).
//!
//! Reading is cheap where it must be whole: a line is parsed only when its
//! `event` tag is one that can count, and a `created` or `connection` line
//! only when its one field that matters could change the counts; the rest
//! are skipped on their bytes. 200 MiB of `created` events were parsed
//! whole in 18 s by a debug build; now skipped in a fraction of that.

use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use warden_audit::{Event, EventKind};

/// One log's counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
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

/// The `event` tags whose lines [`counts`] can count (every kind
/// [`Event::is_denial`] can call a denial, and those with counts of their
/// own); a line with any other tag counts nothing and is not parsed.
const COUNTED: &[&str] = &[
    "connection",
    "connections_aggregated",
    "connections_not_recorded",
    "exec_refused",
    "exec_refused_aggregated",
    "degraded",
    "secrets_aggregated",
    "created",
    "events_over_budget",
    "secret",
    "workspace",
    "ask_answered",
];

/// The bytes after the first `"key":` of a line (and the blanks a JSON
/// writer other than warden's may put after it). A string value escapes
/// its quotes, so the first such bytes are a key; the keys before
/// `event`, `rootless` and `allowed` in their lines are scalars and
/// strings, so the first is the event's own.
fn after<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let at = line.find(key)?;
    Some(line[at + key.len()..].trim_start_matches([' ', '\t']))
}

/// Whether `line` may change `t`. Exact: a line this says `false` of
/// leaves `t` as it is whether or not it parses.
fn may_count(t: &Tally, line: &[u8]) -> bool {
    let Ok(line) = std::str::from_utf8(line) else {
        return true;
    };
    let Some(rest) = after(line, "\"event\":").and_then(|r| r.strip_prefix('"')) else {
        return true;
    };
    let Some((tag, rest)) = rest.split_once('"') else {
        return true;
    };
    if !COUNTED.contains(&tag) {
        return false;
    }
    let flag = |key: &str| match after(rest, key) {
        Some(v) if v.starts_with("true") => Some(true),
        Some(v) if v.starts_with("false") => Some(false),
        _ => None,
    };
    match tag {
        // Sets `rootless`; the same value again changes nothing.
        "created" => t.rootless.is_none() || flag("\"rootless\":") != t.rootless,
        // An allowed connection counts nothing.
        "connection" => flag("\"allowed\":") != Some(true),
        // Only a refused commit counts (a sandbox made over a workspace
        // has `"action":"create"` as its first line).
        "workspace" => {
            after(rest, "\"action\":").is_none_or(|v| v.starts_with("\"commit-refused\""))
        }
        _ => true,
    }
}

/// Where the counts of the log at `log` are kept beside it.
fn kept_path(log: &Path) -> PathBuf {
    let mut p = log.as_os_str().to_owned();
    p.push(".tally");
    PathBuf::from(p)
}

/// How many bytes before a count's offset it keeps, to tell its log from
/// another of the same name: a record's line ends with its hash.
const TAIL: u64 = 80;

/// Counts kept beside a log, with what identifies the log they were made
/// of: its device and inode, and its bytes just before the offset.
#[derive(Debug, Serialize, Deserialize)]
struct Kept {
    tally: Tally,
    dev: u64,
    ino: u64,
    tail: Vec<u8>,
}

/// The log's bytes just before `offset`.
fn tail_of(file: &std::fs::File, offset: u64) -> Option<Vec<u8>> {
    let start = offset.saturating_sub(TAIL);
    let mut buf = vec![0; (offset - start) as usize];
    file.read_exact_at(&mut buf, start).ok()?;
    Some(buf)
}

/// The counts kept beside `log`, if they were made of this very log.
fn kept(log: &Path, file: &std::fs::File, meta: &std::fs::Metadata) -> Option<Tally> {
    let text = std::fs::read(kept_path(log)).ok()?;
    let k: Kept = serde_json::from_slice(&text).ok()?;
    let same = k.dev == meta.dev()
        && k.ino == meta.ino()
        && k.tally.offset <= meta.len()
        && tail_of(file, k.tally.offset)? == k.tail;
    same.then_some(k.tally)
}

/// Keep `t` beside `log` (replaced whole; a failure only costs the next
/// daemon a longer read).
fn keep(log: &Path, file: &std::fs::File, meta: &std::fs::Metadata, t: Tally) {
    let Some(tail) = tail_of(file, t.offset) else {
        return;
    };
    let k = Kept {
        tally: t,
        dev: meta.dev(),
        ino: meta.ino(),
        tail,
    };
    let Ok(text) = serde_json::to_vec(&k) else {
        return;
    };
    let path = kept_path(log);
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".{}", std::process::id()));
    let tmp = PathBuf::from(tmp);
    let written = std::fs::File::create(&tmp).and_then(|mut f| f.write_all(&text));
    if written.and_then(|()| std::fs::rename(&tmp, &path)).is_err() {
        let _ = std::fs::remove_file(&tmp);
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
        let Ok(mut file) = std::fs::File::open(path) else {
            map.remove(path);
            return Tally::default();
        };
        let Ok(meta) = file.metadata() else {
            return Tally::default();
        };
        let mut t = match map.get(path) {
            Some(t) if t.offset <= meta.len() => *t,
            Some(_) => Tally::default(),
            None => kept(path, &file, &meta).unwrap_or_default(),
        };
        if t.offset == meta.len() {
            map.insert(path.to_path_buf(), t);
            return t;
        }
        if file.seek(SeekFrom::Start(t.offset)).is_err() {
            return t;
        }
        let from = t.offset;
        let mut reader = BufReader::with_capacity(1 << 20, Read::take(&file, meta.len() - from));
        let mut line = Vec::new();
        loop {
            line.clear();
            match reader.read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
            // Whole lines only: a line being written is counted next time.
            if line.last() != Some(&b'\n') {
                break;
            }
            if may_count(&t, &line) {
                if let Ok(e) = serde_json::from_slice::<Event>(&line) {
                    counts(&mut t, &e);
                }
            }
            t.offset += line.len() as u64;
        }
        drop(reader);
        if t.offset > from {
            keep(path, &file, &meta, t);
        }
        map.insert(path.to_path_buf(), t);
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::time::Duration;
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

    fn line(e: &Event) -> String {
        format!("{}\n", serde_json::to_string(e).unwrap())
    }

    /// Every line parsed, as the counts were made before lines were
    /// skipped on their bytes.
    fn parsed_whole(text: &str) -> Tally {
        let mut t = Tally::default();
        for l in text.lines() {
            if let Ok(e) = serde_json::from_str::<Event>(l) {
                counts(&mut t, &e);
            }
        }
        t
    }

    fn created(rootless: bool) -> Event {
        let text = format!(
            r#"{{"ts_ms":1,"sandbox":"sb","event":"created","command":["sh","-c","echo \"rootless\":{}"],"rootless":{rootless},"cgroup":null}}"#,
            !rootless
        );
        serde_json::from_str(&text).unwrap()
    }

    #[test]
    fn lines_skipped_on_their_bytes_count_exactly_what_parsing_every_line_counts() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let mut text = String::new();
        let blocked = Event::now(
            "sb",
            EventKind::ExecRefused {
                program: Some("/usr/bin/curl".into()),
                rule: "allow_exec".into(),
                by: "landlock".into(),
            },
        );
        for e in [
            created(true),
            conn(true),
            conn(false),
            created(true),
            created(false),
            blocked.clone(),
            conn(true),
            created(false),
            created(true),
        ] {
            text.push_str(&line(&e));
        }
        // A line that is not an event, and one whose tag is counted but
        // which does not parse.
        text.push_str("not json \"event\":\"connection\"\n");
        text.push_str("{\"event\":\"degraded\",\"layer\":1}\n");
        // Another JSON writer's blanks (a line appended by hand).
        text.push_str(
            "{\"ts_ms\": 1, \"sandbox\": \"sb\", \"event\": \"exec_refused\", \"program\": null, \"rule\": \"r\", \"by\": \"b\"}\n",
        );
        for action in ["create", "commit-refused", "commit"] {
            text.push_str(&format!(
                "{{\"ts_ms\":1,\"sandbox\":\"sb\",\"event\":\"workspace\",\"action\": \"{action}\",\"name\":\"sb\",\"paths\":[],\"detail\":\"\"}}\n"
            ));
        }
        text.push_str(
            "{\"ts_ms\": 1, \"sandbox\": \"sb\", \"event\": \"created\", \"command\": [], \"rootless\": false, \"cgroup\": null}\n",
        );
        std::fs::write(&path, &text).unwrap();
        let t = Tallies::default().of(&path);
        let whole = parsed_whole(&text);
        assert_eq!(
            (t.denied, t.refused_execs, t.violations, t.rootless),
            (1, 2, 1, Some(false))
        );
        assert_eq!(
            (
                t.denied,
                t.refused_execs,
                t.violations,
                t.degraded,
                t.rootless
            ),
            (
                whole.denied,
                whole.refused_execs,
                whole.violations,
                whole.degraded,
                whole.rootless
            )
        );
    }

    #[test]
    fn a_daemon_that_starts_again_reads_only_what_was_written_since() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let mut text = line(&created(false));
        for _ in 0..100 {
            text.push_str(&line(&conn(false)));
        }
        std::fs::write(&path, &text).unwrap();
        assert_eq!(Tallies::default().of(&path).denied, 100);
        // The lines already counted are overwritten in place (not the
        // last, which tells the log apart): a daemon that read them again
        // would count none of them.
        let counted = text.len() - line(&conn(false)).len();
        let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        f.write_all_at(&vec![b'x'; counted - 1], 0).unwrap();
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        write!(f, "{}", line(&conn(false))).unwrap();
        assert_eq!(Tallies::default().of(&path).denied, 101);
        // Another log of the same name, as long, is read from its start.
        std::fs::remove_file(&path).unwrap();
        std::fs::write(
            &path,
            text.replace("\"allowed\":false", "\"allowed\":true "),
        )
        .unwrap();
        let t = Tallies::default().of(&path);
        assert_eq!((t.denied, t.rootless), (0, Some(false)));
    }

    #[test]
    fn a_log_of_a_million_uncounted_events_is_counted_in_seconds() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let mut text = line(&created(true));
        let mut f = std::fs::File::create(&path).unwrap();
        let one = line(&created(true)) + &line(&conn(true));
        let block = one.repeat(10_000);
        for _ in 0..50 {
            f.write_all(block.as_bytes()).unwrap();
        }
        text.push_str(&line(&conn(false)));
        f.write_all(text.as_bytes()).unwrap();
        let size = f.metadata().unwrap().len();
        let t0 = std::time::Instant::now();
        let t = Tallies::default().of(&path);
        let took = t0.elapsed();
        assert_eq!((t.denied, t.rootless), (1, Some(true)));
        assert_eq!(t.offset, size);
        // Parsing each line took 9 s of a debug build on this log.
        assert!(
            took < Duration::from_secs(4),
            "{} MiB took {took:?}",
            size >> 20
        );
    }
}
