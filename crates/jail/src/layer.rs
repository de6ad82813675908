//! The size-limited upper layer of a workspace overlay (`--disk`): while
//! the sandbox runs, the layer lives in a tmpfs of that size, so that a
//! write past the limit fails with ENOSPC inside and the host's disk is
//! never spent beyond it. The layer is restored from warden's state
//! directory into the tmpfs when the sandbox starts (by the init, in
//! `mounts::mount_overlay`) and written back when it stops (by the
//! supervisor, through a descriptor of the tmpfs the init handed over).
//!
//! The copy keeps what overlayfs reads from a layer: file types (whiteouts
//! are 0:0 character devices), modes, owners, times, extended attributes
//! (`user.overlay.*` marks: opaque directories, origins), hard links
//! within the layer, and holes (a sparse file stays sparse).

use std::collections::HashMap;
use std::ffi::{CString, OsStr};
use std::fs::{self, File};
use std::io;
use std::os::unix::fs::{FileExt, FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Marks a sandbox's state while its layer exists only in memory; removed
/// once the layer is written back. It holds the supervisor's PID and the
/// number of its descriptor of the layer's tmpfs, so that `warden diff`
/// reads the running layer at `/proc/PID/fd/N/upper`. Found while no run
/// holds the sandbox,
/// it says that the last run ended without saving (its supervisor was
/// killed) and its changes are lost.
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
pub fn copy_layer(src: &Path, dst: &Path, make_readable: bool) -> Result<(), LayerError> {
    let mut links = HashMap::new();
    let mut dirs = Vec::new();
    copy_entry(src, dst, make_readable, &mut links, &mut dirs)?;
    // Directories get their modes and times once their content is in
    // (a 0500 directory could not be filled afterwards), deepest first.
    for (path, meta) in dirs.iter().rev() {
        finish(path, meta, false)?;
    }
    Ok(())
}

fn copy_entry(
    src: &Path,
    dst: &Path,
    make_readable: bool,
    links: &mut HashMap<(u64, u64), PathBuf>,
    dirs: &mut Vec<(PathBuf, fs::Metadata)>,
) -> Result<(), LayerError> {
    let meta = fs::symlink_metadata(src).map_err(at(src))?;
    let ft = meta.file_type();
    if ft.is_dir() {
        if make_readable && meta.mode() & 0o500 != 0o500 {
            fs::set_permissions(src, fs::Permissions::from_mode(meta.mode() | 0o700))
                .map_err(at(src))?;
        }
        fs::create_dir(dst).map_err(at(dst))?;
        fs::set_permissions(dst, fs::Permissions::from_mode(0o700)).map_err(at(dst))?;
        copy_xattrs(src, dst)?;
        let mut names: Vec<_> = fs::read_dir(src)
            .map_err(at(src))?
            .map(|e| e.map(|e| e.file_name()))
            .collect::<Result<_, _>>()
            .map_err(at(src))?;
        names.sort();
        for name in names {
            copy_entry(
                &src.join(&name),
                &dst.join(&name),
                make_readable,
                links,
                dirs,
            )?;
        }
        dirs.push((dst.to_path_buf(), meta));
        return Ok(());
    }
    if ft.is_file() && meta.nlink() > 1 {
        if let Some(first) = links.get(&(meta.dev(), meta.ino())) {
            return fs::hard_link(first, dst).map_err(at(dst));
        }
        links.insert((meta.dev(), meta.ino()), dst.to_path_buf());
    }
    if ft.is_file() {
        if make_readable && meta.mode() & 0o400 == 0 {
            fs::set_permissions(src, fs::Permissions::from_mode(meta.mode() | 0o600))
                .map_err(at(src))?;
        }
        copy_sparse(src, dst, meta.len())?;
    } else if ft.is_symlink() {
        let target = fs::read_link(src).map_err(at(src))?;
        std::os::unix::fs::symlink(&target, dst).map_err(at(dst))?;
    } else if ft.is_char_device() || ft.is_block_device() || ft.is_fifo() || ft.is_socket() {
        // Whiteouts (0:0 character devices) are what a layer holds here;
        // a FIFO or socket is recreated as such.
        let kind = if ft.is_char_device() {
            rustix::fs::FileType::CharacterDevice
        } else if ft.is_block_device() {
            rustix::fs::FileType::BlockDevice
        } else if ft.is_fifo() {
            rustix::fs::FileType::Fifo
        } else {
            rustix::fs::FileType::Socket
        };
        rustix::fs::mknodat(
            rustix::fs::CWD,
            dst,
            kind,
            rustix::fs::Mode::from_raw_mode(meta.mode() & 0o7777),
            meta.rdev(),
        )
        .map_err(|e| io::Error::from_raw_os_error(e.raw_os_error()))
        .map_err(at(dst))?;
    }
    if !ft.is_symlink() {
        copy_xattrs(src, dst)?;
    }
    finish(dst, &meta, ft.is_symlink())
}

/// Owner, mode and times of `dst` from `meta` (links: owner and times).
fn finish(dst: &Path, meta: &fs::Metadata, symlink: bool) -> Result<(), LayerError> {
    let (uid, gid) = (meta.uid(), meta.gid());
    // The owner: kept where the copier may set it (root, or the init with
    // its namespace's capabilities); an unprivileged copier owns the copy,
    // which is the same user; an owner the sandbox's namespace does not
    // map (a layer restored from a snapshot as root) cannot be given
    // there (EINVAL), and the copy stays the sandbox's own.
    match std::os::unix::fs::lchown(dst, Some(uid), Some(gid)) {
        Ok(()) => {}
        Err(e) if matches!(e.raw_os_error(), Some(libc::EPERM | libc::EINVAL)) => {}
        Err(e) => return Err(at(dst)(e)),
    }
    if !symlink {
        fs::set_permissions(dst, fs::Permissions::from_mode(meta.mode() & 0o7777))
            .map_err(at(dst))?;
    }
    let times = rustix::fs::Timestamps {
        last_access: rustix::fs::Timespec {
            tv_sec: meta.atime(),
            tv_nsec: meta.atime_nsec() as _,
        },
        last_modification: rustix::fs::Timespec {
            tv_sec: meta.mtime(),
            tv_nsec: meta.mtime_nsec() as _,
        },
    };
    rustix::fs::utimensat(
        rustix::fs::CWD,
        dst,
        &times,
        rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
    )
    .map_err(|e| io::Error::from_raw_os_error(e.raw_os_error()))
    .map_err(at(dst))
}

/// Copy the data of `src` into a new file `dst`, extent by extent: holes
/// stay holes.
fn copy_sparse(src: &Path, dst: &Path, len: u64) -> Result<(), LayerError> {
    use std::os::unix::fs::OpenOptionsExt;
    let from = File::open(src).map_err(at(src))?;
    let to = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(dst)
        .map_err(at(dst))?;
    let mut pos = 0u64;
    let mut buf = vec![0u8; 256 * 1024];
    while pos < len {
        let data = match rustix::fs::seek(&from, rustix::fs::SeekFrom::Data(pos)) {
            Ok(d) => d,
            // No data after `pos`: the rest is a hole.
            Err(rustix::io::Errno::NXIO) => break,
            Err(e) => return Err(at(src)(io::Error::from_raw_os_error(e.raw_os_error()))),
        };
        let hole = rustix::fs::seek(&from, rustix::fs::SeekFrom::Hole(data))
            .map_err(|e| io::Error::from_raw_os_error(e.raw_os_error()))
            .map_err(at(src))?
            .min(len);
        let mut off = data;
        while off < hole {
            let want = ((hole - off) as usize).min(buf.len());
            let n = from.read_at(&mut buf[..want], off).map_err(at(src))?;
            if n == 0 {
                break;
            }
            to.write_all_at(&buf[..n], off).map_err(at(dst))?;
            off += n as u64;
        }
        pos = hole.max(off);
    }
    to.set_len(len).map_err(at(dst))
}

fn copy_xattrs(src: &Path, dst: &Path) -> Result<(), LayerError> {
    let names = match xattr_names(src) {
        Ok(n) => n,
        Err(e) if e.raw_os_error() == Some(libc::ENOTSUP) => return Ok(()),
        Err(e) => return Err(at(src)(e)),
    };
    for name in names {
        let mut value = vec![0u8; 64 * 1024];
        let n = match rustix::fs::lgetxattr(src, name.as_c_str(), &mut value[..]) {
            Ok(n) => n,
            Err(e) => return Err(at(src)(io::Error::from_raw_os_error(e.raw_os_error()))),
        };
        let set = rustix::fs::lsetxattr(
            dst,
            name.as_c_str(),
            &value[..n],
            rustix::fs::XattrFlags::empty(),
        );
        if let Err(e) = set {
            // overlayfs's own marks must come through; other attributes
            // a sandbox set (security.*, trusted.* where not permitted)
            // are kept where the copier may set them.
            if name.as_bytes().starts_with(b"user.overlay.") {
                return Err(at(dst)(io::Error::from_raw_os_error(e.raw_os_error())));
            }
        }
    }
    Ok(())
}

fn xattr_names(path: &Path) -> io::Result<Vec<CString>> {
    let err = |e: rustix::io::Errno| io::Error::from_raw_os_error(e.raw_os_error());
    let mut buf = vec![0u8; 4096];
    let n = loop {
        match rustix::fs::llistxattr(path, &mut buf[..]) {
            Ok(n) => break n,
            Err(rustix::io::Errno::RANGE) if buf.len() < (1 << 20) => buf.resize(buf.len() * 4, 0),
            Err(e) => return Err(err(e)),
        }
    };
    buf.truncate(n);
    Ok(buf
        .split(|b| *b == 0)
        .filter(|s| !s.is_empty())
        .filter_map(|s| CString::new(s.to_vec()).ok())
        .collect())
}

/// Remove the tree at `path`, making directories writable on the way
/// (the kernel leaves `work/work` at mode 000; a sandbox may leave 0500
/// directories).
pub fn remove_tree(path: &Path) -> io::Result<()> {
    let meta = match fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    if !meta.is_dir() {
        return fs::remove_file(path);
    }
    if meta.mode() & 0o700 != 0o700 {
        fs::set_permissions(path, fs::Permissions::from_mode(0o700))?;
    }
    for e in fs::read_dir(path)? {
        remove_tree(&e?.path())?;
    }
    fs::remove_dir(path)
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
