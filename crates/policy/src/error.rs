//! Why a request cannot become a spec: what is wrong ([`Problem`], in words
//! that name no door) and the [`Field`] it concerns, so that each door says
//! where in its own words: the CLI the flag, a profile its `file:line:column`
//! and key, the API its JSON pointer.

use std::fmt;
use std::path::PathBuf;

use crate::fields::{word, Door, Field};
use crate::DomainError;

/// What is wrong with a value. The text follows the name of the field it
/// concerns (`--memory 1024 bytes is too small...`, `resources.memory: 1024
/// bytes is too small...`), so it never names that field itself; it names
/// other options by their profile key in backticks (`` `resources.disk` ``),
/// which each door words its own way ([`crate::word`]).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Problem {
    #[error("no command given: give the command to run, or a profile that has a `command`")]
    NoCommand,
    #[error("the command name is empty")]
    EmptyCommand,
    #[error("an argument of the command holds a NUL byte, which no program's arguments can carry")]
    NulInCommand,
    #[error("{0} must be an absolute path")]
    RelativePath(PathBuf),
    #[error("{path} is not allowed: {why}")]
    ForbiddenPath { path: PathBuf, why: &'static str },
    #[error("{0} bytes is too small: a sandbox needs at least 16M")]
    MemoryTooSmall(u64),
    #[error("{0} is too small: a sandbox needs at least 2 (its init and the command)")]
    PidsTooSmall(u64),
    #[error("{0} must be a positive number of cores, e.g. 0.5 or 2")]
    BadCpus(f64),
    #[error("{asked} is more cores than this host has ({host}): give at most {host}, or leave it out for no CPU limit")]
    CpusAboveHost { asked: f64, host: u32 },
    #[error("{asked} is more processes than the kernel can have ({max}, its pid_max): give at most {max}, or leave it out for the default")]
    PidsAboveKernel { asked: u64, max: u64 },
    #[error("must be longer than zero")]
    ZeroTimeout,
    #[error("0 would make every write fail (the largest file would be empty): give a size such as 1G, or leave it out for the default")]
    ZeroFileSize,
    #[error("0 would make every write to the workspace fail: give a size such as 2G, or leave it out for the default (half the memory limit)")]
    ZeroDisk,
    #[error("{} is more than the memory limit ({}): the layer is held in memory while the sandbox runs and counts against `resources.memory`; lower `resources.disk` or raise `resources.memory`", crate::units::format_size(*disk), crate::units::format_size(*memory))]
    DiskOverMemory { disk: u64, memory: u64 },
    #[error("{} is more than the host can give: the file system of warden's state has {} free; lower `resources.disk` or free space there", crate::units::format_size(*disk), crate::units::format_size(*free))]
    DiskOverFree { disk: u64, free: u64 },
    #[error("must be longer than zero: 0 would close every connection at once; give a duration such as 30s, or leave it out for the default (10m)")]
    ZeroIdleTimeout,
    #[error("{0} must be between 16 and 1048576")]
    BadOpenFiles(u64),
    #[error("{0} bytes is too small: use at least 1M")]
    TmpTooSmall(u64),
    #[error("{0:?} is not a valid hostname: use 1-63 letters, digits and '-'")]
    BadHostname(String),
    #[error("{0:?} is not a valid user name: use 1-32 lower-case letters, digits, '_' and '-', starting with a letter or '_'")]
    BadUserName(String),
    #[error("the home directory {0:?} cannot be placed: use /root or /home/NAME (NAME one plain directory name)")]
    BadHome(String),
    #[error("`filesystem.home` and `process.user` need the sandbox's own home, which a prepared root tree (`filesystem.rootfs`) or a VM's guest brings itself")]
    HomeWithoutMount,
    #[error("{0:?} is not an isolation: use `process` (the default), `gvisor` or `vm`")]
    BadIsolation(String),
    #[error("{0:?} is not a valid variable name: use letters, digits and '_', not starting with a digit")]
    BadEnvName(String),
    #[error("{0:?} must have the form NAME=VALUE")]
    BadEnvAssignment(String),
    #[error(
        "the value of variable {0:?} holds a NUL byte, which no program's environment can carry"
    )]
    NulInEnvValue(String),
    #[error(transparent)]
    Domain(#[from] DomainError),
    #[error("{0:?} must have the form NAME=IP, e.g. registry.internal=10.1.2.3")]
    BadAddHost(String),
    #[error("{0:?} must be an address range such as 10.1.0.0/16 or fd00::/8")]
    BadCidr(String),
    #[error("{cidr:?} covers {range} ({what}), which `egress.allow_cidrs` may never open: name the private ranges you need (such as 10.0.0.0/8 or fd00::/8), and reach a service of the host with `egress.host_ports PORT`")]
    CidrCoversHost {
        cidr: String,
        range: String,
        what: &'static str,
    },
    #[error("{0:?} pins the name to an unspecified address (0.0.0.0/8, ::, or an IPv6 form of one), which lands on the host itself: give the address of the service, or use `egress.host_ports PORT` for a service of the host")]
    AddHostUnspecified(String),
    #[error("0 is not a port: give a number from 1 to 65535")]
    BadHostPort,
    #[error("{0:?} names no port: give the name and the one port that may carry what is not TLS, e.g. forge.example:22")]
    PlainPortWithoutPort(String),
    #[error("{0:?} must have the form HOSTPORT:PORT with ports from 1 to 65535, e.g. 8080:3000")]
    BadPublish(String),
    #[error("gives host port {0} twice")]
    DuplicatePublish(u16),
    #[error(
        "{0:?} names the host itself; open one of its ports with `egress.host_ports PORT` instead"
    )]
    HostAliasAsDomain(String),
    #[error("needs a `filesystem.workspace` to lay the overlay over")]
    OverlayWithoutWorkspace,
    #[error("was asked for but no overlay directories were prepared (a front door must create them in warden's state directory)")]
    OverlayWithoutState,
    #[error("{name:?} is not a cache warden knows: use one of {known}")]
    UnknownCache { name: String, known: String },
    #[error("needs warden's state directory to keep the caches in (set WARDEN_STATE_DIR, XDG_STATE_HOME or HOME)")]
    CachesWithoutState,
    #[error("cannot be used with `filesystem.rootfs` or `isolation vm`: a prepared root tree or a VM's guest brings its own home, where warden mounts nothing")]
    CachesWithRootfs,
    #[error("cannot be used with `secrets`: learning allows every name, so a secret's placeholder could go anywhere; learn the names first, then run with the secret and the profile lines learned")]
    LearnWithSecrets,
    #[error(
        "cannot be used with `egress.ask`: learning mode allows what `egress.ask` would ask about"
    )]
    LearnWithAsk,
    #[error(
        "needs at least one of `egress.domains`, `egress.host_ports`, `secrets` or `egress.ask`"
    )]
    EgressWithoutDomains,
    #[error("{entry:?}: {why}; write NAME@HOST[,HOST...], NAME=env:VARIABLE@HOSTS, NAME=file:PATH@HOSTS or NAME=cmd:PROGRAM ARGS@HOSTS")]
    BadSecret { entry: String, why: String },
    #[error("secret `{name}`: its program {program:?} is a relative path, which would mean whatever directory warden was started from; name it by its absolute path (outside any directory a sandbox may write), or by a bare name found on the fixed search path secret programs run with")]
    RelativeSecretProgram { name: String, program: String },
    #[error("{entry:?}: its program and arguments cannot be split into words (a quote is left open, or a backslash ends the text); close the quote, e.g. cmd:sh -c 'pass show x'")]
    UnsplitSecretProgram { entry: String },
    #[error(
        "{entry:?}: {why}; write [METHOD ]HOST[/PATH], e.g. \"GET api.github.com/repos/acme/*\""
    )]
    BadSecretRule { entry: String, why: String },
    #[error("{0}")]
    BadRequestRule(crate::requests::RuleError),
    #[error("{0} is given twice; give each secret once, with all its hosts: NAME@HOST1,HOST2")]
    DuplicateSecret(String),
    #[error("{0}: there is no `secrets {0}`")]
    UnknownSecretInBody(String),
    #[error("{0} would copy a secret's real value into the sandbox; leave it out (the sandbox gets a placeholder from `secrets`)")]
    SecretPassed(String),
    #[error("{0}=... and `secrets {0}` both set {0}; leave out the `env.set` entry")]
    SecretSet(String),
    #[error("{entry:?}: {why}; write a glob relative to the workspace, e.g. Makefile or **/*.mk")]
    BadGlob { entry: String, why: String },
    #[error("volume {entry:?}: {why}")]
    BadVolume { entry: String, why: &'static str },
    #[error("{entry:?}: {why}; name a program by its path inside the sandbox (/usr/bin/git), a directory of programs, a glob (/usr/bin/python3*) or a name looked up on the sandbox's PATH (git)")]
    BadExecRule { entry: String, why: String },
    /// An allowlist under an isolation that would not enforce it: refused,
    /// never a run without the rule the caller asked for.
    #[error("is not enforced under `isolation {isolation}`: {why}; use `isolation process`, or leave the allowlist out")]
    ExecRulesNeedProcess {
        isolation: &'static str,
        why: &'static str,
    },
    /// A cache's writes would reach the profile's shared cache directly
    /// through runsc's file server, past the disk budget the process
    /// backend holds them to: refused, never dropped.
    #[error("cannot be used with `isolation gvisor` yet: runsc's file server would write a cache's files straight into the shared cache on the host, past the sandbox's disk budget (`resources.disk`); leave the caches out, or use `isolation process`")]
    CachesWithGvisor,
    /// As for caches: a volume's writes would reach the host's directory
    /// past the disk budget.
    #[error("cannot be used with `isolation gvisor` yet: runsc's file server would bind the host's directory without the disk budget (`resources.disk`) the process backend holds a volume's writes to; leave the volumes out, or use `isolation process`")]
    VolumesWithGvisor,
    /// Rootless, nothing holds what runsc writes into a kept workspace
    /// layer or home within the disk budget: the budget's tmpfs lives in
    /// a mount namespace only root makes.
    #[error("gvisor keeps a named sandbox's workspace layer or home only when warden runs as root here: rootless, nothing holds what runsc writes there within the sandbox's disk budget (`resources.disk`, half its memory unless given); run warden as root, or use `isolation process`")]
    GvisorKeptLayerRootless,
    /// A VM sandbox keeps its workspace layer within the disk budget in a
    /// tmpfs its supervisor makes detached, which only root can.
    #[error("a VM sandbox keeps its workspace layer (every named sandbox's) only when warden runs as root here: rootless, nothing holds what the guest writes there within the sandbox's disk budget (`resources.disk`, half its memory unless given); run warden as root, or use `isolation process`")]
    VmKeptLayerRootless,
    /// The display reaches its viewer through a Unix socket of the
    /// sandbox's file tree, which a connection into runsc's sandbox
    /// cannot open.
    #[error("cannot be used with `isolation gvisor` yet: the display reaches its viewer through a Unix socket of the sandbox's file tree, which a connection into a gVisor sandbox cannot open; leave the desktop out, or use `isolation process`")]
    DesktopWithGvisor,
}

impl Problem {
    /// The stable reason code of the problem, for programs: the same
    /// whichever door the value came through (`memory_too_small`), where
    /// the message is worded for that door's user. Never change a code;
    /// a new problem gets a new one.
    pub const fn code(&self) -> &'static str {
        match self {
            Problem::NoCommand => "no_command",
            Problem::EmptyCommand => "empty_command",
            Problem::NulInCommand => "nul_in_command",
            Problem::RelativePath(_) => "relative_path",
            Problem::ForbiddenPath { .. } => "forbidden_path",
            Problem::MemoryTooSmall(_) => "memory_too_small",
            Problem::PidsTooSmall(_) => "pids_too_small",
            Problem::BadCpus(_) => "bad_cpus",
            Problem::CpusAboveHost { .. } => "cpus_above_host",
            Problem::PidsAboveKernel { .. } => "pids_above_kernel",
            Problem::ZeroTimeout => "zero_timeout",
            Problem::ZeroFileSize => "zero_file_size",
            Problem::ZeroDisk => "zero_disk",
            Problem::DiskOverMemory { .. } => "disk_over_memory",
            Problem::DiskOverFree { .. } => "disk_over_free",
            Problem::ZeroIdleTimeout => "zero_idle_timeout",
            Problem::BadOpenFiles(_) => "bad_open_files",
            Problem::TmpTooSmall(_) => "tmp_too_small",
            Problem::BadHostname(_) => "bad_hostname",
            Problem::BadUserName(_) => "bad_user_name",
            Problem::BadHome(_) => "bad_home",
            Problem::HomeWithoutMount => "home_without_mount",
            Problem::BadIsolation(_) => "bad_isolation",
            Problem::BadEnvName(_) => "bad_env_name",
            Problem::BadEnvAssignment(_) => "bad_env_assignment",
            Problem::NulInEnvValue(_) => "nul_in_env_value",
            Problem::Domain(_) => "bad_domain",
            Problem::BadAddHost(_) => "bad_add_host",
            Problem::BadCidr(_) => "bad_cidr",
            Problem::CidrCoversHost { .. } => "cidr_covers_host",
            Problem::AddHostUnspecified(_) => "add_host_unspecified",
            Problem::BadHostPort => "bad_host_port",
            Problem::PlainPortWithoutPort(_) => "plain_port_without_port",
            Problem::BadPublish(_) => "bad_publish",
            Problem::DuplicatePublish(_) => "duplicate_publish",
            Problem::HostAliasAsDomain(_) => "host_alias_as_domain",
            Problem::OverlayWithoutWorkspace => "overlay_without_workspace",
            Problem::OverlayWithoutState => "overlay_without_state",
            Problem::UnknownCache { .. } => "unknown_cache",
            Problem::CachesWithoutState => "caches_without_state",
            Problem::CachesWithRootfs => "caches_with_rootfs",
            Problem::LearnWithSecrets => "learn_with_secrets",
            Problem::LearnWithAsk => "learn_with_ask",
            Problem::EgressWithoutDomains => "egress_without_domains",
            Problem::BadSecret { .. } => "bad_secret",
            Problem::RelativeSecretProgram { .. } => "relative_secret_program",
            Problem::UnsplitSecretProgram { .. } => "unsplit_secret_program",
            Problem::BadSecretRule { .. } => "bad_secret_rule",
            Problem::BadRequestRule(_) => "bad_request_rule",
            Problem::DuplicateSecret(_) => "duplicate_secret",
            Problem::UnknownSecretInBody(_) => "unknown_secret_in_body",
            Problem::SecretPassed(_) => "secret_passed",
            Problem::SecretSet(_) => "secret_set",
            Problem::BadGlob { .. } => "bad_glob",
            Problem::BadVolume { .. } => "bad_volume",
            Problem::BadExecRule { .. } => "bad_exec_rule",
            Problem::ExecRulesNeedProcess { .. } => "exec_rules_need_process",
            Problem::CachesWithGvisor => "caches_with_gvisor",
            Problem::VolumesWithGvisor => "volumes_with_gvisor",
            Problem::GvisorKeptLayerRootless => "gvisor_kept_layer_rootless",
            Problem::VmKeptLayerRootless => "vm_kept_layer_rootless",
            Problem::DesktopWithGvisor => "desktop_with_gvisor",
        }
    }

    /// The entry of a list or map field the problem is about, as written
    /// (or the name of a map's entry), so that a door can point at that
    /// entry rather than at the field's first one.
    pub fn entry(&self) -> Option<String> {
        Some(match self {
            Problem::RelativePath(p) | Problem::ForbiddenPath { path: p, .. } => {
                p.display().to_string()
            }
            Problem::BadEnvName(s)
            | Problem::BadEnvAssignment(s)
            | Problem::NulInEnvValue(s)
            | Problem::BadAddHost(s)
            | Problem::BadCidr(s)
            | Problem::CidrCoversHost { cidr: s, .. }
            | Problem::AddHostUnspecified(s)
            | Problem::PlainPortWithoutPort(s)
            | Problem::BadPublish(s)
            | Problem::HostAliasAsDomain(s)
            | Problem::DuplicateSecret(s)
            | Problem::UnknownSecretInBody(s)
            | Problem::SecretPassed(s)
            | Problem::SecretSet(s)
            | Problem::BadSecret { entry: s, .. }
            | Problem::UnsplitSecretProgram { entry: s }
            | Problem::BadSecretRule { entry: s, .. }
            | Problem::BadGlob { entry: s, .. }
            | Problem::BadVolume { entry: s, .. }
            | Problem::BadExecRule { entry: s, .. } => s.clone(),
            Problem::BadRequestRule(e) => e.entry.clone(),
            Problem::Domain(e) => e.entry().to_string(),
            Problem::BadHostPort => "0".to_string(),
            _ => return None,
        })
    }
}

/// Why a request cannot become a spec: a [`Problem`] with the [`Field`] it
/// concerns. Its `Display` is the command line's wording
/// ([`ResolveError::describe_for_cli`]).
#[derive(Debug, Clone, PartialEq)]
pub struct ResolveError {
    field: Field,
    problem: Problem,
}

/// The name the error type had before it carried its field.
pub type SpecError = ResolveError;

impl ResolveError {
    pub fn new(field: Field, problem: Problem) -> ResolveError {
        ResolveError { field, problem }
    }

    /// The field the error is about. Every error of `Request::resolve`
    /// concerns one; `None` is kept for errors about a request as a whole.
    pub fn field(&self) -> Option<Field> {
        Some(self.field)
    }

    /// What is wrong, in words that do not name the field.
    pub fn problem(&self) -> &Problem {
        &self.problem
    }

    /// The stable reason code of the problem ([`Problem::code`]).
    pub const fn code(&self) -> &'static str {
        self.problem.code()
    }

    /// The error as the command line says it, naming the flag (and the
    /// other options the problem names by theirs):
    /// `--memory 1024 bytes is too small: ...`.
    pub fn describe_for_cli(&self) -> String {
        if self.problem == Problem::NoCommand {
            // The command line gives the command after its options.
            return "no command given: put CMD after `--`, e.g. `warden run -- bash`, or use a --profile that has a `command`".to_string();
        }
        let problem = word(&self.problem.to_string(), Door::Cli);
        match self.field.flag() {
            Some(flag) => format!("{flag} {problem}"),
            None => problem,
        }
    }

    /// The error as a profile says it, naming the key (the door adds the
    /// `file:line:column`): `resources.memory: 1024 bytes is too small: ...`.
    pub fn describe_for_profile(&self) -> String {
        format!("{}: {}", self.field.profile_name(), self.problem)
    }

    /// The error as the API says it, naming the JSON pointer of the
    /// request body: `/resources/memory: 1024 bytes is too small: ...`.
    pub fn describe_for_api(&self) -> String {
        match self.field.json_path() {
            Some(path) => format!("{path}: {}", word(&self.problem.to_string(), Door::Api)),
            None => self.describe_for_cli(),
        }
    }
}

impl fmt::Display for ResolveError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.describe_for_cli())
    }
}

// No `source`: the problem is already part of the message, and a chain
// printed by the binary would say it twice.
impl std::error::Error for ResolveError {}

impl Field {
    /// An error about this field.
    pub fn invalid(self, problem: Problem) -> ResolveError {
        ResolveError::new(self, problem)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_door_names_the_field_its_own_way() {
        let e = Field::Memory.invalid(Problem::MemoryTooSmall(1024));
        assert_eq!(e.field(), Some(Field::Memory));
        assert_eq!(
            e.describe_for_cli(),
            "--memory 1024 bytes is too small: a sandbox needs at least 16M"
        );
        assert_eq!(e.to_string(), e.describe_for_cli());
        assert_eq!(
            e.describe_for_profile(),
            "resources.memory: 1024 bytes is too small: a sandbox needs at least 16M"
        );
        assert_eq!(
            e.describe_for_api(),
            "/resources/memory: 1024 bytes is too small: a sandbox needs at least 16M"
        );
        let e = Field::Command.invalid(Problem::NoCommand);
        assert!(e.describe_for_cli().starts_with("no command given"));
    }

    #[test]
    fn another_option_a_problem_names_is_worded_by_each_door() {
        let e = Field::Overlay.invalid(Problem::OverlayWithoutWorkspace);
        assert_eq!(
            e.describe_for_cli(),
            "--overlay needs a `--workspace` to lay the overlay over"
        );
        assert_eq!(
            e.describe_for_profile(),
            "filesystem.mode: needs a `filesystem.workspace` to lay the overlay over"
        );
        assert_eq!(
            e.describe_for_api(),
            "/filesystem/mode: needs a `/filesystem/workspace` to lay the overlay over"
        );
    }
}
