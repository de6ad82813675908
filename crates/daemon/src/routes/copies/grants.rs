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

use warden_runtime::lifecycle::granted::{Grantor, HostGrants};
use warden_runtime::lifecycle::Owner;
use warden_runtime::state::Stored;

pub(crate) use warden_runtime::lifecycle::granted::Again;

use crate::app::App;
use crate::error::ApiError;

/// What the daemon grants a token beyond the owner's profiles: its
/// workspace roots (`warden serve --workspace-root DIR`) and the volumes
/// its configuration declares for a token (`e2b: volumes:`).
struct DaemonGrants<'a>(&'a App);

impl HostGrants for DaemonGrants<'_> {
    fn workspace_allowed(&self, path: &std::path::Path) -> bool {
        self.0.workspace_allowed(path)
    }

    fn volume_declared(&self, owner: Owner<'_>, host: &std::path::Path, writable: bool) -> bool {
        let Owner::Token(id) = owner else {
            return false;
        };
        // A listed name is matched only on a token the owner made (see
        // `crate::e2b::declared::may_mount`).
        let name = self.0.db().ok().and_then(|db| {
            let owner_made = db.maker_of(id).ok()?.is_none();
            db.token(id)
                .ok()
                .flatten()
                .filter(|_| owner_made)
                .map(|t| t.name)
        });
        // A writable volume's writes are merged into its directory at
        // stop: not once the directory holds a file the owner's
        // configuration is read from (the owner's profiles may have come
        // to name one since the create).
        crate::e2b::declared::still_declared(
            &self.0.e2b_volumes,
            id,
            name.as_deref(),
            host,
            writable,
        ) && !(writable && self.0.holds_configuration(host))
    }
}

/// Whether a copy with spec `stored`, made for a token from a source made
/// from the owner's `profile`, reaches nothing of the host the owner does
/// not grant a token now (the runtime's check,
/// `warden_runtime::lifecycle::granted`, with the daemon's workspace
/// roots and declared volumes). `id`: the copy's name; `again`: what is
/// asked (a copy, or a new run of the sandbox itself); `owner`: the token
/// the copy is for.
pub(crate) fn still_granted(
    app: &App,
    stored: &Stored,
    profile: Option<&str>,
    id: &str,
    again: Again,
    owner: Owner<'_>,
) -> Result<(), ApiError> {
    grantor(app, &DaemonGrants(app))
        .still_granted(stored, profile, id, again, owner)
        .map_err(crate::quota::refusal)
}

/// The runtime's check over the daemon's catalogue, defaults and state.
fn grantor<'a>(app: &'a App, host: &'a dyn HostGrants) -> Grantor<'a> {
    Grantor {
        catalog: &app.catalog,
        defaults: &app.defaults,
        state_dir: &app.state_dir,
        host,
    }
}

/// Whether sandbox `sb` may run again (a start, a resume from disk): a
/// sandbox a token made is held, whoever asks, to what the owner grants
/// a token now ([`still_granted`]), so that a stop and a start do not
/// replay a grant the owner has taken back. The owner's own sandboxes
/// (and the pool's, until a token claims one) are not checked.
pub(crate) fn may_run_again(app: &App, sb: &warden_workspace::Sandbox) -> Result<(), ApiError> {
    // The record of this very sandbox: one kept under its name of an
    // earlier sandbox (a token's, removed behind the daemon's back) does
    // not make the owner's sandbox that took the name a token's.
    let row = app.record(sb)?;
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

/// Record, in each token's sandbox's directory, the writable volumes the
/// owner no longer grants that token as this daemon's configuration
/// reads now (`warden_runtime::lifecycle::withdrawn`): the sandbox runs
/// on (or stays paused), but its supervisor holds back, at the stop, what
/// it wrote into them, keeping it under the state's `held-back/` for the
/// owner, rather than merging it into the owner's directory. A volume
/// granted again is recorded as granted. Called each time the daemon
/// reads its configuration (at its start), before anything is served.
/// What is found is said to the owner (host paths included: the owner's
/// log), never to a token.
pub(crate) fn record_withdrawn(app: &App) -> Vec<String> {
    use warden_runtime::lifecycle::withdrawn;
    let records = match app.records() {
        Ok(r) => r,
        Err(e) => {
            return vec![format!(
                "the sandboxes' records cannot be read, so no volume taken back from a token is recorded as such: {}",
                e.problem.message
            )]
        }
    };
    let mut notes = Vec::new();
    for (row, sb) in records {
        let Some(token) = row.token else {
            continue;
        };
        let hosts = match stored_of(&sb) {
            Ok(stored) => grantor(app, &DaemonGrants(app)).volumes_withdrawn(
                &stored,
                sb.meta().profile.as_deref(),
                sb.name(),
                Owner::Token(&token),
            ),
            Err(e) => {
                notes.push(e.problem.message);
                continue;
            }
        };
        for h in &hosts {
            notes.push(format!(
                "sandbox {}: volume {} is no longer granted to its token; what the sandbox writes there is held back at its stop (under the state's held-back/), not merged",
                sb.name(),
                h.display()
            ));
        }
        if let Err(e) = withdrawn::record(sb.dir(), &hosts) {
            notes.push(format!(
                "sandbox {}: the record of the volumes no longer granted to its token cannot be written, so its stop may merge into them: {}",
                sb.name(),
                crate::error::chain(&e)
            ));
        }
    }
    notes
}
