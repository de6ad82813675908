//! The filter every process of a gVisor sandbox runs under, inside gVisor's
//! kernel: the first process gets it from runsc (the bundle's
//! `linux.seccomp`, see `crate::gvisor::bundle`), each later one loads it
//! itself before its command runs (`crate::gvisor::shim`), since runsc
//! applies the bundle's filter to the first process only.
//!
//! It owns the table and its build; the mode judge on the host (`crate::modes`,
//! over runsc's own calls) holds the same line whatever gVisor's kernel does.

use super::compile::{add_rule_as, attribute, new_context};
use super::rules::When::Always;
use super::rules::{
    enosys, eperm, Rule, CLONE_NAMESPACE, SETID_MODE_ARG1, SETID_MODE_ARG2, SETID_MODE_ARG3,
    UNSHARE_NAMESPACE,
};
use super::{Arch, SeccompError};
use libseccomp::{ScmpAction, ScmpArch, ScmpFilterContext};

/// What gVisor's kernel refuses a sandbox's processes, as the process backend's filter does: a
/// namespace of their own, and a file with set-user-ID or set-group-ID bits, made or changed (gVisor carries the mode to the
/// host's file through its file server, so a workspace would hold a set-user-ID file of its
/// owner's for anyone on the host to run). `openat2`, whose mode is behind a pointer, is
/// answered as absent, as the process backend answers it.
#[rustfmt::skip]
pub const GVISOR_RULES: &[Rule] = &[
    eperm("chmod",     SETID_MODE_ARG1, "leave a setuid/setgid file for the host to run").only_on(Arch::X86_64),
    eperm("fchmod",    SETID_MODE_ARG1, "leave a setuid/setgid file for the host to run"),
    eperm("fchmodat",  SETID_MODE_ARG2, "leave a setuid/setgid file for the host to run"),
    eperm("fchmodat2", SETID_MODE_ARG2, "leave a setuid/setgid file for the host to run"),
    eperm("creat",     SETID_MODE_ARG1, "create a setuid/setgid file for the host to run").only_on(Arch::X86_64),
    eperm("open",      SETID_MODE_ARG2, "create a setuid/setgid file for the host to run").only_on(Arch::X86_64),
    eperm("openat",    SETID_MODE_ARG3, "create a setuid/setgid file for the host to run"),
    eperm("mknod",     SETID_MODE_ARG1, "create a setuid/setgid node for the host to run").only_on(Arch::X86_64),
    eperm("mknodat",   SETID_MODE_ARG2, "create a setuid/setgid node for the host to run"),
    enosys("openat2",  Always,          "its mode is behind a pointer the filter cannot read"),
    // Inside a user namespace of its own a process holds every capability, which lifts it
    // past RLIMIT_NPROC (the `--pids` bound inside gVisor): no namespace is made, as the
    // process backend's filter makes none.
    eperm("unshare",   UNSHARE_NAMESPACE, "create a namespace: a user namespace lifts the process bound"),
    eperm("clone",     CLONE_NAMESPACE,   "create a namespace while forking (as unshare)"),
    enosys("clone3",   Always,            "its flags are in memory the filter cannot read; ENOSYS makes libc fall back to clone, which is filtered"),
    eperm("setns",     Always,            "join another namespace"),
];

/// Builds [`GVISOR_RULES`]' filter for `arch`: the build script compiles it ahead of time, and
/// each process a gVisor sandbox starts after its first loads it (with `no_new_privs`) before
/// its command runs.
pub fn build_gvisor_filter_for(arch: Arch) -> Result<ScmpFilterContext, SeccompError> {
    let mut filter = new_context()?;
    if ScmpArch::native() != arch.scmp() {
        attribute("the target architecture", filter.add_arch(arch.scmp()))?;
        attribute(
            "the build host's architecture",
            filter.remove_arch(ScmpArch::native()),
        )?;
    }
    for rule in GVISOR_RULES {
        add_rule_as(&mut filter, arch, rule, ScmpAction::Errno(rule.errno))?;
    }
    Ok(filter)
}
