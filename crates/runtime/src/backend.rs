//! The backend seam: what isolates a sandbox. The supervisor and `warden
//! run` start a sandbox's init and reach its spawn channel through
//! [`Backend::run`], whose contract is the process backend's
//! ([`warden_jail::run`]): events as they happen (`created`, `started`,
//! `exited`), the network served through [`Attach`], for a long-lived
//! sandbox a `SOCK_SEQPACKET` spawn channel speaking
//! [`warden_jail::spawn`]'s protocol handed to [`Attach::service`], and the
//! outcome when every process of the sandbox is gone.

use warden_audit::EventSink;
use warden_jail::{Attach, JailError, Outcome, Program};
use warden_policy::{Isolation, SandboxSpec};

/// The backends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// Namespaces, Landlock, seccomp and cgroups on the host's kernel
    /// (`warden-jail`).
    Process,
    /// A microVM with its own kernel running warden's init (`warden-vm`).
    Vm,
}

impl Backend {
    /// The backend `spec` asks for.
    pub fn of(spec: &SandboxSpec) -> Backend {
        match spec.isolation {
            Isolation::Process => Backend::Process,
            Isolation::Vm => Backend::Vm,
        }
    }

    /// Run `spec` as `program` in a new sandbox named `id`; returns when
    /// every process of it is gone. The process backend must be called
    /// while the process is single-threaded (it clones the sandbox).
    pub fn run(
        self,
        spec: &SandboxSpec,
        id: &str,
        program: Program,
        events: &mut dyn EventSink,
        attach: &mut dyn Attach,
    ) -> Result<Outcome, JailError> {
        match self {
            Backend::Process => warden_jail::run(spec, id, program, events, attach),
            Backend::Vm => warden_vm::run(spec, id, program, events, attach)
                .map_err(|e| JailError::Setup(warden_jail::chain_str(&e))),
        }
    }
}
