//! A guest's memory as a file: what lets a save leave the guest's RAM out
//! of its stream.
//!
//! A VM that can be saved (`pause::unsaveable`) runs with its RAM
//! in a file of its own run directory, mapped shared (QEMU's
//! `memory-backend-file,share=on`). Every VMM has the migration
//! capability `x-ignore-shared` on (QEMU 7.2 has no command-line switch for
//! it: set over QMP before a save and before an incoming restore reads its
//! stream), so a save writes the devices' state only (a few hundred KB,
//! where the whole RAM was 200 MB and more) and the RAM stays in the file,
//! which the save then moves beside the stream as the guest's *base*
//! ([`BASE`]), root's and owner-only ([`seal`]).
//!
//! No VMM ever holds a file another VMM maps. QEMU 7.2 opens its memory
//! file read-write even to map it privately (a base handed to it as
//! "read-only" would be read-only only by how it was handed): a VMM taken
//! over by its guest could write it, and every VM mapping it would read
//! the written pages where its guest had not written its own. So each VM
//! runs on a file of its own, in its own run directory: a start from a
//! template maps a sparse copy of the template's base ([`copy_sparse`]),
//! each fork's or snapshot's copy of a save is a sparse copy of its own
//! ([`copy_saved`]), and the VM that was saved takes its base back
//! ([`take`]), which no copy links. A base is never in a VMM's Landlock
//! rules, its root or the descriptors it is handed. The cost: copies of
//! one save or of one template no longer share the pages none of them
//! wrote (each holds its own in the page cache). A QEMU that maps a file
//! privately from a read-only descriptor (8.2's `readonly=on,rom=off`), or
//! the supervisor answering QEMU's open of a base with a read-only
//! descriptor, would bring that sharing back safely.
//!
//! virtio-fs needs the guest's memory shared with virtiofsd (a memfd):
//! such a VM cannot be saved at all and keeps anonymous memory.

use serde::{Deserialize, Serialize};
use std::fs::File;
use std::io;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// The base's name beside a saved stream, and the running file's in a
/// VM's run directory.
pub const BASE: &str = "memory.ram";
/// Where a VM's RAM lives.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Ram {
    /// QEMU's private anonymous memory: a save writes all of it into the
    /// stream.
    #[default]
    Anonymous,
    /// This file of the VM's own, mapped shared: a save leaves it out of
    /// the stream (a fresh one is made when it does not exist).
    Shared(PathBuf),
    /// This file of the VM's own (a copy of a template's base, for a VM
    /// that cannot be saved), mapped privately: the guest's writes stay in
    /// the VMM's own pages, never written back to the disk.
    Private(PathBuf),
}

impl Ram {
    /// The file, where there is one.
    pub fn path(&self) -> Option<&Path> {
        match self {
            Ram::Anonymous => None,
            Ram::Shared(p) | Ram::Private(p) => Some(p),
        }
    }

    /// QEMU's memory backend for this RAM, the file named to it as
    /// `handed`.
    pub(crate) fn backend(&self, handed: &str, mib: u64) -> Option<String> {
        let share = match self {
            Ram::Anonymous => return None,
            Ram::Shared(_) => "on",
            Ram::Private(_) => "off",
        };
        Some(format!(
            "memory-backend-file,id=mem,size={mib}M,mem-path={},share={share}",
            handed.replace(',', ",,")
        ))
    }
}

/// Make `path` a new file of `mib` MiB, all hole, owner-only.
pub(crate) fn fresh(path: &Path, mib: u64) -> io::Result<()> {
    let f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    f.set_len(mib << 20)
}

/// Copy `from` to the new file `to` (owner-only): a reflink where the
/// file system has them, else its data extents only, so the guest's
/// untouched memory stays holes.
pub(crate) fn copy_sparse(from: &Path, to: &Path) -> io::Result<()> {
    let src = File::open(from)?;
    let mut dst = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(to)?;
    let done = warden_workspace::fsutil::fill(&src, &mut dst);
    if done.is_err() {
        let _ = std::fs::remove_file(to);
    }
    done
}

/// Make the file at `path` (a base, or a saved memory file: no VMM opens
/// it) root's and owner-only where warden runs as root, owner-only
/// otherwise.
pub(crate) fn seal(path: &Path) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    if warden_jail::host::is_root() {
        std::os::unix::fs::chown(path, Some(0), Some(0))?;
    }
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
}

/// Move the running file `from` (its VMM has ended) to `to`, a base now:
/// renamed, or copied where it lies on another file system.
pub(crate) fn keep_as_base(from: &Path, to: &Path) -> io::Result<()> {
    match std::fs::rename(from, to) {
        Ok(()) => Ok(()),
        Err(e) if e.raw_os_error() == Some(nix::libc::EXDEV) => {
            copy_sparse(from, to)?;
            std::fs::remove_file(from)
        }
        Err(e) => Err(e),
    }
}

/// The base in `dir` as the running file `to` of the VM saved there: taken
/// (renamed; no copy links it, [`copy_saved`] copies). See [`give_back`].
pub(crate) fn take(dir: &Path, to: &Path) -> io::Result<()> {
    keep_as_base(&dir.join(BASE), to)
}

/// Undo a [`take`] whose restore failed: the state stays whole for
/// another try.
pub(crate) fn give_back(dir: &Path, running: &Path) {
    let base = dir.join(BASE);
    if keep_as_base(running, &base).is_ok() {
        let _ = seal(&base);
    }
}

/// Is the base in `dir` there, of the guest's size (`mib` MiB)? `Err`
/// says what is wrong.
pub(crate) fn check_base(dir: &Path, mib: u64) -> Result<PathBuf, String> {
    let base = dir.join(BASE);
    match std::fs::metadata(&base) {
        Ok(m) if m.is_file() && m.len() == mib << 20 => Ok(base),
        Ok(m) => Err(format!(
            "its memory file holds {} bytes where {} were saved",
            m.len(),
            mib << 20
        )),
        Err(e) => Err(format!("its memory file cannot be read ({e})")),
    }
}

/// The digest of the guest's memory in the file at `path` (hex SHA-256),
/// whatever its hole map: over its length, then the index and bytes of
/// each [`DIGEST_BLOCK`] that is not all zeros (a hole reads as zeros, so
/// a sparse copy digests as its original). Only the file's data extents
/// are read.
pub(crate) fn digest(path: &Path) -> io::Result<String> {
    use sha2::{Digest, Sha256};
    use std::os::unix::fs::FileExt;
    static ZEROS: [u8; DIGEST_BLOCK as usize] = [0; DIGEST_BLOCK as usize];
    let f = File::open(path)?;
    let len = f.metadata()?.len();
    let mut h = Sha256::new();
    h.update(len.to_le_bytes());
    let mut buf = vec![0u8; DIGEST_BLOCK as usize];
    // Blocks below this one are digested already.
    let mut done = 0u64;
    let mut pos = 0u64;
    while pos < len {
        let start = match rustix::fs::seek(&f, rustix::fs::SeekFrom::Data(pos)) {
            Ok(o) => o,
            Err(rustix::io::Errno::NXIO) => break,
            Err(rustix::io::Errno::INVAL | rustix::io::Errno::OPNOTSUPP) => pos,
            Err(e) => return Err(e.into()),
        };
        let end =
            rustix::fs::seek(&f, rustix::fs::SeekFrom::Hole(start)).map_or(len, |o| o.min(len));
        let mut b = (start / DIGEST_BLOCK * DIGEST_BLOCK).max(done);
        while b < end {
            let n = usize::try_from(DIGEST_BLOCK.min(len - b)).unwrap_or(buf.len());
            f.read_exact_at(&mut buf[..n], b)?;
            if buf[..n] != ZEROS[..n] {
                h.update(b.to_le_bytes());
                h.update(&buf[..n]);
            }
            b += DIGEST_BLOCK;
        }
        done = b;
        pos = b.max(start + 1);
    }
    Ok(h.finalize()
        .iter()
        .map(|x| format!("{x:02x}"))
        .collect::<String>())
}

/// The unit of [`digest`].
const DIGEST_BLOCK: u64 = 64 << 10;

/// Is the guest's memory in the file at `path` what was saved (`want`,
/// a [`digest`])? `Err` says what is wrong.
pub(crate) fn check_digest(path: &Path, want: Option<&str>) -> Result<(), String> {
    let Some(want) = want else {
        return Err("no digest of its memory file was recorded".into());
    };
    match digest(path) {
        Ok(got) if got == want => Ok(()),
        Ok(_) => Err("its memory file's contents are not those saved".into()),
        Err(e) => Err(format!("its memory file cannot be read ({e})")),
    }
}

/// Copy the VM state saved in `src` (a pause to disk: its stream, record
/// and the rest) into the new directory `dst`, where it is restored as a
/// copy (`pause::restore_copy`). Every file is copied, the base
/// sparsely (a reflink where the file system has them): never a link,
/// which the saved VM would take back and write, or which two copies'
/// VMMs would both hold.
pub fn copy_saved(src: &Path, dst: &Path) -> io::Result<()> {
    crate::snapshot::private_dir(dst).map_err(io::Error::other)?;
    let done = (|| {
        for e in std::fs::read_dir(src)? {
            let e = e?;
            if !e.file_type()?.is_file() {
                continue;
            }
            copy_sparse(&e.path(), &dst.join(e.file_name()))?;
        }
        Ok(())
    })();
    if done.is_err() {
        let _ = warden_workspace::fsutil::remove_tree(dst);
    }
    done
}

/// What a template's base was when it was made: a write since (by a VMM
/// that mapped it) changes its change time, which no one sets back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stamp {
    pub size: u64,
    pub ino: u64,
    pub mtime_ns: i128,
    pub ctime_ns: i128,
}

impl Stamp {
    /// The stamp of the file at `path` now.
    pub fn of(path: &Path) -> io::Result<Stamp> {
        let m = std::fs::metadata(path)?;
        Ok(Stamp {
            size: m.len(),
            ino: m.ino(),
            mtime_ns: i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
            ctime_ns: i128::from(m.ctime()) * 1_000_000_000 + i128::from(m.ctime_nsec()),
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::os::unix::fs::FileExt;

    #[test]
    fn a_sparse_copy_keeps_the_data_and_the_holes() {
        let d = tempfile::tempdir().unwrap();
        let a = d.path().join("a");
        fresh(&a, 64).unwrap();
        let f = std::fs::OpenOptions::new().write(true).open(&a).unwrap();
        f.write_all_at(b"guest page", 10 << 20).unwrap();
        f.sync_all().unwrap();
        let b = d.path().join("b");
        copy_sparse(&a, &b).unwrap();
        let got = std::fs::read(&b).unwrap();
        assert_eq!(got.len(), 64 << 20);
        assert_eq!(&got[(10 << 20)..(10 << 20) + 10], b"guest page");
        // Not 64 MiB on disk: the holes stayed holes.
        assert!(std::fs::metadata(&b).unwrap().blocks() * 512 < 8 << 20);
    }

    #[test]
    fn a_memory_files_digest_follows_its_contents_not_its_holes() {
        let d = tempfile::tempdir().unwrap();
        let a = d.path().join("a");
        fresh(&a, 8).unwrap();
        let f = std::fs::OpenOptions::new().write(true).open(&a).unwrap();
        f.write_all_at(b"guest page", 3 << 20).unwrap();
        // Written zeros: data on disk, zeros to the guest.
        f.write_all_at(&[0u8; 8192], 5 << 20).unwrap();
        let b = d.path().join("b");
        copy_sparse(&a, &b).unwrap();
        assert_eq!(digest(&a).unwrap(), digest(&b).unwrap());
        let c = d.path().join("c");
        fresh(&c, 8).unwrap();
        let g = std::fs::OpenOptions::new().write(true).open(&c).unwrap();
        g.write_all_at(b"guest page", 3 << 20).unwrap();
        assert_eq!(digest(&a).unwrap(), digest(&c).unwrap());
        // One byte changed, anywhere (a hole made data too).
        f.write_all_at(b"x", 7 << 20).unwrap();
        assert_ne!(digest(&a).unwrap(), digest(&b).unwrap());
        assert!(check_digest(&b, None).is_err());
        let want = digest(&b).unwrap();
        assert!(check_digest(&b, Some(&want)).is_ok());
        assert!(check_digest(&a, Some(&want)).is_err());
    }

    #[test]
    fn copies_of_a_save_are_files_of_their_own_and_the_saved_vm_takes_its_base_back() {
        let d = tempfile::tempdir().unwrap();
        let src = d.path().join("saved");
        std::fs::create_dir(&src).unwrap();
        fresh(&src.join(BASE), 4).unwrap();
        std::fs::write(src.join("vm.vmstate"), b"devices").unwrap();
        let (a, b) = (d.path().join("a"), d.path().join("b"));
        copy_saved(&src, &a).unwrap();
        copy_saved(&src, &b).unwrap();
        let ino = |p: &Path| std::fs::metadata(p).unwrap().ino();
        let base = ino(&src.join(BASE));
        assert_ne!(ino(&a.join(BASE)), base);
        assert_ne!(ino(&b.join(BASE)), base);
        assert_ne!(ino(&a.join(BASE)), ino(&b.join(BASE)));
        // Nothing was added to the source's directory (a snapshot's
        // digest covers its files).
        assert_eq!(std::fs::read_dir(&src).unwrap().count(), 2);
        // The source's resume takes its base back; the copies' files are
        // not it.
        let running = d.path().join("running");
        take(&src, &running).unwrap();
        assert_eq!(ino(&running), base);
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(&running)
            .unwrap();
        f.write_all_at(b"later", 0).unwrap();
        assert_eq!(&std::fs::read(a.join(BASE)).unwrap()[..5], &[0u8; 5]);
    }
}
