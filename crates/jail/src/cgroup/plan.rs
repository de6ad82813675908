//! Planning: which hierarchy gives each controller to sandboxes, for this
//! user.
//!
//! This module owns the decisions between what the host mounts and what this
//! user may write: where a v1 hierarchy is usable, where the sandbox's v2
//! cgroup goes (under the root, or under a delegated cgroup), and what
//! `warden doctor` reports. It is pure over a view of the file system, so the
//! same decisions serve `probe` (no side effects) and `create`, and can be
//! tested with fake hosts. It never creates, writes or removes anything.

use std::fs;
use std::path::{Path, PathBuf};

use rustix::fs::{Access, AtFlags, CWD};

use super::discover::{Hierarchies, V2Hierarchy};
use super::{Controller, Layout, Support, HINT_PERMISSION, HINT_V1, SUPERVISOR_PREFIX};

/// The parts of the file system the plan looks at.
pub(super) trait HostView {
    /// The effective user may write `path` (`eaccess(2)`, which also reports
    /// read-only mounts).
    fn writable(&self, path: &Path) -> bool;
    fn exists(&self, path: &Path) -> bool;
    fn read(&self, path: &Path) -> Option<String>;
}

pub(super) struct RealHost;

impl HostView for RealHost {
    fn writable(&self, path: &Path) -> bool {
        // faccessat2 with AT_EACCESS: one system call, where glibc's
        // eaccess first asks for the four IDs.
        rustix::fs::accessat(CWD, path, Access::WRITE_OK, AtFlags::EACCESS).is_ok()
    }
    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }
    fn read(&self, path: &Path) -> Option<String> {
        fs::read_to_string(path).ok()
    }
}

/// Which hierarchy provides a controller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Backend {
    /// The v1 hierarchy at this index of [`Hierarchies::v1`].
    V1(usize),
    V2,
}

/// Where the sandbox's v2 cgroup goes.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(super) enum V2Place {
    /// We may write the hierarchy's root (root, or a cgroup namespace we own):
    /// `<root>/warden/warden-<id>`.
    Root { root: PathBuf },
    /// The caller's own cgroup is delegated to it: `<own>/warden-<id>`.
    Delegated { own: PathBuf },
}

impl V2Place {
    /// The cgroup whose `cgroup.controllers` lists what sandboxes can get.
    fn base(&self) -> &Path {
        match self {
            V2Place::Root { root } => root,
            V2Place::Delegated { own } => own,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(super) struct V2Plan {
    pub(super) place: V2Place,
    /// Controllers of ours listed in the base's `cgroup.controllers`.
    available: Vec<Controller>,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(super) struct Plan {
    layout: Layout,
    /// Indexes of the v1 hierarchies (of ours) whose `warden` parent we may write.
    pub(super) v1_usable: Vec<usize>,
    /// Why a v1 hierarchy of ours is not usable, by index.
    v1_why_not: Vec<(usize, String)>,
    pub(super) v2: Option<V2Plan>,
    /// Why the v2 hierarchy is not usable, when it exists.
    v2_why_not: Option<String>,
}

impl Plan {
    pub(super) fn new(h: &Hierarchies, host: &dyn HostView) -> Plan {
        let mut v1_usable = Vec::new();
        let mut v1_why_not = Vec::new();
        for (i, v1) in h.v1.iter().enumerate() {
            if v1.controllers.is_empty() {
                continue;
            }
            // What `v1_parent` will choose, asked through the view.
            let mine = super::v1_user_parent(&v1.point);
            let parent = match mine {
                Some(mine) if host.exists(&mine) => mine,
                _ => v1.point.join(super::under::shared_parent()),
            };
            let ok = if host.exists(&parent) {
                host.writable(&parent)
            } else {
                host.writable(&v1.point)
            };
            if ok {
                v1_usable.push(i);
            } else {
                v1_why_not.push((
                    i,
                    format!(
                        "the cgroup v1 hierarchy {} is not writable by this user; {HINT_V1}",
                        v1.point.display()
                    ),
                ));
            }
        }

        let (v2, v2_why_not) = match &h.v2 {
            None => (None, None),
            Some(v2) => match v2_place(v2, host) {
                Ok(place) => {
                    let available = host
                        .read(&place.base().join("cgroup.controllers"))
                        .map(|text| {
                            text.split_whitespace()
                                .filter_map(Controller::from_name)
                                .filter(|c| Controller::LIMITS.contains(c))
                                .collect()
                        })
                        .unwrap_or_default();
                    (Some(V2Plan { place, available }), None)
                }
                Err(why) => (None, Some(why)),
            },
        };

        Plan {
            layout: h.layout(),
            v1_usable,
            v1_why_not,
            v2,
            v2_why_not,
        }
    }

    /// The hierarchy that provides `c` to sandboxes, or why none can.
    pub(super) fn backend(&self, h: &Hierarchies, c: Controller) -> Result<Backend, String> {
        // A controller is bound to one hierarchy at a time; where a v1
        // hierarchy carries it, v2 cannot offer it.
        if let Some(i) = h.v1.iter().position(|v1| v1.controllers.contains(&c)) {
            if self.v1_usable.contains(&i) {
                return Ok(Backend::V1(i));
            }
            let why = self.v1_why_not.iter().find(|(j, _)| *j == i);
            return Err(why.map(|(_, w)| w.clone()).unwrap_or_default());
        }
        if h.v2.is_none() {
            return Err(format!(
                "no cgroup hierarchy carries the {} controller",
                c.name()
            ));
        }
        let Some(plan) = &self.v2 else {
            return Err(self.v2_why_not.clone().unwrap_or_default());
        };
        match c {
            // Core files of every non-root v2 cgroup.
            Controller::Cpuacct | Controller::Freezer => Ok(Backend::V2),
            _ if plan.available.contains(&c) => Ok(Backend::V2),
            _ => Err(format!(
                "the {} controller is not available in {} (see cgroup.controllers there){}",
                c.name(),
                plan.place.base().display(),
                if matches!(plan.place, V2Place::Delegated { .. }) {
                    "; ask for it to be delegated (systemd: Delegate=memory pids cpu)"
                } else {
                    ""
                }
            )),
        }
    }

    /// The controllers whose limits the sandbox's v2 cgroup should carry.
    pub(super) fn v2_controllers(&self, h: &Hierarchies) -> Vec<Controller> {
        Controller::LIMITS
            .into_iter()
            .filter(|c| self.backend(h, *c) == Ok(Backend::V2))
            .collect()
    }
}

/// Where a sandbox's v2 cgroup can go, for this user, or why nowhere.
fn v2_place(v2: &V2Hierarchy, host: &dyn HostView) -> Result<V2Place, String> {
    let parent = v2.point.join(super::under::shared_parent());
    let root_ok = if host.exists(&parent) {
        host.writable(&parent) && host.writable(&v2.point.join("cgroup.subtree_control"))
    } else {
        host.writable(&v2.point)
    };
    if root_ok {
        return Ok(V2Place::Root {
            root: v2.point.clone(),
        });
    }
    let not_delegated = || {
        format!(
            "not root and no delegated cgroup v2 subtree: this process's cgroup is not \
             writable by this user; {HINT_PERMISSION}"
        )
    };
    let Some(mut own) = v2.own.clone() else {
        return Err(not_delegated());
    };
    // A supervisor that moved itself into a leaf (see `Cgroup::create`) keeps
    // using the delegated cgroup above that leaf.
    if own
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with(SUPERVISOR_PREFIX))
    {
        if let Some(up) = own.parent() {
            own = up.to_path_buf();
        }
    }
    if own == v2.point {
        return Err(not_delegated());
    }
    let delegated = host.writable(&own)
        && host.writable(&own.join("cgroup.procs"))
        && host.writable(&own.join("cgroup.subtree_control"));
    if delegated {
        Ok(V2Place::Delegated { own })
    } else {
        Err(not_delegated())
    }
}

/// What this host and this user can do, as `probe` reports it, from a plan.
pub(super) fn support(h: &Hierarchies, plan: &Plan) -> Support {
    let mut reasons: Vec<String> = Vec::new();
    // v1 hierarchies out of reach are named together in one reason.
    let mut denied_v1: Vec<String> = Vec::new();
    let mut check = |c: Controller| match plan.backend(h, c) {
        Ok(_) => true,
        Err(why) => {
            if let Some(v1) = h.v1.iter().find(|v| v.controllers.contains(&c)) {
                let point = v1.point.display().to_string();
                if !denied_v1.contains(&point) {
                    denied_v1.push(point);
                }
            } else if !why.is_empty() && !reasons.contains(&why) {
                reasons.push(why);
            }
            false
        }
    };
    let memory = check(Controller::Memory);
    let pids = check(Controller::Pids);
    let cpu = check(Controller::Cpu);
    let kill = plan.v2.is_some()
        || matches!(plan.backend(h, Controller::Freezer), Ok(Backend::V1(_)))
        || pids;
    if !denied_v1.is_empty() {
        reasons.insert(
            0,
            format!(
                "the cgroup v1 hierarchies {} are not writable by this user; {HINT_V1}",
                denied_v1.join(", ")
            ),
        );
    }
    if plan.layout == Layout::None {
        reasons.push("no cgroup file system is mounted (see /proc/self/mountinfo)".into());
    }
    Support {
        layout: plan.layout,
        memory,
        pids,
        cpu,
        kill,
        why_not: (!reasons.is_empty()).then(|| reasons.join("; ")),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use std::collections::{HashMap, HashSet};

    use super::super::discover::tests::{
        v1_index, HYBRID_CGROUP, HYBRID_MOUNTINFO, USER_SCOPE, V2_MOUNTINFO,
    };
    use super::*;

    #[derive(Default)]
    struct FakeHost {
        writable: HashSet<PathBuf>,
        files: HashMap<PathBuf, String>,
    }

    impl FakeHost {
        fn writable(mut self, paths: &[&str]) -> Self {
            self.writable.extend(paths.iter().map(PathBuf::from));
            self
        }
        fn file(mut self, path: &str, text: &str) -> Self {
            self.files.insert(PathBuf::from(path), text.to_owned());
            self
        }
    }

    impl HostView for FakeHost {
        fn writable(&self, path: &Path) -> bool {
            self.writable.contains(path)
        }
        fn exists(&self, path: &Path) -> bool {
            self.writable.contains(path) || self.files.contains_key(path)
        }
        fn read(&self, path: &Path) -> Option<String> {
            self.files.get(path).cloned()
        }
    }

    #[test]
    fn root_on_a_hybrid_host_gets_every_limit_from_v1_and_a_v2_group_to_kill() {
        let h = Hierarchies::parse(HYBRID_MOUNTINFO, HYBRID_CGROUP);
        let host = FakeHost::default()
            .writable(&[
                "/sys/fs/cgroup/cpu",
                "/sys/fs/cgroup/cpuacct",
                "/sys/fs/cgroup/memory",
                "/sys/fs/cgroup/freezer",
                "/sys/fs/cgroup/pids",
                "/sys/fs/cgroup/unified",
            ])
            .file("/sys/fs/cgroup/unified/cgroup.controllers", "hugetlb\n");
        let plan = Plan::new(&h, &host);
        let memory = v1_index(&h, "/sys/fs/cgroup/memory");
        assert_eq!(
            plan.backend(&h, Controller::Memory),
            Ok(Backend::V1(memory))
        );
        assert!(matches!(
            plan.backend(&h, Controller::Freezer),
            Ok(Backend::V1(_))
        ));
        assert_eq!(
            plan.v2.as_ref().map(|v| &v.place),
            Some(&V2Place::Root {
                root: PathBuf::from("/sys/fs/cgroup/unified")
            })
        );
        // No limit lands on the controller-less v2 mount.
        assert!(plan.v2_controllers(&h).is_empty());
        let s = support(&h, &plan);
        assert!(s.memory && s.pids && s.cpu && s.kill, "{s:?}");
        assert_eq!(s.why_not, None);
    }

    #[test]
    fn an_unprivileged_user_on_a_hybrid_host_is_told_why_and_what_to_do() {
        let h = Hierarchies::parse(HYBRID_MOUNTINFO, HYBRID_CGROUP);
        let s = support(&h, &Plan::new(&h, &FakeHost::default()));
        assert_eq!(s.layout, Layout::Hybrid);
        assert!(!s.memory && !s.pids && !s.cpu && !s.kill, "{s:?}");
        let why = s.why_not.unwrap();
        assert!(why.contains("/sys/fs/cgroup/memory"), "{why}");
        assert!(why.contains("Delegate=yes"), "{why}");
    }

    #[test]
    fn root_on_a_v2_host_enables_controllers_under_the_hierarchy_root() {
        let h = Hierarchies::parse(V2_MOUNTINFO, "0::/user.slice/session-2.scope\n");
        assert_eq!(h.layout(), Layout::V2);
        let host = FakeHost::default().writable(&["/sys/fs/cgroup"]).file(
            "/sys/fs/cgroup/cgroup.controllers",
            "cpuset cpu io memory hugetlb pids rdma misc\n",
        );
        let plan = Plan::new(&h, &host);
        assert_eq!(
            plan.v2.as_ref().map(|v| &v.place),
            Some(&V2Place::Root {
                root: PathBuf::from("/sys/fs/cgroup")
            })
        );
        assert_eq!(
            plan.v2_controllers(&h),
            vec![Controller::Memory, Controller::Pids, Controller::Cpu]
        );
        let s = support(&h, &plan);
        assert!(s.memory && s.pids && s.cpu && s.kill && s.why_not.is_none());
    }

    #[test]
    fn a_rootless_user_with_a_delegated_scope_creates_below_it() {
        let h = Hierarchies::parse(V2_MOUNTINFO, &format!("0::{USER_SCOPE}\n"));
        let own = format!("/sys/fs/cgroup{USER_SCOPE}");
        let host = FakeHost::default()
            .writable(&[
                &own,
                &format!("{own}/cgroup.procs"),
                &format!("{own}/cgroup.subtree_control"),
            ])
            .file(&format!("{own}/cgroup.controllers"), "cpu memory pids\n");
        let plan = Plan::new(&h, &host);
        assert_eq!(
            plan.v2.as_ref().map(|v| &v.place),
            Some(&V2Place::Delegated {
                own: PathBuf::from(&own)
            })
        );
        assert!(support(&h, &plan).memory);
    }

    #[test]
    fn a_supervisor_already_in_its_leaf_keeps_using_the_delegated_cgroup_above() {
        let leaf = format!("{USER_SCOPE}/{SUPERVISOR_PREFIX}42");
        let h = Hierarchies::parse(V2_MOUNTINFO, &format!("0::{leaf}\n"));
        let own = format!("/sys/fs/cgroup{USER_SCOPE}");
        let host = FakeHost::default().writable(&[
            &own,
            &format!("{own}/cgroup.procs"),
            &format!("{own}/cgroup.subtree_control"),
        ]);
        let plan = Plan::new(&h, &host);
        assert_eq!(
            plan.v2.map(|v| v.place),
            Some(V2Place::Delegated {
                own: PathBuf::from(own)
            })
        );
    }

    #[test]
    fn a_controller_missing_from_the_delegation_is_reported_with_the_fix() {
        let h = Hierarchies::parse(V2_MOUNTINFO, &format!("0::{USER_SCOPE}\n"));
        let own = format!("/sys/fs/cgroup{USER_SCOPE}");
        let host = FakeHost::default()
            .writable(&[
                &own,
                &format!("{own}/cgroup.procs"),
                &format!("{own}/cgroup.subtree_control"),
            ])
            .file(&format!("{own}/cgroup.controllers"), "memory pids\n");
        let s = support(&h, &Plan::new(&h, &host));
        assert!(s.memory && s.pids && !s.cpu);
        assert!(s.why_not.unwrap().contains("Delegate="));
    }

    #[test]
    fn a_rootless_user_without_delegation_gets_no_cgroup() {
        let h = Hierarchies::parse(
            V2_MOUNTINFO,
            "0::/user.slice/user-1000.slice/session-3.scope\n",
        );
        let s = support(&h, &Plan::new(&h, &FakeHost::default()));
        assert!(!s.memory && !s.pids && !s.cpu && !s.kill);
        assert!(s
            .why_not
            .unwrap()
            .contains("not root and no delegated cgroup v2 subtree"));
    }
}
