//! Changes a reviewer should look at twice: what runs on the host after the
//! sandbox is gone (git hooks and config, CI definitions, editor tasks),
//! new executables, symbolic links that leave the workspace, and files the
//! profile did not expect the agent to touch. Flags inform the review; they
//! never block a commit by themselves. (A change that added a
//! credential-shaped string is flagged by `credentials`, which reads the
//! content.)

pub use crate::change::Flag;
use crate::change::{Change, ChangeKind, Content, EntryKind, NOT_SHOWN, TEXT_DIFF_LIMIT};
use std::path::{Component, Path};

/// Where a pattern may sit in the workspace.
#[derive(Clone, Copy)]
enum Depth {
    /// Only at the workspace's top.
    Top,
    /// In any directory (nested repositories have their own `.git`).
    Anywhere,
}

/// Paths whose content git and CI act on later, and why. A pattern ending in
/// `/` covers everything below that directory; otherwise it names one path.
/// (The configurations of the person's other tools are
/// [`crate::hostexec::TOOLS`].)
const SENSITIVE: &[(&str, Depth, &str, &str)] = &[
    (".git/hooks/", Depth::Anywhere, "git-hook", "git runs hooks on the host, outside any sandbox"),
    (".git/config", Depth::Anywhere, "git-config", "git config can name programs git runs (core.fsmonitor, core.hooksPath, core.sshCommand, filters)"),
    (".git/info/attributes", Depth::Anywhere, "git-config", "attributes can select filter and diff drivers that run programs"),
    (".gitattributes", Depth::Anywhere, "git-config", "attributes can select filter and diff drivers that run programs"),
    (".gitmodules", Depth::Anywhere, "git-config", "submodules point git at other repositories to fetch"),
    (".github/workflows/", Depth::Anywhere, "ci", "CI runs workflows with the repository's secrets"),
    (".github/actions/", Depth::Anywhere, "ci", "local actions run in CI with the repository's secrets"),
    (".gitlab-ci.yml", Depth::Top, "ci", "GitLab CI runs this pipeline with the project's secrets"),
    (".circleci/", Depth::Top, "ci", "CircleCI runs this configuration with the project's secrets"),
    ("Jenkinsfile", Depth::Top, "ci", "Jenkins runs this pipeline"),
    (".travis.yml", Depth::Top, "ci", "Travis CI runs this configuration"),
    (".buildkite/", Depth::Top, "ci", "Buildkite runs these pipelines"),
    (".drone.yml", Depth::Top, "ci", "Drone runs this pipeline"),
    ("azure-pipelines.yml", Depth::Top, "ci", "Azure Pipelines runs this pipeline"),
    ("bitbucket-pipelines.yml", Depth::Top, "ci", "Bitbucket Pipelines runs this pipeline"),
];

/// The rules for one diff: the fixed table plus the profile's globs.
pub(crate) struct Rules {
    allowed: Option<Vec<glob::Pattern>>,
}

impl Rules {
    /// `allowed`: path globs the agent was expected to touch (`*` does not
    /// cross `/`, `**` does); patterns that do not parse are ignored.
    pub(crate) fn new(allowed: Option<&[String]>) -> Rules {
        Rules {
            allowed: allowed.map(|globs| {
                globs
                    .iter()
                    .filter_map(|g| glob::Pattern::new(g).ok())
                    .collect()
            }),
        }
    }

    pub(crate) fn check(&self, c: &Change) -> Vec<Flag> {
        let mut out = Vec::new();
        let flag = |rule, reason: &str| Flag {
            rule,
            reason: reason.to_string(),
            findings: Vec::new(),
        };
        if c.kind == ChangeKind::Deleted && c.old.as_ref().is_some_and(|o| o.kind == EntryKind::Dir)
        {
            // The deleted directory's files are flagged one by one.
            return out;
        }
        for path in c.paths() {
            let mut named = false;
            for (pattern, depth, rule, reason) in SENSITIVE {
                if matches_sensitive(path, pattern, *depth) {
                    out.push(flag(rule, reason));
                    named = true;
                }
            }
            for reason in crate::hostexec::reasons(path) {
                out.push(flag("host-exec", reason));
            }
            if let Some(link) = c.new.as_ref().filter(|n| n.kind == EntryKind::Symlink) {
                named |= link_flags(path, link.target.as_deref(), &mut out);
            }
            // A `.git` that is a file or a link names a git directory
            // elsewhere (`gitdir: ...`): git run there on the host reads
            // that directory's config.
            let dot_git_pointer = path.file_name().is_some_and(|n| n == ".git")
                && c.new.as_ref().is_some_and(|n| n.kind != EntryKind::Dir);
            if dot_git_pointer {
                out.push(flag(
                    "git-config",
                    "a .git file or link points git at another directory, whose config it then obeys",
                ));
                named = true;
            }
            if !named && git_internal(path) {
                out.push(flag(
                    "git-internal",
                    "git reads this file of the repository's own (config, hooks, submodules' and worktrees' git directories) and may run programs it names",
                ));
            }
        }
        if let Some(new) = &c.new {
            let was_exec = c.old.as_ref().is_some_and(|o| o.is_executable());
            if new.is_executable() && !was_exec {
                out.push(flag(
                    "executable",
                    if c.old.is_some() {
                        "the execute bit was added"
                    } else {
                        "a new executable file"
                    },
                ));
            }
            if new.kind != EntryKind::Symlink && new.mode & 0o002 != 0 {
                out.push(flag(
                    "world-writable",
                    "any user of the host may change it once it is committed",
                ));
            }
            if let Some(old) = c.old.as_ref().filter(|o| o.kind == new.kind) {
                let typed = |mode: u32| match old.kind {
                    EntryKind::Dir => 0o040_000 | mode,
                    _ => 0o100_000 | mode,
                };
                let dir = new.kind == EntryKind::Dir;
                if matches!(new.kind, EntryKind::File | EntryKind::Dir)
                    && crate::exposure::landed(Some(typed(old.mode)), new.mode, dir) != new.mode
                {
                    out.push(flag(
                        "widens-access",
                        "group or other would gain access the host's entry does not give them; it lands without it",
                    ));
                }
            }
            if was_exec && new.is_executable() && c.kind == ChangeKind::Modified {
                out.push(flag(
                    "executable",
                    "the content of an executable file changed",
                ));
            }
        }
        if let Some(allowed) = &self.allowed {
            let opts = glob::MatchOptions {
                case_sensitive: true,
                require_literal_separator: true,
                require_literal_leading_dot: false,
            };
            if !allowed.iter().any(|g| g.matches_path_with(&c.path, opts)) {
                out.push(flag(
                    "outside-profile",
                    "outside the paths the profile expects the agent to change",
                ));
            }
        }
        out.dedup();
        out
    }
}

/// Flags of a symbolic link at `path` (new, or its target changed)
/// that redirects a path git, CI or the host's tools act on: a link at
/// a directory above such a path (`.github` for `.github/workflows/`),
/// or whose target reaches into or onto one (`x -> .claude`). The
/// files behind such a link sit under names no row covers. Whether a
/// sensitive row was hit.
fn link_flags(path: &Path, target: Option<&Path>, out: &mut Vec<Flag>) -> bool {
    let into = target.and_then(|t| crate::hostexec::resolved(path, t));
    let mut named = false;
    for (pattern, _, rule, reason) in SENSITIVE {
        let hit = crate::hostexec::above(path, pattern)
            || into
                .as_deref()
                .is_some_and(|t| matches_sensitive(t, pattern, Depth::Anywhere));
        if hit {
            out.push(link_flag(rule, reason));
            named = true;
        }
    }
    for reason in crate::hostexec::link_reasons(path, target) {
        out.push(link_flag("host-exec", reason));
    }
    named
}

/// The rules and reasons of every row a symbolic link's chain reaches
/// when it ends at `end` (relative to the workspace, every link on the
/// way followed as the host follows it): a row of [`SENSITIVE`] (at any
/// depth: a link reads as a path wherever it stands) or of
/// [`crate::hostexec::TOOLS`] that covers `end`.
pub(crate) fn reached(end: &Path) -> Vec<(&'static str, &'static str)> {
    let mut out: Vec<(&'static str, &'static str)> = SENSITIVE
        .iter()
        .filter(|(pattern, ..)| matches_sensitive(end, pattern, Depth::Anywhere))
        .map(|(_, _, rule, reason)| (*rule, *reason))
        .collect();
    out.extend(crate::hostexec::reasons(end).map(|r| ("host-exec", r)));
    out
}

/// The rows of [`SENSITIVE`] and [`crate::hostexec::TOOLS`] that name a
/// path rather than a glob, without a directory row's trailing `/`: where
/// a link at the workspace's top redirects what a tool reads.
pub(crate) fn row_paths() -> impl Iterator<Item = &'static str> {
    SENSITIVE
        .iter()
        .map(|(pattern, ..)| *pattern)
        .chain(crate::hostexec::patterns())
        .filter(|pattern| !pattern.contains('*'))
        .map(|pattern| pattern.trim_end_matches('/'))
}

fn link_flag(rule: &'static str, reason: &str) -> Flag {
    Flag {
        rule,
        reason: format!("a symbolic link redirects where this is read from: {reason}"),
        findings: Vec::new(),
    }
}

/// A flag when the review did not show `c`'s content in full
/// ([`NOT_SHOWN`]): a text file not diffed (too many lines, or the
/// review's time spent), or a file too large to be read as text. The
/// sandbox chooses what it writes: a one-line edit in a file past the
/// bounds would otherwise land unseen. A file read and found binary is
/// shown for what it is (`binary files differ`); `crate::unseen` flags it
/// `binary` when its name or content says it is code the host runs.
pub(crate) fn not_shown(c: &Change) -> Option<Flag> {
    let reason = match c.content.as_ref()? {
        Content::NotDiffed { reason, .. } => format!(
            "the review did not show this change's content ({reason}); read it before committing"
        ),
        Content::Binary { old_size, new_size } if (*old_size).max(*new_size) > TEXT_DIFF_LIMIT => {
            format!(
                "larger than {} MiB: the review did not read its content, so shows none of it; read it before committing",
                TEXT_DIFF_LIMIT >> 20
            )
        }
        _ => return None,
    };
    Some(Flag {
        rule: NOT_SHOWN,
        reason,
        findings: Vec::new(),
    })
}

/// The flag on a change the recorded review did not show in full
/// ([`NOT_SHOWN`]), whatever the commit's own comparison shows of it now:
/// what was reviewed is what the review showed, and a commit that lands
/// it lands a change no one was shown.
pub(crate) fn not_shown_at_review() -> Flag {
    Flag {
        rule: NOT_SHOWN,
        reason: "the review recorded for this change did not show its content in full (not diffed, or too large to read as text): review it by itself, or accept it unseen".to_string(),
        findings: Vec::new(),
    }
}

fn matches_sensitive(path: &Path, pattern: &str, depth: Depth) -> bool {
    let (pat, dir) = match pattern.strip_suffix('/') {
        Some(p) => (p, true),
        None => (pattern, false),
    };
    let pat = Path::new(pat);
    let hit = |p: &Path| {
        if dir {
            // The directory itself too: made a link, it sends git or CI
            // to files under a name no row covers.
            p.starts_with(pat)
        } else {
            p == pat
        }
    };
    match depth {
        Depth::Top => hit(path),
        Depth::Anywhere => {
            let comps: Vec<Component> = path.components().collect();
            (0..comps.len()).any(|i| hit(&comps[i..].iter().collect::<std::path::PathBuf>()))
        }
    }
}

/// Whether `path` lies in a git directory (`.git/`, at any depth, and the
/// git directories of submodules and worktrees below it) outside the parts
/// that only hold data: objects, refs, logs, the index and the files that
/// name commits (not `commondir`, `gitdir` or `objects/info/alternates`,
/// which send git to another directory). Everything else there (config, hooks, info, modules'
/// configs, ...) can make git run a program on the host.
pub(crate) fn git_internal(path: &Path) -> bool {
    let comps: Vec<&std::ffi::OsStr> = path
        .components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n),
            _ => None,
        })
        .collect();
    let Some(at) = comps.iter().position(|c| *c == ".git") else {
        return false;
    };
    let mut rest = &comps[at + 1..];
    // The git directories of submodules and worktrees, however nested.
    while rest.len() >= 2 && (rest[0] == "modules" || rest[0] == "worktrees") {
        rest = &rest[2..];
    }
    const DATA_DIRS: &[&str] = &["objects", "refs", "logs", "rr-cache"];
    const DATA_FILES: &[&str] = &[
        "index",
        "HEAD",
        "ORIG_HEAD",
        "FETCH_HEAD",
        "MERGE_HEAD",
        "CHERRY_PICK_HEAD",
        "REVERT_HEAD",
        "COMMIT_EDITMSG",
        "MERGE_MSG",
        "packed-refs",
        "description",
    ];
    match rest {
        [] => false,
        // Where objects are also read from: another repository's store.
        [objects, info, alt]
            if *objects == "objects"
                && *info == "info"
                && (*alt == "alternates" || *alt == "http-alternates") =>
        {
            true
        }
        [first, ..] if DATA_DIRS.iter().any(|d| first == d) => false,
        [only] => !DATA_FILES.iter().any(|f| only == f),
        _ => true,
    }
}

/// Why a symbolic link at `link` (relative to the workspace) pointing to
/// `target` leaves the workspace by its text alone, if it does: an absolute
/// target not below `workspace`, or more `..` than the link is deep. The
/// text is a second opinion beside the resolution (`judge`), for a link
/// that resolves nowhere today but would once a directory on its way
/// exists.
pub(crate) fn escapes(link: &Path, target: &Path, workspace: &Path) -> Option<&'static str> {
    if target.is_absolute() {
        let mut t = target.components();
        if workspace.components().all(|w| t.next() == Some(w))
            && !t.any(|c| c == Component::ParentDir)
        {
            return None;
        }
        return Some("an absolute symbolic link points outside the workspace");
    }
    // Depth of the link's directory below the workspace's top.
    let mut depth = link.components().count() as i64 - 1;
    for c in target.components() {
        match c {
            Component::ParentDir => {
                depth -= 1;
                if depth < 0 {
                    return Some("a symbolic link climbs out of the workspace with '..'");
                }
            }
            Component::Normal(_) => depth += 1,
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_links_that_stay_inside_do_not_escape() {
        let ws = Path::new("/w/s");
        assert_eq!(escapes(Path::new("a/b/l"), Path::new("../c"), ws), None);
        assert!(escapes(Path::new("a/l"), Path::new("../../etc"), ws).is_some());
        assert!(escapes(Path::new("l"), Path::new("/etc/passwd"), ws).is_some());
        assert!(escapes(Path::new("l"), Path::new("x/../../y"), ws).is_some());
        assert_eq!(escapes(Path::new("l"), Path::new("/w/s/a"), ws), None);
        assert!(escapes(Path::new("l"), Path::new("/w/s/../t"), ws).is_some());
        assert!(escapes(Path::new("l"), Path::new("/w/st"), ws).is_some());
    }

    fn added(path: &str, kind: EntryKind, mode: u32) -> Change {
        Change {
            path: path.into(),
            kind: ChangeKind::Added,
            from: None,
            old: None,
            new: Some(crate::change::Entry {
                kind,
                mode,
                size: 0,
                target: None,
            }),
            content: None,
            flags: Vec::new(),
            digest: String::new(),
            ignored: false,
            copied_up: false,
        }
    }

    #[test]
    fn a_git_file_pointing_elsewhere_and_world_writable_files_are_flagged() {
        let rules = Rules::new(None);
        let rule_names = |c: &Change| rules.check(c).iter().map(|f| f.rule).collect::<Vec<_>>();
        assert!(rule_names(&added("sub/.git", EntryKind::File, 0o644)).contains(&"git-config"));
        assert!(rule_names(&added(".git", EntryKind::Symlink, 0o777)).contains(&"git-config"));
        // A nested repository's directory itself is not the pointer; what
        // is inside it is judged path by path.
        assert!(rule_names(&added("sub/.git", EntryKind::Dir, 0o755)).is_empty());
        assert!(rule_names(&added("notes.txt", EntryKind::File, 0o666)).contains(&"world-writable"));
        assert!(rule_names(&added("notes.txt", EntryKind::File, 0o644)).is_empty());
    }

    #[test]
    fn everything_in_a_git_directory_but_its_data_is_flagged() {
        for p in [
            ".git/modules/sub/config",
            ".git/modules/sub/hooks/post-checkout",
            ".git/modules/a/modules/b/config",
            ".git/worktrees/w/config.worktree",
            ".git/config.worktree",
            ".git/info/exclude",
            "vendor/.git/modules/x/config",
            ".git/modules/sub/info/attributes",
            ".git/commondir",
            ".git/worktrees/w/gitdir",
            ".git/objects/info/alternates",
        ] {
            assert!(git_internal(Path::new(p)), "{p}");
        }
        for p in [
            ".git/objects/ab/cdef",
            ".git/refs/heads/main",
            ".git/index",
            ".git/HEAD",
            ".git/modules/sub/objects/pack/x.pack",
            ".git/modules/sub/HEAD",
            "src/git/config",
            "README.md",
        ] {
            assert!(!git_internal(Path::new(p)), "{p}");
        }
    }

    #[test]
    fn hooks_and_workflows_are_sensitive_in_nested_repositories_other_ci_only_at_the_top() {
        let hooks = |p: &str| matches_sensitive(Path::new(p), ".git/hooks/", Depth::Anywhere);
        assert!(hooks(".git/hooks/pre-commit"));
        assert!(hooks("vendor/lib/.git/hooks/post-checkout"));
        assert!(!hooks(".git/hooksx"));
        // A nested repository or submodule runs its own workflows.
        let rules = Rules::new(None);
        let ci = |p: &str| {
            rules
                .check(&added(p, EntryKind::File, 0o644))
                .iter()
                .any(|f| f.rule == "ci")
        };
        assert!(ci(".github/workflows/ci.yml"));
        assert!(ci("vendor/lib/.github/workflows/ci.yml"));
        assert!(ci(".gitlab-ci.yml"));
        assert!(!ci("docs/.gitlab-ci.yml"));
    }
}
