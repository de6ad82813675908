//! envd's `process.Process/StreamInput` (`commands.stream_input`,
//! `pty.stream_input`): a client stream whose first message names the
//! process and whose next ones carry its input. Each message is taken as
//! it arrives, not once the stream is whole, and its input written at once
//! by the same path as `SendInput` (the same process table, the same
//! sandbox check), so a program reading its input sees each piece as the
//! caller's iterable yields it. The answer is one empty message and the
//! end of the stream, or the end of the stream with the error.

use axum::body::Body;
use axum::response::Response;
use futures_util::StreamExt;
use serde::Deserialize;

use super::{Input, Selected, Selector, SendInputRequest};
use crate::e2b::connect::{Code, Codec, RpcError};
use crate::e2b::E2b;

/// `process.StreamInputRequest`: one of its events.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct StreamInputRequest {
    start: Option<Selected>,
    data: Option<DataEvent>,
    keepalive: Option<serde_json::Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct DataEvent {
    input: Input,
}

/// The envelopes complete at the head of `buf`, taken off it: (flags,
/// message). An envelope longer than `max` is an error.
fn take_envelopes(buf: &mut Vec<u8>, max: usize) -> Result<Vec<(u8, Vec<u8>)>, RpcError> {
    let mut out = Vec::new();
    let mut at = 0;
    while buf.len() - at >= 5 {
        let len = u32::from_be_bytes([buf[at + 1], buf[at + 2], buf[at + 3], buf[at + 4]]) as usize;
        if len > max {
            return Err(RpcError::new(
                Code::ResourceExhausted,
                format!("a message of {len} bytes is over the limit of {max}: send input in smaller pieces"),
            ));
        }
        if buf.len() - at < 5 + len {
            break;
        }
        out.push((buf[at], buf[at + 5..at + 5 + len].to_vec()));
        at += 5 + len;
    }
    buf.drain(..at);
    Ok(out)
}

/// Serve one StreamInput call for sandbox `sb` (the caller was allowed to
/// run commands in it).
pub async fn serve(e: &E2b, sb: &str, codec: &Codec, body: Body) -> Response {
    let mut stream = body.into_data_stream();
    let result = feed(e, sb, codec, &mut stream).await;
    if result.is_err() {
        // The client sends what it has whatever the answer: read the rest
        // (what it still sends, within bounds) and drop it, so the
        // connection stays whole for its next call.
        let max = e.app.limits.body_bytes;
        let drain = async {
            let mut read = 0usize;
            while let Some(Ok(chunk)) = stream.next().await {
                read += chunk.len();
                if read > max {
                    break;
                }
            }
        };
        let _ = tokio::time::timeout(DRAIN, drain).await;
    }
    codec.stream_answer(result.map(|()| serde_json::json!({})))
}

/// How long a refused stream's remaining input is read before answering.
const DRAIN: std::time::Duration = std::time::Duration::from_secs(5);

async fn feed(
    e: &E2b,
    sb: &str,
    codec: &Codec,
    stream: &mut axum::body::BodyDataStream,
) -> Result<(), RpcError> {
    let max = e.app.limits.body_bytes;
    let mut buf = Vec::new();
    let mut target: Option<Selector> = None;
    loop {
        for (flags, msg) in take_envelopes(&mut buf, max)? {
            let m: StreamInputRequest = codec.message(flags, &msg)?;
            match (m.start, m.data, m.keepalive) {
                (Some(start), None, None) => {
                    if target.is_some() {
                        return Err(RpcError::new(
                            Code::InvalidArgument,
                            "the stream names its process twice",
                        ));
                    }
                    // The process must exist now, as envd answers at once.
                    super::find(e, sb, &start.process)?;
                    target = Some(start.process);
                }
                (None, Some(data), None) => {
                    let Some(sel) = &target else {
                        return Err(RpcError::new(
                            Code::InvalidArgument,
                            "input came before the message naming the process (start)",
                        ));
                    };
                    let req = SendInputRequest {
                        process: sel.clone(),
                        input: data.input,
                    };
                    super::send_input(e, sb, req).await?;
                }
                (None, None, Some(_)) => {}
                _ => {
                    return Err(RpcError::new(
                        Code::InvalidArgument,
                        "each message holds one of start, data and keepalive",
                    ))
                }
            }
        }
        match stream.next().await {
            Some(Ok(chunk)) => buf.extend_from_slice(&chunk),
            Some(Err(err)) => {
                return Err(RpcError::new(
                    Code::Unavailable,
                    format!("the input stream broke off: {err}"),
                ))
            }
            None => break,
        }
    }
    if !buf.is_empty() {
        return Err(RpcError::new(
            Code::InvalidArgument,
            "the stream ended inside a message",
        ));
    }
    if target.is_none() {
        return Err(RpcError::new(
            Code::InvalidArgument,
            "the stream named no process (its first message is start)",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envelopes_are_taken_whole_as_they_complete_and_an_oversized_one_is_refused() {
        let mut buf = Vec::new();
        buf.extend_from_slice(&crate::e2b::connect::envelope(0, b"{}"));
        let second = crate::e2b::connect::envelope(0, br#"{"keepalive":{}}"#);
        buf.extend_from_slice(&second[..8]);
        let got = take_envelopes(&mut buf, 100).unwrap();
        assert_eq!(got, vec![(0, b"{}".to_vec())]);
        assert_eq!(buf.len(), 8, "the half message waits for the rest");
        buf.extend_from_slice(&second[8..]);
        let got = take_envelopes(&mut buf, 100).unwrap();
        assert_eq!(got[0].1, br#"{"keepalive":{}}"#.to_vec());
        assert!(buf.is_empty());
        let mut big = crate::e2b::connect::envelope(0, &[b'x'; 200]).to_vec();
        assert!(take_envelopes(&mut big, 100).is_err());
    }
}
