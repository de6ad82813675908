//! The first stage of a start, before the clone: everything the sandbox's
//! init will need is resolved on the host and opened here (its root's plan,
//! its cgroup's first half, its environment, the pipes and socket pairs to
//! it), so that the clone copies a finished plan and the init never has to
//! ask the host for anything. Nothing here starts a process or a thread.

use super::host_paths::joined_trust;
use super::plan::{self, HostPlan};
use super::setup::{confine_begin, confine_finish, degraded_read_paths, PrivateTmp};
use super::{cstring, degraded, pair_if, sys_err, Attach, JailError, Mode, Program};
use crate::cgroup::{self, Cgroup, Limits, Pending};
use crate::host;
use crate::init::ChildPlan;
use crate::kept::KeptSave;
use crate::mounts::RootPlan;
use crate::privileges::Rlimits;
use crate::pty;
use crate::quotas;
use crate::secrets::SecretPlan;
use std::ffi::CString;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::PathBuf;
use warden_audit::EventSink;
use warden_policy::{EgressSpec, NetworkSpec, SandboxSpec, Terminal, WORKSPACE_MOUNT};

/// A sandbox ready to be cloned: the init's plan, and the supervisor's
/// side of everything the two share.
pub(super) struct Prepared {
    pub mode: Mode,
    /// warden runs as root (the sandbox maps to [`super::NOBODY`]).
    pub root_mode: bool,
    pub ids: Ids,
    /// A network namespace to join, the supervisor's own, and its path.
    pub join_network: Option<(OwnedFd, OwnedFd, PathBuf)>,
    /// The workspace as the person named it, for the `created` record.
    pub workspace: Option<PathBuf>,
    pub confinement: Confinement,
    /// What the init does; the clone takes it, the supervisor keeps it
    /// only until the ID maps are written (they need its binds).
    pub child: ChildPlan,
    pub init: InitEnds,
    pub ends: Ends,
    /// The terminal's master side, opened here without a mount namespace
    /// (degraded); otherwise the init sends it once its root is built.
    pub master: Option<OwnedFd>,
    /// Without a mount namespace: the sandbox's scratch directory.
    pub private_tmp: Option<PrivateTmp>,
    /// `--secret`: placeholders given, values still to be read.
    pub secrets: Option<SecretPlan>,
    /// With a network namespace and egress: what its proxy enforces.
    pub egress: Option<EgressSpec>,
    pub published: Published,
    /// `--disk`: what the supervisor writes back when the sandbox stops.
    pub kept_save: Option<KeptSave>,
}

/// `--publish`: the host's listeners, bound already, and the sandbox port
/// each leads to.
pub(super) type Published = Vec<(std::net::TcpListener, u16)>;

/// The sandbox's IDs inside, and the host IDs they map to.
#[derive(Debug, Clone, Copy)]
pub(super) struct Ids {
    pub uid: u32,
    pub gid: u32,
    pub host_uid: u32,
    pub host_gid: u32,
}

/// The sandbox's cgroup as far as it exists before the clone.
pub(super) struct Confinement {
    /// Begun and to be finished while the init sets up its IDs.
    pub pending: Option<Pending>,
    /// Finished already (degraded mode: a plain fork joins it first thing).
    pub cgroup: Option<Cgroup>,
    /// What exists of a cgroup the sandbox runs without.
    pub unfinished: Option<Cgroup>,
    /// The v2 directory the init is born in (`clone3`), where there is one.
    pub v2: Option<OwnedFd>,
    /// The supervisor's end of the pair the v1 directories' `tasks` files
    /// reach the init over.
    pub channel: Option<OwnedFd>,
}

/// The init's ends of the go-ahead and report pipes: the clone keeps them,
/// the supervisor closes its copies right after it.
pub(super) struct InitEnds {
    pub go_rd: OwnedFd,
    pub rep_wr: OwnedFd,
}

/// The supervisor's ends of the pipes and socket pairs to the init.
pub(super) struct Ends {
    /// The go-ahead and the final message go here.
    pub go_wr: OwnedFd,
    /// The init's reports (setup failures, the command's status).
    pub rep_rd: OwnedFd,
    pub tty: Option<OwnedFd>,
    pub egress: Option<OwnedFd>,
    pub service: Option<OwnedFd>,
    pub layer: Option<OwnedFd>,
    /// The listener of the filter whose mode changes this side judges.
    pub modes: Option<OwnedFd>,
}

/// Everything before the clone, in the order the host sees it.
pub(super) fn prepare(
    spec: &SandboxSpec,
    id: &str,
    events: &mut dyn EventSink,
    mode: Mode,
    program: Program,
    attach: &mut dyn Attach,
) -> Result<Prepared, JailError> {
    let degraded_mode = mode == Mode::Degraded;
    let root_mode = host::is_root();
    refuse(spec, mode, program)?;
    let disk = disk(spec, id, events, degraded_mode)?;
    let HostPlan {
        join_network,
        rootfs,
        workspace,
        uid,
        gid,
        host_uid,
        host_gid,
        binds,
        writable,
        home_tmpfs,
        kept,
    } = plan::host_plan(spec, disk, degraded_mode, root_mode)?;
    let (kept_plan, kept_save) = match kept {
        Some((p, s)) => (Some(p), Some(s)),
        None => (None, None),
    };
    let (confinement, init_cgroup) = confine(spec, id, events, degraded_mode)?;
    let user_limits = quotas::UserLimits::for_sandbox();

    // The command's terminal: opened by the init in the sandbox's own
    // devpts, its master side sent back over a socket pair; without a mount
    // namespace (degraded), the host's devpts is the sandbox's, and it is
    // opened here.
    let wants_tty = spec.terminal == Terminal::Pty && program == Program::Command;
    let terminal = if wants_tty && degraded_mode {
        Some(pty::open()?)
    } else {
        None
    };

    // Without a mount namespace the sandbox lives in the host's tree: its
    // scratch space is a private directory, its paths are host paths, and
    // Landlock alone says what it may touch.
    let private_tmp = if degraded_mode {
        Some(PrivateTmp::create(id, uid, gid)?)
    } else {
        None
    };
    let env = environment(
        spec,
        degraded_mode,
        attach,
        &workspace,
        &binds,
        writable,
        private_tmp.as_ref(),
    )?;
    let argv = spec
        .command
        .iter()
        .map(|a| cstring(a))
        .collect::<Result<Vec<_>, _>>()?;

    let (egress, published) = network(spec, id, events, degraded_mode)?;
    let (init, ends, child_ends) = channels(Wanted {
        tty: wants_tty && !degraded_mode,
        egress: egress.is_some() || !published.is_empty(),
        service: program == Program::Service,
        layer: kept_save.is_some(),
    })?;
    let weakened = weakened(id, events);
    let allow_exec = exec_allowlist(spec, id, events)?;

    // The init closes the supervisor's ends of everything they share.
    let close_in_child: Vec<RawFd> = ends
        .raw_fds()
        .chain(published.iter().map(|(l, _)| l.as_raw_fd()))
        .chain(terminal.as_ref().map(|t| t.master.as_raw_fd()))
        .chain(confinement.v2.as_ref().map(|d| d.as_raw_fd()))
        .chain(confinement.channel.as_ref().map(|p| p.as_raw_fd()))
        .collect();
    let fs = &spec.filesystem;
    let child = ChildPlan {
        weakened,
        root: RootPlan {
            rootfs,
            binds,
            tmp_size: fs.tmp_size,
            hostname: spec.hostname.clone(),
            resolv_conf: egress
                .as_ref()
                .map(|_| "nameserver 127.0.0.1\noptions ndots:1 timeout:2\n".to_string()),
            trust: match (&env.secrets, &spec.join_trust) {
                (Some(p), _) => Some(p.trust_files()?),
                (None, Some(dir)) if spec.join_network.is_some() => Some(joined_trust(dir)?),
                _ => None,
            },
            hidden: fs.hidden.clone(),
            home_tmpfs,
            home: fs.home_mount().to_path_buf(),
            user: spec.user.as_ref().map(|name| crate::mounts::UserEntry {
                name: name.clone(),
                uid,
                gid,
            }),
            kept: kept_plan,
            layer: None,
        },
        egress_channel: child_ends.egress,
        egress: egress.is_some(),
        joined_network: spec.join_network.is_some(),
        serve_sockets: !published.is_empty(),
        uid,
        gid,
        rlimits: rlimits(spec, &user_limits),
        user_limits: if degraded_mode {
            quotas::UserLimits::default()
        } else {
            user_limits
        },
        landlock_read: env.landlock_read,
        writable: env.writable,
        allow_exec,
        cwd: env.cwd,
        degraded: degraded_mode,
        volumes: fs.volumes.iter().map(|v| v.inside.clone()).collect(),
        argv,
        env: env.env,
        path_var: env.path_var,
        pty_slave: terminal.as_ref().and_then(|t| t.slave.try_clone().ok()),
        close_in_child,
        cgroup_tasks: init_cgroup.tasks,
        cgroup_channel: init_cgroup.channel,
        service: child_ends.service,
        tty_channel: child_ends.tty,
        layer_channel: child_ends.layer,
        modes_channel: child_ends.modes,
    };
    Ok(Prepared {
        mode,
        root_mode,
        ids: Ids {
            uid,
            gid,
            host_uid,
            host_gid,
        },
        join_network,
        workspace,
        confinement,
        child,
        init,
        ends,
        master: terminal.map(|t| t.master),
        private_tmp,
        secrets: env.secrets,
        egress,
        published,
        kept_save,
    })
}

/// The socket pairs a sandbox needs.
struct Wanted {
    /// The terminal's master side, opened by the init in its own devpts.
    tty: bool,
    /// The egress proxy's sockets, or fresh ones for published ports.
    egress: bool,
    /// A long-lived sandbox: the channel its init takes spawn requests on.
    service: bool,
    /// `--disk`: the init builds the kept state on a size-limited tmpfs
    /// and hands it back, for the supervisor to save when it stops.
    layer: bool,
}

/// The init's ends of the socket pairs.
struct ChildEnds {
    tty: Option<OwnedFd>,
    egress: Option<OwnedFd>,
    service: Option<OwnedFd>,
    layer: Option<OwnedFd>,
    modes: Option<OwnedFd>,
}

/// The go-ahead and report pipes, and the socket pairs `wanted`.
fn channels(wanted: Wanted) -> Result<(InitEnds, Ends, ChildEnds), JailError> {
    let (go_rd, go_wr) =
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(sys_err("create a pipe"))?;
    let (rep_rd, rep_wr) =
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(sys_err("create a pipe"))?;
    let (tty, tty_child) = pair_if(wanted.tty, "create the terminal's socket pair")?;
    let (egress, egress_child) = pair_if(wanted.egress, "create the egress socket pair")?;
    let (service, service_child) = pair_if(wanted.service, "create the spawn channel")?;
    let (layer, layer_child) = pair_if(wanted.layer, "create the layer's socket pair")?;
    // Always: every sandbox's mode changes are judged (see `crate::modes`).
    let (modes, modes_child) = pair_if(true, "create the mode listener's socket pair")?;
    Ok((
        InitEnds { go_rd, rep_wr },
        Ends {
            go_wr,
            rep_rd,
            tty,
            egress,
            service,
            layer,
            modes,
        },
        ChildEnds {
            tty: tty_child,
            egress: egress_child,
            service: service_child,
            layer: layer_child,
            modes: modes_child,
        },
    ))
}

impl Ends {
    /// Every descriptor of the supervisor's side, for the init to close.
    fn raw_fds(&self) -> impl Iterator<Item = RawFd> + '_ {
        [self.go_wr.as_raw_fd(), self.rep_rd.as_raw_fd()]
            .into_iter()
            .chain(
                [
                    &self.tty,
                    &self.egress,
                    &self.service,
                    &self.layer,
                    &self.modes,
                ]
                .into_iter()
                .flatten()
                .map(|fd| fd.as_raw_fd()),
            )
    }
}

/// What no mode of this host can run.
fn refuse(spec: &SandboxSpec, mode: Mode, program: Program) -> Result<(), JailError> {
    if host::root_inside_maps_to_outer_root() {
        return Err(JailError::OuterRoot);
    }
    if mode == Mode::Degraded && spec.filesystem.rootfs.is_some() {
        return Err(JailError::RootfsNeedsNamespaces);
    }
    if mode == Mode::Degraded && program == Program::Service {
        // Without a PID namespace the init's stop (SIGTERM to -1) would
        // reach every process of the user on the host.
        return Err(JailError::ServiceNeedsNamespaces);
    }
    Ok(())
}

/// `--disk`, where this kernel can enforce it: everything warden keeps for
/// the sandbox lives in a tmpfs of that size while it runs; the overlays
/// made on it (the workspace's, the caches', the writable volumes') need
/// Linux 6.6.
fn disk(
    spec: &SandboxSpec,
    id: &str,
    events: &mut dyn EventSink,
    degraded_mode: bool,
) -> Result<plan::Disk, JailError> {
    let fs = &spec.filesystem;
    Ok(match (&fs.disk, degraded_mode) {
        (Some(limit), false)
            if fs.overlay.is_some()
                || !fs.caches.is_empty()
                || fs.volumes.iter().any(|v| v.writable) =>
        {
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
                        &format!("this kernel ({release}) cannot keep the overlay's layer or a cache's writes in a size-limited tmpfs (overlayfs's marks on tmpfs need Linux 6.6): they are on disk without a size limit; `resources.disk` refuses rather than run so"),
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
    })
}

/// Resources: a cgroup where the host allows one; otherwise rlimits, and
/// only with consent when the person asked for a limit explicitly. Returns
/// the supervisor's side, the init's end of the cgroup's socket pair, and
/// the v1 `tasks` files the init joins first thing (degraded mode).
fn confine(
    spec: &SandboxSpec,
    id: &str,
    events: &mut dyn EventSink,
    degraded_mode: bool,
) -> Result<(Confinement, InitCgroup), JailError> {
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
    // are made while the init sets up its IDs and network (after the
    // go-ahead), off the path to the clone; the init joins them before it
    // builds its root, and runs nothing but warden's own code until the
    // final message. A plain fork (degraded mode) gets the whole cgroup now
    // and joins first thing.
    crate::phase("cgroup-begin");
    let pending = confine_begin(spec, id, &limits, events)?;
    let (pending, cgroup, unfinished) = match pending {
        Some(p) if degraded_mode => {
            let (cg, made) = confine_finish(spec, id, p, events)?;
            (None, cg, made)
        }
        p => (p, None, None),
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
    let (channel, child) = pair_if(pending.is_some(), "create the cgroup's socket pair")?;
    crate::phase("cgroup-begun");
    Ok((
        Confinement {
            pending,
            cgroup,
            unfinished,
            v2: joining.v2,
            channel,
        },
        InitCgroup {
            channel: child,
            tasks: joining.v1_tasks,
        },
    ))
}

/// The init's side of its cgroup: its end of the pair the v1 `tasks` files
/// come over, and those it joins first thing (degraded mode).
struct InitCgroup {
    channel: Option<OwnedFd>,
    tasks: Vec<(OwnedFd, PathBuf)>,
}

pub(super) fn cgroup_err(source: cgroup::CgroupError) -> JailError {
    JailError::CgroupRequired {
        what: "the sandbox's limits".into(),
        source,
    }
}

/// Fallback limits for hosts without usable cgroups; the init applies them
/// only when the final message says that no cgroup confines it.
fn rlimits(spec: &SandboxSpec, user_limits: &quotas::UserLimits) -> Rlimits {
    let res = &spec.resources;
    Rlimits {
        open_files: res.open_files,
        file_size: res.file_size,
        nproc: Some(res.pids.value),
        data: Some(res.memory.value),
        sigpending: user_limits.sigpending,
        msgqueue: user_limits.msgqueue,
        memlock: user_limits.memlock,
    }
}

/// What the command starts with and where, and what Landlock lets it
/// touch.
struct Environment {
    secrets: Option<SecretPlan>,
    env: Vec<CString>,
    path_var: String,
    cwd: PathBuf,
    landlock_read: Vec<PathBuf>,
    writable: Vec<PathBuf>,
}

fn environment(
    spec: &SandboxSpec,
    degraded_mode: bool,
    attach: &mut dyn Attach,
    workspace: &Option<PathBuf>,
    binds: &[crate::mounts::BindPlan],
    mut writable: Vec<PathBuf>,
    private_tmp: Option<&PrivateTmp>,
) -> Result<Environment, JailError> {
    let mut env_pairs = spec.env.clone();
    // Secrets: placeholders in the sandbox's environment; the values are
    // read after the clone, or kept where the clone does not get them.
    let secrets = match &spec.network {
        // Names with request rules are terminated as secrets' hosts are:
        // the same authority, trusted through the same files.
        NetworkSpec::Egress(e) if !e.secrets.is_empty() || !e.requests.is_empty() => {
            if degraded_mode {
                return Err(JailError::SecretsNeedNamespaces);
            }
            let plan = SecretPlan::prepare(&e.secrets, attach)?;
            plan.place(&mut env_pairs);
            Some(plan)
        }
        _ => None,
    };
    let mut landlock_read = vec![PathBuf::from("/")];
    let cwd = match (private_tmp, workspace) {
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
            for b in binds {
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
    // `filesystem.workdir`: where the command and every exec start.
    let cwd = spec.filesystem.workdir.clone().unwrap_or(cwd);
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
    Ok(Environment {
        secrets,
        env,
        path_var,
        cwd,
        landlock_read,
        writable,
    })
}

/// The sandbox's network as this mode can give it: what its egress proxy
/// enforces, and the host's listeners for `--publish`, bound now so that a
/// port in use is an error before anything starts.
fn network(
    spec: &SandboxSpec,
    id: &str,
    events: &mut dyn EventSink,
    degraded_mode: bool,
) -> Result<(Option<EgressSpec>, Published), JailError> {
    // With egress, the init opens the proxy's sockets inside the sandbox's
    // network namespace and hands them over a socket pair.
    let egress = match (&spec.network, degraded_mode) {
        (NetworkSpec::Egress(e), false) => Some(e.clone()),
        (NetworkSpec::Egress(_), true) => {
            degraded(
                events,
                id,
                "network",
                "without a network namespace `egress.domains` cannot be enforced: the sandbox has the host's network",
            );
            None
        }
        (NetworkSpec::LoopbackOnly, _) => None,
    };
    let mut published = Vec::new();
    if spec.publish.is_empty() {
        return Ok((egress, published));
    }
    if degraded_mode {
        // Without a network namespace the sandbox's servers are on the
        // host's own loopback already.
        degraded(
            events,
            id,
            "publish",
            "without a network namespace `egress.publish` does nothing: servers in the sandbox listen on the host's network",
        );
        return Ok((egress, published));
    }
    for m in &spec.publish {
        let listener = std::net::TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, m.host_port))
            .map_err(|source| JailError::Publish {
                port: m.host_port,
                source,
            })?;
        published.push((listener, m.sandbox_port));
    }
    Ok((egress, published))
}

/// The exec allowlist's entries for the init. Without Landlock nothing
/// enforces them: refused, or with `allow_degraded` dropped and said.
fn exec_allowlist(
    spec: &SandboxSpec,
    id: &str,
    events: &mut dyn EventSink,
) -> Result<Vec<String>, JailError> {
    if spec.allow_exec.is_empty() {
        return Ok(Vec::new());
    }
    match crate::sys::landlock_abi() {
        Ok(abi) if abi >= 1 => Ok(spec.allow_exec.clone()),
        Ok(_) => Err(JailError::ExecAllowlistNeedsLandlock(
            nix::errno::Errno::ENOSYS,
        )),
        Err(e) if !spec.allow_degraded => Err(JailError::ExecAllowlistNeedsLandlock(e)),
        Err(_) => {
            degraded(
                events,
                id,
                "exec allowlist",
                "the kernel has no Landlock: every program in the sandbox may be executed",
            );
            Ok(Vec::new())
        }
    }
}

/// Layers a test switched off (debug builds only), said as `degraded`.
fn weakened(id: &str, events: &mut dyn EventSink) -> crate::Weakened {
    let weakened = crate::Weakened::current();
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
    weakened
}
