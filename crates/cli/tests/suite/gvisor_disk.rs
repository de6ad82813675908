//! A gVisor sandbox's disk budget holds, the default one (half its
//! memory) as an asked one: what it keeps (its workspace overlay's layer,
//! its home) lives in a tmpfs of the budget while runsc runs, so a write
//! past it fails with ENOSPC inside and the host's disk holds at most the
//! budget once it stops, from the command line and for a token's sandbox
//! through the real daemon. What it wrote within the budget is kept
//! across a stop and a start. Real runsc; skipped, with the reason, where
//! runsc cannot run a sandbox here.

use crate::common::daemon::{call_on, curl_available, json, quota_token, Daemon};
use crate::common::gvisor::{gvisor_available, start_gvisor};
use crate::common::*;

const MIB: u64 = 1 << 20;

/// What a sandbox writing 400 MiB into its workspace runs: a small file
/// and a file in its home first, then `dd`, whose status and last line
/// it prints.
const FILL: &str = "echo kept > /workspace/small && echo home > ~/.h && \
     dd if=/dev/zero of=/workspace/big bs=1M count=400 2>/tmp/dd; \
     echo dd=$?; cat /tmp/dd";

#[test]
fn a_gvisor_sandbox_past_its_default_disk_budget_gets_enospc_and_the_host_holds_at_most_the_budget()
{
    if !gvisor_available() {
        return;
    }
    let state = TempDir::new("gvisor-disk");
    let ws = TempDir::new("gvisor-disk-ws");
    // 256 MiB of memory: a default budget of 128 MiB, none asked.
    start_gvisor(state.path(), "gd", &ws, &["--memory", "256M"]);
    let out = warden(state.path(), &["exec", "gd", "--", "sh", "-c", FILL]);
    let said = format!("{}{}", stdout(&out), stderr(&out));
    let running = bytes_under(&sandbox_dir(state.path(), "gd"));
    ok(&warden(state.path(), &["stop", "gd"]));
    let kept = bytes_under(&sandbox_dir(state.path(), "gd"));
    eprintln!("dd: {said}; on the host: {running} bytes running, {kept} kept");
    assert!(!said.contains("dd=0"), "400 MiB were written: {said}");
    assert!(said.contains("No space left"), "{said}");
    for (when, bytes) in [("while it ran", running), ("once stopped", kept)] {
        assert!(
            bytes <= 128 * MIB + 8 * MIB,
            "{when} the host held {} MiB for a budget of 128 MiB",
            bytes / MIB
        );
    }
    // What it wrote within the budget is kept across a stop and a start.
    ok(&warden(state.path(), &["start", "gd"]));
    let out = ok(&warden(
        state.path(),
        &["exec", "gd", "--", "sh", "-c", "cat /workspace/small ~/.h"],
    ));
    assert_eq!(out.trim(), "kept\nhome", "{out}");
    let _ = warden(state.path(), &["rm", "-f", "gd"]);
}

#[test]
fn a_tokens_gvisor_sandbox_is_held_to_its_default_disk_budget_through_the_daemon() {
    if !curl_available() {
        return skip("curl is not installed");
    }
    if !gvisor_available() {
        return;
    }
    let state = TempDir::new("gvisor-disk-token");
    let d = Daemon::start(state.path(), true);
    let token = quota_token(state.path(), "t", "4");
    let body = r#"{"name":"tg1","start":true,"spec":{"isolation":"gvisor","resources":{"memory":"256M"}}}"#;
    let (s, b) = call_on(&d, true, "POST", "/v1/sandboxes", Some(body), Some(&token));
    assert_eq!(s, 201, "{b}");
    let exec = serde_json::json!({ "shell": FILL }).to_string();
    let (s, b) = call_on(
        &d,
        true,
        "POST",
        "/v1/sandboxes/tg1/exec",
        Some(&exec),
        Some(&token),
    );
    assert_eq!(s, 200, "{b}");
    let said = json(&b)["stdout"].as_str().unwrap_or_default().to_string();
    let dir = state.path().join("warden/sandboxes/tg1");
    let running = bytes_under(&dir);
    let (s, b) = call_on(
        &d,
        true,
        "POST",
        "/v1/sandboxes/tg1/stop",
        None,
        Some(&token),
    );
    assert!(s < 300, "{b}");
    let kept = bytes_under(&dir);
    eprintln!("dd: {said}; on the host: {running} bytes running, {kept} kept");
    assert!(!said.contains("dd=0"), "400 MiB were written: {b}");
    assert!(said.contains("No space left"), "{said}");
    for (when, bytes) in [("while it ran", running), ("once stopped", kept)] {
        assert!(
            bytes <= 128 * MIB + 8 * MIB,
            "{when} the host held {} MiB for the token's sandbox counted at 128 MiB",
            bytes / MIB
        );
    }
}

#[test]
fn an_asked_disk_limit_runs_under_gvisor_and_holds() {
    if !gvisor_available() {
        return;
    }
    let state = TempDir::new("gvisor-disk-asked");
    let ws = TempDir::new("gvisor-disk-asked-ws");
    // Before, an asked `--disk` was refused under gVisor; now it is held.
    start_gvisor(state.path(), "ga", &ws, &["--disk", "32M"]);
    let out = warden(
        state.path(),
        &[
            "exec",
            "ga",
            "--",
            "sh",
            "-c",
            "dd if=/dev/zero of=/workspace/big bs=1M count=64 2>&1; echo dd=$?",
        ],
    );
    let said = format!("{}{}", stdout(&out), stderr(&out));
    ok(&warden(state.path(), &["stop", "ga"]));
    let kept = bytes_under(&sandbox_dir(state.path(), "ga"));
    assert!(said.contains("No space left"), "{said}");
    assert!(!said.contains("dd=0"), "{said}");
    assert!(
        kept <= 32 * MIB + 4 * MIB,
        "the host holds {} MiB for a limit of 32 MiB",
        kept / MIB
    );
    let _ = warden(state.path(), &["rm", "-f", "ga"]);
}

#[test]
fn rootless_a_named_gvisor_sandbox_is_refused_rather_than_run_past_its_disk_budget() {
    if !is_root() {
        return skip("needs root to run warden as another user");
    }
    if !gvisor_available() {
        return;
    }
    let Some(user) = Unprivileged::get() else {
        return skip("no unprivileged user to run warden as");
    };
    let state = TempDir::new("gvisor-disk-rootless");
    let ws = TempDir::new("gvisor-disk-rootless-ws");
    user.own(state.path());
    user.own(ws.path());
    let st = state.path().join("warden");
    // Refused when it is made, at the isolation, with nothing made
    // (before, it was made and every start of it refused).
    let out = user.warden(
        &st,
        &["create", "r", "--isolation", "gvisor", "-w", ws.str()],
    );
    let err = stderr(&out);
    assert_ne!(code(&out), 0, "a rootless gVisor sandbox was made: {err}");
    assert!(
        err.contains("--isolation gvisor") && err.contains("disk budget") && err.contains("--disk"),
        "{err}"
    );
    assert!(
        !st.join("sandboxes/r").exists(),
        "a refused sandbox was made"
    );
    assert!(
        runsc_running_under(&st).is_empty(),
        "runsc ran for a refused sandbox"
    );
    let _ = user.warden(&st, &["rm", "-f", "r"]);
}

/// runsc's processes given a root under `state`.
fn runsc_running_under(state: &std::path::Path) -> Vec<i32> {
    pids_with_marker(&state.join("gvisor").display().to_string())
}

/// The memory cgroup (v1's memory hierarchy, else v2's unified one) of
/// the first of runsc's processes under `state`: its usage and its
/// shmem (tmpfs pages), in bytes, and its limit.
fn runsc_memory(state: &std::path::Path) -> Option<(u64, u64, u64)> {
    for pid in runsc_running_under(state) {
        let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/cgroup")) else {
            continue;
        };
        let v1 = text.lines().find_map(|l| {
            let mut f = l.splitn(3, ':');
            let (_, ctl, path) = (f.next()?, f.next()?, f.next()?);
            ctl.split(',')
                .any(|c| c == "memory")
                .then(|| format!("/sys/fs/cgroup/memory{path}"))
        });
        let (dir, usage, limit, shmem) = match v1 {
            Some(d) => (
                d,
                "memory.usage_in_bytes",
                "memory.limit_in_bytes",
                "total_shmem",
            ),
            None => {
                let path = text.lines().find_map(|l| l.strip_prefix("0::"))?;
                (
                    format!("/sys/fs/cgroup{path}"),
                    "memory.current",
                    "memory.max",
                    "shmem",
                )
            }
        };
        let read = |f: &str| -> Option<u64> {
            std::fs::read_to_string(format!("{dir}/{f}"))
                .ok()?
                .trim()
                .parse()
                .ok()
        };
        let stat = std::fs::read_to_string(format!("{dir}/memory.stat")).ok()?;
        let shmem = stat.lines().find_map(|l| {
            let (k, v) = l.split_once(' ')?;
            (k == shmem).then(|| v.trim().parse().ok())?
        })?;
        return Some((read(usage)?, shmem, read(limit)?));
    }
    None
}

#[test]
fn a_gvisor_sandboxs_disk_budget_refilled_at_its_start_is_charged_to_its_own_memory_cgroup() {
    if !is_root() {
        return skip("the budget's tmpfs is made only as root");
    }
    if !gvisor_available() {
        return;
    }
    let state = TempDir::new("gvisor-disk-charge");
    let ws = TempDir::new("gvisor-disk-charge-ws");
    // 256 MiB of memory: a cgroup of 512 MiB (gVisor's own beside it);
    // a budget of 200 MiB.
    start_gvisor(
        state.path(),
        "gc",
        &ws,
        &["--memory", "256M", "--disk", "200M"],
    );
    let out = ok(&warden(
        state.path(),
        &[
            "exec",
            "gc",
            "--",
            "sh",
            "-c",
            "dd if=/dev/urandom of=/workspace/big bs=1M count=190 iflag=fullblock 2>&1; echo dd=$?",
        ],
    ));
    assert!(out.contains("dd=0"), "{out}");
    ok(&warden(state.path(), &["stop", "gc"]));
    // The start refills the budget's tmpfs with the 190 MiB layer.
    ok(&warden(state.path(), &["start", "gc"]));
    let st = state.path().join("warden");
    let Some((usage, shmem, limit)) = runsc_memory(&st) else {
        let _ = warden(state.path(), &["rm", "-f", "gc"]);
        return skip("runsc's memory cgroup cannot be read here");
    };
    eprintln!(
        "after the start: the sandbox's cgroup uses {} MiB, {} MiB of it shmem, limit {} MiB",
        usage / MIB,
        shmem / MIB,
        limit / MIB
    );
    assert!(
        shmem >= 185 * MIB && usage >= 185 * MIB,
        "the 190 MiB refilled are not in the sandbox's cgroup: usage {} MiB, shmem {} MiB",
        usage / MIB,
        shmem / MIB
    );
    // Its memory and its budget together cannot pass the cgroup's limit:
    // 350 MiB more in gVisor's own /tmp (RAM) beside the 190 MiB layer
    // is past 512 MiB (without the layer, 350 MiB and gVisor's own,
    // about 20 MiB, fit).
    let out = warden(
        state.path(),
        &[
            "exec",
            "gc",
            "--",
            "sh",
            "-c",
            "dd if=/dev/urandom of=/tmp/fill bs=1M count=350 iflag=fullblock 2>&1; echo dd=$?",
        ],
    );
    let said = format!("{}{}", stdout(&out), stderr(&out));
    let after = runsc_memory(&st);
    eprintln!("writing 350 MiB more: {said}; cgroup after: {after:?}");
    assert!(
        !said.contains("dd=0"),
        "the sandbox held its 190 MiB layer and 350 MiB more within a 512 MiB cgroup: {said}"
    );
    let _ = warden(state.path(), &["rm", "-f", "gc"]);
}
