//! Host paths and namespaces the person named, opened on the host before
//! the clone: never through a symbolic link, checked for what they are.

use super::JailError;
use crate::sys;
use nix::errno::Errno;
use std::ffi::CString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// Open the network namespace at `path` to join, with the supervisor's
/// own to come back to. Refused: degraded or rootless runs (entering a
/// namespace the host's root owns needs host root), a file that is not a
/// network namespace, and the supervisor's own (the host's) namespace.
pub(super) fn open_network_namespace(
    path: &Path,
    degraded: bool,
    root: bool,
) -> Result<(OwnedFd, OwnedFd, PathBuf), JailError> {
    let err = |why: &str, source: Errno| JailError::JoinNetwork {
        path: path.to_path_buf(),
        why: why.to_string(),
        source,
    };
    if degraded || !root {
        return Err(err(
            "joining a network namespace needs host root and the sandbox's own namespaces",
            Errno::EPERM,
        ));
    }
    let open = |p: &Path| {
        nix::fcntl::open(
            p,
            nix::fcntl::OFlag::O_RDONLY | nix::fcntl::OFlag::O_CLOEXEC,
            nix::sys::stat::Mode::empty(),
        )
    };
    let ns = open(path).map_err(|e| err("it cannot be opened", e))?;
    let own = open(Path::new("/proc/self/ns/net"))
        .map_err(|e| err("the supervisor's own namespace cannot be opened", e))?;
    // SAFETY: NS_GET_NSTYPE takes no argument and only reads the
    // descriptor's namespace type.
    let kind = unsafe { libc::ioctl(ns.as_raw_fd(), NS_GET_NSTYPE) };
    if kind != libc::CLONE_NEWNET {
        return Err(err("it is not a network namespace", Errno::EINVAL));
    }
    let a = nix::sys::stat::fstat(&ns).map_err(|e| err("it cannot be read", e))?;
    let b = nix::sys::stat::fstat(&own).map_err(|e| err("it cannot be read", e))?;
    if (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino) {
        return Err(err(
            "it is the host's network namespace, which a sandbox never shares",
            Errno::EPERM,
        ));
    }
    Ok((ns, own, path.to_path_buf()))
}

/// The trust files of the sandbox whose network namespace is joined (its
/// proxy's authority), opened here as the supervisor. `dir` is below that
/// sandbox's root as the host sees it (`/proc/PID/root/run/warden`): its
/// tree is the other container's, which may have put links there, so the
/// files are opened beneath a descriptor of that root
/// (`openat2(RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)`)
/// and must be regular files; a link is refused, never followed to a file
/// of the node.
pub(super) fn joined_trust(dir: &Path) -> Result<crate::secrets::TrustFiles, JailError> {
    use rustix::fs::{FileType, Mode, OFlags, ResolveFlags};
    let refuse = |path: &Path, why: &str, source: Errno| JailError::JoinNetwork {
        path: path.to_path_buf(),
        why: why.into(),
        source,
    };
    let (root, below) = split_proc_root(dir).ok_or_else(|| {
        refuse(
            dir,
            "the joined sandbox's trust files are not below its root",
            Errno::EINVAL,
        )
    })?;
    let top = rustix::fs::open(
        &root,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| {
        refuse(
            &root,
            "the joined sandbox's root cannot be opened",
            Errno::from_raw(e.raw_os_error()),
        )
    })?;
    let open = |name: &str| {
        let path = dir.join(name);
        let fd = rustix::fs::openat2(
            &top,
            below.join(name),
            OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOCTTY | OFlags::NONBLOCK,
            Mode::empty(),
            ResolveFlags::IN_ROOT | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
        )
        .map_err(|e| {
            refuse(
                &path,
                "the joined sandbox's trust file cannot be opened beneath its root without following a link",
                Errno::from_raw(e.raw_os_error()),
            )
        })?;
        let st = rustix::fs::fstat(&fd).map_err(|e| {
            refuse(
                &path,
                "the joined sandbox's trust file cannot be read",
                Errno::from_raw(e.raw_os_error()),
            )
        })?;
        if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
            return Err(refuse(
                &path,
                "the joined sandbox's trust file is not a regular file",
                Errno::EINVAL,
            ));
        }
        Ok(fd)
    };
    Ok(crate::secrets::TrustFiles {
        bundle: open("ca-bundle.crt")?,
        ca: open("ca.crt")?,
    })
}

/// `/proc/PID/root/REST` split into the root (`/proc/PID/root`) and
/// `REST`.
fn split_proc_root(dir: &Path) -> Option<(PathBuf, PathBuf)> {
    let mut parts = dir.components();
    let mut root = PathBuf::new();
    for want in [Some("/"), Some("proc"), None, Some("root")] {
        let c = parts.next()?.as_os_str().to_str()?;
        match want {
            Some(w) if c != w => return None,
            None if c.parse::<u32>().is_err() => return None,
            _ => root.push(c),
        }
    }
    Some((root, parts.as_path().to_path_buf()))
}

/// `NS_GET_NSTYPE` (linux/nsfs.h): `_IO(0xb7, 0x3)`.
const NS_GET_NSTYPE: libc::c_ulong = 0xb703;

pub(super) fn setns_net(ns: &OwnedFd, path: &Path, what: &str) -> Result<(), JailError> {
    nix::sched::setns(ns, nix::sched::CloneFlags::CLONE_NEWNET).map_err(|source| {
        JailError::JoinNetwork {
            path: path.to_path_buf(),
            why: format!("cannot {what} network namespace"),
            source,
        }
    })
}

/// Resolve a host path the person named, refusing symbolic links and `..`
/// on the way: earlier sandbox code may have planted a link in a directory
/// it could write (`project/pkg -> /etc`), and a later run through that
/// path must not mount what the link points at. The returned descriptor is
/// what gets mounted, so nothing can be swapped in between.
pub(super) fn resolve_host_path(
    what: &'static str,
    p: &Path,
) -> Result<(PathBuf, OwnedFd), JailError> {
    if p.components().any(|c| c == std::path::Component::ParentDir) {
        return Err(JailError::DotDot {
            what,
            path: p.to_path_buf(),
        });
    }
    let lexical: PathBuf = p.components().collect();
    let c = CString::new(lexical.as_os_str().as_bytes())
        .map_err(|_| JailError::Nul(lexical.display().to_string()))?;
    match sys::open_path_no_symlinks(&c) {
        Ok(fd) => Ok((lexical, fd)),
        Err(Errno::ELOOP) => Err(JailError::ThroughSymlink {
            what,
            path: lexical.clone(),
            target: std::fs::canonicalize(&lexical).unwrap_or_default(),
        }),
        Err(Errno::ENOSYS) => {
            // Kernels before 5.6: the same rule, checked on the resolved
            // path (without the guarantee against a later swap).
            let resolved =
                std::fs::canonicalize(&lexical).map_err(|source| JailError::MissingPath {
                    what,
                    path: lexical.clone(),
                    source,
                })?;
            if resolved != lexical {
                return Err(JailError::ThroughSymlink {
                    what,
                    path: lexical,
                    target: resolved,
                });
            }
            let fd = nix::fcntl::open(
                &lexical,
                nix::fcntl::OFlag::O_PATH | nix::fcntl::OFlag::O_CLOEXEC,
                nix::sys::stat::Mode::empty(),
            )
            .map_err(|e| JailError::MissingPath {
                what,
                path: lexical.clone(),
                source: e.into(),
            })?;
            Ok((lexical, fd))
        }
        Err(e) => Err(JailError::MissingPath {
            what,
            path: lexical,
            source: e.into(),
        }),
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // the tests remove their own temporary directories
mod trust_tests {
    use super::*;

    #[test]
    fn a_joined_sandboxs_trust_files_are_found_below_its_proc_root_only() {
        assert_eq!(
            split_proc_root(Path::new("/proc/42/root/run/warden")),
            Some((PathBuf::from("/proc/42/root"), PathBuf::from("run/warden")))
        );
        assert_eq!(split_proc_root(Path::new("/run/warden")), None);
        assert_eq!(split_proc_root(Path::new("/proc/self/root/run")), None);
    }

    #[test]
    fn a_link_in_the_joined_sandboxs_tree_is_refused_not_followed() {
        // The test's own root stands for the other container's: a link
        // planted where its trust files are must not be opened.
        let dir = std::env::temp_dir().join(format!("warden-trust-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("secret"), "node file").unwrap();
        std::os::unix::fs::symlink(dir.join("secret"), dir.join("ca-bundle.crt")).unwrap();
        std::fs::write(dir.join("ca.crt"), "ca").unwrap();
        let through = Path::new(&format!("/proc/{}/root", std::process::id()))
            .join(dir.strip_prefix("/").unwrap());
        let got = joined_trust(&through);
        assert!(got.is_err(), "a linked trust file was opened");
        std::fs::remove_file(dir.join("ca-bundle.crt")).unwrap();
        std::fs::write(dir.join("ca-bundle.crt"), "bundle").unwrap();
        assert!(joined_trust(&through).is_ok());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
