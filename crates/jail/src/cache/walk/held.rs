//! The merge's fence: what the caller's rule ([`Fence`]) names is held
//! back rather than merged, and kept (a file, a link, a directory made new
//! with everything below it) under the fence's place, as the target's own
//! tree, within the merge's limit (see the grandparent module).

use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, Stat};
use rustix::io::Errno;
use warden_workspace::fsutil::{self, entry_cost};

use super::{at_path, identity, open_dir, open_upper_dir, temp_name, Merge};
use crate::cache::{Fence, HeldBack, HELD_SHOWN};

/// A merge's fence: the caller's rule, the target's real path, and what
/// was held back so far.
pub(super) struct Fenced<'f> {
    fence: &'f dyn Fence,
    /// The target directory's real path.
    top: PathBuf,
    /// Where what is held back is kept (the fence's place, one directory
    /// per target, named by its identity), and that directory once made.
    keep: Option<PathBuf>,
    kept: Option<OwnedFd>,
    held: HeldBack,
}

impl<'f> Merge<'f> {
    /// Hold back what `fence` names; the target directory is at the real
    /// path `top` and is the directory `id`.
    pub(in crate::cache) fn fence(
        &mut self,
        fence: &'f dyn Fence,
        top: PathBuf,
        (dev, ino): (u64, u64),
    ) {
        let keep = fence.keep().map(|k| k.join(format!("{dev}-{ino}")));
        self.fenced = Some(Fenced {
            fence,
            top,
            keep,
            kept: None,
            held: HeldBack::default(),
        });
    }

    /// What the fence held back, if anything, for the volume at `dest`.
    pub(in crate::cache) fn held_back(&mut self, dest: &Path) -> Option<HeldBack> {
        let f = self.fenced.as_mut()?;
        if f.held.entries == 0 {
            return None;
        }
        let mut held = std::mem::take(&mut f.held);
        held.volume = dest.to_path_buf();
        Some(held)
    }

    /// Why the entry `rel` (relative to the target's top), whose name is
    /// `name` in `dst`, must not be written; `None` without a fence.
    pub(super) fn fenced(
        &self,
        dst: BorrowedFd<'_>,
        name: &OsStr,
        rel: &Path,
    ) -> Option<&'static str> {
        let f = self.fenced.as_ref()?;
        let there = rustix::fs::statat(dst, name, AtFlags::SYMLINK_NOFOLLOW)
            .ok()
            .filter(|st| FileType::from_raw_mode(st.st_mode) == FileType::RegularFile)
            .map(|st| identity(&st));
        f.fence.fenced(&f.top.join(rel), there)
    }

    /// Count the entry `rel` as held back, for `reason`.
    pub(super) fn hold(&mut self, rel: &Path, reason: &'static str) {
        if let Some(f) = self.fenced.as_mut() {
            let held = &mut f.held;
            if held.entries == 0 {
                held.reason = reason.to_string();
            }
            held.entries += 1;
            if held.paths.len() < HELD_SHOWN {
                held.paths.push(rel.to_path_buf());
            }
        }
    }

    /// The directory `rel` of the place held-back entries are kept,
    /// made (owner-only) if missing, from descriptor to descriptor; `None`
    /// when there is no such place. The place is emptied at its first use
    /// in a merge: it holds what the latest merge held back.
    fn keep_dir(&mut self, rel: &Path) -> io::Result<Option<OwnedFd>> {
        let Some(f) = self.fenced.as_mut() else {
            return Ok(None);
        };
        let Some(place) = f.keep.clone() else {
            return Ok(None);
        };
        if f.kept.is_none() {
            match fsutil::remove_tree(&place) {
                Ok(()) => {}
                Err(e) if !place.exists() => drop(e),
                Err(e) => return Err(io::Error::other(e)),
            }
            if let Some(parent) = place.parent() {
                std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(parent)?;
            }
            rustix::fs::mkdirat(rustix::fs::CWD, &place, Mode::from_raw_mode(0o700))?;
            f.kept = Some(open_dir(rustix::fs::CWD, &place)?);
            f.held.kept = Some(place);
        }
        let Some(top) = f.kept.as_ref() else {
            return Ok(None);
        };
        let mut at = rustix::io::dup(top)?;
        for part in rel.components() {
            let part = part.as_os_str();
            match rustix::fs::mkdirat(&at, part, Mode::from_raw_mode(0o700)) {
                Ok(()) | Err(Errno::EXIST) => {}
                Err(e) => return Err(e.into()),
            }
            at = match open_dir(&at, Path::new(part)) {
                Ok(fd) => fd,
                Err(_) => {
                    // Something else of an earlier entry's: replaced.
                    fsutil::remove_tree(&at_path(at.as_fd(), part)).map_err(io::Error::other)?;
                    rustix::fs::mkdirat(&at, part, Mode::from_raw_mode(0o700))?;
                    open_dir(&at, Path::new(part))?
                }
            };
        }
        Ok(Some(at))
    }

    /// Hold back the entry `name` of the upper directory `src` (whose
    /// `lstat` is `st`), at `rel`: kept, within the limit, where the fence
    /// says (a directory with everything below it), else only counted.
    pub(super) fn hold_back(
        &mut self,
        src: BorrowedFd<'_>,
        name: &OsStr,
        st: &Stat,
        reason: &'static str,
    ) -> io::Result<()> {
        let rel = self.at.clone();
        self.hold(&rel, reason);
        let kind = FileType::from_raw_mode(st.st_mode);
        if !matches!(
            kind,
            FileType::RegularFile | FileType::Symlink | FileType::Directory
        ) {
            return Ok(());
        }
        let cost = entry_cost(st, name.len());
        if !self.fits(cost, 0) {
            self.done.left_out += 1;
            return Ok(());
        }
        let parent = rel.parent().unwrap_or(Path::new(""));
        let Some(into) = self.keep_dir(parent)? else {
            return Ok(());
        };
        match kind {
            FileType::RegularFile => {
                let tmp = temp_name();
                self.copy_file((src, name, st), 0o600, into.as_fd(), &tmp)?;
                self.replace(into.as_fd(), &tmp, name)?;
                self.charge(into.as_fd(), name, 0)?;
            }
            FileType::Symlink => {
                let target = rustix::fs::readlinkat(src, name, Vec::new())?;
                let tmp = temp_name();
                let _ = rustix::fs::unlinkat(&into, tmp.as_str(), AtFlags::empty());
                rustix::fs::symlinkat(target.as_c_str(), &into, tmp.as_str())?;
                self.replace(into.as_fd(), &tmp, name)?;
                self.charge(into.as_fd(), name, 0)?;
            }
            _ => {
                // A directory made new: kept whole by a merge of its own
                // (unfenced: it is the owner's place), within what is left
                // of the limit.
                let sub = open_upper_dir(src, name, st)?;
                let Some(dst) = self.keep_dir(&rel)? else {
                    return Ok(());
                };
                let mut inner = Merge::new(self.used, self.limit, self.owner);
                inner.walk(sub, dst)?;
                self.used = inner.used;
                self.done.added = self.done.added.saturating_add(inner.done.added);
                self.done.left_out = self.done.left_out.saturating_add(inner.done.left_out);
            }
        }
        Ok(())
    }
}
