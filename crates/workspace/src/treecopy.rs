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
//!
//! A file with several names is written once: its first name is copied,
//! each later one is made a hard link to that copy ([`crate::links`]
//! remembers where it is; the link is made beneath the destination's
//! descriptor, through no symbolic link). Before this a file with 40
//! links was written 41 times, and a sandbox turned 96 MB of its home
//! into 3.9 GB of the host's disk at each fork. Past the map's bounds, a
//! further file of several names is copied whole and what it costs is
//! counted: past [`UNSHARED_SLACK`] the copy is refused
//! ([`FsError::TooManyLinks`]). A copy of a tree the sandbox can write
//! ([`copy_layer`]) is also bounded as a whole: it may write no more than
//! the tree measured before it began ([`fsutil::tree_bytes`], a linked
//! file once) and a slack, else it is refused ([`FsError::PastSize`]), so
//! no fork, snapshot or restore writes more of the host's disk than the
//! tree holds, whatever the tree does meanwhile.

use crate::beneath::Tree;
use crate::fsutil::{self, FsError, Opened};
use crate::links::{self, Links};
use rustix::fs::{AtFlags, FileType, Mode, OFlags, Stat, XattrFlags};
use rustix::io::Errno;
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

/// What files of several names copied whole (past the link map's bounds,
/// or whose link could not be made) may cost one copy before it is
/// refused: a few of them are copied as the tree holds them, a sandbox's
/// millions are not.
pub const UNSHARED_SLACK: u64 = 64 << 20;

/// What a copy of a tree the sandbox can write may write beyond the size
/// the tree measured when the copy began: `size / 16` and 64 MiB more
/// (a running sandbox's layer may grow a little while it is copied).
fn size_slack(size: u64) -> u64 {
    (size / 16).saturating_add(64 << 20)
}

/// One copy's account: the hard links met, what files copied whole
/// despite their other names cost, and the most it may write.
pub(crate) struct Copying {
    links: Links,
    unshared: u64,
    /// At most what `unshared` may reach ([`UNSHARED_SLACK`]).
    slack: u64,
    size: u64,
    limit: u64,
}

impl Copying {
    /// A copy bounded by its links only (the real workspace, the owner's
    /// own tree).
    fn unbounded() -> Copying {
        Copying {
            links: Links::default(),
            unshared: 0,
            slack: UNSHARED_SLACK,
            size: u64::MAX,
            limit: u64::MAX,
        }
    }

    /// A copy of a tree that measured `size` when it began.
    fn of_size(size: u64) -> Copying {
        Copying {
            links: Links::default(),
            unshared: 0,
            slack: UNSHARED_SLACK,
            size,
            limit: size.saturating_add(size_slack(size)),
        }
    }

    /// The copy has cost `cost` so far: past its limit, refused.
    fn within(&self, cost: u64) -> Result<(), FsError> {
        if cost > self.limit {
            return Err(FsError::PastSize {
                size: self.size,
                limit: self.limit,
            });
        }
        Ok(())
    }
}

/// Copy the tree at `src` (the real workspace) to the new path `dst`.
/// Every entry is read beneath `src` without following a link (see
/// [`crate::beneath`]).
pub fn copy_tree(src: &Path, dst: &Path) -> Result<(), FsError> {
    let from = Tree::real(src).map_err(|source| FsError::Read {
        path: PathBuf::new(),
        source,
    })?;
    copy_new(&from, dst, None, &mut Copying::unbounded()).map(|_| ())
}

/// Copy the real workspace already opened as `from` (checked to be the
/// sandbox's own directory) to the new path `dst`: the directory copied
/// is the one checked, whatever is at its path now.
pub(crate) fn copy_real(from: &Tree, dst: &Path) -> Result<(), FsError> {
    copy_new(from, dst, None, &mut Copying::unbounded()).map(|_| ())
}

/// [`copy_tree`] of a tree the sandbox can write (a layer, a kept home, a
/// snapshot), opened with [`Opened::up`]: each entry gets the mode it had
/// before it was opened. Answers what the copy costs the host's disk
/// (every entry below its top, priced by [`fsutil::entry_cost`], a file
/// of several names once). Bounded by what the tree measures now: see
/// the module's comment.
pub(crate) fn copy_layer(src: &Path, dst: &Path, opened: &Opened) -> Result<u64, FsError> {
    let from = Tree::layer(src).map_err(|source| FsError::Read {
        path: PathBuf::new(),
        source,
    })?;
    // Measured after `opened` made it readable, before anything is
    // written: a tree that cannot be measured is not copied.
    let size = fsutil::tree_bytes(src).ok_or_else(|| FsError::Read {
        path: PathBuf::new(),
        source: io::Error::other("the tree cannot be measured"),
    })?;
    copy_new(&from, dst, Some(opened), &mut Copying::of_size(size))
}

/// Make the new directory `dst` (one of warden's own paths) a copy of the
/// tree `from`.
fn copy_new(
    from: &Tree,
    dst: &Path,
    opened: Option<&Opened>,
    cx: &mut Copying,
) -> Result<u64, FsError> {
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
    copy_in(from, Path::new(""), &to, Path::new(""), opened, cx)
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
    copy_in(
        from,
        src_rel,
        to,
        dst_rel,
        opened,
        &mut Copying::unbounded(),
    )
}

fn copy_in(
    from: &Tree,
    src_rel: &Path,
    to: &Tree,
    dst_rel: &Path,
    opened: Option<&Opened>,
    cx: &mut Copying,
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
        let target = Target {
            to,
            dir: &ddir,
            name: dname,
            rel: dst_rel,
        };
        let cost = leaf(from, &sdir, sname, &st, mode, &target, cx).map_err(|e| match e {
            Leaf::Io(source) => copy_err(source),
            Leaf::Unsupported(what) => FsError::Unsupported {
                src: src_rel.to_path_buf(),
                what,
            },
            Leaf::Refused(e) => e,
        })?;
        cx.within(cost)?;
        return Ok(cost);
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
        to,
        opened,
        rel: src_rel.to_path_buf(),
        src_rel,
        dst_rel,
        stack: Vec::new(),
        cost: 0,
        cx,
    };
    let ddir = walk.run(sdir, ddir, mode)?;
    if !top {
        let st = rustix::fs::fstat(&ddir).map_err(|e| copy_err(e.into()))?;
        let name_len = dst_rel.file_name().map_or(0, |n| n.len());
        walk.cost = walk.cost.saturating_add(fsutil::entry_cost(&st, name_len));
    }
    walk.cx.within(walk.cost)?;
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
    to: &'a Tree,
    opened: Option<&'a Opened>,
    /// The entry being copied, relative to the source tree: where
    /// [`Opened::mode_of`] looks, and what an error names. Only a name in
    /// memory: nothing is resolved by it.
    rel: PathBuf,
    src_rel: &'a Path,
    dst_rel: &'a Path,
    stack: Vec<Level>,
    cost: u64,
    cx: &'a mut Copying,
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

    /// The copy of the entry being copied, relative to the destination
    /// tree: where a later name of it finds it.
    fn dst_path(&self) -> PathBuf {
        match self.rel.strip_prefix(self.src_rel) {
            Ok(below) => self.dst_rel.join(below),
            Err(_) => self.dst_rel.to_path_buf(),
        }
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
                let rel = if links::shared(&st) {
                    self.dst_path()
                } else {
                    PathBuf::new()
                };
                let target = Target {
                    to: self.to,
                    dir: &to,
                    name: &name,
                    rel: &rel,
                };
                let cost = leaf(self.from, &from, &name, &st, mode, &target, self.cx).map_err(
                    |e| match e {
                        Leaf::Io(source) => self.err(source),
                        Leaf::Unsupported(what) => FsError::Unsupported {
                            src: self.shown(),
                            what,
                        },
                        Leaf::Refused(e) => e,
                    },
                )?;
                self.cost = self.cost.saturating_add(cost);
                self.cx.within(self.cost)?;
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
    Refused(FsError),
}

/// Where a leaf is copied to: the new entry `name` of the directory `dir`
/// of the destination tree `to`, at `rel` in it (kept for a file of
/// several names only, whose later names link to it).
struct Target<'a> {
    to: &'a Tree,
    dir: &'a OwnedFd,
    name: &'a OsStr,
    rel: &'a Path,
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

/// Make the new entry `dname` of `ddir` a hard link to the first copy at
/// `first` (relative to the destination tree `to`, opened beneath it
/// through no symbolic link; the link itself is not followed).
fn link_to(to: &Tree, first: &Path, ddir: &OwnedFd, dname: &OsStr) -> io::Result<()> {
    let (dir, name) = to.parent(first)?;
    rustix::fs::linkat(&dir, name, ddir, dname, AtFlags::empty())?;
    Ok(())
}

/// Copy the entry `sname` of the directory `sdir` (not a directory; `st`
/// is what `lstat` showed of it) to the new entry `at` with the mode
/// `mode`, and answer what the copy costs the host. A later name of a
/// file copied already becomes a link to its copy, and costs its name.
fn leaf(
    tree: &Tree,
    sdir: &OwnedFd,
    sname: &OsStr,
    st: &Stat,
    mode: u32,
    at: &Target<'_>,
    cx: &mut Copying,
) -> Result<u64, Leaf> {
    let (ddir, dname) = (at.dir, at.name);
    match FileType::from_raw_mode(st.st_mode) {
        FileType::RegularFile => {
            let shared = links::shared(st);
            let mut whole = false;
            if shared {
                if let Some(first) = cx.links.first_copy(st) {
                    if link_to(at.to, &first, ddir, dname).is_ok() {
                        return Ok(fsutil::name_cost(dname.len()));
                    }
                    // The first copy cannot be linked to (a directory
                    // on its way shut by its mode, a link count at the
                    // file system's most): this name is copied whole,
                    // and counted.
                    whole = true;
                }
            }
            // A file of several names that no later name will find is
            // counted before it is written, and refused past the slack.
            if shared && (whole || !cx.links.record(st, at.rel)) {
                cx.unshared = cx
                    .unshared
                    .saturating_add(fsutil::entry_cost(st, dname.len()));
                if cx.unshared > cx.slack {
                    return Err(Leaf::Refused(FsError::TooManyLinks { slack: cx.slack }));
                }
            }
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::os::unix::fs::MetadataExt;

    fn tmp(tag: &str) -> PathBuf {
        let p = std::env::temp_dir().join(format!("warden-treecopy-{tag}-{}", std::process::id()));
        let _ = fsutil::remove_tree(&p);
        fs::create_dir_all(&p).unwrap();
        p
    }

    /// `src/a/f` (64 KiB) with names in three directories, and `src/b/o`
    /// with two names.
    fn linked_tree(tag: &str) -> (PathBuf, PathBuf) {
        let top = tmp(tag);
        let src = top.join("src");
        for d in ["a", "b", "c/d"] {
            fs::create_dir_all(src.join(d)).unwrap();
        }
        fs::write(src.join("a/f"), vec![7u8; 64 << 10]).unwrap();
        for (i, d) in ["a", "b", "c/d"].iter().enumerate() {
            fs::hard_link(src.join("a/f"), src.join(d).join(format!("l{i}"))).unwrap();
        }
        fs::write(src.join("b/o"), "other").unwrap();
        fs::hard_link(src.join("b/o"), src.join("c/o2")).unwrap();
        (top, src)
    }

    fn copy_with(src: &Path, dst: &Path, cx: &mut Copying) -> Result<u64, FsError> {
        let from = Tree::layer(src).unwrap();
        copy_new(&from, dst, None, cx)
    }

    fn bounded(entries: usize, slack: u64, limit: u64) -> Copying {
        Copying {
            links: Links::with_bounds(entries, 1 << 20),
            unshared: 0,
            slack,
            size: limit,
            limit,
        }
    }

    #[test]
    fn later_names_of_a_file_are_links_to_its_one_copy_and_cost_their_names() {
        let (top, src) = linked_tree("links");
        let dst = top.join("dst");
        let size = fsutil::tree_bytes(&src).unwrap();
        let cost = copy_with(&src, &dst, &mut Copying::of_size(size)).unwrap();
        let f = fs::metadata(dst.join("a/f")).unwrap();
        assert_eq!(f.nlink(), 4);
        for l in ["a/l0", "b/l1", "c/d/l2"] {
            assert_eq!(fs::metadata(dst.join(l)).unwrap().ino(), f.ino(), "{l}");
        }
        assert_eq!(
            fs::metadata(dst.join("c/o2")).unwrap().ino(),
            fs::metadata(dst.join("b/o")).unwrap().ino()
        );
        assert_eq!(fs::read(dst.join("c/d/l2")).unwrap(), vec![7u8; 64 << 10]);
        // Priced as the measure prices the source: the data once.
        assert_eq!(cost, size);
        assert_eq!(fsutil::tree_bytes(&dst), Some(size));
        assert!(size < 2 * (64 << 10), "{size}");
        let _ = fsutil::remove_tree(&top);
    }

    #[test]
    fn past_the_maps_bound_files_copied_whole_are_counted_and_refused_past_the_slack() {
        let (top, src) = linked_tree("bound");
        // Room for one inode: `a/f` is linked, `b/o` is copied whole
        // twice, which a slack of 64 KiB takes.
        let dst = top.join("dst");
        copy_with(&src, &dst, &mut bounded(1, 64 << 10, u64::MAX)).unwrap();
        assert_eq!(fs::metadata(dst.join("a/f")).unwrap().nlink(), 4);
        assert_eq!(fs::metadata(dst.join("b/o")).unwrap().nlink(), 1);
        // No room: the 64 KiB file's names copied whole pass the slack.
        let dst = top.join("dst2");
        let refused = copy_with(&src, &dst, &mut bounded(0, 64 << 10, u64::MAX));
        assert!(
            matches!(refused, Err(FsError::TooManyLinks { .. })),
            "{refused:?}"
        );
        assert_eq!(
            refused.unwrap_err().code(),
            Some(crate::fsutil::TOO_MANY_LINKS)
        );
        let _ = fsutil::remove_tree(&top);
    }

    #[test]
    fn a_copy_that_would_write_more_than_its_bound_is_refused() {
        let (top, src) = linked_tree("past");
        let refused = copy_with(
            &src,
            &top.join("dst"),
            &mut bounded(1 << 10, u64::MAX, 32 << 10),
        );
        assert!(
            matches!(refused, Err(FsError::PastSize { .. })),
            "{refused:?}"
        );
        // The same tree within its measure plus the slack is copied.
        let size = fsutil::tree_bytes(&src).unwrap();
        copy_with(&src, &top.join("dst2"), &mut Copying::of_size(size)).unwrap();
        let _ = fsutil::remove_tree(&top);
    }
}
