//! `warden run`: a command in a fresh sandbox, supervised by this
//! process (its options and their resolution are [`super::resolution`]'s,
//! which `warden create` shares; `--detach` and `--through-exec` go
//! through a named sandbox's supervisor, [`super::lifecycle`]).

use super::resolution::RunArgs;
use super::resolution::{net_log, open_sinks, resolve};
use super::{absolute, sandbox_id};
use anyhow::Context as _;
use warden_policy::{Defaults, ENV_ALLOWLIST};

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
    let again = args.clone();
    let mut resolved = resolve(args, defaults, None, &id)?;
    // A secret's program runs as the owner in this process: never one a
    // daemon's token could have written (a run without a state directory
    // still reads the record beside the catalogue).
    let state = super::state_dir().ok();
    let checked =
        super::resolution::check_secret_programs(&resolved.spec, state.as_deref(), |name| {
            super::resolution::secret_place(again, name)
        });
    if let Err(e) = checked {
        if let Some((store, sb)) = resolved.kept.take() {
            let _ = store.remove(sb.name());
        }
        return Err(e);
    }
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
    // Programs the exec allowlist refuses are asked about at the terminal
    // too; an "always" goes where the names' go: the project's programs'
    // grants, or the profile in use, into its own `process.allow_exec`
    // (a profile without one is not given one: no "always" then).
    let program_grants = resolved
        .sinks
        .grants
        .as_deref()
        .and_then(|f| warden_runtime::programs::Keep::of(f, into_profile));
    let programs_before = ProgramsSaved::before(program_grants.as_ref())?;
    // Writable volumes merge at the stop, never over the owner's files.
    let owner = Some((super::catalog(), state.as_deref()));
    let finished =
        warden_runtime::run_once_asking(&resolved.spec, &id, sinks, program_grants.clone(), owner);
    programs_before.say_new();
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
                warden_workspace::printable_path(file),
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
                warden_workspace::printable(sb.name()),
                warden_workspace::printable_path(&sb.meta().workspace)
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
            warden_workspace::printable_path(file),
            finished.learned.len(),
            all.len(),
            warden_workspace::printable_path(file),
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

/// The programs kept for later runs (the project's grants, or the
/// profile in use) before a run, to say after it which programs "always"
/// answers added.
struct ProgramsSaved {
    keep: Option<warden_runtime::programs::Keep>,
    before: Vec<String>,
}

impl ProgramsSaved {
    fn before(keep: Option<&warden_runtime::programs::Keep>) -> anyhow::Result<ProgramsSaved> {
        let before = keep.map(|k| k.load()).transpose()?.unwrap_or_default();
        Ok(ProgramsSaved {
            keep: keep.cloned(),
            before,
        })
    }

    fn say_new(&self) {
        let Some(keep) = &self.keep else {
            return;
        };
        let new: Vec<String> = keep
            .load()
            .unwrap_or_default()
            .into_iter()
            .filter(|p| !self.before.contains(p))
            .map(|p| warden_runtime::programs::shown(&p))
            .collect();
        if !new.is_empty() {
            let whose = match keep {
                warden_runtime::programs::Keep::Project(_) => {
                    "programs saved for this project's later runs in"
                }
                warden_runtime::programs::Keep::Profile(_) => {
                    "programs added to process.allow_exec of the profile"
                }
            };
            eprintln!(
                "warden: {whose} {} (answered always): {}",
                warden_workspace::printable_path(keep.path()),
                new.join(", ")
            );
        }
    }
}
