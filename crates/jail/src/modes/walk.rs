//! Finding the file a path names, as the calling process would: from its
//! root for an absolute path, from its working directory or the directory
//! descriptor it passed otherwise, one name at a time with `O_NOFOLLOW`, a
//! link's text followed here (an absolute one from the caller's root, so a
//! link never leads to the supervisor's own tree), and `..` never above
//! the caller's root. What comes out is a descriptor: the change is made on
//! it, never on a path the sandbox could swap in the meantime.
//!
//! `/proc` links are never followed by their text (they name objects, not
//! paths): the caller's own descriptors (`/proc/self/fd/N`, which libc's
//! `lchmod` passes to `chmod`) are taken from it directly; any other link
//! under `/proc` is refused.

use super::caller::Caller;
use rustix::fs::{fstat, fstatfs, openat, readlinkat, statx, AtFlags, Mode, OFlags, StatxFlags};
use rustix::io::Errno;
use std::collections::VecDeque;
use std::os::fd::{AsFd, OwnedFd};

/// How many links one resolution follows, as the kernel's limit.
const MAX_LINKS: usize = 40;
/// `PROC_SUPER_MAGIC`.
const PROC_MAGIC: i64 = 0x9fa0;
/// The inode of `/proc`'s root directory.
const PROC_ROOT_INO: u64 = 1;

/// The directory a relative path starts from.
pub(super) enum Base {
    /// `AT_FDCWD`.
    Cwd,
    /// The caller's descriptor with this number.
    Fd(u64),
}

/// What a path call names.
pub(super) struct Named<'a> {
    pub base: Base,
    pub path: &'a [u8],
    /// Follow a link as the last name (no `AT_SYMLINK_NOFOLLOW`).
    pub follow: bool,
    /// `AT_EMPTY_PATH`: an empty path names the base itself.
    pub empty_is_base: bool,
}

/// The file `named` names for `caller`.
pub(super) fn resolve(caller: &Caller, named: &Named<'_>) -> Result<OwnedFd, Errno> {
    let root = caller.root()?;
    let base = || match named.base {
        Base::Cwd => caller.cwd(),
        Base::Fd(fd) => caller.take_fd(fd),
    };
    if named.path.is_empty() {
        return if named.empty_is_base {
            base()
        } else {
            Err(Errno::NOENT)
        };
    }
    let mut cur = if named.path.starts_with(b"/") {
        dup(&root)?
    } else {
        base()?
    };
    let trailing_slash = named.path.ends_with(b"/");
    let follow = named.follow || trailing_slash;
    let mut pending = names(named.path);
    let mut links = 0;
    while let Some(name) = pending.pop_front() {
        let last = pending.is_empty();
        if name == b"." {
            continue;
        }
        if name == b".." {
            if !same_file(&cur, &root)? {
                cur = openat(&cur, "..", dir_flags(), Mode::empty())?;
            }
            continue;
        }
        if is_proc_root(&cur)? {
            if let Some(fd) = own_descriptor(caller, &name, &mut pending, follow)? {
                return Ok(fd);
            }
        }
        let next = openat(&cur, name.as_slice(), path_flags(), Mode::empty())?;
        let is_link = fstat(&next)?.st_mode & libc::S_IFMT == libc::S_IFLNK;
        if is_link && (!last || follow) {
            if fstatfs(&next)?.f_type as i64 == PROC_MAGIC {
                return Err(Errno::PERM);
            }
            links += 1;
            if links > MAX_LINKS {
                return Err(Errno::LOOP);
            }
            let target = readlinkat(&next, "", Vec::new())?.into_bytes();
            if target.is_empty() {
                return Err(Errno::NOENT);
            }
            if target.starts_with(b"/") {
                cur = dup(&root)?;
            }
            for n in names(&target).into_iter().rev() {
                pending.push_front(n);
            }
            continue;
        }
        cur = next;
    }
    if trailing_slash && fstat(&cur)?.st_mode & libc::S_IFMT != libc::S_IFDIR {
        return Err(Errno::NOTDIR);
    }
    Ok(cur)
}

/// `/proc/<self|thread-self|own id>/fd/N` (or `.../task/<own tid>/fd/N`)
/// from `/proc`'s root: the caller's descriptor N. Another name under
/// `/proc` is walked as any other (and its links refused); `self` and
/// `thread-self` name the supervisor there, so their other uses are
/// refused.
fn own_descriptor(
    caller: &Caller,
    name: &[u8],
    pending: &mut VecDeque<Vec<u8>>,
    follow: bool,
) -> Result<Option<OwnedFd>, Errno> {
    let tgid = caller.ns_tgid.to_string();
    let tid = caller.ns_tid.to_string();
    let rest: Vec<&[u8]> = pending.iter().map(Vec::as_slice).collect();
    let fd = match (name, rest.as_slice()) {
        (b"self", [b"fd", n]) | (b"thread-self", [b"fd", n]) => Some(*n),
        (b"self", [b"task", t, b"fd", n]) if *t == tid.as_bytes() => Some(*n),
        (id, [b"fd", n]) if id == tgid.as_bytes() => Some(*n),
        (id, [b"task", t, b"fd", n]) if id == tgid.as_bytes() && *t == tid.as_bytes() => Some(*n),
        (b"self" | b"thread-self", _) => return Err(Errno::PERM),
        _ => None,
    };
    let Some(n) = fd else {
        return Ok(None);
    };
    if !follow {
        // The link itself: a link's mode cannot be changed.
        return Err(Errno::OPNOTSUPP);
    }
    let n: u64 = std::str::from_utf8(n)
        .ok()
        .filter(|s| s.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|s| s.parse().ok())
        .ok_or(Errno::NOENT)?;
    pending.clear();
    caller.take_fd(n).map(Some).map_err(|e| match e {
        Errno::BADF => Errno::NOENT,
        other => other,
    })
}

fn names(path: &[u8]) -> VecDeque<Vec<u8>> {
    path.split(|b| *b == b'/')
        .filter(|n| !n.is_empty())
        .map(<[u8]>::to_vec)
        .collect()
}

fn path_flags() -> OFlags {
    OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC
}

fn dir_flags() -> OFlags {
    OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC
}

fn dup(fd: &OwnedFd) -> Result<OwnedFd, Errno> {
    rustix::io::fcntl_dupfd_cloexec(fd, 0)
}

/// The same directory on the same mount.
fn same_file(a: &OwnedFd, b: &OwnedFd) -> Result<bool, Errno> {
    let id = |fd: &OwnedFd| -> Result<(u64, u32, u32, u64), Errno> {
        let s = statx(
            fd.as_fd(),
            "",
            AtFlags::EMPTY_PATH,
            StatxFlags::INO | StatxFlags::MNT_ID,
        )?;
        Ok((s.stx_ino, s.stx_dev_major, s.stx_dev_minor, s.stx_mnt_id))
    };
    Ok(id(a)? == id(b)?)
}

fn is_proc_root(fd: &OwnedFd) -> Result<bool, Errno> {
    Ok(fstatfs(fd)?.f_type as i64 == PROC_MAGIC && fstat(fd)?.st_ino == PROC_ROOT_INO)
}
