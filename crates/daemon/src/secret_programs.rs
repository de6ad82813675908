//! The daemon's side of the rule for secret programs
//! (`warden_runtime::secret_programs`): before any sandbox starts, for
//! any caller, its secret programs are checked against the directories
//! tokens may write (the workspace roots and the state), and the refusal
//! is worded for each: the owner sees which program and where, a token
//! only that the profile's secret program lies where tokens may write,
//! or cannot be told not to run from there.

use axum::http::StatusCode;

use crate::app::App;
use crate::auth::Caller;
use crate::error::ApiError;

/// Whether the secret programs of `sb`'s spec may run on this host: none
/// of them (their links, `#!` interpreters, or the paths their arguments
/// name) lies under a workspace root, a writable E2B volume, the state,
/// or a root any daemon of this state directory recorded
/// (`warden_runtime::daemon_roots`), where a token's committed changes
/// could rewrite what runs as the daemon's owner
/// (`warden_runtime::secret_programs`). Checked before every start, for
/// every caller: the owner's own sandbox would run the token's program
/// as well. The owner reads which program and where in the daemon's log;
/// the caller, that the profile's secret program lies where tokens may
/// write.
pub(crate) fn allowed(
    app: &App,
    caller: &Caller,
    sb: &warden_workspace::Sandbox,
) -> Result<(), ApiError> {
    use warden_runtime::secret_programs::check;
    let Some(spec) = warden_runtime::state::stored_spec(sb.dir()) else {
        return Ok(());
    };
    let warden_policy::NetworkSpec::Egress(egress) = &spec.network else {
        return Ok(());
    };
    // The workspace roots, the E2B volumes declared writable (a token's
    // writes there are merged into the directory at stop) and the state.
    let mut writable = app.workspace_roots.clone();
    writable.extend(
        app.e2b_volumes
            .values()
            .filter(|v| v.writable)
            .map(|v| std::fs::canonicalize(&v.path).unwrap_or_else(|_| v.path.clone())),
    );
    writable.push(std::fs::canonicalize(&app.state_dir).unwrap_or_else(|_| app.state_dir.clone()));
    // And the roots every daemon of this state directory or this
    // catalogue recorded: an earlier start's roots may hold its tokens'
    // files
    // (`warden_runtime::daemon_roots`). A record that cannot be read
    // runs no secret program.
    match warden_runtime::daemon_roots::writable(
        Some(&app.state_dir),
        app.catalog.config_dir.as_deref(),
    ) {
        Ok(recorded) => writable.extend(recorded.into_iter().map(|r| r.path)),
        Err(e) => {
            tracing::warn!(sandbox = sb.name(), "not started: {e}");
            return Err(ApiError::internal(format!(
                "sandbox {}: the record of the directories tokens may write cannot be read; the daemon's owner sees why in its log",
                sb.name()
            )));
        }
    }
    let Err(refusal) = check(&egress.secrets, &writable) else {
        return Ok(());
    };
    tracing::warn!(
        sandbox = sb.name(),
        reason = refusal.code(),
        "not started: {refusal}"
    );
    let message = match caller {
        Caller::Owner => format!(
            "sandbox {}: the profile's secret program lies where tokens may write, or cannot be told not to run from there: {refusal}",
            sb.name()
        ),
        Caller::Token(_) => format!(
            "sandbox {}: the profile's secret program lies where tokens may write, or cannot be told not to run from there; the daemon's owner sees which in its log",
            sb.name()
        ),
    };
    Err(ApiError::new(StatusCode::FORBIDDEN, "forbidden", message)
        .with_reason(Some(refusal.code())))
}
