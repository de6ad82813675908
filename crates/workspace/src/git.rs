//! Git repositories as git itself finds them, read from a [`View`]: which
//! directories are git directories, and where git looks for hooks.
//!
//! The rules follow git's `setup.c` (`is_git_directory`,
//! `validate_headref`, `read_gitfile`, `get_common_dir`):
//! - a directory is a git directory when it has a `HEAD` (a regular file
//!   `ref: refs/...` or an object name, or a symbolic link into `refs/`),
//!   and `objects/` and `refs/` are directories git can enter (links
//!   followed) in its *common directory*: the directory its `commondir`
//!   file names (relative to it), or itself;
//! - a `.git` that is a file (`gitdir: PATH`, relative to the file's
//!   directory) names the git directory of the work tree it sits in;
//! - a bare repository is a git directory anywhere in the tree, whatever
//!   its name, and its `core.worktree` can name any work tree.
//!
//! warden is broader than git where being broader only adds flags: any
//! `HEAD` counts (git would refuse an invalid one, and the next change
//! could make it valid), and a directory holding both `objects/` and
//! `refs/` counts too, since that is what a common directory holds (git
//! obeys its config and hooks for every worktree whose `commondir` names
//! it, and those files can be anywhere).
//!
//! Every file read here is read from the view, beneath the workspace's
//! trees ([`crate::beneath`]). A path the workspace's git files name
//! outside the workspace (an absolute `include.path`, a `gitdir:` or
//! `commondir` that leaves it, a link that does) is never opened: those
//! files are the sandbox's to write, so their names are the sandbox's
//! choice, and the host must not open a host file of the sandbox's
//! choosing (a FIFO that holds the review, a device whose open acts, a
//! secret whose settings the flags would echo). What such a file would
//! set is not known here; a hook git could run from it must be an
//! executable of the work tree, and every new or changed executable is
//! flagged by its own rule. warden itself never runs git on the host.

use crate::view::{Resolved, View};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Config files read at most this far (a config is a few KiB).
const CONFIG_LIMIT: u64 = 1 << 20;
/// Includes followed at most this deep (git stops at 10).
const INCLUDE_DEPTH: usize = 10;

/// Answers about one view, remembered per directory.
pub(crate) struct Repos<'a> {
    view: View<'a>,
    /// `core.hooksPath` values of the host's own git config (global,
    /// system): they apply to every repository.
    host_hooks: &'a [String],
    /// Host paths the host's own git config (global, system) includes
    /// (see [`host_config_includes`]): git reads them in every repository.
    host_includes: &'a [PathBuf],
    /// The owner's home, as the front door passed it: git expands `~/`
    /// with it.
    home: Option<&'a Path>,
    git_dirs: HashMap<PathBuf, bool>,
    hooks: HashMap<PathBuf, Vec<PathBuf>>,
    included: HashMap<PathBuf, Vec<PathBuf>>,
    host_included: Option<Vec<PathBuf>>,
}

impl<'a> Repos<'a> {
    pub(crate) fn new(
        view: View<'a>,
        host_hooks: &'a [String],
        host_includes: &'a [PathBuf],
        home: Option<&'a Path>,
    ) -> Repos<'a> {
        Repos {
            view,
            host_hooks,
            host_includes,
            home,
            git_dirs: HashMap::new(),
            hooks: HashMap::new(),
            included: HashMap::new(),
            host_included: None,
        }
    }

    /// The work-tree files the host's own git config includes, as
    /// workspace paths (named and where links on the way lead), and the
    /// work-tree files those include in turn, as this view has them: git
    /// reads each as config in every repository, this one included.
    pub(crate) fn host_included(&mut self) -> Vec<PathBuf> {
        if let Some(known) = &self.host_included {
            return known.clone();
        }
        let mut out = Vec::new();
        for abs in self.host_includes {
            let Ok(rel) = abs.strip_prefix(self.view.workspace) else {
                continue;
            };
            let Some(named) = fold(rel) else { continue };
            if named.as_os_str().is_empty() {
                continue;
            }
            if let Resolved::Inside(p) = self.view.walk(Path::new(""), &named, true).end {
                out.push(p);
            }
            self.includes(&named, 1, &mut out);
            out.push(named);
        }
        out.sort();
        out.dedup();
        self.host_included = Some(out.clone());
        out
    }

    /// Whether the directory `dir` (relative) is a git directory, or a
    /// common directory of one.
    pub(crate) fn is_git_dir(&mut self, dir: &Path) -> bool {
        if let Some(&known) = self.git_dirs.get(dir) {
            return known;
        }
        let answer = self.judge_git_dir(dir);
        self.git_dirs.insert(dir.to_path_buf(), answer);
        answer
    }

    fn judge_git_dir(&self, dir: &Path) -> bool {
        // The top of the workspace is a directory; anything else must be
        // one in this view.
        if !dir.as_os_str().is_empty() && !self.view.lookup(dir).is_some_and(|n| n.is_dir()) {
            return false;
        }
        self.has_git_shape(dir)
    }

    fn has_git_shape(&self, dir: &Path) -> bool {
        let v = &self.view;
        let enters = |rel: &Path| match v.walk(Path::new(""), rel, true).end {
            Resolved::Inside(p) => v.lookup(&p).is_some_and(|n| n.is_dir()),
            // A link out of the workspace: git would follow it; the host's
            // directory may well be there.
            Resolved::Outside(_) => true,
            Resolved::Nowhere => false,
        };
        let own_data = enters(&dir.join("objects")) && enters(&dir.join("refs"));
        if own_data {
            return true;
        }
        let head = v.lookup(&dir.join("HEAD"));
        if head.is_none_or(|n| !(n.is_file() || n.is_symlink())) {
            return false;
        }
        match v.lookup(&dir.join("commondir")).filter(|n| n.is_file()) {
            Some(n) => {
                let Some(text) = n.open().and_then(read_from) else {
                    return true;
                };
                let named = PathBuf::from(text.trim_end_matches(['\n', '\r']));
                match v.walk(dir, &named, true).end {
                    Resolved::Inside(common) => {
                        enters(&common.join("objects")) && enters(&common.join("refs"))
                    }
                    // A common directory outside the workspace: git may
                    // well accept it.
                    Resolved::Outside(_) => true,
                    Resolved::Nowhere => false,
                }
            }
            None => false,
        }
    }

    /// The git directories of the work tree whose top is `top`: its `.git`
    /// directory, or the one its `.git` file names. Relative results are
    /// inside the workspace; absolute ones are host paths outside it.
    fn git_dirs_of(&self, top: &Path) -> Vec<PathBuf> {
        let v = &self.view;
        let dot_git = top.join(".git");
        let Some(node) = v.lookup(&dot_git) else {
            return Vec::new();
        };
        let target = if node.is_file() {
            let Some(text) = node.open().and_then(read_from) else {
                return Vec::new();
            };
            let Some(named) = text.lines().next().and_then(|l| l.strip_prefix("gitdir:")) else {
                return Vec::new();
            };
            v.walk(top, Path::new(named.trim()), true).end
        } else {
            v.walk(Path::new(""), &dot_git, true).end
        };
        match target {
            Resolved::Inside(p) => vec![p],
            Resolved::Outside(p) => vec![p],
            Resolved::Nowhere => Vec::new(),
        }
    }

    /// Where git run in the work tree whose top is `top` looks for hooks,
    /// beside `.git/hooks`: every `core.hooksPath` its config (and the
    /// files that config includes) sets, as workspace paths. For husky's
    /// layout (`.husky/_`), the directory above too, whose files the
    /// generated hooks run.
    pub(crate) fn hook_dirs(&mut self, top: &Path) -> Vec<PathBuf> {
        if let Some(known) = self.hooks.get(top) {
            return known.clone();
        }
        let mut out = Vec::new();
        for gitdir in self.git_dirs_of(top) {
            let mut configs = vec![gitdir.join("config"), gitdir.join("config.worktree")];
            if let Some(common) = self.common_dir(&gitdir) {
                configs.push(common.join("config"));
            }
            let mut values = self.host_hooks.to_vec();
            for c in configs {
                self.config_values(&c, "core", "hookspath", 0, &mut values);
            }
            for hooks in values.iter().flat_map(|v| self.expand(top, v)) {
                if let Resolved::Inside(dir) = self.view.walk(Path::new(""), &hooks, true).end {
                    if dir.file_name().is_some_and(|n| n == "_") {
                        if let Some(parent) = dir.parent() {
                            out.push(parent.to_path_buf());
                        }
                    }
                    out.push(dir);
                }
            }
        }
        self.hooks.insert(top.to_path_buf(), out.clone());
        out
    }

    /// The work-tree files that the config of the repository whose top is
    /// `top` includes (`include.path`, `includeIf.*.path` whatever its
    /// condition), and the files those include, to git's depth: as
    /// workspace paths, both as named (`..` resolved as git does, against
    /// the including file's directory) and where links on the way lead.
    /// git reads each as its own config.
    pub(crate) fn included_configs(&mut self, top: &Path) -> Vec<PathBuf> {
        if let Some(known) = self.included.get(top) {
            return known.clone();
        }
        let mut out = Vec::new();
        for gitdir in self.git_dirs_of(top) {
            if gitdir.is_absolute() {
                continue;
            }
            let mut configs = vec![gitdir.join("config"), gitdir.join("config.worktree")];
            if let Some(common) = self.common_dir(&gitdir) {
                configs.push(common.join("config"));
            }
            for c in configs {
                self.includes(&c, 0, &mut out);
            }
        }
        out.sort();
        out.dedup();
        self.included.insert(top.to_path_buf(), out.clone());
        out
    }

    /// Every file the config file `path` includes, named (lexically, with
    /// `..` folded) and resolved, into `out`; then theirs.
    fn includes(&self, path: &Path, depth: usize, out: &mut Vec<PathBuf>) {
        if depth > INCLUDE_DEPTH {
            return;
        }
        let Some(text) = self.read(path) else { return };
        for (sec, k, value) in parse_config(&text) {
            let include = (sec == "include" || sec.starts_with("includeif")) && k == "path";
            if !include {
                continue;
            }
            let dir = path.parent().unwrap_or(Path::new(""));
            for inc in self.expand(dir, &value) {
                let Some(inc) = self.inside(&inc) else {
                    continue;
                };
                if let Some(named) = fold(&inc) {
                    out.push(named);
                }
                if let Resolved::Inside(p) = self.view.walk(Path::new(""), &inc, true).end {
                    out.push(p);
                }
                self.includes(&inc, depth + 1, out);
            }
        }
    }

    /// Where a path-valued setting `value` of a work-tree git file (an
    /// include's path, a hooks directory) sends git, from the directory
    /// `dir` (relative) it is taken against: relative paths of the
    /// workspace, or absolute ones (which may lie in it). As git's
    /// `interpolate_path` reads it: a leading `~/` (or a bare `~`) is the
    /// owner's home as the door passed it, never a variable read here.
    /// Broader than git where that only adds flags: `~user/` is taken
    /// against the owner's home and every directory above the workspace
    /// and the workspace itself (any of them may be that user's home, and
    /// the user database is not the sandbox's to name), and `$HOME/`
    /// (`${HOME}/`), which git leaves as written, is taken both as written
    /// and as the home.
    fn expand(&self, dir: &Path, value: &str) -> Vec<PathBuf> {
        let mut out = Vec::new();
        let home = self.home.map(Path::to_path_buf);
        if let Some(rest) = value.strip_prefix('~') {
            let (user, tail) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
            let tail = tail.trim_start_matches('/');
            let mut homes: Vec<PathBuf> = home.into_iter().collect();
            if !user.is_empty() {
                homes.extend(self.view.workspace.ancestors().map(Path::to_path_buf));
            }
            for h in homes {
                out.push(if tail.is_empty() { h } else { h.join(tail) });
            }
            return out;
        }
        for var in ["$HOME", "${HOME}"] {
            let rest = value
                .strip_prefix(var)
                .filter(|r| r.is_empty() || r.starts_with('/'));
            if let (Some(rest), Some(h)) = (rest, &home) {
                let tail = rest.trim_start_matches('/');
                out.push(if tail.is_empty() {
                    h.clone()
                } else {
                    h.join(tail)
                });
            }
        }
        let p = Path::new(value);
        out.push(if p.is_absolute() {
            p.to_path_buf()
        } else {
            dir.join(p)
        });
        out
    }

    /// `p` as a path relative to the workspace: itself when relative, the
    /// rest below the workspace when absolute (as written, else with `.`
    /// and `..` folded); `None` for a host path outside the workspace.
    fn inside(&self, p: &Path) -> Option<PathBuf> {
        if !p.is_absolute() {
            return Some(p.to_path_buf());
        }
        if let Ok(rel) = p.strip_prefix(self.view.workspace) {
            return Some(rel.to_path_buf());
        }
        let folded = fold_absolute(p)?;
        folded
            .strip_prefix(self.view.workspace)
            .ok()
            .map(Path::to_path_buf)
    }

    fn common_dir(&self, gitdir: &Path) -> Option<PathBuf> {
        let text = self.read(&gitdir.join("commondir"))?;
        let named = PathBuf::from(text.trim_end_matches(['\n', '\r']));
        if gitdir.is_absolute() {
            return Some(gitdir.join(named));
        }
        match self.view.walk(gitdir, &named, true).end {
            Resolved::Inside(p) | Resolved::Outside(p) => Some(p),
            Resolved::Nowhere => None,
        }
    }

    /// A regular file of the view at `path` (relative to the workspace).
    /// An absolute path, or one that leads out of the workspace, reads as
    /// nothing: it was named by a file the sandbox can write.
    fn read(&self, path: &Path) -> Option<String> {
        if path.is_absolute() {
            return None;
        }
        match self.view.walk(Path::new(""), path, true).end {
            Resolved::Inside(p) => {
                let node = self.view.lookup(&p)?;
                node.is_file()
                    .then(|| node.open().and_then(read_from))
                    .flatten()
            }
            Resolved::Outside(_) | Resolved::Nowhere => None,
        }
    }

    /// Every value of `section.key` in the config file `path` and the files
    /// it includes (`include.path`, and `includeIf.*.path` whatever its
    /// condition: a condition that does not hold today may hold tomorrow).
    fn config_values(
        &self,
        path: &Path,
        section: &str,
        key: &str,
        depth: usize,
        out: &mut Vec<String>,
    ) {
        if depth > INCLUDE_DEPTH {
            return;
        }
        let Some(text) = self.read(path) else { return };
        for (sec, k, value) in parse_config(&text) {
            let include = (sec == "include" || sec.starts_with("includeif")) && k == "path";
            if include {
                let dir = path.parent().unwrap_or(Path::new(""));
                for inc in self.expand(dir, &value) {
                    if let Some(inc) = self.inside(&inc) {
                        self.config_values(&inc, section, key, depth + 1, out);
                    }
                }
            } else if sec == section && k == key {
                out.push(value);
            }
        }
    }
}

/// `path` with `.` and `..` folded lexically, as git folds an include's
/// path; `None` when it climbs above the workspace.
fn fold(path: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            std::path::Component::Normal(n) => out.push(n),
            std::path::Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            std::path::Component::CurDir => {}
            _ => return None,
        }
    }
    Some(out)
}

/// Every `core.hooksPath` that the host's git config file `config` (a
/// global or system one: `~/.gitconfig`, `~/.config/git/config`,
/// `/etc/gitconfig`) and the files it includes set; `home` expands `~/`.
/// A front door reads these and hands them to a diff
/// ([`crate::DiffOptions::host_hooks_paths`]): a relative value there
/// sends git to that directory of every repository's work tree.
pub fn host_hooks_paths(config: &Path, home: Option<&Path>) -> Vec<String> {
    fn walk(path: &Path, home: Option<&Path>, depth: usize, out: &mut Vec<String>) {
        if depth > INCLUDE_DEPTH {
            return;
        }
        let Some(text) = read_limited(path) else {
            return;
        };
        for (sec, k, value) in parse_config(&text) {
            let include = (sec == "include" || sec.starts_with("includeif")) && k == "path";
            if include {
                let inc = match (value.strip_prefix("~/"), home) {
                    (Some(rest), Some(h)) => h.join(rest),
                    (Some(_), None) => continue,
                    (None, _) => path.parent().unwrap_or(Path::new("/")).join(&value),
                };
                walk(&inc, home, depth + 1, out);
            } else if sec == "core" && k == "hookspath" {
                match (value.strip_prefix("~/"), home) {
                    (Some(rest), Some(h)) => out.push(h.join(rest).to_string_lossy().into_owned()),
                    _ => out.push(value),
                }
            }
        }
    }
    let mut out = Vec::new();
    walk(config, home, 0, &mut out);
    out
}

/// Every file the host's git config file `config` (global or system)
/// includes (`include.path`, `includeIf.*.path` whatever its condition),
/// and the files those include, to git's depth: as host paths, `~/`
/// expanded with `home` and a relative path taken against the including
/// file's directory, as git does; each both as named (`.` and `..`
/// folded) and, when its directory exists, with links resolved. A front
/// door reads these and hands them to a diff
/// ([`crate::DiffOptions::host_git_includes`]): one that lies in the
/// workspace is a file the sandbox can write and git obeys as config.
pub fn host_config_includes(config: &Path, home: Option<&Path>) -> Vec<PathBuf> {
    fn walk(path: &Path, home: Option<&Path>, depth: usize, out: &mut Vec<PathBuf>) {
        if depth >= INCLUDE_DEPTH {
            return;
        }
        let Some(text) = read_limited(path) else {
            return;
        };
        for (sec, k, value) in parse_config(&text) {
            let include = (sec == "include" || sec.starts_with("includeif")) && k == "path";
            if !include {
                continue;
            }
            let inc = match (value.strip_prefix("~/"), home) {
                (Some(rest), Some(h)) => h.join(rest),
                (Some(_), None) => continue,
                (None, _) if value.starts_with('~') => continue,
                (None, _) => path.parent().unwrap_or(Path::new("/")).join(&value),
            };
            let Some(inc) = fold_absolute(&inc) else {
                continue;
            };
            if let (Some(dir), Some(name)) = (inc.parent(), inc.file_name()) {
                if let Ok(real) = std::fs::canonicalize(dir) {
                    let real = real.join(name);
                    if real != inc {
                        out.push(real);
                    }
                }
            }
            out.push(inc.clone());
            walk(&inc, home, depth + 1, out);
        }
    }
    let mut out = Vec::new();
    walk(config, home, 0, &mut out);
    out.sort();
    out.dedup();
    out
}

/// An absolute `path` with `.` and `..` folded lexically; `None` when it
/// is not absolute.
fn fold_absolute(path: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::from("/");
    for c in path.components() {
        match c {
            std::path::Component::RootDir => {}
            std::path::Component::Normal(n) => out.push(n),
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            std::path::Component::Prefix(_) => return None,
        }
    }
    path.is_absolute().then_some(out)
}

/// A host git config file of the owner's (global or system, or a file it
/// includes), read only when it is a regular file. It is first found
/// with `O_PATH` (which opens nothing: a FIFO cannot hold the caller, a
/// device's open never acts), judged by `fstat` of that descriptor, and
/// only then opened for reading through it, so the inode read is the one
/// judged.
fn read_limited(path: &Path) -> Option<String> {
    use rustix::fs::{FileType, Mode, OFlags};
    let found = rustix::fs::open(path, OFlags::PATH | OFlags::CLOEXEC, Mode::empty()).ok()?;
    let st = rustix::fs::fstat(&found).ok()?;
    if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
        return None;
    }
    let again = crate::beneath::at_path(&found, std::ffi::OsStr::new("."));
    let fd = rustix::fs::open(
        &again,
        OFlags::RDONLY | OFlags::NOCTTY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .ok()?;
    read_from(std::fs::File::from(fd))
}

/// A git file of the workspace, opened beneath its tree, read as far as
/// the limit.
fn read_from(f: std::fs::File) -> Option<String> {
    use std::io::Read;
    let mut buf = Vec::new();
    f.take(CONFIG_LIMIT).read_to_end(&mut buf).ok()?;
    Some(String::from_utf8_lossy(&buf).into_owned())
}

/// `(section, key, value)` of each setting of a git config text; section
/// and key in lower case (git compares them so), the subsection dropped
/// from the section name except for `includeIf`, whose name keeps
/// `includeif` as its prefix.
fn parse_config(text: &str) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    let mut section = String::new();
    for raw in text.lines() {
        let mut line = raw.trim();
        if line.starts_with('[') {
            let Some(end) = line.find(']') else { continue };
            let head = &line[1..end];
            let name = head
                .split(|c: char| c.is_whitespace() || c == '"' || c == '.')
                .next()
                .unwrap_or("");
            section = name.to_ascii_lowercase();
            line = line[end + 1..].trim();
            if line.is_empty() {
                continue;
            }
        }
        if line.starts_with('#') || line.starts_with(';') || line.is_empty() {
            continue;
        }
        let (k, v) = match line.split_once('=') {
            Some((k, v)) => (k.trim(), v.trim()),
            None => (line, "true"),
        };
        out.push((section.clone(), k.to_ascii_lowercase(), unquote(v)));
    }
    out
}

/// A config value without its quotes and trailing comment.
fn unquote(v: &str) -> String {
    let mut out = String::new();
    let mut quoted = false;
    let mut chars = v.chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => quoted = !quoted,
            '\\' => {
                if let Some(n) = chars.next() {
                    out.push(match n {
                        'n' => '\n',
                        't' => '\t',
                        other => other,
                    });
                }
            }
            '#' | ';' if !quoted => break,
            c => out.push(c),
        }
    }
    out.trim().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_values_are_found_whatever_the_case_quotes_and_comments() {
        let text = "[core]\n\tbare = false\n[CORE]\n  HooksPath = \"tools/hooks\" ; here\n[include]\n\tpath = x.cfg\n[includeIf \"gitdir:/a/\"]\n\tpath = y.cfg\n";
        let got = parse_config(text);
        assert!(got.contains(&("core".into(), "hookspath".into(), "tools/hooks".into())));
        assert!(got.contains(&("include".into(), "path".into(), "x.cfg".into())));
        assert!(got.contains(&("includeif".into(), "path".into(), "y.cfg".into())));
    }
}
