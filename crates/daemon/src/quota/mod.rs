//! What a token may take of the host: how many sandboxes, how much
//! memory, disk, processes and open files each may be given, and how
//! much all of its sandboxes together. The owner's own calls are bounded
//! by none of it. Each start of a token's sandbox is held to its quotas
//! again ([`start`]).
//!
//! Three checks, made when a token's sandbox has just been made and
//! before it is recorded (under [`App::quota_lock`], so that two creates
//! at once cannot both pass; a refused sandbox is removed):
//!
//! 1. **Each sandbox within the host's defaults.** A token's sandbox gets
//!    at most the memory, disk, processes (`resources.pids`) and open
//!    files per process (`resources.open_files`) the host gives a
//!    sandbox by default,
//!    unless a profile of the owner's that the request names sets more
//!    (the owner's profile is then the ceiling, as the trust rule holds
//!    it; the disk of the memory it grants, half of it, comes with it).
//! 2. **The token's quotas**: sandboxes at once, memory limits together
//!    (each at what its cgroup may hold, `warden_runtime::backend::memory_held`:
//!    a gVisor sandbox's limit and runsc's sentry and gofer beside it, a
//!    VM's guest RAM and the VMM's overhead), processes together (each at
//!    its `resources.pids`: a share of the host's PID space; by default
//!    room for as many default sandboxes as the token may have),
//!    disk budgets together (with its sandboxes' audit logs and its
//!    snapshots, which are on the host's disk too). A token's own record
//!    sets them (`warden token create --max-sandboxes --max-memory
//!    --max-pids`); where it does not, the daemon's configuration does
//!    (`quotas:`), and where that does not, the defaults here.
//! 3. **The host's disk, reserved.** What warden may write for a sandbox
//!    (its disk budget and its commands' kept output) is reserved against
//!    the free space of the state's file system, summed over every
//!    sandbox there: a crowd of sandboxes, each within the free space
//!    alone, cannot together promise more than there is. A sandbox's
//!    reservation ends when it is removed.
//!
//! A fork makes up to 16 copies at once: before it copies anything, it
//! reserves the quota of all of them (as many sandboxes as it makes, each
//! of its source's sizes) under the same lock ([`reserve`]), so a token at
//! its quota writes no copy, and forks at once cannot each pass alone.
//! The reservation counts in every check until each copy is recorded (or
//! the fork gives up). What each copy reserves of the disk quota is what
//! it will hold ([`measure::copy_disk`]): its disk budget, or its copy of the
//! source's layer and home where that is more (a kernel that cannot hold
//! the layer in a tmpfs of the budget's size leaves it unbounded on
//! disk), and for a running VM its saved memory (the guest's RAM at
//! most), which lies beside the budget, not in it.
//!
//! A VM's saved memory in a sandbox's directory (a pause to disk's
//! `vm-paused`, a fork's `vm-copy` until its first start restores it)
//! counts against the disk quota as a snapshot's does: it is on the
//! host's disk, outside the sandbox's disk budget. Each copy is counted
//! at its full size, though copies of one save link one base file of the
//! guest's RAM (`warden_vm::ram`): the most they would take were each its
//! own, as a snapshot's copy is priced, never less than they take.
//!
//! A refusal names the JSON pointer and a reason code; it never tells a
//! token the host's free space. Nor does where it starts: for a token,
//! the free space is counted rounded down to a whole GiB
//! ([`warden_runtime::owner::FREE_SPACE_STEP`]), by check 3 as by the
//! resolution of its budget (a default budget is half of it, an asked
//! one past it is refused), and both give the one 507 `no_disk`
//! ([`no_disk`]), so that bisecting the disk budget at which it starts
//! learns a whole number of GiB, not the free space. The daemon's log
//! says the exact figures of each such refusal, for the owner.
//!
//! The parts, each below the ones that use it: [`bounds`] (what a token
//! is held to), [`measure`] (what a sandbox holds), [`disk`] (what a
//! token holds of its disk quota), [`ceiling`] (check 1), [`check`]
//! (checks 2 and 3), [`reserve`] (a copy's quota held before it is made)
//! and [`start`] (each new run).

use axum::http::StatusCode;
use warden_policy::Field;

use crate::error::{chain, spec_pointer, ApiError};

mod bounds;
mod ceiling;
mod check;
mod disk;
mod measure;
mod reserve;
mod start;

pub(crate) use bounds::bounds_of;
pub(crate) use ceiling::{profiles_named, refusal, within_host_defaults};
pub(crate) use check::{room_for_child, within_quota};
pub(crate) use disk::disk_room;
pub(crate) use measure::snapshot_disk;
pub(crate) use reserve::{reserve, reserve_from_snapshot, reserve_snapshot, Reservation};
pub(crate) use start::may_start;

/// 429 `quota` at no field.
pub(crate) fn over_quota_of(message: String) -> ApiError {
    over_quota(None, message)
}

fn over_quota(pointer: Option<&str>, message: String) -> ApiError {
    ApiError::new(StatusCode::TOO_MANY_REQUESTS, "quota", message).with_field(pointer)
}

/// A create's error as its caller may see it: a token is not told the
/// free space of the host's disk (the owner is).
pub(crate) fn as_caller_sees(
    caller: &crate::auth::Caller,
    e: warden_runtime::lifecycle::LifecycleError,
) -> ApiError {
    use warden_runtime::lifecycle::LifecycleError;
    use warden_runtime::resolve::ResolveError;
    let over_free = |e: &warden_policy::ResolveError| {
        matches!(e.problem(), warden_policy::Problem::DiskOverFree { .. })
    };
    let hidden = matches!(caller, crate::auth::Caller::Token(_))
        && match &e {
            LifecycleError::Resolve(r) => match r.as_ref() {
                ResolveError::Spec(s) => over_free(s),
                ResolveError::InProfile { error, .. } => over_free(error),
                _ => false,
            },
            _ => false,
        };
    if !hidden {
        return e.into();
    }
    tracing::warn!(error = %chain(&e), "a token's sandbox refused (507 no_disk)");
    no_disk()
}

/// 507 `no_disk` at the disk's pointer: a token's sandbox the host's disk
/// cannot hold. One answer whichever check refused it (a budget past the
/// free space, or no room left beside the other sandboxes'
/// reservations), and with no figure: a token is never told the host's
/// free space, nor what other sandboxes reserve.
pub(crate) fn no_disk() -> ApiError {
    ApiError::new(
        StatusCode::INSUFFICIENT_STORAGE,
        "no_disk",
        "the daemon's host has no room for this sandbox's disk budget: ask for less (resources.disk) or remove a sandbox",
    )
    .with_field(spec_pointer(Field::Disk).as_deref())
}
