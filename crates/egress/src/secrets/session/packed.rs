//! A request body towards a terminated host that is compressed, as its
//! head declares or as its first bytes show (a gzip, zlib stream sent
//! with no Content-Encoding): read whole (at most [`MAX_PACKED`] bytes,
//! paid for while held), decoded through [`unpack`] (the same reading the
//! response scrub gives what comes back) and checked for every secret's
//! real value in any spelling; sent as it came. One that carries a value
//! is blocked, one that cannot be read (a format warden cannot decode, a
//! bomb past [`MAX_UNPACKED`], too large to hold) refused. A plain body
//! never waits here: it is checked as it streams (`outbound` and the
//! rewriter).

use super::super::coding;
use super::super::paid::{Bill, Prefixed};
use super::super::rewrite::Rewriter;
use super::super::sniff;
use super::super::OutBody;
use super::unpack::{self, Unreadable};
use super::Session;
use crate::decision::{Cause, Reason};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::{Body, Frame};
use hyper::{Response, StatusCode};
use std::collections::VecDeque;
use std::sync::Arc;

/// The most bytes of a compressed request body held to check it.
const MAX_PACKED: usize = 8 << 20;

/// The most bytes it may decode to: past that it is refused (a bomb
/// costs the proxy no more than this much reading).
const MAX_UNPACKED: usize = 64 << 20;

/// `body` checked when it is compressed; `Err` with warden's answer.
pub(super) async fn checked(
    s: &Arc<Session>,
    parts: &http::request::Parts,
    body: OutBody,
) -> Result<OutBody, Box<Response<OutBody>>> {
    if body.is_end_stream() || s.term.secrets.is_empty() {
        return Ok(body);
    }
    let what = format!("{} {}{}", parts.method, s.name, parts.uri.path());
    let refuse = |why: String| {
        Box::new(s.refuse(
            StatusCode::FORBIDDEN,
            Cause::new(Reason::PackedBody),
            format!("refused: {what}: {why}"),
        ))
    };
    let declared = coding::to_undo(&parts.headers).map_err(|unknown| {
        refuse(format!(
            "its body is in the {unknown} coding, which warden cannot read to check it for secrets"
        ))
    })?;
    let (head, body) = unpack::peek(body, sniff::HEAD)
        .await
        .map_err(|e| refuse(format!("its body could not be read ({e})")))?;
    if declared.is_empty() && sniff::sniff(&head).is_none() {
        return Ok(body);
    }
    // Held whole: what goes upstream is what came, once checked.
    let mut bill = Bill::new(&s.term.decode_memory);
    let mut held: VecDeque<Frame<Bytes>> = VecDeque::new();
    let mut data: Vec<u8> = Vec::new();
    let mut body = body;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| refuse(format!("its body could not be read ({e})")))?;
        if let Some(d) = frame.data_ref() {
            data.extend_from_slice(d);
            if data.len() > MAX_PACKED {
                return Err(refuse(format!("its compressed body is larger than the {MAX_PACKED} bytes warden holds to check it for secrets")));
            }
            bill.cover(data.len()).map_err(|u| {
                refuse(format!(
                    "the proxy's memory budget is spent: no room to hold its compressed body ({} KiB)",
                    u.0
                ))
            })?;
        }
        held.push_back(frame);
    }
    let copy = Full::new(Bytes::from(std::mem::take(&mut data)))
        .map_err(|never| match never {})
        .boxed();
    // Within the same bound as a response's (every stage's output
    // counted): MAX_UNPACKED below only counts the body's own.
    let budget = Arc::new(coding::Budget::new(None));
    let (mut plain, _) = unpack::unpacked(copy, &declared, &s.term.decode_memory, &budget)
        .await
        .map_err(|why| {
            refuse(match why {
                Unreadable::Packed(what) => format!("its body is {what}, compressed data warden cannot read to check it for secrets"),
                Unreadable::Failed(e) => format!("its compressed body could not be read ({e})"),
                Unreadable::Costly(why) => why,
            })
        })?;
    let mut rw = Rewriter::new(s.body.clone());
    let mut read = 0usize;
    while let Some(frame) = plain.frame().await {
        let frame =
            frame.map_err(|e| refuse(format!("its compressed body could not be decoded ({e})")))?;
        if let Some(d) = frame.data_ref() {
            read += d.len();
            if read > MAX_UNPACKED {
                return Err(refuse(format!("its compressed body decodes to more than the {MAX_UNPACKED} bytes warden reads to check it for secrets")));
            }
            rw.push(d).map_err(|b| Box::new(s.block(b)))?;
        }
    }
    rw.finish().map_err(|b| Box::new(s.block(b)))?;
    Ok(Prefixed::paid(held, None, Some(bill)).boxed())
}
