//! Mode changes made on the host by runsc for a gVisor sandbox (and by a
//! VM's file servers, `crate::vmm`), judged by the supervisor with the
//! process backend's one rule ([`crate::modes`]).
//!
//! Under gVisor the sandbox's `chmod` is served by gVisor's kernel, and the
//! host file is changed by runsc itself (its gofer, or the sentry through
//! a descriptor the gofer gave it). The workspace is seen through a view
//! that swaps its owner with the sandbox's IDs ([`super::mount`]), so a
//! sandbox owns a root workspace's files as the kernel sees them: a root
//! 0600 file of the workspace became 0644 on the host at a sandbox's
//! `chmod 644`. The sandbox's own seccomp filter does not count here (its
//! calls never reach the host kernel as its own); runsc's calls do.
//!
//! So the child of `runsc run` loads the notifying filter
//! ([`crate::modes::NOTIFY_PROGRAM`]) with a listener between fork and
//! exec, hands the listener to the supervisor and keeps no copy; every
//! process runsc starts inherits the filter (its own filters stack above
//! it), and each `chmod`, `fchmod`, `fchmodat` or `fchmodat2` with a group
//! or other bit waits for the supervisor's judge, which finds the file
//! through runsc's own descriptor or path and decides as for the process
//! backend. runsc's own files are born after the sandbox's start and
//! change freely. Closed when anything is missing: a filter that cannot
//! be loaded fails the start, and a call with nobody listening fails.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

/// The filter, made before the fork, and the child's end of the socket
/// pair that carries its listener to the supervisor.
pub(crate) struct ModeFilter {
    filter: Vec<libc::sock_filter>,
    child: OwnedFd,
}

/// The supervisor's end of that pair.
pub(crate) struct ModeWatch {
    parent: OwnedFd,
}

impl ModeFilter {
    /// Everything the child needs, made here: after the fork it only
    /// makes system calls.
    pub(crate) fn prepare() -> io::Result<(ModeFilter, ModeWatch)> {
        let filter = crate::sys::sock_filters(crate::modes::NOTIFY_PROGRAM)
            .ok_or_else(|| io::Error::other("warden has no mode filter for this architecture"))?;
        let (parent, child) = nix::sys::socket::socketpair(
            nix::sys::socket::AddressFamily::Unix,
            nix::sys::socket::SockType::SeqPacket,
            None,
            nix::sys::socket::SockFlag::SOCK_CLOEXEC,
        )
        .map_err(io::Error::from)?;
        Ok((ModeFilter { filter, child }, ModeWatch { parent }))
    }

    /// In the child of `runsc run`, between fork and exec: load the filter
    /// with a listener, send the listener to the supervisor, close it.
    /// Only system calls on memory made before the fork.
    pub(crate) fn in_child(&self) -> io::Result<()> {
        const SECCOMP_SET_MODE_FILTER: libc::c_ulong = 1;
        const SECCOMP_FILTER_FLAG_NEW_LISTENER: libc::c_ulong = 1 << 3;
        let len = libc::c_ushort::try_from(self.filter.len())
            .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        let prog = libc::sock_fprog {
            len,
            filter: self.filter.as_ptr().cast_mut(),
        };
        // SAFETY: `prog` points at `self.filter`, a live array of exactly
        // `len` instructions made before the fork; the kernel copies it and
        // returns a new descriptor (the listener), owned here.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_seccomp,
                SECCOMP_SET_MODE_FILTER,
                SECCOMP_FILTER_FLAG_NEW_LISTENER,
                &prog as *const libc::sock_fprog,
            )
        };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        let listener =
            libc::c_int::try_from(rc).map_err(|_| io::Error::from_raw_os_error(libc::EBADF))?;
        let sent = send_fd(self.child.as_raw_fd(), listener);
        // SAFETY: `listener` is this process's own new descriptor; runsc
        // keeps no copy (a process holding it could answer its own calls).
        unsafe { libc::close(listener) };
        sent
    }
}

impl ModeWatch {
    /// In the supervisor, once runsc is started: judge its mode changes on
    /// one thread until every process of it is gone. Files born at or
    /// after `since` are the sandbox's own (runsc's among them).
    /// The child's end must be closed by then (the command that held it
    /// dropped), so that a child that failed first ends the wait. `cpus`:
    /// the sandbox's CPU limit, which the judging is held to as well.
    pub(crate) fn watch(self, since: (i64, u32), cpus: Option<f64>) -> io::Result<()> {
        crate::modes::watch_helper(self.parent, since, cpus)
    }

    /// [`ModeWatch::watch`] for a helper that runs as an unprivileged user
    /// of the host (a VM's file servers, see `vmm`): each permitted change
    /// is made with the helper's own identity, as a sandbox's is; the
    /// judging is held to the sandbox's CPU account, `budget`.
    pub(crate) fn watch_as_caller(
        self,
        since: (i64, u32),
        budget: Option<crate::modes::pace::Budget>,
    ) -> io::Result<()> {
        crate::modes::watch_unprivileged(self.parent, since, budget)
    }
}

/// Send `fd` over the socket `sock` with one byte, as the init sends its
/// listener (`crate::fdpass`), with buffers on the stack.
fn send_fd(sock: libc::c_int, fd: libc::c_int) -> io::Result<()> {
    let mut byte = [b'f'];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    // Room for one control message with one descriptor, aligned.
    let mut space = [0u64; 8];
    // SAFETY: CMSG_SPACE is a pure computation.
    let room = unsafe { libc::CMSG_SPACE(std::mem::size_of::<libc::c_int>() as libc::c_uint) };
    // SAFETY: an all-zero msghdr is a valid empty one.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = space.as_mut_ptr().cast();
    msg.msg_controllen = room as usize;
    // SAFETY: `msg` points at `space`, which holds `room` bytes (checked
    // below 64); the header and data written are within it.
    unsafe {
        if room as usize > std::mem::size_of_val(&space) {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        let c = libc::CMSG_FIRSTHDR(&msg);
        if c.is_null() {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        (*c).cmsg_level = libc::SOL_SOCKET;
        (*c).cmsg_type = libc::SCM_RIGHTS;
        (*c).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<libc::c_int>() as libc::c_uint) as usize;
        std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<libc::c_int>(), fd);
    }
    // SAFETY: `msg` and everything it points at live across the call.
    let n = unsafe { libc::sendmsg(sock, &msg, libc::MSG_NOSIGNAL) };
    if n != 1 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// A helper's mode changes judged by the supervisor as its own (a VM's
/// file servers, see `crate::vmm`): the filter its child loads last, the
/// supervisor's end of the pair until the judge starts, the start of
/// the sandbox (what is born after is its own), and the sandbox's CPU
/// account the judging is held to (none without a limit).
pub(crate) struct Judged {
    filter: std::sync::Arc<ModeFilter>,
    watch: std::sync::Mutex<Option<ModeWatch>>,
    since: (i64, u32),
    budget: Option<crate::modes::pace::Budget>,
}

impl Judged {
    /// Before the helper is spawned.
    pub(crate) fn new(budget: Option<crate::modes::pace::Budget>) -> io::Result<Judged> {
        let (filter, watch) = ModeFilter::prepare()?;
        Ok(Judged {
            filter: std::sync::Arc::new(filter),
            watch: std::sync::Mutex::new(Some(watch)),
            since: crate::modes::now(),
            budget,
        })
    }

    /// What the helper's child loads ([`ModeFilter::in_child`]).
    pub(crate) fn filter(&self) -> std::sync::Arc<ModeFilter> {
        self.filter.clone()
    }

    /// Once the helper is spawned: start the judge (once).
    pub(crate) fn watch(&self) -> io::Result<()> {
        let watch = self.watch.lock().ok().and_then(|mut w| w.take());
        match watch {
            Some(w) => w.watch_as_caller(self.since, self.budget.clone()),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;

    /// A helper's command under the filter runsc runs with, judged by a
    /// supervisor's judge as runsc's calls are; its exit status.
    fn as_helper(script: &str) -> std::process::ExitStatus {
        let (filter, watch) = ModeFilter::prepare().unwrap();
        let since = crate::modes::now();
        let mut cmd = std::process::Command::new("python3");
        cmd.args(["-c", script]);
        // SAFETY: `in_child` makes only seccomp, sendmsg and close calls
        // on memory made before the fork.
        unsafe {
            cmd.pre_exec(move || filter.in_child());
        }
        let mut child = cmd.spawn().unwrap();
        drop(cmd);
        watch.watch(since, None).unwrap();
        child.wait().unwrap()
    }

    #[test]
    fn a_set_id_mode_runsc_asks_for_is_refused_on_the_host_whatever_its_kernel_let_through() {
        if !crate::host::is_root()
            || std::process::Command::new("python3")
                .arg("-V")
                .output()
                .is_err()
        {
            eprintln!("skipped: needs root (runsc's judge changes files as root) and python3");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("by-exec");
        std::fs::write(&file, b"x").unwrap();
        let made = dir.path().join("made");
        let node = dir.path().join("node");
        // What gVisor's file server does for a sandbox's `chmod 4755` (a
        // file of the sandbox's own: born after the start), `chmod 2700`
        // (no shared bit), a creation with a set-ID mode and a node.
        let script = format!(
            r#"
import os, errno
bad = []
for how, call in [
    ("chmod 4755", lambda: os.chmod({f:?}, 0o4755)),
    ("chmod 2700", lambda: os.chmod({f:?}, 0o2700)),
    ("fchmod 6755", lambda: os.fchmod(os.open({f:?}, os.O_RDONLY), 0o6755)),
    ("openat 4755", lambda: os.open({m:?}, os.O_CREAT | os.O_WRONLY, 0o4755)),
    ("mknod 2644", lambda: os.mknod({n:?}, 0o2644)),
]:
    try:
        call()
        bad.append(how)
    except OSError as e:
        if e.errno != errno.EPERM:
            bad.append(how + " " + str(e))
# An ordinary mode still changes.
os.chmod({f:?}, 0o755)
raise SystemExit(", ".join(bad) if bad else 0)
"#,
            f = file.display().to_string(),
            m = made.display().to_string(),
            n = node.display().to_string(),
        );
        let status = as_helper(&script);
        assert!(status.success(), "a set-ID mode went through: {status:?}");
        let mode = std::fs::metadata(&file).unwrap().permissions().mode();
        assert_eq!(mode & 0o7777, 0o755);
        assert!(!made.exists() && !node.exists());
    }
}
