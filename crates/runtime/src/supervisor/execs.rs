//! Processes in the sandbox: execs, the held first process, and the
//! init's notices about each.

use super::inside::open_terminal;
use super::{stop, Main, Notices, Shared, Slot, CALLER_CHECK};
use crate::output::Drain;
use crate::protocol::{self, ExecRequest, Reply};
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::Ordering;
use std::sync::mpsc::{sync_channel, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};
use warden_audit::{EventKind, StopReason};
use warden_jail::spawn;
use warden_protocol::spawn::{FromInit, ToInit};

/// How long the end of an exec whose output is kept waits for its relays
/// to take the last of it (longer only when something it started keeps
/// its output open).
const DRAIN_WAIT: Duration = Duration::from_secs(2);

pub(super) fn exec(
    shared: &Arc<Shared>,
    conn: &OwnedFd,
    r: ExecRequest,
    fds: Vec<OwnedFd>,
) -> Result<(), protocol::ProtocolError> {
    let reply = |m: &Reply| protocol::send(conn.as_fd(), m, &[]);
    let (id, rx, drain) = match launch(shared, r, fds, None) {
        Ok(started) => started,
        Err(message) => return reply(&Reply::Error { message }),
    };
    loop {
        let (notice, master) = match rx.recv_timeout(CALLER_CHECK) {
            Ok(n) => n,
            // A caller that left holds no slot while its process runs on
            // (256 detached execs refused every later request, `stop` too).
            Err(RecvTimeoutError::Timeout) if caller_gone(conn) => break,
            Err(RecvTimeoutError::Timeout) => continue,
            Err(RecvTimeoutError::Disconnected) => break,
        };
        let (m, done) = match answer(id, notice) {
            Some(a) => a,
            None => continue,
        };
        // Its end is told once what it wrote is in its files (its caller
        // reads them next).
        if let (true, Some(drain)) = (done, &drain) {
            drain.wait(DRAIN_WAIT);
        }
        // A terminal's master side goes to the caller with `spawned`.
        let fds: Vec<RawFd> = master.iter().map(|m| m.as_raw_fd()).collect();
        if protocol::send(conn.as_fd(), &m, &fds).is_err() || done {
            break;
        }
    }
    Ok(())
}

/// The caller's answer to one of the init's notices about exec `id`, and
/// whether it is the last.
fn answer(id: u64, notice: FromInit) -> Option<(Reply, bool)> {
    Some(match notice {
        FromInit::Spawned { pid, .. } => (Reply::Spawned { exec: id, pid }, false),
        FromInit::FileDone { .. } => return None,
        FromInit::Failed { errno, .. } => (
            Reply::Failed {
                status: if errno == libc::ENOENT { 127 } else { 126 },
                message: if errno == libc::ENOENT {
                    "command not found in the sandbox".into()
                } else {
                    format!(
                        "cannot execute: {}",
                        nix::errno::Errno::from_raw(errno).desc()
                    )
                },
            },
            true,
        ),
        FromInit::Exited { code, .. } => (
            Reply::Exited {
                exec: id,
                status: code,
                signal: None,
            },
            true,
        ),
        FromInit::Signaled { signal, .. } => (
            Reply::Exited {
                exec: id,
                status: signal_status(signal),
                signal: signal_number(signal),
            },
            true,
        ),
    })
}

/// Keep the sandbox's first process until `release`.
pub(super) fn hold(
    shared: &Arc<Shared>,
    conn: &OwnedFd,
    r: ExecRequest,
    fds: Vec<OwnedFd>,
) -> Result<(), protocol::ProtocolError> {
    let reply = |m: &Reply| protocol::send(conn.as_fd(), m, &[]);
    if let Err(message) = check_exec(shared, &r, fds.len()) {
        return reply(&Reply::Error { message });
    }
    let Ok(mut main) = shared.main.lock() else {
        return reply(&Reply::Error {
            message: "the supervisor's record of the first process is unusable".into(),
        });
    };
    if !matches!(*main, Main::None) {
        return reply(&Reply::Error {
            message: "this sandbox already has its first process".into(),
        });
    }
    // A terminal is opened now, in the sandbox's devpts, so that its
    // master side can be handed out before the process starts.
    let (terminal, master) = if r.tty {
        match open_terminal(shared, r.winsize) {
            Ok((id, master)) => (Some(id), Some(master)),
            Err(message) => return reply(&Reply::Error { message }),
        }
    } else {
        (None, None)
    };
    *main = Main::Held(r, fds, terminal);
    drop(main);
    let fds: Vec<RawFd> = master.iter().map(|m| m.as_raw_fd()).collect();
    protocol::send(conn.as_fd(), &Reply::Ok, &fds)
}

/// Start the held first process; its end ends the sandbox.
pub(super) fn release(shared: &Arc<Shared>, conn: &OwnedFd) -> Result<(), protocol::ProtocolError> {
    let reply = |m: &Reply, fds: &[RawFd]| protocol::send(conn.as_fd(), m, fds);
    let Ok(mut main) = shared.main.lock() else {
        return reply(
            &Reply::Error {
                message: "the supervisor's record of the first process is unusable".into(),
            },
            &[],
        );
    };
    let (r, fds, terminal) = match std::mem::replace(&mut *main, Main::None) {
        Main::Held(r, fds, terminal) => (r, fds, terminal),
        other => {
            let message = match &other {
                Main::None => "this sandbox holds no first process to start",
                Main::Running { .. } => "the first process was started already",
                Main::Exited(_) | Main::Held(..) => "the first process has ended",
            };
            *main = other;
            return reply(
                &Reply::Error {
                    message: message.into(),
                },
                &[],
            );
        }
    };
    let (id, rx, _) = match launch(shared, r, fds, terminal) {
        Ok(started) => started,
        Err(message) => {
            *main = Main::Exited(126);
            drop(main);
            end_main(shared, 126);
            return reply(&Reply::Error { message }, &[]);
        }
    };
    // The first notice says whether it runs; the lock is held until then
    // so that a `status` never sees it neither held nor running.
    let (notice, master) = match rx.recv() {
        Ok(n) => n,
        Err(_) => (
            FromInit::Signaled {
                id,
                signal: libc::SIGKILL,
            },
            None,
        ),
    };
    let fds: Vec<RawFd> = master.iter().map(|m| m.as_raw_fd()).collect();
    if let FromInit::Spawned { pid, .. } = notice {
        *main = Main::Running { exec: id, pid };
        drop(main);
        let s = shared.clone();
        let _ = std::thread::Builder::new()
            .name("warden-main".into())
            .spawn(move || {
                let status = loop {
                    match rx.recv() {
                        Ok((n, _)) => match answer(id, n) {
                            Some((Reply::Exited { status, .. }, _)) => break status,
                            Some((Reply::Failed { status, .. }, _)) => break status,
                            _ => continue,
                        },
                        Err(_) => break 128 + libc::SIGKILL,
                    }
                };
                end_main(&s, status);
            });
        return reply(&Reply::Spawned { exec: id, pid }, &fds);
    }
    let (m, _) = answer(id, notice).unwrap_or((
        Reply::Error {
            message: "the first process did not start".into(),
        },
        true,
    ));
    let status = match &m {
        Reply::Failed { status, .. } | Reply::Exited { status, .. } => *status,
        _ => 126,
    };
    *main = Main::Exited(status);
    drop(main);
    end_main(shared, status);
    reply(&m, &[])
}

/// The first process ended with `status`: so does the sandbox, at once
/// (as a container's PID 1 ending takes its PID namespace with it).
fn end_main(shared: &Arc<Shared>, status: i32) {
    if let Ok(mut main) = shared.main.lock() {
        *main = Main::Exited(status);
    }
    if let Ok(mut s) = shared.main_status.lock() {
        *s = Some(status);
    }
    stop(shared, StopReason::Requested, Duration::ZERO);
}

/// Why an exec cannot be started as asked, if it cannot.
fn check_exec(shared: &Shared, r: &ExecRequest, fds: usize) -> Result<(), String> {
    if shared.stopping.load(Ordering::Relaxed) {
        return Err("the sandbox is stopping".into());
    }
    // A secret's variable holds its placeholder; an exec does not put
    // something else there (a value would be sent nowhere it should not,
    // but it would be in the sandbox), as `run --env` does not.
    if let Some((k, _)) = r.env.iter().find(|(k, _)| shared.secret_names.contains(k)) {
        return Err(format!(
            "{k} holds a secret's placeholder in this sandbox; an exec cannot set it"
        ));
    }
    if r.argv.is_empty() {
        return Err("no command to run: give one after --".into());
    }
    // Pipes come from the caller; a terminal is opened in the sandbox.
    let wanted = if r.tty { 0 } else { 3 };
    if fds != wanted {
        return Err(format!(
            "an exec {} descriptors, {} came",
            if r.tty {
                "with a terminal takes no"
            } else {
                "needs 3 (stdin, stdout, stderr)"
            },
            fds
        ));
    }
    Ok(())
}

/// Start a process in the sandbox; returns its exec number, where the
/// init's notices about it arrive, and (when its output is kept) what
/// tells when its output relays have taken all it wrote.
fn launch(
    shared: &Arc<Shared>,
    r: ExecRequest,
    fds: Vec<OwnedFd>,
    terminal: Option<u64>,
) -> Result<(u64, Notices, Option<Drain>), String> {
    check_exec(shared, &r, fds.len())?;
    // Numbered first: a kept output's record names its exec.
    let id = shared.next_exec.fetch_add(1, Ordering::Relaxed);
    let (fds, drain) = match (&r.keep_output, r.tty) {
        (Some(kept), false) => {
            let (fds, drain) = relay_output(shared, kept, id, &r.argv, fds)?;
            (fds, Some(drain))
        }
        _ => (fds, None),
    };
    let (tx, rx) = sync_channel(4);
    if let Ok(mut execs) = shared.execs.lock() {
        execs.insert(
            id,
            Slot {
                argv: r.argv.clone(),
                pid: None,
                tty: r.tty,
                started: Instant::now(),
                waiter: Some(tx),
            },
        );
    }
    let raw: Vec<RawFd> = fds.iter().map(|f| f.as_raw_fd()).collect();
    let sent = spawn::send(
        shared.channel.as_fd(),
        &ToInit::Spawn {
            id,
            argv: r.argv,
            env: r.env,
            cwd: r.cwd,
            tty: r.tty,
            winsize: r.winsize,
            terminal,
        },
        &raw,
    );
    // The process holds its own copies now; ours would keep the caller's
    // pipes open after it ends.
    drop(fds);
    if let Err(e) = sent {
        if let Ok(mut execs) = shared.execs.lock() {
            execs.remove(&id);
        }
        return Err(warden_jail::chain_str(&e));
    }
    Ok((id, rx, drain))
}

/// An exec's stdin as it came, and its stdout and stderr (files its caller
/// keeps) replaced by pipes to relays that keep them within the sandbox's
/// output budget.
fn relay_output(
    shared: &Shared,
    kept: &str,
    exec: u64,
    argv: &[String],
    fds: Vec<OwnedFd>,
) -> Result<(Vec<OwnedFd>, Drain), String> {
    let mut fds = fds.into_iter();
    let (Some(stdin), Some(out), Some(err)) = (fds.next(), fds.next(), fds.next()) else {
        return Err("an exec whose output is kept needs 3 descriptors".into());
    };
    let ([out, err], drain) = shared.output.relay(kept, exec, argv, [out, err])?;
    Ok((vec![stdin, out, err], drain))
}

/// Whether the caller has closed its end of `conn` (it sends nothing after
/// its request).
pub(super) fn caller_gone(conn: &OwnedFd) -> bool {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    let mut fds = [PollFd::new(conn.as_fd(), PollFlags::POLLIN)];
    poll(&mut fds, PollTimeout::ZERO).is_ok()
        && fds[0]
            .revents()
            .is_some_and(|r| r.intersects(PollFlags::POLLHUP | PollFlags::POLLERR))
}

/// Read the init's notices: record each exec's start and end, and tell the
/// caller waiting for it.
pub(super) fn read_notices(shared: &Arc<Shared>) {
    while let Ok(Some((notice, master))) = spawn::receive(shared.channel.as_fd()) {
        shared.activity.fetch_add(1, Ordering::SeqCst);
        if let FromInit::FileDone { id, errno } = notice {
            let waiter = shared.files.lock().ok().and_then(|mut f| f.remove(&id));
            if let Some(w) = waiter {
                let _ = w.try_send((errno, master));
            }
            continue;
        }
        // A command that died of the stop at the sandbox's --timeout (the
        // stop signals every process, and the init may tell of this one's
        // death before its own end) ended at the deadline: 124, as `warden
        // run` and the commands still running when the init goes end.
        let notice = match notice {
            FromInit::Signaled { id, .. } if shared.timed_out.load(Ordering::SeqCst) => {
                FromInit::Exited { id, code: 124 }
            }
            other => other,
        };
        let Ok(mut execs) = shared.execs.lock() else {
            break;
        };
        let id = match &notice {
            FromInit::FileDone { id, .. } => *id,
            FromInit::Spawned { id, .. }
            | FromInit::Failed { id, .. }
            | FromInit::Exited { id, .. }
            | FromInit::Signaled { id, .. } => *id,
        };
        let Some(slot) = execs.get_mut(&id) else {
            continue;
        };
        match &notice {
            FromInit::Spawned { pid, .. } => {
                slot.pid = Some(*pid);
                shared.bus.emit(EventKind::ExecStarted {
                    exec: id,
                    argv: slot.argv.clone(),
                    pid: *pid,
                    tty: slot.tty,
                })
            }
            other => {
                let (status, signal) = match other {
                    FromInit::Failed { errno, .. } => {
                        (if *errno == libc::ENOENT { 127 } else { 126 }, None)
                    }
                    FromInit::Exited { code, .. } => (*code, None),
                    FromInit::Signaled { signal, .. } => {
                        (signal_status(*signal), signal_number(*signal))
                    }
                    FromInit::Spawned { .. } | FromInit::FileDone { .. } => (0, None),
                };
                // What the command was denied, repeats counted, is in the
                // log before its end.
                shared.bus.end_window();
                shared.bus.emit(EventKind::ExecExited {
                    exec: id,
                    status,
                    signal,
                    duration_ms: slot.started.elapsed().as_millis() as u64,
                });
            }
        }
        let ended = !matches!(notice, FromInit::Spawned { .. });
        if let Some(w) = &slot.waiter {
            if ended {
                // Whoever is told of the end may read the log next: the
                // exit is written there first (outside the table's lock).
                let w = w.clone();
                execs.remove(&id);
                drop(execs);
                shared.bus.written();
                let _ = w.try_send((notice.clone(), master));
                end_of_one_shot(shared, id);
                continue;
            }
            if w.try_send((notice.clone(), master)).is_err() {
                slot.waiter = None;
            }
        }
        if ended {
            execs.remove(&id);
            drop(execs);
            end_of_one_shot(shared, id);
        }
    }
    shared.init_gone.store(true, Ordering::SeqCst);
    // What the supervisor does from here to its exit, said in its record
    // for a caller waiting for the sandbox to stop.
    shared.record.stop_phase(if shared.keeps {
        crate::state::StopPhase::Saving
    } else {
        crate::state::StopPhase::Closing
    });
    // The init is gone, and every process with it: killed, or (at the
    // sandbox's --timeout) timed out, 124 as for `warden run`.
    let timed_out = shared.timed_out.load(Ordering::SeqCst);
    if let Ok(mut execs) = shared.execs.lock() {
        for (id, slot) in execs.drain() {
            let (status, signal) = if timed_out {
                (124, None)
            } else {
                (128 + libc::SIGKILL, Some(libc::SIGKILL))
            };
            shared.bus.emit(EventKind::ExecExited {
                exec: id,
                status,
                signal,
                duration_ms: slot.started.elapsed().as_millis() as u64,
            });
            if let Some(w) = slot.waiter {
                let notice = if timed_out {
                    FromInit::Exited { id, code: 124 }
                } else {
                    FromInit::Signaled {
                        id,
                        signal: libc::SIGKILL,
                    }
                };
                let _ = w.try_send((notice, None));
            }
        }
    }
}

/// After command `id` ended: in a detached run, the end of its first
/// command is the end of its sandbox (what it left behind gets a moment
/// to finish).
fn end_of_one_shot(shared: &Arc<Shared>, id: u64) {
    if shared.one_shot && id == 1 {
        let s = shared.clone();
        let _ = std::thread::Builder::new()
            .name("warden-one-shot".into())
            .spawn(move || stop(&s, StopReason::Requested, Duration::from_secs(2)));
    }
}

/// Starts a desktop's programs as execs of the sandbox.
pub(super) struct DesktopLauncher(pub(super) Arc<Shared>);

impl crate::desktop::services::Launcher for DesktopLauncher {
    fn launch(
        &self,
        argv: Vec<String>,
        stdio: [OwnedFd; 3],
    ) -> Result<(i32, crate::desktop::services::Ending), String> {
        let req = ExecRequest {
            argv,
            env: Vec::new(),
            cwd: None,
            tty: false,
            winsize: None,
            keep_output: None,
        };
        let (id, rx, _) = launch(&self.0, req, stdio.into(), None)?;
        let ended = |n: &FromInit| match n {
            FromInit::Exited { code, .. } => Some(*code),
            FromInit::Signaled { signal, .. } => Some(signal_status(*signal)),
            _ => None,
        };
        match rx.recv() {
            Ok((FromInit::Spawned { pid, .. }, _)) => Ok((
                pid,
                Box::new(move || loop {
                    match rx.recv() {
                        Ok((n, _)) => {
                            if let Some(status) = ended(&n) {
                                return status;
                            }
                        }
                        Err(_) => return 128 + libc::SIGKILL,
                    }
                }),
            )),
            Ok((FromInit::Failed { errno, .. }, _)) => Err(format!(
                "exec {id} cannot start: {}",
                nix::errno::Errno::from_raw(errno).desc()
            )),
            Ok((n, _)) => Err(format!(
                "exec {id} ended before it ran (status {})",
                ended(&n).unwrap_or(-1)
            )),
            Err(_) => Err("the sandbox is gone".into()),
        }
    }

    fn stopping(&self) -> bool {
        self.0.stopping.load(Ordering::SeqCst) || self.0.init_gone.load(Ordering::SeqCst)
    }
}

/// The signals a Linux process can end by; a number outside them (from a
/// VM guest's relay, or any init that is not the jail's) is malformed.
const SIGNALS: std::ops::RangeInclusive<i32> = 1..=64;

/// The signal an exec ended by, when it is one (see [`SIGNALS`]).
fn signal_number(signal: i32) -> Option<i32> {
    SIGNALS.contains(&signal).then_some(signal)
}

/// The shell's status for an exec ended by `signal`: 128 + it, or 255
/// for a malformed number (never an overflow of `128 + signal`).
fn signal_status(signal: i32) -> i32 {
    signal_number(signal).map_or(255, |s| 128 + s)
}

#[cfg(test)]
mod signal_tests {
    use super::*;

    #[test]
    fn a_signal_outside_1_to_64_is_malformed_and_never_overflows() {
        assert_eq!(signal_status(9), 137);
        assert_eq!(signal_status(64), 192);
        for forged in [i32::MAX, i32::MIN, 0, -1, 65] {
            assert_eq!(signal_number(forged), None);
            assert_eq!(signal_status(forged), 255);
        }
    }
}
