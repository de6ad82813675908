//! The init once the sandbox runs: it reaps every process of the PID
//! namespace, forwards signals to the command (a one-shot run) or starts
//! what the supervisor asks for (a long-lived sandbox), answers published
//! ports' socket requests, and reports how the command ended.
//!
//! It never confines anything (every restriction was applied before) and
//! never outlives its supervisor: returning ends the init, and with it
//! every process left in the sandbox's PID namespace.

use crate::report::{write_report, Report};
use nix::sys::signal::Signal;
use nix::sys::signalfd::SignalFd;
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use std::os::fd::{AsRawFd, OwnedFd};

/// Answer one request on the socket channel with a fresh TCP socket of the
/// sandbox's namespace (or, when none can be made, a message without one);
/// false when the channel is gone.
fn serve_socket(channel: &OwnedFd) -> bool {
    let mut byte = [0u8; 1];
    match nix::sys::socket::recv(
        channel.as_raw_fd(),
        &mut byte,
        nix::sys::socket::MsgFlags::MSG_DONTWAIT,
    ) {
        Ok(0) => return false,
        Ok(_) | Err(nix::errno::Errno::EAGAIN) | Err(nix::errno::Errno::EINTR) => {}
        Err(_) => return false,
    }
    crate::sys::hand_out_socket(channel).is_ok()
}

/// The init's loop: reap every child, forward signals, and report the
/// command's status when it ends. Returning ends the init, and with it every
/// process left in the sandbox's PID namespace.
pub(super) fn supervise_command(
    command: Pid,
    pty: bool,
    sfd: SignalFd,
    report: &OwnedFd,
    mut sockets: Option<OwnedFd>,
) -> i32 {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    use std::os::fd::AsFd;
    loop {
        if let Some(channel) = &sockets {
            let mut fds = [
                PollFd::new(sfd.as_fd(), PollFlags::POLLIN),
                PollFd::new(channel.as_fd(), PollFlags::POLLIN),
            ];
            match poll(&mut fds, PollTimeout::NONE) {
                Ok(_) | Err(nix::errno::Errno::EINTR) => {}
                Err(_) => return 125,
            }
            let ready = |f: &PollFd| f.revents().is_some_and(|r| !r.is_empty());
            let (signal, request) = (ready(&fds[0]), ready(&fds[1]));
            if request && !serve_socket(channel) {
                sockets = None;
            }
            if !signal {
                continue;
            }
        }
        let info = match sfd.read_signal() {
            Ok(Some(info)) => info,
            Ok(None) => continue,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(_) => return 125,
        };
        let signo = info.ssi_signo as i32;
        if signo == libc::SIGCHLD {
            loop {
                match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
                    Ok(WaitStatus::Exited(pid, code)) if pid == command => {
                        write_report(report, &Report::Exited(code));
                        return 0;
                    }
                    Ok(WaitStatus::Signaled(pid, sig, _)) if pid == command => {
                        write_report(report, &Report::Signaled(sig as i32));
                        return 0;
                    }
                    Ok(WaitStatus::StillAlive) | Err(_) => break,
                    Ok(_) => continue,
                }
            }
        } else if let Ok(sig) = Signal::try_from(signo) {
            if info.ssi_code != libc::SI_KERNEL {
                // Sent with kill(2), e.g. forwarded by the supervisor: to
                // the command, as a process manager passes it on.
                let _ = nix::sys::signal::kill(command, sig);
            } else if !pty {
                // From the terminal the run was started at (Ctrl-C, a
                // hang-up): the command has a session of its own, so the
                // terminal's foreground group no longer holds it; passed to
                // its whole group, as the terminal would have. With a pty
                // the sandbox's own terminal signals it instead.
                let _ = nix::sys::signal::kill(Pid::from_raw(-command.as_raw()), sig);
            }
        }
    }
}

/// The init of a long-lived sandbox: starts what the supervisor asks for,
/// reaps every process, answers published ports' socket requests, and
/// returns when the supervisor ends the sandbox (or is gone).
pub(super) fn serve(
    server: &mut crate::spawn::Server<'_>,
    sfd: SignalFd,
    mut sockets: Option<OwnedFd>,
) {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    use std::os::fd::AsFd;
    // Drained below until empty: it must not block once it is.
    let _ = nix::fcntl::fcntl(
        &sfd,
        nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK),
    );
    loop {
        let mut fds = vec![
            PollFd::new(sfd.as_fd(), PollFlags::POLLIN),
            PollFd::new(server.channel.as_fd(), PollFlags::POLLIN),
        ];
        if let Some(c) = &sockets {
            fds.push(PollFd::new(c.as_fd(), PollFlags::POLLIN));
        }
        match poll(&mut fds, PollTimeout::NONE) {
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            Err(_) => return,
        }
        let ready = |i: usize| {
            fds.get(i)
                .and_then(|f| f.revents())
                .is_some_and(|r| !r.is_empty())
        };
        let (signal, request, socket) = (ready(0), ready(1), ready(2));
        drop(fds);
        if socket {
            if let Some(c) = &sockets {
                if !serve_socket(c) {
                    sockets = None;
                }
            }
        }
        if signal {
            while let Ok(Some(info)) = sfd.read_signal() {
                let signo = info.ssi_signo as i32;
                if signo != libc::SIGCHLD {
                    // A request to end, passed on by a supervisor that was
                    // told to. The kernel does not drop what the sandbox
                    // sends its PID 1 here (these signals are blocked, so
                    // they are queued for the signalfd): only a sender
                    // outside the sandbox's PID namespace (PID 0 as seen
                    // from it) or, degraded, the supervisor itself counts.
                    let from_supervisor = if server.degraded {
                        info.ssi_pid as i32 == nix::unistd::getppid().as_raw()
                    } else {
                        info.ssi_pid == 0
                    };
                    if info.ssi_code != libc::SI_KERNEL
                        && from_supervisor
                        && [libc::SIGTERM, libc::SIGINT, libc::SIGHUP, libc::SIGQUIT]
                            .contains(&signo)
                    {
                        end_gracefully();
                        return;
                    }
                    continue;
                }
                loop {
                    match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
                        Ok(WaitStatus::Exited(pid, code)) => {
                            server.on_exit(pid, |id| crate::spawn::FromInit::Exited { id, code })
                        }
                        Ok(WaitStatus::Signaled(pid, sig, _)) => {
                            server.on_exit(pid, |id| crate::spawn::FromInit::Signaled {
                                id,
                                signal: sig as i32,
                            })
                        }
                        Ok(WaitStatus::StillAlive) | Err(_) => break,
                        Ok(_) => continue,
                    }
                }
            }
        }
        if request && !server.on_request() {
            return;
        }
    }
}

/// SIGTERM to every other process of the sandbox, and up to a second for
/// them to go; returning then ends the rest.
fn end_gracefully() {
    let _ = nix::sys::signal::kill(Pid::from_raw(-1), Signal::SIGTERM);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1);
    while std::time::Instant::now() < deadline {
        match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
            Err(nix::errno::Errno::ECHILD) => return,
            Ok(WaitStatus::StillAlive) => std::thread::sleep(std::time::Duration::from_millis(10)),
            _ => {}
        }
    }
}
