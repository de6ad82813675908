//! A token's sandbox started from the owner's command line (`warden
//! start`, an `exec` that starts it, a `resume` from disk) is held to
//! what the owner grants a token now, as the daemon's start of it is: the
//! runtime's one check (`warden_runtime::lifecycle::granted`). The owner
//! typing `warden start` on a token's sandbox hands whatever it mounts to
//! the token that still reaches it through the daemon, so a grant the
//! owner took back must not come back that way.
//!
//! Whose a sandbox is, the daemon records (its database in the state
//! directory); a sandbox it has no record of is the owner's. The command
//! line does not know the daemon's own grants (its workspace roots, the
//! volumes its configuration declares for a token): a token's sandbox
//! holding one is refused here, and is started through the daemon, which
//! checks them.

use anyhow::Context;
use std::path::Path;
use warden_policy::Defaults;
use warden_runtime::lifecycle::granted::{Again, Grantor, NoHostGrants};
use warden_runtime::lifecycle::Owner;
use warden_runtime::state::{self, Stored};
use warden_workspace::Sandbox;

/// The token whose sandbox `sb` is, as the daemon recorded it (none: no
/// daemon has ever run in `state`, or the sandbox is the owner's). A
/// record kept under its name of an earlier sandbox (a token's, removed
/// with `warden rm`) is not `sb`'s: the owner's sandbox that took the
/// name is the owner's.
fn token_of(state: &Path, sb: &Sandbox) -> anyhow::Result<Option<String>> {
    let file = state.join(warden_daemon::DB_FILE);
    if !file.exists() {
        return Ok(None);
    }
    let db = warden_daemon::open_db(state)
        .context("cannot read the daemon's records of whose each sandbox is")?;
    let row = db
        .record_of(sb)
        .context("cannot read the daemon's records of whose each sandbox is")?;
    Ok(row.and_then(|r| r.token))
}

/// Whether `sb` may be started from the command line: the owner's own
/// sandbox always; a token's only with what the owner grants a token now.
pub(super) fn may_run_again(state: &Path, sb: &Sandbox) -> anyhow::Result<()> {
    let Some(token) = token_of(state, sb)? else {
        return Ok(());
    };
    let stored: Stored = state::read_json(&sb.dir().join(state::STORED))
        .with_context(|| format!("sandbox {}: its spec cannot be read", sb.name()))?;
    let catalog = super::super::catalog();
    let defaults = Defaults::for_host(super::super::host_facts());
    let grantor = Grantor {
        catalog: &catalog,
        defaults: &defaults,
        state_dir: state,
        host: &NoHostGrants,
    };
    grantor
        .still_granted(
            &stored,
            sb.meta().profile.as_deref(),
            sb.name(),
            Again::Start,
            Owner::Token(&token),
        )
        .map_err(|e| {
            let code = e.refusal.code();
            // The field as the command line names it: its flag, else its
            // profile key.
            let at = e.field.flag().or(e.field.profile_key()).unwrap_or("");
            anyhow::Error::new(e).context(format!(
                "sandbox {} is token {token}'s: refused ({code}, {at}); a token's sandbox is started only with what the owner grants a token now (one whose workspace or volume the daemon's configuration grants is started through the daemon)",
                sb.name()
            ))
        })
}

/// Whether an "always" answer to a question of `sb` would be kept in its
/// own principal's grants file: a token's sandbox kept with the owner's
/// (made before answers were kept per principal) whose supervisor an
/// earlier warden started writes the answer into the owner's file, where
/// the owner's next sandboxes over the project read it. Refused, as the
/// daemon refuses it; "once" and "deny" still answer.
pub(crate) fn always_kept_as_its_principal_s(state: &Path, sb: &Sandbox) -> anyhow::Result<()> {
    let Some(token) = token_of(state, sb)? else {
        return Ok(());
    };
    let stored: Stored = state::read_json(&sb.dir().join(state::STORED))
        .with_context(|| format!("sandbox {}: its spec cannot be read", sb.name()))?;
    if warden_runtime::lifecycle::granted::grants_file_is_own(&stored, state, Owner::Token(&token))
    {
        return Ok(());
    }
    anyhow::bail!(
        "sandbox {} is token {token}'s and keeps its \"always\" answers in a grants file that is not its own principal's (made before answers were kept per principal): answer allow_once or deny",
        sb.name()
    )
}
