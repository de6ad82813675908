//! Hard links met while one tree is copied or measured: which inode of
//! the source was copied already, and where its first copy is, so that a
//! later name of it becomes a link to that copy rather than a copy of its
//! own. Without this, a file with N names was written N times: a sandbox
//! that made 40 links to a 100 MB file turned a fork into 4 GB of the
//! host's disk.
//!
//! The map is bounded (a sandbox can make millions of links): at most
//! [`MAX_LINKED`] inodes at once and [`MAX_LINKED_BYTES`] of their copies'
//! paths; an inode is forgotten once all its names were met. Past either
//! bound an inode is not recorded, and what its names cost is the caller's
//! to count ([`crate::treecopy`] charges it against a bound and refuses
//! past it; [`crate::fsutil::tree_bytes`] counts each name in full, which
//! only ever overcharges). Nothing here touches the file system.

use rustix::fs::{FileType, Stat};
use std::collections::HashMap;
use std::ffi::OsString;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

/// The most inodes of one copy waiting for their other names.
pub const MAX_LINKED: usize = 1 << 18;

/// The most bytes of first copies' paths held at once (a path past
/// PATH_MAX is never held: it could not be opened again by its path).
pub const MAX_LINKED_BYTES: usize = 32 << 20;

/// The longest path kept for a first copy: the kernel opens no longer one.
const PATH_MAX: usize = 4095;

/// One inode met: its first copy's path (relative to the destination
/// tree) and how many of its names are still to come.
struct First {
    path: Box<[u8]>,
    left: u64,
}

/// The inodes of one copy (or one measure) with names still to come.
pub struct Links {
    map: HashMap<(u64, u64), First>,
    bytes: usize,
    max_entries: usize,
    max_bytes: usize,
}

impl Default for Links {
    fn default() -> Links {
        Links::with_bounds(MAX_LINKED, MAX_LINKED_BYTES)
    }
}

/// Whether `st` is a regular file with more than one name: the only
/// entries a copy may share (a directory's links are its own, a symbolic
/// link or a device costs no data).
pub fn shared(st: &Stat) -> bool {
    st.st_nlink > 1 && FileType::from_raw_mode(st.st_mode) == FileType::RegularFile
}

impl Links {
    /// A map holding at most `entries` inodes and `bytes` of paths.
    pub fn with_bounds(entries: usize, bytes: usize) -> Links {
        Links {
            map: HashMap::new(),
            bytes: 0,
            max_entries: entries,
            max_bytes: bytes,
        }
    }

    /// How many inodes are held now.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether none is held.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// A later name of `st`'s inode: the path of its first copy, if that
    /// was recorded. The name is counted: once the inode's last name was
    /// met, it is forgotten.
    pub fn first_copy(&mut self, st: &Stat) -> Option<PathBuf> {
        if !shared(st) {
            return None;
        }
        let key = (st.st_dev, st.st_ino);
        let first = self.map.get_mut(&key)?;
        let path = PathBuf::from(OsString::from_vec(first.path.to_vec()));
        first.left = first.left.saturating_sub(1);
        if first.left == 0 {
            self.forget(key);
        }
        Some(path)
    }

    /// Record `path` as the first copy of `st`'s inode. `false`: it was
    /// not recorded (past a bound, or a path too long to be opened again),
    /// and its later names will not be found.
    pub fn record(&mut self, st: &Stat, path: &Path) -> bool {
        if !shared(st) {
            return false;
        }
        let bytes = path.as_os_str().as_bytes();
        if bytes.len() > PATH_MAX
            || self.map.len() >= self.max_entries
            || self.bytes.saturating_add(bytes.len()) > self.max_bytes
        {
            return false;
        }
        let key = (st.st_dev, st.st_ino);
        if self.map.contains_key(&key) {
            return true;
        }
        self.bytes += bytes.len();
        self.map.insert(
            key,
            First {
                path: bytes.into(),
                left: st.st_nlink.saturating_sub(1),
            },
        );
        true
    }

    /// Whether `st`'s inode was met before (for a measure, which needs no
    /// path): counts the name as [`Links::first_copy`] does, and records a
    /// first name within the bounds. `None`: a first name not recorded.
    pub fn seen(&mut self, st: &Stat) -> Option<bool> {
        if self.first_copy(st).is_some() {
            return Some(true);
        }
        self.record(st, Path::new("")).then_some(false)
    }

    fn forget(&mut self, key: (u64, u64)) {
        if let Some(first) = self.map.remove(&key) {
            self.bytes -= first.path.len();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn stat(p: &Path) -> Stat {
        rustix::fs::lstat(p).unwrap()
    }

    fn dir(tag: &str) -> PathBuf {
        let p = std::env::temp_dir().join(format!("warden-links-{tag}-{}", std::process::id()));
        let _ = crate::fsutil::remove_tree(&p);
        fs::create_dir_all(&p).unwrap();
        p
    }

    #[test]
    fn a_later_name_finds_the_first_copy_and_the_last_name_frees_its_entry() {
        let d = dir("later");
        fs::write(d.join("f"), "x").unwrap();
        fs::hard_link(d.join("f"), d.join("g")).unwrap();
        fs::hard_link(d.join("f"), d.join("h")).unwrap();
        let st = stat(&d.join("f"));
        let mut links = Links::default();
        assert_eq!(links.first_copy(&st), None);
        assert!(links.record(&st, Path::new("a/f")));
        assert_eq!(links.first_copy(&st), Some(PathBuf::from("a/f")));
        assert_eq!(links.len(), 1);
        assert_eq!(links.first_copy(&st), Some(PathBuf::from("a/f")));
        // All three names met: nothing is held for it any more.
        assert!(links.is_empty());
        assert_eq!(links.bytes, 0);
        let _ = crate::fsutil::remove_tree(&d);
    }

    #[test]
    fn a_file_with_one_name_or_a_directory_is_never_held() {
        let d = dir("single");
        fs::write(d.join("f"), "x").unwrap();
        let mut links = Links::default();
        assert!(!links.record(&stat(&d.join("f")), Path::new("f")));
        fs::create_dir(d.join("sub")).unwrap();
        assert!(!links.record(&stat(&d.join("sub")), Path::new("sub")));
        assert!(links.is_empty());
        let _ = crate::fsutil::remove_tree(&d);
    }

    #[test]
    fn past_its_bounds_the_map_records_nothing_more() {
        let d = dir("bounds");
        let mut names = Vec::new();
        for i in 0..4 {
            let f = d.join(format!("f{i}"));
            fs::write(&f, "x").unwrap();
            fs::hard_link(&f, d.join(format!("g{i}"))).unwrap();
            names.push(stat(&f));
        }
        let mut links = Links::with_bounds(2, 1 << 20);
        assert!(links.record(&names[0], Path::new("f0")));
        assert!(links.record(&names[1], Path::new("f1")));
        assert!(!links.record(&names[2], Path::new("f2")));
        assert_eq!(links.first_copy(&names[2]), None);
        // A freed entry makes room again.
        assert!(links.first_copy(&names[0]).is_some());
        assert!(links.record(&names[3], Path::new("f3")));
        // The paths' bound: 6 bytes hold two 3-byte paths and nothing more.
        let mut small = Links::with_bounds(100, 6);
        assert!(small.record(&names[0], Path::new("abc")));
        assert!(small.record(&names[1], Path::new("def")));
        assert!(!small.record(&names[2], Path::new("g")));
        // A path the kernel could not open again is never held.
        let long = PathBuf::from("x".repeat(PATH_MAX + 1));
        assert!(!Links::default().record(&names[0], &long));
        let _ = crate::fsutil::remove_tree(&d);
    }

    #[test]
    fn a_measure_counts_an_inode_once_and_says_when_it_cannot_tell() {
        let d = dir("seen");
        fs::write(d.join("f"), "x").unwrap();
        fs::hard_link(d.join("f"), d.join("g")).unwrap();
        fs::write(d.join("o"), "y").unwrap();
        fs::hard_link(d.join("o"), d.join("p")).unwrap();
        let (f, o) = (stat(&d.join("f")), stat(&d.join("o")));
        let mut links = Links::with_bounds(1, 1 << 20);
        assert_eq!(links.seen(&f), Some(false));
        assert_eq!(links.seen(&o), None);
        assert_eq!(links.seen(&f), Some(true));
        let _ = crate::fsutil::remove_tree(&d);
    }
}
