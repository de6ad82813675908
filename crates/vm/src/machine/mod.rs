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

mod argv;
mod files;
mod launch;

pub(crate) use files::OpenedShares;
pub(crate) use launch::Then;

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
    /// The workspace is not the directory the sandbox was created over,
    /// or goes through a link, or is missing (the process backend's
    /// refusal and reason code, `workspace_moved`).
    #[error(transparent)]
    Workspace(warden_jail::JailError),
    /// A share or the root tree is reached through a link now, or is not
    /// the file checked when the sandbox was made (`share_link`,
    /// `share_changed`): nothing is served.
    #[error(transparent)]
    Share(#[from] crate::shares::ShareError),
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
    /// The identity (device, inode) of the directory the sandbox was
    /// created over: the VMM (or virtiofsd) is handed the directory found
    /// at `workspace` only when it is that one, opened once, through no
    /// link, and served by that descriptor (see `launch`).
    pub workspace_id: Option<(u64, u64)>,
    /// The sandbox's layer held in a tmpfs of its disk budget
    /// (`crate::disk`): its `upper/`, opened when it was made, is shared
    /// instead of whatever is at `workspace`, which then only names it.
    pub workspace_held: Option<std::sync::Arc<crate::disk::Held>>,
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
    /// What `rootfs` was when it was checked: each launch serves it only
    /// if it still is (`crate::shares::reopen`).
    pub rootfs_id: Option<crate::shares::Identity>,
    /// A `--rootfs` tree's read-only image (`crate::rootimage`), attached
    /// as a read-only virtio-blk drive instead of the `root` share.
    pub root_image: Option<PathBuf>,
    /// A private directory for the channel's socket and the console log.
    pub run_dir: PathBuf,
    /// The cgroup the VMM starts in (see `warden_jail::vmm`).
    pub cgroup: Option<std::sync::Arc<warden_jail::cgroup::Cgroup>>,
    /// The sandbox's CPU account (its `resources.cpus`): the supervisor's
    /// judge of the file servers' calls, outside the cgroup, is held to
    /// it (`warden_jail::modes::pace`); none without a limit.
    pub cpu_budget: Option<warden_jail::modes::pace::Budget>,
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

/// A test's VM config that lends `bind` read-write (checked now, as a
/// sandbox's preparation checks it), its run directory `run_dir`.
#[cfg(test)]
#[allow(clippy::unwrap_used)]
pub(crate) fn config_sharing(bind: &Path, run_dir: &Path) -> Config {
    let fs = warden_policy::FilesystemSpec {
        rootfs: None,
        workspace: None,
        binds: vec![warden_policy::Bind {
            path: bind.to_path_buf(),
            writable: true,
        }],
        tmp_size: 1 << 20,
        overlay: None,
        hidden: vec![],
        runs_on_host: vec![],
        home: Default::default(),
        home_at: None,
        caches: vec![],
        workdir: None,
        disk: None,
        volumes: vec![],
        workspace_identity: None,
    };
    let mut cfg = argv::tests::config();
    cfg.shares = crate::shares::binds(&fs).unwrap().0;
    cfg.run_dir = run_dir.to_path_buf();
    cfg
}
