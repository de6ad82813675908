//! The capabilities a jailed host helper holds once it runs: virtiofsd's
//! jail leaves it exactly the ones it serves files with (ambient, and the
//! bounding set cut to them), and nothing an exec could widen. Read from
//! the helper's own /proc status, as the kernel reports it. And what it
//! does with them: never a set-ID bit, and a root-owned share only
//! through the idmapped view attached for it.

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

/// A directory of root's, removed on drop.
struct Dir(PathBuf);

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Run `script` in virtiofsd's jail as nobody, writable beneath `share`,
/// with `view` handed as a descriptor whose `/proc/self/fd/N/` the script
/// names `$VIEW` (as warden names it to virtiofsd); `None` without
/// Landlock.
fn in_fsd_jail(
    share: &std::path::Path,
    view: Option<std::os::fd::OwnedFd>,
    script: &str,
) -> Option<std::process::Output> {
    let access = VmmAccess {
        readable: vec![
            PathBuf::from("/usr"),
            PathBuf::from("/lib"),
            PathBuf::from("/lib64"),
        ]
        .into_iter()
        .filter(|p| p.exists())
        .collect(),
        writable: vec![share.to_path_buf()],
        root: share.to_path_buf(),
        ..VmmAccess::default()
    };
    let jail = match FsdJail::prepare(&access, (65534, 65534)) {
        Ok(j) => j,
        Err(VmmJailError::NoLandlock) => {
            eprintln!("skipped: no Landlock on this kernel");
            return None;
        }
        Err(e) => panic!("{e}"),
    };
    let mut cmd = std::process::Command::new("/bin/sh");
    cmd.args(["-c", script]);
    if let Some(v) = &view {
        let n = warden_jail::vmnet::inherit(&mut cmd, v);
        cmd.env("VIEW", format!("/proc/self/fd/{n}/"));
    }
    jail.apply(&mut cmd);
    Some(cmd.output().unwrap())
}

fn root_dir(tag: &str) -> Dir {
    use std::os::unix::fs::PermissionsExt;
    let d = std::env::temp_dir().join(format!("warden-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
    Dir(d)
}

#[test]
fn a_jailed_helper_never_sets_a_set_user_id_or_set_group_id_bit() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    if !warden_jail::host::is_root() {
        eprintln!("skipped: needs root (the helper's share must be nobody's)");
        return;
    }
    let dir = root_dir("helper-setid");
    std::os::unix::fs::chown(&dir.0, Some(65534), Some(65534)).unwrap();
    let d = dir.0.display();
    let Some(out) = in_fsd_jail(
        &dir.0,
        None,
        &format!(
            "cd {d} && touch suid sgid plain && \
             chmod 4755 suid; chmod 2755 sgid; chmod 0700 plain && echo PLAIN-DONE"
        ),
    ) else {
        return;
    };
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("PLAIN-DONE"),
        "{said} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mode = |n: &str| std::fs::metadata(dir.0.join(n)).unwrap().mode() & 0o7777;
    assert_eq!(mode("plain"), 0o700);
    for f in ["suid", "sgid"] {
        assert_eq!(mode(f) & 0o6000, 0, "{f} got a set-ID bit");
    }
    let _ = std::fs::set_permissions(&dir.0, std::fs::Permissions::from_mode(0o755));
}

#[test]
fn a_helper_serves_a_root_owned_share_through_its_view_and_nothing_of_roots_beside_it() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    if !warden_jail::host::is_root() {
        eprintln!("skipped: needs root (the share must be root's)");
        return;
    }
    let outer = root_dir("helper-view");
    let share = outer.0.join("share");
    std::fs::create_dir(&share).unwrap();
    std::fs::set_permissions(&share, std::fs::Permissions::from_mode(0o755)).unwrap();
    let secret = format!("helper-view-secret-{}", std::process::id());
    for (f, at) in [("inside", &share), ("beside", &outer.0)] {
        std::fs::write(at.join(f), &secret).unwrap();
        std::fs::set_permissions(at.join(f), std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    // In the view where it has one, else in the share itself.
    let script = format!(
        "cd \"${{VIEW:-{s}}}\" || exit 1; \
         cat inside && echo; cat {o}/beside; echo made > made && echo MADE; \
         echo made > {o}/made-beside; id -u",
        s = share.display(),
        o = outer.0.display()
    );
    // Without the view, root's share is nobody's to read or write.
    let plain = script.clone();
    let Some(out) = in_fsd_jail(&share, None, &plain) else {
        return;
    };
    let said = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        !said.contains(&secret) && !said.contains("MADE"),
        "nobody used root's share without the view: {said}"
    );
    let swap = warden_jail::identity::SwapMap::new((0, 0), (65534, 65534)).unwrap();
    let view = warden_jail::identity::idmapped_view(&share, &swap).unwrap();
    let out = in_fsd_jail(&share, Some(view), &script).unwrap();
    let said = String::from_utf8_lossy(&out.stdout).to_string();
    let lines: Vec<&str> = said.lines().collect();
    assert_eq!(
        lines.first().copied(),
        Some(secret.as_str()),
        "{said} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(said.contains("MADE"), "{said}");
    assert_eq!(lines.last().copied(), Some("65534"), "{said}");
    assert_eq!(
        said.matches(&secret).count(),
        1,
        "a root-only file beside the share was read: {said}"
    );
    let m = std::fs::metadata(share.join("made")).unwrap();
    assert_eq!((m.uid(), m.gid()), (0, 0), "what it made is not root's");
    assert!(!outer.0.join("made-beside").exists());
    // The view was the helper's own: the host's share is as it was.
    let m = std::fs::metadata(&share).unwrap();
    assert_eq!((m.uid(), m.gid()), (0, 0));
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(!mounts.contains(share.to_str().unwrap()), "{mounts}");
}
