//! Tree operations shared by snapshots, discards and the copy fallback:
//! removal that copes with what overlayfs leaves behind, one file's data
//! copied (reflinks where the file system has them, holes kept), what a
//! tree costs the host, and a rootless owner's unreadable entries opened
//! for one operation. The copies of whole trees are
//! [`crate::treecopy`]'s. Below a tree's top, nothing is resolved by path:
//! entries are reached through descriptors ([`crate::beneath`]), because
//! the trees are ones a sandbox wrote.

use crate::beneath::Tree;
use crate::links::Links;
use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;
use std::ffi::{OsStr, OsString};
use std::fs::{self, File};
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
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
    /// The copy met more files of several names than it can keep as
    /// links, and copying their further names whole would have written
    /// more than `slack` bytes beyond the tree's own size.
    #[error("the tree holds more hard-linked files than a copy keeps as links ({} at once), and copying them whole would write more than {slack} bytes beyond the tree's own size: the copy is refused; remove some of its hard links", crate::links::MAX_LINKED)]
    TooManyLinks { slack: u64 },
    /// The copy would have written more than the tree measured before it
    /// (`size`) and the slack allowed (`limit`): a tree that grew, or was
    /// moved about, while it was copied.
    #[error("the copy would write more than {limit} bytes, the {size} the tree held when it began and the slack allowed: the tree grew or changed while it was copied; the copy is refused")]
    PastSize { size: u64, limit: u64 },
}

impl FsError {
    /// The stable reason code of a copy refused for what the tree holds,
    /// which each door words itself; `None` for a fault of the host.
    pub fn code(&self) -> Option<&'static str> {
        match self {
            FsError::TooManyLinks { .. } => Some(TOO_MANY_LINKS),
            FsError::PastSize { .. } => Some(COPY_PAST_SIZE),
            FsError::Unsupported { .. } => Some("unsupported_entry"),
            _ => None,
        }
    }
}

/// The reason code of [`FsError::TooManyLinks`].
pub const TOO_MANY_LINKS: &str = "too_many_links";

/// The reason code of [`FsError::PastSize`].
pub const COPY_PAST_SIZE: &str = "copy_past_size";

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
/// `path` itself is one of warden's own (a sandbox's directory, its
/// layer's top): what lies below is reached only through descriptors.
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
    let top = open_dir(&rustix::fs::CWD, path.as_os_str()).map_err(|e| err(e.into()))?;
    empty_dir(top).map_err(err)?;
    fs::remove_dir(path).map_err(err)
}

/// Remove the entry `name` of the directory held by `parent`, and
/// everything below it, never following a link: a link is removed, not
/// what it leads to. `shown` names it in an error (relative to its tree).
pub(crate) fn remove_at(parent: &OwnedFd, name: &OsStr, shown: &Path) -> Result<(), FsError> {
    let err = |source: io::Error| FsError::Remove {
        path: shown.to_path_buf(),
        source,
    };
    let st = match rustix::fs::statat(parent, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => st,
        Err(Errno::NOENT) => return Ok(()),
        Err(e) => return Err(err(e.into())),
    };
    if FileType::from_raw_mode(st.st_mode) != FileType::Directory {
        return match rustix::fs::unlinkat(parent, name, AtFlags::empty()) {
            Ok(()) | Err(Errno::NOENT) => Ok(()),
            Err(e) => Err(err(e.into())),
        };
    }
    if st.st_mode & 0o700 != 0o700 {
        chmod_entry(parent, name, 0o700).map_err(err)?;
    }
    let top = open_below(parent, name).map_err(err)?;
    empty_dir(top).map_err(err)?;
    match rustix::fs::unlinkat(parent, name, AtFlags::REMOVEDIR) {
        Ok(()) | Err(Errno::NOENT) => Ok(()),
        Err(e) => Err(err(e.into())),
    }
}

fn open_dir(at: &impl AsFd, name: &OsStr) -> rustix::io::Result<OwnedFd> {
    rustix::fs::openat(
        at,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
}

/// Set the mode of the entry `name` of `parent` without following it: it
/// is opened `O_PATH | O_NOFOLLOW`, checked to be a directory or a regular
/// file, and changed through its descriptor (`fchmodat` follows a link
/// in the last component, so a name the sandbox swapped for a link after
/// the `lstat` would change the link's target).
pub(crate) fn chmod_entry(parent: &impl AsFd, name: &OsStr, mode: u32) -> io::Result<()> {
    let fd = rustix::fs::openat(
        parent,
        name,
        OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let st = rustix::fs::fstat(&fd)?;
    match FileType::from_raw_mode(st.st_mode) {
        FileType::Directory | FileType::RegularFile => {}
        _ => return Err(crate::beneath::refused()),
    }
    // The magic link of an O_PATH descriptor leads to exactly its inode.
    let at = crate::beneath::at_path(&fd, OsStr::new("."));
    rustix::fs::chmod(&at, Mode::from_raw_mode(mode))?;
    Ok(())
}

/// Empty the directory held by `top`, from descriptor to descriptor.
/// A directory below is entered only on the same mount
/// (`RESOLVE_NO_XDEV`, which bind mounts trip too) and never through a
/// link: a mount found below (a VM's or gVisor's run directory can hold
/// one) is left whole and the removal fails, rather than emptying
/// another file system. Each `..` on the way back is checked to be the
/// directory the walk came down from: a tree moved while it is removed
/// is not followed out of it.
fn empty_dir(top: OwnedFd) -> io::Result<()> {
    let mut cur = top;
    // The directories descended into, from the top down: each one's name
    // in its parent and its parent's identity.
    let mut names: Vec<(OsString, (u64, u64))> = Vec::new();
    loop {
        let mut subdirs = Vec::new();
        for entry in rustix::fs::Dir::read_from(&cur)? {
            let entry = entry?;
            let name = OsStr::from_bytes(entry.file_name().to_bytes()).to_os_string();
            if name == "." || name == ".." {
                continue;
            }
            let is_dir = match entry.file_type() {
                FileType::Directory => true,
                FileType::Unknown => rustix::fs::statat(&cur, &name, AtFlags::SYMLINK_NOFOLLOW)
                    .map(|st| FileType::from_raw_mode(st.st_mode) == FileType::Directory)?,
                _ => false,
            };
            if is_dir {
                subdirs.push(name);
            } else {
                match rustix::fs::unlinkat(&cur, &name, AtFlags::empty()) {
                    Ok(()) | Err(Errno::NOENT) => {}
                    Err(e) => return Err(e.into()),
                }
            }
        }
        if let Some(name) = subdirs.into_iter().next() {
            let st = rustix::fs::statat(&cur, &name, AtFlags::SYMLINK_NOFOLLOW)?;
            if st.st_mode & 0o700 != 0o700 {
                chmod_entry(&cur, &name, 0o700)?;
            }
            let here = identity(&cur)?;
            cur = open_below(&cur, &name)?;
            names.push((name, here));
            continue;
        }
        let Some((name, parent)) = names.pop() else {
            break;
        };
        cur = open_dir(&cur, OsStr::new(".."))?;
        if identity(&cur)? != parent {
            return Err(io::Error::other(
                "the tree was moved while it was removed; what is left of it stays",
            ));
        }
        match rustix::fs::unlinkat(&cur, &name, AtFlags::REMOVEDIR) {
            Ok(()) | Err(Errno::NOENT) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// The device and inode of the directory held by `fd`.
fn identity(fd: &impl AsFd) -> io::Result<(u64, u64)> {
    let st = rustix::fs::fstat(fd)?;
    Ok((st.st_dev, st.st_ino))
}

/// The directory `name` of `parent`, on the same mount, not through a link.
fn open_below(parent: &impl AsFd, name: &OsStr) -> io::Result<OwnedFd> {
    rustix::fs::openat2(
        parent,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
        ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_XDEV,
    )
    .map_err(|e| match e {
        Errno::XDEV => {
            io::Error::other("a mount is below it; warden removes no other file system's files")
        }
        e => e.into(),
    })
}

/// Write the contents of `from` into the empty `to`: a reflink when the file
/// system offers one, else a copy of its data extents only (`SEEK_DATA`,
/// `SEEK_HOLE`), so that a sparse file stays sparse: a sandbox's 1 GiB file
/// of holes must not become 1 GiB on the host's disk.
pub fn fill(from: &File, to: &mut File) -> io::Result<()> {
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

/// The least a host file system spends on an entry of any kind (one block
/// of ext4 or xfs, and an inode): an empty file, a directory or a link
/// costs the host that much, whatever the tmpfs it was made in charged.
pub const ENTRY_BYTES: u64 = 4096;

/// What one entry costs the host's disk, priced as the host pays it: its
/// allocated blocks or its apparent size in whole blocks, whichever is more
/// (a sparse file counts whole: a copy may fill it), at least
/// [`ENTRY_BYTES`] whatever its kind, plus its name's entry in its parent
/// directory (`name_len` bytes and ext4's 8-byte header, rounded to 4).
/// Every measure of what a tree costs the host (a token's disk quota, a
/// snapshot's bound, a volume's or a cache's merge) prices entries with
/// this one function, so that none of them is free: counting regular
/// files' bytes alone let a sandbox grow a volume by millions of empty
/// files, directories and long names at no charge.
pub fn entry_cost(st: &rustix::fs::Stat, name_len: usize) -> u64 {
    let blocks = u64::try_from(st.st_blocks).unwrap_or(0).saturating_mul(512);
    let size = u64::try_from(st.st_size).unwrap_or(0);
    let whole = size.div_ceil(ENTRY_BYTES).saturating_mul(ENTRY_BYTES);
    let held = match FileType::from_raw_mode(st.st_mode) {
        // What the entry's size says it may hold once copied.
        FileType::RegularFile | FileType::Directory | FileType::Symlink => blocks.max(whole),
        _ => blocks,
    };
    held.max(ENTRY_BYTES).saturating_add(name_cost(name_len))
}

/// What a name of `len` bytes takes in its directory: ext4's entry, an
/// 8-byte header and the name, rounded up to 4 bytes.
pub fn name_cost(len: usize) -> u64 {
    u64::try_from(len).unwrap_or(u64::MAX).saturating_add(8 + 3) & !3
}

/// What the tree the sandbox can write at `path` costs the host's disk
/// (every entry below it priced by [`entry_cost`], a file with several
/// names in the tree once, its other names by [`name_cost`]: what a quota
/// charges is what the disk holds), or `u64::MAX` when it
/// cannot be measured: a quota that reads this fails closed rather than
/// taking an unreadable tree as empty. See [`tree_bytes`].
pub fn tree_size(path: &Path) -> u64 {
    tree_bytes(path).unwrap_or(u64::MAX)
}

/// What the tree the sandbox can write at `path` costs the host's disk
/// (see [`tree_size`]); `Some(0)` when nothing is there, `None` when some
/// directory of it cannot be read.
///
/// The walk goes from directory descriptor to directory descriptor
/// (`openat(parent, name, O_NOFOLLOW)`, `..` on the way back) with an
/// explicit stack of names, so neither depth nor path length limits what
/// is counted (a path past PATH_MAX once made a subtree count as empty),
/// a link the sandbox planted is never entered, and no recursion grows
/// the stack. Each `..` is checked to be the directory the walk came
/// down from: a tree moved while it is read cannot be measured.
pub fn tree_bytes(path: &Path) -> Option<u64> {
    let st = match rustix::fs::lstat(path) {
        Ok(st) => st,
        Err(Errno::NOENT) => return Some(0),
        Err(_) => return None,
    };
    match FileType::from_raw_mode(st.st_mode) {
        FileType::Directory => {}
        _ => return Some(entry_cost(&st, 0)),
    }
    let top = open_dir(&rustix::fs::CWD, path.as_os_str()).ok()?;
    size_walk(top)
}

/// One directory of the walk: its identity and the subdirectories of it
/// still to be read.
struct Level {
    id: (u64, u64),
    pending: Vec<OsString>,
}

/// Read the directory `dir`: add what each of its entries costs to `total`
/// and answer its level. A further name of a file met already (a hard
/// link) costs its name only: the disk holds its data once.
fn read_level(dir: &OwnedFd, total: &mut u64, links: &mut Links) -> Option<Level> {
    let st = rustix::fs::fstat(dir).ok()?;
    let mut pending = Vec::new();
    for name in crate::beneath::names_of(dir).ok()? {
        let st = match rustix::fs::statat(dir, &name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            // Removed since it was listed: it holds nothing now.
            Err(Errno::NOENT) => continue,
            Err(_) => return None,
        };
        let cost = match links.seen(&st) {
            Some(true) => name_cost(name.len()),
            // A first name, or one past the map's bounds: in full (a
            // link counted twice overcharges, never undercharges).
            _ => entry_cost(&st, name.len()),
        };
        *total = total.saturating_add(cost);
        if FileType::from_raw_mode(st.st_mode) == FileType::Directory {
            pending.push(name);
        }
    }
    Some(Level {
        id: (st.st_dev, st.st_ino),
        pending,
    })
}

fn size_walk(top: OwnedFd) -> Option<u64> {
    let mut total = 0u64;
    let mut cur = top;
    let mut links = Links::default();
    let mut stack = vec![read_level(&cur, &mut total, &mut links)?];
    while let Some(level) = stack.last_mut() {
        if let Some(name) = level.pending.pop() {
            let next = match open_dir(&cur, &name) {
                Ok(fd) => fd,
                // Removed, or swapped for a link or a file, since it was
                // listed: nothing below it is in this tree now.
                Err(Errno::NOENT | Errno::NOTDIR | Errno::LOOP) => continue,
                Err(_) => return None,
            };
            let below = read_level(&next, &mut total, &mut links)?;
            cur = next;
            stack.push(below);
            continue;
        }
        stack.pop();
        let Some(parent) = stack.last() else { break };
        cur = open_dir(&cur, OsStr::new("..")).ok()?;
        let st = rustix::fs::fstat(&cur).ok()?;
        if (st.st_dev, st.st_ino) != parent.id {
            return None;
        }
    }
    Some(total)
}

/// Entries of a layer that its owner cannot read or enter (a rootless
/// sandbox's `chmod 000 dir`), opened for the time of one operation (a
/// diff, a snapshot, a commit) and given their modes back when this drops.
/// Root reads everything and changes nothing here. Reviews read the modes
/// the entries had through [`Opened::mode_of`], by their paths relative to
/// the layer. Every entry is reached beneath the layer's descriptor and
/// changed through a descriptor of its own ([`chmod_entry`]), so a link
/// the sandbox swaps in never sends the change to another file.
#[derive(Default)]
pub(crate) struct Opened {
    tree: Option<Tree>,
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
        let Ok(tree) = Tree::layer(root) else {
            return o;
        };
        deep_stack(|| o.visit(&tree, Path::new(""), euid.as_raw()));
        o.tree = Some(tree);
        o
    }

    fn visit(&mut self, tree: &Tree, rel: &Path, euid: u32) {
        let Ok(Some(st)) = tree.lstat(rel) else {
            return;
        };
        if st.st_uid != euid {
            return;
        }
        let ft = FileType::from_raw_mode(st.st_mode);
        let need = match ft {
            FileType::Directory => 0o700,
            FileType::RegularFile => 0o400,
            _ => return,
        };
        let mode = st.st_mode & 0o7777;
        if mode & need != need && set_mode(tree, rel, mode | need).is_ok() {
            self.changed.push((rel.to_path_buf(), mode));
            self.modes.insert(rel.to_path_buf(), mode);
        }
        if ft == FileType::Directory {
            if let Ok(names) = tree.names(rel) {
                for name in names {
                    self.visit(tree, &rel.join(name), euid);
                }
            }
        }
    }

    /// The mode the entry at `rel` (relative to the layer) had before it
    /// was opened, if it was.
    pub(crate) fn mode_of(&self, rel: &Path) -> Option<u32> {
        self.modes.get(rel).copied()
    }
}

/// Set the mode of the entry `rel` of `tree` (the top when `rel` is empty).
fn set_mode(tree: &Tree, rel: &Path, mode: u32) -> io::Result<()> {
    if rel.as_os_str().is_empty() {
        let top = tree.dir(rel)?;
        return rustix::fs::fchmod(&top, Mode::from_raw_mode(mode)).map_err(Into::into);
    }
    let (parent, name) = tree.parent(rel)?;
    chmod_entry(&parent, name, mode)
}

impl Drop for Opened {
    fn drop(&mut self) {
        let Some(tree) = &self.tree else {
            return;
        };
        // Children first: a parent closed again would hide them.
        for (rel, mode) in self.changed.iter().rev() {
            let _ = set_mode(tree, rel, *mode);
        }
    }
}
