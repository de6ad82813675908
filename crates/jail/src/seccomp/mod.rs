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
//! and one with an exec allowlist, get a second, fixed table on top).//!
//! The parts, one file each: `rules` the tables with their reasons,
//! `compile` a table turned into a filter, `notify` the calls put to the
//! supervisor and their filter. This file holds the errors, the
//! architectures and the loading.

mod compile;
mod gvisor;
mod notify;
mod rules;

pub use compile::{
    build_degraded_filter, build_exec_allowlist_filter, build_filter, build_filter_for,
    UNIFIED_NUMBERS,
};
pub use gvisor::{build_gvisor_filter_for, GVISOR_RULES};
pub use notify::{
    build_notify_filter_for, NotifyRule, EXEC_NOTIFY_RULES, FILE_NOTIFY_RULES, JUDGED_MODE_BITS,
    NOTIFY_RULES, SETID_CREATE_RULES, SHARED_MODE_BITS,
};
pub use rules::{
    Cond, Rule, When, CLONE_NAMESPACE_FLAGS, DEGRADED_FD_TWINS, DEGRADED_RULES,
    EXEC_ALLOWLIST_RULES, NAMESPACE_FLAGS, RULES,
};

use libseccomp::error::SeccompError as ScmpError;
use libseccomp::ScmpArch;

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

/// Build and load the degraded-mode filter into the calling process.
pub fn install_degraded() -> Result<(), SeccompError> {
    build_degraded_filter()?
        .load()
        .map_err(|source| SeccompError::Load { source })
}

/// Build and load the exec allowlist's filter into the calling process.
pub fn install_exec_allowlist() -> Result<(), SeccompError> {
    build_exec_allowlist_filter()?
        .load()
        .map_err(|source| SeccompError::Load { source })
}
