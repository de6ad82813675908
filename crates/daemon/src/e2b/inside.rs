//! A connection to a port on a running E2B sandbox's own loopback, made
//! inside it by its init and handed back over the supervisor's control
//! socket: what the port proxy ([`super::ports`]) relays and what the code
//! interpreter ([`super::interpreter`]) asks to know whether its server is
//! up. A paused sandbox is not running here: nothing inside it answers.

use std::os::fd::OwnedFd;
use std::sync::Arc;
use warden_protocol::connect::Target;
use warden_runtime::client::{ClientError, Connection};
use warden_runtime::lifecycle;

use crate::app::App;
use crate::error::chain;

/// A connection to `port` on sandbox `id`'s own loopback, made inside it
/// by its init; `None` when the sandbox is not there or not running.
pub(super) async fn connect_inside(
    app: &Arc<App>,
    id: &str,
    port: u16,
) -> Option<Result<OwnedFd, ClientError>> {
    let (a, sid) = (app.clone(), id.to_string());
    tokio::task::spawn_blocking(move || {
        let sb = a.sandbox(&sid).ok()?;
        if !lifecycle::liveness(&sb).running() || lifecycle::paused_since(&sb).is_some() {
            return None;
        }
        Some(
            Connection::open(&lifecycle::control(&sb))
                .and_then(|c| c.connect(&Target::loopback(port))),
        )
    })
    .await
    .ok()
    .flatten()
}

/// Nothing (or nothing any more) listens there: refused, or reset or
/// aborted by a server that was ending as the connection came (its
/// listening socket closed with the connection queued), as when a server
/// is killed just before it is asked for again.
pub(super) fn refused(e: &ClientError) -> bool {
    use nix::errno::Errno;
    matches!(e, ClientError::Connect { source, .. }
        if matches!(*source, Errno::ECONNREFUSED | Errno::ECONNRESET | Errno::ECONNABORTED))
}

/// Whether something listens on `port` inside sandbox `id`.
pub(super) async fn listens(app: &Arc<App>, id: &str, port: u16) -> Result<bool, String> {
    match connect_inside(app, id, port).await {
        None => Err(format!("sandbox {id} is not running")),
        Some(Ok(_)) => Ok(true),
        Some(Err(e)) if refused(&e) => Ok(false),
        Some(Err(e)) => Err(chain(&e)),
    }
}
