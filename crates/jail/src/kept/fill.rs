//! Who fills the disk budget's tmpfs of a sandbox whose supervisor makes
//! it ([`super::detached`]: a gVisor sandbox's, a VM's): a process in the
//! sandbox's own cgroup (runsc's, the VMM's).
//!
//! A tmpfs page is charged to the memory cgroup of the process that first
//! writes it. The budget's tmpfs holds the saved layer and home again at
//! each start; written by the supervisor, those pages would be charged to
//! the supervisor's cgroup (the daemon's, or the owner's shell's), and a
//! sandbox would hold its memory limit in its cgroup plus its whole disk
//! budget beside it. The process backend's init fills its tmpfs from
//! inside the sandbox's cgroup; here a child forked for the purpose moves
//! itself into every directory of the sandbox's cgroup (memory v1 or v2 alike:
//! `cgroup.procs` of each) before it writes a byte, so the refilled pages
//! count against the same limit as the sandbox's own memory. A child that
//! cannot move itself writes nothing, and the start fails.

use std::io::Read;
use std::os::fd::{AsRawFd, OwnedFd};

/// Why the budget's tmpfs could not be filled from the sandbox's cgroup.
#[derive(Debug, thiserror::Error)]
pub enum FillError {
    #[error("cannot place the filling of the sandbox's size-limited state (`resources.disk`) in its cgroup ({0}): its pages would count against no limit of the sandbox's")]
    Charge(String),
    #[error(
        "cannot fill the sandbox's size-limited state (`resources.disk`) from its own cgroup: {0}"
    )]
    Filled(String),
}

/// Run `work` (the writes into the budget's tmpfs) in a child placed in
/// `cgroup` first; the error it met, as text, when it fails there. Without
/// a cgroup (none could be made, and a `degraded` event said that no
/// memory limit holds the sandbox) there is no charge to place: `work`
/// runs here and its own error is answered inside.
pub fn in_cgroup<F, E>(
    cgroup: Option<&crate::cgroup::Cgroup>,
    work: F,
) -> Result<Result<(), E>, FillError>
where
    F: FnOnce() -> Result<(), E>,
    E: std::error::Error,
{
    let Some(cgroup) = cgroup else {
        return Ok(work());
    };
    let mut procs = Vec::new();
    for dir in cgroup.paths() {
        let file = dir.join("cgroup.procs");
        let fd = nix::fcntl::open(
            &file,
            nix::fcntl::OFlag::O_WRONLY | nix::fcntl::OFlag::O_CLOEXEC,
            nix::sys::stat::Mode::empty(),
        )
        .map_err(|e| FillError::Charge(format!("{}: {e}", file.display())))?;
        procs.push(fd);
    }
    if procs.is_empty() {
        return Err(FillError::Charge(
            "the sandbox's cgroup has no directory".into(),
        ));
    }
    let (read, write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
        .map_err(|e| FillError::Charge(format!("pipe: {e}")))?;
    // SAFETY: the child only writes to descriptors opened above, runs
    // `work` (file-system calls and allocations, no locks another thread
    // of this process could hold across the fork but the allocator's,
    // which the C library makes fork-safe) and ends with _exit, running no
    // destructor of this process's state; a panic is caught before it
    // could unwind into the caller's frames.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(FillError::Charge(format!(
            "fork: {}",
            std::io::Error::last_os_error()
        )));
    }
    if pid == 0 {
        drop(read);
        let code = child(&procs, &write, work);
        // SAFETY: ends the forked child without running this process's
        // destructors (the cgroup's, the state directory's).
        unsafe { libc::_exit(code) }
    }
    drop(write);
    drop(procs);
    let mut said = String::new();
    let mut reader = std::fs::File::from(read);
    let _ = reader.read_to_string(&mut said);
    let status = wait(pid);
    match status {
        Some(0) if said.is_empty() => Ok(Ok(())),
        Some(_) if !said.is_empty() => Err(FillError::Filled(said)),
        Some(code) if code >= 128 => Err(FillError::Filled(format!(
            "killed by signal {} (the sandbox's memory limit holds its saved state too)",
            code - 128
        ))),
        Some(code) => Err(FillError::Filled(format!("exit status {code}"))),
        None => Err(FillError::Filled("cannot wait for it".into())),
    }
}

/// In the child: join each directory, then work; the exit code.
fn child<F, E>(procs: &[OwnedFd], report: &OwnedFd, work: F) -> i32
where
    F: FnOnce() -> Result<(), E>,
    E: std::error::Error,
{
    let say = |text: &str| {
        let _ = nix::unistd::write(report, text.as_bytes());
    };
    for fd in procs {
        // SAFETY: writes one byte from a static buffer to a descriptor
        // owned by this process.
        let n = unsafe { libc::write(fd.as_raw_fd(), b"0".as_ptr().cast(), 1) };
        if n != 1 {
            say(&format!(
                "cannot move into the sandbox's cgroup: {}",
                std::io::Error::last_os_error()
            ));
            return 2;
        }
    }
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(work)) {
        Ok(Ok(())) => 0,
        Ok(Err(e)) => {
            say(&chain(&e));
            1
        }
        Err(_) => {
            say("it panicked");
            3
        }
    }
}

/// An error and its sources, one line.
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// The child's exit code, or 128 + the signal that ended it.
fn wait(pid: libc::pid_t) -> Option<i32> {
    loop {
        let mut status = 0;
        // SAFETY: waits for the child forked above, writing its status
        // into a local.
        let rc = unsafe { libc::waitpid(pid, &mut status, 0) };
        if rc == pid {
            if libc::WIFEXITED(status) {
                return Some(libc::WEXITSTATUS(status));
            }
            if libc::WIFSIGNALED(status) {
                return Some(128 + libc::WTERMSIG(status));
            }
            return None;
        }
        if rc < 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return None;
        }
    }
}
