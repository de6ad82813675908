//! From profile files, presets and command-line flags to one [`Layer`]:
//! finding profiles and presets (built in, or in the user's directory),
//! following `extends`, expanding presets, and merging every source with the
//! origin of each value kept for `warden profile show --explain`.
//!
//! Merging rules, in order of the sources (the profiles a profile extends,
//! in order, then the profile itself, then the command line):
//! lists are united (order kept, duplicates dropped), maps are merged key by
//! key (a later value replaces an earlier one), and any other value is taken
//! from the last source that sets it. This module reads files and nothing
//! else; the caller hands it HOME and the configuration directory.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::fields::Field;
use crate::profile::{parse_preset, parse_profile_tree, suggest, Pos, PresetFile, WorkspaceMode};
use crate::read::{self, Node, Place, Placed, Reading};
use crate::trust::{self, Refusal, Trust};
use crate::{Defaults, Terminal, DEFAULT_EGRESS_IDLE_TIMEOUT};

/// Presets shipped with warden.
pub const BUILTIN_PRESETS: &[(&str, &str)] = &[
    ("anthropic", include_str!("../presets/anthropic.yaml")),
    ("arxiv", include_str!("../presets/arxiv.yaml")),
    ("crates-io", include_str!("../presets/crates-io.yaml")),
    ("cve", include_str!("../presets/cve.yaml")),
    ("debian", include_str!("../presets/debian.yaml")),
    ("docker-hub", include_str!("../presets/docker-hub.yaml")),
    ("gemini", include_str!("../presets/gemini.yaml")),
    ("github", include_str!("../presets/github.yaml")),
    (
        "github-readonly",
        include_str!("../presets/github-readonly.yaml"),
    ),
    ("gitlab", include_str!("../presets/gitlab.yaml")),
    ("go", include_str!("../presets/go.yaml")),
    ("huggingface", include_str!("../presets/huggingface.yaml")),
    ("llm-apis", include_str!("../presets/llm-apis.yaml")),
    (
        "llm-apis-no-uploads",
        include_str!("../presets/llm-apis-no-uploads.yaml"),
    ),
    ("mistral", include_str!("../presets/mistral.yaml")),
    ("news", include_str!("../presets/news.yaml")),
    ("npm", include_str!("../presets/npm.yaml")),
    ("npm-readonly", include_str!("../presets/npm-readonly.yaml")),
    ("openai", include_str!("../presets/openai.yaml")),
    ("openrouter", include_str!("../presets/openrouter.yaml")),
    ("pypi", include_str!("../presets/pypi.yaml")),
    (
        "pypi-readonly",
        include_str!("../presets/pypi-readonly.yaml"),
    ),
    ("sentry", include_str!("../presets/sentry.yaml")),
    (
        "stackoverflow",
        include_str!("../presets/stackoverflow.yaml"),
    ),
    ("ubuntu", include_str!("../presets/ubuntu.yaml")),
    ("wikipedia", include_str!("../presets/wikipedia.yaml")),
];

/// Profiles shipped with warden: the reference agents and what they share.
pub const BUILTIN_PROFILES: &[(&str, &str)] = &[
    ("base", include_str!("../profiles/base.yaml")),
    (
        "code-interpreter-v1",
        include_str!("../profiles/code-interpreter-v1.yaml"),
    ),
    (
        "code-interpreter-v1-setup",
        include_str!("../profiles/code-interpreter-v1-setup.yaml"),
    ),
    ("debugger", include_str!("../profiles/debugger.yaml")),
    ("desktop", include_str!("../profiles/desktop.yaml")),
    ("devops", include_str!("../profiles/devops.yaml")),
    ("feature-dev", include_str!("../profiles/feature-dev.yaml")),
    ("python", include_str!("../profiles/python.yaml")),
    ("researcher", include_str!("../profiles/researcher.yaml")),
    ("security", include_str!("../profiles/security.yaml")),
];

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
    /// the trust rule when it is read ([`Loader::hold_to_trust`]); some
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

    fn push(&mut self, key: Field, val: Val, origin: Origin) {
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
    fn given_by(&mut self, trust: Trust) {
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

/// Where to find profiles and presets beyond the built-in ones. The caller
/// reads the environment; this crate does not.
#[derive(Debug, Clone, Default)]
pub struct Catalog {
    /// The caller's HOME, for `~` in paths.
    pub home: Option<PathBuf>,
    /// warden's configuration directory: `$XDG_CONFIG_HOME/warden` or
    /// `~/.config/warden`. Profiles in `profiles/NAME.yaml`, presets in
    /// `presets/NAME.yaml`; these win over built-in ones of the same name.
    pub config_dir: Option<PathBuf>,
}

/// A profile or preset's text and where it came from.
#[derive(Debug, Clone)]
pub struct SourceText {
    /// A path, or `builtin:NAME` for those shipped with warden.
    pub label: String,
    /// The directory relative paths resolve against (none for built-ins).
    pub dir: Option<PathBuf>,
    pub text: String,
    /// A document given as JSON (an API request's `spec`): read instead of
    /// `text`, each value placed at its JSON pointer.
    pub body: Option<serde_json::Value>,
    /// Who wrote it: a file of the owner's catalogue (or one the owner
    /// named) is the owner's; a document a caller sent is the caller's,
    /// and the trust rule ([`crate::trust`]) holds it to what a caller may
    /// set and name.
    pub trust: Trust,
}

/// Why a profile could not be composed. Problems inside files are
/// [`Diagnostic`]s, each naming its file, line and column.
#[derive(Debug, thiserror::Error)]
pub enum ComposeError {
    #[error("no profile named {name:?}{}; see `warden profile list`", hint(.suggestion))]
    UnknownProfile {
        name: String,
        suggestion: Option<String>,
    },
    #[error("no preset named {name:?}{}", preset_hint(.name, .suggestion, *.profile))]
    UnknownPreset {
        name: String,
        suggestion: Option<String>,
        /// A profile has that name (`desktop`): what was meant.
        profile: bool,
    },
    /// A name that is not a plain name of the catalogue, from someone who
    /// may name nothing else.
    #[error("{kind} {name:?}: {refusal}")]
    NotAName {
        kind: &'static str,
        name: String,
        refusal: Refusal,
    },
    #[error("cannot read {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n"))]
    Invalid(Vec<Diagnostic>),
}

impl ComposeError {
    /// What a caller is told of an owner's profile that does not compose
    /// or resolve: that it does not, never its text or where it is.
    pub fn owners_profile() -> ComposeError {
        ComposeError::Invalid(vec![Diagnostic {
            severity: Severity::Error,
            field: None,
            file: OWNERS_PROFILE.into(),
            pos: Pos::default(),
            pointer: None,
            message: OWNERS_PROFILE_FAILS.into(),
            refusal: None,
            code: OWNERS_PROFILE_CODE,
        }])
    }

    /// The field the error is about, when it is about one: a profile that
    /// cannot be found or read was named by `--profile`.
    pub fn field(&self) -> Option<Field> {
        match self {
            ComposeError::UnknownProfile { .. } | ComposeError::Read { .. } => Some(Field::Profile),
            ComposeError::UnknownPreset { .. } => Some(Field::Presets),
            ComposeError::NotAName { kind, .. } if *kind == "preset" => Some(Field::Presets),
            ComposeError::NotAName { .. } => Some(Field::Profile),
            ComposeError::Invalid(_) => None,
        }
    }

    /// The stable reason code of the error: the trust rule's refusal
    /// first, else the first error's.
    pub fn code(&self) -> &'static str {
        match self {
            ComposeError::UnknownProfile { .. } => "unknown_profile",
            ComposeError::UnknownPreset { .. } => "unknown_preset",
            ComposeError::NotAName { refusal, .. } => refusal.code(),
            ComposeError::Read { .. } => "cannot_read",
            ComposeError::Invalid(diags) => diags
                .iter()
                .find(|d| d.refusal.is_some())
                .or_else(|| diags.iter().find(|d| d.severity == Severity::Error))
                .map_or("invalid", |d| d.code),
        }
    }

    /// The trust rule's refusal behind the error, when it is one: the
    /// first, for a file with several findings.
    pub fn refusal(&self) -> Option<Refusal> {
        match self {
            ComposeError::NotAName { refusal, .. } => Some(*refusal),
            ComposeError::Invalid(diags) => diags.iter().find_map(|d| d.refusal),
            _ => None,
        }
    }
}

/// Presets are lists of names only; a profile asked for as a preset is
/// pointed at the profile (each door has its own way to name one).
fn preset_hint(name: &str, suggestion: &Option<String>, profile: bool) -> String {
    if profile {
        format!(
            ": presets are lists of names a sandbox may reach, and {name:?} is a profile: name it as the profile to start from, not as a preset"
        )
    } else {
        format!("{}; see `warden preset list`", hint(suggestion))
    }
}

fn hint(s: &Option<String>) -> String {
    s.as_ref()
        .map(|s| format!(" (did you mean {s:?}?)"))
        .unwrap_or_default()
}

/// How serious a finding is: errors stop a run, warnings do not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    Error,
    Warning,
}

/// One finding about a file, at a line and column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    pub severity: Severity,
    /// The field the finding is about, when it is about one (not for
    /// broken YAML, say).
    pub field: Option<Field>,
    pub file: String,
    pub pos: Pos,
    /// For a request's body: the JSON pointer of the finding (its `pos`
    /// is then the start).
    pub pointer: Option<String>,
    pub message: String,
    /// The trust rule's refusal, when that is what the finding is.
    pub refusal: Option<Refusal>,
    /// The stable reason code of the finding (`unknown_key`,
    /// `memory_too_small`, `owner_only`, ...), which each door passes on
    /// as it is while it words the message.
    pub code: &'static str,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sev = match self.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        match &self.pointer {
            Some(p) => write!(f, "{} {p}: {sev}: {}", self.file, self.message),
            None => write!(f, "{}:{}: {sev}: {}", self.file, self.pos, self.message),
        }
    }
}

/// Does `s` name a file rather than a profile (for the owner, who may)?
fn is_path(s: &str) -> bool {
    trust::names_a_file(s)
}

impl Catalog {
    fn user_file(&self, kind: &str, name: &str) -> Option<PathBuf> {
        // A name is joined to a directory: one that is not a plain name
        // (`../x`, `a/b`) would climb out of it.
        if !trust::is_catalog_name(name) {
            return None;
        }
        let p = self
            .config_dir
            .as_ref()?
            .join(kind)
            .join(format!("{name}.yaml"));
        p.is_file().then_some(p)
    }

    fn user_names(&self, kind: &str) -> Vec<String> {
        let Some(dir) = self.config_dir.as_ref().map(|d| d.join(kind)) else {
            return Vec::new();
        };
        let Ok(entries) = std::fs::read_dir(dir) else {
            return Vec::new();
        };
        let mut names: Vec<String> = entries
            .flatten()
            .filter_map(|e| {
                e.file_name()
                    .to_str()?
                    .strip_suffix(".yaml")
                    .map(str::to_string)
            })
            .collect();
        names.sort();
        names
    }

    fn names(&self, kind: &str, builtin: &[(&str, &str)]) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = builtin
            .iter()
            .map(|(n, _)| (n.to_string(), format!("builtin:{n}")))
            .collect();
        for n in self.user_names(kind) {
            let label = self
                .user_file(kind, &n)
                .map(|p| p.display().to_string())
                .unwrap_or_default();
            match out.iter_mut().find(|(m, _)| *m == n) {
                Some(entry) => entry.1 = label,
                None => out.push((n, label)),
            }
        }
        out.sort();
        out
    }

    /// Every profile name and where it is read from.
    pub fn profile_names(&self) -> Vec<(String, String)> {
        self.names("profiles", BUILTIN_PROFILES)
    }

    /// Every preset name and where it is read from.
    pub fn preset_names(&self) -> Vec<(String, String)> {
        self.names("presets", BUILTIN_PRESETS)
    }

    fn find(
        &self,
        kind: &'static str,
        builtin: &[(&str, &str)],
        name: &str,
    ) -> Result<Option<SourceText>, ComposeError> {
        // The catalogue holds plain names only, for everyone: a name is
        // never a way out of the catalogue's directories.
        if !trust::is_catalog_name(name) {
            return Err(ComposeError::NotAName {
                kind: kind.trim_end_matches('s'),
                name: name.to_string(),
                refusal: Refusal::NotAName,
            });
        }
        if let Some(path) = self.user_file(kind, name) {
            return read_file(&path).map(Some);
        }
        Ok(builtin
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(n, text)| SourceText {
                label: format!("builtin:{n}"),
                dir: None,
                text: text.to_string(),
                body: None,
                trust: Trust::Owner,
            }))
    }

    /// A profile by name (user directory first, then built-in) or, for
    /// the owner, by path.
    pub fn profile(&self, name_or_path: &str) -> Result<SourceText, ComposeError> {
        self.profile_for(name_or_path, Trust::Owner)
    }

    /// A profile as `trust` may name it: the owner by name or path, anyone
    /// else by a plain name of the catalogue only (what is found there is
    /// the owner's file, and is trusted as such).
    pub fn profile_for(&self, name: &str, trust: Trust) -> Result<SourceText, ComposeError> {
        if let Err(refusal) = trust::may_name_profile(name, trust) {
            return Err(ComposeError::NotAName {
                kind: "profile",
                name: name.to_string(),
                refusal,
            });
        }
        if is_path(name) {
            return read_file(Path::new(name));
        }
        self.find("profiles", BUILTIN_PROFILES, name)?
            .ok_or_else(|| ComposeError::UnknownProfile {
                name: name.to_string(),
                suggestion: self.nearest(&self.profile_names(), name),
            })
    }

    /// A preset by name (user directory first, then built-in).
    pub fn preset(&self, name: &str) -> Result<SourceText, ComposeError> {
        self.find("presets", BUILTIN_PRESETS, name)?
            .ok_or_else(|| ComposeError::UnknownPreset {
                name: name.to_string(),
                suggestion: self.nearest(&self.preset_names(), name),
                profile: self.profile_names().iter().any(|(n, _)| n == name),
            })
    }

    fn nearest(&self, names: &[(String, String)], name: &str) -> Option<String> {
        suggest(name, names.iter().map(|(n, _)| n.as_str())).map(str::to_string)
    }

    /// Expand `~` against HOME and resolve a relative path against `dir`.
    fn expand(&self, raw: &str, dir: Option<&Path>) -> Result<PathBuf, String> {
        let p = if raw == "~" || raw.starts_with("~/") {
            let home = self
                .home
                .as_ref()
                .ok_or_else(|| format!("{raw:?} starts with ~ but HOME is not set"))?;
            home.join(raw.trim_start_matches('~').trim_start_matches('/'))
        } else if raw.starts_with('~') {
            return Err(format!(
                "{raw:?}: only ~ and ~/ are understood, not another user's home"
            ));
        } else {
            PathBuf::from(raw)
        };
        if p.is_absolute() {
            return Ok(p);
        }
        match dir {
            Some(d) => Ok(d.join(p)),
            None => Err(format!(
                "{raw:?} is relative, and a built-in profile has no directory to resolve it against"
            )),
        }
    }
}

fn read_file(path: &Path) -> Result<SourceText, ComposeError> {
    let text = std::fs::read_to_string(path).map_err(|source| ComposeError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let dir = path
        .parent()
        .map(|d| {
            if d.as_os_str().is_empty() {
                Path::new(".")
            } else {
                d
            }
        })
        // The real directory: a relative path of the profile then names
        // what the jail mounts (it follows no link), and `validate` and
        // `run` see the same path whichever way the profile was named.
        .and_then(|d| {
            std::fs::canonicalize(d)
                .or_else(|_| std::path::absolute(d))
                .ok()
        });
    Ok(SourceText {
        label: path.display().to_string(),
        dir,
        text,
        body: None,
        // Only the owner's own lookups read a file: a catalogue entry, or
        // a path the owner gave.
        trust: Trust::Owner,
    })
}

/// A profile with every source merged, and what was found on the way.
#[derive(Debug, Clone, Default)]
pub struct Composed {
    /// The profile's name (none when only the command line was given).
    pub name: Option<String>,
    pub description: Option<String>,
    /// Each source, in merge order: `(label, values)`.
    pub sources: Vec<(String, Layer)>,
    /// All sources merged.
    pub merged: Layer,
    /// Errors and warnings, each with its place.
    pub diagnostics: Vec<Diagnostic>,
}

impl Composed {
    /// The fully resolved profile as a document, defaults filled in, for
    /// `warden profile show`.
    pub fn show(&self, defaults: &Defaults) -> serde_json::Value {
        let mut doc = self.merged.with_defaults(defaults).document();
        if let serde_json::Value::Object(m) = &mut doc {
            let mut head = serde_json::Map::new();
            if let Some(n) = &self.name {
                head.insert("name".into(), n.as_str().into());
            }
            if let Some(d) = &self.description {
                head.insert("description".into(), d.as_str().into());
            }
            head.append(m);
            return head.into();
        }
        doc
    }

    pub fn has_errors(&self) -> bool {
        self.diagnostics
            .iter()
            .any(|d| d.severity == Severity::Error)
    }

    /// Fail with every error when there is one.
    pub fn into_valid(self) -> Result<Composed, ComposeError> {
        if self.has_errors() {
            Err(ComposeError::Invalid(
                self.diagnostics
                    .into_iter()
                    .filter(|d| d.severity == Severity::Error)
                    .collect(),
            ))
        } else {
            Ok(self)
        }
    }
}

struct Loader<'a> {
    catalog: &'a Catalog,
    out: Composed,
    /// The profiles being loaded, outermost first, for cycle detection.
    stack: Vec<String>,
}

/// What the loader keeps of the outermost document: its name, its
/// description and the first profile it extends.
#[derive(Default)]
struct Head {
    name: Option<String>,
    description: Option<String>,
    first_extends: Option<String>,
}

impl Loader<'_> {
    fn finding(
        &mut self,
        code: &'static str,
        field: Option<Field>,
        file: &str,
        place: &Place,
        message: String,
    ) {
        self.out.diagnostics.push(Diagnostic {
            severity: Severity::Error,
            field,
            file: file.to_string(),
            pos: place.pos(),
            pointer: place.pointer().map(str::to_string),
            message,
            refusal: None,
            code,
        });
    }

    fn refuse(&mut self, field: Field, file: &str, place: &Place, refusal: Refusal) {
        self.out.diagnostics.push(Diagnostic {
            severity: Severity::Error,
            field: Some(field),
            file: file.to_string(),
            pos: place.pos(),
            pointer: place.pointer().map(str::to_string),
            message: refusal.to_string(),
            refusal: Some(refusal),
            code: refusal.code(),
        });
    }

    /// The trust rule's second half on one source's values: a source that
    /// is not the owner's sets nothing that reaches the host, however it
    /// spells it.
    fn hold_to_trust(&mut self, layer: &Layer, label: &str, trust: Trust) {
        for (field, slot) in &layer.slots {
            let Err(refusal) = trust::may_set(*field, trust) else {
                continue;
            };
            let first = match slot {
                Slot::One(s) => Some(s),
                Slot::List(items) => items.first(),
                Slot::Map(items) => items.first().map(|(_, s)| s),
            };
            let place = match first.map(|s| &s.origin) {
                // The field is refused, whatever its value: at its key
                // (a pointer cut to the depth of the field's path).
                Some(Origin::Body { pointer, .. }) => {
                    let depth = field.json_path().map_or(0, |p| p.matches('/').count());
                    let cut: Vec<&str> = pointer.split('/').take(depth + 1).collect();
                    Place::Pointer(cut.join("/"))
                }
                Some(o) => Place::Line(o.place().map(|(_, p)| p).unwrap_or_default()),
                None => Place::Line(Pos::default()),
            };
            self.refuse(*field, label, &place, refusal);
        }
    }

    /// A caller's values over what the owner's files (read before it: the
    /// profiles it extends) set for the same field: only tighter
    /// ([`trust::may_replace`]).
    /// `checked` picks the values to hold (a door's layer holds the
    /// owner's command line beside a caller's annotations).
    fn hold_to_owners_ceiling(
        &mut self,
        layer: &Layer,
        label: &str,
        checked: impl Fn(&Sourced) -> bool,
    ) {
        let mut owners = Layer::default();
        for (_, l) in &self.out.sources {
            owners.merge(l);
        }
        for (field, slot) in &layer.slots {
            if let (Slot::List(theirs), Some(Slot::List(mine))) = (slot, owners.slots.get(field)) {
                let mine: Vec<&Val> = mine
                    .iter()
                    .filter(|m| m.trust == Trust::Owner)
                    .map(|m| &m.val)
                    .collect();
                for t in theirs.iter().filter(|t| checked(t)) {
                    if let Err(refusal) = trust::may_add(*field, &mine, &t.val) {
                        let place = match &t.origin {
                            Origin::Body { pointer, .. } => Place::Pointer(pointer.clone()),
                            o => Place::Line(o.place().map(|(_, p)| p).unwrap_or_default()),
                        };
                        self.refuse(*field, label, &place, refusal);
                    }
                }
                continue;
            }
            let (Slot::One(theirs), Some(Slot::One(mine))) = (slot, owners.slots.get(field)) else {
                continue;
            };
            if !checked(theirs) || mine.trust != Trust::Owner {
                continue;
            }
            if let Err(refusal) = trust::may_replace(*field, &mine.val, &theirs.val) {
                let place = match &theirs.origin {
                    Origin::Body { pointer, .. } => Place::Pointer(pointer.clone()),
                    o => Place::Line(o.place().map(|(_, p)| p).unwrap_or_default()),
                };
                self.refuse(*field, label, &place, refusal);
            }
        }
    }

    /// The document's tree: a request's body as given, a file's text
    /// parsed with every finding of its shape said (each entry the parser
    /// stops at is said and left out, and the rest read again).
    fn tree(&mut self, src: &SourceText) -> Placed<Node> {
        if let Some(body) = &src.body {
            return read::from_json(body);
        }
        let (tree, errors) = parse_profile_tree(&src.text);
        for e in errors {
            self.finding(BAD_YAML, None, &src.label, &Place::Line(e.pos), e.message);
        }
        tree
    }

    fn load(&mut self, src: SourceText) -> Head {
        let label = src.label.clone();
        let tree = self.tree(&src);
        let dir = src.dir.clone();
        let catalog = self.catalog;
        let origin = |place: &Place| match place {
            Place::Line(pos) => Origin::File {
                file: label.clone(),
                pos: *pos,
            },
            Place::Pointer(pointer) => Origin::Body {
                label: label.clone(),
                pointer: pointer.clone(),
            },
        };
        // Paths: expanded now, so that every later source and the
        // resolver see absolute paths.
        let path = |raw: &str| catalog.expand(raw, dir.as_deref());
        // A body is an API request's; anything else is a profile file.
        let door = match src.body {
            Some(_) => crate::fields::Door::Api,
            None => crate::fields::Door::Profile,
        };
        let doc = read::read(
            &tree,
            &Reading {
                origin: &origin,
                path: &path,
                door,
            },
        );
        for f in &doc.findings {
            self.finding(f.code, f.field, &label, &f.place, f.message.clone());
        }
        self.stack.push(label.clone());
        for parent in &doc.extends {
            // A caller's document names the owner's profiles by name only;
            // what it names is then the owner's file, at every depth.
            if let Err(refusal) = trust::may_name_profile(&parent.value, src.trust) {
                self.refuse(Field::Extends, &label, &parent.place, refusal);
                continue;
            }
            let found = if is_path(&parent.value) {
                match self.catalog.expand(&parent.value, src.dir.as_deref()) {
                    Ok(p) => read_file(&p).map_err(|e| e.to_string()),
                    Err(e) => Err(e),
                }
            } else {
                self.catalog
                    .profile(&parent.value)
                    .map_err(|e| e.to_string())
            };
            match found {
                Ok(parent_src) => {
                    if let Some(i) = self.stack.iter().position(|l| *l == parent_src.label) {
                        let mut cycle: Vec<&str> =
                            self.stack[i..].iter().map(String::as_str).collect();
                        cycle.push(&parent_src.label);
                        let msg = format!("`extends` makes a cycle: {}", cycle.join(" -> "));
                        self.finding(
                            "extends_cycle",
                            Some(Field::Extends),
                            &label,
                            &parent.place,
                            msg,
                        );
                    } else {
                        self.load(parent_src);
                    }
                }
                // A caller is not told where the owner's file is, nor why
                // it cannot be read.
                Err(_) if src.trust == Trust::Caller => self.finding(
                    OWNERS_PROFILE_CODE,
                    Some(Field::Extends),
                    &label,
                    &parent.place,
                    format!("{OWNERS_PROFILE}: {OWNERS_PROFILE_FAILS}"),
                ),
                Err(e) => self.finding(
                    "unknown_profile",
                    Some(Field::Extends),
                    &label,
                    &parent.place,
                    e,
                ),
            }
        }
        self.stack.pop();
        // The presets' names come first, the document's own after them.
        let mut layer = Layer::default();
        for preset in &doc.presets {
            self.preset(&mut layer, &preset.value, &label, &preset.place);
        }
        // Not merged: a name written twice in one file is said (by the
        // checks of `validate`) as the file has it.
        for (field, slot) in doc.layer.slots {
            match (layer.slots.get_mut(&field), slot) {
                (Some(Slot::List(mine)), Slot::List(theirs)) => mine.extend(theirs),
                (_, slot) => {
                    layer.slots.insert(field, slot);
                }
            }
        }
        self.hold_to_trust(&layer, &label, src.trust);
        if src.trust == Trust::Caller {
            self.hold_to_owners_ceiling(&layer, &label, |_| true);
        }
        layer.given_by(src.trust);
        self.out.sources.push((label, layer));
        Head {
            name: doc.name.map(|n| n.value),
            description: doc.description.map(|d| d.value),
            first_extends: doc.extends.first().map(|e| e.value.clone()),
        }
    }

    fn preset(&mut self, l: &mut Layer, name: &str, label: &str, place: &Place) {
        let src = match self.catalog.preset(name) {
            Ok(s) => s,
            Err(ComposeError::NotAName { refusal, .. }) => {
                self.refuse(Field::Presets, label, place, refusal);
                return;
            }
            Err(e) => {
                self.finding(e.code(), Some(Field::Presets), label, place, e.to_string());
                return;
            }
        };
        match parse_preset(&src.text) {
            Ok(p) => {
                let lists = [
                    (Field::AllowDomain, p.domains),
                    (Field::AllowRequest, p.allow_requests),
                    (Field::DenyRequest, p.deny_requests),
                    (Field::AskRequest, p.ask_requests),
                ];
                for (field, values) in lists {
                    for v in values {
                        l.push(
                            field,
                            Val::Text(v.value),
                            Origin::Preset {
                                preset: name.to_string(),
                                file: label.to_string(),
                                pos: place.pos(),
                            },
                        );
                    }
                }
            }
            Err(e) => self.finding(BAD_YAML, None, &src.label, &Place::Line(e.pos), e.message),
        }
    }
}

/// A caller is told what is wrong with its own document, never what the
/// owner's files hold or where they are: a finding in one of them (which
/// quotes the value it could not read) is said without its place or text.
fn conceal_owners_files(diagnostics: &mut [Diagnostic], own_label: &str) {
    for d in diagnostics.iter_mut().filter(|d| d.file != own_label) {
        d.file = OWNERS_PROFILE.into();
        d.pos = Pos::default();
        d.pointer = None;
        d.message = OWNERS_PROFILE_FAILS.into();
    }
}

/// How a caller is told of one of the owner's profiles.
const OWNERS_PROFILE: &str = "a profile of the owner's";
/// The reason code of a profile of the owner's that does not compose, as
/// a caller is told of it.
const OWNERS_PROFILE_CODE: &str = "owners_profile_invalid";
/// The reason code of a document that is not YAML (or JSON) at all.
const BAD_YAML: &str = "not_a_document";
const OWNERS_PROFILE_FAILS: &str =
    "it does not compose; its owner sees why with `warden profile validate`";

/// Read a preset file and report what is wrong with it.
pub fn load_preset(
    catalog: &Catalog,
    name: &str,
) -> Result<(SourceText, PresetFile), ComposeError> {
    let src = catalog.preset(name)?;
    let file = parse_preset(&src.text).map_err(|e| {
        ComposeError::Invalid(vec![Diagnostic {
            severity: Severity::Error,
            field: None,
            file: src.label.clone(),
            pos: e.pos,
            pointer: None,
            message: e.message,
            refusal: None,
            code: BAD_YAML,
        }])
    })?;
    Ok((src, file))
}

/// Compose a profile (by name or path; none for flags alone) with the
/// command line. Problems in files are collected in
/// [`Composed::diagnostics`]; only a profile that cannot be found at all is
/// an error here.
pub fn compose(
    catalog: &Catalog,
    profile: Option<&str>,
    flags: &Layer,
) -> Result<Composed, ComposeError> {
    let source = profile.map(|name| catalog.profile(name)).transpose()?;
    compose_source(catalog, source, flags)
}

/// [`compose`] with the profile's text already in hand: read from the
/// catalog, or given whole (an API request's inline profile, whose
/// `extends` still reach the catalog).
pub fn compose_source(
    catalog: &Catalog,
    profile: Option<SourceText>,
    flags: &Layer,
) -> Result<Composed, ComposeError> {
    let mut loader = Loader {
        catalog,
        out: Composed::default(),
        stack: Vec::new(),
    };
    if let Some(src) = profile {
        let label = src.label.clone();
        let dir_name = Path::new(&label).file_stem().map(|s| {
            s.to_string_lossy()
                .trim_start_matches("builtin:")
                .to_string()
        });
        let (own_label, trust) = (src.label.clone(), src.trust);
        let head = loader.load(src);
        loader.out.name = match trust {
            Trust::Owner => head.name.or(dir_name),
            // The name labels what a profile's sandboxes share (its
            // caches): a caller's document takes the name of the owner's
            // profile it builds on, never one it chooses (which could be
            // any other profile's, one the owner names only by path
            // included).
            Trust::Caller => head.first_extends,
        };
        loader.out.description = head.description;
        if trust == Trust::Caller {
            conceal_owners_files(&mut loader.out.diagnostics, &own_label);
        }
    }
    let mut cli = flags.clone();
    // A preset named directly (`--preset NAME`, an API body's
    // `egress.presets`): an unknown name is refused as the field's own
    // error; the domains come in as a profile's presets do, labelled by
    // where the name was given.
    let named: Vec<(String, String)> = cli
        .list(Field::Presets)
        .iter()
        .filter_map(|s| {
            let (Val::Text(t) | Val::Named { text: t, .. }) = &s.val else {
                return None;
            };
            let label = match &s.origin {
                Origin::Body { label, .. } => label.clone(),
                origin => origin.to_string(),
            };
            Some((t.clone(), label))
        })
        .collect();
    for (name, label) in named {
        catalog.preset(&name)?;
        loader.preset(&mut cli, &name, &label, &Place::Line(Pos::default()));
    }
    cli.slots.remove(&Field::Presets);
    // A pod's annotations come in beside the node's own values: the
    // caller's among them are held to the owner's profile as a caller's
    // document is.
    let label = "annotations";
    loader.hold_to_owners_ceiling(&cli, label, |s| s.trust == Trust::Caller);
    if !cli.slots.is_empty() {
        loader.out.sources.push(("command line".into(), cli));
    }
    let mut merged = Layer::default();
    for (_, layer) in &loader.out.sources {
        merged.merge(layer);
    }
    loader.out.merged = merged;
    Ok(loader.out)
}
