//! The capabilities a jailed host helper holds once it runs: virtiofsd's
//! jail leaves it exactly the ones it serves files with (ambient, and the
//! bounding set cut to them), and nothing an exec could widen. Read from
//! the helper's own /proc status, as the kernel reports it.

use std::collections::HashMap;
use std::path::PathBuf;
use warden_jail::fsd::FsdJail;
use warden_jail::vmm::{VmmAccess, VmmJailError};

/// CAP_CHOWN, DAC_OVERRIDE, FOWNER, FSETID, SETGID, SETUID, SETPCAP,
/// SYS_CHROOT, MKNOD, SETFCAP: what `warden_jail::fsd` keeps.
const FSD_KEPT: u64 = (1 << 0)
    | (1 << 1)
    | (1 << 3)
    | (1 << 4)
    | (1 << 6)
    | (1 << 7)
    | (1 << 8)
    | (1 << 18)
    | (1 << 27)
    | (1 << 31);

fn capability_sets(status: &str) -> HashMap<String, u64> {
    status
        .lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(':')?;
            let v = u64::from_str_radix(v.trim(), 16).ok()?;
            k.starts_with("Cap").then(|| (k.to_string(), v))
        })
        .collect()
}

#[test]
fn virtiofsds_jail_leaves_it_exactly_the_capabilities_it_serves_files_with() {
    let dir = std::env::temp_dir().join(format!("warden-helper-caps-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let access = VmmAccess {
        // Its program, its libraries and its own /proc status: all beneath /.
        readable: vec![PathBuf::from("/")],
        root: dir.clone(),
        ..VmmAccess::default()
    };
    let jail = match FsdJail::prepare(&access, (65534, 65534)) {
        Ok(j) => j,
        Err(VmmJailError::NoLandlock) => {
            eprintln!("skipped: no Landlock on this kernel");
            return;
        }
        Err(e) => panic!("{e}"),
    };
    let mut cmd = std::process::Command::new("/bin/cat");
    cmd.arg("/proc/self/status");
    jail.apply(&mut cmd);
    let out = cmd.output().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    if !out.status.success() && !warden_jail::host::is_root() {
        eprintln!(
            "skipped: no unprivileged user namespace here ({})",
            String::from_utf8_lossy(&out.stderr)
        );
        return;
    }
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let sets = capability_sets(&String::from_utf8_lossy(&out.stdout));
    for set in ["CapInh", "CapAmb", "CapBnd", "CapPrm", "CapEff"] {
        assert_eq!(sets[set], FSD_KEPT, "{set}: {:#x}", sets[set]);
    }
}
