//! An exec'd command held with everything it starts: a PID namespace of
//! its own inside gVisor's kernel, whose first process (a small init of
//! the shim's) starts the command, waits for every process of the
//! namespace and ends when the last one has. Outside review F5: a kill
//! found a command's processes by their parents, and a process that left
//! its tree (`setsid` and exit, a double fork, `daemon(3)`) was handed to
//! the sandbox's first process, out of reach of its command's kill and
//! `--timeout`. A process cannot leave a PID namespace: whatever the
//! command starts is a descendant of the namespace's init, found by the
//! kill's walk, and the init's death takes every one of them with it.
//!
//! gVisor's kernel has no `PR_SET_CHILD_SUBREAPER` (the installed runsc
//! answers EINVAL, checked), so a subreaper could not hold the tree.
//!
//! Making the namespace needs `CAP_SYS_ADMIN` inside gVisor's kernel: the
//! exec's process is given it and `CAP_SETPCAP` (see `bundle::process`),
//! and the shim gives both up, from every set, bounding included, before
//! its filter is loaded, so the command starts with none, `no_new_privs`
//! set and the filter that refuses it any namespace of its own. Until
//! then the shim is not dumpable, so no process of the sandbox can trace
//! it or read its memory. The namespace comes with a mount namespace of
//! its own where a fresh `/proc` shows the command's processes by the
//! PIDs it knows them by (`$$`, `$!`).
//!
//! ```text
//! runsc exec ─ shim (waits; ends as the command did)
//!               └─ init (PID 1 of the namespace: reaps every process)
//!                   └─ the command, and all it starts
//! ```
//!
//! Signals other than SIGKILL reach the command's processes one by one
//! (`signal::deliver`); the shim and its init ignore them, so a SIGTERM
//! the command ignores never ends the hold around it.

use nix::errno::Errno;
use nix::sys::signal::{SigHandler, Signal};
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::{fork, ForkResult, Pid};
use std::os::fd::OwnedFd;

/// The status the shim ends with when it cannot run the command as held
/// (as `env` and `timeout` say of themselves: 125).
pub const FAILED: i32 = 125;

/// The step of the hold that failed.
#[derive(Debug, thiserror::Error)]
#[error("cannot {0}")]
pub struct HoldError(&'static str, #[source] Errno);

/// The capabilities the exec's process is given, for the shim alone.
pub const GIVEN: &[&str] = &["CAP_SYS_ADMIN", "CAP_SETPCAP"];

/// Signals the shim and its init ignore (the command's are reset).
const IGNORED: &[Signal] = &[
    Signal::SIGINT,
    Signal::SIGTERM,
    Signal::SIGHUP,
    Signal::SIGQUIT,
    Signal::SIGUSR1,
    Signal::SIGUSR2,
];

/// Which process of the hold this is, once [`enter`] returns.
pub enum Role {
    /// The shim, outside the namespace: it waits for the init, then ends
    /// as the command ended ([`finish`]).
    Outside { init: Pid, status: OwnedFd },
    /// The command's process, in the namespace: it loads the filter and
    /// executes the command.
    Command,
}

/// Not dumpable, a PID and a mount namespace, `filter` loaded, then the
/// init forked (which mounts the namespace's `/proc`): returns in the shim
/// (outside) and in the command's process; the init never returns. Each
/// returns with every capability given up and the filter loaded.
pub fn enter(filter: &[u8]) -> Result<Role, HoldError> {
    // SAFETY: prctl with integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) } != 0 {
        return Err(HoldError("stay undumpable", Errno::last()));
    }
    nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWPID | nix::sched::CloneFlags::CLONE_NEWNS)
        .map_err(|e| HoldError("make a PID namespace", e))?;
    // The fresh /proc stays in this mount namespace. A gVisor without
    // mount propagation answers EINVAL: its mounts are private already.
    match nix::mount::mount(
        None::<&str>,
        "/",
        None::<&str>,
        nix::mount::MsFlags::MS_REC | nix::mount::MsFlags::MS_PRIVATE,
        None::<&str>,
    ) {
        Ok(()) | Err(Errno::EINVAL) => {}
        Err(e) => return Err(HoldError("keep its mounts private", e)),
    }
    // Loaded once here, for the shim, its init and the command: after the
    // namespace (which it refuses), before anything of the command runs.
    crate::sys::load_seccomp_filter(filter)
        .map_err(|e| HoldError("load the sandbox's seccomp filter", e))?;
    let (read, write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
        .map_err(|e| HoldError("make a pipe", e))?;
    // SAFETY: the shim has one thread; the child only makes system calls
    // and allocates in its own copy of the memory.
    match unsafe { fork() }.map_err(|e| HoldError("start its init", e))? {
        ForkResult::Parent { child } => {
            drop(write);
            drop_capabilities()?;
            ignore_signals();
            Ok(Role::Outside {
                init: child,
                status: read,
            })
        }
        ForkResult::Child => {
            drop(read);
            init(write)
        }
    }
}

/// PID 1 of the namespace: mounts its `/proc`, gives up its capabilities,
/// starts the command, then waits for every process of
/// the namespace; the command's wait status goes to the shim when the
/// last one has ended.
fn init(status: OwnedFd) -> Result<Role, HoldError> {
    use nix::mount::MsFlags;
    nix::mount::mount(
        Some("proc"),
        "/proc",
        Some("proc"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        None::<&str>,
    )
    .map_err(|e| HoldError("mount its /proc", e))?;
    drop_capabilities()?;
    ignore_signals();
    // SAFETY: one thread, as above.
    let command = match unsafe { fork() }.map_err(|e| HoldError("start the command", e))? {
        ForkResult::Child => {
            drop(status);
            reset_signals();
            return Ok(Role::Command);
        }
        ForkResult::Parent { child } => child,
    };
    let mut raw: Option<i32> = None;
    loop {
        let mut s: libc::c_int = 0;
        // SAFETY: waitpid writes the status into `s`, on this frame.
        let pid = unsafe { libc::waitpid(-1, &mut s, 0) };
        if pid == command.as_raw() {
            raw = Some(s);
        } else if pid < 0 && Errno::last() != Errno::EINTR {
            // ECHILD: none is left in the namespace.
            break;
        }
    }
    let Some(raw) = raw else {
        std::process::exit(FAILED)
    };
    let _ = nix::unistd::write(&status, &raw.to_ne_bytes());
    std::process::exit(0)
}

/// In the shim: wait for the init and end as the command did (its status,
/// or its signal), or as the init did when it could not say.
pub fn finish(init: Pid, status: OwnedFd) -> ! {
    let ended = loop {
        match waitpid(init, None) {
            Err(Errno::EINTR) => continue,
            other => break other,
        }
    };
    let mut buf = [0u8; 4];
    let told = nix::unistd::read(&status, &mut buf).ok() == Some(4);
    let raw = i32::from_ne_bytes(buf);
    if told && libc::WIFSIGNALED(raw) {
        die_of(libc::WTERMSIG(raw));
    }
    if told && libc::WIFEXITED(raw) {
        std::process::exit(libc::WEXITSTATUS(raw));
    }
    match ended {
        Ok(WaitStatus::Exited(_, code)) => std::process::exit(code),
        Ok(WaitStatus::Signaled(_, sig, _)) => die_of(sig as i32),
        _ => std::process::exit(FAILED),
    }
}

/// End by `signal`, as the command did (so runsc reports what it would
/// have for the command), without a core file of the shim's.
fn die_of(signal: i32) -> ! {
    let none = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: setrlimit reads `none`, on this frame; signal and raise take
    // integers.
    unsafe {
        libc::setrlimit(libc::RLIMIT_CORE, &none);
        libc::signal(signal, libc::SIG_DFL);
        libc::raise(signal);
    }
    std::process::exit(128 + signal)
}

/// Every capability given up: the bounding set (with `CAP_SETPCAP`, held
/// until then), then the other sets.
fn drop_capabilities() -> Result<(), HoldError> {
    for cap in 0..64 {
        // SAFETY: prctl with integer arguments only.
        if unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) } != 0 {
            match Errno::last() {
                // Past the last capability the kernel knows.
                Errno::EINVAL => break,
                e => return Err(HoldError("give up its capabilities", e)),
            }
        }
    }
    let none = [crate::caps::CapData::EMPTY; 2];
    crate::caps::capset(&none).map_err(|e| HoldError("give up its capabilities", e))
}

fn ignore_signals() {
    for s in IGNORED {
        // SAFETY: SIG_IGN installs no handler of ours.
        let _ = unsafe { nix::sys::signal::signal(*s, SigHandler::SigIgn) };
    }
}

/// The command starts with the dispositions a process is given: none of
/// the shim's ignored signals, nor the Rust runtime's SIGPIPE.
fn reset_signals() {
    for s in IGNORED.iter().chain(&[Signal::SIGPIPE]) {
        // SAFETY: SIG_DFL installs no handler of ours.
        let _ = unsafe { nix::sys::signal::signal(*s, SigHandler::SigDfl) };
    }
}
