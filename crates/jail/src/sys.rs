//! Thin wrappers over the few syscalls that neither `nix` nor `libc` wrap:
//! `clone` with namespace flags, `pivot_root`, and the new mount API
//! (`open_tree`, `move_mount`, `mount_setattr`). Each returns `nix::Error`.

use nix::errno::Errno;
use std::ffi::CStr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

pub const OPEN_TREE_CLONE: libc::c_uint = 1;
pub const AT_RECURSIVE: libc::c_uint = 0x8000;
pub const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x4;
pub const MOUNT_ATTR_RDONLY: u64 = 0x1;
pub const MOUNT_ATTR_NOSUID: u64 = 0x2;
pub const MOUNT_ATTR_NODEV: u64 = 0x4;
pub const MOUNT_ATTR_NOEXEC: u64 = 0x8;
pub const MOUNT_ATTR_IDMAP: u64 = 0x0010_0000;

/// `struct mount_attr` of `<linux/mount.h>` (MOUNT_ATTR_SIZE_VER0).
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// The result of [`clone_process`], seen from each side.
pub enum Forked {
    Parent(nix::unistd::Pid),
    Child,
}

/// `clone(2)` without a new stack: like `fork`, but into the namespaces named
/// by `flags`, so that the child is PID 1 of its new PID namespace.
///
/// # Safety
/// The caller must be single-threaded: the child is a copy of the calling
/// thread only, and anything another thread held (a lock inside the
/// allocator, say) would stay held forever in the child.
pub unsafe fn clone_process(flags: libc::c_int) -> nix::Result<Forked> {
    // SAFETY: with a null stack, clone(2) behaves as fork(2) and the child
    // continues on a copy of this stack, which is sound for a single-threaded
    // caller (this function's contract). The argument order (flags, stack,
    // parent_tid, child_tid, tls) is the one of x86_64 and aarch64; the tid
    // pointers are unused because no CLONE_*TID flag is passed.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_clone,
            (flags | libc::SIGCHLD) as libc::c_ulong,
            std::ptr::null_mut::<libc::c_void>(),
            std::ptr::null_mut::<libc::c_int>(),
            std::ptr::null_mut::<libc::c_int>(),
            0 as libc::c_ulong,
        )
    };
    match rc {
        -1 => Err(Errno::last()),
        0 => Ok(Forked::Child),
        pid => Ok(Forked::Parent(nix::unistd::Pid::from_raw(
            pid as libc::pid_t,
        ))),
    }
}

/// The kernel's `struct clone_args` (version 2, with `cgroup`), for
/// `clone3(2)`.
#[repr(C)]
#[derive(Default)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
    set_tid: u64,
    set_tid_size: u64,
    cgroup: u64,
}

/// `CLONE_INTO_CGROUP` (Linux 5.7).
const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

/// [`clone_process`] through `clone3(2)`, the child born in the cgroup v2
/// directory `cgroup` (`CLONE_INTO_CGROUP`): no pid is written into
/// `cgroup.procs` afterwards, whose global lock can cost an RCU grace period
/// on every start. Fails (ENOSYS, E2BIG, EINVAL on kernels before 5.7 or
/// under a filter that refuses `clone3`) without creating anything; the
/// caller then clones the old way and moves the child in.
///
/// # Safety
/// The same contract as [`clone_process`]: the caller is single-threaded.
pub unsafe fn clone_into_cgroup(flags: libc::c_int, cgroup: BorrowedFd<'_>) -> nix::Result<Forked> {
    let args = CloneArgs {
        flags: flags as u32 as u64 | CLONE_INTO_CGROUP,
        exit_signal: libc::SIGCHLD as u64,
        cgroup: cgroup.as_raw_fd() as u64,
        ..CloneArgs::default()
    };
    // SAFETY: `args` is a valid clone_args of the size passed, alive for the
    // call; with no stack (0, 0) clone3 behaves as fork and the child goes on
    // on a copy of this stack, sound for a single-threaded caller (this
    // function's contract); no flag asks the kernel to write through a
    // pointer.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_clone3,
            &args as *const CloneArgs,
            std::mem::size_of::<CloneArgs>(),
        )
    };
    match rc {
        -1 => Err(Errno::last()),
        0 => Ok(Forked::Child),
        pid => Ok(Forked::Parent(nix::unistd::Pid::from_raw(
            pid as libc::pid_t,
        ))),
    }
}

/// `pivot_root(new_root, put_old)`.
pub fn pivot_root(new_root: &CStr, put_old: &CStr) -> nix::Result<()> {
    // SAFETY: both arguments are valid NUL-terminated strings that outlive
    // the call; the kernel only reads them.
    let rc = unsafe { libc::syscall(libc::SYS_pivot_root, new_root.as_ptr(), put_old.as_ptr()) };
    Errno::result(rc).map(drop)
}

/// `open_tree(fd, "", OPEN_TREE_CLONE | AT_RECURSIVE | AT_EMPTY_PATH)`: a
/// detached copy of the mount tree at the already resolved `fd`.
pub fn open_tree_clone_fd(fd: BorrowedFd<'_>) -> nix::Result<OwnedFd> {
    let empty = c"";
    // SAFETY: `fd` is open for the duration of the call, the path is the
    // empty string with AT_EMPTY_PATH; the call returns a new descriptor.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            fd.as_raw_fd(),
            empty.as_ptr(),
            OPEN_TREE_CLONE
                | AT_RECURSIVE
                | libc::AT_EMPTY_PATH as libc::c_uint
                | libc::O_CLOEXEC as libc::c_uint,
        )
    };
    let fd = Errno::result(rc)? as libc::c_int;
    // SAFETY: the kernel just returned this descriptor to us and nothing
    // else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Open `path` as an `O_PATH` descriptor without following any symbolic
/// link on the way (`openat2` with `RESOLVE_NO_SYMLINKS`): ELOOP when the
/// path goes through one, ENOSYS on kernels before 5.6.
pub fn open_path_no_symlinks(path: &CStr) -> nix::Result<OwnedFd> {
    #[repr(C)]
    struct OpenHow {
        flags: u64,
        mode: u64,
        resolve: u64,
    }
    const RESOLVE_NO_SYMLINKS: u64 = 0x04;
    let how = OpenHow {
        flags: (libc::O_PATH | libc::O_CLOEXEC) as u64,
        mode: 0,
        resolve: RESOLVE_NO_SYMLINKS,
    };
    // SAFETY: `path` is NUL-terminated and `how` a properly sized `struct
    // open_how`, both alive and only read during the call.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            libc::AT_FDCWD,
            path.as_ptr(),
            &how as *const OpenHow,
            std::mem::size_of::<OpenHow>(),
        )
    };
    let fd = Errno::result(rc)? as libc::c_int;
    // SAFETY: the kernel just returned this descriptor to us and nothing
    // else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Attach the detached mount `tree` at `target`.
pub fn move_mount_to(tree: BorrowedFd<'_>, target: &CStr) -> nix::Result<()> {
    let empty = c"";
    // SAFETY: `tree` is a valid open descriptor, both strings are valid and
    // NUL-terminated for the duration of the call.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            tree.as_raw_fd(),
            empty.as_ptr(),
            libc::AT_FDCWD,
            target.as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH,
        )
    };
    Errno::result(rc).map(drop)
}

/// Attach the detached mount `tree` onto the place `target` holds (an
/// `O_PATH` descriptor), with no path walked at all.
pub fn move_mount_onto(tree: BorrowedFd<'_>, target: BorrowedFd<'_>) -> nix::Result<()> {
    const MOVE_MOUNT_T_EMPTY_PATH: libc::c_uint = 0x40;
    let empty = c"";
    // SAFETY: both descriptors are valid and open, and the empty paths are
    // NUL-terminated strings that outlive the call.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            tree.as_raw_fd(),
            empty.as_ptr(),
            target.as_raw_fd(),
            empty.as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH,
        )
    };
    Errno::result(rc).map(drop)
}

/// Set mount attributes on the mount at `path`, and on every mount below it
/// when `recursive`.
pub fn mount_setattr_path(path: &CStr, set: u64, recursive: bool) -> nix::Result<()> {
    let flags = if recursive { AT_RECURSIVE } else { 0 };
    mount_setattr_at(libc::AT_FDCWD, path, flags, set)
}

/// Set the mount attributes `set` on the mount whose root `fd` holds (an
/// `O_PATH` descriptor is enough), and with `recursive` on every mount
/// below it: [`mount_setattr_path`] without a path to look up again.
pub fn mount_setattr_fd(fd: BorrowedFd<'_>, set: u64, recursive: bool) -> nix::Result<()> {
    let mut flags = libc::AT_EMPTY_PATH as libc::c_uint;
    if recursive {
        flags |= AT_RECURSIVE;
    }
    // `fd` is borrowed for the duration of the call.
    mount_setattr_at(fd.as_raw_fd(), c"", flags, set)
}

/// `mount_setattr(dirfd, path, flags, {attr_set: set})`.
fn mount_setattr_at(
    dirfd: std::os::fd::RawFd,
    path: &CStr,
    flags: libc::c_uint,
    set: u64,
) -> nix::Result<()> {
    let attr = MountAttr {
        attr_set: set,
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    // SAFETY: `dirfd` is AT_FDCWD or a descriptor the caller keeps open
    // across the call; `path` is valid and NUL-terminated; `attr` is a
    // properly sized `struct mount_attr` that lives across the call and is
    // only read.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            dirfd,
            path.as_ptr(),
            flags,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    Errno::result(rc).map(drop)
}

/// Make the detached mount tree `tree` idmapped through the user namespace
/// `userns`: files are seen with their owners translated by its ID maps.
pub fn idmap_tree(tree: BorrowedFd<'_>, userns: BorrowedFd<'_>) -> nix::Result<()> {
    set_tree_attrs(tree, MOUNT_ATTR_IDMAP, Some(userns))
}

/// Set the mount attributes `set` (`MOUNT_ATTR_*`) on every mount of the
/// detached tree `tree`, in one call; `userns` is the namespace of
/// `MOUNT_ATTR_IDMAP` when `set` has it.
pub fn set_tree_attrs(
    tree: BorrowedFd<'_>,
    set: u64,
    userns: Option<BorrowedFd<'_>>,
) -> nix::Result<()> {
    let attr = MountAttr {
        attr_set: set,
        attr_clr: 0,
        propagation: 0,
        userns_fd: userns.map_or(0, |u| u.as_raw_fd() as u64),
    };
    let empty = c"";
    // SAFETY: both descriptors are open for the duration of the call, the
    // path is the empty string with AT_EMPTY_PATH, and `attr` is a properly
    // sized `struct mount_attr` that is only read.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            tree.as_raw_fd(),
            empty.as_ptr(),
            libc::AT_EMPTY_PATH as libc::c_uint | AT_RECURSIVE,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    Errno::result(rc).map(drop)
}

/// The Landlock ABI version the kernel offers, or why none.
pub fn landlock_abi() -> Result<i32, Errno> {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
    // SAFETY: with a null attribute pointer, size 0 and the VERSION flag, the
    // call only returns the ABI number and creates nothing.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    Errno::result(rc).map(|v| v as i32)
}

/// Largest classic BPF program the kernel accepts (BPF_MAXINSNS).
const BPF_MAXINSNS: usize = 4096;

/// A classic BPF program from the kernel's `struct sock_filter` array in
/// native byte order (as libseccomp exports it); none when it is empty or
/// torn (not a whole number of 8-byte instructions).
pub fn sock_filters(program: &[u8]) -> Option<Vec<libc::sock_filter>> {
    if program.is_empty() || !program.len().is_multiple_of(8) {
        return None;
    }
    Some(
        program
            .chunks_exact(8)
            .map(|c| libc::sock_filter {
                code: u16::from_ne_bytes([c[0], c[1]]),
                jt: c[2],
                jf: c[3],
                k: u32::from_ne_bytes([c[4], c[5], c[6], c[7]]),
            })
            .collect(),
    )
}

/// Load a seccomp filter given as the kernel's `struct sock_filter` array in
/// native byte order (as libseccomp exports it). `no_new_privs` must be set.
pub fn load_seccomp_filter(program: &[u8]) -> nix::Result<()> {
    const SECCOMP_SET_MODE_FILTER: libc::c_uint = 1;
    let filter = sock_filters(program)
        .filter(|f| f.len() <= BPF_MAXINSNS)
        .ok_or(Errno::EINVAL)?;
    let prog = libc::sock_fprog {
        len: filter.len() as libc::c_ushort,
        filter: filter.as_ptr() as *mut libc::sock_filter,
    };
    // SAFETY: `prog` points at `filter`, a live array of exactly `len`
    // instructions that outlives the call; the kernel copies the program
    // and does not keep the pointer.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            SECCOMP_SET_MODE_FILTER,
            0 as libc::c_uint,
            &prog as *const libc::sock_fprog,
        )
    };
    Errno::result(rc).map(drop)
}

/// Mark every descriptor from 3 up close-on-exec, so that nothing the
/// caller of warden left open (a file, a directory, a socket) reaches the
/// sandboxed command.
pub fn cloexec_from_3() {
    const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;
    // SAFETY: close_range with integer arguments only; with the CLOEXEC flag
    // it closes nothing now, it only marks descriptors.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_close_range,
            3 as libc::c_uint,
            libc::c_uint::MAX,
            CLOSE_RANGE_CLOEXEC,
        )
    };
    if rc == 0 {
        return;
    }
    // Kernels before 5.11: every possible descriptor, one by one.
    let max = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
        .map(|(soft, _)| soft.min(1 << 20) as libc::c_int)
        .unwrap_or(4096);
    for fd in 3..max {
        // SAFETY: F_SETFD on a descriptor that may not exist only fails
        // with EBADF; no memory is involved.
        unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
    }
}

/// Close every descriptor from 3 up except those in `keep`.
pub fn close_fds_except(keep: &[libc::c_int]) {
    let mut keep: Vec<libc::c_uint> = keep
        .iter()
        .filter(|fd| **fd >= 3)
        .map(|fd| *fd as libc::c_uint)
        .collect();
    keep.sort_unstable();
    keep.dedup();
    let mut from: libc::c_uint = 3;
    for k in keep
        .iter()
        .copied()
        .chain(std::iter::once(libc::c_uint::MAX))
    {
        if k > from {
            let to = if k == libc::c_uint::MAX { k } else { k - 1 };
            // SAFETY: close_range with integer arguments; closing
            // descriptors this process does not use any more.
            let rc = unsafe { libc::syscall(libc::SYS_close_range, from, to, 0 as libc::c_uint) };
            if rc != 0 {
                let max = to.min(1 << 20);
                for fd in from..=max {
                    // SAFETY: closing a descriptor number that is either
                    // unused (EBADF) or not ours to keep.
                    unsafe { libc::close(fd as libc::c_int) };
                }
            }
        }
        from = k.saturating_add(1);
    }
}

/// Send descriptors over a Unix socket (SCM_RIGHTS), with one byte of data.
pub fn send_fds(sock: &OwnedFd, fds: &[libc::c_int]) -> nix::Result<()> {
    crate::fdpass::send(sock.as_fd(), b"f", fds).map(drop)
}

/// A raw system call's return as an `io::Result`: negative is the error
/// in `errno`. Async-signal-safe (it reads `errno`, allocates nothing).
pub(crate) fn check_rc(rc: libc::c_long) -> std::io::Result<()> {
    if rc < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Answers one request for a socket on `channel` with a fresh TCP socket of
/// the caller's network namespace, or, when none can be made, with a
/// message that holds none (the asker then sees the error, not a hang).
pub fn hand_out_socket(channel: &OwnedFd) -> nix::Result<()> {
    let socket = nix::sys::socket::socket(
        nix::sys::socket::AddressFamily::Inet,
        nix::sys::socket::SockType::Stream,
        nix::sys::socket::SockFlag::SOCK_CLOEXEC,
        None,
    );
    match &socket {
        Ok(s) => send_fds(channel, &[s.as_raw_fd()]),
        Err(_) => nix::sys::socket::send(
            channel.as_raw_fd(),
            b"e",
            nix::sys::socket::MsgFlags::empty(),
        )
        .map(drop),
    }
}

/// Starts `child` in a new process that shares this one's memory
/// (`CLONE_VM | CLONE_VFORK`): no page table is copied, and the caller
/// resumes once the child has exec'd or exited. The child's stack lives
/// here until then.
///
/// # Safety
///
/// `child` runs in the caller's memory while the caller is suspended: it
/// may only call async-signal-safe functions on memory prepared before the
/// call (no allocation, no lock the suspended caller could hold).
pub unsafe fn clone_vfork(child: nix::sched::CloneCb<'_>) -> nix::Result<nix::unistd::Pid> {
    let mut stack = vec![0u8; 64 * 1024];
    // SAFETY: the stack outlives the child's use of it (CLONE_VFORK
    // suspends this thread until the child has exec'd or exited); what the
    // child does is the caller's contract above.
    unsafe {
        nix::sched::clone(
            child,
            &mut stack,
            nix::sched::CloneFlags::CLONE_VM | nix::sched::CloneFlags::CLONE_VFORK,
            Some(libc::SIGCHLD),
        )
    }
}

/// Receive up to `n` descriptors sent with [`send_fds`]; empty when the
/// other end closed without sending.
pub fn recv_fds(sock: &OwnedFd, n: usize) -> nix::Result<Vec<OwnedFd>> {
    let mut byte = [0u8; 1];
    let (_, mut fds) = crate::fdpass::recv(sock.as_fd(), &mut byte)?;
    fds.truncate(n);
    Ok(fds)
}
