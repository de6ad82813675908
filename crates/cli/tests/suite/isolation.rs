//! Real sandboxes, real attacks: each test plants something on the host (a
//! file, a process, a listener) and checks what the code inside could do
//! to it.

use crate::common::*;
use std::io::Read;
use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn host_files_outside_the_mounts_are_unreadable() {
    let planted = TempDir::new("planted");
    let secret = unique("host-secret");
    let file = planted.path().join("credentials");
    std::fs::write(&file, &secret).unwrap();
    let home_secret = std::env::var("HOME")
        .ok()
        .map(|h| std::path::PathBuf::from(h).join(format!(".{}", unique("warden-planted"))));
    if let Some(h) = &home_secret {
        let _ = std::fs::write(h, &secret);
    }
    let script = format!(
        "cat {f} 2>&1; cat {h} 2>&1; ls /root /home 2>&1; cat /etc/shadow 2>&1; grep -r {s} /etc /tmp 2>/dev/null; true",
        f = file.display(),
        h = home_secret.as_ref().map(|h| h.display().to_string()).unwrap_or_default(),
        s = secret
    );
    let out = run_sh(&[], &script);
    if let Some(h) = &home_secret {
        let _ = std::fs::remove_file(h);
    }
    assert_eq!(code(&out), 0, "stderr: {}", stderr(&out));
    let seen = stdout(&out);
    assert!(
        !seen.contains(&secret),
        "a planted host file was read: {seen}"
    );
    assert!(seen.contains("No such file"), "{seen}");
    assert!(
        seen.contains("shadow: Permission denied") || !seen.contains("root:"),
        "{seen}"
    );
}

#[test]
fn writes_outside_the_workspace_fail_and_writes_inside_persist() {
    let ws = TempDir::new("ws");
    let out = run_sh(
        &["--workspace", ws.str()],
        "echo kept > /workspace/result.txt && pwd; \
         for p in /etc/warden-x /usr/warden-x /warden-x /var/warden-x /proc/warden-x; do \
           touch $p 2>/dev/null && echo WROTE $p; done; \
         echo scratch > /tmp/t && cat /tmp/t",
    );
    assert_eq!(code(&out), 0, "stderr: {}", stderr(&out));
    let s = stdout(&out);
    assert!(s.starts_with("/workspace\n"), "working directory: {s}");
    assert!(
        !s.contains("WROTE"),
        "a write outside the workspace succeeded: {s}"
    );
    assert!(s.contains("scratch"));
    assert_eq!(
        std::fs::read_to_string(ws.path().join("result.txt")).unwrap(),
        "kept\n"
    );
    assert!(!std::path::Path::new("/warden-x").exists());
}

#[test]
fn workspace_files_keep_their_owner_on_the_host() {
    use std::os::unix::fs::MetadataExt;
    let ws = TempDir::new("owner");
    let out = run_sh(&["-w", ws.str()], "echo x > made-inside");
    assert_eq!(code(&out), 0, "stderr: {}", stderr(&out));
    let dir_owner = std::fs::metadata(ws.path()).unwrap().uid();
    let file_owner = std::fs::metadata(ws.path().join("made-inside"))
        .unwrap()
        .uid();
    assert_eq!(dir_owner, file_owner);
}

#[test]
fn the_sandbox_sees_only_its_own_processes() {
    let marker = format!("{}.{}", 700 + std::process::id() % 83, std::process::id());
    let mut host = Command::new("sleep").arg(&marker).spawn().unwrap();
    // Every command line in the sandbox's /proc; the host's sleep must not
    // be among them (grep's own line does not start with "sleep").
    let out = run_sh(
        &[],
        &format!(
            "ls /proc | grep -c '^[0-9]'; \
             for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f; echo; done | grep -c '^sleep {marker} $'; \
             echo pid=$$"
        ),
    );
    let _ = host.kill();
    let _ = host.wait();
    let s = stdout(&out);
    let mut lines = s.lines();
    let count: u32 = lines.next().unwrap_or("999").trim().parse().unwrap_or(999);
    assert!(count <= 6, "the sandbox saw {count} processes: {s}");
    assert_eq!(
        lines.next().map(str::trim),
        Some("0"),
        "a host process was visible: {s}"
    );
    assert!(
        s.contains("pid=2"),
        "the command is not PID 2 under warden's init: {s}"
    );
}

#[test]
fn host_processes_cannot_be_signalled() {
    let mut host = Command::new("sleep").arg("30").spawn().unwrap();
    let pid = host.id();
    let out = run_sh(
        &[],
        &format!("kill -9 {pid} 2>&1; kill -9 -1 2>&1; echo done"),
    );
    std::thread::sleep(Duration::from_millis(100));
    let alive = host.try_wait().unwrap().is_none();
    let _ = host.kill();
    let _ = host.wait();
    assert!(stdout(&out).contains("done"));
    assert!(alive, "a host process was killed from inside the sandbox");
}

#[test]
fn the_command_has_no_capabilities_and_no_new_privs() {
    let out = run_sh(
        &[],
        "grep -E '^(Cap(Inh|Prm|Eff|Bnd|Amb)|NoNewPrivs|Seccomp):' /proc/self/status",
    );
    let s = stdout(&out);
    for set in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
        assert!(
            s.lines()
                .any(|l| l.starts_with(set) && l.ends_with("0000000000000000")),
            "{set} not empty: {s}"
        );
    }
    assert!(s.contains("NoNewPrivs:\t1"), "{s}");
    assert!(s.contains("Seccomp:\t2"), "no seccomp filter: {s}");
}

#[test]
fn the_network_namespace_holds_only_loopback_and_host_listeners_get_nothing() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let script = format!(
        "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '; \
         python3 -c 'import socket; s=socket.socket(); s.settimeout(2)\n\
try:\n  s.connect((\"127.0.0.1\", {port})); print(\"CONNECTED\")\nexcept Exception as e: print(\"refused\", e)'"
    );
    let out = run_sh(&[], &script);
    let s = stdout(&out);
    assert_eq!(s.lines().next(), Some("lo"), "{s}");
    assert_eq!(
        s.lines()
            .filter(|l| !l.is_empty() && !l.starts_with("refused") && !l.starts_with("CONNECTED"))
            .count(),
        1,
        "interfaces: {s}"
    );
    assert!(!s.contains("CONNECTED"), "{s}");
    std::thread::sleep(Duration::from_millis(100));
    assert!(
        listener.accept().is_err(),
        "a connection from the sandbox reached the host listener"
    );
}

#[test]
fn credentials_in_the_host_environment_do_not_reach_the_sandbox() {
    let out = Command::new(warden_bin())
        .args([
            "run",
            "--no-tty",
            "--pass-env",
            "PASSED_ONE",
            "--env",
            "SET_ONE=v",
            "--",
            "env",
        ])
        .env("GITHUB_TOKEN", "ghp_planted")
        .env("AWS_SECRET_ACCESS_KEY", "aws_planted")
        .env("PASSED_ONE", "p1")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let s = stdout(&out);
    assert!(!s.contains("planted"), "{s}");
    assert!(
        s.contains("PASSED_ONE=p1") && s.contains("SET_ONE=v"),
        "{s}"
    );
    assert!(s.contains("HOME=/home/sandbox"), "{s}");
}

#[test]
fn timeout_kills_a_double_forked_daemon() {
    let marker = format!("{}.{}", 900 + std::process::id() % 97, std::process::id());
    let start = Instant::now();
    let out = run_sh(
        &["--timeout", "1s"],
        &format!("setsid nohup sleep {marker} >/dev/null 2>&1 & sleep 60"),
    );
    assert_eq!(code(&out), 124, "stderr: {}", stderr(&out));
    assert!(start.elapsed() < Duration::from_secs(20));
    assert!(stderr(&out).contains("timeout"), "{}", stderr(&out));
    let left = pids_with_marker(&format!("sleep {marker}"));
    assert!(left.is_empty(), "the daemon survived the sandbox: {left:?}");
}

#[test]
fn a_daemon_left_behind_dies_with_the_sandbox() {
    let marker = format!("{}.{}", 800 + std::process::id() % 89, std::process::id());
    let out = run_sh(
        &[],
        &format!("setsid nohup sleep {marker} >/dev/null 2>&1 & echo started"),
    );
    assert_eq!(code(&out), 0, "stderr: {}", stderr(&out));
    let left = pids_with_marker(&format!("sleep {marker}"));
    assert!(left.is_empty(), "a process outlived the sandbox: {left:?}");
}

#[test]
fn exit_status_follows_the_conventions() {
    assert_eq!(code(&run_sh(&[], "exit 0")), 0);
    assert_eq!(code(&run_sh(&[], "exit 7")), 7);
    assert_eq!(code(&run_sh(&[], "kill -TERM $$")), 143);
    let nf = Command::new(warden_bin())
        .args(["run", "--no-tty", "--", "no-such-command-here"])
        .output()
        .unwrap();
    assert_eq!(code(&nf), 127);
    assert!(stderr(&nf).contains("not found"), "{}", stderr(&nf));
    let ne = Command::new(warden_bin())
        .args(["run", "--no-tty", "--", "/etc/hostname"])
        .output()
        .unwrap();
    assert_eq!(code(&ne), 126);
}

#[test]
fn json_events_dash_is_standard_output() {
    let out = Command::new(warden_bin())
        .args([
            "run",
            "--no-tty",
            "--no-audit-log",
            "--json-events",
            "-",
            "--",
            "true",
        ])
        .current_dir(std::env::temp_dir())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let events: Vec<serde_json::Value> = stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(events.first().unwrap()["event"], "created");
    assert_eq!(events.last().unwrap()["event"], "exited");
    assert!(
        !std::env::temp_dir().join("-").exists(),
        "a file named '-' was made"
    );
}

#[test]
fn bad_input_is_a_clear_error_with_status_125_and_nothing_started() {
    let cases: &[(&[&str], &str)] = &[
        (&["run", "--", "true", "--workspace"], ""),
        (
            &[
                "run",
                "--workspace",
                "/no/such/dir",
                "--",
                "touch",
                "/workspace/x",
            ],
            "does not exist",
        ),
        (&["run", "--timeout", "soon", "--", "true"], "duration"),
        (&["run", "--memory", "4 GB", "--", "true"], "size"),
        (&["run", "--bogus-flag", "--", "true"], "--bogus-flag"),
        (&["run", "--pids", "1", "--", "true"], "pids"),
        (
            &["run", "--workspace", "relative/dir/not/there", "--", "true"],
            "does not exist",
        ),
        (&["run", "--workspace", "/tmp/..", "--", "true"], "'..'"),
        (&["run", "--rw", "/", "--", "true"], "not allowed"),
        (
            &["run", "--allow-domain", "https://example.com", "--", "true"],
            "URL",
        ),
        (
            &["run", "--allow-domain", "*.com", "--", "true"],
            "too wide",
        ),
        (
            &["run", "--allow-domain", "a.com:99999", "--", "true"],
            "port",
        ),
        (
            &[
                "run",
                "--allow-domain",
                "a.com",
                "--add-host",
                "nohost",
                "--",
                "true",
            ],
            "NAME=IP",
        ),
        (&["run", "--allow-http", "--", "true"], "--allow-domain"),
        (&["run"], "CMD"),
        (
            &["run", "--file-size", "0", "--", "true"],
            "--file-size 0 would make every write fail",
        ),
        (
            &[
                "run",
                "--allow-domain",
                "a.test",
                "--egress-idle-timeout",
                "0s",
                "--",
                "true",
            ],
            "--egress-idle-timeout must be longer than zero",
        ),
        (
            &[
                "run",
                "--workspace",
                concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml"),
                "--",
                "true",
            ],
            "is a file, not a directory",
        ),
    ];
    for (args, needle) in cases {
        let out = Command::new(warden_bin())
            .args(*args)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        if args.len() == 4 && args[1] == "--" {
            // `--workspace` after `--` is the command's argument, not warden's.
            continue;
        }
        assert_eq!(code(&out), 125, "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(needle), "{args:?}: {}", stderr(&out));
        assert!(
            !stderr(&out).contains("panicked"),
            "{args:?}: {}",
            stderr(&out)
        );
    }
}

#[test]
fn no_mount_is_left_behind_on_the_host() {
    let before = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let ws = TempDir::new("mnt");
    let out = run_sh(&["-w", ws.str(), "--ro", "/usr/share"], "true");
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let after = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert_eq!(before.lines().count(), after.lines().count());
}

#[test]
fn json_events_record_the_lifecycle() {
    let dir = TempDir::new("events");
    let path = dir.path().join("events.jsonl");
    let out = run_sh(&["--json-events", path.to_str().unwrap()], "exit 3");
    assert_eq!(code(&out), 3);
    let ev = events(&path);
    let kinds: Vec<&str> = ev.iter().filter_map(|e| e["event"].as_str()).collect();
    assert!(
        kinds.contains(&"created") && kinds.contains(&"started"),
        "{kinds:?}"
    );
    let exited = ev
        .iter()
        .find(|e| e["event"] == "exited")
        .expect("an exited event");
    assert_eq!(exited["status"], 3);
    assert_eq!(exited["reason"], "exited");
    assert!(exited["peaks"]["cpu_user_ms"].is_u64(), "{exited}");
    assert!(ev.iter().all(|e| e["sandbox"] == ev[0]["sandbox"]));
}

#[test]
fn a_pty_is_allocated_on_request() {
    let out = Command::new(warden_bin())
        .args([
            "run",
            "-t",
            "--",
            "sh",
            "-c",
            "test -t 0 && test -t 1 && echo tty-ok; tty; ls /dev/pts",
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let s = stdout(&out);
    assert!(s.contains("tty-ok"), "{s}");
    // The terminal is a device of the sandbox's own devpts: `tty` names it
    // (a host terminal has no name there: "not a tty").
    assert!(s.contains("/dev/pts/0"), "{s}");
    assert!(!s.contains("not a tty"), "{s}");
}

#[test]
fn stdin_and_stdout_pass_through() {
    let mut child = Command::new(warden_bin())
        .args(["run", "--no-tty", "--", "tr", "a-z", "A-Z"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"hello sandbox\n")
        .unwrap();
    let mut s = String::new();
    child.stdout.take().unwrap().read_to_string(&mut s).unwrap();
    assert!(child.wait().unwrap().success());
    assert_eq!(s, "HELLO SANDBOX\n");
}

#[test]
fn sigterm_to_warden_reaches_the_command() {
    let child = Command::new(warden_bin())
        .args([
            "run",
            "--no-tty",
            "--",
            "sh",
            "-c",
            "trap 'echo got-term; exit 42' TERM; while :; do sleep 0.1; done",
        ])
        .stdout(Stdio::piped())
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(700));
    // SAFETY: kill with a valid PID and signal has no memory effects.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(42));
    assert!(stdout(&out).contains("got-term"));
}

#[test]
fn rootless_run_as_an_unprivileged_user_is_isolated() {
    if !is_root() {
        // Already unprivileged: every other test covers this mode.
        skip("the test suite itself runs unprivileged; the other tests are the rootless run");
        return;
    }
    let Some(who) = Unprivileged::get() else {
        skip("cannot create an unprivileged user (useradd failed)");
        return;
    };
    let ws = TempDir::new("rootless-ws");
    who.own(ws.path());
    let secret = TempDir::new("rootless-secret");
    std::fs::write(secret.path().join("key"), "rootless-planted").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(secret.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = who
        .command(who.bin.to_str().unwrap())
        .args(["run", "--no-tty", "--allow-degraded", "-w", ws.str(), "--", "sh", "-c"])
        .arg(format!(
            "id -u; echo made > f; cat {}/key 2>&1; grep CapEff /proc/self/status; cat /proc/self/uid_map",
            secret.str()
        ))
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .output()
        .unwrap();
    let s = stdout(&out);
    assert_eq!(code(&out), 0, "stdout: {s} stderr: {}", stderr(&out));
    assert_eq!(s.lines().next(), Some(who.uid.to_string().as_str()), "{s}");
    assert!(!s.contains("rootless-planted"), "{s}");
    assert!(s.contains("CapEff:\t0000000000000000"), "{s}");
    assert_eq!(
        std::fs::read_to_string(ws.path().join("f")).unwrap(),
        "made\n"
    );
}

#[test]
fn as_root_the_sandbox_is_nobody_on_the_host() {
    if !is_root() {
        skip("needs root: checks the host-side ID of a root-run sandbox");
        return;
    }
    let out = run_sh(&[], "cat /proc/self/uid_map; sleep 0.5");
    let s = stdout(&out);
    let fields: Vec<&str> = s.split_whitespace().collect();
    assert_eq!(fields.get(1), Some(&"65534"), "uid_map: {s}");
    assert_eq!(fields.get(2), Some(&"1"), "uid_map: {s}");
}

#[test]
fn doctor_reports_the_host() {
    let out = Command::new(warden_bin())
        .args(["doctor", "--json"])
        .output()
        .unwrap();
    let v: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("doctor --json prints JSON");
    assert!(v["host"]["kernel"].is_string());
    assert!(v["host"]["landlock_abi"].is_number() || v["host"]["landlock_abi"].is_null());
    let ok = v["host"]["checks"]
        .as_array()
        .unwrap()
        .iter()
        .all(|c| c["ok"] == true);
    assert_eq!(out.status.code(), Some(if ok { 0 } else { 1 }));
}

fn cgroups_usable() -> bool {
    let out = Command::new(warden_bin())
        .args(["doctor", "--json"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    v["host"]["cgroups"]["memory"] == true && v["host"]["cgroups"]["pids"] == true
}

#[test]
fn a_memory_hog_hits_the_memory_limit_and_exits_137() {
    if !cgroups_usable() {
        skip("no usable memory cgroup for this user (see `warden doctor`)");
        return;
    }
    let dir = TempDir::new("oom");
    let ev = dir.path().join("ev.jsonl");
    let out = run_sh(
        &[
            "--memory",
            "64M",
            "--pids",
            "32",
            "--timeout",
            "60s",
            "--json-events",
            ev.to_str().unwrap(),
        ],
        "python3 -c 'b = bytearray(1 << 30); print(\"allocated\")'",
    );
    assert_eq!(
        code(&out),
        137,
        "stdout: {} stderr: {}",
        stdout(&out),
        stderr(&out)
    );
    assert!(!stdout(&out).contains("allocated"));
    assert!(stderr(&out).contains("memory limit"), "{}", stderr(&out));
    let exited = events(&ev)
        .into_iter()
        .find(|e| e["event"] == "exited")
        .unwrap();
    assert_eq!(exited["reason"], "out_of_memory");
}

/// Socket buffers are memory the sandbox makes the kernel hold: queued in
/// loopback connections of its own that it never reads, they must count
/// against its memory limit (cgroup v1 counts TCP's apart, and only once
/// told to), not only against the host's TCP memory.
#[test]
fn tcp_buffers_a_sandbox_fills_and_never_reads_stay_within_its_memory_limit() {
    if !cgroups_usable() {
        skip("no usable memory cgroup for this user (see `warden doctor`)");
        return;
    }
    let py = r#"
import socket
srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen(64)
held, queued = [], 0
for _ in range(40):
    c = socket.socket()
    c.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 30)
    c.connect(srv.getsockname()); a, _ = srv.accept()
    a.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 30)
    c.setblocking(False)
    chunk = b"x" * 65536
    while True:
        try:
            queued += c.send(chunk)
        except BlockingIOError:
            break
    held += [c, a]
print("queued", queued // (1 << 20), flush=True)
"#;
    let out = run_sh(
        &["--memory", "64M", "--timeout", "60s"],
        &format!("python3 -c '{py}'"),
    );
    let s = stdout(&out);
    let queued: u64 = match s.lines().find_map(|l| l.strip_prefix("queued ")) {
        Some(n) => n.trim().parse().unwrap(),
        None if code(&out) == 137 => 0,
        None => panic!("the program did not run: {s} {}", stderr(&out)),
    };
    // Killed at its limit, or held to it: either way nowhere near the
    // hundreds of MiB 40 such connections hold when nothing charges them.
    assert!(
        queued < 128,
        "a 64 MiB sandbox queued {queued} MiB in TCP buffers: {s} {}",
        stderr(&out)
    );
}

#[test]
fn a_fork_bomb_is_stopped_by_the_pids_limit() {
    if !cgroups_usable() {
        skip("no usable pids cgroup for this user (see `warden doctor`)");
        return;
    }
    let start = Instant::now();
    // Each process tries to fork forever; the limit must stop it and the
    // timeout must end it, with the host still responsive.
    let out = run_sh(
        &["--pids", "48", "--memory", "256M", "--timeout", "5s"],
        "python3 -c '\nimport os, time\nn = 0\nfor i in range(500):\n    try:\n        if os.fork() == 0:\n            time.sleep(30); os._exit(0)\n        n += 1\n    except OSError:\n        break\nprint(\"forked\", n, flush=True)\n'",
    );
    let s = stdout(&out);
    let n: u32 = s
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count printed: {s} / {}", stderr(&out)));
    assert!(n < 48, "{n} processes were started under --pids 48");
    assert!(n > 5, "forking did not work at all: {n}");
    // The forked sleepers did not keep the sandbox alive after the command.
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(start.elapsed() < Duration::from_secs(20));
}

/// The init joins its cgroup without the supervisor writing its pid (born
/// in the v2 directory by clone3, moved into the v1 ones by itself): the
/// init and a process the command started must be in the sandbox's cgroup
/// in each hierarchy warden uses (memory, pids, and the v2 one), as the
/// host sees them.
#[test]
fn every_process_of_the_sandbox_is_in_each_hierarchy_of_its_cgroup() {
    if !cgroups_usable() {
        skip("no usable cgroups for this user (see `warden doctor`)");
        return;
    }
    // A sleep of a length no other test uses, to find it on the host.
    let secs = format!("30.{}", std::process::id());
    let mut child = Command::new(warden_bin())
        .args(["run", "--no-tty", "--memory", "128M", "--", "sh", "-c"])
        .arg(format!("sleep 30 & exec sleep {secs}"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let cmd = loop {
        if let Some(p) = pids_running(&["sleep", &secs]).first() {
            break *p;
        }
        assert!(Instant::now() < deadline, "the command never started");
        std::thread::sleep(Duration::from_millis(50));
    };
    let parent = |pid: i32| -> i32 {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        let after = &stat[stat.rfind(')').unwrap() + 2..];
        after.split_whitespace().nth(1).unwrap().parse().unwrap()
    };
    let init = parent(cmd);
    // The hierarchies this host has for what warden joins: memory and pids
    // (v1 lines name them), and the v2 line ("0::").
    let host = std::fs::read_to_string("/proc/self/cgroup").unwrap();
    let wanted: Vec<String> = host
        .lines()
        .filter_map(|l| {
            let mut f = l.splitn(3, ':');
            let (_, ctrl) = (f.next()?, f.next()?);
            let used = ctrl.is_empty() || ctrl.split(',').any(|c| c == "memory" || c == "pids");
            used.then(|| ctrl.to_string())
        })
        .collect();
    for pid in [init, cmd] {
        let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
        for ctrl in &wanted {
            let line = text
                .lines()
                .find(|l| l.split(':').nth(1) == Some(ctrl.as_str()))
                .unwrap_or_else(|| panic!("no {ctrl:?} line for {pid}: {text}"));
            assert!(
                line.contains("/warden-"),
                "process {pid} is not in the sandbox's cgroup of hierarchy {ctrl:?}: {line}"
            );
        }
    }
    // SIGTERM: warden stops the sandbox and removes its cgroup.
    let _ = Command::new("kill").arg(child.id().to_string()).status();
    let _ = child.wait();
}

#[test]
fn no_cgroup_is_left_behind() {
    if !cgroups_usable() {
        skip("no usable cgroups for this user (see `warden doctor`)");
        return;
    }
    let dir = TempDir::new("cg");
    let ev = dir.path().join("ev.jsonl");
    let out = run_sh(
        &["--memory", "128M", "--json-events", ev.to_str().unwrap()],
        "sleep 0.2 & true",
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let created = events(&ev)
        .into_iter()
        .find(|e| e["event"] == "created")
        .unwrap();
    let cg = created["cgroup"]
        .as_str()
        .expect("a cgroup path in the created event")
        .to_string();
    assert!(cg.contains("warden"), "{cg}");
    assert!(!std::path::Path::new(&cg).exists(), "{cg} is still there");
}

#[test]
fn explicit_limits_without_cgroups_are_refused_unless_degraded_is_allowed() {
    let Some(who) = Unprivileged::get() else {
        skip("cannot get an unprivileged user to run warden as");
        return;
    };
    let warden = |args: &[&str]| {
        who.command(who.bin.to_str().unwrap())
            .args(args)
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .output()
            .unwrap()
    };
    let doctor = warden(&["doctor", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&doctor.stdout).unwrap_or_default();
    if v["host"]["cgroups"]["memory"] == true {
        skip("this user has a usable memory cgroup (delegated cgroup v2)");
        return;
    }
    let refused = warden(&["run", "--no-tty", "--memory", "64M", "--", "true"]);
    assert_eq!(code(&refused), 125, "{}", stderr(&refused));
    assert!(
        stderr(&refused).contains("--allow-degraded"),
        "{}",
        stderr(&refused)
    );
    let allowed = warden(&[
        "run",
        "--no-tty",
        "--allow-degraded",
        "--memory",
        "64M",
        "--",
        "true",
    ]);
    assert_eq!(code(&allowed), 0, "{}", stderr(&allowed));
    assert!(
        stderr(&allowed).contains("DEGRADED"),
        "{}",
        stderr(&allowed)
    );
    // A named sandbox says so when it starts, not only in its supervisor's
    // log.
    let state = TempDir::new("degraded-start");
    std::os::unix::fs::chown(state.path(), Some(who.uid), Some(who.gid)).unwrap();
    let named = |args: &[&str]| {
        who.command(who.bin.to_str().unwrap())
            .args(args)
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("WARDEN_STATE_DIR", state.path())
            .output()
            .unwrap()
    };
    let started = named(&[
        "create",
        "degraded",
        "--start",
        "--allow-degraded",
        "--memory",
        "64M",
    ]);
    let _ = named(&["rm", "-f", "degraded"]);
    assert_eq!(code(&started), 0, "{}", stderr(&started));
    assert!(
        stderr(&started).contains("DEGRADED resources"),
        "a start does not say what the sandbox runs without: {}",
        stderr(&started)
    );
}

/// `sh -c SCRIPT` run by `who` with `--allow-degraded` on the workspace
/// `ws`, on a host without user namespaces (see
/// [`warden_without_user_namespaces_as`]).
fn degraded_sh_as(
    who: &Unprivileged,
    ws: &std::path::Path,
    script: &str,
) -> Option<std::process::Output> {
    warden_without_user_namespaces_as(
        who,
        &[
            "run",
            "--no-tty",
            "--allow-degraded",
            "-w",
            ws.to_str().unwrap(),
            "--",
            "sh",
            "-c",
            script,
        ],
    )
}

/// Run `warden ARGS`, as an unprivileged user, inside a user namespace whose
/// own limit of nested user namespaces is 0: a host that forbids them, made
/// for this test only. Paths the test hands in must belong to `who`.
pub(super) fn warden_without_user_namespaces_as(
    who: &Unprivileged,
    args: &[&str],
) -> Option<std::process::Output> {
    let probe = who
        .command("unshare")
        .args([
            "--user",
            "--map-root-user",
            "sh",
            "-c",
            "echo 0 > /proc/sys/user/max_user_namespaces",
        ])
        .output();
    if !matches!(&probe, Ok(o) if o.status.success()) {
        skip("cannot make a user namespace that forbids nested ones (needs unshare from util-linux and user namespaces)");
        return None;
    }
    let out = who
        .command("unshare")
        .args([
            "--user",
            "--map-root-user",
            "sh",
            "-c",
            "echo 0 > /proc/sys/user/max_user_namespaces && exec \"$0\" \"$@\"",
        ])
        .arg(&who.bin)
        .args(args)
        .output()
        .unwrap();
    Some(out)
}

fn warden_without_user_namespaces(args: &[&str]) -> Option<std::process::Output> {
    let Some(who) = Unprivileged::get() else {
        skip("cannot get an unprivileged user to run warden as");
        return None;
    };
    warden_without_user_namespaces_as(&who, args)
}

#[test]
fn without_user_namespaces_warden_refuses_and_names_the_cause() {
    let Some(out) = warden_without_user_namespaces(&["run", "--no-tty", "--", "true"]) else {
        return;
    };
    assert_eq!(code(&out), 125, "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("max_user_namespaces"), "{err}");
    assert!(err.contains("--allow-degraded"), "{err}");
    assert!(
        err.contains("process table"),
        "the lost guarantees are not named: {err}"
    );
}

#[test]
fn degraded_run_without_namespaces_still_confines_files_privileges_and_processes() {
    let Some(who) = Unprivileged::get() else {
        skip("cannot get an unprivileged user to run warden as");
        return;
    };
    let ws = TempDir::new("degraded-ws");
    let planted = TempDir::new("degraded-planted");
    std::fs::write(
        planted.path().join("secret"),
        "content-of-the-planted-secret",
    )
    .unwrap();
    // Everything belongs to the sandbox's user: only warden's layers stand
    // between it and these files.
    for p in [ws.path(), planted.path(), &planted.path().join("secret")] {
        who.own(p);
    }
    let marker = format!("{}.{}", 600 + std::process::id() % 79, std::process::id());
    let script = format!(
        "cat {p}/secret 2>&1; cat /etc/shadow 2>&1; touch {p}/new 2>&1; touch /usr/x 2>&1; \
         echo kept > made.txt; echo t > \"$TMPDIR/t\" && cat \"$TMPDIR/t\"; \
         grep -E '^(CapEff|NoNewPrivs|Seccomp):' /proc/self/status; \
         setsid nohup sleep {marker} >/dev/null 2>&1 & echo started",
        p = planted.str()
    );
    let Some(out) = degraded_sh_as(&who, ws.path(), &script) else {
        return;
    };
    let s = stdout(&out);
    assert_eq!(code(&out), 0, "stdout: {s} stderr: {}", stderr(&out));
    assert!(
        stderr(&out).contains("DEGRADED namespaces"),
        "{}",
        stderr(&out)
    );
    assert!(
        !s.contains("content-of-the-planted-secret"),
        "a file outside the sandbox's paths was read: {s}"
    );
    assert!(
        !planted.path().join("new").exists(),
        "a write outside the workspace succeeded"
    );
    assert!(
        s.contains("CapEff:\t0000000000000000")
            && s.contains("NoNewPrivs:\t1")
            && s.contains("Seccomp:\t2"),
        "{s}"
    );
    assert!(s.contains("t\n"), "TMPDIR is not writable: {s}");
    assert_eq!(
        std::fs::read_to_string(ws.path().join("made.txt"))
            .ok()
            .as_deref(),
        Some("kept\n"),
        "{s} {}",
        stderr(&out)
    );
    std::thread::sleep(Duration::from_millis(50));
    let left = pids_with_marker(&format!("sleep {marker}"));
    assert!(
        left.is_empty(),
        "a daemon outlived the degraded sandbox: {left:?}"
    );
}

#[test]
fn degraded_timeout_kills_a_daemon_that_left_the_process_group() {
    let marker = format!("{}.{}", 500 + std::process::id() % 71, std::process::id());
    let script = format!("setsid nohup sleep {marker} >/dev/null 2>&1 & sleep 60");
    let Some(out) = warden_without_user_namespaces(&[
        "run",
        "--no-tty",
        "--allow-degraded",
        "--timeout",
        "1s",
        "--",
        "sh",
        "-c",
        &script,
    ]) else {
        return;
    };
    assert_eq!(code(&out), 124, "{}", stderr(&out));
    std::thread::sleep(Duration::from_millis(50));
    let left = pids_with_marker(&format!("sleep {marker}"));
    assert!(
        left.is_empty(),
        "the daemon survived the degraded sandbox: {left:?}"
    );
}

#[test]
fn each_denied_syscall_class_fails_with_eperm_inside_the_sandbox() {
    if std::env::consts::ARCH != "x86_64" {
        skip("the probe uses x86_64 syscall numbers");
        return;
    }
    // Real calls from inside a real sandbox, one per class of the filter;
    // each prints NAME=errno. (The both-ways proof of every single rule is
    // in the jail crate's seccomp tests.)
    let py = r#"
import ctypes, ctypes.util, errno, os, socket, fcntl, termios
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def sc(name, nr, *args):
    r = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) for a in args])
    print(f"{name}={0 if r >= 0 else ctypes.get_errno()}")
sc("ptrace", 101, 16, 1, 0, 0)             # PTRACE_ATTACH to the init
sc("process_vm_readv", 310, 1, 0, 0, 0, 0, 0)
sc("mount", 165, 0, 0, 0, 0, 0)
sc("unshare_user", 272, 0x10000000)
sc("setns", 308, 0, 0)
sc("bpf", 321, 0, 0, 0)
sc("perf_event_open", 298, 0, 0, -1, -1, 0)
sc("userfaultfd", 323, 0)
sc("keyctl", 250, 0, 0, 0, 0, 0)
sc("add_key", 248, 0, 0, 0, 0, 0)
sc("io_uring_setup", 425, 1, 0)
sc("kexec_load", 246, 0, 0, 0, 0)
sc("init_module", 175, 0, 0, 0)
sc("open_by_handle_at", 304, 0, 0, 0)
sc("reboot", 169, 0, 0, 0, 0)
sc("syslog", 103, 3, 0, 0)
sc("personality_no_aslr", 135, 0x0040000)
sc("clone_newns", 56, 0x00020000 | 17, 0, 0, 0, 0)
for fam, typ, name in [(17, 3, "af_packet"), (2, 3, "raw_inet"), (16, 3, "netlink_audit")]:
    try:
        s = socket.socket(fam, typ, 9 if fam == 16 else 0); s.close(); print(f"{name}=0")
    except OSError as e:
        print(f"{name}={e.errno}")
try:
    fcntl.ioctl(0, termios.TIOCSTI, b"x"); print("tiocsti=0")
except OSError as e:
    print(f"tiocsti={e.errno}")
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM); s.close(); print("inet_stream=0")
"#;
    let out = Command::new(warden_bin())
        .args(["run", "-t", "--", "python3", "-c", py])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let s = stdout(&out).replace('\r', "");
    assert_eq!(code(&out), 0, "stdout: {s} stderr: {}", stderr(&out));
    let results: std::collections::HashMap<&str, i32> = s
        .lines()
        .filter_map(|l| l.split_once('='))
        .filter_map(|(k, v)| Some((k, v.trim().parse().ok()?)))
        .collect();
    for name in [
        "ptrace",
        "process_vm_readv",
        "mount",
        "unshare_user",
        "setns",
        "bpf",
        "perf_event_open",
        "userfaultfd",
        "keyctl",
        "add_key",
        "io_uring_setup",
        "kexec_load",
        "init_module",
        "open_by_handle_at",
        "reboot",
        "syslog",
        "personality_no_aslr",
        "clone_newns",
        "af_packet",
        "raw_inet",
        "netlink_audit",
        "tiocsti",
    ] {
        assert_eq!(results.get(name), Some(&libc::EPERM), "{name}: {s}");
    }
    assert_eq!(results.get("inet_stream"), Some(&0), "{s}");
}

fn warden_on_terminal(term: &TestTerminal, script: &str) -> std::process::Child {
    term.spawn(Command::new(warden_bin()).args(["run", "--", "python3", "-c", script]))
}

#[test]
fn an_interactive_terminal_gets_a_pty_that_follows_window_resizes() {
    let mut term = TestTerminal::open(40, 100);
    // The handler only notes the signal (printing from it could re-enter
    // a print in progress); it is installed before the size is printed,
    // since the test resizes as soon as it sees the size.
    let py = "import os, signal, time\n\
              got = []\n\
              signal.signal(signal.SIGWINCH, lambda *a: got.append(1))\n\
              print('size', *os.get_terminal_size(0), flush=True)\n\
              for _ in range(200):\n    if got: break\n    time.sleep(0.05)\n\
              print('resized' if got else 'no-signal', *os.get_terminal_size(0), flush=True)\n";
    let mut child = warden_on_terminal(&term, py);
    let first = term.expect("size 100 40", Duration::from_secs(10));
    assert!(
        first.contains("size 100 40"),
        "initial size not passed: {first:?}"
    );
    // The person's terminal changes size: the kernel tells warden (its
    // foreground process), warden resizes the sandbox's terminal.
    term.resize(50, 120);
    let seen = term.expect("resized 120 50", Duration::from_secs(10));
    let status = child.wait().unwrap();
    assert!(
        seen.contains("resized 120 50"),
        "resize not relayed: {seen:?}"
    );
    assert_eq!(status.code(), Some(0));
}

#[test]
fn ctrl_c_on_the_terminal_interrupts_the_sandboxed_command() {
    let mut term = TestTerminal::open(24, 80);
    // Short sleeps: Python notes a signal in a flag its loop reads
    // between bytecodes, so one that lands between that read and the
    // sleep's system call waits out the whole sleep (a Ctrl-C sent as
    // soon as `ready` shows hit that window about once in thirty runs).
    let py = "import time\nprint('ready', flush=True)\nfor _ in range(200):\n    time.sleep(0.1)\n";
    let mut child = warden_on_terminal(&term, py);
    let seen = term.expect("ready", Duration::from_secs(10));
    assert!(seen.contains("ready"), "{seen:?}");
    use std::io::Write;
    term.master.write_all(b"\x03").unwrap();
    let start = Instant::now();
    let status = child.wait().unwrap();
    let after = term.expect("\u{0}", Duration::from_millis(200));
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "Ctrl-C ended nothing: {status:?} after {:?}; the terminal showed {after:?}",
        start.elapsed()
    );
    // Python exits 1 after KeyboardInterrupt's traceback, or dies of SIGINT.
    assert!(matches!(status.code(), Some(1) | Some(130)), "{status:?}");
}

#[test]
fn ctrl_c_on_the_terminal_interrupts_a_command_run_without_a_pty() {
    // `-T`: no pty, so the command is in a session of its own and the
    // terminal's SIGINT reaches it through the init, not directly.
    let mut term = TestTerminal::open(24, 80);
    // Short sleeps: Python notes a signal in a flag its loop reads
    // between bytecodes, so one that lands between that read and the
    // sleep's system call waits out the whole sleep (a Ctrl-C sent as
    // soon as `ready` shows hit that window about once in thirty runs).
    let py = "import time\nprint('ready', flush=True)\nfor _ in range(200):\n    time.sleep(0.1)\n";
    let mut child =
        term.spawn(Command::new(warden_bin()).args(["run", "-T", "--", "python3", "-c", py]));
    let seen = term.expect("ready", Duration::from_secs(10));
    assert!(seen.contains("ready"), "{seen:?}");
    use std::io::Write;
    term.master.write_all(b"\x03").unwrap();
    let start = Instant::now();
    let status = child.wait().unwrap();
    let after = term.expect("\u{0}", Duration::from_millis(200));
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "Ctrl-C ended nothing: {status:?} after {:?}; the terminal showed {after:?}",
        start.elapsed()
    );
    assert!(matches!(status.code(), Some(1) | Some(130)), "{status:?}");
}

#[test]
fn settings_a_command_run_without_a_pty_makes_on_the_terminal_do_not_outlast_it() {
    use std::os::fd::AsRawFd;
    let term = TestTerminal::open(24, 80);
    let flags = |t: &TestTerminal| {
        // SAFETY: termios is plain data, for which all zeroes is valid.
        let mut tio: libc::termios = unsafe { std::mem::zeroed() };
        // SAFETY: `tio` is a valid out-parameter and the slave descriptor
        // is open for the call.
        let got = unsafe { libc::tcgetattr(t.slave.as_raw_fd(), &mut tio) };
        assert_eq!(got, 0);
        let fd = t.slave.as_raw_fd();
        let mut excl: libc::c_int = 0;
        let mut size = libc::winsize {
            ws_row: 0,
            ws_col: 0,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        // SAFETY: each ioctl writes one value of the type given into a
        // live local; fcntl's F_GETFL takes no argument.
        let (e, w, fl) = unsafe {
            (
                libc::ioctl(fd, libc::TIOCGEXCL, &mut excl),
                libc::ioctl(fd, libc::TIOCGWINSZ, &mut size),
                libc::fcntl(fd, libc::F_GETFL),
            )
        };
        assert!(e == 0 && w == 0 && fl >= 0);
        (
            tio.c_lflag & libc::ECHO != 0,
            tio.c_cc[libc::VINTR],
            excl,
            (size.ws_row, size.ws_col),
            fl & libc::O_NONBLOCK,
        )
    };
    let before = flags(&term);
    assert!(before.0, "the test terminal starts without echo");
    // Echo off, ^A to interrupt, the terminal made exclusive (the owner's
    // next open of /dev/tty would fail), resized, and its shared open
    // description non-blocking (the owner's shell's next read would fail).
    let py = "import fcntl, os, struct, termios\n\
              fcntl.ioctl(0, termios.TIOCEXCL)\n\
              fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack('HHHH', 3, 7, 0, 0))\n\
              os.set_blocking(0, False)\n";
    let mut child = term.spawn(Command::new(warden_bin()).args([
        "run",
        "-T",
        "--",
        "sh",
        "-c",
        &format!("stty -echo intr ^A && stty -a | grep -q -- -echo && python3 -c \"{py}\""),
    ]));
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0));
    assert_eq!(
        flags(&term),
        before,
        "the command's terminal settings (echo, interrupt, exclusive, size, non-blocking) outlasted the run"
    );
}

/// Left in the init's process group and session, the command would share
/// them with whoever started warden: `kill(0, sig)` names the sender's
/// group past the PID namespace.
#[test]
fn the_command_leads_a_session_and_process_group_of_its_own() {
    let out = run_sh(&[], "cut -d' ' -f5,6 /proc/$$/stat; echo pid $$");
    let s = stdout(&out);
    let pid = s
        .lines()
        .find_map(|l| l.strip_prefix("pid "))
        .unwrap_or_else(|| panic!("{s} {}", stderr(&out)))
        .trim();
    assert_eq!(
        s.lines().next().map(str::trim),
        Some(format!("{pid} {pid}").as_str()),
        "the command's process group and session (0 0: outside the sandbox): {s}"
    );
}

/// A rootless sandbox's processes are the owner's user on the host, so
/// only the group (and Landlock's signal scope, from Linux 6.12) keeps
/// `kill(0)` from the caller: with Landlock switched off, as a kernel
/// before 6.12 has no scope, the caller's process group must get nothing
/// and `warden run` must not be stopped past its timeout.
#[test]
fn a_rootless_command_signalling_its_process_group_reaches_no_host_process() {
    let Some(user) = Unprivileged::get() else {
        skip("no unprivileged user to run warden as");
        return;
    };
    let state = TempDir::new("pgrp-state");
    user.own(state.path());
    // A caller without job control (a script, an agent's subprocess), in
    // a session of its own so that nothing of the test's is in its group;
    // a bystander in the same group records what it gets.
    let script = format!(
        "trap 'echo caller-got-usr1' USR1; \
         sh -c 'trap \"echo bystander-got-usr1; exit\" USR1; sleep 5 & wait' & \
         sleep 0.3; \
         {bin} run -T --timeout 3s -- sh -c 'trap : USR1; kill -s USR1 0; kill -s STOP 0; echo sent'; echo run-ended $?; \
         wait; echo caller-done",
        bin = user.bin.display()
    );
    let start = Instant::now();
    let out = user
        .command("setsid")
        .args(["-w", "bash", "-c", &script])
        .env("WARDEN_STATE_DIR", state.path())
        .env("WARDEN_TEST_WEAKEN", "landlock")
        .output()
        .unwrap();
    let s = stdout(&out);
    assert!(
        start.elapsed() < Duration::from_secs(20),
        "the run was held: {s} {}",
        stderr(&out)
    );
    assert!(s.contains("caller-done"), "{s} {}", stderr(&out));
    assert!(
        !s.contains("caller-got-usr1") && !s.contains("bystander-got-usr1"),
        "a signal to the sandbox's process group reached the host: {s}"
    );
    // The command stopped its own group, itself: its timeout ends it.
    assert!(s.contains("run-ended 124"), "{s} {}", stderr(&out));
}

#[test]
fn a_prepared_rootfs_replaces_the_hosts_directories() {
    let Some(root) = busybox_rootfs() else {
        return;
    };
    let out = Command::new(warden_bin())
        .args(["run", "--no-tty", "--rootfs", root.str(), "--env", "PATH=/bin", "--"])
        .args(["/bin/busybox", "sh", "-c", "/bin/busybox cat /etc/os-release; /bin/busybox ls /; /bin/busybox touch /x 2>&1; /bin/busybox ls /usr/lib 2>&1; true"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let s = stdout(&out);
    assert_eq!(code(&out), 0, "stdout: {s} stderr: {}", stderr(&out));
    assert!(s.contains("NAME=warden-test-rootfs"), "{s}");
    assert!(
        s.contains("Read-only file system"),
        "the prepared root is writable: {s}"
    );
    assert!(
        s.contains("No such file"),
        "the host's /usr/lib is visible: {s}"
    );
}

#[test]
fn extra_binds_are_read_only_or_writable_as_asked() {
    let ro = TempDir::new("bind-ro");
    let rw = TempDir::new("bind-rw");
    std::fs::write(ro.path().join("in"), "ro-content").unwrap();
    let script = format!(
        "cat {ro}/in; touch {ro}/new 2>&1; echo w > {rw}/new && echo wrote",
        ro = ro.str(),
        rw = rw.str()
    );
    let out = run_sh(&["--ro", ro.str(), "--rw", rw.str()], &script);
    let s = stdout(&out);
    assert_eq!(code(&out), 0, "{s} {}", stderr(&out));
    assert!(
        s.contains("ro-content") && s.contains("Read-only file system") && s.contains("wrote"),
        "{s}"
    );
    assert!(!ro.path().join("new").exists());
    assert_eq!(
        std::fs::read_to_string(rw.path().join("new")).unwrap(),
        "w\n"
    );
}

#[test]
fn dev_holds_only_the_harmless_devices() {
    let out = run_sh(&[], "ls /dev | sort | tr '\\n' ' '; echo; mknod /dev/sda b 8 0 2>&1; mknod /tmp/sda b 8 0 2>&1; head -c 4 /dev/urandom | wc -c");
    let s = stdout(&out);
    let first = s.lines().next().unwrap_or_default();
    assert_eq!(
        first.trim(),
        "fd full null ptmx pts random shm stderr stdin stdout tty urandom zero",
        "{s}"
    );
    assert_eq!(
        s.matches("mknod:").count(),
        2,
        "creating a block device did not fail: {s}"
    );
    assert!(
        s.lines().any(|l| l.trim() == "4"),
        "/dev/urandom is not readable: {s}"
    );
}

#[test]
fn tmp_size_open_files_file_size_and_core_limits_apply() {
    let out = run_sh(
        &["--tmp-size", "2M", "--open-files", "64"],
        "head -c 3000000 /dev/zero > /tmp/big 2>/dev/null; echo tmp=$?; \
         ls -l /tmp/big | awk '{print \"tmp_size=\" $5}'; ulimit -n; ulimit -c",
    );
    let s = stdout(&out);
    assert_eq!(code(&out), 0, "{s} {}", stderr(&out));
    assert!(
        s.contains("tmp=1"),
        "a 3M write into a 2M /tmp succeeded: {s}"
    );
    assert!(s.contains("tmp_size=2097152"), "{s}");
    let lines: Vec<&str> = s.lines().collect();
    assert!(lines.contains(&"64"), "open files: {s}");
    assert!(lines.contains(&"0"), "core dumps: {s}");
    // The file-size limit stops a write at 1M: the writer gets SIGXFSZ.
    let out = run_sh(
        &["--file-size", "1M"],
        "head -c 2000000 /dev/zero > /tmp/x; echo status=$?; ls -l /tmp/x | awk '{print \"size=\" $5}'",
    );
    let s = stdout(&out);
    assert!(
        s.contains(&format!("status={}", 128 + libc::SIGXFSZ)),
        "{s}"
    );
    assert!(s.contains("size=1048576"), "{s}");
}

#[test]
fn cpu_quota_is_applied_to_the_sandbox() {
    if !cgroups_usable() {
        skip("no usable cgroups for this user (see `warden doctor`)");
        return;
    }
    let dir = TempDir::new("cpu");
    let ev = dir.path().join("ev.jsonl");
    let child = Command::new(warden_bin())
        .args([
            "run",
            "--no-tty",
            "--cpus",
            "0.5",
            "--json-events",
            ev.to_str().unwrap(),
            "--",
            "sleep",
            "2",
        ])
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut quota = None;
    while Instant::now() < deadline && quota.is_none() {
        std::thread::sleep(Duration::from_millis(50));
        for e in events(&ev) {
            if e["event"] == "created" {
                if let Some(cg) = e["cgroup"].as_str() {
                    let cg = std::path::Path::new(cg);
                    // Whichever hierarchy carries cpu: look at each sibling.
                    let name = cg.file_name().unwrap();
                    for base in [
                        "/sys/fs/cgroup/cpu/warden",
                        "/sys/fs/cgroup/cpu,cpuacct/warden",
                        "/sys/fs/cgroup/warden",
                    ] {
                        let d = std::path::Path::new(base).join(name);
                        if let Ok(q) = std::fs::read_to_string(d.join("cpu.cfs_quota_us")) {
                            quota = Some(q.trim().to_string());
                        } else if let Ok(q) = std::fs::read_to_string(d.join("cpu.max")) {
                            quota =
                                Some(q.split_whitespace().next().unwrap_or_default().to_string());
                        }
                    }
                }
            }
        }
    }
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    assert_eq!(
        quota.as_deref(),
        Some("50000"),
        "no CPU quota found for the sandbox"
    );
}

#[test]
fn ipc_uts_and_cgroup_namespaces_are_the_sandboxs_own() {
    // A SysV shared memory segment on the host must not show inside.
    // SAFETY: shmget with IPC_PRIVATE creates a fresh 4K segment; removed below.
    let shm = unsafe { libc::shmget(libc::IPC_PRIVATE, 4096, libc::IPC_CREAT | 0o600) };
    assert!(shm >= 0);
    let out = run_sh(
        &["--hostname", "box-under-test"],
        "hostname; tail -n +2 /proc/sysvipc/shm | wc -l; cat /proc/self/cgroup",
    );
    // SAFETY: removing the segment created above.
    unsafe { libc::shmctl(shm, libc::IPC_RMID, std::ptr::null_mut()) };
    let s = stdout(&out);
    assert_eq!(code(&out), 0, "{s} {}", stderr(&out));
    let mut lines = s.lines();
    assert_eq!(lines.next(), Some("box-under-test"));
    assert_eq!(
        lines.next().map(str::trim),
        Some("0"),
        "host IPC objects visible: {s}"
    );
    // Inside its cgroup namespace the sandbox's cgroup is its root.
    assert!(
        lines.all(|l| !l.contains("warden-")),
        "host cgroup paths visible: {s}"
    );
}

#[test]
fn no_host_home_run_sys_or_sockets_exist_inside() {
    let out = run_sh(
        &[],
        // /home holds the sandbox's own home and nothing of the host's.
        "for p in /root /run /sys /var/run /mnt /media /srv /opt; do test -e $p && echo PRESENT $p; done; \
         test \"$(ls -A /home)\" = sandbox || echo PRESENT /home: $(ls -A /home); \
         find / -xdev -type s 2>/dev/null | head -5; echo end",
    );
    let s = stdout(&out);
    assert_eq!(code(&out), 0, "{s} {}", stderr(&out));
    assert!(!s.contains("PRESENT"), "{s}");
    assert_eq!(s.trim(), "end", "sockets or host directories inside: {s}");
}

#[test]
fn orphans_are_reaped_by_the_init() {
    let out = run_sh(
        &[],
        "for i in 1 2 3 4 5; do (sleep 0.05 &); done; sleep 0.5; \
         grep -l '^State:.*Z' /proc/[0-9]*/status 2>/dev/null | wc -l",
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(
        stdout(&out).trim(),
        "0",
        "zombies were left: {}",
        stdout(&out)
    );
}

#[test]
fn the_sandbox_dies_when_warden_is_killed() {
    let marker = format!("{}.{}", 400 + std::process::id() % 61, std::process::id());
    let mut child = Command::new(warden_bin())
        .args(["run", "--no-tty", "--", "sh", "-c"])
        .arg(format!("setsid sleep {marker} & sleep {marker}"))
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while pids_running(&["sleep", &marker]).len() < 2 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        pids_running(&["sleep", &marker]).len(),
        2,
        "the sandbox did not start"
    );
    child.kill().unwrap(); // SIGKILL: warden gets no chance to clean up
    let _ = child.wait();
    let deadline = Instant::now() + Duration::from_secs(5);
    while !pids_running(&["sleep", &marker]).is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let left = pids_running(&["sleep", &marker]);
    assert!(
        left.is_empty(),
        "sandbox processes outlived warden: {left:?}"
    );
}

#[test]
fn descriptors_left_open_by_the_caller_do_not_reach_the_sandbox() {
    use std::os::fd::AsRawFd;
    use std::os::unix::process::CommandExt;
    let planted = TempDir::new("fd-leak");
    std::fs::write(planted.path().join("secret"), "leaked-through-a-descriptor").unwrap();
    let file = std::fs::File::open(planted.path().join("secret")).unwrap();
    let dir = std::fs::File::open(planted.path()).unwrap();
    let (f, d) = (file.as_raw_fd(), dir.as_raw_fd());
    let mut cmd = Command::new(warden_bin());
    cmd.args(["run", "--no-tty", "--", "sh", "-c", "ls /proc/self/fd | tr '\\n' ' '; echo; cat /proc/self/fd/7 /proc/self/fd/8 2>&1; ls /proc/self/fd/8/ 2>&1"]);
    // SAFETY: dup2 in the child before exec puts the two host descriptors at
    // 7 and 8, without close-on-exec, as a careless caller would leave them.
    unsafe {
        cmd.pre_exec(move || {
            if libc::dup2(f, 7) < 0 || libc::dup2(d, 8) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let out = cmd.stdin(Stdio::null()).output().unwrap();
    let s = stdout(&out);
    assert!(!s.contains("leaked-through-a-descriptor"), "{s}");
    assert!(
        !s.contains("secret"),
        "a host directory descriptor reached the sandbox: {s}"
    );
    let fds: Vec<&str> = s
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert!(
        fds.iter().all(|f| ["0", "1", "2", "3"].contains(f)),
        "open descriptors inside: {fds:?}"
    );
}

#[test]
fn a_server_inside_the_sandbox_is_reachable_on_its_own_loopback() {
    let out = run_sh(
        &[],
        "python3 -c '\nimport socket\ns = socket.socket(); s.bind((\"127.0.0.1\", 0)); s.listen()\nc = socket.socket(); c.connect(s.getsockname()); a, _ = s.accept()\nc.sendall(b\"ping\"); print(a.recv(4).decode())'",
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "ping");
}

#[test]
fn setuid_and_setgid_bits_cannot_be_left_in_the_workspace() {
    use std::os::unix::fs::PermissionsExt;
    let ws = TempDir::new("setid");
    let out = run_sh(
        &["-w", ws.str()],
        "cp /bin/true t && chmod 755 t && echo plain-ok; chmod 4755 t 2>&1; chmod g+s t 2>&1; \
         python3 -c 'import os\ntry:\n  os.open(\"s\", os.O_CREAT | os.O_WRONLY, 0o4755); print(\"created\")\nexcept OSError as e: print(\"open\", e.errno)'",
    );
    let s = stdout(&out);
    assert!(s.contains("plain-ok"), "{s} {}", stderr(&out));
    assert_eq!(s.matches("Operation not permitted").count(), 2, "{s}");
    assert!(s.contains(&format!("open {}", libc::EPERM)), "{s}");
    let mode = std::fs::metadata(ws.path().join("t"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o6000, 0, "a setid bit reached the host: {mode:o}");
    assert!(!ws.path().join("s").exists());
}

#[test]
fn degraded_mode_denies_metadata_changes_and_named_sockets() {
    let Some(who) = Unprivileged::get() else {
        skip("cannot get an unprivileged user to run warden as");
        return;
    };
    let ws = TempDir::new("degraded-meta");
    let victim = TempDir::new("degraded-victim");
    std::fs::write(victim.path().join("f"), "x").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(
        victim.path().join("f"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    let listener_path = victim.path().join("host.sock");
    let listener = std::os::unix::net::UnixListener::bind(&listener_path).unwrap();
    listener.set_nonblocking(true).unwrap();
    // The victim's files belong to the sandbox's user (and the socket is
    // open to all): file permissions alone would allow every attempt.
    for p in [ws.path(), victim.path(), &victim.path().join("f")] {
        who.own(p);
    }
    std::fs::set_permissions(&listener_path, std::fs::Permissions::from_mode(0o777)).unwrap();
    let script = format!(
        "chmod 777 {v}/f 2>&1; touch -d 2001-01-01 {v}/f 2>&1; \
         python3 -c 'import socket\ntry:\n  s = socket.socket(socket.AF_UNIX); s.connect(\"{v}/host.sock\"); print(\"CONNECTED\")\nexcept OSError as e: print(\"unix\", e.errno)\na, b = socket.socketpair(); print(\"pair ok\")'",
        v = victim.str()
    );
    let Some(out) = degraded_sh_as(&who, ws.path(), &script) else {
        return;
    };
    let s = stdout(&out);
    assert!(!s.contains("CONNECTED"), "{s}");
    assert!(
        s.contains(&format!("unix {}", libc::EPERM)) && s.contains("pair ok"),
        "{s} {}",
        stderr(&out)
    );
    let meta = std::fs::metadata(victim.path().join("f")).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o600, "{s}");
    assert!(
        meta.modified().unwrap()
            > std::time::SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000_000)
    );
    assert!(
        listener.accept().is_err(),
        "a connection reached the host's socket"
    );
}

#[test]
fn a_workspace_of_the_current_directory_works_with_a_relative_path() {
    let ws = TempDir::new("relative");
    let out = Command::new(warden_bin())
        .args([
            "run",
            "--no-tty",
            "-w",
            ".",
            "--",
            "sh",
            "-c",
            "echo here > f; pwd",
        ])
        .current_dir(ws.path())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "/workspace");
    assert_eq!(
        std::fs::read_to_string(ws.path().join("f")).unwrap(),
        "here\n"
    );
}

#[test]
fn links_planted_by_an_earlier_sandbox_do_not_redirect_later_mounts() {
    // A first sandbox leaves links in its workspace pointing at host paths.
    let project = TempDir::new("planted-links");
    let secret_dir = TempDir::new("link-target");
    std::fs::write(secret_dir.path().join("key"), "host-private-key").unwrap();
    let out = run_sh(
        &["-w", project.str()],
        &format!(
            "ln -s /etc pkg && ln -s {} keys && mkdir real",
            secret_dir.str()
        ),
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    // Later runs named paths through those links: every one is refused.
    for (flag, path) in [
        ("-w", project.path().join("pkg")),
        ("--ro", project.path().join("keys")),
        ("--rw", project.path().join("pkg")),
        ("-w", project.path().join("real/../pkg")),
    ] {
        let out = run_sh(
            &[flag, path.to_str().unwrap()],
            "cat /workspace/shadow key 2>&1; touch /workspace/proof; echo ran",
        );
        assert_eq!(
            code(&out),
            125,
            "{flag} {}: {}",
            path.display(),
            stdout(&out)
        );
        assert!(!stdout(&out).contains("host-private-key"));
        assert!(
            stderr(&out).contains("symbolic link") || stderr(&out).contains("'..'"),
            "{}",
            stderr(&out)
        );
    }
    assert!(!std::path::Path::new("/etc/proof").exists());
    // The real directory next to them is fine.
    let out = run_sh(
        &["-w", project.path().join("real").to_str().unwrap()],
        "echo ok",
    );
    assert_eq!(stdout(&out).trim(), "ok", "{}", stderr(&out));
}

#[test]
fn degraded_pty_run_ends_at_the_timeout_even_when_a_daemon_holds_the_terminal() {
    let marker = format!("{}.{}", 300 + std::process::id() % 53, std::process::id());
    let script = format!("setsid sh -c 'trap \"\" HUP; exec sleep {marker}' & sleep 60");
    let start = Instant::now();
    let Some(out) = warden_without_user_namespaces(&[
        "run",
        "-t",
        "--allow-degraded",
        "--timeout",
        "1s",
        "--",
        "sh",
        "-c",
        &script,
    ]) else {
        return;
    };
    assert_eq!(code(&out), 124, "{}", stderr(&out));
    assert!(
        start.elapsed() < Duration::from_secs(15),
        "warden hung after the timeout"
    );
    std::thread::sleep(Duration::from_millis(50));
    assert!(
        pids_running(&["sleep", &marker]).is_empty(),
        "the daemon survived"
    );
}

#[test]
fn without_cgroups_a_memory_hog_still_meets_a_limit() {
    let Some(who) = Unprivileged::get() else {
        skip("cannot get an unprivileged user to run warden as");
        return;
    };
    let out = who
        .command(who.bin.to_str().unwrap())
        .args([
            "run",
            "--no-tty",
            "--allow-degraded",
            "--memory",
            "64M",
            "--timeout",
            "60s",
            "--",
        ])
        .args([
            "python3",
            "-c",
            "b = bytearray(512 << 20); print('allocated')",
        ])
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .output()
        .unwrap();
    let (s, e) = (stdout(&out), stderr(&out));
    assert!(
        !s.contains("allocated"),
        "512M allocated under a 64M limit: {e}"
    );
    // A cgroup (137), or the per-process fallback (MemoryError, status 1).
    assert!(
        code(&out) == 137 || (code(&out) == 1 && e.contains("MemoryError")),
        "status {}: {e}",
        code(&out)
    );
}

#[test]
fn secrets_in_etc_are_covered() {
    let hidden = [
        "shadow",
        "shadow-",
        "gshadow",
        "gshadow-",
        "sudoers",
        "ssh/ssh_host_rsa_key",
        "ssh/ssh_host_ecdsa_key",
        "ssh/ssh_host_ed25519_key",
        "security/opasswd",
    ];
    let present: Vec<&str> = hidden
        .iter()
        .copied()
        .filter(|f| std::fs::symlink_metadata(format!("/etc/{f}")).is_ok_and(|m| m.is_file()))
        .collect();
    if present.is_empty() {
        skip("no secret files in this host's /etc to cover");
        return;
    }
    let script: String = present
        .iter()
        .map(|f| format!("printf '{f}='; wc -c < /etc/{f} 2>/dev/null || echo unreadable; "))
        .collect();
    let out = run_sh(&[], &script);
    let s = stdout(&out);
    for f in &present {
        let line = s
            .lines()
            .find(|l| l.starts_with(&format!("{f}=")))
            .unwrap_or_default();
        let value = line
            .split_once('=')
            .map(|(_, v)| v.trim())
            .unwrap_or_default();
        assert!(
            value == "0" || value == "unreadable",
            "/etc/{f} inside: {line:?} ({s})"
        );
    }
}

#[test]
fn a_run_with_binds_ends_cleanly_without_runtime_errors() {
    let ws = TempDir::new("clean-end");
    let ro = TempDir::new("clean-end-ro");
    let out = run_sh(
        &["-w", ws.str(), "--ro", ro.str(), "--rw", ro.str()],
        "true",
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(
        stderr(&out).trim(),
        "",
        "warden printed something on a clean run"
    );
}

#[test]
fn a_single_file_can_be_bound_read_only() {
    let dir = TempDir::new("file-bind");
    let f = dir.path().join("config.toml");
    std::fs::write(&f, "key = 1\n").unwrap();
    let out = run_sh(
        &["--ro", f.to_str().unwrap()],
        &format!(
            "cat {0}; echo changed >> {0} && echo WROTE; true",
            f.display()
        ),
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("key = 1"), "{}", stdout(&out));
    assert!(!stdout(&out).contains("WROTE"), "{}", stdout(&out));
    assert_eq!(std::fs::read_to_string(&f).unwrap(), "key = 1\n");
}

#[test]
fn a_command_that_never_reads_its_terminal_still_ends_at_the_timeout() {
    // The person pastes far more than a terminal holds while the command
    // reads none of it: warden's relay must not block on it (and miss the
    // deadline).
    let term = TestTerminal::open(24, 80);
    let mut child = term.spawn(Command::new(warden_bin()).args([
        "run",
        "--timeout",
        "2s",
        "--",
        "python3",
        "-c",
        "import tty, time; tty.setraw(0); time.sleep(60)",
    ]));
    // The person's terminal shows what comes (the echo of the paste).
    let mut screen = term.master.try_clone().unwrap();
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 65536];
        while matches!(screen.read(&mut buf), Ok(n) if n > 0) {}
    });
    let mut master = term.master.try_clone().unwrap();
    std::thread::spawn(move || {
        use std::io::Write;
        let chunk = vec![b'x'; 4096];
        for _ in 0..1024 {
            if master.write_all(&chunk).is_err() {
                break;
            }
        }
    });
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert_eq!(status.code(), Some(124), "{status:?}");
            break;
        }
        if start.elapsed() > Duration::from_secs(15) {
            let _ = child.kill();
            panic!("warden did not end the sandbox at its --timeout");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
