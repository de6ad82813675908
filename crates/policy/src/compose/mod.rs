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

use std::path::Path;

use crate::fields::Field;
use crate::profile::{parse_preset, Pos, PresetFile};
use crate::read::{self, parse_profile_tree, Node, Place, Placed, Reading};
use crate::trust::{self, Refusal};
// The layer's types keep their old path for the doors that name them.
use crate::layer::Trust;
pub use crate::layer::{Layer, Origin, Slot, Sourced, Val};
use crate::Defaults;

mod catalog;
mod ceiling;
mod error;

use catalog::{is_path, read_file};
pub use catalog::{Catalog, SourceText, BUILTIN_PRESETS, BUILTIN_PROFILES};
pub use error::{ComposeError, Diagnostic, Severity};
use error::{OWNERS_PROFILE, OWNERS_PROFILE_CODE, OWNERS_PROFILE_FAILS};

/// The reason code of a document that is not YAML (or JSON) at all.
const BAD_YAML: &str = "not_a_document";

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
    /// Every file an `extends` named by path, at any depth, as expanded
    /// (found or not: a file that does not exist yet is read once someone
    /// makes it). With the catalogue's own entries, these are the files
    /// whose text is taken with the trust of whoever wrote the profile
    /// (the owner's closure: `warden_runtime::owners_files`).
    pub files: Vec<std::path::PathBuf>,
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
    /// The profile a caller was given (its document's first `extends`,
    /// merged with all it extends): the ceiling of everything the caller
    /// chose ([`ceiling`]'s module documentation).
    given: Option<Layer>,
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
        for (index, parent) in doc.extends.iter().enumerate() {
            // A caller's document names the owner's profiles by name only;
            // what it names is then the owner's file, at every depth.
            if let Err(refusal) = trust::may_name_profile(&parent.value, src.trust) {
                self.refuse(Field::Extends, &label, &parent.place, refusal);
                continue;
            }
            let found = if is_path(&parent.value) {
                match self.catalog.expand(&parent.value, src.dir.as_deref()) {
                    Ok(p) => {
                        self.out.files.push(p.clone());
                        read_file(&p).map_err(|e| e.to_string())
                    }
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
                        let first_source = self.out.sources.len();
                        self.load(parent_src);
                        if src.trust == Trust::Caller {
                            self.caller_named(index, first_source, &label, &parent.place);
                        }
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
        given: None,
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
