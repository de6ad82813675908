//! The process whose call is being judged, as the supervisor reaches it:
//! its descriptors (`pidfd_getfd`), its memory (`/proc/PID/mem`), its root
//! and working directory (`/proc/PID/root`, `cwd`), and the identity it
//! acts with, which the judging thread takes on for the change so that the
//! kernel checks the sandbox's own permissions (search, ownership through
//! the share's view, read-only mounts), not the supervisor's.

use rustix::fs::{Mode, OFlags, CWD};
use rustix::io::Errno;
use rustix::process::{pidfd_getfd, pidfd_open, Pid, PidfdFlags, PidfdGetfdFlags};
use std::io::Read;
use std::os::fd::OwnedFd;
use std::os::unix::fs::FileExt;

/// The longest path the kernel takes, its NUL included.
const PATH_MAX: usize = 4096;

/// One calling thread of the sandbox.
pub(super) struct Caller {
    /// Its thread ID on the host.
    tid: i32,
    pidfd: OwnedFd,
    fsuid: u32,
    fsgid: u32,
    groups: Vec<u32>,
    /// Its thread group's and its own IDs in its innermost PID namespace,
    /// the names its `/proc` knows it by.
    pub ns_tgid: i32,
    pub ns_tid: i32,
}

impl Caller {
    /// The thread `tid` (on the host). The notification must be checked
    /// valid after this: until then `tid` may be another's.
    pub fn open(tid: u32) -> Result<Caller, Errno> {
        let tid = i32::try_from(tid).map_err(|_| Errno::SRCH)?;
        let mut text = String::new();
        std::fs::File::open(format!("/proc/{tid}/status"))
            .and_then(|mut f| f.read_to_string(&mut text))
            .map_err(|_| Errno::SRCH)?;
        let field = |name: &str| -> Vec<i64> {
            text.lines()
                .find_map(|l| l.strip_prefix(name))
                .map(|rest| {
                    rest.split_whitespace()
                        .filter_map(|w| w.parse().ok())
                        .collect()
                })
                .unwrap_or_default()
        };
        let fourth = |v: Vec<i64>| v.get(3).and_then(|n| u32::try_from(*n).ok());
        let last = |v: Vec<i64>| v.last().and_then(|n| i32::try_from(*n).ok());
        let (Some(fsuid), Some(fsgid), Some(tgid), Some(ns_tgid), Some(ns_tid)) = (
            fourth(field("Uid:")),
            fourth(field("Gid:")),
            last(field("Tgid:")),
            last(field("NStgid:")),
            last(field("NSpid:")),
        ) else {
            return Err(Errno::SRCH);
        };
        let groups = field("Groups:")
            .into_iter()
            .filter_map(|g| u32::try_from(g).ok())
            .collect();
        // The thread's own descriptor table where the kernel can name a
        // thread (6.9 on); its thread group's before.
        let pid = Pid::from_raw(tid).ok_or(Errno::SRCH)?;
        let pidfd =
            pidfd_open(pid, PidfdFlags::from_bits_retain(libc::O_EXCL as u32)).or_else(|_| {
                pidfd_open(Pid::from_raw(tgid).ok_or(Errno::SRCH)?, PidfdFlags::empty())
            })?;
        Ok(Caller {
            tid,
            pidfd,
            fsuid,
            fsgid,
            groups,
            ns_tgid,
            ns_tid,
        })
    }

    /// A copy of the caller's descriptor `fd`.
    pub fn take_fd(&self, fd: u64) -> Result<OwnedFd, Errno> {
        // The kernel reads an `int`: the high half of the register is not
        // the caller's to hide anything in.
        let fd = fd as u32 as i32;
        pidfd_getfd(&self.pidfd, fd, PidfdGetfdFlags::empty())
    }

    /// The caller's root directory, as it sees it.
    pub fn root(&self) -> Result<OwnedFd, Errno> {
        self.proc_dir("root")
    }

    /// The caller's working directory.
    pub fn cwd(&self) -> Result<OwnedFd, Errno> {
        self.proc_dir("cwd")
    }

    fn proc_dir(&self, which: &str) -> Result<OwnedFd, Errno> {
        rustix::fs::openat(
            CWD,
            format!("/proc/{}/{which}", self.tid),
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
    }

    /// The NUL-terminated path at `addr` in the caller's memory, without
    /// its NUL.
    pub fn read_path(&self, addr: u64) -> Result<Vec<u8>, Errno> {
        let mem =
            std::fs::File::open(format!("/proc/{}/mem", self.tid)).map_err(|_| Errno::FAULT)?;
        let mut path = Vec::new();
        let mut at = addr;
        let mut chunk = [0u8; 512];
        while path.len() < PATH_MAX {
            // Never across a page the caller may not have mapped.
            let to_page_end = 4096 - (at % 4096) as usize;
            let want = chunk.len().min(to_page_end);
            let n = mem
                .read_at(&mut chunk[..want], at)
                .map_err(|_| Errno::FAULT)?;
            if n == 0 {
                return Err(Errno::FAULT);
            }
            let got = &chunk[..n];
            if let Some(end) = got.iter().position(|b| *b == 0) {
                path.extend_from_slice(&got[..end]);
                return Ok(path);
            }
            path.extend_from_slice(got);
            at = at.checked_add(n as u64).ok_or(Errno::FAULT)?;
        }
        Err(Errno::NAMETOOLONG)
    }

    /// `len` bytes at `addr` in the caller's memory.
    pub fn read_bytes(&self, addr: u64, len: usize) -> Result<Vec<u8>, Errno> {
        let mem =
            std::fs::File::open(format!("/proc/{}/mem", self.tid)).map_err(|_| Errno::FAULT)?;
        let mut bytes = vec![0u8; len];
        mem.read_exact_at(&mut bytes, addr)
            .map_err(|_| Errno::FAULT)?;
        Ok(bytes)
    }

    /// The caller's user (`"uid_map"`) or group (`"gid_map"`) ID map, as
    /// (inside, outside, count), the outside as this process sees it.
    pub fn id_map(&self, which: &str) -> Result<Vec<(u32, u32, u32)>, Errno> {
        let text = std::fs::read_to_string(format!("/proc/{}/{which}", self.tid))
            .map_err(|_| Errno::SRCH)?;
        Ok(text
            .lines()
            .filter_map(|line| {
                let mut n = line.split_whitespace().map(|w| w.parse::<u32>().ok());
                Some((n.next()??, n.next()??, n.next()??))
            })
            .collect())
    }

    /// Take on the caller's file-system identity in this thread only, so
    /// that what the thread opens and changes next, the kernel checks as
    /// the caller's. A caller that is the host's root is refused: nothing
    /// here would then be checked.
    pub fn assume(&self) -> Result<(), Errno> {
        if self.fsuid == 0 {
            return Err(Errno::PERM);
        }
        if rustix::process::geteuid().is_root() {
            set_thread_groups(&self.groups)?;
        }
        set_thread_fs_ids(self.fsuid, self.fsgid)
    }
}

/// This thread's supplementary groups (the raw call changes the calling
/// thread only; libc's wrapper would change every thread of the process).
fn set_thread_groups(groups: &[u32]) -> Result<(), Errno> {
    let list: Vec<libc::gid_t> = groups.to_vec();
    // SAFETY: `list` is a live array of `len` gids that outlives the call;
    // the kernel copies it.
    let rc = unsafe { libc::syscall(libc::SYS_setgroups, list.len(), list.as_ptr()) };
    if rc != 0 {
        return Err(Errno::from_raw_os_error(
            std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EPERM),
        ));
    }
    Ok(())
}

/// This thread's file-system user and group; with a user other than 0
/// the kernel also drops the thread's file capabilities (DAC override,
/// owner override), so the change is checked as the caller's.
fn set_thread_fs_ids(uid: u32, gid: u32) -> Result<(), Errno> {
    // SAFETY: setfsgid and setfsuid take integers and change only the
    // calling thread's credentials; each returns the previous value, and
    // an impossible ID (`u32::MAX`) changes nothing and returns the
    // current one.
    let (now_gid, now_uid) = unsafe {
        libc::syscall(libc::SYS_setfsgid, gid);
        libc::syscall(libc::SYS_setfsuid, uid);
        (
            libc::syscall(libc::SYS_setfsgid, u32::MAX),
            libc::syscall(libc::SYS_setfsuid, u32::MAX),
        )
    };
    if now_gid != i64::from(gid) || now_uid != i64::from(uid) {
        return Err(Errno::PERM);
    }
    Ok(())
}
