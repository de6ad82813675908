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

use std::fmt;

/// One row of the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FieldInfo {
    pub field: Field,
    /// The long flag of `warden run` (`--memory`); `None` for what only a
    /// profile can say.
    pub flag: Option<&'static str>,
    /// The flag's one-letter form (`-w`).
    pub short: Option<char>,
    /// The placeholder of the flag's value in `--help` (`SIZE`); `None`
    /// for a switch.
    pub value_name: Option<&'static str>,
    /// The key in a profile file (`resources.memory`); `None` when a
    /// profile cannot set it.
    pub profile_key: Option<&'static str>,
    /// The JSON pointer in the API's request body (`/resources/memory`),
    /// mirroring the profile key.
    pub json_path: Option<&'static str>,
    /// The container annotation a pod's author sets it with in
    /// `warden-oci` (`warden.dev/egress`); `None` where a pod's author
    /// may not set it: every field that reaches the node, and those a
    /// bundle's `config.json` already says (limits, mounts, hostname).
    pub annotation: Option<&'static str>,
    /// The doors through which it may be set: the command line, a profile
    /// file, an API request's body. A row says `doors:` only where some
    /// door must not take it (where a sandbox's events go is decided by
    /// whoever runs the door, never by a request); every door reads this
    /// cell through [`Field::settable_by`]. A pod's author sets only what
    /// has an [`annotation`](FieldInfo::annotation): that column is the
    /// OCI door's cell.
    pub doors: Doors,
    /// What kind of value it takes, in a word or three ("size", "list of
    /// domains").
    pub ty: &'static str,
    /// How far its effect reaches: only into the sandbox, into the host,
    /// or to the owner's catalogue of profiles and presets. The trust rule
    /// ([`crate::trust`]) reads it: a caller who is not the owner sets only
    /// fields that stay inside the sandbox, and names only catalogue entries.
    pub reach: Reach,
    /// One value, a list of values, or a map of names to values.
    pub shape: Shape,
    /// What each value is, which decides how every door reads it
    /// ([`Kind::parse`] for text, [`crate::read`] for a document).
    pub kind: Kind,
    /// What a difference in it means for a sandbox made earlier and
    /// already running that a create would take instead of making one (a
    /// daemon's warm pool): by default the sandbox is stale. Read by
    /// [`crate::fit`].
    pub running: Running,
    /// One line: what it does.
    pub doc: &'static str,
}

/// The `running:` cell of a row: can a sandbox made with another value of
/// this field, already running, serve a create that asks for this one?
///
/// Judged on the resolved spec: a field that composes into another's part
/// (a preset's names into the allowed names) is judged as that part.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Running {
    /// No: the sandbox runs with the old value, which nothing changes
    /// while it runs, so it never serves a create asking another. Every
    /// row without a `running:` cell, so that a new option can never hand
    /// out a sandbox made without it.
    Stale,
    /// Yes: the difference is applied to the running sandbox before it is
    /// handed out (the proxy's allowlist is changed live).
    Applied,
    /// Stale when asked for; a value nobody asked for is the default, and
    /// two defaults are the same choice whatever values they were resolved
    /// to (a default that follows the host's state at the moment, such as
    /// the disk budget sized from the free space).
    DefaultAlike,
}

/// How many values a field holds, which decides how sources merge:
/// one value is replaced by a later source, a list is united, a map is
/// merged by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Shape {
    One,
    List,
    /// Names to values (`env.set`); a key with a `*` is a map by the name
    /// at the `*` (`secrets.*.in_body`).
    Map,
}

/// What a value is. Every door reads a value of a kind the same way: the
/// text of a flag or an annotation through [`Kind::parse`], a node of a
/// profile file or an API body through [`crate::read`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    Text,
    Bool,
    /// A byte size: `512M`, `4G`, or a whole number of bytes.
    Size,
    /// `30s`, `2h`, `1h30m`, or a whole number of seconds.
    Duration,
    /// A whole number, zero or more.
    Count,
    /// A positive number of CPU cores.
    Cores,
    /// A TCP port, 1 to 65535.
    Port,
    /// A host path (a door makes it absolute: against the working
    /// directory on the command line, the profile's directory in a file).
    Path,
    /// A command and its arguments.
    Argv,
    /// `direct` or `overlay`.
    Mode,
    /// A secret's source and hosts.
    Secret,
    /// A flag without a value, only on the command line.
    Switch,
}

/// Why a text is not a value of its kind. Each door says where the text
/// was (a flag, an annotation); the message says what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ValueError {
    /// The kind the text was read as.
    pub kind: Kind,
    pub message: String,
}

impl Kind {
    /// What a value of this kind looks like, for "expected ..." messages.
    pub const fn expecting(self) -> &'static str {
        match self {
            Kind::Text => "text",
            Kind::Bool => "true or false",
            Kind::Size => "a size such as 512M or 4G",
            Kind::Duration => "a duration such as 30s, 10m or 2h",
            Kind::Count => "a whole number",
            Kind::Cores => "a number of cores such as 0.5 or 2",
            Kind::Port => "a port number from 1 to 65535",
            Kind::Path => "a path",
            Kind::Argv => "a command and its arguments, as a list",
            Kind::Mode => "`direct` or `overlay`",
            Kind::Secret => "a secret's source and hosts",
            Kind::Switch => "nothing",
        }
    }
}

/// How far a field's effect reaches, which decides who may set it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Reach {
    /// Stays inside the sandbox (its limits, its allowlist of names, its
    /// variables): any door may set it.
    Sandbox,
    /// Reaches the host: a host path bound, read or written, a host program
    /// or variable, a host port, local networks, where records go, less
    /// isolation. Only the owner sets it, on the command line or in a file
    /// of the owner's own catalogue.
    Host,
    /// Names an entry of the owner's catalogue (a profile, a preset). The
    /// owner may also name a file by path; anyone else only a plain name.
    Catalog,
}

/// A set of [`Door`]s: the `doors:` cell of a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Doors(u8);

impl Doors {
    /// Every door: what a row without a `doors:` cell gets.
    pub const ALL: Doors = Doors::of(&[Door::Cli, Door::Profile, Door::Api]);

    /// The set of `doors`.
    pub const fn of(doors: &[Door]) -> Doors {
        let mut bits = 0u8;
        let mut i = 0;
        while i < doors.len() {
            bits |= doors[i].bit();
            i += 1;
        }
        Doors(bits)
    }

    /// Does the set hold `door`?
    pub const fn allows(self, door: Door) -> bool {
        self.0 & door.bit() != 0
    }

    /// The doors of the set, in the table's order.
    pub fn iter(self) -> impl Iterator<Item = Door> {
        [Door::Cli, Door::Profile, Door::Api]
            .into_iter()
            .filter(move |d| self.allows(*d))
    }
}

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

impl Field {
    /// Every field, in the table's order.
    pub fn all() -> impl Iterator<Item = Field> {
        FIELDS.iter().map(|i| i.field)
    }

    /// This field's row of [`FIELDS`].
    pub const fn info(self) -> &'static FieldInfo {
        // The macro writes the enum and the table from one list, so a
        // variant's discriminant is its row (a test checks it too).
        &FIELDS[self as usize]
    }

    /// The long flag of `warden run`, e.g. `--memory`.
    pub const fn flag(self) -> Option<&'static str> {
        self.info().flag
    }

    /// The long flag without its dashes (`memory`), as clap's `long` takes it.
    pub const fn long(self) -> Option<&'static str> {
        match self.info().flag {
            Some(f) => match f.as_bytes().split_first_chunk::<2>() {
                Some((_, rest)) => match std::str::from_utf8(rest) {
                    Ok(s) => Some(s),
                    Err(_) => None,
                },
                None => None,
            },
            None => None,
        }
    }

    /// The one-letter flag, e.g. `w` for `-w`.
    pub const fn short(self) -> Option<char> {
        self.info().short
    }

    /// The key in a profile file, e.g. `resources.memory`.
    pub const fn profile_key(self) -> Option<&'static str> {
        self.info().profile_key
    }

    /// The JSON pointer in the API's request body, e.g. `/resources/memory`.
    pub const fn json_path(self) -> Option<&'static str> {
        self.info().json_path
    }

    /// The container annotation a pod's author sets it with, e.g.
    /// `warden.dev/egress`.
    pub const fn annotation(self) -> Option<&'static str> {
        self.info().annotation
    }

    /// The kind of value, e.g. "size".
    pub const fn ty(self) -> &'static str {
        self.info().ty
    }

    /// One line: what the field does.
    pub const fn doc(self) -> &'static str {
        self.info().doc
    }

    /// The doors through which it may be set (the `doors:` cell).
    pub const fn doors(self) -> Doors {
        self.info().doors
    }

    /// May `door` set this field: does the row let it, and does the door
    /// have a spelling for it (a flag, a profile key or JSON pointer)?
    pub const fn settable_by(self, door: Door) -> bool {
        let spelled = match door {
            Door::Cli => self.info().flag.is_some(),
            Door::Profile => self.info().profile_key.is_some(),
            Door::Api => self.info().json_path.is_some(),
        };
        spelled && self.info().doors.allows(door)
    }

    /// How far the field's effect reaches (who may set it).
    pub const fn reach(self) -> Reach {
        self.info().reach
    }

    /// What a difference in it means for a running sandbox (the
    /// `running:` cell).
    pub const fn running(self) -> Running {
        self.info().running
    }

    /// One value, a list or a map.
    pub const fn shape(self) -> Shape {
        self.info().shape
    }

    /// What each of its values is.
    pub const fn kind(self) -> Kind {
        self.info().kind
    }

    /// The field of a flag of `warden run`: `--memory`, or a short form
    /// such as `-w`.
    pub fn from_flag(flag: &str) -> Option<Field> {
        FIELDS
            .iter()
            .find(|i| {
                i.flag == Some(flag)
                    || i.short.is_some_and(|c| {
                        let mut rest = flag.strip_prefix('-').unwrap_or_default().chars();
                        rest.next() == Some(c) && rest.next().is_none()
                    })
            })
            .map(|i| i.field)
    }

    /// The field of a profile key: `resources.memory`; a key with a `*`
    /// in the table matches any name there (`secrets.GH_TOKEN.in_body`).
    pub fn from_profile_key(key: &str) -> Option<Field> {
        FIELDS
            .iter()
            .find(|i| i.profile_key.is_some_and(|k| key_matches(k, key)))
            .map(|i| i.field)
    }

    /// The field of a JSON pointer of the API's body, `*` as in
    /// [`Field::from_profile_key`].
    pub fn from_json_path(path: &str) -> Option<Field> {
        let key = path.strip_prefix('/')?.replace('/', ".");
        FIELDS
            .iter()
            .find(|i| {
                i.json_path
                    .and_then(|p| p.strip_prefix('/'))
                    .is_some_and(|p| key_matches(&p.replace('/', "."), &key))
            })
            .map(|i| i.field)
    }

    /// The field a container annotation sets (`warden.dev/egress`).
    pub fn from_annotation(key: &str) -> Option<Field> {
        FIELDS
            .iter()
            .find(|i| i.annotation == Some(key))
            .map(|i| i.field)
    }

    /// How a person names this field when writing it in a profile: the key,
    /// else the flag.
    pub fn profile_name(self) -> &'static str {
        self.profile_key()
            .or(self.flag())
            .or(self.info().value_name)
            .unwrap_or("")
    }
}

/// How a door names options in a message. Below the doors a message names
/// another option by its profile key in backticks (`` `resources.disk` ``),
/// the one spelling every door can read; each door words it for its own
/// user with [`word`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Door {
    /// The command line: `--disk`.
    Cli,
    /// A profile file: `resources.disk` (as written below the doors).
    Profile,
    /// The API's body: `/resources/disk`.
    Api,
}

impl Door {
    const fn bit(self) -> u8 {
        match self {
            Door::Cli => 1,
            Door::Profile => 2,
            Door::Api => 4,
        }
    }

    /// Where a value is given through this door, for a message saying
    /// where else to give it.
    pub const fn where_given(self) -> &'static str {
        match self {
            Door::Cli => "on warden's command line",
            Door::Profile => "in a profile file",
            Door::Api => "in an API request",
        }
    }
}

/// `text` with every `` `KEY` `` that is a field's profile key worded for
/// `door`: the flag on the command line (the key stays when the field has
/// no flag), the key in a profile, the JSON pointer in the API.
pub fn word(text: &str, door: Door) -> String {
    if door == Door::Profile {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find('`') {
        out.push_str(&rest[..start]);
        let after = &rest[start + 1..];
        let Some(end) = after.find('`') else {
            out.push_str(&rest[start..]);
            return out;
        };
        let inner = &after[..end];
        // `KEY` alone, or `KEY VALUE` (`resources.disk 2G`).
        let (key, tail) = match inner.split_once(' ') {
            Some((k, t)) => (k, Some(t)),
            None => (inner, None),
        };
        let worded = Field::from_profile_key(key).and_then(|f| match door {
            Door::Cli => f.flag().map(str::to_string),
            Door::Api => f.json_path().map(str::to_string),
            Door::Profile => None,
        });
        match worded {
            Some(w) => {
                out.push('`');
                out.push_str(&w);
                if let Some(t) = tail {
                    out.push(' ');
                    out.push_str(t);
                }
                out.push('`');
            }
            None => {
                out.push('`');
                out.push_str(inner);
                out.push('`');
            }
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    out
}

/// Is `key` an instance of the table's `pattern` (`*` matches one segment)?
fn key_matches(pattern: &str, key: &str) -> bool {
    let (mut p, mut k) = (pattern.split('.'), key.split('.'));
    loop {
        match (p.next(), k.next()) {
            (None, None) => return true,
            (Some(a), Some(b)) if a == b || (a == "*" && !b.is_empty()) => {}
            _ => return false,
        }
    }
}

/// The flag on the command line, else the profile key.
impl fmt::Display for Field {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.flag().unwrap_or_else(|| self.profile_name()))
    }
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

    /// Where a sandbox's events go is its runner's to decide: the person
    /// at the command line or in their profile files, never a request to
    /// the daemon (which keeps each sandbox's audit log itself). Every
    /// other field is any door's that spells it.
    #[test]
    fn the_doors_column_keeps_where_events_go_out_of_api_requests_and_only_that() {
        let sinks = [
            Field::AuditLog,
            Field::NoAuditLog,
            Field::JsonEvents,
            Field::OtlpEndpoint,
        ];
        for i in FIELDS {
            let over_api = i.field.settable_by(Door::Api);
            assert_eq!(
                over_api,
                i.json_path.is_some() && !sinks.contains(&i.field),
                "{:?}",
                i.field
            );
            assert_eq!(
                i.field.settable_by(Door::Cli),
                i.flag.is_some(),
                "{:?}",
                i.field
            );
            assert_eq!(
                i.field.settable_by(Door::Profile),
                i.profile_key.is_some(),
                "{:?}",
                i.field
            );
            // A pod's author is a request's author too.
            if i.annotation.is_some() {
                assert!(i.doors.allows(Door::Api), "{:?}", i.field);
            }
        }
        assert_eq!(
            Doors::of(&[Door::Cli, Door::Profile])
                .iter()
                .collect::<Vec<_>>(),
            [Door::Cli, Door::Profile]
        );
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

    #[test]
    fn a_key_in_a_message_is_worded_for_each_door() {
        let text = "lower `resources.disk` or raise `resources.memory 4G`; see `warden doctor`";
        assert_eq!(
            word(text, Door::Cli),
            "lower `--disk` or raise `--memory 4G`; see `warden doctor`"
        );
        assert_eq!(
            word(text, Door::Api),
            "lower `/resources/disk` or raise `/resources/memory 4G`; see `warden doctor`"
        );
        assert_eq!(word(text, Door::Profile), text);
        assert_eq!(word("a ` alone", Door::Cli), "a ` alone");
        assert_eq!(
            word("`filesystem.runs_on_host`", Door::Cli),
            "`filesystem.runs_on_host`"
        );
    }

    #[test]
    fn lookups_find_each_field_by_its_flag_key_and_path() {
        for i in FIELDS {
            if let Some(f) = i.flag {
                assert_eq!(Field::from_flag(f), Some(i.field));
                assert_eq!(i.field.long().map(|l| format!("--{l}")).as_deref(), Some(f));
            }
            if let Some(s) = i.short {
                assert_eq!(Field::from_flag(&format!("-{s}")), Some(i.field));
            }
            if let Some(k) = i.profile_key {
                assert_eq!(Field::from_profile_key(k), Some(i.field));
            }
            if let Some(p) = i.json_path {
                assert_eq!(Field::from_json_path(p), Some(i.field));
            }
        }
        assert_eq!(Field::from_flag("--memory"), Some(Field::Memory));
        assert_eq!(Field::from_flag("-w"), Some(Field::Workspace));
        assert_eq!(Field::from_flag("memory"), None);
        assert_eq!(
            Field::from_profile_key("secrets.GH_TOKEN.in_body"),
            Some(Field::SecretInBody)
        );
        assert_eq!(
            Field::from_json_path("/secrets/GH_TOKEN/allow"),
            Some(Field::SecretRule)
        );
        assert_eq!(Field::from_profile_key("secrets..in_body"), None);
        assert_eq!(Field::from_profile_key("resources"), None);
        assert_eq!(Field::Memory.to_string(), "--memory");
        assert_eq!(Field::RunsOnHost.to_string(), "filesystem.runs_on_host");
    }
}
