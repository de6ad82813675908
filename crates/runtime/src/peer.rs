//! Who is at the other end of an owner-only Unix socket. A socket's file
//! mode is not enough: rootless, a sandbox's processes run as the owner's
//! UID, so any bind that shows the socket's path would let a sandbox act
//! as its owner. The owner drives warden from the host's user namespace
//! (the listener's own); a sandbox is in one of its own. The supervisor's
//! control socket and the daemon's socket ask the same question here.

use std::os::fd::AsFd;

/// Why a peer is refused.
#[derive(Debug, thiserror::Error)]
pub enum PeerError {
    #[error("the peer's credentials cannot be read")]
    Unknown(#[source] nix::Error),
    #[error("the peer runs as UID {0}, neither the owner nor root")]
    Stranger(u32),
    #[error("the peer (PID {0}) is in another user namespace: this socket serves its owner from the host, not from inside a sandbox")]
    OtherNamespace(i32),
}

/// Whether the peer of `conn` may act as the owner: the same UID as this
/// process (or root), from this process's own user namespace.
pub fn check(conn: &impl AsFd) -> Result<(), PeerError> {
    let me = nix::unistd::getuid().as_raw();
    let peer = nix::sys::socket::getsockopt(conn, nix::sys::socket::sockopt::PeerCredentials)
        .map_err(PeerError::Unknown)?;
    if peer.uid() != me && peer.uid() != 0 {
        return Err(PeerError::Stranger(peer.uid()));
    }
    // Root's sandboxes run as other UIDs (refused above); a rootless
    // sandbox is the owner's UID, told apart by its user namespace.
    if peer.uid() != 0 && !in_my_user_namespace(peer.pid()) {
        return Err(PeerError::OtherNamespace(peer.pid()));
    }
    Ok(())
}

/// Whether process `pid` (a peer, as this process's PID namespace sees it;
/// 0 when it cannot) is in this process's user namespace.
fn in_my_user_namespace(pid: i32) -> bool {
    use std::os::unix::fs::MetadataExt;
    let ns = |path: String| std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()));
    pid > 0
        && ns(format!("/proc/{pid}/ns/user"))
            .is_some_and(|theirs| Some(theirs) == ns("/proc/self/ns/user".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_of_the_owner_on_the_host_is_the_owner() {
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        assert!(check(&a).is_ok());
    }
}
