//! A sandbox's writes to a profile's package caches and to its writable
//! volumes, merged into the host's directories when it stops. While the
//! sandbox runs, each cache or volume it declares is an overlay: the host's
//! directory is the read-only lower layer, and what the sandbox writes
//! lands in an upper layer inside its size-limited tmpfs (`--disk`, with as
//! many inodes as that many bytes buys at [`fsutil::ENTRY_BYTES`] each), so
//! that filling it from inside fails with ENOSPC there and never spends the
//! host's disk. When every process of the sandbox is gone, the supervisor
//! merges the upper layer into the host's directory, so that the next
//! sandbox finds what this one wrote.
//!
//! The merge charges everything it adds as the host pays for it
//! ([`fsutil::entry_cost`], the measure the token's quota and the
//! snapshots' bounds use too): every file, directory and link costs at
//! least a block and its name, and a directory's own growth is charged as
//! it happens. An entry that would take the tree past its limit is left
//! out (a directory with everything below it), counted in
//! [`Merged::left_out`], which the supervisor reports as an event.
//!
//! The host's directory may hold anything an older sandbox wrote into it
//! (symbolic links to anywhere, among others), so the merge never follows
//! a link there: every step is relative to a directory descriptor opened
//! with `O_NOFOLLOW`, new entries are made under a temporary name and
//! renamed over the old one (which replaces a link rather than writing
//! through it), and removals unlink entries themselves. Setuid, setgid and
//! sticky bits are dropped; devices, FIFOs and sockets are not merged.
//!
//! A volume's merge is fenced by the caller's rule ([`Fence`], the
//! runtime's: the files the owner's configuration is read from, computed
//! again at the stop, since the owner may have changed a profile while the
//! sandbox ran): an entry the merge would make, replace or remove at a
//! path the fence names is held back instead, kept (as the volume's own
//! tree) in the place the fence gives, and reported in [`HeldBack`];
//! everything else merges as before.
//!
//! The walk goes from descriptor to descriptor (`openat` down, `..` back
//! up, each `..` checked to be the directory it came down from) with an
//! explicit stack of names on the heap: no recursion, no joined path and no
//! descriptor per level, so a tree of any depth (a sandbox makes one
//! `mkdirat` beneath the last) is merged within the limit, never crashing
//! the supervisor.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::fs::FlockOperation;
use warden_workspace::fsutil;

mod walk;
use walk::{open_dir, Merge};

#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    #[error("cannot lock {path} to merge a sandbox's writes into it")]
    Lock {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot merge {} of the sandbox's writes into {cache}", warden_workspace::printable_path(.path))]
    Merge {
        path: PathBuf,
        cache: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// What a merge did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Merged {
    /// What the entries added cost the host (see [`fsutil::entry_cost`]).
    pub added: u64,
    /// Entries (files, links, directories) left out because the tree would
    /// have grown past its limit.
    pub left_out: u64,
    /// Per volume, what its fence held back.
    pub held_back: Vec<HeldBack>,
}

/// What a volume's merge must leave alone on the host: the caller's rule,
/// asked for each entry the merge would make, replace or remove.
pub trait Fence {
    /// Why the host's entry at `path` must not be made, replaced or
    /// removed (a stable reason code), or `None`. `path` is real: the
    /// volume directory's real path joined with the entry's path in it,
    /// every directory on the way opened through no link; `there` is the
    /// identity (device, inode) of the regular file at `path` now, if one
    /// is.
    fn fenced(&self, path: &Path, there: Option<(u64, u64)>) -> Option<&'static str>;
    /// The directory under which what is held back is kept for the owner
    /// (one directory of it per volume); `None`: nowhere, it is dropped
    /// (and still reported).
    fn keep(&self) -> Option<&Path>;
}

/// The most paths of held-back entries a report names; the rest are
/// counted.
pub const HELD_SHOWN: usize = 16;

/// What a volume's fence held back at one merge.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct HeldBack {
    /// The volume's directory on the host.
    pub volume: PathBuf,
    /// The fence's reason code (the first one given).
    pub reason: String,
    /// Entries held back (a directory made new counts once, with what is
    /// below it).
    pub entries: u64,
    /// The first [`HELD_SHOWN`] of them, relative to the volume.
    pub paths: Vec<PathBuf>,
    /// Where they are kept, as the volume's own tree.
    pub kept: Option<PathBuf>,
}

/// Merge the upper layer `live` into the shared cache directory `dest`,
/// one of the caches under the profile's directory `profile`, keeping
/// everything under `profile` within `limit` bytes (as
/// [`fsutil::tree_size`] measures it). Holds an exclusive lock on `profile`
/// meanwhile, so that sandboxes of the profile stopping at the same time
/// merge one after the other. With a `fence`, what it names is held back,
/// as from a volume (the owner's configuration can name a file inside a
/// cache's directory).
pub fn merge(
    live: &Path,
    dest: &Path,
    (profile, limit): (&Path, u64),
    fence: Option<&dyn Fence>,
) -> Result<Merged, CacheError> {
    let lock_err = |source| CacheError::Lock {
        path: profile.to_path_buf(),
        source,
    };
    let lock = open_dir(rustix::fs::CWD, profile).map_err(lock_err)?;
    rustix::fs::flock(&lock, FlockOperation::LockExclusive)
        .map_err(io::Error::from)
        .map_err(lock_err)?;
    let dir = open_dir(rustix::fs::CWD, dest).map_err(|source| CacheError::Merge {
        path: PathBuf::new(),
        cache: dest.to_path_buf(),
        source,
    })?;
    // A tree that cannot be measured takes nothing more (`u64::MAX`).
    merge_into(live, dest, dir, (fsutil::tree_size(profile), limit), fence)
}

/// Merge the upper layer `live` of a writable volume into the volume's
/// directory `dest`, which grows by at most `grow` bytes (the sandbox's
/// `--disk`), as [`fsutil::tree_size`] measures it: every entry at least a
/// block and its name, a sparse file whole. Holds an exclusive lock on
/// `dest` meanwhile, so that sandboxes stopping at the same time merge one
/// after the other, and so that the volume's deletion (which takes the
/// same lock) never races a merge: a directory deleted meanwhile takes
/// nothing. With a `fence`, what it names is held back (see the module's
/// documentation); what is kept of it counts against the same `grow`.
pub fn merge_volume(
    live: &Path,
    dest: &Path,
    grow: u64,
    fence: Option<&dyn Fence>,
) -> Result<Merged, CacheError> {
    let lock_err = |source| CacheError::Lock {
        path: dest.to_path_buf(),
        source,
    };
    let dir = open_dir(rustix::fs::CWD, dest).map_err(lock_err)?;
    rustix::fs::flock(&dir, FlockOperation::LockExclusive)
        .map_err(io::Error::from)
        .map_err(lock_err)?;
    // A volume that cannot be measured takes nothing: its limit would be
    // unknown.
    let (used, limit) = match fsutil::tree_bytes(dest) {
        Some(used) => (used, used.saturating_add(grow)),
        None => (u64::MAX, 0),
    };
    merge_into(live, dest, dir, (used, limit), fence)
}

/// Merge `live` into the directory `dir` (at `dest`, for messages), whose
/// tree costs `used` bytes, keeping it within `limit`; what `fence` names
/// is held back.
fn merge_into(
    live: &Path,
    dest: &Path,
    dir: OwnedFd,
    (used, limit): (u64, u64),
    fence: Option<&dyn Fence>,
) -> Result<Merged, CacheError> {
    let err = |source| CacheError::Merge {
        path: PathBuf::new(),
        cache: dest.to_path_buf(),
        source,
    };
    let st = rustix::fs::fstat(&dir).map_err(|e| err(e.into()))?;
    walk::enterable(rustix::fs::CWD, live).map_err(err)?;
    let src = open_dir(rustix::fs::CWD, live).map_err(err)?;
    let mut m = Merge::new(used, limit, (st.st_uid, st.st_gid));
    if let Some(fence) = fence {
        // The directory's real path, as the descriptor has it: what the
        // fence's paths are compared with.
        let top = std::fs::read_link(format!("/proc/self/fd/{}", dir.as_raw_fd())).map_err(err)?;
        m.fence(fence, top, (st.st_dev, st.st_ino));
    }
    let walked = m.walk(src, dir);
    let held = m.held_back(dest);
    match walked {
        Ok(()) => {
            let mut done = m.done;
            done.held_back.extend(held);
            Ok(done)
        }
        Err(source) => Err(CacheError::Merge {
            path: m.at,
            cache: dest.to_path_buf(),
            source,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustix::fs::{Mode, OFlags};
    use std::fs::{self, File};
    use std::os::fd::OwnedFd;
    use std::os::unix::fs::symlink;
    use warden_workspace::fsutil::ENTRY_BYTES;

    fn tmp(tag: &str) -> tempfile::TempDir {
        tempfile::Builder::new().prefix(tag).tempdir().unwrap()
    }

    #[test]
    fn new_files_are_merged_and_a_link_in_the_shared_cache_is_replaced_not_followed() {
        let live = tmp("live");
        let profile = tmp("profile");
        let outside = tmp("outside");
        let dest = profile.path().join("pip/pip");
        fs::create_dir_all(dest.join("sub")).unwrap();
        // Planted by an older sandbox: links out of the cache.
        symlink(outside.path().join("victim"), dest.join("file")).unwrap();
        symlink(outside.path(), dest.join("dir")).unwrap();
        fs::create_dir_all(live.path().join("dir")).unwrap();
        fs::write(live.path().join("file"), "cached\n").unwrap();
        fs::write(live.path().join("dir/inner"), "inner\n").unwrap();
        fs::create_dir(live.path().join("sub")).unwrap();
        fs::write(live.path().join("sub/x"), "x").unwrap();
        let m = merge(live.path(), &dest, (profile.path(), 1 << 20), None).unwrap();
        assert_eq!(m.left_out, 0);
        assert_eq!(fs::read_to_string(dest.join("file")).unwrap(), "cached\n");
        assert!(!fs::symlink_metadata(dest.join("dir"))
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(
            fs::read_to_string(dest.join("dir/inner")).unwrap(),
            "inner\n"
        );
        assert_eq!(fs::read_to_string(dest.join("sub/x")).unwrap(), "x");
        assert_eq!(
            fs::read_dir(outside.path()).unwrap().count(),
            0,
            "written through a link"
        );
    }

    #[test]
    fn a_volume_grows_by_at_most_its_budget_and_a_link_in_it_is_replaced_not_followed() {
        let live = tmp("live");
        let vol = tmp("volume");
        let outside = tmp("outside");
        fs::write(vol.path().join("old"), vec![1u8; 100 << 10]).unwrap();
        symlink(outside.path(), vol.path().join("out")).unwrap();
        fs::create_dir(live.path().join("out")).unwrap();
        fs::write(live.path().join("out/planted"), "x").unwrap();
        fs::write(live.path().join("a"), vec![1u8; 300 << 10]).unwrap();
        // Sparse in the upper layer, whole once copied: counted whole.
        let sparse = File::create(live.path().join("sparse")).unwrap();
        sparse.set_len(1 << 30).unwrap();
        let before = fsutil::tree_size(vol.path());
        let m = merge_volume(live.path(), vol.path(), 512 << 10, None).unwrap();
        assert_eq!(m.left_out, 1);
        assert!(vol.path().join("a").is_file() && !vol.path().join("sparse").exists());
        assert!(fsutil::tree_size(vol.path()) <= before + (512 << 10));
        assert_eq!(fs::read_dir(outside.path()).unwrap().count(), 0);
    }

    #[test]
    fn files_past_the_limit_are_left_out() {
        let live = tmp("live");
        let profile = tmp("profile");
        let dest = profile.path().join("npm/_cacache");
        fs::create_dir_all(&dest).unwrap();
        fs::write(live.path().join("a"), vec![1u8; 300 << 10]).unwrap();
        fs::write(live.path().join("b"), vec![1u8; 300 << 10]).unwrap();
        let m = merge(live.path(), &dest, (profile.path(), 512 << 10), None).unwrap();
        assert_eq!(m.left_out, 1);
        assert!(dest.join("a").is_file() && !dest.join("b").exists());
        assert!(fsutil::tree_size(profile.path()) <= 512 << 10);
    }

    /// A fence naming paths as the owner's files' closure does: each
    /// named path, what is below it, and every directory on the way.
    struct Named {
        paths: Vec<PathBuf>,
        keep: PathBuf,
    }

    impl Fence for Named {
        fn fenced(&self, path: &Path, _: Option<(u64, u64)>) -> Option<&'static str> {
            self.paths
                .iter()
                .any(|p| p.starts_with(path) || path.starts_with(p))
                .then_some("holds_configuration")
        }
        fn keep(&self) -> Option<&Path> {
            Some(&self.keep)
        }
    }

    #[test]
    fn what_the_fence_names_is_held_back_and_kept_and_the_rest_merges_as_before() {
        let live = tmp("live");
        let vol = tmp("volume");
        let state = tmp("state");
        let top = vol.path().canonicalize().unwrap();
        fs::write(top.join("base.yaml"), "the owner's\n").unwrap();
        fs::write(top.join("gone.yaml"), "the owner's too\n").unwrap();
        fs::create_dir(top.join("conf")).unwrap();
        fs::write(top.join("conf/profile.yaml"), "the owner's\n").unwrap();
        // The sandbox's writes: over the owner's files, a new file the
        // owner's profile names, a link at another, a new directory on the
        // way to a fourth, a removal of a fifth, and its own files.
        fs::write(live.path().join("base.yaml"), "the sandbox's\n").unwrap();
        fs::write(live.path().join("new.yaml"), "the sandbox's\n").unwrap();
        symlink("/etc/hostname", live.path().join("linked.yaml")).unwrap();
        fs::create_dir_all(live.path().join("deep/er")).unwrap();
        fs::write(live.path().join("deep/er/x.yaml"), "the sandbox's\n").unwrap();
        fs::create_dir(live.path().join("conf")).unwrap();
        fs::write(live.path().join("conf/profile.yaml"), "the sandbox's\n").unwrap();
        fs::write(live.path().join("conf/note"), "mine\n").unwrap();
        let whiteout = rustix::fs::mknodat(
            rustix::fs::CWD,
            live.path().join("gone.yaml"),
            rustix::fs::FileType::CharacterDevice,
            Mode::from_raw_mode(0o600),
            0,
        );
        fs::write(live.path().join("note"), "mine\n").unwrap();
        let fence = Named {
            paths: [
                "base.yaml",
                "new.yaml",
                "linked.yaml",
                "deep/er/x.yaml",
                "conf/profile.yaml",
                "gone.yaml",
            ]
            .iter()
            .map(|p| top.join(p))
            .collect(),
            keep: state.path().join("held-back"),
        };
        let m = merge_volume(live.path(), vol.path(), 8 << 20, Some(&fence)).unwrap();
        assert_eq!(
            fs::read_to_string(top.join("base.yaml")).unwrap(),
            "the owner's\n"
        );
        assert_eq!(
            fs::read_to_string(top.join("conf/profile.yaml")).unwrap(),
            "the owner's\n"
        );
        assert!(!top.join("new.yaml").exists());
        assert!(fs::symlink_metadata(top.join("linked.yaml")).is_err());
        assert!(!top.join("deep").exists());
        assert_eq!(fs::read_to_string(top.join("note")).unwrap(), "mine\n");
        assert_eq!(fs::read_to_string(top.join("conf/note")).unwrap(), "mine\n");
        let held = &m.held_back[..];
        assert_eq!(held.len(), 1, "{m:?}");
        let kept = held[0].kept.clone().unwrap();
        assert_eq!(held[0].reason, "holds_configuration");
        for p in [
            "base.yaml",
            "new.yaml",
            "deep/er/x.yaml",
            "conf/profile.yaml",
        ] {
            assert_eq!(
                fs::read_to_string(kept.join(p)).unwrap(),
                "the sandbox's\n",
                "{p}"
            );
        }
        assert_eq!(
            fs::read_link(kept.join("linked.yaml")).unwrap(),
            Path::new("/etc/hostname")
        );
        // A whiteout (where the host lets one be made here) removes
        // nothing of the owner's.
        if whiteout.is_ok() {
            assert!(top.join("gone.yaml").is_file());
            assert_eq!(held[0].entries, 6);
        } else {
            assert_eq!(held[0].entries, 5);
        }
        // The next merge's held-back entries replace this one's.
        let live2 = tmp("live2");
        fs::write(live2.path().join("new.yaml"), "again\n").unwrap();
        let m = merge_volume(live2.path(), vol.path(), 8 << 20, Some(&fence)).unwrap();
        assert_eq!(m.held_back[0].entries, 1);
        assert_eq!(
            fs::read_to_string(kept.join("new.yaml")).unwrap(),
            "again\n"
        );
        assert!(!kept.join("base.yaml").exists());
        // Without a fence, the same writes merge.
        let m = merge_volume(live.path(), vol.path(), 8 << 20, None).unwrap();
        assert!(m.held_back.is_empty());
        assert_eq!(
            fs::read_to_string(top.join("base.yaml")).unwrap(),
            "the sandbox's\n"
        );
    }

    /// `levels` nested directories named `name` below `top` (each made
    /// beneath the last descriptor, as a sandbox can, past PATH_MAX);
    /// answers the deepest one.
    fn chain(top: &Path, name: &str, levels: usize) -> OwnedFd {
        let mut fd = open_dir(rustix::fs::CWD, top).unwrap();
        for _ in 0..levels {
            rustix::fs::mkdirat(&fd, name, Mode::from_raw_mode(0o755)).unwrap();
            fd = open_dir(&fd, Path::new(name)).unwrap();
        }
        fd
    }

    #[test]
    fn empty_files_directories_and_long_names_never_grow_a_volume_past_its_budget() {
        let live = tmp("live");
        let vol = tmp("volume");
        let long = "n".repeat(240);
        fs::create_dir(live.path().join("f")).unwrap();
        for i in 0..2000 {
            fs::write(live.path().join("f").join(format!("{long}{i:04}")), b"").unwrap();
        }
        for i in 0..100 {
            fs::create_dir(live.path().join(format!("d{i:03}"))).unwrap();
        }
        let before = fsutil::tree_size(vol.path());
        let m = merge_volume(live.path(), vol.path(), 1 << 20, None).unwrap();
        let after = fsutil::tree_size(vol.path());
        assert!(after <= before + (1 << 20), "{before} then {after}");
        let made = fs::read_dir(vol.path().join("f")).unwrap().count() as u64;
        assert!(made > 0 && made < 256, "{made} empty files merged");
        assert_eq!(
            m.left_out,
            2000 + 100 + 1 - made - 1 - count_dirs(vol.path())
        );
        assert!(m.added >= (made + 1) * ENTRY_BYTES, "{m:?}");
    }

    fn count_dirs(p: &Path) -> u64 {
        fs::read_dir(p)
            .unwrap()
            .flatten()
            .filter(|e| e.file_name() != "f")
            .count() as u64
    }

    #[test]
    fn a_tree_three_thousand_deep_is_merged_without_recursion() {
        let live = tmp("live");
        let vol = tmp("volume");
        let deep = chain(live.path(), "a", 3000);
        let f = rustix::fs::openat(
            &deep,
            "bottom",
            OFlags::WRONLY | OFlags::CREATE | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o644),
        )
        .unwrap();
        rustix::io::write(&f, b"down here").unwrap();
        drop((f, deep));
        // On a small stack: a walk that recursed would overflow it.
        let (live_p, vol_p) = (live.path().to_path_buf(), vol.path().to_path_buf());
        let m = std::thread::Builder::new()
            .stack_size(256 << 10)
            .spawn(move || merge_volume(&live_p, &vol_p, 64 << 20, None))
            .unwrap()
            .join()
            .unwrap()
            .unwrap();
        assert_eq!(m.left_out, 0);
        let mut fd = open_dir(rustix::fs::CWD, vol.path()).unwrap();
        for _ in 0..3000 {
            fd = open_dir(&fd, Path::new("a")).unwrap();
        }
        let got = rustix::fs::openat(&fd, "bottom", OFlags::RDONLY, Mode::empty()).unwrap();
        let mut buf = [0u8; 16];
        let n = rustix::io::read(&got, &mut buf).unwrap();
        assert_eq!(&buf[..n], b"down here");
        // Within a budget too small for it, it is left out, cleanly.
        let vol2 = tmp("volume2");
        let m = merge_volume(live.path(), vol2.path(), 1 << 20, None).unwrap();
        assert!(m.left_out > 2700, "{m:?}");
        assert!(fsutil::tree_size(vol2.path()) <= 1 << 20);
    }
}
