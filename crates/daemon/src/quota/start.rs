//! A token's sandbox that comes to run again is held to the token's
//! quotas as a create is. A stopped sandbox still holds its disk budget,
//! and what a run writes into a volume is merged there when it stops: each
//! run may grow what the token holds by a budget, so a quota asked only at
//! create let stop and start cycles grow a volume without end. Every way
//! a token's sandbox starts a new run passes here first: the native start
//! (which E2B's `connect` and `resume` of a sandbox paused to its files
//! call, and the start of a new E2B sandbox), and the resume of a VM
//! paused to disk whose supervisor is gone. A start while the token's
//! sandboxes, snapshots and volumes hold more than one of its quotas
//! allows is refused (429 `quota`, saying what it holds and may hold) and
//! nothing starts; at most a quota is reached, each sandbox's run then
//! adds at most its own disk budget, and the next start is refused.
//!
//! A resume in place (a sandbox paused with its memory) is not a new run:
//! its writes stay within the budget of the run it is in, and its volumes
//! are merged once, when it stops.
//!
//! The owner's calls are bounded by none of it; a token's call on a
//! sandbox of the owner's (a per-sandbox token, an `admin` token) is held
//! to no token's quota.

use warden_policy::{format_size, Field};
use warden_workspace::Sandbox;

use super::bounds::bounds_of;
use super::disk::disk_used;
use super::disk::sandboxes_of;
use super::measure::{held_of, pids_of};
use super::over_quota;
use crate::app::App;
use crate::auth::Caller;
use crate::db::TokenRow;
use crate::error::{chain, spec_pointer, ApiError};

/// Whether `caller` may start a new run of `sb`: when it is a token's
/// sandbox and the caller a token, only while that token holds no more
/// than its quotas allow.
pub(crate) fn may_start(app: &App, caller: &Caller, sb: &Sandbox) -> Result<(), ApiError> {
    let Caller::Token(asking) = caller else {
        return Ok(());
    };
    // The record of this very sandbox: one kept under its name of an
    // earlier sandbox (a token's, removed behind the daemon's back) does
    // not make the owner's sandbox that took the name a token's.
    let row = app.record(sb)?;
    let Some(owner) = row.and_then(|r| r.token) else {
        return Ok(());
    };
    let token = if asking.id == owner {
        asking.clone()
    } else {
        let found = app
            .db()?
            .token(&owner)
            .map_err(|e| ApiError::internal(chain(&e)))?;
        match found {
            Some(t) => t,
            // The token that made it is gone: nobody's quota left to hold.
            None => return Ok(()),
        }
    };
    holds_no_more(app, &token, sb.name())
}

/// Whether `token` holds no more than each of its quotas allows: 429
/// `quota` naming the first it holds more of, and that `id` is not
/// started.
fn holds_no_more(app: &App, token: &TokenRow, id: &str) -> Result<(), ApiError> {
    let bounds = bounds_of(app, token)?;
    let mine = sandboxes_of(app, token, None)?;
    let reserved = app.pending.of(&token.id);
    let refuse = |field: Option<Field>, what: String| {
        over_quota(
            field.and_then(spec_pointer).as_deref(),
            format!(
                "token {} {what}: sandbox {id} is not started; remove a sandbox, a snapshot or a volume of the token's first",
                token.id
            ),
        )
    };
    let have = (mine.len() as u64).saturating_add(reserved.sandboxes);
    if have > bounds.sandboxes {
        return Err(refuse(
            None,
            format!(
                "may have {} sandbox(es) at once and has {have}",
                bounds.sandboxes
            ),
        ));
    }
    let memory = mine
        .iter()
        .map(held_of)
        .fold(reserved.memory, u64::saturating_add);
    if memory > bounds.memory {
        return Err(refuse(
            Some(Field::Memory),
            format!(
                "may have {} of memory limits in all and its sandboxes have {}",
                format_size(bounds.memory),
                format_size(memory)
            ),
        ));
    }
    let pids = mine
        .iter()
        .map(pids_of)
        .fold(reserved.pids, u64::saturating_add);
    if pids > bounds.pids {
        return Err(refuse(
            Some(Field::Pids),
            format!(
                "may have {} processes in all and its sandboxes have {pids}",
                bounds.pids
            ),
        ));
    }
    let disk = disk_used(app, &token.id, &mine, reserved.disk);
    if disk > bounds.disk {
        return Err(refuse(
            Some(Field::Disk),
            format!(
                "may hold {} of disk in all and its sandboxes, snapshots and volumes hold {} (audit logs included)",
                format_size(bounds.disk),
                format_size(disk)
            ),
        ));
    }
    Ok(())
}
