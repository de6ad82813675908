//! The resolved configuration of one sandbox, [`SandboxSpec`], and the rules that
//! build it from what a person asked for.
//!
//! This crate decides *what* a sandbox may do; it never does it. It makes no
//! syscalls and reads nothing but the values handed to it and profile files,
//! so every front door (CLI flags, profiles, later API requests) produces a
//! spec through the same code, and the enforcers only ever see the spec,
//! which is serde both ways (a supervisor receives it).
//!
//! Each option is declared once, in [`fields::FIELDS`]: flag, profile key,
//! JSON path, kind of value, doc. An error about a value ([`ResolveError`])
//! carries its [`Field`], so each door names it its own way.

#![forbid(unsafe_code)]
// Below the doors nothing prints: a library reports through its return
// values and observers, and each front door chooses what the person sees
// (tests may say why they skipped).
#![cfg_attr(not(test), deny(clippy::print_stdout, clippy::print_stderr))]

pub mod addresses;
pub mod compose;
pub mod desktop;
mod domains;
pub mod edit;
mod env;
mod error;
pub mod fields;
mod home;
#[cfg(test)]
mod lint;
pub mod oci;
pub mod profile;
pub mod read;
mod schema;
mod secrets;
pub mod trust;
mod units;
pub mod validate;

pub use desktop::DesktopSpec;
pub use domains::{normalize_name, DomainError, DomainRule, DEFAULT_PORTS};
pub use env::{resolve_env, EnvRequest, ENV_ALLOWLIST};
pub use error::{Problem, ResolveError, SpecError};
pub use fields::{word, Door, Field, FieldInfo, Kind, Reach, Shape, FIELDS};
pub use home::{CacheMount, Home, CACHES, HOME_MOUNT};
pub use secrets::{SecretRule, SecretSource, SecretSpec, CA_BUNDLE_PATH, CA_CERT_PATH};
pub use trust::{Refusal, Trust};
pub use units::{format_size, parse_duration, parse_size, ParseError};

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The explicit proxy the sandbox's environment names (its own address,
/// where every connection is intercepted anyway).
pub const EXPLICIT_PROXY_URL: &str = "http://10.255.255.1:3128";

/// The name under which the sandbox reaches the host's own services that
/// `--allow-host-port` opened (through the proxy, port by port).
pub const HOST_ALIAS: &str = "host.warden.internal";

/// Where the sandbox's workspace is mounted, and its working directory.
pub const WORKSPACE_MOUNT: &str = "/workspace";

/// Everything the enforcers need to build and run one sandbox.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SandboxSpec {
    /// The command and its arguments; `command[0]` is looked up in the
    /// sandbox's own `PATH` when it has no `/`.
    pub command: Vec<String>,
    pub filesystem: FilesystemSpec,
    pub resources: ResourceSpec,
    /// The complete environment of the command, in order. Nothing else from
    /// the host's environment reaches the sandbox.
    pub env: Vec<(String, String)>,
    pub terminal: Terminal,
    pub hostname: String,
    pub network: NetworkSpec,
    /// Ports of the host's loopback that lead to servers inside the sandbox
    /// (`--publish`).
    pub publish: Vec<PortMapping>,
    /// Run with whatever isolation the host still allows when a layer cannot
    /// be applied, printing what is lost, instead of refusing.
    pub allow_degraded: bool,
    /// Join the network namespace at this path (another sandbox's, whose
    /// loopback, redirect rule and proxy it then shares) instead of making
    /// one: set only by the OCI door for the containers of one pod, never
    /// by a profile or a flag. `network` must then be `LoopbackOnly`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub join_network: Option<PathBuf>,
    /// With `join_network`: the directory holding the other sandbox's trust
    /// files (`ca-bundle.crt`, `ca.crt`: its proxy's authority), mounted
    /// where this sandbox's own would be.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub join_trust: Option<PathBuf>,
    /// What isolates the sandbox.
    #[serde(default)]
    pub isolation: Isolation,
    /// A desktop (screen, window manager, browser, VNC server) that the
    /// sandbox's supervisor keeps running inside it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub desktop: Option<DesktopSpec>,
}

/// What isolates a sandbox: the backend that runs it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Isolation {
    /// Namespaces, Landlock, seccomp, cgroups on the host's kernel.
    #[default]
    Process,
    /// A microVM with its own kernel, running warden's init.
    Vm,
}

/// The sandbox's file tree.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FilesystemSpec {
    /// A prepared root tree used instead of the host's system directories.
    pub rootfs: Option<PathBuf>,
    /// Mounted read-write at [`WORKSPACE_MOUNT`] and used as working directory.
    pub workspace: Option<PathBuf>,
    /// Extra binds, each at the same path inside as outside.
    pub binds: Vec<Bind>,
    /// Size cap of the sandbox's `/tmp` (and `/dev/shm`), in bytes.
    pub tmp_size: u64,
    /// The workspace is seen through an overlay: the sandbox writes into
    /// `upper`, and the real workspace is never written during the run.
    pub overlay: Option<OverlayDirs>,
    /// Host directories covered by an empty stand-in wherever a bind (or
    /// the workspace) would show them: warden's own state directory.
    #[serde(default)]
    pub hidden: Vec<PathBuf>,
    /// Globs of workspace paths that tools on the host run: a review
    /// flags a change to one (`filesystem.runs_on_host`). Nothing here is
    /// enforced inside the sandbox.
    #[serde(default)]
    pub runs_on_host: Vec<String>,
    /// The sandbox's home, where `HOME` points: never the workspace.
    #[serde(default)]
    pub home: Home,
    /// Package caches bound read-write into the home, shared by the
    /// sandboxes of a profile (`filesystem.caches`).
    #[serde(default)]
    pub caches: Vec<CacheMount>,
    /// Where the command and every exec start inside the sandbox
    /// (`filesystem.workdir`); `None`: the workspace, else `/`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workdir: Option<PathBuf>,
    /// `--disk`: set where warden keeps something on the host's disk for
    /// the sandbox (an overlay's layer, a named sandbox's home, the writes
    /// to its caches): all of it lives in one tmpfs of this size while the
    /// sandbox runs (see `docs/architecture.md`, "Disk limit"). `None`: a
    /// run that keeps nothing, or an older caller.
    #[serde(default)]
    pub disk: Option<DiskLimit>,
}

/// The size limit of what warden keeps for a sandbox (`--disk`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DiskLimit {
    /// In bytes.
    pub bytes: u64,
    /// Asked for (`--disk`, `resources.disk`), not a default: a host that
    /// cannot enforce it refuses the run rather than running without it.
    pub asked: bool,
}

/// The directories of a workspace overlay, kept by warden's state store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OverlayDirs {
    pub upper: PathBuf,
    pub work: PathBuf,
}

/// One extra bind mount.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Bind {
    pub path: PathBuf,
    pub writable: bool,
}

/// Limits on what the sandbox may consume.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResourceSpec {
    /// Memory limit in bytes (cgroup), the whole sandbox together.
    pub memory: Limit<u64>,
    /// Maximum number of processes and threads, the whole sandbox together.
    pub pids: Limit<u64>,
    /// CPU quota in cores (1.5 = one and a half cores); `None` is unlimited.
    pub cpus: Option<f64>,
    /// Wall-clock limit; the whole sandbox is killed at the deadline.
    pub timeout: Option<Duration>,
    /// RLIMIT_NOFILE for every process of the sandbox.
    pub open_files: u64,
    /// RLIMIT_FSIZE: the largest file a process may write, in bytes.
    pub file_size: Option<u64>,
}

/// A limit together with where it came from: a person who asked for a limit
/// must get it or an error, while a default may fall back to a weaker
/// mechanism with a warning.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limit<T> {
    pub value: T,
    pub explicit: bool,
}

/// Whether the command gets a pseudo-terminal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum Terminal {
    /// stdin/stdout/stderr are passed through as they are.
    #[default]
    Inherit,
    /// A pseudo-terminal is allocated and relayed to the caller's terminal.
    Pty,
}

/// The sandbox's network.
// One per sandbox, built once: the size of the larger variant costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum NetworkSpec {
    /// A fresh network namespace holding only `lo`.
    LoopbackOnly,
    /// Every TCP connection and DNS query leaves through warden's proxy,
    /// which allows only the names on the list.
    Egress(EgressSpec),
}

/// One `--publish HOSTPORT:PORT`: the host's 127.0.0.1:HOSTPORT leads to
/// the sandbox's 127.0.0.1:PORT.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PortMapping {
    pub host_port: u16,
    pub sandbox_port: u16,
}

/// What the egress proxy allows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EgressSpec {
    pub domains: Vec<DomainRule>,
    /// Plain HTTP to allowed names (denied by default).
    pub allow_http: bool,
    /// Fixed addresses for names (`--add-host NAME=IP`); these addresses are
    /// allowed even when not public.
    pub hosts: Vec<(String, std::net::IpAddr)>,
    /// Non-public address ranges an allowed name may resolve to
    /// (`--allow-cidr`); otherwise only public addresses are connected to.
    pub cidrs: Vec<ipnet::IpNet>,
    /// Ports of the host's loopback the sandbox may reach as
    /// [`HOST_ALIAS`]`:PORT` (`--allow-host-port`).
    pub host_ports: Vec<u16>,
    /// Ask on the terminal about names not on the list instead of denying
    /// them (`--ask`).
    pub ask: bool,
    /// Print each decision on stderr as it is made.
    pub log: bool,
    /// Bytes (both ways, all connections) after which new connections are
    /// refused.
    pub quota: Option<u64>,
    /// A connection with no byte either way for this long is closed.
    pub idle_timeout: Duration,
    /// Secrets the proxy substitutes towards their own hosts (`--secret`);
    /// TLS to those hosts is terminated by the proxy.
    pub secrets: Vec<SecretSpec>,
    /// Allow rules for requests on the secrets' hosts (`--secret-rule`).
    pub secret_rules: Vec<SecretRule>,
    /// PEM files of extra authorities trusted for upstream servers of
    /// terminated connections (`--upstream-ca`), besides the system's.
    pub upstream_ca: Vec<PathBuf>,
    /// Learning mode (`--egress-learn`): every name no rule allows is
    /// allowed and recorded as learned, instead of denied.
    #[serde(default)]
    pub learn: bool,
}

/// Default of [`EgressSpec::idle_timeout`].
pub const DEFAULT_EGRESS_IDLE_TIMEOUT: Duration = Duration::from_secs(600);

/// Facts about the host that defaults are sized from. Gathered by the caller,
/// so that this crate does no I/O.
#[derive(Debug, Clone, Copy)]
pub struct HostFacts {
    pub total_memory: u64,
    pub cpus: u32,
    /// The most processes the kernel can have (`/proc/sys/kernel/pid_max`).
    pub pid_max: u64,
}

/// Defaults applied when no limit is given, sized from the host.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Defaults {
    pub memory: u64,
    pub pids: u64,
    pub tmp_size: u64,
    pub open_files: u64,
    pub file_size: u64,
    /// The host's cores: no `--cpus` may ask for more.
    pub host_cpus: u32,
    /// The most processes the kernel can have: no `--pids` may be above.
    pub pid_max: u64,
}

/// The highest `pids.max` a cgroup takes (the kernel's `PID_MAX_LIMIT`).
const PID_MAX_LIMIT: u64 = 1 << 22;

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;

impl Defaults {
    /// Half of the host's memory, capped at 8 GiB; 1024 processes; a `/tmp`
    /// of a quarter of the memory limit, capped at 1 GiB; 4096 open files;
    /// files of at most 16 GiB.
    pub fn for_host(host: HostFacts) -> Self {
        let memory = (host.total_memory / 2).clamp(256 * MIB, 8 * GIB);
        Defaults {
            memory,
            pids: 1024,
            tmp_size: (memory / 4).clamp(64 * MIB, GIB),
            open_files: 4096,
            file_size: 16 * GIB,
            host_cpus: host.cpus.max(1),
            pid_max: host.pid_max.clamp(2, PID_MAX_LIMIT),
        }
    }
}

/// What a front door asks for, before defaults and validation.
#[derive(Debug, Clone, Default)]
pub struct Request {
    pub command: Vec<String>,
    pub rootfs: Option<PathBuf>,
    pub workspace: Option<PathBuf>,
    pub ro: Vec<PathBuf>,
    pub rw: Vec<PathBuf>,
    pub tmp_size: Option<u64>,
    /// `filesystem.runs_on_host` globs.
    pub runs_on_host: Vec<String>,
    /// `filesystem.caches`: names from [`CACHES`].
    pub caches: Vec<String>,
    /// The profile's directory of caches in warden's state (filled by the
    /// front door that knows the state directory).
    pub cache_dir: Option<PathBuf>,
    /// A named sandbox's kept home in warden's state; a run without one
    /// gets a tmpfs.
    pub home_dir: Option<PathBuf>,
    pub memory: Option<u64>,
    pub pids: Option<u64>,
    pub cpus: Option<f64>,
    pub timeout: Option<Duration>,
    pub open_files: Option<u64>,
    pub file_size: Option<u64>,
    /// `--disk`: the size limit of what warden keeps for the sandbox (an
    /// overlay's layer, a named sandbox's home, its caches' writes).
    pub disk: Option<u64>,
    /// Free space of the file system holding warden's state (where the
    /// layer is kept when the sandbox stops), filled by the front door that
    /// knows the state directory; it bounds `disk` and its default.
    pub disk_free: Option<u64>,
    pub env: EnvRequest,
    pub terminal: Terminal,
    pub hostname: Option<String>,
    /// `filesystem.workdir`: where commands start inside.
    pub workdir: Option<String>,
    /// `process` (the default) or `vm`.
    pub isolation: Option<String>,
    pub allow_degraded: bool,
    /// `desktop: true`: the sandbox gets a desktop.
    pub desktop: bool,
    /// `--allow-domain` entries; none means no network at all.
    pub allow_domains: Vec<String>,
    /// Entries of `egress.domains` someone other than the owner gave (a
    /// token holder's request, an E2B client's `allowOut`, a pod's
    /// annotation): allowed like `allow_domains`, but they reach public
    /// addresses only ([`DomainRule::caller`]). One the owner gave as well
    /// is the owner's.
    pub caller_domains: Vec<String>,
    /// Names of secrets a caller asked for (a pod's secret annotation,
    /// within the node's grant): their hosts are allowed as a caller's
    /// entries, reaching public addresses only, never the owner's pins
    /// or ranges.
    pub caller_secrets: Vec<String>,
    pub allow_http: bool,
    /// `--add-host NAME=IP` (or `NAME:IP`) entries.
    pub add_hosts: Vec<String>,
    /// `--allow-cidr` entries.
    pub allow_cidr: Vec<String>,
    /// `--allow-host-port` entries.
    pub allow_host_ports: Vec<u16>,
    /// `--publish HOSTPORT:PORT` entries.
    pub publish: Vec<String>,
    /// `--ask`.
    pub ask: bool,
    /// `--egress-learn`.
    pub egress_learn: bool,
    /// `--net-log`: one line per egress decision on stderr.
    pub net_log: bool,
    /// `--egress-quota`.
    pub egress_quota: Option<u64>,
    /// `--egress-idle-timeout`.
    pub egress_idle_timeout: Option<Duration>,
    /// `filesystem.mode: overlay` / `--overlay`: the front door supplies
    /// `overlay_dirs` from warden's state store.
    pub overlay: bool,
    pub overlay_dirs: Option<OverlayDirs>,
    /// Host directories no bind may show (see [`FilesystemSpec::hidden`]).
    pub hidden: Vec<PathBuf>,
    /// `--json-events FILE`: where the front door appends events. Not part
    /// of the spec; the front door opens it.
    pub json_events: Option<PathBuf>,
    /// `--secret` entries.
    pub secrets: Vec<String>,
    /// `--secret-in-body NAME` entries.
    pub secret_in_body: Vec<String>,
    /// `--secret-rule` entries.
    pub secret_rules: Vec<String>,
    /// `--upstream-ca FILE` entries.
    pub upstream_ca: Vec<PathBuf>,
    /// `--audit-log FILE` / `--no-audit-log` / `--otlp-endpoint URL`: where
    /// the front door records the run. Not part of the spec either.
    pub audit_log: Option<PathBuf>,
    pub no_audit_log: bool,
    pub otlp_endpoint: Option<String>,
}

impl Request {
    /// Resolve this request into a spec: apply defaults, check every value,
    /// and build the command's environment from `host_env`.
    /// The file system's section: the root, the workspace and the binds,
    /// each checked.
    fn binds(&self) -> Result<Vec<Bind>, ResolveError> {
        let forbidden = |field: Field, path: &Path, why| {
            field.invalid(Problem::ForbiddenPath {
                path: path.to_path_buf(),
                why,
            })
        };
        if let Some(root) = &self.rootfs {
            check_absolute(Field::Rootfs, root)?;
            if root == Path::new("/") {
                return Err(forbidden(
                    Field::Rootfs,
                    root,
                    "the host's own root would expose every host file; leave `filesystem.rootfs` out to use the host's system directories read-only",
                ));
            }
        }
        if let Some(ws) = &self.workspace {
            check_absolute(Field::Workspace, ws)?;
            if ws == Path::new("/") {
                return Err(forbidden(
                    Field::Workspace,
                    ws,
                    "it would make the whole host writable; pass a project directory",
                ));
            }
            if let Some(why) = system_directory(ws) {
                return Err(forbidden(Field::Workspace, ws, why));
            }
        }
        let mut binds = Vec::new();
        for (paths, writable, field) in [(&self.ro, false, Field::Ro), (&self.rw, true, Field::Rw)]
        {
            for p in paths {
                check_absolute(field, p)?;
                if p == Path::new("/") {
                    return Err(forbidden(
                        field,
                        p,
                        "binding the host's root exposes every host file",
                    ));
                }
                if let Some(why) = writable.then(|| system_directory(p)).flatten() {
                    return Err(forbidden(field, p, why));
                }
                if reserved_destination(p) {
                    return Err(forbidden(
                        field,
                        p,
                        "warden builds /proc, /dev, /tmp and /workspace itself; bind a path below another directory",
                    ));
                }
                if Path::new(HOME_MOUNT).starts_with(p) || p.starts_with(HOME_MOUNT) {
                    return Err(forbidden(
                        field,
                        p,
                        "the sandbox's own home is /home/sandbox, which warden mounts itself; bind another path (such as one below /home/NAME), or share package caches with `filesystem.caches`",
                    ));
                }
                binds.push(Bind {
                    path: p.clone(),
                    writable,
                });
            }
        }
        Ok(binds)
    }

    /// The limits' section: memory, processes, CPU, time, open files and
    /// `/tmp`, each checked against the host.
    #[allow(clippy::type_complexity)]
    fn limits(
        &self,
        defaults: &Defaults,
    ) -> Result<(Limit<u64>, Limit<u64>, u64, u64), ResolveError> {
        let memory = limit(self.memory, defaults.memory);
        if memory.value < 16 * MIB {
            return Err(Field::Memory.invalid(Problem::MemoryTooSmall(memory.value)));
        }
        let pids = limit(self.pids, defaults.pids);
        if pids.value < 2 {
            return Err(Field::Pids.invalid(Problem::PidsTooSmall(pids.value)));
        }
        if pids.value > defaults.pid_max {
            return Err(Field::Pids.invalid(Problem::PidsAboveKernel {
                asked: pids.value,
                max: defaults.pid_max,
            }));
        }
        if let Some(c) = self.cpus {
            if !(c.is_finite() && c > 0.0) {
                return Err(Field::Cpus.invalid(Problem::BadCpus(c)));
            }
            if c > f64::from(defaults.host_cpus) {
                return Err(Field::Cpus.invalid(Problem::CpusAboveHost {
                    asked: c,
                    host: defaults.host_cpus,
                }));
            }
        }
        if self.timeout == Some(Duration::ZERO) {
            return Err(Field::Timeout.invalid(Problem::ZeroTimeout));
        }
        let open_files = self.open_files.unwrap_or(defaults.open_files);
        if !(16..=1 << 20).contains(&open_files) {
            return Err(Field::OpenFiles.invalid(Problem::BadOpenFiles(open_files)));
        }
        let tmp_size = self.tmp_size.unwrap_or(defaults.tmp_size);
        if tmp_size < MIB {
            return Err(Field::TmpSize.invalid(Problem::TmpTooSmall(tmp_size)));
        }
        Ok((memory, pids, open_files, tmp_size))
    }

    /// The network's section: loopback only, or egress through the proxy
    /// with its rules (each entry's own mistake said before how the entries
    /// fit together).
    fn network(
        &self,
        secrets: &[SecretSpec],
        secret_rules: Vec<SecretRule>,
    ) -> Result<NetworkSpec, ResolveError> {
        // Each entry's own mistake is said before any question of how
        // the entries fit together (an invalid range, then "needs an
        // --allow-domain").
        let hosts = self
            .add_hosts
            .iter()
            .map(|h| parse_add_host(h))
            .collect::<Result<Vec<_>, _>>()?;
        let cidrs = self
            .allow_cidr
            .iter()
            .map(|c| {
                let c = c.trim();
                c.parse::<ipnet::IpNet>()
                    .or_else(|_| c.parse::<std::net::IpAddr>().map(ipnet::IpNet::from))
                    .map(|n| n.trunc())
                    .map_err(|_| Field::AllowCidr.invalid(Problem::BadCidr(c.to_string())))
                    .and_then(|n| match addresses::covers_host(&n) {
                        // Refused, not narrowed: the person asked for
                        // something warden will never give.
                        Some((range, what)) => {
                            Err(Field::AllowCidr.invalid(Problem::CidrCoversHost {
                                cidr: c.to_string(),
                                range: range.to_string(),
                                what,
                            }))
                        }
                        None => Ok(n),
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        if self.egress_learn && !secrets.is_empty() {
            // Learning allows what no rule names: a secret's placeholder
            // would go wherever the sandbox sends it.
            return Err(Field::EgressLearn.invalid(Problem::LearnWithSecrets));
        }
        if self.egress_learn && self.ask {
            return Err(Field::EgressLearn.invalid(Problem::LearnWithAsk));
        }
        let network = if self.allow_domains.is_empty()
            && self.caller_domains.is_empty()
            && self.allow_host_ports.is_empty()
            && !self.ask
            && !self.egress_learn
            && secrets.is_empty()
        {
            // Options that only refine egress: the first one given is named.
            let given = [
                (Field::AllowHttp, self.allow_http),
                (Field::AddHost, !self.add_hosts.is_empty()),
                (Field::AllowCidr, !self.allow_cidr.is_empty()),
                (Field::EgressQuota, self.egress_quota.is_some()),
                (Field::UpstreamCa, !self.upstream_ca.is_empty()),
            ];
            if let Some((field, _)) = given.iter().find(|(_, given)| *given) {
                return Err(field.invalid(Problem::EgressWithoutDomains));
            }
            NetworkSpec::LoopbackOnly
        } else {
            let mut domains = parse_domains(&self.allow_domains).map_err(|(_, e)| e)?;
            for mut rule in parse_domains(&self.caller_domains).map_err(|(_, e)| e)? {
                if !domains.iter().any(|d| d.same_destinations(&rule)) {
                    rule.caller = true;
                    domains.push(rule);
                }
            }
            // A secret's hosts are allowed destinations: the value
            // is useless if its own hosts cannot be reached.
            for s in secrets {
                for h in &s.hosts {
                    let covered = domains.iter().any(|d| {
                        d.name == h.name && d.subdomains == h.subdomains && d.port == h.port
                    });
                    if !covered {
                        let mut rule = h.clone();
                        rule.source = format!("`secrets {}@{}`", s.name, h.source);
                        rule.caller = self.caller_secrets.contains(&s.name);
                        domains.push(rule);
                    }
                }
            }
            let mut host_ports = Vec::new();
            for &port in &self.allow_host_ports {
                if port == 0 {
                    return Err(Field::AllowHostPort.invalid(Problem::BadHostPort));
                }
                if !host_ports.contains(&port) {
                    host_ports.push(port);
                    domains.push(DomainRule {
                        name: HOST_ALIAS.to_string(),
                        subdomains: false,
                        port: Some(port),
                        source: format!("`egress.host_ports {port}`"),
                        caller: false,
                    });
                }
            }
            NetworkSpec::Egress(EgressSpec {
                domains,
                allow_http: self.allow_http,
                hosts,
                cidrs,
                host_ports,
                ask: self.ask,
                log: self.net_log,
                quota: self.egress_quota,
                idle_timeout: self
                    .egress_idle_timeout
                    .unwrap_or(DEFAULT_EGRESS_IDLE_TIMEOUT),
                secrets: secrets.to_vec(),
                secret_rules,
                upstream_ca: self.upstream_ca.clone(),
                learn: self.egress_learn,
            })
        };
        Ok(network)
    }

    /// The environment's last additions, from the other sections: the
    /// proxy's variables, the secrets' authority, a desktop's screen.
    fn finish_env(
        &self,
        env: Vec<(String, String)>,
        network: &NetworkSpec,
        secrets: &[SecretSpec],
    ) -> (Vec<(String, String)>, Option<DesktopSpec>) {
        let mut env = env;
        if matches!(network, NetworkSpec::Egress(_)) {
            // For tools that prefer an explicit proxy; every other program
            // is intercepted transparently, with the same decisions.
            for (k, v) in [
                ("HTTP_PROXY", EXPLICIT_PROXY_URL),
                ("HTTPS_PROXY", EXPLICIT_PROXY_URL),
                ("http_proxy", EXPLICIT_PROXY_URL),
                ("https_proxy", EXPLICIT_PROXY_URL),
                ("NO_PROXY", "localhost,127.0.0.1"),
                ("no_proxy", "localhost,127.0.0.1"),
            ] {
                if !env.iter().any(|(n, _)| n == k) {
                    env.push((k.to_string(), v.to_string()));
                }
            }
        }
        if !secrets.is_empty() {
            // The proxy presents certificates of a per-sandbox authority
            // for the secrets' hosts: common tools are pointed at a bundle
            // that trusts it (the jail mounts the files; the placeholders
            // themselves are added by the supervisor, which makes them).
            for (k, v) in [
                ("SSL_CERT_FILE", CA_BUNDLE_PATH),
                ("REQUESTS_CA_BUNDLE", CA_BUNDLE_PATH),
                ("CURL_CA_BUNDLE", CA_BUNDLE_PATH),
                ("GIT_SSL_CAINFO", CA_BUNDLE_PATH),
                ("NODE_EXTRA_CA_CERTS", CA_CERT_PATH),
            ] {
                if !env.iter().any(|(n, _)| n == k) {
                    env.push((k.to_string(), v.to_string()));
                }
            }
        }

        let desktop = if self.desktop {
            let d = DesktopSpec::default();
            // Every process sees the screen, as it would at a person's
            // desktop; the profile's own values win.
            for (k, v) in d.env() {
                if !env.iter().any(|(n, _)| n == k) {
                    env.push((k.to_string(), v));
                }
            }
            Some(d)
        } else {
            None
        };
        (env, desktop)
    }

    pub fn resolve(
        self,
        defaults: &Defaults,
        host_env: &[(String, String)],
    ) -> Result<SandboxSpec, ResolveError> {
        let first = self
            .command
            .first()
            .ok_or(Field::Command.invalid(Problem::NoCommand))?;
        if first.is_empty() {
            return Err(Field::Command.invalid(Problem::EmptyCommand));
        }
        let binds = self.binds()?;

        let (memory, pids, open_files, tmp_size) = self.limits(defaults)?;
        let hostname = self
            .hostname
            .clone()
            .unwrap_or_else(|| "warden".to_string());
        // A path inside the sandbox, written whole: absolute, no `..`.
        let workdir = match self.workdir.as_deref().map(Path::new) {
            Some(w) if !w.is_absolute() => {
                return Err(Field::Workdir.invalid(Problem::RelativePath(w.to_path_buf())))
            }
            Some(w) if w.components().any(|c| c == std::path::Component::ParentDir) => {
                return Err(Field::Workdir.invalid(Problem::ForbiddenPath {
                    path: w.to_path_buf(),
                    why: "write it without `..`",
                }))
            }
            w => w.map(Path::to_path_buf),
        };
        if !valid_hostname(&hostname) {
            return Err(Field::Hostname.invalid(Problem::BadHostname(hostname)));
        }
        let isolation = match self.isolation.as_deref() {
            None | Some("process") => Isolation::Process,
            Some("vm") => Isolation::Vm,
            Some(other) => {
                return Err(Field::Isolation.invalid(Problem::BadIsolation(other.to_string())))
            }
        };
        // A prepared root tree, or a VM's guest, brings its own home.
        let (home_spec, caches) = home::resolve(
            &self.caches,
            self.rootfs.is_some() || isolation == Isolation::Vm,
            self.home_dir.as_deref(),
            self.cache_dir.as_deref(),
        )?;
        let home = match (&home_spec, self.workspace.is_some()) {
            (Home::Tmpfs | Home::Dir(_), _) => HOME_MOUNT,
            // A prepared root tree: its own home is unknown here.
            (Home::None, true) => WORKSPACE_MOUNT,
            (Home::None, false) => "/tmp",
        };
        let secrets = secrets::parse_secrets(&self.secrets, &self.secret_in_body, &self.env)?;
        let secret_rules = secrets::parse_rules(&self.secret_rules, &secrets)?;
        for p in &self.upstream_ca {
            check_absolute(Field::UpstreamCa, p)?;
        }
        let env = resolve_env(&self.env, host_env, home)?;
        let publish = parse_publish(&self.publish)?;
        if self.overlay && self.workspace.is_none() {
            return Err(Field::Overlay.invalid(Problem::OverlayWithoutWorkspace));
        }
        if self.overlay && self.overlay_dirs.is_none() {
            // Never a silent fall back to writing the real workspace.
            return Err(Field::Overlay.invalid(Problem::OverlayWithoutState));
        }
        let network = self.network(&secrets, secret_rules)?;
        let (env, desktop) = self.finish_env(env, &network, &secrets);
        if self.file_size == Some(0) {
            return Err(Field::FileSize.invalid(Problem::ZeroFileSize));
        }
        let overlay = match (self.overlay, self.overlay_dirs) {
            (true, Some(dirs)) => Some(dirs),
            _ => None,
        };
        // Only where something is kept: a run without an overlay, a kept
        // home or caches has nothing of it on disk.
        let keeps = overlay.is_some() || matches!(home_spec, Home::Dir(_)) || !caches.is_empty();
        let disk = match keeps {
            true => Some(DiskLimit {
                bytes: disk_limit(self.disk, memory.value, self.disk_free)?,
                asked: self.disk.is_some(),
            }),
            false => None,
        };
        for g in &self.runs_on_host {
            check_glob(g)?;
        }
        if self.egress_idle_timeout == Some(Duration::ZERO) {
            return Err(Field::EgressIdleTimeout.invalid(Problem::ZeroIdleTimeout));
        }
        Ok(SandboxSpec {
            command: self.command,
            filesystem: FilesystemSpec {
                rootfs: self.rootfs,
                workspace: self.workspace,
                binds,
                tmp_size,
                overlay,
                hidden: self.hidden,
                runs_on_host: self.runs_on_host,
                home: home_spec,
                caches,
                workdir,
                disk,
            },
            resources: ResourceSpec {
                memory,
                pids,
                cpus: self.cpus,
                timeout: self.timeout,
                open_files,
                file_size: Some(self.file_size.unwrap_or(defaults.file_size)),
            },
            env,
            terminal: self.terminal,
            hostname,
            network,
            publish,
            allow_degraded: self.allow_degraded,
            isolation,
            join_network: None,
            join_trust: None,
            desktop,
        })
    }
}

/// The smallest default `--disk`.
const MIN_DEFAULT_DISK: u64 = 64 * MIB;

/// The size limit of an overlay's upper layer: `asked`, or by default half
/// of the memory limit (the layer is a tmpfs while the sandbox runs, and its
/// pages are charged to the sandbox's memory cgroup), bounded by half of
/// the state file system's free space `free` (where the layer is written
/// when the sandbox stops). An explicit size larger than the memory limit
/// or than `free` is refused: the sandbox could not get it.
fn disk_limit(asked: Option<u64>, memory: u64, free: Option<u64>) -> Result<u64, ResolveError> {
    match asked {
        Some(0) => Err(Field::Disk.invalid(Problem::ZeroDisk)),
        Some(d) if d > memory => {
            Err(Field::Disk.invalid(Problem::DiskOverMemory { disk: d, memory }))
        }
        Some(d) => match free {
            Some(f) if d > f => {
                Err(Field::Disk.invalid(Problem::DiskOverFree { disk: d, free: f }))
            }
            _ => Ok(d),
        },
        None => {
            let d = (memory / 2).max(MIN_DEFAULT_DISK.min(memory));
            Ok(match free {
                Some(f) => d.min(f / 2).max(MIB.min(f)),
                None => d,
            })
        }
    }
}

/// `NAME=IP`, or `NAME:IP` as `docker run --add-host` writes it.
fn parse_add_host(entry: &str) -> Result<(String, std::net::IpAddr), ResolveError> {
    let bad = || Field::AddHost.invalid(Problem::BadAddHost(entry.to_string()));
    let (name, ip) = entry
        .split_once('=')
        .or_else(|| entry.split_once(':'))
        .ok_or_else(bad)?;
    let name = normalize_name(name).map_err(|_| bad())?;
    let ip = ip.trim();
    let ip = ip
        .strip_prefix('[')
        .and_then(|i| i.strip_suffix(']'))
        .unwrap_or(ip);
    let ip: std::net::IpAddr = ip.parse().map_err(|_| bad())?;
    // Loopback written out names the host on purpose; the unspecified
    // address (and 0.0.0.0/8, and their IPv6 forms) reaches it unsaid.
    if addresses::host_itself(ip).is_some() && !is_loopback_form(ip) {
        return Err(Field::AddHost.invalid(Problem::AddHostUnspecified(entry.to_string())));
    }
    Ok((name, ip))
}

/// Loopback in any spelling [`addresses::host_itself`] knows.
fn is_loopback_form(ip: std::net::IpAddr) -> bool {
    match ip {
        std::net::IpAddr::V4(a) => a.is_loopback(),
        std::net::IpAddr::V6(a) => {
            a.is_loopback() || addresses::embedded_ipv4(a).is_some_and(|v4| v4.is_loopback())
        }
    }
}

fn parse_publish(entries: &[String]) -> Result<Vec<PortMapping>, ResolveError> {
    let mut out: Vec<PortMapping> = Vec::new();
    for entry in entries {
        let bad = || Field::Publish.invalid(Problem::BadPublish(entry.clone()));
        let port = |p: &str| p.trim().parse::<u16>().ok().filter(|p| *p != 0);
        let (host_port, sandbox_port) = match entry.split_once(':') {
            Some((h, s)) => (port(h).ok_or_else(bad)?, port(s).ok_or_else(bad)?),
            None => {
                let p = port(entry).ok_or_else(bad)?;
                (p, p)
            }
        };
        if out.iter().any(|m| m.host_port == host_port) {
            return Err(Field::Publish.invalid(Problem::DuplicatePublish(host_port)));
        }
        out.push(PortMapping {
            host_port,
            sandbox_port,
        });
    }
    Ok(out)
}

fn limit(asked: Option<u64>, default: u64) -> Limit<u64> {
    match asked {
        Some(value) => Limit {
            value,
            explicit: true,
        },
        None => Limit {
            value: default,
            explicit: false,
        },
    }
}

fn check_absolute(field: Field, p: &Path) -> Result<(), ResolveError> {
    if p.is_absolute() {
        Ok(())
    } else {
        Err(field.invalid(Problem::RelativePath(p.to_path_buf())))
    }
}

/// Destinations that warden assembles itself and that a bind must not replace.
/// Host directories no writable bind or workspace may be, and why: the
/// host's own programs, libraries, configuration and boot files (and
/// anything below them), and the roots of its state and of its users'
/// homes (a directory below those, such as a project under /home or a
/// database under /var/lib, may be bound). Compared after `.` and `..` are
/// taken out of the path.
const SYSTEM_DIRECTORIES: &[(&str, bool, &str)] = &[
    // (directory, also everything below it, why)
    (
        "/etc",
        true,
        "the host's configuration would be writable from the sandbox",
    ),
    (
        "/usr",
        true,
        "the host's programs and libraries would be writable from the sandbox",
    ),
    (
        "/bin",
        true,
        "the host's programs would be writable from the sandbox",
    ),
    (
        "/sbin",
        true,
        "the host's programs would be writable from the sandbox",
    ),
    (
        "/lib",
        true,
        "the host's libraries would be writable from the sandbox",
    ),
    (
        "/lib32",
        true,
        "the host's libraries would be writable from the sandbox",
    ),
    (
        "/lib64",
        true,
        "the host's libraries would be writable from the sandbox",
    ),
    (
        "/libx32",
        true,
        "the host's libraries would be writable from the sandbox",
    ),
    (
        "/boot",
        true,
        "the host's kernel and boot loader would be writable from the sandbox",
    ),
    (
        "/var",
        false,
        "the host's logs, spool and package state would be writable from the sandbox",
    ),
    (
        "/var/lib",
        false,
        "the host's package and service state would be writable from the sandbox",
    ),
    (
        "/var/log",
        true,
        "the host's logs would be writable from the sandbox",
    ),
    (
        "/home",
        false,
        "every user's home would be writable from the sandbox",
    ),
    (
        "/root",
        false,
        "root's home would be writable from the sandbox",
    ),
    (
        "/run",
        false,
        "the host's sockets and runtime state would be writable from the sandbox",
    ),
    (
        "/sys",
        true,
        "the kernel's settings would be writable from the sandbox",
    ),
    (
        "/opt",
        false,
        "the host's installed software would be writable from the sandbox",
    ),
    (
        "/srv",
        false,
        "the host's served data would be writable from the sandbox",
    ),
];

/// Why `p` may not be made writable, when it is a system directory.
fn system_directory(p: &Path) -> Option<&'static str> {
    use std::path::Component;
    let mut clean = PathBuf::from("/");
    for c in p.components() {
        match c {
            Component::Normal(n) => clean.push(n),
            Component::ParentDir => {
                clean.pop();
            }
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    SYSTEM_DIRECTORIES
        .iter()
        .find(|(dir, below, _)| clean == Path::new(dir) || (*below && clean.starts_with(dir)))
        .map(|(_, _, why)| *why)
}

fn reserved_destination(p: &Path) -> bool {
    ["/proc", "/dev", "/tmp", WORKSPACE_MOUNT]
        .iter()
        .any(|r| p == Path::new(r))
}

fn valid_hostname(h: &str) -> bool {
    !h.is_empty()
        && h.len() <= 63
        && !h.starts_with('-')
        && h.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

/// A `filesystem.runs_on_host` glob: relative to the workspace, and one the
/// review's matcher reads (`*`, `?`, `[...]`, `**`).
fn check_glob(g: &str) -> Result<(), ResolveError> {
    let bad = |why: &str| {
        Err(Field::RunsOnHost.invalid(Problem::BadGlob {
            entry: g.to_string(),
            why: why.to_string(),
        }))
    };
    if g.is_empty() {
        return bad("it is empty");
    }
    if g.starts_with('/') {
        return bad("it is absolute; globs are relative to the workspace");
    }
    if g.split('/').any(|c| c == "..") {
        return bad("it climbs out with '..'");
    }
    let mut depth = 0i32;
    for c in g.chars() {
        match c {
            '[' => depth += 1,
            ']' if depth > 0 => depth -= 1,
            _ => {}
        }
    }
    if depth != 0 {
        return bad("a '[' is not closed");
    }
    if g.split('/').any(|c| c.contains("**") && c != "**") {
        return bad("'**' must be a whole path component");
    }
    Ok(())
}

/// Allowlist entries read as `--allow-domain` and `egress.domains` read
/// them, wherever they come from (a profile, the command line, a live
/// change through `warden egress` or the API): each must parse, and none
/// may name the host itself (its services have `--allow-host-port`). The
/// error comes with the index of the first entry at fault.
pub fn parse_domains<S: AsRef<str>>(
    entries: &[S],
) -> Result<Vec<DomainRule>, (usize, ResolveError)> {
    let mut out = Vec::with_capacity(entries.len());
    for (i, d) in entries.iter().enumerate() {
        let rule = DomainRule::parse(d.as_ref())
            .map_err(|e| (i, Field::AllowDomain.invalid(Problem::Domain(e))))?;
        // The host's own services have a flag of their own.
        if rule.name == HOST_ALIAS || rule.name == "warden.internal" {
            return Err((
                i,
                Field::AllowDomain.invalid(Problem::HostAliasAsDomain(rule.source)),
            ));
        }
        out.push(rule);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn defaults() -> Defaults {
        Defaults::for_host(HostFacts {
            total_memory: 8 * GIB,
            cpus: 2,
            pid_max: 1 << 22,
        })
    }

    /// The field and problem of a failed resolution.
    fn problem(r: Result<SandboxSpec, ResolveError>) -> Option<(Field, Problem)> {
        let e = r.err()?;
        Some((e.field()?, e.problem().clone()))
    }

    #[test]
    fn a_system_directory_is_never_writable_and_a_project_below_home_is() {
        for dir in [
            "/etc",
            "/etc/ssh",
            "/usr",
            "/usr/lib",
            "/boot",
            "/var",
            "/var/lib",
            "/home",
            "/root",
            "/tmp/../etc/",
            "/./usr//bin",
        ] {
            let mut r = req(&["true"]);
            r.rw = vec![dir.into()];
            assert!(
                matches!(
                    problem(r.resolve(&defaults(), &[])),
                    Some((Field::Rw, Problem::ForbiddenPath { .. }))
                ),
                "--rw {dir}"
            );
            let mut r = req(&["true"]);
            r.workspace = Some(dir.into());
            assert!(
                matches!(
                    problem(r.resolve(&defaults(), &[])),
                    Some((Field::Workspace, Problem::ForbiddenPath { .. }))
                ),
                "-w {dir}"
            );
            // Read-only, they may be shown; all of /home would hide the
            // sandbox's own home, which is mounted there.
            let mut r = req(&["true"]);
            r.ro = vec![dir.into()];
            assert_eq!(
                r.resolve(&defaults(), &[]).is_ok(),
                dir != "/home",
                "--ro {dir}"
            );
        }
        for dir in [
            "/home/ann/project",
            "/var/lib/postgresql",
            "/srv/data",
            "/opt/tool/cache",
        ] {
            let mut r = req(&["true"]);
            r.rw = vec![dir.into()];
            assert!(r.resolve(&defaults(), &[]).is_ok(), "--rw {dir}");
        }
    }

    #[test]
    fn cpus_beyond_the_host_and_pids_beyond_the_kernel_are_refused_with_the_limit() {
        let mut r = req(&["true"]);
        r.cpus = Some(3.0);
        let e = r.resolve(&defaults(), &[]).unwrap_err();
        assert_eq!(e.field(), Some(Field::Cpus));
        assert!(e.to_string().contains("(2)"), "{e}");
        let mut r = req(&["true"]);
        r.cpus = Some(2.0);
        assert!(r.resolve(&defaults(), &[]).is_ok());
        let mut r = req(&["true"]);
        r.pids = Some((1 << 22) + 1);
        let e = r.resolve(&defaults(), &[]).unwrap_err();
        assert_eq!(e.field(), Some(Field::Pids));
        assert!(e.to_string().contains("4194304"), "{e}");
    }

    #[test]
    fn an_invalid_range_is_said_before_what_it_lacks() {
        let mut r = req(&["true"]);
        r.allow_cidr = vec!["10.0.0.0/33".into()];
        assert!(matches!(
            problem(r.resolve(&defaults(), &[])),
            Some((Field::AllowCidr, Problem::BadCidr(_)))
        ));
    }

    fn req(cmd: &[&str]) -> Request {
        Request {
            command: cmd.iter().map(|s| s.to_string()).collect(),
            terminal: Terminal::Inherit,
            ..Default::default()
        }
    }

    /// A spec with every part filled, values chosen to be awkward for a
    /// serializer (nanoseconds, IPv6, a fraction of a core).
    fn full_spec() -> SandboxSpec {
        let rule = |s: &str| DomainRule::parse(s).unwrap();
        SandboxSpec {
            command: vec!["bash".into(), "-lc".into(), "echo \"hi\" && exit 3".into()],
            filesystem: FilesystemSpec {
                rootfs: Some("/srv/root".into()),
                workspace: Some("/home/alice/src/p".into()),
                binds: vec![
                    Bind {
                        path: "/etc/gitconfig".into(),
                        writable: false,
                    },
                    Bind {
                        path: "/var/cache/x".into(),
                        writable: true,
                    },
                ],
                tmp_size: 512 * MIB,
                overlay: Some(OverlayDirs {
                    upper: "/var/lib/warden/s/upper".into(),
                    work: "/var/lib/warden/s/work".into(),
                }),
                hidden: vec!["/var/lib/warden".into()],
                runs_on_host: Vec::new(),
                home: Home::None,
                caches: Vec::new(),
                workdir: None,
                disk: Some(DiskLimit {
                    bytes: GIB,
                    asked: false,
                }),
            },
            resources: ResourceSpec {
                memory: Limit {
                    value: 4 * GIB,
                    explicit: true,
                },
                pids: Limit {
                    value: 1024,
                    explicit: false,
                },
                cpus: Some(0.1 + 0.2),
                timeout: Some(Duration::new(7200, 123_456_789)),
                open_files: 4096,
                file_size: None,
            },
            env: vec![
                ("PATH".into(), "/usr/bin:/bin".into()),
                ("EMPTY".into(), String::new()),
                ("UNICODE".into(), "é ✓".into()),
            ],
            terminal: Terminal::Pty,
            hostname: "agent".into(),
            network: NetworkSpec::Egress(EgressSpec {
                domains: vec![rule(".example.dev"), rule("git.example.com:22")],
                allow_http: true,
                hosts: vec![
                    ("registry.internal".into(), "10.1.2.3".parse().unwrap()),
                    ("v6.internal".into(), "fd00::1".parse().unwrap()),
                ],
                cidrs: vec!["10.1.0.0/16".parse().unwrap(), "fd00::/8".parse().unwrap()],
                host_ports: vec![5432, 6379],
                ask: true,
                log: true,
                quota: Some(5 * GIB),
                idle_timeout: Duration::from_millis(1500),
                secrets: vec![
                    SecretSpec::parse("GH@api.github.com,.githubusercontent.com").unwrap(),
                    SecretSpec::parse("T=file:/run/keys/t@a.test:8443").unwrap(),
                    SecretSpec {
                        in_bodies: true,
                        ..SecretSpec::parse("C=cmd:pass show api@b.test").unwrap()
                    },
                ],
                secret_rules: vec![
                    SecretRule::parse("GET api.github.com/repos/acme/*").unwrap(),
                    SecretRule::parse("a.test:8443").unwrap(),
                ],
                upstream_ca: vec!["/etc/ca.pem".into()],
                learn: true,
            }),
            publish: vec![
                PortMapping {
                    host_port: 8080,
                    sandbox_port: 3000,
                },
                PortMapping {
                    host_port: 9000,
                    sandbox_port: 9000,
                },
            ],
            allow_degraded: true,
            isolation: Isolation::Vm,
            join_network: None,
            join_trust: None,
            desktop: Some(DesktopSpec::default()),
        }
    }

    #[test]
    fn a_spec_survives_a_trip_through_json_exactly() {
        let spec = full_spec();
        let text = serde_json::to_string(&spec).unwrap();
        let back: SandboxSpec = serde_json::from_str(&text).unwrap();
        assert_eq!(back, spec);
        // And again, so that nothing is only equal by accident of defaults.
        assert_eq!(serde_json::to_string(&back).unwrap(), text);
        let plain = SandboxSpec {
            network: NetworkSpec::LoopbackOnly,
            terminal: Terminal::Inherit,
            ..spec
        };
        let back: SandboxSpec =
            serde_json::from_str(&serde_json::to_string(&plain).unwrap()).unwrap();
        assert_eq!(back, plain);
    }

    #[test]
    fn a_spec_with_a_part_the_reader_does_not_know_is_refused() {
        // A newer writer's restriction must not be dropped in silence.
        let mut doc = serde_json::to_value(full_spec()).unwrap();
        doc["resources"]["swap"] = 0.into();
        assert!(serde_json::from_value::<SandboxSpec>(doc).is_err());
    }

    #[test]
    fn defaults_are_sized_from_the_host_and_capped() {
        let d = defaults();
        assert_eq!(d.memory, 4 * GIB);
        assert_eq!(d.tmp_size, GIB);
        let big = Defaults::for_host(HostFacts {
            total_memory: 512 * GIB,
            cpus: 64,
            pid_max: 1 << 22,
        });
        assert_eq!(big.memory, 8 * GIB);
    }

    #[test]
    fn a_request_without_limits_still_gets_limits() {
        let spec = req(&["true"]).resolve(&defaults(), &[]).unwrap();
        assert_eq!(spec.resources.memory.value, 4 * GIB);
        assert!(!spec.resources.memory.explicit);
        assert_eq!(spec.resources.pids.value, 1024);
        assert_eq!(spec.resources.open_files, 4096);
    }

    #[test]
    fn explicit_limits_are_marked_explicit() {
        let mut r = req(&["true"]);
        r.memory = Some(64 * MIB);
        r.pids = Some(32);
        let spec = r.resolve(&defaults(), &[]).unwrap();
        assert!(spec.resources.memory.explicit);
        assert_eq!(
            spec.resources.pids,
            Limit {
                value: 32,
                explicit: true
            }
        );
    }

    #[test]
    fn an_empty_command_is_refused() {
        assert_eq!(
            req(&[]).resolve(&defaults(), &[]),
            Err(Field::Command.invalid(Problem::NoCommand))
        );
        assert_eq!(
            req(&[""]).resolve(&defaults(), &[]),
            Err(Field::Command.invalid(Problem::EmptyCommand))
        );
    }

    #[test]
    fn globs_of_files_the_host_runs_reach_the_spec_and_bad_ones_are_refused() {
        let mut r = req(&["true"]);
        r.runs_on_host = vec!["Makefile".into(), "**/*.mk".into()];
        let spec = r.resolve(&defaults(), &[]).unwrap();
        assert_eq!(spec.filesystem.runs_on_host, ["Makefile", "**/*.mk"]);
        for bad in ["", "/etc/Makefile", "../Makefile", "a/[b", "x**/y"] {
            let mut r = req(&["true"]);
            r.runs_on_host = vec![bad.into()];
            assert!(
                matches!(
                    problem(r.resolve(&defaults(), &[])),
                    Some((Field::RunsOnHost, Problem::BadGlob { .. }))
                ),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn relative_and_root_paths_are_refused() {
        let mut r = req(&["true"]);
        r.workspace = Some("project".into());
        assert!(matches!(
            problem(r.resolve(&defaults(), &[])),
            Some((Field::Workspace, Problem::RelativePath(_)))
        ));
        let mut r = req(&["true"]);
        r.rw = vec!["/".into()];
        assert!(matches!(
            problem(r.resolve(&defaults(), &[])),
            Some((Field::Rw, Problem::ForbiddenPath { .. }))
        ));
        let mut r = req(&["true"]);
        r.ro = vec!["/proc".into()];
        assert!(matches!(
            problem(r.resolve(&defaults(), &[])),
            Some((Field::Ro, Problem::ForbiddenPath { .. }))
        ));
    }

    #[test]
    fn impossible_limits_are_refused() {
        let mut r = req(&["true"]);
        r.pids = Some(1);
        assert_eq!(
            r.resolve(&defaults(), &[]),
            Err(Field::Pids.invalid(Problem::PidsTooSmall(1)))
        );
        let mut r = req(&["true"]);
        r.cpus = Some(-1.0);
        assert_eq!(
            r.resolve(&defaults(), &[]),
            Err(Field::Cpus.invalid(Problem::BadCpus(-1.0)))
        );
        let mut r = req(&["true"]);
        r.timeout = Some(Duration::ZERO);
        assert_eq!(
            r.resolve(&defaults(), &[]),
            Err(Field::Timeout.invalid(Problem::ZeroTimeout))
        );
        let mut r = req(&["true"]);
        r.memory = Some(1000);
        assert_eq!(
            r.resolve(&defaults(), &[]),
            Err(Field::Memory.invalid(Problem::MemoryTooSmall(1000)))
        );
    }

    #[test]
    fn add_host_takes_both_the_equals_and_the_docker_form() {
        let mut r = req(&["true"]);
        r.allow_domains = vec!["a.test".into()];
        r.add_hosts = vec![
            "Reg.Internal=10.1.2.3".into(),
            "db.internal:10.1.2.4".into(),
            "v6.internal:::1".into(),
            "br.internal=[fd00::1]".into(),
        ];
        let NetworkSpec::Egress(e) = r.resolve(&defaults(), &[]).unwrap().network else {
            panic!("no egress");
        };
        let hosts: Vec<String> = e.hosts.iter().map(|(n, ip)| format!("{n}={ip}")).collect();
        assert_eq!(
            hosts,
            [
                "reg.internal=10.1.2.3",
                "db.internal=10.1.2.4",
                "v6.internal=::1",
                "br.internal=fd00::1"
            ]
        );
        let mut r = req(&["true"]);
        r.allow_domains = vec!["a.test".into()];
        r.add_hosts = vec!["nothing".into()];
        assert_eq!(
            r.resolve(&defaults(), &[]),
            Err(Field::AddHost.invalid(Problem::BadAddHost("nothing".into())))
        );
    }

    #[test]
    fn a_host_port_opens_egress_to_the_host_alias_on_that_port_only() {
        let mut r = req(&["true"]);
        r.allow_host_ports = vec![5432, 5432];
        let NetworkSpec::Egress(e) = r.resolve(&defaults(), &[]).unwrap().network else {
            panic!("no egress");
        };
        assert_eq!(e.host_ports, [5432]);
        assert_eq!(e.domains.len(), 1);
        assert_eq!(e.domains[0].name, HOST_ALIAS);
        assert_eq!(e.domains[0].port, Some(5432));
        let mut r = req(&["true"]);
        r.allow_host_ports = vec![0];
        assert_eq!(
            r.resolve(&defaults(), &[]),
            Err(Field::AllowHostPort.invalid(Problem::BadHostPort))
        );
    }

    #[test]
    fn allow_cidr_never_names_a_range_that_holds_the_host() {
        for cidr in [
            "0.0.0.0/0",
            "::/0",
            "127.0.0.0/8",
            "0.0.0.0/8",
            "::ffff:0:0/96",
            "::ffff:127.0.0.1",
            "64:ff9b::/96",
            "2002::/16",
            "::1",
        ] {
            let mut r = req(&["true"]);
            r.allow_domains = vec!["a.test".into()];
            r.allow_cidr = vec!["10.0.0.0/8".into(), cidr.into()];
            let e = r.resolve(&defaults(), &[]).unwrap_err();
            assert!(
                matches!(e.problem(), Problem::CidrCoversHost { cidr: c, .. } if c == cidr),
                "{cidr}: {e}"
            );
            assert_eq!(e.problem().entry().as_deref(), Some(cidr));
            assert!(e.to_string().contains("--allow-host-port"), "{e}");
        }
    }

    #[test]
    fn add_host_refuses_an_unspecified_address_but_keeps_an_explicit_loopback() {
        for entry in [
            "a.test=0.0.0.0",
            "a.test=::",
            "a.test=::ffff:0.0.0.0",
            "a.test=0.1.2.3",
        ] {
            let mut r = req(&["true"]);
            r.allow_domains = vec!["a.test".into()];
            r.add_hosts = vec![entry.into()];
            assert_eq!(
                r.resolve(&defaults(), &[]),
                Err(Field::AddHost.invalid(Problem::AddHostUnspecified(entry.into()))),
                "{entry}"
            );
        }
        let mut r = req(&["true"]);
        r.allow_domains = vec!["a.test".into()];
        r.add_hosts = vec!["a.test=127.0.0.1".into(), "b.test=::ffff:127.0.0.1".into()];
        assert!(r.resolve(&defaults(), &[]).is_ok());
    }

    #[test]
    fn cidrs_and_published_ports_are_checked() {
        let mut r = req(&["true"]);
        r.allow_domains = vec!["a.test".into()];
        r.allow_cidr = vec!["10.1.2.3/16".into(), "fd00::1".into()];
        let NetworkSpec::Egress(e) = r.resolve(&defaults(), &[]).unwrap().network else {
            panic!("no egress");
        };
        let cidrs: Vec<String> = e.cidrs.iter().map(|c| c.to_string()).collect();
        assert_eq!(cidrs, ["10.1.0.0/16", "fd00::1/128"]);
        let mut r = req(&["true"]);
        r.allow_domains = vec!["a.test".into()];
        r.allow_cidr = vec!["10.1.2.3/40".into()];
        assert!(matches!(
            problem(r.resolve(&defaults(), &[])),
            Some((Field::AllowCidr, Problem::BadCidr(_)))
        ));
        let mut r = req(&["true"]);
        r.allow_cidr = vec!["10.0.0.0/8".into()];
        assert_eq!(
            r.resolve(&defaults(), &[]),
            Err(Field::AllowCidr.invalid(Problem::EgressWithoutDomains))
        );

        let mut r = req(&["true"]);
        r.publish = vec!["8080:3000".into(), "9000".into()];
        let spec = r.resolve(&defaults(), &[]).unwrap();
        assert_eq!(
            spec.publish,
            [
                PortMapping {
                    host_port: 8080,
                    sandbox_port: 3000
                },
                PortMapping {
                    host_port: 9000,
                    sandbox_port: 9000
                }
            ]
        );
        assert_eq!(spec.network, NetworkSpec::LoopbackOnly);
        for bad in ["0:80", "80:0", "a:b", "70000:1", "1:2:3"] {
            let mut r = req(&["true"]);
            r.publish = vec![bad.into()];
            assert_eq!(
                r.resolve(&defaults(), &[]),
                Err(Field::Publish.invalid(Problem::BadPublish(bad.into()))),
                "{bad}"
            );
        }
        let mut r = req(&["true"]);
        r.publish = vec!["8080:1".into(), "8080:2".into()];
        assert_eq!(
            r.resolve(&defaults(), &[]),
            Err(Field::Publish.invalid(Problem::DuplicatePublish(8080)))
        );
    }

    #[test]
    fn home_is_the_sandboxs_own_never_the_workspace() {
        let mut r = req(&["true"]);
        r.workspace = Some("/src/p".into());
        let spec = r.resolve(&defaults(), &[]).unwrap();
        assert!(spec.env.contains(&("HOME".into(), HOME_MOUNT.into())));
        assert_eq!(spec.filesystem.home, Home::Tmpfs);
        let spec = req(&["true"]).resolve(&defaults(), &[]).unwrap();
        assert!(spec.env.contains(&("HOME".into(), HOME_MOUNT.into())));
        // A prepared root tree brings its own home: HOME stays as it was.
        let mut r = req(&["true"]);
        r.workspace = Some("/src/p".into());
        r.rootfs = Some("/srv/root".into());
        let spec = r.resolve(&defaults(), &[]).unwrap();
        assert!(spec.env.contains(&("HOME".into(), "/workspace".into())));
        assert_eq!(spec.filesystem.home, Home::None);
        for bad in ["/home", "/home/sandbox", "/home/sandbox/.cache"] {
            let mut r = req(&["true"]);
            r.ro = vec![bad.into()];
            let e = r.resolve(&defaults(), &[]).unwrap_err();
            assert!(
                matches!(e.problem(), Problem::ForbiddenPath { .. }),
                "{bad}"
            );
        }
    }

    #[test]
    fn a_callers_secret_opens_its_hosts_as_a_callers_entries_and_the_owners_stay_the_owners() {
        let mut r = req(&["true"]);
        r.allow_domains = vec!["api.example.com".into()];
        r.secrets = vec![
            "POD@internal.example:22".into(),
            "OWN@uploads.example.com".into(),
            "BOTH@api.example.com".into(),
        ];
        r.caller_secrets = vec!["POD".into(), "BOTH".into()];
        let spec = r.resolve(&defaults(), &[]).unwrap();
        let NetworkSpec::Egress(e) = &spec.network else {
            panic!("no egress");
        };
        let caller = |name: &str| {
            e.domains
                .iter()
                .find(|d| d.name == name)
                .map(|d| d.caller)
                .unwrap_or_else(|| panic!("{name} is not allowed"))
        };
        // A pod's secret host never uses the node owner's pins or ranges.
        assert!(caller("internal.example"));
        assert!(!caller("uploads.example.com"));
        // The owner allowed it already: the owner's.
        assert!(!caller("api.example.com"));
    }

    #[test]
    fn a_secrets_hosts_are_allowed_and_its_tools_trust_the_sandbox_authority() {
        let mut r = req(&["true"]);
        r.allow_domains = vec!["api.example.com".into()];
        r.secrets = vec!["TOKEN@api.example.com,uploads.example.com".into()];
        let spec = r.resolve(&defaults(), &[]).unwrap();
        let NetworkSpec::Egress(e) = &spec.network else {
            panic!("no egress");
        };
        let names: Vec<&str> = e.domains.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, ["api.example.com", "uploads.example.com"]);
        assert_eq!(e.secrets.len(), 1);
        assert!(spec
            .env
            .contains(&("SSL_CERT_FILE".into(), CA_BUNDLE_PATH.into())));
        assert!(!spec.env.iter().any(|(k, _)| k == "TOKEN"));
        let mut r = req(&["true"]);
        r.upstream_ca = vec!["/etc/ca.pem".into()];
        assert_eq!(
            r.resolve(&defaults(), &[]),
            Err(Field::UpstreamCa.invalid(Problem::EgressWithoutDomains))
        );
        let spec = req(&["true"]).resolve(&defaults(), &[]).unwrap();
        assert!(!spec.env.iter().any(|(k, _)| k == "SSL_CERT_FILE"));
    }

    #[test]
    fn disk_defaults_to_half_the_memory_within_the_state_free_space() {
        assert_eq!(disk_limit(None, 4 * GIB, None).ok(), Some(2 * GIB));
        assert_eq!(disk_limit(None, 4 * GIB, Some(GIB)).ok(), Some(GIB / 2));
        assert_eq!(disk_limit(None, 64 * MIB, None).ok(), Some(64 * MIB));
        assert_eq!(disk_limit(Some(MIB), 4 * GIB, Some(GIB)).ok(), Some(MIB));
    }

    #[test]
    fn disk_of_zero_above_memory_or_above_the_free_space_is_refused() {
        for (asked, free) in [(0, None), (5 * GIB, None), (2 * GIB, Some(GIB))] {
            assert!(disk_limit(Some(asked), 4 * GIB, free).is_err(), "{asked}");
        }
    }
}
