//! What `warden run` and `warden create` share: their options (the
//! sandbox's values by the field table, and what the command itself
//! reads), their resolution into a spec, and the sinks that say on stderr
//! what happens as it happens. Both commands are built on it; it knows
//! neither.

pub use super::flags::Given;
use super::{catalog, state_dir};
use std::io::IsTerminal;
use std::path::PathBuf;
use warden_audit::chain::DeferredLog;
use warden_audit::JsonLinesSink;
use warden_policy::compose::Origin;
use warden_policy::{Defaults, Field, Trust};
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
        owner: warden_runtime::lifecycle::Owner::Machine,
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
/// the details and the fix); cache writes that were not kept; what a
/// writable volume's merge held back (the owner's files) and where it is
/// kept; and what
/// the microVM backend's relay cut (a guest cut off ends the run, which
/// then says only that the VM ended).
pub struct DegradedNotices;

impl warden_audit::EventSink for DegradedNotices {
    fn emit(&mut self, event: &warden_audit::Event) {
        match &event.kind {
            warden_audit::EventKind::Degraded { layer, lost } => {
                eprintln!("{}", degraded_line(layer, lost))
            }
            warden_audit::EventKind::CacheLeftOut { .. }
            | warden_audit::EventKind::VolumeHeldBack { .. }
            | warden_audit::EventKind::VmCutOff { .. }
            | warden_audit::EventKind::ExecOutputCut { .. } => {
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

/// Before a secret's program runs from this process (`warden run`, a
/// start): the rule the daemon applies, with the directories every
/// daemon of this state directory (none without one) or of this
/// catalogue recorded as ones tokens may write
/// (`warden_runtime::daemon_roots`). `place`: where the profile sets each
/// secret, when the command line has the profile at hand.
pub fn check_secret_programs(
    spec: &warden_policy::SandboxSpec,
    state: Option<&std::path::Path>,
    place: impl FnOnce(&str) -> Option<String>,
) -> anyhow::Result<()> {
    use warden_runtime::daemon_roots::{check_spec, RootsError};
    let config = catalog().config_dir;
    match check_spec(spec, state, config.as_deref()) {
        Ok(()) => Ok(()),
        Err(RootsError::Writable { refusal, root }) => {
            let at = place(&refusal.secret)
                .map(|p| format!(" ({p})"))
                .unwrap_or_default();
            let records: Vec<String> = [state, config.as_deref()]
                .into_iter()
                .flatten()
                .map(|d| {
                    d.join(warden_runtime::daemon_roots::DAEMON_ROOTS)
                        .display()
                        .to_string()
                })
                .collect();
            if let Some(why) = refusal.unreadable.filter(|_| refusal.inline_code()) {
                anyhow::bail!(
                    "secrets.{}{at}: not run ({}): {} (`{}`) cannot be read for certain ({why}): warden reads no language but the shell's, and such code can build any path it opens, so what it runs cannot be told from outside every root recorded in {} (the nearest: {}, {}), where tokens' sandboxes may have written, and it would run as you; put that code in a script of your own outside those roots and name the script",
                    refusal.secret,
                    refusal.code(),
                    refusal.what,
                    refusal.path.display(),
                    records.join(" and "),
                    root.path.display(),
                    root.kind.describe(),
                );
            }
            if let Some(why) = refusal.unreadable {
                anyhow::bail!(
                    "secrets.{}{at}: not run ({}): {} `{}` holds {why}, so what it runs cannot be told from outside every root recorded in {} (the nearest: {}, {}), where tokens' sandboxes may have written, and it would run as you; name the program and the files it is given by absolute paths (or `~`, `$HOME`), without a `cd` or a variable the program is not given",
                    refusal.secret,
                    refusal.code(),
                    refusal.what,
                    refusal.path.display(),
                    records.join(" and "),
                    root.path.display(),
                    root.kind.describe(),
                );
            }
            anyhow::bail!(
                "secrets.{}{at}: not run ({}): {} {} lies under {}, {}, where tokens' sandboxes may have written it, and it would run as you; keep secret programs, their interpreters and the files they are given outside every root recorded in {}",
                refusal.secret,
                refusal.code(),
                refusal.what,
                refusal.path.display(),
                root.path.display(),
                root.kind.describe(),
                records.join(" and "),
            )
        }
        Err(e) => Err(e.into()),
    }
}

/// Where the profile of a command line sets secret `name`
/// (`FILE:LINE:COL`), composed again for a refusal's message.
pub fn secret_place(args: RunArgs, name: &str) -> Option<String> {
    use warden_policy::compose::Slot;
    let input = input(args).ok()?;
    let catalog = catalog();
    let source = match input.profile? {
        ProfileSource::Named(n) => catalog.profile_for(&n, Trust::Owner).ok()?,
        ProfileSource::Inline { .. } => return None,
    };
    let composed = warden_policy::compose::compose_source(&catalog, Some(source), &input.flags)
        .ok()?
        .into_valid()
        .ok()?;
    let Some(Slot::Map(items)) = composed.merged.slots.get(&Field::Secret) else {
        return None;
    };
    let (_, set) = items.iter().find(|(k, _)| k == name)?;
    let (file, pos) = set.origin.place()?;
    Some(format!("{file}:{pos}"))
}
