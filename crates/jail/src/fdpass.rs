//! Messages with descriptors over Unix sockets (SCM_RIGHTS): how a caller
//! hands its terminal or pipes to a supervisor, and a supervisor hands them
//! to the sandbox's init, without a byte of the stream being copied.

use nix::sys::socket::{recvmsg, sendmsg, ControlMessage, ControlMessageOwned, MsgFlags};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

/// Descriptors accepted with one message at most; more are closed.
pub const MAX_FDS: usize = 4;

/// Send `data` (at least one byte) with `fds` attached.
pub fn send(sock: BorrowedFd<'_>, data: &[u8], fds: &[RawFd]) -> nix::Result<usize> {
    let iov = [std::io::IoSlice::new(data)];
    if fds.is_empty() {
        return sendmsg::<()>(sock.as_raw_fd(), &iov, &[], MsgFlags::MSG_NOSIGNAL, None);
    }
    let cmsg = [ControlMessage::ScmRights(fds)];
    sendmsg::<()>(sock.as_raw_fd(), &iov, &cmsg, MsgFlags::MSG_NOSIGNAL, None)
}

/// Receive into `buf`; returns how many bytes came (0: the other end
/// closed) and the descriptors attached, each owned (close-on-exec).
/// Descriptors beyond [`MAX_FDS`] are closed.
pub fn recv(sock: BorrowedFd<'_>, buf: &mut [u8]) -> nix::Result<(usize, Vec<OwnedFd>)> {
    let mut iov = [std::io::IoSliceMut::new(buf)];
    let mut space = nix::cmsg_space!([RawFd; MAX_FDS]);
    let msg = recvmsg::<()>(
        sock.as_raw_fd(),
        &mut iov,
        Some(&mut space),
        MsgFlags::MSG_CMSG_CLOEXEC,
    )?;
    let mut fds = Vec::new();
    for c in msg.cmsgs()? {
        if let ControlMessageOwned::ScmRights(raw) = c {
            for fd in raw {
                // SAFETY: the kernel just installed these descriptors in
                // this process for this message; nothing else owns them.
                fds.push(unsafe { OwnedFd::from_raw_fd(fd) });
            }
        }
    }
    fds.truncate(MAX_FDS);
    Ok((msg.bytes, fds))
}

/// Accept a connection on a listening Unix socket (close-on-exec).
pub fn accept(listener: BorrowedFd<'_>) -> nix::Result<OwnedFd> {
    let fd = nix::sys::socket::accept4(
        listener.as_raw_fd(),
        nix::sys::socket::SockFlag::SOCK_CLOEXEC,
    )?;
    // SAFETY: accept4 just returned this descriptor; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}
