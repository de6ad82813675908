//! An OCI bundle's `config.json` turned into warden's request: what the
//! OCI runtime front door (`warden-oci`) hands to the same resolution as
//! every other door. Pure: the caller reads the file; nothing here looks
//! at the host.
//!
//! What warden can honour is translated; what it would have to fake is
//! refused with the JSON path of the field and what to do instead; what
//! warden does its own, stricter way (capabilities, the kernel file
//! systems containerd asks for, namespaces it always creates) is accepted
//! and said in [`Translated::notices`].

use crate::compose::{Layer, Origin, Val};
use crate::trust::{self, Trust};
use crate::Field;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

/// Annotation naming the profile the container runs under.
pub const ANNOTATION_PROFILE: &str = "warden.dev/profile";
/// Annotation: names the container may reach, comma-separated.
pub const ANNOTATION_EGRESS: &str = "warden.dev/egress";
/// Annotation: `NAME=IP` pins, comma-separated (`--add-host`).
pub const ANNOTATION_HOSTS: &str = "warden.dev/hosts";
/// Annotation: `true` lets plain HTTP through to allowed names (`--allow-http`).
pub const ANNOTATION_ALLOW_HTTP: &str = "warden.dev/allow-http";
/// Annotation prefix: `warden.dev/secret.NAME` holds secret NAME
/// (`[file:PATH@|env:VARIABLE@]HOST[,HOST...]`).
pub const ANNOTATION_SECRET: &str = "warden.dev/secret.";
/// The prefix a host variable must have to be named by a secret
/// annotation: a pod's author chooses what is read, so only variables the
/// node's operator set aside for it can be.
pub const SECRET_VARIABLE_PREFIX: &str = "WARDEN_SECRET_";
/// Every `warden.dev/` annotation warden reads; any other is refused.
pub const ANNOTATIONS: &[(&str, &str)] = &[
    (
        ANNOTATION_PROFILE,
        "the profile the container runs under: the plain name of a profile of the node's catalogue (never a path: a pod's author names only what the node's owner offers)",
    ),
    (
        ANNOTATION_EGRESS,
        "names the container may reach, comma-separated (e.g. `api.example.com,*.pypi.org`)",
    ),
    (
        ANNOTATION_HOSTS,
        "refused: a pin reaches the node's own addresses, so only the node's owner sets it, in a profile of the node's catalogue (`egress.hosts`) named with warden.dev/profile",
    ),
    (
        ANNOTATION_ALLOW_HTTP,
        "true: plain HTTP (not only TLS) to the allowed names",
    ),
    (
        "warden.dev/secret.NAME",
        "secret NAME: [file:PATH@|env:WARDEN_SECRET_X@]HOST[,HOST...]; the container's NAME holds a placeholder the egress proxy swaps for the value (read on the node, from a file in the secrets directory or a WARDEN_SECRET_ variable) only towards the hosts",
    ),
];

/// Why a `config.json` cannot be run. Each names the field by its JSON path.
#[derive(Debug, thiserror::Error)]
pub enum OciError {
    #[error("config.json is not a valid OCI runtime configuration")]
    Parse(#[source] serde_json::Error),
    #[error("config.json: {field} is missing: {what}")]
    Missing { field: String, what: &'static str },
    #[error("config.json: {field} = {value}: {why}")]
    Invalid {
        field: String,
        value: String,
        why: String,
    },
    #[error("config.json: {field} = {value} cannot be honoured by warden: {why}")]
    Unsupported {
        field: String,
        value: String,
        why: String,
    },
}

impl OciError {
    /// The JSON path of the field the error is about.
    pub fn field(&self) -> Option<&str> {
        match self {
            OciError::Parse(_) => None,
            OciError::Missing { field, .. }
            | OciError::Invalid { field, .. }
            | OciError::Unsupported { field, .. } => Some(field),
        }
    }
}

/// The subset of the OCI runtime specification warden reads. Unknown
/// fields are ignored, as the specification asks of runtimes.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Config {
    #[serde(default)]
    pub oci_version: String,
    pub process: Option<Process>,
    pub root: Option<Root>,
    #[serde(default)]
    pub hostname: Option<String>,
    #[serde(default)]
    pub mounts: Vec<Mount>,
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
    #[serde(default)]
    pub linux: Option<Linux>,
    #[serde(default)]
    pub hooks: Option<Hooks>,
}

/// `hooks`: programs the runtime runs at points of the lifecycle (the
/// runtime specification's POSIX-platform hooks).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Hooks {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub prestart: Vec<Hook>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub create_runtime: Vec<Hook>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub create_container: Vec<Hook>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub start_container: Vec<Hook>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub poststart: Vec<Hook>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub poststop: Vec<Hook>,
}

/// One hook.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
pub struct Hook {
    pub path: String,
    /// argv, `args[0]` included; `[path]` when empty.
    #[serde(default)]
    pub args: Vec<String>,
    /// Its whole environment (`NAME=VALUE`).
    #[serde(default)]
    pub env: Vec<String>,
    /// Seconds; more than zero when given.
    #[serde(default)]
    pub timeout: Option<i64>,
}

impl Hooks {
    /// Each kind with its JSON name, in the order they run.
    pub fn kinds(&self) -> [(&'static str, &[Hook]); 6] {
        [
            ("prestart", &self.prestart),
            ("createRuntime", &self.create_runtime),
            ("createContainer", &self.create_container),
            ("startContainer", &self.start_container),
            ("poststart", &self.poststart),
            ("poststop", &self.poststop),
        ]
    }

    fn check(&self) -> Result<(), OciError> {
        for (kind, hooks) in self.kinds() {
            for (i, h) in hooks.iter().enumerate() {
                let at = format!("hooks.{kind}[{i}]");
                if !h.path.starts_with('/') {
                    return Err(invalid(
                        &format!("{at}.path"),
                        &h.path,
                        "must be an absolute path",
                    ));
                }
                if let Some(t) = h.timeout {
                    if t <= 0 {
                        return Err(invalid(
                            &format!("{at}.timeout"),
                            &t.to_string(),
                            "must be more than zero seconds",
                        ));
                    }
                }
                for (j, e) in h.env.iter().enumerate() {
                    if e.split_once('=').is_none_or(|(k, _)| k.is_empty()) {
                        return Err(invalid(&format!("{at}.env[{j}]"), e, "must be NAME=VALUE"));
                    }
                }
            }
        }
        Ok(())
    }
}

/// `process`: also the shape of `exec --process FILE`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Process {
    #[serde(default)]
    pub terminal: bool,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub env: Vec<String>,
    #[serde(default)]
    pub cwd: String,
    #[serde(default)]
    pub user: Option<User>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct User {
    #[serde(default)]
    pub uid: u32,
    #[serde(default)]
    pub gid: u32,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct Root {
    pub path: String,
    #[serde(default)]
    pub readonly: bool,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct Mount {
    pub destination: String,
    #[serde(default, rename = "type")]
    pub kind: Option<String>,
    #[serde(default)]
    pub source: Option<String>,
    #[serde(default)]
    pub options: Vec<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Linux {
    #[serde(default)]
    pub namespaces: Vec<Namespace>,
    #[serde(default)]
    pub resources: Option<Resources>,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct Namespace {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub path: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct Resources {
    #[serde(default)]
    pub memory: Option<Memory>,
    #[serde(default)]
    pub pids: Option<Pids>,
    #[serde(default)]
    pub cpu: Option<Cpu>,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct Memory {
    #[serde(default)]
    pub limit: Option<i64>,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct Pids {
    #[serde(default)]
    pub limit: Option<i64>,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct Cpu {
    #[serde(default)]
    pub quota: Option<i64>,
    #[serde(default)]
    pub period: Option<u64>,
}

/// The process a container runs: its first, or one `exec` adds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessRequest {
    pub args: Vec<String>,
    /// `NAME=VALUE` entries of `process.env`, as pairs.
    pub env: Vec<(String, String)>,
    /// `None`: the sandbox's own working directory.
    pub cwd: Option<String>,
    pub terminal: bool,
}

/// A `config.json`, translated.
#[derive(Debug, Clone)]
pub struct Translated {
    /// Values for the resolution every door shares (rootfs, binds,
    /// limits, hostname, egress), by field; an annotation's values are
    /// the pod author's.
    pub flags: Layer,
    /// `warden.dev/profile`.
    pub profile: Option<String>,
    pub process: ProcessRequest,
    /// The network namespace path containerd gave the container (a pod's,
    /// made by CNI, or another container's): the runtime joins it only
    /// when it is another warden container's (see `docs/oci.md`).
    pub network_namespace: Option<String>,
    /// `warden.dev/secret.*`, in name order.
    pub secrets: Vec<AnnotatedSecret>,
    /// `hooks`, checked.
    pub hooks: Hooks,
    pub annotations: BTreeMap<String, String>,
    /// What warden does its own way, said once.
    pub notices: Vec<String>,
}

/// A secret an annotation asks for (`warden.dev/secret.NAME`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AnnotatedSecret {
    /// The variable that holds the placeholder in the container.
    pub name: String,
    /// `Env` is a variable of the runtime's host with the prefix
    /// [`SECRET_VARIABLE_PREFIX`]; `File` is relative to the runtime's
    /// secrets directory, or absolute (the runtime checks that it lies in
    /// that directory). Never `Command`: a pod's author must not choose a
    /// program for the node to run.
    pub source: crate::SecretSource,
    /// The hosts as written, each a valid `--secret` host.
    pub hosts: Vec<String>,
}

impl AnnotatedSecret {
    /// The `--secret` entry, with the file source `file` (resolved by the
    /// runtime) in place of a file source's own.
    pub fn entry(&self, file: Option<&Path>) -> String {
        let source = match (&self.source, file) {
            (crate::SecretSource::Env(v), _) => format!("env:{v}"),
            (_, Some(f)) => format!("file:{}", f.display()),
            (crate::SecretSource::File(f), None) => format!("file:{}", f.display()),
            (crate::SecretSource::Command(_), None) => String::new(),
        };
        format!("{}={source}@{}", self.name, self.hosts.join(","))
    }
}

/// Parse `warden.dev/secret.NAME = [file:PATH@|env:VARIABLE@]HOSTS`;
/// without a source, the file NAME of the secrets directory.
fn annotated_secret(name: &str, value: &str, field: &str) -> Result<AnnotatedSecret, OciError> {
    if !crate::env::valid_name(name) {
        return Err(invalid(
            field,
            value,
            &format!("{name:?} is not a variable name (letters, digits and '_'): the annotation is warden.dev/secret.VARIABLE"),
        ));
    }
    let (source, hosts) = match value.trim().rsplit_once('@') {
        None => (crate::SecretSource::File(PathBuf::from(name)), value.trim()),
        Some((src, hosts)) => {
            let source = if let Some(v) = src.strip_prefix("env:") {
                if !crate::env::valid_name(v) || !v.starts_with(SECRET_VARIABLE_PREFIX) {
                    return Err(invalid(
                        field,
                        value,
                        &format!("env:{v}: a secret annotation reads only variables of the node named {SECRET_VARIABLE_PREFIX}*, which its operator sets aside for containers"),
                    ));
                }
                crate::SecretSource::Env(v.to_string())
            } else if let Some(f) = src.strip_prefix("file:") {
                let path = PathBuf::from(f);
                if f.is_empty()
                    || path
                        .components()
                        .any(|c| matches!(c, Component::ParentDir | Component::CurDir))
                {
                    return Err(invalid(
                        field,
                        value,
                        "file:PATH names a file of the node's secrets directory, without `..` or `.`",
                    ));
                }
                crate::SecretSource::File(path)
            } else {
                return Err(invalid(
                    field,
                    value,
                    "the source is file:PATH (in the node's secrets directory) or env:WARDEN_SECRET_VARIABLE; programs (cmd:) cannot be named by a container",
                ));
            };
            (source, hosts)
        }
    };
    let hosts = list(hosts);
    if hosts.is_empty() {
        return Err(invalid(
            field,
            value,
            "it names no host: the hosts the value may be sent to, e.g. api.github.com",
        ));
    }
    for h in &hosts {
        crate::DomainRule::parse(h).map_err(|e| invalid(field, value, &format!("host {e}")))?;
    }
    Ok(AnnotatedSecret {
        name: name.to_string(),
        source,
        hosts,
    })
}

/// Kernel file systems containerd's default spec mounts, which warden's
/// own root assembly provides (fresh `/proc`, minimal `/dev` with its own
/// devpts, size-capped `/dev/shm`) or leaves out on purpose (`/sys`,
/// cgroupfs: host kernel state a sandbox does not need).
const PROVIDED: &[(&str, &str)] = &[
    ("/proc", "proc"),
    ("/dev", "tmpfs"),
    ("/dev/pts", "devpts"),
    ("/dev/shm", "tmpfs"),
    ("/dev/shm", "shm"),
    ("/dev/mqueue", "mqueue"),
    ("/sys", "sysfs"),
    ("/sys/fs/cgroup", "cgroup"),
    ("/sys/fs/cgroup", "cgroup2"),
    ("/run", "tmpfs"),
];

/// Namespace types warden always creates for a sandbox.
const OWN_NAMESPACES: &[&str] = &["pid", "network", "mount", "ipc", "uts", "user", "cgroup"];

/// Parse a `config.json`.
pub fn parse(text: &str) -> Result<Config, OciError> {
    serde_json::from_str(text).map_err(OciError::Parse)
}

/// Parse a process file (`exec --process FILE`).
pub fn parse_process(text: &str) -> Result<Process, OciError> {
    serde_json::from_str(text).map_err(OciError::Parse)
}

/// Translate a parsed `config.json` of the bundle at `bundle` (absolute).
pub fn translate(config: &Config, bundle: &Path) -> Result<Translated, OciError> {
    let mut notices = Vec::new();
    let mut o = Layer::default();
    let given = || Origin::CommandLine;
    let process = config.process.as_ref().ok_or(OciError::Missing {
        field: "process".into(),
        what: "the container's first process (args, env, cwd)",
    })?;
    let process = process_request(process, "process")?;
    o.add_one(Field::Command, Val::Argv(process.args.clone()), given());

    let root = config.root.as_ref().ok_or(OciError::Missing {
        field: "root.path".into(),
        what: "the container's root file system",
    })?;
    if root.path.is_empty() {
        return Err(OciError::Missing {
            field: "root.path".into(),
            what: "the container's root file system",
        });
    }
    let rootfs = bundle.join(&root.path);
    if rootfs.components().any(|c| c == Component::ParentDir) {
        return Err(invalid("root.path", &root.path, "must not contain `..`"));
    }
    o.add_one(Field::Rootfs, Val::Path(rootfs), given());
    if !root.readonly {
        notices.push("root.readonly is false, but warden mounts a container's root read-only: it writes to /tmp, /dev/shm and /workspace".into());
    }

    if let Some(h) = &config.hostname {
        if !h.is_empty() {
            o.add_one(Field::Hostname, Val::Text(h.clone()), given());
        }
    }
    mounts(&config.mounts, &mut o, &mut notices)?;
    let network_namespace = match &config.linux {
        Some(linux) => {
            let ns = namespaces(&linux.namespaces)?;
            if let Some(r) = &linux.resources {
                resources(r, &mut o)?;
            }
            ns
        }
        None => None,
    };
    let hooks = config.hooks.clone().unwrap_or_default();
    hooks.check()?;

    let mut profile = None;
    let mut secrets = Vec::new();
    for (key, value) in &config.annotations {
        let Some(_) = key.strip_prefix("warden.dev/") else {
            continue;
        };
        let field = format!("annotations[\"{key}\"]");
        // The pod's author writes annotations: they are held to the trust
        // rule as every caller who is not the owner is (names of the
        // node's catalogue only, nothing that reaches the node).
        if let Some(f) = annotation_field(key) {
            if let Err(refusal) = trust::may_set(f, Trust::Caller) {
                return Err(invalid(
                    &field,
                    value,
                    &format!("{refusal}: set it in a profile of the node's catalogue and name that profile with {ANNOTATION_PROFILE}"),
                ));
            }
        }
        match key.as_str() {
            ANNOTATION_PROFILE => {
                let name = value.trim();
                if name.is_empty() {
                    return Err(invalid(&field, value, "name a profile"));
                }
                if let Err(refusal) = trust::may_name_profile(name, Trust::Caller) {
                    return Err(invalid(
                        &field,
                        value,
                        &format!("{refusal} (`warden profile list` on the node)"),
                    ));
                }
                profile = Some(name.to_string());
            }
            ANNOTATION_EGRESS => {
                for d in list(value) {
                    let at = Origin::Annotation { key: key.clone() };
                    o.add_text(Field::AllowDomain, &d, at, Trust::Caller)
                        .map_err(|e| invalid(&field, value, &e.message))?;
                }
            }
            ANNOTATION_ALLOW_HTTP => {
                let at = Origin::Annotation { key: key.clone() };
                o.add_text(Field::AllowHttp, value.trim(), at, Trust::Caller)
                    .map_err(|_| invalid(&field, value, "must be true or false"))?;
            }
            k if k.starts_with(ANNOTATION_SECRET) => {
                secrets.push(annotated_secret(
                    &k[ANNOTATION_SECRET.len()..],
                    value,
                    &field,
                )?);
            }
            _ => {
                let known: Vec<&str> = ANNOTATIONS.iter().map(|(k, _)| *k).collect();
                return Err(invalid(
                    &field,
                    value,
                    &format!(
                        "not an annotation warden knows; it reads {}",
                        known.join(", ")
                    ),
                ));
            }
        }
    }
    Ok(Translated {
        flags: o,
        profile,
        process,
        network_namespace,
        secrets,
        hooks,
        annotations: config.annotations.clone(),
        notices,
    })
}

/// A process (`process`, or an exec's process file) as warden starts it.
pub fn process_request(p: &Process, at: &str) -> Result<ProcessRequest, OciError> {
    if p.args.is_empty() || p.args[0].is_empty() {
        return Err(OciError::Missing {
            field: format!("{at}.args"),
            what: "the command to run, e.g. [\"sh\"]",
        });
    }
    let mut env = Vec::new();
    for (i, e) in p.env.iter().enumerate() {
        match e.split_once('=') {
            Some((k, v)) if !k.is_empty() => env.push((k.to_string(), v.to_string())),
            _ => return Err(invalid(&format!("{at}.env[{i}]"), e, "must be NAME=VALUE")),
        }
    }
    let cwd = match p.cwd.as_str() {
        "" => None,
        c if c.starts_with('/') => Some(c.to_string()),
        c => return Err(invalid(&format!("{at}.cwd"), c, "must be an absolute path")),
    };
    if let Some(u) = &p.user {
        if u.uid != 0 || u.gid != 0 {
            return Err(OciError::Unsupported {
                field: format!("{at}.user"),
                value: format!("{}:{}", u.uid, u.gid),
                why: "warden runs a container's processes as its user namespace's root (nobody on the host); other IDs are not mapped yet".into(),
            });
        }
    }
    Ok(ProcessRequest {
        args: p.args.clone(),
        env,
        cwd,
        terminal: p.terminal,
    })
}

fn mounts(ms: &[Mount], o: &mut Layer, notices: &mut Vec<String>) -> Result<(), OciError> {
    let mut provided = Vec::new();
    for (i, m) in ms.iter().enumerate() {
        let field = format!("mounts[{i}]");
        let kind = m.kind.as_deref().unwrap_or("");
        let bind = kind == "bind" || m.options.iter().any(|x| x == "bind" || x == "rbind");
        if !bind {
            if PROVIDED.contains(&(m.destination.as_str(), kind)) {
                provided.push(m.destination.clone());
                continue;
            }
            return Err(OciError::Unsupported {
                field: format!("{field}.type"),
                value: format!("{kind} at {}", m.destination),
                why: "warden mounts bind mounts and provides /proc, /dev, /dev/pts, /dev/shm itself; other file systems are not mounted".into(),
            });
        }
        let source = m.source.as_deref().unwrap_or("");
        if !source.starts_with('/') {
            return Err(invalid(
                &format!("{field}.source"),
                source,
                "a bind mount's source must be an absolute host path",
            ));
        }
        if source != m.destination {
            // containerd's own resolv.conf, hosts and hostname files: the
            // sandbox has its own (its resolver is warden's).
            if ["/etc/resolv.conf", "/etc/hosts", "/etc/hostname"].contains(&m.destination.as_str())
            {
                provided.push(m.destination.clone());
                continue;
            }
            return Err(OciError::Unsupported {
                field: format!("{field}.destination"),
                value: format!("{} (source {source})", m.destination),
                why: "warden binds a host path at the same path inside; give the same source and destination".into(),
            });
        }
        let path = PathBuf::from(source);
        if m.options.iter().any(|x| x == "rw") && !m.options.iter().any(|x| x == "ro") {
            o.add_item(Field::Rw, Val::Path(path), Origin::CommandLine);
        } else {
            o.add_item(Field::Ro, Val::Path(path), Origin::CommandLine);
        }
    }
    if !provided.is_empty() {
        notices.push(format!(
            "mounts {}: warden provides its own (fresh /proc, a minimal /dev, no /sys)",
            provided.join(", ")
        ));
    }
    Ok(())
}

/// The network namespace path, if one was given; every other path (a
/// namespace shared with the host or another container) is refused.
fn namespaces(ns: &[Namespace]) -> Result<Option<String>, OciError> {
    let mut network = None;
    for (i, n) in ns.iter().enumerate() {
        let field = format!("linux.namespaces[{i}]");
        if !OWN_NAMESPACES.contains(&n.kind.as_str()) {
            return Err(invalid(
                &format!("{field}.type"),
                &n.kind,
                "not a namespace type",
            ));
        }
        match (&n.path, n.kind.as_str()) {
            (None, _) => {}
            (Some(p), _) if p.is_empty() => {}
            (Some(p), "network") => network = Some(p.clone()),
            (Some(p), kind) => {
                return Err(OciError::Unsupported {
                    field: format!("{field}.path"),
                    value: p.clone(),
                    why: format!("warden gives every container a {kind} namespace of its own; joining an existing one would share it with the host or another container"),
                })
            }
        }
    }
    Ok(network)
}

fn resources(r: &Resources, o: &mut Layer) -> Result<(), OciError> {
    if let Some(limit) = r.memory.as_ref().and_then(|m| m.limit) {
        if limit > 0 {
            let bytes = limit as u64;
            let text = crate::units::format_size(bytes);
            o.add_one(
                Field::Memory,
                Val::Size { bytes, text },
                Origin::CommandLine,
            );
        }
    }
    if let Some(limit) = r.pids.as_ref().and_then(|p| p.limit) {
        if limit > 0 {
            o.add_one(Field::Pids, Val::Count(limit as u64), Origin::CommandLine);
        }
    }
    if let Some(cpu) = &r.cpu {
        if let (Some(quota), Some(period)) = (cpu.quota, cpu.period) {
            if quota > 0 {
                if period == 0 {
                    return Err(invalid(
                        "linux.resources.cpu.period",
                        "0",
                        "must be more than zero",
                    ));
                }
                let cores = quota as f64 / period as f64;
                o.add_one(Field::Cpus, Val::Cores(cores), Origin::CommandLine);
            }
        }
    }
    Ok(())
}

fn list(value: &str) -> Vec<String> {
    value
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

/// The field an annotation sets, for the trust rule. Secrets are the one
/// grant of the node's owner to pods: only sources the operator set aside
/// for containers (the secrets directory, `WARDEN_SECRET_` variables) can
/// be named, checked where they are parsed.
fn annotation_field(key: &str) -> Option<Field> {
    match key {
        ANNOTATION_PROFILE => Some(Field::Profile),
        ANNOTATION_EGRESS => Some(Field::AllowDomain),
        ANNOTATION_HOSTS => Some(Field::AddHost),
        ANNOTATION_ALLOW_HTTP => Some(Field::AllowHttp),
        _ => None,
    }
}

fn invalid(field: &str, value: &str, why: &str) -> OciError {
    OciError::Invalid {
        field: field.to_string(),
        value: value.to_string(),
        why: why.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(extra: serde_json::Value) -> Config {
        let mut base = serde_json::json!({
            "ociVersion": "1.0.2",
            "process": {"args": ["sh", "-c", "echo hi"], "env": ["PATH=/bin"], "cwd": "/"},
            "root": {"path": "rootfs"},
            "linux": {"namespaces": [{"type": "pid"}, {"type": "network"}, {"type": "mount"}]}
        });
        if let (Some(b), Some(e)) = (base.as_object_mut(), extra.as_object()) {
            for (k, v) in e {
                b.insert(k.clone(), v.clone());
            }
        }
        serde_json::from_value(base).unwrap()
    }

    #[test]
    fn a_plain_bundle_becomes_rootfs_command_and_process() {
        let t = translate(
            &config(serde_json::json!({"hostname": "box"})),
            Path::new("/b"),
        )
        .unwrap();
        let r = t.flags.request(false);
        assert_eq!(r.rootfs.as_deref(), Some(Path::new("/b/rootfs")));
        assert_eq!(r.hostname.as_deref(), Some("box"));
        assert_eq!(t.process.args, ["sh", "-c", "echo hi"]);
        assert_eq!(t.process.env, [("PATH".to_string(), "/bin".to_string())]);
    }

    #[test]
    fn limits_come_from_linux_resources() {
        let c = config(serde_json::json!({"linux": {"resources": {
            "memory": {"limit": 268435456}, "pids": {"limit": 64},
            "cpu": {"quota": 50000, "period": 100000}}}}));
        let t = translate(&c, Path::new("/b")).unwrap();
        let r = t.flags.request(false);
        assert_eq!(r.memory, Some(256 << 20));
        assert_eq!(r.pids, Some(64));
        assert_eq!(r.cpus, Some(0.5));
    }

    #[test]
    fn sharing_the_hosts_pid_namespace_is_refused_by_its_field() {
        let c = config(
            serde_json::json!({"linux": {"namespaces": [{"type": "pid", "path": "/proc/1/ns/pid"}]}}),
        );
        let e = translate(&c, Path::new("/b")).unwrap_err();
        assert_eq!(e.field(), Some("linux.namespaces[0].path"));
    }

    #[test]
    fn a_network_namespace_path_is_named_not_joined() {
        let c = config(
            serde_json::json!({"linux": {"namespaces": [{"type": "network", "path": "/var/run/netns/cni-1"}]}}),
        );
        let t = translate(&c, Path::new("/b")).unwrap();
        assert_eq!(t.network_namespace.as_deref(), Some("/var/run/netns/cni-1"));
    }

    #[test]
    fn annotations_pick_the_allowlist_and_unknown_ones_are_refused() {
        let c = config(serde_json::json!({"annotations": {
            "warden.dev/egress": "a.test, b.test", "warden.dev/profile": "feature-dev",
            "io.kubernetes.cri.container-type": "container"}}));
        let t = translate(&c, Path::new("/b")).unwrap();
        assert_eq!(t.flags.request(false).caller_domains, ["a.test", "b.test"]);
        assert_eq!(t.profile.as_deref(), Some("feature-dev"));
        let c = config(serde_json::json!({"annotations": {"warden.dev/egres": "a.test"}}));
        let e = translate(&c, Path::new("/b")).unwrap_err();
        assert_eq!(e.field(), Some("annotations[\"warden.dev/egres\"]"));
    }

    #[test]
    fn a_pods_author_names_no_file_and_pins_no_name_to_the_nodes_addresses() {
        for (key, value) in [
            ("warden.dev/profile", "/etc/warden/evil.yaml"),
            ("warden.dev/profile", "evil.yaml"),
            ("warden.dev/profile", "rootfs/evil"),
            ("warden.dev/profile", "../profiles/x"),
            ("warden.dev/profile", ".."),
            ("warden.dev/profile", "~/x"),
            ("warden.dev/hosts", "api.test=127.0.0.1"),
            ("warden.dev/hosts", "api.test=10.0.0.1"),
        ] {
            let c = config(serde_json::json!({"annotations": {key: value}}));
            let e = translate(&c, Path::new("/b")).unwrap_err();
            assert_eq!(
                e.field(),
                Some(format!("annotations[\"{key}\"]").as_str()),
                "{key}={value}"
            );
            let msg = e.to_string();
            assert!(
                msg.contains("only the owner") || msg.contains("owner sets it"),
                "{key}={value}: {msg}"
            );
        }
    }

    #[test]
    fn secret_annotations_name_a_file_or_a_set_aside_variable_and_never_a_program() {
        let c = config(serde_json::json!({"annotations": {
            "warden.dev/secret.GH_TOKEN": "api.github.com,.githubusercontent.com",
            "warden.dev/secret.NPM": "file:npm/token@registry.npmjs.org",
            "warden.dev/secret.KEY": "env:WARDEN_SECRET_KEY@api.test:8443"}}));
        let t = translate(&c, Path::new("/b")).unwrap();
        let by = |n: &str| t.secrets.iter().find(|s| s.name == n).unwrap().clone();
        assert_eq!(
            by("GH_TOKEN").source,
            crate::SecretSource::File("GH_TOKEN".into())
        );
        assert_eq!(by("GH_TOKEN").hosts.len(), 2);
        assert_eq!(
            by("NPM").entry(Some(Path::new("/etc/warden/secrets/npm/token"))),
            "NPM=file:/etc/warden/secrets/npm/token@registry.npmjs.org"
        );
        let key = by("KEY").entry(None);
        assert_eq!(key, "KEY=env:WARDEN_SECRET_KEY@api.test:8443");
        crate::SecretSpec::parse(&key).unwrap();
        for (k, v) in [
            ("warden.dev/secret.T", "cmd:cat /etc/shadow@evil.test"),
            ("warden.dev/secret.T", "env:HOME@evil.test"),
            ("warden.dev/secret.T", "file:../../etc/shadow@evil.test"),
            ("warden.dev/secret.T", "file:@evil.test"),
            ("warden.dev/secret.T", "env:WARDEN_SECRET_T@"),
            ("warden.dev/secret.T", "https://evil.test/x"),
            ("warden.dev/secret.1-T", "evil.test"),
        ] {
            let c = config(serde_json::json!({"annotations": {k: v}}));
            let e = translate(&c, Path::new("/b")).unwrap_err();
            assert_eq!(
                e.field(),
                Some(format!("annotations[\"{k}\"]").as_str()),
                "{v}"
            );
        }
    }

    #[test]
    fn bind_mounts_at_their_own_path_are_honoured_and_others_refused() {
        let c = config(serde_json::json!({"mounts": [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {"destination": "/usr", "type": "bind", "source": "/usr", "options": ["rbind", "ro"]},
            {"destination": "/data", "type": "bind", "source": "/srv/data", "options": ["rbind", "rw"]}]}));
        let e = translate(&c, Path::new("/b")).unwrap_err();
        assert_eq!(e.field(), Some("mounts[2].destination"));
        let c = config(serde_json::json!({"mounts": [
            {"destination": "/usr", "type": "bind", "source": "/usr", "options": ["rbind", "ro"]}]}));
        assert_eq!(
            translate(&c, Path::new("/b"))
                .unwrap()
                .flags
                .request(false)
                .ro,
            [PathBuf::from("/usr")]
        );
    }

    #[test]
    fn hooks_are_kept_and_bad_ones_name_their_field() {
        let c = config(serde_json::json!({"hooks": {
            "createRuntime": [{"path": "/bin/true", "args": ["true"], "timeout": 5}],
            "poststop": [{"path": "/bin/true"}]}}));
        let t = translate(&c, Path::new("/b")).unwrap();
        assert_eq!(t.hooks.create_runtime[0].timeout, Some(5));
        assert_eq!(t.hooks.poststop.len(), 1);
        for (hooks, field) in [
            (
                serde_json::json!({"prestart": [{"path": "true"}]}),
                "hooks.prestart[0].path",
            ),
            (
                serde_json::json!({"startContainer": [{"path": "/x", "timeout": 0}]}),
                "hooks.startContainer[0].timeout",
            ),
            (
                serde_json::json!({"poststart": [{"path": "/x", "env": ["NOEQUALS"]}]}),
                "hooks.poststart[0].env[0]",
            ),
        ] {
            let c = config(serde_json::json!({ "hooks": hooks }));
            assert_eq!(
                translate(&c, Path::new("/b")).unwrap_err().field(),
                Some(field)
            );
        }
    }

    #[test]
    fn missing_args_and_relative_cwd_name_their_field() {
        let c = config(serde_json::json!({"process": {"args": [], "cwd": "/"}}));
        assert_eq!(
            translate(&c, Path::new("/b")).unwrap_err().field(),
            Some("process.args")
        );
        let c = config(serde_json::json!({"process": {"args": ["sh"], "cwd": "tmp"}}));
        assert_eq!(
            translate(&c, Path::new("/b")).unwrap_err().field(),
            Some("process.cwd")
        );
    }
}
