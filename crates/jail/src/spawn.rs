//! The spawn protocol between a supervisor and the init of a long-lived
//! sandbox: the supervisor asks for a process (argv, environment, working
//! directory, terminal or pipes, passed as descriptors), the init starts it
//! with every restriction the init itself carries (same namespaces,
//! Landlock domain, seccomp filter, cgroup, no capabilities), and reports
//! when it started and how it ended.
//!
//! One message per `SOCK_SEQPACKET` packet, JSON. What comes from the init
//! is parsed as untrusted input (bounded, typed); the init is non-dumpable,
//! so no process of the sandbox can reach its end of the channel.

use nix::errno::Errno;
use nix::sys::signal::Signal;
use nix::unistd::Pid;
use std::collections::HashMap;
use std::ffi::CString;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// Signals forwarded from the init to the command.
pub const FORWARDED: &[Signal] = &[
    Signal::SIGINT,
    Signal::SIGTERM,
    Signal::SIGHUP,
    Signal::SIGQUIT,
    Signal::SIGUSR1,
    Signal::SIGUSR2,
    Signal::SIGWINCH,
];

/// Find `argv[0]` in the sandbox's own PATH (after the pivot, so what is
/// found is what the sandbox sees).
pub(crate) fn resolve_program(argv: &[CString], path_var: &str) -> Option<CString> {
    let name = argv.first()?;
    if name.as_bytes().contains(&b'/') {
        return Some(name.clone());
    }
    for dir in path_var.split(':').filter(|d| !d.is_empty()) {
        let candidate = Path::new(dir).join(std::ffi::OsStr::from_bytes(name.as_bytes()));
        if let Ok(meta) = std::fs::metadata(&candidate) {
            if meta.is_file() {
                return CString::new(candidate.as_os_str().as_bytes()).ok();
            }
        }
    }
    None
}

/// The messages are the protocol's: sent, received and served here.
pub use warden_protocol::spawn::{FromInit, ToInit, MAX_REQUEST};

/// Largest notice the supervisor reads from the init.
const MAX_NOTICE: usize = 4096;

/// Why a request could not be sent.
#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    #[error("the request is too large ({0} bytes; the command and environment of one process are limited to {MAX_REQUEST} bytes)")]
    TooLarge(usize),
    #[error("a string of the request contains a NUL byte")]
    Nul,
    #[error("cannot reach the sandbox's init (it has stopped)")]
    Channel(#[source] Errno),
    #[error("cannot encode the request")]
    Encode(#[source] serde_json::Error),
}

/// Send one request, with its descriptors.
pub fn send(channel: BorrowedFd<'_>, msg: &ToInit, fds: &[RawFd]) -> Result<(), SpawnError> {
    let bytes = serde_json::to_vec(msg).map_err(SpawnError::Encode)?;
    if bytes.len() > MAX_REQUEST {
        return Err(SpawnError::TooLarge(bytes.len()));
    }
    if let ToInit::Spawn { argv, env, cwd, .. } = msg {
        let nul = |s: &str| s.as_bytes().contains(&0);
        if argv.iter().any(|a| nul(a))
            || env.iter().any(|(k, v)| nul(k) || nul(v) || k.contains('='))
            || cwd.as_deref().is_some_and(nul)
        {
            return Err(SpawnError::Nul);
        }
    }
    loop {
        match crate::fdpass::send(channel, &bytes, fds) {
            Ok(_) => return Ok(()),
            Err(Errno::EINTR) => continue,
            Err(e) => return Err(SpawnError::Channel(e)),
        }
    }
}

/// Read one notice from the init, with the terminal's master side for a
/// `spawned` of a process that asked for one; `Ok(None)` when the channel
/// closed (the init is gone). Malformed notices are skipped.
pub fn receive(channel: BorrowedFd<'_>) -> Result<Option<(FromInit, Option<OwnedFd>)>, Errno> {
    let mut buf = vec![0u8; MAX_NOTICE];
    loop {
        match crate::fdpass::recv(channel, &mut buf) {
            Ok((0, _)) => return Ok(None),
            Ok((n, fds)) => {
                if let Ok(notice) = serde_json::from_slice::<FromInit>(&buf[..n]) {
                    // Only a `spawned` carries a descriptor, and only one;
                    // anything else that came is closed here.
                    let master = match notice {
                        FromInit::Spawned { .. } | FromInit::FileDone { .. } => {
                            fds.into_iter().next()
                        }
                        _ => None,
                    };
                    return Ok(Some((notice, master)));
                }
            }
            Err(Errno::EINTR) => continue,
            Err(e) => return Err(e),
        }
    }
}

/// One read of a server of requests: the init's, the host-side stand-in
/// of a gVisor sandbox ([`crate::gvisor`]), or a VM's relay.
pub enum Request {
    /// The channel closed or failed: the sandbox is to end.
    Closed,
    /// Nothing to serve this time (interrupted, or not a request).
    Nothing,
    /// A request and the descriptors that came with it.
    Got(ToInit, Vec<OwnedFd>),
}

/// Read one request from `channel`.
pub fn read_request(channel: BorrowedFd<'_>) -> Request {
    let mut buf = vec![0u8; MAX_REQUEST + 1];
    let (n, fds) = match crate::fdpass::recv(channel, &mut buf) {
        Ok((0, _)) => return Request::Closed,
        Ok(x) => x,
        Err(Errno::EINTR) | Err(Errno::EAGAIN) => return Request::Nothing,
        Err(_) => return Request::Closed,
    };
    match serde_json::from_slice::<ToInit>(&buf[..n]) {
        Ok(req) => Request::Got(req, fds),
        Err(_) => Request::Nothing,
    }
}

/// Tell the supervisor `notice`, with `fd` (a terminal's master side, a
/// file or a connection) when one goes with it. A supervisor that is gone
/// is not an error of the server's: it sees the channel close.
pub fn notify(channel: BorrowedFd<'_>, notice: &FromInit, fd: Option<&OwnedFd>) {
    if let Ok(bytes) = serde_json::to_vec(notice) {
        let fds: Vec<RawFd> = fd.iter().map(|f| f.as_raw_fd()).collect();
        let _ = crate::fdpass::send(channel, &bytes, &fds);
    }
}

/// Where a server of the protocol gets a process's terminal: the servers
/// (the init, gVisor's stand-in, a VM's relay) differ only here.
pub trait Terminals {
    /// The slave side of the terminal opened ahead under `id`.
    fn take(&mut self, id: u64) -> Result<OwnedFd, i32>;
    /// A new terminal for one process: (master, slave).
    fn open(&mut self, winsize: Option<(u16, u16)>) -> Result<(OwnedFd, OwnedFd), i32>;
}

/// Terminals of this process's devpts, those opened ahead of their
/// process (`OpenTerminal`) kept by id until a spawn takes one.
#[derive(Default)]
pub struct Ahead(HashMap<u64, OwnedFd>);

impl Ahead {
    /// `OpenTerminal`: a terminal whose slave side waits here under `id`;
    /// its master side is the caller's.
    pub fn open_ahead(&mut self, id: u64, winsize: Option<(u16, u16)>) -> Result<OwnedFd, i32> {
        let (master, slave) = open_terminal(winsize)?;
        self.0.insert(id, slave);
        Ok(master)
    }
}

impl Terminals for Ahead {
    fn take(&mut self, id: u64) -> Result<OwnedFd, i32> {
        self.0.remove(&id).ok_or(libc::EBADF)
    }

    fn open(&mut self, winsize: Option<(u16, u16)>) -> Result<(OwnedFd, OwnedFd), i32> {
        open_terminal(winsize)
    }
}

/// A process's standard streams as its `Spawn` asked for them, and the
/// master side of a terminal opened for it (the caller's).
pub struct Streams {
    pub stdio: [OwnedFd; 3],
    pub master: Option<OwnedFd>,
}

impl Streams {
    /// With `tty`, a terminal: the one opened ahead under `ahead`, or a
    /// new one at `winsize` (rows, columns); without, the first three of
    /// the descriptors that came with the request. An errno otherwise.
    pub fn asked(
        tty: bool,
        ahead: Option<u64>,
        winsize: Option<(u16, u16)>,
        fds: Vec<OwnedFd>,
        terminals: &mut impl Terminals,
    ) -> Result<Streams, i32> {
        if !tty {
            let mut it = fds.into_iter();
            return match (it.next(), it.next(), it.next()) {
                (Some(i), Some(o), Some(e)) => Ok(Streams {
                    stdio: [i, o, e],
                    master: None,
                }),
                _ => Err(libc::EBADF),
            };
        }
        let (master, slave) = match ahead {
            Some(t) => (None, terminals.take(t)?),
            None => {
                let (m, s) = terminals.open(winsize)?;
                (Some(m), s)
            }
        };
        let dup = |f: &OwnedFd| {
            f.try_clone()
                .map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))
        };
        Ok(Streams {
            stdio: [dup(&slave)?, dup(&slave)?, slave],
            master,
        })
    }
}

/// The init's side: serves requests until the channel closes or a
/// `Shutdown` comes, reaping every process of the sandbox meanwhile.
pub(crate) struct Server<'a> {
    pub channel: OwnedFd,
    /// The sandbox's environment, as the one-shot command would get it.
    pub env: &'a [CString],
    pub cwd: &'a Path,
    pub degraded: bool,
    pub mask: nix::sys::signal::SigSet,
    /// The exec allowlist, when there is one: its loaders are refused as
    /// a command here as for `warden run`'s ([`crate::exec_rules::refuse_loader`]).
    pub exec_allowed: Option<&'a crate::exec_rules::Allowed>,
    /// PID inside the sandbox -> request id, for the processes started here.
    pub running: HashMap<i32, u64>,
    /// The workspace and the sandbox's root (`O_PATH`), opened before any
    /// process of the sandbox ran; file operations are refused (ENOMEDIUM)
    /// without the root (degraded).
    pub files: crate::files::OwnedRoots,
    /// Terminals opened ahead (`OpenTerminal`), until a spawn takes one.
    pub terminals: Ahead,
}

impl Server<'_> {
    /// Handle one packet; false when the sandbox is to end.
    pub fn on_request(&mut self) -> bool {
        let (req, fds) = match read_request(self.channel.as_fd()) {
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
                terminal: ahead,
            } => {
                let streams = match Streams::asked(tty, ahead, winsize, fds, &mut self.terminals) {
                    Ok(s) => s,
                    Err(errno) => {
                        self.notify(&FromInit::Failed { id, errno }, None);
                        return true;
                    }
                };
                let stdio = streams.stdio.each_ref().map(|f| f.as_raw_fd());
                let (notice, master) = match self.spawn(&argv, &env, cwd.as_deref(), tty, stdio) {
                    Ok(pid) => {
                        self.running.insert(pid.as_raw(), id);
                        let pid = pid.as_raw();
                        (FromInit::Spawned { id, pid }, streams.master)
                    }
                    Err(errno) => (FromInit::Failed { id, errno }, None),
                };
                // The process holds its own copies of the streams (closed
                // here when `streams` goes).
                self.notify(&notice, master.as_ref());
            }
            ToInit::OpenTerminal { id, winsize } => {
                drop(fds);
                let (errno, master) = match self.terminals.open_ahead(id, winsize) {
                    Ok(master) => (0, Some(master)),
                    Err(errno) => (errno, None),
                };
                self.notify(&FromInit::FileDone { id, errno }, master.as_ref());
            }
            ToInit::Signal { id, signal } => {
                if let (Some(pid), Ok(sig)) = (
                    self.running
                        .iter()
                        .find(|(_, v)| **v == id)
                        .map(|(pid, _)| *pid),
                    Signal::try_from(signal),
                ) {
                    // A kill ends every process it started, however it
                    // detached itself: the process is their subreaper
                    // (outside review F5: a `setsid` child ran on).
                    if sig == Signal::SIGKILL {
                        kill_tree(pid);
                    }
                    // The process group it leads, then the process itself
                    // (should it have left its group).
                    let _ = nix::sys::signal::killpg(Pid::from_raw(pid), sig);
                    let _ = nix::sys::signal::kill(Pid::from_raw(pid), sig);
                }
            }
            ToInit::TermAll => {
                // PID 1 of the namespace: -1 reaches every other process of
                // the sandbox, and only those.
                let _ = nix::sys::signal::kill(Pid::from_raw(-1), Signal::SIGTERM);
            }
            ToInit::Shutdown => return false,
            ToInit::File { id, file } => {
                drop(fds);
                // ENOMEDIUM: no workspace to work in, nor a root (degraded).
                let roots = self.files.roots();
                let (errno, fd) = match roots.root {
                    Some(_) => crate::files::serve_in(roots, &file),
                    None => (libc::ENOMEDIUM, None),
                };
                let notice = FromInit::FileDone { id, errno };
                self.notify(&notice, fd.as_ref());
            }
            ToInit::Connect { id, to } => {
                drop(fds);
                let (errno, fd) = crate::connect::serve(&to, self.degraded);
                self.notify(&FromInit::FileDone { id, errno }, fd.as_ref());
            }
        }
        true
    }

    /// A child ended: tell the supervisor when it was one of ours.
    pub fn on_exit(&mut self, pid: Pid, notice: impl FnOnce(u64) -> FromInit) {
        if let Some(id) = self.running.remove(&pid.as_raw()) {
            self.notify(&notice(id), None);
        }
    }

    fn notify(&self, notice: &FromInit, fd: Option<&OwnedFd>) {
        notify(self.channel.as_fd(), notice, fd);
    }

    fn spawn(
        &self,
        argv: &[String],
        extra_env: &[(String, String)],
        cwd: Option<&str>,
        tty: bool,
        stdio: [RawFd; 3],
    ) -> Result<Pid, i32> {
        let cstr = |s: &str| CString::new(s).map_err(|_| libc::EINVAL);
        let argv_c = argv
            .iter()
            .map(|a| cstr(a))
            .collect::<Result<Vec<_>, _>>()?;
        if argv_c.is_empty() {
            return Err(libc::ENOENT);
        }
        // The sandbox's environment, with the request's variables in place
        // of those of the same name.
        let mut env: Vec<CString> = self
            .env
            .iter()
            .filter(|kv| {
                let key = kv.as_bytes().split(|b| *b == b'=').next().unwrap_or(b"");
                !extra_env.iter().any(|(k, _)| k.as_bytes() == key)
            })
            .cloned()
            .collect();
        for (k, v) in extra_env {
            env.push(cstr(&format!("{k}={v}"))?);
        }
        let path_var = env
            .iter()
            .find_map(|kv| kv.to_str().ok()?.strip_prefix("PATH=").map(str::to_string))
            .unwrap_or_default();
        let program = resolve_program(&argv_c, &path_var).ok_or(libc::ENOENT)?;
        crate::exec_rules::refuse_loader(self.exec_allowed, &program)?;
        let cwd = match cwd {
            Some(c) => cstr(c)?,
            None => CString::new(self.cwd.as_os_str().as_bytes()).map_err(|_| libc::EINVAL)?,
        };
        let ptrs = |v: &[CString]| {
            v.iter()
                .map(|c| c.as_ptr())
                .chain(std::iter::once(std::ptr::null()))
                .collect::<Vec<_>>()
        };
        let plan = Launch {
            program,
            argv: ptrs(&argv_c),
            envp: ptrs(&env),
            cwd,
            stdio,
            tty,
            degraded: self.degraded,
            mask: self.mask,
            errno: std::cell::Cell::new(0),
        };
        let pid = plan.spawn()?;
        match plan.errno.get() {
            0 => Ok(pid),
            // The process failed before or at exec and has exited; the
            // reaper collects it (it was never in `running`).
            e => Err(e),
        }
    }
}

/// How many rounds of stopping a tree may take before it is killed as found.
const TREE_ROUNDS: usize = 8;

/// Stop `root` and every process below it until no new one appears (a
/// stopped process forks no more), then kill them all. The sandbox's own
/// `/proc` says who is whose child.
fn kill_tree(root: i32) {
    let mut stopped: Vec<i32> = Vec::new();
    for _ in 0..TREE_ROUNDS {
        let fresh: Vec<i32> = below(root)
            .into_iter()
            .filter(|p| !stopped.contains(p))
            .collect();
        if fresh.is_empty() {
            break;
        }
        for p in fresh {
            let _ = nix::sys::signal::kill(Pid::from_raw(p), Signal::SIGSTOP);
            stopped.push(p);
        }
    }
    for p in stopped {
        let _ = nix::sys::signal::kill(Pid::from_raw(p), Signal::SIGKILL);
    }
}

/// `root` and its descendants, parents first, by `/proc/PID/stat`.
fn below(root: i32) -> Vec<i32> {
    let parents: Vec<(i32, i32)> = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let pid: i32 = e.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            // After the command's name, which may hold spaces and parentheses.
            let rest = &stat[stat.rfind(')')? + 1..];
            Some((pid, rest.split_whitespace().nth(1)?.parse().ok()?))
        })
        .collect();
    let mut out = vec![root];
    let mut i = 0;
    while i < out.len() {
        let parent = out[i];
        out.extend(
            parents
                .iter()
                .filter(|(p, pp)| *pp == parent && !out.contains(p))
                .map(|(p, _)| *p)
                .collect::<Vec<_>>(),
        );
        i += 1;
    }
    out
}

/// A process to start, prepared so that the child, which shares the
/// init's memory until it execs, allocates nothing.
struct Launch {
    program: CString,
    argv: Vec<*const libc::c_char>,
    envp: Vec<*const libc::c_char>,
    cwd: CString,
    stdio: [RawFd; 3],
    tty: bool,
    degraded: bool,
    mask: nix::sys::signal::SigSet,
    /// Set by the child when it fails before exec (shared memory: the child
    /// runs with CLONE_VM while the init waits).
    errno: std::cell::Cell<i32>,
}

impl Launch {
    fn spawn(&self) -> Result<Pid, i32> {
        // SAFETY: `exec_in_child` only calls async-signal-safe functions on
        // memory prepared before the clone.
        let pid = unsafe { crate::sys::clone_vfork(Box::new(|| self.exec_in_child())) };
        pid.map_err(|e| e as i32)
    }

    fn exec_in_child(&self) -> isize {
        // SAFETY: every call below takes integers or pointers to memory that
        // `self` keeps alive, and is async-signal-safe; the process execs or
        // leaves with _exit. `errno` is a Cell in memory shared with the
        // suspended init, written before _exit only.
        unsafe {
            // Its own session: a process group the supervisor can signal
            // as a whole, and (with a terminal) a controlling terminal.
            libc::setsid();
            // The subreaper of all it starts (kept across its exec): a
            // process that leaves its tree (`setsid` and exit, a double
            // fork) stays below it, where its kill finds it.
            libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1 as libc::c_ulong, 0, 0, 0);
            if self.tty {
                libc::ioctl(self.stdio[0], libc::TIOCSCTTY, 0);
            }
            // Descriptors may sit on 0..2 already: duplicate above first.
            let mut high = [0 as RawFd; 3];
            for (i, fd) in self.stdio.iter().enumerate() {
                high[i] = libc::fcntl(*fd, libc::F_DUPFD, 10);
            }
            for (i, fd) in high.iter().enumerate() {
                libc::dup2(*fd, i as RawFd);
            }
            if self.degraded {
                libc::prctl(
                    libc::PR_SET_PDEATHSIG,
                    libc::SIGKILL as libc::c_ulong,
                    0,
                    0,
                    0,
                );
            }
            if libc::chdir(self.cwd.as_ptr()) != 0 {
                self.errno.set(*libc::__errno_location());
                libc::_exit(126);
            }
            for s in FORWARDED.iter().chain(&[Signal::SIGCHLD, Signal::SIGPIPE]) {
                libc::signal(*s as libc::c_int, libc::SIG_DFL);
            }
            libc::pthread_sigmask(libc::SIG_SETMASK, self.mask.as_ref(), std::ptr::null_mut());
            crate::sys::cloexec_from_3();
            libc::execve(
                self.program.as_ptr(),
                self.argv.as_ptr(),
                self.envp.as_ptr(),
            );
            let errno = *libc::__errno_location();
            self.errno
                .set(if errno == 0 { libc::ENOEXEC } else { errno });
            libc::_exit(if errno == libc::ENOENT { 127 } else { 126 })
        }
    }
}

/// A terminal in the sandbox's own devpts: (master, slave), the slave at
/// `winsize` (rows, columns) when given.
pub fn open_terminal(winsize: Option<(u16, u16)>) -> Result<(OwnedFd, OwnedFd), i32> {
    use nix::fcntl::OFlag;
    let master = nix::pty::posix_openpt(OFlag::O_RDWR | OFlag::O_NOCTTY | OFlag::O_CLOEXEC)
        .map_err(|e| e as i32)?;
    nix::pty::grantpt(&master).map_err(|e| e as i32)?;
    nix::pty::unlockpt(&master).map_err(|e| e as i32)?;
    let name = nix::pty::ptsname_r(&master).map_err(|e| e as i32)?;
    let slave = nix::fcntl::open(
        name.as_str(),
        OFlag::O_RDWR | OFlag::O_NOCTTY | OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )
    .map_err(|e| e as i32)?;
    if let Some((rows, cols)) = winsize {
        crate::pty::set_window_size(slave.as_fd(), rows, cols);
    }
    let master: OwnedFd = master.into();
    Ok((master, slave))
}
