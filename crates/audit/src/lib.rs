//! The project's event type and the sinks that record it.
//!
//! Every part of warden reports what happened as an [`Event`] (typed, in
//! `event.rs`); sinks decide where events go: a JSON-lines file, the
//! hash-chained audit log (`chain.rs`), an OTLP collector (`otlp.rs`).
//! Events are facts, never commands: nothing reads them back to make a
//! decision (the audit commands read them back only to show them).

pub mod chain;
mod describe;
mod event;
#[cfg(feature = "otlp")]
pub mod otlp;

pub use event::{
    Event, EventKind, ExitReason, Protocol, ResourcePeaks, SecretAction, StopReason,
    WorkspaceAction,
};

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

/// Somewhere events go.
pub trait EventSink {
    fn emit(&mut self, event: &Event);
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
    failed: bool,
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
                failed: false,
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
            failed: false,
        })
    }
}

impl EventSink for JsonLinesSink {
    fn emit(&mut self, event: &Event) {
        let result = serde_json::to_writer(&mut self.out, event)
            .map_err(std::io::Error::from)
            .and_then(|()| self.out.write_all(b"\n"))
            .and_then(|()| self.out.flush());
        // An event file that stops accepting writes is reported once; the
        // sandbox itself keeps running under its limits.
        if let Err(e) = result {
            if !self.failed {
                self.failed = true;
                eprintln!(
                    "warden: cannot write events to {}: {e}",
                    self.path.display()
                );
            }
        }
    }
}

#[cfg(test)]
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
