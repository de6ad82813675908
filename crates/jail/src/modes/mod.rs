//! Mode changes that would open a file to the host's other users, judged
//! by the sandbox's supervisor on the host (see [`rule`] for the rule).
//!
//! The init loads a second seccomp filter ([`crate::seccomp::NOTIFY_RULES`])
//! over the main one, with a listener (`SECCOMP_FILTER_FLAG_NEW_LISTENER`),
//! and hands the listener to its supervisor over a socket pair before
//! anything of the sandbox runs; it keeps no copy. A `chmod`, `fchmod`,
//! `fchmodat` or `fchmodat2` whose mode carries a group or other bit then
//! waits in the kernel while one thread of the supervisor ([`watch`])
//! finds the file as the caller would (its descriptor, or its path from its
//! root and working directory: [`walk`]), judges it, makes the change
//! itself on that descriptor with the caller's file-system identity (so the
//! kernel still checks ownership through the share's view and read-only
//! mounts), and answers with the result. Nothing is ever let through to be
//! done again by path (`SECCOMP_USER_NOTIF_FLAG_CONTINUE`), which the
//! sandbox could swap between the check and the use.
//!
//! Closed when anything is missing: a notifying call with nobody listening
//! fails (`ENOSYS`, the kernel's answer), and so does one this module
//! cannot judge. Modes without group or other bits (`0600`, `0700`) never
//! leave the kernel.
//!
//! With an exec allowlist the same filter, and so the same listener (the
//! kernel gives a process one), also puts the sandbox's execs to this
//! thread, which records each one refused ([`exec`]); it never lets an
//! exec through that the kernel would refuse.

mod attrs;
mod caller;
pub mod exec;
mod links;
pub mod pace;
pub mod rule;
mod walk;

use caller::Caller;
use libseccomp::{notify_id_valid, ScmpNotifReq, ScmpNotifResp, ScmpNotifRespFlags};
use rustix::io::Errno;
use std::collections::HashMap;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use walk::{Base, Named};

/// The notifying filter ([`crate::seccomp::NOTIFY_RULES`]) for the target
/// architecture, compiled by the build script (empty where warden has no
/// filter).
pub const NOTIFY_PROGRAM: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/seccomp-notify.bpf"));
/// The same with the exec allowlist's calls ([`crate::seccomp::EXEC_NOTIFY_RULES`]), loaded
/// instead when the sandbox has an allowlist: a process has one listener.
pub const NOTIFY_EXEC_PROGRAM: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/seccomp-notify-exec.bpf"));

/// Why a sandbox does not start without the mode filter's listener.
const UNJUDGED: &str = "the sandbox's mode changes could not be judged";
/// `fchmodat2`'s number, the same on x86_64 and aarch64.
const SYS_FCHMODAT2: i64 = 452;
/// How many files' taken-away bits one run remembers.
const REMEMBERED: usize = 65_536;

/// In the init, after the main filter: load the notifying filter and hand
/// its listener to the supervisor over `channel`; with an allowlist
/// (`exec`), the filter that also puts execs to the supervisor, and the
/// files the allowlist grants after the listener ([`exec::send_allowed`]).
/// Where the kernel gives
/// no listener (seccomp user notification, Linux 5.0; the judge needs
/// `pidfd_getfd`, 5.6) the sandbox does not start: a filter loaded without
/// one would make every such call fail (`ENOSYS`), `chmod +x` and the
/// `0644` of every unpacked file among them, with only a debug line on the
/// supervisor's side to say why. No kernel with Landlock lacks either.
pub(crate) fn install_in_init(
    channel: Option<&OwnedFd>,
    exec: Option<&crate::exec_rules::Allowed>,
) -> Result<(), String> {
    let program = match exec {
        Some(_) => NOTIFY_EXEC_PROGRAM,
        None => NOTIFY_PROGRAM,
    };
    match load(program, true) {
        Ok(Some(listener)) => {
            let first = [if exec.is_some() {
                exec::WITH_EXEC
            } else {
                b'f'
            }];
            let sent = match channel {
                Some(c) => crate::fdpass::send(c.as_fd(), &first, &[listener.as_raw_fd()])
                    .map(drop)
                    .map_err(|e| format!("cannot hand the mode listener to the supervisor: {e}")),
                None => Ok(()),
            };
            // The init keeps no copy: a process of the sandbox holding it
            // could answer its own calls.
            drop(listener);
            sent?;
            match (channel, exec) {
                (Some(c), Some(allowed)) => exec::send_allowed(c, allowed),
                _ => Ok(()),
            }
        }
        Ok(None) => Err(format!(
            "the kernel gave no seccomp listener for the mode filter: {UNJUDGED}"
        )),
        Err(e) => Err(format!(
            "cannot load the seccomp mode filter with a listener ({e}): {UNJUDGED}"
        )),
    }
}

/// Load `program` (a notifying filter), with a listener when `listen`.
fn load(program: &[u8], listen: bool) -> Result<Option<OwnedFd>, Errno> {
    const SECCOMP_SET_MODE_FILTER: libc::c_uint = 1;
    const SECCOMP_FILTER_FLAG_NEW_LISTENER: libc::c_uint = 1 << 3;
    let filter = crate::sys::sock_filters(program).ok_or(Errno::INVAL)?;
    let len = libc::c_ushort::try_from(filter.len()).map_err(|_| Errno::INVAL)?;
    let prog = libc::sock_fprog {
        len,
        filter: filter.as_ptr() as *mut libc::sock_filter,
    };
    let flags = if listen {
        SECCOMP_FILTER_FLAG_NEW_LISTENER
    } else {
        0
    };
    // SAFETY: `prog` points at `filter`, a live array of exactly `len`
    // instructions that outlives the call; the kernel copies the program.
    // With the listener flag the kernel returns a new descriptor, owned
    // here from then on.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            SECCOMP_SET_MODE_FILTER,
            flags,
            &prog as *const libc::sock_fprog,
        )
    };
    if rc < 0 {
        return Err(Errno::from_raw_os_error(
            std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EINVAL),
        ));
    }
    if !listen {
        return Ok(None);
    }
    let fd = i32::try_from(rc).map_err(|_| Errno::INVAL)?;
    // SAFETY: the kernel just installed this descriptor for this process;
    // nothing else owns it.
    Ok(Some(unsafe {
        <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd)
    }))
}

/// Judge the sandbox's mode changes on one thread until every process of
/// it is gone. `channel` brings the listener from the init; files born
/// at or after `since` (the sandbox's start, on the coarse real-time
/// clock file systems stamp births with) are the sandbox's own. With an
/// allowlist, its execs are judged too, and each refusal is written to
/// `records` ([`exec::RecordReader`]). `cpus`: the sandbox's CPU limit,
/// which the judging is held to as well ([`pace`]).
pub(crate) fn watch(
    channel: OwnedFd,
    since: (i64, u32),
    records: Option<OwnedFd>,
    cpus: Option<f64>,
) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("warden-modes".into())
        .stack_size(256 * 1024)
        .spawn(move || serve(channel, since, records, cpus))
        .map(drop)
}

/// [`watch`] for a helper of warden's own that changes the host's files
/// for a sandbox as the host's root (runsc for gVisor, see
/// `gvisor::modes`): its calls are judged by the same rule, and a change
/// the rule permits is made with the supervisor's identity, since the
/// helper's is root too and whether the sandbox may change that file at
/// all is the helper's kernel's own check (gVisor's), which the host
/// cannot see. The rule alone decides what reaches the host. `cpus`: the
/// sandbox's CPU limit, which the judging is held to ([`pace`]).
pub(crate) fn watch_helper(
    channel: OwnedFd,
    since: (i64, u32),
    cpus: Option<f64>,
) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("warden-modes".into())
        .stack_size(256 * 1024)
        .spawn(move || serve_as(channel, since, None, true, own_budget(cpus)))
        .map(drop)
}

/// [`watch`] for a helper that runs as an unprivileged user of the host
/// and changes the host's files for a sandbox (a VM's file servers, see
/// `vmm`): judged by the same rule, each permitted change made with the
/// helper's own file-system identity, as a sandbox process's is.
/// `budget`: the sandbox's CPU account, which the judging is held to,
/// shared with its other file server's judge ([`pace::Budget`]).
pub(crate) fn watch_unprivileged(
    channel: OwnedFd,
    since: (i64, u32),
    budget: Option<pace::Budget>,
) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("warden-modes".into())
        .stack_size(256 * 1024)
        .spawn(move || serve_as(channel, since, None, false, budget))
        .map(drop)
}

/// The account of a sandbox limited to `cpus` for its one judge; `None`
/// without a limit (or with one its settings would have refused).
fn own_budget(cpus: Option<f64>) -> Option<pace::Budget> {
    pace::Budget::new(cpus).ok().flatten()
}

/// The start of the sandbox, as [`watch`] takes it.
pub(crate) fn now() -> (i64, u32) {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::RealtimeCoarse);
    (t.tv_sec, u32::try_from(t.tv_nsec).unwrap_or(0))
}

fn serve(channel: OwnedFd, since: (i64, u32), records: Option<OwnedFd>, cpus: Option<f64>) {
    serve_as(channel, since, records, false, own_budget(cpus))
}

/// `helper`: the calls are a helper's (see [`watch_helper`]); `budget`:
/// the sandbox's CPU account, the judge's too ([`pace`]).
fn serve_as(
    channel: OwnedFd,
    since: (i64, u32),
    records: Option<OwnedFd>,
    helper: bool,
    budget: Option<pace::Budget>,
) {
    let mut first = [0u8; 1];
    let received = loop {
        match crate::fdpass::recv(channel.as_fd(), &mut first) {
            Err(nix::errno::Errno::EINTR) => {}
            other => break other.map(|(_, mut v)| v.pop()),
        }
    };
    let listener = match received {
        Ok(Some(l)) => l,
        // The init failed before (it says why on its report pipe: a
        // kernel that gives no listener among the reasons), so nothing of
        // the sandbox runs.
        _ => {
            tracing::debug!("no mode listener from the sandbox: opening modes fail (ENOSYS)");
            return;
        }
    };
    let exec = match (first[0] == exec::WITH_EXEC, records) {
        (true, Some(records)) => Some(exec::ExecJudge::receive(&channel, records)),
        _ => None,
    };
    drop(channel);
    let mut judge = Judge {
        since,
        taken: HashMap::new(),
        helper,
    };
    let mut failures = 0;
    // Started once the sandbox's filter is in place: waiting for the init
    // costs no CPU, and the start is never paced.
    let mut pace = budget.map(|b| b.pace());
    while readable(&listener) {
        let Ok(req) = ScmpNotifReq::receive(listener.as_raw_fd()) else {
            // The caller went away between the wake-up and the receipt.
            failures += 1;
            if failures > 1000 {
                return;
            }
            continue;
        };
        failures = 0;
        let resp = match exec.as_ref().filter(|_| exec::ExecJudge::handles(&req)) {
            Some(x) => match x.judge(&listener, &req) {
                exec::Verdict::Continue => {
                    ScmpNotifResp::new_continue(req.id, ScmpNotifRespFlags::empty())
                }
                exec::Verdict::Refuse(e) => {
                    ScmpNotifResp::new_error(req.id, -e.raw_os_error(), ScmpNotifRespFlags::empty())
                }
            },
            None => match judge.call(&listener, &req) {
                Ok(()) => ScmpNotifResp::new_val(req.id, 0, ScmpNotifRespFlags::empty()),
                Err(e) => {
                    ScmpNotifResp::new_error(req.id, -e.raw_os_error(), ScmpNotifRespFlags::empty())
                }
            },
        };
        // A caller killed meanwhile is no longer waiting: nothing to do.
        let _ = resp.respond(listener.as_raw_fd());
        // Past the sandbox's share of the CPU the judge waits, and the
        // sandbox's next calls with it.
        if let Some(p) = pace.as_mut() {
            p.after_call();
        }
    }
}

/// Wait for a notification; false once no process uses the filter.
fn readable(listener: &OwnedFd) -> bool {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    loop {
        let mut fds = [PollFd::new(listener.as_fd(), PollFlags::POLLIN)];
        match poll(&mut fds, PollTimeout::NONE) {
            Ok(_) => {
                let got = fds[0].revents().unwrap_or(PollFlags::POLLNVAL);
                if got.contains(PollFlags::POLLIN) {
                    return true;
                }
                if got.intersects(PollFlags::POLLHUP | PollFlags::POLLERR | PollFlags::POLLNVAL) {
                    return false;
                }
            }
            Err(nix::errno::Errno::EINTR) => {}
            Err(_) => return false,
        }
    }
}

/// A file as the rule remembers it: device, inode, birth.
type Key = (u32, u32, u64, i64, u32);

/// What one run remembers between calls.
struct Judge {
    since: (i64, u32),
    /// Group and other bits taken away through this rule, by file, to be
    /// given back.
    taken: HashMap<Key, u32>,
    /// The callers are a helper running as the host's root (see
    /// [`watch_helper`]): changes are made with the supervisor's identity.
    helper: bool,
}

/// How the change is made on the descriptor found.
enum Apply {
    /// `fchmod` on the caller's own open file.
    Open,
    /// A path's file, found as an `O_PATH` descriptor.
    Path,
}

impl Judge {
    fn call(&mut self, listener: &OwnedFd, req: &ScmpNotifReq) -> Result<(), Errno> {
        let nr = i64::from(req.data.syscall.as_raw_syscall());
        let args = req.data.args;
        let caller = Caller::open(req.pid)?;
        valid(listener, req.id)?;
        if !self.helper {
            caller.assume()?;
        }
        // Attributes (an ACL is a mode) and hard links, judged on the same
        // file by the same rule.
        if attrs::handles(nr) {
            return self.attribute(listener, req, &caller);
        }
        if links::handles(nr) {
            return self.link(listener, req, &caller);
        }
        let (target, mode, apply) = match nr {
            libc::SYS_fchmod => (caller.take_fd(args[0])?, args[1], Apply::Open),
            #[cfg(target_arch = "x86_64")]
            libc::SYS_chmod => {
                let path = caller.read_path(args[0])?;
                let named = Named {
                    base: Base::Cwd,
                    path: &path,
                    follow: true,
                    empty_is_base: false,
                };
                (walk::resolve(&caller, &named)?, args[1], Apply::Path)
            }
            libc::SYS_fchmodat | SYS_FCHMODAT2 => {
                let flags = if nr == SYS_FCHMODAT2 {
                    args[3] as u32 as i32
                } else {
                    0
                };
                if flags & !(libc::AT_SYMLINK_NOFOLLOW | libc::AT_EMPTY_PATH) != 0 {
                    return Err(Errno::INVAL);
                }
                let path = caller.read_path(args[1])?;
                let dirfd = args[0] as u32 as i32;
                let named = Named {
                    base: if dirfd == libc::AT_FDCWD {
                        Base::Cwd
                    } else {
                        Base::Fd(args[0])
                    },
                    path: &path,
                    follow: flags & libc::AT_SYMLINK_NOFOLLOW == 0,
                    empty_is_base: flags & libc::AT_EMPTY_PATH != 0,
                };
                (walk::resolve(&caller, &named)?, args[2], Apply::Path)
            }
            _ => return Err(Errno::NOSYS),
        };
        // The descriptors were taken from the caller, not a successor.
        valid(listener, req.id)?;
        self.change(&target, mode as u32, apply)
    }

    /// What the rule knows of `target`, and the key its taken-away bits
    /// are remembered by. Every call the supervisor judges on a file (a
    /// mode, an ACL, a link) reads it here.
    fn seen(&self, target: &OwnedFd) -> Result<(rule::Seen, Key), Errno> {
        use rustix::fs::{statx, AtFlags, StatxFlags};
        let st = statx(
            target.as_fd(),
            "",
            AtFlags::EMPTY_PATH,
            StatxFlags::TYPE | StatxFlags::MODE | StatxFlags::INO | StatxFlags::BTIME,
        )?;
        let born = (st.stx_btime.tv_sec, st.stx_btime.tv_nsec);
        let own = st.stx_mask & StatxFlags::BTIME.bits() != 0 && born >= self.since;
        let key = (
            st.stx_dev_major,
            st.stx_dev_minor,
            st.stx_ino,
            born.0,
            born.1,
        );
        let seen = rule::Seen {
            mode: u32::from(st.stx_mode),
            own,
            given_back: self.taken.get(&key).copied().unwrap_or(0),
        };
        Ok((seen, key))
    }

    /// Remember the group and other bits a permitted change from
    /// `current` to `mode` took away, to be given back.
    fn remember(&mut self, key: Key, current: u32, mode: u32) {
        let taken = rule::taken_away(current, mode);
        if taken != 0 && (self.taken.len() < REMEMBERED || self.taken.contains_key(&key)) {
            *self.taken.entry(key).or_insert(0) |= taken;
        }
    }

    /// Judge and make the change on `target`.
    fn change(&mut self, target: &OwnedFd, mode: u32, apply: Apply) -> Result<(), Errno> {
        use rustix::fs::AtFlags;
        let (seen, key) = self.seen(target)?;
        let current = seen.mode;
        if current & libc::S_IFMT == libc::S_IFLNK {
            // A link's own mode cannot be changed.
            return Err(Errno::OPNOTSUPP);
        }
        // A set-ID bit is never the sandbox's to set on a host file: in a
        // process sandbox the main filter refuses it before this judge is
        // asked; a helper's (runsc's) call reaches here whatever its own
        // kernel let through, and the file would be set-user-ID of its
        // owner on the host.
        if mode & (libc::S_ISUID | libc::S_ISGID) != 0 {
            return Err(Errno::PERM);
        }
        if !rule::may_set(seen, mode) {
            return Err(Errno::PERM);
        }
        let new = rustix::fs::Mode::from_bits_truncate(mode & 0o7777);
        match apply {
            Apply::Open => rustix::fs::fchmod(target, new)?,
            // The file the descriptor holds, through the supervisor's own
            // table: a path nobody else can change.
            Apply::Path => rustix::fs::chmodat(
                rustix::fs::CWD,
                format!("/proc/self/fd/{}", target.as_raw_fd()),
                new,
                AtFlags::empty(),
            )?,
        }
        self.remember(key, current, mode);
        Ok(())
    }
}

/// The notification still stands: its caller is alive and waiting, so
/// what was opened in its name is its.
fn valid(listener: &OwnedFd, id: u64) -> Result<(), Errno> {
    notify_id_valid(listener.as_raw_fd(), id).map_err(|_| Errno::NOENT)
}
