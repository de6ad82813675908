//! What ends a relay nobody uses. A relay (a sandbox's port through the
//! E2B door, HTTP or WebSocket) holds a connection on each side, a task
//! and a place among the caller's long-lived answers ([`crate::leases`]);
//! one that carries nothing would hold them for as long as either side
//! cares to keep it open. Here bytes are copied both ways until either
//! side closes, or until nothing has moved either way for the idle
//! timeout (`sessions: {idle_seconds}` in the daemon's configuration),
//! and a relayed body that yields nothing for that long ends with an
//! error. A write the other side does not take counts as nothing moving.
//! This module never decides who may relay: its callers did.

use axum::body::Body;
use futures_util::StreamExt;
use std::io;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Why a relay ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// A side closed, or broke off.
    Closed,
    /// Nothing moved either way for the idle timeout.
    Idle,
}

/// Most bytes read from one side at a time.
const CHUNK: usize = 16 * 1024;
/// How long a relay one side has closed waits for the other side's
/// silence before it ends: the rest of an answer still comes, but a
/// client that left never holds its place for the whole idle timeout.
const LINGER: Duration = Duration::from_secs(2);

/// Copy bytes between `a` and `b` both ways until both sides have closed
/// (a side that closes is shut down for writing on the other, as
/// `copy_bidirectional` does, and the other then has [`LINGER`] of
/// silence at most), one breaks off, or nothing moves either way for
/// `idle`.
pub async fn both_ways<A, B>(a: A, b: B, idle: Duration) -> Ended
where
    A: AsyncRead + AsyncWrite + Unpin,
    B: AsyncRead + AsyncWrite + Unpin,
{
    let (mut a_read, mut a_write) = tokio::io::split(a);
    let (mut b_read, mut b_write) = tokio::io::split(b);
    let (mut from_a, mut from_b) = (vec![0u8; CHUNK], vec![0u8; CHUNK]);
    let (mut a_open, mut b_open) = (true, true);
    while a_open || b_open {
        // A fresh deadline each time something moved: the timeout is
        // for silence, not for the relay's whole life.
        let silence = if a_open && b_open {
            idle
        } else {
            idle.min(LINGER)
        };
        let moved = tokio::time::timeout(silence, async {
            tokio::select! {
                n = a_read.read(&mut from_a), if a_open => {
                    pass(n, &from_a, &mut b_write, &mut a_open).await
                }
                n = b_read.read(&mut from_b), if b_open => {
                    pass(n, &from_b, &mut a_write, &mut b_open).await
                }
            }
        })
        .await;
        match moved {
            Err(_) if a_open && b_open => return Ended::Idle,
            // A side closed, and the other has had its say.
            Err(_) => return Ended::Closed,
            Ok(Err(_)) => return Ended::Closed,
            Ok(Ok(())) => {}
        }
    }
    Ended::Closed
}

/// What one read gave, written to the other side: an end of file shuts
/// that side down for writing and marks this one closed.
async fn pass<W: AsyncWrite + Unpin>(
    n: io::Result<usize>,
    buf: &[u8],
    to: &mut W,
    open: &mut bool,
) -> io::Result<()> {
    match n? {
        0 => {
            *open = false;
            // The other side may already be gone: its own read says so.
            let _ = to.shutdown().await;
            Ok(())
        }
        n => {
            let slice = buf.get(..n).unwrap_or(buf);
            to.write_all(slice).await?;
            to.flush().await
        }
    }
}

/// `body`, ended with an error once it yields nothing for `idle`; `keep`
/// (a lease) is held until the body ends or is dropped.
pub fn body<K: Send + Sync + 'static>(body: Body, idle: Duration, keep: K) -> Body {
    let stream = body.into_data_stream();
    let frames =
        futures_util::stream::unfold((stream, Some(keep)), move |(mut stream, keep)| async move {
            // Ended (by its end or by silence): nothing more, and the
            // kept value is given back.
            keep.as_ref()?;
            match tokio::time::timeout(idle, stream.next()).await {
                Ok(Some(item)) => Some((item, (stream, keep))),
                Ok(None) => None,
                Err(_) => Some((
                    Err(axum::Error::new(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!("nothing was relayed for {} s", idle.as_secs()),
                    ))),
                    (stream, None),
                )),
            }
        });
    Body::from_stream(frames)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    #[tokio::test]
    async fn bytes_pass_both_ways_and_a_silent_relay_ends_after_its_timeout() {
        let (client, mut client_far) = tokio::io::duplex(1024);
        let (service, mut service_far) = tokio::io::duplex(1024);
        let relay = tokio::spawn(both_ways(client, service, Duration::from_millis(300)));
        client_far.write_all(b"ping").await.unwrap();
        let mut got = [0u8; 4];
        service_far.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"ping");
        service_far.write_all(b"pong").await.unwrap();
        client_far.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"pong");
        // Then nothing: the relay ends by itself, and both far ends see
        // it closed.
        let ended = tokio::time::timeout(Duration::from_secs(5), relay)
            .await
            .expect("the idle relay ended")
            .unwrap();
        assert_eq!(ended, Ended::Idle);
        assert_eq!(client_far.read(&mut got).await.unwrap(), 0);
        assert_eq!(service_far.read(&mut got).await.unwrap(), 0);
    }

    #[tokio::test]
    async fn a_relay_that_keeps_moving_outlives_its_timeout_and_ends_once_a_side_closes() {
        let (client, mut client_far) = tokio::io::duplex(1024);
        let (service, mut service_far) = tokio::io::duplex(1024);
        let relay = tokio::spawn(both_ways(client, service, Duration::from_millis(200)));
        let mut got = [0u8; 1];
        for _ in 0..6 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            client_far.write_all(b"x").await.unwrap();
            service_far.read_exact(&mut got).await.unwrap();
        }
        drop(client_far);
        assert_eq!(service_far.read(&mut got).await.unwrap(), 0);
        // The service stays, silent: the relay ends all the same, well
        // before an idle timeout.
        let ended = tokio::time::timeout(Duration::from_secs(5), relay)
            .await
            .expect("the relay ended")
            .unwrap();
        assert_eq!(ended, Ended::Closed);
    }

    struct Flag(Arc<AtomicBool>);
    impl Drop for Flag {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    #[tokio::test]
    async fn a_silent_body_ends_with_an_error_and_gives_back_what_it_kept() {
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<bytes::Bytes, io::Error>>(4);
        let inner = Body::from_stream(tokio_stream::wrappers::ReceiverStream::new(rx));
        let dropped = Arc::new(AtomicBool::new(false));
        let body = super::body(inner, Duration::from_millis(200), Flag(dropped.clone()));
        tx.send(Ok(bytes::Bytes::from_static(b"a"))).await.unwrap();
        let mut s = body.into_data_stream();
        assert_eq!(&s.next().await.unwrap().unwrap()[..], b"a");
        assert!(!dropped.load(Ordering::SeqCst));
        let err = s.next().await.unwrap();
        assert!(err.is_err());
        assert!(
            dropped.load(Ordering::SeqCst),
            "the lease came back at the timeout"
        );
        assert!(s.next().await.is_none());
        drop(tx);
    }
}
