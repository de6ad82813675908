//! Programs answered "always" when the exec allowlist refused them under
//! ask mode: kept where later starts find them, as names are.
//!
//! Landlock's rules are fixed for a running sandbox (a domain can only be
//! narrowed), so an answer never lets the refused exec run: an "always"
//! puts the program on the allowlist of the sandbox's next start. It is
//! kept in two places, as a name's "always" is:
//! - the sandbox's state directory (`exec.json`, applied over the stored
//!   spec at each start of a named sandbox, as `egress.json` is);
//! - the project's grants (`grants/NAME.exec.json`, beside the names'
//!   `grants/NAME.yaml`, outside the workspace the sandbox writes), read
//!   when a later run of the same project with ask mode is resolved;
//!   with `--ask-save profile`, the profile in use instead: one more
//!   `process.allow_exec` entry in the person's own text, as a name's
//!   "always" is one more `egress.domains` entry ([`Keep`]).
//!
//! Only the owner's answer is kept so (a caller's "always" is refused at
//! the desk: the owner's allowlist is a caller's ceiling), and a grant
//! only widens an allowlist the run has: a run without one is never given
//! one by a grant.

use crate::state;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use warden_policy::{Field, SandboxSpec};

/// The file in a sandbox's state directory that keeps its programs
/// answered "always".
pub const EXEC_CHANGES: &str = "exec.json";

/// Why the programs' grants could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum ProgramsError {
    #[error("cannot read the programs' grants {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the programs' grants {path} are not a list of programs ({why}); fix or remove it")]
    Parse { path: PathBuf, why: String },
    #[error("cannot write the programs' grants {path}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot keep the sandbox's programs")]
    State(#[source] state::StateError),
    #[error("cannot keep the program in the profile")]
    Profile(#[source] crate::grants::GrantsError),
    #[error("{program:?} is not one program's path (an absolute path of one file, no glob, no `.` or `..`, no trailing `/`): not kept")]
    NotAProgram { program: String },
    #[error("the profile {path} has no `process.allow_exec` of its own: a program added there would make it the only one its runs may execute")]
    NoProfileAllowlist { path: PathBuf },
}

/// Where a program answered "always" is kept for later runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Keep {
    /// The project's programs' grants ([`file_beside`] the names').
    Project(PathBuf),
    /// The profile file in use (`--ask-save profile`): its
    /// `process.allow_exec`.
    Profile(PathBuf),
}

impl Keep {
    /// Where a run whose names' "always" answers go to `grants` (the
    /// project's grants file, or with `into_profile` the profile in use)
    /// keeps a program's: beside the names' grants, or in the profile's
    /// own `process.allow_exec`. `None` for a profile without one (a
    /// grant widens an allowlist, never makes one), or one that cannot be
    /// read: no "always" is offered then.
    pub fn of(grants: &Path, into_profile: bool) -> Option<Keep> {
        if !into_profile {
            return Some(Keep::Project(file_beside(grants)));
        }
        let keep = Keep::Profile(grants.to_path_buf());
        keep.load()
            .is_ok_and(|list| !list.is_empty())
            .then_some(keep)
    }

    /// The file the answers go into.
    pub fn path(&self) -> &Path {
        match self {
            Keep::Project(p) | Keep::Profile(p) => p,
        }
    }

    /// The programs it holds now.
    pub fn load(&self) -> Result<Vec<String>, ProgramsError> {
        match self {
            Keep::Project(p) => load(p),
            Keep::Profile(p) => crate::grants::load_profile_list(p, Field::AllowExec)
                .map_err(ProgramsError::Profile),
        }
    }

    /// Keep `program`; `Ok(false)` when it was there. A profile is
    /// added to only when it has an allowlist of its own: a grant widens
    /// an allowlist, never makes one (a profile that allowed any program
    /// would then allow only this one).
    pub fn add(&self, program: &str) -> Result<bool, ProgramsError> {
        checked(program)?;
        match self {
            Keep::Project(p) => add(p, program),
            Keep::Profile(p) => {
                if self.load()?.is_empty() {
                    return Err(ProgramsError::NoProfileAllowlist { path: p.clone() });
                }
                crate::grants::add_to_profile(p, Field::AllowExec, program)
                    .map_err(ProgramsError::Profile)
            }
        }
    }
}

/// What a grants file of programs holds.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Granted {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Entries written as in `process.allow_exec`: absolute paths.
    #[serde(default)]
    pub allow_exec: Vec<String>,
}

/// A program's question is of a path the judge resolved (the kernel's
/// name of a regular file it refused): absolute, with no empty, `.` or
/// `..` component (so no trailing `/`, which as an `allow_exec` entry
/// would be a whole directory), and no glob: an entry of the allowlist
/// that names that one file. A name the judge could not record whole
/// never has this shape (it is not a path: see the jail's exec records).
pub fn is_program_entry(path: &str) -> bool {
    path.starts_with('/')
        && path.len() > 1
        && !path.contains(['*', '?', '[', '\n', '\0'])
        && !path[1..]
            .split('/')
            .any(|c| c.is_empty() || c == "." || c == "..")
}

/// `program` as a person is shown it: the sandbox chose it, so its
/// control and format characters are escaped (as the questions show it).
pub fn shown(program: &str) -> String {
    crate::ask::printable(program)
}

/// `program`, when it may be kept as an "always" ([`is_program_entry`]):
/// checked again where it is written, whoever asked.
fn checked(program: &str) -> Result<(), ProgramsError> {
    if is_program_entry(program) {
        Ok(())
    } else {
        Err(ProgramsError::NotAProgram {
            program: program.to_string(),
        })
    }
}

/// The programs' grants beside the names' grants file `names`
/// (`grants/NAME.yaml` gives `grants/NAME.exec.json`).
pub fn file_beside(names: &Path) -> PathBuf {
    let stem = names
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    names.with_file_name(format!("{stem}.exec.json"))
}

/// The programs granted in `path` (none when it does not exist).
pub fn load(path: &Path) -> Result<Vec<String>, ProgramsError> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(ProgramsError::Read {
                path: path.to_path_buf(),
                source,
            })
        }
    };
    if text.trim().is_empty() {
        return Ok(Vec::new());
    }
    let g: Granted = serde_json::from_str(&text).map_err(|e| ProgramsError::Parse {
        path: path.to_path_buf(),
        why: e.to_string(),
    })?;
    Ok(g.allow_exec
        .into_iter()
        .filter(|p| is_program_entry(p))
        .collect())
}

/// Add `program` to the grants at `path`; `Ok(false)` when it was there.
pub fn add(path: &Path, program: &str) -> Result<bool, ProgramsError> {
    checked(program)?;
    let mut list = load(path)?;
    if list.iter().any(|p| p == program) {
        return Ok(false);
    }
    list.push(program.to_string());
    let write = |source| ProgramsError::Write {
        path: path.to_path_buf(),
        source,
    };
    if let Some(dir) = path.parent() {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(write)?;
    }
    let granted = Granted {
        description: Some(
            "programs answered \"always\" when asked (`egress.ask`) for this project".into(),
        ),
        allow_exec: list,
    };
    // A program's path is the sandbox's choice: written with its control
    // and format characters escaped, as every JSON warden writes for
    // people to read (the same JSON to the reader).
    let mut text = warden_audit::json::to_string_pretty(&granted)
        .map_err(|e| write(std::io::Error::other(e.to_string())))?
        .into_bytes();
    text.push(b'\n');
    warden_protocol::replace_file(path, &text, 0o600).map_err(write)?;
    Ok(true)
}

/// Widen the allowlist `allow_exec` by `granted` (never give a run
/// without an allowlist one).
pub fn apply(allow_exec: &mut Vec<String>, granted: &[String]) {
    if allow_exec.is_empty() {
        return;
    }
    for p in granted {
        if is_program_entry(p) && !allow_exec.contains(p) {
            allow_exec.push(p.clone());
        }
    }
}

/// What a sandbox's state directory keeps (`exec.json`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Changes {
    pub added: Vec<String>,
}

/// Apply the programs kept in `dir` to `spec` (before a start).
pub fn apply_saved(dir: &Path, spec: &mut SandboxSpec) {
    if let Ok(saved) = state::read_json::<Changes>(&dir.join(EXEC_CHANGES)) {
        apply(&mut spec.allow_exec, &saved.added);
    }
}

/// Keep `program` in the sandbox's state directory `dir`.
pub fn save(dir: &Path, program: &str) -> Result<(), ProgramsError> {
    checked(program)?;
    let path = dir.join(EXEC_CHANGES);
    let mut saved: Changes = state::read_json(&path).unwrap_or_default();
    if !saved.added.iter().any(|p| p == program) {
        saved.added.push(program.to_string());
    }
    state::write_json(&path, &saved).map_err(ProgramsError::State)
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // the tests remove their own temporary directories
mod tests {
    use super::*;

    #[test]
    fn only_absolute_plain_paths_are_program_entries() {
        assert!(is_program_entry("/usr/bin/id"));
        assert!(!is_program_entry("id"));
        assert!(!is_program_entry("/"));
        assert!(!is_program_entry("/usr/bin/*"));
        assert!(!is_program_entry("/usr/../bin/sh"));
        // A trailing `/` (or an empty component) would name a directory.
        assert!(!is_program_entry("/usr/bin/"));
        assert!(!is_program_entry("/usr//bin/id"));
        assert!(!is_program_entry("//"));
        assert!(!is_program_entry("/usr/./bin/id"));
        // What the jail records for a name too long to judge.
        assert!(!is_program_entry(
            "[a name of 4097 bytes, too long to judge]"
        ));
    }

    #[test]
    fn an_always_is_kept_only_for_one_programs_path_wherever_it_is_written() {
        let dir = std::env::temp_dir().join(format!("warden-programs-keep-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let project = Keep::Project(dir.join("grants/x.exec.json"));
        for bad in ["/usr/bin/", "/usr/bin/*", "usr/bin/id", "/a/../id"] {
            assert!(
                matches!(project.add(bad), Err(ProgramsError::NotAProgram { .. })),
                "{bad}"
            );
            assert!(matches!(
                add(project.path(), bad),
                Err(ProgramsError::NotAProgram { .. })
            ));
            assert!(matches!(
                save(dir.as_path(), bad),
                Err(ProgramsError::NotAProgram { .. })
            ));
        }
        assert!(project.load().unwrap().is_empty());
        assert!(!dir.as_path().join(EXEC_CHANGES).exists());
        // A profile's list is not touched either.
        let profile = dir.as_path().join("p.yaml");
        std::fs::write(&profile, "process:\n  allow_exec: [/bin/sh]\n").unwrap();
        let before = std::fs::read(&profile).unwrap();
        assert!(matches!(
            Keep::Profile(profile.clone()).add("/usr/bin/"),
            Err(ProgramsError::NotAProgram { .. })
        ));
        assert_eq!(std::fs::read(&profile).unwrap(), before);
        assert!(project.add("/usr/bin/id").unwrap());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn granted_programs_are_kept_once_and_widen_only_an_allowlist_there_is() {
        let dir = std::env::temp_dir().join(format!("warden-programs-{}", std::process::id()));
        let names = dir.join("grants/x.yaml");
        let f = file_beside(&names);
        assert_eq!(f, dir.join("grants/x.exec.json"));
        assert!(load(&f).unwrap().is_empty());
        assert!(add(&f, "/usr/bin/id").unwrap());
        assert!(!add(&f, "/usr/bin/id").unwrap());
        assert_eq!(load(&f).unwrap(), ["/usr/bin/id"]);
        let mut none = Vec::new();
        apply(&mut none, &load(&f).unwrap());
        assert!(none.is_empty());
        let mut list = vec!["sh".to_string()];
        apply(&mut list, &load(&f).unwrap());
        assert_eq!(list, ["sh", "/usr/bin/id"]);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
