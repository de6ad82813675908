//! Reaching a service that listens inside a running sandbox (a desktop's
//! VNC server, its browser's DevTools): the sandbox's init opens the
//! connection in the sandbox's own network namespace and it comes back
//! over the supervisor's control socket (`warden_runtime`'s `Connect`),
//! so the daemon relays bytes and nothing listens on the host, loopback
//! included.

use std::os::fd::OwnedFd;
use std::sync::Arc;
use warden_protocol::connect::Target;
use warden_runtime::client::{ClientError, Connection};
use warden_runtime::lifecycle;

use super::sandboxes::blocking;
use crate::app::App;
use crate::auth::{Caller, Scope};
use crate::error::{chain, ApiError};

/// Where a desktop sandbox's VNC server listens, inside it.
pub const VNC_PORT: u16 = warden_policy::desktop::VNC_PORT;
/// Where its Chromium's DevTools listen, inside it.
pub const DEVTOOLS_PORT: u16 = warden_policy::desktop::CDP_PORT;

/// A connection to `port` on sandbox `id`'s own loopback, or why the
/// supervisor could not make one; the outer error is about the sandbox
/// itself (missing, stopped).
async fn open(
    app: &Arc<App>,
    id: &str,
    port: u16,
) -> Result<Result<OwnedFd, ClientError>, ApiError> {
    let (a, id) = (app.clone(), id.to_string());
    blocking(move || {
        let sb = a.sandbox(&id)?;
        if !lifecycle::liveness(&sb).running() {
            return Err(ApiError::not_running(format!(
                "sandbox {id} is not running: start it with POST /v1/sandboxes/{id}/start"
            )));
        }
        let conn = Connection::open(&lifecycle::control(&sb)).map_err(|e| match e {
            e if e.is_busy() => ApiError::supervisor(&e),
            e => ApiError::conflict(chain(&e)),
        })?;
        Ok(conn.connect(&Target::loopback(port)))
    })
    .await
}

fn refused(e: &ClientError) -> bool {
    matches!(e, ClientError::Connect { source, .. } if *source == nix::errno::Errno::ECONNREFUSED)
}

/// Whether something listens on `port` inside sandbox `id`.
pub async fn listens(app: &Arc<App>, id: &str, port: u16) -> Result<bool, ApiError> {
    match open(app, id, port).await? {
        Ok(_) => Ok(true),
        Err(e) if refused(&e) => Ok(false),
        Err(e) => Err(ApiError::conflict(chain(&e))),
    }
}

/// A TCP stream to `port` on sandbox `id`'s own loopback; `what` names the
/// service for the error a person reads when nothing listens there.
pub async fn connect(
    app: &Arc<App>,
    id: &str,
    port: u16,
    what: &'static str,
) -> Result<tokio::net::TcpStream, ApiError> {
    let fd = match open(app, id, port).await? {
        Ok(fd) => fd,
        Err(e) if refused(&e) => {
            return Err(ApiError::conflict(format!(
                "sandbox {id} is not a desktop, or its {what} is not up yet: nothing listens on 127.0.0.1:{port} inside it (a sandbox made with the `desktop` profile serves it)"
            )))
        }
        Err(e @ (ClientError::Connect { .. } | ClientError::Unsupported(_))) => {
            return Err(ApiError::conflict(chain(&e)))
        }
        Err(e) if e.is_busy() => return Err(ApiError::supervisor(&e)),
        Err(e) => return Err(ApiError::internal(chain(&e))),
    };
    let std = std::net::TcpStream::from(fd);
    std.set_nonblocking(true)
        .and_then(|()| tokio::net::TcpStream::from_std(std))
        .map_err(|e| ApiError::internal(format!("cannot relay the sandbox's {what}: {e}")))
}

/// Whether `caller` may drive a desktop, not only watch it.
pub fn may_control(caller: Option<&Caller>) -> bool {
    caller.is_some_and(|c| c.holds(Scope::DesktopControl))
}
