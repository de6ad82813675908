//! Second review of long-lived sandboxes and what came with them: the
//! sandbox's own devpts (its terminal is opened inside it now), and the
//! rule that keeps warden's state directory out of a sandbox's reach. Each
//! test runs the real `warden` binary and judges from the host.

use crate::common::*;
use std::path::Path;
use std::process::Command;

#[test]
fn a_sandbox_cannot_take_every_terminal_of_the_host() {
    // Every devpts instance but the host's first draws on one pool
    // (kernel.pty.max less kernel.pty.reserve: 3072 by default). A sandbox
    // that opened /dev/ptmx until it failed left other sandboxes (`warden
    // run -t`, `warden exec -t`) and containers without a terminal. It
    // tries 200 here (and lets them go at once), to spare the host's pool.
    let py = "import os\n\
              fds = []\n\
              try:\n    \
                  for _ in range(200): fds.append(os.open('/dev/ptmx', os.O_RDWR | os.O_NOCTTY))\n\
              except OSError as e: print('stopped', e.errno)\n\
              print('opened', len(fds))\n";
    let out = run_sh(&[], &format!("python3 -c \"{py}\""));
    let s = stdout(&out);
    let opened: usize = s
        .lines()
        .find_map(|l| l.strip_prefix("opened "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("{s} {}", stderr(&out)));
    assert!(
        (1..=64).contains(&opened),
        "the sandbox opened {opened} terminals from the host's shared pool"
    );
}

#[test]
fn line_disciplines_and_console_redirection_are_out_of_reach() {
    // TIOCSETD attaches kernel code (HDLC, GSM, SLIP, ... autoloaded as
    // modules where dev.tty.ldisc_autoload is 1) to a terminal the sandbox
    // holds: N_NULL is built into every kernel, so it is the probe.
    // TIOCCONS (needs CAP_SYS_ADMIN of the host) and TIOCGPTPEER on a
    // slave (a master's call) are expected to fail too.
    let py = "import os, fcntl, struct, termios\n\
              m, s = os.openpty()\n\
              for name, fd, req, arg in [('setd', s, termios.TIOCSETD, struct.pack('i', 27)), ('cons', s, termios.TIOCCONS, 0), ('peer', s, 0x5441, os.O_RDWR)]:\n    \
                  try:\n        \
                      fcntl.ioctl(fd, req, arg)\n        \
                      print(name, 'ALLOWED')\n    \
                  except OSError as e:\n        \
                      print(name, 'refused', e.errno)\n";
    let out = run_sh(&[], &format!("python3 -c \"{py}\""));
    let s = stdout(&out);
    assert!(s.contains("setd refused 1"), "{s} {}", stderr(&out));
    assert!(s.contains("cons refused"), "{s} {}", stderr(&out));
    assert!(s.contains("peer refused"), "{s} {}", stderr(&out));
    assert!(!s.contains("ALLOWED"), "{s}");
}

/// A bind mount made on the host, undone when dropped.
struct HostBind(std::path::PathBuf);

impl HostBind {
    fn new(src: &Path, dst: &Path) -> HostBind {
        std::fs::create_dir_all(dst).unwrap();
        let ok = Command::new("mount")
            .args(["--bind", src.to_str().unwrap(), dst.to_str().unwrap()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "mount --bind");
        HostBind(dst.to_path_buf())
    }
}

impl Drop for HostBind {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

#[test]
fn the_state_directory_is_kept_out_under_another_name_too() {
    // The rule compared paths by name: the state directory reached through
    // a bind mount already on the host (here `alias` shows `base`, or a
    // mount below a bound directory does) was writable by the sandbox,
    // which could rewrite any named sandbox's stored spec.
    if !is_root() {
        skip("needs root to make a bind mount on the host");
        return;
    }
    let base = TempDir::new("r2-state-alias");
    let state = base.path().join("home/warden");
    std::fs::create_dir_all(state.join("sandboxes")).unwrap();
    let elsewhere = TempDir::new("r2-elsewhere");
    let alias = elsewhere.path().join("alias");
    let _b1 = HostBind::new(&base.path().join("home"), &alias);
    let outer = elsewhere.path().join("outer");
    let _b2 = HostBind::new(base.path(), &outer.join("sub"));
    let planted = state.join("sandboxes/planted");
    for (args, writes) in [
        (
            vec!["--rw", alias.to_str().unwrap()],
            alias.join("warden/sandboxes/planted"),
        ),
        (
            vec!["--rw", outer.to_str().unwrap()],
            outer.join("sub/home/warden/sandboxes/planted"),
        ),
        (
            vec!["-w", alias.join("warden").to_str().unwrap()],
            alias.join("warden/sandboxes/planted"),
        ),
        (
            vec!["--rw", alias.join("warden/sandboxes").to_str().unwrap()],
            alias.join("warden/sandboxes/planted"),
        ),
    ] {
        let mut all = vec!["run", "--no-tty"];
        all.extend(args.iter().copied());
        let script = format!("echo x > {}", writes.display());
        all.extend(["--", "sh", "-c", &script]);
        let out = warden_at(&state, &all);
        assert!(
            !planted.exists(),
            "{args:?}: the sandbox wrote into the state directory"
        );
        assert_eq!(code(&out), 125, "{args:?} was accepted: {}", stderr(&out));
        assert!(
            stderr(&out).contains("state directory"),
            "{args:?}: {}",
            stderr(&out)
        );
    }
    // A directory beside it, with nothing of the state below, is fine.
    let beside = elsewhere.path().join("beside");
    std::fs::create_dir_all(&beside).unwrap();
    let out = warden_at(
        &state,
        &[
            "run",
            "--no-tty",
            "--rw",
            beside.to_str().unwrap(),
            "--",
            "true",
        ],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
}
