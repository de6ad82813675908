//! The guest's file tree, its channel and its restrictions, in that order.

use super::params::{attach_shares, params, parse_params, releasable, Params, NINE};
use super::{fs_err, mount_fs, GuestError};
use crate::wire::{Ready, PORT_NAME};
use nix::mount::{mount, umount2, MntFlags, MsFlags};
use nix::sys::stat::{makedev, mknod, Mode, SFlag};
use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use warden_jail::privileges::{self, Rlimits};

/// Load the modules of the initramfs, in their order (a module the kernel
/// already has is fine).
fn load_modules() -> Result<(), GuestError> {
    let mut mods: Vec<PathBuf> = std::fs::read_dir("/modules")
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    mods.sort();
    for m in mods {
        let path = m.display().to_string();
        let f = File::open(&m).map_err(|e| GuestError::Module {
            path: path.clone(),
            source: nix::errno::Errno::from_raw(e.raw_os_error().unwrap_or(libc_eio())),
        })?;
        match nix::kmod::finit_module(&f, c"", nix::kmod::ModuleInitFlags::empty()) {
            Ok(()) | Err(nix::errno::Errno::EEXIST) => {}
            Err(source) => return Err(GuestError::Module { path, source }),
        }
        let _ = std::fs::remove_file(&m);
    }
    Ok(())
}

fn libc_eio() -> i32 {
    nix::errno::Errno::EIO as i32
}

/// The device node of the port named `name`, once the driver has probed it.
fn find_port(name: &'static str) -> Result<PathBuf, GuestError> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        for e in std::fs::read_dir("/sys/class/virtio-ports")
            .into_iter()
            .flatten()
            .flatten()
        {
            let n = std::fs::read_to_string(e.path().join("name")).unwrap_or_default();
            if n.trim() == name {
                let dev = Path::new("/dev").join(e.file_name());
                if dev.exists() {
                    return Ok(dev);
                }
            }
        }
        if Instant::now() > deadline {
            return Err(GuestError::NoPort(name));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A fresh `/dev` with only what programs need: not the guest's devtmpfs,
/// which shows the channel's device.
fn minimal_dev() -> Result<(), GuestError> {
    umount2("/dev", MntFlags::MNT_DETACH).map_err(fs_err("unmount", "/dev"))?;
    mount_fs(
        "tmpfs",
        "/dev",
        "tmpfs",
        MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC,
        "mode=755,size=64k",
    )?;
    for (name, major, minor) in [
        ("null", 1, 3),
        ("zero", 1, 5),
        ("full", 1, 7),
        ("random", 1, 8),
        ("urandom", 1, 9),
        ("tty", 5, 0),
    ] {
        let p = format!("/dev/{name}");
        mknod(
            p.as_str(),
            SFlag::S_IFCHR,
            Mode::from_bits_truncate(0o666),
            makedev(major, minor),
        )
        .map_err(fs_err("create", "/dev"))?;
        // mknod applies the umask: every process of the sandbox, whatever
        // its IDs, reads and writes these.
        std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o666)).map_err(
            |e| GuestError::Fs {
                what: "set the mode of",
                path: p.clone(),
                source: nix::errno::Errno::from_raw(e.raw_os_error().unwrap_or(libc_eio())),
            },
        )?;
    }
    mount_fs(
        "devpts",
        "/dev/pts",
        "devpts",
        MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC,
        "newinstance,ptmxmode=0666,mode=620",
    )?;
    let _ = std::os::unix::fs::symlink("pts/ptmx", "/dev/ptmx");
    let _ = std::os::unix::fs::symlink("/proc/self/fd", "/dev/fd");
    mount_fs(
        "tmpfs",
        "/dev/shm",
        "tmpfs",
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        "mode=1777,size=64m",
    )?;
    Ok(())
}

/// The guest's loopback, and with a network device its address, its one
/// route (through the TAP's end in the sandbox's network namespace, where
/// the egress proxy takes every connection) and its resolver (the proxy's
/// DNS responder there).
fn network(p: &Params) -> Result<(), GuestError> {
    use warden_jail::vmnet::{GATEWAY, GUEST_ADDR, NETMASK};
    warden_jail::netns::bring_loopback_up()?;
    if !p.net {
        return Ok(());
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    let name = loop {
        let found = std::fs::read_dir("/sys/class/net")
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().to_string())
            .find(|n| n != "lo");
        if let Some(n) = found {
            break n;
        }
        if Instant::now() > deadline {
            return Err(GuestError::NoNetworkDevice);
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    warden_jail::netns::configure_interface(&name, GUEST_ADDR, NETMASK)?;
    warden_jail::netns::add_default_route(GATEWAY)?;
    let content = format!("nameserver {GATEWAY}\n");
    let write = |path: &str| {
        std::fs::write(path, &content).map_err(|e| GuestError::Fs {
            what: "write",
            path: path.into(),
            source: nix::errno::Errno::from_raw(e.raw_os_error().unwrap_or(libc_eio())),
        })
    };
    if !p.rootfs {
        return write("/etc/resolv.conf");
    }
    // A --rootfs tree's /etc is read-only: the resolver's file is staged
    // in /run and bound over the tree's, when it has one.
    write("/run/resolv.conf")?;
    if Path::new("/etc/resolv.conf").is_file() {
        mount(
            Some("/run/resolv.conf"),
            "/etc/resolv.conf",
            None::<&str>,
            MsFlags::MS_BIND,
            None::<&str>,
        )
        .map_err(fs_err("bind the resolver over", "/etc/resolv.conf"))?;
    }
    Ok(())
}

/// Build everything; the channel (when it was opened) comes back with an
/// error so that the host hears why.
pub(super) fn prepare() -> Result<(File, Ready, Held), (Option<File>, GuestError)> {
    let nosuid = MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
    let early = || -> Result<Params, GuestError> {
        mount_fs(
            "devtmpfs",
            "/dev",
            "devtmpfs",
            MsFlags::MS_NOSUID,
            "mode=755",
        )?;
        mount_fs("proc", "/proc", "proc", nosuid | MsFlags::MS_NOEXEC, "")?;
        mount_fs("sysfs", "/sys", "sysfs", nosuid | MsFlags::MS_NOEXEC, "")?;
        load_modules()?;
        Ok(params())
    };
    let p = early().map_err(|e| (None, e))?;
    let port_path = find_port(PORT_NAME).map_err(|e| (None, e))?;
    let port = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&port_path)
        .map_err(|source| {
            (
                None,
                GuestError::Channel {
                    path: port_path.display().to_string(),
                    source,
                },
            )
        })?;
    let fail = |e: GuestError| (port.try_clone().ok(), e);
    let p = if p.template {
        park(&port).map_err(fail)?
    } else {
        p
    };
    let (ready, held) = finish(&p).map_err(fail)?;
    Ok((port, ready, held))
}

/// The template's point: say so, and wait (the host snapshots the guest
/// here, and each restored copy goes on from here) for the sandbox's own
/// settings; then make this copy's randomness its own and its clock the
/// host's before anything reads either.
fn park(port: &File) -> Result<Params, GuestError> {
    use crate::wire::{Attach, Frame, Kind};
    let channel_err = |source: std::io::Error| GuestError::Channel {
        path: PORT_NAME.into(),
        source,
    };
    let mut w = port.try_clone().map_err(channel_err)?;
    Frame::new(Kind::Parked, 0, Vec::new())
        .write_to(&mut w)
        .map_err(|e| channel_err(std::io::Error::other(e)))?;
    let mut r = port.try_clone().map_err(channel_err)?;
    let attach = loop {
        match Frame::read_from(&mut r) {
            Ok(Some(f)) if f.kind == Kind::Attach => {
                break f
                    .parse::<Attach>()
                    .map_err(|e| channel_err(std::io::Error::other(e)))?
            }
            Ok(Some(_)) => {}
            Ok(None) => {
                return Err(channel_err(std::io::ErrorKind::UnexpectedEof.into()));
            }
            Err(e) => return Err(channel_err(std::io::Error::other(e))),
        }
    };
    if attach.seed.len() < 32 {
        return Err(GuestError::Reseed(nix::errno::Errno::EINVAL));
    }
    super::entropy::reseed(&attach.seed).map_err(GuestError::Reseed)?;
    super::entropy::set_clock(attach.clock.0, attach.clock.1).map_err(GuestError::Clock)?;
    Ok(parse_params(attach.params.iter().map(String::as_str)))
}

/// What the init keeps beyond its channel when the guest can be paused to
/// disk: the keeper of its shares, and the rules every process it starts
/// is restricted by (see [`super::launch`]).
#[derive(Default)]
pub(super) struct Held {
    pub keeper: Option<super::keeper::Keeper>,
    pub launch: Option<super::launch::Launch>,
}

fn finish(p: &Params) -> Result<(Ready, Held), GuestError> {
    let nosuid = MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
    let nine = NINE;
    // Before the root tree covers the init's libraries (see `launch`).
    let kit = if releasable(p) {
        Some(super::launch::stage()?)
    } else {
        None
    };
    if p.rootfs {
        super::shares::adopt_rootfs(nine, p.root_image.as_deref())?;
    } else {
        mount_fs(
            "usr",
            "/usr",
            "9p",
            nosuid | MsFlags::MS_RDONLY,
            &format!("{nine},cache=loose"),
        )?;
    }
    let tmp = p.tmp.unwrap_or(256 << 20);
    mount_fs(
        "tmpfs",
        "/tmp",
        "tmpfs",
        nosuid,
        &format!("mode=1777,size={tmp}"),
    )?;
    let bind_writable = attach_shares(p)?;
    network(p)?;
    minimal_dev()?;
    umount2("/sys", MntFlags::MNT_DETACH).map_err(fs_err("unmount", "/sys"))?;
    let _ = std::fs::remove_dir("/modules");
    let _ = std::fs::remove_file("/init");
    if let Some(h) = &p.hostname {
        let _ = nix::unistd::sethostname(h);
    }
    // The workspace owner's IDs, as the process backend gives them (9p and
    // virtio-fs show the host's owner); nobody without a workspace.
    let (uid, gid) = match std::fs::metadata("/workspace") {
        Ok(m) if p.workspace => (m.uid(), m.gid()),
        _ => (65534, 65534),
    };
    let home = "/root";
    mount_fs(
        "tmpfs",
        home,
        "tmpfs",
        nosuid,
        &format!("mode=700,uid={uid},gid={gid},size=64m"),
    )?;
    let release = nix::sys::utsname::uname()
        .map(|u| u.release().to_string_lossy().to_string())
        .unwrap_or_default();
    // The keeper is forked here, with the init's privileges and before any
    // thread or process of the sandbox exists (see `keeper`).
    let mut held = Held::default();
    if releasable(p) {
        held.keeper = Some(super::keeper::start(p)?);
    }
    let mut layers = vec!["rlimits".to_string()];
    privileges::lock_bounding_set(false)?;
    privileges::set_ids(uid, gid)?;
    privileges::apply_rlimits(&Rlimits {
        open_files: p.nofile.unwrap_or(1024),
        file_size: p.fsize,
        nproc: p.nproc,
        data: None,
        sigpending: None,
        msgqueue: None,
        memlock: None,
    })?;
    let writable: Vec<PathBuf> = ["/workspace", "/tmp", "/dev/shm", home]
        .iter()
        .map(PathBuf::from)
        .chain(bind_writable)
        .filter(|p| p.exists())
        .collect();
    let weak = |layer: &str| p.weaken.iter().any(|w| w == layer);
    if let (false, Some(kit)) = (weak("landlock"), kit) {
        // A guest that can be paused to disk mounts its workspace again
        // after a resume, as a new inode, and Landlock's rules hold
        // inodes: the init takes no Landlock domain (one naming the
        // workspace's first mount would deny every later process writes
        // into the second); each process it starts takes one, naming the
        // workspace mounted then, before it executes anything.
        // What a launcher will get, learnt on a thread of its own: a
        // Landlock domain is a thread's, and the thread ends with it.
        let probe = std::thread::scope(|s| {
            s.spawn(|| warden_jail::landlock::restrict(&[PathBuf::from("/")], &writable, true))
                .join()
        });
        match probe {
            Ok(Ok(warden_jail::landlock::Enforcement::None)) => {}
            Ok(Ok(_)) => layers.push("landlock".into()),
            Ok(Err(e)) => return Err(e.into()),
            Err(_) => return Err(GuestError::Keeper(nix::errno::Errno::EIO)),
        }
        held.launch = Some(super::launch::Launch::new(kit, writable));
    } else if !weak("landlock") {
        match warden_jail::landlock::restrict(&[PathBuf::from("/")], &writable, true)? {
            warden_jail::landlock::Enforcement::None => {}
            _ => layers.push("landlock".into()),
        }
    }
    privileges::finish_drop(false)?;
    layers.push("no capabilities".into());
    if !weak("seccomp") {
        warden_jail::seccomp::install()?;
        layers.push("seccomp".into());
    }
    Ok((
        Ready {
            kernel: release,
            layers,
        },
        held,
    ))
}
