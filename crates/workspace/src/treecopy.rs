//! Copies of whole trees: the real workspace into a copy-layout sandbox's
//! layer, a sandbox's layer or home into a snapshot or a fork, a real
//! entry back into a layer when its change is discarded. Each copy keeps
//! what overlayfs reads (types, modes, symbolic links, whiteout devices,
//! extended attributes), with reflinks where the file system has them.
//!
//! The walk goes from directory descriptor to directory descriptor on
//! both sides (one name opened beneath the last descriptor with the
//! tree's own resolution rules, `..` on the way back, each `..` checked to
//! be the directory it came down from) with an explicit stack of names:
//! neither the depth of a tree nor the length of its paths limits a copy
//! (a layer of 30,000 nested directories, which a sandbox makes with one
//! `mkdirat` beneath the last descriptor, once failed to be snapshotted
//! or forked: the copy recursed, resolved each entry by its path and
//! failed past PATH_MAX), no recursion grows the stack, and four
//! descriptors are held whatever the depth. No link of a tree is
//! followed. What the copied entries cost the host is priced on the way
//! with [`fsutil::entry_cost`], as [`fsutil::tree_size`] would price the
//! copy.

use crate::beneath::Tree;
use crate::fsutil::{self, FsError, Opened};
use rustix::fs::{AtFlags, FileType, Mode, OFlags, Stat, XattrFlags};
use rustix::io::Errno;
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

/// Copy the tree at `src` (the real workspace) to the new path `dst`.
/// Every entry is read beneath `src` without following a link (see
/// [`crate::beneath`]).
pub fn copy_tree(src: &Path, dst: &Path) -> Result<(), FsError> {
    let from = Tree::real(src).map_err(|source| FsError::Read {
        path: PathBuf::new(),
        source,
    })?;
    copy_new(&from, dst, None).map(|_| ())
}

/// Copy the real workspace already opened as `from` (checked to be the
/// sandbox's own directory) to the new path `dst`: the directory copied
/// is the one checked, whatever is at its path now.
pub(crate) fn copy_real(from: &Tree, dst: &Path) -> Result<(), FsError> {
    copy_new(from, dst, None).map(|_| ())
}

/// [`copy_tree`] of a tree the sandbox can write (a layer, a kept home, a
/// snapshot), opened with [`Opened::up`]: each entry gets the mode it had
/// before it was opened. Answers what the copy costs the host's disk
/// (every entry below its top, priced by [`fsutil::entry_cost`]).
pub(crate) fn copy_layer(src: &Path, dst: &Path, opened: &Opened) -> Result<u64, FsError> {
    let from = Tree::layer(src).map_err(|source| FsError::Read {
        path: PathBuf::new(),
        source,
    })?;
    copy_new(&from, dst, Some(opened))
}

/// Make the new directory `dst` (one of warden's own paths) a copy of the
/// tree `from`.
fn copy_new(from: &Tree, dst: &Path, opened: Option<&Opened>) -> Result<u64, FsError> {
    let copy_err = |source| FsError::Copy {
        src: PathBuf::new(),
        dst: PathBuf::new(),
        source,
    };
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(dst)
        .map_err(copy_err)?;
    let to = Tree::layer(dst).map_err(copy_err)?;
    copy_below(from, Path::new(""), &to, Path::new(""), opened)
}

/// Copy the entry `src_rel` of `from` to the new entry `dst_rel` of `to`
/// (both relative to their trees; both empty: the tops, the destination's
/// already made), and what lies below it. Answers what was copied costs
/// the host's disk: every entry below the destination, and the entry
/// itself unless it is the top.
pub(crate) fn copy_below(
    from: &Tree,
    src_rel: &Path,
    to: &Tree,
    dst_rel: &Path,
    opened: Option<&Opened>,
) -> Result<u64, FsError> {
    let copy_err = |source| FsError::Copy {
        src: src_rel.to_path_buf(),
        dst: dst_rel.to_path_buf(),
        source,
    };
    let st = from
        .lstat(src_rel)
        .and_then(|st| st.ok_or_else(|| io::ErrorKind::NotFound.into()))
        .map_err(|source| FsError::Read {
            path: src_rel.to_path_buf(),
            source,
        })?;
    let mode = opened
        .and_then(|o| o.mode_of(src_rel))
        .unwrap_or(st.st_mode & 0o7777);
    let top = dst_rel.as_os_str().is_empty();
    if FileType::from_raw_mode(st.st_mode) != FileType::Directory {
        let (sdir, sname) = from.parent(src_rel).map_err(copy_err)?;
        let (ddir, dname) = to.parent(dst_rel).map_err(copy_err)?;
        return leaf(from, &sdir, sname, &st, mode, &ddir, dname).map_err(|e| match e {
            Leaf::Io(source) => copy_err(source),
            Leaf::Unsupported(what) => FsError::Unsupported {
                src: src_rel.to_path_buf(),
                what,
            },
        });
    }
    if !top {
        let (parent, name) = to.parent(dst_rel).map_err(copy_err)?;
        rustix::fs::mkdirat(&parent, name, Mode::from_raw_mode(0o700))
            .map_err(|e| copy_err(e.into()))?;
    }
    let sdir = from.dir(src_rel).map_err(copy_err)?;
    let ddir = to.dir(dst_rel).map_err(copy_err)?;
    let mut walk = Walk {
        from,
        opened,
        rel: src_rel.to_path_buf(),
        dst_rel,
        stack: Vec::new(),
        cost: 0,
    };
    let ddir = walk.run(sdir, ddir, mode)?;
    if !top {
        let st = rustix::fs::fstat(&ddir).map_err(|e| copy_err(e.into()))?;
        let name_len = dst_rel.file_name().map_or(0, |n| n.len());
        walk.cost = walk.cost.saturating_add(fsutil::entry_cost(&st, name_len));
    }
    Ok(walk.cost)
}

/// One directory being copied: both sides' identities for the way back,
/// its name in its parent, the mode its copy gets once its content is
/// in, and the names left to copy (popped in sorted order).
struct Level {
    ids: ((u64, u64), (u64, u64)),
    name: OsString,
    mode: u32,
    pending: Vec<OsString>,
}

struct Walk<'a> {
    from: &'a Tree,
    opened: Option<&'a Opened>,
    /// The entry being copied, relative to the source tree: where
    /// [`Opened::mode_of`] looks, and what an error names. Only a name in
    /// memory: nothing is resolved by it.
    rel: PathBuf,
    dst_rel: &'a Path,
    stack: Vec<Level>,
    cost: u64,
}

fn identity(fd: &impl AsFd) -> io::Result<(u64, u64)> {
    let st = rustix::fs::fstat(fd)?;
    Ok((st.st_dev, st.st_ino))
}

/// The directory above `fd`, checked to be the one the walk came down
/// from (`id`): a tree moved while it is copied is not followed out.
fn up(fd: &OwnedFd, id: (u64, u64)) -> io::Result<OwnedFd> {
    let p = rustix::fs::openat(
        fd,
        "..",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    if identity(&p)? != id {
        return Err(io::Error::other("the tree was moved while it was copied"));
    }
    Ok(p)
}

impl Walk<'_> {
    /// Where the walk is, for an error: the last names down to the entry
    /// (a path past PATH_MAX is not printed whole).
    fn shown(&self) -> PathBuf {
        let depth = self.rel.components().count();
        if depth <= 16 {
            return self.rel.clone();
        }
        let mut p = PathBuf::from(format!("…({} levels)…", depth - 16));
        for c in self.rel.components().skip(depth - 16) {
            p.push(c);
        }
        p
    }

    fn err(&self, source: io::Error) -> FsError {
        FsError::Copy {
            src: self.shown(),
            dst: self.dst_rel.to_path_buf(),
            source,
        }
    }

    fn enter(&mut self, from: &OwnedFd, to: &OwnedFd, name: OsString, mode: u32) -> io::Result<()> {
        let mut pending = crate::beneath::names_of(from)?;
        pending.reverse();
        self.stack.push(Level {
            ids: (identity(from)?, identity(to)?),
            name,
            mode,
            pending,
        });
        Ok(())
    }

    /// Copy what lies below the directories `from` and `to`, and give `to`
    /// the mode `mode` last; answers `to`.
    fn run(&mut self, mut from: OwnedFd, mut to: OwnedFd, mode: u32) -> Result<OwnedFd, FsError> {
        self.enter(&from, &to, OsString::new(), mode)
            .map_err(|e| self.err(e))?;
        loop {
            let Some(level) = self.stack.last_mut() else {
                return Ok(to);
            };
            if let Some(name) = level.pending.pop() {
                self.rel.push(&name);
                let st = match rustix::fs::statat(&from, &name, AtFlags::SYMLINK_NOFOLLOW) {
                    Ok(st) => st,
                    Err(e) => {
                        return Err(FsError::Read {
                            path: self.shown(),
                            source: e.into(),
                        })
                    }
                };
                let mode = self
                    .opened
                    .and_then(|o| o.mode_of(&self.rel))
                    .unwrap_or(st.st_mode & 0o7777);
                if FileType::from_raw_mode(st.st_mode) == FileType::Directory {
                    let (f, t) = self.open_pair(&from, &to, &name).map_err(|e| self.err(e))?;
                    self.enter(&f, &t, name, mode).map_err(|e| self.err(e))?;
                    (from, to) = (f, t);
                    continue;
                }
                let cost =
                    leaf(self.from, &from, &name, &st, mode, &to, &name).map_err(|e| match e {
                        Leaf::Io(source) => self.err(source),
                        Leaf::Unsupported(what) => FsError::Unsupported {
                            src: self.shown(),
                            what,
                        },
                    })?;
                self.cost = self.cost.saturating_add(cost);
                self.rel.pop();
                continue;
            }
            // This directory's content is in: back up first (a mode that
            // shuts its owner out must not stop the way back), then give
            // the copy its attributes and, last, its mode (so a read-only
            // directory could still be filled).
            let Some(done) = self.stack.pop() else {
                return Ok(to);
            };
            let Some(parent) = self.stack.last() else {
                finish_dir(&from, &to, done.mode).map_err(|e| self.err(e))?;
                return Ok(to);
            };
            let ids = parent.ids;
            let f = up(&from, ids.0).map_err(|e| self.err(e))?;
            let t = up(&to, ids.1).map_err(|e| self.err(e))?;
            finish_dir(&from, &to, done.mode).map_err(|e| self.err(e))?;
            let st = rustix::fs::fstat(&to).map_err(|e| self.err(e.into()))?;
            self.cost = self
                .cost
                .saturating_add(fsutil::entry_cost(&st, done.name.len()));
            self.rel.pop();
            (from, to) = (f, t);
        }
    }

    /// Make the directory `name` in `to` and open both sides of it: the
    /// source's with its tree's rules (beneath, no link, and for a
    /// sandbox's tree no other mount), the copy's beneath it too.
    fn open_pair(
        &self,
        from: &OwnedFd,
        to: &OwnedFd,
        name: &OsStr,
    ) -> io::Result<(OwnedFd, OwnedFd)> {
        let f = self.from.dir_in(from, name)?;
        rustix::fs::mkdirat(to, name, Mode::from_raw_mode(0o700))?;
        let t = rustix::fs::openat(
            to,
            name,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        Ok((f, t))
    }
}

/// A copied directory's extended attributes, then its mode.
fn finish_dir(from: &OwnedFd, to: &OwnedFd, mode: u32) -> io::Result<()> {
    copy_xattrs_fd(from, to)?;
    rustix::fs::fchmod(to, Mode::from_raw_mode(mode))?;
    Ok(())
}

enum Leaf {
    Io(io::Error),
    Unsupported(&'static str),
}

impl From<io::Error> for Leaf {
    fn from(e: io::Error) -> Leaf {
        Leaf::Io(e)
    }
}

impl From<Errno> for Leaf {
    fn from(e: Errno) -> Leaf {
        Leaf::Io(e.into())
    }
}

/// Copy the entry `sname` of the directory `sdir` (not a directory; `st`
/// is what `lstat` showed of it) to the new entry `dname` of `ddir` with
/// the mode `mode`, and answer what the copy costs the host.
fn leaf(
    tree: &Tree,
    sdir: &OwnedFd,
    sname: &OsStr,
    st: &Stat,
    mode: u32,
    ddir: &OwnedFd,
    dname: &OsStr,
) -> Result<u64, Leaf> {
    match FileType::from_raw_mode(st.st_mode) {
        FileType::RegularFile => {
            let src = tree.file_in(sdir, sname)?;
            let fd = rustix::fs::openat(
                ddir,
                dname,
                OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::from_raw_mode(mode & 0o7777),
            )?;
            let mut dst = File::from(fd);
            fsutil::fill(&src, &mut dst)?;
            // The umask applied at creation; the mode is what the layer says.
            rustix::fs::fchmod(&dst, Mode::from_raw_mode(mode))?;
            copy_xattrs_fd(&src, &dst)?;
            let st = rustix::fs::fstat(&dst)?;
            return Ok(fsutil::entry_cost(&st, dname.len()));
        }
        FileType::Symlink => {
            let target = rustix::fs::readlinkat(sdir, sname, Vec::new())?;
            rustix::fs::symlinkat(target.as_c_str(), ddir, dname)?;
        }
        FileType::CharacterDevice if st.st_rdev == 0 => {
            rustix::fs::mknodat(ddir, dname, FileType::CharacterDevice, Mode::empty(), 0)?;
        }
        // A FIFO is copied as what it is (a name, no data); a socket is
        // not: it is a listener's, and nothing can be copied of it.
        FileType::Fifo => {
            rustix::fs::mknodat(ddir, dname, FileType::Fifo, Mode::empty(), 0)?;
            rustix::fs::chmodat(
                ddir,
                dname,
                Mode::from_raw_mode(mode & 0o7777),
                AtFlags::empty(),
            )?;
        }
        other => {
            return Err(Leaf::Unsupported(match other {
                FileType::Socket => "a socket",
                _ => "a device",
            }))
        }
    }
    copy_xattrs_at(sdir, sname, ddir, dname)?;
    let st = rustix::fs::statat(ddir, dname, AtFlags::SYMLINK_NOFOLLOW)?;
    Ok(fsutil::entry_cost(&st, dname.len()))
}

/// Whether an extended-attribute error means "this file system has none".
fn no_xattrs(e: &Errno) -> bool {
    *e == Errno::OPNOTSUPP
}

/// The attribute names in a `listxattr` buffer.
fn split_names(buf: &[u8]) -> Vec<OsString> {
    buf.split(|b| *b == 0)
        .filter(|s| !s.is_empty())
        .map(|s| OsStr::from_bytes(s).to_os_string())
        .collect()
}

/// Copy every extended attribute (overlay's marks included) of the open
/// `src` onto the open `dst`.
fn copy_xattrs_fd(src: &impl AsFd, dst: &impl AsFd) -> io::Result<()> {
    let size = match rustix::fs::flistxattr_query(src) {
        Ok(n) => n,
        Err(e) if no_xattrs(&e) => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    if size == 0 {
        return Ok(());
    }
    let mut list = vec![0u8; size];
    let n = rustix::fs::flistxattr(src, &mut list[..])?;
    for name in split_names(&list[..n.min(list.len())]) {
        let size = rustix::fs::fgetxattr_query(src, name.as_os_str())?;
        let mut value = vec![0u8; size];
        let n = rustix::fs::fgetxattr(src, name.as_os_str(), &mut value[..])?;
        value.truncate(n);
        rustix::fs::fsetxattr(dst, name.as_os_str(), &value, XattrFlags::empty())?;
    }
    Ok(())
}

/// Copy the extended attributes of a link or a whiteout (which cannot be
/// opened), the entry `sname` of `sdir`, onto the entry `dname` of `ddir`.
/// Both are reached as `/proc/self/fd/N/NAME` with the `l*` calls: the
/// directories are the descriptors', the names are not followed.
fn copy_xattrs_at(sdir: &OwnedFd, sname: &OsStr, ddir: &OwnedFd, dname: &OsStr) -> io::Result<()> {
    let src = crate::beneath::at_path(sdir, sname);
    let dst = crate::beneath::at_path(ddir, dname);
    let size = match rustix::fs::llistxattr_query(&src) {
        Ok(n) => n,
        Err(e) if no_xattrs(&e) => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    if size == 0 {
        return Ok(());
    }
    let mut list = vec![0u8; size];
    let n = rustix::fs::llistxattr(&src, &mut list[..])?;
    for attr in split_names(&list[..n.min(list.len())]) {
        let size = rustix::fs::lgetxattr_query(&src, attr.as_os_str())?;
        let mut value = vec![0u8; size];
        let n = rustix::fs::lgetxattr(&src, attr.as_os_str(), &mut value[..])?;
        value.truncate(n);
        match rustix::fs::lsetxattr(&dst, attr.as_os_str(), &value, XattrFlags::empty()) {
            // User attributes cannot exist on a symbolic link.
            Err(Errno::PERM) if attr.as_bytes().starts_with(b"user.") => {}
            other => other?,
        }
    }
    Ok(())
}
