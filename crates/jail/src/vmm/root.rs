//! The helper's own root: a tmpfs holding only the paths it may use, each a
//! bind mount of the host's (read-only unless it writes there), a fresh
//! `/proc` of its own PID namespace, and nothing else of the host's tree.
//!
//! The plan is made in the parent (every path as a C string, every mount
//! attribute decided) and carried out in the helper between fork and exec
//! with plain system calls only.

use std::ffi::CString;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use crate::sys::{MOUNT_ATTR_NODEV, MOUNT_ATTR_NOSUID, MOUNT_ATTR_RDONLY};

/// Why the helper's root could not be planned.
#[derive(Debug, thiserror::Error)]
pub enum RootPlanError {
    #[error(
        "{path} cannot be placed in the helper's root: it must be an absolute path without `..`"
    )]
    NotAbsolute { path: PathBuf },
    #[error("{path} cannot be placed in the helper's root: it holds a NUL byte")]
    Nul { path: PathBuf },
    #[error("cannot read the symbolic link {path} to recreate it in the helper's root")]
    ReadLink {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the helper's root cannot be built at {path}: it must be an existing directory of warden's own that is not a path placed in it")]
    BadRoot { path: PathBuf },
}

/// How a path is placed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// Read-only, no device, no set-ID.
    Read,
    /// Read-write, no device, no set-ID.
    Write,
    /// A device node, opened read-write.
    Device,
}

/// One step of building the root, paths already under the root.
#[derive(Debug, Clone)]
enum Step {
    /// `mkdir` (an existing one is fine).
    Dir(CString),
    /// An empty file to bind a file onto (an existing one is fine).
    File(CString),
    /// A symbolic link as the host has it.
    Link { target: CString, at: CString },
    /// A recursive bind mount, then these attributes on every mount below.
    Bind {
        from: CString,
        to: CString,
        attrs: u64,
    },
    /// A host file opened and checked before the fork (`fd`, whose
    /// device and inode are `id`), bound from the helper's own mount
    /// namespace: a bind's source must be a mount of the namespace it is
    /// made in (the kernel refuses one of the parent's with `EINVAL`), so
    /// `from` is opened again there through no link
    /// (`openat2(RESOLVE_NO_SYMLINKS)`), refused unless it is that very
    /// file, put in `fd`'s place and bound through `fd_path`
    /// (`/proc/self/fd/N`, prepared before the fork), then these
    /// attributes on every mount below. A link or another file swapped in
    /// at `from` since it was checked is never placed.
    BindChecked {
        from: CString,
        fd: RawFd,
        fd_path: CString,
        id: (u64, u64),
        to: CString,
        attrs: u64,
    },
    /// A detached mount tree made before the fork (an idmapped view),
    /// attached, then these attributes on every mount below.
    Attach {
        tree: RawFd,
        to: CString,
        attrs: u64,
    },
}

/// A host file (or directory) placed at another path of the root, or,
/// with `view`, the detached mount tree of it (an idmapped view, made
/// before the fork: a mount cannot be cloned into the helper's new mount
/// namespace from there) attached at that path instead. The descriptor
/// must stay open until the helper has been spawned.
#[derive(Debug, Clone)]
pub struct PlacedPath {
    /// Its path on the host, for messages only.
    pub host: PathBuf,
    /// The file (or directory) opened once, through no link and checked:
    /// `host` is bound only where the helper's own lookup of it, through
    /// no link, finds this very file (see `Step::BindChecked`).
    pub source: RawFd,
    /// `source` is a directory (read on the descriptor).
    pub dir: bool,
    /// `source`'s device and inode (read on the descriptor): what the
    /// helper's own lookup of `host` must find.
    pub id: (u64, u64),
    pub inside: PathBuf,
    pub kind: Kind,
    pub view: Option<RawFd>,
}

/// The root, planned.
#[derive(Debug, Clone)]
pub struct RootPlan {
    /// Where the tmpfs is mounted (then pivoted into).
    at: CString,
    proc_at: CString,
    steps: Vec<Step>,
}

fn cstr(p: &Path) -> Result<CString, RootPlanError> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| RootPlanError::Nul {
        path: p.to_path_buf(),
    })
}

/// `p` without its leading `/`, checked.
fn relative(p: &Path) -> Result<PathBuf, RootPlanError> {
    if !p.is_absolute() || p.components().any(|c| c == Component::ParentDir) {
        return Err(RootPlanError::NotAbsolute {
            path: p.to_path_buf(),
        });
    }
    Ok(p.components()
        .filter(|c| matches!(c, Component::Normal(_)))
        .collect())
}

impl RootPlan {
    /// Plan a root at `at` (an empty directory of warden's own) holding
    /// each of `paths` at its own path, and each `(host file, path inside)`
    /// of `placed` at its path inside.
    pub fn new(
        at: &Path,
        paths: &[(PathBuf, Kind)],
        placed: &[PlacedPath],
    ) -> Result<RootPlan, RootPlanError> {
        let bad_root = || RootPlanError::BadRoot {
            path: at.to_path_buf(),
        };
        if !std::fs::symlink_metadata(at).is_ok_and(|m| m.is_dir()) {
            return Err(bad_root());
        }
        // Shallowest first, so that a path already placed beneath another
        // of the same kind is skipped and a writable one beneath a
        // read-only one is bound over it.
        let mut sorted: Vec<(PathBuf, Kind)> = paths
            .iter()
            .map(|(p, k)| Ok((relative(p)?, *k)))
            .collect::<Result<_, RootPlanError>>()?;
        sorted.sort_by(|a, b| {
            (a.0.components().count(), a.1, &a.0).cmp(&(b.0.components().count(), b.1, &b.0))
        });
        sorted.dedup();
        let mut steps = Vec::new();
        let mut made: Vec<PathBuf> = Vec::new();
        let mut placed_so_far: Vec<(PathBuf, Kind)> = Vec::new();
        for (rel, kind) in sorted {
            if rel.as_os_str().is_empty() {
                return Err(bad_root());
            }
            let host = Path::new("/").join(&rel);
            if host.starts_with(at) {
                return Err(bad_root());
            }
            if placed_so_far
                .iter()
                .any(|(p, k)| *k == kind && rel.starts_with(p))
            {
                continue;
            }
            let meta = match std::fs::symlink_metadata(&host) {
                Ok(m) => m,
                // Gone since it was chosen: nothing to place.
                Err(_) => continue,
            };
            let inside = at.join(&rel);
            parents(at, &rel, &mut made, &mut steps)?;
            if meta.file_type().is_symlink() {
                let target =
                    std::fs::read_link(&host).map_err(|source| RootPlanError::ReadLink {
                        path: host.clone(),
                        source,
                    })?;
                steps.push(Step::Link {
                    target: cstr(&target)?,
                    at: cstr(&inside)?,
                });
                placed_so_far.push((rel, kind));
                continue;
            }
            steps.push(if meta.is_dir() {
                Step::Dir(cstr(&inside)?)
            } else {
                Step::File(cstr(&inside)?)
            });
            if meta.is_dir() {
                made.push(rel.clone());
            }
            steps.push(Step::Bind {
                from: cstr(&host)?,
                to: cstr(&inside)?,
                attrs: attrs(kind),
            });
            placed_so_far.push((rel, kind));
        }
        for p in placed {
            let rel = relative(&p.inside)?;
            parents(at, &rel, &mut made, &mut steps)?;
            let to = at.join(&rel);
            steps.push(if p.dir {
                Step::Dir(cstr(&to)?)
            } else {
                Step::File(cstr(&to)?)
            });
            steps.push(match p.view {
                Some(tree) => Step::Attach {
                    tree,
                    to: cstr(&to)?,
                    attrs: attrs(p.kind),
                },
                None => Step::BindChecked {
                    from: cstr(&p.host)?,
                    fd: p.source,
                    fd_path: cstr(Path::new(&format!("/proc/self/fd/{}", p.source)))?,
                    id: p.id,
                    to: cstr(&to)?,
                    attrs: attrs(p.kind),
                },
            });
        }
        steps.push(Step::Dir(cstr(&at.join("proc"))?));
        Ok(RootPlan {
            at: cstr(at)?,
            proc_at: cstr(&at.join("proc"))?,
            steps,
        })
    }

    /// Build the root and make it this process's `/`: to be called in the
    /// helper, in its new mount namespace, as PID 1 of its new PID
    /// namespace, with the powers to mount.
    ///
    /// Calls only async-signal-safe system calls on memory prepared
    /// before the fork; allocates nothing.
    pub fn enter(&self) -> std::io::Result<()> {
        let check = |rc: libc::c_int| -> std::io::Result<()> {
            if rc < 0 {
                Err(std::io::Error::last_os_error())
            } else {
                Ok(())
            }
        };
        let null = std::ptr::null::<libc::c_char>();
        // SAFETY: every pointer is a NUL-terminated string owned by `self`
        // or a static literal, alive for the call; the kernel only reads
        // them.
        unsafe {
            // Nothing done here propagates back to the host's mounts.
            check(libc::mount(
                null,
                c"/".as_ptr(),
                null,
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            ))?;
            check(libc::mount(
                c"tmpfs".as_ptr(),
                self.at.as_ptr(),
                c"tmpfs".as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV,
                c"mode=0755,size=1m,nr_inodes=4096".as_ptr().cast(),
            ))?;
            for step in &self.steps {
                match step {
                    Step::Dir(p) => {
                        if libc::mkdir(p.as_ptr(), 0o755) < 0 {
                            let e = std::io::Error::last_os_error();
                            if e.raw_os_error() != Some(libc::EEXIST) {
                                return Err(e);
                            }
                        }
                    }
                    Step::File(p) => {
                        let fd = libc::open(
                            p.as_ptr(),
                            libc::O_WRONLY | libc::O_CREAT | libc::O_CLOEXEC | libc::O_NOFOLLOW,
                            0o644,
                        );
                        if fd < 0 {
                            let e = std::io::Error::last_os_error();
                            // Already there (a placeholder on a share).
                            if !matches!(e.raw_os_error(), Some(libc::EEXIST | libc::EROFS)) {
                                return Err(e);
                            }
                        } else {
                            libc::close(fd);
                        }
                    }
                    Step::Link { target, at } => {
                        check(libc::symlink(target.as_ptr(), at.as_ptr()))?;
                    }
                    Step::Bind { from, to, attrs } => {
                        check(libc::mount(
                            from.as_ptr(),
                            to.as_ptr(),
                            null,
                            libc::MS_BIND | libc::MS_REC,
                            std::ptr::null(),
                        ))?;
                        crate::sys::mount_setattr_path(to, *attrs, true)
                            .map_err(|e| std::io::Error::from_raw_os_error(e as i32))?;
                    }
                    Step::BindChecked {
                        from,
                        fd,
                        fd_path,
                        id,
                        to,
                        attrs,
                    } => {
                        let again = crate::sys::open_path_no_symlinks(from)
                            .map_err(|e| std::io::Error::from_raw_os_error(e as i32))?;
                        let mut st: libc::stat = std::mem::zeroed();
                        check(libc::fstat(again.as_raw_fd(), &mut st))?;
                        if (st.st_dev, st.st_ino) != *id {
                            return Err(std::io::Error::from_raw_os_error(libc::ESTALE));
                        }
                        // In the checked descriptor's place (close-on-exec:
                        // the helper's program never holds it).
                        check(libc::dup3(again.as_raw_fd(), *fd, libc::O_CLOEXEC))?;
                        drop(again);
                        check(libc::mount(
                            fd_path.as_ptr(),
                            to.as_ptr(),
                            null,
                            libc::MS_BIND | libc::MS_REC,
                            std::ptr::null(),
                        ))?;
                        crate::sys::mount_setattr_path(to, *attrs, true)
                            .map_err(|e| std::io::Error::from_raw_os_error(e as i32))?;
                    }
                    Step::Attach { tree, to, attrs } => {
                        let tree = std::os::fd::BorrowedFd::borrow_raw(*tree);
                        crate::sys::move_mount_to(tree, to)
                            .map_err(|e| std::io::Error::from_raw_os_error(e as i32))?;
                        crate::sys::mount_setattr_path(to, *attrs, true)
                            .map_err(|e| std::io::Error::from_raw_os_error(e as i32))?;
                    }
                }
            }
            // The /proc of its own PID namespace: itself and its children.
            check(libc::mount(
                c"proc".as_ptr(),
                self.proc_at.as_ptr(),
                c"proc".as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                std::ptr::null(),
            ))?;
            // The tmpfs itself read-only: the helper creates nothing there.
            crate::sys::mount_setattr_path(&self.at, MOUNT_ATTR_RDONLY, false)
                .map_err(|e| std::io::Error::from_raw_os_error(e as i32))?;
            check(libc::chdir(self.at.as_ptr()))?;
            crate::sys::pivot_root(c".", c".")
                .map_err(|e| std::io::Error::from_raw_os_error(e as i32))?;
            // The host's tree, now stacked under the new root, goes.
            check(libc::umount2(c".".as_ptr(), libc::MNT_DETACH))?;
            check(libc::chdir(c"/".as_ptr()))?;
        }
        Ok(())
    }
}

fn attrs(kind: Kind) -> u64 {
    match kind {
        Kind::Read => MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
        Kind::Write => MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
        Kind::Device => MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID,
    }
}

/// `mkdir` steps for each parent of `rel` not made yet.
fn parents(
    at: &Path,
    rel: &Path,
    made: &mut Vec<PathBuf>,
    steps: &mut Vec<Step>,
) -> Result<(), RootPlanError> {
    let mut p = PathBuf::new();
    let n = rel.components().count();
    for c in rel.components().take(n.saturating_sub(1)) {
        p.push(c);
        if !made.contains(&p) {
            steps.push(Step::Dir(cstr(&at.join(&p))?));
            made.push(p.clone());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_path_beneath_one_of_the_same_kind_is_not_placed_twice() {
        let dir = tempfile::tempdir().unwrap();
        let at = dir.path().join("root");
        std::fs::create_dir(&at).unwrap();
        let plan = RootPlan::new(
            &at,
            &[
                (PathBuf::from("/usr/bin"), Kind::Read),
                (PathBuf::from("/usr"), Kind::Read),
            ],
            &[],
        )
        .unwrap();
        let binds = plan
            .steps
            .iter()
            .filter(|s| matches!(s, Step::Bind { .. }))
            .count();
        assert_eq!(binds, 1, "{plan:?}");
    }

    #[test]
    fn a_path_inside_the_roots_own_directory_or_a_relative_path_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let at = dir.path().join("root");
        std::fs::create_dir(&at).unwrap();
        assert!(RootPlan::new(&at, &[(at.join("inside"), Kind::Read)], &[]).is_err());
        assert!(RootPlan::new(&at, &[(PathBuf::from("usr"), Kind::Read)], &[]).is_err());
        assert!(RootPlan::new(&at, &[(PathBuf::from("/"), Kind::Read)], &[]).is_err());
        assert!(RootPlan::new(&dir.path().join("none"), &[], &[]).is_err());
    }
}
