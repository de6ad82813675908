//! The in-sandbox half of `warden selftest`: each probe is a real attempt
//! at an escape, made with real system calls from inside a sandbox, that
//! reports what the kernel answered. The probes live beside the attacks
//! that run them (`attacks/`, one table of probes per category); this
//! module dispatches `warden __probe NAME ARGS` to them and holds what
//! they share.
//!
//! A probe never decides that it was contained because it *could not try*:
//! each returns the errno (or success) of the attempt itself, and says
//! "escaped" when the call did what an attacker wanted.

use crate::attacks;
use nix::errno::Errno;

/// What one probe found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// The attempt failed in the way that containment looks like.
    pub contained: bool,
    /// What happened, in a few words.
    pub detail: String,
    /// The probe did not try at all (a harmful one outside a warden
    /// sandbox): the attack is neither contained nor escaped.
    pub refused: bool,
}

/// One probe: its name on the `__probe` command line, whether it may run
/// only under a warden init, and the attempt.
pub(crate) struct Probe {
    pub(crate) name: &'static str,
    /// Spends resources or signals processes: runs only where it is meant
    /// to, under a warden init (PID 1 of a sandbox), never on a host where
    /// someone typed the hidden command by hand.
    pub(crate) harmful: bool,
    pub(crate) run: fn(&[String]) -> Finding,
}

/// Every category's probes.
fn tables() -> [&'static [Probe]; 11] {
    [
        attacks::fs::PROBES,
        attacks::process::PROBES,
        attacks::kernel::PROBES,
        attacks::net::PROBES,
        attacks::resources::PROBES,
        attacks::persistence::PROBES,
        attacks::secrets::PROBES,
        attacks::secret_proxy::PROBES,
        attacks::secret_routes::PROBES,
        attacks::cross::PROBES,
        attacks::exec::PROBES,
    ]
}

/// Run the probe `name` with its arguments. Unknown names are reported,
/// never taken for containment.
pub fn run(name: &str, args: &[String]) -> Finding {
    let Some(probe) = tables().into_iter().flatten().find(|p| p.name == name) else {
        return escaped(format!("unknown probe {name:?}: nothing was tried"));
    };
    if probe.harmful {
        let init = std::fs::read("/proc/1/cmdline").unwrap_or_default();
        if !init.windows(6).any(|w| w == b"warden") {
            return Finding {
                contained: false,
                detail: format!(
                    "probe {name} refused to run: PID 1 is not a warden sandbox's init (no PID namespace?)"
                ),
                refused: true,
            };
        }
    }
    (probe.run)(args)
}

pub(crate) fn contained(detail: impl Into<String>) -> Finding {
    Finding {
        contained: true,
        detail: detail.into(),
        refused: false,
    }
}

pub(crate) fn escaped(detail: impl Into<String>) -> Finding {
    Finding {
        contained: false,
        detail: detail.into(),
        refused: false,
    }
}

pub(crate) fn errno_name(e: Errno) -> String {
    format!("{e} ({})", std::io::Error::from_raw_os_error(e as i32))
}

/// A call that must be refused: contained when it fails with one of
/// `expected`, escaped when it succeeds; any other failure is reported as
/// not contained by the layer under test, so that a filter that went
/// missing is not hidden by an argument the kernel happened to reject.
pub(crate) fn must_fail<T: std::fmt::Display>(
    what: &str,
    r: Result<T, Errno>,
    expected: &[Errno],
) -> Finding {
    match r {
        Ok(v) => escaped(format!("{what} succeeded (returned {v})")),
        Err(e) if expected.contains(&e) => contained(format!("{what}: {}", errno_name(e))),
        Err(e) => escaped(format!(
            "{what} failed with {} rather than being refused",
            errno_name(e)
        )),
    }
}

/// What seccomp (or a missing capability) answers.
pub(crate) const EPERM: &[Errno] = &[Errno::EPERM];

pub(crate) fn arg(args: &[String], i: usize) -> &str {
    args.get(i).map(String::as_str).unwrap_or("")
}

pub(crate) fn port(args: &[String], i: usize) -> u16 {
    arg(args, i).parse().unwrap_or(0)
}
