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
    assert_eq!(fsutil::tree_bytes(dir.path()), Some((3 << 30) + 5));
    assert_eq!(fsutil::tree_size(dir.path()), (3 << 30) + 5);
}

#[test]
fn a_chain_of_thirty_thousand_directories_is_measured_and_removed_whole() {
    let dir = TempDir::new("deep-chain");
    let top = dir.path().join("vol");
    std::fs::create_dir(&top).unwrap();
    let deep = chain(&top, "d", 30_000);
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
    assert_eq!(fsutil::tree_bytes(&top), Some(10));
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
    assert_eq!(fsutil::tree_size(dir.path()), 4096);
}
