//! A path resolved the way the kernel will resolve it, one component at a
//! time, with every symbolic link met on the way: what the checks of the
//! owner's files and of a secret's program compare against the places a
//! token may write (a link anywhere on the way is a place too).

use std::collections::VecDeque;
use std::ffi::OsString;
use std::path::{Component, Path, PathBuf};

/// Links followed in one path before giving up (the kernel's own bound).
const MAX_LINKS: usize = 40;

/// Resolve absolute `p` one component at a time: its real path (the part
/// that does not exist taken as written) and the real path of every
/// symbolic link met on the way.
pub(crate) fn walk(p: &Path) -> (PathBuf, Vec<PathBuf>) {
    let mut links = Vec::new();
    let mut pending: VecDeque<OsString> = parts(p);
    let mut cur = PathBuf::from("/");
    let mut followed = 0;
    while let Some(part) = pending.pop_front() {
        if part == ".." {
            cur.pop();
            continue;
        }
        let next = cur.join(&part);
        let link = std::fs::symlink_metadata(&next).is_ok_and(|m| m.file_type().is_symlink());
        let target = link
            .then(|| std::fs::read_link(&next).ok())
            .flatten()
            .filter(|_| followed < MAX_LINKS);
        match target {
            Some(t) => {
                followed += 1;
                links.push(next);
                if t.is_absolute() {
                    cur = PathBuf::from("/");
                }
                for q in parts(&t).into_iter().rev() {
                    pending.push_front(q);
                }
            }
            None => cur = next,
        }
    }
    (cur, links)
}

/// The named components of `p` (`.` dropped, `..` kept).
fn parts(p: &Path) -> VecDeque<OsString> {
    p.components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_os_string()),
            Component::ParentDir => Some(OsString::from("..")),
            _ => None,
        })
        .collect()
}
