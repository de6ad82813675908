//! A host file a helper writes on its guest's behalf, with a bound: the
//! helper gets the writing end of a pipe, and a thread of the caller's
//! copies what arrives into the file, keeping it within a fixed size. A
//! guest that writes its serial console without end (about 140 KB/s under
//! emulation, far more under KVM) would otherwise fill the host's disk,
//! charged to nothing; so would a guest that makes the VMM or virtiofsd
//! print about its requests without end, so their own output (`vmm.log`,
//! `virtiofsd.log`) goes through the same bound. These files are only read
//! for a failure's last lines, so the newest bytes are the ones kept.
//!
//! A pipe rather than `RLIMIT_FSIZE` on the helper: the limit would bound
//! every file it writes, the guest's shares among them.

use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::OwnedFd;
use std::path::Path;

/// The most a bounded log holds on the host.
pub const LOG_BOUND: u64 = 1024 * 1024;

/// What is kept, the newest bytes, when a write would pass [`LOG_BOUND`]:
/// the file starts again with them.
const KEPT_ON_WRAP: usize = 256 * 1024;

/// The copy into a bounded log, to wait for: a helper that has exited may
/// have left its last lines in the pipe, and a caller reading the file for
/// them (a failure's message) waits until they landed.
#[derive(Debug)]
pub struct LogCopy {
    done: std::sync::mpsc::Receiver<()>,
}

impl LogCopy {
    /// Wait at most `within` for the copy to end (every writing end
    /// closed, all that was written in the file); whether it did.
    pub fn wait(&self, within: std::time::Duration) -> bool {
        // The thread never sends: its end drops the sender.
        matches!(
            self.done.recv_timeout(within),
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) | Ok(())
        )
    }
}

/// Create (or empty) `path` and return the writing end of a pipe whose
/// bytes land there, the file never larger than [`LOG_BOUND`], with the
/// copy to wait for. With `owner`, the pipe is that user's (a helper
/// reopens it through `/proc/self/fd/N`, which checks the pipe's own
/// owner and mode); a helper that gets it as its standard output or
/// error needs none. The copying thread ends when every writing end is
/// closed (the helper has exited and the caller dropped its copies).
pub fn bounded_log(path: &Path, owner: Option<(u32, u32)>) -> std::io::Result<(OwnedFd, LogCopy)> {
    let file = std::fs::File::create(path)?;
    let (read, write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
    if let Some((uid, gid)) = owner {
        nix::unistd::fchown(
            &write,
            Some(nix::unistd::Uid::from_raw(uid)),
            Some(nix::unistd::Gid::from_raw(gid)),
        )?;
    }
    let (sender, done) = std::sync::mpsc::channel::<()>();
    std::thread::Builder::new()
        .name("warden-vm-log".into())
        .spawn(move || {
            copy_bounded(std::fs::File::from(read), file, LOG_BOUND);
            drop(sender);
        })?;
    Ok((write, LogCopy { done }))
}

/// Copy `from` into `to` until the end of `from`, `to` never longer than
/// `bound`: when a chunk would pass it, `to` starts again with the newest
/// [`KEPT_ON_WRAP`] bytes. A write error ends the copy (the pipe then
/// closes, and the helper's writes fail rather than block).
fn copy_bounded(mut from: std::fs::File, mut to: std::fs::File, bound: u64) {
    let keep = KEPT_ON_WRAP.min(bound as usize / 2);
    let mut tail: std::collections::VecDeque<u8> = std::collections::VecDeque::with_capacity(keep);
    let mut len: u64 = 0;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => return,
        };
        let chunk = &buf[..n];
        // The newest `keep` bytes, whatever the file holds.
        tail.extend(chunk);
        let over = tail.len().saturating_sub(keep);
        tail.drain(..over);
        let wrote = if len + n as u64 > bound {
            let (a, b) = tail.as_slices();
            to.set_len(0)
                .and_then(|_| to.seek(SeekFrom::Start(0)))
                .and_then(|_| to.write_all(a))
                .and_then(|_| to.write_all(b))
                .map(|_| len = tail.len() as u64)
        } else {
            to.write_all(chunk).map(|_| len += n as u64)
        };
        if wrote.is_err() {
            return;
        }
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // the tests remove their own temporary directories
mod tests {
    use super::*;

    #[test]
    fn a_log_written_without_end_stays_within_its_bound_and_keeps_the_newest_bytes() {
        let dir = std::env::temp_dir().join(format!("warden-log-bound-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("console.log");
        let (read, write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap();
        let to = std::fs::File::create(&path).unwrap();
        let bound = 64 * 1024;
        let copier = std::thread::spawn(move || copy_bounded(std::fs::File::from(read), to, bound));
        let mut w = std::fs::File::from(write);
        let mut biggest = 0;
        for i in 0..5000 {
            writeln!(w, "line {i:06} of a guest that never stops writing").unwrap();
            if i % 500 == 0 {
                biggest = biggest.max(std::fs::metadata(&path).unwrap().len());
            }
        }
        drop(w);
        copier.join().unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        assert!(text.len() as u64 <= bound, "{} bytes", text.len());
        assert!(biggest <= bound, "{biggest} bytes seen");
        assert!(
            text.ends_with("line 004999 of a guest that never stops writing\n"),
            "the newest line is gone"
        );
    }
}
