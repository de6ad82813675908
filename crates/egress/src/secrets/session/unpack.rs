//! A body read through its codings, in both directions: those its head
//! declares, then those its first bytes show whatever it declares (gzip,
//! zlib; again each time one is undone), within the decoding budget. A
//! server may hand back what a request stored compressed as `text/plain`
//! or `application/octet-stream`; code inside may send a value compressed
//! with no Content-Encoding. Compressed data the checks cannot read (zstd,
//! xz, bzip2, zip, ... by their signatures), a coding stacked too deep or
//! too costly to undo is named, for the caller to withhold (a response)
//! or refuse (a request). What every stage decodes counts against the
//! body's bound (a ratio of its coded bytes, with a floor), past which
//! its decoding stops with an error. Raw deflate and brotli have no signature: a body
//! in either that declares neither is read as it is. It never decides
//! what is done with what it reads.

use super::super::coding::{self, Budget, Coding, DecodeBody};
use super::super::paid::Prefixed;
use super::super::sniff::{self, Sniffed};
use super::super::{BoxError, OutBody};
use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::Frame;
use std::collections::VecDeque;
use std::sync::Arc;
use tokio::sync::Semaphore;

/// Why a body cannot be read to check it.
#[derive(Debug)]
pub(super) enum Unreadable {
    /// Its bytes could not be read.
    Failed(String),
    /// Compressed data the checks cannot read, by what it is.
    Packed(String),
    /// Its codings would cost more than the decoding budget allows.
    Costly(String),
}

/// The first `n` bytes of `body` (fewer where it ends first), and the
/// body whole again: what was read is handed on first.
pub(super) async fn peek(mut body: OutBody, n: usize) -> Result<(Vec<u8>, OutBody), BoxError> {
    let mut read: VecDeque<Frame<Bytes>> = VecDeque::new();
    let mut head = Vec::new();
    while head.len() < n {
        match body.frame().await {
            Some(Ok(frame)) => {
                if let Some(d) = frame.data_ref() {
                    head.extend_from_slice(&d[..d.len().min(n - head.len())]);
                }
                read.push_back(frame);
            }
            Some(Err(e)) => return Err(e),
            None => return Ok((head, Prefixed::paid(read, None, None).boxed())),
        }
    }
    Ok((head, Prefixed::paid(read, Some(body), None).boxed()))
}

/// `body`, decoded from the `declared` codings and then from each one its
/// first bytes show, every stage within `budget` (the body's bound: see
/// [`Budget`]): `Ok` with the body to check and whether any coding was
/// undone.
pub(super) async fn unpacked(
    body: OutBody,
    declared: &[Coding],
    pool: &Arc<Semaphore>,
    budget: &Arc<Budget>,
) -> Result<(OutBody, bool), Unreadable> {
    if let Some(why) = coding::too_costly(declared) {
        return Err(Unreadable::Costly(why));
    }
    let mut body = if declared.is_empty() {
        body
    } else {
        DecodeBody::new(body, declared, pool.clone(), Some(budget.clone()), true).boxed()
    };
    let mut all = declared.to_vec();
    loop {
        let (head, read) = peek(body, sniff::HEAD)
            .await
            .map_err(|e| Unreadable::Failed(e.to_string()))?;
        body = read;
        let coding = match sniff::sniff(&head) {
            None => return Ok((body, !all.is_empty())),
            Some(Sniffed::Opaque(name)) => return Err(Unreadable::Packed(format!("{name} data"))),
            Some(Sniffed::Coded(c)) => c,
        };
        all.push(coding);
        if all.len() > coding::MAX_CODINGS {
            return Err(Unreadable::Packed(format!(
                "data compressed {} times over",
                all.len()
            )));
        }
        if let Some(why) = coding::too_costly(&all) {
            return Err(Unreadable::Costly(why));
        }
        // The first stage reads the body's own bytes: those are what
        // the bound is a ratio of.
        let first = all.len() == 1;
        body = DecodeBody::new(body, &[coding], pool.clone(), Some(budget.clone()), first).boxed();
    }
}
