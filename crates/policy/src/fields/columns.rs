//! What a row of the field table is made of: [`FieldInfo`] and the
//! vocabularies of its cells (a value's [`Kind`] and [`Shape`], how far a
//! field [`Reach`]es, what a difference means for a running sandbox), and the words a kind is expected in.
//!
//! This file declares no field and reads no value: the rows are
//! [`super`]'s table, a kind's text is read by [`Kind::parse`].

use super::door::Doors;
use super::Field;

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
