//! What every handler shares: the runtime's store, the database, the
//! commands in flight, and the context a spec is resolved in.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use warden_policy::compose::Catalog;
use warden_policy::Defaults;
use warden_runtime::lifecycle::{self, Liveness};
use warden_workspace::{Sandbox, Store};

use crate::api::SandboxInfo;
use crate::db::{Db, SandboxRow};
use crate::error::{chain, ApiError};
use crate::execs::{self, ExecHandle};

// What a request was let in with, where the routes and the E2B door name
// it.
use crate::credential::Credential;

/// How long the E2B code interpreter's server may take to listen
/// (unpacking, the first kernel) unless the owner says otherwise (`e2b:
/// interpreter_start_within:`; see [`crate::e2b::interpreter`]).
const INTERPRETER_START_WITHIN: Duration = Duration::from_secs(180);

/// Limits on what a request may carry.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Largest JSON body.
    pub body_bytes: usize,
    /// Largest command output returned in one (non-streamed) answer.
    pub output_bytes: usize,
    /// Largest file written through the files API.
    pub file_bytes: u64,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            body_bytes: 4 << 20,
            output_bytes: 16 << 20,
            file_bytes: 1 << 30,
        }
    }
}

/// What the daemon's owner configured.
#[derive(Debug, Clone, Default)]
pub struct Settings {
    /// Directories under which token holders may name workspaces
    /// (canonical).
    pub workspace_roots: Vec<PathBuf>,
    pub pools: Vec<crate::settings::PoolSpec>,
    /// How many long-lived answers tokens may hold open.
    pub sessions: crate::leases::Bounds,
    /// What a token may have when its own record sets no bound.
    pub quotas: crate::settings::Quotas,
    /// How long stopped sandboxes the daemon made are kept.
    pub retention: crate::settings::Retention,
    /// The volumes the owner declared for the E2B door (`e2b: volumes:`),
    /// checked.
    pub e2b_volumes: crate::e2b::declared::Volumes,
    /// How long the code interpreter's server may take to listen (`None`:
    /// the door's default).
    pub e2b_interpreter_start_within: Option<std::time::Duration>,
    /// The file these settings were read from (`warden serve --config`):
    /// the owner's configuration, kept from every token's reach as the
    /// catalogue is ([`App::owners_files`]).
    pub config_file: Option<PathBuf>,
}

pub struct App {
    pub state_dir: PathBuf,
    pub store: Store,
    db: Mutex<Db>,
    /// The warden executable whose `__supervise` runs each sandbox.
    pub exe: PathBuf,
    pub catalog: Catalog,
    pub defaults: Defaults,
    pub execs: execs::Table,
    pub limits: Limits,
    /// Directories under which token holders may name workspaces
    /// (canonical).
    pub workspace_roots: Vec<PathBuf>,
    audit_lock: Mutex<()>,
    /// How many of each caller's refusals the log records one by one.
    denials: crate::denials::Rate,
    /// Held while a token's quota is checked and its sandbox recorded.
    pub quota_lock: Mutex<()>,
    /// What forks in flight reserved of their tokens' quotas.
    pub pending: crate::reserved::Pending,
    /// Warm pools to keep full (see [`crate::pools`]).
    pub pools: Vec<crate::settings::PoolSpec>,
    /// Wakes the refill when a pooled sandbox was taken.
    pub pool_wake: tokio::sync::Notify,
    /// Recent creates of pooled profiles, which autoscaled pools follow.
    pub pool_demand: Demand,
    /// The dashboard's browser sessions.
    pub sessions: crate::session::Sessions,
    /// Every MCP endpoint's sessions: who began each, and the token each
    /// counts against (see [`crate::mcp::ledger::Bindings`]).
    pub mcp_sessions: crate::mcp::ledger::Bindings,
    /// What each sandbox's audit log counts (denials, violations).
    pub tallies: crate::tally::Tallies,
    /// The long-lived answers tokens hold open (see [`crate::leases`]).
    pub leases: Arc<crate::leases::Leases>,
    /// The owner's default quotas for tokens (see [`crate::quota`]).
    pub quotas: crate::settings::Quotas,
    /// How long stopped sandboxes are kept (see [`crate::retention`]).
    pub retention: crate::settings::Retention,
    /// The volumes the owner declared for the E2B door (see
    /// [`crate::e2b::declared`]).
    pub e2b_volumes: crate::e2b::declared::Volumes,
    /// How long the code interpreter's server may take to listen (see
    /// [`crate::e2b::interpreter`]).
    pub e2b_interpreter_start_within: std::time::Duration,
    /// The daemon's settings file, when it was given one.
    pub config_file: Option<PathBuf>,
}

impl App {
    pub fn new(
        state_dir: PathBuf,
        store: Store,
        db: Db,
        exe: PathBuf,
        catalog: Catalog,
        defaults: Defaults,
        settings: Settings,
    ) -> Arc<App> {
        Arc::new_cyclic(|me: &std::sync::Weak<App>| App {
            state_dir,
            store,
            db: Mutex::new(db),
            exe,
            catalog,
            defaults,
            execs: Mutex::new(Default::default()),
            limits: Limits::default(),
            workspace_roots: settings.workspace_roots,
            audit_lock: Mutex::new(()),
            denials: Default::default(),
            quota_lock: Mutex::new(()),
            pending: Default::default(),
            pools: settings.pools,
            sessions: Default::default(),
            mcp_sessions: Default::default(),
            tallies: Default::default(),
            pool_wake: tokio::sync::Notify::new(),
            pool_demand: Default::default(),
            leases: crate::leases::Leases::with_makers(settings.sessions, {
                // A token's places are its makers' (see [`crate::leases`]).
                let me = me.clone();
                Box::new(move |id| {
                    let app = me.upgrade()?;
                    let db = app.db().ok()?;
                    db.maker_of(id).ok().flatten()
                })
            }),
            quotas: settings.quotas,
            retention: settings.retention,
            e2b_volumes: settings.e2b_volumes,
            e2b_interpreter_start_within: settings
                .e2b_interpreter_start_within
                .unwrap_or(INTERPRETER_START_WITHIN),
            config_file: settings.config_file,
        })
    }

    /// Whether a token holder may name `path` as a workspace: it
    /// resolves (links followed) under one of the roots, and holds none of
    /// the owner's configuration.
    pub fn workspace_allowed(&self, path: &std::path::Path) -> bool {
        self.workspace_refused(path).is_none()
    }

    /// Why a token holder may not name `path` as a workspace, as a
    /// reason code: `forbidden` (not a directory under a root, named as
    /// it is), or
    /// [`HOLDS_CONFIGURATION`](warden_runtime::owners_files::HOLDS_CONFIGURATION)
    /// (it holds a file the owner's configuration is read from, or lies
    /// in the same directory of its root as one: [`App::top_below_root`]).
    /// `None`: it may. The code is for the owner's log: a token is told
    /// `forbidden` in the same words for each, so that where the owner's
    /// configuration is under a root tells in nothing.
    ///
    /// The path is judged by its spelling before anything of the host is
    /// looked at: one that does not lie under a root as written (or that
    /// holds a `.` or `..`) is refused without a look, so whether it
    /// exists, is a file, is the owner's alone, or is a link or a `..`
    /// into a root tells in nothing (outside review 31, F11). Only a path
    /// under a root, which the token was given, is then resolved; one
    /// that resolves elsewhere (a link in it) is refused alike.
    pub fn workspace_refused(&self, path: &std::path::Path) -> Option<&'static str> {
        use std::path::Component;
        let plain = path.is_absolute()
            && path
                .components()
                .all(|c| matches!(c, Component::RootDir | Component::Normal(_)));
        if !plain || !self.workspace_roots.iter().any(|r| path.starts_with(r)) {
            return Some("forbidden");
        }
        match std::fs::canonicalize(path) {
            Ok(real) if real == path => {
                let files = self.owners_files();
                let near = files.held_by(&real)
                    || self
                        .top_below_root(&real)
                        .is_some_and(|top| files.held_by(&top));
                near.then_some(warden_runtime::owners_files::HOLDS_CONFIGURATION)
            }
            _ => Some("forbidden"),
        }
    }

    /// The directory of the innermost root `real` lies strictly below
    /// that holds it: `ROOT/x` for `ROOT/x/y/z`. Where the owner's
    /// configuration is anywhere in that directory, every workspace in it
    /// is refused, not only the ones that hold a file of it: a token that
    /// saw `ROOT/x/sec` refused while `ROOT/x/sec/deeper` or
    /// `ROOT/x/side` made a sandbox would know that `ROOT/x/sec` exists
    /// and holds the owner's file (outside review 34, F3). A directory of
    /// the root without any is the token's as before. `None`: `real` is a
    /// root.
    fn top_below_root(&self, real: &std::path::Path) -> Option<std::path::PathBuf> {
        let root = self
            .workspace_roots
            .iter()
            .filter(|r| real.starts_with(r))
            .max_by_key(|r| r.components().count())?;
        let first = real.strip_prefix(root).ok()?.components().next()?;
        Some(root.join(first))
    }

    /// Whether the directory `real` (canonical) holds, or lies inside, the
    /// owner's configuration ([`App::owners_files`]): the catalogue of
    /// profiles and presets, every file they read with the owner's trust
    /// (an `extends` target by path, the project file a catalogue entry
    /// links to, a secret's file or program), the daemon's own settings
    /// file, or warden's state. A sandbox's changes to its workspace can
    /// be committed by a token holder: a workspace over one of them would
    /// let it write the owner's word and then name the profile by its
    /// plain name, as if the owner had (with `--workspace-root ~`, a
    /// workspace of `~` or `~/.config`).
    pub fn holds_configuration(&self, real: &std::path::Path) -> bool {
        self.owners_files().held_by(real)
    }

    /// The owner's configuration as files on the host, as it is now
    /// (`warden_runtime::owners_files`): computed at each check, since
    /// the owner may change a profile between a sandbox's create and its
    /// commit.
    pub fn owners_files(&self) -> warden_runtime::owners_files::OwnersFiles {
        // The settings file of this start, and of earlier ones: the next
        // start may read it again.
        let mut files = warden_runtime::state::daemon_configs(&self.state_dir);
        files.extend(self.config_file.iter().cloned());
        warden_runtime::owners_files::OwnersFiles::of(
            &self.catalog,
            &[self.state_dir.as_path()],
            &files,
        )
    }

    /// Whether what a request was let in with still stands: its token not
    /// revoked, its browser session not ended. A long-lived stream (a
    /// terminal) asks again as it goes, and ends when the answer is no.
    pub fn still_granted(&self, credential: &Credential) -> bool {
        if let Some(id) = &credential.session {
            if self
                .sessions
                .get(id, warden_runtime::state::now_ms())
                .is_none()
            {
                return false;
            }
        }
        if let Some((sandbox, key)) = &credential.envd {
            let kept = self
                .db()
                .ok()
                .and_then(|db| db.e2b_keys(Some(sandbox)).ok())
                .is_some_and(|keys| keys.iter().any(|k| &k.key == key));
            if !kept {
                return false;
            }
        }
        match &credential.token {
            None => true,
            // Not revoked, and a per-sandbox token's sandbox still the one
            // it was made for: what is open ends with the sandbox too.
            Some(id) => match self.db() {
                Ok(db) => match db.token(id) {
                    Ok(Some(row)) => crate::auth::standing(&db, &self.store, row).is_ok(),
                    _ => false,
                },
                Err(_) => false,
            },
        }
    }

    /// Resolves once `credential` no longer stands (asked every second,
    /// first a second from now: it was checked as the request came in):
    /// every long-lived answer ends with it ([`crate::revocation`]).
    pub async fn revoked(self: Arc<Self>, credential: Credential) {
        let every = std::time::Duration::from_secs(1);
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let (a, c) = (self.clone(), credential.clone());
            let stands = tokio::task::spawn_blocking(move || a.still_granted(&c))
                .await
                .unwrap_or(false);
            if !stands {
                return;
            }
        }
    }

    pub fn db(&self) -> Result<MutexGuard<'_, Db>, ApiError> {
        self.db
            .lock()
            .map_err(|_| ApiError::internal("the daemon's database lock is poisoned"))
    }

    /// The sandbox `id`, or 404.
    pub fn sandbox(&self, id: &str) -> Result<Sandbox, ApiError> {
        if warden_workspace::validate_name("sandbox id", id).is_err() {
            return Err(ApiError::not_found(format!("no sandbox {id:?}")));
        }
        let sb = self.store.get(id).map_err(|e| match e {
            warden_workspace::StoreError::NotFound(_) => {
                ApiError::not_found(format!("no sandbox {id:?}: GET /v1/sandboxes lists them"))
            }
            e => ApiError::internal(chain(&e)),
        })?;
        // A pooled sandbox is nobody's until a create takes it (the very
        // sandbox pooled, not a later one of its name).
        if self
            .db()?
            .is_pooled_sandbox(&sb)
            .map_err(|e| ApiError::internal(chain(&e)))?
        {
            return Err(ApiError::not_found(format!(
                "no sandbox {id:?}: GET /v1/sandboxes lists them"
            )));
        }
        Ok(sb)
    }

    /// The daemon's record of `sb`: none when it made no record of that
    /// very sandbox (a record kept under its name of an earlier sandbox of
    /// the name is not its).
    pub fn record(&self, sb: &Sandbox) -> Result<Option<SandboxRow>, ApiError> {
        self.db()?
            .record_of(sb)
            .map_err(|e| ApiError::internal(chain(&e)))
    }

    /// The daemon's records of the sandboxes there now, each with its
    /// sandbox: a record whose sandbox is gone, or of an earlier sandbox
    /// of a name another sandbox holds now, is left out.
    pub fn records(&self) -> Result<Vec<(SandboxRow, Sandbox)>, ApiError> {
        let rows = self
            .db()?
            .sandboxes()
            .map_err(|e| ApiError::internal(chain(&e)))?;
        Ok(rows
            .into_iter()
            .filter_map(|row| {
                let sb = self.store.get(&row.id).ok()?;
                row.is_of(&sb).then_some((row, sb))
            })
            .collect())
    }

    /// A command this daemon knows of, in sandbox `sb`.
    pub fn exec(&self, sb: &str, id: &str) -> Result<Arc<ExecHandle>, ApiError> {
        let table = self
            .execs
            .lock()
            .map_err(|_| ApiError::internal("the command table lock is poisoned"))?;
        let found = match table.get(id) {
            Some(h) if h.row.sandbox == sb => h.clone(),
            _ => {
                return Err(ApiError::not_found(format!(
                    "no command {id:?} in sandbox {sb}"
                )))
            }
        };
        drop(table);
        // A command started before the sandbox holding the name now was
        // made was an earlier sandbox's of that name (removed behind the
        // daemon's back): not this one's.
        if self
            .store
            .get(sb)
            .is_ok_and(|s| found.row.started_ms >= s.created_ms())
        {
            Ok(found)
        } else {
            Err(ApiError::not_found(format!(
                "no command {id:?} in sandbox {sb}"
            )))
        }
    }

    /// The sandbox as the API shows it. Blocking (asks its supervisor).
    pub fn info(&self, sb: &Sandbox, row: Option<&SandboxRow>) -> SandboxInfo {
        // A record older than the sandbox holding its name was of an
        // earlier sandbox of that name (removed behind the daemon's back):
        // its labels (a door's record among them) are not this one's.
        let row = row.filter(|r| r.is_of(sb));
        let live = lifecycle::liveness(sb);
        let status = match live {
            Liveness::Running => warden_runtime::client::Connection::open(&lifecycle::control(sb))
                .and_then(|c| c.status())
                .ok(),
            _ => None,
        };
        let meta = sb.meta();
        let created_ms = row.map(|r| r.created_ms).unwrap_or_else(|| {
            (meta.created.sec.max(0) as u64) * 1000 + (meta.created.nsec.max(0) as u64) / 1_000_000
        });
        let now = warden_runtime::state::now_ms();
        let tally = self.tallies.of(&sb.dir().join("audit.jsonl"));
        let layer = match meta.layout {
            warden_workspace::Layout::Overlay => "overlay",
            warden_workspace::Layout::Copy => "copy",
        };
        // What isolates it: its spec's backend (a gVisor or VM sandbox is
        // not "namespaces"), rootless as its log's `created` says.
        let isolation = match warden_runtime::state::stored_spec(sb.dir())
            .as_ref()
            .map(warden_runtime::backend::Backend::of)
        {
            Some(warden_runtime::backend::Backend::Gvisor) => "gVisor",
            Some(warden_runtime::backend::Backend::Vm) => "microVM",
            _ => "namespaces",
        };
        let backend = match tally.rootless {
            Some(true) => format!("rootless {isolation}, {layer} workspace"),
            _ => format!("{isolation}, {layer} workspace"),
        };
        SandboxInfo {
            id: sb.name().to_string(),
            state: if status.as_ref().is_some_and(|s| s.paused_ms.is_some()) {
                "paused".into()
            } else if status.is_some() || live.running() {
                "running".into()
            } else {
                "stopped".into()
            },
            profile: meta.profile.clone(),
            labels: row.map(|r| r.labels.clone()).unwrap_or_default(),
            workspace: meta.workspace.display().to_string(),
            created_ms,
            age_seconds: now.saturating_sub(created_ms) / 1000,
            ttl_deadline_ms: status.as_ref().and_then(|s| s.ttl_deadline_ms),
            memory_bytes: status.as_ref().and_then(|s| s.memory_bytes),
            egress_bytes: status.as_ref().map(|s| s.egress_bytes).unwrap_or(0),
            processes: status.as_ref().map(|s| s.processes).unwrap_or(0),
            execs: status.as_ref().map(|s| s.execs).unwrap_or(0),
            changes_bytes: 0,
            cpu_usec: status.as_ref().and_then(|s| s.cpu_usec),
            backend,
            denied_connections: tally.denied,
            refused_execs: tally.refused_execs,
            violations: tally.violations,
            degraded: tally.degraded,
        }
    }

    /// Record a refused call in the daemon's own audit log.
    pub fn record_denial(
        &self,
        caller: &impl crate::auth::Recorded,
        route: &crate::auth::Route,
        why: &str,
    ) {
        let token = caller.recorded_token().map(str::to_string);
        let key = token.clone().unwrap_or_else(|| "-".into());
        let admit = self.denials.admit(&key, std::time::Instant::now());
        self.write_refusal(admit, "this caller", token, route, why);
    }

    /// Record a call refused for its credential (none, malformed, unknown,
    /// revoked) in the daemon's own audit log: a guessing loop leaves a
    /// trace, bounded per door and peer (see [`crate::denials`]), so that
    /// one client's flood leaves every other door's and peer's first
    /// refusals recorded in full.
    pub fn record_unauthenticated(
        &self,
        door: crate::denials::Door,
        peer: crate::denials::Peer,
        route: &crate::auth::Route,
        why: &str,
    ) {
        let (admit, key) = self
            .denials
            .admit_stranger(door, peer, std::time::Instant::now());
        let who = if key.ends_with("|*") {
            format!("callers without a token at the {} door", door.name())
        } else {
            format!("{peer} at the {} door", door.name())
        };
        let why = format!("{why} ({who})");
        self.write_refusal(admit, &who, None, route, &why);
    }

    fn write_refusal(
        &self,
        admit: crate::denials::Admit,
        who: &str,
        token: Option<String>,
        route: &crate::auth::Route,
        why: &str,
    ) {
        use crate::denials::Admit;
        use warden_audit::EventSink;
        let counted = match admit {
            Admit::Record { counted } => counted,
            Admit::Count => return,
        };
        let path = self.state_dir.join(crate::AUDIT_FILE);
        let Ok(_guard) = self.audit_lock.lock() else {
            return;
        };
        let denied = |method: String, route: String, reason: String| {
            warden_audit::Event::now(
                "daemon",
                warden_audit::EventKind::ApiDenied {
                    method,
                    route,
                    token: token.clone(),
                    reason,
                },
            )
        };
        match warden_audit::chain::ChainedLog::open(&path) {
            Ok(mut log) => {
                if counted > 0 {
                    log.emit(&denied(
                        "*".into(),
                        "*".into(),
                        format!(
                            "{counted} more refusals of {who} within {} s were counted, not recorded one by one",
                            crate::denials::WINDOW.as_secs(),
                        ),
                    ));
                }
                log.emit(&denied(
                    route.method.to_string(),
                    route.path.to_string(),
                    why.to_string(),
                ));
            }
            Err(e) => tracing::error!("cannot record a denial in {}: {e}", path.display()),
        }
    }

    /// Adopt the commands the records say were running (a restart), and
    /// forget records of sandboxes that are gone (the pools' own are
    /// [`crate::pools::reconcile`]'s, asked first).
    pub fn reconcile(self: &Arc<App>) -> Result<Vec<String>, ApiError> {
        let mut notes = Vec::new();
        let rows = self
            .db()?
            .sandboxes()
            .map_err(|e| ApiError::internal(chain(&e)))?;
        for row in rows {
            match self.store.get(&row.id) {
                Ok(sb) if !row.is_of(&sb) => {
                    // The name's earlier sandbox was removed behind the
                    // daemon's back and another took it: nothing of the
                    // record is the new one's.
                    notes.push(format!(
                        "sandbox {} is not the one the daemon made; the earlier one's record is removed",
                        row.id
                    ));
                    let _ = self.db()?.forget_stale(&sb);
                }
                Ok(sb) => {
                    if let Some(n) = lifecycle::liveness(&sb).notice(sb.name()) {
                        notes.push(n);
                    }
                }
                Err(_) => {
                    notes.push(format!("sandbox {} is gone; its record is removed", row.id));
                    let _ = self.db()?.remove_sandbox(&row.id);
                }
            }
        }
        // What revoked tokens kept, once their last sandbox is gone (one
        // removed at the command line, or a revocation by an earlier
        // warden).
        crate::revocation::files::forget_revoked(&self.state_dir, &*self.db()?);
        let unfinished = self
            .db()?
            .unfinished_execs()
            .map_err(|e| ApiError::internal(chain(&e)))?;
        for row in unfinished {
            if row.tty {
                // A terminal session's other end was this daemon's: closed
                // with it, which hangs up the session (SIGHUP to its
                // process group). Recorded so; it cannot be reconnected.
                let hup = nix::sys::signal::Signal::SIGHUP as i32;
                let _ = self.db()?.finish_exec(
                    &row.id,
                    128 + hup,
                    Some(hup),
                    warden_runtime::state::now_ms(),
                );
                continue;
            }
            let Ok(sb) = self.store.get(&row.sandbox) else {
                continue;
            };
            // Its place among its holder's long-lived answers, as before
            // the restart, until it ends.
            let lease = row
                .holder
                .as_deref()
                .map(|who| self.leases.restore(who, crate::leases::Kind::Command));
            let h = ExecHandle::adopt(&sb, row);
            execs::watch_adopted(&sb, h.clone(), lease);
            self.watch_end(h.clone());
            if let Ok(mut t) = self.execs.lock() {
                t.insert(h.row.id.clone(), h);
            }
        }
        Ok(notes)
    }

    /// Record a command's end in the database when it comes.
    pub fn watch_end(self: &Arc<App>, h: Arc<ExecHandle>) {
        let mut rx = h.ended.clone();
        let app = self.clone();
        tokio::spawn(async move {
            let ended = loop {
                if let Some(e) = *rx.borrow_and_update() {
                    break e;
                }
                if rx.changed().await.is_err() {
                    return;
                }
            };
            if let Ok(db) = app.db() {
                let _ = db.finish_exec(
                    &h.row.id,
                    ended.status,
                    ended.signal,
                    warden_runtime::state::now_ms(),
                );
            }
        });
    }
}

/// The creates of each pooled profile, as far back as its window: what
/// an autoscaled pool follows.
#[derive(Debug, Default)]
pub struct Demand {
    seen: std::sync::Mutex<
        std::collections::HashMap<String, std::collections::VecDeque<std::time::Instant>>,
    >,
}

impl Demand {
    /// A create of `profile` (that a pool could have served) came now.
    pub fn record(&self, profile: &str, window: Duration) {
        let now = std::time::Instant::now();
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        let times = seen.entry(profile.to_string()).or_default();
        times.push_back(now);
        Self::forget(times, now, window);
    }

    /// Creates of `profile` within the last `window`.
    pub fn recent(&self, profile: &str, window: Duration) -> usize {
        let now = std::time::Instant::now();
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        match seen.get_mut(profile) {
            Some(times) => {
                Self::forget(times, now, window);
                times.len()
            }
            None => 0,
        }
    }

    fn forget(
        times: &mut std::collections::VecDeque<std::time::Instant>,
        now: std::time::Instant,
        window: Duration,
    ) {
        while times
            .front()
            .is_some_and(|t| now.saturating_duration_since(*t) > window)
        {
            times.pop_front();
        }
        // Counting more than the largest pool is of no use.
        while times.len() > crate::settings::MAX_POOL_SIZE {
            times.pop_front();
        }
    }
}
