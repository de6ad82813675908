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

use std::fmt;
use std::path::{Path, PathBuf};

use crate::fields::Field;
use crate::profile::{parse_preset, suggest, Pos, PresetFile};
use crate::read::{self, parse_profile_tree, Node, Place, Placed, Reading};
use crate::trust::{self, Refusal};
// The layer's types keep their old path for the doors that name them.
use crate::layer::Trust;
pub use crate::layer::{Layer, Origin, Slot, Sourced, Val};
use crate::Defaults;

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
    ("agent", include_str!("../profiles/agent.yaml")),
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
            if let (Slot::List(theirs), true) = (slot, trust::within_owners(*field)) {
                self.hold_request_rules(&owners, *field, theirs, label, &checked);
                continue;
            }
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

    /// A caller's allow and ask request rules, held under the owner's
    /// (both kinds: an ask may become an allow) and off the names the
    /// owner pinned ([`trust::may_add_request`]).
    fn hold_request_rules(
        &mut self,
        owners: &Layer,
        field: Field,
        theirs: &[Sourced],
        label: &str,
        checked: &impl Fn(&Sourced) -> bool,
    ) {
        let mut rules: Vec<&Val> = Vec::new();
        for f in [Field::AllowRequest, Field::AskRequest] {
            if let Some(Slot::List(l)) = owners.slots.get(&f) {
                rules.extend(l.iter().filter(|m| m.trust == Trust::Owner).map(|m| &m.val));
            }
        }
        let pinned: Vec<&str> = match owners.slots.get(&Field::AddHost) {
            Some(Slot::Map(m)) => m
                .iter()
                .filter(|(_, v)| v.trust == Trust::Owner)
                .map(|(k, _)| k.as_str())
                .collect(),
            _ => Vec::new(),
        };
        for t in theirs.iter().filter(|t| checked(t)) {
            if let Err(refusal) = trust::may_add_request(&t.val, &rules, &pinned) {
                let place = match &t.origin {
                    Origin::Body { pointer, .. } => Place::Pointer(pointer.clone()),
                    o => Place::Line(o.place().map(|(_, p)| p).unwrap_or_default()),
                };
                self.refuse(field, label, &place, refusal);
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
