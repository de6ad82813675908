//! Which sandboxes a caller reaches. The scope table says what a token may
//! do; this says to which sandboxes: a token acts on the sandboxes it made
//! (through the API, the E2B door or MCP), never on another token's and
//! never on the owner's own, whatever its scopes. The owner (on the Unix
//! socket) and an `admin` token with no quota of its own, which stands for
//! the owner (it makes tokens), reach every sandbox; an `admin` token held
//! to quotas is bounded like any other token (the owner held it to a share
//! of the machine, and it makes no tokens) and reaches only the sandboxes
//! it made; a per-sandbox token reaches the one it was made for (the owner
//! chose to hand it out).
//!
//! A sandbox a caller does not reach is answered as one that does not
//! exist, so that its name, state and owner stay unknown to the caller.
//! Every door passes here: the native routes by the sandbox in their path
//! (the authorizing middleware), the E2B door through its `permit`, MCP
//! through the native routes it calls with its caller's token, and the
//! listings by [`visible`].

use crate::app::App;
use crate::auth::{Caller, Scope};
use crate::error::{chain, ApiError};
use warden_workspace::StoreError;

/// Whether `caller` reaches the sandbox named `id`.
pub fn reaches(app: &App, caller: &Caller, id: &str) -> Result<bool, ApiError> {
    let token = match caller {
        Caller::Owner => return Ok(true),
        Caller::Token(t) => t,
    };
    if token.sandbox.as_deref() == Some(id) || stands_for_owner(caller) {
        return Ok(true);
    }
    let sb = match app.store.get(id) {
        Ok(sb) => sb,
        Err(StoreError::NotFound(_)) => return Ok(false),
        Err(e) => return Err(ApiError::internal(chain(&e))),
    };
    // The record of the sandbox that has the name now, by its identity:
    // not one of an earlier sandbox the token made and that was removed
    // behind the daemon's back (`warden rm`), whatever the clock said
    // when each was made.
    match app.record(&sb)? {
        Some(row) => Ok(row.token.as_deref() == Some(token.id.as_str())),
        // Made by the owner (on the host or the owner's socket): not this
        // token's.
        None => Ok(false),
    }
}

/// `Ok` when `caller` reaches sandbox `id`; otherwise the answer a missing
/// sandbox gets.
pub fn check(app: &App, caller: &Caller, id: &str) -> Result<(), ApiError> {
    if reaches(app, caller, id)? {
        Ok(())
    } else {
        Err(ApiError::not_found(format!(
            "no sandbox {id:?}: GET /v1/sandboxes lists them"
        )))
    }
}

/// A filter for listings: whether `caller` sees sandbox `id` (an error
/// reading the records hides the sandbox rather than showing it).
pub fn visible<'a>(app: &'a App, caller: &'a Caller) -> impl Fn(&str) -> bool + 'a {
    move |id| reaches(app, caller, id).unwrap_or(false)
}

/// Whether `caller` is the owner or stands for the owner: an `admin`
/// token whose record sets no quota. A token held to quotas was given a
/// share of the machine, not the owner's place, whatever its scopes.
pub fn stands_for_owner(caller: &Caller) -> bool {
    match caller {
        Caller::Owner => true,
        Caller::Token(t) => {
            caller.holds(Scope::Admin)
                && t.max_sandboxes.is_none()
                && t.max_memory.is_none()
                && t.max_pids.is_none()
        }
    }
}

/// Whether `caller` may override what a person must decide on a commit
/// (`accept_flagged`: files a review flagged, such as git hooks; `force`):
/// the owner and its stand-in ([`stands_for_owner`]) may; any other
/// token's request is refused, as MCP never sends them.
pub fn may_override_review(caller: &Caller) -> bool {
    stands_for_owner(caller)
}
