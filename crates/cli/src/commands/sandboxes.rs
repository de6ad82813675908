//! Named sandboxes and the review of their workspace changes: `ls`, `rm`, `diff`, `commit`, `discard`, `snapshot`, `restore` (`exec`
//! is `run` in a named sandbox's state, in main.rs). Parsing and printing
//! only: the `warden-workspace` crate does the work.

use super::units::{age, human};
use clap::Args;
use std::io::{BufRead, IsTerminal, Write};
use std::path::PathBuf;
use warden_audit::WorkspaceAction;
use warden_workspace::{
    ChangeKind, CommitOptions, Content, Decision, DiffOptions, Sandbox, Store, COARSE_NOTE,
};

#[derive(Args)]
pub struct DiffArgs {
    pub name: String,
    /// Only these paths (relative to the workspace, or absolute inside it)
    pub paths: Vec<PathBuf>,
    /// One line per changed file, with counts
    #[arg(long)]
    pub stat: bool,
    /// The changes as JSON (paths that are not UTF-8 also as bytes)
    #[arg(long, conflicts_with = "stat")]
    pub json: bool,
    /// Show the changes the workspace's own .gitignore (or
    /// .git/info/exclude) ignores too, instead of counting them
    #[arg(long)]
    pub ignored: bool,
    /// Colour the diff: auto (on a terminal), always, never
    #[arg(long, value_name = "WHEN", default_value = "auto", value_parser = ["auto", "always", "never"])]
    pub color: String,
}

#[derive(Args)]
pub struct CommitArgs {
    pub name: String,
    /// Only these paths
    pub paths: Vec<PathBuf>,
    /// Overwrite files that also changed in the real workspace since the
    /// sandbox started (conflicts); without it nothing is applied
    #[arg(long)]
    pub force: bool,
    /// Ask about each change: apply, skip, or quit
    #[arg(long, short = 'i')]
    pub interactive: bool,
    /// Apply changes flagged as dangerous (git hooks, CI files, new
    /// executables, symlinks out of the workspace, ...) without asking
    #[arg(long)]
    pub accept_flagged: bool,
    /// Apply the layer as it is now, even changes no `warden diff` showed
    /// (for scripts that trust the layer; a person reviews with `warden
    /// diff` first, or with --interactive)
    #[arg(long, conflicts_with = "interactive")]
    pub unreviewed: bool,
    /// Commit the changes the workspace's own .gitignore (or
    /// .git/info/exclude) ignores too; without it they stay in the sandbox
    #[arg(long)]
    pub ignored: bool,
}

#[derive(Args)]
pub struct SnapshotArgs {
    pub name: String,
    /// The snapshot's label [default: from the time]
    pub label: Option<String>,
    /// List the sandbox's snapshots instead
    #[arg(long, conflicts_with_all = ["label", "delete"])]
    pub list: bool,
    /// Remove snapshot LABEL instead (a sandbox keeps at most 16)
    #[arg(long, value_name = "LABEL", conflicts_with = "label")]
    pub delete: Option<String>,
}

/// The store under warden's state directory (where the other commands
/// find it too).
pub use super::store;

/// Record what happened to a sandbox in its own audit log. A record that
/// cannot be written fails the command (after what it did is said: what
/// is written to a workspace stays), so the log never has a silent gap:
/// "done, but not recorded", and why.
pub fn record(
    sb: &Sandbox,
    action: WorkspaceAction,
    paths: Vec<std::path::PathBuf>,
    detail: String,
) -> anyhow::Result<()> {
    warden_runtime::lifecycle::record(sb, action, paths, detail).map_err(|e| {
        anyhow::Error::new(e).context(format!(
            "done, but the {} is not recorded in the audit log of sandbox {}",
            action.as_str(),
            sb.name()
        ))
    })
}

/// Record on a path that fails anyway: the record's own failure is said
/// too.
fn record_failure(
    sb: &Sandbox,
    action: WorkspaceAction,
    paths: Vec<std::path::PathBuf>,
    detail: String,
) {
    if let Err(e) = warden_runtime::lifecycle::record(sb, action, paths, detail) {
        eprintln!(
            "warden: the {} is not recorded in the audit log of sandbox {}: {:#}",
            action.as_str(),
            sb.name(),
            anyhow::Error::new(e)
        );
    }
}

/// The sandboxes a daemon of this state directory keeps in a warm pool
/// (started, waiting for a create, nobody's yet), by name: none when no
/// daemon ever kept its records here.
fn pooled(store: &Store) -> std::collections::HashSet<String> {
    if !store.root().join(warden_daemon::DB_FILE).exists() {
        return Default::default();
    }
    warden_daemon::open_db(store.root())
        .and_then(|db| db.pooled(None))
        .map(|rows| rows.into_iter().map(|(id, _)| id).collect())
        .unwrap_or_default()
}

pub fn ls(store: &Store, json: bool) -> anyhow::Result<u8> {
    let list = store.list()?;
    let pool = pooled(store);
    if json {
        // A paused sandbox says so (its supervisor's record holds it).
        let mut out = serde_json::to_value(&list)?;
        if let Some(rows) = out.as_array_mut() {
            for row in rows.iter_mut() {
                let name = row["name"].as_str().unwrap_or_default().to_string();
                let paused = store
                    .get(&name)
                    .ok()
                    .and_then(|sb| warden_runtime::lifecycle::paused_since(&sb));
                if let Some(since) = paused {
                    row["state"] = "paused".into();
                    row["paused_ms"] = since.into();
                } else if store
                    .get(&name)
                    .is_ok_and(|sb| warden_runtime::lifecycle::on_disk(&sb))
                {
                    // Paused to disk, no supervisor holding it.
                    row["state"] = "paused".into();
                    row["on_disk"] = true.into();
                }
                if pool.contains(&name) {
                    row["pooled"] = true.into();
                }
            }
        }
        println!("{}", warden_audit::json::to_string_pretty(&out)?);
        return Ok(0);
    }
    println!(
        "{:<24} {:<14} {:<9} {:>5} {:>8} {:>8} {:>8} {:>5}  WORKSPACE",
        "NAME", "PROFILE", "STATE", "PROCS", "MEMORY", "EGRESS", "CHANGES", "AGE"
    );
    for e in list {
        let sb = store.get(&e.name)?;
        let record = sb.dir().join(warden_runtime::state::SUPERVISOR);
        let had_supervisor = record.exists();
        let live = super::lifecycle::running(&sb);
        let status = live
            .then(|| {
                warden_runtime::client::Connection::open(
                    &sb.dir().join(warden_runtime::state::CONTROL),
                )
                .and_then(|c| c.status())
                .ok()
            })
            .flatten();
        let state = if status.as_ref().is_some_and(|s| s.paused_ms.is_some()) {
            "paused".to_string()
        } else if live && pool.contains(&e.name) {
            // Running, in a daemon's warm pool: nobody's until a create
            // takes it (the API lists it only then).
            "pooled".to_string()
        } else if live {
            "running".to_string()
        } else if warden_runtime::lifecycle::on_disk(&sb) {
            // Its VM paused to disk by a supervisor that is gone (or a
            // resume of it refused): `warden resume` restores it.
            "paused".to_string()
        } else if had_supervisor {
            "dead".to_string()
        } else if e.in_use {
            "running".to_string()
        } else {
            format!("{:?}", e.state).to_lowercase()
        };
        let dash = || "-".to_string();
        println!(
            "{:<24} {:<14} {:<9} {:>5} {:>8} {:>8} {:>8} {:>5}  {}",
            printable(&e.name),
            printable(e.profile.as_deref().unwrap_or("-")),
            state,
            status
                .as_ref()
                .map(|s| s.processes.to_string())
                .unwrap_or_else(dash),
            status
                .as_ref()
                .and_then(|s| s.memory_bytes)
                .map(human)
                .unwrap_or_else(dash),
            status
                .as_ref()
                .map(|s| human(s.egress_bytes))
                .unwrap_or_else(dash),
            human(e.changes_bytes),
            age(e.age_secs),
            warden_workspace::printable_path(&e.workspace)
        );
        if e.changes_lost {
            eprintln!("warden: {}", lost_notice(&e.name));
        }
    }
    Ok(0)
}

pub fn rm(store: &Store, names: &[String], force: bool) -> anyhow::Result<u8> {
    for name in names {
        let sb = store.get(name)?;
        // Said here: a dead supervisor found on the way is cleaned.
        super::lifecycle::running(&sb);
        match warden_runtime::lifecycle::remove(store, name, force) {
            Err(e @ warden_runtime::lifecycle::LifecycleError::Running { .. }) => {
                anyhow::bail!("{e} (`warden stop {name}`, or `warden rm --force {name}`)")
            }
            r => r?,
        }
        println!("removed sandbox {name}");
    }
    Ok(0)
}

/// Text from the sandbox made safe to print (the library's rule, one for
/// every front door).
pub(crate) use warden_workspace::printable;

// The profile's `filesystem.runs_on_host` globs of a named sandbox (a
// `run --overlay` sandbox keeps them in its metadata, which the library
// reads itself), and the host's own git hooks paths: one rule for every
// front door.
use warden_runtime::review::{host_git_hooks, host_git_includes, owner_home, runs_on_host};

/// Whether the sandbox still runs (its supervisor is alive, or a `warden
/// run` holds its lock): its layer can still change.
fn still_running(sb: &Sandbox) -> bool {
    super::lifecycle::running(sb)
        || matches!(sb.lock(), Err(warden_workspace::StoreError::InUse { .. }))
}

fn kind_label(k: ChangeKind) -> &'static str {
    match k {
        ChangeKind::Added => "added",
        ChangeKind::Modified => "modified",
        ChangeKind::Deleted => "deleted",
        ChangeKind::Mode => "mode",
        ChangeKind::TypeChanged => "type changed",
        ChangeKind::Renamed => "renamed",
    }
}

fn describe(c: &warden_workspace::Change) -> String {
    let path = match &c.from {
        Some(from) => format!(
            "{} -> {}",
            printable(&from.to_string_lossy()),
            printable(&c.path.to_string_lossy())
        ),
        None => printable(&c.path.to_string_lossy()),
    };
    let modes = match (&c.old, &c.new) {
        (Some(o), Some(n)) if o.mode != n.mode => {
            format!(" (mode {:o} -> {:o})", o.mode & 0o7777, n.mode & 0o7777)
        }
        (None, Some(n)) => format!(" (mode {:o})", n.mode & 0o7777),
        _ => String::new(),
    };
    let target = match c.new.as_ref().and_then(|n| n.target.as_ref()) {
        Some(t) => format!(" -> symlink to {}", printable(&t.to_string_lossy())),
        None => String::new(),
    };
    format!("{:<12} {path}{modes}{target}", kind_label(c.kind))
}

/// Said when a sandbox's last run was killed with its layer in memory.
fn lost_notice(name: &str) -> String {
    format!("sandbox {name}: its last run ended without saving its changes (its supervisor was killed while they were held in memory, see --disk): what that run changed is lost; what is shown is the layer as it was when that run started")
}

/// A review's error as the command line says it: a refusal of the
/// workspace's own directory (moved or replaced since the sandbox was
/// made, or reached through a link) carries its reason code, the same the
/// API answers.
fn review_failed<E: std::error::Error + Send + Sync + 'static>(name: &str, e: E) -> anyhow::Error {
    let code = warden_workspace::WorkspaceRefused::find(&e).map(|r| r.code());
    let e = anyhow::Error::new(e);
    match code {
        Some(code) => e.context(format!("sandbox {name}: refused ({code})")),
        None => e,
    }
}

pub fn diff(store: &Store, args: DiffArgs) -> anyhow::Result<u8> {
    let sb = store.get(&args.name)?;
    if still_running(&sb) {
        eprintln!(
            "warden: sandbox {name} is still running: its changes may go on after this diff; `warden stop {name}`, then diff again before you commit",
            name = args.name
        );
    } else if sb.changes_lost() {
        eprintln!("warden: {}", lost_notice(&args.name));
    }
    let opts = DiffOptions {
        paths: args.paths,
        content: true,
        patches: !args.stat,
        renames: true,
        allowed: None,
        runs_on_host: runs_on_host(&sb),
        host_hooks_paths: host_git_hooks(),
        host_git_includes: host_git_includes(),
        owner_home: owner_home(),
        stop: Default::default(),
    };
    let mut found = sb.diff(&opts).map_err(|e| review_failed(&args.name, e))?;
    warden_runtime::review::flag_owners_files(&sb, &mut found, &owners_files(store));
    let listing = warden_workspace::Listing::new(found, args.ignored);
    let summary = listing.left_out_line("shown", "--ignored shows them");
    let changes = listing.shown;
    // What was shown in full is what `commit` may apply; a --stat shows no
    // content and reviews nothing.
    if !args.stat {
        sb.record_review(&changes, warden_workspace::review::OWNER)?;
    }
    if args.json {
        println!("{}", warden_audit::json::to_string_pretty(&changes)?);
        if let Some(line) = &summary {
            eprintln!("warden: {line}");
        }
        return Ok(0);
    }
    if args.stat {
        for line in warden_workspace::stat(&changes).lines() {
            println!("{}", printable(line));
        }
        if let Some(line) = &summary {
            println!("{line}");
        }
        return Ok(0);
    }
    let color = match args.color.as_str() {
        "always" => true,
        "never" => false,
        _ => std::io::stdout().is_terminal(),
    };
    let paint = |code: &str, text: &str| {
        if color {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_string()
        }
    };
    let mut out = std::io::stdout().lock();
    for c in &changes {
        writeln!(out, "{}", paint("1", &describe(c)))?;
        for f in &c.flags {
            writeln!(
                out,
                "{}",
                paint("33", &format!("  ! {}: {}", f.rule, printable(&f.reason)))
            )?;
        }
        match &c.content {
            Some(Content::Text {
                patch: Some(p),
                coarse,
                ..
            }) => {
                if *coarse {
                    writeln!(out, "{}", paint("33", &format!("  ({COARSE_NOTE})")))?;
                }
                for line in warden_workspace::patch_lines(p) {
                    let line = &printable(line);
                    let styled = if line.starts_with("+++") || line.starts_with("---") {
                        paint("1", line)
                    } else if line.starts_with('+') {
                        paint("32", line)
                    } else if line.starts_with('-') {
                        paint("31", line)
                    } else if line.starts_with("@@") {
                        paint("36", line)
                    } else {
                        line.to_string()
                    };
                    writeln!(out, "{styled}")?;
                }
            }
            Some(other) => writeln!(out, "  {other}")?,
            None => {}
        }
    }
    if changes.is_empty() {
        writeln!(out, "no changes")?;
    }
    if let Some(line) = &summary {
        writeln!(out, "{line}")?;
    }
    Ok(0)
}

/// Ask one question on the terminal; the first letter of the answer.
/// Ask on stderr, read one line of stdin; its first letter, lower case.
/// The end of input (a pipe that closed, `</dev/null`, a terminal gone)
/// is `'q'`: quit, never an answer to ask again.
fn ask(prompt: &str) -> anyhow::Result<char> {
    eprint!("{prompt}");
    std::io::stderr().flush()?;
    let mut line = String::new();
    if std::io::stdin().lock().read_line(&mut line)? == 0 {
        eprintln!();
        return Ok('q');
    }
    Ok(line
        .trim()
        .chars()
        .next()
        .unwrap_or('\n')
        .to_ascii_lowercase())
}

/// The files the owner's configuration is read from, as this command's
/// environment finds the catalogue (`warden_runtime::owners_files`): a
/// change to one is flagged `owner-config`, so that the person sees that
/// landing it changes what the owner's profiles say.
/// The settings files a daemon of this state was started with are in it
/// too (`warden_runtime::state::DAEMON_CONFIG`).
fn owners_files(store: &Store) -> warden_runtime::owners_files::OwnersFiles {
    let catalog = warden_runtime::resolve::catalog(|v| std::env::var_os(v));
    let settings = warden_runtime::state::daemon_configs(store.root());
    warden_runtime::owners_files::OwnersFiles::of(&catalog, &[store.root()], &settings)
}

/// What a commit would apply, flags and all, without patches (content is
/// compared, so that a change the review cannot show in full is flagged
/// `not-shown`; so is one the recorded review did not show in full).
fn preview(
    store: &Store,
    sb: &Sandbox,
    args: &CommitArgs,
) -> anyhow::Result<Vec<warden_workspace::Change>> {
    let mut changes = sb
        .diff(&DiffOptions {
            paths: args.paths.clone(),
            content: true,
            patches: false,
            renames: true,
            allowed: None,
            runs_on_host: runs_on_host(sb),
            host_hooks_paths: host_git_hooks(),
            host_git_includes: host_git_includes(),
            owner_home: owner_home(),
            stop: Default::default(),
        })
        .map_err(|e| review_failed(&args.name, e))?;
    warden_runtime::review::flag_owners_files(sb, &mut changes, &owners_files(store));
    if !args.interactive && !args.unreviewed {
        // A commit of what was reviewed: what the review did not show in
        // full is flagged, however fully it could be diffed now.
        sb.hold_to_review(&mut changes, &[warden_workspace::review::OWNER.to_string()]);
    }
    Ok(changes)
}

pub fn commit(store: &Store, args: CommitArgs) -> anyhow::Result<u8> {
    let sb = store.get(&args.name)?;
    // (A `warden run` that holds the lock is refused by the lock itself.)
    if super::lifecycle::running(&sb) {
        anyhow::bail!(
            "nothing committed: sandbox {name} is still running, so its changes are not final; `warden stop {name}`, review with `warden diff {name}`, then commit",
            name = args.name
        );
    }
    let lock = sb.lock()?;
    // Flagged changes are shown first; applying them takes a yes from the
    // person (or --accept-flagged).
    let preview = preview(store, &sb, &args)?;
    let offered = preview
        .iter()
        .filter(|c| args.ignored || !c.ignored)
        .count();
    if offered == 0 {
        println!("no changes to commit in sandbox {}", printable(&args.name));
        if let Some(line) = warden_workspace::left_out_line(
            preview.len(),
            "committed",
            "`warden commit --ignored` commits them",
        ) {
            println!("{line}");
        }
        return Ok(0);
    }
    // An ignored change left out of this commit holds nothing up.
    let flagged: Vec<_> = preview
        .iter()
        .filter(|c| !c.flags.is_empty() && (args.ignored || !c.ignored))
        .collect();
    if !flagged.is_empty() {
        eprintln!("warden: {} change(s) need a second look:", flagged.len());
        for c in &flagged {
            eprintln!("  {}", describe(c));
            for f in &c.flags {
                eprintln!("    ! {}: {}", f.rule, printable(&f.reason));
            }
        }
        if !args.accept_flagged && !args.interactive {
            let terminal = std::io::stdin().is_terminal();
            if !terminal {
                anyhow::bail!(
                    "nothing committed: flagged changes need --accept-flagged (or --interactive, or commit the other paths by name)"
                );
            }
            if ask("apply them too? [y/N] ")? != 'y' {
                anyhow::bail!("nothing committed");
            }
        }
    }
    let interactive = args.interactive;
    let mut decide = |c: &warden_workspace::Change| -> Decision {
        if !interactive {
            return Decision::Apply;
        }
        eprintln!("{}", describe(c));
        for f in &c.flags {
            eprintln!("  ! {}: {}", f.rule, printable(&f.reason));
        }
        // What the change is, before the question about it.
        show(&sb, c);
        loop {
            match ask("apply this change? [y]es, [n]o, [s]how it, [q]uit: ") {
                Ok('y') => return Decision::Apply,
                Ok('n') => return Decision::Skip,
                Ok('s') => show(&sb, c),
                Ok('q') | Err(_) => return Decision::Quit,
                Ok(_) => continue,
            }
        }
    };
    let report = lock.commit(
        &CommitOptions {
            paths: args.paths,
            force: args.force,
            // -i is a fresh review of each change; --unreviewed is asked for.
            reviewed: !interactive && !args.unreviewed,
            // The owner's own review: never one the daemon recorded for
            // a token or a model.
            reviewers: vec![warden_workspace::review::OWNER.to_string()],
            runs_on_host: runs_on_host(&sb),
            host_hooks_paths: host_git_hooks(),
            host_git_includes: host_git_includes(),
            owner_home: owner_home(),
            include_ignored: args.ignored,
        },
        &mut decide,
    );
    let report = match report {
        Ok(r) => r,
        Err(e @ warden_workspace::CommitError::Apply { .. }) => {
            // What went in is recorded as exactly that.
            let applied = match &e {
                warden_workspace::CommitError::Apply { applied, .. } => applied.clone(),
                _ => Vec::new(),
            };
            let detail = format!("{} applied, then stopped: {e}", applied.len());
            record_failure(&sb, WorkspaceAction::Commit, applied, detail);
            return Err(e.into());
        }
        Err(e) => {
            record_failure(
                &sb,
                WorkspaceAction::CommitRefused,
                Vec::new(),
                e.to_string(),
            );
            if matches!(e, warden_workspace::CommitError::Unreviewed(_)) {
                // `diff --stat` is the usual first look, and reviews
                // nothing: say so, and what does.
                return Err(anyhow::anyhow!(
                    "{e}\n(`warden diff --stat` lists the changes without their content, so it \
                     counts as no review: `warden diff {name}` shows them in full)",
                    name = sb.name()
                ));
            }
            return Err(review_failed(&args.name, e));
        }
    };
    let applied: Vec<_> = report.applied.iter().map(|c| c.path.clone()).collect();
    let recorded = record(
        &sb,
        WorkspaceAction::Commit,
        applied,
        format!(
            "{} applied, {} skipped, {} conflicts overridden, {} ignored left out{}",
            report.applied.len(),
            report.skipped.len(),
            report.forced.len(),
            report.ignored.len(),
            if report.quit { ", quit early" } else { "" }
        ),
    );
    for c in &report.applied {
        println!("applied  {}", describe(c));
    }
    for c in &report.forced {
        println!(
            "overwrote a change made in the workspace: {}",
            printable(&c.to_string())
        );
    }
    println!(
        "{} change(s) applied to {}, {} skipped",
        report.applied.len(),
        warden_workspace::printable_path(&sb.meta().workspace),
        report.skipped.len()
    );
    if let Some(line) = warden_workspace::left_out_line(
        report.ignored.len(),
        "committed, left in the sandbox",
        "`warden commit --ignored` commits them",
    ) {
        println!("{line}");
    }
    recorded?;
    Ok(0)
}

/// Print one change's content (the text diff, or what differs) on stderr,
/// for a person deciding about it at the terminal.
fn show(sb: &Sandbox, c: &warden_workspace::Change) {
    let one = sb.diff(&DiffOptions {
        paths: vec![c.path.clone()],
        ..DiffOptions::default()
    });
    let content = one
        .ok()
        .and_then(|all| all.into_iter().find(|d| d.path == c.path))
        .and_then(|d| d.content);
    match content {
        Some(Content::Text {
            patch: Some(p),
            coarse,
            ..
        }) => {
            if coarse {
                eprintln!("  ({COARSE_NOTE})");
            }
            for line in warden_workspace::patch_lines(&p) {
                eprintln!("{}", printable(line));
            }
        }
        Some(other) => eprintln!("  {other}"),
        None => match c.new.as_ref().and_then(|n| n.target.as_ref()) {
            Some(t) => eprintln!("  a symbolic link to {}", printable(&t.to_string_lossy())),
            None => eprintln!("  {} (no content to show)", kind_label(c.kind)),
        },
    }
}

pub fn discard(store: &Store, name: &str, paths: &[PathBuf]) -> anyhow::Result<u8> {
    let sb = store.get(name)?;
    let lock = sb.lock()?;
    let pending = sb
        .diff(&DiffOptions {
            paths: paths.to_vec(),
            content: false,
            patches: false,
            renames: false,
            allowed: None,
            runs_on_host: runs_on_host(&sb),
            host_hooks_paths: host_git_hooks(),
            host_git_includes: host_git_includes(),
            owner_home: owner_home(),
            stop: Default::default(),
        })
        .map_err(|e| review_failed(name, e))?;
    if pending.is_empty() {
        println!("nothing to discard: sandbox {name} has no changes there");
        return Ok(0);
    }
    lock.discard(paths).map_err(|e| review_failed(name, e))?;
    let recorded = record(
        &sb,
        WorkspaceAction::Discard,
        paths.to_vec(),
        if paths.is_empty() {
            "every change".into()
        } else {
            format!("{} path(s)", paths.len())
        },
    );
    println!(
        "discarded {} in sandbox {name}",
        if paths.is_empty() {
            "every change".to_string()
        } else {
            format!("the changes to {} path(s)", paths.len())
        }
    );
    recorded?;
    Ok(0)
}

pub fn snapshot(store: &Store, args: SnapshotArgs) -> anyhow::Result<u8> {
    let sb = store.get(&args.name)?;
    if args.list {
        for s in sb.snapshot_list()? {
            println!("{:<32} {:>8}", s.label, human(s.bytes));
        }
        return Ok(0);
    }
    let lock = sb.lock()?;
    if let Some(label) = &args.delete {
        lock.delete_snapshot(label)?;
        let recorded = record(
            &sb,
            WorkspaceAction::SnapshotDelete,
            Vec::new(),
            label.clone(),
        );
        println!("removed snapshot {label} of sandbox {}", args.name);
        recorded?;
        return Ok(0);
    }
    let info = lock
        .snapshot(args.label.as_deref())
        .map_err(super::lifecycle::copies::copy_refused)?;
    let recorded = record(
        &sb,
        WorkspaceAction::Snapshot,
        Vec::new(),
        info.label.clone(),
    );
    println!(
        "snapshot {} of sandbox {} ({})",
        info.label,
        args.name,
        human(info.bytes)
    );
    recorded?;
    Ok(0)
}

pub fn restore(store: &Store, name: &str, label: &str) -> anyhow::Result<u8> {
    let sb = store.get(name)?;
    let lock = sb.lock()?;
    // A fork or snapshot being made of it copies the layer as it was.
    let _no_copy = warden_runtime::lifecycle::no_copy_meanwhile(&sb)?;
    lock.restore(label)
        .map_err(super::lifecycle::copies::copy_refused)?;
    let recorded = record(&sb, WorkspaceAction::Restore, Vec::new(), label.to_string());
    println!("sandbox {name} is back at snapshot {label}");
    recorded?;
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::printable;

    #[test]
    fn names_and_lines_from_the_sandbox_cannot_drive_the_terminal() {
        assert_eq!(printable("a\tb"), "a\tb");
        assert_eq!(printable("evil\x1b[2K\rsafe"), "evil\\x1b[2K\\x0dsafe");
        assert_eq!(printable("x\ny"), "x\\x0ay");
        assert_eq!(printable("txt.\u{202e}exe"), "txt.\\u{202e}exe");
        assert_eq!(printable("caf\u{e9}"), "caf\u{e9}");
    }
}
