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
//! the catalogue), which hands them back on its output; the daemon checks
//! each against its hash and keeps them where no sandbox sees them
//! ([`wheels`]). Every sandbox after that is offline for them: its
//! interpreter gets them on its standard input, checks the bytes it got
//! and unpacks those into its own `/tmp`. No sandbox shares a copy with
//! another, so none can delete or replace what another one runs.
//!
//! The server is a command of the sandbox like any other, and is counted
//! like one: it holds a place in its caller's lease ledger
//! ([`crate::leases`], a running command) for as long as it runs; a
//! sandbox has one at most (a new one is started only once the previous
//! one has been ended); and a start that gives up, or whose request goes
//! away, ends the command it started at once. Which command is a
//! sandbox's server is in the daemon's own records (the command's role,
//! [`ExecRole::E2bInterpreter`], written when the door starts it), which
//! outlive the daemon: a restarted daemon adopts the running server with
//! the sandbox's other commands, its place counted again, and knows it as
//! the server. Nothing the sandbox writes or runs says which command is
//! the server: a command of a caller's, whatever its command line, is
//! never taken for it. The sandbox can always make
//! its own server fail (its `/tmp` and its processes are its own), so
//! none of this rests on the server behaving. It runs as `python3 -I`
//! (isolated: neither the workspace nor `PYTHON*` variables reach its
//! `sys.path`), and so do its kernels, so that a module planted in the
//! workspace does not replace theirs; the code the kernels run still runs
//! in the workspace and may import from it.

mod wheels;

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant};

use crate::api::{CreateSandbox, ExecRequest};
use crate::app::App;
use crate::auth::Caller;
use crate::body::Body;
use crate::credential::Credential;
use crate::db::ExecRole;
use crate::error::ApiError;
use crate::execs;
use crate::leases::Kind;
use crate::routes::sandboxes;

/// E2B's name for the template, and warden's for the profile.
pub const TEMPLATE: &str = "code-interpreter-v1";
/// The owner's profile the packages are fetched under.
pub const SETUP_PROFILE: &str = "code-interpreter-v1-setup";
/// Where the interpreter listens inside the sandbox.
pub const PORT: u16 = 49999;
/// The server, run inside the sandbox with `python3 -I -c`.
const SERVER: &str = include_str!("interpreter/server.py");
/// The packages, by file and SHA-256.
const LOCK: &str = include_str!("interpreter/wheels.lock");
/// The server's exit status when the packages it was given are not the
/// pinned ones.
const MISSING: i32 = 3;
/// How long fetching the packages may take.
const SETUP_WITHIN: Duration = Duration::from_secs(900);

/// Why the interpreter could not be made ready.
#[derive(Debug, thiserror::Error)]
pub enum InterpreterError {
    #[error("the code interpreter could not be started in sandbox {sandbox}: {why}")]
    Start { sandbox: String, why: String },
    #[error("the code interpreter's packages are not in the daemon's store and fetching them failed: {0} (the daemon's owner can give the `{SETUP_PROFILE}` profile what PyPI needs here, such as `egress.allow_cidrs`)")]
    Setup(String),
    /// The caller holds no place for the server's command.
    #[error("{}", .0.problem.message)]
    Refused(ApiError),
}

/// One start at a time per sandbox; one fetch at a time per daemon.
static STARTING: LazyLock<Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));
static FETCHING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Whether sandbox `id` was made with the code interpreter's profile.
pub fn serves(app: &App, id: &str) -> bool {
    app.store
        .get(id)
        .ok()
        .and_then(|sb| app.record(&sb).ok().flatten())
        .is_some_and(|row| row.profile.as_deref() == Some(TEMPLATE))
}

/// The interpreter listening in sandbox `id`, started (and its packages
/// fetched) if it is not yet, its command holding a place of
/// `credential`'s.
pub async fn ensure(
    app: &Arc<App>,
    id: &str,
    credential: &Credential,
) -> Result<(), InterpreterError> {
    let gate = {
        let mut t = STARTING.lock().unwrap_or_else(|p| p.into_inner());
        t.entry(id.to_string()).or_default().clone()
    };
    let result = {
        let _one = gate.lock().await;
        ready(app, id, credential).await
    };
    let mut t = STARTING.lock().unwrap_or_else(|p| p.into_inner());
    if Arc::strong_count(&gate) <= 2 {
        t.remove(id);
    }
    result
}

async fn ready(app: &Arc<App>, id: &str, credential: &Credential) -> Result<(), InterpreterError> {
    let start_err = |why: String| InterpreterError::Start {
        sandbox: id.to_string(),
        why,
    };
    if super::inside::listens(app, id, PORT)
        .await
        .map_err(start_err)?
    {
        return Ok(());
    }
    let wheels = match bundle(app).await {
        Ok(b) => b,
        Err(_) => {
            fetch(app).await?;
            bundle(app)
                .await
                .map_err(|e| InterpreterError::Setup(e.to_string()))?
        }
    };
    start(app, id, wheels, credential).await
}

/// The pinned wheels from the daemon's store, checked, as the server
/// reads them.
async fn bundle(app: &Arc<App>) -> Result<String, wheels::WheelsError> {
    let store = wheels::dir(&app.state_dir);
    tokio::task::spawn_blocking(move || wheels::bundle(&store, &wheels::pins(LOCK)))
        .await
        .unwrap_or_else(|e| {
            Err(wheels::WheelsError::Unreadable(format!(
                "a worker failed: {e}"
            )))
        })
}

/// The server's command line: isolated (`-I`), so that neither its working
/// directory (the workspace, which the sandbox writes) nor `PYTHON*`
/// variables put modules before the standard library's and its own.
fn argv(mode: &str) -> Vec<String> {
    ["python3", "-I", "-c", SERVER, mode]
        .iter()
        .map(|s| s.to_string())
        .collect()
}

/// A command of warden's own in sandbox `id`, recorded as any command
/// (the server with its role), `stdin` written to its standard input,
/// holding `lease` while it runs.
async fn run(
    app: &Arc<App>,
    id: &str,
    mode: &str,
    stdin: Option<String>,
    lease: Option<crate::leases::Lease>,
) -> Result<Arc<execs::ExecHandle>, String> {
    let role = (mode == "serve").then_some(ExecRole::E2bInterpreter);
    let (a, sid, mode) = (app.clone(), id.to_string(), mode.to_string());
    tokio::task::spawn_blocking(move || {
        let sb = a.sandbox(&sid).map_err(|e| e.problem.message)?;
        let argv = argv(&mode);
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
            stdin,
            ..Default::default()
        };
        let exec_id = format!("ex-{}", crate::auth::random_id(8));
        let h = execs::start_as(&sb, &exec_id, argv, &req, lease, role)
            .map_err(|e| e.problem.message)?;
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

/// Ends a command when dropped, unless disarmed: a start that fails, or
/// whose request goes away while it waits, leaves nothing running.
struct EndUnlessListening(Option<Arc<execs::ExecHandle>>);

impl Drop for EndUnlessListening {
    fn drop(&mut self) {
        if let Some(h) = self.0.take() {
            if h.ended_now().is_none() {
                // Signalling talks to the supervisor (blocking), and a drop
                // may happen on the async runtime.
                std::thread::spawn(move || end(&h));
            }
        }
    }
}

/// End command `h` (its process group), blocking.
fn end(h: &execs::ExecHandle) {
    let _ = h.signal(nix::sys::signal::Signal::SIGKILL as i32);
}

/// The servers of sandbox `id` that still run, as the daemon's records
/// know them: commands it started as the server (or adopted, with that
/// role, after a restart). One at most, unless a start was cut short.
fn running_servers(app: &App, id: &str) -> Vec<Arc<execs::ExecHandle>> {
    let table = app.execs.lock().unwrap_or_else(|p| p.into_inner());
    table
        .values()
        .filter(|h| {
            h.row.sandbox == id
                && h.row.role == Some(ExecRole::E2bInterpreter)
                && h.ended_now().is_none()
        })
        .cloned()
        .collect()
}

/// End the servers started before in sandbox `id` (by this daemon or one
/// before it), if they still run, and wait (a while) for their end: a
/// sandbox holds one server at most.
async fn end_previous(app: &Arc<App>, id: &str) {
    for h in running_servers(app, id) {
        let signalled = h.clone();
        let _ = tokio::task::spawn_blocking(move || end(&signalled)).await;
        let mut ended = h.ended.clone();
        let _ =
            tokio::time::timeout(Duration::from_secs(10), ended.wait_for(Option::is_some)).await;
    }
}

/// Start the server in sandbox `id`, the `wheels` on its standard input,
/// its command holding a place of `credential`'s, and wait until it
/// listens.
async fn start(
    app: &Arc<App>,
    id: &str,
    wheels: String,
    credential: &Credential,
) -> Result<(), InterpreterError> {
    let start_err = |why: String| InterpreterError::Start {
        sandbox: id.to_string(),
        why,
    };
    end_previous(app, id).await;
    // The place is taken before anything is started, and given back when
    // the command ends (execs::start holds it as long).
    let lease = app
        .leases
        .take(credential, Kind::Command)
        .map_err(InterpreterError::Refused)?;
    let h = run(app, id, "serve", Some(wheels), Some(lease))
        .await
        .map_err(start_err)?;
    let mut guard = EndUnlessListening(Some(h.clone()));
    let within = app.e2b_interpreter_start_within;
    let deadline = Instant::now() + within;
    loop {
        let ended = *h.ended.borrow();
        match ended {
            Some(e) if e.status == MISSING => {
                return Err(start_err(format!(
                    "the packages it was given are not the pinned ones: {}",
                    stderr_tail(&h)
                )))
            }
            Some(e) => {
                return Err(start_err(format!(
                    "the server exited with status {}: {}",
                    e.status,
                    stderr_tail(&h)
                )))
            }
            None => {}
        }
        if super::inside::listens(app, id, PORT)
            .await
            .map_err(start_err)?
        {
            guard.0 = None;
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(start_err(format!(
                "nothing listened on port {PORT} within {} s",
                within.as_secs()
            )));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Fetch the packages into the profile's cache, in a sandbox of the
/// owner's setup profile made for that alone and removed after.
async fn fetch(app: &Arc<App>) -> Result<(), InterpreterError> {
    let _one = FETCHING.lock().await;
    // Another start that waited for the same fetch finds the packages
    // there, and fetches nothing again.
    if bundle(app).await.is_ok() {
        return Ok(());
    }
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

/// Run the fetch in the setup sandbox `id`, and keep what it hands back,
/// checked, in the daemon's store.
async fn fetch_in(app: &Arc<App>, id: &str) -> Result<(), InterpreterError> {
    let h = run(app, id, "setup", None, None)
        .await
        .map_err(InterpreterError::Setup)?;
    let mut ended = h.ended.clone();
    // The status alone is kept: the watch's borrow is not held across the
    // awaits below.
    let done = tokio::time::timeout(SETUP_WITHIN, ended.wait_for(Option::is_some))
        .await
        .map(|r| r.ok().and_then(|e| e.map(|e| e.status)));
    match done {
        Ok(Some(0)) => {}
        Ok(_) => {
            return Err(InterpreterError::Setup(format!(
                "pip download failed: {}",
                stderr_tail(&h)
            )))
        }
        Err(_) => {
            return Err(InterpreterError::Setup(format!(
                "it took longer than {} s",
                SETUP_WITHIN.as_secs()
            )))
        }
    }
    let (out, store) = (h.stdout.clone(), wheels::dir(&app.state_dir));
    tokio::task::spawn_blocking(move || {
        let bytes = std::fs::read(&out).map_err(|e| format!("its output cannot be read: {e}"))?;
        wheels::keep_fetched(&store, &wheels::pins(LOCK), &bytes).map_err(|e| e.to_string())
    })
    .await
    .map_err(|e| InterpreterError::Setup(format!("a worker failed: {e}")))?
    .map_err(InterpreterError::Setup)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_server_runs_isolated_so_the_workspace_is_not_on_its_path() {
        let argv = argv("serve");
        assert_eq!(argv[..3], ["python3", "-I", "-c"]);
        assert_eq!(argv.last().map(String::as_str), Some("serve"));
        // Its kernels are started isolated too, not with `-m` from the
        // workspace.
        assert!(SERVER.contains(r#"[sys.executable, "-I", "-c", boot"#));
        assert!(!SERVER.contains("ipykernel_launcher"));
    }
}
