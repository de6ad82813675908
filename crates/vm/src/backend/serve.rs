//! The guest's side of a VM sandbox served from the host: the caller's
//! requests read off the control channel, one command run and relayed,
//! or a long-lived sandbox's spawn channel served by relaying each request
//! to the guest's init and each process's streams. It decides nothing of
//! the sandbox's policy: the spec is the guest init's to apply.

use super::*;

pub(super) fn read_requests(channel: &OwnedFd, tx: SyncSender<Input>) {
    use warden_jail::spawn::Request;
    loop {
        match warden_jail::spawn::read_request(channel.as_fd()) {
            Request::Closed => break,
            Request::Nothing => {}
            Request::Got(req, fds) => {
                if tx.send(Input::Request(req, fds)).is_err() {
                    return;
                }
            }
        }
    }
    let _ = tx.send(Input::RequestsGone);
}

pub(super) fn next(rx: &Receiver<Input>, deadline: Option<Instant>) -> Option<Input> {
    match deadline {
        Some(d) => match rx.recv_timeout(d.saturating_duration_since(Instant::now())) {
            Ok(i) => Some(i),
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => Some(Input::VmGone(u64::MAX)),
        },
        None => Some(rx.recv().unwrap_or(Input::VmGone(u64::MAX))),
    }
}

pub(super) fn workdir(spec: &SandboxSpec) -> String {
    if let Some(w) = &spec.filesystem.workdir {
        w.to_string_lossy().into_owned()
    } else if spec.filesystem.workspace.is_some() {
        WORKSPACE_MOUNT.to_string()
    } else {
        "/".to_string()
    }
}

/// What the relay cut, reported as the sandbox's events at the moment it
/// is cut (the relay's own cuts) or at the moment the relay learns of it
/// (the guest cut off by another thread, whose time the event keeps).
pub(super) struct Report<'a> {
    id: &'a str,
    events: &'a mut dyn EventSink,
    cut_off: CutOff,
}

impl<'a> Report<'a> {
    pub(super) fn new(id: &'a str, events: &'a mut dyn EventSink, cut_off: CutOff) -> Report<'a> {
        Report {
            id,
            events,
            cut_off,
        }
    }

    /// The guest was cut off, if it was and this was not said yet.
    pub(super) fn vm_cut_off(&mut self) {
        if let Some((cause, ts_ms)) = self.cut_off.take() {
            self.events.emit(&Event {
                ts_ms,
                sandbox: self.id.to_string(),
                kind: EventKind::VmCutOff { cause },
            });
        }
    }

    /// Exec `exec`'s output was cut: its caller took nothing for
    /// [`crate::inside::CALLER_STALL`].
    fn exec_output_cut(&mut self, exec: u64) {
        self.events.emit(&Event::now(
            self.id,
            EventKind::ExecOutputCut {
                exec,
                stalled_ms: crate::inside::CALLER_STALL.as_millis() as u64,
            },
        ));
    }
}

/// `warden run`: the spec's command, with this process's stdio.
pub(super) fn one_command(
    spec: &SandboxSpec,
    w: &Writer,
    rx: &Receiver<Input>,
    deadline: Option<Instant>,
    report: &mut Report,
) -> Ended2 {
    const ID: u64 = 1;
    // With a terminal (`run -t`, or `run` at one): the command runs at a
    // terminal of the guest's own, of the caller's size; the caller's is
    // raw meanwhile (the guest's line discipline echoes and edits), and
    // put back as it was at the end.
    let tty = spec.terminal == Terminal::Pty;
    let winsize = tty
        .then(|| warden_jail::pty::window_size(std::io::stdin().as_fd()))
        .flatten();
    let _raw = if tty {
        warden_jail::pty::RawMode::enable().ok().flatten()
    } else {
        None
    };
    send(
        w,
        Frame::json(
            Kind::Spawn,
            ID,
            &Spawn {
                argv: spec.command.clone(),
                env: spec.env.clone(),
                cwd: workdir(spec),
                tty,
                winsize,
            },
        ),
    );
    let stop = Arc::new(AtomicBool::new(false));
    if let Ok(stdin) = std::io::stdin().as_fd().try_clone_to_owned() {
        let (w, stop) = (w.clone(), stop.clone());
        std::thread::spawn(move || pump_stdin(stdin, ID, w, stop));
    }
    let result = loop {
        let Some(input) = next(rx, deadline) else {
            break Ended2::Timeout;
        };
        match input {
            Input::Vm(f) if f.id == ID => match f.kind {
                // Written within the sandbox's time: a reader of ours
                // that stops (`warden run | sleep`) holds the guest's
                // output in the guest (the relay's queue is bounded), and
                // the timeout still ends the run.
                Kind::Stdout | Kind::Stderr => {
                    let fd = if f.kind == Kind::Stdout {
                        std::io::stdout().as_fd().try_clone_to_owned()
                    } else {
                        std::io::stderr().as_fd().try_clone_to_owned()
                    };
                    if let Ok(fd) = fd {
                        let mut out = File::from(fd);
                        let written = crate::channel::write_within(&mut out, &f.payload, deadline);
                        if matches!(&written, Err(e) if e.kind() == std::io::ErrorKind::TimedOut) {
                            break Ended2::Timeout;
                        }
                    }
                }
                Kind::Failed => break Ended2::ExecFailed(f.parse::<i32>().unwrap_or(0)),
                // A forged signal is malformed: the guest is gone.
                Kind::Ended => match f.parse::<Ended>().ok().and_then(Ended::checked) {
                    Some(e) => break Ended2::Exit(e),
                    None => break Ended2::Gone,
                },
                _ => {}
            },
            Input::VmGone(_) => {
                report.vm_cut_off();
                break Ended2::Gone;
            }
            // Not served: nothing pauses a one-shot run.
            Input::Control(_, answer) => {
                let _ = answer.send(Err(crate::control::ControlError::NotRunning));
            }
            _ => {}
        }
    };
    stop.store(true, Ordering::SeqCst);
    result
}

/// One process started through the spawn channel.
pub(super) struct Exec {
    stdout: File,
    stderr: File,
    stop: Arc<AtomicBool>,
    /// Its caller stalled or went: its output is dropped from now on.
    cut: bool,
    /// With a terminal: its master side, for the caller with `spawned`.
    master: Option<OwnedFd>,
}

pub(super) fn notify(channel: &OwnedFd, notice: &FromInit) {
    notify_with(channel.as_fd(), notice, None);
}

/// An exec's terminal: a pseudo-terminal on the host whose master side
/// goes to the caller (as the process backend's does) and whose slave
/// side, in raw mode, is relayed to and from a terminal of the guest's
/// own, where the process runs (the guest's line discipline is the one
/// that echoes and edits). None is opened ahead of its process (see
/// `Spawn`).
pub(super) struct HostTerminals;

impl warden_jail::spawn::Terminals for HostTerminals {
    fn take(&mut self, _: u64) -> Result<OwnedFd, i32> {
        Err(nix::errno::Errno::ENOTTY as i32)
    }

    fn open(&mut self, winsize: Option<(u16, u16)>) -> Result<(OwnedFd, OwnedFd), i32> {
        use nix::sys::termios::{cfmakeraw, tcgetattr, tcsetattr, SetArg};
        let (master, slave) = warden_jail::spawn::open_terminal(winsize)?;
        let mut t = tcgetattr(&slave).map_err(|e| e as i32)?;
        cfmakeraw(&mut t);
        tcsetattr(&slave, SetArg::TCSANOW, &t).map_err(|e| e as i32)?;
        Ok((master, slave))
    }
}

/// A long-lived sandbox: the jail's spawn protocol on `channel`, relayed.
pub(super) fn serve(
    spec: &SandboxSpec,
    live: &mut crate::control::Live,
    rx: &Receiver<Input>,
    channel: &OwnedFd,
    deadline: Option<Instant>,
    report: &mut Report,
) -> Ended2 {
    let w = &live.writer.clone();
    let mut relay = Served {
        spec,
        w,
        channel,
        execs: HashMap::new(),
        connections: crate::inside::Connections::default(),
    };
    let result = loop {
        let Some(input) = next(rx, deadline) else {
            break Ended2::Timeout;
        };
        match input {
            Input::Request(req, fds) => {
                if let Some(end) = relay.request(req, fds) {
                    break end;
                }
            }
            Input::RequestsGone => break Ended2::Exit(Ended::Exited(0)),
            Input::Vm(f) if f.id & CONNECTION != 0 => relay.connections.frame(f, channel, w),
            Input::Vm(f) => relay.guest_frame(f, report),
            Input::VmGone(gen) if live.current(gen) => {
                report.vm_cut_off();
                break Ended2::Gone;
            }
            // The reader of a VMM ended by a pause to disk.
            Input::VmGone(_) => {}
            Input::Control(op, answer) => {
                use crate::control::After;
                let (said, after) = live.control(op);
                let _ = answer.send(said);
                match after {
                    After::Serve => {}
                    After::End => break Ended2::Exit(Ended::Exited(0)),
                    After::Lost => break Ended2::Gone,
                }
            }
        }
    };
    for e in relay.execs.values() {
        e.stop.store(true, Ordering::SeqCst);
    }
    relay.connections.end();
    result
}

/// What [`serve`] relays between: the caller's spawn channel and the VM,
/// with the processes it started there and the connections it carries.
pub(super) struct Served<'a> {
    spec: &'a SandboxSpec,
    w: &'a Writer,
    channel: &'a OwnedFd,
    execs: HashMap<u64, Exec>,
    connections: crate::inside::Connections,
}

impl Served<'_> {
    /// A request of the caller's, passed to the guest's init or answered
    /// here; how the relay ends, if it asks for the end.
    fn request(&mut self, req: ToInit, fds: Vec<OwnedFd>) -> Option<Ended2> {
        let (w, channel) = (self.w, self.channel);
        match req {
            ToInit::Spawn {
                id,
                argv,
                env,
                cwd,
                tty,
                winsize,
                terminal,
            } => match Streams::asked(tty, terminal, winsize, fds, &mut HostTerminals) {
                Ok(streams) => {
                    let spawn = Spawn {
                        argv,
                        env: with_env(&self.spec.env, env),
                        cwd: cwd.unwrap_or_else(|| workdir(self.spec)),
                        tty,
                        winsize,
                    };
                    self.start(id, &spawn, streams);
                }
                Err(errno) => notify(channel, &FromInit::Failed { id, errno }),
            },
            ToInit::Signal { id, signal } => send(w, Frame::json(Kind::Signal, id, &signal)),
            ToInit::TermAll => send(w, Frame::new(Kind::TermAll, 0, Vec::new())),
            ToInit::Shutdown => return Some(Ended2::Exit(Ended::Exited(0))),
            // No terminal opened ahead of its process (see `Spawn`).
            ToInit::OpenTerminal { id, .. } => notify(
                channel,
                &FromInit::FileDone {
                    id,
                    errno: nix::errno::Errno::ENOTTY as i32,
                },
            ),
            // A connection to a service on the guest's loopback,
            // relayed through the channel (see `inside`).
            ToInit::Connect { id, to } => {
                if let Err(errno) = self.connections.ask(id, &to, w) {
                    notify(channel, &FromInit::FileDone { id, errno });
                }
            }
            // The guest's files are not reached from the host yet.
            ToInit::File { id, .. } => notify(
                channel,
                &FromInit::FileDone {
                    id,
                    errno: nix::errno::Errno::EOPNOTSUPP as i32,
                },
            ),
        }
        None
    }

    /// Ask the guest's init to start `spawn` as exec `id`, its input
    /// pumped from the caller's stdin and its output written to the
    /// caller's descriptors.
    fn start(&mut self, id: u64, spawn: &Spawn, streams: Streams) {
        let Streams {
            stdio: [stdin, stdout, stderr],
            master,
        } = streams;
        send(self.w, Frame::json(Kind::Spawn, id, spawn));
        let stop = Arc::new(AtomicBool::new(false));
        {
            let (w, stop) = (self.w.clone(), stop.clone());
            std::thread::spawn(move || pump_stdin(stdin, id, w, stop));
        }
        self.execs.insert(
            id,
            Exec {
                stdout: File::from(stdout),
                stderr: File::from(stderr),
                stop,
                cut: false,
                master,
            },
        );
    }

    /// A frame of the guest's init about one of its processes, told to
    /// the caller (its output written to the caller's descriptors; a cut
    /// of it reported).
    fn guest_frame(&mut self, f: Frame, report: &mut Report) {
        let channel = self.channel;
        match f.kind {
            Kind::Spawned => {
                let master = self.execs.get_mut(&f.id).and_then(|e| e.master.take());
                notify_with(
                    channel.as_fd(),
                    &FromInit::Spawned {
                        id: f.id,
                        pid: f.parse::<i32>().unwrap_or(0),
                    },
                    master.as_ref(),
                )
            }
            Kind::Failed => {
                if let Some(e) = self.execs.remove(&f.id) {
                    e.stop.store(true, Ordering::SeqCst);
                }
                notify(
                    channel,
                    &FromInit::Failed {
                        id: f.id,
                        errno: f.parse::<i32>().unwrap_or(0),
                    },
                )
            }
            Kind::Stdout | Kind::Stderr => {
                if let Some(e) = self.execs.get_mut(&f.id).filter(|e| !e.cut) {
                    let out = if f.kind == Kind::Stdout {
                        &mut e.stdout
                    } else {
                        &mut e.stderr
                    };
                    // A caller that has not taken the frame within
                    // CALLER_STALL (the bound of the relay's wait per
                    // frame, so a reader slower than that counts) has
                    // its output cut (the protocol has no flow control
                    // per exec, and the relay serves every process and
                    // request of the sandbox): what follows is dropped,
                    // the process runs on.
                    let by = Instant::now() + crate::inside::CALLER_STALL;
                    if let Err(err) = crate::channel::write_within(out, &f.payload, Some(by)) {
                        if err.kind() == std::io::ErrorKind::TimedOut {
                            tracing::debug!(
                                exec = f.id,
                                "the caller did not take its output within {} s; its output is cut",
                                crate::inside::CALLER_STALL.as_secs()
                            );
                            report.exec_output_cut(f.id);
                        }
                        e.cut = true;
                    }
                }
            }
            Kind::Ended => {
                if let Some(e) = self.execs.remove(&f.id) {
                    e.stop.store(true, Ordering::SeqCst);
                }
                // A forged signal (outside 1..=64) is malformed, never
                // passed on.
                let notice = match f.parse::<Ended>().ok().and_then(Ended::checked) {
                    Some(Ended::Exited(code)) => FromInit::Exited { id: f.id, code },
                    Some(Ended::Signaled(signal)) => FromInit::Signaled { id: f.id, signal },
                    None => {
                        tracing::warn!(exec = f.id, "the guest sent a malformed end; dropped");
                        return;
                    }
                };
                notify(channel, &notice);
            }
            _ => {}
        }
    }
}

/// The sandbox's environment with a request's variables added (or
/// replacing those of the same name).
pub(super) fn with_env(
    base: &[(String, String)],
    env: Vec<(String, String)>,
) -> Vec<(String, String)> {
    let mut full = base.to_vec();
    for (k, v) in env {
        match full.iter_mut().find(|(n, _)| *n == k) {
            Some(slot) => slot.1 = v,
            None => full.push((k, v)),
        }
    }
    full
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_guest_cut_off_by_its_channels_reader_is_one_event_of_the_sandbox_timed_at_the_cut() {
        use crate::wire::Kind;
        use std::io::Write;
        use std::os::unix::net::UnixStream;
        let (host, mut guest) = UnixStream::pair().expect("socketpair");
        let (tx, rx) = sync_channel(crate::control::FRAMES_MAX);
        let (replies_tx, _replies) = sync_channel(4);
        let cut_off = CutOff::default();
        let reader = {
            let feed = crate::control::Feed {
                tx,
                retired: Arc::new(AtomicBool::new(false)),
            };
            let cut_off = cut_off.clone();
            std::thread::spawn(move || {
                crate::control::read_vm(host, Vec::new(), 0, feed, (replies_tx, cut_off))
            })
        };
        // A guest that sends share answers nobody asked for.
        guest
            .set_write_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        let mut answer = Vec::new();
        Frame::new(Kind::Released, 0, vec![0u8; 64])
            .write_to(&mut answer)
            .expect("frame");
        for _ in 0..50 {
            if guest.write_all(&answer).is_err() {
                break;
            }
        }
        match rx.recv_timeout(Duration::from_secs(10)) {
            Ok(Input::VmGone(0)) => {}
            _ => panic!("the guest's channel did not end"),
        }
        let _ = reader.join();
        let seen = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .as_millis() as u64;
        std::thread::sleep(Duration::from_millis(50));
        // The relay reports it when it sees the end, and again at the
        // relay's end (for a cut it had no moment to say): once in all.
        let mut sink = warden_audit::MemorySink::default();
        let mut report = Report::new("box-1", &mut sink, cut_off);
        report.vm_cut_off();
        report.vm_cut_off();
        assert_eq!(sink.0.len(), 1, "{:?}", sink.0);
        let e = &sink.0[0];
        assert_eq!(e.sandbox, "box-1");
        assert_eq!(
            e.kind,
            EventKind::VmCutOff {
                cause: warden_audit::VmCut::UnaskedAnswers {
                    answers: 5,
                    bound: 4
                }
            }
        );
        assert!(e.ts_ms <= seen, "timed at the report, not the cut");
    }
}
