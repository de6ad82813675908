//! Each token's sandbox within the host's defaults: at most the memory,
//! disk, processes and open files per process the host gives a sandbox by
//! default, unless a profile of the owner's that the request names sets
//! more. The check is the runtime's
//! (`warden_runtime::lifecycle::granted`), the one a new run and a copy
//! of a token's sandbox are held to; here it is worded as the API says
//! it.

use axum::http::StatusCode;
use warden_runtime::lifecycle::granted::{Grantor, NoHostGrants, NotGranted, Refusal};
use warden_workspace::Sandbox;

use super::measure::stored_spec;
use crate::app::App;
use crate::error::{spec_pointer, ApiError};

use warden_runtime::lifecycle::granted::Asked;

/// A refusal of the runtime's check of what the owner grants a token now,
/// as the API words it: 403 `forbidden` at the field's pointer (at
/// `/profile` for a profile that no longer resolves), 422
/// `above_default` for a size.
pub(crate) fn refusal(e: NotGranted) -> ApiError {
    let status = match e.refusal {
        Refusal::AboveDefault => StatusCode::UNPROCESSABLE_ENTITY,
        Refusal::Forbidden | Refusal::ProfileGone => StatusCode::FORBIDDEN,
    };
    let pointer = match e.refusal {
        Refusal::ProfileGone => Some("/profile".to_string()),
        _ => spec_pointer(e.field),
    };
    let mut message = e.message;
    if e.field == warden_policy::Field::Workspace {
        // The daemon's own words for where its roots come from.
        message = message.replace(
            "the daemon lets token holders use",
            "the daemon lets token holders use (`warden serve --workspace-root DIR`)",
        );
    }
    ApiError::new(status, e.refusal.code(), message).with_field(pointer.as_deref())
}

/// Whether a token's sandbox `new` (just made, from a request that named
/// the owner's `profiles`) stays within what the host gives a sandbox by
/// default.
pub(crate) fn within_host_defaults(
    app: &App,
    new: &Sandbox,
    profiles: &[String],
) -> Result<(), ApiError> {
    let asked = stored_spec(new).map(|s| Asked::of(&s)).unwrap_or_default();
    sizes_within_host_defaults(app, asked, profiles)
}

/// Whether a token's sandbox asking `asked` stays within what the host
/// gives a sandbox by default, or what the owner's `profiles` set above
/// it now: a copy's spec is held to it as a create's is (422
/// `above_default` at the field's pointer).
fn sizes_within_host_defaults(
    app: &App,
    asked: Asked,
    profiles: &[String],
) -> Result<(), ApiError> {
    Grantor {
        catalog: &app.catalog,
        defaults: &app.defaults,
        state_dir: &app.state_dir,
        host: &NoHostGrants,
    }
    .sizes_within_host_defaults(asked, profiles)
    .map_err(refusal)
}

/// The owner's profiles a create names: its `profile` and its spec's
/// `extends` (plain names of the owner's catalogue: the trust rule
/// refuses anything else before this is asked).
pub(crate) fn profiles_named(body: &crate::api::CreateSandbox) -> Vec<String> {
    let mut names: Vec<String> = body.profile.iter().cloned().collect();
    let extends = body.spec.as_ref().and_then(|s| s.get("extends"));
    match extends {
        Some(serde_json::Value::String(s)) => names.push(s.clone()),
        Some(serde_json::Value::Array(list)) => names.extend(
            list.iter()
                .filter_map(serde_json::Value::as_str)
                .map(str::to_string),
        ),
        _ => {}
    }
    names.retain(|n| warden_policy::trust::is_catalog_name(n));
    names
}
