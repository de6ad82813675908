//! A container's life as kubelet reads and steers it through the CRI,
//! beyond running: the exit statuses and reasons it shows (and restarts
//! by), StopContainer's grace period, log rotation (ReopenContainerLog),
//! stats sampled over time, and what the pod becomes when the process the
//! runtime handed containerd is killed on the node (for warden the
//! container's supervisor). Each property with `runc` (the control) and
//! with `warden`.

use crate::common::cri::{node, Handler, Node, Spec};
use crate::common::cri_api as api;
use crate::common::text;
use crate::suite::cri::{info_pid, stats, tree};
use std::time::{Duration, Instant};

crate::suite::cri::both!(
    an_exited_container_shows_its_exit_code_and_kubelets_reason,
    stop_container_sends_term_first_and_kills_once_the_grace_period_is_over,
    reopen_container_log_moves_the_output_to_a_new_file_after_rotation,
    container_stats_sampled_over_time_count_cpu_within_the_containers_quota,
    a_container_whose_task_process_is_killed_is_exited_and_leaves_no_process,
    a_pod_whose_sandbox_task_is_killed_is_not_ready_and_removes_cleanly,
);

/// The host PID containerd holds for `container`'s task.
fn task_pid(node: &Node, container: &str) -> i32 {
    let req = api::ContainerStatusRequest {
        container_id: container.into(),
        verbose: true,
    };
    let info = node
        .call(|mut cl| async move { cl.container_status(req).await })
        .unwrap_or_else(|e| panic!("ContainerStatus: {e}"))
        .info;
    info_pid(&info)
}

/// Those of `pids` still running (a zombie has ended: it holds nothing
/// but its number until its parent reaps it).
fn alive(pids: &[i32]) -> Vec<i32> {
    pids.iter()
        .copied()
        .filter(|p| {
            std::fs::read_to_string(format!("/proc/{p}/stat")).is_ok_and(|s| {
                s.rsplit_once(')')
                    .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z'))
            })
        })
        .collect()
}

/// Wait until none of `pids` is alive; those still alive after `within`.
fn wait_gone(pids: &[i32], within: Duration) -> Vec<i32> {
    let deadline = Instant::now() + within;
    loop {
        let left = alive(pids);
        if left.is_empty() || Instant::now() > deadline {
            return left;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn an_exited_container_shows_its_exit_code_and_kubelets_reason(h: Handler) {
    let Some(node) = node() else { return };
    let mut pod = node.run_pod(h, &[]);
    // kubelet restarts by these: `Completed` for 0, `Error` otherwise.
    let done = pod.start(Spec {
        name: "done",
        args: &["true"],
        ..Default::default()
    });
    let failed = pod.start(Spec {
        name: "failed",
        args: &["sh", "-c", "echo failing >&2; exit 3"],
        ..Default::default()
    });
    let s = pod.wait_exited(&done, Duration::from_secs(30));
    assert_eq!((s.exit_code, s.reason.as_str()), (0, "Completed"), "{s:?}");
    let s = pod.wait_exited(&failed, Duration::from_secs(30));
    assert_eq!((s.exit_code, s.reason.as_str()), (3, "Error"), "{s:?}");
    assert!(s.finished_at > 0, "{s:?}");
    pod.remove();
}

fn stop(node: &Node, container: &str, grace: i64) {
    let req = api::StopContainerRequest {
        container_id: container.into(),
        timeout: grace,
    };
    node.call(|mut cl| async move { cl.stop_container(req).await })
        .unwrap_or_else(|e| panic!("StopContainer: {e}\n{}", node.tail()));
}

fn stop_container_sends_term_first_and_kills_once_the_grace_period_is_over(h: Handler) {
    let Some(node) = node() else { return };
    let mut pod = node.run_pod(h, &[]);
    // One that ends on TERM with a code of its own: the TERM reached it.
    let polite = pod.start(Spec {
        name: "polite",
        args: &[
            "sh",
            "-c",
            "trap 'exit 7' TERM; echo ready; while true; do sleep 0.1; done",
        ],
        ..Default::default()
    });
    // One that ignores TERM (and so do its children): only the KILL after
    // the grace period ends it.
    let stubborn = pod.start(Spec {
        name: "stubborn",
        args: &["sh", "-c", "trap '' TERM; sleep 600 & wait"],
        ..Default::default()
    });
    std::thread::sleep(Duration::from_millis(500));
    let t = Instant::now();
    stop(&node, &polite, 30);
    let took = t.elapsed();
    let s = pod.status(&polite);
    assert_eq!(
        s.state,
        api::ContainerState::ContainerExited as i32,
        "{s:?}"
    );
    assert_eq!(s.exit_code, 7, "the TERM did not reach it: {s:?}");
    assert!(took < Duration::from_secs(10), "TERM took {took:?}");
    let pids = tree(task_pid(&node, &stubborn));
    let t = Instant::now();
    stop(&node, &stubborn, 2);
    let took = t.elapsed();
    let s = pod.status(&stubborn);
    assert_eq!(s.exit_code, 137, "{s:?}");
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(15),
        "killed after {took:?}, not after the grace period of 2 s"
    );
    assert_eq!(wait_gone(&pids, Duration::from_secs(5)), Vec::<i32>::new());
    pod.remove();
}

/// Lines of `path` once it has at least `n` (within 20 s).
fn lines_of(path: &std::path::Path, n: usize) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let log = std::fs::read_to_string(path).unwrap_or_default();
        let lines: Vec<String> = log.lines().map(str::to_string).collect();
        if lines.len() >= n || Instant::now() > deadline {
            return lines;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn reopen_container_log_moves_the_output_to_a_new_file_after_rotation(h: Handler) {
    let Some(node) = node() else { return };
    let mut pod = node.run_pod(h, &[]);
    let c = pod.start(Spec {
        name: "ticker",
        args: &[
            "sh",
            "-c",
            "i=0; while true; do i=$((i+1)); echo tick $i; sleep 0.1; done",
        ],
        ..Default::default()
    });
    // kubelet rotates a log as logrotate would: rename, then ask the
    // runtime to reopen it.
    let log = pod.logs.join("ticker/0.log");
    let before = lines_of(&log, 3);
    assert!(before.len() >= 3, "{before:?}");
    let rotated = pod.logs.join("ticker/0.log.20261129-000000");
    std::fs::rename(&log, &rotated).unwrap();
    let req = api::ReopenContainerLogRequest {
        container_id: c.clone(),
    };
    node.call(|mut cl| async move { cl.reopen_container_log(req).await })
        .unwrap_or_else(|e| panic!("ReopenContainerLog: {e}\n{}", node.tail()));
    let after = lines_of(&log, 3);
    assert!(after.len() >= 3, "nothing in the new log: {after:?}");
    let tick = |l: &str| -> u64 {
        l.rsplit(' ')
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("not a tick: {l:?}"))
    };
    let old = std::fs::read_to_string(&rotated).unwrap();
    let last_old = old.lines().map(tick).max().unwrap();
    let first_new = after.iter().map(|l| tick(l)).min().unwrap();
    // The new file goes on where the rotated one stopped.
    assert!(first_new > last_old, "{last_old} then {first_new}");
    pod.remove();
}

fn container_stats_sampled_over_time_count_cpu_within_the_containers_quota(h: Handler) {
    let Some(node) = node() else { return };
    let mut pod = node.run_pod(h, &[]);
    // A spinning shell under the CRI's quota of half a core (`Spec`'s).
    let c = pod.start(Spec {
        name: "spin",
        args: &["sh", "-c", "while :; do :; done"],
        ..Default::default()
    });
    let sample = || {
        let s = stats(&node, &c);
        let cpu = s.cpu.unwrap_or_default();
        (
            cpu.timestamp,
            cpu.usage_core_nano_seconds.map_or(0, |v| v.value),
        )
    };
    std::thread::sleep(Duration::from_secs(1));
    let (t0, u0) = sample();
    // containerd samples every second (`stats_collect_period`): further
    // apart than that, each answer is new.
    std::thread::sleep(Duration::from_secs(4));
    let (t1, u1) = sample();
    assert!(
        t1 > t0 && u1 > u0,
        "stats did not move: {t0}/{u0} then {t1}/{u1}"
    );
    // At most the quota (with room for the sampling): the container's
    // own time, not the node's. No lower bound: a busy node may give the
    // spinner less than its quota.
    let cores = (u1 - u0) as f64 / (t1 - t0) as f64;
    assert!(cores < 0.75, "{cores:.2} cores used under a quota of 0.5");
    // kubelet's summary asks for the pod's containers at once.
    let req = api::ListContainerStatsRequest {
        filter: Some(api::ContainerStatsFilter {
            pod_sandbox_id: pod.id.clone(),
            ..Default::default()
        }),
    };
    let list = node
        .call(|mut cl| async move { cl.list_container_stats(req).await })
        .unwrap_or_else(|e| panic!("ListContainerStats: {e}"))
        .stats;
    let ids: Vec<_> = list
        .iter()
        .filter_map(|s| s.attributes.as_ref().map(|a| a.id.clone()))
        .collect();
    assert_eq!(ids, std::slice::from_ref(&c), "{list:?}");
    pod.remove();
}

fn a_container_whose_task_process_is_killed_is_exited_and_leaves_no_process(h: Handler) {
    let Some(node) = node() else { return };
    let mut pod = node.run_pod(h, &[]);
    let c = pod.start(Spec {
        name: "main",
        args: &["sh", "-c", "sleep 600 & sleep 600"],
        ..Default::default()
    });
    let other = pod.start(Spec {
        name: "other",
        args: &["sleep", "600"],
        ..Default::default()
    });
    // runc: the container's first process; warden: its supervisor, which
    // holds the sandbox. Killed from the node, as the OOM killer or an
    // operator's mistake would.
    let pid = task_pid(&node, &c);
    // runc: `sh` runs the last `sleep` in its place, so two processes.
    let pids = tree(pid);
    assert!(pids.len() >= 2, "{pids:?}");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let s = pod.wait_exited(&c, Duration::from_secs(30));
    assert_eq!((s.exit_code, s.reason.as_str()), (137, "Error"), "{s:?}");
    // The whole container goes with it (for warden, the sandbox with its
    // supervisor), nothing orphaned on the node.
    let left = wait_gone(&pids, Duration::from_secs(10));
    assert!(left.is_empty(), "processes left: {left:?}");
    // The pod's other container runs on.
    let r = pod.exec_sync(&other, &["echo", "still"]);
    assert_eq!(text(&r.stdout), "still\n", "{r:?}");
    pod.remove();
}

fn a_pod_whose_sandbox_task_is_killed_is_not_ready_and_removes_cleanly(h: Handler) {
    let Some(node) = node() else { return };
    let mut pod = node.run_pod(h, &[]);
    let c = pod.start(Spec {
        name: "main",
        args: &["sleep", "600"],
        ..Default::default()
    });
    let sandbox_pid = info_pid(&pod.sandbox_status().info);
    let mut pids = tree(sandbox_pid);
    pids.extend(tree(task_pid(&node, &c)));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(sandbox_pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    // kubelet sees the pod not ready and makes it anew.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let st = pod.sandbox_status().status.unwrap();
        if st.state == api::PodSandboxState::SandboxNotready as i32 {
            break;
        }
        assert!(Instant::now() < deadline, "still ready: {st:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
    pod.remove();
    let left = wait_gone(&pids, Duration::from_secs(10));
    assert!(left.is_empty(), "processes left: {left:?}");
    if h == Handler::Warden {
        let left: Vec<_> = std::fs::read_dir(node.warden_root().join("k8s.io/sandboxes"))
            .map(|d| d.flatten().map(|e| e.file_name()).collect())
            .unwrap_or_default();
        let mine: Vec<_> = left
            .iter()
            .filter(|s| {
                [&pod.id, &c].iter().any(|id| {
                    s.to_string_lossy() == warden_oci::container::sandbox_name(id.as_str())
                })
            })
            .collect();
        assert!(mine.is_empty(), "warden sandboxes left: {mine:?}");
    }
}
