//! The few operations every cgroup file takes: a directory made or removed
//! (retried while the kernel still counts exiting tasks, left first by the
//! caller when it is in it), a value written
//! in one `write(2)` as the kernel expects, a counter read by key.
//!
//! It knows no controller and no hierarchy; what to write where is the
//! callers'.

use std::fs;
use std::io::{self, Write as _};
use std::path::Path;
use std::thread::sleep;
use std::time::Instant;

use super::{hint, CgroupError, Op, POLL, REMOVE_TIMEOUT};

pub(super) fn mkdir(path: &Path, exist_ok: bool) -> Result<(), CgroupError> {
    match fs::create_dir(path) {
        Ok(()) => Ok(()),
        Err(e) if exist_ok && e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(source) => Err(CgroupError::Create {
            path: path.to_path_buf(),
            hint: hint(Op::Create, &source),
            source,
        }),
    }
}

pub(super) fn rmdir_retrying(path: &Path) -> Result<(), CgroupError> {
    let deadline = Instant::now() + REMOVE_TIMEOUT;
    loop {
        match fs::remove_dir(path) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) && Instant::now() < deadline => {
                sleep(POLL)
            }
            Err(source) => {
                return Err(CgroupError::Remove {
                    path: path.to_path_buf(),
                    hint: hint(Op::Remove, &source),
                    source,
                })
            }
        }
    }
}

/// If the calling process is in the cgroup at `path`, move it (every
/// thread: `cgroup.procs`) into the parent directory; whether it moved.
/// Only the busy path of a removal asks: an empty cgroup costs no read.
pub(super) fn leave_for_parent(path: &Path) -> bool {
    let me = std::process::id().to_string();
    let held = fs::read_to_string(path.join("cgroup.procs"))
        .is_ok_and(|procs| procs.lines().any(|p| p.trim() == me));
    match path.parent() {
        Some(parent) if held => write_raw(&parent.join("cgroup.procs"), &me).is_ok(),
        _ => false,
    }
}

/// Write `value` to a cgroup file in one write(2), as the kernel expects.
pub(super) fn write_raw(path: &Path, value: &str) -> io::Result<()> {
    let mut file = fs::OpenOptions::new().write(true).open(path)?;
    file.write_all(value.as_bytes())
}

pub(super) fn write_file(path: &Path, value: &str, op: Op) -> Result<(), CgroupError> {
    write_raw(path, value).map_err(|source| CgroupError::Write {
        path: path.to_path_buf(),
        value: value.to_owned(),
        hint: hint(op, &source),
        source,
    })
}

/// The value of `key` in a "key value" per line file (memory.events,
/// cpu.stat, memory.oom_control, cpuacct.stat).
pub(super) fn keyed(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let mut parts = line.split_whitespace();
        (parts.next()? == key).then(|| parts.next()?.parse().ok())?
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    #[test]
    fn counters_are_read_by_key() {
        let events = "low 0\nhigh 0\nmax 12\noom 2\noom_kill 1\noom_group_kill 0\n";
        assert_eq!(keyed(events, "oom_kill"), Some(1));
        assert_eq!(keyed(events, "oom"), Some(2));
        assert_eq!(keyed(events, "absent"), None);
        assert_eq!(keyed("user 25\nsystem 7\n", "system"), Some(7));
    }
}
