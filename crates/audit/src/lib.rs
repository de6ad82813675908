//! The project's event type and the sinks that record it.
//!
//! Every part of warden reports what happened as an [`Event`] (typed, in
//! `event.rs`); sinks decide where events go: a JSON-lines file, the
//! hash-chained audit log (`chain.rs`), an OTLP collector (`otlp.rs`).
//! Events are facts, never commands: nothing reads them back to make a
//! decision (the audit commands read them back only to show them).

#![forbid(unsafe_code)]
// Below the doors nothing prints: a library reports through its return
// values and observers, and each front door chooses what the person sees
// (tests may say why they skipped).
#![cfg_attr(not(test), deny(clippy::print_stdout, clippy::print_stderr))]

pub mod bound;
pub mod chain;
mod describe;
mod event;
pub mod json;
#[cfg(feature = "otlp")]
pub mod otlp;
mod paths;
mod redacted;

pub use event::{
    Event, EventKind, ExitReason, Protocol, Reason, ResourcePeaks, SecretAction, StopReason, VmCut,
    WorkspaceAction, WouldAllow,
};

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

/// Somewhere events go.
pub trait EventSink {
    fn emit(&mut self, event: &Event);

    /// Why a record could not be written, once one could not: the run
    /// that fed this sink must fail (its record has a gap). None while
    /// every record was written.
    fn failure(&self) -> Option<String> {
        None
    }

    /// Bytes this sink has put in a file since it was opened (0 for one
    /// that writes none): what a sandbox's byte budget for its events is
    /// counted in.
    fn bytes_written(&self) -> u64 {
        0
    }
}

/// Drops every event.
pub struct NullSink;

impl EventSink for NullSink {
    fn emit(&mut self, _: &Event) {}
}

/// Collects events in memory (tests and front doors that forward them).
#[derive(Default)]
pub struct MemorySink(pub Vec<Event>);

impl EventSink for MemorySink {
    fn emit(&mut self, event: &Event) {
        self.0.push(event.clone());
    }
}

/// Sends every event to several sinks.
#[derive(Default)]
pub struct Fanout(pub Vec<Box<dyn EventSink>>);

impl EventSink for Fanout {
    fn emit(&mut self, event: &Event) {
        for s in &mut self.0 {
            s.emit(event);
        }
    }

    fn failure(&self) -> Option<String> {
        self.0.iter().find_map(|s| s.failure())
    }

    fn bytes_written(&self) -> u64 {
        self.0.iter().map(|s| s.bytes_written()).max().unwrap_or(0)
    }
}

/// Why a sink could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    #[error("cannot open event file {path} for appending")]
    Open {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// One JSON object per line, appended and flushed per event so that a reader
/// (or a crash) sees every event up to the last one.
pub struct JsonLinesSink {
    out: BufWriter<File>,
    path: PathBuf,
    /// The first write that failed.
    failed: Option<String>,
    /// Bytes appended to a file (standard output counts none).
    written: u64,
    to_file: bool,
}

impl JsonLinesSink {
    /// `path` `-` is warden's own standard output (`--json-events -`).
    pub fn open(path: &Path) -> Result<Self, SinkError> {
        if path == Path::new("-") {
            use std::os::fd::AsFd;
            let out = std::io::stdout()
                .as_fd()
                .try_clone_to_owned()
                .map_err(|source| SinkError::Open {
                    path: path.to_path_buf(),
                    source,
                })?;
            return Ok(JsonLinesSink {
                out: BufWriter::new(File::from(out)),
                path: PathBuf::from("standard output"),
                failed: None,
                written: 0,
                to_file: false,
            });
        }
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|source| SinkError::Open {
                path: path.to_path_buf(),
                source,
            })?;
        Ok(JsonLinesSink {
            out: BufWriter::new(file),
            path: path.to_path_buf(),
            failed: None,
            written: 0,
            to_file: true,
        })
    }
}

impl EventSink for JsonLinesSink {
    fn emit(&mut self, event: &Event) {
        if self.failed.is_some() {
            // A gap has been reported; nothing after it is written, so the
            // file never holds a later record without the lost one.
            return;
        }
        // The whole line is made first and written at once: a record
        // that cannot be made is never half on the file.
        let event = bound::bounded_event(event);
        // Written by the escaping writer: the file is read by people too.
        let result = json::to_vec(&*event)
            .map_err(std::io::Error::from)
            .and_then(|mut line| {
                line.push(b'\n');
                self.out.write_all(&line)?;
                if self.to_file {
                    self.written += line.len() as u64;
                }
                Ok(())
            })
            .and_then(|()| self.out.flush());
        if let Err(e) = result {
            self.failed = Some(format!(
                "cannot write the {} event to {}: {e}",
                event.kind.name(),
                self.path.display()
            ));
        }
    }

    fn failure(&self) -> Option<String> {
        self.failed.clone()
    }

    fn bytes_written(&self) -> u64 {
        self.written
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // the tests remove their own temporary directories
mod tests {
    use super::*;

    #[test]
    fn events_serialize_with_a_tag_and_flat_fields() {
        let e = Event {
            ts_ms: 1,
            sandbox: "s1".into(),
            kind: EventKind::Exited {
                status: 137,
                reason: ExitReason::OutOfMemory,
                signal: Some(9),
                duration_ms: 5,
                peaks: ResourcePeaks::default(),
            },
        };
        let v: serde_json::Value = serde_json::to_value(&e).unwrap();
        assert_eq!(v["event"], "exited");
        assert_eq!(v["reason"], "out_of_memory");
        assert_eq!(v["status"], 137);
        assert_eq!(v["sandbox"], "s1");
    }

    #[test]
    fn json_lines_sink_appends_one_line_per_event() {
        let dir = std::env::temp_dir().join(format!("warden-audit-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("events.jsonl");
        let _ = std::fs::remove_file(&path);
        let mut sink = JsonLinesSink::open(&path).unwrap();
        sink.emit(&Event::now("a", EventKind::Started { pid: 7 }));
        sink.emit(&Event::now("a", EventKind::Started { pid: 8 }));
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2);
        let second: serde_json::Value = serde_json::from_str(lines[1]).unwrap();
        assert_eq!(second["pid"], 8);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
