//! Grants: names a person answered "always" about under `--ask`, kept per
//! project so that the next run on the same workspace is not asked again.
//!
//! The file lives in warden's state directory (`grants/`, one file per
//! workspace path), never in the workspace, which the sandbox can write:
//! a sandbox must not be able to grant itself a name. It is a preset file
//! (`description`, `domains`), read at resolution into the run's allowed
//! names and written by [`GrantsSink`] the moment an "always" decision is
//! recorded.
//!
//! With `--ask-save profile` the answers go instead into the profile file
//! in use, as one more `egress.domains` entry each (a program's, one more
//! `process.allow_exec` entry: [`crate::programs::Keep`]), written into the
//! person's own text ([`warden_policy::edit`]: their layout and comments
//! kept, the edit judged by what it means before it is written).

use std::path::{Path, PathBuf};
use warden_audit::{Event, EventKind, EventSink};
use warden_policy::Field;

/// Why the grants file could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum GrantsError {
    #[error("cannot read the grants file {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the grants file {path} cannot be read ({why}): edit the line it names, or remove the file (its answers are then asked again); until then no run that asks can start on this project, nor keep an answer")]
    Parse { path: PathBuf, why: String },
    #[error("the profile {path} cannot be read ({why}); fix the line it names")]
    ProfileParse { path: PathBuf, why: String },
    #[error("cannot add {entry} to the profile {path}")]
    Profile {
        path: PathBuf,
        entry: String,
        #[source]
        source: warden_policy::edit::EditError,
    },
    #[error("cannot write the grants file {path}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// The grants file of the project at `workspace`: its path escaped into
/// one file name (letters, digits, `.` and `-` kept, every other byte as
/// `_XX`), so that two paths never share a file.
pub fn file_for(state: &Path, workspace: &Path) -> PathBuf {
    use std::os::unix::ffi::OsStrExt;
    let mut name = String::new();
    for &b in workspace.as_os_str().as_bytes() {
        if b.is_ascii_alphanumeric() || b == b'.' || b == b'-' {
            name.push(b as char);
        } else {
            name.push_str(&format!("_{b:02x}"));
        }
    }
    state.join("grants").join(format!("{name}.yaml"))
}

/// The grants file at `path`, read as a preset (`None` when it does not
/// exist).
fn read(path: &Path) -> Result<Option<warden_policy::profile::PresetFile>, GrantsError> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(GrantsError::Read {
                path: path.to_path_buf(),
                source,
            })
        }
    };
    warden_policy::profile::parse_preset(&text)
        .map(Some)
        .map_err(|e| GrantsError::Parse {
            path: path.to_path_buf(),
            why: e.to_string(),
        })
}

/// The domains granted in `path` (none when it does not exist).
pub fn load(path: &Path) -> Result<Vec<String>, GrantsError> {
    Ok(read(path)?
        .map(|p| p.domains.into_iter().map(|d| d.value).collect())
        .unwrap_or_default())
}

/// The request rules granted in `path` (`allow_requests`: requests an
/// ask rule asked about, answered "always"); none when it does not exist.
pub fn load_requests(path: &Path) -> Result<Vec<String>, GrantsError> {
    Ok(read(path)?
        .map(|p| p.allow_requests.into_iter().map(|d| d.value).collect())
        .unwrap_or_default())
}

/// The granted request rules that still apply to `spec`: each an allow
/// rule for one method and path of a name that has request rules in
/// this run (a grant never gives request rules, so never terminates and
/// narrows, a name that has none now).
pub fn apply_requests(spec: &mut warden_policy::SandboxSpec, granted: &[String]) {
    use warden_policy::requests::{RequestAction, RequestRule};
    let warden_policy::NetworkSpec::Egress(e) = &mut spec.network else {
        return;
    };
    for entry in granted {
        // A grant allows the one request it answered: an entry that
        // reads as any wider rule (as an older warden wrote a request's
        // own `*` unescaped) is not applied.
        let Ok(mut rule) = RequestRule::parse(RequestAction::Allow, entry) else {
            continue;
        };
        if !rule.is_literal() {
            continue;
        }
        rule.source = format!("{}{}", rule.source, warden_egress::requests::GRANTED);
        let port = rule.domain.port.unwrap_or(443);
        if e.requests.iter().any(|r| r.is_for(&rule.domain.name, port))
            && !e.requests.contains(&rule)
        {
            e.requests.push(rule);
        }
    }
}

/// `text` as a YAML double-quoted scalar the reader takes back as the
/// same string ([`warden_policy::edit::yaml_quoted`]), every control and
/// format character (`warden_audit::json::escaped`) written as an escape
/// too. A line the reader refuses would shut the owner out of every later
/// `--ask` run of the project.
fn yaml_quoted(text: &str) -> String {
    warden_policy::edit::yaml_quoted(text, warden_audit::json::escaped)
}

/// The file's text for `entries` and the request rules `requests`.
fn render(entries: &[String], requests: &[String]) -> String {
    let quoted = |list: &[String]| -> String {
        list.iter()
            .map(|e| yaml_quoted(e))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut text = format!(
        "description: {}\ndomains: [{}]\n",
        yaml_quoted("names answered \"always\" when asked (`egress.ask`) for this project"),
        quoted(entries)
    );
    if !requests.is_empty() {
        text.push_str(&format!("allow_requests: [{}]\n", quoted(requests)));
    }
    text
}

/// Add `entry` to the grants file at `path`; `Ok(false)` when it was there.
pub fn add(path: &Path, entry: &str) -> Result<bool, GrantsError> {
    let mut entries = load(path)?;
    if entries.iter().any(|e| e == entry) {
        return Ok(false);
    }
    entries.push(entry.to_string());
    let requests = load_requests(path)?;
    write_grants(path, &entries, &requests)?;
    Ok(true)
}

/// Add the request rule `rule` to the grants file at `path`; `Ok(false)`
/// when it was there.
pub fn add_request(path: &Path, rule: &str) -> Result<bool, GrantsError> {
    let mut requests = load_requests(path)?;
    if requests.iter().any(|e| e == rule) {
        return Ok(false);
    }
    requests.push(rule.to_string());
    let entries = load(path)?;
    write_grants(path, &entries, &requests)?;
    Ok(true)
}

/// Write the grants file whole (its directory made owner-only).
fn write_grants(path: &Path, entries: &[String], requests: &[String]) -> Result<(), GrantsError> {
    let write = |source| GrantsError::Write {
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
    // Its own mode when it is there; new, owner-only, as its directory.
    let mode = std::fs::metadata(path).map_or(0o600, |m| {
        use std::os::unix::fs::PermissionsExt;
        m.permissions().mode() & 0o7777
    });
    warden_protocol::replace_file(path, render(entries, requests).as_bytes(), mode)
        .map_err(write)?;
    Ok(())
}

/// The domains of the profile file at `path` (`egress.domains`).
pub fn load_profile(path: &Path) -> Result<Vec<String>, GrantsError> {
    load_profile_list(path, Field::AllowDomain)
}

/// The entries of `field`'s list in the profile file at `path`.
pub fn load_profile_list(path: &Path, field: Field) -> Result<Vec<String>, GrantsError> {
    let text = std::fs::read_to_string(path).map_err(|source| GrantsError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let entries =
        warden_policy::edit::entries(&text, field).map_err(|e| GrantsError::ProfileParse {
            path: path.to_path_buf(),
            why: e.to_string(),
        })?;
    Ok(entries.into_iter().map(|d| d.value).collect())
}

/// Add `entry` to the list of `field` (`egress.domains` for a name,
/// `process.allow_exec` for a program) of the profile file at `path`, in
/// its own layout; `Ok(false)` when it was there. The file is replaced
/// whole (its permissions kept), never left half written.
pub fn add_to_profile(path: &Path, field: Field, entry: &str) -> Result<bool, GrantsError> {
    let text = std::fs::read_to_string(path).map_err(|source| GrantsError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let edited = match warden_policy::edit::add_entry(&text, field, entry) {
        Ok(Some(t)) => t,
        Ok(None) => return Ok(false),
        Err(source) => {
            return Err(GrantsError::Profile {
                path: path.to_path_buf(),
                entry: entry.to_string(),
                source,
            })
        }
    };
    let write = |source| GrantsError::Write {
        path: path.to_path_buf(),
        source,
    };
    let mode = {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(path).map_err(write)?.permissions().mode() & 0o7777
    };
    warden_protocol::replace_file(path, edited.as_bytes(), mode).map_err(write)?;
    Ok(true)
}

/// Writes each "always" answer into the project's grants file (or the
/// profile in use) as it is recorded. A grant that cannot be written fails
/// the run's record (the person was told it would be kept).
pub struct GrantsSink {
    path: PathBuf,
    into_profile: bool,
    failure: Option<String>,
}

impl GrantsSink {
    pub fn new(path: PathBuf, into_profile: bool) -> GrantsSink {
        GrantsSink {
            path,
            into_profile,
            failure: None,
        }
    }
}

impl GrantsSink {
    /// A request the owner allowed "always" when an ask rule asked: its
    /// rule (the proxy names it in the reason) goes into the grants file.
    /// A profile is not edited for it (`--ask-save profile` keeps names
    /// only): the end of the run lists the rule to add.
    fn request(&mut self, event: &Event) {
        let EventKind::Connection {
            allowed: true,
            rule: Some(rule),
            reason: Some(reason),
            ..
        } = &event.kind
        else {
            return;
        };
        if rule != warden_egress::secrets::ASKED_ALWAYS || self.into_profile {
            return;
        }
        let Some(entry) = reason.allow.as_ref().map(|a| a.value.clone()) else {
            return;
        };
        let literal = warden_policy::requests::RequestRule::parse(
            warden_policy::requests::RequestAction::Allow,
            &entry,
        )
        .is_ok_and(|r| r.is_literal());
        if !literal {
            return;
        }
        if let Err(e) = add_request(&self.path, &entry) {
            self.failure
                .get_or_insert_with(|| warden_jail::chain_str(&e));
        }
    }
}

impl EventSink for GrantsSink {
    fn emit(&mut self, event: &Event) {
        self.request(event);
        let EventKind::Connection {
            name: Some(name),
            port,
            allowed: true,
            rule: Some(rule),
            ..
        } = &event.kind
        else {
            return;
        };
        if rule != warden_egress::proxy::ASK_ALWAYS {
            return;
        }
        let entry = if warden_policy::DEFAULT_PORTS.contains(port) {
            name.clone()
        } else {
            format!("{name}:{port}")
        };
        let added = if self.into_profile {
            add_to_profile(&self.path, Field::AllowDomain, &entry)
        } else {
            add(&self.path, &entry)
        };
        if let Err(e) = added {
            self.failure
                .get_or_insert_with(|| warden_jail::chain_str(&e));
        }
    }

    fn failure(&self) -> Option<String> {
        self.failure.clone()
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // the tests remove their own temporary directories
mod tests {
    use super::*;

    #[test]
    fn each_project_has_its_own_file_and_entries_are_kept_once() {
        let a = file_for(Path::new("/st"), Path::new("/src/a_b"));
        let b = file_for(Path::new("/st"), Path::new("/src/a/b"));
        assert_ne!(a, b);
        let dir = std::env::temp_dir().join(format!("warden-grants-{}", std::process::id()));
        let f = dir.join("grants/x.yaml");
        assert!(load(&f).unwrap().is_empty());
        assert!(add(&f, "pypi.org").unwrap());
        assert!(!add(&f, "pypi.org").unwrap());
        assert!(add(&f, "git.example.com:8443").unwrap());
        assert_eq!(load(&f).unwrap(), ["pypi.org", "git.example.com:8443"]);
        assert!(add_request(&f, "POST forge.test/issues/1").unwrap());
        assert!(!add_request(&f, "POST forge.test/issues/1").unwrap());
        assert!(add(&f, "npmjs.org").unwrap());
        assert_eq!(load_requests(&f).unwrap(), ["POST forge.test/issues/1"]);
        assert_eq!(load(&f).unwrap().len(), 3);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A grant that states the JSON-RPC call and the query value it was
    /// asked about is written and read back as the same rule, by the
    /// parser a profile and a flag use, and counts as one request's rule;
    /// one with a star in its call or value is never applied.
    #[test]
    fn a_grant_with_its_call_and_query_value_reads_back_as_the_same_literal_rule() {
        use warden_policy::requests::{RequestAction, RequestRule};
        let dir = std::env::temp_dir().join(format!("warden-grants-rpc-{}", std::process::id()));
        let f = dir.join("grants/x.yaml");
        let kept = [
            "POST mcp.test:18443/mcp rpc:tools/call:search",
            "GET api.test/ok?action=read",
            "POST mcp.test/mcp?v=2 rpc:tools/call:a,tools/list",
        ];
        for k in kept {
            assert!(add_request(&f, k).unwrap());
        }
        let back = load_requests(&f).unwrap();
        assert_eq!(back, kept);
        for (k, b) in kept.iter().zip(&back) {
            let (k, b) = (
                RequestRule::parse(RequestAction::Allow, k).unwrap(),
                RequestRule::parse(RequestAction::Allow, b).unwrap(),
            );
            assert_eq!(k, b);
            assert!(b.is_literal(), "{b:?}");
        }
        for wide in [
            "POST mcp.test/mcp rpc:tools/call:*",
            "GET api.test/ok?action=*",
            "GET api.test/ok?action",
        ] {
            let r = RequestRule::parse(RequestAction::Allow, wide).unwrap();
            assert!(!r.is_literal(), "{wide}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Whatever a sandbox chose to put in a name or a request, the grants
    /// file written for it reads back as the same entries: no line the
    /// reader refuses (a raw U+009B once shut the owner out of every
    /// later `--ask` run), no control or format character raw on disk.
    #[test]
    fn hostile_entries_are_written_and_read_back_as_the_same_rules() {
        let dir =
            std::env::temp_dir().join(format!("warden-grants-hostile-{}", std::process::id()));
        let f = dir.join("grants/x.yaml");
        let hostile = [
            "GET api.test:21443/x\u{9b}31m",
            "GET api.test/a\u{202e}evil\u{2066}",
            "GET api.test/bom\u{feff}\u{fffe}\u{ffff}\u{fdd0}",
            "GET api.test/nel\u{85}ls\u{2028}ps\u{2029}",
            "GET api.test/c0\u{1}\u{1b}[2J\u{7f}\ttab\nline\rcr",
            "GET api.test/quote\"back\\slash#hash: colon, comma [x] {y} &a *b !c %d @e `f",
            "GET api.test/tag\u{e0041}\u{10fffe}\u{1f980}",
            "GET api.test/ - dash ? q",
            "",
        ];
        for h in hostile {
            assert!(add_request(&f, h).unwrap(), "{h:?}");
            assert!(add(&f, h).unwrap(), "{h:?}");
        }
        assert_eq!(load_requests(&f).unwrap(), hostile);
        assert_eq!(load(&f).unwrap(), hostile);
        let text = std::fs::read_to_string(&f).unwrap();
        assert!(
            !text
                .chars()
                .any(|c| c != '\n' && warden_audit::json::escaped(c)),
            "{text:?}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A grants file that cannot be read names itself, the place in it and
    /// the way out.
    #[test]
    fn an_unreadable_grants_file_says_which_file_and_line_and_how_to_recover() {
        let dir = std::env::temp_dir().join(format!("warden-grants-bad-{}", std::process::id()));
        let f = dir.join("grants/x.yaml");
        std::fs::create_dir_all(f.parent().unwrap()).unwrap();
        std::fs::write(
            &f,
            "description: x\ndomains: []\nallow_requests: [\"GET a/x\u{9b}\"]\n",
        )
        .unwrap();
        let e = add_request(&f, "GET a/y").unwrap_err().to_string();
        assert!(e.contains(&f.display().to_string()), "{e}");
        assert!(e.contains("3:"), "{e}");
        assert!(e.contains("remove the file"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
