//! An escaped VMM, played by a stand-in: `WARDEN_VMM` points the VM backend
//! at a script that warden starts exactly as it starts QEMU (same
//! arguments, descriptors, identity, namespaces, Landlock, seccomp, cgroup)
//! and that does what code running in a QEMU taken over through its 9p or
//! virtio-serial device would try: read a host file outside everything the
//! VM serves, write outside the workspace, and reach a listener on the
//! host's loopback over TCP and UDP. It records what it got in the
//! workspace (the one place it may write), then exits, so no guest boots
//! and the tests are quick.
//!
//! Each test skips, saying why, when the host has no guest kernel (the VM
//! backend refuses to start without one, before it runs any VMM).

use crate::common::vm::vm_dir;
use crate::common::*;
use std::io::Read;
use std::net::{TcpListener, UdpSocket};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The guest kernel's release, or `None` (the reason printed).
fn guest_release() -> Option<String> {
    let boot = vm_dir().join("kernel/boot");
    let release = std::fs::read_dir(&boot)
        .ok()
        .into_iter()
        .flatten()
        .flatten()
        .find_map(|e| {
            e.file_name()
                .to_str()
                .and_then(|n| n.strip_prefix("vmlinuz-"))
                .map(str::to_string)
        });
    if release.is_none() {
        skip(&format!(
            "no guest kernel in {} (see `warden vm kernel`)",
            boot.display()
        ));
    }
    release
}

/// Listeners on the host's loopback that record whether anything arrived.
struct Loopback {
    tcp_port: u16,
    udp_port: u16,
    seen: Arc<Mutex<Vec<String>>>,
}

impl Loopback {
    fn start() -> Loopback {
        let tcp = TcpListener::bind("127.0.0.1:0").unwrap();
        let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
        let (tcp_port, udp_port) = (
            tcp.local_addr().unwrap().port(),
            udp.local_addr().unwrap().port(),
        );
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = seen.clone();
        std::thread::spawn(move || {
            for conn in tcp.incoming() {
                let Ok(mut conn) = conn else { continue };
                conn.set_read_timeout(Some(Duration::from_millis(500)))
                    .unwrap();
                let mut buf = vec![0u8; 4096];
                let n = conn.read(&mut buf).unwrap_or(0);
                s.lock().unwrap().push(format!(
                    "tcp connection: {:?}",
                    String::from_utf8_lossy(&buf[..n])
                ));
            }
        });
        let s = seen.clone();
        std::thread::spawn(move || {
            let mut buf = vec![0u8; 4096];
            while let Ok((n, _)) = udp.recv_from(&mut buf) {
                s.lock().unwrap().push(format!(
                    "udp datagram: {:?}",
                    String::from_utf8_lossy(&buf[..n])
                ));
            }
        });
        Loopback {
            tcp_port,
            udp_port,
            seen,
        }
    }

    fn arrived(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }
}

/// The stand-in VMM: finds the workspace share among QEMU's arguments,
/// then attacks and reports there.
fn escaped_vmm(at: &Path, planted: &Path, written: &Path, net: &Loopback) {
    let script = format!(
        r#"#!/bin/bash
for a in "$@"; do case "$a" in *id=ws,path=*) ws="${{a#*path=}}"; ws="${{ws%%,*}}";; esac; done
r="$ws/report"
echo "ran as $(id -u):$(id -g)" > "$r"
echo "read: $(cat '{planted}' 2>&1)" >> "$r"
echo "write: $( (echo pwned > '{written}') 2>&1 && echo done)" >> "$r"
echo "tcp: $( (exec 3<>/dev/tcp/127.0.0.1/{tcp} && echo escaped-tcp >&3) 2>&1 && echo sent)" >> "$r"
echo "udp: $( (echo escaped-udp > /dev/udp/127.0.0.1/{udp}) 2>&1 && echo sent)" >> "$r"
sleep 1
exit 3
"#,
        planted = planted.display(),
        written = written.display(),
        tcp = net.tcp_port,
        udp = net.udp_port,
    );
    std::fs::write(at, script).unwrap();
    std::fs::set_permissions(at, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// What the stand-in got: its report, and what reached the listeners.
fn check_escape_contained(report: &Path, secret: &str, written: &Path, net: &Loopback, out: &str) {
    std::thread::sleep(Duration::from_millis(700));
    let report = std::fs::read_to_string(report).unwrap_or_default();
    eprintln!("the escaped VMM's report:\n{report}");
    assert!(
        report.starts_with("ran as"),
        "the stand-in VMM did not run or could not write the workspace: {out}"
    );
    assert!(
        !report.contains(secret),
        "an escaped VMM read a host file outside what the VM serves:\n{report}"
    );
    assert!(
        !written.exists(),
        "an escaped VMM wrote {} outside the workspace:\n{report}",
        written.display()
    );
    assert!(
        net.arrived().is_empty(),
        "an escaped VMM reached a listener on the host's loopback: {:?}\n{report}",
        net.arrived()
    );
}

#[test]
fn an_escaped_vmm_started_by_root_reads_writes_and_reaches_nothing_of_the_host() {
    let Some(_) = guest_release() else {
        return;
    };
    if !is_root() {
        skip("needs root: this is the VMM of a sandbox started by root");
        return;
    }
    let dir = TempDir::new("vmm-escape-root");
    // The workspace is root's here: the VMM serves it as its owner, which
    // is the hardest case (root's own files are the VMM's own then).
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let secret = unique("root-only-secret");
    let planted = Path::new("/root").join(unique("warden-vmm-planted"));
    std::fs::write(&planted, &secret).unwrap();
    std::fs::set_permissions(&planted, std::fs::Permissions::from_mode(0o600)).unwrap();
    let _planted = Removed(planted.clone());
    let written = Path::new("/root").join(unique("warden-vmm-written"));
    let _written = Removed(written.clone());
    let net = Loopback::start();
    let vmm = dir.path().join("escaped-qemu");
    escaped_vmm(&vmm, &planted, &written, &net);
    let run = Command::new(warden_bin());
    let (status, out) = run_vm(run, dir.path(), &vm_dir(), &ws, &vmm, &[], &[]);
    assert_ne!(status, 0, "a stand-in VMM booted a guest? {out}");
    check_escape_contained(&ws.join("report"), &secret, &written, &net, &out);
}

#[test]
fn an_escaped_rootless_vmm_reads_writes_and_reaches_nothing_of_its_user() {
    let Some(release) = guest_release() else {
        return;
    };
    let Some(who) = Unprivileged::get() else {
        skip("cannot get an unprivileged user to run warden as");
        return;
    };
    let dir = TempDir::new("vmm-escape-rootless");
    users_vm_dir(dir.path(), &release, &who);
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    // The user's own file, outside the workspace: theirs to read, never
    // the sandbox's.
    let secret = unique("users-own-secret");
    let planted = dir.path().join("private");
    std::fs::write(&planted, &secret).unwrap();
    std::fs::set_permissions(&planted, std::fs::Permissions::from_mode(0o600)).unwrap();
    let written = dir.path().join("written");
    let net = Loopback::start();
    let vmm = dir.path().join("escaped-qemu");
    escaped_vmm(&vmm, &planted, &written, &net);
    let (status, out) = run_users_vm(&who, dir.path(), &ws, &vmm, &[]);
    assert_ne!(status, 0, "a stand-in VMM booted a guest? {out}");
    check_escape_contained(&ws.join("report"), &secret, &written, &net, &out);
}

/// A file removed on drop.
struct Removed(PathBuf);

impl Drop for Removed {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The stand-in VMM of a nosy escape: before anything else it reads which
/// cgroups it is in, then looks around the host (which processes it sees,
/// whether host paths exist at all), signals a host process it was told
/// the PID of, and (when `hog` is set) allocates `hog` MiB at once. It
/// reports in the workspace.
///
/// It runs with the VMM's Landlock switched off (`WARDEN_TEST_WEAKEN`, a
/// debug build's test switch), which would refuse it `/proc` and hide the
/// cgroup it reads: what it sees is what its namespaces alone let it see.
fn nosy_vmm(at: &Path, looked_for: &[&Path], victim: u32, hog: Option<u64>) {
    let looked: Vec<String> = looked_for
        .iter()
        .map(|p| format!("'{}'", p.display()))
        .collect();
    let hog = match hog {
        Some(mib) => format!(
            r#"echo "hog: $(/usr/bin/perl -e '$x = "a" x ({mib} << 20); print "survived"' 2>&1; echo " status $?")" >> "$r""#
        ),
        None => String::new(),
    };
    let script = format!(
        r#"#!/bin/bash
read -r -d '' cg < /proc/self/cgroup
for a in "$@"; do case "$a" in *id=ws,path=*) ws="${{a#*path=}}"; ws="${{ws%%,*}}";; esac; done
r="$ws/report"
echo "ran as $(id -u):$(id -g)" > "$r"
echo "cgroup: ${{cg//$'\n'/;}}" >> "$r"
procs=(/proc/[0-9]*)
echo "self: $$" >> "$r"
echo "procs: ${{procs[*]}}" >> "$r"
if [ -e /proc/{victim} ]; then echo "exists: /proc/{victim}" >> "$r"; fi
for p in {looked}; do if [ -e "$p" ] || [ -L "$p" ]; then echo "exists: $p" >> "$r"; fi; done
echo "kill: $( (kill -9 {victim}) 2>&1 && echo killed)" >> "$r"
{hog}
exit 3
"#,
        looked = looked.join(" "),
    );
    std::fs::write(at, script).unwrap();
    std::fs::set_permissions(at, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// A host process for the nosy VMM to try to kill.
struct Victim(std::process::Child);

impl Victim {
    fn start() -> Victim {
        Victim(
            std::process::Command::new("sleep")
                .arg("120")
                .spawn()
                .unwrap(),
        )
    }

    fn alive(&mut self) -> bool {
        matches!(self.0.try_wait(), Ok(None))
    }
}

impl Drop for Victim {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// What the nosy VMM saw must be nothing of the host's.
fn check_nosy_contained(report: &str, looked_for: &[&Path], victim: &mut Victim, out: &str) {
    eprintln!("the nosy VMM's report:\n{report}");
    assert!(
        report.starts_with("ran as"),
        "the stand-in VMM did not run or could not write the workspace: {out}"
    );
    let line = |key: &str| {
        report
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .unwrap_or_default()
            .to_string()
    };
    assert!(
        !report.contains(&format!("exists: /proc/{}\n", victim.0.id())),
        "an escaped VMM can tell a host process exists:\n{report}"
    );
    let me = line("self: ");
    let procs: Vec<&str> = line("procs: ").leak().split_whitespace().collect();
    assert_eq!(
        procs,
        vec![format!("/proc/{me}")],
        "an escaped VMM sees processes other than itself in /proc:\n{report}"
    );
    for p in looked_for {
        assert!(
            !report.contains(&format!("exists: {}\n", p.display())),
            "an escaped VMM can tell that {} exists on the host:\n{report}",
            p.display()
        );
    }
    assert!(
        !line("kill: ").contains("killed") && victim.alive(),
        "an escaped VMM killed a host process:\n{report}"
    );
}

/// The host paths the nosy VMM looks for: other people's homes, root's,
/// the host's passwords, a file planted in the host's /tmp.
fn host_paths(planted: &Path) -> Vec<PathBuf> {
    vec![
        PathBuf::from("/home"),
        PathBuf::from("/root"),
        PathBuf::from("/etc/shadow"),
        PathBuf::from("/etc/passwd"),
        PathBuf::from("/var/log"),
        planted.to_path_buf(),
    ]
}

/// What the nosy VMM is let do besides: Landlock weakened, as if a flaw
/// had let it through, so that what holds it is the rest.
const WEAKEN: (&str, &str) = ("WARDEN_TEST_WEAKEN", "landlock");

/// `warden run --isolation vm -w WS EXTRA -- true`, `warden` being `run`
/// (root's or a user's), with the stand-in `vmm` as the VMM, the VM
/// directory `vm`, its state in `dir`, and `env` besides: the status and
/// everything it said. The workspace is served over 9p, by the VMM itself (over
/// virtio-fs it has no right on the workspace at all: see vm_fs.rs); the
/// stand-in reports there, the one place it may write.
fn run_vm(
    mut run: Command,
    dir: &Path,
    vm: &Path,
    ws: &Path,
    vmm: &Path,
    extra: &[&str],
    env: &[(&str, &str)],
) -> (i32, String) {
    let o = run
        .args(["run", "--isolation", "vm", "--no-tty", "-w"])
        .arg(ws)
        .args(extra)
        .args(["--", "true"])
        .env("WARDEN_VMM", vmm)
        .env("WARDEN_VM_FS", "9p")
        .env("WARDEN_VM_ACCEL", "tcg")
        .env("WARDEN_VM_DIR", vm)
        .env("WARDEN_STATE_DIR", dir.join("state"))
        .envs(env.iter().copied())
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    (code(&o), format!("{}\n{}", stdout(&o), stderr(&o)))
}

/// [`run_vm`] by root, with root's VM directory and [`WEAKEN`].
fn run_root_vm(dir: &Path, ws: &Path, vmm: &Path, extra: &[&str]) -> (i32, String) {
    let run = Command::new(warden_bin());
    run_vm(run, dir, &vm_dir(), ws, vmm, extra, &[WEAKEN])
}

/// [`run_vm`] by the user `who`, `dir` (made theirs) holding their VM
/// directory.
fn run_users_vm(
    who: &Unprivileged,
    dir: &Path,
    ws: &Path,
    vmm: &Path,
    env: &[(&str, &str)],
) -> (i32, String) {
    let _ = Command::new("chown")
        .args(["-R", &format!("{}:{}", who.uid, who.gid)])
        .arg(dir)
        .status();
    let run = who.command(who.bin.to_str().unwrap());
    run_vm(run, dir, &dir.join("vm"), ws, vmm, &[], env)
}

/// The user `who`'s own VM directory, `dir`'s `vm`, with a copy of the
/// guest kernel (root's is not theirs to read), and the guest init beside
/// their warden.
fn users_vm_dir(dir: &Path, release: &str, who: &Unprivileged) {
    let kernel = dir.join("vm/kernel/boot");
    std::fs::create_dir_all(&kernel).unwrap();
    std::fs::create_dir_all(dir.join("vm/kernel/lib/modules").join(release)).unwrap();
    std::fs::copy(
        vm_dir().join(format!("kernel/boot/vmlinuz-{release}")),
        kernel.join(format!("vmlinuz-{release}")),
    )
    .unwrap();
    let init = who.bin.parent().unwrap().join("warden-guest-init");
    std::fs::copy(env!("CARGO_BIN_EXE_warden-guest-init"), &init).unwrap();
}

#[test]
fn an_escaped_vmm_started_by_root_sees_no_host_process_path_or_cgroup_but_its_own() {
    let Some(_) = guest_release() else {
        return;
    };
    if !is_root() {
        skip("needs root: this is the VMM of a sandbox started by root");
        return;
    }
    let dir = TempDir::new("vmm-nosy-root");
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let planted = std::env::temp_dir().join(unique("warden-vmm-planted"));
    std::fs::write(&planted, "planted").unwrap();
    let _planted = Removed(planted.clone());
    let looked = host_paths(&planted);
    let looked: Vec<&Path> = looked.iter().map(PathBuf::as_path).collect();
    let mut victim = Victim::start();
    let vmm = dir.path().join("nosy-qemu");
    nosy_vmm(&vmm, &looked, victim.0.id(), None);
    let (status, out) = run_root_vm(dir.path(), &ws, &vmm, &[]);
    assert_ne!(status, 0, "a stand-in VMM booted a guest? {out}");
    let report = std::fs::read_to_string(ws.join("report")).unwrap_or_default();
    check_nosy_contained(&report, &looked, &mut victim, &out);
    // Its first instruction already ran in the sandbox's cgroup (named
    // after the sandbox: `warden-vm-…`), in the hierarchy that bounds its memory.
    let cgroup = report
        .lines()
        .find_map(|l| l.strip_prefix("cgroup: "))
        .unwrap_or_default();
    let memory = cgroup
        .split(';')
        .find(|l| {
            l.split(':')
                .nth(1)
                .is_some_and(|c| c.split(',').any(|c| c == "memory"))
        })
        .or_else(|| cgroup.split(';').find(|l| l.starts_with("0::")))
        .unwrap_or_default();
    assert!(
        memory.contains("/warden-vm-"),
        "the VMM ran its first instruction outside the sandbox's cgroup ({memory:?}):\n{report}"
    );
}

#[test]
fn a_vmm_allocating_memory_at_once_is_bounded_by_the_sandboxs_cgroup() {
    let Some(_) = guest_release() else {
        return;
    };
    if !is_root() {
        skip("needs root: the cgroup of a sandbox started by root");
        return;
    }
    let dir = TempDir::new("vmm-hog");
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let victim = Victim::start();
    let vmm = dir.path().join("hungry-qemu");
    // 128 MiB of guest RAM and the VMM's overhead (384 MiB emulated) bound
    // the VMM's cgroup: 1 GiB is well beyond.
    nosy_vmm(&vmm, &[], victim.0.id(), Some(1024));
    let (status, out) = run_root_vm(dir.path(), &ws, &vmm, &["--memory", "128M"]);
    assert_ne!(status, 0, "a stand-in VMM booted a guest? {out}");
    let report = std::fs::read_to_string(ws.join("report")).unwrap_or_default();
    eprintln!("the hungry VMM's report:\n{report}");
    let hog = report
        .lines()
        .find_map(|l| l.strip_prefix("hog: "))
        .unwrap_or_else(|| panic!("the hungry VMM did not report: {out}\n{report}"));
    assert!(
        !hog.contains("survived"),
        "a VMM allocated 1 GiB beyond its cgroup's bound: {hog}"
    );
}

#[test]
fn an_escaped_rootless_vmm_sees_no_host_process_or_path_but_its_own() {
    let Some(release) = guest_release() else {
        return;
    };
    let Some(who) = Unprivileged::get() else {
        skip("cannot get an unprivileged user to run warden as");
        return;
    };
    let dir = TempDir::new("vmm-nosy-rootless");
    users_vm_dir(dir.path(), &release, &who);
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let planted = std::env::temp_dir().join(unique("warden-vmm-planted"));
    std::fs::write(&planted, "planted").unwrap();
    let _planted = Removed(planted.clone());
    let looked = host_paths(&planted);
    let looked: Vec<&Path> = looked.iter().map(PathBuf::as_path).collect();
    // A process of the same user: theirs to signal, never the VMM's.
    let mut victim = Victim(who.command("sleep").arg("120").spawn().unwrap());
    let vmm = dir.path().join("nosy-qemu");
    nosy_vmm(&vmm, &looked, victim.0.id(), None);
    let (status, out) = run_users_vm(&who, dir.path(), &ws, &vmm, &[WEAKEN]);
    assert_ne!(status, 0, "a stand-in VMM booted a guest? {out}");
    let report = std::fs::read_to_string(ws.join("report")).unwrap_or_default();
    check_nosy_contained(&report, &looked, &mut victim, &out);
}
