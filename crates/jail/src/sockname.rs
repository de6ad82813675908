//! Unix sockets named by a path of any length: the one place warden binds
//! or connects to a socket in its state (a sandbox's control socket, the
//! daemon's socket, virtiofsd's, an OCI console socket).
//!
//! A socket's address holds its path in `sun_path`, 108 bytes with the
//! NUL: a state directory of ~90 characters (a pytest-xdist worker's
//! temporary directory, a long home) made every start fail with
//! `ENAMETOOLONG`. A path that fits is used as it is. A longer one is
//! reached through its directory: the directory is opened here
//! (`O_PATH | O_DIRECTORY`, close-on-exec) and the socket is named
//! `/proc/self/fd/N/NAME`, which the kernel resolves through descriptor
//! `N`'s own directory (a magic link, not a name looked up again).
//!
//! Why that is safe: `N` is a descriptor this process opened a moment
//! before, from the same path the caller would have used whole; nothing
//! else can change what `N` refers to in this process (a sandbox cannot
//! reach warden's descriptor table), so renaming or swapping a directory
//! on the path afterwards does not move the socket elsewhere, and the
//! directory is the one that path named when it was opened, exactly as a
//! whole-path `bind` would have found. `/proc/self` is this process's own
//! (warden's own processes run with the host's `/proc`; a caller in a
//! process without one gets `ENOENT`, never another socket). The name
//! within the directory must itself fit: warden's names are a few bytes.
//!
//! A program that takes a socket's path (rather than a descriptor) can be
//! given [`SocketName::path`] while the [`SocketName`] is alive in the
//! process that resolves it (the short form names this process's
//! descriptor, so it means nothing to another process).

use nix::errno::Errno;
use nix::fcntl::{open, OFlag};
use nix::sys::socket::{bind as bind_fd, connect as connect_fd, socket};
use nix::sys::socket::{AddressFamily, SockFlag, SockType, UnixAddr};
use nix::sys::stat::Mode;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

/// Bytes of `sun_path` a path may use (the kernel's 108 less the NUL).
pub const MAX_PATH: usize = 107;

/// A Unix socket's name that fits in `sun_path`, whatever the length of
/// the directory it is in.
#[derive(Debug)]
pub struct SocketName {
    /// The directory the short form goes through (none: the path fits).
    dir: Option<OwnedFd>,
    short: PathBuf,
}

impl SocketName {
    /// The name of the socket at `path`: `path` itself when it fits, else
    /// `/proc/self/fd/N/NAME` through its directory, opened now.
    /// `ENAMETOOLONG` only when the last component alone cannot fit.
    pub fn new(path: &Path) -> Result<SocketName, Errno> {
        if path.as_os_str().len() <= MAX_PATH {
            return Ok(SocketName {
                dir: None,
                short: path.to_path_buf(),
            });
        }
        let name = path.file_name().ok_or(Errno::EINVAL)?;
        let parent = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        let dir = open(
            parent,
            OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )?;
        let mut short = PathBuf::from(format!("/proc/self/fd/{}", dir.as_raw_fd()));
        short.push(name);
        if short.as_os_str().len() > MAX_PATH {
            return Err(Errno::ENAMETOOLONG);
        }
        Ok(SocketName {
            dir: Some(dir),
            short,
        })
    }

    /// The path to hand to `bind`, `connect` or a program of this
    /// process's, valid while `self` is.
    pub fn path(&self) -> &Path {
        &self.short
    }

    /// Does the name go through a directory's descriptor?
    pub fn is_short_form(&self) -> bool {
        self.dir.is_some()
    }

    fn addr(&self) -> Result<UnixAddr, Errno> {
        UnixAddr::new(self.short.as_path())
    }
}

/// A new Unix socket of type `ty` (`flags` such as `SOCK_CLOEXEC`) bound
/// to `path`, of any length. The caller listens on it, and chooses the
/// umask the socket is made under.
pub fn bind(path: &Path, ty: SockType, flags: SockFlag) -> Result<OwnedFd, Errno> {
    let name = SocketName::new(path)?;
    let fd = socket(AddressFamily::Unix, ty, flags, None)?;
    bind_fd(fd.as_raw_fd(), &name.addr()?)?;
    Ok(fd)
}

/// A new Unix socket of type `ty` connected to the one at `path`, of any
/// length.
pub fn connect(path: &Path, ty: SockType, flags: SockFlag) -> Result<OwnedFd, Errno> {
    let name = SocketName::new(path)?;
    let fd = socket(AddressFamily::Unix, ty, flags, None)?;
    connect_fd(fd.as_raw_fd(), &name.addr()?)?;
    Ok(fd)
}

#[cfg(test)]
mod tests {
    // The tests remove their own temporary directories with std's removal.
    #![allow(clippy::unwrap_used, clippy::disallowed_methods)]
    use super::*;
    use std::io::{Read, Write};

    /// A directory whose path is over 200 bytes long.
    fn deep() -> (tempfile::TempDir, PathBuf) {
        let top = tempfile::tempdir().unwrap();
        let mut dir = top.path().to_path_buf();
        while dir.as_os_str().len() < 220 {
            dir.push("a-directory-name-of-some-length");
        }
        std::fs::create_dir_all(&dir).unwrap();
        (top, dir)
    }

    #[test]
    fn a_socket_under_a_directory_past_sun_path_binds_and_connects() {
        let (_top, dir) = deep();
        let path = dir.join("control.sock");
        assert!(path.as_os_str().len() > 200);
        let listener = bind(&path, SockType::Stream, SockFlag::SOCK_CLOEXEC).unwrap();
        nix::sys::socket::listen(&listener, nix::sys::socket::Backlog::new(1).unwrap()).unwrap();
        // The socket is in the directory under its own name.
        assert!(path.exists());
        let client = connect(&path, SockType::Stream, SockFlag::SOCK_CLOEXEC).unwrap();
        let server = crate::fdpass::accept(std::os::fd::AsFd::as_fd(&listener)).unwrap();
        let mut client = std::os::unix::net::UnixStream::from(client);
        client.write_all(b"hello").unwrap();
        let mut server = std::os::unix::net::UnixStream::from(server);
        let mut got = [0u8; 5];
        server.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"hello");
    }

    #[test]
    fn a_path_that_fits_is_used_as_it_is() {
        let name = SocketName::new(Path::new("/run/warden/control.sock")).unwrap();
        assert_eq!(name.path(), Path::new("/run/warden/control.sock"));
        assert!(!name.is_short_form());
    }

    #[test]
    fn a_long_path_becomes_a_short_one_through_its_directory() {
        let (_top, dir) = deep();
        let name = SocketName::new(&dir.join("daemon.sock")).unwrap();
        assert!(name.is_short_form());
        assert!(name.path().as_os_str().len() <= MAX_PATH);
        assert!(name.path().starts_with("/proc/self/fd/"));
        assert!(name.path().ends_with("daemon.sock"));
        // The short form names the same directory.
        let through = std::fs::canonicalize(name.path().parent().unwrap()).unwrap();
        assert_eq!(through, std::fs::canonicalize(&dir).unwrap());
    }

    #[test]
    fn the_directory_swapped_after_the_name_is_made_does_not_move_the_socket() {
        let (top, dir) = deep();
        let name = SocketName::new(&dir.join("s.sock")).unwrap();
        // Whoever renames the directory and puts another in its place
        // does not get the socket: the name goes through the one opened.
        let moved = top.path().join("moved");
        std::fs::rename(top.path().join("a-directory-name-of-some-length"), &moved).unwrap();
        std::fs::create_dir_all(&dir).unwrap();
        let fd = socket(
            AddressFamily::Unix,
            SockType::Stream,
            SockFlag::SOCK_CLOEXEC,
            None,
        )
        .unwrap();
        bind_fd(fd.as_raw_fd(), &name.addr().unwrap()).unwrap();
        assert!(!dir.join("s.sock").exists());
        let under_moved: PathBuf = {
            let rest = dir
                .strip_prefix(top.path().join("a-directory-name-of-some-length"))
                .unwrap();
            moved.join(rest).join("s.sock")
        };
        assert!(under_moved.exists());
    }

    #[test]
    fn a_missing_socket_under_a_long_path_is_enoent_not_enametoolong() {
        let (_top, dir) = deep();
        let e = connect(
            &dir.join("none.sock"),
            SockType::SeqPacket,
            SockFlag::SOCK_CLOEXEC,
        );
        assert_eq!(e.err(), Some(Errno::ENOENT));
    }
}
