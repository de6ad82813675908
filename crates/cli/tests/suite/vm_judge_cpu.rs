//! A VM sandbox's file servers cannot make the host spend more CPU on
//! its behalf than its `--cpus` allows. QEMU's 9p server and virtiofsd run
//! in the sandbox's cgroup, but each mode change, ACL and hard link they
//! make for the guest on a share they serve through a swapped view (as
//! root, a workspace or `--rw` bind of root's) is judged by a thread of
//! the supervisor, on the host, outside that cgroup: 100-190 us of the
//! supervisor's CPU a call. A file server answering a fast guest (a KVM
//! guest's loop of `chmod`) makes those calls at the rate it can; played
//! here by stand-ins started exactly as warden starts the real helpers
//! (their jail, their cgroup under `--cpus 0.05`, their judge), each
//! calling `chmod` in a loop on the share it is handed. Then a real guest
//! under emulation, its loop of `chmod` through the share. The judging
//! threads' CPU is read from `/proc` while the loops run.
//!
//! The booting test is `#[ignore]`d (slow under emulation) and runs with
//! `-- --ignored`, as in `vm.rs`; each test skips, saying why, when no VM
//! can start here.

use crate::common::vm::*;
use crate::common::*;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The sandbox's CPU limit in these tests.
const CPUS: f64 = 0.05;

/// The CPU time of the threads of process `pid` named `name`, summed
/// (utime + stime of each).
fn threads_cpu(pid: u32, name: &str) -> Duration {
    let mut ticks = 0u64;
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Duration::ZERO;
    };
    for t in tasks.flatten() {
        let Ok(stat) = std::fs::read_to_string(t.path().join("stat")) else {
            continue;
        };
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        if &stat[open + 1..close] != name {
            continue;
        }
        let f: Vec<&str> = stat[close + 2..].split(' ').collect();
        let get = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        ticks += get(11) + get(12);
    }
    // In clock ticks of USER_HZ, 100 on every Linux this runs on.
    Duration::from_millis(ticks * 10)
}

/// The judging threads' CPU over `window`, once `started` says the loops
/// run (at most `wait` after now); `None` when the run ended first.
fn judged_over(
    child: &mut Child,
    started: &dyn Fn() -> bool,
    wait: Duration,
    window: Duration,
) -> Option<(Duration, Duration)> {
    let pid = child.id();
    let deadline = Instant::now() + wait;
    while !started() {
        if Instant::now() > deadline || matches!(child.try_wait(), Ok(Some(_))) {
            return None;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    // A moment for the loops to reach their pace.
    std::thread::sleep(Duration::from_millis(500));
    let (t0, c0) = (Instant::now(), threads_cpu(pid, "warden-modes"));
    std::thread::sleep(window);
    let (wall, c1) = (t0.elapsed(), threads_cpu(pid, "warden-modes"));
    if matches!(child.try_wait(), Ok(Some(_))) {
        return None;
    }
    Some((c1.saturating_sub(c0), wall))
}

/// What the judges may spend over `wall` for a sandbox of [`CPUS`]: its
/// share, the account's burst (100 ms, once), and a little for the last
/// call and the ticks' rounding. Several times less than a judge left
/// alone spends (most of a core).
fn most(wall: Duration) -> Duration {
    wall.mul_f64(CPUS) + Duration::from_millis(100) + Duration::from_millis(150)
}

/// A stand-in helper (`WARDEN_VIRTIOFSD` and `WARDEN_VMM`) that finds the
/// share it is handed (virtiofsd's `source=`, the VMM's 9p export of the
/// first bind, `id=b0`), says it started there, and calls `chmod` on a
/// file of its own there in a loop for `seconds`, as a file server
/// answering a fast guest does; then fails (no guest boots).
fn looping_helper(at: &Path, seconds: u32) {
    let script = format!(
        r#"#!/bin/bash
for a in "$@"; do case "$a" in
  source=*) share="${{a#source=}}"; who=fsd;;
  local,id=b0,path=*) p="${{a#local,id=b0,path=}}"; share="${{p%%,*}}/"; who=vmm;;
esac; done
[ -n "$share" ] || {{ sleep 7; exit 3; }}
exec /usr/bin/python3 -c '
import os, sys, time
share, who, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
p = os.path.join(share, "loop-" + who)
open(p, "w").close()
open(os.path.join(share, "started-" + who), "w").close()
end = time.monotonic() + seconds
stop = os.path.join(share, "stop")
n = 0
while time.monotonic() < end and not os.path.exists(stop):
    for _ in range(50):
        os.chmod(p, 0o644)
        os.chmod(p, 0o600)
    n += 50
    # Kept as it goes: the run ends when either server does, and the
    # other may be stopped before its loop ends.
    calls = os.path.join(share, "calls-" + who)
    with open(calls + ".new", "w") as f:
        f.write(str(n))
    os.rename(calls + ".new", calls)
sys.exit(3)
' "$share" "$who" {seconds}
"#
    );
    std::fs::write(at, script).unwrap();
    std::fs::set_permissions(at, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn a_vm_sandboxs_file_servers_cannot_make_its_judge_spend_more_than_its_cpu_limit() {
    if !is_root() {
        skip("needs root: the file servers' calls are judged where they serve root's files through a view");
        return;
    }
    if guest_release().is_none() {
        return;
    }
    if super::vm_fs::virtiofsd().is_none() {
        return;
    }
    if !Path::new("/usr/bin/python3").exists() {
        skip("/usr/bin/python3 is not installed (the stand-in file servers' loops need it)");
        return;
    }
    let dir = TempDir::new("vm-judge-cpu");
    // Root's workspace (virtiofsd's) and root's `--rw` bind (the 9p
    // server's), both served as nobody through views: both judged.
    let ws = dir.path().join("ws");
    let rw = dir.path().join("rw");
    for d in [&ws, &rw] {
        std::fs::create_dir_all(d).unwrap();
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let helper = dir.path().join("looping-helper");
    // Each loops until told to stop (or a minute passes): under load one
    // may start seconds before the other, and must not end first.
    let seconds = 60;
    looping_helper(&helper, seconds);
    let mut child = Command::new(warden_bin())
        .args(["run", "--isolation", "vm", "--no-tty", "--cpus", "0.05"])
        .arg("-w")
        .arg(&ws)
        .arg("--rw")
        .arg(&rw)
        .args(["--", "true"])
        .env("WARDEN_VMM", &helper)
        .env("WARDEN_VIRTIOFSD", &helper)
        .env("WARDEN_VM_FS", "virtiofs")
        .env("WARDEN_VM_TEMPLATE", "off")
        .env("WARDEN_VM_ACCEL", "tcg")
        .env("WARDEN_VM_DIR", vm_dir())
        .env("WARDEN_STATE_DIR", dir.path().join("state"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = || ws.join("started-fsd").exists() && rw.join("started-vmm").exists();
    let measured = judged_over(
        &mut child,
        &started,
        Duration::from_secs(40),
        Duration::from_secs(4),
    );
    for share in [&ws, &rw] {
        std::fs::write(share.join("stop"), "").unwrap();
    }
    let o = child.wait_with_output().unwrap();
    let out = format!("{}\n{}", stdout(&o), stderr(&o));
    let Some((used, wall)) = measured else {
        panic!("the stand-in file servers did not both loop while measured: {out}");
    };
    let calls = |p: &Path| std::fs::read_to_string(p).unwrap_or_default();
    let (fsd_calls, vmm_calls) = (calls(&ws.join("calls-fsd")), calls(&rw.join("calls-vmm")));
    eprintln!(
        "judges: {used:?} of CPU in {wall:?}; calls: virtiofsd {fsd_calls}, 9p server {vmm_calls}"
    );
    // Both servers' calls were judged, and went through (their own files).
    for (who, n) in [("virtiofsd", &fsd_calls), ("the 9p server", &vmm_calls)] {
        assert!(
            n.trim().parse::<u64>().is_ok_and(|n| n > 0),
            "{who}'s chmods did not go through: {n:?}\n{out}"
        );
    }
    assert!(
        used <= most(wall),
        "the judges spent {used:?} of CPU in {wall:?} for a sandbox allowed {:?} (at most {:?} with the burst)",
        wall.mul_f64(CPUS),
        most(wall)
    );
}

#[test]
#[ignore = "boots a VM (slow under emulation): run with -- --ignored"]
fn a_guest_calling_chmod_in_a_loop_through_its_share_makes_the_host_judge_no_more_than_its_cpu_limit(
) {
    if !is_root() {
        skip("needs root: the 9p server's calls are judged where it serves root's files through a view");
        return;
    }
    if guest_release().is_none() {
        return;
    }
    let state = TempDir::new("vm-judge-cpu-guest");
    // A boot under 5 % of a core takes minutes cold; a copy of the
    // template starts in about half a minute. One unlimited run of the
    // same shape (a workspace) first makes the template, when the cache
    // has none for this guest init.
    let warm_ws = TempDir::new("vm-judge-cpu-warm-ws");
    let warm = vm_warden(
        state.path(),
        &[
            "run",
            "--isolation",
            "vm",
            "--no-tty",
            "-w",
            warm_ws.str(),
            "--",
            "true",
        ],
        None,
    );
    assert_eq!(code(&warm), 0, "{}", stderr(&warm));
    let ws = TempDir::new("vm-judge-cpu-guest-ws");
    std::fs::set_permissions(ws.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    // The guest's loop: a file of its own in the workspace (root's, over
    // 9p, the template's way), `chmod 644` (judged) and `600` (not) as
    // fast as it can, counting.
    let script = "import os\n\
                  p = '/workspace/f'\n\
                  open(p, 'w').close()\n\
                  n = 0\n\
                  while True:\n    \
                      os.chmod(p, 0o644)\n    \
                      os.chmod(p, 0o600)\n    \
                      n += 1\n    \
                      if n % 20 == 0:\n        \
                          open('/workspace/count.tmp', 'w').write(str(n))\n        \
                          os.rename('/workspace/count.tmp', '/workspace/count')\n";
    let mut child = Command::new(warden_bin())
        .args(["run", "--isolation", "vm", "--no-tty", "--cpus", "0.05"])
        .args(["--timeout", "150s", "-w", ws.str()])
        .args(["--", "python3", "-c", script])
        .env("WARDEN_STATE_DIR", state.path().join("warden"))
        .env("WARDEN_VM_DIR", vm_dir())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let count = ws.path().join("count");
    let started = || count.exists();
    let measured = judged_over(
        &mut child,
        &started,
        Duration::from_secs(90),
        Duration::from_secs(5),
    );
    let counted = std::fs::read_to_string(&count).unwrap_or_default();
    let _ = child.kill();
    let o = child.wait_with_output().unwrap();
    let Some((used, wall)) = measured else {
        panic!(
            "the guest's loop did not run while measured: {}\n{}",
            stdout(&o),
            stderr(&o)
        );
    };
    eprintln!("judge: {used:?} of CPU in {wall:?}; the guest's pairs of calls: {counted}");
    assert!(
        used <= most(wall),
        "the judge spent {used:?} of CPU in {wall:?} for a guest allowed {:?}",
        wall.mul_f64(CPUS)
    );
}
