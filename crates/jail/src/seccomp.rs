//! The sandbox's seccomp-bpf filter: the system calls code inside a sandbox may never make, and why.
//!
//! The policy is the [`RULES`] table, one line per rule with the threat it closes. [`build_filter`]
//! turns it into a libseccomp filter for the running architecture and [`install`] loads that filter
//! into the calling process, the last step before the sandbox execs. The filter allows by default
//! and denies a list: namespaces, the mount tree, Landlock and capabilities already confine the
//! sandbox, and seccomp removes the kernel attack surface those layers cannot reach (keyrings,
//! eBPF, io_uring, module loading, raw sockets, terminal injection...). A denied call fails with
//! `EPERM` (or `ENOSYS` where a fallback is wanted), the errno that well-behaved programs already
//! handle, rather than killing the process.
//!
//! This module never assembles BPF by hand (libseccomp does, including the architecture checks),
//! and never varies the filter per sandbox: every sandbox gets the same table (a degraded sandbox,
//! and one with an exec allowlist, get a second, fixed table on top).

use libseccomp::error::SeccompError as ScmpError;
use libseccomp::{
    ScmpAction, ScmpArch, ScmpArgCompare, ScmpCompareOp, ScmpFilterContext, ScmpSyscall,
};
use When::Always;

/// Why the filter could not be built or loaded.
#[derive(Debug, thiserror::Error)]
pub enum SeccompError {
    /// warden has no filter for this CPU architecture.
    #[error(
        "seccomp filtering is not supported on the {arch} architecture; \
         warden supports x86_64 and aarch64"
    )]
    UnsupportedArch {
        /// The architecture warden was built for.
        arch: &'static str,
    },
    /// libseccomp could not create a filter context.
    #[error("cannot create a seccomp filter context")]
    CreateContext {
        /// libseccomp's error.
        #[source]
        source: ScmpError,
    },
    /// A filter attribute (bad-architecture action, no_new_privs, thread sync) could not be set.
    #[error("cannot set the seccomp filter attribute {attribute}")]
    SetAttribute {
        /// The attribute, as libseccomp names it.
        attribute: &'static str,
        /// libseccomp's error.
        #[source]
        source: ScmpError,
    },
    /// A syscall name in [`RULES`] is unknown to libseccomp: a typo, or a libseccomp older than
    /// the table.
    #[error("system call {syscall} in the seccomp rule table is unknown to libseccomp on {arch}")]
    UnknownSyscall {
        /// The name from the table.
        syscall: &'static str,
        /// The architecture it was resolved for.
        arch: &'static str,
        /// libseccomp's error.
        #[source]
        source: ScmpError,
    },
    /// A syscall in [`RULES`] does not exist on this architecture but its rule is not marked
    /// architecture-specific.
    #[error(
        "system call {syscall} in the seccomp rule table does not exist on {arch}; \
         mark its rule with only_on"
    )]
    AbsentOnArch {
        /// The name from the table.
        syscall: &'static str,
        /// The running architecture.
        arch: &'static str,
    },
    /// A rule has a condition that matches nothing or everything by mistake (no comparison, or
    /// an empty bit mask).
    #[error("the seccomp rule for {syscall} has an empty condition")]
    EmptyCondition {
        /// The rule's syscall.
        syscall: &'static str,
    },
    /// A rule has more than one [`Cond::NotIn`]; each expands to several filter rules, and two
    /// would multiply.
    #[error("the seccomp rule for {syscall} has more than one NotIn condition")]
    SeveralNotIn {
        /// The rule's syscall.
        syscall: &'static str,
    },
    /// A [`Cond::NotIn`] lists its values out of order or twice.
    #[error("the seccomp rule for {syscall} lists NotIn values that are not strictly ascending")]
    UnsortedValues {
        /// The rule's syscall.
        syscall: &'static str,
    },
    /// A rule compares more arguments than one filter rule can hold.
    #[error("the seccomp rule for {syscall} has more than {limit} argument comparisons")]
    TooManyComparisons {
        /// The rule's syscall.
        syscall: &'static str,
        /// The most comparisons one rule may have.
        limit: usize,
    },
    /// A rule returns an errno a seccomp filter cannot return.
    #[error("the seccomp rule for {syscall} returns errno {errno}, outside 1..=4095")]
    InvalidErrno {
        /// The rule's syscall.
        syscall: &'static str,
        /// The errno from the table.
        errno: i32,
    },
    /// libseccomp refused a rule.
    #[error("cannot add the seccomp rule for {syscall}")]
    AddRule {
        /// The rule's syscall.
        syscall: &'static str,
        /// libseccomp's error.
        #[source]
        source: ScmpError,
    },
    /// The kernel refused the filter.
    #[error("cannot load the seccomp filter into the kernel")]
    Load {
        /// libseccomp's error, which carries the kernel's errno.
        #[source]
        source: ScmpError,
    },
}

/// A CPU architecture warden has a filter for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Arch {
    /// x86-64, the 64-bit ABI only (not x32, not i386).
    X86_64,
    /// AArch64, the 64-bit ABI only (not AArch32).
    Aarch64,
}

impl Arch {
    /// Every architecture warden builds filters for.
    pub const ALL: [Arch; 2] = [Arch::X86_64, Arch::Aarch64];

    /// The architecture this binary was built for, or `None` if warden has no filter for it.
    pub const fn native() -> Option<Arch> {
        if cfg!(target_arch = "x86_64") {
            Some(Arch::X86_64)
        } else if cfg!(target_arch = "aarch64") {
            Some(Arch::Aarch64)
        } else {
            None
        }
    }

    /// libseccomp's token for this architecture.
    pub const fn scmp(self) -> ScmpArch {
        match self {
            Arch::X86_64 => ScmpArch::X8664,
            Arch::Aarch64 => ScmpArch::Aarch64,
        }
    }

    /// The architecture's usual name.
    pub const fn name(self) -> &'static str {
        match self {
            Arch::X86_64 => "x86_64",
            Arch::Aarch64 => "aarch64",
        }
    }
}

/// One rule of the filter: calls to `syscall` matching `when` fail with `errno`.
///
/// Several rules on one syscall are OR'ed: a call is denied if any of them matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rule {
    /// The system call, as the kernel and libseccomp name it.
    pub syscall: &'static str,
    /// Which calls the rule denies.
    pub when: When,
    /// The errno a denied call returns: `EPERM`, or `ENOSYS` to make libc fall back.
    pub errno: i32,
    /// The threat the rule closes, for reviewers and for the audit log.
    pub reason: &'static str,
    /// `Some(arch)` if the syscall exists only on that architecture; the rule is skipped
    /// elsewhere. `None`: the syscall must exist on every architecture of [`Arch::ALL`].
    pub only_on: Option<Arch>,
}

/// Which calls of a syscall a [`Rule`] denies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum When {
    /// Every call.
    Always,
    /// Calls whose argument `arg` has any bit of `mask` set. A filter comparison can only test
    /// for one exact masked value, so this becomes one filter rule per bit, OR'ed.
    AnyBitSet {
        /// Argument index, from 0.
        arg: u32,
        /// The bits, any of which denies the call.
        mask: u64,
    },
    /// Calls matching every one of the conditions, each on a different argument (libseccomp
    /// compares an argument once per rule). One filter rule, or one per piece of a
    /// [`Cond::NotIn`], of which a rule may have one.
    All(&'static [Cond]),
}

/// A condition on one argument of a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cond {
    /// The low 32 bits of argument `arg` equal `value`. For arguments the kernel declares `int` or
    /// `unsigned int`: it ignores the high half of the register, so the match must ignore it too,
    /// or a caller could hide a denied value behind stray high bits.
    Low32Eq {
        /// Argument index, from 0.
        arg: u32,
        /// The value that matches.
        value: u32,
    },
    /// `argument & mask == value`, on all 64 bits.
    MaskedEq {
        /// Argument index, from 0.
        arg: u32,
        /// The bits compared.
        mask: u64,
        /// What they must equal.
        value: u64,
    },
    /// Argument `arg`, all 64 bits of it, is none of `values`. Used for allow-lists: a value
    /// with stray high bits matches, so the call is denied, which fails closed.
    ///
    /// A filter rule cannot say "none of these" (one comparison per argument), so this becomes
    /// one rule per piece of the complement: below the smallest value, above the largest, and
    /// each gap between two values split into aligned power-of-two blocks.
    NotIn {
        /// Argument index, from 0.
        arg: u32,
        /// The values that do not match, strictly ascending.
        values: &'static [u64],
    },
}

/// Kernel ABI values the table needs that the `libc` crate does not name on every target.
/// They are the same on x86_64 and aarch64.
mod abi {
    /// `include/uapi/linux/netlink.h`: routing and link configuration, what `ip` and glibc's
    /// `getaddrinfo` (for `AI_ADDRCONFIG`) speak.
    pub const NETLINK_ROUTE: u64 = 0;
    /// `include/linux/net.h`: the bits of `socket()`'s type that are the type; the rest are
    /// `SOCK_NONBLOCK` and `SOCK_CLOEXEC`.
    pub const SOCK_TYPE_MASK: u64 = 0xf;
    /// `include/linux/net.h`: the obsolete packet socket type; `socket(AF_INET, SOCK_PACKET)` is
    /// turned into an `AF_PACKET` socket by the kernel.
    pub const SOCK_PACKET: u64 = 10;
    /// `include/uapi/linux/personality.h`: the default personality.
    pub const PER_LINUX: u64 = 0;
    /// `include/uapi/linux/personality.h`: 32-bit `uname` (what `setarch i686`/`linux32` sets).
    pub const PER_LINUX32: u64 = 0x0008;
    /// `include/uapi/linux/personality.h`: report a 2.6.x kernel version to old programs.
    pub const UNAME26: u64 = 0x0020000;
    /// `personality(0xffffffff)` changes nothing and returns the current personality.
    pub const PERSONALITY_QUERY: u64 = 0xffff_ffff;
}

const NS_FLAGS_BUT_TIME: u64 = (libc::CLONE_NEWNS
    | libc::CLONE_NEWUTS
    | libc::CLONE_NEWIPC
    | libc::CLONE_NEWUSER
    | libc::CLONE_NEWPID
    | libc::CLONE_NEWNET
    | libc::CLONE_NEWCGROUP) as u64;

/// Every flag that creates a namespace, as `unshare()` takes them.
pub const NAMESPACE_FLAGS: u64 = NS_FLAGS_BUT_TIME | libc::CLONE_NEWTIME as u64;

/// The namespace flags `clone()` can take. `CLONE_NEWTIME` (0x80) is not among them: in
/// `clone()` the low byte of the flags is the child's exit signal, so 0x80 there is a (bad)
/// signal number, not a time namespace. Only `unshare()` and `clone3()` can create a time
/// namespace.
pub const CLONE_NAMESPACE_FLAGS: u64 = NS_FLAGS_BUT_TIME;

/// `socket(family, ..)` with a family other than the four the sandbox needs: Unix sockets,
/// IPv4, IPv6 and netlink (for route and link queries).
const SOCKET_OTHER_FAMILY: When = When::All(&[Cond::NotIn {
    arg: 0,
    values: &[
        libc::AF_UNIX as u64,
        libc::AF_INET as u64,
        libc::AF_INET6 as u64,
        libc::AF_NETLINK as u64,
    ],
}]);
/// `socket(AF_NETLINK, _, protocol)` with a protocol other than `NETLINK_ROUTE`.
const SOCKET_NETLINK_NOT_ROUTE: When = When::All(&[
    Cond::Low32Eq {
        arg: 0,
        value: libc::AF_NETLINK as u32,
    },
    Cond::NotIn {
        arg: 2,
        values: &[abi::NETLINK_ROUTE],
    },
]);
/// `socket(family, type | flags, _)`. Families are compared on the low 32 bits (the kernel
/// reads an `int`), types with their `SOCK_NONBLOCK`/`SOCK_CLOEXEC` bits masked off.
macro_rules! socket_of_type {
    ($family:expr, $type:expr) => {
        When::All(&[
            Cond::Low32Eq {
                arg: 0,
                value: $family as u32,
            },
            Cond::MaskedEq {
                arg: 1,
                mask: abi::SOCK_TYPE_MASK,
                value: $type as u64,
            },
        ])
    };
}
/// `socket(AF_INET, SOCK_RAW | flags, _)`.
const SOCKET_INET_RAW: When = socket_of_type!(libc::AF_INET, libc::SOCK_RAW);
/// `socket(AF_INET, SOCK_PACKET | flags, _)`.
const SOCKET_INET_PACKET: When = socket_of_type!(libc::AF_INET, abi::SOCK_PACKET);
/// `socket(AF_INET6, SOCK_RAW | flags, _)`.
const SOCKET_INET6_RAW: When = socket_of_type!(libc::AF_INET6, libc::SOCK_RAW);
/// `socket(AF_INET6, SOCK_PACKET | flags, _)`.
const SOCKET_INET6_PACKET: When = socket_of_type!(libc::AF_INET6, abi::SOCK_PACKET);
/// `socketpair(family, ..)` with a family other than `AF_UNIX`.
const SOCKETPAIR_NOT_UNIX: When = When::All(&[Cond::NotIn {
    arg: 0,
    values: &[libc::AF_UNIX as u64],
}]);
/// Mode bits that hand the file's owner or group to whoever runs it.
const SETID_BITS: u64 = (libc::S_ISUID | libc::S_ISGID) as u64;
/// A mode argument (at index 1, 2 or 3) with the setuid or setgid bit.
const fn setid_mode(arg: u32) -> When {
    When::AnyBitSet {
        arg,
        mask: SETID_BITS,
    }
}
const SETID_MODE_ARG1: When = setid_mode(1);
const SETID_MODE_ARG2: When = setid_mode(2);
const SETID_MODE_ARG3: When = setid_mode(3);
/// Mode bits that let every other local user write the file: one user lives in a sandbox, so
/// they only ever speak to the host's other users.
const SHARED_WRITE_BITS: u64 = (libc::S_IWGRP | libc::S_IWOTH) as u64;
/// A `chmod` mode argument (at index 1 or 2) with group or other write.
const SHARED_WRITE_MODE_ARG1: When = When::AnyBitSet {
    arg: 1,
    mask: SHARED_WRITE_BITS,
};
const SHARED_WRITE_MODE_ARG2: When = When::AnyBitSet {
    arg: 2,
    mask: SHARED_WRITE_BITS,
};
/// `socket(AF_UNIX, ..)`.
const SOCKET_UNIX: When = When::All(&[Cond::Low32Eq {
    arg: 0,
    value: libc::AF_UNIX as u32,
}]);
/// `ioctl(fd, request, ..)`: the request is compared on the low 32 bits (the kernel reads an
/// `unsigned int`).
macro_rules! ioctl_request {
    ($request:expr) => {
        When::All(&[Cond::Low32Eq {
            arg: 1,
            value: $request as u32,
        }])
    };
}
/// `ioctl(fd, TIOCSTI, ..)`.
const IOCTL_TIOCSTI: When = ioctl_request!(libc::TIOCSTI);
/// `ioctl(fd, TIOCLINUX, ..)`.
const IOCTL_TIOCLINUX: When = ioctl_request!(libc::TIOCLINUX);
/// `ioctl(fd, TIOCSETD, ..)`.
const IOCTL_TIOCSETD: When = ioctl_request!(libc::TIOCSETD);
/// `personality(p)` with `p` other than the plain Linux personalities and the query.
const PERSONALITY_OTHER: When = When::All(&[Cond::NotIn {
    arg: 0,
    values: &[
        abi::PER_LINUX,
        abi::PER_LINUX32,
        abi::UNAME26,
        abi::PERSONALITY_QUERY,
    ],
}]);
/// `unshare(flags)` creating any namespace.
const UNSHARE_NAMESPACE: When = When::AnyBitSet {
    arg: 0,
    mask: NAMESPACE_FLAGS,
};
/// `clone(flags, ..)` creating any namespace; the flags are the first argument on both x86_64
/// and aarch64.
const CLONE_NAMESPACE: When = When::AnyBitSet {
    arg: 0,
    mask: CLONE_NAMESPACE_FLAGS,
};

const fn eperm(syscall: &'static str, when: When, reason: &'static str) -> Rule {
    Rule {
        syscall,
        when,
        errno: libc::EPERM,
        reason,
        only_on: None,
    }
}

const fn enosys(syscall: &'static str, when: When, reason: &'static str) -> Rule {
    Rule {
        syscall,
        when,
        errno: libc::ENOSYS,
        reason,
        only_on: None,
    }
}

impl Rule {
    const fn only_on(self, arch: Arch) -> Rule {
        Rule {
            only_on: Some(arch),
            ..self
        }
    }
}

/// Every rule of the filter, grouped by the threat it closes.
///
/// Architecture ABIs other than the native 64-bit one (i386 and x32 on x86_64, AArch32 on
/// aarch64) need no rules here: the filter contains only the native architecture, so any call
/// through another ABI hits the bad-architecture action and kills the process (see
/// [`build_filter`]). That is also why `vm86`/`vm86old` (i386 only) and `socketcall` (absent on
/// both 64-bit ABIs, where `socket()` cannot be bypassed through it) are not listed.
#[rustfmt::skip]
pub const RULES: &[Rule] = &[
    // Other processes.
    eperm("ptrace",            Always, "inspect or steer another process: read its memory, inject code, steal its secrets"),
    eperm("process_vm_readv",  Always, "read another process's memory without ptrace"),
    eperm("process_vm_writev", Always, "write another process's memory without ptrace"),
    eperm("pidfd_getfd",       Always, "copy a file descriptor out of another process"),

    // The file tree: the sandbox's root is assembled before seccomp and must stay as built.
    eperm("mount",             Always, "remount or overmount the assembled root, or expose hidden host paths"),
    eperm("umount2",           Always, "unmount a bind or overmount and reveal what it hides"),
    eperm("pivot_root",        Always, "swap the sandbox root for another tree"),
    eperm("move_mount",        Always, "new mount API: attach or move mounts"),
    eperm("open_tree",         Always, "new mount API: clone a mount tree to attach elsewhere"),
    eperm("fsopen",            Always, "new mount API: create a filesystem context (filesystem parsers are attack surface)"),
    eperm("fsconfig",          Always, "new mount API: configure a filesystem context"),
    eperm("fsmount",           Always, "new mount API: turn a filesystem context into a mount"),
    eperm("fspick",            Always, "new mount API: reconfigure an existing mount"),
    eperm("mount_setattr",     Always, "change mount flags, such as clearing read-only or nosuid"),
    eperm("open_by_handle_at", Always, "open files by handle, bypassing the path walk that confines the sandbox (the shocker escape)"),
    eperm("name_to_handle_at", Always, "make file handles for open_by_handle_at; also leaks mount and inode identities"),

    // Namespaces: new ones make unprivileged code root of a fresh user namespace, a large kernel surface.
    eperm("unshare",           UNSHARE_NAMESPACE, "create a namespace: user namespaces unlock kernel code written for root"),
    eperm("clone",             CLONE_NAMESPACE,   "create a namespace while forking (as unshare)"),
    enosys("clone3",           Always, "its flags are in memory the filter cannot read; ENOSYS makes libc fall back to clone, which is filtered"),
    eperm("setns",             Always, "join another namespace through an inherited or opened namespace file descriptor"),

    // Kernel extension and attack surface.
    eperm("bpf",               Always, "load eBPF programs: a verifier and JIT with a history of privilege escalations"),
    eperm("perf_event_open",   Always, "performance counters: kernel address and side-channel leaks, frequent CVEs"),
    eperm("userfaultfd",       Always, "stall kernel page faults at will, the usual tool to win kernel races"),
    eperm("io_uring_setup",    Always, "io_uring runs syscalls the filter never sees, and is a frequent source of kernel bugs"),
    eperm("io_uring_enter",    Always, "io_uring (see io_uring_setup)"),
    eperm("io_uring_register", Always, "io_uring (see io_uring_setup)"),
    eperm("keyctl",            Always, "kernel keyrings are not namespaced: reach the host user's keys"),
    eperm("add_key",           Always, "kernel keyrings (see keyctl)"),
    eperm("request_key",       Always, "kernel keyrings (see keyctl); can also call out to a helper on the host"),
    eperm("lookup_dcookie",    Always, "profiling interface (removed in Linux 6.8) that returns host paths"),
    eperm("nfsservctl",        Always, "the old in-kernel NFS server control (removed in Linux 3.1)"),

    // The machine itself.
    eperm("kexec_load",        Always, "replace the running kernel"),
    eperm("kexec_file_load",   Always, "replace the running kernel"),
    eperm("init_module",       Always, "load kernel code"),
    eperm("finit_module",      Always, "load kernel code"),
    eperm("delete_module",     Always, "unload kernel code the host relies on"),
    eperm("reboot",            Always, "reboot or halt the host (or the PID namespace)"),
    eperm("swapon",            Always, "change the host's swap"),
    eperm("swapoff",           Always, "change the host's swap"),
    eperm("acct",              Always, "switch process accounting on the host on or off"),
    eperm("quotactl",          Always, "change or read host disk quotas"),
    eperm("quotactl_fd",       Always, "change or read host disk quotas"),
    eperm("syslog",            Always, "read or clear the kernel log, which leaks kernel addresses and host activity"),
    eperm("settimeofday",      Always, "set the host clock (time is not namespaced)"),
    eperm("clock_settime",     Always, "set the host clock"),
    eperm("clock_adjtime",     Always, "steer the host clock; costs read-only queries, which a sandbox does not need"),
    eperm("adjtimex",          Always, "steer the host clock; costs read-only queries (ntp_gettime), which a sandbox does not need"),
    eperm("fanotify_init",     Always, "watch and block file access across the whole mount or filesystem"),
    eperm("iopl",              Always, "direct access to I/O ports").only_on(Arch::X86_64),
    eperm("ioperm",            Always, "direct access to I/O ports").only_on(Arch::X86_64),
    eperm("uselib",            Always, "obsolete a.out library loader; old kernel code").only_on(Arch::X86_64),
    eperm("personality",       PERSONALITY_OTHER, "flags such as ADDR_NO_RANDOMIZE or READ_IMPLIES_EXEC weaken exploit mitigations"),

    // Networking: only what ordinary programs need.
    eperm("socket",            SOCKET_OTHER_FAMILY,      "packet, vsock, Bluetooth, AF_ALG and other families: kernel code a sandbox never needs"),
    eperm("socket",            SOCKET_NETLINK_NOT_ROUTE, "netlink families other than routing: audit, uevents, sock_diag, netfilter and more"),
    eperm("socket",            SOCKET_INET_RAW,          "raw IP: forge packets past the egress proxy's view of connections"),
    eperm("socket",            SOCKET_INET_PACKET,       "the kernel turns (AF_INET, SOCK_PACKET) into an AF_PACKET socket"),
    eperm("socket",            SOCKET_INET6_RAW,         "raw IPv6 (as raw IP)"),
    eperm("socket",            SOCKET_INET6_PACKET,      "obsolete packet type (as AF_INET)"),
    eperm("socketpair",        SOCKETPAIR_NOT_UNIX,      "only Unix socket pairs exist; other families are kernel surface"),

    // Files the host keeps: a setuid or setgid bit set inside (on the workspace, say) stays on
    // disk, where it hands the file's owner or group to whoever runs it later.
    eperm("chmod",             SETID_MODE_ARG1, "leave a setuid/setgid file for the host to run").only_on(Arch::X86_64),
    eperm("fchmod",            SETID_MODE_ARG1, "leave a setuid/setgid file for the host to run"),
    eperm("fchmodat",          SETID_MODE_ARG2, "leave a setuid/setgid file for the host to run"),
    eperm("fchmodat2",         SETID_MODE_ARG2, "leave a setuid/setgid file for the host to run"),
    eperm("open",              SETID_MODE_ARG2, "create a setuid/setgid file for the host to run").only_on(Arch::X86_64),
    eperm("creat",             SETID_MODE_ARG1, "create a setuid/setgid file for the host to run").only_on(Arch::X86_64),
    eperm("openat",            SETID_MODE_ARG3, "create a setuid/setgid file for the host to run"),
    eperm("mknod",             SETID_MODE_ARG1, "create a setuid/setgid file for the host to run").only_on(Arch::X86_64),
    eperm("mknodat",           SETID_MODE_ARG2, "create a setuid/setgid file for the host to run"),
    // A writable bind grants writing, not ownership: through an idmapped bind that swaps a
    // root-owned path's owner with the sandbox's user, the sandbox is its owner and could open
    // root's file or directory to every local user for good. The filter cannot tell a bind from
    // the sandbox's own /tmp, nor what the mode was before; it refuses group and other write
    // everywhere (they mean nothing inside, where one user lives). Creating calls keep their
    // mode: a new file is the sandbox's own, made where it writes anyway.
    eperm("chmod",             SHARED_WRITE_MODE_ARG1, "open a shared host file to every local user's writes").only_on(Arch::X86_64),
    eperm("fchmod",            SHARED_WRITE_MODE_ARG1, "open a shared host file to every local user's writes"),
    eperm("fchmodat",          SHARED_WRITE_MODE_ARG2, "open a shared host file to every local user's writes"),
    eperm("fchmodat2",         SHARED_WRITE_MODE_ARG2, "open a shared host file to every local user's writes"),
    enosys("openat2",          Always, "its mode is in a struct the filter cannot read; ENOSYS makes programs fall back to openat, which is filtered"),

    // Kernel interfaces a sandbox has no use for.
    eperm("open_tree_attr",    Always, "new mount API: clone a mount tree with new attributes"),
    eperm("listmount",         Always, "enumerate mounts by ID, past what the sandbox's /proc shows"),
    eperm("statmount",         Always, "read mount details by ID, past what the sandbox's /proc shows"),
    eperm("kcmp",              Always, "compare two processes' kernel objects: learns which files and memory they share"),
    eperm("memfd_secret",      Always, "memory removed from the kernel's own mapping: hides payloads, no use in a sandbox"),
    eperm("modify_ldt",        Always, "x86 local descriptor tables: old kernel code with a history of exploits").only_on(Arch::X86_64),

    // Terminals: the sandbox may share the user's terminal.
    eperm("ioctl",             IOCTL_TIOCSTI,   "push input into the terminal, typed as the user once the sandbox exits"),
    eperm("ioctl",             IOCTL_TIOCLINUX, "virtual console control: selection paste is another way to inject input"),
    eperm("ioctl",             IOCTL_TIOCSETD,  "line disciplines (HDLC, GSM, SLIP, CAN, ...): kernel code with a history of exploits, loaded on demand"),
];

/// Rules added when the sandbox runs without namespaces (degraded mode), where it lives in the
/// host's file tree as a host user: Landlock governs opening, creating, renaming and removing
/// files, but not their metadata, and not connecting to named sockets.
///
/// Every metadata call is refused in its path form and in its descriptor form alike
/// ([`DEGRADED_FD_TWINS`] pairs them, and a test holds every pair): Landlock decides only what
/// may be opened, so a `--ro` file opened read-only would otherwise take `fchmod`, `fchown`,
/// `fsetxattr` (an ACL is a mode) or `futimens` through its descriptor.
#[rustfmt::skip]
pub const DEGRADED_RULES: &[Rule] = &[
    eperm("chmod",             Always, "change the mode of any file of the user's, which Landlock does not govern").only_on(Arch::X86_64),
    eperm("fchmod",            Always, "change the mode of any file of the user's through a descriptor, even one opened read-only"),
    eperm("fchmodat",          Always, "change the mode of any file of the user's, which Landlock does not govern"),
    eperm("fchmodat2",         Always, "change the mode of any file of the user's, which Landlock does not govern"),
    eperm("chown",             Always, "change the group of any file of the user's").only_on(Arch::X86_64),
    eperm("lchown",            Always, "change the group of any file of the user's").only_on(Arch::X86_64),
    eperm("fchown",            Always, "change the group of any file of the user's through a descriptor, even one opened read-only"),
    eperm("fchownat",          Always, "change the group of any file of the user's"),
    eperm("utime",             Always, "forge the times of any file of the user's").only_on(Arch::X86_64),
    eperm("utimes",            Always, "forge the times of any file of the user's").only_on(Arch::X86_64),
    eperm("futimesat",         Always, "forge the times of any file of the user's").only_on(Arch::X86_64),
    eperm("utimensat",         Always, "forge the times of any file of the user's, by path or (futimens) through a descriptor opened read-only"),
    eperm("setxattr",          Always, "set extended attributes on any file of the user's (an ACL is a mode)"),
    eperm("lsetxattr",         Always, "set extended attributes on any file of the user's (an ACL is a mode)"),
    eperm("fsetxattr",         Always, "set extended attributes through a descriptor, even one opened read-only (an ACL is a mode)"),
    eperm("removexattr",       Always, "remove extended attributes from any file of the user's"),
    eperm("lremovexattr",      Always, "remove extended attributes from any file of the user's"),
    eperm("fremovexattr",      Always, "remove extended attributes through a descriptor, even one opened read-only"),
    eperm("setxattrat",        Always, "set extended attributes on any file of the user's"),
    eperm("removexattrat",     Always, "remove extended attributes from any file of the user's"),
    eperm("socket",            SOCKET_UNIX, "connect to the host's named sockets (D-Bus, docker.sock), which Landlock does not govern; socketpair stays allowed"),
    // Hard links go to the supervisor (FILE_NOTIFY_RULES), which makes a permitted one itself,
    // outside the sandbox's Landlock domain: in the host's own file tree that would link the
    // sandbox's file into any directory of the user's on the same file system. Refused here
    // (the errno outranks the notification); git falls back to renaming its objects.
    eperm("link",              Always, "link a file of the sandbox's where Landlock refuses it writes, through the supervisor that judges links").only_on(Arch::X86_64),
    eperm("linkat",            Always, "link a file of the sandbox's where Landlock refuses it writes, through the supervisor that judges links"),
];

/// Each metadata call of [`DEGRADED_RULES`] that names its file by path, with the call that does
/// the same through a descriptor. Both halves of every pair must be refused outright; where one
/// call is both (`utimensat` with a NULL path is `futimens`), it is its own twin.
#[rustfmt::skip]
pub const DEGRADED_FD_TWINS: &[(&str, &str)] = &[
    ("chmod",         "fchmod"),
    ("fchmodat",      "fchmod"),
    ("fchmodat2",     "fchmod"),
    ("chown",         "fchown"),
    ("lchown",        "fchown"),
    ("fchownat",      "fchown"),
    ("utime",         "utimensat"),
    ("utimes",        "utimensat"),
    ("futimesat",     "utimensat"),
    ("utimensat",     "utimensat"),
    ("setxattr",      "fsetxattr"),
    ("lsetxattr",     "fsetxattr"),
    ("setxattrat",    "fsetxattr"),
    ("removexattr",   "fremovexattr"),
    ("lremovexattr",  "fremovexattr"),
    ("removexattrat", "fremovexattr"),
];

/// Build the degraded-mode filter ([`DEGRADED_RULES`]) for the running architecture. It is
/// loaded on top of the main filter.
pub fn build_degraded_filter() -> Result<ScmpFilterContext, SeccompError> {
    let arch = native_arch()?;
    let mut filter = new_context()?;
    for rule in DEGRADED_RULES {
        add_rule(&mut filter, arch, rule)?;
    }
    Ok(filter)
}

/// Build and load the degraded-mode filter into the calling process.
pub fn install_degraded() -> Result<(), SeccompError> {
    build_degraded_filter()?
        .load()
        .map_err(|source| SeccompError::Load { source })
}

/// `include/uapi/linux/memfd.h`: a memfd that can never be made executable.
const MFD_NOEXEC_SEAL: u64 = 0x0008;

/// `memfd_create` without `MFD_NOEXEC_SEAL`: a memfd that could be executed.
const MEMFD_EXECUTABLE: When = When::All(&[Cond::MaskedEq {
    arg: 1,
    mask: MFD_NOEXEC_SEAL,
    value: 0,
}]);

/// Rules added when the sandbox has an exec allowlist (`process.allow_exec`), loaded as their
/// own filter. (An executable memfd is refused too, but by the supervisor, which records it:
/// see [`EXEC_NOTIFY_RULES`].)
#[rustfmt::skip]
pub const EXEC_ALLOWLIST_RULES: &[Rule] = &[
    // A Landlock domain the sandbox stacks on its own becomes the youngest
    // domain of its processes: the kernel logs a refusal under it (or not
    // at all, with its logging flags off), so the allowlist's refusals go
    // unrecorded. Refused as on a kernel without Landlock, which tools that
    // sandbox themselves take as "not available".
    Rule {
        syscall: "landlock_create_ruleset",
        when: When::Always,
        errno: libc::ENOSYS,
        reason: "stack a Landlock domain of its own, under which the allowlist's refusals go unrecorded",
        only_on: None,
    },
    Rule {
        syscall: "landlock_restrict_self",
        when: When::Always,
        errno: libc::ENOSYS,
        reason: "stack a Landlock domain of its own, under which the allowlist's refusals go unrecorded",
        only_on: None,
    },
];

/// Build the exec allowlist's filter ([`EXEC_ALLOWLIST_RULES`]) for the running architecture.
/// It is loaded on top of the main filter.
pub fn build_exec_allowlist_filter() -> Result<ScmpFilterContext, SeccompError> {
    let arch = native_arch()?;
    let mut filter = new_context()?;
    for rule in EXEC_ALLOWLIST_RULES {
        add_rule(&mut filter, arch, rule)?;
    }
    Ok(filter)
}

/// Build and load the exec allowlist's filter into the calling process.
pub fn install_exec_allowlist() -> Result<(), SeccompError> {
    build_exec_allowlist_filter()?
        .load()
        .map_err(|source| SeccompError::Load { source })
}

/// Mode bits a `chmod` may set that speak to the host's other users: group and other read,
/// write and execute. Write is refused outright by [`RULES`]; a mode with any of the others is
/// put to the sandbox's supervisor (see [`NOTIFY_RULES`]).
pub const SHARED_MODE_BITS: u64 = 0o077;

/// A call whose mode the filter cannot judge alone, put to the supervisor on the host
/// (`SECCOMP_RET_USER_NOTIF`), which decides on the file itself and makes the change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotifyRule {
    /// The system call, as the kernel and libseccomp name it.
    pub syscall: &'static str,
    /// Index of its mode argument.
    pub mode_arg: u32,
    /// Why the supervisor must see it.
    pub reason: &'static str,
    /// As [`Rule::only_on`].
    pub only_on: Option<Arch>,
}

/// Mode changes that would give the host's other users a bit (read, execute) the file may not
/// have had. Through the owner swap the sandbox owns root's `--rw` files, so the kernel would
/// let it make root's `0600` file `0644` for good; the filter cannot see the file's mode or
/// whose it is, so the supervisor decides (`crate::modes`). A mode without those bits (`0600`,
/// `0700`) never leaves the kernel. Loaded as a second filter over [`RULES`]: where both
/// match (set-ID, group or other write) the kernel takes the errno, which outranks a
/// notification.
#[rustfmt::skip]
pub const NOTIFY_RULES: &[NotifyRule] = &[
    NotifyRule { syscall: "chmod",     mode_arg: 1, reason: "open a shared host file to other local users", only_on: Some(Arch::X86_64) },
    NotifyRule { syscall: "fchmod",    mode_arg: 1, reason: "open a shared host file to other local users", only_on: None },
    NotifyRule { syscall: "fchmodat",  mode_arg: 2, reason: "open a shared host file to other local users", only_on: None },
    NotifyRule { syscall: "fchmodat2", mode_arg: 2, reason: "open a shared host file to other local users", only_on: None },
];

/// Calls put to the supervisor whatever their arguments: what they open to the host's other
/// users depends on a file and a name the filter cannot read (`crate::modes::attrs`,
/// `crate::modes::links`). The supervisor makes the call itself on the file it found, or
/// answers `errno`.
/// - The attribute calls: a POSIX ACL (`system.posix_acl_access`) is a mode, and can name
///   users and groups besides; a default ACL sets the modes of root's later files in a
///   directory, whatever root's umask. Judged as a `chmod` to the mode the ACL spells; named
///   entries, masks, default ACLs and removals only on files born in this run. `setxattrat`
///   and `removexattrat` answer `ENOSYS`, as on a kernel before them.
/// - `link`, `linkat`: a second name of root's file outside the `0700` directory that keeps it
///   from other users, through which they read whatever root writes into it later. Only files
///   born in this run take another name.
#[rustfmt::skip]
pub const FILE_NOTIFY_RULES: &[Rule] = &[
    eperm("setxattr",      Always, "set an ACL that opens a shared host file, or root's later files in a directory, to other local users"),
    eperm("lsetxattr",     Always, "set an ACL that opens a shared host file to other local users"),
    eperm("fsetxattr",     Always, "set an ACL that opens a shared host file to other local users, through a descriptor"),
    eperm("removexattr",   Always, "remove an ACL, widening the group's bits to its mask's or freeing later files from a default"),
    eperm("lremovexattr",  Always, "remove an ACL (see removexattr)"),
    eperm("fremovexattr",  Always, "remove an ACL through a descriptor (see removexattr)"),
    enosys("setxattrat",   Always, "set an ACL (see setxattr); its value is in a struct, and libc does not use it yet"),
    enosys("removexattrat",Always, "remove an ACL (see removexattr); libc does not use it yet"),
    eperm("link",          Always, "give root's file a second name outside the directory that keeps it from other local users").only_on(Arch::X86_64),
    eperm("linkat",        Always, "give root's file a second name outside the directory that keeps it from other local users"),
];

/// Calls put to the supervisor when the sandbox has an exec allowlist, so that every refused
/// exec is recorded (`exec_refused`) whichever layer would refuse it. The supervisor never lets
/// through what the kernel would refuse: it answers `CONTINUE` for what the list allows (the
/// kernel, Landlock and the mounts, then decide as before), and the rule's errno, with a record,
/// for what it finds refused (see `crate::modes::exec`). `errno` is that answer.
///
/// - `execve`, `execveat`: a program on a `noexec` mount (everything the sandbox writes), or
///   with no execute bit, is refused by the kernel before Landlock is asked, and so never
///   recorded by Landlock's audit; a program off the list is Landlock's to refuse, whose record
///   only root with the host's audit on can read.
/// - `memfd_create` without `MFD_NOEXEC_SEAL`: a memfd lives on no path Landlock rules, and the
///   kernel executes one (`fexecve`, `/proc/self/fd/N`) without asking it. Every memfd must be
///   sealed against execution instead: what the kernel itself enforces with
///   `vm.memfd_noexec = 2`, refused with the same `EACCES`, which programs that make memfds
///   already meet there.
#[rustfmt::skip]
pub const EXEC_NOTIFY_RULES: &[Rule] = &[
    Rule { syscall: "execve",       when: Always,           errno: libc::EACCES, reason: "run a program the allowlist refuses, to be recorded", only_on: None },
    Rule { syscall: "execveat",     when: Always,           errno: libc::EACCES, reason: "run a program the allowlist refuses, to be recorded", only_on: None },
    Rule { syscall: "memfd_create", when: MEMFD_EXECUTABLE, errno: libc::EACCES, reason: "write a program into memory and execute it, around the exec allowlist", only_on: None },
];

/// Builds the notifying filter ([`NOTIFY_RULES`], and with `exec` the exec allowlist's
/// [`EXEC_NOTIFY_RULES`]) for `arch`: the build script compiles both ahead of time, and the
/// init loads one over the main filter with a listener for its supervisor (a process has one
/// listener: the kernel refuses a second). Without a listener the kernel answers a notifying
/// call `ENOSYS`: closed.
pub fn build_notify_filter_for(arch: Arch, exec: bool) -> Result<ScmpFilterContext, SeccompError> {
    let mut filter = new_context()?;
    if ScmpArch::native() != arch.scmp() {
        attribute("the target architecture", filter.add_arch(arch.scmp()))?;
        attribute(
            "the build host's architecture",
            filter.remove_arch(ScmpArch::native()),
        )?;
    }
    for rule in NOTIFY_RULES {
        if rule.only_on.is_some_and(|only| only != arch) {
            continue;
        }
        let syscall = resolve(rule.syscall, arch)?;
        // One filter rule per bit, OR'ed: a filter comparison tests one masked value.
        for bit in (0..u64::BITS).map(|shift| 1_u64 << shift) {
            if SHARED_MODE_BITS & bit == 0 {
                continue;
            }
            let compare = ScmpArgCompare::new(rule.mode_arg, ScmpCompareOp::MaskedEqual(bit), bit);
            filter
                .add_rule_conditional_exact(ScmpAction::Notify, syscall, &[compare])
                .map_err(|source| SeccompError::AddRule {
                    syscall: rule.syscall,
                    source,
                })?;
        }
    }
    for rule in FILE_NOTIFY_RULES {
        if rule.only_on.is_some_and(|only| only != arch) {
            continue;
        }
        let syscall = resolve(rule.syscall, arch)?;
        filter
            .add_rule_exact(ScmpAction::Notify, syscall)
            .map_err(|source| SeccompError::AddRule {
                syscall: rule.syscall,
                source,
            })?;
    }
    if exec {
        for rule in EXEC_NOTIFY_RULES {
            add_rule_as(&mut filter, arch, rule, ScmpAction::Notify)?;
        }
    }
    Ok(filter)
}

/// Syscalls newer than the libseccomp some distributions ship. From number 424 on, every
/// architecture shares one numbering (`include/uapi/asm-generic/unistd.h`), so one number
/// serves both x86_64 and aarch64.
pub const UNIFIED_NUMBERS: &[(&str, i32)] = &[
    ("statmount", 457),
    ("listmount", 458),
    ("setxattrat", 463),
    ("removexattrat", 466),
    ("open_tree_attr", 467),
];

/// The most argument comparisons one filter rule may have: libseccomp accepts one per argument.
const MAX_COMPARISONS: usize = 6;

/// The largest errno the kernel's `SECCOMP_RET_ERRNO` carries meaningfully.
const MAX_ERRNO: i32 = 4095;

/// Builds the filter for the running architecture.
///
/// The filter allows every call by default; each rule of [`RULES`] makes the calls it matches
/// fail with its errno. Rules for syscalls that exist only on another architecture are skipped;
/// any other name that does not resolve is an error, so a typo in the table cannot silently
/// leave a hole.
///
/// The filter contains the native architecture only (libseccomp's context starts with it and we
/// add no other). libseccomp then emits, before any rule, a check of the architecture the
/// kernel reports for the call: a call made through another ABI of the same CPU (i386 via
/// `int 0x80` on x86_64, AArch32 on aarch64) takes the bad-architecture action. x32 calls
/// report `AUDIT_ARCH_X86_64` like native ones, so libseccomp also checks the syscall number:
/// when the x32 ABI is not in the filter, numbers with the x32 bit (`0x4000_0000`) take the
/// bad-architecture action too. That action is set here to kill the process: a foreign ABI in
/// the sandbox is an attempt to get around the rules, not a program to keep running. Both
/// checks sit at the top of the generated BPF (architecture, then `nr >= 0x4000_0000` unless
/// `nr == -1`) and are proved by the integration tests, where an x32 and an i386 `getpid` kill
/// the process with SIGSYS under the filter and return without it.
pub fn build_filter() -> Result<ScmpFilterContext, SeccompError> {
    build_filter_for(native_arch()?)
}

/// Builds the filter for `arch`, which need not be the architecture this code runs on: the
/// build script compiles the target's filter ahead of time with it.
pub fn build_filter_for(arch: Arch) -> Result<ScmpFilterContext, SeccompError> {
    let mut filter = new_context()?;
    if ScmpArch::native() != arch.scmp() {
        // A context starts with the native architecture only; swap it for the target's, so that
        // every other ABI still meets the bad-architecture action.
        attribute("the target architecture", filter.add_arch(arch.scmp()))?;
        attribute(
            "the build host's architecture",
            filter.remove_arch(ScmpArch::native()),
        )?;
    }
    // A binary tree of syscall numbers instead of a linear chain: every syscall the sandbox
    // makes runs this filter, and most of them are allowed ones that would otherwise be
    // compared against every rule.
    attribute("SCMP_FLTATR_CTL_OPTIMIZE", filter.set_ctl_optimize(2))?;
    // Apply the filter to every thread of the process, not only the caller, should the
    // sandbox's init ever have more than one.
    attribute("SCMP_FLTATR_CTL_TSYNC", filter.set_ctl_tsync(true))?;
    for rule in RULES {
        add_rule(&mut filter, arch, rule)?;
    }
    Ok(filter)
}

/// The architecture this code runs on, if warden has a filter for it.
fn native_arch() -> Result<Arch, SeccompError> {
    Arch::native().ok_or(SeccompError::UnsupportedArch {
        arch: std::env::consts::ARCH,
    })
}

/// A context every filter starts from: it allows by default, and kills a call made through any
/// ABI the filter does not contain (see [`build_filter`]).
fn new_context() -> Result<ScmpFilterContext, SeccompError> {
    let mut filter = ScmpFilterContext::new(ScmpAction::Allow)
        .map_err(|source| SeccompError::CreateContext { source })?;
    attribute(
        "SCMP_FLTATR_ACT_BADARCH",
        filter.set_act_badarch(ScmpAction::KillProcess),
    )?;
    // The jail has set no_new_privs already; libseccomp setting it again is harmless and keeps
    // `install` safe for a caller that forgot (without it, the kernel refuses the filter to
    // unprivileged callers, and a privileged one would leave set-uid binaries usable).
    attribute("SCMP_FLTATR_CTL_NNP", filter.set_ctl_nnp(true))?;
    Ok(filter)
}

/// Names the attribute a libseccomp setter failed to set.
fn attribute<T>(attribute: &'static str, set: Result<T, ScmpError>) -> Result<(), SeccompError> {
    set.map(|_| ())
        .map_err(|source| SeccompError::SetAttribute { attribute, source })
}

/// Builds the filter and loads it into the calling process.
///
/// Called by the sandbox's init right before exec; once loaded, the filter cannot be removed
/// and is inherited by every descendant.
pub fn install() -> Result<(), SeccompError> {
    let filter = build_filter()?;
    filter
        .load()
        .map_err(|source| SeccompError::Load { source })
}

/// Adds one table rule to the filter, as one or more libseccomp rules.
fn add_rule(filter: &mut ScmpFilterContext, arch: Arch, rule: &Rule) -> Result<(), SeccompError> {
    add_rule_as(filter, arch, rule, ScmpAction::Errno(rule.errno))
}

/// Adds one table rule with `action` for the calls it matches.
fn add_rule_as(
    filter: &mut ScmpFilterContext,
    arch: Arch,
    rule: &Rule,
    action: ScmpAction,
) -> Result<(), SeccompError> {
    if rule.only_on.is_some_and(|only| only != arch) {
        return Ok(());
    }
    let syscall = resolve(rule.syscall, arch)?;
    if !(1..=MAX_ERRNO).contains(&rule.errno) {
        return Err(SeccompError::InvalidErrno {
            syscall: rule.syscall,
            errno: rule.errno,
        });
    }
    let mut add = |comparisons: &Comparisons| {
        filter
            .add_rule_conditional_exact(action, syscall, comparisons.as_slice())
            .map(|_| ())
            .map_err(|source| SeccompError::AddRule {
                syscall: rule.syscall,
                source,
            })
    };
    let empty = SeccompError::EmptyCondition {
        syscall: rule.syscall,
    };
    match rule.when {
        When::Always => add(&Comparisons::new(rule.syscall)),
        When::AnyBitSet { mask: 0, .. } => Err(empty),
        When::AnyBitSet { arg, mask } => {
            for bit in (0..u64::BITS).map(|shift| 1_u64 << shift) {
                if mask & bit != 0 {
                    let mut comparisons = Comparisons::new(rule.syscall);
                    comparisons.push(ScmpArgCompare::new(
                        arg,
                        ScmpCompareOp::MaskedEqual(bit),
                        bit,
                    ))?;
                    add(&comparisons)?;
                }
            }
            Ok(())
        }
        When::All([]) => Err(empty),
        When::All(conditions) => {
            let mut fixed = Comparisons::new(rule.syscall);
            let mut allow_list = None;
            for condition in conditions {
                match *condition {
                    Cond::Low32Eq { arg, value } => fixed.push(ScmpArgCompare::new(
                        arg,
                        ScmpCompareOp::MaskedEqual(u64::from(u32::MAX)),
                        u64::from(value),
                    ))?,
                    Cond::MaskedEq { arg, mask, value } => fixed.push(ScmpArgCompare::new(
                        arg,
                        ScmpCompareOp::MaskedEqual(mask),
                        value,
                    ))?,
                    Cond::NotIn { arg, values } => {
                        if allow_list.replace((arg, values)).is_some() {
                            return Err(SeccompError::SeveralNotIn {
                                syscall: rule.syscall,
                            });
                        }
                    }
                }
            }
            match allow_list {
                None => add(&fixed),
                Some((arg, values)) => for_each_outside(rule.syscall, arg, values, |outside| {
                    let mut comparisons = fixed.clone();
                    comparisons.push(outside)?;
                    add(&comparisons)
                }),
            }
        }
    }
}

/// Calls `f` with comparisons on argument `arg` that together match exactly the values not in
/// `values` (sorted, ascending).
///
/// libseccomp takes one comparison per argument in a rule, so "none of these values" cannot be
/// a single rule of `!=` comparisons. Its complement is a union instead: below the smallest
/// value (`<`), above the largest (`>`), and each gap between two values, split into aligned
/// power-of-two blocks that one masked comparison each can match (as an address range splits
/// into CIDR prefixes). Rules on one syscall are OR'ed, so one rule per piece denies the union.
fn for_each_outside(
    syscall: &'static str,
    arg: u32,
    values: &[u64],
    mut f: impl FnMut(ScmpArgCompare) -> Result<(), SeccompError>,
) -> Result<(), SeccompError> {
    let (Some(&lowest), Some(&highest)) = (values.first(), values.last()) else {
        // "None of nothing" would match every call: refuse rather than guess.
        return Err(SeccompError::EmptyCondition { syscall });
    };
    if !values
        .windows(2)
        .all(|pair| matches!(pair, [a, b] if a < b))
    {
        return Err(SeccompError::UnsortedValues { syscall });
    }
    if lowest > 0 {
        f(ScmpArgCompare::new(arg, ScmpCompareOp::Less, lowest))?;
    }
    for pair in values.windows(2) {
        // Strictly ascending, so `a < b`: no overflow, and the gap is empty when `b == a + 1`.
        if let [a, b] = *pair {
            let (mut low, high) = (a + 1, b - 1);
            // In a gap, `1 <= low` and `high < u64::MAX`: every block below is at most 2^63
            // values wide and `low + size` cannot overflow.
            while low <= high {
                let aligned = low.trailing_zeros();
                let Some(fits) = (high - low + 1).checked_ilog2() else {
                    break;
                };
                let size = 1_u64 << aligned.min(fits).min(63);
                f(ScmpArgCompare::new(
                    arg,
                    ScmpCompareOp::MaskedEqual(!(size - 1)),
                    low,
                ))?;
                let Some(next) = low.checked_add(size) else {
                    break;
                };
                low = next;
            }
        }
    }
    if highest < u64::MAX {
        f(ScmpArgCompare::new(arg, ScmpCompareOp::Greater, highest))?;
    }
    Ok(())
}

/// Resolves a syscall name to its number on `arch`, which must be the running architecture.
fn resolve(name: &'static str, arch: Arch) -> Result<ScmpSyscall, SeccompError> {
    let known = ScmpSyscall::from_name_by_arch(name, arch.scmp());
    if known.is_err() {
        if let Some((_, nr)) = UNIFIED_NUMBERS.iter().find(|(n, _)| *n == name) {
            return Ok(ScmpSyscall::from(*nr));
        }
    }
    let syscall = known.map_err(|source| SeccompError::UnknownSyscall {
        syscall: name,
        arch: arch.name(),
        source,
    })?;
    // libseccomp knows every syscall of every architecture by name; one that does not exist on
    // `arch` resolves to a negative pseudo-number instead of failing.
    if syscall.as_raw_syscall() < 0 {
        return Err(SeccompError::AbsentOnArch {
            syscall: name,
            arch: arch.name(),
        });
    }
    Ok(syscall)
}

/// The comparisons of one filter rule, on the stack: the filter is built in the sandbox's init
/// just before exec, where the less the code does, the better.
#[derive(Clone)]
struct Comparisons {
    /// The rule's syscall, for errors.
    syscall: &'static str,
    items: [ScmpArgCompare; MAX_COMPARISONS],
    len: usize,
}

impl Comparisons {
    fn new(syscall: &'static str) -> Self {
        Comparisons {
            syscall,
            items: [ScmpArgCompare::new(0, ScmpCompareOp::Equal, 0); MAX_COMPARISONS],
            len: 0,
        }
    }

    fn push(&mut self, comparison: ScmpArgCompare) -> Result<(), SeccompError> {
        let slot = self
            .items
            .get_mut(self.len)
            .ok_or(SeccompError::TooManyComparisons {
                syscall: self.syscall,
                limit: MAX_COMPARISONS,
            })?;
        *slot = comparison;
        self.len += 1;
        Ok(())
    }

    fn as_slice(&self) -> &[ScmpArgCompare] {
        self.items.get(..self.len).unwrap_or(&[])
    }
}
