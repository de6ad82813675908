//! Warden's state directory for named sandboxes: creation, listing,
//! removal, metadata and the "in use" lock. Owns the layout below; never
//! mounts anything (the jail does, with [`crate::MountOptions`]).
//!
//! ```text
//! ROOT/sandboxes/NAME/
//!   meta.json        name, workspace, profile, created, baseline, state
//!   lock             flock'ed while the sandbox is in use; holds the holder's PID
//!   baseline         touched when the baseline advances; its ctime is the baseline
//!   upper/           overlay upper layer: the sandbox's changes
//!   work/            overlay work directory
//!   snapshots/LABEL/ upper/ (copy of the layer) and meta.json
//! ```
//! Every directory is created with mode 0700.

use crate::fsutil::{self, FsError};
use serde::{Deserialize, Serialize};
use std::ffi::OsString;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, Write};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("invalid {what} {name:?}: {why}")]
    InvalidName {
        what: &'static str,
        name: String,
        why: &'static str,
    },
    #[error(
        "a sandbox named {0} already exists; remove it with `warden rm {0}` (forced, if it is running) or choose another name"
    )]
    Exists(String),
    #[error("no sandbox named {0}; `warden ls` lists them")]
    NotFound(String),
    #[error("sandbox {name} is in use{}: wait for the command to finish, or stop the sandbox (`warden stop {name}`)", .pid.map(|p| format!(" (pid {p})")).unwrap_or_default())]
    InUse { name: String, pid: Option<u32> },
    #[error("workspace {path} cannot be used")]
    Workspace {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("workspace {0} is not a directory")]
    NotADirectory(PathBuf),
    #[error("cannot create {path}")]
    Create {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot read {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot write {path}")]
    Write {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("metadata {path} is damaged")]
    Meta {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("cannot lock {path}")]
    Lock {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error(transparent)]
    Fs(#[from] FsError),
}

impl StoreError {
    /// The stable reason code of a refusal that each door words itself
    /// (this type's own messages are the command line's), `None` for a
    /// fault of the host.
    pub fn code(&self) -> Option<&'static str> {
        match self {
            StoreError::InvalidName { .. } => Some("invalid_name"),
            StoreError::Exists(_) => Some(NAME_TAKEN),
            StoreError::NotFound(_) => Some("no_such_sandbox"),
            StoreError::InUse { .. } => Some("in_use"),
            _ => None,
        }
    }
}

/// The reason code of [`StoreError::Exists`]: the name is in use, by
/// whichever sandbox (a door that serves several callers says only that).
pub const NAME_TAKEN: &str = "name_taken";

/// warden's state directory: `$WARDEN_STATE_DIR` when set; `/var/lib/warden`
/// for the host's root (`host_root`: UID 0 of the initial user namespace,
/// not of a user namespace, which cannot write the host's `/var/lib`);
/// else `$XDG_STATE_HOME/warden`, else `~/.local/state/warden` with `~`
/// from `$HOME` or, without one, `user_home` (the user database). Relative
/// values are ignored, as the XDG specification asks. `env` looks up one
/// variable; `None` when nothing gives an absolute path.
pub fn default_state_dir(
    host_root: bool,
    env: impl Fn(&str) -> Option<OsString>,
    user_home: impl FnOnce() -> Option<PathBuf>,
) -> Option<PathBuf> {
    let absolute = |var: &str| env(var).map(PathBuf::from).filter(|p| p.is_absolute());
    if let Some(dir) = absolute("WARDEN_STATE_DIR") {
        return Some(dir);
    }
    if host_root {
        return Some(PathBuf::from("/var/lib/warden"));
    }
    if let Some(state) = absolute("XDG_STATE_HOME") {
        return Some(state.join("warden"));
    }
    absolute("HOME")
        .or_else(|| user_home().filter(|p| p.is_absolute()))
        .map(|home| home.join(".local/state/warden"))
}

/// Check a sandbox name or a snapshot label: `[a-z0-9][a-z0-9_.-]{0,62}`.
pub fn validate_name(what: &'static str, name: &str) -> Result<(), StoreError> {
    let bad = |why| {
        Err(StoreError::InvalidName {
            what,
            name: name.to_string(),
            why,
        })
    };
    let bytes = name.as_bytes();
    match bytes.first() {
        None => return bad("it is empty"),
        Some(b) if !(b.is_ascii_lowercase() || b.is_ascii_digit()) => {
            return bad("it must start with a lowercase letter or a digit")
        }
        _ => {}
    }
    if bytes.len() > 63 {
        return bad("it is longer than 63 characters");
    }
    if !bytes
        .iter()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'_' | b'.' | b'-'))
    {
        return bad("only lowercase letters, digits, '_', '.' and '-' are allowed");
    }
    Ok(())
}

/// A point in time as the file system records it (ctime).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct FsTime {
    pub sec: i64,
    pub nsec: i64,
}

impl FsTime {
    pub(crate) fn ctime(meta: &fs::Metadata) -> FsTime {
        FsTime {
            sec: meta.ctime(),
            nsec: meta.ctime_nsec(),
        }
    }
    pub(crate) fn now() -> FsTime {
        let d = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO);
        FsTime {
            sec: d.as_secs() as i64,
            nsec: i64::from(d.subsec_nanos()),
        }
    }
}

/// What the front doors record about a sandbox's life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SandboxState {
    /// Created, never run.
    Created,
    /// A command runs (or ran and warden died: the lock tells).
    Running,
    /// The last command finished.
    Stopped,
}

/// A path committed by warden itself after the baseline, with the ctime the
/// commit left on it, so that the next commit does not take warden's own
/// write for a change made on the host.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OwnWrite {
    #[serde(with = "crate::wire::path")]
    pub path: PathBuf,
    pub ctime: FsTime,
}

/// How the sandbox's view of the workspace is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Layout {
    /// `upper/` is an overlayfs upper layer over the real workspace; the
    /// jail mounts it with [`Sandbox::mount_options`].
    #[default]
    Overlay,
    /// Where overlayfs cannot be mounted: `upper/` is a full copy of the
    /// workspace (reflinked where possible) that the jail binds in its
    /// place. Its diff scans both trees (see [`crate::copy`]).
    Copy,
}

/// `meta.json` of one sandbox.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Meta {
    pub name: String,
    /// The real workspace, canonical.
    #[serde(with = "crate::wire::path")]
    pub workspace: PathBuf,
    pub profile: Option<String>,
    /// Creation time.
    pub created: FsTime,
    /// A real file changed after this time (its ctime newer) conflicts with
    /// the sandbox's change to it. Set when the upper layer is created and
    /// advanced by a commit that leaves nothing uncommitted.
    pub baseline: FsTime,
    pub state: SandboxState,
    #[serde(default)]
    pub layout: Layout,
    /// Paths committed since the baseline, see [`OwnWrite`].
    #[serde(default)]
    pub own_writes: Vec<OwnWrite>,
    /// Globs of workspace paths that tools on the host run (the profile's
    /// `filesystem.runs_on_host`): every diff flags a change to one.
    #[serde(default)]
    pub runs_on_host: Vec<String>,
    /// A random id given at creation and never given again: what a
    /// credential made for this sandbox is bound to, since its name is
    /// free for another sandbox once it is removed. Empty in sandboxes
    /// made before warden kept one (see [`Sandbox::uid`]).
    #[serde(default)]
    pub uid: String,
    /// The identity of the workspace's directory when the sandbox was
    /// created (or, for a sandbox made before warden kept it, when it was
    /// next started): a commit, diff or discard refuses a directory at
    /// the same path that is not this one (see [`crate::anchor`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace_id: Option<crate::WorkspaceId>,
}

/// What to create.
#[derive(Debug, Clone)]
pub struct CreateOptions {
    pub workspace: PathBuf,
    pub profile: Option<String>,
    pub layout: Layout,
    /// See [`Meta::runs_on_host`].
    pub runs_on_host: Vec<String>,
}

impl CreateOptions {
    /// An overlay sandbox over `workspace`, without a profile name.
    pub fn new(workspace: impl Into<PathBuf>) -> CreateOptions {
        CreateOptions {
            workspace: workspace.into(),
            profile: None,
            layout: Layout::Overlay,
            runs_on_host: Vec::new(),
        }
    }
}

/// One line of `warden ls`.
#[derive(Debug, Clone, Serialize)]
pub struct ListEntry {
    pub name: String,
    #[serde(with = "crate::wire::path")]
    pub workspace: PathBuf,
    pub profile: Option<String>,
    pub state: SandboxState,
    /// The PID holding the sandbox's lock, when one does.
    pub in_use_by: Option<u32>,
    pub in_use: bool,
    /// Bytes of regular files in the upper layer.
    pub changes_bytes: u64,
    /// Seconds since creation.
    pub age_secs: u64,
    /// The last run ended without writing its layer back (its supervisor
    /// was killed while the layer was in memory): its changes are lost.
    #[serde(default)]
    pub changes_lost: bool,
}

mod unsaved;
pub use unsaved::{live_start_ticks, UnsavedMark, UNSAVED_MARK};

/// Warden's state directory.
#[derive(Debug, Clone)]
pub struct Store {
    root: PathBuf,
}

fn mkdir_0700(path: &Path) -> Result<(), StoreError> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(path)
        .map_err(|source| StoreError::Create {
            path: path.to_path_buf(),
            source,
        })
}

impl Store {
    /// Open (creating it when missing) the state directory `root`.
    pub fn open(root: impl Into<PathBuf>) -> Result<Store, StoreError> {
        let root = root.into();
        mkdir_0700(&root.join("sandboxes"))?;
        Ok(Store { root })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    fn dir(&self, name: &str) -> PathBuf {
        self.root.join("sandboxes").join(name)
    }

    /// Create the sandbox `name` over `opts.workspace`, which must be an
    /// existing directory; its canonical path is recorded.
    pub fn create(&self, name: &str, opts: &CreateOptions) -> Result<Sandbox, StoreError> {
        validate_name("sandbox name", name)?;
        let workspace =
            fs::canonicalize(&opts.workspace).map_err(|source| StoreError::Workspace {
                path: opts.workspace.clone(),
                source,
            })?;
        if !workspace.is_dir() {
            return Err(StoreError::NotADirectory(workspace));
        }
        // The directory whose identity is recorded is the one a copy is
        // made of: one descriptor for both.
        let (root, workspace_id) = crate::anchor::open(&workspace)
            .and_then(|fd| crate::WorkspaceId::of(&fd).map(|id| (fd, id)))
            .map_err(|source| StoreError::Workspace {
                path: workspace.clone(),
                source,
            })?;
        let dir = self.dir(name);
        // Not recursive: an existing sandbox must be refused, not reused.
        match fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                return Err(StoreError::Exists(name.to_string()))
            }
            Err(source) => return Err(StoreError::Create { path: dir, source }),
        }
        let made = (|| {
            for sub in ["work", "snapshots"] {
                mkdir_0700(&dir.join(sub))?;
            }
            // Before the copy: a host change made while copying is newer.
            let baseline = touch_baseline(&dir)?;
            match opts.layout {
                Layout::Overlay => {
                    // The merged root takes the upper root's attributes: give
                    // it the workspace's mode (sandboxes/NAME stays 0700).
                    let upper = dir.join("upper");
                    mkdir_0700(&upper)?;
                    let mode = fs::metadata(&workspace)
                        .map(|m| m.mode() & 0o7777)
                        .map_err(|source| StoreError::Workspace {
                            path: workspace.clone(),
                            source,
                        })?;
                    fs::set_permissions(&upper, fs::Permissions::from_mode(mode)).map_err(
                        |source| StoreError::Create {
                            path: upper.clone(),
                            source,
                        },
                    )?;
                }
                Layout::Copy => crate::treecopy::copy_real(
                    &crate::beneath::Tree::real_at(root),
                    &dir.join("upper"),
                )?,
            }
            let meta = Meta {
                name: name.to_string(),
                workspace,
                profile: opts.profile.clone(),
                created: FsTime::now(),
                baseline,
                state: SandboxState::Created,
                layout: opts.layout,
                own_writes: Vec::new(),
                runs_on_host: opts.runs_on_host.clone(),
                uid: new_uid(),
                workspace_id: Some(workspace_id),
            };
            write_json(&dir.join("meta.json"), &meta)?;
            Ok(Sandbox {
                name: name.to_string(),
                dir: dir.clone(),
                meta,
            })
        })();
        if made.is_err() {
            let _ = fsutil::remove_tree(&dir);
        }
        made
    }

    /// The existing sandbox `name`.
    pub fn get(&self, name: &str) -> Result<Sandbox, StoreError> {
        validate_name("sandbox name", name)?;
        let dir = self.dir(name);
        let path = dir.join("meta.json");
        let meta: Meta = match fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|source| StoreError::Meta {
                path: path.clone(),
                source,
            })?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(StoreError::NotFound(name.to_string()))
            }
            Err(source) => return Err(StoreError::Read { path, source }),
        };
        Ok(Sandbox {
            name: name.to_string(),
            dir,
            meta,
        })
    }

    /// Every sandbox, sorted by name. Damaged entries are skipped.
    pub fn list(&self) -> Result<Vec<ListEntry>, StoreError> {
        let dir = self.root.join("sandboxes");
        let rd = fs::read_dir(&dir).map_err(|source| StoreError::Read {
            path: dir.clone(),
            source,
        })?;
        let mut out = Vec::new();
        for entry in rd.flatten() {
            let Some(name) = entry.file_name().to_str().map(str::to_string) else {
                continue;
            };
            let Ok(sb) = self.get(&name) else { continue };
            let holder = sb.holder()?;
            let now = FsTime::now();
            out.push(ListEntry {
                name,
                workspace: sb.meta.workspace.clone(),
                profile: sb.meta.profile.clone(),
                // "Running" is written around a run; with no holder of the
                // lock, that run ended without saying so (its process was
                // killed): the sandbox is stopped.
                state: match (sb.meta.state, &holder) {
                    (SandboxState::Running, None) => SandboxState::Stopped,
                    (s, _) => s,
                },
                changes_lost: holder.is_none() && sb.changes_lost(),
                changes_bytes: fsutil::tree_size(&sb.layer()),
                in_use: holder.is_some(),
                in_use_by: holder.flatten(),
                age_secs: u64::try_from(now.sec - sb.meta.created.sec).unwrap_or(0),
            });
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    /// Remove the sandbox `name` and everything it holds (layers,
    /// snapshots). Refused while it is in use.
    pub fn remove(&self, name: &str) -> Result<(), StoreError> {
        let sb = self.get(name)?;
        let guard = sb.lock()?;
        // Move it aside first so that a half-removed sandbox is never
        // mistaken for a live one.
        let doomed = self
            .root
            .join("sandboxes")
            .join(format!(".removing-{name}-{}", std::process::id()));
        fs::rename(&sb.dir, &doomed).map_err(|source| StoreError::Write {
            path: sb.dir.clone(),
            source,
        })?;
        drop(guard);
        fsutil::remove_tree(&doomed)?;
        Ok(())
    }
}

/// A new sandbox identity: 128 random bits, hex.
fn new_uid() -> String {
    let mut bytes = [0u8; 16];
    // The kernel's generator fails only on kernels older than 3.17, which
    // warden does not run on; the creation time keeps the id apart from
    // every earlier one even then.
    if getrandom::fill(&mut bytes).is_err() {
        let now = FsTime::now();
        return format!("t{}.{:09}", now.sec, now.nsec);
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// One named sandbox.
#[derive(Debug, Clone)]
pub struct Sandbox {
    name: String,
    dir: PathBuf,
    meta: Meta,
}

impl Sandbox {
    pub fn name(&self) -> &str {
        &self.name
    }
    pub fn meta(&self) -> &Meta {
        &self.meta
    }
    /// This sandbox's identity, which no other sandbox (of this name or
    /// another) ever has: [`Meta::uid`], or for a sandbox made before
    /// warden kept one, its creation time to the nanosecond (a name holds
    /// one sandbox at a time, so two sandboxes of one name were made at
    /// different times).
    pub fn uid(&self) -> String {
        if self.meta.uid.is_empty() {
            format!("t{}.{:09}", self.meta.created.sec, self.meta.created.nsec)
        } else {
            self.meta.uid.clone()
        }
    }
    /// When it was made, in milliseconds since the epoch.
    pub fn created_ms(&self) -> u64 {
        let c = self.meta.created;
        (c.sec.max(0) as u64) * 1000 + (c.nsec.max(0) as u64) / 1_000_000
    }
    pub fn dir(&self) -> &Path {
        &self.dir
    }
    /// The overlay upper directory (the sandbox's changes).
    /// Whether the last run left its layer unsaved (see [`UNSAVED_MARK`]):
    /// the mark is there and no supervisor holds a running layer.
    pub fn changes_lost(&self) -> bool {
        self.dir.join(UNSAVED_MARK).exists() && self.live_upper().is_none()
    }

    /// The running layer of a sandbox whose layer is held in memory
    /// (`--disk`): `/proc/PID/fd/N/upper` of its supervisor, as the mark
    /// says, only while that very supervisor runs (see [`UnsavedMark`]).
    pub fn live_upper(&self) -> Option<PathBuf> {
        let text = fs::read_to_string(self.dir.join(UNSAVED_MARK)).ok()?;
        UnsavedMark::parse(&text)?.live_upper()
    }

    /// The layer to review: the running one where the sandbox's layer is in
    /// memory, else the saved `upper/`.
    pub fn layer(&self) -> PathBuf {
        self.live_upper().unwrap_or_else(|| self.upper())
    }

    pub fn upper(&self) -> PathBuf {
        self.dir.join("upper")
    }
    /// The overlay work directory.
    pub fn work(&self) -> PathBuf {
        self.dir.join("work")
    }
    pub(crate) fn snapshots(&self) -> PathBuf {
        self.dir.join("snapshots")
    }
    fn lock_path(&self) -> PathBuf {
        self.dir.join("lock")
    }

    /// The overlay mount the jail must make for this sandbox; see
    /// [`crate::overlay`] for why `userxattr` is needed inside a user
    /// namespace.
    pub fn mount_options(&self, in_user_namespace: bool) -> crate::MountOptions {
        crate::MountOptions {
            lowerdir: self.meta.workspace.clone(),
            upperdir: self.upper(),
            workdir: self.work(),
            userxattr: in_user_namespace,
        }
    }

    /// Take the sandbox's exclusive "in use" lock without waiting: a run
    /// holds it for its whole life; commit, discard, snapshot, restore and
    /// removal hold it while they work. Refused with the holder's PID when
    /// another process has it. Released when the guard drops (or the process
    /// dies).
    pub fn lock(&self) -> Result<Locked<'_>, StoreError> {
        let path = self.lock_path();
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&path)
            .map_err(|source| StoreError::Lock {
                path: path.clone(),
                source,
            })?;
        match rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => {}
            Err(rustix::io::Errno::WOULDBLOCK) => {
                return Err(StoreError::InUse {
                    name: self.name.clone(),
                    pid: read_pid(&mut file),
                })
            }
            Err(e) => {
                return Err(StoreError::Lock {
                    path,
                    source: e.into(),
                })
            }
        }
        let record = (|| {
            file.set_len(0)?;
            file.rewind()?;
            write!(file, "{}", std::process::id())
        })();
        record.map_err(|source| StoreError::Lock { path, source })?;
        Ok(Locked {
            sandbox: self,
            _file: file,
        })
    }

    /// `None` when nobody holds the lock, else `Some(pid if recorded)`.
    fn holder(&self) -> Result<Option<Option<u32>>, StoreError> {
        match self.lock() {
            Ok(_) => Ok(None),
            Err(StoreError::InUse { pid, .. }) => Ok(Some(pid)),
            Err(e) => Err(e),
        }
    }
}

fn read_pid(file: &mut File) -> Option<u32> {
    let mut s = String::new();
    file.rewind().ok()?;
    file.read_to_string(&mut s).ok()?;
    s.trim().parse().ok()
}

/// Proof that this process holds a sandbox's "in use" lock; the operations
/// that change a sandbox's layer hang off it.
#[derive(Debug)]
pub struct Locked<'a> {
    pub(crate) sandbox: &'a Sandbox,
    _file: File,
}

impl Locked<'_> {
    pub fn sandbox(&self) -> &Sandbox {
        self.sandbox
    }

    /// Record the sandbox's state (the front doors call this around runs).
    pub fn set_state(&self, state: SandboxState) -> Result<(), StoreError> {
        let mut meta = self.fresh_meta()?;
        meta.state = state;
        if meta.workspace_id.is_none() && state == SandboxState::Running {
            // A sandbox made before warden kept its workspace's identity
            // learns it at its next start (which refuses a path through a
            // link, as the opening here does).
            meta.workspace_id = crate::anchor::open(&meta.workspace)
                .and_then(|fd| crate::WorkspaceId::of(&fd))
                .ok();
        }
        write_json(&self.sandbox.dir.join("meta.json"), &meta)
    }

    /// Re-read the metadata from disk (another process may have advanced
    /// the baseline before this one took the lock).
    pub(crate) fn fresh_meta(&self) -> Result<Meta, StoreError> {
        let path = self.sandbox.dir.join("meta.json");
        let bytes = fs::read(&path).map_err(|source| StoreError::Read {
            path: path.clone(),
            source,
        })?;
        serde_json::from_slice(&bytes).map_err(|source| StoreError::Meta { path, source })
    }

    pub(crate) fn write_meta(&self, meta: &Meta) -> Result<(), StoreError> {
        write_json(&self.sandbox.dir.join("meta.json"), meta)
    }

    /// A new baseline: the ctime of the sandbox's `baseline` file, touched
    /// now, so that it comes from the same clock as the workspace's ctimes.
    pub(crate) fn new_baseline(&self) -> Result<FsTime, StoreError> {
        touch_baseline(&self.sandbox.dir)
    }
}

fn touch_baseline(dir: &Path) -> Result<FsTime, StoreError> {
    let path = dir.join("baseline");
    let err = |source| StoreError::Write {
        path: path.clone(),
        source,
    };
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&path)
        .map_err(err)?;
    f.write_all(b"baseline\n").map_err(err)?;
    Ok(FsTime::ctime(&f.metadata().map_err(err)?))
}

/// Write `value` as JSON to `path` atomically (temporary file, fsync,
/// rename).
pub(crate) fn write_json<T: Serialize>(path: &Path, value: &T) -> Result<(), StoreError> {
    let err = |source| StoreError::Write {
        path: path.to_path_buf(),
        source,
    };
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let bytes = serde_json::to_vec_pretty(value).map_err(|source| StoreError::Meta {
        path: path.to_path_buf(),
        source,
    })?;
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(err)?;
    f.write_all(&bytes).map_err(err)?;
    f.sync_all().map_err(err)?;
    fs::rename(&tmp, path).map_err(err)
}

/// A path as bytes, for names that are not UTF-8.
pub(crate) fn path_bytes(p: &Path) -> &[u8] {
    p.as_os_str().as_bytes()
}

pub(crate) fn path_from_bytes(b: Vec<u8>) -> PathBuf {
    PathBuf::from(OsString::from_vec(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unsaved_mark_names_its_writer_by_start_time_not_by_pid_alone() {
        let pid = std::process::id();
        let ticks = live_start_ticks(pid).expect("this process's start time");
        let mark = UnsavedMark {
            pid,
            fd: 0,
            start_ticks: ticks,
            dev: 0,
        };
        assert!(mark.writer_alive());
        assert_eq!(UnsavedMark::parse(&mark.text()), Some(mark));
        // The same PID started at another time is another process.
        let recycled = UnsavedMark {
            start_ticks: ticks + 1,
            ..mark
        };
        assert!(!recycled.writer_alive());
        assert_eq!(recycled.live_upper(), None);
        // An older warden's mark ("PID FD") names no identity: never followed.
        assert_eq!(UnsavedMark::parse(&format!("{pid} 0\n")), None);
    }

    #[test]
    fn names_follow_the_documented_pattern() {
        for ok in ["a", "0", "my-box", "a.b_c-d", &"x".repeat(63)] {
            assert!(validate_name("sandbox name", ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "-a",
            ".a",
            "_a",
            "A",
            "a/b",
            "a b",
            "..",
            "é",
            &"x".repeat(64),
        ] {
            assert!(validate_name("sandbox name", bad).is_err(), "{bad:?}");
        }
        let msg = validate_name("sandbox name", "Bad")
            .map_err(|e| e.to_string())
            .err();
        assert_eq!(
            msg.as_deref(),
            Some("invalid sandbox name \"Bad\": it must start with a lowercase letter or a digit")
        );
    }

    #[test]
    fn the_state_dir_follows_root_then_xdg_then_home() {
        let env = |xdg: Option<&str>, home: Option<&str>| {
            let (xdg, home) = (xdg.map(OsString::from), home.map(OsString::from));
            move |k: &str| match k {
                "XDG_STATE_HOME" => xdg.clone(),
                "HOME" => home.clone(),
                _ => None,
            }
        };
        let nobody = || None;
        assert_eq!(
            default_state_dir(true, env(Some("/x"), Some("/h")), nobody),
            Some(PathBuf::from("/var/lib/warden"))
        );
        assert_eq!(
            default_state_dir(false, env(Some("/x"), Some("/h")), nobody),
            Some(PathBuf::from("/x/warden"))
        );
        assert_eq!(
            default_state_dir(false, env(Some("rel"), Some("/h")), nobody),
            Some(PathBuf::from("/h/.local/state/warden"))
        );
        assert_eq!(default_state_dir(false, env(None, None), nobody), None);
        assert_eq!(
            default_state_dir(false, env(None, None), || Some(PathBuf::from("/home/u"))),
            Some(PathBuf::from("/home/u/.local/state/warden"))
        );
        let explicit = |k: &str| (k == "WARDEN_STATE_DIR").then(|| OsString::from("/s"));
        assert_eq!(
            default_state_dir(true, explicit, nobody),
            Some(PathBuf::from("/s"))
        );
    }

    #[test]
    fn create_refuses_an_existing_name_and_makes_private_directories() {
        let base = std::env::temp_dir().join(format!("warden-store-{}", std::process::id()));
        let ws = base.join("ws");
        fs::create_dir_all(&ws).expect("mkdir");
        let store = Store::open(base.join("state")).expect("open");
        let opts = CreateOptions {
            workspace: ws.clone(),
            profile: None,
            layout: Layout::Overlay,
            runs_on_host: Vec::new(),
        };
        let sb = store.create("one", &opts).expect("create");
        for dir in [sb.dir().to_path_buf(), sb.work()] {
            let mode = fs::metadata(&dir).expect("stat").mode() & 0o777;
            assert_eq!(mode, 0o700, "{}", dir.display());
        }
        assert!(matches!(
            store.create("one", &opts),
            Err(StoreError::Exists(_))
        ));
        assert!(matches!(store.get("two"), Err(StoreError::NotFound(_))));
        assert_eq!(
            store.get("one").expect("get").meta().workspace,
            fs::canonicalize(&ws).expect("canonical")
        );
        let _ = fsutil::remove_tree(&base);
    }
}
