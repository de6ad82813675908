//! `create` and `run`: a bundle's `config.json` translated (in
//! `warden-policy`), resolved as every door resolves, made into a named
//! sandbox whose supervisor holds the container's first process with the
//! stdio `create` was given until `start`.

use crate::container::{self, OciError, Record};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use warden_policy::compose::{ComposeError, Origin, Val};
use warden_policy::oci;
use warden_policy::Field;
use warden_runtime::client::Connection;
use warden_runtime::lifecycle::{self, CreateRequest};
use warden_runtime::protocol::ExecRequest;
use warden_runtime::resolve::{self, Context, Input, ProfileSource};

/// A created container: its supervisor's PID (the `--pid-file` PID) and
/// lines for the log.
pub struct Created {
    pub pid: u32,
    pub notices: Vec<String>,
}

/// Create container `id` from `bundle`; `exe` is this binary, which runs
/// the supervisor (`exe __supervise NAME`).
pub fn create(
    root: &Path,
    id: &str,
    bundle: &Path,
    pid_file: Option<&Path>,
    console_socket: Option<&Path>,
    exe: &Path,
) -> Result<Created, OciError> {
    container::check_id(id)?;
    let bundle = std::path::absolute(bundle).map_err(|source| OciError::Read {
        path: bundle.to_path_buf(),
        source,
    })?;
    let mut t = translate(&bundle, console_socket)?;
    // Refused before anything is made.
    let cgroups_path = crate::cgroups_path::of_bundle(&bundle)?;
    let rootfs = root_of(&mut t)?;
    let mut notices = t.notices.clone();
    notices.extend(mount_points(&rootfs)?);
    let store = container::store(root)?;
    let name = container::sandbox_name(id);
    if store.get(&name).is_ok() {
        return Err(OciError::Exists(id.to_string()));
    }
    let join = crate::pod::find(root, id, &t)?;
    if let Some(ns) = &t.network_namespace {
        notices.push(match &join {
            Some(j) => format!("linux.namespaces network path {ns}: joins container {}'s network namespace (they share localhost; this one goes out only through that one's proxy, under the same annotations)", j.with),
            None => format!("linux.namespaces network path {ns}: warden gives the container a network namespace of its own, whose only way out is warden's egress proxy; the given namespace is not joined (a later container naming it joins this one's)"),
        });
    }
    within_host_defaults(&t, &bundle)?;
    let (sb, notice) =
        make_sandbox(root, &store, &name, &t).map_err(|e| by_annotation(e, &t, &bundle))?;
    notices.extend(notice);
    // From here on a failure removes what was made: nothing of a refused
    // create stays under --root.
    let record = Record {
        id: id.to_string(),
        bundle,
        rootfs,
        created: humantime::format_rfc3339_nanos(std::time::SystemTime::now()).to_string(),
        annotations: t.annotations.clone(),
        netns: t.network_namespace.clone().map(PathBuf::from),
        hooks: t.hooks.clone(),
        // What of `linux.cgroupsPath` the start makes, which `delete`
        // removes after the sandbox's own.
        cgroups: cgroups_path
            .as_deref()
            .map(crate::cgroups_path::missing)
            .unwrap_or_default(),
        cgroups_path,
    };
    let held = Held {
        root,
        sb: &sb,
        t: &t,
        record: &record,
        exe,
        console_socket,
    };
    let started = held.start(join.as_ref()).and_then(|pid| {
        if let Some(p) = pid_file {
            container::write_pid_file(p, pid)?;
        }
        Ok(pid)
    });
    match started {
        Ok(pid) => Ok(Created { pid, notices }),
        Err(e) => {
            // A sandbox that failed may still be stopping: removed once
            // its supervisor is gone.
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
            while lifecycle::remove(&store, &name, true).is_err()
                && store.get(&name).is_ok()
                && std::time::Instant::now() < deadline
            {
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            Err(e)
        }
    }
}

/// The bundle's `config.json`, read and translated; a terminal is refused
/// without a console socket to send it to.
fn translate(bundle: &Path, console_socket: Option<&Path>) -> Result<oci::Translated, OciError> {
    let config_path = bundle.join("config.json");
    let text = std::fs::read_to_string(&config_path).map_err(|source| OciError::Read {
        path: config_path.clone(),
        source,
    })?;
    let config_err = |error| OciError::Config {
        bundle: bundle.to_path_buf(),
        error,
    };
    let config = oci::parse(&text).map_err(config_err)?;
    let t = oci::translate(&config, bundle).map_err(config_err)?;
    if t.process.terminal && console_socket.is_none() {
        return Err(OciError::Unsupported(
            "config.json: process.terminal = true needs --console-socket (where the terminal's master side is sent)".into(),
        ));
    }
    Ok(t)
}

/// The container's root as the sandbox gets it. The bundle is the
/// caller's (containerd's): its links are followed once, here; the
/// sandbox's root is then the real directory.
fn root_of(t: &mut oci::Translated) -> Result<PathBuf, OciError> {
    let given = t.flags.path(Field::Rootfs).unwrap_or_default();
    let rootfs = std::fs::canonicalize(&given).map_err(|source| OciError::Read {
        path: given.clone(),
        source,
    })?;
    t.flags.add_one(
        Field::Rootfs,
        Val::Path(rootfs.clone()),
        Origin::CommandLine,
    );
    Ok(rootfs)
}

/// The named sandbox, resolved as any container's (a joiner's policy is
/// the first one's, checked by [`crate::pod::find`]); a joiner's egress,
/// and its secrets with it, are then replaced by the first one's namespace
/// and placeholders ([`join_network`]).
fn make_sandbox(
    root: &Path,
    store: &warden_workspace::Store,
    name: &str,
    t: &oci::Translated,
) -> Result<(warden_workspace::Sandbox, Option<String>), OciError> {
    let secrets = crate::secrets::entries(&t.secrets, &crate::secrets::dir())?;
    let catalog = resolve::catalog(|k| std::env::var_os(k));
    let defaults = warden_policy::Defaults::for_host(resolve::host_facts());
    let ctx = Context {
        catalog: &catalog,
        defaults: &defaults,
        state_dir: Some(root),
        otlp: false,
        id: name,
        // The profile is named by the pod's author (an annotation): a plain
        // name of the node's catalogue only. The rest of the configuration
        // (root, mounts, limits) is what the node's container manager
        // handed over, and the annotations were held to the same rule
        // when they were translated.
        trust: warden_policy::Trust::Caller,
        owner: warden_runtime::lifecycle::Owner::Machine,
    };

    let mut flags = t.flags.clone();
    for entry in &secrets {
        // The pod author's: the hosts it chose reach public addresses
        // only, never the node owner's pins or ranges.
        let at = Origin::Annotation {
            key: "warden.dev/secret.*".into(),
        };
        flags
            .add_text(Field::Secret, entry, at, warden_policy::Trust::Caller)
            .map_err(|e| OciError::Unsupported(format!("a secret annotation: {e}")))?;
    }
    let input = Input {
        profile: t.profile.clone().map(ProfileSource::Named),
        flags,
        ..Input::default()
    };
    let req = CreateRequest {
        profile_name: t.profile.clone(),
        input,
        ..CreateRequest::default()
    };
    Ok(lifecycle::create(store, name, req, &ctx)?)
}

/// A value the resolver or the trust rule refused, said by the part of
/// `config.json` that gave it, as the translation says its own refusals:
/// an annotation (`annotations["warden.dev/timeout"]`) or a field the pod
/// spec fills in (`linux.resources.memory.limit`, over the node profile's
/// limit). A pod's author wrote those, not the node's profile. Other
/// errors are kept as they are.
fn by_annotation(e: OciError, t: &oci::Translated, bundle: &Path) -> OciError {
    use warden_runtime::lifecycle::LifecycleError;
    use warden_runtime::resolve::ResolveError;
    let OciError::Lifecycle(LifecycleError::Resolve(r)) = &e else {
        return e;
    };
    let config = |field: String, value: String, why: String| OciError::Config {
        bundle: bundle.to_path_buf(),
        error: oci::OciError::Invalid { field, value, why },
    };
    let profile = || warden_policy::Door::Profile;
    match &**r {
        ResolveError::Spec(s) => {
            let why = || warden_policy::word(&s.problem().to_string(), profile());
            let annotated = s
                .field()
                .and_then(Field::annotation)
                .and_then(|key| t.annotations.get_key_value(key));
            if let Some((key, value)) = annotated {
                return config(format!("annotations[\"{key}\"]"), value.clone(), why());
            }
            match s.field().and_then(|f| from_the_pod_spec(t, f)) {
                Some((field, value)) => config(field, value, why()),
                None => e,
            }
        }
        // The trust rule's refusal of a pod's value (a limit above the
        // node profile's): at its JSON pointer in the bundle.
        ResolveError::Compose(ComposeError::Invalid(found)) => {
            // A pod's annotation the rule refused (a program more than the
            // node profile's `allow_exec`): at the annotation.
            let annotated = found.iter().find_map(|d| {
                let key = d.field.and_then(Field::annotation)?;
                let (key, value) = t.annotations.get_key_value(key)?;
                Some((d, key, value))
            });
            if let (Some((d, key, value)), true) =
                (annotated, found.iter().all(|d| d.pointer.is_none()))
            {
                let why = match &t.profile {
                    Some(name) => format!("{} (the node's profile {name})", d.message),
                    None => d.message.clone(),
                };
                return config(format!("annotations[\"{key}\"]"), value.clone(), why);
            }
            let Some((d, pointer)) = found.iter().find_map(|d| Some((d, d.pointer.as_deref()?)))
            else {
                return e;
            };
            let value = d
                .field
                .and_then(|f| from_the_pod_spec(t, f))
                .map(|(_, v)| v)
                .unwrap_or_default();
            let why = match &t.profile {
                Some(name) => format!("{} (the node's profile {name})", d.message),
                None => d.message.clone(),
            };
            config(oci::dotted(pointer), value, why)
        }
        _ => e,
    }
}

/// Where the pod spec gave `field`'s one value, as `config.json`'s errors
/// name its fields, and the value as the bundle has it.
fn from_the_pod_spec(t: &oci::Translated, field: Field) -> Option<(String, String)> {
    let s = t.flags.get(field)?;
    let Origin::Body { pointer, .. } = &s.origin else {
        return None;
    };
    let value = match s.val.json() {
        serde_json::Value::String(text) => text,
        other => other.to_string(),
    };
    Some((oci::dotted(pointer), value))
}

/// The pod's limits held to the host's defaults where the profile it
/// names (or none) sets no limit of the node's own: refused before
/// anything is made, at the bundle's field (see
/// [`oci::within_host_defaults`]). A profile that does not compose is left
/// to the create, which says why.
fn within_host_defaults(t: &oci::Translated, bundle: &Path) -> Result<(), OciError> {
    let catalog = resolve::catalog(|k| std::env::var_os(k));
    let defaults = warden_policy::Defaults::for_host(resolve::host_facts());
    let node = match &t.profile {
        Some(name) => match warden_policy::compose::compose(
            &catalog,
            Some(name),
            &warden_policy::compose::Layer::default(),
        ) {
            Ok(c) => c.merged,
            Err(_) => return Ok(()),
        },
        None => warden_policy::compose::Layer::default(),
    };
    oci::within_host_defaults(&t.flags, &node, &defaults).map_err(|error| OciError::Config {
        bundle: bundle.to_path_buf(),
        error,
    })
}

/// A made sandbox on its way to holding the container's first process.
struct Held<'a> {
    root: &'a Path,
    sb: &'a warden_workspace::Sandbox,
    t: &'a oci::Translated,
    record: &'a Record,
    exe: &'a Path,
    console_socket: Option<&'a Path>,
}

impl Held<'_> {
    /// Join `join`'s network, record the container, start its supervisor,
    /// hold its first process and run the create-time hooks; the
    /// supervisor's PID.
    fn start(&self, join: Option<&crate::pod::Join>) -> Result<u32, OciError> {
        if let Some(j) = join {
            join_network(self.sb, j)?;
        }
        let path = self.sb.dir().join(container::RECORD);
        warden_runtime::state::write_json(&path, self.record).map_err(|_| OciError::Write {
            path: path.clone(),
            source: std::io::Error::other("cannot write the container's record"),
        })?;
        lifecycle::start(self.root, self.sb, self.exe)?;
        self.check_alive()?;
        let pid = self.hold_first()?;
        let joined = crate::cgroups::expose(pid);
        if !joined.is_empty() {
            let record = Record {
                // The sandbox's own first, then the parents made for it.
                cgroups: joined
                    .into_iter()
                    .chain(self.record.cgroups.iter().cloned())
                    .collect(),
                ..self.record.clone()
            };
            warden_runtime::state::write_json(&path, &record).map_err(|_| OciError::Write {
                path: path.clone(),
                source: std::io::Error::other("cannot write the container's record"),
            })?;
        }
        self.create_hooks(pid)?;
        Ok(pid)
    }

    /// The supervisor says ready once the sandbox is cloned; whether the
    /// init built the root and serves is known from its answer to a
    /// request that only it can answer (listing the workspace).
    fn check_alive(&self) -> Result<(), OciError> {
        let alive = Connection::open(&lifecycle::control(self.sb))
            .and_then(|c| c.file(warden_protocol::files::FileOp::List { path: ".".into() }));
        if let Err(e) = alive {
            let log =
                std::fs::read_to_string(self.sb.dir().join("supervisor.log")).unwrap_or_default();
            return Err(OciError::Unsupported(format!(
                "the sandbox did not come up ({e}){}",
                if log.trim().is_empty() {
                    String::new()
                } else {
                    format!(": {}", log.trim())
                }
            )));
        }
        Ok(())
    }

    /// Hand the container's first process to the supervisor, which holds
    /// it until `start`; the supervisor's PID.
    fn hold_first(&self) -> Result<u32, OciError> {
        let t = self.t;
        let conn = Connection::open(&lifecycle::control(self.sb))?;
        let pid = conn.supervisor_pid;
        let req = ExecRequest {
            argv: t.process.args.clone(),
            env: t.process.env.clone(),
            cwd: t.process.cwd.clone(),
            tty: t.process.terminal,
            winsize: None,
            keep_output: None,
        };
        match self.console_socket {
            // The terminal is opened in the sandbox's devpts now, and its
            // master side handed to the console socket before `create`
            // returns, as the shim waits for it.
            Some(sock) if t.process.terminal => {
                let master = conn.hold_with_terminal(req)?;
                crate::console::send_master(sock, master.as_fd())?;
            }
            _ => {
                let stdin = std::io::stdin();
                let stdout = std::io::stdout();
                let stderr = std::io::stderr();
                conn.hold(req, &[stdin.as_fd(), stdout.as_fd(), stderr.as_fd()])?;
            }
        }
        Ok(pid)
    }

    /// The sandbox exists, its root is built and its first process is
    /// held: the create-time hooks, whose failure fails `create` (and
    /// removes everything). Hooks on the host get the PID of the
    /// sandbox's init, whose namespaces are the container's.
    fn create_hooks(&self, pid: u32) -> Result<(), OciError> {
        let hooks = &self.t.hooks;
        let init = crate::pod::init_pid(pid).unwrap_or(pid);
        let state = crate::hooks::state(self.record, "creating", init);
        crate::hooks::run_on_host("prestart", &hooks.prestart, &state)?;
        crate::hooks::run_on_host("createRuntime", &hooks.create_runtime, &state)?;
        crate::hooks::run_in_container(
            "createContainer",
            &hooks.create_container,
            &lifecycle::control(self.sb),
            &crate::hooks::state(self.record, "creating", 1),
        )
    }
}

/// Make the stored spec of `sb` join the network namespace of `j`
/// (another container's sandbox's), with no proxy of its own: that one's
/// secrets' placeholders in its environment, that one's authority trusted.
fn join_network(sb: &warden_workspace::Sandbox, j: &crate::pod::Join) -> Result<(), OciError> {
    let placeholders = &j.placeholders;
    use warden_runtime::state;
    let file = sb.dir().join(state::STORED);
    let err = |what: &str| OciError::Write {
        path: file.clone(),
        source: std::io::Error::other(what.to_string()),
    };
    let mut stored: state::Stored =
        state::read_json(&file).map_err(|_| err("cannot read the sandbox's spec"))?;
    stored.spec.network = warden_policy::NetworkSpec::LoopbackOnly;
    stored.spec.publish.clear();
    stored.spec.join_network = Some(j.path.clone());
    stored.spec.join_trust = j.trust.clone();
    stored
        .spec
        .env
        .retain(|(k, _)| !placeholders.iter().any(|(n, _)| n == k));
    stored.spec.env.extend(placeholders.iter().cloned());
    state::write_json(&file, &stored).map_err(|_| err("cannot write the sandbox's spec"))
}

/// Directories warden mounts over at the top of a container's root.
const MOUNT_POINTS: &[&str] = &["proc", "dev", "tmp", "workspace", "etc", "run"];

/// Make the mount points warden needs at the top of `rootfs` that an
/// image lacks (its root is bound read-only into the sandbox, whose root
/// user is nobody on the host: it cannot make them itself). Each is made
/// with `mkdirat` beneath the root's own descriptor, which never follows
/// a link the image planted in its place.
fn mount_points(rootfs: &Path) -> Result<Vec<String>, OciError> {
    use nix::fcntl::{open, OFlag};
    use nix::sys::stat::{mkdirat, Mode};
    let dir = open(
        rootfs,
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| OciError::Read {
        path: rootfs.to_path_buf(),
        source: std::io::Error::from(e),
    })?;
    let mut made = Vec::new();
    for name in MOUNT_POINTS {
        match mkdirat(&dir, *name, Mode::from_bits_truncate(0o755)) {
            Ok(()) => made.push(format!("/{name}")),
            Err(nix::errno::Errno::EEXIST) => {}
            Err(e) => {
                return Err(OciError::Write {
                    path: rootfs.join(name),
                    source: std::io::Error::from(e),
                })
            }
        }
    }
    // warden's resolver is bound over /etc/resolv.conf.
    let etc = nix::fcntl::openat(
        &dir,
        "etc",
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    );
    if let Ok(etc) = etc {
        let file = nix::fcntl::openat(
            &etc,
            "resolv.conf",
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(0o644),
        );
        match file {
            Ok(_) => made.push("/etc/resolv.conf".into()),
            Err(nix::errno::Errno::EEXIST) => {}
            Err(e) => {
                return Err(OciError::Write {
                    path: rootfs.join("etc/resolv.conf"),
                    source: std::io::Error::from(e),
                })
            }
        }
    }
    Ok(if made.is_empty() {
        Vec::new()
    } else {
        vec![format!(
            "made the mount points {} in the container's root",
            made.join(", ")
        )]
    })
}

/// The path of this binary, which runs supervisors.
pub fn own_exe() -> Result<PathBuf, OciError> {
    std::env::current_exe().map_err(|source| OciError::Spawn {
        what: "the supervisor (cannot find this program's path)",
        source,
    })
}
