//! The spawn channel of a long-lived gVisor sandbox, served on the host:
//! each request of [`crate::spawn`]'s protocol becomes a `runsc exec` into
//! the running sandbox (the process then carries every restriction of the
//! sandbox: gVisor's kernel, its mounts, no capabilities), with the
//! caller's descriptors (or a terminal made here) as its standard streams,
//! and its end becomes the `exited` notice.
//!
//! No descriptor crosses gVisor's boundary but the three streams runsc
//! hands in. File operations are done here, on the host, in the workspace
//! directory the sandbox writes, with [`crate::files`]' walk (one name at a
//! time, no link followed) and, as root, with the sandbox user's file
//! system IDs on the serving thread, so that what is made belongs to that
//! user and what it may not touch stays untouched. Connections inside are
//! made from a thread that entered the sandbox's network namespace: gVisor
//! runs with the host's network stack there, so a service listening on
//! the sandbox's loopback listens on that namespace's.

use super::runsc::Runsc;
use crate::spawn::{notify, Ahead, Request, Streams};
use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use serde_json::Value;
use std::collections::HashMap;
use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use warden_protocol::spawn::{FromInit, ToInit};

/// How long a started `runsc exec` may take to say its process runs.
const START_LIMIT: Duration = Duration::from_secs(30);

/// How the service ended.
pub(super) enum Ended {
    /// The caller closed the channel or asked for the end.
    Shutdown,
    /// The sandbox's first process (and with it the sandbox) ended after
    /// the caller asked every process to end.
    Gone,
    /// The sandbox ended unasked: runsc (gVisor's kernel) died.
    Died,
    Timeout,
}

/// The channel's server.
pub(super) struct Server {
    pub runsc: Arc<Runsc>,
    pub channel: Arc<OwnedFd>,
    /// The first process's definition, each exec's starting point.
    pub process: Value,
    /// The directory `runsc exec`'s process files are written in.
    pub dir: PathBuf,
    /// The workspace as the sandbox writes it (`O_PATH`).
    pub files_root: Option<Arc<OwnedFd>>,
    /// The file system IDs file operations run with (root only).
    pub file_ids: Option<(u32, u32)>,
    pub netns: Option<Arc<OwnedFd>>,
    /// Request id -> its `runsc exec`: host PID, the file runsc writes
    /// the process's PID inside to.
    pub running: Arc<Mutex<HashMap<u64, (u32, PathBuf)>>>,
    /// What each process starts through (see [`super::shim`]).
    pub shim: super::shim::Shim,
    /// Terminals opened ahead, until a spawn takes one.
    pub terminals: Ahead,
    pub next: AtomicU64,
    /// The caller asked every process to end (`TermAll`).
    pub termed: bool,
}

impl Server {
    /// Serve until the channel ends, the sandbox ends or `deadline`.
    pub fn serve(&mut self, first: &mut Child, deadline: Option<Instant>) -> Ended {
        loop {
            if matches!(first.try_wait(), Ok(Some(_)) | Err(_)) {
                // The first process waits for ever: only an end asked
                // for, or runsc's own death, ends it.
                return if self.termed {
                    Ended::Gone
                } else {
                    Ended::Died
                };
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Ended::Timeout;
            }
            let ready = {
                let mut fds = [PollFd::new(self.channel.as_fd(), PollFlags::POLLIN)];
                match poll(&mut fds, PollTimeout::from(200u16)) {
                    Ok(n) if n > 0 => true,
                    Ok(_) | Err(Errno::EINTR) => false,
                    Err(_) => return Ended::Shutdown,
                }
            };
            if ready && !self.on_request() {
                return Ended::Shutdown;
            }
        }
    }

    fn on_request(&mut self) -> bool {
        let (req, fds) = match crate::spawn::read_request(self.channel.as_fd()) {
            Request::Closed => return false,
            Request::Nothing => return true,
            Request::Got(req, fds) => (req, fds),
        };
        match req {
            ToInit::Spawn {
                id,
                argv,
                env,
                cwd,
                tty,
                winsize,
                terminal,
            } => {
                let ask = Ask {
                    id,
                    argv,
                    env,
                    cwd,
                    tty,
                };
                if let Err(errno) = self.spawn(ask, winsize, terminal, fds) {
                    notify(self.channel.as_fd(), &FromInit::Failed { id, errno }, None);
                }
            }
            ToInit::OpenTerminal { id, winsize } => {
                let (errno, master) = match self.terminals.open_ahead(id, winsize) {
                    Ok(master) => (0, Some(master)),
                    Err(errno) => (errno, None),
                };
                notify(
                    self.channel.as_fd(),
                    &FromInit::FileDone { id, errno },
                    master.as_ref(),
                );
            }
            ToInit::Signal { id, signal } => {
                let found = self.running.lock().ok().and_then(|r| r.get(&id).cloned());
                if let Some((host, pid_file)) = found {
                    let runsc = self.runsc.clone();
                    // Inside, by the process's PID there (see `signal`):
                    // the host's `runsc exec` cannot pass a kill on. Off
                    // this thread: runsc is asked a few times.
                    std::thread::spawn(move || {
                        let inside = read_pid(&pid_file)
                            .is_some_and(|pid| super::signal::deliver(&runsc, pid, signal));
                        if !inside {
                            // Not yet running inside, or runsc could not
                            // say: the client, which passes on what it can.
                            if let Ok(sig) = nix::sys::signal::Signal::try_from(signal) {
                                let pid = nix::unistd::Pid::from_raw(host as i32);
                                let _ = nix::sys::signal::kill(pid, sig);
                            }
                        }
                    });
                }
            }
            ToInit::TermAll => {
                self.termed = true;
                let _ = self.runsc.kill_all("TERM");
            }
            ToInit::Shutdown => return false,
            ToInit::File { id, file } => {
                let root = self.files_root.clone();
                let ids = self.file_ids;
                let (errno, fd) = match root {
                    // ENOMEDIUM: no workspace to work in.
                    None => (libc::ENOMEDIUM, None),
                    Some(root) => std::thread::spawn(move || {
                        if let Some((uid, gid)) = ids {
                            // The file system IDs are this thread's own.
                            nix::unistd::setfsgid(nix::unistd::Gid::from_raw(gid));
                            nix::unistd::setfsuid(nix::unistd::Uid::from_raw(uid));
                        }
                        crate::files::serve(root.as_fd(), &file)
                    })
                    .join()
                    .unwrap_or((libc::EIO, None)),
                };
                notify(
                    self.channel.as_fd(),
                    &FromInit::FileDone { id, errno },
                    fd.as_ref(),
                );
            }
            ToInit::Connect { id, to } => {
                let (errno, fd) = match (&self.netns, &to) {
                    (Some(ns), crate::connect::Target::Tcp { .. }) => {
                        super::net::inside(ns, move || crate::connect::serve(&to, false))
                            .unwrap_or((libc::EIO, None))
                    }
                    // A Unix socket of gVisor's file tree is gVisor's own,
                    // not the host's; rootless there is no namespace here.
                    _ => (libc::EOPNOTSUPP, None),
                };
                notify(
                    self.channel.as_fd(),
                    &FromInit::FileDone { id, errno },
                    fd.as_ref(),
                );
            }
        }
        true
    }

    fn spawn(
        &mut self,
        ask: Ask,
        winsize: Option<(u16, u16)>,
        ahead: Option<u64>,
        fds: Vec<OwnedFd>,
    ) -> Result<(), i32> {
        if ask.argv.is_empty() {
            return Err(libc::ENOENT);
        }
        let Streams { stdio, master } =
            Streams::asked(ask.tty, ahead, winsize, fds, &mut self.terminals)?;
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let file = self.dir.join(format!("exec-{n}.json"));
        let pid_file = self.dir.join(format!("exec-{n}.pid"));
        let process = super::bundle::process(
            &self.process,
            &self.shim,
            &ask.argv,
            &ask.env,
            ask.cwd.as_deref(),
            ask.tty,
        );
        let text = serde_json::to_vec(&process).map_err(|_| libc::EINVAL)?;
        super::bundle::write_file(&file, &text).map_err(|_| libc::EIO)?;
        let [i, o, e] = stdio;
        let mut cmd = self.runsc.command();
        cmd.arg("exec")
            .arg(format!("--process={}", file.display()))
            .arg(format!("--internal-pid-file={}", pid_file.display()))
            .arg(&self.runsc.id)
            .stdin(Stdio::from(i))
            .stdout(Stdio::from(o))
            .stderr(Stdio::from(e));
        let child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                let _ = std::fs::remove_file(&file);
                return Err(e.raw_os_error().unwrap_or(libc::EIO));
            }
        };
        if let Ok(mut r) = self.running.lock() {
            r.insert(ask.id, (child.id(), pid_file.clone()));
        }
        let channel = self.channel.clone();
        let running = self.running.clone();
        let files = [file, pid_file];
        let runsc = self.runsc.clone();
        std::thread::spawn(move || watch(child, ask.id, files, master, channel, running, &runsc));
        Ok(())
    }
}

/// One process asked for.
struct Ask {
    id: u64,
    argv: Vec<String>,
    env: Vec<(String, String)>,
    cwd: Option<String>,
    tty: bool,
}

/// Say when the process runs (its PID inside, from runsc) and how it ended.
fn watch(
    mut child: Child,
    id: u64,
    [file, pid_file]: [PathBuf; 2],
    master: Option<OwnedFd>,
    channel: Arc<OwnedFd>,
    running: Arc<Mutex<HashMap<u64, (u32, PathBuf)>>>,
    runsc: &Runsc,
) {
    let start = Instant::now();
    let mut told = false;
    // Once runsc has written the process's PID: say it runs, once.
    let tell = |told: &mut bool| {
        if !*told {
            if let Some(pid) = read_pid(&pid_file) {
                let spawned = FromInit::Spawned { id, pid };
                notify(channel.as_fd(), &spawned, master.as_ref());
                *told = true;
            }
        }
    };
    let status = loop {
        tell(&mut told);
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if !told && start.elapsed() > START_LIMIT => {
                let _ = child.kill();
                break child.wait().ok();
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(if told { 50 } else { 5 })),
            Err(_) => break None,
        }
    };
    // A process that ended at once may have said so only now.
    tell(&mut told);
    // runsc reads the process file when it starts the process: removed
    // only once it has ended.
    let _ = std::fs::remove_file(&file);
    let _ = std::fs::remove_file(&pid_file);
    if let Ok(mut r) = running.lock() {
        r.remove(&id);
    }
    use std::os::unix::process::ExitStatusExt;
    let notice = match (told, status) {
        // runsc never said the process ran: it could not be started
        // (runsc answers 128 and says why on the process's stderr).
        (false, _) => FromInit::Failed {
            id,
            errno: libc::ENOENT,
        },
        // runsc answers 128 for its own failure: with the sandbox gone
        // (gVisor's kernel died), the process died with it, a kill, never
        // an exit status of its own. The sandbox's end says why.
        (true, Some(s)) if s.code() == Some(128) && !runs(runsc) => FromInit::Signaled {
            id,
            signal: libc::SIGKILL,
        },
        (true, Some(s)) => match (s.code(), s.signal()) {
            (Some(code), _) => FromInit::Exited { id, code },
            (None, Some(signal)) => FromInit::Signaled { id, signal },
            _ => FromInit::Exited { id, code: 255 },
        },
        (true, None) => FromInit::Exited { id, code: 255 },
    };
    notify(channel.as_fd(), &notice, None);
}

/// Whether runsc says the sandbox still runs (or stands paused).
fn runs(runsc: &Runsc) -> bool {
    matches!(runsc.status().as_deref(), Some("running" | "paused"))
}

fn read_pid(file: &std::path::Path) -> Option<i32> {
    std::fs::read_to_string(file).ok()?.trim().parse().ok()
}
