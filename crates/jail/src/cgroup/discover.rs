//! Discovery: which cgroup hierarchies the host mounts and where this process
//! sits in each.
//!
//! This module owns reading `/proc/self/mountinfo` and `/proc/self/cgroup`
//! and the layout they add up to (v2, v1, hybrid or none). It only reads:
//! it never writes a cgroup file and never judges what this user may do
//! with what it finds (that is `plan`'s work).

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

use super::{CgroupError, Controller, Layout};

/// Where the kernel describes this process's mounts.
const MOUNTINFO: &str = "/proc/self/mountinfo";
/// Where the kernel describes this process's cgroup in each hierarchy.
const PROC_CGROUP: &str = "/proc/self/cgroup";

/// Controller names the kernel may list in a v1 mount's super options; any
/// other option (rw, xattr, clone_children, release_agent=...) is not one.
const V1_CONTROLLERS: &[&str] = &[
    "cpuset",
    "cpu",
    "cpuacct",
    "blkio",
    "io",
    "memory",
    "devices",
    "freezer",
    "net_cls",
    "perf_event",
    "net_prio",
    "hugetlb",
    "pids",
    "rdma",
    "misc",
    "debug",
];

/// One cgroup mount from `/proc/self/mountinfo`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Mount {
    /// Where it is mounted.
    point: PathBuf,
    /// Which cgroup of the hierarchy is the mount's root (not "/" for bind
    /// mounts and inside cgroup namespaces).
    root: String,
    /// For v1, the controllers and `name=` of the hierarchy; `None` for v2.
    v1_subsystems: Option<BTreeSet<String>>,
}

/// Decode the octal escapes (`\040` for a space) of a mountinfo field.
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' && i + 3 < bytes.len() {
            let digits = &bytes[i + 1..i + 4];
            if digits.iter().all(|d| (b'0'..=b'7').contains(d)) {
                let value = digits
                    .iter()
                    .fold(0u32, |acc, d| acc * 8 + u32::from(d - b'0'));
                if let Ok(byte) = u8::try_from(value) {
                    out.push(byte);
                    i += 4;
                    continue;
                }
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The cgroup and cgroup2 mounts of a mountinfo text, in order.
fn parse_mountinfo(text: &str) -> Vec<Mount> {
    let mut mounts = Vec::new();
    for line in text.lines() {
        // "<id> <parent> <maj:min> <root> <point> <opts> [optional...] - <type> <source> <superopts>"
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        let left: Vec<&str> = left.split(' ').collect();
        let (Some(root), Some(point)) = (left.get(3), left.get(4)) else {
            continue;
        };
        let mut right = right.split(' ');
        let fstype = right.next().unwrap_or_default();
        let _source = right.next();
        let superopts = right.next().unwrap_or_default();
        let v1_subsystems = match fstype {
            "cgroup2" => None,
            "cgroup" => Some(
                superopts
                    .split(',')
                    .filter(|o| V1_CONTROLLERS.contains(o) || o.starts_with("name="))
                    .map(str::to_owned)
                    .collect(),
            ),
            _ => continue,
        };
        mounts.push(Mount {
            point: PathBuf::from(unescape(point)),
            root: unescape(root),
            v1_subsystems,
        });
    }
    mounts
}

/// One line of `/proc/self/cgroup`: the hierarchy's subsystems (empty for
/// v2) and this process's cgroup in it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Membership {
    subsystems: BTreeSet<String>,
    path: String,
}

fn parse_proc_cgroup(text: &str) -> Vec<Membership> {
    text.lines()
        .filter_map(|line| {
            let mut parts = line.splitn(3, ':');
            let _id = parts.next()?;
            let subsystems = parts.next()?;
            let path = parts.next()?;
            Some(Membership {
                subsystems: subsystems
                    .split(',')
                    .filter(|s| !s.is_empty())
                    .map(str::to_owned)
                    .collect(),
                path: path.to_owned(),
            })
        })
        .collect()
}

/// A v1 hierarchy the host mounts.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(super) struct V1Hierarchy {
    pub(super) point: PathBuf,
    /// The controllers of ours it carries (several when co-mounted, as
    /// `cpu,cpuacct` usually is).
    pub(super) controllers: Vec<Controller>,
    /// Whether it carries any real controller (not only `name=systemd`).
    has_controllers: bool,
}

/// The v2 hierarchy the host mounts.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(super) struct V2Hierarchy {
    pub(super) point: PathBuf,
    /// This process's cgroup directory, when visible through the mount.
    pub(super) own: Option<PathBuf>,
}

/// The cgroup hierarchies of this host, as this process sees them.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(super) struct Hierarchies {
    pub(super) v1: Vec<V1Hierarchy>,
    pub(super) v2: Option<V2Hierarchy>,
}

impl Hierarchies {
    pub(super) fn discover() -> Result<Self, CgroupError> {
        let read = |path: &str| {
            fs::read_to_string(path).map_err(|source| CgroupError::Discover {
                path: PathBuf::from(path),
                source,
            })
        };
        Ok(Self::parse(&read(MOUNTINFO)?, &read(PROC_CGROUP)?))
    }

    pub(super) fn parse(mountinfo: &str, proc_cgroup: &str) -> Self {
        let memberships = parse_proc_cgroup(proc_cgroup);
        let mut v1: Vec<V1Hierarchy> = Vec::new();
        let mut seen: Vec<BTreeSet<String>> = Vec::new();
        let mut v2 = None;
        for mount in parse_mountinfo(mountinfo) {
            match mount.v1_subsystems {
                Some(subsystems) => {
                    // A hierarchy mounted twice (bind mounts) is used once.
                    if subsystems.is_empty() || seen.contains(&subsystems) {
                        continue;
                    }
                    let controllers = subsystems
                        .iter()
                        .filter_map(|s| Controller::from_name(s))
                        .collect();
                    let has_controllers = subsystems.iter().any(|s| !s.starts_with("name="));
                    seen.push(subsystems);
                    v1.push(V1Hierarchy {
                        point: mount.point,
                        controllers,
                        has_controllers,
                    });
                }
                None if v2.is_none() => {
                    let own = memberships
                        .iter()
                        .find(|m| m.subsystems.is_empty())
                        .and_then(|m| below_mount(&mount.point, &mount.root, &m.path));
                    v2 = Some(V2Hierarchy {
                        point: mount.point,
                        own,
                    });
                }
                None => {}
            }
        }
        Hierarchies { v1, v2 }
    }

    pub(super) fn layout(&self) -> Layout {
        let v1 = self.v1.iter().any(|h| h.has_controllers);
        match (v1, self.v2.is_some()) {
            (true, true) => Layout::Hybrid,
            (true, false) => Layout::V1,
            (false, true) => Layout::V2,
            (false, false) if !self.v1.is_empty() => Layout::V1,
            (false, false) => Layout::None,
        }
    }
}

/// The directory of cgroup `path` (as `/proc/self/cgroup` names it) under a
/// mount whose root is cgroup `root`; `None` when it lies outside the mount.
fn below_mount(point: &Path, root: &str, path: &str) -> Option<PathBuf> {
    if path.ends_with(" (deleted)") {
        return None;
    }
    let rel = if root == "/" {
        path
    } else {
        let rest = path.strip_prefix(root)?;
        if !(rest.is_empty() || rest.starts_with('/')) {
            return None;
        }
        rest
    };
    let rel = rel.trim_start_matches('/');
    if rel.split('/').any(|c| c == "..") {
        return None;
    }
    Some(if rel.is_empty() {
        point.to_path_buf()
    } else {
        point.join(rel)
    })
}

#[cfg(test)]
pub(super) mod tests {
    //! Hosts as the kernel describes them; `plan`'s tests use them too.
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    /// The hybrid layout of a systemd host in hybrid mode (and of the CI
    /// machine): v1 controllers, a v2 mount without them beside.
    pub(crate) const HYBRID_MOUNTINFO: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
37 31 0:34 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";
    pub(crate) const HYBRID_CGROUP: &str = "\
9:name=systemd:/
8:pids:/
6:freezer:/
4:memory:/batch/job-7
3:cpuset:/
2:cpuacct:/
1:cpu:/
0::/
";
    /// A current distribution: the unified hierarchy only, the caller in a
    /// systemd user scope.
    pub(crate) const V2_MOUNTINFO: &str = "\
22 1 259:1 / / rw,relatime shared:1 - ext4 /dev/root rw
35 24 0:30 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot
";
    pub(crate) const USER_SCOPE: &str =
        "/user.slice/user-1000.slice/user@1000.service/app.slice/run-1.scope";

    /// An older v1-only host with cpu and cpuacct co-mounted, and one
    /// hierarchy bind-mounted twice.
    const V1_MOUNTINFO: &str = "\
26 25 0:23 / /sys/fs/cgroup/systemd rw - cgroup cgroup rw,xattr,release_agent=/x,name=systemd
29 25 0:26 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct
30 25 0:27 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory
31 25 0:28 / /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids
90 25 0:28 / /mnt/pids\\040again rw - cgroup cgroup rw,pids
";

    pub(crate) fn v1_index(h: &Hierarchies, point: &str) -> usize {
        h.v1.iter()
            .position(|v| v.point == Path::new(point))
            .unwrap()
    }

    #[test]
    fn hybrid_host_is_read_as_v1_controllers_beside_a_v2_mount() {
        let h = Hierarchies::parse(HYBRID_MOUNTINFO, HYBRID_CGROUP);
        assert_eq!(h.layout(), Layout::Hybrid);
        let v2 = h.v2.as_ref().unwrap();
        assert_eq!(v2.point, Path::new("/sys/fs/cgroup/unified"));
        assert_eq!(v2.own.as_deref(), Some(Path::new("/sys/fs/cgroup/unified")));
        let memory = &h.v1[v1_index(&h, "/sys/fs/cgroup/memory")];
        assert_eq!(memory.controllers, vec![Controller::Memory]);
        let systemd = &h.v1[v1_index(&h, "/sys/fs/cgroup/systemd")];
        assert!(systemd.controllers.is_empty() && !systemd.has_controllers);
    }

    #[test]
    fn v1_hierarchies_are_read_once_with_co_mounted_controllers_together() {
        let h = Hierarchies::parse(V1_MOUNTINFO, "");
        assert_eq!(h.layout(), Layout::V1);
        assert!(h.v2.is_none());
        let points: Vec<_> = h.v1.iter().map(|v| v.point.clone()).collect();
        assert_eq!(
            points,
            vec![
                PathBuf::from("/sys/fs/cgroup/systemd"),
                PathBuf::from("/sys/fs/cgroup/cpu,cpuacct"),
                PathBuf::from("/sys/fs/cgroup/memory"),
                PathBuf::from("/sys/fs/cgroup/pids"),
            ]
        );
        assert_eq!(
            h.v1[1].controllers,
            vec![Controller::Cpu, Controller::Cpuacct]
        );
    }

    #[test]
    fn mount_points_with_escaped_characters_are_decoded() {
        assert_eq!(unescape("/mnt/pids\\040again"), "/mnt/pids again");
        assert_eq!(unescape("/a\\134b"), "/a\\b");
        assert_eq!(unescape("/plain\\"), "/plain\\");
        assert_eq!(unescape("/x\\09"), "/x\\09");
    }

    #[test]
    fn own_cgroup_is_found_through_a_mount_of_a_subtree_only() {
        let point = Path::new("/sys/fs/cgroup");
        assert_eq!(
            below_mount(point, "/ctr", "/ctr/app"),
            Some(PathBuf::from("/sys/fs/cgroup/app"))
        );
        assert_eq!(
            below_mount(point, "/ctr", "/ctr"),
            Some(point.to_path_buf())
        );
        assert_eq!(below_mount(point, "/ctr", "/ctr2/app"), None);
        assert_eq!(below_mount(point, "/", "/gone (deleted)"), None);
        assert_eq!(below_mount(point, "/", "/../etc"), None);
    }
}
