//! `warden-daemon`: what `warden serve` and `warden token` run. A binary of
//! its own, beside `warden`, so that the one-shot `warden run` does not
//! carry the HTTP server, the OpenAPI document and SQLite at every start
//! (`warden serve ...` executes `warden-daemon serve ...`). The daemon
//! crate does the work; this file parses, wires and prints.

// The binaries only parse, wire and print: what needs unsafe is the
// libraries' (jail, egress, vm), each block with its reason.
#![forbid(unsafe_code)]

#[path = "../said.rs"]
#[macro_use]
mod said;

#[path = "../logging.rs"]
mod logging;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;
use warden_daemon::auth::{self, Scope};

#[derive(Parser)]
#[command(
    name = "warden",
    // Run as `warden serve|token|mcp` (the warden command starts this
    // binary): its usage lines say so, whatever its file is called.
    bin_name = "warden",
    version,
    about = "warden's daemon: sandboxes over an HTTP API, and its tokens"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve sandboxes over an HTTP API (on an owner-only Unix socket; TCP
    /// with tokens when asked). Sandboxes outlive the daemon
    Serve(ServeArgs),
    /// Make, list and revoke the daemon's API tokens
    #[command(subcommand)]
    Token(TokenCommand),
    /// Serve one MCP client over standard input and output: it makes
    /// sandboxes, runs commands and edits files in them, and its
    /// sandboxes are removed when it goes (unless it kept them)
    Mcp(McpArgs),
}

fn main() -> ExitCode {
    logging::init();
    // The one place this binary reads its test switches (none in a release
    // build), before any sandbox exists.
    warden_policy::TestHooks::from_vars(|name| std::env::var(name).ok()).install();
    // Likewise the host's settings the runtime and the backends honour
    // (the state directory, the host's git configuration for reviews,
    // ...): the libraries read no environment.
    warden_runtime::settings::install_from(|name| std::env::var_os(name));
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Serve(a) => serve(a),
        Command::Token(t) => {
            // Listing only prints: `token list | head` ends quietly.
            warden_jail::stdio::quit_on_closed_stdout();
            token(t)
        }
        Command::Mcp(a) => mcp(a),
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("warden: {}", chain(&e));
            ExitCode::from(125)
        }
    }
}

/// The error and its causes, each said once.
fn chain(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if out.contains(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out
}

fn state_dir() -> anyhow::Result<PathBuf> {
    warden_runtime::state::default_dir().context(
        "warden has no state directory: set WARDEN_STATE_DIR, XDG_STATE_HOME or HOME to an absolute path",
    )
}

/// The `warden` beside this binary: what runs each sandbox's supervisor.
fn warden_exe() -> anyhow::Result<PathBuf> {
    let me = std::env::current_exe().context("cannot find warden-daemon's own executable")?;
    let w = me.with_file_name("warden");
    if !w.is_file() {
        anyhow::bail!(
            "{} is missing: warden-daemon runs sandboxes with the warden installed beside it",
            w.display()
        );
    }
    Ok(w)
}

#[derive(Args)]
struct ServeArgs {
    /// The Unix socket to serve on (owner-only) [default: daemon.sock in
    /// warden's state directory]
    #[arg(long, value_name = "PATH")]
    socket: Option<PathBuf>,
    /// Also serve over TCP here, e.g. 127.0.0.1:7070; every call then needs
    /// a token (`warden token create`)
    #[arg(long, value_name = "ADDR")]
    listen: Option<std::net::SocketAddr>,
    /// Let token holders make sandboxes over workspaces under DIR
    /// (repeatable); without it they get an empty workspace of the
    /// sandbox's own. The owner, on the socket, may name any
    #[arg(long = "workspace-root", value_name = "DIR")]
    workspace_roots: Vec<PathBuf>,
    /// Keep N started sandboxes of PROFILE ready, so that a create of it
    /// (naming no workspace and no id) answers at once; PROFILE=N..M
    /// autoscales between N and M, keeping as many ready as creates came
    /// in the last minute (repeatable)
    #[arg(long = "pool", value_name = "PROFILE=N[..M]")]
    pools: Vec<String>,
    /// Read these settings from a YAML file (keys socket, listen,
    /// workspace_roots, pools: [{profile, size, max, window_seconds}], e2b
    /// (an address, or {listen, volumes}), allowed_hosts); flags given as
    /// well win
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Also serve an E2B-compatible API (control and sandbox API, for the
    /// unmodified `e2b` SDK) here [default: 127.0.0.1:49999]; its
    /// E2B_API_KEY is a warden token
    #[arg(long, value_name = "ADDR", num_args = 0..=1, default_missing_value = "127.0.0.1:49999")]
    e2b: Option<std::net::SocketAddr>,
    /// On TCP, how long a request that no token lets in (health, the
    /// dashboard's login, an unknown route) may take from its head to the
    /// end of its answer [default: 10s]
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    request_timeout: Option<std::time::Duration>,
    /// On TCP, how long an answer may wait on a client that takes none of
    /// it before the connection is closed [default: 30s]
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    write_timeout: Option<std::time::Duration>,
    /// On TCP, how long a request's body may send nothing once its head
    /// is in, with or without a token; past it, a body must keep an
    /// average of 16 KiB a second [default: 10s]
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    body_timeout: Option<std::time::Duration>,
    /// Also answer requests whose Host is NAME on the TCP listeners
    /// (repeatable; `.NAME` for the name and every name under it).
    /// Loopback addresses, localhost and the address a client connected
    /// to are always answered; any other Host is refused (421), so that a
    /// web page cannot reach the daemon under its own name
    #[arg(long = "allow-host", value_name = "NAME", value_parser = parse_allowed_host)]
    allowed_hosts: Vec<warden_daemon::host::Allowed>,
}

/// `--allow-host NAME`.
fn parse_allowed_host(s: &str) -> Result<warden_daemon::host::Allowed, String> {
    warden_daemon::host::Allowed::parse(s).map_err(|e| e.to_string())
}

/// `--pool PROFILE=N` (a fixed size) or `--pool PROFILE=N..M` (autoscaled
/// between N and M by the creates of the last minute).
fn parse_pool(s: &str) -> anyhow::Result<warden_daemon::settings::PoolSpec> {
    let (profile, size) = s.split_once('=').with_context(|| {
        format!("--pool {s}: expected PROFILE=N or PROFILE=MIN..MAX, e.g. --pool python=4")
    })?;
    let number = |n: &str| {
        n.trim().parse::<usize>().ok().with_context(|| {
            format!(
                "--pool {s}: {n:?} is not a number; sizes are from 1 to {}",
                warden_daemon::settings::MAX_POOL_SIZE
            )
        })
    };
    let pool = match size.split_once("..") {
        Some((min, max)) => warden_daemon::settings::PoolSpec {
            max: Some(number(max)?),
            ..warden_daemon::settings::PoolSpec::fixed(profile, number(min)?)
        },
        None => warden_daemon::settings::PoolSpec::fixed(profile, number(size)?),
    };
    pool.check()
        .map_err(|why| anyhow::anyhow!("--pool {s}: {why}"))?;
    Ok(pool)
}

#[derive(Subcommand)]
enum TokenCommand {
    /// Make a token; it is printed once (only its hash is kept)
    Create {
        /// A name to know it by
        name: String,
        /// What it may do (repeatable): sandboxes:read, sandboxes:write,
        /// exec, files, approvals, mcp, desktop:view, desktop:control
        /// (grants desktop:view), admin (everything, tokens included)
        #[arg(long = "scope", value_name = "SCOPE", required = true)]
        scopes: Vec<String>,
        /// Good for this sandbox's data API only (exec, events, ...)
        #[arg(long, value_name = "ID")]
        sandbox: Option<String>,
        /// Sandboxes it may have at once (more are refused with 429)
        #[arg(long, value_name = "N")]
        max_sandboxes: Option<u64>,
        /// Memory limits of its sandboxes together, e.g. 16G
        #[arg(long, value_name = "SIZE", value_parser = warden_policy::parse_size)]
        max_memory: Option<u64>,
        /// Processes and threads of its sandboxes together (by default
        /// room for --max-sandboxes default sandboxes)
        #[arg(long, value_name = "N")]
        max_pids: Option<std::num::NonZeroU64>,
    },
    /// List tokens (never their secrets)
    List {
        #[arg(long)]
        json: bool,
    },
    /// Revoke a token, by id or name
    Revoke { token: String },
}

fn serve(args: ServeArgs) -> anyhow::Result<u8> {
    let defaults = &warden_policy::Defaults::for_host(warden_runtime::resolve::host_facts());
    let state = state_dir()?;
    std::fs::create_dir_all(&state)
        .with_context(|| format!("cannot create warden's state directory {}", state.display()))?;
    let mut file = match &args.config {
        Some(p) => warden_daemon::FileConfig::read(p)?,
        None => warden_daemon::FileConfig::default(),
    };
    let e2b_file = file.e2b.take().unwrap_or_default();
    let mut pools = file.pools;
    for p in &args.pools {
        let p = parse_pool(p)?;
        pools.retain(|q| q.profile != p.profile);
        pools.push(p);
    }
    let catalog = warden_runtime::resolve::catalog(|v| std::env::var_os(v));
    for p in &pools {
        catalog
            .profile(&p.profile)
            .with_context(|| format!("the pool of {} cannot be made", p.profile))?;
    }
    let roots = if args.workspace_roots.is_empty() {
        file.workspace_roots
    } else {
        args.workspace_roots
    };
    let cfg = warden_daemon::Config {
        state_dir: state,
        socket: args.socket.or(file.socket),
        listen: args.listen.or(file.listen),
        exe: warden_exe()?,
        pools,
        e2b: args.e2b.or(e2b_file.listen),
        e2b_volumes: e2b_file.volumes,
        e2b_interpreter_start_within: e2b_file.interpreter_start_within,
        // Absolute: the daemon keeps it from every token's workspace
        // whatever directory it runs in.
        config_file: args
            .config
            .as_ref()
            .map(|p| std::path::absolute(p).unwrap_or_else(|_| p.clone())),
        sessions: file.sessions,
        quotas: file.quotas,
        retention: file.retention,
        allowed_hosts: if args.allowed_hosts.is_empty() {
            file.allowed_hosts
        } else {
            args.allowed_hosts
        },
        timeouts: {
            let d = warden_daemon::deadline::Timeouts::default();
            warden_daemon::deadline::Timeouts {
                unproven: args.request_timeout.unwrap_or(d.unproven),
                write_stall: args.write_timeout.unwrap_or(d.write_stall),
                body_stall: args.body_timeout.unwrap_or(d.body_stall),
            }
        },
        workspace_roots: roots
            .iter()
            .map(|r| {
                std::fs::canonicalize(r)
                    .with_context(|| format!("--workspace-root {}: no such directory", r.display()))
            })
            .collect::<anyhow::Result<_>>()?,
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the daemon's runtime")?;
    let defaults = *defaults;
    let served = rt.block_on(async move {
        let bound = warden_daemon::bind(&cfg, catalog, defaults).await?;
        for n in &bound.listening.notes {
            eprintln!("warden: {n}");
        }
        // The first line (and the E2B one) is read by scripts and the
        // clients' tests: keep their shape.
        eprintln!(
            "warden: serving on {}{}",
            warden_workspace::printable_path(&bound.listening.socket),
            bound
                .listening
                .tcp
                .map(|a| format!(" and http://{a} (tokens required)"))
                .unwrap_or_default()
        );
        if let Some(a) = bound.listening.e2b {
            eprintln!(
                "warden: E2B-compatible API on http://{a} (E2B_API_URL and E2B_SANDBOX_URL; E2B_API_KEY is a warden token)"
            );
        }
        // After the lines above, which scripts read.
        match bound.listening.tcp {
            Some(a) => eprintln!(
                "warden: the dashboard is http://{a}/ (log in with a token: \
                 `warden token create NAME --scope admin` prints one)"
            ),
            None => eprintln!(
                "warden: only the owner's socket listens (`warden --host unix:{} ls` drives it); \
                 `--listen 127.0.0.1:7070` adds the API with tokens and the dashboard",
                warden_workspace::printable_path(&bound.listening.socket)
            ),
        }
        let shutdown = async {
            let mut term =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = async {
                    match term.as_mut() {
                        Some(t) => { t.recv().await; }
                        None => std::future::pending::<()>().await,
                    }
                } => {}
            }
        };
        bound.serve(shutdown).await?;
        eprintln!("warden: the daemon stopped; its sandboxes keep running");
        anyhow::Ok(())
    });
    // Work still on the blocking pool (a review of a large layer, whose
    // client may be long gone) gets a moment, not a wait without end:
    // dropping the runtime would wait for every such task, and a stopped
    // daemon would not exit until the last one had.
    rt.shutdown_timeout(std::time::Duration::from_secs(5));
    served?;
    Ok(0)
}

#[derive(Args)]
struct McpArgs {
    /// The profile of the client's sandboxes (repeatable: the first is
    /// the default, the others the client may name). Without one: warden's
    /// defaults, with no network at all
    #[arg(long = "profile", value_name = "PROFILE")]
    profiles: Vec<String>,
    /// The directory the sandboxes work on, through an overlay (nothing is
    /// written to it until the client commits) [default: the current
    /// directory]. The client may name directories under it
    #[arg(long, value_name = "DIR")]
    workspace: Option<PathBuf>,
}

fn mcp(args: McpArgs) -> anyhow::Result<u8> {
    let defaults = warden_policy::Defaults::for_host(warden_runtime::resolve::host_facts());
    let state = state_dir()?;
    std::fs::create_dir_all(&state)
        .with_context(|| format!("cannot create warden's state directory {}", state.display()))?;
    let catalog = warden_runtime::resolve::catalog(|v| std::env::var_os(v));
    for p in &args.profiles {
        catalog.profile(p).with_context(|| {
            format!("--profile {p}: no such profile (see `warden profile list`)")
        })?;
    }
    let workspace = match &args.workspace {
        Some(w) => w.clone(),
        None => std::env::current_dir().context("cannot read the current directory")?,
    };
    let workspace = std::fs::canonicalize(&workspace)
        .with_context(|| format!("--workspace {}: no such directory", workspace.display()))?;
    if !workspace.is_dir() {
        anyhow::bail!("--workspace {}: not a directory", workspace.display());
    }
    let store = warden_workspace::Store::open(&state)?;
    let db = warden_daemon::open_db(&state)?;
    let app = warden_daemon::App::new(
        state,
        store,
        db,
        warden_exe()?,
        catalog,
        defaults,
        warden_daemon::app::Settings::default(),
    );
    let settings = warden_daemon::mcp::Settings {
        default_profile: args.profiles.first().cloned(),
        profiles: args.profiles,
        default_workspace: Some(workspace.clone()),
        workspace_roots: vec![workspace],
        door: "stdio",
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the MCP server's runtime")?;
    rt.block_on(warden_daemon::mcp::serve_stdio(app, settings))?;
    Ok(0)
}

fn token(cmd: TokenCommand) -> anyhow::Result<u8> {
    let state = state_dir()?;
    std::fs::create_dir_all(&state)
        .with_context(|| format!("cannot create warden's state directory {}", state.display()))?;
    let db = warden_daemon::open_db(&state)?;
    match cmd {
        TokenCommand::Create {
            name,
            scopes,
            sandbox,
            max_sandboxes,
            max_memory,
            max_pids,
        } => {
            let scopes: Vec<Scope> =
                warden_daemon::routes::parse_scopes(&scopes).map_err(|m| anyhow::anyhow!(m))?;
            // A per-sandbox token is bound to the sandbox that has the
            // name now.
            let sandbox = match &sandbox {
                Some(sb) => Some(warden_workspace::Store::open(&state)?.get(sb)?),
                None => None,
            };
            let quotas = auth::TokenQuotas {
                max_sandboxes,
                max_memory,
                max_pids,
            };
            let (row, text) = auth::new_token_with(&name, &scopes, sandbox.as_ref(), quotas);
            db.insert_token(&row)?;
            eprintln!(
                "warden: token {} ({name}) made; it is shown this once:",
                row.id
            );
            println!("{text}");
        }
        TokenCommand::List { json } => {
            // Each token in the state the daemon's check finds it in now
            // (revoked, its maker revoked, its sandbox gone), not only
            // its own revocation.
            let store = warden_workspace::Store::open(&state)?;
            let tokens = warden_daemon::routes::token_infos(&db, &store)?;
            if json {
                println!("{}", warden_audit::json::to_string_pretty(&tokens)?);
            } else {
                // Columns as wide as their widest entry (a name's escapes
                // counted as shown), so that every row lines up.
                let names: Vec<String> = tokens
                    .iter()
                    .map(|t| t.name.escape_debug().to_string())
                    .collect();
                let width = |col: &str, cells: &mut dyn Iterator<Item = usize>| {
                    cells.max().unwrap_or(0).max(col.len())
                };
                let nw = width("NAME", &mut names.iter().map(|n| n.chars().count()));
                let stw = width("STATE", &mut tokens.iter().map(|t| t.state.len()));
                let sw = width(
                    "SANDBOX",
                    &mut tokens
                        .iter()
                        .map(|t| t.sandbox.as_deref().unwrap_or("-").chars().count()),
                );
                println!(
                    "{:<12} {:<nw$} {:<stw$} {:<sw$} SCOPES",
                    "ID", "NAME", "STATE", "SANDBOX"
                );
                for (t, name) in tokens.iter().zip(&names) {
                    println!(
                        "{:<12} {:<nw$} {:<stw$} {:<sw$} {}",
                        t.id,
                        name,
                        t.state,
                        t.sandbox.as_deref().unwrap_or("-"),
                        t.scopes.join(" ")
                    );
                }
            }
        }
        TokenCommand::Revoke { token } => {
            if !db.revoke_token(&token)? {
                anyhow::bail!("no live token {token:?} (see `warden token list`)");
            }
            warden_daemon::revocation::files::forget_revoked(&state, &db);
            println!("revoked {token}");
        }
    }
    Ok(0)
}
