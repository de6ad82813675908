//! What a token holds of its disk quota: its sandboxes' budgets, audit
//! logs and saved VM memory, its snapshots, its volumes and its caches.

use warden_workspace::Sandbox;

use super::bounds::bounds_of;
use super::measure::{audit_log_bytes, disk_of};
use crate::app::App;
use crate::db::TokenRow;
use crate::error::ApiError;

/// The disk a token's quota counts as used: its sandboxes' disk budgets,
/// audit logs and saved VM memory, what its forks in flight reserved, its
/// snapshots, its volumes and its package caches (its own, kept for its
/// next sandboxes of each profile: measured as the host pays for them).
pub(super) fn disk_used(app: &App, token: &str, mine: &[Sandbox], reserved: u64) -> u64 {
    let caches = warden_runtime::lifecycle::Owner::Token(token).caches_dir(&app.state_dir);
    mine.iter()
        .map(|s| disk_of(s).saturating_add(audit_log_bytes(s)))
        .fold(reserved, u64::saturating_add)
        .saturating_add(snapshot_bytes(app, token))
        .saturating_add(crate::e2b::volume_bytes(app, token))
        .saturating_add(cache_bytes(&app.state_dir, &caches))
}

/// The bytes a token's caches hold, with what their write-backs held
/// back (the owner's files its sandboxes wrote over, kept in the state
/// `state` for each cache's directory `PROFILE/NAME/LEAF`); none kept yet
/// is none.
fn cache_bytes(state: &std::path::Path, dir: &std::path::Path) -> u64 {
    if dir.symlink_metadata().is_err() {
        return 0;
    }
    warden_runtime::owners_files::held_back_of_caches(state, dir)
        .iter()
        .map(|h| warden_workspace::fsutil::tree_size(h))
        .fold(
            warden_workspace::fsutil::tree_size(dir),
            u64::saturating_add,
        )
}

/// The bytes of disk a token's quota has room for now: what a snapshot,
/// or the copy of one into a new sandbox, may take before it is made
/// (checked again when the copy is done). 0 when it cannot be known.
pub(crate) fn disk_room(app: &App, token: &TokenRow) -> u64 {
    let Ok(bounds) = bounds_of(app, token) else {
        return 0;
    };
    let Ok(mine) = sandboxes_of(app, token, None) else {
        return 0;
    };
    let reserved = app.pending.of(&token.id);
    bounds
        .disk
        .saturating_sub(disk_used(app, &token.id, &mine, reserved.disk))
}

/// The bytes the snapshots a token made hold on the host's disk: they
/// outlive its sandboxes and count against its disk quota as they do.
fn snapshot_bytes(app: &App, token: &str) -> u64 {
    warden_workspace::saved::Saved::open(app.store.root())
        .map(|saved| {
            saved
                .list(&warden_runtime::lifecycle::Owner::Token(token).label())
                .iter()
                .map(|i| i.bytes)
                .fold(0, u64::saturating_add)
        })
        .unwrap_or(0)
}

/// The sandboxes recorded to `token` (but `except`) that are in the
/// store.
pub(super) fn sandboxes_of(
    app: &App,
    token: &TokenRow,
    except: Option<&str>,
) -> Result<Vec<Sandbox>, ApiError> {
    // Only the records of the sandboxes there now that are the ones the
    // token made: a sandbox that took the name of one it made (the
    // owner's, at the command line) is not the token's to count.
    Ok(app
        .records()?
        .into_iter()
        .filter(|(r, _)| r.token.as_deref() == Some(token.id.as_str()))
        .filter(|(r, _)| Some(r.id.as_str()) != except)
        .map(|(_, sb)| sb)
        .collect())
}
