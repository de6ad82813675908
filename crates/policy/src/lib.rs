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
mod units;
pub mod validate;

pub use domains::{normalize_name, DomainError, DomainRule, DEFAULT_PORTS};
pub use env::{resolve_env, EnvRequest, ENV_ALLOWLIST};
pub use units::{format_size, parse_duration, parse_size, ParseError};

use serde::Serialize;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The explicit proxy the sandbox's environment names (its own address,
/// where every connection is intercepted anyway).
pub const EXPLICIT_PROXY_URL: &str = "http://10.255.255.1:3128";

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
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum NetworkSpec {
    /// A fresh network namespace holding only `lo`.
    LoopbackOnly,
    /// Every TCP connection and DNS query leaves through warden's proxy,
    /// which allows only the names on the list.
    Egress(EgressSpec),
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
    /// Print each decision on stderr as it is made.
    pub log: bool,
    /// Bytes (both ways, all connections) after which new connections are
    /// refused.
    pub quota: Option<u64>,
    /// A connection with no byte either way for this long is closed.
    pub idle_timeout: Duration,
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
    /// `--add-host NAME=IP` entries.
    pub add_hosts: Vec<String>,
    /// `--net-log`: one line per egress decision on stderr.
    pub net_log: bool,
    /// `--egress-quota`.
    pub egress_quota: Option<u64>,
    /// `--egress-idle-timeout`.
    pub egress_idle_timeout: Option<Duration>,
    /// `--allow-cidr` entries (carried; enforced by the egress issue).
    pub allow_cidr: Vec<String>,
    /// `--allow-host-port` entries (carried; enforced by the egress issue).
    pub allow_host_ports: Vec<u16>,
    /// `--publish HOSTPORT:PORT` entries (carried; enforced by the egress issue).
    pub publish: Vec<String>,
    /// `--ask` (carried; enforced by the egress issue).
    pub ask: bool,
    /// `filesystem.mode: overlay` (reserved for the workspace issue).
    pub overlay: bool,
    /// `--json-events FILE`: where the front door appends events. Not part
    /// of the spec; the front door opens it.
    pub json_events: Option<PathBuf>,
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
    #[error("--allow-http, --add-host and --egress-quota need at least one --allow-domain")]
    EgressWithoutDomains,
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
        let env = resolve_env(&self.env, host_env, home)?;
        let network = if self.allow_domains.is_empty() {
            if self.allow_http || !self.add_hosts.is_empty() || self.egress_quota.is_some() {
                return Err(SpecError::EgressWithoutDomains);
            }
            NetworkSpec::LoopbackOnly
        } else {
            let domains = self
                .allow_domains
                .iter()
                .map(|d| DomainRule::parse(d))
                .collect::<Result<Vec<_>, _>>()?;
            let mut hosts = Vec::new();
            for entry in &self.add_hosts {
                let (name, ip) = entry
                    .split_once('=')
                    .ok_or_else(|| SpecError::BadAddHost(entry.clone()))?;
                let name =
                    normalize_name(name).map_err(|_| SpecError::BadAddHost(entry.clone()))?;
                let ip = ip
                    .trim()
                    .parse()
                    .map_err(|_| SpecError::BadAddHost(entry.clone()))?;
                hosts.push((name, ip));
            }
            NetworkSpec::Egress(EgressSpec {
                domains,
                allow_http: self.allow_http,
                hosts,
                log: self.net_log,
                quota: self.egress_quota,
                idle_timeout: self
                    .egress_idle_timeout
                    .unwrap_or(DEFAULT_EGRESS_IDLE_TIMEOUT),
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

        Ok(SandboxSpec {
            command: self.command,
            filesystem: FilesystemSpec {
                rootfs: self.rootfs,
                workspace: self.workspace,
                binds,
                tmp_size,
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
            allow_degraded: self.allow_degraded,
        })
    }
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
    fn home_is_the_workspace_when_there_is_one() {
        let mut r = req(&["true"]);
        r.workspace = Some("/src/p".into());
        let spec = r.resolve(&defaults(), &[]).unwrap();
        assert!(spec.env.contains(&("HOME".into(), "/workspace".into())));
        let spec = req(&["true"]).resolve(&defaults(), &[]).unwrap();
        assert!(spec.env.contains(&("HOME".into(), "/tmp".into())));
    }
}
