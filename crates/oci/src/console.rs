//! `--console-socket`: a terminal's master side handed to whoever listens
//! on a Unix socket (containerd's shim), with SCM_RIGHTS, as runc does.

use crate::container::OciError;
use std::io::IoSlice;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::path::Path;

/// Send `master` over a new connection to the socket at `path`; the
/// message's bytes name the terminal, as runc's do.
pub fn send_master(path: &Path, master: BorrowedFd<'_>) -> Result<(), OciError> {
    use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags, UnixAddr};
    let err = |source| OciError::Console {
        path: path.to_path_buf(),
        source,
    };
    // A console socket deep in a runtime's state is reached through its
    // directory's descriptor (`warden_runtime::sockname`).
    let stream = warden_runtime::sockname::connect(
        path,
        nix::sys::socket::SockType::Stream,
        nix::sys::socket::SockFlag::SOCK_CLOEXEC,
    )
    .map_err(err)?;
    let name = b"/dev/ptmx";
    let iov = [IoSlice::new(name)];
    let fds = [master.as_raw_fd()];
    let cmsg = [ControlMessage::ScmRights(&fds)];
    sendmsg::<UnixAddr>(stream.as_raw_fd(), &iov, &cmsg, MsgFlags::empty(), None).map_err(err)?;
    Ok(())
}
