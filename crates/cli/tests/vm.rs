//! The microVM backend (`--isolation vm`) through the real command: a
//! real QEMU booting a real guest kernel (under software emulation on a
//! host whose KVM cannot boot it), attacked as the process backend is.
//!
//! Each boot costs seconds under emulation, so the default suite runs the
//! refusals (no boot) and one boot that checks the most; the rest are
//! `#[ignore]`d and run by `.ci/run` with `-- --ignored` under a time
//! limit. Every test that boots skips, saying why, when the host has no
//! QEMU or no guest kernel (see `warden vm kernel`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;
use common::*;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Where the guest kernel and the VM cache are: `WARDEN_VM_DIR` when the
/// test runs with one, else root's default (where `.ci/run` unpacks the
/// kernel).
fn vm_dir() -> PathBuf {
    std::env::var_os("WARDEN_VM_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/lib/warden/vm"))
}

fn vm_warden(state: &Path, args: &[&str], stdin: Option<&[u8]>) -> Output {
    vm_warden_env(state, args, stdin, &[])
}

fn vm_warden_env(
    state: &Path,
    args: &[&str],
    stdin: Option<&[u8]>,
    env: &[(&str, &str)],
) -> Output {
    let mut c = Command::new(warden_bin());
    for (k, v) in env {
        c.env(k, v);
    }
    c.args(args)
        .env("WARDEN_STATE_DIR", state.join("warden"))
        .env("WARDEN_VM_DIR", vm_dir())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        });
    let mut child = c.spawn().unwrap();
    if let Some(data) = stdin {
        let mut i = child.stdin.take().unwrap();
        i.write_all(data).unwrap();
    }
    child.wait_with_output().unwrap()
}

/// The guest kernel's release, when a VM sandbox can start here; `None`
/// (with the reason printed) when not. The first call also lets warden
/// probe KVM once (bounded), as `warden doctor` does.
fn guest_release() -> Option<String> {
    static READY: OnceLock<Result<String, String>> = OnceLock::new();
    let r = READY.get_or_init(|| {
        let state = TempDir::new("vm-kernel");
        let o = vm_warden(state.path(), &["vm", "kernel", "--json"], None);
        let v: serde_json::Value = serde_json::from_slice(&o.stdout)
            .map_err(|e| format!("`warden vm kernel --json` said nothing readable: {e}"))?;
        if v["vmm"].is_null() {
            return Err("no QEMU on this host (apt-get install qemu-system-x86)".into());
        }
        if let Some(e) = v["kernel"]["Err"].as_str() {
            return Err(format!("no guest kernel: {e}"));
        }
        if v["guest_init_present"] != true {
            return Err("warden-guest-init is not built beside warden".into());
        }
        let _ = vm_warden(state.path(), &["doctor"], None);
        v["kernel"]["Ok"]["release"]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| "`warden vm kernel --json` names no release".to_string())
    });
    match r {
        Ok(rel) => Some(rel.clone()),
        Err(why) => {
            skip(why);
            None
        }
    }
}

fn host_release() -> String {
    nix_uname()
}

fn nix_uname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .unwrap()
        .trim()
        .to_string()
}

/// A file planted where the guest must not see it, removed on drop.
struct Planted(PathBuf);

impl Drop for Planted {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn plant(dir: &str, secret: &str) -> Option<Planted> {
    let p = Path::new(dir).join(unique("warden-vm-planted"));
    std::fs::write(&p, secret).ok()?;
    Some(Planted(p))
}

#[test]
fn a_vm_sandbox_runs_its_own_kernel_sees_no_host_secret_and_writes_the_workspace() {
    let Some(release) = guest_release() else {
        return;
    };
    if release == host_release() {
        skip("the guest kernel is the host's own release: the test could not tell them apart");
        return;
    }
    let state = TempDir::new("vm-one");
    let ws = TempDir::new("vm-ws");
    let secret = unique("vm-secret-value");
    // Root's home and /etc: the host's secrets live there.
    let planted: Vec<Planted> = ["/root", "/etc", "/tmp"]
        .iter()
        .filter_map(|d| plant(d, &secret))
        .collect();
    assert!(!planted.is_empty(), "could not plant a single file");
    let mut script = String::from("uname -r; cat /proc/version; ");
    for p in &planted {
        script.push_str(&format!("cat {} 2>/dev/null; ", p.0.display()));
    }
    script.push_str(
        "touch /usr/warden-vm-write 2>/dev/null && echo USR-WRITABLE; \
         echo x > /etc/warden-vm-write 2>/dev/null && echo ETC-WRITABLE; \
         ls /dev | grep -q vport && echo PORT-VISIBLE; \
         unshare -U true 2>/dev/null && echo UNSHARE-WORKED; \
         echo written-in-guest > /workspace/out.txt; exit 3",
    );
    let started = Instant::now();
    let o = vm_warden(
        state.path(),
        &[
            "run",
            "--isolation",
            "vm",
            "--no-tty",
            "-w",
            ws.str(),
            "--",
            "sh",
            "-c",
            &script,
        ],
        None,
    );
    eprintln!("boot and run took {:?}", started.elapsed());
    let out = stdout(&o);
    assert_eq!(code(&o), 3, "stdout: {out}\nstderr: {}", stderr(&o));
    let first = out.lines().next().unwrap_or_default();
    assert_eq!(first, release, "uname -r in the guest: {out}");
    assert_ne!(first, host_release());
    assert!(out.contains(&format!("Linux version {release}")), "{out}");
    assert!(
        !out.contains(&secret),
        "a planted host file was read: {out}"
    );
    assert!(
        !out.contains("USR-WRITABLE"),
        "the host's /usr was writable"
    );
    assert!(!Path::new("/usr/warden-vm-write").exists());
    assert_eq!(
        std::fs::read_to_string(ws.path().join("out.txt")).unwrap(),
        "written-in-guest\n"
    );
}

#[test]
fn a_vm_sandbox_refuses_what_it_cannot_enforce_yet_before_booting() {
    let state = TempDir::new("vm-refuse");
    let ws = TempDir::new("vm-refuse-ws");
    for (args, word) in [
        (vec!["--publish", "18080:80"], "--publish"),
        (vec!["--ro", "/opt"], "binds"),
        (vec!["--isolation", "vmm"], "not an isolation"),
    ] {
        let mut all = vec!["run", "--no-tty", "-w", ws.str()];
        if !args.contains(&"vmm") {
            all.extend(["--isolation", "vm"]);
        }
        all.extend(args.iter().copied());
        all.extend(["--", "true"]);
        let started = Instant::now();
        let o = vm_warden(state.path(), &all, None);
        assert_eq!(code(&o), 125, "{all:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(word), "{all:?}: {}", stderr(&o));
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "it booted first"
        );
    }
}

#[test]
#[ignore = "boots a VM (slow under emulation): run with -- --ignored"]
fn a_vm_sandbox_past_its_timeout_is_killed_with_its_vmm() {
    let Some(_) = guest_release() else {
        return;
    };
    let state = TempDir::new("vm-timeout");
    let ws = TempDir::new("vm-timeout-ws");
    let o = vm_warden(
        state.path(),
        &[
            "run",
            "--isolation",
            "vm",
            "--no-tty",
            "--timeout",
            "3s",
            "-w",
            ws.str(),
            "--",
            "sleep",
            "600",
        ],
        None,
    );
    assert_eq!(code(&o), 124, "{}", stderr(&o));
    assert!(stderr(&o).contains("--timeout"), "{}", stderr(&o));
    // The VMM (whose command line names the workspace) is gone with it.
    assert!(
        pids_with_marker(ws.str()).is_empty(),
        "a VMM outlived its sandbox"
    );
}

#[test]
#[ignore = "boots a VM (slow under emulation): run with -- --ignored"]
fn a_vm_guest_has_no_route_to_a_host_listener() {
    let Some(_) = guest_release() else {
        return;
    };
    // A listener on the host's loopback and one on every address, each
    // recording whether anything ever arrives.
    let local = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let any = std::net::TcpListener::bind("0.0.0.0:0").unwrap();
    let (lp, ap) = (
        local.local_addr().unwrap().port(),
        any.local_addr().unwrap().port(),
    );
    for l in [&local, &any] {
        l.set_nonblocking(true).unwrap();
    }
    let state = TempDir::new("vm-net");
    let ws = TempDir::new("vm-net-ws");
    let script = format!(
        "import socket\nfor h, p in [('127.0.0.1', {lp}), ('10.0.2.2', {ap}), ('192.168.0.1', {ap})]:\n    try:\n        socket.create_connection((h, p), timeout=3); print('CONNECTED', h)\n    except OSError as e: print('refused', h, e)\n"
    );
    let o = vm_warden(
        state.path(),
        &[
            "run",
            "--isolation",
            "vm",
            "--no-tty",
            "--allow-domain",
            "localhost",
            "-w",
            ws.str(),
            "--",
            "python3",
            "-c",
            &script,
        ],
        None,
    );
    let out = stdout(&o);
    assert_eq!(code(&o), 0, "{out}\n{}", stderr(&o));
    assert!(!out.contains("CONNECTED"), "{out}");
    for l in [&local, &any] {
        assert!(l.accept().is_err(), "a connection reached the host");
    }
}

/// Stops the sandbox even when the test fails half-way.
struct Stopper<'a>(&'a Path, &'a str);

impl Drop for Stopper<'_> {
    fn drop(&mut self) {
        let _ = vm_warden(self.0, &["stop", "--time", "1s", self.1], None);
    }
}

#[test]
#[ignore = "boots a VM (slow under emulation): run with -- --ignored"]
fn exec_into_a_created_vm_sandbox_runs_two_commands_at_once() {
    let Some(release) = guest_release() else {
        return;
    };
    let state = TempDir::new("vm-exec");
    ok(&vm_warden(
        state.path(),
        &["create", "--isolation", "vm", "box"],
        None,
    ));
    ok(&vm_warden(state.path(), &["start", "box"], None));
    let _stop = Stopper(state.path(), "box");
    let got = ok(&vm_warden(
        state.path(),
        &["exec", "box", "--", "uname", "-r"],
        None,
    ));
    assert_eq!(got.trim(), release);
    // Exit codes and stdin pass through.
    let o = vm_warden(
        state.path(),
        &["exec", "box", "--", "sh", "-c", "exit 5"],
        None,
    );
    assert_eq!(code(&o), 5);
    let o = vm_warden(
        state.path(),
        &["exec", "box", "--", "sh", "-c", "tr a-z A-Z"],
        Some(b"through the vm\n"),
    );
    assert_eq!(stdout(&o), "THROUGH THE VM\n");
    // Two execs at once: together they take about as long as one.
    let started = Instant::now();
    let spawn = |tag: &str| {
        let mut c = Command::new(warden_bin());
        c.args([
            "exec",
            "box",
            "--",
            "sh",
            "-c",
            &format!("sleep 3; echo {tag}"),
        ])
        .env("WARDEN_STATE_DIR", state.path().join("warden"))
        .env("WARDEN_VM_DIR", vm_dir())
        .stdin(Stdio::null())
        .stdout(Stdio::piped());
        c.spawn().unwrap()
    };
    let (mut a, mut b) = (spawn("first"), spawn("second"));
    let mut out_a = String::new();
    let mut out_b = String::new();
    a.stdout.take().unwrap().read_to_string(&mut out_a).unwrap();
    b.stdout.take().unwrap().read_to_string(&mut out_b).unwrap();
    assert!(a.wait().unwrap().success() && b.wait().unwrap().success());
    assert_eq!((out_a.trim(), out_b.trim()), ("first", "second"));
    assert!(
        started.elapsed() < Duration::from_secs(6),
        "the execs ran one after the other: {:?}",
        started.elapsed()
    );
    // A file written by one exec persists in the sandbox's workspace layer.
    ok(&vm_warden(
        state.path(),
        &[
            "exec",
            "box",
            "--",
            "sh",
            "-c",
            "echo kept > /workspace/kept.txt",
        ],
        None,
    ));
    let diff = vm_warden(state.path(), &["diff", "box"], None);
    assert!(stdout(&diff).contains("kept.txt"), "{}", stdout(&diff));
    // The VMM serves the sandbox's layer (its command line names it):
    // after the stop, no VMM is left.
    let layer = state.path().join("warden/sandboxes/box/upper");
    assert!(!pids_with_marker(layer.to_str().unwrap()).is_empty());
    ok(&vm_warden(state.path(), &["stop", "box"], None));
    wait_until("the VMM to end", Duration::from_secs(10), || {
        pids_with_marker(layer.to_str().unwrap()).is_empty()
    });
}

#[test]
#[ignore = "boots a VM (slow under emulation): run with -- --ignored"]
fn a_vm_never_outlives_its_supervisor_killed_outright() {
    let Some(_) = guest_release() else {
        return;
    };
    let state = TempDir::new("vm-orphan");
    ok(&vm_warden(
        state.path(),
        &["create", "--isolation", "vm", "orphan"],
        None,
    ));
    ok(&vm_warden(state.path(), &["start", "orphan"], None));
    let _stop = Stopper(state.path(), "orphan");
    let layer = state.path().join("warden/sandboxes/orphan/upper");
    let layer = layer.to_str().unwrap();
    assert!(!pids_with_marker(layer).is_empty(), "no VMM runs");
    // SIGKILL: the supervisor cannot clean anything up; its end of the
    // channel closes with it, and the guest must end (and QEMU with it).
    let sup = supervisor_pid(state.path(), "orphan");
    nix_kill(sup);
    wait_until("the VMM to end", Duration::from_secs(20), || {
        pids_with_marker(layer).is_empty()
    });
}

fn nix_kill(pid: i32) {
    // SAFETY: kill with a PID and a signal number; no memory is passed.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
    }
}

#[test]
#[ignore = "boots a VM (slow under emulation): run with -- --ignored"]
fn the_daemon_serves_a_vm_sandbox_with_no_change_of_its_own() {
    use common::daemon::{call, json, Daemon};
    let Some(release) = guest_release() else {
        return;
    };
    if !common::daemon::curl_available() {
        skip("curl is not installed");
        return;
    }
    let state = TempDir::new("vm-daemon");
    let vm = vm_dir();
    let d = Daemon::start_with(state.path(), false, &[], &[("WARDEN_VM_DIR", &vm)]);
    let (status, body) = call(
        &d,
        "POST",
        "/v1/sandboxes",
        Some(r#"{"name":"v1","spec":{"isolation":"vm"}}"#),
        None,
    );
    assert_eq!(status, 201, "{body}");
    let (status, body) = call(
        &d,
        "POST",
        "/v1/sandboxes/v1/exec",
        Some(r#"{"shell":"uname -r; exit 3"}"#),
        None,
    );
    assert_eq!(status, 200, "{body}");
    let v = json(&body);
    assert_eq!(v["exit_status"], 3, "{body}");
    assert_eq!(v["stdout"].as_str().unwrap().trim(), release);
    let (status, body) = call(&d, "DELETE", "/v1/sandboxes/v1", None, None);
    assert!(status < 300, "{status} {body}");
}

#[test]
#[ignore = "boots a VM (slow under emulation): run with -- --ignored"]
fn the_guest_checks_fail_when_the_guest_init_is_weakened() {
    // The probes of the first test must be able to fail: with Landlock and
    // seccomp switched off in the guest (a debug build's test switch), the
    // guest's /etc is writable and a new namespace can be made.
    if !cfg!(debug_assertions) {
        skip("the weakening switch exists only in debug builds");
        return;
    }
    if !is_root() {
        skip("needs a root-owned workspace");
        return;
    }
    let Some(_) = guest_release() else {
        return;
    };
    let state = TempDir::new("vm-weak");
    // A root-owned workspace: the guest's processes are UID 0 (without
    // capabilities), so only Landlock keeps them out of the guest's /etc.
    let ws = TempDir::new("vm-weak-ws");
    let o = vm_warden_env(
        state.path(),
        &[
            "run",
            "--isolation",
            "vm",
            "--no-tty",
            "-w",
            ws.str(),
            "--",
            "sh",
            "-c",
            "echo x > /etc/warden-vm-write 2>/dev/null && echo ETC-WRITABLE; \
             unshare -U true 2>/dev/null && echo UNSHARE-WORKED; true",
        ],
        None,
        &[("WARDEN_TEST_WEAKEN", "seccomp,landlock")],
    );
    let out = stdout(&o);
    assert!(out.contains("ETC-WRITABLE"), "{out}\n{}", stderr(&o));
    assert!(out.contains("UNSHARE-WORKED"), "{out}\n{}", stderr(&o));
}

#[test]
#[ignore = "boots a VM (slow under emulation): run with -- --ignored"]
fn nobody_in_the_guest_can_use_dev_null() {
    // Without a workspace the guest's processes are nobody: the devices
    // they need must be theirs to write (mknod applies the umask).
    let Some(_) = guest_release() else {
        return;
    };
    let state = TempDir::new("vm-nobody");
    let o = vm_warden(
        state.path(),
        &[
            "run",
            "--isolation",
            "vm",
            "--no-tty",
            "--",
            "sh",
            "-c",
            "id -u; echo x > /dev/null && echo NULL-OK",
        ],
        None,
    );
    let out = stdout(&o);
    assert!(out.starts_with("65534\n"), "{out}\n{}", stderr(&o));
    assert!(out.contains("NULL-OK"), "{out}\n{}", stderr(&o));
}
