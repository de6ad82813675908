//! Passing through: the bytes of an allowed connection that is not
//! terminated for secrets, moved both ways after the decision, as they
//! are.
//!
//! Each direction reads what the kernel holds for it and writes it on,
//! through a buffer lent by the proxy's memory budget: 64 KiB to begin
//! with, grown to 1 MiB for a direction whose read filled its buffer (a
//! bulk transfer) while the budget has one to lend, so that a download
//! moves in few, large system calls and few wake-ups; 4 KiB when the
//! budget has nothing to lend. Both sockets have Nagle's algorithm off:
//! what one side sent is passed on at once, not held for an ACK. One timer
//! per connection (not one per read) ends it when neither direction has
//! moved a byte for the idle timeout.
//!
//! The ends are passed on as they came: an orderly close of one direction
//! (a FIN, `shutdown(SHUT_WR)`) becomes the same on the other side while
//! the other direction goes on; a reset (or a write its peer refused)
//! becomes a reset of the other side, so that a client can tell a cut
//! transfer from a complete one.
//!
//! The starting buffers of connections that ended are kept for the next
//! ones (at most [`SPARE_BUFFERS`] of them): a new connection's two
//! buffers were otherwise taken from the allocator and given back to the
//! kernel at its end (an `madvise` per connection, and page faults on the
//! next one's first bytes). A kept buffer is cleared before it is lent
//! again, and only what a read put in it is ever written out.
//!
//! Measured or weighed and not kept (see the README's performance section):
//! `splice(2)` through a pipe per direction and a sockmap that lets the
//! kernel join the two sockets. This is the only copy that may take a
//! zero-copy path (the secret terminator rewrites bytes), and on loopback
//! the copy is not where a relay's time goes.

use super::{live, Shared};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Semaphore;
use tokio::time::Instant;

/// Buffer per direction to begin with: a request, a handshake flight or
/// an answer in one read.
const START_BUFFER: usize = 64 * 1024;
/// Buffer per direction of a bulk transfer.
const BULK_BUFFER: usize = 1024 * 1024;
/// Both directions' starting buffers, in KiB of the proxy's memory budget
/// (lent while a connection passes bytes).
pub(super) const START_BUFFERS: u32 = (2 * START_BUFFER / 1024) as u32;
/// What growing one direction to [`BULK_BUFFER`] borrows on top, in KiB.
const BULK_EXTRA: u32 = ((BULK_BUFFER - START_BUFFER) / 1024) as u32;
/// What the large-buffer half of the budget keeps back from the relay's
/// optional buffers (its starting and bulk ones, which fall back to small
/// ones), in KiB: what a request on a terminated connection must be paid
/// (its head and body pieces, `crate::secrets` refuses one it cannot pay
/// with a 503) is never taken by downloads passed through meanwhile.
pub(super) const KEPT_FOR_REQUESTS: u32 = 8 * 1024;

/// `kib` of the budget, when it has them to lend above what it keeps
/// back for requests.
fn lend(budget: &Arc<Semaphore>, kib: u32) -> Option<tokio::sync::OwnedSemaphorePermit> {
    if budget.available_permits() < (kib + KEPT_FOR_REQUESTS) as usize {
        return None;
    }
    budget.clone().try_acquire_many_owned(kib).ok()
}

/// Buffer per direction when the budget has no large one to lend: paid
/// for by the connection's own cost.
const SMALL_BUFFER: usize = 4 * 1024;
/// Starting buffers kept for reuse once their connection has ended, per
/// proxy: enough for four connections at once, 512 KiB at most (outside
/// the memory budget, which pays for buffers in use).
pub(super) const SPARE_BUFFERS: usize = 8;

/// Starting buffers of ended connections, kept for the next ones.
#[derive(Default)]
pub(super) struct Spare(std::sync::Mutex<Vec<Vec<u8>>>);

impl Spare {
    /// An empty buffer of `size` bytes' capacity: a kept one when there is
    /// one of that size.
    fn take(&self, size: usize) -> Vec<u8> {
        if size == START_BUFFER {
            if let Some(buf) = self.0.lock().ok().and_then(|mut v| v.pop()) {
                return buf;
            }
        }
        Vec::with_capacity(size)
    }

    /// Keep `buf` for a later connection, when it is a starting buffer and
    /// there is room.
    fn give_back(&self, mut buf: Vec<u8>) {
        if buf.capacity() != START_BUFFER {
            return;
        }
        buf.clear();
        if let Ok(mut v) = self.0.lock() {
            if v.len() < SPARE_BUFFERS {
                v.push(buf);
            }
        }
    }
}

/// What passed, once the connection has ended.
pub(super) struct Passed {
    /// Bytes from the sandbox to upstream.
    pub(super) out: u64,
    /// Bytes from upstream to the sandbox.
    pub(super) inn: u64,
    /// The connection's name was removed from the allowlist.
    pub(super) cut: bool,
}

/// Which of the two sockets.
#[derive(Clone, Copy)]
enum Side {
    Sandbox,
    Upstream,
}

/// How one direction ended.
enum End {
    /// Its reader sent a FIN, passed on.
    Closed,
    /// A socket failed (a reset, or a write the peer refused).
    Failed(Side),
}

/// How the connection ended (dropped sockets close in order, except
/// after a failure).
enum Stop {
    Done,
    Failed(Side),
    Idle,
    Cut,
}

/// One direction's state besides its sockets.
struct Way<'a> {
    from: Side,
    to: Side,
    moved: &'a AtomicU64,
    used: &'a AtomicU64,
    /// Milliseconds since `start` of the last byte either way.
    last: &'a AtomicU64,
    /// Since when (milliseconds since `start`, plus one) this direction's
    /// write has been waiting for its peer to take bytes; 0 when not.
    writing: &'a AtomicU64,
    start: Instant,
    budget: &'a Arc<Semaphore>,
    size: usize,
    spare: &'a Spare,
}

/// Move bytes both ways until both directions have ended, until one side
/// fails, until neither has moved a byte for the idle timeout, or until
/// the connection's name is removed from the allowlist. Every chunk counts
/// towards the egress quota as it passes.
pub(super) async fn pass(
    conn: &mut TcpStream,
    upstream: &mut TcpStream,
    shared: &Shared,
    registration: &mut live::Registration,
) -> Passed {
    // Passed on at once: the proxy adds no Nagle delay of its own (the
    // sandbox's side has it off from the listening socket, `serve`).
    let _ = upstream.set_nodelay(true);
    let start = Instant::now();
    let last = AtomicU64::new(0);
    let (moved_out, moved_in) = (AtomicU64::new(0), AtomicU64::new(0));
    let (writing_out, writing_in) = (AtomicU64::new(0), AtomicU64::new(0));
    // The starting buffers when the budget has them to lend, small ones
    // (already paid for by the connection) when not.
    let lease = lend(&shared.buffer_memory, START_BUFFERS);
    let size = if lease.is_some() {
        START_BUFFER
    } else {
        SMALL_BUFFER
    };
    let stop = {
        let (mut cr, mut cw) = conn.split();
        let (mut ur, mut uw) = upstream.split();
        let way = |from, to, moved, writing| Way {
            from,
            to,
            moved,
            used: &shared.used,
            last: &last,
            writing,
            start,
            budget: &shared.buffer_memory,
            size,
            spare: &shared.spare,
        };
        let out = pump(
            &mut cr,
            &mut uw,
            way(Side::Sandbox, Side::Upstream, &moved_out, &writing_out),
        );
        let inn = pump(
            &mut ur,
            &mut cw,
            way(Side::Upstream, Side::Sandbox, &moved_in, &writing_in),
        );
        let idle = watchdog(&last, [&writing_out, &writing_in], start, shared.idle);
        tokio::pin!(out, inn, idle);
        let (mut out_done, mut in_done) = (false, false);
        loop {
            tokio::select! {
                end = &mut out, if !out_done => {
                    out_done = true;
                    if let End::Failed(side) = end {
                        break Stop::Failed(side);
                    }
                }
                end = &mut inn, if !in_done => {
                    in_done = true;
                    if let End::Failed(side) = end {
                        break Stop::Failed(side);
                    }
                }
                _ = &mut idle => break Stop::Idle,
                _ = registration.cut() => break Stop::Cut,
            }
            if out_done && in_done {
                break Stop::Done;
            }
        }
    };
    drop(lease);
    if let Stop::Failed(failed) = stop {
        // The other side learns of it as a reset when the caller drops
        // both sockets.
        let other = match failed {
            Side::Sandbox => &*upstream,
            Side::Upstream => &*conn,
        };
        let _ = other.set_zero_linger();
    }
    Passed {
        out: moved_out.load(Relaxed),
        inn: moved_in.load(Relaxed),
        cut: matches!(stop, Stop::Cut),
    }
}

/// Resolves once neither direction has moved a byte for `idle`, or once a
/// write has waited that long for its peer to take bytes (a peer that never
/// reads holds nothing for ever, even while the other direction is busy):
/// one timer per connection, set again only when it fires early.
async fn watchdog(last: &AtomicU64, writing: [&AtomicU64; 2], start: Instant, idle: Duration) {
    loop {
        let mut since = last.load(Relaxed);
        for w in writing {
            let w = w.load(Relaxed);
            if w > 0 {
                since = since.min(w - 1);
            }
        }
        let deadline = start + Duration::from_millis(since) + idle;
        if Instant::now() >= deadline {
            return;
        }
        tokio::time::sleep_until(deadline).await;
    }
}

/// Copy one way until its reader's FIN (passed on as a FIN) or a failure
/// of either socket; what passes is added to `way.moved` and the quota's
/// count as it goes.
async fn pump<R, W>(from: &mut R, to: &mut W, way: Way<'_>) -> End
where
    R: tokio::io::AsyncRead + Unpin,
    W: tokio::io::AsyncWrite + Unpin,
{
    let mut buf: Vec<u8> = way.spare.take(way.size);
    let end = copy(from, to, &way, &mut buf).await;
    way.spare.give_back(buf);
    end
}

/// [`pump`]'s loop, through `buf` (replaced by a bulk buffer when it
/// grows; the starting one is then kept for another connection).
async fn copy<R, W>(from: &mut R, to: &mut W, way: &Way<'_>, buf: &mut Vec<u8>) -> End
where
    R: tokio::io::AsyncRead + Unpin,
    W: tokio::io::AsyncWrite + Unpin,
{
    // The loan that grew this direction to a bulk buffer, held while it
    // is in use.
    let mut bulk = None;
    loop {
        buf.clear();
        // Into the buffer's capacity, which is never zeroed or grown
        // (`read_buf` reads at most what is spare).
        let n = match from.read_buf(buf).await {
            Ok(0) => {
                return match to.shutdown().await {
                    Ok(()) => End::Closed,
                    Err(_) => End::Failed(way.to),
                }
            }
            Ok(n) => n,
            Err(_) => return End::Failed(way.from),
        };
        way.writing
            .store(way.start.elapsed().as_millis() as u64 + 1, Relaxed);
        if to.write_all(buf).await.is_err() {
            return End::Failed(way.to);
        }
        let now = way.start.elapsed().as_millis() as u64;
        way.writing.store(0, Relaxed);
        way.moved.fetch_add(n as u64, Relaxed);
        way.used.fetch_add(n as u64, Relaxed);
        way.last.store(now, Relaxed);
        if n == buf.capacity() && bulk.is_none() && way.size == START_BUFFER {
            // A full read: a bulk transfer, moved in larger steps while
            // the budget can lend them.
            if let Some(loan) = lend(way.budget, BULK_EXTRA) {
                bulk = Some(loan);
                way.spare
                    .give_back(std::mem::replace(buf, Vec::with_capacity(BULK_BUFFER)));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_relays_optional_buffers_never_take_what_is_kept_for_requests() {
        let budget = Arc::new(Semaphore::new(
            (KEPT_FOR_REQUESTS + 2 * BULK_EXTRA) as usize,
        ));
        let a = lend(&budget, BULK_EXTRA).expect("above the reserve");
        let b = lend(&budget, BULK_EXTRA).expect("up to the reserve");
        // What is left is the reserve: a third download relays through
        // its small buffers instead.
        assert!(lend(&budget, BULK_EXTRA).is_none());
        assert!(lend(&budget, START_BUFFERS).is_none());
        assert_eq!(budget.available_permits(), KEPT_FOR_REQUESTS as usize);
        // A request's payment still finds it whole.
        let request = budget.clone().try_acquire_many_owned(KEPT_FOR_REQUESTS);
        assert!(request.is_ok());
        drop((a, b, request));
    }
}
