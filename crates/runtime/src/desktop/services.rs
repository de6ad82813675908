//! The desktop's long-lived programs, started by the sandbox's supervisor
//! when the sandbox starts and kept running: each is an exec of the
//! sandbox (same jail, same egress, same limits), restarted when it dies
//! and reported in the sandbox's status (and, as every exec, in its event
//! log), given up after it fails again and again.

use std::io::Read;
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use warden_policy::desktop::DBUS_SOCKET;
use warden_policy::{DesktopSpec, CA_CERT_PATH};

use crate::protocol::DesktopService;

/// Where the browser keeps its profile, under the sandbox's home.
pub const BROWSER_DIR: &str = "$HOME/.warden-desktop/chromium";

/// Chromium's flags, and why each is there.
pub const CHROMIUM_FLAGS: &[(&str, &str)] = &[
    (
        "--no-sandbox",
        "its own sandbox's first layer needs new user namespaces (or a setuid helper), which warden's seccomp filter and no_new_privs refuse inside the sandbox; allowing them would widen the kernel surface for every process of it (see docs/threat-model.md)",
    ),
    ("--test-type", "no banner about --no-sandbox over every page"),
    (
        "--remote-debugging-address=127.0.0.1",
        "DevTools on the sandbox's own loopback, never another address",
    ),
    ("--remote-debugging-port=9222", "the port the daemon's proxy reaches"),
    ("--no-first-run", "no welcome page"),
    ("--no-default-browser-check", "no question at start"),
    (
        "--disable-background-networking",
        "no requests of the browser's own (updates, lists, metrics): what it loads is what was asked of it",
    ),
    ("--disable-component-update", "no downloads of components"),
    ("--disable-sync", "no account sync"),
    ("--password-store=basic", "no keyring daemon in the sandbox"),
    ("--start-maximized", "the page fills the screen"),
];

/// One program of the desktop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Service {
    pub name: &'static str,
    pub argv: Vec<String>,
}

/// The shell lines that wait for the X server and the session bus before
/// a program that needs them starts (inside the sandbox, where they are).
fn wait_for_screen(d: &DesktopSpec) -> String {
    format!(
        "i=0; while [ ! -S /tmp/.X11-unix/X{n} ] || [ ! -S {DBUS_SOCKET} ]; do \
         i=$((i+1)); if [ $i -gt 300 ]; then echo 'the X server or the session bus did not start in 30s' >&2; exit 1; fi; \
         sleep 0.1; done; ",
        n = d.display
    )
}

fn sh(script: String, args: &[&str]) -> Vec<String> {
    let mut v = vec!["/bin/sh".to_string(), "-c".to_string(), script, "sh".into()];
    v.extend(args.iter().map(|a| a.to_string()));
    v
}

/// The programs, in the order they start.
pub fn services(d: &DesktopSpec) -> Vec<Service> {
    let wait = wait_for_screen(d);
    let flags: Vec<&str> = CHROMIUM_FLAGS.iter().map(|(f, _)| *f).collect();
    // The sandbox's own authority (present when it has secrets) is
    // trusted by the browser through an NSS database in its home: what
    // the proxy presents for a secret's host is then accepted there, and
    // nowhere else is anything added to trust.
    let browser = format!(
        "{wait}dir=\"{BROWSER_DIR}\"; mkdir -p \"$dir\" \"$HOME/.pki/nssdb\" || exit 1; \
         rm -f \"$dir\"/Singleton*; \
         if [ -f {CA_CERT_PATH} ]; then \
           [ -f \"$HOME/.pki/nssdb/cert9.db\" ] || certutil -d sql:\"$HOME/.pki/nssdb\" -N --empty-password || exit 1; \
           certutil -d sql:\"$HOME/.pki/nssdb\" -D -n warden-sandbox >/dev/null 2>&1; \
           certutil -d sql:\"$HOME/.pki/nssdb\" -A -t C,, -n warden-sandbox -i {CA_CERT_PATH} || exit 1; \
         fi; \
         exec chromium --user-data-dir=\"$dir\" --window-size={w},{h} \"$@\" about:blank",
        w = d.width,
        h = d.height,
    );
    vec![
        Service {
            name: "dbus",
            argv: vec![
                "dbus-daemon".into(),
                "--session".into(),
                "--nofork".into(),
                "--nopidfile".into(),
                format!("--address=unix:path={DBUS_SOCKET}"),
            ],
        },
        Service {
            name: "xvfb",
            argv: vec![
                "Xvfb".into(),
                d.display_name(),
                "-screen".into(),
                "0".into(),
                format!("{}x{}x24", d.width, d.height),
                // No TCP listener, even on the sandbox's loopback.
                "-nolisten".into(),
                "tcp".into(),
            ],
        },
        Service {
            name: "window-manager",
            argv: sh(format!("{wait}exec xfwm4"), &[]),
        },
        Service {
            name: "panel",
            argv: sh(format!("{wait}exec xfce4-panel"), &[]),
        },
        Service {
            name: "vnc",
            argv: sh(
                format!(
                    "{wait}exec x11vnc -display {} -localhost -rfbport {} -forever -shared -nopw -quiet",
                    d.display_name(),
                    d.vnc_port
                ),
                &[],
            ),
        },
        Service {
            name: "browser",
            argv: sh(browser, &flags),
        },
    ]
}

/// How a started program ends: its status as `warden run` gives it.
pub type Ending = Box<dyn FnOnce() -> i32 + Send>;

/// What the keeper needs from the supervisor: start a process in the
/// sandbox with these descriptors (stdin, stdout, stderr), and whether the
/// sandbox is stopping.
pub trait Launcher: Send + Sync + 'static {
    /// Its PID in the sandbox and how to wait for its end; or why it
    /// could not start.
    fn launch(&self, argv: Vec<String>, stdio: [OwnedFd; 3]) -> Result<(i32, Ending), String>;
    fn stopping(&self) -> bool;
}

/// The desktop's programs as the sandbox's status shows them.
pub type Board = Arc<Mutex<Vec<DesktopService>>>;

/// Restarts in a row (each after a run shorter than [`STEADY`]) after
/// which a program is given up.
const MAX_QUICK_FAILURES: u32 = 5;
/// A run this long counts as a success: the next failure starts a new row.
const STEADY: Duration = Duration::from_secs(30);
/// The last bytes of a program's output kept to say why it ended.
const TAIL: usize = 2048;

/// Start every program of the desktop, each watched by a thread of its
/// own; returns the board they report on.
pub fn keep<L: Launcher>(d: &DesktopSpec, launcher: Arc<L>) -> Board {
    let all = services(d);
    let board: Board = Arc::new(Mutex::new(
        all.iter()
            .map(|s| DesktopService {
                name: s.name.to_string(),
                state: "starting".into(),
                pid: None,
                restarts: 0,
                last_exit: None,
            })
            .collect(),
    ));
    for (i, service) in all.into_iter().enumerate() {
        let (b, l) = (board.clone(), launcher.clone());
        let _ = std::thread::Builder::new()
            .name(format!("warden-desktop-{}", service.name))
            .spawn(move || watch(i, &service, &b, &*l));
    }
    board
}

fn update(board: &Board, i: usize, f: impl FnOnce(&mut DesktopService)) {
    if let Some(s) = board.lock().ok().as_mut().and_then(|b| b.get_mut(i)) {
        f(s);
    }
}

/// Keep one program running until the sandbox stops.
fn watch<L: Launcher + ?Sized>(i: usize, service: &Service, board: &Board, launcher: &L) {
    let mut quick_failures = 0;
    let mut backoff = Duration::from_millis(500);
    while !launcher.stopping() {
        let started = Instant::now();
        let (status, tail) = match run_once(service, launcher, board, i) {
            Ok(ended) => ended,
            Err(why) => (-1, why),
        };
        if launcher.stopping() {
            return;
        }
        let ran = started.elapsed();
        if ran >= STEADY {
            quick_failures = 0;
            backoff = Duration::from_millis(500);
        } else {
            quick_failures += 1;
        }
        let said = if status >= 0 {
            format!("exited with status {status}")
        } else {
            "could not start".to_string()
        };
        let last = format!("{said} after {}s: {}", ran.as_secs(), tail.trim());
        if quick_failures >= MAX_QUICK_FAILURES {
            update(board, i, |s| {
                s.state = "failed".into();
                s.pid = None;
                s.last_exit = Some(format!(
                    "{last} (given up after {MAX_QUICK_FAILURES} quick failures)"
                ));
            });
            return;
        }
        update(board, i, |s| {
            s.state = "restarting".into();
            s.pid = None;
            s.restarts += 1;
            s.last_exit = Some(last);
        });
        std::thread::sleep(backoff);
        backoff = (backoff * 2).min(Duration::from_secs(10));
    }
}

/// Start the program once and wait for its end: its status and the last
/// of its output.
fn run_once<L: Launcher + ?Sized>(
    service: &Service,
    launcher: &L,
    board: &Board,
    i: usize,
) -> Result<(i32, String), String> {
    let null =
        std::fs::File::open("/dev/null").map_err(|e| format!("cannot open /dev/null: {e}"))?;
    let (r, w) = nix::unistd::pipe().map_err(|e| format!("cannot make a pipe: {e}"))?;
    let w2 = w
        .try_clone()
        .map_err(|e| format!("cannot make a pipe: {e}"))?;
    let tail = Arc::new(Mutex::new(Vec::<u8>::new()));
    let t = tail.clone();
    let reader = std::thread::Builder::new()
        .name(format!("warden-desktop-log-{}", service.name))
        .spawn(move || {
            let mut f = std::fs::File::from(r);
            let mut buf = [0u8; 4096];
            while let Ok(n) = f.read(&mut buf) {
                if n == 0 {
                    break;
                }
                if let Ok(mut t) = t.lock() {
                    t.extend_from_slice(&buf[..n]);
                    let excess = t.len().saturating_sub(TAIL);
                    t.drain(..excess);
                }
            }
        })
        .map_err(|e| format!("cannot start a thread: {e}"))?;
    let (pid, ending) = launcher.launch(service.argv.clone(), [OwnedFd::from(null), w, w2])?;
    update(board, i, |s| {
        s.state = "running".into();
        s.pid = Some(pid);
    });
    let status = ending();
    // Its children may hold the pipe on: the output so far says enough,
    // after a moment for the reader to take in the last of it.
    std::thread::sleep(Duration::from_millis(100));
    drop(reader);
    let text = tail
        .lock()
        .map(|t| String::from_utf8_lossy(&t).into_owned())
        .unwrap_or_default();
    let last_lines: Vec<&str> = text.lines().rev().take(4).collect();
    let last_lines: Vec<&str> = last_lines.into_iter().rev().collect();
    Ok((status, last_lines.join(" | ")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_program_of_a_desktop_is_one_the_host_check_looks_for() {
        let programs: Vec<&str> = crate::desktop::PROGRAMS.iter().map(|p| p.0).collect();
        let all = services(&DesktopSpec::default())
            .iter()
            .map(|s| s.argv.join(" "))
            .collect::<Vec<_>>()
            .join(" ");
        for p in [
            "dbus-daemon",
            "Xvfb",
            "xfwm4",
            "xfce4-panel",
            "x11vnc",
            "chromium",
            "certutil",
        ] {
            assert!(programs.contains(&p), "{p} is not checked for");
            assert!(all.contains(p), "{p} is not started");
        }
    }

    #[test]
    fn the_screen_and_the_debugger_listen_on_the_sandboxs_loopback_only() {
        let all = services(&DesktopSpec::default());
        let xvfb = &all.iter().find(|s| s.name == "xvfb").unwrap().argv;
        assert!(xvfb.windows(2).any(|w| w == ["-nolisten", "tcp"]));
        let vnc = all.iter().find(|s| s.name == "vnc").unwrap().argv.join(" ");
        assert!(
            vnc.contains("-localhost") && vnc.contains("-rfbport 5900"),
            "{vnc}"
        );
        let browser = all
            .iter()
            .find(|s| s.name == "browser")
            .unwrap()
            .argv
            .join(" ");
        assert!(browser.contains("--remote-debugging-address=127.0.0.1"));
        assert!(browser.contains("--remote-debugging-port=9222"));
    }
}
