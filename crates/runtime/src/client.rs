//! A caller of a sandbox's supervisor: connects to its control socket,
//! says hello, and asks one thing per connection. A process started here
//! gets the caller's own descriptors (its pipes, or a terminal the caller
//! relays), so that its output reaches the caller without a copy through
//! the supervisor.

use crate::protocol::{
    self, AskDecision, ExecRequest, PendingQuestion, Process, ProtocolError, Refusal, Reply,
    Request, Status, VERSION,
};
use nix::errno::Errno;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use warden_audit::Event;
use warden_policy::trust::Trust;

/// Why the supervisor could not be asked.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("the sandbox is not running (no supervisor listens on {path}); start it with `warden start`")]
    NotRunning {
        path: PathBuf,
        #[source]
        source: Errno,
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

impl Connection {
    /// Connect to the control socket at `path` and say hello.
    pub fn open(path: &Path) -> Result<Connection, ClientError> {
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
        protocol::send(sock.as_fd(), &Request::Hello { version: VERSION }, &[])?;
        match protocol::receive::<Reply>(&sock)?.0 {
            Reply::Hello { pid, .. } => Ok(Connection {
                sock,
                supervisor_pid: pid,
            }),
            Reply::Error { message } => Err(ClientError::Refused(message)),
            _ => Err(ClientError::Unexpected),
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
            Reply::Refused { message, .. } => Err(ClientError::Refused(message)),
            Reply::Failed { status, message } => Err(ClientError::ExecFailed { status, message }),
            _ => Err(ClientError::Unexpected),
        }
    }
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
        } => Err(ClientError::Rejected {
            code,
            message,
            field,
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

/// The signals [`wait_forwarding`] passes on.
fn forwarded_signals() -> nix::sys::signal::SigSet {
    use nix::sys::signal::{SigSet, Signal};
    let mut set = SigSet::empty();
    for s in [
        Signal::SIGINT,
        Signal::SIGTERM,
        Signal::SIGHUP,
        Signal::SIGQUIT,
    ] {
        set.add(s);
    }
    set
}

/// Hold the signals [`wait_forwarding`] passes on from now, so that one
/// that comes between the exec and the wait is passed on too (call before
/// [`Connection::exec`]).
pub fn hold_forwarded_signals() -> Result<(), ClientError> {
    nix::sys::signal::pthread_sigmask(
        nix::sys::signal::SigmaskHow::SIG_BLOCK,
        Some(&forwarded_signals()),
        None,
    )
    .map_err(ClientError::Terminal)
}

/// The caller's standard streams as an exec without a terminal gets them.
/// One that is a terminal is never handed over: it would stay in the
/// sandbox after `warden exec` returns, in whatever the command left
/// running, which could then read what the person types at their next
/// prompt (a password) and write to their screen (a fake prompt), and no
/// job control would stop it (the terminal is not its controlling one). It
/// gets a pipe instead, relayed by [`wait_forwarding`] while the exec runs
/// and closed when it ends. Pipes and files are handed over as they are.
pub struct CallerStdio {
    /// What the process gets: its stdin, stdout and stderr.
    give: Vec<OwnedFd>,
    relay: Relay,
}

/// The caller's terminal relayed to and from an exec's pipes.
#[derive(Default)]
pub struct Relay {
    /// The pipe to the process's stdin, when the caller's is a terminal.
    input: Option<OwnedFd>,
    /// Read from the terminal, not yet taken by the process.
    pending: Vec<u8>,
    /// Pipes from the process, each with the caller's stream it goes to.
    outputs: Vec<(OwnedFd, i32)>,
}

impl CallerStdio {
    pub fn new() -> Result<CallerStdio, ClientError> {
        let stdin = std::io::stdin();
        let stdout = std::io::stdout();
        let stderr = std::io::stderr();
        let streams = [stdin.as_fd(), stdout.as_fd(), stderr.as_fd()];
        let mut give: Vec<OwnedFd> = Vec::with_capacity(3);
        let mut relay = Relay::default();
        let io = |e: std::io::Error| {
            ClientError::Terminal(Errno::from_raw(e.raw_os_error().unwrap_or(0)))
        };
        let device = |fd: BorrowedFd<'_>| nix::sys::stat::fstat(fd).ok().map(|s| s.st_rdev);
        for (n, fd) in streams.into_iter().enumerate() {
            if !warden_jail::pty::is_terminal(fd) {
                give.push(fd.try_clone_to_owned().map_err(io)?);
                continue;
            }
            // stderr on the same terminal as stdout: the same pipe, so
            // that what the process writes to both keeps its order.
            if n == 2 && relay.outputs.len() == 1 && device(fd) == device(streams[1]) {
                give.push(give[1].try_clone().map_err(io)?);
                continue;
            }
            let (read, write) =
                nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(ClientError::Terminal)?;
            // Our ends never block the relay.
            let ours = if n == 0 { &write } else { &read };
            nix::fcntl::fcntl(
                ours,
                nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK),
            )
            .map_err(ClientError::Terminal)?;
            if n == 0 {
                give.push(read);
                relay.input = Some(write);
            } else {
                give.push(write);
                relay.outputs.push((read, n as i32));
            }
        }
        Ok(CallerStdio { give, relay })
    }

    /// The descriptors to pass with the exec.
    pub fn fds(&self) -> Vec<BorrowedFd<'_>> {
        self.give.iter().map(|f| f.as_fd()).collect()
    }

    /// Once the exec is asked for: our copies of its ends go, the relay
    /// stays.
    pub fn into_relay(self) -> Relay {
        self.relay
    }
}

impl Relay {
    fn poll_fds<'a>(
        &'a self,
        stdin: BorrowedFd<'a>,
    ) -> Vec<(BorrowedFd<'a>, nix::poll::PollFlags)> {
        use nix::poll::PollFlags;
        let mut fds = Vec::new();
        if let Some(input) = &self.input {
            if self.pending.is_empty() {
                fds.push((stdin, PollFlags::POLLIN));
            } else {
                fds.push((input.as_fd(), PollFlags::POLLOUT));
            }
        }
        for (pipe, _) in &self.outputs {
            fds.push((pipe.as_fd(), PollFlags::POLLIN));
        }
        fds
    }

    /// Move what is ready (`ready`: for each of [`Relay::poll_fds`], in
    /// order), never blocking on the caller's terminal nor on the process.
    fn pump(&mut self, ready: &[bool], buf: &mut [u8]) {
        let mut ready = ready.iter().copied();
        if let Some(input) = &self.input {
            if !ready.next().unwrap_or(false) {
                // Nothing to move this time.
            } else if self.pending.is_empty() {
                match nix::unistd::read(std::io::stdin().as_fd(), buf) {
                    Ok(0) => self.input = None,
                    Ok(n) => self.pending.extend_from_slice(&buf[..n]),
                    Err(Errno::EINTR) | Err(Errno::EAGAIN) => {}
                    Err(_) => self.input = None,
                }
            } else {
                match nix::unistd::write(input, &self.pending) {
                    Ok(n) => {
                        self.pending.drain(..n);
                    }
                    Err(Errno::EINTR) | Err(Errno::EAGAIN) => {}
                    Err(_) => self.input = None,
                }
            }
        }
        self.outputs.retain(|(pipe, to)| {
            if !ready.next().unwrap_or(false) {
                return true;
            }
            match nix::unistd::read(pipe, buf) {
                Ok(0) => false,
                Ok(n) => {
                    to_caller(*to, &buf[..n]);
                    true
                }
                Err(Errno::EINTR) | Err(Errno::EAGAIN) => true,
                Err(_) => false,
            }
        });
    }

    /// The process has ended: what it wrote is passed on, as much as each
    /// pipe holds (whatever it left behind may write for ever), then every
    /// pipe is closed; the terminal is not read any more.
    fn finish(mut self, buf: &mut [u8]) {
        self.input = None;
        for (pipe, to) in &self.outputs {
            let mut left = nix::fcntl::fcntl(pipe, nix::fcntl::FcntlArg::F_GETPIPE_SZ)
                .map_or(65536, |n| n.max(0) as usize);
            while left > 0 {
                let want = buf.len().min(left);
                match nix::unistd::read(pipe, &mut buf[..want]) {
                    Ok(n) if n > 0 => {
                        left -= n;
                        to_caller(*to, &buf[..n]);
                    }
                    _ => break,
                }
            }
        }
    }
}

/// What a terminal holds at most (a PTY's buffers: about 20 KiB), drained
/// from one whose process has ended.
const TERMINAL_HOLDS: usize = 64 * 1024;

/// Write to the caller's stdout (1) or stderr (2).
fn to_caller(stream: i32, data: &[u8]) {
    if stream == 1 {
        write_all(std::io::stdout().as_fd(), data);
    } else {
        write_all(std::io::stderr().as_fd(), data);
    }
}

/// Wait until the process ends, passing on to it (and its process group)
/// the signals that would end the caller: SIGINT, SIGTERM, SIGHUP,
/// SIGQUIT (a Ctrl-C with pipes, a `kill` of the caller), and relaying the
/// caller's terminal through `relay` (see [`CallerStdio`]). `control` is
/// the supervisor's socket, reached anew for each signal.
pub fn wait_forwarding(
    running: Running,
    control: &Path,
    mut relay: Relay,
) -> Result<ExecStatus, ClientError> {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    use nix::sys::signal::{SigSet, SigmaskHow};
    use nix::sys::signalfd::{SfdFlags, SignalFd};
    let set = forwarded_signals();
    let mut old = SigSet::empty();
    nix::sys::signal::pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&set), Some(&mut old))
        .map_err(ClientError::Terminal)?;
    let sfd = SignalFd::with_flags(&set, SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK)
        .map_err(ClientError::Terminal)?;
    let exec = running.exec;
    let mut buf = vec![0u8; 16384];
    let stdin = std::io::stdin();
    loop {
        let mut fds = vec![
            PollFd::new(running.fd(), PollFlags::POLLIN),
            PollFd::new(sfd.as_fd(), PollFlags::POLLIN),
        ];
        fds.extend(
            relay
                .poll_fds(stdin.as_fd())
                .into_iter()
                .map(|(fd, f)| PollFd::new(fd, f)),
        );
        match poll(&mut fds, PollTimeout::NONE) {
            Ok(_) | Err(Errno::EINTR) => {}
            Err(e) => return Err(ClientError::Terminal(e)),
        }
        let ready: Vec<bool> = fds
            .iter()
            .map(|f| f.revents().is_some_and(|r| !r.is_empty()))
            .collect();
        drop(fds);
        let (done, signalled) = (ready[0], ready[1]);
        if ready[2..].iter().any(|r| *r) {
            relay.pump(&ready[2..], &mut buf);
        }
        if signalled {
            while let Ok(Some(info)) = sfd.read_signal() {
                if let Ok(c) = Connection::open(control) {
                    let _ = c.signal(exec, info.ssi_signo as i32);
                }
            }
        }
        if done {
            relay.finish(&mut buf);
            let _ = nix::sys::signal::pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&old), None);
            return running.wait();
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

/// Relay the caller's terminal to a process started with a terminal whose
/// master is `master`, until the process ends; the caller's terminal is in
/// raw mode meanwhile, and its window size follows the caller's.
pub fn relay_terminal(mut running: Running) -> Result<ExecStatus, ClientError> {
    let Some(master) = running.master.take() else {
        return Err(ClientError::Unexpected);
    };
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    use nix::sys::signal::{SigSet, SigmaskHow, Signal};
    use nix::sys::signalfd::{SfdFlags, SignalFd};
    let stdin = std::io::stdin();
    let stdout = std::io::stdout();
    warden_jail::pty::copy_window_size(stdin.as_fd(), master.as_fd());
    let mut winch = SigSet::empty();
    winch.add(Signal::SIGWINCH);
    nix::sys::signal::pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&winch), None)
        .map_err(ClientError::Terminal)?;
    let sfd = SignalFd::with_flags(&winch, SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK)
        .map_err(ClientError::Terminal)?;
    let raw = warden_jail::pty::RawMode::enable().ok().flatten();
    let mut stdin_open = true;
    let mut master_open = true;
    let mut buf = vec![0u8; 16384];
    let result = loop {
        let mut fds = vec![
            PollFd::new(running.fd(), PollFlags::POLLIN),
            PollFd::new(sfd.as_fd(), PollFlags::POLLIN),
        ];
        if master_open {
            fds.push(PollFd::new(master.as_fd(), PollFlags::POLLIN));
        }
        if stdin_open && master_open {
            fds.push(PollFd::new(stdin.as_fd(), PollFlags::POLLIN));
        }
        match poll(&mut fds, PollTimeout::NONE) {
            Ok(_) | Err(Errno::EINTR) => {}
            Err(e) => break Err(ClientError::Terminal(e)),
        }
        let ready: Vec<bool> = fds
            .iter()
            .map(|f| f.revents().is_some_and(|r| !r.is_empty()))
            .collect();
        drop(fds);
        if ready.get(1) == Some(&true) {
            while let Ok(Some(_)) = sfd.read_signal() {}
            warden_jail::pty::copy_window_size(stdin.as_fd(), master.as_fd());
        }
        if master_open && ready.get(2) == Some(&true) {
            match nix::unistd::read(&master, &mut buf) {
                Ok(0) | Err(Errno::EIO) => master_open = false,
                Ok(n) => write_all(stdout.as_fd(), &buf[..n]),
                Err(Errno::EINTR) | Err(Errno::EAGAIN) => {}
                Err(_) => master_open = false,
            }
        }
        if stdin_open && master_open && ready.get(3) == Some(&true) {
            match nix::unistd::read(stdin.as_fd(), &mut buf) {
                Ok(0) => stdin_open = false,
                Ok(n) => write_all(master.as_fd(), &buf[..n]),
                Err(Errno::EINTR) | Err(Errno::EAGAIN) => {}
                Err(_) => stdin_open = false,
            }
        }
        if ready.first() == Some(&true) {
            // The process ended: what it wrote last is drained, as much
            // as a terminal holds (a process it left on the terminal may
            // write for ever).
            let _ = nix::fcntl::fcntl(
                &master,
                nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK),
            );
            let mut left = TERMINAL_HOLDS;
            while master_open && left > 0 {
                let want = buf.len().min(left);
                match nix::unistd::read(&master, &mut buf[..want]) {
                    Ok(n) if n > 0 => {
                        left -= n;
                        write_all(stdout.as_fd(), &buf[..n]);
                    }
                    _ => master_open = false,
                }
            }
            break running.wait();
        }
    };
    drop(raw);
    result
}

fn write_all(fd: BorrowedFd<'_>, mut data: &[u8]) {
    while !data.is_empty() {
        match nix::unistd::write(fd, data) {
            Ok(n) => data = &data[n..],
            Err(Errno::EINTR) | Err(Errno::EAGAIN) => continue,
            Err(_) => return,
        }
    }
}

/// Give the terminal of a process started with `tty` (its master side, as
/// `spawned` handed it over) a new size, rows and columns: the process
/// inside gets SIGWINCH. For callers that relay a terminal themselves (the
/// daemon's terminal sessions and the E2B door).
pub fn resize_terminal(master: BorrowedFd<'_>, rows: u16, cols: u16) {
    warden_jail::pty::set_window_size(master, rows, cols);
}

#[cfg(test)]
mod tests {
    // The tests remove their own temporary directories with std's removal.
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::disallowed_methods)]
    use super::*;

    #[test]
    fn a_supervisor_that_predates_the_files_request_is_named_as_such() {
        use nix::sys::socket::{
            bind, listen, socket, AddressFamily, Backlog, SockFlag, SockType, UnixAddr,
        };
        let dir = std::env::temp_dir().join(format!("warden-old-sup-{}", std::process::id()));
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
        listen(&sock, Backlog::new(1).unwrap()).unwrap();
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
}
