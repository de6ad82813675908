//! The third stage of a start: from the go-ahead to the final message. The
//! init builds its root while the supervisor finishes its cgroup, reads the
//! secrets' values, records the sandbox as created and takes what the init
//! hands over (its terminal, its running layer, its network's sockets);
//! then the final message lets the command start.

use super::clone::{Cloned, Signals};
use super::prepare::cgroup_err;
use super::setup::{confine_finish, send_final, PrivateTmp};
use super::supervision::ChildGuard;
use super::{release, socket_source, sys_err, Attach, Desk, JailError, Mode, Network};
use crate::init;
use crate::kept::KeptSave;
use crate::pty;
use crate::sys;
use nix::errno::Errno;
use nix::unistd::Pid;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::time::Instant;
use warden_audit::{Event, EventKind, EventSink};
use warden_policy::SandboxSpec;

/// The command may run (or has failed to start: `send_error`).
pub(super) struct Started {
    pub mode: Mode,
    pub child: Pid,
    pub guard: ChildGuard,
    pub mounts: Option<release::Held>,
    pub signals: Signals,
    pub start: Instant,
    pub private_tmp: Option<PrivateTmp>,
    /// The init's reports.
    pub rep_rd: OwnedFd,
    /// The command's terminal, relayed to the supervisor's.
    pub master: Option<OwnedFd>,
    /// `--ask`: the proxy's questions, answered from the terminal.
    pub desk: Option<Box<dyn Desk>>,
    /// `--disk`: the running layer, and where it is saved.
    pub layer: Option<(OwnedFd, KeptSave)>,
    /// The final message could not be sent; the init's own report of why
    /// is the better message when it has one.
    pub send_error: Option<JailError>,
    /// With an exec allowlist, as root with the kernel's audit on: the
    /// kernel's records of what the sandbox's Landlock domain refused.
    pub refusals: Option<crate::landlock_audit::AuditWatch>,
    /// With an exec allowlist: the supervisor's own refusals of execs
    /// (see `modes::exec`), recorded as they come.
    pub exec_records: Option<crate::modes::exec::RecordReader>,
}

/// Let the init go on, and hand it the last of what it needs.
pub(super) fn start(
    cloned: Cloned,
    spec: &SandboxSpec,
    id: &str,
    events: &mut dyn EventSink,
    attach: &mut dyn Attach,
) -> Result<Started, JailError> {
    let Cloned {
        signals,
        mode,
        root_mode,
        child,
        born_in_cgroup,
        mut guard,
        mounts,
        start,
        workspace,
        pending,
        cgroup_channel,
        ends,
        master,
        private_tmp,
        secrets,
        egress,
        published,
        kept_save,
    } = cloned;
    // Subscribed before the init restricts itself: the first refusal's
    // records name the domain's maker, and are sent once.
    let refusals = refusal_watch(spec, child);
    // The values, now that the init exists (and before it builds the root,
    // which holds the authority's certificate), to the caller's keeping.
    if let (Some(p), Some(_)) = (secrets, &egress) {
        p.hand_over(attach)?;
    }
    // The child builds its root while the supervisor confines it: both
    // sides work at once, and the child cannot go past its root before the
    // final message below.
    let since = crate::modes::now();
    crate::phase("go");
    nix::unistd::write(&ends.go_wr, b"g").map_err(sys_err("start the sandbox"))?;
    // The judge of mode changes, started while the init builds its root:
    // it waits for the listener the init sends once its filters are
    // loaded, and a call made before it runs waits in the kernel. Without
    // it the init cannot hand the listener over, and the sandbox does not
    // start.
    // With an allowlist it judges the sandbox's execs too, and its
    // refusals come to the supervisor's loop as records.
    let mut exec_records = None;
    if let Some(channel) = ends.modes {
        let io_err = |what, e: std::io::Error| JailError::Sys {
            what,
            source: Errno::from_raw(e.raw_os_error().unwrap_or(libc::EAGAIN)),
        };
        let records = match spec.allow_exec.is_empty() {
            true => None,
            false => {
                let (reader, wr) = crate::modes::exec::RecordReader::pipe()
                    .map_err(|e| io_err("open the pipe of the exec allowlist's records", e))?;
                exec_records = Some(reader);
                Some(wr)
            }
        };
        crate::modes::watch(channel, since, records, spec.resources.cpus)
            .map_err(|e| io_err("start the thread that judges the sandbox's mode changes", e))?;
    }
    let flags = finish_cgroup(spec, id, events, &mut guard, pending, cgroup_channel)?;
    let flags = match &guard.cgroup {
        Some(cg) => {
            if !born_in_cgroup {
                cg.add_process_v2(child.as_raw()).map_err(cgroup_err)?;
            }
            flags
        }
        None => flags,
    };
    events.emit(&Event::now(
        id,
        EventKind::Created {
            command: spec.command.clone(),
            workspace,
            rootless: !root_mode,
            cgroup: guard
                .cgroup
                .as_ref()
                .and_then(|c| c.paths().first().map(|p| p.display().to_string())),
        },
    ));
    // The terminal the init opened once its root was built (`--ask`
    // below needs to know there is one); a child that
    // failed before sends none (and says why on the report pipe).
    let master = match &ends.tty {
        Some(p) => receive_terminal(p).or(master),
        None => master,
    };
    drop(ends.tty);
    // The running layer: from now on the sandbox's changes are in memory
    // only, until the supervisor writes them back when it stops; the mark
    // says so to `warden ls` and `warden diff` should this supervisor be
    // killed.
    let layer = match (&ends.layer, kept_save) {
        (Some(p), Some(save)) => receive_layer(p, save),
        _ => None,
    };
    drop(ends.layer);
    let mut desk = None;
    if let Some(channel) = ends.egress {
        let wired = Wired {
            egress: egress.is_some(),
            published,
            terminal: master.is_some(),
        };
        desk = wired.serve(channel, attach)?;
    }
    // A record the sinks could not take (the audit log, which opens with
    // the first record, `created`, above, while the child builds its root):
    // the command never starts unrecorded.
    if let Some(why) = events.failure() {
        return Err(JailError::Unrecorded(why));
    }
    // A child that failed to build its root has already said why on the
    // report pipe; its message is the better one, so a failed send is kept
    // for the case that there is none.
    crate::phase("final");
    let send_error = send_final(&ends.go_wr, flags).err();
    // Closed either way: a child still waiting reads its end and gives up.
    // A child that closed it first has failed on its own and is writing
    // why on the report pipe; it is not killed before it has (it was, and
    // the reason was lost).
    drop(ends.go_wr);
    events.emit(&Event::now(
        id,
        EventKind::Started {
            pid: child.as_raw(),
        },
    ));
    // A child that never got the word to run is not served: whoever waits
    // for the sandbox to be ready is told why it failed (its report), not
    // that it is ready.
    if let (Some(channel), None) = (ends.service, &send_error) {
        attach.service(channel, child);
    }
    Ok(Started {
        mode,
        child,
        guard,
        mounts,
        signals,
        start,
        private_tmp,
        rep_rd: ends.rep_rd,
        master,
        desk,
        layer,
        send_error,
        refusals,
        exec_records,
    })
}

/// The kernel's records of the allowlist's refusals inside, where it
/// keeps them and warden may read them (see `landlock_audit`); without,
/// only the refusal of the command warden starts is recorded.
fn refusal_watch(spec: &SandboxSpec, init: Pid) -> Option<crate::landlock_audit::AuditWatch> {
    if spec.allow_exec.is_empty() {
        return None;
    }
    match crate::landlock_audit::AuditWatch::open() {
        Ok(mut w) => {
            w.set_init(init.as_raw());
            Some(w)
        }
        Err(e) => {
            tracing::debug!("exec refusals inside are not recorded: {e}");
            None
        }
    }
}

/// The rest of the cgroup, while the child sets up its IDs and network; it
/// joins the v1 directories (sent over `channel`) before it builds its
/// root. Returns the final message's flags: whether a cgroup confines the
/// sandbox, or the init must fall back to rlimits.
fn finish_cgroup(
    spec: &SandboxSpec,
    id: &str,
    events: &mut dyn EventSink,
    guard: &mut ChildGuard,
    pending: Option<crate::cgroup::Pending>,
    channel: Option<OwnedFd>,
) -> Result<u8, JailError> {
    if let Some(p) = pending {
        let (cg, made) = confine_finish(spec, id, p, events)?;
        guard.cgroup = cg;
        guard.unfinished = made;
    }
    if let (Some(channel), Some(cg)) = (channel, &guard.cgroup) {
        let tasks = cg.joining().map_err(cgroup_err)?.v1_tasks;
        let fds: Vec<_> = tasks.iter().map(|(f, _)| f.as_raw_fd()).collect();
        if !fds.is_empty() {
            // Their number goes with them, for the init to check (none
            // sent: the init reads end of file, and joins nothing).
            let count = u8::try_from(fds.len())
                .ok()
                .filter(|n| usize::from(*n) <= crate::fdpass::MAX_FDS)
                .ok_or(JailError::Sys {
                    what: "hand the cgroup's directories to the sandbox's init (too many)",
                    source: Errno::E2BIG,
                })?;
            crate::fdpass::send(channel.as_fd(), &[count], &fds).map_err(sys_err(
                "hand the cgroup's directories to the sandbox's init",
            ))?;
        }
    }
    crate::phase("cgroup-finished");
    Ok(match &guard.cgroup {
        Some(_) => init::FINAL_IN_CGROUP,
        None => init::FINAL_RLIMIT_FALLBACK,
    })
}

/// The master side of the terminal the init opened in its devpts.
fn receive_terminal(pair: &OwnedFd) -> Option<OwnedFd> {
    let m = sys::recv_fds(pair, 1).unwrap_or_default().pop()?;
    if !pty::is_terminal(m.as_fd()) {
        return None;
    }
    pty::copy_window_size(std::io::stdin().as_fd(), m.as_fd());
    Some(m)
}

/// The running layer the init built on its tmpfs, marked where review
/// commands find it: the supervisor's PID and the descriptor
/// (`/proc/PID/fd/N/upper`), with the supervisor's start time and the
/// tmpfs's device, without which a recycled PID would lead a reader to
/// another process's descriptor (see `warden_workspace::UnsavedMark`).
fn receive_layer(pair: &OwnedFd, save: KeptSave) -> Option<(OwnedFd, KeptSave)> {
    let fd = sys::recv_fds(pair, 1).unwrap_or_default().pop()?;
    if let Some(mark) = save.mark() {
        // A mark whose identity cannot be read still says the layer is
        // unsaved, but names no path to follow.
        let text = warden_workspace::UnsavedMark::of_own(fd.as_raw_fd())
            .map(|m| m.text())
            .unwrap_or_else(|| "unidentified\n".to_string());
        let _ = std::fs::write(mark, text);
    }
    Some((fd, save))
}

/// What the caller is to serve of the sandbox's network.
struct Wired {
    /// The init opens the egress proxy's sockets.
    egress: bool,
    published: super::prepare::Published,
    /// A person is at a terminal this supervisor relays.
    terminal: bool,
}

impl Wired {
    /// Hand the caller the sockets the init opened in the sandbox's
    /// network namespace (a child that failed before sending them has said
    /// why on the report pipe); returns the desk that puts `--ask`'s
    /// questions to the person at the terminal, if the caller has one.
    fn serve(
        self,
        channel: OwnedFd,
        attach: &mut dyn Attach,
    ) -> Result<Option<Box<dyn Desk>>, JailError> {
        let mut network = Network {
            egress: None,
            terminal: self.terminal,
            published: Vec::new(),
            sockets: None,
            publish_to: std::net::Ipv4Addr::LOCALHOST,
        };
        if self.egress {
            let mut fds = sys::recv_fds(&channel, 2).unwrap_or_default().into_iter();
            if let (Some(tcp), Some(dns)) = (fds.next(), fds.next()) {
                network.egress = Some((tcp, dns));
            }
        }
        if !self.published.is_empty() {
            network.published = self.published;
            network.sockets = Some(socket_source(channel));
        }
        if network.egress.is_none() && network.published.is_empty() {
            return Ok(None);
        }
        attach.network(network).map_err(JailError::Attach)
    }
}
