//! Attacks on long-lived sandboxes: code run by `warden exec` (or left
//! running by one) against the init that started it, the supervisor and its
//! control socket, the caller's terminal and the host; and the host-side
//! cleanup of a dead supervisor. Each test runs the real `warden` binary and
//! judges from the host.

use crate::common::*;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Run `cmd` (stdout captured) for at most `within`; killed, and the test
/// failed, after.
fn output_within(cmd: &mut Command, within: Duration, what: &str) -> (bool, String) {
    let mut child = cmd.stdout(Stdio::piped()).spawn().unwrap();
    let mut pipe = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = pipe.read_to_string(&mut s);
        s
    });
    let status = finish(child, within, what);
    (status.success(), reader.join().unwrap())
}

/// Wait for `child` at most `within`; killed (and the test failed) after.
fn finish(mut child: Child, within: Duration, what: &str) -> std::process::ExitStatus {
    let deadline = Instant::now() + within;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} did not finish within {within:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// One line of /proc/PID/status, e.g. "Seccomp".
fn status_field(pid: i32, key: &str) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            l.strip_prefix(&format!("{key}:"))
                .map(|v| v.trim().to_string())
        })
        .unwrap_or_default()
}

#[test]
fn an_exec_cannot_reach_the_inits_descriptors_nor_stop_or_end_it_by_signals() {
    let state = TempDir::new("xa-init");
    ok(&warden(state.path(), &["create", "in", "--start"]));
    let _stop = Stopper(state.path(), "in");
    // Everything a process of the sandbox could use to get at the init's
    // end of the spawn channel (its descriptor 3 and up) or its memory.
    let py = r#"
import ctypes, errno, os
r = {}
def t(name, f):
    try:
        f(); r[name] = 'ok'
    except OSError as e:
        r[name] = errno.errorcode.get(e.errno, str(e.errno))
t('fd', lambda: os.listdir('/proc/1/fd'))
t('fd3', lambda: os.readlink('/proc/1/fd/3'))
t('open3', lambda: os.open('/proc/1/fd/3', os.O_RDWR))
t('mem', lambda: open('/proc/1/mem', 'rb').read(1))
t('environ', lambda: open('/proc/1/environ', 'rb').read(1))
t('root', lambda: os.listdir('/proc/1/root/'))
libc = ctypes.CDLL(None, use_errno=True)
got = []
try:
    pidfd = os.pidfd_open(1)
    for fd in range(3, 16):
        n = libc.syscall(438, pidfd, fd, 0)  # pidfd_getfd
        if n >= 0:
            got.append(os.readlink('/proc/self/fd/%d' % n))
    r['getfd'] = errno.errorcode.get(ctypes.get_errno(), '?')
except OSError as e:
    r['getfd'] = errno.errorcode.get(e.errno, '?')
r['got'] = got
print(r, flush=True)
"#;
    let out = ok(&warden(
        state.path(),
        &["exec", "in", "--", "python3", "-c", py],
    ));
    for key in ["fd", "fd3", "open3", "mem", "environ", "root"] {
        assert!(
            !out.contains(&format!("'{key}': 'ok'")),
            "/proc/1 {key} was reachable: {out}"
        );
    }
    assert!(
        out.contains("'got': []"),
        "a descriptor of the init was taken: {out}"
    );
    // Every signal that could stop or end the init, then kill(-1). The
    // sandbox's processes may kill each other (one trust domain), never
    // its init: the prober itself lives on, and the next exec is served.
    let signals = r#"
import os, signal, time
for s in (signal.SIGSTOP, signal.SIGKILL, signal.SIGTERM, signal.SIGINT,
          signal.SIGHUP, signal.SIGQUIT, signal.SIGCHLD):
    os.kill(1, s)
try:
    os.kill(-1, signal.SIGKILL)
except ProcessLookupError:
    pass
time.sleep(0.5)
print('survived', flush=True)
"#;
    let (success, out) = output_within(
        Command::new(warden_bin())
            .args(["exec", "in", "--", "python3", "-c", signals])
            .env("WARDEN_STATE_DIR", state.path().join("warden"))
            .stdin(Stdio::null()),
        Duration::from_secs(15),
        "the signalling exec",
    );
    assert!(
        success && out == "survived\n",
        "a signal from inside ended the sandbox: {out:?}"
    );
    let (success, seen) = output_within(
        Command::new(warden_bin())
            .args(["exec", "in", "--", "echo", "still-served"])
            .env("WARDEN_STATE_DIR", state.path().join("warden"))
            .stdin(Stdio::null()),
        Duration::from_secs(10),
        "the exec after the signals",
    );
    assert!(success && seen == "still-served\n", "{seen}");
}

#[test]
fn a_process_left_by_an_exec_carries_every_restriction_of_the_init() {
    let state = TempDir::new("xa-restr");
    let marker = unique("xa-left");
    ok(&warden(state.path(), &["create", "rs", "--start"]));
    let _stop = Stopper(state.path(), "rs");
    let script = format!("exec -a {marker} sleep 1000");
    ok(&warden(
        state.path(),
        &["exec", "-d", "rs", "--", "bash", "-c", &script],
    ));
    wait_until("the detached process", Duration::from_secs(10), || {
        pids_with_marker(&marker).len() == 1
    });
    let pid = pids_with_marker(&marker)[0];
    let init: i32 = status_field(pid, "PPid").parse().unwrap();
    let sup = supervisor_pid(state.path(), "rs");
    assert_eq!(
        status_field(init, "PPid"),
        sup.to_string(),
        "the detached process is not a child of the sandbox's init"
    );
    // Judged from the host: what the kernel says about the process.
    for key in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
        assert_eq!(status_field(pid, key), "0000000000000000", "{key}");
    }
    assert_eq!(status_field(pid, "NoNewPrivs"), "1");
    assert_eq!(status_field(pid, "Seccomp"), "2");
    assert_eq!(
        status_field(pid, "Seccomp_filters"),
        status_field(init, "Seccomp_filters")
    );
    assert_eq!(status_field(init, "Seccomp"), "2");
    // The init's namespaces, not the host's; its cgroup; its limits.
    for ns in ["user", "mnt", "pid", "net", "ipc", "uts", "cgroup"] {
        let link = |p: String| std::fs::read_link(p).unwrap();
        let theirs = link(format!("/proc/{pid}/ns/{ns}"));
        assert_eq!(theirs, link(format!("/proc/{init}/ns/{ns}")), "{ns}");
        assert_ne!(theirs, link(format!("/proc/self/ns/{ns}")), "{ns}");
    }
    let read = |p: String| std::fs::read_to_string(p).unwrap();
    assert_eq!(
        read(format!("/proc/{pid}/cgroup")),
        read(format!("/proc/{init}/cgroup"))
    );
    assert_eq!(
        read(format!("/proc/{pid}/limits")),
        read(format!("/proc/{init}/limits"))
    );
    assert!(read(format!("/proc/{pid}/limits"))
        .lines()
        .any(|l| l.starts_with("Max core file size") && l.contains(" 0 ")));
    // And Landlock, seen from inside: no write outside the workspace, even
    // where the mount would be writable (its /dev/shm is; /usr is not).
    let out = ok(&warden(
        state.path(),
        &[
            "exec",
            "rs",
            "--",
            "sh",
            "-c",
            "echo x > /usr/x 2>/dev/null && echo wrote-usr; echo x > /workspace/ok && echo wrote-ws",
        ],
    ));
    assert_eq!(out, "wrote-ws\n");
}

/// A client of the control protocol, run inside a sandbox: hello, then an
/// exec of `sh -c SCRIPT` with /dev/null as its stdio; prints the replies.
const CONTROL_CLIENT: &str = r#"
import array, json, os, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
try:
    s.connect(sys.argv[1])
    s.send(json.dumps({'op': 'hello', 'version': 1}).encode())
    print('hello', s.recv(65536), flush=True)
    null = os.open('/dev/null', os.O_RDWR)
    req = {'op': 'exec', 'argv': ['sh', '-c', sys.argv[2]], 'env': [], 'cwd': None, 'tty': False}
    s.sendmsg([json.dumps(req).encode()],
              [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array('i', [null] * 3))])
    for _ in range(2):
        m = s.recv(65536)
        print('reply', m, flush=True)
        if not m or b'exited' in m or b'error' in m:
            break
except OSError as e:
    print('refused:', e)
"#;

#[test]
fn a_rootless_sandbox_that_sees_the_state_directory_cannot_drive_a_supervisor() {
    // Rootless, a sandbox's processes are their owner's UID, as the
    // supervisors are: a read-only view of the state directory (here
    // `--ro` of it; `--ro ~` shows it too) reaches every control socket.
    let Some(user) = Unprivileged::get() else {
        skip("no unprivileged user could be made");
        return;
    };
    let state = TempDir::new("xa-ctl");
    let loot = TempDir::new("xa-ctl-loot");
    user.own(state.path());
    user.own(loot.path());
    let bin = user.bin.to_str().unwrap().to_string();
    let run = |args: &[&str]| {
        user.command(&bin)
            .args(args)
            .env("WARDEN_STATE_DIR", state.path().join("warden"))
            .output()
            .unwrap()
    };
    // The victim may write `loot`; the attacker may only read the state.
    let out = run(&["create", "victim", "--start", "--rw", loot.str()]);
    if !out.status.success() && stderr(&out).contains("namespaces") {
        skip(&format!("user namespaces unavailable: {}", stderr(&out)));
        return;
    }
    ok(&out);
    let _stop_victim = UserStopper(&run, "victim");
    ok(&run(&[
        "create",
        "attacker",
        "--start",
        "--ro",
        state.str(),
    ]));
    let _stop_attacker = UserStopper(&run, "attacker");
    let pwned = loot.path().join("pwned");
    let script = format!("echo from-the-attacker > {}", pwned.display());
    let victim_sock = state.path().join("warden/sandboxes/victim/control.sock");
    let own_sock = state.path().join("warden/sandboxes/attacker/control.sock");
    let out = ok(&run(&[
        "exec",
        "attacker",
        "--",
        "sh",
        "-c",
        &format!(
            "(echo x > {p}) 2>/dev/null && echo direct-write; \
             python3 -c \"$0\" {v} \"$1\"; python3 -c \"$0\" {o} 'echo own'",
            p = pwned.display(),
            v = victim_sock.display(),
            o = own_sock.display(),
        ),
        CONTROL_CLIENT,
        &script,
    ]));
    assert!(!out.contains("direct-write"), "{out}");
    assert!(
        !pwned.exists(),
        "the attacker ran a command in another sandbox through its control socket: {out}"
    );
    assert!(!out.contains("spawned"), "{out}");
    assert!(out.contains("refused"), "{out}");
    // The owner, from the host, still drives both.
    ok(&run(&["exec", "victim", "--", "true"]));
    ok(&run(&["exec", "attacker", "--", "true"]));
}

/// Stops a sandbox of the unprivileged user when dropped.
struct UserStopper<'a, F: Fn(&[&str]) -> Output>(&'a F, &'a str);

impl<F: Fn(&[&str]) -> Output> Drop for UserStopper<'_, F> {
    fn drop(&mut self) {
        let _ = (self.0)(&["stop", "--time", "1s", self.1]);
    }
}

/// A cgroup directory the test may make as root: in the v1 `pids`
/// hierarchy or the v2 mount, whichever this host has.
fn scratch_cgroup_root() -> Option<PathBuf> {
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let mut v2 = None;
    for l in mounts.lines() {
        let (left, right) = l.split_once(" - ")?;
        let mut r = right.split_whitespace();
        let (fstype, _, opts) = (r.next()?, r.next()?, r.next().unwrap_or(""));
        let point = left.split_whitespace().nth(4)?;
        if fstype == "cgroup" && opts.split(',').any(|o| o == "pids") {
            return Some(PathBuf::from(point));
        }
        if fstype == "cgroup2" && v2.is_none() {
            v2 = Some(PathBuf::from(point));
        }
    }
    v2
}

#[test]
fn a_dead_supervisors_cleanup_kills_nothing_outside_the_sandbox() {
    // Where no cgroup can be made for the sandbox (rootless, not
    // delegated; or a hierarchy warden does not use), its init stays in
    // its caller's cgroup. A caller in a service or scope named `warden-*`
    // (warden-agent.service) had that cgroup recorded as the sandbox's, and
    // the cleanup of a dead supervisor killed everything in it.
    if !is_root() {
        skip("making a cgroup and moving processes into it needs root");
        return;
    }
    let Some(user) = Unprivileged::get() else {
        skip("no unprivileged user could be made");
        return;
    };
    let Some(root) = scratch_cgroup_root() else {
        skip("no cgroup hierarchy to make a scratch cgroup in");
        return;
    };
    let has_setpriv = Command::new("setpriv").arg("--version").output();
    if !matches!(has_setpriv, Ok(o) if o.status.success()) {
        skip("setpriv (util-linux) is missing");
        return;
    }
    let cg = root.join(unique("warden-service"));
    std::fs::create_dir(&cg).unwrap();
    struct Gone(PathBuf, Vec<Child>);
    impl Drop for Gone {
        fn drop(&mut self) {
            for c in &mut self.1 {
                let _ = c.kill();
                let _ = c.wait();
            }
            std::thread::sleep(Duration::from_millis(50));
            let _ = std::fs::remove_dir(&self.0);
        }
    }
    let mut gone = Gone(cg.clone(), Vec::new());
    // A process of the service that has nothing to do with any sandbox.
    let victim = user
        .command("sleep")
        .arg("1000")
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    std::fs::write(cg.join("cgroup.procs"), victim.id().to_string()).unwrap();
    let victim_pid = victim.id() as i32;
    gone.1.push(victim);
    let state = TempDir::new("xa-cg");
    user.own(state.path());
    let env_state = state.path().join("warden");
    let bin = user.bin.to_str().unwrap().to_string();
    // The service starts a sandbox: its warden runs in the service's cgroup.
    let out = Command::new("sh")
        .args([
            "-c",
            "echo $$ > \"$0/cgroup.procs\" && exec setpriv --reuid \"$1\" --regid \"$2\" --clear-groups -- \"$3\" create cg --start",
        ])
        .arg(&cg)
        .arg(user.uid.to_string())
        .arg(user.gid.to_string())
        .arg(&bin)
        .env("WARDEN_STATE_DIR", &env_state)
        .env("HOME", "/home/warden-test")
        .current_dir("/")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    if !out.status.success() && stderr(&out).contains("namespaces") {
        skip(&format!("user namespaces unavailable: {}", stderr(&out)));
        return;
    }
    ok(&out);
    let as_user = |args: &[&str]| {
        user.command(&bin)
            .args(args)
            .env("WARDEN_STATE_DIR", &env_state)
            .output()
            .unwrap()
    };
    // Should the test fail before the kill below.
    let _stop = UserStopper(&as_user, "cg");
    let record = sandbox_dir(state.path(), "cg").join("supervisor.json");
    wait_until("the supervisor's record", Duration::from_secs(10), || {
        record.exists()
    });
    let sup = supervisor_pid(state.path(), "cg");
    // The supervisor dies outright (OOM killer, a kill -9), and its
    // sandbox with it.
    // SAFETY: SIGKILL to the supervisor this test started.
    unsafe { libc::kill(sup, libc::SIGKILL) };
    wait_until("the supervisor to go", Duration::from_secs(10), || {
        std::fs::read_to_string(format!("/proc/{sup}/stat"))
            .map(|s| s.contains(") Z ") || s.contains(") X "))
            .unwrap_or(true)
    });
    // The owner looks at their sandboxes, from outside the service.
    let ls = ok(&as_user(&["ls"]));
    assert!(ls.contains("dead"), "{ls}");
    std::thread::sleep(Duration::from_millis(100));
    let victim = gone.1.first_mut().unwrap();
    assert!(
        victim.try_wait().unwrap().is_none() && alive(victim_pid),
        "the cleanup of a dead supervisor killed a process of its caller's cgroup {}",
        cg.display()
    );
}

#[test]
fn a_process_left_by_an_exec_cannot_use_the_callers_terminal_after_it_returns() {
    let state = TempDir::new("xa-tty");
    ok(&warden(state.path(), &["create", "tt", "--start"]));
    let _stop = Stopper(state.path(), "tt");
    let mut term = TestTerminal::open(24, 80);
    let exec = |args: &[&str], stdin: Stdio| {
        Command::new(warden_bin())
            .args(args)
            .env("WARDEN_STATE_DIR", state.path().join("warden"))
            .stdin(stdin)
            .stdout(term.slave.try_clone().unwrap())
            .stderr(term.slave.try_clone().unwrap())
            .status()
            .unwrap()
    };
    // `cmd | warden exec ...` at a prompt: stdout and stderr are the
    // person's terminal (and its descriptor reads as well as writes). The
    // command leaves a lurker that waits until warden has returned.
    let out_lurker = "(sleep 0.5; head -c 12 <&1 > /tmp/stolen-out; \
                      echo '[sudo] password for you:' >&2) & echo started";
    assert!(exec(&["exec", "tt", "--", "sh", "-c", out_lurker], Stdio::null()).success());
    // `warden exec -T`: stdin is the terminal too.
    let in_lurker = "(sleep 0.5; head -c 12 > /tmp/stolen-in) & echo started";
    assert!(exec(
        &["exec", "-T", "tt", "--", "sh", "-c", in_lurker],
        Stdio::from(term.slave.try_clone().unwrap())
    )
    .success());
    // While an exec runs, it still has the terminal's input and output,
    // all of it, before warden returns.
    let mut child = Command::new(warden_bin())
        .args([
            "exec",
            "-T",
            "tt",
            "--",
            "sh",
            "-c",
            "read x; echo got-$x; head -c 300000 /dev/zero | tr '\\0' x; echo; echo END >&2",
        ])
        .env("WARDEN_STATE_DIR", state.path().join("warden"))
        .stdin(term.slave.try_clone().unwrap())
        .stdout(term.slave.try_clone().unwrap())
        .stderr(term.slave.try_clone().unwrap())
        .spawn()
        .unwrap();
    term.master.write_all(b"typed-during\n").unwrap();
    let seen = term.expect("END", Duration::from_secs(10));
    assert!(seen.contains("got-typed-during"), "{seen:?}");
    assert_eq!(seen.matches('x').count(), 300_000, "output lost");
    assert!(child.wait().unwrap().success());
    // Both lurkers' execs have returned; the person types at their
    // shell's next prompt.
    term.master.write_all(b"hunter2-pass\n").unwrap();
    std::thread::sleep(Duration::from_millis(800));
    let screen = term.expect("[sudo]", Duration::from_millis(500));
    let stolen = ok(&warden(
        state.path(),
        &[
            "exec",
            "tt",
            "--",
            "sh",
            "-c",
            "cat /tmp/stolen-out /tmp/stolen-in 2>/dev/null; true",
        ],
    ));
    assert!(
        !stolen.contains("hunter2"),
        "a process left in the sandbox read the caller's terminal after warden exec returned: {stolen:?}"
    );
    assert!(
        !screen.contains("[sudo]"),
        "a process left in the sandbox wrote to the caller's terminal after warden exec returned: {screen:?}"
    );
    assert_eq!(seen.matches("started").count(), 2, "{seen:?}");
}

#[test]
fn detached_execs_do_not_lock_the_owner_out() {
    // Each connection is a thread and a slot (256 at most). An exec's
    // connection lasted as long as its process, even when its caller had
    // left (`exec -d`): after 256 detached execs every request was refused,
    // `stop` too, and only a kill of the supervisor ended the sandbox.
    let state = TempDir::new("xa-slots");
    ok(&warden(state.path(), &["create", "sl", "--start"]));
    let _stop = Stopper(state.path(), "sl");
    let sock = sandbox_dir(state.path(), "sl").join("control.sock");
    let null = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
        .unwrap();
    use std::os::fd::AsFd;
    for i in 0..256 {
        let req: warden_runtime::protocol::ExecRequest = serde_json::from_value(
            serde_json::json!({"argv": ["sleep", "1000"], "env": [], "cwd": null, "tty": false}),
        )
        .unwrap();
        let conn = warden_runtime::client::Connection::open(&sock)
            .unwrap_or_else(|e| panic!("connection {i}: {e}"));
        // Started, then left running: what `warden exec -d` does.
        let running = conn
            .exec(req, &[null.as_fd(), null.as_fd(), null.as_fd()])
            .unwrap_or_else(|e| panic!("exec {i}: {e}"));
        drop(running);
    }
    std::thread::sleep(Duration::from_millis(700));
    let ps = warden(state.path(), &["ps", "--json", "sl"]);
    assert!(
        ps.status.success() && stdout(&ps).matches("sleep 1000").count() == 256,
        "{} {}",
        stdout(&ps),
        stderr(&ps)
    );
    let stopped = warden(state.path(), &["stop", "--time", "1s", "sl"]);
    assert!(
        stopped.status.success(),
        "the owner could not stop the sandbox: {}",
        stderr(&stopped)
    );
}

#[test]
fn departed_followers_do_not_lock_the_owner_out() {
    // `warden logs -f` ended with Ctrl-C, 256 times, in a quiet sandbox:
    // each follower's thread waited for the next event to notice.
    let state = TempDir::new("xa-follow");
    ok(&warden(state.path(), &["create", "fo", "--start"]));
    let _stop = Stopper(state.path(), "fo");
    let sock = sandbox_dir(state.path(), "fo").join("control.sock");
    for i in 0..256 {
        use nix::sys::socket::{
            connect, recv, send, socket, AddressFamily, MsgFlags, SockFlag, SockType, UnixAddr,
        };
        use std::os::fd::AsRawFd;
        let s = socket(
            AddressFamily::Unix,
            SockType::SeqPacket,
            SockFlag::SOCK_CLOEXEC,
            None,
        )
        .unwrap();
        connect(s.as_raw_fd(), &UnixAddr::new(&sock).unwrap())
            .unwrap_or_else(|e| panic!("connection {i}: {e}"));
        send(
            s.as_raw_fd(),
            br#"{"op":"hello","version":1}"#,
            MsgFlags::empty(),
        )
        .unwrap();
        let mut buf = [0u8; 4096];
        let n = recv(s.as_raw_fd(), &mut buf, MsgFlags::empty()).unwrap();
        assert!(
            String::from_utf8_lossy(&buf[..n]).contains("\"hello\""),
            "connection {i}"
        );
        send(s.as_raw_fd(), br#"{"op":"follow"}"#, MsgFlags::empty()).unwrap();
        drop(s);
    }
    std::thread::sleep(Duration::from_millis(700));
    let stopped = warden(state.path(), &["stop", "--time", "1s", "fo"]);
    assert!(
        stopped.status.success(),
        "the owner could not stop the sandbox: {}",
        stderr(&stopped)
    );
}

#[test]
fn command_lines_set_inside_are_not_copied_whole_into_the_supervisor() {
    // A process's command line is the sandbox's to fill (megabytes, in its
    // own memory, under its own limits). `ps`, `status` (every `warden ls`)
    // and `stop` read those of every process into the supervisor, a host
    // process outside the sandbox's limits: twice their size, at every call.
    let state = TempDir::new("xa-cmdline");
    let marker = unique("xa-fat");
    ok(&warden(state.path(), &["create", "fa", "--start"]));
    let _stop = Stopper(state.path(), "fa");
    // The marker in two halves: only the fat processes' lines hold it.
    let (a, b) = marker.split_at(marker.len() / 2);
    let fat = format!(
        "import subprocess, time\n\
         big = ['x' * 120000] * 16\n\
         ps = [subprocess.Popen(['sh', '-c', 'sleep 1000; true', '{a}' + '{b}'] + big) for _ in range(24)]\n\
         time.sleep(1000)\n"
    );
    ok(&warden(
        state.path(),
        &["exec", "-d", "fa", "--", "python3", "-c", &fat],
    ));
    wait_until("the fat processes", Duration::from_secs(10), || {
        pids_with_marker(&marker).len() == 24
    });
    let sup = supervisor_pid(state.path(), "fa");
    let before = status_kib(sup, "VmHWM").unwrap();
    let ps = warden(state.path(), &["ps", "fa"]);
    ok(&warden(state.path(), &["ls"]));
    let grown = status_kib(sup, "VmHWM").unwrap().saturating_sub(before);
    assert!(
        grown < 16 * 1024,
        "the supervisor grew by {grown} kB for 24 command lines of 1.9 MB"
    );
    assert!(
        ps.status.success() && stdout(&ps).matches(&marker).count() == 24,
        "ps: {} {}",
        stdout(&ps).chars().take(300).collect::<String>(),
        stderr(&ps)
    );
}

#[test]
fn a_process_left_on_an_execs_terminal_cannot_hold_warden_exec_open() {
    // With a terminal, what the process wrote last is drained after it
    // ends; a process left behind that ignores the hang-up and writes for
    // ever kept that drain, `warden exec` (and the caller's terminal, in
    // raw mode) with it, and kept writing to the person's screen.
    let state = TempDir::new("xa-flood");
    ok(&warden(state.path(), &["create", "fl", "--start"]));
    let _stop = Stopper(state.path(), "fl");
    let term = TestTerminal::open(24, 80);
    let child = term.spawn(
        Command::new(warden_bin())
            .args([
                "exec",
                "-t",
                "fl",
                "--",
                "sh",
                "-c",
                "trap '' HUP; for i in 1 2 3 4; do yes flood-flood-flood & done; sleep 0.3",
            ])
            .env("WARDEN_STATE_DIR", state.path().join("warden")),
    );
    // The person's terminal shows what comes, at the pace of a terminal
    // over a slow link (slower than the flood).
    let mut master = term.master.try_clone().unwrap();
    std::thread::spawn(move || {
        let mut buf = [0u8; 1024];
        while matches!(master.read(&mut buf), Ok(n) if n > 0) {
            std::thread::sleep(Duration::from_millis(20));
        }
    });
    let status = finish(child, Duration::from_secs(3), "warden exec -t");
    assert!(status.success(), "{status:?}");
}

#[test]
fn nothing_a_sandbox_may_write_holds_wardens_state_directory() {
    // A writable bind over the state directory would let a sandbox rewrite
    // the stored spec of any named sandbox (its own next start included).
    let base = TempDir::new("xa-state-overlap");
    let state = base.path().join("warden");
    std::fs::create_dir_all(&state).unwrap();
    let inside = state.join("sandboxes");
    std::fs::create_dir_all(&inside).unwrap();
    for args in [
        vec!["run", "--rw", state.to_str().unwrap(), "--", "true"],
        vec!["run", "--rw", inside.to_str().unwrap(), "--", "true"],
        vec!["run", "-w", base.str(), "--", "true"],
        vec!["create", "over", "--rw", base.str()],
    ] {
        let out = Command::new(warden_bin())
            .args(&args)
            .env("WARDEN_STATE_DIR", &state)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(125), "{args:?} was accepted");
        assert!(
            stderr(&out).contains("state directory"),
            "{args:?}: {}",
            stderr(&out)
        );
    }
    // Nothing was created on the way.
    assert!(!state.join("sandboxes/over").exists());
    assert!(!state.join("workspaces/over").exists());
    // A narrower directory beside it is fine.
    let beside = base.path().join("project");
    std::fs::create_dir_all(&beside).unwrap();
    let out = Command::new(warden_bin())
        .args([
            "run",
            "--no-tty",
            "-w",
            beside.to_str().unwrap(),
            "--",
            "true",
        ])
        .env("WARDEN_STATE_DIR", &state)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

#[test]
fn a_bind_that_holds_the_state_directory_shows_it_empty_and_unreadable() {
    // `--ro ~` (or a workspace over ~) holds ~/.local/state/warden: the
    // stored specs (their --env values) and the logs of every sandbox.
    let base = TempDir::new("xa-state-hidden");
    let state = base.path().join("warden");
    let planted = state.join("sandboxes/other");
    std::fs::create_dir_all(&planted).unwrap();
    std::fs::write(planted.join("sandbox.json"), "PLANTED-SPEC").unwrap();
    let project = base.path().join("project");
    std::fs::create_dir_all(&project).unwrap();
    let script = format!(
        "cat {0}/sandboxes/other/sandbox.json; ls -A {0} | wc -l; cat /workspace/../*/warden/sandboxes/other/sandbox.json 2>/dev/null; echo end",
        state.display()
    );
    let run = |args: &[&str]| {
        Command::new(warden_bin())
            .args(args)
            .env("WARDEN_STATE_DIR", &state)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let out = run(&[
        "run",
        "--no-tty",
        "--ro",
        base.str(),
        "--",
        "sh",
        "-c",
        &script,
    ]);
    assert!(stdout(&out).contains("end"), "{}", stderr(&out));
    assert!(
        !stdout(&out).contains("PLANTED"),
        "read through --ro: {}",
        stdout(&out)
    );
    // A named sandbox over a workspace that holds the state directory.
    ok(&run(&["create", "over", "-w", base.str(), "--start"]));
    let inside =
        "cat /workspace/warden/sandboxes/other/sandbox.json; ls /workspace/warden | wc -l; echo end";
    let out = run(&["exec", "over", "--", "sh", "-c", inside]);
    let _ = run(&["stop", "over"]);
    assert!(stdout(&out).contains("end"), "{}", stderr(&out));
    assert!(
        !stdout(&out).contains("PLANTED"),
        "read through the workspace: {}",
        stdout(&out)
    );
}
