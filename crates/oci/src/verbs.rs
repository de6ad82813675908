//! `start`, `state`, `kill`, `delete`, `ps`, `features`: each a short walk
//! onto the runtime's lifecycle and a supervisor's control socket.

use crate::container::{self, Container, OciError, Status};
use std::path::Path;
use std::time::Duration;
use warden_runtime::client::{ClientError, Connection};
use warden_runtime::lifecycle;
use warden_runtime::protocol::MainState;

/// Start the created container's process; its exec number.
pub fn start(root: &Path, id: &str) -> Result<u64, OciError> {
    let c = container::find(&container::store(root)?, id)?;
    match c.status().0 {
        Status::Created => {}
        s => {
            return Err(OciError::WrongState {
                id: id.into(),
                status: s.as_str(),
                what: "only a created container can be started",
            })
        }
    }
    let hooks = &c.record.hooks;
    // startContainer: in the container, before its process runs; a failure
    // stops the container and fails `start`.
    if let Err(e) = crate::hooks::run_in_container(
        "startContainer",
        &hooks.start_container,
        &c.control(),
        &crate::hooks::state(&c.record, "created", 1),
    ) {
        let _ = stop(&c);
        return Err(e);
    }
    let exec = Connection::open(&c.control())?.release()?.0;
    let sup = c.status().1;
    let init = crate::pod::init_pid(sup).unwrap_or(sup);
    if let Err(e) = crate::hooks::run_on_host(
        "poststart",
        &hooks.poststart,
        &crate::hooks::state(&c.record, "running", init),
    ) {
        let _ = stop(&c);
        return Err(e);
    }
    Ok(exec)
}

/// Wait until the container has stopped; the status its first process
/// (exec `exec`) ended with, as its sandbox's audit log recorded it.
pub fn wait(root: &Path, id: &str, exec: u64) -> Result<i32, OciError> {
    let c = container::find(&container::store(root)?, id)?;
    while lifecycle::liveness(&c.sandbox).running() {
        std::thread::sleep(Duration::from_millis(20));
    }
    let log = c.sandbox.dir().join("audit.jsonl");
    let text = std::fs::read_to_string(&log).map_err(|source| OciError::Read {
        path: log.clone(),
        source,
    })?;
    let status = text
        .lines()
        .filter_map(|l| serde_json::from_str::<warden_audit::Event>(l).ok())
        .find_map(|e| match e.kind {
            warden_audit::EventKind::ExecExited {
                exec: n, status, ..
            } if n == exec => Some(status),
            _ => None,
        });
    Ok(status.unwrap_or(128 + libc::SIGKILL))
}

/// The OCI state JSON.
pub fn state(root: &Path, id: &str) -> Result<container::OciState, OciError> {
    Ok(container::find(&container::store(root)?, id)?.state())
}

/// Send `signal` to the container's process; with `all`, to every process
/// of the container. A created container's process has not started: any
/// signal that ends a process ends the container.
pub fn kill(root: &Path, id: &str, signal: &str, all: bool) -> Result<(), OciError> {
    let sig = container::parse_signal(signal)?;
    let c = container::find(&container::store(root)?, id)?;
    let (status, _, main) = c.status();
    match (status, main) {
        (Status::Stopped, _) => Err(OciError::WrongState {
            id: id.into(),
            status: "stopped",
            // runc's words, which containerd's shim takes for "already
            // gone" (the kill that follows a container's exit).
            what: "container not running",
        }),
        (Status::Running, Some(MainState::Running { exec, .. })) => {
            if all {
                for p in Connection::open(&c.control())?.ps()? {
                    if let Ok(s) = nix::sys::signal::Signal::try_from(sig) {
                        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(p.host_pid), s);
                    }
                }
            }
            Connection::open(&c.control())?.signal(exec, sig)?;
            Ok(())
        }
        _ => {
            // Created: nothing runs yet but the sandbox's init.
            if sig != 0 {
                stop(&c)?;
            }
            Ok(())
        }
    }
}

fn stop(c: &Container) -> Result<(), OciError> {
    match lifecycle::stop(&c.sandbox, Duration::ZERO) {
        Ok(()) | Err(lifecycle::LifecycleError::Client(ClientError::NotRunning { .. })) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Remove the container: a running one only with `force` (which kills it).
/// Then its poststop hooks run; their failures are warnings, returned.
pub fn delete(root: &Path, id: &str, force: bool) -> Result<Vec<String>, OciError> {
    let store = container::store(root)?;
    let c = match container::find(&store, id) {
        Ok(c) => c,
        // runc's --force deletes what may be half there.
        Err(OciError::NotFound(_)) if force => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let (status, _, _) = c.status();
    if status == Status::Running && !force {
        return Err(OciError::WrongState {
            id: id.into(),
            status: "running",
            what: "kill it first, or delete --force",
        });
    }
    if status != Status::Stopped {
        stop(&c)?;
    }
    lifecycle::remove(&store, c.sandbox.name(), true)?;
    crate::cgroups::remove(&c.record.cgroups);
    // poststop: each runs whatever the one before did (a failure is a
    // warning, as the specification asks).
    let state = crate::hooks::state(&c.record, "stopped", 0);
    let mut warnings = Vec::new();
    for (i, h) in c.record.hooks.poststop.iter().enumerate() {
        match crate::hooks::run_on_host("poststop", std::slice::from_ref(h), &state) {
            Ok(()) => {}
            Err(OciError::Hook {
                kind, path, why, ..
            }) => warnings.push(
                OciError::Hook {
                    kind,
                    index: i,
                    path,
                    why,
                }
                .to_string(),
            ),
            Err(e) => warnings.push(e.to_string()),
        }
    }
    Ok(warnings)
}

/// The container's processes: host PIDs (`--format json`, what
/// containerd reads) or a table.
pub fn ps(root: &Path, id: &str, json: bool) -> Result<String, OciError> {
    let c = container::find(&container::store(root)?, id)?;
    if c.status().0 == Status::Stopped {
        return Ok(if json { "[]".into() } else { String::new() });
    }
    let procs = Connection::open(&c.control())?.ps()?;
    if json {
        let pids: Vec<i32> = procs.iter().map(|p| p.host_pid).collect();
        return Ok(serde_json::to_string(&pids).unwrap_or_else(|_| "[]".into()));
    }
    let mut out = String::from("PID\tCMD\n");
    for p in procs {
        out.push_str(&format!("{}\t{}\n", p.host_pid, p.command));
    }
    Ok(out)
}

/// What this runtime supports (the runtime specification's features
/// document).
pub fn features() -> serde_json::Value {
    let annotations: serde_json::Map<String, serde_json::Value> = warden_policy::oci::annotations()
        .into_iter()
        .map(|(k, doc)| (k.to_string(), serde_json::Value::String(doc)))
        .collect();
    serde_json::json!({
        "ociVersionMin": "1.0.0",
        "ociVersionMax": container::OCI_VERSION,
        "hooks": ["prestart", "createRuntime", "createContainer", "startContainer", "poststart", "poststop"],
        "mountOptions": ["bind", "rbind", "ro", "rw"],
        "linux": {
            "namespaces": ["pid", "network", "mount", "ipc", "uts", "user", "cgroup"],
            "capabilities": [],
            "cgroup": {"v1": true, "v2": true, "systemd": false, "systemdUser": false},
            "seccomp": {"enabled": true, "actions": [], "operators": [], "archs": []},
            "apparmor": {"enabled": false},
            "selinux": {"enabled": false}
        },
        "annotations": annotations
    })
}

/// `pause`: the container's processes frozen in place by its cgroup's
/// freezer (containerd's task pause); `resume` thaws them. Both through
/// the sandbox's supervisor, which records them in the audit log.
pub fn pause(root: &Path, id: &str, resume: bool) -> Result<(), OciError> {
    let c = container::find(&container::store(root)?, id)?;
    let (status, _, _) = c.status();
    if status != Status::Running {
        return Err(OciError::WrongState {
            id: id.into(),
            status: status.as_str(),
            what: if resume {
                "only a paused container can be resumed"
            } else {
                "only a running container can be paused"
            },
        });
    }
    let paused = lifecycle::paused_since(&c.sandbox).is_some();
    match (resume, paused) {
        (false, false) => lifecycle::pause(&c.sandbox, "warden-oci pause")?,
        (true, true) => lifecycle::resume(&c.sandbox, "warden-oci resume")?,
        (false, true) => {
            return Err(OciError::WrongState {
                id: id.into(),
                status: "paused",
                what: "it is paused already",
            })
        }
        (true, false) => {
            return Err(OciError::WrongState {
                id: id.into(),
                status: "running",
                what: "only a paused container can be resumed",
            })
        }
    }
    Ok(())
}

/// `update`, `events`: said plainly.
pub fn unsupported(verb: &str) -> OciError {
    OciError::Unsupported(match verb {
        "update" => "update: a warden sandbox's limits are fixed when it is created".into(),
        _ => format!("{verb}: not supported by warden-oci yet"),
    })
}
