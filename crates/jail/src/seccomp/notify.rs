//! The notifying filter: calls whose verdict depends on a file the filter
//! cannot see (a `chmod` opening a shared host file, an ACL, a link, an
//! exec under an allowlist), put to the sandbox's supervisor on the host
//! (`SECCOMP_RET_USER_NOTIF`) rather than refused or allowed here.
//!
//! It owns the tables of those calls and their filter's build; it never
//! decides a notification (the supervisor does, in `crate::modes`) and
//! never loads the filter (the init does, with a listener it hands over).

use super::compile::{add_rule_as, attribute, new_context, resolve};
use super::rules::When::Always;
use super::rules::{enosys, eperm, Rule, MEMFD_EXECUTABLE};
use super::rules::{SETID_BITS, SETID_MODE_ARG1, SETID_MODE_ARG2, SETID_MODE_ARG3};
use super::{Arch, SeccompError};
use libseccomp::{ScmpAction, ScmpArch, ScmpArgCompare, ScmpCompareOp, ScmpFilterContext};

/// Mode bits a `chmod` may set that speak to the host's other users: group and other read,
/// write and execute. Write is refused outright by [`RULES`]; a mode with any of the others is
/// put to the sandbox's supervisor (see [`NOTIFY_RULES`]).
///
/// [`RULES`]: super::RULES
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
    /// As the `only_on` field of [`Rule`].
    pub only_on: Option<Arch>,
}

/// Mode changes that would give the host's other users a bit (read, execute) the file may not
/// have had. Through the owner swap the sandbox owns root's `--rw` files, so the kernel would
/// let it make root's `0600` file `0644` for good; the filter cannot see the file's mode or
/// whose it is, so the supervisor decides (`crate::modes`). A mode without those bits (`0600`,
/// `0700`) never leaves the kernel. Loaded as a second filter over [`RULES`]: where both
/// match (set-ID, group or other write) the kernel takes the errno, which outranks a
/// notification.
///
/// [`RULES`]: super::RULES
#[rustfmt::skip]
pub const NOTIFY_RULES: &[NotifyRule] = &[
    NotifyRule { syscall: "chmod",     mode_arg: 1, reason: "open a shared host file to other local users", only_on: Some(Arch::X86_64) },
    NotifyRule { syscall: "fchmod",    mode_arg: 1, reason: "open a shared host file to other local users", only_on: None },
    NotifyRule { syscall: "fchmodat",  mode_arg: 2, reason: "open a shared host file to other local users", only_on: None },
    NotifyRule { syscall: "fchmodat2", mode_arg: 2, reason: "open a shared host file to other local users", only_on: None },
];

/// Mode bits a `chmod` in the notifying filter puts to the supervisor: the shared bits, and the
/// set-ID bits, which the supervisor always refuses. In a process sandbox the main filter refuses
/// a set-ID mode first (its errno outranks a notification); for a helper of warden's own that
/// changes the host's files for a sandbox (runsc, a VM's file servers), this filter is the only
/// one on the host, so a set-ID mode a sandbox asks of the helper's kernel (gVisor's) is refused
/// on the host whatever that kernel let through.
pub const JUDGED_MODE_BITS: u64 = SHARED_MODE_BITS | SETID_BITS;

/// Creating calls whose mode carries a set-ID bit, refused outright in the notifying filter too,
/// for the same helpers: a file runsc's file server creates for the sandbox with a set-ID mode
/// would stay on the host, set-user-ID of the workspace's owner. (`openat2`'s mode is behind a
/// pointer the filter cannot read; runsc does not create files with it, and a VM's file server
/// needs it.)
#[rustfmt::skip]
pub const SETID_CREATE_RULES: &[Rule] = &[
    eperm("open",    SETID_MODE_ARG2, "create a setuid/setgid file on the host for a sandbox").only_on(Arch::X86_64),
    eperm("creat",   SETID_MODE_ARG1, "create a setuid/setgid file on the host for a sandbox").only_on(Arch::X86_64),
    eperm("openat",  SETID_MODE_ARG3, "create a setuid/setgid file on the host for a sandbox"),
    eperm("mknod",   SETID_MODE_ARG1, "create a setuid/setgid node on the host for a sandbox").only_on(Arch::X86_64),
    eperm("mknodat", SETID_MODE_ARG2, "create a setuid/setgid node on the host for a sandbox"),
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

/// Builds the notifying filter ([`NOTIFY_RULES`], [`FILE_NOTIFY_RULES`], [`SETID_CREATE_RULES`]
/// and with `exec` the exec allowlist's
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
            if JUDGED_MODE_BITS & bit == 0 {
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
    for rule in SETID_CREATE_RULES {
        add_rule_as(&mut filter, arch, rule, ScmpAction::Errno(rule.errno))?;
    }
    if exec {
        for rule in EXEC_NOTIFY_RULES {
            add_rule_as(&mut filter, arch, rule, ScmpAction::Notify)?;
        }
    }
    Ok(filter)
}
