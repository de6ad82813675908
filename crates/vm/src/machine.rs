//! One virtual machine: the VMM found on the host (QEMU's `microvm`
//! machine), started with the guest kernel, the initramfs, the channel's
//! virtio-serial port on one end of a socket pair, and the 9p shares;
//! ready once the guest's init says so.
//!
//! The VMM runs in a jail of its own (`warden_jail::vmm`): everything it
//! uses is handed to it as a descriptor (named to it as `/proc/self/fd/N`),
//! so it needs no path of warden's and no right on one; Landlock lets it
//! open only those files, its own binary and libraries and `/usr` (which it
//! serves read-only), and write only beneath the workspace.

use crate::tail::tail;
use crate::wire::{Frame, Kind, Ready, WireError, PORT_NAME};
use std::os::unix::fs::DirBuilderExt;
use std::os::unix::net::UnixStream;
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
    #[error("cannot prepare the VMM's jail")]
    Jail(#[from] warden_jail::vmm::VmmJailError),
    #[error("cannot open {path} for the VMM")]
    Open {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot give the VMM's files to its user ({path})")]
    Chown {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot serve the workspace over virtio-fs")]
    Fsd(#[source] crate::fsd::FsError),
    #[error("cannot create the VMM's channel")]
    Pair(#[source] nix::errno::Errno),
    #[error("cannot use the VMM's control channel")]
    Control(#[source] crate::qmp::QmpError),
    #[error("the VM could not be restored: {0}")]
    Restore(String),
    #[error("cannot use the VMM's channel ({path})")]
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
    let settings = crate::Settings::current();
    if let Some(p) = &settings.vmm {
        return p.is_file().then(|| p.clone());
    }
    let path = settings
        .path
        .clone()
        .unwrap_or_else(|| "/usr/bin:/bin".into());
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
    /// The `--ro`/`--rw` binds, each exported under its own tag.
    pub shares: Vec<crate::shares::Share>,
    /// A `--rootfs` tree, exported read-only as the guest's system
    /// directories instead of the host's `/usr`.
    pub rootfs: Option<PathBuf>,
    /// A `--rootfs` tree's read-only image (`crate::rootimage`), attached
    /// as a read-only virtio-blk drive instead of the `root` share.
    pub root_image: Option<PathBuf>,
    /// A private directory for the channel's socket and the console log.
    pub run_dir: PathBuf,
    /// The cgroup the VMM starts in (see `warden_jail::vmm`).
    pub cgroup: Option<std::sync::Arc<warden_jail::cgroup::Cgroup>>,
    /// The TAP device of the sandbox's network namespace, the guest's
    /// only network (see `warden_jail::vmnet`); none: no network device.
    pub net: Option<std::sync::Arc<std::os::fd::OwnedFd>>,
    /// The network namespace the VMM runs in (warden's own when none).
    pub netns: Option<std::sync::Arc<std::os::fd::OwnedFd>>,
    /// How the workspace reaches the guest (see `crate::fsd`).
    pub workspace_fs: crate::fsd::WorkspaceFs,
    /// A cold boot, a template's boot, or a restore from a snapshot.
    pub start: Start,
    /// Where the guest's RAM lives (see [`crate::ram`]); anonymous
    /// memory whatever it says when virtio-fs serves the workspace.
    pub ram: crate::ram::Ram,
}

/// How a VM comes up.
#[derive(Debug, Clone, Default)]
pub enum Start {
    /// The guest kernel boots and the init builds everything from the
    /// kernel's command line.
    #[default]
    Cold,
    /// A template's boot: the init parks once its channel is open, before
    /// anything of a sandbox is attached; `net`: the network device is
    /// there (its back end a hub port going nowhere), as it will be in the
    /// sandboxes restored from it.
    Park { net: bool },
    /// The guest's memory and devices come from a snapshot read from this
    /// descriptor (`-incoming fd:N`); the settings a cold boot reads from
    /// its command line come through the channel ([`crate::wire::Attach`]).
    Restore(std::sync::Arc<std::os::fd::OwnedFd>),
}

impl Start {
    /// Does the guest take its settings from the channel (a template's
    /// boot, or a copy of one)?
    pub fn parked(&self) -> bool {
        !matches!(self, Start::Cold)
    }
}

/// A running VM whose init serves.
pub struct Machine {
    child: Child,
    /// The virtiofsd serving the workspace, when virtio-fs does.
    fsd: Option<Child>,
    pub stream: UnixStream,
    /// The host's end of the VMM's control channel (QMP), not yet opened.
    pub(crate) control: Option<UnixStream>,
    /// The control channel, once opened.
    pub(crate) qmp: Option<crate::qmp::Qmp>,
    pub ready: Ready,
    pub run_dir: PathBuf,
    /// Why the workspace went over 9p although virtio-fs was wanted.
    pub fs_note: Option<String>,
    /// Where the guest's RAM lives, as this VMM was started.
    pub ram: crate::ram::Ram,
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

/// What the VMM is handed as descriptors: each names `/proc/self/fd/N`.
struct Handed {
    channel: i32,
    /// The VMM's end of its control channel (QMP).
    control: i32,
    /// The snapshot a restore reads.
    incoming: Option<i32>,
    console: String,
    kernel: String,
    initramfs: String,
    tap: Option<i32>,
    trust: Option<String>,
    workspace: Option<String>,
    /// Each bind's tag, writability and descriptor path.
    shares: Vec<(String, bool, String)>,
    rootfs: Option<String>,
    root_image: Option<String>,
    /// The VMM's end of virtiofsd's socket, when virtio-fs serves the
    /// workspace.
    virtiofs: Option<i32>,
    /// The guest's RAM file, when it has one.
    ram: Option<String>,
}

impl Handed {
    /// Let `command` inherit the VMM's descriptors: the guest's channel
    /// (`theirs`), the opened `files`, the config's TAP and virtiofsd's
    /// socket (`served`).
    fn inherit(
        command: &mut Command,
        cfg: &Config,
        (theirs, control): (&std::os::fd::OwnedFd, &std::os::fd::OwnedFd),
        files: &HandedFiles,
        served: Option<&crate::fsd::Served>,
    ) -> Handed {
        let fd = |c: &mut Command, f: &std::os::fd::OwnedFd| {
            format!("/proc/self/fd/{}", warden_jail::vmnet::inherit(c, f))
        };
        Handed {
            channel: warden_jail::vmnet::inherit(command, theirs),
            control: warden_jail::vmnet::inherit(command, control),
            incoming: match &cfg.start {
                Start::Restore(fd) => Some(warden_jail::vmnet::inherit(command, fd)),
                _ => None,
            },
            console: fd(command, &files.console),
            kernel: fd(command, &files.kernel),
            initramfs: fd(command, &files.initramfs),
            tap: cfg
                .net
                .as_deref()
                .map(|fd| warden_jail::vmnet::inherit(command, fd)),
            trust: files.trust.as_ref().map(|t| fd(command, t)),
            workspace: files.workspace.as_ref().map(|w| fd(command, w)),
            shares: cfg
                .shares
                .iter()
                .zip(&files.shares)
                .map(|(s, f)| {
                    let path = match f {
                        Some(f) => fd(command, f),
                        // A single file: the directory of the VMM's own
                        // root that holds it alone.
                        None => file_share_dir(&cfg.run_dir, s)
                            .display()
                            .to_string()
                            .replace(',', ",,"),
                    };
                    (s.tag.clone(), s.writable, path)
                })
                .collect(),
            rootfs: files.rootfs.as_ref().map(|r| fd(command, r)),
            root_image: files.root_image.as_ref().map(|r| fd(command, r)),
            virtiofs: served.map(|s| warden_jail::vmnet::inherit(command, &s.vmm_end)),
            ram: files.ram.as_ref().map(|r| fd(command, r)),
        }
    }
}

impl Config {
    /// The guest kernel's command line.
    fn cmdline(&self, h: &Handed) -> String {
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
        if self.start.parked() {
            // The same command line for a template and every copy of it:
            // the sandbox's own settings come through the channel.
            cmdline.push_str(" warden.template=1");
        } else {
            for (k, v) in &self.params {
                cmdline.push_str(&format!(" warden.{k}={v}"));
            }
            if h.virtiofs.is_some() {
                cmdline.push_str(" warden.wsfs=virtiofs");
            }
        }
        cmdline
    }

    fn argv(&self, h: &Handed) -> Vec<String> {
        let tap = h.tap;
        let cmdline = self.cmdline(h);
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
            h.kernel.clone(),
            "-initrd".into(),
            h.initramfs.clone(),
            "-append".into(),
            cmdline,
            "-serial".into(),
            format!("file:{}", h.console),
            "-device".into(),
            "virtio-serial-device".into(),
            "-chardev".into(),
            format!("socket,id=chan,fd={}", h.channel),
            "-device".into(),
            format!("virtserialport,chardev=chan,name={PORT_NAME}"),
            "-chardev".into(),
            format!("socket,id=qmp,fd={}", h.control),
            "-mon".into(),
            "chardev=qmp,mode=control".into(),
        ]);
        if h.incoming.is_some() {
            // The stream is read once the capabilities it was saved with
            // are set over QMP (`Launched::restored`): QEMU 7.2 takes
            // `x-ignore-shared` from nowhere else.
            a.extend(["-incoming".into(), "defer".into()]);
        }
        // The guest's system directories: a --rootfs tree, else the host's
        // /usr (never both), read-only at the host.
        // A --rootfs tree's image is a read-only drive instead (the VMM
        // refuses every write to it, whatever the guest asks).
        let (system, tag) = match &h.rootfs {
            Some(r) => (r.clone(), "root"),
            None => ("/usr".to_string(), "usr"),
        };
        if let Some(img) = &h.root_image {
            a.extend([
                "-drive".into(),
                format!("file={img},if=none,id=root,format=raw,read-only=on"),
                "-device".into(),
                "virtio-blk-device,drive=root".into(),
            ]);
        } else {
            a.extend([
                "-fsdev".into(),
                format!("local,id={tag},path={system},security_model=none,readonly=on"),
                "-device".into(),
                format!("virtio-9p-device,fsdev={tag},mount_tag={tag}"),
            ]);
        }
        for (tag, writable, path) in &h.shares {
            let ro = if *writable { "" } else { ",readonly=on" };
            a.extend([
                "-fsdev".into(),
                format!("local,id={tag},path={path},security_model=none{ro}"),
                "-device".into(),
                format!("virtio-9p-device,fsdev={tag},mount_tag={tag}"),
            ]);
        }
        if let Some(fd) = tap {
            // The guest's one network device: frames go to the TAP in the
            // sandbox's network namespace, never to a network of QEMU's.
            a.extend([
                "-netdev".into(),
                format!("tap,id=net0,fd={fd}"),
                "-device".into(),
                "virtio-net-device,netdev=net0,mac=52:54:00:12:34:56".into(),
            ]);
        } else if matches!(self.start, Start::Park { net: true }) {
            // A template's device, whose back end goes nowhere: each copy
            // gets its own sandbox's TAP behind the same device.
            a.extend([
                "-netdev".into(),
                "hubport,id=net0,hubid=0".into(),
                "-device".into(),
                "virtio-net-device,netdev=net0,mac=52:54:00:12:34:56".into(),
            ]);
        }
        if let Some(dir) = &h.trust {
            a.extend([
                "-fsdev".into(),
                format!("local,id=trust,path={dir},security_model=none,readonly=on"),
                "-device".into(),
                "virtio-9p-device,fsdev=trust,mount_tag=trust".into(),
            ]);
        }
        if let Some(ws) = &self.workspace {
            // The VMM is handed the workspace as a descriptor; its name
            // (QEMU's guest name) says which one it serves, for `ps`.
            a.extend([
                "-name".into(),
                format!(
                    "guest=warden:{}",
                    ws.display().to_string().replace(',', ",,")
                ),
            ]);
        }
        self.memory_and_workspace(h, &mut a);
        a
    }

    /// The guest's memory and its workspace's device: virtio-fs (whose
    /// virtiofsd maps the guest's memory, a shared memfd), else 9p, with
    /// the guest's RAM in a file where it has one (see `crate::ram`).
    fn memory_and_workspace(&self, h: &Handed, a: &mut Vec<String>) {
        if let Some(fd) = h.virtiofs {
            // virtio-fs: virtiofsd maps the guest's memory, so it is a
            // shared memfd rather than QEMU's private anonymous memory.
            let m = a
                .iter()
                .position(|x| x.starts_with("microvm,"))
                .unwrap_or(1);
            a[m].push_str(",memory-backend=mem");
            a.extend([
                // vhost-user serves virtio 1.0 devices only; microvm's
                // virtio-mmio transport is the legacy one by default.
                "-global".into(),
                "virtio-mmio.force-legacy=false".into(),
                "-object".into(),
                format!(
                    "memory-backend-memfd,id=mem,size={}M,share=on",
                    self.memory_mib
                ),
                "-chardev".into(),
                format!("socket,id=fsws,fd={fd}"),
                "-device".into(),
                "vhost-user-fs-device,chardev=fsws,tag=workspace".into(),
            ]);
        } else {
            if let Some(ws) = &h.workspace {
                a.extend([
                    "-fsdev".into(),
                    format!("local,id=ws,path={ws},security_model=none"),
                    "-device".into(),
                    "virtio-9p-device,fsdev=ws,mount_tag=workspace".into(),
                ]);
            }
            if let Some(backend) = h
                .ram
                .as_deref()
                .and_then(|r| self.ram.backend(r, self.memory_mib))
            {
                // The guest's RAM in a file (see `crate::ram`).
                let m = a
                    .iter()
                    .position(|x| x.starts_with("microvm,"))
                    .unwrap_or(1);
                a[m].push_str(",memory-backend=mem");
                a.extend(["-object".into(), backend]);
            }
        }
    }
}

/// What follows a restore once the guest runs again.
pub(crate) enum Then<'a> {
    /// A template's copy: hand it its settings and wait for its `ready`.
    Attach(&'a crate::wire::Attach),
    /// A paused sandbox: its init served before the save and serves on.
    Serving(Ready),
}

/// A VMM started and not yet serving: what waiting for it needs.
pub(crate) struct Launched {
    pending: Pending,
    stream: UnixStream,
    control: UnixStream,
    console: PathBuf,
    vmm_log: PathBuf,
    start: Instant,
    fs_note: Option<String>,
    qmp: Option<crate::qmp::Qmp>,
    /// The descriptor the VMM reads a restore's stream from.
    incoming: Option<i32>,
    ram: crate::ram::Ram,
}

impl Launched {
    /// Wait (at most `timeout` since the launch) for the guest init's
    /// `want`: `ready` (it serves), or `parked` (a template's point).
    pub(crate) fn until(
        mut self,
        cfg: &Config,
        timeout: Duration,
        want: Kind,
    ) -> Result<Machine, MachineError> {
        let stream = self
            .stream
            .try_clone()
            .map_err(|source| MachineError::Accept {
                path: cfg.run_dir.clone(),
                source,
            })?;
        let booting = Booting {
            cfg,
            console: &self.console,
            vmm_log: &self.vmm_log,
            start: self.start,
            timeout,
        };
        let ready = self.pending.wait_for(&booting, &stream, want)?;
        self.into_machine(cfg, ready)
    }

    /// A restore: wait until the VMM has loaded the whole snapshot (it
    /// stays paused, as the guest was when saved), then `verified` must
    /// say the snapshot was intact before the guest runs a single
    /// instruction of it; then resume it and do `then`. On any failure the VMM is killed: never half-restored.
    pub(crate) fn restored(
        mut self,
        cfg: &Config,
        timeout: Duration,
        verified: impl FnOnce() -> Result<(), String>,
        then: Then<'_>,
    ) -> Result<Machine, MachineError> {
        let control = self
            .control
            .try_clone()
            .map_err(|source| MachineError::Accept {
                path: cfg.run_dir.clone(),
                source,
            })?;
        let mut qmp = crate::qmp::Qmp::open(control, timeout).map_err(MachineError::Control)?;
        // The phases of a restore, for `WARDEN_LOG=debug` (docs/performance.md).
        let up = self.start.elapsed();
        let fd = self
            .incoming
            .ok_or_else(|| MachineError::Restore("no snapshot was handed to the VMM".into()))?;
        set_capabilities(&mut qmp).map_err(MachineError::Control)?;
        qmp.execute(
            "migrate-incoming",
            Some(serde_json::json!({ "uri": format!("fd:{fd}") })),
        )
        .map_err(MachineError::Control)?;
        loop {
            self.pending.check_alive(&self.vmm_log)?;
            match qmp.status().map_err(MachineError::Control)?.as_str() {
                "inmigrate" => {}
                "paused" | "prelaunch" => break,
                other => return Err(MachineError::Restore(format!("the restored VM is {other}"))),
            }
            if self.start.elapsed() > timeout {
                return Err(MachineError::Restore(
                    "the snapshot did not load in time".into(),
                ));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let loaded = self.start.elapsed();
        verified().map_err(MachineError::Restore)?;
        qmp.execute("cont", None).map_err(MachineError::Control)?;
        self.qmp = Some(qmp);
        let phases = |ready: Duration| {
            tracing::debug!(
                qemu_up_ms = up.as_millis() as u64,
                loaded_ms = loaded.as_millis() as u64,
                ready_ms = ready.as_millis() as u64,
                "VM restored (times since the VMM's launch began)"
            )
        };
        match then {
            Then::Attach(attach) => {
                let mut w = self
                    .stream
                    .try_clone()
                    .map_err(|source| MachineError::Accept {
                        path: cfg.run_dir.clone(),
                        source,
                    })?;
                Frame::json(Kind::Attach, 0, attach).write_to(&mut w)?;
                let start = self.start;
                let m = self.until(cfg, timeout, Kind::Ready)?;
                phases(start.elapsed());
                Ok(m)
            }
            Then::Serving(ready) => {
                phases(self.start.elapsed());
                self.into_machine(cfg, ready)
            }
        }
    }

    fn into_machine(mut self, cfg: &Config, ready: Ready) -> Result<Machine, MachineError> {
        let child = self.pending.child.take().ok_or(MachineError::NoVmm)?;
        Ok(Machine {
            child,
            fsd: self.pending.fsd.take(),
            stream: self.stream,
            control: Some(self.control),
            qmp: self.qmp,
            ready,
            run_dir: cfg.run_dir.clone(),
            fs_note: self.fs_note,
            ram: self.ram,
        })
    }
}

/// Turn on, in a VMM about to save or to restore, the migration
/// capabilities every VM's stream is written and read with: the guest's
/// shared RAM file is left out of the stream (see [`crate::ram`]).
pub(crate) fn set_capabilities(qmp: &mut crate::qmp::Qmp) -> Result<(), crate::qmp::QmpError> {
    qmp.execute(
        "migrate-set-capabilities",
        Some(serde_json::json!({
            "capabilities": [{ "capability": "x-ignore-shared", "state": true }]
        })),
    )
    .map(drop)
}

impl Machine {
    /// Start the VM and wait (at most `timeout`) until its init serves.
    pub fn boot(cfg: &Config, timeout: Duration) -> Result<Machine, MachineError> {
        Machine::launch(cfg)?.until(cfg, timeout, Kind::Ready)
    }

    /// Start the VMM (in its jail) with `cfg`; nothing waited for.
    pub(crate) fn launch(cfg: &Config) -> Result<Launched, MachineError> {
        let start = Instant::now();
        let logs = Logs::create(&cfg.run_dir)?;
        let pair = || {
            nix::sys::socket::socketpair(
                nix::sys::socket::AddressFamily::Unix,
                nix::sys::socket::SockType::Stream,
                None,
                nix::sys::socket::SockFlag::SOCK_CLOEXEC,
            )
            .map_err(MachineError::Pair)
        };
        let (ours, theirs) = pair()?;
        let (control, control_theirs) = pair()?;
        let stream = UnixStream::from(ours);
        let (ids, swap) = vmm_ids(cfg.workspace.as_deref());
        let (served, fs_note) = match (&cfg.workspace, &cfg.workspace_fs) {
            (Some(ws), crate::fsd::WorkspaceFs::VirtioFs { fsd, forced }) => {
                // virtiofsd runs as the VMM's user too: a workspace of
                // another owner's it serves through the same view as 9p.
                let view = swap.as_ref().map(|s| view(ws, s)).transpose()?;
                crate::fsd::start(
                    fsd,
                    *forced,
                    (ws, view),
                    &cfg.run_dir,
                    ids,
                    cfg.cgroup.as_deref(),
                )
                .map_err(MachineError::Fsd)?
            }
            _ => (None, None),
        };
        let mut files =
            HandedFiles::open(cfg, &logs.console, ids, served.is_some(), swap.as_ref())?;
        let ram = if served.is_some() {
            crate::ram::Ram::Anonymous
        } else {
            cfg.ram.clone()
        };
        let mut command = Command::new(&cfg.vmm);
        // Nothing of warden's environment (which may hold a secret's
        // source variable or the caller's tokens) reaches the VMM.
        command.env_clear();
        let handed = Handed::inherit(
            &mut command,
            cfg,
            (&theirs, &control_theirs),
            &files,
            served.as_ref(),
        );
        let root = cfg.run_dir.join("root");
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&root)
            .map_err(|source| MachineError::RunDir {
                path: root.clone(),
                source,
            })?;
        let (fsd, fsd_end) = match served {
            Some(s) => (Some(s.child), Some(s.vmm_end)),
            None => (None, None),
        };
        let mut fsd = crate::fsd::KillOnDrop(fsd);
        // Joined before the VMM runs: a VMM that cannot be confined is not
        // started.
        let mut jail = warden_jail::vmm::VmmJail::prepare(
            &vmm_access(
                cfg,
                &logs.console,
                &root,
                fsd.0.is_some(),
                &files.file_views,
            ),
            cfg.netns.as_deref(),
            Some(ids),
            cfg.cgroup.as_deref(),
        )?;
        // QEMU's 9p server changes the shares' modes for the guest: judged
        // on the host, whatever the guest's kernel says.
        jail.judge_modes()?;
        jail.apply(&mut command);
        let (out, err) = (logs.out, logs.err);
        let child = command
            .args(cfg.argv(&handed))
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|source| MachineError::Spawn {
                path: cfg.vmm.clone(),
                source,
            })?;
        if let Err(source) = jail.watch_modes() {
            // Nobody would answer its mode changes: it does not run.
            let mut child = child;
            let _ = child.kill();
            let _ = child.wait();
            return Err(MachineError::Spawn {
                path: cfg.vmm.clone(),
                source,
            });
        }
        // The VMM holds virtiofsd's other end now: when the VMM ends,
        // virtiofsd sees its socket close and ends too.
        let copies = files
            .console_copy
            .take()
            .into_iter()
            .chain([logs.vmm_copy])
            .collect();
        drop((theirs, control_theirs, files, jail, fsd_end));
        Ok(Launched {
            pending: Pending {
                child: Some(child),
                fsd: fsd.0.take(),
                copies,
                run_dir: cfg.run_dir.clone(),
                keep_dir: matches!(cfg.start, Start::Restore(_)),
            },
            stream,
            control: UnixStream::from(control),
            console: logs.console,
            vmm_log: logs.vmm,
            start,
            fs_note,
            qmp: None,
            incoming: handed.incoming,
            ram,
        })
    }

    /// The VMM's control channel, opened on first use.
    pub(crate) fn qmp(&mut self) -> Result<&mut crate::qmp::Qmp, MachineError> {
        if self.qmp.is_none() {
            let raw = self
                .control
                .take()
                .ok_or(MachineError::Control(crate::qmp::QmpError::Closed))?;
            self.qmp = Some(
                crate::qmp::Qmp::open(raw, Duration::from_secs(30))
                    .map_err(MachineError::Control)?,
            );
        }
        self.qmp
            .as_mut()
            .ok_or(MachineError::Control(crate::qmp::QmpError::Closed))
    }

    /// Wait up to `within` for the VMM to end by itself; was it gone in
    /// time?
    pub(crate) fn wait_gone(&mut self, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if self.exited() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        false
    }

    /// The PID on the host of the VMM's keeper (the process outside the
    /// VMM's PID namespace that waits for it; killing it kills the VMM).
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
        crate::fsd::end(&mut self.fsd, grace);
    }

    /// Let go of a VMM that has ended after saving its guest (a pause to
    /// disk): its run directory stays (the trust files and single files'
    /// directories the restoring VMM is handed again), all but the root
    /// the restoring VMM's jail builds anew.
    pub(crate) fn retire(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        crate::fsd::end(&mut self.fsd, Duration::ZERO);
        let _ = warden_workspace::fsutil::remove_tree(&self.run_dir.join("root"));
        // Nothing left for the drop to remove.
        self.run_dir = PathBuf::new();
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
        crate::fsd::end(&mut self.fsd, Duration::ZERO);
        if !self.run_dir.as_os_str().is_empty() {
            let _ = warden_workspace::fsutil::remove_tree(&self.run_dir);
        }
    }
}

/// The IDs the VMM runs as when warden is root: the workspace owner's
/// where they are an ordinary person's, so that its 9p server creates and
/// writes the workspace's files as their owner would (and nothing of
/// anyone else's it could not); nobody's otherwise (never root or a
/// system account, which would own that account's host files the VMM
/// serves the guest), with the swap that shows the workspace as nobody's.
/// Rootless, the VMM stays warden's own user.
fn vmm_ids(workspace: Option<&Path>) -> ((u32, u32), Option<warden_jail::identity::SwapMap>) {
    use std::os::unix::fs::MetadataExt;
    let owner = workspace
        .and_then(|w| std::fs::metadata(w).ok())
        .map(|m| (m.uid(), m.gid()));
    let ids = warden_jail::identity::sandbox_ids(owner);
    let swap = owner
        .filter(|_| warden_jail::host::is_root())
        .and_then(|o| warden_jail::identity::SwapMap::new(o, ids));
    (ids, swap)
}

/// The swap a share is served through when warden is root: a writable
/// share of another owner's than the VMM's user (root's, a system
/// account's, another person's) is shown with its owner's IDs exchanged
/// with the VMM's, as the process backend idmaps its writable binds, so
/// that the guest writes it, what it makes lands on disk as the owner's,
/// and no other file of the host changes owner or becomes the VMM's.
/// Read-only shares are served as they are (read as the VMM's user);
/// rootless, nothing is swapped (the VMM is warden's own user).
fn share_swap(
    share: &crate::shares::Share,
    ids: (u32, u32),
) -> Result<Option<warden_jail::identity::SwapMap>, MachineError> {
    use std::os::unix::fs::MetadataExt;
    if !share.writable || !warden_jail::host::is_root() {
        return Ok(None);
    }
    let m = std::fs::symlink_metadata(&share.path).map_err(|source| MachineError::Open {
        path: share.path.clone(),
        source,
    })?;
    Ok(warden_jail::identity::SwapMap::new((m.uid(), m.gid()), ids))
}

/// An idmapped view of `path` (a directory or a single file) through
/// `swap`, detached, as a descriptor.
fn view(
    path: &Path,
    swap: &warden_jail::identity::SwapMap,
) -> Result<std::os::fd::OwnedFd, MachineError> {
    warden_jail::identity::idmapped_clone(path, swap).map_err(|source| MachineError::Open {
        path: path.to_path_buf(),
        source,
    })
}

/// A directory the VMM serves, as a view it cannot open a device node,
/// honour a set-ID bit or execute in (idmapped through `swap` when there
/// is one; `warden_jail::identity::helper_view`), whatever the host's
/// mount of it allows. Rootless there is no view to make (nor a device of
/// another's the VMM could open): the directory itself, through `open`.
fn helper_dir(
    path: &Path,
    swap: Option<&warden_jail::identity::SwapMap>,
    open: &dyn Fn(&Path, bool) -> Result<std::os::fd::OwnedFd, MachineError>,
) -> Result<std::os::fd::OwnedFd, MachineError> {
    if swap.is_none() && !warden_jail::host::is_root() {
        return open(path, true);
    }
    warden_jail::identity::helper_view(path, swap).map_err(|source| MachineError::Open {
        path: path.to_path_buf(),
        source,
    })
}

/// What the VMM may open (see `warden_jail::vmm`), and all its root holds:
/// its binary, the system's libraries and firmware and `/usr` (which it
/// serves read-only anyway; on a merged system `/bin`, `/lib` and `/lib64`
/// are links into it), the dynamic linker's cache (the one file of `/etc`),
/// the CPU and NUMA topology in `/sys`, the kernel, the initramfs, the
/// trust files, `/dev/kvm` under KVM; and write its console log and
/// beneath the workspace only (over virtio-fs, not even that). Its root is
/// built in `root`.
fn vmm_access(
    cfg: &Config,
    console: &Path,
    root: &Path,
    virtiofs: bool,
    file_views: &[Option<std::sync::Arc<std::os::fd::OwnedFd>>],
) -> warden_jail::vmm::VmmAccess {
    let mut readable: Vec<PathBuf> = [
        "/usr",
        "/bin",
        "/sbin",
        "/lib",
        "/lib32",
        "/lib64",
        "/libx32",
        "/etc/ld.so.cache",
        "/sys/devices/system/cpu",
        "/sys/devices/system/node",
    ]
    .iter()
    .map(PathBuf::from)
    .filter(|p| p.exists())
    .collect();
    readable.push(cfg.vmm.clone());
    readable.push(cfg.kernel.clone());
    readable.push(cfg.initramfs.clone());
    readable.extend(cfg.trust.clone());
    readable.extend(cfg.rootfs.clone());
    readable.extend(cfg.root_image.clone());
    readable.extend(
        cfg.shares
            .iter()
            .filter(|s| !s.writable && !s.file)
            .map(|s| s.path.clone()),
    );
    // A single file is placed alone in a directory of its own (see
    // `HandedFiles::open`), and nothing else of the host's around it.
    // A writable one of another owner's is its idmapped view.
    let mut placed = Vec::new();
    for (i, s) in cfg.shares.iter().enumerate().filter(|(_, s)| s.file) {
        let dir = file_share_dir(&cfg.run_dir, s);
        placed.push(warden_jail::vmm::Placed {
            host: s.path.clone(),
            inside: dir.join(s.path.file_name().unwrap_or_default()),
            writable: s.writable,
            view: file_views.get(i).cloned().flatten(),
        });
        readable.push(dir);
    }
    warden_jail::vmm::VmmAccess {
        readable,
        // Over virtio-fs, virtiofsd serves the workspace: the VMM gets no
        // right on it at all.
        writable: cfg
            .workspace
            .iter()
            .filter(|_| !virtiofs)
            .cloned()
            .chain(
                cfg.shares
                    .iter()
                    .filter(|s| s.writable && !s.file)
                    .map(|s| s.path.clone()),
            )
            .chain([console.to_path_buf()])
            .chain(cfg.ram.path().filter(|_| !virtiofs).map(Path::to_path_buf))
            .collect(),
        devices: if cfg.accel == Accel::Kvm {
            vec![PathBuf::from("/dev/kvm")]
        } else {
            Vec::new()
        },
        placed,
        root: root.to_path_buf(),
    }
}

/// The directory of the VMM's root that holds the single file `share`
/// alone.
fn file_share_dir(run_dir: &Path, share: &crate::shares::Share) -> PathBuf {
    run_dir.join("files").join(&share.tag)
}

/// The files the VMM is handed, opened here (it may have no right on the
/// way to them).
struct HandedFiles {
    console: std::os::fd::OwnedFd,
    /// The console's copy into its bounded log, waited for when the VMM
    /// has ended and its last lines are read.
    console_copy: Option<warden_jail::vmm::LogCopy>,
    kernel: std::os::fd::OwnedFd,
    initramfs: std::os::fd::OwnedFd,
    trust: Option<std::os::fd::OwnedFd>,
    workspace: Option<std::os::fd::OwnedFd>,
    /// Each bind's directory (a writable one of another owner's as its
    /// idmapped view); none for a single file (served by path from the
    /// VMM's own root).
    shares: Vec<Option<std::os::fd::OwnedFd>>,
    /// For each bind, by its index: a writable single file of another
    /// owner's as its idmapped view, attached in the VMM's root.
    file_views: Vec<Option<std::sync::Arc<std::os::fd::OwnedFd>>>,
    rootfs: Option<std::os::fd::OwnedFd>,
    root_image: Option<std::os::fd::OwnedFd>,
    /// The guest's RAM file (a fresh one made for a VM that boots).
    ram: Option<std::os::fd::OwnedFd>,
}

impl HandedFiles {
    fn open(
        cfg: &Config,
        console: &Path,
        ids: (u32, u32),
        virtiofs: bool,
        swap: Option<&warden_jail::identity::SwapMap>,
    ) -> Result<HandedFiles, MachineError> {
        let open = |path: &Path, dir: bool| -> Result<std::os::fd::OwnedFd, MachineError> {
            let mut o = std::fs::OpenOptions::new();
            o.read(true);
            if dir {
                use std::os::unix::fs::OpenOptionsExt;
                o.custom_flags(nix::libc::O_DIRECTORY);
            }
            o.open(path)
                .map(std::os::fd::OwnedFd::from)
                .map_err(|source| MachineError::Open {
                    path: path.to_path_buf(),
                    source,
                })
        };
        let root = warden_jail::host::is_root();
        // The guest writes its console as much as it likes: the VMM gets
        // a pipe, and the log on the host stays within a bound
        // (`warden_jail::vmm::bounded_log`).
        let (console_file, console_copy) =
            warden_jail::vmm::bounded_log(console, root.then_some(ids)).map_err(|source| {
                MachineError::RunDir {
                    path: console.to_path_buf(),
                    source,
                }
            })?;
        let give = |path: &Path| -> Result<(), MachineError> {
            if !root {
                return Ok(());
            }
            std::os::unix::fs::chown(path, Some(ids.0), Some(ids.1)).map_err(|source| {
                MachineError::Chown {
                    path: path.to_path_buf(),
                    source,
                }
            })
        };
        // The VMM reopens what it writes or serves through
        // `/proc/self/fd/N`, which checks the file's own permissions: the
        // console log and the trust files become its user's.
        give(console)?;
        // Each single file's directory, with an empty placeholder the file
        // is bound over in the VMM's mount namespace (never on the host).
        for s in cfg.shares.iter().filter(|s| s.file) {
            let dir = file_share_dir(&cfg.run_dir, s);
            let placeholder = dir.join(s.path.file_name().unwrap_or_default());
            let made = std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&dir)
                .and_then(|_| std::fs::File::create(&placeholder).map(drop));
            made.map_err(|source| MachineError::RunDir {
                path: placeholder.clone(),
                source,
            })?;
            give(&dir)?;
        }
        let mut shares = Vec::new();
        let mut file_views = Vec::new();
        for s in &cfg.shares {
            let swap = share_swap(s, ids)?;
            let handed = match (&swap, s.file) {
                (None, true) => None,
                (None, false) => Some(helper_dir(&s.path, None, &open)?),
                (Some(swap), _) => Some(view(&s.path, swap)?),
            };
            if s.file {
                shares.push(None);
                file_views.push(handed.map(std::sync::Arc::new));
            } else {
                shares.push(handed);
                file_views.push(None);
            }
        }
        if let Some(t) = &cfg.trust {
            give(t)?;
            for e in std::fs::read_dir(t)
                .map_err(|source| MachineError::Open {
                    path: t.clone(),
                    source,
                })?
                .flatten()
            {
                give(&e.path())?;
            }
        }
        Ok(HandedFiles {
            console: console_file,
            console_copy: Some(console_copy),
            kernel: open(&cfg.kernel, false)?,
            initramfs: open(&cfg.initramfs, false)?,
            trust: cfg.trust.as_deref().map(|t| open(t, true)).transpose()?,
            workspace: cfg
                .workspace
                .as_deref()
                .filter(|_| !virtiofs)
                .map(|w| helper_dir(w, swap, &open))
                .transpose()?,
            shares,
            file_views,
            rootfs: cfg
                .rootfs
                .as_deref()
                .filter(|_| cfg.root_image.is_none())
                .map(|r| open(r, true))
                .transpose()?,
            root_image: cfg
                .root_image
                .as_deref()
                .map(|r| open(r, false))
                .transpose()?,
            ram: match cfg.ram.path().filter(|_| !virtiofs) {
                None => None,
                Some(p) => {
                    if matches!(cfg.ram, crate::ram::Ram::Shared(_)) && !p.exists() {
                        crate::ram::fresh(p, cfg.memory_mib).map_err(|source| {
                            MachineError::RunDir {
                                path: p.to_path_buf(),
                                source,
                            }
                        })?;
                    }
                    // QEMU 7.2 opens it read-write, to map it privately as
                    // well (see `crate::ram`): a VM's own file becomes its
                    // VMM's user's; a base was opened up when it was made
                    // one (a change of owner would change its stamp).
                    if matches!(cfg.ram, crate::ram::Ram::Shared(_)) {
                        give(p)?;
                    }
                    Some(open(p, false)?)
                }
            },
        })
    }
}

/// The VM's run directory with its logs: the guest's console (written by
/// the VMM) and the VMM's own output (`out` and `err`, one pipe into one
/// file within a bound, `warden_jail::vmm::bounded_log`: a guest that
/// makes QEMU print about its requests without end fills no disk).
struct Logs {
    console: PathBuf,
    vmm: PathBuf,
    out: std::os::fd::OwnedFd,
    err: std::os::fd::OwnedFd,
    vmm_copy: warden_jail::vmm::LogCopy,
}

impl Logs {
    fn create(run_dir: &Path) -> Result<Logs, MachineError> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(run_dir)
            .map_err(|source| MachineError::RunDir {
                path: run_dir.to_path_buf(),
                source,
            })?;
        let console = run_dir.join("console.log");
        let vmm = run_dir.join("vmm.log");
        let failed = |source| MachineError::RunDir {
            path: vmm.clone(),
            source,
        };
        let (out, vmm_copy) = warden_jail::vmm::bounded_log(&vmm, None).map_err(failed)?;
        let err = out.try_clone().map_err(failed)?;
        Ok(Logs {
            console,
            vmm,
            out,
            err,
            vmm_copy,
        })
    }
}

/// What waiting for a booting VM looks at: its logs, for the error, and
/// its time, counted from `start`.
struct Booting<'a> {
    cfg: &'a Config,
    console: &'a Path,
    vmm_log: &'a Path,
    start: Instant,
    timeout: Duration,
}

/// A VMM not yet ready: killed, and its directory removed, if booting
/// fails.
struct Pending {
    child: Option<Child>,
    fsd: Option<Child>,
    /// The copies into the VMM's bounded logs (its own output, the
    /// console): an ended VMM's last lines land before they are read.
    copies: Vec<warden_jail::vmm::LogCopy>,
    run_dir: PathBuf,
    /// A restore that fails leaves the run directory as the backend made
    /// it (its trust files, its single files' directories) for the cold
    /// boot that follows: only what the VMM's start made goes.
    keep_dir: bool,
}

impl Pending {
    fn check_alive(&mut self, log: &Path) -> Result<(), MachineError> {
        if let Some(c) = self.child.as_mut() {
            if let Ok(Some(status)) = c.try_wait() {
                for copy in &self.copies {
                    copy.wait(Duration::from_millis(500));
                }
                return Err(MachineError::VmmExited {
                    status: status.to_string(),
                    log: tail(log),
                });
            }
        }
        Ok(())
    }

    /// Wait on `stream` until the guest's init says `want` (`ready`: it
    /// serves; `parked`: a template's point), the guest or the VMM fails,
    /// or the boot's time is up.
    fn wait_for(
        &mut self,
        b: &Booting,
        stream: &UnixStream,
        want: Kind,
    ) -> Result<Ready, MachineError> {
        let accept_err = |source| MachineError::Accept {
            path: b.cfg.run_dir.clone(),
            source,
        };
        let mut reader = stream.try_clone().map_err(accept_err)?;
        let ready = loop {
            let left = b.timeout.saturating_sub(b.start.elapsed());
            if left.is_zero() {
                return Err(MachineError::BootTimeout {
                    secs: b.timeout.as_secs(),
                    accel: b.cfg.accel.as_str(),
                    console: tail(b.console),
                });
            }
            reader
                .set_read_timeout(Some(left.min(Duration::from_millis(200))))
                .map_err(accept_err)?;
            match Frame::read_from(&mut reader) {
                Ok(Some(f)) if f.kind == want && want == Kind::Ready => {
                    break f.parse::<Ready>()?
                }
                Ok(Some(f)) if f.kind == want => {
                    break Ready {
                        kernel: String::new(),
                        layers: Vec::new(),
                    }
                }
                Ok(Some(f)) if f.kind == Kind::Fatal => {
                    return Err(MachineError::GuestFailed(
                        f.parse::<String>().unwrap_or_default(),
                    ))
                }
                Ok(Some(_)) => {}
                Ok(None) => {
                    // The channel closed: the VMM ended, or the guest did.
                    // Its keeper ends right after the VMM: give it a moment
                    // to say which.
                    self.wait_exit(b.vmm_log, Duration::from_secs(1))?;
                    return Err(MachineError::GuestFailed(tail(b.console)));
                }
                Err(WireError::Io(e))
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    self.check_alive(b.vmm_log)?;
                }
                Err(e) => return Err(e.into()),
            }
        };
        reader.set_read_timeout(None).map_err(accept_err)?;
        Ok(ready)
    }

    /// [`Pending::check_alive`], for up to `within` while the VMM runs.
    fn wait_exit(&mut self, log: &Path, within: Duration) -> Result<(), MachineError> {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            self.check_alive(log)?;
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(())
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
            if self.keep_dir {
                let _ = warden_workspace::fsutil::remove_tree(&self.run_dir.join("root"));
            } else {
                let _ = warden_workspace::fsutil::remove_tree(&self.run_dir);
            }
        }
        crate::fsd::end(&mut self.fsd, Duration::ZERO);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn config() -> Config {
        Config {
            vmm: PathBuf::from("/usr/bin/qemu-system-x86_64"),
            kernel: PathBuf::from("/k"),
            initramfs: PathBuf::from("/i"),
            accel: Accel::Tcg,
            memory_mib: 256,
            cpus: 1,
            workspace: None,
            trust: None,
            params: Vec::new(),
            shares: Vec::new(),
            rootfs: None,
            root_image: None,
            run_dir: PathBuf::from("/run-dir"),
            cgroup: None,
            net: None,
            netns: None,
            workspace_fs: Default::default(),
            start: Default::default(),
            ram: Default::default(),
        }
    }

    fn handed(shares: Vec<(String, bool, String)>, rootfs: Option<String>) -> Handed {
        Handed {
            channel: 3,
            control: 12,
            incoming: None,
            console: "/proc/self/fd/4".into(),
            kernel: "/proc/self/fd/5".into(),
            initramfs: "/proc/self/fd/6".into(),
            tap: None,
            trust: None,
            workspace: None,
            shares,
            rootfs,
            root_image: None,
            virtiofs: None,
            ram: None,
        }
    }

    fn fsdevs(c: &Config, h: &Handed) -> Vec<String> {
        let a = c.argv(h);
        a.windows(2)
            .filter(|w| w[0] == "-fsdev")
            .map(|w| w[1].clone())
            .collect()
    }

    #[test]
    fn a_read_only_bind_is_exported_read_only_and_a_writable_one_is_not() {
        let h = handed(
            vec![
                ("b0".into(), false, "/proc/self/fd/7".into()),
                ("b1".into(), true, "/proc/self/fd/8".into()),
            ],
            None,
        );
        let f = fsdevs(&config(), &h);
        assert!(
            f.contains(&"local,id=b0,path=/proc/self/fd/7,security_model=none,readonly=on".into())
        );
        assert!(f.contains(&"local,id=b1,path=/proc/self/fd/8,security_model=none".into()));
    }

    #[test]
    fn a_workspace_over_virtiofs_is_no_9p_share_and_the_guests_memory_is_shared() {
        let mut c = config();
        c.workspace = Some(PathBuf::from("/ws"));
        let mut h = handed(Vec::new(), None);
        h.workspace = Some("/proc/self/fd/10".into());
        h.virtiofs = Some(11);
        let a = c.argv(&h);
        assert!(!fsdevs(&c, &h).iter().any(|d| d.contains("id=ws")), "{a:?}");
        assert!(a.contains(&"socket,id=fsws,fd=11".to_string()), "{a:?}");
        assert!(a.contains(&"vhost-user-fs-device,chardev=fsws,tag=workspace".to_string()));
        assert!(a.contains(&"memory-backend-memfd,id=mem,size=256M,share=on".to_string()));
        assert!(a
            .iter()
            .any(|x| x.starts_with("microvm,") && x.ends_with(",memory-backend=mem")));
        assert!(a.contains(&"virtio-mmio.force-legacy=false".to_string()));
        assert!(a.iter().any(|x| x.contains(" warden.wsfs=virtiofs")));
        h.virtiofs = None;
        assert!(fsdevs(&c, &h).iter().any(|d| d.contains("id=ws")));
        assert!(!c.argv(&h).iter().any(|x| x.contains("memory-backend")));
    }

    #[test]
    fn a_vms_own_ram_file_is_mapped_shared_a_base_privately_and_virtio_fs_keeps_its_memfd() {
        let objects = |c: &Config, h: &Handed| -> Vec<String> {
            c.argv(h)
                .windows(2)
                .filter(|w| w[0] == "-object")
                .map(|w| w[1].clone())
                .collect()
        };
        let mut c = config();
        let mut h = handed(Vec::new(), None);
        h.ram = Some("/proc/self/fd/15".into());
        c.ram = crate::ram::Ram::Shared(PathBuf::from("/run-dir/memory.ram"));
        assert_eq!(
            objects(&c, &h),
            ["memory-backend-file,id=mem,size=256M,mem-path=/proc/self/fd/15,share=on"]
        );
        assert!(c
            .argv(&h)
            .iter()
            .any(|x| x.starts_with("microvm,") && x.ends_with(",memory-backend=mem")));
        // A base: the guest's writes land in the VMM's own pages.
        c.ram = crate::ram::Ram::Private(PathBuf::from("/saved/memory.ram"));
        assert_eq!(
            objects(&c, &h),
            ["memory-backend-file,id=mem,size=256M,mem-path=/proc/self/fd/15,share=off"]
        );
        // virtio-fs: virtiofsd maps the memfd; no file of the VM's.
        h.virtiofs = Some(11);
        assert_eq!(
            objects(&c, &h),
            ["memory-backend-memfd,id=mem,size=256M,share=on"]
        );
    }

    #[test]
    fn a_rootfs_is_exported_read_only_instead_of_the_hosts_usr() {
        let h = handed(Vec::new(), Some("/proc/self/fd/9".into()));
        let f = fsdevs(&config(), &h);
        assert!(f.contains(
            &"local,id=root,path=/proc/self/fd/9,security_model=none,readonly=on".into()
        ));
        assert!(!f.iter().any(|d| d.contains("path=/usr")), "{f:?}");
    }

    #[test]
    fn a_root_image_is_a_read_only_drive_and_no_root_share_is_exported() {
        let mut h = handed(Vec::new(), None);
        h.root_image = Some("/proc/self/fd/10".into());
        let a = config().argv(&h);
        let drives: Vec<&String> = a
            .windows(2)
            .filter(|w| w[0] == "-drive")
            .map(|w| &w[1])
            .collect();
        assert_eq!(
            drives,
            ["file=/proc/self/fd/10,if=none,id=root,format=raw,read-only=on"]
        );
        assert!(a.contains(&"virtio-blk-device,drive=root".to_string()));
        assert!(fsdevs(&config(), &h).is_empty(), "{a:?}");
    }

    #[test]
    fn a_template_and_its_copies_share_one_command_line_that_holds_no_sandbox_setting() {
        let mut c = config();
        c.params = vec![("hostname".into(), "secret-name".into())];
        let cold = c.cmdline(&handed(Vec::new(), None));
        assert!(cold.contains(" warden.hostname=secret-name"), "{cold}");
        c.start = Start::Park { net: true };
        let h = handed(Vec::new(), None);
        let parked = c.argv(&h);
        let line = c.cmdline(&h);
        assert!(line.ends_with(" warden.template=1"), "{line}");
        assert!(!line.contains("secret-name"), "{line}");
        // The network device is there, its back end going nowhere.
        assert!(parked.contains(&"hubport,id=net0,hubid=0".to_string()));
        assert!(parked.contains(&"socket,id=qmp,fd=12".to_string()));
        let fd = std::sync::Arc::new(std::os::fd::OwnedFd::from(
            std::fs::File::open("/dev/null").unwrap(),
        ));
        c.start = Start::Restore(fd);
        let mut h = handed(Vec::new(), None);
        h.incoming = Some(13);
        let restored = c.argv(&h);
        assert_eq!(c.cmdline(&h), line);
        assert!(restored
            .windows(2)
            .any(|w| w[0] == "-incoming" && w[1] == "defer"));
        assert!(!restored.iter().any(|a| a.contains("hubport")));
    }

    #[test]
    fn the_vmm_is_handed_every_socket_as_a_descriptor_whatever_the_run_directorys_length() {
        // A socket's path holds 107 bytes: QEMU never gets one by path, so
        // a state directory of any length starts a VM.
        let mut c = config();
        c.run_dir = PathBuf::from(format!("/{}", "d".repeat(300)));
        let mut h = handed(Vec::new(), None);
        h.virtiofs = Some(14);
        let a = c.argv(&h);
        let chardevs: Vec<&String> = a
            .windows(2)
            .filter(|w| w[0] == "-chardev")
            .map(|w| &w[1])
            .collect();
        assert_eq!(chardevs.len(), 3, "{a:?}");
        for dev in chardevs {
            assert!(dev.starts_with("socket,") && dev.contains(",fd="), "{dev}");
            assert!(!dev.contains("path="), "{dev}");
        }
        assert!(!a.iter().any(|x| x.contains("ddddd")), "{a:?}");
    }
}
