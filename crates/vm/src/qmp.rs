//! The VMM's control channel (QEMU's QMP), used to snapshot a guest to a
//! file and to resume a restored one. QEMU gets its end as a descriptor
//! (`-chardev socket,fd=N -mon chardev=qmp,mode=control`), like every
//! other channel: its seccomp filter refuses `socket(2)`, and no path of
//! warden's is named to it. A file QEMU must write (a snapshot) is passed
//! over this channel (`getfd`, `SCM_RIGHTS`), never named.
//!
//! QEMU is on the far side of a trust boundary too (it runs the guest's
//! devices): its answers are read as untrusted, bounded lines.

use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::{AsRawFd, BorrowedFd};
use std::os::unix::net::UnixStream;
use std::time::Duration;

/// Longest line of QMP read from QEMU.
const MAX_LINE: usize = 64 * 1024;

/// Why the VMM's control channel failed.
#[derive(Debug, thiserror::Error)]
pub enum QmpError {
    #[error("cannot talk to the VMM's control channel")]
    Io(#[from] std::io::Error),
    #[error("the VMM's control channel closed")]
    Closed,
    #[error("the VMM's control channel said something unreadable")]
    Garbled,
    #[error("the VMM refused `{command}`: {reason}")]
    Refused { command: String, reason: String },
    #[error("cannot pass a descriptor to the VMM")]
    Pass(#[source] nix::errno::Errno),
}

/// An open control channel, capabilities negotiated.
pub struct Qmp {
    stream: UnixStream,
    reader: BufReader<UnixStream>,
}

impl Qmp {
    /// Take the host's end of the channel: read QEMU's greeting and leave
    /// negotiation mode. Every answer is awaited at most `timeout`.
    pub fn open(stream: UnixStream, timeout: Duration) -> Result<Qmp, QmpError> {
        stream.set_read_timeout(Some(timeout))?;
        let reader = BufReader::new(stream.try_clone()?);
        let mut q = Qmp { stream, reader };
        let greeting = q.line()?;
        if greeting.get("QMP").is_none() {
            return Err(QmpError::Garbled);
        }
        q.execute("qmp_capabilities", None)?;
        Ok(q)
    }

    fn line(&mut self) -> Result<Value, QmpError> {
        let mut buf = Vec::new();
        let n = (&mut self.reader)
            .take(MAX_LINE as u64)
            .read_until(b'\n', &mut buf)?;
        if n == 0 {
            return Err(QmpError::Closed);
        }
        if !buf.ends_with(b"\n") {
            return Err(QmpError::Garbled);
        }
        serde_json::from_slice(&buf).map_err(|_| QmpError::Garbled)
    }

    /// The answer to the last command, events skipped.
    fn answer(&mut self, command: &str) -> Result<Value, QmpError> {
        loop {
            let v = self.line()?;
            if v.get("event").is_some() {
                continue;
            }
            if let Some(r) = v.get("return") {
                return Ok(r.clone());
            }
            if let Some(e) = v.get("error") {
                return Err(QmpError::Refused {
                    command: command.to_string(),
                    reason: e
                        .get("desc")
                        .and_then(Value::as_str)
                        .unwrap_or("(no reason given)")
                        .chars()
                        .take(500)
                        .collect(),
                });
            }
            return Err(QmpError::Garbled);
        }
    }

    /// Run `command` with `arguments`.
    pub fn execute(&mut self, command: &str, arguments: Option<Value>) -> Result<Value, QmpError> {
        let mut msg = json!({ "execute": command });
        if let Some(a) = arguments {
            msg["arguments"] = a;
        }
        self.stream.write_all(msg.to_string().as_bytes())?;
        self.answer(command)
    }

    /// Give QEMU the descriptor `fd` under `name` (`getfd`), for a later
    /// `migrate` to `fd:NAME`.
    pub fn pass_fd(&mut self, name: &str, fd: BorrowedFd<'_>) -> Result<(), QmpError> {
        use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};
        let msg = json!({ "execute": "getfd", "arguments": { "fdname": name } }).to_string();
        let fds = [fd.as_raw_fd()];
        let iov = [std::io::IoSlice::new(msg.as_bytes())];
        let sent = sendmsg::<()>(
            self.stream.as_raw_fd(),
            &iov,
            &[ControlMessage::ScmRights(&fds)],
            MsgFlags::empty(),
            None,
        )
        .map_err(QmpError::Pass)?;
        if sent != msg.len() {
            // The descriptor went with the first bytes; the rest follows.
            self.stream.write_all(&msg.as_bytes()[sent..])?;
        }
        self.answer("getfd").map(drop)
    }

    /// The VM's run state (`running`, `paused`, `inmigrate`, ...).
    pub fn status(&mut self) -> Result<String, QmpError> {
        let v = self.execute("query-status", None)?;
        v.get("status")
            .and_then(Value::as_str)
            .map(str::to_string)
            .ok_or(QmpError::Garbled)
    }

    /// The outgoing migration's status (`active`, `completed`, `failed`,
    /// ...) and, when it failed, why.
    pub fn migration(&mut self) -> Result<(String, Option<String>), QmpError> {
        let v = self.execute("query-migrate", None)?;
        let status = v
            .get("status")
            .and_then(Value::as_str)
            .unwrap_or("none")
            .to_string();
        let why = v
            .get("error-desc")
            .and_then(Value::as_str)
            .map(|s| s.chars().take(500).collect());
        Ok((status, why))
    }
}
