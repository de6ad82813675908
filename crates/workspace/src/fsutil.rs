//! Tree operations shared by snapshots, discards and the copy fallback:
//! removal that copes with what overlayfs leaves behind, and copies that keep
//! everything overlayfs reads (types, modes, symlink targets, whiteout
//! devices, extended attributes), with reflinks where the file system has
//! them.

use crate::overlay;
use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;
use std::ffi::{OsStr, OsString};
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum FsError {
    #[error("cannot remove {}", crate::printable_path(.path))]
    Remove {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot read {}", crate::printable_path(.path))]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot copy {} to {}", crate::printable_path(.src), crate::printable_path(.dst))]
    Copy {
        src: PathBuf,
        dst: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error(
        "cannot copy {}: {what} is neither a file, a directory, a symbolic link nor a whiteout",
        crate::printable_path(.src)
    )]
    Unsupported { src: PathBuf, what: &'static str },
}

/// Run `f` on a thread with a large stack: the tree walks recurse once per
/// directory level, and a tree may be as deep as PATH_MAX allows (about
/// 2,000 levels), more than a test thread's or a small main thread's stack
/// holds in a debug build. The stack is virtual memory, used only as deep
/// as the walk goes. Where no thread can be made, `f` runs here.
pub(crate) fn deep_stack<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    let mut f = Some(f);
    let ran = std::thread::scope(|s| {
        let mut slot = None;
        let spawned = std::thread::Builder::new()
            .name("warden-walk".into())
            .stack_size(256 << 20)
            .spawn_scoped(s, || f.take().map(|f| f()));
        if let Ok(handle) = spawned {
            slot = handle.join().ok().flatten();
        }
        slot
    });
    match (ran, f) {
        (Some(v), _) => v,
        (None, Some(f)) => f(),
        // The thread ran `f` and panicked: a bug, not an input.
        (None, None) => std::panic::resume_unwind(Box::new("a tree walk panicked")),
    }
}

/// Remove `path` and everything below it; a missing path is not an error.
///
/// Overlayfs leaves `work/work` with mode 000 after a mount, and a sandbox
/// may leave directories of any mode in its layer; an unprivileged owner can
/// neither list nor empty them until their mode is restored, so every
/// directory is made 0700 before it is read. The walk goes from directory
/// descriptor to directory descriptor (`openat`, `..` on the way back) and
/// keeps only names, so a tree deeper than PATH_MAX, or deeper than the
/// descriptors a process may hold, is removed all the same.
pub fn remove_tree(path: &Path) -> Result<(), FsError> {
    let err = |source: io::Error| FsError::Remove {
        path: path.to_path_buf(),
        source,
    };
    let meta = match fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(err(e)),
    };
    if !meta.is_dir() {
        return fs::remove_file(path).map_err(err);
    }
    if meta.mode() & 0o700 != 0o700 {
        fs::set_permissions(path, fs::Permissions::from_mode(0o700)).map_err(err)?;
    }
    let open_dir = |at: &dyn AsFd, name: &OsStr| {
        rustix::fs::openat(
            at,
            name,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
    };
    let mut cur = open_dir(&rustix::fs::CWD, path.as_os_str()).map_err(|e| err(e.into()))?;
    // The names of the directories descended into, from `path` down.
    let mut names: Vec<OsString> = Vec::new();
    loop {
        let mut subdirs = Vec::new();
        for entry in rustix::fs::Dir::read_from(&cur).map_err(|e| err(e.into()))? {
            let entry = entry.map_err(|e| err(e.into()))?;
            let name = OsStr::from_bytes(entry.file_name().to_bytes()).to_os_string();
            if name == "." || name == ".." {
                continue;
            }
            let is_dir = match entry.file_type() {
                FileType::Directory => true,
                FileType::Unknown => rustix::fs::statat(&cur, &name, AtFlags::SYMLINK_NOFOLLOW)
                    .map(|st| FileType::from_raw_mode(st.st_mode) == FileType::Directory)
                    .map_err(|e| err(e.into()))?,
                _ => false,
            };
            if is_dir {
                subdirs.push(name);
            } else {
                match rustix::fs::unlinkat(&cur, &name, AtFlags::empty()) {
                    Ok(()) | Err(Errno::NOENT) => {}
                    Err(e) => return Err(err(e.into())),
                }
            }
        }
        if let Some(name) = subdirs.into_iter().next() {
            let st = rustix::fs::statat(&cur, &name, AtFlags::SYMLINK_NOFOLLOW)
                .map_err(|e| err(e.into()))?;
            if st.st_mode & 0o700 != 0o700 {
                rustix::fs::chmodat(&cur, &name, Mode::from_raw_mode(0o700), AtFlags::empty())
                    .map_err(|e| err(e.into()))?;
            }
            cur = open_dir(&cur, &name).map_err(|e| err(e.into()))?;
            names.push(name);
            continue;
        }
        let Some(name) = names.pop() else { break };
        cur = open_dir(&cur, OsStr::new("..")).map_err(|e| err(e.into()))?;
        match rustix::fs::unlinkat(&cur, &name, AtFlags::REMOVEDIR) {
            Ok(()) | Err(Errno::NOENT) => {}
            Err(e) => return Err(err(e.into())),
        }
    }
    drop(cur);
    fs::remove_dir(path).map_err(err)
}

/// Copy the contents of `src` into the new file `dst` (created with `mode`),
/// sharing blocks through FICLONE where the file system supports it.
pub(crate) fn copy_file(src: &Path, dst: &Path, mode: u32) -> io::Result<File> {
    let from = File::open(src)?;
    let mut to = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode & 0o7777)
        .custom_flags(libc_o_nofollow())
        .open(dst)?;
    fill(&from, &mut to)?;
    // The umask applied at creation; the mode is what the layer says.
    to.set_permissions(fs::Permissions::from_mode(mode & 0o7777))?;
    Ok(to)
}

/// Write the contents of `from` into the empty `to`: a reflink when the file
/// system offers one, else a copy of its data extents only (`SEEK_DATA`,
/// `SEEK_HOLE`), so that a sparse file stays sparse: a sandbox's 1 GiB file
/// of holes must not become 1 GiB on the host's disk.
pub(crate) fn fill(from: &File, to: &mut File) -> io::Result<()> {
    if rustix::fs::ioctl_ficlone(&*to, from).is_ok() {
        return Ok(());
    }
    let len = from.metadata()?.len();
    for (start, end) in data_extents(from, len)? {
        copy_range(from, to, start, end)?;
    }
    to.set_len(len)?;
    Ok(())
}

/// The byte ranges of `file` (of length `len`) that hold data; holes are
/// left out. Where the file system cannot tell, the whole file is data.
pub(crate) fn data_extents(file: &File, len: u64) -> io::Result<Vec<(u64, u64)>> {
    let mut out = Vec::new();
    let mut pos = 0u64;
    while pos < len {
        let start = match rustix::fs::seek(file, rustix::fs::SeekFrom::Data(pos)) {
            Ok(o) => o,
            // No data after `pos`: the rest is a hole.
            Err(Errno::NXIO) => break,
            Err(Errno::INVAL | Errno::OPNOTSUPP) => {
                out.push((pos, len));
                break;
            }
            Err(e) => return Err(e.into()),
        };
        let end = match rustix::fs::seek(file, rustix::fs::SeekFrom::Hole(start)) {
            Ok(o) => o.min(len),
            Err(_) => len,
        };
        if end <= start {
            break;
        }
        out.push((start, end));
        pos = end;
    }
    Ok(out)
}

/// Copy bytes `start..end` of `from` to the same offsets of `to`.
fn copy_range(from: &File, to: &File, start: u64, end: u64) -> io::Result<()> {
    use std::os::unix::fs::FileExt;
    let (mut off_in, mut off_out) = (start, start);
    while off_in < end {
        let want = usize::try_from(end - off_in)
            .unwrap_or(usize::MAX)
            .min(1 << 30);
        match rustix::fs::copy_file_range(from, Some(&mut off_in), to, Some(&mut off_out), want) {
            Ok(0) => break,
            Ok(_) => {}
            // Not offered between these files: read and write.
            Err(Errno::XDEV | Errno::NOSYS | Errno::INVAL | Errno::OPNOTSUPP) => {
                let mut buf = vec![0u8; 1 << 20];
                while off_in < end {
                    let n = usize::try_from(end - off_in)
                        .unwrap_or(buf.len())
                        .min(buf.len());
                    let got = from.read_at(&mut buf[..n], off_in)?;
                    if got == 0 {
                        break;
                    }
                    to.write_all_at(&buf[..got], off_out)?;
                    off_in += got as u64;
                    off_out += got as u64;
                }
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

fn libc_o_nofollow() -> i32 {
    rustix::fs::OFlags::NOFOLLOW.bits() as i32
}

/// Copy the tree at `src` to the new path `dst`, keeping types, modes,
/// symbolic links, whiteouts and extended attributes (overlay's marks
/// included).
pub fn copy_tree(src: &Path, dst: &Path) -> Result<(), FsError> {
    deep_stack(|| copy_inner(src, dst, None))
}

/// [`copy_tree`] of a layer opened with [`Opened::up`]: each entry gets the
/// mode it had before it was opened.
pub(crate) fn copy_layer(src: &Path, dst: &Path, opened: &Opened) -> Result<(), FsError> {
    deep_stack(|| copy_inner(src, dst, Some(opened)))
}

fn copy_inner(src: &Path, dst: &Path, opened: Option<&Opened>) -> Result<(), FsError> {
    let copy_err = |source| FsError::Copy {
        src: src.to_path_buf(),
        dst: dst.to_path_buf(),
        source,
    };
    let meta = fs::symlink_metadata(src).map_err(|source| FsError::Read {
        path: src.to_path_buf(),
        source,
    })?;
    let ft = meta.file_type();
    let mode = opened
        .and_then(|o| o.mode_of(src))
        .unwrap_or(meta.mode() & 0o7777);
    if ft.is_dir() {
        fs::DirBuilder::new()
            .mode(0o700)
            .create(dst)
            .map_err(copy_err)?;
        let entries = fs::read_dir(src).map_err(|source| FsError::Read {
            path: src.to_path_buf(),
            source,
        })?;
        for entry in entries {
            let entry = entry.map_err(|source| FsError::Read {
                path: src.to_path_buf(),
                source,
            })?;
            copy_inner(&entry.path(), &dst.join(entry.file_name()), opened)?;
        }
        copy_xattrs(src, dst).map_err(copy_err)?;
        // Last, so a read-only directory can still be filled.
        fs::set_permissions(dst, fs::Permissions::from_mode(mode)).map_err(copy_err)?;
    } else if ft.is_file() {
        copy_file(src, dst, mode).map_err(copy_err)?;
        copy_xattrs(src, dst).map_err(copy_err)?;
    } else if ft.is_symlink() {
        let target = fs::read_link(src).map_err(copy_err)?;
        std::os::unix::fs::symlink(target, dst).map_err(copy_err)?;
        copy_xattrs(src, dst).map_err(copy_err)?;
    } else if ft.is_char_device() && meta.rdev() == 0 {
        make_whiteout(dst).map_err(copy_err)?;
    } else {
        let what = if ft.is_fifo() {
            "a FIFO"
        } else if ft.is_socket() {
            "a socket"
        } else {
            "a device"
        };
        return Err(FsError::Unsupported {
            src: src.to_path_buf(),
            what,
        });
    }
    Ok(())
}

use std::os::unix::fs::DirBuilderExt;

/// Create an overlay whiteout (a 0:0 character device) at `path`; the
/// kernel allows this without privilege.
pub(crate) fn make_whiteout(path: &Path) -> io::Result<()> {
    rustix::fs::mknodat(
        rustix::fs::CWD,
        path,
        FileType::CharacterDevice,
        Mode::empty(),
        0,
    )?;
    Ok(())
}

/// Copy every extended attribute of `src` onto `dst` (not following links).
/// An attribute the caller may not set (`trusted.*` without privilege) is an
/// error, except for symbolic links, where user attributes cannot exist.
fn copy_xattrs(src: &Path, dst: &Path) -> io::Result<()> {
    let names = match overlay::xattr_names(src) {
        Ok(n) => n,
        Err(e) if e.raw_os_error() == Some(rustix::io::Errno::OPNOTSUPP.raw_os_error()) => {
            return Ok(())
        }
        Err(e) => return Err(e),
    };
    for name in names {
        let size = rustix::fs::lgetxattr_query(src, name.as_os_str())?;
        let mut value = vec![0u8; size];
        let n = rustix::fs::lgetxattr(src, name.as_os_str(), &mut value[..])?;
        value.truncate(n);
        rustix::fs::lsetxattr(
            dst,
            name.as_os_str(),
            &value,
            rustix::fs::XattrFlags::empty(),
        )?;
    }
    Ok(())
}

/// Bytes held by the tree at `path` (regular files' sizes), and whether it
/// exists.
pub fn tree_size(path: &Path) -> u64 {
    let Ok(meta) = fs::symlink_metadata(path) else {
        return 0;
    };
    if !meta.is_dir() {
        return if meta.is_file() { meta.len() } else { 0 };
    }
    fs::read_dir(path)
        .map(|rd| rd.flatten().map(|e| tree_size(&e.path())).sum())
        .unwrap_or(0)
}

/// Entries of a layer that its owner cannot read or enter (a rootless
/// sandbox's `chmod 000 dir`), opened for the time of one operation (a
/// diff, a snapshot, a commit) and given their modes back when this drops.
/// Root reads everything and changes nothing here. Reviews read the modes
/// the entries had through [`Opened::mode_of`].
#[derive(Default)]
pub(crate) struct Opened {
    /// In the order they were opened: parents before their children.
    changed: Vec<(PathBuf, u32)>,
    modes: std::collections::HashMap<PathBuf, u32>,
}

impl Opened {
    pub(crate) fn up(root: &Path) -> Opened {
        let mut o = Opened::default();
        let euid = rustix::process::geteuid();
        if euid.is_root() {
            return o;
        }
        deep_stack(|| o.visit(root, euid.as_raw()));
        o
    }

    fn visit(&mut self, path: &Path, euid: u32) {
        let Ok(m) = fs::symlink_metadata(path) else {
            return;
        };
        if m.uid() != euid {
            return;
        }
        let need = if m.is_dir() {
            0o700
        } else if m.is_file() {
            0o400
        } else {
            return;
        };
        let mode = m.mode() & 0o7777;
        if mode & need != need
            && fs::set_permissions(path, fs::Permissions::from_mode(mode | need)).is_ok()
        {
            self.changed.push((path.to_path_buf(), mode));
            self.modes.insert(path.to_path_buf(), mode);
        }
        if m.is_dir() {
            if let Ok(rd) = fs::read_dir(path) {
                for e in rd.flatten() {
                    self.visit(&e.path(), euid);
                }
            }
        }
    }

    /// The mode `path` had before it was opened, if it was.
    pub(crate) fn mode_of(&self, path: &Path) -> Option<u32> {
        self.modes.get(path).copied()
    }
}

impl Drop for Opened {
    fn drop(&mut self) {
        // Children first: a parent closed again would hide them.
        for (path, mode) in self.changed.iter().rev() {
            let _ = fs::set_permissions(path, fs::Permissions::from_mode(*mode));
        }
    }
}
