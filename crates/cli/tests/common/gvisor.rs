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
