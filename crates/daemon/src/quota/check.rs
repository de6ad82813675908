//! The check of a token's quotas against what it has, what its copies
//! in flight reserved and what is asked now, and of the host's disk
//! reserved against its free space.

use warden_policy::{format_size, Field};
use warden_runtime::owner::Owner;
use warden_workspace::Sandbox;

use super::bounds::{bounds_of, share, Bounds};
use super::disk::{disk_used, sandboxes_of};
use super::measure::{held_of, host_disk_of, pids_of, tally_of};
use super::over_quota;
use crate::app::App;
use crate::db::TokenRow;
use crate::error::{chain, spec_pointer, ApiError};
use crate::reserved::Tally;

/// Whether `maker` has room for a child held to `child` beside what it
/// holds: the child's quotas are taken from the maker's ledger as a
/// sandbox's sizes are (429 `quota` when they do not fit). Under
/// [`App::quota_lock`].
pub(crate) fn room_for_child(app: &App, maker: &TokenRow, child: Bounds) -> Result<(), ApiError> {
    let whole = bounds_of(app, maker)?;
    let tally = Tally {
        sandboxes: child.sandboxes,
        memory: child.memory,
        pids: child.pids,
        disk: share(whole.disk, child.memory, whole.memory),
        host_disk: 0,
    };
    check(app, maker, None, tally)
}

/// Whether the token may have the sandbox `new` (just made) besides the
/// ones it has, and the host's disk can hold what warden may write for
/// it besides what it holds for every other sandbox: 429 when not.
pub(crate) fn within_quota(app: &App, token: &TokenRow, new: &Sandbox) -> Result<(), ApiError> {
    check(app, token, Some(new.name()), tally_of(new))
}

/// Whether the token may have `new` more (sandboxes not yet recorded,
/// `recorded_as` the one among its rows that is one of them) besides
/// what it has and what its forks in flight reserved.
pub(super) fn check(
    app: &App,
    token: &TokenRow,
    recorded_as: Option<&str>,
    new: Tally,
) -> Result<(), ApiError> {
    let bounds = bounds_of(app, token)?;
    let mine = sandboxes_of(app, token, recorded_as)?;
    let reserved = app.pending.of(&token.id);
    let have = (mine.len() as u64).saturating_add(reserved.sandboxes);
    if have.saturating_add(new.sandboxes) > bounds.sandboxes {
        return Err(over_quota(
            None,
            format!(
                "token {} may have {} sandbox(es) at once and has {}: {}",
                token.id,
                bounds.sandboxes,
                have,
                if new.sandboxes > 1 {
                    format!(
                        "{} more do not fit; ask for fewer or remove some first",
                        new.sandboxes
                    )
                } else {
                    "remove one first".to_string()
                }
            ),
        ));
    }
    let memory = new.memory;
    let used: u64 = mine
        .iter()
        .map(held_of)
        .fold(reserved.memory, u64::saturating_add);
    if used.saturating_add(memory) > bounds.memory {
        return Err(over_quota(
            spec_pointer(Field::Memory).as_deref(),
            format!(
                "token {} may have {} of memory limits in all (a gVisor sandbox counted with runsc beside it, a VM sandbox with its VMM beside its guest); its sandboxes have {} and this one asks {}: ask for less (resources.memory) or remove a sandbox",
                token.id,
                format_size(bounds.memory),
                format_size(used),
                format_size(memory)
            ),
        ));
    }
    let pids: u64 = mine
        .iter()
        .map(pids_of)
        .fold(reserved.pids, u64::saturating_add);
    if pids.saturating_add(new.pids) > bounds.pids {
        return Err(over_quota(
            spec_pointer(Field::Pids).as_deref(),
            format!(
                "token {} may have {} processes in all (each sandbox counted at its resources.pids); its sandboxes have {} and this one asks {}: ask for fewer (resources.pids) or remove a sandbox",
                token.id, bounds.pids, pids, new.pids
            ),
        ));
    }
    let disk = new.disk;
    // A sandbox's audit log is on the host's disk too, and grows with
    // what the sandbox does (up to its byte budget): counted as it is.
    let used = disk_used(app, &token.id, &mine, reserved.disk);
    if used.saturating_add(disk) > bounds.disk {
        return Err(over_quota(
            spec_pointer(Field::Disk).as_deref(),
            format!(
                "token {} may have {} of disk budgets in all; its sandboxes, snapshots and volumes have {} (audit logs included) and this one asks {}: ask for less (resources.disk) or remove a sandbox",
                token.id,
                format_size(bounds.disk),
                format_size(used),
                format_size(disk)
            ),
        ));
    }
    if !host_disk_holds(app, token, recorded_as, new.host_disk)? {
        // The host's free space is the owner's to know, not a token's:
        // the answer is the one a budget past the free space gets.
        return Err(super::no_disk());
    }
    Ok(())
}

/// Whether the state's file system can hold `new` more bytes warden may
/// write for `token` (for sandboxes not yet counted, `recorded_as` the one
/// of them in the store) besides what every other sandbox in the store,
/// and every fork in flight, may still write. The free space is taken
/// rounded down to a whole
/// [`warden_runtime::owner::FREE_SPACE_STEP`]: where the refusal starts
/// tells a token no more of it than that. The daemon's log says the
/// exact figures of a refusal, for the owner.
fn host_disk_holds(
    app: &App,
    token: &TokenRow,
    recorded_as: Option<&str>,
    new: u64,
) -> Result<bool, ApiError> {
    let Some(free) = free_space(&app.state_dir) else {
        return Ok(true);
    };
    let others: u64 = app
        .store
        .list()
        .map_err(|e| ApiError::internal(chain(&e)))?
        .iter()
        .filter(|e| Some(e.name.as_str()) != recorded_as)
        .filter_map(|e| app.store.get(&e.name).ok().map(|s| (e, s)))
        // What each may still write: what it wrote is already out of the
        // free space, and is not counted twice.
        .map(|(e, s)| host_disk_of(&s).saturating_sub(e.changes_bytes))
        .fold(app.pending.host_disk(), u64::saturating_add);
    let held = Owner::Token(&token.id).free_space_held_to(free);
    let holds = others.saturating_add(new) <= held;
    if !holds {
        tracing::warn!(
            token = %token.id,
            asked = new,
            reserved = others,
            free,
            held_to = held,
            "a token's sandbox refused (507 no_disk): the state's file system cannot hold its disk budget besides the other sandboxes' (its free space counted in whole GiB for tokens)"
        );
    }
    Ok(holds)
}

/// Free space (for an unprivileged user) of the file system holding `dir`.
fn free_space(dir: &std::path::Path) -> Option<u64> {
    let st = nix::sys::statvfs::statvfs(dir).ok()?;
    Some((st.blocks_available() as u64).saturating_mul(st.fragment_size() as u64))
}
