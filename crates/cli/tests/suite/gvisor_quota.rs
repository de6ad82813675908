//! A token's gVisor sandboxes against its memory quota, through a real
//! daemon and real runsc: each counts at what its cgroup may hold (its
//! memory and runsc's sentry and gofer beside it,
//! `warden_jail::gvisor::cgroup_memory`), never at its spec's memory
//! alone, so a quota that admits N process sandboxes admits fewer gVisor
//! ones, and the limits of the cgroups the token's sandboxes run in never
//! add up past its quota. Skipped, with the reason, where runsc cannot run
//! a sandbox here.

use crate::common::daemon::{call_on, curl_available, json, token_with, Daemon};
use crate::common::gvisor::gvisor_available;
use crate::common::*;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A token of `max_memory` in all that may create sandboxes.
fn token(state: &Path, name: &str, max_memory: &str) -> String {
    token_with(
        state,
        name,
        &["sandboxes:read", "sandboxes:write"],
        &["--max-memory", max_memory, "--max-sandboxes", "16"],
    )
}

/// The memory limit of the cgroup whose directory name holds `id`, found
/// under warden's cgroups of the memory controller (v1, or v2's unified
/// tree): `None` until it exists.
fn cgroup_limit(id: &str) -> Option<u64> {
    let roots = [
        PathBuf::from("/sys/fs/cgroup/memory"),
        PathBuf::from("/sys/fs/cgroup"),
    ];
    for root in roots {
        let mut stack = vec![root.clone()];
        while let Some(dir) = stack.pop() {
            for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                let p = e.path();
                if !p.is_dir() {
                    continue;
                }
                if e.file_name().to_string_lossy().contains(id) {
                    for file in ["memory.limit_in_bytes", "memory.max"] {
                        if let Ok(v) = std::fs::read_to_string(p.join(file)) {
                            return v.trim().parse().ok();
                        }
                    }
                }
                // warden's cgroups sit a level or two down.
                if p.components().count() < root.components().count() + 3 {
                    stack.push(p);
                }
            }
        }
    }
    None
}

#[test]
fn a_tokens_gvisor_sandboxes_count_with_runsc_beside_them_and_their_cgroups_stay_within_its_quota()
{
    if !curl_available() {
        return skip("curl is not installed");
    }
    if !gvisor_available() {
        return;
    }
    let state = TempDir::new("gvisor-quota");
    let d = Daemon::start(state.path(), true);
    let quota: u64 = 1 << 30;
    let create = |t: &str, name: &str, isolation: &str, start: bool| {
        let body = format!(
            r#"{{"name":"{name}","start":{start},"spec":{{"isolation":"{isolation}","resources":{{"memory":"256M"}}}}}}"#
        );
        call_on(&d, true, "POST", "/v1/sandboxes", Some(&body), Some(t))
    };
    // Process sandboxes of 256 MiB: four fit a quota of 1 GiB.
    let tp = token(state.path(), "procs", "1G");
    for i in 1..=4 {
        let (s, b) = create(&tp, &format!("p{i}"), "process", false);
        assert_eq!(s, 201, "process sandbox {i}: {b}");
    }
    let (s, b) = create(&tp, "p5", "process", false);
    assert_eq!(s, 429, "{b}");
    // gVisor sandboxes of the same memory take 512 MiB each with runsc:
    // two fit, the third does not, though the three ask 768 MiB.
    let tg = token(state.path(), "gvisors", "1G");
    let mut ids = Vec::new();
    for i in 1..=2 {
        let (s, b) = create(&tg, &format!("g{i}"), "gvisor", true);
        assert_eq!(s, 201, "gVisor sandbox {i}: {b}");
        ids.push(json(&b)["id"].as_str().unwrap().to_string());
    }
    // Each is listed as what isolates it, not as namespaces.
    for id in &ids {
        let (s, b) = call_on(
            &d,
            true,
            "GET",
            &format!("/v1/sandboxes/{id}"),
            None,
            Some(&tg),
        );
        assert_eq!(s, 200, "{b}");
        let backend = json(&b)["backend"].as_str().unwrap_or_default().to_string();
        assert!(backend.contains("gVisor"), "{backend}");
    }
    let (s, b) = create(&tg, "g3", "gvisor", true);
    assert_eq!(s, 429, "a third gVisor sandbox was admitted: {b}");
    assert_eq!(json(&b)["field"], "/spec/resources/memory", "{b}");
    // What the running sandboxes' cgroups may hold, read from the kernel:
    // within the quota altogether.
    let mut limits = Vec::new();
    for id in &ids {
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        let limit = loop {
            if let Some(l) = cgroup_limit(id) {
                break l;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "no cgroup of the running gVisor sandbox {id} was found"
            );
            std::thread::sleep(Duration::from_millis(100));
        };
        limits.push(limit);
    }
    let sum: u64 = limits.iter().sum();
    eprintln!("the gVisor sandboxes' cgroup limits: {limits:?} (quota {quota})");
    assert!(
        sum <= quota,
        "the token's cgroups may hold {sum} bytes, past its quota of {quota}"
    );
    for (id, l) in ids.iter().zip(&limits) {
        // The sandbox's 256 MiB and runsc beside it: what was counted.
        assert!(
            *l > 256 << 20 && *l <= quota / 2,
            "{id}'s cgroup may hold {l} bytes, not what the quota counted"
        );
        let (s, b) = call_on(
            &d,
            false,
            "DELETE",
            &format!("/v1/sandboxes/{id}"),
            None,
            None,
        );
        assert!(s < 300, "{b}");
    }
}
