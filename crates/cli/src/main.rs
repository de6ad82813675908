//! The `warden` command: parses arguments, builds a `SandboxSpec` through
//! `warden-policy`, and hands it to `warden-jail`. No isolation logic lives
//! here.

// The binaries only parse, wire and print: what needs unsafe is the
// libraries' (jail, egress, vm), each block with its reason.
#![forbid(unsafe_code)]

#[macro_use]
mod said;

mod commands;
mod logging;
mod progress;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use commands::audit::AuditCommand;
use commands::profile::{PresetCommand, ProfileCommand};
use commands::resolution::RunArgs;
use commands::{sandboxes, state_dir};
use std::path::PathBuf;
use std::process::ExitCode;
use warden_policy::Defaults;

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
a `run` survives it; a named sandbox (`create`) stays up for many commands until it is stopped.",
    after_help = "Exit status of `warden run`: the command's own; 128+N when it died of signal N; \
124 on --timeout; 137 when killed for exceeding --memory; 126/127 when the command is not \
executable / not found; 125 when warden itself failed (nothing was started)."
)]
struct Cli {
    /// Drive the sandboxes of a daemon (`warden serve`) instead of this
    /// machine's: `unix` (your own daemon's socket), unix:/path/to/socket,
    /// or http://HOST:PORT with a token in WARDEN_TOKEN. For run, create,
    /// exec, ls, logs, stop, pause, resume, rm, egress, diff and commit
    /// (before or after the command's name)
    #[arg(long, env = "WARDEN_HOST", value_name = "URL")]
    host: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a command in a new sandbox and wait until the whole sandbox is gone
    Run(Box<RunArgs>),
    /// Create a named sandbox that stays up and takes many commands: every
    /// option of `run` given here applies to every later exec
    Create(commands::lifecycle::CreateArgs),
    /// Start named sandboxes (each gets a supervisor of its own, which
    /// outlives this command)
    Start {
        #[arg(required = true)]
        names: Vec<String>,
    },
    /// Stop named sandboxes: SIGTERM to every process, SIGKILL after
    /// --time. Waits while the supervisor works (writing back a large home
    /// may take past --time, and is said while it does); a supervisor that
    /// makes no progress for --time (at least 5s) is killed, and the stop
    /// fails
    Stop {
        #[arg(required = true)]
        names: Vec<String>,
        /// How long processes get to end after SIGTERM
        #[arg(long, short = 't', value_name = "DURATION", default_value = "10s", value_parser = warden_policy::parse_duration)]
        time: std::time::Duration,
    },
    /// Freeze a running sandbox's processes in place: their memory is
    /// kept (not across a host reboot), they use no CPU, and its TTL and
    /// timeout stand still until `resume`
    Pause {
        #[arg(required = true)]
        names: Vec<String>,
        /// Save its memory to its state and free its RAM instead (a VM
        /// sandbox: its VMM ends; one with a mounted share is refused and
        /// runs on)
        #[arg(long)]
        to_disk: bool,
    },
    /// Let a paused sandbox's processes go on where they were
    Resume {
        #[arg(required = true)]
        names: Vec<String>,
    },
    /// Make COUNT new sandboxes from a sandbox's current files (workspace
    /// layer and home) and options, each its own (name, hostname, layer);
    /// started when it runs. Processes are not carried
    Fork {
        name: String,
        #[arg(long, short = 'n', default_value_t = 1)]
        count: usize,
    },
    /// Save a sandbox's files and options as a named snapshot, list and
    /// delete them; `create NAME --from-snapshot SNAP` makes a sandbox
    /// from one
    #[command(subcommand)]
    Snapshots(commands::lifecycle::copies::SnapshotsCommand),
    /// Run a command in a running named sandbox (started first if needed);
    /// several may run at once
    Exec(commands::lifecycle::ExecArgs),
    /// Read or change a running sandbox's allowlist live: --allow puts
    /// entries on, --deny takes them off (open connections to them are
    /// cut); kept for its later starts
    Egress {
        name: String,
        /// An entry to allow, written as for --allow-domain (repeatable)
        #[arg(long, value_name = "ENTRY")]
        allow: Vec<String>,
        /// An entry to take off the list, as it was written (repeatable)
        #[arg(long, value_name = "ENTRY")]
        deny: Vec<String>,
        /// The list as JSON
        #[arg(long)]
        json: bool,
    },
    /// List the ask-mode questions of running sandboxes, or answer one:
    /// `warden approvals ID allow_once|allow_always|deny`
    Approvals {
        /// A question's id, to answer it
        #[arg(requires = "decision")]
        id: Option<String>,
        /// allow_once, allow_always (the name goes on the sandbox's
        /// allowlist) or deny
        decision: Option<String>,
        /// Only this sandbox's questions
        #[arg(long, value_name = "NAME", conflicts_with = "id")]
        sandbox: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// List the processes of a running sandbox
    Ps {
        name: String,
        #[arg(long)]
        json: bool,
    },
    /// Print a sandbox's events (its audit log), or with --exec a detached
    /// command's output; -f follows them live
    Logs {
        name: String,
        #[arg(long, short = 'f')]
        follow: bool,
        /// One JSON object per event
        #[arg(long, conflicts_with = "exec")]
        json: bool,
        /// The output of this command instead (the ID `exec -d` printed,
        /// `run` for `run -d`'s, or one the daemon's API started): its
        /// standard output on stdout, its standard error on stderr
        #[arg(long, value_name = "ID")]
        exec: Option<String>,
    },
    /// (internal) the supervisor of a named sandbox, started by `start`
    #[command(name = "__supervise", hide = true)]
    Supervise { name: String },
    /// List named sandboxes
    Ls {
        #[arg(long)]
        json: bool,
    },
    /// Remove named sandboxes and their uncommitted changes
    Rm {
        #[arg(required = true)]
        names: Vec<String>,
        /// Stop running ones first
        #[arg(long, short = 'f')]
        force: bool,
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
        /// Run each attack in a long-lived sandbox, through `exec`, instead
        /// of a fresh `run`
        #[arg(long)]
        through_exec: bool,
        /// Run the sandboxes with this isolation (`process`, `gvisor`, `vm`)
        #[arg(long, value_name = "ISOLATION")]
        isolation: Option<String>,
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
    /// The microVM backend (`--isolation vm`): its guest kernel and VMM
    #[command(subcommand)]
    Vm(commands::vm::VmCommand),
    /// List the named groups of domains a profile can allow
    #[command(subcommand)]
    Preset(PresetCommand),
    /// Serve sandboxes over an HTTP API (on an owner-only Unix socket; TCP
    /// with tokens when asked). Sandboxes outlive the daemon. See `warden
    /// serve --help`
    #[command(disable_help_flag = true)]
    Serve {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<std::ffi::OsString>,
    },
    /// Serve an MCP client (Claude Desktop, an agent framework) over
    /// standard input and output: warden as its computer. See `warden mcp
    /// --help`
    #[command(disable_help_flag = true)]
    Mcp {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<std::ffi::OsString>,
    },
    /// Print the shell completion script of warden for bash, zsh, fish,
    /// elvish or powershell (e.g. `warden completions bash >
    /// /etc/bash_completion.d/warden`)
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print warden's manual page (roff, for `man -l -`), or with --dir
    /// write one page per command into DIR
    Man {
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
    /// Make, list and revoke the daemon's API tokens. See `warden token
    /// --help`
    #[command(disable_help_flag = true)]
    Token {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<std::ffi::OsString>,
    },
}

/// The command line of `warden run` alone: the top-level `--host` and the
/// `run` subcommand exactly as [`Cli`] defines them (a test compares the
/// two), without the other subcommands, whose options clap would otherwise
/// build, check and free on every run.
#[derive(Parser)]
#[command(name = "warden")]
struct RunCli {
    /// Drive the sandboxes of a daemon (`warden serve`) instead of this
    /// machine's: `unix` (your own daemon's socket), unix:/path/to/socket,
    /// or http://HOST:PORT with a token in WARDEN_TOKEN. For run, create,
    /// exec, ls, logs, stop, pause, resume, rm, egress, diff and commit
    /// (before or after the command's name)
    #[arg(long, env = "WARDEN_HOST", value_name = "URL")]
    host: Option<String>,
    #[command(subcommand)]
    command: RunOnly,
}

#[derive(Subcommand)]
enum RunOnly {
    /// Run a command in a new sandbox and wait until the whole sandbox is gone
    Run(Box<RunArgs>),
}

/// `warden serve`, `warden token` and `warden mcp` are `warden-daemon`'s, installed
/// beside this binary: executed in this process's place.
fn daemon(verb: &str, args: Vec<std::ffi::OsString>) -> anyhow::Result<u8> {
    use anyhow::Context;
    use std::os::unix::process::CommandExt;
    let me = std::env::current_exe().context("cannot find warden's own executable")?;
    let daemon = me.with_file_name("warden-daemon");
    let err = std::process::Command::new(&daemon)
        .arg(verb)
        .args(args)
        .exec();
    Err(anyhow::anyhow!(
        "cannot run {} ({err}): `warden {verb}` needs warden-daemon beside warden, and `cargo run` builds only warden: `cargo build --release -p warden-cli` builds warden, warden-daemon and warden-guest-init (with the flags warden was built with), to be installed together (docs/install.md)",
        daemon.display()
    ))
}

fn main() -> ExitCode {
    logging::init();
    warden_jail::phase("main");
    // The one place this binary reads its test switches (none in a release
    // build), before any sandbox or supervisor exists.
    warden_policy::TestHooks::from_vars(|name| std::env::var(name).ok()).install();
    // Likewise the VM backend's host settings (`WARDEN_VMM`, ...): the
    // library reads no environment.
    warden_vm::Settings::from_vars(|name| std::env::var_os(name)).install();
    // And the process backends' and the runtime's (the state directory,
    // `XDG_RUNTIME_DIR`, `WARDEN_RUNSC`, the host's git configuration).
    warden_runtime::settings::install_from(|name| std::env::var_os(name));
    progress::install();
    // The host's defaults are read only by the commands that use them (and
    // by `run --help`, which shows them): `exec` and the rest start faster.
    let defaults = || Defaults::for_host(commands::host_facts());
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let asks_help = args
        .iter()
        .any(|a| a == "--help" || a == "-h" || a == "help");
    // `warden run` without help asked: parsed by a command line that has
    // only `run` (and `--host`), the same definitions as the
    // full one's, which costs a fraction of building every subcommand.
    // Anything it refuses goes through the full command line below, which
    // gives the same answer it always did (error, exit status and all).
    if !asks_help && args.get(1).is_some_and(|a| a == "run") {
        if let Ok((cli, m)) = with_host(RunCli::command())
            .try_get_matches_from(args.iter())
            .and_then(|m| RunCli::from_arg_matches(&m).map(|c| (c, m)))
        {
            let RunOnly::Run(run) = cli.command;
            return dispatch(Cli {
                host: host_after(&m, cli.host),
                command: Command::Run(run),
            });
        }
    }
    let mut command = with_host(Cli::command());
    if asks_help {
        let d = defaults();
        command =
            command.mut_subcommand("run", |c| c.after_help(commands::run::run_after_help(&d)));
    }
    let cli = match command.try_get_matches_from(args).and_then(|m| {
        Cli::from_arg_matches(&m).map(|mut c| {
            c.host = host_after(&m, c.host.take());
            c
        })
    }) {
        Ok(c) => c,
        Err(e) => {
            let code = match e.kind() {
                clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion => 0,
                _ => EXIT_WARDEN,
            };
            let _ = e.print();
            if e.kind() == clap::error::ErrorKind::UnknownArgument
                && std::env::args().nth(1).as_deref() == Some("exec")
            {
                eprintln!("warden: an exec runs under the options its sandbox was created with (limits, binds, network, secrets); they cannot be changed or widened per command: create another sandbox with the options you need");
            }
            return ExitCode::from(code);
        }
    };
    dispatch(cli)
}

/// The commands that go through a daemon with `--host` (see [`remote`]):
/// each takes the option after its name too, and lists it in its help;
/// the others neither take nor list it.
const HOST_COMMANDS: &[&str] = &[
    "run", "create", "exec", "ls", "logs", "stop", "pause", "resume", "rm", "egress", "diff",
    "commit",
];

/// `command` with `--host` on each of [`HOST_COMMANDS`] that it has.
fn with_host(mut command: clap::Command) -> clap::Command {
    let top = command
        .get_arguments()
        .find(|a| a.get_id() == "host")
        .cloned();
    let Some(top) = top else {
        return command;
    };
    for name in HOST_COMMANDS {
        if command.find_subcommand(name).is_some() {
            let arg = top.clone();
            command = command.mut_subcommand(name, |c| c.arg(arg));
        }
    }
    command
}

/// The `--host` given after the command's name, when none came before it.
fn host_after(m: &clap::ArgMatches, before: Option<String>) -> Option<String> {
    before.or_else(|| {
        m.subcommand()
            // Commands that do not take it have no such argument.
            .and_then(|(_, sub)| sub.try_get_one::<String>("host").ok().flatten().cloned())
    })
}

/// Runs a parsed command line.
fn dispatch(cli: Cli) -> ExitCode {
    let defaults = || Defaults::for_host(commands::host_facts());
    // Every command but `run` (its own sandbox's supervisor) and the
    // detached supervisor only prints or asks a supervisor: a reader that
    // goes away (`| head`) ends it quietly instead of a panic on the next
    // line. A supervisor must outlive any pipe it writes: killed by one (a
    // start whose sandbox failed closes the pipe to it), it told no one
    // why and left the sandbox's cgroup behind.
    if !matches!(cli.command, Command::Run(_) | Command::Supervise { .. }) {
        warden_jail::stdio::quit_on_closed_stdout();
    }
    if let Some(host) = cli.host.as_deref() {
        return finish(remote(host, cli.command));
    }
    let result = match cli.command {
        Command::Run(args) => {
            warden_jail::phase("parsed");
            let done = commands::run::run(*args, &defaults());
            warden_jail::phase("done");
            done
        }
        Command::Doctor { json } => commands::doctor::doctor(json, &defaults()),
        Command::Audit(cmd) => commands::audit::audit(cmd),
        Command::Exec(a) => commands::lifecycle::exec(a),
        Command::Create(a) => commands::lifecycle::create(a, &defaults()),
        Command::Start { names } => commands::lifecycle::start(&names),
        Command::Stop { names, time } => commands::lifecycle::stop(&names, time),
        Command::Pause { names, to_disk } => commands::lifecycle::pause::pause(&names, to_disk),
        Command::Resume { names } => commands::lifecycle::pause::resume(&names),
        Command::Fork { name, count } => commands::lifecycle::copies::fork(&name, count),
        Command::Snapshots(cmd) => commands::lifecycle::copies::snapshots(cmd),
        Command::Ps { name, json } => commands::lifecycle::ps(&name, json),
        Command::Egress {
            name,
            allow,
            deny,
            json,
        } => commands::egress::egress(&name, allow, deny, json),
        Command::Approvals {
            id,
            decision,
            sandbox,
            json,
        } => commands::egress::approvals(sandbox.as_deref(), id.zip(decision), json),
        Command::Logs {
            name,
            follow,
            exec: Some(id),
            ..
        } => commands::lifecycle::exec_output(&name, &id, follow),
        Command::Logs {
            name, follow, json, ..
        } => commands::lifecycle::logs(&name, follow, json),
        Command::Supervise { name } => commands::lifecycle::supervise(&name),
        Command::Ls { json } => state_dir()
            .and_then(sandboxes::store)
            .and_then(|s| sandboxes::ls(&s, json)),
        Command::Rm { names, force } => state_dir()
            .and_then(sandboxes::store)
            .and_then(|s| sandboxes::rm(&s, &names, force)),
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
            through_exec,
            isolation,
        } => commands::selftest::selftest(
            only.as_deref(),
            json,
            list,
            allow_degraded,
            through_exec,
            isolation.as_deref(),
        ),
        Command::Probe { name, args } => {
            let f = warden_selftest::probes::run(&name, &args);
            println!(
                "{}{}",
                warden_selftest::RESULT_PREFIX,
                serde_json::json!({ "contained": f.contained, "detail": f.detail, "refused": f.refused })
            );
            Ok(0)
        }
        Command::Profile(cmd) => commands::profile::profile(cmd, &defaults()),
        Command::Vm(cmd) => commands::vm::vm(cmd),
        Command::Completions { shell } => commands::manual::completions(shell, Cli::command()),
        Command::Man { dir } => commands::manual::man(Cli::command(), dir.as_deref()),
        Command::Serve { args } => daemon("serve", args),
        Command::Token { args } => daemon("token", args),
        Command::Mcp { args } => daemon("mcp", args),
        Command::Preset(PresetCommand::List { show }) => {
            commands::profile::preset_list(show.as_deref())
        }
    };
    finish(result)
}

/// The exit status of a command's result; its error's cause chain printed
/// once.
fn finish(result: anyhow::Result<u8>) -> ExitCode {
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            // Options are named below the command line by their profile
            // keys: here, by their flags; findings in a profile file keep
            // the keys that file is written in.
            let door = if about_a_profile(&e) {
                warden_policy::Door::Profile
            } else {
                warden_policy::Door::Cli
            };
            let text = warden_policy::word(&format!("{e:#}"), door);
            eprintln!("warden: {text}");
            ExitCode::from(EXIT_WARDEN)
        }
    }
}

/// Whether `e` is about values written in a profile file (its findings,
/// at their `file:line:column`), which name options by the file's keys.
fn about_a_profile(e: &anyhow::Error) -> bool {
    use warden_policy::compose::ComposeError;
    use warden_runtime::lifecycle::LifecycleError;
    use warden_runtime::resolve::ResolveError;
    e.chain().any(|c| {
        let r =
            c.downcast_ref::<ResolveError>()
                .or_else(|| match c.downcast_ref::<LifecycleError>() {
                    Some(LifecycleError::Resolve(r)) => Some(&**r),
                    _ => None,
                });
        matches!(
            r,
            Some(ResolveError::InProfile { .. } | ResolveError::Compose(ComposeError::Invalid(_)))
        )
    })
}

/// A command given `--host`: through the daemon there, or refused.
fn remote(host: &str, command: Command) -> anyhow::Result<u8> {
    use commands::remote;
    match command {
        Command::Run(args) => remote::run(host, *args),
        Command::Create(a) => remote::create(host, a),
        Command::Exec(a) => remote::exec(host, a),
        Command::Ls { json } => remote::ls(host, json),
        Command::Logs {
            name,
            follow,
            exec: Some(id),
            ..
        } => remote::exec_output(host, &name, &id, follow),
        Command::Logs {
            name, follow, json, ..
        } => remote::logs(host, &name, follow, json),
        Command::Stop { names, time } => remote::stop(host, &names, time),
        Command::Pause { names, to_disk } => {
            if to_disk {
                anyhow::bail!("`warden pause --to-disk` does not go through a daemon (--host) yet: run it on the daemon's host without --host");
            }
            commands::lifecycle::pause::remote(host, &names, true)
        }
        Command::Resume { names } => commands::lifecycle::pause::remote(host, &names, false),
        Command::Rm { names, force } => remote::rm(host, &names, force),
        Command::Diff(a) => remote::diff(host, a),
        Command::Commit(a) => remote::commit(host, a),
        Command::Egress {
            name,
            allow,
            deny,
            json,
        } => remote::egress(host, &name, allow, deny, json),
        _ => anyhow::bail!(
            "this command does not go through a daemon (--host): run, create, exec, ls, logs, stop, pause, resume, rm, egress, diff and commit do; run it on the daemon's host without --host"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fast command line of `run` must be the full one's `run`, option
    /// for option (names, values, defaults, conflicts, help texts), and
    /// carry the same global `--host`: otherwise a `warden run` would parse
    /// differently depending on which of the two took it.
    #[test]
    fn run_alone_defines_run_exactly_as_the_full_command_line() {
        let mut full = with_host(Cli::command());
        full.build();
        let mut alone = with_host(RunCli::command());
        alone.build();
        let (Some(full_run), Some(alone_run)) =
            (full.find_subcommand("run"), alone.find_subcommand("run"))
        else {
            panic!("both command lines have a run subcommand");
        };
        assert_eq!(format!("{full_run:?}"), format!("{alone_run:?}"));
        let host = |c: &clap::Command| {
            c.get_arguments()
                .find(|a| a.get_id() == "host")
                .map(|a| format!("{a:?}"))
        };
        assert!(host(&full).is_some());
        assert_eq!(host(&full), host(&alone));
    }
}
