//! Every tool is a call to the daemon's own API, made in-process: the
//! same router, the same scope check (with the MCP caller's own token or,
//! on the owner's socket and over stdio, as the owner), the same
//! handlers. MCP adds no path of its own to a sandbox: what the REST API
//! refuses, MCP refuses, with the same words.

use axum::body::Body;
use axum::http::{header, Method, Request, StatusCode};
use std::sync::Arc;
use tower::ServiceExt;

use crate::app::App;
use crate::routes::Transport;

/// Who the calls are made as: how the MCP request arrived and the
/// `Authorization` it carried.
#[derive(Debug, Clone)]
pub struct Identity {
    pub transport: Transport,
    pub authorization: Option<String>,
}

impl Identity {
    /// The owner of the state directory (stdio: the person who ran `warden mcp`).
    pub fn owner() -> Identity {
        Identity {
            transport: Transport::Unix,
            authorization: None,
        }
    }

    /// The identity of an HTTP request to `/mcp`, from its parts.
    pub fn of(parts: &http::request::Parts) -> Identity {
        Identity {
            transport: parts
                .extensions
                .get::<Transport>()
                .copied()
                .unwrap_or(Transport::Tcp),
            authorization: parts
                .headers
                .get(header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string),
        }
    }
}

/// What the API refused, as the problem object says it.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct Refused {
    pub status: u16,
    pub code: String,
    pub message: String,
    /// The problem's reason below its code, when it gave one.
    pub reason: Option<String>,
}

impl Refused {
    pub fn new(code: &str, message: impl Into<String>) -> Refused {
        Refused {
            status: 400,
            code: code.to_string(),
            message: message.into(),
            reason: None,
        }
    }
}

/// The API, called in-process.
#[derive(Clone)]
pub struct Api {
    app: Arc<App>,
    router: Arc<std::sync::OnceLock<axum::Router>>,
}

/// A body to send.
pub enum Send {
    None,
    Json(serde_json::Value),
    Bytes(Vec<u8>),
}

impl Api {
    pub fn new(app: Arc<App>) -> Api {
        Api {
            app,
            router: Arc::new(std::sync::OnceLock::new()),
        }
    }

    pub fn app(&self) -> &Arc<App> {
        &self.app
    }

    fn router(&self) -> axum::Router {
        // Made on first use: the router mounts the MCP service, whose
        // sessions make their own router only when a tool is called.
        self.router
            .get_or_init(|| crate::routes::router(self.app.clone()))
            .clone()
    }

    /// Send one request; the response when it succeeded.
    pub async fn raw(
        &self,
        who: &Identity,
        method: Method,
        uri: &str,
        body: Send,
    ) -> Result<axum::response::Response, Refused> {
        let mut req = Request::builder().method(method).uri(uri);
        if let Some(a) = &who.authorization {
            req = req.header(header::AUTHORIZATION, a);
        }
        let body = match body {
            Send::None => Body::empty(),
            Send::Json(v) => {
                req = req.header(header::CONTENT_TYPE, "application/json");
                Body::from(serde_json::to_vec(&v).unwrap_or_default())
            }
            Send::Bytes(b) => {
                req = req.header(header::CONTENT_TYPE, "application/octet-stream");
                req = req.header(header::CONTENT_LENGTH, b.len());
                Body::from(b)
            }
        };
        let mut req = req
            .body(body)
            .map_err(|e| Refused::new("internal", format!("cannot build a request: {e}")))?;
        req.extensions_mut().insert(who.transport);
        // MCP's own labels (`mcp-session`, `mcp-lease`) are this door's
        // to write: its calls run within it (see [`crate::labels`]).
        let call = self.router().oneshot(req);
        let response = match crate::labels::within(crate::labels::Door::Mcp, call).await {
            Ok(r) => r,
            Err(never) => match never {},
        };
        if response.status().is_success() {
            return Ok(response);
        }
        let status = response.status();
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .unwrap_or_default();
        Err(
            match serde_json::from_slice::<crate::error::Problem>(&bytes) {
                Ok(p) => Refused {
                    status: status.as_u16(),
                    code: p.code,
                    message: p.message,
                    reason: p.reason,
                },
                Err(_) => Refused {
                    status: status.as_u16(),
                    code: "http".into(),
                    message: format!(
                        "the API answered {status}: {}",
                        String::from_utf8_lossy(&bytes)
                    ),
                    reason: None,
                },
            },
        )
    }

    /// Send one request and read the whole answer (at most `limit` bytes).
    pub async fn call(
        &self,
        who: &Identity,
        method: Method,
        uri: &str,
        body: Send,
        limit: usize,
    ) -> Result<Vec<u8>, Refused> {
        let response = self.raw(who, method, uri, body).await?;
        if response.status() == StatusCode::NO_CONTENT {
            return Ok(Vec::new());
        }
        axum::body::to_bytes(response.into_body(), limit)
            .await
            .map(|b| b.to_vec())
            .map_err(|e| Refused::new("too_large", format!("the answer is too large: {e}")))
    }

    /// A JSON answer, read as `T`.
    pub async fn json<T: serde::de::DeserializeOwned>(
        &self,
        who: &Identity,
        method: Method,
        uri: &str,
        body: Send,
    ) -> Result<T, Refused> {
        let bytes = self.call(who, method, uri, body, 64 << 20).await?;
        serde_json::from_slice(&bytes)
            .map_err(|e| Refused::new("internal", format!("the API's answer does not read: {e}")))
    }
}

/// A query parameter's value, percent-encoded.
pub fn enc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~/".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
