//! Changes the host's tools reach through a symbolic link: a file written
//! behind a link at a tool's path (the owner's `.vscode ->
//! editor/vscode`, and the sandbox edits `editor/vscode/tasks.json`) is
//! what the editor reads as `.vscode/tasks.json`, so it is judged by that
//! name as well as its own. `judge` asks this module for the names; it
//! only reads the view.
//!
//! Which links are known: every link of the tree when the diff followed
//! them all already (it does when a change is a link or a new directory,
//! see `judge::links`), else the links standing at a row's own path at
//! the top of the workspace (`.vscode`, `.git/hooks`, `.claude`, ...),
//! which a few lookups find. A link at a row's path in a nested
//! directory, in a diff with no link and no new directory, is not seen.

use crate::change::{Change, Flag};
use crate::view::{Resolved, View};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The links known to this diff, by the path their chain ends at.
pub(crate) struct Behind {
    by_end: BTreeMap<PathBuf, Vec<PathBuf>>,
}

impl Behind {
    /// `ends`: every link of the tree by where it ends, when the diff
    /// read them all.
    pub(crate) fn new(after: &View<'_>, ends: Option<BTreeMap<PathBuf, Vec<PathBuf>>>) -> Behind {
        if let Some(by_end) = ends {
            return Behind { by_end };
        }
        let mut by_end: BTreeMap<PathBuf, Vec<PathBuf>> = BTreeMap::new();
        for row in crate::flags::row_paths() {
            let mut at = PathBuf::new();
            for comp in Path::new(row).components() {
                at.push(comp);
                let Some(node) = after.lookup(&at) else { break };
                if node.is_symlink() {
                    if let Resolved::Inside(end) = after.follow_link(&at).end {
                        let links = by_end.entry(end).or_default();
                        if !links.contains(&at) {
                            links.push(at.clone());
                        }
                    }
                    break;
                }
                if !node.is_dir() {
                    break;
                }
            }
        }
        Behind { by_end }
    }

    /// Every link known, by where its chain ends.
    pub(crate) fn ends(&self) -> &BTreeMap<PathBuf, Vec<PathBuf>> {
        &self.by_end
    }

    /// Flags of `c` by the names links give it: each row of git, CI or
    /// the host's tools such a name falls under.
    pub(crate) fn flags(&self, c: &Change) -> Vec<Flag> {
        let mut out = Vec::new();
        if self.by_end.is_empty() {
            return out;
        }
        for path in c.paths() {
            for end in path.ancestors() {
                let Some(links) = self.by_end.get(end) else {
                    continue;
                };
                let rest = path.strip_prefix(end).unwrap_or(path);
                for link in links {
                    let name = if rest.as_os_str().is_empty() {
                        link.clone()
                    } else {
                        link.join(rest)
                    };
                    if name == path {
                        continue;
                    }
                    for (rule, reason) in crate::flags::reached(&name) {
                        out.push(Flag {
                            rule,
                            reason: format!(
                                "read as {} through the symbolic link {}: {reason}",
                                crate::printable_path(&name),
                                crate::printable_path(link)
                            ),
                            findings: Vec::new(),
                        });
                    }
                }
            }
        }
        out
    }
}
