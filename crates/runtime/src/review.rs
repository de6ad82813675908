//! Reviewing and committing a sandbox's changes, as every front door
//! does it: which paths the host runs (the sandbox's spec and the host's
//! own git configuration flag changes to them), and the rules of a commit
//! made without a person at a terminal: nothing while the sandbox runs,
//! flagged changes only when accepted by name, only what a diff showed,
//! conflicts with the host's tree refused unless forced. The diff, the
//! flags and the commit itself are the `workspace` crate's.

use crate::lifecycle::record;
use crate::owners_files::{self, OwnersFiles};
use std::path::PathBuf;
use warden_audit::WorkspaceAction;
use warden_workspace::{
    Change, CommitError, CommitOptions, CommitReport, Decision, DiffError, DiffOptions, Flag,
    LayerError, Sandbox, Stop, StoreError,
};

/// Why a commit did not happen.
#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    #[error("nothing committed: sandbox {0} is still running, so its changes are not final; stop it, review its changes, then commit")]
    Running(String),
    #[error("nothing committed: {} flagged change(s) need an explicit acceptance (or commit the other paths by name)", .0.len())]
    Flagged(Vec<Change>),
    #[error(transparent)]
    Diff(#[from] DiffError),
    #[error(transparent)]
    Commit(#[from] CommitError),
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The commit (or discard) was made, but its record could not be
    /// written: the audit log has no silent gap, so this is an error all
    /// the same. Files written to the workspace cannot be taken back:
    /// what was done stands, and the caller is told it is not recorded.
    #[error(
        "{applied} change(s) were applied, but this is not recorded in the sandbox's audit log"
    )]
    Unrecorded {
        applied: usize,
        #[source]
        source: crate::lifecycle::RecordError,
    },
    /// Refused, or stopped part-way, as `refusal` says; and that is not
    /// recorded in the sandbox's audit log either.
    #[error("{refusal}; and this is not recorded in the sandbox's audit log")]
    RefusalUnrecorded {
        refusal: Box<ReviewError>,
        #[source]
        source: crate::lifecycle::RecordError,
    },
    /// Changes to files the owner's configuration is read from (see
    /// [`crate::owners_files`]), in a commit whose rules do not let them
    /// land: the owner's word is the owner's to write.
    #[error("nothing committed: {} change(s) write a file the owner's configuration is read from (a profile, a file a profile names, the daemon's settings); only the owner commits those", .0.len())]
    OwnersFiles(Vec<Change>),
    #[error("nothing discarded: sandbox {0} is still running, so its changes are not final; stop it, review its changes, then discard")]
    RunningDiscard(String),
    #[error("nothing discarded: name the paths to discard (all of a sandbox's changes go with the sandbox)")]
    NoPaths,
    #[error("cannot discard the changes")]
    Discard(#[from] LayerError),
}

impl ReviewError {
    /// The stable reason code of a refusal every door words alike: the
    /// workspace's own directory refused ([`warden_workspace::WorkspaceRefused`]:
    /// `workspace_moved`, `workspace_link`), as deep in the chain as it is.
    pub fn reason(&self) -> Option<&'static str> {
        match self {
            ReviewError::RefusalUnrecorded { refusal, .. } => refusal.reason(),
            e => warden_workspace::WorkspaceRefused::find(e).map(|r| r.code()),
        }
    }
}

/// Globs of workspace paths that tools on the host run, from the
/// sandbox's stored spec (`filesystem.runs_on_host`).
pub fn runs_on_host(sb: &Sandbox) -> Vec<String> {
    crate::state::read_json::<crate::state::Stored>(&sb.dir().join(crate::state::STORED))
        .map(|s| s.spec.filesystem.runs_on_host)
        .unwrap_or_default()
}

/// The host's own git config files (system, global) git reads in every
/// repository: `/etc/gitconfig`, `$XDG_CONFIG_HOME/git/config` (or
/// `~/.config/git/config`), `~/.gitconfig`, or `$GIT_CONFIG_GLOBAL`, as
/// the binary read those variables (`warden_jail::settings`); and the
/// home that expands `~/` in them.
fn host_git_configs() -> (Vec<PathBuf>, Option<PathBuf>) {
    let host = warden_jail::settings::Settings::current();
    let home = host.home.clone();
    let mut configs = vec![PathBuf::from("/etc/gitconfig")];
    if let Some(global) = &host.git_config_global {
        configs.push(global.clone());
    } else {
        match &host.config_home {
            Some(x) => configs.push(x.join("git/config")),
            None => configs.extend(home.as_ref().map(|h| h.join(".config/git/config"))),
        }
        configs.extend(home.as_ref().map(|h| h.join(".gitconfig")));
    }
    (configs, home)
}

/// Where the host's own git config (system, global) sends git for hooks
/// in every repository.
pub fn host_git_hooks() -> Vec<String> {
    let (configs, home) = host_git_configs();
    configs
        .iter()
        .flat_map(|c| warden_workspace::host_hooks_paths(c, home.as_deref()))
        .collect()
}

/// The files the host's own git config (system, global) includes, to
/// git's depth: git reads them as config in every repository, so one in
/// a workspace is flagged `git-config`.
pub fn host_git_includes() -> Vec<PathBuf> {
    let (configs, home) = host_git_configs();
    configs
        .iter()
        .flat_map(|c| warden_workspace::host_config_includes(c, home.as_deref()))
        .collect()
}

/// The owner's home, as the binary read it (`warden_jail::settings`),
/// with its links resolved: what git expands `~/` to in a work-tree git
/// file (`include.path = ~/...`), handed to the review so that no
/// library reads it from the environment.
pub fn owner_home() -> Option<PathBuf> {
    let home = warden_jail::settings::Settings::current().home.clone()?;
    Some(std::fs::canonicalize(&home).unwrap_or(home))
}

/// What a review of `paths` (all when empty) computes.
pub fn diff_options(sb: &Sandbox, paths: Vec<PathBuf>, content: bool) -> DiffOptions {
    DiffOptions {
        paths,
        content,
        patches: content,
        renames: true,
        allowed: None,
        runs_on_host: runs_on_host(sb),
        host_hooks_paths: host_git_hooks(),
        host_git_includes: host_git_includes(),
        owner_home: owner_home(),
        stop: Default::default(),
    }
}

/// Whether the sandbox still runs (its supervisor is alive, or a run
/// holds its lock): its layer can still change.
pub fn still_running(sb: &Sandbox) -> bool {
    crate::lifecycle::liveness(sb).running() || matches!(sb.lock(), Err(StoreError::InUse { .. }))
}

/// Flag each change that writes, removes or replaces a file of `owners`
/// on the host ([`crate::owners_files::FLAG`]); a change ignored by the
/// workspace's own ignore files is shown all the same once flagged.
pub fn flag_owners_files(sb: &Sandbox, changes: &mut [Change], owners: &OwnersFiles) {
    let workspace = &sb.meta().workspace;
    for c in changes.iter_mut() {
        if c.paths().any(|p| owners.touched_by(&workspace.join(p))) {
            c.flags.push(Flag {
                rule: owners_files::FLAG,
                reason: "the owner's configuration is read from this file (a catalogue profile or preset, a file a profile extends or names, the daemon's settings): what it says is taken as the owner's word".into(),
                findings: Vec::new(),
            });
            c.ignored = false;
        }
    }
}

/// The changes of `paths` (all when empty). A change to one of `owners`'
/// files is flagged. Recorded as shown to `by` when it is given, and
/// only when the content was asked for (a listing without it shows no
/// change's content, so reviews nothing): a later [`commit`] that counts
/// `by`'s reviews applies a change only while it is what this showed.
/// The door decides who `by` is: a person who may commit, never the
/// sandbox's own agent. `stop`: when the walk stops before its end (a
/// network door's caller leaving, its bounds).
pub fn review(
    sb: &Sandbox,
    paths: Vec<PathBuf>,
    content: bool,
    owners: &OwnersFiles,
    by: Option<&str>,
    stop: &Stop,
) -> Result<Vec<Change>, ReviewError> {
    let mut opts = diff_options(sb, paths, content);
    opts.stop = stop.clone();
    let mut changes = sb.diff(&opts)?;
    flag_owners_files(sb, &mut changes, owners);
    if let Some(by) = by.filter(|_| content) {
        sb.record_review(&changes, by)?;
    }
    Ok(changes)
}

/// Commit `paths` (all when empty) of a stopped sandbox, by the rules of
/// `warden commit` without a terminal: flagged changes only with
/// `accept_flagged`, only what a review showed, conflicts only with
/// `force`. Recorded in the sandbox's audit log either way.
/// The rules of a commit made without a person at a terminal.
#[derive(Debug, Clone, Copy, Default)]
pub struct CommitRules {
    /// Overwrite changes made on the host too (conflicts).
    pub force: bool,
    /// Apply flagged changes too.
    pub accept_flagged: bool,
    /// Apply changes the workspace's own ignore files ignore too.
    pub include_ignored: bool,
    /// Let changes to the owner's configuration files land (flagged, so
    /// with `accept_flagged` too): the owner's own commit only. Without
    /// it such a change refuses the whole commit, whatever else is asked.
    pub owners_files: bool,
}

/// `owners`: the owner's configuration files as they are now (computed
/// again for each commit: the owner's configuration may have changed
/// since the sandbox was made); a change to one is flagged, and refused
/// unless `rules.owners_files`. `reviewers`: whose reviews count (the
/// committer's own, and the owner's; see [`review`]). `stop` stops the
/// commit while it reviews, before anything lands; once changes land it
/// runs to its end (half a commit is worse than a slow one).
pub fn commit(
    sb: &Sandbox,
    paths: Vec<PathBuf>,
    rules: CommitRules,
    owners: &OwnersFiles,
    reviewers: &[String],
    stop: &Stop,
) -> Result<CommitReport, ReviewError> {
    let CommitRules {
        force,
        accept_flagged,
        include_ignored,
        owners_files,
    } = rules;
    let refused = |e: ReviewError| {
        let detail = e.to_string();
        unrecorded_refusal(
            e,
            record(sb, WorkspaceAction::CommitRefused, Vec::new(), detail),
        )
    };
    if crate::lifecycle::liveness(sb).running() {
        return Err(refused(ReviewError::Running(sb.name().to_string())));
    }
    let lock = sb.lock().map_err(|e| match e {
        StoreError::InUse { .. } => ReviewError::Running(sb.name().to_string()),
        e => ReviewError::Store(e),
    })?;
    // With content (no patches): a change the review cannot show in full
    // is flagged `not-shown` here as in the review, and so needs
    // `accept_flagged`; and so is one the recorded review did not show in
    // full, however fully it could be diffed now (held to the review).
    let mut opts = diff_options(sb, paths.clone(), true);
    opts.patches = false;
    opts.stop = stop.clone();
    let mut preview = sb.diff(&opts)?;
    sb.hold_to_review(&mut preview, reviewers);
    flag_owners_files(sb, &mut preview, owners);
    let owners_changes: Vec<Change> = preview
        .iter()
        .filter(|c| c.flags.iter().any(|f| f.rule == owners_files::FLAG))
        .cloned()
        .collect();
    if !owners_changes.is_empty() && !owners_files {
        return Err(refused(ReviewError::OwnersFiles(owners_changes)));
    }
    // An ignored change left out of this commit holds nothing up.
    let flagged: Vec<Change> = preview
        .iter()
        .filter(|c| !c.flags.is_empty() && (include_ignored || !c.ignored))
        .cloned()
        .collect();
    if !flagged.is_empty() && !accept_flagged {
        return Err(refused(ReviewError::Flagged(flagged)));
    }
    let report = lock.commit(
        &CommitOptions {
            paths,
            force,
            reviewed: true,
            reviewers: reviewers.to_vec(),
            runs_on_host: runs_on_host(sb),
            host_hooks_paths: host_git_hooks(),
            host_git_includes: host_git_includes(),
            owner_home: owner_home(),
            include_ignored,
        },
        &mut |_| Decision::Apply,
    );
    match report {
        Ok(r) => {
            let applied: Vec<PathBuf> = r.applied.iter().map(|c| c.path.clone()).collect();
            let detail = format!(
                "{} applied, {} conflicts overridden, {} ignored by the workspace's .gitignore left out",
                r.applied.len(),
                r.forced.len(),
                r.ignored.len()
            );
            record(sb, WorkspaceAction::Commit, applied, detail).map_err(|source| {
                ReviewError::Unrecorded {
                    applied: r.applied.len(),
                    source,
                }
            })?;
            Ok(r)
        }
        Err(CommitError::Apply {
            op,
            path,
            source,
            applied,
        }) => {
            let shown = applied.clone();
            let e = CommitError::Apply {
                op,
                path,
                source,
                applied,
            };
            let detail = format!("{} applied, then stopped: {e}", shown.len());
            let recorded = record(sb, WorkspaceAction::Commit, shown, detail);
            Err(unrecorded_refusal(e.into(), recorded))
        }
        Err(e) => Err(refused(e.into())),
    }
}

/// Throw away the changes at or below `paths` of a stopped sandbox (never
/// all of them: `paths` names at least one), as `warden discard PATH...`
/// does: the real workspace's entries show through again. Each path is
/// acted on only when it is itself a change (or holds some), never
/// because another path named is; a path through a symbolic link of the
/// layer never is ([`warden_workspace::Locked::discard`]). The changes
/// thrown away, as a review shows them; recorded in the sandbox's audit
/// log.
pub fn discard(sb: &Sandbox, paths: Vec<PathBuf>) -> Result<Vec<Change>, ReviewError> {
    if paths.is_empty() {
        return Err(ReviewError::NoPaths);
    }
    if crate::lifecycle::liveness(sb).running() {
        return Err(ReviewError::RunningDiscard(sb.name().to_string()));
    }
    let lock = sb.lock().map_err(|e| match e {
        StoreError::InUse { .. } => ReviewError::RunningDiscard(sb.name().to_string()),
        e => ReviewError::Store(e),
    })?;
    let pending = sb.diff(&diff_options(sb, paths.clone(), false))?;
    if pending.is_empty() {
        // Nothing to throw away; but a path through a symbolic link of the
        // layer is refused in words, not answered "nothing there" (the
        // layer acts only on paths that are changes, so this changes
        // nothing).
        lock.discard(&paths)?;
        return Ok(pending);
    }
    lock.discard(&paths)?;
    let detail = format!("{} change(s) at {} path(s)", pending.len(), paths.len());
    record(sb, WorkspaceAction::Discard, paths, detail).map_err(|source| {
        ReviewError::Unrecorded {
            applied: pending.len(),
            source,
        }
    })?;
    Ok(pending)
}

/// `refusal`, said together with its record's failure when it has one.
fn unrecorded_refusal(
    refusal: ReviewError,
    recorded: Result<(), crate::lifecycle::RecordError>,
) -> ReviewError {
    match recorded {
        Ok(()) => refusal,
        Err(source) => ReviewError::RefusalUnrecorded {
            refusal: Box::new(refusal),
            source,
        },
    }
}
