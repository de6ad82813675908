//! A desktop sandbox's Chromium DevTools, for browser-automation clients
//! (Playwright's `connect_over_cdp`, Puppeteer's `connect`): the HTTP
//! discovery endpoints (`/json/version`, `/json/list`) and the DevTools
//! WebSockets, proxied to the sandbox's own 127.0.0.1:9222 through
//! connections its init opens (see [`super::inside`]). Each answer's
//! `webSocketDebuggerUrl` is rebuilt as this daemon's own route, so a
//! client follows it back here, with its token, and never learns an
//! address it could not reach anyway; those answers come from inside
//! the sandbox, so only a strict shape of them is passed on
//! ([`shape`]). Needs `desktop:control`: DevTools drive the browser
//! entirely.
//!
//! The daemon's requests to Chromium are its own: the client's headers
//! (its token, cookies, `Origin`) are not passed on.

use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use futures_util::{SinkExt, StreamExt};
use http_body_util::BodyExt;
use std::sync::Arc;
use tokio_tungstenite::tungstenite;

use super::inside::{self, DEVTOOLS_PORT};
use crate::app::App;
use crate::credential::Credential;
use crate::error::{ApiError, Problem};

mod shape;

/// Most bytes of a discovery answer read from Chromium.
const MAX_JSON: usize = 1 << 20;
/// Most bytes of one DevTools message, either way (a full-page screenshot
/// in base64 is the largest).
const MAX_MESSAGE: usize = 64 << 20;

type Upstream = tokio_tungstenite::WebSocketStream<tokio::net::TcpStream>;

/// Chromium's answer to `GET path` on the sandbox's DevTools port.
async fn fetch(app: &Arc<App>, id: &str, path: &str) -> Result<serde_json::Value, ApiError> {
    let stream = inside::connect(app, id, DEVTOOLS_PORT, "browser's DevTools").await?;
    let bad = |what: String| {
        ApiError::new(
            axum::http::StatusCode::BAD_GATEWAY,
            "bad_gateway",
            format!("the sandbox's browser (DevTools on 127.0.0.1:{DEVTOOLS_PORT}): {what}"),
        )
    };
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .map_err(|e| bad(e.to_string()))?;
    tokio::spawn(conn);
    // Chromium answers only a Host that is an address or localhost.
    let req = axum::http::Request::get(path)
        .header("host", format!("127.0.0.1:{DEVTOOLS_PORT}"))
        .body(http_body_util::Empty::<bytes::Bytes>::new())
        .map_err(|e| bad(e.to_string()))?;
    let res = sender
        .send_request(req)
        .await
        .map_err(|e| bad(e.to_string()))?;
    if !res.status().is_success() {
        return Err(bad(format!("{path} answered {}", res.status())));
    }
    let body = http_body_util::Limited::new(res.into_body(), MAX_JSON)
        .collect()
        .await
        .map_err(|e| bad(e.to_string()))?
        .to_bytes();
    serde_json::from_slice(&body).map_err(|e| bad(format!("{path} is not JSON: {e}")))
}

/// This daemon's address as the client named it (`Host`), when it is a
/// plain host and port.
fn own_host(headers: &HeaderMap) -> String {
    headers
        .get(axum::http::header::HOST)
        .and_then(|v| v.to_str().ok())
        .filter(|h| {
            !h.is_empty()
                && h.len() <= 255
                && h.chars()
                    .all(|c| c.is_ascii_alphanumeric() || ".-:[]".contains(c))
        })
        .unwrap_or("localhost")
        .to_string()
}

/// A sandbox's id as one path segment.
fn percent_path(id: &str) -> String {
    id.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

async fn version(app: Arc<App>, id: String, headers: HeaderMap) -> Result<Response, ApiError> {
    let v = fetch(&app, &id, "/json/version").await?;
    let v = shape::version(&v, &percent_path(&id), &own_host(&headers)).map_err(|why| {
        ApiError::new(axum::http::StatusCode::BAD_GATEWAY, "bad_gateway", why)
            .with_reason(Some(shape::REFUSED))
    })?;
    Ok(Json(v).into_response())
}

#[utoipa::path(get, path = "/v1/sandboxes/{id}/desktop/cdp/json/version", params(("id" = String, Path)),
    responses((status = 200, description = "Chromium's /json/version, its webSocketDebuggerUrl pointing at this daemon's .../desktop/cdp/devtools/browser/{target}"),
        (status = 404, body = Problem), (status = 409, body = Problem), (status = 502, body = Problem)),
    security(("token" = [])))]
pub async fn json_version(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    version(app, id, headers).await
}

/// The same, with the trailing slash Playwright's `connect_over_cdp`
/// asks for.
#[utoipa::path(get, path = "/v1/sandboxes/{id}/desktop/cdp/json/version/", params(("id" = String, Path)),
    responses((status = 200, description = "as .../json/version"),
        (status = 404, body = Problem), (status = 409, body = Problem), (status = 502, body = Problem)),
    security(("token" = [])))]
pub async fn json_version_slash(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    version(app, id, headers).await
}

#[utoipa::path(get, path = "/v1/sandboxes/{id}/desktop/cdp/json/list", params(("id" = String, Path)),
    responses((status = 200, description = "Chromium's /json/list (its pages and other targets), each webSocketDebuggerUrl pointing at this daemon's .../desktop/cdp/devtools/page/{target}"),
        (status = 404, body = Problem), (status = 409, body = Problem), (status = 502, body = Problem)),
    security(("token" = [])))]
pub async fn json_list(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let v = fetch(&app, &id, "/json/list").await?;
    let (host, sandbox) = (own_host(&headers), percent_path(&id));
    let targets: Vec<serde_json::Value> = v
        .as_array()
        .map(|ts| {
            ts.iter()
                .map(|t| shape::target(t, &sandbox, &host))
                .collect()
        })
        .unwrap_or_default();
    Ok(Json(targets).into_response())
}

/// Whether `kind` and `target` name a DevTools endpoint as Chromium
/// spells them (`browser` or `page`, then a GUID or hex id): the one
/// shape [`shape`] passes on.
fn check_target(kind: &str, target: &str) -> Result<(), ApiError> {
    if shape::is_endpoint(kind, target) {
        Ok(())
    } else {
        Err(ApiError::bad_request(format!(
            "devtools/{kind}/{target} is not a DevTools endpoint: take the webSocketDebuggerUrl that .../desktop/cdp/json/version or /json/list answers"
        )))
    }
}

#[utoipa::path(get, path = "/v1/sandboxes/{id}/desktop/cdp/devtools/{kind}/{target}",
    params(("id" = String, Path), ("kind" = String, Path, description = "`browser` or `page`"), ("target" = String, Path)),
    responses(
        (status = 101, description = "a WebSocket speaking the Chrome DevTools Protocol with the sandbox's browser, relayed message by message"),
        (status = 400, body = Problem), (status = 404, body = Problem), (status = 409, body = Problem), (status = 502, body = Problem)),
    security(("token" = [])))]
pub async fn devtools(
    State(app): State<Arc<App>>,
    Path((id, kind, target)): Path<(String, String, String)>,
    Extension(credential): Extension<Credential>,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Result<Response, ApiError> {
    check_target(&kind, &target)?;
    let upgrade = upgrade.map_err(|e| {
        ApiError::bad_request(format!(
            "GET .../desktop/cdp/devtools/... is a WebSocket ({})",
            e.body_text()
        ))
    })?;
    let lease = app.leases.take(&credential, crate::leases::Kind::Desktop)?;
    let stream = inside::connect(&app, &id, DEVTOOLS_PORT, "browser's DevTools").await?;
    // The browser's side is opened before the client's upgrade, so that a
    // target that is gone is an HTTP error the client can read.
    let url = format!("ws://127.0.0.1:{DEVTOOLS_PORT}/devtools/{kind}/{target}");
    let config = tungstenite::protocol::WebSocketConfig::default()
        .max_message_size(Some(MAX_MESSAGE))
        .max_frame_size(Some(MAX_MESSAGE));
    let (upstream, _) = tokio_tungstenite::client_async_with_config(url, stream, Some(config))
        .await
        .map_err(|e| {
            ApiError::new(
                axum::http::StatusCode::BAD_GATEWAY,
                "bad_gateway",
                format!("the sandbox's browser refused devtools/{kind}/{target}: {e}"),
            )
        })?;
    Ok(upgrade
        .max_message_size(MAX_MESSAGE)
        .max_frame_size(MAX_MESSAGE)
        .on_upgrade(move |socket| async move {
            relay(socket, upstream, app, credential).await;
            drop(lease);
        })
        .into_response())
}

async fn relay(
    mut socket: WebSocket,
    mut upstream: Upstream,
    app: Arc<App>,
    credential: Credential,
) {
    let revoked = app.clone().revoked(credential);
    tokio::pin!(revoked);
    // Closed once nothing moves either way for the idle timeout, as
    // every relay is (see [`crate::idle`]).
    let idle = app.leases.idle();
    loop {
        tokio::select! {
            () = tokio::time::sleep(idle) => {
                let _ = socket.send(Message::Close(Some(CloseFrame {
                    code: 1001,
                    reason: "nothing was relayed for the daemon's idle timeout".into(),
                }))).await;
                let _ = upstream.close(None).await;
                return;
            }
            () = &mut revoked => {
                let _ = socket.send(Message::Close(Some(CloseFrame {
                    code: 1008,
                    reason: "the token was revoked or the session ended".into(),
                }))).await;
                let _ = upstream.close(None).await;
                return;
            }
            m = upstream.next() => {
                let m = match m {
                    Some(Ok(tungstenite::Message::Text(t))) => Message::Text(t.as_str().into()),
                    Some(Ok(tungstenite::Message::Binary(b))) => Message::Binary(b),
                    Some(Ok(tungstenite::Message::Ping(_) | tungstenite::Message::Pong(_)
                        | tungstenite::Message::Frame(_))) => continue,
                    Some(Ok(tungstenite::Message::Close(_)) | Err(_)) | None => {
                        let _ = socket.send(Message::Close(None)).await;
                        return;
                    }
                };
                if socket.send(m).await.is_err() {
                    let _ = upstream.close(None).await;
                    return;
                }
            }
            m = socket.recv() => {
                let m = match m {
                    Some(Ok(Message::Text(t))) => tungstenite::Message::text(t.as_str()),
                    Some(Ok(Message::Binary(b))) => tungstenite::Message::Binary(b),
                    Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
                    Some(Ok(Message::Close(_)) | Err(_)) | None => {
                        let _ = upstream.close(None).await;
                        return;
                    }
                };
                if upstream.send(m).await.is_err() {
                    let _ = socket.send(Message::Close(None)).await;
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_devtools_endpoints_are_proxied() {
        assert!(check_target("browser", "1b2c-3d4e").is_ok());
        assert!(check_target("page", "ABCDEF0123").is_ok());
        for (k, t) in [
            ("json", "x"),
            ("worker", "AB12"),
            ("page", "../x"),
            ("page", ".."),
            ("page", ""),
            ("page", "a%2fb"),
            ("page", "XYZ"),
        ] {
            assert!(check_target(k, t).is_err(), "{k}/{t}");
        }
    }
}
