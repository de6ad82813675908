//! A sandbox's writes to a profile's package caches, merged into the shared
//! cache when it stops. While the sandbox runs, each cache it declares is an
//! overlay: the profile's cache directory is the read-only lower layer, and
//! what the sandbox writes lands in an upper layer inside its size-limited
//! tmpfs (`--disk`), so that a cache filled from inside fails with ENOSPC
//! there and never spends the host's disk. When every process of the
//! sandbox is gone, the supervisor merges the upper layer into the shared
//! directory, so that the profile's next sandbox finds what this one
//! downloaded, as long as the profile's caches together stay within the
//! sandbox's `--disk`: a file that would take them past it is left out
//! (counted in [`Merged::left_out`]).
//!
//! The shared directory may hold anything an older sandbox wrote into it
//! (symbolic links to anywhere, among others), so the merge never follows
//! a link there: every step is relative to a directory descriptor opened
//! with `O_NOFOLLOW`, new entries are made under a temporary name and
//! renamed over the old one (which replaces a link rather than writing
//! through it), and removals unlink entries themselves. Setuid, setgid and
//! sticky bits are dropped; devices, FIFOs and sockets are not merged.

use std::fs::{self, File};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, FlockOperation, Mode, OFlags};

#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    #[error("cannot lock the profile's caches {path} to merge a sandbox's writes into them")]
    Lock {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot merge {path} of the sandbox's cache writes into the profile's cache {cache}")]
    Merge {
        path: PathBuf,
        cache: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// What a merge did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Merged {
    /// Bytes of files added to the shared cache.
    pub added: u64,
    /// Files left out because the profile's caches would have grown past
    /// the limit.
    pub left_out: u64,
}

/// Bytes of disk under `dir` (blocks; links are not followed).
pub fn usage(dir: &Path) -> u64 {
    let Ok(rd) = fs::read_dir(dir) else {
        return 0;
    };
    let mut total = 0u64;
    for e in rd.flatten() {
        let Ok(m) = fs::symlink_metadata(e.path()) else {
            continue;
        };
        total = total.saturating_add(m.blocks().saturating_mul(512));
        if m.is_dir() {
            total = total.saturating_add(usage(&e.path()));
        }
    }
    total
}

/// Make `path` of the upper layer (disposable once the sandbox is gone)
/// readable by its owner where the sandbox took that away (a mode-000
/// file or directory), so that an unprivileged supervisor can merge it;
/// the copy gets the original mode.
fn readable(path: &Path, bits: u32) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let mode = fs::symlink_metadata(path)?.mode();
    if mode & bits != bits {
        fs::set_permissions(path, fs::Permissions::from_mode((mode | bits) & 0o7777))?;
    }
    Ok(())
}

/// The bytes a file of the upper layer would take in the shared cache: its
/// apparent size (a sparse file is counted whole: the copy may fill it),
/// or its blocks if more.
fn cost(m: &fs::Metadata) -> u64 {
    m.len().max(m.blocks().saturating_mul(512))
}

struct Merge<'a> {
    /// The cache being merged into, for messages.
    cache: &'a Path,
    /// Bytes the profile's caches take now.
    used: u64,
    limit: u64,
    /// The owner merged entries get: the shared directory's.
    owner: (u32, u32),
    done: Merged,
}

/// Merge the upper layer `live` into the shared cache directory `dest`,
/// one of the caches under the profile's directory `profile`, keeping
/// everything under `profile` within `limit` bytes. Holds an exclusive lock
/// on `profile` meanwhile, so that sandboxes of the profile stopping at the
/// same time merge one after the other.
pub fn merge(live: &Path, dest: &Path, profile: &Path, limit: u64) -> Result<Merged, CacheError> {
    let lock_err = |source| CacheError::Lock {
        path: profile.to_path_buf(),
        source,
    };
    let lock = open_dir(rustix::fs::CWD, profile).map_err(lock_err)?;
    rustix::fs::flock(&lock, FlockOperation::LockExclusive)
        .map_err(io::Error::from)
        .map_err(lock_err)?;
    let at = |path: &Path| {
        let path = path.to_path_buf();
        move |source| CacheError::Merge {
            path,
            cache: dest.to_path_buf(),
            source,
        }
    };
    let dir = open_dir(rustix::fs::CWD, dest).map_err(at(dest))?;
    merge_into(live, dest, dir.as_fd(), usage(profile), limit)
}

/// Merge the upper layer `live` of a writable volume into the volume's
/// directory `dest`, which grows by at most `grow` bytes (the sandbox's
/// `--disk`: a sparse file, small in the tmpfs, is counted whole, so the
/// merge never writes more than that). Holds an exclusive lock on `dest`
/// meanwhile, so that sandboxes stopping at the same time merge one after
/// the other, and so that the volume's deletion (which takes the same
/// lock) never races a merge: a directory deleted meanwhile takes nothing.
pub fn merge_volume(live: &Path, dest: &Path, grow: u64) -> Result<Merged, CacheError> {
    let dir = open_dir(rustix::fs::CWD, dest).map_err(|source| CacheError::Lock {
        path: dest.to_path_buf(),
        source,
    })?;
    rustix::fs::flock(&dir, FlockOperation::LockExclusive)
        .map_err(io::Error::from)
        .map_err(|source| CacheError::Lock {
            path: dest.to_path_buf(),
            source,
        })?;
    let used = usage(dest);
    merge_into(live, dest, dir.as_fd(), used, used.saturating_add(grow))
}

/// Merge `live` into the directory `dir` (at `dest`, for messages), whose
/// tree holds `used` bytes, keeping it within `limit`.
fn merge_into(
    live: &Path,
    dest: &Path,
    dir: BorrowedFd<'_>,
    used: u64,
    limit: u64,
) -> Result<Merged, CacheError> {
    let st = rustix::fs::fstat(dir)
        .map_err(io::Error::from)
        .map_err(|source| CacheError::Merge {
            path: dest.to_path_buf(),
            cache: dest.to_path_buf(),
            source,
        })?;
    let mut m = Merge {
        cache: dest,
        used,
        limit,
        owner: (st.st_uid, st.st_gid),
        done: Merged::default(),
    };
    m.dir(live, dir)?;
    Ok(m.done)
}

fn open_dir<Fd: AsFd>(at: Fd, name: &Path) -> io::Result<OwnedFd> {
    rustix::fs::openat(
        at,
        name,
        OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::RDONLY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(io::Error::from)
}

/// A temporary name for an entry being made in a directory of the cache.
fn temp_name() -> String {
    format!(".warden-merge-{}", std::process::id())
}

impl Merge<'_> {
    fn err(&self, path: &Path) -> impl FnOnce(io::Error) -> CacheError + '_ {
        let path = path.to_path_buf();
        move |source| CacheError::Merge {
            path,
            cache: self.cache.to_path_buf(),
            source,
        }
    }

    /// Merge the directory `src` of the upper layer into `dst`.
    fn dir(&mut self, src: &Path, dst: BorrowedFd<'_>) -> Result<(), CacheError> {
        // An opaque directory was removed and made again in the sandbox:
        // nothing of the lower one shows through it.
        let mut mark = [0u8; 4];
        if let Ok(n) = rustix::fs::lgetxattr(src, "user.overlay.opaque", &mut mark) {
            if mark[..n] == *b"y" {
                self.clear(dst).map_err(self.err(src))?;
            }
        }
        readable(src, 0o700).map_err(self.err(src))?;
        let mut names: Vec<_> = fs::read_dir(src)
            .map_err(self.err(src))?
            .map(|e| e.map(|e| e.file_name()))
            .collect::<Result<_, _>>()
            .map_err(self.err(src))?;
        names.sort();
        for name in names {
            let path = src.join(&name);
            let meta = fs::symlink_metadata(&path).map_err(self.err(&path))?;
            let ft = meta.file_type();
            let name = Path::new(&name);
            if ft.is_char_device() && meta.rdev() == 0 {
                // A whiteout: the sandbox removed this entry.
                self.remove(dst, name).map_err(self.err(&path))?;
            } else if ft.is_dir() {
                let sub = self.make_dir(dst, name).map_err(self.err(&path))?;
                self.dir(&path, sub.as_fd())?;
                // Its mode once its content is in (a 0500 directory could
                // not be filled).
                rustix::fs::fchmod(&sub, Mode::from_raw_mode(meta.mode() & 0o777))
                    .map_err(io::Error::from)
                    .map_err(self.err(&path))?;
            } else if ft.is_file() {
                self.file(&path, &meta, dst, name)
                    .map_err(self.err(&path))?;
            } else if ft.is_symlink() {
                let target = fs::read_link(&path).map_err(self.err(&path))?;
                let tmp = temp_name();
                let _ = rustix::fs::unlinkat(dst, tmp.as_str(), AtFlags::empty());
                rustix::fs::symlinkat(&target, dst, tmp.as_str())
                    .map_err(io::Error::from)
                    .map_err(self.err(&path))?;
                self.own(dst, Path::new(&tmp), AtFlags::SYMLINK_NOFOLLOW);
                self.replace(dst, &tmp, name).map_err(self.err(&path))?;
            }
        }
        Ok(())
    }

    /// The directory `name` of `dst`, made if missing (an entry of another
    /// kind there is replaced), opened without following a link.
    fn make_dir(&mut self, dst: BorrowedFd<'_>, name: &Path) -> io::Result<OwnedFd> {
        match rustix::fs::statat(dst, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) if st.st_mode & libc::S_IFMT == libc::S_IFDIR => {}
            Ok(_) => {
                self.remove(dst, name)?;
                self.mkdir(dst, name)?;
            }
            Err(rustix::io::Errno::NOENT) => self.mkdir(dst, name)?,
            Err(e) => return Err(e.into()),
        }
        // Filled as its owner, whatever its mode (set again once full). It
        // was a directory just now, and nothing but a merge, which holds
        // the lock, writes the shared cache.
        rustix::fs::chmodat(dst, name, Mode::from_raw_mode(0o700), AtFlags::empty())?;
        open_dir(dst, name)
    }

    fn mkdir(&mut self, dst: BorrowedFd<'_>, name: &Path) -> io::Result<()> {
        rustix::fs::mkdirat(dst, name, Mode::from_raw_mode(0o700))?;
        self.own(dst, name, AtFlags::SYMLINK_NOFOLLOW);
        Ok(())
    }

    /// Copy the regular file `src` into `dst` as `name`, if the profile's
    /// caches stay within the limit with it.
    fn file(
        &mut self,
        src: &Path,
        meta: &fs::Metadata,
        dst: BorrowedFd<'_>,
        name: &Path,
    ) -> io::Result<()> {
        let cost = cost(meta);
        let replaced = match rustix::fs::statat(dst, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) if st.st_mode & libc::S_IFMT == libc::S_IFREG => {
                u64::try_from(st.st_blocks).unwrap_or(0).saturating_mul(512)
            }
            _ => 0,
        };
        let after = self.used.saturating_sub(replaced).saturating_add(cost);
        if after > self.limit {
            self.done.left_out += 1;
            return Ok(());
        }
        let tmp = temp_name();
        let _ = rustix::fs::unlinkat(dst, tmp.as_str(), AtFlags::empty());
        let out = rustix::fs::openat(
            dst,
            tmp.as_str(),
            OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )?;
        let copied = (|| {
            readable(src, 0o600)?;
            let mut from = File::open(src)?;
            let mut to = File::from(out);
            io::copy(&mut from, &mut to)?;
            rustix::fs::fchmod(&to, Mode::from_raw_mode(meta.mode() & 0o777))?;
            let (uid, gid) = self.owner;
            match rustix::fs::fchown(
                &to,
                Some(rustix::fs::Uid::from_raw(uid)),
                Some(rustix::fs::Gid::from_raw(gid)),
            ) {
                Ok(()) | Err(rustix::io::Errno::PERM) => Ok(()),
                Err(e) => Err(io::Error::from(e)),
            }
        })();
        if let Err(e) = copied {
            let _ = rustix::fs::unlinkat(dst, tmp.as_str(), AtFlags::empty());
            return Err(e);
        }
        self.replace(dst, &tmp, name)?;
        self.used = after;
        self.done.added = self.done.added.saturating_add(cost);
        Ok(())
    }

    /// Rename `tmp` over `name` in `dst`; a directory there is removed
    /// first.
    fn replace(&mut self, dst: BorrowedFd<'_>, tmp: &str, name: &Path) -> io::Result<()> {
        if let Ok(st) = rustix::fs::statat(dst, name, AtFlags::SYMLINK_NOFOLLOW) {
            if st.st_mode & libc::S_IFMT == libc::S_IFDIR {
                self.remove(dst, name)?;
            }
        }
        rustix::fs::renameat(dst, tmp, dst, name).map_err(io::Error::from)
    }

    /// Give the entry `name` of `dst` the shared directory's owner (where
    /// the supervisor may: as root).
    fn own(&self, dst: BorrowedFd<'_>, name: &Path, flags: AtFlags) {
        let (uid, gid) = self.owner;
        let _ = rustix::fs::chownat(
            dst,
            name,
            Some(rustix::fs::Uid::from_raw(uid)),
            Some(rustix::fs::Gid::from_raw(gid)),
            flags,
        );
    }

    /// Remove the entry `name` of `dst`, whatever it is (a directory with
    /// everything in it), never following a link.
    fn remove(&mut self, dst: BorrowedFd<'_>, name: &Path) -> io::Result<()> {
        let st = match rustix::fs::statat(dst, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            Err(rustix::io::Errno::NOENT) => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        let freed = u64::try_from(st.st_blocks).unwrap_or(0).saturating_mul(512);
        if st.st_mode & libc::S_IFMT == libc::S_IFDIR {
            rustix::fs::chmodat(dst, name, Mode::from_raw_mode(0o700), AtFlags::empty())?;
            let sub = open_dir(dst, name)?;
            self.clear(sub.as_fd())?;
            rustix::fs::unlinkat(dst, name, AtFlags::REMOVEDIR)?;
        } else {
            rustix::fs::unlinkat(dst, name, AtFlags::empty())?;
        }
        self.used = self.used.saturating_sub(freed);
        Ok(())
    }

    /// Remove everything in the directory `dir`.
    fn clear(&mut self, dir: BorrowedFd<'_>) -> io::Result<()> {
        let mut names = Vec::new();
        for entry in rustix::fs::Dir::read_from(dir)? {
            let entry = entry?;
            let name = entry.file_name().to_bytes();
            if name != b"." && name != b".." {
                names.push(std::ffi::OsStr::from_bytes(name).to_os_string());
            }
        }
        for name in names {
            self.remove(dir, Path::new(&name))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn tmp(tag: &str) -> tempfile::TempDir {
        tempfile::Builder::new().prefix(tag).tempdir().unwrap()
    }

    #[test]
    fn new_files_are_merged_and_a_link_in_the_shared_cache_is_replaced_not_followed() {
        let live = tmp("live");
        let profile = tmp("profile");
        let outside = tmp("outside");
        let dest = profile.path().join("pip/pip");
        fs::create_dir_all(dest.join("sub")).unwrap();
        // Planted by an older sandbox: links out of the cache.
        symlink(outside.path().join("victim"), dest.join("file")).unwrap();
        symlink(outside.path(), dest.join("dir")).unwrap();
        fs::create_dir_all(live.path().join("dir")).unwrap();
        fs::write(live.path().join("file"), "cached\n").unwrap();
        fs::write(live.path().join("dir/inner"), "inner\n").unwrap();
        fs::create_dir(live.path().join("sub")).unwrap();
        fs::write(live.path().join("sub/x"), "x").unwrap();
        let m = merge(live.path(), &dest, profile.path(), 1 << 20).unwrap();
        assert_eq!(m.left_out, 0);
        assert_eq!(fs::read_to_string(dest.join("file")).unwrap(), "cached\n");
        assert!(!fs::symlink_metadata(dest.join("dir"))
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(
            fs::read_to_string(dest.join("dir/inner")).unwrap(),
            "inner\n"
        );
        assert_eq!(fs::read_to_string(dest.join("sub/x")).unwrap(), "x");
        assert_eq!(
            fs::read_dir(outside.path()).unwrap().count(),
            0,
            "written through a link"
        );
    }

    #[test]
    fn a_volume_grows_by_at_most_its_budget_and_a_link_in_it_is_replaced_not_followed() {
        let live = tmp("live");
        let vol = tmp("volume");
        let outside = tmp("outside");
        fs::write(vol.path().join("old"), vec![1u8; 100 << 10]).unwrap();
        symlink(outside.path(), vol.path().join("out")).unwrap();
        fs::create_dir(live.path().join("out")).unwrap();
        fs::write(live.path().join("out/planted"), "x").unwrap();
        fs::write(live.path().join("a"), vec![1u8; 300 << 10]).unwrap();
        // Sparse in the upper layer, whole once copied: counted whole.
        let sparse = File::create(live.path().join("sparse")).unwrap();
        sparse.set_len(1 << 30).unwrap();
        let before = usage(vol.path());
        let m = merge_volume(live.path(), vol.path(), 512 << 10).unwrap();
        assert_eq!(m.left_out, 1);
        assert!(vol.path().join("a").is_file() && !vol.path().join("sparse").exists());
        assert!(usage(vol.path()) <= before + (512 << 10));
        assert_eq!(fs::read_dir(outside.path()).unwrap().count(), 0);
    }

    #[test]
    fn files_past_the_limit_are_left_out() {
        let live = tmp("live");
        let profile = tmp("profile");
        let dest = profile.path().join("npm/_cacache");
        fs::create_dir_all(&dest).unwrap();
        fs::write(live.path().join("a"), vec![1u8; 300 << 10]).unwrap();
        fs::write(live.path().join("b"), vec![1u8; 300 << 10]).unwrap();
        let m = merge(live.path(), &dest, profile.path(), 512 << 10).unwrap();
        assert_eq!(m.left_out, 1);
        assert!(dest.join("a").is_file() && !dest.join("b").exists());
        assert!(usage(profile.path()) <= 512 << 10);
    }
}
