//! The `warden` command: parses arguments, builds a `SandboxSpec` through
//! `warden-policy`, and hands it to `warden-jail`. No isolation logic lives
//! here.

mod sandboxes;

use anyhow::Context;
use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};
use std::io::IsTerminal;
use std::os::unix::fs::DirBuilderExt;
use std::path::PathBuf;
use std::process::ExitCode;
use warden_audit::chain::{ChainedLog, Verdict};
use warden_audit::{EventSink, Fanout, JsonLinesSink, NullSink};
use warden_policy::compose::{compose, Catalog, Composed, Overrides, Severity};
use warden_policy::{parse_duration, parse_size, Defaults, HostFacts, SecretSpec, ENV_ALLOWLIST};

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
    /// Create a named sandbox over a project directory (its changes are kept
    /// apart until `warden commit`)
    Create(sandboxes::CreateArgs),
    /// Run a command in a named sandbox: same overlay, same changes so far
    Exec {
        /// The sandbox (see `warden ls`)
        name: String,
        #[command(flatten)]
        run: Box<RunArgs>,
    },
    /// List named sandboxes
    Ls {
        #[arg(long)]
        json: bool,
    },
    /// Remove named sandboxes and their uncommitted changes
    Rm {
        #[arg(required = true)]
        names: Vec<String>,
    },
    /// Show what a sandbox changed against its real workspace
    Diff(sandboxes::DiffArgs),
    /// Apply a sandbox's changes to its real workspace
    Commit(sandboxes::CommitArgs),
    /// Throw away a sandbox's changes (all, or to these paths)
    Discard { name: String, paths: Vec<PathBuf> },
    /// Save a sandbox's changes so far, to come back to with `restore`
    Snapshot(sandboxes::SnapshotArgs),
    /// Put a sandbox's changes back as they were at a snapshot
    Restore { name: String, label: String },
    /// Check and read audit logs
    #[command(subcommand)]
    Audit(AuditCommand),
    /// Run a catalogue of real escape attempts inside real sandboxes on this
    /// host (exit 0 only when every one was contained)
    Selftest {
        /// Only the attacks whose id starts with this (e.g. net, fs.mount)
        #[arg(long, value_name = "PREFIX")]
        only: Option<String>,
        /// Print the results as JSON
        #[arg(long)]
        json: bool,
        /// List the attacks without running them
        #[arg(long)]
        list: bool,
        /// Run the sandboxes with --allow-degraded (on hosts that lack a layer)
        #[arg(long)]
        allow_degraded: bool,
    },
    /// (internal) one probe of `warden selftest`, run inside a sandbox
    #[command(name = "__probe", hide = true)]
    Probe {
        name: String,
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Report what isolation this host offers (exit 0 only when all of it)
    Doctor {
        /// Print the report as JSON
        #[arg(long)]
        json: bool,
    },
    /// Check, show, list and test profiles (one YAML file per agent)
    #[command(subcommand)]
    Profile(ProfileCommand),
    /// List the named groups of domains a profile can allow
    #[command(subcommand)]
    Preset(PresetCommand),
}

#[derive(Subcommand)]
enum ProfileCommand {
    /// Check profile files (or names); exit 0 only when all are valid (warnings allowed)
    Validate {
        #[arg(required = true, value_name = "FILE")]
        files: Vec<String>,
    },
    /// Print a profile fully resolved: after extends, presets and defaults
    Show {
        #[arg(value_name = "NAME|PATH")]
        name: String,
        /// Print JSON instead of YAML
        #[arg(long)]
        json: bool,
        /// Name the origin of each value (file:line:column, preset, default)
        #[arg(long)]
        explain: bool,
    },
    /// List the profiles warden knows (built in and in the user's directory)
    List,
    /// Would this profile allow a destination, and by which rule? (exit 0 when allowed)
    Check {
        #[arg(value_name = "NAME|PATH")]
        name: String,
        #[arg(value_name = "DOMAIN[:PORT]")]
        destination: String,
    },
    /// Print the JSON Schema of profile files
    Schema,
}

#[derive(Subcommand)]
enum PresetCommand {
    /// List the presets (built in and in the user's directory)
    List {
        /// Print the domains of one preset
        #[arg(long, value_name = "NAME")]
        show: Option<String>,
    },
}

#[derive(Subcommand)]
enum AuditCommand {
    /// Check that each log's records are intact, complete and in order
    /// (exit 0 only when all are); names the first bad record
    Verify {
        #[arg(required = true, value_name = "FILE")]
        files: Vec<PathBuf>,
    },
    /// Print a log readably
    Show {
        #[arg(value_name = "FILE")]
        file: PathBuf,
        /// Only what was refused (denied connections, blocked secrets)
        #[arg(long)]
        denied: bool,
        /// Only records since this long ago (e.g. 10m, 2h) or since this
        /// time (e.g. 2026-11-22T10:00:00Z)
        #[arg(long, value_name = "WHEN")]
        since: Option<String>,
        /// Print the records as they are stored (JSON lines)
        #[arg(long)]
        json: bool,
    },
    /// List the audit logs of past runs (in warden's state directory)
    List,
    /// Remove the audit logs of past runs older than a duration (in
    /// warden's state directory; logs chosen with --audit-log are yours)
    Prune {
        /// e.g. 30d, 12h
        #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
        older_than: std::time::Duration,
    },
}

#[derive(Args)]
struct RunArgs {
    /// Start from a profile: a name (see `warden profile list`) or a YAML
    /// file. Flags given here override it; lists add to it
    #[arg(long, short = 'P', value_name = "NAME|PATH")]
    profile: Option<String>,
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
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    allow_http: Option<bool>,
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
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    ask: Option<bool>,
    /// Print one line per egress decision (allowed or denied) on stderr
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    net_log: Option<bool>,
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
    /// Write the run's hash-chained audit log to FILE [default: a new file
    /// in warden's state directory, see `warden audit list`]
    #[arg(long, value_name = "FILE", conflicts_with = "no_audit_log")]
    audit_log: Option<PathBuf>,
    /// Keep no audit log of this run
    #[arg(long)]
    no_audit_log: bool,
    /// Also send every event to this OpenTelemetry collector (OTLP/HTTP,
    /// JSON), e.g. http://127.0.0.1:4318
    #[cfg(feature = "otlp")]
    #[arg(long, value_name = "URL")]
    otlp_endpoint: Option<String>,
    /// See the workspace through a copy-on-write layer: the real directory
    /// is not written; the changes are kept in a sandbox for `warden diff`
    /// and `warden commit`
    #[arg(long)]
    overlay: bool,
    /// When a layer of isolation cannot be applied, run with what the host
    /// still allows and print what is lost, instead of refusing
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    allow_degraded: Option<bool>,
    /// The command to run, after `--` (a profile's `command` when none)
    #[arg(last = true, value_name = "CMD")]
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

/// Where profiles and presets are found, from the caller's environment.
fn catalog() -> Catalog {
    let home = std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from);
    let config_dir = std::env::var_os("XDG_CONFIG_HOME")
        .filter(|c| !c.is_empty())
        .map(PathBuf::from)
        .or_else(|| home.as_ref().map(|h| h.join(".config")))
        .map(|c| c.join("warden"));
    Catalog { home, config_dir }
}

fn run(args: RunArgs, defaults: &Defaults) -> anyhow::Result<u8> {
    run_in(args, defaults, None)
}

/// Run a command: in a fresh sandbox, or (`named`) in the state of a named
/// one, whose overlay it writes into.
fn run_in(mut args: RunArgs, defaults: &Defaults, named: Option<&str>) -> anyhow::Result<u8> {
    let store = if named.is_some() || args.overlay {
        Some(warden_workspace::Store::open(state_dir()?)?)
    } else {
        None
    };
    let existing = match (named, &store) {
        (Some(name), Some(store)) => {
            let sb = store.get(name)?;
            if args.workspace.is_some() {
                anyhow::bail!(
                    "sandbox {name} already has its workspace ({}); leave out --workspace",
                    sb.meta().workspace.display()
                );
            }
            args.workspace = Some(sb.meta().workspace.clone());
            if args.profile.is_none() {
                args.profile = sb.meta().profile.clone();
            }
            if args.audit_log.is_none() && !args.no_audit_log {
                args.audit_log = Some(sb.dir().join("audit.jsonl"));
            }
            Some(sb)
        }
        _ => None,
    };
    let tty = match (args.tty, args.no_tty) {
        (true, _) => Some(true),
        (_, true) => Some(false),
        _ => None,
    };
    let paths = |v: Vec<PathBuf>| v.into_iter().map(absolute).collect::<Result<Vec<_>, _>>();
    let overrides = Overrides {
        command: args.command,
        workspace: args.workspace.map(absolute).transpose()?,
        overlay: (args.overlay || named.is_some()).then_some(true),
        ro: paths(args.ro)?,
        rw: paths(args.rw)?,
        rootfs: args.rootfs.map(absolute).transpose()?,
        memory: args.memory,
        pids: args.pids,
        cpus: args.cpus,
        timeout: args.timeout,
        tmp_size: args.tmp_size,
        open_files: args.open_files,
        file_size: args.file_size,
        env: args.env,
        pass_env: args.pass_env,
        tty,
        hostname: args.hostname,
        allow_domain: args.allow_domain,
        allow_http: args.allow_http,
        add_host: args.add_host,
        allow_cidr: args.allow_cidr,
        allow_host_ports: args.allow_host_port,
        publish: args.publish,
        ask: args.ask,
        net_log: args.net_log,
        egress_quota: args.egress_quota,
        egress_idle_timeout: args.egress_idle_timeout,
        json_events: args.json_events.map(absolute).transpose()?,
        allow_degraded: args.allow_degraded,
    };
    let composed = compose(&catalog(), args.profile.as_deref(), &overrides)?.into_valid()?;
    let mut request = composed.merged.request(std::io::stdin().is_terminal());
    // A --secret replaces the profile's secret of the same name; the other
    // secret flags add to the profile's.
    let name_of = |s: &str| {
        s.split(['=', '@'])
            .next()
            .unwrap_or_default()
            .trim()
            .to_string()
    };
    let given: Vec<String> = args.secret.iter().map(|s| name_of(s)).collect();
    request.secrets.retain(|s| !given.contains(&name_of(s)));
    request.secrets.extend(args.secret.iter().cloned());
    request.secret_in_body.extend(args.secret_in_body);
    request.secret_rules.extend(args.secret_rule);
    for ca in args.upstream_ca {
        request.upstream_ca.push(absolute(ca)?);
    }
    // Where the run is recorded: the command line, else the profile.
    let audit_log = match args.audit_log.clone() {
        Some(p) => Some(absolute(p)?),
        None => request.audit_log.clone(),
    };
    let no_audit_log = args.no_audit_log || (request.no_audit_log && audit_log.is_none());
    #[cfg(feature = "otlp")]
    let otlp_endpoint = args
        .otlp_endpoint
        .clone()
        .or_else(|| request.otlp_endpoint.clone());
    #[cfg(not(feature = "otlp"))]
    if request.otlp_endpoint.is_some() {
        anyhow::bail!("this warden was built without the otlp feature: a profile's otlp_endpoint cannot be honoured");
    }
    let id = sandbox_id();
    // A profile may ask for the overlay too.
    let store = match store {
        None if request.overlay => Some(warden_workspace::Store::open(state_dir()?)?),
        other => other,
    };
    // An overlay run writes into a sandbox of the state store: the named
    // one, or a new one named after the run, kept for review.
    let sandbox = match (existing, &store) {
        (Some(sb), _) => Some(sb),
        (None, Some(store)) if request.overlay => {
            let ws = request
                .workspace
                .clone()
                .context("--overlay needs a --workspace to lay the overlay over")?;
            let mut opts = warden_workspace::CreateOptions::new(ws);
            opts.profile = args.profile.clone();
            opts.layout = sandboxes::layout_for_host();
            Some(store.create(&format!("run-{id}"), &opts)?)
        }
        _ => None,
    };
    let lock = match &sandbox {
        Some(sb) => {
            let lock = sb.lock()?;
            match sb.meta().layout {
                warden_workspace::Layout::Overlay => {
                    request.overlay = true;
                    request.overlay_dirs = Some(warden_policy::OverlayDirs {
                        upper: sb.upper(),
                        work: sb.work(),
                    });
                }
                // No overlayfs here: the sandbox works on its copy.
                warden_workspace::Layout::Copy => {
                    request.overlay = false;
                    request.workspace = Some(sb.upper());
                }
            }
            lock.set_state(warden_workspace::SandboxState::Running)?;
            Some(lock)
        }
        None => None,
    };
    let json_events = request.json_events.clone();
    // Variables that hold secrets are never copied, not even here: the
    // supervisor moves them out of reach of the sandbox's init itself.
    let hidden: Vec<String> = request
        .secrets
        .iter()
        .filter_map(|s| SecretSpec::parse(s).ok())
        .filter_map(|s| s.source_variable().map(str::to_string))
        .collect();
    let host_env = warden_jail::secrets::host_environment(&hidden);
    let spec = match request.resolve(defaults, &host_env) {
        Ok(spec) => spec,
        Err(e) => match warden_policy::validate::locate(&composed.merged, &e).place() {
            Some((file, pos)) => anyhow::bail!("{file}:{pos}: {e}"),
            None => return Err(e.into()),
        },
    };

    let mut sinks: Vec<Box<dyn EventSink>> = Vec::new();
    #[cfg(feature = "otlp")]
    if let Some(url) = &otlp_endpoint {
        sinks.push(Box::new(warden_audit::otlp::OtlpSink::new(url)?));
    }
    if let Some(path) = &json_events {
        sinks.push(Box::new(JsonLinesSink::open(path)?));
    }
    if !no_audit_log {
        let path = match audit_log {
            Some(p) => p,
            None => {
                let dir = audit_dir()?;
                std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(&dir)
                    .with_context(|| {
                        format!(
                            "cannot create the audit log directory {} (pass --audit-log FILE or --no-audit-log)",
                            dir.display()
                        )
                    })?;
                dir.join(format!("{}-{id}.jsonl", audit_stamp()))
            }
        };
        sinks.push(Box::new(ChainedLog::open(&path)?));
    }
    let mut events: Box<dyn EventSink> = if sinks.is_empty() {
        Box::new(NullSink)
    } else {
        Box::new(Fanout(sinks))
    };
    let outcome = warden_jail::run(&spec, &id, events.as_mut());
    if let (Some(lock), Some(sb)) = (lock, &sandbox) {
        let _ = lock.set_state(warden_workspace::SandboxState::Stopped);
        if named.is_none() {
            let changed = sb
                .diff(&warden_workspace::DiffOptions::default())
                .map(|c| c.len())
                .unwrap_or(1);
            if changed == 0 {
                drop(lock);
                if let Some(store) = &store {
                    let _ = store.remove(sb.name());
                }
            } else {
                eprintln!(
                    "warden: {changed} change(s) kept in sandbox {0}, not in {1}: review with `warden diff {0}`, then `warden commit {0}` or `warden rm {0}`",
                    sb.name(),
                    sb.meta().workspace.display()
                );
            }
        }
    }
    let outcome = outcome.context("the sandbox could not be run")?;
    if let Some(msg) = &outcome.message {
        eprintln!("warden: {msg}");
    }
    Ok(outcome.status.clamp(0, 255) as u8)
}

/// warden's state directory, from this process's environment (see
/// `warden_workspace::default_state_dir` for the order).
fn state_dir() -> anyhow::Result<PathBuf> {
    warden_workspace::default_state_dir(
        warden_jail::host::is_root(),
        |var| std::env::var_os(var).filter(|v| !v.is_empty()),
        || {
            nix::unistd::User::from_uid(nix::unistd::getuid())
                .ok()
                .flatten()
                .map(|u| u.dir)
        },
    )
    .context("warden has no state directory: set WARDEN_STATE_DIR, XDG_STATE_HOME or HOME to an absolute path (or pass --audit-log FILE or --no-audit-log)")
}

fn audit_dir() -> anyhow::Result<PathBuf> {
    Ok(state_dir()?.join("audit"))
}

/// UTC time to the second, for file names that sort by time.
fn audit_stamp() -> String {
    let now = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
    now.trim_end_matches('Z')
        .replace([':', '-'], "")
        .replace('T', "-")
}

fn audit(cmd: AuditCommand) -> anyhow::Result<u8> {
    match cmd {
        AuditCommand::Verify { files } => {
            let mut all_ok = true;
            for f in files {
                match warden_audit::chain::verify(&f)? {
                    Verdict::Intact { records, head } => println!(
                        "{}: intact, {records} records{}",
                        f.display(),
                        if head {
                            ", ending where its head file says"
                        } else {
                            " (no head file: a cut end could not be told)"
                        }
                    ),
                    Verdict::Broken { line, why } => {
                        all_ok = false;
                        println!("{}:{line}: TAMPERED: {why}", f.display());
                    }
                }
            }
            Ok(if all_ok { 0 } else { 1 })
        }
        AuditCommand::Show {
            file,
            denied,
            since,
            json,
        } => {
            let since_ms = since.map(|w| parse_since(&w)).transpose()?;
            let text = std::fs::read_to_string(&file)
                .with_context(|| format!("cannot read audit log {}", file.display()))?;
            for (i, line) in text.lines().enumerate() {
                let v: serde_json::Value = serde_json::from_str(line)
                    .with_context(|| format!("{}:{}: not a JSON record", file.display(), i + 1))?;
                if denied && !warden_audit::chain::is_denial(&v) {
                    continue;
                }
                if since_ms.is_some_and(|s| v["ts_ms"].as_u64().unwrap_or(0) < s) {
                    continue;
                }
                if json {
                    println!("{line}");
                } else {
                    println!(
                        "{}",
                        sandboxes::printable(&warden_audit::chain::describe(&v))
                    );
                }
            }
            Ok(0)
        }
        AuditCommand::Prune { older_than } => {
            let dir = audit_dir()?;
            let cutoff = std::time::SystemTime::now()
                .checked_sub(older_than)
                .unwrap_or(std::time::UNIX_EPOCH);
            let mut removed = 0usize;
            let entries = match std::fs::read_dir(&dir) {
                Ok(rd) => rd.filter_map(|e| e.ok()).collect::<Vec<_>>(),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
                Err(e) => return Err(e).with_context(|| format!("cannot list {}", dir.display())),
            };
            for e in entries {
                let p = e.path();
                if p.extension().is_none_or(|x| x != "jsonl") {
                    continue;
                }
                let old = e
                    .metadata()
                    .and_then(|m| m.modified())
                    .is_ok_and(|t| t < cutoff);
                if old {
                    std::fs::remove_file(&p)
                        .with_context(|| format!("cannot remove {}", p.display()))?;
                    let _ = std::fs::remove_file(warden_audit::chain::head_path(&p));
                    removed += 1;
                }
            }
            println!(
                "removed {removed} audit log(s) older than {}",
                humantime::format_duration(older_than)
            );
            Ok(0)
        }
        AuditCommand::List => {
            let dir = audit_dir()?;
            let mut names: Vec<PathBuf> = match std::fs::read_dir(&dir) {
                Ok(rd) => rd
                    .filter_map(|e| e.ok().map(|e| e.path()))
                    .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
                    .collect(),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
                Err(e) => return Err(e).with_context(|| format!("cannot list {}", dir.display())),
            };
            names.sort();
            for p in names {
                let text = std::fs::read_to_string(&p).unwrap_or_default();
                let records: Vec<serde_json::Value> = text
                    .lines()
                    .filter_map(|l| serde_json::from_str(l).ok())
                    .collect();
                let command = records
                    .iter()
                    .find(|r| r["event"] == "created")
                    .and_then(|r| r["command"].as_array())
                    .map(|a| {
                        a.iter()
                            .map(|x| x.as_str().unwrap_or("?"))
                            .collect::<Vec<_>>()
                            .join(" ")
                    })
                    .unwrap_or_default();
                let status = records
                    .iter()
                    .rev()
                    .find(|r| r["event"] == "exited")
                    .map(|r| format!("exit {}", r["status"]))
                    .unwrap_or_else(|| "no exit recorded".into());
                let denied = records
                    .iter()
                    .filter(|r| warden_audit::chain::is_denial(r))
                    .count();
                println!("{}  {status}, {denied} denied  {command}", p.display());
            }
            Ok(0)
        }
    }
}

fn selftest(
    only: Option<&str>,
    json: bool,
    list: bool,
    allow_degraded: bool,
) -> anyhow::Result<u8> {
    if list {
        for (id, category, attack) in warden_selftest::list() {
            println!("{id:<28} {:<44} {attack}", category.label());
        }
        return Ok(0);
    }
    if let Some(o) = only {
        if !warden_selftest::list()
            .iter()
            .any(|(id, c, _)| id.starts_with(o) || c.label() == o)
        {
            anyhow::bail!("--only {o:?} matches no attack; `warden selftest --list` shows them");
        }
    }
    let exe = std::env::current_exe().context("cannot find warden's own executable")?;
    let flags = if allow_degraded {
        vec!["--allow-degraded".to_string()]
    } else {
        Vec::new()
    };
    let weakened = warden_jail::Weakened::from_env();
    for (off, layer) in [
        (weakened.seccomp, "seccomp"),
        (weakened.landlock, "landlock"),
    ] {
        if off {
            eprintln!("warden: TEST BUILD: the {layer} layer is OFF (WARDEN_TEST_WEAKEN) in every sandbox of this selftest");
        }
    }
    let report = warden_jail::host::probe();
    let lab = warden_selftest::Lab::new(exe, flags)?;
    let outcomes = warden_selftest::run(&lab, only, &mut |o| {
        if !json {
            println!(
                "{:<9} {:<28} {} — {}",
                match o.result {
                    "contained" => "contained",
                    "escaped" => "ESCAPED",
                    _ => "skipped",
                },
                o.id,
                o.attack,
                o.detail
            );
        }
    });
    let degraded: Vec<String> = report
        .checks
        .iter()
        .filter(|c| !c.ok)
        .map(|c| format!("{}: {}", c.name, c.detail))
        .collect();
    let escaped = outcomes.iter().filter(|o| o.escaped()).count();
    let skipped = outcomes.iter().filter(|o| o.result == "skipped").count();
    let contained = outcomes.len() - escaped - skipped;
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "attacks": outcomes,
                "contained": contained,
                "escaped": escaped,
                "skipped": skipped,
                "degraded": degraded,
            }))?
        );
    } else {
        println!();
        println!(
            "{:<44} {:>9} {:>8} {:>8}",
            "category", "contained", "escaped", "skipped"
        );
        let mut seen = Vec::new();
        for o in &outcomes {
            if seen.contains(&o.category) {
                continue;
            }
            seen.push(o.category);
            let of = |r: &str| {
                outcomes
                    .iter()
                    .filter(|x| x.category == o.category && x.result == r)
                    .count()
            };
            println!(
                "{:<44} {:>9} {:>8} {:>8}",
                o.category.label(),
                of("contained"),
                of("escaped"),
                of("skipped")
            );
        }
        println!(
            "{:<44} {:>9} {:>8} {:>8}",
            "all", contained, escaped, skipped
        );
        for d in &degraded {
            println!("degraded on this host: {d}");
        }
        if escaped == 0 {
            println!("every attack was contained");
        } else {
            println!("{escaped} attack(s) ESCAPED");
        }
    }
    Ok(if escaped == 0 { 0 } else { 1 })
}

/// `--since`: a duration before now, or a point in time.
fn parse_since(w: &str) -> anyhow::Result<u64> {
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    if let Ok(d) = parse_duration(w) {
        return Ok(now_ms.saturating_sub(d.as_millis() as u64));
    }
    let t = humantime::parse_rfc3339_weak(w).map_err(|_| {
        anyhow::anyhow!(
            "--since {w:?} is neither a duration (10m, 2h) nor a time (2026-11-22T10:00:00Z)"
        )
    })?;
    Ok(t.duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0))
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

/// Exit status of `warden profile` and `warden preset` when the answer is
/// no (invalid, not allowed) or the profile cannot be read.
const EXIT_NO: u8 = 1;

/// Append a line to a command's output.
macro_rules! outln {
    ($out:expr, $($arg:tt)*) => {{
        use std::fmt::Write as _;
        let _ = writeln!($out, $($arg)*);
    }};
}

/// Append text to a command's output.
macro_rules! outp {
    ($out:expr, $($arg:tt)*) => {{
        use std::fmt::Write as _;
        let _ = write!($out, $($arg)*);
    }};
}

/// Write a command's output to stdout; a reader that went away (`| head`)
/// is not an error.
fn emit(text: &str) {
    use std::io::Write;
    let _ = std::io::stdout().lock().write_all(text.as_bytes());
}

fn profile(cmd: ProfileCommand, defaults: &Defaults) -> anyhow::Result<u8> {
    let mut out = String::new();
    let code = profile_to(cmd, defaults, &mut out);
    emit(&out);
    code
}

fn profile_to(cmd: ProfileCommand, defaults: &Defaults, out: &mut String) -> anyhow::Result<u8> {
    let catalog = catalog();
    let load = |name: &str| -> anyhow::Result<Composed> {
        Ok(compose(&catalog, Some(name), &Overrides::default())?.into_valid()?)
    };
    match cmd {
        ProfileCommand::Validate { files } => {
            let mut ok = true;
            for file in &files {
                match compose(&catalog, Some(file), &Overrides::default()) {
                    Ok(mut c) => {
                        warden_policy::validate::validate(&mut c, defaults);
                        for d in &c.diagnostics {
                            eprintln!("{d}");
                        }
                        if c.has_errors() {
                            ok = false;
                        } else {
                            let warnings = c
                                .diagnostics
                                .iter()
                                .filter(|d| d.severity == Severity::Warning)
                                .count();
                            match warnings {
                                0 => outln!(out, "{file}: valid"),
                                n => outln!(out, "{file}: valid, {n} warning(s)"),
                            }
                        }
                    }
                    Err(e) => {
                        eprintln!("{file}: error: {:#}", anyhow::Error::from(e));
                        ok = false;
                    }
                }
            }
            Ok(if ok { 0 } else { EXIT_NO })
        }
        ProfileCommand::Show {
            name,
            json,
            explain,
        } => {
            let c = load(&name)?;
            if explain {
                let full = c.merged.with_defaults(defaults);
                let entries = full.entries();
                if json {
                    let v: Vec<serde_json::Value> = entries
                        .iter()
                        .map(|(k, v, o)| {
                            serde_json::json!({ "field": k, "value": v, "origin": o.to_string() })
                        })
                        .collect();
                    outln!(out, "{}", serde_json::to_string_pretty(&v)?);
                } else {
                    let width = entries.iter().map(|(k, _, _)| k.len()).max().unwrap_or(0);
                    for (k, v, o) in entries {
                        outln!(out, "{k:<width$}  {v}  # {o}");
                    }
                }
            } else if json {
                outln!(out, "{}", serde_json::to_string_pretty(&c.show(defaults))?);
            } else {
                outp!(out, "{}", serde_saphyr::to_string(&c.show(defaults))?);
            }
            Ok(0)
        }
        ProfileCommand::List => {
            for (name, label) in catalog.profile_names() {
                let description = compose(&catalog, Some(&name), &Overrides::default())
                    .ok()
                    .and_then(|c| c.description)
                    .unwrap_or_default();
                outln!(out, "{name:<16} {description}  [{label}]");
            }
            Ok(0)
        }
        ProfileCommand::Check { name, destination } => {
            let c = load(&name)?;
            match warden_policy::validate::check(&c.merged, &destination)? {
                Some((rule, origin)) => {
                    outln!(
                        out,
                        "allowed: {destination} by `{}` ({origin})",
                        rule.source
                    );
                    Ok(0)
                }
                None => {
                    outln!(out, "denied: no rule of {name} allows {destination}");
                    Ok(EXIT_NO)
                }
            }
        }
        ProfileCommand::Schema => {
            outp!(out, "{}", warden_policy::profile::profile_schema());
            Ok(0)
        }
    }
}

fn preset_list(show: Option<&str>) -> anyhow::Result<u8> {
    let mut out = String::new();
    let code = preset_list_to(show, &mut out);
    emit(&out);
    code
}

fn preset_list_to(show: Option<&str>, out: &mut String) -> anyhow::Result<u8> {
    let catalog = catalog();
    if let Some(name) = show {
        let (src, preset) = warden_policy::compose::load_preset(&catalog, name)?;
        if let Some(d) = &preset.description {
            outln!(out, "# {} [{}]", d.value, src.label);
        }
        for d in &preset.domains {
            outln!(out, "{}", d.value);
        }
        return Ok(0);
    }
    for (name, label) in catalog.preset_names() {
        let description = warden_policy::compose::load_preset(&catalog, &name)
            .ok()
            .and_then(|(_, p)| p.description.map(|d| d.value))
            .unwrap_or_default();
        outln!(out, "{name:<16} {description}  [{label}]");
    }
    Ok(0)
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
        Command::Audit(cmd) => audit(cmd),
        Command::Exec { name, run } => run_in(*run, &defaults, Some(&name)),
        Command::Create(a) => state_dir()
            .and_then(sandboxes::store)
            .and_then(|s| sandboxes::create(&s, a)),
        Command::Ls { json } => state_dir()
            .and_then(sandboxes::store)
            .and_then(|s| sandboxes::ls(&s, json)),
        Command::Rm { names } => state_dir()
            .and_then(sandboxes::store)
            .and_then(|s| sandboxes::rm(&s, &names)),
        Command::Diff(a) => state_dir()
            .and_then(sandboxes::store)
            .and_then(|s| sandboxes::diff(&s, a)),
        Command::Commit(a) => state_dir()
            .and_then(sandboxes::store)
            .and_then(|s| sandboxes::commit(&s, a)),
        Command::Discard { name, paths } => state_dir()
            .and_then(sandboxes::store)
            .and_then(|s| sandboxes::discard(&s, &name, &paths)),
        Command::Snapshot(a) => state_dir()
            .and_then(sandboxes::store)
            .and_then(|s| sandboxes::snapshot(&s, a)),
        Command::Restore { name, label } => state_dir()
            .and_then(sandboxes::store)
            .and_then(|s| sandboxes::restore(&s, &name, &label)),
        Command::Selftest {
            only,
            json,
            list,
            allow_degraded,
        } => selftest(only.as_deref(), json, list, allow_degraded),
        Command::Probe { name, args } => {
            let f = warden_jail::probes::run(&name, &args);
            println!(
                "{}{}",
                warden_selftest::RESULT_PREFIX,
                serde_json::json!({ "contained": f.contained, "detail": f.detail })
            );
            Ok(0)
        }
        Command::Profile(cmd) => profile(cmd, &defaults),
        Command::Preset(PresetCommand::List { show }) => preset_list(show.as_deref()),
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
