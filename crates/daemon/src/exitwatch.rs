//! The exit of a command this daemon did not see start (one a restarted
//! daemon adopts, or one whose output is kept), found in its sandbox's
//! event log: followed from where the last look ended, so a look reads
//! only what was appended since. Read whole at every look, a log of a
//! few megabytes made each such command a reader of the whole log five
//! times a second (ten commands over an 8 MB log: 0.45 of a core).

use std::io::{Read, Seek, SeekFrom};
use std::path::PathBuf;

/// A second of slack: a command's start is stamped by the daemon or the
/// relay, the events by the sandbox's bus.
const SLACK_MS: u64 = 1000;

/// The most read at once.
const MOST_PER_READ: u64 = 1 << 20;

/// One command's exit, looked for in `log` from where the last look ended.
pub struct ExitWatch {
    log: PathBuf,
    exec: u64,
    started_ms: u64,
    /// How far the log has been read.
    offset: u64,
    /// The start of a line not yet whole.
    carry: Vec<u8>,
    /// An event at or after the command's start has been read: an
    /// `exec_exited` of its number from here on is its own (an earlier
    /// start's exec of the same number is older).
    started: bool,
    found: Option<(i32, Option<i32>)>,
}

impl ExitWatch {
    pub fn new(log: PathBuf, exec: u64, started_ms: u64) -> ExitWatch {
        ExitWatch {
            log,
            exec,
            started_ms,
            offset: 0,
            carry: Vec::new(),
            started: false,
            found: None,
        }
    }

    /// Its status and signal, once the log says it exited.
    pub fn look(&mut self) -> Option<(i32, Option<i32>)> {
        if self.found.is_some() {
            return self.found;
        }
        let mut f = std::fs::File::open(&self.log).ok()?;
        let len = f.metadata().ok()?.len();
        if len < self.offset {
            // Replaced by a shorter log: read the new one from its start.
            self.offset = 0;
            self.carry.clear();
            self.started = false;
        }
        f.seek(SeekFrom::Start(self.offset)).ok()?;
        // In pieces, so a long log is never held whole; to its end at
        // each look.
        while self.offset < len && self.found.is_none() {
            let mut read = Vec::new();
            (&mut f)
                .take((len - self.offset).min(MOST_PER_READ))
                .read_to_end(&mut read)
                .ok()?;
            if read.is_empty() {
                break;
            }
            self.offset += read.len() as u64;
            self.carry.extend_from_slice(&read);
            let Some(last) = self.carry.iter().rposition(|&b| b == b'\n') else {
                continue;
            };
            let rest = self.carry.split_off(last + 1);
            let lines = std::mem::replace(&mut self.carry, rest);
            for line in lines.split(|&b| b == b'\n') {
                self.read_line(line);
            }
        }
        self.found
    }

    fn read_line(&mut self, line: &[u8]) {
        let Ok(e) = serde_json::from_slice::<warden_audit::Event>(line) else {
            return;
        };
        if e.ts_ms + SLACK_MS >= self.started_ms {
            self.started = true;
        }
        if let warden_audit::EventKind::ExecExited {
            exec,
            status,
            signal,
            ..
        } = e.kind
        {
            if self.started && exec == self.exec {
                self.found = Some((status, signal));
            }
        }
    }

    /// How far the log has been read (for tests).
    #[cfg(test)]
    fn read_to(&self) -> u64 {
        self.offset
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn exited(ts_ms: u64, exec: u64) -> String {
        let mut e = warden_audit::Event::now(
            "s",
            warden_audit::EventKind::ExecExited {
                exec,
                status: 3,
                signal: None,
                duration_ms: 1,
            },
        );
        e.ts_ms = ts_ms;
        format!("{}\n", serde_json::to_string(&e).unwrap())
    }

    #[test]
    fn an_exit_is_found_in_what_was_appended_and_the_log_is_not_read_again() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("audit.jsonl");
        // An earlier start's exec of the same number, long before.
        std::fs::write(&log, exited(1_000, 7)).unwrap();
        let mut w = ExitWatch::new(log.clone(), 7, 100_000);
        assert_eq!(w.look(), None);
        let after_first = w.read_to();
        assert!(after_first > 0);
        // Half a line is not read as one.
        let line = exited(100_500, 7);
        let (a, b) = line.split_at(line.len() / 2);
        let mut f = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
        f.write_all(a.as_bytes()).unwrap();
        assert_eq!(w.look(), None);
        f.write_all(b.as_bytes()).unwrap();
        assert_eq!(w.look(), Some((3, None)));
        // Each byte was read once.
        assert_eq!(w.read_to(), after_first + line.len() as u64);
    }

    #[test]
    fn a_log_replaced_by_a_shorter_one_is_read_from_its_start() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("audit.jsonl");
        std::fs::write(&log, exited(1_000, 1).repeat(4)).unwrap();
        let mut w = ExitWatch::new(log.clone(), 2, 100_000);
        assert_eq!(w.look(), None);
        std::fs::write(&log, exited(100_000, 2)).unwrap();
        assert_eq!(w.look(), Some((3, None)));
    }

    #[test]
    fn an_exit_behind_more_than_one_read_is_found_at_one_look() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("audit.jsonl");
        let filler = format!("{{\"pad\":\"{}\"}}\n", "x".repeat(500));
        let mut text = filler.repeat((3 * MOST_PER_READ as usize) / filler.len());
        text.push_str(&exited(100_000, 4));
        std::fs::write(&log, text).unwrap();
        let mut w = ExitWatch::new(log, 4, 100_000);
        assert_eq!(w.look(), Some((3, None)));
    }
}
