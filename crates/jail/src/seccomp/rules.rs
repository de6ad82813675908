//! The rule tables, each rule with the threat it closes: [`RULES`], every
//! sandbox's filter; [`DEGRADED_RULES`] (with [`DEGRADED_FD_TWINS`]) for a
//! sandbox without namespaces; [`EXEC_ALLOWLIST_RULES`] for one with an exec
//! allowlist; and the argument conditions they are written with.
//!
//! Pure data, reviewed like prose: it never builds or loads a filter (that
//! is [`super::compile`]) and holds no logic beyond the `const fn`s that
//! spell a rule.

use super::Arch;
use When::Always;

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
pub(super) const SETID_BITS: u64 = (libc::S_ISUID | libc::S_ISGID) as u64;
/// A mode argument (at index 1, 2 or 3) with the setuid or setgid bit.
const fn setid_mode(arg: u32) -> When {
    When::AnyBitSet {
        arg,
        mask: SETID_BITS,
    }
}
pub(super) const SETID_MODE_ARG1: When = setid_mode(1);
pub(super) const SETID_MODE_ARG2: When = setid_mode(2);
pub(super) const SETID_MODE_ARG3: When = setid_mode(3);
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
pub(super) const UNSHARE_NAMESPACE: When = When::AnyBitSet {
    arg: 0,
    mask: NAMESPACE_FLAGS,
};
/// `clone(flags, ..)` creating any namespace; the flags are the first argument on both x86_64
/// and aarch64.
pub(super) const CLONE_NAMESPACE: When = When::AnyBitSet {
    arg: 0,
    mask: CLONE_NAMESPACE_FLAGS,
};

pub(super) const fn eperm(syscall: &'static str, when: When, reason: &'static str) -> Rule {
    Rule {
        syscall,
        when,
        errno: libc::EPERM,
        reason,
        only_on: None,
    }
}

pub(super) const fn enosys(syscall: &'static str, when: When, reason: &'static str) -> Rule {
    Rule {
        syscall,
        when,
        errno: libc::ENOSYS,
        reason,
        only_on: None,
    }
}

impl Rule {
    pub(super) const fn only_on(self, arch: Arch) -> Rule {
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
///
/// [`build_filter`]: super::build_filter
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

/// `include/uapi/linux/memfd.h`: a memfd that can never be made executable.
const MFD_NOEXEC_SEAL: u64 = 0x0008;

/// `memfd_create` without `MFD_NOEXEC_SEAL`: a memfd that could be executed.
pub(super) const MEMFD_EXECUTABLE: When = When::All(&[Cond::MaskedEq {
    arg: 1,
    mask: MFD_NOEXEC_SEAL,
    value: 0,
}]);

/// Rules added when the sandbox has an exec allowlist (`process.allow_exec`), loaded as their
/// own filter. (An executable memfd is refused too, but by the supervisor, which records it:
/// see [`EXEC_NOTIFY_RULES`].)
///
/// [`EXEC_NOTIFY_RULES`]: super::EXEC_NOTIFY_RULES
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
