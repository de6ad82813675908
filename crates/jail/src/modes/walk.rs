//! Finding the file a path names, as the calling process would: from its
//! root for an absolute path, from its working directory or the directory
//! descriptor it passed otherwise, one name at a time with `O_NOFOLLOW`, a
//! link's text followed here (an absolute one from the caller's root, so a
//! link never leads to the supervisor's own tree), and `..` never above
//! the caller's root. What comes out is a descriptor: the change is made on
//! it, never on a path the sandbox could swap in the meantime.
//!
//! `/proc` links are never followed by their text (they name objects, not
//! paths): the caller's own descriptors are taken from it directly
//! (`pidfd_getfd`), and the walk goes on beneath the one taken, as the
//! kernel's does. They are named so as `/proc/self/fd/N` (libc's `lchmod`
//! passes it to `chmod`; QEMU's 9p server reaches its files' ACLs and
//! extended attributes as `/proc/self/fd/N/name`) or as a name `N` in the
//! caller's own `fd` directory it holds open (virtiofsd's
//! `fchmodat(proc_self_fd, "N")`). Any other link under `/proc` (another
//! process's descriptors, `/proc/self/root`, `/proc/self/cwd`) is refused.

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
        let on_proc = fstatfs(&cur)?.f_type as i64 == PROC_MAGIC;
        let own = if !on_proc {
            None
        } else if fstat(&cur)?.st_ino == PROC_ROOT_INO {
            own_descriptor(caller, &name, &mut pending)?
        } else if own_fd_dir(caller, &cur)? {
            Some(name.clone())
        } else {
            None
        };
        if let Some(n) = own {
            if pending.is_empty() && !follow {
                // The link itself: a link's mode cannot be changed.
                return Err(Errno::OPNOTSUPP);
            }
            cur = take(caller, &n)?;
            continue;
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
/// from `/proc`'s root, followed or not by names beneath: the caller's
/// descriptor N (returned; `pending` is left with the names beneath).
/// Another name under `/proc` is walked as any other (and its links
/// refused); `self` and `thread-self` name the supervisor there, so their
/// other uses are refused.
fn own_descriptor(
    caller: &Caller,
    name: &[u8],
    pending: &mut VecDeque<Vec<u8>>,
) -> Result<Option<Vec<u8>>, Errno> {
    let tgid = caller.ns_tgid.to_string();
    let tid = caller.ns_tid.to_string();
    let rest: Vec<&[u8]> = pending.iter().map(Vec::as_slice).collect();
    let at = match (name, rest.as_slice()) {
        (b"self" | b"thread-self", [b"fd", _, ..]) => 1,
        (b"self", [b"task", t, b"fd", _, ..]) if *t == tid.as_bytes() => 3,
        (id, [b"fd", _, ..]) if id == tgid.as_bytes() => 1,
        (id, [b"task", t, b"fd", _, ..]) if id == tgid.as_bytes() && *t == tid.as_bytes() => 3,
        (b"self" | b"thread-self", _) => return Err(Errno::PERM),
        _ => return Ok(None),
    };
    let n = rest[at].to_vec();
    pending.drain(..=at);
    Ok(Some(n))
}

/// `dir` (a directory of `/proc`) is the caller's own `fd` directory, or
/// its calling thread's (`/proc/<own id>/fd`, `.../task/<own tid>/fd` of
/// the `/proc` it is on), as a file server keeps open to name its
/// descriptors by. The caller's IDs are those of its innermost PID
/// namespace, which its `/proc` is assumed to show; where it shows
/// another's, the descriptor taken is still the caller's own, which it
/// could have named directly.
fn own_fd_dir(caller: &Caller, dir: &OwnedFd) -> Result<bool, Errno> {
    let mut root = dup(dir)?;
    for _ in 0..4 {
        root = openat(&root, "..", dir_flags(), Mode::empty())?;
        if is_proc_root(&root)? {
            break;
        }
    }
    if !is_proc_root(&root)? {
        return Ok(false);
    }
    let tgid = caller.ns_tgid;
    let tid = caller.ns_tid;
    for own in [format!("{tgid}/fd"), format!("{tgid}/task/{tid}/fd")] {
        // Names of directories only: no link of `/proc` is followed.
        let found = match openat(
            &root,
            own.as_str(),
            dir_flags() | OFlags::NOFOLLOW,
            Mode::empty(),
        ) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => continue,
            Err(e) => return Err(e),
        };
        if same_file(&found, dir)? {
            return Ok(true);
        }
    }
    Ok(false)
}

/// The caller's descriptor named by the decimal `n`.
fn take(caller: &Caller, n: &[u8]) -> Result<OwnedFd, Errno> {
    let n: u64 = std::str::from_utf8(n)
        .ok()
        .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|s| s.parse().ok())
        .ok_or(Errno::NOENT)?;
    caller.take_fd(n).map_err(|e| match e {
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    fn me() -> Caller {
        let tid = u32::try_from(nix::unistd::gettid().as_raw()).unwrap();
        Caller::open(tid).unwrap()
    }

    fn named(base: Base, path: &str, follow: bool) -> Named<'_> {
        Named {
            base,
            path: path.as_bytes(),
            follow,
            empty_is_base: false,
        }
    }

    fn same(a: &OwnedFd, b: &std::path::Path) -> bool {
        let b = openat(rustix::fs::CWD, b, path_flags(), Mode::empty()).unwrap();
        same_file(a, &b).unwrap()
    }

    #[test]
    fn a_name_beneath_the_callers_own_descriptor_in_proc_self_fd_is_found_beneath_that_descriptor()
    {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("name"), b"x").unwrap();
        let held = std::fs::File::open(dir.path()).unwrap();
        let n = held.as_raw_fd();
        let caller = me();
        for proc in [
            "self".to_string(),
            "thread-self".to_string(),
            caller.ns_tgid.to_string(),
        ] {
            let path = format!("/proc/{proc}/fd/{n}/name");
            let found = resolve(&caller, &named(Base::Cwd, &path, false)).unwrap();
            assert!(same(&found, &dir.path().join("name")), "{path}");
        }
        // The descriptor itself, followed.
        let path = format!("/proc/self/fd/{n}");
        let found = resolve(&caller, &named(Base::Cwd, &path, true)).unwrap();
        assert!(same(&found, dir.path()));
    }

    #[test]
    fn a_name_in_the_callers_own_fd_directory_held_open_is_that_descriptor_of_the_caller() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("19");
        std::fs::write(&file, b"x").unwrap();
        let held = std::fs::File::open(&file).unwrap();
        let fds = std::fs::File::open("/proc/self/fd").unwrap();
        let caller = me();
        let n = held.as_raw_fd().to_string();
        let base = Base::Fd(fds.as_raw_fd() as u64);
        let found = resolve(&caller, &named(base, &n, true)).unwrap();
        assert!(same(&found, &file));
        // Named as the link itself, it is not the file.
        let base = Base::Fd(fds.as_raw_fd() as u64);
        assert_eq!(
            resolve(&caller, &named(base, &n, false)).err(),
            Some(Errno::OPNOTSUPP)
        );
    }

    #[test]
    fn another_processs_descriptors_and_proc_self_root_are_still_refused() {
        let mut other = std::process::Command::new("sleep")
            .arg("30")
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let caller = me();
        let pid = other.id();
        let theirs = resolve(
            &caller,
            &named(Base::Cwd, &format!("/proc/{pid}/fd/0"), true),
        );
        // Its directory held open: the names in it are its descriptors.
        let dir = std::fs::File::open(format!("/proc/{pid}/fd")).unwrap();
        let base = Base::Fd(dir.as_raw_fd() as u64);
        let held = resolve(&caller, &named(base, "0", true));
        let _ = other.kill();
        let _ = other.wait();
        assert_eq!(theirs.err(), Some(Errno::PERM));
        assert_eq!(held.err(), Some(Errno::PERM));
        for path in [
            "/proc/self/root/etc",
            "/proc/self/cwd",
            "/proc/thread-self/root",
        ] {
            assert_eq!(
                resolve(&caller, &named(Base::Cwd, path, true)).err(),
                Some(Errno::PERM),
                "{path}"
            );
        }
    }
}
