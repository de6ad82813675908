//! The project's event type and the sinks that record it.
//!
//! Every part of warden reports what happened as an [`Event`]; sinks decide
//! where events go (a JSON-lines file today; the hash-chained audit log and
//! OTLP later). Events are facts, never commands: nothing reads them back to
//! make a decision.

pub mod chain;
#[cfg(feature = "otlp")]
pub mod otlp;

use serde::Serialize;
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

/// One thing that happened to one sandbox.
#[derive(Debug, Clone, Serialize)]
pub struct Event {
    /// Milliseconds since the Unix epoch.
    pub ts_ms: u64,
    /// The sandbox this event belongs to.
    pub sandbox: String,
    #[serde(flatten)]
    pub kind: EventKind,
}

impl Event {
    pub fn now(sandbox: &str, kind: EventKind) -> Self {
        let ts_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        Event {
            ts_ms,
            sandbox: sandbox.to_string(),
            kind,
        }
    }
}

/// What happened. Serialized with an `"event"` tag, e.g.
/// `{"event":"exited","status":0,...}`.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum EventKind {
    /// The sandbox was configured; nothing runs yet.
    Created {
        command: Vec<String>,
        workspace: Option<PathBuf>,
        rootless: bool,
        cgroup: Option<String>,
    },
    /// A layer of isolation could not be applied and the run goes on without it.
    Degraded { layer: String, lost: String },
    /// The command was started inside the sandbox; `pid` is the host PID of the
    /// sandbox's init.
    Started { pid: i32 },
    /// A connection or DNS query from the sandbox, and what the egress proxy
    /// decided.
    Connection {
        protocol: String,
        name: Option<String>,
        port: u16,
        original_destination: Option<String>,
        allowed: bool,
        rule: Option<String>,
        detail: String,
        bytes_out: u64,
        bytes_in: u64,
        duration_ms: u64,
    },
    /// A person acted on a named sandbox's workspace changes: `create`,
    /// `commit`, `commit-refused`, `discard`, `snapshot`, `restore`.
    Workspace {
        action: String,
        name: String,
        paths: Vec<String>,
        detail: String,
    },
    /// The secret proxy put a secret's real value in a request
    /// (`substituted`), took it out of a response (`scrubbed`), or stopped a
    /// placeholder or a real value on its way to the wrong place
    /// (`blocked`). Never carries a value.
    Secret {
        /// The secret's variable name.
        name: String,
        /// The host the request went (or tried to go) to.
        host: String,
        action: SecretAction,
        detail: String,
    },
    /// Past the decision log's bound, decisions were only counted.
    ConnectionsNotRecorded { allowed: u64, denied: u64 },
    /// The sandbox is gone.
    Exited {
        /// The status warden exits with.
        status: i32,
        reason: ExitReason,
        /// Signal number, when the command died of a signal.
        signal: Option<i32>,
        duration_ms: u64,
        peaks: ResourcePeaks,
    },
}

/// What the secret proxy did with a secret.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SecretAction {
    Substituted,
    Scrubbed,
    Blocked,
}

/// Why the sandbox ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ExitReason {
    /// The command exited by itself.
    Exited,
    /// The command died of a signal.
    Signaled,
    /// `--timeout` was reached and the sandbox was killed.
    Timeout,
    /// The memory limit was exceeded and the kernel killed the command.
    OutOfMemory,
    /// The command could not be started (not found, not executable).
    ExecFailed,
    /// warden itself failed while setting up or supervising the sandbox.
    SetupFailed,
}

/// What the sandbox used at most, where the host could measure it.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct ResourcePeaks {
    /// Peak memory of the sandbox's cgroup, or the largest RSS of any process.
    pub max_rss_bytes: Option<u64>,
    pub cpu_user_ms: Option<u64>,
    pub cpu_system_ms: Option<u64>,
    /// The OOM killer fired this many times inside the sandbox.
    pub oom_kills: Option<u64>,
}

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
    pub fn open(path: &Path) -> Result<Self, SinkError> {
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
