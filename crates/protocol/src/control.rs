//! The control protocol of a sandbox's supervisor: what a caller (the CLI,
//! the daemon, the OCI verbs) asks over the supervisor's control socket,
//! and what it answers.
//!
//! The socket is a Unix `SOCK_SEQPACKET` socket, owner-only, in the
//! sandbox's state directory: the kernel frames each message (one JSON
//! value per packet) and carries descriptors with it (SCM_RIGHTS), so a
//! local caller hands its own terminal or pipes to the process it starts
//! (`warden_runtime::protocol` sends and receives them). Every
//! conversation opens with [`Request::Hello`]; a supervisor refuses a
//! caller of another [`VERSION`].

use serde::{Deserialize, Serialize};
use warden_audit::Event;

/// The protocol's version; both sides must speak the same.
pub const VERSION: u32 = 1;
/// Largest message either side reads.
pub const MAX_MESSAGE: usize = 192 * 1024;

/// What a caller asks. One request per connection, after `Hello`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    Hello {
        version: u32,
    },
    /// Start a process in the sandbox. Descriptors: `[stdin, stdout,
    /// stderr]`; none when `tty` (the sandbox opens the terminal, and its
    /// master side comes back with `spawned`).
    Exec(ExecRequest),
    /// Send a signal to a process started by an exec (and its group).
    Signal {
        exec: u64,
        signal: i32,
    },
    /// Stop the sandbox: SIGTERM to every process, SIGKILL after `grace_ms`.
    Stop {
        grace_ms: u64,
    },
    /// The sandbox's state and what it uses.
    Status,
    /// Stop the sandbox `ttl_ms` from now (none: no TTL).
    SetTtl {
        ttl_ms: Option<u64>,
    },
    /// Its processes.
    Ps,
    /// Its events from now on, as they happen, until the sandbox ends.
    Follow,
    /// A file operation in the sandbox's workspace, done by its init
    /// inside the sandbox (see [`crate::files`]); answered with
    /// [`Reply::File`]. Supervisors older than this request close the
    /// connection without an answer.
    File(crate::files::FileOp),
    /// Change the allowlist of the running proxy: `remove` taken off, then
    /// `allow` put on (entries as `--allow-domain` takes them); open
    /// connections a removed entry covered are cut. Both empty: only read
    /// it. Answered [`Reply::Egress`] with the list as it is now, or
    /// [`Reply::Refused`] (and nothing changed). `by` says who asked, for
    /// the audit log.
    SetEgress {
        allow: Vec<String>,
        remove: Vec<String>,
        by: String,
        /// Asked by someone other than the owner (a token holder of the
        /// daemon): what it adds reaches public addresses only. Absent:
        /// the owner (the CLI, the daemon's owner-only socket).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        caller: bool,
    },
    /// The questions of ask mode waiting for an answer: [`Reply::Approvals`].
    Approvals,
    /// Answer one: [`Reply::Ok`], or [`Reply::Refused`] (`not_found`, or
    /// `conflict` when it was answered already or timed out).
    Answer {
        question: String,
        decision: AskDecision,
        by: String,
        /// Answered by someone other than the owner: a name it allows
        /// reaches public addresses only, as `SetEgress`'s `caller`.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        caller: bool,
    },
    /// Keep a process to start later with [`Request::Release`]: an OCI
    /// container's first process, whose stdio `create` is given and which
    /// `start` starts. Descriptors as for [`Request::Exec`]. Its end ends
    /// the sandbox, and the supervisor exits with its status (the process
    /// whose exit containerd's shim waits for). Answered `ok`.
    Hold(ExecRequest),
    /// Start the held process; answered `spawned` (with the terminal's
    /// master side when it has one) or `failed`.
    Release,
    /// A stream connected to a service inside the sandbox, on its own
    /// loopback or at a Unix socket path of its file tree (see
    /// [`crate::connect`]): the sandbox's init opens the socket in the
    /// sandbox's namespaces, and it comes back with [`Reply::Connect`], so
    /// nothing listens on the host. Any address but the sandbox's loopback
    /// is refused ([`Reply::Refused`], `invalid`).
    Connect(crate::connect::Target),
    /// Freeze every process of the sandbox in place (its memory kept):
    /// answered [`Reply::Ok`], or [`Reply::Refused`] (`conflict` when it is
    /// paused already or ending, `unsupported` when its backend cannot).
    /// While paused, requests that need the sandbox's processes (exec,
    /// file, connect, signal, hold, release) are refused `paused`, and its
    /// TTL and hard lifetime do not run. `by` says who asked, for the
    /// audit log. `to_disk`: the sandbox's memory saved to its state and
    /// its RAM freed (a VM's, whose VMM ends; refused `unsupported` by a
    /// backend that cannot, and by a VM that cannot be saved, which runs
    /// on).
    Pause {
        by: String,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        to_disk: bool,
    },
    /// Let a paused sandbox's processes go on where they were: answered
    /// [`Reply::Ok`], or [`Reply::Refused`] (`conflict` when it is not
    /// paused).
    Resume {
        by: String,
    },
    /// Append a record of what was done to the sandbox's workspace or
    /// state from outside it (a snapshot, a fork, a commit, ...) to its
    /// audit log, through the supervisor's own writer (which holds the
    /// log while the sandbox runs) and its live sinks. `action` is one of
    /// `warden_audit::WorkspaceAction`'s words; anything else is refused
    /// (`invalid`, field `/action`) and nothing is written: no caller
    /// writes an event of another kind through this. The record names
    /// the supervisor's own sandbox, whatever the caller says. Answered
    /// [`Reply::Ok`] once every sink has it, [`Reply::Error`] when one
    /// could not write it, or [`Reply::Refused`] `conflict` when the
    /// sandbox is ending and its log is closed (the caller then writes
    /// the record to the log itself).
    Record {
        action: String,
        /// Each path as text, or as its bytes where it is not UTF-8.
        #[serde(default, with = "wire_paths")]
        paths: Vec<std::path::PathBuf>,
        detail: String,
    },
}

/// Paths on the wire exactly: as text, or as their bytes where they are
/// not UTF-8 (a file name may be any bytes but `/` and NUL).
mod wire_paths {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};
    use std::ffi::OsString;
    use std::os::unix::ffi::{OsStrExt, OsStringExt};
    use std::path::PathBuf;

    #[derive(Serialize, Deserialize)]
    #[serde(untagged)]
    enum Wire {
        Text(String),
        Bytes(Vec<u8>),
    }

    pub fn serialize<S: Serializer>(ps: &[PathBuf], s: S) -> Result<S::Ok, S::Error> {
        ps.iter()
            .map(|p| match p.to_str() {
                Some(t) => Wire::Text(t.to_string()),
                None => Wire::Bytes(p.as_os_str().as_bytes().to_vec()),
            })
            .collect::<Vec<_>>()
            .serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<PathBuf>, D::Error> {
        Ok(Vec::<Wire>::deserialize(d)?
            .into_iter()
            .map(|w| match w {
                Wire::Text(t) => PathBuf::from(t),
                Wire::Bytes(b) => PathBuf::from(OsString::from_vec(b)),
            })
            .collect())
    }
}

/// An answer to an ask-mode question.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AskDecision {
    /// This connection only; the next one asks again.
    AllowOnce,
    /// This connection and every later one: the name goes on the
    /// sandbox's allowlist, and stays there across restarts.
    AllowAlways,
    Deny,
}

impl AskDecision {
    pub fn as_str(self) -> &'static str {
        match self {
            AskDecision::AllowOnce => "allow_once",
            AskDecision::AllowAlways => "allow_always",
            AskDecision::Deny => "deny",
        }
    }
}

/// A question waiting for an answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingQuestion {
    /// Unique across the sandbox's starts: `SANDBOX.START-N`.
    pub id: String,
    pub sandbox: String,
    /// `tls`, `http`, `connect` or `tcp`; `request` for a single request
    /// an ask rule holds; `exec` for a program the exec allowlist refused
    /// (`name` its path as the judge resolved it, `port` 0).
    pub protocol: String,
    pub name: String,
    pub port: u16,
    /// What an answer does, where it differs from a name's (a program's
    /// question: `allow_once` is answered as `deny`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// For a request an ask rule holds: its method and path (the query's
    /// values redacted), e.g. `POST /repos/acme/w/issues`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<String>,
    pub asked_ms: u64,
    /// When it is denied unanswered.
    pub deadline_ms: u64,
}

/// Why a supervisor refused a request (in terms a front door maps to its
/// own: a status, a flag).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Refusal {
    /// Bad input: nothing was changed.
    Invalid,
    NotFound,
    /// The request does not fit the sandbox's state (a question answered
    /// already, a sandbox without egress).
    Conflict,
    /// The sandbox is paused: resume it first.
    Paused,
    /// The sandbox's backend (or this host) cannot do it.
    Unsupported,
    /// The supervisor serves as many connections as it may at once (each
    /// running command holds one): nothing was started, and a place comes
    /// back when one of them ends.
    Busy,
}

/// One process to start.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecRequest {
    pub argv: Vec<String>,
    /// Added to the sandbox's environment (replacing the same names).
    pub env: Vec<(String, String)>,
    /// Working directory inside; the sandbox's own when `None`.
    pub cwd: Option<String>,
    pub tty: bool,
    /// With `tty`: the terminal's first size, rows and columns.
    #[serde(default)]
    pub winsize: Option<(u16, u16)>,
    /// Its stdout and stderr are files its caller keeps (the daemon's,
    /// named by this id in the sandbox's `warden_runtime::output::EXECS_DIR`):
    /// the supervisor relays them, keeping them within the sandbox's
    /// output budget and noting what it dropped (`ID.cut`).
    #[serde(default)]
    pub keep_output: Option<String>,
}

/// What the supervisor answers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Reply {
    Hello {
        version: u32,
        sandbox: String,
        /// The supervisor's host PID.
        pid: u32,
    },
    /// The process runs (`pid` inside the sandbox).
    Spawned {
        exec: u64,
        pid: i32,
    },
    /// It ended; `status` as `warden run` maps it (128+N for signal N).
    Exited {
        exec: u64,
        status: i32,
        signal: Option<i32>,
    },
    /// It could not be started; `status` 127 (not found) or 126.
    Failed {
        status: i32,
        message: String,
    },
    Status(Status),
    Ps {
        processes: Vec<Process>,
    },
    Event(Event),
    /// A file operation's result: `errno` 0 when done; an opened file or
    /// directory comes with it as a descriptor.
    File {
        errno: i32,
    },
    /// A connection's result: `errno` 0 when connected, with the socket as
    /// a descriptor (ECONNREFUSED: nothing listens there).
    Connect {
        errno: i32,
    },
    Ok,
    Error {
        message: String,
    },
    /// The allowlist as it is now (entries as written).
    Egress {
        rules: Vec<String>,
    },
    Approvals {
        pending: Vec<PendingQuestion>,
    },
    /// Refused, and why; `field` is the request's field at fault, as a
    /// JSON pointer (`/allow/2`). `reason`: the stable code below `code`
    /// of a refusal about the sandbox's own options (a share refused at a
    /// resume), and the option it is about; absent for the others, and
    /// from older supervisors.
    Refused {
        code: Refusal,
        message: String,
        field: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<Reason>,
    },
}

/// A refusal's stable reason code (`share_link`, `share_changed`, ...)
/// and the option of the sandbox's spec it is about: what a front door
/// words in its own terms (a flag, a profile's key, a JSON pointer in
/// the spec), as it words the same refusal at a start.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reason {
    pub code: String,
    /// The option by its profile key (`filesystem.read_write`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub option: Option<String>,
    /// Which entry of that option: its position among the option's
    /// values, or a secret's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub item: Option<String>,
}

/// A running sandbox, as its supervisor sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Status {
    pub sandbox: String,
    /// Host PID of the sandbox's init.
    pub init_pid: i32,
    pub started_ms: u64,
    /// When the TTL stops it, if it has one.
    pub ttl_deadline_ms: Option<u64>,
    /// Processes in the sandbox (its init not counted).
    pub processes: usize,
    /// Execs still running.
    pub execs: usize,
    /// Memory in use by the whole sandbox, where its cgroup says.
    pub memory_bytes: Option<u64>,
    /// Bytes through the egress proxy, both ways, of finished connections.
    pub egress_bytes: u64,
    /// CPU time used by the whole sandbox (µs), where its cgroup says.
    #[serde(default)]
    pub cpu_usec: Option<u64>,
    /// The held first process ([`Request::Hold`]), when there is one.
    #[serde(default)]
    pub main: Option<MainState>,
    /// A desktop sandbox's programs, as its supervisor keeps them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub desktop: Option<Vec<DesktopService>>,
    /// Since when the sandbox is paused (ms since the epoch), when it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused_ms: Option<u64>,
}

/// One program of a desktop sandbox (the X server, the browser, ...).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DesktopService {
    pub name: String,
    /// `starting`, `running`, `restarting` or `failed` (given up).
    pub state: String,
    /// Its PID inside the sandbox while it runs.
    pub pid: Option<i32>,
    pub restarts: u32,
    /// How it last ended, with the last of what it printed.
    pub last_exit: Option<String>,
}

/// Where a sandbox's held first process is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum MainState {
    /// Given, not started yet.
    Held,
    Running {
        exec: u64,
        pid: i32,
    },
    /// It ended with `status` (128+N for signal N); the sandbox is ending.
    Exited {
        status: i32,
    },
}

/// One process of the sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Process {
    /// PID inside the sandbox.
    pub pid: i32,
    pub host_pid: i32,
    /// The exec that started it, when it is one's own process.
    pub exec: Option<u64>,
    pub command: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_round_trip_as_tagged_json() {
        let r = Request::Exec(ExecRequest {
            argv: vec!["sh".into(), "-c".into(), "true".into()],
            env: vec![("A".into(), "1".into())],
            cwd: None,
            tty: false,
            winsize: None,
            keep_output: None,
        });
        let text = serde_json::to_string(&r).unwrap();
        assert!(text.contains("\"op\":\"exec\""), "{text}");
        assert_eq!(serde_json::from_str::<Request>(&text).unwrap(), r);
    }

    /// The bytes older supervisors, the daemon and the Python client's
    /// tests already exchange: a change of shape here breaks them.
    #[test]
    fn the_wire_shapes_are_the_ones_peers_speak() {
        assert_eq!(
            json(&Request::Hello { version: 1 }),
            r#"{"op":"hello","version":1}"#
        );
        assert_eq!(
            json(&Request::File(crate::files::FileOp::Mkdir {
                path: "a/b".into(),
                parents: true
            })),
            r#"{"op":"file","kind":"mkdir","path":"a/b","parents":true}"#
        );
        assert_eq!(
            json(&Request::Connect(crate::connect::Target::loopback(5900))),
            r#"{"op":"connect","kind":"tcp","addr":"127.0.0.1:5900"}"#
        );
        assert_eq!(
            json(&Request::SetEgress {
                allow: vec!["a.example".into()],
                remove: vec![],
                by: "cli".into(),
                caller: false
            }),
            r#"{"op":"set_egress","allow":["a.example"],"remove":[],"by":"cli"}"#
        );
        assert_eq!(
            json(&Reply::Refused {
                code: Refusal::NotFound,
                message: "no such question".into(),
                field: None,
                reason: None
            }),
            r#"{"op":"refused","code":"not_found","message":"no such question","field":null}"#
        );
        assert_eq!(
            json(&Reply::File { errno: 2 }),
            r#"{"op":"file","errno":2}"#
        );
        assert_eq!(
            json(&MainState::Running { exec: 3, pid: 7 }),
            r#"{"state":"running","exec":3,"pid":7}"#
        );
        assert_eq!(json(&AskDecision::AllowAlways), r#""allow_always""#);
        assert_eq!(
            json(&Request::Pause {
                by: "cli".into(),
                to_disk: false
            }),
            r#"{"op":"pause","by":"cli"}"#
        );
        assert_eq!(
            json(&Request::Pause {
                by: "cli".into(),
                to_disk: true
            }),
            r#"{"op":"pause","by":"cli","to_disk":true}"#
        );
        assert_eq!(
            refused(Refusal::Paused, "paused"),
            r#"{"op":"refused","code":"paused","message":"paused","field":null}"#
        );
        assert_eq!(
            refused(Refusal::Busy, "full"),
            r#"{"op":"refused","code":"busy","message":"full","field":null}"#
        );
    }

    /// A refusal with its reason code and option, as a resume's share
    /// refusal crosses the socket; one without a reason keeps the shape
    /// older callers read.
    #[test]
    fn a_refusal_carries_its_reason_code_and_option_whole() {
        let r = Reply::Refused {
            code: Refusal::Conflict,
            message: "refused".into(),
            field: None,
            reason: Some(Reason {
                code: "share_link".into(),
                option: Some("filesystem.read_write".into()),
                item: Some("1".into()),
            }),
        };
        let text = json(&r);
        assert_eq!(
            text,
            r#"{"op":"refused","code":"conflict","message":"refused","field":null,"reason":{"code":"share_link","option":"filesystem.read_write","item":"1"}}"#
        );
        assert_eq!(serde_json::from_str::<Reply>(&text).unwrap(), r);
        let old = r#"{"op":"refused","code":"conflict","message":"m","field":null}"#;
        assert!(matches!(
            serde_json::from_str::<Reply>(old).unwrap(),
            Reply::Refused { reason: None, .. }
        ));
    }

    #[test]
    fn a_record_request_carries_its_action_as_a_word() {
        assert_eq!(
            json(&Request::Record {
                action: "snapshot".into(),
                paths: vec![],
                detail: "saved as s1".into()
            }),
            r#"{"op":"record","action":"snapshot","paths":[],"detail":"saved as s1"}"#
        );
        use std::os::unix::ffi::OsStrExt;
        let odd = std::path::PathBuf::from(std::ffi::OsStr::from_bytes(b"a\xffb"));
        let r = Request::Record {
            action: "commit".into(),
            paths: vec!["src/x.rs".into(), odd],
            detail: String::new(),
        };
        let text = json(&r);
        assert!(
            text.contains(r#""paths":["src/x.rs",[97,255,98]]"#),
            "{text}"
        );
        assert_eq!(serde_json::from_str::<Request>(&text).unwrap(), r);
    }

    /// A refusal without a field, as the wire carries it.
    fn refused(code: Refusal, message: &str) -> String {
        json(&Reply::Refused {
            code,
            message: message.into(),
            field: None,
            reason: None,
        })
    }

    fn json<T: Serialize>(value: &T) -> String {
        serde_json::to_string(value).unwrap()
    }
}
