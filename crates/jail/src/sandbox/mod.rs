//! The supervisor side: prepares a sandbox from a spec, spawns its init into
//! new namespaces, writes its ID maps, confines it in a cgroup, relays its
//! terminal, enforces the deadline, and maps how it ended to an exit status.

mod error;
mod host_paths;
mod outcome;
mod plan;
mod release;
mod setup;
mod supervision;

pub use error::JailError;
pub use outcome::Outcome;

use crate::cgroup::{self, Limits};
use crate::error::chain_str;
use crate::host;
use crate::init::{self, ChildPlan, FORWARDED};
use crate::mounts::RootPlan;
use crate::privileges::Rlimits;
use crate::pty::{self, RawMode};
use crate::quotas;
use crate::report::{parse_reports, Report};
use crate::sys::{self, Forked};
use nix::errno::Errno;
use nix::sys::signal::{kill, SigSet, SigmaskHow, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::unistd::Pid;
use std::ffi::CString;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::time::Instant;
use warden_audit::{Event, EventKind, EventSink, ResourcePeaks};
use warden_policy::{NetworkSpec, SandboxSpec, Terminal, WORKSPACE_MOUNT};

use error::sys_err;
use host_paths::{joined_trust, setns_net};
use outcome::outcome_from;
use plan::HostPlan;
use setup::{
    confine_begin, confine_finish, degraded_read_paths, prepare_child, send_final, PrivateTmp,
};
use supervision::{ChildGuard, MaskGuard, Supervision};

/// The host ID that the sandbox's user maps to when warden runs as root.
pub const NOBODY: u32 = 65534;

const NS_FLAGS: libc::c_int = libc::CLONE_NEWUSER
    | libc::CLONE_NEWNS
    | libc::CLONE_NEWPID
    | libc::CLONE_NEWIPC
    | libc::CLONE_NEWUTS
    | libc::CLONE_NEWNET;

fn cstring(s: &str) -> Result<CString, JailError> {
    CString::new(s).map_err(|_| JailError::Nul(s.to_string()))
}

/// A layer the host cannot give, as an event: the front door says it to
/// the person (the jail prints nothing).
fn degraded(events: &mut dyn EventSink, id: &str, layer: &str, lost: &str) {
    events.emit(&Event::now(
        id,
        EventKind::Degraded {
            layer: layer.to_string(),
            lost: lost.to_string(),
        },
    ));
}

/// What the caller plugs into a sandbox as it starts: its network service
/// (the egress proxy, published ports) and, for a long-lived sandbox, the
/// channel its init takes spawn requests on. The jail is mechanism only:
/// what serves the network is the caller's (the runtime's) choice.
pub trait Attach {
    /// After the clone, before the sandbox may go on: serve its network.
    /// An error stops the sandbox before anything of it runs.
    fn network(&mut self, network: Network) -> Result<(), String>;
    /// A long-lived sandbox runs: `channel` carries spawn requests to its
    /// init (see [`crate::spawn`]), whose host PID is `init`.
    fn service(&mut self, channel: OwnedFd, init: Pid);
    /// Every process of the sandbox is gone; stop serving its network
    /// (before the exit is recorded, so that its last decisions come first).
    fn stopping(&mut self);
}

/// The sandbox's network, handed to [`Attach::network`].
pub struct Network {
    /// With egress: the proxy's listening TCP socket and the resolver's UDP
    /// socket, opened by the init inside the sandbox's network namespace.
    pub egress: Option<(OwnedFd, OwnedFd)>,
    /// With secrets: what substitutes them towards their hosts.
    pub terminator: Option<warden_egress::secrets::Terminator>,
    /// With `--ask` and a terminal: answers for names on no list.
    pub asker: Option<std::sync::Arc<dyn warden_egress::proxy::Asker>>,
    /// `--publish`: the host's listeners, bound already, and the sandbox
    /// port each leads to.
    pub published: Vec<(std::net::TcpListener, u16)>,
    /// Fresh TCP sockets of the sandbox's namespace, for published ports.
    pub sockets: Option<warden_egress::publish::SocketSource>,
    /// Where in that namespace published ports lead: its loopback for a
    /// process sandbox, the guest's address for a VM.
    pub publish_to: std::net::Ipv4Addr,
}

/// How the sandbox runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Program {
    /// The spec's command; the sandbox ends with it (`warden run`).
    Command,
    /// No command of its own: the init serves spawn requests until the
    /// caller ends it (`warden create`/`start`, the daemon).
    Service,
}

/// Run `spec` in a new sandbox named `id` and return when every process of
/// it is gone. Events go to `events`; the network is served by `attach`.
pub fn run(
    spec: &SandboxSpec,
    id: &str,
    program: Program,
    events: &mut dyn EventSink,
    attach: &mut dyn Attach,
) -> Result<Outcome, JailError> {
    if crate::SECCOMP_PROGRAM.is_empty() {
        return Err(JailError::UnsupportedArch(std::env::consts::ARCH));
    }
    match run_mode(spec, id, events, Mode::Namespaces, program, attach) {
        // Nothing of the command ran: the namespaces failed before it could.
        Err(JailError::UserNamespaces { why, .. }) if spec.allow_degraded => {
            degraded(
                events,
                id,
                "namespaces",
                &format!("{why}; {}", host::LOST_WITHOUT_NAMESPACES),
            );
            run_mode(spec, id, events, Mode::Degraded, program, attach)
        }
        other => other,
    }
}

/// How the sandbox is built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Every namespace, the assembled root: full isolation.
    Namespaces,
    /// No namespaces (the host forbids them and the person allowed a
    /// degraded run): Landlock, seccomp, no capabilities, rlimits, cgroups
    /// where root allows, and a subreaper that kills every descendant.
    Degraded,
}

fn run_mode(
    spec: &SandboxSpec,
    id: &str,
    events: &mut dyn EventSink,
    mode: Mode,
    program: Program,
    attach: &mut dyn Attach,
) -> Result<Outcome, JailError> {
    let degraded_mode = mode == Mode::Degraded;
    let root_mode = host::is_root();
    let fs = &spec.filesystem;
    if host::root_inside_maps_to_outer_root() {
        return Err(JailError::OuterRoot);
    }
    if degraded_mode && fs.rootfs.is_some() {
        return Err(JailError::RootfsNeedsNamespaces);
    }
    if degraded_mode && program == Program::Service {
        // Without a PID namespace the init's stop (SIGTERM to -1) would
        // reach every process of the user on the host.
        return Err(JailError::ServiceNeedsNamespaces);
    }

    // `--disk`, where this kernel can enforce it: everything warden keeps
    // for the sandbox lives in a tmpfs of that size while it runs; the
    // overlays made on it (the workspace's, the caches') need Linux 6.6.
    let disk = match (&fs.disk, degraded_mode) {
        (Some(limit), false) if fs.overlay.is_some() || !fs.caches.is_empty() => {
            let release = host::kernel_release();
            match plan::disk_on_this_kernel(Some(limit.bytes), limit.asked, &release)? {
                Some(d) => plan::Disk {
                    size: Some(d),
                    overlays: true,
                },
                None => {
                    degraded(
                        events,
                        id,
                        "disk",
                        &format!("this kernel ({release}) cannot keep the overlay's layer or a cache's writes in a size-limited tmpfs (overlayfs's marks on tmpfs need Linux 6.6): they are on disk without a size limit; --disk refuses rather than run so"),
                    );
                    plan::Disk {
                        size: Some(limit.bytes),
                        overlays: false,
                    }
                }
            }
        }
        (Some(limit), false) => plan::Disk {
            size: Some(limit.bytes),
            overlays: false,
        },
        _ => plan::Disk {
            size: None,
            overlays: false,
        },
    };
    let HostPlan {
        join_network,
        rootfs,
        workspace,
        uid,
        gid,
        host_uid,
        host_gid,
        binds,
        mut writable,
        home_tmpfs,
        kept,
    } = plan::host_plan(spec, disk, degraded_mode, root_mode)?;
    let (kept_plan, kept_save) = match kept {
        Some((p, s)) => (Some(p), Some(s)),
        None => (None, None),
    };

    // Resources: a cgroup where the host allows one; otherwise rlimits, and
    // only with consent when the person asked for a limit explicitly.
    let res = &spec.resources;
    let limits = Limits {
        memory: Some(res.memory.value),
        pids: Some(res.pids.value),
        cpus: res.cpus,
    };
    // No pid is ever written into `cgroup.procs`, whose global lock can
    // cost an RCU grace period on every start (see `cgroup::join`): the
    // init is born in the v2 directory, which exists before it does, and
    // moves itself into the v1 ones. With namespaces, those and every limit
    // are made while the init sets up its IDs and network (below, after the
    // go-ahead), off the path to the clone; the init joins them before it
    // builds its root, and runs nothing but warden's own code until the
    // final message. A plain fork (degraded mode) gets the whole cgroup now
    // and joins first thing.
    crate::phase("cgroup-begin");
    let pending = confine_begin(spec, id, &limits, events)?;
    let (mut pending, cgroup, unfinished) = match pending {
        Some(p) if degraded_mode => {
            let (cg, made) = confine_finish(spec, id, p, events)?;
            (None, cg, made)
        }
        p => (p, None, None),
    };
    let cgroup_err = |source| JailError::CgroupRequired {
        what: "the sandbox's limits".into(),
        source,
    };
    let mut joining = match &cgroup {
        Some(cg) => cg.joining().map_err(cgroup_err)?,
        None => cgroup::Joining::default(),
    };
    if let Some(p) = &pending {
        joining.v2 = p.v2_dir().map_err(cgroup_err)?;
    }
    // The v1 directories' `tasks` files reach the init over this pair once
    // they exist; its end of file says there is nothing (more) to join.
    let (mut cgroup_parent, cgroup_child) =
        pair_if(pending.is_some(), "create the cgroup's socket pair")?;
    // Fallback limits for hosts without usable cgroups; the init applies
    // them only when the final message says that no cgroup confines it.
    crate::phase("cgroup-begun");
    let user_limits = quotas::UserLimits::for_sandbox();
    let rlimits = Rlimits {
        open_files: res.open_files,
        file_size: res.file_size,
        nproc: Some(res.pids.value),
        data: Some(res.memory.value),
        sigpending: user_limits.sigpending,
        msgqueue: user_limits.msgqueue,
        memlock: user_limits.memlock,
    };

    // The command's terminal: opened by the init in the sandbox's own
    // devpts, its master side sent back over `tty_pair`; without a mount
    // namespace (degraded), the host's devpts is the sandbox's, and it is
    // opened here.
    let wants_tty = spec.terminal == Terminal::Pty && program == Program::Command;
    let terminal = if wants_tty && degraded_mode {
        Some(pty::open()?)
    } else {
        None
    };
    let (tty_parent, tty_child) = pair_if(
        wants_tty && !degraded_mode,
        "create the terminal's socket pair",
    )?;

    // Without a mount namespace the sandbox lives in the host's tree: its
    // scratch space is a private directory, its paths are host paths, and
    // Landlock alone says what it may touch.
    let private_tmp = if degraded_mode {
        Some(PrivateTmp::create(id, uid, gid)?)
    } else {
        None
    };
    let mut env_pairs = spec.env.clone();
    // Secrets: placeholders in the sandbox's environment; the values are
    // read after the clone, or kept where the clone does not get them.
    let secret_plan = match &spec.network {
        NetworkSpec::Egress(e) if !e.secrets.is_empty() => {
            if degraded_mode {
                return Err(JailError::SecretsNeedNamespaces);
            }
            let plan = crate::secrets::SecretPlan::prepare(&e.secrets)?;
            for (name, placeholder) in plan.placeholders() {
                env_pairs.retain(|(k, _)| k != name);
                env_pairs.push((name.to_string(), placeholder.to_string()));
            }
            Some(plan)
        }
        _ => None,
    };
    let mut landlock_read = vec![PathBuf::from("/")];
    let cwd = match (&private_tmp, &workspace) {
        (Some(tmp), ws) => {
            // The private scratch directory is the home too: never the
            // workspace, which would collect the tools' dotfiles.
            let home = ws.clone().unwrap_or_else(|| tmp.0.clone());
            for (k, v) in env_pairs.iter_mut() {
                if k == "HOME" {
                    *v = tmp.0.display().to_string();
                }
            }
            env_pairs.push(("TMPDIR".into(), tmp.0.display().to_string()));
            landlock_read = degraded_read_paths();
            writable = vec![tmp.0.clone()];
            if let Some(w) = ws {
                landlock_read.push(w.clone());
            }
            for b in &binds {
                landlock_read.push(b.src.clone());
                if b.writable {
                    writable.push(b.src.clone());
                }
            }
            home
        }
        (None, Some(_)) => PathBuf::from(WORKSPACE_MOUNT),
        (None, None) => PathBuf::from("/"),
    };

    let argv = spec
        .command
        .iter()
        .map(|a| cstring(a))
        .collect::<Result<Vec<_>, _>>()?;
    let env = env_pairs
        .iter()
        .map(|(k, v)| cstring(&format!("{k}={v}")))
        .collect::<Result<Vec<_>, _>>()?;
    let path_var = spec
        .env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.clone())
        .unwrap_or_default();

    let (go_rd, go_wr) =
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(sys_err("create a pipe"))?;
    let (rep_rd, rep_wr) =
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(sys_err("create a pipe"))?;

    // With egress, the init opens the proxy's sockets inside the sandbox's
    // network namespace and hands them over this pair.
    let egress = match (&spec.network, degraded_mode) {
        (NetworkSpec::Egress(e), false) => Some(e.clone()),
        (NetworkSpec::Egress(_), true) => {
            degraded(
                events,
                id,
                "network",
                "without a network namespace --allow-domain cannot be enforced: the sandbox has the host's network",
            );
            None
        }
        (NetworkSpec::LoopbackOnly, _) => None,
    };
    // --publish: the host's listeners are bound now, so that a port in use
    // is an error before anything starts. Without a network namespace the
    // sandbox's servers are on the host's own loopback already.
    let mut published = Vec::new();
    if !spec.publish.is_empty() {
        if degraded_mode {
            degraded(
                events,
                id,
                "publish",
                "without a network namespace --publish does nothing: servers in the sandbox listen on the host's network",
            );
        } else {
            for m in &spec.publish {
                let listener =
                    std::net::TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, m.host_port))
                        .map_err(|source| JailError::Publish {
                            port: m.host_port,
                            source,
                        })?;
                published.push((listener, m.sandbox_port));
            }
        }
    }
    let egress_pair = match pair_if(
        egress.is_some() || !published.is_empty(),
        "create the egress socket pair",
    )? {
        (Some(p), Some(c)) => Some((p, c)),
        _ => None,
    };
    // A long-lived sandbox: the channel its init takes spawn requests on.
    let (service_parent, service_child) =
        pair_if(program == Program::Service, "create the spawn channel")?;
    let mut close_in_child = vec![go_wr.as_raw_fd(), rep_rd.as_raw_fd()];
    if let Some(p) = &service_parent {
        close_in_child.push(p.as_raw_fd());
    }
    for (l, _) in &published {
        close_in_child.push(l.as_raw_fd());
    }
    if let Some((parent_end, _)) = &egress_pair {
        close_in_child.push(parent_end.as_raw_fd());
    }
    let (egress_parent, egress_child) = match egress_pair {
        Some((p, c)) => (Some(p), Some(c)),
        None => (None, None),
    };
    if let Some(p) = &tty_parent {
        close_in_child.push(p.as_raw_fd());
    }
    // --disk: the init builds the kept state on a size-limited tmpfs and
    // hands it back over this pair, for the supervisor to save when it
    // stops.
    let (layer_parent, layer_child) =
        pair_if(kept_save.is_some(), "create the layer's socket pair")?;
    if let Some(p) = &layer_parent {
        close_in_child.push(p.as_raw_fd());
    }
    if let Some(t) = &terminal {
        close_in_child.push(t.master.as_raw_fd());
    }
    let weakened = crate::Weakened::from_env();
    for (off, layer) in [
        (weakened.seccomp, "seccomp"),
        (weakened.landlock, "landlock"),
    ] {
        if off {
            degraded(
                events,
                id,
                layer,
                "switched off for a test (WARDEN_TEST_WEAKEN, debug build)",
            );
        }
    }
    if let Some(dir) = &joining.v2 {
        close_in_child.push(dir.as_raw_fd());
    }
    if let Some(p) = &cgroup_parent {
        close_in_child.push(p.as_raw_fd());
    }
    let plan = ChildPlan {
        weakened,
        root: RootPlan {
            rootfs,
            binds,
            tmp_size: fs.tmp_size,
            hostname: spec.hostname.clone(),
            resolv_conf: egress
                .as_ref()
                .map(|_| "nameserver 127.0.0.1\noptions ndots:1 timeout:2\n".to_string()),
            trust: match (&secret_plan, &spec.join_trust) {
                (Some(p), _) => Some(p.trust_files()?),
                (None, Some(dir)) if spec.join_network.is_some() => Some(joined_trust(dir)?),
                _ => None,
            },
            hidden: fs.hidden.clone(),
            home_tmpfs,
            kept: kept_plan,
            layer: None,
        },
        egress_channel: egress_child,
        egress: egress.is_some(),
        joined_network: spec.join_network.is_some(),
        serve_sockets: !published.is_empty(),
        uid,
        gid,
        rlimits,
        user_limits: if degraded_mode {
            quotas::UserLimits::default()
        } else {
            user_limits
        },
        landlock_read,
        writable,
        cwd,
        degraded: degraded_mode,
        argv,
        env,
        path_var,
        pty_slave: terminal.as_ref().and_then(|t| t.slave.try_clone().ok()),
        close_in_child,
        cgroup_tasks: joining.v1_tasks,
        cgroup_channel: cgroup_child,
        service: service_child,
        tty_channel: tty_child,
        layer_channel: layer_child,
    };
    let mut master = terminal.map(|t| t.master);

    // Signals are taken through a signalfd from here on; the child starts
    // with the same mask and restores `original` just before exec.
    let mut handled = SigSet::empty();
    handled.add(Signal::SIGCHLD);
    for s in FORWARDED {
        handled.add(*s);
    }
    let mut original = SigSet::empty();
    nix::sys::signal::pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&handled), Some(&mut original))
        .map_err(sys_err("block signals"))?;
    let _restore_mask = MaskGuard(original);

    if root_mode {
        // Supplementary groups are host groups the sandbox must not keep
        // (group root can read files that "others" cannot).
        nix::unistd::setgroups(&[]).map_err(sys_err("drop supplementary groups"))?;
    }

    if degraded_mode {
        // Without a PID namespace, orphans of the sandbox would be adopted
        // by the host's init; as a subreaper the supervisor adopts them and
        // kills them when the run ends.
        // SAFETY: prctl with integer arguments only.
        let rc = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1 as libc::c_ulong, 0, 0, 0) };
        Errno::result(rc).map_err(sys_err("become the sandbox's subreaper"))?;
    }
    let start = Instant::now();
    let flags = match (degraded_mode, &join_network) {
        (true, _) => 0,
        (false, None) => NS_FLAGS,
        (false, Some(_)) => NS_FLAGS & !libc::CLONE_NEWNET,
    };
    // Joining: the clone is made from inside the namespace (the supervisor
    // enters it for the clone only, as host root, which its owner needs),
    // so the sandbox's processes are born there and hold no capability
    // over it; the supervisor goes back to its own at once.
    let back = match &join_network {
        Some((ns, own, path)) => {
            setns_net(ns, path, "enter it")?;
            Some((own, path))
        }
        None => None,
    };
    // As root, the namespace is owned by the user the sandbox maps to, not
    // by root, so that the per-user counters it spends are never root's
    // (see `quotas`).
    let owner = if root_mode && !degraded_mode {
        Some(quotas::OwnerSwitch::enter(host_uid)?)
    } else {
        None
    };
    // SAFETY: warden's supervisor is single-threaded up to this point (no
    // runtime or helper thread has been started), which is the contract of
    // `clone_process`.
    // Born in the v2 directory where the kernel can do it (clone3, Linux
    // 5.7); otherwise cloned the old way and moved in below.
    crate::phase("clone");
    let (cloned, born_in_cgroup) = match &joining.v2 {
        // SAFETY: as above.
        Some(dir) => match unsafe { sys::clone_into_cgroup(flags, dir.as_fd()) } {
            Err(e) => {
                tracing::debug!(error = %e, "clone3 into the cgroup refused; cloning the old way");
                // SAFETY: as above.
                (unsafe { sys::clone_process(flags) }, false)
            }
            done => (done, true),
        },
        // SAFETY: as above.
        None => (unsafe { sys::clone_process(flags) }, false),
    };
    if let (Some(owner), false) = (owner, matches!(cloned, Ok(Forked::Child))) {
        if let Err(e) = owner.leave() {
            if let Ok(Forked::Parent(pid)) = cloned {
                let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
                let _ = nix::sys::wait::waitpid(pid, None);
            }
            return Err(e.into());
        }
    }
    if let (Some((own, path)), false) = (back, matches!(cloned, Ok(Forked::Child))) {
        if let Err(e) = setns_net(own, path, "return to the supervisor's own") {
            if let Ok(Forked::Parent(pid)) = cloned {
                let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
                let _ = nix::sys::wait::waitpid(pid, None);
            }
            return Err(e);
        }
    }
    let child = match cloned {
        Ok(Forked::Child) => init::child_main(plan, go_rd, rep_wr, original),
        Ok(Forked::Parent(pid)) => pid,
        Err(source) => {
            let why = host::userns_blocker().unwrap_or_else(|| match source {
                Errno::EPERM | Errno::EACCES => {
                    "the kernel refused to create a user namespace (a container or security module may forbid it)".into()
                }
                Errno::ENOSPC | Errno::EUSERS => {
                    "the limit of user namespaces (user.max_user_namespaces) is reached".into()
                }
                _ => "clone() with namespace flags failed".into(),
            });
            return Err(JailError::UserNamespaces {
                why,
                lost: host::LOST_WITHOUT_NAMESPACES,
                errno: source,
            });
        }
    };
    drop(go_rd);
    drop(rep_wr);
    drop(joining.v2);
    // The init's exit then does not unmount the sandbox's tree (see
    // `release`): it is reaped, and its cgroup emptied, without that wait.
    let mounts = release::Held::hold(child);
    let mut guard = ChildGuard {
        pid: child,
        cgroup,
        reaped: false,
        unfinished,
    };

    let ready = if degraded_mode {
        Ok(())
    } else {
        prepare_child(child, uid, gid, host_uid, host_gid, &plan)
    };
    drop(plan);
    ready?;
    // The values, now that the init exists (and before it builds the root,
    // which holds the authority's certificate).
    let mut terminator = match (secret_plan, &egress) {
        (Some(p), Some(e)) => Some(p.into_terminator(&e.upstream_ca, &e.secret_rules)?),
        _ => None,
    };
    // The child builds its root while the supervisor confines it: both
    // sides work at once, and the child cannot go past its root before the
    // final message below.
    crate::phase("go");
    nix::unistd::write(&go_wr, b"g").map_err(sys_err("start the sandbox"))?;
    // The rest of the cgroup, while the child sets up its IDs and network;
    // it joins the v1 directories before it builds its root.
    if let Some(p) = pending.take() {
        let (cg, made) = confine_finish(spec, id, p, events)?;
        guard.cgroup = cg;
        guard.unfinished = made;
    }
    if let Some(channel) = cgroup_parent.take() {
        if let Some(cg) = &guard.cgroup {
            let tasks = cg.joining().map_err(cgroup_err)?.v1_tasks;
            let fds: Vec<_> = tasks.iter().map(|(f, _)| f.as_raw_fd()).collect();
            if !fds.is_empty() {
                // Their number goes with them, for the init to check (none
                // sent: the init reads end of file, and joins nothing).
                let count = u8::try_from(fds.len())
                    .ok()
                    .filter(|n| usize::from(*n) <= crate::fdpass::MAX_FDS)
                    .ok_or(JailError::Sys {
                        what: "hand the cgroup's directories to the sandbox's init (too many)",
                        source: Errno::E2BIG,
                    })?;
                crate::fdpass::send(channel.as_fd(), &[count], &fds).map_err(sys_err(
                    "hand the cgroup's directories to the sandbox's init",
                ))?;
            }
        }
    }
    crate::phase("cgroup-finished");
    let flags = match &guard.cgroup {
        Some(cg) => {
            if !born_in_cgroup {
                cg.add_process_v2(child.as_raw())
                    .map_err(|source| JailError::CgroupRequired {
                        what: "the sandbox's limits".into(),
                        source,
                    })?;
            }
            init::FINAL_IN_CGROUP
        }
        None => init::FINAL_RLIMIT_FALLBACK,
    };
    events.emit(&Event::now(
        id,
        EventKind::Created {
            command: spec.command.clone(),
            workspace: workspace.clone(),
            rootless: !root_mode,
            cgroup: guard
                .cgroup
                .as_ref()
                .and_then(|c| c.paths().first().map(|p| p.display().to_string())),
        },
    ));
    // The terminal the init opened once its root was built (`--ask`
    // below needs to know there is one); a child that
    // failed before sends none (and says why on the report pipe).
    if let Some(p) = &tty_parent {
        if let Some(m) = sys::recv_fds(p, 1).unwrap_or_default().pop() {
            if pty::is_terminal(m.as_fd()) {
                pty::copy_window_size(std::io::stdin().as_fd(), m.as_fd());
                master = Some(m);
            }
        }
    }
    drop(tty_parent);
    // The running layer: from now on the sandbox's changes are in memory
    // only, until `save_layer` below writes them back; the mark says so to
    // `warden ls` and `warden diff` should this supervisor be killed.
    let layer = match (&layer_parent, kept_save) {
        (Some(p), Some(save)) => sys::recv_fds(p, 1).unwrap_or_default().pop().map(|fd| {
            // The supervisor's PID and the descriptor: where review
            // commands find the running layer (`/proc/PID/fd/N/upper`).
            if let Some(mark) = save.mark() {
                let _ =
                    std::fs::write(mark, format!("{} {}\n", std::process::id(), fd.as_raw_fd()));
            }
            (fd, save)
        }),
        _ => None,
    };
    drop(layer_parent);
    // The caller serves the sockets the init opened in the sandbox's
    // network namespace; a child that failed before sending them has said
    // why on the report pipe.
    let mut desk = None;
    let mut network = Network {
        egress: None,
        terminator: None,
        asker: None,
        published: Vec::new(),
        sockets: None,
        publish_to: std::net::Ipv4Addr::LOCALHOST,
    };
    if let (Some(spec), Some(channel)) = (&egress, &egress_parent) {
        let mut fds = sys::recv_fds(channel, 2).unwrap_or_default().into_iter();
        if let (Some(tcp), Some(dns)) = (fds.next(), fds.next()) {
            // --ask needs a person at a terminal this supervisor relays;
            // without one, names on no list are denied (and the log says
            // why).
            if spec.ask && master.is_some() {
                let (asker, d) = crate::ask::pair().map_err(sys_err("create the --ask pipe"))?;
                desk = Some(d);
                network.asker = Some(std::sync::Arc::new(asker));
            }
            network.egress = Some((tcp, dns));
            network.terminator = terminator.take();
        }
    }
    if let (false, Some(channel)) = (published.is_empty(), egress_parent) {
        network.published = std::mem::take(&mut published);
        network.sockets = Some(socket_source(channel));
    }
    if network.egress.is_some() || !network.published.is_empty() {
        attach.network(network).map_err(JailError::Attach)?;
    }
    // A record the sinks could not take (the audit log, which opens with
    // the first record, `created`, above, while the child builds its root):
    // the command never starts unrecorded.
    if let Some(why) = events.failure() {
        return Err(JailError::Unrecorded(why));
    }
    // A child that failed to build its root has already said why on the
    // report pipe; its message is the better one, so a failed send is kept
    // for the case that there is none.
    crate::phase("final");
    let send_error = send_final(&go_wr, flags).err();
    drop(go_wr);
    if send_error.is_some() {
        let _ = kill(child, Signal::SIGKILL);
    }
    events.emit(&Event::now(
        id,
        EventKind::Started {
            pid: child.as_raw(),
        },
    ));
    if let Some(channel) = service_parent {
        attach.service(channel, child);
    }

    let raw = if master.is_some() {
        RawMode::enable()?
    } else {
        None
    };
    let sfd = SignalFd::with_flags(&handled, SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK)
        .map_err(sys_err("create a signal descriptor"))?;
    let deadline = spec.resources.timeout.map(|t| start + t);
    // Never blocked by the sandbox: a command that does not read its
    // terminal must not stop this loop (and with it the deadline).
    if let Some(m) = &master {
        let _ = nix::fcntl::fcntl(
            m,
            nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK),
        );
    }
    let mut sv = Supervision {
        child,
        rep_rd: Some(rep_rd),
        reports: Vec::new(),
        master,
        stdin_open: true,
        pending_in: Vec::new(),
        timed_out: false,
        wait_status: None,
        usage: None,
        degraded: degraded_mode,
        desk,
    };
    let supervised = sv.run(&sfd, deadline, &guard);
    let saved = layer.map(|(fd, save)| {
        crate::kept::save(&fd, &save)
            .map(|merged| (merged, save.limit))
            .map_err(|source| JailError::LayerSave {
                saved: save.place(),
                source,
            })
    });
    supervised?;
    crate::phase("reaped");
    drop(raw);
    guard.reaped = true;
    // Every process of the sandbox is reaped: its mounts are nobody's.
    if let Some(m) = mounts {
        m.let_go();
    }
    drop(private_tmp);

    attach.stopping();
    let stats = guard.cgroup.as_ref().map(|c| c.stats());
    let oom_kills = stats.as_ref().and_then(|s| s.oom_kills).unwrap_or(0);
    let (rusage_rss, rusage_user, rusage_sys) = sv.rusage();
    let peaks = ResourcePeaks {
        max_rss_bytes: stats.as_ref().and_then(|s| s.memory_peak).or(rusage_rss),
        cpu_user_ms: stats.as_ref().and_then(|s| s.cpu_user_ms).or(rusage_user),
        cpu_system_ms: stats.as_ref().and_then(|s| s.cpu_system_ms).or(rusage_sys),
        oom_kills: stats.as_ref().and_then(|s| s.oom_kills),
    };
    if let Some(cg) = guard.cgroup.take() {
        if let Err(e) = cg.remove() {
            tracing::warn!("{}", chain_str(&e));
        }
    }

    crate::phase("cgroup-removed");
    match saved {
        Some(Err(e)) => return Err(e),
        Some(Ok((merged, limit_bytes))) if merged.left_out > 0 => events.emit(&Event::now(
            id,
            EventKind::CacheLeftOut {
                files: merged.left_out,
                limit_bytes,
            },
        )),
        _ => {}
    }
    let reports = parse_reports(&sv.reports);
    if let Some(e) = send_error {
        if !reports.iter().any(|r| matches!(r, Report::SetupFailed(_))) {
            return Err(e);
        }
    }
    let outcome = outcome_from(&reports, sv.timed_out, oom_kills, spec, sv.wait_status)?;
    outcome.record(events, id, start, peaks);
    Ok(outcome)
}

/// Fresh sockets of the sandbox's network namespace, asked of its init over
/// `channel` (or of the process serving a VM's namespace), for published
/// ports.
pub(crate) fn socket_source(channel: OwnedFd) -> warden_egress::publish::SocketSource {
    // The init answers at once; a stuck or gone init must not hold a
    // connection for ever.
    let _ = nix::sys::socket::setsockopt(
        &channel,
        nix::sys::socket::sockopt::ReceiveTimeout,
        &nix::sys::time::TimeVal::new(5, 0),
    );
    let channel = std::sync::Mutex::new(channel);
    std::sync::Arc::new(move || {
        let channel = channel
            .lock()
            .map_err(|_| std::io::Error::other("the socket channel is unusable"))?;
        nix::sys::socket::send(
            channel.as_raw_fd(),
            b"s",
            nix::sys::socket::MsgFlags::empty(),
        )?;
        sys::recv_fds(&channel, 1)?
            .pop()
            .ok_or_else(|| std::io::Error::other("the sandbox's init sent no socket"))
    })
}

/// A connected pair of sequenced-packet Unix sockets (close-on-exec) when
/// `wanted`: the supervisor's end and the init's, for descriptors handed
/// between them.
fn pair_if(
    wanted: bool,
    what: &'static str,
) -> Result<(Option<OwnedFd>, Option<OwnedFd>), JailError> {
    if !wanted {
        return Ok((None, None));
    }
    let (p, c) = nix::sys::socket::socketpair(
        nix::sys::socket::AddressFamily::Unix,
        nix::sys::socket::SockType::SeqPacket,
        None,
        nix::sys::socket::SockFlag::SOCK_CLOEXEC,
    )
    .map_err(sys_err(what))?;
    Ok((Some(p), Some(c)))
}
