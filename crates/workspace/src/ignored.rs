//! Which changes the workspace itself says to ignore: the patterns of its
//! `.gitignore` files and `.git/info/exclude`, read with the `ignore`
//! crate's gitignore matcher (git's own rules: the deepest file decides, a
//! `!` pattern re-includes, nothing below an ignored directory comes back).
//!
//! The patterns are read from the real workspace only, never from the
//! sandbox's layer: a sandbox that writes `*` into a `.gitignore` hides
//! nothing by it. An ignored change is still a change; front doors leave
//! it out of a review and of a commit (saying how many), and never one
//! that is flagged.
//!
//! The real workspace is written by sandboxes too (the `direct` mode, an
//! earlier commit), so its pattern files are read beneath its descriptor
//! ([`crate::beneath`]): a `.gitignore` or `.git/info/exclude` that is a
//! link, or sits below one, is not read (git does not follow a linked
//! `.gitignore` either), and neither is anything but a regular file. A
//! link can then never make the host read a file of the sandbox's
//! choosing; a pattern file left unread only shows more changes.

use crate::beneath::Tree;
use ignore::gitignore::{Gitignore, GitignoreBuilder};
use ignore::Match;
use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};

/// Pattern files read at most this far.
const PATTERNS_LIMIT: u64 = 1 << 20;

/// The matchers of one real workspace, each directory's read once.
pub(crate) struct Ignores {
    root: PathBuf,
    /// The real workspace, opened once; `None` when it cannot be.
    tree: Option<Tree>,
    /// The top level's: `.git/info/exclude`, then its `.gitignore`.
    top: Option<Gitignore>,
    /// A directory's own `.gitignore` (relative path -> matcher), `None`
    /// when it has none.
    dirs: HashMap<PathBuf, Option<Gitignore>>,
}

impl Ignores {
    /// The matchers of the real workspace recorded at `root`, read
    /// through `tree` (the diff's own descriptor of it: never `root`
    /// opened again), or none when there is no tree.
    pub(crate) fn new(root: &Path, tree: Option<Tree>) -> Ignores {
        let mut b = GitignoreBuilder::new(root);
        let mut any = false;
        for f in [".git/info/exclude", ".gitignore"] {
            // A missing or unreadable file adds nothing (git's rule); a bad
            // line is skipped.
            any |= add(&mut b, tree.as_ref(), root, Path::new(f));
        }
        let top = if any { b.build().ok() } else { None };
        Ignores {
            root: root.to_path_buf(),
            tree,
            top,
            dirs: HashMap::new(),
        }
    }

    /// The `.gitignore` of directory `rel` (not the top), read on first use.
    fn of_dir(&mut self, rel: &Path) -> Option<&Gitignore> {
        if !self.dirs.contains_key(rel) {
            let mut b = GitignoreBuilder::new(self.root.join(rel));
            let m = if add(
                &mut b,
                self.tree.as_ref(),
                &self.root,
                &rel.join(".gitignore"),
            ) {
                b.build().ok()
            } else {
                None
            };
            self.dirs.insert(rel.to_path_buf(), m);
        }
        self.dirs.get(rel).and_then(Option::as_ref)
    }

    /// What the files above `rel` say about it alone, deepest first.
    fn verdict(&mut self, rel: &Path, is_dir: bool) -> Match<()> {
        let parents: Vec<PathBuf> = rel
            .ancestors()
            .skip(1)
            .filter(|p| !p.as_os_str().is_empty())
            .map(Path::to_path_buf)
            .collect();
        let full = self.root.join(rel);
        // Deepest directory first.
        for dir in parents {
            if let Some(m) = self.of_dir(&dir) {
                match m.matched(&full, is_dir) {
                    Match::None => {}
                    Match::Ignore(_) => return Match::Ignore(()),
                    Match::Whitelist(_) => return Match::Whitelist(()),
                }
            }
        }
        match &self.top {
            Some(m) => match m.matched(&full, is_dir) {
                Match::None => Match::None,
                Match::Ignore(_) => Match::Ignore(()),
                Match::Whitelist(_) => Match::Whitelist(()),
            },
            None => Match::None,
        }
    }

    /// Whether the workspace's own patterns ignore `rel` (a path relative
    /// to the workspace): it, or a directory it is in.
    pub(crate) fn ignored(&mut self, rel: &Path, is_dir: bool) -> bool {
        // `.git` itself is git's, never a file it tracks or ignores.
        if rel
            .components()
            .next()
            .is_some_and(|c| c.as_os_str() == ".git")
        {
            return false;
        }
        let parents: Vec<PathBuf> = rel
            .ancestors()
            .skip(1)
            .filter(|p| !p.as_os_str().is_empty())
            .map(Path::to_path_buf)
            .collect();
        // Git does not look inside an ignored directory: nothing below it
        // can be re-included.
        for dir in parents.iter().rev() {
            if matches!(self.verdict(dir, true), Match::Ignore(_)) {
                return true;
            }
        }
        matches!(self.verdict(rel, is_dir), Match::Ignore(_))
    }
}

/// Add the patterns of the regular file `rel` of the real workspace, read
/// beneath it, to `b`; whether there was such a file.
fn add(b: &mut GitignoreBuilder, tree: Option<&Tree>, root: &Path, rel: &Path) -> bool {
    let Some(file) = tree.and_then(|t| t.file(rel).ok()) else {
        return false;
    };
    let mut bytes = Vec::new();
    if file.take(PATTERNS_LIMIT).read_to_end(&mut bytes).is_err() {
        return false;
    }
    let text = String::from_utf8_lossy(&bytes);
    let from = root.join(rel);
    for (i, line) in text.lines().enumerate() {
        // git skips a byte-order mark at the start of the file.
        let line = if i == 0 {
            line.trim_start_matches('\u{feff}')
        } else {
            line
        };
        let _ = b.add_line(Some(from.clone()), line);
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gitignore_rules_are_gits_own() {
        let root = std::env::temp_dir().join(format!("warden-ignored-{}", std::process::id()));
        let _ = crate::fsutil::remove_tree(&root);
        std::fs::create_dir_all(root.join("sub/deep")).unwrap();
        std::fs::create_dir_all(root.join(".git/info")).unwrap();
        std::fs::write(root.join(".gitignore"), "*.log\nbuild/\n!keep.log\n").unwrap();
        std::fs::write(root.join("sub/.gitignore"), "local.txt\n!important.log\n").unwrap();
        std::fs::write(root.join(".git/info/exclude"), "secret-notes\n").unwrap();
        let mut ig = Ignores::new(&root, Tree::real(&root).ok());
        let yes = |ig: &mut Ignores, p: &str, dir: bool| ig.ignored(Path::new(p), dir);
        assert!(yes(&mut ig, "a.log", false));
        assert!(!yes(&mut ig, "keep.log", false));
        assert!(yes(&mut ig, "build", true));
        assert!(yes(&mut ig, "build/out/x.o", false));
        assert!(yes(&mut ig, "sub/local.txt", false));
        assert!(!yes(&mut ig, "local.txt", false));
        assert!(!yes(&mut ig, "sub/important.log", false));
        assert!(yes(&mut ig, "sub/deep/x.log", false));
        assert!(yes(&mut ig, "secret-notes", false));
        assert!(!yes(&mut ig, "src/main.rs", false));
        assert!(!yes(&mut ig, ".git/hooks/pre-commit", false));
        let _ = crate::fsutil::remove_tree(&root);
    }
}
