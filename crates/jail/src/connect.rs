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
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, OwnedFd};

/// Longest Unix socket path the kernel takes (`sun_path` less its NUL).
const MAX_UNIX_PATH: usize = 107;

/// Where inside the sandbox to connect.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Target {
    /// A TCP port on the sandbox's own loopback.
    Tcp { addr: SocketAddr },
    /// A Unix stream socket at an absolute path of the sandbox's file tree.
    Unix { path: String },
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::Tcp { addr } => write!(f, "{addr}"),
            Target::Unix { path } => write!(f, "unix:{path}"),
        }
    }
}

/// Why a target is refused before anything is opened.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TargetError {
    #[error("{0} is not on the sandbox's own loopback: only 127.0.0.0/8 and ::1 inside the sandbox can be connected to this way (everything else goes through its egress proxy)")]
    NotLoopback(SocketAddr),
    #[error("port 0 names no service: give the port the service listens on inside the sandbox")]
    PortZero,
    #[error(
        "the Unix socket path {0:?} is not absolute: give the path as the sandbox sees it, from /"
    )]
    Relative(String),
    #[error("the Unix socket path is longer than {MAX_UNIX_PATH} bytes or contains a NUL byte")]
    BadPath,
}

impl Target {
    /// The sandbox's own loopback at `port`.
    pub fn loopback(port: u16) -> Target {
        Target::Tcp {
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
        }
    }

    /// Whether this target may be connected to (see the module's doc).
    pub fn check(&self) -> Result<(), TargetError> {
        match self {
            Target::Tcp { addr } if !addr.ip().is_loopback() => {
                Err(TargetError::NotLoopback(*addr))
            }
            Target::Tcp { addr } if addr.port() == 0 => Err(TargetError::PortZero),
            Target::Tcp { .. } => Ok(()),
            Target::Unix { path } if !path.starts_with('/') => {
                Err(TargetError::Relative(path.clone()))
            }
            Target::Unix { path } if path.len() > MAX_UNIX_PATH || path.contains('\0') => {
                Err(TargetError::BadPath)
            }
            Target::Unix { .. } => Ok(()),
        }
    }
}

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
    fn only_the_sandboxs_own_loopback_is_a_target() {
        assert!(Target::loopback(5900).check().is_ok());
        let v6 = Target::Tcp {
            addr: "[::1]:9222".parse().unwrap(),
        };
        assert!(v6.check().is_ok());
        let other = Target::Tcp {
            addr: "127.3.4.5:80".parse().unwrap(),
        };
        assert!(other.check().is_ok(), "127.0.0.0/8 is loopback");
        for refused in [
            "10.255.255.1:80",
            "0.0.0.0:80",
            "192.168.1.1:5900",
            "[::]:80",
        ] {
            let t = Target::Tcp {
                addr: refused.parse().unwrap(),
            };
            assert!(
                matches!(t.check(), Err(TargetError::NotLoopback(_))),
                "{refused}"
            );
        }
        assert_eq!(Target::loopback(0).check(), Err(TargetError::PortZero));
        let relative = Target::Unix {
            path: "run/x.sock".into(),
        };
        assert!(matches!(relative.check(), Err(TargetError::Relative(_))));
        let long = Target::Unix {
            path: format!("/{}", "a".repeat(200)),
        };
        assert_eq!(long.check(), Err(TargetError::BadPath));
        // The init refuses them too, whoever asks.
        let far = Target::Tcp {
            addr: "1.1.1.1:443".parse().unwrap(),
        };
        assert_eq!(serve(&far, false).0, libc::EINVAL);
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
