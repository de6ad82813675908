//! Whether an E2B call may go ahead: the native scope table decides what a
//! token may do ([`crate::auth::ROUTES`]), [`crate::reach`] to which
//! sandboxes. A sandbox the caller does not reach is answered exactly as
//! one that does not exist (the same status, the same body, by the same
//! work, so in the same time), so that the door tells a token nothing of
//! another token's sandboxes, not even that one of that id is there.

use axum::http::StatusCode;
use axum::response::Response;

use crate::app::App;
use crate::auth::{self, Caller};

/// Why a call may not go ahead.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Denied {
    /// The token lacks the scope the native route needs (403, saying
    /// which); told before anything about the sandbox is looked at.
    #[error("{0}")]
    Scope(String),
    /// No sandbox of this id that the caller reaches: one that does not
    /// exist, a pooled one (nobody's yet) and another token's alike.
    #[error("sandbox {0} was not found")]
    NoSuchSandbox(String),
    /// The door's own mapping names a route the scope table lacks: a
    /// fault of warden's, refused to everyone.
    #[error("{method} {path} has no entry in the scope table")]
    Unmapped { method: String, path: String },
    /// The records that say who made a sandbox could not be read.
    #[error("{0}")]
    Records(String),
}

impl Denied {
    pub fn status(&self) -> StatusCode {
        match self {
            Denied::Scope(_) => StatusCode::FORBIDDEN,
            Denied::NoSuchSandbox(_) => StatusCode::NOT_FOUND,
            Denied::Unmapped { .. } | Denied::Records(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The stable code of the refusal, as the native API has it.
    pub fn code(&self) -> &'static str {
        match self {
            Denied::Scope(_) => "forbidden",
            Denied::NoSuchSandbox(_) => "no_such_sandbox",
            Denied::Unmapped { .. } | Denied::Records(_) => "internal",
        }
    }

    /// The refusal in E2B's shape, with its code (`error_code`).
    pub fn response(&self) -> Response {
        super::answer::refusal(self.status(), self.code(), self.to_string())
    }
}

impl From<Denied> for String {
    fn from(d: Denied) -> String {
        d.to_string()
    }
}

/// The answer for a sandbox that is not there (or not the caller's): one
/// body for both, whichever handler gives it.
pub(crate) fn no_such_sandbox(id: &str) -> Response {
    Denied::NoSuchSandbox(id.to_string()).response()
}

/// Whether `caller` may do what the native route `method path` does, for
/// `sandbox`. A refusal of scope or reach is recorded in the daemon's
/// audit log as the native door records it.
pub(crate) fn permit(
    app: &App,
    caller: &Caller,
    method: &str,
    path: &str,
    sandbox: Option<&str>,
) -> Result<(), Denied> {
    let Some(route) = auth::ROUTES
        .iter()
        .find(|r| r.method == method && r.path == path)
    else {
        return Err(Denied::Unmapped {
            method: method.to_string(),
            path: path.to_string(),
        });
    };
    caller.may(route, sandbox).map_err(|why| {
        tracing::warn!(
            route = route.path,
            method = route.method,
            "e2b: denied: {why}"
        );
        app.record_denial(caller, route, &why);
        Denied::Scope(why)
    })?;
    let Some(id) = sandbox else {
        return Ok(());
    };
    // Ownership first, from the one record lookup that answers a missing
    // sandbox and another token's alike (no record of this token's for
    // that id): both then take the same path, a denial recorded and the
    // same answer, so that neither the body nor the time it takes tells
    // one from the other. Only a sandbox the caller reaches is looked up
    // in the store.
    match crate::reach::reaches(app, caller, id) {
        Ok(true) => {}
        Ok(false) => {
            app.record_denial(caller, route, NOT_REACHED);
            return Err(Denied::NoSuchSandbox(id.to_string()));
        }
        Err(e) => return Err(Denied::Records(e.problem.message)),
    }
    match app.sandbox(id) {
        Ok(_) => Ok(()),
        // The owner's, an admin's or a per-sandbox token's call for a
        // sandbox that is gone (or pooled): nothing was refused them.
        Err(_) => Err(Denied::NoSuchSandbox(id.to_string())),
    }
}

/// What the audit log says of a call for a sandbox the caller does not
/// reach: the same words whether it exists or not, since the log's
/// records of one are written by the same path as the other's.
pub(super) const NOT_REACHED: &str = "no sandbox of this id is this caller's";
