//! The one middle shape every door produces: a [`Layer`] of values keyed
//! by [`Field`], each value ([`Val`]) with its [`Origin`] (a flag, a
//! file's line and column, a JSON pointer, an annotation) and the
//! [`Trust`] of whoever gave it. Doors read into it by the field table
//! (`read.rs`, the CLI's flags, `oci.rs`); composition (`compose/`)
//! merges layers; resolution (`resolve/`) reads the merged one. This
//! module holds the values and how a layer is read and merged, nothing of
//! where they came from beyond each value's origin.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use crate::fields::{Field, Kind, ValueError};
use crate::profile::{suggest, Pos, WorkspaceMode};
use crate::{Defaults, Terminal, DEFAULT_EGRESS_IDLE_TIMEOUT};

/// The trust of whoever gave a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Trust {
    /// The person who runs warden, and what they wrote: the command line,
    /// the daemon's owner-only socket, the files of their catalogue, the
    /// configuration the node's container manager hands `warden-oci`.
    Owner,
    /// Anyone else a door serves: a token holder of the daemon, an E2B
    /// client, the model behind MCP, a pod's author (its annotations).
    Caller,
}

impl Kind {
    /// Read one value of this kind from its text (a flag's, an
    /// annotation's, a scalar of a document).
    pub fn parse(self, text: &str) -> Result<Val, ValueError> {
        let bad = |message: String| ValueError {
            kind: self,
            message,
        };
        Ok(match self {
            Kind::Text | Kind::Secret => Val::Text(text.to_string()),
            Kind::Path => Val::Path(text.into()),
            Kind::Argv => Val::Argv(vec![text.to_string()]),
            Kind::Bool | Kind::Switch => match text {
                "true" => Val::Bool(true),
                "false" => Val::Bool(false),
                _ => return Err(bad(format!("{text:?}: expected true or false"))),
            },
            Kind::Size => Val::Size {
                bytes: crate::units::parse_size(text).map_err(|e| bad(e.to_string()))?,
                text: text.to_string(),
            },
            Kind::Duration => Val::Duration {
                duration: crate::units::parse_duration(text).map_err(|e| bad(e.to_string()))?,
                text: text.to_string(),
            },
            Kind::Count => match text.parse::<u64>() {
                Ok(n) => Val::Count(n),
                Err(_) => return Err(bad(format!("{text:?} is not a whole number"))),
            },
            Kind::Cores => match text.parse::<f64>() {
                Ok(c) if c.is_finite() && c > 0.0 => Val::Cores(c),
                _ => {
                    return Err(bad(format!(
                    "{text:?} is not a number of cores; write a positive number such as 0.5 or 2"
                )))
                }
            },
            Kind::Port => match text.parse::<u16>() {
                Ok(p) if p > 0 => Val::Port(p),
                _ => {
                    return Err(bad(format!(
                        "{text:?} is not a port number from 1 to 65535"
                    )))
                }
            },
            Kind::Mode => match text {
                "direct" => Val::Mode(WorkspaceMode::Direct),
                "overlay" => Val::Mode(WorkspaceMode::Overlay),
                _ => {
                    let known = ["direct", "overlay"];
                    let hint = suggest(text, known)
                        .map(|s| format!("; did you mean `{s}`?"))
                        .unwrap_or_default();
                    return Err(bad(format!(
                        "unknown value `{text}`{hint} (known: direct, overlay)"
                    )));
                }
            },
        })
    }
}

/// Where a value came from.
#[derive(Debug, Clone, PartialEq)]
pub enum Origin {
    /// Written in a profile file.
    File { file: String, pos: Pos },
    /// Part of a preset named in a profile file at `file:pos`.
    Preset {
        preset: String,
        file: String,
        pos: Pos,
    },
    /// At a JSON pointer of a request's body (an API request's `spec`).
    Body { label: String, pointer: String },
    /// A container annotation (`warden.dev/egress`), a pod author's.
    Annotation { key: String },
    /// A flag of `warden run` (or what an OCI runtime's caller gave in a
    /// bundle's `config.json`).
    CommandLine,
    /// warden's default.
    Default,
}

impl Origin {
    /// The file and position a message about this value should name.
    pub fn place(&self) -> Option<(&str, Pos)> {
        match self {
            Origin::File { file, pos } | Origin::Preset { file, pos, .. } => Some((file, *pos)),
            Origin::Body { label, .. } => Some((label, Pos::default())),
            _ => None,
        }
    }

    /// The JSON pointer a message about this value should name, for a
    /// value of a request's body.
    pub fn pointer(&self) -> Option<&str> {
        match self {
            Origin::Body { pointer, .. } => Some(pointer),
            _ => None,
        }
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::File { file, pos } => write!(f, "{file}:{pos}"),
            Origin::Preset { preset, file, pos } => write!(f, "preset {preset} ({file}:{pos})"),
            Origin::Body { label, pointer } => write!(f, "{label} at {pointer}"),
            Origin::Annotation { key } => write!(f, "annotation {key}"),
            Origin::CommandLine => f.write_str("command line"),
            Origin::Default => f.write_str("default"),
        }
    }
}

/// One value of a profile.
#[derive(Debug, Clone, PartialEq)]
pub enum Val {
    Text(String),
    Bool(bool),
    Size {
        bytes: u64,
        text: String,
    },
    Duration {
        duration: Duration,
        text: String,
    },
    Count(u64),
    Cores(f64),
    Port(u16),
    Path(PathBuf),
    Argv(Vec<String>),
    Mode(WorkspaceMode),
    /// A text that belongs to one entry of a map (the `*` of its field's
    /// key): a rule in `secrets.*.allow` is `Named { name: SECRET, .. }`.
    Named {
        name: String,
        text: String,
    },
}

impl Val {
    /// The value as it appears in `show` output.
    pub fn json(&self) -> serde_json::Value {
        use serde_json::Value as J;
        match self {
            Val::Text(s) | Val::Named { text: s, .. } => J::from(s.as_str()),
            Val::Bool(b) => J::from(*b),
            Val::Size { text, .. } | Val::Duration { text, .. } => J::from(text.as_str()),
            Val::Count(n) => J::from(*n),
            Val::Cores(c) => J::from(*c),
            Val::Port(p) => J::from(*p),
            Val::Path(p) => J::from(p.to_string_lossy().into_owned()),
            Val::Argv(a) => J::from(a.clone()),
            Val::Mode(WorkspaceMode::Direct) => J::from("direct"),
            Val::Mode(WorkspaceMode::Overlay) => J::from("overlay"),
        }
    }
}

/// A value and its origin.
#[derive(Debug, Clone, PartialEq)]
pub struct Sourced {
    pub val: Val,
    pub origin: Origin,
    /// The trust of the source that gave it. What it may set is held to
    /// the trust rule when it is read (`compose/`'s loader); some
    /// values keep it further: an allowlist entry of a caller's reaches
    /// public addresses only (see [`DomainRule::caller`](crate::DomainRule)).
    pub trust: Trust,
}

/// What one source sets for one field.
#[derive(Debug, Clone, PartialEq)]
pub enum Slot {
    One(Sourced),
    List(Vec<Sourced>),
    Map(Vec<(String, Sourced)>),
}

/// Everything one source (a file, the command line, or all of them merged)
/// sets, by field (in the order of [`FIELDS`](crate::FIELDS)).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Layer {
    pub slots: BTreeMap<Field, Slot>,
}

impl Layer {
    fn one(&mut self, key: Field, val: Val, origin: Origin) {
        self.slots.insert(
            key,
            Slot::One(Sourced {
                val,
                origin,
                trust: Trust::Owner,
            }),
        );
    }

    pub(crate) fn push(&mut self, key: Field, val: Val, origin: Origin) {
        let slot = self
            .slots
            .entry(key)
            .or_insert_with(|| Slot::List(Vec::new()));
        if let Slot::List(items) = slot {
            items.push(Sourced {
                val,
                origin,
                trust: Trust::Owner,
            });
        }
    }

    fn put(&mut self, key: Field, name: String, val: Val, origin: Origin) {
        let slot = self
            .slots
            .entry(key)
            .or_insert_with(|| Slot::Map(Vec::new()));
        if let Slot::Map(items) = slot {
            let s = Sourced {
                val,
                origin,
                trust: Trust::Owner,
            };
            match items.iter_mut().find(|(k, _)| *k == name) {
                Some(entry) => entry.1 = s,
                None => items.push((name, s)),
            }
        }
    }

    /// Read one value of `field` from its text, as a flag or an
    /// annotation gives it, by the field's kind and shape: an entry of a
    /// map is `NAME=VALUE` (a secret `NAME[=SOURCE]@HOSTS`, a secret's
    /// `in_body` its name). `trust` is whose the value is.
    pub fn add_text(
        &mut self,
        field: Field,
        text: &str,
        origin: Origin,
        trust: Trust,
    ) -> Result<(), crate::fields::ValueError> {
        use crate::fields::Shape;
        let mut one = Layer::default();
        match (field.shape(), field) {
            (Shape::Map, Field::Secret) => {
                let raw = text.split(['=', '@']).next().unwrap_or_default();
                let name = raw.trim();
                // What follows the name as written (a name with spaces
                // around it is kept whole, for the resolver to refuse).
                let rest = &text[raw.len()..];
                // `NAME@HOSTS`: the value of the host's variable NAME.
                let value = match rest.strip_prefix('=') {
                    Some(rest) => rest.to_string(),
                    None => format!("env:{name}{rest}"),
                };
                one.put(field, name.to_string(), Val::Text(value), origin);
            }
            (Shape::Map, Field::SecretInBody) => {
                one.put(field, text.to_string(), Val::Bool(true), origin)
            }
            (Shape::Map, _) => match text.split_once('=') {
                Some((k, v)) => {
                    let v = field.kind().parse(v)?;
                    one.put(field, k.to_string(), v, origin)
                }
                // Kept whole, for the resolver to refuse with its usual
                // message (or to read, as `NAME:IP` for a host).
                None => one.put(field, text.to_string(), Val::Bool(false), origin),
            },
            (Shape::List, _) => one.push(field, field.kind().parse(text)?, origin),
            (Shape::One, _) => one.one(field, field.kind().parse(text)?, origin),
        }
        one.given_by(trust);
        self.merge(&one);
        Ok(())
    }

    /// Set a field's one value (a later call replaces it).
    pub fn add_one(&mut self, key: Field, val: Val, origin: Origin) {
        self.one(key, val, origin);
    }

    /// Add an item to a list field.
    pub fn add_item(&mut self, key: Field, val: Val, origin: Origin) {
        self.push(key, val, origin);
    }

    /// Set the entry `name` of a map field.
    pub fn add_entry(&mut self, key: Field, name: String, val: Val, origin: Origin) {
        self.put(key, name, val, origin);
    }

    /// Every value of this layer given by a source of `trust` (a layer is
    /// read whole from one source), save the names of a preset: a preset
    /// is a file of the owner's catalogue, its names the owner's words
    /// whoever named it.
    pub(crate) fn given_by(&mut self, trust: Trust) {
        for slot in self.slots.values_mut() {
            match slot {
                Slot::One(s) => s.trust = trust,
                Slot::List(items) => items
                    .iter_mut()
                    .filter(|s| !matches!(s.origin, Origin::Preset { .. }))
                    .for_each(|s| s.trust = trust),
                Slot::Map(items) => items.iter_mut().for_each(|(_, s)| s.trust = trust),
            }
        }
    }

    /// Lay `later` over this layer, by the merging rules of this module.
    /// A list's value given by a caller and again by the owner is the
    /// owner's, whichever came first.
    pub fn merge(&mut self, later: &Layer) {
        for (key, slot) in &later.slots {
            match (self.slots.get_mut(key), slot) {
                (Some(Slot::List(mine)), Slot::List(theirs)) => {
                    for item in theirs {
                        match mine.iter_mut().find(|m| m.val == item.val) {
                            Some(m) if item.trust == Trust::Owner => m.trust = Trust::Owner,
                            Some(_) => {}
                            None => mine.push(item.clone()),
                        }
                    }
                }
                (Some(Slot::Map(mine)), Slot::Map(theirs)) => {
                    for (k, v) in theirs {
                        match mine.iter_mut().find(|(m, _)| m == k) {
                            Some(entry) => entry.1 = v.clone(),
                            None => mine.push((k.clone(), v.clone())),
                        }
                    }
                }
                (_, Slot::List(theirs)) => {
                    let mut items: Vec<Sourced> = Vec::new();
                    for item in theirs {
                        match items.iter_mut().find(|m| m.val == item.val) {
                            Some(m) if item.trust == Trust::Owner => m.trust = Trust::Owner,
                            Some(_) => {}
                            None => items.push(item.clone()),
                        }
                    }
                    self.slots.insert(*key, Slot::List(items));
                }
                _ => {
                    self.slots.insert(*key, slot.clone());
                }
            }
        }
    }

    /// The single value of a field.
    pub fn get(&self, key: Field) -> Option<&Sourced> {
        match self.slots.get(&key) {
            Some(Slot::One(s)) => Some(s),
            _ => None,
        }
    }

    /// The values of a list field.
    pub fn list(&self, key: Field) -> &[Sourced] {
        match self.slots.get(&key) {
            Some(Slot::List(items)) => items,
            _ => &[],
        }
    }

    /// The entries of a map field.
    pub fn map(&self, key: Field) -> &[(String, Sourced)] {
        match self.slots.get(&key) {
            Some(Slot::Map(items)) => items,
            _ => &[],
        }
    }

    /// The value of a field as its kind reads it: `None` when no source
    /// set it. Resolution reads every option through these, by field.
    pub fn text(&self, key: Field) -> Option<String> {
        match self.get(key).map(|s| &s.val) {
            Some(Val::Text(t)) => Some(t.clone()),
            _ => None,
        }
    }
    pub fn flag(&self, key: Field) -> Option<bool> {
        match self.get(key).map(|s| &s.val) {
            Some(Val::Bool(b)) => Some(*b),
            _ => None,
        }
    }
    /// A switch: set, and true.
    pub fn on(&self, key: Field) -> bool {
        self.flag(key).unwrap_or(false)
    }
    pub fn bytes(&self, key: Field) -> Option<u64> {
        match self.get(key).map(|s| &s.val) {
            Some(Val::Size { bytes, .. }) => Some(*bytes),
            _ => None,
        }
    }
    pub fn duration(&self, key: Field) -> Option<Duration> {
        match self.get(key).map(|s| &s.val) {
            Some(Val::Duration { duration, .. }) => Some(*duration),
            _ => None,
        }
    }
    pub fn count(&self, key: Field) -> Option<u64> {
        match self.get(key).map(|s| &s.val) {
            Some(Val::Count(n)) => Some(*n),
            _ => None,
        }
    }
    pub fn cores(&self, key: Field) -> Option<f64> {
        match self.get(key).map(|s| &s.val) {
            Some(Val::Cores(c)) => Some(*c),
            _ => None,
        }
    }
    pub fn path(&self, key: Field) -> Option<PathBuf> {
        match self.get(key).map(|s| &s.val) {
            Some(Val::Path(p)) => Some(p.clone()),
            _ => None,
        }
    }
    /// An argument vector (the command); empty when none is set.
    pub fn argv(&self, key: Field) -> Vec<String> {
        match self.get(key).map(|s| &s.val) {
            Some(Val::Argv(a)) => a.clone(),
            _ => Vec::new(),
        }
    }
    /// `filesystem.mode: overlay` (`--overlay`) was asked for.
    pub fn overlay(&self) -> bool {
        matches!(
            self.get(Field::Overlay).map(|s| &s.val),
            Some(Val::Mode(WorkspaceMode::Overlay))
        )
    }
    /// The texts of a list field.
    pub fn texts(&self, key: Field) -> Vec<String> {
        self.texts_of(key, |_| true)
    }
    /// The texts of a list field given by sources `of` takes.
    pub fn texts_of(&self, key: Field, of: impl Fn(Trust) -> bool) -> Vec<String> {
        self.list(key)
            .iter()
            .filter(|s| of(s.trust))
            .filter_map(|s| match &s.val {
                Val::Text(t) | Val::Named { text: t, .. } => Some(t.clone()),
                _ => None,
            })
            .collect()
    }
    pub fn paths(&self, key: Field) -> Vec<PathBuf> {
        self.list(key)
            .iter()
            .filter_map(|s| match &s.val {
                Val::Path(p) => Some(p.clone()),
                _ => None,
            })
            .collect()
    }
    pub fn ports(&self, key: Field) -> Vec<u16> {
        self.list(key)
            .iter()
            .filter_map(|s| match s.val {
                Val::Port(p) => Some(p),
                _ => None,
            })
            .collect()
    }
    /// A map field's entries as `KEY=VALUE` (a secret's as `--secret`
    /// writes it).
    pub fn pairs(&self, key: Field) -> Vec<String> {
        self.map(key)
            .iter()
            .map(|(k, s)| match &s.val {
                Val::Text(v) => format!("{k}={v}"),
                // A command-line entry without `=`: kept whole, for the
                // resolver to refuse.
                _ => k.clone(),
            })
            .collect()
    }
    /// The names of a map field's entries whose value is `true` (the
    /// secrets whose placeholder may go in a body).
    pub fn names_set(&self, key: Field) -> Vec<String> {
        self.map(key)
            .iter()
            .filter(|(_, s)| s.val == Val::Bool(true))
            .map(|(name, _)| name.clone())
            .collect()
    }

    /// Whether the command gets a terminal: `tty` when a source set it,
    /// else whether the caller's standard input is one.
    pub fn terminal(&self, stdin_is_terminal: bool) -> Terminal {
        match self.flag(Field::Tty).unwrap_or(stdin_is_terminal) {
            true => Terminal::Pty,
            false => Terminal::Inherit,
        }
    }

    /// No audit log: asked on the command line, or asked and nothing
    /// names one (a profile's `audit_log` wins over its own or an earlier
    /// profile's `no_audit_log`).
    pub fn no_audit_log(&self) -> bool {
        self.on(Field::NoAuditLog)
            && (self.get(Field::AuditLog).is_none()
                || self
                    .get(Field::NoAuditLog)
                    .is_some_and(|s| s.origin == Origin::CommandLine))
    }

    /// Fill what no source set with warden's defaults (sized from the host),
    /// for `show`.
    pub fn with_defaults(&self, d: &Defaults) -> Layer {
        let mut out = Layer::default();
        let size = |bytes: u64| Val::Size {
            bytes,
            text: crate::units::format_size(bytes),
        };
        for (key, val) in [
            (Field::Hostname, Val::Text("warden".into())),
            (Field::AllowDegraded, Val::Bool(false)),
            (Field::Desktop, Val::Bool(false)),
            (Field::AllowHttp, Val::Bool(false)),
            (Field::Ask, Val::Bool(false)),
            (Field::EgressLearn, Val::Bool(false)),
            (Field::NetLog, Val::Bool(false)),
            (
                Field::EgressIdleTimeout,
                Val::Duration {
                    duration: DEFAULT_EGRESS_IDLE_TIMEOUT,
                    text: "10m".into(),
                },
            ),
            (Field::Overlay, Val::Mode(WorkspaceMode::Direct)),
            (Field::TmpSize, size(d.tmp_size)),
            (Field::Memory, size(d.memory)),
            (Field::Pids, Val::Count(d.pids)),
            (Field::OpenFiles, Val::Count(d.open_files)),
            (Field::FileSize, size(d.file_size)),
        ] {
            out.one(key, val, Origin::Default);
        }
        out.merge(self);
        out
    }

    /// Every value with its origin, one entry per list or map item, in the
    /// order of [`FIELDS`](crate::FIELDS): `(key, value, origin)`, the key
    /// being the field's profile key, its `*` replaced by the entry the
    /// value belongs to (`secrets.GH_TOKEN.in_body`).
    pub fn entries(&self) -> Vec<(String, serde_json::Value, &Origin)> {
        let mut out = Vec::new();
        for (field, slot) in &self.slots {
            let key = field.profile_name();
            match slot {
                Slot::One(s) => out.push((key.to_string(), s.val.json(), &s.origin)),
                Slot::List(items) => {
                    // Items of one entry are counted apart from another's.
                    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
                    for s in items {
                        let name = match &s.val {
                            Val::Named { name, .. } => name.as_str(),
                            _ => "*",
                        };
                        let i = counts.entry(name).or_default();
                        let key = key.replacen('*', name, 1);
                        out.push((format!("{key}[{i}]"), s.val.json(), &s.origin));
                        *i += 1;
                    }
                }
                Slot::Map(items) => {
                    for (k, s) in items {
                        let key = match key.contains('*') {
                            true => key.replacen('*', k, 1),
                            false => format!("{key}.{k}"),
                        };
                        out.push((key, s.val.json(), &s.origin));
                    }
                }
            }
        }
        out
    }

    /// The values as a profile document, nested by the sections of each
    /// field's profile key; a value of a `*` key goes into the entry it
    /// belongs to (a secret's `in_body` and `allow` into that secret).
    pub fn document(&self) -> serde_json::Value {
        use serde_json::{Map, Value};
        /// The object at `path` below `node`, made when missing; `None`
        /// when something else is there.
        fn object<'a>(
            node: &'a mut Map<String, Value>,
            path: &[&str],
        ) -> Option<&'a mut Map<String, Value>> {
            let Some((first, rest)) = path.split_first() else {
                return Some(node);
            };
            match node
                .entry(first.to_string())
                .or_insert_with(|| Value::Object(Map::new()))
            {
                Value::Object(m) => object(m, rest),
                _ => None,
            }
        }
        let mut root = Map::new();
        for (field, slot) in &self.slots {
            let path: Vec<&str> = field.profile_name().split('.').collect();
            let Some((last, parents)) = path.split_last() else {
                continue;
            };
            if let Some(star) = parents.iter().position(|s| *s == "*") {
                // `secrets.*.in_body`: each value into its own entry.
                let (before, after) = (&parents[..star], &parents[star + 1..]);
                let items: Vec<(&str, &Val)> = match slot {
                    Slot::Map(items) => items.iter().map(|(k, s)| (k.as_str(), &s.val)).collect(),
                    Slot::List(items) => items
                        .iter()
                        .filter_map(|s| match &s.val {
                            Val::Named { name, .. } => Some((name.as_str(), &s.val)),
                            _ => None,
                        })
                        .collect(),
                    Slot::One(_) => Vec::new(),
                };
                for (name, val) in items {
                    let at = [before, &[name], after].concat();
                    let Some(node) = object(&mut root, &at) else {
                        continue;
                    };
                    match slot {
                        Slot::List(_) => {
                            let list = node
                                .entry(last.to_string())
                                .or_insert_with(|| Value::Array(Vec::new()));
                            if let Value::Array(list) = list {
                                list.push(val.json());
                            }
                        }
                        _ => {
                            node.insert(last.to_string(), val.json());
                        }
                    }
                }
                continue;
            }
            let value = match (field, slot) {
                (Field::Secret, Slot::Map(items)) => items
                    .iter()
                    .map(|(k, s)| (k.clone(), secret_document(k, &s.val)))
                    .collect::<Map<_, _>>()
                    .into(),
                (_, Slot::One(s)) => s.val.json(),
                (_, Slot::List(items)) => items.iter().map(|s| s.val.json()).collect(),
                (_, Slot::Map(items)) => items
                    .iter()
                    .map(|(k, s)| (k.clone(), s.val.json()))
                    .collect::<Map<_, _>>()
                    .into(),
            };
            if let Some(node) = object(&mut root, parents) {
                node.insert(last.to_string(), value);
            }
        }
        root.into()
    }
}

/// A secret as a profile writes it: its source and hosts (the layer keeps
/// them as `SOURCE@HOSTS`, the form of `--secret`); the text itself when it
/// does not read as one (the resolver reports why).
fn secret_document(name: &str, val: &Val) -> serde_json::Value {
    let Val::Text(text) = val else {
        return val.json();
    };
    let Ok(spec) = crate::SecretSpec::parse(&format!("{name}={text}")) else {
        return text.as_str().into();
    };
    let (key, source) = match spec.source {
        crate::SecretSource::Env(v) => ("from_env", serde_json::Value::from(v)),
        crate::SecretSource::File(p) => ("from_file", p.to_string_lossy().into_owned().into()),
        crate::SecretSource::Command(argv) => ("from_command", argv.into()),
    };
    let hosts: Vec<String> = spec.hosts.into_iter().map(|h| h.source).collect();
    serde_json::json!({ key: source, "hosts": hosts })
}
