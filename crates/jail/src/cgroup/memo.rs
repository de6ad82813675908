//! The cgroup plan, remembered between runs.
//!
//! This module owns the file that keeps what discovery and planning found
//! (the hierarchies, where this user's sandboxes go in each) from one
//! sandbox to the next, and the check that it still holds. Both answers
//! depend only on the host's mounts, this process's cgroup and credentials,
//! and the owner and mode of a few cgroup directories, none of which
//! changes from one run to the next on a host; discovering them again costs
//! a read and parse of `/proc/self/mountinfo` and a permission check of each
//! hierarchy, on every run. A remembered plan is used only when every input
//! it was made from is seen unchanged:
//!
//! - the same effective user, group and supplementary groups;
//! - the same mount namespace (the inode of `/proc/self/ns/mnt`);
//! - the same `/proc/self/cgroup` text (where this process sits);
//! - each path the plan looked at (whether it exists, whether this user
//!   may write it) has the same device, inode, mode, owner, group and
//!   change time, or is still absent: a hierarchy unmounted, remounted or
//!   re-delegated (chmod, chown) fails the check.
//!
//! It never trusts a file another user could have written: the file and
//! its directory must belong to the effective user and be writable by no
//! one else, the file is opened without following links, and anything
//! that does not parse is ignored. A plan that does not hold is discovered
//! again and written anew; the caller also discovers again when creating a
//! cgroup from a remembered plan fails (`Cgroup::create`), so a remembered
//! plan can cost a retry but never a wrong answer. It never decides
//! anything itself: the plan's decisions are `plan`'s.

use std::cell::RefCell;
use std::fs::{self, OpenOptions};
use std::io::Read as _;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, StatxFlags, CWD};
use serde::{Deserialize, Serialize};

use super::discover::Hierarchies;
use super::plan::{HostView, Plan, RealHost};
use super::CgroupError;

/// Bumped whenever what is remembered, or how it is checked, changes.
const VERSION: u32 = 1;
/// The file's name in its directory.
const FILE: &str = "cgroup-plan.json";
/// Where root's plan is kept (a tmpfs: a reboot forgets it).
const ROOT_DIR: &str = "/run/warden";
/// A remembered plan larger than this is not one of ours.
const MAX_BYTES: u64 = 64 * 1024;

/// What a path looked like when the plan was made; `None` when it did not
/// exist (or could not be looked at).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct Fingerprint {
    dev_major: u32,
    dev_minor: u32,
    ino: u64,
    mode: u16,
    uid: u32,
    gid: u32,
    ctime_sec: i64,
    ctime_nsec: u32,
}

fn fingerprint(path: &Path) -> Option<Fingerprint> {
    let st = rustix::fs::statx(
        CWD,
        path,
        AtFlags::SYMLINK_NOFOLLOW,
        StatxFlags::TYPE
            | StatxFlags::MODE
            | StatxFlags::UID
            | StatxFlags::GID
            | StatxFlags::INO
            | StatxFlags::CTIME,
    )
    .ok()?;
    Some(Fingerprint {
        dev_major: st.stx_dev_major,
        dev_minor: st.stx_dev_minor,
        ino: st.stx_ino,
        mode: st.stx_mode,
        uid: st.stx_uid,
        gid: st.stx_gid,
        ctime_sec: st.stx_ctime.tv_sec,
        ctime_nsec: st.stx_ctime.tv_nsec,
    })
}

/// Who is asking and from where: a plan made for another user, another
/// cgroup or another mount namespace is not this one's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Context {
    euid: u32,
    egid: u32,
    groups: Vec<u32>,
    mnt_ns: u64,
    proc_cgroup: String,
}

impl Context {
    fn current() -> Option<Context> {
        let mut groups: Vec<u32> = nix::unistd::getgroups()
            .ok()?
            .into_iter()
            .map(|g| g.as_raw())
            .collect();
        groups.sort_unstable();
        Some(Context {
            euid: nix::unistd::geteuid().as_raw(),
            egid: nix::unistd::getegid().as_raw(),
            groups,
            mnt_ns: fs::metadata("/proc/self/ns/mnt").ok()?.ino(),
            proc_cgroup: fs::read_to_string("/proc/self/cgroup").ok()?,
        })
    }
}

/// A plan and everything it was made from.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Remembered {
    version: u32,
    context: Context,
    /// Every path the plan looked at, with what it looked like.
    seen: Vec<(PathBuf, Option<Fingerprint>)>,
    hierarchies: Hierarchies,
    plan: Plan,
}

impl Remembered {
    fn holds(&self, context: &Context) -> bool {
        self.version == VERSION
            && self.context == *context
            && self.seen.iter().all(|(p, f)| fingerprint(p) == *f)
    }
}

/// The real host, with every path the plan asks about written down.
struct Recording {
    seen: RefCell<Vec<(PathBuf, Option<Fingerprint>)>>,
}

impl Recording {
    fn note(&self, path: &Path) {
        let mut seen = self.seen.borrow_mut();
        if !seen.iter().any(|(p, _)| p == path) {
            seen.push((path.to_path_buf(), fingerprint(path)));
        }
    }
}

impl HostView for Recording {
    fn writable(&self, path: &Path) -> bool {
        self.note(path);
        RealHost.writable(path)
    }
    fn exists(&self, path: &Path) -> bool {
        self.note(path);
        RealHost.exists(path)
    }
    fn read(&self, path: &Path) -> Option<String> {
        // What a cgroup.controllers lists changes without a change time;
        // a controller gone or come is caught by `Cgroup::create`'s retry.
        RealHost.read(path)
    }
}

/// Where this user's plan is kept: root's under /run/warden, another
/// user's under its `$XDG_RUNTIME_DIR/warden`; `None` (discover every
/// time) when that directory is not set, not absolute, or not the user's.
pub(super) fn default_dir() -> Option<PathBuf> {
    if nix::unistd::geteuid().is_root() {
        return Some(PathBuf::from(ROOT_DIR));
    }
    // Read by the binary ([`crate::settings`]), absolute or not at all.
    let runtime = crate::settings::Settings::current().runtime_dir.as_ref()?;
    Some(runtime.join("warden"))
}

/// The directory is ours and no one else may write into it.
fn trusted_dir(dir: &Path) -> bool {
    fs::symlink_metadata(dir).is_ok_and(|m| {
        m.is_dir() && m.uid() == nix::unistd::geteuid().as_raw() && m.mode() & 0o022 == 0
    })
}

/// Read the remembered plan in `dir`, if it is ours and parses.
fn load(dir: &Path) -> Option<Remembered> {
    if !trusted_dir(dir) {
        return None;
    }
    let mut file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(dir.join(FILE))
        .ok()?;
    let meta = file.metadata().ok()?;
    let ours = meta.is_file()
        && meta.uid() == nix::unistd::geteuid().as_raw()
        && meta.mode() & 0o022 == 0
        && meta.len() <= MAX_BYTES;
    if !ours {
        return None;
    }
    let mut text = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    std::io::Read::by_ref(&mut file)
        .take(MAX_BYTES)
        .read_to_end(&mut text)
        .ok()?;
    serde_json::from_slice(&text).ok()
}

/// Keep `remembered` in `dir` (best effort: a plan not kept is discovered
/// again next time), whole and owner-only: `load` trusts nothing else.
fn store(dir: &Path, remembered: &Remembered) {
    let made = fs::DirBuilder::new().mode(0o700).create(dir);
    if made.is_err() && !trusted_dir(dir) {
        return;
    }
    let Ok(text) = serde_json::to_vec(remembered) else {
        return;
    };
    let _ = warden_protocol::replace_file(&dir.join(FILE), &text, 0o600);
}

/// Where the plan came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Source {
    Remembered,
    Discovered,
}

/// The hierarchies and this user's plan: the remembered ones when they
/// still hold (and `fresh` is false), else discovered and remembered.
pub(super) fn plan(
    dir: Option<&Path>,
    fresh: bool,
) -> Result<(Hierarchies, Plan, Source), CgroupError> {
    let context = dir.and_then(|_| Context::current());
    if let (Some(dir), Some(context), false) = (dir, &context, fresh) {
        if let Some(r) = load(dir).filter(|r| r.holds(context)) {
            return Ok((r.hierarchies, r.plan, Source::Remembered));
        }
    }
    let h = Hierarchies::discover()?;
    let host = Recording {
        seen: RefCell::new(Vec::new()),
    };
    let plan = Plan::new(&h, &host);
    if let (Some(dir), Some(context)) = (dir, context) {
        let remembered = Remembered {
            version: VERSION,
            context,
            seen: host.seen.into_inner(),
            hierarchies: h.clone(),
            plan: plan.clone(),
        };
        store(dir, &remembered);
    }
    Ok((h, plan, Source::Discovered))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn private_dir() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o700)).unwrap();
        dir
    }

    #[test]
    fn a_plan_is_remembered_and_used_while_it_holds() {
        let dir = private_dir();
        let (h, p, first) = plan(Some(dir.path()), false).unwrap();
        assert_eq!(first, Source::Discovered);
        let (h2, p2, second) = plan(Some(dir.path()), false).unwrap();
        assert_eq!(second, Source::Remembered);
        assert_eq!((h, p), (h2, p2));
    }

    #[test]
    fn a_path_that_changed_makes_the_plan_discovered_again() {
        let dir = private_dir();
        let looked_at = dir.path().join("looked-at");
        fs::create_dir(&looked_at).unwrap();
        plan(Some(dir.path()), false).unwrap();
        let mut r = load(dir.path()).unwrap();
        r.seen.push((looked_at.clone(), fingerprint(&looked_at)));
        store(dir.path(), &r);
        assert!(load(dir.path())
            .unwrap()
            .holds(&Context::current().unwrap()));
        fs::set_permissions(&looked_at, fs::Permissions::from_mode(0o777)).unwrap();
        assert!(!load(dir.path())
            .unwrap()
            .holds(&Context::current().unwrap()));
        let (_, _, source) = plan(Some(dir.path()), false).unwrap();
        assert_eq!(source, Source::Discovered);
    }

    #[test]
    fn a_plan_made_in_another_cgroup_does_not_hold() {
        let dir = private_dir();
        plan(Some(dir.path()), false).unwrap();
        let mut r = load(dir.path()).unwrap();
        r.context.proc_cgroup.push_str("0::/elsewhere\n");
        store(dir.path(), &r);
        let (_, _, source) = plan(Some(dir.path()), false).unwrap();
        assert_eq!(source, Source::Discovered);
    }

    #[test]
    fn a_plan_file_others_may_write_is_not_read() {
        let dir = private_dir();
        plan(Some(dir.path()), false).unwrap();
        let file = dir.path().join(FILE);
        fs::set_permissions(&file, fs::Permissions::from_mode(0o622)).unwrap();
        assert!(load(dir.path()).is_none());
        fs::set_permissions(&file, fs::Permissions::from_mode(0o600)).unwrap();
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o777)).unwrap();
        assert!(load(dir.path()).is_none());
    }

    #[test]
    fn a_plan_file_of_another_user_is_not_read() {
        if !nix::unistd::geteuid().is_root() {
            eprintln!("skipped: only root can give a file to another user");
            return;
        }
        let dir = private_dir();
        plan(Some(dir.path()), false).unwrap();
        let file = dir.path().join(FILE);
        std::os::unix::fs::chown(&file, Some(65534), None).unwrap();
        assert!(load(dir.path()).is_none());
        std::os::unix::fs::chown(&file, Some(0), None).unwrap();
        std::os::unix::fs::chown(dir.path(), Some(65534), None).unwrap();
        assert!(load(dir.path()).is_none());
    }

    #[test]
    fn a_plan_file_reached_through_a_link_is_not_read() {
        let dir = private_dir();
        let elsewhere = private_dir();
        plan(Some(elsewhere.path()), false).unwrap();
        std::os::unix::fs::symlink(elsewhere.path().join(FILE), dir.path().join(FILE)).unwrap();
        assert!(load(dir.path()).is_none());
    }

    #[test]
    fn a_plan_file_that_does_not_parse_is_discovered_again() {
        let dir = private_dir();
        fs::write(dir.path().join(FILE), b"{\"version\": 1, \"plan\": ").unwrap();
        let (_, _, source) = plan(Some(dir.path()), false).unwrap();
        assert_eq!(source, Source::Discovered);
        assert!(load(dir.path()).is_some());
    }
}
