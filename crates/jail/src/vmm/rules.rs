//! The Landlock ruleset and the seccomp program the helper is confined by
//! on top of its namespaces.

use landlock::{
    Access, AccessFs, AccessNet, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset,
    RulesetAttr, RulesetCreatedAttr, Scope, ABI,
};
use libseccomp::{ScmpAction, ScmpArgCompare, ScmpCompareOp, ScmpFilterContext, ScmpSyscall};
use std::io::{Read, Seek};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use super::{VmmAccess, VmmJailError};

/// The newest Landlock ABI whose rights are used.
const ABI_TARGET: ABI = ABI::V6;

/// The VMM's Landlock ruleset, created (not yet enforced). Refused when the
/// kernel has no Landlock at all: a VMM the kernel cannot confine to its
/// files is not started. Newer rights (TCP, scopes) are used where the
/// kernel has them; without them the network namespace and the seccomp
/// filter still hold.
pub(crate) fn ruleset(access: &VmmAccess) -> Result<OwnedFd, VmmJailError> {
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
        .chain(super::DEVICES.map(Path::new))
    {
        if p.exists() {
            add(p, device, device)?;
        }
    }
    // What it is handed as descriptors, opened once through no link and
    // checked: the rule is on that very file, whatever its path holds by
    // now (a link swapped into an earlier component of a share's path
    // after its check gives the helper no right on where it points).
    let mut add_fd = |fd: &OwnedFd, dir_access, file_access| -> Result<(), VmmJailError> {
        let is_dir = nix::sys::stat::fstat(fd.as_fd())
            .is_ok_and(|st| st.st_mode & libc::S_IFMT == libc::S_IFDIR);
        let access = if is_dir { dir_access } else { file_access };
        ruleset
            .as_mut()
            .add_rule(PathBeneath::new(fd.as_fd(), access))
            .map(drop)
            .map_err(|source| VmmJailError::Rule {
                path: PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd())),
                source,
            })
    };
    for p in &access.placed {
        if p.writable {
            add_fd(&p.source, all, rw_file)?;
        } else {
            add_fd(&p.source, read, read_file)?;
        }
    }
    for dir in &access.readable_dirs {
        add_fd(dir, read, read_file)?;
    }
    for dir in &access.writable_dirs {
        add_fd(dir, all, rw_file)?;
    }
    Option::<OwnedFd>::from(ruleset).ok_or(VmmJailError::NoLandlock)
}

/// The calls that set a file's mode, with the index of their mode
/// argument: a helper's (the VMM's 9p server, virtiofsd) with a
/// set-user-ID or set-group-ID bit fails with `EPERM`, whatever its guest
/// asks. The guest's own seccomp filter refuses its processes those bits,
/// but a guest whose kernel is taken over asks the helper directly; a
/// set-user-ID file it made would be there for the host to run, and
/// through an idmapped view (`crate::identity`) a file the helper makes or
/// changes as nobody is root's on disk.
const SETID_MODE_CALLS: &[(&str, u32)] = &[
    ("chmod", 1),
    ("fchmod", 1),
    ("fchmodat", 2),
    ("fchmodat2", 2),
    ("open", 2),
    ("creat", 1),
    ("openat", 3),
    ("mknod", 1),
    ("mknodat", 2),
];

/// The calls that only set a file's mode, with the index of their mode
/// argument: for a helper serving a view that swaps the share's owner with
/// its own user ([`crate::identity::SwapMap`]: the share is root's or a
/// system account's and it runs as nobody), a mode with group or other
/// write fails with `EPERM` too. Through the swap the helper is the
/// files' owner, and an owner may `chmod`; the share was lent for
/// writing, not for handing root's file or directory to every local user.
/// Creating calls are not listed: a new file's mode is the guest's own
/// file's, made in a share it writes anyway.
const CHMOD_CALLS: &[(&str, u32)] = &[
    ("chmod", 1),
    ("fchmod", 1),
    ("fchmodat", 2),
    ("fchmodat2", 2),
];

/// Mode bits a helper serving a swapped view may never set with
/// [`CHMOD_CALLS`]: group and other write.
const SHARED_WRITE_BITS: [libc::mode_t; 2] = [libc::S_IWGRP, libc::S_IWOTH];

/// The calls that set an extended attribute. seccomp cannot read the
/// attribute's name, so every one fails with `EPERM`: a
/// `security.capability` (a v3 one whose root ID resolves, through an
/// idmapped view, to the host's root) would be a file capability the host
/// honours, a `trusted.*` or `security.*` one steers other parts of the
/// kernel. Neither helper needs one: virtiofsd runs without xattrs (its
/// default, `no_xattr`) and QEMU's 9p server with `security_model=none`
/// would pass only `user.*` ones. Where the helper's calls are judged
/// (`VmmJail::judge_modes`), they go to the judge instead, which makes
/// `user.*` ones and refuses `security.*` and `trusted.*` ones
/// (`crate::modes::attrs`): a guest's `setfattr -n user.x` on a share
/// works there.
const XATTR_WRITES: &[&str] = &["setxattr", "lsetxattr", "fsetxattr", "setxattrat"];

/// Numbers of calls a libseccomp may be too old to know by name (the
/// same on every architecture from 424 on).
const UNIFIED_NUMBERS: &[(&str, i32)] = &[("fchmodat2", 452), ("setxattrat", 463)];

/// A call by name, or by its unified number for a libseccomp too old to
/// know it.
fn syscall(name: &str) -> Result<ScmpSyscall, libseccomp::error::SeccompError> {
    ScmpSyscall::from_name(name).or_else(|err| {
        UNIFIED_NUMBERS
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, nr)| ScmpSyscall::from(*nr))
            .ok_or(err)
    })
}

/// The seccomp program stacked under QEMU's own (and virtiofsd's):
/// `socket(2)` fails with `EPERM` whatever the family, `io_uring_setup(2)`
/// with `ENOSYS`, `openat2(2)` with `ENOSYS` (its mode is in a struct the
/// filter cannot read; libc then falls back to `openat`, which is read), a
/// mode with a set-ID bit with `EPERM` ([`SETID_MODE_CALLS`]), every
/// extended attribute write with `EPERM` ([`XATTR_WRITES`]) unless
/// `judged` (the notifying filter loaded after this one sends each to the
/// supervisor's judge), and, when the helper serves `swapped` views, a
/// `chmod` adding group or other write with `EPERM` ([`CHMOD_CALLS`]).
pub(crate) fn filter(swapped: bool, judged: bool) -> Result<Vec<libc::sock_filter>, VmmJailError> {
    let e = |e: libseccomp::error::SeccompError| VmmJailError::Seccomp(e.to_string());
    let mut f = ScmpFilterContext::new(ScmpAction::Allow).map_err(e)?;
    for (name, errno) in [
        ("socket", libc::EPERM),
        ("io_uring_setup", libc::ENOSYS),
        ("openat2", libc::ENOSYS),
    ] {
        f.add_rule(ScmpAction::Errno(errno), syscall(name).map_err(e)?)
            .map_err(e)?;
    }
    for name in XATTR_WRITES.iter().filter(|_| !judged) {
        f.add_rule(ScmpAction::Errno(libc::EPERM), syscall(name).map_err(e)?)
            .map_err(e)?;
    }
    let mut masked: Vec<(&str, u32, u64)> = Vec::new();
    for (name, arg) in SETID_MODE_CALLS {
        for bit in [libc::S_ISUID, libc::S_ISGID] {
            masked.push((name, *arg, u64::from(bit)));
        }
    }
    if swapped {
        for (name, arg) in CHMOD_CALLS {
            for bit in SHARED_WRITE_BITS {
                masked.push((name, *arg, u64::from(bit)));
            }
        }
    }
    for (name, arg, bit) in masked {
        let when = ScmpArgCompare::new(arg, ScmpCompareOp::MaskedEqual(bit), bit);
        f.add_rule_conditional(
            ScmpAction::Errno(libc::EPERM),
            syscall(name).map_err(e)?,
            &[when],
        )
        .map_err(e)?;
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
    crate::sys::sock_filters(&program)
        .ok_or_else(|| VmmJailError::Seccomp("libseccomp exported an empty or torn program".into()))
}
