//! The sandbox's mount namespace, let go of without waiting for it.
//!
//! When the last process of a mount namespace exits, the kernel unmounts
//! the whole tree in that process's exit (`exit_task_namespaces`), and an
//! unmount waits for an expedited RCU grace period: about 0.6 ms here,
//! before the exiting init leaves its cgroup and becomes a zombie. The
//! supervisor waited for all of it before it could reap the init, remove
//! the cgroup and return.
//!
//! This module owns a reference to the sandbox's mount namespace (an nsfs
//! descriptor of the init's `ns/mnt`, opened right after the clone, never
//! passed to anything), so that the init's exit is not the last holder:
//! the init exits, leaves its cgroup and is reaped without the unmounting.
//! Every process of the sandbox is dead and reaped when [`Held::let_go`]
//! is called; what is left is a tree of mounts no process can enter
//! (nothing holds the namespace but this descriptor).
//!
//! Letting it go by `close(2)` would move the wait to here. Instead the
//! descriptor is put in flight on a Unix socket that is itself in flight on
//! its own queue, and both ends are closed: nothing references that
//! socket but its own queue, which is the garbage the kernel's Unix socket
//! collector frees, from a kernel worker, scheduled by the close. The
//! namespace's last reference is dropped there, off every process's path.
//! A kernel that collects in the closing process (before 6.10) drops it
//! here, as before; anything that fails closes the descriptor here.
//! Nothing is left behind in either case: `release_leaves_no_mounts`
//! counts the kernel's mount objects after 200 runs.

use std::io::IoSlice;
use std::os::fd::{AsRawFd, OwnedFd};

use nix::sys::socket::{
    sendmsg, socketpair, AddressFamily, ControlMessage, MsgFlags, SockFlag, SockType,
};
use nix::unistd::Pid;
use rustix::fs::{Mode, OFlags};

/// A reference to a sandbox's mount namespace.
pub(super) struct Held(OwnedFd);

impl Held {
    /// Hold the mount namespace of `init` (just cloned, not yet able to
    /// change who may open its `/proc` entries); `None` when it cannot be
    /// opened, and the init's exit tears the namespace down as before.
    pub(super) fn hold(init: Pid) -> Option<Held> {
        rustix::fs::open(
            format!("/proc/{}/ns/mnt", init.as_raw()),
            OFlags::RDONLY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .ok()
        .map(Held)
    }

    /// Drop the reference, leaving the unmounting to a kernel worker. Call
    /// only when every process of the sandbox has been reaped.
    pub(super) fn let_go(self) {
        let Ok((tx, rx)) = socketpair(
            AddressFamily::Unix,
            SockType::Datagram,
            None,
            SockFlag::SOCK_CLOEXEC,
        ) else {
            return;
        };
        let fds = [self.0.as_raw_fd(), rx.as_raw_fd()];
        let byte = [0u8];
        // The namespace and the receiving end itself, queued on the
        // receiving end: once both ends are closed, only the queue holds
        // them.
        let _ = sendmsg::<()>(
            tx.as_raw_fd(),
            &[IoSlice::new(&byte)],
            &[ControlMessage::ScmRights(&fds)],
            MsgFlags::MSG_DONTWAIT,
            None,
        );
        drop(rx);
        drop(self.0);
        drop(tx);
    }
}
