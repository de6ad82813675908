//! What the VM backend finds on this host, for `warden doctor` and `warden
//! vm kernel`.

use crate::kernel::{GuestKernel, KernelSource};
use crate::machine::{Accel, Config};
use serde::Serialize;
use std::path::PathBuf;

/// The VM backend's view of the host.
#[derive(Debug, Clone, Serialize)]
pub struct VmReport {
    /// The VMM binary, when one was found.
    pub vmm: Option<PathBuf>,
    /// The guest kernel image, or why there is none.
    pub kernel: Result<KernelInfo, String>,
    /// The guest init that goes into the initramfs, and whether it exists.
    pub guest_init: PathBuf,
    pub guest_init_present: bool,
    /// `/dev/kvm` can be opened.
    pub kvm_device: bool,
    /// What the probe boot found (`None`: not probed, nothing to probe with).
    pub kvm_boots: Option<bool>,
    /// What a VM sandbox runs under: "kvm" or "tcg".
    pub accel: Option<&'static str>,
    /// The tool that makes a `--rootfs` tree a read-only image for the
    /// guest (`None`: the tree is served over 9p).
    pub root_image: Option<crate::rootimage::Tool>,
}

/// A guest kernel, in words.
#[derive(Debug, Clone, Serialize)]
pub struct KernelInfo {
    pub image: PathBuf,
    pub modules: PathBuf,
    pub release: String,
    /// "WARDEN_VM_KERNEL" or "unpacked package".
    pub source: &'static str,
}

impl From<&GuestKernel> for KernelInfo {
    fn from(k: &GuestKernel) -> KernelInfo {
        KernelInfo {
            image: k.image.clone(),
            modules: k.modules.clone(),
            release: k.release.clone(),
            source: match k.source {
                KernelSource::Given => "WARDEN_VM_KERNEL",
                KernelSource::Unpacked => "unpacked package",
            },
        }
    }
}

/// Look (and, with `probe` and nothing known yet, boot once under KVM,
/// bounded, to see whether it works).
pub fn report(probe: bool) -> VmReport {
    let vmm = crate::machine::find_vmm();
    let kernel = crate::kernel::find();
    let guest_init = crate::image::guest_init_path();
    let guest_init_present = guest_init.is_file();
    let kvm_device = crate::accel::kvm_present();
    let mut kvm_boots = None;
    let mut accel = None;
    if let (Some(vmm), Ok(k), true, Some(dir)) =
        (&vmm, &kernel, guest_init_present, crate::kernel::vm_dir())
    {
        let cache = dir.join("cache");
        let verdict = cache.join(format!("kvm-probe-{}", k.release));
        kvm_boots = match std::fs::read_to_string(&verdict).as_deref().map(str::trim) {
            Ok("works") => Some(true),
            Ok("broken") => Some(false),
            _ => None,
        };
        if probe && kvm_device && kvm_boots.is_none() {
            if let Ok(initramfs) = crate::image::initramfs(k, &cache, None) {
                let base = Config {
                    vmm: vmm.clone(),
                    kernel: k.image.clone(),
                    initramfs,
                    accel: Accel::Kvm,
                    memory_mib: 256,
                    cpus: 1,
                    workspace: None,
                    workspace_id: None,
                    workspace_held: None,
                    trust: None,
                    params: Vec::new(),
                    shares: Vec::new(),
                    rootfs: None,
                    rootfs_id: None,
                    root_image: None,
                    run_dir: dir
                        .join("run")
                        .join(format!("doctor-{}", std::process::id())),
                    cgroup: None,
                    cpu_budget: None,
                    net: None,
                    netns: None,
                    workspace_fs: Default::default(),
                    start: Default::default(),
                    ram: Default::default(),
                };
                let choice = crate::accel::choose(&base, &cache, &k.release);
                kvm_boots = Some(choice.accel == Accel::Kvm);
            }
        }
        accel = Some(match (kvm_device, kvm_boots) {
            (true, Some(true)) => "kvm",
            _ => "tcg",
        });
    }
    let root_image = crate::rootimage::find_tool(kernel.as_ref().ok().map(|k| k.modules.as_path()));
    VmReport {
        root_image,
        vmm,
        kernel: kernel
            .as_ref()
            .map(KernelInfo::from)
            .map_err(|e| e.to_string()),
        guest_init,
        guest_init_present,
        kvm_device,
        kvm_boots,
        accel,
    }
}
