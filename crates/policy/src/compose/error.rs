//! Why a profile could not be composed, and the findings about a file
//! (each at its line and column, or JSON pointer, with a stable reason
//! code) that the doors word.

use std::fmt;
use std::path::PathBuf;

use crate::fields::Field;
use crate::profile::Pos;
use crate::trust::Refusal;

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

/// How a caller is told of one of the owner's profiles.
pub(super) const OWNERS_PROFILE: &str = "a profile of the owner's";
/// The reason code of a profile of the owner's that does not compose, as
/// a caller is told of it.
pub(super) const OWNERS_PROFILE_CODE: &str = "owners_profile_invalid";
pub(super) const OWNERS_PROFILE_FAILS: &str =
    "it does not compose; its owner sees why with `warden profile validate`";
