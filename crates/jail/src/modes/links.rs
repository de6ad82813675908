//! Hard links, judged because a second name undoes the protection a
//! directory gives: root's `0644` file in a `0700` directory, linked by the
//! sandbox into a `0755` one, is read there by every local user, and so is
//! everything root writes into it later in place, long after the sandbox
//! is gone. Through the owner swap the sandbox owns root's `--rw` files,
//! so `fs.protected_hardlinks` does not stop it.
//!
//! So `link` and `linkat` come here, and a file may be given another name
//! only if it was born in this run (`git` linking its new objects, a
//! package manager's own files); the supervisor then makes the link itself
//! from the file it found (never letting the call through to be done again
//! by path, which the sandbox could swap), with the caller's file-system
//! identity, so the kernel still checks the caller's ownership, search
//! rights and read-only mounts. Programs that link existing files (`cp -l`,
//! `git clone` of a local repository, `pnpm`'s store) meet `EPERM` there
//! and copy instead, as they do across file systems.
//!
//! Without namespaces (degraded mode) the link made here would be outside
//! the sandbox's Landlock domain, in the host's own file tree: the degraded
//! filter refuses `link` and `linkat` before they reach the supervisor.
//!
//! A rename moves a file's only name: root's later writes by path land in
//! a new file where the old name was, not in the moved one, whose contents
//! the sandbox could read and copy anyway. Renames are left to the kernel
//! (they are the commonest call of every package manager; see the threat
//! model).

use super::caller::Caller;
use super::walk::{self, Base, Named};
use super::{valid, Judge};
use libseccomp::ScmpNotifReq;
use rustix::fs::AtFlags;
use rustix::io::Errno;
use std::os::fd::{AsRawFd, OwnedFd};

/// Whether `nr` is a call of this module.
pub(super) fn handles(nr: i64) -> bool {
    #[cfg(target_arch = "x86_64")]
    if nr == libc::SYS_link {
        return true;
    }
    nr == libc::SYS_linkat
}

impl Judge {
    /// Judge and make one hard link of the caller's.
    pub(super) fn link(
        &mut self,
        listener: &OwnedFd,
        req: &ScmpNotifReq,
        caller: &Caller,
    ) -> Result<(), Errno> {
        let nr = i64::from(req.data.syscall.as_raw_syscall());
        let args = req.data.args;
        // (old dir, old path, new dir, new path, flags); `link` is
        // `linkat` from the working directory, not following.
        let (old_dir, old, new_dir, new, flags) = if nr == libc::SYS_linkat {
            (
                base(args[0]),
                args[1],
                base(args[2]),
                args[3],
                args[4] as u32 as i32,
            )
        } else {
            (Base::Cwd, args[0], Base::Cwd, args[1], 0)
        };
        if flags & !(libc::AT_SYMLINK_FOLLOW | libc::AT_EMPTY_PATH) != 0 {
            return Err(Errno::INVAL);
        }
        let old = caller.read_path(old)?;
        let new = caller.read_path(new)?;
        let source = walk::resolve(
            caller,
            &Named {
                base: old_dir,
                path: &old,
                follow: flags & libc::AT_SYMLINK_FOLLOW != 0,
                empty_is_base: flags & libc::AT_EMPTY_PATH != 0,
            },
        )?;
        let (dir, name) = split_last(&new)?;
        let dir = walk::resolve(
            caller,
            &Named {
                base: new_dir,
                path: dir,
                follow: true,
                empty_is_base: false,
            },
        )?;
        valid(listener, req.id)?;
        let (seen, _) = self.seen(&source)?;
        if seen.mode & libc::S_IFMT == libc::S_IFDIR {
            return Err(Errno::PERM);
        }
        if !seen.own {
            return Err(Errno::PERM);
        }
        // The file the descriptor holds, through the supervisor's own
        // table; after that jump nothing is followed (a link found without
        // following is linked itself).
        rustix::fs::linkat(
            rustix::fs::CWD,
            format!("/proc/self/fd/{}", source.as_raw_fd()),
            &dir,
            name,
            AtFlags::SYMLINK_FOLLOW,
        )
    }
}

fn base(dirfd: u64) -> Base {
    if dirfd as u32 as i32 == libc::AT_FDCWD {
        Base::Cwd
    } else {
        Base::Fd(dirfd)
    }
}

/// The directory part of a new name (`.` when there is none) and its last
/// name. A last name of `.` or `..`, or a trailing slash, names a directory
/// that exists: `EEXIST`, as the kernel answers.
fn split_last(path: &[u8]) -> Result<(&[u8], &[u8]), Errno> {
    if path.is_empty() {
        return Err(Errno::NOENT);
    }
    let (dir, name) = match path.iter().rposition(|b| *b == b'/') {
        Some(0) => (&path[..1], &path[1..]),
        Some(i) => (&path[..i], &path[i + 1..]),
        None => (&b"."[..], path),
    };
    if name.is_empty() || name == b"." || name == b".." {
        return Err(Errno::EXIST);
    }
    Ok((dir, name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_name_splits_into_its_directory_and_last_name() {
        assert_eq!(split_last(b"x"), Ok((&b"."[..], &b"x"[..])));
        assert_eq!(split_last(b"a/b/x"), Ok((&b"a/b"[..], &b"x"[..])));
        assert_eq!(split_last(b"/x"), Ok((&b"/"[..], &b"x"[..])));
        assert_eq!(split_last(b"a/"), Err(Errno::EXIST));
        assert_eq!(split_last(b"a/.."), Err(Errno::EXIST));
        assert_eq!(split_last(b""), Err(Errno::NOENT));
    }
}
