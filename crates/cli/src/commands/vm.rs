//! `warden vm kernel`: which guest kernel `--isolation vm` boots, and how
//! to get one (`--install`: the distribution's kernel package, fetched
//! with apt and unpacked where the VM backend looks for it, as `.ci/run`
//! does; never installed on the host).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context};
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
        /// Fetch the distribution's kernel package (apt-get download) and
        /// unpack it (dpkg-deb -x) where `--isolation vm` looks for its
        /// kernel, replacing the one there; the host's own kernel is not
        /// touched
        #[arg(long, conflicts_with = "json")]
        install: bool,
        /// With --install: print what would be fetched and where it would
        /// be unpacked, and change nothing
        #[arg(long, requires = "install")]
        dry_run: bool,
        /// With --install: unpack this kernel package (a .deb already
        /// downloaded) instead of fetching one
        #[arg(long, requires = "install", value_name = "DEB")]
        deb: Option<PathBuf>,
    },
}

pub fn vm(cmd: VmCommand) -> anyhow::Result<u8> {
    match cmd {
        VmCommand::Kernel {
            install: true,
            dry_run,
            deb,
            ..
        } => install(dry_run, deb),
        VmCommand::Kernel { json, .. } => {
            let r = warden_vm::report::report(false);
            if json {
                println!("{}", warden_audit::json::to_string_pretty(&r)?);
            } else {
                print!("{}", describe(&r));
            }
            Ok(if ready(&r) { 0 } else { 1 })
        }
    }
}

/// Where the kernel package is unpacked: `kernel` in the VM backend's
/// directory, where `warden_vm::kernel::find` looks.
fn kernel_dir() -> PathBuf {
    warden_vm::kernel::vm_dir()
        .unwrap_or_else(|| PathBuf::from("/var/lib/warden/vm"))
        .join("kernel")
}

/// The first program named `name` on `PATH`.
fn on_path(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    })
}

/// What `--install` fetches: the kernel package and, where the
/// distribution splits them off (Ubuntu's `linux-modules-*`), its modules.
struct Plan {
    /// The meta-package whose dependency was chosen (none with `--deb`).
    meta: Option<String>,
    packages: Vec<String>,
    dir: PathBuf,
}

/// `warden vm kernel --install`.
fn install(dry_run: bool, deb: Option<PathBuf>) -> anyhow::Result<u8> {
    let needed: &[&str] = if deb.is_some() {
        &["dpkg-deb"]
    } else {
        &["apt-cache", "apt-get", "dpkg-deb"]
    };
    let missing: Vec<&str> = needed
        .iter()
        .copied()
        .filter(|t| on_path(t).is_none())
        .collect();
    if !missing.is_empty() {
        bail!(
            "`warden vm kernel --install` fetches and unpacks a Debian or Ubuntu kernel package, and this host has no {} (apt and dpkg): set WARDEN_VM_KERNEL to a vmlinuz-RELEASE whose modules are in ../lib/modules/RELEASE beside it (see docs/microvm.md)",
            missing.join(", ")
        );
    }
    let dir = kernel_dir();
    let plan = match &deb {
        Some(_) => Plan {
            meta: None,
            packages: Vec::new(),
            dir,
        },
        None => plan(dir)?,
    };
    if dry_run {
        print!("{}", describe_plan(&plan, deb.as_deref()));
        return Ok(0);
    }
    let parent = plan
        .dir
        .parent()
        .context("the kernel directory has no parent")?
        .to_path_buf();
    std::fs::create_dir_all(&parent)
        .with_context(|| format!("cannot make {}", parent.display()))?;
    // Fetched and unpacked beside the kernel directory, then put in its
    // place by one rename: a failure half-way leaves the kernel that was
    // there, and a VM starting meanwhile never sees half a tree.
    let work = parent.join(format!(".kernel-install-{}", std::process::id()));
    let result = fetch_and_unpack(&plan, deb.as_deref(), &work);
    let _ = warden_workspace::fsutil::remove_tree(&work);
    let release = result?;
    println!(
        "the guest kernel is now {release} ({}); `warden vm kernel` reports it",
        warden_workspace::printable_path(&plan.dir.join("boot").join(format!("vmlinuz-{release}")))
    );
    Ok(0)
}

/// The kernel package this distribution's meta-package depends on now
/// (`apt-cache depends linux-image-amd64`), and its split-off modules.
fn plan(dir: PathBuf) -> anyhow::Result<Plan> {
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => {
            bail!("no distribution kernel is known for {other}: set WARDEN_VM_KERNEL to a vmlinuz")
        }
    };
    // Debian's meta-package, then Ubuntu's.
    for meta in [
        format!("linux-image-{arch}"),
        "linux-image-generic".to_string(),
    ] {
        let deps = depends(&meta)?;
        if let Some(image) = deps.iter().find(|d| d.starts_with("linux-image-")) {
            let mut packages = vec![image.clone()];
            packages.extend(
                depends(image)?
                    .into_iter()
                    .filter(|d| d.starts_with("linux-modules-")),
            );
            return Ok(Plan {
                meta: Some(meta),
                packages,
                dir,
            });
        }
    }
    bail!("apt knows no kernel package (neither linux-image-{arch} nor linux-image-generic has a linux-image dependency): run `apt-get update`, or set WARDEN_VM_KERNEL to a vmlinuz")
}

/// The packages `package` depends on, by name, as apt's lists say (no
/// network).
fn depends(package: &str) -> anyhow::Result<Vec<String>> {
    let out = Command::new("apt-cache")
        .args(["depends", package])
        .output()
        .context("cannot run apt-cache")?;
    if !out.status.success() {
        return Ok(Vec::new());
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.trim().strip_prefix("Depends:"))
        .map(|d| d.trim().to_string())
        .filter(|d| !d.starts_with('<'))
        .collect())
}

fn describe_plan(plan: &Plan, deb: Option<&Path>) -> String {
    let mut s = String::new();
    match deb {
        Some(d) => s.push_str(&format!("would unpack {}\n", d.display())),
        None => {
            let meta = plan.meta.as_deref().unwrap_or("-");
            for p in &plan.packages {
                s.push_str(&format!(
                    "would fetch {p} (what {meta} depends on): apt-get download {p}\n"
                ));
            }
        }
    }
    s.push_str(&format!(
        "would unpack it (dpkg-deb -x, not installed) into {}, replacing what is there\n",
        plan.dir.display()
    ));
    s
}

/// Fetch (unless given) and unpack into `work`, then move the tree into
/// the kernel directory; the release of the kernel it holds.
fn fetch_and_unpack(plan: &Plan, deb: Option<&Path>, work: &Path) -> anyhow::Result<String> {
    let downloads = work.join("download");
    let tree = work.join("kernel");
    std::fs::create_dir_all(&downloads)
        .with_context(|| format!("cannot make {}", downloads.display()))?;
    let debs: Vec<PathBuf> = match deb {
        Some(d) => vec![d.to_path_buf()],
        None => {
            for p in &plan.packages {
                let out = Command::new("apt-get")
                    .args(["download", "-qq", p])
                    .current_dir(&downloads)
                    .output()
                    .context("cannot run apt-get")?;
                if !out.status.success() {
                    bail!(
                        "apt-get download {p} failed (is the distribution's mirror reachable? `apt-get update` first?): {}",
                        String::from_utf8_lossy(&out.stderr).trim()
                    );
                }
                println!("fetched {p} with apt-get download");
            }
            let mut v: Vec<PathBuf> = std::fs::read_dir(&downloads)?
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|e| e == "deb"))
                .collect();
            v.sort();
            v
        }
    };
    for d in &debs {
        let out = Command::new("dpkg-deb")
            .arg("-x")
            .arg(d)
            .arg(&tree)
            .output()
            .context("cannot run dpkg-deb")?;
        if !out.status.success() {
            bail!(
                "dpkg-deb -x {} failed: {}",
                d.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        println!(
            "unpacked {}",
            d.file_name().unwrap_or_default().to_string_lossy()
        );
    }
    let release = std::fs::read_dir(tree.join("boot"))
        .ok()
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            e.file_name()
                .to_str()
                .and_then(|n| n.strip_prefix("vmlinuz-"))
                .map(str::to_string)
        })
        .max()
        .context("the package holds no boot/vmlinuz-RELEASE: not a kernel package")?;
    if !tree.join("lib/modules").join(&release).is_dir() {
        bail!("the package holds boot/vmlinuz-{release} but no lib/modules/{release}: the guest needs the kernel's modules too");
    }
    let old = work.join("old");
    if plan.dir.exists() {
        std::fs::rename(&plan.dir, &old)
            .with_context(|| format!("cannot move the old kernel out of {}", plan.dir.display()))?;
    }
    if let Err(e) = std::fs::rename(&tree, &plan.dir) {
        // Put the old one back: no kernel is worse than an old one.
        let _ = std::fs::rename(&old, &plan.dir);
        return Err(e)
            .with_context(|| format!("cannot move the kernel into {}", plan.dir.display()));
    }
    println!("into {}", warden_workspace::printable_path(&plan.dir));
    Ok(release)
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
            // Not found: the command that fetches it, not the steps.
            Err(e) if e.starts_with("no guest kernel") => format!(
                "no guest kernel in {}: `warden vm kernel --install` fetches the distribution's kernel package and unpacks it there (or set WARDEN_VM_KERNEL to a vmlinuz)",
                kernel_dir().display()
            ),
            Err(e) => e.clone(),
        },
    );
    row(
        &mut s,
        "vm guest init",
        r.guest_init_present,
        if r.guest_init_present {
            r.guest_init.display().to_string()
        } else {
            // `cargo run` builds warden alone: say which build makes the
            // guest init and that it goes beside warden.
            format!(
                "{} is missing: `cargo build --release -p warden-cli` builds it with warden, to be installed beside it (docs/install.md); or set WARDEN_GUEST_INIT",
                r.guest_init.display()
            )
        },
    );
    let accel = match (r.kvm_device, r.kvm_boots) {
        // The device is there but this user may not open it (the host's
        // row above says "present"): say what changes that.
        (false, _) if std::path::Path::new("/dev/kvm").exists() => {
            "/dev/kvm is present but this user cannot open it (an administrator adds the user to the device's group, usually `kvm`): software emulation only (slow)".to_string()
        }
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
