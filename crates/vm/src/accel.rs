//! KVM or software emulation: `/dev/kvm` may exist and still not boot a
//! stock kernel (a nested, paravirtual KVM hangs or faults), so its use is
//! decided by a bounded probe boot, whose verdict is kept per guest kernel
//! in the VM directory. `WARDEN_VM_ACCEL=kvm|tcg` decides instead.

use crate::machine::{Accel, Config, Machine};
use std::path::Path;
use std::time::Duration;

/// How long the probe boot may take under KVM (a working KVM boots in well
/// under a second).
const PROBE: Duration = Duration::from_secs(8);

/// What was decided, and the warning to record when KVM was not used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Choice {
    pub accel: Accel,
    pub warning: Option<String>,
}

/// Is `/dev/kvm` there and ours to open?
pub fn kvm_present() -> bool {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm")
        .is_ok()
}

/// Decide, probing once per kernel when nothing is known yet. `base` is the
/// machine the probe boots (no workspace, little memory).
pub fn choose(base: &Config, cache: &Path, release: &str) -> Choice {
    match crate::Settings::current().accel.as_deref() {
        Some("tcg") => {
            return Choice {
                accel: Accel::Tcg,
                warning: None,
            }
        }
        Some("kvm") => {
            return Choice {
                accel: Accel::Kvm,
                warning: None,
            }
        }
        _ => {}
    }
    if !kvm_present() {
        return Choice {
            accel: Accel::Tcg,
            warning: Some(
                "/dev/kvm is not usable here: the VM runs under software emulation (slow)".into(),
            ),
        };
    }
    let verdict = cache.join(format!("kvm-probe-{release}"));
    let works = match std::fs::read_to_string(&verdict).as_deref().map(str::trim) {
        Ok("works") => true,
        Ok("broken") => false,
        _ => {
            let works = probe(base);
            let _ = std::fs::create_dir_all(cache);
            let _ = std::fs::write(&verdict, if works { "works\n" } else { "broken\n" });
            works
        }
    };
    if works {
        Choice {
            accel: Accel::Kvm,
            warning: None,
        }
    } else {
        Choice {
            accel: Accel::Tcg,
            warning: Some(format!(
                "/dev/kvm did not boot the guest kernel within {} s (a nested or paravirtual KVM?): the VM runs under software emulation (slow); remove {} to probe again",
                PROBE.as_secs(),
                verdict.display()
            )),
        }
    }
}

/// Boot `base` under KVM and see whether its init answers in time.
pub fn probe(base: &Config) -> bool {
    let mut cfg = base.clone();
    cfg.accel = Accel::Kvm;
    cfg.workspace = None;
    // The probe boots the system directories alone.
    cfg.shares.clear();
    cfg.rootfs = None;
    cfg.params
        .retain(|(k, _)| !matches!(k.as_str(), "bind" | "hide" | "rootfs"));
    cfg.memory_mib = 256;
    cfg.cpus = 1;
    cfg.run_dir = base.run_dir.with_extension("probe");
    cfg.cgroup = None;
    match Machine::boot(&cfg, PROBE) {
        Ok(mut m) => {
            let _ = crate::wire::Frame::new(crate::wire::Kind::Shutdown, 0, Vec::new())
                .write_to(&mut m.stream);
            m.stop(Duration::from_secs(1));
            true
        }
        Err(_) => {
            let _ = warden_workspace::fsutil::remove_tree(&cfg.run_dir);
            false
        }
    }
}
