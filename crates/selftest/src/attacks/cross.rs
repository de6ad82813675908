//! Cross-sandbox access: one sandbox reaching another's loopback, /tmp or
//! processes. The second sandbox's probes are `read-file` (fs),
//! `tcp-connect` (net) and `kill-all` (process).
//!
//! The first sandbox says when it is ready (listening, its file written)
//! and waits until the second has done its worst, through a host
//! directory bound into it with `--rw` (see [`Lab::shared_dir`]): the
//! second starts only once the
//! first is there to be reached, and the first lives exactly as long as
//! the attack (a fixed 300 ms head start could be too short on a loaded
//! host, and the first's fixed 5 s made each attack take 5 s).
use crate::lab::{free_port, from_run, Attack, Lab, Run, Verdict};
use crate::probes::{arg, contained, escaped, port, Finding, Probe};
use crate::Category;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long the first sandbox waits for the second one at most, and how
/// long the host waits for the first one to be ready.
const WAIT: Duration = Duration::from_secs(30);

pub(crate) fn attacks() -> Vec<Attack> {
    vec![
        // ---- cross-sandbox access ----
        (
            "cross.loopback",
            Category::CrossSandbox,
            "connect to a server in another sandbox",
            |lab| {
                let port = free_port().to_string();
                let first = against_another(lab, "cross-loopback", "listen-once", &port, || {
                    let _ = lab.sandbox(&[], "tcp-connect", &["127.0.0.1", &port]);
                });
                match first {
                    Ok((first, _)) => from_run(&first),
                    Err(v) => v,
                }
            },
        ),
        (
            "cross.tmp",
            Category::CrossSandbox,
            "read another sandbox's /tmp",
            |lab| {
                let marker = "/tmp/cross-sandbox-marker";
                let first = against_another(lab, "cross-tmp", "write-then-wait", marker, || {
                    lab.sandbox(&[], "read-file", &[marker])
                });
                match first {
                    Ok((_, r)) => from_run(&r),
                    Err(v) => v,
                }
            },
        ),
        (
            "cross.kill",
            Category::CrossSandbox,
            "kill every process it can see, hoping to reach another sandbox",
            |lab| {
                let first =
                    against_another(lab, "cross-kill", "write-then-wait", "/tmp/alive", || {
                        let _ = lab.sandbox(&[], "kill-all", &[]);
                    });
                match first {
                    Ok((first, ())) => match first.finding {
                        Some((true, _)) => Verdict::Contained("the other sandbox lived on".into()),
                        _ => Verdict::Escaped(format!(
                            "the other sandbox died (status {:?})",
                            first.status
                        )),
                    },
                    Err(v) => v,
                }
            },
        ),
    ]
}

/// Start `probe` (with `arg`) in a first sandbox, run `attack` once it
/// says it is ready, then tell it the attack is over: the first
/// sandbox's run and what `attack` returned.
fn against_another<T>(
    lab: &Lab,
    name: &str,
    probe: &str,
    arg: &str,
    attack: impl FnOnce() -> T,
) -> Result<(Run, T), Verdict> {
    let dir = match lab.shared_dir(name) {
        Ok(dir) => dir,
        Err(e) => return Err(Verdict::Skipped(format!("cannot make its directory: {e}"))),
    };
    let shared = dir.to_string_lossy();
    let Some((mut first, start)) = lab.spawn(&["--rw", &shared], probe, &[arg, &shared]) else {
        return Err(Verdict::Skipped("cannot start the first sandbox".into()));
    };
    let ready = dir.join(READY);
    let deadline = Instant::now() + WAIT;
    while !ready.exists() && Instant::now() < deadline {
        if matches!(first.try_wait(), Ok(Some(_))) {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    if !ready.exists() {
        // Nothing was there to be reached: the attack was not tried.
        let r = Lab::finish(first, start);
        let why = match r.finding {
            Some((_, detail)) => detail,
            None => r.stderr.lines().last().unwrap_or("").to_string(),
        };
        return Err(Verdict::Skipped(format!(
            "the first sandbox never said it was ready: {why}"
        )));
    }
    let out = attack();
    let _ = std::fs::write(dir.join(DONE), b"");
    Ok((Lab::finish(first, start), out))
}

/// The files the first sandbox writes when it is ready, and the host when
/// the attack is over.
const READY: &str = "ready";
const DONE: &str = "done";

/// Whether the host said the attack is over (in `dir`, the bound host
/// directory), or the first sandbox waited its longest.
fn over(dir: &Path, since: Instant) -> bool {
    dir.join(DONE).exists() || since.elapsed() > WAIT
}

/// Say in `dir` that the first sandbox is ready (the host takes a
/// sandbox that could not for one that was never there: not tried).
fn say_ready(dir: &Path) -> Result<(), Finding> {
    std::fs::write(dir.join(READY), b"")
        .map_err(|e| contained(format!("cannot say it is ready in {}: {e}", dir.display())))
}
pub(crate) const PROBES: &[Probe] = &[
    Probe {
        name: "listen-once",
        harmful: false,
        run: listen_once,
    },
    Probe {
        name: "write-then-wait",
        harmful: false,
        run: write_then_wait,
    },
];

fn listen_once(args: &[String]) -> Finding {
    let p = port(args, 0);
    let dir = PathBuf::from(arg(args, 1));
    match std::net::TcpListener::bind(("127.0.0.1", p)) {
        Err(e) => escaped(format!("cannot listen on {p}: {e}")),
        Ok(l) => {
            let _ = l.set_nonblocking(true);
            if let Err(f) = say_ready(&dir) {
                return f;
            }
            let since = Instant::now();
            loop {
                // Checked once more after the host said the attack is
                // over: a connection made and closed is still queued.
                let done = over(&dir, since);
                if l.accept().is_ok() {
                    return escaped("another sandbox connected");
                }
                if done {
                    return contained("nobody connected");
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

fn write_then_wait(args: &[String]) -> Finding {
    let _ = std::fs::write(arg(args, 0), b"sandbox-a");
    let dir = PathBuf::from(arg(args, 1));
    if let Err(f) = say_ready(&dir) {
        return f;
    }
    let since = Instant::now();
    while !over(&dir, since) {
        std::thread::sleep(Duration::from_millis(20));
    }
    contained("still alive")
}
