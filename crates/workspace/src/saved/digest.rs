//! The digest of a snapshot's layer and home, walked from descriptor to
//! descriptor with an explicit stack: a tree deeper than PATH_MAX (a
//! layer may be) is read whole, each entry opened beneath its directory's
//! descriptor by its own name, never by a joined path, and a link never
//! followed. What is hashed, and in what order, is what the path-based
//! walk hashed before, so that a snapshot saved then still verifies.

use super::SavedError;
use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags, Stat};
use sha2::{Digest, Sha256};
use std::ffi::OsStr;
use std::io::{self, Read};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// One directory being read: its descriptor, its entries' names (sorted
/// bytewise, as the names of a path sort), the next to visit, and the
/// length of its relative path in the walk's buffer.
struct Level {
    dir: OwnedFd,
    names: Vec<Vec<u8>>,
    next: usize,
    rel_len: usize,
}

/// Hash the tree at `root` (a directory) into `h`: each entry's path
/// relative to `root`, its mode, and a regular file's size and content, a
/// link's target or a device's number.
pub(super) fn tree(root: &Path, h: &mut Sha256) -> Result<(), SavedError> {
    let err = |rel: &[u8]| {
        let at = root.join(OsStr::from_bytes(rel));
        move |e: io::Error| SavedError::Io {
            op: "read",
            path: at,
            source: e,
        }
    };
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let top = rustix::fs::open(root, flags, Mode::empty()).map_err(|e| err(b"")(e.into()))?;
    let mut rel: Vec<u8> = Vec::new();
    let mut stack = vec![enter(top, &rel, h).map_err(err(&rel))?];
    while let Some(level) = stack.last_mut() {
        let Some(name) = level.names.get(level.next).cloned() else {
            stack.pop();
            if let Some(up) = stack.last() {
                rel.truncate(up.rel_len);
            }
            continue;
        };
        level.next += 1;
        rel.truncate(level.rel_len);
        if !rel.is_empty() {
            rel.push(b'/');
        }
        rel.extend_from_slice(&name);
        let name = OsStr::from_bytes(&name);
        let st = rustix::fs::statat(&level.dir, name, AtFlags::SYMLINK_NOFOLLOW)
            .map_err(|e| err(&rel)(e.into()))?;
        if FileType::from_raw_mode(st.st_mode) == FileType::Directory {
            let fd = rustix::fs::openat(&level.dir, name, flags, Mode::empty())
                .map_err(|e| err(&rel)(e.into()))?;
            let below = enter(fd, &rel, h).map_err(err(&rel))?;
            stack.push(below);
        } else {
            leaf(&level.dir, name, &st, &rel, h).map_err(err(&rel))?;
        }
    }
    Ok(())
}

/// The entry's header: its relative path, a separator and its mode.
fn header(rel: &[u8], st: &Stat, h: &mut Sha256) {
    h.update(rel);
    h.update([0]);
    h.update(mode_of(st).to_le_bytes());
}

#[allow(clippy::unnecessary_cast)]
fn mode_of(st: &Stat) -> u32 {
    st.st_mode as u32
}

/// Hash directory `dir` (at `rel`) and read its names.
fn enter(dir: OwnedFd, rel: &[u8], h: &mut Sha256) -> io::Result<Level> {
    let st = rustix::fs::fstat(&dir)?;
    header(rel, &st, h);
    let mut names = Vec::new();
    for entry in Dir::read_from(&dir)? {
        let entry = entry?;
        let name = entry.file_name().to_bytes();
        if name != b"." && name != b".." {
            names.push(name.to_vec());
        }
    }
    names.sort();
    h.update((names.len() as u64).to_le_bytes());
    Ok(Level {
        dir,
        names,
        next: 0,
        rel_len: rel.len(),
    })
}

/// Hash the entry `name` of `dir` (not a directory; `st` is its `lstat`).
fn leaf(dir: &OwnedFd, name: &OsStr, st: &Stat, rel: &[u8], h: &mut Sha256) -> io::Result<()> {
    header(rel, st, h);
    match FileType::from_raw_mode(st.st_mode) {
        FileType::RegularFile => {
            h.update(u64::try_from(st.st_size).unwrap_or(0).to_le_bytes());
            let fd = rustix::fs::openat(
                dir,
                name,
                OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            )?;
            let mut f = std::fs::File::from(fd);
            let mut buf = vec![0u8; 64 << 10];
            let mut seen = 0u64;
            loop {
                let n = f.read(&mut buf)?;
                if n == 0 {
                    break;
                }
                seen += n as u64;
                h.update(&buf[..n]);
            }
            h.update(seen.to_le_bytes());
        }
        FileType::Symlink => {
            let target = rustix::fs::readlinkat(dir, name, Vec::new())?;
            h.update(target.as_bytes());
        }
        _ => h.update(st.st_rdev.to_le_bytes()),
    }
    Ok(())
}
