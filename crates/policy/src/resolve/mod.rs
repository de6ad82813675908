//! Resolution: the merged [`Layer`] of every door's values, read through
//! the field table, becomes a [`SandboxSpec`], one function per section
//! of the spec (the file system in [`files`], the limits in [`limits`],
//! the network in [`network`], the environment's last additions in
//! [`env`]). Every value is checked here; an error carries its [`Field`]
//! and a reason, and each door words it.
//!
//! What warden itself supplies (where a sandbox's layer, home and caches
//! are kept, the free space there, the directories no bind may show, a
//! named sandbox's shell) is no option any door sets: it comes in a
//! [`Placement`], never as a value of the layer.

mod env;
mod files;
mod gvisor;
mod limits;
mod network;
mod process;
#[cfg(test)]
mod tests;
mod vm;

pub use network::parse_domains;

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::compose::Layer;
use crate::env::{resolve_env, EnvRequest};
use crate::error::{Problem, ResolveError};
use crate::fields::Field;
use crate::home::{self, Home, HOME_MOUNT};
use crate::secrets;
use crate::{
    Defaults, DiskLimit, FilesystemSpec, Isolation, OverlayDirs, ResourceSpec, SandboxSpec,
    WORKSPACE_MOUNT,
};

/// The facts of warden's own state a resolution needs, gathered by the
/// runtime (this crate does no I/O). None of them is an option: no door
/// sets them, and no trust rule applies to them.
#[derive(Debug, Clone, Default)]
pub struct Placement {
    /// Whether the caller's standard input is a terminal: the terminal
    /// when no source sets `tty`.
    pub stdin_is_terminal: bool,
    /// The command when no source names one (a named sandbox is created
    /// without one: `exec` then runs a shell).
    pub default_command: Vec<String>,
    /// Where warden's state store keeps the sandbox's workspace, when it
    /// does.
    pub workspace: Option<KeptWorkspace>,
    /// A named sandbox's kept home; a run without one gets a tmpfs.
    pub home_dir: Option<PathBuf>,
    /// The profile's directory of caches in warden's state.
    pub cache_dir: Option<PathBuf>,
    /// Free space of the file system that keeps what warden keeps for the
    /// sandbox: it bounds `resources.disk` and its default.
    pub disk_free: Option<u64>,
    /// Host directories no bind may show (warden's own state).
    pub hidden: Vec<PathBuf>,
    /// Names the owner answered "always" for this project before (`--ask`),
    /// allowed as the owner's own entries after the layer's.
    pub granted_domains: Vec<String>,
    /// Whether warden runs without root here: what a backend can keep on
    /// the host within a disk budget depends on it (`gvisor`'s budget is
    /// a tmpfs of a mount namespace only root makes).
    pub rootless: bool,
}

/// How the state store keeps a sandbox's workspace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeptWorkspace {
    /// Seen through an overlay whose layer is kept in these directories.
    Overlay(OverlayDirs),
    /// A host without overlayfs: the sandbox works on a copy, in this
    /// directory, which is then its workspace.
    Copy(PathBuf),
}

/// Whether warden keeps something on the host's disk for the sandbox, and
/// so gives it a disk limit: a run without an overlay, a kept home, caches
/// or writable volumes has nothing of it on disk. A writable volume's
/// writes are held within the limit while it runs.
fn keeps_something(
    overlay: bool,
    home: &Home,
    caches: &[crate::CacheMount],
    volumes: &[crate::VolumeMount],
) -> bool {
    overlay
        || matches!(home, Home::Dir(_))
        || !caches.is_empty()
        || volumes.iter().any(|v| v.writable)
}

impl Layer {
    /// Resolve these values into a spec: apply defaults, check every
    /// value, and build the command's environment from `host_env`.
    pub fn resolve(
        &self,
        placement: &Placement,
        defaults: &Defaults,
        host_env: &[(String, String)],
    ) -> Result<SandboxSpec, ResolveError> {
        let command = self.command(placement)?;
        // The workspace a copy of the store stands for: the copy itself,
        // never overlaid.
        let (workspace, overlay) = match &placement.workspace {
            Some(KeptWorkspace::Copy(dir)) => (Some(dir.clone()), false),
            Some(KeptWorkspace::Overlay(_)) => (self.path(Field::Workspace), true),
            None => (self.path(Field::Workspace), self.overlay()),
        };
        let rootfs = self.path(Field::Rootfs);
        let home_at = files::home_at(self.text(Field::HomeDir).as_deref())?;
        let home_mount = home_at.as_deref().unwrap_or(Path::new(HOME_MOUNT));
        let binds = files::binds(self, rootfs.as_deref(), workspace.as_deref(), home_mount)?;
        let volumes = files::volumes(&self.texts(Field::Volumes), home_mount)?;
        let user = process::user(self.text(Field::UserName))?;
        let limits = limits::limits(self, defaults)?;
        let hostname = self.hostname()?;
        let workdir = files::workdir(self.text(Field::Workdir).as_deref())?;
        let isolation = self.isolation()?;
        // A prepared root tree, or a VM's guest, brings its own home.
        let (home_spec, caches) = home::resolve(
            &self.texts(Field::Caches),
            rootfs.is_some() || isolation == Isolation::Vm,
            placement.home_dir.as_deref(),
            placement.cache_dir.as_deref(),
            home_mount,
        )?;
        if home_spec == Home::None && (home_at.is_some() || user.is_some()) {
            let field = match home_at {
                Some(_) => Field::HomeDir,
                None => Field::UserName,
            };
            return Err(field.invalid(Problem::HomeWithoutMount));
        }
        let home_text = home_mount.to_string_lossy();
        let home = match (&home_spec, workspace.is_some()) {
            (Home::Tmpfs | Home::Dir(_), _) => home_text.as_ref(),
            // A prepared root tree: its own home is unknown here.
            (Home::None, true) => WORKSPACE_MOUNT,
            (Home::None, false) => "/tmp",
        };
        let env_request = EnvRequest {
            set: self.pairs(Field::Env),
            pass: self.texts(Field::PassEnv),
        };
        let secrets = secrets::parse_secrets(
            &self.pairs(Field::Secret),
            &self.names_set(Field::SecretInBody),
            &env_request,
        )?;
        let secret_rules = secrets::parse_rules(&self.texts(Field::SecretRule), &secrets)?;
        let upstream_ca = self.paths(Field::UpstreamCa);
        for p in &upstream_ca {
            files::check_absolute(Field::UpstreamCa, p)?;
        }
        let mut env = resolve_env(&env_request, host_env, home)?;
        if let Some(name) = &user {
            process::user_env(&mut env, name, &env_request.set);
        }
        let publish = network::parse_publish(&self.texts(Field::Publish))?;
        let overlay_dirs = match &placement.workspace {
            Some(KeptWorkspace::Overlay(dirs)) => Some(dirs.clone()),
            _ => None,
        };
        if overlay && workspace.is_none() {
            return Err(Field::Overlay.invalid(Problem::OverlayWithoutWorkspace));
        }
        if overlay && overlay_dirs.is_none() {
            // Never a silent fall back to writing the real workspace.
            return Err(Field::Overlay.invalid(Problem::OverlayWithoutState));
        }
        let network = network::network(self, placement, &secrets, secret_rules, upstream_ca)?;
        let (env, desktop) = env::finish_env(self, env, &network, &secrets);
        let file_size = self.bytes(Field::FileSize);
        if file_size == Some(0) {
            return Err(Field::FileSize.invalid(Problem::ZeroFileSize));
        }
        let overlay = overlay_dirs.filter(|_| overlay);
        let keeps = keeps_something(overlay.is_some(), &home_spec, &caches, &volumes);
        let disk = self.disk(keeps, limits.memory.value, placement)?;
        gvisor::check(
            isolation,
            placement.rootless,
            overlay.is_some() || matches!(home_spec, Home::Dir(_)),
            &caches,
            &volumes,
            desktop.is_some(),
        )?;
        vm::check(isolation, placement.rootless, overlay.is_some())?;
        let runs_on_host = files::runs_on_host(self)?;
        if self.duration(Field::EgressIdleTimeout) == Some(Duration::ZERO) {
            return Err(Field::EgressIdleTimeout.invalid(Problem::ZeroIdleTimeout));
        }
        Ok(SandboxSpec {
            command,
            filesystem: FilesystemSpec {
                rootfs,
                workspace,
                binds,
                tmp_size: limits.tmp_size,
                overlay,
                hidden: placement.hidden.clone(),
                runs_on_host,
                home: home_spec,
                home_at,
                caches,
                workdir,
                disk,
                volumes,
                workspace_identity: None,
            },
            resources: ResourceSpec {
                memory: limits.memory,
                pids: limits.pids,
                cpus: self.cores(Field::Cpus),
                timeout: self.duration(Field::Timeout),
                open_files: limits.open_files,
                file_size: Some(file_size.unwrap_or(defaults.file_size)),
                audit_budget: audit_budget(self),
            },
            env,
            terminal: self.terminal(placement.stdin_is_terminal),
            hostname,
            user,
            network,
            publish,
            allow_degraded: self.on(Field::AllowDegraded),
            allow_exec: process::allow_exec(self, isolation)?,
            isolation,
            join_network: None,
            join_trust: None,
            desktop,
        })
    }

    /// The command: the one given, else the placement's default (a
    /// named sandbox's shell); never none, never an empty program.
    fn command(&self, placement: &Placement) -> Result<Vec<String>, ResolveError> {
        let mut command = self.argv(Field::Command);
        if command.is_empty() {
            command = placement.default_command.clone();
        }
        let first = command
            .first()
            .ok_or(Field::Command.invalid(Problem::NoCommand))?;
        if first.is_empty() {
            return Err(Field::Command.invalid(Problem::EmptyCommand));
        }
        // Arguments are NUL-terminated strings: one holding a NUL could
        // not be started (after the sandbox is made), so it is refused
        // here, as a variable's value is.
        if command.iter().any(|a| a.contains('\0')) {
            return Err(Field::Command.invalid(Problem::NulInCommand));
        }
        Ok(command)
    }

    fn hostname(&self) -> Result<String, ResolveError> {
        let hostname = self
            .text(Field::Hostname)
            .unwrap_or_else(|| "warden".to_string());
        if !valid_hostname(&hostname) {
            return Err(Field::Hostname.invalid(Problem::BadHostname(hostname)));
        }
        Ok(hostname)
    }

    fn isolation(&self) -> Result<Isolation, ResolveError> {
        Ok(match self.text(Field::Isolation).as_deref() {
            None | Some("process") => Isolation::Process,
            Some("gvisor") => Isolation::Gvisor,
            Some("vm") => Isolation::Vm,
            Some(other) => {
                return Err(Field::Isolation.invalid(Problem::BadIsolation(other.to_string())))
            }
        })
    }

    /// The disk budget of what the sandbox keeps (`keeps`: its layer,
    /// home, caches or writable volumes); none when it keeps nothing.
    fn disk(
        &self,
        keeps: bool,
        memory: u64,
        placement: &Placement,
    ) -> Result<Option<DiskLimit>, ResolveError> {
        if !keeps {
            return Ok(None);
        }
        let asked = self.bytes(Field::Disk);
        Ok(Some(DiskLimit {
            bytes: limits::disk_limit(asked, memory, placement.disk_free)?,
            asked: asked.is_some(),
        }))
    }
}

fn valid_hostname(h: &str) -> bool {
    !h.is_empty()
        && h.len() <= 63
        && !h.starts_with('-')
        && h.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

/// The bytes the sandbox's events may take in its audit log.
fn audit_budget(layer: &Layer) -> u64 {
    layer
        .bytes(Field::AuditBudget)
        .unwrap_or(crate::DEFAULT_AUDIT_BUDGET)
}
