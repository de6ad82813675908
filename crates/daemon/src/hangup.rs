//! A client's departure, carried to a daemon thread blocked on a
//! supervisor's socket. A stream that follows a sandbox (its events, a
//! command's output) reads the supervisor on a thread of its own, which
//! would otherwise notice that its client left only when the sandbox says
//! something next: on a quiet sandbox, never, and the thread and the
//! socket stay. The answer's stream holds a [`Hangup`]; dropped (the
//! client gone, the response with it), it shuts the socket down, the
//! blocked read ends at once, and the thread (which holds the lease)
//! ends with it. Owns no socket: it shuts down the one it is shown.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::{Arc, Mutex};

#[derive(Default)]
struct Line {
    /// The client left.
    gone: bool,
    /// A copy of the socket the thread reads, once it has one.
    socket: Option<OwnedFd>,
}

/// The thread's end: where it shows the socket it is about to block on.
#[derive(Clone, Default)]
pub struct Watched(Arc<Mutex<Line>>);

/// The stream's end: dropped when the client leaves.
pub struct Hangup(Arc<Mutex<Line>>);

/// A pair: the thread keeps the first, the response's stream the second.
pub fn pair() -> (Watched, Hangup) {
    let w = Watched::default();
    let h = Hangup(w.0.clone());
    (w, h)
}

impl Watched {
    /// Show `socket` to the stream's end before blocking on it: `false`
    /// when the client has already left (the thread stops instead). A
    /// socket that cannot be copied is shut down at once: the follow is
    /// refused rather than left unwatched.
    pub fn watch(&self, socket: BorrowedFd<'_>) -> bool {
        let mut line = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if line.gone {
            return false;
        }
        match socket.try_clone_to_owned() {
            Ok(copy) => {
                line.socket = Some(copy);
                true
            }
            Err(_) => {
                shut(socket);
                false
            }
        }
    }

    /// Whether the client has left.
    pub fn gone(&self) -> bool {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).gone
    }
}

impl Drop for Hangup {
    fn drop(&mut self) {
        let mut line = self.0.lock().unwrap_or_else(|p| p.into_inner());
        line.gone = true;
        if let Some(s) = line.socket.take() {
            shut(s.as_fd());
        }
    }
}

/// Shut a socket down both ways: every read on it, on any thread and
/// through any copy, returns end-of-file.
fn shut(socket: BorrowedFd<'_>) {
    let _ = nix::sys::socket::shutdown(socket.as_raw_fd(), nix::sys::socket::Shutdown::Both);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn a_read_blocked_on_a_watched_socket_ends_when_the_hangup_is_dropped() {
        let (mut mine, _theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        let (watched, hangup) = pair();
        assert!(watched.watch(mine.as_fd()));
        let reader = std::thread::spawn(move || {
            let mut b = [0u8; 8];
            mine.read(&mut b).unwrap_or(0)
        });
        std::thread::sleep(std::time::Duration::from_millis(50));
        drop(hangup);
        let start = std::time::Instant::now();
        assert_eq!(reader.join().unwrap(), 0, "the read ended with end-of-file");
        assert!(start.elapsed() < std::time::Duration::from_secs(2));
    }

    #[test]
    fn a_socket_shown_after_the_client_left_is_not_followed() {
        let (mine, _theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        let (watched, hangup) = pair();
        drop(hangup);
        assert!(watched.gone());
        assert!(!watched.watch(mine.as_fd()));
    }
}
