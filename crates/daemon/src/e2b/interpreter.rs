//! E2B's code interpreter (`e2b-code-interpreter`'s `run_code`) in a
//! sandbox of the shipped profile named as E2B's template,
//! `code-interpreter-v1`: its HTTP API on port 49999 inside the sandbox,
//! served by `interpreter/server.py` over IPython kernels, and reached
//! like any port through [`super::ports`]. The server is started in the
//! sandbox by the first request for that port, as E2B's template starts
//! it when its sandbox boots.
//!
//! Its Python packages are pinned by file and hash (`interpreter/
//! wheels.lock`). They are fetched from PyPI once, by a sandbox of the
//! owner's `code-interpreter-v1-setup` profile (the only step that
//! reaches PyPI; the shipped one allows the `pypi` preset, and an owner
//! whose package hosts need more puts their own profile of that name in
//! the catalogue), into the `code-interpreter-v1` profile's cache; every
//! sandbox after that is offline for them. A sandbox never runs them from
//! the shared cache, which its neighbours can write: it checks each file
//! against its hash and unpacks them into its own `/tmp`.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant};

use crate::api::{CreateSandbox, ExecRequest};
use crate::app::App;
use crate::auth::Caller;
use crate::execs;
use crate::routes::{sandboxes, Body};

/// E2B's name for the template, and warden's for the profile.
pub const TEMPLATE: &str = "code-interpreter-v1";
/// The owner's profile the packages are fetched under.
pub const SETUP_PROFILE: &str = "code-interpreter-v1-setup";
/// Where the interpreter listens inside the sandbox.
pub const PORT: u16 = 49999;
/// The server, run inside the sandbox with `python3 -c`.
const SERVER: &str = include_str!("interpreter/server.py");
/// The packages, by file and SHA-256.
const LOCK: &str = include_str!("interpreter/wheels.lock");
/// The server's exit status when the packages are not in the cache.
const MISSING: i32 = 3;
/// How long the server may take to listen (unpacking, the first kernel).
const START_WITHIN: Duration = Duration::from_secs(180);
/// How long fetching the packages may take.
const SETUP_WITHIN: Duration = Duration::from_secs(900);

/// Why the interpreter could not be made ready.
#[derive(Debug, thiserror::Error)]
pub enum InterpreterError {
    #[error("the code interpreter could not be started in sandbox {sandbox}: {why}")]
    Start { sandbox: String, why: String },
    #[error("the code interpreter's packages are not in the {TEMPLATE} profile's cache and fetching them failed: {0} (the daemon's owner can give the `{SETUP_PROFILE}` profile what PyPI needs here, such as `egress.allow_cidrs`)")]
    Setup(String),
}

/// One start at a time per sandbox; one fetch at a time per daemon.
static STARTING: LazyLock<Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));
static FETCHING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Whether sandbox `id` was made with the code interpreter's profile.
pub fn serves(app: &App, id: &str) -> bool {
    app.db()
        .ok()
        .and_then(|db| db.sandbox(id).ok().flatten())
        .is_some_and(|row| row.profile.as_deref() == Some(TEMPLATE))
}

/// The interpreter listening in sandbox `id`, started (and its packages
/// fetched) if it is not yet.
pub async fn ensure(app: &Arc<App>, id: &str) -> Result<(), InterpreterError> {
    let gate = {
        let mut t = STARTING.lock().unwrap_or_else(|p| p.into_inner());
        t.entry(id.to_string()).or_default().clone()
    };
    let result = {
        let _one = gate.lock().await;
        ready(app, id).await
    };
    let mut t = STARTING.lock().unwrap_or_else(|p| p.into_inner());
    if Arc::strong_count(&gate) <= 2 {
        t.remove(id);
    }
    result
}

async fn ready(app: &Arc<App>, id: &str) -> Result<(), InterpreterError> {
    let start_err = |why: String| InterpreterError::Start {
        sandbox: id.to_string(),
        why,
    };
    if super::ports::listens(app, id, PORT)
        .await
        .map_err(start_err)?
    {
        return Ok(());
    }
    match start(app, id).await? {
        Started::Listening => Ok(()),
        Started::Missing => {
            fetch(app).await?;
            if let Started::Listening = start(app, id).await? {
                return Ok(());
            }
            // The profile's cache is seen by a sandbox as it was when the
            // sandbox started: one started before the fetch sees the
            // packages once it starts again (its files are kept).
            restart(app, id).await.map_err(start_err)?;
            match start(app, id).await? {
                Started::Listening => Ok(()),
                Started::Missing => Err(InterpreterError::Setup(
                    "the packages fetched do not match the pinned files".into(),
                )),
            }
        }
    }
}

enum Started {
    Listening,
    Missing,
}

/// A command of warden's own in sandbox `id`, recorded as any command.
async fn run(app: &Arc<App>, id: &str, mode: &str) -> Result<Arc<execs::ExecHandle>, String> {
    let (a, sid, mode) = (app.clone(), id.to_string(), mode.to_string());
    tokio::task::spawn_blocking(move || {
        let sb = a.sandbox(&sid).map_err(|e| e.problem.message)?;
        let argv: Vec<String> = ["python3", "-c", SERVER, &mode]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let mut env = std::collections::BTreeMap::new();
        env.insert("WARDEN_CI_LOCK".to_string(), LOCK.to_string());
        env.insert(
            "WARDEN_CI_CWD".to_string(),
            warden_policy::WORKSPACE_MOUNT.to_string(),
        );
        let req = ExecRequest {
            argv: Some(argv.clone()),
            env: env.into_iter().collect(),
            cwd: Some(warden_policy::WORKSPACE_MOUNT.to_string()),
            ..Default::default()
        };
        let exec_id = format!("ex-{}", crate::auth::random_id(8));
        let h = execs::start(&sb, &exec_id, argv, &req).map_err(|e| e.problem.message)?;
        if let Ok(db) = a.db() {
            let _ = db.insert_exec(&h.row);
        }
        if let Ok(mut t) = a.execs.lock() {
            t.insert(exec_id, h.clone());
        }
        Ok(h)
    })
    .await
    .map_err(|e| format!("a worker failed: {e}"))?
    .inspect(|h| app.watch_end(h.clone()))
}

/// The last lines the command wrote to its standard error.
fn stderr_tail(h: &execs::ExecHandle) -> String {
    let text = std::fs::read(&h.stderr).unwrap_or_default();
    let text = String::from_utf8_lossy(&text);
    let lines: Vec<&str> = text.lines().rev().take(5).collect();
    lines.into_iter().rev().collect::<Vec<_>>().join(" | ")
}

/// Start the server in sandbox `id` and wait until it listens, or says
/// its packages are missing.
async fn start(app: &Arc<App>, id: &str) -> Result<Started, InterpreterError> {
    let start_err = |why: String| InterpreterError::Start {
        sandbox: id.to_string(),
        why,
    };
    let h = run(app, id, "serve").await.map_err(start_err)?;
    let deadline = Instant::now() + START_WITHIN;
    loop {
        let ended = *h.ended.borrow();
        match ended {
            Some(e) if e.status == MISSING => return Ok(Started::Missing),
            Some(e) => {
                return Err(start_err(format!(
                    "the server exited with status {}: {}",
                    e.status,
                    stderr_tail(&h)
                )))
            }
            None => {}
        }
        if super::ports::listens(app, id, PORT)
            .await
            .map_err(start_err)?
        {
            return Ok(Started::Listening);
        }
        if Instant::now() > deadline {
            return Err(start_err(format!(
                "nothing listened on port {PORT} within {} s",
                START_WITHIN.as_secs()
            )));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Fetch the packages into the profile's cache, in a sandbox of the
/// owner's setup profile made for that alone and removed after.
async fn fetch(app: &Arc<App>) -> Result<(), InterpreterError> {
    let _one = FETCHING.lock().await;
    let req = CreateSandbox {
        name: None,
        profile: Some(SETUP_PROFILE.to_string()),
        spec: None,
        workspace: None,
        ttl_seconds: Some(SETUP_WITHIN.as_secs() + 60),
        labels: [("warden.purpose".to_string(), format!("{TEMPLATE} setup"))]
            .into_iter()
            .collect(),
        start: Some(true),
    };
    let made = sandboxes::create(
        axum::extract::State(app.clone()),
        axum::Extension(Caller::Owner),
        Body(req),
    )
    .await
    .map_err(|e| InterpreterError::Setup(e.problem.message))?;
    let id = made.1 .0.id;
    let outcome = fetch_in(app, &id).await;
    let _ = sandboxes::remove(
        axum::extract::State(app.clone()),
        axum::extract::Path(id),
        Ok(axum::extract::Query(sandboxes::RemoveQuery {
            force: Some(true),
        })),
    )
    .await;
    outcome
}

/// Stop sandbox `id` (its files kept) and start it again, as the daemon.
async fn restart(app: &Arc<App>, id: &str) -> Result<(), String> {
    let body = axum::body::Bytes::from_static(b"{\"grace_seconds\": 2}");
    sandboxes::stop(
        axum::extract::State(app.clone()),
        axum::extract::Path(id.to_string()),
        body,
    )
    .await
    .map(|_| ())
    .map_err(|e| e.problem.message)?;
    sandboxes::start(
        axum::extract::State(app.clone()),
        axum::Extension(Caller::Owner),
        axum::extract::Path(id.to_string()),
    )
    .await
    .map(|_| ())
    .map_err(|e| e.problem.message)
}

async fn fetch_in(app: &Arc<App>, id: &str) -> Result<(), InterpreterError> {
    let h = run(app, id, "setup")
        .await
        .map_err(InterpreterError::Setup)?;
    let mut ended = h.ended.clone();
    let done = tokio::time::timeout(SETUP_WITHIN, ended.wait_for(Option::is_some)).await;
    match done {
        Ok(Ok(e)) if e.is_some_and(|e| e.status == 0) => Ok(()),
        Ok(_) => Err(InterpreterError::Setup(format!(
            "pip download failed: {}",
            stderr_tail(&h)
        ))),
        Err(_) => Err(InterpreterError::Setup(format!(
            "it took longer than {} s",
            SETUP_WITHIN.as_secs()
        ))),
    }
}
