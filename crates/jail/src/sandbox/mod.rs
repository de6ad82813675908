//! The supervisor side: prepares a sandbox from a spec, spawns its init into
//! new namespaces, writes its ID maps, confines it in a cgroup, relays its
//! terminal, enforces the deadline, and maps how it ended to an exit status.
//!
//! A start goes through stages, each in a file of its own and each handing
//! the next a value of its own type: [`prepare`] (on the host, before the
//! clone: `Prepared`) → [`clone`] (the clone and the ID maps: `Cloned`) →
//! [`start`] (the go-ahead to the final message: `Started`) → [`running`]
//! (supervision until every process is gone: the [`Outcome`]).

mod attach;
mod clone;
mod error;
mod host_paths;
mod outcome;
mod plan;
mod prepare;
mod release;
mod running;
mod setup;
mod start;
mod supervision;

pub(crate) use attach::socket_source;
pub use attach::{Attach, Desk, Network, SocketSource};
pub use clone::SingleThreaded;
pub use error::JailError;
pub use outcome::Outcome;
pub(crate) use plan::give_tree;
pub use plan::{open_host_path, open_workspace};

use crate::confine::degraded;
use crate::host;
use std::ffi::CString;
use std::os::fd::OwnedFd;
use warden_audit::EventSink;
use warden_policy::SandboxSpec;

use error::sys_err;

/// The host ID that the sandbox's user maps to when warden runs as root.
pub const NOBODY: u32 = 65534;

fn cstring(s: &str) -> Result<CString, JailError> {
    CString::new(s).map_err(|_| JailError::Nul(s.to_string()))
}

/// How the sandbox runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Program {
    /// The spec's command; the sandbox ends with it (`warden run`).
    Command,
    /// No command of its own: the init serves spawn requests until the
    /// caller ends it (`warden create`/`start`, the daemon).
    Service,
}

/// Run `spec` in a new sandbox named `id` and return when every process of
/// it is gone. Events go to `events`; the network is served by `attach`.
pub fn run(
    spec: &SandboxSpec,
    id: &str,
    program: Program,
    events: &mut dyn EventSink,
    attach: &mut dyn Attach,
) -> Result<Outcome, JailError> {
    if crate::SECCOMP_PROGRAM.is_empty() {
        return Err(JailError::UnsupportedArch(std::env::consts::ARCH));
    }
    match run_mode(spec, id, events, Mode::Namespaces, program, attach) {
        // Nothing of the command ran: the namespaces failed before it could.
        Err(JailError::UserNamespaces { why, .. }) if spec.allow_degraded => {
            degraded(
                events,
                id,
                "namespaces",
                &format!("{why}; {}", host::LOST_WITHOUT_NAMESPACES),
            );
            run_mode(spec, id, events, Mode::Degraded, program, attach)
        }
        other => other,
    }
}

/// How the sandbox is built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Every namespace, the assembled root: full isolation.
    Namespaces,
    /// No namespaces (the host forbids them and the person allowed a
    /// degraded run): Landlock, seccomp, no capabilities, rlimits, cgroups
    /// where root allows, and a subreaper that kills every descendant.
    Degraded,
}

/// One attempt at a sandbox, in `mode`: the stages of a start, each
/// handing the next what it made.
fn run_mode(
    spec: &SandboxSpec,
    id: &str,
    events: &mut dyn EventSink,
    mode: Mode,
    program: Program,
    attach: &mut dyn Attach,
) -> Result<Outcome, JailError> {
    let prepared = prepare::prepare(spec, id, events, mode, program, attach)?;
    let cloned = clone::clone(prepared)?;
    let started = start::start(cloned, spec, id, events, attach)?;
    running::supervise(started, spec, id, events, attach)
}

/// A connected pair of sequenced-packet Unix sockets (close-on-exec) when
/// `wanted`: the supervisor's end and the init's, for descriptors handed
/// between them.
fn pair_if(
    wanted: bool,
    what: &'static str,
) -> Result<(Option<OwnedFd>, Option<OwnedFd>), JailError> {
    if !wanted {
        return Ok((None, None));
    }
    let (p, c) = nix::sys::socket::socketpair(
        nix::sys::socket::AddressFamily::Unix,
        nix::sys::socket::SockType::SeqPacket,
        None,
        nix::sys::socket::SockFlag::SOCK_CLOEXEC,
    )
    .map_err(sys_err(what))?;
    Ok((Some(p), Some(c)))
}
