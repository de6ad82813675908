//! Helpers shared by the integration tests: run the real `warden` binary and
//! plant real files, listeners and processes for it to (fail to) reach.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

pub mod daemon;
pub mod desktop;
pub mod forge;
pub mod grants;
pub mod gvisor;
pub mod mcp;
pub mod owner;
pub mod review;
pub mod rfb;
pub mod sockets;
pub mod tcp;
pub mod trees;
pub mod upstream;
pub mod vm;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

pub fn warden_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_warden"))
}

/// `warden run ARGS -- sh -c SCRIPT`, without a terminal, stdin closed.
/// Bytes held under `dir` (apparent sizes, as the quota prices a copy:
/// a sparse file holds what its size says once copied).
pub fn bytes_under(dir: &Path) -> u64 {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return 0;
    };
    rd.flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => bytes_under(&e.path()),
            Ok(t) if t.is_file() => e.metadata().map_or(0, |m| m.len()),
            _ => 0,
        })
        .sum()
}

/// Copy the program `from` to `to`, ready to run. The copy is written by a
/// `cp` of its own: a write descriptor held by this process, even for a
/// moment, would be inherited by another test's fork and make every exec of
/// the copy fail with "text file busy" until that fork's own exec.
pub fn copy_program(from: &Path, to: &Path) {
    let out = Command::new("cp")
        .arg("--")
        .arg(from)
        .arg(to)
        .output()
        .expect("cp runs");
    assert!(out.status.success(), "cp {from:?} {to:?}: {}", stderr(&out));
}

pub fn run_sh(args: &[&str], script: &str) -> Output {
    let mut cmd = Command::new(warden_bin());
    cmd.arg("run")
        .arg("--no-tty")
        .args(args)
        .args(["--", "sh", "-c", script]);
    cmd.stdin(Stdio::null());
    cmd.output().expect("warden could not be started")
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

pub fn code(o: &Output) -> i32 {
    o.status.code().unwrap_or(-1)
}

/// A unique name for files, markers and users of one test.
pub fn unique(tag: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!(
        "{tag}-{}-{}-{nanos}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    )
}

/// A fresh directory, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        let p = std::env::temp_dir().join(unique(tag));
        std::fs::create_dir_all(&p).expect("create temp dir");
        TempDir(p)
    }
    pub fn path(&self) -> &Path {
        &self.0
    }
    pub fn str(&self) -> &str {
        self.0.to_str().expect("utf-8 temp path")
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        // Descriptor to descriptor, without recursion: a test's sandbox may
        // leave a tree deeper than a test thread's stack could walk
        // (std's removal recurses once per level).
        let _ = warden_workspace::fsutil::remove_tree(&self.0);
    }
}

pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Print why a test does not run on this host; the test then returns.
pub fn skip(reason: &str) {
    eprintln!("skipped: {reason}");
}

/// Every PID on the host whose command line contains `marker`.
pub fn pids_with_marker(marker: &str) -> Vec<i32> {
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in dir.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        if let Ok(cmdline) = std::fs::read(e.path().join("cmdline")) {
            if String::from_utf8_lossy(&cmdline).contains(marker) {
                out.push(pid);
            }
        }
    }
    out
}

/// The sandbox's events from a `--json-events` file.
pub fn events(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// Every PID on the host whose command line is exactly `argv`.
pub fn pids_running(argv: &[&str]) -> Vec<i32> {
    let mut want = Vec::new();
    for a in argv {
        want.extend_from_slice(a.as_bytes());
        want.push(0);
    }
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in dir.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        if std::fs::read(e.path().join("cmdline")).is_ok_and(|c| c == want) {
            out.push(pid);
        }
    }
    out
}

/// An unprivileged identity to run warden as, with a copy of the binary it
/// can execute. As root, the system user `warden-test` (created when
/// missing); otherwise the test's own user.
pub struct Unprivileged {
    pub uid: u32,
    pub gid: u32,
    pub bin: PathBuf,
    _dir: TempDir,
}

impl Unprivileged {
    pub fn get() -> Option<Unprivileged> {
        use std::os::unix::fs::PermissionsExt;
        // SAFETY: getuid/getgid have no preconditions.
        let (mut uid, mut gid) = unsafe { (libc::getuid(), libc::getgid()) };
        if is_root() {
            let user = "warden-test";
            let exists = Command::new("id")
                .arg(user)
                .output()
                .map(|o| o.status.success())
                .unwrap_or(false);
            if !exists {
                let made = Command::new("useradd")
                    .args([
                        "--system",
                        "--no-create-home",
                        "--shell",
                        "/usr/sbin/nologin",
                        user,
                    ])
                    .status();
                if !matches!(made, Ok(s) if s.success()) {
                    return None;
                }
            }
            let id = |flag: &str| -> Option<u32> {
                String::from_utf8_lossy(
                    &Command::new("id").args([flag, user]).output().ok()?.stdout,
                )
                .trim()
                .parse()
                .ok()
            };
            uid = id("-u")?;
            gid = id("-g")?;
            // A home of its own, as a person has: warden keeps its state
            // (audit logs) there.
            let home = Path::new("/home").join(user);
            if std::fs::create_dir_all(&home).is_ok() {
                let _ = std::os::unix::fs::chown(&home, Some(uid), Some(gid));
            }
        }
        let dir = TempDir::new("unpriv-bin");
        let bin = dir.path().join("warden");
        copy_program(&warden_bin(), &bin);
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).ok()?;
        Some(Unprivileged {
            uid,
            gid,
            bin,
            _dir: dir,
        })
    }

    /// Give `path` to this identity.
    pub fn own(&self, path: &Path) {
        if is_root() {
            std::os::unix::fs::chown(path, Some(self.uid), Some(self.gid)).expect("chown");
        }
    }

    /// A command running `program` as this identity.
    pub fn command(&self, program: &str) -> Command {
        use std::os::unix::process::CommandExt;
        let mut cmd = Command::new(program);
        if is_root() {
            cmd.uid(self.uid)
                .gid(self.gid)
                .env("HOME", Path::new("/home").join("warden-test"));
        }
        cmd.current_dir("/").stdin(Stdio::null());
        cmd
    }

    /// `warden ARGS` run as this identity keeping its state where it would
    /// under `XDG_STATE_HOME=state_home`, no input.
    pub fn warden_state_home(&self, state_home: &Path, args: &[&str]) -> Output {
        self.command(self.bin.to_str().unwrap())
            .args(args)
            .env("XDG_STATE_HOME", state_home)
            .output()
            .unwrap()
    }

    /// `warden ARGS` run as this identity with its state in `state`, no
    /// input.
    pub fn warden(&self, state: &Path, args: &[&str]) -> Output {
        self.command(self.bin.to_str().unwrap())
            .args(args)
            .env("WARDEN_STATE_DIR", state)
            .output()
            .unwrap()
    }
}

/// Whether this kernel lets a sandbox wire its network (nf_tables and
/// nf_nat): skipped with the reason when it cannot; any other failure of
/// the probe fails the test.
pub fn egress_available() -> bool {
    let out = run_sh(&["--allow-domain", "probe.test"], "echo ok");
    if out.status.success() && stdout(&out).trim() == "ok" {
        return true;
    }
    let err = stderr(&out);
    if err.contains("cannot install the redirect rule") {
        skip(&format!(
            "this kernel cannot wire the sandbox's network: {}",
            err.trim()
        ));
        return false;
    }
    panic!("the egress probe failed: {} {err}", stdout(&out));
}

/// A terminal for warden to run on: the test holds the master side.
pub struct TestTerminal {
    pub master: std::fs::File,
    pub slave: std::fs::File,
}

impl TestTerminal {
    /// Start `cmd` on this terminal as a terminal emulator starts a shell:
    /// in a session of its own, with the terminal as its controlling one.
    pub fn spawn(&self, cmd: &mut Command) -> std::process::Child {
        use std::os::unix::process::CommandExt;
        cmd.stdin(self.slave.try_clone().unwrap())
            .stdout(self.slave.try_clone().unwrap())
            .stderr(self.slave.try_clone().unwrap());
        // SAFETY: setsid and TIOCSCTTY in the child before exec.
        unsafe {
            cmd.pre_exec(|| {
                libc::setsid();
                libc::ioctl(0, libc::TIOCSCTTY, 0);
                Ok(())
            });
        }
        cmd.spawn().unwrap()
    }

    pub fn open(rows: u16, cols: u16) -> TestTerminal {
        let (mut m, mut s) = (0, 0);
        let ws = libc::winsize {
            ws_row: rows,
            ws_col: cols,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        // SAFETY: openpty writes two descriptors into valid ints and reads
        // the winsize; name and termios are null.
        let rc =
            unsafe { libc::openpty(&mut m, &mut s, std::ptr::null_mut(), std::ptr::null(), &ws) };
        assert_eq!(rc, 0);
        // Neither side leaks into the programs the tests start (warden
        // gets the slave as its stdio): a master held open by a child
        // would keep the terminal from ever hanging up.
        for fd in [m, s] {
            // SAFETY: F_SETFD on a descriptor openpty just returned.
            unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
        }
        use std::os::fd::FromRawFd;
        // SAFETY: openpty returned two fresh descriptors that nothing else owns.
        unsafe {
            TestTerminal {
                master: std::fs::File::from_raw_fd(m),
                slave: std::fs::File::from_raw_fd(s),
            }
        }
    }

    pub fn resize(&self, rows: u16, cols: u16) {
        use std::os::fd::AsRawFd;
        let ws = libc::winsize {
            ws_row: rows,
            ws_col: cols,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        // SAFETY: TIOCSWINSZ reads one winsize from valid memory.
        unsafe { libc::ioctl(self.master.as_raw_fd(), libc::TIOCSWINSZ, &ws) };
    }

    /// Read from the master until `needle` appears or the time is up.
    pub fn expect(&mut self, needle: &str, within: Duration) -> String {
        use std::os::fd::AsRawFd;
        let deadline = Instant::now() + within;
        let mut seen = String::new();
        while Instant::now() < deadline && !seen.contains(needle) {
            let mut pfd = libc::pollfd {
                fd: self.master.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: poll on one valid pollfd.
            let n = unsafe { libc::poll(&mut pfd, 1, 100) };
            if n > 0 {
                let mut buf = [0u8; 4096];
                match self.master.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(k) => seen.push_str(&String::from_utf8_lossy(&buf[..k])),
                }
            }
        }
        seen
    }
}

/// warden with its state in `state`/warden (so tests do not share
/// sandboxes), stdin closed.
pub fn warden(state: &Path, args: &[&str]) -> Output {
    warden_env(state, args, &[])
}

/// [`warden`], with `env` added to its environment.
pub fn warden_env(state: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(warden_bin())
        .args(args)
        .env("WARDEN_STATE_DIR", state.join("warden"))
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// [`warden`] with its state directory `state` itself.
pub fn warden_at(state: &Path, args: &[&str]) -> Output {
    Command::new(warden_bin())
        .args(args)
        .env("WARDEN_STATE_DIR", state)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// Stops sandbox `.1` of the state `.0` of [`warden`] when dropped, so
/// that a test failing half-way leaves nothing running.
pub struct Stopper<'a>(pub &'a Path, pub &'a str);

impl Drop for Stopper<'_> {
    fn drop(&mut self) {
        let _ = warden(self.0, &["stop", "--time", "1s", self.1]);
    }
}

/// The output of a command that must have succeeded.
pub fn ok(o: &Output) -> String {
    assert!(
        o.status.success(),
        "status {:?}\nstdout: {}\nstderr: {}",
        o.status.code(),
        stdout(o),
        stderr(o)
    );
    stdout(o)
}

/// Wait until `f` holds, for at most `timeout` (the test fails after).
pub fn wait_until(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A named sandbox's directory under the state of [`warden`].
pub fn sandbox_dir(state: &Path, name: &str) -> PathBuf {
    state.join("warden/sandboxes").join(name)
}

/// The host PID of a named sandbox's supervisor, from its record.
pub fn supervisor_pid(state: &Path, name: &str) -> i32 {
    let rec: serde_json::Value = serde_json::from_slice(
        &std::fs::read(sandbox_dir(state, name).join("supervisor.json")).unwrap(),
    )
    .unwrap();
    rec["pid"].as_i64().unwrap() as i32
}

/// A named sandbox's cgroup directories, from its supervisor's record.
pub fn sandbox_cgroups(state: &Path, name: &str) -> Vec<PathBuf> {
    let rec: serde_json::Value = serde_json::from_slice(
        &std::fs::read(sandbox_dir(state, name).join("supervisor.json")).unwrap(),
    )
    .unwrap();
    rec["cgroups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| PathBuf::from(p.as_str().unwrap()))
        .collect()
}

/// `p`'s permission bits, set-ID and sticky included (a link's own, not
/// its target's).
pub fn mode(p: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777
}

/// `p`'s permission bits set to `m`.
pub fn set_mode(p: &Path, m: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap();
}

/// `bytes` as lower-case hexadecimal, two digits a byte.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Whether process `pid` exists.
pub fn alive(pid: i32) -> bool {
    // SAFETY: kill with signal 0 only checks for the process.
    unsafe { libc::kill(pid, 0) == 0 }
}

/// A small prepared root tree for `--rootfs`: a static busybox as
/// `/usr/bin/busybox` (with `/bin -> usr/bin`), an `/etc/os-release` that
/// names it, and the directories a sandbox mounts over. `None` (with the
/// reason printed) when the host has no static busybox.
pub fn busybox_rootfs() -> Option<TempDir> {
    let Some(busybox) = ["/bin/busybox", "/usr/bin/busybox"]
        .iter()
        .map(Path::new)
        .find(|p| p.exists())
    else {
        skip("busybox (static) is not installed; .ci/run installs busybox-static");
        return None;
    };
    let root = TempDir::new("rootfs");
    for d in ["usr/bin", "etc", "proc", "dev", "tmp"] {
        std::fs::create_dir_all(root.path().join(d)).unwrap();
    }
    copy_program(busybox, &root.path().join("usr/bin/busybox"));
    std::os::unix::fs::symlink("usr/bin", root.path().join("bin")).unwrap();
    std::fs::write(
        root.path().join("etc/os-release"),
        "NAME=warden-test-rootfs\n",
    )
    .unwrap();
    Some(root)
}

/// Whether the calling test is to do its work here. A test that must be
/// alone in its process (one that makes the process a child subreaper and
/// reaps any child it finds) calls this first: in the test binary, where
/// every test runs as a thread of one process, it runs that test again in a
/// test process of its own, fails if that one did not pass, and returns
/// `false`; in the process it started, it returns `true`.
/// `module` is the test's `module_path!()`, `test` its function's name.
pub fn alone_in_a_process(module: &str, test: &str) -> bool {
    const ALONE: &str = "WARDEN_TEST_ALONE";
    // libtest names a test by its path without the crate's name.
    let path = match module.split_once("::") {
        Some((_, rest)) => format!("{rest}::{test}"),
        None => test.to_string(),
    };
    if std::env::var(ALONE).as_deref() == Ok(path.as_str()) {
        return true;
    }
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            path.as_str(),
            "--exact",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(ALONE, &path)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    // Indented, so that its `test result:` line is not read as this
    // binary's own.
    for line in stdout(&out).lines().chain(stderr(&out).lines()) {
        println!("    | {line}");
    }
    assert!(
        out.status.success(),
        "{path} failed in a process of its own"
    );
    assert!(
        stdout(&out).contains("1 passed"),
        "{path} did not run in a process of its own"
    );
    false
}

/// A field of `/proc/PID/status` counted in kB (`VmRSS`, `VmHWM`,
/// `RssFile`, ...); `None` once the process or the field is gone.
pub fn status_kib(pid: impl std::fmt::Display, field: &str) -> Option<u64> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

/// How much a running child's memory grows, in kB: its resident size
/// once it has one (looked for during 5 s), and the peak of it (`VmHWM`)
/// until the child exits or `within` passes, when it is killed (the
/// caller still waits for it).
pub fn memory_growth(child: &mut std::process::Child, within: Duration) -> (u64, u64) {
    let pid = child.id();
    let mut baseline = 0;
    let deadline = Instant::now() + Duration::from_secs(5);
    while baseline == 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        baseline = status_kib(pid, "VmRSS").unwrap_or(0);
    }
    let mut peak = 0;
    let until = Instant::now() + within;
    while Instant::now() < until {
        peak = peak.max(status_kib(pid, "VmHWM").unwrap_or(0));
        if let Ok(Some(_)) = child.try_wait() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.kill();
    (baseline, peak)
}

/// The Landlock ABI this host's kernel offers, as `warden doctor` tells
/// it (0: none, or doctor said nothing).
pub fn landlock_abi() -> i64 {
    Command::new(warden_bin())
        .args(["doctor", "--json"])
        .output()
        .ok()
        .and_then(|o| serde_json::from_slice::<serde_json::Value>(&o.stdout).ok())
        .and_then(|v| v["host"]["landlock_abi"].as_i64())
        .unwrap_or(0)
}

/// A TCP port of the loopback that nothing listens on now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `git ARGS` in `dir` with a test author and committer: whether it ran
/// and succeeded (false where git is missing).
pub fn git_in(dir: &Path, args: &[&str]) -> bool {
    Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@t")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@t")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

/// The cgroup v1 hierarchies mounted here that carry a controller warden
/// limits with (memory, pids, cpu, cpuacct, freezer).
pub fn v1_hierarchies() -> Vec<PathBuf> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    info.lines()
        .filter_map(|l| {
            let (left, right) = l.split_once(" - ")?;
            let mut r = right.split_whitespace();
            if r.next()? != "cgroup" {
                return None;
            }
            let opts = r.nth(1)?;
            let point = left.split_whitespace().nth(4)?;
            ["memory", "pids", "cpu", "cpuacct", "freezer"]
                .iter()
                .any(|c| opts.split(',').any(|o| o == *c))
                .then(|| PathBuf::from(point))
        })
        .collect()
}

/// The delegation an administrator makes once for a rootless user
/// (docs/install.md): `warden-user-UID` in each cgroup v1 hierarchy, the
/// user's. Dropped, it takes away again what it made (only while empty),
/// never one that was there before.
pub struct Delegation(Vec<PathBuf>);

impl Delegation {
    pub fn make(uid: u32, gid: u32) -> Delegation {
        let mut made = Vec::new();
        for h in v1_hierarchies() {
            let d = h.join(format!("warden-user-{uid}"));
            if !d.exists() {
                std::fs::create_dir_all(&d).unwrap();
                made.push(d.clone());
            }
            std::os::unix::fs::chown(&d, Some(uid), Some(gid)).unwrap();
        }
        Delegation(made)
    }

    /// No delegation for `uid` any more, with what sandboxes left in it
    /// (there should be nothing).
    pub fn remove_for(uid: u32) {
        for h in v1_hierarchies() {
            let d = h.join(format!("warden-user-{uid}"));
            if d.exists() {
                for e in std::fs::read_dir(&d).unwrap().flatten() {
                    if e.path().is_dir() {
                        let _ = std::fs::remove_dir(e.path());
                    }
                }
                let _ = std::fs::remove_dir(&d);
            }
        }
    }
}

impl Drop for Delegation {
    fn drop(&mut self) {
        for d in &self.0 {
            let _ = std::fs::remove_dir(d);
        }
    }
}
