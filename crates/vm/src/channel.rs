//! The host's ends of a VM sandbox's channels as the relay's threads share
//! them: the VM's (one [`Link`] every thread writes frames through, held
//! while the guest does not run; the frames a reader takes from it; a
//! caller's stdin pumped into it) and a caller's (a notice with, perhaps,
//! a descriptor). The relay ([`crate::backend`]), the supervisor's hold on
//! the VM ([`crate::control`]) and connections into it ([`crate::inside`])
//! all write here; nothing here knows of them.

use crate::wire::{Frame, Kind, CHUNK};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use warden_audit::VmCut;

/// Most bytes held for a guest that does not run; beyond, frames are
/// dropped (a writer blocked on a paused guest would hold the channel
/// for every process).
const HELD_MAX: usize = 1 << 20;

/// The host's side of the channel as the relay's threads write to it:
/// the VMM's socket, or, while the guest does not run, a queue.
pub(crate) struct Link {
    stream: UnixStream,
    stall: Duration,
    held: Option<Vec<u8>>,
    cut_off: CutOff,
}

/// Why the host cut its guest off, and when (ms since the epoch), once it
/// has: set by whichever thread cut (the channel's reader, a write to the
/// guest), taken by the relay, which reports it as the sandbox's event
/// (threads other than the relay's hold no sink). The first cut is the
/// one: what fails after it fails because of it.
#[derive(Clone, Default)]
pub(crate) struct CutOff(Arc<Mutex<Option<(VmCut, u64)>>>);

impl CutOff {
    pub(crate) fn set(&self, cut: VmCut) {
        let ts_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        if let Ok(mut c) = self.0.lock() {
            c.get_or_insert((cut, ts_ms));
        }
    }

    pub(crate) fn take(&self) -> Option<(VmCut, u64)> {
        self.0.lock().ok().and_then(|mut c| c.take())
    }
}

/// How long a write to the guest may wait for it to take the bytes: a
/// guest that stops reading its port is found out here, and its channel
/// shut (the sandbox ends as a VM gone), rather than every relay thread
/// frozen behind the channel's lock.
pub(crate) const GUEST_STALL: Duration = Duration::from_secs(30);

/// `stream` with writes bounded by `stall`.
fn bounded(stream: UnixStream, stall: Duration) -> UnixStream {
    if let Err(e) = stream.set_write_timeout(Some(stall)) {
        // Not expected of a connected Unix socket; said, not hidden.
        tracing::warn!("cannot bound writes to the guest's channel: {e}");
    }
    stream
}

impl Link {
    /// A cut for a guest that stops reading is told to `cut_off`.
    pub(crate) fn new(stream: UnixStream, cut_off: CutOff) -> Link {
        Link::stalling_after(stream, GUEST_STALL, cut_off)
    }

    /// Writes to the guest bounded by `stall` (not [`GUEST_STALL`]).
    fn stalling_after(stream: UnixStream, stall: Duration, cut_off: CutOff) -> Link {
        Link {
            stream: bounded(stream, stall),
            stall,
            held: None,
            cut_off,
        }
    }

    pub(crate) fn hold(&mut self) {
        self.held.get_or_insert_with(Vec::new);
    }

    /// Write what was held to `stream` (the restored VMM's, or the same
    /// one), which is written to from now on.
    pub(crate) fn release(&mut self, stream: Option<UnixStream>) {
        if let Some(s) = stream {
            self.stream = bounded(s, self.stall);
        }
        if let Some(q) = self.held.take() {
            let _ = self.write_stream(&q);
        }
    }

    /// Write to the guest's channel; a write that times out shuts the
    /// channel (a frame half written cannot be taken back, and the guest
    /// stopped reading): its reader ends, and the sandbox with it.
    fn write_stream(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self.stream.write(buf) {
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                tracing::debug!(
                    "the guest took nothing from its channel for {} s; the VM is cut off",
                    self.stall.as_secs()
                );
                self.cut_off.set(VmCut::GuestStalled {
                    stalled_ms: self.stall.as_millis() as u64,
                });
                let _ = self.stream.shutdown(std::net::Shutdown::Both);
                Err(e)
            }
            r => r,
        }
    }
}

/// Write `buf` to a caller's `out` (a pipe, a terminal, a socket), giving
/// up at `deadline`: `Err(TimedOut)` when the caller has not taken it by
/// then. Written in pieces of at most `PIPE_BUF` after each readiness, so
/// that no single write blocks past the deadline and the descriptor's
/// flags (shared with the caller) stay untouched. Without a deadline, a
/// plain blocking write.
/// `PIPE_BUF` on Linux: a pipe that polls writable takes this much
/// without blocking.
const PIECE: usize = 4096;

pub(crate) fn write_within(
    out: &mut File,
    buf: &[u8],
    deadline: Option<Instant>,
) -> std::io::Result<()> {
    let Some(deadline) = deadline else {
        return out.write_all(buf);
    };
    let mut rest = buf;
    while !rest.is_empty() {
        let left = deadline.saturating_duration_since(Instant::now());
        let ms = u16::try_from(left.as_millis()).unwrap_or(u16::MAX);
        let mut fds = [PollFd::new(out.as_fd(), PollFlags::POLLOUT)];
        match poll(&mut fds, PollTimeout::from(ms)) {
            Ok(0) if Instant::now() >= deadline => return Err(std::io::ErrorKind::TimedOut.into()),
            Ok(0) | Err(nix::errno::Errno::EINTR) => continue,
            Ok(_) => {}
            Err(e) => return Err(e.into()),
        }
        let piece = rest.len().min(PIECE);
        match out.write(&rest[..piece]) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => rest = &rest[n..],
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

impl Write for Link {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match &mut self.held {
            // A frame is one write: held whole or dropped whole.
            Some(q) if q.len() + buf.len() > HELD_MAX => Err(std::io::Error::new(
                std::io::ErrorKind::WouldBlock,
                "the paused guest's queue is full",
            )),
            Some(q) => {
                q.extend_from_slice(buf);
                Ok(buf.len())
            }
            None => self.write_stream(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self.held {
            Some(_) => Ok(()),
            None => self.stream.flush(),
        }
    }
}

pub(crate) type Writer = Arc<Mutex<Link>>;

pub(crate) fn send(w: &Writer, f: Frame) {
    if let Ok(mut s) = w.lock() {
        let _ = f.write_to(&mut *s);
    }
}

/// Relay `from` (a caller's stdin) into the VM as `id`'s stdin until its
/// end, or until `stop`.
pub(crate) fn pump_stdin(from: OwnedFd, id: u64, w: Writer, stop: Arc<AtomicBool>) {
    let mut file = File::from(from);
    let mut buf = vec![0u8; CHUNK];
    loop {
        if stop.load(Ordering::SeqCst) {
            return;
        }
        let mut fds = [PollFd::new(file.as_fd(), PollFlags::POLLIN)];
        match poll(&mut fds, PollTimeout::from(100u16)) {
            Ok(0) => continue,
            Ok(_) => {}
            Err(nix::errno::Errno::EINTR) => continue,
            Err(_) => break,
        }
        match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => send(&w, Frame::new(Kind::Stdin, id, buf[..n].to_vec())),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    send(&w, Frame::new(Kind::StdinEof, id, Vec::new()));
}

/// Frames a restored VMM's reader starts from: the part of one that the
/// ended VMM's reader had read.
pub(crate) fn frames(buf: &mut Vec<u8>) -> Result<Vec<Frame>, crate::wire::WireError> {
    let mut out = Vec::new();
    while let Some((f, used)) = Frame::parse_prefix(buf)? {
        buf.drain(..used);
        out.push(f);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn a_guest_that_stops_reading_is_found_out_and_its_channel_shut() {
        let (host, mut guest) = UnixStream::pair().expect("socketpair");
        let cut_off = CutOff::default();
        let w: Writer = Arc::new(Mutex::new(Link::stalling_after(
            host,
            Duration::from_millis(300),
            cut_off.clone(),
        )));
        let started = Instant::now();
        // The guest reads nothing: the socket's buffer fills, then the
        // write times out instead of holding the lock for ever.
        for _ in 0..200 {
            send(&w, Frame::new(Kind::Stdin, 1, vec![0u8; CHUNK]));
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "writes to a guest that reads nothing were not bounded: {:?}",
            started.elapsed()
        );
        // The channel was shut: the guest's side reads its end after
        // what was buffered.
        guest
            .set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        let mut sink = Vec::new();
        let read = guest.read_to_end(&mut sink);
        assert!(read.is_ok(), "the channel was not shut: {read:?}");
        assert!(w.lock().is_ok(), "the channel's lock is free");
        // The cut is kept for the relay to report, once, with its bound.
        assert_eq!(
            cut_off.take().map(|(cut, _)| cut),
            Some(VmCut::GuestStalled { stalled_ms: 300 })
        );
        assert_eq!(cut_off.take(), None, "a cut is reported once");
    }

    #[test]
    fn a_caller_that_takes_nothing_is_given_up_on_at_the_deadline() {
        let (r, w) = nix::unistd::pipe().expect("pipe");
        let mut out = File::from(w);
        let started = Instant::now();
        let by = Some(Instant::now() + Duration::from_millis(300));
        let res = write_within(&mut out, &vec![7u8; 1 << 20], by);
        assert_eq!(res.map_err(|e| e.kind()), Err(std::io::ErrorKind::TimedOut));
        assert!(started.elapsed() < Duration::from_secs(5));
        drop(r);
    }

    #[test]
    fn a_caller_that_reads_gets_every_byte_written_within_the_deadline() {
        let (r, w) = nix::unistd::pipe().expect("pipe");
        let reader = std::thread::spawn(move || {
            let mut got = Vec::new();
            File::from(r).read_to_end(&mut got).map(|_| got)
        });
        let mut out = File::from(w);
        let data: Vec<u8> = (0..300_000u32).map(|i| i as u8).collect();
        let by = Some(Instant::now() + Duration::from_secs(20));
        write_within(&mut out, &data, by).expect("written");
        drop(out);
        let got = reader.join().expect("reader").expect("read");
        assert_eq!(got, data);
    }
}
