//! The event type: what happened to a sandbox, as typed data that
//! serializes to one flat JSON object (`{"ts_ms":..,"sandbox":..,"event":"exited",...}`)
//! and reads back from it. The JSON shape is the log's format: a field may
//! be added (with a default, so old lines still read), never renamed.

use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

/// One thing that happened to one sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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

    /// Whether the event tells of something refused: a denied connection,
    /// denied connections counted past the log's bound, a blocked secret, a
    /// refused program, a refused commit.
    pub fn is_denial(&self) -> bool {
        match &self.kind {
            EventKind::Connection { allowed, .. } => !allowed,
            EventKind::ConnectionsNotRecorded { denied, .. } => *denied > 0,
            EventKind::ConnectionsAggregated { allowed, .. } => !allowed,
            EventKind::SecretsAggregated { action, .. } => *action == SecretAction::Blocked,
            EventKind::ExecRefused { .. } | EventKind::ExecRefusedAggregated { .. } => true,
            EventKind::EventsOverBudget { allowed, .. } => *allowed == Some(false),
            EventKind::Secret { action, .. } => *action == SecretAction::Blocked,
            EventKind::Workspace { action, .. } => *action == WorkspaceAction::CommitRefused,
            EventKind::VolumeHeldBack { .. } => true,
            EventKind::AskAnswered { decision, .. } => decision == "deny" || decision == "timeout",
            _ => false,
        }
    }
}

/// What happened. Serialized with an `"event"` tag, e.g.
/// `{"event":"exited","status":0,...}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum EventKind {
    /// The sandbox was configured; nothing runs yet.
    Created {
        /// Redacted (see `redacted.rs`), as every command line recorded.
        #[serde(with = "crate::redacted::argv")]
        command: Vec<String>,
        /// Not UTF-8: see `paths.rs` for its encoding.
        #[serde(default, with = "crate::paths::optional")]
        workspace: Option<PathBuf>,
        rootless: bool,
        cgroup: Option<String>,
    },
    /// A layer of isolation could not be applied and the run goes on without it.
    Degraded {
        layer: String,
        #[serde(with = "crate::redacted::text")]
        lost: String,
    },
    /// The command was started inside the sandbox; `pid` is the host PID of the
    /// sandbox's init.
    Started { pid: i32 },
    /// A program inside the sandbox was refused execution by a rule (the
    /// program never ran). `rule` is the field whose rule refused it
    /// (`allow_exec`), `by` what refused it: `landlock` (the kernel's own
    /// audit record of Landlock's refusal), or the supervisor's judge of
    /// the sandbox's execs, named by why: `allowlist` (not a file the list
    /// grants), `noexec` (on a place the sandbox writes), `mode` (no
    /// execute bit), `seccomp` (an executable memfd).
    ExecRefused {
        /// Absent when the kernel's record named no path.
        #[serde(default, with = "crate::paths::optional")]
        program: Option<PathBuf>,
        rule: String,
        by: String,
    },
    /// Refused programs past the first of each in an aggregation window:
    /// `count` more refusals of `program` (absent: of programs past the
    /// window's bound of distinct ones) since `since_ms`. A sandbox that
    /// tries to run a refused program in a loop costs the log a line per
    /// program per window, not one per try.
    ExecRefusedAggregated {
        #[serde(default, with = "crate::paths::optional")]
        program: Option<PathBuf>,
        rule: String,
        count: u64,
        since_ms: u64,
    },
    /// A process was started in a running sandbox (`warden exec`, the API).
    ExecStarted {
        exec: u64,
        #[serde(with = "crate::redacted::argv")]
        argv: Vec<String>,
        pid: i32,
        tty: bool,
    },
    /// A process started by an exec ended; status as `warden run` maps it.
    ExecExited {
        exec: u64,
        status: i32,
        signal: Option<i32>,
        duration_ms: u64,
    },
    /// A connection or DNS query from the sandbox, and what the egress proxy
    /// decided.
    Connection {
        protocol: Protocol,
        /// The number a later `connection_closed` repeats (allowed
        /// connections reported as they are made; absent in logs written
        /// before connections were reported live).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        conn: Option<u64>,
        name: Option<String>,
        port: u16,
        original_destination: Option<String>,
        allowed: bool,
        rule: Option<String>,
        #[serde(with = "crate::redacted::text")]
        detail: String,
        bytes_out: u64,
        bytes_in: u64,
        duration_ms: u64,
        /// Why, as a code and its data: the option that would change the
        /// outcome, and its entry (`detail` says it in words). Boxed:
        /// every event is as large as its largest kind.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<Box<Reason>>,
    },
    /// A connection that an earlier `connection` event allowed has ended
    /// (pairs by `conn`).
    ConnectionClosed {
        conn: u64,
        name: Option<String>,
        port: u16,
        bytes_out: u64,
        bytes_in: u64,
        duration_ms: u64,
    },
    /// A person acted on a named sandbox's workspace changes.
    Workspace {
        action: WorkspaceAction,
        name: String,
        /// Not UTF-8: see `paths.rs` for their encoding.
        #[serde(with = "crate::paths::many")]
        paths: Vec<PathBuf>,
        #[serde(with = "crate::redacted::text")]
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
        #[serde(with = "crate::redacted::text")]
        detail: String,
        /// Why, as a stable code (`substituted`, `scrubbed`,
        /// `stray_placeholder`, `secret_value`, `response_withheld`,
        /// `decoded_too_large`, `packed_value`), as a `connection` event
        /// carries it; `detail` says it in words. Absent in logs written
        /// before secret events carried it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<Box<Reason>>,
    },
    /// Past the decision log's bound, decisions were only counted (logs of
    /// runs before decisions were reported live).
    ConnectionsNotRecorded { allowed: u64, denied: u64 },
    /// The sandbox is being stopped, and why.
    Stopping { reason: StopReason },
    /// The daemon refused a call: who (`token`, none for an unknown one),
    /// what, and why.
    ApiDenied {
        method: String,
        route: String,
        token: Option<String>,
        #[serde(with = "crate::redacted::text")]
        reason: String,
    },
    /// Its TTL was changed: it stops at `deadline_ms` (none: not by TTL).
    TtlChanged { deadline_ms: Option<u64> },
    /// Its processes were frozen in place (memory kept); `by` says who
    /// asked, `freezer` which of the kernel's freezers holds them.
    Paused { by: String, freezer: String },
    /// Its processes go on where they were, after `paused_ms` frozen.
    Resumed { by: String, paused_ms: u64 },
    /// Its allowlist was changed while it runs: the entries added and
    /// removed (as written), who asked, and how many open connections the
    /// removal cut.
    EgressChanged {
        added: Vec<String>,
        removed: Vec<String>,
        by: String,
        #[serde(default)]
        closed: usize,
    },
    /// A connection to a name on no list waits for an answer (ask mode
    /// answered over the API): the question's id, what it asks, and when
    /// it is denied unanswered.
    Ask {
        question: String,
        protocol: String,
        name: String,
        port: u16,
        deadline_ms: u64,
    },
    /// A question was answered: `allow_once`, `allow_always`, `deny`, or
    /// `timeout` (denied unanswered); `by` who answered.
    AskAnswered {
        question: String,
        name: String,
        port: u16,
        decision: String,
        by: String,
    },
    /// A sink fell behind and this many events were lost before this one.
    EventsDropped { count: u64 },
    /// At stop, files the sandbox wrote into its profile's package caches
    /// that were not kept: the caches had reached their bound (the
    /// sandbox's `--disk`, `limit_bytes`).
    CacheLeftOut { files: u64, limit_bytes: u64 },
    /// At stop, entries the sandbox wrote into the writable volume
    /// `volume` that were held back instead of merged into it: each is, or
    /// is on the way to, a file the owner's configuration is read from
    /// (`reason`: `holds_configuration`), as computed at the stop. `paths`
    /// (relative to the volume) are the first of them, `entries` counts
    /// them all; `kept` is where they are kept for the owner (the latest
    /// merge's), if anywhere.
    VolumeHeldBack {
        #[serde(with = "crate::paths::one")]
        volume: PathBuf,
        reason: String,
        entries: u64,
        #[serde(with = "crate::paths::many")]
        paths: Vec<PathBuf>,
        #[serde(with = "crate::paths::optional")]
        kept: Option<PathBuf>,
    },
    /// Decisions of one protocol, name and verdict repeated within one
    /// aggregation window, counted instead of written one by one: the
    /// first of the window has a `connection` line of its own, the
    /// `count` after it are here. `name` is the name asked for (or the
    /// address, for a connection without one); `None` stands for every
    /// name past the window's bound of distinct names.
    ConnectionsAggregated {
        protocol: Protocol,
        name: Option<String>,
        allowed: bool,
        count: u64,
        /// When the window began (ms since the epoch); `ts_ms` is its end.
        since_ms: u64,
        /// The last decision's reason.
        #[serde(with = "crate::redacted::text")]
        detail: String,
        /// The last decision's reason as a code and its data, as a
        /// `connection` event carries it (absent in older logs).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<Box<Reason>>,
    },
    /// Secret actions of one secret, host and action repeated within one
    /// window, counted like `connections_aggregated`.
    SecretsAggregated {
        name: String,
        host: String,
        action: SecretAction,
        count: u64,
        since_ms: u64,
        /// The last counted action's reason, as a `secret` event carries
        /// it (absent in older logs).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<Box<Reason>>,
    },
    /// The sandbox's events reached their byte budget in the log: past
    /// it, lifecycle events, people's actions and counts are still
    /// written, and the sandbox's own decisions are only counted: `count`
    /// events of kind `of` (of `protocol`, allowed or not) since
    /// `since_ms`, one such event per period and at the end.
    EventsOverBudget {
        budget_bytes: u64,
        of: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        protocol: Option<Protocol>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        allowed: Option<bool>,
        count: u64,
        since_ms: u64,
    },
    /// The microVM backend's relay cut an exec's output: its caller had
    /// taken nothing of it for `stalled_ms` (the relay's bound on its
    /// wait for one frame; the channel is shared by every process of the
    /// sandbox and has no flow control per exec). What the process
    /// writes after is dropped; the process runs on.
    ExecOutputCut { exec: u64, stalled_ms: u64 },
    /// The microVM backend cut its guest off: the guest's channel was
    /// shut, and the sandbox ends as a VM gone. `cause` says which bound
    /// the guest passed.
    VmCutOff {
        #[serde(flatten)]
        cause: VmCut,
    },
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

impl EventKind {
    /// The `"event"` tag this kind is stored under.
    pub fn name(&self) -> &'static str {
        match self {
            EventKind::Created { .. } => "created",
            EventKind::Degraded { .. } => "degraded",
            EventKind::Started { .. } => "started",
            EventKind::ExecRefused { .. } => "exec_refused",
            EventKind::ExecRefusedAggregated { .. } => "exec_refused_aggregated",
            EventKind::ExecStarted { .. } => "exec_started",
            EventKind::ExecExited { .. } => "exec_exited",
            EventKind::Connection { .. } => "connection",
            EventKind::ConnectionClosed { .. } => "connection_closed",
            EventKind::Workspace { .. } => "workspace",
            EventKind::Secret { .. } => "secret",
            EventKind::ConnectionsNotRecorded { .. } => "connections_not_recorded",
            EventKind::Stopping { .. } => "stopping",
            EventKind::TtlChanged { .. } => "ttl_changed",
            EventKind::Paused { .. } => "paused",
            EventKind::Resumed { .. } => "resumed",
            EventKind::EgressChanged { .. } => "egress_changed",
            EventKind::Ask { .. } => "ask",
            EventKind::AskAnswered { .. } => "ask_answered",
            EventKind::ApiDenied { .. } => "api_denied",
            EventKind::EventsDropped { .. } => "events_dropped",
            EventKind::CacheLeftOut { .. } => "cache_left_out",
            EventKind::VolumeHeldBack { .. } => "volume_held_back",
            EventKind::ConnectionsAggregated { .. } => "connections_aggregated",
            EventKind::SecretsAggregated { .. } => "secrets_aggregated",
            EventKind::EventsOverBudget { .. } => "events_over_budget",
            EventKind::ExecOutputCut { .. } => "exec_output_cut",
            EventKind::VmCutOff { .. } => "vm_cut_off",
            EventKind::Exited { .. } => "exited",
        }
    }
}

/// Why a connection was decided as it was: a stable code and its data,
/// for each door to word in its own terms (a flag, a profile key, an API
/// field). The event's `detail` says the same in plain words.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reason {
    /// The egress proxy's code: `not_allowed` (no entry for the name on
    /// the port), `plain_http`, `denied_when_asked`, `not_public` (the
    /// name resolved only to non-public addresses in no allowed range),
    /// `host_itself`, `callers_reach`, `quota_used_up`, `asked_once`,
    /// `learned`, ... (`warden_egress::decision::Reason` lists them).
    pub code: String,
    /// The option that would change the outcome, by its profile key
    /// (`egress.domains`); absent where no option would. Logs written
    /// before it was recorded carry it only in `allow`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// The addresses the name resolved to.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub addresses: Vec<String>,
    /// The entry of `field` that would allow it, where one would.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow: Option<WouldAllow>,
}

impl Reason {
    /// The option that would change the outcome, by its profile key.
    pub fn field(&self) -> Option<&str> {
        self.field
            .as_deref()
            .or(self.allow.as_ref().map(|a| a.field.as_str()))
    }
}

/// An entry that would allow a refused connection.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WouldAllow {
    /// The option, by its profile key (`egress.allow_cidrs`).
    pub field: String,
    /// The entry (`10.1.2.3/32`).
    pub value: String,
}

/// What a connection decision was about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    /// A TLS connection, decided on its server name.
    Tls,
    /// A plain HTTP request, decided on its `Host`.
    Http,
    /// An explicit proxy's CONNECT, decided on its target (the egress proxy
    /// has always recorded these as `connect`).
    Connect,
    /// A DNS question to the sandbox's resolver.
    Dns,
    /// Another protocol to a `name:port` entry, or a connection that said
    /// nothing usable.
    Tcp,
    /// A request on a terminated connection, judged by `--secret-rule` or
    /// its `Host`.
    Request,
}

impl Protocol {
    /// The word stored in the log.
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Tls => "tls",
            Protocol::Http => "http",
            Protocol::Connect => "connect",
            Protocol::Dns => "dns",
            Protocol::Tcp => "tcp",
            Protocol::Request => "request",
        }
    }

    /// The protocol a stored word names, for callers that still hold
    /// strings.
    pub fn parse(word: &str) -> Option<Protocol> {
        [
            Protocol::Tls,
            Protocol::Http,
            Protocol::Connect,
            Protocol::Dns,
            Protocol::Tcp,
            Protocol::Request,
        ]
        .into_iter()
        .find(|p| p.as_str() == word)
    }
}

/// What a person did with a named sandbox's workspace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WorkspaceAction {
    /// The sandbox was created over a workspace.
    Create,
    /// Its changes were written to the workspace.
    Commit,
    /// A commit was refused (the workspace changed underneath, a path was
    /// not allowed); nothing was written.
    CommitRefused,
    /// Its changes were thrown away.
    Discard,
    /// Its changes were saved under a label.
    Snapshot,
    /// A snapshot was put back.
    Restore,
    /// A snapshot was removed.
    SnapshotDelete,
    /// The sandbox was copied into new sandboxes (the detail names them).
    Fork,
}

impl WorkspaceAction {
    /// The word stored in the log.
    pub fn as_str(self) -> &'static str {
        match self {
            WorkspaceAction::Create => "create",
            WorkspaceAction::Commit => "commit",
            WorkspaceAction::CommitRefused => "commit-refused",
            WorkspaceAction::Discard => "discard",
            WorkspaceAction::Snapshot => "snapshot",
            WorkspaceAction::Restore => "restore",
            WorkspaceAction::SnapshotDelete => "snapshot-delete",
            WorkspaceAction::Fork => "fork",
        }
    }

    /// Every action.
    pub const ALL: [WorkspaceAction; 8] = [
        WorkspaceAction::Create,
        WorkspaceAction::Commit,
        WorkspaceAction::CommitRefused,
        WorkspaceAction::Discard,
        WorkspaceAction::Snapshot,
        WorkspaceAction::Restore,
        WorkspaceAction::SnapshotDelete,
        WorkspaceAction::Fork,
    ];

    /// The action a stored word names.
    pub fn parse(word: &str) -> Option<WorkspaceAction> {
        WorkspaceAction::ALL
            .into_iter()
            .find(|a| a.as_str() == word)
    }
}

/// What the secret proxy did with a secret.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SecretAction {
    Substituted,
    Scrubbed,
    Blocked,
}

impl SecretAction {
    /// The word stored in the log.
    pub fn as_str(self) -> &'static str {
        match self {
            SecretAction::Substituted => "substituted",
            SecretAction::Scrubbed => "scrubbed",
            SecretAction::Blocked => "blocked",
        }
    }
}

/// Why a sandbox is being stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// Somebody asked (`warden stop`, the API, a signal to warden).
    Requested,
    /// The sandbox outlived its time to live.
    Ttl,
    /// `--timeout` was reached.
    Timeout,
    /// The process supervising the sandbox went away.
    SupervisorLost,
    /// Its state directory was removed: nothing could reach or stop the
    /// sandbox any more, so its supervisor ends it.
    StateRemoved,
}

impl StopReason {
    /// The word stored in the log.
    pub fn as_str(self) -> &'static str {
        match self {
            StopReason::Requested => "requested",
            StopReason::Ttl => "ttl",
            StopReason::Timeout => "timeout",
            StopReason::SupervisorLost => "supervisor_lost",
            StopReason::StateRemoved => "state_removed",
        }
    }
}

/// Which bound a microVM's guest passed when the host cut it off
/// (`vm_cut_off`), stored as `"cause"` with its figures beside it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "cause", rename_all = "snake_case")]
pub enum VmCut {
    /// The guest sent `answers` answers about its shares (`Released`,
    /// `Reattached`) that nobody asked for, more than the `bound` the
    /// host holds waiting (it asks one question at a time).
    UnaskedAnswers { answers: u64, bound: u64 },
    /// The guest took nothing the host wrote to its channel for
    /// `stalled_ms` (it stopped reading its port).
    GuestStalled { stalled_ms: u64 },
}

impl VmCut {
    /// The word stored in the log.
    pub fn as_str(self) -> &'static str {
        match self {
            VmCut::UnaskedAnswers { .. } => "unasked_answers",
            VmCut::GuestStalled { .. } => "guest_stalled",
        }
    }
}

/// Why the sandbox ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
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

impl ExitReason {
    /// The word stored in the log.
    pub fn as_str(self) -> &'static str {
        match self {
            ExitReason::Exited => "exited",
            ExitReason::Signaled => "signaled",
            ExitReason::Timeout => "timeout",
            ExitReason::OutOfMemory => "out_of_memory",
            ExitReason::ExecFailed => "exec_failed",
            ExitReason::SetupFailed => "setup_failed",
        }
    }
}

/// What the sandbox used at most, where the host could measure it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ResourcePeaks {
    /// Peak memory of the sandbox's cgroup, or the largest RSS of any process.
    pub max_rss_bytes: Option<u64>,
    pub cpu_user_ms: Option<u64>,
    pub cpu_system_ms: Option<u64>,
    /// The OOM killer fired this many times inside the sandbox.
    pub oom_kills: Option<u64>,
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// One event of every kind (a new kind goes here too: the count below
    /// fails until it does).
    fn over_budget() -> EventKind {
        EventKind::EventsOverBudget {
            budget_bytes: 1 << 20,
            of: "connection".into(),
            protocol: Some(Protocol::Dns),
            allowed: Some(false),
            count: 4000,
            since_ms: 1,
        }
    }

    /// The microVM relay's cuts.
    fn vm_cuts() -> [EventKind; 3] {
        [
            EventKind::ExecOutputCut {
                exec: 2,
                stalled_ms: 5000,
            },
            EventKind::VmCutOff {
                cause: VmCut::UnaskedAnswers {
                    answers: 5,
                    bound: 4,
                },
            },
            EventKind::VmCutOff {
                cause: VmCut::GuestStalled { stalled_ms: 30_000 },
            },
        ]
    }

    /// A volume's merge that held back the owner's files.
    fn held_back() -> EventKind {
        EventKind::VolumeHeldBack {
            volume: "/srv/shared".into(),
            reason: "holds_configuration".into(),
            entries: 2,
            paths: vec!["base.yaml".into(), "conf".into()],
            kept: Some("/state/held-back/2049-77".into()),
        }
    }

    pub(crate) fn one_of_each() -> Vec<Event> {
        let kinds = vec![
            EventKind::Created {
                command: vec!["make".into(), "test".into()],
                workspace: Some("/home/u/p".into()),
                rootless: true,
                cgroup: Some("/sys/fs/cgroup/warden/x".into()),
            },
            EventKind::Degraded {
                layer: "landlock".into(),
                lost: "file access rules".into(),
            },
            EventKind::Started { pid: 4242 },
            EventKind::ExecStarted {
                exec: 1,
                argv: vec!["sh".into()],
                pid: 4300,
                tty: true,
            },
            EventKind::ExecExited {
                exec: 1,
                status: 130,
                signal: Some(2),
                duration_ms: 90,
            },
            EventKind::Connection {
                protocol: Protocol::Connect,
                conn: Some(3),
                name: Some("pypi.org".into()),
                port: 443,
                original_destination: Some("198.18.0.2:443".into()),
                allowed: true,
                rule: Some("pypi.org".into()),
                detail: "upstream 151.101.0.223:443".into(),
                bytes_out: 0,
                bytes_in: 0,
                duration_ms: 0,
                reason: None,
            },
            EventKind::ConnectionClosed {
                conn: 3,
                name: None,
                port: 443,
                bytes_out: 517,
                bytes_in: 4096,
                duration_ms: 120,
            },
            EventKind::Workspace {
                action: WorkspaceAction::CommitRefused,
                name: "dev".into(),
                paths: vec!["src/a.rs".into()],
                detail: "the workspace changed underneath".into(),
            },
            EventKind::Secret {
                name: "GITHUB_TOKEN".into(),
                host: "api.github.com".into(),
                action: SecretAction::Scrubbed,
                detail: "response body".into(),
                reason: None,
            },
            EventKind::ConnectionsNotRecorded {
                allowed: 3,
                denied: 0,
            },
            EventKind::Stopping {
                reason: StopReason::SupervisorLost,
            },
            EventKind::EventsDropped { count: 12 },
            over_budget(),
            EventKind::CacheLeftOut {
                files: 3,
                limit_bytes: 64 << 20,
            },
            EventKind::TtlChanged {
                deadline_ms: Some(1_700_000_000_000),
            },
            EventKind::Paused {
                by: "token abc".into(),
                freezer: "v1 freezer".into(),
            },
            EventKind::Resumed {
                by: "the owner".into(),
                paused_ms: 1500,
            },
            EventKind::EgressChanged {
                added: vec![".example.com".into()],
                removed: vec!["api.example.org:8443".into()],
                by: "token abc".into(),
                closed: 2,
            },
            EventKind::Ask {
                question: "dev.1a2b3c-1".into(),
                protocol: "tls".into(),
                name: "pypi.org".into(),
                port: 443,
                deadline_ms: 1_700_000_000_000,
            },
            EventKind::AskAnswered {
                question: "dev.1a2b3c-1".into(),
                name: "pypi.org".into(),
                port: 443,
                decision: "allow_once".into(),
                by: "the owner".into(),
            },
            EventKind::ApiDenied {
                method: "POST".into(),
                route: "/v1/sandboxes".into(),
                token: Some("abc".into()),
                reason: "lacks the scope".into(),
            },
            EventKind::ConnectionsAggregated {
                protocol: Protocol::Dns,
                name: Some("evil.example".into()),
                allowed: false,
                count: 9000,
                since_ms: 1_699_999_999_000,
                detail: "A".into(),
                reason: None,
            },
            EventKind::SecretsAggregated {
                name: "GITHUB_TOKEN".into(),
                host: "api.github.com".into(),
                action: SecretAction::Substituted,
                count: 40,
                since_ms: 1_699_999_999_000,
                reason: None,
            },
            EventKind::Exited {
                status: 137,
                reason: ExitReason::OutOfMemory,
                signal: Some(9),
                duration_ms: 5000,
                peaks: ResourcePeaks {
                    max_rss_bytes: Some(1 << 20),
                    cpu_user_ms: Some(10),
                    cpu_system_ms: None,
                    oom_kills: Some(1),
                },
            },
        ];
        kinds
            .into_iter()
            .chain(vm_cuts())
            .chain([held_back()])
            .map(|kind| Event {
                ts_ms: 1_700_000_000_000,
                sandbox: "sb".into(),
                kind,
            })
            .collect()
    }

    #[test]
    fn every_kind_reads_back_as_it_was_written() {
        let events = one_of_each();
        let names: std::collections::BTreeSet<&str> =
            events.iter().map(|e| e.kind.name()).collect();
        assert_eq!(names.len(), 27, "one event of each kind: {names:?}");
        for e in events {
            let json = serde_json::to_string(&e).unwrap();
            let v: serde_json::Value = serde_json::from_str(&json).unwrap();
            assert_eq!(v["event"], e.kind.name(), "{json}");
            let back: Event = serde_json::from_str(&json).unwrap();
            assert_eq!(back, e, "{json}");
        }
    }

    #[test]
    fn a_vm_cut_is_one_flat_object_with_its_cause_and_figures() {
        let line = |kind| {
            serde_json::to_string(&Event {
                ts_ms: 1,
                sandbox: "s".into(),
                kind,
            })
            .unwrap()
        };
        assert_eq!(
            line(EventKind::ExecOutputCut {
                exec: 3,
                stalled_ms: 5000
            }),
            r#"{"ts_ms":1,"sandbox":"s","event":"exec_output_cut","exec":3,"stalled_ms":5000}"#
        );
        assert_eq!(
            line(EventKind::VmCutOff {
                cause: VmCut::UnaskedAnswers {
                    answers: 5,
                    bound: 4
                }
            }),
            r#"{"ts_ms":1,"sandbox":"s","event":"vm_cut_off","cause":"unasked_answers","answers":5,"bound":4}"#
        );
        assert_eq!(
            line(EventKind::VmCutOff {
                cause: VmCut::GuestStalled { stalled_ms: 30_000 }
            }),
            r#"{"ts_ms":1,"sandbox":"s","event":"vm_cut_off","cause":"guest_stalled","stalled_ms":30000}"#
        );
    }

    #[test]
    fn new_kinds_have_the_agreed_shape() {
        let json = |kind| {
            serde_json::to_value(Event {
                ts_ms: 1,
                sandbox: "s".into(),
                kind,
            })
            .unwrap()
        };
        assert_eq!(
            json(EventKind::Stopping {
                reason: StopReason::SupervisorLost
            }),
            serde_json::json!({"ts_ms":1,"sandbox":"s","event":"stopping","reason":"supervisor_lost"})
        );
        assert_eq!(
            json(EventKind::EventsDropped { count: 2 }),
            serde_json::json!({"ts_ms":1,"sandbox":"s","event":"events_dropped","count":2})
        );
        assert_eq!(
            json(EventKind::ExecExited {
                exec: 1,
                status: 0,
                signal: None,
                duration_ms: 3
            }),
            serde_json::json!({"ts_ms":1,"sandbox":"s","event":"exec_exited","exec":1,"status":0,"signal":null,"duration_ms":3})
        );
        let closed = json(EventKind::ConnectionClosed {
            conn: 4,
            name: Some("a.example".into()),
            port: 443,
            bytes_out: 1,
            bytes_in: 2,
            duration_ms: 3,
        });
        assert_eq!(closed["event"], "connection_closed");
        assert_eq!(closed["conn"], 4);
        let started = json(EventKind::ExecStarted {
            exec: 1,
            argv: vec!["sh".into()],
            pid: 9,
            tty: false,
        });
        assert_eq!(started["event"], "exec_started");
        assert_eq!(started["argv"][0], "sh");
    }

    /// Lines as the event type wrote them before it could be read back
    /// (produced by that code, not written by hand).
    const OLD_LINES: &[&str] = &[
        r#"{"ts_ms":1700000000000,"sandbox":"sb","event":"created","command":["make","test"],"workspace":"/home/u/p","rootless":true,"cgroup":null}"#,
        r#"{"ts_ms":1700000000000,"sandbox":"sb","event":"degraded","layer":"landlock","lost":"file access rules"}"#,
        r#"{"ts_ms":1700000000000,"sandbox":"sb","event":"started","pid":4242}"#,
        r#"{"ts_ms":1700000000000,"sandbox":"sb","event":"connection","protocol":"connect","name":"pypi.org","port":443,"original_destination":"198.18.0.2:443","allowed":true,"rule":"pypi.org","detail":"upstream 151.101.0.223:443","bytes_out":517,"bytes_in":4096,"duration_ms":120}"#,
        r#"{"ts_ms":1700000000000,"sandbox":"sb","event":"connection","protocol":"dns","name":"evil.example","port":53,"original_destination":null,"allowed":false,"rule":null,"detail":"not in the allowlist","bytes_out":0,"bytes_in":0,"duration_ms":0}"#,
        r#"{"ts_ms":1700000000000,"sandbox":"sb","event":"workspace","action":"commit-refused","name":"dev","paths":["a"],"detail":"changed underneath"}"#,
        r#"{"ts_ms":1700000000000,"sandbox":"sb","event":"secret","name":"GITHUB_TOKEN","host":"api.github.com","action":"substituted","detail":"header Authorization"}"#,
        r#"{"ts_ms":1700000000000,"sandbox":"sb","event":"connections_not_recorded","allowed":3,"denied":2}"#,
        r#"{"ts_ms":1700000000000,"sandbox":"sb","event":"exited","status":137,"reason":"out_of_memory","signal":9,"duration_ms":5000,"peaks":{"max_rss_bytes":1048576,"cpu_user_ms":10,"cpu_system_ms":null,"oom_kills":1}}"#,
    ];

    #[test]
    fn a_refusals_reason_is_written_as_code_and_data_and_reads_back() {
        let e = Event {
            ts_ms: 1,
            sandbox: "sb".into(),
            kind: EventKind::Connection {
                protocol: Protocol::Connect,
                conn: None,
                name: Some("registry.internal".into()),
                port: 443,
                original_destination: None,
                allowed: false,
                rule: Some("registry.internal".into()),
                detail: "registry.internal resolves only to non-public addresses".into(),
                bytes_out: 0,
                bytes_in: 0,
                duration_ms: 0,
                reason: Some(Box::new(Reason {
                    code: "not_public".into(),
                    field: None,
                    addresses: vec!["10.1.2.3".into()],
                    allow: Some(WouldAllow {
                        field: "egress.allow_cidrs".into(),
                        value: "10.1.2.3/32".into(),
                    }),
                })),
            },
        };
        let line = serde_json::to_string(&e).unwrap();
        assert!(
            line.contains(r#""reason":{"code":"not_public","addresses":["10.1.2.3"],"allow":{"field":"egress.allow_cidrs","value":"10.1.2.3/32"}}"#),
            "{line}"
        );
        assert_eq!(serde_json::from_str::<Event>(&line).unwrap(), e);
        let bare = r#"{"ts_ms":1,"sandbox":"sb","event":"connection","protocol":"tls","name":"a.test","port":443,"original_destination":null,"allowed":false,"rule":null,"detail":"x","bytes_out":0,"bytes_in":0,"duration_ms":0,"reason":{"code":"callers_reach"}}"#;
        let e: Event = serde_json::from_str(bare).unwrap();
        assert_eq!(serde_json::to_string(&e).unwrap(), bare);
    }

    #[test]
    fn a_blocked_secrets_reason_code_is_written_beside_its_words_and_reads_back() {
        let e = Event {
            ts_ms: 1,
            sandbox: "sb".into(),
            kind: EventKind::Secret {
                name: "TOKEN".into(),
                host: "api.example.test".into(),
                action: SecretAction::Blocked,
                detail: "withheld: the response decoded to more than warden reads".into(),
                reason: Some(Box::new(Reason {
                    code: "decoded_too_large".into(),
                    field: None,
                    addresses: Vec::new(),
                    allow: None,
                })),
            },
        };
        let line = serde_json::to_string(&e).unwrap();
        assert!(
            line.ends_with(r#""reason":{"code":"decoded_too_large"}}"#),
            "{line}"
        );
        assert_eq!(serde_json::from_str::<Event>(&line).unwrap(), e);
    }

    #[test]
    fn a_decisions_code_and_field_travel_beside_its_words_and_read_back() {
        let e = Event {
            ts_ms: 1,
            sandbox: "sb".into(),
            kind: EventKind::Connection {
                protocol: Protocol::Tls,
                conn: None,
                name: Some("example.test".into()),
                port: 22,
                original_destination: None,
                allowed: false,
                rule: None,
                detail: "no allowlist entry for this name on port 22".into(),
                bytes_out: 0,
                bytes_in: 0,
                duration_ms: 0,
                reason: Some(Box::new(Reason {
                    code: "not_allowed".into(),
                    field: Some("egress.domains".into()),
                    addresses: Vec::new(),
                    allow: Some(WouldAllow {
                        field: "egress.domains".into(),
                        value: "example.test:22".into(),
                    }),
                })),
            },
        };
        let line = serde_json::to_string(&e).unwrap();
        // The existing keys stay as they were; the code and field are new.
        assert!(
            line.contains(r#""detail":"no allowlist entry for this name on port 22""#),
            "{line}"
        );
        assert!(
            line.contains(r#""reason":{"code":"not_allowed","field":"egress.domains","allow":{"field":"egress.domains","value":"example.test:22"}}"#),
            "{line}"
        );
        assert_eq!(serde_json::from_str::<Event>(&line).unwrap(), e);
        // A reason written before the field was: the field is its entry's.
        let old: Reason = serde_json::from_str(
            r#"{"code":"not_public","allow":{"field":"egress.allow_cidrs","value":"10.1.2.3/32"}}"#,
        )
        .unwrap();
        assert_eq!(old.field(), Some("egress.allow_cidrs"));
    }

    #[test]
    fn lines_written_before_events_were_typed_still_read_and_write_back_the_same() {
        for line in OLD_LINES {
            let e: Event = serde_json::from_str(line).unwrap_or_else(|err| panic!("{line}: {err}"));
            assert_eq!(serde_json::to_string(&e).unwrap(), *line);
        }
        let e: Event = serde_json::from_str(OLD_LINES[3]).unwrap();
        assert!(matches!(
            e.kind,
            EventKind::Connection {
                protocol: Protocol::Connect,
                conn: None,
                bytes_in: 4096,
                ..
            }
        ));
        let e: Event = serde_json::from_str(OLD_LINES[5]).unwrap();
        assert!(matches!(
            e.kind,
            EventKind::Workspace {
                action: WorkspaceAction::CommitRefused,
                ..
            }
        ));
    }

    #[test]
    fn denials_are_refused_connections_blocked_secrets_and_refused_commits() {
        let denied: Vec<bool> = OLD_LINES
            .iter()
            .map(|l| serde_json::from_str::<Event>(l).unwrap().is_denial())
            .collect();
        assert_eq!(
            denied,
            [false, false, false, false, true, true, false, true, false]
        );
        let blocked = Event::now(
            "sb",
            EventKind::Secret {
                name: "T".into(),
                host: "h".into(),
                action: SecretAction::Blocked,
                detail: String::new(),
                reason: None,
            },
        );
        assert!(blocked.is_denial());
        assert!(one_of_each().iter().all(|e| !e.is_denial()
            || [
                "workspace",
                "connections_aggregated",
                "events_over_budget",
                "volume_held_back"
            ]
            .contains(&e.kind.name())));
    }

    #[test]
    fn stored_words_parse_back_to_their_enums() {
        for p in [
            Protocol::Tls,
            Protocol::Http,
            Protocol::Connect,
            Protocol::Dns,
            Protocol::Tcp,
            Protocol::Request,
        ] {
            assert_eq!(Protocol::parse(p.as_str()), Some(p));
            assert_eq!(
                serde_json::to_value(p).unwrap(),
                serde_json::json!(p.as_str())
            );
        }
        assert_eq!(Protocol::parse("secret"), None);
        for a in WorkspaceAction::ALL {
            assert_eq!(WorkspaceAction::parse(a.as_str()), Some(a));
            assert_eq!(
                serde_json::to_value(a).unwrap(),
                serde_json::json!(a.as_str())
            );
        }
        for a in [
            SecretAction::Substituted,
            SecretAction::Scrubbed,
            SecretAction::Blocked,
        ] {
            assert_eq!(
                serde_json::to_value(a).unwrap(),
                serde_json::json!(a.as_str())
            );
        }
        for r in [
            ExitReason::Exited,
            ExitReason::Signaled,
            ExitReason::Timeout,
            ExitReason::OutOfMemory,
            ExitReason::ExecFailed,
            ExitReason::SetupFailed,
        ] {
            assert_eq!(
                serde_json::to_value(r).unwrap(),
                serde_json::json!(r.as_str())
            );
        }
        for r in [
            StopReason::Requested,
            StopReason::Ttl,
            StopReason::Timeout,
            StopReason::SupervisorLost,
            StopReason::StateRemoved,
        ] {
            assert_eq!(
                serde_json::to_value(r).unwrap(),
                serde_json::json!(r.as_str())
            );
        }
    }
}
