//! Trees deeper than any path or stack, as a sandbox can make them (each
//! level one `mkdirat` beneath the last descriptor): the host-side
//! walkers measure and remove them whole, from descriptor to descriptor,
//! and never take what lies below PATH_MAX as empty.

use crate::common::TempDir;
use rustix::fs::{mkdirat, openat, Mode, OFlags};
use std::os::fd::OwnedFd;
use std::path::Path;
use warden_workspace::fsutil;

/// Make `levels` nested directories named `name` below `top`, and answer
/// the deepest one's descriptor.
fn chain(top: &Path, name: &str, levels: usize) -> OwnedFd {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let mut fd = openat(rustix::fs::CWD, top, flags, Mode::empty()).unwrap();
    for _ in 0..levels {
        mkdirat(&fd, name, Mode::from_raw_mode(0o755)).unwrap();
        fd = openat(&fd, name, flags, Mode::empty()).unwrap();
    }
    fd
}

#[test]
fn a_file_below_a_path_longer_than_path_max_is_counted() {
    let dir = TempDir::new("deep-size");
    // 20 levels of 250 characters: about 5,000 bytes of path.
    let deep = chain(dir.path(), &"a".repeat(250), 20);
    let big = openat(
        &deep,
        "big",
        OFlags::WRONLY | OFlags::CREATE | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o644),
    )
    .unwrap();
    // Sparse: its size is what a quota reads.
    rustix::fs::ftruncate(&big, 3 << 30).unwrap();
    std::fs::write(dir.path().join("top"), b"12345").unwrap();
    // Every entry costs at least a block: 20 directories, `top`, and
    // `big` counted whole.
    let measured = fsutil::tree_bytes(dir.path()).unwrap();
    assert!(
        measured >= (3 << 30) + 21 * fsutil::ENTRY_BYTES,
        "{measured}"
    );
    assert_eq!(fsutil::tree_size(dir.path()), measured);
}

#[test]
fn a_chain_of_three_thousand_directories_is_measured_and_removed_whole() {
    let dir = TempDir::new("deep-chain");
    let top = dir.path().join("vol");
    std::fs::create_dir(&top).unwrap();
    let deep = chain(&top, "d", 3_000);
    let f = openat(
        &deep,
        "f",
        OFlags::WRONLY | OFlags::CREATE | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o644),
    )
    .unwrap();
    rustix::io::write(&f, b"0123456789").unwrap();
    drop((f, deep));
    // On this test's own (small) stack: nothing of the walk recurses.
    let measured = fsutil::tree_bytes(&top).unwrap();
    assert!(measured >= 3_001 * fsutil::ENTRY_BYTES, "{measured}");
    fsutil::remove_tree(&top).unwrap();
    assert!(!top.exists());
}

#[test]
fn a_tree_that_cannot_be_read_counts_as_unmeasurable_not_as_empty() {
    if rustix::process::geteuid().is_root() {
        eprintln!("skipped: root reads a directory of mode 000");
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let dir = TempDir::new("deep-unreadable");
    let shut = dir.path().join("shut");
    std::fs::create_dir(&shut).unwrap();
    std::fs::write(shut.join("hidden"), vec![0u8; 4096]).unwrap();
    std::fs::set_permissions(&shut, std::fs::Permissions::from_mode(0o000)).unwrap();
    let measured = fsutil::tree_bytes(dir.path());
    std::fs::set_permissions(&shut, std::fs::Permissions::from_mode(0o700)).unwrap();
    assert_eq!(measured, None);
    let readable = fsutil::tree_size(dir.path());
    assert!(
        (2 * fsutil::ENTRY_BYTES..u64::MAX).contains(&readable),
        "{readable}"
    );
}

#[test]
fn empty_files_directories_and_long_names_each_cost_at_least_a_block_and_their_name() {
    let dir = TempDir::new("deep-empty");
    let long = "n".repeat(240);
    for i in 0..100 {
        std::fs::write(dir.path().join(format!("{long}{i:03}")), b"").unwrap();
        std::fs::create_dir(dir.path().join(format!("d{i:03}"))).unwrap();
    }
    std::os::unix::fs::symlink("/nowhere", dir.path().join("link")).unwrap();
    let measured = fsutil::tree_size(dir.path());
    // 100 empty files with 243-byte names, 100 directories, one link: no
    // bytes of data, yet the host pays an inode, a block's worth and a
    // directory entry for each.
    let least = 201 * fsutil::ENTRY_BYTES + 100 * (8 + 243);
    assert!(
        (least..u64::MAX).contains(&measured),
        "{measured} < {least}"
    );
}

/// Follow the chain of directories `name` below `top` from descriptor to
/// descriptor: how many levels, the mode of the deepest, and what its
/// file `f` holds.
fn read_chain(top: &Path, name: &str) -> (usize, u32, Vec<u8>) {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let mut fd = openat(rustix::fs::CWD, top, flags, Mode::empty()).unwrap();
    let mut levels = 0;
    while let Ok(next) = openat(&fd, name, flags, Mode::empty()) {
        fd = next;
        levels += 1;
    }
    let mode = rustix::fs::fstat(&fd).unwrap().st_mode & 0o7777;
    let f = openat(&fd, "f", OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty()).unwrap();
    let mut buf = vec![0u8; 64];
    let n = rustix::io::read(&f, &mut buf).unwrap();
    buf.truncate(n);
    (levels, mode, buf)
}

#[test]
fn a_layer_three_thousand_directories_deep_is_snapshotted_restored_and_copied_whole() {
    use warden_workspace::saved::{copy_state, StateOf};
    use warden_workspace::{CreateOptions, Store};
    let state = TempDir::new("deep-snap-state");
    let real = TempDir::new("deep-snap-real");
    let store = Store::open(state.path()).unwrap();
    let sb = store
        .create("deep", &CreateOptions::new(real.path()))
        .unwrap();
    let deep = chain(&sb.upper(), "d", 3_000);
    let f = openat(
        &deep,
        "f",
        OFlags::WRONLY | OFlags::CREATE | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o640),
    )
    .unwrap();
    rustix::io::write(&f, b"the deepest file").unwrap();
    rustix::fs::fchmod(&deep, Mode::from_raw_mode(0o750)).unwrap();
    drop((f, deep));
    // On this test's own (small) stack: nothing of the copy recurses.
    let lock = sb.lock().unwrap();
    let info = lock
        .snapshot(Some("s"))
        .expect("the snapshot of a deep layer");
    let copied = sb.dir().join("snapshots/s/upper");
    assert_eq!(
        read_chain(&copied, "d"),
        (3_000, 0o750, b"the deepest file".to_vec())
    );
    // The copy priced itself as the measure of the tree does.
    assert!(info.bytes >= 3_001 * fsutil::ENTRY_BYTES, "{}", info.bytes);
    assert_eq!(info.bytes, fsutil::tree_size(&copied));
    // Restored: the layer is the snapshot's copy, whole.
    fsutil::remove_tree(&sb.upper()).unwrap();
    std::fs::create_dir(sb.upper()).unwrap();
    lock.restore("s").expect("the restore of a deep snapshot");
    assert_eq!(
        read_chain(&sb.upper(), "d"),
        (3_000, 0o750, b"the deepest file".to_vec())
    );
    drop(lock);
    // A fork's copy of the state.
    let other = store
        .create("fork", &CreateOptions::new(real.path()))
        .unwrap();
    copy_state(&StateOf::of(&sb), &other).expect("the fork of a deep layer");
    assert_eq!(
        read_chain(&other.upper(), "d"),
        (3_000, 0o750, b"the deepest file".to_vec())
    );
}
