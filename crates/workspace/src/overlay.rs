//! What overlayfs writes into an upper directory, read back and written
//! again: whiteouts, opaque directories, copy-up origins; and the mount
//! options the jail must use so that those marks are readable here.
//!
//! Facts checked on kernel 6.18 (ext4 upper and lower):
//! - Inside any user namespace (an unprivileged user's, or root's with a
//!   mapped root), `trusted.*` extended attributes cannot be set, so a mount
//!   without `userxattr` comes up but fails later with EIO on the first
//!   operation that needs an attribute (removing a directory that has lower
//!   entries, which must become opaque). The options that work there are
//!   `lowerdir=L,upperdir=U,workdir=W,userxattr`; the kernel refuses
//!   `userxattr` together with `redirect_dir=on`, `redirect_dir=off` or
//!   `metacopy=on` ("conflicting options"), and its defaults (redirect_dir
//!   and metacopy off, index off when the upper lacks file handles) are the
//!   ones this crate expects. Marks are then `user.overlay.*`.
//! - As root in the initial user namespace the plain
//!   `lowerdir=L,upperdir=U,workdir=W` works and marks are `trusted.overlay.*`.
//! - Whiteouts in the upper layer are character devices 0:0 in both cases,
//!   even for an unprivileged mounter (the kernel allows anyone to create a
//!   0:0 character device since 5.8, which is also how snapshots recreate
//!   them). Newer kernels also read "xattr whiteouts" (an empty regular file
//!   carrying `overlay.whiteout`) from lower layers; they are recognised here
//!   too but the kernel never writes them into an upper layer.
//! - Opaque directories carry `overlay.opaque` = `y`. The value `x` marks a
//!   directory that merely contains xattr whiteouts and is not opaque.
//! - A file or directory copied up from the lower layer carries
//!   `overlay.origin` (a file handle as root, empty under `userxattr`); the
//!   commit uses it to tell "copied up, then deleted on the host" from
//!   "created in the sandbox".
//! - With `redirect_dir` off, renaming a lower directory fails with EXDEV
//!   and tools fall back to copy and delete: the upper then holds a whole
//!   copy plus a whiteout.

use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;

use std::path::{Path, PathBuf};

/// The two namespaces overlayfs keeps its marks in.
const PREFIXES: [&str; 2] = ["trusted.overlay.", "user.overlay."];

#[derive(Debug, thiserror::Error)]
pub enum OverlayError {
    #[error(
        "overlay {option} path {path} contains a character ('{ch}') that overlay mount data cannot carry; move the directory or use the fsconfig mount API"
    )]
    UnsafePath {
        option: &'static str,
        path: PathBuf,
        ch: char,
    },
}

/// The overlay mount of one sandbox, as the jail must perform it.
#[derive(Debug, Clone)]
pub struct MountOptions {
    pub lowerdir: PathBuf,
    pub upperdir: PathBuf,
    pub workdir: PathBuf,
    /// Keep overlay's marks in `user.overlay.*`: required whenever the mount
    /// is made inside a user namespace (which warden always does).
    pub userxattr: bool,
}

impl MountOptions {
    /// The mount data string, e.g.
    /// `lowerdir=/w,upperdir=/s/upper,workdir=/s/work,userxattr`.
    /// Paths holding `,`, `:`, `\` or `=` are refused rather than escaped:
    /// the escaping rules differ between the legacy mount(2) data and
    /// fsconfig, and a wrong escape mounts the wrong directory.
    pub fn data(&self) -> Result<OsString, OverlayError> {
        let mut out = OsString::new();
        for (option, path) in [
            ("lowerdir", &self.lowerdir),
            ("upperdir", &self.upperdir),
            ("workdir", &self.workdir),
        ] {
            if let Some(&b) = path
                .as_os_str()
                .as_bytes()
                .iter()
                .find(|b| matches!(b, b',' | b':' | b'\\' | b'='))
            {
                return Err(OverlayError::UnsafePath {
                    option,
                    path: path.clone(),
                    ch: char::from(b),
                });
            }
            if !out.is_empty() {
                out.push(",");
            }
            out.push(option);
            out.push("=");
            out.push(path);
        }
        if self.userxattr {
            out.push(",userxattr");
        }
        Ok(out)
    }
}

/// The value of the overlay mark `name` on the entry `rel` of `tree`, in
/// either namespace, reached beneath the tree's descriptor.
pub(crate) fn mark_at(tree: &crate::beneath::Tree, rel: &Path, name: &str) -> Option<Vec<u8>> {
    PREFIXES
        .iter()
        .find_map(|prefix| tree.xattr(rel, &format!("{prefix}{name}")))
}

/// Whether the entry `rel` of `tree` (as `lstat` saw it: `st`) is a
/// whiteout: a 0:0 character device, or an empty regular file marked
/// `overlay.whiteout`.
pub(crate) fn is_whiteout_at(
    tree: &crate::beneath::Tree,
    rel: &Path,
    st: &rustix::fs::Stat,
) -> bool {
    use rustix::fs::FileType;
    match FileType::from_raw_mode(st.st_mode) {
        FileType::CharacterDevice => st.st_rdev == 0,
        FileType::RegularFile => st.st_size == 0 && mark_at(tree, rel, "whiteout").is_some(),
        _ => false,
    }
}

/// Whether the directory `rel` of `tree` hides everything below it in the
/// lower layer.
pub(crate) fn is_opaque_at(tree: &crate::beneath::Tree, rel: &Path) -> bool {
    mark_at(tree, rel, "opaque").is_some_and(|v| v.as_slice() == b"y")
}

/// Whether the entry `rel` of `tree` was copied up from a lower one.
pub(crate) fn has_origin_at(tree: &crate::beneath::Tree, rel: &Path) -> bool {
    mark_at(tree, rel, "origin").is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mount_data_names_the_three_directories_and_userxattr() {
        let opts = MountOptions {
            lowerdir: "/w".into(),
            upperdir: "/s/upper".into(),
            workdir: "/s/work".into(),
            userxattr: true,
        };
        assert_eq!(
            opts.data().ok(),
            Some(OsString::from(
                "lowerdir=/w,upperdir=/s/upper,workdir=/s/work,userxattr"
            ))
        );
    }

    #[test]
    fn mount_data_refuses_paths_it_cannot_carry() {
        for bad in ["/a,b", "/a:b", "/a\\b", "/a=b"] {
            let opts = MountOptions {
                lowerdir: bad.into(),
                upperdir: "/u".into(),
                workdir: "/w".into(),
                userxattr: false,
            };
            assert!(opts.data().is_err(), "{bad}");
        }
    }
}
