//! `linux.cgroupsPath`: the sandbox's cgroup is a child of the cgroup the
//! container manager named (kubelet's pod cgroup under containerd's
//! CRI), in each hierarchy of this host, so the node's accounting sees
//! it; a path that would climb out of a hierarchy's root is refused with
//! the reason, and nothing is made. Real containers, their processes'
//! cgroups read from `/proc`.

use crate::common::*;

/// Whether cgroups can be made here (root); prints why not.
fn as_root() -> bool {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("SKIPPED: needs root: the container's cgroups are made under the node's");
        return false;
    }
    true
}

/// A name no other run uses.
fn unique(tag: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!("{tag}-{}-{nanos}", std::process::id())
}

/// The cgroup hierarchies' mount points (v1 ones with a controller, and
/// v2's), from `/proc/self/mountinfo`.
fn hierarchies() -> Vec<std::path::PathBuf> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter_map(|l| {
            let (left, right) = l.split_once(" - ")?;
            let point = left.split(' ').nth(4)?;
            let fs = right.split(' ').next()?;
            matches!(fs, "cgroup" | "cgroup2").then(|| std::path::PathBuf::from(point))
        })
        .collect()
}

/// Removes a test's top cgroup (and anything left below it) in every
/// hierarchy, deepest first.
struct Top(String);

impl Drop for Top {
    fn drop(&mut self) {
        fn rm(dir: &std::path::Path) {
            for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    rm(&e.path());
                }
            }
            let _ = std::fs::remove_dir(dir);
        }
        for h in hierarchies() {
            rm(&h.join(&self.0));
        }
    }
}

/// The cgroup (per hierarchy line of `/proc/PID/cgroup`) of `pid`.
fn cgroups_of(pid: i32) -> Vec<(String, String)> {
    std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let mut p = l.splitn(3, ':');
            let (_, controllers, path) = (p.next()?, p.next()?, p.next()?);
            Some((controllers.to_string(), path.to_string()))
        })
        .collect()
}

/// Create and start a container of `config` as `id`; its processes.
fn started(lab: &Lab, id: &str, config: serde_json::Value) -> Vec<i32> {
    let b = lab.bundle(id, config);
    let o = lab.oci(&["create", "--bundle", b.to_str().unwrap(), id]);
    assert!(o.status.success(), "create: {}", text(&o.stderr));
    let o = lab.oci(&["start", id]);
    assert!(o.status.success(), "start: {}", text(&o.stderr));
    let o = lab.oci(&["ps", "--format", "json", id]);
    let pids: Vec<i32> = serde_json::from_slice(&o.stdout).unwrap();
    assert!(!pids.is_empty(), "ps: {}", text(&o.stdout));
    pids
}

fn stop_and_delete(lab: &Lab, id: &str) {
    let o = lab.oci(&["delete", "--force", id]);
    assert!(o.status.success(), "delete: {}", text(&o.stderr));
}

/// The container's processes sit, in every limiting hierarchy, in a
/// cgroup below `under` (as `/proc/PID/cgroup` names it).
fn assert_below(pids: &[i32], under: &str) {
    for pid in pids {
        let all = cgroups_of(*pid);
        for want in ["memory", "pids"] {
            let (_, path) = all
                .iter()
                .find(|(c, _)| c.split(',').any(|c| c == want))
                .unwrap_or_else(|| panic!("no {want} cgroup for {pid}: {all:?}"));
            assert!(
                path.starts_with(&format!("{under}/warden-")),
                "process {pid}'s {want} cgroup {path} is not a sandbox's cgroup below {under}"
            );
        }
    }
}

#[test]
fn a_containers_processes_are_in_a_cgroup_below_the_cgroups_path_it_was_given() {
    if !can_run() || !as_root() {
        return;
    }
    let top = Top(unique("wt-kubepods"));
    // The pod's cgroup exists (kubelet makes it); the container's level
    // is the runtime's to make, and to remove again.
    for h in hierarchies() {
        let _ = std::fs::create_dir_all(h.join(&top.0).join("burstable/pod1"));
    }
    let path = format!("/{}/burstable/pod1/ctr1", top.0);
    let lab = Lab::new();
    let mut config = config(&["sleep", "600"]);
    config["linux"]["cgroupsPath"] = serde_json::json!(path);
    let pids = started(&lab, "c1", config);
    assert_below(&pids, &path);
    stop_and_delete(&lab, "c1");
    for h in hierarchies() {
        let made = h.join(&top.0).join("burstable/pod1/ctr1");
        assert!(!made.exists(), "{} stayed after delete", made.display());
    }
    // The pod's own cgroup is the manager's: left as it was.
    let memory = hierarchies()
        .into_iter()
        .find(|h| h.ends_with("memory"))
        .unwrap_or_default();
    assert!(memory.join(&top.0).join("burstable/pod1").is_dir());
}

/// The sandbox's own cgroups below `under` (its `warden-*` leaf) in every
/// hierarchy that has one.
fn sandbox_dirs(under: &str) -> Vec<std::path::PathBuf> {
    hierarchies()
        .iter()
        .flat_map(|h| std::fs::read_dir(h.join(under.trim_start_matches('/'))).into_iter())
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("warden-"))
        .map(|e| e.path())
        .collect()
}

#[test]
fn a_killed_containers_supervisor_removes_every_cgroup_of_its_sandbox_before_it_exits() {
    if !can_run() || !as_root() {
        return;
    }
    let top = Top(unique("wt-kubepods"));
    for h in hierarchies() {
        let _ = std::fs::create_dir_all(h.join(&top.0).join("pod2"));
    }
    let path = format!("/{}/pod2/ctr2", top.0);
    let lab = Lab::new();
    let mut config = config(&["sleep", "600"]);
    config["linux"]["cgroupsPath"] = serde_json::json!(path);
    started(&lab, "c3", config);
    let state: serde_json::Value =
        serde_json::from_slice(&lab.oci(&["state", "c3"]).stdout).unwrap();
    let sup = state["pid"].as_i64().unwrap() as i32;
    // The supervisor is in its sandbox's v1 memory cgroup, where
    // containerd's shim reads the container's stats and OOM kills.
    let joined: Vec<_> = cgroups_of(sup)
        .into_iter()
        .filter(|(_, p)| p.starts_with(&format!("{path}/warden-")))
        .collect();
    if joined.is_empty() {
        eprintln!("SKIPPED: no v1 hierarchy here for the supervisor to join");
        stop_and_delete(&lab, "c3");
        return;
    }
    assert!(!sandbox_dirs(&path).is_empty());
    // As containerd stops a container: SIGKILL to its process; the shim
    // learns the end when the supervisor (the pid file's process) exits.
    let t0 = std::time::Instant::now();
    let o = lab.oci(&["kill", "c3", "9"]);
    assert!(o.status.success(), "kill: {}", text(&o.stderr));
    let gone = |pid: i32| {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |s| {
            s.rsplit_once(") ").is_some_and(|(_, r)| r.starts_with('Z'))
        })
    };
    let deadline = t0 + std::time::Duration::from_secs(30);
    while !gone(sup) {
        assert!(
            std::time::Instant::now() < deadline,
            "the supervisor stayed"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    eprintln!("kill to the supervisor's exit: {:?}", t0.elapsed());
    // Every directory of the sandbox went with it, the ones the
    // supervisor itself was in too (the kernel refuses to remove a cgroup
    // its remover is in: each cost its removal's whole retry, and stayed
    // for `delete`).
    let left = sandbox_dirs(&path);
    assert!(left.is_empty(), "left at the supervisor's exit: {left:?}");
    stop_and_delete(&lab, "c3");
    drop(top);
}

#[test]
fn a_systemd_cgroups_path_puts_the_container_below_its_slice_and_scope() {
    if !can_run() || !as_root() {
        return;
    }
    let slice = unique("wt").replace('-', "_");
    let top = Top(format!("{slice}.slice"));
    let lab = Lab::new();
    let mut config = config(&["sleep", "600"]);
    config["linux"]["cgroupsPath"] =
        serde_json::json!(format!("{slice}-pod7.slice:cri-containerd:abc"));
    let pids = started(&lab, "c2", config);
    assert_below(
        &pids,
        &format!("/{slice}.slice/{slice}-pod7.slice/cri-containerd-abc.scope"),
    );
    stop_and_delete(&lab, "c2");
    drop(top);
}

#[test]
fn a_cgroups_path_that_climbs_out_of_the_hierarchy_is_refused_and_makes_nothing() {
    if !can_run() || !as_root() {
        return;
    }
    let name = unique("wt-escape");
    let lab = Lab::new();
    for (i, path) in [
        format!("/{name}/../../{name}-out"),
        format!("../{name}-out"),
        format!("/{name}/./x"),
        format!("/{name}/a b"),
        format!("{name}--x.slice:p:n"),
    ]
    .iter()
    .enumerate()
    {
        let id = format!("c{i}");
        let mut config = config(&["sleep", "600"]);
        config["linux"]["cgroupsPath"] = serde_json::json!(path);
        let b = lab.bundle(&id, config);
        let o = lab.oci(&["create", "--bundle", b.to_str().unwrap(), &id]);
        let err = text(&o.stderr);
        assert!(!o.status.success(), "{path} was taken: {err}");
        assert!(err.contains("linux.cgroupsPath"), "{path}: {err}");
        assert!(!lab.oci(&["state", &id]).status.success());
        for h in hierarchies() {
            for made in [h.join(&name), h.join(format!("{name}-out"))] {
                assert!(!made.exists(), "{path} made {}", made.display());
            }
            if let Some(parent) = h.parent() {
                assert!(!parent.join(format!("{name}-out")).exists());
            }
        }
    }
    assert!(lab.left().is_empty(), "left behind: {:?}", lab.left());
}
