//! The guest init's side of a connection into the guest (see
//! [`crate::wire`]): the host asks for a service on the guest's own
//! loopback (a desktop's VNC server or its browser's DevTools, which
//! listen there and nowhere else); the init connects from inside the
//! guest and relays the connection's bytes as frames. Only the guest's
//! loopback (or a Unix socket of its file tree) can be named: the target is
//! checked here as the process backend's init checks it, and the guest's
//! loopback is the guest kernel's own, so nothing of the host's, of
//! another guest's or of any network is reached this way.

use crate::wire::{Frame, Kind, CHUNK};
use std::collections::HashMap;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use warden_protocol::connect::Target;

/// How long a connection to the guest's own loopback may take (the host's
/// supervisor waits 10 s for the answer).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The connections open, by their frame id: where the host's bytes for
/// each go (`None`: the host's side is at its end).
pub(super) type Conns = Arc<Mutex<HashMap<u64, Sender<Option<Vec<u8>>>>>>;

pub(super) fn lock(c: &Conns) -> std::sync::MutexGuard<'_, HashMap<u64, Sender<Option<Vec<u8>>>>> {
    c.lock().unwrap_or_else(|p| p.into_inner())
}

/// Connect to `target` inside the guest; `connected` or `failed` goes to
/// the host, then the connection's bytes both ways. Runs on a thread of
/// its own: a slow connection holds up nothing else.
pub(super) fn open(
    id: u64,
    target: Target,
    send: impl Fn(Frame) + Send + Clone + 'static,
    conns: Conns,
) {
    // PID 1 must not panic: a thread that cannot start (the guest at its
    // process limit) fails the connection instead.
    let fail = send.clone();
    let started = std::thread::Builder::new().spawn(move || {
        let socket = match made(&target) {
            Ok(s) => s,
            Err(errno) => return send(Frame::json(Kind::Failed, id, &errno)),
        };
        let (reader, writer) = match socket.try_clone() {
            Ok(r) => (File::from(r), File::from(socket)),
            Err(e) => {
                let errno = e.raw_os_error().unwrap_or(nix::errno::Errno::EIO as i32);
                return send(Frame::json(Kind::Failed, id, &errno));
            }
        };
        let (tx, rx) = channel::<Option<Vec<u8>>>();
        let towards = std::thread::Builder::new().spawn(move || {
            let mut writer = writer;
            while let Ok(Some(data)) = rx.recv() {
                if writer.write_all(&data).is_err() {
                    break;
                }
            }
            // The host's side is at its end: so is ours, towards the
            // service (which then closes, ending the reader below).
            let _ =
                nix::sys::socket::shutdown(writer.as_raw_fd(), nix::sys::socket::Shutdown::Write);
        });
        if towards.is_err() {
            return send(Frame::json(
                Kind::Failed,
                id,
                &(nix::errno::Errno::EAGAIN as i32),
            ));
        }
        lock(&conns).insert(id, tx);
        send(Frame::new(Kind::Connected, id, Vec::new()));
        let mut reader = reader;
        let mut buf = vec![0u8; CHUNK];
        loop {
            match reader.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => send(Frame::new(Kind::Stdout, id, buf[..n].to_vec())),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
        send(Frame::json(Kind::Ended, id, &crate::wire::Ended::Exited(0)));
    });
    if started.is_err() {
        fail(Frame::json(
            Kind::Failed,
            id,
            &(nix::errno::Errno::EAGAIN as i32),
        ));
    }
}

/// A socket connected to `target`, or the errno that stopped it.
fn made(target: &Target) -> Result<OwnedFd, i32> {
    target
        .check()
        .map_err(|_| nix::errno::Errno::EINVAL as i32)?;
    let errno = |e: std::io::Error| e.raw_os_error().unwrap_or(nix::errno::Errno::EIO as i32);
    match target {
        Target::Tcp { addr } => std::net::TcpStream::connect_timeout(addr, CONNECT_TIMEOUT)
            .map(OwnedFd::from)
            .map_err(errno),
        Target::Unix { path } => std::os::unix::net::UnixStream::connect(path)
            .map(OwnedFd::from)
            .map_err(errno),
    }
}
