//! The guest's side of [`crate::shares`]: a `--rootfs` tree as the
//! guest's system directories, each `--ro`/`--rw` bind at its own path,
//! and an empty stand-in over each of warden's hidden directories that a
//! share shows.

use super::{fs_err, mount_fs, GuestError};
use nix::mount::{mount, umount2, MntFlags, MsFlags};
use std::path::{Path, PathBuf};

/// One bind the host shares: its 9p tag, where it goes, whether it may be
/// written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct GuestBind {
    pub tag: String,
    pub path: PathBuf,
    pub writable: bool,
    /// A single file: the share holds it alone, under its own name.
    pub file: bool,
}

/// `TAG:ro|rw|rof|rwf:HEXPATH`, as the host writes it.
pub(super) fn parse_bind(v: &str) -> Option<GuestBind> {
    let mut parts = v.splitn(3, ':');
    let tag = parts.next()?.to_string();
    let (writable, file) = match parts.next()? {
        "rw" => (true, false),
        "ro" => (false, false),
        "rwf" => (true, true),
        "rof" => (false, true),
        _ => return None,
    };
    let path = crate::shares::unhex(parts.next()?)?;
    let ok_tag = !tag.is_empty() && tag.chars().all(|c| c.is_ascii_alphanumeric());
    let named = !file || path.file_name().is_some();
    (ok_tag && named).then_some(GuestBind {
        tag,
        path,
        writable,
        file,
    })
}

/// Where the rootfs share is mounted while its entries are adopted.
const STAGING: &str = "/.rootfs";

/// Entries of the initramfs that the guest keeps whatever the tree holds:
/// its kernel file systems and its own fresh directories.
const GUEST_OWN: &[&str] = &[
    "proc",
    "sys",
    "dev",
    "tmp",
    "root",
    "run",
    "workspace",
    "modules",
    "init",
];

/// The merged-/usr links the initramfs has for the host's own libraries.
const HOST_LINKS: &[&str] = &["bin", "sbin", "lib", "lib64", "lib32", "libx32"];

fn io_err<'a>(
    what: &'static str,
    path: &'a Path,
) -> impl FnOnce(std::io::Error) -> GuestError + 'a {
    move |e| GuestError::Fs {
        what,
        path: path.display().to_string(),
        source: nix::errno::Errno::from_raw(e.raw_os_error().unwrap_or(nix::libc::EIO)),
    }
}

/// Bind `src` over `dst` read-only (a bind does not take the flags of
/// its first mount: they are set by a remount).
fn bind_read_only(src: &Path, dst: &Path) -> Result<(), GuestError> {
    let d = dst.display().to_string();
    mount(Some(src), dst, None::<&str>, MsFlags::MS_BIND, None::<&str>)
        .map_err(fs_err("bind", &d))?;
    mount(
        None::<&str>,
        dst,
        None::<&str>,
        MsFlags::MS_REMOUNT
            | MsFlags::MS_BIND
            | MsFlags::MS_RDONLY
            | MsFlags::MS_NOSUID
            | MsFlags::MS_NODEV,
        None::<&str>,
    )
    .map_err(fs_err("make read-only", &d))
}

/// The guest's block device that holds a root image (the one drive the
/// host attaches).
const ROOT_DEVICE: &str = "/dev/vda";

/// Wait (at most 10 s) for the block device's node, which the kernel
/// makes once its driver has probed the drive.
fn wait_for_device(path: &str) -> Result<(), GuestError> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !Path::new(path).exists() {
        if std::time::Instant::now() > deadline {
            return Err(GuestError::Fs {
                what: "find",
                path: path.into(),
                source: nix::errno::Errno::ENODEV,
            });
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    Ok(())
}

/// The `--rootfs` tree as the guest's system directories: the host's
/// read-only image of it on the block device (`image`: its file system),
/// else its `root` share, mounted read-only, `nosuid,nodev`. Each of its
/// top-level entries replaces the initramfs's (a directory or file bound
/// read-only, `nosuid,nodev`, a link copied), and the initramfs's links to
/// the host's libraries go. The guest's own `/proc`, `/dev`, `/tmp`, home,
/// `/run` and workspace stay its own.
pub(super) fn adopt_rootfs(nine: &str, image: Option<&str>) -> Result<(), GuestError> {
    let flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_RDONLY;
    match image {
        Some(fstype) => {
            wait_for_device(ROOT_DEVICE)?;
            mount_fs(ROOT_DEVICE, STAGING, fstype, flags, "")?;
        }
        None => mount_fs("root", STAGING, "9p", flags, &format!("{nine},cache=loose"))?,
    }
    let staging = Path::new(STAGING);
    for name in HOST_LINKS {
        let p = Path::new("/").join(name);
        if p.symlink_metadata()
            .is_ok_and(|m| m.file_type().is_symlink())
        {
            std::fs::remove_file(&p).map_err(io_err("remove", &p))?;
        }
    }
    let entries = std::fs::read_dir(staging).map_err(io_err("read", staging))?;
    for e in entries {
        let e = e.map_err(io_err("read", staging))?;
        let name = e.file_name();
        if GUEST_OWN
            .iter()
            .any(|o| name.as_encoded_bytes() == o.as_bytes())
        {
            continue;
        }
        let src = e.path();
        // ext4's own empty `lost+found`, which the tree did not have.
        if image == Some("ext4")
            && name.as_encoded_bytes() == b"lost+found"
            && std::fs::read_dir(&src).is_ok_and(|mut d| d.next().is_none())
        {
            continue;
        }
        let dst = Path::new("/").join(&name);
        let meta = e.metadata().map_err(io_err("read", &src))?;
        if meta.file_type().is_symlink() {
            let target = std::fs::read_link(&src).map_err(io_err("read", &src))?;
            if dst.symlink_metadata().is_ok() {
                let _ = std::fs::remove_file(&dst);
            }
            std::os::unix::fs::symlink(&target, &dst).map_err(io_err("create", &dst))?;
            continue;
        }
        if meta.is_dir() {
            std::fs::create_dir_all(&dst).map_err(io_err("create", &dst))?;
        } else if dst.symlink_metadata().is_err() {
            std::fs::write(&dst, b"").map_err(io_err("create", &dst))?;
        }
        bind_read_only(&src, &dst)?;
    }
    // The tree's own /etc replaced the host's few files; without one, an
    // empty /etc: nothing of the host's remains.
    if !staging.join("etc").exists() {
        mount_fs(
            "tmpfs",
            "/etc",
            "tmpfs",
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
            "mode=755,size=64k",
        )?;
    }
    umount2(STAGING, MntFlags::MNT_DETACH).map_err(fs_err("unmount", STAGING))?;
    let _ = std::fs::remove_dir(STAGING);
    Ok(())
}

/// Where a single-file share is mounted while its file is bound.
const FILE_STAGING: &str = "/.file";

/// Mount each bind at its own path (parents before what they hold),
/// read-only ones read-only; returns the writable ones (for Landlock).
pub(super) fn mount_binds(binds: &[GuestBind], nine: &str) -> Result<Vec<PathBuf>, GuestError> {
    let mut sorted: Vec<&GuestBind> = binds.iter().collect();
    sorted.sort_by_key(|b| b.path.components().count());
    let mut writable = Vec::new();
    for b in sorted {
        let mut flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
        if b.writable {
            writable.push(b.path.clone());
        } else {
            flags |= MsFlags::MS_RDONLY;
        }
        let path = b.path.display().to_string();
        if b.file {
            mount_file(b, flags, nine)?;
            continue;
        }
        let point = mount_point(&b.path, false)?;
        mount(
            Some(b.tag.as_str()),
            &fd_path(&point),
            Some("9p"),
            flags,
            Some(format!("{nine},cache=none").as_str()),
        )
        .map_err(fs_err("mount", &path))?;
    }
    Ok(writable)
}

/// `path` of the guest's tree as a place to mount a share on, walked from
/// `/` one component at a time without following a symbolic link (made
/// where missing: directories, and at the end an empty file when `file`),
/// as an `O_PATH` descriptor to mount on through `/proc/self/fd/N`. The
/// shares are mounted again after a resume from disk, over a tree the
/// sandbox wrote before its pause: a link it made on the way (`sub ->
/// /dev/shm/x` in a share above another's path) is refused, never
/// followed, so a share is mounted at its own path or nowhere.
fn mount_point(path: &Path, file: bool) -> Result<std::os::fd::OwnedFd, GuestError> {
    use rustix::fs::{FileType, Mode, OFlags};
    let shown = path.display().to_string();
    let err = |what| {
        let shown = shown.clone();
        move |e: rustix::io::Errno| GuestError::Fs {
            what,
            path: shown,
            source: nix::errno::Errno::from_raw(e.raw_os_error()),
        }
    };
    let at = OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let mut dir =
        rustix::fs::open("/", at | OFlags::DIRECTORY, Mode::empty()).map_err(err("open"))?;
    let names: Vec<&std::ffi::OsStr> = path
        .components()
        .filter_map(|c| match c {
            std::path::Component::Normal(n) => Some(n),
            _ => None,
        })
        .collect();
    for (i, name) in names.iter().enumerate() {
        let leaf_file = file && i + 1 == names.len();
        let open = |dir: &std::os::fd::OwnedFd| {
            rustix::fs::openat(
                dir,
                *name,
                if leaf_file {
                    at
                } else {
                    at | OFlags::DIRECTORY
                },
                Mode::empty(),
            )
        };
        let next = match open(&dir) {
            Err(rustix::io::Errno::NOENT) => {
                let made = if leaf_file {
                    rustix::fs::openat(
                        &dir,
                        *name,
                        OFlags::WRONLY
                            | OFlags::CREATE
                            | OFlags::EXCL
                            | OFlags::NOFOLLOW
                            | OFlags::CLOEXEC,
                        Mode::from_raw_mode(0o644),
                    )
                    .map(drop)
                } else {
                    rustix::fs::mkdirat(&dir, *name, Mode::from_raw_mode(0o755))
                };
                match made {
                    Ok(()) | Err(rustix::io::Errno::EXIST) => {}
                    Err(e) => return Err(err("create")(e)),
                }
                open(&dir).map_err(err("open"))?
            }
            // A link as a directory's component: ENOTDIR with O_DIRECTORY.
            other => other.map_err(err("open"))?,
        };
        let kind = FileType::from_raw_mode(rustix::fs::fstat(&next).map_err(err("open"))?.st_mode);
        let wanted = if leaf_file {
            kind == FileType::RegularFile
        } else {
            kind == FileType::Directory
        };
        if !wanted {
            // O_PATH | O_NOFOLLOW opens a link itself: never mounted on.
            return Err(err("mount on")(rustix::io::Errno::LOOP));
        }
        dir = next;
    }
    Ok(dir)
}

/// The path through which a mount point opened by [`mount_point`] is
/// mounted on: that very directory or file, looked up again nowhere.
fn fd_path(fd: &std::os::fd::OwnedFd) -> PathBuf {
    use std::os::fd::AsRawFd;
    PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()))
}

/// A single-file share: its directory (the file alone) mounted aside, the
/// file bound at its path (created empty first when the guest has none
/// there), then the directory detached: the bind alone stays.
fn mount_file(b: &GuestBind, flags: MsFlags, nine: &str) -> Result<(), GuestError> {
    let staging = Path::new(FILE_STAGING);
    std::fs::create_dir_all(staging).map_err(io_err("create", staging))?;
    mount_fs(
        &b.tag,
        FILE_STAGING,
        "9p",
        flags,
        &format!("{nine},cache=none"),
    )?;
    let name = b.path.file_name().unwrap_or_default();
    let src = staging.join(name);
    let d = b.path.display().to_string();
    let point = mount_point(&b.path, true)?;
    mount(
        Some(&src),
        &fd_path(&point),
        None::<&str>,
        MsFlags::MS_BIND,
        None::<&str>,
    )
    .map_err(fs_err("bind", &d))?;
    if !b.writable {
        // The bind just made, reached the same way (a remount takes the
        // flags a bind does not).
        let top = mount_point(&b.path, true)?;
        mount(
            None::<&str>,
            &fd_path(&top),
            None::<&str>,
            MsFlags::MS_REMOUNT
                | MsFlags::MS_BIND
                | MsFlags::MS_RDONLY
                | MsFlags::MS_NOSUID
                | MsFlags::MS_NODEV,
            None::<&str>,
        )
        .map_err(fs_err("make read-only", &d))?;
    }
    umount2(FILE_STAGING, MntFlags::MNT_DETACH).map_err(fs_err("unmount", FILE_STAGING))?;
    std::fs::remove_dir(staging).map_err(io_err("remove", staging))?;
    Ok(())
}

/// Cover each of `hidden` that exists with an empty, read-only,
/// unreadable tmpfs.
pub(super) fn hide(hidden: &[PathBuf]) -> Result<(), GuestError> {
    for h in hidden {
        if h.is_dir() {
            let p = h.display().to_string();
            mount(
                Some("tmpfs"),
                h,
                Some("tmpfs"),
                MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC | MsFlags::MS_RDONLY,
                Some("mode=000,size=4k"),
            )
            .map_err(fs_err("cover", &p))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// The review's 28b variant 1c, guest side: before a pause the
    /// sandbox makes a component of a share's mount point a link (to a
    /// directory of its own choosing); mounting the shares again after
    /// the resume must refuse it, never mount where it points.
    #[test]
    fn a_mount_point_through_a_link_is_refused_and_a_missing_one_is_made_without_following_any() {
        let dir = tempfile::tempdir().unwrap();
        let top = std::fs::canonicalize(dir.path()).unwrap();
        let elsewhere = top.join("elsewhere");
        std::fs::create_dir_all(elsewhere.join("data")).unwrap();
        std::fs::create_dir_all(top.join("q")).unwrap();
        std::os::unix::fs::symlink(&elsewhere, top.join("q/sub")).unwrap();
        let refused = mount_point(&top.join("q/sub/data"), false).unwrap_err();
        assert!(refused.to_string().contains("q/sub/data"), "{refused}");
        std::fs::write(elsewhere.join("target"), "").unwrap();
        std::os::unix::fs::symlink(elsewhere.join("target"), top.join("q/file")).unwrap();
        assert!(mount_point(&top.join("q/file"), true).is_err());
        assert!(mount_point(&top.join("q/sub/new"), false).is_err());
        assert!(
            !elsewhere.join("new").exists(),
            "a directory was made through the link"
        );
        // Missing ones are made, and the descriptor is of the very place.
        use std::os::unix::fs::MetadataExt;
        let made = mount_point(&top.join("r/s/data"), false).unwrap();
        let st = rustix::fs::fstat(&made).unwrap();
        let on_disk = std::fs::metadata(top.join("r/s/data")).unwrap();
        assert_eq!((st.st_dev, st.st_ino), (on_disk.dev(), on_disk.ino()));
        mount_point(&top.join("r/s/f.conf"), true).unwrap();
        assert!(top.join("r/s/f.conf").is_file());
    }

    #[test]
    fn a_bind_parameter_is_read_back_exactly_or_not_at_all() {
        let p = Path::new("/srv/data x");
        let v = format!("b3:ro:{}", crate::shares::hex(p));
        assert_eq!(
            parse_bind(&v),
            Some(GuestBind {
                tag: "b3".into(),
                path: p.to_path_buf(),
                writable: false,
                file: false,
            })
        );
        let f = format!("b1:rwf:{}", crate::shares::hex(Path::new("/etc/x.conf")));
        assert!(parse_bind(&f).is_some_and(|b| b.file && b.writable));
        for bad in ["b3:rx:2f", "b3:rw:zz", ":rw:2f", "b/3:rw:2f", "b3:rw"] {
            assert_eq!(parse_bind(bad), None, "{bad}");
        }
    }
}
