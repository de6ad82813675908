//! Where sandbox cgroups go below a hierarchy's root: warden's own
//! `warden` directory, or, for a container whose manager names its
//! cgroup (`linux.cgroupsPath` of an OCI bundle: kubelet's
//! `/kubepods/...` pod cgroups under containerd's CRI), that cgroup, so
//! that the node's accounting of the pod sees the sandbox.
//!
//! The path comes from a bundle a pod's spec fills in, so it is read as
//! caller input: relative to the hierarchy's root, plain names only. A
//! `..`, a `.`, an empty name or one with a character outside
//! [`NAME_BYTES`] is refused before anything is made, and nothing can
//! lead out of the hierarchy (cgroup file systems hold no links, and no
//! component climbs). It is set once per process, by the door's
//! supervisor before any sandbox's cgroup is made.

use std::path::{Component, Path, PathBuf};
use std::sync::OnceLock;

/// Bytes a cgroup name of a container manager may hold: what cgroupfs
/// (`kubepods`, `burstable`, `pod<uid>`, a container's id) and systemd
/// (`kubepods-burstable-pod<uid>.slice`, `cri-containerd-<id>.scope`)
/// names are made of.
const NAME_BYTES: &str = "letters, digits, '-', '_', '.', ':' and '@'";

/// The cgroup, relative to each hierarchy's root, sandboxes of this
/// process are made under instead of [`super::PARENT`].
static UNDER: OnceLock<PathBuf> = OnceLock::new();

/// Why a parent cgroup was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ParentError {
    #[error("{path:?} has no name: a cgroup path names at least one cgroup")]
    Empty { path: String },
    #[error("{path:?} climbs or stays ({name:?}): a cgroup path names cgroups below the hierarchy's root only")]
    Climbs { path: String, name: String },
    #[error("{path:?} has the name {name:?}, with a character other than {NAME_BYTES}")]
    BadName { path: String, name: String },
    #[error("{path:?} is longer than {max} bytes")]
    TooLong { path: String, max: usize },
    #[error("sandbox cgroups of this process are already placed under {0:?}")]
    AlreadySet(PathBuf),
}

/// The longest parent path taken (the kernel's `PATH_MAX` leaves room
/// for the mount point and the sandbox's own name).
const MAX_LEN: usize = 1024;

/// `path` as a parent of sandbox cgroups: relative to a hierarchy's
/// root (a leading `/` means that root, as a cgroupfs path says it),
/// every name plain.
pub fn checked(path: &str) -> Result<PathBuf, ParentError> {
    if path.len() > MAX_LEN {
        return Err(ParentError::TooLong {
            path: path.chars().take(64).collect(),
            max: MAX_LEN,
        });
    }
    let mut out = PathBuf::new();
    for name in path.split('/').filter(|n| !n.is_empty()) {
        if name == "." || name == ".." {
            return Err(ParentError::Climbs {
                path: path.into(),
                name: name.into(),
            });
        }
        let plain = name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':' | b'@'));
        if !plain {
            return Err(ParentError::BadName {
                path: path.into(),
                name: name.into(),
            });
        }
        out.push(name);
    }
    if out.as_os_str().is_empty() {
        return Err(ParentError::Empty { path: path.into() });
    }
    // What `checked` built holds plain names only; said again where it
    // is used.
    debug_assert!(out.components().all(|c| matches!(c, Component::Normal(_))));
    Ok(out)
}

/// Make the sandbox cgroups of this process under `path` (see
/// [`checked`]) in every hierarchy, instead of `warden`. Set once, before
/// any sandbox's cgroup is made.
pub fn place_under(path: &str) -> Result<(), ParentError> {
    let parent = checked(path)?;
    UNDER
        .set(parent)
        .map_err(|_| ParentError::AlreadySet(UNDER.get().cloned().unwrap_or_default()))
}

/// The parent of sandbox cgroups relative to a hierarchy's root: the one
/// [`place_under`] set, or warden's own.
pub(super) fn shared_parent() -> &'static Path {
    UNDER
        .get()
        .map_or(Path::new(super::PARENT), PathBuf::as_path)
}

/// Make `parent` below `root` one name at a time (each may exist), with
/// `each` run on every directory from `root` down before its child is
/// made (v2 enables controllers there).
pub(super) fn make_below(
    root: &Path,
    parent: &Path,
    mut each: impl FnMut(&Path) -> Result<(), super::CgroupError>,
) -> Result<(), super::CgroupError> {
    let mut at = root.to_path_buf();
    for name in parent.components() {
        let Component::Normal(name) = name else {
            continue;
        };
        each(&at)?;
        at.push(name);
        super::mkdir(&at, true)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_parent_path_is_plain_names_below_the_root_or_refused() {
        assert_eq!(
            checked("/kubepods/burstable/pod1-2/abc").unwrap(),
            PathBuf::from("kubepods/burstable/pod1-2/abc")
        );
        assert_eq!(
            checked("kubepods.slice/kubepods-pod1.slice/cri-containerd-ab.scope").unwrap(),
            PathBuf::from("kubepods.slice/kubepods-pod1.slice/cri-containerd-ab.scope")
        );
        assert_eq!(checked("//a//b/").unwrap(), PathBuf::from("a/b"));
        for climbing in ["/kubepods/../../etc", "..", "/a/./b", "a/.."] {
            assert!(
                matches!(checked(climbing), Err(ParentError::Climbs { .. })),
                "{climbing}"
            );
        }
        for bad in ["/a b", "/a\nb", "/a\\b", "/a*"] {
            assert!(
                matches!(checked(bad), Err(ParentError::BadName { .. })),
                "{bad}"
            );
        }
        assert!(matches!(checked("/"), Err(ParentError::Empty { .. })));
        assert!(matches!(checked(""), Err(ParentError::Empty { .. })));
        assert!(matches!(
            checked(&"a/".repeat(600)),
            Err(ParentError::TooLong { .. })
        ));
    }
}
