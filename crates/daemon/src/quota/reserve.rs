//! Quota reserved before a copy is made: a fork's copies, a snapshot,
//! a sandbox made from a snapshot hold their share under
//! [`App::quota_lock`] until each is counted as itself.

use axum::http::StatusCode;
use warden_policy::{format_size, Field};
use warden_workspace::Sandbox;

use super::check::check;
use super::measure::{copy_disk, memory_held, tally_of};
use crate::app::App;
use crate::db::TokenRow;
use crate::error::{spec_pointer, ApiError};
use crate::reserved::Tally;

/// A fork's quota, held from before its copies are made until each is
/// recorded; what is left of it is given back when it is dropped.
pub(crate) struct Reservation<'a> {
    app: &'a App,
    token: String,
    each: Tally,
    left: u64,
}

impl Reservation<'_> {
    /// One reserved copy is about to be checked and recorded as itself
    /// (called under [`App::quota_lock`]): it stops counting as reserved.
    pub(crate) fn take_one(&mut self) {
        if self.left > 0 {
            self.left -= 1;
            self.app.pending.change(&self.token, |t| t.minus(self.each));
        }
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        let left = self.each.times(self.left);
        self.app.pending.change(&self.token, |t| t.minus(left));
    }
}

/// Reserve, for `token`, `count` copies of `source` (each of its sizes),
/// before any is made: 429 (or 507 for the host's disk) when they would
/// not all fit, and then nothing is reserved.
pub(crate) fn reserve<'a>(
    app: &'a App,
    token: &TokenRow,
    source: &Sandbox,
    count: u64,
) -> Result<Reservation<'a>, ApiError> {
    // Measured before the lock: the walk of a large layer holds up no
    // other token's check.
    let disk = copy_disk(source);
    let each = Tally {
        disk,
        ..tally_of(source)
    };
    reserve_tally(app, token, each, count).map_err(|mut e| {
        if e.status == StatusCode::TOO_MANY_REQUESTS
            && e.problem.field.as_deref() == spec_pointer(Field::Disk).as_deref()
        {
            e.problem.message.push_str(&format!(
                " (a fork into {count}: each copy holds {}, its disk budget or its copy of the source's layer and home, whichever is more, and a VM's saved memory)",
                format_size(disk)
            ));
        }
        e
    })
}

/// Reserve, for `token`, `count` times `each` under [`App::quota_lock`],
/// checked as a create is against what the token has and what is
/// reserved already: 429 (or 507 for the host's disk) when it would not
/// fit, and then nothing is reserved. Forks, snapshots and sandboxes made
/// from snapshots reserve through here, so a create and any of them at
/// once cannot each pass alone.
pub(crate) fn reserve_tally<'a>(
    app: &'a App,
    token: &TokenRow,
    each: Tally,
    count: u64,
) -> Result<Reservation<'a>, ApiError> {
    let _one_at_a_time = app.quota_lock.lock().unwrap_or_else(|p| p.into_inner());
    check(app, token, None, each.times(count))?;
    app.pending.change(&token.id, |t| t.plus(each.times(count)));
    Ok(Reservation {
        app,
        token: token.id.clone(),
        each,
        left: count,
    })
}

/// A snapshot's disk, reserved for `token` from before its copy is made
/// until it is counted as itself (its reservation dropped when the save
/// is done or failed): `bytes` of the disk quota, no sandbox.
pub(crate) fn reserve_snapshot<'a>(
    app: &'a App,
    token: &TokenRow,
    bytes: u64,
) -> Result<Reservation<'a>, ApiError> {
    let each = Tally {
        disk: bytes,
        ..Tally::default()
    };
    reserve_tally(app, token, each, 1).map_err(|mut e| {
        e.problem.message.push_str(&format!(
            " (a snapshot: it holds {}, its source's layer and home and a VM's saved memory)",
            format_size(bytes)
        ));
        e
    })
}

/// The sandbox a copy of a snapshot makes, reserved for `token` before
/// it is copied: one sandbox of the snapshot's memory, and of disk its
/// budget or the snapshot's bytes, whichever is more.
pub(crate) fn reserve_from_snapshot<'a>(
    app: &'a App,
    token: &TokenRow,
    spec: &warden_policy::SandboxSpec,
    bytes: u64,
) -> Result<Reservation<'a>, ApiError> {
    let budget = spec.filesystem.disk.map_or(0, |d| d.bytes);
    let each = Tally {
        sandboxes: 1,
        memory: memory_held(spec),
        pids: spec.resources.pids.value,
        disk: budget.max(bytes),
        host_disk: spec
            .filesystem
            .disk
            .filter(|d| d.asked)
            .map_or(0, |d| d.bytes),
    };
    reserve_tally(app, token, each, 1)
}

impl Reservation<'_> {
    /// The disk this reservation still holds.
    pub(crate) fn disk(&self) -> u64 {
        self.each.disk.saturating_mul(self.left)
    }
}
