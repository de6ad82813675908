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
//! JSON path, kind of value, doc. Every door's values become one
//! [`compose::Layer`], and [`resolve`] reads that layer by the table, one
//! function per section of the spec. An error about a value
//! ([`ResolveError`]) carries its [`Field`], so each door names it its own
//! way.

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
pub mod fit;
mod home;
pub mod hooks;
pub mod layer;
#[cfg(test)]
mod lint;
pub mod oci;
pub mod profile;
pub mod read;
pub mod requests;
pub mod resolve;
mod schema;
mod secrets;
pub mod trust;
mod units;
pub mod validate;
pub mod volumes;

pub use desktop::DesktopSpec;
pub use domains::{normalize_name, DomainError, DomainRule, DEFAULT_PORTS};
pub use env::{resolve_env, EnvRequest, ENV_ALLOWLIST};
pub use error::{Problem, ResolveError, SpecError};
pub use fields::{word, Door, Doors, Field, FieldInfo, Kind, Reach, Running, Shape, FIELDS};
pub use home::{CacheMount, Home, CACHES, HOME_MOUNT};
pub use hooks::TestHooks;
pub use layer::Trust;
pub use resolve::{parse_domains, KeptWorkspace, Placement};
pub use secrets::{SecretRule, SecretSource, SecretSpec, CA_BUNDLE_PATH, CA_CERT_PATH};
pub use trust::Refusal;
pub use units::{format_size, parse_duration, parse_size, ParseError};
pub use volumes::VolumeMount;

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
    /// The name of the sandbox's user inside it (`process.user`): its
    /// entry in the sandbox's `/etc/passwd`, whose home is the sandbox's.
    /// `None`: the files of the root tree say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
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
    /// The only programs the sandbox may execute (`process.allow_exec`):
    /// paths inside the sandbox, globs, or names looked up on its `PATH`.
    /// Empty: any program.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow_exec: Vec<String>,
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
    /// gVisor's kernel in user space (runsc) between the sandbox and the
    /// host's kernel.
    Gvisor,
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
    /// Where the home is mounted inside (`filesystem.home`); `None`:
    /// [`HOME_MOUNT`]. See [`FilesystemSpec::home_mount`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub home_at: Option<PathBuf>,
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
    /// Host directories bound at another path inside
    /// (`filesystem.volumes`), after every other bind.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<VolumeMount>,
    /// The identity (device, inode) the directory at `workspace` must
    /// have: a named sandbox's, recorded when it was created, set by its
    /// supervisor for each start (never stored, never set by a door). The
    /// backend compares it on the very descriptor it mounts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace_identity: Option<(u64, u64)>,
}

impl FilesystemSpec {
    /// Where the sandbox's home is mounted inside, and its `HOME`.
    pub fn home_mount(&self) -> &Path {
        self.home_at.as_deref().unwrap_or(Path::new(HOME_MOUNT))
    }
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
    /// Bytes the sandbox's events may take in its audit log; past them
    /// its decisions are only counted (absent in specs stored before it
    /// existed: the default then).
    #[serde(default = "default_audit_budget")]
    pub audit_budget: u64,
}

/// The audit budget of a spec that names none.
pub const DEFAULT_AUDIT_BUDGET: u64 = 32 << 20;

fn default_audit_budget() -> u64 {
    DEFAULT_AUDIT_BUDGET
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
    /// Request rules (`egress.allow_requests`, `deny_requests`,
    /// `ask_requests`): each request to a name they are for is decided on
    /// its own, over TLS the proxy terminates.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub requests: Vec<requests::RequestRule>,
    /// Names with a port the owner let carry what is not TLS naming them
    /// though they are a secret's host or pinned beside one
    /// (`egress.secret_plain_ports`): spliced as it is, never scrubbed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secret_plain_ports: Vec<DomainRule>,
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
                home_at: Some("/home/user".into()),
                caches: Vec::new(),
                workdir: None,
                disk: Some(DiskLimit {
                    bytes: GIB,
                    asked: false,
                }),
                volumes: vec![VolumeMount {
                    host: "/srv/data".into(),
                    inside: "/mnt/data".into(),
                    writable: false,
                }],

                workspace_identity: Some((64768, 1 << 40)),
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
                audit_budget: DEFAULT_AUDIT_BUDGET,
            },
            env: vec![
                ("PATH".into(), "/usr/bin:/bin".into()),
                ("EMPTY".into(), String::new()),
                ("UNICODE".into(), "é ✓".into()),
            ],
            terminal: Terminal::Pty,
            hostname: "agent".into(),
            user: Some("user".into()),
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
                requests: vec![
                    requests::RequestRule::parse(
                        requests::RequestAction::Deny,
                        "* github.com/**/git-receive-pack",
                    )
                    .unwrap(),
                    requests::RequestRule::parse(
                        requests::RequestAction::Allow,
                        "POST mcp.test/mcp?x=1 rpc:tools/list",
                    )
                    .unwrap(),
                ],
                secret_plain_ports: vec![rule("git.example.com:22")],
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
            allow_exec: vec!["/usr/bin/git".into(), "python3*".into()],
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
}
