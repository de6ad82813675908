//! Finding `runsc` and telling whether it runs here: the gVisor backend
//! refuses without it (saying what to install), and `warden doctor`
//! reports the same probe.
//!
//! The probe is a real sandbox (`runsc do true`, no network, the ptrace
//! platform: `/dev/kvm` may exist and still not run a guest, as on hosts
//! whose KVM is nested), bounded in time, so "usable" means a sandbox
//! started, not that a file exists.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Where runsc is looked for when `WARDEN_RUNSC` does not name it.
const PLACES: &[&str] = &["/usr/bin/runsc", "/usr/sbin/runsc", "/usr/local/bin/runsc"];

/// The platform gVisor intercepts system calls with. `ptrace` runs
/// wherever ptrace does; `kvm` needs a KVM that boots guests (not a nested
/// paravirtual one) and `systrap` a newer runsc than some distributions
/// package.
pub const PLATFORM: &str = "ptrace";

/// What to install, said wherever runsc is missing.
pub const INSTALL: &str =
    "install gVisor's runsc (Debian and Ubuntu: `apt install runsc`; or from gvisor.dev)";

/// How long the probe's sandbox may take to start and end.
const PROBE_TIMEOUT: Duration = Duration::from_secs(30);

/// runsc's path: the binary's `WARDEN_RUNSC` when set
/// ([`crate::settings`]; a test names a missing one to prove the
/// refusal), else the first of the usual places.
pub fn find() -> Option<PathBuf> {
    if let Some(p) = &crate::settings::Settings::current().runsc {
        return is_executable(p).then(|| p.clone());
    }
    PLACES.iter().map(PathBuf::from).find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Whether gVisor runs here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Usability {
    /// A sandbox started and ended: runsc's path and version line.
    Usable { path: PathBuf, version: String },
    /// No runsc.
    Missing,
    /// runsc is there but its sandbox did not run: why.
    Unusable { path: PathBuf, why: String },
}

/// Start and end a sandbox with runsc (`do true`), as this user.
pub fn probe() -> Usability {
    let Some(path) = find() else {
        return Usability::Missing;
    };
    let version = Command::new(&path)
        .arg("--version")
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .next()
                .map(str::to_string)
        })
        .unwrap_or_default();
    let root = std::env::temp_dir().join(format!("warden-runsc-probe-{}", std::process::id()));
    let mut cmd = Command::new(&path);
    cmd.arg(format!("--root={}", root.display()))
        .args(["--network=none", "--ignore-cgroups"])
        .arg(format!("--platform={PLATFORM}"));
    if !crate::host::is_root() {
        cmd.arg("--rootless");
    }
    cmd.args(["do", "true"])
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let result = run_bounded(cmd, PROBE_TIMEOUT);
    let _ = warden_workspace::fsutil::remove_tree(&root);
    match result {
        Ok(()) => Usability::Usable { path, version },
        Err(why) => Usability::Unusable { path, why },
    }
}

/// Run `cmd` to its end within `limit`; `Err` says why it failed (its
/// last line of errors).
fn run_bounded(mut cmd: Command, limit: Duration) -> Result<(), String> {
    let mut child = cmd.spawn().map_err(|e| format!("cannot start it: {e}"))?;
    let start = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(status)) => {
                let mut err = String::new();
                if let Some(mut e) = child.stderr.take() {
                    use std::io::Read;
                    let _ = e.read_to_string(&mut err);
                }
                if status.success() {
                    return Ok(());
                }
                let last = err
                    .lines()
                    .rev()
                    .find(|l| !l.trim().is_empty())
                    .unwrap_or("no message")
                    .trim()
                    .to_string();
                return Err(format!("its test sandbox failed ({status}): {last}"));
            }
            Ok(None) if start.elapsed() > limit => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "its test sandbox did not end within {} s",
                    limit.as_secs()
                ));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => return Err(format!("cannot wait for it: {e}")),
        }
    }
}

/// One sandbox's runsc: its binary, the state directory of its own
/// (`--root`), the container's id and the flags every call repeats.
#[derive(Debug)]
pub struct Runsc {
    pub path: PathBuf,
    pub root: PathBuf,
    pub id: String,
    /// runsc's own log (its errors, which warden words for the person).
    pub log: PathBuf,
    /// `--network=host` in warden's namespace; else gVisor's own stack,
    /// with loopback only.
    pub host_network: bool,
    pub rootless: bool,
}

impl Runsc {
    /// A runsc call with the sandbox's global flags.
    pub fn command(&self) -> Command {
        let mut cmd = Command::new(&self.path);
        cmd.arg(format!("--root={}", self.root.display()))
            .arg(format!("--log={}", self.log.display()))
            .arg(format!(
                "--network={}",
                if self.host_network { "host" } else { "none" }
            ))
            .arg("--ignore-cgroups")
            .arg(format!("--platform={PLATFORM}"))
            // The bundle's seccomp rules, applied by gVisor's kernel to the
            // sandbox's processes (see `bundle::seccomp`).
            .arg("--oci-seccomp");
        if self.rootless {
            cmd.arg("--rootless");
        }
        cmd.current_dir("/");
        cmd
    }

    /// A management call (kill, delete, state), to its end, bounded.
    fn manage(&self, args: &[&str]) -> Result<String, String> {
        let mut cmd = self.command();
        cmd.args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let child = cmd.spawn().map_err(|e| e.to_string())?;
        let out = child.wait_with_output().map_err(|e| e.to_string())?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).to_string())
        } else {
            Err(format!("runsc {} failed ({})", args.join(" "), out.status))
        }
    }

    /// Signal every process of the sandbox.
    pub fn kill_all(&self, signal: &str) -> Result<String, String> {
        self.manage(&["kill", "--all", &self.id, signal])
    }

    /// Signal one process inside the sandbox, by its PID there.
    pub fn kill_pid(&self, pid: i32, signal: &str) -> Result<String, String> {
        self.manage(&["kill", &format!("--pid={pid}"), &self.id, signal])
    }

    /// The sandbox's processes as (PID, parent's PID) inside it; `None`
    /// when runsc cannot say.
    pub fn processes(&self) -> Option<Vec<(i32, i32)>> {
        let out = self.manage(&["ps", &self.id]).ok()?;
        // A table: UID PID PPID C TTY STIME TIME CMD, under a header.
        Some(
            out.lines()
                .skip(1)
                .filter_map(|l| {
                    let mut cols = l.split_whitespace().skip(1);
                    Some((cols.next()?.parse().ok()?, cols.next()?.parse().ok()?))
                })
                .collect(),
        )
    }

    /// Remove the sandbox, whatever state it is in.
    pub fn delete(&self) -> Result<String, String> {
        self.manage(&["delete", "--force", &self.id])
    }

    /// The container's status as runsc says it (`running`, `created`...).
    pub fn status(&self) -> Option<String> {
        let out = self.manage(&["state", &self.id]).ok()?;
        let v: serde_json::Value = serde_json::from_str(&out).ok()?;
        v["status"].as_str().map(str::to_string)
    }

    /// The last error runsc logged (a failed start's reason).
    pub fn last_error(&self) -> Option<String> {
        let text = std::fs::read_to_string(&self.log).ok()?;
        text.lines()
            .rev()
            .find(|l| l.contains("FATAL ERROR"))
            .map(|l| {
                l.split_once("FATAL ERROR:")
                    .map(|(_, r)| r.trim().to_string())
                    .unwrap_or_else(|| l.to_string())
            })
    }
}
