//! The VMM's own jail: what a VM sandbox's QEMU runs under, so that code
//! that escapes into it (through its 9p server or its virtio devices)
//! reaches no more of the host than the sandbox itself could. Nothing in it
//! is QEMU's own: any host helper of a sandbox (a file server, say) is
//! jailed the same way, given its own [`VmmAccess`].
//!
//! Everything is prepared in the parent (the root's plan, the Landlock
//! ruleset, the seccomp program, the ID maps, the cgroup's files) and
//! applied between fork and exec with plain system calls only (the parent
//! may have threads: nothing there may allocate), in this order:
//!
//! 1. the cgroup: the forked process joins each v1 hierarchy (`0` into its
//!    `tasks`), and the helper is born in the v2 directory
//!    (`CLONE_INTO_CGROUP`), so no instruction of the helper's runs
//!    outside the sandbox's cgroup;
//! 2. a network namespace: the sandbox's own (entered through the user
//!    namespace that owns it when warden is not root), or an empty one of
//!    the VMM's own (with a user namespace mapping only warden's user and
//!    group to themselves when warden is not root);
//! 3. a PID namespace and a mount namespace of its own: the forked process
//!    stays outside as its keeper (see [`VmmJail::apply`]) and the helper
//!    is PID 1 there, seeing no other process; its root is a tmpfs holding
//!    only the paths of its [`VmmAccess`], each a bind mount of the host's
//!    (read-only unless written), and a `/proc` of its own: the host's
//!    other paths do not exist for it (see [`RootPlan`]);
//! 4. as root, no root: the bounding, inheritable and ambient capability
//!    sets emptied, root's exec-time powers switched off for good
//!    (`SECBIT_NOROOT`, locked), then the given user and group (the
//!    workspace owner's: the 9p server then serves the workspace as its
//!    owner has it), with no supplementary group but the one that may
//!    open `/dev/kvm` under KVM;
//! 5. `no_new_privs`;
//! 6. Landlock: read (and execute) beneath the VMM's own files and what it
//!    serves read-only, write only beneath what it serves read-write, the
//!    few devices it uses, no TCP at all, and (where the kernel can) no
//!    signal to and no abstract Unix socket of anything outside;
//! 7. a seccomp filter of warden's own under QEMU's: no `socket(2)` of any
//!    family and no `io_uring` (which could open one), so the VMM has only
//!    the descriptors it was handed: the channel, the TAP, its files.

use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::path::PathBuf;

mod log;
mod root;
mod rules;

// Reused by virtiofsd's jail (`crate::fsd`).
pub(crate) use rules::{filter, ruleset};

pub use log::{bounded_log, LogCopy, LOG_BOUND};
pub use root::{Kind, PlacedPath, RootPlan, RootPlanError};

/// `NS_GET_USERNS`: the user namespace that owns a namespace, as a new
/// descriptor (`_IO(0xb7, 0x1)`).
const NS_GET_USERNS: libc::c_ulong = 0xb701;

/// Why the VMM's jail could not be prepared.
#[derive(Debug, thiserror::Error)]
pub enum VmmJailError {
    #[error("cannot build the VMM's Landlock ruleset")]
    Ruleset(#[source] landlock::RulesetError),
    #[error("cannot open {path} for the VMM's Landlock rules")]
    Path {
        path: PathBuf,
        #[source]
        source: landlock::PathFdError,
    },
    #[error("cannot add the VMM's Landlock rule for {path}")]
    Rule {
        path: PathBuf,
        #[source]
        source: landlock::RulesetError,
    },
    #[error("this kernel has no Landlock, so the VMM cannot be confined to the files it serves: use Linux 5.13 or later with Landlock enabled (`lsm=` on the kernel command line), or the process backend")]
    NoLandlock,
    #[error("cannot build the VMM's seccomp filter: {0}")]
    Seccomp(String),
    #[error("cannot find the user namespace that owns the VM's network namespace")]
    Owner(#[source] nix::errno::Errno),
    #[error("cannot plan the VMM's own root")]
    Root(#[from] RootPlanError),
    #[error("cannot open the VMM's cgroup to start it there")]
    Cgroup(#[source] crate::cgroup::CgroupError),
    #[error("cannot open {path} to start the VMM in its cgroup")]
    CgroupProcs {
        path: PathBuf,
        #[source]
        source: nix::errno::Errno,
    },
}

/// The devices every helper gets: nothing but sinks and sources of bytes.
pub(crate) const DEVICES: [&str; 3] = ["/dev/null", "/dev/zero", "/dev/urandom"];

/// What the VMM may touch.
#[derive(Debug, Clone, Default)]
pub struct VmmAccess {
    /// Directories and files it reads (and may execute): its binary, its
    /// libraries and firmware, the kernel and initramfs, the read-only
    /// shares.
    pub readable: Vec<PathBuf>,
    /// Directories it reads and writes beneath, by path (its console log).
    pub writable: Vec<PathBuf>,
    /// Directories it reads beneath that it is handed as descriptors and
    /// reaches by no path (a VM's read-only shares and root tree, each
    /// opened once through no link and checked): a Landlock rule on each,
    /// on that very directory, and nothing placed in its root.
    pub readable_dirs: Vec<std::sync::Arc<OwnedFd>>,
    /// Directories it reads and writes beneath that it is handed as
    /// descriptors and reaches by no path (the workspace, opened once and
    /// checked to be the sandbox's own; a VM's read-write shares, opened
    /// once through no link and checked): a Landlock rule on each, on that
    /// very directory, and nothing placed in its root, so that a
    /// directory swapped in at the workspace's path is not its to write.
    pub writable_dirs: Vec<std::sync::Arc<OwnedFd>>,
    /// Devices it opens read-write (`/dev/kvm` under KVM).
    pub devices: Vec<PathBuf>,
    /// Host files (or directories) placed at another path of its root: a
    /// share made of chosen files only.
    pub placed: Vec<Placed>,
    /// An empty directory of warden's own, holding none of the paths
    /// above, where its root is built (a mount point in its own mount
    /// namespace only: nothing of the root ever shows there on the host).
    pub root: PathBuf,
}

/// A host file placed at another path of the helper's root.
#[derive(Debug, Clone)]
pub struct Placed {
    /// Its path, for messages only: it is placed and confined by `source`.
    pub host: PathBuf,
    /// The file opened once (`O_PATH`, through no link) and checked: what
    /// the root binds (through `/proc/self/fd/N`) and the Landlock rule is
    /// made on, never `host` looked up again.
    pub source: std::sync::Arc<OwnedFd>,
    pub inside: PathBuf,
    pub writable: bool,
    /// A detached mount tree of `host` to attach there instead of binding
    /// `host` itself: an idmapped view ([`crate::identity::helper_view_of`])
    /// that shows the file as the helper's own user's, so that it writes
    /// a file of root's or of another account without taking its IDs.
    /// Landlock's rule is on `source` (it holds on its inode, however it
    /// is reached).
    pub view: Option<std::sync::Arc<OwnedFd>>,
}

/// Where the VMM's network namespace comes from.
enum Net {
    /// Enter this one (the sandbox's), first entering the user namespace
    /// that owns it when there is one to enter.
    Enter { user: Option<OwnedFd>, net: RawFd },
    /// A new, empty one; rootless, inside a new user namespace whose maps
    /// are these lines (`setgroups`, `uid_map`, `gid_map`).
    Fresh { maps: Option<[Vec<u8>; 3]> },
}

/// The VMM's jail, prepared: apply it to the VMM's `Command` with
/// [`VmmJail::apply`] and keep it alive until the VMM has been spawned.
pub struct VmmJail {
    net: Net,
    root: std::sync::Arc<RootPlan>,
    /// Each v1 hierarchy's `tasks`, the v2 directory and its
    /// `cgroup.procs`: the helper is in its cgroup before it runs.
    cgroup: Option<(crate::cgroup::Joining, Option<OwnedFd>)>,
    ids: Option<(u32, u32)>,
    groups: Vec<libc::gid_t>,
    ruleset: OwnedFd,
    filter: Vec<libc::sock_filter>,
    /// The placed views the root attaches and the files it binds by their
    /// descriptors, open until the helper is spawned.
    _views: Vec<std::sync::Arc<OwnedFd>>,
    /// Where the helper's mode changes are judged ([`VmmJail::judge_modes`]):
    /// the filter its child loads, and the supervisor's end of the listener.
    modes: Option<crate::gvisor::modes::Judged>,
}

impl VmmJail {
    /// Prepare the jail. `netns`: the sandbox's network namespace, when the
    /// VM has a network (else the VMM gets an empty one). `ids`: as root,
    /// the user and group the VMM runs as (never root's powers, whatever
    /// they are).
    pub fn prepare(
        access: &VmmAccess,
        netns: Option<&OwnedFd>,
        ids: Option<(u32, u32)>,
        cgroup: Option<&crate::cgroup::Cgroup>,
    ) -> Result<VmmJail, VmmJailError> {
        // The devices it opens by name (`/dev/kvm`) may be its group's
        // only: that group, and no other, is kept as a supplementary one.
        let mut groups: Vec<libc::gid_t> = ids.map(|(_, g)| g).into_iter().collect();
        for d in &access.devices {
            use std::os::unix::fs::MetadataExt;
            if let Ok(m) = std::fs::metadata(d) {
                if m.mode() & 0o060 == 0o060 && !groups.contains(&m.gid()) && m.gid() != 0 {
                    groups.push(m.gid());
                }
            }
        }
        let root = crate::host::is_root();
        let net = match netns {
            Some(ns) => Net::Enter {
                user: if root { None } else { Some(owner_of(ns)?) },
                net: ns.as_raw_fd(),
            },
            None if root => Net::Fresh { maps: None },
            None => {
                let (uid, gid) = (
                    nix::unistd::getuid().as_raw(),
                    nix::unistd::getgid().as_raw(),
                );
                Net::Fresh {
                    maps: Some([
                        b"deny".to_vec(),
                        format!("{uid} {uid} 1\n").into_bytes(),
                        format!("{gid} {gid} 1\n").into_bytes(),
                    ]),
                }
            }
        };
        let cgroup = cgroup
            .map(|cg| -> Result<_, VmmJailError> {
                let joining = cg.joining().map_err(VmmJailError::Cgroup)?;
                let procs = joining
                    .v2
                    .as_ref()
                    .map(|dir| {
                        nix::fcntl::openat(
                            dir,
                            c"cgroup.procs",
                            nix::fcntl::OFlag::O_WRONLY | nix::fcntl::OFlag::O_CLOEXEC,
                            nix::sys::stat::Mode::empty(),
                        )
                        .map_err(|source| VmmJailError::CgroupProcs {
                            path: std::fs::read_link(format!("/proc/self/fd/{}", dir.as_raw_fd()))
                                .unwrap_or_default()
                                .join("cgroup.procs"),
                            source,
                        })
                    })
                    .transpose()?;
                Ok((joining, procs))
            })
            .transpose()?;
        let mut paths: Vec<(PathBuf, Kind)> = Vec::new();
        paths.extend(access.readable.iter().map(|p| (p.clone(), Kind::Read)));
        paths.extend(access.writable.iter().map(|p| (p.clone(), Kind::Write)));
        paths.extend(
            access
                .devices
                .iter()
                .cloned()
                .chain(DEVICES.iter().map(PathBuf::from))
                .map(|p| (p, Kind::Device)),
        );
        let placed: Vec<PlacedPath> = access
            .placed
            .iter()
            .map(|p| {
                // Read on the descriptor checked (a failure places
                // nothing: no file has inode 0).
                let st = nix::sys::stat::fstat(p.source.as_fd()).ok();
                PlacedPath {
                    host: p.host.clone(),
                    source: p.source.as_raw_fd(),
                    dir: st.is_some_and(|st| st.st_mode & libc::S_IFMT == libc::S_IFDIR),
                    id: st.map_or((0, 0), |st| (st.st_dev, st.st_ino)),
                    inside: p.inside.clone(),
                    kind: if p.writable { Kind::Write } else { Kind::Read },
                    view: p.view.as_deref().map(AsRawFd::as_raw_fd),
                }
            })
            .collect();
        Ok(VmmJail {
            root: std::sync::Arc::new(RootPlan::new(&access.root, &paths, &placed)?),
            cgroup,
            net,
            ids: if root { ids } else { None },
            groups,
            ruleset: rules::ruleset(access)?,
            // As root, a helper that runs as nobody serves its writable
            // shares through views swapping their owner (root's or a
            // system account's) with nobody: it may not open them to
            // other users ([`rules::filter`]).
            filter: rules::filter(
                root && ids.is_some_and(|(uid, _)| uid == crate::NOBODY),
                false,
            )?,
            _views: access
                .placed
                .iter()
                .flat_map(|p| p.view.iter().chain([&p.source]).cloned())
                .collect(),
            modes: None,
        })
    }

    /// Have the helper's mode changes judged by the supervisor with the
    /// process backend's one rule ([`crate::modes`]): a file server (QEMU's
    /// 9p) changes the host's files for a guest whose kernel may be the
    /// sandbox's own, speaking 9p as it likes, so the guest's filter does
    /// not count (virtiofsd is judged alike: [`crate::fsd::FsdJail::judge_modes`]).
    /// The helper loads the notifying filter
    /// last, with a listener it hands over; the caller starts the judge
    /// with [`VmmJail::watch_modes`] once the helper is spawned. Only
    /// where the helper runs as nobody over views that swap the shares'
    /// owner with it (as root): there a guest could make root's `0600` file
    /// `0644`. `budget`: the sandbox's CPU account, which the judging is
    /// held to (shared with virtiofsd's judge: [`crate::modes::pace`]).
    pub fn judge_modes(
        &mut self,
        budget: Option<&crate::modes::pace::Budget>,
    ) -> Result<(), VmmJailError> {
        if self.ids.is_none_or(|(uid, _)| uid != crate::NOBODY) {
            return Ok(());
        }
        let judged = crate::gvisor::modes::Judged::new(budget.cloned())
            .map_err(|e| VmmJailError::Seccomp(e.to_string()))?;
        // Its extended attribute writes go to the judge too (QEMU's 9p
        // server sets a guest's `user.*` ones), which refuses what the
        // filter refused for their names' sake.
        self.filter = rules::filter(true, true)?;
        self.modes = Some(judged);
        Ok(())
    }

    /// Start judging the spawned helper's mode changes (see
    /// [`VmmJail::judge_modes`]); files born since the judge was asked for
    /// are the sandbox's own. Nothing to do where none was.
    pub fn watch_modes(&self) -> std::io::Result<()> {
        match &self.modes {
            Some(m) => m.watch(),
            None => Ok(()),
        }
    }

    /// Have `cmd`'s program (the helper) start inside the jail. Registered
    /// after any `pre_exec` that needs the parent's powers; the jail must
    /// stay alive until the helper has been spawned.
    ///
    /// The process `cmd` spawns stays outside as the helper's keeper: it
    /// joins the cgroup, enters the network namespace, then forks the
    /// helper as PID 1 of a new PID namespace with a mount namespace of its
    /// own, keeps no descriptor, and ends with the helper's status (killed
    /// by a signal N: 128+N). Killing it kills the helper, and so does the
    /// end of the process that called this (however it ends: see [`keep`]).
    pub fn apply(&self, cmd: &mut std::process::Command) {
        use std::os::unix::process::CommandExt;
        // The launcher: this whole process, not the thread spawning.
        let launcher = std::process::id() as libc::pid_t;
        let (enter_user, enter_net) = match &self.net {
            Net::Enter { user, net } => (user.as_ref().map(AsRawFd::as_raw_fd), Some(*net)),
            Net::Fresh { .. } => (None, None),
        };
        let maps = match &self.net {
            Net::Fresh { maps: Some(m) } => Some(m.clone()),
            _ => None,
        };
        let fresh_root = matches!(self.net, Net::Fresh { maps: None });
        let (v1_tasks, v2): (Vec<RawFd>, Option<(RawFd, RawFd)>) = match &self.cgroup {
            Some((joining, procs)) => (
                joining
                    .v1_tasks
                    .iter()
                    .map(|(f, _)| f.as_raw_fd())
                    .collect(),
                joining
                    .v2
                    .as_ref()
                    .zip(procs.as_ref())
                    .map(|(d, p)| (d.as_raw_fd(), p.as_raw_fd())),
            ),
            None => (Vec::new(), None),
        };
        let root = self.root.clone();
        let ids = self.ids;
        let groups = self.groups.clone();
        let ruleset = self.ruleset.as_raw_fd();
        let filter = self.filter.clone();
        let modes = self.modes.as_ref().map(|m| m.filter());
        // A debug build's test may switch Landlock off, to see what the
        // other layers hold alone.
        let landlock = !crate::Weakened::current().landlock;
        // SAFETY: the closure runs in the child between fork and exec, a
        // single thread. It calls only async-signal-safe system calls
        // (write, setns, unshare, open, clone, waitpid, mount, pivot_root,
        // prctl, capset, setgroups, setres[ug]id, landlock_restrict_self,
        // seccomp, sendmsg, close) on descriptors the child has (copies of
        // the parent's table, kept open by the jail until the spawn
        // returns) and on memory the closure owns, prepared before the
        // fork; it allocates nothing.
        unsafe {
            cmd.pre_exec(move || {
                let check = crate::sys::check_rc;
                // Into the cgroup's v1 hierarchies first, while the powers
                // that opened their files are still ours.
                for fd in &v1_tasks {
                    write_fd(*fd, b"0")?;
                }
                if let Some(user) = enter_user {
                    check(libc::setns(user, libc::CLONE_NEWUSER).into())?;
                }
                if let Some(net) = enter_net {
                    check(libc::setns(net, libc::CLONE_NEWNET).into())?;
                }
                if fresh_root {
                    check(libc::unshare(libc::CLONE_NEWNET).into())?;
                }
                if let Some(maps) = &maps {
                    check(libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNET).into())?;
                    let files: [&[u8]; 3] = [
                        b"/proc/self/setgroups\0",
                        b"/proc/self/uid_map\0",
                        b"/proc/self/gid_map\0",
                    ];
                    for (file, line) in files.iter().zip(maps.iter()) {
                        write_file(file, line)?;
                    }
                }
                // The helper is born in its own PID and mount namespaces,
                // and in the cgroup's v2 directory (or this keeper moves
                // there first where the kernel cannot clone into it).
                let flags = libc::CLONE_NEWPID | libc::CLONE_NEWNS;
                let forked = match v2 {
                    Some((dir, procs)) => {
                        let dir = std::os::fd::BorrowedFd::borrow_raw(dir);
                        match crate::sys::clone_into_cgroup(flags, dir) {
                            Ok(f) => f,
                            Err(_) => {
                                write_fd(procs, b"0")?;
                                crate::sys::clone_process(flags).map_err(errno)?
                            }
                        }
                    }
                    None => crate::sys::clone_process(flags).map_err(errno)?,
                };
                if let crate::sys::Forked::Parent(pid) = forked {
                    keep(pid.as_raw(), launcher);
                }
                // The helper ends with its keeper, whoever kills it.
                check(libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0).into())?;
                root.enter()?;
                crate::caps::keep_capabilities(&[])?;
                if let Some((uid, gid)) = ids {
                    check(libc::setgroups(groups.len(), groups.as_ptr()).into())?;
                    check(libc::setresgid(gid, gid, gid).into())?;
                    check(libc::setresuid(uid, uid, uid).into())?;
                    // A change of user clears the parent-death signal
                    // (prctl(2)): set again, or a VMM run as nobody
                    // outlived its killed keeper (a restore refused before
                    // its guest ran, whose guest never ends it, was left
                    // running under PID 1).
                    check(libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0).into())?;
                }
                lock_down(landlock.then_some(ruleset), &filter)?;
                // Last: no_new_privs is set, and the helper's own filter
                // below lets the listener be handed over.
                match &modes {
                    Some(m) => m.in_child(),
                    None => Ok(()),
                }
            })
        };
    }
}

/// The last step of a host helper's jail, between fork and exec (the VMM,
/// the image builder, virtiofsd): no_new_privs, the Landlock ruleset
/// `ruleset` (none: switched off for a test), then the seccomp `filter`.
/// Async-signal-safe: system calls on what the caller prepared before the
/// fork, nothing allocated.
pub(crate) fn lock_down(
    ruleset: Option<std::os::fd::RawFd>,
    filter: &[libc::sock_filter],
) -> std::io::Result<()> {
    let check = |rc: libc::c_long| -> std::io::Result<()> {
        if rc < 0 {
            Err(std::io::Error::last_os_error())
        } else {
            Ok(())
        }
    };
    // SAFETY: prctl with integer arguments only.
    check(unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) }.into())?;
    if let Some(ruleset) = ruleset {
        // SAFETY: a ruleset descriptor the caller keeps open, no pointers.
        check(unsafe {
            libc::syscall(libc::SYS_landlock_restrict_self, ruleset, 0 as libc::c_uint)
        })?;
    }
    let prog = libc::sock_fprog {
        len: filter.len() as libc::c_ushort,
        filter: filter.as_ptr() as *mut libc::sock_filter,
    };
    const SECCOMP_SET_MODE_FILTER: libc::c_uint = 1;
    // SAFETY: `prog` points at `filter`, which outlives the call; the
    // kernel copies the program and never writes through the pointer.
    check(unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            SECCOMP_SET_MODE_FILTER,
            0 as libc::c_uint,
            &prog as *const libc::sock_fprog,
        )
    })
}

fn errno(e: nix::errno::Errno) -> std::io::Error {
    std::io::Error::from_raw_os_error(e as i32)
}

/// The keeper's life once the helper is forked: hold no descriptor (the
/// helper's channel ends with the helper), wait for it, end with its
/// status; and kill it when `launcher` (the warden process that started
/// it) has ended, however it ended (SIGKILL, a test's timeout). Never
/// returns.
///
/// A VMM whose launcher is gone serves no one (its channel and control
/// socket were the launcher's) and was left running for good: a template
/// builder killed mid-boot left its VMM, parented to PID 1, for as long as
/// anyone looked. `PR_SET_PDEATHSIG` on the keeper would not do: it fires
/// when the *thread* that forked the keeper ends, and a launcher may start
/// a helper from a thread that ends long before the helper should. The
/// launcher's pidfd is readable once its whole process has exited. It is
/// opened while the launcher is still this keeper's parent (checked after
/// the open), so it names that process and never one that took its PID
/// later. Where pidfds are missing (Linux before 5.3) the keeper only
/// waits, as it always did.
fn keep(pid: libc::pid_t, launcher: libc::pid_t) -> ! {
    // SAFETY: close_range, pidfd_open, getppid, poll, kill, waitpid and
    // _exit are async-signal-safe system calls; the poll set and the
    // status are locals of this frame.
    unsafe {
        libc::syscall(
            libc::SYS_close_range,
            3 as libc::c_uint,
            libc::c_uint::MAX,
            0,
        );
        let helper = libc::syscall(libc::SYS_pidfd_open, pid, 0 as libc::c_uint) as libc::c_int;
        let watched =
            libc::syscall(libc::SYS_pidfd_open, launcher, 0 as libc::c_uint) as libc::c_int;
        if libc::getppid() != launcher {
            // Gone already: reparented before the watch began.
            libc::kill(pid, libc::SIGKILL);
        } else if helper >= 0 && watched >= 0 {
            loop {
                let mut set = [
                    libc::pollfd {
                        fd: helper,
                        events: libc::POLLIN,
                        revents: 0,
                    },
                    libc::pollfd {
                        fd: watched,
                        events: libc::POLLIN,
                        revents: 0,
                    },
                ];
                let rc = libc::poll(set.as_mut_ptr(), 2, -1);
                if rc < 0 {
                    if *libc::__errno_location() == libc::EINTR {
                        continue;
                    }
                    break;
                }
                if set[1].revents != 0 {
                    libc::kill(pid, libc::SIGKILL);
                    break;
                }
                if set[0].revents != 0 {
                    break;
                }
            }
        }
        let mut status: libc::c_int = 0;
        loop {
            let rc = libc::waitpid(pid, &mut status, 0);
            if rc == pid {
                break;
            }
            if rc < 0 && *libc::__errno_location() != libc::EINTR {
                libc::_exit(127);
            }
        }
        if libc::WIFEXITED(status) {
            libc::_exit(libc::WEXITSTATUS(status));
        }
        libc::_exit(128 + libc::WTERMSIG(status));
    }
}

/// Write all of `bytes` to `fd`, in the child between fork and exec.
fn write_fd(fd: RawFd, bytes: &[u8]) -> std::io::Result<()> {
    // SAFETY: write is async-signal-safe; `bytes` outlives the call.
    let n = unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
    if n != bytes.len() as isize {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Write `line` to the NUL-terminated path `file`, in the child between
/// fork and exec.
pub(crate) fn write_file(file: &[u8], line: &[u8]) -> std::io::Result<()> {
    // SAFETY: `file` is NUL-terminated; open, write and close are
    // async-signal-safe and `line` outlives the write.
    unsafe {
        let fd = libc::open(file.as_ptr().cast(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let n = libc::write(fd, line.as_ptr().cast(), line.len());
        let e = std::io::Error::last_os_error();
        libc::close(fd);
        if n != line.len() as isize {
            return Err(e);
        }
    }
    Ok(())
}

/// The user namespace owning `ns` (a rootless VM's network namespace).
fn owner_of(ns: &OwnedFd) -> Result<OwnedFd, VmmJailError> {
    use std::os::fd::FromRawFd;
    // SAFETY: NS_GET_USERNS takes no argument and returns a new descriptor
    // (close-on-exec) or -1; `ns` is open.
    let fd = unsafe { libc::ioctl(ns.as_raw_fd(), NS_GET_USERNS) };
    if fd < 0 {
        return Err(VmmJailError::Owner(nix::errno::Errno::last()));
    }
    // SAFETY: `fd` was just returned by the kernel and is owned by no one
    // else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}
