//! The OCI bundle runsc runs: a root of mount points only, and the spec's
//! file tree as mounts over it, the same tree a process sandbox sees: the
//! host's system directories read-only (or the `filesystem.rootfs` tree),
//! `/etc` with the host's secrets covered, the workspace read-write at
//! [`WORKSPACE_MOUNT`], the spec's own binds, a fresh `/tmp` and home, the
//! sandbox's resolver and, with secrets, the proxy's authority. The
//! process has no capabilities, `no_new_privs` and the spec's limits
//! (its task bound among them, as `RLIMIT_NPROC`).
//!
//! Everything is written into a directory of warden's state owned by the
//! supervisor (mode 0700); nothing of the host is shown that the spec does
//! not show.

use super::shim::Shim;
use crate::mounts::{HIDDEN_IN_ETC, SYSTEM_DIRS};
use crate::seccomp::{Arch, When, GVISOR_RULES};
use serde_json::{json, Value};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use warden_policy::{Home, SandboxSpec, WORKSPACE_MOUNT};

/// Why the bundle could not be written.
#[derive(Debug, thiserror::Error)]
pub enum BundleError {
    #[error("cannot write {path} (the gVisor sandbox's bundle)")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// What the bundle is made of, decided by the backend.
pub struct Layout<'a> {
    pub spec: &'a SandboxSpec,
    /// The workspace as the sandbox writes it (a named sandbox's upper
    /// layer when its lower is empty).
    pub workspace: Option<&'a Path>,
    /// The workspace's path as named (what `workspace` shows: the
    /// directory opened there), where warden's hidden directories are
    /// looked for; runsc is shown `workspace`, never this path.
    pub workspace_named: Option<&'a Path>,
    /// The sandbox's IDs inside gVisor.
    pub uid: u32,
    pub gid: u32,
    /// The network namespace to run in (`/proc/PID/fd/N`), or none
    /// (rootless: gVisor's own, with loopback only).
    pub netns: Option<PathBuf>,
    /// Trust files to show at their paths: (file in the bundle, inside).
    pub trust: Vec<(PathBuf, &'static str)>,
    /// The first process: the spec's command, or a process that waits.
    pub args: Vec<String>,
    /// The first process has the caller's terminal.
    pub terminal: bool,
    /// Cover the host's secret files in `/etc` (root: runsc's file server
    /// can read them; rootless, it cannot, and cannot bind over them).
    pub cover_etc: bool,
    /// The shim each later process starts through (a long-lived sandbox).
    pub shim: Option<&'a Shim>,
}

/// Write the bundle into `dir`: `config.json`, the root of mount points,
/// and the files the mounts show; returns the first process's definition.
pub fn write(dir: &Path, l: &Layout<'_>) -> Result<Value, BundleError> {
    let root = dir.join("rootfs");
    let fs = &l.spec.filesystem;
    let mut mounts: Vec<Value> = vec![
        json!({"destination": "/proc", "type": "proc", "source": "proc"}),
        json!({"destination": "/tmp", "type": "tmpfs", "source": "tmpfs",
               "options": ["nosuid", "nodev", "mode=1777", format!("size={}", fs.tmp_size)]}),
    ];
    let mut points: Vec<PathBuf> = vec!["proc".into(), "tmp".into(), "dev".into()];
    let root_path = match &fs.rootfs {
        Some(tree) => tree.clone(),
        None => {
            for d in SYSTEM_DIRS {
                let host = Path::new(d);
                let rel = d.trim_start_matches('/');
                match std::fs::symlink_metadata(host) {
                    Ok(m) if m.file_type().is_symlink() => {
                        if let Ok(target) = std::fs::read_link(host) {
                            let link = root.join(rel);
                            mkdirs(&root)?;
                            if std::fs::symlink_metadata(&link).is_err() {
                                std::os::unix::fs::symlink(&target, &link)
                                    .map_err(write_err(&link))?;
                            }
                        }
                    }
                    Ok(m) if m.is_dir() => {
                        points.push(rel.into());
                        mounts.push(bind(host, d, false));
                    }
                    _ => {}
                }
            }
            if l.cover_etc {
                cover_etc(dir, &mut mounts)?;
            }
            root.clone()
        }
    };
    let resolv = dir.join("resolv.conf");
    write_file(&resolv, b"nameserver 127.0.0.1\noptions edns0\n")?;
    mounts.push(bind(&resolv, "/etc/resolv.conf", false));
    let hosts = dir.join("hosts");
    let text = format!(
        "127.0.0.1\tlocalhost {}\n::1\tlocalhost ip6-localhost\n",
        l.spec.hostname
    );
    write_file(&hosts, text.as_bytes())?;
    mounts.push(bind(&hosts, "/etc/hosts", false));
    if let Some(ws) = l.workspace {
        points.push(WORKSPACE_MOUNT.trim_start_matches('/').into());
        mounts.push(bind(ws, WORKSPACE_MOUNT, true));
    }
    // A file bound over a file: its mount point is an empty file.
    let mut file_points: Vec<PathBuf> = Vec::new();
    for b in &fs.binds {
        let dst = b.path.display().to_string();
        let rel: PathBuf = dst.trim_start_matches('/').into();
        if b.path.is_file() {
            file_points.push(rel);
        } else {
            points.push(rel);
        }
        mounts.push(bind(&b.path, &dst, b.writable));
    }
    home(l, &mut points, &mut mounts);
    hide(l, &mut points, &mut mounts);
    for (file, inside) in &l.trust {
        file_points.push(inside.trim_start_matches('/').into());
        mounts.push(bind(file, inside, false));
    }
    for (file, inside) in l.shim.map(Shim::binds).unwrap_or_default() {
        file_points.push(inside.trim_start_matches('/').into());
        mounts.push(bind(&file, &inside, false));
    }
    // The root is runsc's to read only: mount points are made here, before.
    if fs.rootfs.is_none() {
        for p in &points {
            mkdirs(&root.join(p))?;
        }
        for p in &file_points {
            let at = root.join(p);
            if let Some(parent) = at.parent() {
                mkdirs(parent)?;
            }
            if std::fs::symlink_metadata(&at).is_err() {
                write_file(&at, b"")?;
            }
        }
    }
    let config = config(l, &root_path, mounts);
    let text = serde_json::to_vec_pretty(&config).unwrap_or_default();
    write_file(&dir.join("config.json"), &text)?;
    Ok(config["process"].clone())
}

/// The sandbox's home: a fresh tmpfs of its user, or a named sandbox's
/// kept directory; its caches under it.
fn home(l: &Layout<'_>, points: &mut Vec<PathBuf>, mounts: &mut Vec<Value>) {
    let fs = &l.spec.filesystem;
    let at = fs.home_mount().display().to_string();
    match &fs.home {
        Home::None => return,
        Home::Tmpfs => mounts.push(json!({
            "destination": at, "type": "tmpfs", "source": "tmpfs",
            "options": ["nosuid", "nodev", "mode=0700",
                        format!("uid={}", l.uid), format!("gid={}", l.gid)]})),
        Home::Dir(d) => mounts.push(bind(d, &at, true)),
    }
    points.push(at.trim_start_matches('/').into());
    for c in &fs.caches {
        let inside = fs.home_mount().join(&c.inside);
        mounts.push(bind(&c.host, &inside.display().to_string(), true));
    }
}

/// Warden's own directories (`filesystem.hidden`) wherever a bind would
/// show them: covered by an empty read-only tmpfs.
fn hide(l: &Layout<'_>, points: &mut Vec<PathBuf>, mounts: &mut Vec<Value>) {
    let fs = &l.spec.filesystem;
    let mut shown: Vec<(PathBuf, PathBuf)> = fs
        .binds
        .iter()
        .map(|b| (b.path.clone(), b.path.clone()))
        .collect();
    if let (Some(_), Some(named)) = (l.workspace, l.workspace_named) {
        shown.push((named.to_path_buf(), PathBuf::from(WORKSPACE_MOUNT)));
    }
    for hidden in &fs.hidden {
        for (src, dst) in &shown {
            if let Ok(rest) = hidden.strip_prefix(src) {
                let inside = dst.join(rest);
                points.push(inside.strip_prefix("/").unwrap_or(&inside).to_path_buf());
                mounts.push(
                    json!({"destination": inside, "type": "tmpfs", "source": "tmpfs",
                                   "options": ["ro", "nosuid", "nodev", "size=4k"]}),
                );
            }
        }
    }
}

/// The host's secret files of `/etc` (see [`HIDDEN_IN_ETC`]): an empty
/// file over each file, an empty tmpfs over each directory.
fn cover_etc(dir: &Path, mounts: &mut Vec<Value>) -> Result<(), BundleError> {
    let empty = dir.join("empty");
    write_file(&empty, b"")?;
    for (rel, _why) in HIDDEN_IN_ETC {
        let host = Path::new("/etc").join(rel);
        let inside = host.display().to_string();
        match std::fs::symlink_metadata(&host) {
            Ok(m) if m.is_dir() => mounts.push(json!({
                "destination": inside, "type": "tmpfs", "source": "tmpfs",
                "options": ["ro", "nosuid", "nodev", "size=4k"]})),
            Ok(m) if m.is_file() => mounts.push(bind(&empty, &inside, false)),
            _ => {}
        }
    }
    Ok(())
}

fn config(l: &Layout<'_>, root: &Path, mounts: Vec<Value>) -> Value {
    let spec = l.spec;
    let cwd = match (&spec.filesystem.workdir, l.workspace) {
        (Some(w), _) => w.display().to_string(),
        (None, Some(_)) => WORKSPACE_MOUNT.to_string(),
        (None, None) => "/".to_string(),
    };
    let env: Vec<String> = spec.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let mut rlimits = vec![json!({"type": "RLIMIT_NOFILE",
        "hard": spec.resources.open_files, "soft": spec.resources.open_files})];
    if let Some(f) = spec.resources.file_size {
        rlimits.push(json!({"type": "RLIMIT_FSIZE", "hard": f, "soft": f}));
    }
    // The sandbox's task bound, held by gVisor's kernel: runsc runs with
    // `--ignore-cgroups`, and its kernel ignores `linux.resources.pids`,
    // but it counts a user's tasks against `RLIMIT_NPROC` as Linux does.
    // Every process of the sandbox runs as one user with no capability,
    // so the count is the sandbox's, exec'd processes' included.
    let pids = spec.resources.pids.value;
    rlimits.push(json!({"type": "RLIMIT_NPROC", "hard": pids, "soft": pids}));
    let mut namespaces = vec![
        json!({"type": "pid"}),
        json!({"type": "ipc"}),
        json!({"type": "uts"}),
        json!({"type": "mount"}),
    ];
    if let Some(ns) = &l.netns {
        namespaces.push(json!({"type": "network", "path": ns}));
    }
    json!({
        "ociVersion": "1.0.2",
        "process": {
            "terminal": l.terminal,
            "user": {"uid": l.uid, "gid": l.gid},
            "args": l.args,
            "env": env,
            "cwd": cwd,
            "capabilities": {"bounding": [], "effective": [], "inheritable": [],
                             "permitted": [], "ambient": []},
            "rlimits": rlimits,
            "noNewPrivileges": true,
        },
        "root": {"path": root, "readonly": true},
        "hostname": spec.hostname,
        "mounts": mounts,
        "linux": {"namespaces": namespaces, "seccomp": seccomp()},
    })
}

/// [`GVISOR_RULES`] as the bundle's `linux.seccomp`, which runsc
/// (`--oci-seccomp`) applies inside gVisor's kernel to the first process;
/// later ones load the same table themselves (see [`super::shim`]).
fn seccomp() -> Value {
    let arch = Arch::native();
    let mut rules = Vec::new();
    for rule in GVISOR_RULES {
        if rule.only_on.is_some_and(|only| Some(only) != arch) {
            continue;
        }
        let refuse = |args: Value| {
            json!({"names": [rule.syscall], "action": "SCMP_ACT_ERRNO",
                   "errnoRet": rule.errno, "args": args})
        };
        match rule.when {
            // One rule per bit, as the filter's build makes them.
            When::AnyBitSet { arg, mask } => {
                for bit in (0..u64::BITS).map(|s| 1u64 << s).filter(|b| mask & b != 0) {
                    rules.push(refuse(json!([{"index": arg, "value": bit, "valueTwo": bit,
                                               "op": "SCMP_CMP_MASKED_EQ"}])));
                }
            }
            // Any other condition is refused whatever its arguments:
            // closed rather than open (the table has none).
            _ => rules.push(refuse(json!([]))),
        }
    }
    let architecture = match arch {
        Some(Arch::Aarch64) => "SCMP_ARCH_AARCH64",
        _ => "SCMP_ARCH_X86_64",
    };
    json!({"defaultAction": "SCMP_ACT_ALLOW", "architectures": [architecture], "syscalls": rules})
}

/// One process started by `runsc exec` (its `--process` file): the first
/// process's definition (`base`: user, `no_new_privs`, limits,
/// environment) with the request's command, started through `shim`
/// (which holds it in a PID namespace of its own and loads the first
/// process's filter before it), variables, directory and terminal.
pub fn process(
    base: &Value,
    shim: &Shim,
    argv: &[String],
    env: &[(String, String)],
    cwd: Option<&str>,
    terminal: bool,
) -> Value {
    let mut p = base.clone();
    let mut merged: Vec<String> = base["env"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .filter(|kv| {
                    let key = kv.split('=').next().unwrap_or("");
                    !env.iter().any(|(k, _)| k == key)
                })
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    merged.extend(env.iter().map(|(k, v)| format!("{k}={v}")));
    // What the loader of a dynamically linked shim would act on before the
    // shim's filter is loaded goes past it, for the command alone.
    let (carried, merged): (Vec<String>, Vec<String>) = merged.into_iter().partition(|kv| {
        shim.loaded() && super::shim::loader_variable(kv.split('=').next().unwrap_or(""))
    });
    p["args"] = json!(shim.args(argv, &carried));
    // For the shim alone, to make the command's PID namespace: it gives
    // both up, from every set, before its filter and the command (see
    // `hold`); the first process keeps none.
    let given = super::hold::GIVEN;
    p["capabilities"] = json!({"bounding": given, "effective": given, "permitted": given,
                               "inheritable": [], "ambient": []});
    p["env"] = json!(merged);
    p["terminal"] = json!(terminal);
    if let Some(c) = cwd {
        p["cwd"] = json!(c);
    }
    p
}

fn bind(src: &Path, dst: &str, writable: bool) -> Value {
    json!({"destination": dst, "type": "bind", "source": src,
           "options": ["rbind", if writable { "rw" } else { "ro" }, "nosuid", "nodev"]})
}

fn write_err(path: &Path) -> impl FnOnce(std::io::Error) -> BundleError {
    let path = path.to_path_buf();
    move |source| BundleError::Write { path, source }
}

fn mkdirs(p: &Path) -> Result<(), BundleError> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(p)
        .map_err(write_err(p))
}

/// Write `bytes` to a new file only its owner reads (and runsc, as root).
pub fn write_file(path: &Path, bytes: &[u8]) -> Result<(), BundleError> {
    use std::io::Write;
    let _ = std::fs::remove_file(path);
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(path)
        .and_then(|mut f| f.write_all(bytes))
        .map_err(write_err(path))
}
