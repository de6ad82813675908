//! A sandbox in a VM, with the process backend's contract: the same spec,
//! the same events (`created`, `started`, `exited`), the same exit statuses
//! and, for a long-lived sandbox, the same spawn channel handed to
//! [`Attach::service`]: the jail's spawn protocol, served here by relaying
//! each request to the guest's init and each process's streams between the
//! caller's descriptors and the VM's channel.

use crate::channel::{pump_stdin, send, CutOff, Writer};
use crate::control::Input;
use crate::machine::{Accel, Config, Machine, MachineError};
use crate::wire::{Ended, Frame, Kind, Spawn, CONNECTION};
use std::collections::HashMap;
use std::fs::File;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender};
use std::sync::Arc;
use std::time::{Duration, Instant};
use warden_audit::{Event, EventKind, EventSink, ExitReason, ResourcePeaks};
use warden_jail::confine::degraded;
use warden_jail::spawn::{notify as notify_with, FromInit, Streams, ToInit};
use warden_jail::{Attach, Outcome, Pid, Program};
use warden_policy::{NetworkSpec, SandboxSpec, Terminal, WORKSPACE_MOUNT};

mod serve;
use serve::*;

/// How long a guest may take to boot under emulation (about 2 s on an idle
/// machine; a busy one is much slower).
const BOOT_TCG: Duration = Duration::from_secs(90);
const BOOT_KVM: Duration = Duration::from_secs(20);

/// A desktop guest's RAM when no memory limit is given: its X server,
/// window manager, panel, VNC server and Chromium (whose renderers alone
/// take a few hundred MiB) do not fit the default 512 MiB.
pub const DESKTOP_MEMORY_MIB: u64 = 2048;

/// Why a VM sandbox could not run.
#[derive(Debug, thiserror::Error)]
pub enum VmError {
    #[error(
        "{0} is not supported with `isolation vm` yet; leave it out or use `isolation process`"
    )]
    Unsupported(&'static str),
    #[error(transparent)]
    Kernel(#[from] crate::kernel::KernelError),
    #[error(transparent)]
    Image(#[from] crate::image::ImageError),
    #[error(transparent)]
    Share(#[from] crate::shares::ShareError),
    #[error(transparent)]
    Fs(#[from] crate::fsd::FsError),
    #[error("`filesystem.rootfs` {0} has neither usr/ nor bin/: give the root of a prepared tree")]
    BadRootfs(PathBuf),
    #[error(transparent)]
    RootImage(#[from] crate::rootimage::RootImageError),
    #[error("WARDEN_VM_ROOT=image, but this host has no tool to build the guest's root image whose format the guest kernel mounts: install e2fsprogs (mkfs.ext4) or erofs-utils (mkfs.erofs), or unset WARDEN_VM_ROOT to serve the tree over 9p")]
    NoImageTool,
    #[error(transparent)]
    Machine(#[from] MachineError),
    #[error(
        "warden has no state directory for its VM files: set WARDEN_STATE_DIR or WARDEN_VM_DIR"
    )]
    NoStateDir,
    #[error("cannot {what} the VM's channel")]
    Channel {
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot create the spawn channel")]
    SpawnChannel(#[source] nix::errno::Errno),
    #[error("cannot confine the VMM in a cgroup ({0}): run as root or in a delegated cgroup v2 subtree, or give `allow_degraded`")]
    Cgroup(String),
    /// The judge of the file servers' calls cannot be held to the
    /// sandbox's CPU limit: refused, never run unbounded.
    #[error(transparent)]
    Pace(#[from] warden_jail::modes::pace::PaceError),
    #[error(transparent)]
    Network(#[from] warden_jail::vmnet::VmNetError),
    #[error("cannot publish port {port} on the host's 127.0.0.1 (is it in use? pick another HOSTPORT in `egress.publish HOSTPORT:PORT`)")]
    Publish {
        port: u16,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot serve the VM's network: {0}")]
    Serve(String),
    #[error("nothing was started: the run cannot be recorded ({0})")]
    Unrecorded(String),
    #[error(transparent)]
    Secrets(#[from] warden_jail::secrets::SecretsError),
    #[error("cannot write the guest's trust file {path}")]
    Trust {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the VM ended before the command did; its console said: {0}")]
    GuestDied(String),
    #[error(transparent)]
    Resume(#[from] crate::pause::Unresumed),
    /// The workspace layer cannot be held to the disk budget: refused,
    /// never run unbounded.
    #[error(transparent)]
    Disk(#[from] crate::disk::DiskError),
    /// The workspace is not the directory the sandbox was created over
    /// (`workspace_moved`), or goes through a link.
    #[error(transparent)]
    Workspace(warden_jail::JailError),
}

impl VmError {
    /// The share refused with a reason code (`share_link`,
    /// `share_changed`), if this is one, whether its check came before
    /// the launch, at it, or at the restore of a VM paused to disk.
    pub fn refused_share(&self) -> Option<&crate::shares::ShareError> {
        let share = match self {
            VmError::Share(s)
            | VmError::Machine(MachineError::Share(s))
            | VmError::Resume(crate::pause::Unresumed { share: Some(s), .. }) => s,
            _ => return None,
        };
        share.reason().is_some().then_some(share)
    }
}

static RUNS: AtomicU64 = AtomicU64::new(0);

/// Everything but the VM itself: found, built and decided before booting.
pub struct Prepared {
    pub config: Config,
    pub warning: Option<String>,
    /// Layers weaker than they could be (`degraded` events): the layer and
    /// what is lost.
    pub degraded: Vec<(&'static str, String)>,
    /// Why the workspace goes over 9p although virtio-fs was wanted.
    pub fs_note: Option<String>,
}

/// Find the VMM and kernel, build (or find cached) the initramfs and decide
/// on KVM, for `spec`.
pub fn prepare(spec: &SandboxSpec, id: &str) -> Result<Prepared, VmError> {
    let fs = &spec.filesystem;
    // The guest sees one shared directory as its workspace. An overlay
    // over an empty workspace (a named sandbox's own) is exactly its upper
    // layer, which is shared then; over a project's files it would need an
    // overlay the guest cannot build on 9p.
    // The workspace shared is checked to be the directory the sandbox was
    // created over where the VMM is handed it (`Machine::launch`); an
    // overlay's lower is checked here, on the descriptor it is read by.
    let (workspace, workspace_id) = match (&fs.overlay, &fs.workspace) {
        (None, ws) => (ws.clone(), fs.workspace_identity.filter(|_| ws.is_some())),
        (Some(o), Some(lower)) if lower_is_empty(lower, fs.workspace_identity)? => {
            (Some(o.upper.clone()), None)
        }
        (Some(_), _) => {
            return Err(VmError::Unsupported(
                "a reviewable (overlay) workspace over existing files",
            ))
        }
    };
    let rootfs = match &fs.rootfs {
        Some(r) => {
            let (r, opened) = crate::shares::check_dir("`filesystem.rootfs`", r)?;
            if !r.join("usr").is_dir() && !r.join("bin").exists() {
                return Err(VmError::BadRootfs(r));
            }
            Some((r, opened.id, std::sync::Arc::new(opened.fd)))
        }
        None => None,
    };
    let (shares, share_params) = crate::shares::binds(fs)?;
    if spec.join_network.is_some() {
        return Err(VmError::Unsupported("joining another sandbox's network"));
    }
    let vmm = crate::machine::find_vmm().ok_or(MachineError::NoVmm)?;
    let kernel = crate::kernel::find()?;
    let dir = crate::kernel::vm_dir().ok_or(VmError::NoStateDir)?;
    let cache = dir.join("cache");
    sweep_runs(&dir.join("run"));
    let mut degraded = Vec::new();
    let root_image = match &rootfs {
        Some((tree, _, fd)) => root_image((tree, fd), &kernel, &cache, &mut degraded)?,
        None => None,
    };
    let initramfs = crate::image::initramfs(&kernel, &cache, root_image.as_ref().map(|(_, f)| *f))?;
    let mut params = vec![
        ("nofile".to_string(), spec.resources.open_files.to_string()),
        ("tmp".to_string(), fs.tmp_size.to_string()),
        ("hostname".to_string(), spec.hostname.clone()),
        (
            "workspace".to_string(),
            if fs.workspace.is_some() { "1" } else { "0" }.to_string(),
        ),
    ];
    // A debug build's test switch (`WARDEN_TEST_WEAKEN`), passed on to the
    // guest init, which honours it only in a debug build too.
    let weak = warden_jail::Weakened::current();
    let weak: Vec<&str> = [("seccomp", weak.seccomp), ("landlock", weak.landlock)]
        .iter()
        .filter(|(_, on)| *on)
        .map(|(n, _)| *n)
        .collect();
    if !weak.is_empty() {
        params.push(("weaken".into(), weak.join(",")));
    }
    if let Some(f) = spec.resources.file_size {
        params.push(("fsize".into(), f.to_string()));
    }
    if spec.resources.pids.explicit {
        params.push(("nproc".into(), spec.resources.pids.value.to_string()));
    }
    let host_cpus = std::thread::available_parallelism()
        .map(|n| n.get() as u32)
        .unwrap_or(1);
    let (memory_mib, cpus) = guest_size(spec, host_cpus);
    let n = RUNS.fetch_add(1, Ordering::Relaxed);
    let safe_id: String = id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(40)
        .collect();
    let mut config = Config {
        vmm,
        kernel: kernel.image.clone(),
        initramfs,
        accel: Accel::Tcg,
        memory_mib,
        cpus,
        workspace,
        workspace_id,
        workspace_held: None,
        params,
        shares: Vec::new(),
        rootfs: None,
        rootfs_id: None,
        root_image: None,
        trust: None,
        run_dir: dir
            .join("run")
            .join(format!("{safe_id}-{}-{n}", std::process::id())),
        cgroup: None,
        cpu_budget: None,
        net: None,
        netns: None,
        workspace_fs: Default::default(),
        start: Default::default(),
        ram: Default::default(),
    };
    let choice = crate::accel::choose(&config, &cache, &kernel.release);
    config.accel = choice.accel;
    // After the probe, which shares no workspace.
    let (workspace_fs, fs_note) = crate::fsd::choose()?;
    let fs_note = fs_note.filter(|_| config.workspace.is_some());
    config.workspace_fs = workspace_fs;
    // After the probe, which boots the system directories alone.
    config.params.extend(share_params);
    if rootfs.is_some() {
        config.params.push(("rootfs".into(), "1".into()));
    }
    if let Some((_, format)) = &root_image {
        config.params.push(("root".into(), format.as_str().into()));
    }
    crate::shares::check_length(&config.params)?;
    config.shares = shares;
    match root_image {
        Some((image, _)) => config.root_image = Some(image),
        None => {
            config.rootfs_id = rootfs.as_ref().map(|(_, id, _)| *id);
            config.rootfs = rootfs.map(|(r, _, _)| r);
        }
    }
    config.ram = crate::pause::ram_for(&config);
    Ok(Prepared {
        config,
        warning: choice.warning,
        degraded,
        fs_note,
    })
}

/// The read-only image of a `--rootfs` tree for the guest (cached, else
/// built now), unless `WARDEN_VM_ROOT=share` asks for the 9p share or the
/// host has no tool whose format the guest kernel mounts (said as a
/// `degraded` layer: the VMM's 9p server then serves the guest's root).
fn root_image(
    (tree, opened): (&std::path::Path, &std::sync::Arc<std::os::fd::OwnedFd>),
    kernel: &crate::GuestKernel,
    cache: &std::path::Path,
    degraded: &mut Vec<(&'static str, String)>,
) -> Result<Option<(PathBuf, crate::rootimage::Format)>, VmError> {
    use crate::rootimage::{self, RootMode};
    let forced = rootimage::forced_mode()?;
    if forced == Some(RootMode::Share) {
        return Ok(None);
    }
    let Some(tool) = rootimage::find_tool(Some(&kernel.modules)) else {
        if forced == Some(RootMode::Image) {
            return Err(VmError::NoImageTool);
        }
        degraded.push((
            "vm root image",
            "no mkfs.erofs or mkfs.ext4 on this host whose format the guest kernel mounts: the `filesystem.rootfs` tree is served to the guest over the VMM's 9p server instead of a read-only block device (install e2fsprogs or erofs-utils)".into(),
        ));
        return Ok(None);
    };
    // Walked and built from the tree opened and checked, never its path.
    let manifest = rootimage::manifest_of(tree, Some(opened.clone()), tool.format)?;
    let (image, _built) = rootimage::image(&manifest, &tool, cache)?;
    Ok(Some((image, tool.format)))
}

/// The guest's RAM (MiB) and vCPUs: the spec's explicit memory (at least
/// 128 MiB), else 512 MiB, or [`DESKTOP_MEMORY_MIB`] for a desktop; its
/// CPUs rounded up (at most the host's), else one, or two for a desktop.
fn guest_size(spec: &SandboxSpec, host_cpus: u32) -> (u64, u32) {
    let desktop = spec.desktop.is_some();
    let memory_mib = if spec.resources.memory.explicit {
        (spec.resources.memory.value >> 20).max(128)
    } else if desktop {
        DESKTOP_MEMORY_MIB
    } else {
        512
    };
    let cpus = spec
        .resources
        .cpus
        .map(|c| (c.ceil() as u32).clamp(1, host_cpus))
        .unwrap_or(if desktop { host_cpus.clamp(1, 2) } else { 1 });
    (memory_mib, cpus)
}

/// Remove the run directories (console logs) of VMs whose host side died
/// without cleaning up (a supervisor killed outright): each is named
/// `ID-PID-N` after the process that made it.
fn sweep_runs(run: &std::path::Path) {
    for e in std::fs::read_dir(run).into_iter().flatten().flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        let pid = name.rsplit('-').nth(1).and_then(|p| p.parse::<u32>().ok());
        // Gone, or a zombie (a killed supervisor not reaped yet).
        let alive = |pid: u32| {
            std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
                s.rsplit_once(')')
                    .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z'))
            })
        };
        if pid.is_some_and(|p| !alive(p)) {
            let _ = warden_workspace::fsutil::remove_tree(&e.path());
        }
    }
}

/// Write the trust files (the bundle with the sandbox's authority, the
/// authority alone) into `dir`, the guest's `/run/warden`.
fn write_trust(
    dir: &std::path::Path,
    files: warden_jail::secrets::TrustFiles,
) -> Result<PathBuf, VmError> {
    use std::os::unix::fs::{DirBuilderExt, FileExt};
    let err = |path: &std::path::Path| {
        let path = path.to_path_buf();
        move |source| VmError::Trust { path, source }
    };
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(err(dir))?;
    let names = [
        (files.bundle, warden_policy::CA_BUNDLE_PATH),
        (files.ca, warden_policy::CA_CERT_PATH),
    ];
    for (fd, inside) in names {
        let name = std::path::Path::new(inside)
            .file_name()
            .unwrap_or_default()
            .to_os_string();
        let path = dir.join(name);
        let f = File::from(fd);
        let mut data = Vec::new();
        let mut chunk = vec![0u8; 64 * 1024];
        loop {
            let n = f
                .read_at(&mut chunk, data.len() as u64)
                .map_err(err(&path))?;
            if n == 0 {
                break;
            }
            data.extend_from_slice(&chunk[..n]);
        }
        std::fs::write(&path, &data).map_err(err(&path))?;
    }
    Ok(dir.to_path_buf())
}

/// Is the overlay's lower `p` (opened once, through no link, and checked
/// to be the directory the sandbox was created over) empty?
fn lower_is_empty(p: &std::path::Path, expected: Option<(u64, u64)>) -> Result<bool, VmError> {
    let (_, fd, _) = warden_jail::open_workspace(p, expected).map_err(VmError::Workspace)?;
    let listed = std::fs::read_dir(format!("/proc/self/fd/{}", fd.as_raw_fd()));
    Ok(listed.is_ok_and(|mut d| d.next().is_none()))
}

/// Host memory the VMM itself needs beside the guest's RAM (QEMU, its
/// translation cache under emulation, 9p and the channel's buffers).
const VMM_OVERHEAD_TCG: u64 = 384 << 20;
const VMM_OVERHEAD_KVM: u64 = 256 << 20;

/// The memory limit of a VM sandbox's cgroup: the guest's RAM and the
/// VMM's overhead under `accel` (virtiofsd runs in the same cgroup and
/// shares it). With no `accel` known yet, the larger overhead: what a
/// quota counts before the VM is made, so it never counts less than the
/// cgroup will allow.
pub fn cgroup_memory(memory_mib: u64, accel: Option<Accel>) -> u64 {
    let overhead = match accel {
        Some(Accel::Kvm) => VMM_OVERHEAD_KVM,
        Some(Accel::Tcg) | None => VMM_OVERHEAD_TCG,
    };
    (memory_mib << 20).saturating_add(overhead)
}

/// The most host memory a VM sandbox of `spec` may hold (its cgroup's
/// limit whatever the accelerator), for whoever counts sandboxes against
/// a budget.
pub fn memory_held(spec: &SandboxSpec) -> u64 {
    cgroup_memory(guest_size(spec, 1).0, None)
}

/// The VMM's cgroup: memory = guest RAM + the VMM's overhead, the spec's
/// CPUs, a bound on its threads. Where none can be made, refused when a
/// limit was asked for explicitly (unless degraded runs are allowed),
/// otherwise said loudly, as the process backend does.
fn confine(
    spec: &SandboxSpec,
    id: &str,
    config: &Config,
    events: &mut dyn EventSink,
) -> Result<Option<warden_jail::cgroup::Cgroup>, VmError> {
    let limits = warden_jail::cgroup::Limits {
        memory: Some(cgroup_memory(config.memory_mib, Some(config.accel))),
        pids: Some(256),
        cpus: spec.resources.cpus,
    };
    let name: String = format!("vm-{id}")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect();
    let explicit = spec.resources.memory.explicit || spec.resources.cpus.is_some();
    let confine = warden_jail::confine::Confine {
        id,
        name: &name,
        limits: &limits,
        refuse: explicit && !spec.allow_degraded,
        process: "the VMM",
        without: "only the guest's RAM bounds it, and neither its CPU nor its virtiofsd's is limited (the supervisor's judge of their file calls alone still keeps the sandbox's CPU limit)",
    };
    warden_jail::confine::host_process(&confine, events).map_err(VmError::Cgroup)
}

/// Run `spec` in a new VM, as [`warden_jail::run`] runs it in a process
/// sandbox: returns when the VM is gone.
pub fn run(
    spec: &SandboxSpec,
    id: &str,
    program: Program,
    events: &mut dyn EventSink,
    attach: &mut dyn Attach,
) -> Result<Outcome, VmError> {
    run_controlled(
        spec,
        id,
        program,
        events,
        attach,
        &crate::control::Control::default(),
    )
}

/// [`run`], the VM of a long-lived sandbox paused and resumed through
/// `control` while it serves.
pub fn run_controlled(
    spec: &SandboxSpec,
    id: &str,
    program: Program,
    events: &mut dyn EventSink,
    attach: &mut dyn Attach,
    control: &crate::control::Control,
) -> Result<Outcome, VmError> {
    let start = Instant::now();
    // Secrets: the guest's environment holds placeholders; the values are
    // read on the host and reach only the secret proxy, which runs here,
    // outside the VM.
    let (secret_plan, own) = warden_jail::secrets::SecretPlan::for_spec(spec, attach)?;
    let spec = &own;
    let prepared = prepare(spec, id)?;
    if let Some(w) = &prepared.warning {
        degraded(events, id, "vm acceleration", w);
    }
    for (layer, lost) in &prepared.degraded {
        degraded(events, id, layer, lost);
    }
    let published = publish(spec)?;
    // With egress or published ports, the guest's one network device is a
    // TAP in a network namespace of the sandbox's own, whose every
    // connection and query meets the egress proxy (made now, while this
    // process is still single-threaded: the namespace is wired by a
    // short-lived child, which stays to hand out sockets of the namespace
    // for published ports). Without egress the proxy's sockets are closed
    // at once: every connection the guest starts is refused there.
    let with_egress = matches!(spec.network, NetworkSpec::Egress(_));
    let net = if with_egress || !published.is_empty() {
        Some(warden_jail::vmnet::open(!published.is_empty())?)
    } else {
        None
    };
    let boot = match prepared.config.accel {
        Accel::Kvm => BOOT_KVM,
        Accel::Tcg => BOOT_TCG,
    };
    let prepared_fs_note = prepared.fs_note;
    let mut config = prepared.config;
    // A named sandbox's layer, shared as the guest's workspace, is held
    // in a tmpfs of its disk budget while the VM runs (`crate::disk`).
    let kept = spec
        .filesystem
        .overlay
        .as_ref()
        .and(config.workspace.as_deref());
    config.cgroup = confine(spec, id, &config, events)?.map(Arc::new);
    let held = crate::disk::Held::make(spec, kept, config.cgroup.as_deref())?;
    config.workspace_held = held.clone();
    // The file servers run in that cgroup; the supervisor's judge of their
    // calls runs outside it and keeps this account instead (whether or not
    // a cgroup could be made).
    config.cpu_budget = warden_jail::modes::pace::Budget::new(spec.resources.cpus)?;
    let (egress, sockets) = match net {
        Some(n) => plug_network(n, with_egress, &mut config),
        None => (None, None),
    };
    if let (Some(plan), NetworkSpec::Egress(_)) = (secret_plan, &spec.network) {
        hand_over_secrets(plan, attach, &mut config)?;
    }
    let cgroup = config.cgroup.clone();
    events.emit(&Event::now(
        id,
        EventKind::Created {
            command: spec.command.clone(),
            workspace: spec.filesystem.workspace.clone(),
            rootless: !warden_jail::host::is_root(),
            cgroup: cgroup
                .as_ref()
                .and_then(|c| c.paths().first().map(|p| p.display().to_string())),
        },
    ));
    if egress.is_some() || !published.is_empty() {
        attach
            .network(warden_jail::Network {
                egress,
                // The guest's console is not a terminal this process
                // relays to a person: `--ask` has no desk here.
                terminal: false,
                published,
                sockets,
                publish_to: warden_jail::vmnet::GUEST_ADDR,
            })
            .map_err(VmError::Serve)?;
    }
    // A record the sinks could not take (the audit log opens with the
    // first one, `created`, above): the guest never boots unrecorded.
    if let Some(why) = events.failure() {
        return Err(VmError::Unrecorded(why));
    }
    let restoring = control.take_restore();
    let (mut machine, how) = match &restoring {
        Some(crate::control::Restore::Paused(dir)) => (
            crate::pause::restore_paused(&mut config, dir, boot)?,
            crate::template::Started::Template,
        ),
        Some(crate::control::Restore::Copy(dir)) => (
            crate::pause::restore_as_copy(&mut config, dir, boot, &spec.hostname)?,
            crate::template::Started::Template,
        ),
        None => crate::template::start(&config, boot)?,
    };
    match &how {
        crate::template::Started::Cold { why: Some(why) } => {
            tracing::warn!(sandbox = id, "booted cold: {why}")
        }
        how => tracing::debug!(sandbox = id, ?how, "VM started"),
    }
    if let Some(note) = prepared_fs_note.or_else(|| machine.fs_note.take()) {
        degraded(events, id, "vm workspace over virtio-fs", &note);
    }
    if !matches!(how, crate::template::Started::Cold { .. }) {
        // As the template made it: a VMM restoring it after a pause to
        // disk must have the same devices.
        config.workspace_fs = crate::fsd::WorkspaceFs::NineP;
    }
    // The TAP (and the namespace) stay ours too until the sandbox ends: a
    // VMM restored after a pause to disk is handed the same device, which
    // the namespace's addresses and rules name.
    events.emit(&Event::now(
        id,
        EventKind::Started {
            pid: machine.pid() as i32,
        },
    ));
    let (tx, rx) = sync_channel(crate::control::FRAMES_MAX);
    // A copy's restore read its channel up to the guest's answer to its
    // new identity; what the saved VMM had half read was consumed there.
    let rest = match &restoring {
        Some(crate::control::Restore::Paused(dir)) => crate::pause::rest(dir),
        _ => Vec::new(),
    };
    let mut live =
        crate::control::Live::new(machine, config, boot, tx.clone(), rest).map_err(|source| {
            VmError::Channel {
                what: "share",
                source,
            }
        })?;
    match &restoring {
        Some(crate::control::Restore::Paused(dir)) => live.take_shares_back(dir)?,
        // The copy took its shares back with its identity; its state was
        // this sandbox's own copy, used once.
        Some(crate::control::Restore::Copy(dir)) => {
            let _ = warden_workspace::fsutil::remove_tree(dir);
        }
        None => {}
    }
    let ended = {
        let mut report = Report::new(id, events, live.cut_off.clone());
        let ended = relay(
            spec,
            program,
            &mut live,
            (tx, &rx),
            attach,
            control,
            &mut report,
        );
        // A cut the relay had no moment to say (it ended otherwise
        // first, at the timeout or while writing to a caller).
        report.vm_cut_off();
        ended
    };
    live.unserve();
    let mut machine = live.machine.take();
    let console = machine.as_ref().map(Machine::console).unwrap_or_default();
    let stopping = std::time::Instant::now();
    if let Some(m) = machine.as_mut() {
        m.stop(Duration::from_secs(2));
    }
    tracing::debug!(
        sandbox = id,
        stop_ms = stopping.elapsed().as_millis() as u64,
        "VM ended"
    );
    drop(machine);
    attach.stopping();
    drop(live);
    // The VMM and virtiofsd are gone: the layer goes back to the state.
    let saved = held.as_deref().map(crate::disk::Held::save).transpose();
    let ended = ended?;
    let peaks = release(cgroup);
    let outcome = outcome_of(ended, spec, console)?;
    outcome.record(events, id, start, peaks);
    saved?;
    Ok(outcome)
}

/// Published ports: the host's listeners are bound now, so that a port in
/// use is an error before the guest boots.
fn publish(spec: &SandboxSpec) -> Result<Vec<(std::net::TcpListener, u16)>, VmError> {
    let mut published = Vec::new();
    for m in &spec.publish {
        let listener = std::net::TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, m.host_port))
            .map_err(|source| VmError::Publish {
                port: m.host_port,
                source,
            })?;
        published.push((listener, m.sandbox_port));
    }
    Ok(published)
}

/// The proxy's sockets (with egress) and the namespace's socket source
/// (with published ports).
type Plugged = (
    Option<(OwnedFd, OwnedFd)>,
    Option<warden_jail::SocketSource>,
);

/// Give the network namespace's TAP (and, as root, the namespace itself)
/// to the VMM; what stays on the host side is returned.
fn plug_network(
    n: warden_jail::vmnet::VmNetwork,
    with_egress: bool,
    config: &mut Config,
) -> Plugged {
    config.net = Some(Arc::new(n.tap));
    // Root may put QEMU itself in the namespace: then it has no socket
    // on the host's networks either (see `vmnet::run_inside`).
    if warden_jail::host::is_root() {
        config.netns = Some(Arc::new(n.namespace));
    }
    config.params.push(("net".into(), "1".into()));
    let sockets = n.sockets.map(warden_jail::vmnet::socket_source);
    (with_egress.then_some((n.tcp, n.dns)), sockets)
}

/// The values to the caller's keeping (its secret proxy runs here,
/// outside the VM); that proxy's authority is trusted in the guest
/// through files the host shares read-only at `/run/warden` (and over
/// the system bundle).
fn hand_over_secrets(
    plan: warden_jail::secrets::SecretPlan,
    attach: &mut dyn Attach,
    config: &mut Config,
) -> Result<(), VmError> {
    let files = plan.trust_files()?;
    plan.hand_over(attach)?;
    config.trust = Some(write_trust(&config.run_dir.join("trust"), files)?);
    config.params.push(("trust".into(), "1".into()));
    Ok(())
}

/// Relay between the guest's init and the caller until the program ends
/// (one command, or a service's spawn channel handed to
/// [`Attach::service`]), then tell the guest to shut down.
fn relay(
    spec: &SandboxSpec,
    program: Program,
    live: &mut crate::control::Live,
    (tx, rx): (SyncSender<Input>, &Receiver<Input>),
    attach: &mut dyn Attach,
    control: &crate::control::Control,
    report: &mut Report,
) -> Result<Ended2, VmError> {
    // As with the process backend, the timeout counts from the moment the
    // sandbox can run anything (here, once the guest's init serves).
    let deadline = spec.resources.timeout.map(|t| Instant::now() + t);
    let writer = live.writer.clone();
    let vmm = live.machine.as_ref().map(Machine::pid).unwrap_or(0);
    let ended = match program {
        Program::Command => one_command(spec, &writer, rx, deadline, report),
        Program::Service => {
            let (ours, theirs) = nix::sys::socket::socketpair(
                nix::sys::socket::AddressFamily::Unix,
                nix::sys::socket::SockType::SeqPacket,
                None,
                nix::sys::socket::SockFlag::SOCK_CLOEXEC,
            )
            .map_err(VmError::SpawnChannel)?;
            let ours = Arc::new(ours);
            {
                let ours = ours.clone();
                let tx = tx.clone();
                std::thread::spawn(move || read_requests(&ours, tx));
            }
            attach.service(theirs, Pid::from_raw(vmm as i32));
            live.serve(control);
            let ended = serve(spec, live, rx, &ours, deadline, report);
            live.unserve();
            // The supervisor's reader and ours see the end at once.
            let _ = nix::sys::socket::shutdown(ours.as_raw_fd(), nix::sys::socket::Shutdown::Both);
            ended
        }
    };
    if let Ok(mut w) = writer.lock() {
        let _ = Frame::new(Kind::Shutdown, 0, Vec::new()).write_to(&mut *w);
    }
    Ok(ended)
}

/// The VMM's cgroup, once the VMM is gone: what it used at most, and the
/// cgroup removed.
fn release(cgroup: Option<Arc<warden_jail::cgroup::Cgroup>>) -> ResourcePeaks {
    let stats = cgroup.as_ref().map(|c| c.stats());
    let peaks = ResourcePeaks {
        max_rss_bytes: stats.as_ref().and_then(|s| s.memory_peak),
        cpu_user_ms: stats.as_ref().and_then(|s| s.cpu_user_ms),
        cpu_system_ms: stats.as_ref().and_then(|s| s.cpu_system_ms),
        oom_kills: stats.as_ref().and_then(|s| s.oom_kills),
    };
    if let Some(cg) = cgroup.and_then(|c| Arc::try_unwrap(c).ok()) {
        let _ = cg.remove();
    }
    peaks
}

/// The sandbox's outcome from how the relay ended, with the process
/// backend's statuses; a VM gone without a word is an error carrying what
/// its `console` said.
fn outcome_of(ended: Ended2, spec: &SandboxSpec, console: String) -> Result<Outcome, VmError> {
    Ok(match ended {
        Ended2::Exit(Ended::Exited(code)) => Outcome {
            status: code,
            reason: ExitReason::Exited,
            signal: None,
            message: None,
        },
        // Checked where it was read (`Ended::checked`); 255 should a
        // malformed one ever reach here, never an overflow.
        Ended2::Exit(Ended::Signaled(sig)) => Outcome {
            status: Ended::Signaled(sig).status().unwrap_or(255),
            reason: ExitReason::Signaled,
            signal: Some(sig),
            message: None,
        },
        Ended2::ExecFailed(errno) => {
            let cmd = spec.command.first().cloned().unwrap_or_default();
            let (status, what) = if errno == nix::errno::Errno::ENOENT as i32 {
                (127, "command not found in the sandbox".to_string())
            } else {
                (
                    126,
                    format!(
                        "cannot execute: {}",
                        nix::errno::Errno::from_raw(errno).desc()
                    ),
                )
            };
            Outcome {
                status,
                reason: ExitReason::ExecFailed,
                signal: None,
                message: Some(format!("{cmd}: {what}")),
            }
        }
        Ended2::Timeout => Outcome {
            status: 124,
            reason: ExitReason::Timeout,
            signal: None,
            message: Some(format!(
                "the sandbox reached its `resources.timeout` of {} s and was killed",
                spec.resources.timeout.unwrap_or_default().as_secs_f64()
            )),
        },
        Ended2::Gone => return Err(VmError::GuestDied(console)),
    })
}

/// How the relay ended.
enum Ended2 {
    Exit(Ended),
    ExecFailed(i32),
    Timeout,
    /// The VM went away without a word.
    Gone,
}

/// Where the VM's files live (for `warden vm kernel` and `doctor`).
pub fn cache_dir() -> Option<PathBuf> {
    crate::kernel::vm_dir().map(|d| d.join("cache"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vm_spec(desktop: bool, memory: Option<u64>, cpus: Option<f64>) -> SandboxSpec {
        use warden_policy::compose::{Layer, Origin, Val};
        use warden_policy::Field;
        let mut layer = Layer::default();
        let mut set = |field, val| layer.add_one(field, val, Origin::CommandLine);
        set(Field::Command, Val::Argv(vec!["true".into()]));
        set(Field::Isolation, Val::Text("vm".into()));
        set(Field::Desktop, Val::Bool(desktop));
        if let Some(bytes) = memory {
            let text = bytes.to_string();
            set(Field::Memory, Val::Size { bytes, text });
        }
        if let Some(c) = cpus {
            set(Field::Cpus, Val::Cores(c));
        }
        layer
            .resolve(
                &warden_policy::Placement::default(),
                &warden_policy::Defaults::for_host(warden_policy::HostFacts {
                    total_memory: 8 << 30,
                    cpus: 8,
                    pid_max: 1 << 22,
                }),
                &[],
            )
            .unwrap()
    }

    #[test]
    fn a_vm_sandbox_is_counted_at_its_cgroups_limit_not_its_guests_ram() {
        // Asked 256 MiB: the cgroup allows the guest and the VMM beside it,
        // the emulator's larger share when the accelerator is not known.
        let spec = vm_spec(false, Some(256 << 20), None);
        assert_eq!(memory_held(&spec), (256 << 20) + (384 << 20));
        assert_eq!(
            cgroup_memory(256, Some(Accel::Kvm)),
            (256 << 20) + (256 << 20)
        );
        assert_eq!(cgroup_memory(256, Some(Accel::Tcg)), memory_held(&spec));
        // Nothing asked: the guest gets 512 MiB (a desktop 2 GiB), and is
        // counted at that, not at the spec's default limit.
        assert_eq!(
            memory_held(&vm_spec(false, None, None)),
            (512 << 20) + (384 << 20)
        );
        assert_eq!(
            memory_held(&vm_spec(true, None, None)),
            (DESKTOP_MEMORY_MIB << 20) + (384 << 20)
        );
    }

    #[test]
    fn a_desktop_guest_gets_room_for_its_programs_unless_a_size_is_given() {
        assert_eq!(guest_size(&vm_spec(false, None, None), 8), (512, 1));
        assert_eq!(
            guest_size(&vm_spec(true, None, None), 8),
            (DESKTOP_MEMORY_MIB, 2)
        );
        assert_eq!(
            guest_size(&vm_spec(true, None, None), 1),
            (DESKTOP_MEMORY_MIB, 1)
        );
        // An explicit size is the person's choice, for a desktop too.
        assert_eq!(
            guest_size(&vm_spec(true, Some(1 << 30), Some(3.0)), 8),
            (1024, 3)
        );
    }
}
