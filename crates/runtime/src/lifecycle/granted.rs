//! What a token's sandbox may keep of the host's reach when it runs again
//! or is copied: only what the owner grants a token **now**.
//!
//! A token's sandbox runs its spec as it was resolved at create. A token
//! holder never names a host path, a secret, a pinned host or a workspace
//! outside the daemon's roots itself (the trust rule): each came from the
//! owner's profile the sandbox was made from, from the host's defaults or
//! from the daemon's configuration, as they were then. A new run (a start
//! through any door: the API, the E2B door, MCP, the owner's command
//! line) or a copy made later must not replay a grant the owner has since
//! taken back, so each host-reach part of the kept spec is compared with
//! what a token creating from the same profile would be given now (the
//! profile resolved again, as a caller, with the host's current defaults),
//! the workspace and volumes with what the daemon's configuration grants
//! now ([`HostGrants`]), the sizes with the host's defaults (or the
//! profile's, above them), and the grants file with the principal's own.
//!
//! The check is here, below the doors, so that every door that starts or
//! copies a token's sandbox runs the same one; each door words the
//! refusal ([`NotGranted`] carries the field and a reason).

use std::path::Path;
use warden_policy::compose::{Catalog, Layer, Origin};
use warden_policy::{format_size, Defaults, Field, NetworkSpec, SandboxSpec, Trust};

use super::Owner;
use crate::resolve::{resolve_dry, Context, Input, ProfileSource};
use crate::state::Stored;

/// What is asked of a spec resolved earlier: a copy of it, or a new run
/// of its own sandbox; the refusal says which.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Again {
    Copy,
    Start,
}

impl Again {
    /// What the spec was resolved for, as a refusal names it.
    fn source(self) -> &'static str {
        match self {
            Again::Copy => "this copy's source",
            Again::Start => "this sandbox",
        }
    }

    /// What is not done.
    fn outcome(self) -> &'static str {
        match self {
            Again::Copy => "a copy of it is not made",
            Again::Start => "it is not started (nothing runs, nothing is kept for it)",
        }
    }
}

/// Why a part of a kept spec is not granted now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The owner no longer grants it (a door's 403 at the field).
    Forbidden,
    /// More than a token's sandbox is given (a door's 422 `above_default`).
    AboveDefault,
    /// The owner's profile it was made from no longer resolves for a token
    /// (the field is the profile's).
    ProfileGone,
}

impl Refusal {
    /// The reason code a door shows.
    pub fn code(self) -> &'static str {
        match self {
            Refusal::Forbidden | Refusal::ProfileGone => "forbidden",
            Refusal::AboveDefault => "above_default",
        }
    }
}

/// A part of a kept spec the owner does not grant a token now: which
/// field, why, and what is not done (worded without any door's terms).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct NotGranted {
    pub field: Field,
    pub refusal: Refusal,
    pub message: String,
}

fn not_granted(field: Field, message: String) -> NotGranted {
    NotGranted {
        field,
        refusal: Refusal::Forbidden,
        message,
    }
}

/// What the owner grants a token beyond a profile, as the door that
/// serves tokens is configured now: the directories a token's workspace
/// may lie under, and the host directories declared as a token's volumes.
/// A door that does not know that configuration (the owner's command
/// line) grants neither ([`NoHostGrants`]): a sandbox that holds one is
/// then refused, never started on a grant nobody could check.
pub trait HostGrants {
    /// Whether `path` is under a directory token holders may use now.
    fn workspace_allowed(&self, path: &Path) -> bool;
    /// Whether host directory `host` is a volume declared for `owner` now,
    /// writable if `writable`.
    fn volume_declared(&self, owner: Owner<'_>, host: &Path, writable: bool) -> bool;
}

/// Grants nothing beyond the owner's profiles.
pub struct NoHostGrants;

impl HostGrants for NoHostGrants {
    fn workspace_allowed(&self, _: &Path) -> bool {
        false
    }
    fn volume_declared(&self, _: Owner<'_>, _: &Path, _: bool) -> bool {
        false
    }
}

/// What is compared with a kept spec: the owner's catalogue and the
/// host's defaults now, warden's state directory, and the door's
/// [`HostGrants`].
pub struct Grantor<'a> {
    pub catalog: &'a Catalog,
    pub defaults: &'a Defaults,
    pub state_dir: &'a Path,
    pub host: &'a dyn HostGrants,
}

impl Grantor<'_> {
    /// What token `owner` creating a sandbox from `profile` (none: the
    /// host's defaults alone) is given now: its own caches among the rest.
    fn granted_now(
        &self,
        profile: Option<&str>,
        id: &str,
        again: Again,
        owner: Owner<'_>,
    ) -> Result<SandboxSpec, NotGranted> {
        let gone = || NotGranted {
            field: Field::Profile,
            refusal: Refusal::ProfileGone,
            message: format!(
                "the owner's profile {:?} {} was made from no longer resolves for a token: {}",
                profile.unwrap_or("(the host's defaults)"),
                again.source(),
                again.outcome()
            ),
        };
        let mut input = Input {
            profile: profile.map(|p| ProfileSource::Named(p.to_string())),
            ..Input::default()
        };
        // Resolved as a run (a named sandbox needs no command; a run
        // does): the command is the sandbox's own and grants nothing of
        // the host.
        input
            .flags
            .add_text(Field::Command, "true", Origin::Default, Trust::Caller)
            .map_err(|_| gone())?;
        let ctx = Context {
            catalog: self.catalog,
            defaults: self.defaults,
            state_dir: Some(self.state_dir),
            otlp: false,
            id,
            trust: Trust::Caller,
            owner,
        };
        resolve_dry(input, &ctx).map(|r| r.spec).map_err(|_| gone())
    }

    /// Whether `path` lies in warden's own state (a sandbox's own
    /// workspace, a snapshot's, a token's volumes): another sandbox's
    /// state there is refused before this is asked (a copy's own check).
    fn in_state(&self, path: &Path) -> bool {
        path.starts_with(self.state_dir)
    }

    /// Whether `stored`, made for token `owner` from the owner's `profile`,
    /// reaches nothing of the host the owner (its profile, the host's
    /// defaults, the door's [`HostGrants`]) does not grant a token now.
    /// `id`: the sandbox's (or the copy's) name, for the resolution's own
    /// names; `again`: what is asked. A package cache is granted only as
    /// that token's own, and its "always" answers only into its own grants
    /// file ([`Grantor::grants_are_own`]).
    pub fn still_granted(
        &self,
        stored: &Stored,
        profile: Option<&str>,
        id: &str,
        again: Again,
        owner: Owner<'_>,
    ) -> Result<(), NotGranted> {
        let now = self.granted_now(profile, id, again, owner)?;
        let copy = &stored.spec;
        let (src, outcome) = (again.source(), again.outcome());
        let fs = &copy.filesystem;
        for b in &fs.binds {
            let held = now
                .filesystem
                .binds
                .iter()
                .any(|n| n.path == b.path && (n.writable || !b.writable));
            if !held {
                let field = if b.writable { Field::Rw } else { Field::Ro };
                return Err(not_granted(
                    field,
                    format!(
                        "{} is no longer bound{} by the owner's profile {src} was made from: {outcome}",
                        b.path.display(),
                        if b.writable { " read-write" } else { "" }
                    ),
                ));
            }
        }
        // Named by where the sandbox mounts it, never by the host
        // directory: that is the owner's, and a token is shown nothing of
        // the host (outside review 33, F3).
        if let Some(v) = fs
            .volumes
            .iter()
            .find(|v| !self.volume_held(&now, v, owner))
        {
            return Err(not_granted(
                Field::Volumes,
                format!(
                    "the volume mounted at {} is no longer granted by the owner's profile {src} was made from, nor declared for the token by the daemon's configuration: {outcome}",
                    v.inside.display()
                ),
            ));
        }
        for c in &fs.caches {
            if !now.filesystem.caches.contains(c) {
                return Err(not_granted(
                    Field::Caches,
                    format!("a package cache of {src} is no longer granted by the owner's profile it was made from: {outcome}"),
                ));
            }
        }
        if let Some(r) = &fs.rootfs {
            if now.filesystem.rootfs.as_ref() != Some(r) && !self.in_state(r) {
                return Err(not_granted(
                    Field::Rootfs,
                    format!(
                        "the root tree is no longer granted by the owner's profile {src} was made from: {outcome}"
                    ),
                ));
            }
        }
        if let Some(w) = &fs.workspace {
            let held = self.in_state(w)
                || now.filesystem.workspace.as_ref() == Some(w)
                || self.host.workspace_allowed(w);
            if !held {
                return Err(not_granted(
                    Field::Workspace,
                    format!(
                        "workspace {} is no longer under a directory the daemon lets token holders use, nor the owner's profile's: {outcome}",
                        w.display()
                    ),
                ));
            }
        }
        if copy.allow_degraded && !now.allow_degraded {
            return Err(not_granted(
                Field::AllowDegraded,
                format!("running degraded is no longer granted by the owner's profile {src} was made from: {outcome}"),
            ));
        }
        if copy.publish.iter().any(|p| !now.publish.contains(p)) {
            return Err(not_granted(
                Field::Publish,
                format!("a published port of {src} is no longer granted by the owner's profile it was made from: {outcome}"),
            ));
        }
        self.grants_are_own(stored, again, owner)?;
        network_still_granted(&copy.network, &now.network, again)?;
        let profiles: Vec<String> = profile.iter().map(|p| p.to_string()).collect();
        self.sizes_within_host_defaults(Asked::of(copy), &profiles)
    }

    /// Whether volume `v` of a token's kept spec is granted now: in
    /// warden's own state (a token's own volume), given by the owner's
    /// profile as `now` resolves it, or declared for `owner` by the
    /// door's configuration.
    fn volume_held(
        &self,
        now: &SandboxSpec,
        v: &warden_policy::VolumeMount,
        owner: Owner<'_>,
    ) -> bool {
        self.in_state(&v.host)
            || now
                .filesystem
                .volumes
                .iter()
                .any(|n| n.host == v.host && n.inside == v.inside && (n.writable || !v.writable))
            || self.host.volume_declared(owner, &v.host, v.writable)
    }

    /// The host directories of the writable volumes of `stored` (a
    /// running token's sandbox, made for `owner` from the owner's
    /// `profile`) that the owner no longer grants: what its stop must not
    /// merge into them ([`super::withdrawn`]). Where the profile no longer
    /// resolves for a token, every writable volume outside warden's state
    /// is.
    pub fn volumes_withdrawn(
        &self,
        stored: &Stored,
        profile: Option<&str>,
        id: &str,
        owner: Owner<'_>,
    ) -> Vec<std::path::PathBuf> {
        let now = self.granted_now(profile, id, Again::Start, owner).ok();
        stored
            .spec
            .filesystem
            .volumes
            .iter()
            .filter(|v| v.writable)
            .filter(|v| match &now {
                Some(now) => !self.volume_held(now, v, owner),
                None => !self.in_state(&v.host),
            })
            .map(|v| v.host.clone())
            .collect()
    }

    /// Whether the grants file `stored` writes its "always" answers into
    /// is `owner`'s own (`STATE/token-grants/tHEX/grants/` for a token):
    /// one kept in another principal's is refused (at the ask field). A
    /// token's sandbox made over a project before answers were kept per
    /// principal names the owner's `STATE/grants/PROJECT.yaml`: its
    /// supervisor would write the token's answers into it, and the owner's
    /// answers it was given at create are in its spec as the owner's
    /// entries. Both came from that one file in the same resolution (no
    /// spec holds the owner's answers without naming the owner's file), so
    /// refusing the file refuses the answers. A profile that keeps its
    /// answers in itself is the owner's profile, checked as a profile.
    pub fn grants_are_own(
        &self,
        stored: &Stored,
        again: Again,
        owner: Owner<'_>,
    ) -> Result<(), NotGranted> {
        if grants_file_is_own(stored, self.state_dir, owner) {
            return Ok(());
        }
        Err(not_granted(
            Field::Ask,
            format!(
                "{} keeps its \"always\" answers in a grants file that is not its own principal's (made before answers were kept per principal): {}",
                again.source(),
                again.outcome()
            ),
        ))
    }

    /// The most `field` a token's sandbox may be given: the host's
    /// default, or more where a profile of the owner's among `profiles`
    /// sets more (the trust rule already holds a caller's value under it).
    /// `read` reads the field's value out of a profile.
    fn ceiling(
        &self,
        field: Field,
        host: u64,
        profiles: &[String],
        read: fn(&Layer, Field) -> Option<u64>,
    ) -> u64 {
        profiles
            .iter()
            .filter_map(|name| {
                warden_policy::compose::compose(self.catalog, Some(name), &Layer::default()).ok()
            })
            .filter_map(|c| read(&c.merged, field))
            .fold(host, u64::max)
    }

    /// Whether a token's sandbox asking `asked` stays within what the host
    /// gives a sandbox by default, or what the owner's `profiles` set above
    /// it now: a create's, a copy's and a new run's spec are held to it.
    pub fn sizes_within_host_defaults(
        &self,
        asked: Asked,
        profiles: &[String],
    ) -> Result<(), NotGranted> {
        let host_memory = self.defaults.memory;
        let most = self.ceiling(Field::Memory, host_memory, profiles, Layer::bytes);
        if asked.memory > most {
            return Err(above_default(
                Field::Memory,
                "memory",
                format_size(asked.memory),
                format_size(most),
            ));
        }
        // A sandbox's default disk is half its memory: where the owner's
        // profile grants more memory than the host's default, the disk
        // that memory brings is granted with it (a caller taking what the
        // owner's profile gives is not asking for more).
        let most = self.ceiling(Field::Disk, default_disk(most), profiles, Layer::bytes);
        if let Some(d) = asked.disk.filter(|d| *d > most) {
            return Err(above_default(
                Field::Disk,
                "disk",
                format_size(d),
                format_size(most),
            ));
        }
        // Processes and open files: each a share of a table the whole
        // host shares (pid_max, fs.file-max), so a token's sandbox is held
        // to the host's default as its memory is.
        let counts = [
            (Field::Pids, "processes", asked.pids, self.defaults.pids),
            (
                Field::OpenFiles,
                "open files per process",
                asked.open_files,
                self.defaults.open_files,
            ),
        ];
        for (field, what, n, host) in counts {
            let most = self.ceiling(field, host, profiles, Layer::count);
            if n > most {
                return Err(above_default(field, what, n.to_string(), most.to_string()));
            }
        }
        Ok(())
    }
}

/// Whether the grants file `stored` writes its "always" answers into is
/// `owner`'s own, below warden's state directory `state` (or none is kept,
/// or it is the owner's profile itself).
pub fn grants_file_is_own(stored: &Stored, state: &Path, owner: Owner<'_>) -> bool {
    let Some(file) = stored.sinks.grants.as_deref() else {
        return true;
    };
    if stored.sinks.grants_into_profile {
        return true;
    }
    let own = owner.grants_base(state).join("grants");
    file.parent() == Some(own.as_path())
}

/// The disk a sandbox gets by default with memory `memory` (half of it,
/// as resolution gives when none is asked).
pub fn default_disk(memory: u64) -> u64 {
    memory / 2
}

/// The refusal of `field` asked above the most a token's sandbox is given.
fn above_default(field: Field, what: &str, asked: String, most: String) -> NotGranted {
    NotGranted {
        field,
        refusal: Refusal::AboveDefault,
        message: format!(
            "{asked} is more {what} than a token's sandbox is given ({most}, the host's default, unless a profile of the owner's sets more): ask for at most that, or leave it out"
        ),
    }
}

/// What a sandbox takes of the host that a token's is held to the host's
/// defaults for: its memory limit, its disk budget (none when nothing of
/// it is kept on disk), its processes and threads, and the files each of
/// its processes may hold open.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Asked {
    pub memory: u64,
    pub disk: Option<u64>,
    pub pids: u64,
    pub open_files: u64,
}

impl Asked {
    /// What `spec` asks.
    pub fn of(spec: &SandboxSpec) -> Asked {
        Asked {
            memory: spec.resources.memory.value,
            disk: spec.filesystem.disk.map(|d| d.bytes),
            pids: spec.resources.pids.value,
            open_files: spec.resources.open_files,
        }
    }
}

/// The egress parts of a kept spec that reach the host or carry the
/// host's credentials: pinned hosts, private ranges, host ports, learning,
/// upstream authorities and secrets (each to its hosts, as narrowed).
fn network_still_granted(
    copy: &NetworkSpec,
    now: &NetworkSpec,
    again: Again,
) -> Result<(), NotGranted> {
    let NetworkSpec::Egress(copy) = copy else {
        return Ok(());
    };
    let now = match now {
        NetworkSpec::Egress(e) => Some(e),
        NetworkSpec::LoopbackOnly => None,
    };
    let has = |f: &dyn Fn(&warden_policy::EgressSpec) -> bool| now.is_some_and(f);
    let why = |what: &str| {
        format!(
            "{what} of {} is no longer granted by the owner's profile it was made from: {}",
            again.source(),
            again.outcome()
        )
    };
    if copy.hosts.iter().any(|h| !has(&|n| n.hosts.contains(h))) {
        return Err(not_granted(Field::AddHost, why("a pinned host")));
    }
    if copy.cidrs.iter().any(|c| !has(&|n| n.cidrs.contains(c))) {
        return Err(not_granted(Field::AllowCidr, why("an address range")));
    }
    if copy
        .host_ports
        .iter()
        .any(|p| !has(&|n| n.host_ports.contains(p)))
    {
        return Err(not_granted(Field::AllowHostPort, why("a port of the host")));
    }
    if copy.learn && !has(&|n| n.learn) {
        return Err(not_granted(Field::EgressLearn, why("learning mode")));
    }
    if copy
        .upstream_ca
        .iter()
        .any(|c| !has(&|n| n.upstream_ca.contains(c)))
    {
        return Err(not_granted(Field::UpstreamCa, why("an upstream authority")));
    }
    for s in &copy.secrets {
        let Some(n) = now.and_then(|now| now.secrets.iter().find(|n| n.name == s.name)) else {
            return Err(not_granted(
                Field::Secret,
                why(&format!("secret {}", s.name)),
            ));
        };
        let hosts_held = s.hosts.iter().all(|h| {
            n.hosts
                .iter()
                .any(|o| o.name == h.name && o.subdomains == h.subdomains && o.port == h.port)
        });
        if n.source != s.source || !hosts_held || (s.in_bodies && !n.in_bodies) {
            return Err(not_granted(
                Field::Secret,
                why(&format!("secret {} as it is", s.name)),
            ));
        }
    }
    if copy
        .secret_rules
        .iter()
        .any(|r| !has(&|n| n.secret_rules.contains(r)))
    {
        return Err(not_granted(
            Field::SecretRule,
            why("a secret's request rule"),
        ));
    }
    Ok(())
}
