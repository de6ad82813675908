//! The size-limited upper layer of a workspace overlay (`--disk`): while
//! the sandbox runs, the layer lives in a tmpfs of that size, so that a
//! write past the limit fails with ENOSPC inside and the host's disk is
//! never spent beyond it. The layer is restored from warden's state
//! directory into the tmpfs when the sandbox starts (by the init, in
//! `mounts::overlay::mount_overlay`) and written back when it stops (by the
//! supervisor, through a descriptor of the tmpfs the init handed over).
//!
//! The copy keeps what overlayfs reads from a layer: file types (whiteouts
//! are 0:0 character devices), modes, owners, times, extended attributes
//! (`user.overlay.*` marks: opaque directories, origins), hard links
//! within the layer, and holes (a sparse file stays sparse).

use rustix::fs::{
    AtFlags, FileType, Mode, OFlags, ResolveFlags, Stat, Timespec, Timestamps, XattrFlags,
};
use rustix::io::Errno;
use std::ffi::{CStr, CString, OsStr, OsString};
use std::fs::{self, File};
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use warden_workspace::links::{self, Links};

/// Marks a sandbox's state while its layer exists only in memory; removed
/// once the layer is written back. It holds the supervisor's PID, the
/// number of its descriptor of the layer's tmpfs, the supervisor's start
/// time and the tmpfs's device (`warden_workspace::UnsavedMark`), so that
/// `warden diff` reads the running layer at `/proc/PID/fd/N/upper` while
/// that very supervisor runs, never a recycled PID's. Found while no run
/// holds the sandbox, it says that the last run ended without saving (its
/// supervisor was killed) and its changes are lost.
pub const UNSAVED_MARK: &str = "layer-unsaved";

#[derive(Debug, thiserror::Error)]
pub enum LayerError {
    #[error("cannot copy the layer entry {path}")]
    Copy {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot replace the saved layer {path} with the sandbox's changes")]
    Replace {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

fn at(path: &Path) -> impl FnOnce(io::Error) -> LayerError + '_ {
    move |source| LayerError::Copy {
        path: path.to_path_buf(),
        source,
    }
}

/// Copy the layer `src` to the new directory `dst`. `make_readable`: the
/// source is disposable and may be made readable by its owner where its
/// modes say otherwise (an unprivileged supervisor saving a layer with a
/// mode-000 file); the copy gets the original modes.
///
/// The walk goes from directory descriptor to directory descriptor on
/// both sides (`openat` of one name, `..` on the way back, each `..`
/// checked to be the directory it came down from) with an explicit stack
/// of names: neither the depth of the tree nor the length of its paths
/// limits the copy (a named sandbox's home of 30,000 nested directories
/// once failed to be written back, past PATH_MAX, and the previous home
/// came back), no recursion grows the stack, and two descriptors are held
/// whatever the depth. No link of the layer is followed.
pub fn copy_layer(src: &Path, dst: &Path, make_readable: bool) -> Result<(), LayerError> {
    let meta = fs::symlink_metadata(src).map_err(at(src))?;
    if !meta.is_dir() {
        return Err(at(src)(io::Error::other("it is not a directory")));
    }
    if make_readable && meta.mode() & 0o500 != 0o500 {
        fs::set_permissions(src, fs::Permissions::from_mode(meta.mode() | 0o700))
            .map_err(at(src))?;
    }
    let from = rustix::fs::open(src, DIR, Mode::empty()).map_err(|e| at(src)(e.into()))?;
    fs::create_dir(dst).map_err(at(dst))?;
    let to = rustix::fs::open(dst, DIR, Mode::empty()).map_err(|e| at(dst)(e.into()))?;
    rustix::fs::fchmod(&to, Mode::from_raw_mode(0o700)).map_err(|e| at(dst)(e.into()))?;
    let st = rustix::fs::fstat(&from).map_err(|e| at(src)(e.into()))?;
    let root = rustix::io::fcntl_dupfd_cloexec(&to, 0).map_err(|e| at(dst)(e.into()))?;
    let mut walk = Walk {
        make_readable,
        links: Links::default(),
        unshared: 0,
        root,
        stack: Vec::new(),
        top: src.to_path_buf(),
    };
    walk.run(from, to, st)
}

const DIR: OFlags = OFlags::RDONLY
    .union(OFlags::DIRECTORY)
    .union(OFlags::NOFOLLOW)
    .union(OFlags::CLOEXEC);

/// What files of several names copied whole may cost one copy: past the
/// link map's bounds ([`links::MAX_LINKED`] inodes waiting for their other
/// names at once), or when the first copy cannot be linked to, a further
/// name is copied as a file of its own and counted; past this the copy is
/// refused. Before, past 256 such inodes every further name was copied
/// whole without a bound, so the write-back of a `--disk` layer could
/// write many times `--disk` to the host's disk.
const UNSHARED_SLACK: u64 = 64 << 20;

/// How a first copy's directory is opened again, from the copy's top:
/// beneath it, through no link, on no other mount (no /proc is needed:
/// the init restores before its own is mounted).
const BENEATH: ResolveFlags = ResolveFlags::BENEATH
    .union(ResolveFlags::NO_SYMLINKS)
    .union(ResolveFlags::NO_MAGICLINKS)
    .union(ResolveFlags::NO_XDEV);

/// One directory being copied: the source's status (its copy gets the
/// owner, mode and times when its content is in), both sides' identities
/// for the way back, its name in its parent, and the names left to copy.
struct Level {
    st: Stat,
    ids: ((u64, u64), (u64, u64)),
    name: OsString,
    pending: Vec<OsString>,
}

struct Walk {
    make_readable: bool,
    /// Hard links of the layer waiting for their other names: where the
    /// first copy is, relative to the copy's top.
    links: Links,
    /// What files of several names copied whole have cost.
    unshared: u64,
    /// The copy's top, where a first copy is found again.
    root: OwnedFd,
    stack: Vec<Level>,
    top: PathBuf,
}

fn identity(fd: &OwnedFd) -> io::Result<(u64, u64)> {
    let st = rustix::fs::fstat(fd)?;
    Ok((st.st_dev, st.st_ino))
}

/// The names in the directory `dir`, to be popped in sorted order.
fn names(dir: &OwnedFd) -> io::Result<Vec<OsString>> {
    let mut out = Vec::new();
    for entry in rustix::fs::Dir::read_from(dir)? {
        let entry = entry?;
        let name = entry.file_name().to_bytes();
        if name != b"." && name != b".." {
            out.push(OsStr::from_bytes(name).to_os_string());
        }
    }
    out.sort();
    out.reverse();
    Ok(out)
}

impl Walk {
    /// Where an entry is, for an error: the layer and the last names down
    /// to it (a path past PATH_MAX is not printed whole).
    fn shown(&self, name: &OsStr) -> PathBuf {
        let depth = self.stack.len();
        let mut p = self.top.clone();
        if depth > 8 {
            p.push(format!("…({} levels)…", depth - 8));
        }
        for l in self.stack.iter().skip(1).skip(depth.saturating_sub(9)) {
            p.push(&l.name);
        }
        p.push(name);
        p
    }

    fn err(&self, name: &OsStr, source: io::Error) -> LayerError {
        LayerError::Copy {
            path: self.shown(name),
            source,
        }
    }

    fn enter(&mut self, from: &OwnedFd, to: &OwnedFd, st: Stat, name: OsString) -> io::Result<()> {
        self.stack.push(Level {
            st,
            ids: (identity(from)?, identity(to)?),
            name,
            pending: names(from)?,
        });
        Ok(())
    }

    fn run(&mut self, mut from: OwnedFd, mut to: OwnedFd, st: Stat) -> Result<(), LayerError> {
        copy_xattrs_fd(&from, &to).map_err(|e| self.err(OsStr::new(""), e))?;
        self.enter(&from, &to, st, OsString::new())
            .map_err(|e| self.err(OsStr::new(""), e))?;
        loop {
            let Some(level) = self.stack.last_mut() else {
                return Ok(());
            };
            if let Some(name) = level.pending.pop() {
                let st = match rustix::fs::statat(&from, &name, AtFlags::SYMLINK_NOFOLLOW) {
                    Ok(st) => st,
                    Err(e) => return Err(self.err(&name, e.into())),
                };
                if FileType::from_raw_mode(st.st_mode) != FileType::Directory {
                    self.leaf(&from, &to, &name, &st)
                        .map_err(|e| self.err(&name, e))?;
                    continue;
                }
                let (f, t) = self
                    .open_pair(&from, &to, &name, &st)
                    .map_err(|e| self.err(&name, e))?;
                self.enter(&f, &t, st, name.clone())
                    .map_err(|e| self.err(&name, e))?;
                (from, to) = (f, t);
                continue;
            }
            // This directory's content is in: back up first (a mode that
            // shuts its owner out must not stop the way back), then give
            // the copy its owner, mode and times.
            let Some(done) = self.stack.pop() else {
                return Ok(());
            };
            let Some(parent) = self.stack.last() else {
                return finish_fd(&to, &done.st).map_err(|e| self.err(OsStr::new(""), e));
            };
            let ids = parent.ids;
            let up = |fd: &OwnedFd, id: (u64, u64)| -> io::Result<OwnedFd> {
                let p = rustix::fs::openat(fd, "..", DIR, Mode::empty())?;
                if identity(&p)? != id {
                    return Err(io::Error::other("the tree was moved while it was copied"));
                }
                Ok(p)
            };
            let f = up(&from, ids.0).map_err(|e| self.err(&done.name, e))?;
            let t = up(&to, ids.1).map_err(|e| self.err(&done.name, e))?;
            finish_fd(&to, &done.st).map_err(|e| self.err(&done.name, e))?;
            (from, to) = (f, t);
        }
    }

    /// Make the directory `name` in `to` and open both sides of it.
    fn open_pair(
        &self,
        from: &OwnedFd,
        to: &OwnedFd,
        name: &OsStr,
        st: &Stat,
    ) -> io::Result<(OwnedFd, OwnedFd)> {
        if self.make_readable && st.st_mode & 0o500 != 0o500 {
            rustix::fs::chmodat(
                from,
                name,
                Mode::from_raw_mode((st.st_mode & 0o7777) | 0o700),
                AtFlags::empty(),
            )?;
        }
        rustix::fs::mkdirat(to, name, Mode::from_raw_mode(0o700))?;
        let f = rustix::fs::openat(from, name, DIR, Mode::empty())?;
        let t = rustix::fs::openat(to, name, DIR, Mode::empty())?;
        copy_xattrs_fd(&f, &t)?;
        Ok((f, t))
    }

    /// Copy the entry `name` of `from` (not a directory) into `to`.
    fn leaf(&mut self, from: &OwnedFd, to: &OwnedFd, name: &OsStr, st: &Stat) -> io::Result<()> {
        let ft = FileType::from_raw_mode(st.st_mode);
        if ft == FileType::RegularFile {
            return self.file(from, to, name, st);
        }
        if ft == FileType::Symlink {
            let target = rustix::fs::readlinkat(from, name, Vec::new())?;
            rustix::fs::symlinkat(target.as_c_str(), to, name)?;
        } else {
            // Whiteouts (0:0 character devices) are what a layer holds
            // here; a FIFO, socket or device is recreated as such.
            rustix::fs::mknodat(
                to,
                name,
                ft,
                Mode::from_raw_mode(st.st_mode & 0o7777),
                st.st_rdev,
            )?;
        }
        copy_xattrs_at(from, to, name)?;
        finish_at(to, name, st, ft == FileType::Symlink)
    }

    /// The copy of `name` of the directory being copied, relative to the
    /// copy's top.
    fn dst_path(&self, name: &OsStr) -> PathBuf {
        let mut p: PathBuf = self
            .stack
            .iter()
            .skip(1)
            .map(|l| l.name.as_os_str())
            .collect();
        p.push(name);
        p
    }

    /// Make `name` of `to` a hard link to the first copy at `first`.
    fn link_to(&self, first: &Path, to: &OwnedFd, name: &OsStr) -> io::Result<()> {
        let Some(file) = first.file_name() else {
            return Err(io::Error::other("a first copy without a name"));
        };
        let parent = first.parent().filter(|p| !p.as_os_str().is_empty());
        let dir = match parent {
            Some(p) => rustix::fs::openat2(&self.root, p, DIR, Mode::empty(), BENEATH)?,
            None => rustix::io::fcntl_dupfd_cloexec(&self.root, 0)?,
        };
        rustix::fs::linkat(&dir, file, to, name, AtFlags::empty())?;
        Ok(())
    }

    /// A regular file: data (holes kept), attributes, then owner, mode
    /// and times; a further name of a hard link becomes a link again.
    fn file(&mut self, from: &OwnedFd, to: &OwnedFd, name: &OsStr, st: &Stat) -> io::Result<()> {
        let shared = links::shared(st);
        let mut whole = false;
        if shared {
            if let Some(first) = self.links.first_copy(st) {
                if self.link_to(&first, to, name).is_ok() {
                    return Ok(());
                }
                // Its first copy's directory is shut by its mode, or
                // the file has the most links its file system allows.
                whole = true;
            }
        }
        if shared && (whole || !self.links.record(st, &self.dst_path(name))) {
            let size = u64::try_from(st.st_blocks)
                .unwrap_or(u64::MAX)
                .saturating_mul(512);
            self.unshared = self.unshared.saturating_add(size);
            if self.unshared > UNSHARED_SLACK {
                return Err(io::Error::other(format!(
                    "the layer holds more hard-linked files than a copy keeps as links ({} at once), and copying them whole would write more than {UNSHARED_SLACK} bytes beyond the layer's own size",
                    links::MAX_LINKED
                )));
            }
        }
        if self.make_readable && st.st_mode & 0o400 == 0 {
            rustix::fs::chmodat(
                from,
                name,
                Mode::from_raw_mode((st.st_mode & 0o7777) | 0o600),
                AtFlags::empty(),
            )?;
        }
        let src = File::from(rustix::fs::openat(
            from,
            name,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
            Mode::empty(),
        )?);
        let dst = File::from(rustix::fs::openat(
            to,
            name,
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )?);
        copy_sparse(&src, &dst, u64::try_from(st.st_size).unwrap_or(0))?;
        copy_xattrs_fd(&src, &dst)?;
        let dst = OwnedFd::from(dst);
        finish_fd(&dst, st)?;
        Ok(())
    }
}

/// The copy's owner where the copier may set it (root, or the init with
/// its namespace's capabilities); an unprivileged copier owns the copy,
/// which is the same user; an owner the sandbox's namespace does not map
/// (a layer restored from a snapshot as root) cannot be given there
/// (EINVAL), and the copy stays the sandbox's own.
fn chown_result(r: rustix::io::Result<()>) -> io::Result<()> {
    match r {
        Ok(()) | Err(Errno::PERM | Errno::INVAL) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

fn times_of(st: &Stat) -> Timestamps {
    Timestamps {
        last_access: Timespec {
            tv_sec: st.st_atime as _,
            tv_nsec: st.st_atime_nsec as _,
        },
        last_modification: Timespec {
            tv_sec: st.st_mtime as _,
            tv_nsec: st.st_mtime_nsec as _,
        },
    }
}

/// Owner, mode and times of the open copy `fd` from `st`.
fn finish_fd(fd: &OwnedFd, st: &Stat) -> io::Result<()> {
    chown_result(rustix::fs::fchown(
        fd,
        Some(rustix::fs::Uid::from_raw(st.st_uid)),
        Some(rustix::fs::Gid::from_raw(st.st_gid)),
    ))?;
    rustix::fs::fchmod(fd, Mode::from_raw_mode(st.st_mode & 0o7777))?;
    rustix::fs::futimens(fd, &times_of(st))?;
    Ok(())
}

/// Owner, mode (not of a link) and times of the copy `name` of `to`,
/// which cannot be opened (a link, a whiteout, a FIFO).
fn finish_at(to: &OwnedFd, name: &OsStr, st: &Stat, symlink: bool) -> io::Result<()> {
    chown_result(rustix::fs::chownat(
        to,
        name,
        Some(rustix::fs::Uid::from_raw(st.st_uid)),
        Some(rustix::fs::Gid::from_raw(st.st_gid)),
        AtFlags::SYMLINK_NOFOLLOW,
    ))?;
    if !symlink {
        // The copy is warden's own, made just now: nothing swaps it.
        rustix::fs::chmodat(
            to,
            name,
            Mode::from_raw_mode(st.st_mode & 0o7777),
            AtFlags::empty(),
        )?;
    }
    rustix::fs::utimensat(to, name, &times_of(st), AtFlags::SYMLINK_NOFOLLOW)?;
    Ok(())
}

/// Copy the data of `from` into the new file `to`, extent by extent:
/// holes stay holes.
fn copy_sparse(from: &File, to: &File, len: u64) -> io::Result<()> {
    let mut pos = 0u64;
    let mut buf = vec![0u8; 256 * 1024];
    while pos < len {
        let data = match rustix::fs::seek(from, rustix::fs::SeekFrom::Data(pos)) {
            Ok(d) => d,
            // No data after `pos`: the rest is a hole.
            Err(Errno::NXIO) => break,
            Err(e) => return Err(e.into()),
        };
        let hole = rustix::fs::seek(from, rustix::fs::SeekFrom::Hole(data))?.min(len);
        let mut off = data;
        while off < hole {
            let want = usize::try_from(hole - off)
                .unwrap_or(buf.len())
                .min(buf.len());
            let n = from.read_at(&mut buf[..want], off)?;
            if n == 0 {
                break;
            }
            to.write_all_at(&buf[..n], off)?;
            off += n as u64;
        }
        pos = hole.max(off);
    }
    to.set_len(len)
}

/// Whether an attribute that could not be set must stop the copy:
/// overlayfs's own marks must come through; other attributes a sandbox
/// set (security.*, trusted.* where not permitted) are kept where the
/// copier may set them.
fn must_keep(name: &CStr) -> bool {
    name.to_bytes().starts_with(b"user.overlay.")
}

fn split_names(buf: &[u8]) -> Vec<CString> {
    buf.split(|b| *b == 0)
        .filter(|s| !s.is_empty())
        .filter_map(|s| CString::new(s.to_vec()).ok())
        .collect()
}

/// Every extended attribute of the open `src` onto the open `dst`.
fn copy_xattrs_fd(src: &impl AsFd, dst: &impl AsFd) -> io::Result<()> {
    let mut buf = vec![0u8; 4096];
    let n = loop {
        match rustix::fs::flistxattr(src, &mut buf[..]) {
            Ok(n) => break n,
            Err(Errno::RANGE) if buf.len() < (1 << 20) => buf.resize(buf.len() * 4, 0),
            Err(Errno::OPNOTSUPP) => return Ok(()),
            Err(e) => return Err(e.into()),
        }
    };
    for name in split_names(&buf[..n.min(buf.len())]) {
        let mut value = vec![0u8; 64 * 1024];
        let n = rustix::fs::fgetxattr(src, name.as_c_str(), &mut value[..])?;
        let set = rustix::fs::fsetxattr(dst, name.as_c_str(), &value[..n], XattrFlags::empty());
        if let Err(e) = set {
            if must_keep(&name) {
                return Err(e.into());
            }
        }
    }
    Ok(())
}

/// The extended attributes of the entry `name` of `from` (a link or a
/// whiteout, which cannot be opened) onto the entry `name` of `to`,
/// through `/proc/self/fd/N/NAME` with the `l*` calls: the directories
/// are the descriptors', the names are not followed.
fn copy_xattrs_at(from: &OwnedFd, to: &OwnedFd, name: &OsStr) -> io::Result<()> {
    let at = |fd: &OwnedFd| {
        let mut p = PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()));
        p.push(name);
        p
    };
    let (src, dst) = (at(from), at(to));
    let mut buf = vec![0u8; 4096];
    let n = loop {
        match rustix::fs::llistxattr(&src, &mut buf[..]) {
            Ok(n) => break n,
            Err(Errno::RANGE) if buf.len() < (1 << 20) => buf.resize(buf.len() * 4, 0),
            Err(Errno::OPNOTSUPP) => return Ok(()),
            // No /proc of this process yet (the init restores before it
            // mounts its own): a link or a whiteout holds no user.*
            // attribute (the kernel allows those on files and directories
            // only), so only a privileged copier's trusted.* ones are left.
            Err(Errno::NOENT | Errno::NOTDIR | Errno::ACCESS) => return Ok(()),
            Err(e) => return Err(e.into()),
        }
    };
    for attr in split_names(&buf[..n.min(buf.len())]) {
        let mut value = vec![0u8; 64 * 1024];
        let n = rustix::fs::lgetxattr(&src, attr.as_c_str(), &mut value[..])?;
        let set = rustix::fs::lsetxattr(&dst, attr.as_c_str(), &value[..n], XattrFlags::empty());
        if let Err(e) = set {
            if must_keep(&attr) {
                return Err(e.into());
            }
        }
    }
    Ok(())
}

/// Remove the tree at `path` from descriptor to descriptor, making
/// directories writable on the way (the kernel leaves `work/work` at mode
/// 000; a sandbox may leave 0500 directories), at any depth.
pub fn remove_tree(path: &Path) -> io::Result<()> {
    warden_workspace::fsutil::remove_tree(path).map_err(io::Error::other)
}

/// Write the running layer `live` (the tmpfs's `upper`) back over the
/// saved layer `saved`: copied beside it first, then exchanged with it in
/// one step, so that a failure at any point leaves the previous saved
/// layer whole.
pub fn save(live: &Path, saved: &Path) -> Result<(), LayerError> {
    let name = saved.file_name().unwrap_or(OsStr::new("upper"));
    let mut side = name.to_os_string();
    side.push(".saving");
    let beside = saved.with_file_name(side);
    let replace = |source| LayerError::Replace {
        path: saved.to_path_buf(),
        source,
    };
    remove_tree(&beside).map_err(replace)?;
    if let Err(e) = copy_layer(live, &beside, !crate::host::is_root()) {
        let _ = remove_tree(&beside);
        return Err(e);
    }
    rustix::fs::renameat_with(
        rustix::fs::CWD,
        &beside,
        rustix::fs::CWD,
        saved,
        rustix::fs::RenameFlags::EXCHANGE,
    )
    .map_err(|e| io::Error::from_raw_os_error(e.raw_os_error()))
    .map_err(replace)?;
    remove_tree(&beside).map_err(replace)
}
