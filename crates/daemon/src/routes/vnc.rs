//! A desktop sandbox's screen over a WebSocket: RFB (VNC) in binary
//! frames, as noVNC and websockify speak it, relayed to the VNC server on
//! the sandbox's own 127.0.0.1:5900 through a connection its init opened
//! (see [`super::inside`]). What the client sends is read by
//! [`super::rfb::ClientFilter`]: a caller without `desktop:control` (or who
//! asks for `view_only`) watches, and its keys, pointer and clipboard never
//! reach the server; a stream the filter cannot parse ends the session. A
//! session ends, too, when its token is revoked or its browser session
//! ends.

use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use serde::Deserialize;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::inside::{self, VNC_PORT};
use super::rfb::ClientFilter;
use crate::app::App;
use crate::auth::Caller;
use crate::credential::Credential;
use crate::error::{ApiError, Problem};

/// Most bytes of one message from the client (RFB client messages are
/// small; a clipboard paste is the largest).
const MAX_MESSAGE: usize = 1 << 20;
/// Most bytes read from the VNC server into one frame.
const CHUNK: usize = 256 * 1024;

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct VncQuery {
    /// Watch only, even with `desktop:control` (the dashboard's default
    /// until a person takes over).
    #[serde(default)]
    pub view_only: bool,
}

#[utoipa::path(get, path = "/v1/sandboxes/{id}/desktop/vnc", params(("id" = String, Path), VncQuery),
    responses(
        (status = 101, description = "a WebSocket carrying RFB (VNC) in binary frames both ways, to the VNC server on the sandbox's own 127.0.0.1:5900. Without `desktop:control` (or with `view_only`) the client's keys, pointer and clipboard are dropped by the daemon; a client stream it cannot parse closes the session (1008)."),
        (status = 400, body = Problem), (status = 404, body = Problem), (status = 409, body = Problem)),
    security(("token" = [])))]
pub async fn vnc(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    Extension(credential): Extension<Credential>,
    caller: Option<Extension<Caller>>,
    query: Result<Query<VncQuery>, axum::extract::rejection::QueryRejection>,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Result<Response, ApiError> {
    let Query(q) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let control = inside::may_control(caller.as_ref().map(|c| &c.0)) && !q.view_only;
    let upgrade = upgrade.map_err(|e| {
        ApiError::bad_request(format!(
            "GET .../desktop/vnc is a WebSocket: connect with a WebSocket client such as noVNC ({})",
            e.body_text()
        ))
    })?;
    // The screen is there: said in HTTP, before the upgrade.
    let lease = app.leases.take(&credential, crate::leases::Kind::Desktop)?;
    let server = inside::connect(&app, &id, VNC_PORT, "VNC server").await?;
    Ok(upgrade
        .protocols(["binary"])
        .max_message_size(MAX_MESSAGE)
        .on_upgrade(move |socket| async move {
            session(socket, server, app, credential, control).await;
            drop(lease);
        })
        .into_response())
}

/// Close with `code` and a reason a person reads (cut to what a close
/// frame holds).
async fn close(socket: &mut WebSocket, code: u16, reason: &str) {
    let mut reason = reason.to_string();
    while reason.len() > 120 {
        reason.pop();
    }
    let _ = socket
        .send(Message::Close(Some(CloseFrame {
            code,
            reason: reason.into(),
        })))
        .await;
}

async fn session(
    mut socket: WebSocket,
    server: TcpStream,
    app: Arc<App>,
    credential: Credential,
    control: bool,
) {
    let (mut from_server, mut to_server) = server.into_split();
    let mut filter = ClientFilter::new(control);
    let mut buf = vec![0u8; CHUNK];
    let revoked = app.clone().revoked(credential);
    tokio::pin!(revoked);
    let mut out = Vec::new();
    // A view that carries nothing either way for the idle timeout is
    // closed, as every relay is (see [`crate::idle`]); a viewer asks for
    // updates as long as it shows the screen.
    let idle = app.leases.idle();
    loop {
        tokio::select! {
            () = &mut revoked => {
                close(&mut socket, 1008, "the token was revoked or the session ended").await;
                return;
            }
            () = tokio::time::sleep(idle) => {
                close(&mut socket, 1001, "nothing was relayed for the daemon's idle timeout").await;
                return;
            }
            n = from_server.read(&mut buf) => match n {
                Ok(0) | Err(_) => {
                    close(&mut socket, 1000, "the VNC server closed the connection").await;
                    return;
                }
                Ok(n) => {
                    let frame = bytes::Bytes::copy_from_slice(&buf[..n]);
                    if socket.send(Message::Binary(frame)).await.is_err() {
                        return;
                    }
                }
            },
            m = socket.recv() => match m {
                Some(Ok(Message::Binary(data))) => {
                    out.clear();
                    if let Err(e) = filter.feed(&data, &mut out) {
                        tracing::warn!("desktop session closed: {e}");
                        close(&mut socket, 1008, &e.to_string()).await;
                        return;
                    }
                    if !out.is_empty() && to_server.write_all(&out).await.is_err() {
                        close(&mut socket, 1011, "the VNC server went away").await;
                        return;
                    }
                }
                Some(Ok(Message::Text(_))) => {
                    close(&mut socket, 1003, "RFB goes in binary frames").await;
                    return;
                }
                Some(Ok(Message::Ping(_) | Message::Pong(_))) => {}
                Some(Ok(Message::Close(_)) | Err(_)) | None => return,
            },
        }
    }
}
