//! The merge's walk: the upper layer and the target tree, from descriptor
//! to descriptor, each entry charged as the host pays for it (see the
//! parent module).

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, Stat};
use rustix::io::Errno;
use warden_workspace::exposure;
use warden_workspace::fsutil::{self, entry_cost, ENTRY_BYTES};

use super::Merged;

mod held;
use held::Fenced;

/// Room kept, whenever an entry is admitted, for the growth of the
/// directory it is made in (a block at a time, two when ext4 turns a
/// directory into a hashed tree); the growth itself is charged once it
/// happened. So the merge never takes the tree past its limit.
const HEADROOM: u64 = 2 * ENTRY_BYTES;

/// The attribute overlayfs (mounted with `userxattr`, as in the sandbox's
/// user namespace) marks an opaque directory with.
const OPAQUE: &str = "user.overlay.opaque";

pub(super) fn open_dir<Fd: AsFd>(at: Fd, name: &Path) -> io::Result<OwnedFd> {
    rustix::fs::openat(
        at,
        name,
        OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::RDONLY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(io::Error::from)
}

/// The names in the directory `dir`, last first (the walk pops them).
fn names_of(dir: BorrowedFd<'_>) -> io::Result<Vec<OsString>> {
    let mut names = Vec::new();
    for entry in rustix::fs::Dir::read_from(dir)? {
        let entry = entry?;
        let name = entry.file_name().to_bytes();
        if name != b"." && name != b".." {
            names.push(OsStr::from_bytes(name).to_os_string());
        }
    }
    names.sort_by(|a, b| b.as_bytes().cmp(a.as_bytes()));
    Ok(names)
}

fn identity(st: &Stat) -> (u64, u64) {
    (st.st_dev, st.st_ino)
}

/// The entry `name` of `dir` as `/proc/self/fd/N/NAME`: the directory is
/// the descriptor's, only the name is resolved (and never followed by the
/// calls made on it here).
fn at_path(dir: BorrowedFd<'_>, name: &OsStr) -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{}", dir.as_raw_fd())).join(name)
}

/// A temporary name for an entry being made in a directory of the target.
fn temp_name() -> String {
    format!(".warden-merge-{}", std::process::id())
}

/// One directory of the walk, from the top down.
struct Level {
    /// Names of the upper directory still to merge, last first.
    pending: Vec<OsString>,
    /// The upper directory's identity, checked when the walk comes back.
    src: (u64, u64),
    /// The target directory, or `None` when this directory was left out
    /// (what lies below is then only counted).
    dst: Option<Target>,
    /// Whether `Merge::at` holds this directory's name.
    named: bool,
}

/// A directory of the target being filled.
struct Target {
    id: (u64, u64),
    /// What it was charged for itself so far (its own blocks).
    cost: u64,
    /// The mode it gets once filled (a 0500 directory could not be
    /// filled); `None` for the top, which is the host's.
    mode: Option<u32>,
}

/// A directory to go down into: the upper one, and the target one if it
/// is entered (else it is left out and only counted).
struct Down {
    src: OwnedFd,
    dst: Option<(OwnedFd, u32)>,
}

pub(super) struct Merge<'f> {
    /// What the target tree costs now.
    used: u64,
    limit: u64,
    /// The owner merged entries get: the target directory's.
    owner: (u32, u32),
    pub(super) done: Merged,
    /// Where the walk is, relative to the upper layer, for messages.
    pub(super) at: PathBuf,
    /// What the merge must leave alone, and what it held back.
    fenced: Option<Fenced<'f>>,
}

impl<'f> Merge<'f> {
    /// A merge into a tree that costs `used` now, kept within `limit`,
    /// whose entries get `owner`.
    pub(super) fn new(used: u64, limit: u64, owner: (u32, u32)) -> Merge<'f> {
        Merge {
            used,
            limit,
            owner,
            done: Merged::default(),
            at: PathBuf::new(),
            fenced: None,
        }
    }

    /// Merge the upper directory `src` into the target directory `dst`,
    /// from the top down, without recursion.
    pub(super) fn walk(&mut self, mut src: OwnedFd, mut dst: OwnedFd) -> io::Result<()> {
        let top = self.enter(src.as_fd(), Some((dst.as_fd(), None)), false)?;
        let mut stack = vec![top];
        while let Some(level) = stack.last_mut() {
            if let Some(name) = level.pending.pop() {
                let entered = level.dst.is_some();
                self.at.push(&name);
                let down = if entered {
                    self.entry(src.as_fd(), dst.as_fd(), &name)?
                } else {
                    self.left_out(src.as_fd(), &name)?
                };
                if let Some(level) = stack.last_mut() {
                    if let Some(t) = level.dst.as_mut() {
                        // The target directory's own growth, as it happens.
                        let now = entry_cost(&rustix::fs::fstat(&dst)?, 0);
                        self.used = self.used.saturating_sub(t.cost).saturating_add(now);
                        t.cost = now;
                    }
                }
                match down {
                    Some(down) => {
                        let into = down
                            .dst
                            .as_ref()
                            .map(|(fd, mode)| (fd.as_fd(), Some(*mode)));
                        let level = self.enter(down.src.as_fd(), into, true)?;
                        src = down.src;
                        if let Some((fd, _)) = down.dst {
                            dst = fd;
                        }
                        stack.push(level);
                    }
                    None => {
                        self.at.pop();
                    }
                }
                continue;
            }
            let Some(done) = stack.pop() else {
                break;
            };
            if done.named {
                self.at.pop();
            }
            let Some(parent) = stack.last() else {
                break;
            };
            src = up(src.as_fd(), parent.src)?;
            if let (Some(filled), Some(t)) = (&done.dst, &parent.dst) {
                let parent_dst = up(dst.as_fd(), t.id)?;
                let child = std::mem::replace(&mut dst, parent_dst);
                // Its mode once its content is in and the walk is out of
                // it (a 0500 directory could not be filled, nor a 0000 one
                // left through `..`).
                if let Some(mode) = filled.mode {
                    rustix::fs::fchmod(&child, Mode::from_raw_mode(mode & 0o777))?;
                }
            }
        }
        Ok(())
    }

    /// Read the upper directory `src` and, if it is merged, the target
    /// directory `dst` (with the mode it gets once filled): an opaque
    /// upper directory (removed and made again in the sandbox) first
    /// empties its target, since nothing of what was there shows through
    /// it.
    fn enter(
        &mut self,
        src: BorrowedFd<'_>,
        dst: Option<(BorrowedFd<'_>, Option<u32>)>,
        named: bool,
    ) -> io::Result<Level> {
        let src_st = rustix::fs::fstat(src)?;
        let dst = match dst {
            Some((dst, mode)) => {
                let mut mark = [0u8; 4];
                if let Ok(n) = rustix::fs::fgetxattr(src, OPAQUE, &mut mark) {
                    if mark[..n] == *b"y" {
                        self.clear(dst)?;
                    }
                }
                let st = rustix::fs::fstat(dst)?;
                Some(Target {
                    id: identity(&st),
                    cost: entry_cost(&st, 0),
                    mode,
                })
            }
            None => None,
        };
        Ok(Level {
            pending: names_of(src)?,
            src: identity(&src_st),
            dst,
            named,
        })
    }

    /// Whether an entry costing `cost`, in place of one costing `replaced`,
    /// keeps the tree within its limit, with room for its directory's
    /// growth.
    fn fits(&self, cost: u64, replaced: u64) -> bool {
        self.used
            .saturating_sub(replaced)
            .saturating_add(cost)
            .saturating_add(HEADROOM)
            <= self.limit
    }

    /// Charge the entry `name` just made in `dst` (in place of one that
    /// cost `replaced`) at what the host holds for it.
    fn charge(&mut self, dst: BorrowedFd<'_>, name: &OsStr, replaced: u64) -> io::Result<()> {
        let st = rustix::fs::statat(dst, name, AtFlags::SYMLINK_NOFOLLOW)?;
        let cost = entry_cost(&st, name.len());
        self.used = self.used.saturating_sub(replaced).saturating_add(cost);
        self.done.added = self.done.added.saturating_add(cost);
        Ok(())
    }

    /// Merge the entry `name` of the upper directory `src` into `dst`;
    /// answers the directories to go down into.
    fn entry(
        &mut self,
        src: BorrowedFd<'_>,
        dst: BorrowedFd<'_>,
        name: &OsStr,
    ) -> io::Result<Option<Down>> {
        let st = rustix::fs::statat(src, name, AtFlags::SYMLINK_NOFOLLOW)?;
        match FileType::from_raw_mode(st.st_mode) {
            // A whiteout: the sandbox removed this entry.
            FileType::CharacterDevice if st.st_rdev == 0 => {
                match self.fenced(dst, name, &self.at) {
                    Some(reason) => self.hold(&self.at.clone(), reason),
                    None => self.remove(dst, name)?,
                }
            }
            FileType::Directory => return self.directory(src, dst, name, &st),
            FileType::RegularFile | FileType::Symlink => {
                if let Some(reason) = self.fenced(dst, name, &self.at) {
                    self.hold_back(src, name, &st, reason)?;
                    return Ok(None);
                }
                self.file_or_link(src, dst, name, &st)?;
            }
            // Devices, FIFOs and sockets are not merged.
            _ => {}
        }
        Ok(None)
    }

    /// Merge the regular file or symbolic link `name` of `src` (whose
    /// `lstat` is `st`) into `dst`.
    fn file_or_link(
        &mut self,
        src: BorrowedFd<'_>,
        dst: BorrowedFd<'_>,
        name: &OsStr,
        st: &Stat,
    ) -> io::Result<()> {
        let st = *st;
        let cost = entry_cost(&st, name.len());
        match FileType::from_raw_mode(st.st_mode) {
            FileType::RegularFile => {
                let replaced = self.cost_of(dst, name)?;
                if !self.fits(cost, replaced) {
                    self.done.left_out += 1;
                    return Ok(());
                }
                // The host's file, if one is replaced: the layer's copy
                // was the sandbox's own to widen, the original is not.
                let host = rustix::fs::statat(dst, name, AtFlags::SYMLINK_NOFOLLOW)
                    .ok()
                    .map(|h| h.st_mode);
                let mode = exposure::landed(host, st.st_mode & 0o777, false);
                let tmp = temp_name();
                self.copy_file((src, name, &st), mode, dst, &tmp)?;
                self.replace(dst, &tmp, name)?;
                self.charge(dst, name, replaced)?;
            }
            FileType::Symlink => {
                let replaced = self.cost_of(dst, name)?;
                if !self.fits(cost, replaced) {
                    self.done.left_out += 1;
                    return Ok(());
                }
                let target = rustix::fs::readlinkat(src, name, Vec::new())?;
                let tmp = temp_name();
                let _ = rustix::fs::unlinkat(dst, tmp.as_str(), AtFlags::empty());
                rustix::fs::symlinkat(target.as_c_str(), dst, tmp.as_str())?;
                self.own(dst, OsStr::new(&tmp));
                self.replace(dst, &tmp, name)?;
                self.charge(dst, name, replaced)?;
            }
            _ => {}
        }
        Ok(())
    }

    /// The directory `name` of `src`: merged into the directory of that
    /// name in `dst` (made if missing; an entry of another kind there is
    /// replaced), or left out whole if making it would pass the limit.
    fn directory(
        &mut self,
        src: BorrowedFd<'_>,
        dst: BorrowedFd<'_>,
        name: &OsStr,
        st: &Stat,
    ) -> io::Result<Option<Down>> {
        let mut mode = st.st_mode & 0o777;
        let fenced = self.fenced(dst, name, &self.at);
        let there = rustix::fs::statat(dst, name, AtFlags::SYMLINK_NOFOLLOW);
        let is_dir = |t: &Stat| FileType::from_raw_mode(t.st_mode) == FileType::Directory;
        if let (Some(reason), false) = (fenced, there.as_ref().is_ok_and(is_dir)) {
            // Made new, or in place of another entry, on the way to what
            // the fence names: held back whole.
            self.hold_back(src, name, st, reason)?;
            return Ok(None);
        }
        let sub = open_upper_dir(src, name, st)?;
        match there {
            Ok(there) if is_dir(&there) => {
                // As for a file: the host's directory gains no bit the
                // rule would not give it; one the fence names keeps its
                // own (what is in it is merged or held back entry by
                // entry).
                mode = match fenced {
                    Some(_) => there.st_mode & 0o777,
                    None => exposure::landed(Some(there.st_mode), mode, true),
                };
            }
            found => {
                let replaced = match found {
                    Ok(_) => self.cost_of(dst, name)?,
                    Err(Errno::NOENT) => 0,
                    Err(e) => return Err(e.into()),
                };
                // Made empty: what it grows by is charged as entries are
                // added to it (their names included).
                let empty = ENTRY_BYTES.saturating_add(fsutil::name_cost(name.len()));
                if !self.fits(empty, replaced) {
                    self.done.left_out += 1;
                    return Ok(Some(Down {
                        src: sub,
                        dst: None,
                    }));
                }
                if replaced > 0 {
                    self.remove(dst, name)?;
                }
                rustix::fs::mkdirat(dst, name, Mode::from_raw_mode(0o700))?;
                self.own(dst, name);
                self.charge(dst, name, 0)?;
            }
        }
        // Filled as its owner, whatever its mode (set again once full). It
        // was a directory just now, and nothing but a merge, which holds
        // the lock, writes the target.
        rustix::fs::chmodat(dst, name, Mode::from_raw_mode(0o700), AtFlags::empty())?;
        let into = open_dir(dst, Path::new(name))?;
        Ok(Some(Down {
            src: sub,
            dst: Some((into, mode)),
        }))
    }

    /// Count the entry `name` of `src`, inside a directory left out, as
    /// left out; answers the directory to go down into to count the rest.
    fn left_out(&mut self, src: BorrowedFd<'_>, name: &OsStr) -> io::Result<Option<Down>> {
        let st = rustix::fs::statat(src, name, AtFlags::SYMLINK_NOFOLLOW)?;
        match FileType::from_raw_mode(st.st_mode) {
            FileType::Directory => {
                self.done.left_out += 1;
                let sub = open_upper_dir(src, name, &st)?;
                return Ok(Some(Down {
                    src: sub,
                    dst: None,
                }));
            }
            FileType::RegularFile | FileType::Symlink => self.done.left_out += 1,
            _ => {}
        }
        Ok(None)
    }

    /// Copy the regular file `name` of `src` (whose `lstat` is `st`) to the
    /// new entry `tmp` of `dst`, with the permission bits `mode` and the
    /// target's owner.
    fn copy_file(
        &self,
        (src, name, st): (BorrowedFd<'_>, &OsStr, &Stat),
        mode: u32,
        dst: BorrowedFd<'_>,
        tmp: &str,
    ) -> io::Result<()> {
        let _ = rustix::fs::unlinkat(dst, tmp, AtFlags::empty());
        let out = rustix::fs::openat(
            dst,
            tmp,
            OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )?;
        let copied = (|| {
            // The upper layer is disposable once the sandbox is gone: a
            // mode-000 file of it is made readable to be copied.
            if st.st_mode & 0o400 == 0 && !rustix::process::geteuid().is_root() {
                rustix::fs::chmodat(
                    src,
                    name,
                    Mode::from_raw_mode((st.st_mode | 0o400) & 0o7777),
                    AtFlags::empty(),
                )?;
            }
            let from = rustix::fs::openat(
                src,
                name,
                OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            )?;
            let mut from = File::from(from);
            let mut to = File::from(out);
            io::copy(&mut from, &mut to)?;
            rustix::fs::fchmod(&to, Mode::from_raw_mode(mode))?;
            let (uid, gid) = self.owner;
            match rustix::fs::fchown(
                &to,
                Some(rustix::fs::Uid::from_raw(uid)),
                Some(rustix::fs::Gid::from_raw(gid)),
            ) {
                Ok(()) | Err(Errno::PERM) => Ok(()),
                Err(e) => Err(io::Error::from(e)),
            }
        })();
        if copied.is_err() {
            let _ = rustix::fs::unlinkat(dst, tmp, AtFlags::empty());
        }
        copied
    }

    /// Rename `tmp` over `name` in `dst`; a directory there is removed
    /// first (its cost was counted as replaced).
    fn replace(&mut self, dst: BorrowedFd<'_>, tmp: &str, name: &OsStr) -> io::Result<()> {
        if let Ok(st) = rustix::fs::statat(dst, name, AtFlags::SYMLINK_NOFOLLOW) {
            if FileType::from_raw_mode(st.st_mode) == FileType::Directory {
                fsutil::remove_tree(&at_path(dst, name)).map_err(io::Error::other)?;
            }
        }
        rustix::fs::renameat(dst, tmp, dst, name).map_err(io::Error::from)
    }

    /// Give the entry `name` of `dst` the target directory's owner (where
    /// the supervisor may: as root).
    fn own(&self, dst: BorrowedFd<'_>, name: &OsStr) {
        let (uid, gid) = self.owner;
        let _ = rustix::fs::chownat(
            dst,
            name,
            Some(rustix::fs::Uid::from_raw(uid)),
            Some(rustix::fs::Gid::from_raw(gid)),
            AtFlags::SYMLINK_NOFOLLOW,
        );
    }

    /// What the entry `name` of `dst` costs, with everything below it; 0
    /// when there is none. A directory that cannot be measured counts as
    /// nothing freed.
    fn cost_of(&self, dst: BorrowedFd<'_>, name: &OsStr) -> io::Result<u64> {
        let st = match rustix::fs::statat(dst, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            Err(Errno::NOENT) => return Ok(0),
            Err(e) => return Err(e.into()),
        };
        let own = entry_cost(&st, name.len());
        if FileType::from_raw_mode(st.st_mode) != FileType::Directory {
            return Ok(own);
        }
        Ok(match fsutil::tree_bytes(&at_path(dst, name)) {
            Some(below) => own.saturating_add(below),
            None => 0,
        })
    }

    /// Remove the entry `name` of `dst`, whatever it is (a directory with
    /// everything in it, from descriptor to descriptor), never following a
    /// link; what it cost is freed.
    fn remove(&mut self, dst: BorrowedFd<'_>, name: &OsStr) -> io::Result<()> {
        let freed = self.cost_of(dst, name)?;
        let st = match rustix::fs::statat(dst, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            Err(Errno::NOENT) => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        if FileType::from_raw_mode(st.st_mode) == FileType::Directory {
            fsutil::remove_tree(&at_path(dst, name)).map_err(io::Error::other)?;
        } else {
            rustix::fs::unlinkat(dst, name, AtFlags::empty())?;
        }
        self.used = self.used.saturating_sub(freed);
        Ok(())
    }

    /// Remove everything in the directory `dir` (at `self.at`), but what
    /// the fence names.
    fn clear(&mut self, dir: BorrowedFd<'_>) -> io::Result<()> {
        for name in names_of(dir)? {
            let rel = self.at.join(&name);
            match self.fenced(dir, &name, &rel) {
                Some(reason) => self.hold(&rel, reason),
                None => self.remove(dir, &name)?,
            }
        }
        Ok(())
    }
}

/// The directory `name` of the upper directory `src` (whose `lstat` is
/// `st`), opened; made enterable by its owner first where the sandbox took
/// that away (the upper layer is disposable once the sandbox is gone).
fn open_upper_dir(src: BorrowedFd<'_>, name: &OsStr, st: &Stat) -> io::Result<OwnedFd> {
    if st.st_mode & 0o700 != 0o700 && !rustix::process::geteuid().is_root() {
        rustix::fs::chmodat(
            src,
            name,
            Mode::from_raw_mode((st.st_mode | 0o700) & 0o7777),
            AtFlags::empty(),
        )?;
    }
    open_dir(src, Path::new(name))
}

/// Make the upper layer's top `name` of `at` enterable by its owner, as
/// [`open_upper_dir`] does below it (a sandbox may `chmod 000` the top of
/// its cache or volume).
pub(super) fn enterable<Fd: AsFd>(at: Fd, name: &Path) -> io::Result<()> {
    let st = rustix::fs::statat(&at, name, AtFlags::SYMLINK_NOFOLLOW)?;
    if FileType::from_raw_mode(st.st_mode) == FileType::Directory
        && st.st_mode & 0o700 != 0o700
        && !rustix::process::geteuid().is_root()
    {
        rustix::fs::chmodat(
            &at,
            name,
            Mode::from_raw_mode((st.st_mode | 0o700) & 0o7777),
            AtFlags::empty(),
        )?;
    }
    Ok(())
}

/// The parent of the directory `dir`, checked to be the directory `id`
/// the walk came down from: a tree moved meanwhile is not followed out.
fn up(dir: BorrowedFd<'_>, id: (u64, u64)) -> io::Result<OwnedFd> {
    let parent = open_dir(dir, Path::new(".."))?;
    if identity(&rustix::fs::fstat(&parent)?) != id {
        return Err(io::Error::other(
            "the tree was moved while it was merged; what is left of it is not",
        ));
    }
    Ok(parent)
}
