//! Every option of a sandbox, declared once: its flag of `warden run`, its
//! key in a profile file, its JSON pointer in the API's request body, its
//! container annotation for `warden-oci`, the kind of value it takes, and
//! one line saying what it does.
//!
//! Everything else that names an option is derived from this table or
//! checked against it by a test: the profile schema's descriptions and the
//! "did you mean" of an unknown key, where an error is located in a profile,
//! the keys of `warden profile show --explain`, the flags of `warden run`
//! (its `--help` is compared with the table). An error about a value carries
//! its [`Field`], so each door names it in its own words: the CLI the flag,
//! a profile `file:line:column` and the key, the API the JSON pointer.
//!
//! A key or pointer with a `*` segment stands for any name at that place:
//! `secrets.*.in_body` is the `in_body` of each secret.
//!
//! This file is the table and the macros that write it; what a row is
//! made of is [`columns`]'s, the doors and their wording [`door`]'s, a
//! field's accessors and the lookups by each door's spelling [`lookup`]'s.

mod columns;
mod door;
mod lookup;

pub use columns::{FieldInfo, Kind, Reach, Running, Shape, ValueError};
pub use door::{word, Door, Doors};

/// The `doors:` cell of a row: every door when the row has none.
macro_rules! doors {
    () => {
        Doors::ALL
    };
    ([$($door:ident),* $(,)?]) => {
        Doors::of(&[$(door!($door)),*])
    };
}

/// One door of a `doors:` cell.
macro_rules! door {
    (cli) => {
        Door::Cli
    };
    (profile) => {
        Door::Profile
    };
    (api) => {
        Door::Api
    };
}

/// The `reach:` cell of a row.
macro_rules! reach {
    (sandbox) => {
        Reach::Sandbox
    };
    (host) => {
        Reach::Host
    };
    (catalog) => {
        Reach::Catalog
    };
}

/// The `shape:` cell of a row.
macro_rules! shape {
    (one) => {
        Shape::One
    };
    (list) => {
        Shape::List
    };
    (map) => {
        Shape::Map
    };
}

/// The `kind:` cell of a row.
macro_rules! kind {
    (text) => {
        Kind::Text
    };
    (bool) => {
        Kind::Bool
    };
    (size) => {
        Kind::Size
    };
    (duration) => {
        Kind::Duration
    };
    (count) => {
        Kind::Count
    };
    (cores) => {
        Kind::Cores
    };
    (port) => {
        Kind::Port
    };
    (path) => {
        Kind::Path
    };
    (argv) => {
        Kind::Argv
    };
    (mode) => {
        Kind::Mode
    };
    (secret) => {
        Kind::Secret
    };
    (switch) => {
        Kind::Switch
    };
}

/// The `running:` cell of a row: stale when the row has none.
macro_rules! running {
    () => {
        Running::Stale
    };
    (applied) => {
        Running::Applied
    };
    (default_alike) => {
        Running::DefaultAlike
    };
}

/// `-` for "none", a literal for `Some(literal)`.
macro_rules! opt {
    (-) => {
        None
    };
    ($v:literal) => {
        Some($v)
    };
}

/// Declares [`Field`] and [`FIELDS`] from one list, in the same order (the
/// order of `warden profile show`).
macro_rules! fields {
    ($(
        $name:ident {
            flag: $flag:tt, short: $short:tt, value: $value:tt,
            key: $key:tt, json: $json:tt,
            annotation: $annotation:tt,
            $(doors: $doors:tt,)?
            ty: $ty:literal,
            shape: $shape:ident, kind: $kind:ident,
            reach: $reach:ident,
            $(running: $running:ident,)?
            doc: $doc:literal $(,)?
        }
    ),* $(,)?) => {
        /// An option of a sandbox. See the module's documentation and
        /// [`FIELDS`].
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        #[derive(serde::Serialize, serde::Deserialize)]
        pub enum Field {
            $(
                #[doc = $doc]
                $name,
            )*
        }

        /// The table: one row per [`Field`], in the order of the enum.
        pub const FIELDS: &[FieldInfo] = &[
            $(
                FieldInfo {
                    field: Field::$name,
                    flag: opt!($flag),
                    short: opt!($short),
                    value_name: opt!($value),
                    profile_key: opt!($key),
                    json_path: opt!($json),
                    annotation: opt!($annotation),
                    doors: doors!($($doors)?),
                    ty: $ty,
                    reach: reach!($reach),
                    shape: shape!($shape),
                    kind: kind!($kind),
                    running: running!($($running)?),
                    doc: $doc,
                },
            )*
        ];
    };
}

fields! {
    ProfileName {
        flag: -, short: -, value: -,
        key: "name", json: "/name",
        annotation: -,
        ty: "text",
        shape: one, kind: text,
        reach: sandbox,
        doc: "The profile's name (default: the file name without `.yaml`)",
    },
    Description {
        flag: -, short: -, value: -,
        key: "description", json: "/description",
        annotation: -,
        ty: "text",
        shape: one, kind: text,
        reach: sandbox,
        doc: "What the profile is for, shown by `warden profile list`",
    },
    Extends {
        flag: -, short: -, value: -,
        key: "extends", json: "/extends",
        annotation: -,
        ty: "list of profiles",
        shape: list, kind: text,
        reach: catalog,
        doc: "Profiles (names, or paths relative to this file) merged before this one, in order",
    },
    Profile {
        flag: "--profile", short: 'P', value: "NAME|PATH",
        key: -, json: -,
        annotation: "warden.dev/profile",
        ty: "profile",
        shape: one, kind: text,
        reach: catalog,
        doc: "Start from a profile: a name (see `warden profile list`) or a YAML file; flags override it, lists add to it",
    },
    Command {
        flag: -, short: -, value: "CMD",
        key: "command", json: "/command",
        annotation: -,
        ty: "command and arguments",
        shape: one, kind: argv,
        reach: sandbox,
        doc: "The command and its arguments (on the command line after `--`; a profile's is used when none is given)",
    },
    AllowExec {
        flag: "--allow-exec", short: -, value: "PATH",
        key: "process.allow_exec", json: "/process/allow_exec",
        annotation: "warden.dev/allow-exec",
        ty: "list of programs",
        shape: list, kind: text,
        reach: sandbox,
        doc: "Only these programs may be executed in the sandbox, enforced by the kernel (Landlock): a path inside the sandbox, a directory (its programs), a glob, or a name looked up on the sandbox's PATH. A script runs only when its `#!` interpreter is allowed too; an allowed interpreter runs any code it is given",
    },
    Hostname {
        flag: "--hostname", short: -, value: "NAME",
        key: "hostname", json: "/hostname",
        annotation: -,
        ty: "hostname",
        shape: one, kind: text,
        reach: sandbox,
        doc: "The sandbox's hostname (default `warden`)",
    },
    UserName {
        flag: "--user-name", short: -, value: "NAME",
        key: "process.user", json: "/process/user",
        annotation: -,
        ty: "user name",
        shape: one, kind: text,
        reach: sandbox,
        doc: "The name of the sandbox's user inside it (its `/etc/passwd` entry, `USER`, what `whoami` says), with the home directory as its home; the user's ID stays the one warden maps (default: the host's name for that ID)",
    },
    Isolation {
        flag: "--isolation", short: -, value: "process|gvisor|vm",
        key: "isolation", json: "/isolation",
        annotation: -,
        ty: "process, gvisor or vm",
        shape: one, kind: text,
        reach: sandbox,
        doc: "What isolates the sandbox: `process` (namespaces, Landlock, seccomp; the default), `gvisor` (gVisor's kernel in user space, runsc; see docs/gvisor.md) or `vm` (a microVM with its own kernel, see `warden vm kernel`)",
    },
    Tty {
        flag: "--tty", short: 't', value: -,
        key: "tty", json: "/tty",
        annotation: -,
        ty: "bool",
        shape: one, kind: bool,
        reach: sandbox,
        doc: "Allocate a pseudo-terminal (the default when stdin is a terminal)",
    },
    NoTty {
        flag: "--no-tty", short: 'T', value: -,
        key: -, json: -,
        annotation: -,
        ty: "switch",
        shape: one, kind: switch,
        reach: sandbox,
        doc: "Never allocate a pseudo-terminal",
    },
    Detach {
        flag: "--detach", short: 'd', value: -,
        key: -, json: -,
        annotation: -,
        ty: "switch",
        shape: one, kind: switch,
        reach: sandbox,
        doc: "Start the command in a sandbox of its own and return at once; the sandbox stops when the command ends",
    },
    AllowDegraded {
        flag: "--allow-degraded", short: -, value: "BOOL",
        key: "allow_degraded", json: "/allow_degraded",
        annotation: -,
        ty: "bool",
        shape: one, kind: bool,
        reach: host,
        doc: "When a layer of isolation cannot be applied, run with what the host still allows and print what is lost, instead of refusing",
    },
    Desktop {
        flag: -, short: -, value: -,
        key: "desktop", json: "/desktop",
        annotation: -,
        ty: "bool",
        shape: one, kind: bool,
        reach: sandbox,
        doc: "Give the sandbox a desktop: a virtual screen (display :99), a window manager and panel, Chromium with its DevTools on the sandbox's own 127.0.0.1:9222 and a VNC server on its own 127.0.0.1:5900, all inside the jail (the `desktop` profile sets it)",
    },
    JsonEvents {
        flag: "--json-events", short: -, value: "FILE",
        key: "json_events", json: "/json_events",
        annotation: -,
        doors: [cli, profile],
        ty: "path",
        shape: one, kind: path,
        reach: host,
        doc: "A file to append one JSON line per event to (created, started, exited, ...)",
    },
    AuditLog {
        flag: "--audit-log", short: -, value: "FILE",
        key: "audit_log", json: "/audit_log",
        annotation: -,
        doors: [cli, profile],
        ty: "path",
        shape: one, kind: path,
        reach: host,
        doc: "Where the run's hash-chained audit log goes (default: a new file in warden's state directory)",
    },
    NoAuditLog {
        flag: "--no-audit-log", short: -, value: -,
        key: "no_audit_log", json: "/no_audit_log",
        annotation: -,
        doors: [cli, profile],
        ty: "bool",
        shape: one, kind: bool,
        reach: host,
        doc: "Keep no audit log of the run",
    },
    AuditBudget {
        flag: "--audit-budget", short: -, value: "SIZE",
        key: "audit_budget", json: "/audit_budget",
        annotation: -,
        ty: "size",
        shape: one, kind: size,
        reach: host,
        doc: "Bytes the sandbox's events may take in the audit log (default 32M); past them its decisions are only counted, and lifecycle events and counts are still written",
    },
    OtlpEndpoint {
        flag: "--otlp-endpoint", short: -, value: "URL",
        key: "otlp_endpoint", json: "/otlp_endpoint",
        annotation: -,
        doors: [cli, profile],
        ty: "URL",
        shape: one, kind: text,
        reach: host,
        doc: "Also send every event to this OpenTelemetry collector (OTLP/HTTP, JSON), an http:// URL such as http://127.0.0.1:4318",
    },
    Presets {
        flag: "--preset", short: -, value: "NAME",
        key: "egress.presets", json: "/egress/presets",
        annotation: -,
        ty: "list of presets",
        shape: list, kind: text,
        reach: catalog,
        doc: "Named groups of domains, shipped with warden or in the user's preset directory",
    },
    AllowDomain {
        flag: "--allow-domain", short: -, value: "NAME[:PORT]",
        key: "egress.domains", json: "/egress/domains",
        annotation: "warden.dev/egress",
        ty: "list of domains",
        shape: list, kind: text,
        reach: sandbox,
        running: applied,
        doc: "Names the sandbox may connect to: example.com, .example.com (with subdomains), example.com:22 (that port; default 443 and 80)",
    },
    AllowRequest {
        flag: "--allow-request", short: -, value: "RULE",
        key: "egress.allow_requests", json: "/egress/allow_requests",
        annotation: -,
        ty: "list of request rules",
        shape: list, kind: text,
        reach: sandbox,
        doc: "Allow matching requests to an allowed name, whose TLS is then terminated and each request decided (any other request to it is refused): METHODS NAME/PATH, e.g. GET,HEAD api.github.com/repos/**",
    },
    DenyRequest {
        flag: "--deny-request", short: -, value: "RULE",
        key: "egress.deny_requests", json: "/egress/deny_requests",
        annotation: -,
        ty: "list of request rules",
        shape: list, kind: text,
        reach: sandbox,
        doc: "Refuse matching requests to a name, whatever allows them: METHODS NAME/PATH, e.g. '* github.com/**/git-receive-pack'",
    },
    AskRequest {
        flag: "--ask-request", short: -, value: "RULE",
        key: "egress.ask_requests", json: "/egress/ask_requests",
        annotation: -,
        ty: "list of request rules",
        shape: list, kind: text,
        reach: sandbox,
        doc: "Hold matching requests to a name for a person's answer (refused while no one is asked about single requests): METHODS NAME/PATH",
    },
    AllowHttp {
        flag: "--allow-http", short: -, value: "BOOL",
        key: "egress.allow_http", json: "/egress/allow_http",
        annotation: "warden.dev/allow-http",
        ty: "bool",
        shape: one, kind: bool,
        reach: sandbox,
        doc: "Allow plain HTTP, not only TLS, to allowed names",
    },
    AddHost {
        flag: "--add-host", short: -, value: "NAME=IP",
        key: "egress.hosts", json: "/egress/hosts",
        annotation: -,
        ty: "map of names to addresses",
        shape: map, kind: text,
        reach: host,
        doc: "Give names fixed addresses, e.g. registry.internal at 10.1.2.3; such an address is allowed even when not public",
    },
    AllowCidr {
        flag: "--allow-cidr", short: -, value: "CIDR",
        key: "egress.allow_cidrs", json: "/egress/allow_cidrs",
        annotation: -,
        ty: "list of address ranges",
        shape: list, kind: text,
        reach: host,
        doc: "Let allowed names resolve into these non-public address ranges, e.g. 10.20.0.0/16",
    },
    AllowHostPort {
        flag: "--allow-host-port", short: -, value: "PORT",
        key: "egress.host_ports", json: "/egress/host_ports",
        annotation: -,
        ty: "list of ports",
        shape: list, kind: port,
        reach: host,
        doc: "Let the sandbox reach the services on the host's 127.0.0.1:PORT as host.warden.internal:PORT, and nothing else of the host",
    },
    SecretPlainPort {
        flag: "--secret-plain-port", short: -, value: "HOST:PORT",
        key: "egress.secret_plain_ports", json: "/egress/secret_plain_ports",
        annotation: -,
        ty: "list of names with a port",
        shape: list, kind: text,
        reach: host,
        doc: "Let a secret's host (or a name pinned to its address) carry what is not TLS naming it on this port, spliced as it is (SSH to a forge beside an HTTPS token): a value the secret's server stored may come back through it unscrubbed",
    },
    Publish {
        flag: "--publish", short: 'p', value: "HOSTPORT:PORT",
        key: "egress.publish", json: "/egress/publish",
        annotation: -,
        ty: "list of port mappings",
        shape: list, kind: text,
        reach: host,
        doc: "Make the sandbox's servers on its 127.0.0.1:PORT reachable at the host's 127.0.0.1:HOSTPORT",
    },
    EgressLearn {
        flag: "--egress-learn", short: -, value: "BOOL",
        key: "egress.learn", json: "/egress/learn",
        annotation: -,
        ty: "bool",
        shape: one, kind: bool,
        reach: host,
        doc: "Learning mode: allow every name no rule allows (never the host's own services), mark each decision it allowed, and print at exit the profile lines the run needed; refused with secrets",
    },
    EgressLearnFile {
        flag: "--egress-learn-file", short: -, value: "FILE",
        key: -, json: -,
        annotation: -,
        ty: "path",
        shape: one, kind: path,
        reach: host,
        doc: "With --egress-learn: also write the profile lines the run needed to FILE, a profile later learning runs add to and another takes with extends",
    },
    Ask {
        flag: "--ask", short: -, value: "BOOL",
        key: "egress.ask", json: "/egress/ask",
        annotation: -,
        ty: "bool",
        shape: one, kind: bool,
        reach: sandbox,
        doc: "Ask on the terminal about names no rule allows (allow once, for the run, or deny); without a terminal they are denied",
    },
    AskSave {
        flag: "--ask-save", short: -, value: "WHERE",
        key: -, json: -,
        annotation: -,
        ty: "project or profile",
        shape: one, kind: text,
        reach: host,
        doc: "Where --ask keeps the names answered always: the project's grants file in warden's state, or the profile file in use",
    },
    UpstreamCa {
        flag: "--upstream-ca", short: -, value: "FILE",
        key: "egress.upstream_ca", json: "/egress/upstream_ca",
        annotation: -,
        ty: "list of paths",
        shape: list, kind: path,
        reach: host,
        doc: "Trust the authorities in these PEM files, besides the system's, for the servers of secrets' hosts",
    },
    NetLog {
        flag: "--net-log", short: -, value: "BOOL",
        key: "egress.log", json: "/egress/log",
        annotation: -,
        ty: "bool",
        shape: one, kind: bool,
        reach: sandbox,
        doc: "Print one line per egress decision (allowed or denied) on stderr",
    },
    EgressIdleTimeout {
        flag: "--egress-idle-timeout", short: -, value: "DURATION",
        key: "egress.idle_timeout", json: "/egress/idle_timeout",
        annotation: "warden.dev/egress-idle-timeout",
        ty: "duration",
        shape: one, kind: duration,
        reach: sandbox,
        doc: "Close a proxied connection after this long without a byte either way (default 10m)",
    },
    Workspace {
        flag: "--workspace", short: 'w', value: "DIR",
        key: "filesystem.workspace", json: "/filesystem/workspace",
        annotation: -,
        ty: "path",
        shape: one, kind: path,
        reach: host,
        doc: "The directory mounted read-write at /workspace, where the command starts",
    },
    Overlay {
        flag: "--overlay", short: -, value: -,
        key: "filesystem.mode", json: "/filesystem/mode",
        annotation: -,
        ty: "workspace mode",
        shape: one, kind: mode,
        reach: sandbox,
        doc: "See the workspace through a copy-on-write layer (mode `overlay`; the default is `direct`): its changes are kept for `warden diff` and `warden commit`",
    },
    Workdir {
        flag: "--workdir", short: -, value: "DIR",
        key: "filesystem.workdir", json: "/filesystem/workdir",
        annotation: -,
        ty: "path inside the sandbox",
        shape: one, kind: text,
        reach: sandbox,
        doc: "Where the command (and every exec) starts inside the sandbox, an absolute path such as /workspace/backend (default /workspace with a workspace, else /)",
    },
    HomeDir {
        flag: "--home-dir", short: -, value: "DIR",
        key: "filesystem.home", json: "/filesystem/home",
        annotation: -,
        ty: "path inside the sandbox",
        shape: one, kind: text,
        reach: sandbox,
        doc: "Where the sandbox's own home is mounted inside it, and its `HOME`: /root or /home/NAME (default /home/sandbox; E2B's sandboxes use /home/user)",
    },
    Rootfs {
        flag: "--rootfs", short: -, value: "DIR",
        key: "filesystem.rootfs", json: "/filesystem/rootfs",
        annotation: -,
        ty: "path",
        shape: one, kind: path,
        reach: host,
        doc: "A prepared root tree (e.g. debootstrap output) used instead of the host's system directories",
    },
    Ro {
        flag: "--ro", short: -, value: "PATH",
        key: "filesystem.read_only", json: "/filesystem/read_only",
        annotation: -,
        ty: "list of paths",
        shape: list, kind: path,
        reach: host,
        doc: "Paths bound read-only at the same path inside",
    },
    Rw {
        flag: "--rw", short: -, value: "PATH",
        key: "filesystem.read_write", json: "/filesystem/read_write",
        annotation: -,
        ty: "list of paths",
        shape: list, kind: path,
        reach: host,
        doc: "Paths bound read-write at the same path inside",
    },
    Volumes {
        flag: "--volume", short: -, value: "HOST:INSIDE[:ro]",
        key: "filesystem.volumes", json: "/filesystem/volumes",
        annotation: -,
        ty: "list of HOST:INSIDE[:ro]",
        shape: list, kind: text,
        reach: host,
        doc: "Host directories bound at another path inside, read-write or with :ro read-only, e.g. /srv/data:/mnt/data:ro; the inside path is absolute and never over /proc, /dev, /sys, /tmp, /run, /workspace, the system directories or the home",
    },
    RunsOnHost {
        flag: -, short: -, value: -,
        key: "filesystem.runs_on_host", json: "/filesystem/runs_on_host",
        annotation: -,
        ty: "list of path globs",
        shape: list, kind: text,
        reach: sandbox,
        doc: "Paths of the workspace (globs: `*` within a name, `**` across) that tools on the host run, e.g. Makefile: `warden diff` and `warden commit` flag a change to one as running on the host",
    },
    Caches {
        flag: "--cache", short: -, value: "NAME",
        key: "filesystem.caches", json: "/filesystem/caches",
        annotation: -,
        ty: "list of caches",
        shape: list, kind: text,
        reach: host,
        doc: "Package caches (pip, npm, cargo, go) shared by the sandboxes of a profile, kept in warden's state directory (never the host's own), so that a second install is fast",
    },
    TmpSize {
        flag: "--tmp-size", short: -, value: "SIZE",
        key: "filesystem.tmp_size", json: "/filesystem/tmp_size",
        annotation: "warden.dev/tmp-size",
        ty: "size",
        shape: one, kind: size,
        reach: sandbox,
        doc: "Size of the sandbox's /tmp and /dev/shm, e.g. 512M",
    },
    Memory {
        flag: "--memory", short: -, value: "SIZE",
        key: "resources.memory", json: "/resources/memory",
        annotation: -,
        ty: "size",
        shape: one, kind: size,
        reach: sandbox,
        doc: "Memory limit for the whole sandbox, e.g. 512M, 4G",
    },
    Cpus {
        flag: "--cpus", short: -, value: "CORES",
        key: "resources.cpus", json: "/resources/cpus",
        annotation: -,
        ty: "cores",
        shape: one, kind: cores,
        reach: sandbox,
        doc: "CPU quota in cores, e.g. 0.5 or 2",
    },
    Pids {
        flag: "--pids", short: -, value: "N",
        key: "resources.pids", json: "/resources/pids",
        annotation: -,
        ty: "count",
        shape: one, kind: count,
        reach: sandbox,
        doc: "Maximum number of processes and threads of the whole sandbox",
    },
    Timeout {
        flag: "--timeout", short: -, value: "DURATION",
        key: "resources.timeout", json: "/resources/timeout",
        annotation: "warden.dev/timeout",
        ty: "duration",
        shape: one, kind: duration,
        reach: sandbox,
        doc: "Kill the whole sandbox after this long, e.g. 30s, 10m, 2h",
    },
    OpenFiles {
        flag: "--open-files", short: -, value: "N",
        key: "resources.open_files", json: "/resources/open_files",
        annotation: -,
        ty: "count",
        shape: one, kind: count,
        reach: sandbox,
        doc: "Open files per process",
    },
    FileSize {
        flag: "--file-size", short: -, value: "SIZE",
        key: "resources.file_size", json: "/resources/file_size",
        annotation: -,
        ty: "size",
        shape: one, kind: size,
        reach: sandbox,
        doc: "Largest file a process may write, e.g. 16G",
    },
    Disk {
        flag: "--disk", short: -, value: "SIZE",
        key: "resources.disk", json: "/resources/disk",
        annotation: -,
        ty: "size",
        shape: one, kind: size,
        reach: sandbox,
        running: default_alike,
        doc: "Size limit of a reviewable workspace's changes (the overlay's upper layer, held in memory while the sandbox runs): a write past it fails with ENOSPC, e.g. 2G",
    },
    EgressQuota {
        flag: "--egress-quota", short: -, value: "SIZE",
        key: "resources.egress_quota", json: "/resources/egress_quota",
        annotation: "warden.dev/egress-quota",
        ty: "size",
        shape: one, kind: size,
        reach: sandbox,
        doc: "Refuse new connections once this much has gone through the proxy (both ways), e.g. 5G",
    },
    PassEnv {
        flag: "--pass-env", short: -, value: "NAME",
        key: "env.pass", json: "/env/pass",
        annotation: -,
        ty: "list of variable names",
        shape: list, kind: text,
        reach: host,
        doc: "Variables copied from the host's environment, when set",
    },
    Env {
        flag: "--env", short: 'e', value: "NAME=VALUE",
        key: "env.set", json: "/env/set",
        annotation: -,
        ty: "map of variables",
        shape: map, kind: text,
        reach: sandbox,
        doc: "Variables set in the sandbox, NAME to VALUE",
    },
    Secret {
        flag: "--secret", short: -, value: "NAME[=SOURCE]@HOST[,HOST...]",
        key: "secrets", json: "/secrets",
        annotation: -,
        ty: "map of secrets",
        shape: map, kind: secret,
        reach: host,
        doc: "Give the sandbox a placeholder instead of a secret; the proxy puts the real value only in requests to the secret's hosts",
    },
    SecretInBody {
        flag: "--secret-in-body", short: -, value: "NAME",
        key: "secrets.*.in_body", json: "/secrets/*/in_body",
        annotation: -,
        ty: "bool",
        shape: map, kind: bool,
        reach: host,
        doc: "Substitute the secret in request bodies too, not only in headers and URLs",
    },
    SecretRule {
        flag: "--secret-rule", short: -, value: "RULE",
        key: "secrets.*.allow", json: "/secrets/*/allow",
        annotation: -,
        ty: "list of request rules",
        shape: list, kind: text,
        reach: host,
        doc: "Only matching requests may go to a secret's hosts: [METHOD ]HOST[/PATH], * matching anything, e.g. GET api.github.com/repos/acme/*",
    },
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn each_variant_is_its_own_row_of_the_table() {
        for (i, info) in FIELDS.iter().enumerate() {
            assert_eq!(info.field as usize, i, "{:?}", info.field);
            assert_eq!(info.field.info(), info);
        }
    }

    #[test]
    fn no_two_fields_share_a_flag_a_short_flag_a_key_or_a_json_path() {
        let mut flags = HashSet::new();
        let mut shorts = HashSet::new();
        let mut keys = HashSet::new();
        let mut paths = HashSet::new();
        for i in FIELDS {
            if let Some(f) = i.flag {
                assert!(flags.insert(f), "flag {f} twice");
            }
            if let Some(s) = i.short {
                assert!(shorts.insert(s), "-{s} twice");
            }
            if let Some(k) = i.profile_key {
                assert!(keys.insert(k), "key {k} twice");
            }
            if let Some(p) = i.json_path {
                assert!(paths.insert(p), "JSON path {p} twice");
            }
        }
    }

    #[test]
    fn every_field_can_be_set_somewhere_and_is_described() {
        for i in FIELDS {
            assert!(
                i.flag.is_some() || i.profile_key.is_some(),
                "{:?} has neither a flag nor a key",
                i.field
            );
            assert!(!i.doc.is_empty() && !i.ty.is_empty(), "{:?}", i.field);
            assert!(
                !i.doc.ends_with('.') && !i.doc.contains('\n'),
                "{:?}: one line, no final period (each door adds its own)",
                i.field
            );
            if let Some(f) = i.flag {
                assert!(
                    f.starts_with("--")
                        && f[2..].bytes().all(|b| b.is_ascii_lowercase() || b == b'-'),
                    "{f}"
                );
            }
        }
    }

    /// A pod's author is a caller: an annotation sets only what stays in
    /// the sandbox (or names an entry of the node's catalogue), and each
    /// is a name Kubernetes takes (`warden.dev/` and at most 63 characters
    /// of letters, digits, `-`, `_` and `.`, alphanumeric at both ends).
    #[test]
    fn annotations_are_unique_kubernetes_names_of_fields_a_caller_may_set() {
        let mut seen = HashSet::new();
        let mut count = 0;
        for i in FIELDS {
            let Some(a) = i.annotation else { continue };
            count += 1;
            assert!(seen.insert(a), "annotation {a} twice");
            assert_ne!(i.reach, Reach::Host, "{a} would let a pod reach the node");
            let name = a.strip_prefix("warden.dev/").unwrap_or_default();
            assert!(
                !name.is_empty()
                    && name.len() <= 63
                    && name
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
                    && name.starts_with(|c: char| c.is_ascii_alphanumeric())
                    && name.ends_with(|c: char| c.is_ascii_alphanumeric()),
                "{a} is not a Kubernetes annotation of warden's"
            );
            assert!(
                !name.starts_with("secret."),
                "{a} is in the secrets' annotations"
            );
            assert_eq!(Field::from_annotation(a), Some(i.field));
        }
        assert!(count >= 3, "{count}");
        assert_eq!(Field::from_annotation("warden.dev/hosts"), None);
    }

    #[test]
    fn json_paths_mirror_profile_keys() {
        for i in FIELDS {
            let mirrored = i.profile_key.map(|k| format!("/{}", k.replace('.', "/")));
            assert_eq!(i.json_path.map(str::to_string), mirrored, "{:?}", i.field);
        }
    }

    #[test]
    fn every_profile_key_in_the_schema_has_a_field_and_every_fields_key_is_in_the_schema() {
        let schema: serde_json::Value =
            serde_json::from_str(&crate::profile::profile_schema()).unwrap_or_default();
        let keys = crate::profile::schema_keys(&schema);
        assert!(keys.len() > 30, "{keys:?}");
        let table: Vec<&str> = FIELDS.iter().filter_map(|i| i.profile_key).collect();
        for key in &keys {
            // A key below a field's own (a secret's `from_env`) is part of
            // that field's value.
            let covered = table.iter().any(|t| {
                key == t
                    || key
                        .strip_prefix(t)
                        .is_some_and(|rest| rest.starts_with('.'))
            });
            assert!(
                covered,
                "the schema has {key}, which no field of the table names"
            );
        }
        for t in &table {
            assert!(
                keys.iter()
                    .any(|k| k == t || k.starts_with(&format!("{t}."))),
                "the table names {t}, which a profile cannot hold"
            );
        }
    }

    #[test]
    fn the_schema_describes_each_field_with_the_tables_words() {
        let schema: serde_json::Value =
            serde_json::from_str(&crate::profile::profile_schema()).unwrap_or_default();
        let text = schema.to_string();
        for i in FIELDS {
            if i.profile_key.is_some() {
                assert!(
                    text.contains(i.doc),
                    "{:?}: its doc is not in the schema",
                    i.field
                );
            }
        }
    }

    #[test]
    fn the_profiles_guide_lists_every_key_with_its_flag() {
        let guide = include_str!("../../../docs/profiles.md");
        let mut rows = Vec::new();
        for line in guide.lines() {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            if let [_, key, flag, _, _] = cells.as_slice() {
                if let Some(key) = key.strip_prefix('`').and_then(|k| k.strip_suffix('`')) {
                    rows.push((key, *flag));
                }
            }
        }
        assert!(rows.len() > 30, "{rows:?}");
        for (key, flag_cell) in &rows {
            let Some(field) = Field::from_profile_key(key) else {
                panic!("docs/profiles.md lists `{key}`, which no field of the table has");
            };
            if let Some(flag) = field.flag() {
                assert!(
                    flag_cell.contains(&format!("`{flag}")),
                    "docs/profiles.md: `{key}` should name {flag}, not {flag_cell:?}"
                );
            }
        }
        for i in FIELDS {
            let Some(key) = i.profile_key else { continue };
            if key.starts_with("secrets") {
                // Secrets are described in prose, with their flags.
                let flag = i.flag.unwrap_or_default();
                assert!(guide.contains(&format!("`{flag}`")), "{flag}");
                continue;
            }
            assert!(
                rows.iter().any(|(k, _)| *k == key),
                "docs/profiles.md has no row for `{key}`"
            );
        }
    }
}
