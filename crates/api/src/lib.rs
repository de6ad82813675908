//! The API's request and response bodies. These types are the contract:
//! the handlers take and give them, and the OpenAPI document is generated
//! from them.

#![forbid(unsafe_code)]
// Below the doors nothing prints: a library reports through its return
// values and observers, and each front door chooses what the person sees
// (tests may say why they skipped).
#![cfg_attr(not(test), deny(clippy::print_stdout, clippy::print_stderr))]

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use utoipa::ToSchema;

/// `POST /v1/sandboxes`.
#[derive(Debug, Clone, Default, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateSandbox {
    /// Its id (lowercase letters, digits, `_`, `.`, `-`); a new one when
    /// left out.
    #[serde(default)]
    pub name: Option<String>,
    /// A profile by name (see `warden profile list`).
    #[serde(default)]
    pub profile: Option<String>,
    /// A profile given whole, with the keys of a profile file (e.g.
    /// `{"egress": {"domains": ["pypi.org"]}, "resources": {"memory": "1G"}}`);
    /// over `profile` when both are given.
    #[serde(default)]
    #[schema(value_type = Object)]
    pub spec: Option<serde_json::Value>,
    /// The directory it works on (absolute, on the daemon's host); without
    /// one it gets an empty workspace of its own.
    #[serde(default)]
    pub workspace: Option<String>,
    /// Stop it this many seconds after it starts.
    #[serde(default)]
    pub ttl_seconds: Option<u64>,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Start it at once (the default).
    #[serde(default)]
    pub start: Option<bool>,
}

/// A sandbox as the API shows it.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema, PartialEq)]
pub struct SandboxInfo {
    pub id: String,
    /// `running`, `paused` (its processes frozen in place) or `stopped`.
    pub state: String,
    pub profile: Option<String>,
    pub labels: BTreeMap<String, String>,
    /// Its workspace directory on the daemon's host, shown to the owner
    /// only: empty for a token holder, who is shown no host path.
    pub workspace: String,
    pub created_ms: u64,
    pub age_seconds: u64,
    /// When its TTL stops it (ms since the epoch), while it runs.
    pub ttl_deadline_ms: Option<u64>,
    pub memory_bytes: Option<u64>,
    pub egress_bytes: u64,
    pub processes: usize,
    /// Commands still running.
    pub execs: usize,
    /// Bytes of changes in its workspace layer.
    pub changes_bytes: u64,
    /// CPU time used by the whole sandbox (µs), where its cgroup says,
    /// while it runs: a client takes the change between two looks for
    /// its CPU share.
    #[serde(default)]
    pub cpu_usec: Option<u64>,
    /// What isolates it: `namespaces` or `rootless namespaces`, and its
    /// workspace's layer (`overlay` or `copy`).
    #[serde(default)]
    pub backend: String,
    /// Connections and DNS queries its egress proxy denied, from its
    /// audit log.
    #[serde(default)]
    pub denied_connections: u64,
    /// Programs its exec allowlist refused inside it, from the kernel's
    /// records in its audit log (`exec_refused` events; a host that keeps
    /// no such record counts none: see `warden doctor`).
    #[serde(default)]
    pub refused_execs: u64,
    /// Other refusals its audit log records: a secret blocked on its way
    /// to the wrong host, a question denied or left unanswered, a commit
    /// refused.
    #[serde(default)]
    pub violations: u64,
    /// Layers of isolation the host could not give it (a rootless user
    /// without a cgroup, a kernel without Landlock): its `degraded` events
    /// say which. Not the sandbox's doing, so not among `violations`.
    #[serde(default)]
    pub degraded: u64,
}

/// `GET /v1/sandboxes`.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct SandboxList {
    pub sandboxes: Vec<SandboxInfo>,
}

/// `POST /v1/sandboxes/{id}/timeout`.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SetTimeout {
    /// Stop it this many seconds from now; `null`: no TTL.
    pub ttl_seconds: Option<u64>,
}

/// `POST /v1/sandboxes/{id}/stop`.
#[derive(Debug, Clone, Default, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct StopSandbox {
    /// Seconds between SIGTERM and SIGKILL (default 10).
    #[serde(default)]
    pub grace_seconds: Option<u64>,
}

/// `POST /v1/sandboxes/{id}/exec`.
#[derive(Debug, Clone, Default, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ExecRequest {
    /// The program and its arguments.
    #[serde(default)]
    pub argv: Option<Vec<String>>,
    /// Or a command line for `sh -c`.
    #[serde(default)]
    pub shell: Option<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Working directory inside the sandbox (default `/workspace`).
    #[serde(default)]
    pub cwd: Option<String>,
    /// Text given to the command on its standard input, which is then
    /// closed (unless `stdin_open`).
    #[serde(default)]
    pub stdin: Option<String>,
    /// Keep standard input open for `POST .../stdin`.
    #[serde(default)]
    pub stdin_open: bool,
    /// Kill the command after this many seconds (status 124).
    #[serde(default)]
    pub timeout_seconds: Option<f64>,
    /// Answer as a stream of events (NDJSON, or server-sent events when
    /// the request accepts `text/event-stream`) instead of one result.
    #[serde(default)]
    pub stream: bool,
    /// Return as soon as it runs, with its id; its output is read with
    /// `GET .../execs/{exec}/output`.
    #[serde(default)]
    pub background: bool,
}

/// A command, running or ended.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema, PartialEq)]
pub struct ExecInfo {
    pub id: String,
    pub sandbox: String,
    pub argv: Vec<String>,
    /// PID inside the sandbox.
    pub pid: Option<i32>,
    pub started_ms: u64,
    /// Exit status once it ended (128+N for signal N, 124 on timeout).
    pub exit_status: Option<i32>,
    pub signal: Option<i32>,
    pub finished_ms: Option<u64>,
    /// A terminal session (`GET .../pty`): listed for the record; its
    /// bytes went over the WebSocket, so it has no output to replay.
    #[serde(default)]
    pub tty: bool,
    /// Bytes of standard output (and error) the command wrote past its
    /// sandbox's output budget (a quarter of its disk limit, kept on the
    /// host for all its commands together): dropped, not kept; 0 when
    /// nothing was.
    #[serde(default)]
    pub stdout_dropped: u64,
    #[serde(default)]
    pub stderr_dropped: u64,
}

/// The answer to an exec that was not streamed.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema, PartialEq)]
pub struct ExecResult {
    pub id: String,
    pub exit_status: i32,
    pub signal: Option<i32>,
    pub timed_out: bool,
    /// Standard output, as UTF-8 (invalid bytes replaced); see
    /// `stdout_base64` for the exact bytes when it was not UTF-8.
    pub stdout: String,
    pub stderr: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stdout_base64: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stderr_base64: Option<String>,
    /// Bytes of standard output (and error) the command wrote past its
    /// sandbox's output budget (a quarter of its disk limit, kept on the
    /// host for all its commands together): dropped, not kept; 0 when
    /// nothing was.
    #[serde(default)]
    pub stdout_dropped: u64,
    #[serde(default)]
    pub stderr_dropped: u64,
    /// Credential-shaped strings in the output (a key, a token, a private
    /// key block): where, by which rule, never the value. Absent when
    /// there are none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub flagged: Vec<OutputFinding>,
}

/// A credential-shaped string in a command's output.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema, PartialEq)]
pub struct OutputFinding {
    /// `stdout` or `stderr`.
    pub stream: String,
    /// The detector's rule (`github-token`, `aws-access-key-id`, ...).
    pub rule: String,
    /// Byte offset of the value in the stream, its length, and its line
    /// (from 1).
    pub offset: u64,
    pub len: u64,
    pub line: u64,
    /// The first 16 hex digits of the value's SHA-256.
    pub hash: String,
}

/// One line of an exec's stream.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema, PartialEq)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ExecEvent {
    Started {
        id: String,
        pid: i32,
    },
    /// Output; `data` is UTF-8 text, or `data_base64` the bytes when they
    /// are not. `offset`: where this chunk starts in the whole stream.
    Stdout {
        #[serde(skip_serializing_if = "Option::is_none")]
        data: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        data_base64: Option<String>,
        offset: u64,
    },
    Stderr {
        #[serde(skip_serializing_if = "Option::is_none")]
        data: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        data_base64: Option<String>,
        offset: u64,
    },
    Exited {
        exit_status: i32,
        signal: Option<i32>,
        timed_out: bool,
        /// What was dropped past the sandbox's output budget (see
        /// `ExecInfo`).
        #[serde(default)]
        stdout_dropped: u64,
        #[serde(default)]
        stderr_dropped: u64,
    },
    /// Nothing new; the connection is alive.
    Keepalive,
}

/// `POST .../execs/{exec}/signal`.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SignalRequest {
    /// A number, or a name such as `SIGTERM` / `TERM`.
    pub signal: serde_json::Value,
}

/// `POST .../execs/{exec}/stdin`.
#[derive(Debug, Clone, Default, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct StdinRequest {
    #[serde(default)]
    pub data: Option<String>,
    #[serde(default)]
    pub data_base64: Option<String>,
    /// Close standard input after writing.
    #[serde(default)]
    pub close: bool,
}

/// An entry of a directory listing.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema, PartialEq)]
pub struct FileEntry {
    pub name: String,
    /// Relative to the workspace.
    pub path: String,
    /// `file`, `dir`, `symlink` or `other`.
    pub kind: String,
    pub size: u64,
    pub mode: u32,
    pub modified_ms: u64,
}

/// `GET .../files/list`: at most a page of entries, in name order.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct FileList {
    pub entries: Vec<FileEntry>,
    /// Present when the directory has more entries than one answer
    /// holds: pass it as `after` for the next page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
}

/// `POST .../files/move`.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MoveRequest {
    pub from: String,
    pub to: String,
}

/// `POST .../files/mkdir`.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MkdirRequest {
    pub path: String,
}

/// `POST .../commit`.
#[derive(Debug, Clone, Default, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CommitRequest {
    /// Only these paths (relative to the workspace); all when empty.
    #[serde(default)]
    pub paths: Vec<String>,
    /// Overwrite files that also changed in the real workspace.
    #[serde(default)]
    pub force: bool,
    /// Apply changes flagged as dangerous too.
    #[serde(default)]
    pub accept_flagged: bool,
    /// Apply changes the workspace's own ignore files ignore too (left out
    /// otherwise, and listed in `ignored`).
    #[serde(default)]
    pub include_ignored: bool,
}

/// `POST .../discard`.
#[derive(Debug, Clone, Default, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DiscardRequest {
    /// The paths whose changes are thrown away (relative to the
    /// workspace, or under /workspace); at least one.
    pub paths: Vec<String>,
}

/// What a discard threw away.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct DiscardAnswer {
    /// The changes' paths (none when there was nothing there).
    pub discarded: Vec<String>,
}

/// `POST /v1/tokens`.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateToken {
    pub name: String,
    /// `sandboxes:read`, `sandboxes:write`, `exec`, `files`, `approvals`,
    /// `admin`.
    pub scopes: Vec<String>,
    /// Good for this sandbox's data API only.
    #[serde(default)]
    pub sandbox: Option<String>,
    /// The sandboxes it may have at once (more are refused with 429); by
    /// default the daemon's `quotas.sandboxes`, else 16.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_sandboxes: Option<u64>,
    /// The memory limits of its sandboxes together: bytes, or a size such
    /// as `"16G"`; by default the daemon's `quotas.memory`, else the
    /// memory of eight sandboxes of the host's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_memory: Option<Size>,
    /// The processes and threads its sandboxes may have together (each
    /// at its `resources.pids`); by default the daemon's `quotas.pids`,
    /// else room for as many default sandboxes as it may have.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_pids: Option<u64>,
}

/// A size: a number of bytes, or text with a unit as the command line
/// takes it (`"16G"`, `"512M"`).
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema, PartialEq)]
#[serde(untagged)]
pub enum Size {
    Bytes(u64),
    Text(String),
}

/// A token as listed (never its secret).
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema, PartialEq)]
pub struct TokenInfo {
    pub id: String,
    pub name: String,
    pub scopes: Vec<String>,
    pub sandbox: Option<String>,
    pub created_ms: u64,
    pub revoked: bool,
    /// Whether it is accepted now, as the daemon's check decides it:
    /// `live`, `revoked`, `maker_revoked` (the token that made it was
    /// revoked) or `sandbox_gone` (a per-sandbox token whose sandbox was
    /// removed, or is a later one of its name). Tokens do not expire.
    #[serde(default)]
    pub state: String,
}

/// A token just made: `token` is shown this once.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct NewToken {
    pub info: TokenInfo,
    pub token: String,
}

/// `GET /v1/tokens`.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct TokenList {
    pub tokens: Vec<TokenInfo>,
}

/// `GET /v1/health`: that the daemon is up, and its version. Only a
/// caller with a credential (the owner's socket, a token) is told how
/// many sandboxes it reaches: an answer to anyone who can reach the port
/// (a local user, a web page through DNS rebinding) carries no state.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct Health {
    pub version: String,
    /// The sandboxes the caller reaches (every one for the owner); absent
    /// for a caller without a credential.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandboxes: Option<usize>,
}

/// The body of every error answer.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq)]
pub struct Problem {
    /// Stable, for programs: `bad_request`, `invalid_spec`, `not_found`,
    /// `conflict`, `unauthorized`, `forbidden`, `too_large`, `quota`,
    /// `unavailable`, `internal`; for a commit `running`, `flagged`,
    /// `conflicts`, `unsafe`, `unreviewed`, `no_layer`.
    pub code: String,
    /// For people: what was wrong and what to do.
    pub message: String,
    /// The JSON path of the request's field at fault, e.g.
    /// `/resources/memory`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// Why, for programs, when a value or a document was refused: a
    /// stable reason code finer than `code` (`memory_too_small`,
    /// `unknown_key`, `wrong_type`, `owner_only`, ...), the same whichever
    /// door the value came through; the command line and a profile's
    /// validation refuse the same value for the same reason. Listed in
    /// docs/api.md.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// What the refusal is about, item by item, where there are several
    /// (the flagged changes of a refused commit, its conflicts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub details: Option<serde_json::Value>,
}

/// A message a client sends on `GET .../pty` (a WebSocket), as a text
/// frame; the terminal's input goes in binary frames.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema, PartialEq)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum PtyClientMessage {
    /// The first message, when the query named no command: what to run.
    Start(PtyStart),
    /// The terminal's new size (the process gets SIGWINCH).
    Resize { rows: u16, cols: u16 },
    /// A signal for the process (and its group), by number or name.
    Signal {
        #[schema(value_type = Object)]
        signal: serde_json::Value,
    },
}

/// What a terminal session runs.
#[derive(Debug, Clone, Default, Deserialize, Serialize, ToSchema, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PtyStart {
    /// The program and its arguments.
    #[serde(default)]
    pub argv: Option<Vec<String>>,
    /// Or a command line for `sh -c`. Neither: the sandbox's command, or
    /// `sh`.
    #[serde(default)]
    pub shell: Option<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Working directory inside the sandbox (default `/workspace`).
    #[serde(default)]
    pub cwd: Option<String>,
    /// The terminal's size (24 rows by 80 columns when not given).
    #[serde(default)]
    pub rows: Option<u16>,
    #[serde(default)]
    pub cols: Option<u16>,
}

/// A message the daemon sends on `GET .../pty`, as a text frame; the
/// terminal's output comes in binary frames.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema, PartialEq)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum PtyServerMessage {
    /// The process runs (its PID inside the sandbox).
    Started { pid: i32 },
    /// The process ended; the last message before the close.
    Exit {
        exit_status: i32,
        signal: Option<i32>,
    },
    /// What went wrong (a problem's `code` and `message`); the session
    /// closes after it.
    Error { code: String, message: String },
}

/// `GET .../changes`: the sandbox's changes relative to its real
/// workspace, as `warden diff --json` shows them.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct ChangesAnswer {
    /// Each change: `path` (relative to the workspace), `kind` (`added`,
    /// `modified`, `deleted`, `mode`, `type_changed`, `renamed` with
    /// `from`), `old` and `new` entries, `flags` (`rule` and `reason`:
    /// a git hook, a file the host runs, a link out of the workspace,
    /// ...), `digest`, `content` when asked for, and `ignored: true` when
    /// the workspace's own `.gitignore` or `.git/info/exclude` ignores it
    /// (never a flagged change).
    #[schema(value_type = Vec<Object>)]
    pub changes: Vec<serde_json::Value>,
    /// How many changes carry a flag (a commit applies them only with
    /// `accept_flagged`).
    pub flagged: usize,
    /// How many changes the workspace's own ignore files ignore (a commit
    /// leaves them out unless `include_ignored`).
    #[serde(default)]
    pub ignored: usize,
    /// Set when the sandbox's last supervisor ended (killed) before saving
    /// its layer, which it held in memory: the changes of that run are
    /// lost, `changes` are only those saved before it, and this says so
    /// (why, in words). `null` when nothing was lost. Snapshots and forks
    /// of such a sandbox are refused (409, reason `changes_lost`) until a
    /// start and a stop make what it saved its state.
    #[serde(default)]
    pub lost: Option<String>,
}

/// What a commit applied.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct CommitAnswer {
    /// The paths written to (or removed from) the real workspace.
    pub applied: Vec<String>,
    /// Paths that had changed on the host too, overwritten with `force`.
    pub forced: Vec<String>,
    /// Paths left out because the workspace's own ignore files ignore
    /// them (still in the sandbox's layer).
    #[serde(default)]
    pub ignored: Vec<String>,
}

/// `PATCH /v1/sandboxes/{id}/egress`: entries written as for
/// `egress.domains` (`example.com`, `.example.com`, `example.com:22`).
#[derive(Debug, Clone, Default, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EgressPatch {
    /// Entries to put on the sandbox's allowlist.
    #[serde(default)]
    pub allow: Vec<String>,
    /// Entries to take off it, as they were written; open connections to
    /// them are cut.
    #[serde(default)]
    pub remove: Vec<String>,
}

/// A running sandbox's allowlist.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema, PartialEq)]
pub struct EgressList {
    /// The entries, as written.
    pub allow: Vec<String>,
}

/// An ask-mode question waiting for an answer.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema, PartialEq)]
pub struct Approval {
    /// Answer it at `POST /v1/approvals/{id}`.
    pub id: String,
    pub sandbox: String,
    /// `tls`, `http`, `connect` or `tcp`; `request` for a single request
    /// an ask rule holds (its name is allowed); `exec` for a program the
    /// exec allowlist refused (`name` its path, `port` 0).
    pub protocol: String,
    pub name: String,
    pub port: u16,
    /// What an answer does where it differs from a name's: a program's
    /// refusal stands in the running sandbox, `allow_always` (the owner's
    /// only) puts it on the allowlist of later starts, `allow_once` is
    /// answered as `deny`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// For a request an ask rule holds: its method and path, the query's
    /// values redacted (`POST /repos/acme/w/issues`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<String>,
    /// When it was asked (ms since the epoch).
    pub asked_ms: u64,
    /// When it is denied unanswered.
    pub deadline_ms: u64,
}

/// `GET /v1/approvals`.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema, PartialEq)]
pub struct ApprovalList {
    pub approvals: Vec<Approval>,
}

/// An answer to a question.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, ToSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    /// This connection only; the next one asks again.
    AllowOnce,
    /// This one and every later one: the name goes on the sandbox's
    /// allowlist (kept across its restarts).
    AllowAlways,
    Deny,
}

/// `POST /v1/approvals/{id}`.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Answer {
    pub decision: Decision,
}

/// `GET /v1/pools`: each warm pool of the daemon.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct PoolList {
    pub pools: Vec<PoolStatus>,
}

/// One warm pool: how many of its sandboxes wait, how many it aims at.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema, PartialEq, Eq)]
pub struct PoolStatus {
    /// The profile its sandboxes are made from.
    pub profile: String,
    /// The fewest sandboxes it keeps ready.
    pub size: usize,
    /// With autoscale: the most it keeps ready.
    pub max: Option<usize>,
    /// With autoscale: how far back the creates it counts go.
    pub window_seconds: Option<u64>,
    /// Creates of its profile within the window (autoscale only; 0
    /// otherwise).
    pub demand: usize,
    /// How many it aims to keep ready now.
    pub target: usize,
    /// How many are started and waiting now.
    pub ready: usize,
}
