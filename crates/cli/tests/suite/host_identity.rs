//! A sandbox never takes a privileged host identity, whatever its backend:
//! with a workspace that belongs to root (a daemon's empty workspace, a
//! root-owned `-w`), a root-only file of a host directory the sandbox is
//! shown stays unread, and the workspace stays writable, what the sandbox
//! makes landing as the workspace owner's. Through the real binary, over
//! every backend this host has (each one missing is skipped, saying why).
//! A VM guest's is checked in the read-only bind's boot of `vm_shares`
//! (`a_vm_guest_writes_its_rw_bind_never_its_ro_bind_and_reads_nothing_beside_them`),
//! with the booting set, rather than by a boot of its own here.

use crate::common::*;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// A root-only (0600) file planted in a host directory, removed at the end.
struct Planted(PathBuf);

impl Planted {
    fn new(dir: &Path, secret: &str) -> Planted {
        let p = dir.join(unique("warden-root-only"));
        std::fs::write(&p, secret).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        Planted(p)
    }
}

impl Drop for Planted {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Whether gVisor runs a sandbox here; says why not.
fn gvisor_runs() -> bool {
    let out = run_sh(&["--isolation", "gvisor"], "true");
    if out.status.success() {
        return true;
    }
    skip(&format!("gVisor cannot run here: {}", stderr(&out).trim()));
    false
}

/// The script that tries each planted file and writes the workspace.
fn probe(planted: &[&Planted]) -> String {
    let mut s = String::from("id -u; ");
    for p in planted {
        s.push_str(&format!("cat {} 2>/dev/null; ", p.0.display()));
    }
    s.push_str("echo written > made.txt; mkdir -p sub && echo deep > sub/f; true");
    s
}

fn check(backend: &str, out: &std::process::Output, secret: &str, ws: &Path) {
    let s = stdout(out);
    assert_eq!(code(out), 0, "{backend}: {s} {}", stderr(out));
    assert!(
        !s.contains(secret),
        "{backend}: a root-only host file was read: {s}"
    );
    // Under gVisor and in a VM the sandbox's uid is the one host files are
    // judged by; a process sandbox's root is nobody on the host (its map).
    if backend != "process" {
        assert_ne!(s.lines().next(), Some("0"), "{backend}: ran as root: {s}");
    }
    for f in ["made.txt", "sub/f"] {
        let m = std::fs::metadata(ws.join(f))
            .unwrap_or_else(|e| panic!("{backend}: {f} was not written: {e} {s}"));
        assert_eq!(
            (m.uid(), m.gid()),
            (0, 0),
            "{backend}: {f} is not the workspace owner's"
        );
    }
}

#[test]
fn a_root_only_host_file_stays_unread_under_every_backend_with_a_root_owned_workspace() {
    if !is_root() {
        skip("needs root: the workspace must belong to root");
        return;
    }
    let secret = unique("root-only-secret");
    let bound = TempDir::new("identity-bound");
    std::fs::set_permissions(bound.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let in_bind = Planted::new(bound.path(), &secret);
    // /etc is shown to every sandbox (its secret files covered by name):
    // a root-only file there is what the review read under gVisor.
    let in_etc = Planted::new(Path::new("/etc"), &secret);
    let script = probe(&[&in_bind, &in_etc]);
    let mut backends = vec!["process"];
    if gvisor_runs() {
        backends.push("gvisor");
    }
    for backend in backends {
        let ws = TempDir::new("identity-ws");
        let out = run_sh(
            &["--isolation", backend, "-w", ws.str(), "--ro", bound.str()],
            &script,
        );
        check(backend, &out, &secret, ws.path());
    }
}

#[test]
fn a_named_gvisor_sandbox_of_a_root_owned_workspace_is_never_root_and_still_writes_it() {
    if !is_root() {
        skip("needs root: the workspace must belong to root");
        return;
    }
    if !gvisor_runs() {
        return;
    }
    let secret = unique("root-only-secret");
    let in_etc = Planted::new(Path::new("/etc"), &secret);
    let state = TempDir::new("identity-gv");
    let ws = TempDir::new("identity-gv-ws");
    // A reviewable workspace (an overlay), as the daemon makes them, and
    // each command a `runsc exec` as the API's are.
    gvisor::start_gvisor(state.path(), "g", &ws, &[]);
    let out = warden(
        state.path(),
        &[
            "exec",
            "g",
            "--",
            "sh",
            "-c",
            &format!(
                "id -u; cat {} 2>&1; echo kept > made.txt && cat made.txt",
                in_etc.0.display()
            ),
        ],
    );
    let s = stdout(&out);
    let _ = warden(state.path(), &["stop", "g"]);
    assert!(!s.contains(&secret), "a root-only /etc file was read: {s}");
    assert_ne!(s.lines().next(), Some("0"), "ran as root: {s}");
    assert!(
        s.contains("kept"),
        "the workspace was not writable: {s} {}",
        stderr(&out)
    );
}
