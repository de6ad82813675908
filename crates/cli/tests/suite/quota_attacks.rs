//! A sandbox that spends the per-user kernel counters of whoever created
//! it: inotify instances, queued signals, POSIX message queues. The kernel
//! charges these to a user namespace's owner as well as to the user inside,
//! so a sandbox made by root could starve every root process of the host.
//! Each test lets the sandbox take all it can and hold it, then asks for
//! one more of the same resource from a host process of warden's own user,
//! which must still get it.

use crate::common::*;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Python inside the sandbox: take `TAKE` until the kernel refuses, say how
/// many were taken, then hold them until stdin closes.
const SANDBOX_PRELUDE: &str = r#"
import ctypes, ctypes.util, os, signal, sys, threading
libc = ctypes.CDLL(None, use_errno=True)
rt = ctypes.CDLL(ctypes.util.find_library("rt") or "librt.so.1", use_errno=True)
class MqAttr(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_long), ("maxmsg", ctypes.c_long),
                ("msgsize", ctypes.c_long), ("curmsgs", ctypes.c_long), ("pad", ctypes.c_long * 4)]
def inotify(i):
    return libc.inotify_init1(0) >= 0
signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGRTMIN])
def sigpending(i):
    try:
        signal.pthread_kill(threading.get_ident(), signal.SIGRTMIN)
        return True
    except OSError:
        return False
def mqueue(i):
    attr = MqAttr(0, 10, 8192, 0)
    rt.mq_open.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_int, ctypes.POINTER(MqAttr)]
    name = ("/warden-quota-%d-%d" % (os.getpid(), i)).encode()
    fd = rt.mq_open(name, os.O_CREAT | os.O_RDWR, 0o600, ctypes.byref(attr))
    if fd < 0:
        return False
    rt.mq_unlink(name)
    return True
"#;

fn sandbox_script(resource: &str) -> String {
    format!(
        "{SANDBOX_PRELUDE}\ntake = {resource}\nn = 0\nwhile n < 1000000 and take(n):\n    n += 1\n\
         print('held', n, flush=True)\nsys.stdin.read()\n"
    )
}

/// Who runs warden and the host probe: root itself, or an unprivileged
/// user (whose own counters a rootless sandbox is charged to).
enum As {
    Root,
    User(Unprivileged),
}

impl As {
    fn command(&self, program: &str) -> Command {
        match self {
            As::Root => Command::new(program),
            As::User(u) => u.command(program),
        }
    }

    fn warden(&self) -> Command {
        match self {
            As::Root => Command::new(warden_bin()),
            As::User(u) => u.command(u.bin.to_str().unwrap()),
        }
    }
}

/// Python on the host: ask for one of `resource`; exit 0 when it was given.
fn host_probe(who: &As, resource: &str) -> bool {
    let script = format!("{SANDBOX_PRELUDE}\nsys.exit(0 if {resource}(0) else 1)\n");
    let out = who
        .command("python3")
        .args(["-c", &script])
        .output()
        .expect("python3 runs on the host");
    out.status.success()
}

/// Runs the exhaustion in a sandbox, and while the sandbox holds what it
/// took, asks for one more on the host as the same user. `refused` says
/// why the sandbox may get none at all (another layer forbids the
/// resource outright).
fn host_still_gets(who: As, resource: &str, refused: Option<&str>) {
    if Command::new("python3").arg("-V").output().is_err() {
        skip("python3 is not installed on this host");
        return;
    }
    // The host can give one before the attack (or the test proves nothing).
    assert!(
        host_probe(&who, resource),
        "the host cannot get one {resource} even before the sandbox runs"
    );
    let mut child = who
        .warden()
        .args(["run", "--", "python3", "-c", &sandbox_script(resource)])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let start = Instant::now();
    let held = loop {
        match lines.next() {
            Some(Ok(l)) if l.starts_with("held ") => break l,
            Some(Ok(_)) => {}
            _ => {
                let out = child.wait_with_output().unwrap();
                panic!("the sandbox ended before holding: {}", stderr(&out));
            }
        }
        assert!(start.elapsed() < Duration::from_secs(60), "no answer");
    };
    let taken: u64 = held.trim_start_matches("held ").parse().unwrap();
    let host_got = host_probe(&who, resource);
    drop(child.stdin.take());
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    match refused {
        Some(why) if taken == 0 => eprintln!("the sandbox got no {resource} at all: {why}"),
        _ => assert!(taken > 0, "the sandbox took no {resource} at all: {held}"),
    }
    assert!(
        host_got,
        "the sandbox took {taken} {resource} and the host's own user could get none"
    );
}

fn as_root() -> Option<As> {
    if is_root() {
        Some(As::Root)
    } else {
        skip("a sandbox charges root's counters only when warden runs as root");
        None
    }
}

fn as_user() -> Option<As> {
    match Unprivileged::get() {
        Some(u) => Some(As::User(u)),
        None => {
            skip("no unprivileged user to run warden as");
            None
        }
    }
}

const MQ_REFUSED: &str =
    "Landlock refuses to open a message queue, which lies beneath no allowed path";

#[test]
fn a_sandbox_made_by_root_holding_every_inotify_instance_leaves_root_its_own() {
    if let Some(who) = as_root() {
        host_still_gets(who, "inotify", None);
    }
}

#[test]
fn a_sandbox_made_by_root_queueing_signals_until_refused_leaves_root_its_own() {
    if let Some(who) = as_root() {
        host_still_gets(who, "sigpending", None);
    }
}

#[test]
fn a_sandbox_made_by_root_filling_message_queues_leaves_root_its_own() {
    if let Some(who) = as_root() {
        host_still_gets(who, "mqueue", Some(MQ_REFUSED));
    }
}

#[test]
fn a_rootless_sandbox_holding_every_inotify_instance_leaves_its_user_some() {
    if let Some(who) = as_user() {
        host_still_gets(who, "inotify", None);
    }
}

#[test]
fn a_rootless_sandbox_queueing_signals_until_refused_leaves_its_user_some() {
    if let Some(who) = as_user() {
        host_still_gets(who, "sigpending", None);
    }
}
