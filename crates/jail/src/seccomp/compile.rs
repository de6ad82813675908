//! The filters' build: a rule table turned into a libseccomp filter for
//! one architecture, with the architecture checks libseccomp emits and the
//! bad-architecture action that kills a call through a foreign ABI. The
//! build script compiles the main filter with it ahead of time; the init
//! builds the degraded and exec allowlist filters with it at run time.
//!
//! It never assembles BPF by hand and never decides what is denied: every
//! rule comes from a table of [`super::rules`] or [`super::notify`].

use super::rules::{Cond, Rule, When, DEGRADED_RULES, EXEC_ALLOWLIST_RULES, RULES};
use super::{Arch, SeccompError};
use libseccomp::error::SeccompError as ScmpError;
use libseccomp::{
    ScmpAction, ScmpArch, ScmpArgCompare, ScmpCompareOp, ScmpFilterContext, ScmpSyscall,
};

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
pub(super) fn native_arch() -> Result<Arch, SeccompError> {
    Arch::native().ok_or(SeccompError::UnsupportedArch {
        arch: std::env::consts::ARCH,
    })
}

/// A context every filter starts from: it allows by default, and kills a call made through any
/// ABI the filter does not contain (see [`build_filter`]).
pub(super) fn new_context() -> Result<ScmpFilterContext, SeccompError> {
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
pub(super) fn attribute<T>(
    attribute: &'static str,
    set: Result<T, ScmpError>,
) -> Result<(), SeccompError> {
    set.map(|_| ())
        .map_err(|source| SeccompError::SetAttribute { attribute, source })
}

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

/// Adds one table rule to the filter, as one or more libseccomp rules.
fn add_rule(filter: &mut ScmpFilterContext, arch: Arch, rule: &Rule) -> Result<(), SeccompError> {
    add_rule_as(filter, arch, rule, ScmpAction::Errno(rule.errno))
}

/// Adds one table rule with `action` for the calls it matches.
pub(super) fn add_rule_as(
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
pub(super) fn resolve(name: &'static str, arch: Arch) -> Result<ScmpSyscall, SeccompError> {
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
