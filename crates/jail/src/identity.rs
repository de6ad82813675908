//! The host identity a sandbox may take, in every backend: never root and
//! never a system account. A sandbox that ran with the host's uid 0 (even
//! without a capability) would own every root-only file of the system
//! directories it is shown (`/etc`'s keys and secrets), and one with a
//! system uid (`daemon`, `www-data`, ...) would own that service's files.
//! So a backend that gives the sandbox the workspace owner's IDs (so that
//! what it writes stays the owner's) gives them only when they are an
//! ordinary person's; otherwise the sandbox is nobody, and the workspace is
//! mapped to it for its writes only ([`SwapMap`]).
//!
//! This module decides; it mounts nothing and runs nothing but the short
//! child that holds a user namespace while its maps are written.

use crate::NOBODY;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::OnceLock;

/// The first uid and gid of ordinary accounts where `/etc/login.defs` says
/// nothing (Debian's, Fedora's and Arch's default).
const DEFAULT_FIRST_ORDINARY: u32 = 1000;

/// The first ordinary (non-system) uid and gid of this host, from
/// `/etc/login.defs` (`UID_MIN`, `GID_MIN`), read once.
pub fn first_ordinary() -> (u32, u32) {
    static FIRST: OnceLock<(u32, u32)> = OnceLock::new();
    *FIRST.get_or_init(|| {
        let defs = std::fs::read_to_string("/etc/login.defs").unwrap_or_default();
        (
            login_def(&defs, "UID_MIN").unwrap_or(DEFAULT_FIRST_ORDINARY),
            login_def(&defs, "GID_MIN").unwrap_or(DEFAULT_FIRST_ORDINARY),
        )
    })
}

/// One numeric setting of `/etc/login.defs` (`KEY value`, `#` comments).
fn login_def(defs: &str, key: &str) -> Option<u32> {
    defs.lines().find_map(|l| {
        let mut words = l.split('#').next()?.split_whitespace();
        (words.next()? == key).then(|| words.next()?.parse().ok())?
    })
}

/// Whether `uid` is an ordinary person's (or nobody's) on this host: not
/// root, not a system account, not the invalid `-1`.
pub fn is_ordinary_uid(uid: u32) -> bool {
    uid >= first_ordinary().0 && uid != u32::MAX
}

/// The same for a group.
pub fn is_ordinary_gid(gid: u32) -> bool {
    gid >= first_ordinary().1 && gid != u32::MAX
}

/// The host IDs a sandbox takes given its workspace's owner: the owner's
/// where they are ordinary, nobody's for each one that is not (root, a
/// system account) and without a workspace.
pub fn sandbox_ids(owner: Option<(u32, u32)>) -> (u32, u32) {
    match owner {
        Some((u, g)) => (
            if is_ordinary_uid(u) { u } else { NOBODY },
            if is_ordinary_gid(g) { g } else { NOBODY },
        ),
        None => (NOBODY, NOBODY),
    }
}

/// An ID map for an idmapped mount of the workspace that swaps its owner's
/// IDs with the sandbox's: files the owner has on disk are the sandbox's
/// through the mount, what the sandbox makes lands on disk as the owner's,
/// and every other ID is itself (so nothing of another account becomes the
/// sandbox's, as an unmapped ID shown as nobody would).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SwapMap {
    pub uid: (u32, u32),
    pub gid: (u32, u32),
}

impl SwapMap {
    /// The swap from the workspace owner's IDs to the sandbox's; `None`
    /// where they are the same (nothing to map).
    pub fn new(owner: (u32, u32), sandbox: (u32, u32)) -> Option<SwapMap> {
        (owner != sandbox).then_some(SwapMap {
            uid: (owner.0, sandbox.0),
            gid: (owner.1, sandbox.1),
        })
    }

    /// The lines of `uid_map` (`ids` = [`SwapMap::uid`]) or `gid_map`.
    pub fn lines(ids: (u32, u32)) -> String {
        let (on_disk, shown) = ids;
        if on_disk == shown {
            return "0 0 4294967295\n".into();
        }
        let (lo, hi) = (on_disk.min(shown), on_disk.max(shown));
        let mut out = format!("{on_disk} {shown} 1\n{shown} {on_disk} 1\n");
        // Identity around the two swapped IDs ([0, lo), (lo, hi), (hi, -1)).
        for (start, end) in [(0, lo), (lo + 1, hi), (hi + 1, u32::MAX)] {
            if end > start {
                out.push_str(&format!("{start} {start} {}\n", end - start));
            }
        }
        out
    }

    /// A user namespace whose maps are this swap, for `mount_setattr`'s
    /// `MOUNT_ATTR_IDMAP`. Needs root (writing maps of any ID).
    pub fn user_namespace(&self) -> std::io::Result<OwnedFd> {
        // SAFETY: the child of the clone only calls pause(2) until it is
        // killed below: no allocation, no lock, nothing a thread of the
        // parent could hold.
        let forked = unsafe { crate::sys::clone_process(libc::CLONE_NEWUSER) }?;
        let pid = match forked {
            crate::sys::Forked::Child => loop {
                // SAFETY: pause(2) is async-signal-safe and takes nothing.
                unsafe { libc::pause() };
            },
            crate::sys::Forked::Parent(pid) => pid,
        };
        let made = (|| {
            let dir = std::path::PathBuf::from(format!("/proc/{}", pid.as_raw()));
            std::fs::write(dir.join("uid_map"), Self::lines(self.uid))?;
            std::fs::write(dir.join("gid_map"), Self::lines(self.gid))?;
            Ok(OwnedFd::from(std::fs::File::open(dir.join("ns/user"))?))
        })();
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
        let _ = nix::sys::wait::waitpid(pid, None);
        made
    }
}

/// What every view carries, whoever it is handed to: no device node in
/// it opens and no set-ID bit or file capability in it counts, as the
/// process backend's binds (`nodev`, `nosuid`). Through a swap a root-only
/// device node of the share would otherwise be the helper's to open.
const VIEW_ATTRS: u64 = crate::sys::MOUNT_ATTR_NODEV | crate::sys::MOUNT_ATTR_NOSUID;

/// What a view handed to a VM's helpers (the VMM's 9p server, virtiofsd)
/// carries besides: nothing in it executes (they map nothing from the
/// shares; the guest's own kernel maps what it runs from bytes it read).
const HELPER_VIEW_ATTRS: u64 = VIEW_ATTRS | crate::sys::MOUNT_ATTR_NOEXEC;

/// A detached, idmapped view of the directory `dir` that shows `map`'s
/// swap: a descriptor of its root, to hand to whoever serves the
/// workspace as the sandbox's user (runsc's gofer). It is mounted
/// nowhere; it lives as long as the descriptor. `nodev` and `nosuid`,
/// set in the same call as the idmap; executable (the gofer's sandbox
/// maps binaries from it).
pub fn idmapped_view(dir: &std::path::Path, map: &SwapMap) -> std::io::Result<OwnedFd> {
    view_of(dir, nix::fcntl::OFlag::O_DIRECTORY, Some(map), VIEW_ATTRS)
}

/// The same for `path`, a directory or a single file, opened from `/`
/// through no symbolic link in any component (`openat2(RESOLVE_NO_SYMLINKS)`):
/// a view of a single file is a mount of that file alone, to attach over
/// a placeholder. For a VM's helpers: `nodev`, `nosuid` and `noexec`. A
/// VM's shares are viewed from the descriptor their launch opened and
/// checked ([`helper_view_of`]); this is for a path nobody checked yet.
pub fn idmapped_clone(path: &std::path::Path, map: &SwapMap) -> std::io::Result<OwnedFd> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
    let source = crate::sys::open_path_no_symlinks(&c)?;
    view_of_fd(source.as_fd(), Some(map), HELPER_VIEW_ATTRS)
}

/// A view of the directory (or single file) `dir` already opened (the
/// workspace, opened once and checked to be the sandbox's own directory,
/// [`crate::open_workspace`]; a share, [`crate::open_host_path`]) for a
/// VM's helpers (`nodev`, `nosuid`, `noexec`), idmapped through `map` when
/// there is one: the view is of that very file, whatever its path holds
/// by now. Needs root (`open_tree`'s clone); rootless, a helper is
/// warden's own user and gets the directory itself.
pub fn helper_view_of(dir: BorrowedFd<'_>, map: Option<&SwapMap>) -> std::io::Result<OwnedFd> {
    view_of_fd(dir, map, HELPER_VIEW_ATTRS)
}

/// [`idmapped_view`] of the directory `dir` already opened: a view of
/// that very directory, whatever its path holds by now; `None`: a plain
/// view of it (`nodev`, `nosuid`), for runsc's gofer to be shown the
/// directory opened rather than whatever its path holds when runsc
/// looks.
pub fn view_of_dir(dir: BorrowedFd<'_>, map: Option<&SwapMap>) -> std::io::Result<OwnedFd> {
    view_of_fd(dir, map, VIEW_ATTRS)
}

fn view_of(
    path: &std::path::Path,
    kind: nix::fcntl::OFlag,
    map: Option<&SwapMap>,
    attrs: u64,
) -> std::io::Result<OwnedFd> {
    let source = nix::fcntl::open(
        path,
        nix::fcntl::OFlag::O_PATH | kind | nix::fcntl::OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )?;
    if kind.contains(nix::fcntl::OFlag::O_NOFOLLOW)
        && nix::sys::stat::fstat(&source)?.st_mode & libc::S_IFMT == libc::S_IFLNK
    {
        // O_PATH | O_NOFOLLOW opens the link itself: never a view of one.
        return Err(std::io::Error::from_raw_os_error(libc::ELOOP));
    }
    view_of_fd(source.as_fd(), map, attrs)
}

fn view_of_fd(
    source: BorrowedFd<'_>,
    map: Option<&SwapMap>,
    attrs: u64,
) -> std::io::Result<OwnedFd> {
    let tree = crate::sys::open_tree_clone_fd(source)?;
    match map {
        Some(map) => {
            let userns = map.user_namespace()?;
            crate::sys::set_tree_attrs(
                tree.as_fd(),
                crate::sys::MOUNT_ATTR_IDMAP | attrs,
                Some(userns.as_fd()),
            )?
        }
        None => crate::sys::set_tree_attrs(tree.as_fd(), attrs, None)?,
    }
    Ok(tree)
}

/// Make the detached mount tree `tree` show `map`'s swap (the caller holds
/// the namespace only for this call), with [`VIEW_ATTRS`].
pub fn idmap(tree: &OwnedFd, map: &SwapMap) -> std::io::Result<()> {
    let userns = map.user_namespace()?;
    crate::sys::set_tree_attrs(
        tree.as_fd(),
        crate::sys::MOUNT_ATTR_IDMAP | VIEW_ATTRS,
        Some(userns.as_fd()),
    )
    .map_err(std::io::Error::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_and_system_owners_give_the_sandbox_nobody_and_ordinary_ones_their_own() {
        let (u, g) = first_ordinary();
        assert_eq!(sandbox_ids(Some((0, 0))), (NOBODY, NOBODY));
        assert_eq!(sandbox_ids(Some((1, 4))), (NOBODY, NOBODY));
        assert_eq!(sandbox_ids(Some((u - 1, g - 1))), (NOBODY, NOBODY));
        assert_eq!(sandbox_ids(Some((u, 0))), (u, NOBODY));
        assert_eq!(sandbox_ids(Some((u + 5, g + 5))), (u + 5, g + 5));
        assert_eq!(sandbox_ids(None), (NOBODY, NOBODY));
        assert_eq!(sandbox_ids(Some((u32::MAX, u32::MAX))), (NOBODY, NOBODY));
    }

    #[test]
    fn login_defs_settings_are_read_past_comments() {
        let defs = "# UID_MIN 5\nUID_MIN\t\t 2000 # people\nGID_MIN 3000\n";
        assert_eq!(login_def(defs, "UID_MIN"), Some(2000));
        assert_eq!(login_def(defs, "GID_MIN"), Some(3000));
        assert_eq!(login_def(defs, "UID_MAX"), None);
    }

    #[test]
    fn the_swap_map_exchanges_two_ids_and_keeps_every_other_one() {
        let lines = SwapMap::lines((0, NOBODY));
        let mut covered = 0u64;
        for l in lines.lines() {
            let n: Vec<u64> = l.split(' ').map(|w| w.parse().unwrap()).collect();
            covered += n[2];
            if n[0] == 0 {
                assert_eq!(n[1..], [NOBODY as u64, 1]);
            } else if n[0] == NOBODY as u64 {
                assert_eq!(n[1..], [0, 1]);
            } else {
                assert_eq!(n[0], n[1], "{l}");
            }
        }
        assert_eq!(covered, u32::MAX as u64, "{lines}");
        assert_eq!(SwapMap::lines((7, 7)), "0 0 4294967295\n");
        assert_eq!(SwapMap::new((5, 5), (5, 5)), None);
    }
}
