//! A sandbox's hard links through its copies (outside review 16, finding
//! 1): code inside a sandbox makes one file with 40 more names in its
//! home and in its layer; a fork, a saved snapshot (`warden snapshots
//! create`), a layer snapshot (`warden snapshot`), a restore and a sandbox
//! made from the saved snapshot each hold the file once, its names links
//! to one inode with every name kept, never 41 copies of it on the host's
//! disk. What a copy adds to the state directory is measured by the
//! blocks each inode holds, counted once.

use crate::common::*;
use std::collections::HashSet;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// Stops (and removes) the sandboxes even when the test fails half-way.
struct Cleanup<'a>(&'a Path, Vec<&'static str>);

impl Drop for Cleanup<'_> {
    fn drop(&mut self) {
        for n in &self.1 {
            let _ = warden(self.0, &["rm", "--force", n]);
        }
        let _ = warden(self.0, &["snapshots", "rm", "kept"]);
    }
}

/// What `dir` takes on its disk: the blocks of every inode under it,
/// each inode once (as `du` counts).
fn disk_used(dir: &Path) -> u64 {
    fn walk(dir: &Path, seen: &mut HashSet<(u64, u64)>, total: &mut u64) {
        let Ok(rd) = std::fs::read_dir(dir) else {
            return;
        };
        for e in rd.flatten() {
            let Ok(md) = std::fs::symlink_metadata(e.path()) else {
                continue;
            };
            if seen.insert((md.dev(), md.ino())) {
                *total += md.blocks() * 512;
            }
            if md.is_dir() {
                walk(&e.path(), seen, total);
            }
        }
    }
    let mut total = 0;
    walk(dir, &mut HashSet::new(), &mut total);
    total
}

/// `first` and its 40 other names `{prefix}1` .. `{prefix}40` in `dir`
/// are one inode with 41 links.
fn one_inode(dir: &Path, first: &str, prefix: &str) {
    let md = std::fs::symlink_metadata(dir.join(first))
        .unwrap_or_else(|e| panic!("{}: {e}", dir.join(first).display()));
    assert_eq!(md.nlink(), 41, "{}", dir.join(first).display());
    for i in 1..=40 {
        let other = std::fs::symlink_metadata(dir.join(format!("{prefix}{i}"))).unwrap();
        assert_eq!(
            (other.dev(), other.ino()),
            (md.dev(), md.ino()),
            "{}/{prefix}{i} is not a link to {first}",
            dir.display()
        );
    }
}

const HOME_FILE: u64 = 8_000_000;
const LAYER_FILE: u64 = 4_000_000;

/// What one copy of the sandbox's home and layer may add: both files once,
/// and room for names, directories and warden's records.
const ONE_COPY: u64 = HOME_FILE + LAYER_FILE + (2 << 20);

#[test]
fn a_fork_and_snapshots_of_a_file_with_forty_links_hold_it_once_with_its_links() {
    let state = TempDir::new("hl-copies");
    let s = state.path();
    let _c = Cleanup(s, vec!["hl", "hl-fork-1", "hl-back"]);
    ok(&warden(s, &["create", "hl", "--start"]));
    ok(&warden(
        s,
        &[
            "exec",
            "hl",
            "--",
            "sh",
            "-c",
            &format!(
                "cd ~ && head -c {HOME_FILE} /dev/urandom > f && for i in $(seq 1 40); do ln f h$i; done; \
                 cd /workspace && head -c {LAYER_FILE} /dev/urandom > g && for i in $(seq 1 40); do ln g k$i; done"
            ),
        ],
    ));
    let root = s.join("warden");
    // A fork of the running sandbox: its home and layer copied once.
    let before = disk_used(&root);
    ok(&warden(s, &["fork", "hl", "--count", "1"]));
    let grown = disk_used(&root).saturating_sub(before);
    assert!(
        grown < ONE_COPY,
        "the fork added {grown} bytes to the state directory for {} bytes of files",
        HOME_FILE + LAYER_FILE
    );
    let fork = sandbox_dir(s, "hl-fork-1");
    one_inode(&fork.join("home"), "f", "h");
    one_inode(&fork.join("upper"), "g", "k");
    // The fork's sandbox sees its links as the source made them.
    let seen = ok(&warden(
        s,
        &[
            "exec",
            "hl-fork-1",
            "--",
            "sh",
            "-c",
            "stat -c %h ~/f /workspace/g; cmp ~/f ~/h40 && cmp /workspace/g /workspace/k40 && echo same",
        ],
    ));
    assert_eq!(seen, "41\n41\nsame\n");
    ok(&warden(s, &["stop", "hl-fork-1"]));

    // A saved snapshot, and a sandbox made from it.
    let before = disk_used(&root);
    ok(&warden(s, &["snapshots", "create", "hl", "kept"]));
    let grown = disk_used(&root).saturating_sub(before);
    assert!(grown < ONE_COPY, "the snapshot added {grown} bytes");
    let kept = root.join("saved/owner/kept");
    one_inode(&kept.join("home"), "f", "h");
    one_inode(&kept.join("upper"), "g", "k");
    let before = disk_used(&root);
    ok(&warden(
        s,
        &["create", "hl-back", "--from-snapshot", "kept"],
    ));
    let grown = disk_used(&root).saturating_sub(before);
    assert!(
        grown < ONE_COPY,
        "the sandbox made from it added {grown} bytes"
    );
    one_inode(&sandbox_dir(s, "hl-back").join("home"), "f", "h");
    one_inode(&sandbox_dir(s, "hl-back").join("upper"), "g", "k");

    // Stopped, its layer written back with its links; a layer snapshot
    // and a restore of it copy the file once too.
    ok(&warden(s, &["stop", "hl"]));
    let own = sandbox_dir(s, "hl");
    one_inode(&own.join("home"), "f", "h");
    one_inode(&own.join("upper"), "g", "k");
    let before = disk_used(&root);
    ok(&warden(s, &["snapshot", "hl", "l1"]));
    let grown = disk_used(&root).saturating_sub(before);
    assert!(
        grown < LAYER_FILE + (1 << 20),
        "the layer snapshot added {grown} bytes"
    );
    one_inode(&own.join("snapshots/l1/upper"), "g", "k");
    ok(&warden(s, &["restore", "hl", "l1"]));
    one_inode(&own.join("upper"), "g", "k");
    assert!(disk_used(&root) < before + LAYER_FILE + (1 << 20));
}

#[test]
fn a_tokens_snapshot_of_a_file_with_forty_links_is_charged_and_kept_as_one_file() {
    use crate::common::daemon::{json, over_tcp, worker};
    let Some((state, d)) = over_tcp("hl-token") else {
        return;
    };
    let t = worker(&d, "linker");
    let (s, b) = t("POST", "/v1/sandboxes", Some(r#"{"name":"tl"}"#));
    assert_eq!(s, 201, "{b}");
    let make = format!(
        r#"{{"shell":"cd ~ && head -c {HOME_FILE} /dev/urandom > f && for i in $(seq 1 40); do ln f h$i; done; cd /workspace && head -c {LAYER_FILE} /dev/urandom > g && for i in $(seq 1 40); do ln g k$i; done"}}"#
    );
    let (s, b) = t("POST", "/v1/sandboxes/tl/exec", Some(&make));
    assert_eq!(s, 200, "{b}");
    let (s, b) = t(
        "POST",
        "/v1/sandboxes/tl/snapshots",
        Some(r#"{"name":"hl"}"#),
    );
    assert_eq!(s, 201, "{b}");
    // What the token is charged for it: the two files once, not 41 times.
    let bytes = json(&b)["bytes"].as_u64().unwrap();
    assert!(
        (HOME_FILE + LAYER_FILE..ONE_COPY).contains(&bytes),
        "the snapshot is charged {bytes} bytes"
    );
    let kept = std::fs::read_dir(state.path().join("warden/saved"))
        .unwrap()
        .flatten()
        .map(|space| space.path().join("hl"))
        .find(|p| p.is_dir())
        .expect("the token's snapshot on disk");
    one_inode(&kept.join("home"), "f", "h");
    one_inode(&kept.join("upper"), "g", "k");
    let (s, b) = t("POST", "/v1/sandboxes/tl/fork", Some(r#"{"count":1}"#));
    assert_eq!(s, 201, "{b}");
    let fork = json(&b)["sandboxes"][0]["id"]
        .as_str()
        .expect("the fork's id")
        .to_string();
    let dir = sandbox_dir(state.path(), &fork);
    one_inode(&dir.join("home"), "f", "h");
    one_inode(&dir.join("upper"), "g", "k");
}
