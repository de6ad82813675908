//! One container: the warden sandbox that holds it, in the state store
//! under `--root`, and what the OCI verbs keep beside it (`oci.json`: its
//! ID, bundle and annotations), read back as OCI state.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use warden_runtime::client::{ClientError, Connection};
use warden_runtime::lifecycle::{self, LifecycleError};
use warden_runtime::protocol::MainState;
use warden_runtime::state::{self, SupervisorRecord};
use warden_workspace::{Sandbox, Store};

/// What the OCI verbs keep beside a container's sandbox.
pub const RECORD: &str = "oci.json";
/// The OCI runtime specification version warden reads.
pub const OCI_VERSION: &str = "1.0.2";

/// Why an OCI verb failed. Nothing of a refused `create` stays in `--root`.
#[derive(Debug, thiserror::Error)]
pub enum OciError {
    #[error("container ID {0:?} is not valid: use letters, digits, '_', '+', '-' and '.'")]
    BadId(String),
    #[error("container {0} does not exist")]
    NotFound(String),
    #[error("container {0} exists already")]
    Exists(String),
    #[error("container {id} is {status}: {what}")]
    WrongState {
        id: String,
        status: &'static str,
        what: &'static str,
    },
    #[error("cannot read {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot write {path}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    // The translation's error is said in the message, not as a source
    // too: a chain printed whole would say it twice.
    #[error("bundle {bundle}: {error}")]
    Config {
        bundle: PathBuf,
        error: warden_policy::oci::OciError,
    },
    #[error("process file {path}: {error}")]
    ProcessFile {
        path: PathBuf,
        error: warden_policy::oci::OciError,
    },
    #[error("{0:?} is not a signal: give a name (TERM, SIGKILL) or a number")]
    BadSignal(String),
    #[error("{0}")]
    Unsupported(String),
    #[error("cannot open the state store {root}")]
    Store {
        root: PathBuf,
        #[source]
        source: warden_workspace::StoreError,
    },
    #[error(transparent)]
    Lifecycle(#[from] LifecycleError),
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error("cannot send the terminal to the console socket {path}")]
    Console {
        path: PathBuf,
        #[source]
        source: nix::Error,
    },
    #[error("the {kind} hook [{index}] {path} failed: {why}")]
    Hook {
        kind: &'static str,
        index: usize,
        path: String,
        why: String,
    },
    #[error("cannot start {what}")]
    Spawn {
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
}

/// `oci.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Record {
    pub id: String,
    pub bundle: PathBuf,
    pub rootfs: PathBuf,
    /// RFC 3339.
    pub created: String,
    pub annotations: BTreeMap<String, String>,
    /// The network namespace path `config.json` named (a pod's), which a
    /// later container of the pod names too.
    #[serde(default)]
    pub netns: Option<PathBuf>,
    /// `hooks` of config.json, for `start` and `delete`.
    #[serde(default)]
    pub hooks: warden_policy::oci::Hooks,
    /// The sandbox's cgroups its supervisor joined for the shim
    /// (`cgroups::expose`), which `delete` removes.
    #[serde(default)]
    pub cgroups: Vec<PathBuf>,
    /// `linux.cgroupsPath`, checked, relative to each hierarchy's root:
    /// the sandbox's cgroup is made under it (`cgroups_path`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroups_path: Option<PathBuf>,
}

/// OCI state, as `state` prints it (the runtime specification's fields
/// and runc's `rootfs` and `created`, which containerd reads).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OciState {
    pub oci_version: String,
    pub id: String,
    pub status: String,
    pub pid: u32,
    pub bundle: PathBuf,
    pub rootfs: PathBuf,
    pub created: String,
    pub annotations: BTreeMap<String, String>,
}

/// Where a container is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Its process waits for `start`.
    Created,
    Running,
    Stopped,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Created => "created",
            Status::Running => "running",
            Status::Stopped => "stopped",
        }
    }
}

/// Check an ID the way runc does.
pub fn check_id(id: &str) -> Result<(), OciError> {
    let ok = !id.is_empty()
        && id.len() <= 1024
        && id != "."
        && id != ".."
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'+' | b'-' | b'.'));
    if ok {
        Ok(())
    } else {
        Err(OciError::BadId(id.to_string()))
    }
}

/// The sandbox name of container `id`: the ID itself when it is one
/// (Kubernetes' 64-digit IDs are cut and told apart by a digest).
pub fn sandbox_name(id: &str) -> String {
    let lower = id.to_ascii_lowercase();
    if lower == id && warden_workspace::validate_name("container", id).is_ok() {
        return id.to_string();
    }
    // FNV-1a: stable across builds, which a name kept on disk needs.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in id.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    let clean: String = lower
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .take(40)
        .collect();
    format!("c{clean}-{h:016x}")
}

/// The state store under `root`.
pub fn store(root: &Path) -> Result<Store, OciError> {
    Store::open(root).map_err(|source| OciError::Store {
        root: root.to_path_buf(),
        source,
    })
}

/// A container that exists, with its record.
pub struct Container {
    pub sandbox: Sandbox,
    pub record: Record,
}

/// Find container `id`.
pub fn find(store: &Store, id: &str) -> Result<Container, OciError> {
    check_id(id)?;
    let sandbox = store
        .get(&sandbox_name(id))
        .map_err(|_| OciError::NotFound(id.to_string()))?;
    let path = sandbox.dir().join(RECORD);
    let record: Record = state::read_json(&path).map_err(|_| OciError::NotFound(id.to_string()))?;
    if record.id != id {
        return Err(OciError::NotFound(id.to_string()));
    }
    Ok(Container { sandbox, record })
}

impl Container {
    /// Its status and the PID of its supervisor (0 once stopped).
    pub fn status(&self) -> (Status, u32, Option<MainState>) {
        if !lifecycle::liveness(&self.sandbox).running() {
            return (Status::Stopped, 0, None);
        }
        let pid = state::read_json::<SupervisorRecord>(&self.sandbox.dir().join(state::SUPERVISOR))
            .map(|r| r.pid)
            .unwrap_or(0);
        let main = Connection::open(&lifecycle::control(&self.sandbox))
            .and_then(|c| c.status())
            .ok()
            .and_then(|s| s.main);
        let status = match &main {
            Some(MainState::Held) | None => Status::Created,
            Some(MainState::Running { .. }) => Status::Running,
            Some(MainState::Exited { .. }) => Status::Stopped,
        };
        (
            status,
            if status == Status::Stopped { 0 } else { pid },
            main,
        )
    }

    pub fn state(&self) -> OciState {
        let (status, pid, _) = self.status();
        // Frozen by `pause`: runc says `paused`.
        let paused = status == Status::Running && lifecycle::paused_since(&self.sandbox).is_some();
        OciState {
            oci_version: OCI_VERSION.into(),
            id: self.record.id.clone(),
            status: if paused { "paused" } else { status.as_str() }.into(),
            pid,
            bundle: self.record.bundle.clone(),
            rootfs: self.record.rootfs.clone(),
            created: self.record.created.clone(),
            annotations: self.record.annotations.clone(),
        }
    }

    pub fn control(&self) -> PathBuf {
        lifecycle::control(&self.sandbox)
    }
}

/// Write `pid` to `path` the way runc does: whole (containerd's shim reads
/// it as soon as the verb returns), readable by all as runc's is.
pub fn write_pid_file(path: &Path, pid: u32) -> Result<(), OciError> {
    warden_protocol::replace_file(path, pid.to_string().as_bytes(), 0o644).map_err(|source| {
        OciError::Write {
            path: path.to_path_buf(),
            source,
        }
    })
}

/// A signal by name (`KILL`, `SIGKILL`) or number.
pub fn parse_signal(s: &str) -> Result<i32, OciError> {
    if let Ok(n) = s.parse::<i32>() {
        return nix::sys::signal::Signal::try_from(n)
            .map(|sig| sig as i32)
            .map_err(|_| OciError::BadSignal(s.to_string()));
    }
    let upper = s.to_ascii_uppercase();
    let name = if upper.starts_with("SIG") {
        upper
    } else {
        format!("SIG{upper}")
    };
    name.parse::<nix::sys::signal::Signal>()
        .map(|sig| sig as i32)
        .map_err(|_| OciError::BadSignal(s.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubernetes_ids_get_valid_distinct_sandbox_names() {
        let a = "a".repeat(64);
        let b = format!("{}b", "a".repeat(63));
        let (na, nb) = (sandbox_name(&a), sandbox_name(&b));
        assert_ne!(na, nb);
        for n in [&na, &nb] {
            warden_workspace::validate_name("container", n).unwrap();
        }
        assert_eq!(sandbox_name("hello-1"), "hello-1");
        warden_workspace::validate_name("container", &sandbox_name("Hello+World")).unwrap();
    }

    #[test]
    fn signals_by_name_and_number() {
        assert_eq!(parse_signal("KILL").unwrap(), libc::SIGKILL);
        assert_eq!(parse_signal("SIGTERM").unwrap(), libc::SIGTERM);
        assert_eq!(parse_signal("9").unwrap(), 9);
        assert!(parse_signal("NOPE").is_err());
    }

    #[test]
    fn ids_with_slashes_are_refused() {
        assert!(check_id("../x").is_err());
        assert!(check_id("ok_1.2-3").is_ok());
    }
}
