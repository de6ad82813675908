//! The guest init's spawn server: processes started on request, their
//! streams relayed as frames, every child reaped (PID 1 adopts orphans),
//! each requested process's end reported after the last byte of its output.

use crate::wire::{Ended, Frame, Kind, Spawn, CHUNK, CONNECTION};
use nix::sys::signal::{kill, killpg, Signal};
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::Pid;
use std::collections::HashMap;
use std::fs::File;
use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Mutex};

type Writer = Arc<Mutex<File>>;

fn send(w: &Writer, frame: Frame) {
    if let Ok(mut f) = w.lock() {
        let _ = frame.write_to(&mut *f);
    }
}

/// What the reaper knows: who waits for which PID, and the ends that came
/// before anyone asked (a process that ended before it was registered).
#[derive(Default)]
struct Reaped {
    waiting: HashMap<i32, Sender<Ended>>,
    early: HashMap<i32, Ended>,
}

fn reaper(state: Arc<Mutex<Reaped>>) {
    loop {
        match waitpid(None::<Pid>, None) {
            Ok(status) => {
                let (pid, ended) = match status {
                    WaitStatus::Exited(pid, code) => (pid, Ended::Exited(code)),
                    WaitStatus::Signaled(pid, sig, _) => (pid, Ended::Signaled(sig as i32)),
                    _ => continue,
                };
                if let Ok(mut s) = state.lock() {
                    match s.waiting.remove(&pid.as_raw()) {
                        Some(tx) => {
                            let _ = tx.send(ended);
                        }
                        None => {
                            // An orphan, or one of ours not registered yet;
                            // orphans' ends are never asked for, so only a
                            // bounded number is kept.
                            if s.early.len() > 4096 {
                                s.early.clear();
                            }
                            s.early.insert(pid.as_raw(), ended);
                        }
                    }
                }
            }
            Err(nix::errno::Errno::EINTR) => {}
            Err(_) => std::thread::sleep(std::time::Duration::from_millis(20)),
        }
    }
}

/// Relay one output stream of a process as frames of `kind`.
fn pump_out(mut from: impl Read, kind: Kind, id: u64, w: Writer) {
    let mut buf = vec![0u8; CHUNK];
    loop {
        match from.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => send(&w, Frame::new(kind, id, buf[..n].to_vec())),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return,
        }
    }
}

/// The processes started on request and not ended yet, by request id.
type Running2 = Arc<Mutex<HashMap<u64, Running>>>;

fn lock(r: &Running2) -> std::sync::MutexGuard<'_, HashMap<u64, Running>> {
    r.lock().unwrap_or_else(|p| p.into_inner())
}

struct Running {
    pid: i32,
    stdin: Option<Sender<Option<Vec<u8>>>>,
}

/// Whether `prog` names a program file (through `PATH` of `env` when it
/// has no slash): a launcher ([`super::launch`]) reports a missing program
/// only as its exit status, so the init refuses it first, as a direct
/// spawn does.
fn findable(prog: &str, env: &[(String, String)]) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let runnable = |p: &std::path::Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if prog.contains('/') {
        return runnable(std::path::Path::new(prog));
    }
    let path = env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.as_str())
        .unwrap_or("/usr/local/bin:/usr/bin:/bin");
    path.split(':')
        .any(|d| !d.is_empty() && runnable(&std::path::Path::new(d).join(prog)))
}

fn spawn(
    id: u64,
    req: Spawn,
    w: &Writer,
    reaped: &Arc<Mutex<Reaped>>,
    running: &Running2,
    launch: Option<&super::launch::Launch>,
) -> Result<i32, i32> {
    let Some((prog, args)) = req.argv.split_first() else {
        return Err(nix::errno::Errno::EINVAL as i32);
    };
    let io_err = |e: std::io::Error| e.raw_os_error().unwrap_or(nix::errno::Errno::EIO as i32);
    let mut command = match launch {
        Some(l) => {
            if !findable(prog, &req.env) {
                return Err(nix::errno::Errno::ENOENT as i32);
            }
            let mut c = Command::new(l.program());
            c.args(l.args()).arg(prog);
            c
        }
        None => Command::new(prog),
    };
    command
        .args(args)
        .env_clear()
        .envs(req.env.iter().map(|(k, v)| (k, v)))
        .current_dir(&req.cwd);
    // With a terminal: the slave side of one of the guest's own is the
    // process's 0, 1, 2 and controlling terminal; its master side is read
    // as the process's stdout and written with its stdin.
    let master = if req.tty {
        let (master, slave) = warden_jail::spawn::open_terminal(req.winsize)?;
        let dup = |fd: &std::os::fd::OwnedFd| fd.try_clone().map(Stdio::from).map_err(io_err);
        command
            .stdin(dup(&slave)?)
            .stdout(dup(&slave)?)
            .stderr(Stdio::from(slave));
        warden_jail::pty::controlling_terminal(&mut command);
        Some(File::from(master))
    } else {
        command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        None
    };
    let mut child = command.spawn().map_err(io_err)?;
    // Our copies of the slave side go with `command`: the master then
    // reads the end of the output once the process's side is closed.
    drop(command);
    let pid = child.id() as i32;
    let (tx_end, rx_end) = channel();
    if let Ok(mut s) = reaped.lock() {
        match s.early.remove(&pid) {
            Some(e) => {
                let _ = tx_end.send(e);
            }
            None => {
                s.waiting.insert(pid, tx_end);
            }
        }
    }
    let (terminal_in, terminal_out) = match master {
        Some(m) => (Some(m.try_clone().map_err(io_err)?), Some(m)),
        None => (None, None),
    };
    let out = match terminal_out {
        Some(m) => {
            let w = w.clone();
            Some(std::thread::spawn(move || pump_out(m, Kind::Stdout, id, w)))
        }
        None => child.stdout.take().map(|o| {
            let w = w.clone();
            std::thread::spawn(move || pump_out(o, Kind::Stdout, id, w))
        }),
    };
    let err = child.stderr.take().map(|o| {
        let w = w.clone();
        std::thread::spawn(move || pump_out(o, Kind::Stderr, id, w))
    });
    let (tx_in, rx_in) = channel::<Option<Vec<u8>>>();
    let stdin: Option<Box<dyn Write + Send>> = match terminal_in {
        Some(m) => Some(Box::new(m)),
        None => child
            .stdin
            .take()
            .map(|s| Box::new(s) as Box<dyn Write + Send>),
    };
    if let Some(mut stdin) = stdin {
        std::thread::spawn(move || {
            while let Ok(Some(data)) = rx_in.recv() {
                if stdin.write_all(&data).is_err() {
                    break;
                }
            }
        });
    }
    lock(running).insert(
        id,
        Running {
            pid,
            stdin: Some(tx_in),
        },
    );
    let (w2, running) = (w.clone(), running.clone());
    std::thread::spawn(move || {
        for t in [out, err].into_iter().flatten() {
            let _ = t.join();
        }
        if let Ok(ended) = rx_end.recv() {
            lock(&running).remove(&id);
            send(&w2, Frame::json(Kind::Ended, id, &ended));
        }
    });
    Ok(pid)
}

/// Serve until the host asks for a shutdown or its end of the port closes.
pub(super) fn serve(mut port: File, w: File, mut held: super::setup::Held) {
    let w: Writer = Arc::new(Mutex::new(w));
    let reaped = Arc::new(Mutex::new(Reaped::default()));
    {
        let r = reaped.clone();
        std::thread::spawn(move || reaper(r));
    }
    let running: Running2 = Arc::new(Mutex::new(HashMap::new()));
    let conns: super::connect::Conns = Arc::default();
    loop {
        let frame = match Frame::read_from(&mut port) {
            Ok(Some(f)) => f,
            // The host's end closed (it connects before the guest boots,
            // so this is its end): nobody is left to serve.
            Ok(None) => break,
            Err(e) => {
                super::console(&format!("the channel failed: {e}"));
                break;
            }
        };
        match frame.kind {
            // A process's id never has the connections' bit.
            Kind::Spawn if frame.id & CONNECTION != 0 => send(
                &w,
                Frame::json(Kind::Failed, frame.id, &(nix::errno::Errno::EINVAL as i32)),
            ),
            Kind::Spawn => {
                let notice = match frame.parse::<Spawn>() {
                    Ok(req) => {
                        match spawn(frame.id, req, &w, &reaped, &running, held.launch.as_ref()) {
                            Ok(pid) => Frame::json(Kind::Spawned, frame.id, &pid),
                            Err(errno) => Frame::json(Kind::Failed, frame.id, &errno),
                        }
                    }
                    Err(_) => {
                        Frame::json(Kind::Failed, frame.id, &(nix::errno::Errno::EINVAL as i32))
                    }
                };
                send(&w, notice);
            }
            Kind::Connect if frame.id & CONNECTION != 0 => match frame.parse() {
                Ok(target) => {
                    let w = w.clone();
                    let send = move |f| send(&w, f);
                    super::connect::open(frame.id, target, send, conns.clone());
                }
                Err(_) => send(
                    &w,
                    Frame::json(Kind::Failed, frame.id, &(nix::errno::Errno::EINVAL as i32)),
                ),
            },
            // A connection's bytes, and its end, towards the service.
            Kind::Stdin if frame.id & CONNECTION != 0 => {
                if let Some(tx) = super::connect::lock(&conns).get(&frame.id) {
                    let _ = tx.send(Some(frame.payload));
                }
            }
            Kind::StdinEof if frame.id & CONNECTION != 0 => {
                if let Some(tx) = super::connect::lock(&conns).remove(&frame.id) {
                    let _ = tx.send(None);
                }
            }
            Kind::Stdin => {
                if let Some(tx) = lock(&running).get(&frame.id).and_then(|r| r.stdin.as_ref()) {
                    let _ = tx.send(Some(frame.payload));
                }
            }
            Kind::StdinEof => {
                if let Some(r) = lock(&running).get_mut(&frame.id) {
                    if let Some(tx) = r.stdin.take() {
                        let _ = tx.send(None);
                    }
                }
            }
            Kind::Signal => {
                let pid = lock(&running).get(&frame.id).map(|r| r.pid);
                if let (Some(pid), Ok(Ok(sig))) = (pid, frame.parse::<i32>().map(Signal::try_from))
                {
                    let _ = killpg(Pid::from_raw(pid), sig);
                    let _ = kill(Pid::from_raw(pid), sig);
                }
            }
            Kind::TermAll => {
                let _ = kill(Pid::from_raw(-1), Signal::SIGTERM);
            }
            // The host's pause to disk, and its resume (see `keeper`): the
            // init answers once its keeper has; meanwhile it reads nothing
            // more from the host, which sends nothing until the answer.
            Kind::Release => {
                let answer = match held.keeper.as_mut() {
                    Some(k) => k.release(),
                    None => Some(
                        "this guest cannot give its shares back (its system directories are not a read-only image, or its workspace is virtio-fs)"
                            .to_string(),
                    ),
                };
                send(&w, Frame::json(Kind::Released, 0, &answer));
            }
            Kind::Reattach => {
                let answer = match (frame.parse::<crate::wire::Reattach>(), held.keeper.as_mut()) {
                    (Ok(r), Some(k)) => k.reattach(r),
                    // A copy's new identity is never dropped silently.
                    (Ok(r), None) if r.seed.is_some() || r.hostname.is_some() => Some(
                        "this guest has no keeper to reseed it and give it its own hostname".into(),
                    ),
                    (Ok(_), None) => None,
                    (Err(e), _) => Some(format!("cannot read the request ({e})")),
                };
                send(&w, Frame::json(Kind::Reattached, 0, &answer));
            }
            Kind::Shutdown => break,
            _ => {}
        }
    }
    let _ = kill(Pid::from_raw(-1), Signal::SIGKILL);
}
