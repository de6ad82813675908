//! `warden vm kernel`: which guest kernel `--isolation vm` boots, and how
//! to get one.

use warden_vm::report::VmReport;

#[derive(clap::Subcommand, Debug)]
pub enum VmCommand {
    /// Say which guest kernel, VMM and acceleration `--isolation vm` uses
    /// (exit 0 only when a VM sandbox can start). Set WARDEN_VM_KERNEL to a
    /// vmlinuz to use another kernel
    Kernel {
        /// Print the report as JSON
        #[arg(long)]
        json: bool,
    },
}

pub fn vm(cmd: VmCommand) -> anyhow::Result<u8> {
    match cmd {
        VmCommand::Kernel { json } => {
            let r = warden_vm::report::report(false);
            if json {
                println!("{}", serde_json::to_string_pretty(&r)?);
            } else {
                print!("{}", describe(&r));
            }
            Ok(if ready(&r) { 0 } else { 1 })
        }
    }
}

/// Can a VM sandbox start here?
pub fn ready(r: &VmReport) -> bool {
    r.vmm.is_some() && r.kernel.is_ok() && r.guest_init_present
}

/// The report in lines, `doctor`'s layout.
pub fn describe(r: &VmReport) -> String {
    let mut s = String::new();
    let row = |s: &mut String, name: &str, ok: bool, detail: String| {
        s.push_str(&format!(
            "{:<16} {:<7} {}\n",
            name,
            if ok { "ok" } else { "MISSING" },
            detail
        ));
    };
    row(
        &mut s,
        "vm vmm",
        r.vmm.is_some(),
        match &r.vmm {
            Some(p) => format!("QEMU microvm ({})", p.display()),
            None => "no VMM: `apt-get install qemu-system-x86` (Firecracker and Cloud Hypervisor are not driven yet)".into(),
        },
    );
    row(
        &mut s,
        "vm kernel",
        r.kernel.is_ok(),
        match &r.kernel {
            Ok(k) => format!("{} ({}, {})", k.release, k.image.display(), k.source),
            Err(e) => e.clone(),
        },
    );
    row(
        &mut s,
        "vm guest init",
        r.guest_init_present,
        r.guest_init.display().to_string(),
    );
    let accel = match (r.kvm_device, r.kvm_boots) {
        (false, _) => "no usable /dev/kvm: software emulation only (slow)".to_string(),
        (true, Some(true)) => "KVM boots the guest kernel".to_string(),
        (true, Some(false)) => "/dev/kvm is present but did not boot the guest kernel (nested or paravirtual KVM?): software emulation only (slow)".to_string(),
        // Nothing to boot a probe with: say what is missing, not that a
        // probe is still to come (`warden doctor` has just tried).
        (true, None) if r.vmm.is_none() || r.kernel.is_err() || !r.guest_init_present => {
            "/dev/kvm is present; it can be probed once the VMM, guest kernel and guest init above are all found".to_string()
        }
        (true, None) => "/dev/kvm is present; not probed yet (the first VM sandbox, or `warden doctor`, probes it)".to_string(),
    };
    row(&mut s, "vm accel", r.kvm_boots == Some(true), accel);
    let root = match &r.root_image {
        Some(t) => format!(
            "a --rootfs tree becomes a read-only {} image ({}), cached by a manifest of the tree",
            t.format.as_str(),
            t.path.display()
        ),
        None => "no mkfs.erofs or mkfs.ext4 whose format the guest kernel mounts: a --rootfs tree is served over 9p (degraded; install e2fsprogs or erofs-utils)".into(),
    };
    row(&mut s, "vm root image", r.root_image.is_some(), root);
    s
}
