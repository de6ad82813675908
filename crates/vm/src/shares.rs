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
    #[error("{what} {path} goes through a symbolic link (to {target}): name the real directory (share_link)")]
    ThroughSymlink {
        what: &'static str,
        path: PathBuf,
        target: PathBuf,
    },
    #[error("{what} {path} {why}: it is not shared with the VM (share_changed)")]
    Changed {
        what: &'static str,
        path: PathBuf,
        why: &'static str,
    },
    /// Checked once, it cannot be opened again now for another reason
    /// than its being gone or a link (permission, too many open files, a
    /// pipe or device where it was): not served.
    #[error("{what} {path} cannot be opened again ({why}): it is not shared with the VM (share_unreadable)")]
    Unreadable {
        what: &'static str,
        path: PathBuf,
        why: String,
    },
    #[error("the VM's kernel command line would hold {len} bytes of warden's parameters (at most {MAX_PARAMS}): bind fewer or shorter paths (their common parent), or use `isolation process`")]
    TooLong { len: usize },
}

/// The reason code of a share refused because its path goes through a
/// symbolic link.
pub const SHARE_LINK: &str = "share_link";
/// The reason code of a share refused at a launch because its path holds
/// another file, of another kind or owner, than the one checked.
pub const SHARE_CHANGED: &str = "share_changed";
/// The reason code of a share refused at a launch because its path, once
/// checked, cannot be opened again (permission, too many open files, no
/// longer a directory or a regular file).
pub const SHARE_UNREADABLE: &str = "share_unreadable";

impl ShareError {
    /// The stable reason code of a refusal a door words, if it has one.
    pub fn reason(&self) -> Option<&'static str> {
        match self {
            ShareError::ThroughSymlink { .. } => Some(SHARE_LINK),
            ShareError::Changed { .. } => Some(SHARE_CHANGED),
            ShareError::Unreadable { .. } => Some(SHARE_UNREADABLE),
            _ => None,
        }
    }

    /// A refusal with a reason code, as a door words it: the code, the
    /// option it is about (`filesystem.read_write`, `filesystem.read_only`,
    /// `filesystem.rootfs`) and the host path.
    pub fn refused(&self) -> Option<(&'static str, &'static str, &Path)> {
        let code = self.reason()?;
        match self {
            ShareError::ThroughSymlink { what, path, .. }
            | ShareError::Changed { what, path, .. }
            | ShareError::Unreadable { what, path, .. } => {
                Some((code, what.trim_matches('`'), path))
            }
            _ => None,
        }
    }
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
    /// What `path` was when it was checked: every launch serves it only
    /// if it still is ([`reopen`]).
    pub id: Identity,
}

impl Share {
    /// The option it comes from, as errors name it.
    pub fn what(&self) -> &'static str {
        if self.writable {
            "`filesystem.read_write`"
        } else {
            "`filesystem.read_only`"
        }
    }

    /// Its path opened again for a launch, refused unless it is still the
    /// file checked ([`reopen`]).
    pub fn reopen(&self) -> Result<std::os::fd::OwnedFd, ShareError> {
        reopen(self.what(), &self.path, self.id, self.file)
    }
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

/// What a host path was when it was opened and checked: its inode and
/// its owner. Every later launch of the VM (a resume from disk, a fork's
/// copy, a restore from a snapshot) opens the path again and serves it
/// only if it is still this.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct Identity {
    pub dev: u64,
    pub ino: u64,
    pub uid: u32,
    pub gid: u32,
}

/// A host path opened once, from `/`, through no symbolic link
/// (`warden_jail::open_host_path`), as an `O_PATH` descriptor, with what
/// `fstat` said of that descriptor.
#[derive(Debug)]
pub struct Opened {
    pub fd: std::os::fd::OwnedFd,
    pub id: Identity,
    pub dir: bool,
    pub file: bool,
}

/// `path` as a directory the VMM may export: absolute, without `..`,
/// without a symbolic link on the way (the guest would see another tree
/// than the one named), and a directory (9p exports directories only).
pub fn check_dir(what: &'static str, path: &Path) -> Result<(PathBuf, Opened), ShareError> {
    let (resolved, opened) = check_path(what, path)?;
    if !opened.dir {
        return Err(ShareError::Refused {
            what,
            path: path.to_path_buf(),
            why: "is not a directory",
        });
    }
    Ok((resolved, opened))
}

/// `path` as a bind the VMM may share: absolute, without `..`, without a
/// symbolic link on the way, and a directory or a regular file (no
/// device, socket or pipe). Returns it, whether it is a file, and what it
/// was when checked.
pub fn check_bind(
    what: &'static str,
    path: &Path,
) -> Result<(PathBuf, bool, Identity), ShareError> {
    let (resolved, opened) = check_path(what, path)?;
    if opened.dir || opened.file {
        return Ok((resolved, opened.file, opened.id));
    }
    Err(ShareError::Refused {
        what,
        path: path.to_path_buf(),
        why: "is neither a directory nor a regular file: a VM sandbox shares only those (or use `isolation process`)",
    })
}

/// `path` opened again when a VMM is launched (a boot, a resume from
/// disk, a fork's copy, a restore from a snapshot), through no symbolic
/// link, and served only when it is what was checked (`want`: the same
/// inode, owner and kind): the descriptor the VMM's view, its Landlock
/// rule and its root are all made from. Never the stored path trusted.
pub fn reopen(
    what: &'static str,
    path: &Path,
    want: Identity,
    file: bool,
) -> Result<std::os::fd::OwnedFd, ShareError> {
    let changed = |why| ShareError::Changed {
        what,
        path: path.to_path_buf(),
        why,
    };
    let (_, opened) = match check_path(what, path) {
        // Checked once, gone now (moved away, or a component of its path
        // no longer a directory): changed since, as a swap is, with the
        // same code.
        Err(ShareError::Missing { source, .. })
            if matches!(
                source.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
            ) =>
        {
            return Err(changed(
                "is no longer there (moved or removed since the sandbox was made)",
            ))
        }
        // Any other failure to open it again (permission, too many open
        // files, a pipe or device at its path) is refused with a code of
        // its own as well, so that no error of this check is one without
        // a code: a resume refused here leaves the VM paused as it was.
        Err(e @ (ShareError::Missing { .. } | ShareError::Refused { .. })) => {
            return Err(ShareError::Unreadable {
                what,
                path: path.to_path_buf(),
                why: match e {
                    ShareError::Missing { source, .. } => source.to_string(),
                    ShareError::Refused { why, .. } => why.to_string(),
                    e => e.to_string(),
                },
            })
        }
        r => r?,
    };
    if (opened.file, opened.dir) != (file, !file) {
        return Err(changed(
            "is no longer the kind of file it was when the sandbox was made",
        ));
    }
    if (opened.id.dev, opened.id.ino) != (want.dev, want.ino) {
        return Err(changed(
            "is another file than the one the sandbox was made with (moved or replaced since)",
        ));
    }
    if (opened.id.uid, opened.id.gid) != (want.uid, want.gid) {
        return Err(changed("has another owner than when the sandbox was made"));
    }
    Ok(opened.fd)
}

/// `path` opened once, refused when relative, with `..`, not UTF-8,
/// missing or through a symbolic link (in any component: the process
/// backend's opener, `openat2(RESOLVE_NO_SYMLINKS)`), with its kind and
/// identity read on the descriptor opened.
fn check_path(what: &'static str, path: &Path) -> Result<(PathBuf, Opened), ShareError> {
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
    let (lexical, fd) = warden_jail::open_host_path(what, path).map_err(|e| match e {
        warden_jail::JailError::ThroughSymlink { path, target, .. } => {
            ShareError::ThroughSymlink { what, path, target }
        }
        warden_jail::JailError::MissingPath { path, source, .. } => {
            ShareError::Missing { what, path, source }
        }
        e => ShareError::Missing {
            what,
            path: path.to_path_buf(),
            source: std::io::Error::other(warden_jail::chain_str(&e)),
        },
    })?;
    let st = nix::sys::stat::fstat(&fd).map_err(|e| ShareError::Missing {
        what,
        path: lexical.clone(),
        source: e.into(),
    })?;
    let kind = st.st_mode & nix::libc::S_IFMT;
    let opened = Opened {
        fd,
        id: Identity {
            dev: st.st_dev,
            ino: st.st_ino,
            uid: st.st_uid,
            gid: st.st_gid,
        },
        dir: kind == nix::libc::S_IFDIR,
        file: kind == nix::libc::S_IFREG,
    };
    Ok((lexical, opened))
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
        let (path, file, id) = check_bind(what, &b.path)?;
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
            id,
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

    /// The review's layout (28b, finding 1): a bind `p/sub/data` whose
    /// parent `p` another sandbox writes, and a root-only `victim/data`
    /// beside it holding a 0600 secret.
    struct Race {
        _dir: tempfile::TempDir,
        p: PathBuf,
        bind: PathBuf,
        victim: PathBuf,
    }

    impl Race {
        fn new() -> Race {
            use std::os::unix::fs::PermissionsExt;
            let dir = tempfile::tempdir().unwrap();
            let top = std::fs::canonicalize(dir.path()).unwrap();
            let p = top.join("p");
            let bind = p.join("sub/data");
            std::fs::create_dir_all(&bind).unwrap();
            let victim = top.join("victim");
            std::fs::create_dir_all(victim.join("data")).unwrap();
            std::fs::write(victim.join("data/secret"), "ROOT-ONLY").unwrap();
            std::fs::set_permissions(victim.join("data/secret"), PermissionsExt::from_mode(0o600))
                .unwrap();
            std::fs::set_permissions(&victim, PermissionsExt::from_mode(0o700)).unwrap();
            Race {
                _dir: dir,
                p,
                bind,
                victim,
            }
        }

        /// What the sandbox that writes `p` does: `sub` exchanged, in one
        /// `renameat2(RENAME_EXCHANGE)`, with a link to the victim (again:
        /// back).
        fn swap(&self) {
            if self.p.join("sub.lnk").symlink_metadata().is_err() {
                std::os::unix::fs::symlink(&self.victim, self.p.join("sub.lnk")).unwrap();
            }
            rustix::fs::renameat_with(
                rustix::fs::CWD,
                self.p.join("sub"),
                rustix::fs::CWD,
                self.p.join("sub.lnk"),
                rustix::fs::RenameFlags::EXCHANGE,
            )
            .unwrap();
        }

        fn share(&self, writable: bool) -> Share {
            let fs = FilesystemSpec {
                binds: vec![warden_policy::Bind {
                    path: self.bind.clone(),
                    writable,
                }],
                ..spec_of(None)
            };
            binds(&fs).unwrap().0.remove(0)
        }
    }

    fn spec_of(workspace: Option<PathBuf>) -> FilesystemSpec {
        FilesystemSpec {
            rootfs: None,
            workspace,
            binds: vec![],
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
        }
    }

    #[test]
    fn a_link_swapped_into_an_earlier_component_after_the_check_is_refused_at_the_next_launch() {
        use std::os::unix::fs::MetadataExt;
        let race = Race::new();
        for writable in [true, false] {
            let share = race.share(writable);
            race.swap();
            // What a lookup by the path (the old second open) reaches now:
            // the victim's directory, whose secret the guest read.
            let followed = std::fs::metadata(&share.path).unwrap();
            let victim = std::fs::metadata(race.victim.join("data")).unwrap();
            assert_eq!(
                (followed.dev(), followed.ino()),
                (victim.dev(), victim.ino())
            );
            let refused = share.reopen().unwrap_err();
            assert_eq!(refused.reason(), Some(SHARE_LINK), "{refused}");
            assert!(refused.to_string().contains("p/sub/data"), "{refused}");
            // And a fresh check of the same path is refused too.
            let fs = FilesystemSpec {
                binds: vec![warden_policy::Bind {
                    path: race.bind.clone(),
                    writable,
                }],
                ..spec_of(None)
            };
            assert_eq!(binds(&fs).unwrap_err().reason(), Some(SHARE_LINK));
            // Swapped back: the very directory checked is served again.
            race.swap();
            std::fs::remove_file(race.p.join("sub.lnk")).unwrap();
            share.reopen().unwrap();
        }
    }

    #[test]
    fn a_share_replaced_by_another_directory_or_kind_or_owner_is_refused_at_the_next_launch() {
        let race = Race::new();
        let share = race.share(true);
        std::fs::rename(&race.bind, race.p.join("sub/data.old")).unwrap();
        std::fs::create_dir(&race.bind).unwrap();
        let refused = share.reopen().unwrap_err();
        assert_eq!(refused.reason(), Some(SHARE_CHANGED), "{refused}");
        assert!(refused.to_string().contains("another file"), "{refused}");
        std::fs::remove_dir(&race.bind).unwrap();
        std::fs::write(&race.bind, "a file now").unwrap();
        let refused = share.reopen().unwrap_err();
        assert_eq!(refused.reason(), Some(SHARE_CHANGED), "{refused}");
        assert!(refused.to_string().contains("kind"), "{refused}");
        std::fs::remove_file(&race.bind).unwrap();
        std::fs::rename(race.p.join("sub/data.old"), &race.bind).unwrap();
        share.reopen().unwrap();
        if warden_jail::host::is_root() {
            std::os::unix::fs::chown(&race.bind, Some(65534), Some(65534)).unwrap();
            let refused = share.reopen().unwrap_err();
            assert!(refused.to_string().contains("owner"), "{refused}");
        }
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
