//! Applying a sandbox's changes to the real workspace.
//!
//! The order of work: choose (all, a path filter, or a per-change callback
//! for interactive review); with [`CommitOptions::reviewed`], refuse
//! everything unless each chosen change still has the digest a diff showed;
//! check every chosen change for conflicts and unsafe destinations before
//! touching anything; remove what goes (deepest first); write what comes
//! (parents first), each file through a temporary file in its own
//! directory, fsync'ed and renamed into place, directory modes last;
//! remove the committed entries from the upper layer; advance the baseline.
//! A commit that stops half way still does the last two for what it
//! applied, and says which changes those were.
//!
//! The conflict rule needs no scan of the workspace: a real path that the
//! commit would replace or remove conflicts when its ctime is newer than
//! the sandbox's baseline (it changed on the host since the layer was
//! created or last fully committed), when it was deleted on the host, or
//! when it appeared where the sandbox created a new file.
//!
//! Every real path is reached from the workspace's directory descriptor with
//! `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`: a symbolic link on the
//! way (planted by the host or by an earlier commit) is refused, never
//! followed.

use crate::diff::{self, Change, ChangeKind, DiffError, DiffOptions, Entry, EntryKind};
use crate::fsutil;
use crate::overlay;
use crate::real::{
    ctime_of, kind_of, lstat_at, make_parents, name_of, open_parent, remove_real, write_real,
    Parent, Real,
};
use crate::store::{Layout, Locked, OwnWrite, StoreError};
use rustix::fs::Mode;
use std::collections::BTreeSet;
use std::io;
use std::path::{Path, PathBuf};

/// What the interactive hook decides for one change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Apply,
    Skip,
    /// Stop asking: this change and the rest are skipped, the changes chosen
    /// so far are committed.
    Quit,
}

#[derive(Debug, Clone, Default)]
pub struct CommitOptions {
    /// Only changes at or below these paths (relative to the workspace).
    pub paths: Vec<PathBuf>,
    /// Commit over conflicts (never over unsafe destinations).
    pub force: bool,
    /// Apply only what a person was shown: every chosen change must have
    /// the digest a diff recorded for its path ([`Sandbox::record_review`])
    /// by one of [`CommitOptions::reviewers`]; otherwise nothing is
    /// applied. Off for a review made during the
    /// commit itself (the callback shows each change).
    ///
    /// [`Sandbox::record_review`]: crate::Sandbox::record_review
    pub reviewed: bool,
    /// Whose reviews count for `reviewed` (the principals
    /// [`Sandbox::record_review`] was given): the committer's own, and
    /// the owner's. None counts when it is empty.
    ///
    /// [`Sandbox::record_review`]: crate::Sandbox::record_review
    pub reviewers: Vec<String>,
    /// Globs of paths tools on the host run, besides the sandbox's own
    /// ([`crate::Meta::runs_on_host`]): the changes handed to `decide` are
    /// flagged with them.
    pub runs_on_host: Vec<String>,
    /// `core.hooksPath` values of the host's own git config, as for a
    /// diff ([`DiffOptions::host_hooks_paths`]).
    pub host_hooks_paths: Vec<String>,
    /// Host paths the host's own git config includes, as for a diff
    /// ([`DiffOptions::host_git_includes`]).
    pub host_git_includes: Vec<PathBuf>,
    /// The owner's home, as for a diff ([`DiffOptions::owner_home`]).
    pub owner_home: Option<PathBuf>,
    /// Offer changes the workspace's own ignore files ignore too
    /// ([`Change::ignored`]); without it they are left in the layer and
    /// counted in [`CommitReport::ignored`].
    pub include_ignored: bool,
}

/// A real path that changed on the host since the baseline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    pub path: PathBuf,
    pub reason: &'static str,
}

impl std::fmt::Display for Conflict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", crate::printable_path(&self.path), self.reason)
    }
}

fn list(items: &[Conflict]) -> String {
    items.iter().map(|c| format!("\n  {c}")).collect()
}

fn paths_list(items: &[PathBuf]) -> String {
    if items.is_empty() {
        return String::new();
    }
    let shown: Vec<String> = items.iter().map(|p| crate::printable_path(p)).collect();
    format!(": {}", shown.join(", "))
}

#[derive(Debug, thiserror::Error)]
pub enum CommitError {
    #[error("nothing committed: {} path(s) changed in the workspace since sandbox {name} started:{}\nreview them, then commit again with --force to overwrite, or discard those paths", .conflicts.len(), list(.conflicts))]
    Conflicts {
        name: String,
        conflicts: Vec<Conflict>,
    },
    #[error("nothing committed: refusing to write through these paths of the workspace:{}", list(.0))]
    Unsafe(Vec<Conflict>),
    #[error("nothing committed: {} change(s) are not what `warden diff` showed:{}\nreview them again with `warden diff`, then commit (or commit with --interactive and review each change there)", .0.len(), list(.0))]
    Unreviewed(Vec<Conflict>),
    #[error("cannot open workspace {path}")]
    Workspace {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("commit stopped at {} ({op}); {} change(s) were applied before it{}, the rest were not", crate::printable_path(.path), .applied.len(), paths_list(.applied))]
    Apply {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
        /// The changes applied in full before the commit stopped (recorded
        /// as warden's own writes and removed from the layer).
        applied: Vec<PathBuf>,
    },
    #[error(transparent)]
    Diff(#[from] DiffError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<crate::real::RealError> for CommitError {
    fn from(e: crate::real::RealError) -> CommitError {
        use crate::real::RealError;
        match e {
            RealError::Workspace { path, source } => CommitError::Workspace { path, source },
            // What was applied before it is the commit's to add.
            RealError::Apply { op, path, source } => CommitError::Apply {
                op,
                path,
                source,
                applied: Vec::new(),
            },
        }
    }
}

/// What a commit did.
#[derive(Debug, Default)]
pub struct CommitReport {
    pub applied: Vec<Change>,
    pub skipped: Vec<Change>,
    /// Conflicts overridden by `force`.
    pub forced: Vec<Conflict>,
    /// The hook said [`Decision::Quit`].
    pub quit: bool,
    /// Left out, never offered: ignored by the workspace's own ignore
    /// files (without [`CommitOptions::include_ignored`]).
    pub ignored: Vec<Change>,
}

impl Locked<'_> {
    /// Commit the sandbox's changes (see the module's documentation).
    /// `decide` is asked about each change passing `opts.paths`, in order;
    /// pass `&mut |_| Decision::Apply` to commit them all.
    pub fn commit(
        &self,
        opts: &CommitOptions,
        decide: &mut dyn FnMut(&Change) -> Decision,
    ) -> Result<CommitReport, CommitError> {
        let mut meta = self.fresh_meta()?;
        let sb = self.sandbox;
        let upper = sb.upper();
        let workspace = meta.workspace.clone();
        // Entries of the layer its owner cannot read, opened for the whole
        // commit (and closed again when it ends, however it ends).
        let opened = fsutil::Opened::up(&upper);
        let paths = opts
            .paths
            .iter()
            .map(|p| diff::normalize_filter(&workspace, p))
            .collect::<Result<Vec<_>, _>>()?;
        let diff_opts = DiffOptions {
            paths,
            content: false,
            patches: false,
            renames: true,
            runs_on_host: opts
                .runs_on_host
                .iter()
                .chain(&meta.runs_on_host)
                .cloned()
                .collect(),
            host_hooks_paths: opts.host_hooks_paths.clone(),
            host_git_includes: opts.host_git_includes.clone(),
            owner_home: opts.owner_home.clone(),
            ..DiffOptions::default()
        };
        let plain = meta.layout == Layout::Copy;
        // The real workspace, opened and checked once: what the commit
        // compares with, checks against and writes to is this one
        // directory, whatever is renamed or linked at its path meanwhile.
        let real = Real::open(&workspace, meta.workspace_id)?;
        let low = real.tree().map_err(|source| CommitError::Workspace {
            path: workspace.clone(),
            source,
        })?;
        let changes = diff::diff_opened(&upper, &workspace, &low, &diff_opts, plain, &opened)?;

        // 1. Choose.
        let mut chosen = vec![false; changes.len()];
        let mut report = CommitReport::default();
        let mut left_out = vec![false; changes.len()];
        for (i, c) in changes.iter().enumerate() {
            if c.ignored && !opts.include_ignored {
                left_out[i] = true;
                continue;
            }
            match decide(c) {
                Decision::Apply => chosen[i] = true,
                Decision::Skip => {}
                Decision::Quit => {
                    report.quit = true;
                    break;
                }
            }
        }
        settle_dependencies(&changes, &mut chosen);

        // 2. Check everything before touching anything: what was reviewed,
        // then the destinations.
        if opts.reviewed {
            let shown = sb.reviewed(&opts.reviewers);
            let unreviewed: Vec<Conflict> = changes
                .iter()
                .zip(&chosen)
                .filter(|(_, &on)| on)
                .filter_map(|(c, _)| match shown.get(&c.path) {
                    Some(_) if crate::review::seen(&shown, &c.path, &c.digest).is_some() => None,
                    Some(_) => Some(Conflict {
                        path: c.path.clone(),
                        reason: "changed in the sandbox since `warden diff` showed it",
                    }),
                    None => Some(Conflict {
                        path: c.path.clone(),
                        reason: "never shown by `warden diff`",
                    }),
                })
                .collect();
            if !unreviewed.is_empty() {
                return Err(CommitError::Unreviewed(unreviewed));
            }
        }
        let (conflicts, refusals) = check_all(&real, &changes, &chosen, &meta)?;
        if !refusals.is_empty() {
            return Err(CommitError::Unsafe(refusals));
        }
        if !conflicts.is_empty() && !opts.force {
            return Err(CommitError::Conflicts {
                name: sb.name().to_string(),
                conflicts,
            });
        }
        report.forced = conflicts;

        // 3, 4. Apply; whatever happens, record what was applied.
        let mut done = Applied {
            remaining: changes.iter().map(parts).collect(),
            written: Vec::new(),
            touched_dirs: BTreeSet::new(),
        };
        let outcome = apply(&real, &upper, &changes, &chosen, opts.force, &mut done);
        for dir in &done.touched_dirs {
            if let Ok(Parent::Dir(fd)) = real.parent(&dir.join("x")) {
                let _ = rustix::fs::fsync(&fd);
            }
        }

        // 5. Forget what was committed from the layer.
        for (i, (c, on)) in changes.into_iter().zip(chosen).enumerate() {
            if on && done.remaining[i] == 0 {
                report.applied.push(c);
            } else if left_out[i] && !on {
                report.ignored.push(c);
            } else {
                report.skipped.push(c);
            }
        }
        if meta.layout == Layout::Overlay {
            clean_upper(&upper, &workspace, &low, &report.applied);
        }

        // 6. Advance the baseline when nothing is left; else remember
        // warden's own writes so they are not taken for the host's.
        let left = diff::diff_opened(
            &upper,
            &workspace,
            &low,
            &DiffOptions {
                content: false,
                patches: false,
                renames: false,
                ..DiffOptions::default()
            },
            plain,
            &opened,
        );
        if outcome.is_ok() && left.as_ref().is_ok_and(|l| l.is_empty()) {
            meta.baseline = self.new_baseline()?;
            meta.own_writes.clear();
        } else {
            record_own_writes(&real, &mut meta, &done);
        }
        self.write_meta(&meta)?;
        // What landed is no longer a change anyone reviewed: the same
        // bytes made again in the layer are a new change to show.
        let landed: Vec<PathBuf> = report
            .applied
            .iter()
            .flat_map(|c| c.paths().map(Path::to_path_buf))
            .collect();
        if !landed.is_empty() {
            sb.forget_reviews(&landed, false)?;
        }
        match outcome {
            Ok(()) => {
                left?;
                Ok(report)
            }
            Err(CommitError::Apply {
                op, path, source, ..
            }) => Err(CommitError::Apply {
                op,
                path,
                source,
                applied: report.applied.iter().map(|c| c.path.clone()).collect(),
            }),
            Err(e) => Err(e),
        }
    }
}

/// Remember the ctimes warden's own writes left (`done`), so that the next
/// commit does not take them for changes made on the host.
fn record_own_writes(real: &Real, meta: &mut crate::store::Meta, done: &Applied) {
    let mut record = |rel: &Path| {
        if let Ok(Parent::Dir(fd)) = real.parent(rel) {
            let st = if rel.as_os_str().is_empty() {
                rustix::fs::fstat(&fd).ok()
            } else {
                lstat_at(&fd, rel).ok().flatten()
            };
            if let Some(st) = st {
                meta.own_writes.retain(|w| w.path != rel);
                meta.own_writes.push(OwnWrite {
                    path: rel.to_path_buf(),
                    ctime: ctime_of(&st),
                });
            }
        }
    };
    for p in &done.written {
        record(p);
    }
    for d in &done.touched_dirs {
        record(d);
    }
}

/// What a commit has done so far.
struct Applied {
    /// Per change, the operations (removal, write) still to do.
    remaining: Vec<u8>,
    /// Paths written.
    written: Vec<PathBuf>,
    /// Directories whose entries changed.
    touched_dirs: BTreeSet<PathBuf>,
}

/// How many operations apply change `c`: a removal of what goes, a write
/// of what comes.
fn parts(c: &Change) -> u8 {
    u8::from(removal(c).is_some()) + u8::from(c.new.is_some())
}

/// The real entry change `c` removes, if any.
fn removal(c: &Change) -> Option<(&Path, EntryKind)> {
    match (c.kind, &c.old) {
        (ChangeKind::Deleted | ChangeKind::TypeChanged, Some(old)) => Some((&c.path, old.kind)),
        (ChangeKind::Renamed, Some(old)) => c.from.as_deref().map(|f| (f, old.kind)),
        _ => None,
    }
}

/// Check every chosen change's destinations: conflicts (overridable) and
/// refusals (never).
fn check_all(
    real: &Real,
    changes: &[Change],
    chosen: &[bool],
    meta: &crate::store::Meta,
) -> Result<(Vec<Conflict>, Vec<Conflict>), CommitError> {
    let created_dirs: BTreeSet<&Path> = changes
        .iter()
        .zip(chosen)
        .filter(|(c, &on)| on && creates_dir(c))
        .map(|(c, _)| c.path.as_path())
        .collect();
    let mut conflicts = Vec::new();
    let mut refusals = Vec::new();
    for (c, _) in changes.iter().zip(chosen).filter(|(_, &on)| on) {
        for (rel, expected) in expectations(c) {
            let copied_up = c.kind == ChangeKind::Added && c.copied_up;
            let check = check_path(real, rel, expected, copied_up, &created_dirs, meta).map_err(
                |source| CommitError::Apply {
                    op: "check",
                    path: rel.to_path_buf(),
                    source,
                    applied: Vec::new(),
                },
            )?;
            match check {
                Check::Clear => {}
                Check::Conflict(reason) => conflicts.push(Conflict {
                    path: rel.to_path_buf(),
                    reason,
                }),
                Check::Refused(reason) => refusals.push(Conflict {
                    path: rel.to_path_buf(),
                    reason,
                }),
            }
        }
        if c.new.as_ref().is_some_and(|n| n.kind == EntryKind::Other) {
            refusals.push(Conflict {
                path: c.path.clone(),
                reason: "special files (FIFOs, sockets, devices) are not committed",
            });
        }
    }
    Ok((conflicts, refusals))
}

/// Removals, deepest first; writes, parents first (walk order); the modes
/// of directories last, deepest first, so that a directory the sandbox
/// left unreadable or unwritable is filled before it is closed.
fn apply(
    real: &Real,
    upper: &Path,
    changes: &[Change],
    chosen: &[bool],
    force: bool,
    done: &mut Applied,
) -> Result<(), CommitError> {
    let mut removals: Vec<(usize, &Path, EntryKind)> = changes
        .iter()
        .enumerate()
        .filter(|(i, _)| chosen[*i])
        .filter_map(|(i, c)| removal(c).map(|(p, k)| (i, p, k)))
        .collect();
    removals.sort_by_key(|(_, p, _)| std::cmp::Reverse(p.components().count()));
    for (i, rel, kind) in &removals {
        remove_real(real, rel, *kind)?;
        done.touched_dirs.insert(parent_rel(rel));
        done.remaining[*i] -= 1;
    }
    let mut dir_modes: Vec<(&Path, Mode)> = Vec::new();
    for (i, c) in changes.iter().enumerate().filter(|(i, _)| chosen[*i]) {
        let Some(new) = &c.new else { continue };
        if force {
            // Overriding "deleted on the host": its directories come back.
            make_parents(real, &c.path)?;
        }
        let landed = write_real(real, upper, c, new)?;
        if new.kind == EntryKind::Dir {
            dir_modes.push((&c.path, Mode::from_raw_mode(landed)));
        }
        done.written.push(c.path.clone());
        done.touched_dirs.insert(parent_rel(&c.path));
        done.remaining[i] -= 1;
    }
    dir_modes.sort_by_key(|(p, _)| std::cmp::Reverse(p.components().count()));
    for (rel, mode) in dir_modes {
        let parent = open_parent(real, rel)?;
        // As in `write_real`: never through a link put in its place.
        crate::fsutil::chmod_entry(&parent, name_of(rel), mode.as_raw_mode()).map_err(
            |source| CommitError::Apply {
                op: "set mode",
                path: rel.to_path_buf(),
                source,
                applied: Vec::new(),
            },
        )?;
    }
    Ok(())
}

fn parent_rel(rel: &Path) -> PathBuf {
    rel.parent().map(Path::to_path_buf).unwrap_or_default()
}

fn creates_dir(c: &Change) -> bool {
    c.new.as_ref().is_some_and(|n| n.kind == EntryKind::Dir)
        && !c.old.as_ref().is_some_and(|o| o.kind == EntryKind::Dir)
}

fn removes_dir(c: &Change) -> bool {
    matches!(c.kind, ChangeKind::Deleted | ChangeKind::TypeChanged)
        && c.old.as_ref().is_some_and(|o| o.kind == EntryKind::Dir)
}

/// Keep the chosen set applicable: content cannot go into a directory whose
/// creation was skipped, and a directory cannot be removed while content of
/// it that the sandbox deleted or moved is kept.
fn settle_dependencies(changes: &[Change], chosen: &mut [bool]) {
    for i in 0..changes.len() {
        if !chosen[i] {
            continue;
        }
        let path = &changes[i].path;
        let blocked = changes
            .iter()
            .zip(chosen.iter())
            .any(|(d, &on)| !on && creates_dir(d) && path.starts_with(&d.path) && path != &d.path);
        if blocked {
            chosen[i] = false;
        }
    }
    for i in (0..changes.len()).rev() {
        if !chosen[i] || !removes_dir(&changes[i]) {
            continue;
        }
        let dir = changes[i].path.clone();
        let kept = changes
            .iter()
            .zip(chosen.iter())
            .any(|(d, &on)| !on && d.paths().any(|p| p.starts_with(&dir) && p != dir));
        if kept {
            chosen[i] = false;
        }
    }
}

/// The real paths a change touches, each with the entry the diff saw there
/// (`None`: the sandbox expects nothing there).
fn expectations(c: &Change) -> Vec<(&Path, Option<&Entry>)> {
    match (&c.kind, &c.from) {
        (ChangeKind::Renamed, Some(from)) => {
            vec![(c.path.as_path(), None), (from.as_path(), c.old.as_ref())]
        }
        _ => vec![(c.path.as_path(), c.old.as_ref())],
    }
}

enum Check {
    Clear,
    Conflict(&'static str),
    Refused(&'static str),
}

fn check_path(
    real: &Real,
    rel: &Path,
    expected: Option<&Entry>,
    copied_up: bool,
    created_dirs: &BTreeSet<&Path>,
    meta: &crate::store::Meta,
) -> io::Result<Check> {
    let parent = match real.parent(rel)? {
        Parent::Dir(fd) => fd,
        Parent::Refused(why) => return Ok(Check::Refused(why)),
        Parent::Missing => {
            let made_here = rel.ancestors().skip(1).any(|a| created_dirs.contains(a));
            return Ok(match (expected, made_here) {
                (None, true) => Check::Clear,
                (None, false) => {
                    Check::Conflict("its directory was deleted or replaced on the host")
                }
                (Some(_), _) => Check::Conflict("deleted on the host since the sandbox started"),
            });
        }
    };
    let st = lstat_at(&parent, rel)?;
    // An added file that overlay copied up from a lower file (its origin
    // mark) came from a workspace file: at another path (moved, then
    // edited), or at this one, deleted on the host since. The origin's path
    // is not recorded, so a directory changed on the host since the
    // baseline is taken as the latter.
    let dir_changed = || {
        rustix::fs::fstat(&parent).is_ok_and(|st| {
            let ctime = ctime_of(&st);
            let parent_rel = parent_rel(rel);
            ctime > meta.baseline
                && !meta
                    .own_writes
                    .iter()
                    .any(|w| w.path == parent_rel && w.ctime == ctime)
        })
    };
    Ok(match (expected, st) {
        (None, None) if copied_up && dir_changed() => Check::Conflict(
            "copied from a workspace file that may have been deleted on the host since (its directory changed)",
        ),
        (None, None) => Check::Clear,
        (None, Some(_)) => Check::Conflict("created on the host since the sandbox started"),
        (Some(_), None) => Check::Conflict("deleted on the host since the sandbox started"),
        (Some(e), Some(st)) => {
            let ctime = ctime_of(&st);
            let own = meta
                .own_writes
                .iter()
                .any(|w| w.path == rel && w.ctime == ctime);
            if kind_of(&st) != e.kind {
                Check::Conflict("replaced on the host by another kind of file")
            } else if ctime > meta.baseline && !own {
                Check::Conflict("changed on the host since the sandbox started")
            } else {
                Check::Clear
            }
        }
    })
}

/// Remove committed entries from the upper layer, deepest first, so that
/// the merged view now shows the (updated) real files. Entries below an
/// opaque directory stay while the directory does: removing them alone would
/// hide the committed real files behind the opaque mark. Such a directory
/// goes as a whole once nothing below it differs from the real one.
fn clean_upper(upper: &Path, workspace: &Path, real: &crate::beneath::Tree, applied: &[Change]) {
    // Beneath the layer's and the workspace's descriptors (the commit's
    // own): a link of the layer is removed, never followed.
    let Ok(layer) = crate::beneath::Tree::layer(upper) else {
        return;
    };
    let mut paths: Vec<&Path> = applied.iter().flat_map(|c| c.paths()).collect();
    paths.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    paths.dedup();
    let mut opaque_dirs = BTreeSet::new();
    for rel in paths {
        // The top-most opaque directory at or above `rel`, if any.
        let top_opaque = rel
            .ancestors()
            .filter(|a| !a.as_os_str().is_empty())
            .filter(|a| overlay::is_opaque_at(&layer, a))
            .last();
        if let Some(dir) = top_opaque {
            opaque_dirs.insert(dir.to_path_buf());
            continue;
        }
        if let (Ok(Some(st)), Ok((dir, name))) = (layer.lstat(rel), layer.parent(rel)) {
            let flags = if crate::beneath::file_type(&st) == rustix::fs::FileType::Directory {
                rustix::fs::AtFlags::REMOVEDIR
            } else {
                rustix::fs::AtFlags::empty()
            };
            let _ = rustix::fs::unlinkat(&dir, name, flags);
        }
    }
    // Directories copied up only to hold what was just committed: empty now,
    // and (same mode as the real one) no change of their own.
    let mut parents: Vec<&Path> = applied
        .iter()
        .flat_map(|c| c.paths())
        .flat_map(|p| p.ancestors().skip(1))
        .filter(|a| !a.as_os_str().is_empty())
        .collect();
    parents.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    parents.dedup();
    let is_dir =
        |st: &rustix::fs::Stat| crate::beneath::file_type(st) == rustix::fs::FileType::Directory;
    for rel in parents {
        let (Ok(Some(u)), Ok(Some(r))) = (layer.lstat(rel), real.lstat(rel)) else {
            continue;
        };
        if is_dir(&u)
            && is_dir(&r)
            && u.st_mode & 0o7777 == r.st_mode & 0o7777
            && !overlay::is_opaque_at(&layer, rel)
        {
            // Fails, as it should, when the directory is not empty.
            if let Ok((dir, name)) = layer.parent(rel) {
                let _ = rustix::fs::unlinkat(&dir, name, rustix::fs::AtFlags::REMOVEDIR);
            }
        }
    }
    for dir in opaque_dirs {
        let opts = DiffOptions {
            paths: vec![dir.clone()],
            content: false,
            patches: false,
            renames: false,
            allowed: None,
            runs_on_host: Vec::new(),
            host_hooks_paths: Vec::new(),
            host_git_includes: Vec::new(),
            owner_home: None,
            stop: Default::default(),
        };
        if diff::diff_real(upper, workspace, real, &opts, false).is_ok_and(|left| left.is_empty()) {
            if let Ok((parent, name)) = layer.parent(&dir) {
                let _ = fsutil::remove_at(&parent, name, &dir);
            }
        }
    }
}
