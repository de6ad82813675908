//! The VMM's own jail: what a VM sandbox's QEMU runs under, so that code
//! that escapes into it (through its 9p server or its virtio devices)
//! reaches no more of the host than the sandbox itself could.
//!
//! Everything is prepared in the parent (the Landlock ruleset, the seccomp
//! program, the ID maps) and applied between fork and exec with plain
//! system calls only (the parent may have threads: nothing there may
//! allocate), in this order:
//!
//! 1. a network namespace: the sandbox's own (entered through the user
//!    namespace that owns it when warden is not root), or an empty one of
//!    the VMM's own (with a user namespace mapping only warden's user and
//!    group to themselves when warden is not root);
//! 2. as root, no root: the bounding, inheritable and ambient capability
//!    sets emptied, root's exec-time powers switched off for good
//!    (`SECBIT_NOROOT`, locked), then the given user and group (the
//!    workspace owner's: the 9p server then serves the workspace as its
//!    owner has it), with no supplementary group but the one that may
//!    open `/dev/kvm` under KVM;
//! 3. `no_new_privs`;
//! 4. Landlock: read (and execute) beneath the VMM's own files and what it
//!    serves read-only, write only beneath what it serves read-write, the
//!    few devices it uses, no TCP at all, and (where the kernel can) no
//!    signal to and no abstract Unix socket of anything outside;
//! 5. a seccomp filter of warden's own under QEMU's: no `socket(2)` of any
//!    family and no `io_uring` (which could open one), so the VMM has only
//!    the descriptors it was handed: the channel, the TAP, its files.

use landlock::{
    Access, AccessFs, AccessNet, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset,
    RulesetAttr, RulesetCreatedAttr, Scope, ABI,
};
use libseccomp::{ScmpAction, ScmpFilterContext, ScmpSyscall};
use std::io::{Read, Seek};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};

/// The newest Landlock ABI whose rights are used.
const ABI_TARGET: ABI = ABI::V6;

/// `NS_GET_USERNS`: the user namespace that owns a namespace, as a new
/// descriptor (`_IO(0xb7, 0x1)`).
const NS_GET_USERNS: libc::c_ulong = 0xb701;

/// Why the VMM's jail could not be prepared.
#[derive(Debug, thiserror::Error)]
pub enum VmmJailError {
    #[error("cannot build the VMM's Landlock ruleset")]
    Ruleset(#[source] landlock::RulesetError),
    #[error("cannot open {path} for the VMM's Landlock rules")]
    Path {
        path: PathBuf,
        #[source]
        source: landlock::PathFdError,
    },
    #[error("cannot add the VMM's Landlock rule for {path}")]
    Rule {
        path: PathBuf,
        #[source]
        source: landlock::RulesetError,
    },
    #[error("this kernel has no Landlock, so the VMM cannot be confined to the files it serves: use Linux 5.13 or later with Landlock enabled (`lsm=` on the kernel command line), or the process backend")]
    NoLandlock,
    #[error("cannot build the VMM's seccomp filter: {0}")]
    Seccomp(String),
    #[error("cannot find the user namespace that owns the VM's network namespace")]
    Owner(#[source] nix::errno::Errno),
}

/// What the VMM may touch.
#[derive(Debug, Clone, Default)]
pub struct VmmAccess {
    /// Directories and files it reads (and may execute): its binary, its
    /// libraries and firmware, the kernel and initramfs, the read-only
    /// shares.
    pub readable: Vec<PathBuf>,
    /// Directories it reads and writes beneath: the read-write shares.
    pub writable: Vec<PathBuf>,
    /// Devices it opens read-write (`/dev/kvm` under KVM).
    pub devices: Vec<PathBuf>,
}

/// Where the VMM's network namespace comes from.
enum Net {
    /// Enter this one (the sandbox's), first entering the user namespace
    /// that owns it when there is one to enter.
    Enter { user: Option<OwnedFd>, net: RawFd },
    /// A new, empty one; rootless, inside a new user namespace whose maps
    /// are these lines (`setgroups`, `uid_map`, `gid_map`).
    Fresh { maps: Option<[Vec<u8>; 3]> },
}

/// The VMM's jail, prepared: apply it to the VMM's `Command` with
/// [`VmmJail::apply`] and keep it alive until the VMM has been spawned.
pub struct VmmJail {
    net: Net,
    ids: Option<(u32, u32)>,
    groups: Vec<libc::gid_t>,
    ruleset: OwnedFd,
    filter: Vec<libc::sock_filter>,
    last_cap: u32,
}

impl VmmJail {
    /// Prepare the jail. `netns`: the sandbox's network namespace, when the
    /// VM has a network (else the VMM gets an empty one). `ids`: as root,
    /// the user and group the VMM runs as (never root's powers, whatever
    /// they are).
    pub fn prepare(
        access: &VmmAccess,
        netns: Option<&OwnedFd>,
        ids: Option<(u32, u32)>,
    ) -> Result<VmmJail, VmmJailError> {
        // The devices it opens by name (`/dev/kvm`) may be its group's
        // only: that group, and no other, is kept as a supplementary one.
        let mut groups: Vec<libc::gid_t> = ids.map(|(_, g)| g).into_iter().collect();
        for d in &access.devices {
            use std::os::unix::fs::MetadataExt;
            if let Ok(m) = std::fs::metadata(d) {
                if m.mode() & 0o060 == 0o060 && !groups.contains(&m.gid()) && m.gid() != 0 {
                    groups.push(m.gid());
                }
            }
        }
        let root = crate::host::is_root();
        let net = match netns {
            Some(ns) => Net::Enter {
                user: if root { None } else { Some(owner_of(ns)?) },
                net: ns.as_raw_fd(),
            },
            None if root => Net::Fresh { maps: None },
            None => {
                let (uid, gid) = (
                    nix::unistd::getuid().as_raw(),
                    nix::unistd::getgid().as_raw(),
                );
                Net::Fresh {
                    maps: Some([
                        b"deny".to_vec(),
                        format!("{uid} {uid} 1\n").into_bytes(),
                        format!("{gid} {gid} 1\n").into_bytes(),
                    ]),
                }
            }
        };
        let last_cap = std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
            .ok()
            .and_then(|s| s.trim().parse::<u32>().ok())
            .unwrap_or(63);
        Ok(VmmJail {
            net,
            ids: if root { ids } else { None },
            groups,
            ruleset: ruleset(access)?,
            filter: filter()?,
            last_cap,
        })
    }

    /// Have `cmd`'s program (the VMM) start inside the jail. Registered
    /// after any `pre_exec` that needs the parent's powers.
    pub fn apply(&self, cmd: &mut std::process::Command) {
        use std::os::unix::process::CommandExt;
        let (enter_user, enter_net) = match &self.net {
            Net::Enter { user, net } => (user.as_ref().map(AsRawFd::as_raw_fd), Some(*net)),
            Net::Fresh { .. } => (None, None),
        };
        let maps = match &self.net {
            Net::Fresh { maps: Some(m) } => Some(m.clone()),
            _ => None,
        };
        let fresh_root = matches!(self.net, Net::Fresh { maps: None });
        let ids = self.ids;
        let groups = self.groups.clone();
        let ruleset = self.ruleset.as_raw_fd();
        let filter = self.filter.clone();
        let last_cap = self.last_cap;
        // A debug build's test may switch Landlock off, to see what the
        // other layers hold alone.
        let landlock = !crate::Weakened::from_env().landlock;
        // SAFETY: the closure runs in the child between fork and exec. It
        // calls only async-signal-safe system calls (setns, unshare, open,
        // write, close, prctl, capset, setgroups, setres[ug]id,
        // landlock_restrict_self, seccomp) on descriptors the child has
        // (copies of the parent's table) and on memory the closure owns,
        // prepared before the fork; it allocates nothing.
        unsafe {
            cmd.pre_exec(move || {
                let check = |rc: libc::c_long| -> std::io::Result<()> {
                    if rc < 0 {
                        Err(std::io::Error::last_os_error())
                    } else {
                        Ok(())
                    }
                };
                if let Some(user) = enter_user {
                    check(libc::setns(user, libc::CLONE_NEWUSER).into())?;
                }
                if let Some(net) = enter_net {
                    check(libc::setns(net, libc::CLONE_NEWNET).into())?;
                }
                if fresh_root {
                    check(libc::unshare(libc::CLONE_NEWNET).into())?;
                }
                if let Some(maps) = &maps {
                    check(libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNET).into())?;
                    let files: [&[u8]; 3] = [
                        b"/proc/self/setgroups\0",
                        b"/proc/self/uid_map\0",
                        b"/proc/self/gid_map\0",
                    ];
                    for (file, line) in files.iter().zip(maps.iter()) {
                        write_file(file, line)?;
                    }
                }
                drop_capabilities(last_cap)?;
                if let Some((uid, gid)) = ids {
                    check(libc::setgroups(groups.len(), groups.as_ptr()).into())?;
                    check(libc::setresgid(gid, gid, gid).into())?;
                    check(libc::setresuid(uid, uid, uid).into())?;
                }
                check(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0).into())?;
                if landlock {
                    check(libc::syscall(
                        libc::SYS_landlock_restrict_self,
                        ruleset,
                        0 as libc::c_uint,
                    ))?;
                }
                let prog = libc::sock_fprog {
                    len: filter.len() as libc::c_ushort,
                    filter: filter.as_ptr() as *mut libc::sock_filter,
                };
                const SECCOMP_SET_MODE_FILTER: libc::c_uint = 1;
                check(libc::syscall(
                    libc::SYS_seccomp,
                    SECCOMP_SET_MODE_FILTER,
                    0 as libc::c_uint,
                    &prog as *const libc::sock_fprog,
                ))?;
                Ok(())
            })
        };
    }
}

/// Write `line` to the NUL-terminated path `file`, in the child between
/// fork and exec.
fn write_file(file: &[u8], line: &[u8]) -> std::io::Result<()> {
    // SAFETY: `file` is NUL-terminated; open, write and close are
    // async-signal-safe and `line` outlives the write.
    unsafe {
        let fd = libc::open(file.as_ptr().cast(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let n = libc::write(fd, line.as_ptr().cast(), line.len());
        let e = std::io::Error::last_os_error();
        libc::close(fd);
        if n != line.len() as isize {
            return Err(e);
        }
    }
    Ok(())
}

/// Empty every capability set the VMM could get back at its exec: root's
/// implicit powers off for good (locked), the bounding set (so no file
/// grants any), the inheritable and ambient sets. The effective set stays
/// as it is until the ID change or the exec drops it.
fn drop_capabilities(last_cap: u32) -> std::io::Result<()> {
    const SECBIT_NOROOT: libc::c_ulong = 1 << 0;
    const SECBIT_NOROOT_LOCKED: libc::c_ulong = 1 << 1;
    const SECBIT_NO_CAP_AMBIENT_RAISE: libc::c_ulong = 1 << 6;
    const SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED: libc::c_ulong = 1 << 7;
    let err = || Err(std::io::Error::last_os_error());
    // SAFETY: prctl and capset with integer arguments and a header and data
    // array on this stack frame; async-signal-safe, no allocation.
    unsafe {
        let bits = SECBIT_NOROOT
            | SECBIT_NOROOT_LOCKED
            | SECBIT_NO_CAP_AMBIENT_RAISE
            | SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED;
        if libc::prctl(libc::PR_SET_SECUREBITS, bits, 0, 0, 0) < 0 {
            return err();
        }
        for cap in 0..=last_cap {
            if libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) < 0 {
                if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINVAL) {
                    break;
                }
                return err();
            }
        }
        if libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
            0,
            0,
            0,
        ) < 0
        {
            return err();
        }
        // capget/capset by their kernel structures (version 3: two words).
        let mut header = crate::privileges::CapHeader::v3();
        let mut data = [crate::privileges::CapData {
            effective: 0,
            permitted: 0,
            inheritable: 0,
        }; 2];
        if libc::syscall(
            libc::SYS_capget,
            std::ptr::addr_of_mut!(header),
            data.as_mut_ptr(),
        ) < 0
        {
            return err();
        }
        for d in data.iter_mut() {
            d.inheritable = 0;
        }
        if libc::syscall(
            libc::SYS_capset,
            std::ptr::addr_of_mut!(header),
            data.as_ptr(),
        ) < 0
        {
            return err();
        }
    }
    Ok(())
}

/// The user namespace owning `ns` (a rootless VM's network namespace).
fn owner_of(ns: &OwnedFd) -> Result<OwnedFd, VmmJailError> {
    use std::os::fd::FromRawFd;
    // SAFETY: NS_GET_USERNS takes no argument and returns a new descriptor
    // (close-on-exec) or -1; `ns` is open.
    let fd = unsafe { libc::ioctl(ns.as_raw_fd(), NS_GET_USERNS) };
    if fd < 0 {
        return Err(VmmJailError::Owner(nix::errno::Errno::last()));
    }
    // SAFETY: `fd` was just returned by the kernel and is owned by no one
    // else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The VMM's Landlock ruleset, created (not yet enforced). Refused when the
/// kernel has no Landlock at all: a VMM the kernel cannot confine to its
/// files is not started. Newer rights (TCP, scopes) are used where the
/// kernel has them; without them the network namespace and the seccomp
/// filter still hold.
fn ruleset(access: &VmmAccess) -> Result<OwnedFd, VmmJailError> {
    if crate::sys::landlock_abi().unwrap_or(0) < 1 {
        return Err(VmmJailError::NoLandlock);
    }
    let read = AccessFs::from_read(ABI_TARGET);
    let all = AccessFs::from_all(ABI_TARGET);
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(all)
        .map_err(VmmJailError::Ruleset)?
        .handle_access(AccessNet::from_all(ABI_TARGET))
        .map_err(VmmJailError::Ruleset)?
        .scope(Scope::from_all(ABI_TARGET))
        .map_err(VmmJailError::Ruleset)?
        .create()
        .map_err(VmmJailError::Ruleset)?;
    let mut add = |path: &Path, dir_access, file_access| -> Result<(), VmmJailError> {
        let is_dir = std::fs::metadata(path).is_ok_and(|m| m.is_dir());
        let fd = PathFd::new(path).map_err(|source| VmmJailError::Path {
            path: path.to_path_buf(),
            source,
        })?;
        let access = if is_dir { dir_access } else { file_access };
        ruleset
            .as_mut()
            .add_rule(PathBeneath::new(fd, access))
            .map(drop)
            .map_err(|source| VmmJailError::Rule {
                path: path.to_path_buf(),
                source,
            })
    };
    let read_file = AccessFs::ReadFile | AccessFs::Execute;
    let rw_file = AccessFs::from_file(ABI_TARGET);
    for p in &access.readable {
        add(p, read, read_file)?;
    }
    for p in &access.writable {
        add(p, all, rw_file)?;
    }
    let device = AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::IoctlDev;
    for p in access
        .devices
        .iter()
        .map(PathBuf::as_path)
        .chain(["/dev/null", "/dev/zero", "/dev/urandom"].map(Path::new))
    {
        if p.exists() {
            add(p, device, device)?;
        }
    }
    Option::<OwnedFd>::from(ruleset).ok_or(VmmJailError::NoLandlock)
}

/// The seccomp program stacked under QEMU's own: `socket(2)` fails with
/// `EPERM` whatever the family, `io_uring_setup(2)` with `ENOSYS`.
fn filter() -> Result<Vec<libc::sock_filter>, VmmJailError> {
    let e = |e: libseccomp::error::SeccompError| VmmJailError::Seccomp(e.to_string());
    let mut f = ScmpFilterContext::new(ScmpAction::Allow).map_err(e)?;
    for (name, errno) in [("socket", libc::EPERM), ("io_uring_setup", libc::ENOSYS)] {
        let call = ScmpSyscall::from_name(name).map_err(e)?;
        f.add_rule(ScmpAction::Errno(errno), call).map_err(e)?;
    }
    let file =
        nix::sys::memfd::memfd_create(c"warden-vmm-filter", nix::sys::memfd::MFdFlags::MFD_CLOEXEC)
            .map_err(|e| VmmJailError::Seccomp(e.to_string()))?;
    let mut file = std::fs::File::from(file);
    f.export_bpf(&file).map_err(e)?;
    let mut program = Vec::new();
    file.rewind()
        .and_then(|_| file.read_to_end(&mut program))
        .map_err(|e| VmmJailError::Seccomp(e.to_string()))?;
    if program.is_empty() || !program.len().is_multiple_of(8) {
        return Err(VmmJailError::Seccomp(
            "libseccomp exported an empty or torn program".into(),
        ));
    }
    Ok(program
        .chunks_exact(8)
        .map(|c| libc::sock_filter {
            code: u16::from_ne_bytes([c[0], c[1]]),
            jt: c[2],
            jf: c[3],
            k: u32::from_ne_bytes([c[4], c[5], c[6], c[7]]),
        })
        .collect())
}
