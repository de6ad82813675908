//! The backend seam: what isolates a sandbox. The supervisor and `warden
//! run` start a sandbox's init and reach its spawn channel through
//! [`Backend::run`], whose contract is the process backend's
//! ([`warden_jail::run`]): events as they happen (`created`, `started`,
//! `exited`), the network served through [`Attach`], for a long-lived
//! sandbox a `SOCK_SEQPACKET` spawn channel speaking
//! [`warden_jail::spawn`]'s protocol handed to [`Attach::service`], and the
//! outcome when every process of the sandbox is gone.

use std::path::PathBuf;
use warden_audit::EventSink;
use warden_jail::cgroup::{Freezer, FREEZE_SETTLE};
use warden_jail::{Attach, JailError, Outcome, Program};
use warden_policy::{Isolation, SandboxSpec};

/// The backends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// Namespaces, Landlock, seccomp and cgroups on the host's kernel
    /// (`warden-jail`).
    Process,
    /// gVisor's kernel in user space, under runsc
    /// (`warden_jail::gvisor`).
    Gvisor,
    /// A microVM with its own kernel running warden's init (`warden-vm`).
    Vm,
}

impl Backend {
    /// The backend `spec` asks for.
    pub fn of(spec: &SandboxSpec) -> Backend {
        match spec.isolation {
            Isolation::Process => Backend::Process,
            Isolation::Gvisor => Backend::Gvisor,
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
            Backend::Gvisor => warden_jail::gvisor::run(spec, id, program, events, attach)
                .map_err(|e| JailError::Setup(warden_jail::chain_str(&e))),
            Backend::Vm => warden_vm::run(spec, id, program, events, attach)
                .map_err(|e| JailError::Setup(warden_jail::chain_str(&e))),
        }
    }
}

/// Why a backend could not pause, resume or snapshot a sandbox.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// The backend cannot do it (yet); nothing was changed.
    #[error("{what} is not supported by the {backend} backend yet")]
    Unsupported {
        what: &'static str,
        backend: &'static str,
    },
    /// The sandbox has no cgroup with a freezer.
    #[error("the sandbox runs without a cgroup that has a freezer (rootless without a delegated cgroup: see `warden doctor`), so it cannot be frozen in place")]
    NoFreezer,
    #[error(transparent)]
    Cgroup(#[from] warden_jail::cgroup::CgroupError),
}

impl Backend {
    /// The backend's name, as a person reads it.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Process => "process",
            Backend::Gvisor => "gVisor",
            Backend::Vm => "microVM",
        }
    }

    /// Freeze every process of the sandbox in place, its memory kept
    /// (the process backend: the cgroup freezer over `cgroups`, the
    /// sandbox's directories as its supervisor found them); returns which
    /// freezer holds it. Nothing outlives a host reboot: a frozen
    /// process's memory is the host's RAM.
    pub fn pause(self, cgroups: &[PathBuf]) -> Result<&'static str, BackendError> {
        match self {
            Backend::Process => {
                let freezer = Freezer::find(cgroups).ok_or(BackendError::NoFreezer)?;
                freezer.freeze(FREEZE_SETTLE)?;
                Ok(freezer.kind())
            }
            // A VM is paused by its VMM (and to disk), gVisor by runsc;
            // the seam is here.
            Backend::Gvisor | Backend::Vm => Err(BackendError::Unsupported {
                what: "pausing a sandbox",
                backend: self.name(),
            }),
        }
    }

    /// Let a paused sandbox's processes go on where they were.
    pub fn resume(self, cgroups: &[PathBuf]) -> Result<(), BackendError> {
        match self {
            Backend::Process => {
                let freezer = Freezer::find(cgroups).ok_or(BackendError::NoFreezer)?;
                Ok(freezer.thaw()?)
            }
            Backend::Gvisor | Backend::Vm => Err(BackendError::Unsupported {
                what: "resuming a sandbox",
                backend: self.name(),
            }),
        }
    }

    /// Whether the backend carries a sandbox's running processes into a
    /// snapshot or a fork. The process backend keeps files only (CRIU,
    /// the way to save processes, does not work on every kernel, this
    /// one's included): a snapshot or fork of it starts with the files
    /// and no process.
    pub fn snapshots_processes(self) -> bool {
        false
    }
}
