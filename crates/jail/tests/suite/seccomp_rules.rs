//! Proves the sandbox's seccomp filter with real system calls, rule by rule and both ways.
//!
//! Every probe runs in a forked child, so nothing a call does (a namespace, a personality, the
//! filter itself) outlives it and the test process stays unfiltered. The child makes only raw
//! system calls and reports each outcome over a pipe; the parent compares. Every denied call is
//! made twice with the same arguments: under the filter it must fail with the rule's errno, and
//! without the filter it must not, which proves the errno came from the filter and not from the
//! kernel rejecting the arguments. The arguments are chosen so that the kernel rejects them
//! before doing anything (EINVAL, EFAULT, EBADF, ESRCH...), even for root, or so that what
//! happens stays inside the throwaway child.

use std::io::Read;
use std::os::fd::{AsRawFd, OwnedFd};
use std::panic::AssertUnwindSafe;

use libseccomp::{ScmpAction, ScmpArch, ScmpSyscall};
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::Pid;
use warden_jail::seccomp::{self, Arch, When, RULES};

/// What one raw system call did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    /// It returned this value.
    Returned(i64),
    /// It failed with this errno.
    Failed(i32),
}

impl Outcome {
    fn errno(self) -> Option<i32> {
        match self {
            Outcome::Failed(errno) => Some(errno),
            Outcome::Returned(_) => None,
        }
    }
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Outcome::Returned(value) => write!(f, "returned {value}"),
            Outcome::Failed(errno) => write!(
                f,
                "failed with errno {errno} ({})",
                std::io::Error::from_raw_os_error(errno)
            ),
        }
    }
}

/// Makes a raw system call; missing arguments are zero.
fn sys(nr: libc::c_long, args: &[u64]) -> Outcome {
    let arg = |i: usize| args.get(i).copied().unwrap_or(0);
    // SAFETY: the calls in this file pass integers, NULL, pointers to buffers that live across
    // the call, or the address 1, which is never mapped and which the kernel rejects with EFAULT
    // before touching anything. `clone` is called without CLONE_VM and without a new stack, so
    // the new process gets its own copy of this stack, as with fork(), and only calls _exit.
    let ret = unsafe { libc::syscall(nr, arg(0), arg(1), arg(2), arg(3), arg(4), arg(5)) };
    if ret == -1 {
        Outcome::Failed(std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
    } else {
        Outcome::Returned(ret)
    }
}

/// Ends the calling process at once, without running anything the parent registered.
fn exit_now(code: i32) -> ! {
    // SAFETY: _exit takes no pointers and never returns; it is async-signal-safe, so it is sound
    // in a child forked from this multi-threaded test process.
    unsafe { libc::_exit(code) }
}

/// Writes outcomes from the child to the parent.
struct Report {
    pipe: OwnedFd,
}

impl Report {
    fn push(&mut self, outcome: Outcome) {
        let (tag, value) = match outcome {
            Outcome::Returned(value) => (0_i64, value),
            Outcome::Failed(errno) => (1, i64::from(errno)),
        };
        let mut record = [0_u8; 16];
        let (head, tail) = record.split_at_mut(8);
        head.copy_from_slice(&tag.to_ne_bytes());
        tail.copy_from_slice(&value.to_ne_bytes());
        // 16 bytes is below PIPE_BUF: the write is whole or fails.
        if nix::unistd::write(&self.pipe, &record) != Ok(record.len()) {
            exit_now(CHILD_REPORT_FAILED);
        }
    }
}

const CHILD_INSTALL_FAILED: i32 = 3;
const CHILD_REPORT_FAILED: i32 = 4;
const CHILD_PANICKED: i32 = 5;
const CHILD_SETUP_FAILED: i32 = 6;

/// Whether a child installs the filter before its calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Filter {
    Installed,
    Absent,
}

/// What a child reported, and how it ended.
struct ChildRun {
    outcomes: Vec<Outcome>,
    status: WaitStatus,
}

/// Forks a child that sets no_new_privs, installs the filter if asked, runs `body` and exits.
///
/// glibc's fork() resets its allocator locks in the child, so `install()` may allocate there even
/// though the test harness runs other threads; everything else the child does is raw calls.
fn in_child(filter: Filter, body: impl FnOnce(&mut Report)) -> ChildRun {
    let (read, write) = match nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC) {
        Ok(pair) => pair,
        Err(errno) => panic!("cannot create the report pipe: {errno}"),
    };
    // SAFETY: the child only makes raw system calls, calls `install` (see above) and leaves
    // through _exit, never returning into the test harness, even on panic.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        drop(read);
        let mut report = Report { pipe: write };
        let ran = std::panic::catch_unwind(AssertUnwindSafe(|| {
            // The jail sets no_new_privs before installing; so does every child here, filtered
            // or not, so that the filter is the only difference between the two.
            if nix::sys::prctl::set_no_new_privs().is_err() {
                exit_now(CHILD_INSTALL_FAILED);
            }
            if filter == Filter::Installed && seccomp::install().is_err() {
                exit_now(CHILD_INSTALL_FAILED);
            }
            body(&mut report);
        }));
        exit_now(if ran.is_ok() { 0 } else { CHILD_PANICKED });
    }
    assert!(pid > 0, "fork failed: {}", std::io::Error::last_os_error());
    drop(write);
    let mut bytes = Vec::new();
    if let Err(error) = std::fs::File::from(read).read_to_end(&mut bytes) {
        panic!("cannot read the child's report: {error}");
    }
    let status = match waitpid(Pid::from_raw(pid), None) {
        Ok(status) => status,
        Err(errno) => panic!("cannot wait for the child: {errno}"),
    };
    if status == WaitStatus::Exited(Pid::from_raw(pid), CHILD_INSTALL_FAILED) {
        panic!(
            "the child could not install the filter: {:?}",
            seccomp::build_filter().err()
        );
    }
    let outcomes = bytes
        .chunks_exact(16)
        .map(|record| {
            let (head, tail) = record.split_at(8);
            let tag = i64::from_ne_bytes(head.try_into().unwrap_or_default());
            let value = i64::from_ne_bytes(tail.try_into().unwrap_or_default());
            if tag == 0 {
                Outcome::Returned(value)
            } else {
                Outcome::Failed(i32::try_from(value).unwrap_or(0))
            }
        })
        .collect();
    ChildRun { outcomes, status }
}

/// Runs calls in a child and returns their outcomes, requiring the child to end normally.
fn outcomes_in_child(filter: Filter, calls: &[fn() -> Outcome]) -> Vec<Outcome> {
    let run = in_child(filter, |report| {
        for call in calls {
            report.push(call());
        }
    });
    assert!(
        matches!(run.status, WaitStatus::Exited(_, 0)),
        "the {filter:?}-filter child ended with {:?} after {} of {} calls",
        run.status,
        run.outcomes.len(),
        calls.len()
    );
    assert_eq!(
        run.outcomes.len(),
        calls.len(),
        "the child reported every call"
    );
    run.outcomes
}

/// An address that is never mapped: the kernel fails any copy from it with EFAULT.
const BAD_ADDRESS: u64 = 1;
/// A PID above the kernel's largest `pid_max` (2^22): no such process.
const NO_PID: u64 = 0x7fff_ffff;
/// `unshare()` rejects this flag with EINVAL before looking at any other.
const INVALID_FOR_UNSHARE: u64 = libc::CLONE_PARENT as u64;
/// `clone()` rejects CLONE_THREAD without CLONE_SIGHAND with EINVAL before creating anything.
const INVALID_FOR_CLONE: u64 = libc::CLONE_THREAD as u64;
/// `personality()` flag that turns off address space randomisation.
const ADDR_NO_RANDOMIZE: u64 = 0x0040000;
/// `socket()` type above SOCK_MAX: EINVAL before the family's code runs (and checks privilege).
const INVALID_SOCKET_TYPE: u64 = 15;
/// `socket()` protocol above IPPROTO_MAX: EINVAL from the inet families before their checks.
const INVALID_INET_PROTOCOL: u64 = 1000;
/// `include/uapi/linux/netlink.h`.
const NETLINK_AUDIT: u64 = 9;
/// `include/uapi/linux/userfaultfd.h`.
const UFFD_USER_MODE_ONLY: u64 = 1;

/// A denied call, made with arguments that make it fail (or stay harmless) without the filter.
struct Denied {
    /// The call as a reader would write it.
    call: &'static str,
    /// The syscall the rule names.
    syscall: &'static str,
    /// Makes the call in the child.
    make: fn() -> Outcome,
    /// The errno the filter returns.
    errno: i32,
    /// Why the kernel itself may return the filter's errno for these arguments on some hosts
    /// (a privilege or host setting checked before the arguments). When it does, the unfiltered
    /// half of the proof is skipped with this reason printed; `None`: the kernel never does,
    /// and a match fails the test.
    kernel_may_return_it: Option<&'static str>,
}

const EPERM: i32 = libc::EPERM;

/// `AT_FDCWD` as a syscall argument (sign-extended, as the kernel reads an int).
const AT_FDCWD: u64 = libc::AT_FDCWD as i64 as u64;

/// A path below a directory that does not exist: every call on it fails with ENOENT.
fn missing_path() -> u64 {
    c"/nonexistent-warden-test-dir/file".as_ptr() as u64
}

const fn denied(call: &'static str, syscall: &'static str, make: fn() -> Outcome) -> Denied {
    Denied {
        call,
        syscall,
        make,
        errno: EPERM,
        kernel_may_return_it: None,
    }
}

const fn denied_unless(
    call: &'static str,
    syscall: &'static str,
    make: fn() -> Outcome,
    why: &'static str,
) -> Denied {
    Denied {
        call,
        syscall,
        make,
        errno: EPERM,
        kernel_may_return_it: Some(why),
    }
}

/// Closes a file descriptor a call may have returned; the outcome is kept.
fn closing(outcome: Outcome) -> Outcome {
    if let Outcome::Returned(fd) = outcome {
        sys(libc::SYS_close, &[fd as u64]);
    }
    outcome
}

/// `ioctl(fd, request, &byte)` on the read end of a fresh pipe, which is no terminal.
fn ioctl_on_pipe(request: u64) -> Outcome {
    let Ok((read, _write)) = nix::unistd::pipe() else {
        exit_now(CHILD_SETUP_FAILED);
    };
    let mut byte = b'x';
    sys(
        libc::SYS_ioctl,
        &[
            read.as_raw_fd() as u64,
            request,
            std::ptr::addr_of_mut!(byte) as u64,
        ],
    )
}

/// `ioctl(fd, request, buffer)` on a fresh pseudo-terminal master the child owns alone.
fn ioctl_on_pty(request: u64) -> Outcome {
    let opened = sys(
        libc::SYS_openat,
        &[
            libc::AT_FDCWD as u64,
            c"/dev/ptmx".as_ptr() as u64,
            (libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC) as u64,
        ],
    );
    let Outcome::Returned(fd) = opened else {
        return opened;
    };
    let mut buffer = [b'x'; 16];
    let outcome = sys(
        libc::SYS_ioctl,
        &[fd as u64, request, buffer.as_mut_ptr() as u64],
    );
    sys(libc::SYS_close, &[fd as u64]);
    outcome
}

/// `clone(flags)` like fork(): the new process exits at once and is reaped. Returns its raw
/// wait status (0: it exited with 0), or how clone failed.
fn clone_and_reap(flags: u64) -> Outcome {
    match sys(libc::SYS_clone, &[flags]) {
        Outcome::Returned(0) => exit_now(0),
        Outcome::Returned(pid) => {
            let mut status: libc::c_int = -1;
            let reaped = sys(
                libc::SYS_wait4,
                &[pid as u64, std::ptr::addr_of_mut!(status) as u64],
            );
            match reaped {
                Outcome::Returned(_) => Outcome::Returned(i64::from(status)),
                failed => failed,
            }
        }
        failed => failed,
    }
}

fn unshare_invalid<const FLAG: u64>() -> Outcome {
    sys(libc::SYS_unshare, &[FLAG | INVALID_FOR_UNSHARE])
}

fn clone_invalid<const FLAG: u64>() -> Outcome {
    clone_and_reap(FLAG | INVALID_FOR_CLONE)
}

/// Every denied call, with the arguments that prove its rule both ways.
#[rustfmt::skip]
const DENIED: &[Denied] = &[
    // Other processes.
    denied("ptrace(PTRACE_PEEKDATA, no such pid)", "ptrace",
        || sys(libc::SYS_ptrace, &[libc::PTRACE_PEEKDATA as u64, NO_PID])),
    denied("process_vm_readv(.., flags 1)", "process_vm_readv",
        || sys(libc::SYS_process_vm_readv, &[NO_PID, 0, 0, 0, 0, 1])),
    denied("process_vm_writev(.., flags 1)", "process_vm_writev",
        || sys(libc::SYS_process_vm_writev, &[NO_PID, 0, 0, 0, 0, 1])),
    denied("pidfd_getfd(-1, 0, 0)", "pidfd_getfd",
        || sys(libc::SYS_pidfd_getfd, &[u64::MAX, 0, 0])),

    // The file tree.
    denied("mount(NULL, NULL target, ..)", "mount",
        || sys(libc::SYS_mount, &[0, 0, 0, 0, 0])),
    denied("umount2(NULL, invalid flags)", "umount2",
        || sys(libc::SYS_umount2, &[0, 0x8000_0000])),
    denied_unless("pivot_root(NULL, NULL)", "pivot_root",
        || sys(libc::SYS_pivot_root, &[0, 0]),
        "the kernel checks CAP_SYS_ADMIN before reading the paths"),
    denied_unless("move_mount(-1, NULL, -1, NULL, invalid flags)", "move_mount",
        || sys(libc::SYS_move_mount, &[u64::MAX, 0, u64::MAX, 0, 0xffff_ffff]),
        "the kernel checks CAP_SYS_ADMIN before the flags"),
    denied("open_tree(-1, NULL, invalid flags)", "open_tree",
        || sys(libc::SYS_open_tree, &[u64::MAX, 0, 0xffff_ffff])),
    denied_unless("fsopen(NULL, invalid flags)", "fsopen",
        || sys(libc::SYS_fsopen, &[0, 0xffff_ffff]),
        "the kernel checks CAP_SYS_ADMIN before the flags"),
    denied("fsconfig(-1, invalid command, ..)", "fsconfig",
        || sys(libc::SYS_fsconfig, &[u64::MAX, 0xffff, 0, 0, 0])),
    denied_unless("fsmount(-1, invalid flags, 0)", "fsmount",
        || sys(libc::SYS_fsmount, &[u64::MAX, 0xffff_ffff, 0]),
        "the kernel checks CAP_SYS_ADMIN before the flags"),
    denied_unless("fspick(-1, NULL, invalid flags)", "fspick",
        || sys(libc::SYS_fspick, &[u64::MAX, 0, 0xffff_ffff]),
        "the kernel checks CAP_SYS_ADMIN before the flags"),
    denied("mount_setattr(-1, NULL, invalid flags, NULL, 0)", "mount_setattr",
        || sys(libc::SYS_mount_setattr, &[u64::MAX, 0, 0xffff_ffff, 0, 0])),
    denied_unless("open_by_handle_at(-1, NULL, 0)", "open_by_handle_at",
        || sys(libc::SYS_open_by_handle_at, &[u64::MAX, 0, 0]),
        "kernels before 6.10 check CAP_DAC_READ_SEARCH first"),
    denied("name_to_handle_at(-1, NULL, NULL, NULL, invalid flags)", "name_to_handle_at",
        || sys(libc::SYS_name_to_handle_at, &[u64::MAX, 0, 0, 0, 0x4000_0000])),

    // Namespaces: each flag alone, with a flag that makes the kernel refuse the call, and once
    // for real (which creates the namespace in the throwaway child when unfiltered).
    denied("unshare(CLONE_NEWNS | CLONE_PARENT)", "unshare", unshare_invalid::<{ libc::CLONE_NEWNS as u64 }>),
    denied("unshare(CLONE_NEWUTS | CLONE_PARENT)", "unshare", unshare_invalid::<{ libc::CLONE_NEWUTS as u64 }>),
    denied("unshare(CLONE_NEWIPC | CLONE_PARENT)", "unshare", unshare_invalid::<{ libc::CLONE_NEWIPC as u64 }>),
    denied("unshare(CLONE_NEWUSER | CLONE_PARENT)", "unshare", unshare_invalid::<{ libc::CLONE_NEWUSER as u64 }>),
    denied("unshare(CLONE_NEWPID | CLONE_PARENT)", "unshare", unshare_invalid::<{ libc::CLONE_NEWPID as u64 }>),
    denied("unshare(CLONE_NEWNET | CLONE_PARENT)", "unshare", unshare_invalid::<{ libc::CLONE_NEWNET as u64 }>),
    denied("unshare(CLONE_NEWCGROUP | CLONE_PARENT)", "unshare", unshare_invalid::<{ libc::CLONE_NEWCGROUP as u64 }>),
    denied("unshare(CLONE_NEWTIME | CLONE_PARENT)", "unshare", unshare_invalid::<{ libc::CLONE_NEWTIME as u64 }>),
    denied_unless("unshare(CLONE_NEWUTS)", "unshare",
        || sys(libc::SYS_unshare, &[libc::CLONE_NEWUTS as u64]),
        "a new UTS namespace needs CAP_SYS_ADMIN"),
    denied("clone(CLONE_NEWNS | CLONE_THREAD)", "clone", clone_invalid::<{ libc::CLONE_NEWNS as u64 }>),
    denied("clone(CLONE_NEWUTS | CLONE_THREAD)", "clone", clone_invalid::<{ libc::CLONE_NEWUTS as u64 }>),
    denied("clone(CLONE_NEWIPC | CLONE_THREAD)", "clone", clone_invalid::<{ libc::CLONE_NEWIPC as u64 }>),
    denied("clone(CLONE_NEWUSER | CLONE_THREAD)", "clone", clone_invalid::<{ libc::CLONE_NEWUSER as u64 }>),
    denied("clone(CLONE_NEWPID | CLONE_THREAD)", "clone", clone_invalid::<{ libc::CLONE_NEWPID as u64 }>),
    denied("clone(CLONE_NEWNET | CLONE_THREAD)", "clone", clone_invalid::<{ libc::CLONE_NEWNET as u64 }>),
    denied("clone(CLONE_NEWCGROUP | CLONE_THREAD)", "clone", clone_invalid::<{ libc::CLONE_NEWCGROUP as u64 }>),
    denied_unless("clone(CLONE_NEWUSER | SIGCHLD)", "clone",
        || clone_and_reap((libc::CLONE_NEWUSER | libc::SIGCHLD) as u64),
        "user namespaces may be restricted on this host"),
    Denied {
        call: "clone3(NULL, 0)",
        syscall: "clone3",
        make: || sys(libc::SYS_clone3, &[0, 0]),
        errno: libc::ENOSYS,
        kernel_may_return_it: Some("kernels before 5.3 have no clone3"),
    },
    denied("setns(-1, 0)", "setns",
        || sys(libc::SYS_setns, &[u64::MAX, 0])),

    // Kernel extension and attack surface.
    denied_unless("bpf(invalid command, NULL, 0)", "bpf",
        || sys(libc::SYS_bpf, &[0x7fff_ffff, 0, 0]),
        "kernel.unprivileged_bpf_disabled may refuse before the command is read"),
    denied("perf_event_open(NULL, ..)", "perf_event_open",
        || sys(libc::SYS_perf_event_open, &[0, 0, u64::MAX, u64::MAX, 0])),
    denied_unless("userfaultfd(UFFD_USER_MODE_ONLY | O_RDWR)", "userfaultfd",
        || sys(libc::SYS_userfaultfd, &[UFFD_USER_MODE_ONLY | libc::O_RDWR as u64]),
        "kernels before 5.11 check vm.unprivileged_userfaultfd first"),
    denied_unless("io_uring_setup(1, NULL)", "io_uring_setup",
        || sys(libc::SYS_io_uring_setup, &[1, 0]),
        "kernel.io_uring_disabled refuses before the arguments are read"),
    denied("io_uring_enter(-1, ..)", "io_uring_enter",
        || sys(libc::SYS_io_uring_enter, &[u64::MAX, 0, 0, 0, 0, 0])),
    denied("io_uring_register(-1, ..)", "io_uring_register",
        || sys(libc::SYS_io_uring_register, &[u64::MAX, 0, 0, 0])),
    denied("keyctl(invalid operation)", "keyctl",
        || sys(libc::SYS_keyctl, &[0x7fff_ffff, 0, 0, 0, 0])),
    denied("add_key(NULL, ..)", "add_key",
        || sys(libc::SYS_add_key, &[0, 0, 0, 0, 0])),
    denied("request_key(NULL, ..)", "request_key",
        || sys(libc::SYS_request_key, &[0, 0, 0, 0])),
    denied_unless("lookup_dcookie(0, NULL, 0)", "lookup_dcookie",
        || sys(libc::SYS_lookup_dcookie, &[0, 0, 0]),
        "kernels before 6.8 check CAP_SYS_ADMIN first"),
    denied("nfsservctl(0, NULL, NULL)", "nfsservctl",
        || sys(libc::SYS_nfsservctl, &[0, 0, 0])),

    // The machine itself. kexec_load gets both invalid flags and too many segments, never
    // nr_segments 0 with flags 0, which would unload a loaded crash kernel.
    denied_unless("kexec_load(0, 17 segments, NULL, invalid flags)", "kexec_load",
        || sys(libc::SYS_kexec_load, &[0, 17, 0, 0x1000]),
        "needs CAP_SYS_BOOT, and kexec_load_disabled or lockdown refuse even root"),
    denied_unless("kexec_file_load(-1, -1, 0, NULL, invalid flags)", "kexec_file_load",
        || sys(libc::SYS_kexec_file_load, &[u64::MAX, u64::MAX, 0, 0, 0x4000_0000]),
        "needs CAP_SYS_BOOT, and kexec_load_disabled or lockdown refuse even root"),
    denied_unless("init_module(NULL, 0, NULL)", "init_module",
        || sys(libc::SYS_init_module, &[0, 0, 0]),
        "needs CAP_SYS_MODULE, and modules_disabled refuses even root"),
    denied_unless("finit_module(-1, NULL, invalid flags)", "finit_module",
        || sys(libc::SYS_finit_module, &[u64::MAX, 0, 0x7fff_ffff]),
        "needs CAP_SYS_MODULE, and modules_disabled refuses even root"),
    denied_unless("delete_module(no such module, 0)", "delete_module",
        || sys(libc::SYS_delete_module, &[c"warden_no_such_module".as_ptr() as u64, 0]),
        "needs CAP_SYS_MODULE, and modules_disabled refuses even root"),
    denied_unless("reboot(wrong magic)", "reboot",
        || sys(libc::SYS_reboot, &[0, 0, 0, 0]),
        "the kernel checks CAP_SYS_BOOT before the magic numbers"),
    denied("swapon(NULL, invalid flags)", "swapon",
        || sys(libc::SYS_swapon, &[0, 0x8000_0000])),
    denied_unless("swapoff(NULL)", "swapoff",
        || sys(libc::SYS_swapoff, &[0]),
        "the kernel checks CAP_SYS_ADMIN before the path"),
    // Never acct(NULL): that switches accounting off.
    denied_unless("acct(bad address)", "acct",
        || sys(libc::SYS_acct, &[BAD_ADDRESS]),
        "the kernel checks CAP_SYS_PACCT before the path"),
    denied("quotactl(invalid quota type, NULL, ..)", "quotactl",
        || sys(libc::SYS_quotactl, &[0xff, 0, 0, 0])),
    denied("quotactl_fd(-1, ..)", "quotactl_fd",
        || sys(libc::SYS_quotactl_fd, &[u64::MAX, 0xff, 0, 0])),
    denied_unless("syslog(invalid action, NULL, 0)", "syslog",
        || sys(libc::SYS_syslog, &[0x7fff, 0, 0]),
        "the kernel checks CAP_SYSLOG (or dmesg_restrict) before the action"),
    denied("settimeofday(bad address, NULL)", "settimeofday",
        || sys(libc::SYS_settimeofday, &[BAD_ADDRESS, 0])),
    denied("clock_settime(CLOCK_REALTIME, bad address)", "clock_settime",
        || sys(libc::SYS_clock_settime, &[libc::CLOCK_REALTIME as u64, BAD_ADDRESS])),
    denied("clock_adjtime(CLOCK_REALTIME, bad address)", "clock_adjtime",
        || sys(libc::SYS_clock_adjtime, &[libc::CLOCK_REALTIME as u64, BAD_ADDRESS])),
    denied("adjtimex(bad address)", "adjtimex",
        || sys(libc::SYS_adjtimex, &[BAD_ADDRESS])),
    denied_unless("fanotify_init(invalid flags, 0)", "fanotify_init",
        || sys(libc::SYS_fanotify_init, &[0x8000_0000, 0]),
        "the kernel checks CAP_SYS_ADMIN before the flags"),
    denied("personality(ADDR_NO_RANDOMIZE)", "personality",
        || sys(libc::SYS_personality, &[ADDR_NO_RANDOMIZE])),

    // Networking.
    denied("socket(AF_PACKET, invalid type, 0)", "socket",
        || closing(sys(libc::SYS_socket, &[libc::AF_PACKET as u64, INVALID_SOCKET_TYPE, 0]))),
    denied_unless("socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, 0)", "socket",
        || closing(sys(libc::SYS_socket, &[libc::AF_PACKET as u64, (libc::SOCK_RAW | libc::SOCK_CLOEXEC) as u64, 0])),
        "packet sockets need CAP_NET_RAW"),
    denied("socket(AF_ALG, SOCK_SEQPACKET, 0)", "socket",
        || closing(sys(libc::SYS_socket, &[libc::AF_ALG as u64, libc::SOCK_SEQPACKET as u64, 0]))),
    denied("socket(AF_NETLINK, SOCK_RAW, NETLINK_AUDIT)", "socket",
        || closing(sys(libc::SYS_socket, &[libc::AF_NETLINK as u64, (libc::SOCK_RAW | libc::SOCK_CLOEXEC) as u64, NETLINK_AUDIT]))),
    denied_unless("socket(AF_INET, SOCK_RAW | SOCK_CLOEXEC, IPPROTO_ICMP)", "socket",
        || closing(sys(libc::SYS_socket, &[libc::AF_INET as u64, (libc::SOCK_RAW | libc::SOCK_CLOEXEC) as u64, libc::IPPROTO_ICMP as u64])),
        "raw sockets need CAP_NET_RAW"),
    denied("socket(AF_INET, SOCK_RAW | SOCK_NONBLOCK, invalid protocol)", "socket",
        || closing(sys(libc::SYS_socket, &[libc::AF_INET as u64, (libc::SOCK_RAW | libc::SOCK_NONBLOCK) as u64, INVALID_INET_PROTOCOL]))),
    // The kernel reads the family as an int: high bits must not hide AF_INET from the filter.
    denied("socket(AF_INET | 1 << 32, SOCK_RAW, invalid protocol)", "socket",
        || closing(sys(libc::SYS_socket, &[libc::AF_INET as u64 | 1 << 32, libc::SOCK_RAW as u64, INVALID_INET_PROTOCOL]))),
    denied_unless("socket(AF_INET, SOCK_PACKET, 0)", "socket",
        || closing(sys(libc::SYS_socket, &[libc::AF_INET as u64, 10, 0])),
        "it becomes a packet socket, which needs CAP_NET_RAW"),
    denied("socket(AF_INET6, SOCK_RAW, invalid protocol)", "socket",
        || closing(sys(libc::SYS_socket, &[libc::AF_INET6 as u64, libc::SOCK_RAW as u64, INVALID_INET_PROTOCOL]))),
    denied("socket(AF_INET6, SOCK_PACKET, 0)", "socket",
        || closing(sys(libc::SYS_socket, &[libc::AF_INET6 as u64, 10, 0]))),
    denied("socketpair(AF_INET, SOCK_STREAM, 0, ..)", "socketpair", || {
        let mut pair = [-1 as libc::c_int; 2];
        let outcome = sys(libc::SYS_socketpair, &[libc::AF_INET as u64, libc::SOCK_STREAM as u64, 0, pair.as_mut_ptr() as u64]);
        for fd in pair.into_iter().filter(|&fd| fd >= 0) {
            sys(libc::SYS_close, &[fd as u64]);
        }
        outcome
    }),

    // Setuid and setgid bits: on a path that does not exist the kernel answers ENOENT, on
    // descriptor -1 EBADF; the filter answers first.
    denied("fchmod(-1, 04755)", "fchmod", || sys(libc::SYS_fchmod, &[u64::MAX, 0o4755])),
    denied("fchmodat(AT_FDCWD, missing, 02755)", "fchmodat",
        || sys(libc::SYS_fchmodat, &[AT_FDCWD, missing_path(), 0o2755])),
    denied("fchmodat2(AT_FDCWD, missing, 04755, 0)", "fchmodat2",
        || sys(452, &[AT_FDCWD, missing_path(), 0o4755, 0])),
    denied("openat(AT_FDCWD, missing, O_CREAT, 04755)", "openat",
        || sys(libc::SYS_openat, &[AT_FDCWD, missing_path(), (libc::O_CREAT | libc::O_WRONLY) as u64, 0o4755])),
    denied("mknodat(AT_FDCWD, missing, S_IFREG | 02755, 0)", "mknodat",
        || sys(libc::SYS_mknodat, &[AT_FDCWD, missing_path(), (libc::S_IFREG | 0o2755) as u64, 0])),
    // Group and other write by chmod: a writable bind is lent for writing, not for opening
    // the host's file to every local user.
    denied("fchmod(-1, 0666)", "fchmod", || sys(libc::SYS_fchmod, &[u64::MAX, 0o666])),
    denied("fchmodat(AT_FDCWD, missing, 0777)", "fchmodat",
        || sys(libc::SYS_fchmodat, &[AT_FDCWD, missing_path(), 0o777])),
    denied("fchmodat(AT_FDCWD, missing, 0620)", "fchmodat",
        || sys(libc::SYS_fchmodat, &[AT_FDCWD, missing_path(), 0o620])),
    denied("fchmodat2(AT_FDCWD, missing, 0602, 0)", "fchmodat2",
        || sys(452, &[AT_FDCWD, missing_path(), 0o602, 0])),
    Denied {
        call: "openat2(AT_FDCWD, \"/\", NULL, 0)",
        syscall: "openat2",
        make: || sys(libc::SYS_openat2, &[AT_FDCWD, c"/".as_ptr() as u64, 0, 0]),
        errno: libc::ENOSYS,
        kernel_may_return_it: Some("kernels before 5.6 have no openat2"),
    },
    // Interfaces with no use in a sandbox, each with arguments the kernel rejects.
    denied("open_tree_attr(-1, NULL, 0, NULL, 0)", "open_tree_attr",
        || sys(467, &[u64::MAX, 0, 0, 0, 0])),
    denied("listmount(NULL, NULL, 0, 0)", "listmount", || sys(458, &[0, 0, 0, 0])),
    denied("statmount(NULL, NULL, 0, 0)", "statmount", || sys(457, &[0, 0, 0, 0])),
    denied("kcmp(no pid, no pid, 0, 0, 0)", "kcmp", || sys(libc::SYS_kcmp, &[NO_PID, NO_PID, 0, 0, 0])),
    denied("memfd_secret(invalid flags)", "memfd_secret", || sys(447, &[0xffff])),

    // Terminals. On a pipe the kernel answers ENOTTY; on the child's own pseudo-terminal
    // TIOCSTI really injects (into a terminal nobody reads) when unfiltered and privileged.
    denied("ioctl(pipe, TIOCSTI)", "ioctl", || ioctl_on_pipe(libc::TIOCSTI)),
    denied("ioctl(pipe, TIOCLINUX)", "ioctl", || ioctl_on_pipe(libc::TIOCLINUX)),
    // The kernel reads the request as an unsigned int: high bits must not hide TIOCSTI.
    denied("ioctl(pipe, TIOCSTI | 1 << 32)", "ioctl", || ioctl_on_pipe(libc::TIOCSTI | 1 << 32)),
    denied_unless("ioctl(own pty, TIOCSTI)", "ioctl", || ioctl_on_pty(libc::TIOCSTI),
        "TIOCSTI on a terminal other than the caller's controlling one needs CAP_SYS_ADMIN"),
];

/// Denied calls that exist only on x86_64.
#[cfg(target_arch = "x86_64")]
#[rustfmt::skip]
const DENIED_ON_ARCH: &[Denied] = &[
    denied("iopl(4)", "iopl", || sys(libc::SYS_iopl, &[4])),
    denied("ioperm(0, 0, 1)", "ioperm", || sys(libc::SYS_ioperm, &[0, 0, 1])),
    denied("uselib(bad address)", "uselib", || sys(libc::SYS_uselib, &[BAD_ADDRESS])),
    denied("chmod(missing, 04755)", "chmod", || sys(libc::SYS_chmod, &[missing_path(), 0o4755])),
    denied("open(missing, O_CREAT, 02755)", "open",
        || sys(libc::SYS_open, &[missing_path(), (libc::O_CREAT | libc::O_WRONLY) as u64, 0o2755])),
    denied("creat(missing, 04755)", "creat", || sys(libc::SYS_creat, &[missing_path(), 0o4755])),
    denied("mknod(missing, S_IFREG | 04755, 0)", "mknod",
        || sys(libc::SYS_mknod, &[missing_path(), (libc::S_IFREG | 0o4755) as u64, 0])),
    denied("modify_ldt(invalid function, NULL, 0)", "modify_ldt", || sys(libc::SYS_modify_ldt, &[0xff, 0, 0])),
];
#[cfg(not(target_arch = "x86_64"))]
const DENIED_ON_ARCH: &[Denied] = &[];

fn all_denied() -> impl Iterator<Item = &'static Denied> {
    DENIED.iter().chain(DENIED_ON_ARCH)
}

fn native() -> Arch {
    match Arch::native() {
        Some(arch) => arch,
        None => panic!(
            "warden has no seccomp filter for {}",
            std::env::consts::ARCH
        ),
    }
}

#[test]
fn every_denied_call_fails_with_the_rules_errno_under_the_filter_and_not_without_it() {
    let cases: Vec<&Denied> = all_denied().collect();
    let calls: Vec<fn() -> Outcome> = cases.iter().map(|case| case.make).collect();
    let filtered = outcomes_in_child(Filter::Installed, &calls);
    let unfiltered = outcomes_in_child(Filter::Absent, &calls);

    let mut failures = Vec::new();
    for ((case, with), without) in cases.iter().zip(&filtered).zip(&unfiltered) {
        if with.errno() != Some(case.errno) {
            failures.push(format!(
                "{}: under the filter it {with}, expected errno {}",
                case.call, case.errno
            ));
        }
        if without.errno() == Some(case.errno) {
            match case.kernel_may_return_it {
                Some(why) => eprintln!(
                    "skipped the unfiltered half for {}: the kernel itself {without} here ({why})",
                    case.call
                ),
                None => failures.push(format!(
                    "{}: without the filter it also {without}, so the filter's errno is not proved",
                    case.call
                )),
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn every_rule_on_this_architecture_is_proved_by_a_denied_call() {
    let arch = native();
    let missing: Vec<&str> = RULES
        .iter()
        .filter(|rule| rule.only_on.is_none_or(|only| only == arch))
        .map(|rule| rule.syscall)
        .filter(|syscall| !all_denied().any(|case| case.syscall == *syscall))
        .collect();
    assert!(
        missing.is_empty(),
        "rules without a denied call: {missing:?}"
    );
    for case in all_denied() {
        let rule = RULES.iter().find(|rule| rule.syscall == case.syscall);
        assert!(
            rule.is_some_and(|rule| rule.errno == case.errno),
            "{} is not denied by the table with errno {}",
            case.call,
            case.errno
        );
    }
    // Every namespace flag has its own call, for unshare and for clone.
    for (syscall, mask, marker) in [
        ("unshare", seccomp::NAMESPACE_FLAGS, " | CLONE_PARENT)"),
        ("clone", seccomp::CLONE_NAMESPACE_FLAGS, " | CLONE_THREAD)"),
    ] {
        let rule = RULES.iter().find(|rule| rule.syscall == syscall);
        assert!(
            rule.is_some_and(|rule| rule.when == When::AnyBitSet { arg: 0, mask }),
            "{syscall} is denied for exactly the namespace flags"
        );
        let per_flag = all_denied()
            .filter(|case| case.syscall == syscall && case.call.ends_with(marker))
            .count();
        assert_eq!(
            per_flag,
            mask.count_ones() as usize,
            "one call per namespace flag of {syscall}"
        );
    }
}

/// `posix_spawn("/bin/true")` and wait: libc's spawn tries clone3 first, and falls back to clone
/// when told ENOSYS. Returns the raw wait status (0: it ran and exited with 0).
fn spawn_true() -> Outcome {
    let path = c"/bin/true";
    let argv = [path.as_ptr().cast_mut(), std::ptr::null_mut()];
    let envp = [std::ptr::null_mut::<libc::c_char>()];
    let mut pid: libc::pid_t = 0;
    // SAFETY: the path, argv and envp are NUL-terminated and live across the call; NULL file
    // actions and attributes are allowed.
    let rc = unsafe {
        libc::posix_spawn(
            &mut pid,
            path.as_ptr(),
            std::ptr::null(),
            std::ptr::null(),
            argv.as_ptr(),
            envp.as_ptr(),
        )
    };
    if rc != 0 {
        return Outcome::Failed(rc);
    }
    let mut status: libc::c_int = -1;
    match sys(
        libc::SYS_wait4,
        &[pid as u64, std::ptr::addr_of_mut!(status) as u64],
    ) {
        Outcome::Returned(_) => Outcome::Returned(i64::from(status)),
        failed => failed,
    }
}

extern "C" fn idle_thread(_: *mut libc::c_void) -> *mut libc::c_void {
    std::ptr::null_mut()
}

/// Starts a thread and joins it (libc's pthread_create also tries clone3 first).
fn start_and_join_thread() -> Outcome {
    let mut thread: libc::pthread_t = 0;
    // SAFETY: `thread` outlives the call, NULL attributes are allowed, and `idle_thread` is an
    // `extern "C"` function that ignores its NULL argument.
    let rc = unsafe {
        libc::pthread_create(
            &mut thread,
            std::ptr::null(),
            idle_thread,
            std::ptr::null_mut(),
        )
    };
    if rc != 0 {
        return Outcome::Failed(rc);
    }
    // SAFETY: `thread` was just created, is joinable and is joined once.
    let rc = unsafe { libc::pthread_join(thread, std::ptr::null_mut()) };
    if rc == 0 {
        Outcome::Returned(0)
    } else {
        Outcome::Failed(rc)
    }
}

/// What an allowed call must do under the filter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    /// Succeed, returning anything.
    Success,
    /// Succeed, returning exactly this (a wait status of 0, for calls that run a process).
    Returns(i64),
    /// Reach the kernel: fail, if at all, with anything but EPERM (for calls whose success
    /// depends on the host, such as IPv6 being enabled).
    NotDenied,
}

/// A call the filter must let through.
struct Allowed {
    /// The call as a reader would write it.
    call: &'static str,
    /// Makes the call in the child.
    make: fn() -> Outcome,
    /// What it must do under the filter.
    expect: Expect,
}

const fn allowed(call: &'static str, make: fn() -> Outcome, expect: Expect) -> Allowed {
    Allowed { call, make, expect }
}

/// Calls ordinary programs make that the filter's conditional rules must not catch.
#[rustfmt::skip]
const ALLOWED: &[Allowed] = &[
    allowed("socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)",
        || closing(sys(libc::SYS_socket, &[libc::AF_INET as u64, (libc::SOCK_STREAM | libc::SOCK_CLOEXEC) as u64, 0])),
        Expect::Success),
    allowed("socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0)",
        || closing(sys(libc::SYS_socket, &[libc::AF_INET as u64, (libc::SOCK_DGRAM | libc::SOCK_NONBLOCK) as u64, 0])),
        Expect::Success),
    allowed("socket(AF_INET6, SOCK_STREAM, 0)",
        || closing(sys(libc::SYS_socket, &[libc::AF_INET6 as u64, libc::SOCK_STREAM as u64, 0])),
        Expect::NotDenied),
    allowed("socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)",
        || closing(sys(libc::SYS_socket, &[libc::AF_UNIX as u64, (libc::SOCK_STREAM | libc::SOCK_CLOEXEC) as u64, 0])),
        Expect::Success),
    allowed("socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE)",
        || closing(sys(libc::SYS_socket, &[libc::AF_NETLINK as u64, (libc::SOCK_RAW | libc::SOCK_CLOEXEC) as u64, 0])),
        Expect::Success),
    allowed("socketpair(AF_UNIX, SOCK_STREAM, 0, ..)", || {
        let mut pair = [-1 as libc::c_int; 2];
        let outcome = sys(libc::SYS_socketpair, &[libc::AF_UNIX as u64, libc::SOCK_STREAM as u64, 0, pair.as_mut_ptr() as u64]);
        for fd in pair.into_iter().filter(|&fd| fd >= 0) {
            sys(libc::SYS_close, &[fd as u64]);
        }
        outcome
    }, Expect::Returns(0)),
    allowed("ioctl(own pty, TIOCGWINSZ)", || ioctl_on_pty(libc::TIOCGWINSZ), Expect::Returns(0)),
    allowed("personality(0xffffffff), the query", || sys(libc::SYS_personality, &[0xffff_ffff]), Expect::Success),
    allowed("personality(PER_LINUX)", || sys(libc::SYS_personality, &[0]), Expect::Success),
    allowed("clone(SIGCHLD), a plain fork", || clone_and_reap(libc::SIGCHLD as u64), Expect::Returns(0)),
    allowed("unshare(CLONE_FILES), no namespace", || sys(libc::SYS_unshare, &[libc::CLONE_FILES as u64]), Expect::Returns(0)),
    allowed(SPAWN_TRUE, spawn_true, Expect::Returns(0)),
    allowed("pthread_create, through libc's clone3 fallback", start_and_join_thread, Expect::Returns(0)),
];

const SPAWN_TRUE: &str = "posix_spawn(/bin/true), through libc's clone3 fallback";

#[test]
fn ordinary_calls_still_work_under_the_filter() {
    let have_true = std::path::Path::new("/bin/true").exists();
    if !have_true {
        eprintln!("skipped {SPAWN_TRUE}: this host has no /bin/true");
    }
    let cases: Vec<&Allowed> = ALLOWED
        .iter()
        .filter(|case| have_true || case.call != SPAWN_TRUE)
        .collect();
    let calls: Vec<fn() -> Outcome> = cases.iter().map(|case| case.make).collect();
    let outcomes = outcomes_in_child(Filter::Installed, &calls);
    let failures: Vec<String> = cases
        .iter()
        .zip(&outcomes)
        .filter(|&(case, &outcome)| match (case.expect, outcome) {
            (Expect::Success, Outcome::Returned(_)) => false,
            (Expect::Returns(want), Outcome::Returned(got)) => want != got,
            (Expect::NotDenied, outcome) => outcome.errno() == Some(EPERM),
            _ => true,
        })
        .map(|(case, outcome)| format!("{}: {outcome}, expected {:?}", case.call, case.expect))
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Values around every edge of an allow-list and of every power of two, where a wrong split
/// of "none of these values" into filter rules would show.
fn edges_of(allowed: &[u64]) -> std::collections::BTreeSet<u64> {
    let mut values = std::collections::BTreeSet::new();
    for &value in allowed {
        values.extend([value.wrapping_sub(1), value, value.wrapping_add(1)]);
        values.insert(value | 1 << 32);
        values.insert(value | 1 << 63);
    }
    for shift in 0..64 {
        let power = 1_u64 << shift;
        values.extend([power - 1, power, power.wrapping_add(1)]);
    }
    values.insert(u64::MAX);
    values
}

#[test]
fn personality_is_denied_for_every_value_outside_its_allow_list_and_only_those() {
    const ALLOWED: [u64; 4] = [0, 0x0008, 0x0020000, 0xffff_ffff];
    let values: Vec<u64> = edges_of(&ALLOWED).into_iter().collect();
    let run = in_child(Filter::Installed, |report| {
        for &value in &values {
            report.push(sys(libc::SYS_personality, &[value]));
        }
    });
    assert!(
        matches!(run.status, WaitStatus::Exited(_, 0)),
        "{:?}",
        run.status
    );
    assert_eq!(run.outcomes.len(), values.len());
    let wrong: Vec<String> = values
        .iter()
        .zip(&run.outcomes)
        .filter(|&(value, outcome)| (outcome.errno() == Some(EPERM)) == ALLOWED.contains(value))
        .map(|(value, outcome)| format!("personality({value:#x}) {outcome}"))
        .collect();
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn socket_is_denied_for_every_family_and_netlink_protocol_outside_its_allow_lists() {
    const FAMILIES: [u64; 4] = [
        libc::AF_UNIX as u64,
        libc::AF_INET as u64,
        libc::AF_INET6 as u64,
        libc::AF_NETLINK as u64,
    ];
    // An invalid type makes the kernel answer EINVAL for every family it knows, before the
    // family's own code runs, so nothing is created and no privilege matters.
    let families: Vec<u64> = (0..=64).chain(edges_of(&FAMILIES)).collect();
    let protocols: Vec<u64> = (0..=33).chain([1 << 32, u64::MAX]).collect();
    let run = in_child(Filter::Installed, |report| {
        for &family in &families {
            report.push(sys(libc::SYS_socket, &[family, INVALID_SOCKET_TYPE, 0]));
        }
        for &protocol in &protocols {
            report.push(closing(sys(
                libc::SYS_socket,
                &[
                    libc::AF_NETLINK as u64,
                    (libc::SOCK_RAW | libc::SOCK_CLOEXEC) as u64,
                    protocol,
                ],
            )));
        }
    });
    assert!(
        matches!(run.status, WaitStatus::Exited(_, 0)),
        "{:?}",
        run.status
    );
    assert_eq!(run.outcomes.len(), families.len() + protocols.len());
    let (by_family, by_protocol) = run.outcomes.split_at(families.len());
    let mut wrong = Vec::new();
    for (&family, &outcome) in families.iter().zip(by_family) {
        let expected = if FAMILIES.contains(&family) {
            Outcome::Failed(libc::EINVAL)
        } else {
            Outcome::Failed(EPERM)
        };
        if outcome != expected {
            wrong.push(format!(
                "socket({family:#x}, invalid type, 0) {outcome}, expected {expected}"
            ));
        }
    }
    for (&protocol, &outcome) in protocols.iter().zip(by_protocol) {
        let denied = outcome.errno() == Some(EPERM);
        if denied != (protocol != 0) || (protocol == 0 && !matches!(outcome, Outcome::Returned(_)))
        {
            wrong.push(format!(
                "socket(AF_NETLINK, SOCK_RAW, {protocol:#x}) {outcome}"
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn the_filter_allows_by_default_holds_only_the_native_abi_and_kills_on_any_other() {
    let filter = match seccomp::build_filter() {
        Ok(filter) => filter,
        Err(error) => panic!("cannot build the filter: {error}"),
    };
    assert_eq!(filter.get_act_default().ok(), Some(ScmpAction::Allow));
    assert_eq!(filter.get_act_badarch().ok(), Some(ScmpAction::KillProcess));
    assert_eq!(filter.get_ctl_nnp().ok(), Some(true));
    assert_eq!(filter.is_arch_present(native().scmp()).ok(), Some(true));
    for foreign in [
        ScmpArch::X86,
        ScmpArch::X32,
        ScmpArch::X8664,
        ScmpArch::Arm,
        ScmpArch::Aarch64,
    ] {
        if foreign != native().scmp() {
            assert_eq!(
                filter.is_arch_present(foreign).ok(),
                Some(false),
                "{foreign:?} is not in the filter"
            );
        }
    }
}

/// Calls through the other ABIs of an x86_64 CPU, which the filter does not contain.
#[cfg(target_arch = "x86_64")]
mod x86_64_foreign_abis {
    use super::*;
    use nix::sys::signal::Signal;

    /// Runs one call without the filter and under it, in children that cannot dump core (a
    /// killed child must leave no core file or crash report behind). Returns both runs.
    fn both_ways(call: fn() -> Outcome) -> (ChildRun, ChildRun) {
        let body = |report: &mut Report| {
            if nix::sys::prctl::set_dumpable(false).is_err() {
                exit_now(CHILD_SETUP_FAILED);
            }
            report.push(call());
        };
        (
            in_child(Filter::Absent, body),
            in_child(Filter::Installed, body),
        )
    }

    #[test]
    fn x32_system_calls_kill_the_process_under_the_filter_and_not_without_it() {
        // getpid in the x32 ABI: the x86_64 number with the x32 bit set. The kernel reports x32
        // calls with the x86_64 audit architecture, so only the number tells them apart.
        const X32_GETPID: libc::c_long = 0x4000_0000 | libc::SYS_getpid;
        let (unfiltered, filtered) = both_ways(|| sys(X32_GETPID, &[]));
        // Without the filter the call returns (ENOSYS where the kernel lacks x32, a PID otherwise).
        assert!(
            matches!(unfiltered.status, WaitStatus::Exited(_, 0)) && unfiltered.outcomes.len() == 1,
            "without the filter: {:?}, {:?}",
            unfiltered.status,
            unfiltered.outcomes
        );
        assert!(
            matches!(filtered.status, WaitStatus::Signaled(_, Signal::SIGSYS, _))
                && filtered.outcomes.is_empty(),
            "under the filter: {:?}, {:?}",
            filtered.status,
            filtered.outcomes
        );
    }

    /// getpid through the i386 entry point (`int 0x80`), which a 64-bit process can still use
    /// where the kernel has IA-32 emulation.
    fn i386_getpid() -> Outcome {
        const I386_GETPID: i64 = 20;
        let ret: i64;
        // SAFETY: i386 getpid takes no arguments and touches no memory. The kernel preserves every
        // register across `int 0x80` except rax (the result) and r8-r11, which it clears; all are
        // declared. No stack is used.
        unsafe {
            std::arch::asm!(
                "int 0x80",
                inlateout("rax") I386_GETPID => ret,
                lateout("r8") _,
                lateout("r9") _,
                lateout("r10") _,
                lateout("r11") _,
                options(nostack),
            );
        }
        if (-4095..0).contains(&ret) {
            Outcome::Failed(i32::try_from(-ret).unwrap_or(0))
        } else {
            Outcome::Returned(ret)
        }
    }

    #[test]
    fn i386_system_calls_kill_the_process_under_the_filter_and_not_without_it() {
        let (unfiltered, filtered) = both_ways(i386_getpid);
        if matches!(
            unfiltered.status,
            WaitStatus::Signaled(_, Signal::SIGSEGV, _)
        ) {
            // Without IA-32 emulation `int 0x80` faults before any system call exists for seccomp
            // to see: there is no such ABI to close on this host.
            eprintln!(
                "skipped: this kernel has no IA-32 emulation, int 0x80 faults without a filter"
            );
            return;
        }
        assert!(
            matches!(unfiltered.status, WaitStatus::Exited(_, 0))
                && matches!(unfiltered.outcomes.as_slice(), [Outcome::Returned(pid)] if *pid > 0),
            "without the filter: {:?}, {:?}",
            unfiltered.status,
            unfiltered.outcomes
        );
        assert!(
            matches!(filtered.status, WaitStatus::Signaled(_, Signal::SIGSYS, _))
                && filtered.outcomes.is_empty(),
            "under the filter: {:?}, {:?}",
            filtered.status,
            filtered.outcomes
        );
    }
}

// AArch32 calls on aarch64 take the same bad-architecture action, but only a 32-bit program can
// make them, which this test binary cannot be; the filter configuration test above checks that
// the ARM architecture is absent from the filter.

#[test]
fn every_rule_names_a_syscall_that_exists_on_exactly_the_architectures_it_is_meant_for() {
    let mut wrong = Vec::new();
    for rule in RULES.iter().chain(seccomp::DEGRADED_RULES) {
        for arch in Arch::ALL {
            // Syscalls newer than this libseccomp have one number on every architecture.
            let unified = seccomp::UNIFIED_NUMBERS
                .iter()
                .any(|(name, _)| *name == rule.syscall);
            let exists = unified
                || matches!(
                    ScmpSyscall::from_name_by_arch(rule.syscall, arch.scmp()),
                    Ok(syscall) if syscall.as_raw_syscall() >= 0
                );
            let meant = rule.only_on.is_none_or(|only| only == arch);
            if exists != meant {
                wrong.push(format!(
                    "{}: exists on {}: {exists}, rule meant for it: {meant}",
                    rule.syscall,
                    arch.name()
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn every_rule_says_why_and_returns_eperm_or_enosys() {
    for rule in RULES {
        assert!(
            !rule.reason.trim().is_empty(),
            "the rule for {} has no reason",
            rule.syscall
        );
        assert!(
            rule.errno == libc::EPERM || rule.errno == libc::ENOSYS,
            "the rule for {} returns errno {}",
            rule.syscall,
            rule.errno
        );
    }
    for (index, rule) in RULES.iter().enumerate() {
        assert!(
            !RULES.iter().skip(index + 1).any(|other| other == rule),
            "the rule for {} is listed twice",
            rule.syscall
        );
    }
}

#[test]
fn the_filter_builds_for_the_running_architecture() {
    if let Err(error) = seccomp::build_filter() {
        panic!("cannot build the filter: {error}");
    }
}

#[test]
fn seccomp_program_matches_the_rule_table() {
    // The init loads the program the build script compiled; it must be
    // exactly what libseccomp builds from RULES now.
    let filter = seccomp::build_filter().expect("the filter builds");
    let path = std::env::temp_dir().join(format!("warden-bpf-{}", std::process::id()));
    let file = std::fs::File::create(&path).expect("create a scratch file");
    filter.export_bpf(&file).expect("export the filter");
    drop(file);
    let built = std::fs::read(&path).expect("read the exported filter");
    let _ = std::fs::remove_file(&path);
    assert!(!built.is_empty());
    assert_eq!(built, warden_jail::SECCOMP_PROGRAM);
}

#[test]
fn degraded_mode_refuses_every_metadata_call_through_a_descriptor_as_it_does_by_path() {
    let refused_always = |name: &str| {
        seccomp::DEGRADED_RULES
            .iter()
            .any(|rule| rule.syscall == name && rule.when == When::Always)
    };
    let mut open = Vec::new();
    for (path, fd) in seccomp::DEGRADED_FD_TWINS {
        for call in [path, fd] {
            if !refused_always(call) {
                open.push(format!("{call} (the pair {path} / {fd})"));
            }
        }
    }
    assert!(open.is_empty(), "not refused outright: {}", open.join(", "));
    // Every metadata rule of the list is in a pair: a path call added later without its
    // descriptor twin fails here. The socket and link rules are not about a file's metadata.
    let unpaired: Vec<&str> = seccomp::DEGRADED_RULES
        .iter()
        .map(|rule| rule.syscall)
        .filter(|name| !["socket", "link", "linkat"].contains(name))
        .filter(|name| {
            !seccomp::DEGRADED_FD_TWINS
                .iter()
                .any(|(path, fd)| path == name || fd == name)
        })
        .collect();
    assert!(unpaired.is_empty(), "without a twin: {unpaired:?}");
}
