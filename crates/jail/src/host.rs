//! What this host offers for isolation, for `warden doctor` and for the
//! messages that explain why a layer cannot be applied.

use crate::cgroup;
use serde::Serialize;

/// One line of `warden doctor`.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    pub name: &'static str,
    pub ok: bool,
    pub detail: String,
    /// What is lost when this check fails, and how to fix it.
    pub lost: Option<String>,
}

/// Everything `warden doctor` reports.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub kernel: String,
    pub arch: &'static str,
    pub root: bool,
    pub landlock_abi: Option<i32>,
    pub cgroups: cgroup::Support,
    pub checks: Vec<Check>,
}

impl Report {
    /// Full isolation is available when every check passed.
    pub fn fully_isolated(&self) -> bool {
        self.checks.iter().all(|c| c.ok)
    }
}

fn read_trim(path: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
}

/// Why user namespaces are unavailable, when a host setting says so, with the
/// fix. `None` when no known setting blocks them.
pub fn userns_blocker() -> Option<String> {
    if read_trim("/proc/sys/kernel/unprivileged_userns_clone").as_deref() == Some("0") && !is_root()
    {
        return Some(
            "unprivileged user namespaces are disabled (kernel.unprivileged_userns_clone=0): \
             set it to 1 with `sysctl -w kernel.unprivileged_userns_clone=1`, or run warden as root"
                .into(),
        );
    }
    if read_trim("/proc/sys/user/max_user_namespaces").as_deref() == Some("0") {
        return Some(
            "user namespaces are disabled (user.max_user_namespaces=0): \
             set it with `sysctl -w user.max_user_namespaces=15000`"
                .into(),
        );
    }
    if read_trim("/proc/sys/kernel/apparmor_restrict_unprivileged_userns").as_deref() == Some("1")
        && !is_root()
    {
        return Some(
            "AppArmor restricts unprivileged user namespaces \
             (kernel.apparmor_restrict_unprivileged_userns=1, the Ubuntu 24.04 default): \
             install an AppArmor profile for warden that allows `userns,` \
             (docs/threat-model.md, \"AppArmor\"), set the sysctl to 0, or run warden as root"
                .into(),
        );
    }
    None
}

/// Guarantees lost when the sandbox cannot have its own namespaces.
pub const LOST_WITHOUT_NAMESPACES: &str = "the sandbox shares the host's process table, \
    network (host services on loopback included), hostname and file tree; Landlock still \
    limits which files it may open and seccomp which calls it may make";

/// Root of the host: UID 0 in the initial user namespace. UID 0 inside a
/// user namespace (a container, `unshare -r`) cannot map the sandbox to
/// another host ID, so it runs warden the rootless way.
pub fn is_root() -> bool {
    static ROOT: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ROOT.get_or_init(|| nix::unistd::geteuid().is_root() && in_initial_user_namespace())
}

/// UID 0 of a user namespace that maps it to UID 0 outside (`unshare -r`
/// run by root, a container's root mapped to the host's): rootless warden
/// would run the sandbox as the host's root, without capabilities but with
/// root's files.
pub fn root_inside_maps_to_outer_root() -> bool {
    if is_root() {
        return false;
    }
    let euid = nix::unistd::geteuid().as_raw() as u64;
    uid_map().lines().any(|line| {
        let f: Vec<u64> = line
            .split_whitespace()
            .filter_map(|x| x.parse().ok())
            .collect();
        matches!(f.as_slice(), [inside, outside, count]
            if *inside <= euid && euid < inside + count && outside + (euid - inside) == 0)
    })
}

/// The initial user namespace maps every ID to itself: `0 0 4294967295`.
fn in_initial_user_namespace() -> bool {
    uid_map().split_whitespace().eq(["0", "0", "4294967295"])
}

/// This process's `/proc/self/uid_map`, read once (empty if unreadable).
fn uid_map() -> &'static str {
    static MAP: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    MAP.get_or_init(|| std::fs::read_to_string("/proc/self/uid_map").unwrap_or_default())
}

/// The running kernel's release (`uname -r`), or "unknown".
pub fn kernel_release() -> String {
    nix::sys::utsname::uname()
        .map(|u| u.release().to_string_lossy().into_owned())
        .unwrap_or_else(|_| "unknown".into())
}

/// Probe the host. Reads files and makes harmless queries only.
pub fn probe() -> Report {
    let uname = nix::sys::utsname::uname().ok();
    let kernel = uname
        .as_ref()
        .map(|u| u.release().to_string_lossy().into_owned())
        .unwrap_or_else(|| "unknown".into());
    let landlock_abi = crate::sys::landlock_abi().ok();
    let cgroups = cgroup::probe();
    let mut checks = Vec::new();

    let userns = match userns_blocker() {
        None => Check {
            name: "user namespaces",
            ok: true,
            detail: "available".into(),
            lost: None,
        },
        Some(why) => Check {
            name: "user namespaces",
            ok: false,
            detail: why,
            lost: Some(LOST_WITHOUT_NAMESPACES.into()),
        },
    };
    checks.push(userns);
    checks.push(match landlock_abi {
        Some(abi) if abi >= 6 => Check {
            name: "landlock",
            ok: true,
            detail: format!("ABI {abi}"),
            lost: None,
        },
        // Before ABI 6 (Linux 6.12) Landlock cannot scope signals or
        // abstract sockets: not a lost layer (the PID and network
        // namespaces and the command's own session hold them), but said.
        Some(abi) => Check {
            name: "landlock",
            ok: true,
            detail: format!(
                "ABI {abi}; signals and abstract sockets are not scoped by Landlock before ABI 6 (Linux 6.12): the PID and network namespaces hold them alone"
            ),
            lost: None,
        },
        None => Check {
            name: "landlock",
            ok: false,
            detail: "not available (kernel older than 5.13, or `landlock` missing from the lsm= boot parameter)".into(),
            lost: Some("file access is restricted by the mount table alone".into()),
        },
    });
    // The exec allowlist is Landlock's execute right (in every ABI) and a
    // seccomp rule that keeps memfds from being executed.
    checks.push(match landlock_abi {
        Some(abi) if abi >= 1 => Check {
            name: "exec allowlist",
            ok: true,
            detail: format!("available (Landlock's execute right, ABI {abi})"),
            lost: None,
        },
        _ => Check {
            name: "exec allowlist",
            ok: false,
            detail: "not available: the kernel has no Landlock".into(),
            lost: Some(
                "`process.allow_exec` is refused (or, with `allow_degraded`, not enforced)".into(),
            ),
        },
    });
    let seccomp = read_trim("/proc/sys/kernel/seccomp/actions_avail");
    checks.push(Check {
        name: "seccomp",
        ok: seccomp.is_some(),
        detail: seccomp
            .map(|a| format!("filters available (actions: {a})"))
            .unwrap_or_else(|| "not available".into()),
        lost: None,
    });
    let cg_ok = cgroups.memory && cgroups.pids;
    checks.push(Check {
        name: "cgroups",
        ok: cg_ok,
        detail: format!(
            "{:?}; memory: {}, pids: {}, cpu: {}",
            cgroups.layout, cgroups.memory, cgroups.pids, cgroups.cpu
        ),
        lost: (!cg_ok).then(|| {
            format!(
                "explicit `resources.memory`/`resources.pids`/`resources.cpus` are refused unless `allow_degraded`; default limits fall back to per-process RLIMIT_DATA and per-user RLIMIT_NPROC{}",
                cgroups
                    .why_not
                    .as_ref()
                    .map(|w| format!(" ({w})"))
                    .unwrap_or_default()
            )
        }),
    });
    let kvm = std::path::Path::new("/dev/kvm").exists();
    checks.push(Check {
        name: "kvm",
        ok: true,
        detail: if kvm {
            "/dev/kvm present (for the microVM backend)".into()
        } else {
            "/dev/kvm absent (the microVM backend runs under slow software emulation)".into()
        },
        lost: None,
    });
    Report {
        kernel,
        arch: std::env::consts::ARCH,
        root: is_root(),
        landlock_abi,
        cgroups,
        checks,
    }
}
