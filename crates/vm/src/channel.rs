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

/// Most bytes held for a guest that does not run; beyond, frames are
/// dropped (a writer blocked on a paused guest would hold the channel
/// for every process).
const HELD_MAX: usize = 1 << 20;

/// The host's side of the channel as the relay's threads write to it:
/// the VMM's socket, or, while the guest does not run, a queue.
pub(crate) struct Link {
    stream: UnixStream,
    held: Option<Vec<u8>>,
}

impl Link {
    pub(crate) fn new(stream: UnixStream) -> Link {
        Link { stream, held: None }
    }

    pub(crate) fn hold(&mut self) {
        self.held.get_or_insert_with(Vec::new);
    }

    /// Write what was held to `stream` (the restored VMM's, or the same
    /// one), which is written to from now on.
    pub(crate) fn release(&mut self, stream: Option<UnixStream>) {
        if let Some(s) = stream {
            self.stream = s;
        }
        if let Some(q) = self.held.take() {
            let _ = self.stream.write_all(&q);
        }
    }
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
            None => self.stream.write(buf),
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
