//! Connections into a VM sandbox from the host (the daemon reaching a
//! desktop's screen or its browser's DevTools): the supervisor's
//! `connect` request, answered as the process backend's init answers it,
//! with a connected socket, although no descriptor crosses a VM's
//! boundary. The host makes a socket pair: one end goes to the supervisor
//! as the connection; the guest's init connects to the service on the
//! guest's own loopback, and the other end's bytes are relayed through the
//! channel as the connection's frames ([`crate::wire`]).
//!
//! Nothing listens anywhere for this and no network is involved: the
//! connection exists only as frames on the VM's channel, and the guest's
//! init connects from inside the guest, to the guest's loopback only (the
//! target is checked on both sides). A sandbox without a network device
//! (no egress) is reached the same way.

use crate::channel::{pump_stdin, send, Writer};
use crate::wire::{Frame, Kind, CONNECTION};
use std::collections::HashMap;
use std::io::Write;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use warden_protocol::connect::Target;
use warden_protocol::spawn::FromInit;

/// How long a connection's bytes may wait for the caller to take them
/// before the connection is closed: a caller that stops reading must not
/// hold up the VM's channel, which every process of the sandbox shares.
pub(crate) const CALLER_STALL: Duration = Duration::from_secs(5);

/// The connections asked for and open, by their id on the channel.
#[derive(Default)]
pub(crate) struct Connections {
    /// Asked of the guest, not answered yet: our end, and the caller's.
    pending: HashMap<u64, (UnixStream, UnixStream)>,
    open: HashMap<u64, Open>,
}

struct Open {
    to_caller: UnixStream,
    stop: Arc<AtomicBool>,
}

impl Connections {
    /// The supervisor's request `id` for a connection to `to`: asked of the
    /// guest's init. `Err(errno)` is the answer at once (nothing asked).
    pub(crate) fn ask(&mut self, id: u64, to: &Target, w: &Writer) -> Result<(), i32> {
        to.check().map_err(|_| nix::errno::Errno::EINVAL as i32)?;
        let pair = UnixStream::pair()
            .map_err(|e| e.raw_os_error().unwrap_or(nix::errno::Errno::EIO as i32))?;
        self.pending.insert(id | CONNECTION, pair);
        send(w, Frame::json(Kind::Connect, id | CONNECTION, to));
        Ok(())
    }

    /// A frame of a connection (its id has [`CONNECTION`] set): the
    /// guest's answer, its bytes, its end.
    pub(crate) fn frame(&mut self, f: Frame, channel: &OwnedFd, w: &Writer) {
        let request = f.id & !CONNECTION;
        match f.kind {
            Kind::Connected => {
                let Some((ours, theirs)) = self.pending.remove(&f.id) else {
                    return;
                };
                let relay = ours.try_clone().map(OwnedFd::from);
                let (Ok(from_caller), Ok(())) = (relay, ours.set_write_timeout(Some(CALLER_STALL)))
                else {
                    let errno = nix::errno::Errno::EIO as i32;
                    send(w, Frame::new(Kind::StdinEof, f.id, Vec::new()));
                    return done(channel, request, errno, None);
                };
                let stop = Arc::new(AtomicBool::new(false));
                {
                    let (w, stop, id) = (w.clone(), stop.clone(), f.id);
                    std::thread::spawn(move || pump_stdin(from_caller, id, w, stop));
                }
                self.open.insert(
                    f.id,
                    Open {
                        to_caller: ours,
                        stop,
                    },
                );
                done(channel, request, 0, Some(&OwnedFd::from(theirs)));
            }
            Kind::Failed if self.pending.remove(&f.id).is_some() => {
                let errno = f.parse::<i32>().unwrap_or(nix::errno::Errno::EIO as i32);
                done(channel, request, errno, None);
            }
            Kind::Stdout => {
                let stalled = match self.open.get_mut(&f.id) {
                    Some(o) => o.to_caller.write_all(&f.payload).is_err(),
                    None => false,
                };
                if stalled {
                    self.close(f.id, w);
                }
            }
            // The service closed: the caller reads the end once it has
            // every byte before it.
            // (The relay towards the guest holds a copy of the socket
            // until the caller closes its end.)
            Kind::Ended => {
                if let Some(o) = self.open.remove(&f.id) {
                    let _ = o.to_caller.shutdown(std::net::Shutdown::Write);
                }
            }
            _ => {}
        }
    }

    /// Close connection `id` both ways (its caller stopped reading).
    fn close(&mut self, id: u64, w: &Writer) {
        if let Some(o) = self.open.remove(&id) {
            o.stop.store(true, Ordering::SeqCst);
            let _ = o.to_caller.shutdown(std::net::Shutdown::Both);
            send(w, Frame::new(Kind::StdinEof, id, Vec::new()));
        }
    }

    /// The VM is going: every connection's relay stops.
    pub(crate) fn end(&mut self) {
        for o in self.open.values() {
            o.stop.store(true, Ordering::SeqCst);
            let _ = o.to_caller.shutdown(std::net::Shutdown::Both);
        }
        self.open.clear();
        self.pending.clear();
    }
}

/// Answer the supervisor's request `id`: `errno`, and the connection.
fn done(channel: &OwnedFd, id: u64, errno: i32, fd: Option<&OwnedFd>) {
    warden_jail::spawn::notify(channel.as_fd(), &FromInit::FileDone { id, errno }, fd);
}
