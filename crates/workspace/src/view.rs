//! The workspace as the host will see it after a commit: the upper layer
//! over the real tree (whiteouts hide, opaque directories hide what is
//! below them), read entry by entry without ever letting the kernel follow
//! a link; and the resolution of paths through that view, following every
//! symbolic link of the layer and of the real tree the way the kernel would
//! on the host. Both trees are read beneath their descriptors
//! ([`crate::beneath`]): resolving a link here is warden's own arithmetic
//! on link texts, never the kernel following a link the sandbox made.
//!
//! This module only reads. Judging what a resolution means is `judge`'s
//! work.

use crate::beneath::{file_type, Tree};
use crate::overlay;
use rustix::fs::{FileType, Stat};
use std::collections::VecDeque;
use std::ffi::OsString;
use std::fs::File;
use std::path::{Component, Path, PathBuf};

/// How many links one resolution follows before it gives up, as the
/// kernel does (ELOOP after 40).
const MAX_LINKS: usize = 40;

/// Which tree to read.
#[derive(Clone, Copy)]
pub(crate) struct View<'a> {
    /// The sandbox's layer, when it is part of the view.
    upper: Option<&'a Tree>,
    /// The real workspace, when it is part of the view.
    lower: Option<&'a Tree>,
    /// The upper is an overlay layer (whiteouts, opaque marks) rather than
    /// a full copy.
    overlay: bool,
    /// The real workspace's absolute path on the host: absolute link
    /// targets below it land in the workspace.
    pub(crate) workspace: &'a Path,
}

/// One entry of a view: the tree it lives in (the layer or the real
/// tree), its path there, and what `lstat` saw.
pub(crate) struct Node<'a> {
    tree: &'a Tree,
    rel: PathBuf,
    st: Stat,
}

impl Node<'_> {
    pub(crate) fn is_dir(&self) -> bool {
        file_type(&self.st) == FileType::Directory
    }
    pub(crate) fn is_file(&self) -> bool {
        file_type(&self.st) == FileType::RegularFile
    }
    pub(crate) fn is_symlink(&self) -> bool {
        file_type(&self.st) == FileType::Symlink
    }
    /// The link's text.
    pub(crate) fn read_link(&self) -> Option<PathBuf> {
        self.tree.read_link(&self.rel).ok()
    }
    /// The regular file, opened beneath its tree.
    pub(crate) fn open(&self) -> Option<File> {
        self.tree.file(&self.rel).ok()
    }
}

/// Where a path leads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Resolved {
    /// To this path of the workspace (relative; it may not exist).
    Inside(PathBuf),
    /// Out of the workspace, to this host path (as far as it was followed).
    Outside(PathBuf),
    /// Nowhere the host could reach: a missing directory on the way, or too
    /// many links (ELOOP).
    Nowhere,
}

/// A resolution, the links it went through and the directories it
/// entered (relative paths).
pub(crate) struct Walk {
    pub(crate) end: Resolved,
    pub(crate) links: Vec<PathBuf>,
    pub(crate) dirs: Vec<PathBuf>,
}

impl<'a> View<'a> {
    /// The layer over the real tree (an overlay layer, or a full copy that
    /// replaces the real tree).
    pub(crate) fn merged(
        upper: &'a Tree,
        lower: &'a Tree,
        overlay: bool,
        workspace: &'a Path,
    ) -> View<'a> {
        View {
            upper: Some(upper),
            lower: overlay.then_some(lower),
            overlay,
            workspace,
        }
    }

    /// The real tree alone, as it is before the commit.
    pub(crate) fn real(lower: &'a Tree, workspace: &'a Path) -> View<'a> {
        View {
            upper: None,
            lower: Some(lower),
            overlay: false,
            workspace,
        }
    }

    /// The entry at `rel` (no link followed, not even in its directories:
    /// a link on the way means no entry), or `None`.
    pub(crate) fn lookup(&self, rel: &Path) -> Option<Node<'a>> {
        let mut in_upper = self.upper.is_some();
        let mut lower_visible = self.lower.is_some();
        let mut prefix = PathBuf::new();
        let mut found: Option<Node<'a>> = None;
        for c in rel.components() {
            let Component::Normal(name) = c else {
                return None;
            };
            if let Some(prev) = &found {
                if !prev.is_dir() {
                    return None;
                }
            }
            prefix.push(name);
            let upper_entry = match (in_upper, self.upper) {
                (true, Some(u)) => u.lstat(&prefix).ok().flatten().map(|st| (u, st)),
                _ => None,
            };
            if let Some((u, st)) = upper_entry {
                if self.overlay && overlay::is_whiteout_at(u, &prefix, &st) {
                    return None;
                }
                let is_dir = file_type(&st) == FileType::Directory;
                lower_visible =
                    lower_visible && is_dir && !(self.overlay && overlay::is_opaque_at(u, &prefix));
                in_upper = is_dir;
                found = Some(Node {
                    tree: u,
                    rel: prefix.clone(),
                    st,
                });
                continue;
            }
            in_upper = false;
            match (lower_visible, self.lower) {
                (true, Some(l)) => {
                    let st = l.lstat(&prefix).ok().flatten()?;
                    found = Some(Node {
                        tree: l,
                        rel: prefix.clone(),
                        st,
                    });
                }
                _ => return None,
            }
        }
        found
    }

    /// Every symbolic link of the view, by one walk of its trees (one
    /// `lstat` per entry).
    pub(crate) fn links(&self) -> Vec<PathBuf> {
        let mut out = Vec::new();
        crate::fsutil::deep_stack(|| {
            self.links_below(
                Path::new(""),
                self.upper.is_some(),
                self.lower.is_some(),
                &mut out,
            )
        });
        out
    }

    fn links_below(&self, rel: &Path, up: bool, low: bool, out: &mut Vec<PathBuf>) {
        let mut names = std::collections::BTreeSet::new();
        for (on, tree) in [(up, self.upper), (low, self.lower)] {
            if let (true, Some(tree)) = (on, tree) {
                if let Ok(found) = tree.names(rel) {
                    names.extend(found);
                }
            }
        }
        let is = |st: &Stat, t: FileType| file_type(st) == t;
        for name in names {
            let r = rel.join(&name);
            let in_upper = match (up, self.upper) {
                (true, Some(u)) => u.lstat(&r).ok().flatten().map(|st| (u, st)),
                _ => None,
            };
            if let Some((u, st)) = in_upper {
                if self.overlay && overlay::is_whiteout_at(u, &r, &st) {
                    continue;
                }
                if is(&st, FileType::Symlink) {
                    out.push(r);
                } else if is(&st, FileType::Directory) {
                    let below = low
                        && !(self.overlay && overlay::is_opaque_at(u, &r))
                        && self.lower.is_some_and(|l| {
                            l.lstat(&r)
                                .ok()
                                .flatten()
                                .is_some_and(|st| is(&st, FileType::Directory))
                        });
                    self.links_below(&r, true, below, out);
                }
                continue;
            }
            if let (true, Some(l)) = (low, self.lower) {
                if let Ok(Some(st)) = l.lstat(&r) {
                    if is(&st, FileType::Symlink) {
                        out.push(r);
                    } else if is(&st, FileType::Directory) {
                        self.links_below(&r, false, true, out);
                    }
                }
            }
        }
    }

    /// Where the symbolic link at `link` leads.
    pub(crate) fn follow_link(&self, link: &Path) -> Walk {
        let dir = link.parent().unwrap_or(Path::new(""));
        let target = self.lookup(link).and_then(|n| n.read_link());
        match target {
            Some(t) => {
                let mut w = self.walk(dir, &t, true);
                w.links.insert(0, link.to_path_buf());
                w
            }
            None => Walk {
                end: Resolved::Nowhere,
                links: Vec::new(),
                dirs: Vec::new(),
            },
        }
    }

    /// Where `path` leads from the directory `dir` (both relative to the
    /// workspace; `path` may be absolute), following every link, the last
    /// component's too when `follow_last`.
    pub(crate) fn walk(&self, dir: &Path, path: &Path, follow_last: bool) -> Walk {
        let mut links = Vec::new();
        let mut dirs = Vec::new();
        let mut here: Vec<OsString> = dir
            .components()
            .filter_map(|c| match c {
                Component::Normal(n) => Some(n.to_os_string()),
                _ => None,
            })
            .collect();
        let mut todo: VecDeque<OsString> = VecDeque::new();
        if let Err(end) = self.enter(path, &mut here, &mut todo) {
            return Walk { end, links, dirs };
        }
        let mut followed = 0;
        while let Some(name) = todo.pop_front() {
            if name == ".." {
                if here.pop().is_none() {
                    let mut out = self.workspace.to_path_buf();
                    out.pop();
                    return Walk {
                        end: Resolved::Outside(out),
                        links,
                        dirs,
                    };
                }
                continue;
            }
            let rel: PathBuf = here.iter().chain(std::iter::once(&name)).collect();
            let last = todo.is_empty();
            let Some(node) = self.lookup(&rel) else {
                // Missing: a last component may be created; anything below
                // a missing directory cannot be reached.
                return Walk {
                    end: if last {
                        Resolved::Inside(rel)
                    } else {
                        Resolved::Nowhere
                    },
                    links,
                    dirs,
                };
            };
            if node.is_symlink() && (follow_last || !last) {
                followed += 1;
                if followed > MAX_LINKS {
                    return Walk {
                        end: Resolved::Nowhere,
                        links,
                        dirs,
                    };
                }
                let Some(target) = node.read_link() else {
                    return Walk {
                        end: Resolved::Nowhere,
                        links,
                        dirs,
                    };
                };
                links.push(rel);
                let mut rest = std::mem::take(&mut todo);
                if let Err(end) = self.enter(&target, &mut here, &mut todo) {
                    return Walk { end, links, dirs };
                }
                todo.append(&mut rest);
                continue;
            }
            if !last && !node.is_dir() {
                return Walk {
                    end: Resolved::Nowhere,
                    links,
                    dirs,
                };
            }
            if node.is_dir() {
                dirs.push(rel);
            }
            here.push(name);
        }
        Walk {
            end: Resolved::Inside(here.iter().collect()),
            links,
            dirs,
        }
    }

    /// Start resolving `path`: an absolute path restarts at the top of the
    /// workspace when it lies below it, and leaves it otherwise.
    fn enter(
        &self,
        path: &Path,
        here: &mut Vec<OsString>,
        todo: &mut VecDeque<OsString>,
    ) -> Result<(), Resolved> {
        let rest = if path.is_absolute() {
            // Below the workspace only when its own components come first,
            // literally: `/ws/a/../..` is resolved step by step below, and
            // a path that reaches the workspace any other way is outside.
            let mut comps = path.components().filter(|c| *c != Component::CurDir);
            let inside = self.workspace.components().all(|w| comps.next() == Some(w));
            if !inside {
                return Err(Resolved::Outside(path.to_path_buf()));
            }
            here.clear();
            comps.collect::<PathBuf>()
        } else {
            path.to_path_buf()
        };
        for c in rest.components() {
            match c {
                Component::Normal(n) => todo.push_back(n.to_os_string()),
                Component::ParentDir => todo.push_back("..".into()),
                _ => {}
            }
        }
        Ok(())
    }
}
