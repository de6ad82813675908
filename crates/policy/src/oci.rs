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

mod pod;

pub use pod::{dotted, within_host_defaults, WRITERS};

use crate::compose::{Layer, Origin, Val};
use crate::fields::{Reach, Shape};
use crate::trust::{self, Trust};
use crate::Field;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

/// The prefix of warden's annotations: containerd hands a runtime the
/// pod's and the container's `warden.dev/*` annotations
/// (`deploy/kubernetes/containerd-config.toml`), and any other
/// `warden.dev/` annotation than those below is refused.
pub const ANNOTATION_PREFIX: &str = "warden.dev/";
/// Annotation naming the profile the container runs under: the field
/// table's annotation of [`Field::Profile`].
pub const ANNOTATION_PROFILE: &str = match Field::Profile.annotation() {
    Some(a) => a,
    None => panic!("the field table gives the profile no annotation"),
};
/// Annotation prefix: `warden.dev/secret.NAME` holds secret NAME
/// (`[file:PATH@|env:VARIABLE@]HOST[,HOST...]`).
pub const ANNOTATION_SECRET: &str = "warden.dev/secret.";
/// The prefix a host variable must have to be named by a secret
/// annotation: a pod's author chooses what is read, so only variables the
/// node's operator set aside for it can be.
pub const SECRET_VARIABLE_PREFIX: &str = "WARDEN_SECRET_";
/// What a secret annotation holds, said once for the docs and `features`.
const SECRET_DOC: &str = "secret NAME: [file:PATH|env:WARDEN_SECRET_X][@HOST[,HOST...]]; the container's NAME holds a placeholder the egress proxy swaps for the value (read on the node, from a file in the secrets directory or a WARDEN_SECRET_ variable) only towards the hosts, which are among those the node's operator declared for it (in the secrets directory: PATH.hosts for file PATH, WARDEN_SECRET_X.hosts for the variable); without @, all of them";

/// Every annotation warden reads, with what it does: one per row of the
/// field table that has an annotation (a pod's author sets only fields
/// that stay inside the sandbox, and names only entries of the node's
/// catalogue), then the secrets' (`warden.dev/secret.NAME`), the one
/// grant of the node's owner to pods. `warden-oci features` and
/// `docs/oci.md` list exactly these.
pub fn annotations() -> Vec<(&'static str, String)> {
    let mut out: Vec<(&'static str, String)> = crate::fields::FIELDS
        .iter()
        .filter_map(|i| {
            let key = i.annotation?;
            let as_flag = i
                .flag
                .map(|f| format!(" (as {f} takes it)"))
                .unwrap_or_default();
            let from_a_pod = match i.reach {
                Reach::Catalog => {
                    "; from a pod, the plain name of an entry of the node's catalogue, never a path"
                }
                Reach::Sandbox | Reach::Host => "",
            };
            let list = match i.shape {
                Shape::List => ", comma-separated",
                Shape::One | Shape::Map => "",
            };
            Some((key, format!("{}{as_flag}{list}{from_a_pod}", i.doc)))
        })
        .collect();
    out.push(("warden.dev/secret.NAME", SECRET_DOC.to_string()));
    out
}

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
    /// The hosts as written, each a valid `--secret` host: a choice among
    /// those the node's operator declared for the secret; empty, all of
    /// them.
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

/// Parse `warden.dev/secret.NAME = [file:PATH|env:VARIABLE][@HOSTS]`;
/// without a source, the file NAME of the secrets directory. The hosts
/// are only a choice among those the node's operator declared for the
/// secret (checked by the runtime, which reads the declarations); none
/// means all of them.
fn annotated_secret(name: &str, value: &str, field: &str) -> Result<AnnotatedSecret, OciError> {
    if !crate::env::valid_name(name) {
        return Err(invalid(
            field,
            value,
            &format!("{name:?} is not a variable name (letters, digits and '_'): the annotation is warden.dev/secret.VARIABLE"),
        ));
    }
    let value_t = value.trim();
    // A source without `@HOSTS` is sent to the hosts the node's operator
    // declared for it; so is an empty value (the file NAME).
    let split = match value_t.rsplit_once('@') {
        Some((src, hosts)) => Some((src, hosts)),
        None if ["file:", "env:", "cmd:"]
            .iter()
            .any(|p| value_t.starts_with(p)) =>
        {
            Some((value_t, ""))
        }
        None => None,
    };
    let (source, hosts) = match split {
        None => (crate::SecretSource::File(PathBuf::from(name)), value_t),
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
    if hosts.is_empty() && value_t.ends_with('@') {
        return Err(invalid(
            field,
            value,
            "it names no host after `@`: some of the hosts the node's operator declared for the secret, or no `@` for all of them",
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
    let process = config.process.as_ref().ok_or(OciError::Missing {
        field: "process".into(),
        what: "the container's first process (args, env, cwd)",
    })?;
    let process = process_request(process, "process")?;
    pod::add(
        &mut o,
        Field::Command,
        Val::Argv(process.args.clone()),
        "/process/args",
    );

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
    // containerd's snapshot of the image, made on the node: the node's.
    o.add_one(Field::Rootfs, Val::Path(rootfs), Origin::CommandLine);
    if !root.readonly {
        notices.push("root.readonly is false, but warden mounts a container's root read-only: it writes to /tmp, /dev/shm and /workspace".into());
    }

    if let Some(h) = &config.hostname {
        if !h.is_empty() {
            pod::add(&mut o, Field::Hostname, Val::Text(h.clone()), "/hostname");
        }
    }
    pod::mounts(&config.mounts, PROVIDED, &mut notices)?;
    // No `linux` is no namespace asked for: the node's network, as below.
    let network_namespace = match &config.linux {
        Some(linux) => {
            let ns = namespaces(&linux.namespaces, &mut notices)?;
            if let Some(r) = &linux.resources {
                pod::resources(r, &mut o)?;
            }
            ns
        }
        None => namespaces(&[], &mut notices)?,
    };
    let hooks = config.hooks.clone().unwrap_or_default();
    hooks.check()?;

    let mut profile = None;
    let mut secrets = Vec::new();
    for (key, value) in &config.annotations {
        if !key.starts_with(ANNOTATION_PREFIX) {
            continue;
        }
        let at = format!("annotations[\"{key}\"]");
        if let Some(name) = key.strip_prefix(ANNOTATION_SECRET) {
            secrets.push(annotated_secret(name, value, &at)?);
            continue;
        }
        let Some(field) = Field::from_annotation(key) else {
            return Err(unknown_annotation(key, value, &at));
        };
        if let Some(name) = annotation(field, key, value, &at, &mut o)? {
            profile = Some(name);
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

/// The network namespace path, if one was given. An IPC or UTS path (the
/// CRI gives a pod's containers its pause container's) is not joined: the
/// container gets its own, which shares nothing, and a notice says so.
/// Every other path (a namespace shared with the host or another
/// container) is refused. So is a list without a network namespace: the
/// specification's way of asking for the node's network (a pod's
/// `hostNetwork: true`, `ctr run --net-host`), which warden never gives,
/// and under which containerd's port-forward of the pod dials the node's
/// own loopback rather than the container (see `docs/kubernetes.md`).
fn namespaces(ns: &[Namespace], notices: &mut Vec<String>) -> Result<Option<String>, OciError> {
    if !ns.iter().any(|n| n.kind == "network") {
        return Err(OciError::Unsupported {
            field: "linux.namespaces".into(),
            value: "no network namespace (the node's network: a pod's hostNetwork: true, or ctr run with the host's network)".into(),
            why: "warden never runs a container on the node's network, and containerd's port-forward of such a pod would reach the node's own loopback services, not the container; run the pod without hostNetwork".into(),
        });
    }
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
            (Some(p), kind @ ("ipc" | "uts")) => notices.push(format!(
                "{field}.path {p}: warden gives the container a {kind} namespace of its own; the given one is not joined"
            )),
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

fn list(value: &str) -> Vec<String> {
    value
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

/// Read annotation `key` of `field` into `o`, by the field's kind and
/// shape, as the pod author's ([`Trust::Caller`]); the profile it names,
/// for [`Field::Profile`]. The pod's author is held to the trust rule as
/// every caller who is not the owner is (names of the node's catalogue
/// only, nothing that reaches the node): the table gives annotations only
/// to such fields, and the rule is asked again here so that a row written
/// wrongly fails closed.
fn annotation(
    field: Field,
    key: &str,
    value: &str,
    at: &str,
    o: &mut Layer,
) -> Result<Option<String>, OciError> {
    if let Err(refusal) = trust::may_set(field, Trust::Caller) {
        return Err(invalid(
            at,
            value,
            &format!("{refusal}: set it in a profile of the node's catalogue and name that profile with {ANNOTATION_PROFILE}"),
        ));
    }
    let items = match field.shape() {
        Shape::List | Shape::Map => list(value),
        Shape::One => vec![value.trim().to_string()],
    };
    if items.is_empty() || items.iter().any(String::is_empty) {
        return Err(invalid(
            at,
            value,
            &format!("give {}", field.kind().expecting()),
        ));
    }
    if field.reach() == Reach::Catalog {
        for name in &items {
            if let Err(refusal) = trust::may_name_profile(name, Trust::Caller) {
                return Err(invalid(
                    at,
                    value,
                    &format!("{refusal} (`warden profile list` on the node)"),
                ));
            }
        }
        if field == Field::Profile {
            return Ok(items.into_iter().next());
        }
    }
    for item in &items {
        let origin = Origin::Annotation {
            key: key.to_string(),
        };
        o.add_text(field, item, origin, Trust::Caller)
            .map_err(|e| invalid(at, value, &e.message))?;
    }
    Ok(None)
}

/// Why a `warden.dev/` annotation the table does not have is refused:
/// when it looks like a field a pod's author may not set (by its profile
/// key, its flag, or the last word of its key: `warden.dev/hosts`), the
/// trust rule's reason; else what warden reads.
fn unknown_annotation(key: &str, value: &str, at: &str) -> OciError {
    let name = key.strip_prefix(ANNOTATION_PREFIX).unwrap_or(key);
    let meant = crate::fields::FIELDS.iter().find(|i| {
        i.profile_key
            .is_some_and(|k| k == name || k.rsplit_once('.').is_some_and(|(_, last)| last == name))
            || i.field.long() == Some(name)
    });
    if let Some(i) = meant {
        if let Err(refusal) = trust::may_set(i.field, Trust::Caller) {
            let key = i.field.profile_name();
            return invalid(
                at,
                value,
                &format!("`{key}` {refusal}: set it in a profile of the node's catalogue and name that profile with {ANNOTATION_PROFILE}"),
            );
        }
    }
    let known: Vec<&str> = annotations().iter().map(|(k, _)| *k).collect();
    invalid(
        at,
        value,
        &format!(
            "not an annotation warden knows; it reads {}",
            known.join(", ")
        ),
    )
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

    pub(super) fn config(extra: serde_json::Value) -> Config {
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

    /// The one value `t` gives `field`.
    fn one(t: &Translated, field: Field) -> Option<Val> {
        t.flags.get(field).map(|s| s.val.clone())
    }

    #[test]
    fn a_plain_bundle_becomes_rootfs_command_and_process() {
        let t = translate(
            &config(serde_json::json!({"hostname": "box"})),
            Path::new("/b"),
        )
        .unwrap();
        assert_eq!(one(&t, Field::Rootfs), Some(Val::Path("/b/rootfs".into())));
        assert_eq!(one(&t, Field::Hostname), Some(Val::Text("box".into())));
        assert_eq!(t.process.args, ["sh", "-c", "echo hi"]);
        assert_eq!(t.process.env, [("PATH".to_string(), "/bin".to_string())]);
    }

    #[test]
    fn limits_come_from_linux_resources() {
        let c = config(
            serde_json::json!({"linux": {"namespaces": [{"type": "network"}], "resources": {
            "memory": {"limit": 268435456}, "pids": {"limit": 64},
            "cpu": {"quota": 50000, "period": 100000}}}}),
        );
        let t = translate(&c, Path::new("/b")).unwrap();
        assert!(
            matches!(one(&t, Field::Memory), Some(Val::Size { bytes, .. }) if bytes == 256 << 20)
        );
        assert_eq!(one(&t, Field::Pids), Some(Val::Count(64)));
        assert_eq!(one(&t, Field::Cpus), Some(Val::Cores(0.5)));
    }

    #[test]
    fn sharing_the_hosts_pid_namespace_is_refused_by_its_field() {
        let c = config(
            serde_json::json!({"linux": {"namespaces": [{"type": "pid", "path": "/proc/1/ns/pid"}, {"type": "network"}]}}),
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
    fn a_bundle_asking_for_the_nodes_network_is_refused_naming_host_network() {
        // A pod's hostNetwork: true reaches the runtime as a namespace
        // list without `network`; no `linux` at all asks the same.
        let c = config(
            serde_json::json!({"linux": {"namespaces": [{"type": "pid"}, {"type": "mount"}]}}),
        );
        let mut bare = config(serde_json::json!({}));
        bare.linux = None;
        for c in [c, bare] {
            let e = translate(&c, Path::new("/b")).unwrap_err();
            assert_eq!(e.field(), Some("linux.namespaces"));
            assert!(e.to_string().contains("hostNetwork"), "{e}");
        }
    }

    #[test]
    fn a_pods_ipc_and_uts_paths_and_its_shm_directory_give_the_container_its_own() {
        // What the CRI gives a pod's container: the pause container's IPC
        // and UTS namespaces and the pod's shared-memory directory.
        let c = config(serde_json::json!({
            "linux": {"namespaces": [{"type": "pid"}, {"type": "mount"}, {"type": "network"},
                {"type": "ipc", "path": "/proc/42/ns/ipc"}, {"type": "uts", "path": "/proc/42/ns/uts"}]},
            "mounts": [{"destination": "/dev/shm", "type": "bind",
                "source": "/var/lib/containerd/io.containerd.grpc.v1.cri/sandboxes/x/shm",
                "options": ["rbind", "ro"]}]
        }));
        let t = translate(&c, Path::new("/b")).unwrap();
        assert!(t
            .notices
            .iter()
            .any(|n| n.contains("ipc namespace of its own")));
        assert!(t
            .notices
            .iter()
            .any(|n| n.contains("uts namespace of its own")));
        assert!(t.notices.iter().any(|n| n.contains("/dev/shm")));
        // Still refused: another path bound elsewhere, and joining a PID
        // namespace (above).
        let c = config(serde_json::json!({"mounts": [{"destination": "/dev/other",
            "type": "bind", "source": "/var/lib/x", "options": ["rbind"]}]}));
        let e = translate(&c, Path::new("/b")).unwrap_err();
        assert_eq!(e.field(), Some("mounts[0].destination"));
    }

    #[test]
    fn annotations_pick_the_allowlist_and_unknown_ones_are_refused() {
        let c = config(serde_json::json!({"annotations": {
            "warden.dev/egress": "a.test, b.test", "warden.dev/profile": "feature-dev",
            "io.kubernetes.cri.container-type": "container"}}));
        let t = translate(&c, Path::new("/b")).unwrap();
        let domains: Vec<_> = t.flags.list(Field::AllowDomain).to_vec();
        assert_eq!(
            domains.iter().map(|s| s.val.clone()).collect::<Vec<_>>(),
            [Val::Text("a.test".into()), Val::Text("b.test".into())]
        );
        // The pod author's, said to be its by its annotation.
        for d in &domains {
            assert_eq!(d.trust, Trust::Caller);
            assert_eq!(
                d.origin,
                Origin::Annotation {
                    key: "warden.dev/egress".into()
                }
            );
        }
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

    /// A value of `kind` for the table walk below.
    fn sample(kind: crate::fields::Kind) -> &'static str {
        use crate::fields::Kind;
        match kind {
            Kind::Bool | Kind::Switch => "true",
            Kind::Size => "64M",
            Kind::Duration => "30s",
            Kind::Count | Kind::Port => "5",
            Kind::Cores => "0.5",
            Kind::Mode => "overlay",
            Kind::Text | Kind::Path | Kind::Argv | Kind::Secret => "a.test",
        }
    }

    #[test]
    fn every_annotation_of_the_table_is_read_into_the_layer_as_the_pod_authors() {
        for i in crate::fields::FIELDS {
            let Some(key) = i.annotation else { continue };
            let value = sample(i.kind);
            let c = config(serde_json::json!({"annotations": {key: value}}));
            let t = translate(&c, Path::new("/b")).unwrap_or_else(|e| panic!("{key}: {e}"));
            if i.field == Field::Profile {
                assert_eq!(t.profile.as_deref(), Some(value));
                continue;
            }
            let given: Vec<&crate::compose::Sourced> = match i.shape {
                Shape::One => t.flags.get(i.field).into_iter().collect(),
                Shape::List => t.flags.list(i.field).iter().collect(),
                Shape::Map => t.flags.map(i.field).iter().map(|(_, s)| s).collect(),
            };
            assert_eq!(given.len(), 1, "{key}");
            assert_eq!(given[0].trust, Trust::Caller, "{key}");
            assert_eq!(
                given[0].origin,
                Origin::Annotation { key: key.into() },
                "{key}"
            );
            assert_eq!(
                Some(given[0].val.clone()),
                i.kind.parse(value).ok(),
                "{key}"
            );
        }
    }

    #[test]
    fn a_bad_value_of_an_annotation_names_the_annotation_with_its_kinds_reason() {
        for (key, value, says) in [
            ("warden.dev/timeout", "soon", "duration"),
            ("warden.dev/tmp-size", "huge", "size"),
            ("warden.dev/allow-http", "yes", "true or false"),
            ("warden.dev/egress", " , ", "give"),
        ] {
            let c = config(serde_json::json!({"annotations": {key: value}}));
            let e = translate(&c, Path::new("/b")).unwrap_err();
            assert_eq!(
                e.field(),
                Some(format!("annotations[\"{key}\"]").as_str()),
                "{key}"
            );
            assert!(e.to_string().contains(says), "{key}: {e}");
            assert!(!e.to_string().contains("--"), "a flag in {e}");
        }
    }

    #[test]
    fn an_annotation_for_a_field_that_reaches_the_node_is_refused_by_the_trust_rule() {
        for key in [
            "warden.dev/egress.hosts",
            "warden.dev/add-host",
            "warden.dev/workspace",
            "warden.dev/filesystem.read_write",
            "warden.dev/allow-host-port",
            "warden.dev/pass-env",
            "warden.dev/audit_log",
            "warden.dev/secrets",
        ] {
            let c = config(serde_json::json!({"annotations": {key: "x"}}));
            let e = translate(&c, Path::new("/b")).unwrap_err();
            assert_eq!(
                e.field(),
                Some(format!("annotations[\"{key}\"]").as_str()),
                "{key}"
            );
            assert!(e.to_string().contains("only the owner"), "{key}: {e}");
        }
        // A field that stays in the sandbox but has no annotation: not
        // read, and said so with what is.
        let c = config(serde_json::json!({"annotations": {"warden.dev/memory": "1G"}}));
        let e = translate(&c, Path::new("/b")).unwrap_err().to_string();
        assert!(e.contains("not an annotation warden knows"), "{e}");
        assert!(e.contains("warden.dev/egress"), "{e}");
    }

    /// The backticked `warden.dev/...` keys that start the rows of a
    /// Markdown table in `text`.
    fn listed(text: &str) -> std::collections::BTreeSet<String> {
        text.lines()
            .filter_map(|l| l.strip_prefix("| `"))
            .filter_map(|l| l.split_once('`'))
            .map(|(k, _)| k.to_string())
            .filter(|k| k.starts_with(ANNOTATION_PREFIX))
            .collect()
    }

    #[test]
    fn the_oci_guide_lists_exactly_the_annotations_of_the_table() {
        let guide = include_str!("../../../docs/oci.md");
        let table: std::collections::BTreeSet<String> =
            annotations().iter().map(|(k, _)| k.to_string()).collect();
        assert_eq!(listed(guide), table, "docs/oci.md and the field table");
        // Each row names the option as the command line and a profile do.
        for i in crate::fields::FIELDS {
            let Some(key) = i.annotation else { continue };
            let row = guide
                .lines()
                .find(|l| l.starts_with(&format!("| `{key}`")))
                .unwrap_or_default();
            if let Some(flag) = i.flag {
                assert!(row.contains(&format!("`{flag}`")), "{key}: {row}");
            }
        }
    }

    #[test]
    fn the_kubernetes_examples_use_only_annotations_warden_reads() {
        let mut used = 0;
        for text in [
            include_str!("../../../deploy/kubernetes/pod.yaml"),
            include_str!("../../../deploy/kubernetes/sandbox-template.yaml"),
        ] {
            let mut indent = None;
            for line in text.lines() {
                let depth = line.len() - line.trim_start().len();
                if line.trim_start().starts_with("annotations:") {
                    indent = Some(depth);
                    continue;
                }
                match indent {
                    Some(d) if depth > d && !line.trim().is_empty() => {
                        let key = line.trim().split(':').next().unwrap_or_default();
                        if key.starts_with(ANNOTATION_PREFIX) {
                            used += 1;
                            let read = Field::from_annotation(key).is_some()
                                || key.starts_with(ANNOTATION_SECRET);
                            assert!(read, "{key} is not an annotation of the table");
                        }
                    }
                    Some(_) if !line.trim().is_empty() => indent = None,
                    _ => {}
                }
            }
        }
        assert!(used >= 4, "{used}");
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
        // Without `@`, no host is chosen: all those the operator declared.
        let c = config(serde_json::json!({"annotations": {
            "warden.dev/secret.GH_TOKEN": "",
            "warden.dev/secret.NPM": "file:npm/token",
            "warden.dev/secret.KEY": "env:WARDEN_SECRET_KEY"}}));
        let t = translate(&c, Path::new("/b")).unwrap();
        assert_eq!(t.secrets.len(), 3);
        assert!(t.secrets.iter().all(|s| s.hosts.is_empty()), "{t:?}");
        for (k, v) in [
            ("warden.dev/secret.T", "cmd:cat /etc/shadow"),
            ("warden.dev/secret.T", "env:HOME"),
            ("warden.dev/secret.T", "file:../../etc/shadow"),
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
    fn a_bind_at_another_path_is_refused_by_its_destination() {
        // The bind at its own path is a hostPath volume, refused too
        // (`pod.rs`); the first refusal in the file is the one said.
        let c = config(serde_json::json!({"mounts": [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {"destination": "/data", "type": "bind", "source": "/srv/data", "options": ["rbind", "rw"]},
            {"destination": "/usr", "type": "bind", "source": "/usr", "options": ["rbind", "ro"]}]}));
        let e = translate(&c, Path::new("/b")).unwrap_err();
        assert_eq!(e.field(), Some("mounts[1].destination"));
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
