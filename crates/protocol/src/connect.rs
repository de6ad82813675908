//! Connections into a long-lived sandbox from outside it, made from inside:
//! the services a caller on the host (the daemon relaying a desktop's screen
//! or its browser's DevTools) may ask to be connected to. The sandbox's
//! init opens the socket in the sandbox's namespaces (`warden_jail::connect`
//! serves it); what may be named is decided here, once, for every side.
//!
//! Only the sandbox's own loopback (127.0.0.0/8, ::1) may be named: any
//! other address would be a way out of the sandbox's network that the
//! egress proxy never sees, so it is refused before anything is opened.

use serde::{Deserialize, Serialize};
use std::net::SocketAddr;

/// Longest Unix socket path the kernel takes (`sun_path` less its NUL).
pub const MAX_UNIX_PATH: usize = 107;

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
    }

    #[test]
    fn targets_are_tagged_by_kind_on_the_wire() {
        let unix = Target::Unix {
            path: "/run/x.sock".into(),
        };
        assert_eq!(
            serde_json::to_string(&unix).unwrap(),
            r#"{"kind":"unix","path":"/run/x.sock"}"#
        );
        assert_eq!(unix.to_string(), "unix:/run/x.sock");
    }
}
