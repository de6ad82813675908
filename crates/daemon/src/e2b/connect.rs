//! The Connect protocol, as the `e2b` SDK speaks it to the sandbox API
//! (envd): unary calls as a JSON body answered by a JSON body, server
//! streams as enveloped JSON messages (five bytes: flags, then the length,
//! big-endian) ending with an end-of-stream envelope (flag 0x02) that
//! carries the error, if any (JSON in both codecs). The SDK uses the JSON
//! codec (its `ENVD_JSON_CODEC`); other Connect clients may use protobuf.
//! Messages are handled in the proto3 JSON mapping of envd's
//! `process.proto` and `filesystem.proto`, as serde types (see
//! [`super::process`] and [`super::filesystem`]); a call in the protobuf
//! codec is transcoded to and from that mapping by the messages'
//! descriptors (`envd.desc`, the SDK's own), so both codecs reach the same
//! handlers.

use axum::body::Body as HttpBody;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use prost::Message;
use prost_reflect::{DescriptorPool, DeserializeOptions, DynamicMessage, MessageDescriptor};
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::sync::OnceLock;
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
/// AuthenticationException, resource_exhausted: RateLimitException, ...),
/// whose text is the message: it names the problem's own codes
/// (`too_many_watches`, `quota`), which Connect's code alone loses.
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
        RpcError::new(code, super::control::naming_codes(&e.problem))
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

/// envd's messages (process.proto, filesystem.proto), from the SDK's own
/// generated descriptors (`clients/e2b-compat/envd_descriptors.py` writes
/// the file); `None` if they cannot be read, and the protobuf codec is
/// then refused.
fn pool() -> Option<&'static DescriptorPool> {
    static POOL: OnceLock<Option<DescriptorPool>> = OnceLock::new();
    POOL.get_or_init(|| {
        let mut pool = DescriptorPool::global();
        pool.decode_file_descriptor_set(include_bytes!("envd.desc").as_slice())
            .ok()
            .map(|()| pool)
    })
    .as_ref()
}

/// How a call's messages are written: Connect's JSON codec (what the SDK
/// uses), or its protobuf codec, by the method's message descriptors.
#[derive(Clone)]
pub enum Codec {
    Json,
    Proto {
        input: MessageDescriptor,
        output: MessageDescriptor,
    },
}

fn refuse(status: StatusCode, message: String) -> Refused {
    Box::new((status, message).into_response())
}

impl Codec {
    /// The codec a call to `service`/`method` came in (its content type),
    /// or the answer refusing it.
    pub fn of(
        headers: &HeaderMap,
        service: &str,
        method: &str,
        streaming: bool,
    ) -> Result<Codec, Refused> {
        let ct = headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        let prefix = if streaming {
            "application/connect+"
        } else {
            "application/"
        };
        match ct.strip_prefix(prefix) {
            Some("json") => Ok(Codec::Json),
            Some("proto") => {
                let found = pool()
                    .and_then(|p| p.get_service_by_name(service))
                    .and_then(|s| s.methods().find(|m| m.name() == method));
                match found {
                    Some(m) => Ok(Codec::Proto {
                        input: m.input(),
                        output: m.output(),
                    }),
                    None => Err(Box::new(
                        RpcError::new(
                            Code::Unimplemented,
                            format!("{service}/{method} is not served by warden"),
                        )
                        .into_response(),
                    )),
                }
            }
            _ => Err(refuse(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                format!(
                    "this endpoint takes Connect's JSON or protobuf codec ({prefix}json, {prefix}proto); got {ct:?}"
                ),
            )),
        }
    }

    fn content_type(&self, streaming: bool) -> &'static str {
        match (self, streaming) {
            (Codec::Json, false) => "application/json",
            (Codec::Json, true) => "application/connect+json",
            (Codec::Proto { .. }, false) => "application/proto",
            (Codec::Proto { .. }, true) => "application/connect+proto",
        }
    }

    /// A request message: JSON read as is; protobuf decoded by its
    /// descriptor and read through its JSON mapping.
    fn decode<T: DeserializeOwned>(&self, msg: &[u8]) -> Result<T, String> {
        match self {
            Codec::Json => {
                let msg = if msg.iter().all(u8::is_ascii_whitespace) {
                    b"{}".as_slice()
                } else {
                    msg
                };
                serde_json::from_slice(msg).map_err(|e| e.to_string())
            }
            Codec::Proto { input, .. } => {
                let m = DynamicMessage::decode(input.clone(), msg).map_err(|e| e.to_string())?;
                let v = serde_json::to_value(&m).map_err(|e| e.to_string())?;
                serde_json::from_value(v).map_err(|e| e.to_string())
            }
        }
    }

    /// A response message in this codec.
    fn encode<T: Serialize>(&self, m: &T) -> Result<Vec<u8>, RpcError> {
        let internal =
            |e: String| RpcError::new(Code::Internal, format!("cannot write the answer: {e}"));
        match self {
            Codec::Json => serde_json::to_vec(m).map_err(|e| internal(e.to_string())),
            Codec::Proto { output, .. } => {
                let v = serde_json::to_value(m).map_err(|e| internal(e.to_string()))?;
                let options = DeserializeOptions::new().deny_unknown_fields(false);
                let dm = DynamicMessage::deserialize_with_options(output.clone(), v, &options)
                    .map_err(|e| internal(e.to_string()))?;
                Ok(dm.encode_to_vec())
            }
        }
    }

    /// A unary call's request message.
    pub fn request<T: DeserializeOwned>(&self, body: &[u8]) -> Result<T, Refused> {
        self.decode(body).map_err(|e| {
            Box::new(
                RpcError::new(
                    Code::InvalidArgument,
                    format!("the request message does not fit: {e}"),
                )
                .into_response(),
            )
        })
    }

    /// A unary call's answer (errors are JSON in both codecs).
    pub fn response<T: Serialize>(&self, result: Result<T, RpcError>) -> Response {
        match result.and_then(|m| self.encode(&m)) {
            Ok(bytes) => {
                ([(header::CONTENT_TYPE, self.content_type(false))], bytes).into_response()
            }
            Err(e) => e.into_response(),
        }
    }

    /// A server stream's one request message (enveloped).
    pub fn stream_request<T: DeserializeOwned>(&self, body: &[u8]) -> Result<T, Refused> {
        let bad = |m: String| Box::new(self.stream_error(RpcError::new(Code::InvalidArgument, m)));
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
        self.decode(msg)
            .map_err(|e| bad(format!("the request message does not fit: {e}")))
    }

    /// One message of a client stream, without its envelope (`flags`
    /// its envelope's).
    pub fn message<T: DeserializeOwned>(&self, flags: u8, msg: &[u8]) -> Result<T, RpcError> {
        if flags & COMPRESSED != 0 {
            return Err(RpcError::new(
                Code::InvalidArgument,
                "compressed messages are not taken (send them uncompressed)",
            ));
        }
        self.decode(msg).map_err(|e| {
            RpcError::new(
                Code::InvalidArgument,
                format!("the request message does not fit: {e}"),
            )
        })
    }

    /// A client stream's answer: its one message and the end of the
    /// stream, or the end of the stream with the error.
    pub fn stream_answer<T: Serialize>(&self, result: Result<T, RpcError>) -> Response {
        let frames = match result.and_then(|m| self.encode(&m)) {
            Ok(bytes) => vec![envelope(0, &bytes), end(None)],
            Err(e) => vec![end(Some(&e))],
        };
        streaming(
            self.content_type(true),
            futures_util::stream::iter(frames.into_iter().map(Ok::<_, std::io::Error>)),
        )
    }

    /// A stream that fails at once: 200 with only the end-of-stream
    /// message (a streaming call's errors travel in the stream).
    pub fn stream_error(&self, e: RpcError) -> Response {
        streaming(
            self.content_type(true),
            futures_util::stream::iter([Ok::<_, std::io::Error>(end(Some(&e)))]),
        )
    }

    /// A stream answer fed by the returned sender.
    pub fn channel(&self) -> (Sender, Response) {
        let (tx, rx) = mpsc::channel(32);
        (
            Sender {
                tx,
                codec: self.clone(),
            },
            streaming(self.content_type(true), ReceiverStream::new(rx)),
        )
    }
}

/// One enveloped message.
pub fn envelope(flags: u8, msg: &[u8]) -> bytes::Bytes {
    let mut out = Vec::with_capacity(5 + msg.len());
    out.push(flags);
    out.extend_from_slice(&(msg.len() as u32).to_be_bytes());
    out.extend_from_slice(msg);
    bytes::Bytes::from(out)
}

/// The end of a stream, with its error if it failed (JSON in both codecs).
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

/// Sends a stream's messages; `None` once the client has gone.
pub struct Sender {
    tx: mpsc::Sender<Result<bytes::Bytes, std::io::Error>>,
    codec: Codec,
}

impl Sender {
    pub async fn send<T: Serialize>(&self, m: &T) -> Option<()> {
        let bytes = match self.codec.encode(m) {
            Ok(b) => envelope(0, &b),
            Err(e) => {
                let _ = self.tx.send(Ok(end(Some(&e)))).await;
                return None;
            }
        };
        self.tx.send(Ok(bytes)).await.ok()
    }

    /// Whether the client has gone (nothing sent will reach it).
    pub fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }

    /// Done when the client has gone.
    pub async fn closed(&self) {
        self.tx.closed().await
    }

    pub async fn finish(self, error: Option<RpcError>) {
        let _ = self.tx.send(Ok(end(error.as_ref()))).await;
    }
}

fn streaming<S>(content_type: &'static str, s: S) -> Response
where
    S: futures_util::Stream<Item = Result<bytes::Bytes, std::io::Error>> + Send + 'static,
{
    Response::builder()
        .header(header::CONTENT_TYPE, content_type)
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
        let codec = Codec::of(&h, "filesystem.Filesystem", "WatchDir", true).unwrap();
        let body = envelope(0, br#"{"path":"x"}"#);
        let v: serde_json::Value = codec.stream_request(&body).unwrap();
        assert_eq!(v["path"], "x");
        assert!(codec
            .stream_request::<serde_json::Value>(&body[..7])
            .is_err());
        h.insert(header::CONTENT_TYPE, "text/plain".parse().unwrap());
        let r = *Codec::of(&h, "filesystem.Filesystem", "WatchDir", true)
            .err()
            .unwrap();
        assert_eq!(r.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
    }

    #[test]
    fn a_protobuf_message_reaches_the_handlers_as_its_json_mapping_and_back() {
        let mut h = HeaderMap::new();
        h.insert(header::CONTENT_TYPE, "application/proto".parse().unwrap());
        let codec = Codec::of(&h, "filesystem.Filesystem", "Stat", false).unwrap();
        let Codec::Proto { input, output } = &codec else {
            panic!("not the protobuf codec")
        };
        let req = DynamicMessage::deserialize(input.clone(), serde_json::json!({"path": "a/b"}))
            .unwrap()
            .encode_to_vec();
        let v: serde_json::Value = codec.request(&req).unwrap();
        assert_eq!(v["path"], "a/b");
        let answer = serde_json::json!({"entry": {"name": "b", "type": "FILE_TYPE_FILE", "size": "3",
            "modifiedTime": "2026-01-01T00:00:00.000Z", "isSymlink": false}});
        let bytes = codec.encode(&answer).unwrap();
        let back = DynamicMessage::decode(output.clone(), bytes.as_slice()).unwrap();
        let back = serde_json::to_value(&back).unwrap();
        assert_eq!(back["entry"]["size"], "3");
        assert_eq!(back["entry"]["type"], "FILE_TYPE_FILE");
        assert!(Codec::of(&h, "filesystem.Filesystem", "Nope", false).is_err());
    }
}
