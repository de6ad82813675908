//! A caller of a sandbox's supervisor: connects to its control socket,
//! says hello, and asks one thing per connection. A process started here
//! gets the caller's own descriptors (its pipes, or a terminal the caller
//! relays), so that its output reaches the caller without a copy through
//! the supervisor.
//!
//! The caller's streams, relayed while such a process runs, are
//! [`relay`]'s.

use crate::protocol::{
    self, AskDecision, ExecRequest, PendingQuestion, Process, ProtocolError, Refusal, Reply,
    Request, Status, VERSION,
};
use nix::errno::Errno;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use warden_audit::Event;
use warden_policy::trust::Trust;

mod relay;

pub use relay::{
    hold_forwarded_signals, relay_terminal, resize_terminal, wait_forwarding, CallerStdio, Relay,
};

/// Why the supervisor could not be asked.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("the sandbox is not running (no supervisor listens on {path}); start it with `warden start`")]
    NotRunning {
        path: PathBuf,
        #[source]
        source: Errno,
    },
    /// Connected, but no hello came back: the supervisor is stopped (a
    /// signal), stuck, or too loaded to answer.
    #[error("the sandbox's supervisor (on {path}) did not answer within {} s: it is stopped or stuck; a forced stop ends it", .waited.as_secs())]
    NotAnswering {
        path: PathBuf,
        waited: std::time::Duration,
    },
    #[error(transparent)]
    Protocol(#[from] ProtocolError),
    #[error("the supervisor refused: {0}")]
    Refused(String),
    #[error("{message}")]
    ExecFailed { status: i32, message: String },
    #[error("the supervisor answered something unexpected")]
    Unexpected,
    #[error("this sandbox's supervisor predates the files API (it closed the connection on the request); restart the sandbox to use it")]
    FilesUnsupported,
    #[error("cannot relay the terminal")]
    Terminal(#[source] Errno),
    /// The supervisor refused, saying why in terms a front door maps to
    /// its own (a status, a flag).
    #[error("{message}")]
    Rejected {
        code: Refusal,
        message: String,
        /// The request's field at fault, a JSON pointer (`/allow/2`).
        field: Option<String>,
        /// The stable code below `code` and the option of the sandbox's
        /// spec it is about (a share refused at a resume), for the door
        /// to word as it words the same refusal at a start.
        reason: Option<crate::lifecycle::refusal::StartRefusal>,
    },
    #[error("this sandbox's supervisor predates {0} (it closed the connection on the request); restart the sandbox to use it")]
    Unsupported(&'static str),
    #[error("cannot connect to {target} inside the sandbox: {}", connect_hint(*.source))]
    Connect {
        target: warden_protocol::connect::Target,
        #[source]
        source: Errno,
    },
}

impl ClientError {
    /// The supervisor refused because every connection it serves at once
    /// is held (each running command holds one): nothing was started, and
    /// the same request may be taken once one of them ends. Told apart
    /// from a supervisor that does not answer ([`ClientError::NotAnswering`])
    /// and from a broken socket ([`ClientError::Protocol`]).
    pub fn is_busy(&self) -> bool {
        matches!(
            self,
            ClientError::Rejected {
                code: Refusal::Busy,
                ..
            }
        )
    }
}

/// What a failed connection inside the sandbox means, in words.
fn connect_hint(errno: Errno) -> &'static str {
    match errno {
        Errno::ECONNREFUSED => "connection refused (nothing listens there in the sandbox)",
        Errno::ENOENT => "no such socket in the sandbox",
        Errno::ETIMEDOUT | Errno::EAGAIN => {
            "the service did not accept the connection in time (its queue is full)"
        }
        Errno::EOPNOTSUPP => {
            "this sandbox has no network namespace of its own (degraded mode) or is a microVM, so nothing inside it is reached from outside"
        }
        Errno::EINVAL => "not a place inside the sandbox that can be connected to",
        Errno::EACCES | Errno::EPERM => "permission denied inside the sandbox",
        _ => "the sandbox's init could not connect",
    }
}

/// One conversation with a supervisor.
pub struct Connection {
    sock: OwnedFd,
    /// The supervisor's host PID.
    pub supervisor_pid: u32,
}

/// How long a supervisor has to answer a caller's hello. Its accept
/// thread answers at once; a supervisor that does not in this time is
/// stopped or stuck, and waiting on would hang every listing and every
/// command of its owner with it.
pub const HELLO_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

impl Connection {
    /// The connection's socket: a caller on another thread may shut it
    /// down (`shutdown(2)`) to end a [`Connection::follow`] that waits
    /// for the sandbox's next event.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.sock.as_fd()
    }

    /// Connect to the control socket at `path` and say hello.
    pub fn open(path: &Path) -> Result<Connection, ClientError> {
        Connection::open_within(path, HELLO_WAIT)
    }

    /// [`Connection::open`], waiting at most `wait` for the hello's answer.
    pub fn open_within(path: &Path, wait: std::time::Duration) -> Result<Connection, ClientError> {
        use nix::sys::socket::{SockFlag, SockType};
        let not_running = |source| ClientError::NotRunning {
            path: path.to_path_buf(),
            source,
        };
        // Through the state directory's descriptor when the path is longer
        // than a socket's address holds (`warden_jail::sockname`).
        let sock =
            warden_jail::sockname::connect(path, SockType::SeqPacket, SockFlag::SOCK_CLOEXEC)
                .map_err(not_running)?;
        // The hello's answer is read before anything else; the request
        // that follows may be sent without waiting for it (the socket
        // keeps their order), which `exec` does.
        let sent = protocol::send(sock.as_fd(), &Request::Hello { version: VERSION }, &[]);
        let timeout = |t: std::time::Duration| {
            let tv = nix::sys::time::TimeVal::new(
                t.as_secs() as nix::sys::time::time_t,
                t.subsec_micros() as nix::sys::time::suseconds_t,
            );
            nix::sys::socket::setsockopt(&sock, nix::sys::socket::sockopt::ReceiveTimeout, &tv)
        };
        // Without its timeout the hello could wait forever: refused.
        timeout(wait).map_err(ProtocolError::Receive)?;
        // A supervisor that refuses a connection past its bound answers at
        // once and closes, maybe before it read the hello (or before it
        // was sent): the kernel reports the reset first (the send's EPIPE,
        // a receive's ECONNRESET) and the refusal, still queued, on the
        // next read, which says more than the reset.
        let reset = |e: &ProtocolError| {
            matches!(
                e,
                ProtocolError::Send(Errno::EPIPE | Errno::ECONNRESET)
                    | ProtocolError::Receive(Errno::ECONNRESET)
            )
        };
        let answered = match sent {
            Err(e) => Err(e),
            Ok(()) => protocol::receive::<Reply>(&sock).map(|r| r.0),
        };
        let hello = match answered {
            Err(ProtocolError::Receive(Errno::EAGAIN)) => {
                return Err(ClientError::NotAnswering {
                    path: path.to_path_buf(),
                    waited: wait,
                })
            }
            Err(e) if reset(&e) => match queued_refusal(&sock) {
                Some(reply) => reply,
                None => return Err(e.into()),
            },
            r => r?,
        };
        // What follows may take as long as it takes (an exec, a follow).
        timeout(std::time::Duration::ZERO).map_err(ProtocolError::Receive)?;
        match hello {
            Reply::Hello { pid, .. } => Ok(Connection {
                sock,
                supervisor_pid: pid,
            }),
            // A caller of another version, or one past the bound
            // ([`ClientError::is_busy`]).
            r => refusal(r).and(Err(ClientError::Unexpected)),
        }
    }

    fn ask(&self, req: &Request, fds: &[RawFd]) -> Result<Reply, ClientError> {
        protocol::send(self.sock.as_fd(), req, fds)?;
        self.next()
    }

    fn next(&self) -> Result<Reply, ClientError> {
        refusal(protocol::receive::<Reply>(&self.sock)?.0)
    }

    pub fn status(self) -> Result<Status, ClientError> {
        match self.ask(&Request::Status, &[])? {
            Reply::Status(s) => Ok(s),
            _ => Err(ClientError::Unexpected),
        }
    }

    pub fn ps(self) -> Result<Vec<Process>, ClientError> {
        match self.ask(&Request::Ps, &[])? {
            Reply::Ps { processes } => Ok(processes),
            _ => Err(ClientError::Unexpected),
        }
    }

    /// Ask the sandbox to stop; returns once the request is taken (see
    /// [`wait_gone`] for its end).
    pub fn stop(self, grace: std::time::Duration) -> Result<u32, ClientError> {
        let pid = self.supervisor_pid;
        match self.ask(
            &Request::Stop {
                grace_ms: grace.as_millis() as u64,
            },
            &[],
        )? {
            Reply::Ok => Ok(pid),
            _ => Err(ClientError::Unexpected),
        }
    }

    /// Stop the sandbox `ttl` from now (`None`: never by TTL).
    pub fn set_ttl(self, ttl: Option<std::time::Duration>) -> Result<(), ClientError> {
        match self.ask(
            &Request::SetTtl {
                ttl_ms: ttl.map(|t| t.as_millis() as u64),
            },
            &[],
        )? {
            Reply::Ok => Ok(()),
            _ => Err(ClientError::Unexpected),
        }
    }

    /// Have the sandbox's init do a file operation in its workspace: the
    /// errno it ended with (0: done) and, for the operations that open
    /// one, the file or directory it opened, for this caller to read or
    /// write.
    pub fn file(
        self,
        op: warden_protocol::files::FileOp,
    ) -> Result<(Errno, Option<OwnedFd>), ClientError> {
        protocol::send(self.sock.as_fd(), &Request::File(op), &[])?;
        // A paused sandbox's supervisor refuses with its reason; one older
        // than file operations closes the connection.
        match self.reply(|| ClientError::FilesUnsupported)? {
            (Reply::File { errno }, fds) => Ok((Errno::from_raw(errno), fds.into_iter().next())),
            _ => Err(ClientError::Unexpected),
        }
    }

    /// A stream connected to `target` inside the sandbox (a TCP port of its
    /// own loopback, or a Unix socket of its file tree), opened by the
    /// sandbox's init in the sandbox's namespaces: nothing listens on the
    /// host for it. Anything but the sandbox's loopback is refused before
    /// the supervisor is asked. The socket is non-blocking.
    pub fn connect(
        self,
        target: &warden_protocol::connect::Target,
    ) -> Result<OwnedFd, ClientError> {
        if let Err(e) = target.check() {
            return Err(ClientError::Rejected {
                code: Refusal::Invalid,
                message: e.to_string(),
                field: None,
                reason: None,
            });
        }
        let req = Request::Connect(target.clone());
        match self.ask_new_fds(&req, "connections into the sandbox")? {
            (Reply::Connect { errno: 0 }, fds) => {
                fds.into_iter().next().ok_or(ClientError::Unexpected)
            }
            (Reply::Connect { errno }, _) => Err(ClientError::Connect {
                target: target.clone(),
                source: Errno::from_raw(errno),
            }),
            _ => Err(ClientError::Unexpected),
        }
    }

    pub fn signal(self, exec: u64, signal: i32) -> Result<(), ClientError> {
        match self.ask(&Request::Signal { exec, signal }, &[])? {
            Reply::Ok => Ok(()),
            _ => Err(ClientError::Unexpected),
        }
    }

    /// One request that newer supervisors answer and older ones close the
    /// connection on.
    fn ask_new(&self, req: &Request, what: &'static str) -> Result<Reply, ClientError> {
        self.ask_new_fds(req, what).map(|(r, _)| r)
    }

    /// As [`Connection::ask_new`], with the descriptors the answer carries.
    fn ask_new_fds(
        &self,
        req: &Request,
        what: &'static str,
    ) -> Result<(Reply, Vec<OwnedFd>), ClientError> {
        protocol::send(self.sock.as_fd(), req, &[])?;
        self.reply(|| ClientError::Unsupported(what))
    }

    /// The answer to a request just sent, refusals as errors; a closed
    /// connection is `closed()` (a supervisor older than the request).
    fn reply(
        &self,
        closed: impl FnOnce() -> ClientError,
    ) -> Result<(Reply, Vec<OwnedFd>), ClientError> {
        match protocol::receive::<Reply>(&self.sock) {
            Ok((reply, fds)) => refusal(reply).map(|r| (r, fds)),
            Err(ProtocolError::Closed) => Err(closed()),
            Err(e) => Err(e.into()),
        }
    }

    /// Change the running sandbox's allowlist (`remove` off, then `allow`
    /// on; both empty: only read it); returns the list as it is now.
    /// `by` says who asked, for the audit log; `trust`, whether what is
    /// added is the owner's (or a caller's, which reaches public addresses
    /// only).
    pub fn set_egress(
        self,
        allow: Vec<String>,
        remove: Vec<String>,
        by: &str,
        trust: Trust,
    ) -> Result<Vec<String>, ClientError> {
        let req = Request::SetEgress {
            allow,
            remove,
            by: by.to_string(),
            caller: trust == Trust::Caller,
        };
        match self.ask_new(&req, "live egress changes")? {
            Reply::Egress { rules } => Ok(rules),
            _ => Err(ClientError::Unexpected),
        }
    }

    /// The ask-mode questions waiting for an answer.
    pub fn approvals(self) -> Result<Vec<PendingQuestion>, ClientError> {
        match self.ask_new(&Request::Approvals, "approvals over the control socket")? {
            Reply::Approvals { pending } => Ok(pending),
            _ => Err(ClientError::Unexpected),
        }
    }

    /// Answer an ask-mode question, once; `trust` as for
    /// [`Connection::set_egress`].
    pub fn answer(
        self,
        question: &str,
        decision: AskDecision,
        by: &str,
        trust: Trust,
    ) -> Result<(), ClientError> {
        let req = Request::Answer {
            question: question.to_string(),
            decision,
            by: by.to_string(),
            caller: trust == Trust::Caller,
        };
        match self.ask_new(&req, "approvals over the control socket")? {
            Reply::Ok => Ok(()),
            _ => Err(ClientError::Unexpected),
        }
    }

    /// Append a record of `action` on the sandbox to its audit log,
    /// through the supervisor's writer (which holds the log while the
    /// sandbox runs); returns once the log has it.
    pub fn record(
        self,
        action: warden_audit::WorkspaceAction,
        paths: Vec<PathBuf>,
        detail: String,
    ) -> Result<(), ClientError> {
        // The supervisor waits at most 10 s for its writer: a supervisor
        // that does not answer by far longer is not waited for without end.
        let _ = nix::sys::socket::setsockopt(
            &self.sock,
            nix::sys::socket::sockopt::ReceiveTimeout,
            &nix::sys::time::TimeVal::new(30, 0),
        );
        let req = Request::Record {
            action: action.as_str().to_string(),
            paths,
            detail,
        };
        match self.ask_new(&req, "records over the control socket")? {
            Reply::Ok => Ok(()),
            _ => Err(ClientError::Unexpected),
        }
    }

    /// Each event from now on, until the sandbox ends or `f` says stop.
    pub fn follow(self, mut f: impl FnMut(Event) -> bool) -> Result<(), ClientError> {
        protocol::send(self.sock.as_fd(), &Request::Follow, &[])?;
        loop {
            match protocol::receive::<Reply>(&self.sock) {
                Ok((Reply::Event(e), _)) => {
                    if !f(e) {
                        return Ok(());
                    }
                }
                Ok(_) => return Err(ClientError::Unexpected),
                Err(ProtocolError::Closed) => return Ok(()),
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Start a process with `stdio` (`[stdin, stdout, stderr]`; none when
    /// `req.tty`, whose terminal the sandbox opens); returns once it runs.
    pub fn exec(self, req: ExecRequest, stdio: &[BorrowedFd<'_>]) -> Result<Running, ClientError> {
        let fds: Vec<RawFd> = stdio.iter().map(|f| f.as_raw_fd()).collect();
        let tty = req.tty;
        protocol::send(self.sock.as_fd(), &Request::Exec(req), &fds)?;
        let (reply, mut got) = protocol::receive::<Reply>(&self.sock)?;
        match refusal(reply)? {
            Reply::Spawned { exec, pid } => {
                // A terminal's master side, checked to be one before any
                // byte of it is relayed.
                let master = match (tty, got.pop()) {
                    (true, Some(m)) if warden_jail::pty::is_terminal(m.as_fd()) => Some(m),
                    (true, _) => return Err(ClientError::Unexpected),
                    (false, _) => None,
                };
                Ok(Running {
                    conn: self,
                    exec,
                    pid,
                    master,
                })
            }
            Reply::Failed { status, message } => Err(ClientError::ExecFailed { status, message }),
            _ => Err(ClientError::Unexpected),
        }
    }

    /// Freeze the sandbox's processes in place; `by` says who asked, for
    /// the audit log.
    pub fn pause(self, by: &str) -> Result<(), ClientError> {
        self.pause_with(by, false)
    }

    /// Pause the sandbox, `to_disk`: its memory saved to its state and its
    /// RAM freed (a VM sandbox's).
    pub fn pause_with(self, by: &str, to_disk: bool) -> Result<(), ClientError> {
        let req = Request::Pause {
            by: by.to_string(),
            to_disk,
        };
        match self.ask_new(&req, "pause and resume")? {
            Reply::Ok => Ok(()),
            _ => Err(ClientError::Unexpected),
        }
    }

    /// Let a paused sandbox's processes go on.
    pub fn resume(self, by: &str) -> Result<(), ClientError> {
        let req = Request::Resume { by: by.to_string() };
        match self.ask_new(&req, "pause and resume")? {
            Reply::Ok => Ok(()),
            _ => Err(ClientError::Unexpected),
        }
    }
}

impl Connection {
    /// Give the sandbox its first process, to start with [`Connection::release`]
    /// (an OCI container's: `create` gives it, `start` starts it).
    pub fn hold(self, req: ExecRequest, stdio: &[BorrowedFd<'_>]) -> Result<(), ClientError> {
        let fds: Vec<RawFd> = stdio.iter().map(|f| f.as_raw_fd()).collect();
        match self.ask(&Request::Hold(req), &fds)? {
            Reply::Ok => Ok(()),
            _ => Err(ClientError::Unexpected),
        }
    }

    /// Hold a first process that has a terminal (`tty`, no descriptors):
    /// the terminal is opened in the sandbox now, and its master side
    /// returned, before the process starts.
    pub fn hold_with_terminal(self, req: ExecRequest) -> Result<OwnedFd, ClientError> {
        protocol::send(self.sock.as_fd(), &Request::Hold(req), &[])?;
        match protocol::receive::<Reply>(&self.sock)? {
            (Reply::Ok, mut got) => got
                .pop()
                .filter(|m| warden_jail::pty::is_terminal(m.as_fd()))
                .ok_or(ClientError::Unexpected),
            (Reply::Error { message }, _) => Err(ClientError::Refused(message)),
            (r @ Reply::Refused { .. }, _) => refusal(r).and(Err(ClientError::Unexpected)),
            _ => Err(ClientError::Unexpected),
        }
    }

    /// Start the held first process: its exec number, PID inside, and
    /// with a terminal its master side.
    pub fn release(self) -> Result<(u64, i32, Option<OwnedFd>), ClientError> {
        protocol::send(self.sock.as_fd(), &Request::Release, &[])?;
        let (reply, mut got) = protocol::receive::<Reply>(&self.sock)?;
        match reply {
            Reply::Spawned { exec, pid } => {
                let master = got
                    .pop()
                    .filter(|m| warden_jail::pty::is_terminal(m.as_fd()));
                Ok((exec, pid, master))
            }
            Reply::Error { message } => Err(ClientError::Refused(message)),
            // Busy, paused, ...: with its code, for the door to word.
            r @ Reply::Refused { .. } => refusal(r).and(Err(ClientError::Unexpected)),
            Reply::Failed { status, message } => Err(ClientError::ExecFailed { status, message }),
            _ => Err(ClientError::Unexpected),
        }
    }
}

/// A refusal still queued on a connection the supervisor reset: the
/// reset may be reported once more before it (after a failed send).
fn queued_refusal(sock: &OwnedFd) -> Option<Reply> {
    for _ in 0..2 {
        match protocol::receive::<Reply>(sock) {
            Ok((reply @ (Reply::Refused { .. } | Reply::Error { .. }), _)) => return Some(reply),
            Err(ProtocolError::Receive(Errno::ECONNRESET)) => continue,
            _ => return None,
        }
    }
    None
}

/// A supervisor's answer with its refusals as errors: an `Error` (a
/// message) or a `Refused` (a reason code, and the field it is about).
fn refusal(reply: Reply) -> Result<Reply, ClientError> {
    match reply {
        Reply::Error { message } => Err(ClientError::Refused(message)),
        Reply::Refused {
            code,
            message,
            field,
            reason,
        } => Err(ClientError::Rejected {
            code,
            message,
            field,
            reason: reason
                .as_ref()
                .and_then(crate::lifecycle::refusal::StartRefusal::from_wire),
        }),
        r => Ok(r),
    }
}

/// A process started by [`Connection::exec`].
pub struct Running {
    conn: Connection,
    pub exec: u64,
    /// Its PID inside the sandbox.
    pub pid: i32,
    /// With a terminal: its master side, to relay.
    master: Option<OwnedFd>,
}

/// How an exec ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExecStatus {
    /// As `warden run` maps it: the code, or 128+N for signal N.
    pub status: i32,
    pub signal: Option<i32>,
}

impl Running {
    /// The control connection, to wait on alongside other descriptors.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.conn.sock.as_fd()
    }

    /// With a terminal: its master side, taken to relay elsewhere.
    pub fn take_master(&mut self) -> Option<OwnedFd> {
        self.master.take()
    }

    /// Wait until the process ends.
    pub fn wait(self) -> Result<ExecStatus, ClientError> {
        match self.conn.next() {
            Ok(Reply::Exited { status, signal, .. }) => Ok(ExecStatus { status, signal }),
            // The supervisor went away: the sandbox, and the process, are gone.
            Err(ClientError::Protocol(ProtocolError::Closed)) => Ok(ExecStatus {
                status: 128 + libc::SIGKILL,
                signal: Some(libc::SIGKILL),
            }),
            Ok(_) => Err(ClientError::Unexpected),
            Err(e) => Err(e),
        }
    }
}

/// Wait until the supervisor with host PID `pid` has exited (the sandbox
/// is gone), for at most `timeout`; true when it has. A zombie that its
/// adopter has not reaped yet counts as gone.
pub fn wait_gone(pid: u32, timeout: std::time::Duration) -> bool {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        if crate::state::live_ticks(pid).is_none() {
            return true;
        }
        if std::time::Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
}

#[cfg(test)]
mod tests {
    // The tests remove their own temporary directories with std's removal.
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::disallowed_methods)]
    use super::*;

    /// A control socket at a fresh `dir/control.sock` of a supervisor
    /// played by the test, listening with `backlog`.
    fn played_supervisor(tag: &str, backlog: i32) -> (PathBuf, PathBuf, OwnedFd) {
        use nix::sys::socket::{
            bind, listen, socket, AddressFamily, Backlog, SockFlag, SockType, UnixAddr,
        };
        let dir = std::env::temp_dir().join(format!("warden-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("control.sock");
        let sock = socket(
            AddressFamily::Unix,
            SockType::SeqPacket,
            SockFlag::SOCK_CLOEXEC,
            None,
        )
        .unwrap();
        bind(sock.as_raw_fd(), &UnixAddr::new(&path).unwrap()).unwrap();
        listen(&sock, Backlog::new(backlog).unwrap()).unwrap();
        (dir, path, sock)
    }

    #[test]
    fn a_supervisor_that_predates_the_files_request_is_named_as_such() {
        let (dir, path, sock) = played_supervisor("old-sup", 1);
        // An old supervisor: hello, then a request it cannot parse, upon
        // which it closes the connection.
        let old = std::thread::spawn(move || {
            let conn = warden_jail::fdpass::accept(sock.as_fd()).unwrap();
            let _ = protocol::receive::<Request>(&conn).unwrap();
            let reply = Reply::Hello {
                version: VERSION,
                sandbox: "old".into(),
                pid: 1,
            };
            protocol::send(conn.as_fd(), &reply, &[]).unwrap();
            let mut buf = vec![0u8; protocol::MAX_MESSAGE];
            let _ = warden_jail::fdpass::recv(conn.as_fd(), &mut buf);
        });
        let conn = Connection::open(&path).unwrap();
        let op = warden_protocol::files::FileOp::Read { path: "a".into() };
        assert!(matches!(conn.file(op), Err(ClientError::FilesUnsupported)));
        old.join().unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_supervisor_that_never_answers_the_hello_is_said_to_be_stuck_in_bounded_time() {
        // Listening (the connection is queued) but never accepting: a
        // supervisor stopped by a signal.
        let (dir, path, _sock) = played_supervisor("stuck-sup", 4);
        let wait = std::time::Duration::from_millis(300);
        let start = std::time::Instant::now();
        let r = Connection::open_within(&path, wait);
        let took = start.elapsed();
        assert!(
            matches!(r, Err(ClientError::NotAnswering { .. })),
            "{:?}",
            r.err()
        );
        assert!(took >= wait && took < wait * 10, "{took:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
