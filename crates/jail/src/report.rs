//! The one-way channel from the sandbox's init to the supervisor: a pipe that
//! only the init (and the command's process until its exec) holds. The
//! supervisor parses it as untrusted input: bounded, line by line.

use std::os::fd::OwnedFd;

/// What the sandbox side tells the supervisor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Report {
    /// Building the sandbox failed; the message says where and why.
    SetupFailed(String),
    /// The command could not be executed (errno of execve, or ENOENT when it
    /// was not found in PATH).
    ExecFailed(i32),
    /// The command exited with this code.
    Exited(i32),
    /// The command died of this signal.
    Signaled(i32),
}

/// Longest report line accepted; longer ones are cut.
pub const MAX_LINE: usize = 4096;

pub fn write_report(fd: &OwnedFd, r: &Report) {
    let line = match r {
        Report::SetupFailed(m) => format!("setup {}\n", m.replace('\n', " ")),
        Report::ExecFailed(e) => format!("exec {e}\n"),
        Report::Exited(c) => format!("exit {c}\n"),
        Report::Signaled(s) => format!("signal {s}\n"),
    };
    let mut bytes = line.as_bytes();
    if bytes.len() > MAX_LINE {
        bytes = &bytes[..MAX_LINE];
    }
    // A short or failed write leaves the supervisor without this report; it
    // then reports the init's own end instead.
    let _ = nix::unistd::write(fd, bytes);
}

/// Parse everything read from the pipe. Unknown lines are ignored.
pub fn parse_reports(data: &[u8]) -> Vec<Report> {
    let text = String::from_utf8_lossy(data);
    text.lines()
        .filter_map(|line| {
            let (kind, rest) = line.split_once(' ')?;
            match kind {
                "setup" => Some(Report::SetupFailed(rest.chars().take(MAX_LINE).collect())),
                "exec" => rest.parse().ok().map(Report::ExecFailed),
                "exit" => rest.parse().ok().map(Report::Exited),
                "signal" => rest.parse().ok().map(Report::Signaled),
                _ => None,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn malformed_reports_are_ignored() {
        let r = parse_reports(b"exit 3\ngarbage\nsignal x\nexec 2\n\xff\xfe\nsetup no /proc\n");
        assert_eq!(
            r,
            vec![
                Report::Exited(3),
                Report::ExecFailed(2),
                Report::SetupFailed("no /proc".into())
            ]
        );
    }
}
