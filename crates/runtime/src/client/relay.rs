//! The caller's side of a process started through the supervisor: its
//! standard streams relayed while the process runs (pipes in place of a
//! terminal the caller must never hand over, or the caller's terminal
//! relayed to the process's own), and the signals that would end the
//! caller passed on to it.
//!
//! This file never asks the supervisor anything but a signal for the
//! process (through [`Connection`]); it starts nothing and reads nothing
//! of the sandbox's.

use nix::errno::Errno;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;

use super::{ClientError, Connection, ExecStatus, Running};

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
