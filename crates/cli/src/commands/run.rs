//! `warden run`, and the resolution of run's options into a spec that
//! `warden create` shares.

pub use super::flags::Given;
use super::{absolute, catalog, sandbox_id, state_dir};
use anyhow::Context as _;
use std::io::IsTerminal;
use std::path::PathBuf;
use warden_audit::chain::DeferredLog;
use warden_audit::JsonLinesSink;
use warden_policy::compose::Origin;
use warden_policy::{Defaults, Field, Trust, ENV_ALLOWLIST};
use warden_runtime::resolve::{Context, ProfileSource, Resolved};

/// `warden run`'s (and `warden create`'s) options: the sandbox's values
/// by the field table (see [`super::flags`]), and what the command itself
/// reads.
#[derive(Debug, Clone, Default)]
pub struct RunArgs {
    pub given: Given,
    pub profile: Option<String>,
    pub tty: bool,
    pub no_tty: bool,
    pub detach: bool,
    pub ask_save: Option<String>,
    pub egress_learn_file: Option<PathBuf>,
    /// (tests) run through a long-lived sandbox's supervisor and exec.
    pub through_exec: bool,
    pub command: Vec<String>,
}

impl RunArgs {
    /// `--workspace`, taken out of the sandbox's values (a named sandbox
    /// keeps it apart).
    pub fn take_workspace(&mut self) -> Option<PathBuf> {
        self.given.take_path(Field::Workspace)
    }

    /// Whether `--overlay` was given.
    pub fn overlay(&self) -> bool {
        self.given.given(Field::Overlay)
    }
}

impl clap::FromArgMatches for RunArgs {
    fn from_arg_matches(m: &clap::ArgMatches) -> Result<Self, clap::Error> {
        let given = Given::from_matches(m);
        let flag = |id: &str| m.try_get_one::<bool>(id).ok().flatten() == Some(&true);
        let text = |f: Field| given.value(f).map(str::to_string);
        Ok(RunArgs {
            profile: text(Field::Profile),
            tty: flag("tty"),
            no_tty: flag("no-tty"),
            detach: flag("detach"),
            ask_save: text(Field::AskSave),
            egress_learn_file: given.path(Field::EgressLearnFile).cloned(),
            through_exec: flag("through-exec"),
            command: m
                .try_get_many::<String>("command")
                .ok()
                .flatten()
                .map(|v| v.cloned().collect())
                .unwrap_or_default(),
            given,
        })
    }

    fn update_from_arg_matches(&mut self, m: &clap::ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(m)?;
        Ok(())
    }
}

impl clap::Args for RunArgs {
    fn augment_args(cmd: clap::Command) -> clap::Command {
        super::flags::augment(cmd)
    }
    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        super::flags::augment(cmd)
    }
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
    let mut flags = args.given.layer()?;
    if !args.command.is_empty() {
        flags.add_one(
            Field::Command,
            warden_policy::compose::Val::Argv(args.command.clone()),
            warden_policy::compose::Origin::CommandLine,
        );
    }
    match (args.tty, args.no_tty) {
        (true, _) => flags.add_text(Field::Tty, "true", Origin::CommandLine, Trust::Owner)?,
        (_, true) => flags.add_text(Field::Tty, "false", Origin::CommandLine, Trust::Owner)?,
        _ => {}
    }
    Ok(warden_runtime::resolve::Input {
        profile: args.profile.map(ProfileSource::Named),
        flags,
        stdin_is_terminal: std::io::stdin().is_terminal(),
        ask_save: match args.ask_save.as_deref() {
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
    if input.flags.get(Field::Overlay).is_some() && sandbox.is_none() {
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
                eprintln!("warden: {}", super::worded(&event.kind.describe()))
            }
            _ => {}
        }
    }
}

/// `--net-log`: each egress decision on stderr as it is made, one line,
/// with whatever the sandbox sent (names) made printable, and for a
/// denial the flag that would allow it.
pub struct NetLogNotices;

impl warden_audit::EventSink for NetLogNotices {
    fn emit(&mut self, event: &warden_audit::Event) {
        if let warden_audit::EventKind::Connection { .. } = &event.kind {
            eprintln!(
                "warden: egress {}",
                warden_workspace::printable(&super::audit::describe_kind(&event.kind))
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
        format!("warden: DEGRADED {layer}: {}", super::worded(lost))
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
        eprintln!("warden: {}", super::worded(notice));
    }
    let asks = matches!(&resolved.spec.network, warden_policy::NetworkSpec::Egress(e) if e.ask);
    if asks && resolved.spec.terminal != warden_policy::Terminal::Pty {
        // Said at the start, not only at the first denial: a script run
        // with --ask learns at once that nobody will be asked.
        eprintln!(
            "warden: --ask has no terminal to ask on here (standard input is not a terminal, or --no-tty): \
             a name on no list is denied, not asked; run it from a terminal, or allow names with --allow-domain"
        );
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
    for n in &finished.notices {
        eprintln!("warden: {}", super::worded(&super::audit::notice(n)));
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
        eprintln!("warden: {}", super::worded(msg));
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
