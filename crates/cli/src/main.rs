//! The `warden` command: parses arguments, builds a `SandboxSpec` through
//! `warden-policy`, and hands it to `warden-jail`. No isolation logic lives
//! here.

use anyhow::Context;
use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use warden_audit::{EventSink, Fanout, JsonLinesSink, NullSink};
use warden_policy::{
    parse_duration, parse_size, Defaults, EnvRequest, HostFacts, Request, SecretSpec, Terminal,
    ENV_ALLOWLIST,
};

/// Exit status when warden itself fails (bad input, setup failure).
const EXIT_WARDEN: u8 = 125;

#[derive(Parser)]
#[command(
    name = "warden",
    version,
    about = "Run AI agents and untrusted code in a sandbox on Linux",
    long_about = "warden runs a command in a fresh sandbox: its own user, mount, PID, IPC, UTS, cgroup \
and network namespaces; a root file tree with the host's system directories read-only and no \
home directory; Landlock, seccomp, no capabilities; memory, process and time limits. Nothing of \
the sandbox survives the run.",
    after_help = "Exit status of `warden run`: the command's own; 128+N when it died of signal N; \
124 on --timeout; 137 when killed for exceeding --memory; 126/127 when the command is not \
executable / not found; 125 when warden itself failed (nothing was started)."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a command in a new sandbox and wait until the whole sandbox is gone
    Run(Box<RunArgs>),
    /// Report what isolation this host offers (exit 0 only when all of it)
    Doctor {
        /// Print the report as JSON
        #[arg(long)]
        json: bool,
    },
}

#[derive(Args)]
struct RunArgs {
    /// Mount DIR read-write at /workspace and start there
    #[arg(long, short = 'w', value_name = "DIR")]
    workspace: Option<PathBuf>,
    /// Bind PATH read-only at the same path inside (repeatable)
    #[arg(long, value_name = "PATH")]
    ro: Vec<PathBuf>,
    /// Bind PATH read-write at the same path inside (repeatable)
    #[arg(long, value_name = "PATH")]
    rw: Vec<PathBuf>,
    /// Use a prepared root tree (e.g. debootstrap output) instead of the host's /usr, /etc, ...
    #[arg(long, value_name = "DIR")]
    rootfs: Option<PathBuf>,
    /// Memory limit for the whole sandbox, e.g. 512M, 4G [default: half the host's memory, at most 8G]
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    memory: Option<u64>,
    /// Maximum number of processes and threads [default: 1024]
    #[arg(long, value_name = "N")]
    pids: Option<u64>,
    /// CPU quota in cores, e.g. 0.5 or 2 [default: unlimited]
    #[arg(long, value_name = "CORES")]
    cpus: Option<f64>,
    /// Kill the whole sandbox after this long, e.g. 30s, 10m, 2h (exit status 124)
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    timeout: Option<std::time::Duration>,
    /// Size of the sandbox's /tmp and /dev/shm [default: a quarter of the memory limit, at most 1G]
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    tmp_size: Option<u64>,
    /// Open files per process [default: 4096]
    #[arg(long, value_name = "N")]
    open_files: Option<u64>,
    /// Largest file a process may write [default: 16G]
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    file_size: Option<u64>,
    /// Set a variable in the sandbox (repeatable)
    #[arg(long = "env", short = 'e', value_name = "NAME=VALUE")]
    env: Vec<String>,
    /// Pass a variable from the host's environment (repeatable)
    #[arg(long = "pass-env", value_name = "NAME")]
    pass_env: Vec<String>,
    /// Allocate a pseudo-terminal (the default when stdin is a terminal)
    #[arg(long, short = 't', conflicts_with = "no_tty")]
    tty: bool,
    /// Never allocate a pseudo-terminal
    #[arg(long = "no-tty", short = 'T')]
    no_tty: bool,
    /// The sandbox's hostname
    #[arg(long, value_name = "NAME")]
    hostname: Option<String>,
    /// Allow connections to a name: example.com, .example.com (with
    /// subdomains), example.com:22 (that port; default 443 and 80). Repeatable.
    /// Without any, the sandbox has no network beyond its own loopback
    #[arg(long = "allow-domain", value_name = "NAME[:PORT]")]
    allow_domain: Vec<String>,
    /// Allow plain HTTP (not only TLS) to allowed names
    #[arg(long)]
    allow_http: bool,
    /// Give a name a fixed address, e.g. registry.internal=10.1.2.3 or
    /// registry.internal:10.1.2.3 (the address is then allowed even when it
    /// is not public). Repeatable
    #[arg(long = "add-host", value_name = "NAME=IP")]
    add_host: Vec<String>,
    /// Let allowed names resolve into this non-public range, e.g.
    /// 10.20.0.0/16 (by default only public addresses are connected to; the
    /// host's own addresses never are). Repeatable
    #[arg(long = "allow-cidr", value_name = "CIDR")]
    allow_cidr: Vec<String>,
    /// Let the sandbox reach the service on the host's 127.0.0.1:PORT as
    /// host.warden.internal:PORT (any protocol, through the proxy and its
    /// log), and nothing else on the host. Repeatable
    #[arg(long = "allow-host-port", value_name = "PORT")]
    allow_host_port: Vec<u16>,
    /// Make the sandbox's server on its 127.0.0.1:PORT reachable at the
    /// host's 127.0.0.1:HOSTPORT (like docker run -p); the sandbox's own
    /// connections stay filtered. Repeatable
    #[arg(long, short = 'p', value_name = "HOSTPORT:PORT")]
    publish: Vec<String>,
    /// Ask on the terminal about connections to names no rule allows (allow
    /// once, for this run, or deny); without a terminal they are denied
    #[arg(long)]
    ask: bool,
    /// Print one line per egress decision (allowed or denied) on stderr
    #[arg(long)]
    net_log: bool,
    /// Refuse new connections once this much has gone through the proxy
    /// (both ways), e.g. 500M, 5G
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    egress_quota: Option<u64>,
    /// Close a proxied connection after this long without a byte either way
    /// [default: 10m]
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    egress_idle_timeout: Option<std::time::Duration>,
    /// Give the sandbox a placeholder in variable NAME instead of a secret;
    /// the proxy puts the real value in requests to HOSTS only (HTTPS to
    /// them is terminated with a per-sandbox authority) and takes it out of
    /// responses. The value comes from the host variable NAME, or
    /// NAME=env:VARIABLE@HOSTS, NAME=file:PATH@HOSTS, NAME=cmd:PROGRAM
    /// ARGS@HOSTS (run without a shell). HOSTS are allowed destinations.
    /// Repeatable
    #[arg(long, value_name = "NAME[=SOURCE]@HOST[,HOST...]")]
    secret: Vec<String>,
    /// Substitute this secret in request bodies too, not only in headers
    /// and URLs (bodies are then read whole, up to 16M). Repeatable
    #[arg(long = "secret-in-body", value_name = "NAME")]
    secret_in_body: Vec<String>,
    /// Allow only matching requests to a secret's host once it has rules:
    /// "[METHOD ]HOST[/PATH]", * matching anything, e.g.
    /// "GET api.github.com/repos/acme/*". Others get 403. Repeatable
    #[arg(long = "secret-rule", value_name = "RULE")]
    secret_rule: Vec<String>,
    /// Trust the authorities in this PEM file, besides the system's, for
    /// the servers of secrets' hosts. Repeatable
    #[arg(long = "upstream-ca", value_name = "FILE")]
    upstream_ca: Vec<PathBuf>,
    /// Append one JSON line per event (created, started, exited, ...) to FILE
    #[arg(long, value_name = "FILE")]
    json_events: Option<PathBuf>,
    /// When a layer of isolation cannot be applied, run with what the host
    /// still allows and print what is lost, instead of refusing
    #[arg(long)]
    allow_degraded: bool,
    /// The command to run, after `--`
    #[arg(last = true, required = true, value_name = "CMD")]
    command: Vec<String>,
}

/// The text after `warden run --help`, with the defaults of this host.
fn run_after_help(d: &Defaults) -> String {
    format!(
        "Without limit flags a sandbox still has limits, sized from this host: memory {}M, \
{} processes, /tmp {}M, {} open files, files of at most {}G, no core dumps.

The environment is scrubbed: only {} pass, HOME is /workspace (or /tmp); use --env and \
--pass-env for anything else.

Exit status: the command's own; 128+N when it died of signal N; 124 on --timeout; 137 when \
killed for exceeding --memory; 126/127 when the command is not executable / not found; 125 \
when warden itself failed (nothing was started).",
        d.memory >> 20,
        d.pids,
        d.tmp_size >> 20,
        d.open_files,
        d.file_size >> 30,
        ENV_ALLOWLIST.join(", "),
    )
}

fn host_facts() -> HostFacts {
    let total_memory = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .map(|kb| kb * 1024)
        .unwrap_or(4 << 30);
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get() as u32)
        .unwrap_or(1);
    HostFacts { total_memory, cpus }
}

fn sandbox_id() -> String {
    let mut bytes = [0u8; 6];
    let ok = std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut bytes))
        .is_ok();
    if !ok {
        let n = std::process::id() as u64
            ^ std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(0);
        bytes.copy_from_slice(&n.to_le_bytes()[..6]);
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A path from the command line made absolute against the working
/// directory, lexically (`-w .` works; links are the jail's to judge).
fn absolute(p: PathBuf) -> anyhow::Result<PathBuf> {
    std::path::absolute(&p).with_context(|| format!("cannot make {} absolute", p.display()))
}

fn run(args: RunArgs, defaults: &Defaults) -> anyhow::Result<u8> {
    let terminal = if args.tty || (!args.no_tty && std::io::stdin().is_terminal()) {
        Terminal::Pty
    } else {
        Terminal::Inherit
    };
    let request = Request {
        command: args.command,
        rootfs: args.rootfs.map(absolute).transpose()?,
        workspace: args.workspace.map(absolute).transpose()?,
        ro: args
            .ro
            .into_iter()
            .map(absolute)
            .collect::<Result<_, _>>()?,
        rw: args
            .rw
            .into_iter()
            .map(absolute)
            .collect::<Result<_, _>>()?,
        tmp_size: args.tmp_size,
        memory: args.memory,
        pids: args.pids,
        cpus: args.cpus,
        timeout: args.timeout,
        open_files: args.open_files,
        file_size: args.file_size,
        env: EnvRequest {
            set: args.env,
            pass: args.pass_env,
        },
        terminal,
        hostname: args.hostname,
        allow_degraded: args.allow_degraded,
        allow_domains: args.allow_domain,
        allow_http: args.allow_http,
        add_hosts: args.add_host,
        allow_cidr: args.allow_cidr,
        allow_host_ports: args.allow_host_port,
        publish: args.publish,
        ask: args.ask,
        net_log: args.net_log,
        egress_quota: args.egress_quota,
        egress_idle_timeout: args.egress_idle_timeout,
        secrets: args.secret.clone(),
        secret_in_body: args.secret_in_body,
        secret_rules: args.secret_rule,
        upstream_ca: args
            .upstream_ca
            .into_iter()
            .map(absolute)
            .collect::<Result<_, _>>()?,
    };
    // Variables that hold secrets are never copied, not even here: the
    // supervisor moves them out of reach of the sandbox's init itself.
    let hidden: Vec<String> = args
        .secret
        .iter()
        .filter_map(|s| SecretSpec::parse(s).ok())
        .filter_map(|s| s.source_variable().map(str::to_string))
        .collect();
    let host_env = warden_jail::secrets::host_environment(&hidden);
    let spec = request.resolve(defaults, &host_env)?;

    let mut sinks: Vec<Box<dyn EventSink>> = Vec::new();
    if let Some(path) = &args.json_events {
        sinks.push(Box::new(JsonLinesSink::open(path)?));
    }
    let mut events: Box<dyn EventSink> = if sinks.is_empty() {
        Box::new(NullSink)
    } else {
        Box::new(Fanout(sinks))
    };
    let id = sandbox_id();
    let outcome =
        warden_jail::run(&spec, &id, events.as_mut()).context("the sandbox could not be run")?;
    if let Some(msg) = &outcome.message {
        eprintln!("warden: {msg}");
    }
    Ok(outcome.status.clamp(0, 255) as u8)
}

fn doctor(json: bool, defaults: &Defaults) -> anyhow::Result<u8> {
    let report = warden_jail::host::probe();
    if json {
        let v = serde_json::json!({ "host": report, "defaults": defaults });
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        println!("{:<16} {} ({})", "kernel", report.kernel, report.arch);
        println!(
            "{:<16} {}",
            "mode",
            if report.root {
                "root (the sandbox maps to nobody on the host)"
            } else {
                "rootless (the sandbox maps to your own user)"
            }
        );
        for c in &report.checks {
            println!(
                "{:<16} {:<7} {}",
                c.name,
                if c.ok { "ok" } else { "MISSING" },
                c.detail
            );
            if let Some(lost) = &c.lost {
                println!("{:<16} degraded: {lost}", "");
            }
        }
        println!(
            "{:<16} memory {}M, pids {}, /tmp {}M, open files {}, file size {}G",
            "defaults",
            defaults.memory >> 20,
            defaults.pids,
            defaults.tmp_size >> 20,
            defaults.open_files,
            defaults.file_size >> 30
        );
        println!("{:<16} {}", "environment", ENV_ALLOWLIST.join(" "));
        if report.fully_isolated() {
            println!("full isolation is available");
        } else {
            println!("full isolation is NOT available on this host (see above)");
        }
    }
    Ok(if report.fully_isolated() { 0 } else { 1 })
}

fn main() -> ExitCode {
    let defaults = Defaults::for_host(host_facts());
    let command = Cli::command().mut_subcommand("run", |c| c.after_help(run_after_help(&defaults)));
    let cli = match command
        .try_get_matches()
        .and_then(|m| Cli::from_arg_matches(&m))
    {
        Ok(c) => c,
        Err(e) => {
            let code = match e.kind() {
                clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion => 0,
                _ => EXIT_WARDEN,
            };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    let result = match cli.command {
        Command::Run(args) => run(*args, &defaults),
        Command::Doctor { json } => doctor(json, &defaults),
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            // The cause chain, printed once.
            eprintln!("warden: {e:#}");
            ExitCode::from(EXIT_WARDEN)
        }
    }
}
