//! The host directories a VM sandbox shares with its guest beside its
//! system directories: each `--ro`/`--rw` bind and a `--rootfs` tree,
//! checked on the host (absolute, no `..`, no symbolic link on the way)
//! and exported by the VMM over 9p, read-only ones with the VMM's
//! `readonly=on` (the host refuses every write, whatever the guest kernel
//! asks) and mounted read-only by the guest init as well.
//!
//! A bind of a single file is exported as a directory of the VMM's own
//! root holding that file alone (a bind mount in the VMM's mount namespace
//! over an empty placeholder), so the guest sees the file and no sibling
//! of it; the guest init binds the file at its path.
//!
//! The guest learns where each share goes from its kernel command line
//! (`warden.bind=TAG:ro|rw:HEXPATH`, `warden.hide=HEXPATH`): paths are
//! hex-encoded so that no space or byte of a path can split or forge a
//! parameter.

use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};
use warden_policy::FilesystemSpec;

/// The kernel's command line holds at most 2048 bytes on x86; warden's own
/// words and the boot options take about 400 of them.
pub const MAX_PARAMS: usize = 1500;

/// Guest paths no bind may cover: the guest's own kernel file systems and
/// warden's trust files.
const GUEST_OWN: &[&str] = &["/", "/proc", "/sys", "/dev", "/run/warden"];

/// Why a share was refused.
#[derive(Debug, thiserror::Error)]
pub enum ShareError {
    #[error("{what} {path}: {why}")]
    Refused {
        what: &'static str,
        path: PathBuf,
        why: &'static str,
    },
    #[error("{what} {path} cannot be shared with the VM")]
    Missing {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{what} {path} goes through a symbolic link (to {target}): name the real directory")]
    ThroughSymlink {
        what: &'static str,
        path: PathBuf,
        target: PathBuf,
    },
    #[error("the VM's kernel command line would hold {len} bytes of warden's parameters (at most {MAX_PARAMS}): bind fewer or shorter paths (their common parent), or use `isolation process`")]
    TooLong { len: usize },
}

/// One host directory (or single file) exported to the guest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Share {
    /// The 9p mount tag (short: the VMM limits its length).
    pub tag: String,
    pub path: PathBuf,
    pub writable: bool,
    /// `path` is a regular file, exported alone in a directory of the
    /// VMM's own.
    pub file: bool,
}

/// `path`'s bytes in hex (the guest decodes it with [`unhex`]).
pub fn hex(path: &Path) -> String {
    path.as_os_str()
        .as_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The path [`hex`] encoded; `None` for anything else.
pub fn unhex(s: &str) -> Option<PathBuf> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    let bytes: Option<Vec<u8>> = (0..s.len())
        .step_by(2)
        .map(|i| s.get(i..i + 2).and_then(|h| u8::from_str_radix(h, 16).ok()))
        .collect();
    let p = PathBuf::from(std::ffi::OsStr::from_bytes(&bytes?));
    p.is_absolute().then_some(p)
}

/// `path` as a directory the VMM may export: absolute, without `..`,
/// without a symbolic link on the way (the guest would see another tree
/// than the one named), and a directory (9p exports directories only).
pub fn check_dir(what: &'static str, path: &Path) -> Result<PathBuf, ShareError> {
    let resolved = check_path(what, path)?;
    if !resolved.is_dir() {
        return Err(ShareError::Refused {
            what,
            path: path.to_path_buf(),
            why: "is not a directory",
        });
    }
    Ok(resolved)
}

/// `path` as a bind the VMM may share: absolute, without `..`, without a
/// symbolic link on the way, and a directory or a regular file (no
/// device, socket or pipe). Returns it and whether it is a file.
pub fn check_bind(what: &'static str, path: &Path) -> Result<(PathBuf, bool), ShareError> {
    let resolved = check_path(what, path)?;
    if resolved.is_dir() {
        return Ok((resolved, false));
    }
    if resolved.is_file() {
        return Ok((resolved, true));
    }
    Err(ShareError::Refused {
        what,
        path: path.to_path_buf(),
        why: "is neither a directory nor a regular file: a VM sandbox shares only those (or use `isolation process`)",
    })
}

/// `path` resolved, refused when relative, with `..`, not UTF-8, missing
/// or through a symbolic link.
fn check_path(what: &'static str, path: &Path) -> Result<PathBuf, ShareError> {
    let refused = |why| ShareError::Refused {
        what,
        path: path.to_path_buf(),
        why,
    };
    if !path.is_absolute() {
        return Err(refused("must be an absolute path"));
    }
    if path.components().any(|c| c == Component::ParentDir) {
        return Err(refused("must not contain `..`"));
    }
    if path.to_str().is_none() {
        return Err(refused("is not valid UTF-8, which the VMM cannot take"));
    }
    let lexical: PathBuf = path.components().collect();
    let resolved = std::fs::canonicalize(&lexical).map_err(|source| ShareError::Missing {
        what,
        path: lexical.clone(),
        source,
    })?;
    if resolved != lexical {
        return Err(ShareError::ThroughSymlink {
            what,
            path: lexical,
            target: resolved,
        });
    }
    Ok(resolved)
}

/// `warden.KEY=VALUE` words for the guest init.
pub type Params = Vec<(String, String)>;

/// The binds of `fs` as shares (tags `b0`, `b1`, ...) and the guest's
/// parameters: where each goes, and which of warden's hidden directories
/// (its state) the guest covers wherever a share shows them.
pub fn binds(fs: &FilesystemSpec) -> Result<(Vec<Share>, Params), ShareError> {
    // The guest binds a share at its own path only; a volume at another
    // path, and the bound on its writes that the process backend keeps in
    // its size-limited tmpfs, are not done here. Refused, never dropped.
    if let Some(v) = fs.volumes.first() {
        return Err(ShareError::Refused {
            what: "`filesystem.volumes`",
            path: v.inside.clone(),
            why: "the VM backend does not mount volumes: use `isolation: process` for a sandbox with volumes",
        });
    }
    let mut shares = Vec::new();
    let mut params = Vec::new();
    for (i, b) in fs.binds.iter().enumerate() {
        let what = if b.writable {
            "`filesystem.read_write`"
        } else {
            "`filesystem.read_only`"
        };
        let (path, file) = check_bind(what, &b.path)?;
        if let Some(own) = GUEST_OWN
            .iter()
            .find(|o| path == Path::new(o) || (**o != "/" && path.starts_with(o)))
        {
            return Err(ShareError::Refused {
                what,
                path: path.clone(),
                why: if *own == "/" {
                    "would cover the guest's whole root: use `filesystem.rootfs` for a root of your own"
                } else {
                    "would cover a directory the guest needs for itself (/proc, /sys, /dev, /run/warden)"
                },
            });
        }
        let tag = format!("b{i}");
        let mode = match (b.writable, file) {
            (true, false) => "rw",
            (false, false) => "ro",
            (true, true) => "rwf",
            (false, true) => "rof",
        };
        params.push(("bind".into(), format!("{tag}:{mode}:{}", hex(&path))));
        shares.push(Share {
            tag,
            path,
            writable: b.writable,
            file,
        });
    }
    // The workspace is shared too: what it holds of the hidden directories
    // is covered at /workspace.
    let mut shown: Vec<(PathBuf, PathBuf)> = shares
        .iter()
        .filter(|s| !s.file)
        .map(|s| (s.path.clone(), s.path.clone()))
        .collect();
    if let Some(ws) = &fs.workspace {
        shown.push((
            ws.components().collect(),
            PathBuf::from(warden_policy::WORKSPACE_MOUNT),
        ));
    }
    for h in &fs.hidden {
        for (host, inside) in &shown {
            if let Ok(rest) = h.strip_prefix(host) {
                params.push(("hide".into(), hex(&inside.join(rest))));
            }
        }
    }
    Ok((shares, params))
}

/// Refuse parameters the kernel's command line cannot hold.
pub fn check_length(params: &[(String, String)]) -> Result<(), ShareError> {
    let len: usize = params.iter().map(|(k, v)| k.len() + v.len() + 9).sum();
    if len > MAX_PARAMS {
        return Err(ShareError::TooLong { len });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn a_path_survives_the_command_line_whatever_its_bytes() {
        let p = Path::new("/tmp/a b warden.bind=x\u{e9}");
        assert_eq!(unhex(&hex(p)).unwrap(), p);
        assert!(!hex(p).contains(' '));
        assert_eq!(unhex("2f7"), None);
        assert_eq!(unhex("zz"), None);
        assert_eq!(unhex(&hex(Path::new("relative"))), None);
    }

    #[test]
    fn a_bind_through_a_link_or_of_a_device_or_over_the_guests_own_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real");
        std::fs::create_dir(&real).unwrap();
        std::os::unix::fs::symlink(&real, dir.path().join("link")).unwrap();
        std::fs::write(dir.path().join("file"), "x").unwrap();
        let spec = |p: PathBuf| FilesystemSpec {
            rootfs: None,
            workspace: None,
            binds: vec![warden_policy::Bind {
                path: p,
                writable: false,
            }],
            tmp_size: 1 << 20,
            overlay: None,
            hidden: vec![],
            runs_on_host: vec![],
            home: Default::default(),
            home_at: None,
            caches: vec![],
            workdir: None,
            disk: None,
            volumes: vec![],
            workspace_identity: None,
        };
        let real = std::fs::canonicalize(&real).unwrap();
        assert!(binds(&spec(real.clone())).is_ok());
        let (shares, params) = binds(&spec(real.parent().unwrap().join("file"))).unwrap();
        assert!(shares[0].file && params[0].1.starts_with("b0:rof:"));
        for bad in [
            real.parent().unwrap().join("link"),
            PathBuf::from("/dev/null"),
            real.join("../real"),
            PathBuf::from("/proc/self"),
            PathBuf::from("/"),
        ] {
            assert!(binds(&spec(bad.clone())).is_err(), "{bad:?} was accepted");
        }
        let mut with_volume = spec(real.clone());
        with_volume.volumes = vec![warden_policy::VolumeMount {
            host: real.clone(),
            inside: "/mnt/data".into(),
            writable: false,
        }];
        let refused = binds(&with_volume).unwrap_err().to_string();
        assert!(refused.contains("does not mount volumes"), "{refused}");
    }

    #[test]
    fn a_hidden_directory_inside_a_share_is_covered_where_the_guest_sees_it() {
        let dir = tempfile::tempdir().unwrap();
        let top = std::fs::canonicalize(dir.path()).unwrap();
        let state = top.join("state");
        std::fs::create_dir(&state).unwrap();
        let fs = FilesystemSpec {
            rootfs: None,
            workspace: Some(top.clone()),
            binds: vec![warden_policy::Bind {
                path: top.clone(),
                writable: true,
            }],
            tmp_size: 1 << 20,
            overlay: None,
            hidden: vec![state.clone()],
            runs_on_host: vec![],
            home: Default::default(),
            home_at: None,
            caches: vec![],
            workdir: None,
            disk: None,
            volumes: vec![],
            workspace_identity: None,
        };
        let (_, params) = binds(&fs).unwrap();
        let hides: Vec<PathBuf> = params
            .iter()
            .filter(|(k, _)| k == "hide")
            .map(|(_, v)| unhex(v).unwrap())
            .collect();
        assert!(hides.contains(&state));
        assert!(hides.contains(&Path::new("/workspace/state").to_path_buf()));
    }
}
