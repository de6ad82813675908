//! What a caller itself said in a request: the strings of its path, its
//! query and its JSON body. An answer may say them back (a refusal that
//! quotes a value of the wrong type, a name that is not one); they are
//! the caller's already, so the scrub of host paths
//! ([`super::redact`]) leaves them as they came. Were it to rewrite them,
//! whether it did would tell the caller whether its guess was one of the
//! owner's paths (the state directory, a workspace root, its home), which
//! is what the scrub keeps from it (outside review 31, F11).
//!
//! Reading never changes what the route reads: the body is read whole
//! (up to the daemon's bound for a body, as the routes read it) and
//! handed on as it came.

use axum::extract::{MatchedPath, Request};
use axum::http::header::CONTENT_TYPE;
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use crate::error::ApiError;

/// Routes whose body is not read here: a file's bytes, streamed into the
/// sandbox with no bound of the API's, and never said back; and MCP's
/// messages, read by the MCP server with its own bounds and answered as
/// a stream that the scrub does not rewrite (the API calls a tool makes
/// in-process pass through this layer with their own bodies).
const STREAMED: &[&str] = &["/v1/sandboxes/{id}/files", "/mcp"];

/// The strings a caller sent with one request.
#[derive(Debug, Default)]
pub struct Said(Vec<String>);

impl Said {
    /// The strings of `req` (its path and query as sent and decoded, each
    /// string and key of a JSON body), and `req` to hand on; a JSON body
    /// larger than `limit` is answered 413 as the routes answer it.
    pub async fn of(req: Request, limit: usize) -> Result<(Said, Request), Response> {
        let mut said = Vec::new();
        let uri = req.uri();
        said.push(uri.path().to_string());
        let decoded = |s: &str| {
            percent_encoding::percent_decode_str(s)
                .decode_utf8_lossy()
                .into_owned()
        };
        said.push(decoded(uri.path()));
        said.extend(uri.path().split('/').map(decoded));
        if let Some(q) = uri.query() {
            said.push(q.to_string());
            for (k, v) in form_urlencoded::parse(q.as_bytes()) {
                said.push(k.into_owned());
                said.push(v.into_owned());
            }
        }
        let json = req
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.contains("json"));
        let streamed = req
            .extensions()
            .get::<MatchedPath>()
            .is_some_and(|m| STREAMED.contains(&m.as_str()));
        if !json || streamed {
            return Ok((Said(said), req));
        }
        let (parts, body) = req.into_parts();
        let bytes = match axum::body::to_bytes(body, limit).await {
            Ok(bytes) => bytes,
            // In the words the routes' own reading has (`crate::body`).
            Err(e) => {
                let too_large = std::error::Error::source(&e)
                    .is_some_and(|s| s.is::<http_body_util::LengthLimitError>());
                let refused = if too_large {
                    ApiError::new(
                        axum::http::StatusCode::PAYLOAD_TOO_LARGE,
                        "too_large",
                        "the request body is larger than the daemon takes",
                    )
                } else {
                    ApiError::bad_request(format!("the request body cannot be read: {e}"))
                };
                return Err(refused.into_response());
            }
        };
        if let Ok(value) = serde_json::from_slice::<Value>(&bytes) {
            strings_of(&value, &mut said);
        }
        Ok((Said(said), Request::from_parts(parts, bytes.into())))
    }

    /// Only the strings that `keep` keeps (those an answer's scrub could
    /// touch), so that what is held stays small whatever was sent.
    pub fn only(self, keep: impl Fn(&str) -> bool) -> Said {
        Said(self.0.into_iter().filter(|s| keep(s)).collect())
    }

    pub fn strings(&self) -> &[String] {
        &self.0
    }
}

fn strings_of(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::String(s) => out.push(s.clone()),
        Value::Array(list) => list.iter().for_each(|v| strings_of(v, out)),
        Value::Object(map) => {
            for (k, v) in map {
                out.push(k.clone());
                strings_of(v, out);
            }
        }
        _ => {}
    }
}
