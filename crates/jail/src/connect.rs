//! Connections into a long-lived sandbox from outside it, made from inside:
//! a caller on the host (the daemon relaying a desktop's screen or its
//! browser's DevTools) asks the sandbox's init, over the spawn channel, for
//! a socket connected to a service that listens on the sandbox's own
//! loopback (or on a Unix socket in its file tree). The init makes the
//! socket in the sandbox's network namespace (a socket belongs to the
//! namespace it was created in) and starts the connection; the descriptor
//! goes back over the channel (SCM_RIGHTS) and on to the caller, so the
//! caller relays bytes without anything ever listening on the host.
//!
//! Only the sandbox's own loopback (127.0.0.0/8, ::1) may be named: any
//! other address would be a way out of the sandbox's network that the
//! egress proxy never sees, so it is refused before anything is opened.
//! The init's sockets are non-blocking: a TCP connection is started here
//! and completed by whoever waits for it (the supervisor), never by the
//! init, which must not block; a Unix socket connects at once or fails.

use nix::errno::Errno;
use nix::sys::socket::{
    connect, socket, AddressFamily, SockFlag, SockType, SockaddrIn, SockaddrIn6, UnixAddr,
};
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, OwnedFd};

/// What may be named is the protocol's rule (`Target::check`): served here.
pub use warden_protocol::connect::{Target, TargetError};

/// The init's side: a socket of the calling process's namespaces with the
/// connection to `target` started (TCP: 0 or EINPROGRESS, completed by the
/// caller, who waits for it to become writable and reads `SO_ERROR`) or
/// made (Unix). Answers an errno and, when it is 0, the socket.
pub(crate) fn serve(target: &Target, degraded: bool) -> (i32, Option<OwnedFd>) {
    if target.check().is_err() {
        return (libc::EINVAL, None);
    }
    // Without a network namespace of its own, the sandbox's loopback is
    // the host's: nothing of the host is reached this way.
    if degraded {
        return (libc::EOPNOTSUPP, None);
    }
    match start(target) {
        Ok(fd) => (0, Some(fd)),
        Err(e) => (e as i32, None),
    }
}

fn start(target: &Target) -> Result<OwnedFd, Errno> {
    let flags = SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK;
    let (started, fd) = match target {
        Target::Tcp {
            addr: SocketAddr::V4(a),
        } => {
            let fd = socket(AddressFamily::Inet, SockType::Stream, flags, None)?;
            (connect(fd.as_raw_fd(), &SockaddrIn::from(*a)), fd)
        }
        Target::Tcp {
            addr: SocketAddr::V6(a),
        } => {
            let fd = socket(AddressFamily::Inet6, SockType::Stream, flags, None)?;
            (connect(fd.as_raw_fd(), &SockaddrIn6::from(*a)), fd)
        }
        Target::Unix { path } => {
            let fd = socket(AddressFamily::Unix, SockType::Stream, flags, None)?;
            let addr = UnixAddr::new(path.as_str())?;
            (connect(fd.as_raw_fd(), &addr), fd)
        }
    };
    match started {
        Ok(()) => Ok(fd),
        // A TCP connection under way: the caller completes it.
        Err(Errno::EINPROGRESS) if matches!(target, Target::Tcp { .. }) => Ok(fd),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_init_refuses_what_the_protocol_refuses_whoever_asks() {
        let far = Target::Tcp {
            addr: "1.1.1.1:443".parse().unwrap(),
        };
        assert_eq!(serve(&far, false).0, libc::EINVAL);
        assert_eq!(serve(&Target::loopback(0), false).0, libc::EINVAL);
        assert_eq!(serve(&Target::loopback(1), true).0, libc::EOPNOTSUPP);
    }

    #[test]
    fn a_unix_socket_connects_at_once_and_a_missing_one_is_enoent() {
        let dir = std::env::temp_dir().join(format!("warden-connect-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("s.sock");
        let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let target = Target::Unix {
            path: path.to_string_lossy().into_owned(),
        };
        let (errno, fd) = serve(&target, false);
        assert_eq!(errno, 0);
        let mut stream = std::os::unix::net::UnixStream::from(fd.unwrap());
        let (mut accepted, _) = listener.accept().unwrap();
        use std::io::{Read, Write};
        accepted.write_all(b"hi").unwrap();
        stream.set_nonblocking(false).unwrap();
        let mut buf = [0u8; 2];
        stream.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"hi");
        std::fs::remove_file(&path).unwrap();
        assert_eq!(serve(&target, false).0, libc::ENOENT);
        let _ = std::fs::remove_dir(&dir);
    }
}
