//! The sandbox side: what the cloned child does, as PID 1 of its namespaces.
//!
//! It waits for the supervisor to write its ID maps, builds the root, applies
//! every restriction to itself (so that all it starts inherits them), starts
//! the command, and then stays as the sandbox's init: it reaps orphans,
//! forwards signals to the command, and reports the command's status to the
//! supervisor over a pipe that nothing else in the sandbox holds.
//!
//! The steps up to the command are here, in order; [`exec`] starts the
//! command and [`running`] is the init's life after that.

mod exec;
mod running;

use exec::ExecPlan;
use running::{serve, supervise_command};

use crate::landlock;
use crate::mounts::{self, RootPlan};
use crate::privileges::{self, Rlimits};
use crate::report::{write_report, Report};
use crate::spawn::{resolve_program, FORWARDED};
use nix::errno::Errno;
use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use std::ffi::CString;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::path::PathBuf;

/// Everything the child needs, prepared by the supervisor before the clone.
pub struct ChildPlan {
    pub root: RootPlan,
    /// Layers switched off for tests of the selftest (debug builds only;
    /// see [`crate::Weakened`]).
    pub weakened: crate::Weakened,
    /// With egress: the sandbox's end of the socket pair over which the
    /// init hands the proxy's sockets, opened inside its namespace, to the
    /// supervisor.
    pub egress_channel: Option<OwnedFd>,
    /// The init opens the proxy's sockets in its namespace and sends them
    /// over the channel.
    pub egress: bool,
    /// The network namespace is another sandbox's, joined at the clone and
    /// wired by that one: the init leaves it as it is (and could not change
    /// it: its user namespace does not own it).
    pub joined_network: bool,
    /// With `--publish`: the init keeps the channel and answers each
    /// request with a fresh TCP socket of the sandbox's namespace, for the
    /// supervisor to connect to a server inside.
    pub serve_sockets: bool,
    pub uid: u32,
    pub gid: u32,
    pub rlimits: Rlimits,
    /// The namespace's own bounds on its owner's per-user counters.
    pub user_limits: crate::quotas::UserLimits,
    /// Landlock: read and execute beneath these.
    pub landlock_read: Vec<PathBuf>,
    /// Landlock: write beneath these.
    pub writable: Vec<PathBuf>,
    /// The exec allowlist's entries (`process.allow_exec`), found inside
    /// once the root is built; empty: any program.
    pub allow_exec: Vec<String>,
    /// No namespaces: the child runs in the host's tree and process table.
    pub degraded: bool,
    /// Where volumes are mounted inside (`filesystem.volumes`), which the
    /// file operations serve as the sandbox's commands see them.
    pub volumes: Vec<PathBuf>,
    pub cwd: PathBuf,
    pub argv: Vec<CString>,
    pub env: Vec<CString>,
    pub path_var: String,
    /// The terminal the command gets, when a PTY was allocated on the host
    /// (degraded mode, where the host's devpts is the sandbox's).
    pub pty_slave: Option<OwnedFd>,
    /// With a terminal and a mount namespace: the init opens the terminal
    /// in the sandbox's own devpts and sends its master side over this.
    pub tty_channel: Option<OwnedFd>,
    /// With `--disk`: the sandbox's end of the pair over which the init
    /// hands the supervisor its size-limited layer once the root is built.
    pub layer_channel: Option<OwnedFd>,
    /// Descriptors of the supervisor's side, closed first thing.
    pub close_in_child: Vec<RawFd>,
    /// The `tasks` files of the sandbox's cgroup v1 directories, which the
    /// init writes itself into before anything else (see `cgroup::join`).
    pub cgroup_tasks: Vec<(OwnedFd, PathBuf)>,
    /// Where the v1 directories' `tasks` files come once the supervisor has
    /// made them (while this process builds the root): joined before the
    /// final message; end of file means there are none.
    pub cgroup_channel: Option<OwnedFd>,
    /// A long-lived sandbox: no command of its own; the init serves spawn
    /// requests on this channel (see [`crate::spawn`]) until it closes.
    pub service: Option<OwnedFd>,
    /// Where the init hands its supervisor the listener of the filter
    /// whose mode changes the supervisor judges (see [`crate::modes`]).
    pub modes_channel: Option<OwnedFd>,
}

/// Final-message flag: the supervisor placed the init in the sandbox's
/// cgroup (so it unshares a cgroup namespace rooted there).
pub const FINAL_IN_CGROUP: u8 = 1;
/// Final-message flag: no cgroup confines the sandbox; apply the fallback
/// rlimits.
pub const FINAL_RLIMIT_FALLBACK: u8 = 2;
/// Ends the final message; without it the message is incomplete (the
/// supervisor died while writing it) and the sandbox does not start.
pub const FINAL_TRAILER: &[u8; 8] = b"WARDEN\0\n";

/// Runs in the cloned child and never returns.
pub fn child_main(plan: ChildPlan, go: OwnedFd, report: OwnedFd, original_mask: SigSet) -> ! {
    let code = match child_setup_and_run(plan, go, &report, original_mask) {
        Ok(code) => code,
        Err(msg) => {
            write_report(&report, &Report::SetupFailed(msg));
            125
        }
    };
    // SAFETY: _exit ends the process without running destructors or atexit
    // handlers that belong to the supervisor this process was copied from.
    unsafe { libc::_exit(code) }
}

use crate::error::chain_str as chain;

fn child_setup_and_run(
    mut plan: ChildPlan,
    go: OwnedFd,
    report: &OwnedFd,
    original_mask: SigSet,
) -> Result<i32, String> {
    await_go(&mut plan, &go)?;
    let exec_allowed = if plan.degraded {
        enter_degraded(&plan)?
    } else {
        enter_namespaces(&mut plan)?
    };

    // The kernel clears the parent-death signal when the IDs change (as
    // they just did in root mode): arm it again. Should the supervisor have
    // died in between, the final message below ends early and we stop.
    arm_parent_death_signal();

    // The final message: the supervisor has confined us (or decided not to)
    // and compiled the filter. End of file before the trailer: abort.
    let flags = read_final(&go)?;
    crate::phase("init-final");
    drop(go);
    let sockets = confine(&mut plan, flags, report, exec_allowed.as_ref())?;

    // From here on the init holds no privilege the command lacks.
    let mut forwarded = SigSet::empty();
    forwarded.add(Signal::SIGCHLD);
    for s in FORWARDED {
        forwarded.add(*s);
    }
    let sfd = SignalFd::with_flags(&forwarded, SfdFlags::SFD_CLOEXEC)
        .map_err(|e| format!("cannot create the init's signal descriptor: {e}"))?;

    if let Some(channel) = plan.service.take() {
        let mut server = crate::spawn::Server {
            channel,
            env: &plan.env,
            cwd: &plan.cwd,
            degraded: plan.degraded,
            mask: original_mask,
            exec_allowed: exec_allowed.as_ref(),
            running: std::collections::HashMap::new(),
            files: open_files_roots(plan.degraded, &plan.volumes),
            terminals: Default::default(),
        };
        serve(&mut server, sfd, sockets);
        write_report(report, &Report::Exited(0));
        return Ok(0);
    }
    let program = resolve_program(&plan.argv, &plan.path_var);
    if let Some(status) = refused_loader(exec_allowed.as_ref(), program.as_deref(), report) {
        return Ok(status);
    }
    let exec = ExecPlan::new(&plan, program, report, original_mask)?;
    let child = exec.spawn()?;
    let pty = plan.pty_slave.take().is_some();
    Ok(supervise_command(child, pty, sfd, report, sockets))
}

/// The first steps, before the supervisor's go-ahead: the parent-death
/// signal, the supervisor's descriptors closed, the cgroup's v1
/// directories joined; then the wait until the ID maps are written.
fn await_go(plan: &mut ChildPlan, go: &OwnedFd) -> Result<(), String> {
    arm_parent_death_signal();
    crate::phase("init-start");
    for fd in plan.close_in_child.drain(..) {
        // SAFETY: these descriptors are the supervisor's copies, unused here.
        unsafe { libc::close(fd) };
    }
    // Into the sandbox's cgroup v1 directories before anything else (the v2
    // one, if any, we were born in); failing that, nothing starts.
    crate::cgroup::join_self(&plan.cgroup_tasks).map_err(|e| chain(&e))?;
    plan.cgroup_tasks.clear();
    // Wait until the supervisor has written the ID maps. End of file means the supervisor gave up (or died before our
    // death signal was armed): leave without doing anything.
    let mut byte = [0u8; 1];
    match nix::unistd::read(go, &mut byte) {
        Ok(1) => {}
        _ => return Err("the supervisor stopped before the sandbox was ready".into()),
    }
    crate::phase("init-go");
    Ok(())
}

/// Without namespaces: the host's capabilities locked down, the sandbox's
/// host IDs taken, the exec allowlist found in the host's tree, and the
/// init made the subreaper of the command's orphans.
fn enter_degraded(plan: &ChildPlan) -> Result<Option<crate::exec_rules::Allowed>, String> {
    // No user namespace: the capabilities are the host's. Lock them
    // down while we still may, then take the sandbox's host IDs.
    privileges::lock_bounding_set(true).map_err(|e| chain(&e))?;
    privileges::set_ids(plan.uid, plan.gid).map_err(|e| chain(&e))?;
    // The host's tree: nothing to seal, Landlock alone decides.
    let exec_allowed = find_allowed(plan)?;
    // SAFETY: prctl with integer arguments only. Orphans of the command
    // are adopted by this process (and killed with it) instead of the
    // host's init.
    unsafe {
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1 as libc::c_ulong, 0, 0, 0);
    }
    Ok(exec_allowed)
}

/// In the sandbox's namespaces: its own IDs, hostname and network, the
/// cgroup's v1 directories the supervisor hands over, the root built and
/// sealed, the layer and the terminal handed to the supervisor.
fn enter_namespaces(plan: &mut ChildPlan) -> Result<Option<crate::exec_rules::Allowed>, String> {
    // Take the sandbox's own IDs before creating any file: in root mode
    // the process still has host UID 0, which the namespace does not
    // map, and files created under it would be refused (EOVERFLOW).
    privileges::set_ids(plan.uid, plan.gid).map_err(|e| chain(&e))?;
    plan.user_limits
        .apply_in_namespace()
        .map_err(|e| chain(&e))?;
    nix::unistd::sethostname(&plan.root.hostname)
        .map_err(|e| format!("cannot set the sandbox's hostname: {e}"))?;
    if !plan.joined_network {
        crate::netns::bring_loopback_up().map_err(|e| chain(&e))?;
    }
    if let (Some(channel), true) = (&plan.egress_channel, plan.egress && !plan.joined_network) {
        let (tcp, dns) = crate::netns::configure_namespace().map_err(|e| chain(&e))?;
        crate::sys::send_fds(channel, &[tcp.as_raw_fd(), dns.as_raw_fd()])
            .map_err(|e| format!("cannot hand the proxy's sockets to the supervisor: {e}"))?;
    }
    // Into the cgroup's v1 directories, which the supervisor makes
    // while this process sets up its IDs and network: before the root
    // is built, since building it copies a named sandbox's saved state
    // into memory (tmpfs pages, charged where this process is when it
    // writes them and, on v1, left there by a later move); failing
    // that, nothing starts.
    if let Some(channel) = plan.cgroup_channel.take() {
        join_handed_cgroup(&channel)?;
    }
    crate::phase("init-root");
    mounts::build_root(&mut plan.root).map_err(|e| chain(&e))?;
    crate::phase("init-root-built");
    // The allowlist is found in the root it governs, and the places
    // code could be mapped from are sealed while the mount privilege
    // lasts.
    let exec_allowed = find_allowed(plan)?;
    seal_for(exec_allowed.as_ref(), plan)?;
    // The layer is the supervisor's to save; the init keeps no handle
    // on it.
    if let (Some(channel), Some(layer)) = (plan.layer_channel.take(), plan.root.layer.take()) {
        crate::sys::send_fds(&channel, &[layer.as_raw_fd()])
            .map_err(|e| format!("cannot hand the workspace's layer to the supervisor: {e}"))?;
    }
    // The command's terminal is one of the sandbox's own devpts (its
    // name is a path the command can see); the supervisor relays its
    // master side.
    if let Some(channel) = plan.tty_channel.take() {
        let (master, slave) = crate::spawn::open_terminal(None)
            .map_err(|e| format!("cannot open the sandbox's terminal: {}", Errno::from_raw(e)))?;
        crate::sys::send_fds(&channel, &[master.as_raw_fd()])
            .map_err(|e| format!("cannot hand the terminal to the supervisor: {e}"))?;
        plan.pty_slave = Some(slave);
    }
    Ok(exec_allowed)
}

/// Join the cgroup's v1 directories the supervisor sends over `channel`
/// (their `tasks` files, and first how many it sent).
fn join_handed_cgroup(channel: &OwnedFd) -> Result<(), String> {
    let mut count = [0u8; 1];
    let (_, fds) = crate::fdpass::recv(channel.as_fd(), &mut count)
        .map_err(|e| format!("cannot receive the sandbox's cgroup from the supervisor: {e}"))?;
    // The supervisor says how many it sent: a short hand-over (a
    // truncated message) must not pass for the whole cgroup.
    if fds.len() != usize::from(count[0]) {
        return Err(format!(
            "received {} of the {} cgroup directories the supervisor sent",
            fds.len(),
            count[0]
        ));
    }
    let tasks: Vec<(OwnedFd, PathBuf)> = fds
        .into_iter()
        .map(|fd| (fd, PathBuf::from("tasks of the sandbox's cgroup (v1)")))
        .collect();
    crate::cgroup::join_self(&tasks).map_err(|e| chain(&e))?;
    Ok(())
}

/// After the final message, every restriction in order: the descriptors
/// the init does not need closed, the cgroup namespace, rlimits, Landlock,
/// the capabilities dropped, the seccomp filters. Returns the channel of
/// published ports' socket requests, kept when the sandbox serves them.
fn confine(
    plan: &mut ChildPlan,
    flags: u8,
    report: &OwnedFd,
    exec_allowed: Option<&crate::exec_rules::Allowed>,
) -> Result<Option<OwnedFd>, String> {
    // The root is built: the descriptors that described it go first (owned
    // ones are closed by their owners, never behind their backs).
    plan.root.binds.clear();
    plan.root.rootfs = None;
    // Whatever else the caller of warden left open is not the init's to
    // hold: keep the standard streams, the report pipe and the terminal.
    let sockets = plan.egress_channel.take().filter(|_| plan.serve_sockets);
    let mut keep = vec![report.as_raw_fd()];
    if let Some(t) = &plan.pty_slave {
        keep.push(t.as_raw_fd());
    }
    if let Some(c) = &sockets {
        keep.push(c.as_raw_fd());
    }
    if let Some(c) = &plan.service {
        keep.push(c.as_raw_fd());
    }
    if let Some(c) = &plan.modes_channel {
        keep.push(c.as_raw_fd());
    }
    crate::sys::close_fds_except(&keep);
    if flags & FINAL_IN_CGROUP != 0 {
        nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWCGROUP)
            .map_err(|e| format!("cannot create the cgroup namespace: {e}"))?;
    }
    let mut rlimits = plan.rlimits;
    if flags & FINAL_RLIMIT_FALLBACK == 0 {
        rlimits.nproc = None;
        rlimits.data = None;
    }
    privileges::apply_rlimits(&rlimits).map_err(|e| chain(&e))?;
    if !plan.weakened.landlock {
        apply_landlock(plan, exec_allowed)?;
    }
    if plan.degraded {
        privileges::finish_drop(false).map_err(|e| chain(&e))?;
    } else {
        privileges::drop_all(false).map_err(|e| chain(&e))?;
    }
    load_filters(plan, exec_allowed)?;
    Ok(sockets)
}

/// The seccomp filters, the last restriction before anything of the
/// sandbox runs.
fn load_filters(
    plan: &mut ChildPlan,
    exec_allowed: Option<&crate::exec_rules::Allowed>,
) -> Result<(), String> {
    if !plan.weakened.seccomp {
        crate::sys::load_seccomp_filter(crate::SECCOMP_PROGRAM)
            .map_err(|e| format!("cannot load the seccomp filter: {e}"))?;
        // Before anything of the sandbox runs, so that no call it makes
        // goes unjudged (nor an exec unrecorded); the init keeps no copy
        // of the listener.
        crate::modes::install_in_init(plan.modes_channel.as_ref(), exec_allowed)?;
    }
    drop(plan.modes_channel.take());
    if exec_allowed.is_some() && !plan.weakened.seccomp {
        crate::seccomp::install_exec_allowlist().map_err(|e| chain(&e))?;
    }
    crate::phase("init-locked");
    if plan.degraded {
        // Landlock does not govern metadata or named sockets; without a
        // mount namespace, the host's files and sockets are in reach.
        crate::seccomp::install_degraded().map_err(|e| chain(&e))?;
    }
    Ok(())
}

/// 126, reported as EACCES, when the command is a loader the allowlist
/// grants only as an interpreter ([`crate::exec_rules::refuse_loader`]).
fn refused_loader(
    allowed: Option<&crate::exec_rules::Allowed>,
    program: Option<&std::ffi::CStr>,
    report: &OwnedFd,
) -> Option<i32> {
    crate::exec_rules::refuse_loader(allowed, program?).err()?;
    write_report(report, &Report::ExecFailed(libc::EACCES));
    Some(126)
}

/// Seal the places code could be mapped from, while the mount privilege
/// lasts (see [`crate::exec_rules::seal`]).
fn seal_for(allowed: Option<&crate::exec_rules::Allowed>, plan: &ChildPlan) -> Result<(), String> {
    match allowed {
        Some(a) => crate::exec_rules::seal(a, &plan.writable).map_err(|e| chain(&e)),
        None => Ok(()),
    }
}

/// Landlock's rules, with the exec allowlist's when there is one.
fn apply_landlock(
    plan: &ChildPlan,
    exec_allowed: Option<&crate::exec_rules::Allowed>,
) -> Result<(), String> {
    let executable: Option<Vec<PathBuf>> = exec_allowed.map(|a| a.files().cloned().collect());
    let enforced = landlock::restrict_exec(
        &plan.landlock_read,
        &plan.writable,
        !plan.degraded,
        executable.as_deref(),
    )
    .map_err(|e| chain(&e))?;
    if executable.is_some() && enforced == landlock::Enforcement::None {
        // The supervisor refuses such a run before the clone; should the
        // kernel still say no here, nothing starts unconfined.
        return Err(
            "the kernel enforces no Landlock rules: the exec allowlist cannot be applied".into(),
        );
    }
    Ok(())
}

/// The files the exec allowlist names, or `None` without one.
fn find_allowed(plan: &ChildPlan) -> Result<Option<crate::exec_rules::Allowed>, String> {
    if plan.allow_exec.is_empty() || plan.weakened.landlock {
        return Ok(None);
    }
    crate::exec_rules::find(&plan.allow_exec, &plan.path_var)
        .map(Some)
        .map_err(|e| chain(&e))
}

/// The workspace and the root as the sandbox sees them, for the file
/// operations of [`crate::files`].
fn open_files_roots(degraded: bool, volumes: &[PathBuf]) -> crate::files::OwnedRoots {
    let path_text = |p: &PathBuf| p.to_str().map(str::to_string);
    crate::files::OwnedRoots {
        workspace: open_files_root(degraded, warden_policy::WORKSPACE_MOUNT),
        root: open_files_root(degraded, "/"),
        // Each volume's mount, opened now that it is in place: a path
        // under it is served from there (within it only), as the
        // sandbox's commands see it.
        volumes: volumes
            .iter()
            .filter_map(|v| {
                let text = path_text(v)?;
                let fd = open_files_root(degraded, &text)?;
                let names = text
                    .split('/')
                    .filter(|n| !n.is_empty())
                    .map(str::to_string)
                    .collect();
                Some(crate::files::VolumeRoot { names, fd })
            })
            .collect(),
    }
}

/// The workspace, or the root, as the sandbox sees it; none degraded (no
/// mount namespace: the path would be the host's) or without a workspace.
fn open_files_root(degraded: bool, path: &str) -> Option<OwnedFd> {
    use nix::fcntl::OFlag;
    if degraded {
        return None;
    }
    nix::fcntl::open(
        path,
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )
    .ok()
}

/// If the supervisor dies, the init dies, and with it every process of its
/// PID namespace (or, degraded, every process it adopted).
fn arm_parent_death_signal() {
    // SAFETY: prctl with integer arguments only.
    unsafe {
        libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
            0,
            0,
            0,
        );
    }
}

/// Read the supervisor's final message: one flags byte, then the trailer.
fn read_final(go: &OwnedFd) -> Result<u8, String> {
    let mut msg = [0u8; 16];
    let mut len = 0;
    loop {
        match nix::unistd::read(go, &mut msg[len..]) {
            Ok(0) => break,
            Ok(n) => {
                len += n;
                if len == msg.len() {
                    return Err("the supervisor's final message is too long".into());
                }
            }
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(format!("cannot read the supervisor's final message: {e}")),
        }
    }
    match &msg[..len] {
        [flags, trailer @ ..] if trailer == FINAL_TRAILER.as_slice() => Ok(*flags),
        _ => Err("the supervisor stopped before the sandbox was ready".into()),
    }
}
