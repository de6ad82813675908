//! Hard links through the copy that writes a sandbox's kept state back
//! (its layer, a named sandbox's home) and restores it: every name of a
//! file with several comes back as a link to one copy, however many such
//! files are waiting for their other names at once. Before, past 256 of
//! them every further name was written as a file of its own, so a
//! sandbox could make the write-back of a `--disk` layer write many times
//! `--disk` to the host's disk.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// A scratch directory removed when the test ends, passed or failed (its
/// trees hold hundreds of megabytes).
fn scratch(tag: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("warden-layer-links-{tag}-"))
        .tempdir()
        .unwrap()
}

/// The blocks of every inode under `dir`, each inode once.
fn disk_used(dir: &Path, seen: &mut std::collections::HashSet<u64>) -> u64 {
    let mut total = 0;
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let md = std::fs::symlink_metadata(e.path()).unwrap();
        if seen.insert(md.ino()) {
            total += md.blocks() * 512;
        }
        if md.is_dir() {
            total += disk_used(&e.path(), seen);
        }
    }
    total
}

const FILES: usize = 600;

#[test]
fn a_write_back_and_a_restore_keep_every_hard_link_of_six_hundred_files_waiting_at_once() {
    let scratch = scratch("many");
    let dir = scratch.path();
    let live = dir.join("live");
    for d in ["a", "b", "c/deep", "x/y"] {
        std::fs::create_dir_all(live.join(d)).unwrap();
    }
    // Every file's first name in `a`, its others in `b` and `c/deep`:
    // all 600 wait for their other names while `a` is copied.
    for i in 0..FILES {
        let first = live.join(format!("a/f{i}"));
        std::fs::write(&first, vec![i as u8; 8192]).unwrap();
        std::fs::hard_link(&first, live.join(format!("b/f{i}"))).unwrap();
        std::fs::hard_link(&first, live.join(format!("c/deep/f{i}"))).unwrap();
    }
    // One larger file at the top with 40 more names below.
    std::fs::write(live.join("big"), vec![7u8; 4 << 20]).unwrap();
    for i in 0..40 {
        std::fs::hard_link(live.join("big"), live.join(format!("x/y/l{i}"))).unwrap();
    }
    let saved = dir.join("saved");
    std::fs::create_dir(&saved).unwrap();
    warden_jail::layer::save(&live, &saved).unwrap();
    let restored = dir.join("restored");
    warden_jail::layer::copy_layer(&saved, &restored, false).unwrap();
    let source = disk_used(&live, &mut Default::default());
    for tree in [&saved, &restored] {
        for i in 0..FILES {
            let first = std::fs::metadata(tree.join(format!("a/f{i}"))).unwrap();
            assert_eq!(first.nlink(), 3, "{}: a/f{i}", tree.display());
            for other in [format!("b/f{i}"), format!("c/deep/f{i}")] {
                let md = std::fs::metadata(tree.join(&other)).unwrap();
                assert_eq!(md.ino(), first.ino(), "{}: {other}", tree.display());
            }
        }
        let big = std::fs::metadata(tree.join("big")).unwrap();
        assert_eq!(big.nlink(), 41);
        assert_eq!(
            std::fs::metadata(tree.join("x/y/l39")).unwrap().ino(),
            big.ino()
        );
        assert_eq!(
            std::fs::read(tree.join("x/y/l0")).unwrap(),
            vec![7u8; 4 << 20]
        );
        // What the copy holds is what the source holds, not a file a name.
        let used = disk_used(tree, &mut Default::default());
        assert!(
            used <= source + (1 << 20),
            "{used} for a source of {source}"
        );
    }
    warden_workspace::fsutil::remove_tree(dir).unwrap();
}
