//! The pseudo-terminal of interactive sandboxes: the command gets the slave
//! side as its controlling terminal; the supervisor puts the caller's
//! terminal in raw mode and relays bytes and window sizes.

use nix::errno::Errno;
use nix::sys::termios::{self, SetArg, Termios};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

/// Why a terminal could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum PtyError {
    #[error("cannot allocate a pseudo-terminal")]
    Open(#[source] Errno),
    #[error("cannot put the terminal in raw mode")]
    Raw(#[source] Errno),
}

pub struct Pty {
    pub master: OwnedFd,
    pub slave: OwnedFd,
}

/// Allocate a PTY pair, sized like the caller's terminal when there is one.
pub fn open() -> Result<Pty, PtyError> {
    let pair = nix::pty::openpty(None, None).map_err(PtyError::Open)?;
    for fd in [&pair.master, &pair.slave] {
        let _ = nix::fcntl::fcntl(
            fd,
            nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC),
        );
    }
    let pty = Pty {
        master: pair.master,
        slave: pair.slave,
    };
    copy_window_size(std::io::stdin().as_fd(), pty.master.as_fd());
    Ok(pty)
}

/// Give `to` the window size of `from`, if `from` is a terminal.
pub fn copy_window_size(from: BorrowedFd<'_>, to: BorrowedFd<'_>) {
    let mut ws = libc::winsize {
        ws_row: 0,
        ws_col: 0,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCGWINSZ writes one `winsize` into the valid, properly
    // aligned `ws`; TIOCSWINSZ only reads it. Both descriptors are open.
    unsafe {
        if libc::ioctl(from.as_raw_fd(), libc::TIOCGWINSZ, &mut ws) == 0 {
            libc::ioctl(to.as_raw_fd(), libc::TIOCSWINSZ, &ws);
        }
    }
}

/// The window size of terminal `fd`, rows and columns, if it is one.
pub fn window_size(fd: BorrowedFd<'_>) -> Option<(u16, u16)> {
    let mut ws = libc::winsize {
        ws_row: 0,
        ws_col: 0,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCGWINSZ writes one `winsize` into the valid, properly
    // aligned `ws`.
    let rc = unsafe { libc::ioctl(fd.as_raw_fd(), libc::TIOCGWINSZ, &mut ws) };
    (rc == 0).then_some((ws.ws_row, ws.ws_col))
}

/// Set the window size of terminal `fd`.
pub fn set_window_size(fd: BorrowedFd<'_>, rows: u16, cols: u16) {
    let ws = libc::winsize {
        ws_row: rows,
        ws_col: cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCSWINSZ reads one `winsize` from valid memory.
    unsafe { libc::ioctl(fd.as_raw_fd(), libc::TIOCSWINSZ, &ws) };
}

/// Whether `fd` is a terminal.
pub fn is_terminal(fd: BorrowedFd<'_>) -> bool {
    termios::tcgetattr(fd).is_ok()
}

/// Puts the caller's terminal back as it was when dropped.
pub struct RawMode {
    saved: Termios,
    /// What else of the terminal a command handed it (`-T`) can change,
    /// kept when it was handed over; `None` in raw mode (a pty between).
    kept: Option<Kept>,
}

/// The rest of a terminal's state a command can leave changed: its
/// window size and the file status flags (`O_NONBLOCK`) of the open
/// descriptions of stdin, stdout and stderr, which the caller shares.
struct Kept {
    size: Option<libc::winsize>,
    flags: [Option<libc::c_int>; 3],
}

impl RawMode {
    /// Raw mode on stdin when it is a terminal; `None` otherwise.
    pub fn enable() -> Result<Option<RawMode>, PtyError> {
        let stdin = std::io::stdin();
        let Ok(saved) = termios::tcgetattr(stdin.as_fd()) else {
            return Ok(None);
        };
        let mut raw = saved.clone();
        termios::cfmakeraw(&mut raw);
        termios::tcsetattr(stdin.as_fd(), SetArg::TCSANOW, &raw).map_err(PtyError::Raw)?;
        Ok(Some(RawMode { saved, kept: None }))
    }

    /// The terminal on stdin, when it is one, left as it is and put back
    /// as it was when dropped: a command run without a pty is handed the
    /// caller's terminal itself, and what it set there (`stty -echo`, its
    /// interrupt character, an exclusive mode, stopped output, its window
    /// size, non-blocking descriptors) must not outlast the run.
    pub fn keep() -> Option<RawMode> {
        let saved = termios::tcgetattr(std::io::stdin().as_fd()).ok()?;
        let mut size = libc::winsize {
            ws_row: 0,
            ws_col: 0,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        // SAFETY: TIOCGWINSZ writes one winsize into `size`, which lives
        // across the call.
        let sized = unsafe { libc::ioctl(0, libc::TIOCGWINSZ, &mut size) } == 0;
        let flags = [0, 1, 2].map(|fd| {
            // SAFETY: F_GETFL takes no argument and reads the descriptor's
            // flags; a closed descriptor answers -1.
            let f = unsafe { libc::fcntl(fd, libc::F_GETFL) };
            (f >= 0).then_some(f)
        });
        Some(RawMode {
            saved,
            kept: Some(Kept {
                size: sized.then_some(size),
                flags,
            }),
        })
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        let stdin = std::io::stdin();
        let _ = termios::tcsetattr(stdin.as_fd(), SetArg::TCSANOW, &self.saved);
        let Some(kept) = &self.kept else {
            return;
        };
        let _ = termios::tcflow(stdin.as_fd(), termios::FlowArg::TCOON);
        // SAFETY: TIOCNXCL takes no argument; TIOCSWINSZ reads one winsize
        // from `size`, which lives across the call.
        unsafe {
            libc::ioctl(0, libc::TIOCNXCL);
            if let Some(size) = &kept.size {
                libc::ioctl(0, libc::TIOCSWINSZ, size);
            }
        }
        for (fd, flags) in (0..).zip(kept.flags) {
            if let Some(f) = flags {
                // SAFETY: F_SETFL takes an integer; the flags are the ones
                // F_GETFL gave for the same descriptor.
                unsafe { libc::fcntl(fd, libc::F_SETFL, f) };
            }
        }
    }
}

/// Have `cmd`'s program lead a new session whose controlling terminal is
/// its standard input (the slave side of a pseudo-terminal, given as its
/// stdin, stdout and stderr): job control and `tty` work as at a console.
/// The program must not be put in a process group of its own as well
/// (`setsid` makes it one, and refuses a process group leader).
pub fn controlling_terminal(cmd: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs in the child between fork and exec, where
    // it calls only setsid(2) and ioctl(2), both async-signal-safe, on
    // descriptor 0, which the child has.
    unsafe {
        cmd.pre_exec(|| {
            if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })
    };
}
