//! The sandbox's changes, read from its upper layer against the real
//! workspace (the lower layer).
//!
//! Only the upper directory is walked: each upper entry costs one `lstat` of
//! its lower counterpart, and a content comparison when both are regular
//! files. Unchanged files of the workspace are never visited, so the cost is
//! O(entries in the upper layer), not O(workspace); the one exception is a
//! deletion (a whiteout, or an opaque directory), where the deleted lower
//! subtree is listed so that each deleted file is reported.

use crate::beneath::{file_type, Tree};
pub use crate::change::{Change, ChangeKind, Content, Entry, EntryKind};
use crate::flags;
use crate::overlay;
use rustix::fs::{FileType, Stat};
use std::collections::{BTreeSet, HashMap};
use std::ffi::OsString;
use std::io::{self, Read};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use crate::change::TEXT_DIFF_LIMIT;

#[derive(Debug, thiserror::Error)]
pub enum DiffError {
    #[error("cannot read {} while comparing the sandbox's layer with the workspace", crate::printable_path(.path))]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("path filter {} is outside the workspace", crate::printable_path(.0))]
    Filter(PathBuf),
    /// The real workspace's own directory could not be opened, or is
    /// refused ([`crate::WorkspaceRefused`]: moved, or through a link).
    #[error("cannot open the workspace to compare the sandbox's layer with it")]
    Workspace(#[source] io::Error),
    #[error("the sandbox's layer holds a path longer than PATH_MAX (4096 bytes) below {top}: warden cannot review it; discard it (`warden discard NAME {top}`) or remove the sandbox")]
    TooLong { top: String },
    /// Stopped before its end (see [`crate::stop`]).
    #[error(transparent)]
    Stopped(#[from] crate::stop::Stopped),
}

impl Entry {
    /// The entry at `rel` of `tree`, as `lstat` saw it (`st`); `mode` when
    /// the layer was opened for reading (its mode before).
    fn read(tree: &Tree, rel: &Path, st: &Stat, mode: Option<u32>) -> Result<Entry, DiffError> {
        let kind = match file_type(st) {
            FileType::RegularFile => EntryKind::File,
            FileType::Directory => EntryKind::Dir,
            FileType::Symlink => EntryKind::Symlink,
            _ => EntryKind::Other,
        };
        let target = if kind == EntryKind::Symlink {
            Some(tree.read_link(rel).map_err(read_err(rel))?)
        } else {
            None
        };
        Ok(Entry {
            kind,
            mode: mode.unwrap_or(st.st_mode & 0o7777),
            size: if kind == EntryKind::File {
                u64::try_from(st.st_size).unwrap_or(0)
            } else {
                0
            },
            target,
        })
    }
}

/// What to compute.
#[derive(Debug, Clone)]
pub struct DiffOptions {
    /// Only changes at or below these paths (relative to the workspace);
    /// empty means all.
    pub paths: Vec<PathBuf>,
    /// Compare text files line by line (needed for `--stat` counts).
    pub content: bool,
    /// Also keep the unified diff text.
    pub patches: bool,
    /// Pair deleted and added files with identical content as renames.
    pub renames: bool,
    /// Path globs the agent was expected to touch (from the profile); a
    /// change outside all of them is flagged. `None`: no such rule.
    pub allowed: Option<Vec<String>>,
    /// Path globs of files a tool on the host runs (from the profile: a
    /// `Makefile` where the person runs `make`); a change to one is
    /// flagged `host-exec`.
    pub runs_on_host: Vec<String>,
    /// `core.hooksPath` values of the host's own git config (see
    /// [`crate::host_hooks_paths`]): git looks for hooks there in every
    /// repository, so a change there is flagged `git-hook`.
    pub host_hooks_paths: Vec<String>,
    /// Host paths the host's own git config includes (see
    /// [`crate::host_config_includes`]): one in the workspace, and the
    /// work-tree files it includes, are flagged `git-config`.
    pub host_git_includes: Vec<PathBuf>,
    /// The owner's home, as the front door knows it (never read from the
    /// environment here): git expands `~/` in a path a work-tree git file
    /// names (`include.path = ~/...`, `core.hooksPath`) with it, so a
    /// work-tree file reached that way is judged as one git reads.
    pub owner_home: Option<PathBuf>,
    /// When to stop before the end (see [`crate::stop`]): never, unless
    /// the door says.
    pub stop: crate::stop::Stop,
}

impl Default for DiffOptions {
    fn default() -> Self {
        DiffOptions {
            paths: Vec::new(),
            content: true,
            patches: true,
            renames: true,
            allowed: None,
            runs_on_host: Vec::new(),
            host_hooks_paths: Vec::new(),
            host_git_includes: Vec::new(),
            owner_home: None,
            stop: crate::stop::Stop::default(),
        }
    }
}

/// Make a user's path filter relative to the workspace: `./a` → `a`, an
/// absolute path inside `workspace` → relative; `..` and absolute paths
/// elsewhere are refused.
pub fn normalize_filter(workspace: &Path, p: &Path) -> Result<PathBuf, DiffError> {
    let rel = if p.is_absolute() {
        p.strip_prefix(workspace)
            .map_err(|_| DiffError::Filter(p.to_path_buf()))?
    } else {
        p
    };
    let mut out = PathBuf::new();
    for c in rel.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::CurDir => {}
            _ => return Err(DiffError::Filter(p.to_path_buf())),
        }
    }
    Ok(out)
}

pub(crate) fn selected(path: &Path, filters: &[PathBuf]) -> bool {
    filters.is_empty() || filters.iter().any(|f| path.starts_with(f))
}

/// The changes in `upper` relative to `lower`, in walk order: a directory's
/// creation before its content, a deleted directory's content before the
/// directory itself.
pub fn diff_layers(
    upper: &Path,
    lower: &Path,
    opts: &DiffOptions,
) -> Result<Vec<Change>, DiffError> {
    diff_with(upper, lower, opts, false)
}

/// The changes in the plain directory `copy` relative to `real`: both trees
/// are scanned in full (the copy fallback, see [`crate::copy`]).
pub fn diff_trees(copy: &Path, real: &Path, opts: &DiffOptions) -> Result<Vec<Change>, DiffError> {
    diff_with(copy, real, opts, true)
}

fn diff_with(
    upper: &Path,
    lower: &Path,
    opts: &DiffOptions,
    plain: bool,
) -> Result<Vec<Change>, DiffError> {
    let low = Tree::real(lower).map_err(DiffError::Workspace)?;
    diff_real(upper, lower, &low, opts, plain)
}

/// The diff of `upper` against the real workspace `low` (recorded at
/// `lower`, opened and checked by the caller): every read of the host's
/// side goes through `low`'s descriptor, never `lower` opened again.
pub(crate) fn diff_real(
    upper: &Path,
    lower: &Path,
    low: &Tree,
    opts: &DiffOptions,
    plain: bool,
) -> Result<Vec<Change>, DiffError> {
    let opened = crate::fsutil::Opened::up(upper);
    diff_opened(upper, lower, low, opts, plain, &opened)
}

/// The diff of a layer already opened for reading (a commit holds one
/// open for its whole run) against the real workspace `low`.
pub(crate) fn diff_opened(
    upper: &Path,
    lower: &Path,
    low: &Tree,
    opts: &DiffOptions,
    plain: bool,
    opened: &crate::fsutil::Opened,
) -> Result<Vec<Change>, DiffError> {
    let up = Tree::layer(upper).map_err(read_err(Path::new("")))?;
    let walked = crate::fsutil::deep_stack(|| {
        let mut w = Walker {
            upper: &up,
            lower: low,
            opts,
            plain,
            opened,
            out: Vec::new(),
        };
        // For two plain trees, "opaque" from the top: every entry of the
        // real tree missing from the copy is a deletion.
        w.walk(Path::new(""), true, plain).map(|()| w.out)
    });
    let too_long = |e: DiffError| match e {
        DiffError::Read { path, source } if source.raw_os_error() == Some(36) => {
            // Paths in errors are relative to the trees.
            let top = path
                .components()
                .next()
                .map(|c| crate::printable(&c.as_os_str().to_string_lossy()))
                .unwrap_or_default();
            DiffError::TooLong { top }
        }
        e => e,
    };
    let changes = walked.map_err(too_long)?;
    finish(lower, low, upper, changes, opts, !plain).map_err(too_long)
}

fn finish(
    lower: &Path,
    low: &Tree,
    upper: &Path,
    mut changes: Vec<Change>,
    opts: &DiffOptions,
    overlay: bool,
) -> Result<Vec<Change>, DiffError> {
    changes.retain(|c| c.paths().any(|p| selected(p, &opts.paths)));
    if opts.renames {
        pair_renames(low, upper, &mut changes, &opts.stop)?;
    }
    if opts.content {
        // One budget for all the review's line diffs (see `crate::textdiff`),
        // spent on the smallest changes first: a flood of large files the
        // sandbox writes cannot push a two-line edit out of the review.
        let budget = crate::textdiff::Budget::new();
        let mut order: Vec<usize> = (0..changes.len()).collect();
        order.sort_by_key(|&i| bytes_of(&changes[i]));
        for i in order {
            opts.stop.check()?;
            let c = &mut changes[i];
            let (content, digest) = content_of(low, upper, c, opts.patches, &budget)?;
            c.content = content;
            // The digest of the text shown, from the very bytes shown.
            c.digest = digest.unwrap_or_default();
        }
    }
    let rules = flags::Rules::new(opts.allowed.as_deref());
    // Contents are read beneath each tree's descriptor, never by a path
    // the sandbox could send elsewhere (see `crate::beneath`); the real
    // workspace's is the one the walk went through.
    let up = Tree::layer(upper).map_err(read_err(Path::new("")))?;
    for c in &mut changes {
        opts.stop.check()?;
        c.flags = rules.check(c);
        c.flags.extend(flags::not_shown(c));
        // Errors name the change's path in the workspace, never a host path.
        let p = c.path.clone();
        let open = |side, rel: &Path| match side {
            crate::credentials::Side::Real => low.file(rel),
            crate::credentials::Side::Layer => up.file(rel),
        };
        if let Some(f) = crate::credentials::flag(c, open).map_err(read_err(&p))? {
            c.flags.push(f);
        }
        if let Some(f) = crate::hidden::flag(c, open).map_err(read_err(&p))? {
            c.flags.push(f);
        }
        if c.digest.is_empty() {
            c.digest = crate::review::digest(upper, c).map_err(read_err(&p))?;
        }
    }
    let runs_on_host: Vec<glob::Pattern> = opts
        .runs_on_host
        .iter()
        .filter_map(|g| glob::Pattern::new(g).ok())
        .collect();
    let trees = crate::judge::Trees {
        upper,
        lower,
        real: low,
        overlay,
        runs_on_host: &runs_on_host,
        host_hooks: &opts.host_hooks_paths,
        host_includes: &opts.host_git_includes,
        home: opts.owner_home.as_deref(),
    };
    crate::fsutil::deep_stack(|| crate::judge::judge(&trees, &mut changes));
    // What the real workspace's own ignore files leave out (a flagged
    // change never is, but for `binary` alone: an ignored change lands
    // only when asked for by name or `--ignored`, and is judged then, so a
    // project that ignores `__pycache__/` keeps its caches out of sight).
    let mut ignores = crate::ignored::Ignores::new(lower, low.try_clone().ok());
    for c in &mut changes {
        if c.flags.iter().all(|f| f.rule == crate::unseen::BINARY) {
            let is_dir = [&c.new, &c.old]
                .iter()
                .any(|e| e.as_ref().is_some_and(|e| e.kind == EntryKind::Dir));
            let paths: Vec<PathBuf> = c.paths().map(Path::to_path_buf).collect();
            c.ignored = paths.iter().all(|p| ignores.ignored(p, is_dir));
        }
    }
    Ok(changes)
}

fn read_err(path: &Path) -> impl FnOnce(io::Error) -> DiffError + '_ {
    move |source| DiffError::Read {
        path: path.to_path_buf(),
        source,
    }
}

/// `lstat` beneath `tree`, with "absent" (including "a parent is not a
/// directory") as None; a link on the way is an error.
fn lstat(tree: &Tree, rel: &Path) -> Result<Option<Stat>, DiffError> {
    tree.lstat(rel).map_err(read_err(rel))
}

fn sorted_names(tree: &Tree, rel: &Path) -> Result<Vec<OsString>, DiffError> {
    tree.names(rel).map_err(read_err(rel))
}

/// The walk of the upper layer against the lower: both trees reached only
/// beneath their descriptors, never by a joined path (see
/// [`crate::beneath`]): the sandbox may swap any directory of its layer for
/// a link while this runs.
struct Walker<'a> {
    upper: &'a Tree,
    lower: &'a Tree,
    opts: &'a DiffOptions,
    /// Two plain trees: no whiteouts, no opaque marks.
    plain: bool,
    /// The layer's entries opened for reading, and their modes before.
    opened: &'a crate::fsutil::Opened,
    out: Vec<Change>,
}

impl Walker<'_> {
    /// Whether anything at or below `rel` can pass the path filter.
    fn wanted(&self, rel: &Path) -> bool {
        self.opts.paths.is_empty()
            || self
                .opts
                .paths
                .iter()
                .any(|f| rel.starts_with(f) || f.starts_with(rel))
    }

    /// Walk the upper directory `rel`. `lower_dir`: the lower has a
    /// directory at `rel` that shows through; `opaque`: it does not (an
    /// opaque upper directory, here or above), so lower entries missing from
    /// the upper are deletions.
    fn walk(&mut self, rel: &Path, lower_dir: bool, opaque: bool) -> Result<(), DiffError> {
        let names = sorted_names(self.upper, rel)?;
        // Lower entries hidden by an opaque directory are deletions; they
        // are merged into the upper's names so the output stays sorted.
        let mut hidden = Vec::new();
        if opaque && lower_dir {
            let seen: BTreeSet<&OsString> = names.iter().collect();
            hidden = sorted_names(self.lower, rel)?
                .into_iter()
                .filter(|n| !seen.contains(n))
                .collect();
        }
        let mut all: Vec<(&OsString, bool)> = names
            .iter()
            .map(|n| (n, true))
            .chain(hidden.iter().map(|n| (n, false)))
            .collect();
        all.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
        for (name, in_upper) in all {
            self.opts.stop.entry()?;
            let r = rel.join(name);
            if !self.wanted(&r) {
                continue;
            }
            if !in_upper {
                if let Some(lmeta) = lstat(self.lower, &r)? {
                    self.deleted(&r, &lmeta)?;
                }
                continue;
            }
            // Gone since the directory was read: the sandbox is still
            // writing; what is not there is no change.
            let Some(umeta) = lstat(self.upper, &r)? else {
                continue;
            };
            let lmeta = if lower_dir {
                lstat(self.lower, &r)?
            } else {
                None
            };
            self.entry(&r, &umeta, lmeta, opaque)?;
        }
        Ok(())
    }

    fn entry(
        &mut self,
        r: &Path,
        umeta: &Stat,
        lmeta: Option<Stat>,
        opaque: bool,
    ) -> Result<(), DiffError> {
        if !self.plain && overlay::is_whiteout_at(self.upper, r, umeta) {
            // A whiteout over nothing (the lower entry was removed on the
            // host since) is no change.
            if let Some(lmeta) = lmeta {
                self.deleted(r, &lmeta)?;
            }
            return Ok(());
        }
        let new = Entry::read(self.upper, r, umeta, self.opened.mode_of(r))?;
        let change = |kind, old: Option<Entry>, new: Entry| Change {
            path: r.to_path_buf(),
            kind,
            from: None,
            old,
            new: Some(new),
            content: None,
            flags: Vec::new(),
            digest: String::new(),
            ignored: false,
            copied_up: false,
        };
        let Some(lmeta) = lmeta else {
            let is_dir = new.kind == EntryKind::Dir;
            let mut c = change(ChangeKind::Added, None, new);
            c.copied_up = !self.plain && overlay::has_origin_at(self.upper, r);
            self.out.push(c);
            if is_dir {
                self.walk(r, false, false)?;
            }
            return Ok(());
        };
        let old = Entry::read(self.lower, r, &lmeta, None)?;
        if old.kind != new.kind {
            if old.kind == EntryKind::Dir {
                self.deleted_children(r)?;
            }
            let to_dir = new.kind == EntryKind::Dir;
            self.out
                .push(change(ChangeKind::TypeChanged, Some(old), new));
            if to_dir {
                self.walk(r, false, false)?;
            }
            return Ok(());
        }
        match new.kind {
            EntryKind::Dir => {
                if old.mode != new.mode {
                    self.out.push(change(ChangeKind::Mode, Some(old), new));
                }
                let opaque = opaque || (!self.plain && overlay::is_opaque_at(self.upper, r));
                self.walk(r, true, opaque)?;
            }
            EntryKind::File => {
                if old.size != new.size
                    || !same_content((self.lower, r), (self.upper, r), new.size)?
                {
                    self.out.push(change(ChangeKind::Modified, Some(old), new));
                } else if old.mode != new.mode {
                    self.out.push(change(ChangeKind::Mode, Some(old), new));
                }
                // Copied up without a change (opened for writing, nothing
                // written): not a change.
            }
            EntryKind::Symlink => {
                if old.target != new.target {
                    self.out.push(change(ChangeKind::Modified, Some(old), new));
                }
            }
            EntryKind::Other => {
                if old.mode != new.mode || lmeta.st_rdev != umeta.st_rdev {
                    self.out.push(change(ChangeKind::Modified, Some(old), new));
                }
            }
        }
        Ok(())
    }

    /// Report the lower entry at `r` as deleted, a directory's content
    /// first.
    fn deleted(&mut self, r: &Path, lmeta: &Stat) -> Result<(), DiffError> {
        let old = Entry::read(self.lower, r, lmeta, None)?;
        if old.kind == EntryKind::Dir {
            self.deleted_children(r)?;
        }
        self.out.push(Change {
            path: r.to_path_buf(),
            kind: ChangeKind::Deleted,
            from: None,
            old: Some(old),
            new: None,
            content: None,
            flags: Vec::new(),
            digest: String::new(),
            ignored: false,
            copied_up: false,
        });
        Ok(())
    }

    fn deleted_children(&mut self, r: &Path) -> Result<(), DiffError> {
        for name in sorted_names(self.lower, r)? {
            self.opts.stop.entry()?;
            let child = r.join(name);
            if let Some(m) = lstat(self.lower, &child)? {
                self.deleted(&child, &m)?;
            }
        }
        Ok(())
    }
}

/// Whether two regular files, each named by its tree and its path there,
/// hold the same bytes (their sizes, as the walk recorded them, equal
/// `size`). Each is read from the descriptor opened beneath its tree, at
/// most `size` bytes and one more (which tells that it grew).
fn same_content(a: (&Tree, &Path), b: (&Tree, &Path), size: u64) -> Result<bool, DiffError> {
    let bound = size.saturating_add(1);
    let mut fa = a.0.file(a.1).map_err(read_err(a.1))?.take(bound);
    let mut fb = b.0.file(b.1).map_err(read_err(b.1))?.take(bound);
    let mut ba = vec![0u8; 64 * 1024];
    let mut bb = vec![0u8; 64 * 1024];
    loop {
        let na = read_full(&mut fa, &mut ba).map_err(read_err(a.1))?;
        let nb = read_full(&mut fb, &mut bb).map_err(read_err(b.1))?;
        if na != nb || ba[..na] != bb[..nb] {
            return Ok(false);
        }
        if na == 0 {
            return Ok(true);
        }
    }
}

fn read_full(f: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..])? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}

/// Merge each added file whose content equals a deleted file's into one
/// rename, at the added file's place in the list.
fn pair_renames(
    low: &Tree,
    upper: &Path,
    changes: &mut Vec<Change>,
    stop: &crate::stop::Stop,
) -> Result<(), DiffError> {
    let mut deleted_by_size: HashMap<u64, Vec<usize>> = HashMap::new();
    for (i, c) in changes.iter().enumerate() {
        if let (ChangeKind::Deleted, Some(old)) = (c.kind, &c.old) {
            if old.kind == EntryKind::File {
                deleted_by_size.entry(old.size).or_default().push(i);
            }
        }
    }
    if deleted_by_size.is_empty() {
        return Ok(());
    }
    let up = Tree::layer(upper).map_err(read_err(Path::new("")))?;
    let mut consumed = BTreeSet::new();
    for i in 0..changes.len() {
        let (ChangeKind::Added, Some(new)) = (changes[i].kind, &changes[i].new) else {
            continue;
        };
        if new.kind != EntryKind::File {
            continue;
        }
        let Some(candidates) = deleted_by_size.get(&new.size) else {
            continue;
        };
        for &d in candidates {
            if consumed.contains(&d) {
                continue;
            }
            stop.check()?;
            let same = same_content((low, &changes[d].path), (&up, &changes[i].path), new.size)?;
            if same {
                consumed.insert(d);
                let from = changes[d].path.clone();
                let old = changes[d].old.clone();
                let c = &mut changes[i];
                c.kind = ChangeKind::Renamed;
                c.from = Some(from);
                c.old = old;
                break;
            }
        }
    }
    let mut i = 0;
    changes.retain(|_| {
        let keep = !consumed.contains(&i);
        i += 1;
        keep
    });
    Ok(())
}

/// What a change's line diff reads: the sizes of both sides.
fn bytes_of(c: &Change) -> u64 {
    [&c.old, &c.new]
        .iter()
        .filter_map(|e| e.as_ref().map(|e| e.size))
        .fold(0u64, u64::saturating_add)
}

/// The content difference of a change to a regular file; and, when it
/// shows the new file's text, the change's digest of that text
/// (`crate::review::digest_shown`), not of the file read again.
fn content_of(
    low: &Tree,
    upper: &Path,
    c: &Change,
    patches: bool,
    budget: &crate::textdiff::Budget,
) -> Result<(Option<Content>, Option<String>), DiffError> {
    let file = |e: &Option<Entry>| e.as_ref().filter(|e| e.kind == EntryKind::File).cloned();
    let (old, new) = (file(&c.old), file(&c.new));
    if old.is_none() && new.is_none() {
        return Ok((None, None));
    }
    if matches!(c.kind, ChangeKind::Mode | ChangeKind::Renamed) {
        // Same content: by definition, or by construction for a rename.
        return Ok((None, None));
    }
    let old_size = old.as_ref().map_or(0, |e| e.size);
    let new_size = new.as_ref().map_or(0, |e| e.size);
    if old_size.max(new_size) > TEXT_DIFF_LIMIT {
        return Ok((Some(Content::Binary { old_size, new_size }), None));
    }
    let old_path = c.from.as_deref().unwrap_or(&c.path);
    // Each side read beneath its tree, from the descriptor `fstat` showed
    // to be a regular file, and no further than the size the walk
    // recorded: a file that grew since (or a device swapped in) cannot
    // make the host read without end.
    let read = |tree: &Tree, rel: &Path, size: Option<u64>| -> Result<Vec<u8>, DiffError> {
        let Some(size) = size else {
            return Ok(Vec::new());
        };
        let mut buf = Vec::new();
        tree.file(rel)
            .and_then(|f| f.take(size).read_to_end(&mut buf))
            .map_err(read_err(rel))?;
        Ok(buf)
    };
    let up = Tree::layer(upper).map_err(read_err(Path::new("")))?;
    let a = read(low, old_path, old.as_ref().map(|e| e.size))?;
    let b = read(&up, &c.path, new.as_ref().map(|e| e.size))?;
    fn text(v: &[u8]) -> Option<&str> {
        if v.contains(&0) {
            None
        } else {
            std::str::from_utf8(v).ok()
        }
    }
    let (Some(ta), Some(tb)) = (text(&a), text(&b)) else {
        return Ok((Some(Content::Binary { old_size, new_size }), None));
    };
    let name = |p: &Path, side: &str, present: bool| {
        if present {
            format!("{side}/{}", crate::printable_path(p))
        } else {
            "/dev/null".to_string()
        }
    };
    let (a_name, b_name) = (
        name(old_path, "a", old.is_some()),
        name(&c.path, "b", new.is_some()),
    );
    let headers = patches.then_some((a_name.as_str(), b_name.as_str()));
    let content = crate::textdiff::diff(ta, tb, (old_size, new_size), headers, budget);
    let digest =
        matches!(content, Content::Text { .. }).then(|| crate::review::digest_shown(c, &b));
    Ok((Some(content), digest))
}

/// A `--stat` summary: one line per change and a total.
pub fn stat(changes: &[Change]) -> String {
    let mut out = String::new();
    let width = changes
        .iter()
        .map(|c| crate::printable_path(&c.path).chars().count())
        .max()
        .unwrap_or(0);
    let (mut files, mut ins, mut del) = (0, 0, 0);
    for c in changes {
        let path = match &c.from {
            Some(from) => format!(
                "{} → {}",
                crate::printable_path(from),
                crate::printable_path(&c.path)
            ),
            None => crate::printable_path(&c.path),
        };
        let what = match (&c.content, c.kind) {
            (
                Some(Content::Text {
                    added,
                    removed,
                    coarse,
                    ..
                }),
                _,
            ) => {
                ins += added;
                del += removed;
                format!(
                    "{:>5} {}{}{}",
                    added + removed,
                    "+".repeat((*added).min(40)),
                    "-".repeat((*removed).min(40)),
                    if *coarse { " (coarse)" } else { "" }
                )
            }
            (
                Some(Content::NotDiffed {
                    old_lines,
                    new_lines,
                    reason,
                    ..
                }),
                _,
            ) => {
                let why = match reason {
                    crate::change::Cut::TooManyLines => "too many lines",
                    crate::change::Cut::TimeBudget => "out of time",
                };
                format!("  Text {old_lines} → {new_lines} lines, not diffed ({why})")
            }
            (Some(Content::Binary { old_size, new_size }), _) => {
                format!("  Bin {old_size} → {new_size} bytes")
            }
            (None, kind) => match (kind, &c.old, &c.new) {
                (ChangeKind::Mode, Some(o), Some(n)) => {
                    format!("  mode {:o} → {:o}", o.mode, n.mode)
                }
                (_, _, Some(n)) if n.kind == EntryKind::Symlink => format!(
                    "  symlink → {}",
                    crate::printable_path(n.target.as_deref().unwrap_or(Path::new("")))
                ),
                (kind, _, _) => format!("  {}", kind_word(kind)),
            },
        };
        files += 1;
        let flag = if c.flags.is_empty() { "" } else { "  [!]" };
        out.push_str(&format!(" {path:<width$} |{what}{flag}\n"));
    }
    out.push_str(&format!(
        " {files} change{}, {ins} insertion{}(+), {del} deletion{}(-)\n",
        if files == 1 { "" } else { "s" },
        if ins == 1 { "" } else { "s" },
        if del == 1 { "" } else { "s" },
    ));
    out
}

fn kind_word(k: ChangeKind) -> &'static str {
    match k {
        ChangeKind::Added => "added",
        ChangeKind::Modified => "modified",
        ChangeKind::Deleted => "deleted",
        ChangeKind::Mode => "mode",
        ChangeKind::TypeChanged => "type changed",
        ChangeKind::Renamed => "renamed",
    }
}
