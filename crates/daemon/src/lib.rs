//! `warden serve`: sandboxes over an HTTP API, on the user's own machine.
//!
//! The daemon is one more front door onto `warden-runtime`: it creates,
//! starts, stops and removes sandboxes through the runtime's lifecycle and
//! runs commands through each sandbox's supervisor, which outlives it (a
//! daemon killed with `kill -9` stops no sandbox and loses no output). What
//! it adds is its own: the HTTP API ([`routes`]), tokens and scopes
//! ([`auth`]), and records in SQLite ([`db`]). Nothing here prints; the
//! CLI does.

#![forbid(unsafe_code)]
// Below the doors nothing prints: a library reports through its return
// values and observers, and each front door chooses what the person sees
// (tests may say why they skipped).
#![cfg_attr(not(test), deny(clippy::print_stdout, clippy::print_stderr))]

pub use warden_api as api;
pub mod app;
pub mod auth;
pub mod body;
pub mod credential;
pub mod dashboard;
pub mod db;
pub mod deadline;
pub mod denials;
pub mod e2b;
pub mod error;
pub mod execs;
pub mod exitwatch;
pub mod hangup;
pub mod host;
pub mod idle;
pub mod labels;
pub mod leases;
pub mod listen;
pub mod logpage;
pub mod mcp;
pub mod pools;
pub mod quota;
pub mod reach;
pub mod reserved;
pub mod retention;
pub mod revocation;
pub mod routes;
pub mod secret_programs;
pub mod session;
pub mod settings;
pub mod tally;

use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use warden_runtime::sockname;

pub use app::App;

/// The daemon's database, in the state directory.
pub const DB_FILE: &str = "daemon.db";
/// The daemon's own audit log (refused calls), in the state directory.
pub const AUDIT_FILE: &str = "daemon-audit.jsonl";
/// The default socket, in the state directory.
pub const SOCKET_FILE: &str = "daemon.sock";

/// Why the daemon could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(transparent)]
    Db(#[from] db::DbError),
    #[error(transparent)]
    Store(#[from] warden_workspace::StoreError),
    #[error("another warden daemon listens on {0}; stop it first, or give another --socket")]
    AlreadyRunning(PathBuf),
    #[error("cannot listen on {what}")]
    Listen {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("the daemon's server failed")]
    Serve(#[source] std::io::Error),
    #[error("cannot reconcile the records with the sandboxes: {0}")]
    Reconcile(String),
    #[error("{0}")]
    Volume(String),
    #[error(transparent)]
    Roots(#[from] warden_runtime::daemon_roots::RootsError),
}

/// Where and how the daemon serves.
#[derive(Debug, Clone)]
pub struct Config {
    pub state_dir: PathBuf,
    /// The Unix socket (owner-only); `None`: the state directory's.
    pub socket: Option<PathBuf>,
    /// Also TCP here (every call then needs a token).
    pub listen: Option<SocketAddr>,
    /// The warden executable that runs each sandbox's supervisor.
    pub exe: PathBuf,
    /// Directories under which token holders may name workspaces.
    pub workspace_roots: Vec<PathBuf>,
    /// Warm pools to keep full.
    pub pools: Vec<settings::PoolSpec>,
    /// Also serve the E2B-compatible API here (see [`e2b`]).
    pub e2b: Option<SocketAddr>,
    /// The volumes the owner declared for the E2B door (`e2b: volumes:`,
    /// checked by [`FileConfig::read`]).
    pub e2b_volumes: e2b::declared::Volumes,
    /// How long the code interpreter's server may take to listen (`e2b:
    /// interpreter_start_within:`; `None`: the door's default).
    pub e2b_interpreter_start_within: Option<std::time::Duration>,
    /// The file the settings were read from (`--config`), if any: the
    /// owner's configuration, which no token's workspace may hold.
    pub config_file: Option<PathBuf>,
    /// How long a TCP client may keep the daemon waiting after a request
    /// head (see [`deadline`]).
    pub timeouts: deadline::Timeouts,
    /// How many long-lived answers tokens may hold open (see [`leases`]).
    pub sessions: leases::Bounds,
    /// What a token may have when its own record sets no bound (see
    /// [`quota`]).
    pub quotas: settings::Quotas,
    /// How long stopped sandboxes the daemon made are kept (see
    /// [`retention`]).
    pub retention: settings::Retention,
    /// Names the TCP listeners answer to besides loopback and localhost
    /// (see [`host`]).
    pub allowed_hosts: Vec<host::Allowed>,
}

impl Config {
    pub fn socket_path(&self) -> PathBuf {
        self.socket
            .clone()
            .unwrap_or_else(|| self.state_dir.join(SOCKET_FILE))
    }
}

/// Open the daemon's database in `state_dir`.
pub fn open_db(state_dir: &Path) -> Result<db::Db, db::DbError> {
    db::Db::open(&state_dir.join(DB_FILE))
}

/// What the daemon says once it listens.
pub struct Listening {
    pub socket: PathBuf,
    pub tcp: Option<SocketAddr>,
    /// The E2B-compatible API's address, when asked for.
    pub e2b: Option<SocketAddr>,
    /// Notes from reconciling the records at start.
    pub notes: Vec<String>,
}

/// Bind the daemon's sockets; `serve` on the result runs it.
pub struct Bound {
    app: Arc<App>,
    /// Registered with the owner's own runtime when served (see
    /// [`owner_runtime`]).
    unix: std::os::unix::net::UnixListener,
    tcp: Option<tokio::net::TcpListener>,
    e2b: Option<tokio::net::TcpListener>,
    /// How many connections each TCP listener, and each peer, may hold.
    bounds: listen::Bounds,
    timeouts: deadline::Timeouts,
    /// Names the TCP listeners answer to besides their own.
    allowed_hosts: Vec<host::Allowed>,
    pub listening: Listening,
}

/// Record `roots` in the catalogue's directory `config`, made
/// (owner-only) when missing; a note, loud, when it cannot be.
fn record_beside_catalogue(
    config: &std::path::Path,
    roots: &[warden_runtime::daemon_roots::Root],
) -> Option<String> {
    use std::os::unix::fs::DirBuilderExt;
    use warden_runtime::daemon_roots::{record, RootsError};
    let written = std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(config)
        .map_err(|source| RootsError::Write {
            path: config.to_path_buf(),
            source,
        })
        .and_then(|()| record(config, roots));
    let e = written.err()?;
    tracing::warn!("{e}");
    Some(format!(
        "warning: {e}: a command line with another state directory than this daemon's will not hold secret programs to these roots"
    ))
}

/// Open the store and database, reconcile, and bind. Call within a tokio
/// runtime.
pub async fn bind(
    cfg: &Config,
    catalog: warden_policy::compose::Catalog,
    defaults: warden_policy::Defaults,
) -> Result<Bound, ServeError> {
    // Idle connections must not be what runs the daemon out of
    // descriptors: the limit is the host's, and the listeners' bounds
    // fit within it.
    let open_files = listen::raise_open_files();
    if let Some(why) = e2b::declared::overlaps_state(&cfg.e2b_volumes, &cfg.state_dir) {
        return Err(ServeError::Volume(why));
    }
    let store = warden_workspace::Store::open(&cfg.state_dir)?;
    let db = open_db(&cfg.state_dir)?;
    let app = App::new(
        cfg.state_dir.clone(),
        store,
        db,
        cfg.exe.clone(),
        catalog,
        defaults,
        app::Settings {
            workspace_roots: cfg
                .workspace_roots
                .iter()
                .filter_map(|r| std::fs::canonicalize(r).ok())
                .collect(),
            pools: cfg.pools.clone(),
            sessions: cfg.sessions,
            quotas: cfg.quotas,
            retention: cfg.retention,
            e2b_volumes: cfg.e2b_volumes.clone(),
            e2b_interpreter_start_within: cfg.e2b_interpreter_start_within,
            config_file: cfg.config_file.clone(),
        },
    );
    // The pools' sandboxes first: one of a pool no longer configured is
    // removed before the records are read.
    let mut notes = pools::reconcile(&app);
    notes.extend(
        app.reconcile()
            .map_err(|e| ServeError::Reconcile(e.problem.message))?,
    );
    // A declared volume the configuration no longer grants a token is
    // recorded for that token's sandboxes, which run on: their stop
    // holds back what they wrote there.
    notes.extend(routes::copies::grants::record_withdrawn(&app));
    let socket = cfg.socket_path();
    // Bound and reached through the state directory's descriptor when
    // its path is longer than a socket's address holds.
    use nix::sys::socket::{SockFlag, SockType};
    if sockname::connect(&socket, SockType::Stream, SockFlag::SOCK_CLOEXEC).is_ok() {
        return Err(ServeError::AlreadyRunning(socket));
    }
    // A socket nobody listens on is a stale one of a daemon that died.
    let _ = std::fs::remove_file(&socket);
    // Owner-only from its first moment: made under a umask that leaves
    // nothing to others.
    let old = nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o177));
    let bound = sockname::bind(
        &socket,
        SockType::Stream,
        SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK,
    );
    nix::sys::stat::umask(old);
    let unix = bound
        .and_then(|fd| {
            // As std's own bind would: the kernel's largest backlog.
            nix::sys::socket::listen(&fd, nix::sys::socket::Backlog::MAXCONN).map(|()| fd)
        })
        .map(std::os::unix::net::UnixListener::from)
        .map_err(|e| ServeError::Listen {
            what: socket.display().to_string(),
            source: std::io::Error::from(e),
        })?;
    let _ = std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o600));
    // A socket outside the state directory is not hidden with it: its
    // path is written there, and no sandbox is then shown it.
    let recorded = cfg.state_dir.join(warden_runtime::state::DAEMON_SOCKET);
    if socket == cfg.state_dir.join(SOCKET_FILE) {
        let _ = std::fs::remove_file(&recorded);
    } else {
        let absolute = std::path::absolute(&socket).unwrap_or_else(|_| socket.clone());
        let text = absolute.as_os_str().as_encoded_bytes();
        std::fs::write(&recorded, [text, b"\n"].concat()).map_err(|source| ServeError::Listen {
            what: format!("{} (its record {})", socket.display(), recorded.display()),
            source,
        })?;
    }
    // The settings file is recorded too: the owner's `warden diff` and
    // `warden commit` flag a change to it as this daemon's review does.
    if let Some(file) = &cfg.config_file {
        warden_runtime::state::record_daemon_config(&cfg.state_dir, file).map_err(|source| {
            ServeError::Listen {
                what: format!("the record of the settings file {}", file.display()),
                source,
            }
        })?;
    }
    // The directories this daemon lets tokens write are recorded too,
    // before anything is served: the owner's command line holds a
    // secret's program to the rule this daemon does, with these roots
    // (`warden_runtime::daemon_roots`).
    {
        use warden_runtime::daemon_roots::{record, Root, RootKind};
        let mut roots: Vec<Root> = app
            .workspace_roots
            .iter()
            .map(|p| Root {
                kind: RootKind::WorkspaceRoot,
                path: p.clone(),
            })
            .collect();
        roots.extend(
            app.e2b_volumes
                .values()
                .filter(|v| v.writable)
                .map(|v| Root {
                    kind: RootKind::Volume,
                    path: std::fs::canonicalize(&v.path).unwrap_or_else(|_| v.path.clone()),
                }),
        );
        record(&cfg.state_dir, &roots)?;
        // And beside the catalogue: a command line that keeps another
        // state directory but reads the same profiles sees them there. A
        // catalogue's directory not made yet is made (owner-only) for
        // it: profiles written there later name programs these roots
        // must still hold.
        if let Some(config) = app.catalog.config_dir.as_deref() {
            notes.extend(record_beside_catalogue(config, &roots));
        }
    }
    let tcp = match cfg.listen {
        None => None,
        Some(addr) => Some(
            tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|source| ServeError::Listen {
                    what: addr.to_string(),
                    source,
                })?,
        ),
    };
    let tcp_addr = tcp.as_ref().and_then(|t| t.local_addr().ok());
    let e2b = match cfg.e2b {
        None => None,
        Some(addr) => Some(
            tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|source| ServeError::Listen {
                    what: format!("{addr} (--e2b)"),
                    source,
                })?,
        ),
    };
    let e2b_addr = e2b.as_ref().and_then(|t| t.local_addr().ok());
    Ok(Bound {
        app,
        unix,
        tcp,
        e2b,
        bounds: listen::Bounds::for_open_files(open_files),
        timeouts: cfg.timeouts,
        allowed_hosts: cfg.allowed_hosts.clone(),
        listening: Listening {
            socket,
            tcp: tcp_addr,
            e2b: e2b_addr,
            notes,
        },
    })
}

impl Bound {
    /// Serve until `shutdown` resolves. Sandboxes keep running after.
    pub async fn serve(
        self,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> Result<(), ServeError> {
        let router = routes::router(self.app.clone());
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let refill = (!self.app.pools.is_empty())
            .then(|| tokio::spawn(pools::refill(self.app.clone(), stop_rx.clone())));
        let sweep = tokio::spawn(retention::sweep(self.app.clone(), stop_rx.clone()));
        let unix_router = router
            .clone()
            .layer(axum::Extension(routes::Transport::Unix));
        // Each listener is served by its own loop and bounds: a crowd on
        // TCP takes no place, and no descriptor, from the owner's socket.
        let (bounds, timeouts) = (self.bounds, self.timeouts);
        // A peer the owner's socket refuses (another user, another user
        // namespace) is recorded as a call refused for its credential.
        let app = self.app.clone();
        let on_refused: listen::OnRefused = Arc::new(move |why: &str, peer| {
            let route = auth::Route {
                method: "*",
                path: "(the owner's socket)",
                scope: None,
                data: false,
            };
            app.record_unauthenticated(denials::Door::OwnerSocket, peer, &route, why);
        });
        let unix = owner_runtime(self.unix, unix_router, stop_rx.clone(), on_refused)?;
        // The API answers loopback, localhost and the owner's names; the
        // E2B door also its sandboxes' `PORT-ID.localhost` hosts.
        let api_hosts = Arc::new(host::Hosts {
            allowed: self.allowed_hosts.clone(),
            localhost_names: false,
        });
        let door_hosts = Arc::new(host::Hosts {
            allowed: self.allowed_hosts.clone(),
            localhost_names: true,
        });
        let tcp = self.tcp.map(|l| {
            let r = router.layer(axum::Extension(routes::Transport::Tcp));
            let serving = listen::serve_tcp(l, r, api_hosts, bounds, timeouts, stop_rx.clone());
            tokio::spawn(serving)
        });
        let e2b = self.e2b.map(|l| {
            let r = e2b::router(self.app.clone());
            let serving = listen::serve_tcp(l, r, door_hosts, bounds, timeouts, stop_rx.clone());
            tokio::spawn(serving)
        });
        shutdown.await;
        let _ = stop_tx.send(true);
        if let Some(r) = refill {
            // Let a sandbox being made finish and enter its pool, so
            // that the drain below sees it.
            let _ = r.await;
            let app = self.app.clone();
            let _ = tokio::task::spawn_blocking(move || pools::drain(&app)).await;
        }
        let _ = sweep.await;
        let mut result = Ok(());
        if let Ok(Err(e)) = unix.await {
            result = Err(ServeError::Serve(e));
        }
        for t in [tcp, e2b].into_iter().flatten() {
            if let Ok(Err(e)) = t.await {
                result = Err(ServeError::Serve(e));
            }
        }
        let _ = std::fs::remove_file(&self.listening.socket);
        let _ = std::fs::remove_file(
            self.app
                .state_dir
                .join(warden_runtime::state::DAEMON_SOCKET),
        );
        result
    }
}

/// Threads of the owner's runtime that run its requests.
const OWNER_WORKERS: usize = 2;
/// Threads of the owner's runtime for blocking work (its handlers'
/// `blocking` calls: the runtime's lifecycle, the database).
const OWNER_BLOCKING: usize = 64;

/// Serve the owner's socket from a runtime of its own, on threads of its
/// own: its own workers and its own pool for blocking work, which no
/// token's request ever runs on (tokens are served on TCP, by the main
/// runtime). Whatever a token holds open, the owner's list and create
/// find threads to run on. Resolves with the socket's serving loop's end.
fn owner_runtime(
    listener: std::os::unix::net::UnixListener,
    router: axum::Router,
    stop: tokio::sync::watch::Receiver<bool>,
    on_refused: listen::OnRefused,
) -> Result<tokio::sync::oneshot::Receiver<std::io::Result<()>>, ServeError> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(OWNER_WORKERS)
        .max_blocking_threads(OWNER_BLOCKING)
        .thread_name("warden-owner")
        .enable_all()
        .build()
        .map_err(|source| ServeError::Listen {
            what: "the owner's socket (its runtime)".into(),
            source,
        })?;
    let (done_tx, done_rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("warden-owner-socket".into())
        .spawn(move || {
            let result = rt.block_on(async move {
                let listener = tokio::net::UnixListener::from_std(listener)?;
                listen::serve_unix(listener, router, stop, on_refused).await
            });
            // Work still running (a terminal's last record) gets a moment.
            rt.shutdown_timeout(std::time::Duration::from_secs(2));
            let _ = done_tx.send(result);
        })
        .map_err(|source| ServeError::Listen {
            what: "the owner's socket (its thread)".into(),
            source,
        })?;
    Ok(done_rx)
}

/// `warden serve --config FILE`: what the flags say, in a file (flags given
/// as well win).
#[derive(Debug, Clone, Default, serde::Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    /// The Unix socket to serve on.
    #[serde(default)]
    pub socket: Option<PathBuf>,
    /// Also serve TCP here (tokens required).
    #[serde(default)]
    pub listen: Option<SocketAddr>,
    /// Directories under which token holders may name workspaces.
    #[serde(default)]
    pub workspace_roots: Vec<PathBuf>,
    /// Warm pools: `- {profile: NAME, size: N}`, or autoscaled with
    /// `max: M` (and `window_seconds: S`).
    #[serde(default)]
    pub pools: Vec<settings::PoolSpec>,
    /// Also serve the E2B-compatible API here: an address, or `{listen:
    /// ADDR, volumes: {NAME: {path, writable, tokens}},
    /// interpreter_start_within: PERIOD}` with the volumes the owner
    /// declares (see [`e2b::declared`]) and how long the code
    /// interpreter's server may take to listen.
    #[serde(default)]
    pub e2b: Option<e2b::declared::Section>,
    /// How many terminals, streams, watches and desktop views tokens may
    /// hold open: `{per_token: N, per_daemon: M}`.
    #[serde(default)]
    pub sessions: leases::Bounds,
    /// What a token may have when its own record sets no bound:
    /// `{sandboxes: N, memory: SIZE, disk: SIZE}`.
    #[serde(default)]
    pub quotas: settings::Quotas,
    /// How long stopped sandboxes the daemon made are kept:
    /// `{stopped: 24h, paused: 30d}` (`never` keeps them).
    #[serde(default)]
    pub retention: settings::Retention,
    /// Names the TCP listeners answer to besides loopback addresses,
    /// localhost and the address a connection reached: `[box.lan,
    /// .corp.example]` (see [`host`]).
    #[serde(default)]
    pub allowed_hosts: Vec<host::Allowed>,
}

/// Why the daemon's configuration file was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read the daemon's configuration {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("{path}: pool of {profile}: {message}")]
    Pool {
        path: PathBuf,
        profile: String,
        message: String,
    },
}

impl FileConfig {
    /// Read and check `path`: keys it does not know, values of the wrong
    /// type and pools of no size are refused with where they are.
    pub fn read(path: &Path) -> Result<FileConfig, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let cfg: Option<FileConfig> =
            serde_saphyr::from_str(&text).map_err(|e| ConfigError::Parse {
                path: path.to_path_buf(),
                message: e.to_string(),
            })?;
        let cfg = cfg.unwrap_or_default();
        let bad = |message: String| ConfigError::Parse {
            path: path.to_path_buf(),
            message,
        };
        cfg.sessions.check().map_err(bad)?;
        cfg.quotas.check().map_err(bad)?;
        let mut cfg = cfg;
        if let Some(e) = cfg.e2b.as_mut() {
            e2b::declared::check(&mut e.volumes).map_err(bad)?;
        }
        let mut seen = std::collections::HashSet::new();
        for p in &cfg.pools {
            let bad = |message: String| ConfigError::Pool {
                path: path.to_path_buf(),
                profile: p.profile.clone(),
                message,
            };
            p.check().map_err(bad)?;
            if !seen.insert(p.profile.clone()) {
                return Err(bad("given twice: one pool per profile".into()));
            }
        }
        Ok(cfg)
    }
}
