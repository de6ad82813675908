//! Files one process writes and another reads (a sandbox's stored spec
//! and state, a container's state and PID file, a command's output note,
//! the cgroup plan kept between runs, a guest image in the cache, a
//! profile a grant edits) are replaced whole: a reader sees the old file or
//! the new one, never half of one, and after a crash the name holds one of
//! them, not an empty or torn file.
//!
//! The bytes go to a new file beside the old one (same directory, so the
//! rename cannot cross a file system), which is synced before it is renamed
//! over the old name; the directory is synced after, so the rename itself
//! survives a crash. Without the first sync, ext4 and xfs may commit the
//! rename before the data, which is how a crash leaves a zero-length file
//! under the old name.

use std::fs::{File, OpenOptions, Permissions};
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Replace the file at `path` with `bytes`, whole and durably, as a file of
/// exactly `mode` (the process's umask does not apply: pass the old file's
/// mode to keep it). On error the old file is as it was and no temporary
/// file is left behind, except when the rename was done and only the
/// directory's sync failed (then the new file is in place, and the error
/// says its durability is not known).
pub fn replace_file(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    let tmp = sibling(path)?;
    let written = write_synced(&tmp, bytes, mode).and_then(|()| std::fs::rename(&tmp, path));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    sync_dir(path)
}

/// Put `tmp`, a file finished by someone else (a tool that writes a file
/// too large to hold in memory), at `path` as [`replace_file`] would:
/// synced, renamed over, the directory synced. `tmp` must be in `path`'s
/// directory; on error before the rename it is left for the caller.
pub fn persist(tmp: &Path, path: &Path) -> std::io::Result<()> {
    File::open(tmp)?.sync_all()?;
    std::fs::rename(tmp, path)?;
    sync_dir(path)
}

/// The process that writes (or wrote) the temporary file named `name`, if
/// it is one of [`replace_file`]'s: a cache sweep removes those of
/// processes that are gone (killed mid-write, before they could).
pub fn writer_of(name: &str) -> Option<u32> {
    let rest = name.strip_prefix('.')?.strip_suffix(".tmp")?;
    let (rest, _counter) = rest.rsplit_once('.')?;
    let (_, pid) = rest.rsplit_once('.')?;
    pid.parse().ok()
}

/// A name beside `path` that no other writer uses: this process's id and a
/// counter, so that two threads or two processes replacing the same file
/// never write into each other's temporary file.
fn sibling(path: &Path) -> std::io::Result<PathBuf> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let name = path.file_name().ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{} names no file to replace", path.display()),
        )
    })?;
    let mut tmp = std::ffi::OsString::from(".");
    tmp.push(name);
    tmp.push(format!(
        ".{}.{}.tmp",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    Ok(path.with_file_name(tmp))
}

fn write_synced(tmp: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    // A new file (never one a link points at), owner-only until its mode
    // is set: nothing reads a half-written temporary file's bytes through
    // looser permissions.
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(tmp)?;
    f.write_all(bytes)?;
    f.set_permissions(Permissions::from_mode(mode))?;
    f.sync_all()
}

/// Sync the directory holding `path`, so that its new entry is on disk.
fn sync_dir(path: &Path) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn a_file_is_replaced_whole_with_exactly_the_mode_given() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        std::fs::write(&path, "old contents, longer than the new").unwrap();
        // 0o666: more than a usual umask (022) lets a new file have, so
        // the mode is proven set, not inherited from the umask.
        replace_file(&path, b"new", 0o666).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"new");
        assert_eq!(std::fs::metadata(&path).unwrap().mode() & 0o7777, 0o666);
        replace_file(&path, b"newer", 0o600).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"newer");
        assert_eq!(std::fs::metadata(&path).unwrap().mode() & 0o7777, 0o600);
        assert_eq!(names(dir.path()), ["state.json"]);
    }

    #[test]
    fn a_failed_replacement_keeps_the_old_file_and_leaves_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        // A directory (not empty) under the name: the rename fails after
        // the temporary file was written and synced.
        let path = dir.path().join("taken");
        std::fs::create_dir(&path).unwrap();
        std::fs::write(path.join("inside"), "kept").unwrap();
        assert!(replace_file(&path, b"new", 0o644).is_err());
        assert_eq!(names(dir.path()), ["taken"]);
        assert_eq!(std::fs::read(path.join("inside")).unwrap(), b"kept");
        // No directory to write in: nothing is created anywhere.
        let missing = dir.path().join("missing/state.json");
        assert!(replace_file(&missing, b"new", 0o644).is_err());
        assert_eq!(names(dir.path()), ["taken"]);
    }

    #[test]
    fn a_temporary_file_names_its_writer() {
        let tmp = sibling(Path::new("/cache/initramfs-ab12.cpio")).unwrap();
        let name = tmp.file_name().unwrap().to_str().unwrap();
        assert_eq!(writer_of(name), Some(std::process::id()));
        assert_eq!(writer_of("initramfs-ab12.cpio"), None);
        assert_eq!(writer_of(".initramfs-ab12.4242"), None);
    }

    #[test]
    fn a_link_at_the_name_is_replaced_not_written_through() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("target");
        std::fs::write(&target, "untouched").unwrap();
        let path = dir.path().join("link");
        std::os::unix::fs::symlink(&target, &path).unwrap();
        replace_file(&path, b"new", 0o600).unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"untouched");
        assert!(!std::fs::symlink_metadata(&path)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(std::fs::read(&path).unwrap(), b"new");
    }
}
