//! The directories a daemon lets tokens write (its workspace roots and
//! the volumes it mounts writable), recorded in its state directory and
//! its catalogue's configuration directory when it starts, and the rule for secret programs
//! ([`crate::secret_programs`]) applied with them by another warden
//! process of the same state: the owner's command line, reading the same
//! profiles, would otherwise run as the owner a program a token's sandbox
//! committed under one of them.
//!
//! A record is never taken back, not when the daemon stops nor when its
//! next start names other roots: a directory once given to tokens may
//! hold their files long after. This module never prints and never
//! words a refusal for a door; it says which root and whose.

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use warden_policy::{NetworkSpec, SandboxSpec};

use crate::secret_programs::{check, Refusal};

/// The record, in the state directory: one `KIND<TAB>PATH` a line.
pub const DAEMON_ROOTS: &str = "daemon-roots";

/// What a directory where tokens may write is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RootKind {
    /// A daemon's workspace root: tokens' sandboxes work over what lies
    /// under it, and their changes are committed there.
    WorkspaceRoot,
    /// A directory a daemon mounts as a writable volume: tokens' writes
    /// are merged into it.
    Volume,
    /// warden's state directory itself (sandboxes' layers and homes).
    State,
}

impl RootKind {
    const ALL: [RootKind; 3] = [RootKind::WorkspaceRoot, RootKind::Volume, RootKind::State];

    /// The word the record keeps it by.
    fn tag(self) -> &'static str {
        match self {
            RootKind::WorkspaceRoot => "workspace-root",
            RootKind::Volume => "volume",
            RootKind::State => "state",
        }
    }

    /// What the directory is, for a message.
    pub fn describe(self) -> &'static str {
        match self {
            RootKind::WorkspaceRoot => "a workspace root a daemon recorded",
            RootKind::Volume => "a writable volume a daemon recorded",
            RootKind::State => "warden's state directory",
        }
    }
}

/// A directory where tokens may write, as recorded (absolute, the real
/// path it had when recorded).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Root {
    pub kind: RootKind,
    pub path: PathBuf,
}

/// Why the record could not be read or written, or why a secret's
/// program may not run.
#[derive(Debug, thiserror::Error)]
pub enum RootsError {
    #[error("cannot read {path}, the record of the directories daemons let tokens write; secret programs are not run without it")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot write {path}, the record of the directories this daemon lets tokens write")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{0} cannot be recorded as a directory tokens may write: its name holds a line break")]
    LineBreak(PathBuf),
    /// A secret's program (or what it is given) lies under `root`.
    #[error("{refusal} ({})", root.kind.describe())]
    Writable { refusal: Box<Refusal>, root: Root },
}

impl RootsError {
    /// The stable reason code, for a refusal to run a secret's program.
    pub fn reason(&self) -> Option<&'static str> {
        match self {
            RootsError::Writable { refusal, .. } => Some(refusal.code()),
            _ => None,
        }
    }
}

/// The roots recorded in state directory `state` (none when nothing was
/// ever recorded). A line this warden cannot read is an error, not a
/// root less: the record is read to refuse, so it fails closed.
pub fn recorded(state: &Path) -> Result<Vec<Root>, RootsError> {
    let path = state.join(DAEMON_ROOTS);
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => return Err(RootsError::Read { path, source }),
    };
    let mut out = Vec::new();
    for line in bytes.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        let parsed = line.iter().position(|&b| b == b'\t').and_then(|tab| {
            let (tag, rest) = line.split_at(tab);
            let kind = RootKind::ALL
                .into_iter()
                .find(|k| k.tag().as_bytes() == tag)?;
            let path = PathBuf::from(std::ffi::OsStr::from_bytes(&rest[1..]));
            path.is_absolute().then_some(Root { kind, path })
        });
        match parsed {
            Some(root) => out.push(root),
            None => {
                return Err(RootsError::Read {
                    path,
                    source: std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        format!(
                            "a line that is not KIND<TAB>ABSOLUTE-PATH: {}",
                            String::from_utf8_lossy(line)
                        ),
                    ),
                })
            }
        }
    }
    Ok(out)
}

/// Add `roots` to those recorded in `state` (a root recorded already is
/// not repeated; none is ever taken out). Called by a daemon as it
/// starts, before it serves anything.
pub fn record(state: &Path, roots: &[Root]) -> Result<(), RootsError> {
    let mut known = recorded(state)?;
    for r in roots {
        if r.path.as_os_str().as_bytes().contains(&b'\n') {
            return Err(RootsError::LineBreak(r.path.clone()));
        }
        if !known.contains(r) {
            known.push(r.clone());
        }
    }
    let mut text = Vec::new();
    for r in &known {
        text.extend_from_slice(r.kind.tag().as_bytes());
        text.push(b'\t');
        text.extend_from_slice(r.path.as_os_str().as_bytes());
        text.push(b'\n');
    }
    let path = state.join(DAEMON_ROOTS);
    warden_protocol::replace_file(&path, &text, 0o600)
        .map_err(|source| RootsError::Write { path, source })
}

/// Every directory where tokens may write, for a process of state
/// directory `state` reading the catalogue of configuration directory
/// `config`: the state itself and each root recorded in either (a daemon
/// records in its state and in its catalogue's directory, so a command
/// line of another state that reads the same profiles sees it too),
/// each both as recorded and as it resolves now (a directory moved or
/// replaced by a link since still counts where it was).
pub fn writable(state: Option<&Path>, config: Option<&Path>) -> Result<Vec<Root>, RootsError> {
    let mut all = Vec::new();
    if let Some(state) = state {
        all.push(Root {
            kind: RootKind::State,
            path: std::path::absolute(state).unwrap_or_else(|_| state.to_path_buf()),
        });
        all.extend(recorded(state)?);
    }
    if let Some(config) = config {
        all.extend(recorded(config)?);
    }
    let now: Vec<Root> = all
        .iter()
        .filter_map(|r| {
            let real = std::fs::canonicalize(&r.path).ok()?;
            (real != r.path).then_some(Root {
                kind: r.kind,
                path: real,
            })
        })
        .collect();
    all.extend(now);
    Ok(all)
}

/// The rule for secret programs ([`crate::secret_programs::check`]),
/// applied by a process that is not the daemon (the owner's command
/// line) before `spec`'s secret programs run: with the directories of
/// every daemon that recorded its roots in `state` or in the catalogue's
/// directory `config` ([`writable`]).
pub fn check_spec(
    spec: &SandboxSpec,
    state: Option<&Path>,
    config: Option<&Path>,
) -> Result<(), RootsError> {
    let NetworkSpec::Egress(egress) = &spec.network else {
        return Ok(());
    };
    if !egress
        .secrets
        .iter()
        .any(|s| matches!(s.source, warden_policy::SecretSource::Command(_)))
    {
        return Ok(());
    }
    let roots = writable(state, config)?;
    let paths: Vec<PathBuf> = roots.iter().map(|r| r.path.clone()).collect();
    check(&egress.secrets, &paths).map_err(|refusal| {
        let root = roots
            .iter()
            .find(|r| r.path == refusal.under)
            .cloned()
            .unwrap_or(Root {
                kind: RootKind::WorkspaceRoot,
                path: refusal.under.clone(),
            });
        RootsError::Writable {
            refusal: Box::new(refusal),
            root,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(tag: &str) -> PathBuf {
        let t = std::env::temp_dir().join(format!("warden-{tag}-{}", std::process::id()));
        let _ = warden_workspace::fsutil::remove_tree(&t);
        std::fs::create_dir_all(&t).unwrap();
        t.canonicalize().unwrap()
    }

    #[test]
    fn roots_recorded_by_each_start_are_kept_and_a_line_unread_fails_closed() {
        let t = temp("daemon-roots");
        let a = Root {
            kind: RootKind::WorkspaceRoot,
            path: t.join("a b"),
        };
        let v = Root {
            kind: RootKind::Volume,
            path: t.join("vol"),
        };
        record(&t, std::slice::from_ref(&a)).unwrap();
        record(&t, &[v.clone(), a.clone()]).unwrap();
        assert_eq!(recorded(&t).unwrap(), vec![a.clone(), v]);
        assert!(matches!(
            record(
                &t,
                &[Root {
                    kind: RootKind::Volume,
                    path: t.join("x\ny")
                }]
            ),
            Err(RootsError::LineBreak(_))
        ));
        std::fs::write(t.join(DAEMON_ROOTS), "workspace-root\trelative/dir\n").unwrap();
        assert!(matches!(recorded(&t), Err(RootsError::Read { .. })));
        warden_workspace::fsutil::remove_tree(&t).unwrap();
    }
}
