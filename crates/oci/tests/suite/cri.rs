//! Pods through containerd's CRI, as kubelet runs them: every property is
//! proved twice, with the `runc` handler (the control: the harness tests
//! the CRI, not warden's assumptions) and with `warden` (warden-oci under
//! the runc shim). The node is `common::cri`; the streams are in
//! `cri_stream.rs`.

use crate::common::cri::{self, node, Handler, Node, Pod, Spec};
use crate::common::cri_api as api;
use crate::common::text;
use std::time::{Duration, Instant};

/// Each property as a function of the handler, run once per handler.
macro_rules! both {
    ($($name:ident),* $(,)?) => {
        mod runc {
            $( #[test] fn $name() { super::$name(super::Handler::Runc) } )*
        }
        mod warden {
            $( #[test] fn $name() { super::$name(super::Handler::Warden) } )*
        }
    };
}
pub(crate) use both;

both!(
    a_pod_runs_a_container_and_exec_sync_gives_its_output_and_exit_code,
    two_containers_of_a_pod_reach_each_other_on_localhost,
    a_pods_containers_never_share_another_pods_localhost,
    container_logs_are_in_the_cri_format_where_kubelet_reads_them,
    container_stats_report_memory_and_cpu,
    a_container_over_its_memory_limit_is_oom_killed_with_exit_137,
    a_container_paused_through_containerd_stops_running_until_resumed,
    an_update_of_resources_is_applied_or_refused_with_its_reason,
    stopping_and_removing_a_pod_leaves_no_process_mount_cgroup_netns_or_veth,
);

fn a_pod_runs_a_container_and_exec_sync_gives_its_output_and_exit_code(h: Handler) {
    let Some(node) = node() else { return };
    let mut pod = node.run_pod(h, &[]);
    let c = pod.start(Spec {
        name: "main",
        args: &["sh", "-c", "echo started; exec sleep 600"],
        ..Default::default()
    });
    let r = pod.exec_sync(&c, &["sh", "-c", "echo out; echo err >&2; exit 3"]);
    assert_eq!(text(&r.stdout), "out\n", "stderr: {}", text(&r.stderr));
    assert_eq!(text(&r.stderr), "err\n");
    assert_eq!(r.exit_code, 3);
    pod.remove();
}

/// ExecSync `cmd` until its output contains `want` (a server may still be
/// starting); its last output.
fn exec_until(pod: &Pod<'_>, c: &str, cmd: &[&str], want: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let r = pod.exec_sync(c, cmd);
        let out = text(&r.stdout);
        if out.contains(want) || Instant::now() > deadline {
            return format!("{out}{}", text(&r.stderr));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn two_containers_of_a_pod_reach_each_other_on_localhost(h: Handler) {
    let Some(node) = node() else { return };
    let mut pod = node.run_pod(h, &[]);
    pod.start(Spec {
        name: "server",
        args: &[
            "sh",
            "-c",
            "while true; do echo served-by-the-server | nc -l -p 8080; done",
        ],
        ..Default::default()
    });
    let client = pod.start(Spec {
        name: "client",
        args: &["sleep", "600"],
        ..Default::default()
    });
    let out = exec_until(
        &pod,
        &client,
        &["sh", "-c", "nc -w 2 127.0.0.1 8080 </dev/null"],
        "served-by-the-server",
    );
    assert!(out.contains("served-by-the-server"), "{out}");
    pod.remove();
}

fn a_pods_containers_never_share_another_pods_localhost(h: Handler) {
    let Some(node) = node() else { return };
    let mut a = node.run_pod(h, &[]);
    let server = a.start(Spec {
        name: "server",
        args: &[
            "sh",
            "-c",
            "while true; do echo served-in-pod-a | nc -l -p 8080; done",
        ],
        ..Default::default()
    });
    let out = exec_until(
        &a,
        &server,
        &["sh", "-c", "nc -w 2 127.0.0.1 8080 </dev/null"],
        "served-in-pod-a",
    );
    assert!(out.contains("served-in-pod-a"), "{out}");
    // More containers of pod A: more records a wrong match could pick.
    for name in ["idle1", "idle2"] {
        a.start(Spec {
            name,
            args: &["sleep", "600"],
            ..Default::default()
        });
    }
    // Another pod with the same (no) annotations: each of its containers
    // is given the CRI's path for its own pod, which must never lead into
    // pod A's namespace.
    let mut b = node.run_pod(h, &[]);
    for name in ["one", "two", "three"] {
        let c = b.start(Spec {
            name,
            args: &["sleep", "600"],
            ..Default::default()
        });
        let r = b.exec_sync(&c, &["sh", "-c", "nc -w 2 127.0.0.1 8080 </dev/null"]);
        assert!(
            !text(&r.stdout).contains("served-in-pod-a"),
            "container {name} of pod B reached pod A's localhost"
        );
    }
    b.remove();
    a.remove();
}

fn container_logs_are_in_the_cri_format_where_kubelet_reads_them(h: Handler) {
    let Some(node) = node() else { return };
    let mut pod = node.run_pod(h, &[]);
    let c = pod.start(Spec {
        name: "talker",
        args: &[
            "sh",
            "-c",
            "echo to-stdout; echo to-stderr >&2; exec sleep 600",
        ],
        ..Default::default()
    });
    // kubelet reads <log_directory>/<log_path>; containerd writes
    // "<RFC 3339 nano time> <stream> <F|P> <line>".
    let path = pod.logs.join("talker/0.log");
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut log = String::new();
    while Instant::now() < deadline {
        log = std::fs::read_to_string(&path).unwrap_or_default();
        if log.lines().count() >= 2 {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut seen = Vec::new();
    for line in log.lines() {
        let f: Vec<&str> = line.splitn(4, ' ').collect();
        assert_eq!(f.len(), 4, "not a CRI log line: {line:?}");
        assert!(
            humantime::parse_rfc3339(f[0]).is_ok(),
            "not an RFC 3339 time: {line:?}"
        );
        assert_eq!(f[2], "F", "{line:?}");
        seen.push((f[1].to_string(), f[3].to_string()));
    }
    assert!(
        seen.contains(&("stdout".into(), "to-stdout".into())),
        "{log:?}"
    );
    assert!(
        seen.contains(&("stderr".into(), "to-stderr".into())),
        "{log:?}"
    );
    pod.status(&c);
    pod.remove();
}

pub(crate) fn stats(node: &Node, c: &str) -> api::ContainerStats {
    let req = api::ContainerStatsRequest {
        container_id: c.into(),
    };
    node.call(|mut cl| async move { cl.container_stats(req).await })
        .unwrap_or_else(|e| panic!("ContainerStats: {e}\n{}", node.tail()))
        .stats
        .unwrap()
}

fn container_stats_report_memory_and_cpu(h: Handler) {
    let Some(node) = node() else { return };
    let mut pod = node.run_pod(h, &[]);
    let c = pod.start(Spec {
        name: "busy",
        // Some CPU time and some memory of its own, then idle.
        args: &[
            "sh",
            "-c",
            "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done; head -c 8000000 /dev/zero | tail >/dev/null & exec sleep 600",
        ],
        memory: Some(256 << 20),
        ..Default::default()
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let s = stats(&node, &c);
        let cpu = s
            .cpu
            .as_ref()
            .and_then(|c| c.usage_core_nano_seconds.as_ref())
            .map_or(0, |v| v.value);
        let mem = s
            .memory
            .as_ref()
            .and_then(|m| m.working_set_bytes.as_ref())
            .map_or(0, |v| v.value);
        if cpu > 0 && mem > 0 {
            // The container's, not the node's: well under the limit.
            assert!(mem < 256 << 20, "working set {mem} is not the container's");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no memory or CPU in the stats: {s:?}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    pod.remove();
}

fn a_container_over_its_memory_limit_is_oom_killed_with_exit_137(h: Handler) {
    let Some(node) = node() else { return };
    let mut pod = node.run_pod(h, &[]);
    // `tail` of an endless line keeps all of it in memory.
    let c = pod.start(Spec {
        name: "hog",
        args: &["tail", "/dev/zero"],
        memory: Some(64 << 20),
        ..Default::default()
    });
    let s = pod.wait_exited(&c, Duration::from_secs(60));
    assert_eq!(s.exit_code, 137, "{s:?}");
    assert_eq!(s.reason, "OOMKilled", "{s:?}");
    pod.remove();
}

/// Whether the container's counter still moves within a second.
fn counting(pod: &Pod<'_>, c: &str) -> bool {
    let read = || {
        let r = pod.node.ctr(&[
            "tasks",
            "exec",
            "--exec-id",
            &format!("r{}", rand_id()),
            c,
            "cat",
            "/tmp/n",
        ]);
        text(&r.stdout).trim().parse::<u64>().unwrap_or(0)
    };
    let a = read();
    std::thread::sleep(Duration::from_millis(1200));
    read() != a
}

fn rand_id() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

fn a_container_paused_through_containerd_stops_running_until_resumed(h: Handler) {
    let Some(node) = node() else { return };
    let mut pod = node.run_pod(h, &[]);
    let c = pod.start(Spec {
        name: "counter",
        args: &[
            "sh",
            "-c",
            "i=0; while true; do i=$((i+1)); echo $i >/tmp/n; sleep 0.1; done",
        ],
        ..Default::default()
    });
    // kubelet never pauses (the CRI has no call for it); containerd's task
    // pause is what `ctr task pause` and the containerd API give.
    std::thread::sleep(Duration::from_millis(500));
    assert!(counting(&pod, &c), "the counter never ran");
    let o = node.ctr(&["tasks", "pause", &c]);
    assert!(
        o.status.success(),
        "pause: {}{}",
        text(&o.stderr),
        node.tail()
    );
    let o = node.ctr(&["tasks", "ls"]);
    let line = text(&o.stdout)
        .lines()
        .find(|l| l.starts_with(&c))
        .unwrap_or_default()
        .to_string();
    assert!(line.contains("PAUSED"), "{line}");
    let o = node.ctr(&["tasks", "resume", &c]);
    assert!(
        o.status.success(),
        "resume: {}{}",
        text(&o.stderr),
        node.tail()
    );
    assert!(
        counting(&pod, &c),
        "the counter did not run again after resume"
    );
    pod.remove();
}

/// Host PIDs of `pid` and its descendants.
pub(crate) fn tree(pid: i32) -> Vec<i32> {
    let mut all = vec![pid];
    let mut i = 0;
    while i < all.len() {
        let parent = all[i];
        if let Ok(c) = std::fs::read_to_string(format!("/proc/{parent}/task/{parent}/children")) {
            all.extend(c.split_whitespace().filter_map(|p| p.parse::<i32>().ok()));
        }
        i += 1;
    }
    all
}

/// The PID the runtime gave containerd for a container or sandbox (its
/// task's), from the verbose status.
pub(crate) fn info_pid(info: &std::collections::HashMap<String, String>) -> i32 {
    let v: serde_json::Value = serde_json::from_str(info.get("info").unwrap()).unwrap();
    v["pid"].as_i64().unwrap() as i32
}

fn bridge_ports(node: &Node) -> Vec<String> {
    std::fs::read_dir(format!("/sys/class/net/{}/brif", node.bridge))
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// The host side of the veth whose other side is `eth0` in the network
/// namespace pinned at `netns` (other pods' veths come and go meanwhile).
fn pod_veth(netns: &str) -> Option<String> {
    let o = std::process::Command::new("nsenter")
        .arg(format!("--net={netns}"))
        .args(["ip", "-o", "link", "show", "eth0"])
        .output()
        .ok()?;
    let line = text(&o.stdout);
    let index = line
        .split("@if")
        .nth(1)?
        .split(':')
        .next()?
        .trim()
        .to_string();
    std::fs::read_dir("/sys/class/net")
        .ok()?
        .flatten()
        .find_map(|e| {
            let i = std::fs::read_to_string(e.path().join("ifindex")).ok()?;
            (i.trim() == index).then(|| e.file_name().to_string_lossy().into_owned())
        })
}

fn stopping_and_removing_a_pod_leaves_no_process_mount_cgroup_netns_or_veth(h: Handler) {
    let Some(node) = node() else { return };
    let mut pod = node.run_pod(h, &[]);
    let c = pod.start(Spec {
        name: "main",
        args: &["sh", "-c", "sleep 600 & sleep 600"],
        ..Default::default()
    });
    let sandbox_info = pod.sandbox_status().info;
    let sandbox_pid = info_pid(&sandbox_info);
    // The pod's network namespace as containerd pinned it (a file under
    // its state directory, with netns_mounts_under_state_dir).
    let spec: serde_json::Value = serde_json::from_str(&sandbox_info["info"]).unwrap();
    let netns = spec["runtimeSpec"]["linux"]["namespaces"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["type"] == "network")
        .and_then(|n| n["path"].as_str())
        .unwrap()
        .to_string();
    let req = api::ContainerStatusRequest {
        container_id: c.clone(),
        verbose: true,
    };
    let info = node
        .call(|mut cl| async move { cl.container_status(req).await })
        .unwrap()
        .info;
    let container_pid = info_pid(&info);
    let mut pids = tree(sandbox_pid);
    pids.extend(tree(container_pid));
    assert!(pids.len() >= 3, "{pids:?}");
    // Every cgroup any of them is in, but the node's own.
    let own = warden_runtime::state::cgroups_of(std::process::id() as i32);
    let mut cgroups: Vec<_> = pids
        .iter()
        .flat_map(|p| warden_runtime::state::cgroups_of(*p))
        .filter(|d| !own.contains(d))
        .collect();
    cgroups.sort();
    cgroups.dedup();
    assert!(!cgroups.is_empty());
    let ports: Vec<String> = pod_veth(&netns).into_iter().collect();
    assert!(
        ports.iter().all(|p| bridge_ports(&node).contains(p)) && !ports.is_empty(),
        "the pod has no veth on the bridge: {ports:?}"
    );
    let ids = [pod.id.clone(), c.clone()];
    assert!(
        cri::mounts_under(node.dir.path()).contains(&netns),
        "the pod's network namespace {netns} is not pinned under the state dir"
    );

    pod.remove();

    let alive: Vec<i32> = pids
        .iter()
        .copied()
        .filter(|p| std::path::Path::new(&format!("/proc/{p}")).exists())
        .collect();
    assert!(alive.is_empty(), "processes left: {alive:?}");
    let mounts: Vec<String> = cri::mounts_under(node.dir.path())
        .into_iter()
        .filter(|m| ids.iter().any(|id| m.contains(id.as_str())) || *m == netns)
        .collect();
    assert!(
        mounts.is_empty(),
        "mounts left: {mounts:?}\n{}",
        std::fs::read_to_string("/proc/self/mountinfo")
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("netns"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    let left: Vec<_> = cgroups.iter().filter(|d| d.exists()).collect();
    // The pod's parent cgroup is kubelet's to remove (it made it); only
    // the containers' own must be gone.
    let left: Vec<_> = left
        .into_iter()
        .filter(|d| !d.ends_with(format!("pod{}", pod.config.metadata.as_ref().unwrap().uid)))
        .collect();
    assert!(left.is_empty(), "cgroups left: {left:?}");
    let veths: Vec<_> = bridge_ports(&node)
        .into_iter()
        .filter(|p| ports.contains(p))
        .collect();
    assert!(veths.is_empty(), "veths left: {veths:?}");
    if h == Handler::Warden {
        let store = node.warden_root().join("k8s.io/sandboxes");
        let sandboxes: Vec<_> = std::fs::read_dir(store)
            .map(|d| d.flatten().map(|e| e.file_name()).collect())
            .unwrap_or_default();
        let mine: Vec<_> = sandboxes
            .iter()
            .filter(|s| {
                ids.iter()
                    .any(|id| s.to_string_lossy() == warden_oci::container::sandbox_name(id))
            })
            .collect();
        assert!(mine.is_empty(), "warden sandboxes left: {mine:?}");
    }
}

fn an_update_of_resources_is_applied_or_refused_with_its_reason(h: Handler) {
    let Some(node) = node() else { return };
    let mut pod = node.run_pod(h, &[]);
    let c = pod.start(Spec {
        name: "main",
        args: &["sleep", "600"],
        memory: Some(256 << 20),
        ..Default::default()
    });
    let req = api::UpdateContainerResourcesRequest {
        container_id: c.clone(),
        linux: Some(api::LinuxContainerResources {
            memory_limit_in_bytes: 128 << 20,
            cpu_period: 100_000,
            cpu_quota: 50_000,
            cpu_shares: 512,
            ..Default::default()
        }),
        ..Default::default()
    };
    let r = node.call(|mut cl| async move { cl.update_container_resources(req).await });
    match h {
        Handler::Runc => {
            r.unwrap_or_else(|e| panic!("UpdateContainerResources: {e}"));
        }
        // A sandbox's limits are fixed when it is created: kubelet gets
        // the reason, and the container runs on as it was.
        Handler::Warden => {
            let e = r.expect_err("warden-oci applied an update it cannot make");
            assert!(
                e.message().contains("limits are fixed when it is created"),
                "{e}"
            );
        }
    }
    let r = pod.exec_sync(&c, &["true"]);
    assert_eq!(r.exit_code, 0, "{r:?}");
    pod.remove();
}
