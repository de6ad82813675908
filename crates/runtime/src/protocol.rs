//! The control protocol of a sandbox's supervisor, on the wire: one
//! message of [`warden_protocol::control`] (what a caller asks, what the
//! supervisor answers) per packet, with its descriptors.
//!
//! The socket is a Unix `SOCK_SEQPACKET` socket, owner-only, in the
//! sandbox's state directory: the kernel frames each message (one JSON
//! value per packet) and carries descriptors with it (SCM_RIGHTS), so a
//! local caller hands its own terminal or pipes to the process it starts.
//! Every conversation opens with [`Request::Hello`]; a supervisor refuses a
//! caller of another [`VERSION`].

use serde::{Deserialize, Serialize};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd, RawFd};

/// The messages are the protocol's (`warden-protocol`), here under the
/// names every caller of the runtime already uses.
pub use warden_protocol::control::*;

/// Why a message could not be exchanged.
#[derive(Debug, thiserror::Error)]
pub enum ProtocolError {
    #[error("cannot send to the supervisor's control socket")]
    Send(#[source] nix::Error),
    #[error("cannot read from the control socket")]
    Receive(#[source] nix::Error),
    #[error("the other end closed the control socket")]
    Closed,
    #[error("a malformed message on the control socket")]
    Malformed(#[source] serde_json::Error),
    #[error("the message is too large ({0} bytes, at most {MAX_MESSAGE})")]
    TooLarge(usize),
}

/// Send one message, with descriptors.
pub fn send<T: Serialize>(
    sock: BorrowedFd<'_>,
    msg: &T,
    fds: &[RawFd],
) -> Result<(), ProtocolError> {
    let bytes = serde_json::to_vec(msg).map_err(ProtocolError::Malformed)?;
    if bytes.len() > MAX_MESSAGE {
        return Err(ProtocolError::TooLarge(bytes.len()));
    }
    loop {
        match warden_jail::fdpass::send(sock, &bytes, fds) {
            Ok(_) => return Ok(()),
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(ProtocolError::Send(e)),
        }
    }
}

/// Receive one message and the descriptors that came with it.
pub fn receive<T: for<'de> Deserialize<'de>>(
    sock: impl AsFd,
) -> Result<(T, Vec<OwnedFd>), ProtocolError> {
    let mut buf = vec![0u8; MAX_MESSAGE];
    loop {
        match warden_jail::fdpass::recv(sock.as_fd(), &mut buf) {
            Ok((0, _)) => return Err(ProtocolError::Closed),
            Ok((n, fds)) => {
                let msg = serde_json::from_slice(&buf[..n]).map_err(ProtocolError::Malformed)?;
                return Ok((msg, fds));
            }
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(ProtocolError::Receive(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptors_travel_with_their_message() {
        use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};
        use std::os::fd::AsRawFd;
        let (a, b) = socketpair(
            AddressFamily::Unix,
            SockType::SeqPacket,
            None,
            SockFlag::SOCK_CLOEXEC,
        )
        .unwrap();
        let (r, w) = nix::unistd::pipe().unwrap();
        send(a.as_fd(), &Request::Status, &[w.as_raw_fd()]).unwrap();
        drop(w);
        let (msg, fds): (Request, _) = receive(&b).unwrap();
        assert_eq!(msg, Request::Status);
        assert_eq!(fds.len(), 1);
        nix::unistd::write(&fds[0], b"x").unwrap();
        let mut buf = [0u8; 1];
        assert_eq!(nix::unistd::read(&r, &mut buf).unwrap(), 1);
    }
}
