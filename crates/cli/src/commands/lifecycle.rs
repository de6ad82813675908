//! Long-lived named sandboxes: `create`, `start`, `stop`, `exec`, `ps`,
//! `logs`, and the hidden `__supervise` that `start` runs detached;
//! `pause` and `resume` in [`pause`]. The runtime does the work; this
//! file parses, wires and prints.

pub mod copies;
mod denials;
pub(crate) mod granted;
pub mod pause;

use super::resolution::{self, resolve, RunArgs};
use super::{state_dir, store};
use anyhow::Context;
use clap::Args;
use std::io::IsTerminal;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::time::Duration;
use warden_policy::{parse_duration, Defaults};
use warden_runtime::client::{self, ClientError, Connection};
use warden_runtime::lifecycle;
use warden_runtime::state::{self, Stored};

#[derive(Args)]
pub struct CreateArgs {
    /// The sandbox's name: lowercase letters, digits, '_', '.', '-'
    pub name: String,
    /// Stop the sandbox this long after it starts, e.g. 30m, 2h (whether or
    /// not commands run in it)
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub ttl: Option<Duration>,
    /// Start it at once (as `warden start` would)
    #[arg(long)]
    pub start: bool,
    /// Make it from snapshot SNAP (`warden snapshots ls`): its files, home
    /// and options as they were saved; no other option is taken then
    #[arg(long, value_name = "SNAP")]
    pub from_snapshot: Option<String>,
    #[command(flatten)]
    pub run: Box<RunArgs>,
}

#[derive(Args)]
pub struct ExecArgs {
    /// The sandbox (see `warden ls`); started first if it is not running
    pub name: String,
    /// Start the command and return at once; it runs on until it ends or
    /// the sandbox stops
    #[arg(long, short = 'd')]
    pub detach: bool,
    /// Allocate a pseudo-terminal (the default when stdin is a terminal)
    #[arg(long, short = 't', conflicts_with = "no_tty")]
    pub tty: bool,
    /// Never allocate a pseudo-terminal
    #[arg(long = "no-tty", short = 'T')]
    pub no_tty: bool,
    /// Set a variable for this command (repeatable)
    #[arg(long = "env", short = 'e', value_name = "NAME=VALUE")]
    pub env: Vec<String>,
    /// Working directory inside the sandbox [default: /workspace]
    #[arg(long, value_name = "DIR")]
    pub workdir: Option<String>,
    /// Kill the command after this long, e.g. 30s (exit status 124)
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub timeout: Option<Duration>,
    /// (refused: a sandbox's workspace is chosen at create)
    #[arg(long, short = 'w', hide = true, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// The command, after `--` [default: the one given at create, or the
    /// profile's]
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// The sandbox's directory in the state store, and its stored spec.
pub fn open(name: &str) -> anyhow::Result<(warden_workspace::Store, warden_workspace::Sandbox)> {
    let store = store(state_dir()?)?;
    let sb = store.get(name)?;
    Ok((store, sb))
}

fn control(sb: &warden_workspace::Sandbox) -> PathBuf {
    lifecycle::control(sb)
}

/// The runtime's context for resolving a spec in this process.
fn with_context<T>(
    defaults: &Defaults,
    id: &str,
    f: impl FnOnce(&warden_runtime::resolve::Context<'_>) -> T,
) -> anyhow::Result<T> {
    let catalog = super::catalog();
    let state = state_dir()?;
    let ctx = warden_runtime::resolve::Context {
        catalog: &catalog,
        defaults,
        state_dir: Some(&state),
        otlp: cfg!(feature = "otlp"),
        id,
        // The command line is the owner's own.
        trust: warden_policy::Trust::Owner,
        owner: warden_runtime::lifecycle::Owner::Machine,
    };
    Ok(f(&ctx))
}

/// `warden create`: keep the whole resolved spec; every later start and
/// exec runs under exactly it.
pub fn create(args: CreateArgs, defaults: &Defaults) -> anyhow::Result<u8> {
    let store = store(state_dir()?)?;
    warden_workspace::validate_name("sandbox name", &args.name)?;
    if let Some(snap) = &args.from_snapshot {
        return copies::create_from(&store, &args.name, snap, args.ttl, args.start);
    }
    let mut run = args.run;
    if run.overlay() {
        anyhow::bail!(
            "a named sandbox always sees its workspace through its own layer: leave out --overlay"
        );
    }
    if run.egress_learn_file.is_some() {
        anyhow::bail!(
            "--egress-learn-file is for `warden run`: a named sandbox records what learning mode allowed in its audit log (`warden logs {}`)",
            args.name
        );
    }
    let workspace = run.take_workspace().map(super::absolute).transpose()?;
    let profile_name = run.profile.clone();
    let req = lifecycle::CreateRequest {
        workspace,
        profile_name,
        input: resolution::input(*run)?,
        ttl: args.ttl,
        one_shot: false,
    };
    let (sb, notice) = with_context(defaults, &args.name, |ctx| {
        lifecycle::create(&store, &args.name, req, ctx)
    })??;
    if let Some(n) = notice {
        eprintln!("warden: {n}");
    }
    if args.start {
        start_supervisor(&sb)?;
        println!("{}", sb.name());
    } else {
        println!(
            "created sandbox {} over {}: `warden start {0}`, then `warden exec {0} -- CMD`",
            warden_workspace::printable(sb.name()),
            warden_workspace::printable_path(&sb.meta().workspace)
        );
    }
    Ok(0)
}

/// Start the sandbox's supervisor, detached; returns once the sandbox
/// runs (or says why it cannot).
fn start_supervisor(sb: &warden_workspace::Sandbox) -> anyhow::Result<()> {
    start_supervisor_in(&state_dir()?, sb)
}

fn start_supervisor_in(state: &Path, sb: &warden_workspace::Sandbox) -> anyhow::Result<()> {
    // A token's sandbox runs again only with what the owner grants a
    // token now, whichever door starts it.
    granted::may_run_again(state, sb)?;
    // Its secret programs run as the owner: never one a daemon's token
    // could have written (the spec kept says no more where the profile
    // set them).
    let stored: Option<Stored> = state::read_json(&sb.dir().join(state::STORED)).ok();
    if let Some(stored) = &stored {
        resolution::check_secret_programs(&stored.spec, Some(state), |name| {
            stored.secret_origins.get(name).cloned()
        })
        .with_context(|| format!("sandbox {}: refused", sb.name()))?;
    }
    let exe = std::env::current_exe().context("cannot find warden's own executable")?;
    // A detached supervisor's stderr is its log: what the sandbox runs
    // without is said here, by whoever started it. A refusal with a
    // reason code (a workspace moved or reached through a link) begins
    // with it, as the API's does.
    let started = lifecycle::start(state, sb, &exe).map_err(|e| {
        let at = match &e {
            lifecycle::LifecycleError::SupervisorRefused { refusal, .. } => {
                refused_at(refusal, stored.as_ref(), sb)
            }
            _ => String::new(),
        };
        match e.reason() {
            Some(code) => {
                let name = sb.name().to_string();
                anyhow::Error::new(e).context(format!("sandbox {name}: refused ({code}{at})"))
            }
            None => anyhow::Error::new(e),
        }
    })?;
    for d in started {
        let (layer, lost) = d.split_once(": ").unwrap_or((d.as_str(), ""));
        eprintln!("{}", resolution::degraded_line(layer, lost));
    }
    Ok(())
}

/// Where a supervisor's refusal of `sb`'s start points, as the command
/// line says it: the option by its profile key and, for a secret its
/// profile set, the profile's `FILE:LINE:COL` kept at create (or that it
/// is not known, for a sandbox created before warden kept it), else its
/// flag.
pub(super) fn refused_at(
    refusal: &lifecycle::refusal::StartRefusal,
    stored: Option<&Stored>,
    sb: &warden_workspace::Sandbox,
) -> String {
    let Some(field) = refusal.field else {
        return String::new();
    };
    let key = match (field.profile_key(), &refusal.item) {
        (Some(k), Some(item)) => format!("{k}.{item}"),
        (Some(k), None) => k.to_string(),
        (None, _) => return String::new(),
    };
    let origins = stored.map(|s| &s.secret_origins);
    let place = refusal
        .item
        .as_ref()
        .and_then(|item| origins.and_then(|o| o.get(item)));
    match place {
        Some(place) => format!(", {key} at {place}"),
        None if origins.is_none_or(|o| o.is_empty()) && sb.meta().profile.is_some() => format!(
            ", {key}; where its profile sets it is not known: the sandbox was created before warden kept it"
        ),
        None => match field.flag() {
            Some(flag) => format!(", {key}, {flag}"),
            None => format!(", {key}"),
        },
    }
}

/// Whether the sandbox runs now; a dead supervisor's leftovers are
/// cleaned (and said) on the way.
pub fn running(sb: &warden_workspace::Sandbox) -> bool {
    let l = lifecycle::liveness(sb);
    if let Some(n) = l.notice(sb.name()) {
        eprintln!("warden: {n}");
    }
    l.running()
}

pub fn start(names: &[String]) -> anyhow::Result<u8> {
    for name in names {
        let (_, sb) = open(name)?;
        if running(&sb) {
            eprintln!("warden: sandbox {name} is already running");
            continue;
        }
        start_supervisor(&sb)?;
        println!("{name}");
    }
    Ok(0)
}

pub fn stop(names: &[String], time: Duration) -> anyhow::Result<u8> {
    for name in names {
        let (_, sb) = open(name)?;
        if !running(&sb) {
            eprintln!("warden: sandbox {name} is not running");
            continue;
        }
        // What the stop's merge of its writable volumes held back is in
        // the sandbox's log from here on: said, loudly, once it is done.
        let mark = denials::Mark::now(sb.dir());
        lifecycle::stop_watching(&sb, time, &mut |s| {
            eprintln!("warden: {}", still_stopping(name, s));
        })?;
        for line in mark.held_back() {
            eprintln!("warden: {line}");
        }
        println!("{name}");
    }
    Ok(0)
}

/// What a stop that takes long is doing, for the person waiting.
fn still_stopping(name: &str, s: &lifecycle::Stopping) -> String {
    let doing = match s.phase {
        Some(p) => format!("its supervisor is {}", p.doing()),
        None => "its supervisor has not taken the stop yet".to_string(),
    };
    let written = match s.written {
        Some(n) if n > 0 => format!(", {} written so far", super::units::human(n)),
        _ => String::new(),
    };
    format!(
        "sandbox {name} is still stopping after {} s: {doing}{written}; waiting while it makes progress",
        s.waited.as_secs()
    )
}

pub fn exec(args: ExecArgs) -> anyhow::Result<u8> {
    let (_, sb) = open(&args.name)?;
    if args.workspace.is_some() {
        anyhow::bail!(
            "sandbox {} already has its workspace ({}); leave out --workspace",
            args.name,
            sb.meta().workspace.display()
        );
    }
    let argv = if args.command.is_empty() {
        let stored: Stored = state::read_json(&sb.dir().join(state::STORED))?;
        stored.spec.command
    } else {
        args.command
    };
    let mut env = Vec::new();
    for kv in &args.env {
        match kv.split_once('=') {
            Some((k, v)) if !k.is_empty() => env.push((k.to_string(), v.to_string())),
            _ => anyhow::bail!("--env {kv:?} is not NAME=VALUE"),
        }
    }
    let tty = if args.detach {
        false
    } else {
        match (args.tty, args.no_tty) {
            (true, _) => true,
            (_, true) => false,
            _ => std::io::stdin().is_terminal(),
        }
    };
    let req = warden_runtime::protocol::ExecRequest {
        argv,
        env,
        cwd: args.workdir,
        tty,
        winsize: tty
            .then(|| warden_jail::pty::window_size(std::io::stdin().as_fd()))
            .flatten(),
        // A detached command's output is kept as the daemon's commands'
        // and `run -d`'s are: by the supervisor's relay, within the
        // sandbox's output budget, read with `warden logs --exec`.
        keep_output: args.detach.then(warden_runtime::output::new_exec_id),
    };
    let program = req.argv.first().cloned().unwrap_or_default();
    let mark = denials::Mark::now(sb.dir());
    let (status, message) = exec_in(&sb, req, args.detach, args.timeout)?;
    // What the sandbox was refused meanwhile, with the flag that would
    // allow it, as `warden run` says at its end (a detached command has
    // not ended yet: `warden logs` shows its refusals).
    if !args.detach {
        for line in mark.denials() {
            eprintln!("warden: {line}");
        }
    }
    if let Some(m) = message {
        // The backends say "command not found" without the name; the
        // person needs to know which one (a tool not installed yet, or
        // installed where the sandbox's PATH does not look).
        if status == 127 && !program.is_empty() {
            eprintln!("warden: {program}: {m}");
        } else {
            eprintln!("warden: {m}");
        }
    }
    Ok(status)
}

/// A command refused because sandbox `name`'s supervisor serves as many
/// connections as it may at once (each running command holds one), in
/// one sentence: nothing was started, and what to do. Said alike whether
/// this machine's supervisor refused it or a daemon's (`--host`).
pub fn busy(name: &str) -> anyhow::Error {
    anyhow::anyhow!(
        "sandbox {name} runs as many commands as its supervisor serves at once, so nothing was started: wait for one of them to end or end one (`warden ps {name}` lists them), then run this again"
    )
}

/// Run `req` in the running sandbox `sb`: with the caller's terminal
/// relayed through a new PTY, its own pipes, or (detached) /dev/null.
/// Returns the exit status and a line for the person.
fn exec_in(
    sb: &warden_workspace::Sandbox,
    req: warden_runtime::protocol::ExecRequest,
    detach: bool,
    timeout: Option<Duration>,
) -> anyhow::Result<(u8, Option<String>)> {
    let tty = req.tty;
    let kept = req.keep_output.clone();
    if !tty && !detach {
        client::hold_forwarded_signals()?;
    }
    // A sandbox that answers runs; only one that does not is looked at
    // more closely (dead, cleaned) and started.
    let conn = match Connection::open(&control(sb)) {
        Ok(c) => c,
        Err(ClientError::NotRunning { .. }) => {
            if !running(sb) {
                start_supervisor(sb)?;
            }
            Connection::open(&control(sb)).map_err(|e| pause::exec_refused(sb.name(), e))?
        }
        Err(e) => return Err(pause::exec_refused(sb.name(), e)),
    };
    let mut relay = client::Relay::default();
    let started = if tty {
        conn.exec(req, &[])
    } else if detach {
        let null = std::fs::File::open("/dev/null").context("cannot open /dev/null")?;
        let Some(id) = req.keep_output.clone() else {
            anyhow::bail!("a detached command's output has no name to be kept under");
        };
        let [out, err] = warden_runtime::output::create_kept(sb.dir(), &id, false)
            .with_context(|| format!("cannot keep the output of {id} in {}", sb.dir().display()))?;
        let started = conn.exec(req, &[null.as_fd(), out.as_fd(), err.as_fd()]);
        if started.is_err() {
            for p in warden_runtime::output::kept_paths(sb.dir(), &id) {
                let _ = std::fs::remove_file(p);
            }
        }
        started
    } else {
        // The caller's pipes and files as they are; a terminal through a
        // pipe relayed until the exec ends (see CallerStdio).
        let stdio = client::CallerStdio::new()?;
        let started = conn.exec(req, &stdio.fds());
        relay = stdio.into_relay();
        started
    };
    let running = match started {
        Ok(r) => r,
        Err(ClientError::ExecFailed { status, message }) => {
            return Ok((status.clamp(0, 255) as u8, Some(message)));
        }
        Err(e) => return Err(pause::exec_refused(sb.name(), e)),
    };
    if detach {
        let id = kept.unwrap_or_default();
        println!("{id}");
        return Ok((
            0,
            Some(format!(
                "running detached in sandbox {0} as {id}: `warden logs {0} --exec {id}` shows its output (-f follows it)",
                sb.name()
            )),
        ));
    }
    let exec_id = running.exec;
    let timed_out = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    if let Some(t) = timeout {
        let path = control(sb);
        let flag = timed_out.clone();
        std::thread::spawn(move || {
            std::thread::sleep(t);
            flag.store(true, std::sync::atomic::Ordering::SeqCst);
            if let Ok(c) = Connection::open(&path) {
                let _ = c.signal(exec_id, libc_sigkill());
            }
        });
    }
    let status = if tty {
        client::relay_terminal(running)?
    } else {
        client::wait_forwarding(running, &control(sb), relay)?
    };
    if timed_out.load(std::sync::atomic::Ordering::SeqCst) {
        return Ok((
            124,
            Some("the command reached its --timeout and was killed".into()),
        ));
    }
    Ok((status.status.clamp(0, 255) as u8, None))
}

/// `warden run --through-exec` (hidden; tests and `selftest --through-exec`):
/// the same run, but through a long-lived sandbox's supervisor and spawn
/// protocol: create, start, exec, stop, remove, in a state directory of
/// its own. Proves that what holds for `run` holds for `exec`.
pub fn run_through_exec(args: RunArgs, defaults: &Defaults) -> anyhow::Result<u8> {
    use std::os::unix::fs::DirBuilderExt;
    let id = super::sandbox_id();
    let state = std::env::temp_dir().join(format!("warden-through-exec-{id}"));
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&state)
        .with_context(|| format!("cannot create {}", state.display()))?;
    struct Gone(PathBuf);
    impl Drop for Gone {
        fn drop(&mut self) {
            let _ = warden_workspace::fsutil::remove_tree(&self.0);
        }
    }
    let _gone = Gone(state.clone());
    let store = warden_workspace::Store::open(&state)?;
    let mut args = args;
    let workspace = match args.take_workspace() {
        Some(w) => std::path::absolute(w)?,
        None => {
            let dir = state.join("workspace");
            std::fs::create_dir_all(&dir)?;
            dir
        }
    };
    let mut opts = warden_workspace::CreateOptions::new(workspace);
    opts.layout = warden_runtime::resolve::layout_for_host().0;
    let sb = store.create("x", &opts)?;
    let resolved = resolve(args, defaults, Some(&sb), &id)?;
    let tty = resolved.spec.terminal == warden_policy::Terminal::Pty;
    let argv = resolved.spec.command.clone();
    let stored = Stored {
        spec: resolved.spec,
        sinks: resolved.sinks,
        ttl_ms: None,
        one_shot: false,
        secret_origins: resolved.secret_origins,
    };
    state::write_json(&sb.dir().join(state::STORED), &stored)?;
    start_supervisor_in(&state, &sb)?;
    let req = warden_runtime::protocol::ExecRequest {
        argv,
        env: Vec::new(),
        cwd: None,
        tty,
        winsize: tty
            .then(|| warden_jail::pty::window_size(std::io::stdin().as_fd()))
            .flatten(),
        keep_output: None,
    };
    let result = exec_in(&sb, req, false, None);
    if let Ok(conn) = Connection::open(&control(&sb)) {
        if let Ok(pid) = conn.stop(Duration::from_secs(1)) {
            client::wait_gone(pid, Duration::from_secs(10));
        }
    }
    let (status, message) = result?;
    if let Some(m) = message {
        eprintln!("warden: {m}");
    }
    Ok(status)
}

fn libc_sigkill() -> i32 {
    nix::sys::signal::Signal::SIGKILL as i32
}

pub fn ps(name: &str, json: bool) -> anyhow::Result<u8> {
    let (_, sb) = open(name)?;
    if !running(&sb) {
        anyhow::bail!("sandbox {name} is not running");
    }
    let procs = Connection::open(&control(&sb))?.ps()?;
    if json {
        println!("{}", warden_audit::json::to_string_pretty(&procs)?);
        return Ok(0);
    }
    println!("{:>7} {:>9} {:>5}  COMMAND", "PID", "HOST PID", "EXEC");
    // One process, one line: the command is the sandbox's to set (its
    // argv), so it is escaped, its runs of blanks counted and it is cut
    // to the line's room, never wrapping into a row that names a host PID
    // of its choosing.
    let room = super::rows::room_after(7 + 1 + 9 + 1 + 5 + 2);
    for p in procs {
        println!(
            "{:>7} {:>9} {:>5}  {}",
            p.pid,
            p.host_pid,
            p.exec.map(|e| e.to_string()).unwrap_or_else(|| "-".into()),
            super::rows::cut(&super::rows::one_line(&p.command), room)
        );
    }
    Ok(0)
}

/// `warden logs`: the sandbox's events so far (its audit log), then, with
/// `-f`, each new one as it happens.
pub fn logs(name: &str, follow: bool, json: bool) -> anyhow::Result<u8> {
    let (_, sb) = open(name)?;
    // A `run -d` sandbox is its command: what its name is asked for is the
    // command's output (its events: `--json`, `warden audit show NAME`).
    let one_shot =
        state::read_json::<Stored>(&sb.dir().join(state::STORED)).is_ok_and(|s| s.one_shot);
    if one_shot && !json {
        return exec_output(name, RUN_EXEC, follow);
    }
    let print = |e: &warden_audit::Event| {
        if json {
            if let Ok(line) = warden_audit::json::to_string(e) {
                println!("{line}");
            }
        } else {
            println!("{}", super::rows::one_line(&super::audit::describe(e)));
        }
    };
    // Subscribe first, so that nothing falls between the log and the feed.
    let feed = if follow && running(&sb) {
        Some(Connection::open(&control(&sb))?)
    } else {
        None
    };
    let log = sb.dir().join("audit.jsonl");
    let mut last_ts = 0;
    if let Ok(text) = std::fs::read_to_string(&log) {
        for line in text.lines() {
            if let Ok(e) = serde_json::from_str::<warden_audit::Event>(line) {
                last_ts = e.ts_ms;
                print(&e);
            }
        }
    }
    if let Some(conn) = feed {
        use std::io::Write;
        conn.follow(|e| {
            if e.ts_ms >= last_ts {
                print(&e);
                let _ = std::io::stdout().flush();
            }
            true
        })?;
    }
    Ok(0)
}

/// `warden __supervise NAME`: the supervisor process `start` runs.
pub fn supervise(name: &str) -> anyhow::Result<u8> {
    let state = state_dir()?;
    // How the start went is told on stdout, which `start` reads.
    let ready = warden_runtime::supervisor::take_ready_pipe()
        .context("cannot keep the start-up pipe and detach stdout")?;
    // The OpenTelemetry sink (a cargo feature) and `--net-log`'s lines
    // (into the supervisor's log) are the front door's; the supervisor
    // opens the audit log and the event file itself.
    let mut extra: Vec<warden_runtime::events::Sink> = Vec::new();
    let stored = warden_workspace::Store::open(&state)
        .ok()
        .and_then(|s| s.get(name).ok())
        .and_then(|sb| state::read_json::<Stored>(&sb.dir().join(state::STORED)).ok());
    if stored
        .as_ref()
        .is_some_and(|s| resolution::net_log(&s.spec))
    {
        extra.push(Box::new(resolution::NetLogNotices));
    }
    #[cfg(feature = "otlp")]
    {
        if let Some(url) = stored.and_then(|s| s.sinks.otlp_endpoint) {
            match warden_audit::otlp::OtlpSink::new(&url) {
                Ok(s) => extra.push(Box::new(s)),
                Err(e) => {
                    let _ = nix::unistd::write(&ready, format!("error: {e}\n").as_bytes());
                    return Ok(125);
                }
            }
        }
    }
    let code = warden_runtime::supervisor::run_main(&state, name, extra, ready, &super::catalog());
    Ok(code.clamp(0, 255) as u8)
}

/// `warden run -d`: the run in a named sandbox of its own (`run-ID`),
/// started, its command started detached with its output kept under the
/// name `run` (both streams in one file, in the order written); the
/// sandbox stops when the command ends and stays listed (its events,
/// output and workspace changes) until `rm`.
pub fn run_detached(mut args: RunArgs, defaults: &Defaults) -> anyhow::Result<u8> {
    let store = store(state_dir()?)?;
    let name = format!("run-{}", super::sandbox_id());
    let workspace = args.take_workspace().map(super::absolute).transpose()?;
    let layered = workspace.clone();
    args.given.clear(warden_policy::Field::Overlay);
    args.detach = false;
    let req = lifecycle::CreateRequest {
        workspace,
        profile_name: args.profile.clone(),
        input: resolution::input(args)?,
        ttl: None,
        one_shot: true,
    };
    let (sb, notice) = with_context(defaults, &name, |ctx| {
        lifecycle::create(&store, &name, req, ctx)
    })??;
    if let Some(n) = notice {
        eprintln!("warden: {n}");
    }
    let made = (|| -> anyhow::Result<()> {
        let stored: Stored = state::read_json(&sb.dir().join(state::STORED))?;
        let argv = stored.spec.command.clone();
        start_supervisor(&sb)?;
        // Both streams in one file, in the order written.
        let [out, _] = warden_runtime::output::create_kept(sb.dir(), RUN_EXEC, true)
            .with_context(|| format!("cannot keep the output in {}", sb.dir().display()))?;
        let null = std::fs::File::open("/dev/null").context("cannot open /dev/null")?;
        let req = warden_runtime::protocol::ExecRequest {
            argv,
            env: Vec::new(),
            cwd: None,
            tty: false,
            winsize: None,
            // Within the sandbox's output budget, as the daemon's commands'.
            keep_output: Some(RUN_EXEC.into()),
        };
        match Connection::open(&control(&sb))?.exec(req, &[null.as_fd(), out.as_fd(), out.as_fd()])
        {
            Ok(_) => Ok(()),
            Err(ClientError::ExecFailed { message, .. }) => anyhow::bail!("{message}"),
            Err(e) => Err(e.into()),
        }
    })();
    if let Err(e) = made {
        let _ = lifecycle::remove(&store, &name, true);
        return Err(e);
    }
    println!("{name}");
    eprintln!(
        "warden: running detached in sandbox {name}: `warden logs {name}` shows its output (-f follows it), `warden audit show {name}` its events; `warden stop {name}`, `warden rm {name}`"
    );
    if let Some(ws) = &layered {
        // A detached run's workspace is a named sandbox's: reviewable, its
        // changes kept apart from the directory until committed.
        eprintln!(
            "warden: its changes to {} are kept apart, not written there: `warden diff {name}` shows them, `warden commit {name}` writes them",
            warden_workspace::printable_path(ws)
        );
    }
    Ok(0)
}

/// The name `run -d`'s command keeps its output under.
const RUN_EXEC: &str = "run";

/// `warden logs NAME --exec ID`: what a detached command wrote, kept in
/// the sandbox's state by the supervisor's relay (see
/// `warden_runtime::output`): its standard output on ours, its standard
/// error on ours; with `follow`, what comes next too, until the sandbox
/// stops. Then what was dropped past the output budget, if anything was.
pub fn exec_output(name: &str, id: &str, follow: bool) -> anyhow::Result<u8> {
    use std::io::{Read, Seek, Write};
    let (_, sb) = open(name)?;
    let paths = warden_runtime::output::kept_paths(sb.dir(), id);
    if !warden_runtime::output::names_kept_output(id) || !paths.iter().any(|p| p.exists()) {
        anyhow::bail!(
            "sandbox {name} keeps no output of a command {id:?}: name one that `exec -d` printed (or `run` for `run -d`'s)"
        );
    }
    let mut offsets = [0u64; 2];
    let copy = |offsets: &mut [u64; 2]| -> anyhow::Result<bool> {
        let mut got = false;
        for (i, path) in paths.iter().enumerate() {
            let Ok(mut f) = std::fs::File::open(path) else {
                continue;
            };
            // A file emptied for newer output (past the budget) starts over.
            let len = f.metadata().map(|m| m.len()).unwrap_or(0);
            if len < offsets[i] {
                offsets[i] = len;
            }
            f.seek(std::io::SeekFrom::Start(offsets[i]))?;
            let mut buf = Vec::new();
            f.read_to_end(&mut buf)?;
            if buf.is_empty() {
                continue;
            }
            offsets[i] += buf.len() as u64;
            got = true;
            if i == 0 {
                let mut out = std::io::stdout().lock();
                out.write_all(&buf)?;
                out.flush()?;
            } else {
                std::io::stderr().lock().write_all(&buf)?;
            }
        }
        Ok(got)
    };
    copy(&mut offsets)?;
    while follow && running(&sb) {
        if !copy(&mut offsets)? {
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    copy(&mut offsets)?;
    let cut = warden_runtime::output::OutputCut::read(
        &sb.dir().join(warden_runtime::output::EXECS_DIR),
        id,
    );
    if let Some(line) = dropped_line(cut.stdout_dropped, cut.stderr_dropped) {
        eprintln!("warden: {line}");
    }
    Ok(0)
}

/// The line that says how much of a command's output was dropped past the
/// sandbox's output budget (`None` when nothing was).
pub fn dropped_line(stdout: u64, stderr: u64) -> Option<String> {
    (stdout + stderr > 0).then(|| format!(
        "{stdout} bytes of standard output and {stderr} of standard error were dropped past the sandbox's output budget (a quarter of its --disk)"
    ))
}
