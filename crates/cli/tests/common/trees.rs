//! A named sandbox `g`'s command trees under the real binary, whatever
//! its backend: a marker a writer inside grows in a `--rw` directory,
//! whether it still grows, a command killed by its `--timeout`, and a
//! second command beside it that must run on to its end.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::{stderr, stdout, wait_until, warden_bin};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How many bytes `file` holds (0 while it does not exist).
pub fn size(file: &Path) -> u64 {
    std::fs::metadata(file).map(|m| m.len()).unwrap_or(0)
}

/// Whether `file` grows within the next `within`.
pub fn grows(file: &Path, within: Duration) -> bool {
    let before = size(file);
    std::thread::sleep(within);
    size(file) > before
}

/// `warden exec -T --timeout T g -- sh -c SCRIPT` in `state`: its exit
/// status, how long it took and what it said. Its output goes to files,
/// never pipes: a process that outlived the command would hold a pipe
/// open, and the test would wait for it for ever.
pub fn exec_timed(state: &Path, timeout: &str, script: &str) -> (i32, Duration, String) {
    let err = state.join("exec.err");
    let start = Instant::now();
    let status = Command::new(warden_bin())
        .args(["exec", "-T", "--timeout", timeout, "g", "--", "sh", "-c"])
        .arg(script)
        .env("WARDEN_STATE_DIR", state.join("warden"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&err).unwrap())
        .status()
        .unwrap();
    let said = std::fs::read_to_string(&err).unwrap_or_default();
    (status.code().unwrap_or(-1), start.elapsed(), said)
}

/// A second command of `g`'s, running beside the one a test kills: it
/// writes to its file every 100 ms for a number of rounds, then says
/// `done`.
pub struct Beside {
    file: PathBuf,
    child: Child,
}

impl Beside {
    /// The command started in `state`, writing `rounds` times to `file`
    /// (in the sandbox's `--rw` directory), and seen writing within
    /// `within`.
    pub fn start(state: &Path, file: PathBuf, rounds: u32, within: Duration) -> Beside {
        let child = Command::new(warden_bin())
            .args(["exec", "-T", "g", "--", "sh", "-c"])
            .arg(format!(
                "for i in $(seq {rounds}); do echo x >> {}; sleep 0.1; done; echo done",
                file.display()
            ))
            .env("WARDEN_STATE_DIR", state.join("warden"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        wait_until("the second command runs", within, || size(&file) > 0);
        Beside { file, child }
    }

    /// Whether it still writes within the next `within`.
    pub fn runs_on(&self, within: Duration) -> bool {
        grows(&self.file, within)
    }

    /// It runs to its end and says `done`.
    pub fn ends_done(self) {
        let out = self.child.wait_with_output().unwrap();
        assert_eq!(stdout(&out), "done\n", "{}", stderr(&out));
    }
}
