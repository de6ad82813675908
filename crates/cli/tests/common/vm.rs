//! The microVM backend's test helpers: run `warden` with the VM
//! directory the host has, find out once whether a VM can boot here, and
//! plant host files a guest must not read.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::*;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

/// Where the guest kernel and the VM cache are: `WARDEN_VM_DIR` when the
/// test runs with one, else root's default (where `.ci/run` unpacks the
/// kernel).
pub fn vm_dir() -> PathBuf {
    std::env::var_os("WARDEN_VM_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/lib/warden/vm"))
}

/// Stops VM sandbox `.1` of the state `.0` of [`vm_warden`] when
/// dropped, so that a test failing half-way leaves no VM running.
pub struct VmStopper<'a>(pub &'a Path, pub &'a str);

impl Drop for VmStopper<'_> {
    fn drop(&mut self) {
        let _ = vm_warden(self.0, &["stop", "--time", "1s", self.1], None);
    }
}

pub fn vm_warden(state: &Path, args: &[&str], stdin: Option<&[u8]>) -> Output {
    vm_warden_env(state, args, stdin, &[])
}

pub fn vm_warden_env(
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

/// `warden run --isolation vm FLAGS -- sh -c SCRIPT` in `state`, with
/// `env` besides: a guest booted for one shell line.
pub fn vm_sh(state: &Path, flags: &[&str], script: &str, env: &[(&str, &str)]) -> Output {
    let mut args = vec!["run", "--isolation", "vm"];
    args.extend_from_slice(flags);
    args.extend(["--", "sh", "-c", script]);
    vm_warden_env(state, &args, None, env)
}

/// [`vm_warden`] with the shares served over 9p, which a pause to disk
/// can save (virtio-fs cannot be).
pub fn vm_warden_9p(state: &Path, args: &[&str]) -> Output {
    vm_warden_env(state, args, None, &[("WARDEN_VM_FS", "9p")])
}

/// Named VM sandbox `name` in `state` over 9p, its root the tree `rootfs`,
/// each of `rw` a read-write bind, its command a long sleep: made and
/// started, both of which must succeed.
pub fn start_vm_9p(state: &Path, name: &str, rootfs: &Path, rw: &[&str]) {
    let mut args = vec!["create", "--isolation", "vm", "--rootfs"];
    args.push(rootfs.to_str().unwrap());
    for dir in rw {
        args.extend(["--rw", dir]);
    }
    args.extend([name, "--", "sleep", "100000"]);
    super::ok(&vm_warden_9p(state, &args));
    super::ok(&vm_warden_9p(state, &["start", name]));
}

/// A stand-in VMM that boots nothing and prints nothing: it stays up
/// `seconds` (long enough for a stand-in virtiofsd to report), then
/// fails.
pub fn idle_vmm(at: &Path, seconds: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(at, format!("#!/bin/sh\nsleep {seconds}\nexit 3\n")).unwrap();
    std::fs::set_permissions(at, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// `warden run --isolation vm -w WS -- true` with stand-ins for its
/// helpers: `vmm` as the VMM and `fsd` as the virtiofsd, the workspace
/// shared over `fs`, no template, TCG, state in `state`, no stdin.
pub fn vm_run_with_helpers(ws: &Path, state: &Path, vmm: &Path, fsd: &Path, fs: &str) -> Command {
    let mut cmd = Command::new(warden_bin());
    cmd.args(["run", "--isolation", "vm", "--no-tty", "-w"])
        .arg(ws)
        .args(["--", "true"])
        .env("WARDEN_VMM", vmm)
        .env("WARDEN_VIRTIOFSD", fsd)
        .env("WARDEN_VM_FS", fs)
        .env("WARDEN_VM_TEMPLATE", "off")
        .env("WARDEN_VM_ACCEL", "tcg")
        .env("WARDEN_VM_DIR", vm_dir())
        .env("WARDEN_STATE_DIR", state)
        .stdin(Stdio::null());
    cmd
}

/// The guest kernel's release, when a VM sandbox can start here; `None`
/// (with the reason printed) when not. The first call also lets warden
/// probe KVM once (bounded), as `warden doctor` does.
pub fn guest_release() -> Option<String> {
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

pub fn host_release() -> String {
    nix_uname()
}

pub fn nix_uname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .unwrap()
        .trim()
        .to_string()
}

/// A file planted where the guest must not see it, removed on drop.
pub struct Planted(pub PathBuf);

impl Drop for Planted {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

pub fn plant(dir: &str, secret: &str) -> Option<Planted> {
    let p = Path::new(dir).join(unique("warden-vm-planted"));
    std::fs::write(&p, secret).ok()?;
    Some(Planted(p))
}

/// A `--rootfs` tree of busybox for a guest, with `programs` linked to
/// it by name; `None` (the reason printed) when the host can build no
/// guest root image (neither `mkfs.ext4` nor `mkfs.erofs`) or has no
/// static busybox.
pub fn guest_busybox_tree(programs: &[&str]) -> Option<TempDir> {
    let tool = ["/usr/sbin", "/sbin", "/usr/bin", "/bin"].iter().any(|d| {
        Path::new(d).join("mkfs.ext4").is_file() || Path::new(d).join("mkfs.erofs").is_file()
    });
    if !tool {
        skip("neither mkfs.ext4 nor mkfs.erofs is installed: no guest root image can be built");
        return None;
    }
    let root = busybox_rootfs()?;
    for name in programs {
        std::os::unix::fs::symlink("busybox", root.path().join("usr/bin").join(name)).unwrap();
    }
    Some(root)
}
