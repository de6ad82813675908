//! gVisor under the real binary: whether runsc runs a sandbox on this
//! host, and a named gVisor sandbox made and started.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::{ok, run_sh, skip, stderr, stdout, warden, TempDir};
use std::path::Path;

/// Whether `--isolation gvisor` runs a sandbox here: `false`, the reason
/// printed, where runsc is missing or warden does not run as root; any
/// other failure fails the test (a gVisor that broke is not a host that
/// lacks it).
pub fn gvisor_available() -> bool {
    let out = run_sh(&["--isolation", "gvisor"], "echo ok");
    if out.status.success() && stdout(&out).trim() == "ok" {
        return true;
    }
    let err = stderr(&out);
    for known in ["needs runsc", "needs warden to run as root"] {
        if err.contains(known) {
            skip(&format!("gVisor cannot run here: {}", err.trim()));
            return false;
        }
    }
    panic!("the gVisor probe failed: {} {err}", stdout(&out));
}

/// Named sandbox `name` under `--isolation gvisor` over workspace `ws`,
/// with `flags` besides, made and started in the state of [`warden`]:
/// both must succeed.
pub fn start_gvisor(state: &Path, name: &str, ws: &TempDir, flags: &[&str]) {
    let mut args = vec!["create", name, "--isolation", "gvisor"];
    args.extend_from_slice(flags);
    args.extend(["-w", ws.str()]);
    ok(&warden(state, &args));
    ok(&warden(state, &["start", name]));
}

/// The processes gVisor's kernel runs for the named sandboxes of `state`,
/// as `runsc ps` lists them on the host (PID, parent's PID, command), by
/// the state root and container its `runsc run` was started with; empty
/// when none runs. The host's view: what a process inside sees of the
/// others is no evidence.
pub fn processes_inside(state: &Path) -> Vec<(i32, i32, String)> {
    let marker = state.to_string_lossy().into_owned();
    let Some((root, id)) = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .find_map(|e| {
            e.file_name().to_str()?.parse::<i32>().ok()?;
            let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
            let args: Vec<String> = cmdline
                .split(|b| *b == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect();
            let root = args
                .iter()
                .find_map(|a| a.strip_prefix("--root="))
                .filter(|r| r.contains(&marker))?
                .to_string();
            let id = args.last()?.clone();
            args.iter().any(|a| a == "run").then_some((root, id))
        })
    else {
        return Vec::new();
    };
    let out = std::process::Command::new("runsc")
        .arg(format!("--root={root}"))
        .args(["ps", &id])
        .output();
    let Ok(out) = out else { return Vec::new() };
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .skip(1)
        .filter_map(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            Some((
                cols.get(1)?.parse().ok()?,
                cols.get(2)?.parse().ok()?,
                cols.last()?.to_string(),
            ))
        })
        .collect()
}

/// The host PID of runsc's sandbox process (gVisor's kernel) for the
/// sandboxes of `state`: its command line names runsc's root there.
pub fn gvisor_kernel(state: &Path) -> Option<i32> {
    let root = state.to_string_lossy().into_owned();
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: i32 = e.file_name().to_str()?.parse().ok()?;
        let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
        let args: Vec<String> = cmdline
            .split(|b| *b == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        let ours = args.iter().any(|a| a.contains(&root));
        (ours && args.iter().any(|a| a == "boot")).then_some(pid)
    })
}
