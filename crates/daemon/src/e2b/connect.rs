//! The Connect protocol, as the `e2b` SDK speaks it to the sandbox API
//! (envd): unary calls as a JSON body answered by a JSON body, server
//! streams as enveloped JSON messages (five bytes: flags, then the length,
//! big-endian) ending with an end-of-stream envelope (flag 0x02) that
//! carries the error, if any. The SDK uses the JSON codec only (its
//! `ENVD_JSON_CODEC`); a request in the protobuf codec is refused with 415
//! and says so. Messages are the proto3 JSON mapping of envd's
//! `process.proto` and `filesystem.proto`, as serde types (see
//! [`super::process`] and [`super::filesystem`]): with the JSON codec no
//! protobuf encoding is ever needed.

use axum::body::Body as HttpBody;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use crate::error::ApiError;

/// End of a stream.
const END_STREAM: u8 = 0x02;
/// Compressed (never sent by the SDK, which disables compression).
const COMPRESSED: u8 = 0x01;

/// A Connect error code (the protocol's names).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    InvalidArgument,
    DeadlineExceeded,
    NotFound,
    AlreadyExists,
    PermissionDenied,
    ResourceExhausted,
    FailedPrecondition,
    Unimplemented,
    Internal,
    Unavailable,
    Unauthenticated,
}

impl Code {
    pub fn as_str(self) -> &'static str {
        match self {
            Code::InvalidArgument => "invalid_argument",
            Code::DeadlineExceeded => "deadline_exceeded",
            Code::NotFound => "not_found",
            Code::AlreadyExists => "already_exists",
            Code::PermissionDenied => "permission_denied",
            Code::ResourceExhausted => "resource_exhausted",
            Code::FailedPrecondition => "failed_precondition",
            Code::Unimplemented => "unimplemented",
            Code::Internal => "internal",
            Code::Unavailable => "unavailable",
            Code::Unauthenticated => "unauthenticated",
        }
    }

    /// The HTTP status of a unary error (the protocol's table).
    fn status(self) -> StatusCode {
        match self {
            Code::InvalidArgument | Code::FailedPrecondition => StatusCode::BAD_REQUEST,
            Code::DeadlineExceeded => StatusCode::GATEWAY_TIMEOUT,
            Code::NotFound => StatusCode::NOT_FOUND,
            Code::AlreadyExists => StatusCode::CONFLICT,
            Code::PermissionDenied => StatusCode::FORBIDDEN,
            Code::ResourceExhausted => StatusCode::TOO_MANY_REQUESTS,
            Code::Unimplemented => StatusCode::NOT_IMPLEMENTED,
            Code::Internal => StatusCode::INTERNAL_SERVER_ERROR,
            Code::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            Code::Unauthenticated => StatusCode::UNAUTHORIZED,
        }
    }
}

/// An error answered to a Connect call.
#[derive(Debug)]
pub struct RpcError {
    pub code: Code,
    pub message: String,
}

impl RpcError {
    pub fn new(code: Code, message: impl Into<String>) -> RpcError {
        RpcError {
            code,
            message: message.into(),
        }
    }

    fn json(&self) -> serde_json::Value {
        serde_json::json!({"code": self.code.as_str(), "message": self.message})
    }
}

/// The daemon's own errors in Connect's terms: the SDK turns each code
/// into its exception (not_found: NotFoundException, unauthenticated:
/// AuthenticationException, resource_exhausted: RateLimitException, ...).
impl From<ApiError> for RpcError {
    fn from(e: ApiError) -> RpcError {
        let code = match e.status.as_u16() {
            400 | 413 | 415 | 422 => Code::InvalidArgument,
            401 => Code::Unauthenticated,
            403 => Code::PermissionDenied,
            404 => Code::NotFound,
            409 => Code::FailedPrecondition,
            429 | 507 => Code::ResourceExhausted,
            501 => Code::Unimplemented,
            503 => Code::Unavailable,
            504 => Code::DeadlineExceeded,
            _ => Code::Internal,
        };
        RpcError::new(code, e.problem.message)
    }
}

impl IntoResponse for RpcError {
    /// A unary call's error: its status and a JSON body.
    fn into_response(self) -> Response {
        (self.code.status(), axum::Json(self.json())).into_response()
    }
}

/// A request refused before its handler: the answer to give.
pub type Refused = Box<Response>;

/// Whether the request uses the JSON codec for a unary (`application/json`)
/// or a streaming (`application/connect+json`) call.
fn check_codec(headers: &HeaderMap, streaming: bool) -> Result<(), Refused> {
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    let want = if streaming {
        "application/connect+json"
    } else {
        "application/json"
    };
    if ct == want {
        return Ok(());
    }
    Err(Box::new(
        (
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            [(header::HeaderName::from_static("accept-post"), want)],
            format!(
            "this endpoint takes Connect's JSON codec ({want}), which the e2b SDK uses; got {ct:?}"
        ),
        )
            .into_response(),
    ))
}

/// A unary call's request message.
pub fn unary_request<T: DeserializeOwned>(headers: &HeaderMap, body: &[u8]) -> Result<T, Refused> {
    check_codec(headers, false)?;
    let body = if body.iter().all(u8::is_ascii_whitespace) {
        b"{}".as_slice()
    } else {
        body
    };
    serde_json::from_slice(body).map_err(|e| {
        Box::new(
            RpcError::new(
                Code::InvalidArgument,
                format!("the request message does not fit: {e}"),
            )
            .into_response(),
        )
    })
}

/// A unary call's answer.
pub fn unary_response<T: Serialize>(result: Result<T, RpcError>) -> Response {
    match result {
        Ok(m) => axum::Json(m).into_response(),
        Err(e) => e.into_response(),
    }
}

/// A server stream's one request message (enveloped).
pub fn stream_request<T: DeserializeOwned>(headers: &HeaderMap, body: &[u8]) -> Result<T, Refused> {
    check_codec(headers, true)?;
    let bad = |m: String| Box::new(stream_error(RpcError::new(Code::InvalidArgument, m)));
    if body.len() < 5 {
        return Err(bad("the request holds no enveloped message".into()));
    }
    if body[0] & COMPRESSED != 0 {
        return Err(bad(
            "compressed messages are not taken (send them uncompressed)".into(),
        ));
    }
    let len = u32::from_be_bytes([body[1], body[2], body[3], body[4]]) as usize;
    let Some(msg) = body.get(5..5 + len) else {
        return Err(bad(format!(
            "the envelope says {len} bytes and the body has {}",
            body.len() - 5
        )));
    };
    serde_json::from_slice(msg).map_err(|e| bad(format!("the request message does not fit: {e}")))
}

/// One enveloped message.
pub fn envelope(flags: u8, json: &[u8]) -> bytes::Bytes {
    let mut out = Vec::with_capacity(5 + json.len());
    out.push(flags);
    out.extend_from_slice(&(json.len() as u32).to_be_bytes());
    out.extend_from_slice(json);
    bytes::Bytes::from(out)
}

/// A message of a stream.
pub fn message<T: Serialize>(m: &T) -> bytes::Bytes {
    envelope(0, &serde_json::to_vec(m).unwrap_or_else(|_| b"{}".to_vec()))
}

/// The end of a stream, with its error if it failed.
pub fn end(error: Option<&RpcError>) -> bytes::Bytes {
    let body = match error {
        None => serde_json::json!({}),
        Some(e) => serde_json::json!({"error": e.json()}),
    };
    envelope(
        END_STREAM,
        &serde_json::to_vec(&body).unwrap_or_else(|_| b"{}".to_vec()),
    )
}

/// A stream that fails at once: 200 with only the end-of-stream message
/// (a streaming call's errors travel in the stream).
pub fn stream_error(e: RpcError) -> Response {
    streaming(futures_util::stream::iter([Ok::<_, std::io::Error>(end(
        Some(&e),
    ))]))
}

/// Sends a stream's messages; `None` once the client has gone.
pub struct Sender(mpsc::Sender<Result<bytes::Bytes, std::io::Error>>);

impl Sender {
    pub async fn send<T: Serialize>(&self, m: &T) -> Option<()> {
        self.0.send(Ok(message(m))).await.ok()
    }

    pub async fn finish(self, error: Option<RpcError>) {
        let _ = self.0.send(Ok(end(error.as_ref()))).await;
    }
}

/// A stream answer fed by the returned sender.
pub fn channel() -> (Sender, Response) {
    let (tx, rx) = mpsc::channel(32);
    (Sender(tx), streaming(ReceiverStream::new(rx)))
}

fn streaming<S>(s: S) -> Response
where
    S: futures_util::Stream<Item = Result<bytes::Bytes, std::io::Error>> + Send + 'static,
{
    Response::builder()
        .header(header::CONTENT_TYPE, "application/connect+json")
        .header(header::CACHE_CONTROL, "no-store")
        .body(HttpBody::from_stream(s))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_envelope_is_flags_then_a_big_endian_length_then_the_message() {
        let e = envelope(END_STREAM, b"{}");
        assert_eq!(&e[..], &[2, 0, 0, 0, 2, b'{', b'}']);
    }

    #[test]
    fn a_streamed_request_is_read_from_its_envelope_and_a_short_one_is_refused() {
        let mut h = HeaderMap::new();
        h.insert(
            header::CONTENT_TYPE,
            "application/connect+json".parse().unwrap(),
        );
        let body = envelope(0, br#"{"path":"x"}"#);
        let v: serde_json::Value = stream_request(&h, &body).unwrap();
        assert_eq!(v["path"], "x");
        assert!(stream_request::<serde_json::Value>(&h, &body[..7]).is_err());
        h.insert(
            header::CONTENT_TYPE,
            "application/connect+proto".parse().unwrap(),
        );
        let r = *stream_request::<serde_json::Value>(&h, &body).unwrap_err();
        assert_eq!(r.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
    }
}
