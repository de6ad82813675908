//! The VM's helpers' own output on the host, within a bound: what the VMM
//! (`vmm.log`) and virtiofsd (`virtiofsd.log`) print goes through a pipe
//! into a log that never passes `warden_jail::vmm::LOG_BOUND`, as the
//! guest's console does (`vm_fs.rs`). A guest that makes a helper print
//! about its requests without end would otherwise fill the host's disk,
//! charged to nothing. Stand-in helpers that print without pause play
//! them; no guest boots.

use crate::common::vm::*;
use crate::common::*;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The last line a stand-in helper prints once all its output went
/// through.
const LAST_LINE: &str = "the helper's output took every byte";

/// A stand-in helper that prints `mib` MiB to its standard output and
/// error, then [`LAST_LINE`], and stays up a while (as a serving one
/// does) before it fails.
fn chatty_helper(at: &Path, mib: u32) {
    let script = format!(
        r#"#!/bin/bash
if /usr/bin/head -c {half} /dev/zero | /usr/bin/tr '\0' 'o' \
   && /usr/bin/head -c {half} /dev/zero | /usr/bin/tr '\0' 'e' >&2; then
  echo "{LAST_LINE}" >&2
fi
sleep 4
exit 3
"#,
        half = u64::from(mib) * 1024 * 1024 / 2,
    );
    std::fs::write(at, script).unwrap();
    std::fs::set_permissions(at, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// The file `name` of each run directory of the VMs run by the process
/// `pid` (`vm/run/ID-PID-N/`).
fn logs_of(pid: u32, name: &str) -> Vec<PathBuf> {
    let mark = format!("-{pid}-");
    std::fs::read_dir(vm_dir().join("run"))
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().contains(&mark))
        .map(|e| e.path().join(name))
        .collect()
}

/// Run a VM sandbox with `vmm` and `fsd` as its helpers over `fs`, and
/// watch the log `name` of its run directory while it runs: the most it
/// held and whether its last line landed.
fn watch_log(dir: &Path, vmm: &Path, fsd: &Path, fs: &str, name: &str) -> (u64, bool) {
    let ws = dir.join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let mut child = vm_run_with_helpers(&ws, &dir.join("state"), vmm, fsd, fs)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let (mut biggest, mut finished) = (0u64, false);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while std::time::Instant::now() < deadline {
        if matches!(child.try_wait(), Ok(Some(_))) {
            break;
        }
        for log in logs_of(child.id(), name) {
            if let Ok(m) = std::fs::metadata(&log) {
                biggest = biggest.max(m.len());
            }
            let text = std::fs::read(&log).unwrap_or_default();
            finished |= text.ends_with(format!("{LAST_LINE}\n").as_bytes());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    (biggest, finished)
}

fn assert_bounded(name: &str, (biggest, finished): (u64, bool)) {
    let bound = warden_jail::vmm::LOG_BOUND;
    eprintln!("{name} was at most {biggest} bytes (bound {bound}); finished: {finished}");
    assert!(biggest > 0, "no {name} of this run was seen");
    assert!(
        biggest <= bound,
        "{name} grew to {biggest} bytes, past {bound}"
    );
    assert!(
        finished,
        "the helper's writes did not all go through (or the last line of {name} was lost)"
    );
}

#[test]
fn a_vmm_printing_without_end_leaves_a_log_within_its_bound_and_keeps_running() {
    if guest_release().is_none() {
        return;
    }
    let dir = TempDir::new("vmm-log-bound");
    let vmm = dir.path().join("chatty-qemu");
    chatty_helper(&vmm, 24);
    let got = watch_log(dir.path(), &vmm, &vmm, "9p", "vmm.log");
    assert_bounded("vmm.log", got);
}

#[test]
fn a_virtiofsd_printing_without_end_leaves_a_log_within_its_bound_and_keeps_running() {
    if guest_release().is_none() {
        return;
    }
    let dir = TempDir::new("fsd-log-bound");
    let fsd = dir.path().join("chatty-virtiofsd");
    chatty_helper(&fsd, 24);
    let vmm = dir.path().join("idle-qemu");
    idle_vmm(&vmm, 6);
    let got = watch_log(dir.path(), &vmm, &fsd, "virtiofs", "virtiofsd.log");
    assert_bounded("virtiofsd.log", got);
}
