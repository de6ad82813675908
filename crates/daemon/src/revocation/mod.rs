//! Every long-lived answer ends with the credential that opened it.
//!
//! A stream (exec output, events, a file watch, an MCP stream, the E2B
//! door's process streams and directory watch) is let in once, by the
//! middleware that checks its token, browser session or envd access
//! token; what it delivers afterwards would otherwise outlive a
//! revocation for as long as the client keeps reading. [`bound`] wraps
//! each answer's body so that it ends within a second of its credential
//! no longer standing ([`App::revoked`] asks every second), whatever
//! handler made it; WebSockets, which leave the body behind, select on
//! the same [`App::revoked`] themselves. Short answers pay nothing: the
//! first question is asked a second after the answer began.
//!
//! What a credential let in is also bound on the way in: [`bound_request`]
//! wraps the request's body so that it breaks off, with an error, once the
//! credential no longer stands, so an upload or an input stream (the files
//! API's `PUT`, the E2B door's `/files` and `StreamInput`) writes nothing
//! into the sandbox after its revocation, whichever handler reads it.
//!
//! What a revoked token kept on disk for its next sandboxes (its caches
//! and its "always" answers) goes too ([`files`]).

pub mod files;

use axum::extract::Request;
use axum::response::Response;
use bytes::Bytes;
use std::sync::Arc;

use crate::app::App;
use crate::credential::Credential;
use crate::deadline::{CutOff, End};

/// `response` with its body ended once `credential` no longer stands,
/// after `last` (a door's own way of saying why, such as a Connect
/// end-of-stream with its error). The owner's calls (no credential to
/// revoke) are returned as they are.
pub fn bound(
    app: &Arc<App>,
    credential: Credential,
    response: Response,
    last: Option<Bytes>,
) -> Response {
    if !credential.revocable() {
        return response;
    }
    let revoked = Box::pin(app.clone().revoked(credential));
    response.map(|inner| CutOff::body(inner, revoked, End::Last(last)))
}

/// `req` with its body broken off once `credential` no longer stands: a
/// handler still reading it then reads an error, never the client's next
/// bytes. The owner's calls are returned as they are.
pub fn bound_request(app: &Arc<App>, credential: &Credential, req: Request) -> Request {
    if !credential.revocable() {
        return req;
    }
    let revoked = Box::pin(app.clone().revoked(credential.clone()));
    req.map(|inner| {
        CutOff::body(
            inner,
            revoked,
            End::Broken(
                std::io::ErrorKind::PermissionDenied,
                "the credential this request was sent with was revoked or ended",
            ),
        )
    })
}
