//! The cgroup layer against the real kernel: every limit is provoked by a
//! process that tries to exceed it, inside a sandbox cgroup that always has
//! memory and pids limits (the machine running these is shared).
//!
//! Run as root (or with a delegated cgroup v2 subtree); where the host lacks
//! what a test needs, the test prints "skipped: <reason>" and returns.

use std::collections::BTreeSet;
use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use warden_jail::cgroup::{self, Cgroup, CgroupError, Layout, Limits};

const MIB: u64 = 1 << 20;

fn skip(reason: impl std::fmt::Display) {
    eprintln!("skipped: {reason}");
}

#[derive(Clone, Copy)]
enum Need {
    Memory,
    Pids,
    Cpu,
}

/// Whether this host and user can give a sandbox what the test needs; prints
/// why not.
fn host_can(needs: &[Need]) -> bool {
    let support = cgroup::probe();
    for need in needs {
        let (ok, name) = match need {
            Need::Memory => (support.memory, "memory"),
            Need::Pids => (support.pids, "pids"),
            Need::Cpu => (support.cpu, "cpu"),
        };
        if !ok {
            skip(format!(
                "no usable {name} cgroup controller ({})",
                support.why_not.as_deref().unwrap_or("no reason given")
            ));
            return false;
        }
    }
    true
}

/// A cgroup id no other test run uses at the same time.
fn id(test: &str) -> String {
    format!("test-{test}-{}", std::process::id())
}

/// Limits for a test sandbox: always memory and pids, and a CPU quota
/// where the host can apply one.
fn limits(memory: u64, pids: u64, cpus: f64) -> Limits {
    Limits {
        memory: Some(memory),
        pids: Some(pids),
        cpus: cgroup::probe().cpu.then_some(cpus),
    }
}

/// The Python interpreter itself, not a version-manager shim whose own
/// start-up would spend the sandbox's pids and memory.
fn python() -> Option<String> {
    let out = Command::new("python3")
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .ok()?;
    let path = String::from_utf8(out.stdout).ok()?.trim().to_owned();
    (out.status.success() && !path.is_empty()).then_some(path)
}

/// A child that waits on its stdin before exec'ing `program`, so that it
/// can be moved into the cgroup before it does anything: it starts spending
/// only once [`Held::release`] is called, and is killed when dropped.
struct Held {
    child: Child,
}

impl Held {
    fn spawn(program: &str, args: &[&str]) -> Held {
        let child = Command::new("sh")
            .arg("-c")
            .arg(r#"read -r _; exec "$@""#)
            .arg("sh")
            .arg(program)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn sh");
        Held { child }
    }

    fn pid(&self) -> i32 {
        i32::try_from(self.child.id()).unwrap()
    }

    fn release(&mut self) {
        let mut stdin = self.child.stdin.take().expect("stdin already released");
        stdin.write_all(b"go\n").unwrap();
    }

    /// Lines the child (and its descendants) print, read on a thread so
    /// that a test can wait for them with a timeout.
    fn lines(&mut self) -> mpsc::Receiver<String> {
        let stdout = self.child.stdout.take().expect("stdout already taken");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        rx
    }

    fn wait_timeout(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The sandbox directory that holds `file` (e.g. "pids.max").
fn dir_with(cg: &Cgroup, file: &str) -> Option<PathBuf> {
    cg.paths().into_iter().find(|p| p.join(file).exists())
}

fn read_u64(path: &Path) -> u64 {
    let text = fs::read_to_string(path).unwrap();
    text.trim()
        .parse()
        .unwrap_or_else(|e| panic!("{}: {text:?}: {e}", path.display()))
}

fn keyed(path: &Path, key: &str) -> Option<u64> {
    fs::read_to_string(path).ok()?.lines().find_map(|line| {
        let (k, v) = line.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok())?
    })
}

/// Every process listed in each of the cgroup's directories.
fn members(cg: &Cgroup) -> BTreeSet<i32> {
    cg.paths()
        .iter()
        .flat_map(|p| {
            fs::read_to_string(p.join("cgroup.procs"))
                .unwrap()
                .lines()
                .map(|l| l.parse::<i32>().unwrap())
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Whether `pid` still runs (a zombie waiting for its reaper does not).
fn running(pid: i32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            // The state follows the parenthesised command name.
            let state = stat.rsplit_once(')').map(|(_, rest)| rest.trim_start());
            !matches!(state.and_then(|s| s.chars().next()), Some('Z' | 'X'))
        }
        Err(_) => false,
    }
}

#[test]
fn memory_hog_in_the_cgroup_is_oom_killed_at_the_limit() {
    if !host_can(&[Need::Memory, Need::Pids]) {
        return;
    }
    let Some(python) = python() else {
        return skip("python3 is not installed");
    };
    let limit = 64 * MIB;
    let cg = Cgroup::create(&id("oom"), &limits(limit, 64, 1.0)).unwrap();
    // 512 MiB, every page written: eight times the limit.
    let mut hog = Held::spawn(
        &python,
        &[
            "-c",
            "b = b'\\x01' * (512 << 20); print('survived', len(b))",
        ],
    );
    cg.add_process(hog.pid()).unwrap();
    hog.release();

    let status = hog
        .wait_timeout(Duration::from_secs(60))
        .expect("the hog still runs after 60 s");
    assert_eq!(
        status.signal(),
        Some(libc::SIGKILL),
        "hog ended with {status:?}"
    );
    let stats = cg.stats();
    assert!(
        stats.oom_kills.is_some_and(|n| n >= 1),
        "no OOM kill counted: {stats:?}"
    );
    if let Some(peak) = stats.memory_peak {
        assert!(peak <= limit, "peak {peak} above the limit {limit}");
        assert!(
            peak > limit / 2,
            "peak {peak}: the hog never reached the limit"
        );
    }
    cg.remove().unwrap();
}

#[test]
fn fork_bomb_is_stopped_by_the_pids_limit() {
    if !host_can(&[Need::Memory, Need::Pids]) {
        return;
    }
    let Some(python) = python() else {
        return skip("python3 is not installed");
    };
    let max = 16;
    let cg = Cgroup::create(&id("forks"), &limits(256 * MIB, max, 1.0)).unwrap();
    // 64 sleepers wanted; prints how many started and how many forks failed.
    let bomb = "\
import os, time
started = failed = 0
for _ in range(64):
    try:
        pid = os.fork()
    except OSError:
        failed += 1
        continue
    if pid == 0:
        time.sleep(30)
        os._exit(0)
    started += 1
print(started, failed, flush=True)
time.sleep(30)
";
    let mut child = Held::spawn(&python, &["-c", bomb]);
    let lines = child.lines();
    cg.add_process(child.pid()).unwrap();
    child.release();

    let line = lines
        .recv_timeout(Duration::from_secs(30))
        .expect("the fork loop printed nothing in 30 s");
    let counts: Vec<u64> = line.split(' ').map(|n| n.parse().unwrap()).collect();
    let (started, failed) = (counts[0], counts[1]);
    assert!(failed >= 1, "every fork succeeded: {line}");
    assert!(
        started < max,
        "{started} children plus their parent exceed {max}"
    );
    let pids_dir = dir_with(&cg, "pids.max").unwrap();
    assert!(read_u64(&pids_dir.join("pids.current")) <= max);
    if pids_dir.join("pids.peak").exists() {
        assert!(read_u64(&pids_dir.join("pids.peak")) <= max);
    }
    assert!(
        keyed(&pids_dir.join("pids.events"), "max").is_some_and(|n| n >= 1),
        "the kernel counted no refused fork"
    );
    assert!(members(&cg).len() as u64 <= max);

    cg.kill_all().unwrap();
    assert_eq!(members(&cg), BTreeSet::new());
    assert_eq!(cg.procs().unwrap(), Vec::<i32>::new());
    let status = child.wait_timeout(Duration::from_secs(10)).unwrap();
    assert_eq!(status.signal(), Some(libc::SIGKILL));
    cg.remove().unwrap();
}

#[test]
fn kill_all_kills_double_forked_daemons() {
    if !host_can(&[Need::Memory, Need::Pids]) {
        return;
    }
    let cg = Cgroup::create(&id("daemon"), &limits(64 * MIB, 16, 0.5)).unwrap();
    // The inner shell starts a new session, backgrounds a sleeper, prints its
    // pid and exits: the sleeper is orphaned, no longer our descendant.
    let mut parent = Held::spawn("setsid", &["sh", "-c", "sleep 300 & echo $!"]);
    let lines = parent.lines();
    cg.add_process(parent.pid()).unwrap();
    parent.release();

    let daemon: i32 = lines
        .recv_timeout(Duration::from_secs(10))
        .expect("the daemon's pid was not printed")
        .parse()
        .unwrap();
    parent
        .wait_timeout(Duration::from_secs(10))
        .expect("the daemon's parent did not exit");
    let deadline = Instant::now() + Duration::from_secs(5);
    while cg.procs().unwrap() != vec![daemon] && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(cg.procs().unwrap(), vec![daemon], "only the daemon is left");
    assert!(running(daemon), "the daemon survived its parent");

    cg.kill_all().unwrap();
    assert_eq!(members(&cg), BTreeSet::new());
    let deadline = Instant::now() + Duration::from_secs(5);
    while running(daemon) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!running(daemon), "daemon {daemon} still runs");
    cg.remove().unwrap();
}

#[test]
fn remove_leaves_no_cgroup_directory_behind() {
    if !host_can(&[Need::Memory, Need::Pids]) {
        return;
    }
    let cg = Cgroup::create(&id("remove"), &limits(32 * MIB, 8, 0.5)).unwrap();
    let paths = cg.paths();
    assert!(!paths.is_empty());
    for p in &paths {
        assert!(p.is_dir(), "{} was not created", p.display());
    }
    // Still occupied: remove must kill before it can rmdir.
    let mut sleeper = Held::spawn("sleep", &["300"]);
    cg.add_process(sleeper.pid()).unwrap();
    sleeper.release();

    cg.remove().unwrap();
    for p in &paths {
        assert!(!p.exists(), "{} is left behind", p.display());
    }
    let status = sleeper.wait_timeout(Duration::from_secs(10)).unwrap();
    assert_eq!(status.signal(), Some(libc::SIGKILL));
}

#[test]
fn removing_one_sandbox_leaves_a_sibling_intact() {
    if !host_can(&[Need::Memory, Need::Pids]) {
        return;
    }
    let first = Cgroup::create(&id("first"), &limits(32 * MIB, 8, 0.5)).unwrap();
    let second = Cgroup::create(&id("second"), &limits(32 * MIB, 8, 0.5)).unwrap();
    let mut sleeper = Held::spawn("sleep", &["300"]);
    second.add_process(sleeper.pid()).unwrap();
    sleeper.release();

    // The shared `warden` parent cannot go while the sibling lives in it.
    first.remove().unwrap();
    for p in second.paths() {
        assert!(p.is_dir(), "{} went with its sibling", p.display());
    }
    assert_eq!(second.procs().unwrap(), vec![sleeper.pid()]);
    assert!(sleeper.child.try_wait().unwrap().is_none());
    second.remove().unwrap();
}

#[test]
fn dropping_the_cgroup_kills_its_processes_and_removes_it() {
    if !host_can(&[Need::Memory, Need::Pids]) {
        return;
    }
    let cg = Cgroup::create(&id("drop"), &limits(32 * MIB, 8, 0.5)).unwrap();
    let paths = cg.paths();
    let mut sleeper = Held::spawn("sleep", &["300"]);
    cg.add_process(sleeper.pid()).unwrap();
    sleeper.release();

    drop(cg);
    for p in &paths {
        assert!(!p.exists(), "{} is left behind", p.display());
    }
    let status = sleeper.wait_timeout(Duration::from_secs(10)).unwrap();
    assert_eq!(status.signal(), Some(libc::SIGKILL));
}

#[test]
fn an_added_process_is_in_every_hierarchy_of_the_cgroup() {
    if !host_can(&[Need::Memory, Need::Pids]) {
        return;
    }
    let name = id("member");
    let cg = Cgroup::create(&name, &limits(32 * MIB, 8, 0.5)).unwrap();
    // Never released: it only waits on its stdin.
    let waiter = Held::spawn("true", &[]);
    cg.add_process(waiter.pid()).unwrap();

    let own = fs::read_to_string(format!("/proc/{}/cgroup", waiter.pid())).unwrap();
    for dir in cg.paths() {
        assert!(
            fs::read_to_string(dir.join("cgroup.procs"))
                .unwrap()
                .lines()
                .any(|l| l == waiter.pid().to_string()),
            "{} does not list the process",
            dir.display()
        );
    }
    let inside = own
        .lines()
        .filter(|l| l.ends_with(&format!("/warden-{name}")))
        .count();
    assert_eq!(inside, cg.paths().len(), "/proc/PID/cgroup:\n{own}");
    drop(waiter);
    cg.remove().unwrap();
}

#[test]
fn cpu_quota_is_written() {
    if !host_can(&[Need::Memory, Need::Pids, Need::Cpu]) {
        return;
    }
    let cg = Cgroup::create(&id("quota"), &limits(32 * MIB, 8, 0.5)).unwrap();
    if let Some(dir) = dir_with(&cg, "cpu.cfs_quota_us") {
        assert_eq!(read_u64(&dir.join("cpu.cfs_quota_us")), 50_000);
        assert_eq!(read_u64(&dir.join("cpu.cfs_period_us")), 100_000);
    } else {
        let dir = dir_with(&cg, "cpu.max").expect("no cpu.max or cpu.cfs_quota_us");
        assert_eq!(
            fs::read_to_string(dir.join("cpu.max")).unwrap().trim(),
            "50000 100000"
        );
    }
    cg.remove().unwrap();
}

#[test]
fn busy_loop_is_held_to_its_cpu_quota() {
    if !host_can(&[Need::Memory, Need::Pids, Need::Cpu]) {
        return;
    }
    let Some(python) = python() else {
        return skip("python3 is not installed");
    };
    let cores = 0.2;
    let cg = Cgroup::create(&id("busy"), &limits(64 * MIB, 8, cores)).unwrap();
    let mut spinner = Held::spawn(
        &python,
        &[
            "-c",
            "import time\nend = time.monotonic() + 1.0\nwhile time.monotonic() < end: pass",
        ],
    );
    cg.add_process(spinner.pid()).unwrap();
    let start = Instant::now();
    spinner.release();
    let status = spinner.wait_timeout(Duration::from_secs(20)).unwrap();
    let wall_ms = start.elapsed().as_millis() as f64;
    assert!(status.success(), "{status:?}");

    let stats = cg.stats();
    let cpu_ms = stats.cpu_user_ms.unwrap() + stats.cpu_system_ms.unwrap();
    // A quota is enforced per 100 ms period; allow one period's worth of
    // slack for accounting granularity at the edges.
    let allowed = cores * wall_ms + 100.0;
    assert!(
        (cpu_ms as f64) <= allowed,
        "{cpu_ms} ms of CPU in {wall_ms} ms of wall time at {cores} cores"
    );
    assert!(cpu_ms >= 100, "the loop barely ran: {stats:?}");
    // The cpu controller's cpu.stat (v2 has one in every cgroup, without
    // throttling counts unless the controller is enabled).
    let throttled = cg
        .paths()
        .iter()
        .find_map(|p| keyed(&p.join("cpu.stat"), "nr_throttled"));
    assert!(
        throttled.is_some_and(|n| n >= 1),
        "the kernel never throttled the loop: {throttled:?}"
    );
    cg.remove().unwrap();
}

/// What /proc/self/mountinfo says, read independently of the module.
struct Mounts {
    v2: bool,
    /// v1 controllers with the mount's read-write state.
    v1: Vec<(String, bool)>,
}

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
];

fn mounts() -> Mounts {
    let text = fs::read_to_string("/proc/self/mountinfo").unwrap();
    let mut m = Mounts {
        v2: false,
        v1: Vec::new(),
    };
    for line in text.lines() {
        let (left, right) = line.split_once(" - ").unwrap();
        let opts = left.split(' ').nth(5).unwrap();
        let rw = opts.split(',').any(|o| o == "rw");
        let mut right = right.split(' ');
        match right.next() {
            Some("cgroup2") => m.v2 = true,
            Some("cgroup") => {
                let superopts = right.nth(1).unwrap();
                for o in superopts.split(',') {
                    if V1_CONTROLLERS.contains(&o) {
                        m.v1.push((o.to_owned(), rw));
                    }
                }
            }
            _ => {}
        }
    }
    m
}

#[test]
fn probe_reports_this_hosts_layout() {
    let m = mounts();
    let support = cgroup::probe();
    let expected = match (m.v1.is_empty(), m.v2) {
        (false, true) => Layout::Hybrid,
        (false, false) => Layout::V1,
        (true, true) => Layout::V2,
        (true, false) => Layout::None,
    };
    assert_eq!(support.layout, expected, "{support:?}");

    let root = nix::unistd::geteuid().is_root();
    for (name, usable) in [
        ("memory", support.memory),
        ("pids", support.pids),
        ("cpu", support.cpu),
    ] {
        if let Some((_, rw)) = m.v1.iter().find(|(c, _)| c == name) {
            if root && *rw {
                assert!(usable, "{name} is a writable v1 hierarchy: {support:?}");
            }
            if !root {
                assert!(!usable, "{name} v1 is root's only: {support:?}");
            }
        }
    }
    if root && m.v1.iter().any(|(c, rw)| c == "freezer" && *rw) {
        assert!(support.kill, "{support:?}");
    }
    let everything = support.memory && support.pids && support.cpu && support.kill;
    assert_eq!(
        support.why_not.is_none(),
        everything,
        "a reason is given exactly when something is missing: {support:?}"
    );
    if expected == Layout::None {
        skip("no cgroup file system is mounted; only the layout was checked");
    }
}

#[test]
fn nonsensical_requests_are_refused_before_anything_is_created() {
    let bad_cpu = Limits {
        cpus: Some(f64::NAN),
        ..Limits::default()
    };
    assert!(matches!(
        Cgroup::create(&id("nan"), &bad_cpu),
        Err(CgroupError::InvalidCpus { .. })
    ));
    for bad in ["", "..", "../escape", "a/b"] {
        assert!(
            matches!(
                Cgroup::create(bad, &Limits::default()),
                Err(CgroupError::InvalidId { .. })
            ),
            "{bad:?} accepted"
        );
    }
}
