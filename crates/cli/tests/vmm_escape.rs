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
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;
use common::*;
use std::io::Read;
use std::net::{TcpListener, UdpSocket};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Root's VM directory (where `.ci/run` unpacks the guest kernel), or
/// `WARDEN_VM_DIR`.
fn vm_dir() -> PathBuf {
    std::env::var_os("WARDEN_VM_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/lib/warden/vm"))
}

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
    let o = std::process::Command::new(warden_bin())
        .args(["run", "--isolation", "vm", "--no-tty", "-w"])
        .arg(&ws)
        .args(["--", "true"])
        .env("WARDEN_VMM", &vmm)
        .env("WARDEN_VM_ACCEL", "tcg")
        .env("WARDEN_VM_DIR", vm_dir())
        .env("WARDEN_STATE_DIR", dir.path().join("state"))
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let out = format!("{}\n{}", stdout(&o), stderr(&o));
    assert_ne!(code(&o), 0, "a stand-in VMM booted a guest? {out}");
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
    // The user's own VM directory with a copy of the guest kernel (root's
    // is not theirs to read), and the guest init beside their warden.
    let dir = TempDir::new("vmm-escape-rootless");
    let kernel = dir.path().join("vm/kernel/boot");
    std::fs::create_dir_all(&kernel).unwrap();
    std::fs::create_dir_all(dir.path().join("vm/kernel/lib/modules").join(&release)).unwrap();
    std::fs::copy(
        vm_dir().join(format!("kernel/boot/vmlinuz-{release}")),
        kernel.join(format!("vmlinuz-{release}")),
    )
    .unwrap();
    let init = who.bin.parent().unwrap().join("warden-guest-init");
    std::fs::copy(env!("CARGO_BIN_EXE_warden-guest-init"), &init).unwrap();
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
    let _ = std::process::Command::new("chown")
        .args(["-R", &format!("{}:{}", who.uid, who.gid)])
        .arg(dir.path())
        .status();
    let o = who
        .command(who.bin.to_str().unwrap())
        .args(["run", "--isolation", "vm", "--no-tty", "-w"])
        .arg(&ws)
        .args(["--", "true"])
        .env("WARDEN_VMM", &vmm)
        .env("WARDEN_VM_ACCEL", "tcg")
        .env("WARDEN_VM_DIR", dir.path().join("vm"))
        .env("WARDEN_STATE_DIR", dir.path().join("state"))
        .output()
        .unwrap();
    let out = format!("{}\n{}", stdout(&o), stderr(&o));
    assert_ne!(code(&o), 0, "a stand-in VMM booted a guest? {out}");
    check_escape_contained(&ws.join("report"), &secret, &written, &net, &out);
}

/// A file removed on drop.
struct Removed(PathBuf);

impl Drop for Removed {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}
