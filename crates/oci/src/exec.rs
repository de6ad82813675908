//! `exec`: another process in a running container, through its
//! supervisor. With `--detach`, a small waiter of this binary stays behind
//! (its PID is the one in `--pid-file`): it holds the exec's control
//! connection and exits with the process's status, so containerd's shim,
//! which reaps it, learns the exec's exit as it would from runc's.

use crate::container::{self, OciError, Status};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::time::Duration;
use warden_policy::oci;
use warden_runtime::client::{self, Connection};
use warden_runtime::protocol::ExecRequest;

/// Hidden verb the detached waiter runs.
pub const WAITER: &str = "__exec-wait";
/// Hidden verb of the guard that ends an exec whose waiter was killed.
pub const GUARD: &str = "__exec-guard";

/// A process of this binary that ends exec `exec` if the process that
/// started it (the one in the pid file, which the shim signals) dies
/// without saying it is done: SIGKILL cannot be caught and passed on, but
/// the end of a pipe only the starter holds is seen by the guard.
pub struct Guard(Option<std::process::Child>);

impl Guard {
    fn start(root: &Path, id: &str, exec: u64) -> Result<Guard, OciError> {
        let exe = crate::create::own_exe()?;
        let child = std::process::Command::new(exe)
            .arg(GUARD)
            .arg(root)
            .arg(id)
            .arg(exec.to_string())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .map_err(|source| OciError::Spawn {
                what: "the exec's guard",
                source,
            })?;
        Ok(Guard(Some(child)))
    }

    /// The exec has ended: the guard leaves without doing anything.
    fn done(mut self) {
        if let Some(mut c) = self.0.take() {
            if let Some(mut stdin) = c.stdin.take() {
                let _ = std::io::Write::write_all(&mut stdin, b"d");
            }
            let _ = c.wait();
        }
    }
}

/// The guard: wait for its starter to say it is done; if the starter is
/// gone instead (end of file), end the exec's process and its group.
pub fn guard(root: &Path, id: &str, exec: u64) -> Result<(), OciError> {
    let mut byte = [0u8; 1];
    if matches!(std::io::Read::read(&mut std::io::stdin(), &mut byte), Ok(1)) {
        return Ok(());
    }
    let c = container::find(&container::store(root)?, id)?;
    Connection::open(&c.control())?.signal(exec, libc::SIGKILL)?;
    Ok(())
}

/// The process to start: a process file, else the command and flags.
pub fn request(a: &crate::args::ExecArgs) -> Result<ExecRequest, OciError> {
    if let Some(path) = &a.process {
        let text = std::fs::read_to_string(path).map_err(|source| OciError::Read {
            path: path.clone(),
            source,
        })?;
        let perr = |error| OciError::ProcessFile {
            path: path.clone(),
            error,
        };
        let p = oci::parse_process(&text).map_err(perr)?;
        let p = oci::process_request(&p, "process").map_err(perr)?;
        return Ok(ExecRequest {
            argv: p.args,
            env: p.env,
            cwd: p.cwd,
            tty: p.terminal || a.tty,
            winsize: None,
            keep_output: None,
        });
    }
    let mut p = oci::Process {
        terminal: a.tty,
        args: a.command.clone(),
        env: a.env.clone(),
        cwd: a.cwd.clone().unwrap_or_default(),
        user: None,
    };
    p.args.retain(|x| !x.is_empty());
    let p = oci::process_request(&p, "exec").map_err(|error| OciError::ProcessFile {
        path: PathBuf::from("(command line)"),
        error,
    })?;
    Ok(ExecRequest {
        argv: p.args,
        env: p.env,
        cwd: p.cwd,
        tty: p.terminal,
        winsize: None,
        keep_output: None,
    })
}

/// Run `req` in container `id` and wait for it; its status. The PID in
/// `pid_file` is this process's, written once the process runs.
pub fn run(
    root: &Path,
    id: &str,
    req: ExecRequest,
    console: Option<&Path>,
    pid_file: Option<&Path>,
) -> Result<i32, OciError> {
    let c = container::find(&container::store(root)?, id)?;
    if c.status().0 == Status::Stopped {
        return Err(OciError::WrongState {
            id: id.into(),
            status: "stopped",
            what: "a process can only be added to a created or running container",
        });
    }
    let tty = req.tty;
    let control = c.control();
    if !tty {
        // A signal sent to this process (the shim signals an exec through
        // the PID in its pid file) is passed on to the exec's process.
        client::hold_forwarded_signals()?;
    }
    let conn = Connection::open(&control)?;
    // With a pid file, this process stands for the exec (the shim signals
    // it): a guard ends the exec should this process be killed.
    let guarded = |exec: u64| -> Result<Option<Guard>, OciError> {
        match pid_file {
            Some(p) => {
                let g = Guard::start(root, id, exec)?;
                container::write_pid_file(p, std::process::id())?;
                Ok(Some(g))
            }
            None => Ok(None),
        }
    };
    if tty {
        let mut running = conn.exec(req, &[])?;
        let guard = guarded(running.exec)?;
        let status = match console {
            Some(sock) => {
                let master = running.take_master().ok_or(OciError::Unsupported(
                    "the sandbox sent no terminal for a --tty exec".into(),
                ))?;
                container_console(sock, &master)?;
                drop(master);
                running.wait()?.status
            }
            None => client::relay_terminal(running)?.status,
        };
        if let Some(g) = guard {
            g.done();
        }
        return Ok(status);
    }
    // The caller's pipes and files (the shim's fifos) go to the process
    // as they are.
    let stdio = client::CallerStdio::new()?;
    let running = conn.exec(req, &stdio.fds())?;
    let guard = guarded(running.exec)?;
    let status = client::wait_forwarding(running, &control, stdio.into_relay())?.status;
    if let Some(g) = guard {
        g.done();
    }
    Ok(status)
}

fn container_console(sock: &Path, master: &std::os::fd::OwnedFd) -> Result<(), OciError> {
    crate::console::send_master(sock, master.as_fd())
}

/// `exec --detach`: start the waiter (`exe __exec-wait ...`, with this
/// process's stdio) and return once the process runs, or with why not.
pub fn detach(
    root: &Path,
    id: &str,
    req: &ExecRequest,
    console: Option<&Path>,
    pid_file: Option<&Path>,
    exe: &Path,
) -> Result<(), OciError> {
    // The waiter says it runs by writing the PID file; without one asked
    // for, one of our own under --root.
    let own = root.join(format!(".exec-{}.pid", std::process::id()));
    let pid_path = pid_file.map(Path::to_path_buf).unwrap_or(own.clone());
    let _ = std::fs::remove_file(&pid_path);
    let json = serde_json::to_string(req).map_err(|e| OciError::Unsupported(e.to_string()))?;
    let mut cmd = std::process::Command::new(exe);
    cmd.arg(WAITER)
        .arg(root)
        .arg(id)
        .arg(&pid_path)
        .arg(console.map(Path::as_os_str).unwrap_or_default())
        .arg(json);
    let mut child = cmd.spawn().map_err(|source| OciError::Spawn {
        what: "the exec's waiter",
        source,
    })?;
    loop {
        if pid_path.exists() {
            if pid_file.is_none() {
                let _ = std::fs::remove_file(&own);
            }
            return Ok(());
        }
        if let Ok(Some(status)) = child.try_wait() {
            return Err(OciError::Unsupported(format!(
                "the exec did not start (its waiter ended with {status}; see the message above)"
            )));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}
