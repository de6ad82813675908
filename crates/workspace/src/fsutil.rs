//! Tree operations shared by snapshots, discards and the copy fallback:
//! removal that copes with what overlayfs leaves behind, and copies that keep
//! everything overlayfs reads (types, modes, symlink targets, whiteout
//! devices, extended attributes), with reflinks where the file system has
//! them.

use crate::overlay;
use rustix::fs::{FileType, Mode};
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum FsError {
    #[error("cannot remove {path}")]
    Remove {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot read {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot copy {src} to {dst}")]
    Copy {
        src: PathBuf,
        dst: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error(
        "cannot copy {src}: {what} is neither a file, a directory, a symbolic link nor a whiteout"
    )]
    Unsupported { src: PathBuf, what: &'static str },
}

/// Remove `path` and everything below it; a missing path is not an error.
///
/// Overlayfs leaves `work/work` with mode 000 after a mount; an unprivileged
/// owner can neither list nor empty it until its mode is restored, so every
/// directory is made 0700 before it is read.
pub fn remove_tree(path: &Path) -> Result<(), FsError> {
    let err = |source| FsError::Remove {
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
    for entry in fs::read_dir(path).map_err(err)? {
        remove_tree(&entry.map_err(err)?.path())?;
    }
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
/// system offers one, else a plain copy.
pub(crate) fn fill(from: &File, to: &mut File) -> io::Result<()> {
    if rustix::fs::ioctl_ficlone(&*to, from).is_ok() {
        return Ok(());
    }
    let mut reader = from;
    io::copy(&mut reader, to)?;
    Ok(())
}

fn libc_o_nofollow() -> i32 {
    rustix::fs::OFlags::NOFOLLOW.bits() as i32
}

/// Copy the tree at `src` to the new path `dst`, keeping types, modes,
/// symbolic links, whiteouts and extended attributes (overlay's marks
/// included).
pub fn copy_tree(src: &Path, dst: &Path) -> Result<(), FsError> {
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
            copy_tree(&entry.path(), &dst.join(entry.file_name()))?;
        }
        copy_xattrs(src, dst).map_err(copy_err)?;
        // Last, so a read-only directory can still be filled.
        fs::set_permissions(dst, fs::Permissions::from_mode(meta.mode() & 0o7777))
            .map_err(copy_err)?;
    } else if ft.is_file() {
        copy_file(src, dst, meta.mode()).map_err(copy_err)?;
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
