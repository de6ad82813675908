//! The catalogue of profiles and presets: those shipped with warden and
//! those in the owner's configuration directory, found by name (or, for
//! the owner, by path) and read with the directory their relative paths
//! resolve against. It finds and reads; composing what it finds is
//! [`super`]'s.

use std::path::{Path, PathBuf};

use super::error::ComposeError;
use crate::layer::Trust;
use crate::profile::suggest;
use crate::trust::{self, Refusal};

/// Presets shipped with warden.
pub const BUILTIN_PRESETS: &[(&str, &str)] = &[
    ("anthropic", include_str!("../../presets/anthropic.yaml")),
    ("arxiv", include_str!("../../presets/arxiv.yaml")),
    ("crates-io", include_str!("../../presets/crates-io.yaml")),
    ("cve", include_str!("../../presets/cve.yaml")),
    ("debian", include_str!("../../presets/debian.yaml")),
    ("docker-hub", include_str!("../../presets/docker-hub.yaml")),
    ("gemini", include_str!("../../presets/gemini.yaml")),
    ("github", include_str!("../../presets/github.yaml")),
    (
        "github-readonly",
        include_str!("../../presets/github-readonly.yaml"),
    ),
    ("gitlab", include_str!("../../presets/gitlab.yaml")),
    ("go", include_str!("../../presets/go.yaml")),
    (
        "huggingface",
        include_str!("../../presets/huggingface.yaml"),
    ),
    ("llm-apis", include_str!("../../presets/llm-apis.yaml")),
    (
        "llm-apis-no-uploads",
        include_str!("../../presets/llm-apis-no-uploads.yaml"),
    ),
    ("mistral", include_str!("../../presets/mistral.yaml")),
    ("news", include_str!("../../presets/news.yaml")),
    ("npm", include_str!("../../presets/npm.yaml")),
    (
        "npm-readonly",
        include_str!("../../presets/npm-readonly.yaml"),
    ),
    ("openai", include_str!("../../presets/openai.yaml")),
    ("openrouter", include_str!("../../presets/openrouter.yaml")),
    ("pypi", include_str!("../../presets/pypi.yaml")),
    (
        "pypi-readonly",
        include_str!("../../presets/pypi-readonly.yaml"),
    ),
    ("sentry", include_str!("../../presets/sentry.yaml")),
    (
        "stackoverflow",
        include_str!("../../presets/stackoverflow.yaml"),
    ),
    ("ubuntu", include_str!("../../presets/ubuntu.yaml")),
    ("wikipedia", include_str!("../../presets/wikipedia.yaml")),
];

/// Profiles shipped with warden: the reference agents and what they share.
pub const BUILTIN_PROFILES: &[(&str, &str)] = &[
    ("agent", include_str!("../../profiles/agent.yaml")),
    ("base", include_str!("../../profiles/base.yaml")),
    (
        "code-interpreter-v1",
        include_str!("../../profiles/code-interpreter-v1.yaml"),
    ),
    (
        "code-interpreter-v1-setup",
        include_str!("../../profiles/code-interpreter-v1-setup.yaml"),
    ),
    ("debugger", include_str!("../../profiles/debugger.yaml")),
    ("desktop", include_str!("../../profiles/desktop.yaml")),
    ("devops", include_str!("../../profiles/devops.yaml")),
    (
        "feature-dev",
        include_str!("../../profiles/feature-dev.yaml"),
    ),
    ("python", include_str!("../../profiles/python.yaml")),
    ("researcher", include_str!("../../profiles/researcher.yaml")),
    ("security", include_str!("../../profiles/security.yaml")),
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

/// Does `s` name a file rather than a profile (for the owner, who may)?
pub(super) fn is_path(s: &str) -> bool {
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
    pub(super) fn expand(&self, raw: &str, dir: Option<&Path>) -> Result<PathBuf, String> {
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

pub(super) fn read_file(path: &Path) -> Result<SourceText, ComposeError> {
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
