//! `warden run`'s promise at its end: when it returns, every process of the
//! sandbox is dead and reaped, its cgroup is gone, and nothing of it is
//! left (no zombie, no cgroup directory, no mount), however the sandbox's
//! processes tried to stay: in the background, double-forked, ignoring
//! SIGTERM, in a session of their own. The supervisor no longer waits for
//! the kernel to unmount the sandbox's tree (a kernel worker does it after
//! the last process is reaped): these tests hold it to the rest.
//!
//! Each test runs in a test process of its own, which makes itself a child
//! subreaper, so that anything of a run that outlived warden (a process or
//! a zombie) would be adopted by it and show up in `waitpid`; no other
//! test's children may be there to be reaped or counted.

use crate::common::*;
use std::path::Path;
use std::time::{Duration, Instant};

fn become_subreaper() {
    // SAFETY: prctl with PR_SET_CHILD_SUBREAPER takes an integer argument
    // and touches no memory of ours.
    let rc = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    assert_eq!(rc, 0, "cannot become a child subreaper");
}

/// Processes this (subreaper) process adopted and zombies it holds: what a
/// run left behind. Reaps what it finds.
fn adopted() -> Vec<i32> {
    let mut found = Vec::new();
    loop {
        let mut status = 0;
        // SAFETY: waitpid writes one int into `status`, which we own.
        let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        if pid <= 0 {
            break;
        }
        found.push(pid);
    }
    // Adopted and still running: children of ours that no `Command` made.
    let me = std::process::id().to_string();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        // "pid (comm) state ppid ...": the comm may hold spaces.
        let after = stat.rsplit_once(')').map(|(_, a)| a).unwrap_or("");
        if after.split_whitespace().nth(1) == Some(me.as_str()) {
            found.push(pid);
        }
    }
    found
}

fn created_cgroup(events_file: &Path) -> Option<String> {
    events(events_file)
        .into_iter()
        .find(|e| e["event"] == "created")
        .and_then(|e| e["cgroup"].as_str().map(str::to_owned))
}

/// Active `struct mount` objects of the kernel (root only).
fn kernel_mounts() -> Option<u64> {
    let slabs = std::fs::read_to_string("/proc/slabinfo").ok()?;
    slabs
        .lines()
        .find(|l| l.starts_with("mnt_cache "))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|n| n.parse().ok())
}

#[test]
fn every_process_a_run_left_behind_is_gone_when_it_returns() {
    if !alone_in_a_process(
        module_path!(),
        "every_process_a_run_left_behind_is_gone_when_it_returns",
    ) {
        return;
    }
    become_subreaper();
    let _ = adopted();
    let marker = unique("stay");
    let dir = TempDir::new("teardown");
    let ev = dir.path().join("ev.jsonl");
    // Each one tries another way to outlive the command.
    let script = format!(
        "(exec -a {marker}-bg sleep 1000) >/dev/null 2>&1 &
         ( (exec -a {marker}-double sleep 1000) >/dev/null 2>&1 & ) &
         (trap '' TERM HUP; exec -a {marker}-noterm sleep 1000) >/dev/null 2>&1 &
         setsid sh -c 'exec -a {marker}-session sleep 1000' >/dev/null 2>&1 &
         sleep 0.3; echo started"
    );
    let out = run_sh(&["--json-events", ev.to_str().unwrap()], &script);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(stdout(&out).contains("started"), "{}", stdout(&out));
    // At once, not after a grace period.
    let left = pids_with_marker(&marker);
    assert!(left.is_empty(), "still alive after run returned: {left:?}");
    let orphans = adopted();
    assert!(orphans.is_empty(), "left to the subreaper: {orphans:?}");
    if let Some(cg) = created_cgroup(&ev) {
        assert!(!Path::new(&cg).exists(), "{cg} is still there");
    }
}

#[test]
fn two_hundred_runs_leave_no_process_cgroup_or_mount_behind() {
    if !alone_in_a_process(
        module_path!(),
        "two_hundred_runs_leave_no_process_cgroup_or_mount_behind",
    ) {
        return;
    }
    become_subreaper();
    let _ = adopted();
    let dir = TempDir::new("teardown-many");
    let before = kernel_mounts();
    let mut cgroups = Vec::new();
    for i in 0..200 {
        let ev = dir.path().join(format!("ev-{i}.jsonl"));
        let out = run_sh(
            &["--json-events", ev.to_str().unwrap()],
            "sleep 1000 & true",
        );
        assert_eq!(code(&out), 0, "run {i}: {}", stderr(&out));
        cgroups.extend(created_cgroup(&ev));
        let _ = std::fs::remove_file(&ev);
    }
    let orphans = adopted();
    assert!(orphans.is_empty(), "left to the subreaper: {orphans:?}");
    let kept: Vec<_> = cgroups.iter().filter(|c| Path::new(c).exists()).collect();
    assert!(kept.is_empty(), "cgroups left: {kept:?}");
    let (Some(before), Some(_)) = (before, kernel_mounts()) else {
        skip("cannot read /proc/slabinfo (root only): the mounts were not counted");
        return;
    };
    // Each sandbox has a few tens of mounts: 200 left behind would be
    // thousands. The kernel's worker unmounts within milliseconds; other
    // sandboxes on the host move the count by a few hundred at most.
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut after = kernel_mounts().unwrap_or(u64::MAX);
    while after > before + 1000 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        after = kernel_mounts().unwrap_or(u64::MAX);
    }
    assert!(
        after <= before + 1000,
        "the kernel holds {after} mounts after 200 runs, {before} before"
    );
}
