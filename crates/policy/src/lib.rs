//! The resolved configuration of one sandbox, [`SandboxSpec`], and the rules that
//! build it from what a person asked for.
//!
//! This crate decides *what* a sandbox may do; it never does it. It makes no
//! syscalls and reads nothing but the values handed to it, so every front door
//! (CLI flags, later profiles and API requests) produces a spec through the same
//! code, and the enforcers (`warden-jail`, later `warden-egress`) only ever see
//! the spec.

pub mod compose;
mod domains;
mod env;
pub mod profile;
mod secrets;
mod units;
pub mod validate;

pub use domains::{normalize_name, DomainError, DomainRule, DEFAULT_PORTS};
pub use env::{resolve_env, EnvRequest, ENV_ALLOWLIST};
pub use secrets::{SecretRule, SecretSource, SecretSpec, CA_BUNDLE_PATH, CA_CERT_PATH};
pub use units::{format_size, parse_duration, parse_size, ParseError};

use serde::Serialize;
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
#[derive(Debug, Clone, PartialEq, Serialize)]
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
}

/// The sandbox's file tree.
#[derive(Debug, Clone, PartialEq, Serialize)]
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
}

/// The directories of a workspace overlay, kept by warden's state store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OverlayDirs {
    pub upper: PathBuf,
    pub work: PathBuf,
}

/// One extra bind mount.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Bind {
    pub path: PathBuf,
    pub writable: bool,
}

/// Limits on what the sandbox may consume.
#[derive(Debug, Clone, PartialEq, Serialize)]
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Limit<T> {
    pub value: T,
    pub explicit: bool,
}

/// Whether the command gets a pseudo-terminal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum NetworkSpec {
    /// A fresh network namespace holding only `lo`.
    LoopbackOnly,
    /// Every TCP connection and DNS query leaves through warden's proxy,
    /// which allows only the names on the list.
    Egress(EgressSpec),
}

/// One `--publish HOSTPORT:PORT`: the host's 127.0.0.1:HOSTPORT leads to
/// the sandbox's 127.0.0.1:PORT.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct PortMapping {
    pub host_port: u16,
    pub sandbox_port: u16,
}

/// What the egress proxy allows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
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
}

/// Default of [`EgressSpec::idle_timeout`].
pub const DEFAULT_EGRESS_IDLE_TIMEOUT: Duration = Duration::from_secs(600);

/// Facts about the host that defaults are sized from. Gathered by the caller,
/// so that this crate does no I/O.
#[derive(Debug, Clone, Copy)]
pub struct HostFacts {
    pub total_memory: u64,
    pub cpus: u32,
}

/// Defaults applied when no limit is given, sized from the host.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Defaults {
    pub memory: u64,
    pub pids: u64,
    pub tmp_size: u64,
    pub open_files: u64,
    pub file_size: u64,
}

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
    pub memory: Option<u64>,
    pub pids: Option<u64>,
    pub cpus: Option<f64>,
    pub timeout: Option<Duration>,
    pub open_files: Option<u64>,
    pub file_size: Option<u64>,
    pub env: EnvRequest,
    pub terminal: Terminal,
    pub hostname: Option<String>,
    pub allow_degraded: bool,
    /// `--allow-domain` entries; none means no network at all.
    pub allow_domains: Vec<String>,
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

/// Why a request cannot become a spec. Each message says what to change.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum SpecError {
    #[error("no command given: put CMD after `--`, e.g. `warden run -- bash`, or use a --profile that has a `command`")]
    NoCommand,
    #[error("the command name is empty")]
    EmptyCommand,
    #[error("{what} {path} must be an absolute path")]
    RelativePath { what: &'static str, path: PathBuf },
    #[error("{what} {path} is not allowed: {why}")]
    ForbiddenPath {
        what: &'static str,
        path: PathBuf,
        why: &'static str,
    },
    #[error("--memory {0} bytes is too small: a sandbox needs at least 16M")]
    MemoryTooSmall(u64),
    #[error("--pids {0} is too small: a sandbox needs at least 2 (its init and the command)")]
    PidsTooSmall(u64),
    #[error("--cpus {0} must be a positive number of cores, e.g. 0.5 or 2")]
    BadCpus(f64),
    #[error("--timeout must be longer than zero")]
    ZeroTimeout,
    #[error("--open-files {0} must be between 16 and 1048576")]
    BadOpenFiles(u64),
    #[error("--tmp-size {0} bytes is too small: use at least 1M")]
    TmpTooSmall(u64),
    #[error("hostname {0:?} is not valid: use 1-63 letters, digits and '-'")]
    BadHostname(String),
    #[error("environment variable name {0:?} is not valid: use letters, digits and '_', not starting with a digit")]
    BadEnvName(String),
    #[error("--env {0:?} must have the form NAME=VALUE")]
    BadEnvAssignment(String),
    #[error(transparent)]
    Domain(#[from] DomainError),
    #[error("--add-host {0:?} must have the form NAME=IP, e.g. registry.internal=10.1.2.3")]
    BadAddHost(String),
    #[error("--allow-cidr {0:?} must be an address range such as 10.1.0.0/16 or fd00::/8")]
    BadCidr(String),
    #[error("--allow-host-port 0 is not a port: give a number from 1 to 65535")]
    BadHostPort,
    #[error("--publish {0:?} must have the form HOSTPORT:PORT with ports from 1 to 65535, e.g. 8080:3000")]
    BadPublish(String),
    #[error("--publish: host port {0} is given twice")]
    DuplicatePublish(u16),
    #[error("--allow-domain {0:?} names the host itself; open one of its ports with --allow-host-port PORT instead")]
    HostAliasAsDomain(String),
    #[error("--overlay needs a --workspace to lay the overlay over")]
    OverlayWithoutWorkspace,
    #[error("--overlay was asked for but no overlay directories were prepared (a front door must create them in warden's state directory)")]
    OverlayWithoutState,
    #[error("--allow-http, --add-host, --allow-cidr, --egress-quota and --upstream-ca need at least one --allow-domain, --allow-host-port, --secret or --ask")]
    EgressWithoutDomains,
    #[error("--secret {entry:?}: {why}; write NAME@HOST[,HOST...], NAME=env:VARIABLE@HOSTS, NAME=file:PATH@HOSTS or NAME=cmd:PROGRAM ARGS@HOSTS")]
    BadSecret { entry: String, why: String },
    #[error("--secret-rule {entry:?}: {why}; write [METHOD ]HOST[/PATH], e.g. \"GET api.github.com/repos/acme/*\"")]
    BadSecretRule { entry: String, why: String },
    #[error(
        "--secret {0} is given twice; give each secret once, with all its hosts: NAME@HOST1,HOST2"
    )]
    DuplicateSecret(String),
    #[error("--secret-in-body {0}: there is no --secret {0}")]
    UnknownSecretInBody(String),
    #[error("--pass-env {0} would copy a secret's real value into the sandbox; leave it out (the sandbox gets a placeholder from --secret)")]
    SecretPassed(String),
    #[error("--env {0}=... and --secret {0} both set {0}; leave out the --env")]
    SecretSet(String),
}

impl Request {
    /// Resolve this request into a spec: apply defaults, check every value,
    /// and build the command's environment from `host_env`.
    pub fn resolve(
        self,
        defaults: &Defaults,
        host_env: &[(String, String)],
    ) -> Result<SandboxSpec, SpecError> {
        let first = self.command.first().ok_or(SpecError::NoCommand)?;
        if first.is_empty() {
            return Err(SpecError::EmptyCommand);
        }
        if let Some(root) = &self.rootfs {
            check_absolute("--rootfs", root)?;
            if root == Path::new("/") {
                return Err(SpecError::ForbiddenPath {
                    what: "--rootfs",
                    path: root.clone(),
                    why: "the host's own root would expose every host file; leave --rootfs out to use the host's system directories read-only",
                });
            }
        }
        if let Some(ws) = &self.workspace {
            check_absolute("--workspace", ws)?;
            if ws == Path::new("/") {
                return Err(SpecError::ForbiddenPath {
                    what: "--workspace",
                    path: ws.clone(),
                    why: "it would make the whole host writable; pass a project directory",
                });
            }
        }
        let mut binds = Vec::new();
        for (paths, writable, what) in [(&self.ro, false, "--ro"), (&self.rw, true, "--rw")] {
            for p in paths {
                check_absolute(what, p)?;
                if p == Path::new("/") {
                    return Err(SpecError::ForbiddenPath {
                        what,
                        path: p.clone(),
                        why: "binding the host's root exposes every host file",
                    });
                }
                if reserved_destination(p) {
                    return Err(SpecError::ForbiddenPath {
                        what,
                        path: p.clone(),
                        why: "warden builds /proc, /dev, /tmp and /workspace itself; bind a path below another directory",
                    });
                }
                binds.push(Bind {
                    path: p.clone(),
                    writable,
                });
            }
        }

        let memory = limit(self.memory, defaults.memory);
        if memory.value < 16 * MIB {
            return Err(SpecError::MemoryTooSmall(memory.value));
        }
        let pids = limit(self.pids, defaults.pids);
        if pids.value < 2 {
            return Err(SpecError::PidsTooSmall(pids.value));
        }
        if let Some(c) = self.cpus {
            if !(c.is_finite() && c > 0.0) {
                return Err(SpecError::BadCpus(c));
            }
        }
        if self.timeout == Some(Duration::ZERO) {
            return Err(SpecError::ZeroTimeout);
        }
        let open_files = self.open_files.unwrap_or(defaults.open_files);
        if !(16..=1 << 20).contains(&open_files) {
            return Err(SpecError::BadOpenFiles(open_files));
        }
        let tmp_size = self.tmp_size.unwrap_or(defaults.tmp_size);
        if tmp_size < MIB {
            return Err(SpecError::TmpTooSmall(tmp_size));
        }
        let hostname = self.hostname.unwrap_or_else(|| "warden".to_string());
        if !valid_hostname(&hostname) {
            return Err(SpecError::BadHostname(hostname));
        }
        let home = if self.workspace.is_some() {
            WORKSPACE_MOUNT
        } else {
            "/tmp"
        };
        let secrets = secrets::parse_secrets(&self.secrets, &self.secret_in_body, &self.env)?;
        let secret_rules = secrets::parse_rules(&self.secret_rules, &secrets)?;
        for p in &self.upstream_ca {
            check_absolute("--upstream-ca", p)?;
        }
        let env = resolve_env(&self.env, host_env, home)?;
        let publish = parse_publish(&self.publish)?;
        if self.overlay && self.workspace.is_none() {
            return Err(SpecError::OverlayWithoutWorkspace);
        }
        if self.overlay && self.overlay_dirs.is_none() {
            // Never a silent fall back to writing the real workspace.
            return Err(SpecError::OverlayWithoutState);
        }
        let network = if self.allow_domains.is_empty()
            && self.allow_host_ports.is_empty()
            && !self.ask
            && secrets.is_empty()
        {
            if self.allow_http
                || !self.add_hosts.is_empty()
                || !self.allow_cidr.is_empty()
                || self.egress_quota.is_some()
                || !self.upstream_ca.is_empty()
            {
                return Err(SpecError::EgressWithoutDomains);
            }
            NetworkSpec::LoopbackOnly
        } else {
            let mut domains = self
                .allow_domains
                .iter()
                .map(|d| DomainRule::parse(d))
                .collect::<Result<Vec<_>, _>>()?;
            // The host's own services have a flag of their own.
            if let Some(d) = domains
                .iter()
                .find(|d| d.name == HOST_ALIAS || d.name == "warden.internal")
            {
                return Err(SpecError::HostAliasAsDomain(d.source.clone()));
            }
            // A secret's hosts are allowed destinations: the value
            // is useless if its own hosts cannot be reached.
            for s in &secrets {
                for h in &s.hosts {
                    let covered = domains.iter().any(|d| {
                        d.name == h.name && d.subdomains == h.subdomains && d.port == h.port
                    });
                    if !covered {
                        let mut rule = h.clone();
                        rule.source = format!("--secret {}@{}", s.name, h.source);
                        domains.push(rule);
                    }
                }
            }
            let mut host_ports = Vec::new();
            for &port in &self.allow_host_ports {
                if port == 0 {
                    return Err(SpecError::BadHostPort);
                }
                if !host_ports.contains(&port) {
                    host_ports.push(port);
                    domains.push(DomainRule {
                        name: HOST_ALIAS.to_string(),
                        subdomains: false,
                        port: Some(port),
                        source: format!("--allow-host-port {port}"),
                    });
                }
            }
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
                        .map_err(|_| SpecError::BadCidr(c.to_string()))
                })
                .collect::<Result<Vec<_>, _>>()?;
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
                secrets: secrets.clone(),
                secret_rules,
                upstream_ca: self.upstream_ca.clone(),
            })
        };
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

        Ok(SandboxSpec {
            command: self.command,
            filesystem: FilesystemSpec {
                rootfs: self.rootfs,
                workspace: self.workspace,
                binds,
                tmp_size,
                overlay: if self.overlay {
                    self.overlay_dirs
                } else {
                    None
                },
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
        })
    }
}

/// `NAME=IP`, or `NAME:IP` as `docker run --add-host` writes it.
fn parse_add_host(entry: &str) -> Result<(String, std::net::IpAddr), SpecError> {
    let bad = || SpecError::BadAddHost(entry.to_string());
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
    Ok((name, ip.parse().map_err(|_| bad())?))
}

fn parse_publish(entries: &[String]) -> Result<Vec<PortMapping>, SpecError> {
    let mut out: Vec<PortMapping> = Vec::new();
    for entry in entries {
        let bad = || SpecError::BadPublish(entry.clone());
        let port = |p: &str| p.trim().parse::<u16>().ok().filter(|p| *p != 0);
        let (host_port, sandbox_port) = match entry.split_once(':') {
            Some((h, s)) => (port(h).ok_or_else(bad)?, port(s).ok_or_else(bad)?),
            None => {
                let p = port(entry).ok_or_else(bad)?;
                (p, p)
            }
        };
        if out.iter().any(|m| m.host_port == host_port) {
            return Err(SpecError::DuplicatePublish(host_port));
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

fn check_absolute(what: &'static str, p: &Path) -> Result<(), SpecError> {
    if p.is_absolute() {
        Ok(())
    } else {
        Err(SpecError::RelativePath {
            what,
            path: p.to_path_buf(),
        })
    }
}

/// Destinations that warden assembles itself and that a bind must not replace.
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

#[cfg(test)]
mod tests {
    use super::*;

    fn defaults() -> Defaults {
        Defaults::for_host(HostFacts {
            total_memory: 8 * GIB,
            cpus: 2,
        })
    }

    fn req(cmd: &[&str]) -> Request {
        Request {
            command: cmd.iter().map(|s| s.to_string()).collect(),
            terminal: Terminal::Inherit,
            ..Default::default()
        }
    }

    #[test]
    fn defaults_are_sized_from_the_host_and_capped() {
        let d = defaults();
        assert_eq!(d.memory, 4 * GIB);
        assert_eq!(d.tmp_size, GIB);
        let big = Defaults::for_host(HostFacts {
            total_memory: 512 * GIB,
            cpus: 64,
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
            Err(SpecError::NoCommand)
        );
        assert_eq!(
            req(&[""]).resolve(&defaults(), &[]),
            Err(SpecError::EmptyCommand)
        );
    }

    #[test]
    fn relative_and_root_paths_are_refused() {
        let mut r = req(&["true"]);
        r.workspace = Some("project".into());
        assert!(matches!(
            r.resolve(&defaults(), &[]),
            Err(SpecError::RelativePath { .. })
        ));
        let mut r = req(&["true"]);
        r.rw = vec!["/".into()];
        assert!(matches!(
            r.resolve(&defaults(), &[]),
            Err(SpecError::ForbiddenPath { .. })
        ));
        let mut r = req(&["true"]);
        r.ro = vec!["/proc".into()];
        assert!(matches!(
            r.resolve(&defaults(), &[]),
            Err(SpecError::ForbiddenPath { .. })
        ));
    }

    #[test]
    fn impossible_limits_are_refused() {
        let mut r = req(&["true"]);
        r.pids = Some(1);
        assert_eq!(r.resolve(&defaults(), &[]), Err(SpecError::PidsTooSmall(1)));
        let mut r = req(&["true"]);
        r.cpus = Some(-1.0);
        assert_eq!(r.resolve(&defaults(), &[]), Err(SpecError::BadCpus(-1.0)));
        let mut r = req(&["true"]);
        r.timeout = Some(Duration::ZERO);
        assert_eq!(r.resolve(&defaults(), &[]), Err(SpecError::ZeroTimeout));
        let mut r = req(&["true"]);
        r.memory = Some(1000);
        assert_eq!(
            r.resolve(&defaults(), &[]),
            Err(SpecError::MemoryTooSmall(1000))
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
            Err(SpecError::BadAddHost("nothing".into()))
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
        assert_eq!(r.resolve(&defaults(), &[]), Err(SpecError::BadHostPort));
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
            r.resolve(&defaults(), &[]),
            Err(SpecError::BadCidr(_))
        ));
        let mut r = req(&["true"]);
        r.allow_cidr = vec!["10.0.0.0/8".into()];
        assert_eq!(
            r.resolve(&defaults(), &[]),
            Err(SpecError::EgressWithoutDomains)
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
                Err(SpecError::BadPublish(bad.into())),
                "{bad}"
            );
        }
        let mut r = req(&["true"]);
        r.publish = vec!["8080:1".into(), "8080:2".into()];
        assert_eq!(
            r.resolve(&defaults(), &[]),
            Err(SpecError::DuplicatePublish(8080))
        );
    }

    #[test]
    fn home_is_the_workspace_when_there_is_one() {
        let mut r = req(&["true"]);
        r.workspace = Some("/src/p".into());
        let spec = r.resolve(&defaults(), &[]).unwrap();
        assert!(spec.env.contains(&("HOME".into(), "/workspace".into())));
        let spec = req(&["true"]).resolve(&defaults(), &[]).unwrap();
        assert!(spec.env.contains(&("HOME".into(), "/tmp".into())));
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
            Err(SpecError::EgressWithoutDomains)
        );
        let spec = req(&["true"]).resolve(&defaults(), &[]).unwrap();
        assert!(!spec.env.iter().any(|(k, _)| k == "SSL_CERT_FILE"));
    }
}
