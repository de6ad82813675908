//! The control socket: who may connect, and each request served.

use super::execs::{caller_gone, exec, hold, release};
use super::inside::{connect, file_op};
use super::{connection_bound, pause, stop, Main, Shared, SuperviseError, CALLER_CHECK, KEPT_BACK};
use crate::events::NotWritten;
use crate::procs::{descendants, processes};
use crate::protocol::{self, MainState, Process, Refusal, Reply, Request, Status, VERSION};
use crate::state;
use std::collections::HashMap;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::mpsc::RecvTimeoutError;
use std::sync::Arc;
use std::time::Duration;
use warden_audit::{EventKind, StopReason, WorkspaceAction};
use warden_jail::spawn;
use warden_protocol::spawn::ToInit;

/// The control socket: owner-only, in the sandbox's own directory.
pub(super) fn listen(path: &Path) -> Result<OwnedFd, SuperviseError> {
    use nix::sys::socket::{listen, Backlog, SockFlag, SockType};
    let err = |source| SuperviseError::Listen {
        path: path.to_path_buf(),
        source,
    };
    let _ = std::fs::remove_file(path);
    // Bound through the state directory's descriptor when its path is
    // longer than a socket's address holds (`warden_jail::sockname`).
    let old = nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o077));
    let bound = warden_jail::sockname::bind(path, SockType::SeqPacket, SockFlag::SOCK_CLOEXEC);
    nix::sys::stat::umask(old);
    let fd = bound.map_err(err)?;
    listen(&fd, Backlog::new(64).unwrap_or(Backlog::MAXCONN)).map_err(err)?;
    Ok(fd)
}

pub(super) fn accept(shared: &Arc<Shared>, listener: OwnedFd) {
    loop {
        let conn = match warden_jail::fdpass::accept(listener.as_fd()) {
            Ok(fd) => fd,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(_) => {
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
        };
        // Only the sandbox's owner (or root) may drive it; the socket's
        // mode says the same, this holds even if the mode is changed. And
        // never from inside a sandbox: rootless, a sandbox's processes are
        // the owner's UID too, and any bind that shows the state directory
        // (`--ro ~`) shows this socket.
        match crate::peer::check(&conn) {
            Ok(()) => {}
            Err(e @ crate::peer::PeerError::OtherNamespace(_)) => {
                let _ = protocol::send(
                    conn.as_fd(),
                    &Reply::Error {
                        message: e.to_string(),
                    },
                    &[],
                );
                continue;
            }
            Err(_) => continue,
        }
        // Only this thread takes places, so a look then a count is exact.
        let bound = connection_bound();
        let place = if shared.connections.load(Ordering::SeqCst) < bound as u64 {
            Place::Any
        } else if shared.kept_back.load(Ordering::SeqCst) < KEPT_BACK as u64 {
            Place::KeptBack
        } else {
            let _ = protocol::send(conn.as_fd(), &busy(shared), &[]);
            continue;
        };
        let count = match place {
            Place::Any => &shared.connections,
            Place::KeptBack => &shared.kept_back,
        };
        count.fetch_add(1, Ordering::SeqCst);
        shared.activity.fetch_add(1, Ordering::SeqCst);
        let s = shared.clone();
        let spawned = std::thread::Builder::new()
            .name("warden-conn".into())
            .spawn(move || {
                let _ = serve(&s, &conn, place);
                match place {
                    Place::Any => &s.connections,
                    Place::KeptBack => &s.kept_back,
                }
                .fetch_sub(1, Ordering::SeqCst);
            });
        if spawned.is_err() {
            count.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// Which place a connection holds: one of the bound's, or one kept back
/// past it, which serves a stop or a status and nothing else.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    Any,
    KeptBack,
}

/// What a place kept back serves: the owner's stop, a status (which the
/// stop's callers and `warden ls` look at), and a signal to a running
/// command (answered at once: a caller refused as busy can end one of its
/// commands to free a place); nothing that may hold the place for long.
fn kept_back_serves(req: &Request) -> bool {
    matches!(
        req,
        Request::Stop { .. } | Request::Status | Request::Signal { .. }
    )
}

/// The refusal of a request past the bound: typed, so that each door
/// tells it apart from a supervisor that does not answer or a broken
/// socket, and words it itself (a status and a time to retry after, a
/// sentence saying what to do). Nothing was started for it.
fn busy(shared: &Shared) -> Reply {
    Reply::Refused {
        code: Refusal::Busy,
        message: format!(
            "sandbox {}'s supervisor serves {} connections at once and every one is held (each running command holds one)",
            shared.bus.sandbox(),
            connection_bound()
        ),
        field: None,
        reason: None,
    }
}

/// The hello: answered, and `true` when a request may follow.
fn greet(shared: &Shared, conn: &OwnedFd, place: Place) -> Result<bool, protocol::ProtocolError> {
    // A caller has a few seconds to say hello; a silent connection does
    // not keep its slot.
    let _ = nix::sys::socket::setsockopt(
        conn,
        nix::sys::socket::sockopt::ReceiveTimeout,
        &nix::sys::time::TimeVal::new(5, 0),
    );
    let (hello, _) = protocol::receive::<Request>(conn)?;
    // A place kept back has the same few seconds for its request.
    if place == Place::Any {
        let _ = nix::sys::socket::setsockopt(
            conn,
            nix::sys::socket::sockopt::ReceiveTimeout,
            &nix::sys::time::TimeVal::new(0, 0),
        );
    }
    match hello {
        Request::Hello { version } if version == VERSION => protocol::send(
            conn.as_fd(),
            &Reply::Hello {
                version: VERSION,
                sandbox: shared.bus.sandbox().to_string(),
                pid: std::process::id(),
            },
            &[],
        )
        .map(|()| true),
        Request::Hello { version } => protocol::send(
            conn.as_fd(),
            &Reply::Error {
                message: format!("this sandbox's supervisor speaks control protocol {VERSION}, the caller {version}: use the same warden for both"),
            },
            &[],
        )
        .map(|()| false),
        _ => Ok(false),
    }
}

fn serve(
    shared: &Arc<Shared>,
    conn: &OwnedFd,
    place: Place,
) -> Result<(), protocol::ProtocolError> {
    if !greet(shared, conn, place)? {
        return Ok(());
    }
    let (req, fds) = protocol::receive::<Request>(conn)?;
    let reply = |r: &Reply| protocol::send(conn.as_fd(), r, &[]);
    if place == Place::KeptBack && !kept_back_serves(&req) {
        return reply(&busy(shared));
    }
    if pause::needs_processes(&req) && pause::paused_since(shared).is_some() {
        return reply(&pause::refused_paused(shared));
    }
    match req {
        Request::Hello { .. } => reply(&Reply::Error {
            message: "hello twice".into(),
        }),
        Request::Exec(r) => exec(shared, conn, r, fds),
        Request::Hold(r) => hold(shared, conn, r, fds),
        Request::Release => release(shared, conn),
        Request::File(op) => file_op(shared, conn, op),
        Request::Connect(target) => connect(shared, conn, target),
        Request::Signal { exec, signal } => {
            match spawn::send(
                shared.channel.as_fd(),
                &ToInit::Signal { id: exec, signal },
                &[],
            ) {
                Ok(()) => reply(&Reply::Ok),
                Err(e) => reply(&Reply::Error {
                    message: warden_jail::chain_str(&e),
                }),
            }
        }
        Request::Stop { grace_ms } => {
            reply(&Reply::Ok)?;
            stop(
                shared,
                StopReason::Requested,
                Duration::from_millis(grace_ms),
            );
            Ok(())
        }
        Request::Status => reply(&Reply::Status(status(shared))),
        Request::Record {
            action,
            paths,
            detail,
        } => reply(&record(shared, &action, paths, detail)),
        Request::Pause { by, to_disk } => reply(&pause::pause(shared, &by, to_disk)),
        Request::Resume { by } => reply(&pause::resume(shared, &by)),
        Request::SetEgress {
            allow,
            remove,
            by,
            caller,
        } => reply(
            &shared
                .allowlist
                .reply(&allow, &remove, &by, trust_of(caller)),
        ),
        Request::Approvals => reply(&crate::approvals::pending_reply(
            shared.approvals.as_deref(),
        )),
        Request::Answer {
            question,
            decision,
            by,
            caller,
        } => reply(&crate::approvals::answer_reply(
            shared.approvals.as_deref(),
            &question,
            decision,
            &by,
            trust_of(caller),
        )),
        Request::SetTtl { ttl_ms } => {
            let deadline = ttl_ms.map(|t| state::now_ms().saturating_add(t));
            match shared.clocks.lock() {
                Ok(mut c) => {
                    c.ttl_ms = deadline;
                    shared.clocks_changed.notify_all();
                    shared.bus.emit(EventKind::TtlChanged {
                        deadline_ms: deadline,
                    });
                    reply(&Reply::Ok)
                }
                Err(_) => reply(&Reply::Error {
                    message: "the supervisor's TTL is unusable".into(),
                }),
            }
        }
        Request::Ps => {
            let execs: HashMap<i32, u64> = shared
                .execs
                .lock()
                .map(|e| e.iter().filter_map(|(id, s)| Some((s.pid?, *id))).collect())
                .unwrap_or_default();
            let processes = shared
                .root_pid()
                .map(processes)
                .unwrap_or_default()
                .into_iter()
                .map(|(host_pid, pid, command)| Process {
                    pid,
                    host_pid,
                    exec: execs.get(&pid).copied(),
                    command,
                })
                .collect();
            reply(&Reply::Ps { processes })
        }
        Request::Follow => {
            let rx = shared.bus.subscribe();
            loop {
                match rx.recv_timeout(CALLER_CHECK) {
                    Ok(e) => reply(&Reply::Event(e))?,
                    // A follower that left, in a quiet sandbox, would
                    // hold its slot until the next event.
                    Err(RecvTimeoutError::Timeout) if caller_gone(conn) => return Ok(()),
                    Err(RecvTimeoutError::Timeout) => {}
                    Err(RecvTimeoutError::Disconnected) => return Ok(()),
                }
            }
        }
    }
}

/// A record of what was done to the sandbox from outside it (a snapshot,
/// a fork), appended through this supervisor's writer, which holds the
/// log: only an action of the workspace's fixed set, by its word, and
/// always naming this sandbox. Answered once every sink has it, or with
/// why one does not.
fn record(shared: &Shared, action: &str, paths: Vec<PathBuf>, detail: String) -> Reply {
    let Some(action) = WorkspaceAction::parse(action) else {
        let mut word: String = action.chars().take(64).collect();
        if word.len() < action.len() {
            word.push('…');
        }
        return Reply::Refused {
            code: Refusal::Invalid,
            message: format!("{word:?} is not a workspace action: nothing recorded"),
            field: Some("/action".into()),
            reason: None,
        };
    };
    let kind = EventKind::Workspace {
        action,
        name: shared.bus.sandbox().to_string(),
        paths,
        detail,
    };
    match shared.bus.emit_confirmed(kind) {
        Ok(()) => Reply::Ok,
        // Its log is closed, and its lock released with it: the caller
        // appends the record itself.
        Err(e @ NotWritten::Closed) => Reply::Refused {
            code: Refusal::Conflict,
            message: e.to_string(),
            field: None,
            reason: None,
        },
        Err(e) => Reply::Error {
            message: format!("the record is not in the sandbox's audit log: {e}"),
        },
    }
}

fn status(shared: &Shared) -> Status {
    let memory_bytes = shared.cgroups.iter().find_map(|cg| {
        ["memory.current", "memory.usage_in_bytes"]
            .iter()
            .find_map(|f| {
                std::fs::read_to_string(cg.join(f))
                    .ok()?
                    .trim()
                    .parse()
                    .ok()
            })
    });
    // cgroup v2's cpu.stat, or v1's cpuacct (nanoseconds).
    let cpu_usec = shared.cgroups.iter().find_map(|cg| {
        let v2 = std::fs::read_to_string(cg.join("cpu.stat"))
            .ok()
            .and_then(|stat| {
                stat.lines()
                    .find_map(|l| l.strip_prefix("usage_usec "))
                    .and_then(|v| v.trim().parse().ok())
            });
        v2.or_else(|| {
            std::fs::read_to_string(cg.join("cpuacct.usage"))
                .ok()?
                .trim()
                .parse::<u64>()
                .ok()
                .map(|ns| ns / 1000)
        })
    });
    Status {
        sandbox: shared.bus.sandbox().to_string(),
        cpu_usec,
        init_pid: shared.init.as_raw(),
        started_ms: shared.started_ms,
        ttl_deadline_ms: shared.clocks.lock().map(|c| c.ttl_ms).unwrap_or(None),
        paused_ms: pause::paused_since(shared),
        processes: shared.root_pid().map_or(0, |p| descendants(p).len()),
        execs: shared.execs.lock().map(|e| e.len()).unwrap_or(0),
        memory_bytes,
        egress_bytes: shared.bus.egress_bytes(),
        main: shared.main.lock().ok().and_then(|m| match &*m {
            Main::None => None,
            Main::Held(..) => Some(MainState::Held),
            Main::Running { exec, pid } => Some(MainState::Running {
                exec: *exec,
                pid: *pid,
            }),
            Main::Exited(status) => Some(MainState::Exited { status: *status }),
        }),
        desktop: shared
            .desktop
            .lock()
            .ok()
            .and_then(|d| d.as_ref().and_then(|b| b.lock().ok().map(|b| b.clone()))),
    }
}

/// The trust of whoever sent a request: the owner, unless the request says
/// it comes from a caller (the daemon, for a token holder).
fn trust_of(caller: bool) -> warden_policy::trust::Trust {
    match caller {
        true => warden_policy::trust::Trust::Caller,
        false => warden_policy::trust::Trust::Owner,
    }
}
