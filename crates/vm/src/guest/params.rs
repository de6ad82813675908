//! What the host tells the guest (the kernel's command line, or a
//! template's `attach`) and the shares mounted from it: read by the
//! setup as the guest boots and by the keeper when it mounts the shares
//! again after a pause to disk.

use super::shares::{parse_bind, GuestBind};
use super::{fs_err, mount_fs, GuestError};
use nix::mount::{mount, MsFlags};
use std::path::{Path, PathBuf};

/// What the host passed on the kernel's command line (`warden.KEY=VALUE`).
#[derive(Debug, Default, Clone)]
pub(super) struct Params {
    pub(super) nofile: Option<u64>,
    pub(super) fsize: Option<u64>,
    pub(super) nproc: Option<u64>,
    pub(super) tmp: Option<u64>,
    pub(super) hostname: Option<String>,
    pub(super) workspace: bool,
    /// The workspace comes over virtio-fs (else 9p).
    pub(super) virtiofs: bool,
    /// A network device leads to the sandbox's egress proxy.
    pub(super) net: bool,
    /// The host shares the secret proxy's trust files (`--secret`).
    pub(super) trust: bool,
    /// Layers a debug build's test switched off (see `warden_jail::Weakened`).
    pub(super) weaken: Vec<String>,
    /// The host shares a `--rootfs` tree as the system directories.
    pub(super) rootfs: bool,
    /// The tree comes as a read-only image of this file system on the
    /// guest's block device (`ext4` or `erofs`), not as the `root` share.
    pub(super) root_image: Option<String>,
    /// `--ro`/`--rw` binds.
    pub(super) binds: Vec<GuestBind>,
    /// warden's own directories that a share shows, to be covered.
    pub(super) hide: Vec<PathBuf>,
    /// This boot makes a template: park once the channel is open and take
    /// the settings above from the host's `attach` instead.
    pub(super) template: bool,
}

/// The settings of the kernel's command line.
pub(super) fn params() -> Params {
    let line = std::fs::read_to_string("/proc/cmdline").unwrap_or_default();
    parse_params(
        line.split_whitespace()
            .filter_map(|w| w.strip_prefix("warden.")),
    )
}

/// Settings from `KEY=VALUE` words; unknown keys are ignored.
pub(super) fn parse_params<'a>(words: impl Iterator<Item = &'a str>) -> Params {
    let mut p = Params::default();
    for word in words {
        let Some((k, v)) = word.split_once('=') else {
            continue;
        };
        match k {
            "nofile" => p.nofile = v.parse().ok(),
            "fsize" => p.fsize = v.parse().ok(),
            "nproc" => p.nproc = v.parse().ok(),
            "tmp" => p.tmp = v.parse().ok(),
            "hostname" => p.hostname = Some(v.to_string()),
            "workspace" => p.workspace = v == "1",
            "wsfs" => p.virtiofs = v == "virtiofs",
            "net" => p.net = v == "1",
            "trust" => p.trust = v == "1",
            "rootfs" => p.rootfs = v == "1",
            "root" if v == "ext4" || v == "erofs" => p.root_image = Some(v.to_string()),
            "bind" => p.binds.extend(parse_bind(v)),
            "hide" => p.hide.extend(crate::shares::unhex(v)),
            "template" => p.template = v == "1",
            "weaken" if cfg!(debug_assertions) => {
                p.weaken = v.split(',').map(str::to_string).collect()
            }
            _ => {}
        }
    }
    p
}

/// The 9p mount options of every share.
pub(super) const NINE: &str = "trans=virtio,version=9p2000.L,msize=262144";

/// Whether the shares of this guest can be given back to the VMM before a
/// pause to disk: its system directories are a read-only image (a 9p share
/// of them is never free while a program runs) and its workspace is not
/// virtio-fs (which the VMM cannot save at all).
pub(super) fn releasable(p: &Params) -> bool {
    p.rootfs && p.root_image.is_some() && !p.virtiofs
}

/// Mount what the host shares over 9p or virtio-fs: the workspace, the
/// binds (and the covers of warden's directories they show) and the trust
/// files. The keeper mounts them again this way after a pause to disk.
/// Returns the writable binds.
pub(super) fn attach_shares(p: &Params) -> Result<Vec<PathBuf>, GuestError> {
    let nosuid = MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
    if p.workspace && p.virtiofs {
        mount_fs("workspace", "/workspace", "virtiofs", nosuid, "")?;
    } else if p.workspace {
        // `mmap`: uncached like `none`, but shared mappings work (a named
        // sandbox's home is its workspace, where a desktop's browser and
        // its settings store map files shared; `none` refuses that).
        mount_fs(
            "workspace",
            "/workspace",
            "9p",
            nosuid,
            &format!("{NINE},cache=mmap"),
        )?;
    }
    let bind_writable = super::shares::mount_binds(&p.binds, NINE)?;
    super::shares::hide(&p.hide)?;
    if p.trust {
        trust(NINE)?;
    }
    Ok(bind_writable)
}

/// The secret proxy's trust files at `/run/warden` (the host shares them
/// read-only), and its bundle over the system's, for programs that read
/// no variable.
fn trust(nine: &str) -> Result<(), GuestError> {
    let dir = Path::new(warden_policy::CA_BUNDLE_PATH)
        .parent()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|| "/run/warden".into());
    mount_fs(
        "trust",
        &dir,
        "9p",
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC | MsFlags::MS_RDONLY,
        &format!("{nine},cache=none"),
    )?;
    let system = warden_jail::secrets::HOST_BUNDLE;
    if let Some(parent) = Path::new(system).parent() {
        let _ = std::fs::create_dir_all(parent);
    }
    if !Path::new(system).exists() {
        let _ = std::fs::write(system, b"");
    }
    if !Path::new(system).exists() {
        // A --rootfs tree without the system bundle (its /etc is
        // read-only): programs find the bundle through the variables.
        return Ok(());
    }
    mount(
        Some(warden_policy::CA_BUNDLE_PATH),
        system,
        None::<&str>,
        MsFlags::MS_BIND,
        None::<&str>,
    )
    .map_err(fs_err("bind the trust bundle over", system))
}
