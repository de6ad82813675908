//! The sandbox's own file systems, made new for each sandbox: a fresh
//! `/proc` for its PID namespace, a minimal `/dev` (a few harmless device
//! nodes, a private and capped devpts, a size-capped `/dev/shm`), a
//! size-capped `/tmp` and, if asked, a tmpfs home.
//!
//! It never binds anything of the host but the device nodes listed in
//! [`DEVICES`].

use super::inside::{Kind, Root};
use super::ops::{mount_on, set_attr_inside};
use super::{MountError, RootPlan, OLDROOT};
use crate::sys;
use nix::mount::{mount, MsFlags};
use std::ffi::OsStr;
use std::os::unix::fs::{symlink, DirBuilderExt};
use std::path::Path;

/// Device nodes bound from the host into the sandbox's `/dev`.
const DEVICES: &[&str] = &["null", "zero", "full", "random", "urandom", "tty"];

/// The sandbox's own file systems: a fresh /proc, /dev, /tmp and, if
/// asked, a tmpfs home.
pub(super) fn mount_fresh(root: &Root, plan: &RootPlan) -> Result<(), MountError> {
    // A fresh /proc for the sandbox's own PID namespace. It must be mounted
    // while the host's /proc is still visible (the kernel refuses a new proc
    // mount in a user namespace otherwise).
    mount_on(
        Some("proc"),
        &root.make(Path::new("/proc"), Kind::Dir)?,
        Some("proc"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        None,
        "a fresh /proc",
    )?;
    build_dev(root, plan.tmp_size)?;
    let tmp_opts = format!("size={},mode=1777", plan.tmp_size);
    mount_on(
        Some("tmpfs"),
        &root.make(Path::new("/tmp"), Kind::Dir)?,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some(&tmp_opts),
        "the sandbox's /tmp",
    )?;

    if plan.home_tmpfs {
        // Owner-only and the size of /tmp: what tools write to HOME
        // (history, global configuration, logs) stays in the sandbox.
        mount_on(
            Some("tmpfs"),
            &root.make(&plan.home, Kind::Dir)?,
            Some("tmpfs"),
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
            Some(&format!("size={},mode=0700", plan.tmp_size)),
            "the sandbox's home",
        )?;
    }
    Ok(())
}

/// The sandbox's devpts: private, and at most `max` terminals at once.
const PTS_OPTIONS: &str = "newinstance,ptmxmode=0666,mode=0620,max=64";

/// A minimal `/dev`: the harmless character devices bound from the host, a
/// private devpts instance, a size-capped `/dev/shm`, and the usual links.
fn build_dev(root: &Root, tmp_size: u64) -> Result<(), MountError> {
    mount_on(
        Some("tmpfs"),
        &root.make(Path::new("/dev"), Kind::Dir)?,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC,
        Some("size=64k,mode=0755"),
        "the sandbox's /dev",
    )?;
    // Below here the tmpfs just made, entered through its own descriptor:
    // its names are warden's own, reached relative to it rather than each
    // through the descriptor's magic link in /proc (a walk of /proc for
    // every node costs more than the node).
    let top = root.again(Path::new("/dev"))?;
    rustix::process::fchdir(top.fd()).map_err(|e| MountError::MountPoint {
        path: top.inside.clone(),
        source: e.into(),
    })?;
    let filled = fill_dev(tmp_size);
    // Back to the scratch root, whatever happened: every other path of
    // the assembly is absolute, and nothing should run from inside /dev.
    let back = std::env::set_current_dir("/").map_err(|source| MountError::MountPoint {
        path: "/".into(),
        source,
    });
    filled?;
    back?;
    // Nothing can be created in /dev itself afterwards.
    set_attr_inside(root, Path::new("/dev"), sys::MOUNT_ATTR_RDONLY, false)
}

/// The contents of the sandbox's `/dev`, made in the working directory
/// (its fresh tmpfs, entered by [`build_dev`]); errors name the places as
/// the sandbox sees them.
fn fill_dev(tmp_size: u64) -> Result<(), MountError> {
    let inside = |name: &str| Path::new("/dev").join(name);
    let mount_here = |src: &str, name: &str, fstype, flags, data, what: &str| {
        mount(Some(src), name, fstype, flags, data).map_err(|source| MountError::Mount {
            what: what.to_string(),
            target: inside(name),
            source,
        })
    };
    let mkdir = |name: &str| {
        std::fs::DirBuilder::new()
            .mode(0o755)
            .create(name)
            .map_err(|source| MountError::MountPoint {
                path: inside(name),
                source,
            })
    };
    for name in DEVICES {
        let src = Path::new(OLDROOT).join("dev").join(name);
        if !src.exists() {
            continue;
        }
        std::fs::File::create(name).map_err(|source| MountError::MountPoint {
            path: inside(name),
            source,
        })?;
        // A device node cannot be executed or carry setuid bits; the bind
        // needs no further flags.
        mount_here(
            &src.to_string_lossy(),
            name,
            None,
            MsFlags::MS_BIND,
            None,
            "a device node",
        )?;
    }
    mkdir("pts")?;
    mount_here(
        "devpts",
        "pts",
        Some("devpts"),
        MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC,
        // `max`: terminals come from one pool for every devpts instance
        // but the host's own (kernel.pty.max less kernel.pty.reserve, 3072
        // by default); without a cap, one sandbox could take them all and
        // leave other sandboxes and containers without a terminal.
        Some(PTS_OPTIONS),
        "a private devpts",
    )?;
    mkdir("shm")?;
    let shm_opts = format!("size={tmp_size},mode=1777");
    mount_here(
        "tmpfs",
        "shm",
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some(&shm_opts),
        "the sandbox's /dev/shm",
    )?;
    let links: [(&str, &str); 5] = [
        ("ptmx", "pts/ptmx"),
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ];
    for (name, target) in links {
        symlink(OsStr::new(target), name).map_err(|source| MountError::Create {
            path: inside(name),
            source,
        })?;
    }
    Ok(())
}
