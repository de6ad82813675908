//! The spawn protocol between a supervisor and the init of a long-lived
//! sandbox: the supervisor asks for a process (argv, environment, working
//! directory, terminal or pipes, passed as descriptors), a file operation
//! or a connection inside; the init answers when it started and how it
//! ended. `warden_jail::spawn` sends, receives and serves these.
//!
//! One message per `SOCK_SEQPACKET` packet, JSON. What comes from the init
//! is parsed as untrusted input (bounded, typed).

use serde::{Deserialize, Serialize};

/// Largest request (argv and environment together) the channel carries.
pub const MAX_REQUEST: usize = 128 * 1024;

/// What the supervisor asks of the init.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum ToInit {
    /// Start a process. Descriptors: `[stdin, stdout, stderr]`; with
    /// `tty`, none: the init opens a terminal in the sandbox's own devpts
    /// (so the process's `ttyname` is a path it can see), makes it the
    /// process's controlling terminal and its 0, 1, 2, and sends the
    /// master side back with `spawned`.
    Spawn {
        id: u64,
        argv: Vec<String>,
        /// Added to (or replacing) the sandbox's own environment.
        env: Vec<(String, String)>,
        /// The working directory; the sandbox's own when `None`.
        cwd: Option<String>,
        tty: bool,
        /// The terminal's first size, rows and columns.
        #[serde(default)]
        winsize: Option<(u16, u16)>,
        /// With `tty`: the terminal an `open_terminal` opened ahead (its
        /// id), instead of a new one; its master side went with that
        /// answer, so none goes with `spawned`.
        #[serde(default)]
        terminal: Option<u64>,
    },
    /// Open a terminal in the sandbox's own devpts ahead of a spawn that
    /// will use it (a container's first process, whose terminal the
    /// runtime must hand out before the process starts). Answered with
    /// `file_done` and the master side; the init keeps the other side.
    OpenTerminal {
        id: u64,
        #[serde(default)]
        winsize: Option<(u16, u16)>,
    },
    /// Send a signal to a process this channel started (and its process
    /// group, which it leads).
    Signal { id: u64, signal: i32 },
    /// Send SIGTERM to every process of the sandbox (a graceful stop).
    TermAll,
    /// End the sandbox: the init exits, and every process with it.
    Shutdown,
    /// A file operation in the sandbox's workspace, done by the init (see
    /// [`crate::files`]); answered with `file_done`.
    File { id: u64, file: crate::files::FileOp },
    /// A socket connected (TCP: being connected) to a service inside the
    /// sandbox (see [`crate::connect`]); answered with `file_done` and the
    /// socket.
    Connect { id: u64, to: crate::connect::Target },
}

/// What the init tells the supervisor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum FromInit {
    /// The process runs; `pid` is its PID inside the sandbox.
    Spawned {
        id: u64,
        pid: i32,
    },
    /// It could not be started: `errno` of execve (ENOENT when not found),
    /// or of the setup before it.
    Failed {
        id: u64,
        errno: i32,
    },
    Exited {
        id: u64,
        code: i32,
    },
    Signaled {
        id: u64,
        signal: i32,
    },
    /// A file operation's answer: `errno` 0 when done, with the opened
    /// descriptor for the operations that open one.
    FileDone {
        id: u64,
        errno: i32,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_and_notices_are_tagged_by_op_on_the_wire() {
        let spawn = ToInit::Signal { id: 4, signal: 15 };
        assert_eq!(
            serde_json::to_string(&spawn).unwrap(),
            r#"{"op":"signal","id":4,"signal":15}"#
        );
        let done = FromInit::FileDone { id: 9, errno: 0 };
        let text = serde_json::to_string(&done).unwrap();
        assert_eq!(text, r#"{"op":"file_done","id":9,"errno":0}"#);
        assert_eq!(serde_json::from_str::<FromInit>(&text).unwrap(), done);
    }
}
