//! Flags that need the trees, not just a change's own name: where a
//! symbolic link leads once every other link is followed, which changes
//! fall inside a git repository as git finds one, where git looks for
//! hooks, whether npm's lifecycle scripts changed, and whether what a
//! linter's settings name for it to load changed (`crate::loads`).
//! `flags` judges a change by its path and entries alone; this module
//! judges it by what the host will do with it once committed.

use crate::beneath::Tree;
use crate::change::{Change, EntryKind, Flag};
use crate::flags;
use crate::git::Repos;
use crate::view::{Resolved, View};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// package.json files read at most this far.
const PACKAGE_LIMIT: u64 = 8 << 20;

/// npm scripts that run without being named: at install, pack and publish,
/// and around every script (`pre<name>`, `post<name>`).
const NPM_LIFECYCLE: &[&str] = &[
    "preinstall",
    "install",
    "postinstall",
    "prepublish",
    "preprepare",
    "prepare",
    "postprepare",
    "prepack",
    "postpack",
    "prepublishOnly",
    "publish",
    "postpublish",
    "dependencies",
];

/// The trees one diff is judged against.
pub(crate) struct Trees<'a> {
    pub(crate) upper: &'a Path,
    /// The real workspace's recorded path (for names, never opened here).
    pub(crate) lower: &'a Path,
    /// The real workspace, as the diff opened and checked it: every read
    /// of it goes through this descriptor.
    pub(crate) real: &'a Tree,
    /// The upper is an overlay layer (else a full copy).
    pub(crate) overlay: bool,
    /// Globs of paths the profile says a tool on the host runs.
    pub(crate) runs_on_host: &'a [glob::Pattern],
    /// `core.hooksPath` values of the host's own git config.
    pub(crate) host_hooks: &'a [String],
    /// Host paths the host's own git config includes.
    pub(crate) host_includes: &'a [PathBuf],
    /// The owner's home, as the front door passed it: what `~/` in a
    /// work-tree git file names.
    pub(crate) home: Option<&'a Path>,
}

fn flag(rule: &'static str, reason: String) -> Flag {
    Flag {
        rule,
        reason,
        findings: Vec::new(),
    }
}

/// Add the tree-dependent flags to `changes`.
pub(crate) fn judge(t: &Trees<'_>, changes: &mut [Change]) {
    // Both trees read beneath their descriptors (see `crate::beneath`):
    // the real one is the diff's own. The diff opened the layer a moment
    // ago; if that fails now, every change is flagged rather than judged
    // blind.
    let lower = t.real;
    let Ok(upper) = Tree::layer(t.upper) else {
        for c in changes.iter_mut() {
            c.flags.push(flag(
                "unreadable",
                "warden could not read the trees again to judge this change".into(),
            ));
        }
        return;
    };
    let after = View::merged(&upper, lower, t.overlay, t.lower);
    let before = View::real(lower, t.lower);
    let ends = links(&after, &before, changes);
    let mut repos_after = Repos::new(after, t.host_hooks, t.host_includes, t.home);
    let mut repos_before = Repos::new(before, t.host_hooks, t.host_includes, t.home);
    // Every link of the tree by where it ends: known when `links` read
    // them all, else read only when a binary asset changed (the names
    // links give it).
    let all_links = ends.is_some();
    let behind = crate::behind::Behind::new(&after, ends);
    let mut aliases: Option<BTreeMap<PathBuf, Vec<PathBuf>>> = None;
    for c in changes.iter_mut() {
        let mut found = behind.flags(c);
        git(&mut repos_after, &mut repos_before, c, &mut found);
        hooks(&mut repos_after, &mut repos_before, c, &mut found);
        included(&mut repos_after, &mut repos_before, c, &mut found);
        found.extend(crate::unseen::flag(lower, &upper, c));
        if found.iter().all(|f| f.rule != crate::unseen::BINARY) && crate::unseen::asset_by_name(c)
        {
            let names = match all_links {
                true => behind.ends(),
                false => aliases.get_or_insert_with(|| link_ends(&after)),
            };
            if let Some(f) = names.get(&c.path).and_then(|n| crate::unseen::renamed(n)) {
                found.push(f);
            }
        }
        if let Some(f) = npm(t, c) {
            found.push(f);
        }
        if let Some(f) = crate::loads::flag(t.upper, t.real, c) {
            found.push(f);
        }
        let opts = glob::MatchOptions {
            case_sensitive: true,
            require_literal_separator: true,
            require_literal_leading_dot: false,
        };
        if t.runs_on_host
            .iter()
            .any(|g| c.paths().any(|p| g.matches_path_with(p, opts)))
        {
            found.push(flag(
                "host-exec",
                "the profile says a tool on the host runs this file".into(),
            ));
        }
        for f in found {
            if !c.flags.iter().any(|have| have.rule == f.rule) {
                c.flags.push(f);
            }
        }
    }
}

/// `symlink-escape`: a new or changed link that leads out of the workspace
/// (by its text, or once every link of the layer and the real tree on its
/// way is followed; and followed through the real tree alone, as it is when
/// the link is committed without the other changes), and a changed link
/// that sends another link of the tree out.
///
/// Where every link of the tree ends, when this read them all: the names
/// links give a file ([`crate::unseen::renamed`]).
fn links(
    after: &View<'_>,
    before: &View<'_>,
    changes: &mut [Change],
) -> Option<BTreeMap<PathBuf, Vec<PathBuf>>> {
    let changed: BTreeSet<PathBuf> = changes
        .iter()
        .filter(|c| c.new.as_ref().is_some_and(|n| n.kind == EntryKind::Symlink))
        .map(|c| c.path.clone())
        .collect();
    // A new directory can bring a link of the host that led nowhere to
    // life (`l -> missing/../../etc` once `missing` exists).
    let created: BTreeSet<PathBuf> = changes
        .iter()
        .filter(|c| {
            c.new.as_ref().is_some_and(|n| n.kind == EntryKind::Dir)
                && !c.old.as_ref().is_some_and(|o| o.kind == EntryKind::Dir)
        })
        .map(|c| c.path.clone())
        .collect();
    if changed.is_empty() && created.is_empty() {
        return None;
    }
    let mut ends: BTreeMap<PathBuf, Vec<PathBuf>> = BTreeMap::new();
    let mut reasons: BTreeMap<PathBuf, String> = BTreeMap::new();
    // Rows of git, CI and the host's tools a changed link's chain reaches.
    let mut reach: BTreeMap<PathBuf, Vec<Flag>> = BTreeMap::new();
    for link in &changed {
        let target = changes
            .iter()
            .find(|c| &c.path == link)
            .and_then(|c| c.new.as_ref())
            .and_then(|n| n.target.clone());
        let walk = after.follow_link(link);
        if let Resolved::Inside(to) = &walk.end {
            ends.entry(to.clone()).or_default().push(link.clone());
        }
        let alone = target
            .as_deref()
            .map(|t| before.walk(link.parent().unwrap_or(Path::new("")), t, true));
        let why = match (&walk.end, &alone, &target) {
            (Resolved::Outside(to), _, _) => Some(format!(
                "a symbolic link that leads out of the workspace, to {}{}",
                crate::printable_path(to),
                through(&walk.links[1..])
            )),
            (
                _,
                Some(crate::view::Walk {
                    end: Resolved::Outside(to),
                    links,
                    ..
                }),
                _,
            ) => Some(format!(
                "a symbolic link that, committed without the changes on its way, leads out of the workspace, to {}{}",
                crate::printable_path(to),
                through(links)
            )),
            (_, _, Some(t)) => flags::escapes(link, t, after.workspace).map(str::to_string),
            _ => None,
        };
        if let Some(why) = why {
            reasons.insert(link.clone(), why);
        }
        // Where the chain ends, followed link by link as the host follows
        // it (relative and absolute texts, `..` after a link, links to
        // links, at most 40), after the commit and committed alone: a
        // link to a link to `.claude` is a link to `.claude`.
        let ends = [
            (&walk.end, walk.links.get(1..).unwrap_or(&[]), ""),
            (
                alone.as_ref().map_or(&Resolved::Nowhere, |a| &a.end),
                alone.as_ref().map_or(&[][..], |a| &a.links[..]),
                ", committed without the changes on its way,",
            ),
        ];
        for (end, via, when) in ends {
            let Resolved::Inside(to) = end else { continue };
            for (rule, reason) in flags::reached(to) {
                reach.entry(link.clone()).or_default().push(flag(
                    rule,
                    format!(
                        "a symbolic link that{when} leads to {}{}: {reason}",
                        crate::printable_path(to),
                        through(via)
                    ),
                ));
            }
        }
    }
    // Links already in the tree that a changed link or a new directory now
    // sends out (and that did not lead out before). This reads every link
    // of the workspace: done only when a diff holds a link or a new
    // directory.
    let all = after.links();
    for other in all.iter().filter(|l| !changed.contains(*l)) {
        let walk = after.follow_link(other);
        if let Resolved::Inside(to) = &walk.end {
            ends.entry(to.clone()).or_default().push(other.clone());
            redirected(before, other, to, &walk, &changed, &created, &mut reach);
            continue;
        }
        let Resolved::Outside(to) = &walk.end else {
            continue;
        };
        if matches!(before.follow_link(other).end, Resolved::Outside(_)) {
            // It led out before the sandbox ran: the host's own.
            continue;
        }
        let culprits = walk
            .links
            .iter()
            .filter(|l| changed.contains(*l))
            .chain(walk.dirs.iter().filter(|d| created.contains(*d)));
        for via in culprits {
            reasons.entry(via.clone()).or_insert_with(|| {
                format!(
                    "this change sends the link {} out of the workspace, to {}",
                    crate::printable_path(other),
                    crate::printable_path(to)
                )
            });
        }
    }
    for c in changes.iter_mut() {
        if let Some(why) = reasons.remove(&c.path) {
            c.flags.push(flag("symlink-escape", why));
        }
        for f in reach.remove(&c.path).unwrap_or_default() {
            // A link's own text already named the row: that flag says it.
            if !c.flags.iter().any(|have| have.rule == f.rule) {
                c.flags.push(f);
            }
        }
    }
    Some(ends)
}

/// A link already in the tree, `other`, that now ends at `to`: when that
/// reaches a row of git, CI or the host's tools it did not reach before
/// the sandbox ran, the changed links and new directories on its way are
/// what sent it there (the host's `x -> a/b` once `a` is made a link
/// into `.claude`).
fn redirected(
    before: &View<'_>,
    other: &Path,
    to: &Path,
    walk: &crate::view::Walk,
    changed: &BTreeSet<PathBuf>,
    created: &BTreeSet<PathBuf>,
    reach: &mut BTreeMap<PathBuf, Vec<Flag>>,
) {
    let rows = flags::reached(to);
    if rows.is_empty() {
        return;
    }
    let was = match before.follow_link(other).end {
        Resolved::Inside(p) => flags::reached(&p),
        _ => Vec::new(),
    };
    let rows: Vec<_> = rows.into_iter().filter(|r| !was.contains(r)).collect();
    if rows.is_empty() {
        return;
    }
    let culprits = walk
        .links
        .iter()
        .filter(|l| changed.contains(*l))
        .chain(walk.dirs.iter().filter(|d| created.contains(*d)));
    for via in culprits {
        for (rule, reason) in &rows {
            reach.entry(via.clone()).or_default().push(flag(
                rule,
                format!(
                    "this change sends the link {} to {}: {reason}",
                    crate::printable_path(other),
                    crate::printable_path(to)
                ),
            ));
        }
    }
}

/// Every link of `view` by the path its chain ends at in the workspace.
fn link_ends(view: &View<'_>) -> BTreeMap<PathBuf, Vec<PathBuf>> {
    let mut out: BTreeMap<PathBuf, Vec<PathBuf>> = BTreeMap::new();
    for link in view.links() {
        if let Resolved::Inside(to) = view.follow_link(&link).end {
            out.entry(to).or_default().push(link);
        }
    }
    out
}

fn through(links: &[PathBuf]) -> String {
    if links.is_empty() {
        return String::new();
    }
    let names: Vec<String> = links.iter().map(|l| crate::printable_path(l)).collect();
    format!(" (through the links {})", names.join(", "))
}

/// `git-*`: a change inside a git directory (before or after the commit),
/// or that is one.
fn git(after: &mut Repos<'_>, before: &mut Repos<'_>, c: &Change, out: &mut Vec<Flag>) {
    for path in c.paths() {
        for dir in path.ancestors() {
            if !(after.is_git_dir(dir) || before.is_git_dir(dir)) {
                continue;
            }
            let shown = if dir.as_os_str().is_empty() {
                ".".to_string()
            } else {
                crate::printable_path(dir)
            };
            let rest = path.strip_prefix(dir).unwrap_or(path);
            let f = if rest.as_os_str().is_empty() {
                flag(
                    "git-internal",
                    format!("{shown} is a git directory: git run there obeys its config and hooks"),
                )
            } else if rest.starts_with("hooks") {
                flag(
                    "git-hook",
                    format!("a hook of the git directory {shown}: git runs hooks on the host"),
                )
            } else if flags::git_internal(&Path::new(".git").join(rest)) {
                flag(
                    "git-internal",
                    format!("inside the git directory {shown}: git obeys its config and may run programs it names"),
                )
            } else {
                flag(
                    "git-data",
                    format!("the history of the git repository {shown} (refs, objects, index, HEAD): git on the host reads it as the repository's own"),
                )
            };
            out.push(f);
            return;
        }
    }
}

/// `git-hook`: a change where a repository's `core.hooksPath` sends git.
fn hooks(after: &mut Repos<'_>, before: &mut Repos<'_>, c: &Change, out: &mut Vec<Flag>) {
    for path in c.paths() {
        for top in path.ancestors().skip(1) {
            let mut dirs = after.hook_dirs(top);
            dirs.extend(before.hook_dirs(top));
            if let Some(d) = dirs.iter().find(|d| path.starts_with(d)) {
                out.push(flag(
                    "git-hook",
                    format!(
                        "git runs hooks from {} (core.hooksPath of the repository at {}) on the host",
                        crate::printable_path(d),
                        if top.as_os_str().is_empty() {
                            ".".to_string()
                        } else {
                            crate::printable_path(top)
                        }
                    ),
                ));
                return;
            }
        }
    }
}

/// `git-config`: a work-tree file that a repository's config includes
/// (`include.path`, `includeIf.*.path`, at any depth): git reads it as its
/// own config, so it can name programs git runs (core.fsmonitor at the
/// next `git status`, core.sshCommand, filters) like `.git/config` itself.
/// A file the host's own git config (global, system) includes, directly
/// or through work-tree files, is the same: git reads it in every
/// repository.
fn included(after: &mut Repos<'_>, before: &mut Repos<'_>, c: &Change, out: &mut Vec<Flag>) {
    let mut host = after.host_included();
    host.extend(before.host_included());
    if c.paths().any(|p| host.iter().any(|f| f == p)) {
        out.push(flag(
            "git-config",
            "the host's own git config (global or system) includes this file: git obeys it as config in every repository, and it can name programs git runs (core.fsmonitor, core.sshCommand, filters)".to_string(),
        ));
        return;
    }
    for path in c.paths() {
        for top in path.ancestors().skip(1) {
            let mut files = after.included_configs(top);
            files.extend(before.included_configs(top));
            if files.iter().any(|f| f == path) {
                out.push(flag(
                    "git-config",
                    format!(
                        "the git config of the repository at {} includes this file: git obeys it as its own config, which can name programs git runs (core.fsmonitor, core.sshCommand, filters)",
                        if top.as_os_str().is_empty() {
                            ".".to_string()
                        } else {
                            crate::printable_path(top)
                        }
                    ),
                ));
                return;
            }
        }
    }
}

/// Keys of package.json besides `scripts` whose values git-hook tools of
/// the project turn into commands run on the host at the next commit.
const HOOK_KEYS: &[(&str, &str)] = &[
    ("lint-staged", "lint-staged runs these commands"),
    ("nano-staged", "nano-staged runs these commands"),
    (
        "simple-git-hooks",
        "simple-git-hooks writes these commands into git hooks",
    ),
    ("husky", "husky (v4) runs its hooks' commands"),
    ("gitHooks", "yorkie writes these commands into git hooks"),
    ("ghooks", "ghooks runs these commands as git hooks"),
    ("pre-commit", "the pre-commit package runs these scripts"),
    ("pre-push", "the pre-push package runs these scripts"),
];

/// Keys of package.json under which a tool keeps the settings it would
/// otherwise read from its own file, and what it loads from them as code
/// (the data forms of `crate::loads`, kept here).
const CODE_KEYS: &[(&str, &str)] = &[
    ("eslintConfig", "ESLint loads the plugins, parser and shared configurations its eslintConfig names whenever it lints, in an editor as soon as a file is opened"),
    ("prettier", "Prettier loads the plugins or shared configuration its prettier key names whenever it formats, in an editor at the next format on save"),
    ("stylelint", "stylelint loads the plugins and shared configurations its stylelint key names whenever it lints"),
    ("babel", "Babel loads the plugins and presets its babel key names whenever it compiles"),
    ("jest", "Jest runs the setup files, transforms and global setup its jest key names at every run, an editor's Jest extension included"),
    ("mocha", "Mocha loads the modules its mocha key requires at every run"),
    ("ava", "AVA loads the modules its ava key requires at every run"),
];

/// `host-exec`: a package.json whose implicitly run scripts, or the
/// commands its git-hook tools run ([`HOOK_KEYS`]), changed.
fn npm(t: &Trees<'_>, c: &Change) -> Option<Flag> {
    if c.path.file_name()? != "package.json" {
        return None;
    }
    let read = |tree: Result<Tree, std::io::Error>, rel: &Path| -> Option<Vec<u8>> {
        use std::io::Read;
        let mut buf = Vec::new();
        tree.ok()?
            .file(rel)
            .ok()?
            .take(PACKAGE_LIMIT)
            .read_to_end(&mut buf)
            .ok()?;
        Some(buf)
    };
    let is_file =
        |e: &Option<crate::change::Entry>| e.as_ref().is_some_and(|e| e.kind == EntryKind::File);
    let new = if is_file(&c.new) {
        match read(Tree::layer(t.upper), &c.path) {
            Some(bytes) => Some(bytes),
            None => {
                return Some(flag(
                    "host-exec",
                    "a package.json warden cannot read: what npm runs from it cannot be told"
                        .into(),
                ))
            }
        }
    } else {
        None
    };
    let old = if is_file(&c.old) {
        read(t.real.try_clone(), c.from.as_deref().unwrap_or(&c.path))
    } else {
        None
    };
    let scripts = |bytes: &Option<Vec<u8>>| -> Result<BTreeMap<String, String>, ()> {
        let Some(bytes) = bytes else {
            return Ok(BTreeMap::new());
        };
        let v: serde_json::Value = serde_json::from_slice(bytes).map_err(|_| ())?;
        let mut out = BTreeMap::new();
        if let Some(map) = v.get("scripts").and_then(|s| s.as_object()) {
            for (k, v) in map {
                let implicit = NPM_LIFECYCLE.contains(&k.as_str())
                    || k.starts_with("pre")
                    || k.starts_with("post");
                if implicit {
                    out.insert(k.clone(), v.to_string());
                }
            }
        }
        for (key, _) in HOOK_KEYS {
            if let Some(v) = v.get(*key) {
                out.insert(format!("package.json {key}"), v.to_string());
            }
        }
        for (key, _) in CODE_KEYS {
            if let Some(v) = v.get(*key) {
                out.insert(format!("package.json code {key}"), v.to_string());
            }
        }
        Ok(out)
    };
    let lifecycle = "npm runs these lifecycle scripts (install, prepare, pre*/post*) on the host without being asked, at the next install or run; they changed";
    let (a, b) = match (scripts(&old), scripts(&new)) {
        (_, Err(())) => {
            return Some(flag(
                "host-exec",
                "package.json that is not valid JSON: what npm runs from it cannot be told".into(),
            ))
        }
        (Err(()), Ok(_)) => return Some(flag("host-exec", lifecycle.into())),
        (Ok(a), Ok(b)) => (a, b),
    };
    if a == b {
        return None;
    }
    let changed = |k: &str| a.get(k) != b.get(k);
    let hooks: Vec<&str> = HOOK_KEYS
        .iter()
        .filter(|(key, _)| changed(&format!("package.json {key}")))
        .map(|(_, why)| *why)
        .collect();
    let code: Vec<&str> = CODE_KEYS
        .iter()
        .filter(|(key, _)| changed(&format!("package.json code {key}")))
        .map(|(_, why)| *why)
        .collect();
    let mut reasons = Vec::new();
    if !hooks.is_empty() {
        reasons.push(format!(
            "git-hook tools run what package.json names for them on the host at the next commit ({}); it changed",
            hooks.join("; ")
        ));
    }
    if !code.is_empty() {
        reasons.push(format!("{}; it changed", code.join("; ")));
    }
    let scripts_changed = a
        .keys()
        .chain(b.keys())
        .any(|k| !k.starts_with("package.json ") && changed(k));
    if scripts_changed || reasons.is_empty() {
        reasons.push(lifecycle.to_string());
    }
    Some(flag("host-exec", reasons.join("; ")))
}
