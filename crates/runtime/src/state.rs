//! What a named sandbox keeps in its state directory besides its workspace
//! layer: the resolved spec given at create (`sandbox.json`), the running
//! supervisor's record (`supervisor.json`) and its control socket
//! (`control.sock`). A supervisor that died leaves the record behind; the
//! next look at the sandbox finds it dead and cleans what it left.

use serde::{Deserialize, Serialize};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use warden_policy::SandboxSpec;

/// Why the state could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("cannot read {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is not a valid sandbox record (written by another warden version?)")]
    Parse {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("{what} {path} {how} warden's state directory {state}: a sandbox that can write there could change the options of every named sandbox (and its own next start); bind a narrower directory")]
    OverlapsState {
        what: &'static str,
        path: PathBuf,
        how: &'static str,
        state: PathBuf,
    },
    #[error("{what} {path} shows the warden daemon's socket {socket}: a sandbox that reaches it could act as its owner; bind a narrower directory, or serve on a socket outside it (warden serve --socket)")]
    ShowsSocket {
        what: &'static str,
        path: PathBuf,
        socket: PathBuf,
    },
    #[error("cannot write {path}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Where a sandbox's events go, besides its own audit log.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SinkConfig {
    /// `--json-events FILE`.
    pub json_events: Option<PathBuf>,
    /// The hash-chained audit log; `None` keeps none.
    pub audit_log: Option<PathBuf>,
    /// `--otlp-endpoint URL`.
    pub otlp_endpoint: Option<String>,
    /// The project's grants file, where "always" answers to `--ask` are
    /// written ([`crate::grants`]).
    #[serde(default)]
    pub grants: Option<PathBuf>,
    /// `grants` is the profile file in use (`--ask-save profile`), whose
    /// `egress.domains` each answer is added to.
    #[serde(default)]
    pub grants_into_profile: bool,
}

/// `sandbox.json`: everything `warden create` was given, resolved once.
/// Every later start and exec runs under exactly this.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Stored {
    pub spec: SandboxSpec,
    pub sinks: SinkConfig,
    /// Stop the sandbox this long after it starts (`--ttl`).
    pub ttl_ms: Option<u64>,
    /// `warden run -d`: the sandbox stops when its first exec ends.
    #[serde(default)]
    pub one_shot: bool,
    /// Where the profile set each secret (`FILE:LINE:COL`, by name), as
    /// known at create: a start refused for a secret names its line.
    /// Empty in a sandbox created before warden kept it.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub secret_origins: std::collections::BTreeMap<String, String>,
}

/// `supervisor.json`: the running supervisor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SupervisorRecord {
    pub pid: u32,
    /// The process's start time (field 22 of /proc/PID/stat), so that a
    /// reused PID is not taken for the supervisor.
    pub start_ticks: u64,
    pub started_ms: u64,
    /// The sandbox's cgroup directories, to remove if the supervisor dies.
    pub cgroups: Vec<PathBuf>,
    /// Since when the sandbox is paused (ms since the epoch), while it is:
    /// what `warden ls` and the API show without asking the supervisor.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused_ms: Option<u64>,
    /// What the supervisor does to stop, once it stops: what a caller
    /// waiting for the stop sees without asking it (a supervisor busy
    /// writing back a large home may not answer soon).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopping: Option<StopPhase>,
}

/// Where a stopping supervisor is in its stop, as its record says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopPhase {
    /// Its processes were sent SIGTERM and have the grace to end.
    Terminating,
    /// The grace is over (or every process ended): its init ends what is
    /// left, and is killed if it does not.
    Ending,
    /// Every process is gone: the supervisor writes back what the sandbox
    /// keeps (its layer, home, caches and volumes) and closes its records.
    Saving,
    /// Every process is gone: the supervisor closes its records (the
    /// sandbox keeps nothing to write back).
    Closing,
}

impl StopPhase {
    /// What the supervisor is doing, in words any door may use.
    pub fn doing(self) -> &'static str {
        match self {
            StopPhase::Terminating => "waiting for the sandbox's processes to end",
            StopPhase::Ending => "ending the sandbox's last processes",
            StopPhase::Saving => "writing back what the sandbox keeps (its layer and home)",
            StopPhase::Closing => "closing the sandbox's records",
        }
    }
}

pub const STORED: &str = "sandbox.json";
pub const SUPERVISOR: &str = "supervisor.json";
pub const CONTROL: &str = "control.sock";

/// The spec the sandbox whose state directory is `dir` was made with;
/// `None` when its record cannot be read.
pub fn stored_spec(dir: &Path) -> Option<SandboxSpec> {
    read_json::<Stored>(&dir.join(STORED)).ok().map(|s| s.spec)
}

pub fn read_json<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<T, StateError> {
    let bytes = std::fs::read(path).map_err(|source| StateError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    serde_json::from_slice(&bytes).map_err(|source| StateError::Parse {
        path: path.to_path_buf(),
        source,
    })
}

/// Write `value` to `path`, owner-only, whole (see
/// [`warden_protocol::replace_file`]): a reader (another warden command, the
/// daemon, a supervisor's next start) never sees half a record.
pub fn write_json<T: Serialize>(path: &Path, value: &T) -> Result<(), StateError> {
    let err = |source| StateError::Write {
        path: path.to_path_buf(),
        source,
    };
    let bytes = serde_json::to_vec_pretty(value).map_err(|e| err(e.into()))?;
    warden_protocol::replace_file(path, &bytes, 0o600).map_err(err)
}

/// The start time of process `pid` in clock ticks since boot, if it exists.
pub fn start_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name, which may hold spaces and ')'.
    let rest = stat.rsplit_once(')')?.1;
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// Whether the supervisor of this record still runs (a zombie, killed
/// but not yet reaped by whoever adopted it, does not).
pub fn alive(rec: &SupervisorRecord) -> bool {
    live_ticks(rec.pid) == Some(rec.start_ticks)
}

/// The start time of process `pid` while it runs; `None` once it is gone
/// or a zombie.
pub fn live_ticks(pid: u32) -> Option<u64> {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return None;
    };
    let (_, rest) = stat.rsplit_once(')')?;
    let mut fields = rest.split_whitespace();
    let state = fields.next()?;
    let ticks = fields.nth(18)?.parse::<u64>().ok()?;
    (!matches!(state, "Z" | "X")).then_some(ticks)
}

/// The cgroup directories process `pid` belongs to, as host paths.
pub fn cgroups_of(pid: i32) -> Vec<PathBuf> {
    let Ok(own) = std::fs::read_to_string(format!("/proc/{pid}/cgroup")) else {
        return Vec::new();
    };
    let Ok(mounts) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return Vec::new();
    };
    // (fstype, super options, mount point) of each cgroup mount.
    let cgroup_mounts: Vec<(String, String, String)> = mounts
        .lines()
        .filter_map(|l| {
            let (left, right) = l.split_once(" - ")?;
            let mut r = right.split_whitespace();
            let fstype = r.next()?;
            if fstype != "cgroup" && fstype != "cgroup2" {
                return None;
            }
            let _source = r.next();
            let opts = r.next().unwrap_or("").to_string();
            let mut l = left.split_whitespace();
            let root = l.nth(3)?;
            let point = l.next()?;
            (root == "/").then(|| (fstype.to_string(), opts, point.to_string()))
        })
        .collect();
    let mut out = Vec::new();
    for line in own.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(_), Some(ctrls), Some(path)) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        if path == "/" || !path.contains("warden-") {
            continue;
        }
        let mount = if ctrls.is_empty() {
            cgroup_mounts.iter().find(|(t, _, _)| t == "cgroup2")
        } else {
            cgroup_mounts.iter().find(|(t, opts, _)| {
                t == "cgroup" && ctrls.split(',').all(|c| opts.split(',').any(|o| o == c))
            })
        };
        if let Some((_, _, point)) = mount {
            out.push(Path::new(point).join(path.trim_start_matches('/')));
        }
    }
    out
}

/// The cgroup directories of a sandbox whose init is `init`, seen from its
/// supervisor (this process): those of the init that the supervisor is not
/// in. Where no cgroup could be made for the sandbox (rootless and not
/// delegated, or a hierarchy warden does not use), the init stays in its
/// caller's cgroup, which is never the sandbox's to empty or remove, even
/// when it is named `warden-*` (a warden-agent.service).
pub fn sandbox_cgroups(init: i32) -> Vec<PathBuf> {
    let own = cgroups_of(std::process::id() as i32);
    cgroups_of(init)
        .into_iter()
        .filter(|c| !own.contains(c))
        .collect()
}

/// Remove what a dead supervisor left: its sandbox's cgroups (empty once
/// the sandbox's PID namespace is gone), its control socket and record.
/// Returns what could not be removed.
pub fn clean_dead(dir: &Path, rec: &SupervisorRecord) -> Vec<String> {
    let mut left = Vec::new();
    // A record of another version, or rewritten by hand, may name more:
    // never the cleaner's own cgroup, never anything but a cgroup.
    let own = cgroups_of(std::process::id() as i32);
    for cg in &rec.cgroups {
        // Only warden's own leaf directories are ever removed.
        let ours = cg
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("warden-"))
            && !own.contains(cg)
            && nix::sys::statfs::statfs(cg).is_ok_and(|fs| {
                let t = fs.filesystem_type();
                t == nix::sys::statfs::CGROUP_SUPER_MAGIC
                    || t == nix::sys::statfs::CGROUP2_SUPER_MAGIC
            });
        if !ours {
            continue;
        }
        // A paused sandbox's group is thawed first: a task frozen by the
        // v1 freezer acts on SIGKILL only once thawed (and the init's
        // parent-death signal waits for it too).
        if let Some(f) = warden_jail::cgroup::Freezer::find(std::slice::from_ref(cg)) {
            if f.asked() {
                let _ = f.thaw();
            }
        }
        // Any process still inside is killed first (none should be).
        for file in ["cgroup.procs", "tasks"] {
            if let Ok(pids) = std::fs::read_to_string(cg.join(file)) {
                for pid in pids.lines().filter_map(|p| p.trim().parse::<i32>().ok()) {
                    let _ = nix::sys::signal::kill(
                        nix::unistd::Pid::from_raw(pid),
                        nix::sys::signal::Signal::SIGKILL,
                    );
                }
            }
        }
        let mut removed = false;
        for _ in 0..50 {
            match std::fs::remove_dir(cg) {
                Ok(()) => {
                    removed = true;
                    break;
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    removed = true;
                    break;
                }
                Err(_) => std::thread::sleep(std::time::Duration::from_millis(10)),
            }
        }
        if !removed {
            left.push(cg.display().to_string());
        }
    }
    let _ = std::fs::remove_file(dir.join(CONTROL));
    let _ = std::fs::remove_file(dir.join(SUPERVISOR));
    left
}

/// warden's state directory, as this process's binary read it from its
/// environment (`warden_jail::settings`; see
/// `warden_workspace::default_state_dir` for the order); `None` when none
/// can be told.
pub fn default_dir() -> Option<PathBuf> {
    warden_jail::settings::Settings::current().state_dir.clone()
}

pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Where a daemon serving on a socket outside the state directory
/// (`warden serve --socket PATH`) writes that path, so that no sandbox of
/// this state directory is shown it ([`check_socket_kept_out`]).
pub const DAEMON_SOCKET: &str = "daemon-socket";

/// Where a daemon started with a settings file (`warden serve --config
/// FILE`) records that file's absolute path, one a line, kept after it
/// stops (its next start reads the file again): the owner's own review
/// and commit at the terminal flag a change to it, as the daemon's do
/// ([`daemon_configs`], `crate::owners_files`).
pub const DAEMON_CONFIG: &str = "daemon-config";

/// The settings files daemons of state directory `state` were started
/// with ([`DAEMON_CONFIG`]).
pub fn daemon_configs(state: &Path) -> Vec<PathBuf> {
    let Ok(bytes) = std::fs::read(state.join(DAEMON_CONFIG)) else {
        return Vec::new();
    };
    bytes
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| PathBuf::from(std::ffi::OsStr::from_bytes(l)))
        .filter(|p| p.is_absolute())
        .collect()
}

/// Add the absolute `file` to the settings files recorded in `state`
/// ([`DAEMON_CONFIG`]), unless it is there already.
pub fn record_daemon_config(state: &Path, file: &Path) -> std::io::Result<()> {
    let mut known = daemon_configs(state);
    if known.iter().any(|k| k == file) {
        return Ok(());
    }
    known.push(file.to_path_buf());
    let mut text = Vec::new();
    for k in &known {
        text.extend_from_slice(k.as_os_str().as_bytes());
        text.push(b'\n');
    }
    std::fs::write(state.join(DAEMON_CONFIG), text)
}

/// Refuse a spec whose binds or workspace (read-only or not) would show
/// the socket of the daemon serving state directory `state` from outside
/// it: the socket refuses peers in a sandbox's user namespace, and no
/// sandbox is shown it either. A path recorded by a daemon that died
/// counts while its socket file is left.
pub fn check_socket_kept_out(spec: &SandboxSpec, state: &Path) -> Result<(), StateError> {
    use std::os::unix::fs::FileTypeExt;
    let Ok(text) = std::fs::read_to_string(state.join(DAEMON_SOCKET)) else {
        return Ok(());
    };
    let socket = PathBuf::from(text.trim_end_matches('\n'));
    if !std::fs::symlink_metadata(&socket).is_ok_and(|m| m.file_type().is_socket()) {
        return Ok(());
    }
    let lexical = |p: &Path| -> PathBuf { p.components().collect() };
    let sockets = [
        lexical(&socket),
        std::fs::canonicalize(&socket).unwrap_or_else(|_| lexical(&socket)),
    ];
    let fs = &spec.filesystem;
    let mut shown: Vec<(&'static str, &Path)> = fs
        .binds
        .iter()
        .map(|b| (bind_key(b.writable), b.path.as_path()))
        .collect();
    if let Some(w) = &fs.workspace {
        shown.push(("`filesystem.workspace`", w.as_path()));
    }
    for (what, path) in shown {
        let candidates = [
            lexical(path),
            std::fs::canonicalize(path).unwrap_or_else(|_| lexical(path)),
        ];
        if candidates
            .iter()
            .any(|p| sockets.iter().any(|s| s.starts_with(p)))
        {
            return Err(StateError::ShowsSocket {
                what,
                path: path.to_path_buf(),
                socket,
            });
        }
    }
    Ok(())
}

/// Refuse a spec that would let its sandbox write into warden's state
/// directory `state` (or anything that holds it): a writable bind or a
/// plainly bound workspace there could rewrite the stored specs, records
/// and audit logs. `own_layer`: the sandbox's own writable layer, which
/// lives in the state directory by design (the copy layout's workspace).
pub fn check_state_kept_out(
    spec: &SandboxSpec,
    state: &Path,
    own_layer: Option<&Path>,
) -> Result<(), StateError> {
    // Bind paths are compared as written (a path through a link or with
    // `..` is refused by the jail itself, with its own message); the state
    // directory both as written and as resolved.
    let lexical = |p: &Path| -> PathBuf { p.components().collect() };
    let fs = &spec.filesystem;
    let mut writable: Vec<(&'static str, &Path)> = fs
        .binds
        .iter()
        .filter(|b| b.writable)
        .map(|b| (bind_key(true), b.path.as_path()))
        .collect();
    if let (Some(w), None) = (&fs.workspace, &fs.overlay) {
        if own_layer.map(lexical) != Some(lexical(w)) {
            writable.push(("`filesystem.workspace`", w.as_path()));
        }
    }
    if writable.is_empty() {
        // Nothing to compare: the start-up path pays nothing for the rule.
        return Ok(());
    }
    let states = [
        lexical(state),
        std::fs::canonicalize(state).unwrap_or_else(|_| lexical(state)),
    ];
    for (what, path) in writable {
        if path
            .components()
            .any(|c| c == std::path::Component::ParentDir)
        {
            continue;
        }
        let p = lexical(path);
        let overlap = |how: &'static str, state: &Path| StateError::OverlapsState {
            what,
            path: path.to_path_buf(),
            how,
            state: state.to_path_buf(),
        };
        for state in &states {
            if state.starts_with(&p) {
                return Err(overlap("holds", state));
            }
            if p.starts_with(state) {
                return Err(overlap("is inside", state));
            }
        }
        // The same directories by identity, not by name: another path to
        // them (a bind mount made on the host, a name in another case on a
        // case-insensitive filesystem), or a mount below the bind (binds
        // are recursive) whose root is the state directory or holds it.
        let mut below = vec![p.clone()];
        below.extend(mounts_below(&p));
        for dir in &below {
            if states
                .iter()
                .flat_map(|s| s.ancestors())
                .any(|a| same_file(a, dir))
            {
                return Err(overlap("holds", state));
            }
        }
        if p.ancestors().any(|a| same_file(a, state)) {
            return Err(overlap("is inside", state));
        }
    }
    Ok(())
}

/// Whether `a` and `b` are the same file (both exist).
/// How a message names a bind: by the key of its list (each door words it).
fn bind_key(writable: bool) -> &'static str {
    if writable {
        "`filesystem.read_write`"
    } else {
        "`filesystem.read_only`"
    }
}

fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
        _ => false,
    }
}

/// The mount points of this process's namespace strictly below `dir`.
fn mounts_below(dir: &Path) -> Vec<PathBuf> {
    let Ok(text) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return Vec::new();
    };
    text.lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(|m| PathBuf::from(unescape_mount_path(m)))
        .filter(|m| m != dir && m.starts_with(dir))
        .collect()
}

/// A path as /proc/self/mountinfo writes it: space, tab, newline and
/// backslash as three octal digits after a backslash.
fn unescape_mount_path(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b
            .get(i + 1..i + 4)
            .filter(|d| b[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)))
            .map(|d| d.iter().fold(0u32, |n, c| n * 8 + u32::from(c - b'0')));
        match octal.and_then(|n| u8::try_from(n).ok()) {
            Some(c) => {
                out.push(c);
                i += 4;
            }
            None => {
                out.push(b[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}
