//! What a token's copy (a sandbox made from a snapshot, a fork) may keep
//! of its source's reach of the host: only what the owner grants **now**.
//!
//! A copy's spec is its source's, resolved when the source was made. A
//! token holder never names a host path, a secret, a pinned host or a
//! workspace outside the daemon's roots itself (the trust rule): each
//! came from the owner's profile the source was made from, from the
//! host's defaults or from the daemon's `--workspace-root`s, as they were
//! then. A copy made later must not replay a grant the owner has since
//! taken back, so each host-reach part of the copy's spec is checked
//! against what a token creating from the same profile would be given
//! now (the profile resolved again, as a caller, with the host's current
//! defaults), the workspace against the current roots, and the sizes
//! against the host's defaults (or the profile's, above them): a part no
//! longer granted refuses the copy (403, or 422 `above_default` for the
//! sizes, at the field's JSON pointer, as a create words it).
//!
//! The owner's own copies are not checked: what the owner gave, the owner
//! may keep in its copies (the daemon's owner is trusted).
//!
//! A token's sandbox that comes to run again (a start, the E2B door's
//! connect or resume of one paused to its files, MCP's restart after a
//! commit, the resume of a VM paused to disk whose supervisor is gone)
//! runs its spec as it was resolved at create, as a copy would: each is
//! held to the same check ([`may_run_again`]), whoever asks, before
//! anything runs. A sandbox that runs (or is paused with its memory) is
//! not checked again: what it has mounted stays until it stops.

use axum::http::StatusCode;
use std::path::Path;
use warden_policy::compose::Origin;
use warden_policy::{Field, NetworkSpec, SandboxSpec, Trust};
use warden_runtime::lifecycle::Owner;
use warden_runtime::resolve::{resolve_dry, Context, Input, ProfileSource};
use warden_runtime::state::Stored;

use crate::app::App;
use crate::error::{spec_pointer, ApiError};

/// What is asked of a spec resolved earlier: a copy of it, or a new run
/// of its own sandbox; the refusal says which.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Again {
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

fn not_granted(field: Field, message: String) -> ApiError {
    ApiError::new(StatusCode::FORBIDDEN, "forbidden", message)
        .with_field(spec_pointer(field).as_deref())
}

/// What token `owner` creating a sandbox from `profile` (none: the host's
/// defaults alone) is given now: its own caches among the rest.
fn granted_now(
    app: &App,
    profile: Option<&str>,
    id: &str,
    again: Again,
    owner: Owner<'_>,
) -> Result<SandboxSpec, ApiError> {
    let mut input = Input {
        profile: profile.map(|p| ProfileSource::Named(p.to_string())),
        ..Input::default()
    };
    // Resolved as a run (a named sandbox needs no command; a run does):
    // the command is the sandbox's own and grants nothing of the host.
    input
        .flags
        .add_text(Field::Command, "true", Origin::Default, Trust::Caller)
        .map_err(|e| ApiError::internal(e.to_string()))?;
    let ctx = Context {
        catalog: &app.catalog,
        defaults: &app.defaults,
        state_dir: Some(&app.state_dir),
        otlp: false,
        id,
        trust: Trust::Caller,
        owner,
    };
    resolve_dry(input, &ctx).map(|r| r.spec).map_err(|_| {
        ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            format!(
                "the owner's profile {:?} {} was made from no longer resolves for a token: {}",
                profile.unwrap_or("(the host's defaults)"),
                again.source(),
                again.outcome()
            ),
        )
        .with_field(Some("/profile"))
    })
}

/// Whether `path` lies in warden's own state (a sandbox's own workspace,
/// a snapshot's, a token's volumes): another sandbox's state there is
/// refused before this is asked (`warden_runtime::lifecycle`'s copy).
fn in_state(app: &App, path: &Path) -> bool {
    path.starts_with(&app.state_dir)
}

/// Whether host directory `host` is a volume the owner's configuration
/// declares now for the token `owner` (`e2b: volumes:`), writable if
/// `writable`: such a volume is the owner's grant as a profile's is.
fn declared_now(app: &App, owner: Owner<'_>, host: &Path, writable: bool) -> bool {
    let Owner::Token(id) = owner else {
        return false;
    };
    let name = app
        .db()
        .ok()
        .and_then(|db| db.token(id).ok().flatten())
        .map(|t| t.name);
    crate::e2b::declared::still_declared(&app.e2b_volumes, id, name.as_deref(), host, writable)
}

/// Whether a copy with spec `copy`, made for a token from a source made
/// from the owner's `profile`, reaches nothing of the host the owner (its
/// profile, the host's defaults, the workspace roots) does not grant a
/// token now. `id`: the copy's name (for the resolution's own names);
/// `again`: what is asked (a copy, or a new run of the sandbox itself);
/// `owner`: the token the copy is for. A package cache is granted only as
/// that token's own: a copy (or a start) whose spec binds another's
/// caches (another token's, the owner's, or the one directory every
/// token shared before caches were kept per owner) is refused; so is one
/// whose "always" answers are written into another's grants file (and
/// whose spec holds that file's answers: [`grants_are_own`]).
pub(crate) fn still_granted(
    app: &App,
    stored: &Stored,
    profile: Option<&str>,
    id: &str,
    again: Again,
    owner: Owner<'_>,
) -> Result<(), ApiError> {
    let now = granted_now(app, profile, id, again, owner)?;
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
    for v in &fs.volumes {
        let held =
            in_state(app, &v.host)
                || now.filesystem.volumes.iter().any(|n| {
                    n.host == v.host && n.inside == v.inside && (n.writable || !v.writable)
                })
                || declared_now(app, owner, &v.host, v.writable);
        if !held {
            return Err(not_granted(
                Field::Volumes,
                format!(
                    "volume {} is no longer granted by the owner's profile {src} was made from: {outcome}",
                    v.host.display()
                ),
            ));
        }
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
        if now.filesystem.rootfs.as_ref() != Some(r) && !in_state(app, r) {
            return Err(not_granted(
                Field::Rootfs,
                format!(
                    "root tree {} is no longer granted by the owner's profile {src} was made from: {outcome}",
                    r.display()
                ),
            ));
        }
    }
    if let Some(w) = &fs.workspace {
        let held = in_state(app, w)
            || now.filesystem.workspace.as_ref() == Some(w)
            || app.workspace_allowed(w);
        if !held {
            return Err(not_granted(
                Field::Workspace,
                format!(
                    "workspace {} is no longer under a directory the daemon lets token holders use (`warden serve --workspace-root DIR`), nor the owner's profile's: {outcome}",
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
    grants_are_own(app, stored, again, owner)?;
    network_still_granted(&copy.network, &now.network, again)?;
    let profiles: Vec<String> = profile.iter().map(|p| p.to_string()).collect();
    crate::quota::sizes_within_host_defaults(app, crate::quota::Asked::of(copy), &profiles)
}

/// The egress parts of a copy that reach the host or carry the host's
/// credentials: pinned hosts, private ranges, host ports, learning,
/// upstream authorities and secrets (each to its hosts, as narrowed).
fn network_still_granted(
    copy: &NetworkSpec,
    now: &NetworkSpec,
    again: Again,
) -> Result<(), ApiError> {
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

/// Whether sandbox `sb` may run again (a start, a resume from disk): a
/// sandbox a token made is held, whoever asks, to what the owner grants
/// a token now ([`still_granted`]), so that a stop and a start do not
/// replay a grant the owner has taken back. The owner's own sandboxes
/// (and the pool's, until a token claims one) are not checked.
pub(crate) fn may_run_again(app: &App, sb: &warden_workspace::Sandbox) -> Result<(), ApiError> {
    let row = app
        .db()?
        .sandbox(sb.name())
        .map_err(|e| ApiError::internal(crate::error::chain(&e)))?;
    let Some(token) = row.and_then(|r| r.token) else {
        return Ok(());
    };
    let stored = stored_of(sb)?;
    still_granted(
        app,
        &stored,
        sb.meta().profile.as_deref(),
        sb.name(),
        Again::Start,
        Owner::Token(&token),
    )
}

/// Sandbox `sb`'s kept configuration: its spec and where it writes.
pub(crate) fn stored_of(sb: &warden_workspace::Sandbox) -> Result<Stored, ApiError> {
    warden_runtime::state::read_json(&sb.dir().join(warden_runtime::state::STORED)).map_err(|e| {
        ApiError::internal(format!(
            "sandbox {}: its spec cannot be read: {}",
            sb.name(),
            crate::error::chain(&e)
        ))
    })
}

/// Whether the grants file `stored` writes its "always" answers into is
/// `owner`'s own (`STATE/token-grants/tHEX/grants/` for a token): one kept
/// in another principal's is refused (403 at `/spec/egress/ask`). A
/// token's sandbox made over a project before answers were kept per
/// principal names the owner's `STATE/grants/PROJECT.yaml`: its supervisor
/// would write the token's answers into it, and the owner's answers it was
/// given at create are in its spec as the owner's entries. Both came from
/// that one file in the same resolution (no spec holds the owner's answers
/// without naming the owner's file), so refusing the file refuses the
/// answers; the owner's own live additions (`PATCH .../egress`), which a
/// copy carries as the owner's entries, are not taken for them. A profile
/// that keeps its answers in itself (`--ask-save profile`) is the owner's
/// profile, checked as a profile.
fn grants_are_own(
    app: &App,
    stored: &Stored,
    again: Again,
    owner: Owner<'_>,
) -> Result<(), ApiError> {
    let Some(file) = stored.sinks.grants.as_deref() else {
        return Ok(());
    };
    if stored.sinks.grants_into_profile {
        return Ok(());
    }
    let own = owner.grants_base(&app.state_dir).join("grants");
    if file.parent() != Some(own.as_path()) {
        return Err(not_granted(
            Field::Ask,
            format!(
                "{} keeps its \"always\" answers in a grants file that is not its own principal's (made before answers were kept per principal): {}",
                again.source(),
                again.outcome()
            ),
        ));
    }
    Ok(())
}
