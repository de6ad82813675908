//! Landlock: file access restricted again at the kernel's LSM layer, so that
//! a mistake in the mount table is not a hole. Read and execute beneath the
//! sandbox's root (which holds only what warden mounted); write only beneath
//! the workspace, `/tmp`, `/dev/shm`, declared read-write paths and the
//! harmless devices. Where the kernel's ABI allows, the sandbox is also
//! scoped: no signals to, and no abstract UNIX sockets of, anything outside.
//!
//! With an exec allowlist (`process.allow_exec`, see [`crate::exec_rules`])
//! the execute right is taken from every rule and granted back to the
//! allowed files alone, and the program directories' other programs lose
//! the read right too ([`carve`]): the loader cannot map what it cannot
//! open, and Landlock, not the mount, makes (and logs) each refusal.

mod carve;

use landlock::{
    Access, AccessFs, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset, RulesetAttr,
    RulesetCreatedAttr, RulesetStatus, Scope, ABI,
};
use std::path::{Path, PathBuf};

/// The newest ABI whose rights warden knows how to use (7 adds no access
/// right, only the logging of refusals to the kernel's audit log).
const ABI_TARGET: ABI = ABI::V7;

/// Why Landlock could not be applied.
#[derive(Debug, thiserror::Error)]
pub enum LandlockError {
    #[error("cannot build the Landlock ruleset")]
    Ruleset(#[source] landlock::RulesetError),
    #[error("cannot open {path} to add a Landlock rule")]
    Path {
        path: PathBuf,
        #[source]
        source: landlock::PathFdError,
    },
    #[error("cannot add the Landlock rule for {path}")]
    Rule {
        path: PathBuf,
        #[source]
        source: landlock::RulesetError,
    },
}

/// How much of the ruleset the kernel enforced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Enforcement {
    Full,
    Partial,
    None,
}

/// Restrict the calling process (and everything it starts) to the sandbox's
/// file rules: read and execute beneath `readable`, everything beneath
/// `writable`. `private_terminals` grants the sandbox's own devpts (only
/// when it has one: the host's would reach the person's other terminals).
pub fn restrict(
    readable: &[PathBuf],
    writable: &[PathBuf],
    private_terminals: bool,
) -> Result<Enforcement, LandlockError> {
    restrict_exec(readable, writable, private_terminals, None)
}

/// [`restrict`], and with `executable` (an exec allowlist) only those files
/// may be executed; `None` leaves execution to the read rules.
pub fn restrict_exec(
    readable: &[PathBuf],
    writable: &[PathBuf],
    private_terminals: bool,
    executable: Option<&[PathBuf]>,
) -> Result<Enforcement, LandlockError> {
    let handled = AccessFs::from_all(ABI_TARGET);
    let mut read = AccessFs::from_read(ABI_TARGET);
    let mut all = handled;
    if executable.is_some() {
        // Still handled (so refused where no rule grants it), granted by
        // no directory's rule.
        read &= !AccessFs::Execute;
        all &= !AccessFs::Execute;
    }
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(handled)
        .map_err(LandlockError::Ruleset)?
        .scope(Scope::from_all(ABI_TARGET))
        .map_err(LandlockError::Ruleset)?
        .create()
        .map_err(LandlockError::Ruleset)?
        // With an allowlist, the kernel reports each refusal of the
        // programs the sandbox runs (not only of this init) to its audit
        // log, where a root supervisor reads it (`landlock_audit`): the
        // refusal of a program started by a shell inside becomes an event.
        // Ignored by kernels before ABI 7 (best effort).
        .log_new_exec(executable.is_some())
        .map_err(LandlockError::Ruleset)?;
    let mut add = |path: &Path, access| -> Result<(), LandlockError> {
        let fd = PathFd::new(path).map_err(|source| LandlockError::Path {
            path: path.to_path_buf(),
            source,
        })?;
        ruleset
            .as_mut()
            .add_rule(PathBeneath::new(fd, access))
            .map(drop)
            .map_err(|source| LandlockError::Rule {
                path: path.to_path_buf(),
                source,
            })
    };
    // With an allowlist, the program directories' other programs are not
    // even readable (see `carve`); without one, one rule per root.
    let sealed = match executable {
        Some(_) => carve::sealed_dirs(writable),
        None => Vec::new(),
    };
    let file_rights = AccessFs::from_file(ABI_TARGET);
    for p in readable {
        for (path, access) in carve::rules(p, read, file_rights, &sealed) {
            add(&path, access)?;
        }
    }
    for p in writable {
        add(p, all)?;
    }
    // A rule on a file grants the rights of a file only: executing it and
    // reading it (the kernel reads a program it executes).
    for p in executable.unwrap_or_default() {
        add(p, AccessFs::Execute | AccessFs::ReadFile)?;
    }
    // Devices are written through, never created: write and ioctl rights on
    // the few that exist, so that terminals and /dev/null work.
    let terminals: &[&str] = if private_terminals {
        &["/dev/pts", "/dev/ptmx"]
    } else {
        &[]
    };
    for dev in ["/dev/null", "/dev/zero", "/dev/full", "/dev/tty"]
        .iter()
        .chain(terminals)
    {
        let p = Path::new(dev);
        if p.exists() {
            add(
                p,
                AccessFs::WriteFile | AccessFs::ReadFile | AccessFs::IoctlDev | AccessFs::Truncate,
            )?;
        }
    }
    let status = ruleset.restrict_self().map_err(LandlockError::Ruleset)?;
    Ok(match status.ruleset {
        RulesetStatus::FullyEnforced => Enforcement::Full,
        RulesetStatus::PartiallyEnforced => Enforcement::Partial,
        RulesetStatus::NotEnforced => Enforcement::None,
    })
}
