//! Places inside the sandbox's new root, found and made beneath it.
//!
//! While the root is assembled the host's root is still reachable at
//! `/oldroot`, and parts of the new root come from trees the sandbox or an
//! image wrote (a kept home, a volume, a prepared root). A path walk by
//! text below `/newroot` would follow a link planted there to any host
//! path, and a `mkdir -p` or `open(O_CREAT)` would then create a directory
//! or file on the host. Every place the assembly creates, opens or mounts
//! on inside the new root is therefore resolved here, from a descriptor of
//! the new root, with `openat2(RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS |
//! RESOLVE_NO_MAGICLINKS)`; missing components are made with `mkdirat` /
//! `openat(O_CREAT | O_EXCL | O_NOFOLLOW)` relative to their parent's
//! descriptor; a link on the way is refused, never followed and never taken
//! for "missing". Mounts then go onto the descriptor (its
//! `/proc/self/fd/N`), so no later walk can follow a link swapped in.

use super::{MountError, NEWROOT, OLDROOT};
use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;
use std::ffi::OsStr;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

/// What a mount point must be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Dir,
    File,
}

/// A place inside the new root, held by an `O_PATH` descriptor.
#[derive(Debug)]
pub(super) struct Spot {
    fd: OwnedFd,
    /// The place as the sandbox will name it, for messages.
    pub inside: PathBuf,
}

impl Spot {
    /// The path through which a mount call reaches exactly this place: the
    /// descriptor's magic link in the host's `/proc` (still at `/oldroot`).
    pub(super) fn at(&self) -> PathBuf {
        PathBuf::from(format!("{OLDROOT}/proc/self/fd/{}", self.fd.as_raw_fd()))
    }

    pub(super) fn fd(&self) -> &OwnedFd {
        &self.fd
    }

    /// The kind of file the place is.
    pub(super) fn file_type(&self) -> Option<FileType> {
        rustix::fs::fstat(&self.fd)
            .ok()
            .map(|st| FileType::from_raw_mode(st.st_mode))
    }
}

fn resolve() -> ResolveFlags {
    ResolveFlags::IN_ROOT | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS
}

/// The new root, held by one descriptor for the whole assembly: every
/// place is resolved from it.
///
/// It is opened once the new root's own mount (the root tmpfs, or the
/// prepared tree) is in place; nothing is mounted on the root itself after
/// that (no door lets a bind land on `/`, and [`Root::make`] refuses it), so
/// the descriptor stays the root the sandbox will enter. File systems
/// mounted below it since (`/tmp`, `/dev`, a bind) are crossed by each
/// lookup from it, as a lookup from a descriptor taken again would.
#[derive(Debug)]
pub(super) struct Root {
    fd: OwnedFd,
}

impl Root {
    /// The new root as it is now: its own mount must already be there.
    pub(super) fn open() -> Result<Root, MountError> {
        rustix::fs::open(
            NEWROOT,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
            Mode::empty(),
        )
        .map(|fd| Root { fd })
        .map_err(|e| MountError::MountPoint {
            path: PathBuf::from("/"),
            source: e.into(),
        })
    }

    /// The place at `inside` if it exists; `None` when a component is
    /// absent. A link anywhere on the way, the last name included, is
    /// refused.
    pub(super) fn find(&self, inside: &Path) -> Result<Option<Spot>, MountError> {
        let rel: PathBuf = names(inside)?.into_iter().collect();
        let rel = if rel.as_os_str().is_empty() {
            PathBuf::from(".")
        } else {
            rel
        };
        match open_in(&self.fd, &rel, OFlags::PATH) {
            Ok(fd) => Ok(Some(Spot {
                fd,
                inside: inside.to_path_buf(),
            })),
            Err(Errno::NOENT) => Ok(None),
            Err(e) => Err(refused(inside, e)),
        }
    }

    /// Whether the sandbox will see something at `inside` (links followed
    /// as the sandbox's own lookups follow them: within the new root).
    pub(super) fn seen(&self, inside: &Path) -> bool {
        let Ok(rel) = names(inside).map(|n| n.into_iter().collect::<PathBuf>()) else {
            return false;
        };
        rustix::fs::openat2(
            &self.fd,
            &rel,
            OFlags::PATH | OFlags::CLOEXEC,
            Mode::empty(),
            ResolveFlags::IN_ROOT | ResolveFlags::NO_MAGICLINKS,
        )
        .is_ok()
    }

    /// The place at `inside`, which must exist (a mount made on it just
    /// now: found again, the lookup lands on the new mount's root).
    pub(super) fn again(&self, inside: &Path) -> Result<Spot, MountError> {
        self.find(inside)?.ok_or_else(|| MountError::MountPoint {
            path: inside.to_path_buf(),
            source: std::io::Error::from(std::io::ErrorKind::NotFound),
        })
    }

    /// What the last name of `inside` is, not followed (a link says so),
    /// with its directory resolved as [`Root::find`] does; `None` when
    /// absent.
    pub(super) fn entry(&self, inside: &Path) -> Result<Option<FileType>, MountError> {
        let mut all = names(inside)?;
        let Some(last) = all.pop() else {
            return Ok(Some(FileType::Directory));
        };
        let parent: PathBuf = std::iter::once(OsStr::new("/")).chain(all).collect();
        let Some(dir) = self.find(&parent)? else {
            return Ok(None);
        };
        match rustix::fs::statat(dir.fd(), last, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => Ok(Some(FileType::from_raw_mode(st.st_mode))),
            Err(Errno::NOENT) => Ok(None),
            Err(e) => Err(refused(inside, e)),
        }
    }

    /// The regular file at `inside`, read (never through a link); `None`
    /// when absent or not a regular file.
    pub(super) fn read(&self, inside: &Path) -> Result<Option<Vec<u8>>, MountError> {
        if self.entry(inside)? != Some(FileType::RegularFile) {
            return Ok(None);
        }
        let rel: PathBuf = names(inside)?.into_iter().collect();
        let fd = open_in(&self.fd, &rel, OFlags::RDONLY).map_err(|e| refused(inside, e))?;
        let mut out = Vec::new();
        std::io::Read::read_to_end(&mut std::fs::File::from(fd), &mut out).map_err(|source| {
            MountError::Create {
                path: inside.to_path_buf(),
                source,
            }
        })?;
        Ok(Some(out))
    }

    /// The place at `inside`, made if missing: each absent directory with
    /// `mkdirat` in its parent, the last name a directory or an empty file
    /// as `kind` says. An existing place is taken as it is (its kind is the
    /// mount's business); a link on the way is refused; the root itself is
    /// never a place to mount on (see [`Root`]).
    pub(super) fn make(&self, inside: &Path, kind: Kind) -> Result<Spot, MountError> {
        let all = names(inside)?;
        if all.is_empty() {
            return Err(MountError::MountPoint {
                path: inside.to_path_buf(),
                source: std::io::Error::other("the sandbox's root itself is not a mount point"),
            });
        }
        if let Some(spot) = self.find(inside)? {
            return Ok(spot);
        }
        // The directory being walked: the root (borrowed) until the first
        // name is opened.
        let mut held: Option<OwnedFd> = None;
        for (i, name) in all.iter().enumerate() {
            let dir = held.as_ref().map_or(self.fd.as_fd(), |fd| fd.as_fd());
            let last = i + 1 == all.len();
            let step = Path::new(name);
            if last && kind == Kind::File {
                match rustix::fs::openat(
                    dir,
                    step,
                    OFlags::CREATE
                        | OFlags::EXCL
                        | OFlags::NOFOLLOW
                        | OFlags::WRONLY
                        | OFlags::CLOEXEC
                        | OFlags::NOCTTY,
                    Mode::from_raw_mode(0o644),
                ) {
                    Ok(_) | Err(Errno::EXIST) => {}
                    Err(e) => return Err(refused(inside, e)),
                }
            } else {
                // The last name is known to be absent (the whole path was
                // not found, and every directory before it is open): it is
                // made without looking for it once more. One made since
                // is taken as it is, through `open_in` below.
                if !last {
                    match open_in(dir, step, OFlags::PATH | OFlags::DIRECTORY) {
                        Ok(next) => {
                            held = Some(next);
                            continue;
                        }
                        Err(Errno::NOENT) => {}
                        Err(e) => return Err(refused(inside, e)),
                    }
                }
                match rustix::fs::mkdirat(dir, step, Mode::from_raw_mode(0o755)) {
                    Ok(()) | Err(Errno::EXIST) => {}
                    Err(e) => return Err(refused(inside, e)),
                }
            }
            let flags = if last && kind == Kind::File {
                OFlags::PATH
            } else {
                OFlags::PATH | OFlags::DIRECTORY
            };
            held = Some(open_in(dir, step, flags).map_err(|e| refused(inside, e))?);
        }
        let fd = held.ok_or_else(|| MountError::MountPoint {
            path: inside.to_path_buf(),
            source: std::io::Error::from(std::io::ErrorKind::NotFound),
        })?;
        Ok(Spot {
            fd,
            inside: inside.to_path_buf(),
        })
    }

    /// The text of the link at `inside` (its directory resolved as
    /// [`Root::find`] does).
    pub(super) fn read_link(&self, inside: &Path) -> Result<PathBuf, MountError> {
        let mut all = names(inside)?;
        let last = all.pop().unwrap_or(OsStr::new("."));
        let parent: PathBuf = std::iter::once(OsStr::new("/")).chain(all).collect();
        let dir = self.again(&parent)?;
        let text =
            rustix::fs::readlinkat(dir.fd(), last, Vec::new()).map_err(|e| refused(inside, e))?;
        Ok(PathBuf::from(
            <std::ffi::OsString as std::os::unix::ffi::OsStringExt>::from_vec(text.into_bytes()),
        ))
    }
}

/// The names of `inside` (absolute), refusing `..`.
fn names(inside: &Path) -> Result<Vec<&OsStr>, MountError> {
    let mut out = Vec::new();
    for c in inside.components() {
        match c {
            Component::RootDir | Component::CurDir => {}
            Component::Normal(n) => out.push(n),
            Component::ParentDir | Component::Prefix(_) => {
                return Err(MountError::MountPoint {
                    path: inside.to_path_buf(),
                    source: std::io::Error::other("the path holds `..`"),
                })
            }
        }
    }
    Ok(out)
}

fn open_in(dir: impl AsFd, name: &Path, flags: OFlags) -> rustix::io::Result<OwnedFd> {
    // openat2 refuses O_NOCTTY beside O_PATH (EINVAL).
    let extra = if flags.contains(OFlags::PATH) {
        OFlags::CLOEXEC
    } else {
        OFlags::CLOEXEC | OFlags::NOCTTY
    };
    rustix::fs::openat2(dir, name, flags | extra, Mode::empty(), resolve())
}

fn refused(inside: &Path, e: Errno) -> MountError {
    if e == Errno::LOOP || e == Errno::XDEV {
        return MountError::Link {
            path: inside.to_path_buf(),
        };
    }
    MountError::MountPoint {
        path: inside.to_path_buf(),
        source: e.into(),
    }
}

/// The absolute place a link's text names when followed inside the new
/// root from the directory `from`: `..` stops at the root, as the kernel's
/// lookup in the sandbox (and `RESOLVE_IN_ROOT`) does.
pub(super) fn link_target(from: &Path, text: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    let start = if text.is_absolute() {
        Path::new("/")
    } else {
        from
    };
    for c in start.components().chain(text.components()) {
        match c {
            Component::Normal(n) => out.push(n),
            Component::ParentDir => {
                out.pop();
            }
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_links_dot_dots_stop_at_the_sandboxs_root() {
        let t = |from: &str, text: &str| link_target(Path::new(from), Path::new(text));
        assert_eq!(
            t("/etc", "../../../../oldroot/tmp/x"),
            Path::new("/oldroot/tmp/x")
        );
        assert_eq!(
            t("/etc", "/run/systemd/resolve/stub-resolv.conf"),
            Path::new("/run/systemd/resolve/stub-resolv.conf")
        );
        assert_eq!(t("/etc", "resolv/real"), Path::new("/etc/resolv/real"));
    }
}
