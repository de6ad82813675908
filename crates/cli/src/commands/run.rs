//! `warden run`, and the resolution of run's options into a spec that
//! `warden create` shares.

use super::{absolute, catalog, sandbox_id, state_dir};
use anyhow::Context as _;
use clap::Args;
use std::io::IsTerminal;
use std::path::PathBuf;
use warden_audit::chain::DeferredLog;
use warden_audit::JsonLinesSink;
use warden_policy::compose::Overrides;
use warden_policy::{parse_duration, parse_size, Defaults, ENV_ALLOWLIST};
use warden_runtime::resolve::{Context, ProfileSource, Resolved};

#[derive(Args)]
pub struct RunArgs {
    /// Start from a profile: a name (see `warden profile list`) or a YAML
    /// file. Flags given here override it; lists add to it
    #[arg(long, short = 'P', value_name = "NAME|PATH")]
    pub profile: Option<String>,
    /// Mount DIR read-write at /workspace and start there
    #[arg(long, short = 'w', value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// Bind PATH read-only at the same path inside (repeatable)
    #[arg(long, value_name = "PATH")]
    pub ro: Vec<PathBuf>,
    /// Bind PATH read-write at the same path inside (repeatable)
    #[arg(long, value_name = "PATH")]
    pub rw: Vec<PathBuf>,
    /// Share a package cache (pip, npm, cargo, go) with the other sandboxes
    /// of the profile: a directory of warden's state, never the host's own
    /// (repeatable)
    #[arg(long = "cache", value_name = "NAME")]
    pub cache: Vec<String>,
    /// Use a prepared root tree (e.g. debootstrap output) instead of the host's /usr, /etc, ...
    #[arg(long, value_name = "DIR")]
    pub rootfs: Option<PathBuf>,
    /// Memory limit for the whole sandbox, e.g. 512M, 4G [default: half the host's memory, at most 8G]
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub memory: Option<u64>,
    /// Maximum number of processes and threads [default: 1024]
    #[arg(long, value_name = "N")]
    pub pids: Option<u64>,
    /// CPU quota in cores, e.g. 0.5 or 2 [default: unlimited]
    #[arg(long, value_name = "CORES")]
    pub cpus: Option<f64>,
    /// Kill the whole sandbox after this long, e.g. 30s, 10m, 2h (exit status 124)
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub timeout: Option<std::time::Duration>,
    /// Size of the sandbox's /tmp and /dev/shm [default: a quarter of the memory limit, at most 1G]
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub tmp_size: Option<u64>,
    /// Open files per process [default: 4096]
    #[arg(long, value_name = "N")]
    pub open_files: Option<u64>,
    /// Largest file a process may write [default: 16G]
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub file_size: Option<u64>,
    /// Size limit of a reviewable workspace's changes, held in memory while the sandbox runs; a write past it fails with ENOSPC [default: half the memory limit]
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub disk: Option<u64>,
    /// Set a variable in the sandbox (repeatable)
    #[arg(long = "env", short = 'e', value_name = "NAME=VALUE")]
    pub env: Vec<String>,
    /// Pass a variable from the host's environment (repeatable)
    #[arg(long = "pass-env", value_name = "NAME")]
    pub pass_env: Vec<String>,
    /// Allocate a pseudo-terminal (the default when stdin is a terminal)
    #[arg(long, short = 't', conflicts_with = "no_tty")]
    pub tty: bool,
    /// Never allocate a pseudo-terminal
    #[arg(long = "no-tty", short = 'T')]
    pub no_tty: bool,
    /// The sandbox's hostname
    #[arg(long, value_name = "NAME")]
    pub hostname: Option<String>,
    /// What isolates the sandbox: `process` (namespaces, Landlock,
    /// seccomp; the default) or `vm` (a microVM with its own kernel, see
    /// `warden vm kernel`)
    #[arg(long, value_name = "process|vm")]
    pub isolation: Option<String>,
    /// Allow connections to a name: example.com, .example.com (with
    /// subdomains), example.com:22 (that port; default 443 and 80). Repeatable.
    /// Without any, the sandbox has no network beyond its own loopback
    #[arg(long = "allow-domain", value_name = "NAME[:PORT]")]
    pub allow_domain: Vec<String>,
    /// Allow the names of a preset (see `warden preset list`), as a
    /// profile's `egress.presets` does. Repeatable
    #[arg(long = "preset", value_name = "NAME")]
    pub preset: Vec<String>,
    /// Allow plain HTTP (not only TLS) to allowed names
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub allow_http: Option<bool>,
    /// Give a name a fixed address, e.g. registry.internal=10.1.2.3 or
    /// registry.internal:10.1.2.3 (the address is then allowed even when it
    /// is not public). Repeatable
    #[arg(long = "add-host", value_name = "NAME=IP")]
    pub add_host: Vec<String>,
    /// Let allowed names resolve into this non-public range, e.g.
    /// 10.20.0.0/16 (by default only public addresses are connected to; the
    /// host's own addresses never are). Repeatable
    #[arg(long = "allow-cidr", value_name = "CIDR")]
    pub allow_cidr: Vec<String>,
    /// Let the sandbox reach the service on the host's 127.0.0.1:PORT as
    /// host.warden.internal:PORT (any protocol, through the proxy and its
    /// log), and nothing else on the host. Repeatable
    #[arg(long = "allow-host-port", value_name = "PORT")]
    pub allow_host_port: Vec<u16>,
    /// Make the sandbox's server on its 127.0.0.1:PORT reachable at the
    /// host's 127.0.0.1:HOSTPORT (like docker run -p); the sandbox's own
    /// connections stay filtered. Repeatable
    #[arg(long, short = 'p', value_name = "HOSTPORT:PORT")]
    pub publish: Vec<String>,
    /// Ask on the terminal about connections to names no rule allows (allow
    /// once, for this run, or deny); without a terminal they are denied
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub ask: Option<bool>,
    /// Where --ask keeps the names answered "always": `project` (a grants
    /// file for this workspace in warden's state, read by its later runs)
    /// or `profile` (added to the profile file in use, its layout and
    /// comments kept)
    #[arg(long, value_name = "WHERE", value_parser = ["project", "profile"])]
    pub ask_save: Option<String>,
    /// Learning mode: allow every name no rule allows (never the host's
    /// own services), mark each such decision, and print at exit the
    /// profile lines the run needed; refused with --secret and --ask
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub egress_learn: Option<bool>,
    /// With --egress-learn: also write the profile lines the run needed
    /// to FILE (added to what it holds from earlier learning runs), a
    /// profile another can take with `extends:` or run with --profile
    #[arg(long, value_name = "FILE")]
    pub egress_learn_file: Option<PathBuf>,
    /// Print one line per egress decision (allowed or denied) on stderr
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub net_log: Option<bool>,
    /// Refuse new connections once this much has gone through the proxy
    /// (both ways), e.g. 500M, 5G
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub egress_quota: Option<u64>,
    /// Close a proxied connection after this long without a byte either way
    /// [default: 10m]
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub egress_idle_timeout: Option<std::time::Duration>,
    /// Give the sandbox a placeholder in variable NAME instead of a secret;
    /// the proxy puts the real value in requests to HOSTS only (HTTPS to
    /// them is terminated with a per-sandbox authority) and takes it out of
    /// responses. The value comes from the host variable NAME, or
    /// NAME=env:VARIABLE@HOSTS, NAME=file:PATH@HOSTS, NAME=cmd:PROGRAM
    /// ARGS@HOSTS (run without a shell). HOSTS are allowed destinations.
    /// Repeatable
    #[arg(long, value_name = "NAME[=SOURCE]@HOST[,HOST...]")]
    pub secret: Vec<String>,
    /// Substitute this secret in request bodies too, not only in headers
    /// and URLs (bodies are then read whole, up to 16M). Repeatable
    #[arg(long = "secret-in-body", value_name = "NAME")]
    pub secret_in_body: Vec<String>,
    /// Allow only matching requests to a secret's host once it has rules:
    /// "[METHOD ]HOST[/PATH]", * matching anything, e.g.
    /// "GET api.github.com/repos/acme/*". Others get 403. Repeatable
    #[arg(long = "secret-rule", value_name = "RULE")]
    pub secret_rule: Vec<String>,
    /// Trust the authorities in this PEM file, besides the system's, for
    /// the servers of secrets' hosts. Repeatable
    #[arg(long = "upstream-ca", value_name = "FILE")]
    pub upstream_ca: Vec<PathBuf>,
    /// Append one JSON line per event (created, started, exited, ...) to
    /// FILE; `-` is standard output
    #[arg(long, value_name = "FILE")]
    pub json_events: Option<PathBuf>,
    /// Write the run's hash-chained audit log to FILE [default: a new file
    /// in warden's state directory, see `warden audit list`]
    #[arg(long, value_name = "FILE", conflicts_with = "no_audit_log")]
    pub audit_log: Option<PathBuf>,
    /// Keep no audit log of this run
    #[arg(long)]
    pub no_audit_log: bool,
    /// Also send every event to this OpenTelemetry collector (OTLP/HTTP,
    /// JSON), e.g. http://127.0.0.1:4318
    #[cfg(feature = "otlp")]
    #[arg(long, value_name = "URL")]
    pub otlp_endpoint: Option<String>,
    /// See the workspace through a copy-on-write layer: the real directory
    /// is not written; the changes are kept in a sandbox for `warden diff`
    /// and `warden commit`
    #[arg(long)]
    pub overlay: bool,
    /// When a layer of isolation cannot be applied, run with what the host
    /// still allows and print what is lost, instead of refusing
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub allow_degraded: Option<bool>,
    /// Start the command in a sandbox of its own and return at once; the
    /// sandbox stops when the command ends (see `warden ls`, `logs`, `rm`)
    #[arg(long, short = 'd', conflicts_with_all = ["tty", "ask"])]
    pub detach: bool,
    /// (tests) run through a long-lived sandbox's supervisor and exec
    #[arg(long, hide = true)]
    pub through_exec: bool,
    /// The command to run, after `--` (a profile's `command` when none)
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// The text after `warden run --help`, with the defaults of this host.
pub fn run_after_help(d: &Defaults) -> String {
    format!(
        "Without limit flags a sandbox still has limits, sized from this host: memory {}M, \
{} processes, /tmp {}M, {} open files, files of at most {}G, no core dumps.

The environment is scrubbed: only {} pass; use --env and --pass-env for anything else. \
HOME is the sandbox's own /home/sandbox (a tmpfs; a named sandbox keeps it), never the \
workspace.

Exit status: the command's own; 128+N when it died of signal N; 124 on --timeout; 137 when \
killed for exceeding --memory; 126/127 when the command is not executable / not found; 125 \
when warden itself failed (nothing was started, or a record of the run could not be written \
to the audit log or --json-events).",
        d.memory >> 20,
        d.pids,
        d.tmp_size >> 20,
        d.open_files,
        d.file_size >> 30,
        ENV_ALLOWLIST.join(", "),
    )
}

/// What the command line asks for, as the runtime's resolution takes it
/// (paths made absolute against the working directory).
pub fn input(args: RunArgs) -> anyhow::Result<warden_runtime::resolve::Input> {
    let ask_save = args.ask_save.clone();
    let tty = match (args.tty, args.no_tty) {
        (true, _) => Some(true),
        (_, true) => Some(false),
        _ => None,
    };
    let paths = |v: Vec<PathBuf>| v.into_iter().map(absolute).collect::<Result<Vec<_>, _>>();
    let overrides = Overrides {
        command: args.command,
        workspace: args.workspace.map(absolute).transpose()?,
        overlay: args.overlay.then_some(true),
        ro: paths(args.ro)?,
        rw: paths(args.rw)?,
        caches: args.cache,
        rootfs: args.rootfs.map(absolute).transpose()?,
        memory: args.memory,
        pids: args.pids,
        cpus: args.cpus,
        timeout: args.timeout,
        tmp_size: args.tmp_size,
        open_files: args.open_files,
        file_size: args.file_size,
        disk: args.disk,
        env: args.env,
        pass_env: args.pass_env,
        tty,
        hostname: args.hostname,
        isolation: args.isolation,
        allow_domain: args.allow_domain,
        // The command line is the owner's.
        caller_domains: Vec::new(),
        presets: args.preset,
        allow_http: args.allow_http,
        add_host: args.add_host,
        allow_cidr: args.allow_cidr,
        allow_host_ports: args.allow_host_port,
        publish: args.publish,
        ask: args.ask,
        egress_learn: args.egress_learn,
        net_log: args.net_log,
        egress_quota: args.egress_quota,
        egress_idle_timeout: args.egress_idle_timeout,
        // `-`: warden's standard output.
        json_events: args
            .json_events
            .map(|p| {
                if p.as_os_str() == "-" {
                    Ok(p)
                } else {
                    absolute(p)
                }
            })
            .transpose()?,
        allow_degraded: args.allow_degraded,
    };
    #[cfg(feature = "otlp")]
    let otlp_endpoint = args.otlp_endpoint.clone();
    #[cfg(not(feature = "otlp"))]
    let otlp_endpoint: Option<String> = None;
    Ok(warden_runtime::resolve::Input {
        profile: args.profile.map(ProfileSource::Named),
        overrides,
        secrets: args.secret,
        secret_in_body: args.secret_in_body,
        secret_rules: args.secret_rule,
        upstream_ca: paths(args.upstream_ca)?,
        audit_log: args.audit_log.map(absolute).transpose()?,
        no_audit_log: args.no_audit_log,
        otlp_endpoint,
        stdin_is_terminal: std::io::stdin().is_terminal(),
        ask_save: match ask_save.as_deref() {
            Some("profile") => warden_runtime::resolve::AskSave::Profile,
            _ => warden_runtime::resolve::AskSave::Project,
        },
    })
}

/// Resolve the command line into a spec (see `warden_runtime::resolve`),
/// with this process's catalog, defaults and state directory.
pub fn resolve(
    args: RunArgs,
    defaults: &Defaults,
    sandbox: Option<&warden_workspace::Sandbox>,
    id: &str,
) -> anyhow::Result<Resolved> {
    let input = input(args)?;
    let catalog = catalog();
    let state = state_dir().ok();
    let ctx = Context {
        catalog: &catalog,
        defaults,
        state_dir: state.as_deref(),
        otlp: cfg!(feature = "otlp"),
        id,
        // The command line is the owner's own.
        trust: warden_policy::Trust::Owner,
    };
    if input.overrides.overlay == Some(true) && sandbox.is_none() {
        // The layer is made in the store: say now if there is none.
        state_dir()?;
    }
    Ok(warden_runtime::resolve::resolve(input, &ctx, sandbox)?)
}

/// Says each layer the host could not give, as it happens, on stderr: in
/// full, except the lack of cgroups, which a rootless user meets on every
/// run of such a host and which gets one short line (`warden doctor` has
/// the details and the fix); and cache writes that were not kept.
pub struct DegradedNotices;

impl warden_audit::EventSink for DegradedNotices {
    fn emit(&mut self, event: &warden_audit::Event) {
        match &event.kind {
            warden_audit::EventKind::Degraded { layer, lost } => {
                eprintln!("{}", degraded_line(layer, lost))
            }
            warden_audit::EventKind::CacheLeftOut { .. } => {
                eprintln!("warden: {}", event.kind.describe())
            }
            _ => {}
        }
    }
}

/// `--net-log`: each egress decision on stderr as it is made, one line,
/// with whatever the sandbox sent (names) made printable.
pub struct NetLogNotices;

impl warden_audit::EventSink for NetLogNotices {
    fn emit(&mut self, event: &warden_audit::Event) {
        if let warden_audit::EventKind::Connection { .. } = &event.kind {
            eprintln!(
                "warden: egress {}",
                warden_workspace::printable(&event.kind.describe())
            );
        }
    }
}

/// Whether a spec asks for `--net-log`'s lines.
pub fn net_log(spec: &warden_policy::SandboxSpec) -> bool {
    matches!(&spec.network, warden_policy::NetworkSpec::Egress(e) if e.log)
}

/// The line that says a layer is missing, for a run and for a start.
pub fn degraded_line(layer: &str, lost: &str) -> String {
    if layer == "resources" {
        "warden: DEGRADED resources: no usable cgroup, limits are per process (rlimits); `warden doctor` says why and how to get one".to_string()
    } else {
        format!("warden: DEGRADED {layer}: {lost}")
    }
}

/// The sinks of a run, opened (a log that cannot be opened stops the run
/// before anything starts).
pub fn open_sinks(
    c: &warden_runtime::state::SinkConfig,
    net_log: bool,
) -> anyhow::Result<Vec<warden_runtime::events::Sink>> {
    let mut sinks: Vec<warden_runtime::events::Sink> = vec![Box::new(DegradedNotices)];
    if net_log {
        sinks.push(Box::new(NetLogNotices));
    }
    #[cfg(feature = "otlp")]
    if let Some(url) = &c.otlp_endpoint {
        sinks.push(Box::new(warden_audit::otlp::OtlpSink::new(url)?));
    }
    if let Some(path) = &c.json_events {
        sinks.push(Box::new(JsonLinesSink::open(path)?));
    }
    if let Some(path) = &c.audit_log {
        // Opened with the first record, while the sandbox's root is built;
        // the jail refuses to start the command if it cannot be.
        sinks.push(Box::new(DeferredLog::new(path)));
    }
    if let Some(path) = &c.grants {
        sinks.push(Box::new(warden_runtime::grants::GrantsSink::new(
            path.clone(),
            c.grants_into_profile,
        )));
    }
    Ok(sinks)
}

/// `warden run`: a command in a fresh sandbox, supervised by this process.
pub fn run(args: RunArgs, defaults: &Defaults) -> anyhow::Result<u8> {
    let learn_file = args.egress_learn_file.clone().map(absolute).transpose()?;
    if learn_file.is_some() && (args.through_exec || args.detach) {
        anyhow::bail!(
            "--egress-learn-file is for a run warden waits for: leave out {}",
            if args.detach {
                "--detach"
            } else {
                "--through-exec"
            }
        );
    }
    if args.through_exec {
        return super::lifecycle::run_through_exec(args, defaults);
    }
    if args.detach {
        return super::lifecycle::run_detached(args, defaults);
    }
    let id = sandbox_id();
    let mut resolved = resolve(args, defaults, None, &id)?;
    if let Some(file) = &learn_file {
        let learning = matches!(
            &resolved.spec.network,
            warden_policy::NetworkSpec::Egress(e) if e.learn
        );
        if !learning {
            anyhow::bail!("--egress-learn-file needs learning mode: add --egress-learn");
        }
        // Said before anything starts: a file warden may not write.
        warden_runtime::teach::read_learned(file)?;
    }
    let kept = resolved.kept.take();
    for notice in &resolved.notices {
        eprintln!("warden: {notice}");
    }
    let lock = match &kept {
        Some((_, sb)) => {
            let lock = sb.lock()?;
            lock.set_state(warden_workspace::SandboxState::Running)?;
            Some(lock)
        }
        None => None,
    };
    let sinks = open_sinks(&resolved.sinks, net_log(&resolved.spec))?;
    let into_profile = resolved.sinks.grants_into_profile;
    let load_grants = |f: &std::path::Path| {
        if into_profile {
            warden_runtime::grants::load_profile(f)
        } else {
            warden_runtime::grants::load(f)
        }
    };
    let granted_before = resolved
        .sinks
        .grants
        .as_deref()
        .map(load_grants)
        .transpose()?
        .unwrap_or_default();
    warden_jail::phase("resolved");
    let finished = warden_runtime::run_once(&resolved.spec, &id, sinks);
    if let Some(file) = &resolved.sinks.grants {
        // What "always" answers wrote, as the lines now in the file.
        let now = load_grants(file).unwrap_or_default();
        let new: Vec<String> = now
            .into_iter()
            .filter(|e| !granted_before.contains(e))
            .collect();
        if !new.is_empty() {
            let whose = if into_profile {
                "added to the profile"
            } else {
                "saved for this project's later runs in"
            };
            eprintln!(
                "warden: {whose} {} (answered always):\n{}",
                file.display(),
                warden_runtime::teach::profile_lines(&new)
            );
        }
    }
    if let (Some(lock), Some((store, sb))) = (lock, &kept) {
        let _ = lock.set_state(warden_workspace::SandboxState::Stopped);
        let changed = sb
            .diff(&warden_workspace::DiffOptions::default())
            .map(|c| c.len())
            .unwrap_or(1);
        if changed == 0 {
            drop(lock);
            let _ = store.remove(sb.name());
        } else {
            eprintln!(
                "warden: {changed} change(s) kept in sandbox {0}, not in {1}: review with `warden diff {0}`, then `warden commit {0}` or `warden rm {0}`",
                sb.name(),
                sb.meta().workspace.display()
            );
        }
    }
    let finished = finished.context("the sandbox could not be run")?;
    for notice in &finished.notices {
        eprintln!("warden: {notice}");
    }
    if let Some(file) = &learn_file {
        let all = warden_runtime::teach::write_learned(file, &finished.learned)?;
        eprintln!(
            "warden: learned names written to {} ({} new, {} in all); take them with `extends: [{}]` in a profile or --profile {0}",
            file.display(),
            finished.learned.len(),
            all.len(),
            file.display(),
        );
    }
    if let Some(msg) = &finished.outcome.message {
        eprintln!("warden: {msg}");
    }
    if !finished.lost_records.is_empty() {
        // The run's record has a gap: the run has failed, whatever its
        // command did.
        for lost in &finished.lost_records {
            eprintln!("warden: {lost}");
        }
        anyhow::bail!(
            "the run's record is incomplete (see above); its command's status was {}",
            finished.outcome.status
        );
    }
    Ok(finished.outcome.status.clamp(0, 255) as u8)
}
