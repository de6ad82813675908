//! What the init does inside the sandbox for a caller on the host: a
//! terminal opened ahead, a file operation, a connection to a service on
//! the sandbox's own loopback; each answered with an errno and maybe a
//! descriptor.

use super::Shared;
use crate::protocol::{self, Refusal, Reply};
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::Ordering;
use std::sync::mpsc::sync_channel;
use std::sync::Arc;
use std::time::Duration;
use warden_jail::spawn;
use warden_protocol::spawn::ToInit;

/// How long the init may take over one request of this kind.
const FILE_OP_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a connection to a service inside the sandbox may take: on the
/// sandbox's own loopback it is answered at once, unless the listener's
/// queue is full.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Send the init the request `make(id)` builds and wait for its answer
/// (an errno and the descriptor it opened). `what` names the request in
/// the error a silent init gets.
fn ask_init(
    shared: &Shared,
    what: &str,
    make: impl FnOnce(u64) -> ToInit,
) -> Result<(i32, Option<OwnedFd>), String> {
    if shared.stopping.load(Ordering::Relaxed) || shared.init_gone.load(Ordering::SeqCst) {
        return Err("the sandbox is stopping".into());
    }
    let id = shared.next_file.fetch_add(1, Ordering::Relaxed);
    let (tx, rx) = sync_channel(1);
    if let Ok(mut files) = shared.files.lock() {
        files.insert(id, tx);
    }
    let forget = || {
        if let Ok(mut files) = shared.files.lock() {
            files.remove(&id);
        }
    };
    if let Err(e) = spawn::send(shared.channel.as_fd(), &make(id), &[]) {
        forget();
        return Err(warden_jail::chain_str(&e));
    }
    rx.recv_timeout(FILE_OP_TIMEOUT).map_err(|_| {
        forget();
        format!("the sandbox's init did not answer the {what}")
    })
}

/// Have the init open a terminal in the sandbox's devpts ahead of a spawn:
/// its id and master side.
pub(super) fn open_terminal(
    shared: &Arc<Shared>,
    winsize: Option<(u16, u16)>,
) -> Result<(u64, OwnedFd), String> {
    let mut opened = 0;
    let answer = ask_init(shared, "request for a terminal", |id| {
        opened = id;
        ToInit::OpenTerminal { id, winsize }
    })?;
    match answer {
        (0, Some(master)) => Ok((opened, master)),
        (errno, _) => Err(format!(
            "cannot open the sandbox's terminal: {}",
            nix::errno::Errno::from_raw(errno).desc()
        )),
    }
}

/// Have the init do a file operation, and hand the caller its result (and
/// the descriptor it opened).
pub(super) fn file_op(
    shared: &Arc<Shared>,
    conn: &OwnedFd,
    op: warden_protocol::files::FileOp,
) -> Result<(), protocol::ProtocolError> {
    match ask_init(shared, "file operation", |id| ToInit::File { id, file: op }) {
        Ok((errno, fd)) => {
            let fds: Vec<RawFd> = fd.iter().map(|f| f.as_raw_fd()).collect();
            protocol::send(conn.as_fd(), &Reply::File { errno }, &fds)
        }
        Err(message) => protocol::send(conn.as_fd(), &Reply::Error { message }, &[]),
    }
}

/// Have the init open a socket inside the sandbox connected to `target`
/// (see `warden_jail::connect`), complete a TCP connection here (the init
/// never waits), and hand the caller the connected socket.
pub(super) fn connect(
    shared: &Arc<Shared>,
    conn: &OwnedFd,
    target: warden_protocol::connect::Target,
) -> Result<(), protocol::ProtocolError> {
    if let Err(e) = target.check() {
        return protocol::send(
            conn.as_fd(),
            &Reply::Refused {
                code: Refusal::Invalid,
                message: e.to_string(),
                field: None,
                reason: None,
            },
            &[],
        );
    }
    let tcp = matches!(target, warden_protocol::connect::Target::Tcp { .. });
    let answer = ask_init(shared, "connection request", |id| ToInit::Connect {
        id,
        to: target,
    });
    let (errno, fd) = match answer {
        Ok((0, Some(fd))) if tcp => match completed(&fd) {
            0 => (0, Some(fd)),
            e => (e, None),
        },
        Ok((0, Some(fd))) => (0, Some(fd)),
        Ok((0, None)) => (libc::EIO, None),
        Ok((e, _)) => (e, None),
        Err(message) => return protocol::send(conn.as_fd(), &Reply::Error { message }, &[]),
    };
    let fds: Vec<RawFd> = fd.iter().map(|f| f.as_raw_fd()).collect();
    protocol::send(conn.as_fd(), &Reply::Connect { errno }, &fds)
}
/// Wait for a TCP connection the init started: 0 once connected, else the
/// errno it failed with (ETIMEDOUT after [`CONNECT_TIMEOUT`]).
fn completed(fd: &OwnedFd) -> i32 {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    let deadline = std::time::Instant::now() + CONNECT_TIMEOUT;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return libc::ETIMEDOUT;
        }
        let mut fds = [PollFd::new(fd.as_fd(), PollFlags::POLLOUT)];
        let ms = u16::try_from(left.as_millis()).unwrap_or(u16::MAX);
        match poll(&mut fds, PollTimeout::from(ms)) {
            Ok(0) | Err(nix::errno::Errno::EINTR) => continue,
            Ok(_) => {
                return match nix::sys::socket::getsockopt(
                    fd,
                    nix::sys::socket::sockopt::SocketError,
                ) {
                    Ok(e) => e,
                    Err(e) => e as i32,
                }
            }
            Err(e) => return e as i32,
        }
    }
}
