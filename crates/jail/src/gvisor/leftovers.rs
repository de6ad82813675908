//! Nothing of a gVisor sandbox outlives its supervisor: `runsc run` is
//! killed with it ([`dies_with`]), and runsc's sandbox and file server,
//! attached to `runsc run`, with `runsc run`; the bundle and runsc state
//! a killed supervisor could not remove are swept by the next gVisor
//! start ([`sweep`]).

use super::runsc::{self, Runsc};
use std::path::Path;

/// In `runsc run`'s child, before exec: it is killed when the thread
/// that forked it ends, which is the thread that waits for it and ends
/// only once it is gone, or with the whole supervisor (SIGKILL, SIGTERM,
/// SIGHUP, the OOM killer). runsc runs its sandbox (gVisor's kernel) and
/// its file server attached (`runsc run` without `--detach`: each with a
/// parent-death signal of its own), so all three end with the
/// supervisor, and the sandbox's `--timeout`, which only the supervisor
/// keeps, has nothing left to outlive. A supervisor already gone when
/// the signal is set (the child then has another parent) fails the
/// start. Meant for the child between fork and exec (it sets the
/// calling process's parent-death signal).
pub(super) fn dies_with(supervisor: libc::pid_t) -> std::io::Result<()> {
    // SAFETY: prctl(2) with PR_SET_PDEATHSIG and getppid(2) take no
    // pointers and are async-signal-safe.
    let (set, parent) = unsafe {
        (
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0),
            libc::getppid(),
        )
    };
    if set != 0 {
        return Err(std::io::Error::last_os_error());
    }
    if parent != supervisor {
        return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
    }
    Ok(())
}

/// Remove the bundles under `base` (`CONTAINER-PID-N`) whose supervisor,
/// process `PID`, is gone: runsc is first told to kill and delete the
/// container of that state, should anything of it still run (a bundle
/// of a warden that predates [`dies_with`]), then the directory goes.
/// A bundle whose PID is alive is left alone (its supervisor's, or that
/// PID reused: swept once it too is gone).
pub(super) fn sweep(base: &Path) {
    let Ok(entries) = std::fs::read_dir(base) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some((container, pid)) = owner(&name) else {
            continue;
        };
        if alive(pid) {
            continue;
        }
        let dir = entry.path();
        let state = dir.join("runsc");
        let has_state = std::fs::read_dir(&state).is_ok_and(|mut d| d.next().is_some());
        if let (true, Some(path)) = (has_state, runsc::find()) {
            let runsc = Runsc {
                path,
                root: state,
                id: container.to_string(),
                log: dir.join("runsc.sweep.log"),
                host_network: false,
                rootless: !crate::host::is_root(),
            };
            let _ = runsc.kill_all("KILL");
            let _ = runsc.delete();
        }
        let _ = warden_workspace::fsutil::remove_tree(&dir);
    }
}

/// The container's id and the supervisor's PID of a bundle's name
/// (`CONTAINER-PID-N`, see `Dir::make`).
fn owner(name: &str) -> Option<(&str, libc::pid_t)> {
    let mut parts = name.rsplitn(3, '-');
    let n = parts.next()?;
    let pid = parts.next()?;
    let container = parts.next()?;
    n.parse::<u64>().ok()?;
    let pid = pid.parse::<libc::pid_t>().ok().filter(|p| *p > 0)?;
    container.starts_with("warden-").then_some((container, pid))
}

/// Whether process `pid` exists (whoever owns it).
fn alive(pid: libc::pid_t) -> bool {
    match nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None) {
        Ok(()) => true,
        Err(e) => e != nix::errno::Errno::ESRCH,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bundles_name_gives_its_container_and_supervisor() {
        assert_eq!(
            owner("warden-run-1a2b-4242-0"),
            Some(("warden-run-1a2b", 4242))
        );
        assert_eq!(owner("warden-g-17-3"), Some(("warden-g", 17)));
        assert_eq!(owner("other-17-3"), None);
        assert_eq!(owner("warden-g-x-3"), None);
        assert_eq!(owner("warden-g-0-3"), None);
        assert_eq!(owner("warden-g-17"), None);
    }
}
