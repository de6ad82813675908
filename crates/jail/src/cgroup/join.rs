//! How the sandbox's init enters its cgroup without anyone writing its pid
//! into `cgroup.procs`.
//!
//! Writing a pid into `cgroup.procs` moves a whole thread group, which
//! takes the kernel's global `cgroup_threadgroup_rwsem` for writing; when
//! that lock has been idle for a while, taking it waits for a full RCU
//! grace period (about 10 ms at HZ=250), on the start path of every
//! sandbox. Two ways in skip it:
//!
//! - cgroup v2: the init is born in the directory, by `clone3` with
//!   `CLONE_INTO_CGROUP` (the supervisor passes the directory, see
//!   [`crate::sys::clone_into_cgroup`]);
//! - cgroup v1: the init moves itself, its only thread, by writing `0` into
//!   the directory's `tasks` file. A single thread moving itself cannot
//!   exit or exec under the kernel's hands, so the kernel skips the global
//!   lock. The files are opened by the supervisor before the clone and
//!   inherited: v1 checks the credentials of whoever opened the file (root,
//!   or the user a v1 parent was delegated to), never the init's.
//!
//! Either way the init is confined before it does anything: it joins first
//! thing after the clone, and a failed join ends it before it builds its
//! root (fail closed). Children inherit every hierarchy.

use std::fs;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::PathBuf;

use super::{hint, Cgroup, CgroupError, Op};

/// What a new process needs to be born in, or move itself into, a sandbox's
/// cgroup.
#[derive(Debug, Default)]
pub struct Joining {
    /// The v2 directory, for `clone3(CLONE_INTO_CGROUP)`.
    pub v2: Option<OwnedFd>,
    /// Each v1 directory's `tasks` file, open for writing, with its path
    /// (for errors).
    pub v1_tasks: Vec<(OwnedFd, PathBuf)>,
}

impl Cgroup {
    /// Open what [`Joining`] holds for each of this cgroup's directories.
    pub fn joining(&self) -> Result<Joining, CgroupError> {
        let mut j = Joining::default();
        for dir in &self.dirs {
            let path = if dir.v2 {
                dir.path.clone()
            } else {
                dir.path.join("tasks")
            };
            let open = if dir.v2 {
                fs::OpenOptions::new()
                    .read(true)
                    .custom_flags(libc::O_DIRECTORY)
                    .open(&path)
            } else {
                fs::OpenOptions::new().write(true).open(&path)
            };
            let file = open.map_err(|source| CgroupError::AddProcess {
                pid: 0,
                path: path.clone(),
                hint: hint(Op::AddProcess, &source),
                source,
            })?;
            if dir.v2 {
                j.v2 = Some(file.into());
            } else {
                j.v1_tasks.push((file.into(), path));
            }
        }
        Ok(j)
    }

    /// Move a process (host pid) into this cgroup's v2 directory only: the
    /// way in when the clone could not place it there (a kernel before 5.7,
    /// or a seccomp filter around warden that refuses `clone3`).
    pub fn add_process_v2(&self, pid: i32) -> Result<(), CgroupError> {
        if pid <= 0 {
            return Err(CgroupError::AddProcess {
                pid,
                path: self.main_path(),
                hint: "pass the host pid of the sandbox's process",
                source: io::Error::from(io::ErrorKind::InvalidInput),
            });
        }
        if let Some(dir) = self.v2_dir() {
            let path = dir.path.join("cgroup.procs");
            super::write_raw(&path, &pid.to_string()).map_err(|source| {
                CgroupError::AddProcess {
                    pid,
                    path: dir.path.clone(),
                    hint: hint(Op::AddProcess, &source),
                    source,
                }
            })?;
        }
        Ok(())
    }
}

/// In the init, first thing after the clone: move this process (its only
/// thread) into each v1 directory through its inherited `tasks` file.
pub fn join_self(tasks: &[(OwnedFd, PathBuf)]) -> Result<(), CgroupError> {
    for (fd, path) in tasks {
        let written = match nix::unistd::write(fd.as_fd(), b"0") {
            Ok(1) => Ok(()),
            Ok(_) => Err(io::Error::from(io::ErrorKind::WriteZero)),
            Err(e) => Err(io::Error::from(e)),
        };
        written.map_err(|source| CgroupError::AddProcess {
            pid: 0,
            path: path.clone(),
            hint: hint(Op::AddProcess, &source),
            source,
        })?;
    }
    Ok(())
}
