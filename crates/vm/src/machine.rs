//! One virtual machine: the VMM found on the host (QEMU's `microvm`
//! machine), started with the guest kernel, the initramfs, the channel's
//! virtio-serial port on a Unix socket this process listens on, and the 9p
//! shares; ready once the guest's init says so.

use crate::wire::{Frame, Kind, Ready, WireError, PORT_NAME};
use std::os::unix::fs::DirBuilderExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Why a VM could not be started.
#[derive(Debug, thiserror::Error)]
pub enum MachineError {
    #[error("no VMM found: install QEMU (`apt-get install qemu-system-x86`), or set WARDEN_VMM to a qemu-system-x86_64")]
    NoVmm,
    #[error("cannot create the VM's directory {path}")]
    RunDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot start the VMM {path}")]
    Spawn {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the VMM exited before its guest was ready ({status}): {log}")]
    VmmExited { status: String, log: String },
    #[error("the guest did not boot within {secs} s ({accel}); its console said: {console}")]
    BootTimeout {
        secs: u64,
        accel: &'static str,
        console: String,
    },
    #[error("cannot move the VMM into its cgroup: {0}")]
    Cgroup(String),
    #[error("the guest's init failed: {0}")]
    GuestFailed(String),
    #[error("cannot talk to the guest")]
    Channel(#[from] WireError),
    #[error("cannot accept the VMM's connection on {path}")]
    Accept {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// How the guest's CPU runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Accel {
    /// Hardware virtualization through `/dev/kvm`.
    Kvm,
    /// QEMU's software emulation (TCG): slow, but needs nothing of the host.
    Tcg,
}

impl Accel {
    pub fn as_str(self) -> &'static str {
        match self {
            Accel::Kvm => "kvm",
            Accel::Tcg => "tcg (software emulation)",
        }
    }
}

/// The VMM binary: `$WARDEN_VMM`, else `qemu-system-x86_64` on `PATH`.
pub fn find_vmm() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("WARDEN_VMM").filter(|v| !v.is_empty()) {
        let p = PathBuf::from(p);
        return p.is_file().then_some(p);
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into());
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/bin")])
        .map(|d| d.join("qemu-system-x86_64"))
        .find(|p| p.is_file())
}

/// What a VM is made of.
#[derive(Debug, Clone)]
pub struct Config {
    pub vmm: PathBuf,
    pub kernel: PathBuf,
    pub initramfs: PathBuf,
    pub accel: Accel,
    pub memory_mib: u64,
    pub cpus: u32,
    /// Shared read-write as the guest's `/workspace`.
    pub workspace: Option<PathBuf>,
    /// A directory shared read-only (the host refuses writes) as the
    /// guest's `/run/warden`: the secret proxy's trust files.
    pub trust: Option<PathBuf>,
    /// `warden.KEY=VALUE` words for the guest init.
    pub params: Vec<(String, String)>,
    /// A private directory for the channel's socket and the console log.
    pub run_dir: PathBuf,
    /// The cgroup the VMM is moved into as soon as it runs.
    pub cgroup: Option<std::sync::Arc<warden_jail::cgroup::Cgroup>>,
    /// The TAP device of the sandbox's network namespace, the guest's
    /// only network (see `warden_jail::vmnet`); none: no network device.
    pub net: Option<std::sync::Arc<std::os::fd::OwnedFd>>,
    /// The network namespace the VMM runs in (warden's own when none).
    pub netns: Option<std::sync::Arc<std::os::fd::OwnedFd>>,
}

/// A running VM whose init serves.
pub struct Machine {
    child: Child,
    pub stream: UnixStream,
    pub ready: Ready,
    pub run_dir: PathBuf,
}

fn tail(path: &Path) -> String {
    let s = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = s.lines().filter(|l| !l.trim().is_empty()).collect();
    let start = lines.len().saturating_sub(8);
    let t = lines[start..].join(" | ");
    if t.is_empty() {
        "(nothing)".into()
    } else {
        t
    }
}

/// The host CPU's clock rate in kHz, from `/proc/cpuinfo` (2 GHz when it
/// does not say).
fn host_tsc_khz() -> u64 {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("cpu MHz"))
                .and_then(|l| l.split(':').nth(1))
                .and_then(|v| v.trim().parse::<f64>().ok())
        })
        .map(|mhz| (mhz * 1000.0) as u64)
        .filter(|k| *k > 0)
        .unwrap_or(2_000_000)
}

impl Config {
    fn argv(&self, socket: &Path, console: &Path, tap: Option<i32>) -> Vec<String> {
        let mut cmdline =
            String::from("console=ttyS0 quiet loglevel=1 panic=-1 reboot=t rdinit=/init");
        if self.accel == Accel::Tcg {
            // Emulated, the guest cannot calibrate its TSC against a PIT
            // and would wait for a clock forever: tell it the rate (TCG's
            // TSC is the host's) and skip the checks.
            cmdline.push_str(&format!(
                " edd=off tsc=reliable no_timer_check tsc_early_khz={}",
                host_tsc_khz()
            ));
        } else {
            cmdline.push_str(" edd=off");
        }
        for (k, v) in &self.params {
            cmdline.push_str(&format!(" warden.{k}={v}"));
        }
        let (accel, cpu) = match self.accel {
            Accel::Kvm => ("kvm", "host"),
            // A smaller translation cache than QEMU's default (1 GiB, much
            // of it touched): an idle emulated guest holds less host memory.
            Accel::Tcg => ("tcg,tb-size=128", "max"),
        };
        let mut a: Vec<String> = [
            "-M",
            "microvm,x-option-roms=off,rtc=on",
            "-accel",
            accel,
            "-cpu",
            cpu,
            "-nodefaults",
            "-no-user-config",
            "-display",
            "none",
            "-no-reboot",
            "-sandbox",
            "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        a.extend([
            "-m".into(),
            format!("{}M", self.memory_mib),
            "-smp".into(),
            self.cpus.to_string(),
            "-kernel".into(),
            self.kernel.display().to_string(),
            "-initrd".into(),
            self.initramfs.display().to_string(),
            "-append".into(),
            cmdline,
            "-serial".into(),
            format!("file:{}", console.display()),
            "-device".into(),
            "virtio-serial-device".into(),
            "-chardev".into(),
            format!("socket,id=chan,path={}", socket.display()),
            "-device".into(),
            format!("virtserialport,chardev=chan,name={PORT_NAME}"),
            "-fsdev".into(),
            "local,id=usr,path=/usr,security_model=none,readonly=on".into(),
            "-device".into(),
            "virtio-9p-device,fsdev=usr,mount_tag=usr".into(),
        ]);
        if let Some(fd) = tap {
            // The guest's one network device: frames go to the TAP in the
            // sandbox's network namespace, never to a network of QEMU's.
            a.extend([
                "-netdev".into(),
                format!("tap,id=net0,fd={fd}"),
                "-device".into(),
                "virtio-net-device,netdev=net0,mac=52:54:00:12:34:56".into(),
            ]);
        }
        if let Some(dir) = &self.trust {
            a.extend([
                "-fsdev".into(),
                format!(
                    "local,id=trust,path={},security_model=none,readonly=on",
                    dir.display()
                ),
                "-device".into(),
                "virtio-9p-device,fsdev=trust,mount_tag=trust".into(),
            ]);
        }
        if let Some(ws) = &self.workspace {
            a.extend([
                "-fsdev".into(),
                format!("local,id=ws,path={},security_model=none", ws.display()),
                "-device".into(),
                "virtio-9p-device,fsdev=ws,mount_tag=workspace".into(),
            ]);
        }
        a
    }
}

impl Machine {
    /// Start the VM and wait (at most `timeout`) until its init serves.
    pub fn boot(cfg: &Config, timeout: Duration) -> Result<Machine, MachineError> {
        let start = Instant::now();
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&cfg.run_dir)
            .map_err(|source| MachineError::RunDir {
                path: cfg.run_dir.clone(),
                source,
            })?;
        let socket = cfg.run_dir.join("chan.sock");
        let console = cfg.run_dir.join("console.log");
        let vmm_log = cfg.run_dir.join("vmm.log");
        let _ = std::fs::remove_file(&socket);
        let listener = UnixListener::bind(&socket).map_err(|source| MachineError::Accept {
            path: socket.clone(),
            source,
        })?;
        let log = std::fs::File::create(&vmm_log).map_err(|source| MachineError::RunDir {
            path: vmm_log.clone(),
            source,
        })?;
        let log2 = log.try_clone().map_err(|source| MachineError::RunDir {
            path: vmm_log.clone(),
            source,
        })?;
        let mut command = Command::new(&cfg.vmm);
        // Nothing of warden's environment (which may hold a secret's
        // source variable or the caller's tokens) reaches the VMM.
        command.env_clear();
        if let Some(ns) = cfg.netns.as_deref() {
            warden_jail::vmnet::run_inside(&mut command, ns);
        }
        if warden_jail::host::is_root() {
            warden_jail::vmnet::limit_vmm(&mut command);
        }
        let tap = cfg
            .net
            .as_deref()
            .map(|fd| warden_jail::vmnet::inherit(&mut command, fd));
        let child = command
            .args(cfg.argv(&socket, &console, tap))
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2)
            .spawn()
            .map_err(|source| MachineError::Spawn {
                path: cfg.vmm.clone(),
                source,
            })?;
        let pid = child.id() as i32;
        let mut m = Pending {
            child: Some(child),
            run_dir: cfg.run_dir.clone(),
        };
        // Before the guest boots (QEMU waits for its channel's connection
        // first); a VMM that cannot be confined is killed by `m`.
        if let Some(cg) = &cfg.cgroup {
            cg.add_process(pid)
                .map_err(|e| MachineError::Cgroup(warden_jail::chain_str(&e)))?;
        }
        let accept_err = |source| MachineError::Accept {
            path: socket.clone(),
            source,
        };
        listener.set_nonblocking(true).map_err(accept_err)?;
        let stream = loop {
            match listener.accept() {
                Ok((s, _)) => break s,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(accept_err(e)),
            }
            m.check_alive(&vmm_log)?;
            if start.elapsed() > timeout {
                return Err(MachineError::BootTimeout {
                    secs: timeout.as_secs(),
                    accel: cfg.accel.as_str(),
                    console: tail(&vmm_log),
                });
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        drop(listener);
        let _ = std::fs::remove_file(&socket);
        let mut reader = stream.try_clone().map_err(accept_err)?;
        let ready = loop {
            let left = timeout.saturating_sub(start.elapsed());
            if left.is_zero() {
                return Err(MachineError::BootTimeout {
                    secs: timeout.as_secs(),
                    accel: cfg.accel.as_str(),
                    console: tail(&console),
                });
            }
            reader
                .set_read_timeout(Some(left.min(Duration::from_millis(200))))
                .map_err(accept_err)?;
            match Frame::read_from(&mut reader) {
                Ok(Some(f)) if f.kind == Kind::Ready => break f.parse::<Ready>()?,
                Ok(Some(f)) if f.kind == Kind::Fatal => {
                    return Err(MachineError::GuestFailed(
                        f.parse::<String>().unwrap_or_default(),
                    ))
                }
                Ok(Some(_)) => {}
                Ok(None) => {
                    m.check_alive(&console)?;
                    return Err(MachineError::GuestFailed(tail(&console)));
                }
                Err(WireError::Io(e))
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    m.check_alive(&console)?;
                }
                Err(e) => return Err(e.into()),
            }
        };
        reader.set_read_timeout(None).map_err(accept_err)?;
        let child = m.child.take().ok_or(MachineError::NoVmm)?;
        Ok(Machine {
            child,
            stream,
            ready,
            run_dir: cfg.run_dir.clone(),
        })
    }

    /// The VMM's PID on the host.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Has the VMM exited?
    pub fn exited(&mut self) -> bool {
        !matches!(self.child.try_wait(), Ok(None))
    }

    /// Wait up to `grace` for the VMM to end by itself, then kill it.
    pub fn stop(&mut self, grace: Duration) {
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            if self.exited() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// The last lines of the guest's console.
    pub fn console(&self) -> String {
        tail(&self.run_dir.join("console.log"))
    }
}

impl Drop for Machine {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.run_dir);
    }
}

/// A VMM not yet ready: killed, and its directory removed, if booting
/// fails.
struct Pending {
    child: Option<Child>,
    run_dir: PathBuf,
}

impl Pending {
    fn check_alive(&mut self, log: &Path) -> Result<(), MachineError> {
        if let Some(c) = self.child.as_mut() {
            if let Ok(Some(status)) = c.try_wait() {
                return Err(MachineError::VmmExited {
                    status: status.to_string(),
                    log: tail(log),
                });
            }
        }
        Ok(())
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
            let _ = std::fs::remove_dir_all(&self.run_dir);
        }
    }
}
