//! The raw system calls of `warden selftest`'s probes that no safe wrapper
//! offers. The probes themselves (what each attack tries, what counts as
//! contained) live in the `warden-selftest` crate beside the attacks they
//! serve; this module holds only the attempts that need `unsafe`, which the
//! workspace allows in `jail` and `egress` alone. Calls that `nix` wraps
//! safely (mount, chroot, unshare, socket, process_vm_readv, kill, ...) are
//! made there, not here.
//!
//! Each primitive makes one attempt with fixed, harmless arguments and
//! returns what the kernel answered, `Ok(return value)` or `Err(errno)`:
//! never a judgement, and never a pointer argument a caller could choose
//! (the kernel would write through it).

use nix::errno::Errno;
use std::ffi::CStr;
use std::os::fd::RawFd;

/// What the kernel answered: the call's return value, or its errno.
pub type Answer = Result<i64, Errno>;

/// One raw system call.
///
/// # Safety
/// Every pointer in `a` must be NULL or point to memory that is valid, for
/// as long as the call lasts, for every read and write the kernel may make
/// through it for system call `nr`.
unsafe fn raw(nr: libc::c_long, a: [u64; 6]) -> Answer {
    // SAFETY: the caller vouches for the pointers (see above); the other
    // arguments are integers the kernel validates.
    let r = unsafe { libc::syscall(nr, a[0], a[1], a[2], a[3], a[4], a[5]) };
    if r == -1 {
        Err(Errno::last())
    } else {
        Ok(r)
    }
}

/// `open_by_handle_at(AT_FDCWD, handle, 0)` with a zeroed 128-byte handle
/// (the "shocker" escape): without a filter the kernel would judge the
/// handle, and refuse it without CAP_DAC_READ_SEARCH.
pub fn open_by_handle_at() -> Answer {
    let mut handle = [0u8; 8 + 128];
    // handle_bytes: what the kernel reads after the 8-byte header, which
    // is exactly what the buffer holds.
    handle[0] = 128;
    // SAFETY: `handle` lives across the call and holds the 8-byte header
    // plus the 128 bytes its header announces.
    unsafe {
        raw(
            libc::SYS_open_by_handle_at,
            [
                libc::AT_FDCWD as u64,
                handle.as_mut_ptr() as u64,
                0,
                0,
                0,
                0,
            ],
        )
    }
}

/// `ptrace(PTRACE_ATTACH, pid)` (the workspace's `nix` has no `ptrace`).
pub fn ptrace_attach(pid: i32) -> Answer {
    // SAFETY: integer arguments only; addr and data are NULL.
    unsafe {
        raw(
            libc::SYS_ptrace,
            [libc::PTRACE_ATTACH as u64, pid as u64, 0, 0, 0, 0],
        )
    }
}

/// `ioctl(0, TIOCSTI, "x")`: push a keystroke into standard input's
/// terminal.
pub fn tiocsti() -> Answer {
    let c = b'x';
    // SAFETY: TIOCSTI reads one byte through its argument, which points to
    // `c`, alive across the call.
    unsafe {
        raw(
            libc::SYS_ioctl,
            [0, libc::TIOCSTI, &c as *const u8 as u64, 0, 0, 0],
        )
    }
}

/// `setns(fd, 0)` on a raw descriptor number, so that a probe that could
/// not open a namespace file still meets the filter (with -1) rather than
/// no call at all.
pub fn setns(fd: RawFd) -> Answer {
    // SAFETY: integer arguments only; setns neither closes nor changes fd.
    unsafe { raw(libc::SYS_setns, [fd as u64, 0, 0, 0, 0, 0]) }
}

/// `bpf(BPF_PROG_LOAD)` with a zeroed 128-byte attribute.
pub fn bpf_prog_load() -> Answer {
    let mut attr = [0u8; 128];
    // SAFETY: the kernel reads at most `attr.len()` bytes of `attr`, which
    // lives across the call; zeroed, it names no buffer to write to.
    unsafe {
        raw(
            libc::SYS_bpf,
            [5, attr.as_mut_ptr() as u64, attr.len() as u64, 0, 0, 0],
        )
    }
}

/// `add_key("user", "warden-probe", "x", KEY_SPEC_PROCESS_KEYRING)`.
pub fn add_key() -> Answer {
    let (t, d): (&CStr, &CStr) = (c"user", c"warden-probe");
    let payload = b"x";
    // SAFETY: two NUL-terminated static strings and a 1-byte payload whose
    // length is passed with it; -2 is KEY_SPEC_PROCESS_KEYRING.
    unsafe {
        raw(
            libc::SYS_add_key,
            [
                t.as_ptr() as u64,
                d.as_ptr() as u64,
                payload.as_ptr() as u64,
                1,
                (-2i64) as u64,
                0,
            ],
        )
    }
}

/// `io_uring_setup(4, params)` with zeroed parameters.
pub fn io_uring_setup() -> Answer {
    let mut params = [0u8; 120];
    // SAFETY: `params` is the 120 bytes of `struct io_uring_params` the
    // kernel reads and writes, alive across the call.
    unsafe {
        raw(
            libc::SYS_io_uring_setup,
            [4, params.as_mut_ptr() as u64, 0, 0, 0, 0],
        )
    }
}

/// `perf_event_open` of a zeroed attribute (type 0, size 128) on any CPU
/// of this process.
pub fn perf_event_open() -> Answer {
    let mut attr = [0u8; 128];
    attr[4..8].copy_from_slice(&128u32.to_ne_bytes());
    // SAFETY: the attribute announces its 128 bytes, all of `attr`, which
    // lives across the call.
    unsafe {
        raw(
            libc::SYS_perf_event_open,
            [
                attr.as_mut_ptr() as u64,
                0,
                (-1i64) as u64,
                (-1i64) as u64,
                0,
                0,
            ],
        )
    }
}

/// `userfaultfd(0)`.
pub fn userfaultfd() -> Answer {
    // SAFETY: integer arguments only.
    unsafe { raw(libc::SYS_userfaultfd, [0, 0, 0, 0, 0, 0]) }
}

/// `finit_module(-1, "", 0)`: no module, only the question.
pub fn finit_module() -> Answer {
    let empty: &CStr = c"";
    // SAFETY: a NUL-terminated static string; the descriptor is -1.
    unsafe {
        raw(
            libc::SYS_finit_module,
            [u64::MAX, empty.as_ptr() as u64, 0, 0, 0, 0],
        )
    }
}

/// `kexec_load(0, 0, NULL, 0)`.
pub fn kexec_load() -> Answer {
    // SAFETY: integer arguments and a NULL segment list.
    unsafe { raw(libc::SYS_kexec_load, [0, 0, 0, 0, 0, 0]) }
}

/// Fork a child that sleeps `secs` seconds and exits; its PID, or the
/// errno of the failed fork.
pub fn fork_sleeper(secs: u32) -> Result<i32, Errno> {
    // SAFETY: the child calls only sleep and _exit, which neither allocate
    // nor take locks another thread may have held at the fork.
    match unsafe { libc::fork() } {
        0 => {
            // SAFETY: async-signal-safe calls only.
            unsafe {
                libc::sleep(secs);
                libc::_exit(0)
            }
        }
        -1 => Err(Errno::last()),
        pid => Ok(pid),
    }
}

/// Ignore SIGXFSZ, so that a file size limit is an error the probe can
/// report rather than its death.
pub fn ignore_sigxfsz() {
    // SAFETY: SIG_IGN installs no handler; nothing runs on the signal.
    unsafe { libc::signal(libc::SIGXFSZ, libc::SIG_IGN) };
}

/// Leave a grandchild running `exe` with `argv` in a session of its own:
/// fork; the child calls setsid, forks the grandchild that execs, and
/// exits at once. Returns when the first fork is made, or its errno.
pub fn daemonize(exe: &CStr, argv: &[&CStr]) -> Result<(), Errno> {
    // Built before the fork: the child must not allocate.
    let mut ptrs: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
    ptrs.push(std::ptr::null());
    // SAFETY: the child calls only setsid, fork, execv and _exit, all
    // async-signal-safe.
    match unsafe { libc::fork() } {
        0 => {
            // SAFETY: `exe` is NUL-terminated and `ptrs` a NULL-terminated
            // array of NUL-terminated strings, all outliving the calls; a
            // grandchild whose exec fails falls through to _exit.
            unsafe {
                libc::setsid();
                if libc::fork() == 0 {
                    libc::execv(exe.as_ptr(), ptrs.as_ptr());
                }
                libc::_exit(0)
            }
        }
        -1 => Err(Errno::last()),
        _ => Ok(()),
    }
}
