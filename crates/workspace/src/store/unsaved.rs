//! The `layer-unsaved` mark: which supervisor holds a running layer in
//! memory, named so that a recycled PID never leads to another sandbox's
//! layer. It reads and checks the mark; it never writes a layer.

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The mark a run with a size-limited layer (`--disk`) leaves beside
/// `upper/` while the layer is in memory only (the jail's
/// `layer::UNSAVED_MARK`, the same name).
pub const UNSAVED_MARK: &str = "layer-unsaved";

/// What the `layer-unsaved` mark says: which process holds the running
/// layer and how to know it is still that process. A PID alone names
/// whatever process has it now: once the supervisor that wrote the mark
/// dies, the kernel hands its PID to another, and every supervisor holds
/// its layer at the same descriptor number, so `/proc/PID/fd/N` would be
/// another sandbox's layer. The mark therefore also holds the
/// supervisor's start time (`/proc/PID/stat` field 22) and the device of
/// the layer's tmpfs, and both must still match before the path is
/// followed. A mark without them (an older warden's) is never followed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnsavedMark {
    pub pid: u32,
    pub fd: i32,
    /// The supervisor's start time in clock ticks since boot.
    pub start_ticks: u64,
    /// `st_dev` of the layer's tmpfs.
    pub dev: u64,
}

impl UnsavedMark {
    /// The mark of this process's descriptor `fd` of a layer's tmpfs.
    pub fn of_own(fd: i32) -> Option<UnsavedMark> {
        let pid = std::process::id();
        let dev = fs::metadata(format!("/proc/self/fd/{fd}")).ok()?.dev();
        Some(UnsavedMark {
            pid,
            fd,
            start_ticks: live_start_ticks(pid)?,
            dev,
        })
    }

    /// The mark's text: `PID FD START_TICKS DEV`.
    pub fn text(&self) -> String {
        format!(
            "{} {} {} {}\n",
            self.pid, self.fd, self.start_ticks, self.dev
        )
    }

    /// Read a mark; `None` for one that lacks any field.
    pub fn parse(text: &str) -> Option<UnsavedMark> {
        let mut it = text.split_whitespace();
        Some(UnsavedMark {
            pid: it.next()?.parse().ok()?,
            fd: it.next()?.parse().ok()?,
            start_ticks: it.next()?.parse().ok()?,
            dev: it.next()?.parse().ok()?,
        })
    }

    /// Whether the supervisor that wrote the mark still runs (not a
    /// recycled PID, not a zombie).
    pub fn writer_alive(&self) -> bool {
        live_start_ticks(self.pid) == Some(self.start_ticks)
    }

    /// `upper/` of the layer the mark names, while its writer runs and
    /// the descriptor is still the same detached tmpfs holding a layer.
    pub fn live_upper(&self) -> Option<PathBuf> {
        if !self.writer_alive() {
            return None;
        }
        let link = PathBuf::from(format!("/proc/{}/fd/{}", self.pid, self.fd));
        // A detached mount's root reads as "/".
        if fs::read_link(&link).ok()? != Path::new("/")
            || fs::metadata(&link).ok()?.dev() != self.dev
        {
            return None;
        }
        let upper = link.join("upper");
        let held = upper.is_dir() && link.join("work").is_dir();
        // Checked again after: a writer that died in between may have
        // handed its PID on already.
        (held && self.writer_alive()).then_some(upper)
    }
}

/// The start time of process `pid` (`/proc/PID/stat` field 22) while it
/// runs; `None` once it is gone or a zombie.
pub fn live_start_ticks(pid: u32) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name, which may hold spaces and ')'.
    let (_, rest) = stat.rsplit_once(')')?;
    let mut fields = rest.split_whitespace();
    let state = fields.next()?;
    let ticks = fields.nth(18)?.parse::<u64>().ok()?;
    (!matches!(state, "Z" | "X")).then_some(ticks)
}
