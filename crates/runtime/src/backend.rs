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
        self.run_held(spec, id, program, events, attach, &Held::default())
    }

    /// [`Backend::run`], a VM held through `held` while it runs (what
    /// pauses and resumes it: see [`Backend::pause`]).
    pub fn run_held(
        self,
        spec: &SandboxSpec,
        id: &str,
        program: Program,
        events: &mut dyn EventSink,
        attach: &mut dyn Attach,
        held: &Held,
    ) -> Result<Outcome, JailError> {
        match self {
            Backend::Process => warden_jail::run(spec, id, program, events, attach),
            Backend::Gvisor => warden_jail::gvisor::run(spec, id, program, events, attach)
                .map_err(|e| JailError::Setup(warden_jail::chain_str(&e))),
            Backend::Vm => {
                warden_vm::backend::run_controlled(spec, id, program, events, attach, &held.vm)
                    .map_err(|e| vm_error(spec, &e))
            }
        }
    }
}

/// A VM backend's error as the jail's: a share refused with a reason code
/// keeps its code and the bind it is about (its option and its position
/// among that option's paths), for the door to word.
fn vm_error(spec: &SandboxSpec, e: &warden_vm::backend::VmError) -> JailError {
    let why = warden_jail::chain_str(e);
    let Some((code, bind)) = e.refused_share().and_then(|s| refused_bind(Some(spec), s)) else {
        return JailError::Setup(why);
    };
    JailError::BindRefused { code, bind, why }
}

/// A share refused with a reason code: its code, and which bind it is
/// (its option's profile key, and its position among that option's paths
/// in `spec`, when the spec is known).
fn refused_bind(
    spec: Option<&SandboxSpec>,
    share: &warden_vm::shares::ShareError,
) -> Option<(&'static str, (&'static str, Option<usize>))> {
    let (code, what, path) = share.refused()?;
    let option = match what {
        "filesystem.read_write" => "filesystem.read_write",
        "filesystem.read_only" => "filesystem.read_only",
        _ => "filesystem.rootfs",
    };
    let writable = option == "filesystem.read_write";
    let index = match option {
        "filesystem.rootfs" => None,
        _ => spec.and_then(|spec| {
            spec.filesystem
                .binds
                .iter()
                .filter(|b| b.writable == writable)
                .position(|b| b.path == path)
        }),
    };
    Some((code, (option, index)))
}

/// The most host memory a sandbox of `spec` may hold: what its backend's
/// cgroup allows, for whoever counts sandboxes against a budget (a
/// token's memory quota). A process sandbox's cgroup holds its limit; a
/// gVisor sandbox's holds runsc's sentry and gofer beside it
/// ([`warden_jail::gvisor::cgroup_memory`]); a VM's holds the guest's RAM
/// and the VMM beside it ([`warden_vm::backend::memory_held`]). Each is
/// the function its backend sets its cgroup with, so the two never
/// disagree.
pub fn memory_held(spec: &SandboxSpec) -> u64 {
    match Backend::of(spec) {
        Backend::Process => spec.resources.memory.value,
        Backend::Gvisor => warden_jail::gvisor::cgroup_memory(spec),
        Backend::Vm => warden_vm::backend::memory_held(spec),
    }
}

/// Make the cgroups of this process's sandboxes, whatever their backend,
/// under `parent` (relative to each hierarchy's root) instead of
/// warden's own: a container manager's cgroup for the container (the OCI
/// door's `linux.cgroupsPath`). Plain names only
/// ([`checked_cgroup_parent`]); set once, before any sandbox's cgroup is
/// made.
pub fn place_cgroups_under(parent: &str) -> Result<(), warden_jail::cgroup::ParentError> {
    warden_jail::cgroup::place_under(parent)
}

/// `path` as a parent of sandbox cgroups: plain names below a
/// hierarchy's root, or why not (a `..`, a `.`, a name of other
/// characters).
pub fn checked_cgroup_parent(path: &str) -> Result<PathBuf, warden_jail::cgroup::ParentError> {
    warden_jail::cgroup::checked_parent(path)
}

/// What a supervisor holds a running sandbox by, for pausing and
/// resuming it: its cgroups (the process backend's freezer) and its VM's
/// control (the microVM backend's VMM).
#[derive(Clone, Default)]
pub struct Held {
    pub cgroups: Vec<PathBuf>,
    pub vm: warden_vm::control::Control,
}

impl Held {
    /// The PID the sandbox's processes descend from on the host: its init,
    /// or for a VM its VMM's keeper, which a resume from disk replaces
    /// (none while the VM is on disk).
    pub fn root_pid(&self, backend: Backend, init: i32) -> Option<i32> {
        match backend {
            Backend::Vm => self.vm.vmm_pid().map(|p| p as i32),
            _ => Some(init),
        }
    }
}

/// How a sandbox is paused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PauseHow {
    /// Frozen in place, its memory kept in the host's RAM.
    InPlace,
    /// Its memory and devices saved into this directory, its RAM freed
    /// (the microVM backend only).
    ToDisk(PathBuf),
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
    /// The VM cannot be saved (a share is mounted in it, or a device
    /// cannot be saved); it runs on, untouched.
    #[error("{0}")]
    CannotSave(String),
    #[error(transparent)]
    Cgroup(#[from] warden_jail::cgroup::CgroupError),
    #[error(transparent)]
    Vm(warden_vm::control::ControlError),
}

impl BackendError {
    /// Refused for the sandbox's state, not failed: its VM is not served
    /// (booting, or ended), or is paused already, or is not paused.
    pub fn is_state(&self) -> bool {
        use warden_vm::control::ControlError;
        matches!(
            self,
            BackendError::Vm(
                ControlError::NotRunning | ControlError::Paused | ControlError::NotPaused
            )
        )
    }

    /// A share refused with a reason code when a VM paused to disk was
    /// restored (`share_link`, `share_changed`), as the doors word a
    /// boot's: its code, its option and its position among `spec`'s
    /// binds.
    pub fn refused_share(
        &self,
        spec: Option<&SandboxSpec>,
    ) -> Option<crate::lifecycle::refusal::StartRefusal> {
        let BackendError::Vm(warden_vm::control::ControlError::ShareRefused(share)) = self else {
            return None;
        };
        let (code, (option, index)) = refused_bind(spec, share)?;
        let field = warden_policy::Field::all().find(|f| f.profile_key() == Some(option));
        crate::lifecycle::refusal::StartRefusal::new(
            code,
            field,
            index.map(|i| i.to_string()).as_deref(),
        )
    }
}

impl From<warden_vm::control::ControlError> for BackendError {
    fn from(e: warden_vm::control::ControlError) -> BackendError {
        match e {
            warden_vm::control::ControlError::CannotSave(_) => {
                BackendError::CannotSave(e.to_string())
            }
            e => BackendError::Vm(e),
        }
    }
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
    ///
    /// A VM is paused by its VMM: in place (its vCPUs stopped, its memory
    /// kept) or to disk (its memory and devices saved, its VMM ended, its
    /// RAM freed), which a VM with a mounted share refuses
    /// ([`BackendError::CannotSave`]), running on.
    pub fn pause(self, held: &Held, how: &PauseHow) -> Result<&'static str, BackendError> {
        match (self, how) {
            // runsc and everything it starts (gVisor's kernel, its file
            // server, the ptrace platform's stubs) sit in the sandbox's
            // one cgroup: frozen together, as a process sandbox is.
            (Backend::Process | Backend::Gvisor, PauseHow::InPlace) => {
                let freezer = Freezer::find(&held.cgroups).ok_or(BackendError::NoFreezer)?;
                freezer.freeze(FREEZE_SETTLE)?;
                Ok(freezer.kind())
            }
            (Backend::Vm, PauseHow::InPlace) => {
                Ok(held.vm.pause(warden_vm::control::How::InPlace)?)
            }
            (Backend::Vm, PauseHow::ToDisk(dir)) => Ok(held
                .vm
                .pause(warden_vm::control::How::ToDisk(dir.clone()))?),
            (Backend::Process, PauseHow::ToDisk(_)) => Err(BackendError::Unsupported {
                what: "pausing a sandbox to disk",
                backend: self.name(),
            }),
            // runsc's own checkpoint needs a platform and a runsc this
            // host does not have (see docs/gvisor.md).
            (Backend::Gvisor, PauseHow::ToDisk(_)) => Err(BackendError::Unsupported {
                what: "pausing a sandbox to disk",
                backend: self.name(),
            }),
        }
    }

    /// Let a paused sandbox's processes go on where they were (a VM
    /// paused to disk restored into a new VMM).
    pub fn resume(self, held: &Held) -> Result<(), BackendError> {
        match self {
            Backend::Process | Backend::Gvisor => {
                let freezer = Freezer::find(&held.cgroups).ok_or(BackendError::NoFreezer)?;
                Ok(freezer.thaw()?)
            }
            Backend::Vm => Ok(held.vm.resume()?),
        }
    }

    /// Before a stop: a paused sandbox's processes made able to end (a VM
    /// paused to disk is not brought back for that: its state goes, and
    /// its relay ends).
    pub fn thaw_for_stop(self, held: &Held) {
        match self {
            Backend::Vm => {
                let _ = held.vm.discard();
            }
            _ => {
                let _ = self.resume(held);
            }
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

    /// Whether the backend can pause a sandbox to disk.
    pub fn pauses_to_disk(self) -> bool {
        self == Backend::Vm
    }
}
